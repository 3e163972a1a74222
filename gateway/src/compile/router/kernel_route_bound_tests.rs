use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use pipeline::pipeline::config::KernelRoute6;
use pipeline::{KernelRoute, RouteRefusal};

use super::router_config_with_kernel;
use crate::config::GatewayConfig;
use crate::control::netlink::KernelView;

const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.77.1/24"
kernel_twin = true
[interfaces.ipv6]
delegated_prefix = true
router_advertisements = true
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
kernel_twin = true
[interfaces.ipv6]
autoconfigure = true
[nat]
masquerade = ["wan"]
"#;

const UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn route(destination: [u8; 4], len: u8) -> KernelRoute {
    KernelRoute {
        destination: Ipv4Addr::from(destination),
        len,
        port: 1,
        via: Some(UPSTREAM),
    }
}

fn route6(destination: &str, len: u8) -> KernelRoute6 {
    KernelRoute6 {
        destination: destination.parse().unwrap(),
        len,
        port: 1,
        via: Some("fe80::1".parse().unwrap()),
    }
}

/// What the kernel has: a delegated prefix on the LAN's twin, a SLAAC address on the
/// WAN's, and on the WAN's twin the routes a rogue DHCP server (option 121) or router
/// would like the gateway to take, beside ordinary ones.
fn kernel() -> KernelView {
    KernelView {
        addresses6: vec![
            vec![("2001:db8:ff00:100::1".parse().unwrap(), 64)],
            vec![("2001:db8:a::ff:fe00:2".parse().unwrap(), 64)],
        ],
        routes: vec![
            route([0, 0, 0, 0], 0),
            route([192, 168, 77, 0], 25),
            route([192, 168, 0, 0], 16),
            route([198, 51, 100, 0], 24),
        ],
        routes6: vec![
            route6("::", 0),
            route6("2001:db8:ff00:100::", 64),
            route6("2001:db8:ff00:100:8000::", 80),
            route6("2001:db8:77::", 48),
        ],
        ..KernelView::default()
    }
}

fn refusals(router: &pipeline::RouterConfig) -> Vec<(String, &'static str)> {
    router
        .refused_kernel_routes
        .iter()
        .map(|refused| {
            (
                format!("{}/{}", refused.destination, refused.len),
                refused.reason.label(),
            )
        })
        .collect()
}

fn build(section: &str) -> pipeline::RouterConfig {
    let text = format!("{CONFIG}{section}");
    let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), &text).unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    router_config_with_kernel(&config, &macs, &kernel()).unwrap()
}

#[test]
fn routes_into_the_gateways_own_subnets_are_refused_whatever_the_allow_list() {
    let router = build("");
    assert_eq!(
        refusals(&router),
        [
            ("192.168.77.0/25".to_string(), "overlaps_connected"),
            ("2001:db8:ff00:100::/64".to_string(), "overlaps_connected"),
            (
                "2001:db8:ff00:100:8000::/80".to_string(),
                "overlaps_connected"
            ),
        ]
    );
    assert_eq!(
        router.refused_kernel_routes[0].reason,
        RouteRefusal::OverlapsConnected { interface: 0 }
    );
    // The LAN's hosts, both halves, stay on the LAN; the rest goes up.
    for host in [5, 200] {
        let hop = router.routes.lookup(Ipv4Addr::new(192, 168, 77, host));
        assert_eq!(hop.unwrap().port, 0);
    }
    let delegated: Ipv6Addr = "2001:db8:ff00:100:8000::9".parse().unwrap();
    assert_eq!(router.routes6.lookup(delegated).unwrap().port, 0);
    for ip in [[8, 8, 8, 8], [192, 168, 5, 5]] {
        let hop = router.routes.lookup(Ipv4Addr::from(ip)).unwrap();
        assert_eq!((hop.port, hop.gateway), (1, Some(UPSTREAM)));
    }
    let remote: Ipv6Addr = "2001:db8:77::1".parse().unwrap();
    assert_eq!(router.routes6.lookup(remote).unwrap().port, 1);
}

#[test]
fn the_allow_list_takes_only_what_lies_inside_it() {
    let router =
        build("[kernel_twins]\nroute_allow = [\"198.51.100.0/24\", \"192.168.0.0/16\", \"::/0\"]");
    assert_eq!(
        refusals(&router),
        [
            ("0.0.0.0/0".to_string(), "not_allowed"),
            // Inside an allowed prefix, yet inside the LAN: refused for that.
            ("192.168.77.0/25".to_string(), "overlaps_connected"),
            ("2001:db8:ff00:100::/64".to_string(), "overlaps_connected"),
            (
                "2001:db8:ff00:100:8000::/80".to_string(),
                "overlaps_connected"
            ),
        ]
    );
    assert!(router.routes.lookup(Ipv4Addr::new(8, 8, 8, 8)).is_none());
    assert!(router
        .routes
        .lookup(Ipv4Addr::new(198, 51, 100, 1))
        .is_some());
    assert!(router
        .routes6
        .lookup("2606:4700::1".parse().unwrap())
        .is_some());
    // A list of IPv4 prefixes only allows IPv6 nothing.
    let v4_only = build("[kernel_twins]\nroute_allow = [\"0.0.0.0/0\"]");
    let v6_refused: Vec<_> = v4_only
        .refused_kernel_routes
        .iter()
        .filter(|refused| refused.destination.is_ipv6())
        .map(|refused| (refused.destination, refused.reason.label()))
        .collect();
    assert_eq!(
        v6_refused,
        [
            (IpAddr::V6(Ipv6Addr::UNSPECIFIED), "not_allowed"),
            ("2001:db8:ff00:100::".parse().unwrap(), "overlaps_connected"),
            (
                "2001:db8:ff00:100:8000::".parse().unwrap(),
                "overlaps_connected"
            ),
            ("2001:db8:77::".parse().unwrap(), "not_allowed"),
        ]
    );
}

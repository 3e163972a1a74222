use std::net::Ipv4Addr;

use pipeline::KernelRoute;

use super::router_config_with_kernel;
use crate::config::GatewayConfig;
use crate::control::netlink::KernelView;

const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "isp"
device = "net_ring1"
address = "pppoe"
[interfaces.pppoe]
username = "u"
password = "p"
"#;

#[test]
fn a_session_gives_the_interface_its_address_route_and_a_smaller_mtu() {
    let config = GatewayConfig::from_text(std::path::Path::new("pppoe.toml"), CONFIG).unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let down = router_config_with_kernel(&config, &macs, &KernelView::default()).unwrap();
    assert_eq!(down.interfaces[1].addr, Ipv4Addr::UNSPECIFIED);
    assert_eq!(down.interfaces[1].mtu, 1492);
    assert_eq!(down.mss_limit(0, 1), Some(1452));
    assert!(down.runs_pppoe(1) && !down.runs_pppoe(0));
    assert!(down.routes.lookup(Ipv4Addr::new(198, 51, 100, 1)).is_none());
    let peer = Ipv4Addr::new(100, 64, 0, 1);
    let up = KernelView {
        addresses: vec![None, Some((Ipv4Addr::new(100, 64, 0, 2), 32))],
        routes: vec![KernelRoute {
            destination: Ipv4Addr::UNSPECIFIED,
            len: 0,
            port: 1,
            via: Some(peer),
        }],
        // The peer's MRU was 1480.
        mtus: vec![None, Some(1480)],
        ..KernelView::default()
    };
    let router = router_config_with_kernel(&config, &macs, &up).unwrap();
    assert_eq!(router.interfaces[1].addr, Ipv4Addr::new(100, 64, 0, 2));
    assert_eq!(router.interfaces[1].mtu, 1480);
    assert_eq!(router.mss_limit(0, 1), Some(1440));
    let route = router
        .routes
        .lookup(Ipv4Addr::new(198, 51, 100, 1))
        .unwrap();
    assert_eq!(
        (route.port, route.resolve(Ipv4Addr::new(198, 51, 100, 1))),
        (1, peer)
    );
    // The session's default route is the gateway's own, which the twins' allow-list
    // does not bound.
    let text = format!("{CONFIG}[kernel_twins]\nroute_allow = [\"198.51.100.0/24\"]");
    let listed = GatewayConfig::from_text(std::path::Path::new("pppoe.toml"), &text).unwrap();
    let router = router_config_with_kernel(&listed, &macs, &up).unwrap();
    assert!(router.refused_kernel_routes.is_empty());
    assert!(router.routes.lookup(Ipv4Addr::new(8, 8, 8, 8)).is_some());
}

#[test]
fn a_sessions_link_local_address_is_the_one_ipv6cp_agreed() {
    let text = format!("{CONFIG}[interfaces.ipv6]\naddresses = [\"2001:db8:a::2/64\"]\n");
    let config = GatewayConfig::from_text(std::path::Path::new("pppoe.toml"), &text).unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let down = router_config_with_kernel(&config, &macs, &KernelView::default()).unwrap();
    let eui64: std::net::Ipv6Addr = "fe80::ff:fe00:2".parse().unwrap();
    assert_eq!(down.ipv6(1).unwrap().link_local, eui64);
    let assigned: std::net::Ipv6Addr = "fe80::200:0:0:22".parse().unwrap();
    let up = KernelView {
        link_locals6: vec![None, Some(assigned)],
        ..KernelView::default()
    };
    let router = router_config_with_kernel(&config, &macs, &up).unwrap();
    assert_eq!(router.ipv6(1).unwrap().link_local, assigned);
}

//! `[[uplinks]]` compiled: the default route becomes the best uplink's, every uplink's
//! interface validates sources loosely, an uplink's next hop comes from its `via` or from the
//! default route its twin's DHCP client learnt, and one whose health checks failed (or
//! whose interface has no lease) takes no new flows.

use super::*;
use crate::control::netlink::KernelView;
use pipeline::{KernelRoute, SourceValidation};

const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.10.1/24"
[[interfaces]]
name = "wan1"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "wan2"
device = "net_ring2"
address = "dhcp"
kernel_twin = true
[nat]
masquerade = ["wan1", "wan2"]
[[uplinks]]
interface = "wan1"
via = "10.0.0.2"
priority = 1
[[uplinks]]
interface = "wan2"
weight = 3
[[routing.policy]]
source = "192.168.10.7/32"
uplink = "wan1"
"#;

fn compiled(kernel: &KernelView) -> pipeline::RouterConfig {
    let config = GatewayConfig::from_text(std::path::Path::new("uplinks.toml"), CONFIG).unwrap();
    router_config_with_kernel(&config, &[[2, 0, 0, 0, 0, 1]; 3], kernel).unwrap()
}

fn leased(failed: Vec<bool>) -> KernelView {
    KernelView {
        addresses: vec![None, None, Some((Ipv4Addr::new(10, 1, 0, 50), 24))],
        routes: vec![KernelRoute {
            destination: Ipv4Addr::UNSPECIFIED,
            len: 0,
            port: 2,
            via: Some(Ipv4Addr::new(10, 1, 0, 2)),
        }],
        uplinks_failed: failed,
        ..KernelView::default()
    }
}

#[test]
fn before_a_lease_the_dhcp_uplink_takes_nothing() {
    let router = compiled(&KernelView::default());
    let uplinks = router.uplinks.uplinks();
    assert_eq!(
        (uplinks[0].port, uplinks[0].gateway),
        (1, Some(Ipv4Addr::new(10, 0, 0, 2)))
    );
    assert_eq!(
        (uplinks[1].port, uplinks[1].gateway, uplinks[1].up),
        (2, None, false)
    );
    assert_eq!(uplinks[1].weight, 3);
    // The default route is the one usable uplink's, though it is the backup.
    let (next_hop, from_default) = router
        .routes
        .lookup_from_default(Ipv4Addr::new(1, 1, 1, 1))
        .unwrap();
    assert!(from_default);
    assert_eq!(next_hop.port, 1);
    assert_eq!(router.source_validation[1], SourceValidation::Loose);
    assert_eq!(router.source_validation[2], SourceValidation::Loose);
}

#[test]
fn a_lease_makes_the_primary_usable_and_failed_checks_take_it_down() {
    let router = compiled(&leased(Vec::new()));
    let uplinks = router.uplinks.uplinks();
    assert_eq!(uplinks[1].gateway, Some(Ipv4Addr::new(10, 1, 0, 2)));
    assert!(uplinks[1].up);
    let default = router.routes.lookup(Ipv4Addr::new(1, 1, 1, 1)).unwrap();
    assert_eq!(default.port, 2);
    // The kernel's own default route is not a second one: the uplinks' replaced it.
    assert_eq!(
        (router.routes.routes().iter())
            .filter(|route| route.len == 0)
            .count(),
        1
    );
    let failed = compiled(&leased(vec![false, true]));
    assert!(!failed.uplinks.uplinks()[1].up);
    assert!(failed.uplinks.uplinks()[0].up);
    assert_eq!(
        failed
            .routes
            .lookup(Ipv4Addr::new(1, 1, 1, 1))
            .unwrap()
            .port,
        1
    );
    assert!(failed.uplinks.ends_flow_on(2));
}

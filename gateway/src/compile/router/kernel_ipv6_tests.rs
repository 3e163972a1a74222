use std::net::Ipv6Addr;

use pipeline::pipeline::config::KernelRoute6;

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

#[test]
fn the_isps_address_and_route_and_the_delegated_prefix_become_the_routers() {
    let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), CONFIG).unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    // Before the kernel has anything: link-local only, no route, no default router.
    let before = router_config_with_kernel(&config, &macs, &KernelView::default()).unwrap();
    let lan = before.ipv6(0).unwrap();
    assert!(lan.addresses.is_empty());
    assert_eq!(lan.advertise.as_ref().unwrap().router_lifetime_secs, 0);
    assert!(before.ipv6(1).unwrap().autoconfigure && !lan.autoconfigure);
    let delegated: Ipv6Addr = "2001:db8:ff00:100::1".parse().unwrap();
    let slaac: Ipv6Addr = "2001:db8:a::ff:fe00:2".parse().unwrap();
    let isp: Ipv6Addr = "fe80::1".parse().unwrap();
    let kernel = KernelView {
        addresses6: vec![vec![(delegated, 64)], vec![(slaac, 64)]],
        routes6: vec![KernelRoute6 {
            destination: Ipv6Addr::UNSPECIFIED,
            len: 0,
            port: 1,
            via: Some(isp),
        }],
        ..KernelView::default()
    };
    let after = router_config_with_kernel(&config, &macs, &kernel).unwrap();
    let lan = after.ipv6(0).unwrap();
    assert_eq!(lan.addresses, [(delegated, 64)]);
    assert!(after.owns6(delegated) && after.owns6(slaac));
    // The LAN is told the gateway is its default router now that one leaves by the WAN.
    assert!(lan.advertise.as_ref().unwrap().router_lifetime_secs > 0);
    let out = after
        .routes6
        .lookup("2001:db8:99::1".parse().unwrap())
        .unwrap();
    assert_eq!((out.port, out.gateway), (1, Some(isp)));
    let home = after
        .routes6
        .lookup("2001:db8:ff00:100::42".parse().unwrap())
        .unwrap();
    assert_eq!((home.port, home.gateway), (0, None));
}

/// A router on the WAN's link advertising the LAN's prefix (or one holding it) gives the
/// WAN no address in it: the LAN's hosts stay routed to the LAN.
/// Whichever interface the config lists first, the delegated prefix is the LAN's.
#[test]
fn a_learnt_prefix_overlapping_another_interface_s_is_left_out() {
    let (lan_first, nat) = CONFIG.split_once("[nat]").unwrap();
    let wan_at = lan_first.rfind("[[interfaces]]").unwrap();
    let (lan, wan) = lan_first.split_at(wan_at);
    let wan_first = format!("{wan}{lan}[nat]{nat}");
    let delegated: Ipv6Addr = "2001:db8:ff00:100::1".parse().unwrap();
    let spoofed: Ipv6Addr = "2001:db8:ff00:100::bad".parse().unwrap();
    let wider: Ipv6Addr = "2001:db8:ff00::1".parse().unwrap();
    let slaac: Ipv6Addr = "2001:db8:a::ff:fe00:2".parse().unwrap();
    let lan_learnt = vec![(delegated, 64)];
    let wan_learnt = vec![(spoofed, 64), (wider, 48), (slaac, 64)];
    for (text, lan) in [(CONFIG, 0), (wan_first.as_str(), 1)] {
        let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), text).unwrap();
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        let mut addresses6 = vec![wan_learnt.clone(), wan_learnt.clone()];
        addresses6[lan] = lan_learnt.clone();
        let kernel = KernelView {
            addresses6,
            ..KernelView::default()
        };
        let router = router_config_with_kernel(&config, &macs, &kernel).unwrap();
        assert_eq!(
            router.ipv6(lan as u16).unwrap().addresses,
            [(delegated, 64)]
        );
        assert_eq!(
            router.ipv6(1 - lan as u16).unwrap().addresses,
            [(slaac, 64)]
        );
        assert!(!router.owns6(spoofed) && !router.owns6(wider));
        let home = router.routes6.lookup(spoofed).unwrap();
        assert_eq!(home.port, lan as u16, "the LAN's prefix stays the LAN's");
    }
}

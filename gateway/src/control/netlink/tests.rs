use super::*;
use netlink_packet_route::address::AddressHeader;
use netlink_packet_route::route::RouteHeader;

fn followed() -> Followed {
    Followed {
        twins: vec![Some("lan".into()), Some("wan".into()), None],
        dhcp: vec![false, true, false],
        ipv6: vec![true, true, false],
        advertises6: vec![true, false, false],
        virtual_addrs: vec![None; 3],
        ipv6_only: vec![false; 3],
    }
}

fn link(index: u32, name: &str) -> RouteNetlinkMessage {
    let mut link = LinkMessage::default();
    link.header.index = index;
    link.attributes.push(LinkAttribute::IfName(name.into()));
    RouteNetlinkMessage::NewLink(link)
}

fn address(index: u32, addr: [u8; 4], len: u8) -> RouteNetlinkMessage {
    let mut message = AddressMessage::default();
    message.header = AddressHeader {
        family: AddressFamily::Inet,
        prefix_len: len,
        index,
        ..AddressHeader::default()
    };
    let addr = IpAddr::V4(Ipv4Addr::from(addr));
    message.attributes.push(AddressAttribute::Address(addr));
    message.attributes.push(AddressAttribute::Local(addr));
    RouteNetlinkMessage::NewAddress(message)
}

fn route(
    destination: [u8; 4],
    len: u8,
    oif: u32,
    via: Option<[u8; 4]>,
    protocol: RouteProtocol,
    metric: u32,
) -> RouteNetlinkMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = AddressFamily::Inet;
    message.header.destination_prefix_length = len;
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.header.protocol = protocol;
    message.header.kind = RouteType::Unicast;
    if len > 0 {
        message
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::Inet(
                destination.into(),
            )));
    }
    if let Some(via) = via {
        message
            .attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet(via.into())));
    }
    message.attributes.push(RouteAttribute::Oif(oif));
    message.attributes.push(RouteAttribute::Priority(metric));
    RouteNetlinkMessage::NewRoute(message)
}

#[test]
fn a_lease_on_the_wan_twin_is_its_address_and_the_lans_own_address_is_not_taken() {
    let messages = [
        link(1, "lo"),
        link(7, "lan"),
        link(9, "wan"),
        address(1, [127, 0, 0, 1], 8),
        address(7, [192, 168, 10, 1], 24),
        address(9, [10, 0, 0, 50], 24),
    ];
    let view = view_from_messages(&followed(), &messages);
    assert_eq!(
        view.addresses,
        [None, Some((Ipv4Addr::new(10, 0, 0, 50), 24)), None]
    );
    // No lease yet: no address.
    let view = view_from_messages(&followed(), &messages[..5]);
    assert_eq!(view.address(1), None);
}

#[test]
fn a_virtual_address_on_a_twin_is_held_and_never_taken_for_its_lease() {
    let followed = Followed {
        virtual_addrs: vec![
            Some(Ipv4Addr::new(192, 168, 10, 254)),
            Some(Ipv4Addr::new(10, 0, 0, 254)),
            None,
        ],
        ..followed()
    };
    let own = [
        link(7, "lan"),
        link(9, "wan"),
        address(7, [192, 168, 10, 1], 24),
    ];
    let view = view_from_messages(&followed, &own);
    assert_eq!(view.virtual_held, [false, false, false]);
    // keepalived, master, adds both; on the "dhcp" WAN the virtual address comes before the
    // lease in the dump, and is still not taken for it.
    let master = [
        &own[..],
        &[
            address(7, [192, 168, 10, 254], 24),
            address(9, [10, 0, 0, 254], 24),
            address(9, [10, 0, 0, 50], 24),
        ],
    ]
    .concat();
    let view = view_from_messages(&followed, &master);
    assert_eq!(view.virtual_held, [true, true, false]);
    assert_eq!(view.address(1), Some((Ipv4Addr::new(10, 0, 0, 50), 24)));
}

#[test]
fn routes_on_twins_are_mirrored_and_the_rest_left_out() {
    let messages = [
        link(7, "lan"),
        link(9, "wan"),
        link(11, "eth0"),
        // The DHCP client's default route on the WAN twin.
        route([0; 4], 0, 9, Some([10, 0, 0, 2]), RouteProtocol::Boot, 0),
        // The operator's, on-link.
        route([198, 51, 100, 0], 24, 9, None, RouteProtocol::Static, 0),
        // The kernel's prefix route for the twin's address: derived from the address.
        route([10, 0, 0, 0], 24, 9, None, RouteProtocol::Kernel, 0),
        // Not a twin.
        route(
            [172, 16, 0, 0],
            12,
            11,
            Some([172, 16, 0, 1]),
            RouteProtocol::Static,
            0,
        ),
        // Two for one prefix: the lower metric wins.
        route(
            [203, 0, 113, 0],
            24,
            7,
            Some([192, 168, 10, 9]),
            RouteProtocol::Zebra,
            20,
        ),
        route(
            [203, 0, 113, 0],
            24,
            9,
            Some([10, 0, 0, 3]),
            RouteProtocol::Zebra,
            10,
        ),
    ];
    let view = view_from_messages(&followed(), &messages);
    let expected = [
        KernelRoute {
            destination: Ipv4Addr::UNSPECIFIED,
            len: 0,
            port: 1,
            via: Some(Ipv4Addr::new(10, 0, 0, 2)),
        },
        KernelRoute {
            destination: Ipv4Addr::new(198, 51, 100, 0),
            len: 24,
            port: 1,
            via: None,
        },
        KernelRoute {
            destination: Ipv4Addr::new(203, 0, 113, 0),
            len: 24,
            port: 1,
            via: Some(Ipv4Addr::new(10, 0, 0, 3)),
        },
    ];
    assert_eq!(view.routes, expected);
    // Gone from the dump, gone from the view.
    let view = view_from_messages(&followed(), &messages[..4]);
    assert_eq!(view.routes, expected[..1]);
    // A PPPoE session's twin carries IPv6 alone: its IPv4 routes are not taken.
    let pppoe = Followed {
        ipv6_only: vec![false, true, false],
        ..followed()
    };
    let view = view_from_messages(&pppoe, &messages);
    assert!(
        view.routes.iter().all(|route| route.port != 1),
        "{:?}",
        view.routes
    );
}

fn address6(index: u32, addr: &str, len: u8, flags: AddressFlags) -> RouteNetlinkMessage {
    let addr: Ipv6Addr = addr.parse().unwrap();
    let mut message = AddressMessage::default();
    message.header = AddressHeader {
        family: AddressFamily::Inet6,
        prefix_len: len,
        index,
        scope: if pipeline::wire::ipv6::is_link_local(addr) {
            AddressScope::Link
        } else {
            AddressScope::Universe
        },
        ..AddressHeader::default()
    };
    message
        .attributes
        .push(AddressAttribute::Address(IpAddr::V6(addr)));
    message.attributes.push(AddressAttribute::Flags(flags));
    RouteNetlinkMessage::NewAddress(message)
}

/// A delegated address with its lease's remaining lifetimes, deprecated and permanent
/// ones: the view holds each prefix's deadlines, rounded down to 10 s.
#[test]
fn an_address_s_lifetimes_become_its_prefix_s_lease() {
    let with_lifetimes = |addr: &str, valid: u32, preferred: u32| {
        let mut message = address6(7, addr, 64, AddressFlags::empty());
        if let RouteNetlinkMessage::NewAddress(address) = &mut message {
            let mut info = netlink_packet_route::address::CacheInfo::default();
            info.ifa_preferred = preferred;
            info.ifa_valid = valid;
            address.attributes.push(AddressAttribute::CacheInfo(info));
        }
        message
    };
    let messages = [
        link(7, "lan"),
        with_lifetimes("2001:db8:ff00:100::1", 3999, 2999),
        with_lifetimes("2001:db8:ff00:200::1", 600, 0),
        with_lifetimes("2001:db8:ff00:300::1", u32::MAX, u32::MAX),
        address6(7, "2001:db8:ff00:400::1", 64, AddressFlags::empty()),
    ];
    let view = view_at(&followed(), &messages, 1_003);
    let lease = |addr: &str| view.lease6(0, (addr.parse().unwrap(), 64));
    let prefix = |text: &str| text.parse::<Ipv6Addr>().unwrap();
    assert_eq!(
        lease("2001:db8:ff00:100::77"),
        Some(PrefixLease {
            prefix: prefix("2001:db8:ff00:100::"),
            len: 64,
            valid_until_secs: Some(5_002),
            preferred_until_secs: Some(4_002),
        })
    );
    // Deprecated: its preferred deadline long past, the same in every dump.
    let deprecated = lease("2001:db8:ff00:200::1").unwrap();
    assert_eq!(
        (deprecated.valid_until_secs, deprecated.preferred_until_secs),
        (Some(1_603), Some(0))
    );
    assert_eq!(
        lease("2001:db8:ff00:300::1"),
        None,
        "valid for ever: no lease"
    );
    assert_eq!(lease("2001:db8:ff00:400::1"), None, "no cache info");
    // The WAN sends no advertisements: its leases are not kept.
    let mut wan = messages.clone();
    wan[0] = link(7, "wan");
    assert!(view_at(&followed(), &wan, 1_003).leases6[1].is_empty());
    // Dumps a few seconds apart of the same leases are the same view; a renewal is not.
    let dump = |now: u64, valid: u32, preferred: u32| {
        let counted_down = [
            link(7, "lan"),
            with_lifetimes("2001:db8:ff00:100::1", valid, preferred),
        ];
        view_at(&followed(), &counted_down, now)
    };
    let first = dump(1_003, 3999, 2999);
    assert!(first.same_as(&dump(1_005, 3998, 2998)));
    assert!(first.same_as(&dump(1_043, 3959, 2959)));
    assert!(!first.same_as(&dump(2_003, 3999, 2999)), "renewed");
    assert!(!first.same_as(&dump(1_005, 3998, 0)), "deprecated");
    assert!(!first.same_as(&KernelView::default()));
}

fn route6(
    destination: &str,
    len: u8,
    oif: u32,
    via: Option<&str>,
    protocol: RouteProtocol,
    kind: RouteType,
) -> RouteNetlinkMessage {
    let mut message = RouteMessage::default();
    message.header.address_family = AddressFamily::Inet6;
    message.header.destination_prefix_length = len;
    message.header.table = RouteHeader::RT_TABLE_MAIN;
    message.header.protocol = protocol;
    message.header.kind = kind;
    let destination: Ipv6Addr = destination.parse().unwrap();
    message
        .attributes
        .push(RouteAttribute::Destination(RouteAddress::Inet6(
            destination,
        )));
    if let Some(via) = via {
        message
            .attributes
            .push(RouteAttribute::Gateway(RouteAddress::Inet6(
                via.parse().unwrap(),
            )));
    }
    message.attributes.push(RouteAttribute::Oif(oif));
    RouteNetlinkMessage::NewRoute(message)
}

#[test]
fn slaac_and_delegated_addresses_and_the_isps_default_route_are_taken_once_usable() {
    let usable = AddressFlags::empty();
    let messages = [
        link(7, "lan"),
        link(9, "wan"),
        link(11, "eth0"),
        // SLAAC on the WAN twin, and one still in Duplicate Address Detection.
        address6(9, "2001:db8:a::200:ff:fe00:2", 64, usable),
        address6(9, "2001:db8:a::99", 64, AddressFlags::Tentative),
        address6(9, "2001:db8:a::98", 64, AddressFlags::Dadfailed),
        address6(9, "fe80::200:ff:fe00:2", 64, usable),
        // dhcpcd's /64 of the delegated prefix on the LAN twin.
        address6(7, "2001:db8:ff00:100::1", 64, usable),
        // Not a twin.
        address6(11, "2001:db8:77::1", 64, usable),
        // The ISP's RA: the default route by its link-local address.
        route6(
            "::",
            0,
            9,
            Some("fe80::1"),
            RouteProtocol::Ra,
            RouteType::Unicast,
        ),
        // The kernel's prefix routes, the link's own, dhcpcd's blackhole for the rest of
        // the delegated prefix: none mirrored.
        route6(
            "2001:db8:a::",
            64,
            9,
            None,
            RouteProtocol::Kernel,
            RouteType::Unicast,
        ),
        route6(
            "fe80::",
            64,
            9,
            None,
            RouteProtocol::Static,
            RouteType::Unicast,
        ),
        route6(
            "2001:db8:ff00::",
            56,
            1,
            None,
            RouteProtocol::Dhcp,
            RouteType::Unreachable,
        ),
        // FRR's, on-link.
        route6(
            "2001:db8:b::",
            48,
            9,
            None,
            RouteProtocol::Zebra,
            RouteType::Unicast,
        ),
    ];
    let view = view_from_messages(&followed(), &messages);
    let global = |text: &str, len| (text.parse::<Ipv6Addr>().unwrap(), len);
    assert_eq!(view.addresses6(0), [global("2001:db8:ff00:100::1", 64)]);
    assert_eq!(
        view.addresses6(1),
        [global("2001:db8:a::200:ff:fe00:2", 64)]
    );
    assert!(view.addresses6(2).is_empty());
    assert_eq!(
        view.routes6,
        [
            KernelRoute6 {
                destination: Ipv6Addr::UNSPECIFIED,
                len: 0,
                port: 1,
                via: Some("fe80::1".parse().unwrap()),
            },
            KernelRoute6 {
                destination: "2001:db8:b::".parse().unwrap(),
                len: 48,
                port: 1,
                via: None,
            },
        ]
    );
    // An interface whose IPv6 the kernel does not configure takes no address from it.
    let mut followed = followed();
    followed.ipv6[0] = false;
    assert!(view_from_messages(&followed, &messages)
        .addresses6(0)
        .is_empty());
}

#[test]
fn other_tables_and_families_are_not_taken() {
    let mut local = route([10, 0, 0, 50], 32, 9, None, RouteProtocol::Static, 0);
    if let RouteNetlinkMessage::NewRoute(message) = &mut local {
        message.header.table = 255;
        message.header.kind = RouteType::Local;
    }
    let mut other_table = route([1, 2, 3, 0], 24, 9, None, RouteProtocol::Static, 0);
    if let RouteNetlinkMessage::NewRoute(message) = &mut other_table {
        message.header.table = 100;
    }
    let messages = [link(9, "wan"), local, other_table];
    assert!(view_from_messages(&followed(), &messages).routes.is_empty());
}

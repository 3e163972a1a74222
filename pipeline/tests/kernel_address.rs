//! An interface whose address comes from the kernel (`address = "dhcp"`, a DHCP client on
//! its twin) and routes the kernel has on the twins: before the first lease the WAN has no
//! address and nothing is forwarded out of it or masqueraded to it (a counted drop); the
//! DHCP server's answers reach the twin whatever their destination but another interface's
//! subnet; once a router config
//! with the lease is swapped in, flows are masqueraded to it; when the lease moves, new flows
//! take the new address and the old ones end on their next packet. Kernel routes are used,
//! but connected and static routes win where both have the prefix.

use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use pipeline::pipeline::config::PuntConfig;
use pipeline::pipeline::config::Stateful;
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::state::nat::{NatEvent, NatEventKind, NatLog};
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Interface, KernelRoute, NeighborView, PacketBuf, Pipeline,
    RouterConfig, StaticRoute, Verdict, WorkerCounters, WorkerSetup,
};

const LAN: u16 = 0;
const WAN: u16 = 1;
const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const HOST: [u8; 4] = [192, 168, 10, 2];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
const ISP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ISP_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const REMOTE: [u8; 4] = [203, 0, 113, 5];

fn lan() -> Interface {
    Interface {
        mac: EthernetAddress(LAN_MAC),
        addr: Ipv4Addr::new(192, 168, 10, 1),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

/// The WAN with `lease` (address, prefix) or none yet, and the kernel's routes on it.
fn router(lease: Option<(Ipv4Addr, u8)>, kernel: &[KernelRoute]) -> Arc<RouterConfig> {
    router_with(lease, &[], kernel)
}

fn router_with(
    lease: Option<(Ipv4Addr, u8)>,
    statics: &[StaticRoute],
    kernel: &[KernelRoute],
) -> Arc<RouterConfig> {
    let (addr, prefix_len) = lease.unwrap_or((Ipv4Addr::UNSPECIFIED, 0));
    let wan = Interface {
        mac: EthernetAddress(WAN_MAC),
        addr,
        prefix_len,
        mtu: 1500,
        virtual_addr: None,
    };
    let policy = Policy::new(Action::Drop).set(ZoneId(0), ZoneId(1), Action::Accept);
    let stateful = Stateful {
        content: None,
        zones: vec![ZoneId(0), ZoneId(1)],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(Vec::new(), policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: Vec::new(),
        recheck_established: false,
        generation: lease.map_or(0, |(addr, _)| u32::from(addr)),
    };
    let config =
        RouterConfig::with_kernel_routes(vec![lan(), wan], statics, kernel, IcmpLimits::default())
            .unwrap()
            .with_stateful(stateful)
            .unwrap()
            .with_punt(PuntConfig {
                twins: vec![false, true],
                dhcp_clients: vec![false, true],
                ..PuntConfig::none(2)
            })
            .unwrap();
    Arc::new(config)
}

fn default_via_isp() -> KernelRoute {
    KernelRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        port: WAN,
        via: Some(ISP),
    }
}

fn pipeline(router: Arc<RouterConfig>) -> Pipeline {
    let neighbors = NeighborView::new([
        (ISP, EthernetAddress(ISP_MAC)),
        (Ipv4Addr::from(HOST), EthernetAddress(HOST_MAC)),
    ]);
    Pipeline::new(
        router,
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
    )
}

fn udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ports: (u16, u16),
) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src, dst, 64)
        .udp(ports.0, ports.1)
        .write(&mut frame, b"hello")
        .unwrap();
    frame
}

/// The verdict and the frame as it left.
fn process(pipeline: &mut Pipeline, frame: &[u8], ingress: u16) -> (Verdict, Vec<u8>) {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let verdict = pipeline.process(&mut pkt, ingress, 1_000);
    (verdict, pkt.bytes().to_vec())
}

/// The source address and port of a frame.
fn source(frame: &[u8]) -> (Ipv4Addr, u16) {
    let sliced = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("not IPv4")
    };
    let Some(TransportSlice::Udp(udp)) = sliced.transport else {
        panic!("not UDP")
    };
    (ip.header().source_addr(), udp.source_port())
}

fn from_host(port: u16) -> Vec<u8> {
    udp(HOST_MAC, LAN_MAC, HOST, REMOTE, (port, 53))
}

#[test]
fn before_the_first_lease_nothing_leaves_by_the_wan_and_nothing_crashes() {
    let mut gw = pipeline(router(None, &[]));
    assert!(gw.router().nat_addresses().is_empty());
    // No address, no connected route: nothing routes out of the WAN; the host is told
    // (ICMP unreachable, back on the LAN).
    let (verdict, _) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    // A kernel route on the WAN before its address (`ip route add ... dev wan`): refused
    // with its own counted reason, not masqueraded to 0.0.0.0.
    gw.set_router(router(None, &[default_via_isp()]));
    let (verdict, _) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Drop(DropReason::InterfaceUnaddressed));
    assert_eq!(gw.counters().dropped(DropReason::InterfaceUnaddressed), 1);
    // 0.0.0.0 is not an address of ours.
    assert_eq!(gw.router().local_port(Ipv4Addr::UNSPECIFIED), None);
}

#[test]
fn dhcp_answers_reach_the_twin_but_never_for_another_interfaces_subnet() {
    let mut gw = pipeline(router(None, &[]));
    let offered = [10, 0, 0, 50];
    for dst in [offered, [255, 255, 255, 255]] {
        let offer = udp(ISP_MAC, WAN_MAC, ISP.octets(), dst, (67, 68));
        let (verdict, _) = process(&mut gw, &offer, WAN);
        assert_eq!(verdict, Verdict::Punt { port: WAN }, "to {dst:?}");
    }
    // Other UDP to the offered address is not the kernel's.
    let other = udp(ISP_MAC, WAN_MAC, ISP.octets(), offered, (53, 68));
    assert_ne!(process(&mut gw, &other, WAN).0, Verdict::Punt { port: WAN });
    // Nor is a "DHCP answer" addressed to a LAN host, or to our LAN address: no server
    // offers those, and the twins' kernel would route it past the firewall. It goes the way
    // of any datagram from the WAN, and the zone policy drops it.
    for lan_address in [HOST, [192, 168, 10, 1]] {
        let forged = udp(ISP_MAC, WAN_MAC, ISP.octets(), lan_address, (67, 68));
        let (verdict, _) = process(&mut gw, &forged, WAN);
        assert!(
            matches!(verdict, Verdict::Drop(_)),
            "to {lan_address:?}: {verdict:?}"
        );
    }
    // Renewal: to our leased address, in spite of wan -> local being dropped.
    gw.set_router(router(
        Some((Ipv4Addr::from(offered), 24)),
        &[default_via_isp()],
    ));
    let ack = udp(ISP_MAC, WAN_MAC, ISP.octets(), offered, (67, 68));
    assert_eq!(process(&mut gw, &ack, WAN).0, Verdict::Punt { port: WAN });
}

#[test]
fn masquerade_follows_the_lease_and_flows_on_the_old_address_end() {
    let first = Ipv4Addr::new(10, 0, 0, 50);
    let second = Ipv4Addr::new(10, 0, 0, 77);
    let mut gw = pipeline(router(None, &[]));
    gw.set_router(router(Some((first, 24)), &[default_via_isp()]));
    let (verdict, out) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(source(&out).0, first);
    // The flow goes on with the same address while the lease holds.
    let (_, again) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(source(&again), source(&out));

    gw.set_router(router(Some((second, 24)), &[default_via_isp()]));
    assert_eq!(gw.router().nat_addresses(), [second]);
    // The old flow's next packet ends it, counted ...
    let (verdict, _) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Drop(DropReason::NatAddressGone));
    assert_eq!(gw.counters().dropped(DropReason::NatAddressGone), 1);
    // ... and the host's next packet is a new flow on the new address.
    let (verdict, out) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(source(&out).0, second);
    let (_, out) = process(&mut gw, &from_host(40001), LAN);
    assert_eq!(source(&out).0, second);

    // The lease is lost: new flows do not leave by the WAN (the host hears unreachable).
    gw.set_router(router(None, &[]));
    let (verdict, _) = process(&mut gw, &from_host(40002), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
}

/// The NAT log hears a mapping end when its address goes with the lease, not never: the
/// flow's release later finds nothing in the new pool to free.
#[test]
fn mappings_on_an_address_that_went_are_logged_as_deleted_when_it_goes() {
    let first = Ipv4Addr::new(10, 0, 0, 50);
    let second = Ipv4Addr::new(10, 0, 0, 77);
    let log = Arc::new(NatLog::new(64));
    let setup = WorkerSetup {
        nat_log: Some(log.clone()),
        ..WorkerSetup::default()
    };
    let neighbors = NeighborView::new([
        (ISP, EthernetAddress(ISP_MAC)),
        (Ipv4Addr::from(HOST), EthernetAddress(HOST_MAC)),
    ]);
    let mut gw = Pipeline::for_worker(
        router(Some((first, 24)), &[default_via_isp()]),
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
        setup,
    )
    .unwrap();
    let drain = || {
        let mut events: Vec<NatEvent> = Vec::new();
        log.drain(|event| events.push(event));
        events
    };
    let (_, out) = process(&mut gw, &from_host(40000), LAN);
    let mapped = source(&out);
    let created = drain();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].kind, NatEventKind::Create);
    assert_eq!(created[0].external, mapped);

    // The lease moves: the mapping on the old address ends now, in the log too.
    gw.set_router(router(Some((second, 24)), &[default_via_isp()]));
    let ended = drain();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].kind, NatEventKind::Delete);
    assert_eq!(ended[0].internal, (Ipv4Addr::from(HOST), 40000));
    assert_eq!(ended[0].external, mapped);
    // Its next packet ends the flow, with nothing more to log.
    let (verdict, _) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Drop(DropReason::NatAddressGone));
    assert!(drain().is_empty());
    // A new mapping on the new address, which a lost lease ends as well.
    let (_, out) = process(&mut gw, &from_host(40001), LAN);
    assert_eq!(source(&out).0, second);
    assert_eq!(drain().len(), 1);
    gw.set_router(router(None, &[]));
    let ended = drain();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(
        (ended[0].kind, ended[0].external),
        (NatEventKind::Delete, source(&out))
    );
}

#[test]
fn a_reload_that_keeps_the_address_keeps_the_flows_bindings() {
    let first = Ipv4Addr::new(10, 0, 0, 50);
    let mut gw = pipeline(router(Some((first, 24)), &[default_via_isp()]));
    let (_, out) = process(&mut gw, &from_host(40000), LAN);
    gw.set_router(router(Some((first, 24)), &[default_via_isp()]));
    let (verdict, again) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(source(&again), source(&out));
}

#[test]
fn kernel_routes_are_used_and_connected_and_static_routes_win() {
    let lease = Some((Ipv4Addr::new(10, 0, 0, 50), 24));
    let kernel = [
        KernelRoute {
            destination: Ipv4Addr::new(198, 51, 100, 0),
            len: 24,
            port: WAN,
            via: Some(Ipv4Addr::new(10, 0, 0, 3)),
        },
        // Shadowed by the LAN's connected route.
        KernelRoute {
            destination: Ipv4Addr::new(192, 168, 10, 0),
            len: 24,
            port: WAN,
            via: Some(ISP),
        },
        // Shadowed by the static route for the same prefix.
        KernelRoute {
            destination: Ipv4Addr::new(172, 16, 0, 0),
            len: 12,
            port: WAN,
            via: Some(ISP),
        },
        // Host bits set: left out.
        KernelRoute {
            destination: Ipv4Addr::new(100, 64, 0, 1),
            len: 10,
            port: WAN,
            via: Some(ISP),
        },
    ];
    let statics = [StaticRoute {
        destination: Ipv4Addr::new(172, 16, 0, 0),
        len: 12,
        via: Ipv4Addr::new(192, 168, 10, 254),
    }];
    let config = router_with(lease, &statics, &kernel);
    let hop = |dst: [u8; 4]| config.routes.lookup(Ipv4Addr::from(dst));
    let mirrored = hop([198, 51, 100, 9]).unwrap();
    assert_eq!(
        (mirrored.port, mirrored.gateway),
        (WAN, Some(Ipv4Addr::new(10, 0, 0, 3)))
    );
    assert_eq!(hop([192, 168, 10, 9]).unwrap().port, LAN);
    let static_hop = hop([172, 16, 5, 5]).unwrap();
    assert_eq!(
        (static_hop.port, static_hop.gateway),
        (LAN, Some(Ipv4Addr::new(192, 168, 10, 254)))
    );
    assert!(hop([100, 64, 0, 9]).is_none());
    // Removed from the kernel, removed from the FIB.
    let without = router_with(lease, &statics, &kernel[1..]);
    assert!(without
        .routes
        .lookup(Ipv4Addr::new(198, 51, 100, 9))
        .is_none());
}

/// TunnelVision: a route on the WAN twin into half of the LAN's subnet (a rogue DHCP server's
/// option 121) is refused, so the host in that half is neither dropped by strict source
/// validation nor has its replies sent out of the WAN.
#[test]
fn a_kernel_route_into_half_the_lan_is_refused_and_the_host_keeps_its_flows() {
    let lease = Some((Ipv4Addr::new(10, 0, 0, 50), 24));
    let rogue = KernelRoute {
        destination: Ipv4Addr::new(192, 168, 10, 0),
        len: 25,
        port: WAN,
        via: Some(ISP),
    };
    let config = router_with(lease, &[], &[default_via_isp(), rogue]);
    assert_eq!(config.refused_kernel_routes.len(), 1);
    assert_eq!(config.refused_kernel_routes[0].len, 25);
    let mut gw = pipeline(config);
    let (verdict, out) = process(&mut gw, &from_host(40000), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let (nat_address, nat_port) = source(&out);
    let reply = udp(
        ISP_MAC,
        WAN_MAC,
        REMOTE,
        nat_address.octets(),
        (53, nat_port),
    );
    let (verdict, back) = process(&mut gw, &reply, WAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let sliced = SlicedPacket::from_ethernet(&back).unwrap();
    let Some(NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("not IPv4")
    };
    assert_eq!(ip.header().destination(), HOST);
    assert_eq!(gw.counters().dropped(DropReason::SourceValidation), 0);
}

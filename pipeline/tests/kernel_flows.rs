//! Connections the gateway's kernel opens through a twin (`pipeline::pipeline::kernel_flows`):
//! which frames are tracked, what the `local -> zone` policy decides, and where replies and
//! the ICMP errors about them go. Ownership across workers is in `ownership.rs`.

use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::icmpv4::DestUnreachableHeader;
use etherparse::{Icmpv4Type, PacketBuilder};
use pipeline::pipeline::config::{PuntConfig, Stateful};
use pipeline::pipeline::kernel_flows::kernel_flow;
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig,
    StaticRoute, Verdict, WorkerCounters,
};

const LAN: u16 = 0;
const WAN: u16 = 1;
const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const LAN_ADDR: [u8; 4] = [192, 168, 10, 1];
const WAN_ADDR: [u8; 4] = [10, 0, 0, 1];
const ISP: [u8; 4] = [10, 0, 0, 2];
const ISP_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const HOST: [u8; 4] = [192, 168, 10, 2];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
const RESOLVER: [u8; 4] = [198, 51, 100, 53];

/// LAN (inside, reaches `local`) and a masqueraded WAN (does not), both with twins; `policy`
/// on top of the defaults the config gives (lan -> wan, lan -> local, local -> both accept).
fn router(extra: &[(ZoneId, ZoneId, Action)]) -> Arc<RouterConfig> {
    router_and_rules(extra, Vec::new())
}

fn router_with_rules(rules: Vec<Rule>) -> Arc<RouterConfig> {
    router_and_rules(&[], rules)
}

fn router_and_rules(extra: &[(ZoneId, ZoneId, Action)], rules: Vec<Rule>) -> Arc<RouterConfig> {
    let iface = |mac, addr: [u8; 4]| Interface {
        mac: EthernetAddress(mac),
        addr: Ipv4Addr::from(addr),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    };
    let (lan, wan) = (ZoneId(0), ZoneId(1));
    let defaults = [
        (lan, wan, Action::Accept),
        (lan, lan, Action::Accept),
        (lan, ZoneId::LOCAL, Action::Accept),
        (ZoneId::LOCAL, lan, Action::Accept),
        (ZoneId::LOCAL, wan, Action::Accept),
    ];
    let policy = defaults
        .iter()
        .chain(extra)
        .fold(Policy::new(Action::Drop), |policy, &(from, to, action)| {
            policy.set(from, to, action)
        });
    let stateful = Stateful {
        content: None,
        zones: vec![lan, wan],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(rules, policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: Vec::new(),
        recheck_established: false,
        generation: 0,
    };
    let default_route = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: Ipv4Addr::from(ISP),
    };
    let config = RouterConfig::new(
        vec![iface(LAN_MAC, LAN_ADDR), iface(WAN_MAC, WAN_ADDR)],
        &[default_route],
        IcmpLimits::default(),
    )
    .unwrap()
    .with_stateful(stateful)
    .unwrap()
    .with_punt(PuntConfig {
        twins: vec![true, true],
        ..PuntConfig::none(2)
    })
    .unwrap();
    Arc::new(config)
}

fn pipeline(router: Arc<RouterConfig>) -> Pipeline {
    let neighbors = NeighborView::new([
        (Ipv4Addr::from(ISP), EthernetAddress(ISP_MAC)),
        (Ipv4Addr::from(HOST), EthernetAddress(HOST_MAC)),
    ]);
    Pipeline::new(
        router,
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
    )
}

fn udp(macs: ([u8; 6], [u8; 6]), src: ([u8; 4], u16), dst: ([u8; 4], u16)) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(macs.0, macs.1)
        .ipv4(src.0, dst.0, 64)
        .udp(src.1, dst.1)
        .write(&mut frame, b"query")
        .unwrap();
    frame
}

fn tcp(macs: ([u8; 6], [u8; 6]), src: ([u8; 4], u16), dst: ([u8; 4], u16), syn: bool) -> Vec<u8> {
    let mut frame = Vec::new();
    let builder = PacketBuilder::ethernet2(macs.0, macs.1)
        .ipv4(src.0, dst.0, 64)
        .tcp(src.1, dst.1, 1000, 65535);
    let builder = if syn {
        builder.syn()
    } else {
        builder.ack(1).psh()
    };
    builder.write(&mut frame, &[]).unwrap();
    frame
}

/// The kernel's frame on `port`'s twin, as the worker that owns it handles it.
fn from_kernel(gw: &mut Pipeline, frame: &[u8], port: u16) -> (Verdict, Vec<u8>) {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let verdict = gw.process_kernel_frame(&mut pkt, port, 1_000);
    (verdict, pkt.bytes().to_vec())
}

fn from_wire(gw: &mut Pipeline, frame: &[u8], port: u16) -> (Verdict, Vec<u8>) {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let verdict = gw.process(&mut pkt, port, 2_000);
    (verdict, pkt.bytes().to_vec())
}

/// UDP source or destination port at its place in an IPv4 frame without options.
fn port_at(frame: &[u8], offset: usize) -> u16 {
    u16::from_be_bytes([frame[34 + offset], frame[35 + offset]])
}

#[test]
fn the_kernels_query_to_the_wan_is_tracked_and_its_answer_reaches_the_twin() {
    let router = router(&[]);
    let mut gw = pipeline(router.clone());
    let query = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 40000), (RESOLVER, 53));
    assert!(kernel_flow(&router, WAN, &query).is_some());
    let (verdict, sent) = from_kernel(&mut gw, &query, WAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(gw.flow_count(), 1);
    let external_port = port_at(&sent, 0);
    assert_eq!(
        external_port, 40000,
        "the kernel's port, free in the pool, is kept"
    );
    let answer = udp(
        (ISP_MAC, WAN_MAC),
        (RESOLVER, 53),
        (WAN_ADDR, external_port),
    );
    let (verdict, delivered) = from_wire(&mut gw, &answer, WAN);
    assert_eq!(verdict, Verdict::Punt { port: WAN });
    assert_eq!(
        port_at(&delivered, 2),
        40000,
        "translated back to the kernel's port"
    );
    // Nothing else comes in by it: another port of the resolver, or another host.
    for (src, port) in [(RESOLVER, 54), (ISP, 53)] {
        let unsolicited = udp((ISP_MAC, WAN_MAC), (src, port), (WAN_ADDR, external_port));
        assert_eq!(
            from_wire(&mut gw, &unsolicited, WAN).0,
            Verdict::Drop(DropReason::FirewallDrop),
            "from {src:?}:{port}"
        );
    }
    // An ICMP error about the query goes to the twin too, about what the kernel sent.
    let mut error = Vec::new();
    PacketBuilder::ethernet2(ISP_MAC, WAN_MAC)
        .ipv4(RESOLVER, WAN_ADDR, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            DestUnreachableHeader::Port,
        ))
        .write(&mut error, &sent[14..14 + 28])
        .unwrap();
    let (verdict, delivered) = from_wire(&mut gw, &error, WAN);
    assert_eq!(verdict, Verdict::Punt { port: WAN });
    // The quoted datagram's source port, inside the error: the kernel's.
    assert_eq!(u16::from_be_bytes([delivered[62], delivered[63]]), 40000);
}

#[test]
fn local_to_wan_drop_stops_what_the_kernel_opens() {
    let (local, wan) = (ZoneId::LOCAL, ZoneId(1));
    let mut gw = pipeline(router(&[(local, wan, Action::Drop)]));
    let query = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 40000), (RESOLVER, 53));
    let (verdict, _) = from_kernel(&mut gw, &query, WAN);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
    assert_eq!(gw.flow_count(), 0);
    assert_eq!(gw.counters().dropped(DropReason::FirewallDrop), 1);
}

#[test]
fn tcp_the_kernel_did_not_open_leaves_untracked_and_toward_inside_nothing_is_tracked() {
    let router = router(&[]);
    let mut gw = pipeline(router.clone());
    // The twin's side of a connection made to it (a local rule let it in): no flow, sent.
    let answer = tcp((WAN_MAC, ISP_MAC), (WAN_ADDR, 179), (ISP, 50000), false);
    assert!(kernel_flow(&router, WAN, &answer).is_some());
    assert_eq!(
        from_kernel(&mut gw, &answer, WAN).0,
        Verdict::Transmit { port: WAN }
    );
    assert_eq!(gw.flow_count(), 0);
    // Its own SYN is tracked.
    let syn = tcp((WAN_MAC, ISP_MAC), (WAN_ADDR, 45000), (ISP, 179), true);
    assert_eq!(
        from_kernel(&mut gw, &syn, WAN).0,
        Verdict::Transmit { port: WAN }
    );
    assert_eq!(gw.flow_count(), 1);
    // Toward the LAN, which reaches `local` anyway (dnsmasq answering a LAN host), and the
    // DHCP client's exchange: not the control thread's to hand over.
    let dns_answer = udp((LAN_MAC, HOST_MAC), (LAN_ADDR, 53), (HOST, 5353));
    assert_eq!(kernel_flow(&router, LAN, &dns_answer), None);
    let renew = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 68), (ISP, 67));
    assert_eq!(kernel_flow(&router, WAN, &renew), None);
    // Nor a frame from an address not the gateway's, or to a broadcast.
    let foreign = udp((WAN_MAC, ISP_MAC), (HOST, 40000), (RESOLVER, 53));
    assert_eq!(kernel_flow(&router, WAN, &foreign), None);
    let broadcast = udp(
        (WAN_MAC, [0xff; 6]),
        (WAN_ADDR, 40000),
        ([10, 0, 0, 255], 9),
    );
    assert_eq!(kernel_flow(&router, WAN, &broadcast), None);
}

#[test]
fn the_kernels_port_is_kept_unless_a_lan_host_holds_it() {
    let mut gw = pipeline(router(&[]));
    // A LAN host's flow takes external port 40000 first (port preservation).
    let lan_query = udp((HOST_MAC, LAN_MAC), (HOST, 40000), (RESOLVER, 53));
    let (verdict, sent) = from_wire(&mut gw, &lan_query, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(port_at(&sent, 0), 40000);
    // The kernel's query from the same port to the same resolver: translated, or its
    // answer would be the LAN host's.
    let query = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 40000), (RESOLVER, 53));
    let (verdict, sent) = from_kernel(&mut gw, &query, WAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let kernel_port = port_at(&sent, 0);
    assert_ne!(kernel_port, 40000);
    for (dst_port, to) in [
        (40000, Verdict::Transmit { port: LAN }),
        (kernel_port, Verdict::Punt { port: WAN }),
    ] {
        let answer = udp((ISP_MAC, WAN_MAC), (RESOLVER, 53), (WAN_ADDR, dst_port));
        assert_eq!(from_wire(&mut gw, &answer, WAN).0, to, "to port {dst_port}");
    }
    // A port outside the pool's range (NTP's 123) is no LAN host's: kept, and answered.
    let ntp = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 123), (RESOLVER, 123));
    let (_, sent) = from_kernel(&mut gw, &ntp, WAN);
    assert_eq!(port_at(&sent, 0), 123);
    let answer = udp((ISP_MAC, WAN_MAC), (RESOLVER, 123), (WAN_ADDR, 123));
    assert_eq!(
        from_wire(&mut gw, &answer, WAN).0,
        Verdict::Punt { port: WAN }
    );
}

#[test]
fn the_kernels_answers_to_what_a_rule_lets_in_open_no_flow() {
    let wan = ZoneId(1);
    let service = Rule {
        from: Some(wan),
        to: Some(ZoneId::LOCAL),
        protocol: Some(17),
        dst_ports: Some(51820..=51820),
        ..Rule::matching_all("wireguard", Action::Accept)
    };
    let mut gw = pipeline(router_with_rules(vec![service]));
    let answer = udp((WAN_MAC, ISP_MAC), (WAN_ADDR, 51820), (ISP, 40000));
    let (verdict, sent) = from_kernel(&mut gw, &answer, WAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(port_at(&sent, 0), 51820, "left as the kernel sent it");
    assert_eq!(gw.flow_count(), 0, "an answer opens no flow");
}

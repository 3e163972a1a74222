//! IPv6 forwarding through a worker: the hop limit, the route and the neighbour, RFC 6092's
//! stateful default (out accepted, replies back, unsolicited in dropped), the ICMPv6 errors
//! a router raises (read back with etherparse), the related errors that must pass (RFC
//! 4890), what is never forwarded, and ownership across workers.

mod common;

use std::net::Ipv6Addr;
use std::sync::Arc;

use common::*;
use etherparse::{Icmpv6Type, PacketBuilder, SlicedPacket, TransportSlice};
use pipeline::features::content::{ContentPolicy, DnsAction};
use pipeline::features::meter::HostMeter;
use pipeline::features::parental::{DeviceMatch, Policy as ParentalPolicy};
use pipeline::features::qos::{assign_equal_shares, Class, ClassRule, QosConfig, QosMode};
use pipeline::l3::icmpv6_error::{write_icmpv6_error, Icmpv6Error};
use pipeline::pipeline::config::{Ipv6Interface, Pinhole6, PuntConfig, Stateful, StaticRoute6};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet};
use pipeline::wire::ipv6::{link_local, multicast_mac, ALL_NODES};
use pipeline::wire::EthernetAddress;
use pipeline::{
    ControlWork, DropReason, IcmpLimits, Ingress, NeighborView, PacketBuf, Pipeline, RouterConfig,
    Verdict, WorkerCounters, WorkerSetup,
};
use proptest::prelude::*;

const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, 1);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, 2);
const GW6_WAN: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
const UPSTREAM6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);
const REMOTE6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
const WAN_MTU: u16 = 1400;

fn config(with_default: bool) -> RouterConfig {
    config_with_rules(with_default, Vec::new())
}

fn config_with_rules(with_default: bool, rules: Vec<Rule>) -> RouterConfig {
    config_with(with_default, rules, false)
}

/// `wan_autoconfigure`: the WAN's routers configure it through its twin.
fn config_with(with_default: bool, rules: Vec<Rule>, wan_autoconfigure: bool) -> RouterConfig {
    config_with_content(with_default, rules, wan_autoconfigure, None)
}

/// [`config`] with the content policy `content`.
fn with_content(content: ContentPolicy) -> RouterConfig {
    config_with_content(true, Vec::new(), false, Some(content))
}

fn config_with_content(
    with_default: bool,
    rules: Vec<Rule>,
    wan_autoconfigure: bool,
    content: Option<ContentPolicy>,
) -> RouterConfig {
    let policy = Policy::new(Action::Drop).set(LAN_ZONE, WAN_ZONE, Action::Accept);
    let stateful = Stateful {
        content: content.map(Arc::new),
        zones: vec![LAN_ZONE, WAN_ZONE],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(rules, policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: Vec::new(),
        recheck_established: false,
        generation: 0,
    };
    let side = |mac, addr, autoconfigure| {
        Some(Ipv6Interface {
            link_local: link_local(EthernetAddress(mac)),
            addresses: vec![(addr, 64)],
            advertise: None,
            autoconfigure,
        })
    };
    let routes: &[StaticRoute6] = &[StaticRoute6 {
        destination: Ipv6Addr::UNSPECIFIED,
        len: 0,
        via: UPSTREAM6,
        port: WAN,
    }];
    RouterConfig::new(
        interfaces(WAN_MTU),
        &[default_route()],
        IcmpLimits::default(),
    )
    .unwrap()
    .with_stateful(stateful)
    .unwrap()
    .with_ipv6(
        vec![
            side(LAN_MAC, GW6, false),
            side(WAN_MAC, GW6_WAN, wan_autoconfigure),
        ],
        if with_default { routes } else { &[] },
    )
    .unwrap()
}

fn neighbors() -> NeighborView {
    NeighborView::new([]).with_ipv6([
        (HOST6, EthernetAddress(HOST_MAC)),
        (UPSTREAM6, EthernetAddress(UPSTREAM_MAC)),
    ])
}

/// [`neighbors`], with the LAN host dual-stack: its MAC also has an IPv4 neighbour entry.
fn dual_stack_neighbors() -> NeighborView {
    NeighborView::new([(ip(HOST), EthernetAddress(HOST_MAC))]).with_ipv6([
        (HOST6, EthernetAddress(HOST_MAC)),
        (UPSTREAM6, EthernetAddress(UPSTREAM_MAC)),
    ])
}

/// QoS at 8 kbit/s each way (a 20 ms burst: a few hundred bytes), with TCP to port 80 from
/// the IPv4 host [`HOST`] in the priority class.
fn slow_qos() -> QosConfig {
    QosConfig {
        uplink_bps: 8_000,
        downlink_bps: 8_000,
        burst_ms: 20,
        classes: vec![ClassRule::new(Class::Priority)
            .with_host(ip(HOST))
            .with_protocol(6)
            .with_ports(80, 80)],
        mode: QosMode::Policer,
    }
}

/// A worker with [`slow_qos`] and the traffic meter on, counting into `meter`.
fn metered_worker(
    neighbors: NeighborView,
    meter: &Arc<HostMeter>,
) -> (Pipeline, Arc<WorkerCounters>) {
    let counters = Arc::new(WorkerCounters::default());
    let with_features = || {
        Arc::new(
            config(true)
                .with_qos(Some(slow_qos()))
                .with_traffic_meter(true),
        )
    };
    let setup = WorkerSetup {
        meter: Some(meter.clone()),
        qos_seed: Some(7),
        ..WorkerSetup::default()
    };
    let mut gw = Pipeline::for_worker(
        with_features(),
        Arc::new(neighbors),
        counters.clone(),
        setup,
    )
    .unwrap();
    // The control thread assigns each worker its share before it publishes the config.
    assign_equal_shares(&[gw.qos_stats()], Some(&slow_qos()));
    gw.set_router(with_features());
    (gw, counters)
}

fn worker(router: RouterConfig, neighbors: NeighborView, worker: u16, workers: u16) -> Pipeline {
    let setup = WorkerSetup {
        worker,
        workers,
        ..WorkerSetup::default()
    };
    Pipeline::for_worker(
        Arc::new(router),
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
        setup,
    )
    .unwrap()
}

fn gateway() -> Pipeline {
    worker(config(true), neighbors(), 0, 1)
}

/// A UDP datagram of `payload` bytes, as it arrives from `mac` at `to_mac`.
fn udp(
    from: (Ipv6Addr, [u8; 6]),
    to: (Ipv6Addr, [u8; 6]),
    hop_limit: u8,
    payload: usize,
) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(from.1, to.1)
        .ipv6(from.0.octets(), to.0.octets(), hop_limit)
        .udp(40000, 53)
        .write(&mut frame, &vec![0x5a; payload])
        .unwrap();
    frame
}

fn from_host(to: Ipv6Addr, hop_limit: u8, payload: usize) -> Vec<u8> {
    udp((HOST6, HOST_MAC), (to, LAN_MAC), hop_limit, payload)
}

/// The reply to [`from_host`]'s datagram, arriving on the WAN.
fn reply_from(remote: Ipv6Addr) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv6(remote.octets(), HOST6.octets(), 60)
        .udp(53, 40000)
        .write(&mut frame, &[0x33; 32])
        .unwrap();
    frame
}

/// Runs `frame` through `pipeline` as received on `port`; the verdict and the frame after.
fn run(pipeline: &mut Pipeline, frame: &[u8], ingress: Ingress, now_ns: u64) -> (Verdict, Vec<u8>) {
    let mut room = vec![0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let verdict = pipeline.process_from(&mut pkt, ingress, now_ns);
    let len = pkt.len();
    (verdict, room[..len].to_vec())
}

fn on(port: u16) -> Ingress {
    Ingress {
        port,
        handed_off: false,
    }
}

/// The ICMPv6 error in `frame`: its type, code, the rest of its header, and the IPv6
/// source and destination, with the checksum verified.
fn icmpv6_error_in(frame: &[u8]) -> (Icmpv6Type, Ipv6Addr, Ipv6Addr) {
    let sliced = SlicedPacket::from_ethernet(frame).expect("the error parses");
    let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else {
        panic!("not IPv6: {sliced:?}")
    };
    let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
    let Some(TransportSlice::Icmpv6(icmp)) = sliced.transport else {
        panic!("not ICMPv6")
    };
    let expected = icmp
        .header()
        .icmp_type
        .calc_checksum(src.octets(), dst.octets(), icmp.payload())
        .unwrap();
    assert_eq!(icmp.header().checksum, expected, "the error's checksum");
    (icmp.icmp_type(), src, dst)
}

#[test]
fn a_lan_flow_goes_out_and_its_replies_come_back() {
    let mut gw = gateway();
    let (verdict, out) = run(&mut gw, &from_host(REMOTE6, 64, 100), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(&out[..6], &UPSTREAM_MAC, "to the default route's next hop");
    assert_eq!(&out[6..12], &WAN_MAC);
    let sent = from_host(REMOTE6, 64, 100);
    assert_eq!(out[ETH_LEN + 7], 63, "the hop limit is decremented");
    assert_eq!(
        out[ETH_LEN + 8..],
        sent[ETH_LEN + 8..],
        "nothing else changes: no NAT66"
    );

    let (verdict, back) = run(&mut gw, &reply_from(REMOTE6), on(WAN), SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    assert_eq!(&back[..6], &HOST_MAC);
    assert_eq!(
        gw.counters().conntrack_ipv6_entries.get(),
        0,
        "published by housekeeping"
    );
    gw.housekeeping(SECOND, 0);
    assert_eq!(gw.counters().conntrack_ipv6_entries.get(), 1);
}

#[test]
fn unsolicited_inbound_is_dropped_and_a_closed_pinhole_stays_closed() {
    let mut gw = gateway();
    let (verdict, _) = run(&mut gw, &reply_from(REMOTE6), on(WAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
    // Nor does the dropped packet open anything: the host's own flow starts afresh.
    let (verdict, _) = run(&mut gw, &reply_from(REMOTE6), on(WAN), 1);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
}

#[test]
fn a_pinhole_lets_one_service_in_from_the_sources_it_names() {
    let pinhole = Pinhole6 {
        interface: WAN,
        protocol: 17,
        ports: 53..=53,
        to: HOST6,
        from: (Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 0), 48),
    };
    let router = config(true).with_pinholes6(vec![pinhole]).unwrap();
    let mut gw = worker(router, neighbors(), 0, 1);
    let to_host = |from: Ipv6Addr, port: u16| {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
            .ipv6(from.octets(), HOST6.octets(), 60)
            .udp(40000, port)
            .write(&mut frame, &[1; 12])
            .unwrap();
        frame
    };
    let (verdict, _) = run(&mut gw, &to_host(REMOTE6, 53), on(WAN), 0);
    assert_eq!(
        verdict,
        Verdict::Transmit { port: LAN },
        "the pinholed service"
    );
    // The host's answer is the flow's reply.
    let mut answer = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
        .udp(53, 40000)
        .write(&mut answer, &[2; 12])
        .unwrap();
    let (verdict, _) = run(&mut gw, &answer, on(LAN), 1);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    // Another port, another source, another host's address: the policy's drop.
    let (verdict, _) = run(&mut gw, &to_host(REMOTE6, 54), on(WAN), 2);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
    let elsewhere = Ipv6Addr::new(0x2001, 0xdb8, 0x98, 0, 0, 0, 0, 1);
    let (verdict, _) = run(&mut gw, &to_host(elsewhere, 53), on(WAN), 2);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
}

/// A rule without IPv4 prefixes applies to IPv6 flows too; one with a prefix does not.
#[test]
fn rules_without_ipv4_prefixes_apply_to_ipv6() {
    let rule = |name: &str, protocol, port: u16, src, action| Rule {
        src,
        protocol: Some(protocol),
        dst_ports: Some(port..=port),
        ..Rule::matching_all(name, action)
    };
    let rules = vec![
        // Only for an IPv4 source: never an IPv6 flow's.
        rule(
            "v4-only",
            17,
            53,
            Some((std::net::Ipv4Addr::new(192, 168, 10, 0), 24)),
            Action::Drop,
        ),
        rule("no-dns-over-tcp", 6, 53, None, Action::Reject),
        rule("pinhole-closed", 17, 123, None, Action::Drop),
    ];
    let pinhole = Pinhole6 {
        interface: WAN,
        protocol: 17,
        ports: 123..=123,
        to: HOST6,
        from: (Ipv6Addr::UNSPECIFIED, 0),
    };
    let router = config_with_rules(true, rules)
        .with_pinholes6(vec![pinhole])
        .unwrap();
    let mut gw = worker(router, neighbors(), 0, 1);
    // UDP 53 out: the IPv4-only rule does not apply.
    let (verdict, _) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    // TCP 53 out: rejected with ICMPv6 administratively prohibited.
    let mut tcp = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
        .tcp(40000, 53, 1, 64240)
        .syn()
        .write(&mut tcp, &[])
        .unwrap();
    let (verdict, error) = run(&mut gw, &tcp, on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (kind, _, _) = icmpv6_error_in(&error);
    assert!(
        matches!(kind, Icmpv6Type::DestinationUnreachable(ref code) if code.code_u8() == 1),
        "{kind:?}"
    );
    // A rule decides a pinholed flow: the pinhole to UDP 123 is closed by it.
    let mut ntp = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv6(REMOTE6.octets(), HOST6.octets(), 60)
        .udp(40000, 123)
        .write(&mut ntp, &[1; 48])
        .unwrap();
    let (verdict, _) = run(&mut gw, &ntp, on(WAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
}

/// IPv6 decisions reach the firewall log as IPv4's do: a logged rule's, and a logged pair's
/// default's; what neither decides (an unlogged pair's accept, a reply) is not logged.
#[test]
fn logged_rules_and_pairs_log_ipv6_decisions() {
    use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
    let rule = Rule {
        protocol: Some(6),
        dst_ports: Some(53..=53),
        ..Rule::matching_all("no-dns-over-tcp", Action::Reject)
    };
    let mut router = config_with_rules(true, vec![rule]);
    let rule_name: Arc<str> = Arc::from("no-dns-over-tcp");
    let pair_name: Arc<str> = Arc::from("policy wan->lan");
    let firewall = &mut router.stateful.firewall;
    firewall.attach_logged(vec![Some(rule_name.clone())]);
    firewall.attach_pair_logged(vec![((WAN_ZONE, LAN_ZONE), Some(pair_name.clone()))]);
    let log = Arc::new(FirewallLog::new(16));
    let setup = WorkerSetup {
        firewall_log: Some(FirewallLogger::new(log.clone(), 100, 100)),
        ..WorkerSetup::default()
    };
    let mut gw = Pipeline::for_worker(
        Arc::new(router),
        Arc::new(neighbors()),
        Arc::new(WorkerCounters::default()),
        setup,
    )
    .unwrap();
    // UDP 53 out: the pair lan -> wan accepts, unlogged; its reply is established.
    let (verdict, _) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let mut reply = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv6(REMOTE6.octets(), HOST6.octets(), 60)
        .udp(53, 40000)
        .write(&mut reply, &[1; 8])
        .unwrap();
    let (verdict, _) = run(&mut gw, &reply, on(WAN), 1);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    // TCP 53 out: the logged rule rejects it.
    let mut tcp = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
        .tcp(40001, 53, 1, 64240)
        .syn()
        .write(&mut tcp, &[])
        .unwrap();
    run(&mut gw, &tcp, on(LAN), 2);
    // UDP in to another port: the pair wan -> lan's default drops it, logged.
    let mut inbound = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv6(REMOTE6.octets(), HOST6.octets(), 60)
        .udp(40002, 54)
        .write(&mut inbound, &[1; 8])
        .unwrap();
    let (verdict, _) = run(&mut gw, &inbound, on(WAN), 3);
    assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));

    let mut events = Vec::new();
    log.drain(|event| events.push(event));
    let seen: Vec<_> = events
        .iter()
        .map(|event| (event.rule.clone(), event.action, event.from, event.to))
        .collect();
    assert_eq!(
        seen,
        [
            (rule_name, Action::Reject, LAN_ZONE, WAN_ZONE),
            (pair_name, Action::Drop, WAN_ZONE, LAN_ZONE),
        ]
    );
    assert_eq!(events[0].src, (HOST6.into(), 40001));
    assert_eq!(events[0].dst, (REMOTE6.into(), 53));
    assert_eq!((events[0].ingress, events[0].egress), (LAN, Some(WAN)));
    assert_eq!(events[1].src, (REMOTE6.into(), 40002));
    assert_eq!(events[1].dst, (HOST6.into(), 54));
    assert_eq!(events[1].protocol, 17);
    assert_eq!(log.lost(), 0);
}

#[test]
fn routers_raise_icmpv6_errors_from_the_ingress_link() {
    let mut gw = gateway();
    // Hop limit 1: Time Exceeded, code 0, to the host from our LAN address.
    let (verdict, error) = run(&mut gw, &from_host(REMOTE6, 1, 100), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    assert_eq!(&error[..6], &HOST_MAC);
    let (kind, src, dst) = icmpv6_error_in(&error);
    assert!(matches!(kind, Icmpv6Type::TimeExceeded(_)), "{kind:?}");
    assert_eq!((src, dst), (GW6, HOST6));

    // 1401 bytes for a 1400-byte link: Packet Too Big with that MTU (never fragmented).
    let big = from_host(REMOTE6, 64, WAN_MTU as usize - 40 - 8 + 1);
    let (verdict, error) = run(&mut gw, &big, on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (kind, _, _) = icmpv6_error_in(&error);
    assert_eq!(kind, Icmpv6Type::PacketTooBig { mtu: 1400 });
    assert!(
        error.len() <= ETH_LEN + 1280,
        "the error fits IPv6's minimum MTU"
    );
    // Exactly the MTU passes.
    let (verdict, _) = run(
        &mut gw,
        &from_host(REMOTE6, 64, WAN_MTU as usize - 48),
        on(LAN),
        0,
    );
    assert_eq!(verdict, Verdict::Transmit { port: WAN });

    // Without a default route: Destination Unreachable, no route.
    let mut gw = worker(config(false), neighbors(), 0, 1);
    let (verdict, error) = run(&mut gw, &from_host(REMOTE6, 64, 10), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (kind, _, _) = icmpv6_error_in(&error);
    assert!(
        matches!(kind, Icmpv6Type::DestinationUnreachable(_)),
        "{kind:?}"
    );
    let counters = gw.counters();
    assert_eq!(counters.icmp_errors_sent.get(), 1);
}

#[test]
fn icmpv6_errors_about_tracked_flows_pass_and_others_do_not() {
    let mut gw = gateway();
    let sent = from_host(REMOTE6, 64, 100);
    run(&mut gw, &sent, on(LAN), 0);
    // A router beyond the upstream answers the host's datagram with Packet Too Big.
    let far_router = Ipv6Addr::new(0x2001, 0xdb8, 0x98, 0, 0, 0, 0, 1);
    let error_about = |original: &[u8], to: Ipv6Addr| {
        let mut room = vec![0u8; 1500];
        let mut original = original.to_vec();
        // As it reached the far router: one hop less.
        original[ETH_LEN + 7] -= 1;
        let len = write_icmpv6_error(
            &mut room,
            &original[ETH_LEN..],
            Icmpv6Error::PacketTooBig { mtu: 1280 },
            far_router,
            EthernetAddress(UPSTREAM_MAC),
            EthernetAddress(WAN_MAC),
        )
        .unwrap();
        room.truncate(len);
        // write_icmpv6_error addresses it to the quoted packet's source; a forged one may not.
        assert_eq!(
            Ipv6Addr::from(<[u8; 16]>::try_from(&room[38..54]).unwrap()),
            to
        );
        room
    };
    let related = error_about(&sent, HOST6);
    let (verdict, out) = run(&mut gw, &related, on(WAN), 1);
    assert_eq!(
        verdict,
        Verdict::Transmit { port: LAN },
        "RFC 4890: Packet Too Big must pass"
    );
    assert_eq!(&out[..6], &HOST_MAC);

    // About a flow nobody opened: dropped.
    let unrelated = error_about(
        &from_host(Ipv6Addr::new(0x2001, 0xdb8, 0x97, 0, 0, 0, 0, 7), 64, 100),
        HOST6,
    );
    let (verdict, _) = run(&mut gw, &unrelated, on(WAN), 1);
    assert_eq!(verdict, Verdict::Drop(DropReason::UnrelatedIcmpError));
}

#[test]
fn what_is_never_forwarded() {
    let mut gw = gateway();
    let link_local_dst = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99);
    let (verdict, _) = run(&mut gw, &from_host(link_local_dst, 64, 8), on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::Ipv6NotForwarded));
    let link_local_src = udp(
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2), HOST_MAC),
        (REMOTE6, LAN_MAC),
        64,
        8,
    );
    let (verdict, _) = run(&mut gw, &link_local_src, on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::Ipv6NotForwarded));
    // A site-wide group: no multicast routing.
    let group = Ipv6Addr::new(0xff05, 0, 0, 0, 0, 0, 0, 0x1234);
    let mut frame = from_host(group, 64, 8);
    frame[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0x12, 0x34]);
    let (verdict, _) = run(&mut gw, &frame, on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::Ipv6NotForwarded));
    // From the WAN's prefix, on the LAN: source validation (strict on the LAN).
    let spoofed = udp(
        (Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 9), HOST_MAC),
        (REMOTE6, LAN_MAC),
        64,
        8,
    );
    let (verdict, _) = run(&mut gw, &spoofed, on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::SourceValidation));
    // To the unspecified address, which the default route would otherwise take.
    let (verdict, _) = run(
        &mut gw,
        &from_host(Ipv6Addr::UNSPECIFIED, 64, 8),
        on(LAN),
        0,
    );
    assert_eq!(verdict, Verdict::Drop(DropReason::MartianAddress));
    // The gateway's own address as a source: a spoof.
    let ours = udp((GW6, HOST_MAC), (REMOTE6, LAN_MAC), 64, 8);
    let (verdict, _) = run(&mut gw, &ours, on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::MartianAddress));
    // A bad UDP checksum opens no flow.
    let mut corrupt = from_host(REMOTE6, 64, 8);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    let (verdict, _) = run(&mut gw, &corrupt, on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::L4Checksum));
    // Another interface's address is the gateway's, not forwarded to its link.
    let (verdict, _) = run(&mut gw, &from_host(GW6_WAN, 64, 8), on(LAN), 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::Ipv6LocalUnhandled));
}

#[test]
fn an_unknown_next_hop_goes_to_the_control_thread() {
    let mut gw = worker(config(true), NeighborView::new([]), 0, 1);
    let (verdict, out) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(
        verdict,
        Verdict::Control(ControlWork::Resolve6 { port: WAN })
    );
    assert_eq!(
        out[ETH_LEN + 7],
        63,
        "held with its hop limit already decremented"
    );
}

/// On a PPPoE link every next hop is the access concentrator, whose MAC the session's
/// framing writes: an unknown one is sent, not resolved.
#[test]
fn a_pppoe_links_next_hops_need_no_resolution() {
    let router = config(true).with_pppoe(&[false, true]).unwrap();
    let mut gw = worker(router, NeighborView::new([]), 0, 1);
    let (verdict, out) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(out[6..12], WAN_MAC, "from the WAN's MAC");
    // Elsewhere an unknown next hop still goes to the control thread.
    let router = config(true).with_pppoe(&[true, false]).unwrap();
    let mut gw = worker(router, NeighborView::new([]), 0, 1);
    let (verdict, _) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(
        verdict,
        Verdict::Control(ControlWork::Resolve6 { port: WAN })
    );
}

/// Both directions of every flow, and the errors about it, are decided on one worker,
/// whichever worker each packet reaches first.
#[test]
fn both_directions_meet_on_one_worker() {
    for workers in 1..=4u16 {
        let mut pipelines: Vec<Pipeline> = (0..workers)
            .map(|w| worker(config(true), neighbors(), w, workers))
            .collect();
        for i in 0..64u16 {
            let remote = Ipv6Addr::new(0x2001, 0xdb8, 0x99, i, 0, 0, 0, 1);
            let out = from_host(remote, 64, 8);
            let first = (i % workers) as usize;
            let owner = |verdict| match verdict {
                Verdict::Handoff { worker } => usize::from(worker),
                _ => first,
            };
            let (verdict, _) = run(&mut pipelines[first], &out, on(LAN), 0);
            let out_owner = owner(verdict);
            if out_owner != first {
                let handed = Ingress {
                    port: LAN,
                    handed_off: true,
                };
                let (verdict, _) = run(&mut pipelines[out_owner], &out, handed, 0);
                assert_eq!(verdict, Verdict::Transmit { port: WAN });
            } else {
                assert_eq!(verdict, Verdict::Transmit { port: WAN });
            }
            // The reply reaches some other worker first.
            let reply_first = (first + 1) % usize::from(workers);
            let (verdict, _) = run(&mut pipelines[reply_first], &reply_from(remote), on(WAN), 1);
            let reply_owner = match verdict {
                Verdict::Handoff { worker } => usize::from(worker),
                Verdict::Transmit { port: LAN } => reply_first,
                other => panic!("the reply on worker {reply_first} of {workers}: {other:?}"),
            };
            assert_eq!(reply_owner, out_owner, "{workers} workers, remote {remote}");
            let handed = Ingress {
                port: WAN,
                handed_off: true,
            };
            let (verdict, _) = run(&mut pipelines[reply_owner], &reply_from(remote), handed, 1);
            assert_eq!(verdict, Verdict::Transmit { port: LAN });
        }
    }
}

/// An ISP's Router Advertisement (as RFC 4861 6.1.2 admits it: from a link-local address,
/// hop limit 255) arriving from `mac` with `hop_limit`.
fn router_advert(from: Ipv6Addr, mac: [u8; 6], to_mac: [u8; 6], hop_limit: u8) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(mac, to_mac)
        .ipv6(from.octets(), ALL_NODES.octets(), hop_limit)
        .icmpv6(Icmpv6Type::Unknown {
            type_u8: 134,
            code_u8: 0,
            bytes5to8: [64, 0, 0x07, 0x08],
        })
        .write(&mut frame, &[0; 8])
        .unwrap();
    frame
}

#[test]
fn an_autoconfigured_wan_gives_its_twin_the_isps_advertisements_and_dhcpv6_answers() {
    let isp_link_local = link_local(EthernetAddress(UPSTREAM_MAC));
    let wan_link_local = link_local(EthernetAddress(WAN_MAC));
    let dhcpv6 = |src_port: u16, dst_port: u16| {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
            .ipv6(isp_link_local.octets(), wan_link_local.octets(), 64)
            .udp(src_port, dst_port)
            .write(&mut frame, &[7; 40])
            .unwrap();
        frame
    };
    let twins = |router: RouterConfig| {
        router
            .with_punt(PuntConfig {
                twins: vec![true, true],
                ..PuntConfig::none(2)
            })
            .unwrap()
    };
    let mut gw = worker(
        twins(config_with(true, Vec::new(), true)),
        neighbors(),
        0,
        1,
    );
    let punted = Verdict::Punt { port: WAN };
    let ra = router_advert(
        isp_link_local,
        UPSTREAM_MAC,
        multicast_mac(ALL_NODES).0,
        255,
    );
    assert_eq!(run(&mut gw, &ra, on(WAN), 0).0, punted, "the ISP's RA");
    assert_eq!(run(&mut gw, &dhcpv6(547, 546), on(WAN), 1).0, punted);
    // Not what RFC 4861 lets a host take: a routed RA, or one from a global address.
    let routed = router_advert(
        isp_link_local,
        UPSTREAM_MAC,
        multicast_mac(ALL_NODES).0,
        254,
    );
    assert_ne!(run(&mut gw, &routed, on(WAN), 2).0, punted);
    let global = router_advert(UPSTREAM6, UPSTREAM_MAC, multicast_mac(ALL_NODES).0, 255);
    assert_ne!(run(&mut gw, &global, on(WAN), 3).0, punted);
    // A DHCPv6 answer from beyond the link is none to the twin's client.
    let mut routed_answer = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv6(REMOTE6.octets(), wan_link_local.octets(), 64)
        .udp(547, 546)
        .write(&mut routed_answer, &[7; 40])
        .unwrap();
    assert_ne!(run(&mut gw, &routed_answer, on(WAN), 4).0, punted);
    // A DHCPv6 request is not an answer; the LAN's routers (a guest's RA) configure nothing.
    assert_ne!(run(&mut gw, &dhcpv6(546, 547), on(WAN), 4).0, punted);
    let guest_ra = router_advert(
        link_local(EthernetAddress(HOST_MAC)),
        HOST_MAC,
        multicast_mac(ALL_NODES).0,
        255,
    );
    assert!(!matches!(
        run(&mut gw, &guest_ra, on(LAN), 5).0,
        Verdict::Punt { .. }
    ));
    // Without `autoconfigure` the WAN's twin gets neither.
    let mut gw = worker(
        twins(config_with(true, Vec::new(), false)),
        neighbors(),
        0,
        1,
    );
    assert_ne!(run(&mut gw, &ra, on(WAN), 0).0, punted);
    assert_ne!(run(&mut gw, &dhcpv6(547, 546), on(WAN), 1).0, punted);
}

// --- QoS and the traffic meter on IPv6 ---------------------------------------------------------

/// A dual-stack host's IPv6 traffic is its IPv4 address's: metered under it both ways, and
/// policed in its share by the rules that name it. Without an IPv4 neighbour for its MAC,
/// the meter counts it as unattributed, and nothing is lost either way.
#[test]
fn a_dual_stack_host_s_ipv6_traffic_counts_as_its_ipv4_address_s() {
    for dual_stack in [true, false] {
        let meter = Arc::new(HostMeter::new(64));
        let neighbours = if dual_stack {
            dual_stack_neighbors()
        } else {
            neighbors()
        };
        let (mut gw, counters) = metered_worker(neighbours, &meter);
        let [uplink, downlink] = gw.qos_stats();
        let datagram = from_host(REMOTE6, 64, 200);
        let (mut sent, mut policed) = (0u64, 0u64);
        // Twenty 254-byte datagrams at once: more than the 8 kbit/s burst lets through.
        for _ in 0..20 {
            match run(&mut gw, &datagram, on(LAN), SECOND).0 {
                Verdict::Transmit { port: WAN } => sent += 1,
                Verdict::Drop(DropReason::QosPoliced) => policed += 1,
                other => panic!("unexpected verdict {other:?}"),
            }
        }
        assert!(sent > 0 && policed > 0, "{sent} sent, {policed} policed");
        assert_eq!(uplink.bulk.passed_packets.get(), sent);
        assert_eq!(uplink.bulk.dropped_packets.get(), policed);
        let (verdict, _) = run(&mut gw, &reply_from(REMOTE6), on(WAN), 2 * SECOND);
        assert_eq!(verdict, Verdict::Transmit { port: LAN });
        assert_eq!(downlink.bulk.passed_packets.get(), 1);
        let up = sent * datagram.len() as u64;
        let down = reply_from(REMOTE6).len() as u64;
        let listed: Vec<_> = meter.snapshot().collect();
        let unattributed = meter.unattributed();
        if dual_stack {
            assert_eq!(listed.len(), 1, "{listed:?}");
            assert_eq!(listed[0].ip, ip(HOST));
            assert_eq!((listed[0].up_bytes, listed[0].down_bytes), (up, down));
            assert_eq!(unattributed.total_bytes(), 0);
        } else {
            assert!(listed.is_empty(), "{listed:?}");
            assert_eq!((unattributed.up_bytes, unattributed.down_bytes), (up, down));
        }

        // TCP to port 80 is the IPv4 host's priority traffic: so is its IPv6 traffic.
        let mut web = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
            .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
            .tcp(40100, 80, 1, 64000)
            .syn()
            .write(&mut web, &[])
            .unwrap();
        run(&mut gw, &web, on(LAN), 3 * SECOND);
        let priority = uplink.priority.passed_packets.get() + uplink.priority.dropped_packets.get();
        assert_eq!(priority, u64::from(dual_stack), "dual stack: {dual_stack}");
        assert_eq!(counters.dropped(DropReason::QosPoliced), policed);
    }
}

/// A shortcut's hosts are its sender's: a packet of the same flow direction from another MAC
/// (another device using the address) is counted as the full path counts it, not as the
/// host the shortcut was made for.
#[test]
fn a_flow_s_packet_from_another_mac_is_not_charged_to_the_shortcut_s_host() {
    let meter = Arc::new(HostMeter::new(64));
    let (mut gw, counters) = metered_worker(dual_stack_neighbors(), &meter);
    // QUIC, say: not DNS, whose queries never take the fast path.
    let quic = |outbound: bool| {
        let mut frame = Vec::new();
        let builder = if outbound {
            PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
                .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
                .udp(40000, 443)
        } else {
            PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
                .ipv6(REMOTE6.octets(), HOST6.octets(), 60)
                .udp(443, 40000)
        };
        builder.write(&mut frame, &[0x5a; 10]).unwrap();
        frame
    };
    let datagram = quic(true);
    run(&mut gw, &datagram, on(LAN), SECOND);
    run(&mut gw, &quic(false), on(WAN), SECOND);
    // Established: this one makes the shortcut, the next takes it.
    run(&mut gw, &datagram, on(LAN), 2 * SECOND);
    let fast = counters.fast_path.get();
    run(&mut gw, &datagram, on(LAN), 3 * SECOND);
    assert_eq!(counters.fast_path.get(), fast + 1, "the shortcut is taken");
    let mut impostor = datagram.clone();
    impostor[11] ^= 0x40;
    let (verdict, _) = run(&mut gw, &impostor, on(LAN), 4 * SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(meter.unattributed().up_bytes, impostor.len() as u64);
    let host = meter.snapshot().next().unwrap();
    assert_eq!(host.up_bytes, 3 * datagram.len() as u64);
}

/// A host's IPv4 address is only its IPv6 traffic's when it is on that interface's subnet:
/// an IPv4 neighbour elsewhere with the same MAC (a spoofer, a host moved between links)
/// does not take the traffic.
#[test]
fn a_mac_s_ipv4_address_on_another_subnet_is_not_the_host_s() {
    let meter = Arc::new(HostMeter::new(64));
    let elsewhere = NeighborView::new([(ip(UPSTREAM), EthernetAddress(HOST_MAC))]).with_ipv6([
        (HOST6, EthernetAddress(HOST_MAC)),
        (UPSTREAM6, EthernetAddress(UPSTREAM_MAC)),
    ]);
    let (mut gw, _) = metered_worker(elsewhere, &meter);
    let datagram = from_host(REMOTE6, 64, 10);
    assert_eq!(
        run(&mut gw, &datagram, on(LAN), SECOND).0,
        Verdict::Transmit { port: WAN }
    );
    assert_eq!(meter.snapshot().count(), 0);
    assert_eq!(meter.unattributed().up_bytes, datagram.len() as u64);
}

// --- keyword block and parental control on IPv6 ----------------------------------------------

/// Blocks `blocked.example` (and its subdomains) for every device, and pauses `paused`.
fn blocking(paused: Option<DeviceMatch>) -> ContentPolicy {
    let policies = paused
        .map(|device| ParentalPolicy {
            devices: vec![device],
            blocked_categories: Vec::new(),
            windows: Vec::new(),
            paused: true,
        })
        .into_iter()
        .collect();
    ContentPolicy::new(
        &["blocked.example".to_string()],
        &[],
        Vec::new(),
        policies,
        DnsAction::Nxdomain,
        0,
    )
    .unwrap()
}

/// A worker with `policy` and `neighbors`, and its counters.
fn content_worker(
    policy: ContentPolicy,
    neighbors: NeighborView,
) -> (Pipeline, Arc<WorkerCounters>) {
    let counters = Arc::new(WorkerCounters::default());
    let gw = Pipeline::for_worker(
        Arc::new(with_content(policy)),
        Arc::new(neighbors),
        counters.clone(),
        WorkerSetup::default(),
    )
    .unwrap();
    (gw, counters)
}

/// A DNS query for `name`'s AAAA records.
fn aaaa_query(id: u16, name: &str) -> Vec<u8> {
    let mut query = id.to_be_bytes().to_vec();
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 28, 0, 1]);
    query
}

/// A segment from the LAN host's port `port` to the remote's `remote_port`, or back.
fn tcp6(
    outbound: bool,
    (port, remote_port): (u16, u16),
    (seq, ack): (u32, u32),
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let builder = if outbound {
        PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
            .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
            .tcp(port, remote_port, seq, 64000)
    } else {
        PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
            .ipv6(REMOTE6.octets(), HOST6.octets(), 60)
            .tcp(remote_port, port, seq, 64000)
    };
    let mut builder = if flags & SYN != 0 {
        builder.syn()
    } else {
        builder
    };
    if flags & ACK != 0 {
        builder = builder.ack(ack);
    }
    let mut frame = Vec::new();
    builder.write(&mut frame, payload).unwrap();
    frame
}

/// A LAN device's DNS queries over IPv6 are checked one by one, AAAA as A: a blocked name
/// is answered NXDOMAIN from the resolver's address, on a flow's first query or a later one.
#[test]
fn a_lan_device_s_ipv6_dns_queries_are_checked_one_by_one() {
    let (mut gw, counters) = content_worker(blocking(None), dual_stack_neighbors());
    let query = |id, name| {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
            .ipv6(HOST6.octets(), REMOTE6.octets(), 64)
            .udp(40050, 53)
            .write(&mut frame, &aaaa_query(id, name))
            .unwrap();
        frame
    };
    let (verdict, _) = run(&mut gw, &query(1, "news.example"), on(LAN), 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    for (id, at) in [(2, SECOND), (3, 2 * SECOND)] {
        let (verdict, reply) = run(&mut gw, &query(id, "ads.blocked.example"), on(LAN), at);
        assert_eq!(verdict, Verdict::Transmit { port: LAN }, "query {id}");
        let sliced = SlicedPacket::from_ethernet(&reply).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else {
            panic!("not IPv6")
        };
        let header = ip.header().to_header();
        assert_eq!(
            (header.source, header.destination),
            (REMOTE6.octets(), HOST6.octets())
        );
        let Some(TransportSlice::Udp(udp)) = sliced.transport else {
            panic!("not UDP")
        };
        let udp_header = udp.to_header();
        assert_eq!(
            (udp_header.source_port, udp_header.destination_port),
            (53, 40050)
        );
        assert_eq!(
            udp_header.checksum,
            udp_header
                .calc_checksum_ipv6(&header, udp.payload())
                .unwrap()
        );
        let dns = udp.payload();
        assert_eq!(&dns[..2], &id.to_be_bytes());
        assert_eq!(dns[3] & 0x0f, 3, "NXDOMAIN");
        assert_eq!(&reply[..6], &HOST_MAC, "back to the host");
        // Later queries of the flow never take the fast path, which would skip the check.
        let (verdict, _) = run(&mut gw, &query(10 + id, "news.example"), on(LAN), at);
        assert_eq!(verdict, Verdict::Transmit { port: WAN });
    }
    assert_eq!(counters.dropped(DropReason::ContentBlocked), 2);
}

/// A LAN device's IPv6 TCP flows are inspected as IPv4's: a Host header or SNI naming a
/// blocked domain resets the flow toward the client and drops what follows of it; an
/// allowed flow, once judged, takes the fast path.
#[test]
fn an_ipv6_flow_to_a_blocked_name_is_reset() {
    let (mut gw, counters) = content_worker(blocking(None), dual_stack_neighbors());
    let open = |gw: &mut Pipeline, ports, at| {
        let (verdict, _) = run(gw, &tcp6(true, ports, (100, 0), SYN, &[]), on(LAN), at);
        assert_eq!(verdict, Verdict::Transmit { port: WAN });
        let (verdict, _) = run(
            gw,
            &tcp6(false, ports, (900, 101), SYN | ACK, &[]),
            on(WAN),
            at,
        );
        assert_eq!(verdict, Verdict::Transmit { port: LAN });
        let (verdict, _) = run(gw, &tcp6(true, ports, (101, 901), ACK, &[]), on(LAN), at);
        assert_eq!(verdict, Verdict::Transmit { port: WAN });
    };
    let request = |host: &str| format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();

    let blocked = (40100, 80);
    open(&mut gw, blocked, SECOND);
    let head = request("www.blocked.example");
    let (verdict, reset) = run(
        &mut gw,
        &tcp6(true, blocked, (101, 901), ACK, &head),
        on(LAN),
        SECOND,
    );
    assert_eq!(
        verdict,
        Verdict::Transmit { port: LAN },
        "a reset toward the client"
    );
    let sliced = SlicedPacket::from_ethernet(&reset).unwrap();
    let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else {
        panic!("not IPv6")
    };
    let header = ip.header().to_header();
    assert_eq!(
        (header.source, header.destination),
        (REMOTE6.octets(), HOST6.octets())
    );
    let Some(TransportSlice::Tcp(tcp)) = sliced.transport else {
        panic!("not TCP")
    };
    let tcp_header = tcp.to_header();
    assert!(tcp_header.rst);
    assert_eq!(
        (tcp_header.source_port, tcp_header.destination_port),
        (80, 40100)
    );
    assert_eq!(tcp_header.sequence_number, 901, "the client's ACK");
    assert_eq!(
        tcp_header.checksum,
        tcp_header
            .calc_checksum_ipv6(&header, tcp.payload())
            .unwrap()
    );
    let (verdict, _) = run(
        &mut gw,
        &tcp6(false, blocked, (901, 101), ACK, b"HTTP/1.1 200"),
        on(WAN),
        SECOND,
    );
    assert_eq!(
        verdict,
        Verdict::Drop(DropReason::ContentBlocked),
        "the server's answer"
    );
    assert_eq!(counters.dropped(DropReason::ContentBlocked), 2);

    let allowed = (40101, 80);
    open(&mut gw, allowed, 2 * SECOND);
    let head = request("www.example.org");
    let (verdict, _) = run(
        &mut gw,
        &tcp6(true, allowed, (101, 901), ACK, &head),
        on(LAN),
        2 * SECOND,
    );
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let fast = counters.fast_path.get();
    let next = 101 + head.len() as u32;
    let (verdict, _) = run(
        &mut gw,
        &tcp6(true, allowed, (next, 901), ACK, b"more"),
        on(LAN),
        2 * SECOND,
    );
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(counters.fast_path.get(), fast + 1, "judged: the fast path");
}

/// The inspector follows a stream for the device that opened the flow, even when the
/// MAC's IPv4 neighbour entry goes away mid-stream (the device would otherwise look new, and
/// its half-read request head be thrown away and the flow allowed).
#[test]
fn a_request_head_split_across_a_neighbour_change_is_still_read() {
    let (mut gw, counters) = content_worker(blocking(None), dual_stack_neighbors());
    let ports = (40200, 80);
    run(
        &mut gw,
        &tcp6(true, ports, (100, 0), SYN, &[]),
        on(LAN),
        SECOND,
    );
    run(
        &mut gw,
        &tcp6(false, ports, (900, 101), SYN | ACK, &[]),
        on(WAN),
        SECOND,
    );
    run(
        &mut gw,
        &tcp6(true, ports, (101, 901), ACK, &[]),
        on(LAN),
        SECOND,
    );
    let head = b"GET / HTTP/1.1\r\nHost: www.blocked.example\r\n\r\n";
    let (first, second) = head.split_at(10);
    let (verdict, _) = run(
        &mut gw,
        &tcp6(true, ports, (101, 901), ACK, first),
        on(LAN),
        SECOND,
    );
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    gw.set_neighbors(Arc::new(neighbors()));
    let seq = 101 + first.len() as u32;
    let (verdict, _) = run(
        &mut gw,
        &tcp6(true, ports, (seq, 901), ACK, second),
        on(LAN),
        SECOND,
    );
    assert_eq!(verdict, Verdict::Transmit { port: LAN }, "the reset");
    assert_eq!(counters.dropped(DropReason::ContentBlocked), 1);
}

/// Parental control knows a dual-stack device's IPv6 flows by its MAC, and by its IPv4
/// address through the MAC; a paused device opens none, and replies to it are not judged.
#[test]
fn a_paused_device_opens_no_ipv6_flows() {
    let cases = [
        (
            DeviceMatch::Mac(EthernetAddress(HOST_MAC)),
            dual_stack_neighbors(),
            true,
        ),
        (
            DeviceMatch::Mac(EthernetAddress(HOST_MAC)),
            neighbors(),
            true,
        ),
        (DeviceMatch::Ip(ip(HOST)), dual_stack_neighbors(), true),
        // Named by IPv4 address, with no IPv4 neighbour for its MAC: not recognised.
        (DeviceMatch::Ip(ip(HOST)), neighbors(), false),
        (
            DeviceMatch::Mac(EthernetAddress([2, 0, 0, 0, 0, 0x77])),
            dual_stack_neighbors(),
            false,
        ),
    ];
    for (device, neighbours, paused) in cases {
        let (mut gw, _) = content_worker(blocking(Some(device)), neighbours);
        let (verdict, _) = run(&mut gw, &from_host(REMOTE6, 64, 20), on(LAN), SECOND);
        let expected = if paused {
            Verdict::Drop(DropReason::ParentalBlocked)
        } else {
            Verdict::Transmit { port: WAN }
        };
        assert_eq!(verdict, expected, "{device:?}");
    }
}

/// A UDP datagram from the LAN host to `to`, port 53, in an IPv6 fragment: the first
/// (`offset` 0, more to come) with the UDP header, or a later one of bare data.
fn fragment_from_host(to: Ipv6Addr, offset_units: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&LAN_MAC);
    frame.extend_from_slice(&HOST_MAC);
    frame.extend_from_slice(&[0x86, 0xdd]);
    let mut upper = Vec::new();
    if offset_units == 0 {
        let udp_len = (8 + data.len() + 64) as u16; // the whole datagram's
        upper.extend_from_slice(&40050u16.to_be_bytes());
        upper.extend_from_slice(&53u16.to_be_bytes());
        upper.extend_from_slice(&udp_len.to_be_bytes());
        upper.extend_from_slice(&[0x12, 0x34]); // a first fragment's checksum covers all
    }
    upper.extend_from_slice(data);
    let payload_len = (8 + upper.len()) as u16;
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&payload_len.to_be_bytes());
    frame.extend_from_slice(&[44, 64]);
    frame.extend_from_slice(&HOST6.octets());
    frame.extend_from_slice(&to.octets());
    let offset_and_more = (offset_units << 3) | u16::from(more);
    frame.extend_from_slice(&[17, 0]);
    frame.extend_from_slice(&offset_and_more.to_be_bytes());
    frame.extend_from_slice(&0x5eed_u32.to_be_bytes());
    frame.extend_from_slice(&upper);
    frame
}

/// Fragments cannot carry a device past the content policy: a DNS query in fragments is
/// refused (it cannot be read whole), and a paused device's later fragments are dropped.
#[test]
fn fragments_do_not_get_past_the_content_policy() {
    let (mut gw, _) = content_worker(blocking(None), dual_stack_neighbors());
    let first = fragment_from_host(REMOTE6, 0, true, &aaaa_query(1, "ads.blocked"));
    assert_eq!(
        run(&mut gw, &first, on(LAN), SECOND).0,
        Verdict::Drop(DropReason::ContentBlocked)
    );
    // A later fragment passes where the zone policy admits new flows, as before.
    let later = fragment_from_host(REMOTE6, 8, false, &[0x42; 64]);
    assert_eq!(
        run(&mut gw, &later, on(LAN), SECOND).0,
        Verdict::Transmit { port: WAN }
    );
    let paused = blocking(Some(DeviceMatch::Mac(EthernetAddress(HOST_MAC))));
    let (mut gw, _) = content_worker(paused, dual_stack_neighbors());
    assert_eq!(
        run(&mut gw, &later, on(LAN), SECOND).0,
        Verdict::Drop(DropReason::ParentalBlocked)
    );
}

// --- the IPv6 fast path against the full path ------------------------------------------------

/// Flows of the differential test: the LAN host's port, the remote port, TCP or UDP.
const FLOWS6: [(u16, u16, bool); 3] = [(40000, 443, true), (40001, 53, false), (40002, 80, true)];

/// One packet of the differential test: which flow, which way, what it carries, and how it
/// may be spoilt.
#[derive(Clone, Copy, Debug)]
struct Step6 {
    flow: usize,
    outbound: bool,
    flags: u8,
    payload: usize,
    mangle: Option<Mangle6>,
}

#[derive(Clone, Copy, Debug)]
enum Mangle6 {
    HopLimit(u8),
    OtherMac,
    /// From another sender on the link: the features' hosts are another's.
    OtherSender,
    TooBig,
    PayloadLengthPastFrame,
    TruncatedTcp,
}

/// Between bursts: nothing, a reload, or the upstream router moving to another MAC.
#[derive(Clone, Copy, Debug)]
enum Change6 {
    Reload,
    NeighbourMoves,
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;

fn step6() -> impl Strategy<Value = Step6> {
    let flags = prop_oneof![
        6 => Just(ACK),
        1 => Just(ACK | 0x08),
        1 => Just(SYN),
        1 => Just(SYN | ACK),
        1 => Just(ACK | 0x01),
        1 => Just(0x04),
    ];
    let mangle = prop::option::weighted(
        0.15,
        prop_oneof![
            Just(Mangle6::HopLimit(1)),
            Just(Mangle6::HopLimit(0)),
            Just(Mangle6::HopLimit(2)),
            Just(Mangle6::OtherMac),
            Just(Mangle6::OtherSender),
            Just(Mangle6::TooBig),
            Just(Mangle6::PayloadLengthPastFrame),
            Just(Mangle6::TruncatedTcp),
        ],
    );
    (0..FLOWS6.len(), any::<bool>(), flags, 0..64usize, mangle).prop_map(
        |(flow, outbound, flags, payload, mangle)| Step6 {
            flow,
            outbound,
            flags,
            payload,
            mangle,
        },
    )
}

/// The frame of `step`, with sequence numbers that follow the flow's (`seq[flow][way]`: the
/// next of each way), so that most TCP segments are in the window.
fn frame6(step: &Step6, seq: &mut [[u32; 2]; 3]) -> (Vec<u8>, Ingress) {
    let (host_port, remote_port, is_tcp) = FLOWS6[step.flow];
    let way = usize::from(!step.outbound);
    let payload_len = match step.mangle {
        Some(Mangle6::TooBig) => 1400,
        _ => step.payload,
    };
    let payload = vec![0x5a; payload_len];
    let (builder, ingress) = if step.outbound {
        (
            PacketBuilder::ethernet2(HOST_MAC, LAN_MAC).ipv6(HOST6.octets(), REMOTE6.octets(), 64),
            on(LAN),
        )
    } else {
        (
            PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC).ipv6(
                REMOTE6.octets(),
                HOST6.octets(),
                64,
            ),
            on(WAN),
        )
    };
    let (src_port, dst_port) = if step.outbound {
        (host_port, remote_port)
    } else {
        (remote_port, host_port)
    };
    let mut frame = Vec::new();
    if is_tcp {
        let mut tcp = builder.tcp(src_port, dst_port, seq[step.flow][way], 64000);
        if step.flags & SYN != 0 {
            tcp = tcp.syn();
        }
        if step.flags & ACK != 0 {
            tcp = tcp.ack(seq[step.flow][1 - way]);
        }
        if step.flags & 0x01 != 0 {
            tcp = tcp.fin();
        }
        if step.flags & 0x04 != 0 {
            tcp = tcp.rst();
        }
        if step.flags & 0x08 != 0 {
            tcp = tcp.psh();
        }
        tcp.write(&mut frame, &payload).unwrap();
        let consumed = u32::from(step.flags & (SYN | 0x01) != 0);
        seq[step.flow][way] = seq[step.flow][way].wrapping_add(payload_len as u32 + consumed);
    } else {
        builder
            .udp(src_port, dst_port)
            .write(&mut frame, &payload)
            .unwrap();
    }
    const HOP_LIMIT: usize = 14 + 7;
    match step.mangle {
        Some(Mangle6::HopLimit(hops)) => frame[HOP_LIMIT] = hops,
        Some(Mangle6::OtherMac) => frame[5] ^= 0x40,
        Some(Mangle6::OtherSender) => frame[11] ^= 0x40,
        Some(Mangle6::PayloadLengthPastFrame) => {
            let plen = u16::from_be_bytes([frame[18], frame[19]]) + 9;
            frame[18..20].copy_from_slice(&plen.to_be_bytes());
        }
        Some(Mangle6::TruncatedTcp) => {
            // A header shorter than its data offset says: TCP's; UDP's length field.
            frame.truncate(14 + 40 + 12);
            frame[18..20].copy_from_slice(&12u16.to_be_bytes());
        }
        Some(Mangle6::TooBig) | None => {}
    }
    (frame, ingress)
}

/// Runs `frames` through `gw` as one burst: each packet's verdict and bytes.
fn burst6(
    gw: &mut Pipeline,
    frames: &[(Vec<u8>, Ingress)],
    now_ns: u64,
) -> Vec<(Verdict, Vec<u8>)> {
    let mut rooms: Vec<Vec<u8>> = frames
        .iter()
        .map(|(frame, _)| {
            let mut room = vec![0u8; 2048];
            room[..frame.len()].copy_from_slice(frame);
            room
        })
        .collect();
    let ingress: Vec<Ingress> = frames.iter().map(|(_, ingress)| *ingress).collect();
    let mut packets: Vec<PacketBuf> = rooms
        .iter_mut()
        .zip(frames)
        .map(|(room, (frame, _))| PacketBuf::new(room, frame.len()))
        .collect();
    let mut verdicts = vec![Verdict::Drop(DropReason::TruncatedFrame); frames.len()];
    gw.process_burst(&mut packets, &ingress, now_ns, &mut verdicts, |_| {});
    let lens: Vec<usize> = packets.iter().map(PacketBuf::len).collect();
    drop(packets);
    verdicts
        .into_iter()
        .zip(rooms.into_iter().zip(lens))
        .map(|(verdict, (room, len))| (verdict, room[..len].to_vec()))
        .collect()
}

/// What a worker's counters say, but for how many packets took the fast path.
fn counted(counters: &WorkerCounters) -> Vec<u64> {
    let mut counts = vec![
        counters.transmitted.get(),
        counters.to_control.get(),
        counters.icmp_errors_sent.get(),
        counters.handoffs_sent.get(),
    ];
    counts.extend(
        DropReason::ALL
            .iter()
            .map(|&reason| counters.dropped(reason)),
    );
    counts
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The IPv6 fast path decides as the full path does: the same verdicts, bytes and
    /// counts, for flows set up, used and closed in any order, packets spoilt in each way
    /// the shortcut must not cover, reloads and a neighbour moving between bursts.
    #[test]
    fn the_ipv6_fast_path_decides_as_the_full_path_does(
        features in any::<bool>(),
        chunks in prop::collection::vec(
            (
                prop::collection::vec(step6(), 1..8),
                prop::option::weighted(0.2, prop_oneof![Just(Change6::Reload), Just(Change6::NeighbourMoves)]),
            ),
            1..24,
        ),
    ) {
        // With `features`, QoS polices (and classifies by the IPv4 host the MAC names) and the
        // meter counts: the fast path must spend and count as the full path does.
        let router = || {
            let router = config(true);
            Arc::new(if features {
                router.with_qos(Some(slow_qos())).with_traffic_meter(true)
            } else {
                router
            })
        };
        let make = |fast_path: bool| {
            let counters = Arc::new(WorkerCounters::default());
            let meter = Arc::new(HostMeter::new(16));
            let setup = WorkerSetup {
                fast_path,
                meter: Some(meter.clone()),
                qos_seed: Some(7),
                ..WorkerSetup::default()
            };
            let mut gw = Pipeline::for_worker(
                router(),
                Arc::new(dual_stack_neighbors()),
                counters.clone(),
                setup,
            )
            .unwrap();
            assign_equal_shares(&[gw.qos_stats()], features.then(slow_qos).as_ref());
            gw.set_router(router());
            (gw, counters, meter)
        };
        let (mut fast, fast_counters, fast_meter) = make(true);
        let (mut full, full_counters, full_meter) = make(false);
        let metered = |meter: &HostMeter| (meter.snapshot().collect::<Vec<_>>(), meter.unattributed());
        let moved = Arc::new(NeighborView::new([(ip(HOST), EthernetAddress(HOST_MAC))]).with_ipv6([
            (HOST6, EthernetAddress(HOST_MAC)),
            (UPSTREAM6, EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x99])),
        ]));
        let mut seq = [[1000u32, 5000], [0, 0], [20000, 90000]];
        let mut now = 0u64;
        for (steps, change) in chunks {
            match change {
                Some(Change6::Reload) => {
                    fast.set_router(router());
                    full.set_router(router());
                }
                Some(Change6::NeighbourMoves) => {
                    fast.set_neighbors(moved.clone());
                    full.set_neighbors(moved.clone());
                }
                None => {}
            }
            now += 1_000_000;
            let frames: Vec<(Vec<u8>, Ingress)> =
                steps.iter().map(|step| frame6(step, &mut seq)).collect();
            let by_fast = burst6(&mut fast, &frames, now);
            let by_full = burst6(&mut full, &frames, now);
            for (i, (a, b)) in by_fast.iter().zip(&by_full).enumerate() {
                prop_assert_eq!(a.0, b.0, "verdict of packet {} ({:?})", i, steps[i]);
                prop_assert_eq!(&a.1, &b.1, "bytes of packet {} ({:?})", i, steps[i]);
            }
            prop_assert_eq!(counted(&fast_counters), counted(&full_counters));
            prop_assert_eq!(metered(&fast_meter), metered(&full_meter));
        }
        prop_assert_eq!(full_counters.fast_path.get(), 0);
        // Every packet was IPv6: every drop is marked as an IPv6 packet's, on either path.
        for counters in [&fast_counters, &full_counters] {
            for &reason in DropReason::ALL {
                prop_assert_eq!(counters.dropped_ipv6(reason), counters.dropped(reason), "{:?}", reason);
            }
        }
    }
}

/// The fast path is taken at all: an established flow's packets after the first of each
/// direction skip the full path.
#[test]
fn established_ipv6_flows_take_the_fast_path() {
    let counters = Arc::new(WorkerCounters::default());
    let mut gw = Pipeline::for_worker(
        Arc::new(config(true)),
        Arc::new(neighbors()),
        counters.clone(),
        WorkerSetup::default(),
    )
    .unwrap();
    let mut seq = [[1000u32, 5000], [0, 0], [20000, 90000]];
    let step = |outbound, flags, payload| Step6 {
        flow: 0,
        outbound,
        flags,
        payload,
        mangle: None,
    };
    let handshake = [
        step(true, SYN, 0),
        step(false, SYN | ACK, 0),
        step(true, ACK, 0),
        step(false, ACK, 10),
    ];
    let data: Vec<Step6> = (0..10).map(|i| step(i % 2 == 0, ACK, 100)).collect();
    for step in handshake.iter().chain(&data) {
        let (frame, ingress) = frame6(step, &mut seq);
        let (verdict, _) = run(&mut gw, &frame, ingress, 0);
        assert!(
            matches!(verdict, Verdict::Transmit { .. }),
            "{step:?}: {verdict:?}"
        );
    }
    // The SYN-ACK (found in the table, though it takes the full path as a SYN) made the
    // reply way's shortcut, the handshake's ACK the original way's: every later packet,
    // the server's first data among them, used them.
    assert_eq!(counters.fast_path.get(), 11);
    // A reload: each way's next packet takes the full path once.
    gw.set_router(Arc::new(config(true)));
    for step in &data[..4] {
        let (frame, ingress) = frame6(step, &mut seq);
        run(&mut gw, &frame, ingress, 0);
    }
    assert_eq!(counters.fast_path.get(), 13);
}

/// A rule with IPv6 prefixes decides the IPv6 flows in them, and no others.
#[test]
fn rules_with_ipv6_prefixes_decide_the_flows_in_them() {
    let rule = Rule {
        src6: Some((HOST6, 128)),
        dst6: Some((Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 0), 48)),
        protocol: Some(17),
        ..Rule::matching_all("host-to-99", Action::Drop)
    };
    let mut gw = worker(config_with_rules(true, vec![rule]), neighbors(), 0, 1);
    let (verdict, _) = run(&mut gw, &from_host(REMOTE6, 64, 8), on(LAN), 0);
    assert_eq!(
        verdict,
        Verdict::Drop(DropReason::FirewallDrop),
        "in both prefixes"
    );
    let elsewhere = Ipv6Addr::new(0x2001, 0xdb8, 0x98, 0, 0, 0, 0, 1);
    let (verdict, _) = run(&mut gw, &from_host(elsewhere, 64, 8), on(LAN), 0);
    assert_eq!(
        verdict,
        Verdict::Transmit { port: WAN },
        "outside the destination prefix"
    );
}

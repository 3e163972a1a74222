//! Several uplinks (multi-WAN) through the whole pipeline: new flows toward the default route
//! share the uplinks by weight, each masqueraded to its own uplink's address and sent to its
//! own ISP's router, and replies come back; a backup takes new flows only while the primary
//! is down, the flows kept on a failed uplink end at their next packet (a TCP client gets a
//! reset), and the primary takes new flows again when it is back while the old ones stay; a
//! policy rule keeps one host on one uplink, and falls back or refuses as told; a port
//! forward's flow is answered by the uplink it came in by; a packet held for its next hop's
//! MAC is routed to the same uplink again from its addresses alone.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::pipeline::uplinks::{Uplink, UplinkHash, UplinkPolicy, Uplinks};
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::wire::ipv4::protocol;
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig,
    StaticRoute, Verdict, WorkerCounters,
};

const LAN: u16 = 0;
const WAN1: u16 = 1;
const WAN2: u16 = 2;
const MACS: [[u8; 6]; 3] = [
    [0x02, 0, 0, 0, 0, 0x01],
    [0x02, 0, 0, 0, 0, 0x02],
    [0x02, 0, 0, 0, 0, 0x03],
];
const WAN1_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const WAN2_ADDR: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const ISP1: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ISP2: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);
const ISP1_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x01];
const ISP2_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x01];
const REMOTE: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 5);
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 80);

fn interface(port: u16, addr: Ipv4Addr) -> Interface {
    Interface {
        mac: EthernetAddress(MACS[usize::from(port)]),
        addr,
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

fn host(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(192, 168, 10, 0)) + 10 + n)
}

fn uplink(port: u16, gateway: Ipv4Addr, weight: u32, priority: u8, up: bool) -> Uplink {
    Uplink {
        port,
        gateway: Some(gateway),
        weight,
        priority,
        up,
    }
}

/// LAN, WAN1 and WAN2 (both masqueraded, the default route via ISP1 as the compiler writes
/// it), with these uplinks and policies, and a forward of TCP 8080 on WAN2 to the server.
fn router(uplinks: Vec<Uplink>, policies: Vec<UplinkPolicy>) -> Arc<RouterConfig> {
    let interfaces = vec![
        interface(LAN, Ipv4Addr::new(192, 168, 10, 1)),
        interface(WAN1, WAN1_ADDR),
        interface(WAN2, WAN2_ADDR),
    ];
    let default = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: ISP1,
    };
    let policy = Policy::new(Action::Drop)
        .set(ZoneId(0), ZoneId(1), Action::Accept)
        .set(ZoneId(0), ZoneId(2), Action::Accept);
    let stateful = Stateful {
        content: None,
        zones: vec![ZoneId(0), ZoneId(1), ZoneId(2)],
        masquerade: vec![false, true, true],
        firewall: RuleSet::compile(Vec::new(), policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: vec![PortForward {
            interface: WAN2,
            protocol: protocol::TCP,
            ports: 8080..=8080,
            to: SERVER,
            to_port: 80,
        }],
        recheck_established: false,
        // Each config its own generation, as the compiler gives them.
        generation: uplinks
            .iter()
            .map(|uplink| u32::from(uplink.up) << uplink.port)
            .sum(),
    };
    let config = RouterConfig::new(interfaces, &[default], IcmpLimits::default())
        .unwrap()
        .with_stateful(stateful)
        .unwrap()
        .with_uplinks(Uplinks::new(3, uplinks, UplinkHash::Source, policies))
        .unwrap();
    Arc::new(config)
}

fn pipeline(router: Arc<RouterConfig>) -> Pipeline {
    let mut neighbors = vec![
        (ISP1, EthernetAddress(ISP1_MAC)),
        (ISP2, EthernetAddress(ISP2_MAC)),
        (SERVER, EthernetAddress(HOST_MAC)),
    ];
    neighbors.extend((0..200).map(|n| (host(n), EthernetAddress(HOST_MAC))));
    Pipeline::new(
        router,
        Arc::new(NeighborView::new(neighbors)),
        Arc::new(WorkerCounters::default()),
    )
}

/// A frame arriving on `ingress` from its neighbour.
fn frame(ingress: u16, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), tcp: Option<Tcp>) -> Vec<u8> {
    let from = match ingress {
        LAN => HOST_MAC,
        WAN1 => ISP1_MAC,
        _ => ISP2_MAC,
    };
    let builder = PacketBuilder::ethernet2(from, MACS[usize::from(ingress)]).ipv4(
        src.0.octets(),
        dst.0.octets(),
        64,
    );
    let mut frame = Vec::new();
    match tcp {
        None => builder
            .udp(src.1, dst.1)
            .write(&mut frame, b"hello")
            .unwrap(),
        Some(Tcp::Syn) => builder
            .tcp(src.1, dst.1, 1000, 65535)
            .syn()
            .write(&mut frame, &[])
            .unwrap(),
        Some(Tcp::SynAck) => builder
            .tcp(src.1, dst.1, 5000, 65535)
            .syn()
            .ack(1001)
            .write(&mut frame, &[])
            .unwrap(),
        Some(Tcp::Ack) => builder
            .tcp(src.1, dst.1, 1001, 65535)
            .ack(5001)
            .write(&mut frame, b"data")
            .unwrap(),
        Some(Tcp::ServerData) => builder
            .tcp(src.1, dst.1, 5001, 65535)
            .ack(1005)
            .write(&mut frame, b"more")
            .unwrap(),
    };
    frame
}

#[derive(Clone, Copy)]
enum Tcp {
    Syn,
    SynAck,
    /// The client's first data, and the server's.
    Ack,
    ServerData,
}

struct Sent {
    verdict: Verdict,
    /// Destination MAC, source and destination endpoints of the frame as it left.
    next_hop_mac: [u8; 6],
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    rst: bool,
    /// TCP's sequence and acknowledgement numbers, and whether ACK is set.
    seq: u32,
    ack: Option<u32>,
}

fn process(pipeline: &mut Pipeline, frame: &[u8], ingress: u16) -> Sent {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let verdict = pipeline.process(&mut pkt, ingress, 1_000);
    let bytes = pkt.bytes().to_vec();
    let sliced = SlicedPacket::from_ethernet(&bytes).unwrap();
    let Some(NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("not IPv4")
    };
    let (ports, rst, seq, ack) = match sliced.transport {
        Some(TransportSlice::Udp(udp)) => {
            ((udp.source_port(), udp.destination_port()), false, 0, None)
        }
        Some(TransportSlice::Tcp(tcp)) => (
            (tcp.source_port(), tcp.destination_port()),
            tcp.rst(),
            tcp.sequence_number(),
            tcp.ack().then(|| tcp.acknowledgment_number()),
        ),
        _ => ((0, 0), false, 0, None),
    };
    Sent {
        verdict,
        next_hop_mac: bytes[..6].try_into().unwrap(),
        src: (ip.header().source_addr(), ports.0),
        dst: (ip.header().destination_addr(), ports.1),
        rst,
        seq,
        ack,
    }
}

/// Which uplink a frame that left went by, checked to be masqueraded to that uplink's own
/// address and sent to that uplink's own ISP router.
fn uplink_of(sent: &Sent) -> u16 {
    match sent.verdict {
        Verdict::Transmit { port: WAN1 } => {
            assert_eq!((sent.src.0, sent.next_hop_mac), (WAN1_ADDR, ISP1_MAC));
            WAN1
        }
        Verdict::Transmit { port: WAN2 } => {
            assert_eq!((sent.src.0, sent.next_hop_mac), (WAN2_ADDR, ISP2_MAC));
            WAN2
        }
        other => panic!("left by no uplink: {other:?}"),
    }
}

#[test]
fn hosts_share_the_uplinks_by_weight_and_their_replies_come_back() {
    let mut gateway = pipeline(router(
        vec![
            uplink(WAN1, ISP1, 2, 0, true),
            uplink(WAN2, ISP2, 1, 0, true),
        ],
        Vec::new(),
    ));
    let mut by_uplink: HashMap<u16, u32> = HashMap::new();
    for n in 0..200 {
        let out = frame(LAN, (host(n), 40000), (REMOTE, 53), None);
        let sent = process(&mut gateway, &out, LAN);
        let uplink = uplink_of(&sent);
        *by_uplink.entry(uplink).or_default() += 1;
        // A packet held for its next hop's MAC is routed again by the control thread from
        // its addresses alone: to the same uplink.
        let again = gateway.router().route_from(sent.src.0, REMOTE).unwrap();
        assert_eq!(again.port, uplink);
        // The host's next flow keeps its uplink, and so its public address.
        let again = frame(
            LAN,
            (host(n), 40001),
            (Ipv4Addr::new(198, 51, 100, 7), 443),
            None,
        );
        assert_eq!(uplink_of(&process(&mut gateway, &again, LAN)), uplink);
        // The reply to the uplink's address comes back to the host.
        let reply = frame(uplink, (REMOTE, 53), sent.src, None);
        let back = process(&mut gateway, &reply, uplink);
        assert_eq!(back.verdict, Verdict::Transmit { port: LAN });
        assert_eq!(back.dst, (host(n), 40000));
    }
    let first = f64::from(by_uplink[&WAN1]) / 200.0;
    assert!(
        (first - 2.0 / 3.0).abs() < 0.1,
        "2:1 weights gave {by_uplink:?}"
    );
}

#[test]
fn a_backup_takes_over_while_the_primary_is_down_and_the_old_flows_end() {
    let states = |primary_up| {
        router(
            vec![
                uplink(WAN1, ISP1, 1, 0, primary_up),
                uplink(WAN2, ISP2, 1, 1, true),
            ],
            Vec::new(),
        )
    };
    let mut gateway = pipeline(states(true));
    let client = (host(1), 40000);
    let syn = process(
        &mut gateway,
        &frame(LAN, client, (REMOTE, 443), Some(Tcp::Syn)),
        LAN,
    );
    assert_eq!(uplink_of(&syn), WAN1);
    let synack = frame(WAN1, (REMOTE, 443), syn.src, Some(Tcp::SynAck));
    assert_eq!(
        process(&mut gateway, &synack, WAN1).verdict,
        Verdict::Transmit { port: LAN }
    );
    let ack = frame(LAN, client, (REMOTE, 443), Some(Tcp::Ack));
    assert_eq!(uplink_of(&process(&mut gateway, &ack, LAN)), WAN1);

    // A second connection through the primary, for the server's side of a failover.
    let download = (host(3), 40000);
    let syn3 = process(
        &mut gateway,
        &frame(LAN, download, (REMOTE, 443), Some(Tcp::Syn)),
        LAN,
    );
    assert_eq!(uplink_of(&syn3), WAN1);
    let synack3 = frame(WAN1, (REMOTE, 443), syn3.src, Some(Tcp::SynAck));
    process(&mut gateway, &synack3, WAN1);
    let ack3 = frame(LAN, download, (REMOTE, 443), Some(Tcp::Ack));
    assert_eq!(uplink_of(&process(&mut gateway, &ack3, LAN)), WAN1);

    // A LAN host at the forward on WAN2's address, hairpinned: its port is taken on the
    // pool's first address (WAN1's), yet it never crosses an uplink.
    let hairpin_client = (host(4), 40000);
    let to_forward = frame(LAN, hairpin_client, (WAN2_ADDR, 8080), Some(Tcp::Syn));
    let hairpin = process(&mut gateway, &to_forward, LAN);
    assert_eq!(hairpin.verdict, Verdict::Transmit { port: LAN });
    assert_eq!(hairpin.dst, (SERVER, 80));
    let server_answer = frame(LAN, (SERVER, 80), hairpin.src, Some(Tcp::SynAck));
    assert_eq!(
        process(&mut gateway, &server_answer, LAN).verdict,
        Verdict::Transmit { port: LAN }
    );
    let hairpin_ack = frame(LAN, hairpin_client, (WAN2_ADDR, 8080), Some(Tcp::Ack));

    // The primary fails: the client's next segment ends its flow with a reset toward it,
    // and its next connection leaves by the backup.
    gateway.set_router(states(false));
    let still = process(&mut gateway, &hairpin_ack, LAN);
    assert_eq!(still.verdict, Verdict::Transmit { port: LAN });
    assert!(!still.rst, "the hairpinned flow is not ended");
    let ended = process(&mut gateway, &ack, LAN);
    assert_eq!(ended.verdict, Verdict::Transmit { port: LAN });
    assert!(ended.rst, "the LAN client is reset");
    assert_eq!(ended.dst, client);
    assert_eq!(gateway.counters().dropped(DropReason::UplinkDown), 1);
    // The server's segment ends the other flow: its client is reset all the same, from the
    // server's endpoint.
    let data = frame(WAN1, (REMOTE, 443), syn3.src, Some(Tcp::ServerData));
    let reset = process(&mut gateway, &data, WAN1);
    assert_eq!(reset.verdict, Verdict::Transmit { port: LAN });
    assert!(reset.rst, "the download's client is reset");
    assert_eq!((reset.src, reset.dst), ((REMOTE, 443), download));
    // Where the client expects the server's next byte, acknowledging what the server did.
    assert_eq!((reset.seq, reset.ack), (5001, Some(1005)));
    assert_eq!(reset.next_hop_mac, HOST_MAC);
    assert_eq!(gateway.counters().dropped(DropReason::UplinkDown), 2);
    let retry = process(
        &mut gateway,
        &frame(LAN, client, (REMOTE, 443), Some(Tcp::Syn)),
        LAN,
    );
    assert_eq!(uplink_of(&retry), WAN2);
    let synack = frame(WAN2, (REMOTE, 443), retry.src, Some(Tcp::SynAck));
    assert_eq!(
        process(&mut gateway, &synack, WAN2).verdict,
        Verdict::Transmit { port: LAN }
    );

    // The primary is back: new flows take it, the flow on the backup stays there.
    gateway.set_router(states(true));
    assert_eq!(uplink_of(&process(&mut gateway, &ack, LAN)), WAN2);
    let other = frame(LAN, (host(2), 40000), (REMOTE, 443), Some(Tcp::Syn));
    assert_eq!(uplink_of(&process(&mut gateway, &other, LAN)), WAN1);
}

#[test]
fn a_policy_keeps_a_host_on_its_uplink_and_falls_back_as_told() {
    let pinned = host(7);
    let policy = |fallback| UplinkPolicy {
        source: Some((pinned, 32)),
        destination: None,
        from_zone: Some(ZoneId(0)),
        protocol: None,
        ports: None,
        uplink: 1,
        fallback,
    };
    let with = |backup_up, fallback| {
        pipeline(router(
            vec![
                uplink(WAN1, ISP1, 1, 0, true),
                uplink(WAN2, ISP2, 1, 1, backup_up),
            ],
            vec![policy(fallback)],
        ))
    };
    let out = frame(LAN, (pinned, 40000), (REMOTE, 53), None);
    let others = frame(LAN, (host(8), 40000), (REMOTE, 53), None);
    let mut gateway = with(true, true);
    assert_eq!(uplink_of(&process(&mut gateway, &out, LAN)), WAN2);
    assert_eq!(uplink_of(&process(&mut gateway, &others, LAN)), WAN1);
    let mut fallen_back = with(false, true);
    assert_eq!(uplink_of(&process(&mut fallen_back, &out, LAN)), WAN1);
    let mut refused = with(false, false);
    assert_eq!(
        process(&mut refused, &out, LAN).verdict,
        Verdict::Drop(DropReason::UplinkDown)
    );
}

#[test]
fn a_forward_on_the_second_uplink_is_answered_by_it() {
    let mut gateway = pipeline(router(
        vec![
            uplink(WAN1, ISP1, 1, 0, true),
            uplink(WAN2, ISP2, 1, 0, true),
        ],
        Vec::new(),
    ));
    let client = (REMOTE, 50000);
    let syn = frame(WAN2, client, (WAN2_ADDR, 8080), Some(Tcp::Syn));
    let forwarded = process(&mut gateway, &syn, WAN2);
    assert_eq!(forwarded.verdict, Verdict::Transmit { port: LAN });
    assert_eq!(forwarded.dst, (SERVER, 80));
    let synack = frame(LAN, (SERVER, 80), client, Some(Tcp::SynAck));
    let answer = process(&mut gateway, &synack, LAN);
    // Not by the default route's uplink (WAN1): by the one the client talks to.
    assert_eq!(uplink_of(&answer), WAN2);
    assert_eq!(answer.src, (WAN2_ADDR, 8080));
}

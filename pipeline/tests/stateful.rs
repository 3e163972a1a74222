//! The stateful stage end to end, as a home NAT gateway: LAN 192.168.10.1/24 (zone 0) and WAN
//! 10.0.0.1/24 (zone 1, masquerading), a default route via 10.0.0.2, lan->wan and lan->local
//! accepted and everything from the WAN dropped unless a port forward (TCP 8080 to
//! 192.168.10.3:80, UDP 5000-5002 to 192.168.10.3:6000-6002) or a flow admits it.
//!
//! Frames are built with etherparse and go through `Pipeline::process`; verdicts, counters,
//! table gauges and the bytes that come out are checked, and every checksum (IP header, TCP,
//! UDP, ICMP, and those inside an ICMP error's quote) is verified with etherparse rather than
//! with the crate's own code.

mod common;
use common::*;

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use etherparse::checksum::Sum16BitWords;
use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
use etherparse::{
    EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header, Icmpv4Slice, Icmpv4Type, IpNumber,
    Ipv4Header, PacketBuilder, TcpHeader, TcpOptionElement, UdpHeader,
};
use pipeline::features::meter::HostMeter;
use pipeline::features::qos::{assign_equal_shares, Class, ClassRule, Link, QosConfig, QosMode};
use pipeline::flow::Direction;
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::pipeline::features::mark_congestion;
use pipeline::pipeline::operator::explain::FlowMatch;
use pipeline::pipeline::operator::flow_listing::FlowFilter;
use pipeline::state::conntrack::{ConntrackConfig, TcpState, Timeouts};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::state::nat::{NatEventKind, NatLog, Ownership};
use pipeline::state::rule_hits::RuleHits;
use pipeline::wire::EthernetAddress;
use pipeline::{
    ControlWork, DropReason, IcmpLimits, Ingress, NeighborView, PacketBuf, Pipeline, RouterConfig,
    Verdict, WorkerCounters, WorkerSetup,
};
use proptest::prelude::*;

/// An mbuf's data room.
const ROOM: usize = 2048;
/// Pool buffers are not zeroed: garbage after the frame catches code that relies on zeros.
const GARBAGE: u8 = 0xa5;

/// The target of the port forwards.
const SERVER: [u8; 4] = [192, 168, 10, 3];
const SERVER_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x03];
const REMOTE: [u8; 4] = [203, 0, 113, 5];
const OTHER_REMOTE: [u8; 4] = [198, 51, 100, 20];
/// A router on the path that sends ICMP errors of its own.
const HOP: [u8; 4] = [198, 51, 100, 9];
/// What the reject rules of some tests refuse.
const BLOCKED: [u8; 4] = [203, 0, 113, 66];

const TCP: u8 = 6;
const UDP: u8 = 17;

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const URG: u8 = 0x20;
const ECE: u8 = 0x40;
const CWR: u8 = 0x80;

/// The client's and the server's initial sequence numbers.
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

type Endpoint = ([u8; 4], u16);

// --- The gateway ---------------------------------------------------------------------------

fn rule(name: &str, action: Action) -> Rule {
    Rule::matching_all(name, action)
}

fn stateful(rules: Vec<Rule>, generation: u32, recheck_established: bool) -> Stateful {
    let policy = Policy::new(Action::Drop)
        .set(LAN_ZONE, WAN_ZONE, Action::Accept)
        .set(LAN_ZONE, ZoneId::LOCAL, Action::Accept);
    Stateful {
        content: None,
        zones: vec![LAN_ZONE, WAN_ZONE],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(rules, policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: vec![
            PortForward {
                interface: WAN,
                protocol: TCP,
                ports: 8080..=8080,
                to: ip(SERVER),
                to_port: 80,
            },
            PortForward {
                interface: WAN,
                protocol: UDP,
                ports: 5000..=5002,
                to: ip(SERVER),
                to_port: 6000,
            },
        ],
        recheck_established,
        generation,
    }
}

fn config(wan_mtu: u16, rules: Vec<Rule>, generation: u32, recheck: bool) -> RouterConfig {
    let default_route = default_route();
    RouterConfig::new(interfaces(wan_mtu), &[default_route], IcmpLimits::default())
        .unwrap()
        .with_stateful(stateful(rules, generation, recheck))
        .unwrap()
}

/// The plain home configuration, built once: a route table costs tens of megabytes.
fn home() -> Arc<RouterConfig> {
    static HOME: OnceLock<Arc<RouterConfig>> = OnceLock::new();
    HOME.get_or_init(|| Arc::new(config(1500, Vec::new(), 0, false)))
        .clone()
}

/// TCP and UDP to BLOCKED from the LAN are rejected.
fn reject_rules() -> Vec<Rule> {
    [(TCP, "reject-tcp"), (UDP, "reject-udp")]
        .into_iter()
        .map(|(protocol, name)| Rule {
            from: Some(LAN_ZONE),
            dst: Some((ip(BLOCKED), 32)),
            protocol: Some(protocol),
            ..rule(name, Action::Reject)
        })
        .collect()
}

fn with_rejects() -> Arc<RouterConfig> {
    static REJECTS: OnceLock<Arc<RouterConfig>> = OnceLock::new();
    REJECTS
        .get_or_init(|| Arc::new(config(1500, reject_rules(), 0, false)))
        .clone()
}

fn neighbors() -> NeighborView {
    NeighborView::new([
        (ip(UPSTREAM), EthernetAddress(UPSTREAM_MAC)),
        (ip(HOST), EthernetAddress(HOST_MAC)),
        (ip(SERVER), EthernetAddress(SERVER_MAC)),
    ])
}

/// The table gauges after housekeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tables {
    flows: u64,
    nat_in_use: u64,
    nat_available: u64,
    expirations: u64,
    evictions: u64,
}

/// One worker's pipeline plus the counters it writes.
struct Gateway {
    pipeline: Pipeline,
    counters: Arc<WorkerCounters>,
}

impl Gateway {
    fn new() -> Gateway {
        Gateway::with(home(), WorkerSetup::default())
    }

    fn with(router: Arc<RouterConfig>, setup: WorkerSetup) -> Gateway {
        let counters = Arc::new(WorkerCounters::default());
        let pipeline =
            Pipeline::for_worker(router, Arc::new(neighbors()), counters.clone(), setup).unwrap();
        Gateway { pipeline, counters }
    }

    /// Runs the frame through the pipeline in a garbage-filled 2 KiB room and returns the
    /// verdict and the frame as the worker would send it.
    fn run(&mut self, frame: &[u8], ingress: Ingress, now_ns: u64) -> (Verdict, Vec<u8>) {
        let mut room = [GARBAGE; ROOM];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let verdict = self.pipeline.process_from(&mut pkt, ingress, now_ns);
        assert!(pkt.len() <= ROOM);
        (verdict, pkt.bytes().to_vec())
    }

    fn process(&mut self, frame: &[u8], port: u16, now_ns: u64) -> (Verdict, Vec<u8>) {
        let ingress = Ingress {
            port,
            handed_off: false,
        };
        self.run(frame, ingress, now_ns)
    }

    /// Asserts the frame leaves through `egress` translated to `src -> dst` (see
    /// `assert_translated`), and returns it.
    fn forward(
        &mut self,
        frame: &[u8],
        ingress: u16,
        now_ns: u64,
        egress: u16,
        src: Endpoint,
        dst: Endpoint,
    ) -> Vec<u8> {
        let (verdict, out) = self.process(frame, ingress, now_ns);
        assert_eq!(verdict, Verdict::Transmit { port: egress });
        assert_translated(frame, &out, egress, src, dst);
        out
    }

    /// Asserts the frame is dropped for `reason`, counted once.
    fn expect_drop(&mut self, frame: &[u8], ingress: u16, now_ns: u64, reason: DropReason) {
        let before = self.dropped(reason);
        let (verdict, _) = self.process(frame, ingress, now_ns);
        assert_eq!(verdict, Verdict::Drop(reason));
        assert_eq!(self.dropped(reason), before + 1, "{reason:?} counted");
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        self.counters.dropped(reason)
    }

    /// Expires what is due at `now_ns` (the whole table in one go) and reads the gauges.
    fn tables(&mut self, now_ns: u64) -> Tables {
        self.pipeline.housekeeping(now_ns, usize::MAX);
        let c = &self.counters;
        Tables {
            flows: c.conntrack_entries.get(),
            nat_in_use: c.nat_ports_in_use.get(),
            nat_available: c.nat_ports_available.get(),
            expirations: c.conntrack_expirations.get(),
            evictions: c.conntrack_evictions.get(),
        }
    }
}

// --- Frames --------------------------------------------------------------------------------

/// The sender's and the gateway's MAC for a frame arriving on `ingress`.
fn macs(ingress: u16) -> ([u8; 6], [u8; 6]) {
    match ingress {
        LAN => (HOST_MAC, LAN_MAC),
        _ => (UPSTREAM_MAC, WAN_MAC),
    }
}

fn port_mac(port: u16) -> [u8; 6] {
    match port {
        LAN => LAN_MAC,
        _ => WAN_MAC,
    }
}

fn lan_mac(addr: [u8; 4]) -> [u8; 6] {
    match addr {
        HOST => HOST_MAC,
        SERVER => SERVER_MAC,
        _ => panic!("no MAC known for {addr:?}"),
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
}

fn seg(flags: u8, seq: u32, ack: u32) -> Seg {
    Seg {
        flags,
        seq,
        ack,
        window: 1024,
    }
}

/// A TCP header with `flags`; SYNs offer MSS 1460 and window scale 7.
fn tcp_header(src_port: u16, dst_port: u16, seg: Seg) -> TcpHeader {
    let mut header = TcpHeader::new(src_port, dst_port, seg.seq, seg.window);
    header.acknowledgment_number = seg.ack;
    header.fin = seg.flags & FIN != 0;
    header.syn = seg.flags & SYN != 0;
    header.rst = seg.flags & RST != 0;
    header.psh = seg.flags & PSH != 0;
    header.ack = seg.flags & ACK != 0;
    header.urg = seg.flags & URG != 0;
    header.ece = seg.flags & ECE != 0;
    header.cwr = seg.flags & CWR != 0;
    if header.syn {
        header
            .set_options(&[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::WindowScale(7),
            ])
            .unwrap();
    }
    header
}

fn tcp(ingress: u16, src: Endpoint, dst: Endpoint, seg: Seg, payload: &[u8]) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(from, to)
        .ipv4(src.0, dst.0, 64)
        .tcp_header(tcp_header(src.1, dst.1, seg))
        .write(&mut frame, payload)
        .unwrap();
    frame
}

fn udp(ingress: u16, src: Endpoint, dst: Endpoint, payload: &[u8]) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(from, to)
        .ipv4(src.0, dst.0, 64)
        .udp(src.1, dst.1)
        .write(&mut frame, payload)
        .unwrap();
    frame
}

fn echo(ingress: u16, src: [u8; 4], dst: [u8; 4], request: bool, id: u16, seq: u16) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let mut frame = Vec::new();
    let ipv4 = PacketBuilder::ethernet2(from, to).ipv4(src, dst, 64);
    let step = if request {
        ipv4.icmpv4_echo_request(id, seq)
    } else {
        ipv4.icmpv4_echo_reply(id, seq)
    };
    step.write(&mut frame, &data(24)).unwrap();
    frame
}

/// An ICMP error from `src` to `dst` arriving on `ingress`, quoting `quote`.
fn icmp_error(ingress: u16, src: [u8; 4], dst: [u8; 4], kind: Icmpv4Type, quote: &[u8]) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(from, to)
        .ipv4(src, dst, 64)
        .icmpv4(kind)
        .write(&mut frame, quote)
        .unwrap();
    frame
}

/// The datagram in `frame` as the next router receives it: TTL one less and the header
/// checksum recomputed by etherparse.
fn as_forwarded(frame: &[u8]) -> Vec<u8> {
    let mut datagram = frame[ETH_LEN..].to_vec();
    let (mut header, _) = Ipv4Header::from_slice(&datagram).unwrap();
    header.time_to_live -= 1;
    header.header_checksum = header.calc_header_checksum();
    datagram[..header.header_len()].copy_from_slice(&header.to_bytes());
    datagram
}

// --- Checks --------------------------------------------------------------------------------

/// Parses an IPv4 frame with etherparse, checking its header checksum and that the frame ends
/// exactly where the datagram does.
fn parse_ipv4(frame: &[u8]) -> (Ethernet2Header, Ipv4Header, &[u8]) {
    let (eth, rest) = Ethernet2Header::from_slice(frame).unwrap();
    assert_eq!(eth.ether_type, EtherType::IPV4);
    let (header, payload) = Ipv4Header::from_slice(rest).unwrap();
    assert_eq!(raw_sum(&rest[..header.header_len()]), 0, "IPv4 checksum");
    assert_eq!(
        usize::from(header.total_len),
        rest.len(),
        "frame ends at datagram"
    );
    (eth, header, payload)
}

/// The ones' complement of the sum of `bytes`: 0 over a header whose checksum is right.
fn raw_sum(bytes: &[u8]) -> u16 {
    Sum16BitWords::new().add_slice(bytes).ones_complement()
}

fn check_tcp<'a>(header: &Ipv4Header, segment: &'a [u8]) -> (TcpHeader, &'a [u8]) {
    let (tcp, payload) = TcpHeader::from_slice(segment).unwrap();
    let expected = tcp.calc_checksum_ipv4(header, payload).unwrap();
    assert_eq!(tcp.checksum, expected, "TCP checksum");
    (tcp, payload)
}

/// A checksum of 0 means "none" and is left alone.
fn check_udp<'a>(header: &Ipv4Header, datagram: &'a [u8]) -> (UdpHeader, &'a [u8]) {
    let (udp, payload) = UdpHeader::from_slice(datagram).unwrap();
    if udp.checksum != 0 {
        let expected = udp.calc_checksum_ipv4(header, payload).unwrap();
        assert_eq!(udp.checksum, expected, "UDP checksum");
    }
    (udp, payload)
}

fn check_icmp(message: &[u8]) -> Icmpv4Slice<'_> {
    let icmp = Icmpv4Slice::from_slice(message).unwrap();
    let expected = Icmpv4Header::with_checksum(icmp.icmp_type(), icmp.payload());
    assert_eq!(icmp.checksum(), expected.checksum, "ICMP checksum");
    icmp
}

/// A datagram's endpoints (for ICMP queries the identifier stands for both ports), its
/// checksums checked.
fn endpoints(frame: &[u8]) -> (Endpoint, Endpoint) {
    let (_, header, l4) = parse_ipv4(frame);
    let (src, dst) = (header.source, header.destination);
    match header.protocol {
        IpNumber::TCP => {
            let (tcp, _) = check_tcp(&header, l4);
            ((src, tcp.source_port), (dst, tcp.destination_port))
        }
        IpNumber::UDP => {
            let (udp, _) = check_udp(&header, l4);
            ((src, udp.source_port), (dst, udp.destination_port))
        }
        IpNumber::ICMP => match check_icmp(l4).icmp_type() {
            Icmpv4Type::EchoRequest(echo) | Icmpv4Type::EchoReply(echo) => {
                ((src, echo.id), (dst, echo.id))
            }
            other => panic!("not an ICMP query: {other:?}"),
        },
        other => panic!("protocol {other:?}"),
    }
}

/// Checks `out` is `input` forwarded through `egress` as `src -> dst`: L2 toward the next hop,
/// TTL one less, nothing else changed but addresses, ports (or ICMP identifier) and
/// checksums, and every checksum valid.
fn assert_translated(input: &[u8], out: &[u8], egress: u16, src: Endpoint, dst: Endpoint) {
    let (_, before, l4_before) = parse_ipv4(input);
    let (eth, after, l4_after) = parse_ipv4(out);
    let next_hop_mac = match egress {
        WAN => UPSTREAM_MAC,
        _ => lan_mac(dst.0),
    };
    assert_eq!(
        (eth.destination, eth.source),
        (next_hop_mac, port_mac(egress)),
        "L2 toward the next hop"
    );
    let mut expected = before.clone();
    expected.source = src.0;
    expected.destination = dst.0;
    expected.time_to_live -= 1;
    expected.header_checksum = after.header_checksum;
    assert_eq!(after, expected, "only addresses, TTL and checksum change");
    assert_eq!(l4_after.len(), l4_before.len());
    match after.protocol {
        IpNumber::TCP => {
            let (old, old_payload) = TcpHeader::from_slice(l4_before).unwrap();
            let (new, payload) = check_tcp(&after, l4_after);
            let mut expected = old;
            expected.source_port = src.1;
            expected.destination_port = dst.1;
            expected.checksum = new.checksum;
            assert_eq!(new, expected, "only ports and checksum change");
            assert_eq!(payload, old_payload);
        }
        IpNumber::UDP => {
            let (old, old_payload) = UdpHeader::from_slice(l4_before).unwrap();
            let (new, payload) = check_udp(&after, l4_after);
            let mut expected = old.clone();
            expected.source_port = src.1;
            expected.destination_port = dst.1;
            expected.checksum = new.checksum;
            assert_eq!(new, expected, "only ports and checksum change");
            assert_eq!(
                new.checksum == 0,
                old.checksum == 0,
                "no checksum stays none"
            );
            assert_eq!(payload, old_payload);
        }
        IpNumber::ICMP => {
            assert_eq!(src.1, dst.1, "one identifier for both ends");
            let old = Icmpv4Slice::from_slice(l4_before).unwrap();
            let new = check_icmp(l4_after);
            let expected = match old.icmp_type() {
                Icmpv4Type::EchoRequest(echo) => Icmpv4Type::EchoRequest(IcmpEchoHeader {
                    id: src.1,
                    seq: echo.seq,
                }),
                Icmpv4Type::EchoReply(echo) => Icmpv4Type::EchoReply(IcmpEchoHeader {
                    id: src.1,
                    seq: echo.seq,
                }),
                other => panic!("not an echo: {other:?}"),
            };
            assert_eq!(new.icmp_type(), expected);
            assert_eq!(new.payload(), old.payload());
        }
        other => panic!("protocol {other:?}"),
    }
}

/// Opens a masqueraded TCP connection from `client` to `server` (SYN, SYN+ACK, ACK, each
/// checked on the way through) and returns the public endpoint it got.
fn handshake(gw: &mut Gateway, client: Endpoint, server: Endpoint, now: u64) -> Endpoint {
    let syn = tcp(LAN, client, server, seg(SYN, C_ISN, 0), &[]);
    let (verdict, out) = gw.process(&syn, LAN, now);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let (public, _) = endpoints(&out);
    assert_eq!(public.0, WAN_ADDR, "masqueraded");
    assert_translated(&syn, &out, WAN, public, server);
    let syn_ack = tcp(WAN, server, public, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    gw.forward(&syn_ack, WAN, now, LAN, server, client);
    let ack = tcp(LAN, client, server, seg(ACK, C_ISN + 1, S_ISN + 1), &[]);
    gw.forward(&ack, LAN, now, WAN, public, server);
    public
}

// --- 1. Masquerade -------------------------------------------------------------------------

/// The MSS a forwarded TCP segment announces, its checksums checked; None without one.
fn announced_mss(frame: &[u8]) -> Option<u16> {
    let (_, header, segment) = parse_ipv4(frame);
    let (tcp, _) = check_tcp(&header, segment);
    tcp.options_iterator().find_map(|option| match option {
        Ok(TcpOptionElement::MaximumSegmentSize(mss)) => Some(mss),
        _ => None,
    })
}

/// A SYN crosses two interfaces and gets the lower of their clamps, or the one there is.
#[test]
fn the_mss_limit_is_the_lower_clamp_of_the_two_interfaces() {
    let limit = |clamps: [Option<u16>; 2], from: u16, to: u16| {
        config(1500, Vec::new(), 0, false)
            .with_tcp_mss(&clamps)
            .unwrap()
            .mss_limit(from, to)
    };
    assert_eq!(limit([None, None], LAN, WAN), None);
    assert_eq!(limit([Some(1400), None], LAN, WAN), Some(1400));
    assert_eq!(limit([None, Some(1300)], LAN, WAN), Some(1300));
    assert_eq!(limit([None, Some(1300)], WAN, LAN), Some(1300));
    assert_eq!(limit([Some(1400), Some(1300)], LAN, WAN), Some(1300));
    assert_eq!(limit([Some(1200), Some(1300)], WAN, LAN), Some(1200));
    assert_eq!(limit([Some(1200), None], LAN, LAN), Some(1200));
    assert_eq!(limit([None, Some(1300)], 7, 9), None, "no such interfaces");
    assert!(config(1500, Vec::new(), 0, false)
        .with_tcp_mss(&[None])
        .is_err());
}

/// `tcp_mss` on the WAN (a PPPoE-sized link): the SYN leaving by it and the SYN-ACK entering
/// by it both announce at most the clamp, with right checksums, and are counted; the rest of
/// the connection, and SYNs between interfaces without a clamp, keep what they carry.
#[test]
fn syns_through_an_interface_with_tcp_mss_are_clamped_both_ways() {
    let router = config(1492, Vec::new(), 0, false)
        .with_tcp_mss(&[None, Some(1452)])
        .unwrap();
    let mut gw = Gateway::with(Arc::new(router), WorkerSetup::default());
    let client = (HOST, 40000);
    let server = (REMOTE, 443);
    let public = (WAN_ADDR, 40000);
    let syn = tcp(LAN, client, server, seg(SYN, C_ISN, 0), &[]);
    assert_eq!(announced_mss(&syn), Some(1460));
    let (verdict, out) = gw.process(&syn, LAN, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(announced_mss(&out), Some(1452));
    let syn_ack = tcp(WAN, server, public, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    let (verdict, back) = gw.process(&syn_ack, WAN, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    assert_eq!(announced_mss(&back), Some(1452));
    assert_eq!(gw.counters.mss_clamped.get(), 2);
    let ack = tcp(LAN, client, server, seg(ACK, C_ISN + 1, S_ISN + 1), &[]);
    gw.forward(&ack, LAN, SECOND, WAN, public, server);
    let request = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(100),
    );
    gw.forward(&request, LAN, SECOND, WAN, public, server);
    assert_eq!(gw.counters.mss_clamped.get(), 2, "only SYNs");

    // Without a clamp the SYN leaves as it came (but for NAT).
    let mut plain = Gateway::new();
    let out = plain.forward(&syn, LAN, SECOND, WAN, public, server);
    assert_eq!(announced_mss(&out), Some(1460));
    assert_eq!(plain.counters.mss_clamped.get(), 0);
}

#[test]
fn masquerade_tcp_connection_from_handshake_to_close() {
    let mut gw = Gateway::new();
    let initial = gw.tables(0);
    assert_eq!((initial.flows, initial.nat_in_use), (0, 0));
    let client = (HOST, 40000);
    let server = (REMOTE, 443);
    let public = (WAN_ADDR, 40000);
    let mut now = SECOND;

    let syn = tcp(LAN, client, server, seg(SYN, C_ISN, 0), &[]);
    gw.forward(&syn, LAN, now, WAN, public, server);
    let syn_ack = tcp(WAN, server, public, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    gw.forward(&syn_ack, WAN, now, LAN, server, client);
    let ack = tcp(LAN, client, server, seg(ACK, C_ISN + 1, S_ISN + 1), &[]);
    gw.forward(&ack, LAN, now, WAN, public, server);
    let tables = gw.tables(now);
    assert_eq!((tables.flows, tables.nat_in_use), (1, 1));
    assert_eq!(tables.nat_available, initial.nat_available - 1);

    // Endpoint-independent mapping: the same internal endpoint to another destination keeps
    // its external port, and both connections work side by side.
    let other = (OTHER_REMOTE, 443);
    gw.forward(
        &tcp(LAN, client, other, seg(SYN, 77_000, 0), &[]),
        LAN,
        now,
        WAN,
        public,
        other,
    );
    gw.forward(
        &tcp(WAN, other, public, seg(SYN | ACK, 99_000, 77_001), &[]),
        WAN,
        now,
        LAN,
        other,
        client,
    );
    gw.forward(
        &tcp(LAN, client, other, seg(ACK, 77_001, 99_001), &[]),
        LAN,
        now,
        WAN,
        public,
        other,
    );
    let tables = gw.tables(now);
    assert_eq!(
        (tables.flows, tables.nat_in_use),
        (2, 1),
        "one binding, shared"
    );

    // Data both ways, then FIN, FIN, ACK.
    now += SECOND;
    let request = data(100);
    let segment = tcp(LAN, client, server, seg(PSH | ACK, 1001, 5001), &request);
    gw.forward(&segment, LAN, now, WAN, public, server);
    let response = data(200);
    let segment = tcp(WAN, server, public, seg(PSH | ACK, 5001, 1101), &response);
    gw.forward(&segment, WAN, now, LAN, server, client);
    let segment = tcp(LAN, client, server, seg(ACK, 1101, 5201), &[]);
    gw.forward(&segment, LAN, now, WAN, public, server);
    let segment = tcp(LAN, client, server, seg(FIN | ACK, 1101, 5201), &[]);
    gw.forward(&segment, LAN, now, WAN, public, server);
    let segment = tcp(WAN, server, public, seg(FIN | ACK, 5201, 1102), &[]);
    gw.forward(&segment, WAN, now, LAN, server, client);
    let segment = tcp(LAN, client, server, seg(ACK, 1102, 5202), &[]);
    gw.forward(&segment, LAN, now, WAN, public, server);
    assert_eq!(gw.counters.dropped_total(), 0);

    // The closed connection lingers in TIME_WAIT (120 s by default), then goes; the binding
    // stays while the other connection holds it, and is freed with it.
    assert_eq!(gw.tables(now + 100 * SECOND).flows, 2);
    let tables = gw.tables(now + 121 * SECOND);
    assert_eq!((tables.flows, tables.nat_in_use), (1, 1));
    let tables = gw.tables(now + 8000 * SECOND);
    assert_eq!((tables.flows, tables.nat_in_use), (0, 0));
    assert_eq!(tables.nat_available, initial.nat_available);
    assert_eq!(tables.expirations, 2);
}

#[test]
fn masquerade_udp_and_icmp_echo() {
    let mut gw = Gateway::new();
    let client = (HOST, 40001);
    let dns = (REMOTE, 53);
    let public = (WAN_ADDR, 40001);
    let query = udp(LAN, client, dns, b"\x12\x34 example.com A?");
    gw.forward(&query, LAN, 0, WAN, public, dns);
    let answer = udp(WAN, dns, public, b"\x12\x34 example.com A 93.184.216.34");
    gw.forward(&answer, WAN, 0, LAN, dns, client);

    // No checksum stays no checksum.
    let mut unchecked = udp(LAN, (HOST, 40002), dns, b"no checksum");
    unchecked[ETH_LEN + 20 + 6..ETH_LEN + 20 + 8].fill(0);
    gw.forward(&unchecked, LAN, 0, WAN, (WAN_ADDR, 40002), dns);

    // Identifier 7 is below the NAT range, so it is translated, and restored on the reply.
    let ping = echo(LAN, HOST, REMOTE, true, 7, 1);
    let (verdict, out) = gw.process(&ping, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let (public, _) = endpoints(&out);
    assert_eq!(public.0, WAN_ADDR);
    assert!(
        public.1 >= 1024,
        "identifier {} from the NAT range",
        public.1
    );
    assert_translated(&ping, &out, WAN, public, (REMOTE, public.1));
    let pong = echo(WAN, REMOTE, WAN_ADDR, false, public.1, 1);
    gw.forward(&pong, WAN, 0, LAN, (REMOTE, 7), (HOST, 7));

    // The next ping of the same session uses the same identifier.
    let ping = echo(LAN, HOST, REMOTE, true, 7, 2);
    gw.forward(&ping, LAN, 0, WAN, public, (REMOTE, public.1));
    assert_eq!(gw.counters.dropped_total(), 0);
    let tables = gw.tables(0);
    assert_eq!((tables.flows, tables.nat_in_use), (3, 3));
}

// --- 2. Unsolicited and invalid traffic ----------------------------------------------------

#[test]
fn unsolicited_wan_traffic_and_invalid_segments_are_dropped() {
    let mut gw = Gateway::new();
    let attacker = (REMOTE, 5555);
    for target in [(WAN_ADDR, 5555), (HOST, 22)] {
        let syn = tcp(WAN, attacker, target, seg(SYN, 1, 0), &[]);
        gw.expect_drop(&syn, WAN, 0, DropReason::FirewallDrop);
    }
    // A reply to a port no flow holds is unsolicited too.
    let stray = tcp(WAN, attacker, (WAN_ADDR, 40000), seg(SYN | ACK, 1, 2), &[]);
    gw.expect_drop(&stray, WAN, 0, DropReason::FirewallDrop);
    let ping = echo(WAN, REMOTE, WAN_ADDR, true, 9, 1);
    gw.expect_drop(&ping, WAN, 0, DropReason::FirewallDrop);
    assert_eq!(gw.dropped(DropReason::FirewallDrop), 4);

    // From the LAN, a TCP flow must start with a SYN; the port it was about to get goes back.
    let client = (HOST, 40010);
    let server = (REMOTE, 443);
    let ack = tcp(LAN, client, server, seg(ACK, 1, 1), &[]);
    gw.expect_drop(&ack, LAN, 0, DropReason::ConntrackInvalid);
    let tables = gw.tables(0);
    assert_eq!((tables.flows, tables.nat_in_use), (0, 0));

    // On an established flow, a segment far beyond the window is invalid and changes nothing.
    let public = handshake(&mut gw, client, server, 0);
    let ahead = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1 + 10_000_000, S_ISN + 1),
        &data(10),
    );
    gw.expect_drop(&ahead, LAN, 0, DropReason::ConntrackInvalid);
    let spoofed = tcp(
        WAN,
        server,
        public,
        seg(ACK | RST, S_ISN + 1 + 10_000_000, C_ISN + 1),
        &[],
    );
    gw.expect_drop(&spoofed, WAN, 0, DropReason::ConntrackInvalid);
    let in_window = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(10),
    );
    gw.forward(&in_window, LAN, 0, WAN, public, server);
    assert_eq!(gw.dropped(DropReason::ConntrackInvalid), 3);
    assert_eq!(gw.counters.dropped_total(), 7);
}

// --- 3. Port forwarding --------------------------------------------------------------------

/// The burst prefetches the reply tuple's index slot of a SYN through a forward before the
/// full path inserts the flow: the predicted tuple must be the one the insert indexes.
#[test]
fn the_burst_predicts_the_reply_tuple_of_a_forwarded_flow() {
    let mut gw = Gateway::new();
    let peer = (REMOTE, 5555);
    let from_wan = Ingress {
        port: WAN,
        handed_off: false,
    };
    let key = |src: Endpoint, dst: Endpoint| pipeline::flow::FlowKey {
        src: ip(src.0),
        dst: ip(dst.0),
        src_port: src.1,
        dst_port: dst.1,
        protocol: 6,
    };
    // TCP 8080 on the WAN address goes to the server's port 80; UDP 5001 to its 6001.
    for (forwarded, server, protocol) in [
        ((WAN_ADDR, 8080), (SERVER, 80), 6),
        ((WAN_ADDR, 5001), (SERVER, 6001), 17),
    ] {
        let opening = pipeline::flow::FlowKey {
            protocol,
            ..key(peer, forwarded)
        };
        let predicted = gw.pipeline.forwarded_reply(&opening, from_wan);
        let packet = if protocol == 6 {
            tcp(WAN, peer, forwarded, seg(SYN, 300, 0), &[])
        } else {
            udp(WAN, peer, forwarded, b"join")
        };
        gw.forward(&packet, WAN, 0, LAN, peer, server);
        let mut flows = Vec::with_capacity(4);
        let filter = FlowFilter {
            port: Some(forwarded.1),
            ..FlowFilter::default()
        };
        let capacity = gw.pipeline.flow_capacity();
        gw.pipeline.list_flows(&filter, 0, capacity, 0, &mut flows);
        assert_eq!(flows.len(), 1);
        assert_eq!(predicted, Some(flows[0].reply), "protocol {protocol}");
    }
    // No forward on that port, or a flow from inside (a hairpin, whose source NAT the
    // insert decides): no prediction.
    assert_eq!(
        gw.pipeline
            .forwarded_reply(&key(peer, (WAN_ADDR, 8081)), from_wan),
        None
    );
    let from_lan = Ingress {
        port: LAN,
        handed_off: false,
    };
    assert_eq!(
        gw.pipeline
            .forwarded_reply(&key((HOST, 40000), (WAN_ADDR, 8080)), from_lan),
        None
    );
}

#[test]
fn port_forwards_reach_the_server_and_replies_leave_from_the_forwarded_port() {
    let mut gw = Gateway::new();
    let peer = (REMOTE, 5555);
    let forwarded = (WAN_ADDR, 8080);
    let server = (SERVER, 80);
    let syn = tcp(WAN, peer, forwarded, seg(SYN, 300, 0), &[]);
    gw.forward(&syn, WAN, 0, LAN, peer, server);
    let syn_ack = tcp(LAN, server, peer, seg(SYN | ACK, 900, 301), &[]);
    gw.forward(&syn_ack, LAN, 0, WAN, forwarded, peer);
    let ack = tcp(WAN, peer, forwarded, seg(ACK, 301, 901), &[]);
    gw.forward(&ack, WAN, 0, LAN, peer, server);
    let request = tcp(
        WAN,
        peer,
        forwarded,
        seg(PSH | ACK, 301, 901),
        b"GET / HTTP/1.0\r\n\r\n",
    );
    gw.forward(&request, WAN, 0, LAN, peer, server);

    // UDP 5000-5002 maps one to one onto 6000-6002.
    let game = (WAN_ADDR, 5001);
    let datagram = udp(WAN, peer, game, b"join");
    gw.forward(&datagram, WAN, 0, LAN, peer, (SERVER, 6001));
    let reply = udp(LAN, (SERVER, 6001), peer, b"welcome");
    gw.forward(&reply, LAN, 0, WAN, game, peer);

    // The server's port unreachable about a forwarded datagram goes out as from the gateway,
    // quoting the datagram as the peer sent it.
    let (_, delivered) = gw.process(&udp(WAN, peer, game, b"again"), WAN, 0);
    let unreachable = icmp_error(
        LAN,
        SERVER,
        REMOTE,
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port),
        &delivered[ETH_LEN..],
    );
    let (verdict, out) = gw.process(&unreachable, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let (_, outer, message) = parse_ipv4(&out);
    assert_eq!((outer.source, outer.destination), (WAN_ADDR, REMOTE));
    let icmp = check_icmp(message);
    let expected = as_forwarded(&udp(WAN, peer, game, b"again"));
    assert_eq!(
        icmp.payload(),
        &expected[..],
        "the datagram as the peer sent it"
    );

    // Ports outside the forwards, or of the other protocol, are not forwarded.
    let not_forwarded = [
        udp(WAN, peer, (WAN_ADDR, 5003), b"x"),
        udp(WAN, peer, (WAN_ADDR, 8080), b"x"),
        tcp(WAN, peer, (WAN_ADDR, 5001), seg(SYN, 1, 0), &[]),
    ];
    for frame in not_forwarded {
        gw.expect_drop(&frame, WAN, 0, DropReason::FirewallDrop);
    }
    assert_eq!(gw.counters.dropped_total(), 3);
    // Forwards take no NAT binding.
    assert_eq!(gw.tables(0).nat_in_use, 0);
}

#[test]
fn a_forward_counts_the_flows_it_decides_and_a_rule_that_matches_one_counts_it_instead() {
    // A rule dropping one peer's traffic to the forward's target; the forward decides the rest.
    let banned = [198, 51, 100, 99];
    let ban = Rule {
        from: Some(WAN_ZONE),
        src: Some((ip(banned), 32)),
        ..rule("ban", Action::Drop)
    };
    let mut router = config(1500, vec![ban], 0, false);
    let hit_counter = || Arc::new(RuleHits::new(1));
    let forwards = [hit_counter(), hit_counter()];
    let rules = [hit_counter()];
    router
        .stateful
        .firewall
        .attach_forward_hits(forwards.to_vec());
    router.stateful.firewall.attach_hits(rules.to_vec());
    let mut gw = Gateway::with(Arc::new(router), WorkerSetup::default());
    gw.pipeline.set_wall_clock(1_700_000_000, 0);

    let forwarded = (WAN_ADDR, 8080);
    for (port, at_s) in [(5555, 1), (5556, 7)] {
        let syn = tcp(WAN, (REMOTE, port), forwarded, seg(SYN, 300, 0), &[]);
        gw.forward(
            &syn,
            WAN,
            at_s * 1_000_000_000,
            LAN,
            (REMOTE, port),
            (SERVER, 80),
        );
    }
    // Later packets of a flow are not counted again.
    let ack = tcp(WAN, (REMOTE, 5555), forwarded, seg(ACK, 301, 0), &[]);
    gw.process(&ack, WAN, 8_000_000_000);
    let banned_syn = tcp(WAN, (banned, 4000), forwarded, seg(SYN, 1, 0), &[]);
    gw.expect_drop(&banned_syn, WAN, 9_000_000_000, DropReason::FirewallDrop);

    assert_eq!(forwards[0].total(), 2, "the TCP forward's two flows");
    assert_eq!(forwards[0].last_matched(), Some(1_700_000_007));
    assert_eq!(forwards[1].total(), 0, "the UDP forward decided nothing");
    assert_eq!(rules[0].total(), 1, "the banned peer's SYN is the rule's");
    assert_eq!(rules[0].last_matched(), Some(1_700_000_009));
}

/// A logged zone pair logs what its default decides, and only that: not a port forward's
/// decision on a flow between the same zones, nor another pair's.
#[test]
fn a_logged_pair_logs_its_defaults_decisions_only() {
    use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
    use std::net::IpAddr;
    let mut router = config(1500, Vec::new(), 0, false);
    let to_gateway: Arc<str> = Arc::from("policy wan->local");
    router.stateful.firewall.attach_pair_logged(vec![
        ((WAN_ZONE, ZoneId::LOCAL), Some(to_gateway.clone())),
        ((WAN_ZONE, LAN_ZONE), Some(Arc::from("policy wan->lan"))),
    ]);
    let log = Arc::new(FirewallLog::new(16));
    let setup = WorkerSetup {
        firewall_log: Some(FirewallLogger::new(log.clone(), 100, 100)),
        ..WorkerSetup::default()
    };
    let mut gw = Gateway::with(Arc::new(router), setup);
    // The forward decides a flow from WAN to LAN: the forward's decision, not the pair's.
    let forwarded = tcp(WAN, (REMOTE, 5555), (WAN_ADDR, 8080), seg(SYN, 300, 0), &[]);
    gw.forward(&forwarded, WAN, 0, LAN, (REMOTE, 5555), (SERVER, 80));
    // LAN to WAN: that pair is not logged.
    let out = tcp(LAN, (HOST, 40000), (REMOTE, 443), seg(SYN, C_ISN, 0), &[]);
    let (verdict, _) = gw.process(&out, LAN, 1);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    // WAN to the gateway's port 22: the pair wan -> local's default drops it, logged.
    let to_ssh = tcp(WAN, (REMOTE, 5556), (WAN_ADDR, 22), seg(SYN, 1, 0), &[]);
    gw.expect_drop(&to_ssh, WAN, 2, DropReason::FirewallDrop);

    let mut events = Vec::new();
    log.drain(|event| events.push(event));
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event.rule, to_gateway);
    assert_eq!(event.action, Action::Drop);
    assert_eq!((event.from, event.to), (WAN_ZONE, ZoneId::LOCAL));
    assert_eq!((event.ingress, event.egress), (WAN, None));
    assert_eq!(event.src, (IpAddr::from(REMOTE), 5556));
    assert_eq!(event.dst, (IpAddr::from(WAN_ADDR), 22));
}

/// A logged rule's accept of a masqueraded flow carries the source it leaves with, after the
/// translation; its drop of another carries none.
#[test]
fn a_logged_accept_carries_its_masqueraded_source() {
    use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
    use std::net::IpAddr;
    let web = Rule {
        from: Some(LAN_ZONE),
        protocol: Some(6),
        dst_ports: Some(443..=443),
        ..rule("web-out", Action::Accept)
    };
    let discard = Rule {
        from: Some(LAN_ZONE),
        protocol: Some(6),
        dst_ports: Some(9..=9),
        ..rule("no-discard", Action::Drop)
    };
    let mut router = config(1500, vec![web, discard], 0, false);
    router.stateful.firewall.attach_logged(vec![
        Some(Arc::from("web-out")),
        Some(Arc::from("no-discard")),
    ]);
    let log = Arc::new(FirewallLog::new(16));
    let setup = WorkerSetup {
        firewall_log: Some(FirewallLogger::new(log.clone(), 100, 100)),
        ..WorkerSetup::default()
    };
    let mut gw = Gateway::with(Arc::new(router), setup);
    let out = tcp(LAN, (HOST, 40000), (REMOTE, 443), seg(SYN, C_ISN, 0), &[]);
    let (verdict, sent) = gw.process(&out, LAN, 1);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let ((address, port), _) = endpoints(&sent);
    let left_with = (std::net::Ipv4Addr::from(address), port);
    let discard = tcp(LAN, (HOST, 40001), (REMOTE, 9), seg(SYN, C_ISN, 0), &[]);
    gw.expect_drop(&discard, LAN, 2, DropReason::FirewallDrop);

    let mut events = Vec::new();
    log.drain(|event| events.push(event));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        (&*events[0].rule, events[0].action),
        ("web-out", Action::Accept)
    );
    assert_eq!(events[0].src, (IpAddr::from(HOST), 40000), "as it arrived");
    assert_eq!(events[0].translated_src, Some(left_with), "as it left");
    assert_eq!(address, WAN_ADDR);
    assert_eq!(
        (&*events[1].rule, events[1].translated_src),
        ("no-discard", None)
    );
}

/// The drop log samples a burst's drops for the asked reasons, one in N, each with its flow
/// as the dropped frame gives it and the zone it came from; what passes, and drops for other
/// reasons, are not logged.
#[test]
fn the_drop_log_samples_the_asked_reasons_drops_from_a_burst() {
    use pipeline::state::drop_log::DropSampler;
    use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
    use pipeline::verdict::ReasonSet;
    use std::net::IpAddr;
    let mut reasons = ReasonSet::default();
    reasons.insert(DropReason::FirewallDrop);
    let log = Arc::new(FirewallLog::new(16));
    let logger = FirewallLogger::new(log.clone(), 100, 100);
    let setup = WorkerSetup {
        firewall_log: Some(logger.with_drops(DropSampler::new(reasons, 2, 100, 100))),
        ..WorkerSetup::default()
    };
    let mut gw = Gateway::with(Arc::new(config(1500, Vec::new(), 0, false)), setup);
    // Four UDP datagrams from the WAN to the gateway's port 22 (the wan -> local default
    // drops them), a LAN host's datagram out (it passes), and one to a MAC not the WAN's.
    let mut burst: Vec<(Vec<u8>, u16)> = (0..4)
        .map(|i| (udp(WAN, (REMOTE, 6000 + i), (WAN_ADDR, 22), &[0; 8]), WAN))
        .collect();
    burst.push((udp(LAN, (HOST, 40000), (REMOTE, 53), &[0; 8]), LAN));
    let mut foreign = udp(WAN, (REMOTE, 7000), (WAN_ADDR, 22), &[0; 8]);
    foreign[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x99]);
    burst.push((foreign, WAN));
    let mut rooms = vec![[GARBAGE; ROOM]; burst.len()];
    let mut packets: Vec<PacketBuf> = rooms
        .iter_mut()
        .zip(&burst)
        .map(|(room, (frame, _))| {
            room[..frame.len()].copy_from_slice(frame);
            PacketBuf::new(room, frame.len())
        })
        .collect();
    let ingress: Vec<Ingress> = burst
        .iter()
        .map(|&(_, port)| Ingress {
            port,
            handed_off: false,
        })
        .collect();
    // Filled with what no packet here gets, so each assertion below reads a decided verdict.
    let mut verdicts = vec![Verdict::Transmit { port: 99 }; burst.len()];
    gw.pipeline
        .process_burst(&mut packets, &ingress, 60, &mut verdicts, |_| {});
    assert_eq!(verdicts[..4], [Verdict::Drop(DropReason::FirewallDrop); 4]);
    assert_eq!(verdicts[4], Verdict::Transmit { port: WAN });
    assert_eq!(verdicts[5], Verdict::Drop(DropReason::NotOurMac));

    let mut events = Vec::new();
    log.drain(|event| events.push(event));
    let sources: Vec<_> = events.iter().map(|event| event.src).collect();
    assert_eq!(
        sources,
        [(IpAddr::from(REMOTE), 6000), (IpAddr::from(REMOTE), 6002)],
        "one in two of the firewall's drops, and nothing else: {events:?}"
    );
    let event = &events[0];
    assert_eq!(event.dropped, Some(DropReason::FirewallDrop));
    assert_eq!(&*event.rule, "firewall_drop");
    assert_eq!(
        (event.action, event.from, event.ingress),
        (Action::Drop, WAN_ZONE, WAN)
    );
    assert_eq!(event.dst, (IpAddr::from(WAN_ADDR), 22));
    assert_eq!(event.protocol, 17);
}

// --- 4. Hairpin ----------------------------------------------------------------------------

#[test]
fn hairpin_to_a_forwarded_port_comes_back_through_the_gateway() {
    let mut gw = Gateway::new();
    let client = (HOST, 40020);
    let forwarded = (WAN_ADDR, 8080);
    let server = (SERVER, 80);
    let syn = tcp(LAN, client, forwarded, seg(SYN, C_ISN, 0), &[]);
    let (verdict, out) = gw.process(&syn, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (source, destination) = endpoints(&out);
    assert_eq!(destination, server);
    assert_eq!(source.0, LAN_ADDR, "the gateway's LAN address");
    assert!(
        source.1 >= 1024 && source.1 != 8080,
        "a NAT port: {}",
        source.1
    );
    assert_translated(&syn, &out, LAN, source, server);
    assert_eq!(gw.tables(0).nat_in_use, 1);

    let syn_ack = tcp(LAN, server, source, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    gw.forward(&syn_ack, LAN, 0, LAN, forwarded, client);
    let ack = tcp(LAN, client, forwarded, seg(ACK, C_ISN + 1, S_ISN + 1), &[]);
    gw.forward(&ack, LAN, 0, LAN, source, server);
    let response = tcp(
        LAN,
        server,
        source,
        seg(PSH | ACK, S_ISN + 1, C_ISN + 1),
        b"HTTP/1.0 200 OK\r\n\r\n",
    );
    gw.forward(&response, LAN, 0, LAN, forwarded, client);
    assert_eq!(gw.counters.dropped_total(), 0);
}

// --- 5. ICMP errors (RFC 5508) -------------------------------------------------------------

/// Parses an ICMP error the gateway forwarded to HOST on the LAN, with every checksum checked,
/// and returns its outer source, type and quote.
fn forwarded_error(out: &[u8]) -> ([u8; 4], Icmpv4Type, Vec<u8>) {
    let (eth, outer, message) = parse_ipv4(out);
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!(outer.destination, HOST);
    assert_eq!(outer.time_to_live, 63);
    let icmp = check_icmp(message);
    let quote = icmp.payload();
    let (quoted, _) = Ipv4Header::from_slice(quote).unwrap();
    assert_eq!(
        raw_sum(&quote[..quoted.header_len()]),
        0,
        "quoted IPv4 checksum"
    );
    (outer.source, icmp.icmp_type(), quote.to_vec())
}

#[test]
fn icmp_errors_about_masqueraded_flows_are_translated_back() {
    let mut gw = Gateway::new();
    let client = (HOST, 40001);
    let dns = (REMOTE, 53);
    let query = udp(LAN, client, dns, b"\x00\x01 example.net AAAA?");
    let sent = gw.forward(&query, LAN, 0, WAN, (WAN_ADDR, 40001), dns);

    // The server's port unreachable quotes the whole translated datagram.
    let port_unreachable = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port);
    let error = icmp_error(
        WAN,
        REMOTE,
        WAN_ADDR,
        port_unreachable.clone(),
        &sent[ETH_LEN..],
    );
    let (verdict, out) = gw.process(&error, WAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (source, kind, quote) = forwarded_error(&out);
    assert_eq!(source, REMOTE);
    assert_eq!(kind, port_unreachable);
    let expected = as_forwarded(&query);
    assert_eq!(
        quote, expected,
        "the datagram as the client sent it, one hop on"
    );
    let (quoted_ip, quoted_udp) = Ipv4Header::from_slice(&quote).unwrap();
    let (udp_header, _) = check_udp(&quoted_ip, quoted_udp);
    assert_eq!((quoted_ip.source, udp_header.source_port), client);

    // A router on the path keeps its own address and the next-hop MTU; the quote is only the
    // header and 8 bytes of a TCP SYN.
    let syn = tcp(LAN, (HOST, 40002), (REMOTE, 443), seg(SYN, C_ISN, 0), &[]);
    let sent = gw.forward(&syn, LAN, 0, WAN, (WAN_ADDR, 40002), (REMOTE, 443));
    let too_big = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
        next_hop_mtu: 1400,
    });
    let error = icmp_error(
        WAN,
        HOP,
        WAN_ADDR,
        too_big.clone(),
        &sent[ETH_LEN..ETH_LEN + 28],
    );
    let (verdict, out) = gw.process(&error, WAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (source, kind, quote) = forwarded_error(&out);
    assert_eq!(source, HOP, "the reporting router stays the source");
    assert_eq!(kind, too_big, "next-hop MTU kept");
    assert_eq!(quote, &as_forwarded(&syn)[..28]);

    // A time exceeded about a ping gets the identifier back.
    let ping = echo(LAN, HOST, REMOTE, true, 7, 1);
    let (_, sent) = gw.process(&ping, LAN, 0);
    let expired = Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit);
    let error = icmp_error(WAN, HOP, WAN_ADDR, expired.clone(), &sent[ETH_LEN..]);
    let (verdict, out) = gw.process(&error, WAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (_, kind, quote) = forwarded_error(&out);
    assert_eq!(kind, expired);
    assert_eq!(quote, as_forwarded(&ping));
    check_icmp(&quote[20..]);

    // An error about nothing the gateway sent is dropped.
    let never_sent = udp(WAN, (WAN_ADDR, 40999), dns, b"?");
    let error = icmp_error(
        WAN,
        REMOTE,
        WAN_ADDR,
        port_unreachable,
        &never_sent[ETH_LEN..],
    );
    gw.expect_drop(&error, WAN, 0, DropReason::UnrelatedIcmpError);
    assert_eq!(gw.counters.dropped_total(), 1);
}

// --- 6. Full tables ------------------------------------------------------------------------

fn tiny_table(capacity: usize) -> WorkerSetup {
    WorkerSetup {
        conntrack: ConntrackConfig {
            capacity,
            ..ConntrackConfig::default()
        },
        ..WorkerSetup::default()
    }
}

#[test]
fn a_full_table_keeps_established_flows() {
    let mut gw = Gateway::with(home(), tiny_table(4));
    let server = (REMOTE, 443);
    let publics: Vec<Endpoint> = (0..4)
        .map(|i| handshake(&mut gw, (HOST, 41000 + i), server, 0))
        .collect();
    let syn = tcp(LAN, (HOST, 41004), server, seg(SYN, C_ISN, 0), &[]);
    gw.expect_drop(&syn, LAN, SECOND, DropReason::ConntrackFull);
    for (i, public) in publics.into_iter().enumerate() {
        let client = (HOST, 41000 + i as u16);
        let segment = tcp(
            LAN,
            client,
            server,
            seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
            &data(8),
        );
        gw.forward(&segment, LAN, SECOND, WAN, public, server);
    }
    let tables = gw.tables(SECOND);
    assert_eq!((tables.flows, tables.evictions), (4, 0));
    assert_eq!(tables.nat_in_use, 4, "the refused flow's port went back");

    // A half-open flow, by contrast, makes room.
    let mut gw = Gateway::with(home(), tiny_table(4));
    for i in 0..3 {
        handshake(&mut gw, (HOST, 41000 + i), server, 0);
    }
    let half_open = tcp(LAN, (HOST, 41003), server, seg(SYN, C_ISN, 0), &[]);
    gw.forward(&half_open, LAN, 0, WAN, (WAN_ADDR, 41003), server);
    gw.forward(&syn, LAN, SECOND, WAN, (WAN_ADDR, 41004), server);
    let tables = gw.tables(SECOND);
    assert_eq!(
        (tables.flows, tables.evictions, tables.nat_in_use),
        (4, 1, 4)
    );
    let late_reply = tcp(
        WAN,
        server,
        (WAN_ADDR, 41003),
        seg(SYN | ACK, S_ISN, C_ISN + 1),
        &[],
    );
    gw.expect_drop(&late_reply, WAN, SECOND, DropReason::FirewallDrop);
}

#[test]
fn nat_ports_run_out_and_come_back_when_flows_expire() {
    const UDP_TIMEOUT: u64 = 30 * SECOND;
    let setup = WorkerSetup {
        conntrack: ConntrackConfig {
            capacity: 1024,
            timeouts: Timeouts {
                udp_ns: UDP_TIMEOUT,
                ..Timeouts::default()
            },
            tcp_loose: false,
            ..ConntrackConfig::default()
        },
        nat_ports: 20000..=20255,
        ..WorkerSetup::default()
    };
    let mut gw = Gateway::with(home(), setup);
    let initial = gw.tables(0);
    assert_eq!(
        initial.nat_available,
        3 * 256,
        "256 ports for each of TCP, UDP, ICMP"
    );
    let dns = (REMOTE, 53);
    let mut ports = HashSet::new();
    for i in 0..256 {
        let query = udp(LAN, (HOST, 30000 + i), dns, b"?");
        let (verdict, out) = gw.process(&query, LAN, 0);
        assert_eq!(verdict, Verdict::Transmit { port: WAN }, "flow {i}");
        let (public, _) = endpoints(&out);
        assert_eq!(public.0, WAN_ADDR);
        assert!((20000..=20255).contains(&public.1));
        assert!(ports.insert(public.1), "port {} handed out twice", public.1);
    }
    let last = udp(LAN, (HOST, 30256), dns, b"?");
    gw.expect_drop(&last, LAN, 0, DropReason::NatPortsExhausted);
    let tables = gw.tables(0);
    assert_eq!((tables.flows, tables.nat_in_use), (256, 256));
    assert_eq!(tables.nat_available, 2 * 256);

    // A bound endpoint needs no new port, and the other protocols have their own.
    let (verdict, out) = gw.process(&udp(LAN, (HOST, 30000), (OTHER_REMOTE, 53), b"?"), LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert!(ports.contains(&endpoints(&out).0 .1));
    let syn = tcp(LAN, (HOST, 30256), (REMOTE, 443), seg(SYN, C_ISN, 0), &[]);
    assert_eq!(gw.process(&syn, LAN, 0).0, Verdict::Transmit { port: WAN });

    // Past the UDP timeout the sweep frees every UDP port.
    let later = UDP_TIMEOUT + SECOND;
    let tables = gw.tables(later);
    assert_eq!(
        (tables.flows, tables.nat_in_use),
        (1, 1),
        "only the TCP flow"
    );
    assert_eq!(tables.expirations, 257);
    assert_eq!(tables.nat_available, 3 * 256 - 1);
    let (verdict, _) = gw.process(&last, LAN, later);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(gw.dropped(DropReason::NatPortsExhausted), 1);
}

// --- 6b. Bounded state per host ----------------------------------------------------------

/// Limits small enough to reach in a test.
fn limited(configure: impl FnOnce(&mut WorkerSetup)) -> WorkerSetup {
    let mut setup = WorkerSetup {
        nat_ports: 20000..=20255,
        ..WorkerSetup::default()
    };
    configure(&mut setup);
    setup
}

/// A DNS query from `client` through NAT and its answer back; true if both got through.
fn dns_exchange(gw: &mut Gateway, client: Endpoint, now: u64) -> bool {
    let dns = (REMOTE, 53);
    let (verdict, out) = gw.process(&udp(LAN, client, dns, b"?"), LAN, now);
    if verdict != (Verdict::Transmit { port: WAN }) {
        return false;
    }
    let (public, _) = endpoints(&out);
    let (verdict, out) = gw.process(&udp(WAN, dns, public, b"!"), WAN, now);
    verdict == Verdict::Transmit { port: LAN } && endpoints(&out).1 == client
}

#[test]
fn a_host_spraying_udp_from_new_ports_takes_its_nat_share_and_another_still_gets_through() {
    // The measured failure: one host spraying from ever-new source ports took every UDP port
    // and another host then got 0 of 20 exchanges through.
    let mut gw = Gateway::with(home(), limited(|setup| setup.nat_host_ports = 100));
    let mut sent = 0;
    for port in 0..1000 {
        let spray = udp(LAN, (HOST, 10000 + port), (REMOTE, 9), b"x");
        match gw.process(&spray, LAN, 0).0 {
            Verdict::Transmit { port: WAN } => sent += 1,
            Verdict::Drop(DropReason::HostNatPortLimit) => {}
            other => panic!("spray packet {port}: {other:?}"),
        }
    }
    assert_eq!(sent, 100);
    assert_eq!(gw.dropped(DropReason::HostNatPortLimit), 900);
    assert_eq!(gw.dropped(DropReason::NatPortsExhausted), 0);
    let tables = gw.tables(0);
    assert_eq!(tables.nat_in_use, 100);
    assert_eq!(gw.counters.hosts_at_nat_port_limit.get(), 1);
    // The sprayer's own mapped endpoints keep working.
    assert!(dns_exchange(&mut gw, (HOST, 10000), 0));
    let got_through = (0..20)
        .filter(|&i| dns_exchange(&mut gw, (SERVER, 33000 + i), SECOND))
        .count();
    assert_eq!(got_through, 20, "the other host's exchanges");
}

#[test]
fn a_host_at_its_flow_limit_is_refused_and_another_host_is_not() {
    let mut gw = Gateway::with(home(), limited(|setup| setup.conntrack.host_flows = 50));
    // One source port (one NAT binding), many destinations: flows, not ports, run out.
    for n in 0..60_u8 {
        let frame = udp(LAN, (HOST, 5000), ([203, 0, 113, n], 9), b"x");
        let verdict = gw.process(&frame, LAN, 0).0;
        if n < 50 {
            assert_eq!(verdict, Verdict::Transmit { port: WAN }, "flow {n}");
        } else {
            assert_eq!(
                verdict,
                Verdict::Drop(DropReason::HostFlowLimit),
                "flow {n}"
            );
        }
    }
    gw.tables(0);
    assert_eq!(gw.counters.hosts_at_flow_limit.get(), 1);
    assert!(dns_exchange(&mut gw, (SERVER, 33000), 0));
    // Past the UDP timeout the host has its room again.
    let later = 301 * SECOND;
    gw.tables(later);
    assert_eq!(gw.counters.hosts_at_flow_limit.get(), 0);
    assert!(dns_exchange(&mut gw, (HOST, 5000), later));
}

#[test]
fn udp_flows_with_one_reply_make_room_for_another_hosts_flows() {
    // Before early drop, flows that got one reply were never evicted: one host could fill the
    // table with them.
    let mut gw = Gateway::with(home(), limited(|setup| setup.conntrack.capacity = 32));
    for i in 0..32 {
        assert!(dns_exchange(&mut gw, (HOST, 30000 + i), 0));
    }
    assert_eq!(gw.tables(0).flows, 32);
    // An assured stream of another host, then more of its exchanges: each takes the place of
    // one of the sprayer's unassured flows, and the stream is never the one evicted.
    assert!(dns_exchange(&mut gw, (SERVER, 40000), SECOND));
    assert!(dns_exchange(&mut gw, (SERVER, 40000), SECOND));
    for i in 0..20 {
        assert!(
            dns_exchange(&mut gw, (SERVER, 41000 + i), 2 * SECOND),
            "exchange {i}"
        );
        assert!(
            dns_exchange(&mut gw, (SERVER, 40000), 2 * SECOND),
            "the stream, {i}"
        );
    }
    assert_eq!(gw.dropped(DropReason::ConntrackFull), 0);
    let tables = gw.tables(2 * SECOND);
    assert_eq!((tables.flows, tables.evictions), (32, 21));
}

#[test]
fn a_syn_flood_at_a_forward_fills_half_open_then_gets_cookies_and_established_ones_keep_going() {
    let mut gw = Gateway::with(
        home(),
        limited(|setup| {
            setup.conntrack.capacity = 64;
            setup.conntrack.half_open = 8;
        }),
    );
    let forwarded = (WAN_ADDR, 8080);
    let server = (SERVER, 80);
    // Three connections through the forward and a LAN client's own connection, established.
    let peers: Vec<Endpoint> = (0..3).map(|i| (REMOTE, 5000 + i)).collect();
    for &peer in &peers {
        let syn = tcp(WAN, peer, forwarded, seg(SYN, 300, 0), &[]);
        gw.forward(&syn, WAN, 0, LAN, peer, server);
        let syn_ack = tcp(LAN, server, peer, seg(SYN | ACK, 900, 301), &[]);
        gw.forward(&syn_ack, LAN, 0, WAN, forwarded, peer);
        let ack = tcp(WAN, peer, forwarded, seg(ACK, 301, 901), &[]);
        gw.forward(&ack, WAN, 0, LAN, peer, server);
    }
    let web = (OTHER_REMOTE, 443);
    let public = handshake(&mut gw, (HOST, 41000), web, 0);
    // Fill the rest of the table with assured UDP streams, so the flood meets a full table.
    for i in 0..52 {
        assert!(dns_exchange(&mut gw, (HOST, 30000 + i), 0));
        assert!(dns_exchange(&mut gw, (HOST, 30000 + i), 0));
    }
    assert_eq!(gw.tables(0).flows, 56);

    // Spoofed SYNs from random sources, interleaved with the established traffic.
    let mut seed = 0x2545_f491_u32;
    let mut refused_established = 0;
    let mut forwarded_syns = 0;
    let mut cookies = 0;
    for n in 0..2000_u32 {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let spoofed = (seed.to_be_bytes(), (seed >> 7) as u16 | 1024);
        let now = SECOND + u64::from(n) * 1_000_000;
        let syn = tcp(WAN, spoofed, forwarded, seg(SYN, seed, 0), &[]);
        match gw.process(&syn, WAN, now).0 {
            Verdict::Transmit { port: LAN } => forwarded_syns += 1,
            Verdict::Transmit { port: WAN } => cookies += 1,
            // A martian source (or, in general, one source validation refuses).
            Verdict::Drop(reason) => assert_ne!(reason, DropReason::ConntrackFull, "SYN {n}"),
            other => panic!("SYN {n}: {other:?}"),
        }
        if n % 10 == 0 {
            let peer = peers[n as usize / 10 % 3];
            let download = tcp(WAN, peer, forwarded, seg(PSH | ACK, 301, 901), &data(8));
            let answer = tcp(LAN, server, peer, seg(ACK, 901, 309), &[]);
            let upload = tcp(
                LAN,
                (HOST, 41000),
                web,
                seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
                &data(8),
            );
            for (frame, ingress) in [(download, WAN), (answer, LAN), (upload, LAN)] {
                if !matches!(gw.process(&frame, ingress, now).0, Verdict::Transmit { .. }) {
                    refused_established += 1;
                }
            }
        }
    }
    assert_eq!(refused_established, 0);
    let tables = gw.tables(3 * SECOND);
    assert_eq!(gw.counters.conntrack_half_open.get(), 8);
    assert_eq!(tables.flows, 64, "56 established and 8 half-open");
    // The first 8 took the free slots; with the half-open table full, the SYN proxy answered
    // every later one with a cookie, keeping nothing.
    assert_eq!(forwarded_syns, 8);
    assert!(cookies > 1800, "{cookies}");
    assert_eq!(gw.counters.syn_cookies_sent.get(), cookies);
    assert_eq!(tables.evictions, 0, "nothing churned");
    assert_eq!(gw.dropped(DropReason::ConntrackFull), 0);
    // Every established flow is still there, both ways.
    for &peer in &peers {
        let download = tcp(WAN, peer, forwarded, seg(PSH | ACK, 301, 901), &data(8));
        gw.forward(&download, WAN, 3 * SECOND, LAN, peer, server);
    }
    let upload = tcp(
        LAN,
        (HOST, 41000),
        web,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(8),
    );
    gw.forward(&upload, LAN, 3 * SECOND, WAN, public, web);
    for i in 0..52 {
        assert!(
            dns_exchange(&mut gw, (HOST, 30000 + i), 3 * SECOND),
            "stream {i}"
        );
    }
    // A new connection from the LAN still gets a place (a half-open flow's).
    handshake(&mut gw, (SERVER, 42000), web, 3 * SECOND);
}

/// The half-open table of a worker filled by two SYNs toward the forward that nobody
/// answers: the state of a flood, in which the SYN proxy answers for the forward.
fn flooded_gateway() -> Gateway {
    let mut gw = Gateway::with(home(), limited(|setup| setup.conntrack.half_open = 2));
    for port in [6000, 6001] {
        let peer = (OTHER_REMOTE, port);
        let syn = tcp(WAN, peer, (WAN_ADDR, 8080), seg(SYN, 1, 0), &[]);
        gw.forward(&syn, WAN, 0, LAN, peer, (SERVER, 80));
    }
    gw
}

/// The TCP segment of a frame the gateway made or sent: its MACs (destination, source),
/// addresses and ports asserted, its checksums verified; its header and data.
fn sent_tcp(
    frame: &[u8],
    (to_mac, from_mac): ([u8; 6], [u8; 6]),
    (src, dst): (Endpoint, Endpoint),
) -> (TcpHeader, Vec<u8>) {
    let (eth, header, segment) = parse_ipv4(frame);
    assert_eq!((eth.destination, eth.source), (to_mac, from_mac));
    assert_eq!((header.source, header.destination), (src.0, dst.0));
    let (sent, payload) = check_tcp(&header, segment);
    assert_eq!((sent.source_port, sent.destination_port), (src.1, dst.1));
    (sent, payload.to_vec())
}

/// The cookie in the SYN-ACK the gateway answered `client`'s SYN with (checked on the way).
fn proxy_cookie(gw: &mut Gateway, client: Endpoint, now: u64) -> u32 {
    let syn = tcp(WAN, client, (WAN_ADDR, 8080), seg(SYN, C_ISN, 0), &[]);
    let (verdict, out) = gw.process(&syn, WAN, now);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let to_upstream = (UPSTREAM_MAC, WAN_MAC);
    let (syn_ack, payload) = sent_tcp(&out, to_upstream, ((WAN_ADDR, 8080), client));
    assert!(syn_ack.syn && syn_ack.ack && !syn_ack.rst && !syn_ack.fin);
    assert_eq!(syn_ack.acknowledgment_number, C_ISN + 1);
    assert_eq!(syn_ack.window_size, 0, "no data before the server answers");
    // MSS alone: no window scale, SACK or timestamps to rewrite later.
    let options: Vec<_> = syn_ack.options_iterator().map(|o| o.unwrap()).collect();
    assert_eq!(options, [TcpOptionElement::MaximumSegmentSize(1460)]);
    assert!(payload.is_empty());
    syn_ack.sequence_number
}

/// A segment of a proxied flow through the gateway, sent on `src -> dst` (the other port);
/// its TCP header and data as they left, checksums verified.
fn relay(
    gw: &mut Gateway,
    frame: &[u8],
    ingress: u16,
    (src, dst): (Endpoint, Endpoint),
) -> (TcpHeader, Vec<u8>) {
    let (egress, macs) = if ingress == LAN {
        (WAN, (UPSTREAM_MAC, WAN_MAC))
    } else {
        (LAN, (lan_mac(dst.0), LAN_MAC))
    };
    let (verdict, out) = gw.process(frame, ingress, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: egress });
    sent_tcp(&out, macs, (src, dst))
}

#[test]
fn under_a_flood_the_syn_proxy_opens_a_forward_only_for_a_returned_cookie_and_splices_it() {
    let mut gw = flooded_gateway();
    let forwarded = (WAN_ADDR, 8080);
    let server = (SERVER, 80);
    let client = (REMOTE, 5555);
    let cookie = proxy_cookie(&mut gw, client, SECOND);
    assert_eq!(gw.tables(SECOND).flows, 2, "the SYN left nothing behind");
    assert_eq!(gw.counters.syn_cookies_sent.get(), 1);

    // An ACK with a wrong cookie (or another client's) opens nothing.
    for (peer, ack) in [(client, cookie ^ 0x80), ((REMOTE, 5556), cookie)] {
        let guess = tcp(
            WAN,
            peer,
            forwarded,
            seg(ACK, C_ISN + 1, ack.wrapping_add(1)),
            &[],
        );
        assert!(matches!(
            gw.process(&guess, WAN, SECOND).0,
            Verdict::Drop(_)
        ));
    }
    assert_eq!(gw.tables(SECOND).flows, 2);

    // The cookie returned: the client's SYN goes on to the server, as it sent it but for
    // the options (the MSS the cookie carries).
    let ack = tcp(
        WAN,
        client,
        forwarded,
        seg(ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &[],
    );
    let (verdict, out) = gw.process(&ack, WAN, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (syn, _) = sent_tcp(&out, (SERVER_MAC, LAN_MAC), (client, server));
    assert!(syn.syn && !syn.ack);
    assert_eq!((syn.sequence_number, syn.window_size), (C_ISN, 1024));
    let options: Vec<_> = syn.options_iterator().map(|o| o.unwrap()).collect();
    assert_eq!(options, [TcpOptionElement::MaximumSegmentSize(1460)]);
    assert_eq!(gw.counters.syn_cookies_accepted.get(), 1);
    // Anything else from the client waits for the server.
    let early = tcp(
        WAN,
        client,
        forwarded,
        seg(PSH | ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &data(4),
    );
    gw.expect_drop(&early, WAN, SECOND, DropReason::SynProxyPending);

    // The server's SYN-ACK: the gateway ACKs it for the client, and opens the client's window.
    let syn_ack = tcp(LAN, server, client, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    let (verdict, out) = gw.process(&syn_ack, LAN, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (to_server, _) = sent_tcp(&out, (SERVER_MAC, LAN_MAC), (client, server));
    assert!(to_server.ack && !to_server.syn);
    assert_eq!(
        (
            to_server.sequence_number,
            to_server.acknowledgment_number,
            to_server.window_size
        ),
        (C_ISN + 1, S_ISN + 1, 1024)
    );
    let extra: Vec<_> = gw.pipeline.extra_frames().drain().collect();
    assert_eq!(extra.len(), 1);
    let (port, update) = &extra[0];
    assert_eq!(*port, WAN);
    let (to_client, _) = sent_tcp(update, (UPSTREAM_MAC, WAN_MAC), (forwarded, client));
    assert!(to_client.ack && !to_client.syn);
    assert_eq!(
        (
            to_client.sequence_number,
            to_client.acknowledgment_number,
            to_client.window_size
        ),
        (cookie.wrapping_add(1), C_ISN + 1, 1024)
    );

    // Data both ways: the client's numbers on the WAN, the server's on the LAN, never by
    // a shortcut that would not shift them.
    let mut client_next = C_ISN + 1;
    let mut server_next = S_ISN + 1;
    for round in 0..3 {
        let request = tcp(
            WAN,
            client,
            forwarded,
            seg(
                PSH | ACK,
                client_next,
                server_next.wrapping_sub(S_ISN).wrapping_add(cookie),
            ),
            &data(10),
        );
        let (sent, payload) = relay(&mut gw, &request, WAN, (client, server));
        assert_eq!(
            (sent.sequence_number, sent.acknowledgment_number),
            (client_next, server_next),
            "request {round}"
        );
        assert_eq!(payload, data(10));
        client_next += 10;
        let response = tcp(
            LAN,
            server,
            client,
            seg(PSH | ACK, server_next, client_next),
            &data(20),
        );
        let (sent, payload) = relay(&mut gw, &response, LAN, (forwarded, client));
        assert_eq!(
            (sent.sequence_number, sent.acknowledgment_number),
            (
                server_next.wrapping_sub(S_ISN).wrapping_add(cookie),
                client_next
            ),
            "response {round}"
        );
        assert_eq!(payload, data(20));
        server_next += 20;
    }
    assert_eq!(gw.counters.fast_path.get(), 0);
    assert_eq!(
        gw.dropped(DropReason::ConntrackInvalid),
        2,
        "the two guesses alone"
    );
}

#[test]
fn a_server_that_refuses_a_proxied_client_resets_it_at_the_number_it_expects() {
    let mut gw = flooded_gateway();
    let client = (REMOTE, 5557);
    let cookie = proxy_cookie(&mut gw, client, SECOND);
    let ack = tcp(
        WAN,
        client,
        (WAN_ADDR, 8080),
        seg(ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &[],
    );
    assert_eq!(
        gw.process(&ack, WAN, SECOND).0,
        Verdict::Transmit { port: LAN }
    );
    let refusal = tcp(LAN, (SERVER, 80), client, seg(RST | ACK, 0, C_ISN + 1), &[]);
    let (reset, _) = relay(&mut gw, &refusal, LAN, ((WAN_ADDR, 8080), client));
    assert!(reset.rst);
    assert_eq!(reset.sequence_number, cookie.wrapping_add(1));
}

#[test]
fn a_retransmitted_syn_ack_is_answered_again_and_a_client_reset_passes_before_the_server_answers() {
    let mut gw = flooded_gateway();
    let (client, forwarded, server) = ((REMOTE, 5559), (WAN_ADDR, 8080), (SERVER, 80));
    let cookie = proxy_cookie(&mut gw, client, SECOND);
    let ack = tcp(
        WAN,
        client,
        forwarded,
        seg(ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &[],
    );
    assert_eq!(
        gw.process(&ack, WAN, SECOND).0,
        Verdict::Transmit { port: LAN }
    );
    let syn_ack = tcp(LAN, server, client, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    // Our ACK was lost: the server sends its SYN-ACK again, and is answered again.
    for round in 0..2 {
        let (verdict, out) = gw.process(&syn_ack, LAN, SECOND + round);
        assert_eq!(verdict, Verdict::Transmit { port: LAN }, "SYN-ACK {round}");
        let (to_server, _) = sent_tcp(&out, (SERVER_MAC, LAN_MAC), (client, server));
        assert!(to_server.ack && !to_server.syn);
        assert_eq!(
            (to_server.sequence_number, to_server.acknowledgment_number),
            (C_ISN + 1, S_ISN + 1)
        );
        assert_eq!(
            gw.pipeline.extra_frames().drain().count(),
            1,
            "window update {round}"
        );
    }
    let request = tcp(
        WAN,
        client,
        forwarded,
        seg(PSH | ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &data(3),
    );
    let (sent, _) = relay(&mut gw, &request, WAN, (client, server));
    assert_eq!(sent.acknowledgment_number, S_ISN + 1);

    // Another client gives up before the server answers: its reset goes on. (The spliced
    // flow left the half-open table: one more unanswered SYN fills it again.)
    let filler = tcp(WAN, (OTHER_REMOTE, 6002), forwarded, seg(SYN, 1, 0), &[]);
    assert_eq!(
        gw.process(&filler, WAN, SECOND).0,
        Verdict::Transmit { port: LAN }
    );
    let quitter = (REMOTE, 5560);
    let cookie = proxy_cookie(&mut gw, quitter, SECOND);
    let ack = tcp(
        WAN,
        quitter,
        forwarded,
        seg(ACK, C_ISN + 1, cookie.wrapping_add(1)),
        &[],
    );
    assert_eq!(
        gw.process(&ack, WAN, SECOND).0,
        Verdict::Transmit { port: LAN }
    );
    let reset = tcp(WAN, quitter, forwarded, seg(RST, C_ISN + 1, 0), &[]);
    let (sent, _) = relay(&mut gw, &reset, WAN, (quitter, server));
    assert!(sent.rst);
    assert_eq!(gw.dropped(DropReason::ConntrackInvalid), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any exchange over a proxied connection, segments of any size either way, some sent
    /// again (retransmissions one segment old): every segment crosses, in the client's
    /// numbers on the WAN and the server's on the LAN, with valid checksums, and nothing is
    /// refused.
    #[test]
    fn a_spliced_connection_carries_any_exchange(
        server_isn in any::<u32>(),
        client_isn in any::<u32>(),
        segments in prop::collection::vec((any::<bool>(), 1..1400_usize, any::<bool>()), 1..24),
    ) {
        let mut gw = flooded_gateway();
        let (client, forwarded, server) = ((REMOTE, 5600), (WAN_ADDR, 8080), (SERVER, 80));
        let syn = tcp(WAN, client, forwarded, seg(SYN, client_isn, 0), &[]);
        let (verdict, out) = gw.process(&syn, WAN, SECOND);
        prop_assert_eq!(verdict, Verdict::Transmit { port: WAN });
        let cookie = sent_tcp(&out, (UPSTREAM_MAC, WAN_MAC), (forwarded, client)).0.sequence_number;
        let c1 = client_isn.wrapping_add(1);
        // Windows (unscaled: the proxy negotiates no scaling) wider than all the data sent.
        let wide = |flags, seq, ack| Seg { window: 65535, ..seg(flags, seq, ack) };
        let ack = tcp(WAN, client, forwarded, wide(ACK, c1, cookie.wrapping_add(1)), &[]);
        prop_assert_eq!(gw.process(&ack, WAN, SECOND).0, Verdict::Transmit { port: LAN });
        let syn_ack = tcp(LAN, server, client, wide(SYN | ACK, server_isn, c1), &[]);
        prop_assert_eq!(gw.process(&syn_ack, LAN, SECOND).0, Verdict::Transmit { port: LAN });
        // Each side's next sequence number in its own view, and the last segment it sent.
        let to_client_view = |server_seq: u32| server_seq.wrapping_sub(server_isn).wrapping_add(cookie);
        let (mut client_next, mut server_next) = (c1, server_isn.wrapping_add(1));
        let mut last: [Option<(u32, usize)>; 2] = [None, None];
        for (from_client, len, again) in segments {
            let side = usize::from(!from_client);
            let (seq, len) = match (again, last[side]) {
                (true, Some(previous)) => previous,
                _ => {
                    let next = if from_client { &mut client_next } else { &mut server_next };
                    let sent = (*next, len);
                    *next = next.wrapping_add(len as u32);
                    sent
                }
            };
            last[side] = Some((seq, len));
            let payload = data(len);
            if from_client {
                let frame = tcp(WAN, client, forwarded, wide(ACK, seq, to_client_view(server_next)), &payload);
                let (sent, carried) = relay(&mut gw, &frame, WAN, (client, server));
                prop_assert_eq!((sent.sequence_number, sent.acknowledgment_number), (seq, server_next));
                prop_assert_eq!(carried, payload);
            } else {
                let frame = tcp(LAN, server, client, wide(ACK, seq, client_next), &payload);
                let (sent, carried) = relay(&mut gw, &frame, LAN, (forwarded, client));
                prop_assert_eq!((sent.sequence_number, sent.acknowledgment_number), (to_client_view(seq), client_next));
                prop_assert_eq!(carried, payload);
            }
        }
        prop_assert_eq!(gw.dropped(DropReason::ConntrackInvalid), 0);
    }
}

#[test]
fn without_a_flood_a_forward_sees_the_clients_own_handshake() {
    let mut gw = Gateway::with(home(), limited(|setup| setup.conntrack.half_open = 2));
    let client = (REMOTE, 5558);
    let syn = tcp(WAN, client, (WAN_ADDR, 8080), seg(SYN, C_ISN, 0), &[]);
    gw.forward(&syn, WAN, 0, LAN, client, (SERVER, 80));
    assert_eq!(gw.counters.syn_cookies_sent.get(), 0);
}

#[test]
fn one_host_is_capped_in_half_open_connections_and_others_are_not() {
    let mut gw = Gateway::with(home(), limited(|setup| setup.conntrack.host_half_open = 5));
    // Connection attempts to a host that never answers.
    for i in 0..8 {
        let syn = tcp(
            LAN,
            (HOST, 50000 + i),
            (REMOTE, 22),
            seg(SYN, C_ISN, 0),
            &[],
        );
        let verdict = gw.process(&syn, LAN, 0).0;
        if i < 5 {
            assert_eq!(verdict, Verdict::Transmit { port: WAN }, "SYN {i}");
        } else {
            assert_eq!(
                verdict,
                Verdict::Drop(DropReason::HostHalfOpenLimit),
                "SYN {i}"
            );
        }
    }
    gw.tables(0);
    assert_eq!(gw.counters.hosts_at_half_open_limit.get(), 1);
    handshake(&mut gw, (SERVER, 50000), (REMOTE, 22), 0);
    assert_eq!(
        gw.tables(0).nat_in_use,
        6,
        "the refused SYNs' ports went back"
    );
}

// --- 7. Firewall reject --------------------------------------------------------------------

#[test]
fn rejected_flows_get_a_reset_or_admin_prohibited() {
    let mut gw = Gateway::with(with_rejects(), WorkerSetup::default());
    let client = (HOST, 40030);
    let blocked = (BLOCKED, 80);

    let syn = tcp(LAN, client, blocked, seg(SYN, 777, 0), &[]);
    let (verdict, out) = gw.process(&syn, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (eth, header, segment) = parse_ipv4(&out);
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!((header.source, header.destination), (BLOCKED, HOST));
    assert_eq!(header.protocol, IpNumber::TCP);
    let (reset, payload) = check_tcp(&header, segment);
    assert_eq!((reset.source_port, reset.destination_port), (80, 40030));
    assert!(reset.rst && reset.ack && !reset.syn && !reset.fin);
    assert_eq!(
        (reset.sequence_number, reset.acknowledgment_number),
        (0, 778)
    );
    assert!(payload.is_empty());
    assert_eq!(gw.dropped(DropReason::FirewallReject), 1);

    // A segment with an ACK gets a reset at that acknowledgement number (RFC 9293).
    let ack = tcp(LAN, client, blocked, seg(PSH | ACK, 778, 4242), &data(5));
    let (verdict, out) = gw.process(&ack, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (_, header, segment) = parse_ipv4(&out);
    let (reset, _) = check_tcp(&header, segment);
    assert!(reset.rst && !reset.ack);
    assert_eq!(reset.sequence_number, 4242);
    // A reset is never answered.
    let rst = tcp(LAN, client, blocked, seg(RST, 778, 0), &[]);
    gw.expect_drop(&rst, LAN, 0, DropReason::FirewallReject);
    assert_eq!(gw.dropped(DropReason::FirewallReject), 3);

    let datagram = udp(LAN, (HOST, 40031), (BLOCKED, 53), b"?");
    let (verdict, out) = gw.process(&datagram, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (eth, header, message) = parse_ipv4(&out);
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!((header.source, header.destination), (LAN_ADDR, HOST));
    let icmp = check_icmp(message);
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FilterProhibited)
    );
    assert_eq!((icmp.type_u8(), icmp.code_u8()), (3, 13));
    assert_eq!(icmp.payload(), &datagram[ETH_LEN..], "quotes the datagram");
    assert_eq!(gw.dropped(DropReason::FirewallReject), 4);
    assert_eq!(gw.counters.icmp_errors_sent.get(), 1);
    let tables = gw.tables(0);
    assert_eq!((tables.flows, tables.nat_in_use), (0, 0));

    // Everything else still goes out.
    handshake(&mut gw, client, (REMOTE, 80), 0);
}

// --- 8. Several workers ---------------------------------------------------------------------

fn worker_setup(worker: u16) -> WorkerSetup {
    WorkerSetup {
        worker,
        workers: 2,
        ..WorkerSetup::default()
    }
}

/// The egress port of a packet the pipeline sends on (possibly after ARP).
fn sent_on(verdict: Verdict) -> Option<u16> {
    match verdict {
        Verdict::Transmit { port } | Verdict::Control(ControlWork::Resolve { port, .. }) => {
            Some(port)
        }
        _ => None,
    }
}

#[test]
fn a_flow_lives_on_one_worker_and_others_hand_its_packets_over() {
    let ownership = Ownership::new(2);
    let mut workers = [
        Gateway::with(home(), worker_setup(0)),
        Gateway::with(home(), worker_setup(1)),
    ];
    let owner = ownership.host_owner(ip(HOST));
    let other = 1 - owner;
    let client = (HOST, 40000);
    let server = (REMOTE, 443);
    let handed_off = Ingress {
        port: LAN,
        handed_off: true,
    };

    let syn = tcp(LAN, client, server, seg(SYN, C_ISN, 0), &[]);
    let (verdict, untouched) = workers[usize::from(other)].process(&syn, LAN, 0);
    assert_eq!(verdict, Verdict::Handoff { worker: owner });
    assert_eq!(untouched, syn, "handed over as received");
    let (verdict, out) = workers[usize::from(owner)].run(&syn, handed_off, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    let (public, _) = endpoints(&out);
    assert_eq!(
        ownership.port_owner(public.1),
        owner,
        "a port its owner owns"
    );
    assert_translated(&syn, &out, WAN, public, server);

    // The reply is steered by its port, to the same worker.
    let syn_ack = tcp(WAN, server, public, seg(SYN | ACK, S_ISN, C_ISN + 1), &[]);
    let (verdict, _) = workers[usize::from(other)].process(&syn_ack, WAN, 0);
    assert_eq!(verdict, Verdict::Handoff { worker: owner });
    workers[usize::from(owner)].forward(&syn_ack, WAN, 0, LAN, server, client);
    let ack = tcp(LAN, client, server, seg(ACK, C_ISN + 1, S_ISN + 1), &[]);
    workers[usize::from(owner)].forward(&ack, LAN, 0, WAN, public, server);
    let segment = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(9),
    );
    assert_eq!(
        workers[usize::from(other)].process(&segment, LAN, 0).0,
        Verdict::Handoff { worker: owner }
    );
    let (verdict, out) = workers[usize::from(owner)].run(&segment, handed_off, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_translated(&segment, &out, WAN, public, server);
    assert_eq!(workers[usize::from(other)].pipeline.flow_count(), 0);
    assert_eq!(workers[usize::from(owner)].pipeline.flow_count(), 1);
    for worker in &workers {
        assert_eq!(worker.counters.dropped_total(), 0);
    }
}

/// SplitMix64: a fixed stream of test values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The endpoints of the datagram an ICMP error quotes (identifier for both ports of a
/// query), its quoted header checksum checked.
fn quoted_endpoints(quote: &[u8]) -> (Endpoint, Endpoint) {
    let (header, l4) = Ipv4Header::from_slice(quote).unwrap();
    assert_eq!(
        raw_sum(&quote[..header.header_len()]),
        0,
        "quoted IPv4 checksum"
    );
    let word = |at: usize| u16::from_be_bytes([l4[at], l4[at + 1]]);
    let (src_port, dst_port) = match header.protocol {
        IpNumber::ICMP => (word(4), word(4)),
        _ => (word(0), word(2)),
    };
    ((header.source, src_port), (header.destination, dst_port))
}

/// Offers `frame` to both workers: exactly one must take it, the other handing it to that
/// one untouched. Returns the one that took it, its verdict and its output.
fn claim(workers: &mut [Gateway; 2], frame: &[u8], ingress: u16) -> (u16, Verdict, Vec<u8>) {
    let results: Vec<(Verdict, Vec<u8>)> = workers
        .iter_mut()
        .map(|worker| worker.process(frame, ingress, 0))
        .collect();
    let claimed: Vec<usize> = (0..2)
        .filter(|&i| !matches!(results[i].0, Verdict::Handoff { .. }))
        .collect();
    assert_eq!(claimed.len(), 1, "exactly one worker takes it: {results:?}");
    let owner = claimed[0];
    let other = &results[1 - owner];
    assert_eq!(
        other.0,
        Verdict::Handoff {
            worker: owner as u16
        }
    );
    assert_eq!(other.1, frame, "handed over as received");
    let (verdict, out) = results[owner].clone();
    (owner as u16, verdict, out)
}

#[test]
fn two_workers_never_both_claim_a_packet() {
    let ownership = Ownership::new(2);
    let mut workers = [
        Gateway::with(home(), worker_setup(0)),
        Gateway::with(home(), worker_setup(1)),
    ];
    let mut rng = Rng(0x5eed);
    let mut seen = HashSet::new();
    let mut per_worker = [0; 2];
    let mut flows = 0;
    while flows < 400 {
        let host = [192, 168, 10, 2 + rng.below(253) as u8];
        let remote = [203, 0, 113, 1 + rng.below(254) as u8];
        let host_port = 1024 + rng.below(64512) as u16;
        let remote_port = 1 + rng.below(65535) as u16;
        let kind = rng.below(6);
        let (protocol, ingress, src, dst) = match kind {
            0 => (TCP, LAN, (host, host_port), (remote, remote_port)),
            1 => (UDP, LAN, (host, host_port), (remote, remote_port)),
            // An echo request: the identifier stands for both ports.
            2 => (1, LAN, (host, host_port), (remote, host_port)),
            3 => (TCP, WAN, (remote, remote_port), (WAN_ADDR, 8080)),
            4 => (
                UDP,
                WAN,
                (remote, remote_port),
                (WAN_ADDR, 5000 + rng.below(3) as u16),
            ),
            // Hairpin.
            _ => (TCP, LAN, (host, host_port), (WAN_ADDR, 8080)),
        };
        if !seen.insert((protocol, src, dst)) {
            continue;
        }
        flows += 1;
        let first = match protocol {
            TCP => tcp(ingress, src, dst, seg(SYN, C_ISN, 0), &[]),
            UDP => udp(ingress, src, dst, b"hello"),
            _ => echo(ingress, src.0, dst.0, true, src.1, 1),
        };
        let (owner, verdict, first_sent) = claim(&mut workers, &first, ingress);
        let out = &first_sent;
        per_worker[usize::from(owner)] += 1;
        let egress = sent_on(verdict).unwrap_or_else(|| panic!("{verdict:?} for {src:?}->{dst:?}"));
        let (sent_src, sent_dst) = endpoints(out);
        if sent_src.0 == WAN_ADDR || sent_src.0 == LAN_ADDR {
            // Masqueraded or hairpinned: the reply comes back to a port the owner owns.
            assert_eq!(ownership.port_owner(sent_src.1), owner);
        }

        let reply = match protocol {
            TCP => tcp(
                egress,
                sent_dst,
                sent_src,
                seg(SYN | ACK, S_ISN, C_ISN + 1),
                &[],
            ),
            UDP => udp(egress, sent_dst, sent_src, b"world"),
            _ => echo(egress, sent_dst.0, sent_src.0, false, sent_src.1, 1),
        };
        let (reply_owner, verdict, out) = claim(&mut workers, &reply, egress);
        assert_eq!(reply_owner, owner, "the reply reaches the flow's worker");
        assert_eq!(sent_on(verdict), Some(ingress), "{verdict:?}");
        assert_eq!(endpoints(&out), (dst, src), "the reply is translated back");

        // So does an ICMP error about the first packet, from a router on the WAN or from the
        // LAN host it went to, and it reaches the sender quoting what the sender sent.
        let reporter = if egress == WAN { HOP } else { sent_dst.0 };
        let unreachable = Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Host);
        let error = icmp_error(
            egress,
            reporter,
            sent_src.0,
            unreachable,
            &first_sent[ETH_LEN..],
        );
        let (error_owner, verdict, out) = claim(&mut workers, &error, egress);
        assert_eq!(error_owner, owner, "the error reaches the flow's worker");
        assert_eq!(sent_on(verdict), Some(ingress), "{verdict:?}");
        let (_, outer, message) = parse_ipv4(&out);
        assert_eq!(outer.destination, src.0);
        assert_eq!(quoted_endpoints(check_icmp(message).payload()), (src, dst));
    }
    assert!(per_worker.iter().all(|&n| n > 50), "{per_worker:?}");
    for worker in &workers {
        assert_eq!(worker.counters.dropped_total(), 0);
    }
}

// --- 9. Reload -----------------------------------------------------------------------------

#[test]
fn a_reload_applies_to_new_flows_and_rechecks_old_ones_on_request() {
    let deny = vec![Rule {
        from: Some(LAN_ZONE),
        to: Some(WAN_ZONE),
        dst: Some((ip(REMOTE), 32)),
        protocol: Some(TCP),
        dst_ports: Some(443..=443),
        ..rule("no-https-to-remote", Action::Drop)
    }];
    let mut gw = Gateway::with(
        Arc::new(config(1500, Vec::new(), 7, false)),
        WorkerSetup::default(),
    );
    let server = (REMOTE, 443);
    let elsewhere = (OTHER_REMOTE, 443);
    let client = (HOST, 40040);
    let neighbour = (HOST, 40041);
    let public = handshake(&mut gw, client, server, 0);
    let public_elsewhere = handshake(&mut gw, neighbour, elsewhere, 0);

    gw.pipeline
        .set_router(Arc::new(config(1500, deny.clone(), 8, false)));
    let segment = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(4),
    );
    gw.forward(&segment, LAN, SECOND, WAN, public, server);
    let reply = tcp(
        WAN,
        server,
        public,
        seg(PSH | ACK, S_ISN + 1, C_ISN + 5),
        &data(4),
    );
    gw.forward(&reply, WAN, SECOND, LAN, server, client);
    let syn = tcp(LAN, (HOST, 40042), server, seg(SYN, C_ISN, 0), &[]);
    gw.expect_drop(&syn, LAN, SECOND, DropReason::FirewallDrop);

    gw.pipeline
        .set_router(Arc::new(config(1500, deny, 9, true)));
    let segment = tcp(LAN, client, server, seg(ACK, C_ISN + 5, S_ISN + 5), &[]);
    gw.expect_drop(&segment, LAN, 2 * SECOND, DropReason::FirewallRecheck);
    // The flow is gone: its packets are new flows now, and denied.
    gw.expect_drop(&segment, LAN, 2 * SECOND, DropReason::FirewallDrop);
    let reply = tcp(WAN, server, public, seg(ACK, S_ISN + 5, C_ISN + 5), &[]);
    gw.expect_drop(&reply, WAN, 2 * SECOND, DropReason::FirewallDrop);
    // A flow the new rules still accept carries on.
    let segment = tcp(
        LAN,
        neighbour,
        elsewhere,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(4),
    );
    gw.forward(&segment, LAN, 2 * SECOND, WAN, public_elsewhere, elsewhere);
    assert_eq!(gw.dropped(DropReason::FirewallRecheck), 1);
    let tables = gw.tables(2 * SECOND);
    assert_eq!(
        (tables.flows, tables.nat_in_use),
        (1, 1),
        "the denied flow's port is free"
    );
}

// --- Spoofing ------------------------------------------------------------------------------

#[test]
fn the_gateway_s_own_addresses_are_never_a_source() {
    // NAT would take the gateway for an inside host and reflect replies to itself.
    let mut gw = Gateway::new();
    for own in [LAN_ADDR, WAN_ADDR] {
        let syn = tcp(LAN, (own, 40000), (REMOTE, 443), seg(SYN, 1, 0), &[]);
        gw.expect_drop(&syn, LAN, 0, DropReason::MartianAddress);
        let datagram = udp(WAN, (own, 53), (WAN_ADDR, 5001), b"x");
        gw.expect_drop(&datagram, WAN, 0, DropReason::MartianAddress);
    }
    let tables = gw.tables(0);
    assert_eq!((tables.flows, tables.nat_in_use), (0, 0));
}

// --- Path MTU discovery through NAT -------------------------------------------------------

#[test]
fn fragmentation_needed_reaches_the_masqueraded_sender() {
    // A PPPoE uplink: 1492 bytes.
    let mut gw = Gateway::with(
        Arc::new(config(1492, Vec::new(), 0, false)),
        WorkerSetup::default(),
    );
    let client = (HOST, 40050);
    let server = (REMOTE, 443);
    let public = handshake(&mut gw, client, server, 0);

    // 20 (IPv4) + 20 (TCP) + 1460 = 1500 bytes, DF set (etherparse's default).
    let big = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(1460),
    );
    assert_eq!(big.len(), ETH_LEN + 1500);
    let (verdict, out) = gw.process(&big, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (eth, header, message) = parse_ipv4(&out);
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!((header.source, header.destination), (LAN_ADDR, HOST));
    let icmp = check_icmp(message);
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1492
        })
    );
    let quote = icmp.payload();
    assert_eq!(
        quote,
        &big[ETH_LEN..ETH_LEN + quote.len()],
        "quotes the segment as the client sent it"
    );
    assert_eq!(gw.dropped(DropReason::FragmentationNeeded), 1);

    // What fits goes through.
    let fits = tcp(
        LAN,
        client,
        server,
        seg(PSH | ACK, C_ISN + 1, S_ISN + 1),
        &data(1452),
    );
    gw.forward(&fits, LAN, 0, WAN, public, server);
}

// --- Fragments ----------------------------------------------------------------------------

/// A UDP datagram from `src` to `dst` split in two fragments: the first carries the UDP header
/// (and the checksum over the whole datagram), the second only data.
fn fragments(ingress: u16, src: Endpoint, dst: Endpoint) -> (Vec<u8>, Vec<u8>) {
    let whole = udp(ingress, src, dst, &data(1000));
    let (header, datagram) = Ipv4Header::from_slice(&whole[ETH_LEN..]).unwrap();
    let (first_len, (from, to)) = (512, macs(ingress));
    let build = |offset: usize, more: bool, part: &[u8]| {
        let mut fragment = header.clone();
        fragment.dont_fragment = false;
        fragment.more_fragments = more;
        fragment.identification = 0x4242;
        fragment.fragment_offset = etherparse::IpFragOffset::try_new((offset / 8) as u16).unwrap();
        fragment.set_payload_len(part.len()).unwrap();
        fragment.header_checksum = fragment.calc_header_checksum();
        let mut frame = Ethernet2Header {
            source: from,
            destination: to,
            ether_type: EtherType::IPV4,
        }
        .to_bytes()
        .to_vec();
        frame.extend_from_slice(&fragment.to_bytes());
        frame.extend_from_slice(part);
        frame
    };
    (
        build(0, true, &datagram[..first_len]),
        build(first_len, false, &datagram[first_len..]),
    )
}

/// Checks a translated first fragment: `src -> dst` on `egress`, its UDP checksum (which covers
/// the whole datagram) valid over the data of both fragments.
fn assert_first_fragment(out: &[u8], later: &[u8], egress: u16, src: Endpoint, dst: Endpoint) {
    let (eth, header, l4) = parse_ipv4(out);
    assert_eq!(eth.source, port_mac(egress));
    assert!(header.more_fragments);
    assert_eq!((header.source, header.destination), (src.0, dst.0));
    let (_, _, rest) = parse_ipv4(later);
    let (udp, first_part) = UdpHeader::from_slice(l4).unwrap();
    assert_eq!((udp.source_port, udp.destination_port), (src.1, dst.1));
    let whole = [first_part, rest].concat();
    let expected = udp.calc_checksum_ipv4_raw(src.0, dst.0, &whole).unwrap();
    assert_eq!(
        udp.checksum, expected,
        "UDP checksum over the reassembled datagram"
    );
}

#[test]
fn fragmented_udp_is_translated_and_later_fragments_never_leak() {
    let mut gw = Gateway::new();
    let client = (HOST, 40060);
    let server = (REMOTE, 53);
    let public = (WAN_ADDR, 40060);
    let (first, second) = fragments(LAN, client, server);
    let (verdict, out) = gw.process(&first, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_first_fragment(&out, &second, WAN, public, server);
    // A later fragment carries no ports to find the flow by, so it cannot be translated; it
    // must not go out with the private source address.
    gw.expect_drop(&second, LAN, 0, DropReason::UntrackedFragment);

    // A fragmented reply: its first fragment finds the flow, later ones cannot.
    let (first, second) = fragments(WAN, server, public);
    let (verdict, out) = gw.process(&first, WAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    assert_first_fragment(&out, &second, LAN, server, client);
    gw.expect_drop(&second, WAN, 0, DropReason::UntrackedFragment);
}

// --- 10. Arbitrary traffic -----------------------------------------------------------------

#[derive(Clone, Debug)]
enum Kind {
    Tcp {
        flags: u8,
        seq: u32,
        ack: u32,
        window: u16,
    },
    Udp {
        zero_checksum: bool,
    },
    Echo {
        request: bool,
        ident: u16,
        seq: u16,
    },
    /// Any protocol number over arbitrary bytes.
    Raw(u8),
}

#[derive(Clone, Debug)]
enum Step {
    Fresh {
        ingress: u16,
        src: [u8; 4],
        dst: [u8; 4],
        ports: (u16, u16),
        ttl: u8,
        kind: Kind,
        len: usize,
        /// More fragments, and the fragment offset in 8-byte units.
        fragment: Option<(bool, u16)>,
    },
    /// Answers an earlier packet the gateway sent, as its receiver would.
    Reply { index: usize, flags: u8, len: usize },
    /// An ICMP error about an earlier packet the gateway sent.
    Error {
        index: usize,
        kind: u8,
        quote: usize,
        from_hop: bool,
    },
}

#[derive(Clone, Debug)]
struct Input {
    step: Step,
    worker: u16,
    dt_ns: u64,
    /// XOR a byte after the IP header.
    flip: Option<(usize, u8)>,
    truncate: Option<usize>,
    eth_dst: Option<[u8; 6]>,
}

fn address() -> impl Strategy<Value = [u8; 4]> {
    prop_oneof![
        Just(HOST),
        Just(SERVER),
        Just([192, 168, 10, 77]),
        Just(LAN_ADDR),
        Just(WAN_ADDR),
        Just(REMOTE),
        Just(OTHER_REMOTE),
        Just(BLOCKED),
        Just(HOP),
        Just(UPSTREAM),
        any::<[u8; 4]>(),
    ]
}

fn port() -> impl Strategy<Value = u16> {
    prop_oneof![
        Just(40000u16),
        Just(8080),
        Just(80),
        Just(5000),
        Just(5001),
        Just(5002),
        Just(6001),
        Just(53),
        Just(443),
        Just(4990),
        any::<u16>(),
    ]
}

fn tcp_flags() -> impl Strategy<Value = u8> {
    prop_oneof![
        Just(SYN),
        Just(SYN | ACK),
        Just(ACK),
        Just(PSH | ACK),
        Just(FIN | ACK),
        Just(RST),
        Just(RST | ACK),
        any::<u8>(),
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => (tcp_flags(), any::<u32>(), any::<u32>(), any::<u16>())
            .prop_map(|(flags, seq, ack, window)| Kind::Tcp { flags, seq, ack, window }),
        3 => any::<bool>().prop_map(|zero_checksum| Kind::Udp { zero_checksum }),
        2 => (any::<bool>(), prop_oneof![Just(7u16), Just(40000), any::<u16>()], any::<u16>())
            .prop_map(|(request, ident, seq)| Kind::Echo { request, ident, seq }),
        1 => prop_oneof![Just(47u8), any::<u8>()].prop_map(Kind::Raw),
    ]
}

fn payload_len() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0usize..64, 1 => 0usize..1500]
}

fn step() -> impl Strategy<Value = Step> {
    let fresh = (
        0u16..2,
        address(),
        address(),
        (port(), port()),
        prop_oneof![4 => Just(64u8), 1 => 0u8..3, 1 => any::<u8>()],
        kind(),
        payload_len(),
        prop::option::weighted(0.1, (any::<bool>(), prop_oneof![Just(0u16), 1u16..200])),
    )
        .prop_map(
            |(ingress, src, dst, ports, ttl, kind, len, fragment)| Step::Fresh {
                ingress,
                src,
                dst,
                ports,
                ttl,
                kind,
                len,
                fragment,
            },
        );
    prop_oneof![
        5 => fresh,
        4 => (any::<usize>(), tcp_flags(), payload_len())
            .prop_map(|(index, flags, len)| Step::Reply { index, flags, len }),
        1 => (any::<usize>(), 0u8..3, 0usize..700, any::<bool>())
            .prop_map(|(index, kind, quote, from_hop)| Step::Error { index, kind, quote, from_hop }),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    (
        step(),
        0u16..2,
        0..2 * SECOND,
        prop::option::weighted(0.1, (any::<usize>(), 1u8..=255)),
        prop::option::weighted(0.05, any::<usize>()),
        prop_oneof![
            18 => Just(None),
            1 => Just(Some(BROADCAST_MAC)),
            1 => any::<[u8; 6]>().prop_map(Some),
        ],
    )
        .prop_map(|(step, worker, dt_ns, flip, truncate, eth_dst)| Input {
            step,
            worker,
            dt_ns,
            flip,
            truncate,
            eth_dst,
        })
}

/// The frame an input sends and the port it arrives on: built from its step (a reply or an
/// error about what the gateway sent, `history`, or a fresh packet), then changed as the input
/// says, with `mangle` applied before the truncation. None: a reply or error with nothing sent
/// yet to answer.
fn input_frame(
    input: &Input,
    history: &[(Vec<u8>, u16)],
    mangle: Option<Mangle>,
) -> Option<(Vec<u8>, u16)> {
    let earlier =
        |index: usize| (!history.is_empty()).then(|| history[index % history.len()].clone());
    let (mut frame, ingress) = match &input.step {
        Step::Fresh {
            ingress,
            src,
            dst,
            ports,
            ttl,
            kind,
            len,
            fragment,
        } => {
            let mut frame = fresh_frame(*ingress, *src, *dst, *ports, *ttl, kind, *len);
            if let Some((more, offset)) = fragment {
                make_fragment(&mut frame, *more, *offset);
            }
            (frame, *ingress)
        }
        Step::Reply { index, flags, len } => {
            let (sent, port) = earlier(*index)?;
            (reply_frame(&sent, port, *flags, *len)?, port)
        }
        Step::Error {
            index,
            kind,
            quote,
            from_hop,
        } => {
            let (sent, port) = earlier(*index)?;
            (error_frame(&sent, port, *kind, *quote, *from_hop)?, port)
        }
    };
    if let Some(mac) = input.eth_dst {
        frame[..6].copy_from_slice(&mac);
    }
    if let (Some((at, xor)), true) = (input.flip, frame.len() > ETH_LEN + 20) {
        let l4 = frame.len() - ETH_LEN - 20;
        frame[ETH_LEN + 20 + at % l4] ^= xor;
    }
    if let Some(mangle) = mangle {
        apply_mangle(&mut frame, mangle);
    }
    if let Some(len) = input.truncate {
        frame.truncate(len % (frame.len() + 1));
    }
    Some((frame, ingress))
}

fn fresh_frame(
    ingress: u16,
    src: [u8; 4],
    dst: [u8; 4],
    ports: (u16, u16),
    ttl: u8,
    kind: &Kind,
    len: usize,
) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let payload = data(len);
    let ipv4 = PacketBuilder::ethernet2(from, to).ipv4(src, dst, ttl);
    let mut frame = Vec::new();
    match *kind {
        Kind::Tcp {
            flags,
            seq,
            ack,
            window,
        } => {
            let header = tcp_header(
                ports.0,
                ports.1,
                Seg {
                    flags,
                    seq,
                    ack,
                    window,
                },
            );
            ipv4.tcp_header(header).write(&mut frame, &payload).unwrap();
        }
        Kind::Udp { zero_checksum } => {
            ipv4.udp(ports.0, ports.1)
                .write(&mut frame, &payload)
                .unwrap();
            if zero_checksum {
                frame[ETH_LEN + 26..ETH_LEN + 28].fill(0);
            }
        }
        Kind::Echo {
            request,
            ident,
            seq,
        } => {
            let step = if request {
                ipv4.icmpv4_echo_request(ident, seq)
            } else {
                ipv4.icmpv4_echo_reply(ident, seq)
            };
            step.write(&mut frame, &payload).unwrap();
        }
        Kind::Raw(protocol) => ipv4
            .write(&mut frame, IpNumber(protocol), &payload)
            .unwrap(),
    }
    frame
}

/// Turns the datagram in `frame` into a fragment of a larger one, DF cleared.
fn make_fragment(frame: &mut [u8], more: bool, offset: u16) {
    let word = u16::from(more) << 13 | (offset & 0x1fff);
    frame[ETH_LEN + 6..ETH_LEN + 8].copy_from_slice(&word.to_be_bytes());
    frame[ETH_LEN + 10..ETH_LEN + 12].fill(0);
    let sum = raw_sum(&frame[ETH_LEN..ETH_LEN + 20]);
    // etherparse sums native-endian words (see `Ipv4Header::calc_header_checksum`).
    frame[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&sum.to_ne_bytes());
}

/// What the receiver of `sent` (which left on `port`) would answer: the same flow the other
/// way, acknowledging what it carried. None if it carries nothing to answer.
fn reply_frame(sent: &[u8], port: u16, flags: u8, len: usize) -> Option<Vec<u8>> {
    let (_, rest) = Ethernet2Header::from_slice(sent).ok()?;
    let (header, l4) = Ipv4Header::from_slice(rest).ok()?;
    let l4 = l4.get(..usize::from(header.total_len).checked_sub(header.header_len())?)?;
    let (src, dst) = (header.destination, header.source);
    let (from, to) = macs(port);
    let ipv4 = PacketBuilder::ethernet2(from, to).ipv4(src, dst, 64);
    let payload = data(len);
    let mut frame = Vec::new();
    match header.protocol {
        IpNumber::TCP => {
            let (theirs, their_payload) = TcpHeader::from_slice(l4).ok()?;
            let ack = theirs
                .sequence_number
                .wrapping_add(their_payload.len() as u32)
                .wrapping_add(u32::from(theirs.syn) + u32::from(theirs.fin));
            let seq = if theirs.ack {
                theirs.acknowledgment_number
            } else {
                S_ISN
            };
            let mine = tcp_header(
                theirs.destination_port,
                theirs.source_port,
                Seg {
                    flags,
                    seq,
                    ack,
                    window: 1024,
                },
            );
            ipv4.tcp_header(mine).write(&mut frame, &payload).ok()?;
        }
        IpNumber::UDP => {
            let (theirs, _) = UdpHeader::from_slice(l4).ok()?;
            ipv4.udp(theirs.destination_port, theirs.source_port)
                .write(&mut frame, &payload)
                .ok()?;
        }
        IpNumber::ICMP => match Icmpv4Slice::from_slice(l4).ok()?.icmp_type() {
            Icmpv4Type::EchoRequest(echo) => ipv4
                .icmpv4_echo_reply(echo.id, echo.seq)
                .write(&mut frame, &payload)
                .ok()?,
            _ => return None,
        },
        _ => return None,
    }
    Some(frame)
}

/// An ICMP error about `sent` (which left on `port`), from its destination or from a router
/// on the way, back toward its source.
fn error_frame(sent: &[u8], port: u16, kind: u8, quote: usize, from_hop: bool) -> Option<Vec<u8>> {
    let (_, rest) = Ethernet2Header::from_slice(sent).ok()?;
    let (header, _) = Ipv4Header::from_slice(rest).ok()?;
    let datagram = rest.get(..usize::from(header.total_len))?;
    let quote = &datagram[..quote.clamp(28, 576).min(datagram.len())];
    let kind = match kind {
        0 => Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port),
        1 => Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1400,
        }),
        _ => Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit),
    };
    let source = if from_hop { HOP } else { header.destination };
    Some(icmp_error(port, source, header.source, kind, quote))
}

/// Checksum facts about a frame, computed with etherparse's summing only.
#[derive(Debug)]
struct Facts {
    protocol: u8,
    total_len: usize,
    ttl: u8,
    ip_ok: bool,
    /// None when not checkable: a fragment, an unknown protocol, a truncated header.
    l4_ok: Option<bool>,
    icmp_error: bool,
    quote_ip_ok: Option<bool>,
    quote_l4_ok: Option<bool>,
}

fn pseudo_sum_ok(protocol: u8, src: &[u8], dst: &[u8], segment: &[u8]) -> bool {
    let len = u16::try_from(segment.len()).unwrap();
    let src: [u8; 4] = src.try_into().unwrap();
    let dst: [u8; 4] = dst.try_into().unwrap();
    Sum16BitWords::new()
        .add_4bytes(src)
        .add_4bytes(dst)
        .add_2bytes([0, protocol])
        .add_2bytes(len.to_be_bytes())
        .add_slice(segment)
        .ones_complement()
        == 0
}

fn transport_ok(protocol: u8, src: &[u8], dst: &[u8], segment: &[u8]) -> Option<bool> {
    match protocol {
        TCP if segment.len() >= 20 => Some(pseudo_sum_ok(protocol, src, dst, segment)),
        UDP if segment.len() >= 8 => {
            Some(segment[6..8] == [0, 0] || pseudo_sum_ok(protocol, src, dst, segment))
        }
        1 if segment.len() >= 8 => Some(raw_sum(segment) == 0),
        _ => None,
    }
}

/// The header length and total length of a plausible IPv4 header at the start of `bytes`.
fn ipv4_lengths(bytes: &[u8]) -> Option<(usize, usize)> {
    if bytes.len() < 20 || bytes[0] >> 4 != 4 {
        return None;
    }
    let header_len = usize::from(bytes[0] & 0x0f) * 4;
    let total_len = usize::from(u16::from_be_bytes([bytes[2], bytes[3]]));
    (header_len >= 20 && header_len <= bytes.len() && total_len >= header_len)
        .then_some((header_len, total_len))
}

fn facts(frame: &[u8]) -> Option<Facts> {
    let ip = frame.get(ETH_LEN..)?;
    let (header_len, total_len) = ipv4_lengths(ip)?;
    let ip = ip.get(..total_len)?;
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    let protocol = ip[9];
    let (src, dst) = (&ip[12..16], &ip[16..20]);
    let l4 = &ip[header_len..];
    let l4_ok = if fragment {
        None
    } else {
        transport_ok(protocol, src, dst, l4)
    };
    let icmp_error =
        protocol == 1 && !fragment && l4.len() >= 8 && matches!(l4[0], 3 | 4 | 5 | 11 | 12);
    let (mut quote_ip_ok, mut quote_l4_ok) = (None, None);
    if icmp_error {
        let quote = &l4[8..];
        if let Some((quoted_header_len, quoted_total)) = ipv4_lengths(quote) {
            quote_ip_ok = Some(raw_sum(&quote[..quoted_header_len]) == 0);
            let quoted_fragment = u16::from_be_bytes([quote[6], quote[7]]) & 0x3fff != 0;
            if quoted_total == quote.len() && !quoted_fragment {
                quote_l4_ok = transport_ok(
                    quote[9],
                    &quote[12..16],
                    &quote[16..20],
                    &quote[quoted_header_len..],
                );
            }
        }
    }
    Some(Facts {
        protocol,
        total_len,
        ttl: ip[8],
        ip_ok: raw_sum(&ip[..header_len]) == 0,
        l4_ok,
        icmp_error,
        quote_ip_ok,
        quote_l4_ok,
    })
}

/// What the gateway sends must be well-formed: a valid IP header always; valid L4 and quote
/// checksums whenever the gateway built the packet itself or the packet arrived with them valid
/// (NAT patches checksums incrementally, so a corrupt one stays corrupt, on purpose).
fn check_sent(input: &[u8], ingress: u16, out: &[u8], port: u16) -> Result<(), TestCaseError> {
    let sent = facts(out).ok_or_else(|| TestCaseError::fail("unparseable output"))?;
    prop_assert!(sent.ip_ok, "IPv4 checksum: {:?}", sent);
    prop_assert!(sent.ttl > 0);
    prop_assert_eq!(
        out.len(),
        ETH_LEN + sent.total_len,
        "frame ends at datagram"
    );
    let received = facts(input);
    let generated = match &received {
        None => true,
        Some(r) => r.protocol != sent.protocol || r.total_len != sent.total_len,
    };
    if generated {
        prop_assert_eq!(sent.l4_ok, Some(true), "generated: {:?}", sent);
        if sent.icmp_error {
            prop_assert_eq!(sent.quote_ip_ok, Some(true), "quote of {:?}", sent);
        }
        return Ok(());
    }
    let received = received.unwrap();
    // Masquerade: nothing a LAN host sends leaves the WAN with another source address. (ICMP
    // errors about a flow keep the address of a router that reported them; and there is no
    // reverse-path filter, so what claims an outside source is out of scope here.)
    let from_lan_host = input[ETH_LEN + 12..ETH_LEN + 15] == LAN_ADDR[..3];
    if ingress == LAN && from_lan_host && port == WAN && !sent.icmp_error {
        prop_assert_eq!(
            &out[ETH_LEN + 12..ETH_LEN + 16],
            &WAN_ADDR[..],
            "source on the WAN"
        );
    }
    if received.l4_ok == Some(true) {
        prop_assert_eq!(sent.l4_ok, Some(true), "{:?} from {:?}", sent, received);
    }
    if received.quote_ip_ok == Some(true) {
        prop_assert_eq!(
            sent.quote_ip_ok,
            Some(true),
            "{:?} from {:?}",
            sent,
            received
        );
    }
    if received.quote_l4_ok == Some(true) {
        prop_assert_eq!(
            sent.quote_l4_ok,
            Some(true),
            "{:?} from {:?}",
            sent,
            received
        );
    }
    Ok(())
}

fn fuzz_setup(worker: u16, tcp_loose: bool) -> WorkerSetup {
    WorkerSetup {
        worker,
        workers: 2,
        conntrack: ConntrackConfig {
            capacity: 32,
            timeouts: Timeouts {
                tcp_established_ns: 30 * SECOND,
                tcp_transitory_ns: 5 * SECOND,
                tcp_time_wait_ns: 2 * SECOND,
                tcp_close_ns: SECOND,
                udp_ns: 3 * SECOND,
                icmp_ns: 2 * SECOND,
                other_ns: 5 * SECOND,
            },
            tcp_loose,
            ..ConntrackConfig::default()
        },
        conntrack6: None,
        // Small, and covering the UDP forward's 5000-5002, so exhaustion and reservation are
        // both reachable.
        nat_ports: 4990..=5117,
        nat_bindings: 48,
        // Worker 1 hands its 64 ports out as one block per host: a second host there finds
        // the block taken, and every invariant must hold either way.
        nat_host_ports: if worker == 1 {
            64
        } else {
            pipeline::pipeline::DEFAULT_HOST_PORTS
        },
        nat_port_block_size: if worker == 1 { 64 } else { 0 },
        meter: None,
        fast_path: true,
        nat_log: None,
        firewall_log: None,
        // Pipelines compared with each other place a host in the same slot of the QoS
        // fairness table, so that the idle sweep uncounts it at the same time.
        qos_seed: Some(u64::from(worker)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_traffic_through_two_workers(
        inputs in prop::collection::vec(input(), 1..48),
        tcp_loose in any::<bool>(),
    ) {
        let mut workers = [
            Gateway::with(with_rejects(), fuzz_setup(0, tcp_loose)),
            Gateway::with(with_rejects(), fuzz_setup(1, tcp_loose)),
        ];
        // What the gateway sent, and on which port.
        let mut history: Vec<(Vec<u8>, u16)> = Vec::new();
        let mut now = 0;
        for input in inputs {
            now += input.dt_ns;
            let Some((frame, ingress)) = input_frame(&input, &history, None) else { continue };

            let worker = usize::from(input.worker);
            let (mut verdict, mut out) = workers[worker].process(&frame, ingress, now);
            if let Verdict::Handoff { worker: owner } = verdict {
                prop_assert!(usize::from(owner) != worker && owner < 2, "{:?}", verdict);
                let handed_off = Ingress { port: ingress, handed_off: true };
                (verdict, out) = workers[usize::from(owner)].run(&frame, handed_off, now);
                prop_assert!(!matches!(verdict, Verdict::Handoff { .. }), "handed off twice");
            }
            if let Some(port) = sent_on(verdict) {
                prop_assert!(port < 2);
                check_sent(&frame, ingress, &out, port)?;
                history.push((out, port));
            }
            for worker in &mut workers {
                worker.pipeline.housekeeping(now, 8);
            }
        }
    }
}

/// QoS and the traffic meter switch on and off with a reload (a new router config), on a
/// worker that keeps running: its flows stay and the policers' counts carry on.
#[test]
fn qos_and_the_traffic_meter_switch_on_and_off_with_a_reload() {
    let meter = Arc::new(HostMeter::new(64));
    let mut gw = Gateway::with(
        home(),
        WorkerSetup {
            meter: Some(meter.clone()),
            ..WorkerSetup::default()
        },
    );
    let [uplink, _] = gw.pipeline.qos_stats();
    let frame = udp(LAN, (HOST, 40000), (REMOTE, 53), &data(1000));
    // Twenty back-to-back 1 KB datagrams: far more than a 8 kbit/s policer's 4 KiB burst.
    let send_burst = |gw: &mut Gateway, now: u64| {
        let mut verdicts = (0, 0);
        for _ in 0..20 {
            match gw.process(&frame, LAN, now).0 {
                Verdict::Transmit { port: WAN } => verdicts.0 += 1,
                Verdict::Drop(DropReason::QosPoliced) => verdicts.1 += 1,
                other => panic!("unexpected verdict {other:?}"),
            }
        }
        verdicts
    };
    let host_bytes = |meter: &HostMeter| meter.snapshot().map(|h| h.up_bytes).sum::<u64>();

    assert_eq!(send_burst(&mut gw, SECOND), (20, 0), "QoS off: all pass");
    assert_eq!(host_bytes(&meter), 0, "meter off: nothing counted");
    assert_eq!(uplink.bulk.passed_packets.get(), 0);

    // The control thread assigns each worker its share before it publishes the config.
    let qos = QosConfig {
        uplink_bps: 8_000,
        downlink_bps: 8_000,
        burst_ms: 20,
        classes: Vec::new(),
        mode: QosMode::Policer,
    };
    assign_equal_shares(&[gw.pipeline.qos_stats()], Some(&qos));
    let on = || {
        config(1500, Vec::new(), 1, false)
            .with_qos(Some(qos.clone()))
            .with_traffic_meter(true)
    };
    gw.pipeline.set_router(Arc::new(on()));
    let (passed, policed) = send_burst(&mut gw, 2 * SECOND);
    assert!(
        passed > 0 && policed > 0,
        "QoS on: {passed} passed, {policed} policed"
    );
    assert_eq!(uplink.bulk.passed_packets.get(), passed);
    assert_eq!(uplink.bulk.dropped_packets.get(), policed);
    assert_eq!(uplink.share_bps(), 8_000);
    // The fairness table the policers were handed holds the host.
    assert_eq!(uplink.untracked_packets.get(), 0);
    let frame_len = frame.len() as u64;
    assert_eq!(
        host_bytes(&meter),
        passed * frame_len,
        "meter on: what passed"
    );

    gw.pipeline.set_router(home());
    assert_eq!(send_burst(&mut gw, 3 * SECOND), (20, 0), "QoS off again");
    assert_eq!(host_bytes(&meter), passed * frame_len, "meter off again");
    assert_eq!(uplink.share_bps(), 0, "no share while QoS is off");
    assert_eq!(
        gw.tables(3 * SECOND).flows,
        1,
        "the flow survived both reloads"
    );

    // On again: the policers get their fairness table back from the idle one.
    assign_equal_shares(&[gw.pipeline.qos_stats()], Some(&qos));
    gw.pipeline.set_router(Arc::new(on()));
    let (passed_again, policed_again) = send_burst(&mut gw, 4 * SECOND);
    assert!(passed_again > 0 && policed_again > 0, "QoS on again");
    assert_eq!(uplink.untracked_packets.get(), 0, "the host found its slot");
}

/// In shaper mode QoS drops nothing itself: each packet between a LAN host and the WAN is
/// sent with a request naming its link, class, host and length for the worker's shaper, and
/// LAN-to-gateway traffic carries none. `mark_congestion` sets CE on ECN-capable packets only,
/// keeping the header checksum right.
#[test]
fn in_shaper_mode_qos_hands_wan_packets_to_the_worker_s_shaper() {
    let qos = QosConfig {
        uplink_bps: 8_000,
        downlink_bps: 8_000,
        burst_ms: 20,
        classes: Vec::new(),
        mode: QosMode::Shaper,
    };
    let mut gw = Gateway::with(
        Arc::new(config(1500, Vec::new(), 1, false).with_qos(Some(qos.clone()))),
        WorkerSetup::default(),
    );
    assign_equal_shares(&[gw.pipeline.qos_stats()], Some(&qos));
    assert!(gw.pipeline.shaping());
    let client = (HOST, 40000);
    let server = (REMOTE, 4000);
    let public = (WAN_ADDR, 40000);
    let mut sent_up = 0;
    for now in 0..20 {
        let frame = udp(LAN, client, server, &data(1000));
        let (verdict, _) = gw.process(&frame, LAN, now);
        assert_eq!(
            verdict,
            Verdict::Transmit { port: WAN },
            "the policer would drop most"
        );
        let request = gw.pipeline.shape_requests()[0].expect("a shaped packet");
        assert_eq!((request.link, request.class), (Link::Uplink, Class::Bulk));
        assert_eq!(request.arrival.len as usize, frame.len());
        assert_eq!(request.arrival.host, u64::from(u32::from_be_bytes(HOST)));
        assert!(!request.arrival.ecn_capable);
        sent_up += 1;
    }
    let answer = udp(WAN, server, public, &data(500));
    let (verdict, _) = gw.process(&answer, WAN, 30);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let down = gw.pipeline.shape_requests()[0].expect("a shaped reply");
    assert_eq!(down.link, Link::Downlink);
    assert_eq!(down.arrival.host, u64::from(u32::from_be_bytes(HOST)));
    assert_eq!(gw.counters.dropped_total(), 0);
    let [uplink, _] = gw.pipeline.qos_stats();
    assert_eq!(
        uplink.bulk.dropped_packets.get(),
        0,
        "nothing dropped by QoS itself"
    );
    // What the worker's shaper reports is counted by class.
    gw.pipeline.qos_shaped(
        Link::Uplink,
        Class::Bulk,
        (sent_up, 20_000),
        (1, 1000),
        true,
    );
    assert_eq!(uplink.bulk.passed_packets.get(), sent_up);
    assert_eq!(uplink.bulk.dropped_packets.get(), 1);

    // ECT(0) is ECN-capable; CE after marking, with a correct header checksum.
    let mut frame = udp(LAN, (HOST, 40001), server, &data(100));
    let mut ip = pipeline::wire::Ipv4Packet::new_unchecked(&mut frame[ETH_LEN..]);
    ip.set_ecn(0b10);
    ip.fill_checksum();
    let (verdict, mut out) = gw.process(&frame, LAN, 40);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert!(gw.pipeline.shape_requests()[0].unwrap().arrival.ecn_capable);
    assert!(mark_congestion(&mut out));
    assert_eq!(out[ETH_LEN + 1] & 3, 3, "CE");
    assert_eq!(raw_sum(&out[ETH_LEN..ETH_LEN + 20]), 0, "header checksum");
    // Not ECN-capable: left alone.
    let (_, mut plain) = gw.process(&udp(LAN, client, server, &data(10)), LAN, 50);
    let before = plain.clone();
    assert!(!mark_congestion(&mut plain));
    assert_eq!(plain, before);

    // A burst: each packet's request sits at its own index, and a packet QoS leaves alone
    // (an echo request to the gateway) has none, between two that have one.
    let burst = [
        (udp(LAN, client, server, &data(300)), LAN),
        (echo(LAN, HOST, LAN_ADDR, true, 9, 1), LAN),
        (udp(WAN, server, public, &data(200)), WAN),
    ];
    let mut rooms = [[GARBAGE; ROOM]; 3];
    let mut packets: Vec<PacketBuf> = rooms
        .iter_mut()
        .zip(&burst)
        .map(|(room, (frame, _))| {
            room[..frame.len()].copy_from_slice(frame);
            PacketBuf::new(room, frame.len())
        })
        .collect();
    let ingress = burst.each_ref().map(|&(_, port)| Ingress {
        port,
        handed_off: false,
    });
    let mut verdicts = [Verdict::Drop(DropReason::NotOurMac); 3];
    gw.pipeline
        .process_burst(&mut packets, &ingress, 60, &mut verdicts, |_| {});
    let requests = &gw.pipeline.shape_requests()[..3];
    assert_eq!(verdicts[0], Verdict::Transmit { port: WAN });
    assert_eq!(verdicts[2], Verdict::Transmit { port: LAN });
    assert!(!matches!(verdicts[1], Verdict::Transmit { .. }));
    assert_eq!(
        requests[0].map(|r| (r.link, r.arrival.len)),
        Some((Link::Uplink, burst[0].0.len() as u32))
    );
    assert_eq!(requests[1], None, "nothing for a packet to the gateway");
    assert_eq!(
        requests[2].map(|r| (r.link, r.arrival.len)),
        Some((Link::Downlink, burst[2].0.len() as u32))
    );

    // Back to the policer by a reload: no more requests are filed.
    let policer = QosConfig {
        mode: QosMode::Policer,
        ..qos
    };
    gw.pipeline.set_router(Arc::new(
        config(1500, Vec::new(), 1, false).with_qos(Some(policer)),
    ));
    assert!(!gw.pipeline.shaping());
}

/// A header change the differential test makes to an IPv4 packet before sending it: what the
/// fast path must notice and leave to the full path.
#[derive(Clone, Copy, Debug)]
enum Mangle {
    /// A new TTL (0, 1 and 2 are the interesting ones), checksum kept right.
    Ttl(u8),
    /// The header checksum made wrong.
    BadChecksum,
    /// Don't-fragment, more-fragments or an offset set, checksum kept right.
    FragmentBits(u16),
    /// A DSCP (46 is the one QoS's rule looks for), checksum kept right: a flow's packets
    /// may differ in it.
    Dscp(u8),
    /// Another Ethernet source (QoS's MAC rule looks for the LAN host's): a flow's sender
    /// may change its MAC.
    SourceMac,
}

fn mangle() -> impl Strategy<Value = Mangle> {
    prop_oneof![
        (0u8..4).prop_map(Mangle::Ttl),
        Just(Mangle::BadChecksum),
        prop_oneof![Just(0x4000u16), Just(0x2000), Just(0x0001)].prop_map(Mangle::FragmentBits),
        prop_oneof![Just(46u8), Just(0), Just(10)].prop_map(Mangle::Dscp),
        Just(Mangle::SourceMac),
    ]
}

fn apply_mangle(frame: &mut [u8], mangle: Mangle) {
    if let (Mangle::SourceMac, Some(source)) = (mangle, frame.get_mut(6..12)) {
        source[5] ^= 0x40;
        return;
    }
    let Some(header) = frame.get_mut(ETH_LEN..ETH_LEN + 20) else {
        return;
    };
    let refill = |header: &mut [u8]| {
        header[10..12].fill(0);
        let mut sum: u32 = header
            .chunks(2)
            .map(|word| u32::from(u16::from_be_bytes([word[0], word[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        header[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    };
    match mangle {
        Mangle::Ttl(ttl) => {
            header[8] = ttl;
            refill(header);
        }
        Mangle::BadChecksum => header[10] ^= 0x5a,
        Mangle::FragmentBits(bits) => {
            let old = u16::from_be_bytes([header[6], header[7]]);
            header[6..8].copy_from_slice(&(old | bits).to_be_bytes());
            refill(header);
        }
        Mangle::Dscp(dscp) => {
            header[1] = dscp << 2 | header[1] & 0x3;
            refill(header);
        }
        Mangle::SourceMac => {}
    }
}

/// What the differential test compares of a worker besides its verdicts and bytes.
fn worker_state(
    gw: &Gateway,
    now_ns: u64,
) -> (
    Vec<pipeline::pipeline::operator::snapshot::SavedFlow>,
    Vec<u64>,
) {
    let mut flows = Vec::new();
    gw.pipeline.export_flows(now_ns, &mut flows);
    let c = &gw.counters;
    let mut counts = vec![
        c.transmitted.get(),
        c.fragmented.get(),
        c.to_control.get(),
        c.punted.get(),
        c.handoffs_sent.get(),
        c.icmp_errors_sent.get(),
        c.icmp_errors_rate_limited.get(),
    ];
    counts.extend(DropReason::ALL.iter().map(|&reason| c.dropped(reason)));
    for stats in gw.pipeline.qos_stats() {
        for class in [&stats.priority, &stats.bulk] {
            counts.extend([
                class.passed_bytes.get(),
                class.passed_packets.get(),
                class.dropped_bytes.get(),
                class.dropped_packets.get(),
            ]);
        }
        counts.push(stats.active_hosts());
        counts.push(stats.untracked_packets.get());
    }
    if let Some(meter) = gw.pipeline.meter() {
        let mut hosts: Vec<_> = meter
            .snapshot()
            .map(|h| (h.ip, h.up_bytes, h.up_packets, h.down_bytes, h.down_packets))
            .collect();
        hosts.sort();
        counts.extend(
            hosts
                .iter()
                .flat_map(|&(ip, a, b, c, d)| [u64::from(u32::from(ip)), a, b, c, d]),
        );
    }
    (flows, counts)
}

/// What the differential test changes between bursts.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A reload to the plain config (QoS and the meter off).
    Reload,
    NeighbourMoves,
    /// A reload with QoS (a rate low enough to police, priority by port, by DSCP or by the
    /// LAN host's MAC) and the traffic meter on.
    Features {
        priority: Priority,
    },
}

/// What QoS's priority rule in the differential test matches.
#[derive(Clone, Copy, Debug)]
enum Priority {
    Port,
    Dscp,
    Mac,
}

/// Two workers, as one system sees them: bursts through `process_burst`, or packets one at a
/// time through the full path (`fast_path: false`).
struct System {
    workers: [Gateway; 2],
    bursts: bool,
}

impl System {
    fn new(tcp_loose: bool, bursts: bool) -> System {
        let setup = |worker| WorkerSetup {
            fast_path: bursts,
            meter: Some(Arc::new(HostMeter::new(16))),
            ..fuzz_setup(worker, tcp_loose)
        };
        System {
            workers: [
                Gateway::with(with_rejects(), setup(0)),
                Gateway::with(with_rejects(), setup(1)),
            ],
            bursts,
        }
    }

    /// Reloads both workers with QoS and the meter on, the shares assigned first as the
    /// control thread does.
    fn switch_features_on(&mut self, priority: Priority) {
        let rule = ClassRule::new(Class::Priority);
        let rule = match priority {
            Priority::Port => rule.with_protocol(17).with_ports(53, 53),
            Priority::Dscp => rule.with_dscp(46),
            Priority::Mac => rule.with_mac(EthernetAddress(HOST_MAC)),
        };
        let qos = QosConfig {
            uplink_bps: 400_000,
            downlink_bps: 400_000,
            burst_ms: 20,
            classes: vec![rule],
            mode: QosMode::Policer,
        };
        let stats: Vec<_> = self
            .workers
            .iter()
            .map(|gw| gw.pipeline.qos_stats())
            .collect();
        assign_equal_shares(&stats, Some(&qos));
        let router = Arc::new(
            config(1500, reject_rules(), 0, false)
                .with_qos(Some(qos))
                .with_traffic_meter(true),
        );
        for gw in &mut self.workers {
            gw.pipeline.set_router(router.clone());
        }
    }

    /// Runs `frames` on `worker`, then what it handed off on their owners, in that order;
    /// returns every (verdict, bytes) in the order processed.
    fn run(
        &mut self,
        worker: usize,
        frames: &[(Vec<u8>, Ingress)],
        now_ns: u64,
    ) -> Vec<(Verdict, Vec<u8>)> {
        let mut results = self.workers[worker].burst(frames, now_ns, self.bursts);
        let handed: Vec<(usize, (Vec<u8>, Ingress))> = frames
            .iter()
            .zip(&results)
            .filter_map(|((frame, ingress), (verdict, _))| match verdict {
                Verdict::Handoff { worker: owner } => Some((
                    usize::from(*owner),
                    (
                        frame.clone(),
                        Ingress {
                            port: ingress.port,
                            handed_off: true,
                        },
                    ),
                )),
                _ => None,
            })
            .collect();
        for owner in 0..2 {
            let batch: Vec<_> = handed
                .iter()
                .filter(|(to, _)| *to == owner)
                .map(|(_, frame)| frame.clone())
                .collect();
            if !batch.is_empty() {
                results.extend(self.workers[owner].burst(&batch, now_ns, self.bursts));
            }
        }
        results
    }
}

impl Gateway {
    /// The frames as one burst (`process_burst`), or one at a time (`process_from`), each
    /// in a garbage-filled room as `run` does.
    fn burst(
        &mut self,
        frames: &[(Vec<u8>, Ingress)],
        now_ns: u64,
        as_burst: bool,
    ) -> Vec<(Verdict, Vec<u8>)> {
        if !as_burst {
            return frames
                .iter()
                .map(|(frame, ingress)| self.run(frame, *ingress, now_ns))
                .collect();
        }
        let mut rooms: Vec<[u8; ROOM]> = frames.iter().map(|_| [GARBAGE; ROOM]).collect();
        let mut packets: Vec<PacketBuf> = rooms
            .iter_mut()
            .zip(frames)
            .map(|(room, (frame, _))| {
                room[..frame.len()].copy_from_slice(frame);
                PacketBuf::new(room, frame.len())
            })
            .collect();
        let ingress: Vec<Ingress> = frames.iter().map(|(_, ingress)| *ingress).collect();
        let mut verdicts = vec![Verdict::Drop(DropReason::NotOurMac); frames.len()];
        self.pipeline
            .process_burst(&mut packets, &ingress, now_ns, &mut verdicts, |_| {});
        verdicts
            .into_iter()
            .zip(packets)
            .map(|(verdict, pkt)| (verdict, pkt.bytes().to_vec()))
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The fast path and the burst change nothing but speed: random traffic (the fuzz test's,
    /// plus TTL, checksum and fragment-bit changes, reloads and neighbour changes) through
    /// two workers taking bursts with the fast path gives the same verdicts, the same bytes
    /// and the same flows, NAT ports and counters as the full path one packet at a time.
    #[test]
    fn the_burst_and_fast_path_decide_as_the_full_path_does(
        chunks in prop::collection::vec(
            (
                prop::collection::vec(
                    (
                        input(),
                        prop::option::weighted(0.15, mangle()),
                        prop::option::weighted(0.6, any::<usize>()),
                    ),
                    1..8,
                ),
                prop_oneof![
                    8 => Just(None),
                    1 => Just(Some(Change::Reload)),
                    1 => Just(Some(Change::NeighbourMoves)),
                    1 => Just(Some(Change::Features { priority: Priority::Port })),
                    1 => Just(Some(Change::Features { priority: Priority::Dscp })),
                    1 => Just(Some(Change::Features { priority: Priority::Mac })),
                ],
            ),
            1..24,
        ),
        tcp_loose in any::<bool>(),
    ) {
        let mut systems = [System::new(tcp_loose, true), System::new(tcp_loose, false)];
        let mut history: Vec<(Vec<u8>, u16)> = Vec::new();
        // The frames sent in so far that were forwarded, to send again.
        let mut fed: Vec<(Vec<u8>, Ingress)> = Vec::new();
        let mut now = 0;
        let moved_upstream = Arc::new(NeighborView::new([
            (ip(UPSTREAM), EthernetAddress([0x02, 0xbb, 0, 0, 0, 0x99])),
            (ip(HOST), EthernetAddress(HOST_MAC)),
            (ip(SERVER), EthernetAddress(SERVER_MAC)),
        ]));
        for (inputs, change) in chunks {
            // Between bursts, as the worker loop applies them: a reload, or a neighbour moving.
            for system in &mut systems {
                for gw in &mut system.workers {
                    match change {
                        Some(Change::Reload) => gw.pipeline.set_router(with_rejects()),
                        Some(Change::NeighbourMoves) => {
                            gw.pipeline.set_neighbors(moved_upstream.clone())
                        }
                        Some(Change::Features { .. }) | None => {}
                    }
                }
                if let Some(Change::Features { priority }) = change {
                    system.switch_features_on(priority);
                }
            }
            let worker = usize::from(inputs[0].0.worker);
            let mut frames = Vec::new();
            for (input, mangle, repeat) in &inputs {
                now += input.dt_ns / 8;
                // Most traffic is more of the same flows: an earlier packet again.
                if let (Some(index), false) = (repeat, fed.is_empty()) {
                    let (mut frame, ingress): (Vec<u8>, Ingress) = fed[index % fed.len()].clone();
                    if let Some(mangle) = mangle {
                        apply_mangle(&mut frame, *mangle);
                    }
                    frames.push((frame, ingress));
                    continue;
                }
                let Some((frame, ingress)) = input_frame(input, &history, *mangle) else {
                    continue;
                };
                frames.push((frame, Ingress { port: ingress, handed_off: false }));
            }
            let fast = systems[0].run(worker, &frames, now);
            let full = systems[1].run(worker, &frames, now);
            prop_assert_eq!(fast.len(), full.len());
            // Frames that went somewhere are worth sending again (their first verdicts are in
            // `frames` order; what was handed off follows).
            for (frame, (verdict, _)) in frames.iter().zip(&fast) {
                if matches!(verdict, Verdict::Transmit { .. } | Verdict::Handoff { .. }) {
                    fed.push(frame.clone());
                }
            }
            for (i, (fast, full)) in fast.iter().zip(&full).enumerate() {
                prop_assert_eq!(fast.0, full.0, "verdict of packet {}", i);
                prop_assert_eq!(&fast.1, &full.1, "bytes of packet {} ({:?})", i, fast.0);
                if let Some(port) = sent_on(fast.0) {
                    history.push((fast.1.clone(), port));
                }
            }
            for (a, b) in systems[0].workers.iter().zip(&systems[1].workers) {
                prop_assert_eq!(worker_state(a, now), worker_state(b, now));
            }
            for system in &mut systems {
                for gw in &mut system.workers {
                    gw.pipeline.housekeeping(now, 8);
                }
            }
        }
    }
}

/// Each per-packet check of the fast path, on a flow direction that has a shortcut: the
/// packet changed in one way the shortcut does not cover must get what the full path gives
/// it (an ICMP error, a drop, fragmentation), and the flow's next ordinary packet takes the
/// fast path again.
#[test]
fn a_packet_the_shortcut_does_not_cover_gets_what_the_full_path_gives_it() {
    let lan = Ingress {
        port: LAN,
        handed_off: false,
    };
    let udp_of_len = |len| {
        let kind = Kind::Udp {
            zero_checksum: false,
        };
        fresh_frame(LAN, HOST, REMOTE, (40000, 443), 64, &kind, len)
    };
    let outbound = udp_of_len(100);
    let mut broadcast = outbound.clone();
    broadcast[..6].copy_from_slice(&BROADCAST_MAC);
    let wan = Ingress {
        port: WAN,
        handed_off: false,
    };
    let mut on_the_wan = outbound.clone();
    on_the_wan[..6].copy_from_slice(&WAN_MAC);
    let mut variants: Vec<(&str, Vec<u8>, Ingress)> = vec![
        ("too big for the WAN", udp_of_len(1600), lan),
        ("to the broadcast MAC", broadcast, lan),
        ("on the other port", on_the_wan, wan),
    ];
    for (name, mangle) in [
        ("TTL 1", Mangle::Ttl(1)),
        ("TTL 0", Mangle::Ttl(0)),
        ("TTL 2", Mangle::Ttl(2)),
        ("a bad header checksum", Mangle::BadChecksum),
        ("don't fragment", Mangle::FragmentBits(0x4000)),
        ("more fragments", Mangle::FragmentBits(0x2000)),
        ("a fragment offset", Mangle::FragmentBits(0x0001)),
    ] {
        let mut frame = outbound.clone();
        apply_mangle(&mut frame, mangle);
        variants.push((name, frame, lan));
    }
    // The flow's owner: the worker that does not hand its first packet off.
    let owner =
        match System::new(false, false).workers[0].burst(&[(outbound.clone(), lan)], 0, false)[0].0
        {
            Verdict::Handoff { worker } => usize::from(worker),
            _ => 0,
        };
    for (name, frame, ingress) in variants {
        let mut systems = [System::new(false, true), System::new(false, false)];
        let fast_packets =
            |systems: &[System; 2]| systems[0].workers[owner].counters.fast_path.get();
        let mut now = 0;
        // Three packets: the flow, its shortcut, and one through the fast path.
        let steps = [
            vec![(outbound.clone(), lan); 3],
            vec![(frame, ingress)],
            vec![(outbound.clone(), lan)],
        ];
        for (step, frames) in steps.iter().enumerate() {
            now += 1000;
            let before = fast_packets(&systems);
            let fast = systems[0].run(owner, frames, now);
            let full = systems[1].run(owner, frames, now);
            assert_eq!(fast, full, "{name}");
            for (a, b) in systems[0].workers.iter().zip(&systems[1].workers) {
                assert_eq!(worker_state(a, now), worker_state(b, now), "{name}");
            }
            let expected = match step {
                0 | 2 => 1,
                _ if name == "TTL 2" || name == "don't fragment" => 1,
                _ => 0,
            };
            assert_eq!(
                fast_packets(&systems) - before,
                expected,
                "{name}, step {step}"
            );
            assert_eq!(systems[1].workers[owner].counters.fast_path.get(), 0);
        }
    }
}

/// A new neighbour view costs an established flow one lookup of its next hop, not the full
/// path: the next packet takes the fast path to the next hop's new MAC, or, with the next hop
/// gone from the view, the full path, which asks ARP.
#[test]
fn a_new_neighbour_view_moves_the_fast_path_to_the_new_mac() {
    let lan = Ingress {
        port: LAN,
        handed_off: false,
    };
    let kind = Kind::Udp {
        zero_checksum: false,
    };
    let outbound = fresh_frame(LAN, HOST, REMOTE, (40001, 443), 64, &kind, 100);
    let owner =
        match System::new(false, false).workers[0].burst(&[(outbound.clone(), lan)], 0, false)[0].0
        {
            Verdict::Handoff { worker } => usize::from(worker),
            _ => 0,
        };
    let moved = [0x02, 0xbb, 0, 0, 0, 0x77];
    let views = [
        NeighborView::new([
            (ip(UPSTREAM), EthernetAddress(moved)),
            (ip(HOST), EthernetAddress(HOST_MAC)),
        ]),
        NeighborView::new([(ip(HOST), EthernetAddress(HOST_MAC))]),
    ];
    let mut systems = [System::new(false, true), System::new(false, false)];
    let fast = systems[0].run(owner, &vec![(outbound.clone(), lan); 3], 1000);
    assert_eq!(
        fast,
        systems[1].run(owner, &vec![(outbound.clone(), lan); 3], 1000)
    );
    let mut expected = [
        (Verdict::Transmit { port: WAN }, Some(moved), 1),
        (
            Verdict::Control(ControlWork::Resolve {
                port: WAN,
                next_hop: ip(UPSTREAM),
            }),
            None,
            0,
        ),
    ]
    .into_iter();
    for view in views {
        let view = Arc::new(view);
        for system in &mut systems {
            for gw in &mut system.workers {
                gw.pipeline.set_neighbors(view.clone());
            }
        }
        let (verdict, mac, fast_packets) = expected.next().unwrap();
        let before = systems[0].workers[owner].counters.fast_path.get();
        let fast = systems[0].run(owner, &[(outbound.clone(), lan)], 2000);
        let full = systems[1].run(owner, &[(outbound.clone(), lan)], 2000);
        assert_eq!(fast, full);
        assert_eq!(fast[0].0, verdict);
        if let Some(mac) = mac {
            assert_eq!(fast[0].1[..6], mac);
        }
        let after = systems[0].workers[owner].counters.fast_path.get();
        assert_eq!(after - before, fast_packets);
        for (a, b) in systems[0].workers.iter().zip(&systems[1].workers) {
            assert_eq!(worker_state(a, 2000), worker_state(b, 2000));
        }
    }
}

// --- The operator's view: listing and clearing flows ------------------------------------

/// `gateway ctl show flows`, `show nat` and `clear flows` walk the tables a slice at a time: a listing
/// names each flow's tuples (the NAT address in the reply), state and flags, fills no more
/// than the buffer it is given while still counting every match, and a clear ends exactly
/// the matching flows, releasing their NAT ports, so their next packet is a new flow.
#[test]
fn flows_are_listed_and_cleared_by_filter_a_slice_at_a_time() {
    let mut gw = Gateway::new();
    let now = SECOND;
    let other_host = SERVER;
    let public = handshake(&mut gw, (HOST, 40000), (REMOTE, 443), now);
    handshake(&mut gw, (HOST, 40001), (OTHER_REMOTE, 80), now);
    handshake(&mut gw, (other_host, 50000), (REMOTE, 443), now);
    let dns = udp(LAN, (other_host, 5353), (REMOTE, 53), &data(20));
    assert_eq!(
        gw.process(&dns, LAN, now).0,
        Verdict::Transmit { port: WAN }
    );

    let capacity = gw.pipeline.flow_capacity();
    let list = |gw: &Gateway, filter: &FlowFilter, room: usize| {
        let mut out = Vec::with_capacity(room);
        let (mut from, mut matched) = (Some(0), 0);
        while let Some(slot) = from {
            let step = gw.pipeline.list_flows(filter, slot, 7, now, &mut out);
            matched += step.matched;
            from = step.next;
        }
        (out, matched)
    };

    let (all, matched) = list(&gw, &FlowFilter::default(), 16);
    assert_eq!((all.len(), matched), (4, 4));
    let host = FlowFilter {
        host: Some(ip(HOST)),
        ..FlowFilter::default()
    };
    let (flows, matched) = list(&gw, &host, 16);
    assert_eq!(matched, 2);
    let https = flows.iter().find(|f| f.original.dst_port == 443).unwrap();
    assert_eq!(
        (https.original.src, https.original.src_port),
        (ip(HOST), 40000)
    );
    assert_eq!(
        (https.reply.dst, https.reply.dst_port),
        (ip(public.0), public.1)
    );
    assert_eq!(https.tcp_state, Some(TcpState::Established));
    assert!(https.replied && !https.forwarded);
    assert!(https.expires_in_ns > 0);

    let udp_only = FlowFilter {
        protocol: Some(UDP),
        ..FlowFilter::default()
    };
    let (flows, matched) = list(&gw, &udp_only, 16);
    assert_eq!((flows.len(), matched), (1, 1));
    assert_eq!(flows[0].tcp_state, None);
    assert!(!flows[0].replied);
    let by_port = FlowFilter {
        port: Some(443),
        tcp_state: Some(TcpState::Established),
        ..FlowFilter::default()
    };
    assert_eq!(list(&gw, &by_port, 16).1, 2);
    let (one, matched) = list(&gw, &FlowFilter::default(), 1);
    assert_eq!((one.len(), one.capacity(), matched), (1, 1, 4), "no growth");

    let bindings = |gw: &Gateway, host: Option<[u8; 4]>| {
        let mut out = Vec::with_capacity(16);
        let mut from = Some(0);
        while let Some(slot) = from {
            from = gw.pipeline.list_nat(host.map(ip), slot, 5, &mut out).next;
        }
        out
    };
    assert_eq!(bindings(&gw, None).len(), 4, "one per internal endpoint");
    let of_host = bindings(&gw, Some(HOST));
    assert_eq!(of_host.len(), 2);
    assert!(of_host.iter().any(|b| b.internal == (ip(HOST), 40000)
        && b.external == (ip(public.0), public.1)
        && b.flows == 1));

    let nat_before = gw.tables(now).nat_in_use;
    let mut from = Some(0);
    let mut cleared = 0;
    while let Some(slot) = from {
        let step = gw.pipeline.clear_flows(&host, slot, capacity / 3 + 1, now);
        cleared += step.matched;
        from = step.next;
    }
    assert_eq!(cleared, 2);
    let tables = gw.tables(now);
    assert_eq!(tables.flows, 2, "the other host's flows stay");
    assert_eq!(
        tables.nat_in_use,
        nat_before - 2,
        "their NAT ports are free"
    );
    assert_eq!(list(&gw, &host, 16).1, 0);
    assert!(bindings(&gw, Some(HOST)).is_empty());
    assert_eq!(bindings(&gw, None).len(), 2);
    // The cleared connection's next segment is no flow's: not a SYN, so refused.
    let late = tcp(
        LAN,
        (HOST, 40000),
        (REMOTE, 443),
        seg(ACK, C_ISN + 1, S_ISN + 1),
        &[],
    );
    gw.expect_drop(&late, LAN, now, DropReason::ConntrackInvalid);
}

/// `[nat.log]`: a mapping is logged when an internal endpoint first gets its external port,
/// and when the last flow holding it ends; flows sharing the mapping (endpoint-independent)
/// add no line, and each line names the protocol and both endpoints.
#[test]
fn the_nat_log_tells_each_mapping_made_and_freed_once() {
    let log = Arc::new(NatLog::new(64));
    let setup = WorkerSetup {
        conntrack: ConntrackConfig {
            capacity: 64,
            timeouts: Timeouts {
                udp_ns: 5 * SECOND,
                ..Timeouts::default()
            },
            ..ConntrackConfig::default()
        },
        nat_log: Some(log.clone()),
        ..WorkerSetup::default()
    };
    let mut gw = Gateway::with(home(), setup);
    let drain = |log: &NatLog| {
        let mut events = Vec::new();
        log.drain(|event| events.push(event));
        events
    };
    let query = |dst: Endpoint| udp(LAN, (HOST, 5300), dst, &data(20));
    assert_eq!(
        gw.process(&query((REMOTE, 53)), LAN, SECOND).0,
        Verdict::Transmit { port: WAN }
    );
    assert_eq!(
        gw.process(&query((OTHER_REMOTE, 53)), LAN, 2 * SECOND).0,
        Verdict::Transmit { port: WAN }
    );
    let made = drain(&log);
    assert_eq!(made.len(), 1, "two flows, one mapping: {made:?}");
    assert_eq!(made[0].kind, NatEventKind::Create);
    assert_eq!(made[0].protocol, UDP);
    assert_eq!(made[0].internal, (ip(HOST), 5300));
    let external = made[0].external;
    assert_eq!(external.0, ip(WAN_ADDR));

    // The first flow expires: the mapping stays for the second.
    gw.tables(6 * SECOND + 1);
    assert!(drain(&log).is_empty());
    gw.tables(7 * SECOND + 1);
    let freed = drain(&log);
    assert_eq!(freed.len(), 1, "{freed:?}");
    assert_eq!(freed[0].kind, NatEventKind::Delete);
    assert_eq!(
        (freed[0].internal, freed[0].external),
        ((ip(HOST), 5300), external)
    );
    assert_eq!(log.lost(), 0);
}

/// `gateway ctl trace`'s explanation of a packet, before the pipeline runs it: a miss with the
/// firewall's decision and its rule (or the zone policy), a port forward named as such, and
/// a hit with the flow's direction and state. Explaining changes nothing.
#[test]
fn a_packet_is_explained_by_its_flow_or_the_firewall_decision_it_would_meet() {
    let rules = vec![Rule {
        protocol: Some(TCP),
        dst_ports: Some(443..=443),
        dst: Some((ip(OTHER_REMOTE), 32)),
        ..rule("no-https-to-other", Action::Drop)
    }];
    let mut gw = Gateway::with(
        Arc::new(config(1500, rules, 0, false)),
        WorkerSetup::default(),
    );
    let lan = Ingress {
        port: LAN,
        handed_off: false,
    };
    let wan = Ingress {
        port: WAN,
        handed_off: false,
    };
    let explain = |gw: &Gateway, frame: &[u8], ingress| gw.pipeline.explain(frame, ingress);

    let syn = tcp(LAN, (HOST, 40000), (REMOTE, 443), seg(SYN, C_ISN, 0), &[]);
    let fresh = explain(&gw, &syn, lan);
    assert_eq!(fresh.key.unwrap().dst, ip(REMOTE));
    let Some(FlowMatch::New {
        firewall: Some(decision),
    }) = fresh.flow
    else {
        panic!("{fresh:?}");
    };
    assert_eq!((decision.action, decision.rule), (Action::Accept, None));
    assert_eq!((decision.from, decision.to), (LAN_ZONE, WAN_ZONE));

    let blocked = tcp(
        LAN,
        (HOST, 40001),
        (OTHER_REMOTE, 443),
        seg(SYN, C_ISN, 0),
        &[],
    );
    let Some(FlowMatch::New {
        firewall: Some(decision),
    }) = explain(&gw, &blocked, lan).flow
    else {
        panic!("not a new flow");
    };
    assert_eq!(decision.action, Action::Drop);
    let rule = decision.rule.expect("decided by the rule");
    assert_eq!(
        gw.pipeline.router().stateful.firewall.rule(rule).name,
        "no-https-to-other"
    );

    let probe = tcp(WAN, (REMOTE, 5555), (WAN_ADDR, 22), seg(SYN, C_ISN, 0), &[]);
    let Some(FlowMatch::New {
        firewall: Some(decision),
    }) = explain(&gw, &probe, wan).flow
    else {
        panic!("not a new flow");
    };
    assert_eq!(
        (decision.to, decision.action),
        (ZoneId::LOCAL, Action::Drop)
    );
    let forwarded = tcp(
        WAN,
        (REMOTE, 5555),
        (WAN_ADDR, 8080),
        seg(SYN, C_ISN, 0),
        &[],
    );
    assert_eq!(
        explain(&gw, &forwarded, wan).flow,
        Some(FlowMatch::NewForwarded)
    );

    let public = handshake(&mut gw, (HOST, 40000), (REMOTE, 443), SECOND);
    let flows = gw.tables(SECOND).flows;
    let reply = tcp(
        WAN,
        (REMOTE, 443),
        public,
        seg(ACK, S_ISN + 1, C_ISN + 1),
        &[],
    );
    assert_eq!(
        explain(&gw, &reply, wan).flow,
        Some(FlowMatch::Existing {
            direction: Direction::Reply,
            tcp_state: Some(TcpState::Established),
        })
    );
    assert_eq!(gw.tables(SECOND).flows, flows, "explaining changed nothing");
    let arp_like = [0u8; 20];
    assert_eq!(explain(&gw, &arp_like, lan).key, None);
}

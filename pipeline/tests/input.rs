//! Input a middlebox must refuse or police (issue 14, item 6), end to end through
//! `Pipeline::process`: IPv4 source routes and malformed options, L4 checksums on the packets
//! that change TCP state or create flows, port reuse after TIME_WAIT and resets, ICMP error
//! budgets per kind, the echo budget of the slow path, and every DNS query of a flow checked
//! against the block lists.
//!
//! The gateway is the home setup of `stateful.rs`: LAN 192.168.10.1/24 (zone 0) and WAN
//! 10.0.0.1/24 (zone 1, masquerading), a default route via 10.0.0.2, LAN to WAN and LAN to
//! the gateway accepted. Frames are built with etherparse.

mod common;
use common::*;

use std::sync::Arc;

use etherparse::checksum::Sum16BitWords;
use etherparse::{
    Ethernet2Header, Icmpv4Slice, Icmpv4Type, Ipv4Header, PacketBuilder, TcpHeader, UdpHeader,
};
use pipeline::features::content::{ContentPolicy, DnsAction};
use pipeline::pipeline::config::Stateful;
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    ControlWork, DropReason, IcmpLimits, NeighborView, PacketBuf, Pipeline, RouterConfig, Verdict,
    WorkerCounters,
};

const ROOM: usize = 2048;
const GARBAGE: u8 = 0xa5;

const REMOTE: [u8; 4] = [203, 0, 113, 5];

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

type Endpoint = ([u8; 4], u16);

fn deny_remote() -> Rule {
    Rule {
        from: Some(LAN_ZONE),
        to: Some(WAN_ZONE),
        dst: Some((ip(REMOTE), 32)),
        ..Rule::matching_all("no-remote", Action::Drop)
    }
}

/// The home gateway with `rules` and, optionally, a content policy.
fn config(
    wan_mtu: u16,
    icmp: IcmpLimits,
    rules: Vec<Rule>,
    content: Option<ContentPolicy>,
) -> Arc<RouterConfig> {
    let policy = Policy::new(Action::Drop)
        .set(LAN_ZONE, WAN_ZONE, Action::Accept)
        .set(LAN_ZONE, ZoneId::LOCAL, Action::Accept);
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
    let default_route = default_route();
    Arc::new(
        RouterConfig::new(interfaces(wan_mtu), &[default_route], icmp)
            .unwrap()
            .with_stateful(stateful)
            .unwrap(),
    )
}

fn home() -> Arc<RouterConfig> {
    config(1500, IcmpLimits::default(), Vec::new(), None)
}

struct Gateway {
    pipeline: Pipeline,
    counters: Arc<WorkerCounters>,
}

impl Gateway {
    fn with(router: Arc<RouterConfig>) -> Gateway {
        let counters = Arc::new(WorkerCounters::default());
        let neighbors = NeighborView::new([
            (ip(UPSTREAM), EthernetAddress(UPSTREAM_MAC)),
            (ip(HOST), EthernetAddress(HOST_MAC)),
        ]);
        let pipeline = Pipeline::new(router, Arc::new(neighbors), counters.clone());
        Gateway { pipeline, counters }
    }

    /// `nic_says_good`: what the NIC's RX checksum flag would have said.
    fn run(
        &mut self,
        frame: &[u8],
        port: u16,
        now_ns: u64,
        nic_says_good: bool,
    ) -> (Verdict, Vec<u8>) {
        let mut room = [GARBAGE; ROOM];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len()).with_l4_checksum_good(nic_says_good);
        let verdict = self.pipeline.process(&mut pkt, port, now_ns);
        (verdict, pkt.bytes().to_vec())
    }

    fn process(&mut self, frame: &[u8], port: u16, now_ns: u64) -> (Verdict, Vec<u8>) {
        self.run(frame, port, now_ns, false)
    }

    /// Asserts the frame leaves by `egress` and returns it.
    fn pass(&mut self, frame: &[u8], port: u16, now_ns: u64, egress: u16) -> Vec<u8> {
        let (verdict, out) = self.process(frame, port, now_ns);
        assert_eq!(verdict, Verdict::Transmit { port: egress });
        out
    }

    fn expect_drop(&mut self, frame: &[u8], port: u16, now_ns: u64, reason: DropReason) {
        let before = self.counters.dropped(reason);
        let (verdict, _) = self.process(frame, port, now_ns);
        assert_eq!(verdict, Verdict::Drop(reason));
        assert_eq!(
            self.counters.dropped(reason),
            before + 1,
            "{reason:?} counted"
        );
    }

    /// Flows and NAT ports in use, after expiring what is due at `now_ns`.
    fn tables(&mut self, now_ns: u64) -> (u64, u64) {
        self.pipeline.housekeeping(now_ns, usize::MAX);
        (
            self.counters.conntrack_entries.get(),
            self.counters.nat_ports_in_use.get(),
        )
    }
}

fn macs(ingress: u16) -> ([u8; 6], [u8; 6]) {
    match ingress {
        LAN => (HOST_MAC, LAN_MAC),
        _ => (UPSTREAM_MAC, WAN_MAC),
    }
}

fn tcp(ingress: u16, src: Endpoint, dst: Endpoint, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    tcp_with(ingress, src, dst, flags, seq, ack, &[])
}

fn tcp_with(
    ingress: u16,
    src: Endpoint,
    dst: Endpoint,
    flags: u8,
    seq: u32,
    ack: u32,
    payload: &[u8],
) -> Vec<u8> {
    let (from, to) = macs(ingress);
    let mut header = TcpHeader::new(src.1, dst.1, seq, 1024);
    header.acknowledgment_number = ack;
    header.fin = flags & FIN != 0;
    header.syn = flags & SYN != 0;
    header.rst = flags & RST != 0;
    header.psh = flags & PSH != 0;
    header.ack = flags & ACK != 0;
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(from, to)
        .ipv4(src.0, dst.0, 64)
        .tcp_header(header)
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

/// Flips a bit of the L4 checksum field (TCP and UDP put it at different offsets).
fn corrupt_l4_checksum(mut frame: Vec<u8>) -> Vec<u8> {
    let l4 = ETH_LEN + 20;
    let offset = match frame[ETH_LEN + 9] {
        6 => l4 + 16,
        17 => l4 + 6,
        _ => l4 + 2,
    };
    frame[offset] ^= 0x40;
    frame
}

fn endpoints(frame: &[u8]) -> (Endpoint, Endpoint) {
    let (_, rest) = Ethernet2Header::from_slice(frame).unwrap();
    let (header, l4) = Ipv4Header::from_slice(rest).unwrap();
    let (src_port, dst_port) = match header.protocol.0 {
        6 => {
            let (tcp, payload) = TcpHeader::from_slice(l4).unwrap();
            let expected = tcp.calc_checksum_ipv4(&header, payload).unwrap();
            assert_eq!(tcp.checksum, expected, "TCP checksum");
            (tcp.source_port, tcp.destination_port)
        }
        17 => {
            let (udp, _) = UdpHeader::from_slice(l4).unwrap();
            (udp.source_port, udp.destination_port)
        }
        other => panic!("protocol {other}"),
    };
    ((header.source, src_port), (header.destination, dst_port))
}

/// Opens a masqueraded connection; returns the public endpoint.
fn handshake(gw: &mut Gateway, client: Endpoint, server: Endpoint, isn: u32, now: u64) -> Endpoint {
    let out = gw.pass(&tcp(LAN, client, server, SYN, isn, 0), LAN, now, WAN);
    let (public, _) = endpoints(&out);
    assert_eq!(public.0, WAN_ADDR);
    let syn_ack = tcp(WAN, server, public, SYN | ACK, S_ISN, isn + 1);
    let back = gw.pass(&syn_ack, WAN, now, LAN);
    assert_eq!(endpoints(&back), (server, client));
    gw.pass(
        &tcp(LAN, client, server, ACK, isn + 1, S_ISN + 1),
        LAN,
        now,
        WAN,
    );
    public
}

/// The frame with `options` inserted after its 20-byte IPv4 header, IHL, total length and
/// header checksum fixed.
fn with_ip_options(frame: &[u8], options: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let mut out = frame[..ETH_LEN + 20].to_vec();
    out.extend_from_slice(options);
    out.extend_from_slice(&frame[ETH_LEN + 20..]);
    let ip = &mut out[ETH_LEN..];
    ip[0] = 0x40 | ((20 + options.len()) / 4) as u8;
    let total = u16::from_be_bytes([ip[2], ip[3]]) + options.len() as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[10..12].copy_from_slice(&[0, 0]);
    let header_len = 20 + options.len();
    let checksum = Sum16BitWords::new()
        .add_slice(&ip[..header_len])
        .ones_complement()
        .to_be();
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    out
}

// --- IPv4 options --------------------------------------------------------------------------

#[test]
fn source_routed_and_malformed_options_are_dropped_and_counted() {
    let mut gw = Gateway::with(home());
    let plain = udp(LAN, (HOST, 40000), (REMOTE, 9), b"hello");
    // Record route (an empty slot) and a NOP: forwarded, options and all.
    let record_route = with_ip_options(&plain, &[7, 7, 4, 0, 0, 0, 0, 1]);
    let out = gw.pass(&record_route, LAN, 0, WAN);
    assert_eq!(out.len(), record_route.len());
    assert_eq!(&out[ETH_LEN + 20..ETH_LEN + 28], &[7, 7, 4, 0, 0, 0, 0, 1]);

    let lsrr = with_ip_options(&plain, &[131, 7, 4, 198, 51, 100, 1, 0]);
    gw.expect_drop(&lsrr, LAN, 0, DropReason::Ipv4SourceRoute);
    let ssrr = with_ip_options(&plain, &[1, 137, 7, 4, 198, 51, 100, 1]);
    gw.expect_drop(&ssrr, LAN, 0, DropReason::Ipv4SourceRoute);
    // From the WAN too, and before anything else looks at the packet.
    let inbound = with_ip_options(
        &udp(WAN, (REMOTE, 9), (WAN_ADDR, 40000), b"x"),
        &[131, 3, 4, 0],
    );
    gw.expect_drop(&inbound, WAN, 0, DropReason::Ipv4SourceRoute);

    // A length past the header, a length below 2, and a kind with no length byte.
    for options in [
        &[68, 12, 5, 0][..],
        &[7, 1, 0, 0, 0, 0, 0, 0],
        &[1, 1, 1, 130],
    ] {
        let frame = with_ip_options(&plain, options);
        gw.expect_drop(&frame, LAN, 0, DropReason::MalformedIpv4Options);
    }
    assert_eq!(
        gw.pipeline.flow_count(),
        1,
        "only the record-route datagram"
    );
}

// --- L4 checksums --------------------------------------------------------------------------

#[test]
fn a_syn_with_a_bad_checksum_creates_nothing_unless_the_nic_vouched_for_it() {
    let mut gw = Gateway::with(home());
    let (client, server) = ((HOST, 40001), (REMOTE, 443));
    let bad_syn = corrupt_l4_checksum(tcp(LAN, client, server, SYN, C_ISN, 0));
    gw.expect_drop(&bad_syn, LAN, 0, DropReason::L4Checksum);
    assert_eq!(gw.tables(0), (0, 0), "no flow, no NAT port");

    // A UDP flow's first datagram is checked too; no checksum at all is allowed.
    let bad_udp = corrupt_l4_checksum(udp(LAN, (HOST, 40002), (REMOTE, 53), b"q"));
    gw.expect_drop(&bad_udp, LAN, 0, DropReason::L4Checksum);
    let mut unchecked = udp(LAN, (HOST, 40003), (REMOTE, 53), b"q");
    unchecked[ETH_LEN + 20 + 6..ETH_LEN + 20 + 8].copy_from_slice(&[0, 0]);
    gw.pass(&unchecked, LAN, 0, WAN);

    // And an ICMP query's.
    let mut ping = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, REMOTE, 64)
        .icmpv4_echo_request(9, 1)
        .write(&mut ping, &[0; 8])
        .unwrap();
    gw.expect_drop(
        &corrupt_l4_checksum(ping.clone()),
        LAN,
        0,
        DropReason::L4Checksum,
    );
    gw.pass(&ping, LAN, 0, WAN);

    // The NIC's RX flag is trusted when it says good: nothing is summed again.
    let (verdict, _) = gw.run(&bad_syn, LAN, 0, true);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(gw.counters.dropped(DropReason::L4Checksum), 3);
}

#[test]
fn resets_and_fins_with_bad_checksums_leave_the_connection_alone() {
    let mut gw = Gateway::with(home());
    let (client, server) = ((HOST, 40010), (REMOTE, 443));
    let public = handshake(&mut gw, client, server, C_ISN, 0);

    let forged_rst = corrupt_l4_checksum(tcp(WAN, server, public, RST | ACK, S_ISN + 1, 0));
    gw.expect_drop(&forged_rst, WAN, SECOND, DropReason::L4Checksum);
    let bad_fin = corrupt_l4_checksum(tcp(LAN, client, server, FIN | ACK, C_ISN + 1, S_ISN + 1));
    gw.expect_drop(&bad_fin, LAN, SECOND, DropReason::L4Checksum);
    // Still established: had the forged reset closed it, this SYN would reopen the flow.
    let new_syn = tcp(LAN, client, server, SYN, C_ISN + 3_000_000, 0);
    gw.expect_drop(&new_syn, LAN, SECOND, DropReason::ConntrackInvalid);

    // Data is not summed on the established path: a bad one is the endpoint's to drop.
    let bad_data = corrupt_l4_checksum(tcp_with(
        LAN,
        client,
        server,
        PSH | ACK,
        C_ISN + 1,
        S_ISN + 1,
        b"abcd",
    ));
    gw.pass(&bad_data, LAN, SECOND, WAN);
    let reply = tcp_with(WAN, server, public, PSH | ACK, S_ISN + 1, C_ISN + 5, b"ok");
    gw.pass(&reply, WAN, SECOND, LAN);
    // A good reset closes it, and then the same SYN reopens it.
    let rst = tcp(WAN, server, public, RST | ACK, S_ISN + 3, C_ISN + 5);
    gw.pass(&rst, WAN, SECOND, LAN);
    gw.pass(&new_syn, LAN, SECOND, WAN);
    assert_eq!(gw.counters.dropped(DropReason::L4Checksum), 2);
}

// --- Port reuse ----------------------------------------------------------------------------

fn close(gw: &mut Gateway, client: Endpoint, server: Endpoint, public: Endpoint, now: u64) {
    gw.pass(
        &tcp(LAN, client, server, FIN | ACK, C_ISN + 1, S_ISN + 1),
        LAN,
        now,
        WAN,
    );
    gw.pass(
        &tcp(WAN, server, public, FIN | ACK, S_ISN + 1, C_ISN + 2),
        WAN,
        now,
        LAN,
    );
    gw.pass(
        &tcp(LAN, client, server, ACK, C_ISN + 2, S_ISN + 2),
        LAN,
        now,
        WAN,
    );
}

#[test]
fn a_syn_reopens_a_flow_in_time_wait_or_after_a_reset_with_a_consistent_mapping() {
    let mut gw = Gateway::with(home());
    let (client, server) = ((HOST, 40020), (REMOTE, 443));
    let public = handshake(&mut gw, client, server, C_ISN, 0);
    close(&mut gw, client, server, public, 0);
    assert_eq!(gw.tables(SECOND), (1, 1), "in TIME_WAIT");
    let setups = gw.counters.conntrack_setups.get();

    // The client reuses its port at once with a new ISN: a new flow replaces the old one,
    // and its mapping is the old one again (the binding was released and re-allocated).
    let new_isn = C_ISN + 3_000_000;
    let reused = handshake(&mut gw, client, server, new_isn, 2 * SECOND);
    assert_eq!(reused, public);
    assert_eq!(gw.tables(2 * SECOND), (1, 1), "one flow, one port");
    gw.pipeline.housekeeping(2 * SECOND, 0);
    assert_eq!(gw.counters.conntrack_setups.get(), setups + 1, "a new flow");
    let data = tcp_with(LAN, client, server, PSH | ACK, new_isn + 1, S_ISN + 1, b"x");
    gw.pass(&data, LAN, 2 * SECOND, WAN);

    // After a reset, too.
    let rst = tcp(WAN, server, public, RST | ACK, S_ISN + 1, new_isn + 2);
    gw.pass(&rst, WAN, 3 * SECOND, LAN);
    let again = handshake(&mut gw, client, server, new_isn + 5_000_000, 3 * SECOND);
    assert_eq!(again, public);
    assert_eq!(gw.tables(3 * SECOND), (1, 1));

    // A SYN with a bad checksum reopens nothing.
    let mut closed = Gateway::with(home());
    let public = handshake(&mut closed, client, server, C_ISN, 0);
    close(&mut closed, client, server, public, 0);
    let bad = corrupt_l4_checksum(tcp(LAN, client, server, SYN, C_ISN + 9, 0));
    closed.expect_drop(&bad, LAN, SECOND, DropReason::L4Checksum);
    // The old connection's last retransmitted ACK still fits its flow.
    closed.pass(
        &tcp(LAN, client, server, ACK, C_ISN + 2, S_ISN + 2),
        LAN,
        SECOND,
        WAN,
    );
}

#[test]
fn a_reopened_flow_is_admitted_by_todays_rules() {
    let mut gw = Gateway::with(home());
    let (client, server) = ((HOST, 40030), (REMOTE, 443));
    let public = handshake(&mut gw, client, server, C_ISN, 0);
    close(&mut gw, client, server, public, 0);
    // New rules deny the server; flows under the old ones are not rechecked.
    gw.pipeline.set_router(config(
        1500,
        IcmpLimits::default(),
        vec![deny_remote()],
        None,
    ));
    let syn = tcp(LAN, client, server, SYN, C_ISN + 3_000_000, 0);
    gw.expect_drop(&syn, LAN, SECOND, DropReason::FirewallDrop);
    assert_eq!(
        gw.tables(SECOND),
        (0, 0),
        "the old flow and its port are gone"
    );
}

// --- ICMP error budgets ----------------------------------------------------------------------

#[test]
fn a_ttl_expiry_flood_does_not_starve_fragmentation_needed() {
    let limits = IcmpLimits {
        errors_per_sec: 1,
        burst: 2,
        ..IcmpLimits::default()
    };
    let mut gw = Gateway::with(config(1400, limits, Vec::new(), None));
    let mut expiring = udp(LAN, (HOST, 40040), (REMOTE, 33434), b"trace");
    expiring[ETH_LEN + 8] = 1;
    let ip = &mut expiring[ETH_LEN..ETH_LEN + 20];
    ip[10..12].copy_from_slice(&[0, 0]);
    let checksum = Sum16BitWords::new().add_slice(ip).ones_complement().to_be();
    ip[10..12].copy_from_slice(&checksum.to_be_bytes());
    let mut sent = 0;
    for _ in 0..50 {
        if gw.process(&expiring, LAN, SECOND).0 == (Verdict::Transmit { port: LAN }) {
            sent += 1;
        }
    }
    assert_eq!(sent, 2, "the time-exceeded budget");
    assert_eq!(gw.counters.icmp_errors_rate_limited.get(), 48);

    // Path-MTU discovery still works: a DF datagram too big for the WAN gets its error.
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, REMOTE, 64)
        .udp(40041, 9)
        .write(&mut frame, &vec![7; 1450])
        .unwrap();
    for round in 0..2 {
        let (verdict, out) = gw.process(&frame, LAN, SECOND);
        assert_eq!(verdict, Verdict::Transmit { port: LAN }, "round {round}");
        let (_, rest) = Ethernet2Header::from_slice(&out).unwrap();
        let (header, icmp) = Ipv4Header::from_slice(rest).unwrap();
        assert_eq!(header.destination, HOST);
        let icmp = Icmpv4Slice::from_slice(icmp).unwrap();
        assert!(
            matches!(icmp.icmp_type(), Icmpv4Type::DestinationUnreachable(_)),
            "{:?}",
            icmp.icmp_type()
        );
        assert_eq!(&icmp.bytes5to8()[2..4], &1400u16.to_be_bytes());
    }
    assert_eq!(gw.counters.dropped(DropReason::FragmentationNeeded), 2);
}

// --- The slow path -------------------------------------------------------------------------

fn echo_request(seq: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, LAN_ADDR, 64)
        .icmpv4_echo_request(7, seq)
        .write(&mut frame, &[0; 16])
        .unwrap();
    frame
}

fn arp_request() -> Vec<u8> {
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&HOST_MAC);
    frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    frame.extend_from_slice(&HOST_MAC);
    frame.extend_from_slice(&HOST);
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&LAN_ADDR);
    frame.resize(60, 0);
    frame
}

#[test]
fn a_ping_flood_is_policed_per_worker_and_arp_never_is() {
    let limits = IcmpLimits {
        echo_per_sec: 10,
        echo_burst: 3,
        ..IcmpLimits::default()
    };
    let mut gw = Gateway::with(config(1500, limits, Vec::new(), None));
    let local = Verdict::Control(ControlWork::LocalIcmp);
    let mut passed = 0;
    for seq in 0..100 {
        let (verdict, _) = gw.process(&echo_request(seq), LAN, SECOND);
        match verdict {
            v if v == local => passed += 1,
            Verdict::Drop(DropReason::SlowPathPoliced) => {}
            other => panic!("{other:?}"),
        }
        // ARP interleaved with the flood always reaches the control thread.
        let (verdict, _) = gw.process(&arp_request(), LAN, SECOND);
        assert_eq!(verdict, Verdict::Control(ControlWork::Arp));
    }
    assert_eq!(passed, 3, "the burst");
    assert_eq!(gw.counters.dropped(DropReason::SlowPathPoliced), 97);
    // Refilled at 10/s: one more after 100 ms.
    let later = SECOND + SECOND / 10;
    assert_eq!(gw.process(&echo_request(100), LAN, later).0, local);
    assert_eq!(
        gw.process(&echo_request(101), LAN, later).0,
        Verdict::Drop(DropReason::SlowPathPoliced)
    );
}

// --- DNS -----------------------------------------------------------------------------------

fn dns_query(id: u16, name: &str) -> Vec<u8> {
    let mut query = id.to_be_bytes().to_vec();
    query.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 1, 0, 1]);
    query
}

fn blocking(name: &str) -> ContentPolicy {
    ContentPolicy::new(
        &[name.to_string()],
        &[],
        Vec::new(),
        Vec::new(),
        DnsAction::Nxdomain,
        0,
    )
    .unwrap()
}

#[test]
fn every_dns_query_of_a_flow_is_checked_against_the_block_lists() {
    let policy = blocking("blocked.example");
    let mut gw = Gateway::with(config(
        1500,
        IcmpLimits::default(),
        Vec::new(),
        Some(policy),
    ));
    let (client, resolver) = ((HOST, 40050), (REMOTE, 53));

    let first = udp(LAN, client, resolver, &dns_query(1, "news.example"));
    let out = gw.pass(&first, LAN, 0, WAN);
    let (public, _) = endpoints(&out);
    let answer = udp(WAN, resolver, public, &dns_query(1, "news.example"));
    gw.pass(&answer, WAN, 0, LAN);
    assert_eq!(gw.pipeline.flow_count(), 1);

    // The same socket asks for a blocked name: answered NXDOMAIN, not forwarded.
    let second = udp(LAN, client, resolver, &dns_query(2, "ads.blocked.example"));
    let (verdict, reply) = gw.process(&second, LAN, SECOND);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (from, to) = endpoints(&reply);
    assert_eq!((from, to), (resolver, client), "from the resolver asked");
    let dns = &reply[ETH_LEN + 20 + 8..];
    assert_eq!(&dns[..2], &2u16.to_be_bytes());
    assert_eq!(dns[2] & 0x80, 0x80, "a response");
    assert_eq!(dns[3] & 0x0f, 3, "NXDOMAIN");
    assert_eq!(gw.counters.dropped(DropReason::ContentBlocked), 1);

    // Allowed names on the flow still go through.
    let third = udp(LAN, client, resolver, &dns_query(3, "weather.example"));
    gw.pass(&third, LAN, 2 * SECOND, WAN);
    assert_eq!(gw.counters.dropped(DropReason::ContentBlocked), 1);
}

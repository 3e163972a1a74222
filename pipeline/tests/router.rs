//! The router pipeline end to end: frames built with etherparse go through
//! `Pipeline::process` (and the control-thread helpers), and the verdicts, counters and bytes
//! that come out are checked. Every checksum is verified with etherparse rather than with the
//! crate's own code, so a checksum bug cannot vouch for itself.

use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::checksum::Sum16BitWords;
use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
use etherparse::{
    EtherType, Ethernet2Header, IcmpEchoHeader, Icmpv4Header, Icmpv4Slice, Icmpv4Type,
    IpFragOffset, IpHeaders, IpNumber, Ipv4Header, PacketBuilder, UdpHeader, VlanId,
};
use pipeline::l3::neigh::{NeighborConfig, NeighborTable};
use pipeline::pipeline::local::arp as control;
use pipeline::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress};
use pipeline::{
    ControlWork, DropReason, IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline,
    RouterConfig, StaticRoute, Verdict, WorkerCounters,
};
use proptest::prelude::*;

/// An mbuf's data room.
const ROOM: usize = 2048;
/// Pool buffers are not zeroed: garbage after the frame catches code that relies on zeros.
const GARBAGE: u8 = 0xa5;

const LAN: u16 = 0;
const WAN: u16 = 1;
const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const LAN_ADDR: [u8; 4] = [192, 168, 10, 1];
const WAN_ADDR: [u8; 4] = [10, 0, 0, 1];
/// A LAN host the neighbour view knows.
const HOST: [u8; 4] = [192, 168, 10, 2];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
/// The static route's gateway on the WAN side, also known.
const UPSTREAM: [u8; 4] = [10, 0, 0, 2];
const UPSTREAM_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
/// Behind the static route 172.16.0.0/16.
const REMOTE: [u8; 4] = [172, 16, 3, 4];
const BROADCAST_MAC: [u8; 6] = [0xff; 6];
const ETH_LEN: usize = 14;
/// The largest datagram an ICMP error may quote: 576 minus its IPv4 and ICMP headers.
const MAX_QUOTE: usize = 576 - 20 - 8;

fn ip(octets: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(octets)
}

fn lan() -> Interface {
    Interface {
        mac: EthernetAddress(LAN_MAC),
        addr: ip(LAN_ADDR),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

fn wan(mtu: u16) -> Interface {
    Interface {
        mac: EthernetAddress(WAN_MAC),
        addr: ip(WAN_ADDR),
        prefix_len: 24,
        mtu,
        virtual_addr: None,
    }
}

fn config(wan_mtu: u16, icmp: IcmpLimits) -> RouterConfig {
    let to_remote = StaticRoute {
        destination: Ipv4Addr::new(172, 16, 0, 0),
        len: 16,
        via: ip(UPSTREAM),
    };
    RouterConfig::new(vec![lan(), wan(wan_mtu)], &[to_remote], icmp).unwrap()
}

fn neighbors() -> NeighborView {
    NeighborView::new([
        (ip(UPSTREAM), EthernetAddress(UPSTREAM_MAC)),
        (ip(HOST), EthernetAddress(HOST_MAC)),
    ])
}

/// One worker's pipeline plus the counters it writes.
struct Router {
    pipeline: Pipeline,
    counters: Arc<WorkerCounters>,
}

impl Router {
    fn new() -> Router {
        Router::with(1500, IcmpLimits::default())
    }

    fn with(wan_mtu: u16, icmp: IcmpLimits) -> Router {
        Router::from_config(config(wan_mtu, icmp))
    }

    fn from_config(config: RouterConfig) -> Router {
        let counters = Arc::new(WorkerCounters::default());
        let pipeline = Pipeline::new(Arc::new(config), Arc::new(neighbors()), counters.clone());
        Router { pipeline, counters }
    }

    fn process(&mut self, frame: &[u8], ingress: u16) -> (Verdict, Vec<u8>) {
        self.process_at(frame, ingress, 0)
    }

    /// Runs the frame through the pipeline in a 2 KiB room and returns the verdict and the
    /// frame as the worker would send it.
    fn process_at(&mut self, frame: &[u8], ingress: u16, now_ns: u64) -> (Verdict, Vec<u8>) {
        let mut room = [GARBAGE; ROOM];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let verdict = self.pipeline.process(&mut pkt, ingress, now_ns);
        assert!(pkt.len() <= ROOM);
        (verdict, pkt.bytes().to_vec())
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        self.counters.dropped(reason)
    }

    fn icmp_errors_sent(&self) -> u64 {
        self.counters.icmp_errors_sent.get()
    }

    /// Asserts the frame is dropped for `reason` without an ICMP error, and counted once.
    fn assert_silent_drop(&mut self, frame: &[u8], ingress: u16, reason: DropReason) {
        let (before, errors) = (self.dropped(reason), self.icmp_errors_sent());
        let (verdict, _) = self.process(frame, ingress);
        assert_eq!(verdict, Verdict::Drop(reason));
        assert_eq!(self.dropped(reason), before + 1, "{reason:?} counted");
        assert_eq!(self.icmp_errors_sent(), errors, "no ICMP error");
    }
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

/// UDP from `src` to `dst`, sent by HOST_MAC to the LAN port, with DF set (etherparse's
/// default) and `data_len` bytes of payload.
fn udp(src: [u8; 4], dst: [u8; 4], ttl: u8, data_len: usize) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(src, dst, ttl)
        .udp(4000, 5000)
        .write(&mut frame, &data(data_len))
        .unwrap();
    frame
}

/// A UDP header (no checksum) and `data_len` bytes, for hand-made IPv4 headers.
fn udp_datagram(data_len: usize) -> Vec<u8> {
    let mut datagram = Vec::new();
    datagram.extend_from_slice(&4000u16.to_be_bytes());
    datagram.extend_from_slice(&5000u16.to_be_bytes());
    datagram.extend_from_slice(&((8 + data_len) as u16).to_be_bytes());
    datagram.extend_from_slice(&[0, 0]);
    datagram.extend_from_slice(&data(data_len));
    datagram
}

fn header(src: [u8; 4], dst: [u8; 4], ttl: u8) -> Ipv4Header {
    Ipv4Header::new(0, ttl, IpNumber::UDP, src, dst).unwrap()
}

/// A frame around a hand-made IPv4 header (flags, offsets) and raw payload bytes; etherparse
/// fills in the total length and header checksum.
fn raw_ipv4(eth_dst: [u8; 6], header: Ipv4Header, protocol: IpNumber, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, eth_dst)
        .ip(IpHeaders::Ipv4(header, Default::default()))
        .write(&mut frame, protocol, payload)
        .unwrap();
    frame
}

fn echo_request(dst: [u8; 4], data_len: usize) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, dst, 64)
        .icmpv4_echo_request(0x1234, 7)
        .write(&mut frame, &data(data_len))
        .unwrap();
    frame
}

/// Ethernet pads short frames to 60 bytes; real padding is not always zeros.
fn padded(mut frame: Vec<u8>, len: usize) -> Vec<u8> {
    frame.resize(len, 0xee);
    frame
}

/// Rewrites the IPv4 header checksum after a test corrupted some header field on purpose.
/// A header length past the frame is clamped, so that later checks still have something to
/// reject.
fn refill_ip_checksum(frame: &mut [u8]) {
    let ihl = (usize::from(frame[ETH_LEN] & 0x0f) * 4).clamp(20, frame.len() - ETH_LEN);
    frame[ETH_LEN + 10..ETH_LEN + 12].fill(0);
    let sum = Sum16BitWords::new()
        .add_slice(&frame[ETH_LEN..ETH_LEN + ihl])
        .ones_complement();
    // etherparse sums native-endian words (see `Ipv4Header::calc_header_checksum`).
    frame[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&sum.to_ne_bytes());
}

/// Parses an IPv4 frame with etherparse, checking its header checksum and that the frame ends
/// exactly where the datagram does.
fn parse_ipv4(frame: &[u8]) -> (Ethernet2Header, Ipv4Header, &[u8]) {
    let (eth, rest) = Ethernet2Header::from_slice(frame).unwrap();
    assert_eq!(eth.ether_type, EtherType::IPV4);
    let (ip, payload) = Ipv4Header::from_slice(rest).unwrap();
    // Summed over the raw bytes: the parsed header drops the reserved flag bit, which the
    // checksum still covers.
    let raw_sum = Sum16BitWords::new()
        .add_slice(&rest[..ip.header_len()])
        .ones_complement();
    assert_eq!(raw_sum, 0, "IPv4 checksum");
    assert_eq!(
        usize::from(ip.total_len),
        rest.len(),
        "frame ends at datagram"
    );
    (eth, ip, payload)
}

/// An ICMP message whose checksum etherparse agrees with.
fn parse_icmp(message: &[u8]) -> Icmpv4Slice<'_> {
    let icmp = Icmpv4Slice::from_slice(message).unwrap();
    let expected = Icmpv4Header::with_checksum(icmp.icmp_type(), icmp.payload());
    assert_eq!(icmp.checksum(), expected.checksum, "ICMP checksum");
    icmp
}

fn assert_udp_checksum_valid(ip: &Ipv4Header, segment: &[u8]) {
    let (udp, data) = UdpHeader::from_slice(segment).unwrap();
    assert_eq!(udp.checksum, udp.calc_checksum_ipv4(ip, data).unwrap());
}

/// Checks an ICMP error sent back to HOST on the LAN about `original` (as HOST sent it), and
/// returns the ICMP type and the 4 bytes after the checksum.
fn check_icmp_error(reply: &[u8], original: &[u8]) -> (Icmpv4Type, [u8; 4]) {
    let (eth, header, message) = parse_ipv4(reply);
    assert_eq!(eth.destination, HOST_MAC);
    assert_eq!(eth.source, LAN_MAC);
    assert_eq!(header.source, LAN_ADDR, "from the ingress interface");
    assert_eq!(header.destination, HOST, "to the original source");
    assert_eq!(header.protocol, IpNumber::ICMP);
    assert!(header.time_to_live > 1);
    assert!(usize::from(header.total_len) <= 576);
    let icmp = parse_icmp(message);

    let (original_header, _) = Ipv4Header::from_slice(&original[ETH_LEN..]).unwrap();
    let datagram = &original[ETH_LEN..ETH_LEN + usize::from(original_header.total_len)];
    let quoted = icmp.payload();
    assert_eq!(quoted.len(), datagram.len().min(MAX_QUOTE));
    assert!(quoted.len() >= (original_header.header_len() + 8).min(datagram.len()));
    assert_eq!(
        quoted,
        &datagram[..quoted.len()],
        "quotes the datagram as received"
    );
    (icmp.icmp_type(), icmp.bytes5to8())
}

// --- Forwarding ---------------------------------------------------------------------------

/// Forwards `frame` from the LAN to the WAN next hop and checks every byte that must (and
/// must not) change.
fn assert_forwarded_to_upstream(frame: &[u8]) {
    let mut router = Router::new();
    let (verdict, out) = router.process(frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });

    let (_, before, _) = parse_ipv4(frame);
    let (eth, after, segment) = parse_ipv4(&out);
    assert_eq!(eth.destination, UPSTREAM_MAC, "L2 toward the next hop");
    assert_eq!(eth.source, WAN_MAC, "L2 from the egress port");
    assert_eq!(after.time_to_live, before.time_to_live - 1);
    let mut expected = before.clone();
    expected.time_to_live -= 1;
    expected.header_checksum = after.header_checksum;
    assert_eq!(after, expected, "nothing but TTL and checksum changed");
    assert_eq!(segment, &frame[ETH_LEN + 20..]);
    assert_udp_checksum_valid(&after, segment);

    assert_eq!(router.counters.dropped_total(), 0);
    assert_eq!(router.counters.to_control.get(), 0);
}

#[test]
fn forwards_lan_to_wan_host_via_connected_route() {
    assert_forwarded_to_upstream(&udp(HOST, UPSTREAM, 64, 100));
}

#[test]
fn forwards_lan_to_wan_via_static_route() {
    assert_forwarded_to_upstream(&udp(HOST, REMOTE, 64, 100));
    assert_forwarded_to_upstream(&udp(HOST, [172, 16, 255, 254], 2, 1472));
}

#[test]
fn forwards_wan_to_lan() {
    let mut router = Router::new();
    let mut frame = udp(REMOTE, HOST, 30, 10);
    frame[..6].copy_from_slice(&WAN_MAC);
    let (verdict, out) = router.process(&frame, WAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (eth, header, _) = parse_ipv4(&out);
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!(header.time_to_live, 29);
}

#[test]
fn ethernet_padding_is_trimmed() {
    // 20 + 8 + 0 = a 28-byte datagram, padded to the 60-byte minimum frame.
    let datagram_only = udp(HOST, REMOTE, 64, 0);
    assert_eq!(datagram_only.len(), ETH_LEN + 28);
    let frame = padded(datagram_only, 60);
    let mut router = Router::new();
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(out.len(), ETH_LEN + 28);
    parse_ipv4(&out);

    // A datagram that exactly fills the minimum frame has nothing to trim.
    let full = udp(HOST, REMOTE, 64, 18);
    assert_eq!(full.len(), 60);
    let (_, out) = router.process(&full, LAN);
    assert_eq!(out.len(), 60);
}

#[test]
fn frame_in_a_tight_room_is_forwarded() {
    // No tailroom at all: forwarding never needs to grow the frame.
    let frame = udp(HOST, REMOTE, 64, 100);
    let counters = Arc::new(WorkerCounters::default());
    let mut pipeline = Pipeline::new(
        Arc::new(config(1500, IcmpLimits::default())),
        Arc::new(neighbors()),
        counters,
    );
    let mut room = frame.clone();
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    assert_eq!(
        pipeline.process(&mut pkt, LAN, 0),
        Verdict::Transmit { port: WAN }
    );
}

#[test]
fn unknown_neighbour_goes_to_control_with_ttl_decremented() {
    let mut router = Router::new();
    let wan_host = [10, 0, 0, 7];
    let frame = udp(HOST, wan_host, 64, 100);
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(
        verdict,
        Verdict::Control(ControlWork::Resolve {
            port: WAN,
            next_hop: ip(wan_host),
        })
    );
    let (eth, header, _) = parse_ipv4(&out);
    assert_eq!(header.time_to_live, 63);
    assert_eq!(
        eth.destination, LAN_MAC,
        "L2 is left for the control thread"
    );
    assert_eq!(router.counters.to_control.get(), 1);
    assert_eq!(router.counters.dropped_total(), 0);

    // Behind a gateway, the gateway is what needs resolving.
    let mut router = Router::from_config(
        RouterConfig::new(
            vec![lan(), wan(1500)],
            &[StaticRoute {
                destination: Ipv4Addr::new(172, 16, 0, 0),
                len: 16,
                via: Ipv4Addr::new(10, 0, 0, 9),
            }],
            IcmpLimits::default(),
        )
        .unwrap(),
    );
    let (verdict, _) = router.process(&udp(HOST, REMOTE, 64, 10), LAN);
    assert_eq!(
        verdict,
        Verdict::Control(ControlWork::Resolve {
            port: WAN,
            next_hop: Ipv4Addr::new(10, 0, 0, 9),
        })
    );
}

// --- ICMP errors --------------------------------------------------------------------------

#[test]
fn ttl_expired_answers_time_exceeded() {
    for data_len in [0, 100, 1472] {
        let mut router = Router::new();
        let frame = udp(HOST, REMOTE, 1, data_len);
        let (verdict, out) = router.process(&frame, LAN);
        assert_eq!(verdict, Verdict::Transmit { port: LAN });
        let (icmp_type, rest) = check_icmp_error(&out, &frame);
        assert_eq!(
            icmp_type,
            Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit)
        );
        assert_eq!(rest, [0; 4], "unused bytes zeroed over garbage");
        assert_eq!(router.dropped(DropReason::TtlExpired), 1);
        assert_eq!(router.icmp_errors_sent(), 1);
        assert_eq!(router.counters.dropped_total(), 1);
    }
}

#[test]
fn ttl_zero_is_expired_too() {
    let mut router = Router::new();
    let frame = udp(HOST, REMOTE, 0, 20);
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    check_icmp_error(&out, &frame);
}

#[test]
fn time_exceeded_to_an_unknown_sender_waits_for_arp() {
    let mut router = Router::new();
    let stranger = [192, 168, 10, 9];
    let frame = udp(stranger, REMOTE, 1, 20);
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(
        verdict,
        Verdict::Control(ControlWork::Resolve {
            port: LAN,
            next_hop: ip(stranger),
        })
    );
    let (_, header, message) = parse_ipv4(&out);
    assert_eq!(header.destination, stranger);
    parse_icmp(message);
    assert_eq!(router.icmp_errors_sent(), 1);
}

#[test]
fn no_route_answers_net_unreachable() {
    let mut router = Router::new();
    let frame = udp(HOST, [198, 51, 100, 1], 64, 40);
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (icmp_type, rest) = check_icmp_error(&out, &frame);
    assert_eq!(
        icmp_type,
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Network)
    );
    assert_eq!(rest, [0; 4]);
    assert_eq!(router.dropped(DropReason::NoRoute), 1);
    assert_eq!(router.icmp_errors_sent(), 1);
}

#[test]
fn too_big_with_df_answers_fragmentation_needed() {
    let mut router = Router::with(1400, IcmpLimits::default());
    // 20 + 8 + 1472 = 1500 bytes, DF set.
    let frame = udp(HOST, REMOTE, 64, 1472);
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (icmp_type, rest) = check_icmp_error(&out, &frame);
    assert_eq!(
        icmp_type,
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1400
        })
    );
    assert_eq!(rest, [0, 0, 0x05, 0x78], "unused half zero, then the MTU");
    assert_eq!(router.dropped(DropReason::FragmentationNeeded), 1);
    assert_eq!(router.icmp_errors_sent(), 1);

    // Exactly the MTU fits.
    let (verdict, _) = router.process(&udp(HOST, REMOTE, 64, 1372), LAN);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
}

#[test]
fn too_big_without_df_is_to_be_fragmented() {
    let mut router = Router::with(1400, IcmpLimits::default());
    let mut ip_header = header(HOST, REMOTE, 64);
    ip_header.dont_fragment = false;
    let frame = raw_ipv4(LAN_MAC, ip_header, IpNumber::UDP, &udp_datagram(1472));
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Fragment { port: WAN });
    let (eth, header, _) = parse_ipv4(&out);
    assert_eq!((eth.destination, eth.source), (UPSTREAM_MAC, WAN_MAC));
    assert_eq!(header.time_to_live, 63);
    assert_eq!(router.counters.fragmented.get(), 1);
    assert_eq!(router.icmp_errors_sent(), 0);
    assert_eq!(router.counters.dropped_total(), 0);
}

#[test]
fn no_icmp_error_about_an_icmp_error() {
    let mut router = Router::new();
    // A time exceeded quoting something, itself expiring here.
    let mut error = vec![11, 0, 0, 0, 0, 0, 0, 0];
    error.extend_from_slice(&udp(REMOTE, HOST, 1, 8)[ETH_LEN..]);
    let frame = raw_ipv4(LAN_MAC, header(HOST, REMOTE, 1), IpNumber::ICMP, &error);
    router.assert_silent_drop(&frame, LAN, DropReason::TtlExpired);

    // Unreachable, about no flow the gateway knows: the stateful firewall drops it before
    // routing could answer.
    error[0] = 3;
    let frame = raw_ipv4(
        LAN_MAC,
        header(HOST, [198, 51, 100, 1], 64),
        IpNumber::ICMP,
        &error,
    );
    router.assert_silent_drop(&frame, LAN, DropReason::UnrelatedIcmpError);

    // Queries are not errors: an expiring echo request gets its time exceeded.
    let mut ping = echo_request(REMOTE, 16);
    ping[ETH_LEN + 8] = 1;
    refill_ip_checksum(&mut ping);
    let (verdict, out) = router.process(&ping, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    check_icmp_error(&out, &ping);
}

#[test]
fn no_icmp_error_about_a_non_initial_fragment() {
    let mut router = Router::new();
    let mut later = header(HOST, REMOTE, 1);
    later.more_fragments = true;
    later.fragment_offset = IpFragOffset::try_new(185).unwrap();
    let frame = raw_ipv4(LAN_MAC, later.clone(), IpNumber::UDP, &data(64));
    router.assert_silent_drop(&frame, LAN, DropReason::TtlExpired);

    // The last fragment too (offset without MF).
    later.more_fragments = false;
    let frame = raw_ipv4(LAN_MAC, later, IpNumber::UDP, &data(64));
    router.assert_silent_drop(&frame, LAN, DropReason::TtlExpired);

    // The first fragment carries the transport header, so it is answered.
    let mut first = header(HOST, REMOTE, 1);
    first.more_fragments = true;
    first.dont_fragment = false;
    let frame = raw_ipv4(LAN_MAC, first, IpNumber::UDP, &data(64));
    let (verdict, out) = router.process(&frame, LAN);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    check_icmp_error(&out, &frame);
}

#[test]
fn unicast_datagrams_in_link_layer_broadcasts_are_not_forwarded() {
    let mut router = Router::new();
    let mut frame = udp(HOST, REMOTE, 1, 20);
    frame[..6].copy_from_slice(&BROADCAST_MAC);
    router.assert_silent_drop(&frame, LAN, DropReason::LinkLayerBroadcast);

    // RFC 1812 5.3.4: not forwarded at all, so no question of an ICMP error either.
    let mut frame = udp(HOST, [198, 51, 100, 1], 64, 20);
    frame[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
    router.assert_silent_drop(&frame, LAN, DropReason::LinkLayerBroadcast);

    let mut frame = udp(HOST, REMOTE, 64, 20);
    frame[..6].copy_from_slice(&BROADCAST_MAC);
    router.assert_silent_drop(&frame, LAN, DropReason::LinkLayerBroadcast);
}

#[test]
fn icmp_errors_are_rate_limited() {
    let mut router = Router::with(
        1500,
        IcmpLimits {
            errors_per_sec: 1,
            burst: 2,
            ..IcmpLimits::default()
        },
    );
    let frame = udp(HOST, REMOTE, 1, 20);
    let now = 5_000_000_000;
    for _ in 0..2 {
        let (verdict, _) = router.process_at(&frame, LAN, now);
        assert_eq!(verdict, Verdict::Transmit { port: LAN });
    }
    let (verdict, _) = router.process_at(&frame, LAN, now);
    assert_eq!(verdict, Verdict::Drop(DropReason::TtlExpired));
    assert_eq!(router.counters.icmp_errors_rate_limited.get(), 1);
    assert_eq!(router.icmp_errors_sent(), 2);
    assert_eq!(router.dropped(DropReason::TtlExpired), 3);

    // One token a second later.
    let (verdict, _) = router.process_at(&frame, LAN, now + 1_000_000_000);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    let (verdict, _) = router.process_at(&frame, LAN, now + 1_000_000_000);
    assert_eq!(verdict, Verdict::Drop(DropReason::TtlExpired));
    assert_eq!(router.counters.icmp_errors_rate_limited.get(), 2);
    assert_eq!(router.icmp_errors_sent(), 3);
}

#[test]
fn icmp_error_needs_room_for_headers_and_eight_bytes_of_quote() {
    // An ICMP error is 42 bytes of headers plus a quote that must reach 8 bytes into the
    // original payload (RFC 792); a buffer without room for that gets no error, and no panic.
    let frame = udp(HOST, REMOTE, 1, 0);
    assert_eq!(frame.len(), 42);
    for (room_len, sent) in [(42, false), (42 + 27, false), (42 + 28, true), (ROOM, true)] {
        let mut router = Router::new();
        let mut room = vec![GARBAGE; room_len];
        room[..frame.len()].copy_from_slice(&frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let verdict = router.pipeline.process(&mut pkt, LAN, 0);
        if sent {
            assert_eq!(verdict, Verdict::Transmit { port: LAN }, "room {room_len}");
            check_icmp_error(pkt.bytes(), &frame);
        } else {
            assert_eq!(
                verdict,
                Verdict::Drop(DropReason::TtlExpired),
                "room {room_len}"
            );
        }
        assert_eq!(router.icmp_errors_sent(), u64::from(sent));
        assert_eq!(router.counters.icmp_errors_rate_limited.get(), 0);
        assert_eq!(router.dropped(DropReason::TtlExpired), 1);
    }

    // A bare 20-byte datagram in a buffer that ends with it.
    let bare = raw_ipv4(LAN_MAC, header(HOST, REMOTE, 1), IpNumber::UDP, &[]);
    assert_eq!(bare.len(), 34);
    let mut router = Router::new();
    let mut room = bare.clone();
    let mut pkt = PacketBuf::new(&mut room, bare.len());
    let verdict = router.pipeline.process(&mut pkt, LAN, 0);
    assert_eq!(verdict, Verdict::Drop(DropReason::TtlExpired));
    assert_eq!(router.icmp_errors_sent(), 0);
}

// --- Classification and validation --------------------------------------------------------

fn arp_frame(eth_dst: [u8; 6], op: u16, sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(60);
    frame.extend_from_slice(&eth_dst);
    frame.extend_from_slice(&sha);
    frame.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04]);
    frame.extend_from_slice(&op.to_be_bytes());
    frame.extend_from_slice(&sha);
    frame.extend_from_slice(&spa);
    frame.extend_from_slice(&[0; 6]);
    frame.extend_from_slice(&tpa);
    frame.resize(60, 0);
    frame
}

#[test]
fn arp_goes_to_control() {
    let mut router = Router::new();
    let request = arp_frame(BROADCAST_MAC, 1, HOST_MAC, HOST, LAN_ADDR);
    let (verdict, out) = router.process(&request, LAN);
    assert_eq!(verdict, Verdict::Control(ControlWork::Arp));
    assert_eq!(out, request, "untouched");
    let reply = arp_frame(WAN_MAC, 2, UPSTREAM_MAC, UPSTREAM, WAN_ADDR);
    assert_eq!(
        router.process(&reply, WAN).0,
        Verdict::Control(ControlWork::Arp)
    );
    assert_eq!(router.counters.to_control.get(), 2);
}

#[test]
fn traffic_for_the_gateway_itself() {
    let mut router = Router::new();
    let (verdict, _) = router.process(&echo_request(LAN_ADDR, 32), LAN);
    assert_eq!(verdict, Verdict::Control(ControlWork::LocalIcmp));
    // The other port's address is the gateway's too.
    let (verdict, _) = router.process(&echo_request(WAN_ADDR, 32), LAN);
    assert_eq!(verdict, Verdict::Control(ControlWork::LocalIcmp));
    assert_eq!(router.counters.to_control.get(), 2);

    let mut tcp = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, LAN_ADDR, 64)
        .tcp(40000, 22, 1, 1024)
        .syn()
        .write(&mut tcp, &[])
        .unwrap();
    router.assert_silent_drop(&tcp, LAN, DropReason::LocalDelivery);
    let local_udp = udp(HOST, LAN_ADDR, 64, 8);
    router.assert_silent_drop(&local_udp, LAN, DropReason::LocalDelivery);
}

#[test]
fn frames_that_are_not_plain_ipv4_or_arp() {
    let mut router = Router::new();
    let mut tagged = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .single_vlan(VlanId::try_new(10).unwrap())
        .ipv4(HOST, REMOTE, 64)
        .udp(1, 2)
        .write(&mut tagged, &[0; 8])
        .unwrap();
    router.assert_silent_drop(&tagged, LAN, DropReason::VlanTagged);
    let mut qinq = tagged.clone();
    qinq[12..14].copy_from_slice(&0x88a8u16.to_be_bytes());
    router.assert_silent_drop(&qinq, LAN, DropReason::VlanTagged);
    // A tag cut short (the worker's untagging leaves it in the frame) is counted the same.
    router.assert_silent_drop(&tagged[..16], LAN, DropReason::VlanTagged);

    let mut v6 = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv6(
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0xff; 16],
            64,
        )
        .udp(1, 2)
        .write(&mut v6, &[0; 8])
        .unwrap();
    router.assert_silent_drop(&v6, LAN, DropReason::UnsupportedEthertype);
}

#[test]
fn unicast_to_another_mac_is_not_ours() {
    let mut router = Router::new();
    let mut frame = udp(HOST, REMOTE, 64, 20);
    frame[..6].copy_from_slice(&[0x02, 0x99, 0, 0, 0, 0x01]);
    router.assert_silent_drop(&frame, LAN, DropReason::NotOurMac);
    // The WAN port's MAC, arriving on the LAN port.
    frame[..6].copy_from_slice(&WAN_MAC);
    router.assert_silent_drop(&frame, LAN, DropReason::NotOurMac);
    // A port the config does not have.
    frame[..6].copy_from_slice(&LAN_MAC);
    router.assert_silent_drop(&frame, 7, DropReason::NotOurMac);
}

#[test]
fn truncated_and_malformed_frames() {
    let mut router = Router::new();
    let frame = udp(HOST, REMOTE, 64, 20);
    for len in [0, 1, 13] {
        router.assert_silent_drop(&frame[..len], LAN, DropReason::TruncatedFrame);
    }
    // An Ethernet header with less than an IPv4 header after it.
    for len in [14, 20, 33] {
        router.assert_silent_drop(&frame[..len], LAN, DropReason::MalformedIpv4);
    }
    // The datagram claims more than the frame holds.
    router.assert_silent_drop(&frame[..frame.len() - 1], LAN, DropReason::MalformedIpv4);

    let corrupt = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut bytes = frame.clone();
        f(&mut bytes);
        refill_ip_checksum(&mut bytes);
        bytes
    };
    // Version 6 in an IPv4 EtherType.
    let bad_version = corrupt(&|b| b[ETH_LEN] = 0x65);
    router.assert_silent_drop(&bad_version, LAN, DropReason::MalformedIpv4);
    // IHL below five words.
    let bad_ihl = corrupt(&|b| b[ETH_LEN] = 0x44);
    router.assert_silent_drop(&bad_ihl, LAN, DropReason::MalformedIpv4);
    // IHL past the end of the datagram.
    let long_ihl = corrupt(&|b| b[ETH_LEN] = 0x4f);
    router.assert_silent_drop(&long_ihl, LAN, DropReason::MalformedIpv4);
    // Total length below the header, and past the frame.
    let short_total =
        corrupt(&|b| b[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&19u16.to_be_bytes()));
    router.assert_silent_drop(&short_total, LAN, DropReason::MalformedIpv4);
    let long_total =
        corrupt(&|b| b[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&1500u16.to_be_bytes()));
    router.assert_silent_drop(&long_total, LAN, DropReason::MalformedIpv4);

    let mut bad_checksum = frame.clone();
    bad_checksum[ETH_LEN + 11] ^= 0x40;
    router.assert_silent_drop(&bad_checksum, LAN, DropReason::Ipv4Checksum);
    // Even an expiring one gets no ICMP error: nothing about it can be trusted.
    let mut expiring = udp(HOST, REMOTE, 1, 20);
    expiring[ETH_LEN + 10] ^= 0x01;
    router.assert_silent_drop(&expiring, LAN, DropReason::Ipv4Checksum);
}

#[test]
fn martian_addresses_are_dropped_silently() {
    let martians = [
        [127, 0, 0, 1],
        [224, 0, 0, 1],
        [0, 0, 0, 0],
        [255, 255, 255, 255],
        [192, 168, 10, 255],
        [10, 0, 0, 255],
        [0, 1, 2, 3],
    ];
    let mut router = Router::new();
    for martian in martians {
        // TTL 1, so that anything getting past the check would draw an ICMP error.
        let to = udp(HOST, martian, 1, 20);
        router.assert_silent_drop(&to, LAN, DropReason::MartianAddress);
        let from = udp(martian, REMOTE, 1, 20);
        router.assert_silent_drop(&from, LAN, DropReason::MartianAddress);
    }
}

#[test]
fn point_to_point_peer_is_not_a_broadcast() {
    // On a /31 (RFC 3021) both addresses are hosts; there is no directed broadcast.
    let p2p = Interface {
        mac: EthernetAddress(WAN_MAC),
        addr: Ipv4Addr::new(10, 0, 0, 0),
        prefix_len: 31,
        mtu: 1500,
        virtual_addr: None,
    };
    let to_remote = StaticRoute {
        destination: Ipv4Addr::new(172, 16, 0, 0),
        len: 16,
        via: Ipv4Addr::new(10, 0, 0, 1),
    };
    let config = RouterConfig::new(vec![lan(), p2p], &[to_remote], IcmpLimits::default());
    let counters = Arc::new(WorkerCounters::default());
    let peer_view =
        NeighborView::new([(Ipv4Addr::new(10, 0, 0, 1), EthernetAddress(UPSTREAM_MAC))]);
    let mut pipeline = Pipeline::new(Arc::new(config.unwrap()), Arc::new(peer_view), counters);
    for dst in [[10, 0, 0, 1], REMOTE] {
        let frame = udp(HOST, dst, 64, 20);
        let mut room = [GARBAGE; ROOM];
        room[..frame.len()].copy_from_slice(&frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        assert_eq!(
            pipeline.process(&mut pkt, LAN, 0),
            Verdict::Transmit { port: WAN },
            "to {dst:?}"
        );
    }
}

// --- Control-thread helpers ---------------------------------------------------------------

/// Runs a control helper over `frame` in a garbage-filled room and returns its result and the
/// frame afterwards.
fn with_room<R>(frame: &[u8], f: impl FnOnce(&mut PacketBuf) -> R) -> (R, Vec<u8>) {
    let mut room = [GARBAGE; ROOM];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    let result = f(&mut pkt);
    (result, pkt.bytes().to_vec())
}

fn parse_arp(frame: &[u8]) -> (Ethernet2Header, ArpRepr) {
    let (eth, rest) = Ethernet2Header::from_slice(frame).unwrap();
    assert_eq!(eth.ether_type, EtherType::ARP);
    let repr = ArpRepr::parse(&ArpPacket::new_checked(rest).unwrap()).unwrap();
    (eth, repr)
}

#[test]
fn echo_reply_answers_a_ping() {
    for (request, data_len) in [
        (echo_request(LAN_ADDR, 56), 56),
        (padded(echo_request(LAN_ADDR, 0), 60), 0),
    ] {
        let (answered, reply) = with_room(&request, |pkt| control::echo_reply(pkt, &lan()));
        assert!(answered);
        let (eth, header, message) = parse_ipv4(&reply[..ETH_LEN + 28 + data_len]);
        assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
        assert_eq!((header.source, header.destination), (LAN_ADDR, HOST));
        assert_eq!(header.protocol, IpNumber::ICMP);
        let icmp = parse_icmp(message);
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::EchoReply(IcmpEchoHeader { id: 0x1234, seq: 7 })
        );
        assert_eq!(icmp.payload(), &data(data_len)[..]);
    }
}

#[test]
fn echo_reply_refuses_anything_else() {
    let mut reply = Vec::new();
    PacketBuilder::ethernet2(HOST_MAC, LAN_MAC)
        .ipv4(HOST, LAN_ADDR, 64)
        .icmpv4_echo_reply(1, 1)
        .write(&mut reply, &[0; 8])
        .unwrap();
    let mut bad_ip_checksum = echo_request(LAN_ADDR, 8);
    bad_ip_checksum[ETH_LEN + 10] ^= 0xff;
    let mut fragment = header(HOST, LAN_ADDR, 64);
    fragment.more_fragments = true;
    fragment.dont_fragment = false;
    let fragment = raw_ipv4(
        LAN_MAC,
        fragment,
        IpNumber::ICMP,
        &echo_request(LAN_ADDR, 8)[34..],
    );
    for frame in [
        udp(HOST, LAN_ADDR, 64, 8),
        reply,
        bad_ip_checksum,
        fragment,
        echo_request(LAN_ADDR, 8)[..30].to_vec(),
        echo_request(LAN_ADDR, 8)[..37].to_vec(),
    ] {
        let (answered, after) = with_room(&frame, |pkt| control::echo_reply(pkt, &lan()));
        assert!(!answered);
        assert_eq!(after, frame, "refused before any rewrite");
    }
}

#[test]
fn arp_requests_and_announcements() {
    let target = Ipv4Addr::new(10, 0, 0, 7);
    let (written, frame) = with_room(&[], |pkt| {
        control::write_arp_request(pkt, &wan(1500), target)
    });
    assert!(written);
    assert_eq!(frame.len(), 60);
    let (eth, repr) = parse_arp(&frame);
    assert_eq!((eth.destination, eth.source), (BROADCAST_MAC, WAN_MAC));
    assert_eq!(
        repr,
        ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress(WAN_MAC),
            source_protocol_addr: ip(WAN_ADDR),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        }
    );
    assert_eq!(&frame[14..22], &[0, 1, 8, 0, 6, 4, 0, 1]);
    assert_eq!(&frame[42..], &[0; 18], "padding zeroed over garbage");

    let (written, frame) = with_room(&[], |pkt| {
        control::write_gratuitous_arp(pkt, &lan(), lan().addr)
    });
    assert!(written);
    assert_eq!(frame.len(), 60);
    let (eth, repr) = parse_arp(&frame);
    assert_eq!((eth.destination, eth.source), (BROADCAST_MAC, LAN_MAC));
    assert_eq!(repr.operation, ArpOperation::Request);
    assert_eq!(repr.source_protocol_addr, ip(LAN_ADDR));
    assert_eq!(repr.target_protocol_addr, ip(LAN_ADDR));

    // A room too small for a minimum frame is refused, not overrun.
    let mut small = [0u8; 59];
    assert!(!control::write_arp_request(
        &mut PacketBuf::new(&mut small, 0),
        &lan(),
        target
    ));
}

// --- Arbitrary input ----------------------------------------------------------------------

/// Arbitrary bytes, but usually with an Ethernet and IPv4 header good enough to get past the
/// first checks, so the deeper paths (routing, ICMP errors, ARP handling) see arbitrary input
/// too rather than only the parsers.
fn frame_strategy() -> impl Strategy<Value = Vec<u8>> {
    let dst_mac = prop_oneof![
        3 => Just(LAN_MAC),
        3 => Just(WAN_MAC),
        1 => Just(BROADCAST_MAC),
        1 => any::<[u8; 6]>(),
    ];
    let ethertype = prop_oneof![
        4 => Just(0x0800u16),
        2 => Just(0x0806),
        1 => any::<u16>(),
    ];
    let addr = prop_oneof![
        Just(HOST),
        Just(UPSTREAM),
        Just(REMOTE),
        Just(LAN_ADDR),
        Just([198, 51, 100, 1]),
        Just([10, 0, 0, 7]),
        any::<[u8; 4]>(),
    ];
    let ihl = prop_oneof![3 => Just(5u8), 1 => 0u8..16];
    // How much of the frame the IPv4 total length claims: all, less, or more.
    let total = prop_oneof![3 => Just(0u16), 1 => any::<u16>()];
    // DF, nothing, or anything (fragments, the reserved bit).
    let flags = prop_oneof![Just(0x4000u16), Just(0), any::<u16>()];
    let l3 = (ihl, total, 0u8..4, flags, addr.clone(), addr);
    (
        prop::collection::vec(any::<u8>(), 0..1600),
        prop::option::weighted(0.9, (dst_mac, ethertype)),
        prop::option::weighted(0.8, l3),
    )
        .prop_map(|(mut bytes, l2, l3)| {
            if let (Some((mac, ethertype)), true) = (l2, bytes.len() >= ETH_LEN) {
                bytes[..6].copy_from_slice(&mac);
                bytes[12..14].copy_from_slice(&ethertype.to_be_bytes());
            }
            if bytes.len() < ETH_LEN + 20 {
                return bytes;
            }
            if bytes[12..14] == [0x08, 0x06] {
                bytes[ETH_LEN..ETH_LEN + 6].copy_from_slice(&[0, 1, 8, 0, 6, 4]);
            } else if let Some((ihl, shorten, ttl, flags, src, dst)) = l3 {
                let available = (bytes.len() - ETH_LEN) as u16;
                bytes[ETH_LEN] = 0x40 | ihl;
                let total = available.wrapping_sub(shorten % 64);
                bytes[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&total.to_be_bytes());
                bytes[ETH_LEN + 6..ETH_LEN + 8].copy_from_slice(&flags.to_be_bytes());
                bytes[ETH_LEN + 8] = ttl;
                bytes[ETH_LEN + 12..ETH_LEN + 16].copy_from_slice(&src);
                bytes[ETH_LEN + 16..ETH_LEN + 20].copy_from_slice(&dst);
                refill_ip_checksum(&mut bytes);
            }
            bytes
        })
}

proptest! {
    // 1,024 cases: the fuzz targets (make fuzz, and their smoke in make test) throw far more
    // arbitrary frames at the pipeline; this keeps a quick check beside the unit tests.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn arbitrary_frames_never_panic(
        frame in frame_strategy(),
        ingress in 0u16..2,
        now_ns in any::<u64>(),
        small_mtu in any::<bool>(),
    ) {
        let mut router = Router::with(
            if small_mtu { 576 } else { 1500 },
            IcmpLimits::default(),
        );
        let (verdict, out) = router.process_at(&frame, ingress, now_ns);
        prop_assert!(out.len() <= ROOM);
        // Whatever the pipeline sends itself must be well-formed.
        if let Verdict::Transmit { .. } = verdict {
            let (_, header, _) = parse_ipv4(&out);
            prop_assert!(header.time_to_live > 0);
        }

        for iface in [lan(), wan(1500)] {
            let mut table = NeighborTable::<()>::new(NeighborConfig::default());
            let (_, out) = with_room(&frame, |pkt| {
                control::handle_arp(pkt, (&iface, false), &mut table, now_ns, |_, _| (), |_| ())
            });
            prop_assert!(out.len() <= ROOM);
            let (_, out) = with_room(&frame, |pkt| control::echo_reply(pkt, &iface));
            prop_assert!(out.len() <= ROOM);
        }
    }

    #[test]
    fn arbitrary_frames_in_a_tight_room_never_panic(
        frame in frame_strategy(),
        ingress in 0u16..2,
    ) {
        // An mbuf whose tailroom ends with the frame: an ICMP error cannot grow it.
        let mut router = Router::new();
        let mut room = frame.clone();
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let _ = router.pipeline.process(&mut pkt, ingress, 0);
        prop_assert!(pkt.len() <= frame.len());
    }
}

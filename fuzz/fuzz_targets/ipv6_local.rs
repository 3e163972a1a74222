//! IPv6 for the gateway itself (`pipeline::pipeline::local::ipv6`): what a worker decides
//! (`classify`) and what the control thread answers (`answer`, `write_router_advert`), on
//! frames the input builds (Neighbor and Router Solicitations and Advertisements, echo
//! requests, with options, extension headers, hop limits and checksums right or wrong) or
//! gives raw, in rooms of any size. Underneath: the IPv6 wire views, the extension-header
//! walk, the ND option walk, IPv6 flow keys and the ICMPv6 errors a router sends (within
//! the minimum MTU, to the offending packet's source, with a valid checksum).
//!
//! Checked, besides "no panic" and "nothing written past the room": a reply is a well-formed
//! IPv6 frame from our MAC, whose ICMPv6 checksum verifies, from one of our addresses, and
//! whose ND answers carry hop limit 255 and are believed by the same parser a receiver uses;
//! an advertisement is a valid Router Advertisement from our link-local address with the
//! configured router lifetime; a refusal leaves the frame as it was.
//!
//! The same frames, sent to the gateway's MAC, also go through a worker that forwards IPv6
//! (`pipeline::pipeline::forward6`: the LAN and a WAN with a default route): what it sends
//! on is the packet with its hop limit one lower and nothing else changed, or an ICMPv6
//! error from one of our addresses to the packet's source with a valid checksum, within the
//! minimum MTU.
#![no_main]

use std::cell::RefCell;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use gateway_fuzz::{Bytes, ETH_LEN};
use libfuzzer_sys::fuzz_target;
use pipeline::flow::FlowKey6;
use pipeline::l3::icmpv6_error::{may_answer, write_icmpv6_error, Icmpv6Error};
use pipeline::pipeline::config::{
    Ipv6Interface, PrefixLease, RouterAdvertConfig, Stateful, StaticRoute6,
};
use pipeline::pipeline::local::ipv6::{
    answer, classify, write_mld_report, write_router_advert, Answer,
};
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::wire::icmpv6::msg_type;
use pipeline::wire::ipv6::{self, link_local, next_header, solicited_node, ALL_NODES, ALL_ROUTERS};
use pipeline::wire::ndisc::{NdRepr, Options};
use pipeline::wire::{checksum, EthernetAddress, Icmpv6Packet, Ipv6Packet};
use pipeline::{
    IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig, Verdict,
    WorkerCounters, WorkerSetup,
};

const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 2];
const OURS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, 1);
const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, 2);
const GARBAGE: u8 = 0xa5;
/// Beyond the forwarding worker's default route.
const REMOTE: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, 1);
const WAN_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
const WAN_OURS: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
const UPSTREAM: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);
const UPSTREAM_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 2];

fn iface() -> Interface {
    Interface {
        mac: OUR_MAC,
        addr: Ipv4Addr::new(192, 168, 10, 1),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

fn v6(input: &mut Bytes) -> Ipv6Interface {
    let servers = usize::from(input.u8() % 10);
    Ipv6Interface {
        link_local: link_local(OUR_MAC),
        addresses: vec![
            (OURS, 64),
            (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), input.u8() % 130),
        ],
        advertise: input.bool().then(|| RouterAdvertConfig {
            interval_secs: u32::from(input.u16()),
            dns_servers: vec![HOST; servers],
            router_lifetime_secs: input.u16(),
            leases: vec![PrefixLease {
                prefix: OURS,
                len: 64,
                valid_until_secs: input.bool().then(|| u64::from(input.u32())),
                preferred_until_secs: input.bool().then(|| u64::from(input.u32())),
            }],
        }),
        autoconfigure: false,
    }
}

/// A frame: raw input, or an IPv6 packet to one of our addresses or groups carrying an ND
/// message or echo request built from the input, after optional extension headers.
fn frame(input: &mut Bytes, room: &mut [u8]) -> usize {
    if input.u8() < 30 {
        let raw = input.slice(room.len());
        room[..raw.len()].copy_from_slice(raw);
        return raw.len();
    }
    let src = input.pick(&[
        HOST,
        link_local(EthernetAddress(HOST_MAC)),
        Ipv6Addr::UNSPECIFIED,
        ALL_NODES,
    ]);
    let dst = input.pick(&[
        OURS,
        solicited_node(OURS),
        ALL_ROUTERS,
        ALL_NODES,
        link_local(OUR_MAC),
        HOST,
        REMOTE,
        REMOTE,
    ]);
    // Any type too: errors, redirects, the unassigned.
    let any_kind = input.u8();
    let kind = input.pick(&[
        msg_type::NEIGHBOR_SOLICIT,
        msg_type::NEIGHBOR_ADVERT,
        msg_type::ROUTER_SOLICIT,
        msg_type::ROUTER_ADVERT,
        msg_type::ECHO_REQUEST,
        any_kind,
    ]);
    // Mostly ICMPv6; UDP or TCP (raw headers) for the forwarding worker's flows.
    let upper = input.pick(&[
        next_header::ICMPV6,
        next_header::ICMPV6,
        next_header::UDP,
        next_header::TCP,
    ]);
    let mut message = vec![kind, input.pick(&[0u8, 0, 1]), 0, 0];
    message.extend(input.u32().to_be_bytes());
    if matches!(kind, msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT) {
        let target = input.pick(&[OURS, link_local(OUR_MAC), HOST, ALL_NODES]);
        message.extend(target.octets());
    }
    if kind == msg_type::ROUTER_ADVERT {
        message.extend([0u8; 8]);
    }
    // Options: link-layer addresses, or raw bytes.
    for _ in 0..input.u8() % 4 {
        if input.bool() {
            message.extend([input.pick(&[1u8, 2, 3, 5, 25]), input.pick(&[1u8, 0, 2, 4])]);
            message.extend(HOST_MAC);
        } else {
            message.extend(input.slice(24));
        }
    }
    if upper != next_header::ICMPV6 {
        message = input.slice(60).to_vec();
        message.resize(message.len().max(20), 0);
        if upper == next_header::TCP {
            // A header length the segment holds.
            message[12] = 0x50;
        } else {
            let len = message.len() as u16;
            message[4..6].copy_from_slice(&len.to_be_bytes());
        }
    }
    // Extension headers before the message: none mostly.
    let mut payload = Vec::new();
    let mut first = upper;
    let headers = input.pick(&[0u8, 0, 0, 1, 2, 9]);
    for _ in 0..headers {
        let kind = input.pick(&[
            next_header::DEST_OPTIONS,
            next_header::HOP_BY_HOP,
            next_header::ROUTING,
            next_header::FRAGMENT,
        ]);
        let mut header = vec![first, 0, input.u8(), input.u8(), 0, 0, 0, 0];
        header[2..4].copy_from_slice(&input.u16().to_be_bytes());
        header.extend(&payload);
        payload = header;
        first = kind;
    }
    let headers_len = payload.len();
    payload.extend(&message);
    if input.u8() > 40 {
        // A good checksum, so the message reaches the ND checks (or opens a flow).
        let at = match upper {
            next_header::UDP => 6,
            next_header::TCP => 16,
            _ => 2,
        };
        let message = &mut payload[headers_len..];
        message[at..at + 2].fill(0);
        let sum = checksum::l4_checksum_v6(src, dst, upper, message);
        message[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    }
    let len = ETH_LEN + ipv6::HEADER_LEN + payload.len();
    if len > room.len() {
        return 0;
    }
    room[..6].copy_from_slice(&ipv6::multicast_mac(dst).0);
    room[6..12].copy_from_slice(&HOST_MAC);
    room[12..14].copy_from_slice(&0x86dd_u16.to_be_bytes());
    let ip = &mut room[ETH_LEN..len];
    ip[0] = 0x60;
    let payload_len = if input.u8() < 10 {
        input.u16()
    } else {
        payload.len() as u16
    };
    ip[4..6].copy_from_slice(&payload_len.to_be_bytes());
    ip[6] = first;
    ip[7] = input.pick(&[255u8, 255, 64, 1]);
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    ip[40..].copy_from_slice(&payload);
    len
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let v6 = v6(&mut input);
    let room_len = usize::from(input.u16() % 2048);
    let mut room = vec![GARBAGE; room_len + 64];
    let len = frame(&mut input, &mut room[..room_len]);
    let before = room.clone();

    let _ = classify(&room[..len], &v6);
    if let Ok(ip) = Ipv6Packet::new_checked(&room[ETH_LEN.min(len)..len]) {
        if let Ok(ext) = ipv6::walk_extensions(ip.next_header(), ip.payload()) {
            if let Ok(key) = FlowKey6::from_ipv6(&ip, &ext) {
                assert_eq!((key.src, key.dst), (ip.src_addr(), ip.dst_addr()));
            }
        }
        let _ = Options::new(ip.payload()).count();
        // The error a router would send about it, in a room of the input's choosing.
        let error = input.pick(&[
            Icmpv6Error::HopLimitExceeded,
            Icmpv6Error::NoRoute,
            Icmpv6Error::PacketTooBig { mtu: 1280 },
        ]);
        let _ = may_answer(&room[..len], error);
        let error_room_len = usize::from(input.u16() % 1600);
        let mut error_room = vec![GARBAGE; error_room_len + 64];
        let original = &room[ETH_LEN..len];
        if let Some(error_len) = write_icmpv6_error(
            &mut error_room[..error_room_len],
            original,
            error,
            OURS,
            OUR_MAC,
            EthernetAddress(HOST_MAC),
        ) {
            assert!(
                error_len <= ETH_LEN + ipv6::MIN_MTU,
                "an error past the minimum MTU"
            );
            let sent =
                Ipv6Packet::new_checked(&error_room[ETH_LEN..error_len]).expect("error is IPv6");
            assert_eq!(sent.dst_addr(), ip.src_addr());
            let start = ETH_LEN + ipv6::HEADER_LEN;
            let message = Icmpv6Packet::new_checked(&error_room[start..error_len]).expect("ICMPv6");
            assert!(message.verify_checksum(OURS, ip.src_addr()));
        }
        assert!(
            error_room[error_room_len..].iter().all(|&b| b == GARBAGE),
            "error wrote past the room"
        );
    }

    forward(&mut input, &room[..len]);

    let mut pkt = PacketBuf::new(&mut room[..room_len], len);
    let (answered, sighting) = answer(&mut pkt, &iface(), &v6);
    if let Some(sighting) = sighting {
        // Only neighbours on the link, never one of our own addresses, never from `::`.
        assert!(
            v6.on_link(sighting.ip) && !v6.owns(sighting.ip),
            "{sighting:?}"
        );
        assert!(!sighting.ip.is_unspecified() && !sighting.ip.is_multicast());
    }
    let out_len = pkt.len();
    assert!(
        room[room_len..].iter().all(|&b| b == GARBAGE),
        "wrote past the room"
    );
    match answered {
        Answer::Reply => check_reply(&room[..out_len], &v6),
        Answer::RouterSolicited { to, mac } => {
            assert!(v6.advertise.is_some());
            let advert = v6.advertise.as_ref().unwrap();
            let mut out = vec![GARBAGE; room_len + 64];
            if let Some(len) = write_router_advert(
                &mut out[..room_len],
                &iface(),
                &v6,
                advert,
                (&[], 1_000),
                to,
                mac,
            ) {
                check_advert(&out[..len], &v6, advert.router_lifetime_secs);
            }
            assert!(
                out[room_len..].iter().all(|&b| b == GARBAGE),
                "advert wrote past the room"
            );
        }
        Answer::MldQuery => {
            assert_eq!(room[..len], before[..len], "a query's frame changed");
            let mut out = vec![GARBAGE; room_len + 64];
            if let Some(len) = write_mld_report(&mut out[..room_len], &iface(), &v6, 2) {
                let ip = Ipv6Packet::new_checked(&out[ETH_LEN..len]).expect("report is IPv6");
                assert_eq!((ip.src_addr(), ip.hop_limit()), (v6.link_local, 1));
            }
            assert!(
                out[room_len..].iter().all(|&b| b == GARBAGE),
                "report wrote past the room"
            );
        }
        Answer::Drop(_) | Answer::Learn => {
            assert_eq!(room[..len], before[..len], "a refusal changed the frame")
        }
    }
});

fn parts(frame: &[u8]) -> (Ipv6Packet<&[u8]>, Icmpv6Packet<&[u8]>) {
    assert_eq!(frame[6..12], OUR_MAC.0, "not from our MAC");
    assert_eq!(frame[12..14], [0x86, 0xdd]);
    let ip = Ipv6Packet::new_checked(&frame[ETH_LEN..]).expect("reply is not IPv6");
    assert_eq!(ip.next_header(), next_header::ICMPV6);
    let start = ETH_LEN + ipv6::HEADER_LEN;
    let payload = &frame[start..start + usize::from(ip.payload_len())];
    let icmp = Icmpv6Packet::new_checked(payload).expect("reply has no ICMPv6 header");
    assert!(
        icmp.verify_checksum(ip.src_addr(), ip.dst_addr()),
        "reply checksum"
    );
    (ip, icmp)
}

fn check_reply(frame: &[u8], v6: &Ipv6Interface) {
    let (ip, icmp) = parts(frame);
    assert!(
        v6.owns(ip.src_addr()),
        "reply from {} which is not ours",
        ip.src_addr()
    );
    match icmp.msg_type() {
        msg_type::ECHO_REPLY => assert_eq!(ip.hop_limit(), 64),
        msg_type::NEIGHBOR_ADVERT => {
            assert_eq!(ip.hop_limit(), 255);
            let parsed = NdRepr::parse(&icmp, ip.hop_limit(), ip.src_addr(), ip.dst_addr());
            assert!(
                matches!(parsed, Ok(NdRepr::NeighborAdvert { target, target_mac: Some(OUR_MAC), .. }) if v6.owns(target)),
                "{parsed:?}"
            );
        }
        other => panic!("replied with ICMPv6 type {other}"),
    }
}

fn check_advert(frame: &[u8], v6: &Ipv6Interface, lifetime: u16) {
    let (ip, icmp) = parts(frame);
    assert_eq!(ip.src_addr(), v6.link_local);
    let parsed = NdRepr::parse(&icmp, ip.hop_limit(), ip.src_addr(), ip.dst_addr());
    assert!(
        matches!(
            parsed,
            Ok(NdRepr::RouterAdvert {
                router_lifetime_secs,
                ..
            }) if router_lifetime_secs == lifetime
        ),
        "{parsed:?}"
    );
}

thread_local! {
    /// The forwarding worker and its clock, kept across inputs as a worker keeps its flows.
    static FORWARDER: RefCell<Option<(Pipeline, u64)>> = const { RefCell::new(None) };
}

/// A worker forwarding IPv6 between the LAN (`OURS`/64, port 0) and a WAN (`WAN_OURS`/64,
/// MTU 1280, default route via `UPSTREAM`, port 1): the LAN's flows out accepted, the rest
/// dropped, a flow table small enough to fill.
fn forwarder() -> Pipeline {
    let interfaces = vec![
        iface(),
        Interface {
            mac: WAN_MAC,
            addr: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 24,
            mtu: 1280,
            virtual_addr: None,
        },
    ];
    let policy = Policy::new(Action::Drop).set(ZoneId(0), ZoneId(1), Action::Accept);
    // The WAN's routers configure it (their RAs and DHCPv6 answers are for its twin).
    let side = |mac, addr, autoconfigure| {
        Some(Ipv6Interface {
            link_local: link_local(mac),
            addresses: vec![(addr, 64)],
            advertise: None,
            autoconfigure,
        })
    };
    let router = RouterConfig::new(interfaces, &[], IcmpLimits::default())
        .expect("the forwarding config builds")
        .with_stateful(Stateful {
            content: None,
            zones: vec![ZoneId(0), ZoneId(1)],
            masquerade: vec![false, false],
            firewall: RuleSet::compile(Vec::new(), policy).expect("the policy compiles"),
            port_mappings: Default::default(),
            port_forwards: Vec::new(),
            recheck_established: false,
            generation: 0,
        })
        .expect("the stateful config fits")
        .with_ipv6(
            vec![side(OUR_MAC, OURS, false), side(WAN_MAC, WAN_OURS, true)],
            &[StaticRoute6 {
                destination: Ipv6Addr::UNSPECIFIED,
                len: 0,
                via: UPSTREAM,
                port: 1,
            }],
        )
        .expect("the IPv6 config fits");
    let neighbors = NeighborView::new([]).with_ipv6([
        (HOST, EthernetAddress(HOST_MAC)),
        (UPSTREAM, EthernetAddress(UPSTREAM_MAC)),
    ]);
    let setup = WorkerSetup {
        conntrack: ConntrackConfig {
            capacity: 64,
            half_open: 16,
            ..ConntrackConfig::default()
        },
        ..WorkerSetup::default()
    };
    Pipeline::for_worker(
        Arc::new(router),
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
        setup,
    )
    .expect("the forwarding worker builds")
}

/// `frame` through the forwarding worker, on the LAN or the WAN (to our MAC there, in half
/// the inputs): what it sends is the packet one hop on, or an ICMPv6 error about it.
fn forward(input: &mut Bytes, frame: &[u8]) {
    if frame.len() < ETH_LEN {
        return;
    }
    let ingress = input.pick(&[0u16, 0, 1]);
    let capacity = frame.len().max(usize::from(input.u16() % 2048));
    let mut room = vec![GARBAGE; capacity + 64];
    room[..frame.len()].copy_from_slice(frame);
    if input.bool() {
        room[..6].copy_from_slice(&if ingress == 0 { OUR_MAC } else { WAN_MAC }.0);
    }
    let received = room[..frame.len()].to_vec();
    let step = u64::from(input.u16()) * 1_000_000;
    FORWARDER.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (pipeline, now_ns) = cell.get_or_insert_with(|| (forwarder(), 0));
        *now_ns += step;
        let mut pkt = PacketBuf::new(&mut room[..capacity], frame.len());
        let verdict = pipeline.process(&mut pkt, ingress, *now_ns);
        pipeline.housekeeping(*now_ns, 4);
        let out_len = pkt.len();
        assert!(
            room[capacity..].iter().all(|&b| b == GARBAGE),
            "forwarding wrote past the room"
        );
        if let Verdict::Transmit { port } = verdict {
            check_forwarded(&received, &room[..out_len], port);
        }
    });
}

fn check_forwarded(received: &[u8], sent: &[u8], port: u16) {
    let ip = Ipv6Packet::new_checked(&sent[ETH_LEN..]).expect("what leaves is IPv6");
    let original = Ipv6Packet::new_checked(&received[ETH_LEN..]).expect("it came in as IPv6");
    let ours = [OURS, WAN_OURS];
    let is_error = ours.contains(&ip.src_addr())
        && ip.next_header() == next_header::ICMPV6
        && ip.payload().first().is_some_and(|&kind| kind < 128);
    if is_error {
        assert!(
            sent.len() <= ETH_LEN + ipv6::MIN_MTU,
            "an error past the minimum MTU"
        );
        assert_eq!(
            ip.dst_addr(),
            original.src_addr(),
            "an error to another than the sender"
        );
        let message = Icmpv6Packet::new_checked(ip.payload()).expect("the error is ICMPv6");
        assert!(message.verify_checksum(ip.src_addr(), ip.dst_addr()));
        return;
    }
    let egress_mac = [OUR_MAC, WAN_MAC][usize::from(port)];
    assert_eq!(&sent[6..12], &egress_mac.0, "sent from another MAC");
    assert_eq!(ip.hop_limit(), original.hop_limit() - 1, "hop limit");
    let packet_len = ipv6::HEADER_LEN + usize::from(original.payload_len());
    assert_eq!(sent.len(), ETH_LEN + packet_len, "trimmed to the packet");
    assert_eq!(
        sent[ETH_LEN + 8..],
        received[ETH_LEN + 8..ETH_LEN + packet_len],
        "forwarded with other addresses or payload"
    );
    assert_eq!(sent[ETH_LEN..ETH_LEN + 7], received[ETH_LEN..ETH_LEN + 7]);
}

//! The frames the control thread and the fragmenter write: ARP answers and requests
//! (`control::handle_arp`, `write_arp_request`, `write_gratuitous_arp`), echo replies
//! (`control::echo_reply`) and IPv4 fragments (`fragment::fragment_count`,
//! `write_fragment`), on frames the input builds (near-valid ARP, echo requests and datagrams
//! with IP options) or gives raw, in rooms of any size.
//!
//! Checked, besides "no panic" and "nothing written past the room": an ARP reply answers the
//! request it was made from, from our MAC and address, and a refusal leaves the frame alone;
//! an echo reply swaps the addresses and keeps every checksum valid; the fragments of a
//! datagram each fit the MTU, carry valid headers with the right offsets and flags, only
//! copied options after the first, and reassemble to the original payload.
#![no_main]

use std::net::Ipv4Addr;

use gateway_fuzz::{checksum, ip_header_len, write_frame, Bytes, Ip, ETH_LEN, ICMP, L4};
use libfuzzer_sys::fuzz_target;
use pipeline::l3::fragment::{fragment_count, write_fragment};
use pipeline::l3::neigh::{NeighborConfig, NeighborTable};
use pipeline::pipeline::local::arp::{
    echo_reply, handle_arp, write_arp_request, write_gratuitous_arp,
};
use pipeline::wire::EthernetAddress;
use pipeline::{Interface, PacketBuf};

const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const OUR_ADDR: [u8; 4] = [192, 168, 10, 1];
/// The interface's virtual address (an HA pair's), answered only while held.
const VIRTUAL: [u8; 4] = [192, 168, 10, 254];
const GARBAGE: u8 = 0xa5;

fn iface() -> Interface {
    Interface {
        mac: EthernetAddress(OUR_MAC),
        addr: Ipv4Addr::from(OUR_ADDR),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: Some(Ipv4Addr::from(VIRTUAL)),
    }
}

fn word(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn arp(input: &mut Bytes, room: &mut [u8]) -> usize {
    if input.u8() < 40 {
        let raw = input.slice(room.len());
        room[..raw.len()].copy_from_slice(raw);
        return raw.len();
    }
    let sender_mac = input.pick(&[
        [0x02, 0xaa, 0, 0, 0, 2],
        [0xff; 6],
        [0x01, 0, 0x5e, 0, 0, 1],
        [0; 6],
    ]);
    let sender_ip = input.pick(&[
        [192, 168, 10, 2],
        [0, 0, 0, 0],
        [10, 0, 0, 2],
        OUR_ADDR,
        VIRTUAL,
    ]);
    let target_ip = input.pick(&[
        OUR_ADDR,
        OUR_ADDR,
        [192, 168, 10, 7],
        [10, 0, 0, 1],
        VIRTUAL,
    ]);
    let op = input.pick(&[1u16, 1, 2, 3, 0]);
    let mut frame = [0u8; 60];
    frame[0..6].copy_from_slice(&input.pick(&[[0xff; 6], OUR_MAC]));
    frame[6..12].copy_from_slice(&sender_mac);
    frame[12..14].copy_from_slice(&[0x08, 0x06]);
    let arp = &mut frame[14..42];
    arp[0..2].copy_from_slice(&input.pick(&[1u16, 1, 1, 6]).to_be_bytes());
    arp[2..4].copy_from_slice(&input.pick(&[0x0800u16, 0x0800, 0x86dd]).to_be_bytes());
    arp[4] = input.pick(&[6, 6, 6, 8]);
    arp[5] = input.pick(&[4, 4, 4, 16]);
    arp[6..8].copy_from_slice(&op.to_be_bytes());
    arp[8..14].copy_from_slice(&sender_mac);
    arp[14..18].copy_from_slice(&sender_ip);
    arp[24..28].copy_from_slice(&target_ip);
    let len = input.pick(&[60usize, 42, 41, 28, 14, 100]).min(room.len());
    room[..len.min(60)].copy_from_slice(&frame[..len.min(60)]);
    len
}

fn check_arp(input: &mut Bytes) {
    let mut room = [GARBAGE; 128];
    let room_len = input.pick(&[128usize, 60, 59, 42, 20]);
    let room = &mut room[..room_len];
    let len = arp(input, room);
    let before = room.to_vec();
    let mut pkt = PacketBuf::new(room, len);
    let mut table: NeighborTable<()> = NeighborTable::new(NeighborConfig {
        capacity: 8,
        ..NeighborConfig::default()
    });
    let holds_virtual = input.bool();
    let outcome = handle_arp(
        &mut pkt,
        (&iface(), holds_virtual),
        &mut table,
        0,
        |_, _| {},
        |_| {},
    );
    let after_len = pkt.len();
    // Whatever was learnt is a unicast host on our own subnet.
    for (ip, mac, _) in table.iter() {
        assert!(
            !ip.is_unspecified() && mac[0] & 1 == 0 && iface().contains(ip),
            "learnt {ip} at {mac:?}"
        );
    }
    match outcome {
        outcome if outcome.replied => {
            let frame = &room[..after_len];
            assert_eq!(after_len, 60, "an ARP reply is a minimum-size frame");
            assert_eq!(&frame[6..12], &OUR_MAC);
            assert_eq!(&frame[12..14], &[0x08, 0x06]);
            assert_eq!(word(frame, 20), 2, "a reply");
            assert_eq!(&frame[22..28], &OUR_MAC);
            // From the address asked for: ours, or the virtual one while held.
            assert_eq!(&frame[28..32], &before[38..42]);
            // To the requester, about the requester.
            assert_eq!(&frame[0..6], &before[22..28]);
            assert_eq!(&frame[32..38], &before[22..28]);
            assert_eq!(&frame[38..42], &before[28..32]);
            assert_eq!(
                word(&before, 20),
                1,
                "replied to something that is not a request"
            );
            assert!(
                before[38..42] == OUR_ADDR || (holds_virtual && before[38..42] == VIRTUAL),
                "replied to a request for another address (virtual held: {holds_virtual})"
            );
            assert_eq!(table.len(), 1, "a request for us is learnt");
        }
        _ => assert_eq!(&room[..], &before[..], "an unanswered ARP was changed"),
    }

    let mut room = [GARBAGE; 100];
    let room_len = usize::from(input.u8()) % 101;
    let target = Ipv4Addr::from(input.u32());
    let mut pkt = PacketBuf::new(&mut room[..room_len], 0);
    let written = if input.bool() {
        write_arp_request(&mut pkt, &iface(), target)
    } else {
        write_gratuitous_arp(&mut pkt, &iface(), Ipv4Addr::from(OUR_ADDR))
    };
    assert_eq!(
        written,
        room_len >= 60,
        "ARP request in a room of {room_len}"
    );
    assert!(
        room[room_len..].iter().all(|&b| b == GARBAGE),
        "wrote past the room"
    );
    if written {
        assert_eq!(&room[0..6], &[0xff; 6]);
        assert_eq!(word(&room, 20), 1);
        assert_eq!(&room[22..28], &OUR_MAC);
        assert_eq!(&room[28..32], &OUR_ADDR);
    }
}

fn check_echo(input: &mut Bytes) {
    let mut room = [GARBAGE; 1600];
    let len = if input.u8() < 40 {
        let raw = input.slice(room.len());
        room[..raw.len()].copy_from_slice(raw);
        raw.len()
    } else {
        let mut ip = Ip::new(Ipv4Addr::from(input.u32()), Ipv4Addr::from(OUR_ADDR), ICMP);
        ip.ttl = input.u8();
        let frag = input.u8();
        ip.more_frags = frag == 1;
        ip.frag_offset = if frag == 2 { 8 } else { 0 };
        let l4 = L4 {
            icmp_type: input.pick(&[8, 8, 8, 0, 13]),
            icmp_code: input.pick(&[0, 0, 0, 1]),
            icmp_rest: input.u32(),
            ..L4::default()
        };
        let payload = input.slice(1400);
        write_frame(
            &mut room,
            (OUR_MAC, [0x02, 0xaa, 0, 0, 0, 2]),
            &ip,
            &l4,
            payload,
        )
    };
    if input.u8() == 0xff && len > 30 {
        let at = usize::from(input.u16()) % len;
        room[at] ^= input.u8() | 1;
    }
    let before = room;
    let mut pkt = PacketBuf::new(&mut room, len);
    let replied = echo_reply(&mut pkt, &iface());
    assert_eq!(pkt.len(), len, "an echo reply has the request's length");
    if !replied {
        return;
    }
    let frame = &room[..len];
    let header_len = ip_header_len(&frame[ETH_LEN..]).expect("replied to a bad IP header");
    let ip = &frame[ETH_LEN..];
    assert_eq!(checksum(&ip[..header_len], 0), 0, "echo reply IP checksum");
    assert_eq!(
        &ip[12..16],
        &before[ETH_LEN + 16..ETH_LEN + 20],
        "source is the request's destination"
    );
    assert_eq!(
        &ip[16..20],
        &before[ETH_LEN + 12..ETH_LEN + 16],
        "destination is the requester"
    );
    assert_eq!(&frame[0..6], &before[6..12], "to the requester's MAC");
    assert_eq!(&frame[6..12], &OUR_MAC);
    let total = usize::from(word(ip, 2));
    let icmp = &ip[header_len..total.min(ip.len())];
    assert_eq!(icmp[0], 0, "an echo reply");
    let request_icmp = &before[ETH_LEN + header_len..ETH_LEN + total.min(ip.len())];
    if checksum(request_icmp, 0) == 0 {
        assert_eq!(checksum(icmp, 0), 0, "echo reply ICMP checksum");
    }
    assert_eq!(
        &icmp[4..],
        &request_icmp[4..],
        "the reply echoes the request"
    );
}

fn check_fragments(input: &mut Bytes) {
    let mut frame = [GARBAGE; 2048];
    let len = if input.u8() < 30 {
        let raw = input.slice(frame.len());
        frame[..raw.len()].copy_from_slice(raw);
        raw.len()
    } else {
        let mut ip = Ip::new(
            Ipv4Addr::from(input.u32()),
            Ipv4Addr::from(input.u32()),
            input.pick(&[17, 6, 1, 47]),
        );
        let flags = input.u8();
        ip.dont_frag = flags & 1 != 0 && flags & 0xf0 == 0;
        ip.more_frags = flags & 2 != 0;
        ip.frag_offset = if flags & 4 != 0 {
            input.u16() & 0x1fff
        } else {
            0
        };
        let l4 = L4 {
            src_port: input.u16(),
            dst_port: input.u16(),
            ..L4::default()
        };
        let payload = input.slice(1900);
        let mut built = [0u8; 2048];
        let len = write_frame(
            &mut built,
            ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]),
            &ip,
            &l4,
            payload,
        );
        if len == 0 {
            return;
        }
        // IP options, copied (top bit) or not, shifting the payload.
        let options: &[u8] = input.pick(&[
            b"".as_slice(),
            &[0x94, 0x04, 0, 0],             // router alert: copied
            &[0x07, 0x07, 4, 0, 0, 0, 0, 1], // record route: not copied, then EOL
            &[
                0x01, 0x82, 0x0b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0x01, 0x00, 0, 0,
            ], // NOP, copied, NOP, EOL
            &[0x44, 0x02, 0x01, 0x00],       // bad length
        ]);
        let options_len = options.len();
        frame[..ETH_LEN + 20].copy_from_slice(&built[..ETH_LEN + 20]);
        frame[ETH_LEN + 20..ETH_LEN + 20 + options_len].copy_from_slice(options);
        frame[ETH_LEN + 20 + options_len..len + options_len]
            .copy_from_slice(&built[ETH_LEN + 20..len]);
        let ip_bytes = &mut frame[ETH_LEN..];
        ip_bytes[0] = 0x45 + (options_len / 4) as u8;
        let total = (len - ETH_LEN + options_len) as u16;
        ip_bytes[2..4].copy_from_slice(&total.to_be_bytes());
        ip_bytes[10..12].fill(0);
        let sum = checksum(&ip_bytes[..20 + options_len], 0);
        ip_bytes[10..12].copy_from_slice(&sum.to_be_bytes());
        len + options_len
    };
    let frame = &frame[..len];
    let mtu = input
        .pick(&[1500u16, 1400, 576, 68, 28, 27, 0, 9000, 1280])
        .saturating_add(u16::from(input.u8() % 8));
    let count = fragment_count(frame, mtu);
    let mut out = [GARBAGE; 2048];
    let out_len = input.pick(&[2048usize, 1514, 600, 60]);
    if count == 0 {
        assert!(write_fragment(frame, mtu, 0, &mut out[..out_len]).is_none());
        return;
    }
    assert!(count <= 8192, "{count} fragments");
    let ip = &frame[ETH_LEN..];
    let header_len = ip_header_len(ip).expect("fragmented a bad header");
    let total = usize::from(word(ip, 2));
    let payload = &ip[header_len..total];
    let original_offset = usize::from(word(ip, 6) & 0x1fff) * 8;
    let original_mf = word(ip, 6) & 0x2000 != 0;
    let mut reassembled = vec![0u8; payload.len()];
    let mut covered = 0usize;
    for index in 0..count {
        out.fill(GARBAGE);
        let Some(written) = write_fragment(frame, mtu, index, &mut out[..out_len]) else {
            // Only a room too small may refuse.
            assert!(out_len < 2048, "fragment {index} of {count} refused");
            return;
        };
        assert!(written <= out_len);
        assert!(
            out[written..].iter().all(|&b| b == GARBAGE),
            "wrote past the fragment"
        );
        let f = &out[ETH_LEN..written];
        assert_eq!(&out[..ETH_LEN], &frame[..ETH_LEN], "Ethernet header kept");
        let f_header = ip_header_len(f).expect("fragment header");
        assert_eq!(checksum(&f[..f_header], 0), 0, "fragment IP checksum");
        let f_total = usize::from(word(f, 2));
        assert_eq!(f_total, f.len(), "fragment total length");
        if count > 1 {
            assert!(f_total <= usize::from(mtu), "fragment over the MTU");
        }
        assert_eq!(&f[4..6], &ip[4..6], "fragment identification");
        assert_eq!(&f[12..20], &ip[12..20], "fragment addresses");
        assert_eq!(f[9], ip[9], "fragment protocol");
        let flags = word(f, 6);
        assert!(flags & 0x4000 == 0 || count == 1, "DF on a fragment");
        let offset = usize::from(flags & 0x1fff) * 8;
        let last = index + 1 == count;
        assert_eq!(
            flags & 0x2000 != 0,
            !last || original_mf,
            "MF of fragment {index}"
        );
        let start = offset - original_offset;
        assert_eq!(
            start, covered,
            "fragment {index} does not follow the previous one"
        );
        let data = &f[f_header..];
        assert!(
            last || data.len() % 8 == 0,
            "a middle fragment's payload is not a multiple of 8"
        );
        reassembled[start..start + data.len()].copy_from_slice(data);
        covered += data.len();
        if index == 0 {
            assert_eq!(
                &f[20..f_header],
                &ip[20..header_len],
                "the first fragment keeps all options"
            );
        } else {
            // Only copied options (and NOP/EOL padding) after the first.
            let mut options = &f[20..f_header];
            while let Some(&kind) = options.first() {
                match kind {
                    0 => break,
                    1 => options = &options[1..],
                    _ => {
                        assert!(kind & 0x80 != 0, "option {kind:#x} is not copied");
                        let len = usize::from(options[1]).max(2);
                        options = &options[len.min(options.len())..];
                    }
                }
            }
        }
    }
    assert_eq!(
        covered,
        payload.len(),
        "the fragments do not cover the payload"
    );
    assert_eq!(
        reassembled, payload,
        "the fragments do not reassemble to the original"
    );
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    match input.u8() % 3 {
        0 => check_arp(&mut input),
        1 => check_echo(&mut input),
        _ => check_fragments(&mut input),
    }
});

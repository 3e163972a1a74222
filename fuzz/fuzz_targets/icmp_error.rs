//! ICMP error translation (RFC 5508) on its own: `nat::quoted_flow_key` and
//! `nat::rewrite_icmp_error` on an ICMP error the input builds (outer header, type, a quoted
//! TCP, UDP, ICMP or other datagram cut at any length, IP options on either header) or gives
//! raw, with any of the four rewrites chosen.
//!
//! Checked: nothing panics; `quoted_flow_key` agrees with an independent parse of the quote;
//! after a rewrite every checksum that held before still holds (outer IP header, ICMP message,
//! quoted IP header, and the quoted TCP/UDP/ICMP checksum when the whole datagram is quoted),
//! the quote's key and the outer addresses are what was asked, nothing else changed, and
//! rewriting back restores the original fields.
#![no_main]

use std::net::Ipv4Addr;

use gateway_fuzz::{
    checksum, ip_header_len, pseudo_header, tuple, write_frame, Bytes, Ip, Tuple, ETH_LEN, ICMP,
    L4, TCP, UDP,
};
use libfuzzer_sys::fuzz_target;
use pipeline::state::nat::{quoted_flow_key, rewrite_icmp_error};

const ADDRS: [[u8; 4]; 6] = [
    [10, 0, 0, 1],
    [192, 168, 10, 2],
    [203, 0, 113, 5],
    [198, 51, 100, 9],
    [0, 0, 0, 0],
    [255, 255, 255, 255],
];

fn addr(input: &mut Bytes) -> Ipv4Addr {
    match input.u8() {
        n if usize::from(n) < ADDRS.len() * 40 => {
            Ipv4Addr::from(ADDRS[usize::from(n) % ADDRS.len()])
        }
        _ => Ipv4Addr::from(input.u32()),
    }
}

/// Builds the ICMP error into `out` (IP datagram, no Ethernet header); returns its length.
fn build(input: &mut Bytes, out: &mut [u8; 1600]) -> usize {
    let mut frame = [0u8; 1700];
    if input.u8() < 24 {
        // Raw: whatever the input says.
        let raw = input.slice(out.len());
        out[..raw.len()].copy_from_slice(raw);
        return raw.len();
    }
    // The quoted datagram, as the erroring host received it.
    let protocol = input.pick(&[TCP, UDP, ICMP, 47, TCP, UDP]);
    let mut inner = Ip::new(addr(input), addr(input), protocol);
    let frag = input.u8();
    inner.more_frags = frag & 1 != 0;
    inner.frag_offset = if frag & 6 == 6 {
        u16::from(frag >> 3)
    } else {
        0
    };
    let l4 = L4 {
        src_port: input.u16(),
        dst_port: input.u16(),
        seq: input.u32(),
        ack: input.u32(),
        flags: input.u8(),
        window: input.u16(),
        icmp_type: input.pick(&[8, 0, 13, 3, 11, 5]),
        icmp_code: 0,
        icmp_rest: input.u32(),
        window_scale: None,
        mss: None,
    };
    let payload = input.slice(1200);
    let inner_len = write_frame(&mut frame, ([0; 6], [0; 6]), &inner, &l4, payload) - ETH_LEN;
    let mut quoted = [0u8; 1300];
    let mut quoted_len = inner_len;
    quoted[..inner_len].copy_from_slice(&frame[ETH_LEN..ETH_LEN + inner_len]);
    // IP options on the quoted header (shifting the transport header), sometimes.
    let options = usize::from(input.u8() % 4) * 4;
    if options > 0 && input.bool() {
        quoted.copy_within(20..inner_len, 20 + options);
        for byte in &mut quoted[20..20 + options] {
            *byte = 1; // NOP
        }
        quoted[0] = 0x45 + (options / 4) as u8;
        let total = (inner_len + options) as u16;
        quoted[2..4].copy_from_slice(&total.to_be_bytes());
        quoted[10..12].fill(0);
        let sum = checksum(&quoted[..20 + options], 0);
        quoted[10..12].copy_from_slice(&sum.to_be_bytes());
        quoted_len += options;
    }
    // Cut the quote: RFC 792's 8 bytes, less, or all of it.
    let cut = match input.u8() {
        0..=99 => 28 + options,
        100..=179 => quoted_len,
        n => usize::from(n - 180) + 20,
    };
    let quoted_len = quoted_len.min(cut);
    if input.u8() == 0xff {
        // A corrupt quoted header checksum.
        quoted[11] ^= 0x40;
    }
    let outer = Ip::new(addr(input), addr(input), ICMP);
    let error = L4 {
        icmp_type: input.pick(&[3, 11, 3, 12, 4, 5, 8]),
        icmp_code: input.u8() % 16,
        icmp_rest: u32::from(input.u16()),
        ..L4::default()
    };
    let len = write_frame(
        &mut frame,
        ([0; 6], [0; 6]),
        &outer,
        &error,
        &quoted[..quoted_len],
    );
    out[..len - ETH_LEN].copy_from_slice(&frame[ETH_LEN..len]);
    len - ETH_LEN
}

fn word(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

/// The checksums a datagram carries that can be verified from its bytes: outer IP header,
/// ICMP message, quoted IP header, and the quoted transport checksum when the quote is the
/// whole datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Checksums {
    outer: bool,
    icmp: bool,
    quoted_ip: Option<bool>,
    quoted_l4: Option<bool>,
}

fn checksums(ip: &[u8]) -> Option<Checksums> {
    let outer_len = ip_header_len(ip)?;
    let total = usize::from(word(ip, 2));
    if total != ip.len() || ip[9] != ICMP || ip.len() < outer_len + 8 {
        return None;
    }
    let icmp = &ip[outer_len..];
    let quote = &icmp[8..];
    let quoted_len = ip_header_len(quote);
    let quoted_l4 = quoted_len.and_then(|len| {
        let whole = usize::from(word(quote, 2)) == quote.len();
        let unfragmented = word(quote, 6) & 0x3fff == 0;
        if !whole || !unfragmented {
            return None;
        }
        let (src, dst) = (
            Ipv4Addr::from(<[u8; 4]>::try_from(&quote[12..16]).ok()?),
            Ipv4Addr::from(<[u8; 4]>::try_from(&quote[16..20]).ok()?),
        );
        let l4 = &quote[len..];
        match quote[9] {
            TCP if l4.len() >= 20 => {
                Some(checksum(l4, pseudo_header(src, dst, TCP, l4.len())) == 0)
            }
            UDP if l4.len() >= 8 && word(l4, 6) != 0 => {
                Some(checksum(l4, pseudo_header(src, dst, UDP, l4.len())) == 0)
            }
            ICMP if l4.len() >= 8 => Some(checksum(l4, 0) == 0),
            _ => None,
        }
    });
    Some(Checksums {
        outer: checksum(&ip[..outer_len], 0) == 0,
        icmp: checksum(icmp, 0) == 0,
        quoted_ip: quoted_len.map(|len| checksum(&quote[..len], 0) == 0),
        quoted_l4,
    })
}

/// A checksum that held must still hold; one that did not may stay broken.
fn still_valid(before: Checksums, after: Checksums) {
    assert!(!before.outer || after.outer, "outer IP checksum broken");
    assert!(!before.icmp || after.icmp, "ICMP checksum broken");
    assert!(
        before.quoted_ip != Some(true) || after.quoted_ip == Some(true),
        "quoted IP checksum broken"
    );
    assert!(
        before.quoted_l4 != Some(true) || after.quoted_l4 == Some(true),
        "quoted transport checksum broken"
    );
}

/// The bytes a rewrite may touch: outer addresses and checksum, the ICMP checksum, and in the
/// quote its addresses, header checksum, ports (or identifier) and transport checksum.
fn mutable_offsets(ip: &[u8]) -> Vec<usize> {
    let mut offsets = vec![10, 11, 12, 13, 14, 15, 16, 17, 18, 19];
    let Some(outer_len) = ip_header_len(ip) else {
        return offsets;
    };
    offsets.extend([outer_len + 2, outer_len + 3]);
    let quote_at = outer_len + 8;
    offsets.extend((10..20).map(|o| quote_at + o));
    if let Some(inner_len) = ip.get(quote_at..).and_then(ip_header_len) {
        let l4 = quote_at + inner_len;
        match ip[quote_at + 9] {
            TCP => offsets.extend([0, 1, 2, 3, 16, 17].map(|o| l4 + o)),
            UDP => offsets.extend([0, 1, 2, 3, 6, 7].map(|o| l4 + o)),
            ICMP => offsets.extend([2, 3, 4, 5].map(|o| l4 + o)),
            _ => {}
        }
    }
    offsets
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let mut buf = [0u8; 1600];
    let len = build(&mut input, &mut buf);
    let original = buf;
    let ip = &mut buf[..len];

    let key = quoted_flow_key(ip);
    if let Some(key) = key {
        // An independent reading of the quote must agree.
        let outer_len = ip_header_len(ip).expect("a key needs an outer header");
        if let Some(t) = tuple(&ip[outer_len + 8..]) {
            let mine = Tuple {
                src: key.src,
                dst: key.dst,
                protocol: key.protocol,
                src_port: key.src_port,
                dst_port: key.dst_port,
            };
            assert_eq!(mine, t, "quoted_flow_key disagrees with the quote");
        }
    }

    let choice = input.u8();
    let pick = |bit: u8, input: &mut Bytes| (choice & bit != 0).then(|| addr(input));
    let outer_dst = pick(1, &mut input);
    let outer_src = pick(2, &mut input);
    let inner_src = pick(4, &mut input).map(|a| (a, input.u16()));
    let inner_dst = pick(8, &mut input).map(|a| (a, input.u16()));
    let before = checksums(ip);
    let old_outer = (
        Ipv4Addr::from(<[u8; 4]>::try_from(&original[16..20]).expect("4")),
        Ipv4Addr::from(<[u8; 4]>::try_from(&original[12..16]).expect("4")),
    );
    if len < 20 {
        let _ = rewrite_icmp_error(ip, outer_dst, outer_src, inner_src, inner_dst);
        return;
    }
    if rewrite_icmp_error(ip, outer_dst, outer_src, inner_src, inner_dst).is_err() {
        assert_eq!(
            &ip[..],
            &original[..len],
            "a failed rewrite changed the packet"
        );
        return;
    }
    if let (Some(before), Some(after)) = (before, checksums(ip)) {
        still_valid(before, after);
    }
    let allowed = mutable_offsets(&original[..len]);
    for (i, (a, b)) in ip.iter().zip(&original[..len]).enumerate() {
        assert!(
            a == b || allowed.contains(&i),
            "byte {i} changed: {b:#x} -> {a:#x}"
        );
    }
    if let Some(dst) = outer_dst {
        assert_eq!(&ip[16..20], &dst.octets());
    }
    if let Some(src) = outer_src {
        assert_eq!(&ip[12..16], &src.octets());
    }
    if let Some(key) = key {
        let new_key = quoted_flow_key(ip).expect("a rewritten quote still has a key");
        let mut expected = key;
        if let Some((a, _)) = inner_src {
            expected.src = a;
        }
        if let Some((a, _)) = inner_dst {
            expected.dst = a;
        }
        match key.protocol {
            TCP | UDP => {
                expected.src_port = inner_src.map_or(key.src_port, |(_, p)| p);
                expected.dst_port = inner_dst.map_or(key.dst_port, |(_, p)| p);
            }
            // One identifier stands for both ports; the source's wins.
            ICMP => {
                let ident = inner_src.or(inner_dst).map_or(key.src_port, |(_, p)| p);
                expected.src_port = ident;
                expected.dst_port = ident;
            }
            _ => {}
        }
        assert_eq!(new_key, expected, "the quote was not rewritten as asked");

        // And back.
        let undo_outer_dst = outer_dst.map(|_| old_outer.0);
        let undo_outer_src = outer_src.map(|_| old_outer.1);
        let undo_src = inner_src.map(|_| (key.src, key.src_port));
        let undo_dst = inner_dst.map(|_| (key.dst, key.dst_port));
        rewrite_icmp_error(ip, undo_outer_dst, undo_outer_src, undo_src, undo_dst)
            .expect("rewriting back works");
        assert_eq!(
            quoted_flow_key(ip),
            Some(key),
            "rewriting back did not restore the key"
        );
        if let (Some(before), Some(after)) = (before, checksums(ip)) {
            still_valid(before, after);
        }
        for i in 12..20 {
            assert_eq!(ip[i], original[i], "outer address byte {i} not restored");
        }
    }
});

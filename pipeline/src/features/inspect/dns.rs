//! DNS queries (RFC 1035): the name a client asks for, and the NXDOMAIN answer that refuses it.
//!
//! Only queries are read: a blocking gateway decides on the question before any resolver sees
//! it, so it never needs to trust (or parse) an answer.

/// The fixed header in front of every DNS message.
pub const HEADER_LEN: usize = 12;

/// RFC 1035 §2.3.4: a name on the wire, length octets and terminating root included.
const MAX_WIRE_NAME: usize = 255;

/// Compression pointers a name may follow. Legitimate names use one (a name ends with at most
/// one pointer, which may chain through a few more); the cap is what stops a crafted loop.
const MAX_POINTER_HOPS: usize = 16;

/// RCODE 3, "Name Error": the name does not exist.
const RCODE_NXDOMAIN: u8 = 3;

mod flags {
    // Byte 2 of the header.
    pub const QR: u8 = 0x80;
    pub const OPCODE: u8 = 0x78;
    pub const RD: u8 = 0x01;
    // Byte 3 of the header.
    pub const RA: u8 = 0x80;
    pub const CD: u8 = 0x10;
}

/// Where the first question of a query sits and what it asks for.
struct Question {
    /// Bytes of the dotted name written to the caller's buffer.
    name_len: usize,
    /// Offset just past the name as it sits in the message (past its first pointer if the
    /// name is compressed).
    name_end: usize,
    /// Offset just past QTYPE and QCLASS.
    end: usize,
    /// The highest offset the name decoder read, pointers followed.
    max_read: usize,
}

/// The first question's QNAME of a standard query (QR=0, OPCODE=0, QDCOUNT>=1), as lowercase
/// dotted ASCII without the trailing dot ("www.example.com"; the root is the empty name).
///
/// `None` for anything else: responses, other opcodes (an UPDATE's "question" is its zone), a
/// question cut short, a malformed or looping name, or a label holding a dot or a byte outside
/// printable ASCII. Such a label cannot be written unambiguously in dotted form, and a name
/// that contains one is not any name a block list can hold, so not matching it loses nothing.
pub fn query_name<'a>(udp_payload: &[u8], out: &'a mut [u8; 256]) -> Option<&'a [u8]> {
    let q = parse_query(udp_payload, out)?;
    out.get(..q.name_len)
}

/// [`query_name`] for DNS over TCP, where a 2-byte length precedes each message (RFC 1035
/// §4.2.2). Only the first message of the segment is read; if the segment holds only the
/// start of it, the question is still found when it is complete in what arrived.
pub fn query_name_tcp<'a>(tcp_payload: &[u8], out: &'a mut [u8; 256]) -> Option<&'a [u8]> {
    query_name(tcp_message(tcp_payload)?, out)
}

/// Turns the standard query in `udp_payload[..len]` into its NXDOMAIN response in place: QR=1,
/// AA=0, TC=0, RA copied from RD, CD kept, RCODE=3, one question and no records, the message
/// cut right after the first question. Returns the response's length; the caller swaps
/// addresses and ports and fixes lengths and checksums.
///
/// `None`, with the buffer untouched, if the message is not a query [`query_name`] accepts, or
/// if its question name points past its own end: cutting the message there would leave the
/// echoed question dangling.
pub fn write_nxdomain(udp_payload: &mut [u8], len: usize) -> Option<usize> {
    let msg = udp_payload.get_mut(..len)?;
    let mut scratch = [0u8; 256];
    let q = parse_query(msg, &mut scratch)?;
    // The decoder's rules already keep a first question's reads inside it (it can only point
    // backwards into its own printable labels), but echoing a dangling pointer would hand
    // the client a corrupt answer, so check the fact rather than rely on the argument.
    if q.max_read >= q.name_end {
        return None;
    }
    let header: &mut [u8; HEADER_LEN] = msg.get_mut(..HEADER_LEN)?.try_into().ok()?;
    let rd = header[2] & flags::RD;
    // OPCODE is 0 (parse_query insists), so only QR and RD survive in byte 2.
    header[2] = flags::QR | rd;
    let ra = if rd != 0 { flags::RA } else { 0 };
    // RFC 4035 §3.1.6: a responder copies CD from the query. AD stays clear: nothing here
    // was validated.
    header[3] = ra | (header[3] & flags::CD) | RCODE_NXDOMAIN;
    header[4..6].copy_from_slice(&1u16.to_be_bytes());
    header[6..12].fill(0);
    Some(q.end)
}

/// [`write_nxdomain`] for DNS over TCP: `len` counts the 2-byte length prefix, which is
/// rewritten to the response's length. Returns the new length, prefix included.
pub fn write_nxdomain_tcp(tcp_payload: &mut [u8], len: usize) -> Option<usize> {
    let segment = tcp_payload.get_mut(..len)?;
    let (prefix, rest) = segment.split_first_chunk_mut::<2>()?;
    let msg_len = usize::from(u16::from_be_bytes(*prefix));
    // Unlike a lookup, an answer needs the whole query: the prefix must describe what is here.
    if msg_len > rest.len() {
        return None;
    }
    let new_len = write_nxdomain(rest, msg_len)?;
    // The response is never longer than the query, so it fits the prefix's 16 bits.
    *prefix = u16::try_from(new_len).ok()?.to_be_bytes();
    Some(new_len + 2)
}

/// The first message of a DNS-over-TCP segment, or as much of it as arrived.
fn tcp_message(tcp_payload: &[u8]) -> Option<&[u8]> {
    let (prefix, rest) = tcp_payload.split_first_chunk::<2>()?;
    let msg_len = usize::from(u16::from_be_bytes(*prefix));
    Some(rest.get(..msg_len).unwrap_or(rest))
}

fn parse_query(msg: &[u8], out: &mut [u8; 256]) -> Option<Question> {
    let header: &[u8; HEADER_LEN] = msg.get(..HEADER_LEN)?.try_into().ok()?;
    if header[2] & (flags::QR | flags::OPCODE) != 0 {
        return None;
    }
    if u16::from_be_bytes([header[4], header[5]]) == 0 {
        return None;
    }
    let name = read_name(msg, HEADER_LEN, out)?;
    // QTYPE and QCLASS: a question without them is cut short.
    let end = name.end.checked_add(4)?;
    if end > msg.len() {
        return None;
    }
    Some(Question {
        name_len: name.out_len,
        name_end: name.end,
        end,
        max_read: name.max_read,
    })
}

struct Name {
    out_len: usize,
    end: usize,
    max_read: usize,
}

/// Decodes the name at `start` into `out` as lowercase dotted ASCII.
///
/// Termination does not rest on the message being sane: every step either consumes a label,
/// which grows the name towards its 255-byte limit, or follows a pointer, which is capped.
/// Pointers must also point backwards, as RFC 1035 §4.1.4 describes them ("a prior
/// occurrence"), and never into the header.
fn read_name(msg: &[u8], start: usize, out: &mut [u8; 256]) -> Option<Name> {
    let mut pos = start;
    let mut out_len = 0;
    let mut wire_len = 0;
    let mut hops = 0;
    let mut end = None;
    let mut max_read = start;
    loop {
        let len_byte = *msg.get(pos)?;
        match len_byte & 0xC0 {
            0x00 => {
                let n = usize::from(len_byte);
                wire_len += 1 + n;
                if wire_len > MAX_WIRE_NAME {
                    return None;
                }
                if n == 0 {
                    max_read = max_read.max(pos);
                    return Some(Name {
                        out_len,
                        end: end.unwrap_or(pos + 1),
                        max_read,
                    });
                }
                let label = msg.get(pos + 1..pos + 1 + n)?;
                if !label.iter().all(|&b| is_label_byte(b)) {
                    return None;
                }
                if out_len > 0 {
                    *out.get_mut(out_len)? = b'.';
                    out_len += 1;
                }
                let dst = out.get_mut(out_len..out_len + n)?;
                dst.copy_from_slice(label);
                dst.make_ascii_lowercase();
                out_len += n;
                max_read = max_read.max(pos + n);
                pos += 1 + n;
            }
            0xC0 => {
                let low = *msg.get(pos + 1)?;
                let target = usize::from(len_byte & 0x3F) << 8 | usize::from(low);
                hops += 1;
                if hops > MAX_POINTER_HOPS || target < HEADER_LEN || target >= pos {
                    return None;
                }
                end.get_or_insert(pos + 2);
                max_read = max_read.max(pos + 1);
                pos = target;
            }
            // 0x40 and 0x80 are the extended and reserved label types (RFC 6891 §5): no
            // query names a host with them.
            _ => return None,
        }
    }
}

/// Printable ASCII other than the dot, which would be read back as a label boundary.
fn is_label_byte(b: u8) -> bool {
    b.is_ascii_graphic() && b != b'.'
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A query for `name` (dotted) with the given id and RD bit, QTYPE A, QCLASS IN.
    fn query(id: u16, rd: bool, name: &str) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&id.to_be_bytes());
        m.push(if rd { 0x01 } else { 0x00 });
        m.push(0x00);
        m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.').filter(|l| !l.is_empty()) {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.push(0);
        m.extend_from_slice(&[0, 1, 0, 1]);
        m
    }

    /// An EDNS0 OPT record (RFC 6891) for the additional section.
    fn with_opt(mut m: Vec<u8>) -> Vec<u8> {
        m[11] = 1;
        m.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 0, 0, 0, 0, 0, 0]);
        m
    }

    fn name_of(msg: &[u8]) -> Option<String> {
        let mut out = [0u8; 256];
        query_name(msg, &mut out).map(|n| String::from_utf8(n.to_vec()).unwrap())
    }

    #[test]
    fn reads_plain_query() {
        let q = query(0x1234, true, "www.Example.COM");
        assert_eq!(name_of(&q).as_deref(), Some("www.example.com"));
    }

    #[test]
    fn reads_query_with_edns_and_root_name() {
        let q = with_opt(query(1, true, "a.b.c"));
        assert_eq!(name_of(&q).as_deref(), Some("a.b.c"));
        let root = query(1, true, "");
        assert_eq!(name_of(&root).as_deref(), Some(""));
    }

    #[test]
    fn rejects_responses_other_opcodes_and_empty_questions() {
        let mut q = query(1, true, "example.com");
        q[2] |= 0x80;
        assert_eq!(name_of(&q), None);
        let mut q = query(1, true, "example.com");
        q[2] |= 5 << 3; // UPDATE
        assert_eq!(name_of(&q), None);
        let mut q = query(1, true, "example.com");
        q[5] = 0;
        assert_eq!(name_of(&q), None);
    }

    #[test]
    fn rejects_truncated_queries() {
        let q = query(1, true, "www.example.com");
        for cut in 0..q.len() {
            assert_eq!(name_of(&q[..cut]), None, "cut at {cut}");
        }
        assert!(name_of(&q).is_some());
    }

    /// Two questions, the second compressed against the first, and a first question whose
    /// own tail is a pointer to a name in the first question's labels.
    #[test]
    fn follows_compression_pointers() {
        // Question 1 at 12: "example.com"; question 2: "www" + pointer to 12.
        let mut m = query(7, true, "example.com");
        m[5] = 2;
        m.extend_from_slice(&[3, b'w', b'w', b'w', 0xC0, 12, 0, 1, 0, 1]);
        let mut out = [0u8; 256];
        // Only the first question is read...
        assert_eq!(query_name(&m, &mut out), Some(&b"example.com"[..]));
        // ...but the decoder follows pointers wherever a name sits.
        let q2 = m.len() - 10;
        let name = read_name(&m, q2, &mut out).unwrap();
        assert_eq!(&out[..name.out_len], b"www.example.com");
        assert_eq!(name.end, q2 + 6);
    }

    /// The first question has nothing before it but the header, so a pointer in it can only
    /// point into its own labels: to a label boundary (which loops back to the pointer) or
    /// into label content, which reads as a reserved label type or a label swallowing the
    /// pointer. Neither yields a name.
    #[test]
    fn first_question_pointing_into_itself() {
        let mut m = query(9, false, "");
        m.truncate(HEADER_LEN);
        // 12: "abcde"; 18: pointer to 14, whose 'b' (0x62) reads as label type 01.
        m.extend_from_slice(&[5, b'a', b'b', b'c', b'd', b'e', 0xC0, 14, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
        // 12: a 34-byte label whose first content byte is '!' (33); 47: pointer to 13. The
        // read from 13 is a 33-byte label 14..=46, then the pointer again, until the cap.
        let mut m = query(9, false, "");
        m.truncate(HEADER_LEN);
        m.push(34);
        m.push(b'!');
        m.extend_from_slice(&[b'q'; 33]);
        m.extend_from_slice(&[0xC0, 13, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
        // Same with '"' (34): the label read from 13 spans 14..=47 and takes in the
        // pointer's 0xC0, which is not a label byte.
        m[13] = b'"';
        assert_eq!(name_of(&m), None);
        let len = m.len();
        let before = m.clone();
        assert_eq!(write_nxdomain(&mut m, len), None);
        assert_eq!(m, before);
    }

    #[test]
    fn pointer_loop_is_rejected() {
        // 12: 01 'x' ; 14: pointer to 12 -> "x.x.x..." forever without the limits.
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.extend_from_slice(&[1, b'x', 0xC0, 12, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
        // A pointer to itself.
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.extend_from_slice(&[0xC0, 12, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
    }

    #[test]
    fn out_of_bounds_and_forward_pointers_are_rejected() {
        for target in [0u8, 5, 11, 200, 0xFF] {
            let mut m = query(1, true, "");
            m.truncate(HEADER_LEN);
            m.extend_from_slice(&[1, b'a', 0xC0, target, 0, 1, 0, 1]);
            assert_eq!(name_of(&m), None, "target {target}");
        }
        // High bits of the offset set: far past the message.
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.extend_from_slice(&[0xFF, 0xFF, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
        // Pointer forward into the additional section, which holds a valid name.
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.extend_from_slice(&[0xC0, 18, 0, 1, 0, 1, 1, b'z', 0]);
        assert_eq!(name_of(&m), None);
        // Pointer cut in half.
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.push(0xC0);
        assert_eq!(name_of(&m), None);
    }

    #[test]
    fn rejects_reserved_label_types_odd_bytes_and_long_names() {
        let mut m = query(1, true, "");
        m.truncate(HEADER_LEN);
        m.extend_from_slice(&[0x41, 0, 0, 1, 0, 1]);
        assert_eq!(name_of(&m), None);
        for bad in [b' ', b'.', 0x00, 0x7F, 0xC3] {
            let mut m = query(1, true, "abc.com");
            m[14] = bad;
            assert_eq!(name_of(&m), None, "byte {bad:#x}");
        }
        // 4 labels of 63: 4 * 64 + 1 = 257 wire bytes, over the limit.
        let l63 = "a".repeat(63);
        let long = [l63.as_str(); 4].join(".");
        assert_eq!(name_of(&query(1, true, &long)), None);
        // 3 labels of 63 and one of 61: exactly 255 wire bytes, 253 dotted.
        let max = format!("{l63}.{l63}.{l63}.{}", "b".repeat(61));
        assert_eq!(name_of(&query(1, true, &max)).map(|n| n.len()), Some(253));
    }

    #[test]
    fn reads_tcp_queries() {
        let q = query(1, true, "tcp.example.org");
        let mut seg = (q.len() as u16).to_be_bytes().to_vec();
        seg.extend_from_slice(&q);
        let mut out = [0u8; 256];
        assert_eq!(
            query_name_tcp(&seg, &mut out),
            Some(&b"tcp.example.org"[..])
        );
        // Two pipelined messages: the first one's question.
        let mut two = seg.clone();
        two.extend_from_slice(&seg);
        assert_eq!(
            query_name_tcp(&two, &mut out),
            Some(&b"tcp.example.org"[..])
        );
        // Only part of the message arrived, but the question is complete.
        let mut partial = seg.clone();
        partial[1] += 20;
        assert_eq!(
            query_name_tcp(&partial, &mut out),
            Some(&b"tcp.example.org"[..])
        );
        assert_eq!(query_name_tcp(&seg[..1], &mut out), None);
        assert_eq!(query_name_tcp(&seg[..10], &mut out), None);
        // The length prefix bounds the message: a question past it does not count.
        let mut short = seg.clone();
        short[1] = 14;
        assert_eq!(query_name_tcp(&short, &mut out), None);
    }

    /// Parses a response header and its single question, field by field.
    fn check_nxdomain(resp: &[u8], id: u16, rd: bool, cd: bool, name: &[u8]) {
        assert_eq!(u16::from_be_bytes([resp[0], resp[1]]), id);
        assert_eq!(resp[2] & 0x80, 0x80, "QR");
        assert_eq!(resp[2] & 0x78, 0, "OPCODE");
        assert_eq!(resp[2] & 0x04, 0, "AA");
        assert_eq!(resp[2] & 0x02, 0, "TC");
        assert_eq!(resp[2] & 0x01 != 0, rd, "RD");
        assert_eq!(resp[3] & 0x80 != 0, rd, "RA");
        assert_eq!(resp[3] & 0x40, 0, "Z");
        assert_eq!(resp[3] & 0x20, 0, "AD");
        assert_eq!(resp[3] & 0x10 != 0, cd, "CD");
        assert_eq!(resp[3] & 0x0F, 3, "RCODE");
        assert_eq!(&resp[4..6], &[0, 1], "QDCOUNT");
        assert_eq!(&resp[6..12], &[0; 6], "AN/NS/AR");
        let mut out = [0u8; 256];
        let q = read_name(resp, HEADER_LEN, &mut out).unwrap();
        assert_eq!(&out[..q.out_len], name);
        assert_eq!(&resp[q.end..], &[0, 1, 0, 1], "QTYPE/QCLASS, then nothing");
    }

    #[test]
    fn nxdomain_in_place() {
        for rd in [false, true] {
            for cd in [false, true] {
                let mut q = with_opt(query(0xBEEF, rd, "Ads.Example.com"));
                if cd {
                    q[3] |= 0x10;
                }
                q[3] |= 0x20; // AD in a query: must not survive into the answer
                q[2] |= 0x04 | 0x02; // AA and TC are meaningless in a query: cleared
                let len = q.len();
                q.resize(len + 100, 0xAA);
                let new_len = write_nxdomain(&mut q, len).unwrap();
                assert_eq!(new_len, HEADER_LEN + 17 + 4);
                check_nxdomain(&q[..new_len], 0xBEEF, rd, cd, b"ads.example.com");
                // The answer is no longer a query.
                assert_eq!(name_of(&q[..new_len]), None);
                // The question keeps the client's spelling: RFC 1035 §7.3 lets it match
                // the answer to its question byte for byte (and 0x20 randomisation relies
                // on it).
                assert_eq!(&q[HEADER_LEN + 1..HEADER_LEN + 4], b"Ads");
            }
        }
    }

    #[test]
    fn nxdomain_keeps_only_first_question() {
        let mut m = query(7, true, "example.com");
        m[5] = 2;
        m.extend_from_slice(&[3, b'w', b'w', b'w', 0xC0, 12, 0, 1, 0, 1]);
        let len = m.len();
        let new_len = write_nxdomain(&mut m, len).unwrap();
        check_nxdomain(&m[..new_len], 7, true, false, b"example.com");
    }

    #[test]
    fn nxdomain_refuses_non_queries_and_bad_lengths() {
        let q = query(1, true, "example.com");
        let mut resp = q.clone();
        resp[2] |= 0x80;
        let len = resp.len();
        assert_eq!(write_nxdomain(&mut resp, len), None);
        let mut short = q.clone();
        assert_eq!(write_nxdomain(&mut short, q.len() + 1), None);
        assert_eq!(write_nxdomain(&mut short, q.len() - 1), None);
        assert_eq!(short, q, "refused messages are untouched");
    }

    #[test]
    fn nxdomain_over_tcp_rewrites_the_prefix() {
        let q = with_opt(query(0x0102, true, "blocked.example"));
        let mut seg = (q.len() as u16).to_be_bytes().to_vec();
        seg.extend_from_slice(&q);
        let len = seg.len();
        let new_len = write_nxdomain_tcp(&mut seg, len).unwrap();
        let msg_len = usize::from(u16::from_be_bytes([seg[0], seg[1]]));
        assert_eq!(msg_len + 2, new_len);
        assert_eq!(msg_len, HEADER_LEN + 17 + 4);
        check_nxdomain(&seg[2..new_len], 0x0102, true, false, b"blocked.example");
        // A prefix promising more than arrived: no answer.
        let mut seg = (q.len() as u16 + 1).to_be_bytes().to_vec();
        seg.extend_from_slice(&q);
        let len = seg.len();
        assert_eq!(write_nxdomain_tcp(&mut seg, len), None);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..600),
            len in 0usize..700,
        ) {
            let mut out = [0u8; 256];
            let name = query_name(&bytes, &mut out).map(<[u8]>::to_vec);
            if let Some(name) = &name {
                prop_assert!(name.len() <= 253);
                prop_assert!(name.iter().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
            }
            let _ = query_name_tcp(&bytes, &mut out);
            let mut buf = bytes.clone();
            let r = write_nxdomain(&mut buf, len);
            if let Some(n) = r {
                prop_assert!(n <= len && len <= bytes.len());
                prop_assert_eq!(buf[3] & 0x0F, 3);
            } else {
                prop_assert_eq!(&buf, &bytes);
            }
            let mut buf = bytes.clone();
            let _ = write_nxdomain_tcp(&mut buf, len);
        }

        /// Random headers and names around a valid question skeleton reach deeper paths.
        #[test]
        fn random_names_never_panic(
            flags in any::<[u8; 2]>(),
            name in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut m = vec![0, 1, flags[0] & 0x01, flags[1], 0, 1, 0, 0, 0, 0, 0, 0];
            m.extend_from_slice(&name);
            m.extend_from_slice(&[0, 1, 0, 1]);
            let mut out = [0u8; 256];
            let parsed = query_name(&m, &mut out).map(<[u8]>::to_vec);
            let len = m.len();
            if let Some(n) = write_nxdomain(&mut m, len) {
                prop_assert!(parsed.is_some());
                let mut again = [0u8; 256];
                let q = read_name(&m[..n], HEADER_LEN, &mut again).unwrap();
                prop_assert_eq!(Some(&again[..q.out_len]), parsed.as_deref());
            }
        }
    }
}

//! Content inspection with random segmentation and sequence numbers: a first flight (an HTTP
//! request head, a TLS ClientHello, a DNS-over-TCP query, for a name the input picks, or raw
//! bytes) cut into segments at input-chosen points and delivered through
//! `ContentInspector::inspect_tcp_seq` with retransmissions, overlaps, duplicates, gaps and
//! reordering; then other flows sharing a small table (stale ids, reused slots, overflow),
//! and the single-packet DNS paths (`dns_query_blocked`, `write_dns_nxdomain_reply`).
//!
//! Checked, besides "no panic": the stream the scanners read is the same however it is cut,
//! so delivered in order (retransmits and overlaps allowed, no gaps) within
//! `MAX_PAYLOAD_PACKETS` packets it gets the verdict the whole flight gets in one segment;
//! delivered any other way from its first byte, it never gets a block the whole flight would
//! not get. An NXDOMAIN reply is a valid IPv4/UDP datagram no longer than the query.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use gateway_fuzz::{check_datagram, write_frame, Bytes, Ip, L4, UDP};
use libfuzzer_sys::fuzz_target;
use pipeline::features::content::{
    dns_query_blocked, dns_tcp_query_blocked, write_dns_nxdomain_reply, ContentInspector,
    ContentPolicy, DnsAction, Inspection, MAX_PAYLOAD_PACKETS,
};
use pipeline::features::inspect::{dns, tls};
use pipeline::features::parental::{DeviceMatch, Policy};
use pipeline::wire::EthernetAddress;

const NAMES: [&str; 10] = [
    "blocked.example",
    "www.blocked.example",
    "fine.example",
    "adult.example",
    "cdn.adult.example",
    "notblocked.example.org",
    "xbadwordx.com",
    "BLOCKED.EXAMPLE",
    "blocked.example.",
    "a.b",
];
const KID: [u8; 4] = [192, 168, 10, 5];

fn policy() -> &'static ContentPolicy {
    static POLICY: OnceLock<ContentPolicy> = OnceLock::new();
    POLICY.get_or_init(|| {
        ContentPolicy::new(
            &["blocked.example".to_string(), "ads.example.net".to_string()],
            &["badword".to_string()],
            vec![("adult".to_string(), vec!["adult.example".to_string()])],
            vec![Policy {
                devices: vec![DeviceMatch::Ip(Ipv4Addr::from(KID))],
                blocked_categories: vec![0],
                windows: Vec::new(),
                paused: false,
            }],
            DnsAction::Nxdomain,
            0,
        )
        .expect("the fuzz content policy builds")
    })
}

fn name<'a>(input: &mut Bytes<'a>) -> &'a [u8] {
    match input.u8() {
        n if usize::from(n) < NAMES.len() * 24 => NAMES[usize::from(n) % NAMES.len()].as_bytes(),
        _ => input.slice(300),
    }
}

/// A TLS ClientHello record carrying `sni`, with lengths that fit.
fn client_hello(out: &mut Vec<u8>, sni: &[u8], input: &mut Bytes) {
    let sni = &sni[..sni.len().min(250)];
    let mut ext = Vec::new();
    if input.bool() {
        // An extension before the SNI.
        ext.extend_from_slice(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]);
    }
    let name_len = sni.len() as u16;
    ext.extend_from_slice(&[0x00, 0x00]);
    ext.extend_from_slice(&(name_len + 5).to_be_bytes());
    ext.extend_from_slice(&(name_len + 3).to_be_bytes());
    ext.push(0);
    ext.extend_from_slice(&name_len.to_be_bytes());
    ext.extend_from_slice(sni);
    let mut hello = vec![0x03, 0x03];
    hello.extend_from_slice(&[0x41; 32]);
    let session = usize::from(input.u8() % 33);
    hello.push(session as u8);
    hello.extend(std::iter::repeat_n(0x5a, session));
    hello.extend_from_slice(&[0x00, 0x04, 0x13, 0x01, 0x13, 0x02, 0x01, 0x00]);
    hello.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    hello.extend_from_slice(&ext);
    let mut handshake = vec![0x01, 0];
    handshake.extend_from_slice(&(hello.len() as u16).to_be_bytes());
    handshake.extend_from_slice(&hello);
    out.extend_from_slice(&[0x16, 0x03, 0x01]);
    out.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    out.extend_from_slice(&handshake);
}

/// A DNS query message for `name` (labels split at dots).
fn dns_query(out: &mut Vec<u8>, name: &[u8], qtype: u16) {
    out.extend_from_slice(&[0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split(|&b| b == b'.').filter(|l| !l.is_empty()) {
        let label = &label[..label.len().min(63)];
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&[0, 1]);
}

/// The first flight and the server port it goes to.
fn flight(input: &mut Bytes) -> (Vec<u8>, u16) {
    let mut out = Vec::new();
    let kind = input.u8();
    let name = name(input);
    let port = match kind % 6 {
        0 | 1 => {
            let method: &[u8] =
                input.pick(&[b"GET".as_slice(), b"POST", b"HEAD", b"CONNECT", b"get"]);
            out.extend_from_slice(method);
            out.extend_from_slice(b" /");
            if kind & 0x40 != 0 {
                out.extend_from_slice(b"badword/");
            }
            out.extend_from_slice(b"index.html HTTP/1.1\r\n");
            if kind & 0x80 != 0 {
                out.extend_from_slice(b"User-Agent: fuzz\r\nAccept: */*\r\n");
            }
            out.extend_from_slice(input.pick(&[b"Host: ".as_slice(), b"host:", b"HOST:  "]));
            out.extend_from_slice(name);
            out.extend_from_slice(b"\r\n\r\n");
            input.pick(&[80, 8080, 3128])
        }
        2 | 3 => {
            client_hello(&mut out, name, input);
            input.pick(&[443, 8443])
        }
        4 => {
            let mut query = Vec::new();
            dns_query(&mut query, name, 1);
            out.extend_from_slice(&(query.len() as u16).to_be_bytes());
            out.extend_from_slice(&query);
            53
        }
        _ => {
            out.extend_from_slice(input.slice(1500));
            input.pick(&[80, 443, 53, 22, 8080])
        }
    };
    (out, port)
}

fn pick_device(input: &mut Bytes) -> (Ipv4Addr, Option<EthernetAddress>) {
    let ip = input.pick(&[KID, [192, 168, 10, 2], [10, 0, 0, 7]]);
    let mac = input
        .bool()
        .then_some(EthernetAddress([2, 0, 0, 0, 0, ip[3]]));
    (Ipv4Addr::from(ip), mac)
}

/// How a delivery went: the first verdict that was not Pending, whether the first payload
/// started the stream, and whether the delivery was in order (no gaps) within the packet
/// limit.
fn deliver(
    inspector: &mut ContentInspector,
    flight: &[u8],
    port: u16,
    device: (Ipv4Addr, Option<EthernetAddress>),
    decided_whole: bool,
    input: &mut Bytes,
) -> (Inspection, bool, bool) {
    let policy = policy();
    let isn = input.u32();
    let mut in_order = true;
    let mut from_start = true;
    let mut next = 0usize; // stream bytes delivered without a gap
    let mut packets = 0u32;
    let mut first = true;
    while !input.is_empty() {
        let op = input.u8();
        let (start, end) = match op % 4 {
            // The next segment, or a retransmit overlapping the end of what was sent.
            0 | 1 => {
                let back = if op & 0x10 != 0 {
                    usize::from(input.u8()).min(next)
                } else {
                    0
                };
                let start = next - back;
                (start, start + 1 + usize::from(input.u16() % 700))
            }
            // Anywhere: ahead (a gap) or behind.
            2 => {
                let start = usize::from(input.u16()) % (flight.len() + 1);
                (start, start + 1 + usize::from(input.u8()))
            }
            // A pure ACK (no payload) or a duplicate of the start.
            _ => (
                0,
                if op & 0x10 != 0 {
                    0
                } else {
                    1 + usize::from(input.u8())
                },
            ),
        };
        let (start, end) = (start.min(flight.len()), end.min(flight.len()));
        if first && start != 0 && end > start {
            // The stream's start must come first for a comparison to mean anything.
            from_start = false;
            in_order = false;
        }
        // DNS over TCP is read one segment at a time (only a length prefix sent alone is
        // remembered), so a query cut elsewhere is allowed: the fail-open the module doc
        // describes. Nothing to compare there.
        if port == 53 && end > start && end != flight.len() && !(start == 0 && end == 2) {
            in_order = false;
        }
        if end > start {
            first = false;
            packets += 1;
            if start > next {
                in_order = false;
            }
            next = next.max(end);
        }
        let seq = isn.wrapping_add(start as u32);
        let verdict = inspector.inspect_tcp_seq(policy, 1, device, port, seq, &flight[start..end]);
        if verdict != Inspection::Pending {
            // The packet that reaches the limit gives up, unless the flight it completes
            // decides.
            let within =
                packets < u32::from(MAX_PAYLOAD_PACKETS) || (next >= flight.len() && decided_whole);
            return (verdict, from_start, in_order && within);
        }
        if next >= flight.len() {
            break;
        }
    }
    (Inspection::Pending, from_start, in_order)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let policy = policy();
    let (flight, port) = flight(&mut input);
    let device = pick_device(&mut input);

    // The whole flight at once, on a table of its own.
    let mut whole = ContentInspector::new(8);
    let reference = whole.inspect_tcp_seq(policy, 1, device, port, 7, &flight);

    let mut inspector = ContentInspector::new(8);
    let (verdict, from_start, in_order) = deliver(
        &mut inspector,
        &flight,
        port,
        device,
        reference != Inspection::Pending,
        &mut input,
    );
    if in_order && verdict != Inspection::Pending {
        assert_eq!(
            verdict,
            reference,
            "segmenting the flight changed the verdict ({} bytes to port {port})",
            flight.len()
        );
    }
    if let (Inspection::Block(reason), true) = (verdict, from_start) {
        assert_eq!(
            reference,
            Inspection::Block(reason),
            "a partial or out-of-order delivery was blocked where the whole flight is not"
        );
    }
    assert!(inspector.in_use() <= inspector.capacity());

    // Then other flows in the same small table: stale ids, reuse, overflow.
    for _ in 0..usize::from(input.u8() % 16) {
        let flow = u32::from(input.u8() % 24);
        let port = input.pick(&[80, 443, 53, 22]);
        let other = pick_device(&mut input);
        let seq = input.u32();
        let payload = input.slice(200);
        let _ = inspector.inspect_tcp_seq(policy, flow, other, port, seq, payload);
        if input.u8() < 32 {
            inspector.forget(flow);
        }
        assert!(inspector.in_use() <= inspector.capacity());
    }

    // The stateless parsers on the flight as it is.
    let mut out = [0u8; 256];
    let _ = tls::client_hello_sni(&flight, &mut out);
    let _ = dns::query_name_tcp(&flight, &mut out);
    let _ = dns::query_name(&flight, &mut out);
    let _ = dns_tcp_query_blocked(policy, device, &flight);

    // A DNS query over UDP, answered in place when blocked.
    let mut query = Vec::new();
    if input.bool() {
        let name = name(&mut input);
        dns_query(&mut query, name, input.pick(&[1, 28, 65, 255]));
    } else {
        query.extend_from_slice(input.slice(600));
    }
    if dns_query_blocked(policy, device, &query).is_some() {
        let mut room = [0u8; 2048];
        let ip = Ip::new(device.0, Ipv4Addr::new(192, 168, 10, 1), UDP);
        let l4 = L4 {
            src_port: 40000,
            dst_port: 53,
            ..L4::default()
        };
        let len = write_frame(
            &mut room,
            ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 5]),
            &ip,
            &l4,
            &query,
        );
        if len > 0 {
            // None (not a standard query) is dropped by the pipeline instead.
            if let Some(reply_len) = write_dns_nxdomain_reply(&mut room, len) {
                assert!(reply_len <= len, "the reply outgrew the query");
                if let Err(what) = check_datagram(&room[..reply_len]) {
                    panic!("NXDOMAIN reply: {what}");
                }
            }
        }
    }
});

//! The server name a TLS client asks for, from its ClientHello's server_name extension
//! (RFC 6066 §3).
//!
//! A ClientHello often does not fit one segment: post-quantum key shares push it past 1500
//! bytes, and browsers shuffle extension order, so the SNI lands in the second segment about
//! half the time. [`ClientHelloScanner`] therefore reads the message as a stream, segment by
//! segment, keeping only a few counters and the name itself; it also reads a ClientHello split
//! across several handshake records, which evasion tools do on purpose. [`client_hello`] is
//! the one-shot form for a single payload.
//!
//! With Encrypted Client Hello the name found is the outer, public one: the real name is not
//! visible on the wire.

use core::fmt;

/// The longest host name a server_name entry may hold (RFC 6066 §3: `HostName<1..2^16-1>`,
/// but DNS names are at most 253 bytes in dotted form; 255 leaves room for a trailing dot).
const MAX_NAME: usize = 255;

/// RFC 8446 §5.1: a plaintext record's fragment is at most 2^14 bytes.
const MAX_RECORD: u16 = 1 << 14;

const CONTENT_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u32 = 0;
const NAME_TYPE_HOST: u32 = 0;

/// What the bytes seen so far say about the server name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SniResult<'a> {
    /// The host_name, lowercase, without a trailing dot.
    Found(&'a [u8]),
    /// A complete, well-formed ClientHello (up to where the name would be) without one.
    NoSni,
    /// Everything so far is a valid ClientHello prefix: wait for more bytes.
    NeedMore,
    /// Not a TLS ClientHello, or a malformed one.
    NotTls,
}

impl fmt::Debug for SniResult<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SniResult::Found(name) => write!(f, "Found({:?})", String::from_utf8_lossy(name)),
            SniResult::NoSni => f.write_str("NoSni"),
            SniResult::NeedMore => f.write_str("NeedMore"),
            SniResult::NotTls => f.write_str("NotTls"),
        }
    }
}

/// The server name in the ClientHello at the start of `tcp_payload`, copied to `out`. `None`
/// when there is none, when the payload is not a ClientHello, and when it is cut short (see
/// [`client_hello`] to tell these apart).
pub fn client_hello_sni<'a>(tcp_payload: &[u8], out: &'a mut [u8; 256]) -> Option<&'a [u8]> {
    match client_hello(tcp_payload, out) {
        SniResult::Found(name) => Some(name),
        _ => None,
    }
}

/// Reads the ClientHello at the start of `tcp_payload`; a name found is copied to `out`.
pub fn client_hello<'a>(tcp_payload: &[u8], out: &'a mut [u8; 256]) -> SniResult<'a> {
    let mut scanner = ClientHelloScanner::new();
    match scanner.feed(tcp_payload) {
        SniResult::Found(name) => match out.get_mut(..name.len()) {
            Some(dst) => {
                dst.copy_from_slice(name);
                SniResult::Found(dst)
            }
            None => SniResult::NotTls,
        },
        SniResult::NoSni => SniResult::NoSni,
        SniResult::NeedMore => SniResult::NeedMore,
        SniResult::NotTls => SniResult::NotTls,
    }
}

/// The field of the ClientHello the scanner is reading. Each is read whole (an integer of up
/// to 4 bytes, a skipped run, or the name) before the next is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
    /// msg_type and the 24-bit length, as one 4-byte integer.
    HandshakeHeader,
    LegacyVersion,
    Random,
    SessionIdLen,
    SessionId,
    CipherSuitesLen,
    CipherSuites,
    CompressionLen,
    Compression,
    ExtensionsLen,
    /// extension_type and extension_data's length, as one 4-byte integer.
    ExtensionHeader,
    ExtensionBody,
    ServerNameListLen,
    /// name_type and the name's length, as one 3-byte integer.
    ServerNameHeader,
    ServerNameBody,
    HostName,
    /// The rest of the server_name extension after a list without a host_name.
    ServerNameRest,
}

/// How the current field's bytes are consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// A big-endian integer: bytes still missing, and the value so far.
    Int {
        left: u8,
        value: u32,
    },
    Skip {
        left: u32,
    },
    Name {
        left: u16,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Found,
    NoSni,
    NotTls,
}

/// Reads a ClientHello from successive payloads of one TCP stream, without allocating.
///
/// Positions below count bytes of the handshake message (its 4-byte header included); each
/// nested length is turned into an end position and every field is checked against the
/// innermost one, so a length that overruns its container is rejected before it is trusted.
#[derive(Clone, Debug)]
pub struct ClientHelloScanner {
    /// Record header bytes gathered while between records.
    record_header: [u8; 5],
    record_header_len: u8,
    /// Fragment bytes of the current record not yet consumed.
    record_left: u16,
    field: Field,
    read: Read,
    pos: u32,
    hello_end: u32,
    extensions_end: u32,
    extension_end: u32,
    list_end: u32,
    name: [u8; MAX_NAME],
    name_len: u16,
    outcome: Option<Outcome>,
}

impl Default for ClientHelloScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientHelloScanner {
    pub const fn new() -> Self {
        ClientHelloScanner {
            record_header: [0; 5],
            record_header_len: 0,
            record_left: 0,
            field: Field::HandshakeHeader,
            read: Read::Int { left: 4, value: 0 },
            pos: 0,
            // Unknown until the handshake header is read; nothing is checked against them
            // before then.
            hello_end: u32::MAX,
            extensions_end: u32::MAX,
            extension_end: u32::MAX,
            list_end: u32::MAX,
            name: [0; MAX_NAME],
            name_len: 0,
            outcome: None,
        }
    }

    /// Feeds the stream's next bytes. Once the result is anything but `NeedMore` it no longer
    /// changes, and later bytes are ignored.
    pub fn feed(&mut self, mut bytes: &[u8]) -> SniResult<'_> {
        while self.outcome.is_none() {
            let Some((&first, rest)) = bytes.split_first() else {
                break;
            };
            if self.record_left == 0 {
                self.record_header_byte(first);
                bytes = rest;
                continue;
            }
            let take = bytes.len().min(usize::from(self.record_left));
            let (fragment, rest) = bytes.split_at(take);
            // take <= record_left, a u16.
            self.record_left -= take as u16;
            self.handshake_bytes(fragment);
            bytes = rest;
        }
        self.result()
    }

    /// The state the bytes fed so far left the scanner in.
    pub fn result(&self) -> SniResult<'_> {
        match self.outcome {
            None => SniResult::NeedMore,
            Some(Outcome::NoSni) => SniResult::NoSni,
            Some(Outcome::NotTls) => SniResult::NotTls,
            Some(Outcome::Found) => match self.name.get(..usize::from(self.name_len)) {
                Some(name) => SniResult::Found(name),
                None => SniResult::NotTls,
            },
        }
    }

    /// Each header byte is checked as it arrives, so a stream that is not TLS is turned away
    /// at its first byte rather than after five.
    fn record_header_byte(&mut self, b: u8) {
        let i = usize::from(self.record_header_len);
        let ok = match i {
            // A handshake record: nothing else may come between the fragments of one
            // handshake message (RFC 8446 §5.1).
            0 => b == CONTENT_HANDSHAKE,
            // legacy_record_version: 3.0 to 3.4 are all seen in first flights.
            1 => b == 3,
            2 => b <= 4,
            3 | 4 => true,
            _ => false,
        };
        if !ok {
            self.outcome = Some(Outcome::NotTls);
            return;
        }
        if let Some(slot) = self.record_header.get_mut(i) {
            *slot = b;
        }
        self.record_header_len += 1;
        if i == 4 {
            self.record_header_len = 0;
            let len = u16::from_be_bytes([self.record_header[3], self.record_header[4]]);
            // Empty handshake fragments are forbidden, and would let a stream keep the
            // scanner busy without ever moving the handshake forward.
            if len == 0 || len > MAX_RECORD {
                self.outcome = Some(Outcome::NotTls);
                return;
            }
            self.record_left = len;
        }
    }

    fn handshake_bytes(&mut self, mut bytes: &[u8]) {
        while self.outcome.is_none() {
            let Some((&first, rest)) = bytes.split_first() else {
                return;
            };
            match self.read {
                Read::Int { left, value } => {
                    bytes = rest;
                    self.pos += 1;
                    let value = value << 8 | u32::from(first);
                    if left > 1 {
                        self.read = Read::Int {
                            left: left - 1,
                            value,
                        };
                    } else {
                        self.field_done(value);
                    }
                }
                Read::Skip { left } => {
                    let take = bytes.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    bytes = bytes.get(take..).unwrap_or_default();
                    // take <= left, a u32.
                    let take = take as u32;
                    self.pos += take;
                    if take < left {
                        self.read = Read::Skip { left: left - take };
                    } else {
                        self.field_done(0);
                    }
                }
                Read::Name { left } => {
                    let take = bytes.len().min(usize::from(left));
                    let at = usize::from(self.name_len);
                    let (chunk, rest) = bytes.split_at(take);
                    match self.name.get_mut(at..at + take) {
                        Some(dst) => dst.copy_from_slice(chunk),
                        None => {
                            self.outcome = Some(Outcome::NotTls);
                            return;
                        }
                    }
                    bytes = rest;
                    // take <= left, a u16.
                    self.name_len += take as u16;
                    self.pos += take as u32;
                    if (take as u16) < left {
                        self.read = Read::Name {
                            left: left - take as u16,
                        };
                    } else {
                        self.field_done(0);
                    }
                }
            }
        }
    }

    /// Starts reading `field`, `len` bytes long, which must end by `end`.
    fn next(&mut self, field: Field, len: u32, end: u32) {
        match self.pos.checked_add(len) {
            Some(field_end) if field_end <= end => {}
            _ => return self.fail(),
        }
        self.field = field;
        self.read = match field {
            Field::HandshakeHeader | Field::ExtensionHeader => Read::Int { left: 4, value: 0 },
            Field::ServerNameHeader => Read::Int { left: 3, value: 0 },
            Field::LegacyVersion
            | Field::CipherSuitesLen
            | Field::ExtensionsLen
            | Field::ServerNameListLen => Read::Int { left: 2, value: 0 },
            Field::SessionIdLen | Field::CompressionLen => Read::Int { left: 1, value: 0 },
            Field::HostName => Read::Name { left: len as u16 },
            Field::Random
            | Field::SessionId
            | Field::CipherSuites
            | Field::Compression
            | Field::ExtensionBody
            | Field::ServerNameBody
            | Field::ServerNameRest => Read::Skip { left: len },
        };
        // A zero-length run completes at once: there is no byte to complete it.
        if len == 0 {
            self.field_done(0);
        }
    }

    fn fail(&mut self) {
        self.outcome = Some(Outcome::NotTls);
    }

    /// The current field is complete (`value` is its integer, if it is one): check it and
    /// choose the next.
    fn field_done(&mut self, value: u32) {
        match self.field {
            Field::HandshakeHeader => {
                if value >> 24 != u32::from(HANDSHAKE_CLIENT_HELLO) {
                    return self.fail();
                }
                self.hello_end = 4 + (value & 0x00FF_FFFF);
                self.next(Field::LegacyVersion, 2, self.hello_end);
            }
            Field::LegacyVersion => {
                if value >> 8 != 3 {
                    return self.fail();
                }
                self.next(Field::Random, 32, self.hello_end);
            }
            Field::Random => self.next(Field::SessionIdLen, 1, self.hello_end),
            Field::SessionIdLen => {
                if value > 32 {
                    return self.fail();
                }
                self.next(Field::SessionId, value, self.hello_end);
            }
            Field::SessionId => self.next(Field::CipherSuitesLen, 2, self.hello_end),
            Field::CipherSuitesLen => {
                if value < 2 || value & 1 != 0 {
                    return self.fail();
                }
                self.next(Field::CipherSuites, value, self.hello_end);
            }
            Field::CipherSuites => self.next(Field::CompressionLen, 1, self.hello_end),
            Field::CompressionLen => {
                if value < 1 {
                    return self.fail();
                }
                self.next(Field::Compression, value, self.hello_end);
            }
            Field::Compression => {
                // Extensions are optional before TLS 1.3 (RFC 5246 §7.4.1.2).
                if self.pos == self.hello_end {
                    self.outcome = Some(Outcome::NoSni);
                    return;
                }
                self.next(Field::ExtensionsLen, 2, self.hello_end);
            }
            Field::ExtensionsLen => {
                self.extensions_end = self.pos + value;
                if self.extensions_end > self.hello_end {
                    return self.fail();
                }
                self.next_extension();
            }
            Field::ExtensionHeader => {
                self.extension_end = self.pos + (value & 0xFFFF);
                if self.extension_end > self.extensions_end {
                    return self.fail();
                }
                if value >> 16 == EXT_SERVER_NAME {
                    self.next(Field::ServerNameListLen, 2, self.extension_end);
                } else {
                    self.next(Field::ExtensionBody, value & 0xFFFF, self.extension_end);
                }
            }
            Field::ExtensionBody => self.next_extension(),
            Field::ServerNameListLen => {
                self.list_end = self.pos + value;
                if self.list_end > self.extension_end {
                    return self.fail();
                }
                self.next_server_name();
            }
            Field::ServerNameHeader => {
                let len = value & 0xFFFF;
                if value >> 16 == NAME_TYPE_HOST {
                    if len == 0 || len as usize > MAX_NAME {
                        return self.fail();
                    }
                    self.next(Field::HostName, len, self.list_end);
                } else {
                    self.next(Field::ServerNameBody, len, self.list_end);
                }
            }
            Field::ServerNameBody => self.next_server_name(),
            Field::HostName => self.finish_name(),
            Field::ServerNameRest => self.next_extension(),
        }
    }

    fn next_extension(&mut self) {
        if self.pos == self.extensions_end {
            self.outcome = Some(Outcome::NoSni);
        } else {
            self.next(Field::ExtensionHeader, 4, self.extensions_end);
        }
    }

    fn next_server_name(&mut self) {
        if self.pos == self.list_end {
            let rest = self.extension_end - self.pos;
            self.next(Field::ServerNameRest, rest, self.extension_end);
        } else {
            self.next(Field::ServerNameHeader, 3, self.list_end);
        }
    }

    /// Lowercases the name and drops one trailing dot, so that "Example.COM." cannot slip past
    /// a list holding "example.com". A name with bytes no host name has (controls, spaces,
    /// non-ASCII) is malformed (RFC 6066: ASCII, no trailing dot) and refused.
    fn finish_name(&mut self) {
        let Some(name) = self.name.get_mut(..usize::from(self.name_len)) else {
            return self.fail();
        };
        if !name.iter().all(u8::is_ascii_graphic) {
            return self.fail();
        }
        name.make_ascii_lowercase();
        if name.last() == Some(&b'.') {
            self.name_len -= 1;
        }
        if self.name_len == 0 {
            return self.fail();
        }
        self.outcome = Some(Outcome::Found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    /// RFC 8448 §3 (Simple 1-RTT Handshake): the client's first flight, a TLS 1.3 ClientHello
    /// for "server", in its record (`16 03 01 00 c4`).
    fn rfc8448_record() -> Vec<u8> {
        hex("16 03 01 00 c4
            01 00 00 c0 03 03 cb 34 ec b1 e7 81 63 ba 1c 38 c6 da cb 19 6a 6d ff a2 1a 8d 99 12
            ec 18 a2 ef 62 83 02 4d ec e7 00 00 06 13 01 13 03 13 02 01 00 00 91 00 00 00 0b 00
            09 00 00 06 73 65 72 76 65 72 ff 01 00 01 00 00 0a 00 14 00 12 00 1d 00 17 00 18 00
            19 01 00 01 01 01 02 01 03 01 04 00 23 00 00 00 33 00 26 00 24 00 1d 00 20 99 38 1d
            e5 60 e4 bd 43 d2 3d 8e 43 5a 7d ba fe b3 c0 6e 51 c1 3c ae 4d 54 13 69 1e 52 9a af
            2c 00 2b 00 03 02 03 04 00 0d 00 20 00 1e 04 03 05 03 06 03 02 03 08 04 08 05 08 06
            04 01 05 01 06 01 02 01 04 02 05 02 06 02 02 02 00 2d 00 02 01 01 00 1c 00 02 40 01")
    }

    fn ext(ty: u16, body: &[u8]) -> Vec<u8> {
        let mut e = ty.to_be_bytes().to_vec();
        e.extend_from_slice(&(body.len() as u16).to_be_bytes());
        e.extend_from_slice(body);
        e
    }

    fn sni_ext(names: &[(u8, &[u8])]) -> Vec<u8> {
        let mut list = Vec::new();
        for (ty, name) in names {
            list.push(*ty);
            list.extend_from_slice(&(name.len() as u16).to_be_bytes());
            list.extend_from_slice(name);
        }
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend_from_slice(&list);
        ext(0, &body)
    }

    /// A ClientHello handshake message shaped like a current browser's: GREASE, a 32-byte
    /// session id, many suites, and a large post-quantum key share before the SNI.
    fn browser_hello(extensions: &[Vec<u8>]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend((0..32).map(|i| i as u8));
        body.push(32);
        body.extend((0..32).map(|i| 0x80 | i as u8));
        let suites: Vec<u8> = [0x0A0Au16, 0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F, 0xCCA9]
            .iter()
            .flat_map(|s| s.to_be_bytes())
            .collect();
        body.extend_from_slice(&(suites.len() as u16).to_be_bytes());
        body.extend_from_slice(&suites);
        body.extend_from_slice(&[1, 0]);
        let exts: Vec<u8> = extensions.concat();
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![1];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn browser_extensions(host: &[u8]) -> Vec<Vec<u8>> {
        vec![
            ext(0x2A2A, &[]),
            ext(0x0017, &[]),
            // key_share: X25519MLKEM768 (a 1216-byte share) and X25519.
            ext(
                0x0033,
                &[
                    vec![0x04, 0xE8, 0x11, 0xEC, 0x04, 0xC0],
                    vec![0x55; 1216],
                    vec![0x00, 0x1D, 0x00, 0x20],
                    vec![0x66; 32],
                ]
                .concat(),
            ),
            // session_ticket, resuming: with the key share, pushes the SNI past one segment.
            ext(0x0023, &[0x77; 192]),
            ext(0x000D, &[0, 6, 4, 3, 8, 4, 4, 1]),
            ext(0x002B, &[4, 0x03, 0x04, 0x03, 0x03]),
            sni_ext(&[(0, host)]),
            ext(0x0010, b"\x00\x0c\x02h2\x08http/1.1"),
            ext(0x3A3A, &[0]),
        ]
    }

    /// Wraps a handshake message in records of at most `max` bytes each.
    fn records(msg: &[u8], max: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for chunk in msg.chunks(max) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    fn sni(payload: &[u8]) -> SniResult<'static> {
        let mut out = [0u8; 256];
        match client_hello(payload, &mut out) {
            SniResult::Found(name) => SniResult::Found(name.to_vec().leak()),
            SniResult::NoSni => SniResult::NoSni,
            SniResult::NeedMore => SniResult::NeedMore,
            SniResult::NotTls => SniResult::NotTls,
        }
    }

    #[test]
    fn rfc8448_client_hello() {
        let rec = rfc8448_record();
        assert_eq!(rec.len(), 5 + 196);
        let mut out = [0u8; 256];
        assert_eq!(client_hello_sni(&rec, &mut out), Some(&b"server"[..]));
        // Trailing data (the next record) does not matter.
        let mut more = rec.clone();
        more.extend_from_slice(&[0x14, 3, 3, 0, 1, 1]);
        assert_eq!(sni(&more), SniResult::Found(b"server"));
    }

    #[test]
    fn rfc8448_truncated_needs_more() {
        let rec = rfc8448_record();
        // The name ends at 5 + 4 + 2 + 32 + 1 + 8 + 2 + 2 + 4 + 2 + 3 + 6 = 71.
        for cut in 0..71 {
            assert_eq!(sni(&rec[..cut]), SniResult::NeedMore, "cut at {cut}");
        }
        for cut in 71..rec.len() {
            assert_eq!(
                sni(&rec[..cut]),
                SniResult::Found(b"server"),
                "cut at {cut}"
            );
        }
        let mut out = [0u8; 256];
        assert_eq!(client_hello_sni(&rec[..70], &mut out), None);
    }

    #[test]
    fn rfc8448_split_anywhere_across_two_feeds() {
        let rec = rfc8448_record();
        for at in 0..=rec.len() {
            let mut s = ClientHelloScanner::new();
            let first = s.feed(&rec[..at]);
            assert!(
                matches!(first, SniResult::NeedMore | SniResult::Found(b"server")),
                "{at}: {first:?}"
            );
            assert_eq!(
                s.feed(&rec[at..]),
                SniResult::Found(b"server"),
                "split at {at}"
            );
        }
    }

    #[test]
    fn browser_sized_hello_across_segments_and_records() {
        let msg = browser_hello(&browser_extensions(b"WWW.Example.ORG"));
        let one = records(&msg, 16384);
        let at = one
            .windows(15)
            .position(|w| w == b"WWW.Example.ORG")
            .unwrap();
        assert!(
            at > 1460,
            "the name must be in the second segment, not at {at}"
        );
        assert_eq!(sni(&one[..1460]), SniResult::NeedMore);
        let mut s = ClientHelloScanner::new();
        assert_eq!(s.feed(&one[..1460]), SniResult::NeedMore);
        assert_eq!(s.feed(&one[1460..]), SniResult::Found(b"www.example.org"));
        // The handshake message split over many small records, as evasion tools do it.
        for max in [1, 2, 3, 7, 100, 517] {
            let split = records(&msg, max);
            assert_eq!(
                sni(&split),
                SniResult::Found(b"www.example.org"),
                "max {max}"
            );
        }
    }

    #[test]
    fn hello_without_sni_and_unusual_server_names() {
        let mut exts = browser_extensions(b"x");
        exts.retain(|e| e[..2] != [0, 0]);
        assert_eq!(exts.len(), browser_extensions(b"x").len() - 1);
        assert_eq!(
            sni(&records(&browser_hello(&exts), 16384)),
            SniResult::NoSni
        );
        // No extensions block at all (TLS 1.2 and older).
        let mut msg = browser_hello(&[]);
        msg.truncate(msg.len() - 2);
        let body_len = msg.len() as u32 - 4;
        msg[1..4].copy_from_slice(&body_len.to_be_bytes()[1..]);
        assert_eq!(sni(&records(&msg, 16384)), SniResult::NoSni);
        // An entry of an unknown name type before the host_name.
        let exts = vec![sni_ext(&[(7, b"opaque"), (0, b"b.example")])];
        assert_eq!(
            sni(&records(&browser_hello(&exts), 16384)),
            SniResult::Found(b"b.example")
        );
        // Only unknown name types: scanning goes on past the extension.
        let exts = vec![sni_ext(&[(7, b"opaque")]), ext(0x10, b"\x00\x03\x02h2")];
        assert_eq!(
            sni(&records(&browser_hello(&exts), 16384)),
            SniResult::NoSni
        );
        // A trailing dot is dropped.
        let exts = vec![sni_ext(&[(0, b"Example.com.")])];
        assert_eq!(
            sni(&records(&browser_hello(&exts), 16384)),
            SniResult::Found(b"example.com")
        );
        // Longest name.
        let long = vec![b'a'; 255];
        let exts = vec![sni_ext(&[(0, &long)])];
        assert_eq!(
            sni(&records(&browser_hello(&exts), 16384)),
            SniResult::Found(&[b'a'; 255])
        );
    }

    #[test]
    fn malformed_server_names_are_refused() {
        for name in [
            &b""[..],
            b".",
            b"a b",
            b"a\0b",
            b"caf\xc3\xa9",
            &[b'a'; 256],
        ] {
            let exts = vec![sni_ext(&[(0, name)])];
            assert_eq!(
                sni(&records(&browser_hello(&exts), 16384)),
                SniResult::NotTls,
                "{name:?}"
            );
        }
    }

    #[test]
    fn not_tls() {
        assert_eq!(sni(b"GET / HTTP/1.1\r\n"), SniResult::NotTls);
        assert_eq!(sni(b"\x16\x02"), SniResult::NotTls);
        assert_eq!(sni(b"\x16\x03\x05"), SniResult::NotTls);
        // A ServerHello.
        assert_eq!(sni(&hex("16 03 03 00 04 02 00 00 00")), SniResult::NotTls);
        // Record lengths of 0 and past 2^14.
        assert_eq!(sni(&hex("16 03 01 00 00 01")), SniResult::NotTls);
        assert_eq!(sni(&hex("16 03 01 40 01 01")), SniResult::NotTls);
        // An alert record between handshake fragments.
        let msg = browser_hello(&browser_extensions(b"a.example"));
        let mut rec = records(&msg[..10], 16384);
        rec.extend_from_slice(&[21, 3, 3, 0, 2, 2, 40]);
        assert_eq!(sni(&rec), SniResult::NotTls);
    }

    /// Each length field of the RFC 8448 hello, bent to overrun its container (or to break
    /// a rule on its value), is refused rather than trusted.
    #[test]
    fn bad_lengths_are_refused() {
        let rec = rfc8448_record();
        let cases: &[(usize, &[u8])] = &[
            (5, &[2]),        // handshake type: ServerHello
            (9, &[2, 3]),     // legacy_version 2.3
            (43, &[33]),      // session id longer than 32
            (44, &[0, 7]),    // odd cipher suites length
            (44, &[0, 0]),    // no cipher suites
            (44, &[0, 0xC6]), // cipher suites past the hello
            (52, &[0]),       // no compression methods
            (54, &[0, 0x92]), // extensions past the hello
            (58, &[0, 0x92]), // extension past the extensions
            (60, &[0, 0x0A]), // server name list past the extension
            (63, &[0, 0x07]), // host name past the list
            (63, &[0, 0x00]), // empty host name
        ];
        for (at, bytes) in cases {
            let mut bad = rec.clone();
            bad[*at..*at + bytes.len()].copy_from_slice(bytes);
            assert_eq!(sni(&bad), SniResult::NotTls, "at {at}: {bytes:?}");
        }
        // The fixture itself is fine at those offsets.
        assert_eq!(&rec[54..56], &[0, 0x91]);
        assert_eq!(&rec[58..62], &[0, 0x0b, 0, 0x09]);
        assert_eq!(&rec[62..65], &[0, 0, 6]);
    }

    #[test]
    fn result_is_sticky() {
        let rec = rfc8448_record();
        let mut s = ClientHelloScanner::new();
        assert_eq!(s.feed(&rec), SniResult::Found(b"server"));
        assert_eq!(s.feed(b"garbage"), SniResult::Found(b"server"));
        let mut s = ClientHelloScanner::new();
        assert_eq!(s.feed(b"x"), SniResult::NotTls);
        assert_eq!(s.feed(&rec), SniResult::NotTls);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut out = [0u8; 256];
            let _ = client_hello(&bytes, &mut out);
            // Behind a valid record and handshake header, random bytes reach every field.
            let mut framed = hex("16 03 01 02 00 01 00 01 fc 03 03");
            framed.extend_from_slice(&bytes);
            if let SniResult::Found(name) = client_hello(&framed, &mut out) {
                prop_assert!(!name.is_empty() && name.len() <= 255);
                prop_assert!(name.iter().all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
            }
        }

        /// Any split of the input into feeds gives the one-shot answer.
        #[test]
        fn chunking_does_not_matter(
            cuts in proptest::collection::vec(0usize..1600, 0..6),
            max in 1usize..2000,
            corrupt in proptest::option::of((0usize..1600, any::<u8>())),
        ) {
            let mut stream = records(&browser_hello(&browser_extensions(b"split.example")), max);
            if let Some((at, b)) = corrupt {
                let at = at % stream.len();
                stream[at] = b;
            }
            let whole = sni(&stream);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % stream.len()).collect();
            cuts.sort_unstable();
            let mut s = ClientHelloScanner::new();
            let mut last = 0;
            for c in cuts {
                let _ = s.feed(&stream[last..c]);
                last = c;
            }
            prop_assert_eq!(s.feed(&stream[last..]), whole);
        }
    }
}

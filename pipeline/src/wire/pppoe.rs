//! PPPoE's session stage as the workers see it (RFC 2516 section 4, RFC 1661 section 2):
//! each datagram of a session follows a 6-byte PPPoE header and PPP's 2-byte protocol field.
//! The workers take these 8 bytes off on receipt and put them on to transmit; discovery and
//! PPP's control protocols are the control thread's client (`crate::pppoe`).

use super::bytes::{read_u16, write_u16};
use super::{Result, WireError};

mod field {
    use core::ops::Range;
    pub const SESSION_ID: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const PROTOCOL: Range<usize> = 6..8;
}

/// The PPPoE header: version and type (one byte), code, session id, payload length.
pub const HEADER_LEN: usize = 6;
/// What a session frame carries before its datagram: the PPPoE header and the PPP protocol.
pub const OVERHEAD: usize = HEADER_LEN + 2;
/// Version 1, type 1: the only ones RFC 2516 defines.
pub const VERSION_TYPE: u8 = 0x11;
/// A session-stage frame's code.
pub const CODE_SESSION: u8 = 0x00;
/// PPP's protocol numbers for IPv4 datagrams (RFC 1332) and IPv6 ones (RFC 5072).
pub const PPP_IPV4: u16 = 0x0021;
pub const PPP_IPV6: u16 = 0x0057;

/// A session frame's header, checked against the bytes it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionHeader {
    pub session_id: u16,
    /// The PPP protocol of the payload.
    pub protocol: u16,
    /// Bytes of PPP payload after the protocol field: the datagram's length for IPv4.
    pub payload_len: usize,
}

/// Reads the header of a session-stage frame from `bytes`, which start after the Ethernet
/// header. Refused: a version, type or code that is not a session frame's, and a length that
/// cannot hold the PPP protocol or runs past `bytes` (what follows it is Ethernet padding).
#[inline]
pub fn parse_session(bytes: &[u8]) -> Result<SessionHeader> {
    if bytes.len() < OVERHEAD {
        return Err(WireError::Truncated);
    }
    if bytes[0] != VERSION_TYPE || bytes[1] != CODE_SESSION {
        return Err(WireError::Unsupported);
    }
    let length = usize::from(read_u16(bytes, field::LENGTH));
    if length < 2 || HEADER_LEN + length > bytes.len() {
        return Err(WireError::Truncated);
    }
    Ok(SessionHeader {
        session_id: read_u16(bytes, field::SESSION_ID),
        protocol: read_u16(bytes, field::PROTOCOL),
        payload_len: length - 2,
    })
}

/// Writes the 8 bytes before a datagram of `payload_len` bytes and PPP `protocol` in
/// session `session_id`.
#[inline]
pub fn write_session(out: &mut [u8; OVERHEAD], session_id: u16, protocol: u16, payload_len: u16) {
    out[0] = VERSION_TYPE;
    out[1] = CODE_SESSION;
    write_u16(out, field::SESSION_ID, session_id);
    write_u16(out, field::LENGTH, payload_len.saturating_add(2));
    write_u16(out, field::PROTOCOL, protocol);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_written_header_reads_back() {
        let mut header = [0; OVERHEAD];
        write_session(&mut header, 0x1234, PPP_IPV4, 40);
        let mut frame = header.to_vec();
        frame.extend([0x45; 40]);
        assert_eq!(
            parse_session(&frame),
            Ok(SessionHeader {
                session_id: 0x1234,
                protocol: PPP_IPV4,
                payload_len: 40
            })
        );
        // Ethernet padding after the payload is not part of it.
        frame.extend([0; 6]);
        assert_eq!(parse_session(&frame).map(|h| h.payload_len), Ok(40));
    }

    #[test]
    fn bad_lengths_versions_and_codes_are_refused() {
        let mut header = [0; OVERHEAD];
        write_session(&mut header, 7, PPP_IPV4, 40);
        // The length claims 42 bytes, 10 are there.
        let short = [&header[..], &[0x45; 8]].concat();
        assert_eq!(parse_session(&short), Err(WireError::Truncated));
        // A length of 1 cannot hold the protocol.
        let mut tiny = header;
        tiny[4..6].copy_from_slice(&1_u16.to_be_bytes());
        assert_eq!(parse_session(&tiny), Err(WireError::Truncated));
        assert_eq!(parse_session(&header[..5]), Err(WireError::Truncated));
        let mut version = header;
        version[0] = 0x21;
        assert_eq!(parse_session(&version), Err(WireError::Unsupported));
        let mut padt = header;
        padt[1] = 0xa7;
        assert_eq!(parse_session(&padt), Err(WireError::Unsupported));
    }

    proptest! {
        #[test]
        fn no_byte_string_panics_and_what_is_accepted_fits(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(header) = parse_session(&bytes) {
                prop_assert!(OVERHEAD + header.payload_len <= bytes.len());
            }
        }
    }
}

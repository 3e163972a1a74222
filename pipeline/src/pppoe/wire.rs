//! The bytes of PPPoE (RFC 2516) and of the PPP control protocols a client speaks over it:
//! LCP (RFC 1661), PAP (RFC 1334), CHAP (RFC 1994), IPCP (RFC 1332, RFC 1877) and IPv6CP (RFC 5072).
//!
//! Every parser here takes bytes straight off the wire and returns a view that borrows them, or
//! a [`ParseError`]: no length a peer writes is trusted before it is checked against the bytes
//! that are really there, so no input can make a parser panic or read out of bounds. The
//! builders return owned frames, because the client hands them to the gateway to transmit.

use std::net::Ipv4Addr;

/// The EtherTypes of the discovery stage (PADI, PADO, PADR, PADS, PADT) and of session
/// frames, and PPP's number for IPv4, as the workers' framing (`crate::wire::pppoe`) has them.
pub use crate::wire::ethernet::ethertype::{
    PPPOE_DISCOVERY as ETHERTYPE_DISCOVERY, PPPOE_SESSION as ETHERTYPE_SESSION,
};
pub use crate::wire::pppoe::{HEADER_LEN as PPPOE_HEADER_LEN, PPP_IPV4, PPP_IPV6, VERSION_TYPE};

/// PPP protocol numbers (the two bytes before every PPP packet).
pub const PPP_IPCP: u16 = 0x8021;
pub const PPP_IPV6CP: u16 = 0x8057;
pub const PPP_CCP: u16 = 0x80fd;
pub const PPP_LCP: u16 = 0xc021;
pub const PPP_PAP: u16 = 0xc023;
pub const PPP_CHAP: u16 = 0xc223;

pub const ETHERNET_HEADER_LEN: usize = crate::wire::ethernet::HEADER_LEN;
/// Where the PPPoE payload starts in an untagged frame.
pub const PPPOE_PAYLOAD_OFFSET: usize = ETHERNET_HEADER_LEN + PPPOE_HEADER_LEN;
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// The `code` byte of the PPPoE header.
pub mod code {
    /// Session-stage frames (PPP inside) carry code 0.
    pub const SESSION: u8 = 0x00;
    pub const PADO: u8 = 0x07;
    pub const PADI: u8 = 0x09;
    pub const PADR: u8 = 0x19;
    pub const PADS: u8 = 0x65;
    pub const PADT: u8 = 0xa7;
}

/// Discovery tag types (RFC 2516 appendix A).
pub mod tag {
    pub const END_OF_LIST: u16 = 0x0000;
    pub const SERVICE_NAME: u16 = 0x0101;
    pub const AC_NAME: u16 = 0x0102;
    pub const HOST_UNIQ: u16 = 0x0103;
    pub const AC_COOKIE: u16 = 0x0104;
    pub const VENDOR_SPECIFIC: u16 = 0x0105;
    pub const RELAY_SESSION_ID: u16 = 0x0110;
    /// RFC 4638: the largest PPP payload the client can carry (2 bytes), echoed by an AC
    /// that allows one above 1492.
    pub const PPP_MAX_PAYLOAD: u16 = 0x0120;
    pub const SERVICE_NAME_ERROR: u16 = 0x0201;
    pub const AC_SYSTEM_ERROR: u16 = 0x0202;
    pub const GENERIC_ERROR: u16 = 0x0203;
}

/// Codes shared by LCP and the NCPs (IPCP), RFC 1661 section 5. Codes 8 and up are LCP's only.
pub mod control {
    pub const CONFIGURE_REQUEST: u8 = 1;
    pub const CONFIGURE_ACK: u8 = 2;
    pub const CONFIGURE_NAK: u8 = 3;
    pub const CONFIGURE_REJECT: u8 = 4;
    pub const TERMINATE_REQUEST: u8 = 5;
    pub const TERMINATE_ACK: u8 = 6;
    pub const CODE_REJECT: u8 = 7;
    pub const PROTOCOL_REJECT: u8 = 8;
    pub const ECHO_REQUEST: u8 = 9;
    pub const ECHO_REPLY: u8 = 10;
    pub const DISCARD_REQUEST: u8 = 11;
}

/// LCP configuration option types (RFC 1661 section 6).
pub mod lcp_option {
    pub const MRU: u8 = 1;
    pub const ACCM: u8 = 2;
    pub const AUTH_PROTOCOL: u8 = 3;
    pub const QUALITY_PROTOCOL: u8 = 4;
    pub const MAGIC_NUMBER: u8 = 5;
    pub const PROTOCOL_FIELD_COMPRESSION: u8 = 7;
    pub const ADDRESS_CONTROL_FIELD_COMPRESSION: u8 = 8;
}

/// IPv6CP configuration option types (RFC 5072 section 4).
pub mod ipv6cp_option {
    pub const INTERFACE_IDENTIFIER: u8 = 1;
    pub const IPV6_COMPRESSION_PROTOCOL: u8 = 2;
}

/// IPCP configuration option types (RFC 1332, DNS from RFC 1877).
pub mod ipcp_option {
    pub const IP_COMPRESSION_PROTOCOL: u8 = 2;
    pub const IP_ADDRESS: u8 = 3;
    pub const PRIMARY_DNS: u8 = 129;
    pub const PRIMARY_NBNS: u8 = 130;
    pub const SECONDARY_DNS: u8 = 131;
    pub const SECONDARY_NBNS: u8 = 132;
}

/// PAP codes (RFC 1334 section 2.2).
pub mod pap {
    pub const AUTHENTICATE_REQUEST: u8 = 1;
    pub const AUTHENTICATE_ACK: u8 = 2;
    pub const AUTHENTICATE_NAK: u8 = 3;
}

/// CHAP codes (RFC 1994 section 4), and the one algorithm we answer.
pub mod chap {
    pub const CHALLENGE: u8 = 1;
    pub const RESPONSE: u8 = 2;
    pub const SUCCESS: u8 = 3;
    pub const FAILURE: u8 = 4;
    /// The Auth-Protocol option's algorithm byte for CHAP with MD5.
    pub const ALGORITHM_MD5: u8 = 5;
}

/// Why received bytes were refused. The client counts all of them as `malformed`; the
/// variants say which check failed, for tests and for anyone debugging a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than the fixed headers it must start with.
    Truncated,
    /// An Ethernet frame whose ethertype is neither PPPoE discovery nor session.
    NotPppoe,
    /// PPPoE ver/type other than 1/1.
    BadVersionType,
    /// A length field that points past the bytes received, or below its own header.
    BadLength,
    /// A PPPoE code that does not belong to the frame's ethertype.
    BadCode,
    /// A discovery tag cut short by the end of the payload.
    BadTag,
    /// A configuration option shorter than 2 bytes or reaching past its packet.
    BadOption,
}

/// A cursor over received bytes whose every read checks the length first, so that the parsers
/// above it cannot index out of bounds whatever they are fed.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.rest.split_at_checked(len)?;
        self.rest = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        let [byte] = self.array::<1>()?;
        Some(byte)
    }

    fn u16(&mut self) -> Option<u16> {
        self.array::<2>().map(u16::from_be_bytes)
    }

    fn rest(self) -> &'a [u8] {
        self.rest
    }
}

/// A value's length as the u16 a header carries. Values longer than that cannot be sent; the
/// builders cut them at `u16::MAX` rather than write a length that lies.
fn clamp_u16(bytes: &[u8]) -> &[u8] {
    bytes.get(..usize::from(u16::MAX)).unwrap_or(bytes)
}

/// The same for one-byte lengths (PAP's peer id and password, CHAP's value and option sizes).
fn clamp_u8(bytes: &[u8]) -> &[u8] {
    bytes.get(..usize::from(u8::MAX)).unwrap_or(bytes)
}

fn len_u16(bytes: &[u8]) -> u16 {
    u16::try_from(bytes.len()).unwrap_or(u16::MAX)
}

/// The Ethernet and PPPoE headers of a received frame, and the payload the PPPoE length
/// delimits (Ethernet padding after it is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PppoeFrame<'a> {
    pub destination: [u8; 6],
    pub source: [u8; 6],
    pub ethertype: u16,
    pub code: u8,
    pub session_id: u16,
    pub payload: &'a [u8],
}

impl<'a> PppoeFrame<'a> {
    /// Parses an untagged Ethernet frame. Refuses a ver/type other than 0x11, a length past the
    /// received bytes, a session frame whose code is not 0 and a discovery frame whose code is.
    pub fn parse(frame: &'a [u8]) -> Result<PppoeFrame<'a>, ParseError> {
        let mut reader = Reader::new(frame);
        let (Some(destination), Some(source), Some(ethertype)) =
            (reader.array::<6>(), reader.array::<6>(), reader.u16())
        else {
            return Err(ParseError::Truncated);
        };
        if ethertype != ETHERTYPE_DISCOVERY && ethertype != ETHERTYPE_SESSION {
            return Err(ParseError::NotPppoe);
        }
        let (Some(version_type), Some(code), Some(session_id), Some(length)) =
            (reader.u8(), reader.u8(), reader.u16(), reader.u16())
        else {
            return Err(ParseError::Truncated);
        };
        if version_type != VERSION_TYPE {
            return Err(ParseError::BadVersionType);
        }
        let is_session = ethertype == ETHERTYPE_SESSION;
        if is_session != (code == code::SESSION) {
            return Err(ParseError::BadCode);
        }
        let payload = reader
            .take(usize::from(length))
            .ok_or(ParseError::BadLength)?;
        Ok(PppoeFrame {
            destination,
            source,
            ethertype,
            code,
            session_id,
            payload,
        })
    }
}

/// Builds a complete untagged Ethernet frame with a PPPoE header in front of `payload`.
fn pppoe_frame(
    destination: [u8; 6],
    source: [u8; 6],
    ethertype: u16,
    code: u8,
    session_id: u16,
    payload: &[u8],
) -> Vec<u8> {
    let payload = clamp_u16(payload);
    let mut frame = Vec::with_capacity(PPPOE_PAYLOAD_OFFSET + payload.len());
    frame.extend_from_slice(&destination);
    frame.extend_from_slice(&source);
    frame.extend_from_slice(&ethertype.to_be_bytes());
    frame.push(VERSION_TYPE);
    frame.push(code);
    frame.extend_from_slice(&session_id.to_be_bytes());
    frame.extend_from_slice(&len_u16(payload).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// A discovery frame (PADI, PADO, PADR, PADS, PADT) whose payload is `tags`, as written by
/// [`push_tag`].
pub fn discovery_frame(
    destination: [u8; 6],
    source: [u8; 6],
    code: u8,
    session_id: u16,
    tags: &[u8],
) -> Vec<u8> {
    pppoe_frame(
        destination,
        source,
        ETHERTYPE_DISCOVERY,
        code,
        session_id,
        tags,
    )
}

/// A session frame carrying one PPP packet: the protocol number, then `information`.
pub fn session_frame(
    destination: [u8; 6],
    source: [u8; 6],
    session_id: u16,
    protocol: u16,
    information: &[u8],
) -> Vec<u8> {
    let information = clamp_u16(information);
    let mut ppp = Vec::with_capacity(2 + information.len());
    ppp.extend_from_slice(&protocol.to_be_bytes());
    ppp.extend_from_slice(information);
    pppoe_frame(
        destination,
        source,
        ETHERTYPE_SESSION,
        code::SESSION,
        session_id,
        &ppp,
    )
}

/// Appends one discovery tag (type, length, value).
pub fn push_tag(tags: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let value = clamp_u16(value);
    tags.extend_from_slice(&kind.to_be_bytes());
    tags.extend_from_slice(&len_u16(value).to_be_bytes());
    tags.extend_from_slice(value);
}

/// One discovery tag of a validated [`Tags`] list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag<'a> {
    pub kind: u16,
    pub value: &'a [u8],
}

/// The tags of a discovery payload, checked once by [`Tags::parse`] so that looking them up
/// afterwards cannot fail. Borrowed, not collected: a PADO may carry many tags and none of
/// them needs to be copied to decide whether we want it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tags<'a> {
    bytes: &'a [u8],
}

impl<'a> Tags<'a> {
    /// Checks that the payload is a whole number of tags. An End-Of-List tag ends the list:
    /// whatever follows it is not looked at (RFC 2516 lets it end a list early).
    pub fn parse(payload: &'a [u8]) -> Result<Tags<'a>, ParseError> {
        let mut reader = Reader::new(payload);
        let mut consumed = 0usize;
        while !reader.is_empty() {
            let (Some(kind), Some(len)) = (reader.u16(), reader.u16()) else {
                return Err(ParseError::BadTag);
            };
            if kind == tag::END_OF_LIST {
                break;
            }
            reader.take(usize::from(len)).ok_or(ParseError::BadTag)?;
            consumed += 4 + usize::from(len);
        }
        let bytes = payload.get(..consumed).ok_or(ParseError::BadTag)?;
        Ok(Tags { bytes })
    }

    pub fn iter(&self) -> impl Iterator<Item = Tag<'a>> {
        let mut reader = Reader::new(self.bytes);
        std::iter::from_fn(move || {
            let kind = reader.u16()?;
            let len = reader.u16()?;
            let value = reader.take(usize::from(len))?;
            Some(Tag { kind, value })
        })
    }

    /// The value of the first tag of that type.
    pub fn first(&self, kind: u16) -> Option<&'a [u8]> {
        self.iter().find(|t| t.kind == kind).map(|t| t.value)
    }

    /// Every value of that type: a PADO lists each service it offers in its own tag.
    pub fn all(&self, kind: u16) -> impl Iterator<Item = &'a [u8]> {
        self.iter().filter(move |t| t.kind == kind).map(|t| t.value)
    }

    /// The type of the first error tag (Service-Name-Error, AC-System-Error, Generic-Error).
    pub fn error(&self) -> Option<u16> {
        self.iter()
            .map(|t| t.kind)
            .find(|k| (tag::SERVICE_NAME_ERROR..=tag::GENERIC_ERROR).contains(k))
    }
}

/// The PPP packet in a session frame's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PppPacket<'a> {
    pub protocol: u16,
    pub information: &'a [u8],
}

impl<'a> PppPacket<'a> {
    /// Reads the 2-byte protocol field. RFC 2516 forbids protocol-field compression on PPPoE
    /// (and we reject the option), so the field is always two bytes.
    pub fn parse(payload: &'a [u8]) -> Result<PppPacket<'a>, ParseError> {
        let mut reader = Reader::new(payload);
        let protocol = reader.u16().ok_or(ParseError::Truncated)?;
        Ok(PppPacket {
            protocol,
            information: reader.rest(),
        })
    }
}

/// The code/identifier/length packet that LCP, IPCP, PAP and CHAP all share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlPacket<'a> {
    pub code: u8,
    pub identifier: u8,
    /// The bytes after the 4-byte header, up to the packet's Length.
    pub data: &'a [u8],
    /// The whole packet, header included, up to its Length: what a Code-Reject sends back.
    pub packet: &'a [u8],
}

impl<'a> ControlPacket<'a> {
    /// Refuses a Length below the header's own 4 bytes or past the information received.
    /// Bytes after Length are padding (RFC 1661 section 5) and are dropped.
    pub fn parse(information: &'a [u8]) -> Result<ControlPacket<'a>, ParseError> {
        let mut reader = Reader::new(information);
        let (Some(code), Some(identifier), Some(length)) = (reader.u8(), reader.u8(), reader.u16())
        else {
            return Err(ParseError::Truncated);
        };
        let data_len = usize::from(length)
            .checked_sub(4)
            .ok_or(ParseError::BadLength)?;
        let data = reader.take(data_len).ok_or(ParseError::BadLength)?;
        let packet = information
            .get(..usize::from(length))
            .ok_or(ParseError::BadLength)?;
        Ok(ControlPacket {
            code,
            identifier,
            data,
            packet,
        })
    }
}

/// The information field of a control packet: header, then `data`. `data` longer than a
/// Length can say is cut.
pub fn control_packet(code: u8, identifier: u8, data: &[u8]) -> Vec<u8> {
    let data = data.get(..usize::from(u16::MAX) - 4).unwrap_or(data);
    let mut packet = Vec::with_capacity(4 + data.len());
    packet.push(code);
    packet.push(identifier);
    packet.extend_from_slice(&len_u16(data).saturating_add(4).to_be_bytes());
    packet.extend_from_slice(data);
    packet
}

/// One configuration option of a validated [`Options`] list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigOption<'a> {
    pub kind: u8,
    /// The bytes after type and length.
    pub value: &'a [u8],
    /// The whole option, type and length included: what a Configure-Reject sends back.
    pub raw: &'a [u8],
}

impl ConfigOption<'_> {
    /// The value as a big-endian u16, if it is exactly two bytes (MRU).
    pub fn value_u16(&self) -> Option<u16> {
        <[u8; 2]>::try_from(self.value).ok().map(u16::from_be_bytes)
    }

    /// The value as a big-endian u32, if it is exactly four bytes (Magic-Number).
    pub fn value_u32(&self) -> Option<u32> {
        <[u8; 4]>::try_from(self.value).ok().map(u32::from_be_bytes)
    }

    /// The value as an IPv4 address, if it is exactly four bytes (IP-Address, DNS).
    pub fn value_ipv4(&self) -> Option<Ipv4Addr> {
        <[u8; 4]>::try_from(self.value).ok().map(Ipv4Addr::from)
    }
}

/// The options of a Configure-Request/Ack/Nak/Reject, checked once by [`Options::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options<'a> {
    bytes: &'a [u8],
}

impl<'a> Options<'a> {
    /// Refuses an option whose length is below 2 (it could not even hold its own type and
    /// length, and would loop a naive parser forever) or that reaches past the packet.
    pub fn parse(data: &'a [u8]) -> Result<Options<'a>, ParseError> {
        let mut reader = Reader::new(data);
        while !reader.is_empty() {
            let (Some(_kind), Some(len)) = (reader.u8(), reader.u8()) else {
                return Err(ParseError::BadOption);
            };
            let value_len = usize::from(len)
                .checked_sub(2)
                .ok_or(ParseError::BadOption)?;
            reader.take(value_len).ok_or(ParseError::BadOption)?;
        }
        Ok(Options { bytes: data })
    }

    pub fn iter(&self) -> impl Iterator<Item = ConfigOption<'a>> {
        let mut rest = self.bytes;
        std::iter::from_fn(move || {
            let mut reader = Reader::new(rest);
            let kind = reader.u8()?;
            let len = usize::from(reader.u8()?);
            let value = reader.take(len.checked_sub(2)?)?;
            let raw = rest.get(..len)?;
            rest = reader.rest();
            Some(ConfigOption { kind, value, raw })
        })
    }
}

/// Appends one configuration option (type, length, value); values past 253 bytes are cut.
pub fn push_option(options: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let value = value.get(..usize::from(u8::MAX) - 2).unwrap_or(value);
    options.push(kind);
    options.push(u8::try_from(value.len() + 2).unwrap_or(u8::MAX));
    options.extend_from_slice(value);
}

/// The data of a PAP Authenticate-Request. Peer-ID and password each have a one-byte length,
/// so each is cut at 255 bytes.
pub fn pap_request_data(peer_id: &[u8], password: &[u8]) -> Vec<u8> {
    let peer_id = clamp_u8(peer_id);
    let password = clamp_u8(password);
    let mut data = Vec::with_capacity(2 + peer_id.len() + password.len());
    data.push(u8::try_from(peer_id.len()).unwrap_or(u8::MAX));
    data.extend_from_slice(peer_id);
    data.push(u8::try_from(password.len()).unwrap_or(u8::MAX));
    data.extend_from_slice(password);
    data
}

/// The two fields of a PAP Authenticate-Request, for the test AC and for captures.
pub fn parse_pap_request(data: &[u8]) -> Result<(&[u8], &[u8]), ParseError> {
    let mut reader = Reader::new(data);
    let peer_id_len = reader.u8().ok_or(ParseError::Truncated)?;
    let peer_id = reader
        .take(usize::from(peer_id_len))
        .ok_or(ParseError::BadLength)?;
    let password_len = reader.u8().ok_or(ParseError::Truncated)?;
    let password = reader
        .take(usize::from(password_len))
        .ok_or(ParseError::BadLength)?;
    Ok((peer_id, password))
}

/// The value and name of a CHAP Challenge or Response (RFC 1994 section 4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChapValue<'a> {
    pub value: &'a [u8],
    pub name: &'a [u8],
}

impl<'a> ChapValue<'a> {
    /// Refuses an empty value (RFC 1994: at least one octet) or one longer than the data.
    pub fn parse(data: &'a [u8]) -> Result<ChapValue<'a>, ParseError> {
        let mut reader = Reader::new(data);
        let value_len = reader.u8().ok_or(ParseError::Truncated)?;
        if value_len == 0 {
            return Err(ParseError::BadLength);
        }
        let value = reader
            .take(usize::from(value_len))
            .ok_or(ParseError::BadLength)?;
        Ok(ChapValue {
            value,
            name: reader.rest(),
        })
    }
}

/// The data of a CHAP Response or Challenge: value size, value, name.
pub fn chap_value_data(value: &[u8], name: &[u8]) -> Vec<u8> {
    let value = clamp_u8(value);
    let mut data = Vec::with_capacity(1 + value.len() + name.len());
    data.push(u8::try_from(value.len()).unwrap_or(u8::MAX));
    data.extend_from_slice(value);
    data.extend_from_slice(name);
    data
}

/// CHAP-MD5's response value: MD5 over the identifier, the secret, then the challenge
/// (RFC 1994 section 4.1), which proves we know the secret without sending it.
pub fn chap_md5_response(identifier: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    use md5::{Digest, Md5};
    let mut hasher = Md5::new();
    hasher.update([identifier]);
    hasher.update(secret);
    hasher.update(challenge);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
    const AC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

    #[test]
    fn a_discovery_frame_parses_back_to_its_parts() {
        let mut tags = Vec::new();
        push_tag(&mut tags, tag::SERVICE_NAME, b"");
        push_tag(&mut tags, tag::HOST_UNIQ, &[1, 2, 3, 4, 5, 6, 7, 8]);
        push_tag(&mut tags, tag::SERVICE_NAME, b"isp");
        let frame = discovery_frame(BROADCAST_MAC, CLIENT, code::PADI, 0, &tags);
        assert_eq!(
            frame[..PPPOE_PAYLOAD_OFFSET],
            [
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x88, 0x63, 0x11, 0x09, 0, 0,
                0, 23
            ]
        );
        let parsed = PppoeFrame::parse(&frame).unwrap();
        assert_eq!(parsed.code, code::PADI);
        assert_eq!(parsed.source, CLIENT);
        let tags = Tags::parse(parsed.payload).unwrap();
        assert_eq!(
            tags.first(tag::HOST_UNIQ),
            Some(&[1, 2, 3, 4, 5, 6, 7, 8][..])
        );
        let services: Vec<&[u8]> = tags.all(tag::SERVICE_NAME).collect();
        assert_eq!(services, [&b""[..], &b"isp"[..]]);
        assert_eq!(tags.error(), None);
    }

    #[test]
    fn ethernet_padding_after_the_pppoe_length_is_dropped() {
        let mut frame = session_frame(CLIENT, AC, 7, PPP_LCP, &[9, 1, 0, 8, 0, 0, 0, 0]);
        frame.resize(60, 0);
        let parsed = PppoeFrame::parse(&frame).unwrap();
        assert_eq!(parsed.payload.len(), 10);
        let ppp = PppPacket::parse(parsed.payload).unwrap();
        assert_eq!(ppp.protocol, PPP_LCP);
        let packet = ControlPacket::parse(ppp.information).unwrap();
        assert_eq!((packet.code, packet.identifier), (9, 1));
        assert_eq!(packet.data, [0, 0, 0, 0]);
    }

    #[test]
    fn frames_that_lie_about_themselves_are_refused() {
        let good = session_frame(CLIENT, AC, 7, PPP_LCP, &[9, 1, 0, 8, 0, 0, 0, 0]);
        assert_eq!(PppoeFrame::parse(&good[..19]), Err(ParseError::Truncated));
        let mut long = good.clone();
        long[19] += 1;
        assert_eq!(PppoeFrame::parse(&long), Err(ParseError::BadLength));
        let mut version = good.clone();
        version[14] = 0x12;
        assert_eq!(PppoeFrame::parse(&version), Err(ParseError::BadVersionType));
        let mut session_code = good.clone();
        session_code[15] = code::PADT;
        assert_eq!(PppoeFrame::parse(&session_code), Err(ParseError::BadCode));
        let mut ip = good;
        ip[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(PppoeFrame::parse(&ip), Err(ParseError::NotPppoe));
    }

    #[test]
    fn a_truncated_tag_is_refused_and_end_of_list_stops_the_list() {
        assert_eq!(
            Tags::parse(&[0x01, 0x01, 0x00, 0x05, b'a']),
            Err(ParseError::BadTag)
        );
        assert_eq!(Tags::parse(&[0x01, 0x01, 0x00]), Err(ParseError::BadTag));
        let tags = Tags::parse(&[0x01, 0x03, 0, 1, 9, 0, 0, 0, 0, 0xff]).unwrap();
        assert_eq!(tags.iter().count(), 1);
        assert_eq!(tags.first(tag::HOST_UNIQ), Some(&[9][..]));
    }

    #[test]
    fn control_lengths_below_the_header_or_past_the_data_are_refused() {
        assert_eq!(
            ControlPacket::parse(&[1, 1, 0, 3]),
            Err(ParseError::BadLength)
        );
        assert_eq!(
            ControlPacket::parse(&[1, 1, 0, 9, 0, 0]),
            Err(ParseError::BadLength)
        );
        assert_eq!(ControlPacket::parse(&[1, 1, 0]), Err(ParseError::Truncated));
        let packet = ControlPacket::parse(&[1, 1, 0, 5, 7, 0xee]).unwrap();
        assert_eq!(packet.data, [7]);
        assert_eq!(packet.packet, [1, 1, 0, 5, 7]);
    }

    #[test]
    fn options_shorter_than_two_or_past_the_end_are_refused() {
        assert_eq!(Options::parse(&[1, 1]), Err(ParseError::BadOption));
        assert_eq!(Options::parse(&[1, 0]), Err(ParseError::BadOption));
        assert_eq!(Options::parse(&[1, 4, 5]), Err(ParseError::BadOption));
        assert_eq!(Options::parse(&[1]), Err(ParseError::BadOption));
        let mut data = Vec::new();
        push_option(&mut data, lcp_option::MRU, &1492u16.to_be_bytes());
        push_option(&mut data, lcp_option::PROTOCOL_FIELD_COMPRESSION, &[]);
        let options = Options::parse(&data).unwrap();
        let all: Vec<_> = options.iter().collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].value_u16(), Some(1492));
        assert_eq!(all[1].raw, [7, 2]);
        assert_eq!(all[1].value_u16(), None);
    }

    #[test]
    fn pap_and_chap_fields_round_trip() {
        let data = pap_request_data(b"user", b"secret");
        assert_eq!(parse_pap_request(&data), Ok((&b"user"[..], &b"secret"[..])));
        assert_eq!(parse_pap_request(&[5, b'a']), Err(ParseError::BadLength));
        let data = chap_value_data(&[1, 2, 3], b"ac");
        let value = ChapValue::parse(&data).unwrap();
        assert_eq!((value.value, value.name), (&[1, 2, 3][..], &b"ac"[..]));
        assert_eq!(ChapValue::parse(&[0, 1]), Err(ParseError::BadLength));
        assert_eq!(ChapValue::parse(&[4, 1]), Err(ParseError::BadLength));
    }

    #[test]
    fn chap_md5_matches_the_rfc_1994_construction() {
        let mut input = vec![0x2a];
        input.extend_from_slice(b"secret");
        input.extend_from_slice(&[9, 8, 7]);
        let expected: [u8; 16] = <md5::Md5 as md5::Digest>::digest(&input).into();
        assert_eq!(chap_md5_response(0x2a, b"secret", &[9, 8, 7]), expected);
    }
}

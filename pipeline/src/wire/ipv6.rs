//! IPv6 headers (RFC 8200), the extension-header chain between them and the upper layer, and
//! the addresses a router derives (link-local, solicited-node multicast and its MAC).
//!
//! The chain is walked by [`walk_extensions`] with two bounds, a count of headers
//! ([`MAX_EXTENSION_HEADERS`]) and the payload's length, so a packet of nothing but
//! extension headers costs at most that many steps. What a middlebox must refuse is an
//! [`ExtensionError`]: a Type 0 routing header (RFC 5095), a hop-by-hop header anywhere but
//! first, options that overrun their header, a first fragment that does not hold the whole
//! chain through the upper-layer header (RFC 7112).

use std::net::Ipv6Addr;

use super::bytes::{read_u16, read_u32, write_u16, write_u32};
use super::{EthernetAddress, Result, WireError};

/// Next Header values (the IANA "Assigned Internet Protocol Numbers" shared with IPv4).
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AUTH: u8 = 51;
    pub const ICMPV6: u8 = 58;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTIONS: u8 = 60;
    pub const MOBILITY: u8 = 135;
    pub const HIP: u8 = 139;
    pub const SHIM6: u8 = 140;
}

mod field {
    use core::ops::Range;

    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// The fixed header; extension headers follow it inside the payload.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The IPv6 minimum link MTU (RFC 8200 section 5): every link carries this much, so an
/// ICMPv6 error is cut to fit it.
pub const MIN_MTU: usize = 1280;

/// The hop limit of the packets the gateway makes itself, and the one Neighbor Discovery
/// requires (RFC 4861: 255, which proves a packet was not forwarded).
pub const ND_HOP_LIMIT: u8 = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Guarantees `HEADER_LEN + payload_len <= buffer length`, which lets `payload()` slice
    /// without panicking. A payload length of 0 is an empty payload: jumbograms (RFC 2675)
    /// do not fit an Ethernet frame.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != 6 {
            return Err(WireError::BadVersion);
        }
        if HEADER_LEN + usize::from(self.payload_len()) > len {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn first_word(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }

    pub fn version(&self) -> u8 {
        (self.first_word() >> 28) as u8
    }

    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PAYLOAD_LEN)
    }

    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    pub fn src_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::SRC_ADDR)
    }

    pub fn dst_addr(&self) -> Ipv6Addr {
        read_ipv6(self.buffer.as_ref(), field::DST_ADDR)
    }

    /// Extension headers and the upper layer, bounded by the payload length, not the buffer:
    /// short frames carry Ethernet padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_first_word(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::VER_TC_FLOW, value);
    }

    pub fn set_version(&mut self, value: u8) {
        let word = (self.first_word() & 0x0fff_ffff) | (u32::from(value & 0x0f) << 28);
        self.set_first_word(word);
    }

    pub fn set_traffic_class(&mut self, value: u8) {
        let word = (self.first_word() & 0xf00f_ffff) | (u32::from(value) << 20);
        self.set_first_word(word);
    }

    pub fn set_flow_label(&mut self, value: u32) {
        let word = (self.first_word() & 0xfff0_0000) | (value & 0x000f_ffff);
        self.set_first_word(word);
    }

    pub fn set_payload_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, value);
    }

    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = value;
    }

    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = value;
    }

    pub fn set_src_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    pub fn set_dst_addr(&mut self, addr: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    /// The forwarding hop-limit step. IPv6 has no header checksum, so nothing to patch.
    /// False, with the packet untouched, when the hop limit is 0 or 1: the packet must not be
    /// forwarded and the Time Exceeded error quotes it as received (RFC 8200 section 3).
    pub fn decrement_hop_limit(&mut self) -> bool {
        let hop_limit = self.hop_limit();
        if hop_limit <= 1 {
            return false;
        }
        self.set_hop_limit(hop_limit - 1);
        true
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

fn read_ipv6(data: &[u8], at: core::ops::Range<usize>) -> Ipv6Addr {
    let mut octets = [0; 16];
    octets.copy_from_slice(&data[at]);
    Ipv6Addr::from(octets)
}

/// The fixed header's fields, for building packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: u8,
    pub payload_len: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Repr {
        Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len(),
            hop_limit: packet.hop_limit(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
        }
    }

    /// Writes the fixed header into the first [`HEADER_LEN`] bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_first_word(6 << 28);
        packet.set_traffic_class(self.traffic_class);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

/// At most this many extension headers before the upper layer. RFC 8200 names six kinds, each
/// once (destination options twice); a longer chain is an attack on parsers (RFC 7872 found
/// real networks drop far shorter ones), so it is refused rather than walked.
pub const MAX_EXTENSION_HEADERS: usize = 8;

/// Routing header types (IANA "Routing Types").
pub mod routing_type {
    /// Source routing, deprecated by RFC 5095: one packet could bounce between two routers
    /// as often as its addresses listed them.
    pub const TYPE0: u8 = 0;
}

/// Why a packet's extension headers make it unfit to forward. Each becomes a drop reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionError {
    /// A header, or the length it claims, runs past the payload.
    Truncated,
    /// More than [`MAX_EXTENSION_HEADERS`] headers.
    TooMany,
    /// A hop-by-hop options header anywhere but right after the fixed header (RFC 8200 4.1).
    HopByHopNotFirst,
    /// A Type 0 routing header (RFC 5095).
    RoutingType0,
    /// An option in a hop-by-hop or destination options header runs past it.
    MalformedOption,
    /// The first fragment ends before the upper-layer header does (RFC 7112), so ports and
    /// ICMPv6 types cannot be read from it and later fragments cannot be matched to a flow.
    IncompleteFirstFragment,
    /// A second fragment header.
    NestedFragment,
}

/// What a fragment header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// In bytes.
    pub offset: u16,
    pub more: bool,
    pub ident: u32,
}

impl Fragment {
    /// Offset 0 and no more fragments: a whole packet in a fragment header (RFC 6946 says
    /// process it as if unfragmented).
    pub fn is_atomic(&self) -> bool {
        self.offset == 0 && !self.more
    }
}

/// An IPv6 packet's upper layer: its protocol, and where its header is in the packet's
/// payload (past the extension headers); None for a later fragment, which carries none (its
/// first bytes are data, not ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Upper6 {
    pub protocol: u8,
    pub header_at: Option<usize>,
}

/// Where the extension-header chain of a payload leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extensions {
    /// The upper-layer protocol ([`next_header::TCP`], `UDP`, `ICMPV6`, ...), or
    /// [`next_header::NO_NEXT`], or `ESP` (whose contents cannot be read).
    pub protocol: u8,
    /// Where the upper-layer header starts in the payload. For a fragment other than the
    /// first, where the fragment's data starts (no upper-layer header is in it).
    pub offset: usize,
    /// Headers walked.
    pub count: u8,
    pub hop_by_hop: bool,
    /// The routing header's type and segments left, if there is one.
    pub routing: Option<(u8, u8)>,
    pub fragment: Option<Fragment>,
}

impl Extensions {
    /// Ports and message types can be read: not a fragment, or the first one (whose chain
    /// [`walk_extensions`] has checked runs through the upper-layer header), or an atomic one.
    pub fn has_upper_layer_header(&self) -> bool {
        self.fragment.is_none_or(|fragment| fragment.offset == 0)
    }
}

/// The minimum upper-layer header a first fragment must hold, so that the flow's ports or
/// the ICMPv6 type and code are in it (RFC 7112 asks for the whole chain; for TCP, whose
/// options vary, the fixed header is what a flow needs).
fn upper_layer_min_len(protocol: u8) -> usize {
    match protocol {
        next_header::TCP => 20,
        next_header::UDP => 8,
        next_header::ICMPV6 => 4,
        _ => 0,
    }
}

/// Walks the extension headers of an IPv6 payload, starting from the fixed header's Next
/// Header, to the upper-layer protocol. Each step consumes at least 8 bytes and there are at
/// most [`MAX_EXTENSION_HEADERS`], so the walk is bounded whatever the bytes say.
pub fn walk_extensions(
    first: u8,
    payload: &[u8],
) -> core::result::Result<Extensions, ExtensionError> {
    let mut ext = Extensions {
        protocol: first,
        offset: 0,
        count: 0,
        hop_by_hop: false,
        routing: None,
        fragment: None,
    };
    loop {
        let header = &payload[ext.offset.min(payload.len())..];
        let len = match ext.protocol {
            next_header::HOP_BY_HOP | next_header::DEST_OPTIONS => {
                if ext.protocol == next_header::HOP_BY_HOP {
                    if ext.count != 0 {
                        return Err(ExtensionError::HopByHopNotFirst);
                    }
                    ext.hop_by_hop = true;
                }
                let len = generic_len(header)?;
                check_options(&header[2..len])?;
                len
            }
            next_header::ROUTING => {
                let len = generic_len(header)?;
                let (kind, segments_left) = (header[2], header[3]);
                if kind == routing_type::TYPE0 {
                    return Err(ExtensionError::RoutingType0);
                }
                ext.routing = Some((kind, segments_left));
                len
            }
            next_header::FRAGMENT => {
                if ext.fragment.is_some() {
                    return Err(ExtensionError::NestedFragment);
                }
                let Some(fixed) = header.get(..8) else {
                    return Err(ExtensionError::Truncated);
                };
                let offset_flags = u16::from_be_bytes([fixed[2], fixed[3]]);
                let fragment = Fragment {
                    offset: offset_flags & 0xfff8,
                    more: offset_flags & 1 != 0,
                    ident: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
                };
                ext.fragment = Some(fragment);
                if fragment.offset != 0 {
                    // A later fragment: what follows is data, whatever its Next Header says.
                    ext.protocol = fixed[0];
                    ext.offset += 8;
                    ext.count += 1;
                    return Ok(ext);
                }
                8
            }
            next_header::AUTH => {
                // RFC 4302: the length is in 4-byte units, less 2.
                let Some(&units) = header.get(1) else {
                    return Err(ExtensionError::Truncated);
                };
                let len = (usize::from(units) + 2) * 4;
                if len > header.len() {
                    return Err(ExtensionError::Truncated);
                }
                len
            }
            next_header::MOBILITY | next_header::HIP | next_header::SHIM6 => generic_len(header)?,
            protocol => {
                // The upper layer (or ESP, or No Next Header).
                let whole = header.len() >= upper_layer_min_len(protocol);
                if !whole && ext.fragment.is_some_and(|fragment| fragment.more) {
                    return Err(ExtensionError::IncompleteFirstFragment);
                }
                return Ok(ext);
            }
        };
        if usize::from(ext.count) == MAX_EXTENSION_HEADERS {
            return Err(ExtensionError::TooMany);
        }
        ext.protocol = header[0];
        ext.offset += len;
        ext.count += 1;
    }
}

/// The length of an extension header in the RFC 6564 format (Next Header, then the length in
/// 8-byte units not counting the first), checked against what is left of the payload.
fn generic_len(header: &[u8]) -> core::result::Result<usize, ExtensionError> {
    let Some(&units) = header.get(1) else {
        return Err(ExtensionError::Truncated);
    };
    let len = (usize::from(units) + 1) * 8;
    if len > header.len() {
        return Err(ExtensionError::Truncated);
    }
    Ok(len)
}

/// Option types of hop-by-hop and destination options headers (RFC 8200 4.2).
pub mod option {
    pub const PAD1: u8 = 0;
    pub const PADN: u8 = 1;
}

/// Walks the type-length-value options of a hop-by-hop or destination options header (the
/// bytes after its first two): each must fit. Unknown options are left to the host they are
/// for, as a router does with destination options and RFC 8200 lets it do with hop-by-hop.
fn check_options(mut options: &[u8]) -> core::result::Result<(), ExtensionError> {
    while let Some((&kind, rest)) = options.split_first() {
        if kind == option::PAD1 {
            options = rest;
            continue;
        }
        let Some((&len, data)) = rest.split_first() else {
            return Err(ExtensionError::MalformedOption);
        };
        let Some(after) = data.get(usize::from(len)..) else {
            return Err(ExtensionError::MalformedOption);
        };
        options = after;
    }
    Ok(())
}

/// `fe80::/64` with the modified EUI-64 interface identifier of `mac` (RFC 4291 appendix A):
/// the link-local address an interface takes.
pub fn link_local(mac: EthernetAddress) -> Ipv6Addr {
    let [a, b, c, d, e, f] = mac.0;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        a ^ 0x02,
        b,
        c,
        0xff,
        0xfe,
        d,
        e,
        f,
    ])
}

/// `ff02::1:ffXX:XXXX`, the group a Neighbor Solicitation for `addr` is sent to (RFC 4291
/// 2.7.1): the gateway joins it for each of its addresses.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let octets = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, octets[13], octets[14], octets[15],
    ])
}

/// The MAC a multicast group is sent to on Ethernet (RFC 2464 section 7): `33:33` and the
/// group's last 32 bits.
pub fn multicast_mac(group: Ipv6Addr) -> EthernetAddress {
    let octets = group.octets();
    EthernetAddress([0x33, 0x33, octets[12], octets[13], octets[14], octets[15]])
}

/// `fe80::/10`.
pub fn is_link_local(addr: Ipv6Addr) -> bool {
    addr.segments()[0] & 0xffc0 == 0xfe80
}

/// `addr` with the bits past `len` cleared: the prefix it is in.
pub fn prefix_of(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0);
    Ipv6Addr::from(u128::from(addr) & mask)
}

/// `ff02::1`, every node on the link: where unsolicited Router Advertisements go.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// `ff02::2`, every router on the link: where Router Solicitations go.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);

#[cfg(test)]
mod tests {
    use etherparse::{IpNumber, Ipv6ExtensionsSlice, Ipv6Header, PacketBuilder};
    use proptest::prelude::*;

    use super::*;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
    const DST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0x20);

    fn udp_packet(payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ipv6(SRC.octets(), DST.octets(), 61)
            .udp(5353, 53)
            .write(&mut out, payload)
            .unwrap();
        out
    }

    #[test]
    fn header_fields_agree_with_etherparse() {
        let mut bytes = udp_packet(b"hello");
        // A traffic class and flow label of our own, written through etherparse.
        let (mut header, _) = Ipv6Header::from_slice(&bytes).unwrap();
        header.traffic_class = 0xb9;
        header.flow_label = 0xabcde.try_into().unwrap();
        bytes[..HEADER_LEN].copy_from_slice(&header.to_bytes());

        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.version(), 6);
        assert_eq!(packet.traffic_class(), 0xb9);
        assert_eq!((packet.dscp(), packet.ecn()), (0xb9 >> 2, 1));
        assert_eq!(packet.flow_label(), 0xabcde);
        assert_eq!(packet.payload_len(), 8 + 5);
        assert_eq!(packet.next_header(), next_header::UDP);
        assert_eq!(packet.hop_limit(), 61);
        assert_eq!((packet.src_addr(), packet.dst_addr()), (SRC, DST));
        assert_eq!(packet.payload().len(), 13);

        // Emitting the parsed representation gives back the same header bytes.
        let repr = Repr::parse(&packet);
        let mut again = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut again[..]));
        assert_eq!(again[..], bytes[..HEADER_LEN]);
    }

    #[test]
    fn lengths_and_version_are_checked() {
        let bytes = udp_packet(b"hello");
        assert_eq!(
            Packet::new_checked(&bytes[..39]).unwrap_err(),
            WireError::Truncated
        );
        // The payload length claims a byte more than the buffer holds.
        assert_eq!(
            Packet::new_checked(&bytes[..bytes.len() - 1]).unwrap_err(),
            WireError::Truncated
        );
        let mut v4 = bytes.clone();
        v4[0] = 0x45;
        assert_eq!(
            Packet::new_checked(&v4[..]).unwrap_err(),
            WireError::BadVersion
        );
        // Ethernet padding after the payload is not payload.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(
            Packet::new_checked(&padded[..]).unwrap().payload().len(),
            13
        );
    }

    #[test]
    fn hop_limit_stops_at_one() {
        let mut bytes = udp_packet(b"");
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        assert!(packet.decrement_hop_limit());
        assert_eq!(packet.hop_limit(), 60);
        packet.set_hop_limit(1);
        assert!(!packet.decrement_hop_limit());
        assert_eq!(packet.hop_limit(), 1);
    }

    /// An extension header in the generic format: next header, length, then `body` padded to
    /// a multiple of 8 with zeros (PadN-free Pad1s, valid options).
    fn generic(next: u8, body: &[u8]) -> Vec<u8> {
        let len = (2 + body.len()).div_ceil(8) * 8;
        let mut out = vec![next, (len / 8 - 1) as u8];
        out.extend_from_slice(body);
        out.resize(len, 0);
        out
    }

    fn fragment_header(next: u8, offset: u16, more: bool, ident: u32) -> Vec<u8> {
        let mut out = vec![next, 0];
        out.extend_from_slice(&(offset | u16::from(more)).to_be_bytes());
        out.extend_from_slice(&ident.to_be_bytes());
        out
    }

    const UDP_HEADER: [u8; 8] = [0x14, 0xe9, 0, 53, 0, 8, 0, 0];

    #[test]
    fn a_chain_leads_to_its_upper_layer() {
        let mut payload = generic(next_header::DEST_OPTIONS, &[]);
        payload.extend(generic(next_header::ROUTING, &[]));
        payload.extend(generic(next_header::FRAGMENT, &[2, 0]));
        payload.extend(fragment_header(next_header::UDP, 0, false, 7));
        payload.extend(UDP_HEADER);
        let ext = walk_extensions(next_header::HOP_BY_HOP, &payload).unwrap();
        assert_eq!(ext.protocol, next_header::UDP);
        assert_eq!(ext.offset, 8 + 8 + 8 + 8);
        assert_eq!(ext.count, 4);
        assert!(ext.hop_by_hop);
        assert_eq!(ext.routing, Some((2, 0)));
        let fragment = ext.fragment.unwrap();
        assert!(fragment.is_atomic() && ext.has_upper_layer_header());
        assert_eq!(fragment.ident, 7);

        // No extension headers at all.
        let plain = walk_extensions(next_header::UDP, &UDP_HEADER).unwrap();
        assert_eq!((plain.protocol, plain.offset, plain.count), (17, 0, 0));
    }

    #[test]
    fn what_a_router_must_refuse() {
        let udp = |mut chain: Vec<u8>| {
            chain.extend(UDP_HEADER);
            chain
        };
        // RFC 5095: a Type 0 routing header, even with no segments left.
        let rh0 = udp(generic(next_header::UDP, &[routing_type::TYPE0, 0]));
        assert_eq!(
            walk_extensions(next_header::ROUTING, &rh0),
            Err(ExtensionError::RoutingType0)
        );
        // Hop-by-hop after another header.
        let mut late = generic(next_header::HOP_BY_HOP, &[]);
        late.extend(udp(generic(next_header::UDP, &[])));
        assert_eq!(
            walk_extensions(next_header::DEST_OPTIONS, &late),
            Err(ExtensionError::HopByHopNotFirst)
        );
        // Nine destination options headers.
        let mut long = Vec::new();
        for _ in 0..MAX_EXTENSION_HEADERS {
            long.extend(generic(next_header::DEST_OPTIONS, &[]));
        }
        long.extend(udp(generic(next_header::UDP, &[])));
        assert_eq!(
            walk_extensions(next_header::DEST_OPTIONS, &long),
            Err(ExtensionError::TooMany)
        );
        // Eight is allowed.
        let eight = &long[8..];
        assert_eq!(
            walk_extensions(next_header::DEST_OPTIONS, eight).map(|ext| ext.count),
            Ok(8)
        );
        // An option whose length runs past its header (PadN of 10 in 6 bytes).
        let overrun = udp(generic(next_header::UDP, &[option::PADN, 10]));
        assert_eq!(
            walk_extensions(next_header::DEST_OPTIONS, &overrun),
            Err(ExtensionError::MalformedOption)
        );
        // A header claiming more than the payload holds.
        let mut claims = generic(next_header::UDP, &[]);
        claims[1] = 3;
        assert_eq!(
            walk_extensions(next_header::DEST_OPTIONS, &claims),
            Err(ExtensionError::Truncated)
        );
        // A first fragment cut inside its UDP header (RFC 7112).
        let mut cut = fragment_header(next_header::UDP, 0, true, 1);
        cut.extend(&UDP_HEADER[..4]);
        assert_eq!(
            walk_extensions(next_header::FRAGMENT, &cut),
            Err(ExtensionError::IncompleteFirstFragment)
        );
        // Two fragment headers.
        let mut twice = fragment_header(next_header::FRAGMENT, 0, true, 1);
        twice.extend(udp(fragment_header(next_header::UDP, 0, true, 1)));
        assert_eq!(
            walk_extensions(next_header::FRAGMENT, &twice),
            Err(ExtensionError::NestedFragment)
        );
    }

    #[test]
    fn a_later_fragment_ends_the_walk() {
        let mut payload = fragment_header(next_header::UDP, 1232, true, 9);
        payload.extend([0xaa; 3]);
        let ext = walk_extensions(next_header::FRAGMENT, &payload).unwrap();
        assert_eq!((ext.protocol, ext.offset), (next_header::UDP, 8));
        assert!(!ext.has_upper_layer_header());
        assert_eq!(
            ext.fragment,
            Some(Fragment {
                offset: 1232,
                more: true,
                ident: 9
            })
        );
    }

    #[test]
    fn derived_addresses() {
        let mac = EthernetAddress([0x00, 0x1b, 0x21, 0xab, 0xcd, 0xef]);
        assert_eq!(
            link_local(mac),
            "fe80::21b:21ff:feab:cdef".parse::<Ipv6Addr>().unwrap()
        );
        let addr: Ipv6Addr = "2001:db8::12:3456:789a".parse().unwrap();
        assert_eq!(
            solicited_node(addr),
            "ff02::1:ff56:789a".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            multicast_mac(solicited_node(addr)),
            EthernetAddress([0x33, 0x33, 0xff, 0x56, 0x78, 0x9a])
        );
        assert_eq!(
            multicast_mac(ALL_NODES),
            EthernetAddress([0x33, 0x33, 0, 0, 0, 1])
        );
    }

    /// One extension header for the property test: its kind and body length in 8-byte units.
    fn header_kind() -> impl Strategy<Value = (u8, u8)> {
        (
            prop_oneof![
                Just(next_header::HOP_BY_HOP),
                Just(next_header::DEST_OPTIONS),
                Just(next_header::ROUTING),
                Just(next_header::FRAGMENT),
                Just(next_header::AUTH),
            ],
            0u8..3,
        )
    }

    proptest! {
        /// Chains of valid headers, as etherparse walks them: the same upper-layer protocol
        /// and offset wherever etherparse walks the whole chain (it stops early at a kind it
        /// has seen, so it checks chains of distinct kinds); which chains we refuse.
        #[test]
        fn chains_agree_with_etherparse(
            kinds in prop::collection::vec(header_kind(), 0..10),
            upper in prop_oneof![Just(next_header::UDP), Just(next_header::TCP), Just(next_header::ICMPV6)],
        ) {
            let mut payload = Vec::new();
            let nexts: Vec<u8> = kinds.iter().skip(1).map(|&(kind, _)| kind).chain([upper]).collect();
            for (&(kind, units), &next) in kinds.iter().zip(&nexts) {
                match kind {
                    next_header::FRAGMENT => payload.extend(fragment_header(next, 0, false, 1)),
                    next_header::AUTH => {
                        let len = (usize::from(units) + 3) * 4;
                        let mut auth = vec![next, units + 1];
                        auth.resize(len, 0);
                        payload.extend(auth);
                    }
                    // Type 4 (segment routing), as an opaque body.
                    next_header::ROUTING => payload.extend(generic(next, &[4, 0, 0, 0, 0, 0])),
                    _ => payload.extend(generic(next, &vec![0; usize::from(units) * 8 + 6])),
                }
            }
            payload.extend([0u8; 20]);
            let first = kinds.first().map_or(upper, |&(kind, _)| kind);
            let ours = walk_extensions(first, &payload);
            let theirs = Ipv6ExtensionsSlice::from_slice(IpNumber(first), &payload);
            if let (Ok(ours), Ok((_, next, rest))) = (&ours, &theirs) {
                if next.0 == upper {
                    prop_assert_eq!(ours.protocol, upper);
                    prop_assert_eq!(ours.offset, payload.len() - rest.len());
                }
            }
            let hop_by_hop_later = kinds.iter().skip(1).any(|&(kind, _)| kind == next_header::HOP_BY_HOP);
            let fragments = kinds.iter().filter(|&&(kind, _)| kind == next_header::FRAGMENT).count();
            let expect_ok = kinds.len() <= MAX_EXTENSION_HEADERS && !hop_by_hop_later && fragments <= 1;
            prop_assert_eq!(ours.is_ok(), expect_ok, "{:?}", ours);
        }

        /// Any bytes: the walk returns (Ok within the payload, or an error), never panics.
        #[test]
        fn arbitrary_bytes_never_panic(first in any::<u8>(), payload in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(ext) = walk_extensions(first, &payload) {
                prop_assert!(ext.offset <= payload.len());
                prop_assert!(usize::from(ext.count) <= MAX_EXTENSION_HEADERS);
            }
            if let Ok(packet) = Packet::new_checked(&payload[..]) {
                prop_assert!(packet.payload().len() + HEADER_LEN <= payload.len());
            }
        }
    }
}

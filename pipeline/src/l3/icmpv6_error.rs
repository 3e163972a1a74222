//! The ICMPv6 errors a router raises (RFC 4443): which kinds, their type and code, which
//! packets may be answered with one (section 2.4 (e)), and the error itself, quoting as much
//! of the offending packet as fits in IPv6's minimum MTU. Routers never fragment IPv6, so
//! Packet Too Big is what path-MTU discovery lives on (RFC 8201): its budget is its own, as
//! IPv4's "fragmentation needed" is (see [`super::icmp_error::IcmpBudget`]).

use std::net::Ipv6Addr;

use crate::l3::icmp_error::IcmpBudget;
use crate::verdict::DropReason;
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ipv6::{self, next_header, walk_extensions, MIN_MTU};
use crate::wire::{ethernet, EthernetAddress, EthernetFrame, Icmpv6Packet, Ipv6Packet, Ipv6Repr};

/// Which ICMPv6 error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmpv6Error {
    /// The hop limit ran out here.
    HopLimitExceeded,
    NoRoute,
    /// The firewall's reject.
    AdminProhibited,
    /// The next link's MTU is smaller than the packet.
    PacketTooBig {
        mtu: u32,
    },
    /// A header field the router cannot process, at `pointer` bytes into the packet.
    ParameterProblem {
        code: u8,
        pointer: u32,
    },
}

impl Icmpv6Error {
    /// IPv4's budgets (see [`IcmpBudget`]): Packet Too Big, which path-MTU discovery lives
    /// on, has its own, as "fragmentation needed" has.
    pub(crate) fn budget(self) -> IcmpBudget {
        match self {
            Icmpv6Error::HopLimitExceeded => IcmpBudget::TimeExceeded,
            Icmpv6Error::NoRoute | Icmpv6Error::ParameterProblem { .. } => IcmpBudget::Unreachable,
            Icmpv6Error::PacketTooBig { .. } => IcmpBudget::FragmentationNeeded,
            Icmpv6Error::AdminProhibited => IcmpBudget::Reject,
        }
    }

    /// The reason the packet the error answers counts as dropped.
    pub fn drop_reason(self) -> DropReason {
        match self {
            Icmpv6Error::HopLimitExceeded => DropReason::TtlExpired,
            Icmpv6Error::NoRoute => DropReason::NoRoute,
            Icmpv6Error::AdminProhibited => DropReason::FirewallReject,
            Icmpv6Error::PacketTooBig { .. } => DropReason::PacketTooBig,
            Icmpv6Error::ParameterProblem { .. } => DropReason::MalformedIpv6,
        }
    }

    /// Type, code and the 32-bit rest of the header.
    pub fn header(self) -> (u8, u8, u32) {
        match self {
            Icmpv6Error::HopLimitExceeded => (
                msg_type::TIME_EXCEEDED,
                icmpv6::time_exceeded_code::HOP_LIMIT,
                0,
            ),
            Icmpv6Error::NoRoute => (
                msg_type::DEST_UNREACHABLE,
                icmpv6::unreach_code::NO_ROUTE,
                0,
            ),
            Icmpv6Error::AdminProhibited => (
                msg_type::DEST_UNREACHABLE,
                icmpv6::unreach_code::ADMIN_PROHIBITED,
                0,
            ),
            Icmpv6Error::PacketTooBig { mtu } => (msg_type::PACKET_TOO_BIG, 0, mtu),
            Icmpv6Error::ParameterProblem { code, pointer } => {
                (msg_type::PARAMETER_PROBLEM, code, pointer)
            }
        }
    }
}

/// RFC 4443 2.4 (e): no error about an ICMPv6 error (nor a Redirect), about a packet to a
/// multicast address or a link-layer multicast or broadcast (but for Packet Too Big, which
/// multicast path-MTU discovery needs), or from an address no reply can go to (unspecified,
/// multicast). `frame` is the Ethernet frame as received.
pub fn may_answer(frame: &[u8], error: Icmpv6Error) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
        return false;
    };
    let src = ip.src_addr();
    if src.is_unspecified() || src.is_multicast() {
        return false;
    }
    let multicast = eth.dst_addr().is_multicast() || ip.dst_addr().is_multicast();
    if multicast && !matches!(error, Icmpv6Error::PacketTooBig { .. }) {
        return false;
    }
    match walk_extensions(ip.next_header(), ip.payload()) {
        Ok(ext) if ext.protocol == next_header::ICMPV6 && ext.has_upper_layer_header() => {
            match ip.payload().get(ext.offset) {
                Some(&kind) => kind >= 128 && kind != msg_type::REDIRECT,
                None => false,
            }
        }
        // Another protocol, or a later fragment (whose first may be an error: only a first
        // fragment can tell, and RFC 4443 answers fragments all the same).
        Ok(_) => true,
        // A chain we cannot read: the answer may be about an error.
        Err(_) => false,
    }
}

/// Writes the error about `original` (an IPv6 packet from its fixed header, as received)
/// into `room` as a whole frame: from `src` (our address on the interface it goes out of)
/// to the original's source, from `src_mac` to `dst_mac`, with as much of the original as
/// keeps the error within 1280 bytes. Returns its length, or `None` if `original` is not
/// IPv6 or `room` cannot hold the headers.
pub fn write_icmpv6_error(
    room: &mut [u8],
    original: &[u8],
    error: Icmpv6Error,
    src: Ipv6Addr,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
) -> Option<usize> {
    let quote_len = quote_len(original, room.len())?;
    room[HEADERS..HEADERS + quote_len].copy_from_slice(&original[..quote_len]);
    finish(room, quote_len, error, src, src_mac, dst_mac)
}

/// [`write_icmpv6_error`] in place: `frame` holds the Ethernet frame to answer, `frame_len`
/// bytes long, and has room after it; the error is written over it. What a worker does,
/// since it has no other buffer.
pub fn turn_into_icmpv6_error(
    frame: &mut [u8],
    frame_len: usize,
    error: Icmpv6Error,
    src: Ipv6Addr,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
) -> Option<usize> {
    let original = frame.get(ethernet::HEADER_LEN..frame_len)?;
    let quote_len = quote_len(original, frame.len())?;
    frame.copy_within(
        ethernet::HEADER_LEN..ethernet::HEADER_LEN + quote_len,
        HEADERS,
    );
    finish(frame, quote_len, error, src, src_mac, dst_mac)
}

/// Ethernet, IPv6 and ICMPv6 headers in front of the quoted packet.
const HEADERS: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + icmpv6::HEADER_LEN;

/// How much of `original` (IPv6 from its fixed header) an error written into `room_len`
/// bytes quotes; None if it is not IPv6 or the headers do not fit.
fn quote_len(original: &[u8], room_len: usize) -> Option<usize> {
    let quoted_ip = Ipv6Packet::new_checked(original).ok()?;
    // RFC 4443 2.4 (c): as much as fits without the error exceeding the minimum MTU.
    let room_for_quote = room_len.checked_sub(HEADERS)?;
    // The packet, not the Ethernet padding after it.
    let whole = ipv6::HEADER_LEN + usize::from(quoted_ip.payload_len());
    Some(
        whole
            .min(MIN_MTU - ipv6::HEADER_LEN - icmpv6::HEADER_LEN)
            .min(room_for_quote),
    )
}

/// Writes the headers in front of the `quote_len` bytes quoted at [`HEADERS`].
fn finish(
    room: &mut [u8],
    quote_len: usize,
    error: Icmpv6Error,
    src: Ipv6Addr,
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
) -> Option<usize> {
    // The quoted packet's source, where the error goes.
    let quoted_src = room.get(HEADERS + 8..HEADERS + 24)?;
    let dst = Ipv6Addr::from(<[u8; 16]>::try_from(quoted_src).ok()?);
    let message_len = icmpv6::HEADER_LEN + quote_len;
    let len = HEADERS + quote_len;
    let frame = &mut room[..len];
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst_addr(dst_mac);
        eth.set_src_addr(src_mac);
        eth.set_ethertype(ethernet::ethertype::IPV6);
    }
    let repr = Ipv6Repr {
        src,
        dst,
        next_header: next_header::ICMPV6,
        // At most 1240 bytes.
        payload_len: message_len as u16,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
    };
    repr.emit(&mut Ipv6Packet::new_unchecked(
        &mut frame[ethernet::HEADER_LEN..],
    ));
    let (kind, code, rest) = error.header();
    let mut message =
        Icmpv6Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN + ipv6::HEADER_LEN..]);
    message.set_msg_type(kind);
    message.set_code(code);
    message.set_rest_of_header(rest);
    message.fill_checksum(src, dst);
    Some(len)
}

#[cfg(test)]
mod tests {
    use etherparse::{Icmpv6Type, PacketBuilder, SlicedPacket, TransportSlice};

    use super::*;

    const GW: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, 1);
    const HOST: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    const FAR: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    const GW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    fn frame(dst_mac: [u8; 6], dst: [u8; 16], payload: usize) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, dst_mac)
            .ipv6(HOST, dst, 1)
            .udp(5000, 53)
            .write(&mut out, &vec![0xab; payload])
            .unwrap();
        out
    }

    fn error_about(original: &[u8], error: Icmpv6Error) -> Vec<u8> {
        let mut room = vec![0u8; 2048];
        let len = write_icmpv6_error(
            &mut room,
            &original[ethernet::HEADER_LEN..],
            error,
            GW,
            EthernetAddress(GW_MAC),
            EthernetAddress(HOST_MAC),
        )
        .unwrap();
        room.truncate(len);
        room
    }

    #[test]
    fn a_packet_too_big_reads_back_in_etherparse() {
        let original = frame(GW_MAC, FAR, 1400);
        let error = error_about(&original, Icmpv6Error::PacketTooBig { mtu: 1280 });
        // Within the minimum MTU, quoting the original's start.
        assert_eq!(error.len() - ethernet::HEADER_LEN, MIN_MTU);
        let parsed = SlicedPacket::from_ethernet(&error).unwrap();
        let Some(TransportSlice::Icmpv6(icmp)) = parsed.transport else {
            panic!("not ICMPv6");
        };
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1280 });
        assert_eq!(icmp.payload(), &original[ethernet::HEADER_LEN..][..1232]);
        let ip = Ipv6Packet::new_checked(&error[ethernet::HEADER_LEN..]).unwrap();
        assert_eq!((ip.src_addr(), ip.dst_addr()), (GW, Ipv6Addr::from(HOST)));
        let message = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert!(message.verify_checksum(GW, Ipv6Addr::from(HOST)));
        assert_eq!(error[..6], HOST_MAC);
        // A small packet is quoted whole.
        let small = frame(GW_MAC, FAR, 10);
        let error = error_about(&small, Icmpv6Error::HopLimitExceeded);
        let parsed = SlicedPacket::from_ethernet(&error).unwrap();
        let Some(TransportSlice::Icmpv6(icmp)) = parsed.transport else {
            panic!("not ICMPv6");
        };
        assert!(matches!(icmp.icmp_type(), Icmpv6Type::TimeExceeded(_)));
        assert_eq!(icmp.payload(), &small[ethernet::HEADER_LEN..]);
    }

    #[test]
    fn what_is_never_answered() {
        let unicast = frame(GW_MAC, FAR, 10);
        assert!(may_answer(&unicast, Icmpv6Error::NoRoute));
        // To a group: only Packet Too Big.
        let group = frame(
            [0x33, 0x33, 0, 0, 0, 1],
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            10,
        );
        assert!(!may_answer(&group, Icmpv6Error::HopLimitExceeded));
        assert!(may_answer(&group, Icmpv6Error::PacketTooBig { mtu: 1280 }));
        // About an error.
        let mut error = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, GW_MAC)
            .ipv6(HOST, FAR, 1)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu: 1280 })
            .write(&mut error, &[0; 48])
            .unwrap();
        assert!(!may_answer(&error, Icmpv6Error::HopLimitExceeded));
        // An echo request is answered.
        let mut echo = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, GW_MAC)
            .ipv6(HOST, FAR, 1)
            .icmpv6_echo_request(1, 1)
            .write(&mut echo, &[])
            .unwrap();
        assert!(may_answer(&echo, Icmpv6Error::HopLimitExceeded));
        // From the unspecified address.
        let mut anonymous = unicast.clone();
        anonymous[ethernet::HEADER_LEN + 8..ethernet::HEADER_LEN + 24].fill(0);
        assert!(!may_answer(&anonymous, Icmpv6Error::NoRoute));
        // Not IPv6 at all, or cut short.
        assert!(!may_answer(&unicast[..40], Icmpv6Error::NoRoute));
    }

    #[test]
    fn a_room_too_small_for_the_headers_is_refused() {
        let original = frame(GW_MAC, FAR, 10);
        let mut room = [0u8; 60];
        assert_eq!(
            write_icmpv6_error(
                &mut room,
                &original[ethernet::HEADER_LEN..],
                Icmpv6Error::NoRoute,
                GW,
                EthernetAddress(GW_MAC),
                EthernetAddress(HOST_MAC),
            ),
            None
        );
        // Not IPv6.
        let mut room = [0u8; 2048];
        assert_eq!(
            write_icmpv6_error(
                &mut room,
                &[0x45; 40],
                Icmpv6Error::NoRoute,
                GW,
                EthernetAddress(GW_MAC),
                EthernetAddress(HOST_MAC)
            ),
            None
        );
    }
}

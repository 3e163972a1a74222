//! ICMPv6 messages (RFC 4443): errors (Packet Too Big above all, since routers never fragment
//! IPv6), echo, and the Neighbor Discovery messages whose bodies [`super::ndisc`] reads.
//! Unlike ICMPv4's, the checksum covers the IPv6 pseudo header, so checking and filling it
//! take the addresses.

use std::net::Ipv6Addr;

use super::bytes::{read_u16, read_u32, write_u16, write_u32};
use super::checksum;
use super::ipv6::next_header;
use super::{Result, WireError};

pub mod msg_type {
    pub const DEST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAMETER_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
    /// Multicast Listener Discovery (RFC 3810): a router's query (v1 and v2 alike), and a
    /// listener's version 2 report.
    pub const MLD_QUERY: u8 = 130;
    pub const MLD_V2_REPORT: u8 = 143;
}

/// Codes for [`msg_type::DEST_UNREACHABLE`].
pub mod unreach_code {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN_PROHIBITED: u8 = 1;
    pub const ADDRESS: u8 = 3;
    pub const PORT: u8 = 4;
    pub const SOURCE_POLICY: u8 = 5;
    pub const REJECT_ROUTE: u8 = 6;
}

/// Codes for [`msg_type::TIME_EXCEEDED`].
pub mod time_exceeded_code {
    pub const HOP_LIMIT: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

/// Codes for [`msg_type::PARAMETER_PROBLEM`].
pub mod param_problem_code {
    pub const HEADER_FIELD: u8 = 0;
    pub const NEXT_HEADER: u8 = 1;
    pub const OPTION: u8 = 2;
    /// RFC 7112: the first fragment lacks part of the header chain.
    pub const INCOMPLETE_CHAIN: u8 = 3;
}

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Type-specific: ident and sequence for echo, the MTU for Packet Too Big, the pointer
    /// for Parameter Problem, unused for other errors, flags for ND messages.
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

/// Type, code, checksum and the type-specific word: every message the gateway reads has them.
pub const HEADER_LEN: usize = field::DATA.start;

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

    /// At least [`HEADER_LEN`] bytes. The buffer is the whole message (the IPv6 payload after
    /// the extension headers): the checksum covers all of it.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn rest_of_header(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::REST)
    }

    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    pub fn echo_seq(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ECHO_SEQ)
    }

    /// Packet Too Big's MTU.
    pub fn mtu(&self) -> u32 {
        self.rest_of_header()
    }

    /// Parameter Problem's offset of the offending byte in the quoted packet.
    pub fn pointer(&self) -> u32 {
        self.rest_of_header()
    }

    /// Errors are types 0-127, informational messages 128-255 (RFC 4443 2.1).
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }

    /// The message after the type-specific word: the quoted packet of an error, an echo's
    /// data, an ND message's target and options.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }

    /// Whether the checksum over the pseudo header of `src` and `dst` and the whole message
    /// is right.
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        let message = self.buffer.as_ref();
        let len = message.len() as u32;
        let sum = checksum::pseudo_header_sum_v6(src, dst, next_header::ICMPV6, len)
            + checksum::sum(message);
        checksum::fold(sum) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_msg_type(&mut self, value: u8) {
        self.buffer.as_mut()[field::TYPE] = value;
    }

    pub fn set_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    pub fn set_rest_of_header(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::REST, value);
    }

    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    pub fn set_echo_seq(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ, value);
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }

    /// Fills the checksum over the pseudo header and the whole buffer: call after the
    /// message is complete.
    pub fn fill_checksum(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        self.set_checksum(0);
        let sum = checksum::l4_checksum_v6(src, dst, next_header::ICMPV6, self.buffer.as_ref());
        self.set_checksum(sum);
    }
}

#[cfg(test)]
mod tests {
    use etherparse::{Icmpv6Header, Icmpv6Type, PacketBuilder};
    use proptest::prelude::*;

    use super::*;
    use crate::wire::ipv6;
    use crate::wire::Ipv6Packet;

    const SRC: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const DST: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);

    fn echo_request(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ipv6(SRC.octets(), DST.octets(), 64)
            .icmpv6_echo_request(ident, seq)
            .write(&mut out, data)
            .unwrap();
        out
    }

    #[test]
    fn echo_fields_and_checksum_agree_with_etherparse() {
        let bytes = echo_request(0x1234, 7, b"ping data");
        let ip = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ip.next_header(), ipv6::next_header::ICMPV6);
        let icmp = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!((icmp.echo_ident(), icmp.echo_seq()), (0x1234, 7));
        assert_eq!(icmp.data(), b"ping data");
        assert!(!icmp.is_error());
        assert!(icmp.verify_checksum(SRC, DST));
        // The checksum covers the addresses (their sum: swapping them changes nothing).
        assert!(!icmp.verify_checksum(SRC, Ipv6Addr::LOCALHOST));

        // Turned into a reply and filled by us, etherparse's checksum agrees.
        let mut reply = ip.payload().to_vec();
        let mut packet = Packet::new_unchecked(&mut reply[..]);
        packet.set_msg_type(msg_type::ECHO_REPLY);
        packet.fill_checksum(DST, SRC);
        let (header, _) = Icmpv6Header::from_slice(&reply).unwrap();
        let theirs = Icmpv6Header::with_checksum(
            Icmpv6Type::EchoReply(etherparse::IcmpEchoHeader { id: 0x1234, seq: 7 }),
            DST.octets(),
            SRC.octets(),
            b"ping data",
        )
        .unwrap();
        assert_eq!(header.checksum, theirs.checksum);
        assert!(Packet::new_checked(&reply[..])
            .unwrap()
            .verify_checksum(DST, SRC));
    }

    #[test]
    fn packet_too_big_carries_its_mtu() {
        let mut message = [0u8; 48];
        let mut packet = Packet::new_unchecked(&mut message[..]);
        packet.set_msg_type(msg_type::PACKET_TOO_BIG);
        packet.set_rest_of_header(1280);
        packet.fill_checksum(SRC, DST);
        let packet = Packet::new_checked(&message[..]).unwrap();
        assert!(packet.is_error());
        assert_eq!(packet.mtu(), 1280);
        assert!(packet.verify_checksum(SRC, DST));
        assert_eq!(
            Packet::new_checked(&message[..7]).unwrap_err(),
            WireError::Truncated
        );
    }

    proptest! {
        /// Whatever the message, a filled checksum verifies and matches etherparse's over the
        /// same pseudo header (the message given to it as an "unknown" type, bytes as they are).
        #[test]
        fn filled_checksums_verify(kind in 0u8..=255, code in any::<u8>(), rest in any::<u32>(), data in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut message = vec![kind, code, 0, 0];
            message.extend(rest.to_be_bytes());
            message.extend(&data);
            let mut packet = Packet::new_unchecked(&mut message[..]);
            packet.fill_checksum(SRC, DST);
            let ours = packet.checksum();
            prop_assert!(Packet::new_unchecked(&message[..]).verify_checksum(SRC, DST));
            let theirs = Icmpv6Type::Unknown { type_u8: kind, code_u8: code, bytes5to8: rest.to_be_bytes() }
                .calc_checksum(SRC.octets(), DST.octets(), &data)
                .unwrap();
            prop_assert_eq!(ours, theirs);
        }
    }
}

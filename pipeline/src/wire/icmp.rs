//! ICMPv4 messages (RFC 792): echo for answering pings, errors for TTL expiry and
//! unreachable destinations.

use super::bytes::{read_u16, read_u32, write_u16, write_u32};
use super::checksum;
use super::{Result, WireError};

pub mod msg_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const SOURCE_QUENCH: u8 = 4;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
    pub const TIMESTAMP: u8 = 13;
    pub const TIMESTAMP_REPLY: u8 = 14;
    pub const INFO_REQUEST: u8 = 15;
    pub const INFO_REPLY: u8 = 16;
}

/// Codes for [`msg_type::DEST_UNREACHABLE`].
pub mod unreach_code {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    pub const FRAG_NEEDED: u8 = 4;
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Codes for [`msg_type::TIME_EXCEEDED`].
pub mod time_exceeded_code {
    pub const TTL_EXPIRED: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

mod field {
    use core::ops::{Range, RangeFrom};

    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    /// Type-specific: ident and sequence for echo, next-hop MTU for "fragmentation needed",
    /// unused (zero) for other errors.
    pub const REST: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    pub const NEXT_HOP_MTU: Range<usize> = 6..8;
    pub const DATA: RangeFrom<usize> = 8..;
}

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

    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::NEXT_HOP_MTU)
    }

    /// Errors quote the offending datagram, so a gateway must never answer an error with
    /// another one (RFC 1812 4.3.2.7).
    pub fn is_error(&self) -> bool {
        use msg_type::*;
        matches!(
            self.msg_type(),
            DEST_UNREACHABLE | SOURCE_QUENCH | REDIRECT | TIME_EXCEEDED | PARAMETER_PROBLEM
        )
    }

    /// Request/reply pairs matched by an identifier, which is what NAT has to translate.
    pub fn is_query(&self) -> bool {
        use msg_type::*;
        matches!(
            self.msg_type(),
            ECHO_REPLY | ECHO_REQUEST | TIMESTAMP | TIMESTAMP_REPLY | INFO_REQUEST | INFO_REPLY
        )
    }

    /// Covers the whole buffer, so pass exactly the ICMP message (the IPv4 payload).
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }

    /// Echo payload, or the quoted IPv4 header and first bytes of an error.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
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

    /// Errors require the unused bytes to be zero; buffers from a pool are not.
    pub fn set_rest_of_header(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::REST, value);
    }

    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    pub fn set_echo_seq(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ECHO_SEQ, value);
    }

    pub fn set_next_hop_mtu(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::NEXT_HOP_MTU, value);
    }

    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(sum);
    }

    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{Icmpv4Header, Icmpv4Type, PacketBuilder};
    use proptest::prelude::*;

    /// The ICMP part of a `ping` echo request.
    const ECHO_REQUEST: [u8; 24] = [
        0x08, 0x00, 0x2d, 0x0a, 0x12, 0x34, 0x00, 0x01, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16,
        0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    ];

    #[test]
    fn parse_echo_request() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(packet.code(), 0);
        assert_eq!(packet.checksum(), 0x2d0a);
        assert!(packet.verify_checksum());
        assert_eq!(packet.echo_ident(), 0x1234);
        assert_eq!(packet.echo_seq(), 1);
        assert_eq!(packet.rest_of_header(), 0x1234_0001);
        assert!(packet.is_query() && !packet.is_error());
        assert_eq!(packet.data(), &ECHO_REQUEST[8..]);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Packet::new_checked(&ECHO_REQUEST[..7]),
            Err(WireError::Truncated)
        );
        assert_eq!(Packet::new_checked(&[][..]), Err(WireError::Truncated));
        let header_only = Packet::new_checked(&ECHO_REQUEST[..8]).unwrap();
        assert!(header_only.data().is_empty());
    }

    #[test]
    fn echo_request_into_reply() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_msg_type(msg_type::ECHO_REPLY);
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        // Only the type byte changed, by 8 in the high byte of the first word.
        assert_eq!(packet.checksum(), 0x2d0a + 0x0800);
        assert_eq!(packet.data(), &ECHO_REQUEST[8..]);
    }

    #[test]
    fn frag_needed_over_garbage() {
        let mut bytes = [0xa5u8; 36];
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_msg_type(msg_type::DEST_UNREACHABLE);
        packet.set_code(unreach_code::FRAG_NEEDED);
        packet.set_rest_of_header(0);
        packet.set_next_hop_mtu(1500);
        packet.data_mut().fill(0x45);
        packet.fill_checksum();
        assert!(packet.is_error() && !packet.is_query());
        assert_eq!(packet.next_hop_mtu(), 1500);
        assert_eq!(packet.rest_of_header(), 1500);
        assert!(packet.verify_checksum());

        let (header, _) = Icmpv4Header::from_slice(&bytes).unwrap();
        assert_eq!(
            header.icmp_type,
            Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1500
                }
            )
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = [0u8; 8];
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_msg_type(msg_type::TIME_EXCEEDED);
        packet.set_code(time_exceeded_code::TTL_EXPIRED);
        packet.set_checksum(0xbeef);
        packet.set_echo_ident(0x0102);
        packet.set_echo_seq(0x0304);
        assert_eq!(packet.msg_type(), msg_type::TIME_EXCEEDED);
        assert_eq!(packet.code(), 0);
        assert_eq!(packet.checksum(), 0xbeef);
        assert_eq!((packet.echo_ident(), packet.echo_seq()), (0x0102, 0x0304));
        assert_eq!(packet.next_hop_mtu(), 0x0304);
        assert_eq!(bytes, [11, 0, 0xbe, 0xef, 1, 2, 3, 4]);
    }

    #[test]
    fn classification() {
        let classify = |ty: u8| {
            let bytes = [ty, 0, 0, 0, 0, 0, 0, 0];
            let packet = Packet::new_unchecked(&bytes[..]);
            (packet.is_error(), packet.is_query())
        };
        for ty in [3, 4, 5, 11, 12] {
            assert_eq!(classify(ty), (true, false), "type {ty}");
        }
        for ty in [0, 8, 13, 14, 15, 16] {
            assert_eq!(classify(ty), (false, true), "type {ty}");
        }
        for ty in [1, 2, 6, 9, 10, 17, 255] {
            assert_eq!(classify(ty), (false, false), "type {ty}");
        }
    }

    #[test]
    fn matches_etherparse() {
        let payload = b"0123456789abcdefXYZ";
        let builder = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .icmpv4_echo_request(0xcafe, 0x0102);
        let mut bytes = Vec::new();
        builder.write(&mut bytes, payload).unwrap();
        let icmp_bytes = &mut bytes[20..];
        let (header, _) = Icmpv4Header::from_slice(icmp_bytes).unwrap();

        let mut packet = Packet::new_checked(&mut icmp_bytes[..]).unwrap();
        assert_eq!(packet.msg_type(), msg_type::ECHO_REQUEST);
        assert_eq!(packet.echo_ident(), 0xcafe);
        assert_eq!(packet.echo_seq(), 0x0102);
        assert_eq!(packet.checksum(), header.checksum);
        assert!(packet.verify_checksum());
        assert_eq!(packet.data(), payload);
        packet.set_checksum(0);
        packet.fill_checksum();
        assert_eq!(packet.checksum(), header.checksum);

        // And etherparse agrees with a reply we build.
        packet.set_msg_type(msg_type::ECHO_REPLY);
        packet.fill_checksum();
        let (reply, _) = Icmpv4Header::from_slice(&icmp_bytes[..]).unwrap();
        let expected = Icmpv4Header::with_checksum(reply.icmp_type.clone(), payload);
        assert_eq!(reply, expected);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(packet) = Packet::new_checked(&bytes[..]) {
                let _ = (packet.msg_type(), packet.code(), packet.checksum());
                let _ = (packet.rest_of_header(), packet.echo_ident(), packet.echo_seq());
                let _ = (packet.next_hop_mtu(), packet.is_error(), packet.is_query());
                let _ = (packet.verify_checksum(), packet.data().len());
                let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
                packet.data_mut().fill(0);
                packet.fill_checksum();
                prop_assert!(packet.verify_checksum());
            }
        }
    }
}

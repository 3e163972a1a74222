//! UDP datagram headers (RFC 768).

use std::net::Ipv4Addr;

use super::bytes::{read_u16, write_u16};
use super::checksum;
use super::ipv4::protocol;
use super::{Result, WireError};

mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// DNS's port, for UDP and TCP.
pub const DNS_PORT: u16 = 53;
/// The DHCP server's UDP port.
pub const DHCP_SERVER_PORT: u16 = 67;
/// The DHCP client's UDP port.
pub const DHCP_CLIENT_PORT: u16 = 68;
/// DHCPv6's server and relay port (RFC 8415 7.2).
pub const DHCPV6_SERVER_PORT: u16 = 547;
/// DHCPv6's client port.
pub const DHCPV6_CLIENT_PORT: u16 = 546;

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

    /// The buffer is the IPv4 payload, already bounded by the IP total length, so a UDP
    /// length past its end is a bad header rather than a short capture.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let udp_len = usize::from(self.len());
        if udp_len < HEADER_LEN || udp_len > len {
            return Err(WireError::BadUdpLength);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field: header plus payload, in bytes.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Bounded by the length field, not the buffer.
    pub fn payload(&self) -> &[u8] {
        &self.datagram()[HEADER_LEN..]
    }

    /// A zero checksum means the sender did not compute one, which IPv4 allows.
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.checksum() == 0 || checksum::l4_checksum(src, dst, protocol::UDP, self.datagram()) == 0
    }

    fn datagram(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    pub fn set_dst_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    pub fn set_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// A computed 0 is sent as 0xffff (the same value in ones' complement), because 0 on the
    /// wire would mean "no checksum".
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let sum = match checksum::l4_checksum(src, dst, protocol::UDP, self.datagram()) {
            0 => 0xffff,
            sum => sum,
        };
        self.set_checksum(sum);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, UdpHeader};
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    /// A DNS query for example.com (A), from port 40000.
    const DNS_QUERY: [u8; 37] = [
        0x9c, 0x40, 0x00, 0x35, 0x00, 0x25, 0x03, 0x17, 0xbe, 0xef, 0x01, 0x00, 0x00, 0x01, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, //
        0x03, 0x63, 0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00, 0x01,
    ];

    #[test]
    fn parse_dns_query() {
        let packet = Packet::new_checked(&DNS_QUERY[..]).unwrap();
        assert_eq!(packet.src_port(), 40000);
        assert_eq!(packet.dst_port(), 53);
        assert_eq!(packet.len(), 37);
        assert_eq!(packet.checksum(), 0x0317);
        assert_eq!(packet.payload(), &DNS_QUERY[8..]);
        assert!(packet.verify_checksum(SRC, DST));
        assert!(!packet.verify_checksum(SRC, Ipv4Addr::new(8, 8, 4, 4)));
    }

    #[test]
    fn payload_bounded_by_length_field() {
        let mut bytes = DNS_QUERY.to_vec();
        bytes.extend_from_slice(&[0; 9]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.payload(), &DNS_QUERY[8..]);
        assert!(packet.verify_checksum(SRC, DST));
    }

    #[test]
    fn check_len_rejects_each_inconsistency() {
        assert_eq!(
            Packet::new_checked(&DNS_QUERY[..7]),
            Err(WireError::Truncated)
        );
        assert_eq!(Packet::new_checked(&[][..]), Err(WireError::Truncated));
        assert_eq!(
            Packet::new_checked(&DNS_QUERY[..36]),
            Err(WireError::BadUdpLength)
        );
        for len in [0u16, 7] {
            let mut bytes = DNS_QUERY;
            bytes[4..6].copy_from_slice(&len.to_be_bytes());
            assert_eq!(Packet::new_checked(bytes), Err(WireError::BadUdpLength));
        }
        let mut bytes = DNS_QUERY;
        bytes[4..6].copy_from_slice(&8u16.to_be_bytes());
        assert!(Packet::new_checked(&bytes[..])
            .unwrap()
            .payload()
            .is_empty());
    }

    #[test]
    fn zero_checksum_means_none() {
        let mut bytes = DNS_QUERY;
        bytes[6..8].fill(0);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.verify_checksum(Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED));
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose the last payload word so that the datagram sums to 0xffff.
        let mut bytes = [0u8; 10];
        bytes[4..6].copy_from_slice(&10u16.to_be_bytes());
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        let partial = checksum::l4_checksum(SRC, DST, protocol::UDP, packet.datagram());
        packet.payload_mut().copy_from_slice(&partial.to_be_bytes());
        assert_eq!(
            checksum::l4_checksum(SRC, DST, protocol::UDP, packet.datagram()),
            0
        );
        packet.fill_checksum(SRC, DST);
        assert_eq!(packet.checksum(), 0xffff);
        assert!(packet.verify_checksum(SRC, DST));
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = [0xffu8; 12];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_src_port(0x0102);
        packet.set_dst_port(0x0304);
        packet.set_len(11);
        packet.set_checksum(0x0506);
        packet.payload_mut().copy_from_slice(b"xyz");
        packet.check_len().unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (0x0102, 0x0304));
        assert_eq!((packet.len(), packet.checksum()), (11, 0x0506));
        assert_eq!(packet.payload(), b"xyz");
        assert_eq!(bytes, [1, 2, 3, 4, 0, 11, 5, 6, b'x', b'y', b'z', 0xff]);
    }

    #[test]
    fn matches_etherparse() {
        let builder = PacketBuilder::ipv4(SRC.octets(), DST.octets(), 64).udp(5353, 53);
        let mut bytes = Vec::new();
        builder.write(&mut bytes, &DNS_QUERY[8..]).unwrap();
        let datagram = &mut bytes[20..];
        let (header, payload) = UdpHeader::from_slice(datagram).unwrap();
        let payload = payload.to_vec();

        let mut packet = Packet::new_checked(&mut datagram[..]).unwrap();
        assert_eq!(packet.src_port(), header.source_port);
        assert_eq!(packet.dst_port(), header.destination_port);
        assert_eq!(packet.len(), header.length);
        assert_eq!(packet.checksum(), header.checksum);
        assert_eq!(packet.payload(), &payload[..]);
        assert!(packet.verify_checksum(SRC, DST));

        packet.set_src_port(40000);
        packet.fill_checksum(SRC, DST);
        let (header, _) = UdpHeader::from_slice(packet.into_inner()).unwrap();
        let expected = header
            .calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), &payload)
            .unwrap();
        assert_eq!(header.checksum, expected);
        assert_eq!(header.checksum, 0x0317);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 0..128),
            plausible_len in any::<bool>(),
        ) {
            // Random length fields almost never fit; half the cases force one that might.
            if plausible_len && bytes.len() >= HEADER_LEN {
                let len = bytes[4] as usize % (bytes.len() + 4);
                bytes[4..6].copy_from_slice(&(len as u16).to_be_bytes());
            }
            if let Ok(packet) = Packet::new_checked(&bytes[..]) {
                let _ = (packet.src_port(), packet.dst_port(), packet.len());
                let _ = (packet.checksum(), packet.payload().len());
                let _ = packet.verify_checksum(SRC, DST);
                let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
                packet.payload_mut().fill(0);
                packet.fill_checksum(SRC, DST);
                prop_assert!(packet.verify_checksum(SRC, DST));
            }
        }
    }
}

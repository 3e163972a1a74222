//! ARP for IPv4 over Ethernet (RFC 826), the only combination a gateway answers.

use std::net::Ipv4Addr;

use super::bytes::{read_ipv4, read_u16, write_u16};
use super::{EthernetAddress, Result, WireError};

mod field {
    use core::ops::Range;

    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;

    pub const HTYPE_ETHERNET: u16 = 1;
    pub const PTYPE_IPV4: u16 = 0x0800;
}

/// Length of an Ethernet/IPv4 ARP packet; frames carry padding after it.
pub const BUFFER_LEN: usize = field::TPA.end;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for Operation {
    fn from(value: u16) -> Operation {
        match value {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => Operation::Unknown(other),
        }
    }
}

impl From<Operation> for u16 {
    fn from(op: Operation) -> u16 {
        match op {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Unknown(other) => other,
        }
    }
}

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

    /// Besides the length, rejects other hardware/protocol types: the address getters assume
    /// 6-byte MACs and 4-byte IPv4 addresses at fixed offsets.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < BUFFER_LEN {
            return Err(WireError::Truncated);
        }
        if self.hardware_type() != field::HTYPE_ETHERNET
            || self.protocol_type() != field::PTYPE_IPV4
            || self.hardware_len() != 6
            || self.protocol_len() != 4
        {
            return Err(WireError::Unsupported);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn hardware_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::HTYPE)
    }

    pub fn protocol_type(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PTYPE)
    }

    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    pub fn operation(&self) -> Operation {
        read_u16(self.buffer.as_ref(), field::OPER).into()
    }

    pub fn sender_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_field(&self.buffer.as_ref()[field::SHA])
    }

    pub fn sender_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SPA)
    }

    pub fn target_hardware_addr(&self) -> EthernetAddress {
        EthernetAddress::from_field(&self.buffer.as_ref()[field::THA])
    }

    pub fn target_protocol_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_hardware_type(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::HTYPE, value);
    }

    pub fn set_protocol_type(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::PTYPE, value);
    }

    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    pub fn set_operation(&mut self, op: Operation) {
        write_u16(self.buffer.as_mut(), field::OPER, op.into());
    }

    pub fn set_sender_hardware_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&addr.0);
    }

    pub fn set_sender_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&addr.octets());
    }

    pub fn set_target_hardware_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&addr.0);
    }

    pub fn set_target_protocol_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&addr.octets());
    }
}

/// An ARP message with the constant htype/ptype/hlen/plen stripped, for the neighbour logic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    pub operation: Operation,
    pub source_hardware_addr: EthernetAddress,
    pub source_protocol_addr: Ipv4Addr,
    pub target_hardware_addr: EthernetAddress,
    pub target_protocol_addr: Ipv4Addr,
}

impl ArpRepr {
    /// Checks the length itself, so an unchecked view is fine too.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ArpRepr> {
        packet.check_len()?;
        Ok(ArpRepr {
            operation: packet.operation(),
            source_hardware_addr: packet.sender_hardware_addr(),
            source_protocol_addr: packet.sender_protocol_addr(),
            target_hardware_addr: packet.target_hardware_addr(),
            target_protocol_addr: packet.target_protocol_addr(),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        BUFFER_LEN
    }

    /// Writes all 28 bytes, so the buffer need not be zeroed first.
    ///
    /// # Panics
    /// If the buffer is shorter than [`BUFFER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_hardware_type(field::HTYPE_ETHERNET);
        packet.set_protocol_type(field::PTYPE_IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_sender_hardware_addr(self.source_hardware_addr);
        packet.set_sender_protocol_addr(self.source_protocol_addr);
        packet.set_target_hardware_addr(self.target_hardware_addr);
        packet.set_target_protocol_addr(self.target_protocol_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The ARP part of a captured request: who has 24.166.173.159? tell 24.166.172.1.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, //
        0x18, 0xa6, 0xac, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x18, 0xa6, 0xad, 0x9f,
    ];

    const SENDER_MAC: EthernetAddress = EthernetAddress([0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54]);

    fn request_repr() -> ArpRepr {
        ArpRepr {
            operation: Operation::Request,
            source_hardware_addr: SENDER_MAC,
            source_protocol_addr: Ipv4Addr::new(24, 166, 172, 1),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Addr::new(24, 166, 173, 159),
        }
    }

    #[test]
    fn parse_captured_request() {
        let packet = Packet::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(packet.hardware_type(), 1);
        assert_eq!(packet.protocol_type(), 0x0800);
        assert_eq!((packet.hardware_len(), packet.protocol_len()), (6, 4));
        assert_eq!(packet.operation(), Operation::Request);
        assert_eq!(packet.sender_hardware_addr(), SENDER_MAC);
        assert_eq!(
            packet.sender_protocol_addr(),
            Ipv4Addr::new(24, 166, 172, 1)
        );
        assert_eq!(packet.target_hardware_addr(), EthernetAddress([0; 6]));
        assert_eq!(
            packet.target_protocol_addr(),
            Ipv4Addr::new(24, 166, 173, 159)
        );
        assert_eq!(ArpRepr::parse(&packet), Ok(request_repr()));
    }

    #[test]
    fn ethernet_padding_is_ignored() {
        let mut padded = [0u8; 46];
        padded[..28].copy_from_slice(&REQUEST);
        let packet = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(ArpRepr::parse(&packet), Ok(request_repr()));
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Packet::new_checked(&REQUEST[..27]),
            Err(WireError::Truncated)
        );
        assert_eq!(Packet::new_checked(&[][..]), Err(WireError::Truncated));
        assert_eq!(
            ArpRepr::parse(&Packet::new_unchecked(&REQUEST[..8])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn other_address_types_are_unsupported() {
        for (offset, value) in [(1, 6), (2, 0x86), (4, 8), (5, 16)] {
            let mut bytes = REQUEST;
            bytes[offset] = value;
            assert_eq!(
                Packet::new_checked(&bytes[..]),
                Err(WireError::Unsupported),
                "byte {offset}"
            );
        }
    }

    #[test]
    fn operations() {
        assert_eq!(Operation::from(1), Operation::Request);
        assert_eq!(Operation::from(2), Operation::Reply);
        assert_eq!(Operation::from(3), Operation::Unknown(3));
        for raw in [0, 1, 2, 3, 0xffff] {
            assert_eq!(u16::from(Operation::from(raw)), raw);
        }
    }

    #[test]
    fn emit_reply_over_garbage() {
        let reply = ArpRepr {
            operation: Operation::Reply,
            source_hardware_addr: EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            source_protocol_addr: Ipv4Addr::new(24, 166, 173, 159),
            target_hardware_addr: SENDER_MAC,
            target_protocol_addr: Ipv4Addr::new(24, 166, 172, 1),
        };
        let mut bytes = [0xa5u8; BUFFER_LEN];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        reply.emit(&mut packet);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(ArpRepr::parse(&packet), Ok(reply));
        assert_eq!(
            &bytes[..8],
            &[0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02]
        );
        assert_eq!(reply.buffer_len(), 28);
    }

    #[test]
    fn emit_reproduces_capture() {
        let mut bytes = [0u8; BUFFER_LEN];
        request_repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, REQUEST);
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = REQUEST;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_operation(Operation::Unknown(9));
        packet.set_sender_hardware_addr(EthernetAddress([1, 2, 3, 4, 5, 6]));
        packet.set_sender_protocol_addr(Ipv4Addr::new(10, 0, 0, 1));
        packet.set_target_hardware_addr(EthernetAddress([7, 8, 9, 10, 11, 12]));
        packet.set_target_protocol_addr(Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(packet.operation(), Operation::Unknown(9));
        assert_eq!(
            packet.sender_hardware_addr(),
            EthernetAddress([1, 2, 3, 4, 5, 6])
        );
        assert_eq!(packet.sender_protocol_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(
            packet.target_hardware_addr(),
            EthernetAddress([7, 8, 9, 10, 11, 12])
        );
        assert_eq!(packet.target_protocol_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(
            packet.into_inner(),
            &[
                0, 1, 8, 0, 6, 4, 0, 9, 1, 2, 3, 4, 5, 6, 10, 0, 0, 1, 7, 8, 9, 10, 11, 12, 10, 0,
                0, 2
            ]
        );
    }

    fn check_all_getters(bytes: &[u8]) {
        if let Ok(packet) = Packet::new_checked(bytes) {
            let _ = (packet.hardware_type(), packet.protocol_type());
            let _ = (packet.hardware_len(), packet.protocol_len());
            let _ = (packet.operation(), packet.sender_hardware_addr());
            let _ = (packet.sender_protocol_addr(), packet.target_hardware_addr());
            let _ = packet.target_protocol_addr();
            ArpRepr::parse(&packet).unwrap();
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            check_all_getters(&bytes);
        }

        #[test]
        fn arbitrary_ethernet_ipv4_arp_never_panics(
            mut bytes in prop::collection::vec(any::<u8>(), 0..128),
        ) {
            // Random bytes almost never carry a valid fixed header; force one to reach Ok.
            let prefix = [0x00, 0x01, 0x08, 0x00, 0x06, 0x04];
            let n = bytes.len().min(prefix.len());
            bytes[..n].copy_from_slice(&prefix[..n]);
            prop_assert_eq!(Packet::new_checked(&bytes[..]).is_ok(), bytes.len() >= BUFFER_LEN);
            check_all_getters(&bytes);
        }
    }
}

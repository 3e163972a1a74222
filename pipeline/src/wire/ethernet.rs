//! Ethernet II frames (no FCS: the NIC strips it).

use super::bytes::{read_u16, write_u16};
use super::{EthernetAddress, Result, WireError};

/// EtherType values the pipeline dispatches on.
pub mod ethertype {
    pub const IPV4: u16 = 0x0800;
    pub const ARP: u16 = 0x0806;
    pub const IPV6: u16 = 0x86dd;
    pub const VLAN: u16 = 0x8100;
    pub const QINQ: u16 = 0x88a8;
    /// PPPoE's discovery stage (PADI, PADO, PADR, PADS, PADT) and its session stage (RFC 2516).
    pub const PPPOE_DISCOVERY: u16 = 0x8863;
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// IEEE 802.3 Slow Protocols, which carries LACP.
    pub const SLOW: u16 = 0x8809;
    pub const LACP: u16 = SLOW;
}

mod field {
    use core::ops::{Range, RangeFrom};

    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

pub const HEADER_LEN: usize = field::PAYLOAD.start;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    pub fn new_checked(buffer: T) -> Result<Frame<T>> {
        let frame = Frame::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
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

    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress::from_field(&self.buffer.as_ref()[field::DST])
    }

    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress::from_field(&self.buffer.as_ref()[field::SRC])
    }

    pub fn ethertype(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// Tagged frames are not ours to handle (no VLAN support); the pipeline counts and drops
    /// them, so it needs to tell them apart from an unknown EtherType.
    pub fn is_vlan_tagged(&self) -> bool {
        matches!(self.ethertype(), ethertype::VLAN | ethertype::QINQ)
    }

    /// Everything after the header, including any padding up to the 60-byte minimum:
    /// the inner protocol's own length field decides where its data ends.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    pub fn set_dst_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&addr.0);
    }

    pub fn set_src_addr(&mut self, addr: EthernetAddress) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&addr.0);
    }

    pub fn set_ethertype(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, value);
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// Writes the Ethernet addresses of a routed frame; a frame too short for a header is left
/// alone (the caller has parsed it already).
#[inline]
pub fn write_l2(frame: &mut [u8], dst: EthernetAddress, src: EthernetAddress) {
    if let Ok(mut frame) = Frame::new_checked(frame) {
        frame.set_dst_addr(dst);
        frame.set_src_addr(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    /// An ARP request as captured on the wire, padded to the 60-byte minimum.
    const ARP_FRAME: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, 0x08, 0x06, //
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54, //
        0x18, 0xa6, 0xac, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x18, 0xa6, 0xad, 0x9f, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_captured_frame() {
        let frame = Frame::new_checked(&ARP_FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), EthernetAddress::BROADCAST);
        assert_eq!(
            frame.src_addr(),
            EthernetAddress([0x00, 0x07, 0x0d, 0xaf, 0xf4, 0x54])
        );
        assert_eq!(frame.ethertype(), ethertype::ARP);
        assert!(!frame.is_vlan_tagged());
        assert_eq!(frame.payload(), &ARP_FRAME[14..]);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            Frame::new_checked(&ARP_FRAME[..13]),
            Err(WireError::Truncated)
        );
        assert_eq!(Frame::new_checked(&[][..]), Err(WireError::Truncated));
        let header_only = Frame::new_checked(&ARP_FRAME[..14]).unwrap();
        assert!(header_only.payload().is_empty());
    }

    #[test]
    fn vlan_tags() {
        let mut bytes = ARP_FRAME;
        let mut frame = Frame::new_unchecked(&mut bytes[..]);
        for (ty, tagged) in [
            (ethertype::VLAN, true),
            (ethertype::QINQ, true),
            (ethertype::IPV4, false),
            (ethertype::LACP, false),
        ] {
            frame.set_ethertype(ty);
            assert_eq!(frame.is_vlan_tagged(), tagged, "{ty:#06x}");
        }
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = [0u8; 20];
        let mut frame = Frame::new_checked(&mut bytes[..]).unwrap();
        let src = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
        let dst = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
        frame.set_src_addr(src);
        frame.set_dst_addr(dst);
        frame.set_ethertype(ethertype::IPV4);
        frame.payload_mut().copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(frame.src_addr(), src);
        assert_eq!(frame.dst_addr(), dst);
        assert_eq!(frame.ethertype(), ethertype::IPV4);
        assert_eq!(
            frame.into_inner(),
            &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0, 1, 2, 3, 4, 5, 6]
        );
    }

    #[test]
    fn matches_etherparse() {
        let src = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let dst = [0x02, 0x66, 0x77, 0x88, 0x99, 0xaa];
        let builder = PacketBuilder::ethernet2(src, dst)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(1000, 2000);
        let mut bytes = Vec::new();
        builder.write(&mut bytes, b"hello").unwrap();
        let (header, rest) = etherparse::Ethernet2Header::from_slice(&bytes).unwrap();

        let frame = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.src_addr().0, header.source);
        assert_eq!(frame.dst_addr().0, header.destination);
        assert_eq!(frame.ethertype(), u16::from(header.ether_type));
        assert_eq!(frame.payload(), rest);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(mut frame) = Frame::new_checked(bytes) {
                let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype());
                let _ = (frame.is_vlan_tagged(), frame.payload().len());
                frame.payload_mut().fill(0);
            }
        }
    }
}

//! IPv4 headers (RFC 791).

use std::net::Ipv4Addr;

use super::bytes::{read_ipv4, read_u16, write_u16};
use super::checksum;
use super::{Result, WireError};

/// IP protocol numbers the pipeline dispatches on.
pub mod protocol {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    /// VRRP (RFC 9568): the adverts of an HA pair's keepalived.
    pub const VRRP: u8 = 112;
}

mod field {
    use core::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;

    pub const DONT_FRAG: u16 = 0x4000;
    pub const MORE_FRAGS: u16 = 0x2000;
    pub const FRAG_OFFSET: u16 = 0x1fff;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The TTL of the packets the gateway makes itself (ICMP errors and replies, resets, DNS
/// answers).
pub const GENERATED_TTL: u8 = 64;

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

    /// Guarantees `header_len <= total_len <= buffer length`, which is what lets `options()`
    /// and `payload()` slice without panicking.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != 4 {
            return Err(WireError::BadVersion);
        }
        let header_len = usize::from(self.header_len());
        if header_len < HEADER_LEN {
            return Err(WireError::BadHeaderLength);
        }
        let total_len = usize::from(self.total_len());
        if header_len > total_len {
            return Err(WireError::BadTotalLength);
        }
        if total_len > len {
            return Err(WireError::Truncated);
        }
        Ok(())
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// In bytes (IHL * 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TOTAL_LEN)
    }

    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & field::DONT_FRAG != 0
    }

    pub fn more_frags(&self) -> bool {
        self.flags_frag() & field::MORE_FRAGS != 0
    }

    /// In bytes, not in the 8-byte units of the wire format.
    pub fn frag_offset(&self) -> u16 {
        (self.flags_frag() & field::FRAG_OFFSET) * 8
    }

    /// Fragments carry no (or a partial) L4 header, so ports cannot be read from them.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn src_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::SRC_ADDR)
    }

    pub fn dst_addr(&self) -> Ipv4Addr {
        read_ipv4(self.buffer.as_ref(), field::DST_ADDR)
    }

    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.header()) == 0
    }

    pub fn options(&self) -> &[u8] {
        &self.header()[HEADER_LEN..]
    }

    /// Bounded by `total_len`, not the buffer: short frames carry Ethernet padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.payload_range()]
    }

    fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.header_len())]
    }

    fn payload_range(&self) -> core::ops::Range<usize> {
        usize::from(self.header_len())..usize::from(self.total_len())
    }

    fn flags_frag(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FLAGS_FRAG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0x0f) | (value << 4);
    }

    /// In bytes; must be a multiple of 4.
    pub fn set_header_len(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::VER_IHL];
        *byte = (*byte & 0xf0) | ((value / 4) & 0x0f);
    }

    pub fn set_dscp(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *byte = (*byte & 0x03) | (value << 2);
    }

    pub fn set_ecn(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *byte = (*byte & 0xfc) | (value & 0x03);
    }

    pub fn set_total_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::TOTAL_LEN, value);
    }

    pub fn set_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flag(field::DONT_FRAG, value);
    }

    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flag(field::MORE_FRAGS, value);
    }

    /// In bytes; must be a multiple of 8.
    pub fn set_frag_offset(&mut self, value: u16) {
        let raw = (self.flags_frag() & !field::FRAG_OFFSET) | (value / 8);
        write_u16(self.buffer.as_mut(), field::FLAGS_FRAG, raw);
    }

    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    pub fn set_protocol(&mut self, value: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = value;
    }

    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    pub fn set_src_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr.octets());
    }

    pub fn set_dst_addr(&mut self, addr: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr.octets());
    }

    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::checksum(self.header());
        self.set_checksum(sum);
    }

    /// The forwarding TTL step, patching the checksum incrementally (RFC 1624) so forwarding
    /// does not re-sum the header.
    ///
    /// Returns false and leaves the packet untouched when the TTL is 0 or 1: such a packet
    /// must not be forwarded (RFC 1812 5.3.1), and the Time Exceeded error should quote it
    /// as received.
    pub fn decrement_ttl(&mut self) -> bool {
        let ttl = self.ttl();
        if ttl <= 1 {
            return false;
        }
        // TTL shares its 16-bit checksum word with the protocol byte.
        let protocol = self.protocol();
        let old_word = u16::from_be_bytes([ttl, protocol]);
        let new_word = u16::from_be_bytes([ttl - 1, protocol]);
        let sum = checksum::update16(self.checksum(), old_word, new_word);
        self.set_ttl(ttl - 1);
        self.set_checksum(sum);
        true
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..header_len]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = self.payload_range();
        &mut self.buffer.as_mut()[range]
    }

    fn set_flag(&mut self, flag: u16, value: bool) {
        let raw = self.flags_frag();
        let raw = if value { raw | flag } else { raw & !flag };
        write_u16(self.buffer.as_mut(), field::FLAGS_FRAG, raw);
    }
}

/// IPv4 option types (RFC 791) the gateway must recognise: the ones that end the list, and
/// the source routes a middlebox refuses.
pub mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    /// Loose source and record route.
    pub const LSRR: u8 = 131;
    /// Strict source and record route.
    pub const SSRR: u8 = 137;
}

/// Why a datagram's options make it unfit to forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsError {
    /// LSRR or SSRR: RFC 7126 4.3 and 4.4 say drop them by default; they let a sender pick
    /// a path through (or around) the gateway and its filters.
    SourceRoute,
    /// An option whose length byte is missing, below 2, or runs past the header.
    Malformed,
}

/// Walks the options area of a header (what [`Packet::options`] returns). Each step moves
/// forward by at least one byte, so the walk ends within `options.len()` (at most 40) steps
/// and never indexes past the slice. Options after END are padding and are not read.
pub fn check_options(options: &[u8]) -> core::result::Result<(), OptionsError> {
    let mut rest = options;
    while let Some((&kind, after_kind)) = rest.split_first() {
        match kind {
            option::END => return Ok(()),
            option::NOP => rest = after_kind,
            _ => {
                let Some(&len) = after_kind.first() else {
                    return Err(OptionsError::Malformed);
                };
                let len = usize::from(len);
                if len < 2 || len > rest.len() {
                    return Err(OptionsError::Malformed);
                }
                if kind == option::LSRR || kind == option::SSRR {
                    return Err(OptionsError::SourceRoute);
                }
                rest = &rest[len..];
            }
        }
    }
    Ok(())
}

/// An option-less header to emit, e.g. in front of a locally generated ICMP error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub src_addr: Ipv4Addr,
    pub dst_addr: Ipv4Addr,
    pub protocol: u8,
    pub payload_len: u16,
    pub ttl: u8,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
}

impl Repr {
    /// DSCP/ECN zero, DF set and ident 0: an atomic datagram, whose ident RFC 6864 leaves free,
    /// so the gateway needs no ident counter.
    pub const fn new(
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        protocol: u8,
        payload_len: u16,
        ttl: u8,
    ) -> Repr {
        Repr {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: true,
        }
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes every header byte, so the buffer need not be zeroed first.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`] or `payload_len` leaves no room for the
    /// header in the 16-bit total length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let total_len = self
            .payload_len
            .checked_add(HEADER_LEN as u16)
            .expect("IPv4 payload_len too large");
        packet.set_version(4);
        packet.set_header_len(HEADER_LEN as u8);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len(total_len);
        packet.set_ident(self.ident);
        write_u16(packet.buffer.as_mut(), field::FLAGS_FRAG, 0);
        packet.set_dont_frag(self.dont_frag);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpFragOffset, IpNumber, Ipv4Dscp, Ipv4Ecn, Ipv4Header};
    use proptest::prelude::*;

    #[test]
    fn options_with_source_routes_or_bad_lengths_are_refused() {
        assert_eq!(check_options(&[]), Ok(()));
        // Record route (7, length 7, pointer 4, one empty slot) and NOPs are fine.
        assert_eq!(check_options(&[1, 7, 7, 4, 0, 0, 0, 0]), Ok(()));
        // Router alert (148, length 4), then END and garbage padding that is never read.
        assert_eq!(check_options(&[148, 4, 0, 0, 0, 131, 0, 0]), Ok(()));
        let lsrr = [option::LSRR, 7, 4, 10, 0, 0, 1, option::END];
        assert_eq!(check_options(&lsrr), Err(OptionsError::SourceRoute));
        let ssrr = [1, option::SSRR, 7, 4, 10, 0, 0, 1];
        assert_eq!(check_options(&ssrr), Err(OptionsError::SourceRoute));
        for malformed in [
            &[7][..],
            &[7, 0, 0, 0],
            &[7, 1, 0, 0],
            &[68, 9, 5, 0, 0, 0, 0, 0],
            &[1, 1, 1, 130],
        ] {
            assert_eq!(
                check_options(malformed),
                Err(OptionsError::Malformed),
                "{malformed:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn option_walk_never_panics(options in proptest::collection::vec(any::<u8>(), 0..=40)) {
            let verdict = check_options(&options);
            // A refusal for a source route names a byte that really is LSRR or SSRR.
            if verdict == Err(OptionsError::SourceRoute) {
                prop_assert!(options.iter().any(|&b| b == option::LSRR || b == option::SSRR));
            }
        }
    }

    /// An ICMP echo request as sent by `ping`, followed by two bytes of Ethernet padding.
    const ECHO_REQUEST: [u8; 46] = [
        0x45, 0x00, 0x00, 0x2c, 0xab, 0xcd, 0x40, 0x00, 0x40, 0x01, 0x0b, 0xa8, 0xc0, 0xa8, 0x01,
        0x0a, 0xc0, 0xa8, 0x01, 0x01, 0x08, 0x00, 0x2d, 0x0a, 0x12, 0x34, 0x00, 0x01, 0x10, 0x11,
        0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x00,
        0x00,
    ];

    #[test]
    fn parse_echo_request() {
        let packet = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 20);
        assert_eq!((packet.dscp(), packet.ecn()), (0, 0));
        assert_eq!(packet.total_len(), 44);
        assert_eq!(packet.ident(), 0xabcd);
        assert!(packet.dont_frag() && !packet.more_frags());
        assert_eq!(packet.frag_offset(), 0);
        assert!(!packet.is_fragment());
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), protocol::ICMP);
        assert_eq!(packet.checksum(), 0x0ba8);
        assert!(packet.verify_checksum());
        assert_eq!(packet.src_addr(), Ipv4Addr::new(192, 168, 1, 10));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(192, 168, 1, 1));
        assert!(packet.options().is_empty());
        // Padding excluded.
        assert_eq!(packet.payload(), &ECHO_REQUEST[20..44]);
    }

    #[test]
    fn bad_checksum_detected() {
        let mut bytes = ECHO_REQUEST;
        bytes[11] ^= 0x01;
        assert!(!Packet::new_checked(&bytes[..]).unwrap().verify_checksum());
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.fill_checksum();
        assert_eq!(packet.checksum(), 0x0ba8);
    }

    #[test]
    fn check_len_rejects_each_inconsistency() {
        let with = |f: &dyn Fn(&mut [u8])| {
            let mut bytes = ECHO_REQUEST;
            f(&mut bytes);
            Packet::new_checked(bytes).map(|_| ())
        };
        assert_eq!(
            Packet::new_checked(&ECHO_REQUEST[..19]),
            Err(WireError::Truncated)
        );
        assert_eq!(with(&|b| b[0] = 0x65), Err(WireError::BadVersion));
        assert_eq!(with(&|b| b[0] = 0x44), Err(WireError::BadHeaderLength));
        assert_eq!(with(&|b| b[0] = 0x40), Err(WireError::BadHeaderLength));
        // IHL 6 (24 bytes) but total length 20.
        assert_eq!(
            with(&|b| {
                b[0] = 0x46;
                b[3] = 20;
            }),
            Err(WireError::BadTotalLength)
        );
        assert_eq!(with(&|b| b[3] = 19), Err(WireError::BadTotalLength));
        assert_eq!(with(&|b| b[3] = 47), Err(WireError::Truncated));
        assert_eq!(
            Packet::new_checked(&ECHO_REQUEST[..43]),
            Err(WireError::Truncated)
        );
        // The limits themselves are fine.
        assert_eq!(with(&|b| b[3] = 46), Ok(()));
        assert_eq!(with(&|b| b[3] = 20), Ok(()));
        assert_eq!(
            with(&|b| {
                b[0] = 0x4f;
                b[3] = 60;
            }),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = [0xffu8; 32];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_version(4);
        packet.set_header_len(24);
        packet.set_dscp(46);
        packet.set_ecn(1);
        packet.set_total_len(30);
        packet.set_ident(0x1234);
        packet.set_dont_frag(false);
        packet.set_more_frags(true);
        packet.set_frag_offset(1480);
        packet.set_ttl(3);
        packet.set_protocol(protocol::UDP);
        packet.set_src_addr(Ipv4Addr::new(10, 1, 2, 3));
        packet.set_dst_addr(Ipv4Addr::new(10, 4, 5, 6));
        packet
            .options_mut()
            .copy_from_slice(&[0x94, 0x04, 0x00, 0x00]);
        packet.fill_checksum();
        packet.check_len().unwrap();

        assert_eq!(packet.version(), 4);
        assert_eq!(packet.header_len(), 24);
        assert_eq!((packet.dscp(), packet.ecn()), (46, 1));
        assert_eq!(packet.total_len(), 30);
        assert_eq!(packet.ident(), 0x1234);
        assert!(!packet.dont_frag() && packet.more_frags());
        assert_eq!(packet.frag_offset(), 1480);
        assert!(packet.is_fragment());
        assert_eq!(packet.ttl(), 3);
        assert_eq!(packet.protocol(), protocol::UDP);
        assert_eq!(packet.src_addr(), Ipv4Addr::new(10, 1, 2, 3));
        assert_eq!(packet.dst_addr(), Ipv4Addr::new(10, 4, 5, 6));
        assert_eq!(packet.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(packet.payload().len(), 6);
        assert!(packet.verify_checksum());

        packet.set_more_frags(false);
        packet.set_dont_frag(true);
        packet.set_frag_offset(0);
        assert!(packet.dont_frag() && !packet.is_fragment());
        packet.set_ecn(0);
        assert_eq!((packet.dscp(), packet.ecn()), (46, 0));
        packet.payload_mut().fill(0xaa);
        assert_eq!(&bytes[24..30], &[0xaa; 6]);
        assert_eq!(&bytes[30..], &[0xff; 2]);
    }

    #[test]
    fn fragment_offset_alone_means_fragment() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_frag_offset(8);
        assert!(!packet.more_frags() && packet.is_fragment());
        assert!(packet.dont_frag(), "offset setter keeps the flags");
    }

    #[test]
    fn decrement_ttl_updates_checksum_incrementally() {
        let mut bytes = ECHO_REQUEST;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        assert!(packet.decrement_ttl());
        assert_eq!(packet.ttl(), 63);
        assert!(packet.verify_checksum());
        let incremental = packet.checksum();
        packet.fill_checksum();
        assert_eq!(packet.checksum(), incremental);
    }

    #[test]
    fn decrement_ttl_refuses_expiring_packets() {
        for ttl in [0, 1] {
            let mut bytes = ECHO_REQUEST;
            let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
            packet.set_ttl(ttl);
            packet.fill_checksum();
            let before = bytes;
            let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
            assert!(!packet.decrement_ttl());
            assert_eq!(bytes, before);
        }
    }

    #[test]
    fn repr_emit_over_garbage() {
        let repr = Repr {
            dscp: 48,
            ecn: 2,
            ident: 7,
            dont_frag: false,
            ..Repr::new(
                Ipv4Addr::new(192, 0, 2, 1),
                Ipv4Addr::new(198, 51, 100, 7),
                protocol::ICMP,
                36,
                64,
            )
        };
        let mut bytes = [0xa5u8; 56];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(repr.buffer_len(), 20);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.total_len(), 56);
        assert!(!packet.dont_frag() && !packet.is_fragment());
        assert!(packet.verify_checksum());

        let (header, _) = Ipv4Header::from_slice(&bytes).unwrap();
        assert_eq!(header.source, [192, 0, 2, 1]);
        assert_eq!(header.destination, [198, 51, 100, 7]);
        assert_eq!(header.protocol, IpNumber::ICMP);
        assert_eq!(header.time_to_live, 64);
        assert_eq!(header.dscp.value(), 48);
        assert_eq!(header.ecn.value(), 2);
        assert_eq!(header.identification, 7);
        assert!(!header.dont_fragment);
        assert_eq!(header.header_checksum, header.calc_header_checksum());
    }

    #[test]
    fn repr_default_is_atomic() {
        let repr = Repr::new(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            protocol::TCP,
            0,
            255,
        );
        let mut bytes = [0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.dont_frag() && !packet.is_fragment());
        assert_eq!((packet.ident(), packet.dscp(), packet.ecn()), (0, 0, 0));
        assert!(packet.payload().is_empty());
    }

    #[test]
    fn matches_etherparse() {
        let header = Ipv4Header {
            dscp: Ipv4Dscp::try_new(10).unwrap(),
            ecn: Ipv4Ecn::try_new(3).unwrap(),
            total_len: 24 + 5,
            identification: 0xbeef,
            dont_fragment: false,
            more_fragments: true,
            fragment_offset: IpFragOffset::try_new(185).unwrap(),
            time_to_live: 17,
            protocol: IpNumber::UDP,
            header_checksum: 0,
            source: [172, 16, 0, 1],
            destination: [172, 16, 9, 200],
            options: [0x94, 0x04, 0x00, 0x00][..].try_into().unwrap(),
        };
        let mut bytes = header.to_bytes().to_vec();
        bytes.extend_from_slice(b"abcde");
        bytes.extend_from_slice(&[0; 3]);

        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.fill_checksum();
        assert_eq!(packet.checksum(), header.calc_header_checksum());
        assert_eq!(packet.header_len() as usize, header.header_len());
        assert_eq!(packet.dscp(), header.dscp.value());
        assert_eq!(packet.ecn(), header.ecn.value());
        assert_eq!(packet.total_len(), header.total_len);
        assert_eq!(packet.ident(), header.identification);
        assert_eq!(packet.dont_frag(), header.dont_fragment);
        assert_eq!(packet.more_frags(), header.more_fragments);
        assert_eq!(packet.frag_offset(), header.fragment_offset.value() * 8);
        assert_eq!(packet.ttl(), header.time_to_live);
        assert_eq!(packet.protocol(), header.protocol.0);
        assert_eq!(packet.src_addr().octets(), header.source);
        assert_eq!(packet.dst_addr().octets(), header.destination);
        assert_eq!(packet.options(), header.options.as_slice());
        assert_eq!(packet.payload(), b"abcde");
    }

    #[test]
    fn matches_etherparse_builder() {
        let builder = etherparse::PacketBuilder::ipv4([10, 9, 8, 7], [1, 2, 3, 4], 33).udp(5, 6);
        let mut bytes = Vec::new();
        builder.write(&mut bytes, &[0x55; 11]).unwrap();
        let (header, _) = Ipv4Header::from_slice(&bytes).unwrap();
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.verify_checksum());
        assert_eq!(packet.checksum(), header.header_checksum);
        assert_eq!(packet.total_len(), header.total_len);
        assert_eq!(packet.dont_frag(), header.dont_fragment);
        assert_eq!(packet.ttl(), 33);
        assert_eq!(packet.protocol(), protocol::UDP);
        assert_eq!(packet.payload().len(), 8 + 11);
    }

    fn call_everything(mut bytes: Vec<u8>) {
        let Ok(packet) = Packet::new_checked(&bytes[..]) else {
            return;
        };
        let _ = (
            packet.version(),
            packet.header_len(),
            packet.dscp(),
            packet.ecn(),
        );
        let _ = (packet.total_len(), packet.ident(), packet.dont_frag());
        let _ = (
            packet.more_frags(),
            packet.frag_offset(),
            packet.is_fragment(),
        );
        let _ = (packet.ttl(), packet.protocol(), packet.checksum());
        let _ = (
            packet.src_addr(),
            packet.dst_addr(),
            packet.verify_checksum(),
        );
        let _ = (packet.options().len(), packet.payload().len());
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.options_mut().fill(1);
        packet.payload_mut().fill(2);
        packet.decrement_ttl();
        packet.fill_checksum();
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            call_everything(bytes);
        }

        #[test]
        fn plausible_headers_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 20..128),
            ihl in 0u8..16,
            total_len in 0u16..160,
        ) {
            // Random bytes almost never pass the version and length checks; force them near.
            bytes[0] = 0x40 | ihl;
            bytes[2..4].copy_from_slice(&total_len.to_be_bytes());
            call_everything(bytes);
        }

        #[test]
        fn decrement_ttl_matches_recomputation(
            mut header in prop::array::uniform20(any::<u8>()),
            ttl in 2u8..=255,
        ) {
            header[0] = 0x45;
            header[2..4].copy_from_slice(&20u16.to_be_bytes());
            header[8] = ttl;
            let mut packet = Packet::new_checked(&mut header[..]).unwrap();
            packet.fill_checksum();
            prop_assert!(packet.decrement_ttl());
            let incremental = packet.checksum();
            packet.fill_checksum();
            prop_assert_eq!(incremental, packet.checksum());
        }
    }
}

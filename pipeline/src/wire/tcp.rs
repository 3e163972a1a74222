//! TCP segment headers (RFC 9293), read for ports and flags, written for NAT and resets.

use std::net::Ipv4Addr;

use super::bytes::{read_u16, read_u32, write_u16, write_u32};
use super::checksum;
use super::ipv4::protocol;
use super::{Result, WireError};

/// Bits of the flags byte.
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
}

pub mod field {
    use core::ops::Range;

    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const ACK: Range<usize> = 8..12;
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

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

    /// The buffer is the IPv4 payload, already bounded by the IP total length, so a data
    /// offset past its end is a bad header rather than a short capture.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let header_len = usize::from(self.header_len());
        if header_len < HEADER_LEN || header_len > len {
            return Err(WireError::BadDataOffset);
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

    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ)
    }

    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK)
    }

    /// In bytes (data offset * 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::DATA_OFFSET] >> 4) * 4
    }

    /// The raw flags byte (CWR and ECE included), for matching several flags at once.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }

    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }

    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }

    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }

    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }

    pub fn urg(&self) -> bool {
        self.flags() & flags::URG != 0
    }

    pub fn window_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    pub fn urgent(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }

    /// Covers the whole buffer, so pass exactly the segment (the IPv4 payload).
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        checksum::l4_checksum(src, dst, protocol::TCP, self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_src_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    pub fn set_dst_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    pub fn set_seq_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ, value);
    }

    pub fn set_ack_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ACK, value);
    }

    /// In bytes; must be a multiple of 4. Keeps the reserved bits and NS.
    pub fn set_header_len(&mut self, value: u8) {
        let byte = &mut self.buffer.as_mut()[field::DATA_OFFSET];
        *byte = (*byte & 0x0f) | ((value / 4) << 4);
    }

    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    pub fn set_window_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, value);
    }

    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    pub fn set_urgent(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, value);
    }

    /// Covers the whole buffer, so pass exactly the segment (the IPv4 payload).
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let sum = checksum::l4_checksum(src, dst, protocol::TCP, self.buffer.as_ref());
        self.set_checksum(sum);
    }

    pub fn options_mut(&mut self) -> &mut [u8] {
        let header_len = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..header_len]
    }

    pub fn payload_mut(&mut self) -> &mut [u8] {
        let header_len = usize::from(self.header_len());
        &mut self.buffer.as_mut()[header_len..]
    }
}

/// TCP option kinds (RFC 9293 3.2, RFC 7323).
pub mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
}

/// The options in `options` (a TCP header's bytes after the fixed 20), in order, as their
/// offset in `options`, kind and data (after the kind and length bytes); NOPs skipped. Ends at
/// END, or at the first malformed option (no length byte, a length under 2 or past the end),
/// which hides everything after it.
pub fn walk_options(options: &[u8]) -> impl Iterator<Item = (usize, u8, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        match *options.get(at)? {
            option::END => return None,
            option::NOP => at += 1,
            kind => {
                let len = usize::from(*options.get(at + 1)?);
                if len < 2 || at + len > options.len() {
                    return None;
                }
                let found = (at, kind, &options[at + 2..at + len]);
                at += len;
                return Some(found);
            }
        }
    })
}

/// Lowers the MSS option of `segment` (a whole TCP segment, the IPv4 payload) to `limit` if it
/// announces more, updating the checksum by RFC 1624 so that a segment's checksum stays as
/// right or as wrong as it was. Returns the MSS it replaced. A segment without an MSS option,
/// or whose options are malformed (a length under 2 or past the header, an MSS option not 4
/// bytes long), is left alone: the endpoint judges those, as Linux's TCPMSS target leaves
/// them.
pub fn clamp_mss(segment: &mut [u8], limit: u16) -> Option<u16> {
    let header_len = usize::from(*segment.get(field::DATA_OFFSET)? >> 4) * 4;
    if header_len < HEADER_LEN || header_len > segment.len() {
        return None;
    }
    let (at, _, value) =
        walk_options(&segment[HEADER_LEN..header_len]).find(|&(_, kind, _)| kind == option::MSS)?;
    let mss = u16::from_be_bytes(value.try_into().ok()?);
    if mss <= limit {
        return None;
    }
    replace_updating_checksum(segment, HEADER_LEN + at + 2, limit.to_be_bytes());
    Some(mss)
}

/// Writes `bytes` at `at` and updates the TCP checksum for each 16-bit word of the segment
/// they touch (the option may start at an odd offset, after a single NOP).
fn replace_updating_checksum(segment: &mut [u8], at: usize, bytes: [u8; 2]) {
    let word = |segment: &[u8], start: usize| {
        let byte = |i: usize| segment.get(i).copied().unwrap_or(0);
        u16::from_be_bytes([byte(start), byte(start + 1)])
    };
    let first_word = at & !1;
    let last_word = (at + 1) & !1;
    let old = [word(segment, first_word), word(segment, last_word)];
    segment[at..at + 2].copy_from_slice(&bytes);
    let mut sum = read_u16(segment, field::CHECKSUM);
    sum = checksum::update16(sum, old[0], word(segment, first_word));
    if last_word != first_word {
        sum = checksum::update16(sum, old[1], word(segment, last_word));
    }
    write_u16(segment, field::CHECKSUM, sum);
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, TcpHeader};
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

    /// A SYN to port 80 with MSS 1460, SACK permitted, timestamps, NOP and window scale 7.
    const SYN: [u8; 40] = [
        0xd4, 0x31, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, //
        0xfa, 0xf0, 0x06, 0x28, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, //
        0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    #[test]
    fn parse_syn() {
        let packet = Packet::new_checked(&SYN[..]).unwrap();
        assert_eq!(packet.src_port(), 54321);
        assert_eq!(packet.dst_port(), 80);
        assert_eq!(packet.seq_number(), 0x1234_5678);
        assert_eq!(packet.ack_number(), 0);
        assert_eq!(packet.header_len(), 40);
        assert_eq!(packet.flags(), flags::SYN);
        assert!(packet.syn());
        assert!(!(packet.fin() || packet.rst() || packet.psh() || packet.ack() || packet.urg()));
        assert_eq!(packet.window_len(), 64240);
        assert_eq!(packet.checksum(), 0x0628);
        assert_eq!(packet.urgent(), 0);
        assert_eq!(packet.options(), &SYN[20..]);
        assert!(packet.payload().is_empty());
        assert!(packet.verify_checksum(SRC, DST));
        assert!(!packet.verify_checksum(SRC, Ipv4Addr::new(93, 184, 216, 35)));
    }

    #[test]
    fn check_len_rejects_each_inconsistency() {
        assert_eq!(Packet::new_checked(&SYN[..19]), Err(WireError::Truncated));
        assert_eq!(Packet::new_checked(&[][..]), Err(WireError::Truncated));
        // Data offset 10 words but only 39 bytes.
        assert_eq!(
            Packet::new_checked(&SYN[..39]),
            Err(WireError::BadDataOffset)
        );
        for offset in [0x00, 0x40] {
            let mut bytes = SYN;
            bytes[12] = offset;
            assert_eq!(Packet::new_checked(bytes), Err(WireError::BadDataOffset));
        }
        let mut bytes = SYN;
        bytes[12] = 0x50;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(packet.options().is_empty());
        assert_eq!(packet.payload(), &SYN[20..]);
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = [0xffu8; 27];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_src_port(1);
        packet.set_dst_port(2);
        packet.set_seq_number(3);
        packet.set_ack_number(4);
        packet.set_header_len(24);
        packet.set_flags(flags::RST | flags::ACK);
        packet.set_window_len(5);
        packet.set_checksum(6);
        packet.set_urgent(7);
        packet.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        packet.payload_mut().copy_from_slice(b"abc");
        packet.check_len().unwrap();
        assert_eq!((packet.src_port(), packet.dst_port()), (1, 2));
        assert_eq!((packet.seq_number(), packet.ack_number()), (3, 4));
        assert_eq!(packet.header_len(), 24);
        assert!(packet.rst() && packet.ack() && !packet.syn());
        assert_eq!(packet.flags(), 0x14);
        assert_eq!((packet.window_len(), packet.checksum()), (5, 6));
        assert_eq!(packet.urgent(), 7);
        assert_eq!(packet.options(), &[1, 1, 1, 0]);
        assert_eq!(packet.payload(), b"abc");
        // Reserved/NS bits were 1s and survive the data offset write.
        assert_eq!(bytes[12], 0x6f);
    }

    type FlagGetter = fn(&Packet<&mut [u8]>) -> bool;

    #[test]
    fn each_flag_bit() {
        let mut bytes = SYN;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        let getters: [(u8, FlagGetter); 6] = [
            (flags::FIN, |p| p.fin()),
            (flags::SYN, |p| p.syn()),
            (flags::RST, |p| p.rst()),
            (flags::PSH, |p| p.psh()),
            (flags::ACK, |p| p.ack()),
            (flags::URG, |p| p.urg()),
        ];
        for (bit, _) in getters {
            packet.set_flags(bit);
            for (other, get) in getters {
                assert_eq!(get(&packet), bit == other, "set {bit:#x}, read {other:#x}");
            }
        }
    }

    #[test]
    fn fill_checksum_reproduces_capture() {
        let mut bytes = SYN;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.set_checksum(0xdead);
        packet.fill_checksum(SRC, DST);
        assert_eq!(packet.checksum(), 0x0628);
    }

    #[test]
    fn matches_etherparse() {
        let builder = PacketBuilder::ipv4(SRC.octets(), DST.octets(), 64)
            .tcp(40000, 443, 0xdead_beef, 29200)
            .ack(0x0102_0304)
            .psh()
            .options_raw(&[2, 4, 0x05, 0xb4])
            .unwrap();
        let mut bytes = Vec::new();
        builder.write(&mut bytes, b"GET / HTTP/1.1\r\n").unwrap();
        let segment = &mut bytes[20..];
        let (header, payload) = TcpHeader::from_slice(segment).unwrap();
        let payload = payload.to_vec();

        let mut packet = Packet::new_checked(&mut segment[..]).unwrap();
        assert_eq!(packet.src_port(), header.source_port);
        assert_eq!(packet.dst_port(), header.destination_port);
        assert_eq!(packet.seq_number(), header.sequence_number);
        assert_eq!(packet.ack_number(), header.acknowledgment_number);
        assert_eq!(usize::from(packet.header_len()), header.header_len());
        assert_eq!(
            (packet.ack(), packet.psh(), packet.syn()),
            (header.ack, header.psh, header.syn)
        );
        assert_eq!(packet.window_len(), header.window_size);
        assert_eq!(packet.options(), header.options.as_slice());
        assert_eq!(packet.payload(), &payload[..]);
        assert_eq!(packet.checksum(), header.checksum);
        assert!(packet.verify_checksum(SRC, DST));

        // Rewrite the port, recompute, and compare with etherparse's own computation.
        packet.set_dst_port(8443);
        packet.fill_checksum(SRC, DST);
        let (header, _) = TcpHeader::from_slice(packet.into_inner()).unwrap();
        let expected = header
            .calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), &payload)
            .unwrap();
        assert_eq!(header.checksum, expected);
    }

    fn call_everything(mut bytes: Vec<u8>) {
        let Ok(packet) = Packet::new_checked(&bytes[..]) else {
            return;
        };
        let _ = (packet.src_port(), packet.dst_port(), packet.seq_number());
        let _ = (packet.ack_number(), packet.header_len(), packet.flags());
        let _ = (packet.fin(), packet.syn(), packet.rst(), packet.psh());
        let _ = (packet.ack(), packet.urg(), packet.window_len());
        let _ = (packet.checksum(), packet.urgent(), packet.options().len());
        let _ = (packet.payload().len(), packet.verify_checksum(SRC, DST));
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        packet.options_mut().fill(1);
        packet.payload_mut().fill(2);
        packet.fill_checksum(SRC, DST);
        assert!(packet.verify_checksum(SRC, DST));
    }

    /// `SYN` with a valid checksum and its options replaced by `options` (a multiple of 4).
    fn syn_with_options(options: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut segment = SYN[..HEADER_LEN].to_vec();
        segment.extend_from_slice(options);
        segment.extend_from_slice(payload);
        let mut packet = Packet::new_unchecked(&mut segment[..]);
        packet.set_header_len((HEADER_LEN + options.len()) as u8);
        packet.fill_checksum(SRC, DST);
        segment
    }

    fn mss_of(segment: &[u8]) -> Option<u16> {
        let (header, _) = TcpHeader::from_slice(segment).ok()?;
        header.options_iterator().find_map(|option| match option {
            Ok(etherparse::TcpOptionElement::MaximumSegmentSize(mss)) => Some(mss),
            _ => None,
        })
    }

    #[test]
    fn mss_above_the_limit_is_lowered_and_the_checksum_stays_right() {
        let mut segment = SYN.to_vec();
        assert_eq!(clamp_mss(&mut segment, 1452), Some(1460));
        assert_eq!(mss_of(&segment), Some(1452));
        assert!(Packet::new_checked(&segment[..])
            .unwrap()
            .verify_checksum(SRC, DST));
        // Everything else as it was.
        assert_eq!(segment[..16], SYN[..16]);
        assert_eq!(segment[24..], SYN[24..]);
        // At or below the limit: untouched.
        let before = segment.clone();
        assert_eq!(clamp_mss(&mut segment, 1452), None);
        assert_eq!(clamp_mss(&mut segment, 1500), None);
        assert_eq!(segment, before);
    }

    #[test]
    fn mss_at_an_odd_offset_and_with_an_odd_length_payload() {
        // NOP, MSS 8960, NOP NOP NOP: the MSS value straddles two checksum words.
        let options = [1, 2, 4, 0x23, 0x00, 1, 1, 1];
        for payload in [&b""[..], b"x", b"hello"] {
            let mut segment = syn_with_options(&options, payload);
            assert_eq!(clamp_mss(&mut segment, 1400), Some(8960));
            assert_eq!(mss_of(&segment), Some(1400));
            assert!(Packet::new_checked(&segment[..])
                .unwrap()
                .verify_checksum(SRC, DST));
        }
    }

    #[test]
    fn malformed_or_missing_options_are_left_alone() {
        for options in [
            &[1, 1, 1, 1][..],             // no MSS
            &[0, 2, 4, 5, 0xb4, 0, 0, 0],  // end of list before it
            &[2, 3, 5, 0],                 // MSS of the wrong length
            &[8, 0, 2, 4, 5, 0xb4, 0, 0],  // an option of length 0
            &[8, 12, 2, 4, 5, 0xb4, 0, 0], // an option running past the header
            &[1, 1, 1, 2],                 // a kind with no length byte left
        ] {
            let mut segment = syn_with_options(options, b"");
            let before = segment.clone();
            assert_eq!(clamp_mss(&mut segment, 536), None, "{options:?}");
            assert_eq!(segment, before);
        }
        // A data offset past the segment, or under 5 words.
        let mut short = SYN[..30].to_vec();
        assert_eq!(clamp_mss(&mut short, 536), None);
        let mut tiny = SYN.to_vec();
        tiny[field::DATA_OFFSET] = 0x40;
        assert_eq!(clamp_mss(&mut tiny, 536), None);
        assert_eq!(clamp_mss(&mut [], 536), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            call_everything(bytes);
        }

        /// Well-formed option lists in any order (NOPs shifting the MSS to odd offsets, other
        /// options around it, an END before it): the first MSS before any END is lowered to
        /// the limit if above it, the checksum stays right, and nothing else changes.
        #[test]
        fn the_first_mss_is_clamped_wherever_it_sits(
            options in prop::collection::vec(
                prop_oneof![
                    Just(vec![option::NOP]),
                    Just(vec![option::END]),
                    any::<u16>().prop_map(|mss| {
                        let [high, low] = mss.to_be_bytes();
                        vec![option::MSS, 4, high, low]
                    }),
                    (3..=30u8, prop::collection::vec(any::<u8>(), 0..5)).prop_map(|(kind, data)| {
                        let mut option = vec![kind, data.len() as u8 + 2];
                        option.extend(data);
                        option
                    }),
                ],
                0..8,
            ),
            payload in prop::collection::vec(any::<u8>(), 0..9),
            limit in 536..=9000u16,
        ) {
            let mut bytes: Vec<u8> = options.concat();
            bytes.truncate(40);
            while !bytes.len().is_multiple_of(4) {
                bytes.push(option::NOP);
            }
            // The first MSS option a receiver would read, and where its value sits, by a walk
            // of the list as built.
            let mut expected = None;
            let mut at = HEADER_LEN;
            for option in &options {
                if at + option.len() > HEADER_LEN + 40 || option[0] == option::END {
                    break;
                }
                if option[0] == option::MSS {
                    expected = Some((u16::from_be_bytes([option[2], option[3]]), at + 2));
                    break;
                }
                at += option.len();
            }
            let mut segment = syn_with_options(&bytes, &payload);
            let before = segment.clone();
            let clamped = clamp_mss(&mut segment, limit);
            let expected = expected.filter(|&(mss, _)| mss > limit);
            prop_assert_eq!(clamped, expected.map(|(mss, _)| mss));
            prop_assert!(Packet::new_checked(&segment[..]).unwrap().verify_checksum(SRC, DST));
            match expected {
                Some((_, value)) => {
                    prop_assert_eq!(&segment[value..value + 2], &limit.to_be_bytes()[..]);
                    let only_mss_and_checksum = (0..segment.len())
                        .filter(|&i| segment[i] != before[i])
                        .all(|i| field::CHECKSUM.contains(&i) || (value..value + 2).contains(&i));
                    prop_assert!(only_mss_and_checksum);
                }
                None => prop_assert_eq!(&segment, &before),
            }
        }

        /// Whatever the bytes, clamping never panics, changes at most the MSS value and the
        /// checksum, and a checksum that was right stays right.
        #[test]
        fn clamping_keeps_the_checksum(
            mut bytes in prop::collection::vec(any::<u8>(), 0..80),
            limit in any::<u16>(),
            fix_checksum in any::<bool>(),
        ) {
            if fix_checksum && Packet::new_checked(&bytes[..]).is_ok() {
                Packet::new_checked(&mut bytes[..]).unwrap().fill_checksum(SRC, DST);
            }
            let was_right = Packet::new_checked(&bytes[..]).is_ok_and(|p| p.verify_checksum(SRC, DST));
            let before = bytes.clone();
            let clamped = clamp_mss(&mut bytes, limit);
            let changed: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != before[i]).collect();
            match clamped {
                None => prop_assert!(changed.is_empty()),
                Some(old) => {
                    prop_assert!(old > limit);
                    prop_assert!(changed.iter().all(|&i| i >= HEADER_LEN || field::CHECKSUM.contains(&i)));
                }
            }
            if was_right {
                prop_assert!(Packet::new_checked(&bytes[..]).unwrap().verify_checksum(SRC, DST));
            }
        }
    }
}

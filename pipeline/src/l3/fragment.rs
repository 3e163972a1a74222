//! IPv4 fragmentation (RFC 791 3.2, RFC 1812 5.2.6) for a datagram that must leave on a port
//! whose MTU is smaller, with DF clear ([`crate::Verdict::Fragment`]).
//!
//! The worker allocates one fresh buffer per fragment from its pool and asks for each in turn,
//! so nothing here allocates: [`fragment_count`] says how many buffers to get, and
//! [`write_fragment`] fills one. Both re-derive the layout from the original frame, which is
//! a few comparisons and a walk over at most 40 bytes of options, so that no state has to be
//! kept between calls.

use crate::wire::{ethernet, ipv4, EthernetFrame, Ipv4Packet};

/// Fragment offsets are 13 bits in units of 8 bytes.
const MAX_FRAG_OFFSET: usize = 0x1fff * 8;
/// Option types whose top bit is set go into every fragment, the others only the first.
const OPTION_COPIED: u8 = 0x80;
const OPTION_EOL: u8 = 0;
const OPTION_NOP: u8 = 1;

/// How many fragments `frame` (Ethernet + IPv4) becomes at `mtu`, the largest IPv4 datagram
/// the egress port carries. 1 if it already fits.
///
/// 0 if the frame is not a valid IPv4 frame, if `mtu` cannot carry the header and 8 bytes of
/// payload, or if DF is set on a datagram that does not fit: fragmenting it anyway would break
/// the sender's path MTU discovery.
pub fn fragment_count(frame: &[u8], mtu: u16) -> usize {
    Layout::of(frame, mtu).map_or(0, |layout| layout.count)
}

/// Writes fragment `index` of `frame` into `out`: the Ethernet header as it is, an IPv4 header
/// with its own length, offset, MF flag and checksum, and this fragment's slice of payload.
/// Returns the frame length written; None if `index` is out of range, `out` is too small, or
/// [`fragment_count`] would be 0.
///
/// The first fragment carries all options; later ones only those with the copied flag, padded
/// with end-of-options to a 4-byte multiple. Offsets add to the original's, and the last
/// fragment keeps the original's MF, so fragmenting a fragment yields fragments of the same
/// datagram.
pub fn write_fragment(frame: &[u8], mtu: u16, index: usize, out: &mut [u8]) -> Option<usize> {
    let layout = Layout::of(frame, mtu)?;
    if index >= layout.count {
        return None;
    }
    let (start, len) = layout.slice(index);
    let header_len = if index == 0 {
        layout.first_header_len
    } else {
        layout.later_header_len
    };
    let ip_start = ethernet::HEADER_LEN;
    let payload_start = ip_start + header_len;
    let frame_len = payload_start + len;
    let out = out.get_mut(..frame_len)?;

    let original = layout.ip();
    out[..ip_start].copy_from_slice(&frame[..ip_start]);
    let header = &mut out[ip_start..payload_start];
    header[..ipv4::HEADER_LEN].copy_from_slice(&layout.datagram[..ipv4::HEADER_LEN]);
    if index == 0 {
        header[ipv4::HEADER_LEN..].copy_from_slice(original.options());
    } else {
        let written = copy_options(original.options(), &mut header[ipv4::HEADER_LEN..])?;
        // EOL is 0, so zeroing pads to the 4-byte boundary.
        header[ipv4::HEADER_LEN + written..].fill(OPTION_EOL);
    }
    let original_payload = &original.payload()[start..start + len];
    out[payload_start..].copy_from_slice(original_payload);

    let last = index + 1 == layout.count;
    let mut ip = Ipv4Packet::new_unchecked(&mut out[ip_start..]);
    ip.set_header_len(header_len as u8);
    ip.set_total_len((header_len + len) as u16);
    ip.set_more_frags(!last || layout.more_frags);
    ip.set_frag_offset((layout.offset + start) as u16);
    ip.fill_checksum();
    Some(frame_len)
}

/// Where each fragment's payload starts and ends, derived from the original frame alone.
struct Layout<'a> {
    /// The IPv4 datagram, without Ethernet header or padding.
    datagram: &'a [u8],
    first_header_len: usize,
    later_header_len: usize,
    /// Payload bytes per fragment, multiples of 8 (except when the datagram fits whole).
    first_capacity: usize,
    later_capacity: usize,
    payload_len: usize,
    /// The original's own offset and MF: it may be a fragment already.
    offset: usize,
    more_frags: bool,
    count: usize,
}

impl<'a> Layout<'a> {
    fn of(frame: &'a [u8], mtu: u16) -> Option<Layout<'a>> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != ethernet::ethertype::IPV4 {
            return None;
        }
        // Sliced from `frame`, not `eth`, so that it outlives this function.
        let ip_bytes = &frame[ethernet::HEADER_LEN..];
        let ip = Ipv4Packet::new_checked(ip_bytes).ok()?;
        let datagram = &ip_bytes[..usize::from(ip.total_len())];
        let first_header_len = usize::from(ip.header_len());
        let payload_len = ip.payload().len();
        let offset = usize::from(ip.frag_offset());
        let copied_len = copied_options_len(ip.options())?;
        let later_header_len = ipv4::HEADER_LEN + copied_len.next_multiple_of(4);
        let mtu = usize::from(mtu);

        let mut layout = Layout {
            datagram,
            first_header_len,
            later_header_len,
            first_capacity: payload_len,
            later_capacity: payload_len,
            payload_len,
            offset,
            more_frags: ip.more_frags(),
            count: 1,
        };
        if datagram.len() <= mtu {
            return Some(layout);
        }
        if ip.dont_frag() || mtu < first_header_len + 8 {
            return None;
        }
        // Later headers are never longer than the first, so they fit whenever it does.
        layout.first_capacity = (mtu - first_header_len) & !7;
        layout.later_capacity = (mtu - later_header_len) & !7;
        let rest = payload_len - layout.first_capacity;
        layout.count = 1 + rest.div_ceil(layout.later_capacity);
        let (last_start, _) = layout.slice(layout.count - 1);
        if offset + last_start > MAX_FRAG_OFFSET {
            return None;
        }
        Some(layout)
    }

    /// Start and length, within the original payload, of fragment `index`'s payload.
    fn slice(&self, index: usize) -> (usize, usize) {
        let (start, capacity) = match index {
            0 => (0, self.first_capacity),
            _ => (
                self.first_capacity + (index - 1) * self.later_capacity,
                self.later_capacity,
            ),
        };
        (start, capacity.min(self.payload_len - start))
    }

    /// `of` validated the datagram, so the view is checked already.
    fn ip(&self) -> Ipv4Packet<&'a [u8]> {
        Ipv4Packet::new_unchecked(self.datagram)
    }
}

/// Walks the options, calling `each` with every complete option (type byte first). None if an
/// option's length runs past the header or is below the 2 bytes of its own type and length.
fn for_each_option(options: &[u8], mut each: impl FnMut(&[u8])) -> Option<()> {
    let mut rest = options;
    while let Some(&kind) = rest.first() {
        let len = match kind {
            OPTION_EOL => return Some(()),
            OPTION_NOP => 1,
            _ => usize::from(*rest.get(1)?),
        };
        if kind != OPTION_NOP && len < 2 {
            return None;
        }
        let option = rest.get(..len)?;
        each(option);
        rest = &rest[len..];
    }
    Some(())
}

/// Length of the options later fragments carry, before padding. None if malformed.
fn copied_options_len(options: &[u8]) -> Option<usize> {
    let mut len = 0;
    for_each_option(options, |option| {
        if option[0] & OPTION_COPIED != 0 {
            len += option.len();
        }
    })?;
    Some(len)
}

/// Writes the copied options into `out`, returning how many bytes they took. `out` is sized
/// from [`copied_options_len`], so they always fit.
fn copy_options(options: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut written = 0;
    for_each_option(options, |option| {
        if option[0] & OPTION_COPIED != 0 {
            if let Some(dst) = out.get_mut(written..written + option.len()) {
                dst.copy_from_slice(option);
            }
            written += option.len();
        }
    })?;
    (written <= out.len()).then_some(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::checksum::Sum16BitWords;
    use etherparse::defrag::IpDefragPool;
    use etherparse::{
        IpFragOffset, IpHeaders, IpNumber, Ipv4Header, Ipv4Options, PacketBuilder, SlicedPacket,
        UdpHeader,
    };
    use proptest::prelude::*;

    const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const DST_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
    const ROOM: usize = 2048;

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 13 + 5) as u8).collect()
    }

    fn base_header(ident: u16) -> Ipv4Header {
        let mut header =
            Ipv4Header::new(0, 63, IpNumber::UDP, [192, 168, 10, 2], [172, 16, 3, 4]).unwrap();
        header.identification = ident;
        header.dont_fragment = false;
        header
    }

    /// A UDP datagram of `udp_len` bytes (header included), DF clear.
    fn udp_frame(udp_len: usize) -> Vec<u8> {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ip(IpHeaders::Ipv4(base_header(0x4242), Default::default()))
            .udp(4000, 5000)
            .write(&mut frame, &data(udp_len - 8))
            .unwrap();
        frame
    }

    /// A frame around `header` and raw payload; etherparse fills in length and checksum.
    fn raw_frame(header: Ipv4Header, payload: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(SRC_MAC, DST_MAC)
            .ip(IpHeaders::Ipv4(header, Default::default()))
            .write(&mut frame, IpNumber::UDP, payload)
            .unwrap();
        frame
    }

    /// Every fragment of `frame` at `mtu`, each written into its own garbage-filled room.
    fn fragments(frame: &[u8], mtu: u16) -> Vec<Vec<u8>> {
        let count = fragment_count(frame, mtu);
        assert!(count > 0);
        (0..count)
            .map(|index| {
                let mut room = [0xa5u8; ROOM];
                let len = write_fragment(frame, mtu, index, &mut room).unwrap();
                room[..len].to_vec()
            })
            .collect()
    }

    /// Checks one fragment with etherparse and returns its header and payload.
    fn parse(fragment: &[u8], mtu: u16) -> (Ipv4Header, &[u8]) {
        assert_eq!(&fragment[..ethernet::HEADER_LEN], &{
            let mut eth = [0u8; 14];
            eth[..6].copy_from_slice(&DST_MAC);
            eth[6..12].copy_from_slice(&SRC_MAC);
            eth[12..].copy_from_slice(&[0x08, 0x00]);
            eth
        });
        let ip = &fragment[ethernet::HEADER_LEN..];
        let (header, payload) = Ipv4Header::from_slice(ip).unwrap();
        assert_eq!(header.header_checksum, header.calc_header_checksum());
        let raw_sum = Sum16BitWords::new()
            .add_slice(&ip[..header.header_len()])
            .ones_complement();
        assert_eq!(raw_sum, 0, "checksum over the raw header");
        assert_eq!(usize::from(header.total_len), ip.len());
        assert!(header.total_len <= mtu, "{} > MTU {mtu}", header.total_len);
        (header, payload)
    }

    /// Reassembles by offset, checking each fragment on the way, and returns the payload
    /// (relative to `base_offset`) and whether the last fragment had MF set.
    fn reassemble(frags: &[Vec<u8>], mtu: u16, base_offset: usize) -> (Vec<u8>, bool) {
        let mut payload = Vec::new();
        let mut last_mf = false;
        for (index, fragment) in frags.iter().enumerate() {
            let (header, data) = parse(fragment, mtu);
            let offset = usize::from(header.fragment_offset.value()) * 8;
            assert_eq!(
                offset - base_offset,
                payload.len(),
                "fragment {index} contiguous"
            );
            if index + 1 < frags.len() {
                assert!(header.more_fragments, "MF on fragment {index}");
                assert_eq!(data.len() % 8, 0, "fragment {index} payload");
            }
            assert!(!header.dont_fragment);
            payload.extend_from_slice(data);
            last_mf = header.more_fragments;
        }
        (payload, last_mf)
    }

    #[test]
    fn udp_datagram_reassembles_at_1500_and_576() {
        let frame = udp_frame(3000);
        let (original, original_payload) = Ipv4Header::from_slice(&frame[14..]).unwrap();
        for (mtu, count) in [(1500, 3), (576, 6)] {
            let frags = fragments(&frame, mtu);
            assert_eq!(frags.len(), count, "MTU {mtu}");
            let (payload, last_mf) = reassemble(&frags, mtu, 0);
            assert_eq!(payload, original_payload);
            assert!(!last_mf);
            for fragment in &frags {
                let (header, _) = parse(fragment, mtu);
                assert_eq!(header.identification, original.identification);
                assert_eq!(header.time_to_live, original.time_to_live);
                assert_eq!(header.protocol, original.protocol);
                assert_eq!(
                    (header.source, header.destination),
                    (original.source, original.destination)
                );
            }

            // And etherparse's own reassembly agrees, UDP checksum included.
            let mut pool = IpDefragPool::<(), ()>::new();
            let mut done = None;
            for fragment in &frags {
                let sliced = SlicedPacket::from_ethernet(fragment).unwrap();
                if let Some(whole) = pool.process_sliced_packet(&sliced, (), ()).unwrap() {
                    done = Some(whole);
                }
            }
            let whole = done.expect("reassembled");
            assert_eq!(whole.payload, original_payload);
            let (udp, udp_data) = UdpHeader::from_slice(&whole.payload).unwrap();
            assert_eq!(
                udp.checksum,
                udp.calc_checksum_ipv4(&original, udp_data).unwrap()
            );
        }
    }

    #[test]
    fn fragment_sizes_at_1500() {
        let frame = udp_frame(3000);
        let lens: Vec<usize> = fragments(&frame, 1500).iter().map(Vec::len).collect();
        // 3000 bytes of payload: 1480 + 1480 + 40.
        assert_eq!(lens, [14 + 1500, 14 + 1500, 14 + 20 + 40]);
    }

    #[test]
    fn a_datagram_that_fits_is_one_unchanged_fragment() {
        let frame = udp_frame(1480);
        assert_eq!(fragment_count(&frame, 1500), 1);
        let frags = fragments(&frame, 1500);
        assert_eq!(frags, std::slice::from_ref(&frame));

        // Even with DF set: there is nothing to split.
        let mut header = base_header(1);
        header.dont_fragment = true;
        let frame = raw_frame(header, &data(100));
        assert_eq!(fragments(&frame, 1500), std::slice::from_ref(&frame));
    }

    #[test]
    fn fragmenting_a_fragment_keeps_offsets_absolute() {
        for original_mf in [true, false] {
            let mut header = base_header(7);
            header.more_fragments = original_mf;
            header.fragment_offset = IpFragOffset::try_new(1480 / 8).unwrap();
            let payload = data(2000);
            let frame = raw_frame(header, &payload);
            let frags = fragments(&frame, 576);
            assert_eq!(frags.len(), 4);
            let (reassembled, last_mf) = reassemble(&frags, 576, 1480);
            assert_eq!(reassembled, payload);
            assert_eq!(last_mf, original_mf, "the last keeps the original MF");
            let (first, _) = parse(&frags[0], 576);
            assert_eq!(first.fragment_offset.value(), 185);
        }
    }

    #[test]
    fn options_copy_rules() {
        let record_route = [0x07, 7, 4, 0, 0, 0, 0];
        let router_alert = [0x94, 4, 0, 0];
        let loose_source_route = [0x83, 7, 4, 10, 0, 0, 9];
        let mut options = Vec::new();
        options.extend_from_slice(&record_route);
        options.push(OPTION_NOP);
        options.extend_from_slice(&router_alert);
        options.extend_from_slice(&loose_source_route);
        options.push(OPTION_EOL);
        assert_eq!(options.len(), 20);

        let mut header = base_header(9);
        header.options = Ipv4Options::try_from(&options[..]).unwrap();
        let payload = data(1200);
        let frame = raw_frame(header, &payload);
        let frags = fragments(&frame, 576);

        let (first, _) = parse(&frags[0], 576);
        assert_eq!(first.options.as_slice(), &options[..], "first: all of them");
        let mut copied = Vec::new();
        copied.extend_from_slice(&router_alert);
        copied.extend_from_slice(&loose_source_route);
        copied.push(OPTION_EOL);
        for fragment in &frags[1..] {
            let (later, _) = parse(fragment, 576);
            assert_eq!(later.options.as_slice(), &copied[..], "later: copied only");
        }
        // First: (576 - 40) & !7 = 536; later: (576 - 32) & !7 = 544.
        let (reassembled, _) = reassemble(&frags, 576, 0);
        assert_eq!(reassembled, payload);
        assert_eq!(frags[0].len(), 14 + 40 + 536);
        assert_eq!(frags[1].len(), 14 + 32 + 544);
        assert_eq!(frags.len(), 3);

        // Nothing to copy: later fragments have a bare header.
        let mut header = base_header(10);
        header.options = Ipv4Options::try_from(&[0x07, 7, 4, 0, 0, 0, 0, 0][..]).unwrap();
        let frags = fragments(&raw_frame(header, &payload), 576);
        for fragment in &frags[1..] {
            let (later, _) = parse(fragment, 576);
            assert_eq!(later.header_len(), 20);
        }
    }

    #[test]
    fn refuses_what_it_cannot_fragment() {
        let frame = udp_frame(3000);
        // Not IPv4, or not even a frame.
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(fragment_count(&arp, 1500), 0);
        assert_eq!(fragment_count(&frame[..13], 1500), 0);
        assert_eq!(
            fragment_count(&frame[..1000], 1500),
            0,
            "truncated datagram"
        );
        // The MTU must carry the header and 8 bytes.
        assert_eq!(fragment_count(&frame, 27), 0);
        assert_eq!(fragment_count(&frame, 28), 375);
        // DF set and too big: never fragmented.
        let mut header = base_header(1);
        header.dont_fragment = true;
        assert_eq!(fragment_count(&raw_frame(header, &data(2000)), 1500), 0);
        // An option whose length runs past the header, or is too short to be one.
        for bad in [[0x83, 9, 4, 0], [0x83, 1, 4, 0], [0x83, 0, 0, 0]] {
            let mut header = base_header(1);
            header.options = Ipv4Options::try_from(&bad[..]).unwrap();
            assert_eq!(fragment_count(&raw_frame(header, &data(2000)), 1500), 0);
        }
        // Offsets past the 13-bit field.
        let mut header = base_header(1);
        header.fragment_offset = IpFragOffset::try_new(8000).unwrap();
        assert_eq!(fragment_count(&raw_frame(header, &data(2000)), 576), 0);
        assert!(write_fragment(&arp, 1500, 0, &mut [0; ROOM]).is_none());
    }

    #[test]
    fn write_fragment_bounds() {
        let frame = udp_frame(3000);
        let mut room = [0u8; ROOM];
        assert!(write_fragment(&frame, 1500, 3, &mut room).is_none());
        assert!(write_fragment(&frame, 1500, usize::MAX, &mut room).is_none());
        assert!(write_fragment(&frame, 1500, 0, &mut room[..1513]).is_none());
        assert_eq!(
            write_fragment(&frame, 1500, 0, &mut room[..1514]),
            Some(1514)
        );
        assert!(write_fragment(&frame, 1500, 2, &mut room[..73]).is_none());
        assert_eq!(write_fragment(&frame, 1500, 2, &mut room[..74]), Some(74));
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut frame = udp_frame(100);
        frame.extend_from_slice(&[0xee; 30]);
        let frags = fragments(&frame, 68);
        let (payload, _) = reassemble(&frags, 68, 0);
        assert_eq!(payload, frame[34..134]);
    }

    /// A few options, copied and not, in a random order.
    fn options_strategy() -> impl Strategy<Value = Vec<u8>> {
        let option = prop_oneof![
            Just(vec![OPTION_NOP]),
            Just(vec![0x07, 7, 4, 0, 0, 0, 0]),
            Just(vec![0x94, 4, 0, 0]),
            Just(vec![0x83, 7, 4, 10, 0, 0, 9]),
            Just(vec![0x82, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        ];
        prop::collection::vec(option, 0..4).prop_map(|options| {
            let mut bytes: Vec<u8> = options.concat();
            bytes.resize(bytes.len().next_multiple_of(4), OPTION_EOL);
            bytes
        })
    }

    proptest! {
        #[test]
        fn fragments_cover_the_payload_exactly_once(
            payload_len in 0usize..9000,
            mtu in 68u16..9200,
            options in options_strategy(),
            original_offset in 0u16..64,
            original_mf in any::<bool>(),
        ) {
            let mut header = base_header(3);
            header.options = Ipv4Options::try_from(&options[..]).unwrap();
            header.fragment_offset = IpFragOffset::try_new(original_offset).unwrap();
            header.more_fragments = original_mf;
            let payload = data(payload_len);
            let frame = raw_frame(header, &payload);
            let count = fragment_count(&frame, mtu);
            prop_assert!(count >= 1);

            let base = usize::from(original_offset) * 8;
            let mut covered = vec![0u8; payload_len];
            let mut last_mf = false;
            let mut room = vec![0xa5u8; 14 + usize::from(mtu)];
            for index in 0..count {
                let len = write_fragment(&frame, mtu, index, &mut room).unwrap();
                let (header, data) = parse(&room[..len], mtu);
                let start = usize::from(header.fragment_offset.value()) * 8 - base;
                prop_assert_eq!(data, &payload[start..start + data.len()]);
                for seen in &mut covered[start..start + data.len()] {
                    *seen += 1;
                }
                if index + 1 < count {
                    prop_assert!(header.more_fragments);
                    prop_assert_eq!(data.len() % 8, 0);
                }
                last_mf = header.more_fragments;
            }
            prop_assert!(covered.iter().all(|&n| n == 1), "each byte exactly once");
            prop_assert_eq!(last_mf, original_mf);
        }

        #[test]
        fn arbitrary_frames_never_panic(
            mut frame in prop::collection::vec(any::<u8>(), 0..1600),
            ihl in 5u8..16,
            mtu in any::<u16>(),
            index in 0usize..40,
            out_len in 0usize..ROOM,
        ) {
            // Mostly plausible IPv4 so the option walk and layout see arbitrary values.
            if frame.len() >= 34 {
                frame[12..14].copy_from_slice(&[0x08, 0x00]);
                frame[14] = 0x40 | ihl;
                let total = (frame.len() - 14) as u16;
                frame[16..18].copy_from_slice(&total.to_be_bytes());
                frame[20] &= 0xbf;
            }
            let count = fragment_count(&frame, mtu);
            let mut out = vec![0u8; out_len];
            let written = write_fragment(&frame, mtu, index, &mut out);
            if let Some(len) = written {
                prop_assert!(len <= out_len);
                prop_assert!(index < count);
            }
        }
    }
}

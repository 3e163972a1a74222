//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! The fast path rewrites a few header words (TTL, NAT addresses and ports); patching the
//! checksum incrementally keeps that O(1) instead of re-summing the header or segment.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Sum of big-endian 16-bit words, an odd trailing byte padded with zero, in ones'-complement
/// terms: the value is that of the plain sum modulo 0xffff (and 0 only if every word is),
/// which is all a checksum keeps.
///
/// At most 0xffff, so that several sums (pseudo header, segment) can be added before one
/// [`fold`].
pub fn sum(data: &[u8]) -> u32 {
    // Summed as big-endian 32-bit words, eight bytes a step: 2^16 = 1 (mod 0xffff), so a
    // 32-bit word adds the same as its two 16-bit halves, in half the additions.
    let mut acc: u64 = 0;
    let mut quads = data.chunks_exact(8);
    for quad in &mut quads {
        let high = u32::from_be_bytes([quad[0], quad[1], quad[2], quad[3]]);
        let low = u32::from_be_bytes([quad[4], quad[5], quad[6], quad[7]]);
        acc += u64::from(high) + u64::from(low);
    }
    let mut words = quads.remainder().chunks_exact(2);
    for word in &mut words {
        acc += u64::from(u16::from_be_bytes([word[0], word[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold64(acc)
}

/// End-around carries down to 16 bits (2^16 = 1 mod 0xffff), so that callers can add
/// several sums without overflowing.
fn fold64(mut acc: u64) -> u32 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u32
}

/// [`sum`] of an IPv4 header without options, as five 32-bit words: what checking every
/// forwarded packet's header costs on the fast path.
#[inline]
pub fn sum_ipv4_header(header: &[u8; 20]) -> u32 {
    let word = |at: usize| {
        u64::from(u32::from_be_bytes([
            header[at],
            header[at + 1],
            header[at + 2],
            header[at + 3],
        ]))
    };
    // At most 5 * (2^32 - 1), 35 bits: three end-around carries bring it to 16.
    let acc = word(0) + word(4) + word(8) + word(12) + word(16);
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    ((acc & 0xffff) + (acc >> 16)) as u32
}

/// Folds carries back into 16 bits. Not complemented: `!fold(..)` is the checksum.
pub fn fold(sum: u32) -> u16 {
    // Two rounds take any u32 to 16 bits: the first leaves at most 0x1fffe.
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The value to put in a checksum field (zeroed while summing). Summing data that already
/// contains a correct checksum yields 0.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data))
}

/// Sum of the IPv4 pseudo header that TCP and UDP checksums cover (RFC 793, RFC 768).
pub fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> u32 {
    // Each address as one 32-bit word, as `sum` does (2^16 = 1 mod 0xffff).
    fold64(
        u64::from(u32::from(src))
            + u64::from(u32::from(dst))
            + u64::from(protocol)
            + u64::from(l4_len),
    )
}

/// RFC 1624 eqn. 3, `HC' = ~(~HC + ~m + m')`, for one changed 16-bit word.
///
/// Eqn. 3 rather than RFC 1141's form because it never turns a checksum into 0xffff when
/// recomputation would give 0x0000. UDP callers must skip a zero (absent) checksum and send
/// a zero result as 0xffff; that is UDP's rule, not arithmetic, so it is left to them.
pub fn update16(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    !fold(u32::from(!old_checksum) + u32::from(!old_word) + u32::from(new_word))
}

/// [`update16`] for a 32-bit field such as an IPv4 address.
pub fn update32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let high = update16(old_checksum, (old >> 16) as u16, (new >> 16) as u16);
    update16(high, old as u16, new as u16)
}

/// Checksum of a TCP or UDP segment over IPv4, pseudo header included.
pub(crate) fn l4_checksum(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, segment: &[u8]) -> u16 {
    // IPv4 caps L4 length at 16 bits; a longer slice cannot be a valid segment anyway.
    let len = segment.len() as u16;
    // Folding the segment first keeps the addition below from overflowing.
    !fold(pseudo_header_sum(src, dst, protocol, len) + u32::from(fold(sum(segment))))
}

/// Sum of the IPv6 pseudo header that TCP, UDP and ICMPv6 checksums cover (RFC 8200 8.1):
/// both addresses, the upper-layer length as 32 bits, three zero bytes and the Next Header.
pub fn pseudo_header_sum_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    // Each term is at most 0xffff, so the five add up without overflow.
    sum(&src.octets()) + sum(&dst.octets()) + sum(&len.to_be_bytes()) + u32::from(next_header)
}

/// Checksum of an upper-layer message over IPv6 (TCP, UDP, ICMPv6), pseudo header included.
pub fn l4_checksum_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, message: &[u8]) -> u16 {
    // An Ethernet frame's message is far below 2^32 bytes.
    let len = message.len() as u32;
    !fold(pseudo_header_sum_v6(src, dst, next_header, len) + sum(message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The 20-byte header from the Wikipedia "IPv4 header checksum" example.
    const IPV4_HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    fn words_to_bytes(words: &[u16]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of 0001 f203 f4f5 f6f7 is 2ddf0, folded ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data)), fold(0x2ddf0));
        assert_eq!(fold(sum(&data)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn odd_length_pads_last_byte() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x12, 0x34, 0xab]), 0x1234 + 0xab00);
        assert_eq!(sum(&[]), 0);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn fold_needs_a_second_carry() {
        // 0xffff + 0x1 carries again after the first fold.
        assert_eq!(fold(0x1_ffff), 0x0001);
        assert_eq!(fold(0xffff_ffff), 0xffff);
        assert_eq!(fold(0), 0);
    }

    #[test]
    fn large_input_does_not_overflow() {
        let data = vec![0xff; 1 << 20];
        assert_eq!(fold(sum(&data)), 0xffff);
        let data = vec![0x80; (1 << 20) + 1];
        let expected = (0..(1 << 19)).fold(0u64, |acc, _| acc + 0x8080) + 0x8000;
        assert_eq!(u64::from(fold(sum(&data))), (expected - 1) % 0xffff + 1);
    }

    #[test]
    fn known_ipv4_header_checksum() {
        let mut header = IPV4_HEADER;
        assert_eq!(checksum(&header), 0xb861);
        assert_eq!(fold(sum_ipv4_header(&header)), fold(sum(&header)));
        header[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&header), 0);
    }

    #[test]
    fn pseudo_header_matches_spelled_out_bytes() {
        let src = Ipv4Addr::new(192, 168, 1, 2);
        let dst = Ipv4Addr::new(8, 8, 8, 8);
        let bytes = [192, 168, 1, 2, 8, 8, 8, 8, 0, 17, 0x00, 0x25];
        assert_eq!(
            fold(pseudo_header_sum(src, dst, 17, 0x25)),
            fold(sum(&bytes))
        );
    }

    #[test]
    fn rfc1624_example_yields_positive_zero() {
        // RFC 1624 section 4: other words sum to 0xcd7a, m = 0x5555 becomes 0x3285.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
        assert_eq!(checksum(&words_to_bytes(&[0xcd7a, 0x3285])), 0x0000);
    }

    #[test]
    fn update_from_all_zero_data() {
        // All-zero data has checksum 0xffff, the only way to get it from a full computation.
        let mut data = [0u8; 8];
        assert_eq!(checksum(&data), 0xffff);
        data[2..4].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(update16(0xffff, 0, 0x1234), checksum(&data));
        assert_eq!(update32(0xffff, 0, 0x0000_1234), checksum(&data));
    }

    #[test]
    fn update_to_all_zero_data_gives_the_other_zero() {
        // The one disagreement with recomputation: both values mean zero, and no real header
        // (IPv4 has version 4) or segment with a pseudo header is ever all zeros.
        assert_eq!(checksum(&[0, 0]), 0xffff);
        assert_eq!(update16(!0x1234, 0x1234, 0), 0x0000);
    }

    /// Words biased towards the ones'-complement zeros, where update bugs live.
    fn word() -> impl Strategy<Value = u16> {
        prop_oneof![Just(0u16), Just(0xffff), any::<u16>()]
    }

    proptest! {
        #[test]
        fn update16_matches_recomputation(
            mut words in prop::collection::vec(word(), 1..32),
            index in any::<prop::sample::Index>(),
            new_word in word(),
        ) {
            let i = index.index(words.len());
            let before = checksum(&words_to_bytes(&words));
            let old_word = words[i];
            words[i] = new_word;
            let after = checksum(&words_to_bytes(&words));
            let incremental = update16(before, old_word, new_word);
            if words.iter().all(|&w| w == 0) {
                prop_assert_eq!(incremental, 0);
            } else {
                prop_assert_eq!(incremental, after);
            }
        }

        #[test]
        fn update16_reaching_negative_zero_sum(
            mut words in prop::collection::vec(word(), 2..32),
            index in any::<prop::sample::Index>(),
        ) {
            // Pick the new word so the data sums to 0xffff and the checksum is 0x0000.
            let i = index.index(words.len());
            let before = checksum(&words_to_bytes(&words));
            let old_word = words[i];
            words[i] = 0;
            let new_word = !fold(sum(&words_to_bytes(&words)));
            words[i] = new_word;
            prop_assert_eq!(checksum(&words_to_bytes(&words)), 0x0000);
            prop_assert_eq!(update16(before, old_word, new_word), 0x0000);
        }

        #[test]
        fn update32_matches_recomputation(
            mut words in prop::collection::vec(word(), 2..32),
            index in any::<prop::sample::Index>(),
            new in prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()],
        ) {
            let i = index.index(words.len() - 1);
            let before = checksum(&words_to_bytes(&words));
            let old = u32::from(words[i]) << 16 | u32::from(words[i + 1]);
            words[i] = (new >> 16) as u16;
            words[i + 1] = new as u16;
            let after = checksum(&words_to_bytes(&words));
            let incremental = update32(before, old, new);
            if words.iter().all(|&w| w == 0) {
                prop_assert_eq!(incremental, 0);
            } else {
                prop_assert_eq!(incremental, after);
            }
        }

        #[test]
        fn ipv4_address_rewrite_matches_recomputation(src in any::<u32>(), new_src in any::<u32>()) {
            let mut header = IPV4_HEADER;
            header[12..16].copy_from_slice(&src.to_be_bytes());
            let before = checksum(&header);
            header[12..16].copy_from_slice(&new_src.to_be_bytes());
            prop_assert_eq!(update32(before, src, new_src), checksum(&header));
        }
    }
}

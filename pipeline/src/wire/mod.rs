//! Zero-copy views over packet bytes.
//!
//! Each protocol has a `Packet<T: AsRef<[u8]>>` (`Frame` for Ethernet) that reads and writes
//! fields in place, so the fast path never copies or allocates. `new_checked` validates every
//! length the getters rely on, which is what makes the getters of a checked view panic-free on
//! arbitrary input. `new_unchecked` exists for buffers we are about to fill ourselves.
//!
//! Setters that change a length field (`set_header_len`, `set_total_len`, ...) can invalidate
//! that guarantee; call `check_len` again before reading variable-length parts afterwards.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod family;
pub mod icmp;
pub mod icmpv6;
pub mod ipv4;
pub mod ipv6;
pub mod ndisc;
pub mod pppoe;
pub mod tcp;
pub mod udp;

use core::fmt;
use core::str::FromStr;

pub use self::arp::{ArpRepr, Operation as ArpOperation, Packet as ArpPacket};
pub use self::ethernet::Frame as EthernetFrame;
pub use self::icmp::Packet as IcmpPacket;
pub use self::icmpv6::Packet as Icmpv6Packet;
pub use self::ipv4::{Packet as Ipv4Packet, Repr as Ipv4Repr};
pub use self::ipv6::{Packet as Ipv6Packet, Repr as Ipv6Repr};
pub use self::tcp::Packet as TcpPacket;
pub use self::udp::Packet as UdpPacket;

/// Why a buffer was not accepted as a packet. Each variant is a distinct drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header (or the length a header claims) does.
    #[error("truncated packet")]
    Truncated,
    /// IPv4 version field is not 4.
    #[error("bad IP version")]
    BadVersion,
    /// IPv4 IHL is below the minimum of 5 words.
    #[error("bad IPv4 header length")]
    BadHeaderLength,
    /// IPv4 total length cannot even hold the header.
    #[error("bad IPv4 total length")]
    BadTotalLength,
    /// TCP data offset is below 5 words or points past the segment.
    #[error("bad TCP data offset")]
    BadDataOffset,
    /// UDP length is below 8 or past the datagram.
    #[error("bad UDP length")]
    BadUdpLength,
    /// Well-formed, but not something we handle (e.g. non-Ethernet/IPv4 ARP).
    #[error("unsupported packet")]
    Unsupported,
}

pub type Result<T> = core::result::Result<T, WireError>;

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    pub const fn is_broadcast(&self) -> bool {
        matches!(self.0, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff])
    }

    /// The I/G bit; broadcast is a multicast address too.
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Reads six bytes; callers pass a fixed-size field range, so the length always matches.
    pub(crate) fn from_field(bytes: &[u8]) -> EthernetAddress {
        let mut addr = [0; 6];
        addr.copy_from_slice(bytes);
        EthernetAddress(addr)
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// Returned when a string is not of the form `aa:bb:cc:dd:ee:ff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address, expected aa:bb:cc:dd:ee:ff")]
pub struct ParseEthernetAddressError;

impl FromStr for EthernetAddress {
    type Err = ParseEthernetAddressError;

    /// Strict on purpose: exactly six two-digit hex groups, so a typo in a config file is an
    /// error rather than a silently different address.
    fn from_str(s: &str) -> core::result::Result<Self, Self::Err> {
        let mut addr = [0u8; 6];
        let mut groups = s.split(':');
        for byte in addr.iter_mut() {
            let group = groups.next().ok_or(ParseEthernetAddressError)?;
            // from_str_radix alone would also accept a sign ("+f").
            if group.len() != 2 || !group.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(ParseEthernetAddressError);
            }
            *byte = u8::from_str_radix(group, 16).map_err(|_| ParseEthernetAddressError)?;
        }
        if groups.next().is_some() {
            return Err(ParseEthernetAddressError);
        }
        Ok(EthernetAddress(addr))
    }
}

/// Big-endian field access. Ranges come from each module's `field` constants and are exactly
/// as wide as the value, so `copy_from_slice` cannot fail once the range is in bounds.
pub(crate) mod bytes {
    use std::net::Ipv4Addr;

    pub fn read_u16(data: &[u8], at: core::ops::Range<usize>) -> u16 {
        let mut b = [0; 2];
        b.copy_from_slice(&data[at]);
        u16::from_be_bytes(b)
    }

    pub fn read_u32(data: &[u8], at: core::ops::Range<usize>) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&data[at]);
        u32::from_be_bytes(b)
    }

    pub fn read_ipv4(data: &[u8], at: core::ops::Range<usize>) -> Ipv4Addr {
        Ipv4Addr::from(read_u32(data, at))
    }

    pub fn write_u16(data: &mut [u8], at: core::ops::Range<usize>, value: u16) {
        data[at].copy_from_slice(&value.to_be_bytes());
    }

    pub fn write_u32(data: &mut [u8], at: core::ops::Range<usize>, value: u32) {
        data[at].copy_from_slice(&value.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethernet_address_classes() {
        assert!(EthernetAddress::BROADCAST.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        let mcast = EthernetAddress([0x01, 0x00, 0x5e, 0x00, 0x00, 0x01]);
        assert!(mcast.is_multicast() && !mcast.is_broadcast());
        let lacp = EthernetAddress([0x01, 0x80, 0xc2, 0x00, 0x00, 0x02]);
        assert!(lacp.is_multicast());
        let ucast = EthernetAddress([0x02, 0x00, 0x00, 0x00, 0x00, 0x01]);
        assert!(ucast.is_unicast() && !ucast.is_multicast());
    }

    #[test]
    fn ethernet_address_display_and_parse_round_trip() {
        let addr = EthernetAddress([0x00, 0x1b, 0x21, 0xAB, 0xcd, 0xef]);
        assert_eq!(addr.to_string(), "00:1b:21:ab:cd:ef");
        assert_eq!("00:1b:21:ab:cd:ef".parse(), Ok(addr));
        assert_eq!("00:1B:21:AB:CD:EF".parse(), Ok(addr));
        assert_eq!("ff:ff:ff:ff:ff:ff".parse(), Ok(EthernetAddress::BROADCAST));
    }

    #[test]
    fn ethernet_address_rejects_malformed() {
        for bad in [
            "",
            "00:1b:21:ab:cd",
            "00:1b:21:ab:cd:ef:00",
            "00:1b:21:ab:cd:ef:",
            "0:1b:21:ab:cd:ef",
            "000:1b:21:ab:cd:ef",
            "+0:1b:21:ab:cd:ef",
            "00-1b-21-ab-cd-ef",
            "00:1b:21:ab:cd:eg",
            "00:1b:21:ab:cd:é",
        ] {
            assert_eq!(
                bad.parse::<EthernetAddress>(),
                Err(ParseEthernetAddressError),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn wire_error_is_a_std_error() {
        let err: Box<dyn std::error::Error> = Box::new(WireError::Truncated);
        assert_eq!(err.to_string(), "truncated packet");
    }
}

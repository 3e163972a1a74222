//! What the two IP families differ in when the gateway writes a packet of its own: the
//! header in front of the payload, and the checksum over the pseudo-header. Writers generic
//! over [`IpFamily`] (the TCP segments the gateway sends: resets, the SYN proxy's) are
//! written once for IPv4 and IPv6.

use core::net::{Ipv4Addr, Ipv6Addr};

use super::{checksum, ipv4, ipv6, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr};

/// An IP address family, by its address type.
pub trait IpFamily: Copy {
    /// The length of the header [`emit_header`](IpFamily::emit_header) writes.
    const HEADER_LEN: usize;

    /// Writes a header from `self` to `dst` for `payload_len` bytes of `protocol` with the
    /// given TTL (hop limit) into `header`, which is [`HEADER_LEN`](IpFamily::HEADER_LEN)
    /// bytes long.
    fn emit_header(self, dst: Self, protocol: u8, payload_len: u16, ttl: u8, header: &mut [u8]);

    /// The upper-layer checksum of `message` (its checksum field zero) from `self` to `dst`.
    fn l4_checksum(self, dst: Self, protocol: u8, message: &[u8]) -> u16;
}

impl IpFamily for Ipv4Addr {
    const HEADER_LEN: usize = ipv4::HEADER_LEN;

    fn emit_header(self, dst: Self, protocol: u8, payload_len: u16, ttl: u8, header: &mut [u8]) {
        Ipv4Repr::new(self, dst, protocol, payload_len, ttl)
            .emit(&mut Ipv4Packet::new_unchecked(header));
    }

    fn l4_checksum(self, dst: Self, protocol: u8, message: &[u8]) -> u16 {
        checksum::l4_checksum(self, dst, protocol, message)
    }
}

impl IpFamily for Ipv6Addr {
    const HEADER_LEN: usize = ipv6::HEADER_LEN;

    fn emit_header(self, dst: Self, protocol: u8, payload_len: u16, ttl: u8, header: &mut [u8]) {
        let repr = Ipv6Repr {
            src: self,
            dst,
            next_header: protocol,
            payload_len,
            hop_limit: ttl,
            traffic_class: 0,
            flow_label: 0,
        };
        repr.emit(&mut Ipv6Packet::new_unchecked(header));
    }

    fn l4_checksum(self, dst: Self, protocol: u8, message: &[u8]) -> u16 {
        checksum::l4_checksum_v6(self, dst, protocol, message)
    }
}

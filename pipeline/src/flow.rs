//! The identity of a flow: its 5-tuple as seen in one direction.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::wire::icmpv6;
use crate::wire::ipv6::{next_header, Extensions};
use crate::wire::{
    ipv4, udp, IcmpPacket, Icmpv6Packet, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket,
};

/// A flow's 5-tuple in one direction. For ICMP queries (echo, timestamp, info) both "ports"
/// hold the query identifier, so the reply's key is the exact reverse of the request's.
/// For protocols without ports both are 0. Serialized into state snapshots
/// (`crate::pipeline::operator::snapshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FlowKey {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
}

/// An IPv6 flow's 5-tuple in one direction, as [`FlowKey`] is IPv4's (ICMPv6 queries: the
/// identifier in both "ports"). Its own type, for a flow table of its own, so that IPv4's
/// keys stay 13 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey6 {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
}

/// A flow tuple of either family, by its two ends (address and port): what is written the
/// same for both, such as the gateway's own TCP segments, takes one.
pub trait FlowEnds {
    type Addr: Copy;
    fn source(&self) -> (Self::Addr, u16);
    fn destination(&self) -> (Self::Addr, u16);
}

impl FlowEnds for FlowKey {
    type Addr = Ipv4Addr;
    fn source(&self) -> (Ipv4Addr, u16) {
        (self.src, self.src_port)
    }
    fn destination(&self) -> (Ipv4Addr, u16) {
        (self.dst, self.dst_port)
    }
}

impl FlowEnds for FlowKey6 {
    type Addr = Ipv6Addr;
    fn source(&self) -> (Ipv6Addr, u16) {
        (self.src, self.src_port)
    }
    fn destination(&self) -> (Ipv6Addr, u16) {
        (self.dst, self.dst_port)
    }
}

impl FlowKey6 {
    pub const UNSPECIFIED: FlowKey6 = FlowKey6 {
        src: Ipv6Addr::UNSPECIFIED,
        dst: Ipv6Addr::UNSPECIFIED,
        src_port: 0,
        dst_port: 0,
        protocol: 0,
    };

    pub fn reversed(&self) -> FlowKey6 {
        FlowKey6 {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }

    /// The key of an IPv6 packet already validated by `Ipv6Packet::new_checked`, whose
    /// extension headers `ext` walked ([`crate::wire::ipv6::walk_extensions`]). A later
    /// fragment has no ports of its own; an ICMPv6 error belongs to the flow it quotes.
    pub fn from_ipv6<T: AsRef<[u8]>>(
        ip: &Ipv6Packet<T>,
        ext: &Extensions,
    ) -> Result<FlowKey6, KeyError> {
        if !ext.has_upper_layer_header() {
            return Err(KeyError::Fragment);
        }
        let upper = ip.payload().get(ext.offset..).ok_or(KeyError::Malformed)?;
        let (src_port, dst_port) = match ext.protocol {
            next_header::TCP => {
                let tcp = TcpPacket::new_checked(upper).map_err(|_| KeyError::Malformed)?;
                (tcp.src_port(), tcp.dst_port())
            }
            // A first fragment's UDP length counts the whole datagram: only the header
            // itself must be here (the walk checked that much).
            next_header::UDP if ext.fragment.is_some_and(|fragment| fragment.more) => {
                if upper.len() < udp::HEADER_LEN {
                    return Err(KeyError::Malformed);
                }
                let udp = UdpPacket::new_unchecked(upper);
                (udp.src_port(), udp.dst_port())
            }
            next_header::UDP => {
                let udp = UdpPacket::new_checked(upper).map_err(|_| KeyError::Malformed)?;
                (udp.src_port(), udp.dst_port())
            }
            next_header::ICMPV6 => {
                let message = Icmpv6Packet::new_checked(upper).map_err(|_| KeyError::Malformed)?;
                if message.is_error() {
                    return Err(KeyError::IcmpError);
                }
                match message.msg_type() {
                    icmpv6::msg_type::ECHO_REQUEST | icmpv6::msg_type::ECHO_REPLY => {
                        (message.echo_ident(), message.echo_ident())
                    }
                    // Neighbor Discovery, MLD and the rest are not flows.
                    _ => return Err(KeyError::Malformed),
                }
            }
            _ => (0, 0),
        };
        Ok(FlowKey6 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            src_port,
            dst_port,
            protocol: ext.protocol,
        })
    }
}

/// Which way a packet travels relative to the packet that created its flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Original,
    Reply,
}

impl Direction {
    pub fn opposite(self) -> Direction {
        match self {
            Direction::Original => Direction::Reply,
            Direction::Reply => Direction::Original,
        }
    }
}

/// Why a packet has no flow key of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// A non-initial fragment: its ports are in another packet.
    Fragment,
    /// An ICMP error: it belongs to the flow of the datagram it quotes.
    IcmpError,
    /// The L4 header is truncated or inconsistent.
    Malformed,
}

impl Default for FlowKey {
    fn default() -> Self {
        FlowKey {
            src: Ipv4Addr::UNSPECIFIED,
            dst: Ipv4Addr::UNSPECIFIED,
            src_port: 0,
            dst_port: 0,
            protocol: 0,
        }
    }
}

impl FlowKey {
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            protocol: self.protocol,
        }
    }

    /// The key of an IPv4 packet already validated by `Ipv4Packet::new_checked`.
    pub fn from_ipv4<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Result<FlowKey, KeyError> {
        if ip.frag_offset() != 0 {
            return Err(KeyError::Fragment);
        }
        let (src_port, dst_port) = match ip.protocol() {
            ipv4::protocol::TCP => {
                let tcp = TcpPacket::new_checked(ip.payload()).map_err(|_| KeyError::Malformed)?;
                (tcp.src_port(), tcp.dst_port())
            }
            // The length field of a first fragment's header counts the whole datagram, most
            // of which is in later fragments: only the header itself must be here.
            ipv4::protocol::UDP if ip.more_frags() => {
                if ip.payload().len() < udp::HEADER_LEN {
                    return Err(KeyError::Malformed);
                }
                let udp = UdpPacket::new_unchecked(ip.payload());
                (udp.src_port(), udp.dst_port())
            }
            ipv4::protocol::UDP => {
                let udp = UdpPacket::new_checked(ip.payload()).map_err(|_| KeyError::Malformed)?;
                (udp.src_port(), udp.dst_port())
            }
            ipv4::protocol::ICMP => {
                let message =
                    IcmpPacket::new_checked(ip.payload()).map_err(|_| KeyError::Malformed)?;
                if message.is_error() {
                    return Err(KeyError::IcmpError);
                }
                if !message.is_query() {
                    return Err(KeyError::Malformed);
                }
                (message.echo_ident(), message.echo_ident())
            }
            _ => (0, 0),
        };
        Ok(FlowKey {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            src_port,
            dst_port,
            protocol: ip.protocol(),
        })
    }
}

/// The tuple a flow's replies carry, from the endpoints its first packet leaves with:
/// `to` after a forward's translation, `from` after masquerade. An ICMP query's reply
/// carries the (translated) identifier in both "ports".
pub(crate) fn reply_key(protocol: u8, to: (Ipv4Addr, u16), from: (Ipv4Addr, u16)) -> FlowKey {
    let (dst, dst_port) = to;
    let (src, src_port) = from;
    FlowKey {
        src: dst,
        dst: src,
        src_port: if protocol == ipv4::protocol::ICMP {
            src_port
        } else {
            dst_port
        },
        dst_port: src_port,
        protocol,
    }
}

/// TCP, UDP and ICMP queries carry the ports (or identifiers) NAT translates.
pub(crate) fn has_ports(protocol: u8) -> bool {
    matches!(
        protocol,
        ipv4::protocol::TCP | ipv4::protocol::UDP | ipv4::protocol::ICMP
    )
}

#[cfg(test)]
mod ipv6_key_tests {
    use etherparse::PacketBuilder;

    use super::*;
    use crate::wire::ipv6::walk_extensions;

    const A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    fn key_of(packet: &[u8]) -> Result<FlowKey6, KeyError> {
        let ip = Ipv6Packet::new_checked(packet).unwrap();
        let ext = walk_extensions(ip.next_header(), ip.payload()).unwrap();
        FlowKey6::from_ipv6(&ip, &ext)
    }

    #[test]
    fn tcp_udp_and_echo_have_keys_whose_reverse_is_the_reply() {
        let mut tcp = Vec::new();
        PacketBuilder::ipv6(A, B, 64)
            .tcp(40000, 443, 1, 1000)
            .write(&mut tcp, &[])
            .unwrap();
        let key = key_of(&tcp).unwrap();
        assert_eq!((key.src_port, key.dst_port, key.protocol), (40000, 443, 6));
        assert_eq!((key.src, key.dst), (Ipv6Addr::from(A), Ipv6Addr::from(B)));
        let mut reply = Vec::new();
        PacketBuilder::ipv6(B, A, 64)
            .tcp(443, 40000, 1, 1000)
            .write(&mut reply, &[])
            .unwrap();
        assert_eq!(key_of(&reply).unwrap(), key.reversed());

        let mut udp = Vec::new();
        PacketBuilder::ipv6(A, B, 64)
            .udp(5353, 53)
            .write(&mut udp, b"q")
            .unwrap();
        assert_eq!(key_of(&udp).unwrap().dst_port, 53);

        let mut echo = Vec::new();
        PacketBuilder::ipv6(A, B, 64)
            .icmpv6_echo_request(77, 1)
            .write(&mut echo, b"")
            .unwrap();
        let key = key_of(&echo).unwrap();
        assert_eq!((key.src_port, key.dst_port, key.protocol), (77, 77, 58));
    }

    #[test]
    fn errors_and_neighbor_discovery_are_not_flows() {
        let mut error = Vec::new();
        PacketBuilder::ipv6(A, B, 64)
            .icmpv6(etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 })
            .write(&mut error, &[0; 48])
            .unwrap();
        assert_eq!(key_of(&error), Err(KeyError::IcmpError));
        let mut ns = Vec::new();
        PacketBuilder::ipv6(A, B, 255)
            .icmpv6(etherparse::Icmpv6Type::Unknown {
                type_u8: 135,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut ns, &[0; 16])
            .unwrap();
        assert_eq!(key_of(&ns), Err(KeyError::Malformed));
        // A TCP header cut short.
        let mut cut = Vec::new();
        PacketBuilder::ipv6(A, B, 64)
            .udp(1, 2)
            .write(&mut cut, &[])
            .unwrap();
        cut[6] = 6;
        assert_eq!(key_of(&cut), Err(KeyError::Malformed));
    }
}

//! The identity of a flow: its 5-tuple as seen in one direction.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::wire::{ipv4, udp, IcmpPacket, Ipv4Packet, TcpPacket, UdpPacket};

/// A flow's 5-tuple in one direction. For ICMP queries (echo, timestamp, info) both "ports"
/// hold the query identifier, so the reply's key is the exact reverse of the request's.
/// For protocols without ports both are 0. Serialized into state snapshots
/// (`crate::pipeline::snapshot`).
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

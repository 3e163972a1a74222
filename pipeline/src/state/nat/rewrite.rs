//! In-place NAT rewrites of an IPv4 packet (the slice starts at the IP header), with every
//! checksum patched incrementally (RFC 1624) rather than recomputed: O(1) whatever the payload
//! size, correct on a first fragment whose L4 checksum covers bytes in other fragments, and a
//! checksum that was wrong on arrival stays wrong, so the receiver still drops a corrupted
//! packet.
//!
//! Every function validates all it needs before writing, so an `Err` leaves the packet as it
//! was.

use std::fmt;
use std::net::Ipv4Addr;

use crate::flow::FlowKey;
use crate::wire::checksum::{fold, update16, update32};
use crate::wire::ipv4::protocol;
use crate::wire::{icmp, ipv4, tcp, udp, IcmpPacket, Ipv4Packet, TcpPacket, UdpPacket};

/// Why a packet could not be rewritten. Each variant is meant as a drop counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RewriteError {
    /// The IPv4 header fails `Ipv4Packet::new_checked`.
    BadIpHeader,
    /// The TCP, UDP or ICMP header ends before the fields the rewrite changes.
    Truncated,
    /// An ICMP error: its quoted datagram has to be translated too, by
    /// [`rewrite_icmp_error`].
    IcmpError,
    /// [`rewrite_icmp_error`] on a packet that is not an ICMP error.
    NotIcmpError,
    /// [`rewrite_icmp_error`] on a non-initial fragment: the ICMP header is in another one.
    Fragment,
    /// The quoted datagram has no plausible IPv4 header, or lacks the ports to rewrite.
    BadQuote,
}

impl fmt::Display for RewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RewriteError::BadIpHeader => "bad IPv4 header",
            RewriteError::Truncated => "transport header too short to rewrite",
            RewriteError::IcmpError => "ICMP error needs its quote translated",
            RewriteError::NotIcmpError => "not an ICMP error",
            RewriteError::Fragment => "ICMP error fragment without its header",
            RewriteError::BadQuote => "ICMP error quote unusable",
        })
    }
}

impl std::error::Error for RewriteError {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Source,
    Destination,
}

/// Byte offsets of the fields rewritten inside an ICMP error's quote, which is reached by
/// offset rather than through the views because every word written there must also be
/// folded into the outer ICMP checksum.
mod offset {
    pub const IP_CHECKSUM: usize = 10;
    pub const IP_SRC: usize = 12;
    pub const IP_DST: usize = 16;
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const UDP_CHECKSUM: usize = 6;
    pub const TCP_CHECKSUM: usize = 16;
    pub const ICMP_CHECKSUM: usize = 2;
    pub const ICMP_IDENT: usize = 4;
}

impl Side {
    fn addr_offset(self) -> usize {
        match self {
            Side::Source => offset::IP_SRC,
            Side::Destination => offset::IP_DST,
        }
    }

    fn port_offset(self) -> usize {
        match self {
            Side::Source => offset::SRC_PORT,
            Side::Destination => offset::DST_PORT,
        }
    }
}

/// What a packet carries where NAT has to change it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum L4 {
    Tcp,
    Udp,
    /// Echo, timestamp or information: the identifier stands for both ports.
    IcmpQuery,
    /// No ports: another protocol, an ICMP message that is neither query nor error, or a
    /// non-initial fragment.
    AddressOnly,
}

/// The L4 kind of a packet's payload, checked long enough for the fields NAT rewrites.
fn classify(protocol: u8, first_fragment: bool, payload: &[u8]) -> Result<L4, RewriteError> {
    if !first_fragment {
        // Its ports live in the first fragment, whose L4 checksum covers the whole datagram;
        // only the addresses (and the IP header checksum) are here to change.
        return Ok(L4::AddressOnly);
    }
    let (kind, needed) = match protocol {
        protocol::TCP => (L4::Tcp, tcp::HEADER_LEN),
        protocol::UDP => (L4::Udp, udp::HEADER_LEN),
        protocol::ICMP => {
            let message = IcmpPacket::new_checked(payload).map_err(|_| RewriteError::Truncated)?;
            if message.is_error() {
                return Err(RewriteError::IcmpError);
            }
            let kind = if message.is_query() {
                L4::IcmpQuery
            } else {
                L4::AddressOnly
            };
            (kind, icmp::HEADER_LEN)
        }
        _ => (L4::AddressOnly, 0),
    };
    if payload.len() < needed {
        return Err(RewriteError::Truncated);
    }
    Ok(kind)
}

/// What NAT from one tuple to another and the TTL decrement add to a forwarded TCP or UDP
/// datagram's checksums, summed once per flow direction so that each packet's rewrite
/// ([`rewrite_forwarded`]) is one addition per checksum.
///
/// The same words as [`rewrite_source`], [`rewrite_destination`] and
/// `Ipv4Packet::decrement_ttl` patch one by one with RFC 1624 eqn. 3, so the same bytes:
/// eqn. 3 applied word by word is one end-around-carry sum of every `!old + new`, and that
/// sum is +0 (0x0000) only if every term is, whether summed in steps or at once. UDP's 0 →
/// 0xffff rule between the two endpoints changes only which zero a step holds, which the
/// rule at the end settles the same way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChecksumDeltas {
    ip: u16,
    l4: u16,
}

impl ChecksumDeltas {
    pub(crate) fn new(current: &FlowKey, target: &FlowKey) -> ChecksumDeltas {
        // The TTL's word [ttl, protocol] becomes [ttl - 1, protocol]: !m + m' = 0xfeff.
        let mut ip = 0xfeff_u32;
        let mut l4 = 0_u32;
        let endpoints = [
            (
                (current.src, current.src_port),
                (target.src, target.src_port),
            ),
            (
                (current.dst, current.dst_port),
                (target.dst, target.dst_port),
            ),
        ];
        for ((old_addr, old_port), (new_addr, new_port)) in endpoints {
            let (old_addr, new_addr) = (u32::from(old_addr), u32::from(new_addr));
            if old_addr != new_addr {
                let terms = word_terms(old_addr >> 16, new_addr >> 16)
                    + word_terms(old_addr & 0xffff, new_addr & 0xffff);
                ip += terms;
                l4 += terms;
            }
            if old_port != new_port {
                l4 += word_terms(u32::from(old_port), u32::from(new_port));
            }
        }
        ChecksumDeltas {
            ip: fold(ip),
            l4: fold(l4),
        }
    }
}

/// `!old + new` of one 16-bit word, eqn. 3's contribution.
fn word_terms(old: u32, new: u32) -> u32 {
    (!old & 0xffff) + new
}

fn add_delta(checksum: u16, delta: u16) -> u16 {
    !fold(u32::from(!checksum) + u32::from(delta))
}

/// The fast path's rewrite of a forwarded TCP or UDP datagram: its addresses and ports
/// become `target`'s, its TTL drops by one, and `deltas` (made from the datagram's own tuple
/// and `target`) patch its checksums. The caller has checked what the full path would: a
/// 20-byte IPv4 header, not a fragment, a TTL above 1, and an L4 header of `protocol` in
/// full. False, with nothing written, for any other protocol or a short datagram.
pub(crate) fn rewrite_forwarded(
    ip: &mut [u8],
    protocol: u8,
    target: &FlowKey,
    deltas: ChecksumDeltas,
) -> bool {
    let (l4_len, checksum_at) = match protocol {
        protocol::TCP => (tcp::HEADER_LEN, 16),
        protocol::UDP => (udp::HEADER_LEN, 6),
        _ => return false,
    };
    if ip.len() < ipv4::HEADER_LEN + l4_len {
        return false;
    }
    let (header, l4) = ip.split_at_mut(ipv4::HEADER_LEN);
    header[8] -= 1;
    let ip_sum = add_delta(u16::from_be_bytes([header[10], header[11]]), deltas.ip);
    header[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    header[12..16].copy_from_slice(&target.src.octets());
    header[16..20].copy_from_slice(&target.dst.octets());
    l4[0..2].copy_from_slice(&target.src_port.to_be_bytes());
    l4[2..4].copy_from_slice(&target.dst_port.to_be_bytes());
    let l4_sum = u16::from_be_bytes([l4[checksum_at], l4[checksum_at + 1]]);
    // UDP's rules (`patch_udp`): no checksum stays none, a computed 0 is sent as 0xffff.
    let l4_sum = match (protocol, l4_sum) {
        (protocol::UDP, 0) => 0,
        (protocol::UDP, old) => match add_delta(old, deltas.l4) {
            0 => 0xffff,
            new => new,
        },
        (_, old) => add_delta(old, deltas.l4),
    };
    l4[checksum_at..checksum_at + 2].copy_from_slice(&l4_sum.to_be_bytes());
    true
}

/// RFC 1624 for one word, skipping a word that does not change: eqn. 3 would otherwise turn
/// a (wrong, all-zero-data) 0xffff into 0 for nothing.
fn patch16(checksum: u16, old: u16, new: u16) -> u16 {
    if old == new {
        checksum
    } else {
        update16(checksum, old, new)
    }
}

fn patch32(checksum: u16, old: u32, new: u32) -> u16 {
    if old == new {
        checksum
    } else {
        update32(checksum, old, new)
    }
}

/// UDP's checksum rules on top of the arithmetic: 0 means "none" and stays so, and a
/// computed 0 goes on the wire as 0xffff.
fn patch_udp(checksum: u16, patch: impl FnOnce(u16) -> u16) -> u16 {
    match checksum {
        0 => 0,
        old => match patch(old) {
            0 => 0xffff,
            new => new,
        },
    }
}

/// Rewrites the source address and port (for ICMP queries, the identifier): SNAT on the way
/// out, or un-DNAT of a reply.
///
/// A non-initial fragment gets only its address rewritten. Its ports are in the first
/// fragment, and so is the L4 checksum, which covers the whole datagram and is patched when
/// the first fragment is rewritten.
pub fn rewrite_source(ip: &mut [u8], addr: Ipv4Addr, port: u16) -> Result<(), RewriteError> {
    rewrite_endpoint(ip, Side::Source, addr, port)
}

/// Rewrites the destination address and port (for ICMP queries, the identifier): DNAT, or
/// un-SNAT of a reply. Fragments as for [`rewrite_source`].
pub fn rewrite_destination(ip: &mut [u8], addr: Ipv4Addr, port: u16) -> Result<(), RewriteError> {
    rewrite_endpoint(ip, Side::Destination, addr, port)
}

fn rewrite_endpoint(
    ip: &mut [u8],
    side: Side,
    addr: Ipv4Addr,
    port: u16,
) -> Result<(), RewriteError> {
    let mut packet = Ipv4Packet::new_checked(ip).map_err(|_| RewriteError::BadIpHeader)?;
    let l4 = classify(
        packet.protocol(),
        packet.frag_offset() == 0,
        packet.payload(),
    )?;
    let (old_addr, new_addr) = match side {
        Side::Source => (packet.src_addr(), addr),
        Side::Destination => (packet.dst_addr(), addr),
    };
    let (old_addr, new_addr) = (u32::from(old_addr), u32::from(new_addr));

    let sum = patch32(packet.checksum(), old_addr, new_addr);
    packet.set_checksum(sum);
    match side {
        Side::Source => packet.set_src_addr(addr),
        Side::Destination => packet.set_dst_addr(addr),
    }

    let payload = packet.payload_mut();
    match l4 {
        L4::Tcp => {
            let mut tcp = TcpPacket::new_unchecked(payload);
            let old_port = match side {
                Side::Source => tcp.src_port(),
                Side::Destination => tcp.dst_port(),
            };
            let sum = patch16(patch32(tcp.checksum(), old_addr, new_addr), old_port, port);
            tcp.set_checksum(sum);
            match side {
                Side::Source => tcp.set_src_port(port),
                Side::Destination => tcp.set_dst_port(port),
            }
        }
        L4::Udp => {
            let mut udp = UdpPacket::new_unchecked(payload);
            let old_port = match side {
                Side::Source => udp.src_port(),
                Side::Destination => udp.dst_port(),
            };
            let sum = patch_udp(udp.checksum(), |sum| {
                patch16(patch32(sum, old_addr, new_addr), old_port, port)
            });
            udp.set_checksum(sum);
            match side {
                Side::Source => udp.set_src_port(port),
                Side::Destination => udp.set_dst_port(port),
            }
        }
        L4::IcmpQuery => {
            // ICMP has no pseudo header: only the identifier touches its checksum.
            let mut message = IcmpPacket::new_unchecked(&mut *payload);
            let sum = patch16(message.checksum(), message.echo_ident(), port);
            message.set_echo_ident(port);
            message.set_checksum(sum);
            // Eqn. 3 gives 0 where recomputation gives 0xffff for all-zero data, which an
            // echo reply with zero ident and sequence and no payload is. The pseudo header
            // rules that out for TCP and UDP, but not here; and only a 0 needs the look.
            if sum == 0 && payload.iter().all(|&b| b == 0) {
                IcmpPacket::new_unchecked(payload).set_checksum(0xffff);
            }
        }
        L4::AddressOnly => {}
    }
    Ok(())
}

/// Where an ICMP error's quote and the fields NAT changes in it are, as offsets from the
/// start of the ICMP message. All are even (the quote starts at 8, the quoted IP header is
/// whole 32-bit words), so every 16-bit field is one word of the outer ICMP checksum.
struct Quote {
    /// The ICMP message within the outer packet.
    icmp_start: usize,
    icmp_end: usize,
    /// The quoted transport header.
    l4_start: usize,
    protocol: u8,
    l4: QuotedL4,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum QuotedL4 {
    /// TCP or UDP ports are quoted; the checksum is at this offset in the L4 header if the
    /// quote reaches it.
    Ports { checksum: Option<usize> },
    /// An ICMP query: ident and checksum quoted.
    IcmpQuery,
    /// No ports to translate: another protocol, an ICMP message that is not a query, or a
    /// non-initial fragment.
    AddressOnly,
    /// Ports would be there but the quote stops short of them.
    Missing,
}

impl Quote {
    fn parse(ip: &[u8]) -> Result<Quote, RewriteError> {
        let outer = Ipv4Packet::new_checked(ip).map_err(|_| RewriteError::BadIpHeader)?;
        if outer.protocol() != protocol::ICMP {
            return Err(RewriteError::NotIcmpError);
        }
        if outer.frag_offset() != 0 {
            return Err(RewriteError::Fragment);
        }
        let message =
            IcmpPacket::new_checked(outer.payload()).map_err(|_| RewriteError::Truncated)?;
        if !message.is_error() {
            return Err(RewriteError::NotIcmpError);
        }
        let quote = message.data();
        // The quoted header is read through an unchecked view: its total length describes
        // the whole original datagram, of which the quote may hold only the first bytes.
        if quote.len() < ipv4::HEADER_LEN {
            return Err(RewriteError::BadQuote);
        }
        let inner = Ipv4Packet::new_unchecked(quote);
        let header_len = usize::from(inner.header_len());
        if inner.version() != 4 || header_len < ipv4::HEADER_LEN || header_len > quote.len() {
            return Err(RewriteError::BadQuote);
        }
        let l4_start = icmp::HEADER_LEN + header_len;
        let l4_bytes = &quote[header_len..];
        let l4_len = l4_bytes.len();
        let l4 = if inner.frag_offset() != 0 {
            QuotedL4::AddressOnly
        } else {
            match inner.protocol() {
                protocol::TCP | protocol::UDP if l4_len < 4 => QuotedL4::Missing,
                protocol::TCP | protocol::UDP => {
                    let checksum = if inner.protocol() == protocol::TCP {
                        offset::TCP_CHECKSUM
                    } else {
                        offset::UDP_CHECKSUM
                    };
                    QuotedL4::Ports {
                        checksum: (l4_len >= checksum + 2).then_some(checksum),
                    }
                }
                protocol::ICMP if l4_len < 1 => QuotedL4::Missing,
                protocol::ICMP => {
                    // Only the type byte is needed to classify; the views want 8 bytes.
                    let mut header = [0; icmp::HEADER_LEN];
                    let n = l4_len.min(icmp::HEADER_LEN);
                    header[..n].copy_from_slice(&l4_bytes[..n]);
                    if !IcmpPacket::new_unchecked(&header[..]).is_query() {
                        QuotedL4::AddressOnly
                    } else if l4_len < offset::ICMP_IDENT + 2 {
                        QuotedL4::Missing
                    } else {
                        QuotedL4::IcmpQuery
                    }
                }
                _ => QuotedL4::AddressOnly,
            }
        };
        let icmp_start = usize::from(outer.header_len());
        Ok(Quote {
            icmp_start,
            icmp_end: usize::from(outer.total_len()),
            l4_start,
            protocol: inner.protocol(),
            l4,
        })
    }
}

/// Writes `value` at `at` (even, within `message`) and folds the change into the checksum
/// `sum` of the enclosing ICMP message.
fn write_word(message: &mut [u8], at: usize, value: u16, sum: &mut u16) {
    *sum = patch16(*sum, read_word(message, at), value);
    message[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

fn read_word(message: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([message[at], message[at + 1]])
}

fn read_addr(message: &[u8], at: usize) -> u32 {
    u32::from(read_word(message, at)) << 16 | u32::from(read_word(message, at + 2))
}

/// Translates an ICMP error (RFC 5508): the outer addresses, and the quoted datagram's
/// addresses and ports (the identifier for a quoted ICMP query), with the quoted IP header
/// checksum, the quoted TCP/UDP/ICMP checksum when quoted (a quoted UDP checksum of 0 stays
/// 0), the outer ICMP checksum and the outer IP header checksum all patched. Anything else,
/// the next-hop MTU of "fragmentation needed" included, is left alone.
///
/// The quote travelled the other way: for an error from the WAN about a packet we SNATed, set
/// `outer_dst` to the internal host and `inner_src` to the internal endpoint. `None` leaves
/// that address (and port) as it is. For a quoted ICMP query the identifier stands for both
/// ports; if both inner endpoints are given, `inner_src`'s port sets it.
///
/// Errors when there is no outer ICMP error header to patch, no plausible quoted IP header,
/// or a port to rewrite that the quote does not reach.
pub fn rewrite_icmp_error(
    ip: &mut [u8],
    outer_dst: Option<Ipv4Addr>,
    outer_src: Option<Ipv4Addr>,
    inner_src: Option<(Ipv4Addr, u16)>,
    inner_dst: Option<(Ipv4Addr, u16)>,
) -> Result<(), RewriteError> {
    let quote = Quote::parse(ip)?;
    let wants_ports = inner_src.is_some() || inner_dst.is_some();
    if wants_ports && quote.l4 == QuotedL4::Missing {
        return Err(RewriteError::BadQuote);
    }

    let message = &mut ip[quote.icmp_start..quote.icmp_end];
    let mut icmp_sum = read_word(message, offset::ICMP_CHECKSUM);
    let quoted_ip = icmp::HEADER_LEN;
    let mut ip_sum = read_word(message, quoted_ip + offset::IP_CHECKSUM);
    // The quoted transport checksum, if quoted and in use: where it is and its value.
    let l4_checksum_at = match quote.l4 {
        QuotedL4::Ports { checksum } => checksum,
        QuotedL4::IcmpQuery => Some(offset::ICMP_CHECKSUM),
        QuotedL4::AddressOnly | QuotedL4::Missing => None,
    }
    .map(|at| quote.l4_start + at);
    let udp = quote.protocol == protocol::UDP;
    let mut l4_sum = l4_checksum_at
        .map(|at| read_word(message, at))
        .filter(|&sum| !(udp && sum == 0));
    // Only TCP and UDP checksums cover the addresses, through the pseudo header.
    let pseudo_header = matches!(quote.l4, QuotedL4::Ports { .. });

    let mut ident = None;
    for (side, endpoint) in [(Side::Source, inner_src), (Side::Destination, inner_dst)] {
        let Some((addr, port)) = endpoint else {
            continue;
        };
        let at = quoted_ip + side.addr_offset();
        let (old, new) = (read_addr(message, at), u32::from(addr));
        ip_sum = patch32(ip_sum, old, new);
        if pseudo_header {
            l4_sum = l4_sum.map(|sum| patch32(sum, old, new));
        }
        write_word(message, at, (new >> 16) as u16, &mut icmp_sum);
        write_word(message, at + 2, new as u16, &mut icmp_sum);

        match quote.l4 {
            QuotedL4::Ports { .. } => {
                let at = quote.l4_start + side.port_offset();
                let old = read_word(message, at);
                l4_sum = l4_sum.map(|sum| patch16(sum, old, port));
                write_word(message, at, port, &mut icmp_sum);
            }
            QuotedL4::IcmpQuery => {
                ident = ident.or(Some(port));
            }
            QuotedL4::AddressOnly | QuotedL4::Missing => {}
        }
    }
    if let Some(ident) = ident {
        let at = quote.l4_start + offset::ICMP_IDENT;
        let old = read_word(message, at);
        l4_sum = l4_sum.map(|sum| patch16(sum, old, ident));
        write_word(message, at, ident, &mut icmp_sum);
    }

    write_word(
        message,
        quoted_ip + offset::IP_CHECKSUM,
        ip_sum,
        &mut icmp_sum,
    );
    if let (Some(at), Some(sum)) = (l4_checksum_at, l4_sum) {
        // UDP sends a computed 0 as 0xffff (0 is "no checksum"). A quoted ICMP query whose
        // bytes are all zero checks only as 0xffff, as in `rewrite_endpoint`: Eqn. 3 gives 0.
        let checksum_field = at..at + 2;
        let all_zero_query = quote.l4 == QuotedL4::IcmpQuery
            && (quote.l4_start..message.len())
                .all(|i| checksum_field.contains(&i) || message[i] == 0);
        let sum = if sum == 0 && (udp || all_zero_query) {
            0xffff
        } else {
            sum
        };
        write_word(message, at, sum, &mut icmp_sum);
    }
    message[offset::ICMP_CHECKSUM..offset::ICMP_CHECKSUM + 2]
        .copy_from_slice(&icmp_sum.to_be_bytes());

    // The outer ICMP checksum has no pseudo header, so the outer addresses touch only the
    // IP header checksum.
    let mut outer = Ipv4Packet::new_unchecked(ip);
    let mut sum = outer.checksum();
    if let Some(addr) = outer_src {
        sum = patch32(sum, outer.src_addr().into(), addr.into());
        outer.set_src_addr(addr);
    }
    if let Some(addr) = outer_dst {
        sum = patch32(sum, outer.dst_addr().into(), addr.into());
        outer.set_dst_addr(addr);
    }
    outer.set_checksum(sum);
    Ok(())
}

/// The flow key of the datagram an ICMP error quotes, as that datagram travelled (so from
/// the host the error goes to); reverse it to find the conntrack entry of the error's own
/// direction. ICMP query identifiers fill both ports, as in [`FlowKey::from_ipv4`].
///
/// None if `ip` is not an ICMP error, or the quote is unusable: no plausible IP header, a
/// non-initial fragment, ports not quoted, or a quoted ICMP message that is not a query.
pub fn quoted_flow_key(ip: &[u8]) -> Option<FlowKey> {
    let quote = Quote::parse(ip).ok()?;
    let message = &ip[quote.icmp_start..quote.icmp_end];
    let quoted_ip = icmp::HEADER_LEN;
    let inner = Ipv4Packet::new_unchecked(&message[quoted_ip..]);
    if inner.frag_offset() != 0 {
        return None;
    }
    let (src_port, dst_port) = match quote.l4 {
        QuotedL4::Ports { .. } => (
            read_word(message, quote.l4_start + offset::SRC_PORT),
            read_word(message, quote.l4_start + offset::DST_PORT),
        ),
        QuotedL4::IcmpQuery => {
            let ident = read_word(message, quote.l4_start + offset::ICMP_IDENT);
            (ident, ident)
        }
        QuotedL4::AddressOnly if quote.protocol != protocol::ICMP => (0, 0),
        QuotedL4::AddressOnly | QuotedL4::Missing => return None,
    };
    Some(FlowKey {
        src: inner.src_addr(),
        dst: inner.dst_addr(),
        src_port,
        dst_port,
        protocol: quote.protocol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::checksum;
    use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
    use etherparse::{
        Icmpv4Header, Icmpv4Type, IpNumber, Ipv4Header, PacketBuilder, TcpHeader, TcpOptionElement,
        UdpHeader,
    };
    use proptest::prelude::*;

    const INTERNAL: (Ipv4Addr, u16) = (Ipv4Addr::new(192, 168, 1, 10), 40000);
    const EXTERNAL: (Ipv4Addr, u16) = (Ipv4Addr::new(203, 0, 113, 5), 61001);
    const REMOTE: (Ipv4Addr, u16) = (Ipv4Addr::new(93, 184, 216, 34), 443);
    const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
    const PAYLOAD: &[u8] = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Kind {
        TcpSyn,
        TcpData,
        Udp,
        UdpNoChecksum,
        /// Echo request from `src` (ident = src port) or, as a reply, echo reply to `dst`
        /// (ident = dst port).
        Echo,
    }

    const KINDS: [Kind; 5] = [
        Kind::TcpSyn,
        Kind::TcpData,
        Kind::Udp,
        Kind::UdpNoChecksum,
        Kind::Echo,
    ];

    /// The packet etherparse builds from scratch, every checksum computed by it.
    fn build(kind: Kind, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
        let ip = PacketBuilder::ipv4(src.0.octets(), dst.0.octets(), 63);
        let mut out = Vec::new();
        match kind {
            Kind::TcpSyn => ip
                .tcp(src.1, dst.1, 0x0102_0304, 64240)
                .syn()
                .options(&[
                    TcpOptionElement::MaximumSegmentSize(1460),
                    TcpOptionElement::SelectiveAcknowledgementPermitted,
                    TcpOptionElement::WindowScale(7),
                ])
                .unwrap()
                .write(&mut out, payload),
            Kind::TcpData => ip
                .tcp(src.1, dst.1, 0x0a0b_0c0d, 502)
                .ack(0x1111_2222)
                .psh()
                .write(&mut out, payload),
            Kind::Udp | Kind::UdpNoChecksum => ip.udp(src.1, dst.1).write(&mut out, payload),
            Kind::Echo => ip.icmpv4_echo_request(src.1, 7).write(&mut out, payload),
        }
        .unwrap();
        if kind == Kind::UdpNoChecksum {
            out[26..28].fill(0);
        }
        out
    }

    /// The reply direction of `build`: for echo, a reply whose ident is `dst`'s port.
    fn build_reply(
        kind: Kind,
        src: (Ipv4Addr, u16),
        dst: (Ipv4Addr, u16),
        payload: &[u8],
    ) -> Vec<u8> {
        if kind != Kind::Echo {
            return build(kind, src, dst, payload);
        }
        let mut out = Vec::new();
        PacketBuilder::ipv4(src.0.octets(), dst.0.octets(), 63)
            .icmpv4_echo_reply(dst.1, 7)
            .write(&mut out, payload)
            .unwrap();
        out
    }

    fn icmp_error(src: Ipv4Addr, dst: Ipv4Addr, icmp_type: Icmpv4Type, quote: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        PacketBuilder::ipv4(src.octets(), dst.octets(), 64)
            .icmpv4(icmp_type)
            .write(&mut out, quote)
            .unwrap();
        out
    }

    fn port_unreachable() -> Icmpv4Type {
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::Port)
    }

    fn ttl_exceeded() -> Icmpv4Type {
        Icmpv4Type::TimeExceeded(TimeExceededCode::TtlExceededInTransit)
    }

    fn frag_needed(next_hop_mtu: u16) -> Icmpv4Type {
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu,
        })
    }

    fn assert_ip_checksum(ip: &[u8]) {
        let (header, _) = Ipv4Header::from_slice(ip).unwrap();
        assert_eq!(header.header_checksum, header.calc_header_checksum(), "IP");
    }

    /// Checks every checksum with etherparse: the IP header, TCP, UDP (unless 0) or ICMP,
    /// and for an ICMP error the quoted IP header, and the quoted datagram's own checksums
    /// when the whole of it is quoted.
    fn assert_checksums(ip: &[u8]) {
        let (header, _) = Ipv4Header::from_slice(ip).unwrap();
        assert_eq!(header.header_checksum, header.calc_header_checksum(), "IP");
        let payload = &ip[header.header_len()..usize::from(header.total_len)];
        match header.protocol {
            IpNumber::TCP => {
                let (tcp, data) = TcpHeader::from_slice(payload).unwrap();
                assert_eq!(
                    tcp.checksum,
                    tcp.calc_checksum_ipv4(&header, data).unwrap(),
                    "TCP"
                );
            }
            IpNumber::UDP => {
                let (udp, data) = UdpHeader::from_slice(payload).unwrap();
                if udp.checksum != 0 {
                    let expected = udp.calc_checksum_ipv4(&header, data).unwrap();
                    assert_eq!(udp.checksum, expected, "UDP");
                }
            }
            IpNumber::ICMP => {
                let (icmp, data) = Icmpv4Header::from_slice(payload).unwrap();
                let expected = Icmpv4Header::with_checksum(icmp.icmp_type.clone(), data);
                assert_eq!(icmp.checksum, expected.checksum, "ICMP");
                if matches!(
                    icmp.icmp_type,
                    Icmpv4Type::DestinationUnreachable(_) | Icmpv4Type::TimeExceeded(_)
                ) {
                    let (quoted, _) = Ipv4Header::from_slice(data).unwrap();
                    assert_eq!(
                        quoted.header_checksum,
                        quoted.calc_header_checksum(),
                        "quote"
                    );
                    if data.len() >= usize::from(quoted.total_len) {
                        assert_checksums(&data[..usize::from(quoted.total_len)]);
                    }
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_kind_rewrites_to_what_etherparse_builds() {
        for kind in KINDS {
            // SNAT on the way out.
            let mut packet = build(kind, INTERNAL, REMOTE, PAYLOAD);
            rewrite_source(&mut packet, EXTERNAL.0, EXTERNAL.1).unwrap();
            assert_eq!(packet, build(kind, EXTERNAL, REMOTE, PAYLOAD), "{kind:?}");
            assert_checksums(&packet);

            // And back in.
            let mut reply = build_reply(kind, REMOTE, EXTERNAL, PAYLOAD);
            rewrite_destination(&mut reply, INTERNAL.0, INTERNAL.1).unwrap();
            assert_eq!(
                reply,
                build_reply(kind, REMOTE, INTERNAL, PAYLOAD),
                "{kind:?}"
            );
            assert_checksums(&reply);

            // DNAT to an internal server, and the server's reply un-DNATed. An echo's ident
            // belongs to the requester, REMOTE, so DNAT keeps it.
            let (server, public) = if kind == Kind::Echo {
                ((INTERNAL.0, REMOTE.1), (EXTERNAL.0, REMOTE.1))
            } else {
                (INTERNAL, EXTERNAL)
            };
            let mut inbound = build(kind, REMOTE, public, PAYLOAD);
            rewrite_destination(&mut inbound, server.0, server.1).unwrap();
            assert_eq!(inbound, build(kind, REMOTE, server, PAYLOAD), "{kind:?}");
            let mut answer = build_reply(kind, server, REMOTE, PAYLOAD);
            rewrite_source(&mut answer, public.0, public.1).unwrap();
            assert_eq!(
                answer,
                build_reply(kind, public, REMOTE, PAYLOAD),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn udp_checksum_that_computes_to_zero_is_sent_as_ffff() {
        let original = build(Kind::Udp, INTERNAL, REMOTE, PAYLOAD);
        // etherparse writes a computed 0 as 0xffff; find a source port where it does.
        let port = (1..=u16::MAX)
            .find(|&port| {
                let expected = build(Kind::Udp, (EXTERNAL.0, port), REMOTE, PAYLOAD);
                expected[26..28] == [0xff, 0xff]
            })
            .unwrap();
        let mut packet = original.clone();
        rewrite_source(&mut packet, EXTERNAL.0, port).unwrap();
        assert_eq!(
            packet,
            build(Kind::Udp, (EXTERNAL.0, port), REMOTE, PAYLOAD)
        );
        assert_eq!(packet[26..28], [0xff, 0xff]);
        // And from 0xffff back to the original.
        rewrite_source(&mut packet, INTERNAL.0, INTERNAL.1).unwrap();
        assert_eq!(packet, original);
    }

    #[test]
    fn echo_reply_of_all_zeros_gets_ffff() {
        let mut reply = build_reply(Kind::Echo, REMOTE, (EXTERNAL.0, 5), &[]);
        reply[26..28].fill(0); // sequence 0
        let mut message = IcmpPacket::new_unchecked(&mut reply[20..]);
        message.fill_checksum();
        rewrite_destination(&mut reply, INTERNAL.0, 0).unwrap();
        assert_eq!(reply[20..], [0, 0, 0xff, 0xff, 0, 0, 0, 0]);
        assert_checksums(&reply);
    }

    #[test]
    fn other_protocols_get_only_the_address() {
        let gre = [0x00, 0x00, 0x08, 0x00, 0xde, 0xad, 0xbe, 0xef];
        let write = |src: Ipv4Addr| {
            let mut out = Vec::new();
            PacketBuilder::ipv4(src.octets(), REMOTE.0.octets(), 64)
                .write(&mut out, IpNumber::GRE, &gre)
                .unwrap();
            out
        };
        let mut packet = write(INTERNAL.0);
        rewrite_source(&mut packet, EXTERNAL.0, EXTERNAL.1).unwrap();
        assert_eq!(packet, write(EXTERNAL.0));

        // ICMP that is neither query nor error: a router advertisement.
        let advert = |dst: Ipv4Addr| {
            icmp_error(
                REMOTE.0,
                dst,
                Icmpv4Type::Unknown {
                    type_u8: 9,
                    code_u8: 0,
                    bytes5to8: [1, 2, 0, 30],
                },
                &[10, 0, 0, 1, 0, 0, 0, 0],
            )
        };
        let mut packet = advert(EXTERNAL.0);
        rewrite_destination(&mut packet, INTERNAL.0, INTERNAL.1).unwrap();
        assert_eq!(packet, advert(INTERNAL.0));
    }

    #[test]
    fn non_initial_fragment_gets_only_the_address() {
        let mut packet = build(Kind::Udp, INTERNAL, REMOTE, PAYLOAD);
        let mut ip = Ipv4Packet::new_checked(&mut packet[..]).unwrap();
        ip.set_frag_offset(1480);
        ip.fill_checksum();
        let mut expected = packet.clone();
        let mut ip = Ipv4Packet::new_checked(&mut expected[..]).unwrap();
        ip.set_src_addr(EXTERNAL.0);
        ip.fill_checksum();

        rewrite_source(&mut packet, EXTERNAL.0, EXTERNAL.1).unwrap();
        assert_eq!(packet, expected);
        assert_ip_checksum(&packet);
    }

    #[test]
    fn first_fragment_patches_the_whole_datagrams_checksum() {
        // A UDP datagram cut after its first 16 payload bytes: the UDP length and checksum
        // still describe the whole datagram.
        let whole = build(Kind::Udp, INTERNAL, REMOTE, PAYLOAD);
        let expected_whole = build(Kind::Udp, EXTERNAL, REMOTE, PAYLOAD);
        let mut first = whole[..20 + 8 + 16].to_vec();
        let mut ip = Ipv4Packet::new_unchecked(&mut first[..]);
        ip.set_total_len(44);
        ip.set_more_frags(true);
        ip.fill_checksum();
        rewrite_source(&mut first, EXTERNAL.0, EXTERNAL.1).unwrap();
        assert_eq!(first[20..44], expected_whole[20..44]);
        assert_ip_checksum(&first);
    }

    #[test]
    fn malformed_input_is_refused_untouched() {
        let cases: Vec<(Vec<u8>, RewriteError)> = vec![
            (vec![], RewriteError::BadIpHeader),
            (
                build(Kind::Udp, INTERNAL, REMOTE, b"")[..19].to_vec(),
                RewriteError::BadIpHeader,
            ),
            (
                {
                    let mut p = build(Kind::Udp, INTERNAL, REMOTE, b"");
                    p[0] = 0x65;
                    p
                },
                RewriteError::BadIpHeader,
            ),
            (
                // Total length claims more than there is.
                {
                    let mut p = build(Kind::Udp, INTERNAL, REMOTE, b"");
                    p[3] += 1;
                    p
                },
                RewriteError::BadIpHeader,
            ),
            (
                // A TCP header cut to 19 bytes (total length adjusted).
                {
                    let mut p = build(Kind::TcpData, INTERNAL, REMOTE, b"")[..39].to_vec();
                    Ipv4Packet::new_unchecked(&mut p[..]).set_total_len(39);
                    p
                },
                RewriteError::Truncated,
            ),
            (
                {
                    let mut p = build(Kind::Udp, INTERNAL, REMOTE, b"")[..27].to_vec();
                    Ipv4Packet::new_unchecked(&mut p[..]).set_total_len(27);
                    p
                },
                RewriteError::Truncated,
            ),
            (
                {
                    let mut p = build(Kind::Echo, INTERNAL, REMOTE, b"")[..27].to_vec();
                    Ipv4Packet::new_unchecked(&mut p[..]).set_total_len(27);
                    p
                },
                RewriteError::Truncated,
            ),
            (
                icmp_error(
                    ROUTER,
                    EXTERNAL.0,
                    ttl_exceeded(),
                    &build(Kind::Udp, EXTERNAL, REMOTE, b""),
                ),
                RewriteError::IcmpError,
            ),
        ];
        for (packet, error) in cases {
            for f in [rewrite_source, rewrite_destination] {
                let mut copy = packet.clone();
                assert_eq!(f(&mut copy, EXTERNAL.0, EXTERNAL.1), Err(error));
                assert_eq!(copy, packet);
            }
        }
        assert_eq!(
            RewriteError::IcmpError.to_string(),
            "ICMP error needs its quote translated"
        );
    }

    /// The error a router sends to `EXTERNAL` about `kind` sent from `EXTERNAL` to `REMOTE`
    /// (quoted to `quote_len` bytes, or whole), and the same error as it must reach
    /// `INTERNAL` after translation.
    fn error_pair(
        kind: Kind,
        icmp_type: Icmpv4Type,
        quote_len: Option<usize>,
    ) -> (Vec<u8>, Vec<u8>) {
        let quote = |src| {
            let mut datagram = build(kind, src, REMOTE, PAYLOAD);
            datagram.truncate(quote_len.unwrap_or(datagram.len()));
            datagram
        };
        (
            icmp_error(ROUTER, EXTERNAL.0, icmp_type.clone(), &quote(EXTERNAL)),
            icmp_error(ROUTER, INTERNAL.0, icmp_type, &quote(INTERNAL)),
        )
    }

    fn translate_back(packet: &mut [u8]) -> Result<(), RewriteError> {
        rewrite_icmp_error(packet, Some(INTERNAL.0), None, Some(INTERNAL), None)
    }

    #[test]
    fn icmp_error_quoting_a_tcp_syn() {
        for quote_len in [None, Some(28)] {
            let (mut received, expected) = error_pair(Kind::TcpSyn, port_unreachable(), quote_len);
            assert_eq!(
                quoted_flow_key(&received),
                Some(FlowKey {
                    src: EXTERNAL.0,
                    dst: REMOTE.0,
                    src_port: EXTERNAL.1,
                    dst_port: REMOTE.1,
                    protocol: protocol::TCP,
                })
            );
            translate_back(&mut received).unwrap();
            assert_eq!(received, expected, "quote {quote_len:?}");
            assert_checksums(&received);
        }
    }

    #[test]
    fn icmp_error_quoting_udp_with_and_without_checksum() {
        for kind in [Kind::Udp, Kind::UdpNoChecksum] {
            for quote_len in [None, Some(28)] {
                let (mut received, expected) = error_pair(kind, ttl_exceeded(), quote_len);
                translate_back(&mut received).unwrap();
                assert_eq!(received, expected, "{kind:?} quote {quote_len:?}");
                assert_checksums(&received);
                let quoted_checksum = &received[28 + 26..28 + 28];
                assert_eq!(quoted_checksum == [0, 0], kind == Kind::UdpNoChecksum);
            }
        }
    }

    #[test]
    fn icmp_error_quoting_an_echo_request() {
        let (mut received, expected) = error_pair(Kind::Echo, ttl_exceeded(), None);
        assert_eq!(
            quoted_flow_key(&received),
            Some(FlowKey {
                src: EXTERNAL.0,
                dst: REMOTE.0,
                src_port: EXTERNAL.1,
                dst_port: EXTERNAL.1,
                protocol: protocol::ICMP,
            })
        );
        translate_back(&mut received).unwrap();
        assert_eq!(received, expected);
        assert_checksums(&received);

        // Both inner endpoints given: the source's port sets the ident.
        let (mut received, expected) = error_pair(Kind::Echo, ttl_exceeded(), None);
        rewrite_icmp_error(
            &mut received,
            Some(INTERNAL.0),
            None,
            Some(INTERNAL),
            Some((REMOTE.0, 9)),
        )
        .unwrap();
        assert_eq!(received, expected);
    }

    #[test]
    fn frag_needed_keeps_its_next_hop_mtu() {
        for quote_len in [None, Some(28), Some(48)] {
            let (mut received, expected) = error_pair(Kind::TcpData, frag_needed(1400), quote_len);
            translate_back(&mut received).unwrap();
            assert_eq!(received, expected);
            assert_checksums(&received);
            let (icmp, _) = Icmpv4Header::from_slice(&received[20..]).unwrap();
            assert_eq!(icmp.icmp_type, frag_needed(1400));
        }
    }

    #[test]
    fn icmp_error_quote_with_ip_options() {
        // The quoted header carries 8 bytes of options, so the quoted ports are further in.
        let with_options = |src| {
            let plain = build(Kind::Udp, src, REMOTE, PAYLOAD);
            let mut datagram = plain[..20].to_vec();
            datagram.extend_from_slice(&[1, 1, 1, 1, 1, 1, 1, 0]);
            datagram.extend_from_slice(&plain[20..]);
            let mut ip = Ipv4Packet::new_unchecked(&mut datagram[..]);
            ip.set_header_len(28);
            ip.set_total_len(plain.len() as u16 + 8);
            ip.fill_checksum();
            datagram
        };
        let mut received = icmp_error(ROUTER, EXTERNAL.0, ttl_exceeded(), &with_options(EXTERNAL));
        let key = quoted_flow_key(&received).unwrap();
        assert_eq!((key.src_port, key.dst_port), (EXTERNAL.1, REMOTE.1));
        translate_back(&mut received).unwrap();
        assert_eq!(
            received,
            icmp_error(ROUTER, INTERNAL.0, ttl_exceeded(), &with_options(INTERNAL))
        );
        assert_checksums(&received);
    }

    #[test]
    fn icmp_error_about_a_dnat_flow_goes_out_translated() {
        // REMOTE reached INTERNAL through a port forward on EXTERNAL; an internal router
        // reports the forwarded packet, and the error must leave as if from EXTERNAL about
        // the packet REMOTE actually sent.
        let lan_router = Ipv4Addr::new(192, 168, 1, 254);
        for kind in KINDS {
            let received = icmp_error(
                lan_router,
                REMOTE.0,
                port_unreachable(),
                &build(kind, REMOTE, INTERNAL, PAYLOAD),
            );
            let expected = icmp_error(
                EXTERNAL.0,
                REMOTE.0,
                port_unreachable(),
                &build(kind, REMOTE, EXTERNAL, PAYLOAD),
            );
            let mut packet = received.clone();
            let inner_dst = if kind == Kind::Echo {
                // The ident belongs to the requester, REMOTE, and is not translated.
                (EXTERNAL.0, REMOTE.1)
            } else {
                EXTERNAL
            };
            rewrite_icmp_error(&mut packet, None, Some(EXTERNAL.0), None, Some(inner_dst)).unwrap();
            assert_eq!(packet, expected, "{kind:?}");
            assert_checksums(&packet);
        }
    }

    #[test]
    fn icmp_error_refusals() {
        let (received, _) = error_pair(Kind::Udp, ttl_exceeded(), None);
        let refused = |mut packet: Vec<u8>, error| {
            let before = packet.clone();
            assert_eq!(translate_back(&mut packet), Err(error));
            assert_eq!(packet, before);
        };
        refused(
            build(Kind::Echo, REMOTE, EXTERNAL, b""),
            RewriteError::NotIcmpError,
        );
        refused(
            build(Kind::Udp, REMOTE, EXTERNAL, b""),
            RewriteError::NotIcmpError,
        );
        refused(received[..27].to_vec(), RewriteError::BadIpHeader);
        let mut fragment = received.clone();
        Ipv4Packet::new_unchecked(&mut fragment[..]).set_frag_offset(8);
        refused(fragment, RewriteError::Fragment);
        let short = icmp_error(ROUTER, EXTERNAL.0, ttl_exceeded(), &received[28..28 + 19]);
        refused(short.clone(), RewriteError::BadQuote);
        assert_eq!(quoted_flow_key(&short), None);
        let mut bad_version = received.clone();
        bad_version[28] = 0x65;
        refused(bad_version, RewriteError::BadQuote);
        let mut short_icmp = received[..27].to_vec();
        Ipv4Packet::new_unchecked(&mut short_icmp[..]).set_total_len(27);
        refused(short_icmp, RewriteError::Truncated);

        // Only the quoted IP header: ports cannot be rewritten, addresses can.
        let (header_only, _) = error_pair(Kind::Udp, ttl_exceeded(), Some(20));
        refused(header_only.clone(), RewriteError::BadQuote);
        assert_eq!(quoted_flow_key(&header_only), None);
        let mut packet = header_only;
        rewrite_icmp_error(&mut packet, Some(INTERNAL.0), None, None, None).unwrap();
        assert_checksums(&packet);
    }

    #[test]
    fn quoted_flow_key_cases() {
        assert_eq!(
            quoted_flow_key(&build(Kind::Udp, REMOTE, EXTERNAL, b"")),
            None
        );
        assert_eq!(quoted_flow_key(&[]), None);
        // A quoted non-initial fragment has no ports to read.
        let mut datagram = build(Kind::Udp, EXTERNAL, REMOTE, PAYLOAD);
        Ipv4Packet::new_unchecked(&mut datagram[..]).set_frag_offset(16);
        let error = icmp_error(ROUTER, EXTERNAL.0, ttl_exceeded(), &datagram);
        assert_eq!(quoted_flow_key(&error), None);
        // An error about an error (which should not exist) is not a flow.
        let (inner_error, _) = error_pair(Kind::Udp, ttl_exceeded(), None);
        let error = icmp_error(ROUTER, EXTERNAL.0, ttl_exceeded(), &inner_error);
        assert_eq!(quoted_flow_key(&error), None);
        // Other protocols have no ports.
        let mut gre = Vec::new();
        PacketBuilder::ipv4(EXTERNAL.0.octets(), REMOTE.0.octets(), 64)
            .write(&mut gre, IpNumber::GRE, &[0; 8])
            .unwrap();
        let error = icmp_error(ROUTER, EXTERNAL.0, ttl_exceeded(), &gre);
        let key = quoted_flow_key(&error).unwrap();
        assert_eq!((key.src_port, key.dst_port, key.protocol), (0, 0, 47));
        // The reverse of the quote's key is the key of the error's direction.
        let (received, _) = error_pair(Kind::TcpData, ttl_exceeded(), Some(28));
        let key = quoted_flow_key(&received).unwrap().reversed();
        assert_eq!((key.dst, key.dst_port), EXTERNAL);
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop::sample::select(KINDS.to_vec())
    }

    fn endpoint() -> impl Strategy<Value = (Ipv4Addr, u16)> {
        (any::<u32>(), any::<u16>()).prop_map(|(ip, port)| (Ipv4Addr::from(ip), port))
    }

    fn error_type() -> impl Strategy<Value = Icmpv4Type> {
        prop_oneof![
            Just(port_unreachable()),
            Just(ttl_exceeded()),
            any::<u16>().prop_map(frag_needed),
        ]
    }

    /// IPv4-looking bytes: a plausible header (random IHL, flags, protocol) in front of random
    /// bytes, and sometimes an ICMP error header with a plausible quote, so that the random
    /// input gets past the first checks.
    fn plausible_packet() -> impl Strategy<Value = Vec<u8>> {
        (
            prop::collection::vec(any::<u8>(), 20..120),
            5..8u8,
            prop_oneof![Just(1u8), Just(6), Just(17), any::<u8>()],
            any::<bool>(),
            5..8u8,
            prop_oneof![Just(6u8), Just(17), Just(1), any::<u8>()],
            any::<u16>(),
        )
            .prop_map(
                |(mut bytes, ihl, protocol, icmp_error, inner_ihl, inner, frag)| {
                    let len = bytes.len();
                    bytes[0] = 0x40 | ihl;
                    bytes[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                    bytes[6..8].copy_from_slice(&(frag & 0xe003).to_be_bytes());
                    bytes[9] = protocol;
                    let icmp = usize::from(ihl) * 4;
                    if icmp_error && protocol == 1 && len > icmp + 8 {
                        bytes[icmp] = if frag & 1 == 0 { 3 } else { 11 };
                        if len > icmp + 17 {
                            bytes[icmp + 8] = 0x40 | inner_ihl;
                            bytes[icmp + 8 + 6] &= 0x20;
                            bytes[icmp + 8 + 7] = 0;
                            bytes[icmp + 8 + 9] = inner;
                        }
                    }
                    let ihl = usize::from(ihl) * 4;
                    if len >= ihl {
                        let sum = checksum::checksum(&{
                            let mut header = bytes[..ihl].to_vec();
                            header[10..12].fill(0);
                            header
                        });
                        bytes[10..12].copy_from_slice(&sum.to_be_bytes());
                    }
                    bytes
                },
            )
    }

    proptest! {
        #[test]
        fn translation_round_trips(
            kind in kind(),
            internal in endpoint(),
            remote in endpoint(),
            external in endpoint(),
            payload in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let original = build(kind, internal, remote, &payload);
            let mut out = original.clone();
            rewrite_source(&mut out, external.0, external.1).unwrap();
            prop_assert_eq!(&out, &build(kind, external, remote, &payload));
            assert_checksums(&out);

            let mut reply = build_reply(kind, remote, external, &payload);
            rewrite_destination(&mut reply, internal.0, internal.1).unwrap();
            prop_assert_eq!(&reply, &build_reply(kind, remote, internal, &payload));
            assert_checksums(&reply);
            let key = FlowKey::from_ipv4(&Ipv4Packet::new_checked(&reply[..]).unwrap()).unwrap();
            let original_key =
                FlowKey::from_ipv4(&Ipv4Packet::new_checked(&original[..]).unwrap()).unwrap();
            prop_assert_eq!((key.dst, key.dst_port), (original_key.src, original_key.src_port));

            // Translating back restores every byte.
            rewrite_source(&mut out, internal.0, internal.1).unwrap();
            prop_assert_eq!(out, original);
        }

        #[test]
        fn icmp_error_translation_matches_etherparse(
            kind in kind(),
            internal in endpoint(),
            remote in endpoint(),
            external in endpoint(),
            router in any::<u32>(),
            icmp_type in error_type(),
            quote_extra in prop_oneof![Just(Some(8usize)), Just(Some(12)), Just(None)],
            payload in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let router = Ipv4Addr::from(router);
            let quote = |src| {
                let mut datagram = build(kind, src, remote, &payload);
                if let Some(extra) = quote_extra {
                    datagram.truncate(20 + extra);
                }
                datagram
            };
            let mut received = icmp_error(router, external.0, icmp_type.clone(), &quote(external));
            let key = quoted_flow_key(&received).unwrap();
            prop_assert_eq!((key.src, key.src_port), external);
            rewrite_icmp_error(&mut received, Some(internal.0), None, Some(internal), None).unwrap();
            prop_assert_eq!(&received, &icmp_error(router, internal.0, icmp_type, &quote(internal)));
            assert_checksums(&received);
        }

        #[test]
        fn random_bytes_never_panic(
            mut bytes in prop_oneof![prop::collection::vec(any::<u8>(), 0..128), plausible_packet()],
            addr in any::<u32>(),
            port in any::<u16>(),
            which in any::<[bool; 4]>(),
        ) {
            let addr = Ipv4Addr::from(addr);
            let _ = quoted_flow_key(&bytes);
            for step in 0..3 {
                let before = bytes.clone();
                let header_valid =
                    Ipv4Packet::new_checked(&before[..]).is_ok_and(|ip| ip.verify_checksum());
                let result = match step {
                    0 => rewrite_source(&mut bytes, addr, port),
                    1 => rewrite_destination(&mut bytes, addr, port),
                    _ => rewrite_icmp_error(
                        &mut bytes,
                        which[0].then_some(addr),
                        which[1].then_some(addr),
                        which[2].then_some((addr, port)),
                        which[3].then_some((addr, port)),
                    ),
                };
                match result {
                    Ok(()) => {
                        // Incremental updates neither repair nor break a header checksum.
                        let ip = Ipv4Packet::new_checked(&bytes[..]).unwrap();
                        prop_assert_eq!(ip.verify_checksum(), header_valid);
                    }
                    Err(_) => prop_assert_eq!(&bytes, &before),
                }
            }
        }
    }
}

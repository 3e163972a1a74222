//! What the stateful stage asks of the pipeline ([`Request`]): the answers sent in place of
//! a packet, which need the pipeline's ICMP budgets and routing. The IPv6 stage's TCP reset
//! is here too.

use std::net::Ipv4Addr;

use crate::flow::{FlowEnds, FlowKey, FlowKey6};
use crate::l3::icmp_error::IcmpBudget;
use crate::packet::PacketBuf;
use crate::pipeline::stage::Ingress;
use crate::pipeline::stage::{Request, Request6};
use crate::pipeline::Pipeline;
use crate::state::conntrack::TcpSegment;
use crate::verdict::{DropReason, Verdict};
use crate::wire::family::IpFamily;
use crate::wire::ipv4::GENERATED_TTL;
use crate::wire::{ethernet, ipv4, ipv6, tcp, TcpPacket};

impl Pipeline {
    /// Sends the answer the stateful stage asked for in place of the packet.
    #[cold]
    pub(crate) fn serve_request(
        &mut self,
        request: Request,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        now_ns: u64,
    ) -> Verdict {
        match request {
            Request::IcmpError(error) => self.icmp_error(pkt, ingress.port, now_ns, error),
            Request::Reset {
                key,
                segment,
                reason,
            } => self.reset_client(pkt, &key, &segment, reason, now_ns),
            Request::ResetReceiver {
                key,
                segment,
                reason,
            } => self.reset_receiver(pkt, &key, &segment, reason, now_ns),
            Request::SynCookie(answer) => self.send_cookie(pkt, &answer),
            Request::Splice(splice) => self.send_splice(pkt, &splice),
        }
    }

    /// Answers `segment` with a TCP reset toward its sender (never a reset to a reset),
    /// rate-limited like ICMP errors; the segment itself counts as dropped for `reason`.
    fn reset_client(
        &mut self,
        pkt: &mut PacketBuf,
        key: &FlowKey,
        segment: &TcpSegment,
        reason: DropReason,
        now_ns: u64,
    ) -> Verdict {
        if !self.may_reset(pkt, segment, RESET_LEN, now_ns) {
            return Verdict::Drop(reason);
        }
        write_reset(pkt, key, segment);
        self.send_reset(pkt, key.src, reason)
    }

    /// Answers the server's `segment` of flow `key` with a reset to the flow's client
    /// (`Request::ResetReceiver`), rate-limited as the other resets.
    fn reset_receiver(
        &mut self,
        pkt: &mut PacketBuf,
        key: &FlowKey,
        segment: &TcpSegment,
        reason: DropReason,
        now_ns: u64,
    ) -> Verdict {
        if !self.may_reset(pkt, segment, RESET_LEN, now_ns) {
            return Verdict::Drop(reason);
        }
        // At the server's sequence number, where the client expects its next byte; with the
        // server's acknowledgement too where it has one, which a client still in SYN-SENT
        // requires of a reset (RFC 9293 3.10.7.3).
        let (flags, ack) = match segment.flags & tcp::flags::ACK {
            0 => (tcp::flags::RST, 0),
            _ => (tcp::flags::RST | tcp::flags::ACK, segment.ack),
        };
        let reset = TcpSegment {
            flags,
            seq: segment.seq,
            ack,
            ..TcpSegment::default()
        };
        write_segment_between(pkt, key.destination(), key.source(), &reset, &[]);
        self.send_reset(pkt, key.src, reason)
    }

    /// Sends a reset written in place toward `client`; the packet it answers counts as
    /// dropped for `reason`.
    fn send_reset(&mut self, pkt: &mut PacketBuf, client: Ipv4Addr, reason: DropReason) -> Verdict {
        match self.send_generated(pkt, client) {
            Some(verdict) => {
                self.counters.record_drop(reason);
                verdict
            }
            None => Verdict::Drop(reason),
        }
    }
}

impl Pipeline {
    /// Sends the answer the IPv6 stateful stage asked for in place of the packet.
    #[cold]
    pub(crate) fn serve_request6(
        &mut self,
        request: Request6,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        now_ns: u64,
    ) -> Verdict {
        match request {
            Request6::IcmpError(error) => self.icmpv6_error(pkt, ingress, now_ns, error),
            Request6::DnsBlocked => self.answer_blocked_dns(pkt, ingress),
            Request6::Reset { key, segment } => self.reset_client6(pkt, &key, &segment, now_ns),
        }
    }

    /// Whether a reset of `len` bytes may answer `segment`: never a reset to a reset, the
    /// packet has the room, and the reject budget a token (its lack counted), for either
    /// family.
    fn may_reset(
        &mut self,
        pkt: &PacketBuf,
        segment: &TcpSegment,
        len: usize,
        now_ns: u64,
    ) -> bool {
        if segment.flags & tcp::flags::RST != 0 || pkt.capacity() < len {
            return false;
        }
        if !self.icmp_errors.try_take(IcmpBudget::Reject, now_ns) {
            self.counters.icmp_errors_rate_limited.inc();
            return false;
        }
        true
    }

    /// [`Pipeline::reset_client`] for an IPv6 flow whose content is blocked: the reset goes
    /// from the server's address back to the client by the IPv6 routes.
    fn reset_client6(
        &mut self,
        pkt: &mut PacketBuf,
        key: &FlowKey6,
        segment: &TcpSegment,
        now_ns: u64,
    ) -> Verdict {
        let reason = DropReason::ContentBlocked;
        let Some(route) = self.router.routes6.lookup(key.src) else {
            return Verdict::Drop(reason);
        };
        if !self.may_reset(pkt, segment, RESET6_LEN, now_ns) {
            return Verdict::Drop(reason);
        }
        write_reset(pkt, key, segment);
        self.counters.record_drop(reason);
        self.counters.record_ipv6_drop(reason);
        self.send6(pkt, route.port, route.resolve(key.src))
    }
}

const RESET_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + tcp::HEADER_LEN;
const RESET6_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + tcp::HEADER_LEN;

/// RFC 793's reset answering `segment`: ACKed segments get `seq = their ack`; others get
/// `RST|ACK` acknowledging everything they carried. No window, no data.
fn reset_segment(segment: &TcpSegment) -> TcpSegment {
    let (seq, ack, flags) = if segment.flags & tcp::flags::ACK != 0 {
        (segment.ack, 0, tcp::flags::RST)
    } else {
        let syn_fin = u32::from(segment.flags & tcp::flags::SYN != 0)
            + u32::from(segment.flags & tcp::flags::FIN != 0);
        let ack = segment
            .seq
            .wrapping_add(segment.payload_len)
            .wrapping_add(syn_fin);
        (0, ack, tcp::flags::RST | tcp::flags::ACK)
    };
    TcpSegment {
        flags,
        seq,
        ack,
        ..TcpSegment::default()
    }
}

/// A TCP header from `src_port` to `dst_port` with `segment`'s numbers, flags and window,
/// and `options` (a multiple of 4 bytes) after it; its checksum is left to the caller.
fn write_tcp_header(
    bytes: &mut [u8],
    src_port: u16,
    dst_port: u16,
    segment: &TcpSegment,
    options: &[u8],
) {
    let mut header = TcpPacket::new_unchecked(bytes);
    header.set_src_port(src_port);
    header.set_dst_port(dst_port);
    header.set_seq_number(segment.seq);
    header.set_ack_number(segment.ack);
    header.set_header_len((tcp::HEADER_LEN + options.len()) as u8);
    header.set_flags(segment.flags);
    header.set_window_len(segment.window);
    header.set_urgent(0);
    header.options_mut().copy_from_slice(options);
}

/// Writes a TCP segment of the gateway's own from `src` to `dst` (address and port) with
/// `options` and no data, over the packet's IP and TCP headers, checksums filled in; the
/// Ethernet header is the caller's. For either family.
fn write_segment_between<A: IpFamily>(
    pkt: &mut PacketBuf,
    (src, src_port): (A, u16),
    (dst, dst_port): (A, u16),
    segment: &TcpSegment,
    options: &[u8],
) {
    // TCP's protocol number is its IPv6 next header too.
    let tcp_len = tcp::HEADER_LEN + options.len();
    let ip_end = ethernet::HEADER_LEN + A::HEADER_LEN;
    let frame_len = ip_end + tcp_len;
    let room = pkt.room_mut();
    let ip_header = &mut room[ethernet::HEADER_LEN..ip_end];
    src.emit_header(
        dst,
        ipv4::protocol::TCP,
        tcp_len as u16,
        GENERATED_TTL,
        ip_header,
    );
    let bytes = &mut room[ip_end..frame_len];
    write_tcp_header(bytes, src_port, dst_port, segment, options);
    TcpPacket::new_unchecked(&mut *bytes).set_checksum(0);
    let sum = src.l4_checksum(dst, ipv4::protocol::TCP, bytes);
    TcpPacket::new_unchecked(bytes).set_checksum(sum);
    pkt.set_len(frame_len);
}

/// An IPv4 segment of the gateway's own from `key.src` to `key.dst` (a reset, the SYN
/// proxy's SYNs and ACKs): see [`write_segment_between`].
pub(crate) fn write_segment(
    pkt: &mut PacketBuf,
    key: &FlowKey,
    segment: &TcpSegment,
    options: &[u8],
) {
    write_segment_between(pkt, key.source(), key.destination(), segment, options);
}

/// RFC 793's reset for a segment of flow `key` (as the client sent it) that reached no
/// connection: from the server back to the client, for either family.
fn write_reset<K: FlowEnds>(pkt: &mut PacketBuf, key: &K, segment: &TcpSegment)
where
    K::Addr: IpFamily,
{
    let reset = reset_segment(segment);
    write_segment_between(pkt, key.destination(), key.source(), &reset, &[]);
}

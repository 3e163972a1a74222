//! What the stateful stage asks of the pipeline ([`Request`]): the answers sent in place of
//! a packet, which need the pipeline's ICMP budgets and routing.

use crate::flow::FlowKey;
use crate::l3::icmp_error::IcmpBudget;
use crate::packet::PacketBuf;
use crate::pipeline::stateful::Request;
use crate::pipeline::{Ingress, Pipeline};
use crate::state::conntrack::TcpSegment;
use crate::verdict::{DropReason, Verdict};
use crate::wire::ipv4::GENERATED_TTL;
use crate::wire::{ethernet, ipv4, tcp, Ipv4Packet, Ipv4Repr, TcpPacket};

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
        if segment.flags & tcp::flags::RST != 0 || pkt.capacity() < RESET_LEN {
            return Verdict::Drop(reason);
        }
        if !self.icmp_errors.try_take(IcmpBudget::Reject, now_ns) {
            self.counters.icmp_errors_rate_limited.inc();
            return Verdict::Drop(reason);
        }
        write_reset(pkt, key, segment);
        match self.send_generated(pkt, key.src) {
            Some(verdict) => {
                self.counters.record_drop(reason);
                verdict
            }
            None => Verdict::Drop(reason),
        }
    }
}

const RESET_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + tcp::HEADER_LEN;

/// RFC 793's reset for a segment that reached no connection: ACKed segments get
/// `seq = their ack`; others get `RST|ACK` acknowledging everything they carried.
fn write_reset(pkt: &mut PacketBuf, key: &FlowKey, segment: &TcpSegment) {
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
    let room = pkt.room_mut();
    let ip_end = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
    let header = Ipv4Repr::new(
        key.dst,
        key.src,
        ipv4::protocol::TCP,
        tcp::HEADER_LEN as u16,
        GENERATED_TTL,
    );
    header.emit(&mut Ipv4Packet::new_unchecked(
        &mut room[ethernet::HEADER_LEN..ip_end],
    ));
    let mut reset = TcpPacket::new_unchecked(&mut room[ip_end..RESET_LEN]);
    reset.set_src_port(key.dst_port);
    reset.set_dst_port(key.src_port);
    reset.set_seq_number(seq);
    reset.set_ack_number(ack);
    reset.set_header_len(tcp::HEADER_LEN as u8);
    reset.set_flags(flags);
    reset.set_window_len(0);
    reset.set_urgent(0);
    reset.fill_checksum(key.dst, key.src);
    pkt.set_len(RESET_LEN);
}

//! TCP state and sequence-space tracking for one connection.
//!
//! The window checks follow Guido van Rooij's "Real Stateful TCP Packet Filtering in IP
//! Filter" as Linux's nf_conntrack_tcp applies them, without SACK blocks or retransmission
//! counting. For each direction (the *sender*) we keep:
//!
//! * `td_end`: the highest sequence number it has sent, plus one;
//! * `td_maxend`: the right edge of the highest window the other side (the *receiver*) has
//!   offered it, which no segment of the sender may start beyond;
//! * `td_maxwin`: the largest window it has offered, scaled: how far back a retransmission
//!   from the other side may start.
//!
//! A segment `[seq, end)` with acknowledgement `ack` is in window when
//!
//! 1. `seq <= sender.td_maxend` (it starts within what the receiver allowed),
//! 2. `end >= sender.td_end - receiver.td_maxwin` (a retransmission at most one window old),
//! 3. `ack <= receiver.td_end` (it acknowledges nothing the receiver has not sent),
//! 4. `ack >= receiver.td_end - max(sender.td_maxwin, 66000)` (an acknowledgement at most one
//!    window, or one full unscaled window plus headers, old).
//!
//! A segment that fails only a lower bound (2 or 4) is *stale*, not invalid: a retransmission
//! of data already acknowledged, or an acknowledgement overtaken by later ones. Its sender
//! has not yet seen what the receiver said since (the acknowledgements may have been lost
//! after the gateway, or be still on their way), so the segment is passed on, changing
//! nothing, and the receiver answers it with a duplicate ACK, as Linux (since 5.19) passes
//! such segments instead of marking them invalid. Resets get no such leeway.
//!
//! The connection state is derived from per-direction facts (SYN seen, SYN acknowledged, FIN
//! seen, FIN acknowledged, reset) rather than stored, so that simultaneous open and
//! simultaneous close need no states of their own.

use serde::{Deserialize, Serialize};

use super::InvalidReason;
use crate::flow::Direction;
use crate::wire::tcp::{flags, option, walk_options};
use crate::wire::{ipv4, Ipv4Packet, TcpPacket};

/// The fields of one segment the tracker needs; the caller parses them from the header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSegment {
    /// The header's flags byte ([`crate::wire::tcp::flags`] bits; ECE and CWR are ignored).
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// As on the wire, before window scaling.
    pub window: u16,
    /// Bytes of data after the header (SYN and FIN count separately).
    pub payload_len: u32,
    /// The window scale option's shift count, if this is a SYN that carries one.
    pub window_scale: Option<u8>,
}

impl TcpSegment {
    /// A bare SYN, which on a closed flow (see `FlowTable::is_closed`) starts a new
    /// connection on the same tuple, from either direction (as Linux's tracker lets it).
    pub fn is_bare_syn(&self) -> bool {
        const SIGNIFICANT: u8 = flags::SYN | flags::ACK | flags::FIN | flags::RST;
        self.flags & SIGNIFICANT == flags::SYN
    }

    /// SYN, FIN and RST open, close and abort connections: like Linux's
    /// `nf_conntrack_checksum`, the tracker believes them only with a valid checksum, so that
    /// a corrupted (or forged without care) segment cannot tear down or reopen a connection.
    /// Plain ACKs and data, the established path, are not summed: the endpoint drops them if
    /// they are bad.
    pub fn changes_state(&self) -> bool {
        self.flags & (flags::SYN | flags::FIN | flags::RST) != 0
    }

    /// The fields the TCP tracker needs, for a TCP packet already validated by the flow key.
    pub(crate) fn parse<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Option<Self> {
        if ip.protocol() != ipv4::protocol::TCP {
            return None;
        }
        Self::of_segment(ip.payload())
    }

    /// The fields of the TCP segment `bytes` (header and data, to the datagram's end): for
    /// IPv6, whose TCP header follows the extension headers.
    pub(crate) fn of_segment(bytes: &[u8]) -> Option<Self> {
        let segment = TcpPacket::new_checked(bytes).ok()?;
        let segment_flags = segment.flags();
        let window_scale = if segment_flags & flags::SYN != 0 {
            window_scale_option(segment.options())
        } else {
            None
        };
        Some(Self {
            flags: segment_flags,
            seq: segment.seq_number(),
            ack: segment.ack_number(),
            window: segment.window_len(),
            payload_len: segment.payload().len() as u32,
            window_scale,
        })
    }
}

/// RFC 7323's window scale option (kind 3, length 3).
fn window_scale_option(options: &[u8]) -> Option<u8> {
    walk_options(options).find_map(|(_, kind, data)| match (kind, data) {
        (option::WINDOW_SCALE, &[shift]) => Some(shift),
        _ => None,
    })
}

/// The connection's state as a middlebox sees it. The endpoints' own states differ: closing
/// states here describe the connection as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpState {
    /// The original direction has sent a SYN, the reply direction nothing yet.
    SynSent,
    /// Both directions have sent a SYN; not both have been acknowledged.
    SynReceived,
    Established,
    /// One direction has sent a FIN that is not acknowledged yet.
    FinWait,
    /// One direction has closed and its FIN is acknowledged; the other still sends.
    CloseWait,
    /// Both directions have sent a FIN; not both are acknowledged.
    LastAck,
    /// Both FINs are acknowledged.
    TimeWait,
    /// A reset was accepted.
    Closed,
}

/// RFC 7323 2.3: a larger shift count is taken as 14.
const MAX_WINDOW_SCALE: u8 = 14;
/// Linux's MAXACKWINCONST: a sender that offered only small windows may still acknowledge
/// data up to one full unscaled window plus headers behind the receiver's edge.
const MIN_ACK_LAG: u32 = 66_000;
/// The flags that decide what a segment means; PSH, URG, ECE and CWR do not.
const SIGNIFICANT_FLAGS: u8 = flags::SYN | flags::ACK | flags::FIN | flags::RST;

/// What one direction has sent, as far as the checks need. Serialized as is into state
/// snapshots (`crate::pipeline::operator::snapshot`): a change here is a change of the snapshot format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Side {
    /// Tells a retransmitted SYN from a new one, and when the SYN is acknowledged.
    isn: u32,
    td_end: u32,
    td_maxend: u32,
    /// 0 until this side has been seen: a window of 0 on a first segment counts as 1.
    td_maxwin: u32,
    window_scale: u8,
    window_scale_offered: bool,
    syn_seen: bool,
    syn_acked: bool,
    fin_seen: bool,
    fin_acked: bool,
}

impl Side {
    fn from_syn(segment: &TcpSegment) -> Side {
        let end = segment
            .seq
            .wrapping_add(segment.payload_len)
            .wrapping_add(1);
        Side {
            isn: segment.seq,
            td_end: end,
            td_maxend: end,
            td_maxwin: u32::from(segment.window).max(1),
            window_scale: segment.window_scale.unwrap_or(0).min(MAX_WINDOW_SCALE),
            window_scale_offered: segment.window_scale.is_some(),
            syn_seen: true,
            ..Side::default()
        }
    }

    /// Whatever happened before this segment is lost to us, so it defines the sequence space.
    fn from_mid_stream(end: u32, window: u32) -> Side {
        let td_maxwin = window.max(1);
        Side {
            td_end: end,
            td_maxend: end.wrapping_add(td_maxwin),
            td_maxwin,
            // Its SYN was exchanged before we looked.
            syn_acked: true,
            ..Side::default()
        }
    }

    /// `ack` and `window` come from a segment of the other side. A zero window still admits
    /// a one-byte probe.
    fn raise_max_end(&mut self, ack: u32, window: u32) {
        let edge = ack
            .wrapping_add(window)
            .wrapping_add(u32::from(window == 0));
        if after(edge, self.td_maxend) {
            self.td_maxend = edge;
        }
    }

    fn acknowledges_syn(&self, ack: u32) -> bool {
        self.syn_seen && after(ack, self.isn) && !after(ack, self.td_end)
    }
}

/// What [`TcpConn::track`] made of a segment it accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tracked {
    /// The segment fits; the connection took in what it says.
    Applied,
    /// Stale (see the module doc): to be passed on, the connection unchanged.
    Stale,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TcpConn {
    /// Indexed by [`side_index`].
    sides: [Side; 2],
    reset: bool,
    /// Picked up mid-stream: the window scale factors are unknown, so windows cannot be
    /// judged and every segment with plausible flags is accepted (as Linux does).
    liberal: bool,
}

impl TcpConn {
    /// The connection a flow's first segment starts: a bare SYN, or in loose mode also a
    /// plain ACK of a connection already under way.
    pub(super) fn open(segment: &TcpSegment, loose: bool) -> Result<TcpConn, InvalidReason> {
        let significant = significant_flags(segment.flags)?;
        if significant == flags::SYN {
            return Ok(TcpConn::from_syn(segment));
        }
        if loose && significant == flags::ACK {
            let end = segment.seq.wrapping_add(segment.payload_len);
            let reply_end = segment.ack;
            let reply = Side {
                td_end: reply_end,
                td_maxend: reply_end,
                syn_acked: true,
                ..Side::default()
            };
            return Ok(TcpConn {
                sides: [Side::from_mid_stream(end, u32::from(segment.window)), reply],
                reset: false,
                liberal: true,
            });
        }
        Err(InvalidReason::NotSyn)
    }

    /// This connection in liberal mode, as if picked up mid-stream.
    pub(super) fn picked_up(self) -> TcpConn {
        TcpConn {
            liberal: true,
            ..self
        }
    }

    fn from_syn(segment: &TcpSegment) -> TcpConn {
        TcpConn {
            sides: [Side::from_syn(segment), Side::default()],
            reset: false,
            liberal: false,
        }
    }

    /// What any connection the tracker built satisfies, so a restored one (read from a
    /// snapshot) can be trusted to behave: window scales within RFC 7323's limit.
    pub(super) fn is_plausible(&self) -> bool {
        self.sides
            .iter()
            .all(|side| side.window_scale <= MAX_WINDOW_SCALE)
    }

    pub(super) fn state(&self) -> TcpState {
        let [original, reply] = &self.sides;
        if self.reset {
            return TcpState::Closed;
        }
        if !(original.syn_acked && reply.syn_acked) {
            return if reply.syn_seen {
                TcpState::SynReceived
            } else {
                TcpState::SynSent
            };
        }
        let fins = u8::from(original.fin_seen) + u8::from(reply.fin_seen);
        let fins_acked = u8::from(original.fin_acked) + u8::from(reply.fin_acked);
        match (fins, fins_acked) {
            (0, _) => TcpState::Established,
            (1, 0) => TcpState::FinWait,
            (1, _) => TcpState::CloseWait,
            (_, 2) => TcpState::TimeWait,
            _ => TcpState::LastAck,
        }
    }

    /// Applies one segment travelling in `direction`. A rejected or stale segment leaves the
    /// connection exactly as it was.
    pub(super) fn track(
        &mut self,
        direction: Direction,
        segment: &TcpSegment,
    ) -> Result<Tracked, InvalidReason> {
        let mut next = *self;
        let tracked = next.apply(direction, segment)?;
        if tracked == Tracked::Applied {
            *self = next;
        }
        Ok(tracked)
    }

    fn apply(
        &mut self,
        direction: Direction,
        segment: &TcpSegment,
    ) -> Result<Tracked, InvalidReason> {
        let significant = significant_flags(segment.flags)?;
        let state = self.state();
        if significant & flags::SYN != 0 {
            return self.apply_syn(direction, significant, segment, state);
        }
        if state == TcpState::SynSent {
            if significant & flags::RST == 0 {
                // Nothing but the handshake is valid before the reply direction's SYN.
                return Err(InvalidReason::UnexpectedFlags);
            }
            self.apply_rst_before_reply(direction, significant, segment)?;
            return Ok(Tracked::Applied);
        }
        if self.check_window(direction, significant, segment)? == Tracked::Stale {
            return Ok(Tracked::Stale);
        }
        if significant & flags::RST != 0 {
            self.reset = true;
            return Ok(Tracked::Applied);
        }
        let (sender, receiver) = self.sender_and_receiver(direction);
        if significant & flags::ACK != 0 {
            if receiver.acknowledges_syn(segment.ack) {
                receiver.syn_acked = true;
            }
            // Nothing follows a FIN, so the receiver's `td_end` is the FIN's end.
            if receiver.fin_seen && !before(segment.ack, receiver.td_end) {
                receiver.fin_acked = true;
            }
        }
        if significant & flags::FIN != 0 {
            sender.fin_seen = true;
        }
        Ok(Tracked::Applied)
    }

    fn apply_syn(
        &mut self,
        direction: Direction,
        significant: u8,
        segment: &TcpSegment,
        state: TcpState,
    ) -> Result<Tracked, InvalidReason> {
        let sender = self.sides[side_index(direction)];
        if matches!(state, TcpState::TimeWait | TcpState::Closed) {
            // RFC 9293 3.6.1: the client may reuse the quadruple straight away. The flow keeps
            // its identity (and the caller's data, e.g. its NAT mapping) for the new connection.
            if direction == Direction::Original && significant == flags::SYN {
                *self = TcpConn::from_syn(segment);
                return Ok(Tracked::Applied);
            }
            // The server's SYN-ACK sent again (the client's ACK of it was lost or late) that
            // the rest of the connection overtook on the way to this worker: nothing new, so
            // passed as stale, as Linux ignores a SYN-ACK in these states.
            let resent_syn_ack = direction == Direction::Reply
                && significant == flags::SYN | flags::ACK
                && sender.syn_seen
                && segment.seq == sender.isn;
            if resent_syn_ack {
                return Ok(Tracked::Stale);
            }
            return Err(InvalidReason::UnexpectedFlags);
        }
        let has_ack = significant & flags::ACK != 0;
        if sender.syn_seen && segment.seq == sender.isn {
            // A retransmission (its first transmission may have been lost beyond us), or in a
            // simultaneous open the SYN+ACK that repeats a SYN: only its ACK can be news.
            if has_ack {
                self.accept_syn_ack(direction, segment)?;
            }
            return Ok(Tracked::Applied);
        }
        let handshake_done = self.sides.iter().all(|side| side.syn_acked);
        if handshake_done {
            return Err(InvalidReason::SynOnEstablished);
        }
        if sender.syn_acked {
            // The peer has accepted the old ISN: a SYN with another one is not this connection.
            return Err(InvalidReason::OutOfWindow);
        }
        // The side's first SYN, or a restart with a new ISN before the old one was answered
        // (RFC 9293 lets an endpoint that lost its state reuse the quadruple).
        if has_ack {
            self.accept_syn_ack(direction, segment)?;
        }
        self.sides[side_index(direction)] = Side::from_syn(segment);
        Ok(Tracked::Applied)
    }

    /// The ACK part of a SYN+ACK from `direction`, which must acknowledge the other side's SYN.
    fn accept_syn_ack(
        &mut self,
        direction: Direction,
        segment: &TcpSegment,
    ) -> Result<(), InvalidReason> {
        let (_, receiver) = self.sender_and_receiver(direction);
        if !receiver.acknowledges_syn(segment.ack) {
            return Err(InvalidReason::AckOutOfWindow);
        }
        receiver.syn_acked = true;
        // RFC 7323 2.2: the window of a SYN is never scaled.
        receiver.raise_max_end(segment.ack, u32::from(segment.window));
        Ok(())
    }

    /// A reset while the reply direction has sent nothing, so it has no sequence space yet.
    fn apply_rst_before_reply(
        &mut self,
        direction: Direction,
        significant: u8,
        segment: &TcpSegment,
    ) -> Result<(), InvalidReason> {
        let original = &self.sides[side_index(Direction::Original)];
        match direction {
            // RFC 9293 3.10.7.3: in SYN-SENT a reset counts only if it acknowledges the SYN.
            Direction::Reply => {
                if significant & flags::ACK == 0 {
                    return Err(InvalidReason::UnexpectedFlags);
                }
                if !original.acknowledges_syn(segment.ack) {
                    return Err(InvalidReason::AckOutOfWindow);
                }
            }
            // The initiator aborting: its own sequence number, not a forged one.
            Direction::Original => {
                if before(segment.seq, original.isn) || after(segment.seq, original.td_end) {
                    return Err(InvalidReason::OutOfWindow);
                }
            }
        }
        self.reset = true;
        Ok(())
    }

    /// The four van Rooij checks (see the module doc), then the window bookkeeping. SYNs
    /// never come here.
    fn check_window(
        &mut self,
        direction: Direction,
        significant: u8,
        segment: &TcpSegment,
    ) -> Result<Tracked, InvalidReason> {
        let liberal = self.liberal;
        let (sender, receiver) = self.sender_and_receiver(direction);
        let scale = if sender.window_scale_offered && receiver.window_scale_offered {
            sender.window_scale
        } else {
            0
        };
        let window = u32::from(segment.window) << scale;
        let fin = u32::from(significant & flags::FIN != 0);
        let end = segment
            .seq
            .wrapping_add(segment.payload_len)
            .wrapping_add(fin);
        if sender.td_maxwin == 0 {
            // Only the silent side of a picked-up connection has not been seen yet.
            *sender = Side::from_mid_stream(end, window);
        }

        let has_ack = significant & flags::ACK != 0;
        // Without an ACK there is nothing to check on that side; some stacks also send RST+ACK
        // with a zero acknowledgement.
        let ack = if !has_ack || (significant & flags::RST != 0 && segment.ack == 0) {
            receiver.td_end
        } else {
            segment.ack
        };

        let seq_below_window =
            receiver.td_maxwin != 0 && before(end, sender.td_end.wrapping_sub(receiver.td_maxwin));
        let ack_lag = sender.td_maxwin.max(MIN_ACK_LAG);
        let ack_below_window = before(ack, receiver.td_end.wrapping_sub(ack_lag));
        if !liberal {
            if after(segment.seq, sender.td_maxend) {
                return Err(InvalidReason::OutOfWindow);
            }
            if after(ack, receiver.td_end) {
                return Err(InvalidReason::AckOutOfWindow);
            }
            let is_reset = significant & flags::RST != 0;
            if seq_below_window {
                return if is_reset {
                    Err(InvalidReason::OutOfWindow)
                } else {
                    Ok(Tracked::Stale)
                };
            }
            if ack_below_window {
                return if is_reset {
                    Err(InvalidReason::AckOutOfWindow)
                } else {
                    Ok(Tracked::Stale)
                };
            }
        }

        sender.td_maxwin = sender.td_maxwin.max(window);
        if after(end, sender.td_end) {
            sender.td_end = end;
        }
        // A segment running past the edge we knew means the receiver offered more than we saw.
        if receiver.td_maxwin != 0 && after(end, sender.td_maxend) {
            receiver.td_maxwin = receiver
                .td_maxwin
                .saturating_add(end.wrapping_sub(sender.td_maxend));
        }
        receiver.raise_max_end(ack, window);
        Ok(Tracked::Applied)
    }

    fn sender_and_receiver(&mut self, direction: Direction) -> (&mut Side, &mut Side) {
        let [original, reply] = &mut self.sides;
        match direction {
            Direction::Original => (original, reply),
            Direction::Reply => (reply, original),
        }
    }
}

fn side_index(direction: Direction) -> usize {
    match direction {
        Direction::Original => 0,
        Direction::Reply => 1,
    }
}

/// The combinations RFC 9293 endpoints send (Linux's `tcp_valid_flags`): after the first SYN
/// every segment but a bare RST carries an ACK, and SYN, FIN and RST exclude one another.
fn significant_flags(raw: u8) -> Result<u8, InvalidReason> {
    const SYN_ACK: u8 = flags::SYN | flags::ACK;
    const RST_ACK: u8 = flags::RST | flags::ACK;
    const FIN_ACK: u8 = flags::FIN | flags::ACK;
    let significant = raw & SIGNIFICANT_FLAGS;
    match significant {
        flags::SYN | SYN_ACK | flags::RST | RST_ACK | FIN_ACK | flags::ACK => Ok(significant),
        _ => Err(InvalidReason::InvalidFlags),
    }
}

/// Sequence-space comparison (RFC 1982 serial arithmetic): `a` is later than `b`.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

fn before(a: u32, b: u32) -> bool {
    after(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_scale_is_found_among_other_options() {
        // MSS 1460, SACK permitted, timestamps, NOP, window scale 7.
        let options = [
            2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
        ];
        assert_eq!(window_scale_option(&options), Some(7));
        assert_eq!(window_scale_option(&[1, 1, 0, 3, 3, 7]), None, "after END");
        assert_eq!(window_scale_option(&[3, 9]), None, "truncated");
        assert_eq!(window_scale_option(&[8, 1, 3, 3, 7]), None, "bad length");
    }
}

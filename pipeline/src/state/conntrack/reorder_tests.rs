//! The tracker under the reordering several workers produce (issue 42).
//!
//! With more than one worker, a flow's packets reach its owner by two ways: straight from the
//! owner's own RX queue, or from another worker's queue through a handoff ring. The kernel's
//! fanout (its hash can change when a socket rehashes after a timeout, and a full ring rolls
//! packets over to the next one) and RSS can put one direction's packets on both, so within a
//! direction a later segment can overtake an earlier one that waits in a ring. Across the two
//! directions there is no overtaking: an endpoint answers only what reached it, and what
//! reached it was forwarded by the owner after it was tracked.
//!
//! The model here: two endpoints that keep their sequence numbers as a real stack does
//! (windows, acknowledgements, retransmissions from the first unacknowledged byte, FINs, zero
//! window probes, window scaling, resets, a third ACK that data overtakes, a SYN-ACK sent
//! again), and a gateway that takes each direction's segments in emission order except that
//! any of the next few may go first, and loses some after tracking them. No segment may be
//! refused, before or after a close or reset (the segments still in flight when one passes).
//!
//! The same segments also go through a model of Linux's rules (`tcp_in_window` since 5.19),
//! which must not refuse them either: a differential check that the endpoints send what a
//! real stack sends, and that the two trackers agree on it.

use proptest::prelude::*;

use super::tcp::{TcpConn, TcpSegment, Tracked};
use crate::flow::Direction;
use crate::wire::tcp::flags::{ACK, FIN, RST, SYN};

/// The most segments of one direction that may be outrun by a later one: a handoff ring's
/// worth of delay is many more packets in reality, but what matters to the checks is the
/// order, and a few places of overtaking already cover every pair of kinds.
const OVERTAKE: usize = 4;
const MSS: u32 = 1000;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// An endpoint sends new data (as much of `len` as the window allows).
    Data { side: usize, len: u32 },
    /// An endpoint retransmits from its first unacknowledged byte (a timeout, or a fast
    /// retransmission after duplicate acknowledgements).
    Retransmit { side: usize },
    /// An endpoint acknowledges what it has, offering `window` (never shrinking its edge).
    Ack { side: usize, window: u32 },
    /// An endpoint closes its sending side, when the window has room for the FIN.
    Fin { side: usize },
    /// An endpoint probes a closed window (Linux's probe: one below the first unacked byte).
    Probe { side: usize },
    /// An endpoint aborts.
    Reset { side: usize },
    /// The server sends its SYN-ACK again, having heard nothing from the client since (its
    /// third ACK lost or late).
    SynAckAgain,
    /// The gateway takes the `pick`-th waiting segment of `side`'s direction, and the
    /// network after it delivers it unless `lost`.
    Gateway {
        side: usize,
        pick: usize,
        lost: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let side = 0..2usize;
    prop_oneof![
        32 => (side.clone(), 1..=3 * MSS).prop_map(|(side, len)| Op::Data { side, len }),
        8 => side.clone().prop_map(|side| Op::Retransmit { side }),
        24 => (side.clone(), prop_oneof![Just(0u32), 1..20_000u32])
            .prop_map(|(side, window)| Op::Ack { side, window }),
        4 => side.clone().prop_map(|side| Op::Fin { side }),
        8 => side.clone().prop_map(|side| Op::Probe { side }),
        // A reset ends what can be checked, so it is the rarest.
        1 => side.clone().prop_map(|side| Op::Reset { side }),
        2 => Just(Op::SynAckAgain),
        96 => (side, 0..OVERTAKE, 0..20u8)
            .prop_map(|(side, pick, roll)| Op::Gateway { side, pick, lost: roll == 0 }),
    ]
}

/// One endpoint's send and receive state, in its own sequence space (RFC 9293's names).
#[derive(Clone, Copy, Debug)]
struct Endpoint {
    snd_una: u32,
    snd_nxt: u32,
    /// The right edge of the window the peer has offered.
    snd_edge: u32,
    rcv_nxt: u32,
    /// The right edge this endpoint has offered; it never moves left.
    rcv_edge: u32,
    /// Its own window scale (shift) and whether both ends agreed to scaling.
    shift: u8,
    fin_sent: bool,
    aborted: bool,
    /// Whether anything of the peer's has arrived since the handshake's SYNs.
    heard: bool,
    /// The ISN and window of its SYN (the server's SYN-ACK is sent again as it was).
    isn: u32,
    syn_window: u16,
}

impl Endpoint {
    /// A segment as the endpoint sends it: acknowledging what it has, offering its window,
    /// rounded up to the scale (as Linux does, so that the edge it offered never moves left).
    fn segment(&mut self, flags: u8, seq: u32, payload_len: u32) -> TcpSegment {
        let unit = 1u32 << self.shift;
        let offered = self.rcv_edge.wrapping_sub(self.rcv_nxt);
        let window = offered.div_ceil(unit).min(65535);
        let edge = self.rcv_nxt.wrapping_add(window << self.shift);
        if after(edge, self.rcv_edge) {
            self.rcv_edge = edge;
        }
        TcpSegment {
            flags,
            seq,
            ack: self.rcv_nxt,
            window: window as u16,
            payload_len,
            window_scale: None,
        }
    }

    fn in_flight(&self) -> u32 {
        self.snd_nxt.wrapping_sub(self.snd_una)
    }
}

/// What Linux's `tcp_in_window` (nf_conntrack_proto_tcp.c, as of 5.19: segments behind the
/// window are ignored, not invalid) makes of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinuxVerdict {
    Accept,
    /// Passed without a change of state (below a lower bound; a SYN-ACK sent again).
    Ignore,
    Invalid(&'static str),
}

/// One direction's window data in Linux's terms (`struct ip_ct_tcp_state`).
#[derive(Clone, Copy, Debug, Default)]
struct LinuxSide {
    td_end: u32,
    td_maxend: u32,
    td_maxwin: u32,
    td_scale: u8,
}

/// Linux's window tracking, written from its rules (not its code) for the differential
/// check: the same segments through both trackers, and neither may refuse one.
#[derive(Clone, Copy, Debug)]
struct LinuxWindow {
    sides: [LinuxSide; 2],
}

/// Linux's MAXACKWINCONST.
const LINUX_MAX_ACK_WINDOW: u32 = 66_000;

impl LinuxWindow {
    fn after_handshake(isns: [u32; 2], shifts: [Option<u8>; 2], windows: [u16; 2]) -> Self {
        let scaled = shifts[0].is_some() && shifts[1].is_some();
        let sides = [0, 1].map(|side| {
            let end = isns[side].wrapping_add(1);
            LinuxSide {
                td_end: end,
                td_maxend: end,
                td_maxwin: u32::from(windows[side]).max(1),
                td_scale: if scaled { shifts[side].unwrap_or(0) } else { 0 },
            }
        });
        let mut window = LinuxWindow { sides };
        // The SYN-ACK's acknowledgement and (unscaled) window set the client's upper bound.
        let client_edge = isns[0].wrapping_add(1).wrapping_add(u32::from(windows[1]));
        window.sides[0].td_maxend = client_edge;
        window
    }

    fn check(&mut self, side: usize, segment: &TcpSegment) -> LinuxVerdict {
        if segment.flags & SYN != 0 {
            // After the handshake, a SYN-ACK from the reply direction is ignored (sIG).
            return if side == 1 && segment.flags & ACK != 0 {
                LinuxVerdict::Ignore
            } else {
                LinuxVerdict::Invalid("SYN after the handshake")
            };
        }
        let (sender, receiver) = (self.sides[side], self.sides[1 - side]);
        let rst = segment.flags & RST != 0;
        let fin = u32::from(segment.flags & FIN != 0);
        let mut seq = segment.seq;
        let mut end = seq.wrapping_add(segment.payload_len).wrapping_add(fin);
        let ack = if segment.flags & ACK == 0 || (rst && segment.ack == 0) {
            receiver.td_end
        } else {
            segment.ack
        };
        // A segment without data is judged by its acknowledgement alone; a reset always by
        // its sequence number.
        if seq == end && !rst {
            seq = sender.td_end;
            end = sender.td_end;
        }
        if after(seq, sender.td_maxend) {
            return LinuxVerdict::Invalid("SEQ is over the upper bound");
        }
        if after(ack, receiver.td_end) {
            return LinuxVerdict::Invalid("ACK is over the upper bound");
        }
        if receiver.td_maxwin != 0
            && !after(
                end,
                sender
                    .td_end
                    .wrapping_sub(receiver.td_maxwin)
                    .wrapping_sub(1),
            )
        {
            return LinuxVerdict::Ignore;
        }
        let max_ack_window = sender.td_maxwin.max(LINUX_MAX_ACK_WINDOW);
        if !after(
            ack,
            receiver.td_end.wrapping_sub(max_ack_window).wrapping_sub(1),
        ) {
            return LinuxVerdict::Ignore;
        }
        let window = u32::from(segment.window) << sender.td_scale;
        let sender = &mut self.sides[side];
        sender.td_maxwin = sender.td_maxwin.max(window);
        if after(end, sender.td_end) {
            sender.td_end = end;
        }
        let sender_maxend = sender.td_maxend;
        let receiver = &mut self.sides[1 - side];
        if receiver.td_maxwin != 0 && after(end, sender_maxend) {
            receiver.td_maxwin = receiver
                .td_maxwin
                .wrapping_add(end.wrapping_sub(sender_maxend));
        }
        let edge = ack.wrapping_add(window);
        if after(edge, receiver.td_maxend.wrapping_sub(1)) {
            receiver.td_maxend = edge.wrapping_add(u32::from(window == 0));
        }
        LinuxVerdict::Accept
    }
}

struct Exchange {
    ends: [Endpoint; 2],
    /// Segments emitted and not yet taken by the gateway, per direction, oldest first.
    wire: [Vec<TcpSegment>; 2],
    conn: TcpConn,
    linux: LinuxWindow,
}

fn direction(side: usize) -> Direction {
    if side == 0 {
        Direction::Original
    } else {
        Direction::Reply
    }
}

fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Exchange {
    /// A connection through its handshake, in order, with window scaling as given.
    fn established(isns: [u32; 2], shifts: [Option<u8>; 2], windows: [u16; 2]) -> Exchange {
        let scaled = shifts[0].is_some() && shifts[1].is_some();
        let syn = |side: usize, flags: u8, ack: u32| TcpSegment {
            flags,
            seq: isns[side],
            ack,
            window: windows[side],
            payload_len: 0,
            window_scale: shifts[side],
        };
        let mut conn = TcpConn::open(&syn(0, SYN, 0), false).expect("a SYN opens");
        let reply_syn = syn(1, SYN | ACK, isns[0].wrapping_add(1));
        assert_eq!(
            conn.track(Direction::Reply, &reply_syn),
            Ok(Tracked::Applied)
        );
        let ends = [0, 1].map(|side| {
            let other = 1 - side;
            let shift = if scaled { shifts[side].unwrap_or(0) } else { 0 };
            Endpoint {
                snd_una: isns[side].wrapping_add(1),
                snd_nxt: isns[side].wrapping_add(1),
                // A SYN's window is never scaled.
                snd_edge: isns[side]
                    .wrapping_add(1)
                    .wrapping_add(u32::from(windows[other])),
                rcv_nxt: isns[other].wrapping_add(1),
                rcv_edge: isns[other]
                    .wrapping_add(1)
                    .wrapping_add(u32::from(windows[side])),
                shift,
                fin_sent: false,
                aborted: false,
                heard: false,
                isn: isns[side],
                syn_window: windows[side],
            }
        });
        let mut exchange = Exchange {
            ends,
            wire: [Vec::new(), Vec::new()],
            conn,
            linux: LinuxWindow::after_handshake(isns, shifts, windows),
        };
        // The third ACK waits on the wire like any segment: the client's first data may
        // overtake it.
        let snd_nxt = exchange.ends[0].snd_nxt;
        let third = exchange.ends[0].segment(ACK, snd_nxt, 0);
        exchange.emit(0, third);
        exchange
    }

    fn emit(&mut self, side: usize, segment: TcpSegment) {
        self.wire[side].push(segment);
    }

    /// Applies one step; an Err is a refused segment, described.
    fn step(&mut self, op: Op) -> Result<(), String> {
        match op {
            Op::Gateway { side, pick, lost } => return self.gateway(side, pick, lost),
            Op::Data { side, .. }
            | Op::Retransmit { side }
            | Op::Ack { side, .. }
            | Op::Fin { side }
            | Op::Probe { side }
            | Op::Reset { side }
                if self.ends[side].aborted => {}
            // The server sends nothing but its SYN-ACK until the client's third ACK (or data,
            // which carries the same acknowledgement) reaches it: before that, its socket is
            // not even accepted.
            Op::Data { side: 1, .. }
            | Op::Retransmit { side: 1 }
            | Op::Ack { side: 1, .. }
            | Op::Fin { side: 1 }
            | Op::Probe { side: 1 }
                if !self.ends[1].heard => {}
            Op::Data { side, len } => {
                let end = self.ends[side];
                let room = end.snd_edge.wrapping_sub(end.snd_nxt);
                let len = len.min(room).min(MSS);
                if !end.fin_sent && len > 0 && !after(end.snd_nxt, end.snd_edge) {
                    let segment = self.ends[side].segment(ACK, end.snd_nxt, len);
                    self.ends[side].snd_nxt = end.snd_nxt.wrapping_add(len);
                    self.emit(side, segment);
                }
            }
            Op::Retransmit { side } => {
                let end = self.ends[side];
                let outstanding = end.in_flight();
                if outstanding > 0 {
                    let fin_only = end.fin_sent && outstanding == 1;
                    let segment = if fin_only {
                        self.ends[side].segment(FIN | ACK, end.snd_una, 0)
                    } else {
                        let data = outstanding - u32::from(end.fin_sent);
                        self.ends[side].segment(ACK, end.snd_una, data.min(MSS))
                    };
                    self.emit(side, segment);
                }
            }
            Op::Ack { side, window } => {
                let end = &mut self.ends[side];
                // Windows travel shifted: what can be offered is a multiple of the scale.
                let offered = (window.min(65535 << end.shift) >> end.shift) << end.shift;
                let edge = end.rcv_nxt.wrapping_add(offered);
                if after(edge, end.rcv_edge) {
                    end.rcv_edge = edge;
                }
                let segment = end.segment(ACK, end.snd_nxt, 0);
                self.emit(side, segment);
            }
            Op::Fin { side } => {
                let end = self.ends[side];
                // A FIN takes a place in the window (Linux's tcp_snd_wnd_test holds it back).
                if !end.fin_sent && !after(end.snd_nxt.wrapping_add(1), end.snd_edge) {
                    self.ends[side].fin_sent = true;
                    self.ends[side].snd_nxt = end.snd_nxt.wrapping_add(1);
                    let segment = self.ends[side].segment(FIN | ACK, end.snd_nxt, 0);
                    self.emit(side, segment);
                }
            }
            Op::Probe { side } => {
                let end = self.ends[side];
                if end.snd_edge == end.snd_nxt && end.in_flight() == 0 {
                    let segment = self.ends[side].segment(ACK, end.snd_una.wrapping_sub(1), 0);
                    self.emit(side, segment);
                }
            }
            Op::SynAckAgain => {
                let server = self.ends[1];
                if !server.heard && !server.aborted {
                    let segment = TcpSegment {
                        flags: SYN | ACK,
                        seq: server.isn,
                        ack: server.rcv_nxt,
                        window: server.syn_window,
                        payload_len: 0,
                        window_scale: None,
                    };
                    self.emit(1, segment);
                }
            }
            Op::Reset { side } => {
                let end = self.ends[side];
                let segment = self.ends[side].segment(RST | ACK, end.snd_nxt, 0);
                self.ends[side].aborted = true;
                self.emit(side, segment);
            }
        }
        Ok(())
    }

    fn gateway(&mut self, side: usize, pick: usize, lost: bool) -> Result<(), String> {
        let waiting = &mut self.wire[side];
        if waiting.is_empty() {
            return Ok(());
        }
        let segment = waiting.remove(pick.min(waiting.len() - 1));
        // The differential half: Linux's rules pass what these endpoints send too, so the
        // model's traffic is what a real stack sends, and the two trackers agree.
        if let LinuxVerdict::Invalid(why) = self.linux.check(side, &segment) {
            return Err(format!(
                "{segment:?} from {:?} refused by Linux's rules: {why}",
                direction(side)
            ));
        }
        match self.conn.track(direction(side), &segment) {
            Ok(_) => {}
            Err(reason) => {
                return Err(format!(
                    "{segment:?} from {:?} refused as {reason:?}",
                    direction(side)
                ));
            }
        }
        if !lost {
            self.deliver(1 - side, &segment);
        }
        Ok(())
    }

    /// What the receiving endpoint makes of a segment (in-order data only: go-back-N).
    fn deliver(&mut self, side: usize, segment: &TcpSegment) {
        let end = &mut self.ends[side];
        if end.aborted {
            return;
        }
        if segment.flags & SYN != 0 {
            // A SYN-ACK again: the client answers it with an ACK, as it stands.
            let snd_nxt = end.snd_nxt;
            let ack = end.segment(ACK, snd_nxt, 0);
            self.emit(side, ack);
            return;
        }
        end.heard = true;
        if segment.flags & RST != 0 {
            end.aborted = true;
            return;
        }
        if segment.flags & ACK != 0
            && after(segment.ack, end.snd_una)
            && !after(segment.ack, end.snd_nxt)
        {
            end.snd_una = segment.ack;
        }
        if segment.flags & ACK != 0 && !after(segment.ack, end.snd_nxt) {
            let peer_shift = self.ends[1 - side].shift;
            let edge = segment
                .ack
                .wrapping_add(u32::from(segment.window) << peer_shift);
            let end = &mut self.ends[side];
            if after(edge, end.snd_edge) {
                end.snd_edge = edge;
            }
        }
        let end = &mut self.ends[side];
        let consumed = segment.payload_len + u32::from(segment.flags & FIN != 0);
        if consumed > 0 && segment.seq == end.rcv_nxt {
            end.rcv_nxt = end.rcv_nxt.wrapping_add(consumed);
            if after(end.rcv_nxt, end.rcv_edge) {
                end.rcv_edge = end.rcv_nxt;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Every segment two well-behaved endpoints send is accepted or passed as stale, however
    /// the handoff reorders each direction, until a reset ends the connection.
    #[test]
    fn no_segment_is_refused_when_workers_reorder_a_direction(
        isns in any::<[u32; 2]>(),
        shifts in prop::array::uniform2(prop::option::of(0u8..=7)),
        windows in prop::array::uniform2(1u16..=65535),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let mut exchange = Exchange::established(isns, shifts, windows);
        for (i, op) in ops.iter().enumerate() {
            if let Err(refused) = exchange.step(*op) {
                prop_assert!(false, "step {i} ({op:?}): {refused}");
            }
        }
        // Whatever is still on the wire, in order.
        for side in [0, 1] {
            while !exchange.wire[side].is_empty() {
                let result = exchange.gateway(side, 0, false);
                prop_assert!(result.is_ok(), "draining: {:?}", result);
            }
        }
    }
}

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::index::FlowHasher;
use super::*;
use crate::flow::{Direction, FlowKey, FlowKey6};
use crate::wire::ipv4::protocol;
use crate::wire::tcp::flags::{ACK, FIN, PSH, RST, SYN};

use Direction::{Original, Reply};

const SECOND: u64 = 1_000_000_000;
const CLIENT_ISN: u32 = 1000;
const SERVER_ISN: u32 = 5000;
/// What the tests' endpoints advertise, unscaled.
const WINDOW: u16 = 65535;

fn key(src: [u8; 4], src_port: u16, dst: [u8; 4], dst_port: u16, protocol: u8) -> FlowKey {
    FlowKey {
        src: Ipv4Addr::from(src),
        dst: Ipv4Addr::from(dst),
        src_port,
        dst_port,
        protocol,
    }
}

fn client_key() -> FlowKey {
    key([10, 0, 0, 1], 40000, [192, 0, 2, 80], 80, protocol::TCP)
}

fn udp_key(n: u16) -> FlowKey {
    key([10, 0, 0, 1], 1000 + n, [192, 0, 2, 53], 53, protocol::UDP)
}

fn segment(flags: u8, seq: u32, ack: u32) -> TcpSegment {
    TcpSegment {
        flags,
        seq,
        ack,
        window: WINDOW,
        payload_len: 0,
        window_scale: None,
    }
}

fn no_eviction(data: u32) {
    panic!("unexpected eviction of flow {data}");
}

fn distinct_timeouts() -> Timeouts {
    Timeouts {
        tcp_established_ns: 1000 * SECOND,
        tcp_transitory_ns: 200 * SECOND,
        tcp_time_wait_ns: 30 * SECOND,
        tcp_close_ns: 4 * SECOND,
        udp_ns: 50 * SECOND,
        icmp_ns: 60 * SECOND,
        other_ns: 70 * SECOND,
    }
}

fn config(capacity: usize) -> ConntrackConfig {
    ConntrackConfig {
        capacity,
        timeouts: distinct_timeouts(),
        tcp_loose: false,
        ..ConntrackConfig::default()
    }
}

fn side(direction: Direction) -> usize {
    match direction {
        Original => 0,
        Reply => 1,
    }
}

/// One TCP connection through a table, with endpoints that keep their sequence numbers
/// straight; each segment is sent one second after the previous one.
struct Conn {
    table: FlowTable<u32>,
    id: FlowId,
    now_ns: u64,
    /// The next sequence number of each direction, indexed by [`side`].
    next_seq: [u32; 2],
}

impl Conn {
    fn syn_sent() -> Conn {
        Conn::syn_sent_with(config(16))
    }

    fn syn_sent_with(config: ConntrackConfig) -> Conn {
        let mut table = FlowTable::new(config, 0);
        let syn = segment(SYN, CLIENT_ISN, 0);
        let id = table
            .insert(
                client_key(),
                client_key().reversed(),
                7,
                Some(&syn),
                0,
                no_eviction,
            )
            .unwrap();
        Conn {
            table,
            id,
            now_ns: 0,
            next_seq: [CLIENT_ISN + 1, SERVER_ISN],
        }
    }

    fn syn_received() -> Conn {
        let mut conn = Conn::syn_sent();
        conn.expect_ok(Reply, SYN | ACK, 0);
        conn
    }

    fn established() -> Conn {
        let mut conn = Conn::syn_received();
        conn.expect_ok(Original, ACK, 0);
        conn
    }

    /// A segment at the direction's next sequence number, acknowledging all the other
    /// direction has sent if it carries an ACK.
    fn next_segment(&self, direction: Direction, flags: u8, payload_len: u32) -> TcpSegment {
        TcpSegment {
            payload_len,
            ..segment(
                flags,
                self.next_seq[side(direction)],
                if flags & ACK != 0 {
                    self.next_seq[side(direction.opposite())]
                } else {
                    0
                },
            )
        }
    }

    fn send(&mut self, direction: Direction, flags: u8, payload_len: u32) -> Track {
        let segment = self.next_segment(direction, flags, payload_len);
        self.send_segment(direction, segment)
    }

    fn send_segment(&mut self, direction: Direction, segment: TcpSegment) -> Track {
        self.now_ns += SECOND;
        let result = self
            .table
            .track(self.id, direction, Some(&segment), self.now_ns);
        if result == Track::Ok {
            let consumed = segment.payload_len
                + u32::from(segment.flags & SYN != 0)
                + u32::from(segment.flags & FIN != 0);
            let end = segment.seq.wrapping_add(consumed);
            let next = &mut self.next_seq[side(direction)];
            if (end.wrapping_sub(*next) as i32) > 0 {
                *next = end;
            }
        }
        result
    }

    fn expect_ok(&mut self, direction: Direction, flags: u8, payload_len: u32) {
        assert_eq!(
            self.send(direction, flags, payload_len),
            Track::Ok,
            "{direction:?} flags {flags:#04x} in {:?}",
            self.state()
        );
    }

    fn state(&self) -> TcpState {
        self.table.tcp_state(self.id).unwrap()
    }

    /// Sends `segment`, expects it rejected for `reason`, and checks that it changed nothing.
    fn expect_invalid(&mut self, direction: Direction, segment: TcpSegment, reason: InvalidReason) {
        let state = self.state();
        let deadline_ns = self.table.deadline_ns(self.id);
        let counted = self.table.stats().invalid(reason);
        assert_eq!(
            self.send_segment(direction, segment),
            Track::Invalid(reason),
            "{segment:?} from {direction:?} in {state:?}"
        );
        assert_eq!(self.state(), state);
        assert_eq!(self.table.deadline_ns(self.id), deadline_ns);
        assert_eq!(self.table.stats().invalid(reason), counted + 1);
    }

    /// Sends `segment`, expects it passed as stale, and checks that it changed nothing.
    fn expect_stale(&mut self, direction: Direction, segment: TcpSegment) {
        let state = self.state();
        let deadline_ns = self.table.deadline_ns(self.id);
        let stats = *self.table.stats();
        assert_eq!(
            self.send_segment(direction, segment),
            Track::Stale,
            "{segment:?} from {direction:?} in {state:?}"
        );
        assert_eq!(self.state(), state);
        assert_eq!(self.table.deadline_ns(self.id), deadline_ns);
        assert_eq!(self.table.stats().stale_segments, stats.stale_segments + 1);
        assert_eq!(self.table.stats().invalid_total(), stats.invalid_total());
    }
}

// --- TCP state machine --------------------------------------------------------------------

#[test]
fn three_way_handshake_establishes() {
    let mut conn = Conn::syn_sent();
    assert_eq!(conn.state(), TcpState::SynSent);
    assert!(!conn.table.is_established(conn.id));
    conn.expect_ok(Reply, SYN | ACK, 0);
    assert_eq!(conn.state(), TcpState::SynReceived);
    assert!(!conn.table.is_established(conn.id));
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::Established);
    assert!(conn.table.is_established(conn.id));
    assert_eq!(conn.table.stats().invalid_total(), 0);
}

#[test]
fn data_flows_both_ways_with_delayed_acks() {
    let mut conn = Conn::established();
    conn.expect_ok(Original, ACK | PSH, 1200);
    conn.expect_ok(Original, ACK | PSH, 1200);
    conn.expect_ok(Reply, ACK, 0);
    for _ in 0..10 {
        conn.expect_ok(Reply, ACK, 1448);
    }
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::Established);
}

#[test]
fn close_by_the_original_direction_walks_every_closing_state() {
    let mut conn = Conn::established();
    conn.expect_ok(Original, FIN | ACK, 0);
    assert_eq!(conn.state(), TcpState::FinWait);
    conn.expect_ok(Reply, ACK, 0);
    assert_eq!(conn.state(), TcpState::CloseWait);
    // The half-closed side may go on sending.
    conn.expect_ok(Reply, ACK | PSH, 500);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::CloseWait);
    conn.expect_ok(Reply, FIN | ACK, 0);
    assert_eq!(conn.state(), TcpState::LastAck);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::TimeWait);
    assert!(!conn.table.is_established(conn.id));
}

#[test]
fn close_by_the_reply_direction_walks_every_closing_state() {
    let mut conn = Conn::established();
    conn.expect_ok(Reply, FIN | ACK, 0);
    assert_eq!(conn.state(), TcpState::FinWait);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::CloseWait);
    conn.expect_ok(Original, FIN | ACK, 0);
    assert_eq!(conn.state(), TcpState::LastAck);
    conn.expect_ok(Reply, ACK, 0);
    assert_eq!(conn.state(), TcpState::TimeWait);
}

#[test]
fn fin_ack_answering_a_fin_goes_straight_to_last_ack() {
    let mut conn = Conn::established();
    conn.expect_ok(Original, FIN | ACK, 0);
    conn.expect_ok(Reply, FIN | ACK, 0);
    assert_eq!(conn.state(), TcpState::LastAck);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::TimeWait);
}

#[test]
fn simultaneous_close_reaches_time_wait() {
    let mut conn = Conn::established();
    // Both FINs cross: neither acknowledges the other's.
    let original_fin = conn.next_segment(Original, FIN | ACK, 0);
    let reply_fin = conn.next_segment(Reply, FIN | ACK, 0);
    assert_eq!(conn.send_segment(Original, original_fin), Track::Ok);
    assert_eq!(conn.state(), TcpState::FinWait);
    assert_eq!(conn.send_segment(Reply, reply_fin), Track::Ok);
    assert_eq!(conn.state(), TcpState::LastAck);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::LastAck);
    conn.expect_ok(Reply, ACK, 0);
    assert_eq!(conn.state(), TcpState::TimeWait);
    // A retransmitted last ACK is still welcome.
    conn.expect_ok(Reply, ACK, 0);
    assert_eq!(conn.state(), TcpState::TimeWait);
}

#[test]
fn rst_in_window_closes_from_either_direction() {
    for direction in [Original, Reply] {
        let mut conn = Conn::established();
        conn.expect_ok(direction, RST, 0);
        assert_eq!(conn.state(), TcpState::Closed);
        let mut conn = Conn::established();
        conn.expect_ok(direction, RST | ACK, 0);
        assert_eq!(conn.state(), TcpState::Closed);
    }
    let mut conn = Conn::syn_received();
    conn.expect_ok(Reply, RST, 0);
    assert_eq!(conn.state(), TcpState::Closed);
}

#[test]
fn rst_out_of_window_is_rejected() {
    let mut conn = Conn::established();
    for (direction, offset) in [
        (Reply, 1 << 30),
        (Original, 1 << 31),
        (Reply, 0_u32.wrapping_sub(1 << 20)),
    ] {
        let mut rst = conn.next_segment(direction, RST, 0);
        rst.seq = rst.seq.wrapping_add(offset);
        conn.expect_invalid(direction, rst, InvalidReason::OutOfWindow);
    }
    assert_eq!(conn.state(), TcpState::Established);
}

#[test]
fn rst_answering_a_syn_must_acknowledge_it() {
    let mut conn = Conn::syn_sent();
    conn.expect_invalid(Reply, segment(RST, 0, 0), InvalidReason::UnexpectedFlags);
    conn.expect_invalid(
        Reply,
        segment(RST | ACK, 0, CLIENT_ISN),
        InvalidReason::AckOutOfWindow,
    );
    conn.expect_invalid(
        Reply,
        segment(RST | ACK, 0, CLIENT_ISN + 2),
        InvalidReason::AckOutOfWindow,
    );
    assert_eq!(
        conn.send_segment(Reply, segment(RST | ACK, 0, CLIENT_ISN + 1)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::Closed);
}

#[test]
fn initiator_may_abort_its_own_syn() {
    let mut conn = Conn::syn_sent();
    conn.expect_invalid(
        Original,
        segment(RST, CLIENT_ISN + 100_000, 0),
        InvalidReason::OutOfWindow,
    );
    assert_eq!(
        conn.send_segment(Original, segment(RST, CLIENT_ISN + 1, 0)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::Closed);
}

#[test]
fn syn_retransmit_is_accepted_and_a_new_isn_restarts_the_handshake() {
    let mut conn = Conn::syn_sent();
    assert_eq!(
        conn.send_segment(Original, segment(SYN, CLIENT_ISN, 0)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::SynSent);
    // The client lost its state and starts over with another ISN.
    let new_isn = CLIENT_ISN + 77_777;
    assert_eq!(
        conn.send_segment(Original, segment(SYN, new_isn, 0)),
        Track::Ok
    );
    conn.expect_invalid(
        Reply,
        segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1),
        InvalidReason::AckOutOfWindow,
    );
    assert_eq!(
        conn.send_segment(Reply, segment(SYN | ACK, SERVER_ISN, new_isn + 1)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::SynReceived);
    // A retransmitted SYN after the SYN+ACK is still the same connection...
    assert_eq!(
        conn.send_segment(Original, segment(SYN, new_isn, 0)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::SynReceived);
    // ... but once the server has accepted an ISN, another one is not.
    conn.expect_invalid(
        Original,
        segment(SYN, new_isn + 5, 0),
        InvalidReason::OutOfWindow,
    );
    assert_eq!(
        conn.send_segment(Original, segment(ACK, new_isn + 1, SERVER_ISN + 1)),
        Track::Ok
    );
    assert_eq!(conn.state(), TcpState::Established);
}

#[test]
fn syn_ack_retransmit_is_accepted_before_and_after_establishment() {
    let mut conn = Conn::syn_received();
    let syn_ack = segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1);
    assert_eq!(conn.send_segment(Reply, syn_ack), Track::Ok);
    assert_eq!(conn.state(), TcpState::SynReceived);
    conn.expect_ok(Original, ACK, 0);
    assert_eq!(conn.state(), TcpState::Established);
    // The client's ACK was lost beyond us, so the server tries again: it must get through
    // for the client to answer it.
    assert_eq!(conn.send_segment(Reply, syn_ack), Track::Ok);
    assert_eq!(conn.state(), TcpState::Established);
    conn.expect_invalid(
        Reply,
        segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 9),
        InvalidReason::AckOutOfWindow,
    );
}

#[test]
fn syn_with_a_new_isn_on_an_established_connection_is_rejected() {
    let mut conn = Conn::established();
    conn.expect_invalid(
        Original,
        segment(SYN, CLIENT_ISN + 1_000_000, 0),
        InvalidReason::SynOnEstablished,
    );
    conn.expect_invalid(
        Reply,
        segment(SYN | ACK, SERVER_ISN + 1_000_000, CLIENT_ISN + 1),
        InvalidReason::SynOnEstablished,
    );
    conn.expect_ok(Original, FIN | ACK, 0);
    conn.expect_invalid(
        Original,
        segment(SYN, CLIENT_ISN + 1_000_000, 0),
        InvalidReason::SynOnEstablished,
    );
}

#[test]
fn simultaneous_open_establishes() {
    let mut conn = Conn::syn_sent();
    conn.expect_ok(Reply, SYN, 0);
    assert_eq!(conn.state(), TcpState::SynReceived);
    // Each side repeats its SYN with an ACK of the other's.
    let original_syn_ack = segment(SYN | ACK, CLIENT_ISN, SERVER_ISN + 1);
    let reply_syn_ack = segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1);
    assert_eq!(conn.send_segment(Original, original_syn_ack), Track::Ok);
    assert_eq!(conn.state(), TcpState::SynReceived);
    assert_eq!(conn.send_segment(Reply, reply_syn_ack), Track::Ok);
    assert_eq!(conn.state(), TcpState::Established);
    conn.expect_ok(Original, ACK | PSH, 100);
    conn.expect_ok(Reply, ACK | PSH, 100);
}

/// A connection in TIME_WAIT (both FINs acknowledged) and one closed by a reset.
fn closed_connections() -> [(Conn, TcpState); 2] {
    let mut time_wait = Conn::established();
    time_wait.expect_ok(Original, FIN | ACK, 0);
    time_wait.expect_ok(Reply, FIN | ACK, 0);
    time_wait.expect_ok(Original, ACK, 0);
    let mut closed = Conn::established();
    closed.expect_ok(Reply, RST, 0);
    [(time_wait, TcpState::TimeWait), (closed, TcpState::Closed)]
}

#[test]
fn a_syn_ack_sent_again_after_the_close_passes_as_stale() {
    // Overtaken on its way to the owner by the rest of the connection (issue 42): Linux
    // ignores a SYN-ACK in these states too. Another ISN is not this connection's.
    for (mut conn, state) in closed_connections() {
        assert_eq!(conn.state(), state);
        conn.expect_stale(Reply, segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1));
        conn.expect_invalid(
            Reply,
            segment(SYN | ACK, SERVER_ISN + 77, CLIENT_ISN + 1),
            InvalidReason::UnexpectedFlags,
        );
    }
}

#[test]
fn new_syn_from_the_original_direction_reuses_a_closed_flow() {
    for (mut conn, state) in closed_connections() {
        assert_eq!(conn.state(), state);
        *conn.table.data_mut(conn.id) = 42;
        conn.expect_invalid(
            Reply,
            segment(SYN, SERVER_ISN + 9_000_000, 0),
            InvalidReason::UnexpectedFlags,
        );
        conn.expect_invalid(
            Original,
            segment(SYN | ACK, CLIENT_ISN, SERVER_ISN),
            InvalidReason::UnexpectedFlags,
        );
        let new_isn = CLIENT_ISN.wrapping_add(3_000_000);
        assert_eq!(
            conn.send_segment(Original, segment(SYN, new_isn, 0)),
            Track::Ok
        );
        assert_eq!(conn.state(), TcpState::SynSent);
        assert_eq!(conn.table.lookup(&client_key()), Some((conn.id, Original)));
        assert_eq!(*conn.table.data(conn.id), 42);
        let server_isn = SERVER_ISN.wrapping_add(8_000_000);
        let syn_ack = segment(SYN | ACK, server_isn, new_isn + 1);
        assert_eq!(conn.send_segment(Reply, syn_ack), Track::Ok);
        let ack = segment(ACK, new_isn + 1, server_isn + 1);
        assert_eq!(conn.send_segment(Original, ack), Track::Ok);
        assert_eq!(conn.state(), TcpState::Established);
    }
}

#[test]
fn far_off_sequence_and_acknowledgement_numbers_are_rejected() {
    let mut conn = Conn::established();
    for _ in 0..4 {
        conn.expect_ok(Original, ACK | PSH, 1000);
        conn.expect_ok(Reply, ACK, 0);
    }
    let sent = conn.next_segment(Original, ACK, 1000);

    let mut ahead = sent;
    ahead.seq = ahead.seq.wrapping_add(1 << 30);
    conn.expect_invalid(Original, ahead, InvalidReason::OutOfWindow);
    let mut just_past_window = sent;
    just_past_window.seq = sent.seq.wrapping_add(u32::from(WINDOW) + 1);
    conn.expect_invalid(Original, just_past_window, InvalidReason::OutOfWindow);
    let mut ack_unsent = sent;
    ack_unsent.ack = sent.ack.wrapping_add(1);
    conn.expect_invalid(Original, ack_unsent, InvalidReason::AckOutOfWindow);

    // A retransmission of data already sent, and the end of the offered window, are fine.
    let mut retransmit = sent;
    retransmit.seq = sent.seq.wrapping_sub(2000);
    assert_eq!(conn.send_segment(Original, retransmit), Track::Ok);
    let mut window_edge = sent;
    window_edge.seq = sent.seq.wrapping_add(u32::from(WINDOW) - 1000);
    assert_eq!(conn.send_segment(Original, window_edge), Track::Ok);
    assert_eq!(conn.state(), TcpState::Established);
}

/// What a sender sends before it has seen the receiver's latest acknowledgements (lost after
/// the gateway, or still on their way, as when a retransmission timer fires early): data the
/// receiver has already acknowledged, and acknowledgements older than its last. Such segments
/// pass, so that the receiver can answer them, but change nothing; a reset gets no leeway.
#[test]
fn segments_behind_the_window_pass_as_stale_and_change_nothing() {
    let mut conn = Conn::established();
    let mut acked = Vec::new();
    for _ in 0..4 {
        acked.push(conn.next_segment(Original, ACK | PSH, 1000));
        conn.expect_ok(Original, ACK | PSH, 1000);
        conn.expect_ok(Reply, ACK, 0);
    }
    let sent = conn.next_segment(Original, ACK, 1000);

    // Window 8192 (WINDOW): the first segment, 4000 bytes back, is within one window of the
    // newest data, so it is an ordinary retransmission; one a megabyte back is not.
    assert_eq!(conn.send_segment(Original, acked[0]), Track::Ok);
    let mut ancient_data = sent;
    ancient_data.seq = sent.seq.wrapping_sub(1 << 20);
    conn.expect_stale(Original, ancient_data);
    let mut ancient_ack = sent;
    ancient_ack.ack = sent.ack.wrapping_sub(1 << 20);
    conn.expect_stale(Original, ancient_ack);
    let mut ancient_fin = conn.next_segment(Reply, FIN | ACK, 0);
    ancient_fin.ack = ancient_fin.ack.wrapping_sub(1 << 20);
    conn.expect_stale(Reply, ancient_fin);
    assert_eq!(
        conn.state(),
        TcpState::Established,
        "the stale FIN was not taken in"
    );

    // A stale segment moves no edge: the window's right edge is where it was.
    let mut just_past_window = sent;
    just_past_window.seq = sent.seq.wrapping_add(u32::from(WINDOW) + 1);
    conn.expect_invalid(Original, just_past_window, InvalidReason::OutOfWindow);

    let mut ancient_rst = conn.next_segment(Reply, RST | ACK, 0);
    ancient_rst.seq = ancient_rst.seq.wrapping_sub(1 << 20);
    conn.expect_invalid(Reply, ancient_rst, InvalidReason::OutOfWindow);
    let mut rst_with_ancient_ack = conn.next_segment(Reply, RST | ACK, 0);
    rst_with_ancient_ack.ack = rst_with_ancient_ack.ack.wrapping_sub(1 << 20);
    conn.expect_invalid(Reply, rst_with_ancient_ack, InvalidReason::AckOutOfWindow);

    conn.expect_ok(Original, ACK | PSH, 1000);
    conn.expect_ok(Reply, ACK, 0);
}

#[test]
fn window_scaling_counts_only_when_both_sides_offer_it() {
    let far = 200_000;
    for (server_scale, accepted) in [(Some(7), true), (None, false)] {
        let mut table = FlowTable::new(config(4), 0_u32);
        let syn = TcpSegment {
            window_scale: Some(7),
            ..segment(SYN, CLIENT_ISN, 0)
        };
        let id = table
            .insert(
                client_key(),
                client_key().reversed(),
                0,
                Some(&syn),
                0,
                no_eviction,
            )
            .unwrap();
        let syn_ack = TcpSegment {
            window_scale: server_scale,
            ..segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1)
        };
        assert_eq!(table.track(id, Reply, Some(&syn_ack), 1), Track::Ok);
        // 4096 << 7 is 512 KiB of window for the server's data.
        let ack = TcpSegment {
            window: 4096,
            ..segment(ACK, CLIENT_ISN + 1, SERVER_ISN + 1)
        };
        assert_eq!(table.track(id, Original, Some(&ack), 2), Track::Ok);
        let data = TcpSegment {
            payload_len: 1000,
            ..segment(ACK, SERVER_ISN + 1 + far, CLIENT_ISN + 1)
        };
        let expected = if accepted {
            Track::Ok
        } else {
            Track::Invalid(InvalidReason::OutOfWindow)
        };
        assert_eq!(table.track(id, Reply, Some(&data), 3), expected);
    }
}

#[test]
fn impossible_flag_combinations_are_rejected() {
    let mut conn = Conn::established();
    for flags in [
        0,
        FIN,
        SYN | FIN,
        SYN | RST,
        SYN | FIN | ACK,
        RST | FIN | ACK,
        0xff,
    ] {
        let segment = conn.next_segment(Original, flags, 0);
        conn.expect_invalid(Original, segment, InvalidReason::InvalidFlags);
    }
    // ECE, CWR, URG and PSH do not matter.
    conn.expect_ok(Original, ACK | PSH | 0x20 | 0x40 | 0x80, 10);
}

#[test]
fn new_tcp_flow_must_start_with_a_bare_syn() {
    let mut table = FlowTable::new(config(4), 0_u32);
    for (flags, reason) in [
        (ACK, InvalidReason::NotSyn),
        (SYN | ACK, InvalidReason::NotSyn),
        (RST, InvalidReason::NotSyn),
        (FIN | ACK, InvalidReason::NotSyn),
        (SYN | FIN, InvalidReason::InvalidFlags),
    ] {
        let first = segment(flags, 1, 1);
        assert_eq!(
            table.insert(
                client_key(),
                client_key().reversed(),
                0,
                Some(&first),
                0,
                no_eviction
            ),
            Err(InsertError::Invalid(reason))
        );
    }
    assert_eq!(table.stats().invalid(InvalidReason::NotSyn), 4);
    assert_eq!(table.stats().invalid(InvalidReason::InvalidFlags), 1);
    assert_eq!(
        table.insert(
            client_key(),
            client_key().reversed(),
            0,
            None,
            0,
            no_eviction
        ),
        Err(InsertError::Invalid(InvalidReason::NoTcpSegment))
    );
    assert!(table.is_empty());
    assert_eq!(table.stats().setups, 0);
}

#[test]
fn loose_mode_picks_up_connections_mid_stream() {
    let mut table = FlowTable::new(
        ConntrackConfig {
            tcp_loose: true,
            ..config(4)
        },
        0_u32,
    );
    let midstream = TcpSegment {
        payload_len: 100,
        ..segment(ACK | PSH, 123_456, 987_654)
    };
    let id = table
        .insert(
            client_key(),
            client_key().reversed(),
            0,
            Some(&midstream),
            0,
            no_eviction,
        )
        .unwrap();
    assert_eq!(table.tcp_state(id), Some(TcpState::Established));
    // Unanswered, it is half-open and unassured, with the transitory timeout: an ACK flood
    // cannot hold the table for the established timeout.
    assert_eq!(table.deadline_ns(id), distinct_timeouts().tcp_transitory_ns);
    assert_eq!((table.half_open_len(), table.is_assured(id)), (1, false));
    // The reply direction's window scale is unknown, so its large segments must pass.
    let reply = TcpSegment {
        payload_len: 1000,
        ..segment(ACK, 987_654 + 300_000, 123_556)
    };
    assert_eq!(table.track(id, Reply, Some(&reply), 1), Track::Ok);
    assert_eq!(
        table.deadline_ns(id),
        1 + distinct_timeouts().tcp_established_ns
    );
    assert_eq!((table.half_open_len(), table.is_assured(id)), (0, true));
    for flags in [SYN | ACK, FIN | ACK, RST] {
        let first = segment(flags, 1, 1);
        let other = key([10, 0, 0, 2], 1, [192, 0, 2, 1], 2, protocol::TCP);
        assert_eq!(
            table.insert(other, other.reversed(), 0, Some(&first), 0, no_eviction),
            Err(InsertError::Invalid(InvalidReason::NotSyn))
        );
    }
}

#[test]
fn tcp_flow_needs_a_segment_and_others_ignore_it() {
    let mut conn = Conn::established();
    assert_eq!(
        conn.table.track(conn.id, Original, None, 5),
        Track::Invalid(InvalidReason::NoTcpSegment)
    );
    let id = conn
        .table
        .insert(udp_key(1), udp_key(1).reversed(), 0, None, 0, no_eviction)
        .unwrap();
    let nonsense = segment(SYN | FIN, 0, 0);
    assert_eq!(conn.table.track(id, Reply, Some(&nonsense), 1), Track::Ok);
    assert_eq!(conn.table.tcp_state(id), None);
}

#[test]
fn only_the_handshake_may_precede_the_reply_syn() {
    let mut conn = Conn::syn_sent();
    let data = segment(ACK, CLIENT_ISN + 1, 0);
    conn.expect_invalid(Original, data, InvalidReason::UnexpectedFlags);
    conn.expect_invalid(
        Reply,
        segment(ACK, SERVER_ISN, CLIENT_ISN + 1),
        InvalidReason::UnexpectedFlags,
    );
    conn.expect_invalid(
        Original,
        segment(SYN | ACK, CLIENT_ISN, 1),
        InvalidReason::AckOutOfWindow,
    );
    conn.expect_invalid(
        Original,
        segment(FIN | ACK, CLIENT_ISN + 1, 0),
        InvalidReason::UnexpectedFlags,
    );
}

#[test]
fn tracking_a_removed_flow_is_reported() {
    let mut conn = Conn::established();
    assert_eq!(conn.table.remove(conn.id), 7);
    let ack = conn.next_segment(Original, ACK, 0);
    assert_eq!(
        conn.table.track(conn.id, Original, Some(&ack), 1),
        Track::Invalid(InvalidReason::NoSuchFlow)
    );
    // A second remove finds nothing to hand back.
    assert_eq!(conn.table.remove(conn.id), 0);
    assert_eq!(conn.table.stats().removals, 1);
}

// --- Timeouts -----------------------------------------------------------------------------

#[test]
fn default_timeouts_meet_the_nat_rfcs() {
    let timeouts = Timeouts::default();
    assert_eq!(timeouts.tcp_established_ns, (2 * 3600 + 4 * 60) * SECOND);
    assert_eq!(timeouts.tcp_transitory_ns, 240 * SECOND);
    assert_eq!(timeouts.tcp_time_wait_ns, 120 * SECOND);
    assert_eq!(timeouts.tcp_close_ns, 10 * SECOND);
    assert_eq!(timeouts.udp_ns, 300 * SECOND);
    assert_eq!(timeouts.icmp_ns, 60 * SECOND);
    assert_eq!(timeouts.other_ns, 600 * SECOND);
    assert!(!ConntrackConfig::default().tcp_loose);
}

/// The flow must survive a full sweep one nanosecond before `last_seen_ns + timeout_ns`, and
/// go (exactly once, with its data) at that instant.
fn assert_expires_exactly_after(
    table: &mut FlowTable<u32>,
    id: FlowId,
    last_seen_ns: u64,
    timeout_ns: u64,
) {
    let original = table.key(id, Original);
    let data = *table.data(id);
    let deadline_ns = last_seen_ns + timeout_ns;
    assert_eq!(table.deadline_ns(id), deadline_ns);
    let capacity = table.capacity();
    let mut expired = Vec::new();
    table.expire(deadline_ns - 1, capacity, |data| expired.push(data));
    assert!(expired.is_empty());
    assert_eq!(table.lookup(&original), Some((id, Original)));
    table.expire(deadline_ns, capacity, |data| expired.push(data));
    assert_eq!(expired, [data]);
    assert_eq!(table.lookup(&original), None);
}

#[test]
fn each_tcp_state_expires_after_its_own_timeout() {
    let timeouts = distinct_timeouts();
    type Drive = fn(&mut Conn);
    let cases: [(Drive, TcpState, u64); 8] = [
        (|_| {}, TcpState::SynSent, timeouts.tcp_transitory_ns),
        (
            |conn| conn.expect_ok(Reply, SYN | ACK, 0),
            TcpState::SynReceived,
            timeouts.tcp_transitory_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, ACK, 0);
            },
            TcpState::Established,
            timeouts.tcp_established_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, FIN | ACK, 0);
            },
            TcpState::FinWait,
            timeouts.tcp_transitory_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, FIN | ACK, 0);
                conn.expect_ok(Reply, ACK, 0);
            },
            TcpState::CloseWait,
            timeouts.tcp_transitory_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, FIN | ACK, 0);
                conn.expect_ok(Reply, FIN | ACK, 0);
            },
            TcpState::LastAck,
            timeouts.tcp_transitory_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, FIN | ACK, 0);
                conn.expect_ok(Reply, FIN | ACK, 0);
                conn.expect_ok(Original, ACK, 0);
            },
            TcpState::TimeWait,
            timeouts.tcp_time_wait_ns,
        ),
        (
            |conn| {
                conn.expect_ok(Reply, SYN | ACK, 0);
                conn.expect_ok(Original, ACK, 0);
                conn.expect_ok(Reply, RST, 0);
            },
            TcpState::Closed,
            timeouts.tcp_close_ns,
        ),
    ];
    for (drive, state, timeout_ns) in cases {
        let mut conn = Conn::syn_sent_with(config(16));
        drive(&mut conn);
        assert_eq!(conn.state(), state);
        let now_ns = conn.now_ns;
        assert_expires_exactly_after(&mut conn.table, conn.id, now_ns, timeout_ns);
        assert_eq!(conn.table.stats().expirations, 1);
    }
}

#[test]
fn other_protocols_expire_after_their_own_timeout() {
    let timeouts = distinct_timeouts();
    for (protocol, timeout_ns) in [
        (protocol::UDP, timeouts.udp_ns),
        (protocol::ICMP, timeouts.icmp_ns),
        (47, timeouts.other_ns),
    ] {
        let mut table = FlowTable::new(config(8), 0_u32);
        let original = key([10, 0, 0, 1], 7, [192, 0, 2, 1], 7, protocol);
        let id = table
            .insert(original, original.reversed(), 3, None, 10, no_eviction)
            .unwrap();
        assert_eq!(table.deadline_ns(id), 10 + timeout_ns);
        // Traffic either way restarts the timer.
        assert_eq!(table.track(id, Reply, None, 20 * SECOND), Track::Ok);
        assert_eq!(table.track(id, Original, None, 25 * SECOND), Track::Ok);
        assert!(table.is_established(id));
        assert_expires_exactly_after(&mut table, id, 25 * SECOND, timeout_ns);
    }
}

// --- Lookup and insert --------------------------------------------------------------------

#[test]
fn lookup_finds_both_tuples_of_a_nat_flow() {
    let mut table = FlowTable::new(config(8), 0_u32);
    let inside = key([10, 0, 0, 1], 40000, [198, 51, 100, 7], 443, protocol::UDP);
    // The reply comes back to the NAT's public address and port.
    let reply = key(
        [198, 51, 100, 7],
        443,
        [203, 0, 113, 1],
        61000,
        protocol::UDP,
    );
    let id = table
        .insert(inside, reply, 99, None, 0, no_eviction)
        .unwrap();
    assert_eq!(table.lookup(&inside), Some((id, Original)));
    assert_eq!(table.lookup(&reply), Some((id, Reply)));
    assert_eq!(table.lookup(&inside.reversed()), None);
    assert_eq!(table.lookup(&reply.reversed()), None);
    assert_eq!(table.key(id, Original), inside);
    assert_eq!(table.key(id, Reply), reply);
    assert_eq!(*table.data(id), 99);
    assert!(!table.is_established(id));
    assert_eq!(table.track(id, Reply, None, 1), Track::Ok);
    assert!(table.is_established(id));
    assert_eq!((table.len(), table.stats().setups), (1, 1));
}

#[test]
fn insert_refuses_a_tuple_already_in_use() {
    let mut table = FlowTable::new(config(8), 0_u32);
    let a = udp_key(1);
    let b = udp_key(2);
    table.insert(a, b, 1, None, 0, no_eviction).unwrap();
    for (original, reply) in [
        (a, udp_key(3)),
        (udp_key(3), b),
        (b, udp_key(3)),
        (udp_key(3), a),
    ] {
        assert_eq!(
            table.insert(original, reply, 2, None, 0, no_eviction),
            Err(InsertError::Exists)
        );
    }
    assert_eq!(table.stats().refused_exists, 4);
    assert_eq!(
        table.insert(udp_key(4), udp_key(4), 2, None, 0, no_eviction),
        Err(InsertError::Ambiguous)
    );
    assert_eq!(table.len(), 1);
}

#[test]
fn remove_hands_back_the_data_and_frees_both_tuples() {
    let mut table = FlowTable::new(config(2), 0_u32);
    let id = table
        .insert(udp_key(1), udp_key(2), 5, None, 0, no_eviction)
        .unwrap();
    assert_eq!(table.remove(id), 5);
    assert_eq!(table.lookup(&udp_key(1)), None);
    assert_eq!(table.lookup(&udp_key(2)), None);
    assert!(table.is_empty());
    let again = table
        .insert(udp_key(2), udp_key(1), 6, None, 0, no_eviction)
        .unwrap();
    assert_eq!(table.lookup(&udp_key(1)), Some((again, Reply)));
}

#[test]
fn capacity_is_clamped_and_memory_per_flow_is_as_documented() {
    assert_eq!(FlowTable::<u32>::new(config(0), 0_u32).capacity(), 1);
    assert_eq!(FlowTable::<u32>::new(config(1000), 0_u32).capacity(), 1000);
    #[cfg(target_pointer_width = "64")]
    assert_eq!(BYTES_PER_FLOW, 140);
}

// --- Eviction -----------------------------------------------------------------------------

/// A UDP flow `n` with data `n`, created at `now_ns`; if `assured`, answered and then used
/// again (two-way traffic), so early drop keeps it.
fn add_udp(table: &mut FlowTable<u32>, n: u16, now_ns: u64, assured: bool) -> FlowId {
    let id = table
        .insert(
            udp_key(n),
            udp_key(n).reversed(),
            u32::from(n),
            None,
            now_ns,
            no_eviction,
        )
        .unwrap();
    if assured {
        assert_eq!(table.track(id, Reply, None, now_ns), Track::Ok);
        assert_eq!(table.track(id, Original, None, now_ns), Track::Ok);
        assert!(table.is_assured(id));
    }
    id
}

#[test]
fn full_table_evicts_an_expired_flow_first() {
    let udp_ns = distinct_timeouts().udp_ns;
    let mut table = FlowTable::new(config(4), 0_u32);
    add_udp(&mut table, 0, udp_ns, true);
    add_udp(&mut table, 1, udp_ns, false);
    add_udp(&mut table, 2, 0, true);
    add_udp(&mut table, 3, udp_ns, true);
    let mut evicted = Vec::new();
    let id = table
        .insert(udp_key(9), udp_key(9).reversed(), 9, None, udp_ns, |data| {
            evicted.push(data)
        })
        .unwrap();
    assert_eq!(evicted, [2]);
    assert_eq!(table.lookup(&udp_key(2)), None);
    assert_eq!(table.lookup(&udp_key(9)), Some((id, Original)));
    let stats = table.stats();
    assert_eq!(
        (stats.expirations, stats.evictions, stats.refused_full),
        (1, 0, 0)
    );
}

#[test]
fn full_table_evicts_the_unestablished_flow_nearest_its_deadline() {
    let mut table = FlowTable::new(config(4), 0_u32);
    add_udp(&mut table, 0, 0, true);
    add_udp(&mut table, 1, 20 * SECOND, false);
    add_udp(&mut table, 2, 10 * SECOND, false);
    add_udp(&mut table, 3, 0, true);
    let mut evicted = Vec::new();
    table
        .insert(
            udp_key(9),
            udp_key(9).reversed(),
            9,
            None,
            30 * SECOND,
            |data| evicted.push(data),
        )
        .unwrap();
    assert_eq!(evicted, [2]);
    let stats = table.stats();
    assert_eq!((stats.expirations, stats.evictions), (0, 1));
    assert_eq!(table.len(), 4);
}

#[test]
fn full_table_of_live_established_flows_refuses() {
    let mut table = FlowTable::new(config(4), 0_u32);
    for n in 0..4 {
        add_udp(&mut table, n, 0, true);
    }
    assert_eq!(
        table.insert(
            udp_key(9),
            udp_key(9).reversed(),
            9,
            None,
            SECOND,
            no_eviction
        ),
        Err(InsertError::Full)
    );
    assert_eq!(table.stats().refused_full, 1);
    assert_eq!(table.lookup(&udp_key(9)), None);
    assert_eq!(table.len(), 4);
}

#[test]
fn eviction_scan_is_bounded_and_moves_on() {
    let capacity = EVICTION_SCAN_MAX + EVICTION_SCAN;
    let mut table = FlowTable::new(config(capacity), 0_u32);
    // Flows fill slots in order: the first EVICTION_SCAN_MAX slots are all assured.
    for n in 0..capacity as u16 {
        let id = add_udp(
            &mut table,
            n,
            u64::from(n),
            usize::from(n) < EVICTION_SCAN_MAX,
        );
        assert_eq!(id.as_u32(), u32::from(n));
    }
    assert_eq!(
        table.insert(
            udp_key(900),
            udp_key(900).reversed(),
            900,
            None,
            100,
            no_eviction
        ),
        Err(InsertError::Full)
    );
    let mut evicted = Vec::new();
    table
        .insert(
            udp_key(901),
            udp_key(901).reversed(),
            901,
            None,
            100,
            |data| evicted.push(data),
        )
        .unwrap();
    // The least recently used in the window after the first EVICTION_SCAN_MAX slots.
    assert_eq!(evicted, [EVICTION_SCAN_MAX as u32]);
}

#[test]
fn early_drop_takes_unreplied_then_unassured_and_never_assured_flows() {
    let mut table = FlowTable::new(config(4), 0_u32);
    let replied_once = add_udp(&mut table, 0, 0, false);
    assert_eq!(table.track(replied_once, Reply, None, 0), Track::Ok);
    // A UDP flow with a single reply (a DNS answer) is not assured.
    assert!(table.is_established(replied_once) && !table.is_assured(replied_once));
    add_udp(&mut table, 1, 5 * SECOND, false);
    add_udp(&mut table, 2, 0, true);
    add_udp(&mut table, 3, 0, true);
    let mut evicted = Vec::new();
    let mut insert = |table: &mut FlowTable<u32>, n: u16| {
        table.insert(
            udp_key(n),
            udp_key(n).reversed(),
            u32::from(n),
            None,
            10 * SECOND,
            |data| evicted.push(data),
        )
    };
    // The unreplied flow goes first, though the replied one is older.
    let fresh = insert(&mut table, 10).unwrap();
    assert_eq!(table.track(fresh, Reply, None, 10 * SECOND), Track::Ok);
    assert_eq!(table.track(fresh, Original, None, 10 * SECOND), Track::Ok);
    // Then the replied but unassured flow; the assured ones stay.
    let unreplied = insert(&mut table, 11).unwrap();
    // A new unreplied flow is the next to go.
    insert(&mut table, 12).unwrap();
    assert_eq!(table.lookup(&udp_key(11)), None);
    assert_eq!(
        table.lookup(&udp_key(12)).map(|(id, _)| id),
        Some(unreplied)
    );
    let twelve = table.lookup(&udp_key(12)).unwrap().0;
    assert_eq!(table.track(twelve, Reply, None, 10 * SECOND), Track::Ok);
    assert_eq!(table.track(twelve, Reply, None, 10 * SECOND), Track::Ok);
    // Every flow assured: nothing may go.
    assert_eq!(insert(&mut table, 13), Err(InsertError::Full));
    assert_eq!(evicted, [1, 0, 11]);
    for n in [2, 3, 10, 12] {
        assert!(table.lookup(&udp_key(n)).is_some(), "flow {n}");
    }
    assert_eq!(table.stats().evictions, 3);
}

/// A TCP SYN from `src` to port 80 of a server, through `table`.
fn syn_from(
    table: &mut FlowTable<u32>,
    src: [u8; 4],
    port: u16,
    now_ns: u64,
    evicted: &mut Vec<u32>,
) -> Result<FlowId, InsertError> {
    let original = key(src, port, [192, 0, 2, 80], 80, protocol::TCP);
    let syn = segment(SYN, CLIENT_ISN, 0);
    table.insert(
        original,
        original.reversed(),
        u32::from(port),
        Some(&syn),
        now_ns,
        |data| evicted.push(data),
    )
}

/// Completes the handshake of the flow `syn_from` opened.
fn complete_handshake(table: &mut FlowTable<u32>, id: FlowId, now_ns: u64) {
    let syn_ack = segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1);
    assert_eq!(table.track(id, Reply, Some(&syn_ack), now_ns), Track::Ok);
    let ack = segment(ACK, CLIENT_ISN + 1, SERVER_ISN + 1);
    assert_eq!(table.track(id, Original, Some(&ack), now_ns), Track::Ok);
    assert!(table.is_assured(id));
}

#[test]
fn half_open_flows_are_capped_and_replace_each_other_not_established_ones() {
    let mut table = FlowTable::new(
        ConntrackConfig {
            half_open: 4,
            ..config(16)
        },
        0_u32,
    );
    let mut evicted = Vec::new();
    let mut established = Vec::new();
    for port in 1..=3 {
        let id = syn_from(&mut table, [10, 0, 0, 1], port, 0, &mut evicted).unwrap();
        complete_handshake(&mut table, id, 0);
        established.push(id);
    }
    assert_eq!(table.half_open_len(), 0);
    // A flood from random sources: never more than 4 half-open, the oldest replaced first.
    for n in 0..40_u16 {
        let [a, b] = n.to_be_bytes();
        let now = u64::from(n) * SECOND;
        syn_from(&mut table, [198, 51, a, b], 1000 + n, now, &mut evicted).unwrap();
        assert!(table.half_open_len() <= 4);
    }
    assert_eq!(table.half_open_len(), 4);
    assert_eq!(evicted, (1000..1036).collect::<Vec<u32>>());
    assert_eq!(table.stats().half_open_replaced, 36);
    for id in established {
        assert_eq!(table.tcp_state(id), Some(TcpState::Established));
    }
    assert_eq!(table.len(), 7);
}

/// What a burst prefetches for a SYN is the slot its insert then fills: the next free one,
/// and under a flood (the half-open table full) the oldest half-open flow's, reused at once;
/// and a burst before, the entries of the two flows the next evictions take.
#[test]
fn insert_lines_name_the_slot_the_insert_fills() {
    // Fixed hash keys: with random ones, about one run in 200 put a flow's home index slot
    // under another tuple, where `flow_lines_hashed` (a prefetch hint) rightly finds nothing.
    let mut table = FlowTable::with_hasher(
        ConntrackConfig {
            half_open: 4,
            ..config(1024)
        },
        0_u32,
        FlowHasher::fixed([1, 2, 3]),
    );
    let mut evicted = Vec::new();
    let mut ahead_of_last: Vec<*const u8> = Vec::new();
    for n in 0..12_u16 {
        let src = [198, 51, 100, n as u8];
        let original = key(src, 1000 + n, [192, 0, 2, 80], 80, protocol::TCP);
        let predicted: Vec<_> = table.insert_lines(&original).collect();
        let eviction = table.eviction_lines();
        let ahead: Vec<_> = table.eviction_ahead_lines().collect();
        let id = syn_from(&mut table, src, 1000 + n, 0, &mut evicted).unwrap();
        let filled: Vec<_> = table
            .flow_lines_hashed(table.hash(&original))
            .expect("the new flow's home index slot")
            .collect();
        // Every line of the entry (2 or 3: 96 bytes) and its data (here 4 bytes).
        assert!(
            filled.len() >= 3,
            "entry and data lines, SYN {n}: {filled:?}"
        );
        assert!(filled
            .iter()
            .all(|line| (*line as usize).is_multiple_of(64)));
        assert_eq!(
            predicted[1..=filled.len()],
            filled[..],
            "entry lines, SYN {n}"
        );
        let [links, head_links] = table.half_open_links_addresses(id);
        assert_eq!(
            predicted.last().copied(),
            links,
            "its half-open links, SYN {n}"
        );
        if n >= 4 {
            // The oldest made room: the next oldest is now the list's head.
            assert_eq!(eviction[3], head_links, "the new head's links, SYN {n}");
            assert!(!ahead.is_empty());
        } else {
            assert_eq!(eviction, [None; 4], "nothing to evict yet, SYN {n}");
            assert!(ahead.is_empty(), "room in the half-open table, SYN {n}");
        }
        if n >= 5 {
            // The burst before (already full) had prefetched the victim's whole entry.
            for line in &filled {
                assert!(ahead_of_last.contains(line), "victim line, SYN {n}");
            }
        }
        ahead_of_last = ahead;
    }
    assert_eq!(evicted.len(), 8, "the last 8 SYNs each replaced the oldest");
}

#[test]
fn the_oldest_half_open_flow_is_replaced_wherever_it_sits() {
    let capacity = 2 * EVICTION_SCAN_MAX;
    let mut table = FlowTable::new(
        ConntrackConfig {
            half_open: 2,
            ..config(capacity)
        },
        0_u32,
    );
    let mut evicted = Vec::new();
    // Slot 0: a half-open flow; then assured flows; the last slot: another half-open flow.
    syn_from(&mut table, [10, 0, 0, 2], 1, 0, &mut evicted).unwrap();
    for port in 100..100 + capacity as u16 - 2 {
        let id = syn_from(&mut table, [10, 0, 0, 1], port, 0, &mut evicted).unwrap();
        complete_handshake(&mut table, id, 0);
    }
    syn_from(&mut table, [10, 0, 0, 2], 2, SECOND, &mut evicted).unwrap();
    assert_eq!(table.len(), capacity);
    // Far from the eviction cursor or not, the oldest goes first, then the next oldest.
    syn_from(&mut table, [10, 0, 0, 3], 3, 2 * SECOND, &mut evicted).unwrap();
    syn_from(&mut table, [10, 0, 0, 3], 4, 3 * SECOND, &mut evicted).unwrap();
    assert_eq!(evicted, [1, 2]);
    assert_eq!(table.half_open_len(), 2);
    let stats = table.stats();
    assert_eq!((stats.half_open_replaced, stats.refused_half_open), (2, 0));
    assert_eq!(stats.refused_full, 0);
}

#[test]
fn one_host_is_held_to_its_flow_and_half_open_limits_and_others_are_not() {
    let mut table = FlowTable::new(
        ConntrackConfig {
            host_flows: 4,
            host_half_open: 2,
            ..config(64)
        },
        0_u32,
    );
    let mut evicted = Vec::new();
    let sprayer = [10, 0, 0, 9];
    let first = syn_from(&mut table, sprayer, 1, 0, &mut evicted).unwrap();
    syn_from(&mut table, sprayer, 2, 0, &mut evicted).unwrap();
    assert_eq!(
        syn_from(&mut table, sprayer, 3, 0, &mut evicted),
        Err(InsertError::HostHalfOpenLimit)
    );
    // A completed handshake is no longer half-open: the host may try again.
    complete_handshake(&mut table, first, 0);
    syn_from(&mut table, sprayer, 3, 0, &mut evicted).unwrap();
    assert_eq!(table.host_usage(sprayer.into()), (3, 2));
    // UDP counts toward the flow limit only.
    let udp = |n: u16| key(sprayer, n, [192, 0, 2, 53], 53, protocol::UDP);
    table
        .insert(udp(1), udp(1).reversed(), 0, None, 0, no_eviction)
        .unwrap();
    assert_eq!(
        table.insert(udp(2), udp(2).reversed(), 0, None, 0, no_eviction),
        Err(InsertError::HostFlowLimit)
    );
    let stats = table.stats();
    assert_eq!(
        (stats.refused_host_flows, stats.refused_host_half_open),
        (1, 1)
    );
    assert_eq!(table.hosts_at_limit(), (1, 1, 1));
    // Another host is not affected.
    let other = key([10, 0, 0, 10], 1, [192, 0, 2, 53], 53, protocol::UDP);
    table
        .insert(other, other.reversed(), 0, None, 0, no_eviction)
        .unwrap();
    // Removing a flow gives the host its room back; expiry does too.
    table.remove(first);
    table
        .insert(udp(2), udp(2).reversed(), 0, None, 0, no_eviction)
        .unwrap();
    table.expire(1000 * SECOND, 1000, |_| {});
    assert!(table.is_empty());
    assert_eq!(table.host_usage(sprayer.into()), (0, 0));
    assert_eq!(table.hosts_at_limit(), (0, 0, 0));
    assert_eq!(table.half_open_len(), 0);
}

#[test]
fn evicted_and_expired_flows_are_handed_over_exactly_once() {
    let mut table = FlowTable::new(config(8), 0_u32);
    let mut handed_over = Vec::new();
    for n in 0..20_u16 {
        table
            .insert(
                udp_key(n),
                udp_key(n).reversed(),
                u32::from(n),
                None,
                u64::from(n),
                |data| handed_over.push(data),
            )
            .unwrap();
    }
    assert_eq!(handed_over.len(), 12);
    let later = 1000 * SECOND;
    for _ in 0..10 {
        table.expire(later, 3, |data| handed_over.push(data));
    }
    assert!(table.is_empty());
    handed_over.sort_unstable();
    assert_eq!(handed_over, (0..20).collect::<Vec<u32>>());
    let stats = table.stats();
    assert_eq!(stats.evictions + stats.expirations, 20);
}

// --- Sweep --------------------------------------------------------------------------------

#[test]
fn sweep_respects_its_budget_and_wraps_around() {
    let capacity = 8;
    let mut table = FlowTable::new(config(capacity), 0_u32);
    for n in 0..capacity as u16 {
        add_udp(&mut table, n, 0, false);
    }
    let later = 1000 * SECOND;
    let mut expired = Vec::new();
    table.expire(later, 3, |data| expired.push(data));
    assert_eq!(expired, [0, 1, 2]);
    table.expire(later, 3, |data| expired.push(data));
    assert_eq!(expired, [0, 1, 2, 3, 4, 5]);
    // Slots 6 and 7, then slot 0 again, which is free.
    table.expire(later, 3, |data| expired.push(data));
    assert_eq!(expired, [0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(table.is_empty());

    let mut slot_of = HashMap::new();
    for n in 10..10 + capacity as u16 {
        let id = add_udp(&mut table, n, later, false);
        slot_of.insert(id.as_u32(), u32::from(n));
    }
    expired.clear();
    let even_later = 2 * later;
    table.expire(even_later, 1, |data| expired.push(data));
    assert_eq!(expired, [slot_of[&1]]);
    // A budget beyond the capacity visits each slot once.
    table.expire(even_later, 1000, |data| expired.push(data));
    assert_eq!(expired.len(), capacity);
    assert_eq!(table.stats().expirations, 2 * capacity as u64);
}

#[test]
fn sweep_leaves_live_flows_alone() {
    let mut table = FlowTable::new(config(8), 0_u32);
    let id = add_udp(&mut table, 1, 0, true);
    table.expire(distinct_timeouts().udp_ns - 1, 1000, no_eviction);
    assert_eq!(table.lookup(&udp_key(1)), Some((id, Original)));
}

// --- IPv6 flows ---------------------------------------------------------------------------

fn key6(src: u16, src_port: u16, dst_port: u16, protocol: u8) -> FlowKey6 {
    FlowKey6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, src),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 80),
        src_port,
        dst_port,
        protocol,
    }
}

#[test]
fn an_ipv6_connection_is_tracked_like_an_ipv4_one() {
    let mut table: FlowTable<u32, FlowKey6> = FlowTable::new(config(16), 0);
    let client = key6(1, 40000, 80, protocol::TCP);
    let id = table
        .insert(
            client,
            client.reversed(),
            7,
            Some(&segment(SYN, CLIENT_ISN, 0)),
            0,
            no_eviction,
        )
        .unwrap();
    assert_eq!(table.lookup(&client.reversed()), Some((id, Reply)));
    assert_eq!(table.tcp_state(id), Some(TcpState::SynSent));
    assert_eq!(table.half_open_len(), 1);
    let syn_ack = segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1);
    assert_eq!(table.track(id, Reply, Some(&syn_ack), 1), Track::Ok);
    let ack = segment(ACK, CLIENT_ISN + 1, SERVER_ISN + 1);
    assert_eq!(table.track(id, Original, Some(&ack), 2), Track::Ok);
    assert_eq!(table.tcp_state(id), Some(TcpState::Established));
    assert_eq!(table.half_open_len(), 0);
    // Out of the window: refused, as for IPv4.
    let wild = segment(ACK, CLIENT_ISN.wrapping_add(1 << 30), SERVER_ISN + 1);
    assert!(matches!(
        table.track(id, Original, Some(&wild), 3),
        Track::Invalid(_)
    ));
    // A key differing only in the address's low bits is another flow.
    assert_eq!(table.lookup(&key6(2, 40000, 80, protocol::TCP)), None);
    assert_eq!(table.remove(id), 7);
    assert!(table.is_empty());
}

#[test]
fn an_ipv6_echo_flow_lives_as_long_as_an_icmp_one() {
    let mut table: FlowTable<u32, FlowKey6> = FlowTable::new(config(4), 0);
    let echo = key6(1, 77, 77, 58);
    let id = table
        .insert(echo, echo.reversed(), 0, None, 0, no_eviction)
        .unwrap();
    assert_eq!(table.deadline_ns(id), distinct_timeouts().icmp_ns);
}

#[test]
fn ipv6_openers_have_their_own_limits() {
    let config = ConntrackConfig {
        host_flows: 2,
        ..config(16)
    };
    let mut table: FlowTable<u32, FlowKey6> = FlowTable::new(config, 0);
    let udp = |src: u16, port: u16| key6(src, port, 53, protocol::UDP);
    for port in 0..2 {
        let key = udp(1, port);
        table
            .insert(key, key.reversed(), 0, None, 0, no_eviction)
            .unwrap();
    }
    let third = udp(1, 2);
    assert_eq!(
        table.insert(third, third.reversed(), 0, None, 0, no_eviction),
        Err(InsertError::HostFlowLimit)
    );
    // Another address in the same /64 is the same host (a privacy address, say) ...
    let same_host = udp(2, 2);
    assert_eq!(
        table.insert(same_host, same_host.reversed(), 0, None, 0, no_eviction),
        Err(InsertError::HostFlowLimit)
    );
    // ... another /64 is another host.
    let other = FlowKey6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 11, 0, 0, 0, 0, 1),
        ..udp(1, 2)
    };
    assert!(table
        .insert(other, other.reversed(), 0, None, 0, no_eviction)
        .is_ok());
    assert_eq!(table.hosts_at_limit().1, 1);
    // With host_prefix6 = 128 every address is a host of its own.
    let mut per_address: FlowTable<u32, FlowKey6> = FlowTable::new(
        ConntrackConfig {
            host_prefix6: 128,
            ..config
        },
        0,
    );
    for src in 1..=3 {
        let key = udp(src, 1);
        assert!(per_address
            .insert(key, key.reversed(), 0, None, 0, no_eviction)
            .is_ok());
    }
}

proptest! {
    /// One host spreading its flows over 1,000 addresses of its /64 (SLAAC, privacy, made
    /// up) is held to one host's limit, and a host of another /64 still opens flows.
    #[test]
    fn an_ipv6_host_over_many_addresses_is_held_to_one_hosts_limit(
        interface_ids in prop::collection::vec(any::<u64>(), 1000),
        other_id in any::<u64>(),
    ) {
        let limit = 8;
        let mut table: FlowTable<u32, FlowKey6> = FlowTable::new(
            ConntrackConfig {
                host_flows: limit,
                ..config(2048)
            },
            0,
        );
        let in_prefix = |prefix: u128, id: u64| Ipv6Addr::from((prefix << 64) | u128::from(id));
        let sprayer_prefix = 0x2001_0db8_000a_0000_u128;
        let mut admitted = 0;
        for (port, &id) in (1000u16..).zip(&interface_ids) {
            let key = FlowKey6 {
                src: in_prefix(sprayer_prefix, id),
                ..key6(0, port, 53, protocol::UDP)
            };
            if table.insert(key, key.reversed(), 0, None, 0, no_eviction).is_ok() {
                admitted += 1;
            }
        }
        prop_assert_eq!(admitted, limit);
        let other = FlowKey6 {
            src: in_prefix(0x2001_0db8_000b_0000, other_id),
            ..key6(0, 40000, 53, protocol::UDP)
        };
        prop_assert!(table.insert(other, other.reversed(), 0, None, 0, no_eviction).is_ok());
    }
}

// --- Properties ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Insert { original: u8, reply: u8 },
    Remove(u8),
    Answer(u8),
}

const KEY_SPACE: u8 = 24;

fn model_key(n: u8) -> FlowKey {
    key([10, 0, 0, n], 1000, [192, 0, 2, 1], 53, protocol::UDP)
}

fn model_key6(n: u8) -> FlowKey6 {
    FlowKey6 {
        src: Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, u16::from(n)),
        dst: Ipv6Addr::new(0x2001, 0xdb8, 0xffff, 0, 0, 0, 0, 1),
        src_port: 1000,
        dst_port: 53,
        protocol: protocol::UDP,
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..KEY_SPACE, 0..KEY_SPACE)
            .prop_map(|(original, reply)| Op::Insert { original, reply }),
        1 => (0..KEY_SPACE).prop_map(Op::Remove),
        1 => (0..KEY_SPACE).prop_map(Op::Answer),
    ]
}

fn all_in_one_place(_: u64) -> u64 {
    0
}

fn all_at_the_end(_: u64) -> u64 {
    u64::MAX
}

fn four_homes(hash: u64) -> u64 {
    hash | 0x3fff_ffff_ffff_ffff
}

fn hasher(choice: u8) -> FlowHasher {
    match choice {
        0 => FlowHasher::distorted(all_in_one_place),
        1 => FlowHasher::distorted(all_at_the_end),
        2 => FlowHasher::distorted(four_homes),
        _ => FlowHasher::random(),
    }
}

/// A flow as the model knows it.
#[derive(Clone, Copy, Debug)]
struct ModelFlow<K> {
    original: K,
    reply: K,
    answered: bool,
    assured: bool,
}

#[derive(Clone, Debug)]
enum SegmentOp {
    Track(bool, TcpSegment),
    Sweep(u64),
}

fn any_segment() -> impl Strategy<Value = TcpSegment> {
    let flags = prop_oneof![
        any::<u8>(),
        Just(SYN),
        Just(SYN | ACK),
        Just(ACK),
        Just(ACK | PSH),
        Just(FIN | ACK),
        Just(RST),
        Just(RST | ACK),
    ];
    let near = |base: u32| {
        prop_oneof![
            any::<u32>(),
            (0..200_000_u32).prop_map(move |delta| base.wrapping_add(delta)),
        ]
    };
    let number = prop_oneof![near(CLIENT_ISN), near(SERVER_ISN)];
    (
        flags,
        number.clone(),
        number,
        any::<u16>(),
        prop_oneof![0..2000_u32, any::<u32>()],
        proptest::option::of(any::<u8>()),
    )
        .prop_map(
            |(flags, seq, ack, window, payload_len, window_scale)| TcpSegment {
                flags,
                seq,
                ack,
                window,
                payload_len,
                window_scale,
            },
        )
}

fn segment_op() -> impl Strategy<Value = SegmentOp> {
    prop_oneof![
        8 => (any::<bool>(), any_segment()).prop_map(|(reply, segment)| SegmentOp::Track(reply, segment)),
        1 => (0..2000_u64).prop_map(SegmentOp::Sweep),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn table_agrees_with_a_hashmap_model(
        capacity in 1..=8_usize,
        hasher_choice in 0..4_u8,
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        agrees_with_model(capacity, hasher_choice, ops, model_key)?;
    }

    /// The same for a table of IPv6 flows: the table is one code for both families.
    #[test]
    fn an_ipv6_table_agrees_with_a_hashmap_model(
        capacity in 1..=8_usize,
        hasher_choice in 0..4_u8,
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        agrees_with_model(capacity, hasher_choice, ops, model_key6)?;
    }

    #[test]
    fn random_segments_never_panic_and_rejections_change_nothing(
        loose in any::<bool>(),
        first in any_segment(),
        ops in proptest::collection::vec(segment_op(), 0..64),
    ) {
        let config = ConntrackConfig { tcp_loose: loose, ..config(2) };
        let mut table = FlowTable::new(config, 0_u32);
        let mut now_ns = 0;
        let Ok(id) = table.insert(
            client_key(), client_key().reversed(), 1, Some(&first), now_ns, no_eviction,
        ) else {
            return Ok(());
        };
        for op in ops {
            now_ns += 1;
            match op {
                SegmentOp::Track(reply, segment) => {
                    let direction = if reply { Reply } else { Original };
                    let state = table.tcp_state(id);
                    let deadline_ns = table.deadline_ns(id);
                    if let Track::Invalid(_) = table.track(id, direction, Some(&segment), now_ns) {
                        prop_assert_eq!(table.tcp_state(id), state);
                        prop_assert_eq!(table.deadline_ns(id), deadline_ns);
                    }
                }
                SegmentOp::Sweep(elapsed_s) => {
                    table.expire(now_ns + elapsed_s * SECOND, 2, |_| {});
                    if table.is_empty() {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// The model test of [`table_agrees_with_a_hashmap_model`], for keys of either family.
fn agrees_with_model<K: TableKey + std::hash::Hash>(
    capacity: usize,
    hasher_choice: u8,
    ops: Vec<Op>,
    model_key: fn(u8) -> K,
) -> Result<(), TestCaseError> {
    let mut table: FlowTable<u32, K> =
        FlowTable::with_hasher(config(capacity), u32::MAX, hasher(hasher_choice));
    let mut flows: HashMap<u32, ModelFlow<K>> = HashMap::new();
    let mut by_key: HashMap<K, (u32, Direction)> = HashMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        let data = step as u32;
        match op {
            Op::Insert { original, reply } => {
                let (original, reply) = (model_key(original), model_key(reply));
                let mut evicted = Vec::new();
                let result =
                    table.insert(original, reply, data, None, 0, |data| evicted.push(data));
                if original == reply {
                    prop_assert_eq!(result, Err(InsertError::Ambiguous));
                } else if by_key.contains_key(&original) || by_key.contains_key(&reply) {
                    prop_assert_eq!(result, Err(InsertError::Exists));
                } else if flows.len() < capacity {
                    prop_assert!(result.is_ok());
                    prop_assert_eq!(evicted.len(), 0);
                } else {
                    match result {
                        Ok(_) => {
                            prop_assert_eq!(evicted.len(), 1);
                            let victim = flows.remove(&evicted[0]);
                            prop_assert!(victim.is_some());
                            let victim = victim.unwrap();
                            prop_assert!(!victim.assured);
                            // Unreplied flows go before replied ones.
                            prop_assert!(
                                !victim.answered || flows.values().all(|flow| flow.answered)
                            );
                            by_key.remove(&victim.original);
                            by_key.remove(&victim.reply);
                        }
                        Err(error) => {
                            // The scan covers tables this small whole.
                            prop_assert_eq!(error, InsertError::Full);
                            prop_assert_eq!(evicted.len(), 0);
                            prop_assert!(flows.values().all(|flow| flow.assured));
                        }
                    }
                }
                if result.is_ok() {
                    flows.insert(
                        data,
                        ModelFlow {
                            original,
                            reply,
                            answered: false,
                            assured: false,
                        },
                    );
                    by_key.insert(original, (data, Original));
                    by_key.insert(reply, (data, Reply));
                }
            }
            Op::Remove(n) => {
                let key = model_key(n);
                match by_key.get(&key).copied() {
                    Some((data, _)) => {
                        let (id, _) = table.lookup(&key).unwrap();
                        prop_assert_eq!(table.remove(id), data);
                        let flow = flows.remove(&data).unwrap();
                        by_key.remove(&flow.original);
                        by_key.remove(&flow.reply);
                    }
                    None => prop_assert_eq!(table.lookup(&key), None),
                }
            }
            Op::Answer(n) => {
                if let Some((id, _)) = table.lookup(&model_key(n)) {
                    prop_assert_eq!(table.track(id, Reply, None, 0), Track::Ok);
                    let data = *table.data(id);
                    let flow = flows.get_mut(&data).unwrap();
                    // Traffic after the first reply assures it.
                    flow.assured |= flow.answered;
                    flow.answered = true;
                    prop_assert_eq!(table.is_assured(id), flow.assured);
                }
            }
        }
        prop_assert_eq!(table.len(), flows.len());
        for n in 0..KEY_SPACE {
            let key = model_key(n);
            let found = table
                .lookup(&key)
                .map(|(id, direction)| (*table.data(id), direction));
            prop_assert_eq!(found, by_key.get(&key).copied());
        }
    }
    Ok(())
}

// --- Export and import (state snapshots) --------------------------------------------------

fn exported(table: &FlowTable<u32>, now_ns: u64) -> Vec<ExportedFlow<u32>> {
    let mut flows = Vec::new();
    table.export(now_ns, |flow| flows.push(flow));
    flows
}

#[test]
fn an_imported_connection_carries_on_where_it_was() {
    let mut conn = Conn::established();
    conn.expect_ok(Original, ACK | PSH, 1000);
    conn.expect_ok(Reply, ACK, 0);
    assert!(conn.table.is_assured(conn.id));
    let remaining = conn.table.deadline_ns(conn.id) - conn.now_ns;
    let flows = exported(&conn.table, conn.now_ns);
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].remaining_ns, remaining);
    assert_eq!(flows[0].tcp.map(|t| t.state()), Some(TcpState::Established));

    // A new process: a new table whose clock starts at zero.
    let mut table = FlowTable::new(config(16), 0);
    let id = table.import(&flows[0], 0).unwrap();
    assert_eq!(table.lookup(&client_key()), Some((id, Original)));
    assert_eq!(table.lookup(&client_key().reversed()), Some((id, Reply)));
    assert_eq!(table.deadline_ns(id), remaining);
    assert_eq!(*table.data(id), 7);
    assert!(table.is_assured(id) && table.is_established(id));
    assert_eq!(table.host_usage(client_key().src), (1, 0));
    assert_eq!(table.half_open_len(), 0);
    let before = Conn {
        table,
        id,
        now_ns: 0,
        next_seq: conn.next_seq,
    };
    let mut conn = before;
    // The windows came along: in-window data passes, data far beyond is refused.
    conn.expect_ok(Original, ACK | PSH, 500);
    conn.expect_ok(Reply, ACK | PSH, 200);
    let far = segment(
        ACK,
        conn.next_seq[0].wrapping_add(10_000_000),
        conn.next_seq[1],
    );
    conn.expect_invalid(Original, far, InvalidReason::OutOfWindow);
    conn.expect_ok(Original, ACK | FIN, 0);
    assert_eq!(conn.state(), TcpState::FinWait);
    let data = conn.table.remove(conn.id);
    assert_eq!(data, 7);
    assert_eq!(conn.table.host_usage(client_key().src), (0, 0));
    assert_eq!(conn.table.lookup(&client_key()), None);
}

#[test]
fn import_keeps_the_half_open_list_and_its_order() {
    let mut table = FlowTable::new(config(16), 0);
    let keys: Vec<FlowKey> = (0..4)
        .map(|n| key([10, 0, 0, 1], 2000 + n, [192, 0, 2, 80], 80, protocol::TCP))
        .collect();
    for (n, key) in keys.iter().enumerate() {
        let syn = segment(SYN, CLIENT_ISN, 0);
        table
            .insert(
                *key,
                key.reversed(),
                n as u32,
                Some(&syn),
                n as u64,
                no_eviction,
            )
            .unwrap();
    }
    // The oldest half-open flow completes its handshake; the others stay half-open.
    let (id, _) = table.lookup(&keys[0]).unwrap();
    let synack = segment(SYN | ACK, SERVER_ISN, CLIENT_ISN + 1);
    assert_eq!(table.track(id, Reply, Some(&synack), 10), Track::Ok);
    let ack = segment(ACK, CLIENT_ISN + 1, SERVER_ISN + 1);
    assert_eq!(table.track(id, Original, Some(&ack), 11), Track::Ok);
    let flows = exported(&table, 12);
    let order: Vec<u32> = flows.iter().map(|flow| flow.data).collect();
    assert_eq!(
        order,
        [0, 1, 2, 3],
        "established first, then half-open oldest first"
    );
    assert_eq!(
        flows.iter().map(|f| f.is_half_open()).collect::<Vec<_>>(),
        [false, true, true, true]
    );

    let mut restored = FlowTable::new(
        ConntrackConfig {
            half_open: 2,
            ..config(16)
        },
        u32::MAX,
    );
    let results: Vec<_> = flows.iter().map(|f| restored.import(f, 0)).collect();
    assert!(results[..3].iter().all(Result::is_ok));
    assert_eq!(results[3], Err(ImportError::HalfOpenLimit));
    assert_eq!(restored.half_open_len(), 2);
    assert_eq!(restored.host_usage(keys[0].src), (3, 2));
    // A new SYN beyond the limit replaces the oldest half-open flow: keys[1]'s.
    let syn = segment(SYN, CLIENT_ISN, 0);
    let new_key = key([10, 0, 0, 1], 3000, [192, 0, 2, 80], 80, protocol::TCP);
    let mut evicted = Vec::new();
    restored
        .insert(new_key, new_key.reversed(), 9, Some(&syn), 1, |d| {
            evicted.push(d)
        })
        .unwrap();
    assert_eq!(evicted, [1]);
}

#[test]
fn import_refuses_what_insert_would_and_changes_nothing() {
    let mut source = FlowTable::new(config(16), 0);
    for n in 0..3 {
        source
            .insert(udp_key(n), udp_key(n).reversed(), 1, None, 0, no_eviction)
            .unwrap();
    }
    let flows = exported(&source, SECOND);
    assert!(flows.iter().all(|f| f.remaining_ns == 49 * SECOND));

    let mut small = FlowTable::new(config(2), 0);
    assert!(small.import(&flows[0], 0).is_ok());
    assert_eq!(small.import(&flows[0], 0), Err(ImportError::Exists));
    assert!(small.import(&flows[1], 0).is_ok());
    assert_eq!(small.import(&flows[2], 0), Err(ImportError::Full));
    assert_eq!(small.len(), 2);

    let mut limited = FlowTable::new(
        ConntrackConfig {
            host_flows: 1,
            ..config(16)
        },
        0,
    );
    assert!(limited.import(&flows[0], 0).is_ok());
    assert_eq!(
        limited.import(&flows[1], 0),
        Err(ImportError::HostFlowLimit)
    );
    assert_eq!(limited.host_usage(udp_key(0).src), (1, 0));

    // A TCP flow without its tracker, or with the same tuple both ways, is not a flow.
    let mut malformed = flows[0];
    malformed.original.protocol = protocol::TCP;
    malformed.reply.protocol = protocol::TCP;
    assert_eq!(small.import(&malformed, 0), Err(ImportError::Malformed));
    let mut same = flows[0];
    same.reply = same.original;
    assert_eq!(small.import(&same, 0), Err(ImportError::Malformed));
}

#[test]
fn export_leaves_out_expired_flows_and_import_caps_time_left() {
    let mut source = FlowTable::new(config(16), 0);
    source
        .insert(udp_key(0), udp_key(0).reversed(), 1, None, 0, no_eviction)
        .unwrap();
    source
        .insert(
            udp_key(1),
            udp_key(1).reversed(),
            2,
            None,
            40 * SECOND,
            no_eviction,
        )
        .unwrap();
    // udp_key(0) is past its deadline but not swept yet.
    let flows = exported(&source, 60 * SECOND);
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].data, 2);
    assert_eq!(flows[0].remaining_ns, 30 * SECOND);
    // A config with a shorter UDP timeout caps what the restored flow keeps.
    let mut short = config(16);
    short.timeouts.udp_ns = 10 * SECOND;
    let mut table = FlowTable::new(short, 0);
    let id = table.import(&flows[0], 5 * SECOND).unwrap();
    assert_eq!(table.deadline_ns(id), 15 * SECOND);
}

/// A probe's vacancy opens the flow without a second lookup only while nothing was inserted
/// since: a flow inserted for the same key in between is found, not indexed twice.
#[test]
fn a_vacancy_is_believed_only_until_the_next_insert() {
    let mut table = FlowTable::new(config(64), 0_u32);
    let probe = |table: &FlowTable<u32>, key: FlowKey| table.probe(&key, table.hash(&key));
    let Probe::Vacant(first) = probe(&table, udp_key(1)) else {
        panic!("an empty table holds nothing");
    };
    let id = table
        .insert_vacant(first, udp_key(1).reversed(), 7, None, 0, |_| {})
        .unwrap();
    assert_eq!(probe(&table, udp_key(1)), Probe::Found(id, Original));
    assert_eq!(
        probe(&table, udp_key(1).reversed()),
        Probe::Found(id, Reply)
    );

    // Probed vacant, then the same key inserted another way: the stale vacancy is checked.
    let Probe::Vacant(stale) = probe(&table, udp_key(2)) else {
        panic!("udp_key(2) is not in the table yet");
    };
    table
        .insert(udp_key(2), udp_key(2).reversed(), 8, None, 0, |_| {})
        .unwrap();
    let again = table.insert_vacant(
        stale,
        key([10, 9, 9, 9], 9, [1, 1, 1, 1], 9, protocol::UDP),
        9,
        None,
        0,
        |_| {},
    );
    assert_eq!(again, Err(InsertError::Exists));
    assert_eq!(table.len(), 2);

    // Removals cannot make a key present: a vacancy from before one still holds.
    let Probe::Vacant(before_removal) = probe(&table, udp_key(3)) else {
        panic!("udp_key(3) is not in the table yet");
    };
    table.remove(id);
    let id3 = table
        .insert_vacant(before_removal, udp_key(3).reversed(), 10, None, 0, |_| {})
        .unwrap();
    assert_eq!(probe(&table, udp_key(3)), Probe::Found(id3, Original));
    assert_eq!(table.len(), 2);
}

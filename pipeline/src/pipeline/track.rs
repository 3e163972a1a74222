//! The stateful stage's one body, both families': what happens to a packet once its flow
//! key is known and the table probed for it. As Linux's `nf_conntrack_in`, one tracker
//! serves IPv4 and IPv6, and each family supplies, through [`TrackedPacket`], only what is
//! its own: its key and flow data, its checksum, how a new flow is admitted (NAT44, port
//! forwards and the SYN proxy for IPv4; pinholes for IPv6), how a reload's recheck goes,
//! and what an established packet still needs (translation, DNS filtering).
//!
//! The steps, in order:
//! 1. a bare SYN on a closed TCP flow's tuple opens a new connection (RFC 9293 3.6.1): the
//!    old flow ends and the new one is admitted by today's rules;
//! 2. a segment that changes state is checksum-checked before it may, since a forged or
//!    corrupted one must not close or open a flow;
//! 3. the tracker validates the packet and restarts the flow's timer, after IPv4's SYN
//!    proxy has moved a proxied flow's segment into the server's sequence space;
//! 4. a flow admitted under older rules is rechecked after a reload;
//! 5. a flow whose content is blocked drops, and a client's payload of one being judged goes
//!    to the content inspector;
//! 6. the family's last step for an established packet.
//!
//! A key the table does not hold is checksum-checked (a bare SYN's is left to the family's
//! `new_flow`: IPv4's SYN proxy answers one it keeps nothing of) and becomes a new flow.

use crate::features::content::{ContentInspector, ContentPolicy, Device};
use crate::flow::Direction;
use crate::pipeline::stage::Stage;
use crate::state::conntrack::{FlowHash, FlowId, FlowTable, Probe, TableKey, TcpSegment};
use crate::state::conntrack::{Track, Vacancy};
use crate::state::flow_data::{ContentState, TrackedFlow};
use crate::verdict::{DropReason, Verdict};
use crate::wire::TcpPacket;

/// One packet in a family's stateful stage, as [`track`] sees it: the family's stage, the
/// packet and what the family parsed of it.
pub(crate) trait TrackedPacket {
    type Key: TableKey;
    type Data: Copy + TrackedFlow;
    /// What the family's stage may ask the pipeline for (`Stage`'s `R`).
    type Request;

    fn flows(&mut self) -> &mut FlowTable<Self::Data, Self::Key>;
    /// The packet's upper-layer checksum is right (or need not be checked).
    fn checksum_ok(&self) -> bool;
    /// Ends flow `id` before its time, as an expiry would.
    fn end_flow(&mut self, id: FlowId);
    /// Admits the packet's new flow, or not; a bare SYN's checksum is this step's to check.
    fn new_flow(
        &mut self,
        vacancy: Vacancy<Self::Key>,
        segment: Option<TcpSegment>,
    ) -> Stage<Self::Request>;
    /// The segment the tracker is to see for a packet of flow `id`: as received, unless a
    /// family's proxy shifts it (IPv4's SYN proxy), or answers it itself (`Err`).
    fn segment_to_track(
        &mut self,
        _id: FlowId,
        _direction: Direction,
        segment: Option<TcpSegment>,
    ) -> Result<Option<TcpSegment>, Stage<Self::Request>> {
        Ok(segment)
    }
    /// After a reload (or an uplink's change), checks flow `id` once against the new
    /// config: `Some`, the flow ended, and what becomes of this packet of its `direction`.
    fn recheck(
        &mut self,
        id: FlowId,
        direction: Direction,
        segment: Option<TcpSegment>,
    ) -> Option<Stage<Self::Request>>;
    /// Feeds the client's payload of flow `id`, whose content is being judged, to the
    /// inspector: `Some` is what to do in place of forwarding (a reset, when it blocks).
    fn inspect(&mut self, id: FlowId, segment: Option<TcpSegment>) -> Option<Stage<Self::Request>>;
    /// The family's last step for a packet of established flow `id`.
    fn established(&mut self, id: FlowId, direction: Direction) -> Stage<Self::Request>;
}

/// Tracks `packet`, whose key hashes to `hash` and which the table answered `found` for;
/// `segment` is its TCP segment, if it is one. See the module doc for the steps.
#[inline]
pub(crate) fn track<P: TrackedPacket>(
    packet: &mut P,
    hash: FlowHash,
    found: Probe<P::Key>,
    segment: Option<TcpSegment>,
    now_ns: u64,
) -> Stage<P::Request> {
    let checksum_dropped = || Stage::Done(Verdict::Drop(DropReason::L4Checksum));
    match found {
        Probe::Found(id, direction)
            if segment.as_ref().is_some_and(TcpSegment::is_bare_syn)
                && packet.flows().is_closed(id) =>
        {
            if !packet.checksum_ok() {
                return checksum_dropped();
            }
            // The tuple this packet carries, which the flow held until it ends here.
            let key = packet.flows().key(id, direction);
            packet.end_flow(id);
            let Probe::Vacant(vacancy) = packet.flows().probe(&key, hash) else {
                // Not reached: the flow that held the key has just ended.
                return Stage::Done(Verdict::Drop(DropReason::ConntrackInvalid));
            };
            packet.new_flow(vacancy, segment)
        }
        Probe::Found(id, direction) => {
            if segment.as_ref().is_some_and(TcpSegment::changes_state) && !packet.checksum_ok() {
                return checksum_dropped();
            }
            let segment = match packet.segment_to_track(id, direction, segment) {
                Ok(segment) => segment,
                Err(stage) => return stage,
            };
            if let Track::Invalid(_) = packet
                .flows()
                .track(id, direction, segment.as_ref(), now_ns)
            {
                return Stage::Done(Verdict::Drop(DropReason::ConntrackInvalid));
            }
            if let Some(stage) = packet.recheck(id, direction, segment) {
                return stage;
            }
            match packet.flows().data(id).content() {
                ContentState::Allowed => {}
                ContentState::Blocked => {
                    return Stage::Done(Verdict::Drop(DropReason::ContentBlocked))
                }
                ContentState::Inspecting if direction == Direction::Original => {
                    if let Some(stage) = packet.inspect(id, segment) {
                        return stage;
                    }
                }
                ContentState::Inspecting => {}
            }
            packet.established(id, direction)
        }
        Probe::Vacant(_)
            if !segment.as_ref().is_some_and(TcpSegment::is_bare_syn) && !packet.checksum_ok() =>
        {
            checksum_dropped()
        }
        Probe::Vacant(vacancy) => packet.new_flow(vacancy, segment),
    }
}

/// Feeds a client's TCP segment (`tcp`: the segment, header on) of flow `flow`, whose
/// content verdict is `state`, to the inspector: true if that blocks the flow (`state` then
/// says so), false while it is pending or allowed.
pub(crate) fn inspect_segment(
    inspector: &mut ContentInspector,
    policy: &ContentPolicy,
    (flow, state): (FlowId, &mut ContentState),
    device: Device,
    segment: &TcpSegment,
    tcp: &[u8],
) -> bool {
    let Ok(tcp) = TcpPacket::new_checked(tcp) else {
        return false;
    };
    let server_port = tcp.dst_port();
    inspector.judge_tcp(
        policy,
        flow.as_u32(),
        state,
        device,
        server_port,
        segment.seq,
        tcp.payload(),
    )
}

//! Connection tracking for one worker: which flows exist, what state each is in, and whether
//! a packet fits its flow. There is one [`FlowTable`] per worker core, never shared, so it
//! needs no locks; everything it will hold is allocated by [`FlowTable::new`], so no call
//! allocates, and time comes in as `now_ns`.
//!
//! # Use
//!
//! [`FlowTable::lookup`] finds a packet's flow by its tuple, whichever direction it travels.
//! A miss that policy admits becomes [`FlowTable::insert`] (with the reply tuple given
//! explicitly, since NAT makes it differ from the reversed original); a hit goes through
//! [`FlowTable::track`], whose [`Track::Invalid`] the caller drops and counts. The worker
//! calls [`FlowTable::expire`] with a small budget every poll loop. Each flow carries the
//! caller's `D` (its NAT translation, its verdict), handed back exactly once when the flow
//! goes: by `remove`, to `expire`'s callback, or to `insert`'s when evicted.
//!
//! Expiry is lazy: a flow past its deadline stays findable, and a packet refreshes it, until
//! the sweep reaches it. A flow thus lives its state's timeout plus at most one sweep round.
//!
//! # Layout and memory
//!
//! Flows live in an arena of `capacity` slots with a free list; a [`FlowId`] is a slot
//! number. An open-addressing index (linear probing, backward-shift deletion, see
//! `index.rs`) holds both tuples of every flow in `4 * capacity` slots rounded up to a power
//! of two, so it is at most half full. The hash is keyed per table from
//! [`std::collections::hash_map::RandomState`], so remote hosts cannot aim flows at one
//! probe chain. Memory per flow is [`BYTES_PER_FLOW`] (140 bytes on 64-bit targets: a
//! 96-byte arena slot, four 8-byte index slots, a 4-byte free-list entry and 8 bytes of
//! half-open list links) plus
//! `size_of::<D>()`; exact when `capacity` is a power of two, otherwise the index rounds up
//! to at most twice its size (up to 32 more bytes per flow).
//!
//! # TCP
//!
//! A TCP flow must start with a bare SYN. With [`ConntrackConfig::tcp_loose`] a plain ACK
//! also starts one (picking up connections that existed before a restart); such a flow is
//! [`TcpState::Established`] at once and, since its window scaling is unknown, exempt from
//! window checks. Every segment's flags must be a combination endpoints send, and must fit the
//! state; its sequence and acknowledgement numbers must fall in the windows tracked per
//! direction as in van Rooij's "Real Stateful TCP Packet Filtering" (see `tcp.rs`).
//! Simultaneous open and close are followed; a retransmitted SYN or SYN+ACK is accepted
//! without changing anything; a SYN from the original direction in TIME_WAIT or after a
//! reset starts a new connection in the same flow, keeping its data.
//!
//! # Bounded state
//!
//! Every flow is charged to the host that opened it (its original source address), in a
//! fixed per-table count ([`crate::state::hosts::HostCounts`]): a host holds at most
//! [`ConntrackConfig::host_flows`] flows and [`ConntrackConfig::host_half_open`] half-open
//! TCP flows; beyond, the insert fails ([`InsertError::HostFlowLimit`],
//! [`InsertError::HostHalfOpenLimit`]). A host that finds no room in the count (only under an
//! attack from very many addresses) is admitted uncounted. *Half-open* is a TCP flow in
//! SYN_SENT or SYN_RECEIVED, or picked up mid-stream and not yet answered. The whole table
//! holds at most [`ConntrackConfig::half_open`] of them: a new one beyond replaces the flow
//! that has been half-open longest (a list through the arena finds it in O(1), 8 bytes per
//! flow). So a SYN flood, even from random sources, churns only its own half-open flows, and
//! a legitimate connection attempt lives as long as `half_open` flood SYNs take to arrive.
//!
//! # Early drop
//!
//! A flow is *assured*, as with Linux's ASSURED bit, once it has seen two-way traffic: a TCP
//! flow past its handshake (or, picked up mid-stream, once the reply direction has spoken);
//! a flow of another protocol at its first packet after the first reply (a DNS query and its
//! answer are not assured; a stream is). An insert into a full table looks at the next
//! [`EVICTION_SCAN`] (16) arena slots from an eviction cursor, and at further windows of 16 up
//! to [`EVICTION_SCAN_MAX`] while it has found nothing; the cursor moves past what it looked
//! at. It evicts, in this order: an expired flow; an unreplied or half-open flow; a flow that
//! saw a reply but is not assured, or a TCP flow in TIME_WAIT or CLOSED; within each, the
//! least recently used (the last packet's time is the deadline less the state's timeout).
//! Assured flows are never evicted while alive, so no flood can push out working
//! connections. If the windows hold no candidate the insert fails with [`InsertError::Full`]
//! (counted in `refused_full`); the next insert looks further on. A TCP flow picked up
//! mid-stream keeps the transitory timeout until it is answered, not the established one.

mod half_open;
mod index;
mod key;
mod table;
mod tcp;
mod timeouts;

#[cfg(test)]
mod reorder_tests;
#[cfg(test)]
mod tests;

use std::mem::size_of;

pub use key::TableKey;
pub use table::export::{ExportedFlow, ImportError, TcpTracking};
pub use table::{
    FlowHash, FlowTable, Probe, Vacancy, EVICTION_SCAN, EVICTION_SCAN_MAX, MAX_CAPACITY,
};
pub use tcp::{TcpSegment, TcpState};
pub use timeouts::Timeouts;

pub use crate::verdict::InvalidReason;

/// Memory per flow, excluding the caller's data (add `size_of::<D>()`): the arena slot, the
/// index slots for its two tuples at half load, and its free-list entry.
pub const BYTES_PER_FLOW: usize = size_of::<table::Flow>()
    + index::SLOTS_PER_FLOW * size_of::<index::IndexSlot>()
    + size_of::<u32>()
    + size_of::<[u32; 2]>();

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConntrackConfig {
    /// Flows the table holds, all allocated up front (at least 1, at most [`MAX_CAPACITY`]).
    pub capacity: usize,
    pub timeouts: Timeouts,
    /// Accept a TCP flow's first packet mid-connection (a plain ACK), as after a gateway
    /// restart. Off by default: it lets any host that can send an ACK create state.
    pub tcp_loose: bool,
    /// Flows one host (the address that opened them) may hold in this table (0 is taken as 1).
    pub host_flows: u32,
    /// Half-open TCP flows one host may hold (0 is taken as 1).
    pub host_half_open: u32,
    /// Half-open TCP flows in the table, clamped to 1..=capacity.
    pub half_open: usize,
    /// Hosts the per-host counts have room for; more are admitted uncounted.
    pub hosts: usize,
    /// An IPv6 host, for `host_flows` and `host_half_open`: the source address's first this
    /// many bits (0..=128). A /64, a LAN's subnet, by default: a host there may take as many
    /// addresses as it likes (SLAAC, privacy addresses, or made up) and stays one host.
    pub host_prefix6: u8,
}

/// A few thousand flows per host: far above what a browser or a game needs, far below a
/// worker's table.
pub const DEFAULT_HOST_FLOWS: u32 = 4096;
/// Enough for a burst of connection attempts to hosts that do not answer.
pub const DEFAULT_HOST_HALF_OPEN: u32 = 1024;
pub const DEFAULT_HOSTS: usize = 16384;
/// One IPv6 host: a /64 (RFC 4291's interface identifiers are the other 64 bits).
pub const DEFAULT_HOST_PREFIX6: u8 = 64;

impl Default for ConntrackConfig {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            timeouts: Timeouts::default(),
            tcp_loose: false,
            host_flows: DEFAULT_HOST_FLOWS,
            host_half_open: DEFAULT_HOST_HALF_OPEN,
            half_open: (1 << 16) / 4,
            hosts: DEFAULT_HOSTS,
            host_prefix6: DEFAULT_HOST_PREFIX6,
        }
    }
}

/// A flow's slot in its table. Only meaningful for the table that issued it, and only until
/// the flow is removed, after which the slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowId(u32);

impl FlowId {
    /// For logs and metrics labels.
    pub fn as_u32(self) -> u32 {
        self.0
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// What became of a packet given to [`FlowTable::track`].
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Track {
    /// The packet fits its flow, whose state and timer were updated.
    Ok,
    /// The packet does not fit; the flow is unchanged and the caller should drop it.
    Invalid(InvalidReason),
    /// A TCP segment behind the window: data already acknowledged, sent again, or an
    /// acknowledgement overtaken by later ones. The flow and its timer are unchanged; the
    /// caller passes the packet on (its receiver answers with a duplicate ACK).
    Stale,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// No free slot and none to evict (see the module doc).
    Full,
    /// One of the two tuples already belongs to a flow.
    Exists,
    /// The original and reply tuples are the same (a packet from a host to itself on the same
    /// port, as in a LAND attack), so the directions could not be told apart.
    Ambiguous,
    /// The first packet cannot start a flow.
    Invalid(InvalidReason),
    /// The opening host holds [`ConntrackConfig::host_flows`] flows already.
    HostFlowLimit,
    /// The opening host holds [`ConntrackConfig::host_half_open`] half-open flows already.
    HostHalfOpenLimit,
    /// The table holds [`ConntrackConfig::half_open`] half-open flows and none could make
    /// room (not expected: the oldest always can).
    HalfOpenLimit,
}

impl InsertError {
    /// Why a new flow was not inserted, as the drop it counts under (for either family's
    /// table).
    pub fn drop_reason(self) -> crate::verdict::DropReason {
        use crate::verdict::DropReason;
        match self {
            InsertError::Full => DropReason::ConntrackFull,
            InsertError::HostFlowLimit => DropReason::HostFlowLimit,
            InsertError::HostHalfOpenLimit => DropReason::HostHalfOpenLimit,
            InsertError::HalfOpenLimit => DropReason::HalfOpenLimit,
            InsertError::Exists | InsertError::Ambiguous | InsertError::Invalid(_) => {
                DropReason::ConntrackInvalid
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConntrackStats {
    /// Flows created.
    pub setups: u64,
    /// Flows removed past their deadline, by the sweep or by an insert reclaiming the slot.
    pub expirations: u64,
    /// Flows removed before their deadline to make room.
    pub evictions: u64,
    /// Flows removed by [`FlowTable::remove`].
    pub removals: u64,
    pub refused_full: u64,
    pub refused_exists: u64,
    /// Inserts refused by [`InsertError::Ambiguous`].
    pub refused_ambiguous: u64,
    /// Inserts refused by [`InsertError::HostFlowLimit`].
    pub refused_host_flows: u64,
    /// Inserts refused by [`InsertError::HostHalfOpenLimit`].
    pub refused_host_half_open: u64,
    /// Inserts refused by [`InsertError::HalfOpenLimit`].
    pub refused_half_open: u64,
    /// Half-open flows evicted to keep the table within [`ConntrackConfig::half_open`] (also
    /// counted in `evictions`).
    pub half_open_replaced: u64,
    /// Flows admitted without a per-host count, their host finding no room in it.
    pub untracked_hosts: u64,
    /// TCP segments `track` passed as [`Track::Stale`].
    pub stale_segments: u64,
    /// Packets rejected by `track` or `insert`, indexed by [`InvalidReason::index`].
    pub invalid_by_reason: [u64; InvalidReason::COUNT],
}

impl ConntrackStats {
    pub fn invalid(&self, reason: InvalidReason) -> u64 {
        self.invalid_by_reason[reason.index()]
    }

    pub fn invalid_total(&self) -> u64 {
        self.invalid_by_reason.iter().sum()
    }

    fn count_invalid(&mut self, reason: InvalidReason) {
        self.invalid_by_reason[reason.index()] += 1;
    }
}

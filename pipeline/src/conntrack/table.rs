//! The flow arena, its index, and the policies that create, refresh and remove flows.

use std::fmt;
use std::net::Ipv4Addr;

use super::index::{FlowHasher, FlowIndex, FlowRef};
use super::tcp::{TcpConn, TcpSegment, TcpState};
use super::{ConntrackConfig, ConntrackStats, FlowId, InsertError, InvalidReason, Track};
use crate::flow::{Direction, FlowKey};
use crate::wire::ipv4::protocol;

/// Keeps arena slots (and so [`FlowId`]s) below 2^31, as the index's flow references need,
/// with room to spare: this many flows would take tens of GiB.
pub const MAX_CAPACITY: usize = 1 << 28;
/// How many flows a full table's insert looks at for one to evict: enough that under a SYN
/// flood (every slot a half-open flow) a victim is always found, few enough to stay cheap.
pub const EVICTION_SCAN: usize = 16;

#[derive(Clone, Copy)]
pub(super) struct Flow {
    original: FlowKey,
    reply: FlowKey,
    deadline_ns: u64,
    tracker: Tracker,
}

#[derive(Clone, Copy)]
enum Tracker {
    Free,
    Tcp(TcpConn),
    /// UDP, ICMP queries and other protocols: all there is to know is whether the other end
    /// has answered.
    Stateless {
        seen_reply: bool,
    },
}

const UNSPECIFIED_KEY: FlowKey = FlowKey {
    src: Ipv4Addr::UNSPECIFIED,
    dst: Ipv4Addr::UNSPECIFIED,
    src_port: 0,
    dst_port: 0,
    protocol: 0,
};
const FREE_FLOW: Flow = Flow {
    original: UNSPECIFIED_KEY,
    reply: UNSPECIFIED_KEY,
    deadline_ns: 0,
    tracker: Tracker::Free,
};

impl Flow {
    fn key(&self, direction: Direction) -> FlowKey {
        match direction {
            Direction::Original => self.original,
            Direction::Reply => self.reply,
        }
    }

    fn is_free(&self) -> bool {
        matches!(self.tracker, Tracker::Free)
    }

    fn is_established(&self) -> bool {
        match self.tracker {
            Tracker::Free => false,
            Tracker::Tcp(conn) => conn.state() == TcpState::Established,
            Tracker::Stateless { seen_reply } => seen_reply,
        }
    }
}

/// One worker's connection tracker: every flow it will ever hold is allocated by
/// [`FlowTable::new`]. `D` is the caller's per-flow data (a NAT translation, a firewall
/// verdict), stored verbatim and handed back whenever a flow goes.
pub struct FlowTable<D: Copy> {
    config: ConntrackConfig,
    flows: Vec<Flow>,
    /// Beside `flows` rather than inside, so that `D`'s alignment does not pad every flow.
    data: Vec<D>,
    /// What a free slot's data is reset to.
    fill: D,
    free_flows: Vec<u32>,
    index: FlowIndex,
    sweep_cursor: usize,
    eviction_cursor: usize,
    stats: ConntrackStats,
}

impl<D: Copy> fmt::Debug for FlowTable<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowTable")
            .field("config", &self.config)
            .field("len", &self.len())
            .field("index_slots", &self.index.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<D: Copy> FlowTable<D> {
    /// `config.capacity` is clamped to 1..=[`MAX_CAPACITY`]; [`capacity`](Self::capacity)
    /// says what was allocated.
    pub fn new(config: ConntrackConfig, fill: D) -> Self {
        Self::with_hasher(config, fill, FlowHasher::random())
    }

    pub(super) fn with_hasher(mut config: ConntrackConfig, fill: D, hasher: FlowHasher) -> Self {
        config.capacity = config.capacity.clamp(1, MAX_CAPACITY);
        let capacity = config.capacity;
        Self {
            flows: vec![FREE_FLOW; capacity],
            data: vec![fill; capacity],
            fill,
            // Popped from the end, so flows are handed out from slot 0 upwards.
            free_flows: (0..capacity as u32).rev().collect(),
            index: FlowIndex::new(capacity, hasher),
            sweep_cursor: 0,
            eviction_cursor: 0,
            stats: ConntrackStats::default(),
            config,
        }
    }

    /// The address of the index slot a lookup of `key` reads first. Batching callers
    /// prefetch it for every packet of a burst before looking any up, so the cache misses of
    /// a burst overlap instead of queueing.
    pub fn index_address(&self, key: &FlowKey) -> *const u8 {
        self.index.home_slot(key) as *const _ as *const u8
    }

    /// The address of the flow a lookup of `key` will most likely compare against, read from
    /// the index slot (so prefetch `index_address` first).
    pub fn flow_address(&self, key: &FlowKey) -> Option<*const u8> {
        let entry = self.index.likely_flow(key)?;
        self.flows
            .get(entry.flow())
            .map(|flow| flow as *const Flow as *const u8)
    }

    /// Finds a flow by either of its tuples, saying which one matched.
    pub fn lookup(&self, key: &FlowKey) -> Option<(FlowId, Direction)> {
        let flows = &self.flows;
        self.index
            .find(key, |entry| {
                flows[entry.flow()].key(entry.direction()) == *key
            })
            .map(|entry| (FlowId(entry.flow() as u32), entry.direction()))
    }

    /// Creates a flow. `reply` is given explicitly because NAT makes it differ from
    /// `original.reversed()`. A TCP flow must start with a bare SYN (or, with `tcp_loose`,
    /// a plain ACK), and needs `tcp`; other protocols ignore it.
    ///
    /// A full table first makes room as the module doc's eviction policy says, handing the
    /// evicted flow's data to `on_evicted` (the NAT releases its ports).
    pub fn insert(
        &mut self,
        original: FlowKey,
        reply: FlowKey,
        data: D,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
        mut on_evicted: impl FnMut(D),
    ) -> Result<FlowId, InsertError> {
        if original == reply {
            return Err(InsertError::Ambiguous);
        }
        let tracker = if original.protocol == protocol::TCP {
            let opened = match tcp {
                Some(segment) => TcpConn::open(segment, self.config.tcp_loose),
                None => Err(InvalidReason::NoTcpSegment),
            };
            match opened {
                Ok(conn) => Tracker::Tcp(conn),
                Err(reason) => {
                    self.stats.count_invalid(reason);
                    return Err(InsertError::Invalid(reason));
                }
            }
        } else {
            Tracker::Stateless { seen_reply: false }
        };
        if self.lookup(&original).is_some() || self.lookup(&reply).is_some() {
            self.stats.refused_exists += 1;
            return Err(InsertError::Exists);
        }
        if self.free_flows.is_empty() && !self.evict_one(now_ns, &mut on_evicted) {
            self.stats.refused_full += 1;
            return Err(InsertError::Full);
        }
        let Some(slot) = self.free_flows.pop() else {
            self.stats.refused_full += 1;
            return Err(InsertError::Full);
        };
        let slot = slot as usize;
        let mut flow = Flow {
            original,
            reply,
            deadline_ns: 0,
            tracker,
        };
        flow.deadline_ns = now_ns.saturating_add(self.timeout(&flow));
        self.flows[slot] = flow;
        self.data[slot] = data;
        let indexed = self
            .index
            .insert(&original, FlowRef::new(slot, Direction::Original))
            && self
                .index
                .insert(&reply, FlowRef::new(slot, Direction::Reply));
        if !indexed {
            // Unreachable while the index is sized for every tuple; undone rather than kept
            // half-findable.
            self.release(slot);
            self.stats.refused_full += 1;
            return Err(InsertError::Full);
        }
        self.stats.setups += 1;
        Ok(FlowId(slot as u32))
    }

    /// Validates and applies one packet of an existing flow travelling in `direction`, and
    /// restarts the flow's timer with the timeout of the state it leaves the flow in. TCP
    /// flows need `tcp`; other protocols ignore it. Invalid packets change nothing.
    pub fn track(
        &mut self,
        id: FlowId,
        direction: Direction,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
    ) -> Track {
        let timeouts = self.config.timeouts;
        let flow = &mut self.flows[id.index()];
        let timeout = match &mut flow.tracker {
            Tracker::Free => Err(InvalidReason::NoSuchFlow),
            Tracker::Tcp(conn) => match tcp {
                Some(segment) => conn
                    .track(direction, segment)
                    .map(|()| timeouts.for_tcp(conn.state())),
                None => Err(InvalidReason::NoTcpSegment),
            },
            Tracker::Stateless { seen_reply } => {
                *seen_reply |= direction == Direction::Reply;
                Ok(timeouts.for_stateless(flow.original.protocol))
            }
        };
        match timeout {
            Ok(timeout) => {
                flow.deadline_ns = now_ns.saturating_add(timeout);
                Track::Ok
            }
            Err(reason) => {
                self.stats.count_invalid(reason);
                Track::Invalid(reason)
            }
        }
    }

    pub fn data(&self, id: FlowId) -> &D {
        &self.data[id.index()]
    }

    pub fn data_mut(&mut self, id: FlowId) -> &mut D {
        &mut self.data[id.index()]
    }

    /// The tuple packets travelling in `direction` carry.
    pub fn key(&self, id: FlowId, direction: Direction) -> FlowKey {
        self.flows[id.index()].key(direction)
    }

    /// None for flows of other protocols.
    pub fn tcp_state(&self, id: FlowId) -> Option<TcpState> {
        match self.flows[id.index()].tracker {
            Tracker::Tcp(conn) => Some(conn.state()),
            Tracker::Free | Tracker::Stateless { .. } => None,
        }
    }

    /// A TCP flow in [`TcpState::Established`], or a flow of another protocol that has seen a
    /// packet in the reply direction.
    pub fn is_established(&self, id: FlowId) -> bool {
        self.flows[id.index()].is_established()
    }

    /// When the flow's timer runs out: the first `now_ns` at which [`expire`](Self::expire)
    /// removes it.
    pub fn deadline_ns(&self, id: FlowId) -> u64 {
        self.flows[id.index()].deadline_ns
    }

    /// Returns the flow's data. The id is free for reuse afterwards; removing it again returns
    /// the table's `fill` value and changes nothing.
    pub fn remove(&mut self, id: FlowId) -> D {
        let slot = id.index();
        if self.flows[slot].is_free() {
            return self.data[slot];
        }
        self.stats.removals += 1;
        self.release(slot)
    }

    /// Visits at most `budget` arena slots, resuming where the previous call stopped, and
    /// removes the flows whose deadline is at or before `now_ns`, handing their data to
    /// `on_expired`. Calling it with a small budget every poll loop keeps the cost per call
    /// bounded however full the table is; a flow outlives its timeout by at most the time
    /// the cursor takes to come round.
    pub fn expire(&mut self, now_ns: u64, budget: usize, mut on_expired: impl FnMut(D)) {
        let capacity = self.flows.len();
        for _ in 0..budget.min(capacity) {
            let slot = self.sweep_cursor;
            self.sweep_cursor = if slot + 1 == capacity { 0 } else { slot + 1 };
            let flow = &self.flows[slot];
            if !flow.is_free() && now_ns >= flow.deadline_ns {
                self.stats.expirations += 1;
                on_expired(self.release(slot));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.flows.len() - self.free_flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.flows.len()
    }

    pub fn stats(&self) -> &ConntrackStats {
        &self.stats
    }

    pub fn config(&self) -> &ConntrackConfig {
        &self.config
    }

    fn timeout(&self, flow: &Flow) -> u64 {
        let timeouts = &self.config.timeouts;
        match flow.tracker {
            Tracker::Tcp(conn) => timeouts.for_tcp(conn.state()),
            Tracker::Free | Tracker::Stateless { .. } => {
                timeouts.for_stateless(flow.original.protocol)
            }
        }
    }

    /// The eviction policy of the module doc: among the next [`EVICTION_SCAN`] slots from
    /// the eviction cursor, the expired or not yet established flow with the earliest
    /// deadline (so an expired one whenever there is one).
    fn evict_one(&mut self, now_ns: u64, on_evicted: &mut impl FnMut(D)) -> bool {
        let capacity = self.flows.len();
        let scan = EVICTION_SCAN.min(capacity);
        let mut victim: Option<(usize, u64)> = None;
        for step in 0..scan {
            let mut slot = self.eviction_cursor + step;
            if slot >= capacity {
                slot -= capacity;
            }
            let flow = &self.flows[slot];
            let evictable =
                !flow.is_free() && (now_ns >= flow.deadline_ns || !flow.is_established());
            let earlier = match victim {
                Some((_, deadline_ns)) => flow.deadline_ns < deadline_ns,
                None => true,
            };
            if evictable && earlier {
                victim = Some((slot, flow.deadline_ns));
            }
        }
        self.eviction_cursor += scan;
        if self.eviction_cursor >= capacity {
            self.eviction_cursor -= capacity;
        }
        let Some((slot, deadline_ns)) = victim else {
            return false;
        };
        if now_ns >= deadline_ns {
            self.stats.expirations += 1;
        } else {
            self.stats.evictions += 1;
        }
        on_evicted(self.release(slot));
        true
    }

    /// Unindexes a live flow, frees its slot and returns its data.
    fn release(&mut self, slot: usize) -> D {
        let flow = self.flows[slot];
        self.index
            .remove(&flow.original, FlowRef::new(slot, Direction::Original));
        self.index
            .remove(&flow.reply, FlowRef::new(slot, Direction::Reply));
        let data = self.data[slot];
        self.flows[slot] = FREE_FLOW;
        self.data[slot] = self.fill;
        self.free_flows.push(slot as u32);
        data
    }
}

//! The flow arena, its index, and the policies that create, refresh and remove flows.

pub(super) mod export;

use std::fmt;
use std::net::Ipv4Addr;

use super::half_open::HalfOpenList;
use super::index::{FlowHasher, FlowIndex, FlowRef};
use super::key::TableKey;
use super::tcp::{TcpConn, TcpSegment, TcpState, Tracked};
use super::timeouts::Timeouts;
use super::{ConntrackConfig, ConntrackStats, FlowId, InsertError, InvalidReason, Track};
use crate::flow::{Direction, FlowKey};
use crate::state::hosts::{HostCounts, Refusal};
use crate::wire::ipv4::protocol;

/// Keeps arena slots (and so [`FlowId`]s) below 2^31, as the index's flow references need,
/// with room to spare: this many flows would take tens of GiB.
pub const MAX_CAPACITY: usize = 1 << 28;
/// How many flows a full table's insert looks at for one to evict: enough that under a SYN
/// flood (every slot a half-open flow) a victim is always found, few enough to stay cheap.
pub const EVICTION_SCAN: usize = 16;
/// While the windows of [`EVICTION_SCAN`] slots hold no candidate, the insert looks at the
/// next, up to this many slots in all: a table mostly of assured flows still finds the
/// unassured few, at a bounded cost (sequential reads of the arena).
pub const EVICTION_SCAN_MAX: usize = 4 * EVICTION_SCAN;

/// A flow key's hash as the table's index uses it ([`FlowTable::hash`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowHash(u32);

/// What a [`FlowTable::probe`] found: the flow and which of its tuples the key is, or the
/// table's word that it held none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe<K = FlowKey> {
    Found(FlowId, Direction),
    Vacant(Vacancy<K>),
}

/// A key the table held no flow for, when it was probed. [`FlowTable::insert_vacant`] takes
/// it to open a flow for the key without looking it up again, as long as nothing was inserted
/// since (removals cannot make the key present); else it looks again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vacancy<K = FlowKey> {
    key: K,
    hash: FlowHash,
    inserts: u64,
}

impl<K> Vacancy<K> {
    pub fn key(&self) -> &K {
        &self.key
    }
}

/// The line size of the x86 and Arm cores the gateway runs on.
const CACHE_LINE: usize = 64;

/// The start of every cache line `item` occupies.
#[inline]
fn cache_lines<T>(item: &T) -> impl Iterator<Item = *const u8> {
    let start = item as *const T as *const u8;
    // Only an address for a prefetch hint: nothing is read through the pointers.
    let offset = start as usize % CACHE_LINE;
    let first = start.wrapping_sub(offset);
    let lines = (offset + std::mem::size_of::<T>()).div_ceil(CACHE_LINE);
    (0..lines).map(move |line| first.wrapping_add(line * CACHE_LINE))
}

/// The per-host counters of [`FlowTable::hosts`].
const HOST_FLOWS: usize = 0;
const HOST_HALF_OPEN: usize = 1;

#[derive(Clone, Copy)]
pub(super) struct Flow<K = FlowKey> {
    original: K,
    reply: K,
    deadline_ns: u64,
    tracker: Tracker,
    /// A packet travelling in the reply direction has been accepted.
    replied: bool,
    /// Two-way traffic seen (the module doc's early drop): never evicted while alive.
    assured: bool,
    /// Counted against its opening host (`original.src`) in [`FlowTable::hosts`].
    charged: bool,
}

#[derive(Clone, Copy)]
enum Tracker {
    Free,
    Tcp(TcpConn),
    /// UDP, ICMP queries and other protocols: all there is to know is whether the other end
    /// has answered (`Flow::replied`), and whether traffic went on after that.
    Stateless,
}

impl<K: TableKey> Flow<K> {
    const FREE: Flow<K> = Flow {
        original: K::UNSPECIFIED,
        reply: K::UNSPECIFIED,
        deadline_ns: 0,
        tracker: Tracker::Free,
        replied: false,
        assured: false,
        charged: false,
    };

    fn key(&self, direction: Direction) -> K {
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
            Tracker::Stateless => self.replied,
        }
    }

    /// A TCP flow whose handshake is not complete, or picked up mid-stream and unanswered.
    fn is_half_open(&self) -> bool {
        match self.tracker {
            Tracker::Tcp(conn) => tcp_half_open(conn.state(), self.replied),
            Tracker::Free | Tracker::Stateless => false,
        }
    }

    /// Where the flow stands in the early-drop order (lower goes first), None if it must be
    /// kept: 0 expired, 1 unreplied or half-open, 2 replied but not assured, or TCP that is
    /// over (TIME_WAIT, CLOSED).
    fn eviction_rank(&self, now_ns: u64) -> Option<u8> {
        if self.is_free() {
            return None;
        }
        if now_ns >= self.deadline_ns {
            return Some(0);
        }
        if !self.replied {
            return Some(1);
        }
        match self.tracker {
            Tracker::Free => None,
            Tracker::Tcp(conn) => match conn.state() {
                TcpState::SynSent | TcpState::SynReceived => Some(1),
                TcpState::TimeWait | TcpState::Closed => Some(2),
                _ => (!self.assured).then_some(2),
            },
            Tracker::Stateless => (!self.assured).then_some(2),
        }
    }

    /// The timeout its state gives it. A TCP flow picked up mid-stream is established as far
    /// as the tracker knows, but keeps the transitory timeout until the other end answers.
    fn timeout(&self, timeouts: &Timeouts) -> u64 {
        match self.tracker {
            Tracker::Tcp(conn) => tcp_timeout(timeouts, conn.state(), self.replied),
            Tracker::Free | Tracker::Stateless => timeouts.for_stateless(self.original.protocol()),
        }
    }
}

fn tcp_half_open(state: TcpState, replied: bool) -> bool {
    !replied || matches!(state, TcpState::SynSent | TcpState::SynReceived)
}

fn tcp_timeout(timeouts: &Timeouts, state: TcpState, replied: bool) -> u64 {
    match state {
        TcpState::Established if !replied => timeouts.tcp_transitory_ns,
        state => timeouts.for_tcp(state),
    }
}

/// One worker's connection tracker: every flow it will ever hold is allocated by
/// [`FlowTable::new`]. `D` is the caller's per-flow data (a NAT translation, a firewall
/// verdict), stored verbatim and handed back whenever a flow goes. `K` is the address
/// family's tuple ([`FlowKey`], or [`crate::flow::FlowKey6`] for a table of IPv6 flows).
pub struct FlowTable<D: Copy, K: TableKey = FlowKey> {
    config: ConntrackConfig,
    flows: Vec<Flow<K>>,
    /// Beside `flows` rather than inside, so that `D`'s alignment does not pad every flow.
    data: Vec<D>,
    /// What a free slot's data is reset to.
    fill: D,
    free_flows: Vec<u32>,
    index: FlowIndex,
    sweep_cursor: usize,
    eviction_cursor: usize,
    /// Per opening host: flows, half-open flows.
    hosts: HostCounts<2>,
    /// The half-open flows, oldest first.
    half_open: HalfOpenList,
    stats: ConntrackStats,
}

impl<D: Copy, K: TableKey> fmt::Debug for FlowTable<D, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlowTable")
            .field("config", &self.config)
            .field("len", &self.len())
            .field("index_slots", &self.index.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<D: Copy, K: TableKey> FlowTable<D, K> {
    /// `config.capacity` is clamped to 1..=[`MAX_CAPACITY`]; [`capacity`](Self::capacity)
    /// says what was allocated.
    pub fn new(config: ConntrackConfig, fill: D) -> Self {
        Self::with_hasher(config, fill, FlowHasher::random())
    }

    pub(super) fn with_hasher(mut config: ConntrackConfig, fill: D, hasher: FlowHasher) -> Self {
        config.capacity = config.capacity.clamp(1, MAX_CAPACITY);
        config.half_open = config.half_open.clamp(1, config.capacity);
        let capacity = config.capacity;
        Self {
            flows: vec![Flow::FREE; capacity],
            data: vec![fill; capacity],
            fill,
            // Popped from the end, so flows are handed out from slot 0 upwards.
            free_flows: (0..capacity as u32).rev().collect(),
            index: FlowIndex::new(capacity, hasher),
            sweep_cursor: 0,
            eviction_cursor: 0,
            hosts: HostCounts::new(config.hosts, [config.host_flows, config.host_half_open]),
            half_open: HalfOpenList::new(capacity),
            stats: ConntrackStats::default(),
            config,
        }
    }

    /// What a lookup of `key` probes by, computed once: a burst hashes each packet in one
    /// pass, prefetches with it, and looks up with it ([`lookup_hashed`](Self::lookup_hashed)).
    #[inline]
    pub fn hash(&self, key: &K) -> FlowHash {
        FlowHash(self.index.tag(key))
    }

    /// The address of the index slot a lookup reads first. Batching callers prefetch it
    /// for every packet of a burst before looking any up, so the cache misses of a burst
    /// overlap instead of queueing.
    #[inline]
    pub fn index_address_hashed(&self, hash: FlowHash) -> *const u8 {
        self.index.home_slot(hash.0) as *const _ as *const u8
    }

    /// The cache lines a lookup of the key is likely to read, and its packet to update: every
    /// line of the flow's entry and of its data. The arrays are not line-aligned: 96-byte
    /// entries sit at two offsets in their lines, and unless the array starts on a 32-byte
    /// boundary every other entry spans three lines, whose middle one a prefetch of its two
    /// ends would leave to miss. Read from the index slot, so prefetch
    /// [`index_address_hashed`](Self::index_address_hashed) first.
    #[inline]
    pub fn flow_lines_hashed(&self, hash: FlowHash) -> Option<impl Iterator<Item = *const u8>> {
        let entry = self.index.likely_flow(hash.0)?;
        self.slot_lines(entry.flow())
    }

    /// Every cache line of slot `slot`'s entry and data.
    #[inline]
    fn slot_lines(&self, slot: usize) -> Option<impl Iterator<Item = *const u8>> {
        let flow = self.flows.get(slot)?;
        let data = self.data.get(slot)?;
        Some(cache_lines(flow).chain(cache_lines(data)))
    }

    /// The cache lines an [`insert`](Self::insert) of a TCP flow whose first tuple is
    /// `original` is likely to touch beyond the index: its opener's host counts, and the slot
    /// the flow would
    /// take: every line of its entry and its data, and its links in the half-open list. With
    /// the half-open table full that slot is the oldest half-open flow's, which makes room and
    /// is reused at once; else the next free one. For a burst to prefetch where a packet is
    /// likely to open a flow (a bare SYN), so that these misses overlap the burst's other
    /// packets instead of stalling the insert.
    #[inline]
    pub fn insert_lines(&self, original: &K) -> impl Iterator<Item = *const u8> + '_ {
        let slot = self.insert_slot();
        std::iter::once(
            self.hosts
                .home_address(self.index.opener(original, self.config.host_prefix6)),
        )
        .chain(
            slot.and_then(|slot| self.slot_lines(slot))
                .into_iter()
                .flatten(),
        )
        .chain(slot.and_then(|slot| self.half_open.links_address(slot)))
    }

    /// With the half-open table full, what making room for the next TCP insert touches: the
    /// oldest half-open flow's two index slots, its opener's host counts, and the links of
    /// the next oldest, which becomes the list's head (all read from the oldest's entry and
    /// links, so prefetch [`eviction_ahead_lines`](Self::eviction_ahead_lines) a burst
    /// before). None else.
    #[inline]
    pub fn eviction_lines(&self) -> [Option<*const u8>; 4] {
        let Some(oldest) = self.half_open_victim() else {
            return [None; 4];
        };
        let Some(flow) = self.flows.get(oldest) else {
            return [None; 4];
        };
        let index_slot = |key: &K| Some(self.index_address_hashed(self.hash(key)));
        [
            index_slot(&flow.original),
            index_slot(&flow.reply),
            Some(
                self.hosts
                    .home_address(self.index.opener(&flow.original, self.config.host_prefix6)),
            ),
            self.half_open
                .newer(oldest)
                .and_then(|next| self.half_open.links_address(next)),
        ]
    }

    /// With the half-open table full, what [`eviction_lines`](Self::eviction_lines) and the
    /// insert after it read first, for a burst to prefetch for the next one: every line of
    /// the two oldest half-open flows' entries and their links (a flood's burst may hold two
    /// SYNs). Under a flood every burst prefetches these, so the burst that evicts reads its
    /// victim from the cache instead of waiting on it; while nothing is evicted the same
    /// lines stay cached. Nothing when the half-open table has room.
    #[inline]
    pub fn eviction_ahead_lines(&self) -> impl Iterator<Item = *const u8> + '_ {
        let oldest = self.half_open_victim();
        let next = oldest.and_then(|oldest| self.half_open.newer(oldest));
        [oldest, next].into_iter().flatten().flat_map(move |slot| {
            self.slot_lines(slot)
                .into_iter()
                .flatten()
                .chain(self.half_open.links_address(slot))
        })
    }

    /// The half-open flow the next TCP insert would evict, if the half-open table is full.
    fn half_open_victim(&self) -> Option<usize> {
        self.half_open_full()
            .then(|| self.half_open.oldest())
            .flatten()
    }

    /// Where `id`'s links in the half-open list are, and the oldest half-open flow's: what
    /// tests hold [`insert_lines`](Self::insert_lines) and
    /// [`eviction_lines`](Self::eviction_lines) to.
    #[cfg(test)]
    pub(super) fn half_open_links_addresses(&self, id: FlowId) -> [Option<*const u8>; 2] {
        [
            self.half_open.links_address(id.index()),
            self.half_open
                .oldest()
                .and_then(|slot| self.half_open.links_address(slot)),
        ]
    }

    /// The slot the next TCP [`insert`](Self::insert) would fill, if it got that far.
    fn insert_slot(&self) -> Option<usize> {
        if self.half_open_full() {
            self.half_open.oldest()
        } else {
            self.free_flows.last().map(|&slot| slot as usize)
        }
    }

    /// Whether a new half-open flow must first make room by evicting the oldest.
    pub fn half_open_full(&self) -> bool {
        self.half_open.len() >= self.config.half_open
    }

    /// Where the table's large arrays are (start, bytes): the index, the flows and their
    /// data, for the caller to ask the OS for huge pages (the pipeline makes no system calls).
    pub fn memory_regions(&self) -> [(*const u8, usize); 3] {
        fn region<T>(items: &[T]) -> (*const u8, usize) {
            (items.as_ptr() as *const u8, std::mem::size_of_val(items))
        }
        [
            self.index.memory_region(),
            region(&self.flows),
            region(&self.data),
        ]
    }

    /// Finds a flow by either of its tuples, saying which one matched.
    pub fn lookup(&self, key: &K) -> Option<(FlowId, Direction)> {
        self.lookup_hashed(key, self.hash(key))
    }

    /// [`lookup`](Self::lookup) with `hash` from [`hash`](Self::hash) of the same key.
    #[inline]
    pub fn lookup_hashed(&self, key: &K, hash: FlowHash) -> Option<(FlowId, Direction)> {
        let flows = &self.flows;
        self.index
            .find(hash.0, |entry| {
                flows[entry.flow()].key(entry.direction()) == *key
            })
            .map(|entry| (FlowId(entry.flow() as u32), entry.direction()))
    }

    /// [`lookup_hashed`](Self::lookup_hashed), keeping a miss as a [`Vacancy`] for
    /// [`insert_vacant`](Self::insert_vacant).
    #[inline]
    pub fn probe(&self, key: &K, hash: FlowHash) -> Probe<K> {
        match self.lookup_hashed(key, hash) {
            Some((id, direction)) => Probe::Found(id, direction),
            None => Probe::Vacant(Vacancy {
                key: *key,
                hash,
                inserts: self.index.inserts(),
            }),
        }
    }

    /// [`insert`](Self::insert) for the key of a probe that missed: the flow's first tuple
    /// is not looked up again unless a flow was inserted since, nor hashed again.
    pub fn insert_vacant(
        &mut self,
        vacancy: Vacancy<K>,
        reply: K,
        data: D,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
        on_evicted: impl FnMut(D),
    ) -> Result<FlowId, InsertError> {
        debug_assert_eq!(
            vacancy.hash,
            self.hash(&vacancy.key),
            "a vacancy of another table"
        );
        let still_vacant = vacancy.inserts == self.index.inserts();
        let original = (vacancy.key, vacancy.hash, still_vacant);
        self.insert_keyed(original, reply, data, tcp, now_ns, on_evicted)
    }

    /// Creates a flow. `reply` is given explicitly because NAT makes it differ from
    /// `original.reversed()`. A TCP flow must start with a bare SYN (or, with `tcp_loose`,
    /// a plain ACK), and needs `tcp`; other protocols ignore it.
    ///
    /// The opening host's limits and the table's half-open limit apply first (see the module
    /// doc). A full table then makes room by early drop, handing the evicted flow's data to
    /// `on_evicted` (the NAT releases its ports).
    pub fn insert(
        &mut self,
        original: K,
        reply: K,
        data: D,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
        on_evicted: impl FnMut(D),
    ) -> Result<FlowId, InsertError> {
        let original = (original, self.hash(&original), false);
        self.insert_keyed(original, reply, data, tcp, now_ns, on_evicted)
    }

    /// [`insert`](Self::insert) of `original` with its hash, and whether it is known to be
    /// absent.
    fn insert_keyed(
        &mut self,
        (original, original_hash, known_vacant): (K, FlowHash, bool),
        reply: K,
        data: D,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
        mut on_evicted: impl FnMut(D),
    ) -> Result<FlowId, InsertError> {
        if original == reply {
            self.stats.refused_ambiguous += 1;
            return Err(InsertError::Ambiguous);
        }
        let tracker = if original.protocol() == protocol::TCP {
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
            Tracker::Stateless
        };
        let reply_hash = self.hash(&reply);
        if (!known_vacant && self.lookup_hashed(&original, original_hash).is_some())
            || self.lookup_hashed(&reply, reply_hash).is_some()
        {
            self.stats.refused_exists += 1;
            return Err(InsertError::Exists);
        }
        // Every TCP flow starts half-open.
        let half_open = matches!(tracker, Tracker::Tcp(_));
        let charge = [1, u32::from(half_open)];
        let opener = self.index.opener(&original, self.config.host_prefix6);
        let checked = match self.hosts.check(opener, charge) {
            Ok(checked) => Some(checked),
            Err(Refusal::Untracked) => None,
            Err(Refusal::AtLimit { counter }) => {
                return Err(if counter == HOST_FLOWS {
                    self.stats.refused_host_flows += 1;
                    InsertError::HostFlowLimit
                } else {
                    self.stats.refused_host_half_open += 1;
                    InsertError::HostHalfOpenLimit
                });
            }
        };
        if half_open && self.half_open_full() {
            // The oldest half-open flow makes room, wherever it is.
            let Some(oldest) = self.half_open.oldest() else {
                self.stats.refused_half_open += 1;
                return Err(InsertError::HalfOpenLimit);
            };
            if now_ns >= self.flows[oldest].deadline_ns {
                self.stats.expirations += 1;
            } else {
                self.stats.evictions += 1;
            }
            self.stats.half_open_replaced += 1;
            on_evicted(self.release(oldest));
        }
        if self.free_flows.is_empty() && !self.evict(now_ns, &mut on_evicted) {
            self.stats.refused_full += 1;
            return Err(InsertError::Full);
        }
        let Some(slot) = self.free_flows.pop() else {
            self.stats.refused_full += 1;
            return Err(InsertError::Full);
        };
        let slot = slot as usize;
        // Evictions only lowered what the host holds, so only a full host count refuses here.
        let charged = match checked {
            Some(checked) => self.hosts.charge_checked(checked, opener, charge),
            // Evictions may have made room.
            None => self.hosts.charge(opener, charge),
        };
        let charged = match charged {
            Ok(()) => true,
            Err(_) => {
                self.stats.untracked_hosts += 1;
                false
            }
        };
        let mut flow = Flow {
            original,
            reply,
            deadline_ns: 0,
            tracker,
            replied: false,
            assured: false,
            charged,
        };
        flow.deadline_ns = now_ns.saturating_add(flow.timeout(&self.config.timeouts));
        self.flows[slot] = flow;
        if half_open {
            self.half_open.push(slot);
        }
        self.data[slot] = data;
        let indexed = self
            .index
            .insert_tagged(original_hash.0, FlowRef::new(slot, Direction::Original))
            && self
                .index
                .insert_tagged(reply_hash.0, FlowRef::new(slot, Direction::Reply));
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
    /// flows need `tcp`; other protocols ignore it. Invalid and stale packets change nothing.
    pub fn track(
        &mut self,
        id: FlowId,
        direction: Direction,
        tcp: Option<&TcpSegment>,
        now_ns: u64,
    ) -> Track {
        let flow = &mut self.flows[id.index()];
        let was_half_open = flow.is_half_open();
        let accepted = match &mut flow.tracker {
            Tracker::Free => Err(InvalidReason::NoSuchFlow),
            Tracker::Tcp(conn) => match tcp {
                Some(segment) => conn.track(direction, segment),
                None => Err(InvalidReason::NoTcpSegment),
            },
            Tracker::Stateless => {
                // Traffic after the first reply: a stream, not a query and its answer. No
                // TCP state and never half-open: the timer is all that is left (UDP is most
                // of the established traffic, so it skips the bookkeeping below).
                flow.assured |= flow.replied;
                flow.replied |= direction == Direction::Reply;
                let timeout = self.config.timeouts.for_stateless(flow.original.protocol());
                flow.deadline_ns = now_ns.saturating_add(timeout);
                return Track::Ok;
            }
        };
        match accepted {
            Ok(Tracked::Applied) => {}
            Ok(Tracked::Stale) => {
                self.stats.stale_segments += 1;
                return Track::Stale;
            }
            Err(reason) => {
                self.stats.count_invalid(reason);
                return Track::Invalid(reason);
            }
        }
        flow.replied |= direction == Direction::Reply;
        let timeouts = &self.config.timeouts;
        let (timeout, is_half_open) = match &flow.tracker {
            // The state once, for all three: this is the established path.
            Tracker::Tcp(conn) => {
                let state = conn.state();
                flow.assured |= flow.replied && state == TcpState::Established;
                (
                    tcp_timeout(timeouts, state, flow.replied),
                    tcp_half_open(state, flow.replied),
                )
            }
            Tracker::Free | Tracker::Stateless => (flow.timeout(timeouts), false),
        };
        flow.deadline_ns = now_ns.saturating_add(timeout);
        if is_half_open != was_half_open {
            let (host, charged) = (
                self.index.opener(&flow.original, self.config.host_prefix6),
                flow.charged,
            );
            let change = [0, 1];
            if is_half_open {
                // A closed connection opened again: counted, never refused.
                self.half_open.push(id.index());
                if charged {
                    self.hosts.force(host, change);
                }
            } else {
                self.half_open.remove(id.index());
                if charged {
                    self.hosts.credit(host, change);
                }
            }
        }
        Track::Ok
    }

    pub fn data(&self, id: FlowId) -> &D {
        &self.data[id.index()]
    }

    pub fn data_mut(&mut self, id: FlowId) -> &mut D {
        &mut self.data[id.index()]
    }

    /// The tuple packets travelling in `direction` carry.
    pub fn key(&self, id: FlowId, direction: Direction) -> K {
        self.flows[id.index()].key(direction)
    }

    /// None for flows of other protocols.
    pub fn tcp_state(&self, id: FlowId) -> Option<TcpState> {
        match self.flows[id.index()].tracker {
            Tracker::Tcp(conn) => Some(conn.state()),
            Tracker::Free | Tracker::Stateless => None,
        }
    }

    /// A TCP flow in TIME_WAIT or closed by a reset, which a bare SYN may open again (as
    /// Linux's tracker lets it, from either direction).
    pub fn is_closed(&self, id: FlowId) -> bool {
        matches!(
            self.tcp_state(id),
            Some(TcpState::TimeWait | TcpState::Closed)
        )
    }

    /// Has seen two-way traffic, so early drop keeps it (see the module doc).
    pub fn is_assured(&self, id: FlowId) -> bool {
        self.flows[id.index()].assured
    }

    /// Half-open TCP flows in the table.
    pub fn half_open_len(&self) -> usize {
        self.half_open.len()
    }

    /// Hosts with a count, and of them how many are at their flow limit and at their
    /// half-open limit now.
    pub fn hosts_at_limit(&self) -> (usize, usize, usize) {
        (
            self.hosts.len(),
            self.hosts.at_limit(HOST_FLOWS),
            self.hosts.at_limit(HOST_HALF_OPEN),
        )
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

    /// Early drop, as the module doc orders it: from the eviction cursor, windows of
    /// [`EVICTION_SCAN`] slots until one holds a candidate or [`EVICTION_SCAN_MAX`] slots
    /// were seen; the candidate of lowest rank, least recently used within its rank, goes.
    fn evict(&mut self, now_ns: u64, on_evicted: &mut impl FnMut(D)) -> bool {
        let capacity = self.flows.len();
        let most = EVICTION_SCAN_MAX.min(capacity);
        let timeouts = &self.config.timeouts;
        // (slot, rank, the last packet's time)
        let mut victim: Option<(usize, u8, u64)> = None;
        let mut seen = 0;
        while seen < most && victim.is_none() {
            let window = (seen + EVICTION_SCAN).min(most);
            for step in seen..window {
                let mut slot = self.eviction_cursor + step;
                if slot >= capacity {
                    slot -= capacity;
                }
                let flow = &self.flows[slot];
                let Some(rank) = flow.eviction_rank(now_ns) else {
                    continue;
                };
                let last_seen = flow.deadline_ns.saturating_sub(flow.timeout(timeouts));
                let better = match victim {
                    Some((_, best_rank, best_seen)) => (rank, last_seen) < (best_rank, best_seen),
                    None => true,
                };
                if better {
                    victim = Some((slot, rank, last_seen));
                }
            }
            seen = window;
        }
        self.eviction_cursor += seen;
        if self.eviction_cursor >= capacity {
            self.eviction_cursor -= capacity;
        }
        let Some((slot, rank, _)) = victim else {
            return false;
        };
        if rank == 0 {
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
        let half_open = flow.is_half_open();
        if half_open {
            self.half_open.remove(slot);
        }
        if flow.charged {
            let opener = self.index.opener(&flow.original, self.config.host_prefix6);
            self.hosts.credit(opener, [1, u32::from(half_open)]);
        }
        self.index
            .remove(&flow.original, FlowRef::new(slot, Direction::Original));
        self.index
            .remove(&flow.reply, FlowRef::new(slot, Direction::Reply));
        let data = self.data[slot];
        self.flows[slot] = Flow::FREE;
        self.data[slot] = self.fill;
        self.free_flows.push(slot as u32);
        data
    }
}

impl<D: Copy> FlowTable<D> {
    /// The flows and half-open flows `host` has opened, as counted for its limits (zeros
    /// for a host admitted uncounted).
    pub fn host_usage(&self, host: Ipv4Addr) -> (u32, u32) {
        let [flows, half_open] = self.hosts.counts(host);
        (flows, half_open)
    }
}

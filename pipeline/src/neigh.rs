//! ARP neighbour cache. There is one per worker, so it needs no locks, and everything it will
//! ever hold is allocated by [`NeighborTable::new`], so the per-packet calls never allocate.
//!
//! # Layout
//!
//! Neighbours live in a pool of `capacity` entries; each entry owns a fixed slice of
//! `pending_per_neighbor` slots in one shared packet array, so queueing a packet is a store.
//! A separate open-addressing index of `2 * capacity` slots (linear probing, at most half full,
//! so a miss costs about two and a half probes) maps an address to its pool entry. Deletion
//! shifts the following cluster back instead of leaving tombstones, so probe chains never grow
//! with churn. The hash is multiply-shift with a multiplier chosen at random per table, so that
//! hosts on a connected subnet cannot pick addresses that all collide.
//!
//! # Policy
//!
//! * A lookup miss creates an `Incomplete` entry and asks the caller to send a request. While
//!   incomplete, a lookup asks again once the last request is `retry_ns` old, at most
//!   `max_retries` more times. Packets wait in the entry's queue (see [`NeighborTable::enqueue`]).
//! * A reply ([`NeighborTable::learn`]) makes the entry `Reachable` and releases the queue in
//!   arrival order. Replies for addresses nobody asked about are ignored unless the caller
//!   vouches for them with [`NeighborTable::learn_unsolicited`] (e.g. an ARP request aimed at us,
//!   whose sender will surely be talked to next).
//! * `reachable_ns` after the last confirmation, the entry is `Stale`: still used, because the
//!   neighbour has most likely not moved, but lookups ask for a refresh request - at once, then
//!   every `retry_ns`, at most `1 + max_retries` times in all until a reply confirms it again.
//! * [`NeighborTable::expire`] sweeps a few pool entries per call. It re-probes an incomplete
//!   entry whose last request is `retry_ns` old, and once all `1 + max_retries` requests have
//!   gone unanswered for `retry_ns` it removes the entry and hands its queued packets back as
//!   drops. It removes any resolved entry that has gone unconfirmed for `2 * reachable_ns`:
//!   either nobody used it (so nobody refreshed it) or refreshes went unanswered; both mean the
//!   mapping is no longer worth trusting.
//! * A full table refuses new neighbours with [`Lookup::TableFull`] rather than evicting: an
//!   eviction policy under address scans would just churn, while existing traffic keeps working
//!   and expiry frees room.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::net::Ipv4Addr;
use std::ops::Range;

const SECOND_NS: u64 = 1_000_000_000;
/// Keeps the index (`2 * capacity` slots) and pool indices comfortably within `u32`.
const MAX_CAPACITY: usize = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborConfig {
    /// Rounded up to a power of two (and at least 1, at most 2^24).
    pub capacity: usize,
    /// Packets held per unresolved neighbour; more are refused rather than buffered, since an
    /// unanswered neighbour would otherwise pin mbufs the NIC needs.
    pub pending_per_neighbor: usize,
    pub reachable_ns: u64,
    pub retry_ns: u64,
    pub max_retries: u32,
}

impl Default for NeighborConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            pending_per_neighbor: 4,
            reachable_ns: 300 * SECOND_NS,
            retry_ns: SECOND_NS,
            max_retries: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// `refresh` asks the caller to send a request for the neighbour while still using `mac`.
    Resolved { mac: [u8; 6], refresh: bool },
    /// The caller should queue the packet with [`NeighborTable::enqueue`].
    Pending { send_request: bool },
    /// No room for a new neighbour: the caller drops the packet and sends nothing.
    TableFull,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighborState {
    Incomplete,
    Reachable,
    Stale,
}

/// `ip` is stored next to the pool index so that probing compares keys without touching the
/// pool.
#[derive(Clone, Copy)]
struct IndexSlot {
    ip: u32,
    entry: u32,
}

const VACANT_ENTRY: u32 = u32::MAX;
const VACANT_SLOT: IndexSlot = IndexSlot {
    ip: 0,
    entry: VACANT_ENTRY,
};

#[derive(Clone, Copy)]
struct Entry {
    ip: Ipv4Addr,
    mac: [u8; 6],
    /// `None` while the pool entry is free.
    state: Option<NeighborState>,
    confirmed_ns: u64,
    last_request_ns: u64,
    /// Requests sent since the last confirmation; the first is not a retry.
    requests: u32,
    pending_len: usize,
}

const FREE_ENTRY: Entry = Entry {
    ip: Ipv4Addr::UNSPECIFIED,
    mac: [0; 6],
    state: None,
    confirmed_ns: 0,
    last_request_ns: 0,
    requests: 0,
    pending_len: 0,
};

enum Probe {
    Found {
        slot: usize,
        entry: usize,
    },
    Vacant {
        slot: usize,
    },
    /// Only reachable if the index invariant (always a vacant slot) were broken; handled like
    /// a full table so that the per-packet path has no panic.
    Exhausted,
}

pub struct NeighborTable<P> {
    config: NeighborConfig,
    index: Vec<IndexSlot>,
    hash_multiplier: u64,
    hash_shift: u32,
    entries: Vec<Entry>,
    free_entries: Vec<u32>,
    pending: Vec<Option<P>>,
    sweep_cursor: usize,
}

impl<P> fmt::Debug for NeighborTable<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NeighborTable")
            .field("config", &self.config)
            .field("len", &self.len())
            .field("sweep_cursor", &self.sweep_cursor)
            .finish_non_exhaustive()
    }
}

impl<P> NeighborTable<P> {
    pub fn new(config: NeighborConfig) -> Self {
        let hash_multiplier = RandomState::new().hash_one(0x6e65_6967_6862_6f72_u64) | 1;
        Self::with_hash_multiplier(config, hash_multiplier)
    }

    fn with_hash_multiplier(mut config: NeighborConfig, hash_multiplier: u64) -> Self {
        config.capacity = config.capacity.clamp(1, MAX_CAPACITY).next_power_of_two();
        let index_len = config.capacity * 2;
        let pending_len = config
            .capacity
            .checked_mul(config.pending_per_neighbor)
            .unwrap_or_else(|| panic!("neighbour pending queue size overflows: {config:?}"));
        Self {
            index: vec![VACANT_SLOT; index_len],
            hash_multiplier,
            hash_shift: 64 - index_len.trailing_zeros(),
            entries: vec![FREE_ENTRY; config.capacity],
            // Popped from the end, so entries are handed out from index 0 upwards.
            free_entries: (0..config.capacity as u32).rev().collect(),
            pending: std::iter::repeat_with(|| None).take(pending_len).collect(),
            sweep_cursor: 0,
            config,
        }
    }

    pub fn lookup(&mut self, ip: Ipv4Addr, now_ns: u64) -> Lookup {
        let entry = match self.probe(ip) {
            Probe::Found { entry, .. } => entry,
            Probe::Vacant { slot } => {
                let Some(entry) = self.insert(ip, slot) else {
                    return Lookup::TableFull;
                };
                let entry = &mut self.entries[entry];
                entry.state = Some(NeighborState::Incomplete);
                entry.requests = 1;
                entry.last_request_ns = now_ns;
                return Lookup::Pending { send_request: true };
            }
            Probe::Exhausted => return Lookup::TableFull,
        };

        let config = &self.config;
        let entry = &mut self.entries[entry];
        match entry.state {
            Some(NeighborState::Incomplete) | None => Lookup::Pending {
                send_request: record_request_if_due(config, entry, now_ns),
            },
            Some(NeighborState::Reachable | NeighborState::Stale) => {
                if now_ns.saturating_sub(entry.confirmed_ns) > config.reachable_ns {
                    entry.state = Some(NeighborState::Stale);
                }
                let refresh = entry.state == Some(NeighborState::Stale)
                    && record_request_if_due(config, entry, now_ns);
                Lookup::Resolved {
                    mac: entry.mac,
                    refresh,
                }
            }
        }
    }

    /// Only an incomplete neighbour takes packets: anything else means the caller did not get
    /// `Lookup::Pending` for it, and the packet is handed back to be counted as a drop.
    pub fn enqueue(&mut self, ip: Ipv4Addr, pkt: P) -> Result<(), P> {
        let Probe::Found { entry: index, .. } = self.probe(ip) else {
            return Err(pkt);
        };
        let queue = self.pending_range(index);
        let entry = &mut self.entries[index];
        if entry.state != Some(NeighborState::Incomplete) {
            return Err(pkt);
        }
        match self.pending[queue].get_mut(entry.pending_len) {
            Some(slot) => {
                *slot = Some(pkt);
                entry.pending_len += 1;
                Ok(())
            }
            None => Err(pkt),
        }
    }

    /// Accepts a mapping only for a neighbour already in the table, so that unsolicited ARP
    /// traffic cannot fill it. Returns whether the mapping was stored.
    pub fn learn(
        &mut self,
        ip: Ipv4Addr,
        mac: [u8; 6],
        now_ns: u64,
        on_released: impl FnMut(P),
    ) -> bool {
        match self.probe(ip) {
            Probe::Found { entry, .. } => {
                self.confirm(entry, mac, now_ns, on_released);
                true
            }
            Probe::Vacant { .. } | Probe::Exhausted => false,
        }
    }

    /// Like [`learn`](Self::learn), but also creates the neighbour if there is room, for
    /// senders the caller has reason to expect traffic with.
    pub fn learn_unsolicited(
        &mut self,
        ip: Ipv4Addr,
        mac: [u8; 6],
        now_ns: u64,
        on_released: impl FnMut(P),
    ) -> bool {
        let entry = match self.probe(ip) {
            Probe::Found { entry, .. } => entry,
            Probe::Vacant { slot } => match self.insert(ip, slot) {
                Some(entry) => entry,
                None => return false,
            },
            Probe::Exhausted => return false,
        };
        self.confirm(entry, mac, now_ns, on_released);
        true
    }

    /// Visits at most `budget` pool entries, resuming where the previous call stopped, so the
    /// cost per call is bounded however full the table is. Applies the module's expiry policy.
    pub fn expire(
        &mut self,
        now_ns: u64,
        budget: usize,
        mut on_dropped: impl FnMut(P),
        mut on_probe: impl FnMut(Ipv4Addr),
    ) {
        let pool_mask = self.entries.len() - 1;
        for _ in 0..budget.min(self.entries.len()) {
            let index = self.sweep_cursor;
            self.sweep_cursor = (index + 1) & pool_mask;

            let config = &self.config;
            let entry = &mut self.entries[index];
            let remove = match entry.state {
                None => false,
                Some(NeighborState::Incomplete) => {
                    // The last request gets a full `retry_ns` to be answered before giving up.
                    let unanswered =
                        now_ns.saturating_sub(entry.last_request_ns) >= config.retry_ns;
                    let exhausted = entry.requests > config.max_retries;
                    if unanswered && !exhausted && record_request_if_due(config, entry, now_ns) {
                        on_probe(entry.ip);
                    }
                    unanswered && exhausted
                }
                Some(NeighborState::Reachable | NeighborState::Stale) => {
                    let unconfirmed_ns = now_ns.saturating_sub(entry.confirmed_ns);
                    if unconfirmed_ns > config.reachable_ns {
                        entry.state = Some(NeighborState::Stale);
                    }
                    unconfirmed_ns > config.reachable_ns.saturating_mul(2)
                }
            };
            if remove {
                let ip = entry.ip;
                self.remove(ip, &mut on_dropped);
            }
        }
    }

    /// For the control plane (`ip neigh del`, link down). Queued packets go to `on_dropped`.
    pub fn remove(&mut self, ip: Ipv4Addr, on_dropped: impl FnMut(P)) -> bool {
        let Probe::Found { slot, entry } = self.probe(ip) else {
            return false;
        };
        self.release_pending(entry, on_dropped);
        self.entries[entry] = FREE_ENTRY;
        self.free_entries.push(entry as u32);
        self.shift_back_after(slot);
        true
    }

    /// A read-only view for the control plane: unlike [`lookup`](Self::lookup) it neither
    /// creates entries nor counts as a use. The state is as last observed by `lookup` or
    /// `expire`.
    pub fn get(&self, ip: Ipv4Addr) -> Option<([u8; 6], NeighborState)> {
        match self.probe(ip) {
            Probe::Found { entry, .. } => {
                let entry = &self.entries[entry];
                entry.state.map(|state| (entry.mac, state))
            }
            Probe::Vacant { .. } | Probe::Exhausted => None,
        }
    }

    /// Every neighbour as `(ip, mac, state)`, in pool order. The MAC of an incomplete
    /// neighbour is all zeroes; the state is as last observed by `lookup` or `expire`.
    pub fn iter(&self) -> impl Iterator<Item = (Ipv4Addr, [u8; 6], NeighborState)> + '_ {
        self.entries
            .iter()
            .filter_map(|entry| entry.state.map(|state| (entry.ip, entry.mac, state)))
    }

    pub fn len(&self) -> usize {
        self.entries.len() - self.free_entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configured capacity after rounding up to a power of two.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    fn home_slot(&self, ip: u32) -> usize {
        (u64::from(ip).wrapping_mul(self.hash_multiplier) >> self.hash_shift) as usize
    }

    fn probe(&self, ip: Ipv4Addr) -> Probe {
        let key = u32::from(ip);
        let mask = self.index.len() - 1;
        let mut slot = self.home_slot(key);
        for _ in 0..self.index.len() {
            let candidate = self.index[slot];
            if candidate.entry == VACANT_ENTRY {
                return Probe::Vacant { slot };
            }
            if candidate.ip == key {
                return Probe::Found {
                    slot,
                    entry: candidate.entry as usize,
                };
            }
            slot = (slot + 1) & mask;
        }
        Probe::Exhausted
    }

    /// The entry comes back free-but-claimed (`state: None`); the caller sets its state.
    fn insert(&mut self, ip: Ipv4Addr, vacant_slot: usize) -> Option<usize> {
        let entry = self.free_entries.pop()?;
        self.index[vacant_slot] = IndexSlot {
            ip: u32::from(ip),
            entry,
        };
        let entry = entry as usize;
        self.entries[entry] = Entry { ip, ..FREE_ENTRY };
        Some(entry)
    }

    /// Backward-shift deletion: walk the cluster after the hole and pull back every key whose
    /// home slot is not strictly between the hole and its current slot, so that every key stays
    /// reachable from its home without tombstones.
    fn shift_back_after(&mut self, removed_slot: usize) {
        let mask = self.index.len() - 1;
        let mut hole = removed_slot;
        let mut slot = (hole + 1) & mask;
        for _ in 0..self.index.len() {
            let candidate = self.index[slot];
            if candidate.entry == VACANT_ENTRY {
                break;
            }
            let home = self.home_slot(candidate.ip);
            let distance_from_home = slot.wrapping_sub(home) & mask;
            let distance_from_hole = slot.wrapping_sub(hole) & mask;
            if distance_from_home >= distance_from_hole {
                self.index[hole] = candidate;
                hole = slot;
            }
            slot = (slot + 1) & mask;
        }
        self.index[hole] = VACANT_SLOT;
    }

    fn confirm(&mut self, index: usize, mac: [u8; 6], now_ns: u64, on_released: impl FnMut(P)) {
        let entry = &mut self.entries[index];
        entry.mac = mac;
        entry.state = Some(NeighborState::Reachable);
        entry.confirmed_ns = now_ns;
        entry.requests = 0;
        self.release_pending(index, on_released);
    }

    fn release_pending(&mut self, index: usize, mut on_released: impl FnMut(P)) {
        let queue = self.pending_range(index);
        let entry = &mut self.entries[index];
        let queued = entry.pending_len;
        entry.pending_len = 0;
        for slot in self.pending[queue].iter_mut().take(queued) {
            if let Some(pkt) = slot.take() {
                on_released(pkt);
            }
        }
    }

    fn pending_range(&self, index: usize) -> Range<usize> {
        let start = index * self.config.pending_per_neighbor;
        start..start + self.config.pending_per_neighbor
    }
}

/// Shared by lookups and the sweep so that both count against the same request budget: the
/// first request of a round is sent at once, later ones `retry_ns` apart, `1 + max_retries` in
/// all until a reply resets the count.
fn record_request_if_due(config: &NeighborConfig, entry: &mut Entry, now_ns: u64) -> bool {
    let due = entry.requests == 0
        || (entry.requests <= config.max_retries
            && now_ns.saturating_sub(entry.last_request_ns) >= config.retry_ns);
    if due {
        entry.requests = entry.requests.saturating_add(1);
        entry.last_request_ns = now_ns;
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const RETRY: u64 = SECOND_NS;
    const REACHABLE: u64 = 300 * SECOND_NS;
    const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
    const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

    /// Deliberately neither `Copy` nor `Clone`, like the worker's mbuf owner.
    #[derive(Debug, PartialEq, Eq)]
    struct Packet(u32);

    fn ip(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, last)
    }

    fn table(capacity: usize) -> NeighborTable<Packet> {
        NeighborTable::new(NeighborConfig {
            capacity,
            ..NeighborConfig::default()
        })
    }

    fn pending(send_request: bool) -> Lookup {
        Lookup::Pending { send_request }
    }

    fn resolved(mac: [u8; 6], refresh: bool) -> Lookup {
        Lookup::Resolved { mac, refresh }
    }

    fn no_packets(pkt: Packet) {
        panic!("unexpected packet {pkt:?}");
    }

    fn no_probes(ip: Ipv4Addr) {
        panic!("unexpected probe for {ip}");
    }

    fn expire_all(table: &mut NeighborTable<Packet>, now_ns: u64) -> (Vec<Packet>, Vec<Ipv4Addr>) {
        let (mut dropped, mut probed) = (Vec::new(), Vec::new());
        let budget = table.capacity();
        table.expire(now_ns, budget, |p| dropped.push(p), |ip| probed.push(ip));
        (dropped, probed)
    }

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(table(1000).capacity(), 1024);
        assert_eq!(table(0).capacity(), 1);
        assert_eq!(table(8).capacity(), 8);
        let t = table(5);
        assert_eq!((t.capacity(), t.len(), t.is_empty()), (8, 0, true));
    }

    #[test]
    fn miss_creates_incomplete_entry_and_asks_for_request_once() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        assert_eq!(t.lookup(ip(1), RETRY - 1), pending(false));
        assert_eq!(t.get(ip(1)), Some(([0; 6], NeighborState::Incomplete)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn incomplete_lookup_retries_every_retry_ns_up_to_max_retries() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        let mut requests = 1;
        for step in 1..=10 {
            let now = step * RETRY;
            if t.lookup(ip(1), now) == pending(true) {
                requests += 1;
                assert_eq!(t.lookup(ip(1), now), pending(false));
            }
        }
        assert_eq!(requests, 1 + NeighborConfig::default().max_retries);
    }

    #[test]
    fn learn_resolves_incomplete_and_releases_fifo() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        for id in 0..4 {
            t.enqueue(ip(1), Packet(id)).unwrap();
        }
        let mut released = Vec::new();
        assert!(t.learn(ip(1), MAC_A, 10, |p| released.push(p)));
        assert_eq!(released, (0..4).map(Packet).collect::<Vec<_>>());
        assert_eq!(t.lookup(ip(1), 20), resolved(MAC_A, false));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
        // The queue is empty and reusable after a later re-resolution.
        assert!(t.learn(ip(1), MAC_B, 30, no_packets));
        assert_eq!(t.lookup(ip(1), 40), resolved(MAC_B, false));
    }

    #[test]
    fn enqueue_refuses_when_queue_full_and_returns_packet() {
        let mut t = table(8);
        t.lookup(ip(1), 0);
        for id in 0..4 {
            assert_eq!(t.enqueue(ip(1), Packet(id)), Ok(()));
        }
        assert_eq!(t.enqueue(ip(1), Packet(99)), Err(Packet(99)));
        // Another neighbour's queue is independent.
        t.lookup(ip(2), 0);
        assert_eq!(t.enqueue(ip(2), Packet(5)), Ok(()));
        let mut released = Vec::new();
        t.learn(ip(1), MAC_A, 1, |p| released.push(p));
        assert_eq!(released, (0..4).map(Packet).collect::<Vec<_>>());
    }

    #[test]
    fn enqueue_refuses_unknown_and_resolved_neighbours() {
        let mut t = table(8);
        assert_eq!(t.enqueue(ip(1), Packet(1)), Err(Packet(1)));
        t.lookup(ip(1), 0);
        t.learn(ip(1), MAC_A, 0, no_packets);
        assert_eq!(t.enqueue(ip(1), Packet(2)), Err(Packet(2)));
    }

    #[test]
    fn zero_queue_length_refuses_every_packet() {
        let mut t: NeighborTable<Packet> = NeighborTable::new(NeighborConfig {
            pending_per_neighbor: 0,
            ..NeighborConfig::default()
        });
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        assert_eq!(t.enqueue(ip(1), Packet(1)), Err(Packet(1)));
    }

    #[test]
    fn learn_ignores_unknown_neighbour_unless_unsolicited() {
        let mut t = table(8);
        assert!(!t.learn(ip(1), MAC_A, 0, no_packets));
        assert_eq!(t.len(), 0);
        assert!(t.learn_unsolicited(ip(1), MAC_A, 0, no_packets));
        assert_eq!(t.lookup(ip(1), 1), resolved(MAC_A, false));
        // Unsolicited for a known neighbour updates it like a reply.
        assert!(t.learn_unsolicited(ip(1), MAC_B, 2, no_packets));
        assert_eq!(t.lookup(ip(1), 3), resolved(MAC_B, false));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn learn_unsolicited_releases_queue_of_incomplete_neighbour() {
        let mut t = table(8);
        t.lookup(ip(1), 0);
        t.enqueue(ip(1), Packet(7)).unwrap();
        let mut released = Vec::new();
        assert!(t.learn_unsolicited(ip(1), MAC_A, 1, |p| released.push(p)));
        assert_eq!(released, vec![Packet(7)]);
    }

    #[test]
    fn reachable_becomes_stale_and_asks_for_limited_refreshes() {
        let mut t = table(8);
        t.learn_unsolicited(ip(1), MAC_A, 0, no_packets);
        assert_eq!(t.lookup(ip(1), REACHABLE), resolved(MAC_A, false));
        let stale_at = REACHABLE + 1;
        assert_eq!(t.lookup(ip(1), stale_at), resolved(MAC_A, true));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Stale)));
        assert_eq!(
            t.lookup(ip(1), stale_at + RETRY - 1),
            resolved(MAC_A, false)
        );
        let mut refreshes = 1;
        for step in 1..=10 {
            if t.lookup(ip(1), stale_at + step * RETRY) == resolved(MAC_A, true) {
                refreshes += 1;
            }
        }
        assert_eq!(refreshes, 1 + NeighborConfig::default().max_retries);

        // A reply makes it reachable again, with a fresh refresh budget.
        let confirmed_at = stale_at + 20 * RETRY;
        assert!(t.learn(ip(1), MAC_B, confirmed_at, no_packets));
        assert_eq!(t.get(ip(1)), Some((MAC_B, NeighborState::Reachable)));
        assert_eq!(t.lookup(ip(1), confirmed_at + 1), resolved(MAC_B, false));
        assert_eq!(
            t.lookup(ip(1), confirmed_at + REACHABLE + 1),
            resolved(MAC_B, true)
        );
    }

    #[test]
    fn expire_reprobes_incomplete_then_drops_its_packets_exactly_once() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        t.enqueue(ip(1), Packet(1)).unwrap();
        t.enqueue(ip(1), Packet(2)).unwrap();

        assert_eq!(expire_all(&mut t, RETRY - 1), (vec![], vec![]));
        let max_retries = NeighborConfig::default().max_retries as u64;
        for retry in 1..=max_retries {
            assert_eq!(expire_all(&mut t, retry * RETRY), (vec![], vec![ip(1)]));
            // Not due again within the same interval.
            assert_eq!(expire_all(&mut t, retry * RETRY + 1), (vec![], vec![]));
        }
        assert_eq!(t.len(), 1);

        let removal = (max_retries + 1) * RETRY;
        assert_eq!(expire_all(&mut t, removal - 1), (vec![], vec![]));
        assert_eq!(
            expire_all(&mut t, removal),
            (vec![Packet(1), Packet(2)], vec![])
        );
        assert_eq!(t.len(), 0);
        assert_eq!(t.get(ip(1)), None);
        assert_eq!(expire_all(&mut t, removal + 10 * RETRY), (vec![], vec![]));
        // A later lookup starts from scratch.
        assert_eq!(t.lookup(ip(1), removal + 11 * RETRY), pending(true));
    }

    #[test]
    fn lookup_retries_and_sweep_probes_share_one_budget() {
        let mut t = table(8);
        t.lookup(ip(1), 0);
        assert_eq!(t.lookup(ip(1), RETRY), pending(true));
        assert_eq!(expire_all(&mut t, RETRY), (vec![], vec![]));
        assert_eq!(expire_all(&mut t, 2 * RETRY), (vec![], vec![ip(1)]));
        assert_eq!(t.lookup(ip(1), 3 * RETRY), pending(true));
        assert_eq!(t.lookup(ip(1), 4 * RETRY), pending(false));
        assert_eq!(expire_all(&mut t, 4 * RETRY), (vec![], vec![]));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn expire_keeps_fresh_and_stale_resolved_then_removes_after_twice_reachable() {
        let mut t = table(8);
        t.learn_unsolicited(ip(1), MAC_A, 0, no_packets);
        assert_eq!(expire_all(&mut t, REACHABLE), (vec![], vec![]));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
        assert_eq!(expire_all(&mut t, REACHABLE + 1), (vec![], vec![]));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Stale)));
        assert_eq!(expire_all(&mut t, 2 * REACHABLE), (vec![], vec![]));
        assert_eq!(t.len(), 1);
        assert_eq!(expire_all(&mut t, 2 * REACHABLE + 1), (vec![], vec![]));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn confirmation_postpones_removal() {
        let mut t = table(8);
        t.learn_unsolicited(ip(1), MAC_A, 0, no_packets);
        t.learn(ip(1), MAC_A, 2 * REACHABLE, no_packets);
        assert_eq!(expire_all(&mut t, 2 * REACHABLE + 1), (vec![], vec![]));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
    }

    #[test]
    fn sweep_visits_budget_entries_per_call_and_wraps() {
        let mut t = table(8);
        for last in 1..=8 {
            assert_eq!(t.lookup(ip(last), 0), pending(true));
        }
        let sweep = |t: &mut NeighborTable<Packet>, now_ns| {
            let mut probed = Vec::new();
            t.expire(now_ns, 3, no_packets, |ip| probed.push(ip));
            probed
        };
        assert_eq!(sweep(&mut t, RETRY), vec![ip(1), ip(2), ip(3)]);
        assert_eq!(sweep(&mut t, RETRY), vec![ip(4), ip(5), ip(6)]);
        // Pool entries 6, 7, then back to 0, whose last probe is now a full retry old.
        assert_eq!(sweep(&mut t, 2 * RETRY), vec![ip(7), ip(8), ip(1)]);
        assert_eq!(sweep(&mut t, 2 * RETRY), vec![ip(2), ip(3), ip(4)]);
    }

    #[test]
    fn sweep_budget_larger_than_pool_visits_each_entry_once() {
        let mut t = table(2);
        t.lookup(ip(1), 0);
        let mut probed = Vec::new();
        t.expire(RETRY, 1000, no_packets, |ip| probed.push(ip));
        assert_eq!(probed, vec![ip(1)]);
    }

    #[test]
    fn zero_budget_does_nothing() {
        let mut t = table(2);
        t.lookup(ip(1), 0);
        t.expire(100 * RETRY, 0, no_packets, no_probes);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn full_table_refuses_new_neighbours_without_disturbing_old_ones() {
        let mut t = table(2);
        assert_eq!(t.lookup(ip(1), 0), pending(true));
        assert!(t.learn_unsolicited(ip(2), MAC_B, 0, no_packets));
        assert_eq!(t.lookup(ip(3), 0), Lookup::TableFull);
        assert_eq!(t.enqueue(ip(3), Packet(3)), Err(Packet(3)));
        assert!(!t.learn_unsolicited(ip(3), MAC_A, 0, no_packets));
        assert!(!t.learn(ip(3), MAC_A, 0, no_packets));
        assert_eq!(t.len(), 2);
        assert_eq!(t.lookup(ip(2), 1), resolved(MAC_B, false));
        assert_eq!(t.lookup(ip(1), 1), pending(false));

        // Room comes back once an entry expires.
        let mut dropped = 0;
        for step in 1..=10 {
            t.expire(step * RETRY, 2, |_| dropped += 1, |_| ());
        }
        assert_eq!(dropped, 0);
        assert_eq!(t.len(), 1);
        assert_eq!(t.lookup(ip(3), 11 * RETRY), pending(true));
    }

    #[test]
    fn remove_hands_back_queued_packets() {
        let mut t = table(8);
        t.lookup(ip(1), 0);
        t.enqueue(ip(1), Packet(1)).unwrap();
        let mut dropped = Vec::new();
        assert!(t.remove(ip(1), |p| dropped.push(p)));
        assert_eq!(dropped, vec![Packet(1)]);
        assert!(!t.remove(ip(1), no_packets));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn iter_reports_every_neighbour() {
        let mut t = table(8);
        t.lookup(ip(1), 0);
        t.learn_unsolicited(ip(2), MAC_B, 0, no_packets);
        let mut all: Vec<_> = t.iter().collect();
        all.sort_by_key(|(ip, ..)| *ip);
        assert_eq!(
            all,
            vec![
                (ip(1), [0; 6], NeighborState::Incomplete),
                (ip(2), MAC_B, NeighborState::Reachable),
            ]
        );
    }

    /// Every key homes to the same slot (the last one, so probing also wraps): the worst case
    /// for backward-shift deletion.
    #[test]
    fn backward_shift_keeps_colliding_keys_findable() {
        let mut t: NeighborTable<Packet> = NeighborTable::with_hash_multiplier(
            NeighborConfig {
                capacity: 8,
                ..NeighborConfig::default()
            },
            u64::MAX,
        );
        for last in 1..=8 {
            assert_eq!(t.home_slot(u32::from(ip(last))), t.index.len() - 1);
            assert!(t.learn_unsolicited(ip(last), [last; 6], 0, no_packets));
        }
        for removed in [3, 1, 8, 5] {
            assert!(t.remove(ip(removed), no_packets));
        }
        for last in 1..=8u8 {
            let expected = [2, 4, 6, 7].contains(&last);
            assert_eq!(
                t.get(ip(last)).map(|(mac, _)| mac),
                expected.then_some([last; 6])
            );
        }
        assert_eq!(t.len(), 4);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..48u8).prop_map(Op::Insert),
            (0..48u8).prop_map(Op::Remove)
        ]
    }

    fn multiplier() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0), Just(u64::MAX), any::<u64>().prop_map(|m| m | 1)]
    }

    proptest! {
        #[test]
        fn index_agrees_with_hashmap_model(
            hash_multiplier in multiplier(),
            ops in proptest::collection::vec(op(), 0..200),
        ) {
            let mut t: NeighborTable<Packet> = NeighborTable::with_hash_multiplier(
                NeighborConfig { capacity: 16, ..NeighborConfig::default() },
                hash_multiplier,
            );
            let mut model: HashMap<Ipv4Addr, [u8; 6]> = HashMap::new();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(last) => {
                        let mac = [step as u8; 6];
                        let fits = model.len() < t.capacity() || model.contains_key(&ip(last));
                        prop_assert_eq!(t.learn_unsolicited(ip(last), mac, 0, no_packets), fits);
                        if fits {
                            model.insert(ip(last), mac);
                        }
                    }
                    Op::Remove(last) => {
                        prop_assert_eq!(
                            t.remove(ip(last), no_packets),
                            model.remove(&ip(last)).is_some()
                        );
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                for last in 0..48u8 {
                    prop_assert_eq!(
                        t.get(ip(last)).map(|(mac, _)| mac),
                        model.get(&ip(last)).copied()
                    );
                }
            }
        }
    }
}

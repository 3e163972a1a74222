//! The neighbour cache: ARP's for IPv4 and Neighbor Discovery's for IPv6 (`NeighborTable<P,
//! Ipv6Addr>`), one policy for both (RFC 4861's NUD states map onto it: incomplete, reachable,
//! stale; its solicitations and advertisements onto ARP's requests and replies, see
//! [`ArpSource`]). The control thread owns it, and everything it will ever hold is allocated
//! by [`NeighborTable::new`], so the per-packet calls never allocate.
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
//! * What an ARP packet may change is decided by [`NeighborTable::learn`] from how it reached
//!   us ([`ArpSource`]). The caller has already checked that the sender is a host of the
//!   ingress interface's own subnet, so one port's hosts cannot claim another port's addresses.
//!   - A reply is an *answer* only if it is addressed to us and a request of ours for that
//!     address is outstanding: the entry is incomplete, or we sent a request (a refresh or a
//!     verification probe) less than `retry_ns` ago. Anything else is unsolicited: replies
//!     nobody asked for, gratuitous ARP, requests for other hosts and requests for us.
//!   - An answer resolves an incomplete entry (releasing its queue in arrival order) or
//!     confirms a resolved one. Unsolicited packets fill an incomplete entry too (there is no
//!     binding to protect yet), and a request for us creates an entry for an unknown sender,
//!     which will surely be talked to next; it starts `Stale` (unconfirmed), so its first use
//!     sends a unicast probe, and it is among the first to be evicted. Other unsolicited
//!     packets about unknown hosts are ignored, so they cannot fill the table.
//!   - A resolved entry's MAC never changes on an unsolicited packet. A different MAC within
//!     `locktime_ns` of the last confirmation is refused outright (Linux's `locktime`); later,
//!     it starts a verification instead: a unicast request to the MAC we have. If the old MAC
//!     answers, it stays; no other MAC can answer that probe, so any other answer is refused.
//!     If the old MAC is silent for `retry_ns`, the sweep sends a broadcast request, and its
//!     answer, with whatever MAC, is believed. If that goes unanswered too, the entry stays as
//!     it was. The lock also bounds the probes a claimant can provoke: one round per
//!     `locktime_ns` per neighbour.
//! * Refreshes of a resolved entry are unicast to the MAC we have, as Linux's probes are, so a
//!   host that sees broadcasts cannot answer them in the neighbour's place.
//! * `reachable_ns` after the last confirmation, the entry is `Stale`: still used, because the
//!   neighbour has most likely not moved, but lookups ask for a refresh request - at once, then
//!   every `retry_ns`, at most `1 + max_retries` times in all until a reply confirms it again.
//! * [`NeighborTable::expire`] sweeps a few pool entries per call. It re-probes an incomplete
//!   entry whose last request is `retry_ns` old, and once all `1 + max_retries` requests have
//!   gone unanswered for `retry_ns` it removes the entry and hands its queued packets back as
//!   drops. It removes any resolved entry that has gone unconfirmed for `2 * reachable_ns`:
//!   either nobody used it (so nobody refreshed it) or refreshes went unanswered; both mean the
//!   mapping is no longer worth trusting.
//! * Held packets are bounded twice: `pending_per_neighbor` per entry and `pending_total` over
//!   the whole table, so unresolvable next hops (an address scan of a connected subnet) can
//!   never pin more than `pending_total` mbufs, however many entries they fill.
//! * A full table evicts rather than refuses: a new neighbour replaces the least valuable of
//!   the next [`EVICTION_SCAN`] pool entries - incomplete first (its held packets go to the
//!   caller as drops), then stale, then reachable, and among equals the least recently
//!   confirmed or asked. An address scan then churns its own incomplete entries, while hosts
//!   in use keep theirs.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use crate::verdict::DropReason;

const SECOND_NS: u64 = 1_000_000_000;
/// Keeps the index (`2 * capacity` slots) and pool indices comfortably within `u32`.
const MAX_CAPACITY: usize = 1 << 24;
/// Pool entries a full table looks at to pick the one a new neighbour replaces: enough that
/// an incomplete or stale entry is almost always among them when a few percent of the table
/// are, few enough that an address scan costs the control thread a bounded amount per miss.
pub const EVICTION_SCAN: usize = 32;

/// A neighbour's address: IPv4 (ARP) or IPv6 (Neighbor Discovery).
pub trait NeighborAddr: Copy + Eq + fmt::Debug {
    const UNSPECIFIED: Self;
    /// 64 bits the index's multiply-shift hash takes, mixed under the table's random `key`
    /// where the address is longer than that (so that hosts choosing IPv6 interface
    /// identifiers cannot make them collide).
    fn hash_key(&self, key: u64) -> u64;
}

impl NeighborAddr for Ipv4Addr {
    const UNSPECIFIED: Ipv4Addr = Ipv4Addr::UNSPECIFIED;

    fn hash_key(&self, _key: u64) -> u64 {
        u64::from(u32::from(*self))
    }
}

impl NeighborAddr for Ipv6Addr {
    const UNSPECIFIED: Ipv6Addr = Ipv6Addr::UNSPECIFIED;

    fn hash_key(&self, key: u64) -> u64 {
        let bits = u128::from(*self);
        let product = u128::from((bits >> 64) as u64 ^ key) * u128::from(bits as u64 | 1);
        (product as u64) ^ ((product >> 64) as u64)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborConfig {
    /// Rounded up to a power of two (and at least 1, at most 2^24).
    pub capacity: usize,
    /// Packets held per unresolved neighbour; more are refused rather than buffered, since an
    /// unanswered neighbour would otherwise pin mbufs the NIC needs.
    pub pending_per_neighbor: usize,
    /// Packets held over all unresolved neighbours together, so that many unresolvable next
    /// hops cannot drain the mempool either.
    pub pending_total: usize,
    pub reachable_ns: u64,
    pub retry_ns: u64,
    pub max_retries: u32,
    /// How long after a confirmation an unsolicited packet claiming another MAC is refused
    /// outright, without even a verification probe (Linux's `locktime`).
    pub locktime_ns: u64,
}

impl Default for NeighborConfig {
    fn default() -> Self {
        Self {
            capacity: 1024,
            pending_per_neighbor: 4,
            pending_total: 512,
            reachable_ns: 300 * SECOND_NS,
            retry_ns: SECOND_NS,
            max_retries: 3,
            locktime_ns: SECOND_NS,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// `refresh` asks the caller to send a request for the neighbour while still using `mac`:
    /// unicast to `mac`, so that only the neighbour we know can answer it.
    Resolved { mac: [u8; 6], refresh: bool },
    /// The caller should queue the packet with [`NeighborTable::enqueue`].
    Pending { send_request: bool },
    /// No room for a new neighbour: the caller drops the packet and sends nothing. Only if the
    /// index were corrupt; a full table evicts instead.
    TableFull,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NeighborState {
    Incomplete,
    Reachable,
    Stale,
}

/// How an ARP packet (or its Neighbor Discovery counterpart) reached us: this decides what
/// its sender's binding may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpSource {
    /// A request for one of our addresses (a Neighbor Solicitation for one, with the sender's
    /// link-layer address): its sender is about to talk to us.
    RequestForUs,
    /// A reply addressed to us (our address and MAC as its target; a solicited Neighbor
    /// Advertisement to one of our addresses). It answers our request only if one is
    /// outstanding; otherwise it is as unsolicited as any other packet.
    ReplyToUs,
    /// Anything else: gratuitous ARP, requests for other hosts, replies to other hosts,
    /// unsolicited advertisements.
    Other,
}

/// Why [`NeighborTable::learn`] refused a binding; each family counts it under a drop reason
/// of its own ([`Refusal::arp_reason`], [`Refusal::ndisc_reason`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Another MAC within `locktime` of the last confirmation.
    Locked,
    /// Another MAC our probe has not confirmed (yet).
    MacChangeUnconfirmed,
}

impl Refusal {
    pub fn arp_reason(self) -> DropReason {
        match self {
            Refusal::Locked => DropReason::ArpLocked,
            Refusal::MacChangeUnconfirmed => DropReason::ArpMacChangeUnconfirmed,
        }
    }

    pub fn ndisc_reason(self) -> DropReason {
        match self {
            Refusal::Locked => DropReason::NdiscLocked,
            Refusal::MacChangeUnconfirmed => DropReason::NdiscMacChangeUnconfirmed,
        }
    }
}

/// What [`NeighborTable::learn`] did with a sender's binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Learn {
    /// A new neighbour, a resolved incomplete one, or a MAC change our probe confirmed: the
    /// workers' view must be republished.
    Changed,
    /// Our request was answered with the MAC we have: the entry is reachable again.
    Confirmed,
    /// Nothing to learn: an unknown sender that did not ask for us, or an unsolicited packet
    /// that repeats the MAC we have (which is no confirmation).
    Ignored,
    /// Refused, to be counted under the family's reason for `refusal`. `probe_old_mac`: the
    /// caller must send a unicast request for the address to this MAC, the one we have, to
    /// check whether the neighbour we know is still there.
    Refused {
        refusal: Refusal,
        probe_old_mac: Option<[u8; 6]>,
    },
}

/// A request [`NeighborTable::expire`] asks the caller to send: an ARP request, or a
/// Neighbor Solicitation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborProbe<A> {
    pub ip: A,
    /// Unicast to this MAC; `None`: broadcast (IPv6: to the solicited-node group).
    pub unicast: Option<[u8; 6]>,
}

/// IPv4's probes.
pub type ArpProbe = NeighborProbe<Ipv4Addr>;

/// Where a resolved entry's check of a claimed MAC change stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verify {
    None,
    /// A unicast request went to the MAC we have at `last_request_ns`.
    OldMac,
    /// The old MAC stayed silent; a broadcast request went out at `last_request_ns`, and its
    /// answer is believed whatever its MAC.
    Broadcast,
}

/// `ip` is stored next to the pool index so that probing compares keys without touching the
/// pool.
#[derive(Clone, Copy)]
struct IndexSlot<A> {
    ip: A,
    entry: u32,
}

const VACANT_ENTRY: u32 = u32::MAX;

impl<A: NeighborAddr> IndexSlot<A> {
    const VACANT: IndexSlot<A> = IndexSlot {
        ip: A::UNSPECIFIED,
        entry: VACANT_ENTRY,
    };
}

#[derive(Clone, Copy)]
struct Entry<A> {
    ip: A,
    mac: [u8; 6],
    /// `None` while the pool entry is free.
    state: Option<NeighborState>,
    /// When the MAC was last confirmed by an answer, or first learnt.
    confirmed_ns: u64,
    last_request_ns: u64,
    /// Requests sent since the last confirmation; the first is not a retry.
    requests: u32,
    verify: Verify,
    pending_len: usize,
}

impl<A: NeighborAddr> Entry<A> {
    const FREE: Entry<A> = Entry {
        ip: A::UNSPECIFIED,
        mac: [0; 6],
        state: None,
        confirmed_ns: 0,
        last_request_ns: 0,
        requests: 0,
        verify: Verify::None,
        pending_len: 0,
    };

    /// Whether a reply now answers a request of ours: an incomplete entry is asking until it
    /// is removed; a resolved one for `retry_ns` after each request.
    fn awaits_answer(&self, config: &NeighborConfig, now_ns: u64) -> bool {
        match self.state {
            Some(NeighborState::Incomplete) => true,
            Some(NeighborState::Reachable | NeighborState::Stale) => {
                self.requests > 0 && now_ns.saturating_sub(self.last_request_ns) < config.retry_ns
            }
            None => false,
        }
    }

    /// Lower is evicted first: incomplete, then stale, then reachable, and among equals the
    /// one whose last confirmation (or, while incomplete, last request) is oldest.
    fn eviction_rank(&self) -> (u8, u64) {
        match self.state {
            None => (0, 0),
            Some(NeighborState::Incomplete) => (1, self.last_request_ns),
            Some(NeighborState::Stale) => (2, self.confirmed_ns),
            Some(NeighborState::Reachable) => (3, self.confirmed_ns),
        }
    }
}

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

/// IPv4's table by default; `NeighborTable<P, Ipv6Addr>` for IPv6.
pub struct NeighborTable<P, A = Ipv4Addr> {
    config: NeighborConfig,
    index: Vec<IndexSlot<A>>,
    hash_multiplier: u64,
    /// Mixes addresses longer than 64 bits before the multiply ([`NeighborAddr::hash_key`]).
    hash_key: u64,
    hash_shift: u32,
    entries: Vec<Entry<A>>,
    free_entries: Vec<u32>,
    pending: Vec<Option<P>>,
    /// Packets held over all entries, against `config.pending_total`.
    held: usize,
    /// Entries evicted since the table was made.
    evictions: u64,
    sweep_cursor: usize,
    eviction_cursor: usize,
}

impl<P, A: NeighborAddr> fmt::Debug for NeighborTable<P, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NeighborTable")
            .field("config", &self.config)
            .field("len", &self.len())
            .field("held", &self.held)
            .field("sweep_cursor", &self.sweep_cursor)
            .finish_non_exhaustive()
    }
}

impl<P, A: NeighborAddr> NeighborTable<P, A> {
    pub fn new(config: NeighborConfig) -> Self {
        let state = RandomState::new();
        let hash_multiplier = state.hash_one(0x6e65_6967_6862_6f72_u64) | 1;
        let mut table = Self::with_hash_multiplier(config, hash_multiplier);
        table.hash_key = state.hash_one(0x6e64_6973_635f_6b65_u64);
        table
    }

    fn with_hash_multiplier(mut config: NeighborConfig, hash_multiplier: u64) -> Self {
        config.capacity = config.capacity.clamp(1, MAX_CAPACITY).next_power_of_two();
        let index_len = config.capacity * 2;
        let pending_len = config
            .capacity
            .checked_mul(config.pending_per_neighbor)
            .unwrap_or_else(|| panic!("neighbour pending queue size overflows: {config:?}"));
        Self {
            index: vec![IndexSlot::VACANT; index_len],
            hash_multiplier,
            hash_key: 0,
            hash_shift: 64 - index_len.trailing_zeros(),
            entries: vec![Entry::FREE; config.capacity],
            // Popped from the end, so entries are handed out from index 0 upwards.
            free_entries: (0..config.capacity as u32).rev().collect(),
            pending: std::iter::repeat_with(|| None).take(pending_len).collect(),
            held: 0,
            evictions: 0,
            sweep_cursor: 0,
            eviction_cursor: 0,
            config,
        }
    }

    /// A miss in a full table evicts an entry (see the module's policy); the packets it held
    /// go to `on_evicted` as drops.
    pub fn lookup(&mut self, ip: A, now_ns: u64, on_evicted: impl FnMut(P)) -> Lookup {
        let entry = match self.probe(ip) {
            Probe::Found { entry, .. } => entry,
            Probe::Vacant { .. } => {
                let Some(entry) = self.insert(ip, on_evicted) else {
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
                // A verification's probes are the sweep's to send.
                let refresh = entry.state == Some(NeighborState::Stale)
                    && entry.verify == Verify::None
                    && record_request_if_due(config, entry, now_ns);
                Lookup::Resolved {
                    mac: entry.mac,
                    refresh,
                }
            }
        }
    }

    /// Only an incomplete neighbour takes packets: anything else means the caller did not get
    /// `Lookup::Pending` for it, and the packet is handed back with the reason to count it
    /// under: `NeighborQueueFull` for this neighbour's queue, `NeighborHeldLimit` when the
    /// table holds `pending_total` packets already.
    pub fn enqueue(&mut self, ip: A, pkt: P) -> Result<(), (P, DropReason)> {
        let Probe::Found { entry: index, .. } = self.probe(ip) else {
            return Err((pkt, DropReason::NeighborQueueFull));
        };
        let queue = self.pending_range(index);
        let entry = &mut self.entries[index];
        if entry.state != Some(NeighborState::Incomplete) {
            return Err((pkt, DropReason::NeighborQueueFull));
        }
        if self.held >= self.config.pending_total {
            return Err((pkt, DropReason::NeighborHeldLimit));
        }
        match self.pending[queue].get_mut(entry.pending_len) {
            Some(slot) => {
                *slot = Some(pkt);
                entry.pending_len += 1;
                self.held += 1;
                Ok(())
            }
            None => Err((pkt, DropReason::NeighborQueueFull)),
        }
    }

    /// Applies one ARP packet's sender binding, `ip` is at `mac`, by the module's policy. The
    /// caller has checked that `ip` is a host of the ingress interface's subnet. Packets an
    /// incomplete entry held go to `on_released`, to be sent to `mac`; creating an entry in a
    /// full table evicts one, whose packets go to `on_evicted` as drops.
    pub fn learn(
        &mut self,
        ip: A,
        mac: [u8; 6],
        source: ArpSource,
        now_ns: u64,
        on_released: impl FnMut(P),
        on_evicted: impl FnMut(P),
    ) -> Learn {
        let index = match self.probe(ip) {
            Probe::Found { entry, .. } => entry,
            Probe::Vacant { .. } if source == ArpSource::RequestForUs => {
                let Some(index) = self.insert(ip, on_evicted) else {
                    return Learn::Ignored;
                };
                let entry = &mut self.entries[index];
                entry.mac = mac;
                entry.state = Some(NeighborState::Stale);
                entry.confirmed_ns = now_ns;
                return Learn::Changed;
            }
            Probe::Vacant { .. } | Probe::Exhausted => return Learn::Ignored,
        };

        let config = self.config;
        let entry = &mut self.entries[index];
        if entry.state == Some(NeighborState::Incomplete) {
            self.confirm(index, mac, now_ns, on_released);
            return Learn::Changed;
        }
        let answer = source == ArpSource::ReplyToUs && entry.awaits_answer(&config, now_ns);
        let refused = |refusal, probe_old_mac| Learn::Refused {
            refusal,
            probe_old_mac,
        };
        if mac == entry.mac {
            if !answer {
                return Learn::Ignored;
            }
            self.confirm(index, mac, now_ns, on_released);
            return Learn::Confirmed;
        }
        if answer && entry.verify == Verify::Broadcast {
            self.confirm(index, mac, now_ns, on_released);
            return Learn::Changed;
        }
        if answer {
            // Our last request was unicast to the MAC we have: another MAC cannot have
            // received it, so this "answer" was sent on speculation.
            return refused(Refusal::MacChangeUnconfirmed, None);
        }
        if now_ns.saturating_sub(entry.confirmed_ns) < config.locktime_ns {
            return refused(Refusal::Locked, None);
        }
        if entry.verify != Verify::None {
            return refused(Refusal::MacChangeUnconfirmed, None);
        }
        entry.verify = Verify::OldMac;
        entry.requests = entry.requests.saturating_add(1);
        entry.last_request_ns = now_ns;
        refused(Refusal::MacChangeUnconfirmed, Some(entry.mac))
    }

    /// Visits at most `budget` pool entries, resuming where the previous call stopped, so the
    /// cost per call is bounded however full the table is. Applies the module's expiry policy
    /// and moves MAC-change verifications on.
    pub fn expire(
        &mut self,
        now_ns: u64,
        budget: usize,
        mut on_dropped: impl FnMut(P),
        mut on_probe: impl FnMut(NeighborProbe<A>),
    ) {
        let pool_mask = self.entries.len() - 1;
        for _ in 0..budget.min(self.entries.len()) {
            let index = self.sweep_cursor;
            self.sweep_cursor = (index + 1) & pool_mask;

            let config = &self.config;
            let entry = &mut self.entries[index];
            let unanswered = now_ns.saturating_sub(entry.last_request_ns) >= config.retry_ns;
            let remove = match entry.state {
                None => false,
                Some(NeighborState::Incomplete) => {
                    // The last request gets a full `retry_ns` to be answered before giving up.
                    let exhausted = entry.requests > config.max_retries;
                    if unanswered && !exhausted && record_request_if_due(config, entry, now_ns) {
                        on_probe(NeighborProbe {
                            ip: entry.ip,
                            unicast: None,
                        });
                    }
                    unanswered && exhausted
                }
                Some(NeighborState::Reachable | NeighborState::Stale) => {
                    match entry.verify {
                        Verify::OldMac if unanswered => {
                            entry.verify = Verify::Broadcast;
                            entry.requests = entry.requests.saturating_add(1);
                            entry.last_request_ns = now_ns;
                            on_probe(NeighborProbe {
                                ip: entry.ip,
                                unicast: None,
                            });
                        }
                        // Nobody answered for the address: the claim stays unproven.
                        Verify::Broadcast if unanswered => entry.verify = Verify::None,
                        _ => {}
                    }
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
    pub fn remove(&mut self, ip: A, on_dropped: impl FnMut(P)) -> bool {
        let Probe::Found { slot, entry } = self.probe(ip) else {
            return false;
        };
        self.release_pending(entry, on_dropped);
        self.entries[entry] = Entry::FREE;
        self.free_entries.push(entry as u32);
        self.shift_back_after(slot);
        true
    }

    /// A read-only view for the control plane: unlike [`lookup`](Self::lookup) it neither
    /// creates entries nor counts as a use. The state is as last observed by `lookup` or
    /// `expire`.
    pub fn get(&self, ip: A) -> Option<([u8; 6], NeighborState)> {
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
    pub fn iter(&self) -> impl Iterator<Item = (A, [u8; 6], NeighborState)> + '_ {
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

    /// Packets held for unresolved neighbours, at most `pending_total`.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Entries a full table evicted to make room, since it was made. A change tells the
    /// owner that a binding it published may be gone.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn home_slot(&self, ip: &A) -> usize {
        (ip.hash_key(self.hash_key)
            .wrapping_mul(self.hash_multiplier)
            >> self.hash_shift) as usize
    }

    fn probe(&self, ip: A) -> Probe {
        let key = ip;
        let mask = self.index.len() - 1;
        let mut slot = self.home_slot(&key);
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

    /// Claims a pool entry for `ip`, which must not be in the table, evicting one if the pool
    /// is full. The entry comes back free-but-claimed (`state: None`); the caller sets its
    /// state.
    fn insert(&mut self, ip: A, on_evicted: impl FnMut(P)) -> Option<usize> {
        if self.free_entries.is_empty() {
            self.evict_one(on_evicted);
        }
        // Probed again: an eviction's backward shift may have moved the vacant slot.
        let Probe::Vacant { slot } = self.probe(ip) else {
            return None;
        };
        let entry = self.free_entries.pop()?;
        self.index[slot] = IndexSlot { ip, entry };
        let entry = entry as usize;
        self.entries[entry] = Entry { ip, ..Entry::FREE };
        Some(entry)
    }

    /// Removes the lowest-ranked of the next `EVICTION_SCAN` pool entries.
    fn evict_one(&mut self, on_evicted: impl FnMut(P)) {
        let pool_mask = self.entries.len() - 1;
        let scan = EVICTION_SCAN.min(self.entries.len());
        let victim = (0..scan)
            .map(|step| (self.eviction_cursor + step) & pool_mask)
            .min_by_key(|&index| self.entries[index].eviction_rank())
            .unwrap_or(self.eviction_cursor);
        self.eviction_cursor = (self.eviction_cursor + scan) & pool_mask;
        let ip = self.entries[victim].ip;
        self.remove(ip, on_evicted);
        self.evictions += 1;
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
            let home = self.home_slot(&candidate.ip);
            let distance_from_home = slot.wrapping_sub(home) & mask;
            let distance_from_hole = slot.wrapping_sub(hole) & mask;
            if distance_from_home >= distance_from_hole {
                self.index[hole] = candidate;
                hole = slot;
            }
            slot = (slot + 1) & mask;
        }
        self.index[hole] = IndexSlot::VACANT;
    }

    fn confirm(&mut self, index: usize, mac: [u8; 6], now_ns: u64, on_released: impl FnMut(P)) {
        let entry = &mut self.entries[index];
        entry.mac = mac;
        entry.state = Some(NeighborState::Reachable);
        entry.confirmed_ns = now_ns;
        entry.requests = 0;
        entry.verify = Verify::None;
        self.release_pending(index, on_released);
    }

    fn release_pending(&mut self, index: usize, mut on_released: impl FnMut(P)) {
        let queue = self.pending_range(index);
        let entry = &mut self.entries[index];
        let queued = entry.pending_len;
        entry.pending_len = 0;
        self.held -= queued;
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
fn record_request_if_due<A>(config: &NeighborConfig, entry: &mut Entry<A>, now_ns: u64) -> bool {
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
    const LOCK: u64 = SECOND_NS;
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

    fn refused(refusal: Refusal) -> Learn {
        Learn::Refused {
            refusal,
            probe_old_mac: None,
        }
    }

    fn broadcast(ip: Ipv4Addr) -> ArpProbe {
        ArpProbe { ip, unicast: None }
    }

    fn no_packets(pkt: Packet) {
        panic!("unexpected packet {pkt:?}");
    }

    fn no_probes(probe: ArpProbe) {
        panic!("unexpected probe {probe:?}");
    }

    fn learn(
        t: &mut NeighborTable<Packet>,
        ip: Ipv4Addr,
        mac: [u8; 6],
        source: ArpSource,
        now_ns: u64,
    ) -> Learn {
        t.learn(ip, mac, source, now_ns, no_packets, no_packets)
    }

    /// Resolves `ip` the ordinary way: our request, then its answer.
    fn resolve(t: &mut NeighborTable<Packet>, ip: Ipv4Addr, mac: [u8; 6], now_ns: u64) {
        assert_eq!(t.lookup(ip, now_ns, no_packets), pending(true));
        assert_eq!(
            learn(t, ip, mac, ArpSource::ReplyToUs, now_ns),
            Learn::Changed
        );
    }

    fn expire_probes(
        table: &mut NeighborTable<Packet>,
        now_ns: u64,
    ) -> (Vec<Packet>, Vec<ArpProbe>) {
        let (mut dropped, mut probed) = (Vec::new(), Vec::new());
        let budget = table.capacity();
        table.expire(now_ns, budget, |p| dropped.push(p), |p| probed.push(p));
        (dropped, probed)
    }

    fn expire_all(table: &mut NeighborTable<Packet>, now_ns: u64) -> (Vec<Packet>, Vec<Ipv4Addr>) {
        let (dropped, probed) = expire_probes(table, now_ns);
        (dropped, probed.into_iter().map(|probe| probe.ip).collect())
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
        assert_eq!(t.lookup(ip(1), 0, no_packets), pending(true));
        assert_eq!(t.lookup(ip(1), RETRY - 1, no_packets), pending(false));
        assert_eq!(t.get(ip(1)), Some(([0; 6], NeighborState::Incomplete)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn incomplete_lookup_retries_every_retry_ns_up_to_max_retries() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0, no_packets), pending(true));
        let mut requests = 1;
        for step in 1..=10 {
            let now = step * RETRY;
            if t.lookup(ip(1), now, no_packets) == pending(true) {
                requests += 1;
                assert_eq!(t.lookup(ip(1), now, no_packets), pending(false));
            }
        }
        assert_eq!(requests, 1 + NeighborConfig::default().max_retries);
    }

    #[test]
    fn answer_resolves_incomplete_and_releases_fifo() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0, no_packets), pending(true));
        for id in 0..4 {
            t.enqueue(ip(1), Packet(id)).unwrap();
        }
        assert_eq!(t.held(), 4);
        let mut released = Vec::new();
        assert_eq!(
            t.learn(
                ip(1),
                MAC_A,
                ArpSource::ReplyToUs,
                10,
                |p| released.push(p),
                no_packets
            ),
            Learn::Changed
        );
        assert_eq!(released, (0..4).map(Packet).collect::<Vec<_>>());
        assert_eq!(t.held(), 0);
        assert_eq!(t.lookup(ip(1), 20, no_packets), resolved(MAC_A, false));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
    }

    #[test]
    fn enqueue_refuses_when_queue_full_and_returns_packet() {
        let mut t = table(8);
        t.lookup(ip(1), 0, no_packets);
        for id in 0..4 {
            assert_eq!(t.enqueue(ip(1), Packet(id)), Ok(()));
        }
        assert_eq!(
            t.enqueue(ip(1), Packet(99)),
            Err((Packet(99), DropReason::NeighborQueueFull))
        );
        // Another neighbour's queue is independent.
        t.lookup(ip(2), 0, no_packets);
        assert_eq!(t.enqueue(ip(2), Packet(5)), Ok(()));
        let mut released = Vec::new();
        t.learn(
            ip(1),
            MAC_A,
            ArpSource::ReplyToUs,
            1,
            |p| released.push(p),
            no_packets,
        );
        assert_eq!(released, (0..4).map(Packet).collect::<Vec<_>>());
    }

    #[test]
    fn enqueue_stops_at_the_tables_total_however_many_neighbours_wait() {
        let mut t: NeighborTable<Packet> = NeighborTable::new(NeighborConfig {
            capacity: 64,
            pending_per_neighbor: 4,
            pending_total: 10,
            ..NeighborConfig::default()
        });
        let mut held = 0;
        for last in 1..=20 {
            assert_eq!(t.lookup(ip(last), 0, no_packets), pending(true));
            for id in 0..4 {
                match t.enqueue(ip(last), Packet(id)) {
                    Ok(()) => held += 1,
                    Err((_, reason)) => assert_eq!(reason, DropReason::NeighborHeldLimit),
                }
            }
        }
        assert_eq!((held, t.held()), (10, 10));
        // Releasing a queue makes room again.
        let mut released = 0;
        t.learn(
            ip(1),
            MAC_A,
            ArpSource::ReplyToUs,
            1,
            |_| released += 1,
            no_packets,
        );
        assert_eq!((released, t.held()), (4, 6));
        assert_eq!(t.enqueue(ip(5), Packet(1)), Ok(()));
        // Removal (and expiry, which removes) gives its packets back to the count too.
        let mut dropped = 0;
        assert!(t.remove(ip(2), |_| dropped += 1));
        assert_eq!((dropped, t.held()), (4, 3));
    }

    #[test]
    fn enqueue_refuses_unknown_and_resolved_neighbours() {
        let mut t = table(8);
        assert_eq!(
            t.enqueue(ip(1), Packet(1)),
            Err((Packet(1), DropReason::NeighborQueueFull))
        );
        resolve(&mut t, ip(1), MAC_A, 0);
        assert_eq!(
            t.enqueue(ip(1), Packet(2)),
            Err((Packet(2), DropReason::NeighborQueueFull))
        );
    }

    #[test]
    fn zero_queue_length_refuses_every_packet() {
        let mut t: NeighborTable<Packet> = NeighborTable::new(NeighborConfig {
            pending_per_neighbor: 0,
            ..NeighborConfig::default()
        });
        assert_eq!(t.lookup(ip(1), 0, no_packets), pending(true));
        assert!(t.enqueue(ip(1), Packet(1)).is_err());
    }

    #[test]
    fn only_a_request_for_us_creates_a_neighbour_and_it_starts_unconfirmed() {
        let mut t = table(8);
        for source in [ArpSource::ReplyToUs, ArpSource::Other] {
            assert_eq!(learn(&mut t, ip(1), MAC_A, source, 0), Learn::Ignored);
        }
        assert_eq!(t.len(), 0);
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::RequestForUs, 0),
            Learn::Changed
        );
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Stale)));
        // Used at once, but its first use asks for a (unicast) confirmation.
        assert_eq!(t.lookup(ip(1), 1, no_packets), resolved(MAC_A, true));
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::ReplyToUs, 2),
            Learn::Confirmed
        );
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn unsolicited_packets_fill_an_incomplete_entry() {
        for source in [ArpSource::RequestForUs, ArpSource::Other] {
            let mut t = table(8);
            t.lookup(ip(1), 0, no_packets);
            t.enqueue(ip(1), Packet(7)).unwrap();
            let mut released = Vec::new();
            assert_eq!(
                t.learn(ip(1), MAC_A, source, 1, |p| released.push(p), no_packets),
                Learn::Changed
            );
            assert_eq!(released, vec![Packet(7)]);
            assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
        }
    }

    #[test]
    fn an_unsolicited_repeat_of_the_mac_is_no_confirmation() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        for source in [
            ArpSource::RequestForUs,
            ArpSource::ReplyToUs,
            ArpSource::Other,
        ] {
            assert_eq!(
                learn(&mut t, ip(1), MAC_A, source, 2 * REACHABLE),
                Learn::Ignored
            );
        }
        // So it still expires on schedule: the neighbour itself never answered.
        assert_eq!(expire_all(&mut t, 2 * REACHABLE + 1), (vec![], vec![]));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn a_reply_long_after_our_request_is_unsolicited() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        let stale_at = REACHABLE + 1;
        assert_eq!(t.lookup(ip(1), stale_at, no_packets), resolved(MAC_A, true));
        // Within retry_ns of the refresh it is an answer; after, it is not.
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::ReplyToUs, stale_at + RETRY),
            Learn::Ignored
        );
        assert_eq!(
            learn(
                &mut t,
                ip(1),
                MAC_A,
                ArpSource::ReplyToUs,
                stale_at + RETRY - 1
            ),
            Learn::Confirmed
        );
    }

    #[test]
    fn ipv6_neighbours_follow_the_same_policy() {
        let mut t: NeighborTable<Packet, Ipv6Addr> = NeighborTable::new(NeighborConfig {
            capacity: 8,
            ..NeighborConfig::default()
        });
        let host = |n: u16| Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, n);
        let learn6 = |t: &mut NeighborTable<Packet, Ipv6Addr>, ip, mac, source, now_ns| {
            t.learn(ip, mac, source, now_ns, no_packets, no_packets)
        };
        // An unknown host's unsolicited advertisement creates nothing; its solicitation for
        // one of our addresses does, unconfirmed.
        assert_eq!(
            learn6(&mut t, host(1), MAC_A, ArpSource::Other, 0),
            Learn::Ignored
        );
        assert_eq!(
            learn6(&mut t, host(1), MAC_A, ArpSource::RequestForUs, 0),
            Learn::Changed
        );
        assert_eq!(t.get(host(1)), Some((MAC_A, NeighborState::Stale)));
        // Resolving another: held, then released by the solicited advertisement.
        assert_eq!(t.lookup(host(2), 0, no_packets), pending(true));
        t.enqueue(host(2), Packet(7)).unwrap();
        let mut released = Vec::new();
        assert_eq!(
            t.learn(
                host(2),
                MAC_B,
                ArpSource::ReplyToUs,
                1,
                |p| released.push(p),
                no_packets
            ),
            Learn::Changed
        );
        assert_eq!(released, [Packet(7)]);
        // Another MAC for the confirmed neighbour: refused within the lock, checked after it.
        assert_eq!(
            learn6(&mut t, host(2), MAC_A, ArpSource::Other, 2),
            refused(Refusal::Locked)
        );
        assert_eq!(
            learn6(&mut t, host(2), MAC_A, ArpSource::Other, 10 * LOCK),
            Learn::Refused {
                refusal: Refusal::MacChangeUnconfirmed,
                probe_old_mac: Some(MAC_B),
            }
        );
        assert_eq!(t.get(host(2)), Some((MAC_B, NeighborState::Reachable)));
        // Addresses alike but for their high half are other neighbours.
        assert_eq!(t.get(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2)), None);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_different_mac_within_locktime_is_refused_whatever_the_packet() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        for source in [
            ArpSource::RequestForUs,
            ArpSource::ReplyToUs,
            ArpSource::Other,
        ] {
            assert_eq!(
                learn(&mut t, ip(1), MAC_B, source, LOCK - 1),
                refused(Refusal::Locked)
            );
        }
        assert_eq!(t.lookup(ip(1), LOCK, no_packets), resolved(MAC_A, false));
        assert_eq!(expire_all(&mut t, LOCK), (vec![], vec![]));
    }

    #[test]
    fn a_claimed_mac_change_is_checked_with_the_old_mac_which_keeps_it_if_it_answers() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        let claim_at = 10 * LOCK;
        assert_eq!(
            learn(&mut t, ip(1), MAC_B, ArpSource::Other, claim_at),
            Learn::Refused {
                refusal: Refusal::MacChangeUnconfirmed,
                probe_old_mac: Some(MAC_A),
            }
        );
        // One probe per verification: repeated claims are refused without another.
        assert_eq!(
            learn(&mut t, ip(1), MAC_B, ArpSource::RequestForUs, claim_at + 1),
            refused(Refusal::MacChangeUnconfirmed)
        );
        // Only the old MAC could receive our unicast probe: a "reply" from another is not
        // an answer to it.
        assert_eq!(
            learn(&mut t, ip(1), MAC_B, ArpSource::ReplyToUs, claim_at + 2),
            refused(Refusal::MacChangeUnconfirmed)
        );
        assert_eq!(
            t.lookup(ip(1), claim_at + 3, no_packets),
            resolved(MAC_A, false)
        );
        // The old neighbour answers: it stays, and the lock starts over.
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::ReplyToUs, claim_at + 4),
            Learn::Confirmed
        );
        assert_eq!(
            learn(&mut t, ip(1), MAC_B, ArpSource::Other, claim_at + 5),
            refused(Refusal::Locked)
        );
        // Nothing is left for the sweep to do.
        assert_eq!(
            expire_probes(&mut t, claim_at + 2 * RETRY),
            (vec![], vec![])
        );
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
    }

    #[test]
    fn a_silent_old_mac_leads_to_a_broadcast_probe_whose_answer_is_believed() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        let claim_at = 10 * LOCK;
        assert!(matches!(
            learn(&mut t, ip(1), MAC_B, ArpSource::Other, claim_at),
            Learn::Refused {
                probe_old_mac: Some(MAC_A),
                ..
            }
        ));
        // A lookup meanwhile neither changes the MAC nor sends a refresh of its own.
        assert_eq!(
            t.lookup(ip(1), REACHABLE + 1, no_packets),
            resolved(MAC_A, false)
        );
        let silent = claim_at + RETRY;
        assert_eq!(expire_probes(&mut t, silent - 1), (vec![], vec![]));
        assert_eq!(
            expire_probes(&mut t, silent),
            (vec![], vec![broadcast(ip(1))])
        );
        assert_eq!(
            learn(&mut t, ip(1), MAC_B, ArpSource::ReplyToUs, silent + 1),
            Learn::Changed
        );
        assert_eq!(t.get(ip(1)), Some((MAC_B, NeighborState::Reachable)));
    }

    #[test]
    fn an_unanswered_verification_leaves_the_entry_as_it_was() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        let claim_at = 10 * LOCK;
        learn(&mut t, ip(1), MAC_B, ArpSource::Other, claim_at);
        assert_eq!(
            expire_probes(&mut t, claim_at + RETRY),
            (vec![], vec![broadcast(ip(1))])
        );
        // Our broadcast got no answer in time; an unsolicited packet is still no answer.
        assert_eq!(
            expire_probes(&mut t, claim_at + 2 * RETRY),
            (vec![], vec![])
        );
        assert_eq!(
            learn(
                &mut t,
                ip(1),
                MAC_B,
                ArpSource::ReplyToUs,
                claim_at + 2 * RETRY
            ),
            Learn::Refused {
                refusal: Refusal::MacChangeUnconfirmed,
                probe_old_mac: Some(MAC_A),
            },
            "a new claim starts a new verification"
        );
        assert_eq!(t.get(ip(1)).map(|(mac, _)| mac), Some(MAC_A));
    }

    #[test]
    fn reachable_becomes_stale_and_asks_for_limited_refreshes() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
        assert_eq!(
            t.lookup(ip(1), REACHABLE, no_packets),
            resolved(MAC_A, false)
        );
        let stale_at = REACHABLE + 1;
        assert_eq!(t.lookup(ip(1), stale_at, no_packets), resolved(MAC_A, true));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Stale)));
        assert_eq!(
            t.lookup(ip(1), stale_at + RETRY - 1, no_packets),
            resolved(MAC_A, false)
        );
        let mut refreshes = 1;
        let mut last_refresh = stale_at;
        for step in 1..=10 {
            let now = stale_at + step * RETRY;
            if t.lookup(ip(1), now, no_packets) == resolved(MAC_A, true) {
                refreshes += 1;
                last_refresh = now;
            }
        }
        assert_eq!(refreshes, 1 + NeighborConfig::default().max_retries);

        // An answer to the last refresh makes it reachable again, with a fresh budget.
        let confirmed_at = last_refresh + 1;
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::ReplyToUs, confirmed_at),
            Learn::Confirmed
        );
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
        assert_eq!(
            t.lookup(ip(1), confirmed_at + 1, no_packets),
            resolved(MAC_A, false)
        );
        assert_eq!(
            t.lookup(ip(1), confirmed_at + REACHABLE + 1, no_packets),
            resolved(MAC_A, true)
        );
    }

    #[test]
    fn expire_reprobes_incomplete_then_drops_its_packets_exactly_once() {
        let mut t = table(8);
        assert_eq!(t.lookup(ip(1), 0, no_packets), pending(true));
        t.enqueue(ip(1), Packet(1)).unwrap();
        t.enqueue(ip(1), Packet(2)).unwrap();

        assert_eq!(expire_all(&mut t, RETRY - 1), (vec![], vec![]));
        let max_retries = NeighborConfig::default().max_retries as u64;
        for retry in 1..=max_retries {
            assert_eq!(
                expire_probes(&mut t, retry * RETRY),
                (vec![], vec![broadcast(ip(1))])
            );
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
        assert_eq!((t.len(), t.held()), (0, 0));
        assert_eq!(t.get(ip(1)), None);
        assert_eq!(expire_all(&mut t, removal + 10 * RETRY), (vec![], vec![]));
        // A later lookup starts from scratch.
        assert_eq!(
            t.lookup(ip(1), removal + 11 * RETRY, no_packets),
            pending(true)
        );
    }

    #[test]
    fn lookup_retries_and_sweep_probes_share_one_budget() {
        let mut t = table(8);
        t.lookup(ip(1), 0, no_packets);
        assert_eq!(t.lookup(ip(1), RETRY, no_packets), pending(true));
        assert_eq!(expire_all(&mut t, RETRY), (vec![], vec![]));
        assert_eq!(expire_all(&mut t, 2 * RETRY), (vec![], vec![ip(1)]));
        assert_eq!(t.lookup(ip(1), 3 * RETRY, no_packets), pending(true));
        assert_eq!(t.lookup(ip(1), 4 * RETRY, no_packets), pending(false));
        assert_eq!(expire_all(&mut t, 4 * RETRY), (vec![], vec![]));
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn expire_keeps_fresh_and_stale_resolved_then_removes_after_twice_reachable() {
        let mut t = table(8);
        resolve(&mut t, ip(1), MAC_A, 0);
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
        resolve(&mut t, ip(1), MAC_A, 0);
        assert_eq!(
            t.lookup(ip(1), 2 * REACHABLE, no_packets),
            resolved(MAC_A, true)
        );
        assert_eq!(
            learn(&mut t, ip(1), MAC_A, ArpSource::ReplyToUs, 2 * REACHABLE),
            Learn::Confirmed
        );
        assert_eq!(expire_all(&mut t, 2 * REACHABLE + 1), (vec![], vec![]));
        assert_eq!(t.get(ip(1)), Some((MAC_A, NeighborState::Reachable)));
    }

    #[test]
    fn sweep_visits_budget_entries_per_call_and_wraps() {
        let mut t = table(8);
        for last in 1..=8 {
            assert_eq!(t.lookup(ip(last), 0, no_packets), pending(true));
        }
        let sweep = |t: &mut NeighborTable<Packet>, now_ns| {
            let mut probed = Vec::new();
            t.expire(now_ns, 3, no_packets, |probe| probed.push(probe.ip));
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
        t.lookup(ip(1), 0, no_packets);
        let mut probed = Vec::new();
        t.expire(RETRY, 1000, no_packets, |probe| probed.push(probe.ip));
        assert_eq!(probed, vec![ip(1)]);
    }

    #[test]
    fn zero_budget_does_nothing() {
        let mut t = table(2);
        t.lookup(ip(1), 0, no_packets);
        t.expire(100 * RETRY, 0, no_packets, no_probes);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn a_full_table_evicts_incomplete_before_stale_before_reachable() {
        let mut t = table(4);
        resolve(&mut t, ip(1), MAC_A, 0);
        resolve(&mut t, ip(2), MAC_B, 0);
        assert_eq!(
            learn(&mut t, ip(3), MAC_A, ArpSource::RequestForUs, 0),
            Learn::Changed
        );
        assert_eq!(t.lookup(ip(4), 0, no_packets), pending(true));
        t.enqueue(ip(4), Packet(4)).unwrap();
        assert_eq!(t.len(), 4);

        // The incomplete entry goes first, and its held packet is handed back as a drop.
        let mut evicted = Vec::new();
        assert_eq!(
            t.lookup(ip(5), 1, |p| evicted.push(p)),
            pending(true),
            "a full table makes room instead of refusing"
        );
        assert_eq!(evicted, vec![Packet(4)]);
        assert_eq!((t.get(ip(4)), t.held(), t.evictions()), (None, 0, 1));
        // Now ip(5) is the incomplete one: a request for us from a new host evicts it.
        assert_eq!(
            learn(&mut t, ip(6), MAC_B, ArpSource::RequestForUs, 2),
            Learn::Changed
        );
        assert_eq!(t.get(ip(5)), None);
        // Then the stale ones, oldest first (ip(3), learnt at 0, before ip(6)).
        assert_eq!(t.lookup(ip(7), 3, no_packets), pending(true));
        assert_eq!(t.get(ip(3)), None);
        assert_eq!(
            t.get(ip(6)).map(|(_, state)| state),
            Some(NeighborState::Stale)
        );
        // The reachable neighbours survived all of it.
        assert_eq!(t.lookup(ip(1), 4, no_packets), resolved(MAC_A, false));
        assert_eq!(t.lookup(ip(2), 4, no_packets), resolved(MAC_B, false));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_table_of_reachable_neighbours_evicts_the_least_recently_confirmed() {
        let mut t = table(2);
        resolve(&mut t, ip(1), MAC_A, 5);
        resolve(&mut t, ip(2), MAC_B, 3);
        assert_eq!(t.lookup(ip(3), 6, no_packets), pending(true));
        assert_eq!(t.get(ip(2)), None);
        assert_eq!(t.get(ip(1)).map(|(mac, _)| mac), Some(MAC_A));
    }

    #[test]
    fn remove_hands_back_queued_packets() {
        let mut t = table(8);
        t.lookup(ip(1), 0, no_packets);
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
        t.lookup(ip(1), 0, no_packets);
        resolve(&mut t, ip(2), MAC_B, 0);
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
            assert_eq!(t.home_slot(&ip(last)), t.index.len() - 1);
            assert_eq!(
                learn(&mut t, ip(last), [last; 6], ArpSource::RequestForUs, 0),
                Learn::Changed
            );
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
        /// Inserts into a full table evict exactly one other key; the index never loses or
        /// invents one, however the keys collide.
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
                        let outcome = learn(&mut t, ip(last), mac, ArpSource::RequestForUs, 0);
                        if model.contains_key(&ip(last)) {
                            prop_assert_eq!(outcome, refused(Refusal::Locked));
                        } else {
                            prop_assert_eq!(outcome, Learn::Changed);
                            if model.len() == t.capacity() {
                                let gone: Vec<_> = model
                                    .keys()
                                    .copied()
                                    .filter(|&ip| t.get(ip).is_none())
                                    .collect();
                                prop_assert_eq!(gone.len(), 1);
                                model.remove(&gone[0]);
                            }
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

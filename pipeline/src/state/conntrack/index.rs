//! The open-addressing index from either tuple of a flow to the flow's arena slot.
//!
//! Linear probing over a power-of-two array at most half full, so a miss costs about two and
//! a half probes. Each slot holds 32 bits of the key's hash next to the flow reference, so
//! probing compares keys in the arena only on a tag match. The tag's top bits are also the
//! home slot, which lets deletion shift later keys back (no tombstones, so probe chains do
//! not grow with churn) without touching the arena.

use std::hash::{BuildHasher, RandomState};

use super::key::TableKey;
use crate::flow::Direction;

/// Two tuples per flow in an index at most half full.
pub(super) const SLOTS_PER_FLOW: usize = 4;

/// An arena slot and which of its flow's tuples the index entry stands for, in one `u32`
/// (slot in the upper 31 bits) so that an index slot stays 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FlowRef(u32);

impl FlowRef {
    /// `flow` must be below 2^31; the table's maximum capacity guarantees it.
    pub(super) fn new(flow: usize, direction: Direction) -> FlowRef {
        let reply_bit = u32::from(direction == Direction::Reply);
        FlowRef(((flow as u32) << 1) | reply_bit)
    }

    pub(super) fn flow(self) -> usize {
        (self.0 >> 1) as usize
    }

    pub(super) fn direction(self) -> Direction {
        if self.0 & 1 == 0 {
            Direction::Original
        } else {
            Direction::Reply
        }
    }
}

#[derive(Clone, Copy)]
pub(super) struct IndexSlot {
    tag: u32,
    flow_ref: u32,
}

/// No flow can have this reference: it would need an arena of 2^31 slots.
const VACANT: u32 = u32::MAX;
const VACANT_SLOT: IndexSlot = IndexSlot {
    tag: 0,
    flow_ref: VACANT,
};

/// A keyed hash of a 5-tuple ([`TableKey::keyed_hash`]). The keys are random per table, so remote hosts, who choose
/// ports and sometimes addresses, cannot aim many flows at one probe chain.
pub(super) struct FlowHasher {
    keys: [u64; 3],
    /// Lets tests force collisions and wrap-around clusters.
    #[cfg(test)]
    distort: Option<fn(u64) -> u64>,
}

impl FlowHasher {
    pub(super) fn random() -> FlowHasher {
        // Seeded from the OS once per thread, then stepped per instance.
        let state = RandomState::new();
        FlowHasher {
            keys: [0_u8, 1, 2].map(|i| state.hash_one(i)),
            #[cfg(test)]
            distort: None,
        }
    }

    /// Fixed keys, for tests whose assertions depend on where keys land: the same layout on
    /// every run.
    #[cfg(test)]
    pub(super) fn fixed(keys: [u64; 3]) -> FlowHasher {
        FlowHasher {
            keys,
            distort: None,
        }
    }

    #[cfg(test)]
    pub(super) fn distorted(distort: fn(u64) -> u64) -> FlowHasher {
        FlowHasher {
            distort: Some(distort),
            ..FlowHasher::random()
        }
    }

    /// A folded 64x64->128 multiply of the keyed 13 bytes, then one more round so that every
    /// input bit reaches the top bits the index uses.
    fn hash<K: TableKey>(&self, key: &K) -> u64 {
        let hash = key.keyed_hash(&self.keys);
        #[cfg(test)]
        if let Some(distort) = self.distort {
            return distort(hash);
        }
        hash
    }
}

pub(super) struct FlowIndex {
    slots: Vec<IndexSlot>,
    /// Turns a tag into a home slot: its top log2(slots) bits.
    home_shift: u32,
    hasher: FlowHasher,
    /// Advanced by every insert, the only change that can make a missing key present: a
    /// lookup that missed at one value still holds while the value is the same. Starts at
    /// a random value, so that two indexes are unlikely to be at the same one.
    inserts: u64,
}

impl FlowIndex {
    pub(super) fn new(flow_capacity: usize, hasher: FlowHasher) -> FlowIndex {
        let len = (flow_capacity * SLOTS_PER_FLOW).next_power_of_two();
        FlowIndex {
            slots: vec![VACANT_SLOT; len],
            home_shift: u32::BITS - len.trailing_zeros(),
            inserts: hasher.keys[0],
            hasher,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The slots' memory: start and bytes.
    pub(super) fn memory_region(&self) -> (*const u8, usize) {
        (
            self.slots.as_ptr() as *const u8,
            std::mem::size_of_val(&self.slots[..]),
        )
    }

    /// The entry for the key whose tag ([`FlowIndex::tag`]) is `tag`, among those with that
    /// tag; `is_match` compares the key itself against the flow the entry refers to.
    #[inline]
    pub(super) fn find(&self, tag: u32, is_match: impl Fn(FlowRef) -> bool) -> Option<FlowRef> {
        let mask = self.slots.len() - 1;
        let mut slot = self.home(tag);
        for _ in 0..self.slots.len() {
            let candidate = self.slots[slot];
            if candidate.flow_ref == VACANT {
                return None;
            }
            if candidate.tag == tag && is_match(FlowRef(candidate.flow_ref)) {
                return Some(FlowRef(candidate.flow_ref));
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    /// The slot `key`'s probe starts at: the first cache line a lookup reads.
    pub(super) fn home_slot(&self, tag: u32) -> &IndexSlot {
        &self.slots[self.home(tag)]
    }

    /// The flow the home slot refers to, when its tag is the key's: usually the flow a lookup
    /// will compare against next.
    pub(super) fn likely_flow(&self, tag: u32) -> Option<FlowRef> {
        let slot = self.slots[self.home(tag)];
        (slot.flow_ref != VACANT && slot.tag == tag).then_some(FlowRef(slot.flow_ref))
    }

    /// Where the index stands in its inserts (the field of the same name).
    pub(super) fn inserts(&self) -> u64 {
        self.inserts
    }

    /// False only if the index is full, which its sizing rules out.
    pub(super) fn insert<K: TableKey>(&mut self, key: &K, flow_ref: FlowRef) -> bool {
        self.insert_tagged(self.tag(key), flow_ref)
    }

    /// [`insert`](Self::insert) with the key's [`tag`](Self::tag), computed already.
    pub(super) fn insert_tagged(&mut self, tag: u32, flow_ref: FlowRef) -> bool {
        self.inserts = self.inserts.wrapping_add(1);
        let mask = self.slots.len() - 1;
        let mut slot = self.home(tag);
        for _ in 0..self.slots.len() {
            if self.slots[slot].flow_ref == VACANT {
                self.slots[slot] = IndexSlot {
                    tag,
                    flow_ref: flow_ref.0,
                };
                return true;
            }
            slot = (slot + 1) & mask;
        }
        false
    }

    /// Removes the entry `key` was inserted with; false if there is none.
    pub(super) fn remove<K: TableKey>(&mut self, key: &K, flow_ref: FlowRef) -> bool {
        let mask = self.slots.len() - 1;
        let mut slot = self.home(self.tag(key));
        for _ in 0..self.slots.len() {
            let candidate = self.slots[slot].flow_ref;
            if candidate == VACANT {
                return false;
            }
            if candidate == flow_ref.0 {
                self.shift_back_after(slot);
                return true;
            }
            slot = (slot + 1) & mask;
        }
        false
    }

    /// The 32 bits of `key`'s hash the index keeps and probes by.
    pub(super) fn tag<K: TableKey>(&self, key: &K) -> u32 {
        (self.hasher.hash(key) >> 32) as u32
    }

    /// `key`'s opening host as the table's per-host counts know it ([`TableKey::opener`]),
    /// an IPv6 host being its first `prefix6` bits.
    #[inline]
    pub(super) fn opener<K: TableKey>(&self, key: &K, prefix6: u8) -> u32 {
        key.opener(self.hasher.keys[2], prefix6)
    }

    fn home(&self, tag: u32) -> usize {
        (tag >> self.home_shift) as usize
    }

    /// Backward-shift deletion: walk the cluster after the hole and pull back every entry
    /// whose home is not strictly between the hole and its current slot, so that every entry
    /// stays reachable from its home.
    fn shift_back_after(&mut self, removed_slot: usize) {
        let mask = self.slots.len() - 1;
        let mut hole = removed_slot;
        let mut slot = (hole + 1) & mask;
        for _ in 0..self.slots.len() {
            let candidate = self.slots[slot];
            if candidate.flow_ref == VACANT {
                break;
            }
            let home = self.home(candidate.tag);
            let distance_from_home = slot.wrapping_sub(home) & mask;
            let distance_from_hole = slot.wrapping_sub(hole) & mask;
            if distance_from_home >= distance_from_hole {
                self.slots[hole] = candidate;
                hole = slot;
            }
            slot = (slot + 1) & mask;
        }
        self.slots[hole] = VACANT_SLOT;
    }
}

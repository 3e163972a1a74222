//! How many new flows each firewall rule decided (`gateway_firewall_rule_hits_total`): a
//! counter per rule with a slot per worker, each written by its worker alone and a cache line
//! from the next, so counting costs a worker no shared write. A rule set points at its rules'
//! counters ([`crate::state::firewall::RuleSet::attach_hits`]); the gateway keeps one counter
//! per rule name across reloads and gives it to every rule set that has the rule, so a reload
//! neither loses nor mixes counts. Counted when the rule decides a flow's first packet, never
//! on an established flow's: once per accepted flow; for a dropped or rejected flow, and for
//! traffic to the gateway itself (which keeps no flow), once per packet that meets the rule.

use std::sync::atomic::{AtomicU64, Ordering};

/// One worker's count, alone on its cache line.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Slot(AtomicU64);

/// One rule's count, per worker.
#[derive(Debug)]
pub struct RuleHits {
    slots: Box<[Slot]>,
}

impl RuleHits {
    pub fn new(workers: usize) -> Self {
        RuleHits {
            slots: (0..workers.max(1)).map(|_| Slot::default()).collect(),
        }
    }

    /// One more flow decided by the rule on `worker` (its slot's only writer: a load and a
    /// store, no locked instruction). A worker beyond the slots is not counted.
    #[inline]
    pub fn add(&self, worker: u16) {
        if let Some(slot) = self.slots.get(usize::from(worker)) {
            let count = slot.0.load(Ordering::Relaxed);
            slot.0.store(count + 1, Ordering::Relaxed);
        }
    }

    /// Every worker's count, added up.
    pub fn total(&self) -> u64 {
        self.slots
            .iter()
            .map(|slot| slot.0.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_in_its_own_slot_and_the_total_adds_them() {
        let hits = RuleHits::new(3);
        hits.add(0);
        hits.add(2);
        hits.add(2);
        hits.add(7);
        assert_eq!(hits.total(), 3);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}

//! How many new flows each firewall rule decided (`gateway_firewall_rule_hits_total`), and
//! when it last decided one: a counter per rule with a slot per worker, each written by its worker alone and a cache line
//! from the next, so counting costs a worker no shared write. A rule set points at its rules'
//! counters ([`crate::state::firewall::RuleSet::attach_hits`]); the gateway keeps one counter
//! per rule name across reloads and gives it to every rule set that has the rule, so a reload
//! neither loses nor mixes counts. Counted when the rule decides a flow's first packet, never
//! on an established flow's: once per accepted flow; for a dropped or rejected flow, and for
//! traffic to the gateway itself (which keeps no flow), once per packet that meets the rule.

use std::sync::atomic::{AtomicU64, Ordering};

/// One worker's count and the Unix second of its latest hit (0: none), alone on their
/// cache line.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Slot {
    count: AtomicU64,
    last_unix: AtomicU64,
}

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

    /// One more flow decided by the rule on `worker`, at Unix second `unix_seconds` (its
    /// slot's only writer: a load and two stores on one line, no locked instruction). A
    /// worker beyond the slots is not counted.
    #[inline]
    pub fn add(&self, worker: u16, unix_seconds: i64) {
        if let Some(slot) = self.slots.get(usize::from(worker)) {
            let count = slot.count.load(Ordering::Relaxed);
            slot.count.store(count + 1, Ordering::Relaxed);
            slot.last_unix
                .store(u64::try_from(unix_seconds).unwrap_or(0), Ordering::Relaxed);
        }
    }

    /// Every worker's count, added up.
    pub fn total(&self) -> u64 {
        self.slots
            .iter()
            .map(|slot| slot.count.load(Ordering::Relaxed))
            .sum()
    }

    /// The Unix second the rule last decided a flow on any worker; None if it never has.
    pub fn last_matched(&self) -> Option<u64> {
        self.slots
            .iter()
            .map(|slot| slot.last_unix.load(Ordering::Relaxed))
            .max()
            .filter(|&last| last > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_counts_in_its_own_slot_and_the_total_and_last_match_gather_them() {
        let hits = RuleHits::new(3);
        assert_eq!(hits.last_matched(), None, "never matched");
        hits.add(0, 1_700_000_100);
        hits.add(2, 1_700_000_050);
        hits.add(2, 1_700_000_060);
        hits.add(7, 1_700_000_900);
        assert_eq!(hits.total(), 3);
        assert_eq!(
            hits.last_matched(),
            Some(1_700_000_100),
            "the latest of the workers' latest, an uncounted worker's not among them"
        );
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }
}

//! Per-host counters with limits, in a table allocated once: how many flows, half-open TCP
//! flows or NAT ports each host holds, so that one host cannot take what all the others need.
//!
//! The table is open-addressed (linear probing from [`crate::hash::home_slot`], keyed per
//! table so that a host cannot pick addresses that crowd others out) with backward-shift
//! deletion: a host whose counts all fall to zero leaves, and no tombstones accumulate, so
//! the table only ever holds hosts that hold something. A host is placed within
//! [`PROBE_LIMIT`] slots of its home, at most half the slots are used, and nothing allocates
//! after [`HostCounts::new`].
//!
//! When no slot is free near its home, or the table already holds as many hosts as it
//! takes (half its slots), the host is *untracked*: [`HostCounts::charge`] says
//! so and the caller admits it without a count (fail open, counted), since refusing would let
//! whoever fills the table shut every newcomer out. With the table sized for the hosts a
//! worker serves, that only happens under an attack from many addresses.

use std::hash::{BuildHasher, RandomState};
use std::ops::{Index, IndexMut};

/// How far from its home slot a host may be placed.
pub const PROBE_LIMIT: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot<const N: usize> {
    host: u32,
    /// All zero: the slot is vacant (whatever `host` says).
    counts: [u32; N],
}

impl<const N: usize> HostEntry for Slot<N> {
    const VACANT: Slot<N> = Slot {
        host: 0,
        counts: [0; N],
    };

    fn host(&self) -> u32 {
        self.host
    }

    fn is_vacant(&self) -> bool {
        self.counts.iter().all(|&count| count == 0)
    }
}

/// What a [`HostSlots`] table keeps for one host.
pub(crate) trait HostEntry: Copy {
    const VACANT: Self;
    fn host(&self) -> u32;
    /// A vacant entry's host means nothing; the table never holds a host with nothing.
    fn is_vacant(&self) -> bool;
}

/// The table under [`HostCounts`] (and the NAT's port blocks): open-addressed by host address
/// from [`crate::hash::home_slot`] with a per-table seed, each host within [`PROBE_LIMIT`]
/// slots of its home, backward-shift deletion. Allocated once.
#[derive(Debug)]
pub(crate) struct HostSlots<E> {
    slots: Box<[E]>,
    mask: usize,
    seed: u64,
}

impl<E: HostEntry> HostSlots<E> {
    /// Room for `hosts` hosts: twice as many slots, rounded up to a power of two, so at most
    /// half are used. Allocates: call at set-up.
    pub(crate) fn new(hosts: usize) -> Self {
        let len = hosts.max(1).saturating_mul(2).next_power_of_two();
        HostSlots {
            slots: vec![E::VACANT; len].into_boxed_slice(),
            mask: len - 1,
            seed: RandomState::new().hash_one(u64::from_le_bytes(*b"hostlimt")),
        }
    }

    #[inline]
    fn home(&self, host: u32) -> usize {
        crate::hash::home_slot(u64::from(host), self.seed, self.mask)
    }

    /// The address of `host`'s home slot, where its lookup starts: for callers to prefetch.
    #[inline]
    pub(crate) fn home_address(&self, host: u32) -> *const u8 {
        &self.slots[self.home(host)] as *const E as *const u8
    }

    /// Hosts the table takes: half its slots, so that probe sequences stay short (a host
    /// not in the table is known so within two or three slots on average).
    pub(crate) fn room(&self) -> usize {
        self.slots.len() / 2
    }

    /// `Ok(slot)` holding `host`; else `Err(Some(slot))`, the vacant slot where it would go,
    /// or `Err(None)` when there is none within [`PROBE_LIMIT`]. Hosts sit within the limit
    /// of their home and deletion leaves no holes in a probe sequence, so the first vacant
    /// slot ends the search.
    pub(crate) fn find(&self, host: u32) -> Result<usize, Option<usize>> {
        let home = self.home(host);
        for step in 0..PROBE_LIMIT.min(self.slots.len()) {
            let slot = (home + step) & self.mask;
            let entry = &self.slots[slot];
            if entry.is_vacant() {
                return Err(Some(slot));
            }
            if entry.host() == host {
                return Ok(slot);
            }
        }
        Err(None)
    }

    /// Empties `hole` by backward-shift deletion: later hosts of the cluster move into the
    /// hole unless that would put them before their home. Moving a host only brings it
    /// nearer its home.
    pub(crate) fn remove(&mut self, mut hole: usize) {
        let mask = self.mask;
        let mut slot = (hole + 1) & mask;
        for _ in 0..self.slots.len() {
            if self.slots[slot].is_vacant() {
                break;
            }
            let home = self.home(self.slots[slot].host());
            if slot.wrapping_sub(home) & mask >= slot.wrapping_sub(hole) & mask {
                self.slots[hole] = self.slots[slot];
                hole = slot;
            }
            slot = (slot + 1) & mask;
        }
        self.slots[hole] = E::VACANT;
    }
}

impl<E> Index<usize> for HostSlots<E> {
    type Output = E;

    fn index(&self, slot: usize) -> &E {
        &self.slots[slot]
    }
}

impl<E> IndexMut<usize> for HostSlots<E> {
    fn index_mut(&mut self, slot: usize) -> &mut E {
        &mut self.slots[slot]
    }
}

/// Why [`HostCounts::charge`] did not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The host holds `limits[counter]` already: refuse what it asked for.
    AtLimit { counter: usize },
    /// No slot for a new host near its home, or the table holds as many hosts as it takes
    /// (half its slots): admit it uncounted.
    Untracked,
}

/// Where [`HostCounts::check`] found a host, valid while no host enters or leaves the table
/// (a [`HostCounts::charge_checked`] after either looks the host up again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checked {
    slot: usize,
    moves: u64,
}

/// `N` counters per host, each with its own limit.
#[derive(Debug)]
pub struct HostCounts<const N: usize> {
    slots: HostSlots<Slot<N>>,
    limits: [u32; N],
    hosts: usize,
    /// Hosts that have entered or left the table: a [`Checked`] from before is stale (an
    /// entry may take the vacant slot it found, a removal moves hosts).
    moves: u64,
    /// Per counter, how many hosts are at its limit now.
    at_limit: [usize; N],
}

impl<const N: usize> HostCounts<N> {
    /// Room for `hosts` hosts (twice as many slots, rounded up to a power of two). A limit of
    /// 0 is taken as 1. Allocates: call at set-up.
    pub fn new(hosts: usize, limits: [u32; N]) -> Self {
        HostCounts {
            slots: HostSlots::new(hosts),
            limits: limits.map(|limit| limit.max(1)),
            hosts: 0,
            moves: 0,
            at_limit: [0; N],
        }
    }

    pub fn limits(&self) -> [u32; N] {
        self.limits
    }

    /// Hosts holding anything.
    pub fn len(&self) -> usize {
        self.hosts
    }

    pub fn is_empty(&self) -> bool {
        self.hosts == 0
    }

    /// Hosts at the limit of `counter` now.
    pub fn at_limit(&self, counter: usize) -> usize {
        self.at_limit[counter]
    }

    /// Where `host`'s lookup starts: for callers to prefetch before they charge it.
    #[inline]
    pub fn home_address(&self, host: impl Into<u32>) -> *const u8 {
        self.slots.home_address(host.into())
    }

    /// What `host` holds (zeros if nothing, or if it is untracked).
    pub fn counts(&self, host: impl Into<u32>) -> [u32; N] {
        match self.slots.find(host.into()) {
            Ok(slot) => self.slots[slot].counts,
            Err(_) => [0; N],
        }
    }

    /// Whether `host` may take `adds` more: the refusal [`charge`](Self::charge) would give,
    /// without changing anything. Ok holds where the host is, for a
    /// [`charge_checked`](Self::charge_checked) that follows.
    pub fn check(&self, host: impl Into<u32>, adds: [u32; N]) -> Result<Checked, Refusal> {
        let slot = self.find_or_vacant(host.into())?;
        let counts = if self.slots[slot].is_vacant() {
            [0; N]
        } else {
            self.slots[slot].counts
        };
        self.within_limits(&counts, &adds)?;
        Ok(Checked {
            slot,
            moves: self.moves,
        })
    }

    /// [`charge`](Self::charge) after a [`check`](Self::check) of the same host and adds,
    /// without looking the host up again unless a host has entered or left the table since.
    /// Nothing may be charged to this host between the two: its counts are taken as checked.
    pub fn charge_checked(
        &mut self,
        checked: Checked,
        host: impl Into<u32>,
        adds: [u32; N],
    ) -> Result<(), Refusal> {
        let host: u32 = host.into();
        if checked.moves != self.moves {
            return self.charge(host, adds);
        }
        // No host entered or left since the check: the slot is still the host's (or the
        // vacant one it takes).
        self.add_at(checked.slot, host, adds);
        Ok(())
    }

    /// `host`'s slot, or the vacant one it would take; untracked if it has none and the
    /// table has no room for another host (it holds [`HostSlots::room`] hosts: were it let
    /// fill, a flood of new sources would make every lookup probe [`PROBE_LIMIT`] slots).
    fn find_or_vacant(&self, host: u32) -> Result<usize, Refusal> {
        match self.slots.find(host) {
            Ok(slot) => Ok(slot),
            Err(Some(vacant)) if self.hosts < self.slots.room() => Ok(vacant),
            Err(_) => Err(Refusal::Untracked),
        }
    }

    /// Adds `adds` to what `host` holds if every counter it raises stays within its limit;
    /// otherwise changes nothing.
    pub fn charge(&mut self, host: impl Into<u32>, adds: [u32; N]) -> Result<(), Refusal> {
        let host: u32 = host.into();
        let slot = self.find_or_vacant(host)?;
        self.within_limits(&self.slots[slot].counts, &adds)?;
        self.add_at(slot, host, adds);
        Ok(())
    }

    /// Adds `adds` whatever the limits say, for a change of state the caller cannot refuse
    /// (a closed TCP flow opened again). False if the host is untracked.
    pub fn force(&mut self, host: impl Into<u32>, adds: [u32; N]) -> bool {
        let host: u32 = host.into();
        let Ok(slot) = self.find_or_vacant(host) else {
            return false;
        };
        self.add_at(slot, host, adds);
        true
    }

    /// Takes back what an earlier `charge` or `force` added (saturating at zero). A host
    /// left holding nothing leaves the table.
    pub fn credit(&mut self, host: impl Into<u32>, subs: [u32; N]) {
        let Ok(slot) = self.slots.find(host.into()) else {
            return;
        };
        let entry = &mut self.slots[slot];
        for (counter, sub) in subs.into_iter().enumerate() {
            let before = entry.counts[counter];
            let after = before.saturating_sub(sub);
            entry.counts[counter] = after;
            if before >= self.limits[counter] && after < self.limits[counter] {
                self.at_limit[counter] -= 1;
            }
        }
        if entry.is_vacant() {
            self.hosts -= 1;
            self.moves += 1;
            self.slots.remove(slot);
        }
    }

    fn within_limits(&self, counts: &[u32; N], adds: &[u32; N]) -> Result<(), Refusal> {
        for counter in 0..N {
            if adds[counter] > 0
                && counts[counter].saturating_add(adds[counter]) > self.limits[counter]
            {
                return Err(Refusal::AtLimit { counter });
            }
        }
        Ok(())
    }

    fn add_at(&mut self, slot: usize, host: u32, adds: [u32; N]) {
        let entry = &mut self.slots[slot];
        if entry.is_vacant() {
            if adds.iter().all(|&add| add == 0) {
                return;
            }
            entry.host = host;
            self.hosts += 1;
            self.moves += 1;
        }
        for (counter, add) in adds.into_iter().enumerate() {
            let before = entry.counts[counter];
            let after = before.saturating_add(add);
            entry.counts[counter] = after;
            if before < self.limits[counter] && after >= self.limits[counter] {
                self.at_limit[counter] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::net::Ipv4Addr;

    use proptest::prelude::*;

    use super::*;

    fn host(n: u32) -> Ipv4Addr {
        Ipv4Addr::from(0x0a00_0000 + n)
    }

    #[test]
    fn a_host_at_its_limit_is_refused_and_others_are_not() {
        let mut hosts = HostCounts::new(16, [3, 1]);
        for _ in 0..3 {
            assert_eq!(hosts.charge(host(1), [1, 0]), Ok(()));
        }
        assert_eq!(
            hosts.charge(host(1), [1, 0]),
            Err(Refusal::AtLimit { counter: 0 })
        );
        assert_eq!(
            hosts.check(host(1), [1, 0]),
            Err(Refusal::AtLimit { counter: 0 })
        );
        assert_eq!(hosts.at_limit(0), 1);
        // The second counter is its own limit; a refusal changes nothing.
        assert_eq!(hosts.charge(host(1), [0, 1]), Ok(()));
        assert_eq!(
            hosts.charge(host(1), [1, 1]),
            Err(Refusal::AtLimit { counter: 0 })
        );
        assert_eq!(hosts.counts(host(1)), [3, 1]);
        assert_eq!(hosts.charge(host(2), [1, 1]), Ok(()));
        assert_eq!((hosts.len(), hosts.at_limit(1)), (2, 2));
        hosts.credit(host(1), [1, 1]);
        assert_eq!(hosts.counts(host(1)), [2, 0]);
        assert_eq!((hosts.at_limit(0), hosts.at_limit(1)), (0, 1));
        assert_eq!(hosts.charge(host(1), [1, 0]), Ok(()));
        hosts.credit(host(1), [3, 0]);
        hosts.credit(host(2), [1, 1]);
        assert!(hosts.is_empty());
        assert_eq!(hosts.counts(host(1)), [0, 0]);
    }

    #[test]
    fn a_full_table_leaves_newcomers_untracked_until_a_host_leaves() {
        // Four slots: room for two hosts, though a third would find a vacant slot.
        let mut hosts = HostCounts::new(2, [10]);
        assert_eq!(hosts.charge(host(1), [1]), Ok(()));
        assert_eq!(hosts.charge(host(2), [1]), Ok(()));
        assert_eq!(hosts.charge(host(3), [1]), Err(Refusal::Untracked));
        assert_eq!(hosts.check(host(3), [1]), Err(Refusal::Untracked));
        assert!(!hosts.force(host(3), [1]));
        hosts.credit(host(3), [1]);
        assert_eq!(hosts.len(), 2);
        // Hosts in the table still count.
        assert_eq!(hosts.charge(host(2), [1]), Ok(()));
        hosts.credit(host(1), [1]);
        assert_eq!(hosts.charge(host(3), [1]), Ok(()));
        assert_eq!(hosts.counts(host(2)), [2]);
        assert_eq!(hosts.counts(host(3)), [1]);
    }

    proptest! {
        /// Against a map: counts, limits and the at-limit gauge agree after any sequence of
        /// charges and credits over few hosts, in a table small enough to collide. Charges
        /// are made either at once or as a check and a `charge_checked`, as the conntrack
        /// table does, with another host's credit (which may move hosts) or charge (which
        /// may take the vacant slot the check found) between.
        #[test]
        fn agrees_with_a_map(
            ops in proptest::collection::vec(
                (0..12u32, any::<bool>(), prop::option::of((0..12u32, any::<bool>()))),
                0..400,
            ),
        ) {
            let limit = 3;
            let mut hosts = HostCounts::new(8, [limit]);
            let mut model: HashMap<u32, u32> = HashMap::new();
            let credit = |hosts: &mut HostCounts<1>, model: &mut HashMap<u32, u32>, n: u32| {
                if let Some(count) = model.get_mut(&n) {
                    hosts.credit(host(n), [1]);
                    *count -= 1;
                    if *count == 0 {
                        model.remove(&n);
                    }
                }
            };
            let charge = |hosts: &mut HostCounts<1>, model: &mut HashMap<u32, u32>, n: u32| {
                if hosts.charge(host(n), [1]).is_ok() {
                    *model.entry(n).or_default() += 1;
                }
            };
            for (n, add, between) in ops {
                if add {
                    let charged = match between {
                        None => hosts.charge(host(n), [1]),
                        Some((other, charges)) => hosts.check(host(n), [1]).and_then(|checked| {
                            match (other != n, charges) {
                                (true, true) => charge(&mut hosts, &mut model, other),
                                (true, false) => credit(&mut hosts, &mut model, other),
                                (false, _) => {}
                            }
                            hosts.charge_checked(checked, host(n), [1])
                        }),
                    };
                    match charged {
                        Ok(()) => *model.entry(n).or_default() += 1,
                        Err(Refusal::AtLimit { .. }) => prop_assert_eq!(model[&n], limit),
                        Err(Refusal::Untracked) => prop_assert!(!model.contains_key(&n)),
                    }
                } else {
                    credit(&mut hosts, &mut model, n);
                }
                prop_assert_eq!(hosts.len(), model.len());
                for (&n, &count) in &model {
                    prop_assert_eq!(hosts.counts(host(n)), [count]);
                }
                let full = model.values().filter(|&&count| count == limit).count();
                prop_assert_eq!(hosts.at_limit(0), full);
            }
        }
    }
}

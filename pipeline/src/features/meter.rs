//! Per-LAN-host traffic meter: bytes and packets each host sent (up) and received (down).
//!
//! Each worker owns one [`HostMeter`] and is its only writer; a control or metrics thread
//! reads it concurrently through an `Arc`. Writes are a plain load and store per counter (no
//! locked instruction), as in [`crate::counters::Counter`]: a single writer cannot lose an
//! update, and the atomics only make the concurrent read well-defined.
//!
//! The table is open addressing over a fixed number of slots with no removal: a home LAN has
//! tens of hosts, and a meter that forgot hosts would under-report exactly the usage it exists
//! to show. A host that finds no free slot within its probe window is counted in a separate
//! overflow entry, so no traffic ever goes uncounted. IPv6 traffic is a LAN host's when the
//! host also has an IPv4 neighbour entry (the same MAC); what no one IPv4 host can be found
//! for (an IPv6-only device, a MAC several hosts share) is counted in an entry of its own,
//! [`HostMeter::unattributed`].
//!
//! # What a concurrent reader sees
//!
//! A slot's key is written last, with `Release`, after the first packet's counts; readers
//! load it with `Acquire`. So a reader either does not see a slot at all or sees its full
//! key together with at least the counts of the host's first packet: never a torn key, never
//! a host listed with zero packets. Because keys are never rewritten, a slot once visible
//! stays with the same host forever, and each counter only grows (modulo `u64` wrap), so
//! successive snapshots are monotonic per host. The four counters of one host are not read
//! as a unit: a snapshot may pair the byte count of one packet with the packet count of the
//! previous one. Totals are exact once the writer is quiescent.
//!
//! All of this relies on there being one writer per meter. Two threads calling `record_*`
//! on the same meter stay memory-safe but may lose counts and may both claim one free slot,
//! mixing two hosts' traffic.

use std::collections::hash_map::RandomState;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasher;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many slots a host's lookup may inspect. Bounds the per-packet cost for hosts that
/// overflowed (they probe the whole window on every packet). With linear probing at half
/// occupancy a run this long is rare enough that 256 hosts in 512 slots overflow in well
/// under one table in a thousand.
const PROBE_LIMIT: usize = 32;

/// A slot's key: the IPv4 address with a presence bit above it, so that 0 can mean "empty"
/// without making 0.0.0.0 unmeterable.
const PRESENT: u64 = 1 << 32;

/// Single-writer add; see [`crate::counters::Counter::add`].
#[inline]
fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

#[derive(Debug, Default)]
struct Slot {
    key: AtomicU64,
    up_bytes: AtomicU64,
    up_packets: AtomicU64,
    down_bytes: AtomicU64,
    down_packets: AtomicU64,
}

impl Slot {
    #[inline]
    fn record(&self, direction: Dir, bytes: u64) {
        match direction {
            Dir::Up => {
                add(&self.up_bytes, bytes);
                add(&self.up_packets, 1);
            }
            Dir::Down => {
                add(&self.down_bytes, bytes);
                add(&self.down_packets, 1);
            }
        }
    }

    fn usage(&self, ip: Ipv4Addr) -> HostUsage {
        HostUsage {
            ip,
            up_bytes: self.up_bytes.load(Ordering::Relaxed),
            up_packets: self.up_packets.load(Ordering::Relaxed),
            down_bytes: self.down_bytes.load(Ordering::Relaxed),
            down_packets: self.down_packets.load(Ordering::Relaxed),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Dir {
    Up,
    Down,
}

/// One host's traffic as read from a meter (or summed over several).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostUsage {
    pub ip: Ipv4Addr,
    pub up_bytes: u64,
    pub up_packets: u64,
    pub down_bytes: u64,
    pub down_packets: u64,
}

impl Default for HostUsage {
    fn default() -> Self {
        HostUsage {
            ip: Ipv4Addr::UNSPECIFIED,
            up_bytes: 0,
            up_packets: 0,
            down_bytes: 0,
            down_packets: 0,
        }
    }
}

impl HostUsage {
    pub fn total_bytes(&self) -> u64 {
        self.up_bytes.wrapping_add(self.down_bytes)
    }

    pub fn total_packets(&self) -> u64 {
        self.up_packets.wrapping_add(self.down_packets)
    }

    fn accumulate(&mut self, other: &HostUsage) {
        self.up_bytes = self.up_bytes.wrapping_add(other.up_bytes);
        self.up_packets = self.up_packets.wrapping_add(other.up_packets);
        self.down_bytes = self.down_bytes.wrapping_add(other.down_bytes);
        self.down_packets = self.down_packets.wrapping_add(other.down_packets);
    }
}

/// One worker's per-host meter. Written by that worker only; read by anyone.
#[derive(Debug)]
pub struct HostMeter {
    slots: Box<[Slot]>,
    mask: usize,
    /// Hash key, random per meter so that a LAN host cannot choose addresses that all
    /// collide and push other hosts into the overflow entry.
    seed: u64,
    /// Occupied slots; written by the owner, read by metrics.
    used: AtomicU64,
    /// Traffic of hosts that found no slot.
    overflow: Slot,
    /// IPv6 traffic of LAN hosts without an IPv4 address to count it under.
    unattributed: Slot,
}

impl HostMeter {
    /// A meter with `capacity` slots, rounded up to a power of two (at least 1). Allocates;
    /// call at set-up, not per packet. Size it at about twice the hosts expected: a host is
    /// placed within `PROBE_LIMIT` (32) slots of its hash position, and long runs of occupied
    /// slots become likely above half occupancy.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        let slots: Box<[Slot]> = (0..capacity).map(|_| Slot::default()).collect();
        HostMeter {
            slots,
            mask: capacity - 1,
            seed: RandomState::new().hash_one(u64::from_le_bytes(*b"hostmetr")),
            used: AtomicU64::new(0),
            overflow: Slot::default(),
            unattributed: Slot::default(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Hosts with a slot of their own.
    pub fn len(&self) -> usize {
        // Bounded by the slot count, which is a usize.
        usize::try_from(self.used.load(Ordering::Relaxed)).unwrap_or(usize::MAX)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts a packet the LAN host `host` sent. Owning worker only.
    #[inline]
    pub fn record_up(&self, host: Ipv4Addr, bytes: u64) {
        self.record(host, Dir::Up, bytes);
    }

    /// Counts a packet the LAN host `host` received. Owning worker only.
    #[inline]
    pub fn record_down(&self, host: Ipv4Addr, bytes: u64) {
        self.record(host, Dir::Down, bytes);
    }

    /// Counts an IPv6 packet a LAN host without an IPv4 address sent. Owning worker only.
    #[inline]
    pub fn record_unattributed_up(&self, bytes: u64) {
        self.unattributed.record(Dir::Up, bytes);
    }

    /// Counts an IPv6 packet a LAN host without an IPv4 address received. Owning worker only.
    #[inline]
    pub fn record_unattributed_down(&self, bytes: u64) {
        self.unattributed.record(Dir::Down, bytes);
    }

    #[inline]
    fn home(&self, key: u64) -> usize {
        crate::hash::home_slot(key, self.seed, self.mask)
    }

    #[inline]
    fn record(&self, host: Ipv4Addr, direction: Dir, bytes: u64) {
        let key = PRESENT | u64::from(u32::from(host));
        let home = self.home(key);
        let probes = self.slots.len().min(PROBE_LIMIT);
        for i in 0..probes {
            let slot = &self.slots[(home + i) & self.mask];
            // Relaxed suffices: only this thread ever writes keys.
            let seen = slot.key.load(Ordering::Relaxed);
            if seen == key {
                slot.record(direction, bytes);
                return;
            }
            if seen == 0 {
                // Counts first, key last: a reader that sees the key sees these counts.
                slot.record(direction, bytes);
                slot.key.store(key, Ordering::Release);
                add(&self.used, 1);
                return;
            }
        }
        self.overflow.record(direction, bytes);
    }

    /// Every host with a slot, as of now. Safe to call from any thread while the owner
    /// writes; see the module documentation for what a concurrent read guarantees.
    pub fn snapshot(&self) -> impl Iterator<Item = HostUsage> + '_ {
        self.slots.iter().filter_map(|slot| {
            let key = slot.key.load(Ordering::Acquire);
            if key & PRESENT == 0 {
                return None;
            }
            // The low 32 bits are the address; the presence bit is above them.
            Some(slot.usage(Ipv4Addr::from(key as u32)))
        })
    }

    /// Traffic of hosts that found no slot, under the address 0.0.0.0.
    pub fn overflow(&self) -> HostUsage {
        self.overflow.usage(Ipv4Addr::UNSPECIFIED)
    }

    /// IPv6 traffic of LAN hosts that have no IPv4 address, under the address 0.0.0.0.
    pub fn unattributed(&self) -> HostUsage {
        self.unattributed.usage(Ipv4Addr::UNSPECIFIED)
    }

    /// Packets counted in the overflow entry rather than under their host.
    pub fn overflowed_packets(&self) -> u64 {
        self.overflow().total_packets()
    }
}

/// Sums several workers' snapshots per host, sorted by address. For the control thread:
/// allocates.
pub fn merge<S>(snapshots: S) -> Vec<HostUsage>
where
    S: IntoIterator,
    S::Item: IntoIterator<Item = HostUsage>,
{
    let mut totals: HashMap<Ipv4Addr, HostUsage> = HashMap::new();
    for snapshot in snapshots {
        for usage in snapshot {
            totals
                .entry(usage.ip)
                .or_insert(HostUsage {
                    ip: usage.ip,
                    ..HostUsage::default()
                })
                .accumulate(&usage);
        }
    }
    let mut merged: Vec<HostUsage> = totals.into_values().collect();
    merged.sort_unstable_by_key(|usage| usage.ip);
    merged
}

/// Ordering for the top-N heap: more bytes first, then the lower address, so the result
/// does not depend on hash-map order.
#[derive(PartialEq, Eq)]
struct ByTotal(HostUsage);

impl Ord for ByTotal {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .0
            .total_bytes()
            .cmp(&self.0.total_bytes())
            .then(self.0.ip.cmp(&other.0.ip))
    }
}

impl PartialOrd for ByTotal {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The `n` hosts with the most bytes (up plus down) over all `snapshots`, most first; ties
/// go to the lower address. Keeps at most `n` hosts in its heap whatever the host count.
pub fn top_n<S>(snapshots: S, n: usize) -> Vec<HostUsage>
where
    S: IntoIterator,
    S::Item: IntoIterator<Item = HostUsage>,
{
    if n == 0 {
        return Vec::new();
    }
    // `ByTotal` orders "better" hosts as smaller, so the max-heap's top is the worst kept
    // host: the one to evict when a better one arrives.
    let mut heap: BinaryHeap<ByTotal> = BinaryHeap::with_capacity(n + 1);
    for usage in merge(snapshots) {
        heap.push(ByTotal(usage));
        if heap.len() > n {
            heap.pop();
        }
    }
    heap.into_sorted_vec()
        .into_iter()
        .map(|ByTotal(usage)| usage)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn host(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, last)
    }

    fn find(meter: &HostMeter, ip: Ipv4Addr) -> Option<HostUsage> {
        meter.snapshot().find(|usage| usage.ip == ip)
    }

    #[test]
    fn counts_up_and_down_per_host() {
        let meter = HostMeter::new(16);
        meter.record_up(host(2), 100);
        meter.record_up(host(2), 50);
        meter.record_down(host(2), 1_000);
        meter.record_down(host(3), 60);
        assert_eq!(
            find(&meter, host(2)),
            Some(HostUsage {
                ip: host(2),
                up_bytes: 150,
                up_packets: 2,
                down_bytes: 1_000,
                down_packets: 1,
            })
        );
        assert_eq!(
            find(&meter, host(3)),
            Some(HostUsage {
                ip: host(3),
                down_bytes: 60,
                down_packets: 1,
                ..HostUsage::default()
            })
        );
        assert_eq!(meter.len(), 2);
        assert_eq!(meter.overflowed_packets(), 0);
    }

    #[test]
    fn capacity_rounds_up_to_a_power_of_two() {
        assert_eq!(HostMeter::new(0).capacity(), 1);
        assert_eq!(HostMeter::new(5).capacity(), 8);
        assert_eq!(HostMeter::new(64).capacity(), 64);
    }

    #[test]
    fn unspecified_address_is_a_host_like_any_other() {
        let meter = HostMeter::new(4);
        meter.record_up(Ipv4Addr::UNSPECIFIED, 10);
        assert_eq!(find(&meter, Ipv4Addr::UNSPECIFIED).unwrap().up_bytes, 10);
        assert_eq!(meter.overflowed_packets(), 0);
    }

    #[test]
    fn unattributed_traffic_is_kept_apart_from_hosts_and_overflow() {
        let meter = HostMeter::new(4);
        meter.record_unattributed_up(100);
        meter.record_unattributed_down(40);
        meter.record_unattributed_down(2);
        let unattributed = meter.unattributed();
        assert_eq!((unattributed.up_bytes, unattributed.up_packets), (100, 1));
        assert_eq!(
            (unattributed.down_bytes, unattributed.down_packets),
            (42, 2)
        );
        assert!(meter.is_empty());
        assert_eq!(meter.overflowed_packets(), 0);
    }

    #[test]
    fn full_table_counts_into_overflow_and_drops_nothing() {
        let meter = HostMeter::new(4);
        for last in 1..=10 {
            meter.record_up(host(last), 100);
            meter.record_down(host(last), 10);
        }
        assert_eq!(meter.len(), 4);
        assert_eq!(meter.snapshot().count(), 4);
        let overflow = meter.overflow();
        assert_eq!(overflow.up_packets, 6);
        assert_eq!(overflow.down_bytes, 60);
        assert_eq!(meter.overflowed_packets(), 12);
        let counted: u64 = meter.snapshot().map(|u| u.total_bytes()).sum();
        assert_eq!(counted + overflow.total_bytes(), 10 * 110);
        // Hosts that got a slot keep counting there.
        let placed = meter.snapshot().next().unwrap().ip;
        meter.record_up(placed, 1);
        assert_eq!(meter.overflowed_packets(), 12);
    }

    #[test]
    fn large_table_places_every_host_of_a_lan() {
        let meter = HostMeter::new(1024);
        for last in 0..=255 {
            meter.record_up(host(last), 1);
        }
        assert_eq!(meter.len(), 256);
        assert_eq!(meter.overflowed_packets(), 0);
    }

    #[test]
    fn merge_sums_per_host_across_workers() {
        let a = HostMeter::new(8);
        let b = HostMeter::new(8);
        a.record_up(host(2), 100);
        b.record_up(host(2), 20);
        b.record_down(host(2), 5);
        b.record_down(host(9), 7);
        let merged = merge([a.snapshot(), b.snapshot()]);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].ip, host(2));
        assert_eq!(
            (
                merged[0].up_bytes,
                merged[0].up_packets,
                merged[0].down_bytes
            ),
            (120, 2, 5)
        );
        assert_eq!(merged[1].ip, host(9));
        assert_eq!(merged[1].total_bytes(), 7);
    }

    #[test]
    fn top_n_orders_by_total_bytes_and_is_bounded() {
        let a = HostMeter::new(64);
        let b = HostMeter::new(64);
        for last in 1..=20u8 {
            a.record_up(host(last), u64::from(last) * 10);
            b.record_down(host(last), u64::from(last));
        }
        // Ties break toward the lower address.
        a.record_up(host(30), 20 * 11);
        let top = top_n([a.snapshot(), b.snapshot()], 3);
        let ips: Vec<Ipv4Addr> = top.iter().map(|u| u.ip).collect();
        assert_eq!(ips, vec![host(20), host(30), host(19)]);
        assert_eq!(top[0].total_bytes(), 220);
        assert!(top_n([a.snapshot()], 0).is_empty());
        assert_eq!(top_n([a.snapshot()], 100).len(), 21);
    }

    #[test]
    fn reader_sees_consistent_entries_while_the_writer_inserts() {
        const HOSTS: u32 = 200;
        const ROUNDS: u64 = 50;
        let meter = Arc::new(HostMeter::new(512));
        let done = Arc::new(AtomicBool::new(false));
        let base = u32::from(Ipv4Addr::new(10, 0, 0, 0));

        let reader = {
            let meter = Arc::clone(&meter);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut last: HashMap<Ipv4Addr, (u64, u64)> = HashMap::new();
                let mut snapshots = 0u64;
                loop {
                    let finished = done.load(Ordering::Acquire);
                    let mut seen = std::collections::HashSet::new();
                    for usage in meter.snapshot() {
                        let offset = u32::from(usage.ip).wrapping_sub(base);
                        assert!(offset < HOSTS, "half-written key {}", usage.ip);
                        assert!(seen.insert(usage.ip), "{} listed twice", usage.ip);
                        // The first packet's counts are published with the key.
                        assert!(usage.up_packets >= 1 && usage.up_bytes >= 100);
                        let previous = last.insert(usage.ip, (usage.up_packets, usage.up_bytes));
                        if let Some((packets, bytes)) = previous {
                            assert!(usage.up_packets >= packets && usage.up_bytes >= bytes);
                        }
                    }
                    snapshots += 1;
                    if finished {
                        return (last, snapshots);
                    }
                }
            })
        };

        for round in 0..ROUNDS {
            for offset in 0..HOSTS {
                // Hosts appear over time, so inserts keep happening while the reader reads.
                if u64::from(offset) <= round * u64::from(HOSTS) / 10 {
                    meter.record_up(Ipv4Addr::from(base + offset), 100);
                }
            }
        }
        done.store(true, Ordering::Release);
        let (last, snapshots) = reader.join().unwrap();
        assert!(snapshots >= 1);
        assert_eq!(meter.overflowed_packets(), 0);
        // The final read happened after the writer finished, so it is exact.
        let total_packets: u64 = last.values().map(|(packets, _)| packets).sum();
        let written: u64 = (0..ROUNDS)
            .map(|round| {
                (0..u64::from(HOSTS))
                    .filter(|o| *o <= round * u64::from(HOSTS) / 10)
                    .count() as u64
            })
            .sum();
        assert_eq!(total_packets, written);
        assert_eq!(last.len(), HOSTS as usize);
    }
}

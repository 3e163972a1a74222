//! Per-worker counters: written by their worker only, read by metrics at any time.
//!
//! A single writer lets each increment be a plain load and store (no locked instruction);
//! the atomics only make the concurrent read by a scrape well-defined.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::verdict::{DropReason, InvalidReason, Verdict};

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker may call this: two writers would lose updates.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value the owning worker sets and anyone may read.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    #[inline]
    pub fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The most interfaces (ports and VLAN subinterfaces) a gateway has: each has its counters in
/// every worker's [`WorkerCounters`], allocated with them.
pub const MAX_INTERFACES: usize = 64;

/// One interface's traffic on one worker: what arrived by it (counted once, by the worker
/// that received it) and what left by it.
#[derive(Debug, Default)]
pub struct InterfaceCounters {
    pub rx_packets: Counter,
    pub rx_bytes: Counter,
    pub tx_packets: Counter,
    pub tx_bytes: Counter,
}

impl InterfaceCounters {
    #[inline]
    pub fn count_rx(&self, bytes: usize) {
        self.rx_packets.inc();
        self.rx_bytes.add(bytes as u64);
    }

    #[inline]
    pub fn count_tx(&self, bytes: usize) {
        self.tx_packets.inc();
        self.tx_bytes.add(bytes as u64);
    }
}

/// One worker's counters, on cache lines of their own so no other core's writes share them.
#[derive(Debug)]
#[repr(align(64))]
pub struct WorkerCounters {
    pub rx_packets: Counter,
    /// RX bursts that returned packets, and those that came back full: the share of full
    /// ones says how close the worker is to falling behind, where busy cycles cannot (a loop
    /// that received one packet counts as busy).
    pub rx_bursts: Counter,
    pub rx_full_bursts: Counter,
    pub transmitted: Counter,
    /// Packets the established fast path decided (the burst path's shortcuts), whatever it decided.
    pub fast_path: Counter,
    pub fragmented: Counter,
    pub to_control: Counter,
    /// Packets for the kernel twins (punted), and what the kernel sent on them to the wire.
    pub punted: Counter,
    pub from_twins: Counter,
    pub handoffs_sent: Counter,
    pub handoffs_received: Counter,
    pub icmp_errors_sent: Counter,
    pub icmp_errors_rate_limited: Counter,
    /// TCP SYNs whose MSS option was lowered to an interface's `tcp_mss`.
    pub mss_clamped: Counter,
    /// SYNs toward port forwards the SYN proxy answered with a cookie (the half-open table
    /// full), and the ACKs that returned one, each opening a flow.
    pub syn_cookies_sent: Counter,
    pub syn_cookies_accepted: Counter,
    /// Window updates the SYN proxy could not send the client (no room or no next hop):
    /// the client learns the window from its next zero-window probe instead.
    pub syn_proxy_updates_lost: Counter,
    /// IPv6 Router Advertisements sent, solicited or not (by the control thread).
    pub router_adverts: Counter,
    pub busy_cycles: Counter,
    pub idle_cycles: Counter,
    pub conntrack_entries: Gauge,
    /// Flows in the worker's IPv6 table.
    pub conntrack_ipv6_entries: Gauge,
    /// IPv6 neighbours in the control thread's table.
    pub ipv6_neighbors: Gauge,
    pub conntrack_capacity: Gauge,
    pub conntrack_setups: Gauge,
    pub conntrack_expirations: Gauge,
    pub conntrack_evictions: Gauge,
    pub nat_ports_in_use: Gauge,
    pub nat_ports_available: Gauge,
    /// With `nat.port_block_size`: the blocks hosts hold on this worker, of how many.
    pub nat_port_blocks_in_use: Gauge,
    pub nat_port_blocks: Gauge,
    /// Half-open TCP flows in the worker's table.
    pub conntrack_half_open: Gauge,
    /// Hosts at their flow, half-open and NAT port limits now.
    pub hosts_at_flow_limit: Gauge,
    pub hosts_at_half_open_limit: Gauge,
    pub hosts_at_nat_port_limit: Gauge,
    /// Packets the flow tracker refused (all dropped as `conntrack_invalid`), by why: the
    /// tracker's reasons, then a first packet whose tuple another flow holds, then one whose
    /// two directions are the same tuple.
    pub conntrack_invalid: [Gauge; InvalidReason::COUNT],
    pub conntrack_tuple_exists: Gauge,
    /// TCP segments behind the window (already acknowledged) passed on unchanged.
    pub conntrack_stale_segments: Gauge,
    pub conntrack_ambiguous_tuple: Gauge,
    drops: [Counter; DropReason::COUNT],
    /// Of `drops`, those of IPv6 packets: the metrics' family split.
    ipv6_drops: [Counter; DropReason::COUNT],
    interfaces: [InterfaceCounters; MAX_INTERFACES],
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            rx_packets: Counter::default(),
            rx_bursts: Counter::default(),
            rx_full_bursts: Counter::default(),
            transmitted: Counter::default(),
            fast_path: Counter::default(),
            fragmented: Counter::default(),
            to_control: Counter::default(),
            punted: Counter::default(),
            from_twins: Counter::default(),
            handoffs_sent: Counter::default(),
            handoffs_received: Counter::default(),
            icmp_errors_sent: Counter::default(),
            icmp_errors_rate_limited: Counter::default(),
            mss_clamped: Counter::default(),
            syn_cookies_sent: Counter::default(),
            syn_cookies_accepted: Counter::default(),
            syn_proxy_updates_lost: Counter::default(),
            router_adverts: Counter::default(),
            busy_cycles: Counter::default(),
            idle_cycles: Counter::default(),
            conntrack_entries: Gauge::default(),
            conntrack_ipv6_entries: Gauge::default(),
            ipv6_neighbors: Gauge::default(),
            conntrack_capacity: Gauge::default(),
            conntrack_setups: Gauge::default(),
            conntrack_expirations: Gauge::default(),
            conntrack_evictions: Gauge::default(),
            nat_ports_in_use: Gauge::default(),
            nat_ports_available: Gauge::default(),
            nat_port_blocks_in_use: Gauge::default(),
            nat_port_blocks: Gauge::default(),
            conntrack_half_open: Gauge::default(),
            hosts_at_flow_limit: Gauge::default(),
            hosts_at_half_open_limit: Gauge::default(),
            hosts_at_nat_port_limit: Gauge::default(),
            conntrack_invalid: std::array::from_fn(|_| Gauge::default()),
            conntrack_tuple_exists: Gauge::default(),
            conntrack_stale_segments: Gauge::default(),
            conntrack_ambiguous_tuple: Gauge::default(),
            drops: std::array::from_fn(|_| Counter::default()),
            ipv6_drops: std::array::from_fn(|_| Counter::default()),
            interfaces: std::array::from_fn(|_| InterfaceCounters::default()),
        }
    }
}

impl WorkerCounters {
    /// Interface `iface`'s counters; None beyond [`MAX_INTERFACES`] (config validation keeps
    /// every interface below it).
    #[inline]
    pub fn interface(&self, iface: u16) -> Option<&InterfaceCounters> {
        self.interfaces.get(usize::from(iface))
    }

    #[inline]
    pub fn record_drop(&self, reason: DropReason) {
        self.drops[reason as usize].inc();
    }

    #[inline]
    pub fn record_drops(&self, reason: DropReason, n: u64) {
        self.drops[reason as usize].add(n);
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize].get()
    }

    /// Marks a drop counted under `reason` (by [`record_drop`](Self::record_drop) or
    /// [`count`](Self::count)) as an IPv6 packet's.
    #[inline]
    pub fn record_ipv6_drop(&self, reason: DropReason) {
        self.ipv6_drops[reason as usize].inc();
    }

    /// IPv6 packets among [`dropped`](Self::dropped)`(reason)`.
    pub fn dropped_ipv6(&self, reason: DropReason) -> u64 {
        self.ipv6_drops[reason as usize].get()
    }

    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().map(Counter::get).sum()
    }

    /// Counts what the pipeline decided. Transmit counts are the worker's, after tx_burst.
    #[inline]
    pub fn count(&self, verdict: &Verdict) {
        match verdict {
            Verdict::Drop(reason) => self.record_drop(*reason),
            Verdict::Control(_) => self.to_control.inc(),
            Verdict::Fragment { .. } => self.fragmented.inc(),
            Verdict::Punt { .. } => self.punted.inc(),
            Verdict::Transmit { .. } | Verdict::Handoff { .. } => {}
        }
    }
}

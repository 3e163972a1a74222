//! The ports' counters and links, read in one place. The control thread polls every port's
//! stats and extended stats every [`STATS_INTERVAL`] whatever Prometheus does, and samples
//! links every [`LINK_INTERVAL`]; a scrape or a `ctl show interfaces` polls the stats too,
//! under the same lock, so what they show is fresh and no two threads read a port at once.
//!
//! Why poll without a scrape: the ixgbe guide says its hardware counters must be read at
//! least every 4 min 48 s at 10 Gbit/s line rate or they wrap, so a Prometheus outage would
//! corrupt the totals. Why accumulate: a driver's counters restart from zero when the port
//! is reset, and Prometheus counters must not go backwards; each reading adds what grew since
//! the last one (all of it after a reset) to a 64-bit total.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::dpdk::{PortInfo, PortMonitor, PortStats};

/// How often the control thread reads every port's counters: well inside ixgbe's 4 min 48 s.
pub const STATS_INTERVAL: Duration = Duration::from_secs(10);
/// How often it samples the links, so that a flap between two scrapes is still counted.
pub const LINK_INTERVAL: Duration = Duration::from_millis(100);

/// What grew from `last` to `now`: everything, when the counter went back (a reset).
fn growth(last: u64, now: u64) -> u64 {
    if now >= last {
        now - last
    } else {
        now
    }
}

/// 64-bit totals of one port's counters across readings.
#[derive(Debug, Default)]
pub struct PortTotals {
    /// The last reading, to measure growth against.
    last: PortStats,
    last_xstats: Vec<u64>,
    pub stats: PortStats,
    /// One per name of [`WatchedPort::xstat_names`].
    pub xstats: Vec<u64>,
    /// How many readings failed (the driver refused), for the logs.
    failures: u64,
    /// The totals when the control thread's last periodic poll closed a window, and when.
    window_start: Option<(Instant, PortStats)>,
    /// Over the last window the control thread closed ([`STATS_INTERVAL`], 10 s).
    pub rates: Rates,
}

/// A port's packet and bit rates over one window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    pub rx_packets_per_sec: f64,
    pub tx_packets_per_sec: f64,
    pub rx_bits_per_sec: f64,
    pub tx_bits_per_sec: f64,
    /// The window's length; 0 until two periodic polls have run.
    pub over_secs: f64,
}

impl PortTotals {
    /// Ends the rate window at `at` (after a reading) and starts the next.
    pub fn close_window(&mut self, at: Instant) {
        if let Some((start, before)) = self.window_start {
            let secs = at.saturating_duration_since(start).as_secs_f64();
            if secs > 0.0 {
                let per_sec = |now: u64, then: u64| now.saturating_sub(then) as f64 / secs;
                self.rates = Rates {
                    rx_packets_per_sec: per_sec(self.stats.rx_packets, before.rx_packets),
                    tx_packets_per_sec: per_sec(self.stats.tx_packets, before.tx_packets),
                    rx_bits_per_sec: 8.0 * per_sec(self.stats.rx_bytes, before.rx_bytes),
                    tx_bits_per_sec: 8.0 * per_sec(self.stats.tx_bytes, before.tx_bytes),
                    over_secs: secs,
                };
            }
        }
        self.window_start = Some((at, self.stats));
    }

    /// Adds one reading of the counters.
    pub fn add(&mut self, now: &PortStats, now_xstats: &[u64]) {
        let mut grown = *now;
        grown.zip_counters_mut(&self.last, |now, last| *now = growth(last, *now));
        self.stats
            .zip_counters_mut(&grown, |total, grown| *total += grown);
        self.last = *now;
        self.xstats.resize(now_xstats.len(), 0);
        self.last_xstats.resize(now_xstats.len(), 0);
        for ((total, last), &now) in self
            .xstats
            .iter_mut()
            .zip(&mut self.last_xstats)
            .zip(now_xstats)
        {
            *total += growth(*last, now);
            *last = now;
        }
    }
}

/// A port's link, packed into one word: up (bit 32) and speed in Mbit/s (low 32 bits).
fn pack_link(up: bool, speed_mbps: u32) -> u64 {
    u64::from(up) << 32 | u64::from(speed_mbps)
}

fn unpack_link(word: u64) -> (bool, u32) {
    (word >> 32 & 1 != 0, word as u32)
}

pub struct WatchedPort {
    pub name: String,
    /// Queues whose counters are exported (one per worker).
    pub queues: usize,
    pub info: PortInfo,
    /// The extended statistics' names as the driver reports them, fixed at start.
    pub xstat_names: Vec<String>,
    monitor: PortMonitor,
    totals: Mutex<PortTotals>,
    /// The link at the last sample, see [`pack_link`].
    link: AtomicU64,
    link_flaps: AtomicU64,
}

impl WatchedPort {
    /// The DPDK port id (what `dpdk-dumpcap -i` takes).
    pub fn port_id(&self) -> u16 {
        self.monitor.id().0
    }

    pub fn new(name: &str, monitor: PortMonitor, queues: usize) -> Self {
        let xstat_names = monitor.xstat_names().unwrap_or_else(|err| {
            tracing::warn!(port = name, "no extended statistics: {err}");
            Vec::new()
        });
        let (up, speed) = monitor.link();
        WatchedPort {
            name: name.to_string(),
            queues,
            info: monitor.info(),
            xstat_names,
            monitor,
            totals: Mutex::new(PortTotals::default()),
            link: AtomicU64::new(pack_link(up, speed)),
            link_flaps: AtomicU64::new(0),
        }
    }

    /// Reads the port's counters into its totals, then hands them to `read`, still under
    /// the lock.
    pub fn poll<R>(&self, read: impl FnOnce(&mut PortTotals) -> R) -> R {
        let mut totals = self.totals();
        let mut xstats = Vec::with_capacity(self.xstat_names.len());
        let stats = self.monitor.stats();
        let xstats_read = match self.xstat_names.len() {
            0 => Ok(()),
            count => self.monitor.xstats(&mut xstats, count),
        };
        match (stats, xstats_read) {
            (Ok(stats), Ok(())) => totals.add(&stats, &xstats),
            (Err(err), _) | (_, Err(err)) => {
                totals.failures += 1;
                if totals.failures.is_power_of_two() {
                    tracing::warn!(port = %self.name, failures = totals.failures, "reading the port's counters: {err}");
                }
            }
        }
        read(&mut totals)
    }

    fn totals(&self) -> std::sync::MutexGuard<'_, PortTotals> {
        self.totals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Samples the link and counts it going down.
    fn sample_link(&self) {
        let (up, speed) = self.monitor.link();
        let (was_up, _) = unpack_link(self.link.swap(pack_link(up, speed), Ordering::Relaxed));
        if was_up && !up {
            self.link_flaps.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Up, and speed in Mbit/s, at the last sample.
    pub fn link(&self) -> (bool, u32) {
        unpack_link(self.link.load(Ordering::Relaxed))
    }

    /// Times the link was seen going down since start.
    pub fn link_flaps(&self) -> u64 {
        self.link_flaps.load(Ordering::Relaxed)
    }
}

/// Every port's watch; shared by the control thread, the metrics and the ctl server.
#[derive(Default)]
pub struct PortWatch {
    pub ports: Vec<WatchedPort>,
}

impl PortWatch {
    /// Reads every port's counters and closes their rate windows. Called by the control
    /// thread every [`STATS_INTERVAL`] (reads between, by scrapes, do not move the windows).
    pub fn poll_stats(&self) {
        for port in &self.ports {
            port.poll(|totals| totals.close_window(Instant::now()));
        }
    }

    /// Samples every port's link. Called by the control thread every [`LINK_INTERVAL`].
    pub fn sample_links(&self) {
        for port in &self.ports {
            port.sample_link();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(rx_packets: u64, queue_drops: u64) -> PortStats {
        let mut stats = PortStats {
            rx_packets,
            ..Default::default()
        };
        stats.rx_queue_drops[2] = queue_drops;
        stats
    }

    #[test]
    fn totals_keep_growing_across_a_counter_reset() {
        let mut totals = PortTotals::default();
        totals.add(&reading(100, 1), &[10, 0]);
        totals.add(&reading(250, 4), &[15, 2]);
        // The port was reset: its counters start again from zero.
        totals.add(&reading(30, 1), &[5, 0]);
        totals.add(&reading(40, 1), &[9, 1]);
        assert_eq!(totals.stats.rx_packets, 250 + 30 + 10);
        assert_eq!(totals.stats.rx_queue_drops[2], 4 + 1);
        assert_eq!(totals.xstats, [15 + 5 + 4, 2 + 1]);
    }

    #[test]
    fn rates_come_from_the_periodic_windows() {
        let mut totals = PortTotals::default();
        let start = Instant::now();
        totals.add(
            &PortStats {
                rx_packets: 1_000,
                rx_bytes: 64_000,
                ..Default::default()
            },
            &[],
        );
        totals.close_window(start);
        assert_eq!(totals.rates.over_secs, 0.0, "one poll is no window yet");
        totals.add(
            &PortStats {
                rx_packets: 21_000,
                rx_bytes: 1_344_000,
                tx_packets: 500,
                ..Default::default()
            },
            &[],
        );
        totals.close_window(start + Duration::from_secs(10));
        assert_eq!(totals.rates.over_secs, 10.0);
        assert_eq!(totals.rates.rx_packets_per_sec, 2_000.0);
        assert_eq!(totals.rates.rx_bits_per_sec, 1_024_000.0);
        assert_eq!(totals.rates.tx_packets_per_sec, 50.0);
    }

    #[test]
    fn a_reading_with_more_xstats_extends_the_totals() {
        let mut totals = PortTotals::default();
        totals.add(&reading(1, 0), &[3]);
        totals.add(&reading(2, 0), &[4, 7]);
        assert_eq!(totals.xstats, [4, 7]);
    }

    #[test]
    fn links_round_trip_through_one_word() {
        assert_eq!(unpack_link(pack_link(true, 10_000)), (true, 10_000));
        assert_eq!(unpack_link(pack_link(false, 0)), (false, 0));
        assert_eq!(unpack_link(pack_link(true, u32::MAX)), (true, u32::MAX));
    }
}

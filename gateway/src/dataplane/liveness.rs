//! Worker liveness. A worker that panics tells the control thread at once (its lcore's exit
//! hook sends an event), and the gateway exits non-zero so the service manager restarts it:
//! queues nobody serves are worse than a restart. A worker that stops looping without
//! panicking shows in its heartbeat, which the metrics turn into an age an alert watches.
//! `Workers` owns the launched lcores, so that whatever path leaves `serve` stops and joins
//! them before the ports and pools they use go away.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::dpdk::{self, LaunchedWork};

/// Loops between two heartbeats: a worker's loop takes well under a microsecond idle and tens
/// of microseconds busy, so the heartbeat is at most a few milliseconds old in a live worker,
/// while the store (and the cache line a scrape pulls away) happens rarely.
pub const HEARTBEAT_LOOPS: u64 = 256;

/// The TSC at a worker's latest heartbeat, written by that worker only. On a cache line of
/// its own, so the store never shares a line with another core's writes.
#[derive(Debug)]
#[repr(align(64))]
pub struct Heartbeat {
    tsc: AtomicU64,
}

impl Heartbeat {
    /// A heartbeat as of now: a worker that has not looped yet is as old as its launch.
    pub fn new() -> Self {
        Heartbeat {
            tsc: AtomicU64::new(dpdk::rdtsc()),
        }
    }

    /// Records a loop at `tsc`. One relaxed store: no syscall, no locked instruction.
    #[inline]
    pub fn beat(&self, tsc: u64) {
        self.tsc.store(tsc, Ordering::Relaxed);
    }

    /// Seconds since the last heartbeat, for a TSC of `hz` ticks per second now at `now_tsc`.
    /// The TSC is invariant and synchronised across cores (DPDK relies on it too), so any
    /// thread may compare its own reading with the worker's.
    pub fn age_seconds(&self, now_tsc: u64, hz: u64) -> f64 {
        now_tsc.saturating_sub(self.tsc.load(Ordering::Relaxed)) as f64 / hz.max(1) as f64
    }
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self::new()
    }
}

/// The environment variable that makes a worker panic on purpose, for the liveness tests:
/// `<worker>:<milliseconds after launch>`, e.g. `0:2000`. Read once at start; the worker
/// checks its deadline only when it beats, never per packet.
pub const PANIC_ON_PURPOSE_VAR: &str = "GATEWAY_TEST_PANIC_WORKER";

/// Which worker panics on purpose, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PanicOnPurpose {
    pub worker: usize,
    pub after: Duration,
}

impl PanicOnPurpose {
    pub fn from_env() -> Option<Self> {
        let text = std::env::var(PANIC_ON_PURPOSE_VAR).ok()?;
        let parsed = Self::parse(&text);
        if parsed.is_none() {
            tracing::warn!("{PANIC_ON_PURPOSE_VAR}={text:?} ignored: expected <worker>:<ms>");
        }
        parsed
    }

    fn parse(text: &str) -> Option<Self> {
        let (worker, ms) = text.split_once(':')?;
        Some(PanicOnPurpose {
            worker: worker.trim().parse().ok()?,
            after: Duration::from_millis(ms.trim().parse().ok()?),
        })
    }

    /// The TSC reading at which `worker` should panic, if it is the one.
    pub fn deadline_tsc(&self, worker: usize) -> Option<u64> {
        (self.worker == worker).then(|| {
            let ticks = u128::from(dpdk::tsc_hz()) * self.after.as_millis() / 1000;
            dpdk::rdtsc().saturating_add(ticks as u64)
        })
    }
}

/// What a worker's exit hook reports to the control thread.
#[derive(Debug)]
pub struct WorkerExit {
    pub worker: usize,
    /// The panic message, or None if the worker returned (it only does when told to stop).
    pub panic: Option<String>,
}

/// The launched workers. Dropping it raises the stop flag and joins them all, so an error
/// anywhere in start-up or service stops the workers before the ports, rings and pools they
/// poll are closed (those are declared before it, so they drop after it).
pub struct Workers {
    stop: Arc<AtomicBool>,
    launched: Vec<(usize, LaunchedWork<()>)>,
}

impl Workers {
    pub fn new(stop: Arc<AtomicBool>) -> Self {
        Workers {
            stop,
            launched: Vec::new(),
        }
    }

    pub fn push(&mut self, worker: usize, work: LaunchedWork<()>) {
        self.launched.push((worker, work));
    }

    pub fn len(&self) -> usize {
        self.launched.len()
    }

    pub fn is_empty(&self) -> bool {
        self.launched.is_empty()
    }

    /// Raises the stop flag and waits for every worker. Returns one line per worker that
    /// panicked, naming it.
    pub fn stop_and_join(&mut self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.launched
            .drain(..)
            .filter_map(|(worker, work)| {
                work.join()
                    .err()
                    .map(|err| format!("worker {worker}: {err}"))
            })
            .collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if self.launched.is_empty() {
            return;
        }
        tracing::info!(
            workers = self.launched.len(),
            "stopping the workers before their ports close"
        );
        for failure in self.stop_and_join() {
            tracing::error!("{failure}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panic_hook_parses_worker_and_delay_and_refuses_anything_else() {
        assert_eq!(
            PanicOnPurpose::parse("1:2500"),
            Some(PanicOnPurpose {
                worker: 1,
                after: Duration::from_millis(2500)
            })
        );
        for bad in ["", "1", ":5", "x:5", "1:y", "1:-5"] {
            assert_eq!(PanicOnPurpose::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn heartbeat_age_counts_from_the_last_beat() {
        let beat = Heartbeat { tsc: 0.into() };
        beat.beat(1_000);
        assert_eq!(beat.age_seconds(3_000, 1_000), 2.0);
        // A reading taken before the beat (another core, a moment earlier) is no age at all.
        assert_eq!(beat.age_seconds(500, 1_000), 0.0);
    }
}

//! Nanoseconds from the TSC, for the pipeline's timers. One rdtsc and one multiply-shift per
//! call: cheap enough to read once per burst.

use crate::dpdk;

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    start_tsc: u64,
    /// Nanoseconds per tick as a 32.32 fixed-point multiplier.
    ns_per_tick_q32: u64,
}

impl Clock {
    pub fn new() -> Self {
        let hz = dpdk::tsc_hz().max(1);
        Clock {
            start_tsc: dpdk::rdtsc(),
            ns_per_tick_q32: ((1_000_000_000u128 << 32) / u128::from(hz)) as u64,
        }
    }

    #[inline]
    pub fn now_ns(&self) -> u64 {
        let ticks = dpdk::rdtsc().wrapping_sub(self.start_tsc);
        ((u128::from(ticks) * u128::from(self.ns_per_tick_q32)) >> 32) as u64
    }
}

/// Whole seconds since the process first asked, on the monotonic clock every thread shares
/// (unlike a [`Clock`], whose zero is its own): the deadlines of the prefixes the netlink
/// thread learns, which the control thread's advertisements count down.
pub fn shared_secs() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs()
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

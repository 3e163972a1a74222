//! The safe layer over DPDK (and the one other system call the fast path's memory needs,
//! `madvise`). Every `unsafe` block of the gateway lives under this module.

pub mod bond;
mod eal;
mod error;
pub mod flow;
mod huge_pages;
pub mod hugetlbfs;
mod ids;
mod lcore;
mod mbuf;
mod mempool;
mod pdump;
mod port;
mod ring;

pub use eal::{check_option_rules, gives_option, Eal, EalArgs};
pub use error::{DpdkError, ErrorChain, Result};
pub use huge_pages::{back_with_huge_pages, HugePageAdvice};
pub use ids::{LcoreId, PortId, RxQueueId, SocketId, TxQueueId};
pub use lcore::{launch, launch_watched, LaunchedWork};
pub use mbuf::{Mbuf, MbufBatch, BURST_SIZE};
pub use mempool::Mempool;
pub use pdump::{pcapng_copy, Pdump};
pub use port::{
    link_status, Port, PortConfig, PortInfo, PortMonitor, PortRings, PortStats, RingDevice,
    RxQueue, TxQueue, QUEUE_STAT_COUNTERS,
};
pub use ring::{MbufRing, RingConsumer, RingProducer};

/// The time-stamp counter: cheap, monotonic per core, what the fast path measures with.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: reads the TSC register; no memory is touched. Inlined rather than through the
    // shim: it runs every loop.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// Asks the CPU to start loading the cache line at `address` (rte_prefetch0). Only a hint:
/// any address is allowed, nothing is dereferenced.
#[inline]
pub fn prefetch<T>(address: *const T) {
    // SAFETY: a prefetch never faults and has no architectural effect.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address as *const i8)
    }
}

/// TSC ticks per second, as calibrated by the EAL.
pub fn tsc_hz() -> u64 {
    // SAFETY: a read of a value the EAL computed at init; harmless before init (returns 0).
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// DPDK's version string, e.g. "DPDK 22.11.11".
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    let text = unsafe { std::ffi::CStr::from_ptr(dpdk_sys::rte_version()) };
    text.to_string_lossy().into_owned()
}

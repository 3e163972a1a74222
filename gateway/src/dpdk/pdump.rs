//! DPDK's packet capture framework (`rte_pdump`): with it up, `dpdk-dumpcap` and `dpdk-pdump`
//! (secondary processes) may ask this process to copy what any port and queue receives and
//! sends into their ring. Until one asks, no callback is installed and nothing is copied.

use super::eal::{Eal, EalHold};
use super::error::{DpdkError, Result};
use super::mbuf::Mbuf;
use super::mempool::Mempool;

/// `rte_pdump` serving capture requests, from [`Pdump::init`] until dropped.
pub struct Pdump {
    _eal: EalHold,
}

impl Pdump {
    /// Starts serving the capture tools' requests. The EAL must run with its runtime files
    /// (not `--in-memory`) for a secondary process to attach.
    pub fn init(eal: &Eal) -> Result<Pdump> {
        // SAFETY: the EAL is up (`eal` proves it); registers the multi-process action that
        // serves capture requests, once: `Pdump` is made only here and uninitialises on drop.
        let ret = unsafe { dpdk_sys::rte_pdump_init() };
        if ret < 0 {
            return Err(DpdkError::last("rte_pdump_init"));
        }
        Ok(Pdump { _eal: eal.hold() })
    }
}

impl Drop for Pdump {
    fn drop(&mut self) {
        // SAFETY: undoes `rte_pdump_init` while the EAL is still up (this holds a share).
        let ret = unsafe { dpdk_sys::rte_pdump_uninit() };
        if ret < 0 {
            tracing::warn!(error = %DpdkError::from_errno("rte_pdump_uninit", ret), "pdump");
        }
    }
}

/// What `rte_pdump`'s callback makes of each packet it captures for `dpdk-dumpcap` (pcapng
/// captures): a copy of at most `snaplen` bytes of `mbuf` into `pool`, wrapped in pcapng's
/// enhanced packet block with the port, queue, direction and `tsc` (the callback reads the
/// TSC once a burst) (`rte_pcapng_copy`, DPDK 22.11's form). None when the pool is empty.
/// `gateway bench` times it: what a captured packet costs the worker.
pub fn pcapng_copy(
    mbuf: &Mbuf,
    pool: &Mempool,
    (port, queue): (u16, u32),
    (received, tsc): (bool, u64),
    snaplen: u32,
) -> Option<Mbuf> {
    let direction = if received {
        dpdk_sys::RTE_PCAPNG_DIRECTION_IN
    } else {
        dpdk_sys::RTE_PCAPNG_DIRECTION_OUT
    };
    // SAFETY: `mbuf` is a valid mbuf we own for the call, only read; `pool` is alive. The
    // copy is a new, direct mbuf (chain) from `pool` that nobody else holds, or NULL.
    let copy = unsafe {
        dpdk_sys::rte_pcapng_copy(
            port,
            queue,
            mbuf.as_raw(),
            pool.as_ptr(),
            snaplen,
            tsc,
            direction,
        )
    };
    // SAFETY: non-NULL, the copy is ours alone.
    (!copy.is_null()).then(|| unsafe { Mbuf::from_raw(copy) })
}

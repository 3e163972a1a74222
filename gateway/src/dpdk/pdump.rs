//! DPDK's packet capture framework (`rte_pdump`): with it up, `dpdk-dumpcap` and `dpdk-pdump`
//! (secondary processes) may ask this process to copy what any port and queue receives and
//! sends into their ring. Until one asks, no callback is installed and nothing is copied.

use super::eal::{Eal, EalHold};
use super::error::{DpdkError, Result};

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

use std::ffi::CString;
use std::ptr::NonNull;

use super::error::{DpdkError, Result};

/// A pool of packet buffers (`rte_pktmbuf_pool_create`). Freed when dropped, which the owner
/// does only after every port and ring using it has stopped.
pub struct Mempool {
    ptr: NonNull<dpdk_sys::rte_mempool>,
}

// SAFETY: DPDK mempools are multi-producer/multi-consumer safe; the handle is only a pointer.
unsafe impl Send for Mempool {}
// SAFETY: as above; every operation through &Mempool is thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// `mbufs` buffers of `data_room` bytes (plus headroom), with a per-lcore cache of `cache`.
    pub fn new(name: &str, mbufs: u32, cache: u32, data_room: u16, socket: i32) -> Result<Self> {
        let cname = CString::new(name).map_err(|_| DpdkError::Invalid {
            what: "mempool name",
            detail: format!("{name:?} contains a NUL byte"),
        })?;
        let data_room = data_room.saturating_add(dpdk_sys::RTE_PKTMBUF_HEADROOM as u16);
        // SAFETY: name is a valid C string; the EAL must be initialised (a precondition of
        // every DPDK object), and a failure returns NULL with rte_errno set.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), mbufs, cache, 0, data_room, socket)
        };
        NonNull::new(ptr)
            .map(|ptr| Mempool { ptr })
            .ok_or_else(|| DpdkError::last("rte_pktmbuf_pool_create"))
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.ptr.as_ptr()
    }

    /// Buffers currently in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is alive for &self.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.ptr.as_ptr()) }
    }

    /// Buffers currently out of the pool: held by ports, rings or the gateway.
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool is alive for &self.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.ptr.as_ptr()) }
    }

    /// The pool's size as created.
    pub fn capacity(&self) -> u32 {
        // SAFETY: the pool is alive for &self; `size` is fixed at creation.
        unsafe { (*self.ptr.as_ptr()).size }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        // SAFETY: we own the pool; users (ports, rings, mbufs) are gone before it is dropped.
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) }
    }
}

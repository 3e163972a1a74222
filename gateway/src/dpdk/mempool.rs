use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Mutex;

use super::eal::{Eal, EalHold};
use super::error::{DpdkError, Result};
use super::ids::SocketId;

/// A pool of packet buffers (`rte_pktmbuf_pool_create`). Ports hold the pool they receive
/// into (behind an `Arc`), so it outlives them. When the last owner drops it, it is freed only
/// if every mbuf is back: an mbuf still out (in a ring nobody drained, in a leaked batch)
/// keeps the pool, and the EAL, alive until the process exits rather than point into freed
/// memory.
pub struct Mempool {
    ptr: NonNull<dpdk_sys::rte_mempool>,
    eal: Option<EalHold>,
}

// SAFETY: DPDK mempools are multi-producer/multi-consumer safe; the handle is only a pointer.
unsafe impl Send for Mempool {}
// SAFETY: as above; every operation through &Mempool is thread-safe in DPDK.
unsafe impl Sync for Mempool {}

/// `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE` lets a driver put transmitted mbufs straight back into
/// the pool of the first one, skipping the reference count. That is sound only when every
/// mbuf on the queue comes from one pool, has a reference count of 1 and is direct (no
/// indirect or external buffer).
///
/// The safe layer guarantees the last two by construction: it has no API that clones,
/// attaches, shares or takes a reference to an mbuf, and nothing asks a driver for external
/// buffers. The first it guarantees here, where pools are made: a port gets the offload only
/// while its pool is the only packet pool of the process, and no second pool can be created
/// while such a port lives. So every mbuf any queue can hold comes from that one pool.
#[derive(Debug, Default)]
struct PacketPools {
    live: usize,
    fast_free_ports: usize,
}

impl PacketPools {
    fn may_create(&self) -> std::result::Result<(), String> {
        if self.fast_free_ports > 0 {
            return Err(format!(
                "{} port(s) transmit with MBUF_FAST_FREE, which needs every mbuf from their one \
                 pool; make the pool before starting ports, or start them without fast_free",
                self.fast_free_ports
            ));
        }
        Ok(())
    }

    fn may_fast_free(&self) -> std::result::Result<(), String> {
        match self.live {
            1 => Ok(()),
            live => Err(format!(
                "{live} packet pools exist; MBUF_FAST_FREE needs every mbuf from one"
            )),
        }
    }
}

static PACKET_POOLS: Mutex<PacketPools> = Mutex::new(PacketPools {
    live: 0,
    fast_free_ports: 0,
});

fn packet_pools() -> std::sync::MutexGuard<'static, PacketPools> {
    PACKET_POOLS
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
}

/// A port's right to `MBUF_FAST_FREE`; while one exists no other packet pool can be made.
pub(crate) struct FastFreeClaim(());

impl FastFreeClaim {
    /// Granted when the pool the port receives into is the process's only packet pool.
    pub(crate) fn try_new(_pool: &Mempool) -> std::result::Result<FastFreeClaim, String> {
        let mut pools = packet_pools();
        pools.may_fast_free()?;
        pools.fast_free_ports += 1;
        Ok(FastFreeClaim(()))
    }
}

impl Drop for FastFreeClaim {
    fn drop(&mut self) {
        packet_pools().fast_free_ports -= 1;
    }
}

impl Mempool {
    /// `mbufs` buffers of `data_room` bytes (plus headroom), with a per-lcore cache of `cache`,
    /// in the memory of `socket` (the NIC's: see [`super::Port::socket`]).
    pub fn new(
        eal: &Eal,
        name: &str,
        mbufs: u32,
        cache: u32,
        data_room: u16,
        socket: SocketId,
    ) -> Result<Self> {
        let cname = CString::new(name).map_err(|_| DpdkError::Invalid {
            what: "mempool name",
            detail: format!("{name:?} contains a NUL byte"),
        })?;
        let mut pools = packet_pools();
        pools.may_create().map_err(|detail| DpdkError::Invalid {
            what: "mempool",
            detail,
        })?;
        let data_room = data_room.saturating_add(dpdk_sys::RTE_PKTMBUF_HEADROOM as u16);
        // SAFETY: name is a valid C string; the EAL is up (we hold its token), and a failure
        // returns NULL with rte_errno set.
        let ptr = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                mbufs,
                cache,
                0,
                data_room,
                socket.raw(),
            )
        };
        let pool = NonNull::new(ptr)
            .map(|ptr| Mempool {
                ptr,
                eal: Some(eal.hold()),
            })
            .ok_or_else(|| DpdkError::last("rte_pktmbuf_pool_create"))?;
        pools.live += 1;
        Ok(pool)
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
        // SAFETY: the pool is alive for &self; its size is fixed at creation.
        unsafe { dpdk_sys::shim_rte_mempool_size(self.ptr.as_ptr()) }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        let mut pools = packet_pools();
        let eal = self.eal.take().expect("a pool holds the EAL until dropped");
        // Nobody can take an mbuf from the pool any more (that needs &self, and ports hold
        // an Arc of it), so the count only falls while we look; a stale read keeps the pool.
        let in_use = self.in_use();
        if in_use != 0 {
            tracing::warn!(
                in_use,
                "mbufs still out of the pool at its end: pool and EAL kept until the exit"
            );
            eal.keep_until_exit();
            return;
        }
        // SAFETY: we own the pool and every mbuf is back in it; no port (each holds the pool)
        // or ring content (counted as in use) refers to it any more.
        unsafe { dpdk_sys::rte_mempool_free(self.ptr.as_ptr()) }
        // A pool kept for its stray mbufs still counts as live, so those can never reach a
        // fast-free port of a later pool.
        pools.live -= 1;
        drop(pools);
        drop(eal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_free_needs_a_sole_pool_and_then_forbids_a_second() {
        let mut pools = PacketPools::default();
        assert!(pools.may_fast_free().is_err(), "no pool yet");
        pools.live = 2;
        let refused = pools.may_fast_free().unwrap_err();
        assert!(refused.contains("2 packet pools"), "{refused}");
        pools.live = 1;
        assert_eq!(pools.may_fast_free(), Ok(()));
        assert_eq!(pools.may_create(), Ok(()));
        pools.fast_free_ports = 1;
        let refused = pools.may_create().unwrap_err();
        assert!(refused.contains("MBUF_FAST_FREE"), "{refused}");
    }
}

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use super::eal::{Eal, EalHold};
use super::error::{DpdkError, Result};
use super::ids::SocketId;
use super::mbuf::{Mbuf, MbufBatch, BURST_SIZE};

/// A single-producer single-consumer `rte_ring` of mbufs, split into its two ends so the
/// type system keeps each end on one thread. Mbufs still queued when both ends are gone are
/// freed, not leaked.
pub struct MbufRing {
    ptr: NonNull<dpdk_sys::rte_ring>,
    _eal: EalHold,
}

// SAFETY: the ring is lock-free SPSC; the split ends below enforce one producer and one
// consumer, and the shared handle only reads counts or frees at the end.
unsafe impl Send for MbufRing {}
// SAFETY: as above.
unsafe impl Sync for MbufRing {}

impl MbufRing {
    /// A ring holding up to `capacity` packets (rounded up to a power of two, minus one), in
    /// the memory of `socket` (the NIC's: see [`super::Port::socket`]).
    pub fn create(
        eal: &Eal,
        name: &str,
        capacity: u32,
        socket: SocketId,
    ) -> Result<(RingProducer, RingConsumer)> {
        let cname = CString::new(name).map_err(|_| DpdkError::Invalid {
            what: "ring name",
            detail: format!("{name:?} contains a NUL byte"),
        })?;
        let size = capacity.saturating_add(1).next_power_of_two();
        let flags = dpdk_sys::RING_F_SP_ENQ | dpdk_sys::RING_F_SC_DEQ;
        // SAFETY: valid C string; the EAL is up; returns NULL with rte_errno on failure.
        let ptr = unsafe { dpdk_sys::rte_ring_create(cname.as_ptr(), size, socket.raw(), flags) };
        let ring = Arc::new(MbufRing {
            ptr: NonNull::new(ptr).ok_or_else(|| DpdkError::last("rte_ring_create"))?,
            _eal: eal.hold(),
        });
        Ok((RingProducer { ring: ring.clone() }, RingConsumer { ring }))
    }

    pub fn count(&self) -> u32 {
        // SAFETY: the ring is alive; the count is a racy but safe read.
        unsafe { dpdk_sys::shim_rte_ring_count(self.ptr.as_ptr()) }
    }
}

impl Drop for MbufRing {
    fn drop(&mut self) {
        let mut batch = MbufBatch::new();
        loop {
            // SAFETY: both ends are gone (this is the last Arc), so this thread is the only
            // consumer; the pointers dequeued are owned mbufs.
            let got = unsafe {
                dpdk_sys::shim_rte_ring_sc_dequeue_burst(
                    self.ptr.as_ptr(),
                    batch.ptrs.as_mut_ptr() as *mut *mut std::ffi::c_void,
                    BURST_SIZE as u32,
                    std::ptr::null_mut(),
                )
            };
            if got == 0 {
                break;
            }
            batch.len = got as usize;
            batch.free_all();
        }
        // SAFETY: the ring is empty and nobody else holds it.
        unsafe { dpdk_sys::rte_ring_free(self.ptr.as_ptr()) }
    }
}

/// The one end that enqueues.
pub struct RingProducer {
    ring: Arc<MbufRing>,
}

/// The one end that dequeues.
pub struct RingConsumer {
    ring: Arc<MbufRing>,
}

impl RingProducer {
    /// For a PMD that enqueues into this ring (net_ring's TX); the caller then must not
    /// enqueue itself.
    pub(crate) fn as_raw(&self) -> *mut dpdk_sys::rte_ring {
        self.ring.ptr.as_ptr()
    }

    /// Moves as many packets as fit from the front of `batch` into the ring; what did not fit
    /// stays in the batch for the caller to free and count. Returns how many were queued.
    pub fn enqueue(&mut self, batch: &mut MbufBatch) -> usize {
        if batch.is_empty() {
            return 0;
        }
        // SAFETY: this is the ring's only producer (&mut self on the unique producer end);
        // the pointers are owned mbufs, and the ones the ring accepted are forgotten below.
        let queued = unsafe {
            dpdk_sys::shim_rte_ring_sp_enqueue_burst(
                self.ring.ptr.as_ptr(),
                batch.ptrs.as_ptr() as *const *mut std::ffi::c_void,
                batch.len as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        batch.consume_front(queued);
        queued
    }

    /// Queues what fits and frees the rest, leaving the batch empty: the one way a burst
    /// leaves for a ring. Returns (queued, freed) so the caller counts both.
    pub fn enqueue_or_free(&mut self, batch: &mut MbufBatch) -> (usize, usize) {
        let queued = self.enqueue(batch);
        (queued, batch.free_all())
    }

    /// Queues one packet, or gives it back when the ring is full.
    pub fn enqueue_one(&mut self, mbuf: Mbuf) -> std::result::Result<(), Mbuf> {
        let mut one = MbufBatch::new();
        one.push(mbuf).ok();
        if self.enqueue(&mut one) == 1 {
            Ok(())
        } else {
            Err(one
                .drain()
                .next()
                .expect("the refused mbuf is still in the batch"))
        }
    }

    pub fn len(&self) -> u32 {
        self.ring.count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RingConsumer {
    /// For a PMD that dequeues from this ring (net_ring's RX); the caller then must not
    /// dequeue itself.
    pub(crate) fn as_raw(&self) -> *mut dpdk_sys::rte_ring {
        self.ring.ptr.as_ptr()
    }

    /// Fills the free part of `batch` from the ring; returns how many were dequeued.
    pub fn dequeue(&mut self, batch: &mut MbufBatch) -> usize {
        let room = BURST_SIZE - batch.len;
        // SAFETY: this is the ring's only consumer; dequeued pointers are owned mbufs placed
        // in the batch's free slots and counted into its len.
        let got = unsafe {
            dpdk_sys::shim_rte_ring_sc_dequeue_burst(
                self.ring.ptr.as_ptr(),
                batch.ptrs[batch.len..].as_mut_ptr() as *mut *mut std::ffi::c_void,
                room as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        batch.len += got;
        got
    }

    pub fn len(&self) -> u32 {
        self.ring.count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

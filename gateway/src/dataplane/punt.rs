//! The rings between the workers and the control thread's kernel twins: a worker's punt ring
//! (packets for the kernel) and the control thread's ring of kernel frames to each worker.

use pipeline::{DropReason, WorkerCounters};

use crate::dpdk::{Eal, Mbuf, MbufBatch, MbufRing, RingConsumer, RingProducer, SocketId};

/// Packets each worker's punt ring to the control thread holds.
pub const PUNT_RING_CAPACITY: u32 = 512;

/// The sending end of a ring between the workers and the control thread (a worker's punt
/// ring, the control thread's rings of kernel frames): batched, flushed once per round, never
/// waiting; what the ring refuses (its consumer is behind) is freed and counted as `full`.
pub struct BatchedRing {
    ring: RingProducer,
    batch: MbufBatch,
    full: DropReason,
}

impl BatchedRing {
    pub(crate) fn new(ring: RingProducer, full: DropReason) -> Self {
        BatchedRing {
            ring,
            batch: MbufBatch::new(),
            full,
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, mbuf: Mbuf, counters: &WorkerCounters) {
        if let Err(mbuf) = self.batch.push(mbuf) {
            self.flush(counters);
            // Empty after a flush, so this push succeeds.
            let _ = self.batch.push(mbuf);
        }
    }

    #[inline]
    pub fn flush(&mut self, counters: &WorkerCounters) {
        if self.batch.is_empty() {
            return;
        }
        let (_, refused) = self.ring.enqueue_or_free(&mut self.batch);
        if refused > 0 {
            counters.record_drops(self.full, refused as u64);
        }
    }
}

/// A worker's end of its punt ring.
pub struct PuntLink(BatchedRing);

impl PuntLink {
    /// Queues a packet for the twin of interface `port`.
    #[inline]
    pub fn send(&mut self, port: u16, mut mbuf: Mbuf, counters: &WorkerCounters) {
        mbuf.set_port(port);
        self.0.push(mbuf, counters);
    }

    #[inline]
    pub fn flush(&mut self, counters: &WorkerCounters) {
        self.0.flush(counters);
    }
}

/// The punt ring of worker `index`: the worker's end and the control thread's.
pub fn punt_ring(
    eal: &Eal,
    index: usize,
    socket: SocketId,
) -> crate::dpdk::Result<(PuntLink, RingConsumer)> {
    let (ring, consumer) =
        MbufRing::create(eal, &format!("punt_{index}"), PUNT_RING_CAPACITY, socket)?;
    Ok((
        PuntLink(BatchedRing::new(ring, DropReason::PuntRingFull)),
        consumer,
    ))
}

/// The ring of kernel frames to worker `index`: the control thread's end and the worker's.
pub fn kernel_ring(
    eal: &Eal,
    index: usize,
    socket: SocketId,
) -> crate::dpdk::Result<(RingProducer, RingConsumer)> {
    MbufRing::create(eal, &format!("kernel_{index}"), PUNT_RING_CAPACITY, socket)
}

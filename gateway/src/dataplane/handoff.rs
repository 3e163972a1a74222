//! Moving packets between workers: one SPSC rte_ring per ordered worker pair, so each ring
//! has exactly one producer and one consumer and needs no lock. A worker hands a packet to
//! the worker that owns its flow (conntrack and NAT state are per core).

use pipeline::{DropReason, WorkerCounters};

use crate::dpdk::{self, Eal, Mbuf, MbufBatch, MbufRing, RingConsumer, RingProducer, SocketId};

/// Packets a ring holds: a few bursts, enough to ride out a busy moment on the owner.
const RING_CAPACITY: u32 = 2048;

/// One worker's ends of the mesh.
pub struct HandoffLinks {
    /// Indexed by destination worker; None for itself.
    outgoing: Vec<Option<RingProducer>>,
    batches: Vec<MbufBatch>,
    incoming: Vec<RingConsumer>,
}

impl HandoffLinks {
    /// The links of every worker, index i for worker i, with the rings in `socket`'s memory.
    pub fn mesh(eal: &Eal, workers: usize, socket: SocketId) -> dpdk::Result<Vec<HandoffLinks>> {
        let mut links: Vec<HandoffLinks> = (0..workers)
            .map(|_| HandoffLinks {
                outgoing: (0..workers).map(|_| None).collect(),
                batches: (0..workers).map(|_| MbufBatch::new()).collect(),
                incoming: Vec::new(),
            })
            .collect();
        for from in 0..workers {
            for to in (0..workers).filter(|&to| to != from) {
                let (producer, consumer) =
                    MbufRing::create(eal, &format!("handoff_{from}_{to}"), RING_CAPACITY, socket)?;
                links[from].outgoing[to] = Some(producer);
                links[to].incoming.push(consumer);
            }
        }
        Ok(links)
    }

    #[inline]
    pub fn send(&mut self, worker: u16, mbuf: Mbuf, counters: &WorkerCounters) {
        let index = usize::from(worker);
        if self.outgoing.get(index).is_none_or(Option::is_none) {
            // Only a pipeline bug could name a missing worker; count it rather than crash.
            counters.record_drop(DropReason::HandoffRingFull);
            return;
        }
        if let Err(mbuf) = self.batches[index].push(mbuf) {
            self.flush_to(index, counters);
            let _ = self.batches[index].push(mbuf);
        }
    }

    pub fn flush(&mut self, counters: &WorkerCounters) {
        for index in 0..self.batches.len() {
            if !self.batches[index].is_empty() {
                self.flush_to(index, counters);
            }
        }
    }

    fn flush_to(&mut self, index: usize, counters: &WorkerCounters) {
        let Some(ring) = self.outgoing[index].as_mut() else {
            return;
        };
        let (queued, refused) = ring.enqueue_or_free(&mut self.batches[index]);
        counters.handoffs_sent.add(queued as u64);
        if refused > 0 {
            counters.record_drops(DropReason::HandoffRingFull, refused as u64);
        }
    }

    /// Fills `batch` from the incoming rings; returns how many packets arrived.
    pub fn receive(&mut self, batch: &mut MbufBatch) -> usize {
        let before = batch.len();
        for ring in &mut self.incoming {
            if batch.is_full() {
                break;
            }
            ring.dequeue(batch);
        }
        batch.len() - before
    }
}

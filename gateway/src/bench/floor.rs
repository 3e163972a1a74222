//! The I/O floor: the worker loop's receive and transmit with the pipeline left out. The
//! same queues, batches and calls the worker uses (`RxQueue::rx_burst` on every port,
//! `Egress::send` and one `tx_burst` per port through `Egress::flush`), each packet sent out
//! of the other port untouched, with the next packet's header prefetched as the worker does.
//! What the worker loop does besides (snapshot checks, the clock, housekeeping, handoff and
//! control flushes) is pipeline work and is left out, so the figure is the I/O alone.

use std::sync::Arc;

use pipeline::WorkerCounters;

use crate::dataplane::egress::Egress;
use crate::dpdk::{MbufBatch, RxQueue};

pub(in crate::bench) struct IoFloor {
    rx_queues: Vec<RxQueue>,
    egress: Egress,
    rx: MbufBatch,
    counters: Arc<WorkerCounters>,
}

impl IoFloor {
    /// `rx_queues` and `egress` are indexed by interface number, as a worker's are.
    pub fn new(rx_queues: Vec<RxQueue>, egress: Egress, counters: Arc<WorkerCounters>) -> Self {
        IoFloor {
            rx_queues,
            egress,
            rx: MbufBatch::new(),
            counters,
        }
    }

    /// One pass: rx_burst on every port, each packet queued for the other port, one tx_burst
    /// per port. Returns the packets received.
    #[inline]
    pub fn poll_once(&mut self) -> usize {
        let mut received = 0;
        let ports = self.rx_queues.len();
        for (ingress, queue) in self.rx_queues.iter_mut().enumerate() {
            if queue.rx_burst(&mut self.rx) == 0 {
                continue;
            }
            received += self.rx.len();
            self.counters.rx_packets.add(self.rx.len() as u64);
            let other = ((ingress + 1) % ports) as u16;
            let mut packets = self.rx.drain().peekable();
            while let Some(mbuf) = packets.next() {
                if let Some(next) = packets.peek() {
                    next.prefetch();
                }
                self.egress.send(other, mbuf, &self.counters);
            }
        }
        self.egress.flush(&self.counters);
        received
    }
}

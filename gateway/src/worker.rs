//! The poll loop of one worker lcore: rx_burst on its queue of every port, the pipeline,
//! one tx_burst per port. Nothing here allocates, locks or makes a syscall.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pipeline::{
    DropReason, NeighborView, PacketBuf, Pipeline, RouterConfig, Verdict, WorkerCounters,
};

use crate::clock::Clock;
use crate::dpdk::{self, Mbuf, MbufBatch, Mempool, QueueId, RingConsumer, RingProducer};
use crate::egress::Egress;
use crate::published::Published;

/// Everything a worker owns or reads, handed to it at launch.
pub struct Worker {
    pub queue: QueueId,
    pub egress: Egress,
    pub pool: Arc<Mempool>,
    pub to_control: RingProducer,
    /// Packets the control thread built (ARP, echo replies, released held packets), for this
    /// worker to transmit. Only worker 0 has one. Each mbuf's port field is its egress.
    pub from_control: Option<RingConsumer>,
    pub router: Arc<Published<RouterConfig>>,
    pub neighbors: Arc<Published<NeighborView>>,
    pub counters: Arc<WorkerCounters>,
    pub stop: Arc<AtomicBool>,
}

impl Worker {
    pub fn run(mut self) {
        let (router, mut router_version) = self.router.load();
        let (neighbors, mut neighbors_version) = self.neighbors.load();
        let mut pipeline = Pipeline::new(router, neighbors, self.counters.clone());
        let clock = Clock::new();
        let ports: Vec<_> = self.egress.ports().to_vec();
        let mut rx = MbufBatch::new();
        let mut control = MbufBatch::new();
        let counters = self.counters.clone();
        let mut loop_start = dpdk::rdtsc();

        while !self.stop.load(Ordering::Relaxed) {
            if let Some(router) = self.router.changed_since(&mut router_version) {
                pipeline.set_router(router);
            }
            if let Some(neighbors) = self.neighbors.changed_since(&mut neighbors_version) {
                pipeline.set_neighbors(neighbors);
            }
            let now_ns = clock.now_ns();
            let mut received = 0;
            for (ingress, port) in ports.iter().enumerate() {
                if port.rx_burst(self.queue, &mut rx) == 0 {
                    continue;
                }
                received += rx.len();
                counters.rx_packets.add(rx.len() as u64);
                let mut packets = rx.drain().peekable();
                while let Some(mut mbuf) = packets.next() {
                    if let Some(next) = packets.peek() {
                        next.prefetch();
                    }
                    if let Some(verdict) =
                        self.handle(&mut pipeline, &mut mbuf, ingress as u16, now_ns)
                    {
                        self.dispatch(&pipeline, mbuf, verdict, &mut control);
                    }
                }
            }
            self.transmit_from_control(&mut rx);
            self.egress.flush(&counters);
            self.flush_control(&mut control);

            let loop_end = dpdk::rdtsc();
            let spent = loop_end.wrapping_sub(loop_start);
            if received > 0 {
                counters.busy_cycles.add(spent);
            } else {
                counters.idle_cycles.add(spent);
            }
            loop_start = loop_end;
        }
        self.egress.flush(&counters);
        self.flush_control(&mut control);
    }

    /// Runs the pipeline over the mbuf's bytes and sets its new length.
    #[inline]
    fn handle(
        &self,
        pipeline: &mut Pipeline,
        mbuf: &mut Mbuf,
        ingress: u16,
        now_ns: u64,
    ) -> Option<Verdict> {
        if mbuf.segments() != 1 {
            self.counters.record_drop(DropReason::MultiSegment);
            return None;
        }
        let len = mbuf.len();
        let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
        let verdict = pipeline.process(&mut pkt, ingress, now_ns);
        let new_len = pkt.len();
        // The pipeline only ever sets lengths within the room it was given.
        mbuf.set_len(new_len).ok()?;
        Some(verdict)
    }

    #[inline]
    fn dispatch(
        &mut self,
        pipeline: &Pipeline,
        mbuf: Mbuf,
        verdict: Verdict,
        control: &mut MbufBatch,
    ) {
        match verdict {
            Verdict::Transmit { port } => self.egress.send(port, mbuf, &self.counters),
            Verdict::Fragment { port } => {
                let mtu = pipeline.router().interfaces[usize::from(port)].mtu;
                self.egress
                    .send_fragments(port, mbuf, mtu, &self.pool, &self.counters);
            }
            Verdict::Control(_) => {
                if let Err(mbuf) = control.push(mbuf) {
                    self.flush_control(control);
                    let _ = control.push(mbuf);
                }
            }
            // Single-worker handoff has nowhere to go; the multi-core dataplane fills this in.
            Verdict::Handoff { .. } => self.counters.record_drop(DropReason::HandoffRingFull),
            Verdict::Drop(_) => {}
        }
    }

    fn transmit_from_control(&mut self, batch: &mut MbufBatch) {
        let Some(ring) = self.from_control.as_mut() else {
            return;
        };
        if ring.dequeue(batch) == 0 {
            return;
        }
        let ports = self.egress.ports().len();
        for mbuf in batch.drain() {
            let port = mbuf.port();
            if usize::from(port.0) < ports {
                self.egress.send(port.0, mbuf, &self.counters);
            } else {
                self.counters.record_drop(DropReason::NotOurMac);
            }
        }
    }

    fn flush_control(&mut self, control: &mut MbufBatch) {
        self.to_control.enqueue(control);
        let refused = control.free_all();
        if refused > 0 {
            self.counters
                .record_drops(DropReason::ControlRingFull, refused as u64);
        }
    }
}

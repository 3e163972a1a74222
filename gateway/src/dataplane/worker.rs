//! The poll loop of one worker lcore: rx_burst on its queue of every port, the pipeline,
//! one tx_burst per port. Nothing here allocates, locks or makes a syscall.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrayvec::ArrayVec;
use pipeline::pipeline::local::arp::admits_to_control;
use pipeline::{
    DropReason, Ingress, NeighborView, PacketBuf, Pipeline, RouterConfig, Verdict, WorkerCounters,
    MAX_BURST,
};

use crate::dataplane::clock::Clock;
use crate::dataplane::ctl_link::CtlLink;
use crate::dataplane::drop_tap::DropTap;
use crate::dataplane::egress::Egress;
use crate::dataplane::handoff::HandoffLinks;
use crate::dataplane::liveness::{Heartbeat, HEARTBEAT_LOOPS};
use crate::dataplane::port_layout::PortLayout;
use crate::dataplane::published::Published;
use crate::dataplane::punt::PuntLink;
use crate::dataplane::shaping::{Exit, Leaving, LinkShapers};
use crate::dataplane::sync_link::SyncLink;
use crate::dataplane::trace_link::TraceLink;
use crate::dpdk::{self, Mbuf, MbufBatch, Mempool, RingConsumer, RingProducer, RxQueue};

/// Flows the expiry sweep visits per loop: bounded work, yet a full pass over a million
/// flows takes well under a second at idle and a few seconds under load.
const EXPIRE_BUDGET: usize = 32;
/// An idle worker runs its upkeep (expiry sweep, policer ticks) at most this often rather
/// than on every empty poll: 32 flows per 100 µs still sweeps a quarter-million-flow table in
/// under a second, and the empty polls stay short.
const IDLE_UPKEEP_NS: u64 = 100_000;
/// Packets each worker's ring to the control thread holds. Echo requests and packets
/// awaiting ARP may fill only half of it, ARP and ND three quarters, PPPoE's control all
/// (`pipeline::pipeline::local::arp::admits_to_control`).
pub const CONTROL_RING_CAPACITY: u32 = 1024;

// A whole rx burst goes through the pipeline at once.
const _: () = assert!(dpdk::BURST_SIZE <= MAX_BURST);

/// Filler for the unused slots of a burst's ingress array.
const UNSET_INGRESS: Ingress = Ingress {
    port: 0,
    handed_off: false,
};

/// Backs a worker's tables with transparent huge pages, best effort (`dpdk::back_with_huge_pages`):
/// what the advice covered, in total, and whether every part was collapsed now.
pub fn back_tables_with_huge_pages(pipeline: &Pipeline) -> dpdk::HugePageAdvice {
    pipeline.table_memory().fold(
        dpdk::HugePageAdvice {
            covered: 0,
            collapsed: true,
        },
        |total, (start, len)| {
            let advice = dpdk::back_with_huge_pages(start, len);
            dpdk::HugePageAdvice {
                covered: total.covered + advice.covered,
                collapsed: total.collapsed && (advice.collapsed || advice.covered == 0),
            }
        },
    )
}

/// Everything a worker owns or reads, handed to it at launch.
pub struct Worker {
    /// The worker's number, which is also its queue number on every port.
    pub index: u16,
    /// This worker's RX queue on every port, indexed by port number.
    pub rx: Vec<RxQueue>,
    /// Which interface a frame received on a port belongs to (VLAN subinterfaces).
    pub layout: PortLayout,
    pub handoff: HandoffLinks,
    pub egress: Egress,
    /// QoS in shaper mode: the packets waiting for this worker's share of each WAN link.
    pub shapers: LinkShapers,
    pub pool: Arc<Mempool>,
    pub to_control: RingProducer,
    /// Packets the control thread built (ARP, echo replies, released held packets), for this
    /// worker to transmit. Only worker 0 has one. Each mbuf's port field is its egress.
    pub from_control: Option<RingConsumer>,
    /// To the control thread's kernel twins (`crate::control::twins`); None when no interface has one.
    pub punt: Option<PuntLink>,
    /// From the kernel twins: the frames of connections the kernel opened whose flows this
    /// worker owns (`pipeline::pipeline::kernel_flows`), each mbuf's port field its
    /// interface; None when no interface has a twin.
    pub from_kernel: Option<RingConsumer>,
    pub router: Arc<Published<RouterConfig>>,
    pub neighbors: Arc<Published<NeighborView>>,
    pub counters: Arc<WorkerCounters>,
    pub stop: Arc<AtomicBool>,
    /// `gateway ctl`'s flow queries; None where no ctl socket listens.
    pub ctl: Option<CtlLink>,
    /// `gateway ctl trace`; None where no ctl socket listens.
    pub trace: Option<TraceLink>,
    /// `gateway ctl capture --drops`; None where no ctl socket listens.
    pub drop_tap: Option<DropTap>,
    /// Session sync with the peer of an HA pair (`[ha.sync]`); None without one.
    pub sync: Option<SyncLink>,
}

impl Worker {
    /// Polls until told to stop. `pipeline` holds this worker's flows and NAT ports; the loop
    /// beats `heartbeat`, and panics at `panic_at_tsc` if given (the liveness tests' hook).
    /// Hands the pipeline back with the worker's clock at the stop, for the state snapshot.
    pub fn run(
        self,
        pipeline: Pipeline,
        heartbeat: Arc<Heartbeat>,
        panic_at_tsc: Option<u64>,
    ) -> (Pipeline, u64) {
        let stop = self.stop.clone();
        let index = self.index;
        let mut poll = WorkerLoop::new(self, pipeline);
        poll.heartbeat = heartbeat;
        poll.panic_at_tsc = panic_at_tsc;
        while !stop.load(Ordering::Relaxed) {
            poll.poll_once();
        }
        poll.finish();
        tracing::info!(worker = index, "worker stopped");
        let now_ns = poll.clock.now_ns();
        (poll.pipeline, now_ns)
    }

    /// Runs the pipeline over a burst (`pipeline.process_burst`, which prefetches and takes
    /// established flows by the fast path), sets each mbuf's new length and dispatches its
    /// verdict. `ingress_of` says how each packet arrived (taking a VLAN tag off), or why it
    /// is dropped (a handed-off packet naming no interface, a VLAN id no subinterface has).
    #[inline]
    fn process_batch(
        &mut self,
        pipeline: &mut Pipeline,
        batch: &mut MbufBatch,
        ingress_of: impl Fn(&mut Mbuf) -> Result<Ingress, DropReason>,
        now_ns: u64,
        control: &mut MbufBatch,
    ) {
        let counters = &self.counters;
        // How each kept packet arrived, in the batch's order.
        let mut ingress = [UNSET_INGRESS; MAX_BURST];
        let mut kept = 0;
        batch.retain(|mbuf| {
            if mbuf.segments() != 1 {
                counters.record_drop(DropReason::MultiSegment);
                return false;
            }
            let arrived = match ingress_of(mbuf) {
                Ok(arrived) => arrived,
                Err(reason) => {
                    counters.record_drop(reason);
                    return false;
                }
            };
            // On the gateway's own rings (control, handoff) the port field names the
            // interface the packet came in by: a bond member's DPDK port id would not.
            mbuf.set_port(arrived.port);
            // Counted once, by the worker that received it.
            if !arrived.handed_off {
                if let Some(iface) = counters.interface(arrived.port) {
                    iface.count_rx(mbuf.len());
                }
            }
            ingress[kept] = arrived;
            kept += 1;
            true
        });
        let mut verdicts = [Verdict::Drop(DropReason::NotOurMac); MAX_BURST];
        let mut lens = [0usize; MAX_BURST];
        {
            let mut packets = ArrayVec::<PacketBuf, MAX_BURST>::new();
            for mbuf in batch.iter_mut() {
                mbuf.prefetch();
                let (len, good) = (mbuf.len(), mbuf.rx_l4_checksum_good());
                packets.push(PacketBuf::new(mbuf.room_mut(), len).with_l4_checksum_good(good));
            }
            let count = packets.len();
            let trace = self.trace.as_mut().filter(|trace| trace.is_armed());
            let traced = trace
                .as_ref()
                .map(|trace| trace.before(pipeline, &packets, &ingress[..count]));
            let mut drop_tap = self.drop_tap.as_mut().filter(|tap| tap.is_armed());
            if let Some(tap) = drop_tap.as_mut() {
                tap.before(&packets);
            }
            pipeline.process_burst(
                &mut packets,
                &ingress[..count],
                now_ns,
                &mut verdicts[..count],
                dpdk::prefetch,
            );
            if let (Some(trace), Some(traced)) = (trace, traced) {
                trace.after(traced, &packets, &ingress[..count], &verdicts[..count]);
            }
            if let Some(tap) = drop_tap {
                tap.after(&ingress[..count], &verdicts[..count]);
            }
            for (len, packet) in lens.iter_mut().zip(&packets) {
                *len = packet.len();
            }
        }
        let shaping = pipeline.shaping();
        for (index, ((mut mbuf, verdict), len)) in batch.drain().zip(verdicts).zip(lens).enumerate()
        {
            // The pipeline only ever sets lengths within the room it was given.
            if mbuf.set_len(len).is_err() {
                continue;
            }
            if shaping {
                let leaving = match verdict {
                    Verdict::Transmit { port } => Some(Leaving::Whole { port }),
                    Verdict::Fragment { port } => Some(Leaving::Fragmented { port }),
                    _ => None,
                };
                if let (Some(leaving), Some(request)) = (leaving, pipeline.shape_requests()[index])
                {
                    let mut exit = Exit {
                        egress: &mut self.egress,
                        pool: &self.pool,
                        counters: &self.counters,
                        router: pipeline.router(),
                    };
                    self.shapers
                        .shape(leaving, mbuf, request, now_ns, &mut exit);
                    continue;
                }
            }
            self.dispatch(pipeline, mbuf, verdict, control);
        }
        if !pipeline.extra_frames().is_empty() {
            self.send_extra_frames(pipeline);
        }
    }

    /// The frames the pipeline made beside the burst's packets (the SYN proxy's window
    /// updates), each copied into a buffer of its own.
    #[cold]
    fn send_extra_frames(&mut self, pipeline: &mut Pipeline) {
        for (port, frame) in pipeline.extra_frames().drain() {
            let Some(mut mbuf) = Mbuf::alloc(&self.pool) else {
                self.counters.syn_proxy_updates_lost.inc();
                continue;
            };
            let room = mbuf.room_mut();
            if room.len() < frame.len() {
                self.counters.syn_proxy_updates_lost.inc();
                continue;
            }
            room[..frame.len()].copy_from_slice(&frame);
            if mbuf.set_len(frame.len()).is_ok() {
                self.egress.send(port, mbuf, &self.counters);
            }
        }
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
            Verdict::Control(work) => {
                let queued = self.to_control.len() as usize + control.len();
                if !admits_to_control(work, queued, CONTROL_RING_CAPACITY as usize) {
                    self.counters.record_drop(DropReason::SlowPathPoliced);
                    return;
                }
                if let Err(mbuf) = control.push(mbuf) {
                    self.flush_control(control);
                    let _ = control.push(mbuf);
                }
            }
            Verdict::Handoff { worker } => self.handoff.send(worker, mbuf, &self.counters),
            Verdict::Punt { port } => match self.punt.as_mut() {
                Some(link) => link.send(port, mbuf, &self.counters),
                None => self.counters.record_drop(DropReason::LocalDelivery),
            },
            Verdict::Drop(_) => {}
        }
    }

    /// Packets other workers received for flows this one owns.
    fn process_handed_off(
        &mut self,
        pipeline: &mut Pipeline,
        batch: &mut MbufBatch,
        control: &mut MbufBatch,
        now_ns: u64,
    ) -> usize {
        let arrived = self.handoff.receive(batch);
        if arrived == 0 {
            return 0;
        }
        self.counters.handoffs_received.add(arrived as u64);
        let interfaces = self.egress.interface_count();
        // The worker that received it put the interface in the port field, tag taken off.
        let ingress_of = |mbuf: &mut Mbuf| {
            let port = mbuf.port().0;
            if usize::from(port) < interfaces {
                Ok(Ingress {
                    port,
                    handed_off: true,
                })
            } else {
                Err(DropReason::NotOurMac)
            }
        };
        self.process_batch(pipeline, batch, ingress_of, now_ns, control);
        arrived
    }

    /// The kernel's frames of flows this worker owns: tracked, translated and sent.
    fn process_from_kernel(&mut self, pipeline: &mut Pipeline, batch: &mut MbufBatch, now_ns: u64) {
        let Some(ring) = self.from_kernel.as_mut() else {
            return;
        };
        if ring.dequeue(batch) == 0 {
            return;
        }
        for mut mbuf in batch.drain() {
            let port = mbuf.port().0;
            let len = mbuf.len();
            let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
            let verdict = pipeline.process_kernel_frame(&mut pkt, port, now_ns);
            let len = pkt.len();
            if mbuf.set_len(len).is_err() {
                continue;
            }
            // Drops were counted by the pipeline; an unknown interface is dropped by the
            // egress, as `not_our_mac`.
            if let Verdict::Transmit { port } = verdict {
                self.egress.send(port, mbuf, &self.counters);
            }
        }
    }

    fn transmit_from_control(&mut self, batch: &mut MbufBatch) {
        let Some(ring) = self.from_control.as_mut() else {
            return;
        };
        if ring.dequeue(batch) == 0 {
            return;
        }
        for mbuf in batch.drain() {
            // An unknown interface is dropped there, as `not_our_mac`.
            self.egress.send(mbuf.port().0, mbuf, &self.counters);
        }
    }

    fn flush_control(&mut self, control: &mut MbufBatch) {
        let (_, refused) = self.to_control.enqueue_or_free(control);
        if refused > 0 {
            self.counters
                .record_drops(DropReason::ControlRingFull, refused as u64);
        }
        if let Some(link) = self.punt.as_mut() {
            link.flush(&self.counters);
        }
    }
}

/// A worker's loop, one iteration at a time, so the benchmark can drive the very loop the
/// gateway runs.
pub struct WorkerLoop {
    worker: Worker,
    pipeline: Pipeline,
    clock: Clock,
    /// Taken out of the worker so the loop can poll them while it hands the worker packets.
    rx_queues: Vec<RxQueue>,
    layout: PortLayout,
    rx: MbufBatch,
    control: MbufBatch,
    router_version: u64,
    neighbors_version: u64,
    loop_start: u64,
    next_idle_tx: u64,
    next_idle_upkeep_ns: u64,
    idle_tx_interval: u64,
    loops: u64,
    heartbeat: Arc<Heartbeat>,
    panic_at_tsc: Option<u64>,
}

impl WorkerLoop {
    pub fn new(mut worker: Worker, pipeline: Pipeline) -> Self {
        let (_, router_version) = worker.router.load();
        let (_, neighbors_version) = worker.neighbors.load();
        let rx_queues = std::mem::take(&mut worker.rx);
        let layout = std::mem::take(&mut worker.layout);
        WorkerLoop {
            worker,
            pipeline,
            clock: Clock::new(),
            rx_queues,
            layout,
            rx: MbufBatch::new(),
            control: MbufBatch::new(),
            router_version,
            neighbors_version,
            loop_start: dpdk::rdtsc(),
            next_idle_tx: 0,
            next_idle_upkeep_ns: 0,
            idle_tx_interval: dpdk::tsc_hz() / 100,
            loops: 0,
            heartbeat: Arc::new(Heartbeat::new()),
            panic_at_tsc: None,
        }
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Whether a drop capture (`gateway ctl capture --drops`) is armed on this worker.
    pub fn drop_capture_armed(&self) -> bool {
        self.worker.drop_tap.as_ref().is_some_and(DropTap::is_armed)
    }

    /// The loop's clock now, as its pipeline sees time.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// One pass: new snapshots if published, rx_burst on every port, the pipeline, handoffs,
    /// upkeep, one tx_burst per port. Returns the packets received.
    #[inline]
    pub fn poll_once(&mut self) -> usize {
        let worker = &mut self.worker;
        let pipeline = &mut self.pipeline;
        let now_ns = self.clock.now_ns();
        // NAT events of this loop (a reload's renumbering included) carry its time.
        if let Some(log) = pipeline.nat_log() {
            log.set_now(now_ns);
        }
        if let Some(log) = pipeline.firewall_log() {
            log.set_now(now_ns);
        }
        if let Some(router) = worker.router.changed_since(&mut self.router_version) {
            pipeline.set_router(router);
        }
        if let Some(neighbors) = worker.neighbors.changed_since(&mut self.neighbors_version) {
            pipeline.set_neighbors(neighbors);
        }
        let mut received = 0;
        for (port, queue) in self.rx_queues.iter_mut().enumerate() {
            if queue.rx_burst(&mut self.rx) == 0 {
                continue;
            }
            received += self.rx.len();
            worker.counters.rx_packets.add(self.rx.len() as u64);
            worker.counters.rx_bursts.add(1);
            if self.rx.is_full() {
                worker.counters.rx_full_bursts.add(1);
            }
            let layout = &self.layout;
            worker.process_batch(
                pipeline,
                &mut self.rx,
                |mbuf| layout.ingress(port, mbuf),
                now_ns,
                &mut self.control,
            );
        }
        received += worker.process_handed_off(pipeline, &mut self.rx, &mut self.control, now_ns);
        if received > 0 || now_ns >= self.next_idle_upkeep_ns {
            pipeline.housekeeping(now_ns, EXPIRE_BUDGET);
            self.next_idle_upkeep_ns = now_ns + IDLE_UPKEEP_NS;
        }
        if let Some(ctl) = worker.ctl.as_mut() {
            ctl.poll(pipeline, now_ns);
        }
        if let Some(trace) = worker.trace.as_mut() {
            trace.poll();
        }
        if let Some(tap) = worker.drop_tap.as_mut() {
            tap.poll();
        }
        if let Some(sync) = worker.sync.as_mut() {
            sync.poll(pipeline, now_ns);
        }
        worker.process_from_kernel(pipeline, &mut self.rx, now_ns);
        worker.transmit_from_control(&mut self.rx);
        worker.shapers.poll(
            pipeline,
            now_ns,
            &mut worker.egress,
            &worker.pool,
            &worker.counters,
        );
        worker.egress.flush(&worker.counters);
        worker.handoff.flush(&worker.counters);
        worker.flush_control(&mut self.control);

        let loop_end = dpdk::rdtsc();
        if loop_end >= self.next_idle_tx {
            // Bonds send LACPDUs from tx_burst: quiet links must still see calls (802.3ad
            // wants them at least every 100 ms; every 10 ms leaves a wide margin).
            worker.egress.tx_idle();
            self.next_idle_tx = loop_end + self.idle_tx_interval;
        }
        let spent = loop_end.wrapping_sub(self.loop_start);
        if received > 0 {
            worker.counters.busy_cycles.add(spent);
        } else {
            worker.counters.idle_cycles.add(spent);
        }
        self.loop_start = loop_end;
        self.loops = self.loops.wrapping_add(1);
        if self.loops.is_multiple_of(HEARTBEAT_LOOPS) {
            self.beat(loop_end);
        }
        received
    }

    /// Every `HEARTBEAT_LOOPS` loops: the heartbeat, and the test hook's deliberate panic.
    #[cold]
    fn beat(&self, tsc: u64) {
        self.heartbeat.beat(tsc);
        if self.panic_at_tsc.is_some_and(|at| tsc >= at) {
            let worker = self.worker.index;
            tracing::error!(worker, "worker {worker} panics on purpose now");
            panic!(
                "worker {} panics on purpose ({})",
                self.worker.index,
                crate::dataplane::liveness::PANIC_ON_PURPOSE_VAR
            );
        }
    }

    /// Sends what is still batched, and what still waits in the QoS shapers.
    pub fn finish(&mut self) {
        let worker = &mut self.worker;
        worker.shapers.flush(
            &mut self.pipeline,
            &mut worker.egress,
            &worker.pool,
            &worker.counters,
        );
        worker.egress.flush(&worker.counters);
        worker.handoff.flush(&worker.counters);
        worker.flush_control(&mut self.control);
    }
}

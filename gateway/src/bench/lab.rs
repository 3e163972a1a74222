//! The bench's lab: net_ring ports standing in for LAN and WAN, the loop under test (the
//! gateway's worker loops, or the I/O floor's loop), and the generator that feeds them.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use pipeline::features::meter::HostMeter;
use pipeline::features::qos::QosStats;
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::wire::EthernetAddress;
use pipeline::{DropReason, NeighborView, Pipeline, RouterConfig, WorkerCounters, WorkerSetup};

use super::floor::IoFloor;
use super::traffic::{
    router_config, rss_queue, SecondUplink, Traffic, HOSTS, UPSTREAM, UPSTREAM2, UPSTREAM2_MAC,
    UPSTREAM6, UPSTREAM_MAC,
};
use super::{is_tcp, syns_in, Row, SynFlood, IN_FLIGHT, SYN_FLOOD_MIN_PAIRS, SYN_FLOOD_ROUND};
use crate::compile::publish::publish_router;
use crate::dataplane::armed::Arming;
use crate::dataplane::drop_tap::{DropCaptureRequest, DropCaptureSender, DropTap};
use crate::dataplane::egress::Egress;
use crate::dataplane::handoff::HandoffLinks;
use crate::dataplane::port_layout::PortLayout;
use crate::dataplane::published::Published;
use crate::dataplane::shaping::{queued_per_link, LinkShapers};
use crate::dataplane::worker::{Worker, WorkerLoop};
use crate::dpdk::{
    self, Eal, Mbuf, MbufBatch, MbufRing, Mempool, Port, PortConfig, RingConsumer, RingProducer,
    RxQueueId, SocketId, TxQueueId,
};
use pipeline::verdict::ReasonSet;

/// What the lab runs between the generator's rounds.
pub(super) enum Loops {
    /// The gateway's worker loops, one per worker, all on this core.
    Workers(Vec<WorkerLoop>),
    /// rx_burst, then tx_burst to the other port, and nothing else.
    Floor(Box<IoFloor>),
}

/// A worker's flow table in the bench: `capacity` flows, no per-host limit (the bench's
/// synthetic hosts hold many flows each), and a half-open limit small enough that the SYN
/// flood reaches it within a short run.
fn bench_table(capacity: usize) -> ConntrackConfig {
    ConntrackConfig {
        capacity,
        host_flows: capacity as u32,
        half_open: capacity / 16,
        ..ConntrackConfig::default()
    }
}

/// What a lab is built to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LabKind {
    /// The I/O floor's loop on one queue.
    Floor,
    /// This many workers, each with its own queue on LAN and WAN.
    Workers(u16),
    /// One worker, and IPv6 traffic through the stateful firewall (no NAT66).
    Ipv6,
    /// One worker and a second WAN port: two uplinks sharing the default route (`shared`),
    /// or the first alone with the second idle.
    Uplinks { shared: bool },
}

impl LabKind {
    /// The lab's ports: LAN, WAN, and the second WAN port of the uplinks' labs.
    fn port_names(self) -> &'static [&'static str] {
        match self {
            LabKind::Uplinks { .. } => &["lan", "wan", "wan2"],
            LabKind::Floor | LabKind::Workers(_) | LabKind::Ipv6 => &["lan", "wan"],
        }
    }
}

/// One queue of every port, as a worker has queue `w` of every port in the gateway: here a
/// net_ring port per port and queue, whose rings the generator holds the other ends of.
/// Both indexed by port: LAN first, then the WAN ports.
struct QueueRings {
    rx: Vec<RingProducer>,
    tx: Vec<RingConsumer>,
}

/// The LAN port's number in every lab; the WAN ports follow it.
const LAN: usize = 0;
/// The WAN port with the port forward, which the SYN flood's spoofed SYNs are sent to.
const FORWARDING_WAN: usize = 1;

/// Labs made in this process: their rings and ports need names of their own.
static LABS: AtomicU32 = AtomicU32::new(0);

/// Ring ports, the loops under test, and the generator that feeds them.
/// The warm-up runs in rounds of this length until it has sent its packets.
const WARM_UP_ROUND: Duration = Duration::from_millis(50);

pub(super) struct Lab {
    pub loops: Loops,
    /// One per worker (one for the floor).
    counters: Vec<Arc<WorkerCounters>>,
    /// Each worker's end of `gateway ctl capture --drops`, as the ctl thread holds them.
    drop_captures: Vec<DropCaptureSender>,
    pool: Arc<Mempool>,
    pub traffic: Traffic,
    /// Per port: generated packets waiting to be injected into its RX rings.
    inputs: Vec<Vec<Mbuf>>,
    queues: Vec<QueueRings>,
    /// Per queue: what `inject` has picked for it and not yet enqueued.
    staging: Vec<MbufBatch>,
    /// What the workers run with; publishing to it is how a reload reaches a worker.
    router: Arc<Published<RouterConfig>>,
    meters: Vec<Arc<HostMeter>>,
    qos_stats: Vec<[Arc<QosStats>; 2]>,
    rule_hits: crate::compile::rule_hits::RuleHitRegistry,
    /// Flows the workers' tables hold, all together.
    pub capacity: usize,
    pub poll_cycles: u64,
    /// SYNs the gateway forwarded to the LAN (TCP is only ever the flood's): with the SYNs
    /// sent, what tells the flood's refused SYNs from refused established packets exactly.
    pub forwarded_syns: u64,
    /// SYNs the gateway answered itself, with a SYN cookie back to the WAN (the SYN proxy,
    /// while the half-open table is full): the TCP frames it sends to the WAN.
    pub cookie_answers: u64,
    /// Per port: packets the loops sent out of it during the timed runs.
    pub sent_by_port: Vec<u64>,
    /// The ports own the rings they use, and stay open while the loops' queues live.
    _ports: Vec<Port>,
}

impl Lab {
    pub fn new(eal: &Eal, pool: &Arc<Mempool>, flows: u32, kind: LabKind) -> anyhow::Result<Lab> {
        let any = SocketId::ANY;
        let lab = LABS.fetch_add(1, Ordering::Relaxed);
        let queue_count = match kind {
            LabKind::Floor | LabKind::Ipv6 | LabKind::Uplinks { .. } => 1,
            LabKind::Workers(workers) => workers.max(1),
        };
        let port_names = kind.port_names();
        let port_count = port_names.len();
        let config = PortConfig {
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            ..PortConfig::default()
        };
        let mut queues = Vec::new();
        let mut ports = Vec::new();
        for queue in 0..queue_count {
            let (mut rx, mut tx) = (Vec::new(), Vec::new());
            for &port in port_names {
                let name = |what: &str| format!("bench{lab}_{port}{what}{queue}");
                let (rx_ring, rx_pmd) = MbufRing::create(eal, &name("_rx"), 4096, any)?;
                let (tx_pmd, tx_ring) = MbufRing::create(eal, &name("_tx"), 4096, any)?;
                let device = Port::from_rings(eal, &name(""), rx_pmd, tx_pmd)?;
                ports.push(Port::start_rings(eal, device, port, &config, pool)?);
                rx.push(rx_ring);
                tx.push(tx_ring);
            }
            queues.push(QueueRings { rx, tx });
        }
        // The first queue's MACs are the interfaces' (a NIC has one MAC for all its queues;
        // the ring PMD does not filter by it).
        let mut traffic = Traffic::new(
            EthernetAddress(ports[0].mac_address()?),
            EthernetAddress(ports[1].mac_address()?),
            flows,
        );
        traffic.ipv6 = kind == LabKind::Ipv6;
        if let LabKind::Uplinks { shared } = kind {
            traffic.second_uplink = Some(SecondUplink {
                mac: EthernetAddress(ports[2].mac_address()?),
                shared,
            });
        }
        let router_cfg = Arc::new(router_config(&traffic, None)?);
        let router = Arc::new(Published::new(router_cfg.clone()));
        let layout = PortLayout::ports_only(port_count as u16);
        let take_queues = |ports: &mut [Port], queue: usize| -> anyhow::Result<_> {
            let queue_ports = &mut ports[port_count * queue..port_count * (queue + 1)];
            let rx = (queue_ports.iter_mut())
                .map(|port| port.take_rx_queue(RxQueueId(0)))
                .collect::<Result<Vec<_>, _>>()?;
            let tx = (queue_ports.iter_mut())
                .map(|port| port.take_tx_queue(TxQueueId(0)))
                .collect::<Result<Vec<_>, _>>()?;
            let egress = Egress::new(tx, layout.links().to_vec(), layout.sessions().clone());
            Ok((rx, egress))
        };
        let mut counters = Vec::new();
        let mut drop_captures = Vec::new();
        let mut meters = Vec::new();
        let mut qos_stats = Vec::new();
        // Each worker owns about its share of the flows (by LAN host); the same headroom over
        // it as one worker has over all of them.
        let share = flows as usize / usize::from(queue_count);
        let capacity = (share + share / 2).max(1).next_power_of_two();
        let loops = match kind {
            LabKind::Floor => {
                let (rx, egress) = take_queues(&mut ports, 0)?;
                let floor_counters = Arc::new(WorkerCounters::default());
                counters.push(floor_counters.clone());
                Loops::Floor(Box::new(IoFloor::new(rx, egress, floor_counters)))
            }
            LabKind::Workers(_) | LabKind::Ipv6 | LabKind::Uplinks { .. } => {
                let neighbors = Arc::new(
                    NeighborView::new(
                        (0..HOSTS)
                            .map(|h| (Traffic::host(h), Traffic::host_mac(h)))
                            .chain([(UPSTREAM, UPSTREAM_MAC), (UPSTREAM2, UPSTREAM2_MAC)]),
                    )
                    .with_ipv6(
                        (0..HOSTS)
                            .map(|h| (Traffic::host6(h), Traffic::host_mac(h)))
                            .chain([(UPSTREAM6, UPSTREAM_MAC)]),
                    ),
                );
                let published_neighbors = Arc::new(Published::new(neighbors.clone()));
                let workers = queue_count;
                let mut links = HandoffLinks::mesh(eal, usize::from(workers), any)?.into_iter();
                let mut worker_loops = Vec::new();
                for index in 0..workers {
                    let worker_counters = Arc::new(WorkerCounters::default());
                    let meter = Arc::new(HostMeter::new(2 * HOSTS as usize));
                    let pipeline = Pipeline::for_worker(
                        router_cfg.clone(),
                        neighbors.clone(),
                        worker_counters.clone(),
                        WorkerSetup {
                            worker: index,
                            workers,
                            // The IPv6 lab's flows are all in its IPv6 table, and its IPv4
                            // table is left small.
                            conntrack: if kind == LabKind::Ipv6 {
                                ConntrackConfig::default()
                            } else {
                                bench_table(capacity)
                            },
                            conntrack6: (kind == LabKind::Ipv6).then(|| bench_table(capacity)),
                            nat_bindings: 4 * HOSTS as usize,
                            meter: Some(meter.clone()),
                            ..WorkerSetup::default()
                        },
                    )
                    .map_err(|err| anyhow::anyhow!("NAT pool: {err:?}"))?;
                    // As the gateway does at start.
                    crate::dataplane::worker::back_tables_with_huge_pages(&pipeline);
                    qos_stats.push(pipeline.qos_stats());
                    let (to_control, _unread) =
                        MbufRing::create(eal, &format!("bench{lab}_control{index}"), 1024, any)?;
                    let (rx, egress) = take_queues(&mut ports, usize::from(index))?;
                    let (drop_capture, drop_tap) = DropTap::pair(index);
                    drop_captures.push(drop_capture);
                    let worker = Worker {
                        index,
                        rx,
                        layout: layout.clone(),
                        handoff: links.next().context("a worker's handoff links")?,
                        egress,
                        shapers: LinkShapers::new(
                            queued_per_link(pool.capacity(), usize::from(workers)),
                            pipeline.qos_stats(),
                        ),
                        pool: pool.clone(),
                        to_control,
                        from_control: None,
                        punt: None,
                        from_kernel: None,
                        router: router.clone(),
                        neighbors: published_neighbors.clone(),
                        counters: worker_counters.clone(),
                        stop: Arc::new(AtomicBool::new(false)),
                        // As the gateway runs, with ctl's one check per loop; nobody asks.
                        ctl: Some(crate::dataplane::ctl_link::CtlLink::pair().1),
                        trace: Some(crate::dataplane::trace_link::TraceLink::pair(index).1),
                        drop_tap: Some(drop_tap),
                        sync: None,
                    };
                    worker_loops.push(WorkerLoop::new(worker, pipeline));
                    counters.push(worker_counters);
                    meters.push(meter);
                }
                Loops::Workers(worker_loops)
            }
        };
        Ok(Lab {
            loops,
            counters,
            drop_captures,
            pool: pool.clone(),
            traffic,
            inputs: (0..port_count)
                .map(|_| Vec::with_capacity(IN_FLIGHT))
                .collect(),
            staging: queues.iter().map(|_| MbufBatch::new()).collect(),
            queues,
            router,
            meters,
            rule_hits: crate::compile::rule_hits::RuleHitRegistry::new(usize::from(queue_count)),
            qos_stats,
            capacity: match kind {
                LabKind::Floor => 0,
                LabKind::Workers(_) | LabKind::Ipv6 | LabKind::Uplinks { .. } => {
                    capacity * usize::from(queue_count)
                }
            },
            poll_cycles: 0,
            forwarded_syns: 0,
            cookie_answers: 0,
            sent_by_port: vec![0; port_count],
            _ports: ports,
        })
    }

    /// Arms every worker's drop capture for `reasons`, as `gateway ctl capture --drops`
    /// does, with no end of its own: it stays armed until the returned flag is set (the
    /// workers disarm at their next loop). What they capture waits in the returned channel.
    pub fn arm_drop_capture(
        &self,
        reasons: ReasonSet,
    ) -> anyhow::Result<(
        crossbeam_channel::Receiver<crate::dataplane::drop_tap::DroppedPacket>,
        Arc<AtomicBool>,
    )> {
        let (records, captured) = crossbeam_channel::bounded(1024);
        let done = Arc::new(AtomicBool::new(false));
        for requests in &self.drop_captures {
            let arming = Arming {
                count: usize::MAX,
                records: records.clone(),
                done: done.clone(),
            };
            if requests
                .try_send(DropCaptureRequest { reasons, arming })
                .is_err()
            {
                anyhow::bail!("a bench worker's drop capture was armed already");
            }
        }
        Ok((captured, done))
    }

    /// The worker loops (none for the floor).
    pub fn workers(&self) -> &[WorkerLoop] {
        match &self.loops {
            Loops::Workers(loops) => loops,
            Loops::Floor(_) => &[],
        }
    }

    /// Flows in every worker's table.
    pub fn flow_count(&self) -> usize {
        self.workers()
            .iter()
            .map(|worker| worker.pipeline().flow_count() + worker.pipeline().ipv6_flow_count())
            .sum()
    }

    /// Packets the loops received from the ports (not those handed between workers).
    pub fn rx_packets(&self) -> u64 {
        self.counters.iter().map(|c| c.rx_packets.get()).sum()
    }

    /// Packets handed from one worker to another.
    pub fn handoffs_sent(&self) -> u64 {
        self.counters.iter().map(|c| c.handoffs_sent.get()).sum()
    }

    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.counters.iter().map(|c| c.dropped(reason)).sum()
    }

    /// Every reason something was dropped for, with its count.
    pub fn drops_by_reason(&self) -> Vec<(DropReason, u64)> {
        DropReason::ALL
            .iter()
            .map(|&reason| (reason, self.dropped(reason)))
            .filter(|&(_, count)| count > 0)
            .collect()
    }

    pub fn dropped_total(&self) -> u64 {
        self.counters.iter().map(|c| c.dropped_total()).sum()
    }

    /// The most half-open flows the workers' tables hold together.
    fn half_open_limit(&self) -> usize {
        self.workers()
            .iter()
            .map(|worker| worker.pipeline().flow_half_open_limit())
            .sum()
    }

    pub fn half_open(&self) -> u64 {
        self.counters
            .iter()
            .map(|c| c.conntrack_half_open.get())
            .sum()
    }

    /// Hosts the traffic meters counted, over all workers.
    pub fn metered_hosts(&self) -> usize {
        self.meters
            .iter()
            .map(|meter| meter.snapshot().count())
            .sum()
    }

    /// Hands the workers a new config, as the control thread does on a reload.
    pub fn publish(&self, router: &Arc<RouterConfig>) {
        publish_router(
            &self.router,
            &self.qos_stats,
            (&self.rule_hits, &[]),
            router.clone(),
        );
    }

    pub fn alloc(&self) -> anyhow::Result<Mbuf> {
        Mbuf::alloc(&self.pool).context("the bench's mempool ran dry")
    }

    /// One timed pass of the loops under test: every worker's loop once, or the floor's.
    pub fn poll(&mut self) -> usize {
        let start = dpdk::rdtsc();
        let received = match &mut self.loops {
            Loops::Workers(loops) => loops.iter_mut().map(WorkerLoop::poll_once).sum(),
            Loops::Floor(floor) => floor.poll_once(),
        };
        self.poll_cycles += dpdk::rdtsc() - start;
        received
    }

    /// Moves generated packets into the ports' RX rings: with several queues, each packet
    /// into the one RSS would pick for it.
    pub fn inject(&mut self) {
        let queues = self.queues.len();
        for (port, pending) in self.inputs.iter_mut().enumerate() {
            while let Some(mbuf) = pending.pop() {
                let queue = if queues == 1 {
                    0
                } else {
                    rss_queue(mbuf.data(), queues)
                };
                let staged = &mut self.staging[queue];
                let Err(mbuf) = staged.push(mbuf) else {
                    continue;
                };
                self.queues[queue].rx[port].enqueue(staged);
                if !staged.is_empty() {
                    // The ring is full: keep the rest for the next round.
                    pending.push(mbuf);
                    break;
                }
                let _ = staged.push(mbuf);
            }
            for (staged, rings) in self.staging.iter_mut().zip(&mut self.queues) {
                rings.rx[port].enqueue(staged);
                pending.extend(staged.drain());
            }
        }
    }

    /// Whether every RX ring is empty.
    fn rx_rings_empty(&self) -> bool {
        (self.queues.iter()).all(|rings| rings.rx.iter().all(RingProducer::is_empty))
    }

    /// Polls until the RX rings are empty, discarding whatever the loops send.
    pub fn drain(&mut self) {
        // The RX rings hold 4,096 packets each; bounded all the same.
        for _ in 0..1024 {
            let received = self.poll();
            self.discard_output();
            if received == 0 && self.rx_rings_empty() {
                break;
            }
        }
    }

    pub fn discard_output(&mut self) {
        let mut batch = MbufBatch::new();
        for rings in &mut self.queues {
            for (port, tx) in rings.tx.iter_mut().enumerate() {
                while tx.dequeue(&mut batch) > 0 {
                    // TCP to the LAN is the flood's forwarded SYNs; to the WAN, cookies.
                    match port {
                        LAN => self.forwarded_syns += syns_in(&batch),
                        _ => self.cookie_answers += syns_in(&batch),
                    }
                    batch.free_all();
                }
            }
        }
    }

    /// Runs the loops for `duration` with traffic in flight, `new_percent` of outbound
    /// packets opening new flows. Returns packets received and cycles spent by the loops.
    pub fn steady(
        &mut self,
        name: &'static str,
        duration: Duration,
        new_percent: u32,
    ) -> anyhow::Result<Row> {
        let most_in_use = self.pool.capacity() * 3 / 4;
        self.warm_up(most_in_use)?;
        self.steady_with_syns(name, duration, new_percent, 0, most_in_use)
    }

    /// Untimed traffic until every flow has sent both ways once more. After the table is
    /// made, and after every new config, each flow direction's first packet takes the
    /// pipeline's full path and leaves the flow a shortcut (`pipeline::fast_path`); the rows
    /// measure what comes after, the steady state. Only established flows: new ones would
    /// fill the table beyond what the rows that follow expect.
    pub fn warm_up(&mut self, most_in_use: u32) -> anyhow::Result<()> {
        if self.workers().is_empty() {
            return Ok(());
        }
        let until = self.rx_packets() + 2 * self.flow_count() as u64;
        while self.rx_packets() < until {
            self.steady_with_syns("warm-up", WARM_UP_ROUND, 0, 0, most_in_use)?;
        }
        Ok(())
    }

    /// The established flows without and then with `syn_percent` of the replies from the WAN
    /// replaced by spoofed SYNs toward the port forward. Both runs keep the same number of
    /// packets in flight (counting those waiting in the rings): otherwise the refill, which
    /// counts only the generator's queues, lets the rings fill up differently in each, and
    /// the runs would differ in cache misses on packet data rather than in the flood.
    pub fn syn_flood(&mut self, duration: Duration, syn_percent: u32) -> anyhow::Result<SynFlood> {
        let in_flight = (IN_FLIGHT + IN_FLIGHT / 2) as u32;
        self.warm_up(in_flight)?;
        self.fill_half_open(in_flight)?;
        let forwarded_before = self.forwarded_syns;
        let cookies_before = self.cookie_answers;
        let drops_before = self.dropped_total();
        let by_reason_before: Vec<u64> = DropReason::ALL
            .iter()
            .map(|&reason| self.dropped(reason))
            .collect();
        let mut baseline = Row::empty("established (SYN-flood baseline)");
        let mut flood = Row::empty("+ spoofed SYNs at a port forward");
        // Pairs of adjacent rounds, in ABBA order (baseline first, then flood first), so that
        // neither kind always runs second, after the other has warmed or cooled the caches.
        let round_ms = SYN_FLOOD_ROUND.as_millis() as u32;
        let pairs = (duration.as_millis() as u32 / (2 * round_ms)).max(SYN_FLOOD_MIN_PAIRS);
        let round = duration / (2 * pairs);
        let mut round_ratios = Vec::with_capacity(pairs as usize);
        for pair in 0..pairs {
            let flood_first = pair % 2 == 1;
            let mut rows = Vec::with_capacity(2);
            for with_syns in [flood_first, !flood_first] {
                let (name, percent) = if with_syns {
                    (flood.name, syn_percent)
                } else {
                    (baseline.name, 0)
                };
                rows.push(self.steady_with_syns(name, round, 0, percent, in_flight)?);
            }
            let (flood_row, base_row) = if flood_first {
                (&rows[0], &rows[1])
            } else {
                (&rows[1], &rows[0])
            };
            round_ratios.push(flood_row.established_per_cycle() / base_row.established_per_cycle());
            baseline.add(base_row);
            flood.add(flood_row);
        }
        // Every SYN sent was forwarded or dropped (the rings are drained after each round).
        let cookies = self.cookie_answers - cookies_before;
        let refused_syns = flood.syns - (self.forwarded_syns - forwarded_before) - cookies;
        let refused_established =
            (self.dropped_total() - drops_before).saturating_sub(refused_syns);
        let refused_by_reason = DropReason::ALL
            .iter()
            .zip(by_reason_before)
            .map(|(&reason, before)| (reason, self.dropped(reason) - before))
            .filter(|&(_, count)| count > 0)
            .collect();
        let half_open_limit = self.half_open_limit();
        Ok(SynFlood {
            baseline,
            flood,
            refused_syns,
            cookies,
            refused_established,
            refused_by_reason,
            half_open: self.half_open(),
            half_open_limit,
            round_ratios,
        })
    }

    /// Spoofed SYNs in place of every reply until the half-open table is full: the state of a
    /// flood that has been going on for a while, in which every further SYN first evicts the
    /// oldest half-open flow. At most a few seconds; the bench goes on either way and prints
    /// the half-open count it reached.
    fn fill_half_open(&mut self, in_flight: u32) -> anyhow::Result<()> {
        let limit = self.half_open_limit() as u64;
        for _ in 0..200 {
            if self.half_open() >= limit {
                break;
            }
            self.steady_with_syns("half-open fill", SYN_FLOOD_ROUND, 0, 100, in_flight)?;
        }
        Ok(())
    }

    pub fn steady_with_syns(
        &mut self,
        name: &'static str,
        duration: Duration,
        new_percent: u32,
        syn_percent: u32,
        most_in_use: u32,
    ) -> anyhow::Result<Row> {
        let mut syns = 0;
        for _ in 0..IN_FLIGHT {
            let mut mbuf = self.alloc()?;
            let len = self.traffic.next_outbound(mbuf.room_mut(), new_percent);
            mbuf.set_len(len)?;
            self.inputs[LAN].push(mbuf);
        }
        let rx_before = self.rx_packets();
        let handoffs_before = self.handoffs_sent();
        let cycles_before = self.poll_cycles;
        let deadline = Instant::now() + duration;
        let mut batch = MbufBatch::new();
        let ports = self.inputs.len();
        while Instant::now() < deadline {
            for _ in 0..64 {
                self.inject();
                self.poll();
                for rings in &mut self.queues {
                    // The WAN ports first, then the LAN.
                    for port in (1..ports).chain([LAN]) {
                        while rings.tx[port].dequeue(&mut batch) > 0 {
                            self.sent_by_port[port] += batch.len() as u64;
                            if port == LAN {
                                self.forwarded_syns += syns_in(&batch);
                            }
                            for mut mbuf in batch.drain() {
                                // What reached the LAN makes the next outbound packet, as
                                // does a SYN answered with a cookie (the only TCP sent to
                                // the WAN).
                                if port == LAN || is_tcp(mbuf.data()) {
                                    self.cookie_answers += u64::from(port != LAN);
                                    let len =
                                        self.traffic.next_outbound(mbuf.room_mut(), new_percent);
                                    if mbuf.set_len(len).is_ok() {
                                        self.inputs[LAN].push(mbuf);
                                    }
                                    continue;
                                }
                                // A SYN takes the place of a reply, not of an outbound
                                // packet: both enter by the WAN and leave by the LAN, so each
                                // ring keeps the inflow it had without the flood, and replies
                                // stay one burst behind their outbound packets in both kinds
                                // of round.
                                if self.traffic.syn_due(syn_percent) {
                                    let len = self.traffic.spoofed_syn(mbuf.room_mut());
                                    if mbuf.set_len(len).is_ok() {
                                        self.inputs[FORWARDING_WAN].push(mbuf);
                                        syns += 1;
                                    }
                                    continue;
                                }
                                if let Some(back) = self.traffic.reflect(mbuf.data_mut()) {
                                    self.inputs[usize::from(back)].push(mbuf);
                                }
                            }
                        }
                    }
                }
                // Lost packets (drops) are replaced so the load stays constant; never so many
                // that the pool runs dry (packets waiting in the rings count too).
                while self.inputs.iter().map(Vec::len).sum::<usize>() < IN_FLIGHT / 4
                    && self.pool.in_use() < most_in_use
                {
                    let mut mbuf = self.alloc()?;
                    let len = self.traffic.next_outbound(mbuf.room_mut(), new_percent);
                    mbuf.set_len(len)?;
                    self.inputs[LAN].push(mbuf);
                }
            }
        }
        let packets = self.rx_packets() - rx_before;
        let cycles = self.poll_cycles - cycles_before;
        let handoffs = self.handoffs_sent() - handoffs_before;
        let wan_backlog = (self.queues.iter())
            .flat_map(|rings| &rings.rx[1..])
            .map(RingProducer::len)
            .sum();
        // SYNs generated but never injected were not sent. (Those injected but still in the
        // WAN ring are counted and not received: `wan_backlog`, printed, says how many
        // packets that can be at most.)
        syns -= self.inputs[FORWARDING_WAN]
            .iter()
            .filter(|mbuf| is_tcp(mbuf.data()))
            .count() as u64;
        // Drain what is in flight before the next run, so that runs start alike and short
        // ones do not pile leftovers up until the pool runs dry.
        self.inputs.iter_mut().for_each(Vec::clear);
        self.drain();
        Ok(Row {
            name,
            packets,
            cycles,
            syns,
            handoffs,
            wan_backlog,
        })
    }

    /// Opens `flows` flows, each by one outbound packet, nothing reflected; returns the
    /// loops' cycles.
    pub fn set_up_flows(&mut self, flows: u32) -> anyhow::Result<u64> {
        let started = self.poll_cycles;
        let mut created = 0u32;
        while created < flows {
            let burst = (flows - created).min(32);
            for _ in 0..burst {
                let mut mbuf = self.alloc()?;
                let len = self.traffic.outbound(mbuf.room_mut(), created);
                mbuf.set_len(len)?;
                self.inputs[LAN].push(mbuf);
                created += 1;
            }
            self.inject();
            self.poll();
            self.discard_output();
        }
        while self.poll() > 0 {
            self.discard_output();
        }
        let cycles = self.poll_cycles - started;
        let in_table = self.flow_count();
        anyhow::ensure!(
            in_table as u32 >= flows * 9 / 10,
            "only {in_table} of {flows} flows were created; see the drop counters"
        );
        Ok(cycles)
    }
}

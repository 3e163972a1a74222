//! Start-up's workers: each worker's rings, pipeline (with the snapshot's flows restored),
//! queues and links, launched on its lcore and watched.

use pipeline::state::drop_log::DropSampler;
use pipeline::state::nat::NatLog;

use super::*;
use crate::dataplane::ctl_link::QuerySender;
use crate::dataplane::drop_tap::DropCaptureSender;
use crate::dataplane::sync_link::{SyncLink, SyncQueues};
use crate::dataplane::trace_link::TraceSender;
use crate::dpdk::{RingConsumer, RingProducer};

/// What the workers are started from.
pub(crate) struct WorkerStart<'s> {
    pub(crate) eal: &'s Eal,
    pub(crate) config: &'s GatewayConfig,
    pub(crate) worker_lcores: &'s [LcoreId],
    pub(crate) workers: u16,
    pub(crate) socket: SocketId,
    pub(crate) stop: &'s Arc<AtomicBool>,
    pub(crate) events: &'s Sender<ControlEvent>,
    pub(crate) twins: &'s Twins,
    pub(crate) router: &'s Arc<Published<pipeline::RouterConfig>>,
    pub(crate) neighbors: &'s Arc<Published<NeighborView>>,
    pub(crate) layout: &'s PortLayout,
    pub(crate) pool: &'s Arc<Mempool>,
}

/// The running workers and their ends for the rest of the gateway, in the order start-up
/// declares them (the running workers after the rings they poll: dropped first).
pub(crate) struct WorkersUp {
    pub(crate) control_to_worker: RingProducer,
    pub(crate) from_workers: Vec<RingConsumer>,
    pub(crate) worker_counters: Vec<Arc<WorkerCounters>>,
    pub(crate) heartbeats: Vec<Arc<Heartbeat>>,
    pub(crate) meters: Vec<Arc<HostMeter>>,
    pub(crate) qos_stats: Vec<[Arc<pipeline::features::qos::QosStats>; 2]>,
    pub(crate) snapshot_status: Arc<SnapshotStatus>,
    pub(crate) saved_flows: Sender<Vec<SavedFlow>>,
    pub(crate) stopped_flows: Receiver<Vec<SavedFlow>>,
    pub(crate) running_workers: Workers,
    pub(crate) ctl_queries: Vec<QuerySender>,
    pub(crate) trace_requests: Vec<TraceSender>,
    pub(crate) drop_captures: Vec<DropCaptureSender>,
    pub(crate) nat_logs: Vec<Arc<NatLog>>,
    pub(crate) firewall_logs: Vec<Arc<FirewallLog>>,
    /// Each worker's session sync queues, with `[ha.sync]`.
    pub(crate) sync_queues: Vec<Arc<SyncQueues>>,
}

/// Starts a worker on each lcore of `workers.lcores`: queue i of every port is worker i's, and
/// the twins' rings of each go to `rings`. On an error the workers started so far stop before
/// their rings go (and, the caller's, the ports and the pool).
pub(crate) fn start_workers(
    start: WorkerStart<'_>,
    ports: &mut [Port],
    (punt_rings, kernel_rings): (&mut Vec<RingConsumer>, &mut Vec<RingProducer>),
) -> anyhow::Result<WorkersUp> {
    let WorkerStart {
        eal,
        config,
        worker_lcores,
        workers,
        socket,
        stop,
        events,
        twins,
        router,
        neighbors,
        layout,
        pool,
    } = start;
    let (control_to_worker, worker_from_control) =
        MbufRing::create(eal, "control_to_worker0", 1024, socket)?;
    let mut worker_from_control = Some(worker_from_control);
    let mut from_workers = Vec::new();
    let mut worker_counters = Vec::new();
    let mut heartbeats = Vec::new();
    let mut handoff_links = HandoffLinks::mesh(eal, worker_lcores.len(), socket)?.into_iter();
    let mut meters = Vec::new();
    let mut qos_stats = Vec::new();
    let panic_on_purpose = PanicOnPurpose::from_env();
    // The state snapshot's flows go into each worker's tables before it polls; each stopped
    // worker sends its flows back for the next one.
    let snapshot_status = Arc::new(SnapshotStatus::default());
    let mut restore = Restore::prepare(&config.state, &router.load().0, workers, &snapshot_status);
    let (saved_flows, stopped_flows) = crossbeam_channel::unbounded();
    // Declared after the ports, rings and pool: dropped first, on every path out of here.
    let mut running_workers = Workers::new(stop.clone());
    let mut ctl_queries = Vec::new();
    let mut trace_requests = Vec::new();
    let mut drop_captures = Vec::new();
    let mut nat_logs = Vec::new();
    let mut firewall_logs = Vec::new();
    let mut sync_queues = Vec::new();
    for (index, &lcore) in worker_lcores.iter().enumerate() {
        let (to_control, from_worker) = MbufRing::create(
            eal,
            &format!("to_control_{index}"),
            crate::dataplane::worker::CONTROL_RING_CAPACITY,
            socket,
        )?;
        from_workers.push(from_worker);
        let (punt, from_kernel) = if twins.any() {
            let (link, from_worker) = crate::dataplane::punt::punt_ring(eal, index, socket)?;
            punt_rings.push(from_worker);
            let (to_worker, from_kernel) = crate::dataplane::punt::kernel_ring(eal, index, socket)?;
            kernel_rings.push(to_worker);
            (Some(link), Some(from_kernel))
        } else {
            (None, None)
        };
        let counters = Arc::new(WorkerCounters::default());
        worker_counters.push(counters.clone());
        // Allocated even while the meter is off, so that a reload can switch it on.
        let meter = Arc::new(HostMeter::new(config.traffic_meter.capacity));
        meters.push(meter.clone());
        let nat_log = config.nat.log.enabled().then(|| {
            Arc::new(pipeline::state::nat::NatLog::new(
                config.nat.log.queue_events,
            ))
        });
        nat_logs.extend(nat_log.clone());
        let mut setup = worker_setup(config, index as u16, workers, Some(meter), nat_log);
        let log_config = &config.firewall.log;
        if log_config.enabled() {
            let log = Arc::new(FirewallLog::new(log_config.queue_events));
            firewall_logs.push(log.clone());
            let logger = FirewallLogger::new(log, log_config.per_sec, log_config.burst);
            let drop_reasons = log_config.drop_reasons();
            setup.firewall_log = Some(if drop_reasons.is_empty() {
                logger
            } else {
                let per_sec = log_config.drops_per_sec;
                logger.with_drops(DropSampler::new(
                    drop_reasons,
                    log_config.drops_sample,
                    per_sec,
                    per_sec,
                ))
            });
        }
        let pipeline =
            Pipeline::for_worker(router.load().0, neighbors.load().0, counters.clone(), setup)
                .map_err(|err| anyhow::anyhow!("worker {index}: NAT pool: {err:?}"))?;
        qos_stats.push(pipeline.qos_stats());
        let mut pipeline = pipeline;
        if let Some(restore) = restore.as_mut() {
            restore.apply(index, &mut pipeline);
        }
        let advice = crate::dataplane::worker::back_tables_with_huge_pages(&pipeline);
        tracing::info!(
            worker = index,
            mib = advice.covered >> 20,
            collapsed = advice.collapsed,
            "flow table on transparent huge pages"
        );
        let unix_now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        // Workers' clocks start at zero when they start; close enough for minute windows.
        pipeline.set_wall_clock(unix_now, 0);
        // Worker i polls and transmits on queue i of every port, and nobody else does.
        let rx = ports
            .iter_mut()
            .map(|port| port.take_rx_queue(RxQueueId(index as u16)))
            .collect::<Result<Vec<_>, _>>()?;
        let tx = ports
            .iter_mut()
            .map(|port| port.take_tx_queue(TxQueueId(index as u16)))
            .collect::<Result<Vec<_>, _>>()?;
        let worker = Worker {
            index: index as u16,
            rx,
            handoff: handoff_links.next().expect("one set of links per worker"),
            egress: Egress::new(tx, layout.links().to_vec(), layout.sessions().clone()),
            shapers: LinkShapers::new(
                crate::dataplane::shaping::queued_per_link(
                    config.mempool.mbufs,
                    worker_lcores.len(),
                ),
                pipeline.qos_stats(),
            ),
            layout: layout.clone(),
            pool: pool.clone(),
            to_control,
            from_control: worker_from_control.take(),
            punt,
            from_kernel,
            router: router.clone(),
            neighbors: neighbors.clone(),
            counters,
            stop: stop.clone(),
            ctl: Some({
                let (queries, link) = crate::dataplane::ctl_link::CtlLink::pair();
                ctl_queries.push(queries);
                link
            }),
            trace: Some({
                let (requests, link) = crate::dataplane::trace_link::TraceLink::pair(index as u16);
                trace_requests.push(requests);
                link
            }),
            drop_tap: Some({
                let (requests, tap) = crate::dataplane::drop_tap::DropTap::pair(index as u16);
                drop_captures.push(requests);
                tap
            }),
            sync: config.ha.sync.as_ref().map(|sync| {
                let (queues, link) =
                    SyncLink::pair(sync.refresh_ms * 1_000_000, sync.lease_ms() * 1_000_000);
                sync_queues.push(queues);
                link
            }),
        };
        let heartbeat = Arc::new(Heartbeat::new());
        heartbeats.push(heartbeat.clone());
        let panic_at = panic_on_purpose.and_then(|hook| hook.deadline_tsc(index));
        let exits = events.clone();
        let saved_flows = saved_flows.clone();
        let work = dpdk::launch_watched(
            eal,
            lcore,
            move || {
                let (pipeline, now_ns) = worker.run(pipeline, heartbeat, panic_at);
                let mut flows = Vec::new();
                pipeline.export_flows(now_ns, &mut flows);
                let _ = saved_flows.send(flows);
            },
            move |panic| {
                let _ = exits.send(ControlEvent::WorkerExited(WorkerExit {
                    worker: index,
                    panic,
                }));
            },
        )?;
        running_workers.push(index, work);
    }
    if std::env::var_os(FAIL_START_ON_PURPOSE_VAR).is_some() {
        bail!(
            "start-up fails on purpose ({FAIL_START_ON_PURPOSE_VAR}) with {} workers running",
            running_workers.len()
        );
    }
    if let Some(restore) = restore.take() {
        restore.finish(&snapshot_status);
    }
    Ok(WorkersUp {
        control_to_worker,
        from_workers,
        worker_counters,
        heartbeats,
        meters,
        qos_stats,
        snapshot_status,
        saved_flows,
        stopped_flows,
        running_workers,
        ctl_queries,
        trace_requests,
        drop_captures,
        nat_logs,
        firewall_logs,
        sync_queues,
    })
}

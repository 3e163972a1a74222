//! Bringing the gateway up from its config, running it, and taking it down in order:
//! workers stop, rings drain, ports stop, pools go, the EAL cleans up.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context};
use crossbeam_channel::{Receiver, Sender};
use pipeline::features::meter::HostMeter;
use pipeline::l3::neigh::NeighborConfig;
use pipeline::pipeline::snapshot::SavedFlow;
use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
use pipeline::state::nat::Ownership;
use pipeline::wire::EthernetAddress;
use pipeline::{NeighborView, Pipeline, WorkerCounters};

use crate::compile::router::{router_config, router_config_with_kernel, worker_setup};
use crate::compile::rule_hits::RuleHitRegistry;
use crate::config::history::{ConfigHistory, FileText};
use crate::config::store::ConfigStore;
use crate::config::{
    device_name, is_pci_address, parse_hex, BondConfig, GatewayConfig, HugepageMode,
    InterfaceAddress, LacpRate,
};
use crate::control::neighbors::ControlPlane;
use crate::control::netlink::{Followed, KernelView};
use crate::control::pppoe::{PppoeLinks, PppoeView};
use crate::control::twins::Twins;
use crate::ctl::config_apply::AwaitingConfirmation;
use crate::ctl::ConfigRequest;
use crate::dataplane::egress::Egress;
use crate::dataplane::flow_snapshot::{Restore, SnapshotStatus};
use crate::dataplane::handoff::HandoffLinks;
use crate::dataplane::liveness::{Heartbeat, PanicOnPurpose, WorkerExit, Workers};
use crate::dataplane::port_layout::PortLayout;
use crate::dataplane::published::Published;
use crate::dataplane::shaping::LinkShapers;
use crate::dataplane::worker::Worker;
use crate::dpdk::flow::FlowRule;
use crate::dpdk::hugetlbfs;
use crate::dpdk::{
    self, Eal, EalArgs, LcoreId, MbufRing, Mempool, Port, PortConfig, PortId, RxQueueId, SocketId,
    TxQueueId,
};
use crate::reload;
use crate::reload::status::ReloadStatus;
use crate::telemetry::bond_watch::BondWatch;
use crate::telemetry::metrics::{self, MeterExport, MeterSource, Metrics, Sources};
use crate::telemetry::port_watch::{self, PortWatch, WatchedPort};

pub fn eal_args(config: &GatewayConfig) -> anyhow::Result<EalArgs> {
    let shortfall =
        || hugetlbfs::shortfall(config.eal.total_memory_mb(), &config.eal.socket_memory_mb);
    let no_huge = match config.eal.hugepages {
        HugepageMode::Off => true,
        HugepageMode::Required => match shortfall() {
            Some(why) => bail!(
                "eal.hugepages = \"required\" but the hugepages fall short: {why} (see `make hugepages`)"
            ),
            None => false,
        },
        HugepageMode::Auto => match shortfall() {
            Some(why) if config.eal.pdump => bail!(
                "eal.pdump needs hugepages, and they fall short: {why} (see `make hugepages`)"
            ),
            Some(why) => {
                eprintln!(
                    "notice: hugepages fall short ({why}); running with --no-huge (slower, fine for labs)"
                );
                true
            }
            None => false,
        },
    };
    Ok(eal_args_with(config, no_huge))
}

/// The EAL's arguments once it is known whether hugepages are used.
pub fn eal_args_with(config: &GatewayConfig, no_huge: bool) -> EalArgs {
    let mut lcores = vec![LcoreId(config.eal.main_lcore)];
    lcores.extend(config.workers.lcores.iter().map(|&l| LcoreId(l)));
    let (pci, vdevs): (Vec<_>, Vec<_>) = config
        .interfaces
        .iter()
        .flat_map(|iface| iface.eal_devices())
        .partition(|device| is_pci_address(device));
    EalArgs {
        lcores,
        cpus: config.eal.cpus.clone(),
        no_huge,
        memory_mb: config.eal.total_memory_mb(),
        socket_memory_mb: config.eal.socket_memory_mb.clone(),
        // The capture tools attach to the runtime files `--in-memory` would leave out.
        in_memory: !config.eal.pdump,
        file_prefix: Some(config.eal.file_prefix.clone()),
        no_pci: pci.is_empty(),
        pci_allow: pci,
        vdevs,
        log_level: Some(config.eal.log_level.clone()),
        extra: config.eal.extra_args.clone(),
    }
}

/// What the control thread waits for between its polls of the workers' rings.
#[derive(Debug)]
enum ControlEvent {
    /// SIGHUP arrived.
    ReloadSignal,
    /// The config file was written and has been quiet for `reload::QUIET_BEFORE_RELOAD`.
    FileChanged,
    /// A worker's lcore finished: a panic, or a return nobody asked for.
    WorkerExited(WorkerExit),
    /// The `config-load` thread finished a reload: publish it, or report the refusal.
    Loaded(Box<reload::LoadResult>),
    /// The kernel's addresses or routes on the twins changed (`crate::control::netlink`).
    Kernel(KernelView),
}

/// The environment variable that makes start-up fail on purpose once every worker runs, for
/// the test that workers stop before the ports close. Read once at start.
const FAIL_START_ON_PURPOSE_VAR: &str = "GATEWAY_TEST_FAIL_START";

/// Runs until SIGINT or SIGTERM, or until a worker dies (an error, so that the process exits
/// non-zero and the service manager restarts it).
pub fn run(config_path: &Path) -> anyhow::Result<()> {
    let (config, running_file) = reload::load_file(config_path)?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    // Read before anything starts: a bad file stops the start as check-config reports it.
    let web_config = crate::config::web::for_metrics(&config.metrics)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let (events, control_events) = crossbeam_channel::unbounded();
    let mut hangups = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .context("installing the SIGHUP handler")?;
    let hangup_handle = hangups.handle();
    let hangup_thread = {
        let events = events.clone();
        std::thread::Builder::new()
            .name("sighup".into())
            .spawn(move || {
                for _ in hangups.forever() {
                    let _ = events.send(ControlEvent::ReloadSignal);
                }
            })
            .context("starting the SIGHUP thread")?
    };
    // `reload.watch = false`: only SIGHUP and `gateway ctl config` change what runs.
    let watcher = config.reload.watch.then(|| {
        let events = events.clone();
        reload::watch_file(config_path, reload::QUIET_BEFORE_RELOAD, move || {
            let _ = events.send(ControlEvent::FileChanged);
        })
        .map_err(|err| tracing::warn!("not watching {} for changes: {err}", config_path.display()))
        .ok()
    });
    let result = Eal::init(&eal_args(&config)?)
        .map_err(anyhow::Error::from)
        .and_then(|eal| {
            tracing::info!(dpdk = %dpdk::version(), "EAL up");
            let pdump = match config.eal.pdump {
                true => Some(dpdk::Pdump::init(&eal)?),
                false => None,
            };
            if pdump.is_some() {
                tracing::info!(
                    file_prefix = %config.eal.file_prefix,
                    "rte_pdump up: dpdk-dumpcap --file-prefix={} captures any port",
                    config.eal.file_prefix
                );
            }
            let channels = (events, control_events);
            let loaded = LoadedFile {
                path: config_path,
                config: &config,
                text: running_file,
            };
            let result = serve(loaded, web_config, &eal, stop, channels);
            drop(pdump);
            drop(eal);
            result
        });
    drop(watcher);
    hangup_handle.close();
    let _ = hangup_thread.join();
    result
}

/// A started gateway: what `serve` owns from start to teardown. [`Gateway::start`] brings it
/// up, [`Gateway::run`] serves until told to stop or a worker dies, [`Gateway::teardown`]
/// takes it down in order.
///
/// Fields drop in declaration order, so a path that skips the teardown (a panic while
/// running) takes things down in the order `serve`'s locals once did: the threads that use
/// the rest first, then the control plane, the workers before the rings, ports and pool they
/// poll, the ports before their pool.
struct Gateway<'a> {
    config_path: &'a Path,
    config: &'a GatewayConfig,
    stop: Arc<AtomicBool>,
    loader: reload::Loader,
    metrics_thread: Option<std::thread::JoinHandle<()>>,
    metrics_stop: Arc<AtomicBool>,
    ctl_server: Option<crate::ctl::server::CtlServer>,
    /// Sends the NAT log; dropped after the workers, so it sends what they queued last.
    nat_logger: Option<crate::telemetry::nat_log::NatLogger>,
    /// Sends the firewall log; dropped after the workers, as the NAT log.
    firewall_logger: Option<crate::telemetry::firewall_log::FirewallLogger>,
    metrics_failed: bool,
    meter_export: Arc<Published<MeterExport>>,
    netlink_thread: Option<std::thread::JoinHandle<()>>,
    /// The config in force: the last reload applied (kernel updates are compiled onto it).
    running: GatewayConfig,
    /// What the kernel and the PPPoE sessions say, merged, for the config-load thread, which
    /// compiles reloads with it.
    kernel_for_loads: Arc<Mutex<KernelView>>,
    /// The two halves of it: netlink sends whole views, which would overwrite the sessions'.
    netlink_view: KernelView,
    pppoe_view: PppoeView,
    control: ControlPlane,
    router_published: Arc<Published<pipeline::RouterConfig>>,
    reload_status: Arc<ReloadStatus>,
    config_history: ConfigHistory,
    /// The firewall rules' hit counters, kept across reloads by rule name.
    rule_hits: RuleHitRegistry,
    /// `gateway ctl config` requests, from the ctl thread.
    config_requests: Receiver<ConfigRequest>,
    /// An apply that rolls back unless confirmed in time.
    awaiting_confirmation: Option<AwaitingConfirmation>,
    control_counters: Arc<WorkerCounters>,
    /// Before the ports, rings and pool: dropped first.
    running_workers: Workers,
    /// Each stopped worker sends its flows back, for the state snapshot.
    saved_flows: Sender<Vec<SavedFlow>>,
    stopped_flows: Receiver<Vec<SavedFlow>>,
    qos_stats: Vec<[Arc<pipeline::features::qos::QosStats>; 2]>,
    worker_counters: Vec<Arc<WorkerCounters>>,
    bond_watch: Arc<BondWatch>,
    port_watch: Arc<PortWatch>,
    steering: Vec<FlowRule>,
    macs: Vec<[u8; 6]>,
    ports: Vec<Port>,
    pool: Arc<Mempool>,
    worker_lcores: Vec<LcoreId>,
    workers: u16,
}

/// The config file as start-up read it.
struct LoadedFile<'a> {
    path: &'a Path,
    config: &'a GatewayConfig,
    /// The digest of the text `config` was loaded from.
    text: FileText,
}

fn serve(
    loaded: LoadedFile<'_>,
    web_config: crate::config::web::WebConfig,
    eal: &Eal,
    stop: Arc<AtomicBool>,
    (events, control_events): (Sender<ControlEvent>, Receiver<ControlEvent>),
) -> anyhow::Result<()> {
    let mut gateway = Gateway::start(loaded, web_config, eal, stop, &events)?;
    let worker_died = gateway.run(&control_events);
    gateway.teardown(worker_died)
}

impl<'a> Gateway<'a> {
    /// Starts the ports, the workers (with the snapshot's flows restored), the control
    /// plane, the netlink, metrics and config-load threads. On an error the workers started
    /// so far stop before the ports and the pool go.
    fn start(
        LoadedFile {
            path: config_path,
            config,
            text: running_file,
        }: LoadedFile<'a>,
        web_config: crate::config::web::WebConfig,
        eal: &Eal,
        stop: Arc<AtomicBool>,
        events: &Sender<ControlEvent>,
    ) -> anyhow::Result<Gateway<'a>> {
        let worker_lcores: Vec<LcoreId> =
            config.workers.lcores.iter().map(|&l| LcoreId(l)).collect();
        let available = eal.worker_lcores();
        for lcore in &worker_lcores {
            if !available.contains(lcore) {
                bail!("workers.lcores: {lcore} is not available to the EAL (this machine has {available:?})");
            }
        }
        let workers = worker_lcores.len() as u16;
        // Ports are the interfaces with a device; VLAN subinterfaces ride on their parents'.
        let layout = PortLayout::new(config);
        let port_interfaces: Vec<usize> = layout.port_interfaces().collect();
        let port_ids = port_interfaces
            .iter()
            .map(|&index| {
                let iface = &config.interfaces[index];
                Port::find(eal, &iface.device)
                    .with_context(|| format!("interfaces[{index}].device {:?}", iface.device))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let socket = nic_socket(eal, config, &port_interfaces, &port_ids, &worker_lcores);
        let pool = Arc::new(
            Mempool::new(
                eal,
                "gateway_pool",
                config.mempool.mbufs,
                config.mempool.cache,
                config.mempool.data_room,
                socket,
            )
            .context("mempool: lower mempool.mbufs or give the EAL more memory (eal.memory_mb)")?,
        );
        let mut ports = Vec::new();
        for (port_index, (&index, &id)) in port_interfaces.iter().zip(&port_ids).enumerate() {
            let iface = &config.interfaces[index];
            let port_config = PortConfig {
                rx_queues: workers,
                tx_queues: workers,
                rx_descriptors: iface.rx_descriptors,
                tx_descriptors: iface.tx_descriptors,
                mtu: Some(iface.port_mtu()),
                rss_key: iface.rss_key.as_deref().and_then(parse_hex),
                promiscuous: iface.promiscuous,
                // IPv6 Neighbor Discovery comes to multicast groups (all nodes, all routers,
                // solicited-node): the port, or a VLAN on it, with IPv6 takes them.
                all_multicast: config.interfaces.iter().any(|other| {
                    other.ipv6.is_some()
                        && (other.name == iface.name
                            || other.parent.as_deref() == Some(iface.name.as_str()))
                }),
                vlan_offloads: layout.port_has_vlans(port_index)
                    && iface.vlan_offload.unwrap_or(true),
                ..PortConfig::default()
            };
            let dedicated_lacp = match &iface.bond {
                Some(bond) => prepare_bond(id, &iface.name, bond)?,
                None => false,
            };
            let started = match Port::start(eal, id, &iface.name, &port_config, &pool) {
                Err(err) if dedicated_lacp => {
                    // Enabling checks the rule in principle; some members (tap) still refuse it
                    // when the bond starts. Fall back to LACP in the data path.
                    tracing::info!(
                        bond = iface.name,
                        "members refused the dedicated LACP queue rule at start ({err}); LACP runs \
                         in the data path, kept alive by tx bursts every 10 ms even when idle"
                    );
                    dpdk::bond::disable_dedicated_lacp_queues(id)?;
                    Port::start(eal, id, &iface.name, &port_config, &pool)
                }
                other => other,
            };
            let port = started.with_context(|| {
                format!(
                    "interfaces[{index}] ({}, {})",
                    iface.name,
                    device_name(&iface.device)
                )
            })?;
            ports.push(port);
        }
        let port_macs = ports
            .iter()
            .map(|port| port.mac_address())
            .collect::<Result<Vec<_>, _>>()?;
        // A VLAN subinterface answers with its port's MAC, as Linux's do.
        let macs: Vec<[u8; 6]> = layout
            .links()
            .iter()
            .map(|link| port_macs[usize::from(link.port)])
            .collect();
        let steering = steer_nat_replies(config, &port_interfaces, &ports, workers);
        let mut bond_watch = BondWatch::default();
        for (iface, port) in port_interfaces
            .iter()
            .map(|&index| &config.interfaces[index])
            .zip(&ports)
        {
            if let Some(bond) = &iface.bond {
                let members = bond
                    .members
                    .iter()
                    .map(|member| Ok((device_name(member).to_string(), Port::find(eal, member)?)))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                bond_watch.add(&iface.name, port.id(), members);
            }
        }
        let bond_watch = Arc::new(bond_watch);
        for (iface, mac) in config.interfaces.iter().zip(&macs) {
            tracing::info!(interface = %iface.name, address = %iface.address, mac = %EthernetAddress(*mac), "interface up");
        }
        let rule_hits = RuleHitRegistry::new(usize::from(workers));
        let mut first_router = Arc::new(router_config(config, &macs)?);
        rule_hits.attach(&mut first_router, &config.zone_names());
        let router = Arc::new(Published::new(first_router));
        let neighbors = Arc::new(Published::new(Arc::new(NeighborView::default())));
        let twins = Twins::start(eal, config, &macs, &pool)?;
        let mut punt_rings = Vec::new();
        let mut kernel_rings = Vec::new();
        // The ports' counters and links, read by the control thread, the metrics and the ctl
        // thread through one watch; taken before the queues leave for the workers.
        let port_watch = Arc::new(PortWatch {
            ports: ports
                .iter()
                .map(|port| WatchedPort::new(port.name(), port.monitor(), usize::from(workers)))
                .collect(),
        });

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
        let mut restore =
            Restore::prepare(&config.state, &router.load().0, workers, &snapshot_status);
        let (saved_flows, stopped_flows) = crossbeam_channel::unbounded();
        // Declared after the ports, rings and pool: dropped first, on every path out of here.
        let mut running_workers = Workers::new(stop.clone());
        let mut ctl_queries = Vec::new();
        let mut trace_requests = Vec::new();
        let mut nat_logs = Vec::new();
        let mut firewall_logs = Vec::new();
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
                let (to_worker, from_kernel) =
                    crate::dataplane::punt::kernel_ring(eal, index, socket)?;
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
                setup.firewall_log = Some(FirewallLogger::new(
                    log,
                    log_config.per_sec,
                    log_config.burst,
                ));
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
                    let (requests, link) =
                        crate::dataplane::trace_link::TraceLink::pair(index as u16);
                    trace_requests.push(requests);
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

        let control_counters = Arc::new(WorkerCounters::default());
        let reload_status = Arc::new(ReloadStatus::new());
        let config_history = ConfigHistory::start(config_path, &running_file);
        let kept_configs = ConfigStore::new(&config.state.directory);
        let (config_request_sender, config_requests) = crossbeam_channel::unbounded();
        let neighbor_config = NeighborConfig {
            capacity: config.neighbors.capacity,
            pending_per_neighbor: config.neighbors.pending_per_neighbor,
            reachable_ns: config.neighbors.reachable_secs * 1_000_000_000,
            pending_total: config.neighbors.pending_total,
            locktime_ns: config.neighbors.locktime_ms * 1_000_000,
            ..NeighborConfig::default()
        };
        let router_published = router.clone();
        let neighbors_published = neighbors.clone();
        let control = ControlPlane::new(
            control_to_worker,
            from_workers,
            pool.clone(),
            router,
            neighbors,
            control_counters.clone(),
            neighbor_config,
        )
        .with_twins(twins.with_rings(punt_rings, kernel_rings));
        let pppoe = PppoeLinks::new(config, &macs, layout.sessions().clone(), pppoe_seed());
        let pppoe_status = (!pppoe.is_empty()).then(|| pppoe.status());
        let mut control = control.with_pppoe(pppoe);
        control.announce();
        // The twins' addresses ("dhcp") and routes, followed on a thread of its own.
        // What the kernel says, for the config-load thread, which compiles reloads with it.
        let kernel_for_loads = Arc::new(Mutex::new(KernelView::default()));
        // The config in force: the last reload applied (kernel updates are compiled onto it).
        let running = config.clone();
        let followed = Followed::from_config(config);
        let netlink_thread = if followed.any() {
            let events = events.clone();
            let send = move |view| events.send(ControlEvent::Kernel(view)).is_ok();
            let netns = config.kernel_twins.netns.clone();
            Some(crate::control::netlink::spawn(
                followed,
                netns,
                stop.clone(),
                send,
            )?)
        } else {
            None
        };
        let meter_export = Arc::new(Published::new(Arc::new(MeterExport::from(
            &config.traffic_meter,
        ))));
        let nat_logger = crate::telemetry::nat_log::spawn(&config.nat.log, nat_logs)?;
        let interface_names = config.interfaces.iter().map(|i| i.name.clone()).collect();
        let firewall_logger = crate::telemetry::firewall_log::spawn(
            &config.firewall.log,
            firewall_logs,
            interface_names,
        )?;
        let metrics = Metrics::new(Sources {
            interfaces: config.interfaces.iter().map(|i| i.name.clone()).collect(),
            ports: port_watch.clone(),
            pool: Some(pool.clone()),
            bonds: bond_watch.clone(),
            qos: qos_stats.clone(),
            meter: MeterSource {
                workers: meters,
                export: meter_export.clone(),
            },
            workers: worker_counters.clone(),
            heartbeats,
            control: control_counters.clone(),
            reload: reload_status.clone(),
            snapshot: snapshot_status.clone(),
            nat_log: nat_logger.as_ref().map(|logger| logger.stats.clone()),
            firewall_log: firewall_logger.as_ref().map(|logger| logger.stats.clone()),
            pppoe: pppoe_status,
            router: Some(router_published.clone()),
        });
        let metrics_stop = Arc::new(AtomicBool::new(false));
        let metrics_thread = match metrics::serve(
            config.metrics.listen,
            metrics,
            web_config,
            metrics_stop.clone(),
        ) {
            Ok(thread) => Some(thread),
            Err(err) => {
                stop.store(true, Ordering::Relaxed);
                tracing::error!("{err:#}");
                None
            }
        };
        let metrics_failed = metrics_thread.is_none();
        let ctl_server = crate::ctl::server::serve(
            &config.ctl,
            crate::ctl::server::Sources {
                queries: ctl_queries,
                traces: trace_requests,
                workers: worker_counters.clone(),
                control: control_counters.clone(),
                interface_names: config.interfaces.iter().map(|i| i.name.clone()).collect(),
                interface_links: layout.links().to_vec(),
                ports: port_watch.clone(),
                router: router_published.clone(),
                neighbors: neighbors_published,
                config: config_history.clone(),
                kept_configs: kept_configs.clone(),
                config_requests: config_request_sender,
                pdump_file_prefix: config.eal.pdump.then(|| config.eal.file_prefix.clone()),
            },
        )
        .map_err(|err| tracing::warn!("no ctl socket: {err:#}"))
        .ok()
        .flatten();
        if !metrics_failed {
            tracing::info!(
                workers,
                "gateway running; SIGINT or SIGTERM stops it, SIGHUP reloads"
            );
        }
        let loader = {
            let loads = events.clone();
            reload::Loader::start(
                reload::LoaderSetup {
                    path: config_path.to_path_buf(),
                    running: config.clone(),
                    running_file,
                    macs: macs.clone(),
                    kernel: kernel_for_loads.clone(),
                    store: kept_configs,
                },
                move |loaded| {
                    let _ = loads.send(ControlEvent::Loaded(Box::new(loaded)));
                },
            )
            .context("starting the config-load thread")?
        };
        Ok(Gateway {
            config_path,
            config,
            stop,
            loader,
            metrics_thread,
            metrics_stop,
            ctl_server,
            nat_logger,
            firewall_logger,
            metrics_failed,
            meter_export,
            netlink_thread,
            running,
            kernel_for_loads,
            netlink_view: KernelView::default(),
            pppoe_view: PppoeView::default(),
            control,
            router_published,
            reload_status,
            config_history,
            rule_hits,
            config_requests,
            awaiting_confirmation: None,
            control_counters,
            running_workers,
            saved_flows,
            stopped_flows,
            qos_stats,
            worker_counters,
            bond_watch,
            port_watch,
            steering,
            macs,
            ports,
            pool,
            worker_lcores,
            workers,
        })
    }

    /// Serves until told to stop (a signal, a failed metrics endpoint) or until a worker
    /// dies: the control plane, reloads, kernel updates, QoS rebalancing and bond sampling.
    /// Returns whether a worker died.
    fn run(&mut self, control_events: &Receiver<ControlEvent>) -> bool {
        let Gateway {
            config_path,
            stop,
            loader,
            meter_export,
            running,
            kernel_for_loads,
            netlink_view,
            pppoe_view,
            control,
            router_published,
            reload_status,
            config_history,
            rule_hits,
            config_requests,
            awaiting_confirmation,
            qos_stats,
            bond_watch,
            port_watch,
            macs,
            worker_lcores,
            ..
        } = self;
        let mut next_link_sample = std::time::Instant::now();
        let mut next_stats_poll = std::time::Instant::now() + port_watch::STATS_INTERVAL;
        let qos_rates = |router: &Published<pipeline::RouterConfig>| {
            (router.load().0.qos.as_ref()).map(|q| [q.uplink_bps, q.downlink_bps])
        };
        let mut policed_rates = qos_rates(router_published);
        let mut next_qos_rebalance = std::time::Instant::now();
        let mut worker_died = false;
        while !stop.load(Ordering::Relaxed) {
            if let Some(rates) =
                policed_rates.filter(|_| std::time::Instant::now() >= next_qos_rebalance)
            {
                rebalance_qos(qos_stats, rates);
                next_qos_rebalance += Duration::from_millis(5);
            }
            let now = std::time::Instant::now();
            if now >= next_link_sample {
                port_watch.sample_links();
                bond_watch.sample();
                next_link_sample = now + port_watch::LINK_INTERVAL;
            }
            if now >= next_stats_poll {
                port_watch.poll_stats();
                next_stats_poll = now + port_watch::STATS_INTERVAL;
            }
            // Idle: wait for an event as long as the old sleep lasted, so ARP stays prompt.
            let event = match control.poll() {
                0 => control_events.recv_timeout(Duration::from_micros(200)).ok(),
                _ => control_events.try_recv().ok(),
            };
            if let Some(view) = control.take_pppoe_view() {
                *pppoe_view = view;
                let merged = merged_view(netlink_view, pppoe_view);
                apply_kernel(
                    running,
                    macs,
                    &merged,
                    router_published,
                    (qos_stats, rule_hits),
                );
                *kernel_for_loads
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = merged;
                policed_rates = qos_rates(router_published);
            }
            while let Ok(request) = config_requests.try_recv() {
                crate::ctl::config_apply::route(
                    request,
                    loader,
                    awaiting_confirmation,
                    config_history,
                );
            }
            crate::ctl::config_apply::expire(awaiting_confirmation, loader, config_history, now);
            match event {
                None => {}
                Some(ControlEvent::ReloadSignal | ControlEvent::FileChanged) => {
                    if matches!(event, Some(ControlEvent::FileChanged)) {
                        tracing::info!("{} changed and is quiet: reloading", config_path.display());
                    }
                    loader.request(reload::LoadRequest::File { reply: None });
                }
                Some(ControlEvent::Loaded(loaded)) => {
                    if let Some(applied) = apply_reload(
                        *loaded,
                        &ReloadTargets {
                            router: router_published,
                            qos: qos_stats,
                            meter: meter_export,
                            status: reload_status,
                            history: config_history,
                            rule_hits,
                        },
                        awaiting_confirmation,
                    ) {
                        *running = applied;
                        control.reconfigure_pppoe(running, macs);
                    }
                    policed_rates = qos_rates(router_published);
                }
                Some(ControlEvent::Kernel(view)) => {
                    *netlink_view = view;
                    let merged = merged_view(netlink_view, pppoe_view);
                    apply_kernel(
                        running,
                        macs,
                        &merged,
                        router_published,
                        (qos_stats, rule_hits),
                    );
                    *kernel_for_loads
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = merged;
                    policed_rates = qos_rates(router_published);
                }
                Some(ControlEvent::WorkerExited(WorkerExit { worker, panic })) => {
                    if panic.is_none() && stop.load(Ordering::Relaxed) {
                        continue;
                    }
                    let why = panic.map_or("returned unasked".to_string(), |message| {
                        format!("panicked: {message}")
                    });
                    tracing::error!(
                        worker,
                        lcore = worker_lcores[worker].0,
                        "worker {worker} {why}; its queues are unserved, so the gateway stops \
                         (exit status 1) for the service manager to restart it"
                    );
                    worker_died = true;
                    stop.store(true, Ordering::Relaxed);
                }
            }
        }
        worker_died
    }

    /// Takes the gateway down in order: the netlink thread and the workers stop (each sends
    /// its flows back), the config-load thread ends, the snapshot is written, the control
    /// plane's last packets go out, the metrics thread ends, the counters are reported, then
    /// the control plane, the NIC flow rules, the ports and last the pool are dropped.
    fn teardown(self, worker_died: bool) -> anyhow::Result<()> {
        let Gateway {
            config_path: _,
            config,
            stop: _stop,
            loader,
            metrics_thread,
            metrics_stop,
            ctl_server,
            nat_logger,
            firewall_logger,
            metrics_failed,
            meter_export: _meter_export,
            netlink_thread,
            running: _running,
            kernel_for_loads: _kernel_for_loads,
            netlink_view: _netlink_view,
            pppoe_view: _pppoe_view,
            mut control,
            router_published: _router_published,
            reload_status: _reload_status,
            control_counters,
            mut running_workers,
            saved_flows,
            stopped_flows,
            qos_stats: _qos_stats,
            worker_counters,
            config_history: _,
            rule_hits: _,
            config_requests: _,
            awaiting_confirmation: _,
            bond_watch: _bond_watch,
            port_watch,
            steering,
            macs: _macs,
            ports,
            pool,
            worker_lcores: _worker_lcores,
            workers,
        } = self;
        // While worker 0 still sends what the control thread queues: the access
        // concentrator hears the session end instead of timing it out.
        control.stop_pppoe();
        tracing::info!("stopping workers");
        // Before the workers: a query under way would wait for them in vain.
        if let Some(server) = ctl_server {
            server.stop();
        }
        if let Some(thread) = netlink_thread {
            let _ = thread.join();
        }
        let mut failures = running_workers.stop_and_join();
        drop(nat_logger);
        drop(firewall_logger);
        drop(loader);
        if worker_died && failures.is_empty() {
            failures.push("a worker stopped without being told to".into());
        }
        drop(saved_flows);
        // `[state]` needs a restart (reload keeps it): the start-up config's is the one in force.
        if config.state.snapshot && failures.is_empty() && !worker_died && !metrics_failed {
            crate::dataplane::flow_snapshot::save_stopped(&config.state, workers, stopped_flows);
        }
        control.poll();
        metrics_stop.store(true, Ordering::Relaxed);
        if let Some(thread) = metrics_thread {
            let _ = thread.join();
        }
        report(&port_watch, &worker_counters, &control_counters);
        drop(control);
        drop(steering);
        drop(ports);
        if pool.in_use() != 0 {
            tracing::warn!(
                in_use = pool.in_use(),
                "mbufs still out of the pool at shutdown"
            );
        }
        drop(pool);
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        if metrics_failed {
            bail!(
                "the metrics endpoint could not start (metrics.listen {})",
                config.metrics.listen
            );
        }
        Ok(())
    }
}
/// The NUMA node for the pool and rings: the NICs'. Logs when the NICs sit on different
/// nodes (one pool serves them all, on the first's) and when a worker lcore runs on another
/// node than a NIC it polls, which costs a cross-node access per packet.
fn nic_socket(
    eal: &Eal,
    config: &GatewayConfig,
    port_interfaces: &[usize],
    port_ids: &[PortId],
    worker_lcores: &[LcoreId],
) -> SocketId {
    let sockets: Vec<SocketId> = port_ids.iter().map(|&id| Port::socket(eal, id)).collect();
    let socket = sockets
        .iter()
        .copied()
        .find(|socket| socket.node().is_some())
        .unwrap_or(SocketId::ANY);
    let ports = port_interfaces
        .iter()
        .map(|&index| &config.interfaces[index]);
    for (iface, &port_socket) in ports.zip(&sockets) {
        let Some(port_node) = port_socket.node() else {
            continue;
        };
        if port_socket != socket {
            tracing::warn!(
                interface = %iface.name,
                "{} is on NUMA node {port_node}, the packet pool on {socket}: its packets cross \
                 nodes",
                iface.name
            );
        }
        for &lcore in worker_lcores {
            let lcore_socket = eal.lcore_socket(lcore);
            if lcore_socket.node().is_some_and(|node| node != port_node) {
                tracing::warn!(
                    interface = %iface.name,
                    lcore = lcore.0,
                    "worker {lcore} runs on {lcore_socket} but polls {} on NUMA node \
                     {port_node}: pin workers to CPUs of the NIC's node (eal.cpus)",
                    iface.name
                );
            }
        }
    }
    tracing::info!(%socket, "packet pool and rings on the NICs' NUMA node");
    socket
}

/// On devices with rte_flow (the X550's flow director), NAT replies go straight to the queue
/// of the worker owning their port class. A refused rule is logged once per port; the
/// handoff rings then carry those replies, as they always do for ICMP and fragments.
/// Only ports' own interfaces are steered: a masqueraded VLAN's rules would need a VLAN
/// pattern item, and its replies reach their owners by the handoff rings.
fn steer_nat_replies(
    config: &GatewayConfig,
    port_interfaces: &[usize],
    ports: &[Port],
    workers: u16,
) -> Vec<FlowRule> {
    let mut rules = Vec::new();
    if workers < 2 {
        return rules;
    }
    let ownership = Ownership::new(workers);
    let port_ifaces = port_interfaces
        .iter()
        .map(|&index| &config.interfaces[index]);
    for (iface, port) in port_ifaces.zip(ports) {
        if !config.nat.masquerade.contains(&iface.name) {
            continue;
        }
        // The rules match the address; one from DHCP may change, so the handoff rings
        // bring those replies to their owners.
        let Some(address) = iface.address.cidr() else {
            continue;
        };
        let before = rules.len();
        let attempt = (0..=ownership.mask()).try_for_each(|class| {
            for protocol in [6, 17] {
                let queue = RxQueueId(ownership.port_owner(class));
                let rule = dpdk::flow::steer_port_class(
                    port,
                    address.addr,
                    protocol,
                    class,
                    ownership.mask(),
                    queue,
                )?;
                rules.push(rule);
            }
            Ok::<(), dpdk::DpdkError>(())
        });
        match attempt {
            Ok(()) => tracing::info!(
                port = iface.name,
                rules = rules.len() - before,
                "NAT replies steered to their owners' queues by rte_flow"
            ),
            Err(err) => tracing::info!(
                port = iface.name,
                "rte_flow steering refused ({err}); handoff rings bring NAT replies to their owners"
            ),
        }
    }
    rules
}

/// Shares each link's rate among the workers by their measured demand (max-min fair), so the
/// aggregate holds the configured rate however flows fall across workers.
fn rebalance_qos(stats: &[[Arc<pipeline::features::qos::QosStats>; 2]], rates: [u64; 2]) {
    for (link, &rate) in rates.iter().enumerate() {
        let demands: Vec<u64> = stats
            .iter()
            .map(|worker| worker[link].demand_bps())
            .collect();
        for (worker, share) in stats
            .iter()
            .zip(pipeline::features::qos::rebalance(rate, &demands))
        {
            worker[link].assign_share(share);
        }
    }
}

/// LACP settings that must be made while the bond is stopped. Returns whether LACP got
/// dedicated queues.
fn prepare_bond(id: PortId, name: &str, bond: &BondConfig) -> anyhow::Result<bool> {
    dpdk::bond::set_lacp_rate(id, bond.lacp_rate == LacpRate::Fast)
        .with_context(|| format!("bond {name}: LACP rate"))?;
    match dpdk::bond::enable_dedicated_lacp_queues(id) {
        Ok(()) => {
            tracing::info!(bond = name, "LACP on dedicated queues");
            Ok(true)
        }
        Err(err) => {
            tracing::info!(
                bond = name,
                "dedicated LACP queues unavailable on these members ({err}); LACP runs in the \
                 data path, kept alive by tx bursts every 10 ms even when idle"
            );
            Ok(false)
        }
    }
}

/// Hands the workers a new router config. A QoS change first gives every worker an equal
/// share of the new rates, since workers rebuild their policers from the share assigned to
/// them; demand moves the shares from there.
/// Each firewall rule gets its hit counter first (`crate::compile::rule_hits`).
pub fn publish_router(
    router: &Published<pipeline::RouterConfig>,
    qos: &[[Arc<pipeline::features::qos::QosStats>; 2]],
    (hits, zones): (&RuleHitRegistry, &[String]),
    mut config: Arc<pipeline::RouterConfig>,
) {
    hits.attach(&mut config, zones);
    if config.qos != router.load().0.qos {
        pipeline::features::qos::assign_equal_shares(qos, config.qos.as_ref());
    }
    router.publish(config);
}

/// What a reload publishes to.
struct ReloadTargets<'a> {
    router: &'a Published<pipeline::RouterConfig>,
    qos: &'a [[Arc<pipeline::features::qos::QosStats>; 2]],
    meter: &'a Published<MeterExport>,
    status: &'a ReloadStatus,
    history: &'a ConfigHistory,
    rule_hits: &'a RuleHitRegistry,
}

/// Publishes a reload the `config-load` thread made ready, or reports its refusal, and
/// answers whoever asked (`gateway ctl config`). A file that does not load, validate or
/// compile changes nothing; the failure is logged with its field and counted. Returns the
/// config now in force when it applied.
fn apply_reload(
    result: reload::LoadResult,
    targets: &ReloadTargets,
    awaiting: &mut Option<AwaitingConfirmation>,
) -> Option<GatewayConfig> {
    let ReloadTargets {
        router,
        qos,
        meter,
        status,
        history,
        rule_hits,
    } = targets;
    let reload::LoadResult {
        loaded,
        source: asked_by,
        confirm,
        replies,
        previous,
    } = result;
    let source = asked_by.to_string();
    match loaded {
        reload::Loaded::Ready {
            config,
            router: router_config,
            restart,
            file,
            changed,
        } => {
            if !restart.is_empty() {
                tracing::warn!(
                    "reload: {} changed and need a restart; applying the rest",
                    restart.join(", ")
                );
            }
            for warning in config.warnings() {
                tracing::warn!("reload: {warning}");
            }
            meter.publish(Arc::new(MeterExport::from(&config.traffic_meter)));
            warn_refused_kernel_routes(&config, &router.load().0, &router_config);
            publish_router(
                router,
                qos,
                (rule_hits, &config.zone_names()),
                router_config,
            );
            status.record(true);
            if !changed.is_empty() {
                tracing::info!("reload: changed {}", changed.join(", "));
            }
            let answer = serde_json::json!({
                "source": source,
                "sha256": file.sha256,
                "changed": changed,
                "restart_required": restart,
                "confirm_within_secs": confirm.map(|within| within.as_secs()),
            });
            let version = history.applied(&source, &file.sha256, changed, restart);
            crate::ctl::config_apply::applied(
                awaiting,
                history,
                (version, &asked_by),
                confirm,
                previous,
            );
            tracing::info!(
                version,
                %source,
                "reload applied: new flows follow the new config, established flows continue"
            );
            let mut answer = answer;
            answer["version"] = version.into();
            for reply in replies {
                let _ = reply.send(Ok(answer.clone()));
            }
            Some(*config)
        }
        reload::Loaded::Refused(err) => {
            tracing::error!(%source, "reload refused, keeping the running config: {err}");
            if matches!(asked_by, reload::Source::NotConfirmed(_)) {
                tracing::error!(
                    "the rollback of an unconfirmed apply was refused: the unconfirmed \
                     config stays in force; `gateway ctl config rollback` or a restart"
                );
            }
            status.record(false);
            history.refused(&source, &err);
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
            None
        }
    }
}

/// The router's dynamic half: the twins' addresses and routes from netlink, and the PPPoE
/// sessions' (an interface has one or the other; the sessions' routes go first).
fn merged_view(netlink: &KernelView, pppoe: &PppoeView) -> KernelView {
    let interfaces = netlink.addresses.len().max(pppoe.addresses.len());
    KernelView {
        addresses: (0..interfaces)
            .map(|i| {
                netlink
                    .address(i)
                    .or(pppoe.addresses.get(i).copied().flatten())
            })
            .collect(),
        routes: pppoe
            .routes
            .iter()
            .chain(&netlink.routes)
            .copied()
            .collect(),
        mtus: pppoe.mtus.clone(),
        addresses6: netlink.addresses6.clone(),
        leases6: netlink.leases6.clone(),
        routes6: netlink.routes6.clone(),
    }
}

/// A seed for the PPPoE clients' magic numbers and Host-Uniq: different on every start, so
/// that a restarted gateway's LCP is not taken for a looped-back one.
fn pppoe_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// The kernel's addresses or routes on the twins changed: the running config is built again
/// with them and published, as a reload does (new flows use the new address and routes;
/// flows masqueraded to an address that went end on their next packet, `nat_address_gone`).
fn apply_kernel(
    running: &GatewayConfig,
    macs: &[[u8; 6]],
    kernel: &KernelView,
    router: &Published<pipeline::RouterConfig>,
    (qos, rule_hits): (
        &[[Arc<pipeline::features::qos::QosStats>; 2]],
        &RuleHitRegistry,
    ),
) {
    match router_config_with_kernel(running, macs, kernel) {
        Ok(config) => {
            for (iface, (index, new)) in running
                .interfaces
                .iter()
                .zip(config.interfaces.iter().enumerate())
            {
                if !matches!(iface.address, InterfaceAddress::Static(_)) {
                    let old = router
                        .load()
                        .0
                        .interfaces
                        .get(index)
                        .map(|i| (i.addr, i.prefix_len));
                    if old != Some((new.addr, new.prefix_len)) {
                        let address = format!("{}/{}", new.addr, new.prefix_len);
                        if iface.address.is_pppoe() {
                            tracing::info!(
                                interface = %iface.name,
                                %address,
                                "address from the PPPoE session applied"
                            );
                        } else {
                            tracing::info!(
                                interface = %iface.name,
                                %address,
                                "address from the kernel twin (dhcp) applied"
                            );
                        }
                    }
                }
            }
            warn_refused_kernel_routes(running, &router.load().0, &config);
            tracing::info!(
                kernel_routes = kernel.routes.len(),
                refused = config.refused_kernel_routes.len(),
                kernel_routes6 = kernel.routes6.len(),
                kernel_addresses6 = ?kernel.addresses6,
                "kernel addresses and routes applied to the router config"
            );
            publish_router(
                router,
                qos,
                (rule_hits, &running.zone_names()),
                Arc::new(config),
            );
        }
        Err(err) => tracing::error!("the kernel's addresses and routes were not applied: {err:#}"),
    }
}

/// Warns of each kernel route `new` refuses that `old` did not (so once per change, not on
/// every rebuild): the route, the interface whose twin has it, why, and the interface whose
/// subnet it would have cut into. `gateway_kernel_routes_refused` counts them.
fn warn_refused_kernel_routes(
    config: &GatewayConfig,
    old: &pipeline::RouterConfig,
    new: &pipeline::RouterConfig,
) {
    let name = |port: u16| {
        config
            .interfaces
            .get(usize::from(port))
            .map_or("?", |iface| iface.name.as_str())
    };
    for refused in &new.refused_kernel_routes {
        if old.refused_kernel_routes.contains(refused) {
            continue;
        }
        let route = format!("{}/{}", refused.destination, refused.len);
        let via = refused
            .via
            .map_or("on-link".to_string(), |via| via.to_string());
        match refused.reason {
            pipeline::RouteRefusal::OverlapsConnected { interface } => tracing::warn!(
                %route,
                %via,
                interface = name(refused.port),
                connected = name(interface),
                "a kernel route inside an interface's own subnet was refused: it would take \
                 part of that link's traffic from its connected route"
            ),
            pipeline::RouteRefusal::NotAllowed => tracing::warn!(
                %route,
                %via,
                interface = name(refused.port),
                "a kernel route outside kernel_twins.route_allow was refused"
            ),
        }
    }
}

fn report(ports: &PortWatch, workers: &[Arc<WorkerCounters>], control: &WorkerCounters) {
    for port in &ports.ports {
        let stats = port.poll(|totals| totals.stats);
        tracing::info!(
            port = %port.name,
            rx = stats.rx_packets,
            tx = stats.tx_packets,
            rx_missed = stats.rx_missed,
            "port totals"
        );
    }
    for (index, counters) in workers.iter().enumerate() {
        tracing::info!(
            worker = index,
            rx = counters.rx_packets.get(),
            tx = counters.transmitted.get(),
            to_control = counters.to_control.get(),
            dropped = counters.dropped_total(),
            "worker totals"
        );
    }
    tracing::info!(
        tx = control.transmitted.get(),
        dropped = control.dropped_total(),
        "control totals"
    );
}

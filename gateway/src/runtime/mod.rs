//! Bringing the gateway up from its config, running it, and taking it down in order:
//! workers stop, rings drain, ports stop, pools go, the EAL cleans up. `start` brings it up,
//! `event_loop` serves, `teardown` takes it down; `apply` publishes what a reload or the kernel
//! changed; `ports` and `eal_args` are start-up's helpers.

mod apply;
pub mod eal_args;
mod event_loop;
mod ports;
mod start;
mod teardown;
mod workers;

use apply::*;
use eal_args::*;
use event_loop::*;
use ports::*;
use workers::*;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Context};
use crossbeam_channel::{Receiver, Sender};
use pipeline::features::meter::HostMeter;
use pipeline::l3::neigh::NeighborConfig;
use pipeline::pipeline::config::PortMappings;
use pipeline::pipeline::operator::snapshot::SavedFlow;
use pipeline::state::firewall_log::{FirewallLog, FirewallLogger};
use pipeline::state::nat::Ownership;
use pipeline::wire::EthernetAddress;
use pipeline::{NeighborView, Pipeline, WorkerCounters};

use crate::compile::publish::publish_router;
use crate::compile::router::{router_config, router_config_with_kernel, worker_setup};
use crate::compile::rule_hits::RuleHitRegistry;
use crate::config::history::{ConfigHistory, FileText};
use crate::config::store::ConfigStore;
use crate::config::{
    device_name, is_pci_address, parse_hex, BondConfig, GatewayConfig, HugepageMode,
    InterfaceAddress, LacpRate,
};
use crate::control::netlink::{Followed, KernelView};
use crate::control::plane::ControlPlane;
use crate::control::pppoe_clients::{PppoeLinks, PppoeView};
use crate::control::twins::Twins;
use crate::control::virtual_addresses::VirtualHeld;
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
    Kernel(Box<KernelView>),
    /// An uplink's health checks took it down or brought it back
    /// (`crate::control::uplink_health`; the state is in `Gateway::uplink_health`).
    UplinkHealth,
    /// The port mappings hosts hold changed (`crate::control::port_mapping`): all of them.
    PortMappings(PortMappings),
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
    /// The PCP and NAT-PMP server (`[port_mapping]`), and what it shows metrics and ctl.
    port_mapping_thread: Option<std::thread::JoinHandle<()>>,
    /// What the uplinks' health checks found, and their threads.
    uplink_health: Arc<crate::control::uplink_health::UplinkHealth>,
    uplink_links: crate::control::uplink_health::UplinkLinks,
    uplink_threads: Vec<std::thread::JoinHandle<()>>,
    /// Session sync with the peer (`[ha.sync]`): its thread stops when dropped.
    session_sync: Option<crate::control::session_sync::SessionSyncThread>,
    /// The config in force: the last reload applied (kernel updates are compiled onto it).
    running: GatewayConfig,
    /// What the kernel and the PPPoE sessions say, merged, for the config-load thread, which
    /// compiles reloads with it.
    kernel_for_loads: Arc<Mutex<KernelView>>,
    /// The two halves of it: netlink sends whole views, which would overwrite the sessions'.
    netlink_view: KernelView,
    pppoe_view: PppoeView,
    /// The PPPoE interfaces' twins, up while their sessions carry IPv6.
    session_twins: crate::control::twins::session_link::SessionTwins,
    /// The mappings the port mapping server last sent (none while it is off).
    port_mappings: PortMappings,
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

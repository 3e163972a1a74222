//! Prometheus metrics over HTTP. A scrape reads the workers' counters (atomics each worker
//! alone writes) and the ports' DPDK stats; it never writes anything a worker reads, so it
//! cannot stall the dataplane. The HTTP server is one ordinary thread, not an lcore, running
//! hyper on a current-thread tokio runtime: connections are tasks, not threads, so no number
//! of them adds a thread, and the limits below bound what each may hold. TLS and basic auth
//! are optional (`metrics.web_config`, `crate::config::web`).

mod collect;
mod families;
mod http;
mod port_mapping;
mod pppoe;
mod registry;
mod session_sync;
mod uplinks;

use collect::*;
pub use families::*;
pub use http::*;
use registry::*;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use pipeline::{DropReason, InvalidReason, WorkerCounters};
use prometheus::{Encoder, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
use tokio::sync::oneshot;

use pipeline::features::meter::{self, HostMeter, HostUsage};
use pipeline::features::qos::QosStats;

use crate::config::web::{AuthVerdict, BasicAuth, WebConfig};
use crate::dataplane::published::Published;
use crate::dpdk::{Mempool, PortStats, BURST_SIZE, QUEUE_STAT_COUNTERS};
use crate::reload::status::ReloadStatus;
use crate::telemetry::bond_watch::BondWatch;
use crate::telemetry::port_watch::PortWatch;

/// What of the traffic meter is shown. A reload publishes a new one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeterExport {
    pub enabled: bool,
    pub top_hosts: usize,
    pub named_hosts: Vec<std::net::Ipv4Addr>,
}

impl From<&crate::config::TrafficMeterConfig> for MeterExport {
    fn from(config: &crate::config::TrafficMeterConfig) -> Self {
        MeterExport {
            enabled: config.enabled,
            top_hosts: config.top_hosts,
            named_hosts: config.named_hosts.clone(),
        }
    }
}

/// The traffic meter's per-worker tables and what of them Prometheus gets.
pub struct MeterSource {
    pub workers: Vec<Arc<HostMeter>>,
    pub export: Arc<Published<MeterExport>>,
}

impl MeterSource {
    fn hosts(&self) -> Vec<HostUsage> {
        meter::merge(
            self.workers
                .iter()
                .map(|m| m.snapshot().collect::<Vec<_>>()),
        )
    }

    /// IPv6 traffic no host could be found for, summed over the workers.
    fn unattributed(&self) -> HostUsage {
        meter::merge(self.workers.iter().map(|m| [m.unattributed()]))
            .pop()
            .unwrap_or_default()
    }

    /// Every host, as JSON, for the /hosts endpoint.
    pub fn json(&self) -> String {
        let rows: Vec<String> = self
            .hosts()
            .iter()
            .map(|h| {
                format!(
                    "{{\"host\":\"{}\",\"up_bytes\":{},\"up_packets\":{},\"down_bytes\":{},\"down_packets\":{}}}",
                    h.ip, h.up_bytes, h.up_packets, h.down_bytes, h.down_packets
                )
            })
            .collect();
        format!(
            "{{\"enabled\":{},\"hosts\":[{}]}}\n",
            self.export.load().0.enabled,
            rows.join(",")
        )
    }
}

/// What the metrics read.
pub struct Sources {
    pub meter: MeterSource,
    /// Per worker: the uplink and downlink policers' statistics.
    pub qos: Vec<[Arc<QosStats>; 2]>,
    pub ports: Arc<PortWatch>,
    /// The packet pool, whose buffers in use are exported (none in tests without an EAL).
    pub pool: Option<Arc<Mempool>>,
    pub bonds: Arc<BondWatch>,
    /// The interfaces' names, in interface order (ports and VLAN subinterfaces).
    pub interfaces: Vec<String>,
    pub workers: Vec<Arc<WorkerCounters>>,
    /// Per worker: the TSC of its latest loop, turned into an age at each scrape.
    pub heartbeats: Vec<Arc<crate::dataplane::liveness::Heartbeat>>,
    pub control: Arc<WorkerCounters>,
    pub reload: Arc<ReloadStatus>,
    /// What the start-up restore of the state snapshot did.
    pub snapshot: Arc<crate::dataplane::flow_snapshot::SnapshotStatus>,
    /// The NAT log's sends, when `[nat.log]` names a destination.
    pub nat_log: Option<Arc<crate::telemetry::nat_log::NatLogStats>>,
    pub firewall_log: Option<Arc<crate::telemetry::firewall_log::FirewallLogStats>>,
    /// The PPPoE sessions, when an interface runs one.
    pub pppoe: Option<Arc<crate::control::pppoe_clients::PppoeStatus>>,
    /// The router config in force, whose refused kernel routes and rule hits are exported.
    pub router: Option<Arc<Published<pipeline::RouterConfig>>>,
    /// What the uplinks' health checks found, when there are uplinks.
    pub uplinks: Option<Arc<crate::control::uplink_health::UplinkHealth>>,
    /// Session sync's counters and each worker's queues, with `[ha.sync]`.
    pub session_sync: Option<(
        Arc<crate::control::session_sync::SessionSyncStats>,
        Vec<Arc<crate::dataplane::sync_link::SyncQueues>>,
    )>,
    /// Which of the interfaces' virtual addresses this box holds, where any has one.
    pub virtual_held: Option<Arc<crate::control::virtual_addresses::VirtualHeld>>,
    /// The port mapping server's mappings and requests (none while `[port_mapping]` is off).
    pub port_mapping: Option<Arc<crate::control::port_mapping::PortMappingStatus>>,
    /// How many rules have hit series of their own (`metrics.rule_series`).
    pub rule_series: usize,
}

/// A counter family whose value per label set is read from a source of type `T`.
struct Family<T> {
    vec: IntCounterVec,
    read: fn(&T) -> u64,
}

/// A gauge family read the same way.
struct GaugeFamily<T> {
    vec: IntGaugeVec,
    read: fn(&T) -> u64,
}

pub struct Metrics {
    registry: Registry,
    sources: Sources,
    port_counters: Vec<Family<PortStats>>,
    queue_packets: IntCounterVec,
    interface_packets: IntCounterVec,
    interface_bytes: IntCounterVec,
    queue_drops: IntCounterVec,
    xstats: IntCounterVec,
    port_link_up: IntGaugeVec,
    port_speed: IntGaugeVec,
    link_flaps: IntCounterVec,
    mempool_in_use: IntGaugeVec,
    worker_counters: Vec<Family<WorkerCounters>>,
    worker_gauges: Vec<GaugeFamily<WorkerCounters>>,
    heartbeat_age: prometheus::GaugeVec,
    drops: IntCounterVec,
    ipv6_drops: IntCounterVec,
    conntrack_invalid: IntCounterVec,
    reload_success: IntGauge,
    reload_timestamp: IntGauge,
    reloads: IntCounterVec,
    snapshot_restored: IntGauge,
    snapshot_skipped: IntGaugeVec,
    snapshot_refused: IntGauge,
    kernel_routes_refused: IntGaugeVec,
    firewall_rule_hits: IntCounterVec,
    firewall_default_hits: IntCounterVec,
    firewall_rule_last_match: IntGaugeVec,
    firewall_default_last_match: IntGaugeVec,
    port_forward_hits: IntCounterVec,
    port_forward_last_match: IntGaugeVec,
    nat_log_events: IntCounterVec,
    firewall_log_events: IntCounterVec,
    qos_bytes: IntCounterVec,
    qos_packets: IntCounterVec,
    qos_share: IntGaugeVec,
    qos_ecn_marks: IntCounterVec,
    qos_backlog: IntGaugeVec,
    meter_bytes: IntCounterVec,
    meter_packets: IntCounterVec,
    meter_hosts: IntGauge,
    meter_host_bytes: IntCounterVec,
    meter_unattributed_bytes: IntCounterVec,
    bond_members: IntGaugeVec,
    bond_active_members: IntGaugeVec,
    bond_state_changes: IntCounterVec,
    member_link_up: IntGaugeVec,
    member_speed: IntGaugeVec,
    member_selected: IntGaugeVec,
    member_collecting: IntGaugeVec,
    member_distributing: IntGaugeVec,
    pppoe: PppoeMetrics,
    uplinks: UplinkMetrics,
    session_sync: SessionSyncMetrics,
    port_mapping: PortMappingMetrics,
}

/// `gateway_session_sync_*`: the sync link to the peer of an HA pair.
struct SessionSyncMetrics {
    messages: IntCounterVec,
    flows: IntCounterVec,
    sweeps: IntCounterVec,
    skipped: IntCounterVec,
    refused: IntCounterVec,
    silence: prometheus::Gauge,
    takeovers: IntCounterVec,
    /// `gateway_ha_virtual_address_held{interface}`.
    virtual_held: IntGaugeVec,
}

/// `gateway_port_mapping*`: PCP and NAT-PMP.
struct PortMappingMetrics {
    mappings: IntGaugeVec,
    requests: IntCounterVec,
}

/// `gateway_uplink_*`: each uplink's state and health checks.
struct UplinkMetrics {
    usable: IntGaugeVec,
    failed: IntGaugeVec,
    probes: IntCounterVec,
    rtt: prometheus::GaugeVec,
    changes: IntCounterVec,
}

/// `gateway_pppoe_*`: each PPPoE interface's session.
struct PppoeMetrics {
    up: IntGaugeVec,
    session_id: IntGaugeVec,
    state: IntGaugeVec,
    mtu: IntGaugeVec,
    sessions: IntCounterVec,
    ends: IntCounterVec,
    control: IntCounterVec,
    refused: IntCounterVec,
    echoes: IntCounterVec,
    ipv6_up: IntGaugeVec,
    ipv6cp: IntCounterVec,
}

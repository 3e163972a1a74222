//! Prometheus metrics over HTTP. A scrape reads the workers' counters (atomics each worker
//! alone writes) and the ports' DPDK stats; it never writes anything a worker reads, so it
//! cannot stall the dataplane. The HTTP server is one ordinary thread, not an lcore, running
//! hyper on a current-thread tokio runtime: connections are tasks, not threads, so no number
//! of them adds a thread, and the limits below bound what each may hold. TLS and basic auth
//! are optional (`metrics.web_config`, `crate::config::web`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
use crate::telemetry::bond_watch::BondWatch;
use crate::telemetry::port_watch::PortWatch;

/// The outcome of config reloads, written by the control thread.
#[derive(Debug, Default)]
pub struct ReloadStatus {
    pub last_success: AtomicBool,
    pub last_timestamp_seconds: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
}

impl ReloadStatus {
    pub fn new() -> Self {
        let status = ReloadStatus::default();
        status.last_success.store(true, Ordering::Relaxed);
        status
    }

    pub fn record(&self, success: bool) {
        self.last_success.store(success, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        self.last_timestamp_seconds.store(now, Ordering::Relaxed);
        let counter = if success {
            &self.succeeded
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

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
    pub pppoe: Option<Arc<crate::control::pppoe::PppoeStatus>>,
    /// The router config in force, whose refused kernel routes are exported.
    pub router: Option<Arc<Published<pipeline::RouterConfig>>>,
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
}

impl PppoeMetrics {
    fn new(registry: &Registry) -> Self {
        PppoeMetrics {
            up: gauge_vec(
                registry,
                "pppoe_session_up",
                "1 while the interface's PPPoE session is up (IPCP open), else 0.",
                &["interface"],
            ),
            session_id: gauge_vec(
                registry,
                "pppoe_session_id",
                "The PPPoE session id discovery gave (0: none).",
                &["interface"],
            ),
            state: gauge_vec(
                registry,
                "pppoe_state",
                "1 for the PPPoE client's current state: discovery, requesting, lcp, authenticating, ipcp, up, backoff, stopped.",
                &["interface", "state"],
            ),
            mtu: gauge_vec(
                registry,
                "pppoe_mtu",
                "The session's negotiated MTU (0 while down).",
                &["interface"],
            ),
            sessions: counter_vec(
                registry,
                "pppoe_sessions_total",
                "PPPoE sessions brought up.",
                &["interface"],
            ),
            ends: counter_vec(
                registry,
                "pppoe_session_ends_total",
                "PPPoE sessions ended (or attempts given up), by reason: padt, lcp_terminate, echo_timeout, negotiation_timeout, auth_failed, stopped.",
                &["interface", "reason"],
            ),
            control: counter_vec(
                registry,
                "pppoe_control_packets_total",
                "PPPoE discovery and PPP control packets, by direction (sent, received).",
                &["interface", "direction"],
            ),
            refused: counter_vec(
                registry,
                "pppoe_refused_control_packets_total",
                "PPPoE control packets the client refused: malformed, or ignored (not for it, or not in its state).",
                &["interface", "why"],
            ),
            echoes: counter_vec(
                registry,
                "pppoe_lcp_echoes_total",
                "LCP echoes: requests_sent, replies_received.",
                &["interface", "kind"],
            ),
        }
    }

    fn sync(&self, status: &crate::control::pppoe::PppoeStatus) {
        for link in status.links() {
            let name = link.interface.as_str();
            self.up
                .with_label_values(&[name])
                .set(i64::from(link.local.is_some()));
            self.session_id
                .with_label_values(&[name])
                .set(i64::from(link.session_id.unwrap_or(0)));
            self.mtu
                .with_label_values(&[name])
                .set(i64::from(link.mtu.unwrap_or(0)));
            for state in pipeline::pppoe::State::ALL {
                self.state
                    .with_label_values(&[name, state.name()])
                    .set(i64::from(state.name() == link.state));
            }
            sync_counter(&self.sessions, &[name], link.sessions_up);
            for (reason, count) in &link.ends {
                sync_counter(&self.ends, &[name, reason], *count);
            }
            sync_counter(&self.control, &[name, "sent"], link.control_sent);
            sync_counter(&self.control, &[name, "received"], link.control_received);
            sync_counter(&self.refused, &[name, "malformed"], link.malformed);
            sync_counter(&self.refused, &[name, "ignored"], link.ignored);
            sync_counter(
                &self.echoes,
                &[name, "requests_sent"],
                link.echo_requests_sent,
            );
            sync_counter(
                &self.echoes,
                &[name, "replies_received"],
                link.echo_replies_received,
            );
        }
    }
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let vec = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let vec = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let gauge = IntGauge::new(name, help).expect("valid metric definition");
    registry
        .register(Box::new(gauge.clone()))
        .expect("metric names are unique");
    gauge
}

/// A log's events by result: sent, send_failed, lost.
fn export_log_stats<E>(
    family: &IntCounterVec,
    stats: &crate::telemetry::nat_log::EventLogStats<E>,
) {
    let results = [
        ("sent", stats.sent.load(Ordering::Relaxed)),
        ("send_failed", stats.send_failed.load(Ordering::Relaxed)),
        ("lost", stats.lost()),
    ];
    for (result, count) in results {
        sync_counter(family, &[result], count);
    }
}

/// Counters only grow; bring the registry's copy up to the source's value.
fn sync_counter(vec: &IntCounterVec, labels: &[&str], value: u64) {
    let counter = vec.with_label_values(labels);
    counter.inc_by(value.saturating_sub(counter.get()));
}

type PortReader = fn(&PortStats) -> u64;
type WorkerReader = fn(&WorkerCounters) -> u64;

const PORT_COUNTERS: &[(&str, &str, PortReader)] = &[
    ("port_rx_packets_total", "Packets received by the port.", |s| s.rx_packets),
    ("port_tx_packets_total", "Packets sent by the port.", |s| s.tx_packets),
    ("port_rx_bytes_total", "Bytes received by the port.", |s| s.rx_bytes),
    ("port_tx_bytes_total", "Bytes sent by the port.", |s| s.tx_bytes),
    ("port_rx_errors_total", "Erroneous packets received.", |s| s.rx_errors),
    ("port_tx_errors_total", "Failed transmissions.", |s| s.tx_errors),
    (
        "port_rx_missed_packets_total",
        "Packets the NIC dropped before any queue took them (imissed; ixgbe: the RX packet buffer overflowed, MPC). A queue short of descriptors counts in port_rx_queue_drops_total.",
        |s| s.rx_missed,
    ),
    (
        "port_rx_nombuf_total",
        "RX failures for want of an mbuf in the pool (rx_nombuf).",
        |s| s.rx_nombuf,
    ),
];

const WORKER_COUNTERS: &[(&str, &str, WorkerReader)] = &[
    (
        "worker_rx_packets_total",
        "Packets the worker received from its queues.",
        |c| c.rx_packets.get(),
    ),
    (
        "worker_tx_packets_total",
        "Packets the worker's tx_bursts accepted.",
        |c| c.transmitted.get(),
    ),
    (
        "worker_fast_path_packets_total",
        "Packets of established flows the fast path decided (the rest took the full path).",
        |c| c.fast_path.get(),
    ),
    (
        "worker_rx_bursts_total",
        "RX bursts that returned packets.",
        |c| c.rx_bursts.get(),
    ),
    (
        "worker_rx_full_bursts_total",
        "RX bursts that came back full (worker_rx_burst_size packets): more were waiting. Their share of all bursts nearing 1 means the worker barely keeps up.",
        |c| c.rx_full_bursts.get(),
    ),
    (
        "worker_busy_cycles_total",
        "TSC cycles in loops that received packets.",
        |c| c.busy_cycles.get(),
    ),
    (
        "worker_idle_cycles_total",
        "TSC cycles in loops that received nothing.",
        |c| c.idle_cycles.get(),
    ),
    (
        "worker_handoffs_sent_total",
        "Packets handed to the worker owning their flow.",
        |c| c.handoffs_sent.get(),
    ),
    (
        "worker_handoffs_received_total",
        "Packets received from other workers.",
        |c| c.handoffs_received.get(),
    ),
    (
        "worker_to_control_total",
        "Packets sent to the control thread.",
        |c| c.to_control.get(),
    ),
    (
        "worker_punted_total",
        "Packets for the gateway's addresses sent to a kernel twin.",
        |c| c.punted.get(),
    ),
    (
        "worker_from_twins_total",
        "Frames the kernel sent on a twin, passed to the wire (control thread).",
        |c| c.from_twins.get(),
    ),
    (
        "worker_fragmented_total",
        "Datagrams split into fragments.",
        |c| c.fragmented.get(),
    ),
    (
        "worker_icmp_errors_sent_total",
        "ICMP errors generated.",
        |c| c.icmp_errors_sent.get(),
    ),
    (
        "worker_icmp_errors_rate_limited_total",
        "ICMP errors suppressed by the rate limit.",
        |c| c.icmp_errors_rate_limited.get(),
    ),
    (
        "worker_tcp_mss_clamped_total",
        "TCP SYNs whose MSS option was lowered to an interface's tcp_mss.",
        |c| c.mss_clamped.get(),
    ),
    (
        "worker_syn_cookies_sent_total",
        "SYNs toward port forwards the SYN proxy answered with a cookie (half-open table full).",
        |c| c.syn_cookies_sent.get(),
    ),
    (
        "worker_syn_cookies_accepted_total",
        "ACKs that returned a SYN cookie, each opening a proxied flow.",
        |c| c.syn_cookies_accepted.get(),
    ),
    (
        "worker_syn_proxy_updates_lost_total",
        "Window updates the SYN proxy could not send to a proxied client.",
        |c| c.syn_proxy_updates_lost.get(),
    ),
    (
        "worker_ipv6_router_adverts_total",
        "IPv6 Router Advertisements sent (by the control thread: worker=\"control\").",
        |c| c.router_adverts.get(),
    ),
    ("conntrack_flow_setups_total", "Flows created.", |c| {
        c.conntrack_setups.get()
    }),
    (
        "conntrack_expirations_total",
        "Flows removed after their timeout.",
        |c| c.conntrack_expirations.get(),
    ),
    (
        "conntrack_evictions_total",
        "Flows evicted to make room in a full table.",
        |c| c.conntrack_evictions.get(),
    ),
    (
        "conntrack_stale_segments_total",
        "TCP segments behind the window (data or acknowledgements already overtaken), passed on unchanged.",
        |c| c.conntrack_stale_segments.get(),
    ),
];

/// A link speed in Mbit/s as bytes per second, node_exporter's unit for speeds.
fn bytes_per_second(speed_mbps: u32) -> i64 {
    i64::from(speed_mbps) * 1_000_000 / 8
}

const WORKER_GAUGES: &[(&str, &str, WorkerReader)] = &[
    (
        "ipv6_neighbors",
        "IPv6 neighbours the control thread knows (worker=\"control\"), by Neighbor Discovery.",
        |c| c.ipv6_neighbors.get(),
    ),
    ("conntrack_entries", "Flows in the worker's table.", |c| {
        c.conntrack_entries.get()
    }),
    (
        "conntrack_ipv6_entries",
        "IPv6 flows in the worker's table of them.",
        |c| c.conntrack_ipv6_entries.get(),
    ),
    (
        "conntrack_capacity",
        "Flows the worker's table holds.",
        |c| c.conntrack_capacity.get(),
    ),
    (
        "nat_ports_in_use",
        "NAT ports (and ICMP ids) bound on this worker.",
        |c| c.nat_ports_in_use.get(),
    ),
    (
        "nat_ports_available",
        "NAT ports this worker may still hand out.",
        |c| c.nat_ports_available.get(),
    ),
    (
        "nat_port_blocks_in_use",
        "NAT port blocks LAN hosts hold on this worker (nat.port_block_size; 0 without).",
        |c| c.nat_port_blocks_in_use.get(),
    ),
    (
        "nat_port_blocks",
        "NAT port blocks this worker has over its addresses (nat.port_block_size; 0 without).",
        |c| c.nat_port_blocks.get(),
    ),
    (
        "conntrack_half_open",
        "Half-open TCP flows in the worker's table (capped by conntrack.half_open).",
        |c| c.conntrack_half_open.get(),
    ),
    (
        "hosts_at_flow_limit",
        "Hosts holding conntrack.host_flows flows on this worker now.",
        |c| c.hosts_at_flow_limit.get(),
    ),
    (
        "hosts_at_half_open_limit",
        "Hosts holding conntrack.host_half_open half-open flows on this worker now.",
        |c| c.hosts_at_half_open_limit.get(),
    ),
    (
        "hosts_at_nat_port_limit",
        "LAN hosts holding nat.host_ports NAT ports on this worker now.",
        |c| c.hosts_at_nat_port_limit.get(),
    ),
];

/// Every metric family the gateway exports, with the `gateway_` prefix: what dashboards and
/// alerts may refer to.
pub fn metric_names() -> Vec<String> {
    let fixed = [
        "build_info",
        "port_queue_packets_total",
        "port_rx_queue_drops_total",
        "port_xstats_total",
        "port_link_up",
        "port_speed_bytes",
        "port_link_flaps_total",
        "port_info",
        "interface_packets_total",
        "interface_bytes_total",
        "mempool_mbufs",
        "mempool_mbufs_in_use",
        "worker_rx_burst_size",
        "dropped_packets_total",
        "ipv6_dropped_packets_total",
        "conntrack_invalid_packets_total",
        "config_last_reload_success",
        "config_last_reload_timestamp_seconds",
        "config_reloads_total",
        "snapshot_restored_flows",
        "snapshot_skipped_flows",
        "snapshot_refused",
        "nat_log_events_total",
        "firewall_log_events_total",
        "firewall_rule_hits_total",
        "firewall_default_hits_total",
        "worker_heartbeat_age_seconds",
        "qos_bytes_total",
        "qos_packets_total",
        "qos_share_bytes_per_second",
        "qos_ecn_marks_total",
        "qos_backlog_packets",
        "qos_queue_delay_seconds",
        "meter_bytes_total",
        "meter_packets_total",
        "meter_hosts",
        "meter_host_bytes_total",
        "meter_unattributed_bytes_total",
        "bond_members",
        "bond_active_members",
        "bond_member_state_changes_total",
        "bond_member_link_up",
        "bond_member_speed_bytes",
        "bond_member_lacp_selected",
        "bond_member_lacp_collecting",
        "bond_member_lacp_distributing",
        "pppoe_session_up",
        "pppoe_session_id",
        "pppoe_state",
        "pppoe_mtu",
        "pppoe_sessions_total",
        "pppoe_session_ends_total",
        "pppoe_control_packets_total",
        "pppoe_refused_control_packets_total",
        "pppoe_lcp_echoes_total",
    ];
    let tables = PORT_COUNTERS
        .iter()
        .map(|(name, _, _)| *name)
        .chain(WORKER_COUNTERS.iter().map(|(name, _, _)| *name))
        .chain(WORKER_GAUGES.iter().map(|(name, _, _)| *name));
    fixed
        .into_iter()
        .chain(tables)
        .map(|name| format!("gateway_{name}"))
        .collect()
}

impl Metrics {
    pub fn new(sources: Sources) -> Self {
        let registry = Registry::new_custom(Some("gateway".into()), None).expect("valid prefix");
        let build = gauge_vec(
            &registry,
            "build_info",
            "Build information; the value is always 1.",
            &["version", "dpdk"],
        );
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), &crate::dpdk::version()])
            .set(1);
        // What does not change while the gateway runs is set once.
        let port_info = gauge_vec(
            &registry,
            "port_info",
            "The port's driver, firmware version and EAL device; the value is always 1.",
            &["port", "driver", "firmware", "device"],
        );
        for port in &sources.ports.ports {
            let info = &port.info;
            port_info
                .with_label_values(&[&port.name, &info.driver, &info.firmware, &info.device])
                .set(1);
        }
        let mempool_mbufs = gauge_vec(
            &registry,
            "mempool_mbufs",
            "Packet buffers in the pool.",
            &["pool"],
        );
        if let Some(pool) = &sources.pool {
            mempool_mbufs
                .with_label_values(&["packets"])
                .set(i64::from(pool.capacity()));
        }
        let rx_burst_size = gauge_vec(
            &registry,
            "worker_rx_burst_size",
            "Packets one RX burst may return: a full burst (worker_rx_full_bursts_total) returned this many.",
            &["worker"],
        );
        for worker in 0..sources.workers.len() {
            rx_burst_size
                .with_label_values(&[&worker.to_string()])
                .set(BURST_SIZE as i64);
        }
        Metrics {
            port_counters: PORT_COUNTERS
                .iter()
                .map(|&(name, help, read)| Family {
                    vec: counter_vec(&registry, name, help, &["port"]),
                    read,
                })
                .collect(),
            queue_packets: counter_vec(
                &registry,
                "port_queue_packets_total",
                "Packets per port queue and direction (rx, tx).",
                &["port", "queue", "direction"],
            ),
            interface_packets: counter_vec(
                &registry,
                "interface_packets_total",
                "Packets per interface (a port's own or a VLAN subinterface) and direction: rx \
                 as received, tx as handed to the port's queue.",
                &["interface", "direction"],
            ),
            interface_bytes: counter_vec(
                &registry,
                "interface_bytes_total",
                "Bytes of those packets, Ethernet header included, 802.1Q tag not.",
                &["interface", "direction"],
            ),
            queue_drops: counter_vec(
                &registry,
                "port_rx_queue_drops_total",
                "Packets a port queue dropped for want of a free descriptor (q_errors; ixgbe QPRDC with drop-enable): its worker fell behind.",
                &["port", "queue"],
            ),
            xstats: counter_vec(
                &registry,
                "port_xstats_total",
                "The NIC's extended statistics, named as the driver reports them (ixgbe: rx_crc_errors, mac_local_errors, ...).",
                &["port", "stat"],
            ),
            port_link_up: gauge_vec(
                &registry,
                "port_link_up",
                "Whether the port's link is up (1) or down (0).",
                &["port"],
            ),
            port_speed: gauge_vec(
                &registry,
                "port_speed_bytes",
                "The link's speed in bytes per second, as node_exporter's node_network_speed_bytes.",
                &["port"],
            ),
            link_flaps: counter_vec(
                &registry,
                "port_link_flaps_total",
                "Times the port's link went down, sampled every 100 ms.",
                &["port"],
            ),
            mempool_in_use: gauge_vec(
                &registry,
                "mempool_mbufs_in_use",
                "Packet buffers out of the pool (in rings, queues and bursts), approximate.",
                &["pool"],
            ),
            worker_counters: WORKER_COUNTERS
                .iter()
                .map(|&(name, help, read)| Family {
                    vec: counter_vec(&registry, name, help, &["worker"]),
                    read,
                })
                .collect(),
            worker_gauges: WORKER_GAUGES
                .iter()
                .map(|&(name, help, read)| GaugeFamily {
                    vec: gauge_vec(&registry, name, help, &["worker"]),
                    read,
                })
                .collect(),
            heartbeat_age: {
                let vec = prometheus::GaugeVec::new(
                    Opts::new(
                        "worker_heartbeat_age_seconds",
                        "Seconds since the worker's poll loop last ran (a live worker: a few ms).",
                    ),
                    &["worker"],
                )
                .expect("valid metric definition");
                registry
                    .register(Box::new(vec.clone()))
                    .expect("metric names are unique");
                vec
            },
            drops: counter_vec(
                &registry,
                "dropped_packets_total",
                "Packets dropped, by worker and reason.",
                &["worker", "reason"],
            ),
            ipv6_drops: counter_vec(
                &registry,
                "ipv6_dropped_packets_total",
                "Of dropped_packets_total, the IPv6 packets the workers' pipeline dropped (not the shaper's, the rings' or the control thread's), by worker and reason; a series appears at its first drop.",
                &["worker", "reason"],
            ),
            conntrack_invalid: counter_vec(
                &registry,
                "conntrack_invalid_packets_total",
                "Packets the flow tracker refused (dropped as conntrack_invalid), by worker and why.",
                &["worker", "reason"],
            ),
            reload_success: gauge(
                &registry,
                "config_last_reload_success",
                "1 if the last config reload applied, 0 if it was refused.",
            ),
            reload_timestamp: gauge(
                &registry,
                "config_last_reload_timestamp_seconds",
                "Unix time of the last reload attempt (0: none since start).",
            ),
            reloads: counter_vec(
                &registry,
                "config_reloads_total",
                "Config reload attempts by result (success, failure).",
                &["result"],
            ),
            snapshot_restored: gauge(
                &registry,
                "snapshot_restored_flows",
                "Flows restored from the state snapshot at start.",
            ),
            snapshot_skipped: gauge_vec(
                &registry,
                "snapshot_skipped_flows",
                "Flows of the state snapshot not restored at start, by reason (expired, config, ownership, nat_port, table).",
                &["reason"],
            ),
            snapshot_refused: gauge(
                &registry,
                "snapshot_refused",
                "1 if a state snapshot was found at start and refused whole (corrupt, truncated, foreign, other version).",
            ),
            kernel_routes_refused: gauge_vec(
                &registry,
                "kernel_routes_refused",
                "Routes on the kernel twins (IPv4 and IPv6) not mirrored into the FIB now, by reason: overlaps_connected (inside one of the gateway's own subnets), not_allowed (outside kernel_twins.route_allow).",
                &["reason"],
            ),
            firewall_rule_hits: counter_vec(
                &registry,
                "firewall_rule_hits_total",
                "First packets each firewall rule decided, by rule name (a name's second use is name#2) and action: one per accepted flow; for dropped or rejected flows and for traffic to the gateway itself, one per packet the rule met. Kept across reloads by name; the zone pair's defaults are not counted here.",
                &["rule", "action"],
            ),
            firewall_default_hits: counter_vec(
                &registry,
                "firewall_default_hits_total",
                "First packets each zone pair's default decided (no rule matched; not a port forward or an IPv6 pinhole), by zones (from, to, local for the gateway itself) and the pair's default action, counted as firewall_rule_hits_total is. Kept across reloads by zone names.",
                &["from", "to", "action"],
            ),
            nat_log_events: counter_vec(
                &registry,
                "nat_log_events_total",
                "NAT log events (mapping created or deleted) by result: sent, send_failed, lost (a worker's queue was full).",
                &["result"],
            ),
            firewall_log_events: counter_vec(
                &registry,
                "firewall_log_events_total",
                "Firewall log events (decisions of rules with log = true) by result: sent, send_failed, lost (over a worker's firewall.log budget, or its queue full).",
                &["result"],
            ),
            qos_bytes: counter_vec(
                &registry,
                "qos_bytes_total",
                "QoS: bytes by link (uplink, downlink), class (priority, bulk) and result (passed, dropped).",
                &["link", "class", "result"],
            ),
            qos_packets: counter_vec(
                &registry,
                "qos_packets_total",
                "QoS: packets by link, class and result.",
                &["link", "class", "result"],
            ),
            qos_share: gauge_vec(
                &registry,
                "qos_share_bytes_per_second",
                "QoS: the rate share each worker polices to, by link.",
                &["worker", "link"],
            ),
            qos_ecn_marks: counter_vec(
                &registry,
                "qos_ecn_marks_total",
                "QoS shaper: packets marked CE (Congestion Experienced) instead of dropped, by link.",
                &["link"],
            ),
            qos_backlog: gauge_vec(
                &registry,
                "qos_backlog_packets",
                "QoS shaper: packets waiting in the shapers now, by link.",
                &["link"],
            ),
            meter_bytes: counter_vec(
                &registry,
                "meter_bytes_total",
                "Traffic meter: bytes of all LAN hosts by direction (up: from the host).",
                &["direction"],
            ),
            meter_packets: counter_vec(
                &registry,
                "meter_packets_total",
                "Traffic meter: packets of all LAN hosts by direction.",
                &["direction"],
            ),
            meter_hosts: gauge(&registry, "meter_hosts", "LAN hosts the traffic meter has seen."),
            meter_host_bytes: counter_vec(
                &registry,
                "meter_host_bytes_total",
                "Traffic meter: bytes of the top hosts and the configured hosts (all hosts: /hosts).",
                &["host", "direction"],
            ),
            meter_unattributed_bytes: counter_vec(
                &registry,
                "meter_unattributed_bytes_total",
                "Traffic meter: IPv6 bytes of LAN hosts with no IPv4 address on that link to count them under, by direction.",
                &["direction"],
            ),
            bond_members: gauge_vec(&registry, "bond_members", "Members configured in the bond.", &["bond"]),
            bond_active_members: gauge_vec(
                &registry,
                "bond_active_members",
                "Members carrying traffic: link up and LACP distributing on them.",
                &["bond"],
            ),
            bond_state_changes: counter_vec(
                &registry,
                "bond_member_state_changes_total",
                "Member changes of link, LACP selection, collecting or distributing.",
                &["bond"],
            ),
            member_link_up: gauge_vec(
                &registry,
                "bond_member_link_up",
                "1 when the member's link is up.",
                &["bond", "member"],
            ),
            member_speed: gauge_vec(
                &registry,
                "bond_member_speed_bytes",
                "The member's link speed in bytes per second; 802.3ad aggregates only members of one speed.",
                &["bond", "member"],
            ),
            member_selected: gauge_vec(
                &registry,
                "bond_member_lacp_selected",
                "1 when LACP selected the member for the aggregator.",
                &["bond", "member"],
            ),
            member_collecting: gauge_vec(
                &registry,
                "bond_member_lacp_collecting",
                "1 when the side (actor: the gateway, partner: the switch) collects on the member.",
                &["bond", "member", "side"],
            ),
            member_distributing: gauge_vec(
                &registry,
                "bond_member_lacp_distributing",
                "1 when the side (actor: the gateway, partner: the switch) distributes on the member.",
                &["bond", "member", "side"],
            ),
            pppoe: PppoeMetrics::new(&registry),
            registry,
            sources,
        }
    }

    /// Reads every source and renders the Prometheus text exposition.
    pub fn render(&self) -> String {
        self.collect();
        let mut families = self.registry.gather();
        families.push(self.queue_delay_family());
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&families, &mut out)
            .expect("text encoding into a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    fn collect(&self) {
        for (index, name) in self.sources.interfaces.iter().enumerate() {
            let total = |read: fn(&pipeline::counters::InterfaceCounters) -> u64| {
                self.sources
                    .workers
                    .iter()
                    .filter_map(|worker| worker.interface(index as u16))
                    .map(read)
                    .sum::<u64>()
            };
            let name = name.as_str();
            let families = [
                (&self.interface_packets, "rx", total(|c| c.rx_packets.get())),
                (&self.interface_packets, "tx", total(|c| c.tx_packets.get())),
                (&self.interface_bytes, "rx", total(|c| c.rx_bytes.get())),
                (&self.interface_bytes, "tx", total(|c| c.tx_bytes.get())),
            ];
            for (family, direction, value) in families {
                sync_counter(family, &[name, direction], value);
            }
        }
        for port in &self.sources.ports.ports {
            let name = port.name.as_str();
            port.poll(|totals| {
                for family in &self.port_counters {
                    sync_counter(&family.vec, &[name], (family.read)(&totals.stats));
                }
                for queue in 0..port.queues.min(QUEUE_STAT_COUNTERS) {
                    let q = queue.to_string();
                    let stats = &totals.stats;
                    sync_counter(
                        &self.queue_packets,
                        &[name, &q, "rx"],
                        stats.rx_queue_packets[queue],
                    );
                    sync_counter(
                        &self.queue_packets,
                        &[name, &q, "tx"],
                        stats.tx_queue_packets[queue],
                    );
                    sync_counter(&self.queue_drops, &[name, &q], stats.rx_queue_drops[queue]);
                }
                for (stat, &value) in port.xstat_names.iter().zip(&totals.xstats) {
                    sync_counter(&self.xstats, &[name, stat], value);
                }
            });
            let (up, speed_mbps) = port.link();
            self.port_link_up
                .with_label_values(&[name])
                .set(i64::from(up));
            self.port_speed
                .with_label_values(&[name])
                .set(bytes_per_second(speed_mbps));
            sync_counter(&self.link_flaps, &[name], port.link_flaps());
        }
        if let Some(pool) = &self.sources.pool {
            self.mempool_in_use
                .with_label_values(&["packets"])
                .set(i64::from(pool.in_use()));
        }
        let workers = self
            .sources
            .workers
            .iter()
            .enumerate()
            .map(|(i, c)| (i.to_string(), c));
        let control = std::iter::once(("control".to_string(), &self.sources.control));
        for (worker, counters) in workers.chain(control) {
            for family in &self.worker_counters {
                sync_counter(&family.vec, &[&worker], (family.read)(counters));
            }
            for family in &self.worker_gauges {
                family
                    .vec
                    .with_label_values(&[&worker])
                    .set((family.read)(counters) as i64);
            }
            for &reason in DropReason::ALL {
                sync_counter(
                    &self.drops,
                    &[&worker, reason.label()],
                    counters.dropped(reason),
                );
                // Only reasons that dropped IPv6, so IPv4-only hosts get no second set.
                let ipv6 = counters.dropped_ipv6(reason);
                if ipv6 > 0 {
                    sync_counter(&self.ipv6_drops, &[&worker, reason.label()], ipv6);
                }
            }
            for reason in InvalidReason::ALL {
                sync_counter(
                    &self.conntrack_invalid,
                    &[&worker, reason.label()],
                    counters.conntrack_invalid[reason.index()].get(),
                );
            }
            let tuple_refusals = [
                ("tuple_exists", &counters.conntrack_tuple_exists),
                ("ambiguous_tuple", &counters.conntrack_ambiguous_tuple),
            ];
            for (reason, count) in tuple_refusals {
                sync_counter(&self.conntrack_invalid, &[&worker, reason], count.get());
            }
        }
        let (now_tsc, hz) = (crate::dpdk::rdtsc(), crate::dpdk::tsc_hz());
        for (worker, heartbeat) in self.sources.heartbeats.iter().enumerate() {
            self.heartbeat_age
                .with_label_values(&[&worker.to_string()])
                .set(heartbeat.age_seconds(now_tsc, hz));
        }
        self.collect_qos();
        let meter = &self.sources.meter;
        let (export, _) = meter.export.load();
        if export.enabled {
            let hosts = meter.hosts();
            self.meter_hosts.set(hosts.len() as i64);
            let sum = |f: fn(&HostUsage) -> u64| hosts.iter().map(f).sum::<u64>();
            sync_counter(&self.meter_bytes, &["up"], sum(|h| h.up_bytes));
            sync_counter(&self.meter_bytes, &["down"], sum(|h| h.down_bytes));
            sync_counter(&self.meter_packets, &["up"], sum(|h| h.up_packets));
            sync_counter(&self.meter_packets, &["down"], sum(|h| h.down_packets));
            let mut shown: Vec<&HostUsage> = hosts.iter().collect();
            shown.sort_by_key(|h| std::cmp::Reverse(h.total_bytes()));
            shown.truncate(export.top_hosts);
            shown.extend(hosts.iter().filter(|h| export.named_hosts.contains(&h.ip)));
            for host in shown {
                let ip = host.ip.to_string();
                sync_counter(&self.meter_host_bytes, &[&ip, "up"], host.up_bytes);
                sync_counter(&self.meter_host_bytes, &[&ip, "down"], host.down_bytes);
            }
            let unattributed = meter.unattributed();
            let unattributed_bytes = &self.meter_unattributed_bytes;
            sync_counter(unattributed_bytes, &["up"], unattributed.up_bytes);
            sync_counter(unattributed_bytes, &["down"], unattributed.down_bytes);
        }
        for bond in &self.sources.bonds.bonds {
            let name = bond.name.as_str();
            self.bond_members
                .with_label_values(&[name])
                .set(bond.members.len() as i64);
            self.bond_active_members
                .with_label_values(&[name])
                .set(bond.active.load(Ordering::Relaxed) as i64);
            sync_counter(
                &self.bond_state_changes,
                &[name],
                bond.state_changes.load(Ordering::Relaxed),
            );
            for member in &bond.members {
                let state = member.sample.get();
                let labels = [name, member.name.as_str()];
                self.member_link_up
                    .with_label_values(&labels)
                    .set(i64::from(state.link_up));
                self.member_speed
                    .with_label_values(&labels)
                    .set(bytes_per_second(state.speed_mbps));
                self.member_selected
                    .with_label_values(&labels)
                    .set(i64::from(state.selected));
                for (side, partner) in [("actor", false), ("partner", true)] {
                    let labels = [name, member.name.as_str(), side];
                    self.member_collecting
                        .with_label_values(&labels)
                        .set(i64::from(state.collecting(partner)));
                    self.member_distributing
                        .with_label_values(&labels)
                        .set(i64::from(state.distributing(partner)));
                }
            }
        }
        if let Some(router) = &self.sources.router {
            let (router, _) = router.load();
            for label in pipeline::RouteRefusal::LABELS {
                let refused = router
                    .refused_kernel_routes
                    .iter()
                    .filter(|route| route.reason.label() == label)
                    .count();
                self.kernel_routes_refused
                    .with_label_values(&[label])
                    .set(refused as i64);
            }
            // The rules in force now: a rule a reload removed goes from the scrape.
            let firewall = &router.stateful.firewall;
            let names = crate::compile::rule_hits::counter_names(firewall.rules());
            self.firewall_rule_hits.reset();
            for ((name, rule), hits) in names.iter().zip(firewall.rules()).zip(firewall.hits()) {
                self.firewall_rule_hits
                    .with_label_values(&[name.as_str(), rule.action.name()])
                    .inc_by(hits.total());
            }
            self.firewall_default_hits.reset();
            for pair in firewall.pair_hits() {
                let action = firewall.policy().default_for(pair.from.0, pair.to.0);
                let count = pair.hits.total();
                if count > 0 {
                    self.firewall_default_hits
                        .with_label_values(&[&pair.from.1, &pair.to.1, action.name()])
                        .inc_by(count);
                }
            }
        }
        let reload = &self.sources.reload;
        self.reload_success
            .set(i64::from(reload.last_success.load(Ordering::Relaxed)));
        self.reload_timestamp
            .set(reload.last_timestamp_seconds.load(Ordering::Relaxed) as i64);
        sync_counter(
            &self.reloads,
            &["success"],
            reload.succeeded.load(Ordering::Relaxed),
        );
        sync_counter(
            &self.reloads,
            &["failure"],
            reload.failed.load(Ordering::Relaxed),
        );
        let snapshot = &self.sources.snapshot;
        self.snapshot_restored
            .set(snapshot.restored.load(Ordering::Relaxed) as i64);
        self.snapshot_refused
            .set(i64::from(snapshot.refused.load(Ordering::Relaxed)));
        if let Some(pppoe) = &self.sources.pppoe {
            self.pppoe.sync(pppoe);
        }
        if let Some(nat_log) = &self.sources.nat_log {
            export_log_stats(&self.nat_log_events, nat_log);
        }
        if let Some(firewall_log) = &self.sources.firewall_log {
            export_log_stats(&self.firewall_log_events, firewall_log);
        }
        for (reason, skipped) in pipeline::pipeline::snapshot::Skip::ALL
            .iter()
            .zip(&snapshot.skipped)
        {
            self.snapshot_skipped
                .with_label_values(&[reason.label()])
                .set(skipped.load(Ordering::Relaxed) as i64);
        }
    }
}

impl Metrics {
    /// `gateway_qos_queue_delay_seconds`: how long packets waited in the shapers, a histogram
    /// per link over all workers. Built here from the workers' bucket counts, which the
    /// registry's own histograms (observed one value at a time) could not take.
    fn queue_delay_family(&self) -> prometheus::proto::MetricFamily {
        use pipeline::features::shaper::DELAY_BUCKETS_NS;
        use prometheus::proto::{Bucket, Histogram, LabelPair, Metric, MetricFamily, MetricType};
        let mut family = MetricFamily::default();
        family.set_name("gateway_qos_queue_delay_seconds".into());
        family.set_help(
            "QoS shaper: time packets waited in the queues (sent, marked or dropped by CoDel), by link."
                .into(),
        );
        family.set_field_type(MetricType::HISTOGRAM);
        for (index, link) in ["uplink", "downlink"].into_iter().enumerate() {
            let exports = self.sources.qos.iter().map(|links| &links[index].shaper);
            let mut counts = [0u64; DELAY_BUCKETS_NS.len() + 1];
            let mut sum_ns = 0u64;
            for export in exports {
                for (total, gauge) in counts.iter_mut().zip(&export.delay_counts) {
                    *total += gauge.get();
                }
                sum_ns = sum_ns.wrapping_add(export.delay_sum_ns.get());
            }
            let mut histogram = Histogram::default();
            let mut cumulative = 0;
            let buckets = DELAY_BUCKETS_NS
                .iter()
                .zip(&counts)
                .map(|(&bound, &count)| {
                    cumulative += count;
                    let mut bucket = Bucket::default();
                    bucket.set_upper_bound(bound as f64 / 1e9);
                    bucket.set_cumulative_count(cumulative);
                    bucket
                })
                .collect();
            histogram.set_bucket(buckets);
            histogram.set_sample_count(counts.iter().sum());
            histogram.set_sample_sum(sum_ns as f64 / 1e9);
            let mut label = LabelPair::default();
            label.set_name("link".into());
            label.set_value(link.into());
            let mut metric = Metric::default();
            metric.set_label(vec![label]);
            metric.set_histogram(histogram);
            family.mut_metric().push(metric);
        }
        family
    }

    fn collect_qos(&self) {
        let links = ["uplink", "downlink"];
        // [link][class][passed bytes, passed packets, dropped bytes, dropped packets]
        let mut totals = [[[0u64; 4]; 2]; 2];
        let mut shaped = [[0u64; 2]; 2];
        for (worker, policers) in self.sources.qos.iter().enumerate() {
            for (link, stats) in policers.iter().enumerate() {
                shaped[link][0] += stats.shaper.ecn_marks.get();
                shaped[link][1] += stats.shaper.backlog_packets.get();
                self.qos_share
                    .with_label_values(&[&worker.to_string(), links[link]])
                    .set((stats.share_bps() / 8) as i64);
                for (class, counts) in [&stats.priority, &stats.bulk].into_iter().enumerate() {
                    let total = &mut totals[link][class];
                    total[0] += counts.passed_bytes.get();
                    total[1] += counts.passed_packets.get();
                    total[2] += counts.dropped_bytes.get();
                    total[3] += counts.dropped_packets.get();
                }
            }
        }
        for (link, [marks, backlog]) in shaped.into_iter().enumerate() {
            sync_counter(&self.qos_ecn_marks, &[links[link]], marks);
            self.qos_backlog
                .with_label_values(&[links[link]])
                .set(backlog as i64);
        }
        for (link, per_class) in totals.iter().enumerate() {
            for (class, t) in per_class.iter().enumerate() {
                let labels = |result| [links[link], ["priority", "bulk"][class], result];
                sync_counter(&self.qos_bytes, &labels("passed"), t[0]);
                sync_counter(&self.qos_packets, &labels("passed"), t[1]);
                sync_counter(&self.qos_bytes, &labels("dropped"), t[2]);
                sync_counter(&self.qos_packets, &labels("dropped"), t[3]);
            }
        }
    }
}

/// Connections the kernel queues for the metrics server before it accepts them (capped by
/// `net.core.somaxconn`).
pub const ACCEPT_BACKLOG: u32 = 1024;

/// How many connections the metrics server serves at once. Beyond it, each new connection
/// closes the oldest one (an idle one at once; one mid-request gets [`SHUTDOWN_GRACE`] to
/// finish), so a flood of connections cannot lock Prometheus out: its scrape is the newest.
pub const MAX_CONNECTIONS: usize = 256;

/// How long a connection may take to send a request's headers, counted from when the server
/// starts waiting for them: a new connection and an idle keep-alive one are closed after it,
/// and so is a client trickling header bytes. Prometheus sends its scrape at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The most bytes a request's start line and headers may take; more gets `431 Request Header
/// Fields Too Large` and the connection closed. A scrape sends a few hundred.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// How long a TLS client may take over its handshake (counted from the accept), so that one
/// trickling the handshake is closed as one trickling headers is.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = HEADER_READ_TIMEOUT;

/// The longest a connection lives, however busy: a client that reads its response slowly
/// cannot hold a connection (and its buffered response) longer than this.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// What a closed connection (the oldest beyond [`MAX_CONNECTIONS`], or one past
/// [`CONNECTION_LIFETIME`]) gets to finish a response it is writing.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long the accept loop waits after a failed accept (e.g. out of file descriptors)
/// rather than spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How often the server looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

const TEXT_PLAIN: &str = "text/plain; charset=UTF-8";

/// One answer of the metrics server.
struct Page {
    status: StatusCode,
    content_type: &'static str,
    body: String,
}

/// The server's pages, by request target (path and query, as the request line has it).
fn page(metrics: &Mutex<Metrics>, target: &str) -> Page {
    let metrics = || metrics.lock().unwrap_or_else(|poison| poison.into_inner());
    let ok = |content_type, body| Page {
        status: StatusCode::OK,
        content_type,
        body,
    };
    match target {
        "/metrics" => ok(
            "text/plain; version=0.0.4; charset=utf-8",
            metrics().render(),
        ),
        "/hosts" => ok("application/json", metrics().sources.meter.json()),
        "/" => ok(TEXT_PLAIN, "gateway: see /metrics and /hosts\n".into()),
        _ => Page {
            status: StatusCode::NOT_FOUND,
            content_type: TEXT_PLAIN,
            body: "not found\n".into(),
        },
    }
}

/// Serves `/metrics` on `listen` until `stop` is set, over TLS and behind basic auth when
/// `web` says so (`metrics.web_config`).
pub fn serve(
    listen: SocketAddr,
    metrics: Metrics,
    web: WebConfig,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<JoinHandle<()>> {
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    if web.tls.is_none() && web.basic_auth.is_some() {
        tracing::warn!("metrics: basic auth without TLS sends the password in the clear");
    }
    let (bound, thread) = serve_with(listen, metrics, web, stop)?;
    tracing::info!(listen = %bound, "metrics on {scheme}://{bound}/metrics");
    Ok(thread)
}

/// Like [`serve`] in plain HTTP, and says where it listens (port 0 gets one from the kernel).
pub fn serve_on(
    listen: SocketAddr,
    metrics: Metrics,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    serve_with(listen, metrics, WebConfig::default(), stop)
}

/// Like [`serve`], and says where it listens. One thread running a current-thread tokio
/// runtime, whatever the number of connections, within the limits above; with basic auth,
/// bcrypt checks run one at a time on the runtime's blocking pool (one more thread).
pub fn serve_with(
    listen: SocketAddr,
    metrics: Metrics,
    web: WebConfig,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<(SocketAddr, JoinHandle<()>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(1)
        .build()?;
    let listener = {
        // The listener registers with this runtime's reactor.
        let _runtime = runtime.enter();
        bind(listen).map_err(|err| anyhow::anyhow!("metrics.listen {listen}: {err}"))?
    };
    let bound = listener.local_addr()?;
    let endpoint = Endpoint {
        metrics: Arc::new(Mutex::new(metrics)),
        tls: web.tls.map(tokio_rustls::TlsAcceptor::from),
        basic_auth: web.basic_auth,
    };
    let thread = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || runtime.block_on(accept_connections(listener, endpoint, stop)))?;
    Ok((bound, thread))
}

/// What every connection shares: the metrics, and how a client must come in.
#[derive(Clone)]
struct Endpoint {
    metrics: Arc<Mutex<Metrics>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    basic_auth: Option<Arc<BasicAuth>>,
}

impl Endpoint {
    async fn answer(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, hyper::http::Error> {
        if let Some(auth) = &self.basic_auth {
            let header = request.headers().get(AUTHORIZATION).map(|v| v.as_bytes());
            match auth.check(header).await {
                AuthVerdict::Allowed => {}
                AuthVerdict::Denied => {
                    return Response::builder()
                        .status(StatusCode::UNAUTHORIZED)
                        .header(WWW_AUTHENTICATE, "Basic realm=\"gateway\"")
                        .header(CONTENT_TYPE, TEXT_PLAIN)
                        .body(Full::new(Bytes::from_static(b"Unauthorized\n")));
                }
                AuthVerdict::Busy => {
                    return Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .header(RETRY_AFTER, "1")
                        .header(CONTENT_TYPE, TEXT_PLAIN)
                        .body(Full::new(Bytes::from_static(
                            b"too many password checks at once\n",
                        )));
                }
            }
        }
        let target = request.uri().path_and_query().map_or("", |p| p.as_str());
        let page = page(&self.metrics, target);
        Response::builder()
            .status(page.status)
            .header(CONTENT_TYPE, page.content_type)
            .body(Full::new(Bytes::from(page.body)))
    }
}

/// A listener whose accept queue holds [`ACCEPT_BACKLOG`] connections: std's 128 fills in
/// a few milliseconds of a connection flood, and a scrape's SYN dropped on a full queue is
/// only retried a second later.
fn bind(listen: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match listen {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    // As std does: a restart may bind while the last run's connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(listen)?;
    socket.listen(ACCEPT_BACKLOG)
}

async fn accept_connections(
    listener: tokio::net::TcpListener,
    endpoint: Endpoint,
    stop: Arc<AtomicBool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_header_size(MAX_HEADER_BYTES);
    // One sender per open connection, oldest first; a connection's task drops its receiver
    // when it ends, which is how closed ones are told apart.
    let mut open: VecDeque<oneshot::Sender<()>> = VecDeque::new();
    let mut stop_poll = tokio::time::interval(STOP_POLL);
    while !stop.load(Ordering::Relaxed) {
        let accepted = tokio::select! {
            accepted = listener.accept() => Some(accepted),
            _ = stop_poll.tick() => None,
        };
        let stream = match accepted {
            None => continue,
            Some(Ok((stream, _))) => stream,
            Some(Err(err)) => {
                tracing::warn!(%err, "metrics: accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        open.retain(|connection| !connection.is_closed());
        if open.len() >= MAX_CONNECTIONS {
            if let Some(oldest) = open.pop_front() {
                let _ = oldest.send(());
            }
        }
        let (close, closed) = oneshot::channel();
        open.push_back(close);
        tokio::spawn(serve_connection(
            http.clone(),
            stream,
            endpoint.clone(),
            closed,
        ));
    }
    // Returning drops the runtime and with it every connection.
}

/// Answers requests on one connection until the client closes it, a limit closes it, or
/// `close` fires (or its sender is dropped). With TLS, the handshake first, which must end
/// within [`TLS_HANDSHAKE_TIMEOUT`]: a client trickling it holds its task no longer.
async fn serve_connection(
    http: hyper::server::conn::http1::Builder,
    stream: tokio::net::TcpStream,
    endpoint: Endpoint,
    mut close: oneshot::Receiver<()>,
) {
    let Some(acceptor) = endpoint.tls.clone() else {
        return serve_http(http, TokioIo::new(stream), endpoint, close).await;
    };
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)) => handshake,
        _ = &mut close => return,
    };
    match handshake {
        Ok(Ok(stream)) => serve_http(http, TokioIo::new(stream), endpoint, close).await,
        Ok(Err(err)) => tracing::debug!(%err, "metrics: TLS handshake failed"),
        Err(_) => tracing::debug!("metrics: TLS handshake timed out"),
    }
}

/// HTTP/1.1 on a connection (plain or TLS) until it ends, `close` fires or it outlives
/// [`CONNECTION_LIFETIME`].
async fn serve_http<I>(
    http: hyper::server::conn::http1::Builder,
    io: I,
    endpoint: Endpoint,
    mut close: oneshot::Receiver<()>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(|request: Request<Incoming>| {
        let endpoint = endpoint.clone();
        async move { endpoint.answer(request).await }
    });
    let connection = http.serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = &mut close => {}
        _ = tokio::time::sleep(CONNECTION_LIFETIME) => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, connection).await;
}

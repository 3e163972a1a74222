//! The gateway's end of `gateway ctl`: a thread that accepts on the Unix socket and answers
//! one request per connection, in turn. Counters come from the workers' atomics; flow
//! queries go to every worker (`crate::dataplane::ctl_link`) and are answered when all have walked
//! their tables, or refused naming the worker that did not answer in time.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pipeline::pipeline::operator::flow_listing::{FlowFilter, FlowRecord};
use pipeline::state::firewall::ZoneId;
use pipeline::{DropReason, NeighborView, RouterConfig, WorkerCounters};
use serde_json::{json, Value};

use super::{
    tcp_state_name, ConfigRequest, FilterSpec, Request, MAX_CONFIRM_SECS, MAX_FLOW_LIMIT,
    MAX_TRACE_PACKETS, MAX_TRACE_TIMEOUT_MS,
};
use crate::config::history::ConfigHistory;
use crate::config::store::ConfigStore;
use crate::config::CtlConfig;
use crate::dataplane::armed::arm_and_collect;
use crate::dataplane::ctl_link::{Listing, QuerySender, WorkerQuery};
use crate::dataplane::drop_tap::DropCaptureSender;
use crate::dataplane::port_layout::Link;
use crate::dataplane::published::Published;
use crate::dataplane::trace_link::{TraceRecord, TraceRequest, TraceSender};
use crate::telemetry::port_watch::PortWatch;
use crate::telemetry::protocol::protocol_name;

/// How long a request may take to arrive, and the workers to answer it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);
/// A request is one JSON line; `config apply` sends a whole config file (category lists
/// are files of their own, read by the gateway).
const MAX_REQUEST_BYTES: u64 = 8 * 1024 * 1024;
/// How long a config request may take the control thread to answer: a load compiles the
/// whole config, category lists included.
const CONFIG_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// What the ctl thread reads.
pub struct Sources {
    /// One per worker, in worker order.
    pub queries: Vec<QuerySender>,
    /// One per worker, in worker order.
    pub traces: Vec<TraceSender>,
    /// One per worker, in worker order.
    pub drop_captures: Vec<DropCaptureSender>,
    pub workers: Vec<Arc<WorkerCounters>>,
    pub control: Arc<WorkerCounters>,
    /// The interfaces' names, in interface order (they change only with a restart).
    pub interface_names: Vec<String>,
    /// Per interface, its port and VLAN tag (`crate::dataplane::port_layout`).
    pub interface_links: Vec<Link>,
    /// Each port's counters and link, in port order.
    pub ports: Arc<PortWatch>,
    /// What the workers run: the router config and the neighbour view, as published.
    pub router: Arc<Published<RouterConfig>>,
    pub neighbors: Arc<Published<NeighborView>>,
    /// Which config runs and what the latest reloads did.
    pub config: ConfigHistory,
    /// The configs kept whole for rollbacks.
    pub kept_configs: ConfigStore,
    /// Config changes go to the control thread, which answers each.
    pub config_requests: crossbeam_channel::Sender<ConfigRequest>,
    /// The EAL's file prefix, for DPDK's capture tools, when `eal.pdump` is on.
    pub pdump_file_prefix: Option<String>,
    /// What the uplinks' health checks found.
    pub uplink_health: Arc<crate::control::uplink_health::UplinkHealth>,
    /// The mappings hosts hold by PCP and NAT-PMP (none while `[port_mapping]` is off).
    pub port_mapping: Option<Arc<crate::control::port_mapping::PortMappingStatus>>,
}

/// The ctl socket could not be set up, or a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum CtlServerError {
    #[error("ctl.socket {}", .path.display())]
    Socket {
        path: PathBuf,
        #[source]
        source: Box<CtlServerError>,
    },
    #[error("starting the ctl thread")]
    Thread(#[source] std::io::Error),
    #[error("creating the directory {}", .dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("another gateway answers on it")]
    InUse,
    #[error("removing the stale socket")]
    RemoveStale(#[source] std::io::Error),
    #[error(transparent)]
    Group(#[from] crate::config::host::HostError),
    #[error("giving the socket to group {group}")]
    Chown {
        group: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// The running ctl thread; [`CtlServer::stop`] ends it and removes the socket.
pub struct CtlServer {
    thread: JoinHandle<()>,
    stop: Arc<AtomicBool>,
    path: PathBuf,
}

/// Binds the socket `config` names (none if empty) and starts the thread. A socket file left
/// by a gateway that is gone is replaced; one a live gateway answers on is an error.
pub fn serve(config: &CtlConfig, sources: Sources) -> Result<Option<CtlServer>, CtlServerError> {
    if config.socket.as_os_str().is_empty() {
        return Ok(None);
    }
    let path = config.socket.clone();
    let listener =
        bind(&path, config.group.as_deref()).map_err(|source| CtlServerError::Socket {
            path: path.clone(),
            source: Box::new(source),
        })?;
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("ctl".into())
            .spawn(move || accept_loop(&listener, &sources, &stop))
            .map_err(CtlServerError::Thread)?
    };
    tracing::info!(socket = %path.display(), "ctl socket ready");
    Ok(Some(CtlServer { thread, stop, path }))
}

impl CtlServer {
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the blocking accept, which then sees the flag.
        let _ = UnixStream::connect(&self.path);
        let _ = self.thread.join();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn bind(path: &Path, group: Option<&str>) -> Result<UnixListener, CtlServerError> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CtlServerError::CreateDir {
            dir: dir.to_path_buf(),
            source,
        })?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(CtlServerError::InUse);
        }
        std::fs::remove_file(path).map_err(CtlServerError::RemoveStale)?;
    }
    let listener = UnixListener::bind(path)?;
    let mode = match group {
        Some(name) => {
            let gid = crate::config::host::group_id(name)?;
            std::os::unix::fs::chown(path, None, Some(gid)).map_err(|source| {
                CtlServerError::Chown {
                    group: name.to_string(),
                    source,
                }
            })?;
            0o660
        }
        None => 0o600,
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

fn accept_loop(listener: &UnixListener, sources: &Sources, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match stream {
            Ok(stream) => {
                if let Err(err) = answer(stream, sources) {
                    tracing::debug!("ctl connection: {}", crate::dpdk::ErrorChain(&err));
                }
            }
            Err(err) => tracing::warn!("ctl socket accept: {err}"),
        }
    }
}

fn answer(stream: UnixStream, sources: &Sources) -> Result<(), CtlServerError> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&stream).take(MAX_REQUEST_BYTES)).read_line(&mut line)?;
    let reply = match serde_json::from_str::<Request>(&line) {
        Ok(request) => match handle(&request, sources) {
            Ok(value) => json!({ "ok": value }),
            Err(message) => json!({ "error": message }),
        },
        Err(err) => json!({ "error": format!("not a ctl request: {err}") }),
    };
    let mut writer = std::io::BufWriter::new(&stream);
    serde_json::to_writer(&mut writer, &reply)?;
    writer.write_all(b"\n")?;
    writer.flush()?;
    Ok(())
}

fn handle(request: &Request, sources: &Sources) -> Result<Value, String> {
    match request {
        Request::ShowFlows { filter, limit } => {
            show_flows(&filter.compile()?, (*limit).min(MAX_FLOW_LIMIT), sources)
        }
        Request::ShowDrops => Ok(show_drops(sources)),
        Request::ShowWorkers => Ok(show_workers(sources)),
        Request::ShowInterfaces => Ok(show_interfaces(sources)),
        Request::ShowRoutes => Ok(show_routes(sources)),
        Request::ShowUplinks => Ok(show_uplinks(sources)),
        Request::ShowNeighbors => Ok(show_neighbors(sources)),
        Request::ShowConfig => {
            let mut shown = sources.config.to_json();
            shown["kept"] = sources.kept_configs.to_json();
            Ok(shown)
        }
        Request::ConfigDiff { .. }
        | Request::ConfigApply { .. }
        | Request::ConfigConfirm
        | Request::ConfigRollback { .. }
        | Request::ConfigReload => ask_control(request, sources),
        Request::ClearFlows { filter } => clear_flows(&filter.compile()?, sources),
        Request::Trace {
            filter,
            count,
            timeout_ms,
        } => trace(filter, *count, *timeout_ms, sources),
        Request::ShowNat { host, limit } => show_nat(*host, (*limit).min(MAX_FLOW_LIMIT), sources),
        Request::ShowRules => Ok(show_rules(sources)),
        Request::CaptureTarget { interface } => capture_target(interface, sources),
        Request::CaptureDrops {
            reasons,
            count,
            timeout_ms,
        } => super::drop_capture::capture(
            reasons,
            *count,
            *timeout_ms,
            &sources.drop_captures,
            &sources.interface_names,
        ),
    }
}

/// The rules in force, in order: each one's counter name, action, hits and the Unix second
/// it last decided a first packet (null: never since the gateway started).
fn show_rules(sources: &Sources) -> Value {
    let (router, _) = sources.router.load();
    let firewall = &router.stateful.firewall;
    let names = crate::compile::rule_hits::counter_names(firewall.rules());
    let hits = firewall.hits();
    let rules: Vec<Value> = firewall
        .rules()
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(index, (rule, name))| {
            json!({
                "index": index,
                "name": name,
                "action": rule.action.name(),
                "hits": hits.get(index).map(|hits| hits.total()),
                "last_matched": hits.get(index).and_then(|hits| hits.last_matched()),
            })
        })
        .collect();
    // The zone pairs whose default decided something.
    let pairs: Vec<Value> = firewall
        .pair_hits()
        .iter()
        .filter(|pair| pair.hits.total() > 0)
        .map(|pair| {
            json!({
                "from": &*pair.from.1,
                "to": &*pair.to.1,
                "action": firewall.policy().default_for(pair.from.0, pair.to.0).name(),
                "hits": pair.hits.total(),
                "last_matched": pair.hits.last_matched(),
            })
        })
        .collect();
    // The port forwards, each with what it decided with no rule matching.
    let forward_names = crate::compile::rule_hits::forward_names(&router.stateful.port_forwards);
    let forward_hits = firewall.forward_hits();
    let forwards: Vec<Value> = forward_names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            let hits = forward_hits.get(index);
            json!({
                "forward": name,
                "action": "accept",
                "hits": hits.map(|hits| hits.total()),
                "last_matched": hits.and_then(|hits| hits.last_matched()),
            })
        })
        .collect();
    json!({ "rules": rules, "defaults": pairs, "forwards": forwards })
}

/// Hands a config request to the control thread and waits for its answer.
fn ask_control(request: &Request, sources: &Sources) -> Result<Value, String> {
    if let Request::ConfigApply {
        confirm_secs: Some(secs),
        ..
    } = request
    {
        if !(1..=MAX_CONFIRM_SECS).contains(secs) {
            return Err(format!(
                "confirm: {secs} s is not 1..={MAX_CONFIRM_SECS} seconds"
            ));
        }
    }
    let (reply, answer) = crossbeam_channel::bounded(1);
    sources
        .config_requests
        .send(ConfigRequest {
            request: request.clone(),
            reply,
        })
        .map_err(|_| "the control thread is gone".to_string())?;
    answer
        .recv_timeout(CONFIG_ANSWER_TIMEOUT)
        .map_err(|err| match err {
            crossbeam_channel::RecvTimeoutError::Timeout => format!(
                "no verdict within {CONFIG_ANSWER_TIMEOUT:?}: the load goes on and applies if \
                 valid; see gateway ctl show config"
            ),
            crossbeam_channel::RecvTimeoutError::Disconnected => {
                "the config-load thread is gone: nothing was loaded".to_string()
            }
        })?
}

/// Sends every worker the query `make` builds around an answer channel, then waits (at most
/// [`ANSWER_TIMEOUT`] in all) for every answer, in worker order. A worker still busy with an
/// earlier query, or one that does not answer in time, fails the request by name.
fn ask_every_worker<T>(
    sources: &Sources,
    make: impl Fn(crossbeam_channel::Sender<T>) -> WorkerQuery,
) -> Result<Vec<T>, String> {
    let mut pending = Vec::new();
    for (worker, queries) in sources.queries.iter().enumerate() {
        let (answer, answered) = crossbeam_channel::bounded(1);
        queries
            .try_send(make(answer))
            .map_err(|_| format!("worker {worker} is still busy with an earlier query"))?;
        pending.push(answered);
    }
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    pending
        .iter()
        .enumerate()
        .map(|(worker, answered)| {
            answered
                .recv_deadline(deadline)
                .map_err(|_| format!("worker {worker} did not answer within {ANSWER_TIMEOUT:?}"))
        })
        .collect()
}

fn show_flows(filter: &FlowFilter, limit: usize, sources: &Sources) -> Result<Value, String> {
    let listings = ask_every_worker(sources, |answer| WorkerQuery::ListFlows {
        filter: *filter,
        out: Vec::with_capacity(limit),
        answer,
    })?;
    let mut flows = Vec::new();
    let mut matched = 0;
    for (worker, listing) in listings.iter().enumerate() {
        matched += listing.matched;
        flows.extend(listing.items.iter().map(|flow| flow_json(worker, flow)));
    }
    flows.truncate(limit);
    Ok(json!({ "matched": matched, "listed": flows.len(), "flows": flows }))
}

fn key_json(key: &pipeline::flow::FlowKey) -> Value {
    json!({
        "src": key.src.to_string(),
        "src_port": key.src_port,
        "dst": key.dst.to_string(),
        "dst_port": key.dst_port,
    })
}

fn flow_json(worker: usize, flow: &FlowRecord) -> Value {
    json!({
        "worker": worker,
        "protocol": protocol_name(flow.original.protocol),
        "state": flow.tcp_state.map(tcp_state_name),
        "original": key_json(&flow.original),
        "reply": key_json(&flow.reply),
        "expires_in_seconds": flow.expires_in_ns / 1_000_000_000,
        "replied": flow.replied,
        "assured": flow.assured,
        "forwarded": flow.forwarded,
    })
}

fn clear_flows(filter: &FlowFilter, sources: &Sources) -> Result<Value, String> {
    let cleared: usize = ask_every_worker(sources, |answer| WorkerQuery::ClearFlows {
        filter: *filter,
        answer,
    })?
    .into_iter()
    .sum();
    Ok(json!({ "cleared": cleared }))
}

/// Workers by number, then the control thread as "control".
fn labelled(sources: &Sources) -> impl Iterator<Item = (String, &WorkerCounters)> {
    let workers = sources
        .workers
        .iter()
        .enumerate()
        .map(|(i, counters)| (i.to_string(), &**counters));
    workers.chain(std::iter::once(("control".to_string(), &*sources.control)))
}

fn show_drops(sources: &Sources) -> Value {
    let mut drops = Vec::new();
    for (worker, counters) in labelled(sources) {
        for &reason in DropReason::ALL {
            let packets = counters.dropped(reason);
            if packets > 0 {
                drops.push(
                    json!({ "worker": worker, "reason": reason.label(), "packets": packets }),
                );
            }
        }
    }
    json!({ "drops": drops })
}

fn show_workers(sources: &Sources) -> Value {
    let workers: Vec<Value> = sources
        .workers
        .iter()
        .enumerate()
        .map(|(worker, c)| {
            let (busy, idle) = (c.busy_cycles.get(), c.idle_cycles.get());
            json!({
                "worker": worker,
                "rx_packets": c.rx_packets.get(),
                "tx_packets": c.transmitted.get(),
                "fast_path_packets": c.fast_path.get(),
                "dropped_packets": c.dropped_total(),
                "handoffs_sent": c.handoffs_sent.get(),
                "handoffs_received": c.handoffs_received.get(),
                "busy_share": if busy + idle == 0 { 0.0 } else { busy as f64 / (busy + idle) as f64 },
                "flows": c.conntrack_entries.get(),
                "flow_capacity": c.conntrack_capacity.get(),
                "nat_ports_in_use": c.nat_ports_in_use.get(),
            })
        })
        .collect();
    json!({ "workers": workers })
}

fn interface_name(sources: &Sources, port: u16) -> String {
    sources
        .interface_names
        .get(usize::from(port))
        .cloned()
        .unwrap_or_else(|| port.to_string())
}

/// A zone as the operator knows it: "local" (the gateway), or the interfaces in it ("wan",
/// "lan+dmz"), which reload with the config as the zone names do.
fn zone_label(sources: &Sources, zones: &[ZoneId], zone: ZoneId) -> String {
    if zone == ZoneId::LOCAL {
        return "local".into();
    }
    let members: Vec<String> = (0..zones.len())
        .filter(|&port| zones[port] == zone)
        .map(|port| interface_name(sources, port as u16))
        .collect();
    match members.is_empty() {
        true => format!("zone {}", zone.0),
        false => members.join("+"),
    }
}

/// Where `interface`'s packets can be captured: the DPDK port (id and name) and VLAN tag.
fn capture_target(interface: &str, sources: &Sources) -> Result<Value, String> {
    let Some(prefix) = &sources.pdump_file_prefix else {
        return Err("capture needs eal.pdump = true (and a restart): rte_pdump is off".into());
    };
    let index = sources
        .interface_names
        .iter()
        .position(|name| name == interface)
        .ok_or_else(|| {
            format!(
                "no interface {interface:?} (there are {})",
                sources.interface_names.join(", ")
            )
        })?;
    let link = sources
        .interface_links
        .get(index)
        .ok_or_else(|| format!("interface {interface:?} has no port"))?;
    let port = sources
        .ports
        .ports
        .get(usize::from(link.port))
        .ok_or_else(|| format!("interface {interface:?}'s port is not watched"))?;
    Ok(json!({
        "interface": interface,
        "file_prefix": prefix,
        "port_id": port.port_id(),
        "port": port.name,
        "vlan": link.vlan,
    }))
}

fn show_interfaces(sources: &Sources) -> Value {
    let (router, _) = sources.router.load();
    let interfaces: Vec<Value> = router
        .interfaces
        .iter()
        .enumerate()
        .map(|(port, interface)| {
            let link = sources.interface_links.get(port).copied();
            let watched = link.and_then(|link| sources.ports.ports.get(usize::from(link.port)));
            let (link_up, speed_mbps) = watched.map_or((false, 0), |port| port.link());
            // A VLAN subinterface shares its port's link; the port's counters are not its own.
            let vlan = link.and_then(|link| link.vlan);
            let (stats, rates) = watched
                .filter(|_| vlan.is_none())
                .map(|port| port.poll(|totals| (totals.stats, totals.rates)))
                .unzip();
            // Its IPv6 addresses, link-local first: the configured ones, then what the kernel
            // gave its twin (SLAAC, a delegated prefix).
            let ipv6: Option<Vec<String>> = router.ipv6(port as u16).map(|v6| {
                std::iter::once(format!("{}/64", v6.link_local))
                    .chain(v6.addresses.iter().map(|(addr, len)| format!("{addr}/{len}")))
                    .collect()
            });
            json!({
                "name": interface_name(sources, port as u16),
                "address": interface.has_address().then(|| format!("{}/{}", interface.addr, interface.prefix_len)),
                "ipv6_addresses": ipv6,
                "mac": interface.mac.to_string(),
                "mtu": interface.mtu,
                "vlan": vlan,
                "link_up": link_up,
                "speed_mbps": speed_mbps,
                "rx_packets": stats.as_ref().map(|s| s.rx_packets),
                "tx_packets": stats.as_ref().map(|s| s.tx_packets),
                "rx_bytes": stats.as_ref().map(|s| s.rx_bytes),
                "tx_bytes": stats.as_ref().map(|s| s.tx_bytes),
                "rx_missed": stats.as_ref().map(|s| s.rx_missed),
                "rx_queue_drops": stats.as_ref().map(|s| s.rx_queue_drops.iter().sum::<u64>()),
                "rates": rates.map(|r| json!({
                    "rx_packets_per_sec": r.rx_packets_per_sec.round(),
                    "tx_packets_per_sec": r.tx_packets_per_sec.round(),
                    "rx_bits_per_sec": r.rx_bits_per_sec.round(),
                    "tx_bits_per_sec": r.tx_bits_per_sec.round(),
                    "over_secs": r.over_secs,
                })),
                "rx_errors": stats.as_ref().map(|s| s.rx_errors),
                "tx_errors": stats.as_ref().map(|s| s.tx_errors),
            })
        })
        .collect();
    json!({ "interfaces": interfaces })
}

fn show_routes(sources: &Sources) -> Value {
    let (router, _) = sources.router.load();
    let entry = |prefix: String, port: u16, via: Option<String>| {
        json!({
            "prefix": prefix,
            "interface": interface_name(sources, port),
            "via": via,
        })
    };
    let routes = router.routes.routes().iter().map(|route| {
        let via = route.next_hop.gateway.map(|gateway| gateway.to_string());
        entry(
            format!("{}/{}", route.prefix, route.len),
            route.next_hop.port,
            via,
        )
    });
    // IPv6's after IPv4's: connected, static, then the kernel's (a default route from the
    // ISP's advertisement).
    let routes6 = router.routes6.routes().iter().map(|route| {
        let via = route.next_hop.gateway.map(|gateway| gateway.to_string());
        entry(
            format!("{}/{}", route.prefix, route.len),
            route.next_hop.port,
            via,
        )
    });
    let routes: Vec<Value> = routes.chain(routes6).collect();
    json!({ "routes": routes })
}

/// Each uplink as the workers run it (next hop, share, whether it takes new flows) with
/// what its health checks found. The state says why an uplink takes no new flows:
/// "no carrier" (its port's link is down), "failed" (its checks), "unaddressed" (no lease or
/// session), "no next hop".
fn show_uplinks(sources: &Sources) -> Value {
    let (router, _) = sources.router.load();
    let uplinks: Vec<Value> = (router.uplinks.uplinks().iter())
        .zip(&sources.uplink_health.uplinks)
        .map(|(uplink, health)| {
            let interface = &router.interfaces[usize::from(uplink.port)];
            let carrier = (sources.interface_links.get(usize::from(uplink.port)))
                .and_then(|link| sources.ports.ports.get(usize::from(link.port)))
                .is_none_or(|port| port.link().0);
            let state = if !carrier {
                "no carrier"
            } else if health.failed() {
                "failed"
            } else if !interface.has_address() {
                "unaddressed"
            } else if uplink.gateway.is_none() {
                "no next hop"
            } else {
                "up"
            };
            let checks = health.checked.then(|| {
                json!({
                    "answered": health.answered(),
                    "lost": health.lost(),
                    "last_rtt_ms": health.last_rtt().map(|rtt| rtt.as_secs_f64() * 1e3),
                    "failed_rounds_in_a_row": health.failed_rounds(),
                    "passed_rounds_in_a_row": health.passed_rounds(),
                    "changes": health.changes(),
                })
            });
            json!({
                "interface": interface_name(sources, uplink.port),
                "address": interface.has_address().then(|| interface.addr.to_string()),
                "via": uplink.gateway.map(|gateway| gateway.to_string()),
                "weight": uplink.weight,
                "priority": uplink.priority,
                "state": state,
                "usable": uplink.up && uplink.gateway.is_some(),
                "health": checks,
            })
        })
        .collect();
    json!({ "uplinks": uplinks })
}

fn show_neighbors(sources: &Sources) -> Value {
    let (router, _) = sources.router.load();
    let (view, _) = sources.neighbors.load();
    let mut neighbors: Vec<(std::net::Ipv4Addr, String)> =
        view.iter().map(|(ip, mac)| (ip, mac.to_string())).collect();
    neighbors.sort();
    let neighbors: Vec<Value> = neighbors
        .into_iter()
        .map(|(ip, mac)| {
            let interface = router
                .interfaces
                .iter()
                .position(|interface| interface.has_address() && interface.contains(ip))
                .map(|port| interface_name(sources, port as u16));
            json!({ "address": ip.to_string(), "mac": mac, "interface": interface })
        })
        .collect();
    // IPv6 neighbours: a link-local one carries its interface in its address (see
    // `ipv6_local::scoped`), another is on the interface whose prefix holds it.
    let mut neighbors6: Vec<(std::net::Ipv6Addr, String)> = view
        .iter6()
        .map(|(ip, mac)| (ip, mac.to_string()))
        .collect();
    neighbors6.sort();
    let neighbors6 = neighbors6.into_iter().map(|(scoped, mac)| {
        let found = pipeline::pipeline::local::ipv6::neighbor_port(&router, scoped);
        let ip = found.map_or(
            pipeline::pipeline::local::ipv6::unscoped(scoped),
            |(_, ip)| ip,
        );
        let interface = found.map(|(port, _)| interface_name(sources, port));
        json!({ "address": ip.to_string(), "mac": mac, "interface": interface })
    });
    let neighbors: Vec<Value> = neighbors.into_iter().chain(neighbors6).collect();
    json!({ "neighbors": neighbors })
}

/// Every worker's bindings of `host` (or all), the first `limit` listed, and per internal host
/// how many each holds, the most first: who holds the NAT ports.
fn show_nat(
    host: Option<std::net::Ipv4Addr>,
    limit: usize,
    sources: &Sources,
) -> Result<Value, String> {
    let listings = ask_every_worker(sources, |answer| WorkerQuery::ListNat {
        host,
        out: Vec::with_capacity(limit),
        answer,
    })?;
    let mut bindings = Vec::new();
    let mut per_host = std::collections::BTreeMap::<std::net::Ipv4Addr, u64>::new();
    let mut matched = 0;
    for (worker, listing) in listings.iter().enumerate() {
        let Listing {
            items,
            matched: worker_matched,
        } = listing;
        matched += worker_matched;
        for binding in items {
            *per_host.entry(binding.internal.0).or_default() += 1;
            bindings.push(json!({
                "worker": worker,
                "protocol": protocol_name(binding.protocol),
                "inside": format!("{}:{}", binding.internal.0, binding.internal.1),
                "outside": format!("{}:{}", binding.external.0, binding.external.1),
                "flows": binding.flows,
            }));
        }
    }
    bindings.truncate(limit);
    let mut hosts: Vec<(std::net::Ipv4Addr, u64)> = per_host.into_iter().collect();
    hosts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let hosts: Vec<Value> = hosts
        .into_iter()
        .map(|(host, count)| json!({ "host": host.to_string(), "bindings": count }))
        .collect();
    let in_use: u64 = sources
        .workers
        .iter()
        .map(|c| c.nat_ports_in_use.get())
        .sum();
    let available: u64 = sources
        .workers
        .iter()
        .map(|c| c.nat_ports_available.get())
        .sum();
    Ok(json!({
        "matched": matched,
        "listed": bindings.len(),
        "ports_in_use": in_use,
        "ports_available": available,
        "hosts": hosts,
        "bindings": bindings,
        "port_mappings": port_mappings(host, sources),
    }))
}

/// The mappings hosts asked for (of `host`, or all), each with its origin and the seconds
/// left of its lifetime.
fn port_mappings(host: Option<std::net::Ipv4Addr>, sources: &Sources) -> Vec<Value> {
    let Some(status) = &sources.port_mapping else {
        return Vec::new();
    };
    let now = crate::control::port_mapping::unix_now();
    let mappings = status
        .mappings
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    mappings
        .iter()
        .filter(|mapping| host.is_none_or(|host| mapping.internal == host))
        .map(|mapping| {
            let mut entry = crate::control::port_mapping::mapping_json(mapping);
            entry["expires_in_s"] = json!(mapping.expires_at.saturating_sub(now));
            entry
        })
        .collect()
}

fn trace(
    filter: &FilterSpec,
    count: usize,
    timeout_ms: u64,
    sources: &Sources,
) -> Result<Value, String> {
    let filter = filter.compile()?;
    if filter.tcp_state.is_some() {
        return Err(
            "state: a trace follows packets, not flows: filter by host, port or protocol".into(),
        );
    }
    let count = count.clamp(1, MAX_TRACE_PACKETS);
    let timeout = Duration::from_millis(timeout_ms.min(MAX_TRACE_TIMEOUT_MS));
    let make = |arming| TraceRequest { filter, arming };
    let records = arm_and_collect(&sources.traces, count, timeout, "tracing", make)?;
    let traced: Vec<Value> = records
        .iter()
        .map(|record| record_json(record, sources))
        .collect();
    Ok(json!({ "asked": count, "traced": traced.len(), "packets": traced }))
}

fn key_json_with_protocol(key: &pipeline::flow::FlowKey) -> Value {
    let mut value = key_json(key);
    value["protocol"] = json!(protocol_name(key.protocol));
    value
}

fn record_json(record: &TraceRecord, sources: &Sources) -> Value {
    use pipeline::pipeline::operator::explain::FlowMatch;
    use pipeline::Verdict;
    let (router, _) = sources.router.load();
    let flow = match record.explanation.flow {
        None => json!(null),
        Some(FlowMatch::Existing {
            direction,
            tcp_state,
        }) => json!({
            "match": "existing",
            "direction": format!("{direction:?}").to_lowercase(),
            "state": tcp_state.map(tcp_state_name),
        }),
        Some(FlowMatch::NewForwarded) => json!({ "match": "new", "port_forward": true }),
        Some(FlowMatch::New { firewall }) => json!({
            "match": "new",
            "port_forward": false,
            "firewall": firewall.map(|decision| json!({
                "action": decision.action.name(),
                "rule": decision.rule.map(|i| router.stateful.firewall.rule(i).name.clone()),
                "from_zone": decision.from.0,
                "to_zone": decision.to.0,
                "from": zone_label(sources, &router.stateful.zones, decision.from),
                "to": zone_label(sources, &router.stateful.zones, decision.to),
            })),
        }),
    };
    let verdict = match record.verdict {
        Verdict::Transmit { port } => {
            json!({ "kind": "transmit", "interface": interface_name(sources, port) })
        }
        Verdict::Fragment { port } => {
            json!({ "kind": "fragment", "interface": interface_name(sources, port) })
        }
        Verdict::Drop(reason) => json!({ "kind": "drop", "reason": reason.label() }),
        Verdict::Control(work) => json!({ "kind": "control", "work": format!("{work:?}") }),
        Verdict::Handoff { worker } => json!({ "kind": "handoff", "worker": worker }),
        Verdict::Punt { port } => {
            json!({ "kind": "punt", "interface": interface_name(sources, port) })
        }
    };
    json!({
        "worker": record.worker,
        "ingress": interface_name(sources, record.ingress.port),
        "handed_off": record.ingress.handed_off,
        "length": record.length,
        "received": record.explanation.key.as_ref().map(key_json_with_protocol),
        "flow": flow,
        "verdict": verdict,
        "sent_as": record.sent_as.as_ref().map(key_json_with_protocol),
        "next_hop_mac": record.next_hop_mac.map(|mac| pipeline::wire::EthernetAddress(mac).to_string()),
    })
}

//! `gateway ctl`: the operator's view of a running gateway over a Unix socket (`[ctl]`).
//!
//! One request per connection, one JSON line each way: the client (`client`) sends a
//! [`Request`], the server thread in the gateway (`server`) answers `{"ok": ...}` or
//! `{"error": "..."}`. Counters are read from the workers' atomics; flows are walked by the
//! workers themselves, a slice per poll loop (`crate::dataplane::ctl_link`).

pub mod capture;
pub mod client;
pub mod config_apply;
pub mod drop_capture;
pub mod server;

use std::net::Ipv4Addr;
use std::path::PathBuf;

use pipeline::pipeline::operator::flow_listing::FlowFilter;
use pipeline::state::conntrack::TcpState;
use serde::{Deserialize, Serialize};

use crate::telemetry::protocol::{protocol_number, PROTOCOL_TCP};

/// Flows listed per request unless `--limit` says otherwise.
pub const DEFAULT_FLOW_LIMIT: usize = 1000;
/// The most flows one request may list (the rest are counted): about 10 MB of JSON.
pub const MAX_FLOW_LIMIT: usize = 100_000;
/// The most packets one trace follows, and the longest it waits for them.
pub const MAX_TRACE_PACKETS: usize = 1000;
pub const MAX_TRACE_TIMEOUT_MS: u64 = 60_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Flows matching the filter, at most `limit` of them (every match is counted).
    ShowFlows { filter: FilterSpec, limit: usize },
    /// Dropped packets by reason and worker (the non-zero ones).
    ShowDrops,
    /// Each worker's packets, busy share, handoffs and flow table fill.
    ShowWorkers,
    /// Each interface: address, MAC, MTU, link and the port's counters.
    ShowInterfaces,
    /// The routing table the workers use (connected, static and kernel routes).
    ShowRoutes,
    /// The uplinks: next hop, weight, priority, whether each takes new flows and why, and
    /// what its health checks found.
    ShowUplinks,
    /// The resolved neighbours (ARP) the workers send to.
    ShowNeighbors,
    /// The running config's version and digest, and what the latest reloads changed.
    ShowConfig,
    /// The firewall rules in force, in order, with the first packets each decided.
    ShowRules,
    /// End the flows matching the filter, on every worker.
    ClearFlows { filter: FilterSpec },
    /// The next `count` packets matching the filter (host, port, protocol), explained and
    /// followed through the pipeline, waiting at most `timeout_ms`.
    Trace {
        filter: FilterSpec,
        count: usize,
        timeout_ms: u64,
    },
    /// NAT bindings (of one internal host, or all), at most `limit`, and the bindings each
    /// host holds among those listed.
    ShowNat {
        host: Option<Ipv4Addr>,
        limit: usize,
    },
    /// What a reload of this text (the file at `path`) would change, and what would wait
    /// for a restart; nothing is applied.
    ConfigDiff { path: PathBuf, text: String },
    /// Load this text (the file at `path`) as the running config, validated whole, or
    /// nothing; with `confirm_secs`, it rolls back unless `ConfigConfirm` comes in time.
    ConfigApply {
        path: PathBuf,
        text: String,
        confirm_secs: Option<u64>,
    },
    /// Keep the config an apply with `confirm_secs` put in force.
    ConfigConfirm,
    /// Back to the config kept `steps` before the running one.
    ConfigRollback { steps: usize },
    /// Reload the config file and answer whether it applied (systemd's `ExecReload`).
    ConfigReload,
    /// What `gateway ctl capture` needs to capture `interface` with `dpdk-dumpcap`: the
    /// DPDK port it is on, its VLAN tag, and the EAL's file prefix (`eal.pdump` on).
    CaptureTarget { interface: String },
    /// The next `count` packets the workers drop for one of `reasons` (the `reason` labels
    /// of `show drops`), as they arrived, waiting at most `timeout_ms`.
    CaptureDrops {
        reasons: Vec<String>,
        count: usize,
        timeout_ms: u64,
    },
}

/// The longest `ctl config apply --confirm` may wait for its confirmation: a day.
pub const MAX_CONFIRM_SECS: u64 = 86_400;

/// A config request for the control thread, and where its answer goes.
#[derive(Debug)]
pub struct ConfigRequest {
    pub request: Request,
    pub reply: crate::reload::Reply,
}

/// A flow filter as the operator writes it; [`FilterSpec::compile`] checks it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterSpec {
    pub host: Option<Ipv4Addr>,
    pub port: Option<u16>,
    /// `tcp`, `udp`, `icmp` or a protocol number.
    pub protocol: Option<String>,
    /// A TCP state, as [`tcp_state_name`] spells them.
    pub state: Option<String>,
}

impl FilterSpec {
    pub fn is_empty(&self) -> bool {
        *self == FilterSpec::default()
    }

    pub fn compile(&self) -> Result<FlowFilter, String> {
        let protocol = match self.protocol.as_deref() {
            None => None,
            Some(name) => Some(protocol_number(name).ok_or_else(|| {
                format!("protocol: {name:?} is not tcp, udp, icmp or a number 0-255")
            })?),
        };
        let tcp_state = match self.state.as_deref() {
            None => None,
            Some(name) => Some(tcp_state_named(name).ok_or_else(|| {
                format!(
                    "state: {name:?} is not one of {}",
                    TCP_STATES.map(tcp_state_name).join(", ")
                )
            })?),
        };
        if tcp_state.is_some() && protocol.is_some_and(|p| p != PROTOCOL_TCP) {
            return Err("state: only TCP flows have a state; drop --protocol or --state".into());
        }
        Ok(FlowFilter {
            host: self.host,
            port: self.port,
            protocol,
            tcp_state,
        })
    }
}

const TCP_STATES: [TcpState; 8] = [
    TcpState::SynSent,
    TcpState::SynReceived,
    TcpState::Established,
    TcpState::FinWait,
    TcpState::CloseWait,
    TcpState::LastAck,
    TcpState::TimeWait,
    TcpState::Closed,
];

/// The state as `ctl` prints and filters it (Linux conntrack's names, in lower case).
pub fn tcp_state_name(state: TcpState) -> &'static str {
    match state {
        TcpState::SynSent => "syn_sent",
        TcpState::SynReceived => "syn_recv",
        TcpState::Established => "established",
        TcpState::FinWait => "fin_wait",
        TcpState::CloseWait => "close_wait",
        TcpState::LastAck => "last_ack",
        TcpState::TimeWait => "time_wait",
        TcpState::Closed => "close",
    }
}

fn tcp_state_named(name: &str) -> Option<TcpState> {
    TCP_STATES
        .into_iter()
        .find(|&state| tcp_state_name(state) == name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_and_bad_fields_are_named() {
        let spec = FilterSpec {
            host: Some(Ipv4Addr::new(192, 168, 10, 2)),
            protocol: Some("TCP".into()),
            state: Some("established".into()),
            ..FilterSpec::default()
        };
        let filter = spec.compile().unwrap();
        assert_eq!(filter.protocol, Some(6));
        assert_eq!(filter.tcp_state, Some(TcpState::Established));
        for state in TCP_STATES {
            assert_eq!(tcp_state_named(tcp_state_name(state)), Some(state));
        }
        let bad_protocol = FilterSpec {
            protocol: Some("sctp".into()),
            ..FilterSpec::default()
        };
        assert!(bad_protocol.compile().unwrap_err().starts_with("protocol:"));
        let bad_state = FilterSpec {
            state: Some("open".into()),
            ..FilterSpec::default()
        };
        let err = bad_state.compile().unwrap_err();
        assert!(
            err.starts_with("state:") && err.contains("time_wait"),
            "{err}"
        );
        let udp_state = FilterSpec {
            protocol: Some("udp".into()),
            state: Some("established".into()),
            ..FilterSpec::default()
        };
        assert!(udp_state.compile().is_err());
    }

    #[test]
    fn requests_round_trip_as_json() {
        let request = Request::ShowFlows {
            filter: FilterSpec {
                port: Some(5201),
                ..FilterSpec::default()
            },
            limit: 10,
        };
        let line = serde_json::to_string(&request).unwrap();
        assert_eq!(serde_json::from_str::<Request>(&line).unwrap(), request);
        assert_eq!(
            serde_json::from_str::<Request>("\"show_drops\"").unwrap(),
            Request::ShowDrops
        );
    }
}

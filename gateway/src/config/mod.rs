//! The gateway's configuration: one TOML file, serde-typed, with `GATEWAY__...` environment
//! overrides (`GATEWAY__EAL__MEMORY_MB=1024`). `validate` names the field that is wrong.

mod addresses;
mod features;
mod firewall;
mod ha;
pub mod history;
pub mod host;
mod interfaces;
mod nat;
mod parse;
mod platform;
mod port_mapping;
mod protocols;
pub mod store;
pub mod twins;
mod uplinks;
mod validate;
pub mod web;

pub use addresses::*;
pub use features::*;
pub use firewall::*;
pub use ha::*;
pub use interfaces::*;
pub use nat::*;
pub use parse::*;
pub use platform::*;
pub use port_mapping::*;
pub use protocols::*;
pub use uplinks::*;
pub(crate) use validate::*;

use std::collections::HashSet;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    #[serde(default)]
    pub eal: EalConfig,
    #[serde(default)]
    pub mempool: MempoolConfig,
    #[serde(default)]
    pub workers: WorkersConfig,
    pub interfaces: Vec<InterfaceConfig>,
    #[serde(default)]
    pub routes: Vec<RouteConfig>,
    /// Static IPv6 routes (`[[ipv6_routes]]`), beside the connected prefixes of the
    /// interfaces' `[interfaces.ipv6]` tables. Compiled, not used for forwarding yet.
    #[serde(default)]
    pub ipv6_routes: Vec<Ipv6RouteConfig>,
    #[serde(default)]
    pub icmp: IcmpConfig,
    #[serde(default)]
    pub neighbors: NeighborsConfig,
    #[serde(default)]
    pub conntrack: ConntrackConfig,
    #[serde(default)]
    pub nat: NatConfig,
    /// Several masqueraded uplinks (multi-WAN), with their health checks.
    #[serde(default)]
    pub uplinks: Vec<UplinkConfig>,
    /// How new flows share the uplinks, and the policy rules that keep flows on one.
    #[serde(default)]
    pub routing: RoutingConfig,
    #[serde(default)]
    pub firewall: FirewallConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub traffic_meter: TrafficMeterConfig,
    #[serde(default)]
    pub qos: QosSettings,
    #[serde(default)]
    pub keyword_block: KeywordBlockConfig,
    #[serde(default)]
    pub parental_control: ParentalConfig,
    /// The interfaces' twins in the kernel and the punt budget (`crate::control::twins`).
    #[serde(default)]
    pub kernel_twins: twins::KernelTwinsConfig,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub ctl: CtlConfig,
    #[serde(default)]
    pub reload: ReloadConfig,
    /// The other box of an active/standby pair: session sync.
    #[serde(default)]
    pub ha: HaConfig,
    /// PCP and NAT-PMP for the hosts of some zones; off by default.
    #[serde(default)]
    pub port_mapping: PortMappingConfig,
}

/// How a changed config reaches the running gateway (docs/operations.md, Reload).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadConfig {
    /// Reload when the file is saved (and quiet for half a second). Off: only SIGHUP
    /// (`systemctl reload`) and `gateway ctl config reload | apply` change what runs.
    pub watch: bool,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig { watch: true }
    }
}

/// The operator's socket for `gateway ctl` (`crate::ctl`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CtlConfig {
    /// The Unix socket `gateway ctl` talks to; its directory is created if missing. Empty:
    /// no socket.
    pub socket: PathBuf,
    /// A group whose members may use the socket too (mode 0660, owned by that group);
    /// without one only root may (mode 0600).
    pub group: Option<String>,
}

impl Default for CtlConfig {
    fn default() -> Self {
        CtlConfig {
            socket: PathBuf::from(DEFAULT_CTL_SOCKET),
            group: None,
        }
    }
}

/// Where `gateway run` listens and `gateway ctl` connects unless told otherwise.
pub const DEFAULT_CTL_SOCKET: &str = "/run/gateway/ctl.sock";

/// Where the gateway keeps what outlives a restart: the conntrack and NAT snapshot
/// (`crate::dataplane::flow_snapshot`), written at a normal stop and read back at start.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// An absolute path; created at stop if missing.
    pub directory: PathBuf,
    /// Save the flows at stop and restore them at start. Off: every restart starts empty.
    pub snapshot: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            directory: PathBuf::from("/var/lib/gateway"),
            snapshot: true,
        }
    }
}

/// The `rule` label of what the rules past `metrics.rule_series` decided, summed: no rule
/// may be named so.
pub const OTHER_RULES: &str = "(other rules)";

/// The metrics' default port, from Prometheus's exporter range.
pub const DEFAULT_METRICS_PORT: u16 = 9469;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where Prometheus scrapes `/metrics`. Loopback by default: expose it deliberately.
    /// Port 9469, not node_exporter's 9100, so the two can run on one host.
    pub listen: SocketAddr,
    /// A Prometheus exporter-toolkit web-config file (YAML): TLS and basic auth for the
    /// endpoint (`crate::config::web`). None: plain HTTP, no auth.
    pub web_config: Option<PathBuf>,
    /// How many firewall rules, in rule order, have series of their own in the rule-hit
    /// metrics; the rest are summed, per action, under `rule="(other rules)"`: a list of
    /// many thousand rules cannot swell every scrape.
    pub rule_series: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)),
            web_config: None,
            rule_series: 1000,
        }
    }
}

/// A config that cannot be used, with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The cause is in the message and not a `source`: `{:#}` would print it twice.
    #[error("{path}: {cause}")]
    Load {
        path: String,
        cause: config::ConfigError,
    },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

impl GatewayConfig {
    /// Zone names in first-seen order; an interface without one is its own zone.
    /// Whether `zone` holds a masqueraded interface: an outside zone, which by default
    /// reaches neither itself nor `local` (an inside one reaches both).
    pub fn is_outside_zone(&self, zone: &str) -> bool {
        self.interfaces.iter().any(|iface| {
            iface.zone.as_deref().unwrap_or(&iface.name) == zone
                && self.nat.masquerade.contains(&iface.name)
        })
    }

    pub fn zone_names(&self) -> Vec<String> {
        let mut zones: Vec<String> = Vec::new();
        for iface in &self.interfaces {
            let zone = iface.zone.clone().unwrap_or_else(|| iface.name.clone());
            if !zones.contains(&zone) {
                zones.push(zone);
            }
        }
        zones
    }

    pub fn interface_for(&self, ip: Ipv4Addr) -> Option<usize> {
        self.interfaces
            .iter()
            .position(|iface| iface.address.cidr().is_some_and(|cidr| cidr.contains(ip)))
    }
}

/// Bytes from hex ("6d5a6d5a..."), ignoring colons and spaces.
pub fn parse_hex(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = text.bytes().filter(|b| !matches!(b, b':' | b' ')).collect();
    if digits.is_empty() || !digits.len().is_multiple_of(2) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// The DPDK device name in a device string: the part before the first comma.
pub fn device_name(device: &str) -> &str {
    device.split(',').next().unwrap_or(device).trim()
}

/// PCI addresses go to the EAL's allow list; everything else is a vdev.
pub fn is_pci_address(device: &str) -> bool {
    let name = device_name(device);
    let parts: Vec<&str> = name.split([':', '.']).collect();
    matches!(parts.len(), 3 | 4)
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests;

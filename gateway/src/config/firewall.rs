//! `[firewall]`: zones' policies, rules, pinholes and the firewall log.

use super::*;
use pipeline::verdict::ReasonSet;
use pipeline::DropReason;

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RuleProtocol {
    Tcp,
    Udp,
    Icmp,
    /// VRRP (IP protocol 112): keepalived's adverts between the twins of an HA pair.
    Vrrp,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FirewallAction {
    Accept,
    Drop,
    Reject,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct FirewallConfig {
    /// Defaults per zone pair. Pairs not listed: traffic from a masqueraded (outside) zone
    /// is dropped, anything else is accepted. "local" is the gateway itself.
    pub policy: Vec<PolicyConfig>,
    /// Checked in order when a flow starts; the first match decides.
    pub rules: Vec<RuleConfig>,
    /// After a reload, check established flows against the new rules once and drop those
    /// now denied. Off: new rules apply to new flows only.
    pub recheck_established: bool,
    /// IPv6 services on inside hosts that flows from an interface may open, whatever the
    /// zone policy says: the IPv6 form of a port forward (there is no NAT66).
    pub pinholes: Vec<PinholeConfig>,
    /// Where the decisions of rules, forwards and pairs marked `log = true` go
    /// (`crate::telemetry::firewall_log`).
    pub log: FirewallLogConfig,
}

/// `[firewall.log]`: the decisions of rules (port forwards, zone pairs) marked `log = true`,
/// one RFC 5424 syslog message and/or one JSON line each, within a budget per worker.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FirewallLogConfig {
    /// Send each decision as one UDP datagram (RFC 5426) to this syslog receiver.
    pub syslog_udp: Option<SocketAddr>,
    /// Send each decision as one datagram to this Unix socket (`/dev/log`: the host's syslog).
    pub syslog_unix: Option<PathBuf>,
    /// Append each decision to this file as one JSON object per line (an absolute path),
    /// written by the log's thread.
    pub json_file: Option<PathBuf>,
    /// The syslog facility: 16 (local0) to 23 (local7), or any of 0-23.
    pub facility: u8,
    /// Decisions each worker may log per second, and at once: a flood of logged drops costs
    /// a worker no more; the rest are counted lost.
    pub per_sec: u32,
    pub burst: u32,
    /// Decisions each worker may hold between two sends (every 100 ms); beyond, lost and
    /// counted.
    pub queue_events: usize,
    /// The drop log: packets dropped for these reasons (the `reason` labels of
    /// `gateway_dropped_packets_total`) are logged too, sampled; empty: none.
    pub drops: Vec<String>,
    /// One in this many of a worker's drops for those reasons is logged (1: each).
    pub drops_sample: u32,
    /// Sampled drops each worker may log per second (and at once), apart from the rules'
    /// budget, so that a flood of drops cannot crowd out their decisions.
    pub drops_per_sec: u32,
}

impl Default for FirewallLogConfig {
    fn default() -> Self {
        FirewallLogConfig {
            syslog_udp: None,
            syslog_unix: None,
            json_file: None,
            facility: 16,
            per_sec: 100,
            burst: 100,
            queue_events: 4096,
            drops: Vec::new(),
            drops_sample: 1,
            drops_per_sec: 10,
        }
    }
}

impl FirewallLogConfig {
    pub fn enabled(&self) -> bool {
        self.syslog_udp.is_some() || self.syslog_unix.is_some() || self.json_file.is_some()
    }

    /// The drop log's reasons, as validation accepted them (an unknown label is refused
    /// there): none where there is no drop log.
    pub fn drop_reasons(&self) -> ReasonSet {
        ReasonSet::from_labels(self.drops.iter().map(String::as_str)).unwrap_or_default()
    }
}

/// Why `label` cannot name drops to log or capture (what [`ReasonSet::from_labels`] refused):
/// no reason has it, or the pipeline never decides `outside`.
pub fn drop_label_refusal(label: &str, outside: Option<DropReason>) -> String {
    match outside {
        None => format!(
            "{label:?} is no drop reason (the `reason` labels of \
             gateway_dropped_packets_total, e.g. conntrack_invalid, firewall_drop)"
        ),
        Some(_) => format!(
            "{label:?} drops are decided outside the pipeline (a VLAN or PPPoE frame, a \
             full queue or ring, the shaper, the control thread), where neither the drop \
             log nor the drop capture sees them: gateway ctl show drops counts them"
        ),
    }
}

/// `[[firewall.pinholes]]`: one IPv6 service on an inside host, reachable from `interface`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PinholeConfig {
    /// The interface the flows arrive on (it needs `[interfaces.ipv6]`).
    pub interface: String,
    pub protocol: L4Protocol,
    /// "22" or "8000-8010": the host's own ports.
    pub port: PortRange,
    /// The host's global IPv6 address.
    pub to: Ipv6Addr,
    /// The sources allowed; omitted: any.
    #[serde(default)]
    pub source: Option<Ipv6Cidr>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub from: String,
    pub to: String,
    pub action: FirewallAction,
    /// Log each first packet this pair's default decides, no rule matching it
    /// (`[firewall.log]`), as `policy FROM->TO`.
    #[serde(default)]
    pub log: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub name: String,
    /// Zones; omitted means any. "local" is the gateway itself.
    #[serde(default)]
    pub from: Option<String>,
    #[serde(default)]
    pub to: Option<String>,
    /// An IPv4 prefix (the rule is for IPv4 flows) or an IPv6 one (for IPv6 flows); both of
    /// one family. Without either, the rule applies to both families.
    #[serde(default)]
    pub source: Option<RulePrefix>,
    #[serde(default)]
    pub destination: Option<RulePrefix>,
    #[serde(default)]
    pub protocol: Option<RuleProtocol>,
    #[serde(default)]
    pub source_ports: Option<PortRange>,
    #[serde(default)]
    pub destination_ports: Option<PortRange>,
    #[serde(default)]
    pub icmp_type: Option<u8>,
    pub action: FirewallAction,
    /// Log each first packet this rule decides (`[firewall.log]`).
    #[serde(default)]
    pub log: bool,
}

/// "80" or "8000-8010", inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

/// What a port field takes, for its errors.
const PORTS_EXPECTED: &str = "a port 1-65535 or a range \"8000-8010\"";

impl FromStr for PortRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let parse = |part: &str| {
            part.trim()
                .parse::<u16>()
                .ok()
                .filter(|&port| port > 0)
                .ok_or_else(|| format!("{text:?} is not {PORTS_EXPECTED}"))
        };
        let (first, last) = match text.split_once('-') {
            Some((first, last)) => (parse(first)?, parse(last)?),
            None => (parse(text)?, parse(text)?),
        };
        if first > last {
            return Err(format!(
                "{text:?}: the range runs backwards; did you mean \"{last}-{first}\"?"
            ));
        }
        Ok(PortRange { first, last })
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PortRange;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(PORTS_EXPECTED)
            }

            fn visit_u64<E: serde::de::Error>(self, port: u64) -> Result<PortRange, E> {
                u16::try_from(port)
                    .ok()
                    .filter(|&port| port > 0)
                    .map(|port| PortRange {
                        first: port,
                        last: port,
                    })
                    .ok_or_else(|| E::custom(format!("{port} is not {PORTS_EXPECTED}")))
            }

            fn visit_i64<E: serde::de::Error>(self, port: i64) -> Result<PortRange, E> {
                u64::try_from(port)
                    .map_err(|_| E::custom(format!("{port} is not {PORTS_EXPECTED}")))
                    .and_then(|port| self.visit_u64(port))
            }

            // Environment overrides arrive as text too.
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PortRange, E> {
                text.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

//! `[[uplinks]]` and `[routing]`: several masqueraded uplinks (multi-WAN), their health
//! checks, how new flows share them, and the policy rules that keep flows on one
//! (`pipeline::pipeline::uplinks` decides per flow; `crate::control::uplink_health` probes).

use super::*;

/// `[[uplinks]]`: a masqueraded interface the default route's flows may leave by.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UplinkConfig {
    /// The interface (one of `nat.masquerade`).
    pub interface: String,
    /// The ISP's router; omitted: the default route the interface's DHCP client or PPPoE
    /// session learnt (the uplink is down until there is one).
    #[serde(default)]
    pub via: Option<Ipv4Addr>,
    /// Its share of new flows among the uplinks of its priority that are up.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Lower first: an uplink takes new flows only while every uplink with a lower number is
    /// down (0, the default, for all: they share).
    #[serde(default)]
    pub priority: u8,
    /// Probes through this uplink; omitted: the uplink is up while its interface has an
    /// address and a next hop.
    #[serde(default)]
    pub health: Option<HealthConfig>,
}

fn default_weight() -> u32 {
    1
}

/// `[uplinks.health]`: probes sent through the uplink (from its kernel twin, bound to it),
/// as mwan3's `track_ip`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthConfig {
    /// Hosts beyond the ISP to probe (a public resolver, the ISP's router).
    pub targets: Vec<Ipv4Addr>,
    /// "icmp" (an echo request) or "tcp:PORT" (a connection to that port; a refusal counts
    /// as an answer: the target was reached).
    #[serde(default)]
    pub probe: ProbeKind,
    /// A round of probes (one per target) every this many milliseconds.
    #[serde(default = "default_interval_ms")]
    pub interval_ms: u64,
    /// A probe unanswered after this long failed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Targets that must answer for a round to pass (mwan3's `reliability`).
    #[serde(default = "default_reliability")]
    pub reliability: usize,
    /// Failed rounds in a row that take the uplink down.
    #[serde(default = "default_rounds")]
    pub down: u32,
    /// Passed rounds in a row that bring it back up.
    #[serde(default = "default_rounds")]
    pub up: u32,
}

fn default_interval_ms() -> u64 {
    1000
}

fn default_timeout_ms() -> u64 {
    1000
}

fn default_reliability() -> usize {
    1
}

fn default_rounds() -> u32 {
    3
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProbeKind {
    #[default]
    Icmp,
    Tcp(u16),
}

impl std::str::FromStr for ProbeKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "icmp" {
            return Ok(ProbeKind::Icmp);
        }
        let port = text
            .strip_prefix("tcp:")
            .and_then(|port| port.parse::<u16>().ok())
            .filter(|&port| port != 0);
        port.map(ProbeKind::Tcp)
            .ok_or_else(|| format!("{text:?}: \"icmp\" or \"tcp:PORT\" (a port 1-65535)"))
    }
}

impl<'de> Deserialize<'de> for ProbeKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `[routing]`: how new flows toward the default route share the uplinks.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// What picks a flow's uplink among those that share: "source" (the default: a host's
    /// flows all leave by one uplink, with one public address) or "flow" (the 5-tuple).
    pub hash: UplinkHashConfig,
    /// What becomes of flows kept on an uplink that goes down: "end" (the default: ended at
    /// their next packet, their NAT bindings freed and logged) or "keep".
    pub on_uplink_down: OnUplinkDown,
    /// With "end": a TCP client whose flow ends so gets a reset, and reconnects at once.
    pub reset_tcp: Option<bool>,
    /// Rules that keep flows on one uplink, first match wins.
    pub policy: Vec<UplinkPolicyConfig>,
}

impl RoutingConfig {
    pub fn resets_tcp(&self) -> bool {
        self.reset_tcp.unwrap_or(true)
    }
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum UplinkHashConfig {
    #[default]
    Source,
    Flow,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnUplinkDown {
    #[default]
    End,
    Keep,
}

/// `[[routing.policy]]`: flows it matches leave by `uplink`. Unset fields match anything.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UplinkPolicyConfig {
    #[serde(default)]
    pub source: Option<Ipv4Cidr>,
    #[serde(default)]
    pub destination: Option<Ipv4Cidr>,
    /// The zone the flow comes from.
    #[serde(default)]
    pub from_zone: Option<String>,
    #[serde(default)]
    pub protocol: Option<RuleProtocol>,
    /// Destination ports, "443" or "8000-8010" (TCP and UDP).
    #[serde(default)]
    pub port: Option<PortRange>,
    /// The interface of one of `[[uplinks]]`.
    pub uplink: String,
    /// When that uplink is down: the shared choice (true, the default) or the flow is
    /// refused (false: counted as `uplink_down`).
    #[serde(default = "default_fallback")]
    pub fallback: bool,
}

fn default_fallback() -> bool {
    true
}

impl GatewayConfig {
    /// `[[uplinks]]` and `[routing]`, against the interfaces, masquerade, routes and twins.
    pub(crate) fn validate_uplinks(&self) -> Result<(), ConfigError> {
        use crate::config::validate::invalid;
        let twins = crate::config::twins::twin_names(self);
        for (i, uplink) in self.uplinks.iter().enumerate() {
            let field = |name: &str| format!("uplinks[{i}].{name}");
            let Some(port) = self
                .interfaces
                .iter()
                .position(|iface| iface.name == uplink.interface)
            else {
                return Err(invalid(
                    field("interface"),
                    format!("no interface named {:?}", uplink.interface),
                ));
            };
            if !self.nat.masquerade.contains(&uplink.interface) {
                return Err(invalid(
                    field("interface"),
                    format!(
                        "{:?} is not in nat.masquerade: an uplink's flows leave with its own address",
                        uplink.interface
                    ),
                ));
            }
            if self.uplinks[..i]
                .iter()
                .any(|other| other.interface == uplink.interface)
            {
                return Err(invalid(
                    field("interface"),
                    format!("{:?} is an uplink twice", uplink.interface),
                ));
            }
            if let Some(via) = uplink.via {
                if self.interface_for(via) != Some(port) {
                    return Err(invalid(
                        field("via"),
                        format!("{via} is not in {:?}'s subnet", uplink.interface),
                    ));
                }
            }
            if uplink.weight == 0 || uplink.weight > 1000 {
                return Err(invalid(field("weight"), "must be 1 to 1000"));
            }
            if let Some(health) = &uplink.health {
                let field = |name: &str| format!("uplinks[{i}].health.{name}");
                // A PPPoE twin has no IPv4 address to probe from (it carries the session's
                // IPv6 alone); the session's LCP echoes are its health check.
                if self.interfaces[port].address.is_pppoe() {
                    return Err(invalid(
                        format!("uplinks[{i}].health"),
                        "a PPPoE uplink is checked by its LCP echoes (interfaces.pppoe.lcp_echo_interval_secs): remove [uplinks.health]",
                    ));
                }
                if twins[port].is_none() {
                    return Err(invalid(
                        format!("uplinks[{i}].health"),
                        format!(
                            "probes leave by the interface's kernel twin: set interfaces[{port}].kernel_twin = true"
                        ),
                    ));
                }
                if health.targets.is_empty() {
                    return Err(invalid(field("targets"), "at least one host to probe"));
                }
                if let Some(j) = (1..health.targets.len())
                    .find(|&j| health.targets[..j].contains(&health.targets[j]))
                {
                    return Err(invalid(
                        format!("uplinks[{i}].health.targets[{j}]"),
                        format!("{} is listed twice", health.targets[j]),
                    ));
                }
                if health.reliability == 0 || health.reliability > health.targets.len() {
                    return Err(invalid(
                        field("reliability"),
                        format!(
                            "must be 1 to the number of targets ({})",
                            health.targets.len()
                        ),
                    ));
                }
                if !(100..=60_000).contains(&health.interval_ms) {
                    return Err(invalid(field("interval_ms"), "must be 100 to 60000"));
                }
                if health.timeout_ms < 10 || health.timeout_ms > health.interval_ms {
                    return Err(invalid(
                        field("timeout_ms"),
                        "must be at least 10 and at most interval_ms",
                    ));
                }
                // TCP probes connect one target after another.
                let round_ms = health.timeout_ms * health.targets.len() as u64;
                if matches!(health.probe, ProbeKind::Tcp(_)) && round_ms > health.interval_ms {
                    return Err(invalid(
                        field("timeout_ms"),
                        format!(
                            "with a TCP probe, timeout_ms x targets ({round_ms}) must fit interval_ms ({}): the targets are tried one after another",
                            health.interval_ms
                        ),
                    ));
                }
                if !(1..=100).contains(&health.down) {
                    return Err(invalid(field("down"), "must be 1 to 100"));
                }
                if !(1..=100).contains(&health.up) {
                    return Err(invalid(field("up"), "must be 1 to 100"));
                }
            }
        }
        if self.uplinks.len() > pipeline::pipeline::uplinks::MAX_UPLINKS {
            return Err(invalid(
                "uplinks",
                format!("at most {}", pipeline::pipeline::uplinks::MAX_UPLINKS),
            ));
        }
        if !self.uplinks.is_empty() {
            if let Some(i) = self
                .routes
                .iter()
                .position(|route| route.destination.len == 0)
            {
                return Err(invalid(
                    format!("routes[{i}].destination"),
                    "the default route is the uplinks' ([[uplinks]]): remove it, or give the uplink its via",
                ));
            }
        }
        for (i, policy) in self.routing.policy.iter().enumerate() {
            let field = |name: &str| format!("routing.policy[{i}].{name}");
            if !self
                .uplinks
                .iter()
                .any(|uplink| uplink.interface == policy.uplink)
            {
                return Err(invalid(
                    field("uplink"),
                    format!("{:?} is not one of [[uplinks]]", policy.uplink),
                ));
            }
            if let Some(zone) = &policy.from_zone {
                if !self.zone_names().contains(zone) {
                    return Err(invalid(
                        field("from_zone"),
                        format!("no interface is in zone {zone:?}"),
                    ));
                }
            }
            for (name, prefix) in [
                ("source", policy.source),
                ("destination", policy.destination),
            ] {
                if let Some(prefix) = prefix {
                    crate::config::validate::no_host_bits(field(name), &prefix)?;
                }
            }
            if policy.port.is_some()
                && !matches!(policy.protocol, Some(RuleProtocol::Tcp | RuleProtocol::Udp))
            {
                return Err(invalid(
                    field("port"),
                    "a port needs protocol \"tcp\" or \"udp\"",
                ));
            }
        }
        if !self.routing.policy.is_empty() && self.uplinks.is_empty() {
            return Err(invalid("routing.policy", "needs [[uplinks]]"));
        }
        Ok(())
    }
}

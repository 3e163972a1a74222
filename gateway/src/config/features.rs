//! `[keyword_block]`, `[parental]`, `[qos]` and `[traffic_meter]`: the pipeline's features.

use super::*;

#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct KeywordBlockConfig {
    /// Block DNS queries, TLS connections (by SNI) and HTTP requests (Host, URL) that hit
    /// these lists, for every LAN device.
    pub enabled: bool,
    /// A domain also blocks its subdomains ("example.com" blocks "www.example.com").
    pub domains: Vec<String>,
    /// Matched anywhere in a host name or URL.
    pub keywords: Vec<String>,
    /// A blocked DNS query gets "nxdomain" (the default) or is dropped ("drop").
    pub dns_action: DnsActionConfig,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DnsActionConfig {
    #[default]
    Nxdomain,
    Drop,
}

#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ParentalConfig {
    pub enabled: bool,
    /// The local time zone's offset from UTC, for the allowed hours.
    pub utc_offset_minutes: i32,
    /// Named domain lists: a file path each, in hosts-file or plain one-domain-per-line
    /// format. Read at start and on every reload.
    pub categories: std::collections::BTreeMap<String, String>,
    pub devices: Vec<ParentalDevice>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParentalDevice {
    pub name: String,
    /// The device's IP addresses and/or MAC addresses.
    #[serde(default)]
    pub addresses: Vec<Ipv4Addr>,
    #[serde(default)]
    pub macs: Vec<String>,
    /// Category names from `parental_control.categories`.
    #[serde(default)]
    pub blocked_categories: Vec<String>,
    /// When the device may go online, e.g. "mon-fri 07:00-21:00", "sat,sun 08:00-22:30",
    /// "daily 06:00-23:00". A window may cross midnight. Empty: always.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// Blocks the device now, whatever the hours.
    #[serde(default)]
    pub paused: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QosSettings {
    /// Police the WAN links: traffic between inside hosts and masqueraded interfaces.
    pub enabled: bool,
    /// The link rates to hold, LAN -> WAN and WAN -> LAN.
    pub uplink_mbps: u64,
    pub downlink_mbps: u64,
    /// Burst allowance: this many milliseconds of the rate may pass at once. Policing keeps
    /// no queue, so it adds no delay; the burst bounds how far above the rate a moment goes.
    pub burst_ms: u32,
    /// Traffic that goes first; everything else is bulk, shared fairly among LAN hosts.
    pub priority: Vec<QosPriorityRule>,
    /// "shaper" (the default) queues what exceeds the rate (fair per host, then per flow,
    /// CoDel on every queue, ECN marks); "policer" drops it at once.
    pub mode: QosModeSetting,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(try_from = "String")]
pub enum QosModeSetting {
    Policer,
    #[default]
    Shaper,
}

impl TryFrom<String> for QosModeSetting {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        match text.as_str() {
            "shaper" => Ok(Self::Shaper),
            "policer" => Ok(Self::Policer),
            _ => Err(format!("{text:?} is not shaper or policer")),
        }
    }
}

impl Default for QosSettings {
    fn default() -> Self {
        QosSettings {
            enabled: false,
            uplink_mbps: 1000,
            downlink_mbps: 1000,
            burst_ms: 20,
            priority: Vec::new(),
            mode: QosModeSetting::Shaper,
        }
    }
}

/// Every field given must match.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QosPriorityRule {
    /// A LAN host, by address and/or MAC ("02:00:00:00:00:50").
    #[serde(default)]
    pub host: Option<Ipv4Addr>,
    #[serde(default)]
    pub mac: Option<String>,
    #[serde(default)]
    pub dscp: Option<u8>,
    #[serde(default)]
    pub protocol: Option<L4Protocol>,
    /// Source or destination port.
    #[serde(default)]
    pub ports: Option<PortRange>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrafficMeterConfig {
    /// Count bytes and packets per LAN host, up and down.
    pub enabled: bool,
    /// Hosts each worker tracks; beyond that, traffic is counted in one overflow entry.
    pub capacity: usize,
    /// Prometheus gets the totals, the top N hosts by bytes and the hosts named below; the
    /// JSON endpoint (/hosts) lists every host.
    pub top_hosts: usize,
    pub named_hosts: Vec<Ipv4Addr>,
}

impl Default for TrafficMeterConfig {
    fn default() -> Self {
        TrafficMeterConfig {
            enabled: false,
            capacity: 4096,
            top_hosts: 10,
            named_hosts: Vec::new(),
        }
    }
}

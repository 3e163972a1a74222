//! The gateway's configuration: one TOML file, serde-typed, with `GATEWAY__...` environment
//! overrides (`GATEWAY__EAL__MEMORY_MB=1024`). `validate` names the field that is wrong.

pub mod history;
pub mod host;
pub mod store;
pub mod twins;
pub mod web;

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
}

/// How a changed config reaches the running gateway (README, Reload).
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
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], DEFAULT_METRICS_PORT)),
            web_config: None,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Default, Copy)]
#[serde(rename_all = "lowercase")]
pub enum HugepageMode {
    /// Use hugepages when mounted and reserved; otherwise run without, with a notice.
    #[default]
    Auto,
    /// Refuse to start without hugepages (production).
    Required,
    /// Never use hugepages (`--no-huge`): tests and labs.
    Off,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EalConfig {
    /// The main lcore, which runs the control thread; never a worker.
    pub main_lcore: u32,
    pub hugepages: HugepageMode,
    /// MiB of memory for DPDK (`-m`), from any NUMA node. Ignored when `socket_memory_mb`
    /// is set, since DPDK refuses `-m` beside `--socket-mem`.
    pub memory_mb: u32,
    /// MiB of hugepage memory per NUMA node, node 0 first (`--socket-mem`): the NIC's node
    /// only, e.g. `[2048, 0]`. Empty: `memory_mb` from wherever the EAL finds it. Without
    /// hugepages (`--no-huge` has no nodes) their sum is taken as `-m`.
    pub socket_memory_mb: Vec<u32>,
    /// Keeps this instance's runtime files apart from other DPDK processes.
    pub file_prefix: String,
    pub log_level: String,
    /// The CPU each lcore runs on, main lcore first, then the workers in order. Empty: lcore
    /// N runs on CPU N. Lets a small lab box run more lcores than it has CPUs.
    pub cpus: Vec<u32>,
    /// Passed to the EAL verbatim, after everything the config generates.
    pub extra_args: Vec<String>,
    /// Lets DPDK's own capture tools (`dpdk-dumpcap`, `dpdk-pdump`) capture any port and
    /// queue, RX and TX, into pcapng (`rte_pdump`). They are secondary processes: the EAL
    /// then runs with its runtime files (`/var/run/dpdk/<file_prefix>`, the hugepage files)
    /// instead of `--in-memory`, and needs hugepages. Nothing is copied while no tool
    /// captures.
    pub pdump: bool,
}

impl EalConfig {
    /// The MiB the EAL takes: the nodes' sum when given per node, else `memory_mb`.
    pub fn total_memory_mb(&self) -> u32 {
        match self.socket_memory_mb.iter().sum() {
            0 => self.memory_mb,
            per_node => per_node,
        }
    }
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            main_lcore: 0,
            hugepages: HugepageMode::Auto,
            memory_mb: 512,
            socket_memory_mb: Vec::new(),
            file_prefix: "gateway".into(),
            log_level: "notice".into(),
            cpus: Vec::new(),
            extra_args: Vec::new(),
            pdump: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MempoolConfig {
    /// Packet buffers in the pool. Must cover every RX descriptor of every queue, every TX
    /// descriptor, the rings, and bursts in flight; `2^n - 1` is the most memory-efficient.
    pub mbufs: u32,
    /// Per-lcore cache of buffers (at most 512, and mbufs / 1.5 or less).
    pub cache: u32,
    /// Bytes of packet data per buffer. 2048 carries a 1500-byte MTU; raise it for jumbo frames.
    pub data_room: u16,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            mbufs: 16383,
            cache: 256,
            data_room: 2048,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersConfig {
    /// One worker per lcore listed; each owns RX/TX queue i on every port.
    pub lcores: Vec<u32>,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig { lcores: vec![1] }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InterfaceConfig {
    /// A name for logs and metrics, e.g. "lan".
    pub name: String,
    /// A DPDK device: a PCI address ("0000:03:00.0") or a vdev string
    /// ("net_af_packet0,iface=veth0"). For a bond, the bond's name: "net_bonding0". Omitted
    /// for a VLAN subinterface, which uses its parent's.
    #[serde(default)]
    pub device: String,
    /// Makes this interface an 802.1Q VLAN subinterface of the interface named here (a port
    /// or a bond): it shares the parent's port and MAC and carries its frames tagged with
    /// `vlan`, while the parent carries the untagged ones.
    #[serde(default)]
    pub parent: Option<String>,
    /// The subinterface's VLAN id, 1 to 4094; needs `parent`.
    #[serde(default)]
    pub vlan: Option<u16>,
    /// On a port carrying VLAN subinterfaces: let the NIC strip and insert the tags where it
    /// can (the X550 can). false: the workers tag and untag in software. Omitted: true.
    #[serde(default)]
    pub vlan_offload: Option<bool>,
    /// Makes this interface an 802.3ad (LACP) bond of member devices.
    #[serde(default)]
    pub bond: Option<BondConfig>,
    /// The gateway's address and the connected subnet, e.g. "192.168.1.1/24"; or "dhcp":
    /// a DHCP client on the interface's kernel twin gets it, and the gateway follows the
    /// twin's address, prefix and routes through netlink (`crate::control::netlink`). Needs a twin.
    pub address: InterfaceAddress,
    /// The firewall zone; defaults to the interface's name.
    #[serde(default)]
    pub zone: Option<String>,
    /// The IP MTU as written; omitted: see [`InterfaceConfig::mtu`].
    #[serde(default, rename = "mtu")]
    pub configured_mtu: Option<u16>,
    /// `address = "pppoe"`: the PPPoE client's credentials and timers.
    #[serde(default)]
    pub pppoe: Option<PppoeConfig>,
    #[serde(default = "default_descriptors")]
    pub rx_descriptors: u16,
    #[serde(default = "default_descriptors")]
    pub tx_descriptors: u16,
    /// The Toeplitz RSS key as hex (40 bytes on the X550); omitted: the driver's default.
    /// The redirection table keeps the driver's default, spreading hashes evenly over the
    /// workers' queues.
    #[serde(default)]
    pub rss_key: Option<String>,
    /// RFC 3704 source validation of what arrives here: "strict" (the route back to the
    /// source leaves by this interface), "loose" (the source is routable and not another
    /// interface's connected subnet) or "off". Omitted: loose where a default route leaves,
    /// strict elsewhere.
    #[serde(default)]
    pub source_validation: Option<SourceValidationConfig>,
    /// TCP MSS clamping: SYNs and SYN-ACKs entering or leaving by this interface announce at
    /// most this MSS. "auto": the interface's MTU less 40 bytes of IPv4 and TCP headers; or a
    /// number of bytes (536 up to that). Omitted: SYNs keep theirs. For links whose MTU is
    /// below the hosts' (PPPoE's 1492, tunnels), where path-MTU discovery fails behind
    /// firewalls that drop ICMP.
    #[serde(default)]
    pub tcp_mss: Option<TcpMssConfig>,
    /// Whether the interface has a kernel twin (a tap device with its MAC and address, for
    /// Linux daemons); omitted: `kernel_twins.inside_by_default` for interfaces that do not
    /// masquerade, no twin for those that do.
    #[serde(default)]
    pub kernel_twin: Option<bool>,
    /// The twin's name in the kernel; omitted: the interface's name.
    #[serde(default)]
    pub kernel_twin_name: Option<String>,
    /// Receive frames addressed to any MAC. Off (the default), the NIC filters to the
    /// port's MAC, broadcast and the multicast it joined (a bond's LACP group), so flooded
    /// unicast for other hosts costs no worker cycles. On for a port whose PMD filters
    /// nothing anyway, or for a mirror.
    #[serde(default)]
    pub promiscuous: bool,
    /// The interface's IPv6 side (`[interfaces.ipv6]`): the gateway's addresses there and
    /// its Router Advertisements. Omitted: IPv6 off on the interface (dropped as
    /// `unsupported_ethertype`).
    #[serde(default)]
    pub ipv6: Option<Ipv6InterfaceConfig>,
}

/// `[interfaces.ipv6]`: the gateway answers Neighbor Discovery and echo on these addresses,
/// advertises their prefixes for SLAAC (offering itself as default router when an IPv6
/// default route leaves by another interface), and forwards IPv6 between interfaces that
/// have the table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ipv6InterfaceConfig {
    /// Global or unique-local addresses with their prefix length, e.g. "2001:db8:1::1/64";
    /// at most 8. The link-local address (fe80:: and the MAC's EUI-64) is always there.
    #[serde(default)]
    pub addresses: Vec<Ipv6Cidr>,
    /// Send Router Advertisements: every /64 address's prefix for SLAAC, other lengths as
    /// on-link prefixes; and answer Router Solicitations.
    #[serde(default)]
    pub router_advertisements: bool,
    /// DNS servers the advertisements announce (RFC 8106 RDNSS), at most 8.
    #[serde(default)]
    pub dns_servers: Vec<Ipv6Addr>,
    /// The longest interval between unsolicited advertisements, 4 to 1800 s (RFC 4861's
    /// MaxRtrAdvInterval); each goes at a random point between a third of it and it.
    #[serde(default = "default_ra_interval_secs")]
    pub ra_interval_secs: u32,
    /// The link's routers configure this interface (a WAN's ISP): their Router
    /// Advertisements and DHCPv6 answers go to the kernel twin, where the kernel (SLAAC) or
    /// a DHCPv6 client (dhcpcd, which also asks for a delegated prefix) configures it, and
    /// the gateway takes the twin's global addresses and IPv6 routes as the interface's.
    /// Needs a kernel twin.
    #[serde(default)]
    pub autoconfigure: bool,
    /// This interface's prefix is delegated: the global addresses the DHCPv6 client on the
    /// WAN's twin gives this interface's twin from the delegated prefix (dhcpcd's `ia_pd`)
    /// are the interface's, announced when `router_advertisements` is on. Needs a kernel
    /// twin.
    #[serde(default)]
    pub delegated_prefix: bool,
}

impl Ipv6InterfaceConfig {
    /// Whether the interface's twin's global addresses are taken as the interface's.
    pub fn follows_kernel(&self) -> bool {
        self.autoconfigure || self.delegated_prefix
    }
}

fn default_ra_interval_secs() -> u32 {
    pipeline::pipeline::config::RouterAdvertConfig::DEFAULT_INTERVAL_SECS
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum SourceValidationConfig {
    Strict,
    Loose,
    Off,
}

impl TryFrom<String> for SourceValidationConfig {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        match text.as_str() {
            "strict" => Ok(Self::Strict),
            "loose" => Ok(Self::Loose),
            "off" => Ok(Self::Off),
            _ => Err(format!(
                "source_validation: {text:?} is not strict, loose or off"
            )),
        }
    }
}

/// An interface's `tcp_mss`: "auto" or a number of bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpMssConfig {
    /// The interface's MTU less the 40 bytes of IPv4 and TCP headers.
    Auto,
    Bytes(u16),
}

/// The least MSS `tcp_mss` may set: every IPv4 host must take 576-byte datagrams (RFC 879).
pub const MIN_TCP_MSS: u16 = 536;
/// 802.1Q ids 0 (priority tag) and 4095 are reserved.
pub const MAX_VLAN_ID: u16 = 4094;
/// IPv4 and TCP headers without options: what an MSS leaves of the MTU.
const TCP_IPV4_HEADERS: u16 = 40;

impl TcpMssConfig {
    /// The MSS SYNs through an interface of `mtu` are clamped to.
    pub fn bytes(self, mtu: u16) -> u16 {
        match self {
            TcpMssConfig::Auto => mtu.saturating_sub(TCP_IPV4_HEADERS),
            TcpMssConfig::Bytes(bytes) => bytes,
        }
    }
}

impl<'de> Deserialize<'de> for TcpMssConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = TcpMssConfig;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"auto\" or a number of bytes")
            }

            fn visit_u64<E: serde::de::Error>(self, bytes: u64) -> Result<TcpMssConfig, E> {
                u16::try_from(bytes)
                    .map(TcpMssConfig::Bytes)
                    .map_err(|_| E::custom(format!("tcp_mss: {bytes} is more than 65535")))
            }

            fn visit_i64<E: serde::de::Error>(self, bytes: i64) -> Result<TcpMssConfig, E> {
                u64::try_from(bytes)
                    .map_err(|_| E::custom(format!("tcp_mss: {bytes} is negative")))
                    .and_then(|bytes| self.visit_u64(bytes))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<TcpMssConfig, E> {
                match text {
                    "auto" => Ok(TcpMssConfig::Auto),
                    // Environment overrides arrive as text.
                    _ => text.parse::<u16>().map(TcpMssConfig::Bytes).map_err(|_| {
                        E::custom(format!(
                            "tcp_mss: {text:?} is not \"auto\" or a number of bytes"
                        ))
                    }),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// An interface's IP MTU where none is configured (and it is not PPPoE).
pub const DEFAULT_MTU: u16 = 1500;

/// The largest IP MTU a PPPoE session carries over a 1500-byte Ethernet payload (RFC 2516):
/// 6 bytes of PPPoE header and 2 of PPP protocol go first.
pub const PPPOE_MTU: u16 = 1492;

/// A PPPoE client session on an interface (`address = "pppoe"`): discovery, LCP, PAP or
/// CHAP with these credentials, then IPCP gives the interface its address, its peer (the
/// default route's next hop) and DNS servers. Changing any of it on reload reconnects.
#[derive(Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PppoeConfig {
    pub username: String,
    pub password: String,
    /// The service to ask for; omitted: any the access concentrator offers.
    #[serde(default)]
    pub service_name: String,
    /// Take offers only from the access concentrator of this name; omitted: the first.
    #[serde(default)]
    pub ac_name: Option<String>,
    /// LCP echo requests every this many seconds once the link is up; 0: none.
    #[serde(default = "default_lcp_echo_interval_secs")]
    pub lcp_echo_interval_secs: u64,
    /// Unanswered echoes in a row that end the session (then it reconnects).
    #[serde(default = "default_lcp_echo_failures")]
    pub lcp_echo_failures: u32,
    /// Route 0.0.0.0/0 to the peer while the session is up.
    #[serde(default = "default_true")]
    pub default_route: bool,
}

fn default_lcp_echo_interval_secs() -> u64 {
    10
}

fn default_lcp_echo_failures() -> u32 {
    3
}

fn default_true() -> bool {
    true
}

/// The password stays out of logs.
impl fmt::Debug for PppoeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PppoeConfig")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("service_name", &self.service_name)
            .field("ac_name", &self.ac_name)
            .field("lcp_echo_interval_secs", &self.lcp_echo_interval_secs)
            .field("lcp_echo_failures", &self.lcp_echo_failures)
            .field("default_route", &self.default_route)
            .finish()
    }
}

fn default_descriptors() -> u16 {
    1024
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BondConfig {
    /// Member devices: PCI addresses or vdev strings, as `device` takes.
    pub members: Vec<String>,
    /// Which header fields choose the member a flow leaves by.
    #[serde(default)]
    pub xmit_policy: XmitPolicy,
    /// How often the gateway sends LACPDUs: "fast" (every second) or "slow" (every 30 s).
    #[serde(default)]
    pub lacp_rate: LacpRate,
    /// The bond's MAC; defaults to the first member's.
    #[serde(default)]
    pub mac: Option<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum XmitPolicy {
    L2,
    L23,
    #[default]
    L34,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LacpRate {
    #[default]
    Fast,
    Slow,
}

impl InterfaceConfig {
    /// The EAL device strings this interface needs, members before the bond that uses them.
    /// Whether this is a VLAN subinterface (it has a parent port) rather than a port or bond.
    pub fn is_vlan(&self) -> bool {
        self.parent.is_some() || self.vlan.is_some()
    }

    /// The IP MTU: as configured, else 1500, or 1492 on PPPoE (a 1500-byte Ethernet payload
    /// less PPPoE's 6 bytes of header and PPP's 2).
    pub fn mtu(&self) -> u16 {
        self.configured_mtu.unwrap_or(if self.address.is_pppoe() {
            PPPOE_MTU
        } else {
            DEFAULT_MTU
        })
    }

    /// The MTU to give the port: the interface's, plus the PPPoE and PPP headers its
    /// datagrams travel under on a PPPoE port.
    pub fn port_mtu(&self) -> u16 {
        if self.address.is_pppoe() {
            self.mtu() + pipeline::wire::pppoe::OVERHEAD as u16
        } else {
            self.mtu()
        }
    }

    /// The MSS that SYNs crossing the interface are clamped to at link MTU `mtu`: `tcp_mss`'s
    /// ("auto" follows the MTU), and on PPPoE "auto" where it is omitted, since the hosts
    /// behind assume 1500 bytes and path-MTU discovery fails where firewalls drop ICMP.
    pub fn tcp_mss_bytes(&self, mtu: u16) -> Option<u16> {
        let clamp = self
            .tcp_mss
            .or(self.address.is_pppoe().then_some(TcpMssConfig::Auto));
        clamp.map(|mss| mss.bytes(mtu).min(mss.bytes(self.mtu())))
    }

    pub fn eal_devices(&self) -> Vec<String> {
        if self.is_vlan() {
            return Vec::new();
        }
        let Some(bond) = &self.bond else {
            return vec![self.device.clone()];
        };
        let mut devices = bond.members.clone();
        let policy = match bond.xmit_policy {
            XmitPolicy::L2 => "l2",
            XmitPolicy::L23 => "l23",
            XmitPolicy::L34 => "l34",
        };
        let mut spec = format!("{},mode=4,xmit_policy={policy}", device_name(&self.device));
        for member in &bond.members {
            spec.push_str(&format!(",slave={}", device_name(member)));
        }
        if let Some(mac) = &bond.mac {
            spec.push_str(&format!(",mac={mac}"));
        }
        devices.push(spec);
        devices
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The destination prefix; "0.0.0.0/0" is the default route.
    pub destination: Ipv4Cidr,
    /// The next-hop router; it must sit in an interface's connected subnet.
    pub via: Ipv4Addr,
}

/// `[[ipv6_routes]]`: a prefix and the router it goes through.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ipv6RouteConfig {
    /// The destination prefix; "::/0" is the default route.
    pub destination: Ipv6Cidr,
    /// The next-hop router: link-local (as routers announce themselves), with `interface`;
    /// or in one of an interface's IPv6 prefixes.
    pub via: Ipv6Addr,
    /// The interface the next hop is on; needed for a link-local `via`, found from the
    /// prefixes otherwise.
    #[serde(default)]
    pub interface: Option<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IcmpConfig {
    /// ICMP errors (time exceeded, unreachable, fragmentation needed) each worker may send
    /// per second; the rest are dropped and counted. Each kind has a bucket of its own.
    pub errors_per_sec: u32,
    pub burst: u32,
    /// Echo requests to the gateway each worker passes to the control thread per second;
    /// the rest are dropped as slow_path_policed. ARP is exempt.
    pub echo_per_sec: u32,
    pub echo_burst: u32,
}

impl Default for IcmpConfig {
    fn default() -> Self {
        IcmpConfig {
            errors_per_sec: 1000,
            burst: 100,
            echo_per_sec: 1000,
            echo_burst: 100,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NeighborsConfig {
    pub capacity: usize,
    /// Packets held per unresolved next hop while ARP runs; more are dropped and counted.
    pub pending_per_neighbor: usize,
    /// How long an ARP answer is trusted before it is refreshed.
    pub reachable_secs: u64,
    /// Packets held over all unresolved next hops together; more are dropped and counted
    /// (`neighbor_held_limit`), so that unresolvable next hops cannot drain the mempool.
    pub pending_total: usize,
    /// Milliseconds after a neighbour's confirmation during which ARP claiming another MAC
    /// for it is refused outright (Linux's `locktime`). Later, a claim sends a probe to the
    /// known MAC first and is believed only if that goes unanswered and a broadcast probe is
    /// answered with the new MAC. 0: no lock, claims are still checked by probe.
    pub locktime_ms: u64,
}

impl Default for NeighborsConfig {
    fn default() -> Self {
        NeighborsConfig {
            capacity: 4096,
            pending_per_neighbor: 4,
            reachable_secs: 300,
            pending_total: 512,
            locktime_ms: 1000,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConntrackConfig {
    /// Flows per worker, preallocated at start.
    pub capacity: usize,
    /// TCP established idle timeout; RFC 5382 asks for at least 2 h 4 min.
    pub tcp_established_secs: u64,
    /// TCP opening and closing states; RFC 5382 asks for 4 min.
    pub tcp_transitory_secs: u64,
    pub tcp_time_wait_secs: u64,
    /// After a RST.
    pub tcp_close_secs: u64,
    /// RFC 4787 asks for at least 2 min; 5 min is its recommendation.
    pub udp_secs: u64,
    pub icmp_secs: u64,
    /// Other IP protocols (GRE, ESP, ...).
    pub other_secs: u64,
    /// Accept TCP flows picked up mid-stream (after a restart) instead of requiring a SYN.
    pub tcp_loose: bool,
    /// Flows one host (the address that opened them) may hold per worker.
    pub host_flows: u32,
    /// Half-open TCP flows one host may hold per worker.
    pub host_half_open: u32,
    /// Half-open TCP flows per worker; by default a quarter of `capacity`.
    pub half_open: Option<usize>,
    /// Hosts per worker that the per-host counts have room for (flows and NAT ports).
    pub hosts: usize,
    /// An IPv6 host for `host_flows` and `host_half_open`: its source address's first this
    /// many bits, 32 to 128 (a /64 by default: every address a host takes in its LAN's /64,
    /// SLAAC, privacy or made up, counts as that one host).
    pub host_prefix6: u8,
}

impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            capacity: 262_144,
            tcp_established_secs: 7440,
            tcp_transitory_secs: 240,
            tcp_time_wait_secs: 120,
            tcp_close_secs: 10,
            udp_secs: 300,
            icmp_secs: 60,
            other_secs: 600,
            tcp_loose: false,
            host_flows: pipeline::state::conntrack::DEFAULT_HOST_FLOWS,
            host_half_open: pipeline::state::conntrack::DEFAULT_HOST_HALF_OPEN,
            half_open: None,
            hosts: pipeline::state::conntrack::DEFAULT_HOSTS,
            host_prefix6: pipeline::state::conntrack::DEFAULT_HOST_PREFIX6,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatConfig {
    /// Interfaces whose outgoing flows are masqueraded (SNAT) to the interface's address.
    pub masquerade: Vec<String>,
    /// Source ports (and ICMP ids) handed out, split among workers by port class.
    pub port_range: PortRange,
    /// NAT bindings (internal endpoint -> external port) per worker.
    pub binding_capacity: usize,
    /// NAT bindings (so external ports) one internal host may hold per worker.
    pub host_ports: u32,
    /// Hand each internal host its ports in blocks of this many (a multiple of 64), logged
    /// once per block instead of once per mapping; 0: port by port.
    pub port_block_size: u32,
    pub port_forwards: Vec<PortForwardConfig>,
    /// The NAT log: each mapping's creation and deletion, to syslog.
    pub log: NatLogConfig,
}

/// `[nat.log]`: mapping events (`crate::telemetry::nat_log`) as RFC 5424 syslog messages.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NatLogConfig {
    /// Send each event as one UDP datagram (RFC 5426) to this syslog receiver.
    pub syslog_udp: Option<SocketAddr>,
    /// Send each event as one datagram to this Unix socket (`/dev/log`: the host's syslog).
    pub syslog_unix: Option<PathBuf>,
    /// The syslog facility: 16 (local0) to 23 (local7), or any of 0-23.
    pub facility: u8,
    /// Send the events as IPFIX (RFC 8158 NAT44 BIB records) to this collector over UDP.
    pub ipfix_udp: Option<SocketAddr>,
    /// The IPFIX observation domain id the messages carry.
    pub ipfix_domain: u32,
    /// Events each worker may hold between two sends (every 100 ms); beyond, they are lost
    /// and counted (`gateway_nat_log_events_total{result="lost"}`).
    pub queue_events: usize,
}

impl Default for NatLogConfig {
    fn default() -> Self {
        NatLogConfig {
            syslog_udp: None,
            syslog_unix: None,
            facility: 16,
            ipfix_udp: None,
            ipfix_domain: 1,
            queue_events: 65536,
        }
    }
}

impl NatLogConfig {
    pub fn enabled(&self) -> bool {
        self.syslog_udp.is_some() || self.syslog_unix.is_some() || self.ipfix_udp.is_some()
    }
}

impl Default for NatConfig {
    fn default() -> Self {
        NatConfig {
            masquerade: Vec::new(),
            port_range: PortRange {
                first: 1024,
                last: 65535,
            },
            binding_capacity: 65536,
            host_ports: pipeline::pipeline::DEFAULT_HOST_PORTS,
            port_block_size: 0,
            port_forwards: Vec::new(),
            log: NatLogConfig::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortForwardConfig {
    /// The interface whose address receives the forwarded port.
    pub interface: String,
    pub protocol: L4Protocol,
    /// "80" or "8000-8010".
    pub port: PortRange,
    /// The LAN host.
    pub to: Ipv4Addr,
    /// The LAN port (the first, for a range); defaults to the same port.
    #[serde(default)]
    pub to_port: Option<u16>,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum L4Protocol {
    Tcp,
    Udp,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RuleProtocol {
    Tcp,
    Udp,
    Icmp,
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
    /// Where the decisions of rules marked `log = true` go (`crate::telemetry::firewall_log`).
    pub log: FirewallLogConfig,
}

/// `[firewall.log]`: the decisions of rules marked `log = true`, one RFC 5424 syslog message
/// each, within a budget per worker.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FirewallLogConfig {
    /// Send each decision as one UDP datagram (RFC 5426) to this syslog receiver.
    pub syslog_udp: Option<SocketAddr>,
    /// Send each decision as one datagram to this Unix socket (`/dev/log`: the host's syslog).
    pub syslog_unix: Option<PathBuf>,
    /// The syslog facility: 16 (local0) to 23 (local7), or any of 0-23.
    pub facility: u8,
    /// Decisions each worker may log per second, and at once: a flood of logged drops costs
    /// a worker no more; the rest are counted lost.
    pub per_sec: u32,
    pub burst: u32,
    /// Decisions each worker may hold between two sends (every 100 ms); beyond, lost and
    /// counted.
    pub queue_events: usize,
}

impl Default for FirewallLogConfig {
    fn default() -> Self {
        FirewallLogConfig {
            syslog_udp: None,
            syslog_unix: None,
            facility: 16,
            per_sec: 100,
            burst: 100,
            queue_events: 4096,
        }
    }
}

impl FirewallLogConfig {
    pub fn enabled(&self) -> bool {
        self.syslog_udp.is_some() || self.syslog_unix.is_some()
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

/// An IPv4 address with a prefix length, "192.168.1.1/24".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Ipv4Cidr {
    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    pub fn mask(&self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        }
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask() == u32::from(self.network())
    }
}

impl FromStr for Ipv4Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not an address/prefix-length like 10.0.0.1/24"))?;
        let addr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv4 address"))?;
        let len = len
            .parse::<u8>()
            .ok()
            .filter(|&len| len <= 32)
            .ok_or_else(|| format!("{len:?} is not a prefix length 0..=32"))?;
        Ok(Ipv4Cidr { addr, len })
    }
}

impl<'de> Deserialize<'de> for Ipv4Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A firewall rule's source or destination: "10.0.0.0/8" or "2001:db8:77::/48".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RulePrefix {
    V4(Ipv4Cidr),
    V6(Ipv6Cidr),
}

impl FromStr for RulePrefix {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.contains(':') {
            text.parse().map(RulePrefix::V6)
        } else {
            text.parse().map(RulePrefix::V4)
        }
    }
}

impl<'de> Deserialize<'de> for RulePrefix {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for RulePrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RulePrefix::V4(cidr) => cidr.fmt(f),
            RulePrefix::V6(cidr) => cidr.fmt(f),
        }
    }
}

/// An IPv6 address with a prefix length, "2001:db8:1::1/64".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Cidr {
    pub addr: Ipv6Addr,
    pub len: u8,
}

impl FromStr for Ipv6Cidr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, len) = text.split_once('/').ok_or_else(|| {
            format!("{text:?} is not an address/prefix-length like 2001:db8:1::1/64")
        })?;
        let addr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
        let len = len
            .parse::<u8>()
            .ok()
            .filter(|&len| len <= 128)
            .ok_or_else(|| format!("{len:?} is not a prefix length 0..=128"))?;
        Ok(Ipv6Cidr { addr, len })
    }
}

impl<'de> Deserialize<'de> for Ipv6Cidr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ipv6Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An interface's address: configured, the one a DHCP client gets on its twin, or the one
/// a PPPoE session's IPCP assigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterfaceAddress {
    Static(Ipv4Cidr),
    /// `"dhcp"`: none until the kernel twin has a lease (`crate::control::netlink`).
    Dhcp,
    /// `"pppoe"`: none until the session is up (`crate::dataplane::pppoe`).
    Pppoe,
}

impl InterfaceAddress {
    /// The configured address; None for "dhcp" and "pppoe".
    pub fn cidr(&self) -> Option<Ipv4Cidr> {
        match self {
            InterfaceAddress::Static(cidr) => Some(*cidr),
            InterfaceAddress::Dhcp | InterfaceAddress::Pppoe => None,
        }
    }

    pub fn is_dhcp(&self) -> bool {
        *self == InterfaceAddress::Dhcp
    }

    pub fn is_pppoe(&self) -> bool {
        *self == InterfaceAddress::Pppoe
    }
}

impl FromStr for InterfaceAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "dhcp" => return Ok(InterfaceAddress::Dhcp),
            "pppoe" => return Ok(InterfaceAddress::Pppoe),
            _ => {}
        }
        text.parse()
            .map(InterfaceAddress::Static)
            .map_err(|err| format!("{err}, \"dhcp\" or \"pppoe\""))
    }
}

impl<'de> Deserialize<'de> for InterfaceAddress {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for InterfaceAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterfaceAddress::Static(cidr) => cidr.fmt(f),
            InterfaceAddress::Dhcp => f.write_str("dhcp"),
            InterfaceAddress::Pppoe => f.write_str("pppoe"),
        }
    }
}

/// A config that cannot be used, with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Load {
        path: String,
        source: config::ConfigError,
    },
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
}

/// Neighbour confirmations older than this are not worth trusting, and the nanoseconds stay
/// far from wrapping.
const MAX_REACHABLE_SECS: u64 = 86_400;

/// Rejected rather than masked: a prefix with host bits is almost always a typo.
pub(crate) fn no_host_bits6(field: String, prefix: &Ipv6Cidr) -> Result<(), ConfigError> {
    let network = pipeline::pipeline::ipv6_local::prefix_of(prefix.addr, prefix.len);
    if network == prefix.addr {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "{prefix} has host bits set; did you mean {network}/{}?",
            prefix.len
        ),
    ))
}

pub(crate) fn no_host_bits(field: String, prefix: &Ipv4Cidr) -> Result<(), ConfigError> {
    if u32::from(prefix.addr) & !prefix.mask() == 0 {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "{prefix} has host bits set; did you mean {}/{}?",
            prefix.network(),
            prefix.len
        ),
    ))
}

/// Every key of the file must be a plain name (letters, digits, `_`, `-`). The config crate
/// reads a quoted key such as `"a[-9]"` or `"a[33333333333332]"` as a path with an array
/// subscript and panics or aborts on the allocation (config 0.14; found by fuzzing), which
/// would take a running gateway down on reload. No field of the schema needs another key.
fn check_keys(text: &str) -> Result<(), ConfigError> {
    fn walk(value: &toml::Value, at: &str) -> Result<(), ConfigError> {
        match value {
            toml::Value::Table(table) => {
                for (key, value) in table {
                    let field = if at.is_empty() {
                        key.clone()
                    } else {
                        format!("{at}.{key}")
                    };
                    let plain = !key.is_empty()
                        && key
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !plain {
                        return Err(invalid(
                            field,
                            format!("{key:?} is not a field name (letters, digits, _ and - only)"),
                        ));
                    }
                    walk(value, &field)?;
                }
                Ok(())
            }
            toml::Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| walk(item, &format!("{at}[{i}]"))),
            _ => Ok(()),
        }
    }
    // Not TOML: the config crate's own error says it, with the line.
    match text.parse::<toml::Table>() {
        Ok(table) => walk(&toml::Value::Table(table), ""),
        Err(_) => Ok(()),
    }
}

fn subnets_overlap(a: &Ipv4Cidr, b: &Ipv4Cidr) -> bool {
    let wider = a.mask() & b.mask();
    u32::from(a.addr) & wider == u32::from(b.addr) & wider
}

impl GatewayConfig {
    /// `firewall.pinholes`: an interface with IPv6 to arrive on, a host address that can be
    /// one (global unicast, not the gateway's own) in an interface's IPv6 prefix, and a
    /// source prefix without host bits.
    fn validate_pinholes(&self) -> Result<(), ConfigError> {
        use pipeline::pipeline::ipv6_local::prefix_of;
        for (i, pinhole) in self.firewall.pinholes.iter().enumerate() {
            let field = |name: &str| format!("firewall.pinholes[{i}].{name}");
            let Some(port) = self
                .interfaces
                .iter()
                .position(|iface| iface.name == pinhole.interface)
            else {
                return Err(invalid(
                    field("interface"),
                    format!("no interface named {:?}", pinhole.interface),
                ));
            };
            if self.interfaces[port].ipv6.is_none() {
                return Err(invalid(
                    field("interface"),
                    format!("{:?} has no [interfaces.ipv6] table", pinhole.interface),
                ));
            }
            let to = pinhole.to;
            if to.is_multicast()
                || to.is_unspecified()
                || to.is_loopback()
                || pipeline::wire::ipv6::is_link_local(to)
            {
                return Err(invalid(
                    field("to"),
                    format!("{to} is not a global unicast address"),
                ));
            }
            let own_prefixes = self
                .interfaces
                .iter()
                .flat_map(|iface| iface.ipv6.iter().flat_map(|v6| &v6.addresses));
            let mut on_link = false;
            for own in own_prefixes {
                if own.addr == to {
                    return Err(invalid(
                        field("to"),
                        format!("{to} is the gateway's own address"),
                    ));
                }
                on_link |= prefix_of(own.addr, own.len) == prefix_of(to, own.len);
            }
            if !on_link {
                return Err(invalid(
                    field("to"),
                    format!("{to} is in no interface's IPv6 prefix"),
                ));
            }
            if let Some(source) = pinhole.source {
                if prefix_of(source.addr, source.len) != source.addr {
                    return Err(invalid(
                        field("source"),
                        format!(
                            "{source} has host bits set (the prefix is {}/{})",
                            prefix_of(source.addr, source.len),
                            source.len
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The interface `ipv6_routes[i]` leaves by, with the route checked: no host bits, one
    /// route per prefix, a unicast next hop on an interface with IPv6 (named by `interface`
    /// for a link-local one, else the one whose prefix holds it).
    pub fn ipv6_route_port(&self, i: usize) -> Result<u16, ConfigError> {
        use pipeline::pipeline::ipv6_local::prefix_of;
        let route = &self.ipv6_routes[i];
        let field = |name: &str| format!("ipv6_routes[{i}].{name}");
        let dest = route.destination;
        if prefix_of(dest.addr, dest.len) != dest.addr {
            return Err(invalid(
                field("destination"),
                format!(
                    "{dest} has host bits set (the prefix is {}/{})",
                    prefix_of(dest.addr, dest.len),
                    dest.len
                ),
            ));
        }
        if let Some(j) = self.ipv6_routes[..i].iter().position(|other| {
            (other.destination.addr, other.destination.len) == (dest.addr, dest.len)
        }) {
            return Err(invalid(
                field("destination"),
                format!(
                    "a second route for {dest} (ipv6_routes[{j}] is one); one next hop per prefix"
                ),
            ));
        }
        let via = route.via;
        if via.is_multicast() || via.is_unspecified() || via.is_loopback() {
            return Err(invalid(
                field("via"),
                format!("{via} is not a unicast address"),
            ));
        }
        let link_local = pipeline::wire::ipv6::is_link_local(via);
        let with_ipv6 = |iface: &InterfaceConfig| iface.ipv6.is_some();
        let port = match &route.interface {
            Some(name) => {
                let Some(port) = self.interfaces.iter().position(|iface| &iface.name == name) else {
                    return Err(invalid(field("interface"), format!("{name:?} names no interface")));
                };
                if !with_ipv6(&self.interfaces[port]) {
                    return Err(invalid(
                        field("interface"),
                        format!("{name:?} has no [interfaces.ipv6] table"),
                    ));
                }
                port
            }
            None if link_local => {
                return Err(invalid(
                    field("interface"),
                    format!("missing: the link-local next hop {via} is on which interface?"),
                ))
            }
            None => match self.interfaces.iter().position(|iface| {
                iface.ipv6.iter().flat_map(|v6| &v6.addresses).any(|own| {
                    prefix_of(own.addr, own.len) == prefix_of(via, own.len)
                })
            }) {
                Some(port) => port,
                None => {
                    return Err(invalid(
                        field("via"),
                        format!("{via} is in no interface's IPv6 prefix (a link-local next hop needs interface)"),
                    ))
                }
            },
        };
        Ok(port as u16)
    }
}

/// Interface `i`'s `[interfaces.ipv6]`: addresses a host could have (not multicast, loopback,
/// unspecified or link-local, which is automatic), prefix lengths 1..=128, no prefix shared
/// with an earlier interface, and what the advertisements can carry.
fn validate_ipv6(
    i: usize,
    ipv6: &Ipv6InterfaceConfig,
    earlier: &[InterfaceConfig],
) -> Result<(), ConfigError> {
    use pipeline::pipeline::ipv6_local::{
        prefix_of, MAX_ADVERTISED_DNS_SERVERS, MAX_ADVERTISED_PREFIXES,
    };
    let field = |name: &str| format!("interfaces[{i}].ipv6.{name}");
    if ipv6.addresses.len() > MAX_ADVERTISED_PREFIXES {
        return Err(invalid(
            field("addresses"),
            format!("at most {MAX_ADVERTISED_PREFIXES} addresses"),
        ));
    }
    for (k, cidr) in ipv6.addresses.iter().enumerate() {
        let addr = cidr.addr;
        let link_local = pipeline::wire::ipv6::is_link_local(addr);
        if addr.is_multicast() || addr.is_loopback() || addr.is_unspecified() || link_local {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                format!(
                    "{cidr} is not a unicast global or unique-local address (the link-local \
                     one is automatic)"
                ),
            ));
        }
        if cidr.len == 0 {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                "prefix length must be 1..=128",
            ));
        }
        let network = prefix_of(addr, cidr.len);
        let clash = earlier.iter().enumerate().find(|(_, other)| {
            other
                .ipv6
                .iter()
                .flat_map(|v6| &v6.addresses)
                .any(|theirs| {
                    let len = theirs.len.min(cidr.len);
                    prefix_of(theirs.addr, len) == prefix_of(network, len)
                })
        });
        if let Some((j, other)) = clash {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                format!(
                    "{cidr} overlaps a prefix of interfaces[{j}] ({}): a connected prefix must \
                     belong to one interface",
                    other.name
                ),
            ));
        }
    }
    if ipv6.dns_servers.len() > MAX_ADVERTISED_DNS_SERVERS {
        return Err(invalid(
            field("dns_servers"),
            format!("at most {MAX_ADVERTISED_DNS_SERVERS} servers"),
        ));
    }
    if let Some(bad) = ipv6
        .dns_servers
        .iter()
        .find(|server| server.is_multicast() || server.is_unspecified())
    {
        return Err(invalid(
            field("dns_servers"),
            format!("{bad} is not a unicast address"),
        ));
    }
    if !(4..=1800).contains(&ipv6.ra_interval_secs) {
        return Err(invalid(
            field("ra_interval_secs"),
            format!(
                "{} is outside 4..=1800 (RFC 4861's MaxRtrAdvInterval)",
                ipv6.ra_interval_secs
            ),
        ));
    }
    if ipv6.autoconfigure && ipv6.delegated_prefix {
        return Err(invalid(
            field("delegated_prefix"),
            "not with autoconfigure: an interface is configured by the ISP's routers or \
             addressed from the delegated prefix, not both",
        ));
    }
    if ipv6.autoconfigure && ipv6.router_advertisements {
        return Err(invalid(
            field("router_advertisements"),
            "not with autoconfigure: the ISP's routers advertise that link",
        ));
    }
    if ipv6.router_advertisements && ipv6.addresses.is_empty() && !ipv6.delegated_prefix {
        return Err(invalid(
            field("router_advertisements"),
            "needs addresses (or delegated_prefix): there would be no prefix to announce",
        ));
    }
    Ok(())
}

/// DPDK's log levels as `--log-level` takes them: a level's name or any start of it
/// ("err" is "error"), or its number 1 (emergency) to 8 (debug); optionally after a log
/// type pattern and a colon ("pmd.net.*:debug") or a regular expression and a comma.
fn check_log_level(text: &str) -> Result<(), String> {
    const LEVELS: [&str; 8] = [
        "emergency",
        "alert",
        "critical",
        "error",
        "warning",
        "notice",
        "info",
        "debug",
    ];
    let level = match text.rsplit_once([':', ',']) {
        Some((pattern, level)) if !pattern.is_empty() => level,
        _ => text,
    };
    let named = !level.is_empty() && LEVELS.iter().any(|name| name.starts_with(level));
    let numbered = level.parse::<u8>().is_ok_and(|n| (1..=8).contains(&n));
    if named || numbered {
        return Ok(());
    }
    let meant = match level.to_ascii_lowercase().as_str() {
        "verbose" | "trace" | "all" | "debug2" => "; did you mean \"debug\"?",
        "fatal" | "panic" => "; did you mean \"crit\"?",
        "quiet" | "silent" | "none" | "off" => "; did you mean \"emerg\" (the quietest)?",
        "information" | "informational" => "; did you mean \"info\"?",
        _ => "",
    };
    Err(format!(
        "{text:?} is not a DPDK log level: emerg, alert, crit, err, warning, notice, info, \
         debug, or 1 to 8 (optionally after a log type pattern, \"pmd.net.*:debug\"){meant}"
    ))
}

/// A MAC an interface can have, written as the EAL's bond device string takes it: six
/// two-digit hex groups, unicast and not all zero.
fn check_unicast_mac(text: &str) -> Result<(), String> {
    let Ok(mac) = text.parse::<pipeline::wire::EthernetAddress>() else {
        return Err(format!(
            "{text:?} is not a MAC address: six two-digit hex groups, \"02:00:00:00:00:01\""
        ));
    };
    if mac.0 == [0; 6] {
        return Err(format!("{text}: all zero is no interface's MAC"));
    }
    if mac.0[0] & 1 != 0 {
        return Err(format!(
            "{text} is a multicast MAC (the first byte is odd); an interface needs a unicast \
             one, e.g. {:02x}:{}",
            mac.0[0] & !1,
            text.get(3..).unwrap_or_default()
        ));
    }
    Ok(())
}

/// A log section's syslog settings (`nat.log`, `firewall.log`): the facility, the workers'
/// queue size, and a Unix socket's absolute path.
fn validate_syslog_sender(
    section: &str,
    facility: u8,
    queue_events: usize,
    syslog_unix: &Option<PathBuf>,
) -> Result<(), ConfigError> {
    if facility > 23 {
        return Err(invalid(
            format!("{section}.facility"),
            format!("{facility} is not a syslog facility (0-23; local0 is 16)"),
        ));
    }
    if !(1..=1 << 24).contains(&queue_events) {
        return Err(invalid(
            format!("{section}.queue_events"),
            format!("{queue_events} is not between 1 and 16777216"),
        ));
    }
    if let Some(path) = syslog_unix.as_ref().filter(|path| !path.is_absolute()) {
        return Err(invalid(
            format!("{section}.syslog_unix"),
            format!("{} is not an absolute path", path.display()),
        ));
    }
    Ok(())
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The file's values as written, deserialized without the `config` crate, which would turn
/// `mtu = "1500"` into 1500 and `tcp_loose = "yes"` into true: a value of the wrong type in
/// the file is refused, naming the field and the line. The `GATEWAY__*` environment
/// overrides still go through the crate's parsing, since a variable's value is always text.
fn check_types(path: &Path, text: &str) -> Result<(), ConfigError> {
    // Not TOML: the config crate's own error says it, with the line.
    if text.parse::<toml::Table>().is_err() {
        return Ok(());
    }
    let Err(err) =
        serde_path_to_error::deserialize::<_, GatewayConfig>(toml::Deserializer::new(text))
    else {
        return Ok(());
    };
    let field = err.path().to_string();
    let inner = err.into_inner();
    let (field, reason) = explain(&field, inner.message());
    let line = inner
        .span()
        .and_then(|span| text.get(..span.start))
        .map(|before| before.matches('\n').count() + 1);
    let reason = match line {
        Some(line) => format!("{reason}; line {line} in {}", path.display()),
        None => format!("{reason}; in {}", path.display()),
    };
    Err(ConfigError::Invalid { field, reason })
}

/// A deserialization error as [`explain`] words it.
fn explained(field: &str, message: &str) -> ConfigError {
    let (field, reason) = explain(field, message);
    ConfigError::Invalid { field, reason }
}

/// Serde's words for a value that does not fit, made to name the field (an unknown or missing
/// key is appended to the path), what is allowed (a type's range, not "u16") and what was
/// probably meant (the nearest field or value, a number without its quotes).
fn explain(path: &str, message: &str) -> (String, String) {
    let mut field = if path == "." {
        String::new()
    } else {
        path.to_string()
    };
    let join = |at: &str, key: &str| {
        if at == key || at.ends_with(&format!(".{key}")) {
            at.to_string()
        } else if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    let mut reason = message.to_string();
    for (rust, range) in [
        ("u8", "a whole number 0 to 255"),
        ("u16", "a whole number 0 to 65535"),
        ("u32", "a whole number 0 to 4294967295"),
        ("u64", "a whole number 0 to 18446744073709551615"),
        ("usize", "a whole number 0 to 18446744073709551615"),
        ("i32", "a whole number -2147483648 to 2147483647"),
    ] {
        if let Some(head) = reason.strip_suffix(&format!("expected {rust}")) {
            reason = format!("{head}expected {range}");
            break;
        }
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((key, expected)) = rest.split_once('`') {
            field = join(&field, key);
            if let Some(near) = closest(key, &backticked(expected)) {
                reason = format!("{reason}; did you mean `{near}`?");
            }
        }
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some((key, _)) = rest.split_once('`') {
            field = join(&field, key);
        }
    } else if let Some(rest) = message.strip_prefix("unknown variant `") {
        if let Some((value, expected)) = rest.split_once('`') {
            let choices = backticked(expected);
            if let Some(near) = synonym(value, &choices).or_else(|| closest(value, &choices)) {
                reason = format!("{reason}; did you mean `{near}`?");
            }
        }
    } else if let Some(rest) = message.strip_prefix("invalid type: string \"") {
        if let Some((value, _)) = rest.split_once("\", expected") {
            let bare = value.trim();
            let key = field.rsplit('.').next().unwrap_or_default();
            if bare.parse::<f64>().is_ok() || bare == "true" || bare == "false" {
                reason = format!("{reason}: write it without quotes, {key} = {bare}");
            } else if message.ends_with("expected a boolean") {
                let meant = match bare.to_ascii_lowercase().as_str() {
                    "yes" | "on" | "y" | "1" | "enabled" => "true",
                    "no" | "off" | "n" | "0" | "disabled" => "false",
                    _ => "true or false",
                };
                reason = format!("{reason}: write {key} = {meant}, without quotes");
            }
        }
    }
    let leaf = field.rsplit('.').next().unwrap_or_default();
    let numeric = reason.contains("a whole number") || reason.contains("integer");
    let hint = match leaf {
        "mtu" if numeric => Some(
            "the IP MTU is 576 up to mempool.data_room less 18 bytes of Ethernet framing \
             (2030 with the default data_room of 2048; 1500 is usual)",
        ),
        "vlan" if numeric => Some("a VLAN id is 1 to 4094"),
        "to_port" if numeric => Some("a port is 1 to 65535"),
        _ => None,
    };
    if let Some(hint) = hint {
        reason = format!("{reason}; {hint}");
    }
    (field, reason)
}

/// The names between backticks in serde's "expected one of `a`, `b`".
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// What an operator writes for one of the firewall's actions.
fn synonym<'a>(value: &str, choices: &[&'a str]) -> Option<&'a str> {
    let meant = match value.to_ascii_lowercase().as_str() {
        "allow" | "permit" | "pass" | "ok" | "yes" => "accept",
        "deny" | "block" | "discard" | "blackhole" => "drop",
        "refuse" | "reset" | "deny-with-reset" => "reject",
        _ => return None,
    };
    choices.iter().copied().find(|choice| *choice == meant)
}

/// The choice nearest `text` by edit distance (a swap of two neighbours is one edit), if it
/// is a likely typo: one edit in a word of up to four letters, two in a longer one.
fn closest<'a>(text: &str, choices: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &[char], b: &[char]) -> usize {
        // Optimal string alignment: three rows of the table.
        let mut before: Vec<usize> = Vec::new();
        let mut above: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut row = vec![i; b.len() + 1];
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                row[j] = (above[j - 1] + cost).min(above[j] + 1).min(row[j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    row[j] = row[j].min(before[j - 2] + 1);
                }
            }
            before = std::mem::replace(&mut above, row);
        }
        above[b.len()]
    }
    let text: Vec<char> = text.to_ascii_lowercase().chars().collect();
    let allowed = if text.len() <= 4 { 1 } else { 2 };
    choices
        .iter()
        .map(|choice| {
            let chars: Vec<char> = choice.chars().collect();
            (distance(&text, &chars), *choice)
        })
        .filter(|&(d, _)| d <= allowed)
        .min_by_key(|&(d, _)| d)
        .map(|(_, choice)| choice)
}

/// A config file's text as a source of the `config` crate, named by the file's path: every
/// value carries the path as its origin, so a type error says which file it is in, as it did
/// when `config::File` read the file itself.
#[derive(Clone, Debug)]
struct NamedToml {
    path: String,
    text: String,
}

impl config::Source for NamedToml {
    fn clone_into_box(&self) -> Box<dyn config::Source + Send + Sync> {
        Box::new(self.clone())
    }

    fn collect(&self) -> Result<config::Map<String, config::Value>, config::ConfigError> {
        use config::Format;
        config::FileFormat::Toml
            .parse(Some(&self.path), &self.text)
            .map_err(|cause| config::ConfigError::FileParse {
                uri: Some(self.path.clone()),
                cause,
            })
    }
}

/// The config file's text, for [`GatewayConfig::from_text`]; the error names the file.
pub fn read_config_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|err| ConfigError::Load {
        path: path.display().to_string(),
        source: config::ConfigError::Foreign(Box::new(err)),
    })
}

impl GatewayConfig {
    /// Reads, applies `GATEWAY__*` environment overrides, and validates.
    pub fn load(path: &Path) -> Result<GatewayConfig, ConfigError> {
        Self::from_text(path, &read_config_file(path)?)
    }

    /// As [`load`](Self::load), from the text of the file at `path`, read once by the caller:
    /// whoever keeps the text's digest (start-up and reload, for `gateway ctl show config`)
    /// then describes exactly what was loaded, even if the file changes meanwhile. `path`
    /// names the file in errors.
    pub fn from_text(path: &Path, text: &str) -> Result<GatewayConfig, ConfigError> {
        Self::from_text_and_environment(path, text, None)
    }

    /// As [`from_text`](Self::from_text), with the `GATEWAY__*` overrides taken from
    /// `environment` instead of the process's where given (tests).
    fn from_text_and_environment(
        path: &Path,
        text: &str,
        environment: Option<config::Map<String, String>>,
    ) -> Result<GatewayConfig, ConfigError> {
        let load_error = |source| ConfigError::Load {
            path: path.display().to_string(),
            source,
        };
        check_keys(text)?;
        check_types(path, text)?;
        let source = config::Config::builder()
            .add_source(NamedToml {
                path: path.display().to_string(),
                text: text.to_string(),
            })
            .add_source(
                config::Environment::with_prefix("GATEWAY")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .source(environment),
            )
            .build()
            .map_err(load_error)?;
        // The path to a value that fails to deserialize (a range that runs backwards, an
        // unknown mode) names the field, as every other error here does.
        let config: GatewayConfig = serde_path_to_error::deserialize(source).map_err(|err| {
            let field = err.path().to_string();
            explained(&field, &err.into_inner().to_string())
        })?;
        config.validate()?;
        Ok(config)
    }

    /// `address = "pppoe"` and the `pppoe` table go together; the session's frames carry 8
    /// bytes more than the datagram, so the MTU is at most 1492.
    fn validate_pppoe(&self, i: usize) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = |name: &str| format!("interfaces[{i}].{name}");
        match (&iface.pppoe, iface.address.is_pppoe()) {
            (None, false) => return Ok(()),
            (None, true) => {
                return Err(invalid(
                    field("pppoe"),
                    "missing: address = \"pppoe\" needs a [interfaces.pppoe] table with username and password",
                ))
            }
            (Some(_), false) => {
                return Err(invalid(
                    field("pppoe"),
                    format!(
                        "is set but the address is {}: write address = \"pppoe\" to run a PPPoE session",
                        iface.address
                    ),
                ))
            }
            (Some(_), true) => {}
        }
        let pppoe = iface.pppoe.as_ref().expect("matched above");
        if pppoe.username.is_empty() {
            return Err(invalid(field("pppoe.username"), "must not be empty"));
        }
        if pppoe.lcp_echo_interval_secs > 0 && pppoe.lcp_echo_failures == 0 {
            return Err(invalid(
                field("pppoe.lcp_echo_failures"),
                "must be at least 1 while lcp_echo_interval_secs is not 0",
            ));
        }
        if iface.mtu() > PPPOE_MTU {
            return Err(invalid(
                field("mtu"),
                format!(
                    "{} is more than PPPoE carries in a 1500-byte frame ({PPPOE_MTU}); omit it for {PPPOE_MTU}",
                    iface.mtu()
                ),
            ));
        }
        if iface.kernel_twin == Some(true) {
            return Err(invalid(
                field("kernel_twin"),
                "a PPPoE interface has no kernel twin: its session lives in the gateway",
            ));
        }
        if pppoe.default_route && self.routes.iter().any(|route| route.destination.len == 0) {
            return Err(invalid(
                field("pppoe.default_route"),
                "the session would route 0.0.0.0/0, and [[routes]] has a default route already: remove one, or set default_route = false",
            ));
        }
        if let Some(j) = self.interfaces[..i].iter().position(|other| {
            other.pppoe.as_ref().is_some_and(|p| p.default_route) && pppoe.default_route
        }) {
            return Err(invalid(
                field("pppoe.default_route"),
                format!("interfaces[{j}] routes 0.0.0.0/0 by its PPPoE session already"),
            ));
        }
        Ok(())
    }

    /// Port blocks (`nat.port_block_size`) must be whole words of the pool's bitmaps, few
    /// enough per host for its table, and need every worker to own one port class.
    fn validate_port_blocks(&self) -> Result<(), ConfigError> {
        use pipeline::state::nat::blocks::{blocks_per_host, BLOCK_ALIGN, MAX_BLOCKS_PER_HOST};
        let size = self.nat.port_block_size;
        if size == 0 {
            return Ok(());
        }
        if !size.is_multiple_of(BLOCK_ALIGN) || size > 32768 {
            return Err(invalid(
                "nat.port_block_size",
                format!("must be 0 (off) or a multiple of {BLOCK_ALIGN} up to 32768, not {size}"),
            ));
        }
        let blocks = blocks_per_host(self.nat.host_ports, size);
        if blocks > MAX_BLOCKS_PER_HOST {
            return Err(invalid(
                "nat.port_block_size",
                format!(
                    "nat.host_ports = {} would take {blocks} blocks of {size} per host, at most {MAX_BLOCKS_PER_HOST}: raise the block size or lower host_ports",
                    self.nat.host_ports
                ),
            ));
        }
        let workers = self.workers.lcores.len();
        if !workers.is_power_of_two() {
            return Err(invalid(
                "nat.port_block_size",
                format!(
                    "needs a power-of-two number of workers (workers.lcores has {workers}), so that each owns one port class and a block's ports step evenly"
                ),
            ));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_eal()?;
        if self.workers.lcores.is_empty() {
            return Err(invalid(
                "workers.lcores",
                "at least one worker lcore is needed",
            ));
        }
        let max_lcore = dpdk_sys::RTE_MAX_LCORE;
        if self.eal.main_lcore >= max_lcore {
            return Err(invalid(
                "eal.main_lcore",
                format!(
                    "{} is not an lcore id: DPDK's are 0 to {} (RTE_MAX_LCORE is {max_lcore})",
                    self.eal.main_lcore,
                    max_lcore - 1
                ),
            ));
        }
        let mut lcores = HashSet::new();
        for (i, &lcore) in self.workers.lcores.iter().enumerate() {
            if lcore >= max_lcore {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!(
                        "{lcore} is not an lcore id: DPDK's are 0 to {} (RTE_MAX_LCORE is \
                         {max_lcore}); eal.cpus maps lcores to CPUs",
                        max_lcore - 1
                    ),
                ));
            }
            if lcore == self.eal.main_lcore {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!("lcore {lcore} is eal.main_lcore, which runs the control thread"),
                ));
            }
            if !lcores.insert(lcore) {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!("lcore {lcore} is listed twice"),
                ));
            }
        }
        if !self.eal.cpus.is_empty() && self.eal.cpus.len() != self.workers.lcores.len() + 1 {
            return Err(invalid(
                "eal.cpus",
                format!(
                    "lists {} CPUs for {} lcores (the main lcore and {} workers)",
                    self.eal.cpus.len(),
                    self.workers.lcores.len() + 1,
                    self.workers.lcores.len()
                ),
            ));
        }
        if self.mempool.cache > 512 || self.mempool.cache as f64 > self.mempool.mbufs as f64 / 1.5 {
            return Err(invalid(
                "mempool.cache",
                "must be at most 512 and at most mbufs / 1.5 (DPDK's limits)",
            ));
        }
        if self.interfaces.is_empty() {
            return Err(invalid("interfaces", "at least one interface is needed"));
        }
        if self.interfaces.len() > pipeline::counters::MAX_INTERFACES {
            return Err(invalid(
                "interfaces",
                format!(
                    "{} interfaces, more than the {} each worker keeps counters for",
                    self.interfaces.len(),
                    pipeline::counters::MAX_INTERFACES
                ),
            ));
        }
        let mut names = HashSet::new();
        let mut devices = HashSet::new();
        for (i, iface) in self.interfaces.iter().enumerate() {
            let field = |name: &str| format!("interfaces[{i}].{name}");
            if iface.name.is_empty() || !names.insert(iface.name.as_str()) {
                return Err(invalid(
                    field("name"),
                    format!("{:?} is empty or used twice", iface.name),
                ));
            }
            if iface.is_vlan() {
                self.validate_vlan(i)?;
            } else if iface.device.is_empty() {
                return Err(invalid(
                    field("device"),
                    "missing: give a DPDK device, or parent and vlan for a VLAN subinterface",
                ));
            } else if !devices.insert(device_name(&iface.device)) {
                return Err(invalid(
                    field("device"),
                    format!("{:?} is used twice", iface.device),
                ));
            }
            // "dhcp" needs a twin: checked with the twins (`crate::config::twins::validate`).
            if let Some(address) = iface.address.cidr() {
                if address.len == 0 || address.len > 30 {
                    return Err(invalid(field("address"), "prefix length must be 1..=30"));
                }
                let host_bits = u32::from(address.addr) & !address.mask();
                let unusable = if address.addr.is_loopback() {
                    Some("a loopback address")
                } else if address.addr.is_multicast() {
                    Some("a multicast address")
                } else if address.addr.is_broadcast() || address.addr.is_unspecified() {
                    Some("not a host's address")
                } else if host_bits == 0 {
                    Some("the subnet's network address")
                } else if host_bits == !address.mask() {
                    Some("the subnet's broadcast address")
                } else {
                    None
                };
                if let Some(what) = unusable {
                    return Err(invalid(
                        field("address"),
                        format!("{address}: {what}; give the gateway one of the subnet's host addresses"),
                    ));
                }
                if let Some((j, other)) =
                    self.interfaces[..i].iter().enumerate().find(|(_, other)| {
                        other
                            .address
                            .cidr()
                            .is_some_and(|theirs| subnets_overlap(&theirs, &address))
                    })
                {
                    return Err(invalid(
                        field("address"),
                        format!(
                            "{} overlaps interfaces[{j}] ({}, {}): a connected subnet must belong to one interface",
                            address, other.name, other.address
                        ),
                    ));
                }
            }
            if let Some(ipv6) = &iface.ipv6 {
                validate_ipv6(i, ipv6, &self.interfaces[..i])?;
            }
            if let Some(mac) = iface.bond.as_ref().and_then(|bond| bond.mac.as_ref()) {
                check_unicast_mac(mac).map_err(|reason| invalid(field("bond.mac"), reason))?;
            }
            if let Some(key) = &iface.rss_key {
                if parse_hex(key).is_none() {
                    return Err(invalid(
                        field("rss_key"),
                        "must be an even number of hex digits",
                    ));
                }
            }
            let framing = if iface.is_vlan() { 22 } else { 18 };
            if iface.mtu() < 576
                || u32::from(iface.mtu()) + framing > u32::from(self.mempool.data_room)
            {
                return Err(invalid(
                    field("mtu"),
                    format!(
                        "{} must be at least 576 and, with {framing} bytes of Ethernet framing, fit mempool.data_room ({})",
                        iface.mtu(), self.mempool.data_room
                    ),
                ));
            }
            self.validate_pppoe(i)?;
            if let Some(TcpMssConfig::Bytes(bytes)) = iface.tcp_mss {
                let most = TcpMssConfig::Auto.bytes(iface.mtu());
                if !(MIN_TCP_MSS..=most).contains(&bytes) {
                    return Err(invalid(
                        field("tcp_mss"),
                        format!(
                            "{bytes} must be from {MIN_TCP_MSS} to the MTU ({}) less 40 bytes of headers ({most}), or \"auto\"",
                            iface.mtu()
                        ),
                    ));
                }
            }
        }
        for (i, route) in self.routes.iter().enumerate() {
            let dest = route.destination;
            no_host_bits(format!("routes[{i}].destination"), &dest)?;
            if let Some(j) = self.routes[..i].iter().position(|other| {
                (other.destination.addr, other.destination.len) == (dest.addr, dest.len)
            }) {
                let what = if dest.len == 0 {
                    "a second default route"
                } else {
                    "a second route"
                };
                return Err(invalid(
                    format!("routes[{i}].destination"),
                    format!("{what} for {dest} (routes[{j}] is one); one next hop per prefix"),
                ));
            }
            if self.interface_for(route.via).is_none() {
                return Err(invalid(
                    format!("routes[{i}].via"),
                    format!("{} is not in any interface's subnet", route.via),
                ));
            }
        }
        for i in 0..self.ipv6_routes.len() {
            self.ipv6_route_port(i)?;
        }
        self.validate_stateful()?;
        twins::validate(self)?;
        if self.qos.enabled && (self.qos.uplink_mbps == 0 || self.qos.downlink_mbps == 0) {
            return Err(invalid(
                "qos",
                "uplink_mbps and downlink_mbps must be positive",
            ));
        }
        if let Some(i) = self
            .qos
            .priority
            .iter()
            .position(|r| r.dscp.is_some_and(|d| d > 63))
        {
            return Err(invalid(format!("qos.priority[{i}].dscp"), "DSCP is 0..=63"));
        }
        for (i, rule) in self.qos.priority.iter().enumerate() {
            if let Some(mac) = &rule.mac {
                if mac.parse::<pipeline::wire::EthernetAddress>().is_err() {
                    return Err(invalid(
                        format!("qos.priority[{i}].mac"),
                        format!("{mac:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"),
                    ));
                }
            }
        }
        if self.traffic_meter.top_hosts > 100 {
            return Err(invalid(
                "traffic_meter.top_hosts",
                "at most 100: each host is a metric series",
            ));
        }
        self.validate_mempool_size()?;
        if self.neighbors.reachable_secs == 0 || self.neighbors.reachable_secs > MAX_REACHABLE_SECS
        {
            return Err(invalid(
                "neighbors.reachable_secs",
                format!("must be 1..={MAX_REACHABLE_SECS} (a day)"),
            ));
        }
        if self.neighbors.capacity == 0 || self.neighbors.pending_per_neighbor == 0 {
            return Err(invalid(
                "neighbors",
                "capacity and pending_per_neighbor must be positive",
            ));
        }
        if self.neighbors.pending_total == 0
            || self.neighbors.pending_total > self.mempool.mbufs as usize / 4
        {
            return Err(invalid(
                "neighbors.pending_total",
                format!(
                    "must be positive and at most a quarter of mempool.mbufs ({}), so packets \
                     held for unresolved next hops cannot starve the ports of buffers",
                    self.mempool.mbufs / 4
                ),
            ));
        }
        self.validate_state()?;
        self.validate_nat_log()?;
        self.validate_firewall_log()?;
        if self.neighbors.locktime_ms >= self.neighbors.reachable_secs.saturating_mul(1000) {
            return Err(invalid(
                "neighbors.locktime_ms",
                "must be shorter than neighbors.reachable_secs, or no neighbour could ever \
                 change its MAC",
            ));
        }
        Ok(())
    }

    /// The state directory must be absolute (the service's working directory is no place
    /// for state) and, where it exists, a directory.
    /// The EAL's memory options come from `memory_mb`, `socket_memory_mb` and `hugepages`
    /// only: the same options again in `extra_args` would make DPDK refuse to start (`-m`
    /// beside `--socket-mem`) or quietly fight the fields.
    fn validate_eal(&self) -> Result<(), ConfigError> {
        const OWNED: &[(&str, &str)] = &[
            ("-m", "eal.memory_mb"),
            ("--socket-mem", "eal.socket_memory_mb"),
            ("--no-huge", "eal.hugepages = \"off\""),
        ];
        for (i, arg) in self.eal.extra_args.iter().enumerate() {
            let owner = OWNED
                .iter()
                .find(|(name, _)| crate::dpdk::gives_option(arg, name));
            if let Some((name, field)) = owner {
                return Err(invalid(
                    format!("eal.extra_args[{i}]"),
                    format!("{arg:?}: set {field} instead of passing {name} to the EAL"),
                ));
            }
        }
        check_log_level(&self.eal.log_level).map_err(|reason| invalid("eal.log_level", reason))?;
        if self.eal.pdump && self.eal.hugepages == HugepageMode::Off {
            return Err(invalid(
                "eal.pdump",
                "needs hugepages (eal.hugepages = \"auto\" or \"required\"): the capture tools \
                 are secondary processes, which map the gateway's memory from its hugepage files",
            ));
        }
        let per_node = &self.eal.socket_memory_mb;
        if !per_node.is_empty() && per_node.iter().all(|&mb| mb == 0) {
            return Err(invalid(
                "eal.socket_memory_mb",
                "gives no node any memory; leave it empty to use eal.memory_mb",
            ));
        }
        Ok(())
    }

    fn validate_firewall_log(&self) -> Result<(), ConfigError> {
        let log = &self.firewall.log;
        validate_syslog_sender(
            "firewall.log",
            log.facility,
            log.queue_events,
            &log.syslog_unix,
        )?;
        if log.per_sec == 0 || log.burst == 0 {
            let field = if log.per_sec == 0 { "per_sec" } else { "burst" };
            return Err(invalid(
                format!("firewall.log.{field}"),
                "must be positive (to log nothing, leave log = true off the rules)",
            ));
        }
        if let Some(i) = self.firewall.rules.iter().position(|rule| rule.log) {
            if !log.enabled() {
                return Err(invalid(
                    format!("firewall.rules[{i}].log"),
                    "no [firewall.log] destination: set firewall.log.syslog_udp or syslog_unix",
                ));
            }
        }
        Ok(())
    }

    fn validate_nat_log(&self) -> Result<(), ConfigError> {
        let log = &self.nat.log;
        validate_syslog_sender("nat.log", log.facility, log.queue_events, &log.syslog_unix)
    }

    fn validate_state(&self) -> Result<(), ConfigError> {
        let directory = &self.state.directory;
        if !directory.is_absolute() {
            return Err(invalid(
                "state.directory",
                format!("{} is not an absolute path", directory.display()),
            ));
        }
        if directory.exists() && !directory.is_dir() {
            return Err(invalid(
                "state.directory",
                format!("{} exists and is not a directory", directory.display()),
            ));
        }
        Ok(())
    }

    /// Every RX descriptor holds a buffer from start, and every lcore's cache may hold
    /// `mempool.cache` more: a pool smaller than that cannot even start the ports. TX
    /// descriptors, rings and held packets want more (DPDK's l3fwd sizes for all of them).
    fn validate_mempool_size(&self) -> Result<(), ConfigError> {
        let workers = self.workers.lcores.len() as u64;
        let rx: u64 = self
            .interfaces
            .iter()
            .map(|iface| u64::from(iface.rx_descriptors) * workers)
            .sum();
        let tx: u64 = self
            .interfaces
            .iter()
            .map(|iface| u64::from(iface.tx_descriptors) * (workers + 1))
            .sum();
        let caches = u64::from(self.mempool.cache) * (workers + 1);
        let needed = rx + caches;
        if u64::from(self.mempool.mbufs) < needed {
            return Err(invalid(
                "mempool.mbufs",
                format!(
                    "{} cannot fill the RX descriptors ({rx}: rx_descriptors x {workers} workers \
                     per interface) and the lcore caches ({caches}); at least {needed} are \
                     needed, {} with the TX descriptors",
                    self.mempool.mbufs,
                    needed + tx
                ),
            ));
        }
        Ok(())
    }

    fn validate_stateful(&self) -> Result<(), ConfigError> {
        use pipeline::state::conntrack::MAX_CAPACITY;
        if !(1..=MAX_CAPACITY).contains(&self.conntrack.capacity) {
            return Err(invalid(
                "conntrack.capacity",
                format!(
                    "{} is not 1 to {MAX_CAPACITY} (2^28) flows per worker",
                    self.conntrack.capacity
                ),
            ));
        }
        let conntrack = &self.conntrack;
        if conntrack.host_flows == 0 {
            return Err(invalid("conntrack.host_flows", "must be positive"));
        }
        if conntrack.host_half_open == 0 {
            return Err(invalid("conntrack.host_half_open", "must be positive"));
        }
        if conntrack
            .half_open
            .is_some_and(|half_open| half_open == 0 || half_open > conntrack.capacity)
        {
            return Err(invalid(
                "conntrack.half_open",
                "must be positive and at most conntrack.capacity",
            ));
        }
        if conntrack.hosts == 0 || conntrack.hosts > pipeline::state::conntrack::MAX_CAPACITY {
            return Err(invalid(
                "conntrack.hosts",
                format!("must be 1..={}", pipeline::state::conntrack::MAX_CAPACITY),
            ));
        }
        if !(32..=128).contains(&conntrack.host_prefix6) {
            return Err(invalid(
                "conntrack.host_prefix6",
                format!(
                    "{} is not a prefix length 32..=128 (an IPv6 host is its address's first \
                     that many bits; 64, a LAN's subnet, by default)",
                    conntrack.host_prefix6
                ),
            ));
        }
        if self.nat.host_ports == 0 {
            return Err(invalid("nat.host_ports", "must be positive"));
        }
        self.validate_port_blocks()?;
        if self.conntrack.tcp_established_secs < 7440 {
            tracing::warn!("conntrack.tcp_established_secs is below RFC 5382's 2 h 4 min");
        }
        if self.conntrack.udp_secs < 120 {
            tracing::warn!("conntrack.udp_secs is below RFC 4787's 2 min");
        }
        let names: Vec<&str> = self.interfaces.iter().map(|i| i.name.as_str()).collect();
        for (i, name) in self.nat.masquerade.iter().enumerate() {
            if !names.contains(&name.as_str()) {
                return Err(invalid(
                    format!("nat.masquerade[{i}]"),
                    format!("no interface named {name:?}"),
                ));
            }
            // One pool pairs each LAN host with one external address whatever interface its
            // flows leave by: with two uplinks, flows out of one would carry the other's
            // address, which its ISP drops.
            if i > 0 && self.nat.masquerade[..i].iter().any(|other| other != name) {
                return Err(invalid(
                    format!("nat.masquerade[{i}]"),
                    format!(
                        "a second masqueraded interface ({name:?} beside {:?}) is not supported: \
                         masquerade translates to one uplink's address",
                        self.nat.masquerade[0]
                    ),
                ));
            }
        }
        let range = self.nat.port_range;
        if range.first < 1024 || range.last - range.first < 255 {
            return Err(invalid(
                "nat.port_range",
                "must start at 1024 or above and hold at least 256 ports",
            ));
        }
        for (i, forward) in self.nat.port_forwards.iter().enumerate() {
            let field = |name: &str| format!("nat.port_forwards[{i}].{name}");
            if !names.contains(&forward.interface.as_str()) {
                return Err(invalid(
                    field("interface"),
                    format!("no interface named {:?}", forward.interface),
                ));
            }
            let Some(target_iface) = self.interface_for(forward.to) else {
                return Err(invalid(
                    field("to"),
                    format!("{} is not on a connected subnet", forward.to),
                ));
            };
            let Some(subnet) = &self.interfaces[target_iface].address.cidr() else {
                continue;
            };
            if forward.to == subnet.addr {
                return Err(invalid(
                    field("to"),
                    format!("{} is the gateway's own address", forward.to),
                ));
            }
            let host_bits = u32::from(forward.to) & !subnet.mask();
            if host_bits == 0 || host_bits == !subnet.mask() {
                return Err(invalid(
                    field("to"),
                    format!(
                        "{} is the network or broadcast address of {subnet}",
                        forward.to
                    ),
                ));
            }
            let span = forward.port.last - forward.port.first;
            if forward.to_port == Some(0) {
                return Err(invalid(
                    field("to_port"),
                    "0 is no port; omit to_port to forward to the same port",
                ));
            }
            if forward
                .to_port
                .is_some_and(|to| to.checked_add(span).is_none())
            {
                return Err(invalid(field("to_port"), "the range runs past port 65535"));
            }
            // Two forwards of one port: the first would win, silently.
            if let Some((j, earlier)) =
                self.nat.port_forwards[..i]
                    .iter()
                    .enumerate()
                    .find(|(_, earlier)| {
                        earlier.interface == forward.interface
                            && earlier.protocol == forward.protocol
                            && earlier.port.first <= forward.port.last
                            && forward.port.first <= earlier.port.last
                    })
            {
                return Err(invalid(
                    field("port"),
                    format!(
                        "{}-{} overlaps nat.port_forwards[{j}] ({}-{}) on the same interface and protocol",
                        forward.port.first, forward.port.last, earlier.port.first, earlier.port.last
                    ),
                ));
            }
            if forward.port.first <= range.last && forward.port.last >= range.first {
                tracing::debug!(
                    "nat.port_forwards[{i}]: ports {}-{} are reserved out of the NAT port range",
                    forward.port.first,
                    forward.port.last
                );
            }
        }
        self.validate_pinholes()?;
        let zones = self.zone_names();
        let known_zone = |zone: &str| zone == "local" || zones.iter().any(|z| z == zone);
        for (i, iface) in self.interfaces.iter().enumerate() {
            if iface.zone.as_deref() == Some("local") {
                return Err(invalid(
                    format!("interfaces[{i}].zone"),
                    "\"local\" is the gateway itself, not a zone an interface can join",
                ));
            }
        }
        for (i, policy) in self.firewall.policy.iter().enumerate() {
            for (what, zone) in [("from", &policy.from), ("to", &policy.to)] {
                if !known_zone(zone) {
                    return Err(invalid(
                        format!("firewall.policy[{i}].{what}"),
                        format!("no zone named {zone:?}"),
                    ));
                }
            }
            // The same pair twice: one of the two would be ignored, whichever the reader expects.
            if let Some(j) = self.firewall.policy[..i]
                .iter()
                .position(|earlier| earlier.from == policy.from && earlier.to == policy.to)
            {
                return Err(invalid(
                    format!("firewall.policy[{i}]"),
                    format!(
                        "{} -> {} is already firewall.policy[{j}]: one policy per zone pair",
                        policy.from, policy.to
                    ),
                ));
            }
        }
        for (i, rule) in self.firewall.rules.iter().enumerate() {
            for (what, zone) in [("from", &rule.from), ("to", &rule.to)] {
                if let Some(zone) = zone.as_deref().filter(|zone| !known_zone(zone)) {
                    return Err(invalid(
                        format!("firewall.rules[{i}].{what}"),
                        format!("no zone named {zone:?}"),
                    ));
                }
            }
            let ports = rule.source_ports.is_some() || rule.destination_ports.is_some();
            if ports && !matches!(rule.protocol, Some(RuleProtocol::Tcp | RuleProtocol::Udp)) {
                return Err(invalid(
                    format!("firewall.rules[{i}]"),
                    "ports need protocol = \"tcp\" or \"udp\"",
                ));
            }
            if rule.icmp_type.is_some() && rule.protocol != Some(RuleProtocol::Icmp) {
                return Err(invalid(
                    format!("firewall.rules[{i}].icmp_type"),
                    "needs protocol = \"icmp\"",
                ));
            }
            for (what, prefix) in [("source", &rule.source), ("destination", &rule.destination)] {
                let field = format!("firewall.rules[{i}].{what}");
                match prefix {
                    Some(RulePrefix::V4(prefix)) => no_host_bits(field, prefix)?,
                    Some(RulePrefix::V6(prefix)) => no_host_bits6(field, prefix)?,
                    None => {}
                }
            }
            if let (Some(RulePrefix::V4(_)), Some(RulePrefix::V6(_)))
            | (Some(RulePrefix::V6(_)), Some(RulePrefix::V4(_))) =
                (rule.source, rule.destination)
            {
                return Err(invalid(
                    format!("firewall.rules[{i}].destination"),
                    "is of another family than source: no flow has both",
                ));
            }
            let ipv6 = matches!(rule.source.or(rule.destination), Some(RulePrefix::V6(_)));
            let local = [&rule.from, &rule.to]
                .into_iter()
                .position(|zone| zone.as_deref() == Some("local"));
            if let (true, Some(which)) = (ipv6, local) {
                return Err(invalid(
                    format!("firewall.rules[{i}].{}", ["from", "to"][which]),
                    "\"local\" with an IPv6 prefix: rules do not filter IPv6 for the gateway \
                     itself yet",
                ));
            }
            if ipv6 && rule.protocol == Some(RuleProtocol::Icmp) {
                return Err(invalid(
                    format!("firewall.rules[{i}].protocol"),
                    "\"icmp\" is ICMP for IPv4, which no flow of an IPv6 prefix carries",
                ));
            }
        }
        Ok(())
    }

    /// What starts but is probably not meant: `check-config` prints them (the file still
    /// passes) and the gateway logs them at start and on every reload.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings: Vec<String> = self.metrics_exposure_warning().into_iter().collect();
        warnings.extend(self.zones_nothing_lets_out());
        warnings.extend(twins::route_allow_warning(self));
        warnings
    }

    /// The metrics served on every address of the host.
    fn metrics_exposure_warning(&self) -> Option<String> {
        let listen = self.metrics.listen;
        if !listen.ip().is_unspecified() {
            return None;
        }
        let exposure = if self.metrics.web_config.is_some() {
            "behind metrics.web_config's TLS and basic auth"
        } else {
            "as plain HTTP without auth"
        };
        Some(format!(
            "metrics.listen: {listen} serves the metrics on every address of this host, \
             WAN included, {exposure}; bind a management or loopback address (\
             \"192.168.100.1:{port}\", \"127.0.0.1:{port}\") and/or give metrics.web_config \
             (TLS and basic auth)",
            port = listen.port()
        ))
    }

    /// With the default closed between zones, an inside zone that no policy or rule lets out
    /// reaches only itself and the gateway (a guest VLAN without its `guest -> wan accept`).
    fn zones_nothing_lets_out(&self) -> Vec<String> {
        let zones = self.zone_names();
        let leads_out =
            |from: &str, to: Option<&str>| to.is_none_or(|to| to != from && to != "local");
        let lets_out = |zone: &str| {
            self.firewall.policy.iter().any(|policy| {
                policy.from == zone
                    && policy.action == FirewallAction::Accept
                    && leads_out(zone, Some(&policy.to))
            }) || self.firewall.rules.iter().any(|rule| {
                rule.from.as_deref().is_none_or(|from| from == zone)
                    && rule.action == FirewallAction::Accept
                    && leads_out(zone, rule.to.as_deref())
            })
        };
        if zones.len() < 2 {
            return Vec::new();
        }
        zones
            .iter()
            .filter(|zone| !self.is_outside_zone(zone) && !lets_out(zone))
            .map(|zone| {
                format!(
                    "firewall.policy: no policy or rule lets zone {zone:?} out: between zones \
                     the default is drop, so its hosts reach only {zone:?} and the gateway \
                     (add e.g. {{ from = {zone:?}, to = \"wan\", action = \"accept\" }})"
                )
            })
            .collect()
    }

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

    /// The index of the interface whose connected subnet holds `ip`.
    /// Interface `i`, a VLAN subinterface: its parent is a port or bond interface, its id
    /// is in range and no other subinterface of that parent has it, its MTU fits the
    /// parent's, and it sets nothing that belongs to the port.
    fn validate_vlan(&self, i: usize) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = |name: &str| format!("interfaces[{i}].{name}");
        let (Some(parent), Some(vlan)) = (&iface.parent, iface.vlan) else {
            let (missing, given) = if iface.parent.is_none() {
                ("parent", "vlan")
            } else {
                ("vlan", "parent")
            };
            return Err(invalid(
                field(given),
                format!("a VLAN subinterface needs both parent and vlan; {missing} is missing"),
            ));
        };
        if !(1..=MAX_VLAN_ID).contains(&vlan) {
            return Err(invalid(
                field("vlan"),
                format!("{vlan} is not a VLAN id (1 to {MAX_VLAN_ID})"),
            ));
        }
        let Some(port) = self
            .interfaces
            .iter()
            .find(|other| &other.name == parent && !other.is_vlan())
        else {
            return Err(invalid(
                field("parent"),
                format!(
                    "{parent:?} names no port or bond interface (VLANs of VLANs are not supported)"
                ),
            ));
        };
        if let Some(j) = self.interfaces[..i]
            .iter()
            .position(|other| other.parent.as_ref() == Some(parent) && other.vlan == Some(vlan))
        {
            return Err(invalid(
                field("vlan"),
                format!("{parent} already has VLAN {vlan} (interfaces[{j}])"),
            ));
        }
        if iface.mtu() > port.mtu() {
            return Err(invalid(
                field("mtu"),
                format!("{} is above its parent's ({})", iface.mtu(), port.mtu()),
            ));
        }
        let port_settings = [
            ("device", !iface.device.is_empty()),
            ("bond", iface.bond.is_some()),
            ("rss_key", iface.rss_key.is_some()),
            ("promiscuous", iface.promiscuous),
            ("vlan_offload", iface.vlan_offload.is_some()),
        ];
        if let Some((name, _)) = port_settings.iter().find(|(_, set)| *set) {
            return Err(invalid(
                field(name),
                "belongs to the parent's port: set it there",
            ));
        }
        Ok(())
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
mod tests {
    use super::*;

    const LAB: &str = r#"
        [workers]
        lcores = [1]
        [[interfaces]]
        name = "lan"
        device = "net_af_packet0,iface=gw-lan"
        address = "192.168.10.1/24"
        [[interfaces]]
        name = "wan"
        device = "net_af_packet1,iface=gw-wan"
        address = "10.0.0.1/24"
        [[routes]]
        destination = "0.0.0.0/0"
        via = "10.0.0.2"
    "#;

    fn parse(text: &str) -> Result<GatewayConfig, ConfigError> {
        let dir = std::env::temp_dir().join(format!("gw-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Tests run in parallel threads: each call gets a file of its own.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = dir.join(format!("config-{n}.toml"));
        std::fs::write(&file, text).unwrap();
        let result = GatewayConfig::load(&file);
        std::fs::remove_file(&file).ok();
        result
    }

    /// Start-up and reload read the file once and load from that text, so the digest they
    /// keep of it is of what loaded; `path` only names the file in errors.
    #[test]
    fn from_text_loads_the_text_given_and_names_the_path_in_errors() {
        let path = Path::new("/nonexistent/gateway.toml");
        let config = GatewayConfig::from_text(path, LAB).unwrap();
        assert_eq!(config.interfaces[1].name, "wan");
        let bad = GatewayConfig::from_text(path, "[workers\nlcores = [1]")
            .unwrap_err()
            .to_string();
        assert!(bad.starts_with("/nonexistent/gateway.toml: "), "{bad}");
        // A value of the wrong type: the field, and the file it is in.
        let mistyped = format!("{LAB}\n[icmp]\nerrors_per_sec = \"many\"\n");
        let mistyped = GatewayConfig::from_text(path, &mistyped)
            .unwrap_err()
            .to_string();
        assert!(mistyped.starts_with("icmp.errors_per_sec: "), "{mistyped}");
        assert!(
            mistyped.ends_with("in /nonexistent/gateway.toml"),
            "{mistyped}"
        );
        let unreadable = read_config_file(path).unwrap_err().to_string();
        assert!(
            unreadable.starts_with("/nonexistent/gateway.toml: "),
            "{unreadable}"
        );
        assert!(unreadable.contains("No such file"), "{unreadable}");
    }

    #[test]
    fn lab_config_loads_with_defaults() {
        let config = parse(LAB).unwrap();
        assert_eq!(config.interfaces[0].mtu(), 1500);
        assert_eq!(config.eal.hugepages, HugepageMode::Auto);
        assert_eq!(config.routes[0].destination.len, 0);
        assert_eq!(config.interface_for("10.0.0.2".parse().unwrap()), Some(1));
    }

    #[test]
    fn icmp_echo_budget_is_optional_beside_the_error_budget() {
        let config = parse(&format!("{LAB}\n[icmp]\nerrors_per_sec = 5\n")).unwrap();
        let defaults = IcmpConfig::default();
        assert_eq!(config.icmp.errors_per_sec, 5);
        assert_eq!(config.icmp.burst, defaults.burst);
        assert_eq!(
            (config.icmp.echo_per_sec, config.icmp.echo_burst),
            (1000, 100)
        );
        let config = parse(&format!(
            "{LAB}\n[icmp]\necho_per_sec = 7\necho_burst = 2\n"
        ))
        .unwrap();
        assert_eq!((config.icmp.echo_per_sec, config.icmp.echo_burst), (7, 2));
        assert_eq!(config.icmp.errors_per_sec, defaults.errors_per_sec);
    }

    #[test]
    fn errors_name_the_field() {
        let bad_via = LAB.replace("via = \"10.0.0.2\"", "via = \"172.16.0.1\"");
        let err = parse(&bad_via).unwrap_err().to_string();
        assert!(err.starts_with("routes[0].via:"), "{err}");

        let bad_cidr = LAB.replace("192.168.10.1/24", "192.168.10.1/40");
        let err = parse(&bad_cidr).unwrap_err().to_string();
        assert!(err.contains("prefix length"), "{err}");

        let unknown = LAB.replace("[workers]", "[workers]\nspeed = 3");
        let err = parse(&unknown).unwrap_err().to_string();
        assert!(err.contains("speed"), "{err}");

        let twice = LAB
            .replace("gw-wan", "gw-lan")
            .replace("net_af_packet1", "net_af_packet0");
        let err = parse(&twice).unwrap_err().to_string();
        assert!(err.starts_with("interfaces[1].device:"), "{err}");

        let main_as_worker = LAB.replace("lcores = [1]", "lcores = [0]");
        let err = parse(&main_as_worker).unwrap_err().to_string();
        assert!(err.starts_with("workers.lcores[0]:"), "{err}");
    }

    #[test]
    fn one_interface_masquerades() {
        let two = LAB.replace(
            "via = \"10.0.0.2\"",
            "via = \"10.0.0.2\"\n[nat]\nmasquerade = [\"wan\", \"lan\"]",
        );
        let err = parse(&two).unwrap_err().to_string();
        assert!(
            err.starts_with("nat.masquerade[1]:") && err.contains("not supported"),
            "{err}"
        );
        let one = LAB.replace(
            "via = \"10.0.0.2\"",
            "via = \"10.0.0.2\"\n[nat]\nmasquerade = [\"wan\"]",
        );
        parse(&one).unwrap();
    }

    #[test]
    fn an_ipv6_side_is_checked_field_by_field() {
        let with_ipv6 = |lan: &str, wan: &str| {
            let text = LAB
                .replace(
                    "address = \"192.168.10.1/24\"",
                    &format!("address = \"192.168.10.1/24\"\n[interfaces.ipv6]\n{lan}"),
                )
                .replace(
                    "address = \"10.0.0.1/24\"",
                    &format!("address = \"10.0.0.1/24\"\n{wan}"),
                );
            parse(&text)
        };
        let good = "addresses = [\"2001:db8:1::1/64\", \"fd00:1::1/48\"]\nrouter_advertisements = true\ndns_servers = [\"2001:db8:1::53\"]";
        let config = with_ipv6(good, "").unwrap();
        let ipv6 = config.interfaces[0].ipv6.as_ref().unwrap();
        assert_eq!(ipv6.addresses[0].to_string(), "2001:db8:1::1/64");
        assert_eq!(ipv6.ra_interval_secs, 600);
        assert!(config.interfaces[1].ipv6.is_none());
        let cases = [
            (
                "addresses = [\"2001:db8:1::1\"]",
                "interfaces[0].ipv6.addresses",
                "address/prefix-length",
            ),
            (
                "addresses = [\"2001:db8:1::1/129\"]",
                "interfaces[0].ipv6.addresses",
                "prefix length",
            ),
            (
                "addresses = [\"fe80::1/64\"]",
                "interfaces[0].ipv6.addresses[0]:",
                "link-local",
            ),
            (
                "addresses = [\"ff02::1/64\"]",
                "interfaces[0].ipv6.addresses[0]:",
                "not a unicast",
            ),
            (
                "addresses = [\"2001:db8:1::1/0\"]",
                "interfaces[0].ipv6.addresses[0]:",
                "1..=128",
            ),
            (
                "router_advertisements = true",
                "interfaces[0].ipv6.router_advertisements:",
                "needs addresses",
            ),
            (
                "addresses = [\"2001:db8:1::1/64\"]\nra_interval_secs = 3",
                "interfaces[0].ipv6.ra_interval_secs:",
                "4..=1800",
            ),
            (
                "addresses = [\"2001:db8:1::1/64\"]\ndns_servers = [\"ff02::1\"]",
                "interfaces[0].ipv6.dns_servers:",
                "unicast",
            ),
            (
                "addresses = [\"2001:db8:1::1/64\"]\nspeed = 1",
                "speed",
                "unknown field",
            ),
        ];
        for (fields, field, reason) in cases {
            let err = with_ipv6(fields, "").unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains(reason),
                "{fields:?}: {err}"
            );
        }
        // One prefix on two interfaces.
        let overlap = with_ipv6(
            "addresses = [\"2001:db8:1::1/64\"]",
            "[interfaces.ipv6]\naddresses = [\"2001:db8:1::2/48\"]",
        )
        .unwrap_err()
        .to_string();
        assert!(
            overlap.starts_with("interfaces[1].ipv6.addresses[0]:") && overlap.contains("overlaps"),
            "{overlap}"
        );
    }

    #[test]
    fn ipv6_routes_are_checked_and_compiled() {
        let with_routes = |routes: &str| {
            let text = LAB.replace(
                "address = \"10.0.0.1/24\"",
                "address = \"10.0.0.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:ff::1/64\"]",
            ) + routes;
            parse(&text)
        };
        let good = "[[ipv6_routes]]\ndestination = \"::/0\"\nvia = \"fe80::1\"\ninterface = \"wan\"\n\
                    [[ipv6_routes]]\ndestination = \"2001:db8:77::/48\"\nvia = \"2001:db8:ff::2\"\n";
        let config = with_routes(good).unwrap();
        assert_eq!(config.ipv6_route_port(0).unwrap(), 1);
        assert_eq!(config.ipv6_route_port(1).unwrap(), 1);
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        let router = crate::compile::router::router_config(&config, &macs).unwrap();
        let hop = |addr: &str| router.routes6.lookup(addr.parse().unwrap());
        // The connected prefix, the static /48, the default.
        assert_eq!(
            hop("2001:db8:ff::9").map(|h| (h.port, h.gateway)),
            Some((1, None))
        );
        assert_eq!(
            hop("2001:db8:77:1::1").and_then(|h| h.gateway),
            Some("2001:db8:ff::2".parse().unwrap())
        );
        assert_eq!(
            hop("2606:4700::1").and_then(|h| h.gateway),
            Some("fe80::1".parse().unwrap())
        );
        let cases = [
            (
                "destination = \"::/0\"\nvia = \"fe80::1\"",
                "ipv6_routes[0].interface:",
                "link-local",
            ),
            (
                "destination = \"::/0\"\nvia = \"fe80::1\"\ninterface = \"lan\"",
                "ipv6_routes[0].interface:",
                "no [interfaces.ipv6]",
            ),
            (
                "destination = \"::/0\"\nvia = \"2001:db8:99::1\"",
                "ipv6_routes[0].via:",
                "no interface's IPv6 prefix",
            ),
            (
                "destination = \"2001:db8::1/32\"\nvia = \"2001:db8:ff::2\"",
                "ipv6_routes[0].destination:",
                "host bits",
            ),
            (
                "destination = \"::/0\"\nvia = \"ff02::1\"\ninterface = \"wan\"",
                "ipv6_routes[0].via:",
                "unicast",
            ),
        ];
        for (fields, field, reason) in cases {
            let err = with_routes(&format!("[[ipv6_routes]]\n{fields}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(field) && err.contains(reason),
                "{fields:?}: {err}"
            );
        }
        let twice =
            format!("{good}[[ipv6_routes]]\ndestination = \"::/0\"\nvia = \"2001:db8:ff::3\"\n");
        let err = with_routes(&twice).unwrap_err().to_string();
        assert!(
            err.starts_with("ipv6_routes[2].destination:") && err.contains("second route"),
            "{err}"
        );
    }

    #[test]
    fn rules_take_prefixes_of_either_family_and_not_both() {
        let with_rule = |fields: &str| {
            parse(&format!(
                "{LAB}\n[[firewall.rules]]\nname = \"r\"\naction = \"drop\"\n{fields}\n"
            ))
        };
        let config = with_rule(
            "source = \"2001:db8:77::/48\"\ndestination = \"2001:db8:10::5/128\"\nprotocol = \"tcp\"",
        )
        .unwrap();
        let rule = config.firewall.rules.last().unwrap();
        assert_eq!(
            rule.source,
            Some(RulePrefix::V6("2001:db8:77::/48".parse().unwrap()))
        );
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        crate::compile::router::router_config(&config, &macs).unwrap();
        assert!(matches!(
            with_rule("source = \"10.0.0.0/8\"")
                .unwrap()
                .firewall
                .rules
                .last()
                .unwrap()
                .source,
            Some(RulePrefix::V4(_))
        ));
        for (fields, field, reason) in [
            (
                "source = \"10.0.0.0/8\"\ndestination = \"2001:db8::/32\"",
                "firewall.rules[0].destination:",
                "another family",
            ),
            (
                "source = \"2001:db8:77::1/48\"",
                "firewall.rules[0].source:",
                "did you mean 2001:db8:77::/48",
            ),
            (
                "destination = \"2001:db8::/32\"\nprotocol = \"icmp\"",
                "firewall.rules[0].protocol:",
                "IPv4",
            ),
            (
                "source = \"2001:db8::/129\"",
                "firewall.rules[0].source",
                "0..=128",
            ),
            (
                "source = \"2001:db8::/32\"\nto = \"local\"",
                "firewall.rules[0].to:",
                "IPv6",
            ),
        ] {
            let err = with_rule(fields).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains(reason),
                "{fields}: {err}"
            );
        }
    }

    #[test]
    fn ipv6_pinholes_are_checked_and_compiled() {
        let with_pinholes = |pinholes: &str| {
            let text = LAB
                .replace(
                    "address = \"10.0.0.1/24\"",
                    "address = \"10.0.0.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:ff::1/64\"]",
                )
                .replace(
                    "address = \"192.168.10.1/24\"",
                    "address = \"192.168.10.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:10::1/64\"]",
                )
                + pinholes;
            parse(&text)
        };
        let good =
            "[[firewall.pinholes]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = \"22\"\n\
                    to = \"2001:db8:10::5\"\nsource = \"2001:db8:77::/48\"\n";
        let config = with_pinholes(good).unwrap();
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        let router = crate::compile::router::router_config(&config, &macs).unwrap();
        assert_eq!(
            router.pinholes6,
            [pipeline::pipeline::config::Pinhole6 {
                interface: 1,
                protocol: 6,
                ports: 22..=22,
                to: "2001:db8:10::5".parse().unwrap(),
                from: ("2001:db8:77::".parse().unwrap(), 48),
            }]
        );
        let cases = [
            (
                "interface = \"dmz\"",
                "to = \"2001:db8:10::5\"",
                "interface:",
                "no interface",
            ),
            (
                "interface = \"wan\"",
                "to = \"fe80::5\"",
                "to:",
                "global unicast",
            ),
            (
                "interface = \"wan\"",
                "to = \"2001:db8:10::1\"",
                "to:",
                "own address",
            ),
            (
                "interface = \"wan\"",
                "to = \"2001:db8:99::5\"",
                "to:",
                "no interface's IPv6",
            ),
            (
                "interface = \"wan\"",
                "to = \"2001:db8:10::5\"\nsource = \"2001:db8:77::1/48\"",
                "source:",
                "host bits",
            ),
        ];
        for (interface, to, field, reason) in cases {
            let pinhole = format!(
                "[[firewall.pinholes]]\n{interface}\nprotocol = \"udp\"\nport = \"53\"\n{to}\n"
            );
            let err = with_pinholes(&pinhole).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("firewall.pinholes[0].{field}")) && err.contains(reason),
                "{pinhole:?}: {err}"
            );
        }
        // On an interface without IPv6.
        let text = LAB.to_string() + good;
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.contains("no [interfaces.ipv6]"), "{err}");
    }

    #[test]
    fn a_vlan_subinterface_is_checked_by_name() {
        let with_vlan = |vlan: &str| {
            let vlan = format!("[[interfaces]]\nname = \"guest\"\n{vlan}\n[[routes]]");
            parse(&LAB.replacen("[[routes]]", &vlan, 1))
        };
        let good = "parent = \"lan\"\nvlan = 20\naddress = \"192.168.20.1/24\"";
        let config = with_vlan(good).unwrap();
        assert!(config.interfaces[2].is_vlan() && !config.interfaces[0].is_vlan());
        assert!(config.interfaces[2].eal_devices().is_empty());
        let cases = [
            ("vlan = 20\naddress = \"192.168.20.1/24\"", "interfaces[2].vlan:", "parent is missing"),
            ("parent = \"lan\"\naddress = \"192.168.20.1/24\"", "interfaces[2].parent:", "vlan is missing"),
            ("parent = \"lan\"\nvlan = 4095\naddress = \"192.168.20.1/24\"", "interfaces[2].vlan:", "not a VLAN id"),
            ("parent = \"lan\"\nvlan = 0\naddress = \"192.168.20.1/24\"", "interfaces[2].vlan:", "not a VLAN id"),
            ("parent = \"dmz\"\nvlan = 20\naddress = \"192.168.20.1/24\"", "interfaces[2].parent:", "names no port"),
            ("parent = \"lan\"\nvlan = 20\nmtu = 1600\naddress = \"192.168.20.1/24\"", "interfaces[2].mtu:", "above its parent"),
            ("parent = \"lan\"\nvlan = 20\ndevice = \"net_ring0\"\naddress = \"192.168.20.1/24\"", "interfaces[2].device:", "parent's port"),
            ("parent = \"lan\"\nvlan = 20\npromiscuous = true\naddress = \"192.168.20.1/24\"", "interfaces[2].promiscuous:", "parent's port"),
            ("address = \"192.168.20.1/24\"", "interfaces[2].device:", "missing"),
        ];
        for (fields, field, reason) in cases {
            let err = with_vlan(fields).unwrap_err().to_string();
            assert!(
                err.starts_with(field) && err.contains(reason),
                "{fields:?}: {err}"
            );
        }
        // A VLAN of a VLAN, and one id twice on a port.
        let twice = format!(
            "{good}\n[[interfaces]]\nname = \"iot\"\nparent = \"lan\"\nvlan = 20\naddress = \"192.168.30.1/24\""
        );
        let err = with_vlan(&twice).unwrap_err().to_string();
        assert!(
            err.starts_with("interfaces[3].vlan:") && err.contains("already has VLAN 20"),
            "{err}"
        );
        let nested = format!(
            "{good}\n[[interfaces]]\nname = \"iot\"\nparent = \"guest\"\nvlan = 30\naddress = \"192.168.30.1/24\""
        );
        let err = with_vlan(&nested).unwrap_err().to_string();
        assert!(err.starts_with("interfaces[3].parent:"), "{err}");
        // The same id on another port is another VLAN.
        let other_port = format!(
            "{good}\n[[interfaces]]\nname = \"wan20\"\nparent = \"wan\"\nvlan = 20\naddress = \"172.16.0.1/24\""
        );
        with_vlan(&other_port).unwrap();
    }

    #[test]
    fn neighbor_arp_limits_have_defaults_and_are_checked_by_name() {
        let config = parse(LAB).unwrap();
        assert_eq!(
            (config.neighbors.pending_total, config.neighbors.locktime_ms),
            (512, 1000)
        );
        for (setting, field) in [
            ("pending_total = 0", "neighbors.pending_total:"),
            // A quarter of the default 16383 mbufs is 4095.
            ("pending_total = 4096", "neighbors.pending_total:"),
            ("locktime_ms = 300000", "neighbors.locktime_ms:"),
        ] {
            let bad = format!("{LAB}\n[neighbors]\n{setting}\n");
            let err = parse(&bad).unwrap_err().to_string();
            assert!(err.starts_with(field), "{setting}: {err}");
        }
        let fine = format!("{LAB}\n[neighbors]\npending_total = 4095\nlocktime_ms = 0\n");
        assert_eq!(parse(&fine).unwrap().neighbors.pending_total, 4095);
    }

    #[test]
    fn a_logged_rule_needs_a_firewall_log_destination() {
        let rule = "\n[[firewall.rules]]\nname = \"x\"\naction = \"drop\"\nlog = true\n";
        let err = parse(&format!("{LAB}{rule}")).unwrap_err().to_string();
        assert!(err.starts_with("firewall.rules[0].log:"), "{err}");
        let sent = format!("{LAB}{rule}\n[firewall.log]\nsyslog_udp = \"127.0.0.1:514\"\n");
        assert!(parse(&sent).unwrap().firewall.rules[0].log);
        for (line, field) in [
            ("per_sec = 0", "firewall.log.per_sec:"),
            ("facility = 24", "firewall.log.facility:"),
            ("syslog_unix = \"dev/log\"", "firewall.log.syslog_unix:"),
        ] {
            let err = parse(&format!("{sent}{line}\n")).unwrap_err().to_string();
            assert!(err.starts_with(field), "{line}: {err}");
        }
    }

    #[test]
    fn pdump_needs_hugepages_and_leaves_in_memory() {
        let off = format!("{LAB}\n[eal]\npdump = true\nhugepages = \"off\"\n");
        let err = parse(&off).unwrap_err().to_string();
        assert!(err.starts_with("eal.pdump:"), "{err}");
        let on = parse(&format!(
            "{LAB}\n[eal]\npdump = true\nhugepages = \"required\"\n"
        ))
        .unwrap();
        assert!(on.eal.pdump);
        assert!(!crate::runtime::app::eal_args_with(&on, false).in_memory);
        assert!(crate::runtime::app::eal_args_with(&parse(LAB).unwrap(), false).in_memory);
    }

    #[test]
    fn per_host_limits_default_and_are_validated_by_field() {
        let config = parse(LAB).unwrap();
        assert_eq!(config.conntrack.host_flows, 4096);
        assert_eq!(config.nat.host_ports, 4096);
        let table = crate::compile::router::conntrack_config(&config);
        assert_eq!(table.half_open, config.conntrack.capacity / 4);
        for (section, line, field) in [
            ("[conntrack]", "host_flows = 0", "conntrack.host_flows:"),
            (
                "[conntrack]",
                "host_half_open = 0",
                "conntrack.host_half_open:",
            ),
            ("[conntrack]", "half_open = 0", "conntrack.half_open:"),
            (
                "[conntrack]",
                "capacity = 100\nhalf_open = 101",
                "conntrack.half_open:",
            ),
            ("[conntrack]", "hosts = 0", "conntrack.hosts:"),
            ("[nat]", "host_ports = 0", "nat.host_ports:"),
        ] {
            let bad = format!("{LAB}\n{section}\n{line}\n");
            let err = parse(&bad).unwrap_err().to_string();
            assert!(err.starts_with(field), "{line}: {err}");
        }
        let set = format!("{LAB}\n[conntrack]\nhalf_open = 77\nhost_flows = 9\n");
        let table = crate::compile::router::conntrack_config(&parse(&set).unwrap());
        assert_eq!((table.half_open, table.host_flows), (77, 9));
    }

    #[test]
    fn port_blocks_are_validated_by_field() {
        let with = |lines: &str| parse(&format!("{LAB}\n[nat]\n{lines}\n"));
        assert_eq!(
            with("port_block_size = 256").unwrap().nat.port_block_size,
            256
        );
        assert_eq!(parse(LAB).unwrap().nat.port_block_size, 0);
        for (lines, says) in [
            ("port_block_size = 100", "multiple of 64"),
            ("port_block_size = 65536", "multiple of 64"),
            ("port_block_size = 64", "64 blocks of 64 per host"),
        ] {
            let err = with(lines).unwrap_err().to_string();
            assert!(err.starts_with("nat.port_block_size:"), "{lines}: {err}");
            assert!(err.contains(says), "{lines}: {err}");
        }
        let three = LAB.replace("lcores = [1]", "lcores = [1, 2, 3]");
        let err = parse(&format!("{three}\n[nat]\nport_block_size = 256\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("power-of-two number of workers"), "{err}");
    }

    /// Files that parse but cannot mean what they say (issue 43): refused, naming the field
    /// and what is wrong.
    #[test]
    fn files_that_cannot_mean_what_they_say_are_refused() {
        let forward = |port: &str, to_port: &str| {
            format!(
                "[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = \"{port}\"\n\
                 to = \"192.168.10.2\"\n{to_port}\n"
            )
        };
        let lan_address = |address: &str| {
            LAB.replace(
                "address = \"192.168.10.1/24\"",
                &format!("address = \"{address}\""),
            )
        };
        let cases = [
            (
                format!("{LAB}\n{}", forward("80", "to_port = 0")),
                "nat.port_forwards[0].to_port:",
                "0 is no port",
            ),
            (
                format!("{LAB}\n{}\n{}", forward("80", ""), forward("80", "")),
                "nat.port_forwards[1].port:",
                "overlaps nat.port_forwards[0]",
            ),
            (
                format!("{LAB}\n{}\n{}", forward("8000-8010", ""), forward("8010-8020", "")),
                "nat.port_forwards[1].port:",
                "8010-8020 overlaps nat.port_forwards[0] (8000-8010)",
            ),
            (
                lan_address("192.168.10.0/24"),
                "interfaces[0].address:",
                "network address",
            ),
            (
                lan_address("192.168.10.255/24"),
                "interfaces[0].address:",
                "broadcast address",
            ),
            (
                lan_address("127.0.0.1/8"),
                "interfaces[0].address:",
                "loopback",
            ),
            (
                lan_address("224.0.0.1/24"),
                "interfaces[0].address:",
                "multicast",
            ),
            (
                LAB.replace(
                    "address = \"192.168.10.1/24\"",
                    "address = \"192.168.10.1/24\"\nzone = \"local\"",
                ),
                "interfaces[0].zone:",
                "the gateway itself",
            ),
            (
                format!(
                    "{LAB}\n[firewall]\npolicy = [\n{{ from = \"lan\", to = \"wan\", action = \"accept\" }},\n\
                     {{ from = \"lan\", to = \"wan\", action = \"drop\" }},\n]\n"
                ),
                "firewall.policy[1]:",
                "already firewall.policy[0]",
            ),
        ];
        for (text, field, says) in cases {
            let err = parse(&text).expect_err(&text).to_string();
            assert!(err.starts_with(field), "{field}: {err}");
            assert!(err.contains(says), "{says}: {err}");
        }
        // Disjoint ranges, or one port on two protocols, are two forwards.
        let udp = forward("80", "").replace("\"tcp\"", "\"udp\"");
        parse(&format!(
            "{LAB}\n{}\n{udp}\n{}",
            forward("80", ""),
            forward("81-90", "")
        ))
        .unwrap();
    }

    /// Issue 43: `gateway check-config` refuses what start refuses and what cannot mean what
    /// it says, and each message names the field, the value and what is allowed.
    #[test]
    fn a_table_of_bad_files_each_refused_by_field() {
        let with = |section: &str| format!("{LAB}\n{section}\n");
        // A line (or subtable) more in the "lan" interface.
        let lan = |extra: &str| {
            LAB.replace(
                "address = \"192.168.10.1/24\"",
                &format!("address = \"192.168.10.1/24\"\n{extra}"),
            )
        };
        let lan_address = |address: &str| {
            LAB.replace(
                "address = \"192.168.10.1/24\"",
                &format!("address = \"{address}\""),
            )
        };
        let bond_mac = |mac: &str| {
            lan(&format!(
                "[interfaces.bond]\nmembers = [\"net_af_packet2,iface=gw-lan2\"]\nmac = \"{mac}\""
            ))
            .replace("net_af_packet0,iface=gw-lan", "net_bonding0")
        };
        let vlan = |id: &str| {
            with(&format!(
                "[[interfaces]]\nname = \"iot\"\nparent = \"lan\"\nvlan = {id}\naddress = \"192.168.20.1/24\""
            ))
        };
        let forward = |port: &str, to_port: &str| {
            with(&format!(
                "[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = {port}\n\
                 to = \"192.168.10.2\"\n{to_port}"
            ))
        };
        let rule = |fields: &str| {
            with(&format!(
                "[[firewall.rules]]\nname = \"r\"\naction = \"accept\"\n{fields}"
            ))
        };
        let policy = |from: &str, to: &str, action: &str| {
            format!("{{ from = \"{from}\", to = \"{to}\", action = \"{action}\" }}")
        };
        let route = |destination: &str, via: &str| {
            LAB.replace("0.0.0.0/0", destination)
                .replace("via = \"10.0.0.2\"", &format!("via = \"{via}\""))
        };
        let cases: Vec<(String, &str, &str)> = vec![
            // Wrong types: never coerced from text.
            (lan("mtu = \"1500\""), "interfaces[0].mtu:", "without quotes, mtu = 1500"),
            (with("[conntrack]\ntcp_loose = \"yes\""), "conntrack.tcp_loose:", "tcp_loose = true"),
            (with("[workers]\nlcores = \"1\"").replace("[workers]\n        lcores = [1]", ""), "workers.lcores:", "expected a sequence"),
            (with("[icmp]\nburst = -1"), "icmp.burst:", "0 to 4294967295"),
            (lan("promiscuous = 1"), "interfaces[0].promiscuous:", "expected a boolean"),
            // Unknown keys: the nearest field suggested.
            (LAB.replace("[workers]", "[workers]\nspeed = 3"), "workers.speed:", "unknown field"),
            (lan("mut = 1400"), "interfaces[0].mut:", "did you mean `mtu`?"),
            (with("[conntrak]\ncapacity = 1"), "conntrak:", "did you mean `conntrack`?"),
            (with("[[interfaces]]\nname = \"dmz\"\ndevice = \"net_af_packet3\""), "interfaces[2].address:", "missing field"),
            // Out of range.
            (lan("mtu = 100000"), "interfaces[0].mtu:", "576 up to mempool.data_room"),
            (lan("mtu = 500"), "interfaces[0].mtu:", "at least 576"),
            (lan("mtu = 9000"), "interfaces[0].mtu:", "fit mempool.data_room (2048)"),
            (lan("tcp_mss = 100"), "interfaces[0].tcp_mss:", "from 536"),
            (LAB.replace("lcores = [1]", "lcores = [99999]"), "workers.lcores[0]:", "DPDK's are 0 to 127"),
            (LAB.replace("lcores = [1]", "lcores = [1, 2, 1]"), "workers.lcores[2]:", "listed twice"),
            (with("[eal]\nmain_lcore = 128"), "eal.main_lcore:", "0 to 127"),
            (with("[eal]\nlog_level = \"verbose\""), "eal.log_level:", "\"verbose\" is not a DPDK log level: emerg, alert, crit, err, warning, notice, info, debug, or 1 to 8"),
            (with("[eal]\nlog_level = \"verbose\""), "eal.log_level:", "; did you mean \"debug\"?"),
            (with("[eal]\nlog_level = \"9\""), "eal.log_level:", "1 to 8"),
            (with("[conntrack]\ncapacity = 1000000000"), "conntrack.capacity:", "1 to 268435456"),
            (with("[conntrack]\ncapacity = 0"), "conntrack.capacity:", "1 to 268435456"),
            (with("[nat.log]\nfacility = 30"), "nat.log.facility:", "0-23"),
            (with("[nat]\nport_range = \"80-90\""), "nat.port_range:", "1024 or above"),
            (with("[[qos.priority]]\ndscp = 64"), "qos.priority[0].dscp:", "0..=63"),
            // Ports.
            (forward("70000", ""), "nat.port_forwards[0].port:", "a port 1-65535 or a range \"8000-8010\""),
            (forward("0", ""), "nat.port_forwards[0].port:", "a port 1-65535"),
            (forward("\"90-80\"", ""), "nat.port_forwards[0].port:", "did you mean \"80-90\"?"),
            (forward("\"http\"", ""), "nat.port_forwards[0].port:", "a port 1-65535 or a range"),
            (forward("80", "to_port = 70000"), "nat.port_forwards[0].to_port:", "a port is 1 to 65535"),
            (forward("80", "to_port = 0"), "nat.port_forwards[0].to_port:", "0 is no port"),
            (format!("{}\n{}", forward("80", ""), forward("80", "").replace(LAB, "")), "nat.port_forwards[1].port:", "overlaps nat.port_forwards[0]"),
            (format!("{}\n{}", forward("\"8000-8010\"", ""), forward("\"8010-8020\"", "").replace(LAB, "")), "nat.port_forwards[1].port:", "8010-8020 overlaps nat.port_forwards[0] (8000-8010)"),
            (forward("80", "").replace("\"tcp\"", "\"sctp\""), "nat.port_forwards[0].protocol:", "unknown variant `sctp`, expected `tcp` or `udp`;"),
            (rule("protocol = \"tcp\"\ndestination_ports = \"ssh\""), "firewall.rules[0].destination_ports:", "a port 1-65535"),
            (rule("icmp_type = 8"), "firewall.rules[0].icmp_type:", "needs protocol = \"icmp\""),
            // Actions and other choices: the allowed values listed, the likely one named.
            (with(&format!("[firewall]\npolicy = [{}]", policy("lan", "wan", "allow"))), "firewall.policy[0].action:", "expected one of `accept`, `drop`, `reject`; did you mean `accept`?"),
            (rule("").replace("\"accept\"", "\"deny\""), "firewall.rules[0].action:", "did you mean `drop`?"),
            (with("[eal]\nhugepages = \"yes\""), "eal.hugepages:", "expected one of `auto`, `required`, `off`"),
            (lan("source_validation = \"strikt\""), "interfaces[0].source_validation:", "strict, loose or off"),
            // Addresses and prefixes.
            (lan_address("192.168.10.1/40"), "interfaces[0].address:", "prefix length 0..=32"),
            (lan_address("192.168.10.1/31"), "interfaces[0].address:", "1..=30"),
            (lan_address("192.168.10.300/24"), "interfaces[0].address:", "not an IPv4 address"),
            (lan_address("192.168.10.1"), "interfaces[0].address:", "address/prefix-length"),
            (lan_address("192.168.10.0/24"), "interfaces[0].address:", "network address"),
            (lan_address("192.168.10.255/24"), "interfaces[0].address:", "broadcast address"),
            (lan_address("127.0.0.1/8"), "interfaces[0].address:", "loopback"),
            (lan_address("224.0.0.1/24"), "interfaces[0].address:", "multicast"),
            (lan_address("10.0.0.5/16"), "interfaces[1].address:", "overlaps interfaces[0]"),
            (lan("[interfaces.ipv6]\naddresses = [\"ff02::1/64\"]"), "interfaces[0].ipv6.addresses[0]:", "not a unicast"),
            (lan("[interfaces.ipv6]\naddresses = [\"2001:db8::1/129\"]"), "interfaces[0].ipv6.addresses[0]:", "prefix length 0..=128"),
            (route("10.1.0.1/16", "10.0.0.2"), "routes[0].destination:", "did you mean 10.1.0.0/16?"),
            (route("10.1.0.0", "10.0.0.2"), "routes[0].destination:", "address/prefix-length"),
            (route("0.0.0.0/0", "172.16.0.1"), "routes[0].via:", "not in any interface's subnet"),
            (route("0.0.0.0/0", "10.0.0.256"), "routes[0].via:", "invalid"),
            (rule("source = \"10.0.0.0/33\""), "firewall.rules[0].source:", "prefix length 0..=32"),
            (rule("destination = \"10.0.0.1/8\""), "firewall.rules[0].destination:", "did you mean 10.0.0.0/8?"),
            (with("[metrics]\nlisten = \"0.0.0.0\""), "metrics.listen:", "invalid socket address"),
            (with("[state]\ndirectory = \"var/lib/gateway\""), "state.directory:", "absolute"),
            // Zones and interfaces named.
            (lan("zone = \"local\""), "interfaces[0].zone:", "the gateway itself"),
            (with(&format!("[firewall]\npolicy = [{}]", policy("lan", "dmz", "drop"))), "firewall.policy[0].to:", "no zone named \"dmz\""),
            (with(&format!("[firewall]\npolicy = [{}, {}]", policy("lan", "wan", "accept"), policy("lan", "wan", "drop"))), "firewall.policy[1]:", "already firewall.policy[0]"),
            (rule("from = \"guest\""), "firewall.rules[0].from:", "no zone named \"guest\""),
            (with("[nat]\nmasquerade = [\"wan0\"]"), "nat.masquerade[0]:", "no interface named \"wan0\""),
            (forward("80", "").replace("interface = \"wan\"", "interface = \"uplink\""), "nat.port_forwards[0].interface:", "no interface named \"uplink\""),
            (LAB.replace("name = \"wan\"", "name = \"lan\""), "interfaces[1].name:", "used twice"),
            (LAB.replace("net_af_packet1,iface=gw-wan", "net_af_packet0,iface=gw-lan"), "interfaces[1].device:", "used twice"),
            // VLANs.
            (vlan("0"), "interfaces[2].vlan:", "1 to 4094"),
            (vlan("4095"), "interfaces[2].vlan:", "1 to 4094"),
            (vlan("70000"), "interfaces[2].vlan:", "a VLAN id is 1 to 4094"),
            (vlan("10").replace("parent = \"lan\"", "parent = \"lan0\""), "interfaces[2].parent:", "names no port or bond"),
            // A bond's MAC goes into the EAL's device string.
            (bond_mac("zz:zz"), "interfaces[0].bond.mac:", "not a MAC address"),
            (bond_mac("02:00:00:00:00:01,mode=0"), "interfaces[0].bond.mac:", "not a MAC address"),
            (bond_mac("01:00:5e:00:00:01"), "interfaces[0].bond.mac:", "multicast MAC"),
            (bond_mac("00:00:00:00:00:00"), "interfaces[0].bond.mac:", "all zero"),
            (lan("rss_key = \"xyz\""), "interfaces[0].rss_key:", "hex digits"),
        ];
        assert!(cases.len() >= 40, "{} cases", cases.len());
        let mut wrong = Vec::new();
        for (text, field, says) in &cases {
            assert!(field.ends_with(':'), "{field}");
            match parse(text) {
                Err(err)
                    if err.to_string().starts_with(field) && err.to_string().contains(says) => {}
                Err(err) => wrong.push(format!("{field} {says}\n  got: {err}")),
                Ok(_) => wrong.push(format!("{field} {says}\n  loaded:\n{text}")),
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        // The bases of the cases load: each file is refused for its one fault.
        parse(&bond_mac("02:00:00:00:00:0a")).unwrap();
        parse(&vlan("10")).unwrap();
        parse(&forward("\"8000-8010\"", "to_port = 9000")).unwrap();
        parse(&with("[eal]\nlog_level = \"pmd.net.*:debug\"")).unwrap();
        parse(&with(
            "[eal]\nlog_level = \"err\"\n[conntrack]\ncapacity = 268435456",
        ))
        .unwrap();
    }

    /// Environment overrides are text: they still become numbers and booleans, while the
    /// same text written in the file is refused.
    #[test]
    fn environment_overrides_are_parsed_but_file_values_are_typed() {
        let environment = [
            ("GATEWAY__CONNTRACK__TCP_LOOSE", "true"),
            ("GATEWAY__CONNTRACK__CAPACITY", "4096"),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
        let path = Path::new("/etc/gateway/gateway.toml");
        let config =
            GatewayConfig::from_text_and_environment(path, LAB, Some(environment)).unwrap();
        assert!(config.conntrack.tcp_loose);
        assert_eq!(config.conntrack.capacity, 4096);
        let quoted = format!("{LAB}\n[conntrack]\ncapacity = \"4096\"\n");
        let err = parse(&quoted).unwrap_err().to_string();
        assert!(err.starts_with("conntrack.capacity:"), "{err}");
        assert!(err.contains("capacity = 4096"), "{err}");
    }

    #[test]
    fn metrics_on_every_address_are_warned_of() {
        // Both zones let out, so that the metrics' warning is the only one.
        let lab = format!(
            "{LAB}\n[firewall]\npolicy = [\n{{ from = \"lan\", to = \"wan\", action = \"accept\" }},\n\
             {{ from = \"wan\", to = \"lan\", action = \"accept\" }},\n]\n"
        );
        assert!(parse(&lab).unwrap().warnings().is_empty());
        for listen in ["0.0.0.0:9469", "[::]:9469"] {
            let open = parse(&format!("{lab}\n[metrics]\nlisten = \"{listen}\"\n")).unwrap();
            let warnings = open.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].starts_with("metrics.listen:"), "{warnings:?}");
            assert!(warnings[0].contains("every address"), "{warnings:?}");
            assert!(warnings[0].contains("metrics.web_config"), "{warnings:?}");
        }
    }

    #[test]
    fn rss_keys_are_hex() {
        assert_eq!(parse_hex("6d5a:6D5A"), Some(vec![0x6d, 0x5a, 0x6d, 0x5a]));
        assert_eq!(parse_hex("6d5"), None);
        assert_eq!(parse_hex("zz"), None);
        let bad = LAB.replace(
            "address = \"10.0.0.1/24\"",
            "address = \"10.0.0.1/24\"\nrss_key = \"xyz\"",
        );
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.starts_with("interfaces[1].rss_key:"), "{err}");
    }

    #[test]
    fn source_validation_is_strict_loose_or_off() {
        let loose = LAB.replace(
            "address = \"192.168.10.1/24\"",
            "address = \"192.168.10.1/24\"\nsource_validation = \"loose\"",
        );
        let config = parse(&loose).unwrap();
        assert_eq!(
            config.interfaces[0].source_validation,
            Some(SourceValidationConfig::Loose)
        );
        assert_eq!(config.interfaces[1].source_validation, None);
        let bad = LAB.replace(
            "address = \"10.0.0.1/24\"",
            "address = \"10.0.0.1/24\"\nsource_validation = \"paranoid\"",
        );
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains("source_validation"), "{err}");
        assert!(err.contains("strict"), "the error lists the choices: {err}");
    }

    #[test]
    fn pppoe_needs_its_table_gets_1492_and_clamps_by_default() {
        // The session supplies the default route: none in [[routes]].
        let base = LAB
            .replace(
                "        [[routes]]\n        destination = \"0.0.0.0/0\"\n        via = \"10.0.0.2\"\n",
                "",
            )
            .replace(
                "address = \"10.0.0.1/24\"",
                "address = \"10.0.0.1/24\"\n[[interfaces]]\nname = \"isp\"\nparent = \"wan\"\nvlan = 7\naddress = \"pppoe\"",
            );
        let table = "\n[interfaces.pppoe]\nusername = \"gw\"\npassword = \"pw\"\n";
        let with = |extra: &str| {
            base.replace(
                "address = \"pppoe\"",
                &format!("address = \"pppoe\"{extra}"),
            )
        };
        let config = parse(&with(table)).unwrap();
        let isp = &config.interfaces[2];
        assert!(isp.address.is_pppoe());
        assert_eq!(isp.mtu(), PPPOE_MTU);
        assert_eq!(isp.port_mtu(), 1500);
        assert_eq!(isp.tcp_mss_bytes(isp.mtu()), Some(1452));
        // A peer's smaller MRU lowers the automatic clamp.
        assert_eq!(isp.tcp_mss_bytes(1480), Some(1440));
        assert_eq!(config.interfaces[1].mtu(), 1500);
        assert_eq!(config.interfaces[1].tcp_mss_bytes(1500), None);
        let pppoe = isp.pppoe.as_ref().unwrap();
        assert_eq!(
            (pppoe.lcp_echo_interval_secs, pppoe.lcp_echo_failures),
            (10, 3)
        );
        assert!(pppoe.default_route);
        assert!(
            !format!("{pppoe:?}").contains("pw\""),
            "the password is logged"
        );
        let refused = |text: &str, field: &str| {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.starts_with(field), "{field}: {err}");
        };
        refused(&base, "interfaces[2].pppoe:");
        refused(
            &LAB.replace(
                "address = \"10.0.0.1/24\"",
                &format!("address = \"10.0.0.1/24\"{table}"),
            ),
            "interfaces[1].pppoe:",
        );
        refused(&with(&format!("\nmtu = 1500{table}")), "interfaces[2].mtu:");
        refused(
            &with(&format!("{table}lcp_echo_failures = 0\n")),
            "interfaces[2].pppoe.lcp_echo_failures:",
        );
        refused(
            &with(&table.replace("\"gw\"", "\"\"")),
            "interfaces[2].pppoe.username:",
        );
        refused(
            &with(&format!("{table}secret = 1\n")),
            "interfaces[2].pppoe",
        );
        // A static default route and the session's would fight.
        refused(&LAB.replace("address = \"10.0.0.1/24\"", "address = \"10.0.0.1/24\"\n[[interfaces]]\nname = \"isp\"\nparent = \"wan\"\nvlan = 7\naddress = \"pppoe\"").replace("address = \"pppoe\"", &format!("address = \"pppoe\"{table}")), "interfaces[2].pppoe.default_route:");
        let config = parse(&with(&format!("\nmtu = 1400\ntcp_mss = 1300{table}"))).unwrap();
        assert_eq!(config.interfaces[2].tcp_mss_bytes(1400), Some(1300));
    }

    #[test]
    fn qos_shapes_by_default_and_polices_when_told() {
        let on = format!("{LAB}\n[qos]\nenabled = true\n");
        assert_eq!(parse(&on).unwrap().qos.mode, QosModeSetting::Shaper);
        let policer = format!("{on}mode = \"policer\"\n");
        let config = parse(&policer).unwrap();
        assert_eq!(config.qos.mode, QosModeSetting::Policer);
        assert_eq!(
            crate::compile::router::qos_config(&config.qos).map(|qos| qos.mode),
            Some(pipeline::features::qos::QosMode::Policer)
        );
        let bad = format!("{on}mode = \"fq_codel\"\n");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains("qos.mode"), "the error names the field: {err}");
        assert!(err.contains("shaper"), "the error lists the choices: {err}");
    }

    #[test]
    fn tcp_mss_is_auto_or_bytes_within_the_mtu() {
        let with = |value: &str| {
            LAB.replace(
                "address = \"10.0.0.1/24\"",
                &format!("address = \"10.0.0.1/24\"\nmtu = 1492\ntcp_mss = {value}"),
            )
        };
        let config = parse(&with("\"auto\"")).unwrap();
        assert_eq!(config.interfaces[1].tcp_mss, Some(TcpMssConfig::Auto));
        assert_eq!(config.interfaces[1].tcp_mss.unwrap().bytes(1492), 1452);
        assert_eq!(config.interfaces[0].tcp_mss, None);
        let config = parse(&with("1400")).unwrap();
        assert_eq!(
            config.interfaces[1].tcp_mss,
            Some(TcpMssConfig::Bytes(1400))
        );
        for bad in ["1453", "535", "-1", "70000", "\"big\""] {
            let err = parse(&with(bad)).unwrap_err().to_string();
            assert!(err.contains("tcp_mss"), "{bad}: {err}");
        }
        let err = parse(&with("1453")).unwrap_err().to_string();
        assert!(err.starts_with("interfaces[1].tcp_mss:"), "{err}");
    }

    #[test]
    fn pci_addresses_are_told_from_vdevs() {
        assert!(is_pci_address("0000:03:00.0"));
        assert!(is_pci_address("03:00.1"));
        assert!(!is_pci_address("net_af_packet0,iface=x"));
        assert_eq!(device_name("net_tap0,iface=t0"), "net_tap0");
    }

    #[test]
    fn state_directory_defaults_and_must_be_an_absolute_directory() {
        let config = parse(LAB).unwrap();
        assert_eq!(config.state.directory, Path::new("/var/lib/gateway"));
        assert!(config.state.snapshot);
        let config = parse(&format!(
            "{LAB}\n[state]\ndirectory = \"/tmp/gw-state\"\nsnapshot = false\n"
        ))
        .unwrap();
        assert_eq!(config.state.directory, Path::new("/tmp/gw-state"));
        assert!(!config.state.snapshot);
        let err = parse(&format!("{LAB}\n[state]\ndirectory = \"state\"\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "state.directory: state is not an absolute path");
        let file = std::env::temp_dir().join(format!("gw-state-file-{}", std::process::id()));
        std::fs::write(&file, "").unwrap();
        let err = parse(&format!(
            "{LAB}\n[state]\ndirectory = \"{}\"\n",
            file.display()
        ))
        .unwrap_err()
        .to_string();
        std::fs::remove_file(&file).ok();
        assert!(err.ends_with("exists and is not a directory"), "{err}");
    }
}

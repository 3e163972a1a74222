//! `[[interfaces]]` (addresses, IPv6, PPPoE, VLANs, bonds), `[[routes]]` and `[[ipv6_routes]]`.

use super::*;

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
    /// The address this interface shares with the other box of an HA pair, e.g.
    /// "192.168.1.254": keepalived (VRRP) on the twin adds it on the master and removes it
    /// on the backup; the gateway answers ARP for it (and announces it by gratuitous ARP)
    /// only while its twin holds it, masquerades to it and takes port forwards on it either
    /// way, so that both boxes translate alike and the backup's synced flows carry on. A host
    /// of the interface's subnet, not its address; needs a kernel twin.
    #[serde(default)]
    pub virtual_address: Option<Ipv4Addr>,
    /// The address masquerade translates flows leaving here to, instead of the interface's:
    /// a public address routed to this box (announced by BGP from the twin, or a static
    /// route upstream), as each box of an active/active scale-out needs one of its own so
    /// that replies come back to the box that translated them. One of the gateway's own
    /// (port forwards take it too); never answered by ARP, being on no subnet of the
    /// gateway's. Needs the interface in `nat.masquerade`; not with `virtual_address`.
    #[serde(default)]
    pub nat_address: Option<Ipv4Addr>,
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
/// 6 bytes of PPPoE header and 2 of PPP protocol go first. A larger `mtu` (1500, with a
/// 1508-byte port) is asked of the access concentrator by RFC 4638's PPP-Max-Payload, and the
/// session falls back to 1492 where it does not grant it.
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

//! The router's immutable configuration: interfaces and the route table. Workers share one
//! snapshot through an `Arc`; a reload builds a new one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use std::ops::RangeInclusive;

use std::sync::Arc;

use crate::features::content::ContentPolicy;
use crate::features::qos::QosConfig;
use crate::flow::{FlowKey, FlowKey6};
use crate::l3::route::{NextHop, Route, RouteError, RouteTable};
use crate::l3::route6::{NextHop6, Route6, RouteError6, RouteTable6};
use crate::pipeline::uplinks::Uplinks;
use crate::state::firewall::{Action, Policy, RuleSet, ZoneId};
use crate::verdict::{DropReason, Verdict};
use crate::wire::ipv6::{is_link_local, prefix_of, solicited_node, ALL_NODES, ALL_ROUTERS};
use crate::wire::EthernetAddress;

/// One gateway port as the pipeline sees it. Its index in [`RouterConfig::interfaces`] is the
/// port number used in verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub mac: EthernetAddress,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: u16,
    /// An address of the interface's beyond its own, which masquerade translates to: one of
    /// the gateway's own addresses for forwarding (local delivery, port forwards, a flow's
    /// owner). Either the address this interface shares with the other box of an HA pair
    /// (the config's `virtual_address`, held by keepalived on the twin of whichever box is
    /// master, so that both boxes translate a flow alike and the standby's synced copies
    /// hold; answering ARP for it is the control thread's part, and only while this box's
    /// twin holds it), or a NAT address routed to this box (`nat_address`, on no link, so
    /// never answered by ARP).
    pub virtual_addr: Option<Ipv4Addr>,
}

impl Interface {
    /// Whether `ip` is one of this interface's addresses: its own, or its virtual one.
    #[inline]
    pub fn is_own(&self, ip: Ipv4Addr) -> bool {
        self.has_address() && (ip == self.addr || Some(ip) == self.virtual_addr)
    }

    /// The address flows leaving here are masqueraded to: the virtual one where there is
    /// one, which survives a takeover; else the interface's.
    #[inline]
    pub fn masquerade_addr(&self) -> Ipv4Addr {
        self.virtual_addr.unwrap_or(self.addr)
    }

    /// Whether `ip` is this interface's subnet's directed broadcast address. /31 and /32
    /// subnets have none (RFC 3021): the all-ones address there is a host, the
    /// point-to-point peer or the interface itself.
    pub(crate) fn is_directed_broadcast(&self, ip: Ipv4Addr) -> bool {
        self.prefix_len < 31 && self.broadcast() == ip
    }

    /// Whether the interface has an address: one whose address comes from the kernel
    /// (`address = "dhcp"`) has none (0.0.0.0) until its first lease, and then no subnet,
    /// no connected route and nothing to masquerade to.
    #[inline]
    pub fn has_address(&self) -> bool {
        !self.addr.is_unspecified()
    }

    fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32u32.saturating_sub(u32::from(self.prefix_len)))
            .unwrap_or(0)
    }

    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    /// Whether `ip` is on this interface's connected subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.has_address() && u32::from(ip) & self.mask() == u32::from(self.network())
    }

    /// The subnet's directed broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }
}

/// A route the kernel installed on an interface's twin (`ip route`, a DHCP client, FRR),
/// mirrored into the FIB. Connected and static routes win where both have the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelRoute {
    pub destination: Ipv4Addr,
    pub len: u8,
    /// The interface whose twin the route is on.
    pub port: u16,
    /// None: on-link (`dev twin` without `via`).
    pub via: Option<Ipv4Addr>,
}

/// Which of the kernel twins' routes the FIB may take, besides the bound every kernel route
/// has (none inside a connected prefix, [`RouterConfig::with_bounded_kernel_routes`]): each
/// must lie inside (or be) one of the listed prefixes of its family. None: any prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelRouteAllow {
    pub v4: Option<Vec<(Ipv4Addr, u8)>>,
    pub v6: Option<Vec<(Ipv6Addr, u8)>>,
    /// Interfaces whose IPv4 routes the gateway makes itself, not a twin (a PPPoE session's
    /// default route): the list does not bound them. Their IPv6 routes are a twin's (the
    /// ISP's advertised ones), bound as any.
    pub own_ports: Vec<u16>,
}

impl KernelRouteAllow {
    fn allows_v4(&self, route: &KernelRoute) -> bool {
        let Some(prefixes) = &self.v4 else {
            return true;
        };
        self.own_ports.contains(&route.port)
            || prefixes.iter().any(|&(prefix, len)| {
                route.len >= len && u32::from(route.destination) & mask4(len) == u32::from(prefix)
            })
    }

    fn allows_v6(&self, route: &KernelRoute6) -> bool {
        let Some(prefixes) = &self.v6 else {
            return true;
        };
        prefixes.iter().any(|&(prefix, len)| {
            route.len >= len && prefix_of(route.destination, len) == prefix_of(prefix, len)
        })
    }
}

/// The netmask of an IPv4 prefix length (0 for /0, all ones for /32 and beyond).
fn mask4(len: u8) -> u32 {
    u32::MAX
        .checked_shl(32u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

/// Why a kernel route was not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteRefusal {
    /// Its prefix is inside (or is) interface `interface`'s connected prefix: it would beat
    /// the connected route (longest prefix) for part of that link ("TunnelVision": a rogue
    /// DHCP server's option 121 pulling half a LAN to the WAN).
    OverlapsConnected { interface: u16 },
    /// Outside every prefix of the allow-list ([`KernelRouteAllow`]).
    NotAllowed,
}

impl RouteRefusal {
    /// Every [`Self::label`].
    pub const LABELS: [&'static str; 2] = ["overlaps_connected", "not_allowed"];

    /// The reason as a metric label.
    pub fn label(&self) -> &'static str {
        match self {
            RouteRefusal::OverlapsConnected { .. } => "overlaps_connected",
            RouteRefusal::NotAllowed => "not_allowed",
        }
    }
}

/// A kernel route the FIB did not take, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RefusedRoute {
    pub destination: IpAddr,
    pub len: u8,
    /// The interface whose twin the route is on.
    pub port: u16,
    pub via: Option<IpAddr>,
    pub reason: RouteRefusal,
}

/// A static route: `destination/len via gateway`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticRoute {
    pub destination: Ipv4Addr,
    pub len: u8,
    pub via: Ipv4Addr,
}

#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// The gateway of a static route is not in any interface's subnet.
    #[error(
        "route {}/{}: gateway {} is not in a connected subnet",
        .0.destination,
        .0.len,
        .0.via
    )]
    UnreachableGateway(StaticRoute),
    #[error("{0}")]
    Route(RouteError),
    #[error("IPv6 routes: {0}")]
    Route6(RouteError6),
    #[error("more than 64 interfaces")]
    TooManyInterfaces,
    #[error("interface prefix length {0} > 32")]
    BadPrefixLength(u8),
    /// Zones, masquerade flags or port forwards that do not fit the interfaces.
    #[error("zones, masquerade or port forwards do not match the interfaces")]
    StatefulMismatch,
}

/// ICMP limits, per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpLimits {
    /// Each kind of ICMP error (time exceeded, unreachable, fragmentation needed, reject)
    /// has its own bucket of this rate and burst.
    pub errors_per_sec: u32,
    pub burst: u32,
    /// Echo requests to the gateway's addresses handed to the control thread; the rest are
    /// dropped as `slow_path_policed`. ARP is never held to this.
    pub echo_per_sec: u32,
    pub echo_burst: u32,
}

impl Default for IcmpLimits {
    fn default() -> Self {
        IcmpLimits {
            errors_per_sec: 1000,
            burst: 100,
            echo_per_sec: 1000,
            echo_burst: 100,
        }
    }
}

/// An IPv6 service on an inside host that flows from `interface` may open whatever their
/// zone pair's policy says: the IPv6 form of a port forward, without NAT66 (the host keeps
/// its own address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pinhole6 {
    /// The interface the flows arrive on.
    pub interface: u16,
    pub protocol: u8,
    pub ports: RangeInclusive<u16>,
    pub to: Ipv6Addr,
    /// The sources allowed: a prefix and its length (`::/0`: any).
    pub from: (Ipv6Addr, u8),
}

impl Pinhole6 {
    /// Whether this pinhole opens the flow `key` arriving on `ingress`.
    pub fn admits(&self, ingress: u16, key: &FlowKey6) -> bool {
        self.interface == ingress
            && self.protocol == key.protocol
            && self.to == key.dst
            && self.ports.contains(&key.dst_port)
            && prefix_of(key.src, self.from.1) == self.from.0
    }
}

/// A WAN port (range) forwarded to a LAN host (DNAT).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortForward {
    /// The interface whose address receives the port.
    pub interface: u16,
    pub protocol: u8,
    pub ports: RangeInclusive<u16>,
    pub to: Ipv4Addr,
    /// The LAN port for `ports.start()`; a range maps one to one.
    pub to_port: u16,
}

impl PortForward {
    pub fn translate(&self, port: u16) -> u16 {
        self.to_port.wrapping_add(port - self.ports.start())
    }
}

/// The stateful part of the config: zones, NAT and firewall. Applies to new flows; a reload
/// swaps it without touching the flows workers hold.
#[derive(Debug)]
pub struct Stateful {
    /// The firewall zone of each interface.
    pub zones: Vec<ZoneId>,
    /// Whether flows leaving each interface are masqueraded to its address.
    pub masquerade: Vec<bool>,
    pub firewall: RuleSet,
    /// The operator's forwards (`nat.port_forwards`), checked first, in order.
    pub port_forwards: Vec<PortForward>,
    /// The forwards LAN hosts asked for by PCP or NAT-PMP (`crate::portmap`), after them.
    pub port_mappings: PortMappings,
    /// Re-check established flows against the rules after a reload, dropping those now denied.
    pub recheck_established: bool,
    /// Changes with every reload, so flows can tell they were admitted under older rules.
    pub generation: u32,
    /// Keyword block and parental control, when configured.
    pub content: Option<Arc<ContentPolicy>>,
}

impl Stateful {
    /// No NAT, every interface its own zone, everything accepted: a plain router.
    pub fn open(interfaces: usize) -> Stateful {
        Stateful {
            zones: (0..interfaces).map(|i| ZoneId(i as u8)).collect(),
            masquerade: vec![false; interfaces],
            firewall: RuleSet::compile(Vec::new(), Policy::new(Action::Accept))
                .expect("an empty rule set compiles"),
            port_forwards: Vec::new(),
            port_mappings: PortMappings::default(),
            recheck_established: false,
            generation: 0,
            content: None,
        }
    }

    /// The port forward that `dst:port` hits, if any.
    #[inline]
    pub fn port_forward(
        &self,
        interfaces: &[Interface],
        protocol: u8,
        dst: Ipv4Addr,
        port: u16,
    ) -> Option<&PortForward> {
        let index = self.port_forward_index(interfaces, protocol, dst, port)?;
        self.forward_at(index)
    }

    /// The forward at `index` as [`port_forward_index`](Self::port_forward_index) counts:
    /// the operator's, then the mappings.
    #[inline]
    pub fn forward_at(&self, index: usize) -> Option<&PortForward> {
        match index.checked_sub(self.port_forwards.len()) {
            None => self.port_forwards.get(index),
            Some(mapping) => self.port_mappings.forwards.get(mapping),
        }
    }

    /// Whether any forward, on any interface, takes `protocol` `port`.
    pub fn forwards_port(&self, protocol: u8, port: u16) -> bool {
        self.port_forwards
            .iter()
            .any(|f| f.protocol == protocol && f.ports.contains(&port))
            || self.port_mappings.find(protocol, port).is_some()
    }

    /// Every forward: the operator's, then the mappings.
    pub fn all_port_forwards(&self) -> impl Iterator<Item = &PortForward> {
        self.port_forwards
            .iter()
            .chain(&self.port_mappings.forwards)
    }

    /// [`port_forward`](Self::port_forward)'s place in `port_forwards`.
    #[inline]
    pub fn port_forward_index(
        &self,
        interfaces: &[Interface],
        protocol: u8,
        dst: Ipv4Addr,
        port: u16,
    ) -> Option<usize> {
        let hits = |forward: &PortForward| {
            forward.protocol == protocol
                && forward.ports.contains(&port)
                && interfaces
                    .get(usize::from(forward.interface))
                    .is_some_and(|iface| iface.is_own(dst))
        };
        if let Some(index) = self.port_forwards.iter().position(hits) {
            return Some(index);
        }
        // Most packets asked about are not for the gateway: no search for them.
        if self.port_mappings.forwards.is_empty() || !interfaces.iter().any(|i| i.is_own(dst)) {
            return None;
        }
        let mapping = self.port_mappings.find(protocol, port)?;
        hits(&self.port_mappings.forwards[mapping]).then_some(self.port_forwards.len() + mapping)
    }

    /// Where a port forward sends a new flow with `key`: the target's address and port.
    #[inline]
    pub fn dnat(&self, interfaces: &[Interface], key: &FlowKey) -> Option<(Ipv4Addr, u16)> {
        self.dnat_indexed(interfaces, key).map(|(_, target)| target)
    }

    /// [`dnat`](Self::dnat), with the forward's place in `port_forwards`.
    #[inline]
    pub fn dnat_indexed(
        &self,
        interfaces: &[Interface],
        key: &FlowKey,
    ) -> Option<(usize, (Ipv4Addr, u16))> {
        let index = self.port_forward_index(interfaces, key.protocol, key.dst, key.dst_port)?;
        let forward = self.forward_at(index)?;
        Some((index, (forward.to, forward.translate(key.dst_port))))
    }
}

/// The forwards of one port each that LAN hosts asked for (PCP, NAT-PMP), kept sorted by
/// protocol and port so that a new flow at the gateway's address finds its mapping by a
/// binary search, however many there are (a flood of SYNs at random ports costs each a
/// search, not a scan). One mapping per protocol and port: the table that made them
/// (`crate::portmap::MappingTable`) hands out each external port once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortMappings {
    forwards: Vec<PortForward>,
}

impl PortMappings {
    /// From forwards of one port each; a second forward of a protocol and port is dropped.
    pub fn new(mut forwards: Vec<PortForward>) -> Self {
        forwards.retain(|forward| forward.ports.start() == forward.ports.end());
        forwards.sort_by_key(|forward| (forward.protocol, *forward.ports.start()));
        forwards.dedup_by_key(|forward| (forward.protocol, *forward.ports.start()));
        PortMappings { forwards }
    }

    pub fn forwards(&self) -> &[PortForward] {
        &self.forwards
    }

    #[inline]
    fn find(&self, protocol: u8, port: u16) -> Option<usize> {
        if self.forwards.is_empty() {
            return None;
        }
        self.forwards
            .binary_search_by_key(&(protocol, port), |forward| {
                (forward.protocol, *forward.ports.start())
            })
            .ok()
    }
}

#[derive(Debug)]
pub struct RouterConfig {
    pub interfaces: Vec<Interface>,
    pub routes: RouteTable,
    pub icmp: IcmpLimits,
    pub stateful: Stateful,
    /// Policing of the WAN links; None: off. A reload that changes it rebuilds each worker's
    /// policers, whose counters carry on.
    pub qos: Option<QosConfig>,
    /// Whether workers count per-LAN-host traffic into their meters (if they have one).
    pub traffic_meter: bool,
    /// RFC 3704 source validation, per interface.
    pub source_validation: Vec<SourceValidation>,
    /// Whether a default route exists: loose validation then needs no route lookup.
    has_default_route: bool,
    /// Per interface, the largest MSS a TCP SYN entering or leaving by it may announce (None:
    /// SYNs keep theirs); see [`RouterConfig::mss_limit`].
    tcp_mss: Vec<Option<u16>>,
    /// Whether any interface clamps, kept beside `tcp_mss`: with none, a full-path packet pays
    /// this one test instead of reading two clamps (12-15 instructions a SYN in `make
    /// instructions`).
    clamps_mss: bool,
    /// The kernel twins and the budget for what goes to them ([`crate::pipeline::local::punt`]).
    pub punt: PuntConfig,
    /// Bit i: interface i runs a PPPoE client, whose discovery and PPP control frames go to
    /// the control thread.
    pppoe_interfaces: u64,
    /// Per interface, its IPv6 side; empty when no interface has one.
    ipv6: Vec<Option<Ipv6Interface>>,
    /// IPv6 routes: the interfaces' prefixes and the static ones.
    pub routes6: RouteTable6,
    /// Some static IPv6 route is a default route (`::/0`), for loose source validation.
    has_default_route6: bool,
    /// IPv6 services outside hosts may reach through the zone policy.
    pub pinholes6: Vec<Pinhole6>,
    /// Every interface's IPv6 addresses, link-local ones included, for [`Self::owns6`].
    own6: Vec<u128>,
    /// Which prefixes the kernel twins' routes may have (`kernel_twins.route_allow`).
    pub kernel_allow: KernelRouteAllow,
    /// The kernel routes (IPv4, then IPv6) not installed, and why; in the kernel's order.
    pub refused_kernel_routes: Vec<RefusedRoute>,
    /// Several masqueraded uplinks sharing the default route's flows; empty: the routing
    /// table alone decides.
    pub uplinks: Uplinks,
}

/// A static IPv6 route, its interface resolved (a link-local next hop is only meaningful
/// with one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticRoute6 {
    pub destination: Ipv6Addr,
    pub len: u8,
    pub via: Ipv6Addr,
    pub port: u16,
}

/// An IPv6 route the kernel installed on an interface's twin (from the ISP's Router
/// Advertisements, by dhcpcd, by FRR), mirrored into the IPv6 FIB below the connected and
/// static routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelRoute6 {
    pub destination: Ipv6Addr,
    pub len: u8,
    /// The interface whose twin the route is on.
    pub port: u16,
    /// None: on-link.
    pub via: Option<Ipv6Addr>,
}

/// An interface's IPv6 side: the gateway's own addresses there, and what it announces.
/// The gateway answers Neighbor Discovery and echo on these addresses, advertises their
/// prefixes for SLAAC, and forwards IPv6 between interfaces that have them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ipv6Interface {
    /// `fe80::/64` with the interface MAC's EUI-64 identifier (RFC 4291 appendix A).
    pub link_local: Ipv6Addr,
    /// Global or unique-local addresses, each with its on-link prefix length.
    pub addresses: Vec<(Ipv6Addr, u8)>,
    /// Router Advertisements on this link; None: none sent and solicitations unanswered.
    pub advertise: Option<RouterAdvertConfig>,
    /// The link's routers configure the gateway (a WAN's ISP): the Router Advertisements and
    /// DHCPv6 answers arriving here go to the interface's kernel twin, where the kernel or a
    /// DHCPv6 client (dhcpcd) takes addresses, routes and delegated prefixes from them.
    pub autoconfigure: bool,
}

/// What the gateway's Router Advertisements on one link say, and how often they go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterAdvertConfig {
    /// MaxRtrAdvInterval (RFC 4861 6.2.1, 4 to 1800 s): unsolicited advertisements go at a
    /// random interval between a third of it and it.
    pub interval_secs: u32,
    /// Recursive DNS servers announced (RFC 8106); none: no RDNSS option.
    pub dns_servers: Vec<Ipv6Addr>,
    /// How long hosts may use the gateway as their default router: 0 (not one) unless an
    /// IPv6 default route leaves by another interface; set by `RouterConfig::with_ipv6`.
    pub router_lifetime_secs: u16,
    /// The lifetimes of the interface's prefixes that came with a lease (a delegated prefix,
    /// the ISP's advertised one): the advertisements promise hosts no more (RFC 9096).
    pub leases: Vec<PrefixLease>,
}

/// How long a prefix the kernel learnt stays valid and preferred: deadlines on the clock
/// the advertisements are written by (`write_router_advert`'s `now_secs`); None: forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixLease {
    pub prefix: Ipv6Addr,
    pub len: u8,
    pub valid_until_secs: Option<u64>,
    pub preferred_until_secs: Option<u64>,
}

impl RouterAdvertConfig {
    /// RFC 4861's default MaxRtrAdvInterval.
    pub const DEFAULT_INTERVAL_SECS: u32 = 600;

    /// RFC 4861 6.2.1's AdvDefaultLifetime: three advertisement intervals, at most 9000 s.
    pub fn default_router_lifetime(&self) -> u16 {
        self.interval_secs.saturating_mul(3).min(9000) as u16
    }
}

impl Ipv6Interface {
    /// Whether `addr` is one of the gateway's unicast addresses on this link.
    pub fn owns(&self, addr: Ipv6Addr) -> bool {
        addr == self.link_local || self.addresses.iter().any(|&(own, _)| own == addr)
    }

    /// Whether `addr` is on this link, so that a neighbour may have it: link-local, or in one
    /// of the interface's prefixes. Neighbour Discovery learns nothing else here, as ARP learns
    /// only from the interface's own subnet.
    pub fn on_link(&self, addr: Ipv6Addr) -> bool {
        is_link_local(addr)
            || self
                .addresses
                .iter()
                .any(|&(own, len)| prefix_of(own, len) == prefix_of(addr, len))
    }

    /// Whether a packet to `dst` is for the gateway: one of its addresses, or a group it
    /// belongs to on this link (all nodes, all routers, its addresses' solicited-node groups).
    pub fn accepts(&self, dst: Ipv6Addr) -> bool {
        if dst.is_multicast() {
            return dst == ALL_NODES
                || dst == ALL_ROUTERS
                || dst == solicited_node(self.link_local)
                || self
                    .addresses
                    .iter()
                    .any(|&(own, _)| dst == solicited_node(own));
        }
        self.owns(dst)
    }
}

/// How a packet's source address is checked against the interface it came in on (RFC 3704).
/// Refused packets are dropped as `source_validation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceValidation {
    /// The route back to the source must leave by this interface (strict reverse path).
    /// The default on interfaces that no default route leaves by: LANs, DMZs.
    Strict,
    /// The source must be routable, and must not be in another interface's connected
    /// subnet. The default where a default route leaves: the uplink, where the reverse path
    /// to most of the internet is the default route anyway, and where asymmetric routing
    /// (several uplinks) would break strict checks.
    Loose,
    Off,
}

impl RouterConfig {
    /// Traffic for one of the gateway's addresses that the `local` rules accepted and that
    /// the dataplane does not answer itself: to the twin of the interface it came in by
    /// (`ingress`). Without a twin there, nothing can take it: dropped as `local_delivery`.
    #[inline]
    pub(crate) fn deliver_locally(&self, ingress: u16) -> Verdict {
        if self.punt.has_twin(ingress) {
            Verdict::Punt { port: ingress }
        } else {
            Verdict::Drop(DropReason::LocalDelivery)
        }
    }

    /// Connected routes come from the interfaces; static routes resolve their gateway to the
    /// interface whose subnet holds it.
    pub fn new(
        interfaces: Vec<Interface>,
        static_routes: &[StaticRoute],
        icmp: IcmpLimits,
    ) -> Result<RouterConfig, RouterError> {
        Self::with_kernel_routes(interfaces, static_routes, &[], icmp)
    }

    /// As [`RouterConfig::new`], with the routes the kernel has on the twins, any prefix
    /// allowed ([`Self::with_bounded_kernel_routes`]).
    pub fn with_kernel_routes(
        interfaces: Vec<Interface>,
        static_routes: &[StaticRoute],
        kernel_routes: &[KernelRoute],
        icmp: IcmpLimits,
    ) -> Result<RouterConfig, RouterError> {
        Self::with_bounded_kernel_routes(
            interfaces,
            static_routes,
            kernel_routes,
            KernelRouteAllow::default(),
            icmp,
        )
    }

    /// As [`RouterConfig::new`], with the routes the kernel has on the twins. Precedence:
    /// connected, then static, then kernel routes. Kernel routes are bounded:
    /// - one whose prefix is inside (or is) an interface's connected prefix is refused
    ///   ([`RouteRefusal::OverlapsConnected`]): it would beat the connected route for part of
    ///   the link. A less specific one that holds a connected prefix (a default route) stays:
    ///   the connected route is longer and wins. The interface's own connected route restated
    ///   (its prefix, on its twin, on-link) is no refusal, only a duplicate;
    /// - then one outside `allow` is refused ([`RouteRefusal::NotAllowed`]).
    ///
    /// The refused are kept in [`Self::refused_kernel_routes`]. Static routes bound nothing:
    /// they are the operator's word for where a range goes, and a kernel route inside one
    /// (FRR refining an aggregate) is the allow-list's to permit or not. Left out without a
    /// word, as before: a kernel route whose prefix a connected, static or earlier kernel
    /// route has (the caller orders them best first), one with host bits set, one on an
    /// unknown port.
    pub fn with_bounded_kernel_routes(
        interfaces: Vec<Interface>,
        static_routes: &[StaticRoute],
        kernel_routes: &[KernelRoute],
        allow: KernelRouteAllow,
        icmp: IcmpLimits,
    ) -> Result<RouterConfig, RouterError> {
        if interfaces.len() > 64 {
            return Err(RouterError::TooManyInterfaces);
        }
        if let Some(iface) = interfaces.iter().find(|iface| iface.prefix_len > 32) {
            return Err(RouterError::BadPrefixLength(iface.prefix_len));
        }
        let mut routes: Vec<Route> = interfaces
            .iter()
            .enumerate()
            .filter(|(_, iface)| iface.has_address())
            .map(|(port, iface)| Route {
                prefix: iface.network(),
                len: iface.prefix_len,
                next_hop: NextHop {
                    port: port as u16,
                    gateway: None,
                },
            })
            .collect();
        for route in static_routes {
            let port = interfaces
                .iter()
                .position(|iface| {
                    iface.prefix_len > 0
                        && iface.has_address()
                        && u32::from(route.via) & iface.mask() == u32::from(iface.network())
                })
                .ok_or(RouterError::UnreachableGateway(*route))?;
            routes.push(Route {
                prefix: route.destination,
                len: route.len,
                next_hop: NextHop {
                    port: port as u16,
                    gateway: Some(route.via),
                },
            });
        }
        let mut refused = Vec::new();
        for route in kernel_routes {
            if route.len > 32
                || u32::from(route.destination) & !mask4(route.len) != 0
                || usize::from(route.port) >= interfaces.len()
            {
                continue;
            }
            let connected = interfaces.iter().position(|iface| {
                iface.has_address()
                    && iface.prefix_len > 0
                    && route.len >= iface.prefix_len
                    && u32::from(route.destination) & iface.mask() == u32::from(iface.network())
            });
            let reason = match connected {
                Some(port)
                    if port == usize::from(route.port)
                        && route.len == interfaces[port].prefix_len
                        && route.via.is_none() =>
                {
                    continue;
                }
                Some(port) => Some(RouteRefusal::OverlapsConnected {
                    interface: port as u16,
                }),
                None if !allow.allows_v4(route) => Some(RouteRefusal::NotAllowed),
                None => None,
            };
            if let Some(reason) = reason {
                refused.push(RefusedRoute {
                    destination: IpAddr::V4(route.destination),
                    len: route.len,
                    port: route.port,
                    via: route.via.map(IpAddr::V4),
                    reason,
                });
                continue;
            }
            let shadowed = routes
                .iter()
                .any(|other| (other.prefix, other.len) == (route.destination, route.len));
            if shadowed {
                continue;
            }
            routes.push(Route {
                prefix: route.destination,
                len: route.len,
                next_hop: NextHop {
                    port: route.port,
                    gateway: route.via,
                },
            });
        }
        let default_ports: Vec<u16> = routes
            .iter()
            .filter(|route| route.len == 0)
            .map(|route| route.next_hop.port)
            .collect();
        let source_validation = (0..interfaces.len() as u16)
            .map(|port| {
                if default_ports.contains(&port) {
                    SourceValidation::Loose
                } else {
                    SourceValidation::Strict
                }
            })
            .collect();
        let routes = RouteTable::build(&routes).map_err(RouterError::Route)?;
        let stateful = Stateful::open(interfaces.len());
        let punt = PuntConfig::none(interfaces.len());
        let tcp_mss = vec![None; interfaces.len()];
        Ok(RouterConfig {
            interfaces,
            routes,
            icmp,
            stateful,
            qos: None,
            traffic_meter: false,
            source_validation,
            has_default_route: !default_ports.is_empty(),
            tcp_mss,
            clamps_mss: false,
            pppoe_interfaces: 0,
            punt,
            ipv6: Vec::new(),
            routes6: RouteTable6::build(&[]).map_err(RouterError::Route6)?,
            has_default_route6: false,
            pinholes6: Vec::new(),
            own6: Vec::new(),
            kernel_allow: allow,
            refused_kernel_routes: refused,
            uplinks: Uplinks::default(),
        })
    }

    /// Shares the default route's new flows among `uplinks` (see
    /// [`crate::pipeline::uplinks`]). The default route becomes the uplinks' (by the best
    /// uplink, for what no uplink takes), in place of any other; their interfaces validate
    /// sources loosely, as one with the default route does: replies from anywhere come back
    /// by each of them. Call before [`with_source_validation`](Self::with_source_validation),
    /// which the operator's word on an interface overrides this with.
    pub fn with_uplinks(mut self, uplinks: Uplinks) -> Result<RouterConfig, RouterError> {
        for uplink in uplinks.uplinks() {
            let port = usize::from(uplink.port);
            if port >= self.interfaces.len() {
                return Err(RouterError::StatefulMismatch);
            }
            self.source_validation[port] = SourceValidation::Loose;
        }
        if !uplinks.is_empty() {
            let mut routes: Vec<Route> = (self.routes.routes().iter())
                .filter(|route| route.len != 0)
                .copied()
                .collect();
            if let Some(next_hop) = uplinks.default_next_hop() {
                routes.push(Route {
                    prefix: Ipv4Addr::UNSPECIFIED,
                    len: 0,
                    next_hop,
                });
            }
            self.has_default_route = routes.iter().any(|route| route.len == 0);
            self.routes = RouteTable::build(&routes).map_err(RouterError::Route)?;
        }
        self.uplinks = uplinks;
        Ok(self)
    }

    /// Gives the interfaces marked in `punt.twins` a kernel twin to punt to.
    pub fn with_punt(mut self, punt: PuntConfig) -> Result<RouterConfig, RouterError> {
        if punt.twins.len() != self.interfaces.len() {
            return Err(RouterError::StatefulMismatch);
        }
        self.punt = punt;
        Ok(self)
    }

    /// Overrides the default source validation of the interfaces given `Some`.
    pub fn with_source_validation(
        mut self,
        modes: &[Option<SourceValidation>],
    ) -> Result<RouterConfig, RouterError> {
        if modes.len() != self.interfaces.len() {
            return Err(RouterError::StatefulMismatch);
        }
        for (current, mode) in self.source_validation.iter_mut().zip(modes) {
            if let Some(mode) = mode {
                *current = *mode;
            }
        }
        Ok(self)
    }

    /// Clamps the MSS of forwarded TCP SYNs (and SYN-ACKs) through the interfaces given `Some`
    /// to that many bytes: on a link whose MTU is below the hosts' (PPPoE's 1492, a tunnel),
    /// where path-MTU discovery fails behind firewalls that drop ICMP. The values are the
    /// caller's to validate (the gateway's config allows 536 to the MTU less 40).
    pub fn with_tcp_mss(mut self, mss: &[Option<u16>]) -> Result<RouterConfig, RouterError> {
        if mss.len() != self.interfaces.len() {
            return Err(RouterError::StatefulMismatch);
        }
        self.tcp_mss = mss.to_vec();
        self.clamps_mss = mss.iter().any(Option::is_some);
        Ok(self)
    }

    /// Gives interfaces their IPv6 side (one entry per interface, None where IPv6 is off),
    /// and the IPv6 routes: each address's prefix connected on its interface, then `routes`.
    pub fn with_ipv6(
        self,
        ipv6: Vec<Option<Ipv6Interface>>,
        routes: &[StaticRoute6],
    ) -> Result<RouterConfig, RouterError> {
        self.with_ipv6_and_kernel(ipv6, routes, &[])
    }

    /// [`Self::with_ipv6`] with the routes on the twins last: connected, static, kernel.
    pub fn with_ipv6_and_kernel(
        mut self,
        mut ipv6: Vec<Option<Ipv6Interface>>,
        routes: &[StaticRoute6],
        kernel_routes: &[KernelRoute6],
    ) -> Result<RouterConfig, RouterError> {
        if ipv6.len() != self.interfaces.len() {
            return Err(RouterError::StatefulMismatch);
        }
        let connected = ipv6.iter().enumerate().flat_map(|(port, v6)| {
            v6.iter().flat_map(move |v6| {
                v6.addresses.iter().map(move |&(addr, len)| Route6 {
                    prefix: prefix_of(addr, len),
                    len,
                    next_hop: NextHop6 {
                        port: port as u16,
                        gateway: None,
                    },
                })
            })
        });
        let mut table: Vec<Route6> = Vec::new();
        // Connected first: a static route for a connected prefix is left out, as for IPv4.
        let statics = routes.iter().map(|route| Route6 {
            prefix: route.destination,
            len: route.len,
            next_hop: NextHop6 {
                port: route.port,
                gateway: Some(route.via),
            },
        });
        // The bound, as IPv4's (`with_bounded_kernel_routes`): the interfaces' own prefixes,
        // configured or from the kernel (delegated, autoconfigured), are no kernel route's.
        let own_prefixes: Vec<(usize, Ipv6Addr, u8)> = ipv6
            .iter()
            .enumerate()
            .flat_map(|(port, v6)| {
                v6.iter().flat_map(move |v6| {
                    v6.addresses
                        .iter()
                        .map(move |&(addr, len)| (port, prefix_of(addr, len), len))
                })
            })
            .collect();
        self.refused_kernel_routes
            .retain(|refused| refused.destination.is_ipv4());
        let mut taken = Vec::new();
        for route in kernel_routes {
            let prefix = prefix_of(route.destination, route.len);
            if route.len > 128 || usize::from(route.port) >= ipv6.len() {
                continue;
            }
            let connected = own_prefixes.iter().find(|&&(_, own, own_len)| {
                route.len >= own_len && prefix_of(prefix, own_len) == own
            });
            let reason = match connected {
                Some(&(port, _, own_len))
                    if port == usize::from(route.port)
                        && route.len == own_len
                        && route.via.is_none() =>
                {
                    continue;
                }
                Some(&(port, _, _)) => Some(RouteRefusal::OverlapsConnected {
                    interface: port as u16,
                }),
                None if !self.kernel_allow.allows_v6(route) => Some(RouteRefusal::NotAllowed),
                None => None,
            };
            match reason {
                Some(reason) => self.refused_kernel_routes.push(RefusedRoute {
                    destination: IpAddr::V6(prefix),
                    len: route.len,
                    port: route.port,
                    via: route.via.map(IpAddr::V6),
                    reason,
                }),
                None => taken.push(Route6 {
                    prefix,
                    len: route.len,
                    next_hop: NextHop6 {
                        port: route.port,
                        gateway: route.via,
                    },
                }),
            }
        }
        for route in connected.chain(statics).chain(taken) {
            if !table
                .iter()
                .any(|r| (r.prefix, r.len) == (route.prefix, route.len))
            {
                table.push(route);
            }
        }
        self.routes6 = RouteTable6::build(&table).map_err(RouterError::Route6)?;
        // Where each default route leaves.
        let default_ports: Vec<u16> = table
            .iter()
            .filter(|route| route.len == 0)
            .map(|route| route.next_hop.port)
            .collect();
        self.has_default_route6 = !default_ports.is_empty();
        self.own6 = ipv6
            .iter()
            .flatten()
            .flat_map(|v6| {
                std::iter::once(v6.link_local).chain(v6.addresses.iter().map(|&(own, _)| own))
            })
            .map(u128::from)
            .collect();
        // A link is told the gateway is its default router only if the default route leaves
        // by another link: hosts would otherwise send it what it can only send back.
        for (port, v6) in ipv6.iter_mut().enumerate() {
            let default_elsewhere = default_ports
                .iter()
                .any(|&default_port| usize::from(default_port) != port);
            if let Some(advert) = v6.as_mut().and_then(|v6| v6.advertise.as_mut()) {
                advert.router_lifetime_secs = if default_elsewhere {
                    advert.default_router_lifetime()
                } else {
                    0
                };
            }
        }
        self.ipv6 = if ipv6.iter().all(Option::is_none) {
            Vec::new()
        } else {
            ipv6
        };
        Ok(self)
    }

    /// Interface `port`'s IPv6 side, if it has one.
    #[inline]
    pub fn ipv6(&self, port: u16) -> Option<&Ipv6Interface> {
        self.ipv6.get(usize::from(port))?.as_ref()
    }

    /// Marks the interfaces that run a PPPoE client (one flag per interface).
    pub fn with_pppoe(mut self, pppoe: &[bool]) -> Result<RouterConfig, RouterError> {
        if pppoe.len() != self.interfaces.len() {
            return Err(RouterError::StatefulMismatch);
        }
        self.pppoe_interfaces = pppoe
            .iter()
            .enumerate()
            .filter(|(_, &on)| on)
            .fold(0, |mask, (i, _)| mask | 1 << i);
        Ok(self)
    }

    /// Whether interface `port` runs a PPPoE client.
    #[inline]
    pub fn runs_pppoe(&self, port: u16) -> bool {
        port < 64 && self.pppoe_interfaces & (1 << port) != 0
    }

    /// The largest MSS a SYN from `ingress` to `egress` may announce: the lower of the two
    /// interfaces' clamps, as the SYN crosses both.
    #[inline]
    pub fn mss_limit(&self, ingress: u16, egress: u16) -> Option<u16> {
        if !self.clamps_mss {
            return None;
        }
        let clamp = |port: u16| self.tcp_mss.get(usize::from(port)).copied().flatten();
        match (clamp(ingress), clamp(egress)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Opens the IPv6 pinholes `pinholes` (their interfaces must exist).
    pub fn with_pinholes6(mut self, pinholes: Vec<Pinhole6>) -> Result<RouterConfig, RouterError> {
        if pinholes
            .iter()
            .any(|pinhole| usize::from(pinhole.interface) >= self.interfaces.len())
        {
            return Err(RouterError::StatefulMismatch);
        }
        self.pinholes6 = pinholes;
        Ok(self)
    }

    /// Whether any interface has IPv6.
    pub fn has_ipv6(&self) -> bool {
        !self.ipv6.is_empty()
    }

    /// Whether `addr` is one of the gateway's IPv6 addresses, on any interface.
    #[inline]
    pub fn owns6(&self, addr: Ipv6Addr) -> bool {
        // Two 64-bit compares an address, where `Ipv6Interface::owns` compares bytes: every
        // forwarded packet asks this of its source and destination.
        let addr = u128::from(addr);
        self.own6.contains(&addr)
    }

    /// [`source_allowed`](Self::source_allowed) for IPv6: the same modes, over the IPv6
    /// routes and the interfaces' IPv6 prefixes.
    #[inline]
    pub fn source_allowed6(&self, port: u16, src: Ipv6Addr) -> bool {
        match self.source_validation.get(usize::from(port)) {
            None | Some(SourceValidation::Off) => true,
            Some(SourceValidation::Strict) => {
                self.routes6.lookup(src).is_some_and(|hop| hop.port == port)
            }
            Some(SourceValidation::Loose) => {
                let on_another_link = self.ipv6.iter().enumerate().any(|(i, v6)| {
                    i != usize::from(port)
                        && v6.as_ref().is_some_and(|v6| {
                            v6.addresses
                                .iter()
                                .any(|&(own, len)| prefix_of(own, len) == prefix_of(src, len))
                        })
                });
                !on_another_link && (self.has_default_route6 || self.routes6.lookup(src).is_some())
            }
        }
    }

    /// Whether a packet from `src` may come in on `port` (RFC 3704; see [`SourceValidation`]).
    #[inline]
    pub fn source_allowed(&self, port: u16, src: Ipv4Addr) -> bool {
        match self.source_validation.get(usize::from(port)) {
            None | Some(SourceValidation::Off) => true,
            Some(SourceValidation::Strict) => {
                self.routes.lookup(src).is_some_and(|hop| hop.port == port)
            }
            Some(SourceValidation::Loose) => {
                let on_another_link = self
                    .interfaces
                    .iter()
                    .enumerate()
                    .any(|(i, iface)| i != usize::from(port) && iface.contains(src));
                !on_another_link && (self.has_default_route || self.routes.lookup(src).is_some())
            }
        }
    }

    /// Turns QoS policing on with `qos`, or off with None.
    pub fn with_qos(mut self, qos: Option<QosConfig>) -> RouterConfig {
        self.qos = qos;
        self
    }

    /// Turns the traffic meter on or off.
    pub fn with_traffic_meter(mut self, on: bool) -> RouterConfig {
        self.traffic_meter = on;
        self
    }

    /// Replaces the plain-router defaults with zones, NAT and firewall.
    pub fn with_stateful(mut self, stateful: Stateful) -> Result<RouterConfig, RouterError> {
        let n = self.interfaces.len();
        if stateful.zones.len() != n || stateful.masquerade.len() != n {
            return Err(RouterError::StatefulMismatch);
        }
        if stateful
            .all_port_forwards()
            .any(|f| usize::from(f.interface) >= n || f.ports.is_empty())
        {
            return Err(RouterError::StatefulMismatch);
        }
        self.stateful = stateful;
        Ok(self)
    }

    /// The addresses flows are masqueraded to: those of the masquerading interfaces, and
    /// their virtual ones (the kernel's own connections keep the interface's address).
    pub fn nat_addresses(&self) -> Vec<Ipv4Addr> {
        self.interfaces
            .iter()
            .zip(&self.stateful.masquerade)
            .filter(|(iface, &masquerade)| masquerade && iface.has_address())
            .flat_map(|(iface, _)| std::iter::once(iface.addr).chain(iface.virtual_addr))
            .collect()
    }

    /// The pool address every hairpinned flow takes its port on: the first masquerading
    /// interface's masquerade address, its virtual one in an HA pair, so that both boxes of
    /// the pair bind a hairpinned flow alike and the standby's copy of it holds.
    pub fn hairpin_nat_address(&self) -> Option<Ipv4Addr> {
        self.interfaces
            .iter()
            .zip(&self.stateful.masquerade)
            .find(|(iface, &masquerade)| masquerade && iface.has_address())
            .map(|(iface, _)| iface.masquerade_addr())
    }

    /// Where a datagram from `src` to `dst` whose headers are final goes: one leaving with an
    /// uplink's address toward the default route leaves by that uplink, the one its flow
    /// keeps (a flow is masqueraded to its uplink's address, and a forward's replies, the
    /// gateway's resets and ICMP errors leave from the address they answer: see
    /// [`crate::pipeline::uplinks`]); anything else by the routing table. The workers route
    /// by it, and so does the control thread for the packets it held for a next hop's MAC
    /// (a worker's route is not carried with them).
    #[inline]
    pub fn route_from(&self, src: Ipv4Addr, dst: Ipv4Addr) -> Option<NextHop> {
        let (route, from_default) = self.routes.lookup_from_default(dst)?;
        let kept = || {
            let port = self.local_port(src)?;
            self.uplinks.next_hop(port)
        };
        match from_default && !self.uplinks.is_empty() {
            true => Some(kept().unwrap_or(route)),
            false => Some(route),
        }
    }

    /// The port whose address is `ip`, if `ip` is one of the gateway's own.
    #[inline]
    pub fn local_port(&self, ip: Ipv4Addr) -> Option<u16> {
        self.interfaces
            .iter()
            .position(|iface| iface.is_own(ip))
            .map(|port| port as u16)
    }
}

/// Which interfaces have a kernel twin, and each worker's budget for what goes to them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PuntConfig {
    /// Per interface, in port order: whether it has a twin to punt to.
    pub twins: Vec<bool>,
    /// Per interface: whether a DHCP client on its twin gets its address (`address =
    /// "dhcp"`), so that the DHCP server's answers go to the twin whatever their
    /// destination (the address on offer, ours, broadcast).
    pub dhcp_clients: Vec<bool>,
    /// Packets per second each worker may punt, with this burst; the rest are dropped as
    /// `punt_policed`.
    pub per_sec: u32,
    pub burst: u32,
}

impl PuntConfig {
    /// Enough for DHCP, DNS and an SSH session many times over, yet a small share of a
    /// worker's packet rate (a few million per second).
    pub const DEFAULT_PER_SEC: u32 = 10_000;
    pub const DEFAULT_BURST: u32 = 256;

    /// No twins: nothing is punted (what the gateway did before twins existed).
    pub fn none(interfaces: usize) -> Self {
        PuntConfig {
            twins: vec![false; interfaces],
            dhcp_clients: vec![false; interfaces],
            per_sec: Self::DEFAULT_PER_SEC,
            burst: Self::DEFAULT_BURST,
        }
    }

    #[inline]
    pub fn has_twin(&self, port: u16) -> bool {
        self.twins.get(usize::from(port)).copied().unwrap_or(false)
    }

    #[inline]
    pub fn is_dhcp_client(&self, port: u16) -> bool {
        self.dhcp_clients
            .get(usize::from(port))
            .copied()
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAN: u16 = 0;
    const WAN: u16 = 1;
    const UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const UPSTREAM6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 2);

    fn interfaces() -> Vec<Interface> {
        let iface = |addr: [u8; 4], last: u8| Interface {
            mac: EthernetAddress([2, 0, 0, 0, 0, last]),
            addr: Ipv4Addr::from(addr),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        };
        vec![iface([192, 168, 77, 1], 1), iface([10, 0, 0, 1], 2)]
    }

    fn v4(destination: [u8; 4], len: u8, port: u16, via: Option<Ipv4Addr>) -> KernelRoute {
        KernelRoute {
            destination: Ipv4Addr::from(destination),
            len,
            port,
            via,
        }
    }

    fn build(kernel: &[KernelRoute], allow: KernelRouteAllow) -> RouterConfig {
        RouterConfig::with_bounded_kernel_routes(
            interfaces(),
            &[],
            kernel,
            allow,
            IcmpLimits::default(),
        )
        .unwrap()
    }

    fn refused(destination: IpAddr, len: u8, port: u16, reason: RouteRefusal) -> RefusedRoute {
        let via = match destination {
            IpAddr::V4(_) => IpAddr::V4(UPSTREAM),
            IpAddr::V6(_) => IpAddr::V6(UPSTREAM6),
        };
        RefusedRoute {
            destination,
            len,
            port,
            via: Some(via),
            reason,
        }
    }

    #[test]
    fn a_kernel_route_inside_a_connected_subnet_is_refused_and_wider_ones_stay() {
        let up = Some(UPSTREAM);
        let kernel = [
            // TunnelVision: half the LAN pulled to the WAN's upstream.
            v4([192, 168, 77, 0], 25, WAN, up),
            // The LAN's whole prefix through the WAN, and a host in it.
            v4([192, 168, 77, 0], 24, WAN, up),
            v4([192, 168, 77, 200], 32, WAN, up),
            // Inside the WAN's own subnet, through the upstream.
            v4([10, 0, 0, 128], 25, WAN, up),
            // Harmless: less specific than the connected routes, which still win.
            v4([0, 0, 0, 0], 0, WAN, up),
            v4([192, 168, 0, 0], 16, WAN, up),
            v4([198, 51, 100, 0], 24, WAN, up),
            // The WAN twin's own connected route restated: a duplicate, no refusal.
            v4([10, 0, 0, 0], 24, WAN, None),
        ];
        let config = build(&kernel, KernelRouteAllow::default());
        let overlaps = |port| RouteRefusal::OverlapsConnected { interface: port };
        let lan = |last: u8| IpAddr::V4(Ipv4Addr::new(192, 168, 77, last));
        assert_eq!(
            config.refused_kernel_routes,
            vec![
                refused(lan(0), 25, WAN, overlaps(LAN)),
                refused(lan(0), 24, WAN, overlaps(LAN)),
                refused(lan(200), 32, WAN, overlaps(LAN)),
                refused(
                    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 128)),
                    25,
                    WAN,
                    overlaps(WAN)
                ),
            ]
        );
        let hop = |ip: [u8; 4]| config.routes.lookup(Ipv4Addr::from(ip)).unwrap();
        // Both halves of the LAN, and the host, stay on the LAN.
        for host in [5, 130, 200] {
            assert_eq!(
                hop([192, 168, 77, host]),
                NextHop {
                    port: LAN,
                    gateway: None
                }
            );
        }
        assert_eq!(
            hop([10, 0, 0, 200]),
            NextHop {
                port: WAN,
                gateway: None
            }
        );
        // The default, the /16 and the unrelated /24 were installed.
        for ip in [[8, 8, 8, 8], [192, 168, 5, 5], [198, 51, 100, 7]] {
            assert_eq!(
                hop(ip),
                NextHop {
                    port: WAN,
                    gateway: up
                }
            );
        }
        assert!(config.has_default_route);
        assert_eq!(
            config.refused_kernel_routes[0].reason.label(),
            "overlaps_connected"
        );
    }

    #[test]
    fn an_allow_list_bounds_kernel_routes_but_not_the_gateways_own() {
        let up = Some(UPSTREAM);
        let kernel = [
            v4([0, 0, 0, 0], 0, WAN, up),
            v4([198, 51, 100, 0], 24, WAN, up),
            v4([198, 51, 100, 128], 25, WAN, up),
            v4([203, 0, 113, 0], 24, WAN, up),
            // Inside the LAN: refused for that, whatever the list says.
            v4([192, 168, 77, 0], 25, WAN, up),
        ];
        let allow = KernelRouteAllow {
            v4: Some(vec![(Ipv4Addr::new(198, 51, 100, 0), 24)]),
            v6: Some(Vec::new()),
            own_ports: Vec::new(),
        };
        let config = build(&kernel, allow.clone());
        let reasons: Vec<_> = config
            .refused_kernel_routes
            .iter()
            .map(|refused| (refused.destination, refused.len, refused.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                    0,
                    RouteRefusal::NotAllowed
                ),
                (
                    IpAddr::V4(Ipv4Addr::new(203, 0, 113, 0)),
                    24,
                    RouteRefusal::NotAllowed
                ),
                (
                    IpAddr::V4(Ipv4Addr::new(192, 168, 77, 0)),
                    25,
                    RouteRefusal::OverlapsConnected { interface: LAN }
                ),
            ]
        );
        assert_eq!(
            config.refused_kernel_routes[0].reason.label(),
            "not_allowed"
        );
        assert!(config
            .routes
            .lookup(Ipv4Addr::new(198, 51, 100, 200))
            .is_some());
        assert!(config.routes.lookup(Ipv4Addr::new(8, 8, 8, 8)).is_none());
        assert!(!config.has_default_route);
        // A PPPoE session's default route is the gateway's own: the list does not bound it.
        let own = build(
            &kernel,
            KernelRouteAllow {
                own_ports: vec![WAN],
                ..allow
            },
        );
        assert!(own.has_default_route);
        assert_eq!(own.refused_kernel_routes.len(), 1);
    }

    fn v6(segments: [u16; 8]) -> Ipv6Addr {
        Ipv6Addr::from(segments)
    }

    fn with_ipv6(kernel: &[KernelRoute6], allow: KernelRouteAllow) -> RouterConfig {
        let side = |addr: Ipv6Addr| Ipv6Interface {
            link_local: v6([0xfe80, 0, 0, 0, 0, 0, 0, 1]),
            addresses: vec![(addr, 64)],
            advertise: None,
            autoconfigure: false,
        };
        build(&[], allow)
            .with_ipv6_and_kernel(
                vec![
                    Some(side(v6([0x2001, 0xdb8, 5, 0, 0, 0, 0, 1]))),
                    Some(side(v6([0x2001, 0xdb8, 1, 0, 0, 0, 0, 1]))),
                ],
                &[],
                kernel,
            )
            .unwrap()
    }

    fn r6(destination: Ipv6Addr, len: u8, via: Option<Ipv6Addr>) -> KernelRoute6 {
        KernelRoute6 {
            destination,
            len,
            port: WAN,
            via,
        }
    }

    #[test]
    fn an_ipv6_kernel_route_inside_an_interfaces_prefix_is_refused_and_wider_ones_stay() {
        let up = Some(UPSTREAM6);
        let lan64 = v6([0x2001, 0xdb8, 5, 0, 0, 0, 0, 0]);
        let lan80 = v6([0x2001, 0xdb8, 5, 0, 0x8000, 0, 0, 0]);
        let kernel = [
            r6(lan64, 64, up),
            r6(lan80, 80, up),
            r6(Ipv6Addr::UNSPECIFIED, 0, up),
            r6(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]), 32, up),
            // The WAN twin's own prefix restated on-link: a duplicate, no refusal.
            r6(v6([0x2001, 0xdb8, 1, 0, 0, 0, 0, 0]), 64, None),
        ];
        let config = with_ipv6(&kernel, KernelRouteAllow::default());
        let overlaps = RouteRefusal::OverlapsConnected { interface: LAN };
        assert_eq!(
            config.refused_kernel_routes,
            vec![
                refused(IpAddr::V6(lan64), 64, WAN, overlaps),
                refused(IpAddr::V6(lan80), 80, WAN, overlaps),
            ]
        );
        let hop = |ip: [u16; 8]| config.routes6.lookup(v6(ip)).unwrap();
        for host in [
            [0x2001, 0xdb8, 5, 0, 0, 0, 0, 9],
            [0x2001, 0xdb8, 5, 0, 0x8000, 0, 0, 9],
        ] {
            assert_eq!(
                hop(host),
                NextHop6 {
                    port: LAN,
                    gateway: None
                }
            );
        }
        for remote in [
            [0x2001, 0xdb8, 77, 0, 0, 0, 0, 1],
            [0x2606, 0x4700, 0, 0, 0, 0, 0, 1],
        ] {
            assert_eq!(
                hop(remote),
                NextHop6 {
                    port: WAN,
                    gateway: up
                }
            );
        }
        assert!(config.has_default_route6);
    }

    #[test]
    fn the_allow_list_bounds_ipv6_and_ipv4_refusals_survive_the_ipv6_step() {
        let up = Some(UPSTREAM6);
        let allow = KernelRouteAllow {
            v4: Some(Vec::new()),
            v6: Some(vec![(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]), 32)]),
            own_ports: Vec::new(),
        };
        let mut config = RouterConfig::with_bounded_kernel_routes(
            interfaces(),
            &[],
            &[v4([0, 0, 0, 0], 0, WAN, Some(UPSTREAM))],
            allow.clone(),
            IcmpLimits::default(),
        )
        .unwrap();
        let kernel = [
            r6(Ipv6Addr::UNSPECIFIED, 0, up),
            r6(v6([0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 0]), 48, up),
        ];
        config = config
            .with_ipv6_and_kernel(vec![None, None], &[], &kernel)
            .unwrap();
        let refused: Vec<_> = config
            .refused_kernel_routes
            .iter()
            .map(|refused| (refused.destination, refused.reason))
            .collect();
        assert_eq!(
            refused,
            vec![
                (IpAddr::V4(Ipv4Addr::UNSPECIFIED), RouteRefusal::NotAllowed),
                (IpAddr::V6(Ipv6Addr::UNSPECIFIED), RouteRefusal::NotAllowed),
            ]
        );
        assert!(config
            .routes6
            .lookup(v6([0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 1]))
            .is_some());
        assert!(!config.has_default_route6);
    }
}

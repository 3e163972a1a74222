//! Addresses and routes from the kernel: the twins' side of the exception path, read back.
//!
//! An interface with `address = "dhcp"` gets its address from a DHCP client (dhcpcd,
//! dhclient, systemd-networkd) running on its kernel twin; routing daemons (FRR) and the
//! operator (`ip route add ... dev <twin>`) install routes on the twins. A thread of its own
//! listens for the kernel's link, IPv4 address and IPv4 route notifications (rtnetlink, in
//! the twins' namespace), and after each burst of them reads the twins' addresses and routes
//! afresh (a dump: the kernel does not announce every route it drops with an address or a
//! link, so state is always read, never pieced together from events). When the result
//! differs from the last one, it goes to the control thread over its event channel, which
//! rebuilds and publishes the router config the way a reload does. Nothing polls: the thread
//! sleeps in `recv` until the kernel says something.
//!
//! What is taken: per "dhcp" interface, the twin's first IPv4 address with its prefix; per
//! twin, the unicast IPv4 routes of the main table that leave by it, but for the kernel's own
//! prefix routes (the connected subnet, which the dataplane derives from the address) and
//! multipath routes (not mirrored). Precedence in the FIB: connected, then the config's
//! static routes, then these, bounded: none inside one of the gateway's own subnets, none
//! outside `kernel_twins.route_allow` (`pipeline::RouterConfig::with_bounded_kernel_routes`).
//!
//! IPv6 alike: per interface whose IPv6 the kernel configures (`autoconfigure`: SLAAC and
//! DHCPv6 on a WAN's twin; `delegated_prefix`: what dhcpcd gives a LAN's twin from the
//! delegated prefix), the twin's global addresses once Duplicate Address Detection has
//! passed; per twin, the IPv6 routes taken as IPv4's are (the default route the ISP's
//! Router Advertisement gave, dhcpcd's, FRR's), but for link-local and multicast ones.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use netlink_packet_core::{
    DecodeError, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use pipeline::pipeline::config::{KernelRoute6, PrefixLease};
use pipeline::wire::ipv6::prefix_of;
use pipeline::KernelRoute;

use crate::config::GatewayConfig;

/// rtnetlink multicast groups (linux/rtnetlink.h): links, IPv4 and IPv6 addresses and
/// routes.
const RTNLGRP_LINK: u32 = 1;
const RTNLGRP_IPV4_IFADDR: u32 = 5;
const RTNLGRP_IPV4_ROUTE: u32 = 7;
const RTNLGRP_IPV6_IFADDR: u32 = 9;
const RTNLGRP_IPV6_ROUTE: u32 = 11;
/// Global IPv6 addresses taken per interface (the advertisements' limit).
const MAX_ADDRESSES6: usize = pipeline::pipeline::local::ipv6::MAX_ADVERTISED_PREFIXES;
/// The kernel's main routing table: what `ip route` and daemons use unless told otherwise.
const RT_TABLE_MAIN: u32 = 254;
/// Notifications that follow within this of the first are read in the same dump: a DHCP
/// client sets its address and its route in two steps, FRR installs routes in bursts.
const SETTLE: Duration = Duration::from_millis(20);
/// How often the thread looks up from `recv` to see whether the gateway is stopping.
const WAKE_TO_CHECK_STOP: Duration = Duration::from_millis(250);

/// What the kernel has on the twins that the dataplane follows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelView {
    /// Per interface, in interface order (empty: none known): the address and prefix length
    /// of a "dhcp" interface's twin, None while it has none.
    pub addresses: Vec<Option<(Ipv4Addr, u8)>>,
    /// Routes on the twins, best first for each prefix (lowest metric).
    pub routes: Vec<KernelRoute>,
    /// Per interface (empty: none known): an MTU below the configured one that the link
    /// negotiated (a PPPoE peer's smaller MRU); netlink gives none.
    pub mtus: Vec<Option<u16>>,
    /// Per interface (empty: none known): the global IPv6 addresses of its twin, with their
    /// prefix lengths, where the kernel configures its IPv6; in the kernel's order.
    pub addresses6: Vec<Vec<(Ipv6Addr, u8)>>,
    /// Per interface that advertises its prefixes, beside `addresses6`: how long each
    /// address with a finite lifetime stays valid and preferred (the lease behind it), as
    /// deadlines on `crate::dataplane::clock::shared_secs`. Dumps of an unchanged lease differ by a
    /// second or two: [`KernelView::same_as`] does not take that for a change.
    pub leases6: Vec<Vec<PrefixLease>>,
    /// IPv6 routes on the twins, best first for each prefix.
    pub routes6: Vec<KernelRoute6>,
    /// Per interface (empty: none known): whether its twin holds the interface's
    /// `virtual_address`, as keepalived adds it on becoming VRRP master and removes it on
    /// becoming backup. The control thread answers ARP for it only while it does.
    pub virtual_held: Vec<bool>,
    /// Not the kernel's: per `[[uplinks]]` entry (empty: none), whether its health checks
    /// failed (`crate::control::uplink_health`), merged in by the control thread beside the
    /// kernel's and the PPPoE sessions' views, since it too changes the router config.
    pub uplinks_failed: Vec<bool>,
    /// Not the kernel's either: the mappings LAN hosts asked for by PCP or NAT-PMP
    /// (`crate::control::port_mapping`), merged in by the control thread the same way.
    pub port_mappings: pipeline::pipeline::config::PortMappings,
    /// Per interface (empty: none known): the link-local address a PPPoE session's IPv6CP
    /// agreed (the MAC's, or the identifier the peer assigned).
    pub link_locals6: Vec<Option<Ipv6Addr>>,
}

impl KernelView {
    /// The address of interface `index` if the kernel gave it one.
    pub fn address(&self, index: usize) -> Option<(Ipv4Addr, u8)> {
        self.addresses.get(index).copied().flatten()
    }

    /// The global IPv6 addresses interface `index` got from the kernel.
    pub fn addresses6(&self, index: usize) -> &[(Ipv6Addr, u8)] {
        self.addresses6.get(index).map_or(&[], Vec::as_slice)
    }

    /// The lease of the prefix of `(address, len)`, one of interface `index`'s from the
    /// kernel, if the kernel gave its lifetimes.
    pub fn lease6(&self, index: usize, (address, len): (Ipv6Addr, u8)) -> Option<PrefixLease> {
        let prefix = prefix_of(address, len);
        let leases = self.leases6.get(index)?;
        leases
            .iter()
            .find(|lease| (lease.prefix, lease.len) == (prefix, len))
            .copied()
    }

    /// The MTU interface `index` negotiated, if its link did.
    pub fn mtu(&self, index: usize) -> Option<u16> {
        self.mtus.get(index).copied().flatten()
    }

    /// Whether `other` says the same: equal but for lease deadlines that moved by less than
    /// [`LEASE_SLACK_SECS`] (a dump's rounding). A renewed lease moves them by far more. A new
    /// view is a new router config for the workers, which throws their shortcuts away.
    pub fn same_as(&self, other: &KernelView) -> bool {
        let close = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => a.abs_diff(b) < LEASE_SLACK_SECS,
            (a, b) => a == b,
        };
        let same_lease = |a: &PrefixLease, b: &PrefixLease| {
            (a.prefix, a.len) == (b.prefix, b.len)
                && close(a.valid_until_secs, b.valid_until_secs)
                && close(a.preferred_until_secs, b.preferred_until_secs)
        };
        let same_leases =
            self.leases6.len() == other.leases6.len()
                && self.leases6.iter().zip(&other.leases6).all(|(a, b)| {
                    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_lease(a, b))
                });
        same_leases
            && KernelView {
                leases6: Vec::new(),
                ..self.clone()
            } == KernelView {
                leases6: Vec::new(),
                ..other.clone()
            }
    }
}

/// How far apart two dumps' deadlines for one lease may be and still be the same lease.
const LEASE_SLACK_SECS: u64 = 60;

/// Which kernel devices matter: the twins, by name, and which of them take their address
/// from the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Followed {
    /// Per interface: its twin's name, None without one.
    pub twins: Vec<Option<String>>,
    /// Per interface: `address = "dhcp"`.
    pub dhcp: Vec<bool>,
    /// Per interface: the kernel configures its IPv6 (`autoconfigure`, `delegated_prefix`).
    pub ipv6: Vec<bool>,
    /// Per interface: it sends Router Advertisements, which carry its leases' lifetimes.
    pub advertises6: Vec<bool>,
    /// Per interface: the address it shares with an HA peer (`virtual_address`).
    pub virtual_addrs: Vec<Option<Ipv4Addr>>,
    /// Per interface: its twin carries IPv6 alone (a PPPoE session's), so none of its IPv4
    /// routes is taken: the session's are the gateway's own.
    pub ipv6_only: Vec<bool>,
}

impl Followed {
    pub fn from_config(config: &GatewayConfig) -> Self {
        Followed {
            twins: crate::config::twins::twin_names(config),
            dhcp: config
                .interfaces
                .iter()
                .map(|i| i.address.is_dhcp())
                .collect(),
            ipv6: config
                .interfaces
                .iter()
                .map(|i| i.ipv6.as_ref().is_some_and(|v6| v6.follows_kernel()))
                .collect(),
            advertises6: config
                .interfaces
                .iter()
                .map(|i| i.ipv6.as_ref().is_some_and(|v6| v6.router_advertisements))
                .collect(),
            virtual_addrs: config
                .interfaces
                .iter()
                .map(|i| i.virtual_address)
                .collect(),
            ipv6_only: config
                .interfaces
                .iter()
                .map(|i| i.address.is_pppoe())
                .collect(),
        }
    }

    /// Whether there is anything to follow: a twin (whose routes are mirrored).
    pub fn any(&self) -> bool {
        self.twins.iter().any(Option::is_some)
    }
}

/// Reads a dump's messages (links, addresses, routes; anything else is ignored) into the
/// view: the translation from netlink to the dataplane's terms, kept apart from the socket so
/// that it can be tested on messages made in memory.
pub fn view_from_messages<'a>(
    followed: &Followed,
    messages: impl IntoIterator<Item = &'a RouteNetlinkMessage>,
) -> KernelView {
    view_at(followed, messages, crate::dataplane::clock::shared_secs())
}

/// [`view_from_messages`] as of `now_secs` on `crate::dataplane::clock::shared_secs`'s clock: the
/// addresses' remaining lifetimes become deadlines on it.
fn view_at<'a>(
    followed: &Followed,
    messages: impl IntoIterator<Item = &'a RouteNetlinkMessage>,
    now_secs: u64,
) -> KernelView {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut addresses: Vec<(u32, Ipv4Addr, u8)> = Vec::new();
    let mut addresses6: Vec<(u32, Ipv6Addr, u8, Option<Lifetimes>)> = Vec::new();
    // (destination, len) -> (metric, port, via): the best route for each prefix.
    let mut routes: BTreeMap<(u32, u8), (u32, u16, Option<Ipv4Addr>)> = BTreeMap::new();
    let mut route_messages = Vec::new();
    for message in messages {
        match message {
            RouteNetlinkMessage::NewLink(link) => {
                if let Some(name) = link_name(link) {
                    names.insert(link.header.index, name);
                }
            }
            RouteNetlinkMessage::NewAddress(address) => {
                if let Some(v4) = ipv4_address(address) {
                    addresses.push(v4);
                } else if let Some(v6) = ipv6_address(address) {
                    addresses6.push(v6);
                }
            }
            RouteNetlinkMessage::NewRoute(route) => route_messages.push(route),
            _ => {}
        }
    }
    let port_of = |index: u32| -> Option<usize> {
        let name = names.get(&index)?;
        followed
            .twins
            .iter()
            .position(|twin| twin.as_deref() == Some(name.as_str()))
    };
    let mut view = KernelView {
        addresses: vec![None; followed.twins.len()],
        routes: Vec::new(),
        mtus: Vec::new(),
        addresses6: vec![Vec::new(); followed.twins.len()],
        leases6: vec![Vec::new(); followed.twins.len()],
        routes6: Vec::new(),
        virtual_held: vec![false; followed.twins.len()],
        uplinks_failed: Vec::new(),
        port_mappings: Default::default(),
        link_locals6: Vec::new(),
    };
    for (index, addr, len) in addresses {
        let Some(port) = port_of(index) else { continue };
        if followed.virtual_addrs.get(port) == Some(&Some(addr)) {
            view.virtual_held[port] = true;
        } else if followed.dhcp[port] && view.addresses[port].is_none() {
            view.addresses[port] = Some((addr, len));
        }
    }
    for (index, addr, len, lifetimes) in addresses6 {
        let Some(port) = port_of(index) else { continue };
        let taken = &mut view.addresses6[port];
        if followed.ipv6[port] && taken.len() < MAX_ADDRESSES6 && !taken.contains(&(addr, len)) {
            taken.push((addr, len));
            let lease = lifetimes.and_then(|lifetimes| lifetimes.lease(addr, len, now_secs));
            if let (true, Some(lease)) = (followed.advertises6[port], lease) {
                view.leases6[port].push(lease);
            }
        }
    }
    let mut routes6: BTreeMap<(u128, u8), (u32, u16, Option<Ipv6Addr>)> = BTreeMap::new();
    for route in &route_messages {
        let Some(parsed) = ipv6_route(route) else {
            continue;
        };
        let Some(port) = port_of(parsed.oif) else {
            continue;
        };
        keep_best(
            &mut routes6,
            (u128::from(parsed.destination), parsed.len),
            (parsed.metric, port as u16, parsed.via),
        );
    }
    view.routes6 = routes6
        .into_iter()
        .map(|((destination, len), (_, port, via))| KernelRoute6 {
            destination: Ipv6Addr::from(destination),
            len,
            port,
            via,
        })
        .collect();
    for route in route_messages {
        let Some(parsed) = ipv4_route(route) else {
            continue;
        };
        let Some(port) = port_of(parsed.oif) else {
            continue;
        };
        if followed.ipv6_only.get(port) == Some(&true) {
            continue;
        }
        keep_best(
            &mut routes,
            (u32::from(parsed.destination), parsed.len),
            (parsed.metric, port as u16, parsed.via),
        );
    }
    view.routes = routes
        .into_iter()
        .map(|((destination, len), (_, port, via))| KernelRoute {
            destination: Ipv4Addr::from(destination),
            len,
            port,
            via,
        })
        .collect();
    view
}

/// Keeps the route of the lowest metric (the candidate's first field) for each prefix.
fn keep_best<K: Ord, V>(routes: &mut BTreeMap<K, (u32, u16, V)>, key: K, candidate: (u32, u16, V)) {
    match routes.entry(key) {
        std::collections::btree_map::Entry::Occupied(mut best) => {
            if candidate.0 < best.get().0 {
                best.insert(candidate);
            }
        }
        std::collections::btree_map::Entry::Vacant(slot) => {
            slot.insert(candidate);
        }
    }
}

fn link_name(link: &LinkMessage) -> Option<String> {
    link.attributes
        .iter()
        .find_map(|attribute| match attribute {
            LinkAttribute::IfName(name) => Some(name.clone()),
            _ => None,
        })
}

/// (interface index, address, prefix length) of an IPv4 address; IFA_LOCAL is the address
/// itself (IFA_ADDRESS is the peer's on point-to-point links).
fn ipv4_address(message: &AddressMessage) -> Option<(u32, Ipv4Addr, u8)> {
    if message.header.family != AddressFamily::Inet {
        return None;
    }
    let address = |wanted_local: bool| {
        message
            .attributes
            .iter()
            .find_map(|attribute| match attribute {
                AddressAttribute::Local(IpAddr::V4(addr)) if wanted_local => Some(*addr),
                AddressAttribute::Address(IpAddr::V4(addr)) if !wanted_local => Some(*addr),
                _ => None,
            })
    };
    let addr = address(true).or_else(|| address(false))?;
    (!addr.is_unspecified() && message.header.prefix_len <= 32).then_some((
        message.header.index,
        addr,
        message.header.prefix_len,
    ))
}

/// An IPv6 address's remaining lifetimes as IFA_CACHEINFO gives them, in seconds
/// (`u32::MAX`: forever).
#[derive(Clone, Copy, Debug)]
struct Lifetimes {
    valid: u32,
    preferred: u32,
}

impl Lifetimes {
    /// The lease of `addr`'s prefix, as deadlines from `now_secs`; none for an address valid
    /// for ever (configured by hand on the twin, say). A deprecated address's preferred
    /// deadline is 0, long past, rather than a `now` that moves with every dump.
    fn lease(self, addr: Ipv6Addr, len: u8, now_secs: u64) -> Option<PrefixLease> {
        let until = |left: u32| match left {
            u32::MAX => None,
            0 => Some(0),
            left => Some(now_secs + u64::from(left)),
        };
        (self.valid != u32::MAX).then(|| PrefixLease {
            prefix: prefix_of(addr, len),
            len,
            valid_until_secs: until(self.valid),
            preferred_until_secs: until(self.preferred),
        })
    }
}

/// (interface index, address, prefix length, remaining lifetimes) of a global IPv6 address
/// that is usable: not tentative (Duplicate Address Detection still running) nor found a
/// duplicate.
fn ipv6_address(message: &AddressMessage) -> Option<(u32, Ipv6Addr, u8, Option<Lifetimes>)> {
    let header = &message.header;
    if header.family != AddressFamily::Inet6
        || header.scope != AddressScope::Universe
        || header.prefix_len > 128
    {
        return None;
    }
    // IFA_FLAGS holds all of them; the header's byte the first eight (older kernels).
    let flags = message
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            AddressAttribute::Flags(flags) => Some(*flags),
            _ => None,
        })
        .unwrap_or_else(|| AddressFlags::from_bits_retain(u32::from(header.flags.bits())));
    let unusable = AddressFlags::Tentative | AddressFlags::Dadfailed;
    if flags.intersects(unusable)
        || header
            .flags
            .intersects(AddressHeaderFlags::Tentative | AddressHeaderFlags::Dadfailed)
    {
        return None;
    }
    let addr = message
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            AddressAttribute::Address(IpAddr::V6(addr)) => Some(*addr),
            _ => None,
        })?;
    let lifetimes = message
        .attributes
        .iter()
        .find_map(|attribute| match attribute {
            AddressAttribute::CacheInfo(info) => Some(Lifetimes {
                valid: info.ifa_valid,
                preferred: info.ifa_preferred,
            }),
            _ => None,
        });
    (!addr.is_unspecified() && !addr.is_loopback() && !addr.is_multicast()).then_some((
        header.index,
        addr,
        header.prefix_len,
        lifetimes,
    ))
}

struct ParsedRoute<A> {
    destination: A,
    len: u8,
    oif: u32,
    via: Option<A>,
    metric: u32,
}

/// A unicast IPv4 route of the main table, leaving by one device; the kernel's prefix
/// routes (proto kernel) and multipath routes are not taken.
fn ipv4_route(message: &RouteMessage) -> Option<ParsedRoute<Ipv4Addr>> {
    let header = &message.header;
    if header.address_family != AddressFamily::Inet
        || header.kind != RouteType::Unicast
        || header.protocol == RouteProtocol::Kernel
        || header.destination_prefix_length > 32
    {
        return None;
    }
    let mut table = u32::from(header.table);
    let mut destination = Ipv4Addr::UNSPECIFIED;
    let (mut oif, mut via, mut metric) = (None, None, 0);
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Table(id) => table = *id,
            RouteAttribute::Destination(RouteAddress::Inet(addr)) => destination = *addr,
            RouteAttribute::Gateway(RouteAddress::Inet(addr)) => via = Some(*addr),
            RouteAttribute::Oif(index) => oif = Some(*index),
            RouteAttribute::Priority(priority) => metric = *priority,
            RouteAttribute::MultiPath(_) => return None,
            _ => {}
        }
    }
    if table != RT_TABLE_MAIN {
        return None;
    }
    Some(ParsedRoute {
        destination,
        len: header.destination_prefix_length,
        oif: oif?,
        via,
        metric,
    })
}

/// A unicast IPv6 route of the main table leaving by one device, as [`ipv4_route`] takes
/// them; link-local and multicast destinations are the link's own business.
fn ipv6_route(message: &RouteMessage) -> Option<ParsedRoute<Ipv6Addr>> {
    let header = &message.header;
    if header.address_family != AddressFamily::Inet6
        || header.kind != RouteType::Unicast
        || header.protocol == RouteProtocol::Kernel
        || header.destination_prefix_length > 128
    {
        return None;
    }
    let mut table = u32::from(header.table);
    let mut destination = Ipv6Addr::UNSPECIFIED;
    let (mut oif, mut via, mut metric) = (None, None, 0);
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Table(id) => table = *id,
            RouteAttribute::Destination(RouteAddress::Inet6(addr)) => destination = *addr,
            RouteAttribute::Gateway(RouteAddress::Inet6(addr)) => via = Some(*addr),
            RouteAttribute::Oif(index) => oif = Some(*index),
            RouteAttribute::Priority(priority) => metric = *priority,
            RouteAttribute::MultiPath(_) => return None,
            _ => {}
        }
    }
    let len = header.destination_prefix_length;
    let scoped =
        len > 0 && (pipeline::wire::ipv6::is_link_local(destination) || destination.is_multicast());
    if table != RT_TABLE_MAIN || scoped {
        return None;
    }
    Some(ParsedRoute {
        destination,
        len,
        oif: oif?,
        via,
        metric,
    })
}

/// Following the kernel failed: the thread, its sockets, or a dump.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("starting the netlink thread")]
    Thread(#[source] std::io::Error),
    #[error("the netlink thread ended before it opened its sockets")]
    ThreadEnded,
    #[error("kernel_twins.netns: opening {path}")]
    OpenNetns {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kernel_twins.netns: entering {netns:?}")]
    EnterNetns {
        netns: String,
        #[source]
        source: nix::errno::Errno,
    },
    /// `what`: the step on the socket, as "binding the rtnetlink socket".
    #[error("{what}")]
    Socket {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("joining rtnetlink group {group}")]
    JoinGroup {
        group: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("setting the rtnetlink socket's receive timeout")]
    ReceiveTimeout(#[source] nix::errno::Errno),
    #[error("decoding an rtnetlink message")]
    Decode(#[source] DecodeError),
    #[error("the kernel refused a dump: {0:?}")]
    Refused(Option<std::num::NonZeroI32>),
}

/// The thread following the kernel: sends each new view to `send` (the first at once),
/// until `stop` is set or `send` returns false (the receiver is gone). In `netns` if given.
pub fn spawn(
    followed: Followed,
    netns: Option<String>,
    stop: Arc<AtomicBool>,
    send: impl Fn(KernelView) -> bool + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, NetlinkError> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let thread = std::thread::Builder::new()
        .name("netlink".into())
        .spawn(move || {
            let sockets = open(netns.as_deref());
            let (events, dumps) = match sockets {
                Ok(sockets) => {
                    let _ = ready_tx.send(Ok(()));
                    sockets
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
            };
            follow(&followed, &events, &dumps, &stop, send);
        })
        .map_err(NetlinkError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => Err(NetlinkError::ThreadEnded),
    }
}

/// Moves the calling thread into the twins' namespace `netns` (`kernel_twins.netns`); the
/// rest of the gateway stays where it is.
pub(crate) fn enter_namespace(netns: &str) -> Result<(), NetlinkError> {
    let path = format!("/run/netns/{netns}");
    let file = std::fs::File::open(&path).map_err(|source| NetlinkError::OpenNetns {
        path: path.clone(),
        source,
    })?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|source| {
        NetlinkError::EnterNetns {
            netns: netns.to_string(),
            source,
        }
    })
}

/// Two rtnetlink sockets in the twins' namespace: one subscribed to the notifications, one
/// for dumps (so that a dump's answer never interleaves with notifications). The thread
/// enters the namespace; the rest of the gateway stays where it is.
fn open(netns: Option<&str>) -> Result<(Socket, Socket), NetlinkError> {
    if let Some(netns) = netns {
        enter_namespace(netns)?;
    }
    let mut events = Socket::new(NETLINK_ROUTE).map_err(socket("opening an rtnetlink socket"))?;
    events
        .bind(&SocketAddr::new(0, 0))
        .map_err(socket("binding the rtnetlink socket"))?;
    for group in [
        RTNLGRP_LINK,
        RTNLGRP_IPV4_IFADDR,
        RTNLGRP_IPV4_ROUTE,
        RTNLGRP_IPV6_IFADDR,
        RTNLGRP_IPV6_ROUTE,
    ] {
        events
            .add_membership(group)
            .map_err(|source| NetlinkError::JoinGroup { group, source })?;
    }
    let timeout = nix::sys::time::TimeVal::new(0, WAKE_TO_CHECK_STOP.as_micros() as i64);
    nix::sys::socket::setsockopt(&events, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
        .map_err(NetlinkError::ReceiveTimeout)?;
    let mut dumps = Socket::new(NETLINK_ROUTE).map_err(socket("opening an rtnetlink socket"))?;
    dumps
        .bind_auto()
        .map_err(socket("binding the rtnetlink socket"))?;
    dumps
        .connect(&SocketAddr::new(0, 0))
        .map_err(socket("connecting the rtnetlink socket"))?;
    Ok((events, dumps))
}

/// A failed step `what` on an rtnetlink socket.
fn socket(what: &'static str) -> impl FnOnce(std::io::Error) -> NetlinkError {
    move |source| NetlinkError::Socket { what, source }
}

fn follow(
    followed: &Followed,
    events: &Socket,
    dumps: &Socket,
    stop: &AtomicBool,
    send: impl Fn(KernelView) -> bool,
) {
    let mut sequence = 0u32;
    let mut last: Option<KernelView> = None;
    let mut buffer = vec![0u8; 1 << 16];
    let mut dirty = true;
    while !stop.load(Ordering::Relaxed) {
        if dirty {
            match dump(dumps, &mut sequence) {
                Ok(messages) => {
                    let view = view_from_messages(followed, &messages);
                    if !last.as_ref().is_some_and(|last| last.same_as(&view)) {
                        tracing::info!(
                            addresses = ?view.addresses,
                            routes = view.routes.len(),
                            addresses6 = ?view.addresses6,
                            routes6 = view.routes6.len(),
                            "kernel twins: addresses and routes changed"
                        );
                        if !send(view.clone()) {
                            return;
                        }
                        last = Some(view);
                    }
                    dirty = false;
                }
                Err(err) => {
                    tracing::warn!(
                        "kernel twins: reading addresses and routes: {}",
                        crate::dpdk::ErrorChain(&err)
                    );
                    std::thread::sleep(WAKE_TO_CHECK_STOP);
                    continue;
                }
            }
        }
        // Sleep until the kernel says something (or the timeout lets us check `stop`).
        match events.recv(&mut &mut buffer[..], 0) {
            Ok(_) => {
                // Let the rest of the burst arrive, then read it all at once.
                std::thread::sleep(SETTLE);
                while let Ok(true) = drain_one(events, &mut buffer) {}
                dirty = true;
            }
            Err(err)
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            // ENOBUFS: notifications were lost; the dump reads the state anyway. Anything
            // else too, after a pause, so that a socket gone bad cannot spin the thread.
            Err(err) => {
                if err.raw_os_error() != Some(libc::ENOBUFS) {
                    tracing::warn!("kernel twins: reading netlink notifications: {err}");
                    std::thread::sleep(WAKE_TO_CHECK_STOP);
                }
                dirty = true;
            }
        }
    }
}

/// Reads one pending notification without waiting. Ok(false): none pending.
fn drain_one(events: &Socket, buffer: &mut [u8]) -> std::io::Result<bool> {
    match events.recv(&mut &mut buffer[..], libc::MSG_DONTWAIT) {
        Ok(_) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(err) => Err(err),
    }
}

/// Links, and IPv4 and IPv6 addresses and routes, as the kernel has them now.
fn dump(socket: &Socket, sequence: &mut u32) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
    let mut link = LinkMessage::default();
    link.header.interface_family = AddressFamily::Unspec;
    let mut requests = vec![RouteNetlinkMessage::GetLink(link)];
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        let mut address = AddressMessage::default();
        address.header.family = family;
        let mut route = RouteMessage::default();
        route.header.address_family = family;
        requests.push(RouteNetlinkMessage::GetAddress(address));
        requests.push(RouteNetlinkMessage::GetRoute(route));
    }
    let mut messages = Vec::new();
    for request in requests {
        *sequence = sequence.wrapping_add(1);
        request_dump(socket, request, *sequence, &mut messages)?;
    }
    Ok(messages)
}

fn request_dump(
    socket: &Socket,
    request: RouteNetlinkMessage,
    sequence: u32,
    out: &mut Vec<RouteNetlinkMessage>,
) -> Result<(), NetlinkError> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = sequence;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::from(request));
    message.finalize();
    let mut bytes = vec![0u8; message.buffer_len()];
    message.serialize(&mut bytes);
    socket
        .send(&bytes, 0)
        .map_err(self::socket("sending an rtnetlink dump request"))?;
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let received = socket
            .recv(&mut &mut buffer[..], 0)
            .map_err(self::socket("reading an rtnetlink dump"))?;
        let mut offset = 0;
        while offset < received {
            let message =
                NetlinkMessage::<RouteNetlinkMessage>::deserialize(&buffer[offset..received])
                    .map_err(NetlinkError::Decode)?;
            let length = message.header.length as usize;
            if message.header.sequence_number == sequence {
                match message.payload {
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::Error(err) => {
                        return Err(NetlinkError::Refused(err.code));
                    }
                    NetlinkPayload::InnerMessage(inner) => out.push(inner),
                    _ => {}
                }
            }
            if length == 0 {
                break;
            }
            offset += (length + 3) & !3;
        }
    }
}

#[cfg(test)]
mod tests;

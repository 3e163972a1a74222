//! Turning the config file into the pipeline's immutable router config: interfaces, routes,
//! zones, NAT, the compiled firewall, QoS, the traffic meter, keyword block and parental
//! control. Used at start and on every reload.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};

use pipeline::pipeline::config::{
    Ipv6Interface, Pinhole6, PortForward, RouterAdvertConfig, RouterError, Stateful, StaticRoute6,
};
use pipeline::pipeline::local::ipv6::MAX_ADVERTISED_PREFIXES;
use pipeline::pipeline::uplinks::{Uplink, UplinkHash, UplinkPolicy, Uplinks};
use pipeline::state::conntrack::{ConntrackConfig as TableConfig, Timeouts};
use pipeline::state::firewall::{Action, FirewallError, Policy, Rule, RuleSet, ZoneId};
use pipeline::state::nat::NatPoolError;
use pipeline::wire::ipv6::{link_local, prefix_of};
use pipeline::wire::{ipv4, EthernetAddress};
use pipeline::{IcmpLimits, Interface, RouterConfig, SourceValidation, StaticRoute};

use pipeline::features::content::{ContentError, ContentPolicy, DnsAction};
use pipeline::features::inspect::parse_domain_list;
use pipeline::features::parental::{days, DeviceMatch, Policy as ParentalPolicy, TimeWindow};

use crate::config::{
    DnsActionConfig, FirewallAction, GatewayConfig, InterfaceConfig, KeywordBlockConfig,
    L4Protocol, OnUplinkDown, ParentalConfig, PortRange, QosSettings, RulePrefix, RuleProtocol,
    SourceValidationConfig, UplinkHashConfig,
};
use crate::control::netlink::KernelView;

/// A config the router cannot be built from, with the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error(transparent)]
    Config(Box<crate::config::ConfigError>),
    #[error(transparent)]
    Host(#[from] crate::config::host::HostError),
    #[error("nat.port_range: worker {worker}'s NAT pool: {err:?}")]
    NatPool { worker: u16, err: NatPoolError },
    #[error("routes")]
    Routes(#[source] RouterError),
    #[error(transparent)]
    Router(#[from] RouterError),
    #[error("no zone named {0:?}")]
    NoZone(String),
    #[error("too many zones")]
    TooManyZones(#[source] std::num::TryFromIntError),
    /// `field` names where the config gave what `source` refuses.
    #[error("{field}")]
    Field {
        field: String,
        #[source]
        source: Box<CompileError>,
    },
    #[error("firewall.rules")]
    Firewall(#[source] FirewallError),
    #[error("nat.port_forwards[{index}].interface: no interface named {interface:?}")]
    NoInterface { index: usize, interface: String },
    #[error("parental_control.categories.{name}: reading {path}")]
    ReadCategory {
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parental_control.devices[{device}].macs[{index}]: {mac:?} is not a MAC address")]
    NotAMac {
        device: usize,
        index: usize,
        mac: String,
    },
    #[error("parental_control.devices[{device}].blocked_categories: no category {name:?}")]
    NoCategory { device: usize, name: String },
    #[error("parental_control.devices[{device}].allowed[{index}]: {text:?}: {reason}")]
    Window {
        device: usize,
        index: usize,
        text: String,
        reason: String,
    },
    #[error("keyword_block / parental_control: {0:?}")]
    Content(ContentError),
}

impl From<crate::config::ConfigError> for CompileError {
    fn from(err: crate::config::ConfigError) -> Self {
        CompileError::Config(Box::new(err))
    }
}

impl CompileError {
    /// `source` found at `field`.
    fn at(field: String) -> impl FnOnce(CompileError) -> CompileError {
        move |source| CompileError::Field {
            field,
            source: Box::new(source),
        }
    }
}

/// Each built config gets a new generation, so flows can tell which rules admitted them.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The next config's generation: never the marker of a copy synced from an HA peer (once
/// in 2^32 configs, the counter steps over it).
fn next_generation() -> u32 {
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
    if generation == pipeline::state::flow_data::SYNCED_COPY {
        return GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    generation
}

/// What start builds from a validated config, short of the devices: the compiled router
/// config (routes, firewall, forwards, QoS, category files and hours) and every worker's NAT
/// pool. `gateway check-config` runs it, so that a file it calls ok also starts. The
/// interfaces' MACs are placeholders here: nothing in the checks depends on them.
pub fn check_startable(config: &GatewayConfig) -> Result<(), CompileError> {
    crate::config::web::for_metrics(&config.metrics)?;
    if let Some(group) = &config.ctl.group {
        crate::config::host::group_id(group)?;
    }
    let macs: Vec<[u8; 6]> = (0..config.interfaces.len())
        .map(|i| [0x02, 0, 0, 0, 0, i as u8])
        .collect();
    let router = std::sync::Arc::new(router_config(config, &macs)?);
    let workers = config.workers.lcores.len() as u16;
    for worker in 0..workers {
        let mut setup = worker_setup(config, worker, workers, None, None);
        // The table's size was validated; a small one spares check-config the memory.
        setup.conntrack.capacity = 1;
        pipeline::Pipeline::for_worker(
            router.clone(),
            std::sync::Arc::new(pipeline::NeighborView::default()),
            std::sync::Arc::new(pipeline::WorkerCounters::default()),
            setup,
        )
        .map_err(|err| CompileError::NatPool { worker, err })?;
    }
    Ok(())
}

/// Worker `worker` of `workers` as the config sizes it: its flow table and NAT pool.
pub fn worker_setup(
    config: &GatewayConfig,
    worker: u16,
    workers: u16,
    meter: Option<std::sync::Arc<pipeline::features::meter::HostMeter>>,
    nat_log: Option<std::sync::Arc<pipeline::state::nat::NatLog>>,
) -> pipeline::WorkerSetup {
    pipeline::WorkerSetup {
        worker,
        workers,
        conntrack: conntrack_config(config),
        // A quarter of the IPv4 table's (docs/configuration.md: IPv6).
        conntrack6: None,
        nat_ports: config.nat.port_range.first..=config.nat.port_range.last,
        nat_bindings: config.nat.binding_capacity,
        nat_host_ports: config.nat.host_ports,
        nat_port_block_size: config.nat.port_block_size,
        meter,
        fast_path: true,
        nat_log,
        firewall_log: None,
        qos_seed: None,
    }
}

pub fn router_config(
    config: &GatewayConfig,
    macs: &[[u8; 6]],
) -> Result<RouterConfig, CompileError> {
    router_config_with_kernel(config, macs, &KernelView::default())
}

/// The MTU an interface sends by: its configured one, or less where its link negotiated
/// less (a PPPoE peer's MRU).
fn link_mtu(iface: &InterfaceConfig, kernel: &KernelView, index: usize) -> u16 {
    kernel
        .mtu(index)
        .map_or(iface.mtu(), |mtu| mtu.min(iface.mtu()))
}

/// The router config with what the kernel has on the twins (`crate::control::netlink`): the
/// addresses of "dhcp" interfaces (none until their first lease) and the twins' routes,
/// below the config's own (connected, then static, then the kernel's). The twins' routes are
/// bounded: none inside an interface's own prefix, none outside `kernel_twins.route_allow`;
/// the refused are in the result's `refused_kernel_routes`.
pub fn router_config_with_kernel(
    config: &GatewayConfig,
    macs: &[[u8; 6]],
    kernel: &KernelView,
) -> Result<RouterConfig, CompileError> {
    let interfaces = config
        .interfaces
        .iter()
        .zip(macs)
        .enumerate()
        .map(|(index, (iface, mac))| {
            let (addr, prefix_len) = match iface.address.cidr() {
                Some(cidr) => (cidr.addr, cidr.len),
                None => kernel.address(index).unwrap_or((Ipv4Addr::UNSPECIFIED, 0)),
            };
            Interface {
                mac: EthernetAddress(*mac),
                addr,
                prefix_len,
                mtu: link_mtu(iface, kernel, index),
                virtual_addr: iface.virtual_address.or(iface.nat_address),
            }
        })
        .collect();
    let routes: Vec<StaticRoute> = config
        .routes
        .iter()
        .map(|route| StaticRoute {
            destination: route.destination.addr,
            len: route.destination.len,
            via: route.via,
        })
        .collect();
    let icmp = IcmpLimits {
        errors_per_sec: config.icmp.errors_per_sec,
        burst: config.icmp.burst,
        echo_per_sec: config.icmp.echo_per_sec,
        echo_burst: config.icmp.echo_burst,
    };
    let source_validation: Vec<Option<SourceValidation>> = config
        .interfaces
        .iter()
        .map(|iface| {
            iface.source_validation.map(|mode| match mode {
                SourceValidationConfig::Strict => SourceValidation::Strict,
                SourceValidationConfig::Loose => SourceValidation::Loose,
                SourceValidationConfig::Off => SourceValidation::Off,
            })
        })
        .collect();
    let tcp_mss: Vec<Option<u16>> = config
        .interfaces
        .iter()
        .enumerate()
        .map(|(index, iface)| iface.tcp_mss_bytes(link_mtu(iface, kernel, index)))
        .collect();
    let pppoe: Vec<bool> = config
        .interfaces
        .iter()
        .map(|iface| iface.address.is_pppoe())
        .collect();
    let router = RouterConfig::with_bounded_kernel_routes(
        interfaces,
        &routes,
        &kernel.routes,
        crate::compile::twins::kernel_route_allow(config),
        icmp,
    )
    .map_err(CompileError::Routes)?
    .with_uplinks(uplinks(config, kernel))
    .map_err(CompileError::Routes)?
    .with_source_validation(&source_validation)?
    .with_tcp_mss(&tcp_mss)?
    .with_pppoe(&pppoe)?
    .with_ipv6_and_kernel(
        ipv6_interfaces(config, macs, kernel),
        &ipv6_routes(config)?,
        &kernel.routes6,
    )?
    .with_pinholes6(pinholes6(config))?;
    // The mappings hosts asked for (PCP, NAT-PMP) go with the operator's forwards.
    let stateful = Stateful {
        port_mappings: kernel.port_mappings.clone(),
        ..stateful(config)?
    };
    Ok(router
        .with_stateful(stateful)?
        .with_qos(qos_config(&config.qos))
        .with_traffic_meter(config.traffic_meter.enabled)
        .with_punt(crate::compile::twins::punt_config(config))?)
}

/// `[[uplinks]]` and `[routing]` as the pipeline takes them: each uplink's next hop (its
/// `via`, else the default route its DHCP client or PPPoE session learnt) and whether it is
/// up (its interface has an address, and its health checks have not failed).
fn uplinks(config: &GatewayConfig, kernel: &KernelView) -> Uplinks {
    let port_of = |name: &str| {
        config
            .interfaces
            .iter()
            .position(|iface| iface.name == name)
    };
    let uplinks = config
        .uplinks
        .iter()
        .enumerate()
        .filter_map(|(index, uplink)| {
            // Validation resolved every name.
            let port = port_of(&uplink.interface)?;
            let learnt = kernel
                .routes
                .iter()
                .find(|route| route.len == 0 && usize::from(route.port) == port)
                .and_then(|route| route.via);
            let addressed = match config.interfaces[port].address.cidr() {
                Some(_) => true,
                None => kernel.address(port).is_some(),
            };
            let failed = kernel.uplinks_failed.get(index).copied().unwrap_or(false);
            Some(Uplink {
                port: port as u16,
                gateway: uplink.via.or(learnt),
                weight: uplink.weight,
                priority: uplink.priority,
                up: addressed && !failed,
            })
        })
        .collect();
    let zone_names = config.zone_names();
    let policies = config
        .routing
        .policy
        .iter()
        .filter_map(|policy| {
            let uplink = config
                .uplinks
                .iter()
                .position(|uplink| uplink.interface == policy.uplink)?;
            let from_zone = match &policy.from_zone {
                Some(name) => Some(ZoneId(zone_names.iter().position(|z| z == name)? as u8)),
                None => None,
            };
            Some(UplinkPolicy {
                source: policy.source.map(|cidr| (cidr.addr, cidr.len)),
                destination: policy.destination.map(|cidr| (cidr.addr, cidr.len)),
                from_zone,
                protocol: policy.protocol.map(rule_protocol),
                ports: policy.port.map(range),
                uplink,
                fallback: policy.fallback,
            })
        })
        .collect();
    let hash = match config.routing.hash {
        UplinkHashConfig::Source => UplinkHash::Source,
        UplinkHashConfig::Flow => UplinkHash::Flow,
    };
    let mut built = Uplinks::new(config.interfaces.len(), uplinks, hash, policies);
    built.end_flows_on_down = config.routing.on_uplink_down == OnUplinkDown::End;
    built.reset_on_down = config.routing.resets_tcp();
    built
}

/// Whether two prefixes overlap: one holds the other.
fn overlap((a, a_len): (Ipv6Addr, u8), (b, b_len): (Ipv6Addr, u8)) -> bool {
    let len = a_len.min(b_len);
    prefix_of(a, len) == prefix_of(b, len)
}

/// The addresses the kernel gave each interface's twin that the interface takes: those of
/// interfaces that follow the kernel, but any whose prefix overlaps another interface's,
/// configured or taken already. A router on the WAN's link could otherwise advertise the
/// LAN's prefix and have the gateway route the LAN's hosts to the WAN; so the delegated
/// prefixes (`delegated_prefix`, from the ISP's DHCPv6 server) are taken before what
/// routers advertise (`autoconfigure`).
fn learnt_addresses(config: &GatewayConfig, kernel: &KernelView) -> Vec<Vec<(Ipv6Addr, u8)>> {
    let mut taken: Vec<(usize, (Ipv6Addr, u8))> = config
        .interfaces
        .iter()
        .enumerate()
        .flat_map(|(index, iface)| {
            let configured = iface.ipv6.iter().flat_map(|ipv6| &ipv6.addresses);
            configured.map(move |cidr| (index, (cidr.addr, cidr.len)))
        })
        .collect();
    let mut learnt = vec![Vec::new(); config.interfaces.len()];
    let mut followers: Vec<usize> = (0..config.interfaces.len())
        .filter(|&index| {
            let ipv6 = config.interfaces[index].ipv6.as_ref();
            ipv6.is_some_and(|ipv6| ipv6.follows_kernel())
        })
        .collect();
    followers.sort_by_key(|&index| {
        let ipv6 = config.interfaces[index].ipv6.as_ref();
        !ipv6.is_some_and(|ipv6| ipv6.delegated_prefix)
    });
    for index in followers {
        let configured = config.interfaces[index]
            .ipv6
            .as_ref()
            .map_or(0, |ipv6| ipv6.addresses.len());
        for &address in kernel.addresses6(index) {
            // What advertisements have no room for is not the interface's.
            if configured + learnt[index].len() >= MAX_ADVERTISED_PREFIXES
                || learnt[index].contains(&address)
            {
                continue;
            }
            let elsewhere = taken
                .iter()
                .find(|&&(other, prefix)| other != index && overlap(prefix, address));
            if let Some(&(other, _)) = elsewhere {
                tracing::warn!(
                    interface = %config.interfaces[index].name,
                    address = %address.0,
                    len = address.1,
                    other = %config.interfaces[other].name,
                    "an IPv6 address the kernel learnt overlaps another interface's prefix: left out"
                );
                continue;
            }
            learnt[index].push(address);
            taken.push((index, address));
        }
    }
    learnt
}

/// Each interface's IPv6 side: its link-local address from its MAC, its configured
/// addresses, then those the kernel gave its twin (`autoconfigure`, `delegated_prefix`;
/// as many as advertisements carry), and its advertisements.
fn ipv6_interfaces(
    config: &GatewayConfig,
    macs: &[[u8; 6]],
    kernel: &KernelView,
) -> Vec<Option<Ipv6Interface>> {
    let mut learnt = learnt_addresses(config, kernel);
    config
        .interfaces
        .iter()
        .zip(macs)
        .enumerate()
        .map(|(index, (iface, mac))| {
            let ipv6 = iface.ipv6.as_ref()?;
            let mut addresses: Vec<(Ipv6Addr, u8)> = ipv6
                .addresses
                .iter()
                .map(|cidr| (cidr.addr, cidr.len))
                .collect();
            // Configured prefixes keep RFC 4861's lifetimes: only learnt ones have leases.
            let mut leases = Vec::new();
            for address in std::mem::take(&mut learnt[index]) {
                if addresses.len() < MAX_ADVERTISED_PREFIXES && !addresses.contains(&address) {
                    addresses.push(address);
                    leases.extend(kernel.lease6(index, address));
                }
            }
            Some(Ipv6Interface {
                // A PPPoE session's IPv6CP may have agreed another identifier than the MAC's.
                link_local: kernel
                    .link_locals6
                    .get(index)
                    .copied()
                    .flatten()
                    .unwrap_or_else(|| link_local(EthernetAddress(*mac))),
                addresses,
                advertise: ipv6.router_advertisements.then(|| RouterAdvertConfig {
                    interval_secs: ipv6.ra_interval_secs,
                    dns_servers: ipv6.dns_servers.clone(),
                    // Worked out with the routes, by RouterConfig::with_ipv6.
                    router_lifetime_secs: 0,
                    leases,
                }),
                autoconfigure: ipv6.autoconfigure,
            })
        })
        .collect()
}

fn l4_protocol(protocol: L4Protocol) -> u8 {
    match protocol {
        L4Protocol::Tcp => ipv4::protocol::TCP,
        L4Protocol::Udp => ipv4::protocol::UDP,
    }
}

/// The IPv6 pinholes, their interfaces by index (validated before).
fn pinholes6(config: &GatewayConfig) -> Vec<Pinhole6> {
    config
        .firewall
        .pinholes
        .iter()
        .filter_map(|pinhole| {
            let port = config
                .interfaces
                .iter()
                .position(|iface| iface.name == pinhole.interface)?;
            let from = pinhole.source.map_or((Ipv6Addr::UNSPECIFIED, 0), |source| {
                (source.addr, source.len)
            });
            Some(Pinhole6 {
                interface: port as u16,
                protocol: l4_protocol(pinhole.protocol),
                ports: pinhole.port.first..=pinhole.port.last,
                to: pinhole.to,
                from,
            })
        })
        .collect()
}

/// The static IPv6 routes, each with its interface (validated before, so a failure here is
/// a config that skipped validation).
fn ipv6_routes(config: &GatewayConfig) -> Result<Vec<StaticRoute6>, CompileError> {
    (0..config.ipv6_routes.len())
        .map(|i| {
            let route = &config.ipv6_routes[i];
            Ok(StaticRoute6 {
                destination: route.destination.addr,
                len: route.destination.len,
                via: route.via,
                port: config.ipv6_route_port(i)?,
            })
        })
        .collect()
}

fn stateful(config: &GatewayConfig) -> Result<Stateful, CompileError> {
    let zone_names = config.zone_names();
    // Validation has resolved every name; one that does not resolve here is a config that
    // skipped it, refused rather than taken for another zone.
    let zone = |name: &str| -> Result<ZoneId, CompileError> {
        if name == "local" {
            return Ok(ZoneId::LOCAL);
        }
        let index = zone_names
            .iter()
            .position(|z| z == name)
            .ok_or_else(|| CompileError::NoZone(name.to_string()))?;
        Ok(ZoneId(
            u8::try_from(index).map_err(CompileError::TooManyZones)?,
        ))
    };
    let interface_zone = |i: usize| {
        let iface = &config.interfaces[i];
        zone(iface.zone.as_deref().unwrap_or(&iface.name))
            .map_err(CompileError::at(format!("interfaces[{i}].zone")))
    };
    let masquerade: Vec<bool> = config
        .interfaces
        .iter()
        .map(|iface| config.nat.masquerade.contains(&iface.name))
        .collect();
    let zones: Vec<ZoneId> = (0..config.interfaces.len())
        .map(interface_zone)
        .collect::<Result<_, CompileError>>()?;

    // Built-in defaults, closed between zones (as OpenWrt, pfSense and OPNsense are): a flow
    // from one zone to another is dropped unless a policy or rule accepts it. An inside (not
    // masqueraded) zone may reach itself (its interfaces trust each other) and the gateway
    // (ARP's neighbours, DHCP and DNS through the twins, ping); an outside one neither.
    // Explicit policies override.
    let outside: Vec<ZoneId> = zone_names
        .iter()
        .filter(|name| config.is_outside_zone(name))
        .map(|name| zone(name))
        .collect::<Result<_, CompileError>>()?;
    let mut policy = Policy::new(Action::Drop);
    // What the gateway's kernel opens (its twins' daemons: DNS forwarding, NTP, BGP) may
    // leave toward every zone; its replies come back by its flow.
    for &to in &zones {
        policy = policy.set(ZoneId::LOCAL, to, Action::Accept);
    }
    for &from in zones.iter().filter(|zone| !outside.contains(zone)) {
        policy = policy
            .set(from, from, Action::Accept)
            .set(from, ZoneId::LOCAL, Action::Accept);
    }
    // Each entry's pair, with the name its default's decisions are logged under if so.
    let mut logged_pairs = Vec::with_capacity(config.firewall.policy.len());
    for (i, entry) in config.firewall.policy.iter().enumerate() {
        let from =
            zone(&entry.from).map_err(CompileError::at(format!("firewall.policy[{i}].from")))?;
        let to = zone(&entry.to).map_err(CompileError::at(format!("firewall.policy[{i}].to")))?;
        policy = policy.set(from, to, action(entry.action));
        let name = || std::sync::Arc::from(format!("policy {}->{}", entry.from, entry.to));
        logged_pairs.push(((from, to), entry.log.then(name)));
    }
    let rules = config
        .firewall
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| -> Result<Rule, CompileError> {
            let zone_of = |name: Option<&str>, what: &str| {
                name.map(zone)
                    .transpose()
                    .map_err(CompileError::at(format!("firewall.rules[{i}].{what}")))
            };
            Ok(Rule {
                name: rule.name.clone(),
                from: zone_of(rule.from.as_deref(), "from")?,
                to: zone_of(rule.to.as_deref(), "to")?,
                src: v4_prefix(rule.source),
                dst: v4_prefix(rule.destination),
                src6: v6_prefix(rule.source),
                dst6: v6_prefix(rule.destination),
                protocol: rule.protocol.map(rule_protocol),
                src_ports: rule.source_ports.map(range),
                dst_ports: rule.destination_ports.map(range),
                icmp_type: rule.icmp_type,
                action: action(rule.action),
            })
        })
        .collect::<Result<_, CompileError>>()?;
    let mut firewall = RuleSet::compile(rules, policy).map_err(CompileError::Firewall)?;
    firewall.attach_pair_logged(logged_pairs);
    // Logged under the name its counter has (`name#2` for a name's second rule).
    let names = crate::compile::rule_hits::counter_names(firewall.rules());
    firewall.attach_logged(
        config
            .firewall
            .rules
            .iter()
            .zip(names)
            .map(|(rule, name)| rule.log.then(|| std::sync::Arc::from(name)))
            .collect(),
    );
    let port_forwards = config
        .nat
        .port_forwards
        .iter()
        .enumerate()
        .map(|(i, forward)| -> Result<PortForward, CompileError> {
            let interface = config
                .interfaces
                .iter()
                .position(|iface| iface.name == forward.interface)
                .ok_or_else(|| CompileError::NoInterface {
                    index: i,
                    interface: forward.interface.clone(),
                })?;
            Ok(PortForward {
                interface: interface as u16,
                protocol: l4_protocol(forward.protocol),
                ports: range(forward.port),
                to: forward.to,
                to_port: forward.to_port.unwrap_or(forward.port.first),
            })
        })
        .collect::<Result<Vec<PortForward>, CompileError>>()?;
    // Logged under the name its counter has, `forward ` before it.
    let forward_names = crate::compile::rule_hits::forward_names(&port_forwards);
    firewall.attach_forward_logged(
        config
            .nat
            .port_forwards
            .iter()
            .zip(forward_names)
            .map(|(forward, name)| {
                forward
                    .log
                    .then(|| std::sync::Arc::from(format!("forward {name}")))
            })
            .collect(),
    );
    Ok(Stateful {
        content: content_policy(&config.keyword_block, &config.parental_control)?
            .map(std::sync::Arc::new),
        zones,
        masquerade,
        firewall,
        port_mappings: Default::default(),
        port_forwards,
        recheck_established: config.firewall.recheck_established,
        generation: next_generation(),
    })
}

fn v4_prefix(prefix: Option<RulePrefix>) -> Option<(Ipv4Addr, u8)> {
    match prefix? {
        RulePrefix::V4(cidr) => Some((cidr.addr, cidr.len)),
        RulePrefix::V6(_) => None,
    }
}

fn v6_prefix(prefix: Option<RulePrefix>) -> Option<(Ipv6Addr, u8)> {
    match prefix? {
        RulePrefix::V6(cidr) => Some((cidr.addr, cidr.len)),
        RulePrefix::V4(_) => None,
    }
}

fn action(action: FirewallAction) -> Action {
    match action {
        FirewallAction::Accept => Action::Accept,
        FirewallAction::Drop => Action::Drop,
        FirewallAction::Reject => Action::Reject,
    }
}

fn rule_protocol(protocol: RuleProtocol) -> u8 {
    match protocol {
        RuleProtocol::Tcp => ipv4::protocol::TCP,
        RuleProtocol::Udp => ipv4::protocol::UDP,
        RuleProtocol::Icmp => ipv4::protocol::ICMP,
        RuleProtocol::Vrrp => ipv4::protocol::VRRP,
    }
}

fn range(ports: PortRange) -> std::ops::RangeInclusive<u16> {
    ports.first..=ports.last
}

/// The flow table settings of each worker.
pub fn conntrack_config(config: &GatewayConfig) -> TableConfig {
    let secs = |s: u64| s.saturating_mul(1_000_000_000);
    let c = &config.conntrack;
    TableConfig {
        capacity: c.capacity,
        timeouts: Timeouts {
            tcp_established_ns: secs(c.tcp_established_secs),
            tcp_transitory_ns: secs(c.tcp_transitory_secs),
            tcp_time_wait_ns: secs(c.tcp_time_wait_secs),
            tcp_close_ns: secs(c.tcp_close_secs),
            udp_ns: secs(c.udp_secs),
            icmp_ns: secs(c.icmp_secs),
            other_ns: secs(c.other_secs),
        },
        tcp_loose: c.tcp_loose,
        host_flows: c.host_flows,
        host_half_open: c.host_half_open,
        half_open: c.half_open.unwrap_or(c.capacity / 4),
        hosts: c.hosts,
        host_prefix6: c.host_prefix6,
    }
}

/// The QoS policers' settings, when enabled.
pub fn qos_config(qos: &QosSettings) -> Option<pipeline::features::qos::QosConfig> {
    use pipeline::features::qos::{Class, ClassRule};
    if !qos.enabled {
        return None;
    }
    let classes = qos
        .priority
        .iter()
        .map(|rule| ClassRule {
            class: Class::Priority,
            host: rule.host,
            mac: rule.mac.as_deref().and_then(|mac| mac.parse().ok()),
            dscp: rule.dscp,
            protocol: rule.protocol.map(|p| match p {
                L4Protocol::Tcp => ipv4::protocol::TCP,
                L4Protocol::Udp => ipv4::protocol::UDP,
            }),
            ports: rule.ports.map(|r| pipeline::features::qos::PortRange {
                first: r.first,
                last: r.last,
            }),
        })
        .collect();
    Some(pipeline::features::qos::QosConfig {
        uplink_bps: qos.uplink_mbps.saturating_mul(1_000_000),
        downlink_bps: qos.downlink_mbps.saturating_mul(1_000_000),
        burst_ms: qos.burst_ms,
        classes,
        mode: match qos.mode {
            crate::config::QosModeSetting::Shaper => pipeline::features::qos::QosMode::Shaper,
            crate::config::QosModeSetting::Policer => pipeline::features::qos::QosMode::Policer,
        },
    })
}

/// Keyword block and parental control, with category lists read from their files.
pub fn content_policy(
    block: &KeywordBlockConfig,
    parental: &ParentalConfig,
) -> Result<Option<ContentPolicy>, CompileError> {
    if !block.enabled && !parental.enabled {
        return Ok(None);
    }
    let (domains, keywords) = if block.enabled {
        (block.domains.clone(), block.keywords.clone())
    } else {
        (Vec::new(), Vec::new())
    };
    let mut categories = Vec::new();
    let mut policies = Vec::new();
    if parental.enabled {
        for (name, path) in &parental.categories {
            let text =
                std::fs::read_to_string(path).map_err(|source| CompileError::ReadCategory {
                    name: name.clone(),
                    path: path.to_string(),
                    source,
                })?;
            categories.push((name.clone(), parse_domain_list(&text)));
        }
        for (i, device) in parental.devices.iter().enumerate() {
            let mut devices: Vec<DeviceMatch> = device
                .addresses
                .iter()
                .map(|&ip| DeviceMatch::Ip(ip))
                .collect();
            for (k, mac) in device.macs.iter().enumerate() {
                let mac = mac
                    .parse::<EthernetAddress>()
                    .map_err(|_| CompileError::NotAMac {
                        device: i,
                        index: k,
                        mac: mac.to_string(),
                    })?;
                devices.push(DeviceMatch::Mac(mac));
            }
            let blocked_categories = device
                .blocked_categories
                .iter()
                .map(|name| {
                    parental
                        .categories
                        .keys()
                        .position(|known| known == name)
                        .ok_or_else(|| CompileError::NoCategory {
                            device: i,
                            name: name.clone(),
                        })
                })
                .collect::<Result<Vec<_>, CompileError>>()?;
            let windows = device
                .allowed
                .iter()
                .enumerate()
                .map(|(k, text)| {
                    parse_window(text).map_err(|reason| CompileError::Window {
                        device: i,
                        index: k,
                        text: text.clone(),
                        reason,
                    })
                })
                .collect::<Result<Vec<_>, CompileError>>()?;
            policies.push(ParentalPolicy {
                devices,
                blocked_categories,
                windows,
                paused: device.paused,
            });
        }
    }
    let dns_action = match block.dns_action {
        DnsActionConfig::Nxdomain => DnsAction::Nxdomain,
        DnsActionConfig::Drop => DnsAction::Drop,
    };
    let policy = ContentPolicy::new(
        &domains,
        &keywords,
        categories,
        policies,
        dns_action,
        parental.utc_offset_minutes,
    )
    .map_err(CompileError::Content)?;
    Ok(Some(policy))
}

/// "mon-fri 07:00-21:00", "sat,sun 08:00-22:30", "daily 06:00-23:00".
pub fn parse_window(text: &str) -> Result<TimeWindow, String> {
    let (day_spec, hours) = text
        .trim()
        .split_once(' ')
        .ok_or("expected \"<days> HH:MM-HH:MM\"")?;
    let day = |name: &str| -> Result<u32, String> {
        ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
            .iter()
            .position(|d| *d == name.trim().to_ascii_lowercase())
            .map(|d| d as u32)
            .ok_or_else(|| format!("{name:?} is not a weekday (mon..sun)"))
    };
    let mut weekdays = 0u8;
    if matches!(day_spec, "daily" | "*") {
        weekdays = days::EVERY_DAY;
    } else {
        for part in day_spec.split(',') {
            match part.split_once('-') {
                Some((first, last)) => {
                    let (first, last) = (day(first)?, day(last)?);
                    let mut d = first;
                    loop {
                        weekdays |= 1 << d;
                        if d == last {
                            break;
                        }
                        d = (d + 1) % 7;
                    }
                }
                None => weekdays |= 1 << day(part)?,
            }
        }
    }
    let minute = |hhmm: &str| -> Result<u16, String> {
        let (h, m) = hhmm.trim().split_once(':').ok_or("times are HH:MM")?;
        let (h, m): (u16, u16) = (
            h.parse().map_err(|_| "bad hour")?,
            m.parse().map_err(|_| "bad minute")?,
        );
        if h > 24 || m > 59 || (h == 24 && m != 0) {
            return Err(format!("{hhmm} is not a time of day"));
        }
        Ok(h * 60 + m)
    };
    let (start, end) = hours.split_once('-').ok_or("expected HH:MM-HH:MM")?;
    Ok(TimeWindow {
        weekdays,
        start_minute: minute(start)?,
        end_minute: minute(end)? % (24 * 60),
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod pppoe_tests;

#[cfg(test)]
mod kernel_ipv6_tests;

#[cfg(test)]
mod kernel_route_bound_tests;
#[cfg(test)]
mod uplink_tests;

//! Turning the config file into the pipeline's immutable router config: interfaces, routes,
//! zones, NAT, the compiled firewall, QoS, the traffic meter, keyword block and parental
//! control. Used at start and on every reload.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;
use pipeline::pipeline::config::{
    Ipv6Interface, Pinhole6, PortForward, RouterAdvertConfig, Stateful, StaticRoute6,
};
use pipeline::pipeline::ipv6_local::MAX_ADVERTISED_PREFIXES;
use pipeline::state::conntrack::{ConntrackConfig as TableConfig, Timeouts};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::ipv6::{link_local, prefix_of};
use pipeline::wire::{ipv4, EthernetAddress};
use pipeline::{IcmpLimits, Interface, RouterConfig, SourceValidation, StaticRoute};

use pipeline::features::content::{ContentPolicy, DnsAction};
use pipeline::features::inspect::parse_domain_list;
use pipeline::features::parental::{days, DeviceMatch, Policy as ParentalPolicy, TimeWindow};

use crate::config::{
    DnsActionConfig, FirewallAction, GatewayConfig, InterfaceConfig, KeywordBlockConfig,
    L4Protocol, ParentalConfig, PortRange, QosSettings, RulePrefix, RuleProtocol,
    SourceValidationConfig,
};
use crate::control::netlink::KernelView;

/// Each built config gets a new generation, so flows can tell which rules admitted them.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// What start builds from a validated config, short of the devices: the compiled router
/// config (routes, firewall, forwards, QoS, category files and hours) and every worker's NAT
/// pool. `gateway check-config` runs it, so that a file it calls ok also starts. The
/// interfaces' MACs are placeholders here: nothing in the checks depends on them.
pub fn check_startable(config: &GatewayConfig) -> anyhow::Result<()> {
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
        .map_err(|err| anyhow::anyhow!("nat.port_range: worker {worker}'s NAT pool: {err:?}"))?;
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
        // A quarter of the IPv4 table's (README: IPv6).
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

pub fn router_config(config: &GatewayConfig, macs: &[[u8; 6]]) -> anyhow::Result<RouterConfig> {
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
) -> anyhow::Result<RouterConfig> {
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
    .context("routes")?
    .with_source_validation(&source_validation)?
    .with_tcp_mss(&tcp_mss)?
    .with_pppoe(&pppoe)?
    .with_ipv6_and_kernel(
        ipv6_interfaces(config, macs, kernel),
        &ipv6_routes(config)?,
        &kernel.routes6,
    )?
    .with_pinholes6(pinholes6(config))?;
    Ok(router
        .with_stateful(stateful(config)?)?
        .with_qos(qos_config(&config.qos))
        .with_traffic_meter(config.traffic_meter.enabled)
        .with_punt(crate::compile::twins::punt_config(config))?)
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
                link_local: link_local(EthernetAddress(*mac)),
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
fn ipv6_routes(config: &GatewayConfig) -> anyhow::Result<Vec<StaticRoute6>> {
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

fn stateful(config: &GatewayConfig) -> anyhow::Result<Stateful> {
    let zone_names = config.zone_names();
    // Validation has resolved every name; one that does not resolve here is a config that
    // skipped it, refused rather than taken for another zone.
    let zone = |name: &str| -> anyhow::Result<ZoneId> {
        if name == "local" {
            return Ok(ZoneId::LOCAL);
        }
        let index = zone_names
            .iter()
            .position(|z| z == name)
            .with_context(|| format!("no zone named {name:?}"))?;
        Ok(ZoneId(u8::try_from(index).context("too many zones")?))
    };
    let interface_zone = |i: usize| {
        let iface = &config.interfaces[i];
        zone(iface.zone.as_deref().unwrap_or(&iface.name))
            .with_context(|| format!("interfaces[{i}].zone"))
    };
    let masquerade: Vec<bool> = config
        .interfaces
        .iter()
        .map(|iface| config.nat.masquerade.contains(&iface.name))
        .collect();
    let zones: Vec<ZoneId> = (0..config.interfaces.len())
        .map(interface_zone)
        .collect::<anyhow::Result<_>>()?;

    // Built-in defaults, closed between zones (as OpenWrt, pfSense and OPNsense are): a flow
    // from one zone to another is dropped unless a policy or rule accepts it. An inside (not
    // masqueraded) zone may reach itself (its interfaces trust each other) and the gateway
    // (ARP's neighbours, DHCP and DNS through the twins, ping); an outside one neither.
    // Explicit policies override.
    let outside: Vec<ZoneId> = zone_names
        .iter()
        .filter(|name| config.is_outside_zone(name))
        .map(|name| zone(name))
        .collect::<anyhow::Result<_>>()?;
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
    for (i, entry) in config.firewall.policy.iter().enumerate() {
        let from = zone(&entry.from).with_context(|| format!("firewall.policy[{i}].from"))?;
        let to = zone(&entry.to).with_context(|| format!("firewall.policy[{i}].to"))?;
        policy = policy.set(from, to, action(entry.action));
    }
    let rules = config
        .firewall
        .rules
        .iter()
        .enumerate()
        .map(|(i, rule)| -> anyhow::Result<Rule> {
            let zone_of = |name: Option<&str>, what: &str| {
                name.map(zone)
                    .transpose()
                    .with_context(|| format!("firewall.rules[{i}].{what}"))
            };
            Ok(Rule {
                name: rule.name.clone(),
                from: zone_of(rule.from.as_deref(), "from")?,
                to: zone_of(rule.to.as_deref(), "to")?,
                src: v4_prefix(rule.source),
                dst: v4_prefix(rule.destination),
                src6: v6_prefix(rule.source),
                dst6: v6_prefix(rule.destination),
                protocol: rule.protocol.map(|p| match p {
                    RuleProtocol::Tcp => ipv4::protocol::TCP,
                    RuleProtocol::Udp => ipv4::protocol::UDP,
                    RuleProtocol::Icmp => ipv4::protocol::ICMP,
                }),
                src_ports: rule.source_ports.map(range),
                dst_ports: rule.destination_ports.map(range),
                icmp_type: rule.icmp_type,
                action: action(rule.action),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut firewall = RuleSet::compile(rules, policy).context("firewall.rules")?;
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
        .map(|(i, forward)| -> anyhow::Result<PortForward> {
            let interface = config
                .interfaces
                .iter()
                .position(|iface| iface.name == forward.interface)
                .with_context(|| {
                    format!(
                        "nat.port_forwards[{i}].interface: no interface named {:?}",
                        forward.interface
                    )
                })?;
            Ok(PortForward {
                interface: interface as u16,
                protocol: l4_protocol(forward.protocol),
                ports: range(forward.port),
                to: forward.to,
                to_port: forward.to_port.unwrap_or(forward.port.first),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Stateful {
        content: content_policy(&config.keyword_block, &config.parental_control)?
            .map(std::sync::Arc::new),
        zones,
        masquerade,
        firewall,
        port_forwards,
        recheck_established: config.firewall.recheck_established,
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
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
) -> anyhow::Result<Option<ContentPolicy>> {
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
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("parental_control.categories.{name}: reading {path}"))?;
            categories.push((name.clone(), parse_domain_list(&text)));
        }
        for (i, device) in parental.devices.iter().enumerate() {
            let field = |f: &str| format!("parental_control.devices[{i}].{f}");
            let mut devices: Vec<DeviceMatch> = device
                .addresses
                .iter()
                .map(|&ip| DeviceMatch::Ip(ip))
                .collect();
            for (k, mac) in device.macs.iter().enumerate() {
                let mac = mac.parse::<EthernetAddress>().map_err(|_| {
                    anyhow::anyhow!("{}[{k}]: {mac:?} is not a MAC address", field("macs"))
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
                        .ok_or_else(|| {
                            anyhow::anyhow!("{}: no category {name:?}", field("blocked_categories"))
                        })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let windows = device
                .allowed
                .iter()
                .enumerate()
                .map(|(k, text)| {
                    parse_window(text).map_err(|err| {
                        anyhow::anyhow!("{}[{k}]: {text:?}: {err}", field("allowed"))
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
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
    .map_err(|err| anyhow::anyhow!("keyword_block / parental_control: {err:?}"))?;
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
mod tests {
    use super::*;

    #[test]
    fn windows_parse_days_ranges_and_times() {
        let window = parse_window("mon-fri 07:00-21:30").unwrap();
        assert_eq!(window.weekdays, days::WORKDAYS);
        assert_eq!((window.start_minute, window.end_minute), (420, 1290));
        assert_eq!(
            parse_window("sat,sun 22:00-06:00").unwrap().weekdays,
            days::WEEKEND
        );
        assert_eq!(
            parse_window("fri-mon 00:00-24:00").unwrap().weekdays,
            days::FRIDAY | days::SATURDAY | days::SUNDAY | days::MONDAY
        );
        assert_eq!(
            parse_window("daily 06:00-23:00").unwrap().weekdays,
            days::EVERY_DAY
        );
        assert!(parse_window("someday 06:00-07:00").is_err());
        assert!(parse_window("mon 25:00-26:00").is_err());
        assert!(parse_window("mon").is_err());
    }

    /// Closed between zones: only what a policy names crosses from one zone to another; an
    /// inside zone still reaches itself and the gateway, an outside one neither.
    #[test]
    fn a_zone_pair_without_a_policy_is_dropped() {
        let config = GatewayConfig::from_text(
            std::path::Path::new("zones.toml"),
            r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "lan2"
zone = "lan"
device = "net_ring2"
address = "192.168.2.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "guest"
parent = "lan"
vlan = 20
address = "192.168.20.1/24"
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
"#,
        )
        .unwrap();
        let router = router_config(&config, &[[2, 0, 0, 0, 0, 1]; 4]).unwrap();
        let policy = router.stateful.firewall.policy();
        let (lan, wan, guest) = (ZoneId(0), ZoneId(1), ZoneId(2));
        for (from, to, expected) in [
            (lan, wan, Action::Accept),
            (lan, lan, Action::Accept),
            (lan, ZoneId::LOCAL, Action::Accept),
            (lan, guest, Action::Drop),
            (guest, lan, Action::Drop),
            (guest, wan, Action::Drop),
            (guest, guest, Action::Accept),
            (guest, ZoneId::LOCAL, Action::Accept),
            (wan, lan, Action::Drop),
            (wan, wan, Action::Drop),
            (wan, ZoneId::LOCAL, Action::Drop),
            // What the kernel opens is tracked; its replies need no wan -> local rule.
            (ZoneId::LOCAL, wan, Action::Accept),
            (ZoneId::LOCAL, lan, Action::Accept),
            (ZoneId::LOCAL, guest, Action::Accept),
        ] {
            assert_eq!(policy.default_for(from, to), expected, "{from:?} -> {to:?}");
        }
        let warnings = config.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("zone \"guest\"") && warnings[0].contains("to = \"wan\""),
            "{warnings:?}"
        );
    }
}

#[cfg(test)]
mod pppoe_tests {
    use std::net::Ipv4Addr;

    use pipeline::KernelRoute;

    use super::router_config_with_kernel;
    use crate::config::GatewayConfig;
    use crate::control::netlink::KernelView;

    const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "isp"
device = "net_ring1"
address = "pppoe"
[interfaces.pppoe]
username = "u"
password = "p"
"#;

    #[test]
    fn a_session_gives_the_interface_its_address_route_and_a_smaller_mtu() {
        let config = GatewayConfig::from_text(std::path::Path::new("pppoe.toml"), CONFIG).unwrap();
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        let down = router_config_with_kernel(&config, &macs, &KernelView::default()).unwrap();
        assert_eq!(down.interfaces[1].addr, Ipv4Addr::UNSPECIFIED);
        assert_eq!(down.interfaces[1].mtu, 1492);
        assert_eq!(down.mss_limit(0, 1), Some(1452));
        assert!(down.runs_pppoe(1) && !down.runs_pppoe(0));
        assert!(down.routes.lookup(Ipv4Addr::new(198, 51, 100, 1)).is_none());
        let peer = Ipv4Addr::new(100, 64, 0, 1);
        let up = KernelView {
            addresses: vec![None, Some((Ipv4Addr::new(100, 64, 0, 2), 32))],
            routes: vec![KernelRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                len: 0,
                port: 1,
                via: Some(peer),
            }],
            // The peer's MRU was 1480.
            mtus: vec![None, Some(1480)],
            ..KernelView::default()
        };
        let router = router_config_with_kernel(&config, &macs, &up).unwrap();
        assert_eq!(router.interfaces[1].addr, Ipv4Addr::new(100, 64, 0, 2));
        assert_eq!(router.interfaces[1].mtu, 1480);
        assert_eq!(router.mss_limit(0, 1), Some(1440));
        let route = router
            .routes
            .lookup(Ipv4Addr::new(198, 51, 100, 1))
            .unwrap();
        assert_eq!(
            (route.port, route.resolve(Ipv4Addr::new(198, 51, 100, 1))),
            (1, peer)
        );
        // The session's default route is the gateway's own, which the twins' allow-list
        // does not bound.
        let text = format!("{CONFIG}[kernel_twins]\nroute_allow = [\"198.51.100.0/24\"]");
        let listed = GatewayConfig::from_text(std::path::Path::new("pppoe.toml"), &text).unwrap();
        let router = router_config_with_kernel(&listed, &macs, &up).unwrap();
        assert!(router.refused_kernel_routes.is_empty());
        assert!(router.routes.lookup(Ipv4Addr::new(8, 8, 8, 8)).is_some());
    }
}

#[cfg(test)]
mod kernel_ipv6_tests {
    use std::net::Ipv6Addr;

    use pipeline::pipeline::config::KernelRoute6;

    use super::router_config_with_kernel;
    use crate::config::GatewayConfig;
    use crate::control::netlink::KernelView;

    const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
kernel_twin = true
[interfaces.ipv6]
delegated_prefix = true
router_advertisements = true
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
kernel_twin = true
[interfaces.ipv6]
autoconfigure = true
[nat]
masquerade = ["wan"]
"#;

    #[test]
    fn the_isps_address_and_route_and_the_delegated_prefix_become_the_routers() {
        let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), CONFIG).unwrap();
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        // Before the kernel has anything: link-local only, no route, no default router.
        let before = router_config_with_kernel(&config, &macs, &KernelView::default()).unwrap();
        let lan = before.ipv6(0).unwrap();
        assert!(lan.addresses.is_empty());
        assert_eq!(lan.advertise.as_ref().unwrap().router_lifetime_secs, 0);
        assert!(before.ipv6(1).unwrap().autoconfigure && !lan.autoconfigure);
        let delegated: Ipv6Addr = "2001:db8:ff00:100::1".parse().unwrap();
        let slaac: Ipv6Addr = "2001:db8:a::ff:fe00:2".parse().unwrap();
        let isp: Ipv6Addr = "fe80::1".parse().unwrap();
        let kernel = KernelView {
            addresses6: vec![vec![(delegated, 64)], vec![(slaac, 64)]],
            routes6: vec![KernelRoute6 {
                destination: Ipv6Addr::UNSPECIFIED,
                len: 0,
                port: 1,
                via: Some(isp),
            }],
            ..KernelView::default()
        };
        let after = router_config_with_kernel(&config, &macs, &kernel).unwrap();
        let lan = after.ipv6(0).unwrap();
        assert_eq!(lan.addresses, [(delegated, 64)]);
        assert!(after.owns6(delegated) && after.owns6(slaac));
        // The LAN is told the gateway is its default router now that one leaves by the WAN.
        assert!(lan.advertise.as_ref().unwrap().router_lifetime_secs > 0);
        let out = after
            .routes6
            .lookup("2001:db8:99::1".parse().unwrap())
            .unwrap();
        assert_eq!((out.port, out.gateway), (1, Some(isp)));
        let home = after
            .routes6
            .lookup("2001:db8:ff00:100::42".parse().unwrap())
            .unwrap();
        assert_eq!((home.port, home.gateway), (0, None));
    }

    /// A router on the WAN's link advertising the LAN's prefix (or one holding it) gives the
    /// WAN no address in it: the LAN's hosts stay routed to the LAN.
    /// Whichever interface the config lists first, the delegated prefix is the LAN's.
    #[test]
    fn a_learnt_prefix_overlapping_another_interface_s_is_left_out() {
        let (lan_first, nat) = CONFIG.split_once("[nat]").unwrap();
        let wan_at = lan_first.rfind("[[interfaces]]").unwrap();
        let (lan, wan) = lan_first.split_at(wan_at);
        let wan_first = format!("{wan}{lan}[nat]{nat}");
        let delegated: Ipv6Addr = "2001:db8:ff00:100::1".parse().unwrap();
        let spoofed: Ipv6Addr = "2001:db8:ff00:100::bad".parse().unwrap();
        let wider: Ipv6Addr = "2001:db8:ff00::1".parse().unwrap();
        let slaac: Ipv6Addr = "2001:db8:a::ff:fe00:2".parse().unwrap();
        let lan_learnt = vec![(delegated, 64)];
        let wan_learnt = vec![(spoofed, 64), (wider, 48), (slaac, 64)];
        for (text, lan) in [(CONFIG, 0), (wan_first.as_str(), 1)] {
            let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), text).unwrap();
            let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
            let mut addresses6 = vec![wan_learnt.clone(), wan_learnt.clone()];
            addresses6[lan] = lan_learnt.clone();
            let kernel = KernelView {
                addresses6,
                ..KernelView::default()
            };
            let router = router_config_with_kernel(&config, &macs, &kernel).unwrap();
            assert_eq!(
                router.ipv6(lan as u16).unwrap().addresses,
                [(delegated, 64)]
            );
            assert_eq!(
                router.ipv6(1 - lan as u16).unwrap().addresses,
                [(slaac, 64)]
            );
            assert!(!router.owns6(spoofed) && !router.owns6(wider));
            let home = router.routes6.lookup(spoofed).unwrap();
            assert_eq!(home.port, lan as u16, "the LAN's prefix stays the LAN's");
        }
    }
}

#[cfg(test)]
mod kernel_route_bound_tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    use pipeline::pipeline::config::KernelRoute6;
    use pipeline::{KernelRoute, RouteRefusal};

    use super::router_config_with_kernel;
    use crate::config::GatewayConfig;
    use crate::control::netlink::KernelView;

    const CONFIG: &str = r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.77.1/24"
kernel_twin = true
[interfaces.ipv6]
delegated_prefix = true
router_advertisements = true
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
kernel_twin = true
[interfaces.ipv6]
autoconfigure = true
[nat]
masquerade = ["wan"]
"#;

    const UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn route(destination: [u8; 4], len: u8) -> KernelRoute {
        KernelRoute {
            destination: Ipv4Addr::from(destination),
            len,
            port: 1,
            via: Some(UPSTREAM),
        }
    }

    fn route6(destination: &str, len: u8) -> KernelRoute6 {
        KernelRoute6 {
            destination: destination.parse().unwrap(),
            len,
            port: 1,
            via: Some("fe80::1".parse().unwrap()),
        }
    }

    /// What the kernel has: a delegated prefix on the LAN's twin, a SLAAC address on the
    /// WAN's, and on the WAN's twin the routes a rogue DHCP server (option 121) or router
    /// would like the gateway to take, beside ordinary ones.
    fn kernel() -> KernelView {
        KernelView {
            addresses6: vec![
                vec![("2001:db8:ff00:100::1".parse().unwrap(), 64)],
                vec![("2001:db8:a::ff:fe00:2".parse().unwrap(), 64)],
            ],
            routes: vec![
                route([0, 0, 0, 0], 0),
                route([192, 168, 77, 0], 25),
                route([192, 168, 0, 0], 16),
                route([198, 51, 100, 0], 24),
            ],
            routes6: vec![
                route6("::", 0),
                route6("2001:db8:ff00:100::", 64),
                route6("2001:db8:ff00:100:8000::", 80),
                route6("2001:db8:77::", 48),
            ],
            ..KernelView::default()
        }
    }

    fn refusals(router: &pipeline::RouterConfig) -> Vec<(String, &'static str)> {
        router
            .refused_kernel_routes
            .iter()
            .map(|refused| {
                (
                    format!("{}/{}", refused.destination, refused.len),
                    refused.reason.label(),
                )
            })
            .collect()
    }

    fn build(section: &str) -> pipeline::RouterConfig {
        let text = format!("{CONFIG}{section}");
        let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), &text).unwrap();
        let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
        router_config_with_kernel(&config, &macs, &kernel()).unwrap()
    }

    #[test]
    fn routes_into_the_gateways_own_subnets_are_refused_whatever_the_allow_list() {
        let router = build("");
        assert_eq!(
            refusals(&router),
            [
                ("192.168.77.0/25".to_string(), "overlaps_connected"),
                ("2001:db8:ff00:100::/64".to_string(), "overlaps_connected"),
                (
                    "2001:db8:ff00:100:8000::/80".to_string(),
                    "overlaps_connected"
                ),
            ]
        );
        assert_eq!(
            router.refused_kernel_routes[0].reason,
            RouteRefusal::OverlapsConnected { interface: 0 }
        );
        // The LAN's hosts, both halves, stay on the LAN; the rest goes up.
        for host in [5, 200] {
            let hop = router.routes.lookup(Ipv4Addr::new(192, 168, 77, host));
            assert_eq!(hop.unwrap().port, 0);
        }
        let delegated: Ipv6Addr = "2001:db8:ff00:100:8000::9".parse().unwrap();
        assert_eq!(router.routes6.lookup(delegated).unwrap().port, 0);
        for ip in [[8, 8, 8, 8], [192, 168, 5, 5]] {
            let hop = router.routes.lookup(Ipv4Addr::from(ip)).unwrap();
            assert_eq!((hop.port, hop.gateway), (1, Some(UPSTREAM)));
        }
        let remote: Ipv6Addr = "2001:db8:77::1".parse().unwrap();
        assert_eq!(router.routes6.lookup(remote).unwrap().port, 1);
    }

    #[test]
    fn the_allow_list_takes_only_what_lies_inside_it() {
        let router = build(
            "[kernel_twins]\nroute_allow = [\"198.51.100.0/24\", \"192.168.0.0/16\", \"::/0\"]",
        );
        assert_eq!(
            refusals(&router),
            [
                ("0.0.0.0/0".to_string(), "not_allowed"),
                // Inside an allowed prefix, yet inside the LAN: refused for that.
                ("192.168.77.0/25".to_string(), "overlaps_connected"),
                ("2001:db8:ff00:100::/64".to_string(), "overlaps_connected"),
                (
                    "2001:db8:ff00:100:8000::/80".to_string(),
                    "overlaps_connected"
                ),
            ]
        );
        assert!(router.routes.lookup(Ipv4Addr::new(8, 8, 8, 8)).is_none());
        assert!(router
            .routes
            .lookup(Ipv4Addr::new(198, 51, 100, 1))
            .is_some());
        assert!(router
            .routes6
            .lookup("2606:4700::1".parse().unwrap())
            .is_some());
        // A list of IPv4 prefixes only allows IPv6 nothing.
        let v4_only = build("[kernel_twins]\nroute_allow = [\"0.0.0.0/0\"]");
        let v6_refused: Vec<_> = v4_only
            .refused_kernel_routes
            .iter()
            .filter(|refused| refused.destination.is_ipv6())
            .map(|refused| (refused.destination, refused.reason.label()))
            .collect();
        assert_eq!(
            v6_refused,
            [
                (IpAddr::V6(Ipv6Addr::UNSPECIFIED), "not_allowed"),
                ("2001:db8:ff00:100::".parse().unwrap(), "overlaps_connected"),
                (
                    "2001:db8:ff00:100:8000::".parse().unwrap(),
                    "overlaps_connected"
                ),
                ("2001:db8:77::".parse().unwrap(), "not_allowed"),
            ]
        );
    }
}

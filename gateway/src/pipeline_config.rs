//! Turning the config file into the pipeline's immutable router config: interfaces, routes,
//! zones, NAT and the compiled firewall. Used at start and on every reload.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;
use pipeline::conntrack::{ConntrackConfig as TableConfig, Timeouts};
use pipeline::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::router::{PortForward, Stateful};
use pipeline::wire::{ipv4, EthernetAddress};
use pipeline::{IcmpLimits, Interface, RouterConfig, StaticRoute};

use crate::config::{FirewallAction, GatewayConfig, L4Protocol, PortRange, RuleProtocol};

/// Each built config gets a new generation, so flows can tell which rules admitted them.
static GENERATION: AtomicU32 = AtomicU32::new(0);

pub fn router_config(config: &GatewayConfig, macs: &[[u8; 6]]) -> anyhow::Result<RouterConfig> {
    let interfaces = config
        .interfaces
        .iter()
        .zip(macs)
        .map(|(iface, mac)| Interface {
            mac: EthernetAddress(*mac),
            addr: iface.address.addr,
            prefix_len: iface.address.len,
            mtu: iface.mtu,
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
    };
    let router = RouterConfig::new(interfaces, &routes, icmp).context("routes")?;
    Ok(router.with_stateful(stateful(config)?)?)
}

fn stateful(config: &GatewayConfig) -> anyhow::Result<Stateful> {
    let zone_names = config.zone_names();
    let zone = |name: &str| -> ZoneId {
        if name == "local" {
            return ZoneId::LOCAL;
        }
        let index = zone_names.iter().position(|z| z == name).unwrap_or(0);
        ZoneId(index as u8)
    };
    let interface_zone = |i: usize| {
        let iface = &config.interfaces[i];
        zone(iface.zone.as_deref().unwrap_or(&iface.name))
    };
    let masquerade: Vec<bool> = config
        .interfaces
        .iter()
        .map(|iface| config.nat.masquerade.contains(&iface.name))
        .collect();
    let zones: Vec<ZoneId> = (0..config.interfaces.len()).map(interface_zone).collect();

    // Built-in defaults: from an outside (masqueraded) zone, drop; from any other, accept.
    // Explicit policies override.
    let outside: Vec<ZoneId> = zones
        .iter()
        .zip(&masquerade)
        .filter(|(_, &m)| m)
        .map(|(z, _)| *z)
        .collect();
    let mut all_zones = zones.clone();
    all_zones.push(ZoneId::LOCAL);
    all_zones.sort_by_key(|zone| zone.0);
    all_zones.dedup();
    let mut policy = Policy::new(Action::Drop);
    for &from in &zones {
        let action = if outside.contains(&from) {
            Action::Drop
        } else {
            Action::Accept
        };
        for &to in &all_zones {
            policy = policy.set(from, to, action);
        }
    }
    for entry in &config.firewall.policy {
        policy = policy.set(zone(&entry.from), zone(&entry.to), action(entry.action));
    }
    let rules = config
        .firewall
        .rules
        .iter()
        .map(|rule| Rule {
            name: rule.name.clone(),
            from: rule.from.as_deref().map(zone),
            to: rule.to.as_deref().map(zone),
            src: rule.source.map(|c| (c.addr, c.len)),
            dst: rule.destination.map(|c| (c.addr, c.len)),
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
        .collect();
    let firewall = RuleSet::compile(rules, policy).context("firewall.rules")?;
    let port_forwards = config
        .nat
        .port_forwards
        .iter()
        .map(|forward| PortForward {
            interface: config
                .interfaces
                .iter()
                .position(|iface| iface.name == forward.interface)
                .unwrap_or(0) as u16,
            protocol: match forward.protocol {
                L4Protocol::Tcp => ipv4::protocol::TCP,
                L4Protocol::Udp => ipv4::protocol::UDP,
            },
            ports: range(forward.port),
            to: forward.to,
            to_port: forward.to_port.unwrap_or(forward.port.first),
        })
        .collect();
    Ok(Stateful {
        zones,
        masquerade,
        firewall,
        port_forwards,
        recheck_established: config.firewall.recheck_established,
        generation: GENERATION.fetch_add(1, Ordering::Relaxed),
    })
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
    }
}

/// The QoS policers' settings, when enabled.
pub fn qos_config(config: &GatewayConfig) -> Option<pipeline::qos::QosConfig> {
    use pipeline::qos::{Class, ClassRule};
    let qos = &config.qos;
    if !qos.enabled {
        return None;
    }
    let classes = qos
        .priority
        .iter()
        .map(|rule| ClassRule {
            class: Class::Priority,
            host: rule.host,
            dscp: rule.dscp,
            protocol: rule.protocol.map(|p| match p {
                L4Protocol::Tcp => ipv4::protocol::TCP,
                L4Protocol::Udp => ipv4::protocol::UDP,
            }),
            ports: rule.ports.map(|r| pipeline::qos::PortRange {
                first: r.first,
                last: r.last,
            }),
        })
        .collect();
    Some(pipeline::qos::QosConfig {
        uplink_bps: qos.uplink_mbps.saturating_mul(1_000_000),
        downlink_bps: qos.downlink_mbps.saturating_mul(1_000_000),
        burst_ms: qos.burst_ms,
        classes,
    })
}

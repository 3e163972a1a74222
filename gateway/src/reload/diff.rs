//! What a new file changes: the settings that need a restart, and the running config merged
//! with the new file so that those keep their running values.

use super::*;

/// Field paths whose change needs a restart, old -> new.
pub fn restart_required(running: &GatewayConfig, new: &GatewayConfig) -> Vec<String> {
    let mut fields = Vec::new();
    if running.eal != new.eal {
        fields.push("eal".to_string());
    }
    if running.mempool != new.mempool {
        fields.push("mempool".to_string());
    }
    if running.workers != new.workers {
        fields.push("workers".to_string());
    }
    // The whole section (size, timeouts, loose pickup, per-host and half-open limits) is
    // the flow tables' own settings, fixed when each worker's table is made.
    if running.conntrack != new.conntrack {
        fields.push("conntrack".to_string());
    }
    if running.nat.binding_capacity != new.nat.binding_capacity {
        fields.push("nat.binding_capacity".to_string());
    }
    if running.nat.host_ports != new.nat.host_ports {
        fields.push("nat.host_ports".to_string());
    }
    if running.nat.port_block_size != new.nat.port_block_size {
        fields.push("nat.port_block_size".to_string());
    }
    if running.nat.port_range != new.nat.port_range {
        fields.push("nat.port_range".to_string());
    }
    if running.nat.masquerade != new.nat.masquerade {
        fields.push("nat.masquerade".to_string());
    }
    // Each worker's event queue is made at start, and the sending thread with it.
    if running.nat.log != new.nat.log {
        fields.push("nat.log".to_string());
    }
    if running.firewall.log != new.firewall.log {
        fields.push("firewall.log".to_string());
    }
    // The control thread builds its neighbour table once, at start.
    if running.neighbors != new.neighbors {
        fields.push("neighbors".to_string());
    }
    // The twins are made at start; their punt budget applies on reload.
    if (
        running.kernel_twins.inside_by_default,
        &running.kernel_twins.netns,
    ) != (new.kernel_twins.inside_by_default, &new.kernel_twins.netns)
    {
        fields.push("kernel_twins.inside_by_default/netns".to_string());
    }
    if running.metrics != new.metrics {
        fields.push("metrics".to_string());
    }
    if running.ctl != new.ctl {
        fields.push("ctl".to_string());
    }
    // The file watcher is started, or not, with the gateway.
    if running.reload != new.reload {
        fields.push("reload".to_string());
    }
    // The sync link's socket, key and workers' sweep are set up at start.
    if running.port_mapping != new.port_mapping {
        fields.push("port_mapping".to_string());
    }
    if running.ha != new.ha {
        fields.push("ha".to_string());
    }
    // The snapshot is read at start and written where the running gateway started.
    if running.state != new.state {
        fields.push("state".to_string());
    }
    // Each worker's meter table is allocated at start.
    if running.traffic_meter.capacity != new.traffic_meter.capacity {
        fields.push("traffic_meter.capacity".to_string());
    }
    // Each checked uplink's prober thread starts with the gateway; weights, priorities, next
    // hops and `[routing]` apply on reload.
    if uplink_shape(running) != uplink_shape(new) {
        fields.push("uplinks[].interface/health/via".to_string());
    }
    if running.interfaces.len() != new.interfaces.len() {
        fields.push("interfaces (count)".to_string());
    } else {
        for (i, (old, new)) in running.interfaces.iter().zip(&new.interfaces).enumerate() {
            if old.device != new.device || old.name != new.name {
                fields.push(format!("interfaces[{i}].device/name"));
            }
            // Which port a VLAN rides on and its tag are wired into the workers' I/O.
            if old.parent != new.parent || old.vlan != new.vlan {
                fields.push(format!("interfaces[{i}].parent/vlan"));
            }
            if old.rx_descriptors != new.rx_descriptors || old.tx_descriptors != new.tx_descriptors
            {
                fields.push(format!("interfaces[{i}].rx/tx_descriptors"));
            }
            if old.mtu() != new.mtu() {
                fields.push(format!("interfaces[{i}].mtu"));
            }
            // Bonds, the RSS key, promiscuous mode and VLAN offloads are set up with the port.
            if old.bond != new.bond
                || old.rss_key != new.rss_key
                || old.promiscuous != new.promiscuous
                || old.vlan_offload != new.vlan_offload
            {
                fields.push(format!(
                    "interfaces[{i}].bond/rss_key/promiscuous/vlan_offload"
                ));
            }
            // The NAT pools hand out ports on the addresses they started with.
            if old.address != new.address {
                fields.push(format!("interfaces[{i}].address"));
            }
            // Twins are made at start.
            if old.kernel_twin != new.kernel_twin || old.kernel_twin_name != new.kernel_twin_name {
                fields.push(format!("interfaces[{i}].kernel_twin"));
            }
            // Masqueraded flows hold bindings on them, and netlink follows the virtual one
            // from the start.
            if old.virtual_address != new.virtual_address || old.nat_address != new.nat_address {
                fields.push(format!("interfaces[{i}].virtual_address/nat_address"));
            }
            // A port takes all multicast (Neighbor Discovery's groups) only if it starts with
            // IPv6; what the table says applies on reload.
            if old.ipv6.is_some() != new.ipv6.is_some() {
                fields.push(format!("interfaces[{i}].ipv6"));
            } else if twin_ipv6(old) != twin_ipv6(new) {
                // The twin's IPv6 is set up at start.
                fields.push(format!(
                    "interfaces[{i}].ipv6.autoconfigure/delegated_prefix"
                ));
            }
        }
    }
    fields
}

/// The uplinks as their probers see them: which interfaces, in which order, probed how, and
/// for a checked one its `via` (the twin's routing table its probes take is written with
/// the prober).
type UplinkShape<'a> = (
    &'a str,
    Option<&'a crate::config::HealthConfig>,
    Option<std::net::Ipv4Addr>,
);

fn uplink_shape(config: &GatewayConfig) -> Vec<UplinkShape<'_>> {
    (config.uplinks.iter())
        .map(|uplink| {
            let via = uplink.health.as_ref().and(uplink.via);
            (uplink.interface.as_str(), uplink.health.as_ref(), via)
        })
        .collect()
}

/// What an interface's twin does with IPv6: (autoconfigure, delegated_prefix).
pub(crate) fn twin_ipv6(iface: &crate::config::InterfaceConfig) -> Option<(bool, bool)> {
    let ipv6 = iface.ipv6.as_ref()?;
    Some((ipv6.autoconfigure, ipv6.delegated_prefix))
}

/// The config to run after a reload: `new` with every restart-only setting taken from
/// `running`, so the rest can apply now.
pub fn merge_for_reload(running: &GatewayConfig, new: GatewayConfig) -> GatewayConfig {
    let mut merged = new;
    merged.eal = running.eal.clone();
    merged.mempool = running.mempool.clone();
    merged.workers = running.workers.clone();
    merged.metrics = running.metrics.clone();
    merged.ctl = running.ctl.clone();
    merged.reload = running.reload.clone();
    merged.state = running.state.clone();
    merged.ha = running.ha.clone();
    merged.port_mapping = running.port_mapping.clone();
    merged.traffic_meter.capacity = running.traffic_meter.capacity;
    merged.conntrack = running.conntrack.clone();
    merged.nat.binding_capacity = running.nat.binding_capacity;
    merged.nat.log = running.nat.log.clone();
    merged.firewall.log = running.firewall.log.clone();
    merged.nat.host_ports = running.nat.host_ports;
    merged.nat.port_block_size = running.nat.port_block_size;
    merged.nat.port_range = running.nat.port_range;
    merged.nat.masquerade = running.nat.masquerade.clone();
    // Other uplinks (or probed otherwise) wait for a restart, and the policy rules that may
    // name them with them.
    if uplink_shape(running) != uplink_shape(&merged) {
        merged.uplinks = running.uplinks.clone();
        merged.routing = running.routing.clone();
    }
    merged.neighbors = running.neighbors.clone();
    merged.kernel_twins.inside_by_default = running.kernel_twins.inside_by_default;
    merged.kernel_twins.netns = running.kernel_twins.netns.clone();
    // The running interfaces stay, in their order, until a restart; each takes what applies
    // now from the file's interface of the same name (the name is what zones, forwards and
    // masquerade resolve by), or stays as it runs where the file has none. Never by place: a
    // reordered or renamed list would hand one interface's zone to another.
    merged.interfaces = running
        .interfaces
        .iter()
        .map(|old| {
            let Some(new) = merged.interfaces.iter().find(|new| new.name == old.name) else {
                return old.clone();
            };
            let mut new = new.clone();
            new.device = old.device.clone();
            new.parent = old.parent.clone();
            new.vlan = old.vlan;
            new.rx_descriptors = old.rx_descriptors;
            new.tx_descriptors = old.tx_descriptors;
            new.configured_mtu = old.configured_mtu;
            new.address = old.address;
            new.bond = old.bond.clone();
            new.rss_key = old.rss_key.clone();
            new.promiscuous = old.promiscuous;
            new.vlan_offload = old.vlan_offload;
            new.kernel_twin = old.kernel_twin;
            new.kernel_twin_name = old.kernel_twin_name.clone();
            new.virtual_address = old.virtual_address;
            new.nat_address = old.nat_address;
            if new.ipv6.is_some() != old.ipv6.is_some() {
                new.ipv6 = old.ipv6.clone();
            }
            if let (Some(new), Some(old)) = (&mut new.ipv6, &old.ipv6) {
                new.autoconfigure = old.autoconfigure;
                new.delegated_prefix = old.delegated_prefix;
            }
            new
        })
        .collect();
    merged
}

//! Config reload: on SIGHUP or when the file changes. The new file is parsed and validated
//! first; if it is bad, nothing changes. Settings that need a restart (EAL, pools, workers,
//! the set of interfaces) are reported and kept as they are; everything else applies.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use notify::{RecursiveMode, Watcher};

use crate::config::GatewayConfig;

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
    if running.nat.port_range != new.nat.port_range {
        fields.push("nat.port_range".to_string());
    }
    if running.nat.masquerade != new.nat.masquerade {
        fields.push("nat.masquerade".to_string());
    }
    // The control thread builds its neighbour table once, at start.
    if running.neighbors != new.neighbors {
        fields.push("neighbors".to_string());
    }
    if running.metrics != new.metrics {
        fields.push("metrics".to_string());
    }
    // Each worker's meter table is allocated at start.
    if running.traffic_meter.capacity != new.traffic_meter.capacity {
        fields.push("traffic_meter.capacity".to_string());
    }
    if running.interfaces.len() != new.interfaces.len() {
        fields.push("interfaces (count)".to_string());
    } else {
        for (i, (old, new)) in running.interfaces.iter().zip(&new.interfaces).enumerate() {
            if old.device != new.device || old.name != new.name {
                fields.push(format!("interfaces[{i}].device/name"));
            }
            if old.rx_descriptors != new.rx_descriptors || old.tx_descriptors != new.tx_descriptors
            {
                fields.push(format!("interfaces[{i}].rx/tx_descriptors"));
            }
            if old.mtu != new.mtu {
                fields.push(format!("interfaces[{i}].mtu"));
            }
            // Bonds and the RSS key are set up with the port.
            if old.bond != new.bond || old.rss_key != new.rss_key {
                fields.push(format!("interfaces[{i}].bond/rss_key"));
            }
            // The NAT pools hand out ports on the addresses they started with.
            if old.address != new.address {
                fields.push(format!("interfaces[{i}].address"));
            }
        }
    }
    fields
}

/// The config to run after a reload: `new` with every restart-only setting taken from
/// `running`, so the rest can apply now.
pub fn merge_for_reload(running: &GatewayConfig, new: GatewayConfig) -> GatewayConfig {
    let mut merged = new;
    merged.eal = running.eal.clone();
    merged.mempool = running.mempool.clone();
    merged.workers = running.workers.clone();
    merged.metrics = running.metrics.clone();
    merged.traffic_meter.capacity = running.traffic_meter.capacity;
    merged.conntrack = running.conntrack.clone();
    merged.nat.binding_capacity = running.nat.binding_capacity;
    merged.nat.host_ports = running.nat.host_ports;
    merged.nat.port_range = running.nat.port_range;
    merged.nat.masquerade = running.nat.masquerade.clone();
    merged.neighbors = running.neighbors.clone();
    if merged.interfaces.len() != running.interfaces.len() {
        merged.interfaces = running.interfaces.clone();
    } else {
        for (new, old) in merged.interfaces.iter_mut().zip(&running.interfaces) {
            new.device = old.device.clone();
            new.name = old.name.clone();
            new.rx_descriptors = old.rx_descriptors;
            new.tx_descriptors = old.tx_descriptors;
            new.mtu = old.mtu;
            new.address = old.address;
            new.bond = old.bond.clone();
            new.rss_key = old.rss_key.clone();
        }
    }
    merged
}

/// Sets `flag` whenever the config file is written, renamed over or recreated. Editors and
/// config-management tools replace files in several ways, so the directory is watched.
pub fn watch_file(
    path: &Path,
    flag: Arc<AtomicBool>,
) -> notify::Result<notify::RecommendedWatcher> {
    let file: PathBuf = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let name = file.file_name().map(|n| n.to_os_string());
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if !(event.kind.is_modify() || event.kind.is_create()) {
            return;
        }
        if event
            .paths
            .iter()
            .any(|p| p.file_name().map(|n| n.to_os_string()) == name)
        {
            flag.store(true, Ordering::Relaxed);
        }
    })?;
    watcher.watch(&dir, RecursiveMode::NonRecursive)?;
    Ok(watcher)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> GatewayConfig {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../configs/lab.toml"))
                .unwrap();
        // Tests run in parallel threads: each gets a file of its own.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gw-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("lab-{n}.toml"));
        std::fs::write(&file, text).unwrap();
        GatewayConfig::load(&file).unwrap()
    }

    #[test]
    fn restart_only_fields_are_named_and_kept() {
        let running = lab();
        let mut new = running.clone();
        new.eal.memory_mb += 1;
        new.interfaces[0].device = "net_af_packet9,iface=other".into();
        new.icmp.errors_per_sec = 5;
        let fields = restart_required(&running, &new);
        assert_eq!(fields, ["eal", "interfaces[0].device/name"]);
        let merged = merge_for_reload(&running, new);
        assert_eq!(merged.eal, running.eal);
        assert_eq!(merged.interfaces[0].device, running.interfaces[0].device);
        assert_eq!(
            merged.icmp.errors_per_sec, 5,
            "runtime settings still apply"
        );
    }

    #[test]
    fn start_only_settings_of_the_tables_neighbours_and_ports_are_reported_and_kept() {
        let running = lab();
        let mut new = running.clone();
        new.conntrack.udp_secs += 1;
        new.conntrack.tcp_loose = !running.conntrack.tcp_loose;
        new.neighbors.locktime_ms += 1;
        new.interfaces[1].rss_key = Some("6d5a".repeat(20));
        new.interfaces[0].source_validation = Some(crate::config::SourceValidationConfig::Off);
        let fields = restart_required(&running, &new);
        assert_eq!(
            fields,
            ["conntrack", "neighbors", "interfaces[1].bond/rss_key"]
        );
        let merged = merge_for_reload(&running, new.clone());
        assert_eq!(merged.conntrack, running.conntrack);
        assert_eq!(merged.neighbors, running.neighbors);
        assert_eq!(merged.interfaces[1].rss_key, running.interfaces[1].rss_key);
        assert_eq!(
            merged.interfaces[0].source_validation, new.interfaces[0].source_validation,
            "source validation applies with the router config"
        );
    }

    #[test]
    fn qos_and_the_meter_apply_on_reload_but_the_meter_capacity_needs_a_restart() {
        let running = lab();
        let mut new = running.clone();
        new.qos.enabled = !running.qos.enabled;
        new.qos.uplink_mbps += 1;
        new.traffic_meter.enabled = !running.traffic_meter.enabled;
        new.traffic_meter.top_hosts += 1;
        assert!(restart_required(&running, &new).is_empty());
        let merged = merge_for_reload(&running, new.clone());
        assert_eq!(merged.qos, new.qos);
        assert_eq!(merged.traffic_meter, new.traffic_meter);

        new.traffic_meter.capacity *= 2;
        assert_eq!(restart_required(&running, &new), ["traffic_meter.capacity"]);
        let merged = merge_for_reload(&running, new.clone());
        assert_eq!(
            merged.traffic_meter.capacity,
            running.traffic_meter.capacity
        );
        assert_eq!(merged.traffic_meter.top_hosts, new.traffic_meter.top_hosts);
    }

    #[test]
    fn an_unchanged_file_needs_no_restart() {
        let running = lab();
        assert!(restart_required(&running, &running.clone()).is_empty());
    }
}

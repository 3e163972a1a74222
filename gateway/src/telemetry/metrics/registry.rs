//! The registry: every metric family the gateway exports, registered once in `Metrics::new`.

use super::*;

pub(crate) fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntCounterVec {
    let vec = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

pub(crate) fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> IntGaugeVec {
    let vec = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

pub(crate) fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let gauge = IntGauge::new(name, help).expect("valid metric definition");
    registry
        .register(Box::new(gauge.clone()))
        .expect("metric names are unique");
    gauge
}

impl Metrics {
    pub fn new(sources: Sources) -> Self {
        let registry = Registry::new_custom(Some("gateway".into()), None).expect("valid prefix");
        let build = gauge_vec(
            &registry,
            "build_info",
            "Build information; the value is always 1.",
            &["version", "dpdk"],
        );
        build
            .with_label_values(&[env!("CARGO_PKG_VERSION"), &crate::dpdk::version()])
            .set(1);
        // What does not change while the gateway runs is set once.
        let port_info = gauge_vec(
            &registry,
            "port_info",
            "The port's driver, firmware version and EAL device; the value is always 1.",
            &["port", "driver", "firmware", "device"],
        );
        for port in &sources.ports.ports {
            let info = &port.info;
            port_info
                .with_label_values(&[&port.name, &info.driver, &info.firmware, &info.device])
                .set(1);
        }
        let mempool_mbufs = gauge_vec(
            &registry,
            "mempool_mbufs",
            "Packet buffers in the pool.",
            &["pool"],
        );
        if let Some(pool) = &sources.pool {
            mempool_mbufs
                .with_label_values(&["packets"])
                .set(i64::from(pool.capacity()));
        }
        let rx_burst_size = gauge_vec(
            &registry,
            "worker_rx_burst_size",
            "Packets one RX burst may return: a full burst (worker_rx_full_bursts_total) returned this many.",
            &["worker"],
        );
        for worker in 0..sources.workers.len() {
            rx_burst_size
                .with_label_values(&[&worker.to_string()])
                .set(BURST_SIZE as i64);
        }
        Metrics {
            port_counters: PORT_COUNTERS
                .iter()
                .map(|&(name, help, read)| Family {
                    vec: counter_vec(&registry, name, help, &["port"]),
                    read,
                })
                .collect(),
            queue_packets: counter_vec(
                &registry,
                "port_queue_packets_total",
                "Packets per port queue and direction (rx, tx).",
                &["port", "queue", "direction"],
            ),
            interface_packets: counter_vec(
                &registry,
                "interface_packets_total",
                "Packets per interface (a port's own or a VLAN subinterface) and direction: rx \
                 as received, tx as handed to the port's queue.",
                &["interface", "direction"],
            ),
            interface_bytes: counter_vec(
                &registry,
                "interface_bytes_total",
                "Bytes of those packets, Ethernet header included, 802.1Q tag not.",
                &["interface", "direction"],
            ),
            queue_drops: counter_vec(
                &registry,
                "port_rx_queue_drops_total",
                "Packets a port queue dropped for want of a free descriptor (q_errors; ixgbe QPRDC with drop-enable): its worker fell behind.",
                &["port", "queue"],
            ),
            xstats: counter_vec(
                &registry,
                "port_xstats_total",
                "The NIC's extended statistics, named as the driver reports them (ixgbe: rx_crc_errors, mac_local_errors, ...).",
                &["port", "stat"],
            ),
            port_link_up: gauge_vec(
                &registry,
                "port_link_up",
                "Whether the port's link is up (1) or down (0).",
                &["port"],
            ),
            port_speed: gauge_vec(
                &registry,
                "port_speed_bytes",
                "The link's speed in bytes per second, as node_exporter's node_network_speed_bytes.",
                &["port"],
            ),
            link_flaps: counter_vec(
                &registry,
                "port_link_flaps_total",
                "Times the port's link went down, sampled every 100 ms.",
                &["port"],
            ),
            mempool_in_use: gauge_vec(
                &registry,
                "mempool_mbufs_in_use",
                "Packet buffers out of the pool (in rings, queues and bursts), approximate.",
                &["pool"],
            ),
            worker_counters: WORKER_COUNTERS
                .iter()
                .map(|&(name, help, read)| Family {
                    vec: counter_vec(&registry, name, help, &["worker"]),
                    read,
                })
                .collect(),
            worker_gauges: WORKER_GAUGES
                .iter()
                .map(|&(name, help, read)| GaugeFamily {
                    vec: gauge_vec(&registry, name, help, &["worker"]),
                    read,
                })
                .collect(),
            heartbeat_age: {
                let vec = prometheus::GaugeVec::new(
                    Opts::new(
                        "worker_heartbeat_age_seconds",
                        "Seconds since the worker's poll loop last ran (a live worker: a few ms).",
                    ),
                    &["worker"],
                )
                .expect("valid metric definition");
                registry
                    .register(Box::new(vec.clone()))
                    .expect("metric names are unique");
                vec
            },
            drops: counter_vec(
                &registry,
                "dropped_packets_total",
                "Packets dropped, by worker and reason.",
                &["worker", "reason"],
            ),
            ipv6_drops: counter_vec(
                &registry,
                "ipv6_dropped_packets_total",
                "Of dropped_packets_total, the IPv6 packets the workers' pipeline dropped (not the shaper's, the rings' or the control thread's), by worker and reason; a series appears at its first drop.",
                &["worker", "reason"],
            ),
            conntrack_invalid: counter_vec(
                &registry,
                "conntrack_invalid_packets_total",
                "Packets the flow tracker refused (dropped as conntrack_invalid), by worker and why.",
                &["worker", "reason"],
            ),
            reload_success: gauge(
                &registry,
                "config_last_reload_success",
                "1 if the last config reload applied, 0 if it was refused.",
            ),
            reload_timestamp: gauge(
                &registry,
                "config_last_reload_timestamp_seconds",
                "Unix time of the last reload attempt (0: none since start).",
            ),
            reloads: counter_vec(
                &registry,
                "config_reloads_total",
                "Config reload attempts by result (success, failure).",
                &["result"],
            ),
            snapshot_restored: gauge(
                &registry,
                "snapshot_restored_flows",
                "Flows restored from the state snapshot at start.",
            ),
            snapshot_skipped: gauge_vec(
                &registry,
                "snapshot_skipped_flows",
                "Flows of the state snapshot not restored at start, by reason (expired, config, ownership, nat_port, table).",
                &["reason"],
            ),
            snapshot_refused: gauge(
                &registry,
                "snapshot_refused",
                "1 if a state snapshot was found at start and refused whole (corrupt, truncated, foreign, other version).",
            ),
            kernel_routes_refused: gauge_vec(
                &registry,
                "kernel_routes_refused",
                "Routes on the kernel twins (IPv4 and IPv6) not mirrored into the FIB now, by reason: overlaps_connected (inside one of the gateway's own subnets), not_allowed (outside kernel_twins.route_allow).",
                &["reason"],
            ),
            firewall_rule_hits: counter_vec(
                &registry,
                "firewall_rule_hits_total",
                "First packets each firewall rule decided, by rule name (a name's second use is name#2) and action: one per accepted flow; for dropped or rejected flows and for traffic to the gateway itself, one per packet the rule met. Kept across reloads by name; the zone pair's defaults are not counted here.",
                &["rule", "action"],
            ),
            firewall_default_hits: counter_vec(
                &registry,
                "firewall_default_hits_total",
                "First packets each zone pair's default decided (no rule matched; not a port forward or an IPv6 pinhole), by zones (from, to, local for the gateway itself) and the pair's default action, counted as firewall_rule_hits_total is. Kept across reloads by zone names.",
                &["from", "to", "action"],
            ),
            firewall_rule_last_match: gauge_vec(
                &registry,
                "firewall_rule_last_match_timestamp_seconds",
                "The Unix time each firewall rule last decided a first packet (as firewall_rule_hits_total counts them), by rule name; absent for a rule that never has since the gateway started.",
                &["rule"],
            ),
            firewall_default_last_match: gauge_vec(
                &registry,
                "firewall_default_last_match_timestamp_seconds",
                "The Unix time each zone pair's default last decided a first packet (as firewall_default_hits_total counts them), by zones; absent for a pair whose default never has.",
                &["from", "to"],
            ),
            port_forward_hits: counter_vec(
                &registry,
                "port_forward_hits_total",
                "First packets each port forward decided (no firewall rule matched it: a forward is open unless a rule says otherwise), by what it forwards (tcp 8080 -> 192.168.10.5:80), counted as firewall_rule_hits_total is. Kept across reloads by that label.",
                &["forward"],
            ),
            port_forward_last_match: gauge_vec(
                &registry,
                "port_forward_last_match_timestamp_seconds",
                "The Unix time each port forward last decided a first packet (as port_forward_hits_total counts them); absent for one that never has.",
                &["forward"],
            ),
            nat_log_events: counter_vec(
                &registry,
                "nat_log_events_total",
                "NAT log events (mapping created or deleted) by result: sent, send_failed, lost (a worker's queue was full).",
                &["result"],
            ),
            firewall_log_events: counter_vec(
                &registry,
                "firewall_log_events_total",
                "Firewall log events (decisions of rules, port forwards and zone pairs with log = true) by result: sent (once per destination: syslog, the JSON lines file), send_failed, lost (over a worker's firewall.log budget, or its queue full).",
                &["result"],
            ),
            qos_bytes: counter_vec(
                &registry,
                "qos_bytes_total",
                "QoS: bytes by link (uplink, downlink), class (priority, bulk) and result (passed, dropped).",
                &["link", "class", "result"],
            ),
            qos_packets: counter_vec(
                &registry,
                "qos_packets_total",
                "QoS: packets by link, class and result.",
                &["link", "class", "result"],
            ),
            qos_share: gauge_vec(
                &registry,
                "qos_share_bytes_per_second",
                "QoS: the rate share each worker polices to, by link.",
                &["worker", "link"],
            ),
            qos_ecn_marks: counter_vec(
                &registry,
                "qos_ecn_marks_total",
                "QoS shaper: packets marked CE (Congestion Experienced) instead of dropped, by link.",
                &["link"],
            ),
            qos_backlog: gauge_vec(
                &registry,
                "qos_backlog_packets",
                "QoS shaper: packets waiting in the shapers now, by link.",
                &["link"],
            ),
            meter_bytes: counter_vec(
                &registry,
                "meter_bytes_total",
                "Traffic meter: bytes of all LAN hosts by direction (up: from the host).",
                &["direction"],
            ),
            meter_packets: counter_vec(
                &registry,
                "meter_packets_total",
                "Traffic meter: packets of all LAN hosts by direction.",
                &["direction"],
            ),
            meter_hosts: gauge(&registry, "meter_hosts", "LAN hosts the traffic meter has seen."),
            meter_host_bytes: counter_vec(
                &registry,
                "meter_host_bytes_total",
                "Traffic meter: bytes of the top hosts and the configured hosts (all hosts: /hosts).",
                &["host", "direction"],
            ),
            meter_unattributed_bytes: counter_vec(
                &registry,
                "meter_unattributed_bytes_total",
                "Traffic meter: IPv6 bytes of LAN hosts with no IPv4 address on that link to count them under, by direction.",
                &["direction"],
            ),
            bond_members: gauge_vec(&registry, "bond_members", "Members configured in the bond.", &["bond"]),
            bond_active_members: gauge_vec(
                &registry,
                "bond_active_members",
                "Members carrying traffic: link up and LACP distributing on them.",
                &["bond"],
            ),
            bond_state_changes: counter_vec(
                &registry,
                "bond_member_state_changes_total",
                "Member changes of link, LACP selection, collecting or distributing.",
                &["bond"],
            ),
            member_link_up: gauge_vec(
                &registry,
                "bond_member_link_up",
                "1 when the member's link is up.",
                &["bond", "member"],
            ),
            member_speed: gauge_vec(
                &registry,
                "bond_member_speed_bytes",
                "The member's link speed in bytes per second; 802.3ad aggregates only members of one speed.",
                &["bond", "member"],
            ),
            member_selected: gauge_vec(
                &registry,
                "bond_member_lacp_selected",
                "1 when LACP selected the member for the aggregator.",
                &["bond", "member"],
            ),
            member_collecting: gauge_vec(
                &registry,
                "bond_member_lacp_collecting",
                "1 when the side (actor: the gateway, partner: the switch) collects on the member.",
                &["bond", "member", "side"],
            ),
            member_distributing: gauge_vec(
                &registry,
                "bond_member_lacp_distributing",
                "1 when the side (actor: the gateway, partner: the switch) distributes on the member.",
                &["bond", "member", "side"],
            ),
            pppoe: PppoeMetrics::new(&registry),
            uplinks: UplinkMetrics::new(&registry),
            session_sync: SessionSyncMetrics::new(&registry),
            port_mapping: PortMappingMetrics::new(&registry),
            registry,
            sources,
        }
    }
}

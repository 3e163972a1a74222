//! The counters and gauges read straight from ports and workers, as tables of name, help and
//! reader; `metric_names` lists every name the gateway exports.

use super::*;

pub(crate) type PortReader = fn(&PortStats) -> u64;
pub(crate) type WorkerReader = fn(&WorkerCounters) -> u64;

pub(crate) const PORT_COUNTERS: &[(&str, &str, PortReader)] = &[
    ("port_rx_packets_total", "Packets received by the port.", |s| s.rx_packets),
    ("port_tx_packets_total", "Packets sent by the port.", |s| s.tx_packets),
    ("port_rx_bytes_total", "Bytes received by the port.", |s| s.rx_bytes),
    ("port_tx_bytes_total", "Bytes sent by the port.", |s| s.tx_bytes),
    ("port_rx_errors_total", "Erroneous packets received.", |s| s.rx_errors),
    ("port_tx_errors_total", "Failed transmissions.", |s| s.tx_errors),
    (
        "port_rx_missed_packets_total",
        "Packets the NIC dropped before any queue took them (imissed; ixgbe: the RX packet buffer overflowed, MPC). A queue short of descriptors counts in port_rx_queue_drops_total.",
        |s| s.rx_missed,
    ),
    (
        "port_rx_nombuf_total",
        "RX failures for want of an mbuf in the pool (rx_nombuf).",
        |s| s.rx_nombuf,
    ),
];

pub(crate) const WORKER_COUNTERS: &[(&str, &str, WorkerReader)] = &[
    (
        "worker_rx_packets_total",
        "Packets the worker received from its queues.",
        |c| c.rx_packets.get(),
    ),
    (
        "worker_tx_packets_total",
        "Packets the worker's tx_bursts accepted.",
        |c| c.transmitted.get(),
    ),
    (
        "worker_fast_path_packets_total",
        "Packets of established flows the fast path decided (the rest took the full path).",
        |c| c.fast_path.get(),
    ),
    (
        "worker_rx_bursts_total",
        "RX bursts that returned packets.",
        |c| c.rx_bursts.get(),
    ),
    (
        "worker_rx_full_bursts_total",
        "RX bursts that came back full (worker_rx_burst_size packets): more were waiting. Their share of all bursts nearing 1 means the worker barely keeps up.",
        |c| c.rx_full_bursts.get(),
    ),
    (
        "worker_busy_cycles_total",
        "TSC cycles in loops that received packets.",
        |c| c.busy_cycles.get(),
    ),
    (
        "worker_idle_cycles_total",
        "TSC cycles in loops that received nothing.",
        |c| c.idle_cycles.get(),
    ),
    (
        "worker_handoffs_sent_total",
        "Packets handed to the worker owning their flow.",
        |c| c.handoffs_sent.get(),
    ),
    (
        "worker_handoffs_received_total",
        "Packets received from other workers.",
        |c| c.handoffs_received.get(),
    ),
    (
        "worker_to_control_total",
        "Packets sent to the control thread.",
        |c| c.to_control.get(),
    ),
    (
        "worker_punted_total",
        "Packets for the gateway's addresses sent to a kernel twin.",
        |c| c.punted.get(),
    ),
    (
        "worker_from_twins_total",
        "Frames the kernel sent on a twin, passed to the wire (control thread).",
        |c| c.from_twins.get(),
    ),
    (
        "worker_fragmented_total",
        "Datagrams split into fragments.",
        |c| c.fragmented.get(),
    ),
    (
        "worker_icmp_errors_sent_total",
        "ICMP errors generated.",
        |c| c.icmp_errors_sent.get(),
    ),
    (
        "worker_icmp_errors_rate_limited_total",
        "ICMP errors suppressed by the rate limit.",
        |c| c.icmp_errors_rate_limited.get(),
    ),
    (
        "worker_tcp_mss_clamped_total",
        "TCP SYNs whose MSS option was lowered to an interface's tcp_mss.",
        |c| c.mss_clamped.get(),
    ),
    (
        "worker_syn_cookies_sent_total",
        "SYNs toward port forwards the SYN proxy answered with a cookie (half-open table full).",
        |c| c.syn_cookies_sent.get(),
    ),
    (
        "worker_syn_cookies_accepted_total",
        "ACKs that returned a SYN cookie, each opening a proxied flow.",
        |c| c.syn_cookies_accepted.get(),
    ),
    (
        "worker_syn_proxy_updates_lost_total",
        "Window updates the SYN proxy could not send to a proxied client.",
        |c| c.syn_proxy_updates_lost.get(),
    ),
    (
        "worker_ipv6_router_adverts_total",
        "IPv6 Router Advertisements sent (by the control thread: worker=\"control\").",
        |c| c.router_adverts.get(),
    ),
    ("conntrack_flow_setups_total", "Flows created.", |c| {
        c.conntrack_setups.get()
    }),
    (
        "conntrack_expirations_total",
        "Flows removed after their timeout.",
        |c| c.conntrack_expirations.get(),
    ),
    (
        "conntrack_evictions_total",
        "Flows evicted to make room in a full table.",
        |c| c.conntrack_evictions.get(),
    ),
    (
        "conntrack_stale_segments_total",
        "TCP segments behind the window (data or acknowledgements already overtaken), passed on unchanged.",
        |c| c.conntrack_stale_segments.get(),
    ),
];

/// A link speed in Mbit/s as bytes per second, node_exporter's unit for speeds.
pub(crate) fn bytes_per_second(speed_mbps: u32) -> i64 {
    i64::from(speed_mbps) * 1_000_000 / 8
}

pub(crate) const WORKER_GAUGES: &[(&str, &str, WorkerReader)] = &[
    (
        "ipv6_neighbors",
        "IPv6 neighbours the control thread knows (worker=\"control\"), by Neighbor Discovery.",
        |c| c.ipv6_neighbors.get(),
    ),
    ("conntrack_entries", "Flows in the worker's table.", |c| {
        c.conntrack_entries.get()
    }),
    (
        "conntrack_ipv6_entries",
        "IPv6 flows in the worker's table of them.",
        |c| c.conntrack_ipv6_entries.get(),
    ),
    (
        "conntrack_capacity",
        "Flows the worker's table holds.",
        |c| c.conntrack_capacity.get(),
    ),
    (
        "nat_ports_in_use",
        "NAT ports (and ICMP ids) bound on this worker.",
        |c| c.nat_ports_in_use.get(),
    ),
    (
        "nat_ports_available",
        "NAT ports this worker may still hand out.",
        |c| c.nat_ports_available.get(),
    ),
    (
        "nat_port_blocks_in_use",
        "NAT port blocks LAN hosts hold on this worker (nat.port_block_size; 0 without).",
        |c| c.nat_port_blocks_in_use.get(),
    ),
    (
        "nat_port_blocks",
        "NAT port blocks this worker has over its addresses (nat.port_block_size; 0 without).",
        |c| c.nat_port_blocks.get(),
    ),
    (
        "conntrack_half_open",
        "Half-open TCP flows in the worker's table (capped by conntrack.half_open).",
        |c| c.conntrack_half_open.get(),
    ),
    (
        "hosts_at_flow_limit",
        "Hosts holding conntrack.host_flows flows on this worker now.",
        |c| c.hosts_at_flow_limit.get(),
    ),
    (
        "hosts_at_half_open_limit",
        "Hosts holding conntrack.host_half_open half-open flows on this worker now.",
        |c| c.hosts_at_half_open_limit.get(),
    ),
    (
        "hosts_at_nat_port_limit",
        "LAN hosts holding nat.host_ports NAT ports on this worker now.",
        |c| c.hosts_at_nat_port_limit.get(),
    ),
];

/// Every metric family the gateway exports, with the `gateway_` prefix: what dashboards and
/// alerts may refer to.
pub fn metric_names() -> Vec<String> {
    let fixed = [
        "build_info",
        "port_queue_packets_total",
        "port_rx_queue_drops_total",
        "port_xstats_total",
        "port_link_up",
        "port_speed_bytes",
        "port_link_flaps_total",
        "port_info",
        "interface_packets_total",
        "interface_bytes_total",
        "mempool_mbufs",
        "mempool_mbufs_in_use",
        "worker_rx_burst_size",
        "dropped_packets_total",
        "ipv6_dropped_packets_total",
        "conntrack_invalid_packets_total",
        "config_last_reload_success",
        "config_last_reload_timestamp_seconds",
        "config_reloads_total",
        "snapshot_restored_flows",
        "snapshot_skipped_flows",
        "snapshot_refused",
        "nat_log_events_total",
        "firewall_log_events_total",
        "firewall_rule_hits_total",
        "firewall_default_hits_total",
        "firewall_rule_last_match_timestamp_seconds",
        "firewall_default_last_match_timestamp_seconds",
        "port_forward_hits_total",
        "port_forward_last_match_timestamp_seconds",
        "worker_heartbeat_age_seconds",
        "qos_bytes_total",
        "qos_packets_total",
        "qos_share_bytes_per_second",
        "qos_ecn_marks_total",
        "qos_backlog_packets",
        "qos_queue_delay_seconds",
        "meter_bytes_total",
        "meter_packets_total",
        "meter_hosts",
        "meter_host_bytes_total",
        "meter_unattributed_bytes_total",
        "bond_members",
        "bond_active_members",
        "bond_member_state_changes_total",
        "bond_member_link_up",
        "bond_member_speed_bytes",
        "bond_member_lacp_selected",
        "bond_member_lacp_collecting",
        "bond_member_lacp_distributing",
        "pppoe_session_up",
        "pppoe_session_id",
        "pppoe_state",
        "pppoe_mtu",
        "pppoe_sessions_total",
        "pppoe_session_ends_total",
        "pppoe_control_packets_total",
        "pppoe_refused_control_packets_total",
        "pppoe_lcp_echoes_total",
        "pppoe_ipv6_up",
        "pppoe_ipv6cp_total",
        "uplink_usable",
        "uplink_health_failed",
        "uplink_probes_total",
        "uplink_probe_rtt_seconds",
        "uplink_state_changes_total",
        "session_sync_messages_total",
        "session_sync_flows_total",
        "session_sync_sweeps_total",
        "session_sync_skipped_flows_total",
        "session_sync_refused_messages_total",
        "session_sync_peer_silence_seconds",
        "port_mappings",
        "port_mapping_requests_total",
    ];
    let tables = PORT_COUNTERS
        .iter()
        .map(|(name, _, _)| *name)
        .chain(WORKER_COUNTERS.iter().map(|(name, _, _)| *name))
        .chain(WORKER_GAUGES.iter().map(|(name, _, _)| *name));
    fixed
        .into_iter()
        .chain(tables)
        .map(|name| format!("gateway_{name}"))
        .collect()
}

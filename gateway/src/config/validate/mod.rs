//! `GatewayConfig::validate`: every field checked, the one at fault named. The checks of
//! interfaces and of the firewall and NAT are in `interfaces` and `firewall`.

mod firewall;
mod interfaces;
mod warnings;

pub(crate) use interfaces::*;

use super::*;
use pipeline::verdict::ReasonSet;

/// Neighbour confirmations older than this are not worth trusting, and the nanoseconds stay
/// far from wrapping.
const MAX_REACHABLE_SECS: u64 = 86_400;

/// Rejected rather than masked: a prefix with host bits is almost always a typo.
pub(crate) fn no_host_bits6(field: String, prefix: &Ipv6Cidr) -> Result<(), ConfigError> {
    let network = pipeline::pipeline::local::ipv6::prefix_of(prefix.addr, prefix.len);
    if network == prefix.addr {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "{prefix} has host bits set; did you mean {network}/{}?",
            prefix.len
        ),
    ))
}

pub(crate) fn no_host_bits(field: String, prefix: &Ipv4Cidr) -> Result<(), ConfigError> {
    if u32::from(prefix.addr) & !prefix.mask() == 0 {
        return Ok(());
    }
    Err(invalid(
        field,
        format!(
            "{prefix} has host bits set; did you mean {}/{}?",
            prefix.network(),
            prefix.len
        ),
    ))
}

pub(crate) fn subnets_overlap(a: &Ipv4Cidr, b: &Ipv4Cidr) -> bool {
    let wider = a.mask() & b.mask();
    u32::from(a.addr) & wider == u32::from(b.addr) & wider
}

/// DPDK's log levels as `--log-level` takes them: a level's name or any start of it
/// ("err" is "error"), or its number 1 (emergency) to 8 (debug); optionally after a log
/// type pattern and a colon ("pmd.net.*:debug") or a regular expression and a comma.
pub(crate) fn check_log_level(text: &str) -> Result<(), String> {
    const LEVELS: [&str; 8] = [
        "emergency",
        "alert",
        "critical",
        "error",
        "warning",
        "notice",
        "info",
        "debug",
    ];
    let level = match text.rsplit_once([':', ',']) {
        Some((pattern, level)) if !pattern.is_empty() => level,
        _ => text,
    };
    let named = !level.is_empty() && LEVELS.iter().any(|name| name.starts_with(level));
    let numbered = level.parse::<u8>().is_ok_and(|n| (1..=8).contains(&n));
    if named || numbered {
        return Ok(());
    }
    let meant = match level.to_ascii_lowercase().as_str() {
        "verbose" | "trace" | "all" | "debug2" => "; did you mean \"debug\"?",
        "fatal" | "panic" => "; did you mean \"crit\"?",
        "quiet" | "silent" | "none" | "off" => "; did you mean \"emerg\" (the quietest)?",
        "information" | "informational" => "; did you mean \"info\"?",
        _ => "",
    };
    Err(format!(
        "{text:?} is not a DPDK log level: emerg, alert, crit, err, warning, notice, info, \
         debug, or 1 to 8 (optionally after a log type pattern, \"pmd.net.*:debug\"){meant}"
    ))
}

/// A MAC an interface can have, written as the EAL's bond device string takes it: six
/// two-digit hex groups, unicast and not all zero.
pub(crate) fn check_unicast_mac(text: &str) -> Result<(), String> {
    let Ok(mac) = text.parse::<pipeline::wire::EthernetAddress>() else {
        return Err(format!(
            "{text:?} is not a MAC address: six two-digit hex groups, \"02:00:00:00:00:01\""
        ));
    };
    if mac.0 == [0; 6] {
        return Err(format!("{text}: all zero is no interface's MAC"));
    }
    if mac.0[0] & 1 != 0 {
        return Err(format!(
            "{text} is a multicast MAC (the first byte is odd); an interface needs a unicast \
             one, e.g. {:02x}:{}",
            mac.0[0] & !1,
            text.get(3..).unwrap_or_default()
        ));
    }
    Ok(())
}

/// A log section's syslog settings (`nat.log`, `firewall.log`): the facility, the workers'
/// queue size, and a Unix socket's absolute path.
pub(crate) fn validate_syslog_sender(
    section: &str,
    facility: u8,
    queue_events: usize,
    syslog_unix: &Option<PathBuf>,
) -> Result<(), ConfigError> {
    if facility > 23 {
        return Err(invalid(
            format!("{section}.facility"),
            format!("{facility} is not a syslog facility (0-23; local0 is 16)"),
        ));
    }
    if !(1..=1 << 24).contains(&queue_events) {
        return Err(invalid(
            format!("{section}.queue_events"),
            format!("{queue_events} is not between 1 and 16777216"),
        ));
    }
    if let Some(path) = syslog_unix.as_ref().filter(|path| !path.is_absolute()) {
        return Err(invalid(
            format!("{section}.syslog_unix"),
            format!("{} is not an absolute path", path.display()),
        ));
    }
    Ok(())
}

pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

impl GatewayConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_eal()?;
        if self.workers.lcores.is_empty() {
            return Err(invalid(
                "workers.lcores",
                "at least one worker lcore is needed",
            ));
        }
        let max_lcore = dpdk_sys::RTE_MAX_LCORE;
        if self.eal.main_lcore >= max_lcore {
            return Err(invalid(
                "eal.main_lcore",
                format!(
                    "{} is not an lcore id: DPDK's are 0 to {} (RTE_MAX_LCORE is {max_lcore})",
                    self.eal.main_lcore,
                    max_lcore - 1
                ),
            ));
        }
        let mut lcores = HashSet::new();
        for (i, &lcore) in self.workers.lcores.iter().enumerate() {
            if lcore >= max_lcore {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!(
                        "{lcore} is not an lcore id: DPDK's are 0 to {} (RTE_MAX_LCORE is \
                         {max_lcore}); eal.cpus maps lcores to CPUs",
                        max_lcore - 1
                    ),
                ));
            }
            if lcore == self.eal.main_lcore {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!("lcore {lcore} is eal.main_lcore, which runs the control thread"),
                ));
            }
            if !lcores.insert(lcore) {
                return Err(invalid(
                    format!("workers.lcores[{i}]"),
                    format!("lcore {lcore} is listed twice"),
                ));
            }
        }
        if !self.eal.cpus.is_empty() && self.eal.cpus.len() != self.workers.lcores.len() + 1 {
            return Err(invalid(
                "eal.cpus",
                format!(
                    "lists {} CPUs for {} lcores (the main lcore and {} workers)",
                    self.eal.cpus.len(),
                    self.workers.lcores.len() + 1,
                    self.workers.lcores.len()
                ),
            ));
        }
        if self.mempool.cache > 512 || self.mempool.cache as f64 > self.mempool.mbufs as f64 / 1.5 {
            return Err(invalid(
                "mempool.cache",
                "must be at most 512 and at most mbufs / 1.5 (DPDK's limits)",
            ));
        }
        if self.interfaces.is_empty() {
            return Err(invalid("interfaces", "at least one interface is needed"));
        }
        if self.interfaces.len() > pipeline::counters::MAX_INTERFACES {
            return Err(invalid(
                "interfaces",
                format!(
                    "{} interfaces, more than the {} each worker keeps counters for",
                    self.interfaces.len(),
                    pipeline::counters::MAX_INTERFACES
                ),
            ));
        }
        let mut names = HashSet::new();
        let mut devices = HashSet::new();
        for (i, iface) in self.interfaces.iter().enumerate() {
            let field = |name: &str| format!("interfaces[{i}].{name}");
            if iface.name.is_empty() || !names.insert(iface.name.as_str()) {
                return Err(invalid(
                    field("name"),
                    format!("{:?} is empty or used twice", iface.name),
                ));
            }
            if iface.is_vlan() {
                self.validate_vlan(i)?;
            } else if iface.device.is_empty() {
                return Err(invalid(
                    field("device"),
                    "missing: give a DPDK device, or parent and vlan for a VLAN subinterface",
                ));
            } else if !devices.insert(device_name(&iface.device)) {
                return Err(invalid(
                    field("device"),
                    format!("{:?} is used twice", iface.device),
                ));
            }
            if let Some(bond) = &iface.bond {
                if bond.members.is_empty() {
                    return Err(invalid(field("bond.members"), "a bond needs a member"));
                }
                // A member is a device: one port cannot serve two bonds, or a bond and an
                // interface of its own.
                for (m, member) in bond.members.iter().enumerate() {
                    if !devices.insert(device_name(member)) {
                        return Err(invalid(
                            field(&format!("bond.members[{m}]")),
                            format!("{member:?} is used twice (as a device or a bond member)"),
                        ));
                    }
                }
            }
            if !iface.is_vlan() {
                for (name, count) in [
                    ("rx_descriptors", iface.rx_descriptors),
                    ("tx_descriptors", iface.tx_descriptors),
                ] {
                    if count == 0 {
                        return Err(invalid(
                            field(name),
                            "must be positive (the device's own limits are checked at start)",
                        ));
                    }
                }
            }
            // "dhcp" needs a twin: checked with the twins (`crate::config::twins::validate`).
            if let Some(address) = iface.address.cidr() {
                if address.len == 0 || address.len > 30 {
                    return Err(invalid(field("address"), "prefix length must be 1..=30"));
                }
                let host_bits = u32::from(address.addr) & !address.mask();
                let unusable = if address.addr.is_loopback() {
                    Some("a loopback address")
                } else if address.addr.is_multicast() {
                    Some("a multicast address")
                } else if address.addr.is_broadcast() || address.addr.is_unspecified() {
                    Some("not a host's address")
                } else if host_bits == 0 {
                    Some("the subnet's network address")
                } else if host_bits == !address.mask() {
                    Some("the subnet's broadcast address")
                } else {
                    None
                };
                if let Some(what) = unusable {
                    return Err(invalid(
                        field("address"),
                        format!("{address}: {what}; give the gateway one of the subnet's host addresses"),
                    ));
                }
                if let Some((j, other)) =
                    self.interfaces[..i].iter().enumerate().find(|(_, other)| {
                        other
                            .address
                            .cidr()
                            .is_some_and(|theirs| subnets_overlap(&theirs, &address))
                    })
                {
                    return Err(invalid(
                        field("address"),
                        format!(
                            "{} overlaps interfaces[{j}] ({}, {}): a connected subnet must belong to one interface",
                            address, other.name, other.address
                        ),
                    ));
                }
            }
            if let Some(virtual_address) = iface.virtual_address {
                self.validate_virtual_address(i, virtual_address)?;
            }
            if let Some(nat_address) = iface.nat_address {
                self.validate_nat_address(i, nat_address)?;
            }
            if let Some(ipv6) = &iface.ipv6 {
                validate_ipv6(i, ipv6, &self.interfaces[..i])?;
            }
            if let Some(mac) = iface.bond.as_ref().and_then(|bond| bond.mac.as_ref()) {
                check_unicast_mac(mac).map_err(|reason| invalid(field("bond.mac"), reason))?;
            }
            if let Some(key) = &iface.rss_key {
                if parse_hex(key).is_none() {
                    return Err(invalid(
                        field("rss_key"),
                        "must be an even number of hex digits",
                    ));
                }
            }
            let framing = if iface.is_vlan() { 22 } else { 18 };
            // A PPPoE port's frames carry 8 bytes of PPPoE and PPP besides.
            if iface.mtu() < 576
                || u32::from(iface.port_mtu()) + framing > u32::from(self.mempool.data_room)
            {
                return Err(invalid(
                    field("mtu"),
                    format!(
                        "{} must be at least 576 and, with {framing} bytes of Ethernet framing, fit mempool.data_room ({})",
                        iface.mtu(), self.mempool.data_room
                    ),
                ));
            }
            self.validate_pppoe(i)?;
            if let Some(TcpMssConfig::Bytes(bytes)) = iface.tcp_mss {
                let most = TcpMssConfig::Auto.bytes(iface.mtu());
                if !(MIN_TCP_MSS..=most).contains(&bytes) {
                    return Err(invalid(
                        field("tcp_mss"),
                        format!(
                            "{bytes} must be from {MIN_TCP_MSS} to the MTU ({}) less 40 bytes of headers ({most}), or \"auto\"",
                            iface.mtu()
                        ),
                    ));
                }
            }
        }
        for (i, route) in self.routes.iter().enumerate() {
            let dest = route.destination;
            no_host_bits(format!("routes[{i}].destination"), &dest)?;
            if let Some(j) = self.routes[..i].iter().position(|other| {
                (other.destination.addr, other.destination.len) == (dest.addr, dest.len)
            }) {
                let what = if dest.len == 0 {
                    "a second default route"
                } else {
                    "a second route"
                };
                return Err(invalid(
                    format!("routes[{i}].destination"),
                    format!("{what} for {dest} (routes[{j}] is one); one next hop per prefix"),
                ));
            }
            if self.interface_for(route.via).is_none() {
                return Err(invalid(
                    format!("routes[{i}].via"),
                    format!("{} is not in any interface's subnet", route.via),
                ));
            }
        }
        for i in 0..self.ipv6_routes.len() {
            self.ipv6_route_port(i)?;
        }
        self.validate_stateful()?;
        twins::validate(self)?;
        self.validate_uplinks()?;
        if self.qos.enabled && (self.qos.uplink_mbps == 0 || self.qos.downlink_mbps == 0) {
            return Err(invalid(
                "qos",
                "uplink_mbps and downlink_mbps must be positive",
            ));
        }
        if let Some(i) = self
            .qos
            .priority
            .iter()
            .position(|r| r.dscp.is_some_and(|d| d > 63))
        {
            return Err(invalid(format!("qos.priority[{i}].dscp"), "DSCP is 0..=63"));
        }
        for (i, rule) in self.qos.priority.iter().enumerate() {
            let matches_something = rule.host.is_some()
                || rule.mac.is_some()
                || rule.dscp.is_some()
                || rule.protocol.is_some()
                || rule.ports.is_some();
            if !matches_something {
                return Err(invalid(
                    format!("qos.priority[{i}]"),
                    "matches every packet (give host, mac, dscp, protocol or ports): all \
                     traffic priority is no priority",
                ));
            }
            if let Some(mac) = &rule.mac {
                if mac.parse::<pipeline::wire::EthernetAddress>().is_err() {
                    return Err(invalid(
                        format!("qos.priority[{i}].mac"),
                        format!("{mac:?} is not a MAC address (aa:bb:cc:dd:ee:ff)"),
                    ));
                }
            }
        }
        for (i, device) in self.parental_control.devices.iter().enumerate() {
            if device.addresses.is_empty() && device.macs.is_empty() {
                return Err(invalid(
                    format!("parental_control.devices[{i}]"),
                    format!("{:?} names no device: give addresses or macs", device.name),
                ));
            }
        }
        if self.traffic_meter.top_hosts > 100 {
            return Err(invalid(
                "traffic_meter.top_hosts",
                "at most 100: each host is a metric series",
            ));
        }
        self.validate_mempool_size()?;
        if self.neighbors.reachable_secs == 0 || self.neighbors.reachable_secs > MAX_REACHABLE_SECS
        {
            return Err(invalid(
                "neighbors.reachable_secs",
                format!("must be 1..={MAX_REACHABLE_SECS} (a day)"),
            ));
        }
        if self.neighbors.capacity == 0 || self.neighbors.pending_per_neighbor == 0 {
            return Err(invalid(
                "neighbors",
                "capacity and pending_per_neighbor must be positive",
            ));
        }
        if self.neighbors.pending_total == 0
            || self.neighbors.pending_total > self.mempool.mbufs as usize / 4
        {
            return Err(invalid(
                "neighbors.pending_total",
                format!(
                    "must be positive and at most a quarter of mempool.mbufs ({}), so packets \
                     held for unresolved next hops cannot starve the ports of buffers",
                    self.mempool.mbufs / 4
                ),
            ));
        }
        self.validate_state()?;
        self.validate_ha()?;
        self.validate_port_mapping()?;
        self.validate_nat_log()?;
        self.validate_firewall_log()?;
        if self.neighbors.locktime_ms >= self.neighbors.reachable_secs.saturating_mul(1000) {
            return Err(invalid(
                "neighbors.locktime_ms",
                "must be shorter than neighbors.reachable_secs, or no neighbour could ever \
                 change its MAC",
            ));
        }
        // A bucket of 0 tokens never passes one: a rate with no burst would silence ICMP
        // without saying so.
        for (rate, burst, field) in [
            (self.icmp.errors_per_sec, self.icmp.burst, "icmp.burst"),
            (
                self.icmp.echo_per_sec,
                self.icmp.echo_burst,
                "icmp.echo_burst",
            ),
        ] {
            if rate > 0 && burst == 0 {
                return Err(invalid(
                    field,
                    "must be positive while its rate is (a rate of 0 turns it off)",
                ));
            }
        }
        Ok(())
    }

    /// The state directory must be absolute (the service's working directory is no place
    /// for state) and, where it exists, a directory.
    /// The EAL's memory options come from `memory_mb`, `socket_memory_mb` and `hugepages`
    /// only: the same options again in `extra_args` would make DPDK refuse to start (`-m`
    /// beside `--socket-mem`) or quietly fight the fields.
    pub(crate) fn validate_eal(&self) -> Result<(), ConfigError> {
        const OWNED: &[(&str, &str)] = &[
            ("-m", "eal.memory_mb"),
            ("--socket-mem", "eal.socket_memory_mb"),
            ("--no-huge", "eal.hugepages = \"off\""),
        ];
        for (i, arg) in self.eal.extra_args.iter().enumerate() {
            let owner = OWNED
                .iter()
                .find(|(name, _)| crate::dpdk::gives_option(arg, name));
            if let Some((name, field)) = owner {
                return Err(invalid(
                    format!("eal.extra_args[{i}]"),
                    format!("{arg:?}: set {field} instead of passing {name} to the EAL"),
                ));
            }
        }
        check_log_level(&self.eal.log_level).map_err(|reason| invalid("eal.log_level", reason))?;
        if self.eal.pdump && self.eal.hugepages == HugepageMode::Off {
            return Err(invalid(
                "eal.pdump",
                "needs hugepages (eal.hugepages = \"auto\" or \"required\"): the capture tools \
                 are secondary processes, which map the gateway's memory from its hugepage files",
            ));
        }
        let per_node = &self.eal.socket_memory_mb;
        if !per_node.is_empty() && per_node.iter().all(|&mb| mb == 0) {
            return Err(invalid(
                "eal.socket_memory_mb",
                "gives no node any memory; leave it empty to use eal.memory_mb",
            ));
        }
        Ok(())
    }

    pub(crate) fn validate_firewall_log(&self) -> Result<(), ConfigError> {
        let log = &self.firewall.log;
        validate_syslog_sender(
            "firewall.log",
            log.facility,
            log.queue_events,
            &log.syslog_unix,
        )?;
        if log.per_sec == 0 || log.burst == 0 {
            let field = if log.per_sec == 0 { "per_sec" } else { "burst" };
            return Err(invalid(
                format!("firewall.log.{field}"),
                "must be positive (to log nothing, leave log = true off the rules)",
            ));
        }
        if let Err((label, outside)) = ReasonSet::from_labels(log.drops.iter().map(String::as_str))
        {
            let i = log.drops.iter().position(|drop| drop == label).unwrap_or(0);
            return Err(invalid(
                format!("firewall.log.drops[{i}]"),
                super::drop_label_refusal(label, outside),
            ));
        }
        // The drops share each worker's queue with the rules' decisions: a rate above what
        // the queue holds could never be met.
        if log.drops_per_sec as usize > log.queue_events {
            return Err(invalid(
                "firewall.log.drops_per_sec",
                format!(
                    "at most firewall.log.queue_events ({}): each worker's queue, shared with \
                     the rules' decisions, holds that many between two sends (every 100 ms)",
                    log.queue_events
                ),
            ));
        }
        if log.drops_sample == 0 || log.drops_per_sec == 0 {
            let field = if log.drops_sample == 0 {
                "drops_sample"
            } else {
                "drops_per_sec"
            };
            return Err(invalid(
                format!("firewall.log.{field}"),
                "must be positive (to log no drops, leave firewall.log.drops empty)",
            ));
        }
        if let Some(path) = &log.json_file {
            if !path.is_absolute() {
                return Err(invalid(
                    "firewall.log.json_file",
                    "must be an absolute path (the gateway may run from any directory)",
                ));
            }
        }
        let logged_rule = self.firewall.rules.iter().position(|rule| rule.log);
        let logged_forward = self.nat.port_forwards.iter().position(|fwd| fwd.log);
        let logged_pair = self.firewall.policy.iter().position(|pair| pair.log);
        let logged_drops = !log.drops.is_empty();
        let field = match (logged_rule, logged_forward, logged_pair, logged_drops) {
            (Some(i), _, _, _) => format!("firewall.rules[{i}].log"),
            (None, Some(i), _, _) => format!("nat.port_forwards[{i}].log"),
            (None, None, Some(i), _) => format!("firewall.policy[{i}].log"),
            (None, None, None, true) => "firewall.log.drops".to_string(),
            (None, None, None, false) => return Ok(()),
        };
        if !log.enabled() {
            return Err(invalid(
                field,
                "no [firewall.log] destination: set firewall.log.syslog_udp, syslog_unix or json_file",
            ));
        }
        Ok(())
    }

    pub(crate) fn validate_nat_log(&self) -> Result<(), ConfigError> {
        let log = &self.nat.log;
        validate_syslog_sender("nat.log", log.facility, log.queue_events, &log.syslog_unix)
    }

    pub(crate) fn validate_state(&self) -> Result<(), ConfigError> {
        let directory = &self.state.directory;
        if !directory.is_absolute() {
            return Err(invalid(
                "state.directory",
                format!("{} is not an absolute path", directory.display()),
            ));
        }
        if directory.exists() && !directory.is_dir() {
            return Err(invalid(
                "state.directory",
                format!("{} exists and is not a directory", directory.display()),
            ));
        }
        Ok(())
    }

    /// Every RX descriptor holds a buffer from start, and every lcore's cache may hold
    /// `mempool.cache` more: a pool smaller than that cannot even start the ports. TX
    /// descriptors, rings and held packets want more (DPDK's l3fwd sizes for all of them).
    pub(crate) fn validate_mempool_size(&self) -> Result<(), ConfigError> {
        use crate::config::twins::TWIN_DESCRIPTORS;
        let workers = self.workers.lcores.len() as u64;
        // Rings belong to ports: a VLAN subinterface has none of its own, and a bond's every
        // member has a ring per queue.
        let rings = |iface: &crate::config::InterfaceConfig| -> u64 {
            match (&iface.bond, iface.is_vlan()) {
                (_, true) => 0,
                (Some(bond), false) => bond.members.len() as u64 * workers,
                (None, false) => workers,
            }
        };
        // A kernel twin is a tap port of one queue pair, on the same pool.
        let twins = crate::config::twins::twin_names(self)
            .iter()
            .filter(|twin| twin.is_some())
            .count() as u64;
        let rx: u64 = self
            .interfaces
            .iter()
            .map(|iface| u64::from(iface.rx_descriptors) * rings(iface))
            .sum::<u64>()
            + twins * u64::from(TWIN_DESCRIPTORS);
        let tx: u64 = self
            .interfaces
            .iter()
            .map(|iface| u64::from(iface.tx_descriptors) * rings(iface))
            .sum();
        let caches = u64::from(self.mempool.cache) * (workers + 1);
        let needed = rx + caches;
        if u64::from(self.mempool.mbufs) < needed {
            return Err(invalid(
                "mempool.mbufs",
                format!(
                    "{} cannot fill the RX descriptors ({rx}: rx_descriptors x {workers} workers \
                     per port, and per member of a bond; {TWIN_DESCRIPTORS} per kernel twin) and the lcore \
                     caches ({caches}); at least {needed} are needed, {} with the TX \
                     descriptors",
                    self.mempool.mbufs,
                    needed + tx
                ),
            ));
        }
        Ok(())
    }
}

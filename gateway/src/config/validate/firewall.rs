//! The checks of `[firewall]` and `[nat]`: pinholes, port blocks, and the stateful settings.

use super::*;

impl GatewayConfig {
    /// `firewall.pinholes`: an interface with IPv6 to arrive on, a host address that can be
    /// one (global unicast, not the gateway's own) in an interface's IPv6 prefix, and a
    /// source prefix without host bits.
    pub(crate) fn validate_pinholes(&self) -> Result<(), ConfigError> {
        use pipeline::pipeline::local::ipv6::prefix_of;
        for (i, pinhole) in self.firewall.pinholes.iter().enumerate() {
            let field = |name: &str| format!("firewall.pinholes[{i}].{name}");
            let Some(port) = self
                .interfaces
                .iter()
                .position(|iface| iface.name == pinhole.interface)
            else {
                return Err(invalid(
                    field("interface"),
                    format!("no interface named {:?}", pinhole.interface),
                ));
            };
            if self.interfaces[port].ipv6.is_none() {
                return Err(invalid(
                    field("interface"),
                    format!("{:?} has no [interfaces.ipv6] table", pinhole.interface),
                ));
            }
            let to = pinhole.to;
            if to.is_multicast()
                || to.is_unspecified()
                || to.is_loopback()
                || pipeline::wire::ipv6::is_link_local(to)
            {
                return Err(invalid(
                    field("to"),
                    format!("{to} is not a global unicast address"),
                ));
            }
            let own_prefixes = self
                .interfaces
                .iter()
                .flat_map(|iface| iface.ipv6.iter().flat_map(|v6| &v6.addresses));
            let mut on_link = false;
            for own in own_prefixes {
                if own.addr == to {
                    return Err(invalid(
                        field("to"),
                        format!("{to} is the gateway's own address"),
                    ));
                }
                on_link |= prefix_of(own.addr, own.len) == prefix_of(to, own.len);
            }
            if !on_link {
                return Err(invalid(
                    field("to"),
                    format!("{to} is in no interface's IPv6 prefix"),
                ));
            }
            if let Some(source) = pinhole.source {
                if prefix_of(source.addr, source.len) != source.addr {
                    return Err(invalid(
                        field("source"),
                        format!(
                            "{source} has host bits set (the prefix is {}/{})",
                            prefix_of(source.addr, source.len),
                            source.len
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Port blocks (`nat.port_block_size`) must be whole words of the pool's bitmaps, few
    /// enough per host for its table, and need every worker to own one port class.
    pub(crate) fn validate_port_blocks(&self) -> Result<(), ConfigError> {
        use pipeline::state::nat::blocks::{blocks_per_host, BLOCK_ALIGN, MAX_BLOCKS_PER_HOST};
        let size = self.nat.port_block_size;
        if size == 0 {
            return Ok(());
        }
        if !size.is_multiple_of(BLOCK_ALIGN) || size > 32768 {
            return Err(invalid(
                "nat.port_block_size",
                format!("must be 0 (off) or a multiple of {BLOCK_ALIGN} up to 32768, not {size}"),
            ));
        }
        let blocks = blocks_per_host(self.nat.host_ports, size);
        if blocks > MAX_BLOCKS_PER_HOST {
            return Err(invalid(
                "nat.port_block_size",
                format!(
                    "nat.host_ports = {} would take {blocks} blocks of {size} per host, at most {MAX_BLOCKS_PER_HOST}: raise the block size or lower host_ports",
                    self.nat.host_ports
                ),
            ));
        }
        let workers = self.workers.lcores.len();
        if !workers.is_power_of_two() {
            return Err(invalid(
                "nat.port_block_size",
                format!(
                    "needs a power-of-two number of workers (workers.lcores has {workers}), so that each owns one port class and a block's ports step evenly"
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn validate_stateful(&self) -> Result<(), ConfigError> {
        use pipeline::state::conntrack::MAX_CAPACITY;
        if !(1..=MAX_CAPACITY).contains(&self.conntrack.capacity) {
            return Err(invalid(
                "conntrack.capacity",
                format!(
                    "{} is not 1 to {MAX_CAPACITY} (2^28) flows per worker",
                    self.conntrack.capacity
                ),
            ));
        }
        let conntrack = &self.conntrack;
        if conntrack.host_flows == 0 {
            return Err(invalid("conntrack.host_flows", "must be positive"));
        }
        if conntrack.host_half_open == 0 {
            return Err(invalid("conntrack.host_half_open", "must be positive"));
        }
        if conntrack
            .half_open
            .is_some_and(|half_open| half_open == 0 || half_open > conntrack.capacity)
        {
            return Err(invalid(
                "conntrack.half_open",
                "must be positive and at most conntrack.capacity",
            ));
        }
        if conntrack.hosts == 0 || conntrack.hosts > pipeline::state::conntrack::MAX_CAPACITY {
            return Err(invalid(
                "conntrack.hosts",
                format!("must be 1..={}", pipeline::state::conntrack::MAX_CAPACITY),
            ));
        }
        if !(32..=128).contains(&conntrack.host_prefix6) {
            return Err(invalid(
                "conntrack.host_prefix6",
                format!(
                    "{} is not a prefix length 32..=128 (an IPv6 host is its address's first \
                     that many bits; 64, a LAN's subnet, by default)",
                    conntrack.host_prefix6
                ),
            ));
        }
        if self.nat.host_ports == 0 {
            return Err(invalid("nat.host_ports", "must be positive"));
        }
        // Checked here, not only where a pool is built: a pool built later (a DHCP lease, a
        // PPPoE session) would otherwise fail with no one to tell, and the worker translate
        // nothing.
        use pipeline::state::nat::ports::MAX_BINDINGS;
        if !(1..=MAX_BINDINGS).contains(&self.nat.binding_capacity) {
            return Err(invalid(
                "nat.binding_capacity",
                format!(
                    "{} is not 1 to {MAX_BINDINGS} (2^24) bindings per worker",
                    self.nat.binding_capacity
                ),
            ));
        }
        self.validate_port_blocks()?;
        if self.conntrack.tcp_established_secs < 7440 {
            tracing::warn!("conntrack.tcp_established_secs is below RFC 5382's 2 h 4 min");
        }
        if self.conntrack.udp_secs < 120 {
            tracing::warn!("conntrack.udp_secs is below RFC 4787's 2 min");
        }
        let names: Vec<&str> = self.interfaces.iter().map(|i| i.name.as_str()).collect();
        for (i, name) in self.nat.masquerade.iter().enumerate() {
            if !names.contains(&name.as_str()) {
                return Err(invalid(
                    format!("nat.masquerade[{i}]"),
                    format!("no interface named {name:?}"),
                ));
            }
            if self.nat.masquerade[..i].contains(name) {
                return Err(invalid(
                    format!("nat.masquerade[{i}]"),
                    format!("{name:?} is listed twice"),
                ));
            }
        }
        let range = self.nat.port_range;
        if range.first < 1024 || range.last - range.first < 255 {
            return Err(invalid(
                "nat.port_range",
                "must start at 1024 or above and hold at least 256 ports",
            ));
        }
        for (i, forward) in self.nat.port_forwards.iter().enumerate() {
            let field = |name: &str| format!("nat.port_forwards[{i}].{name}");
            if !names.contains(&forward.interface.as_str()) {
                return Err(invalid(
                    field("interface"),
                    format!("no interface named {:?}", forward.interface),
                ));
            }
            let Some(target_iface) = self.interface_for(forward.to) else {
                return Err(invalid(
                    field("to"),
                    format!("{} is not on a connected subnet", forward.to),
                ));
            };
            let Some(subnet) = &self.interfaces[target_iface].address.cidr() else {
                continue;
            };
            if forward.to == subnet.addr
                || Some(forward.to) == self.interfaces[target_iface].virtual_address
            {
                return Err(invalid(
                    field("to"),
                    format!("{} is the gateway's own address", forward.to),
                ));
            }
            let host_bits = u32::from(forward.to) & !subnet.mask();
            if host_bits == 0 || host_bits == !subnet.mask() {
                return Err(invalid(
                    field("to"),
                    format!(
                        "{} is the network or broadcast address of {subnet}",
                        forward.to
                    ),
                ));
            }
            let span = forward.port.last - forward.port.first;
            if forward.to_port == Some(0) {
                return Err(invalid(
                    field("to_port"),
                    "0 is no port; omit to_port to forward to the same port",
                ));
            }
            if forward
                .to_port
                .is_some_and(|to| to.checked_add(span).is_none())
            {
                return Err(invalid(field("to_port"), "the range runs past port 65535"));
            }
            // Two forwards of one port: the first would win, silently.
            if let Some((j, earlier)) =
                self.nat.port_forwards[..i]
                    .iter()
                    .enumerate()
                    .find(|(_, earlier)| {
                        earlier.interface == forward.interface
                            && earlier.protocol == forward.protocol
                            && earlier.port.first <= forward.port.last
                            && forward.port.first <= earlier.port.last
                    })
            {
                return Err(invalid(
                    field("port"),
                    format!(
                        "{}-{} overlaps nat.port_forwards[{j}] ({}-{}) on the same interface and protocol",
                        forward.port.first, forward.port.last, earlier.port.first, earlier.port.last
                    ),
                ));
            }
            if forward.port.first <= range.last && forward.port.last >= range.first {
                tracing::debug!(
                    "nat.port_forwards[{i}]: ports {}-{} are reserved out of the NAT port range",
                    forward.port.first,
                    forward.port.last
                );
            }
        }
        self.validate_pinholes()?;
        let zones = self.zone_names();
        let known_zone = |zone: &str| zone == "local" || zones.iter().any(|z| z == zone);
        for (i, iface) in self.interfaces.iter().enumerate() {
            if iface.zone.as_deref() == Some("local") {
                return Err(invalid(
                    format!("interfaces[{i}].zone"),
                    "\"local\" is the gateway itself, not a zone an interface can join",
                ));
            }
            // Without a zone an interface's name is its zone: one named "local" would put its
            // hosts in the gateway's own place in every policy and rule.
            if iface.zone.is_none() && iface.name == "local" {
                return Err(invalid(
                    format!("interfaces[{i}].name"),
                    "\"local\" is the gateway itself: without a zone the name is the zone; \
                     give the interface a zone, or another name",
                ));
            }
        }
        for (i, policy) in self.firewall.policy.iter().enumerate() {
            for (what, zone) in [("from", &policy.from), ("to", &policy.to)] {
                if !known_zone(zone) {
                    return Err(invalid(
                        format!("firewall.policy[{i}].{what}"),
                        format!("no zone named {zone:?}"),
                    ));
                }
            }
            // The same pair twice: one of the two would be ignored, whichever the reader expects.
            if let Some(j) = self.firewall.policy[..i]
                .iter()
                .position(|earlier| earlier.from == policy.from && earlier.to == policy.to)
            {
                return Err(invalid(
                    format!("firewall.policy[{i}]"),
                    format!(
                        "{} -> {} is already firewall.policy[{j}]: one policy per zone pair",
                        policy.from, policy.to
                    ),
                ));
            }
        }
        for (i, rule) in self.firewall.rules.iter().enumerate() {
            if rule.name == OTHER_RULES {
                return Err(invalid(
                    format!("firewall.rules[{i}].name"),
                    format!("{OTHER_RULES:?} is the metrics' label for the rules past metrics.rule_series"),
                ));
            }
            for (what, zone) in [("from", &rule.from), ("to", &rule.to)] {
                if let Some(zone) = zone.as_deref().filter(|zone| !known_zone(zone)) {
                    return Err(invalid(
                        format!("firewall.rules[{i}].{what}"),
                        format!("no zone named {zone:?}"),
                    ));
                }
            }
            let ports = rule.source_ports.is_some() || rule.destination_ports.is_some();
            if ports && !matches!(rule.protocol, Some(RuleProtocol::Tcp | RuleProtocol::Udp)) {
                return Err(invalid(
                    format!("firewall.rules[{i}]"),
                    "ports need protocol = \"tcp\" or \"udp\"",
                ));
            }
            if rule.icmp_type.is_some() && rule.protocol != Some(RuleProtocol::Icmp) {
                return Err(invalid(
                    format!("firewall.rules[{i}].icmp_type"),
                    "needs protocol = \"icmp\"",
                ));
            }
            for (what, prefix) in [("source", &rule.source), ("destination", &rule.destination)] {
                let field = format!("firewall.rules[{i}].{what}");
                match prefix {
                    Some(RulePrefix::V4(prefix)) => no_host_bits(field, prefix)?,
                    Some(RulePrefix::V6(prefix)) => no_host_bits6(field, prefix)?,
                    None => {}
                }
            }
            if let (Some(RulePrefix::V4(_)), Some(RulePrefix::V6(_)))
            | (Some(RulePrefix::V6(_)), Some(RulePrefix::V4(_))) =
                (rule.source, rule.destination)
            {
                return Err(invalid(
                    format!("firewall.rules[{i}].destination"),
                    "is of another family than source: no flow has both",
                ));
            }
            let ipv6 = matches!(rule.source.or(rule.destination), Some(RulePrefix::V6(_)));
            let local = [&rule.from, &rule.to]
                .into_iter()
                .position(|zone| zone.as_deref() == Some("local"));
            if let (true, Some(which)) = (ipv6, local) {
                return Err(invalid(
                    format!("firewall.rules[{i}].{}", ["from", "to"][which]),
                    "\"local\" with an IPv6 prefix: rules do not filter IPv6 for the gateway \
                     itself yet",
                ));
            }
            if ipv6 && rule.protocol == Some(RuleProtocol::Icmp) {
                return Err(invalid(
                    format!("firewall.rules[{i}].protocol"),
                    "\"icmp\" is ICMP for IPv4, which no flow of an IPv6 prefix carries",
                ));
            }
        }
        Ok(())
    }
}

//! The checks of `[[interfaces]]`: IPv6, PPPoE, VLANs, and the port IPv6 routes leave by.

use super::*;

impl GatewayConfig {
    /// The interface `ipv6_routes[i]` leaves by, with the route checked: no host bits, one
    /// route per prefix, a unicast next hop on an interface with IPv6 (named by `interface`
    /// for a link-local one, else the one whose prefix holds it).
    pub fn ipv6_route_port(&self, i: usize) -> Result<u16, ConfigError> {
        use pipeline::pipeline::local::ipv6::prefix_of;
        let route = &self.ipv6_routes[i];
        let field = |name: &str| format!("ipv6_routes[{i}].{name}");
        let dest = route.destination;
        if prefix_of(dest.addr, dest.len) != dest.addr {
            return Err(invalid(
                field("destination"),
                format!(
                    "{dest} has host bits set (the prefix is {}/{})",
                    prefix_of(dest.addr, dest.len),
                    dest.len
                ),
            ));
        }
        if let Some(j) = self.ipv6_routes[..i].iter().position(|other| {
            (other.destination.addr, other.destination.len) == (dest.addr, dest.len)
        }) {
            return Err(invalid(
                field("destination"),
                format!(
                    "a second route for {dest} (ipv6_routes[{j}] is one); one next hop per prefix"
                ),
            ));
        }
        let via = route.via;
        if via.is_multicast() || via.is_unspecified() || via.is_loopback() {
            return Err(invalid(
                field("via"),
                format!("{via} is not a unicast address"),
            ));
        }
        let link_local = pipeline::wire::ipv6::is_link_local(via);
        let with_ipv6 = |iface: &InterfaceConfig| iface.ipv6.is_some();
        let port = match &route.interface {
            Some(name) => {
                let Some(port) = self.interfaces.iter().position(|iface| &iface.name == name) else {
                    return Err(invalid(field("interface"), format!("{name:?} names no interface")));
                };
                if !with_ipv6(&self.interfaces[port]) {
                    return Err(invalid(
                        field("interface"),
                        format!("{name:?} has no [interfaces.ipv6] table"),
                    ));
                }
                port
            }
            None if link_local => {
                return Err(invalid(
                    field("interface"),
                    format!("missing: the link-local next hop {via} is on which interface?"),
                ))
            }
            None => match self.interfaces.iter().position(|iface| {
                iface.ipv6.iter().flat_map(|v6| &v6.addresses).any(|own| {
                    prefix_of(own.addr, own.len) == prefix_of(via, own.len)
                })
            }) {
                Some(port) => port,
                None => {
                    return Err(invalid(
                        field("via"),
                        format!("{via} is in no interface's IPv6 prefix (a link-local next hop needs interface)"),
                    ))
                }
            },
        };
        Ok(port as u16)
    }
}

/// Interface `i`'s `[interfaces.ipv6]`: addresses a host could have (not multicast, loopback,
/// unspecified or link-local, which is automatic), prefix lengths 1..=128, no prefix shared
/// with an earlier interface, and what the advertisements can carry.
pub(crate) fn validate_ipv6(
    i: usize,
    ipv6: &Ipv6InterfaceConfig,
    earlier: &[InterfaceConfig],
) -> Result<(), ConfigError> {
    use pipeline::pipeline::local::ipv6::{
        prefix_of, MAX_ADVERTISED_DNS_SERVERS, MAX_ADVERTISED_PREFIXES,
    };
    let field = |name: &str| format!("interfaces[{i}].ipv6.{name}");
    if ipv6.addresses.len() > MAX_ADVERTISED_PREFIXES {
        return Err(invalid(
            field("addresses"),
            format!("at most {MAX_ADVERTISED_PREFIXES} addresses"),
        ));
    }
    for (k, cidr) in ipv6.addresses.iter().enumerate() {
        let addr = cidr.addr;
        let link_local = pipeline::wire::ipv6::is_link_local(addr);
        if addr.is_multicast() || addr.is_loopback() || addr.is_unspecified() || link_local {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                format!(
                    "{cidr} is not a unicast global or unique-local address (the link-local \
                     one is automatic)"
                ),
            ));
        }
        if cidr.len == 0 {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                "prefix length must be 1..=128",
            ));
        }
        let network = prefix_of(addr, cidr.len);
        let clash = earlier.iter().enumerate().find(|(_, other)| {
            other
                .ipv6
                .iter()
                .flat_map(|v6| &v6.addresses)
                .any(|theirs| {
                    let len = theirs.len.min(cidr.len);
                    prefix_of(theirs.addr, len) == prefix_of(network, len)
                })
        });
        if let Some((j, other)) = clash {
            return Err(invalid(
                format!("interfaces[{i}].ipv6.addresses[{k}]"),
                format!(
                    "{cidr} overlaps a prefix of interfaces[{j}] ({}): a connected prefix must \
                     belong to one interface",
                    other.name
                ),
            ));
        }
    }
    if ipv6.dns_servers.len() > MAX_ADVERTISED_DNS_SERVERS {
        return Err(invalid(
            field("dns_servers"),
            format!("at most {MAX_ADVERTISED_DNS_SERVERS} servers"),
        ));
    }
    if let Some(bad) = ipv6
        .dns_servers
        .iter()
        .find(|server| server.is_multicast() || server.is_unspecified())
    {
        return Err(invalid(
            field("dns_servers"),
            format!("{bad} is not a unicast address"),
        ));
    }
    if !(4..=1800).contains(&ipv6.ra_interval_secs) {
        return Err(invalid(
            field("ra_interval_secs"),
            format!(
                "{} is outside 4..=1800 (RFC 4861's MaxRtrAdvInterval)",
                ipv6.ra_interval_secs
            ),
        ));
    }
    if ipv6.autoconfigure && ipv6.delegated_prefix {
        return Err(invalid(
            field("delegated_prefix"),
            "not with autoconfigure: an interface is configured by the ISP's routers or \
             addressed from the delegated prefix, not both",
        ));
    }
    if ipv6.autoconfigure && ipv6.router_advertisements {
        return Err(invalid(
            field("router_advertisements"),
            "not with autoconfigure: the ISP's routers advertise that link",
        ));
    }
    if ipv6.router_advertisements && ipv6.addresses.is_empty() && !ipv6.delegated_prefix {
        return Err(invalid(
            field("router_advertisements"),
            "needs addresses (or delegated_prefix): there would be no prefix to announce",
        ));
    }
    Ok(())
}

impl GatewayConfig {
    /// `address = "pppoe"` and the `pppoe` table go together. The session's frames carry 8
    /// bytes more than the datagram: an MTU above 1492 needs the port (or a VLAN's parent) to
    /// carry them (`validate_vlan`, `mempool.data_room`) and the AC to grant it (RFC 4638).
    pub(crate) fn validate_pppoe(&self, i: usize) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = |name: &str| format!("interfaces[{i}].{name}");
        match (&iface.pppoe, iface.address.is_pppoe()) {
            (None, false) => return Ok(()),
            (None, true) => {
                return Err(invalid(
                    field("pppoe"),
                    "missing: address = \"pppoe\" needs a [interfaces.pppoe] table with username and password",
                ))
            }
            (Some(_), false) => {
                return Err(invalid(
                    field("pppoe"),
                    format!(
                        "is set but the address is {}: write address = \"pppoe\" to run a PPPoE session",
                        iface.address
                    ),
                ))
            }
            (Some(_), true) => {}
        }
        let pppoe = iface.pppoe.as_ref().expect("matched above");
        if pppoe.username.is_empty() {
            return Err(invalid(field("pppoe.username"), "must not be empty"));
        }
        if pppoe.lcp_echo_interval_secs > 0 && pppoe.lcp_echo_failures == 0 {
            return Err(invalid(
                field("pppoe.lcp_echo_failures"),
                "must be at least 1 while lcp_echo_interval_secs is not 0",
            ));
        }
        if iface
            .ipv6
            .as_ref()
            .is_some_and(|ipv6| ipv6.router_advertisements)
        {
            return Err(invalid(
                field("ipv6.router_advertisements"),
                "a PPPoE session's far end is the ISP's router, which takes no advertisements from us",
            ));
        }
        if iface
            .ipv6
            .as_ref()
            .is_some_and(|ipv6| ipv6.delegated_prefix)
        {
            return Err(invalid(
                field("ipv6.delegated_prefix"),
                "a PPPoE interface is an uplink: the prefix is delegated over it to a LAN, not to it (write autoconfigure = true here, delegated_prefix = true on the LAN)",
            ));
        }
        // The session lives in the gateway; a twin serves only the IPv6 the ISP configures
        // over it (its Router Advertisements, DHCPv6 and a delegated prefix, by dhcpcd).
        let autoconfigured = iface.ipv6.as_ref().is_some_and(|ipv6| ipv6.autoconfigure);
        if iface.kernel_twin == Some(true) && !autoconfigured {
            return Err(invalid(
                field("kernel_twin"),
                "a PPPoE interface's twin carries only the IPv6 the ISP configures over the session: set [interfaces.ipv6] autoconfigure = true, or omit kernel_twin",
            ));
        }
        if pppoe.default_route && self.routes.iter().any(|route| route.destination.len == 0) {
            return Err(invalid(
                field("pppoe.default_route"),
                "the session would route 0.0.0.0/0, and [[routes]] has a default route already: remove one, or set default_route = false",
            ));
        }
        if let Some(j) = self.interfaces[..i].iter().position(|other| {
            other.pppoe.as_ref().is_some_and(|p| p.default_route) && pppoe.default_route
        }) {
            return Err(invalid(
                field("pppoe.default_route"),
                format!("interfaces[{j}] routes 0.0.0.0/0 by its PPPoE session already"),
            ));
        }
        Ok(())
    }

    /// Interface `i`'s `virtual_address`: a host of its own, static subnet other than its
    /// address, on an interface with a twin (where keepalived holds it).
    pub(crate) fn validate_virtual_address(
        &self,
        i: usize,
        address: Ipv4Addr,
    ) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = format!("interfaces[{i}].virtual_address");
        let Some(cidr) = iface.address.cidr() else {
            return Err(invalid(
                field,
                format!(
                    "needs a static address (this one is {:?}): both boxes of a pair must know the subnet",
                    iface.address
                ),
            ));
        };
        let host_bits = u32::from(address) & !cidr.mask();
        if u32::from(address) & cidr.mask() != u32::from(cidr.addr) & cidr.mask() {
            return Err(invalid(field, format!("{address} is outside {cidr}")));
        }
        if address == cidr.addr || host_bits == 0 || host_bits == !cidr.mask() {
            return Err(invalid(
                field,
                format!(
                    "{address} must be a host of {cidr} other than the interface's own address"
                ),
            ));
        }
        if crate::config::twins::twin_names(self)[i].is_none() {
            return Err(invalid(
                field,
                "needs a kernel twin (kernel_twin = true), where keepalived holds the address",
            ));
        }
        Ok(())
    }

    /// Interface `i`'s `nat_address`: a unicast address on none of the gateway's subnets
    /// (routed to the box, never on a link of its), on a masquerading interface, alone.
    pub(crate) fn validate_nat_address(
        &self,
        i: usize,
        address: Ipv4Addr,
    ) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = format!("interfaces[{i}].nat_address");
        if !self.nat.masquerade.contains(&iface.name) {
            return Err(invalid(
                field,
                format!(
                    "{:?} is not in nat.masquerade: nothing would be translated to it",
                    iface.name
                ),
            ));
        }
        if iface.virtual_address.is_some() {
            return Err(invalid(
                field,
                "not with virtual_address (an HA pair masquerades to its virtual address)",
            ));
        }
        if address.is_unspecified()
            || address.is_loopback()
            || address.is_multicast()
            || address.is_broadcast()
            || address.octets()[0] == 0
        {
            return Err(invalid(
                field,
                format!("{address} is not a unicast host address"),
            ));
        }
        let on_link = self.interfaces.iter().enumerate().find(|(_, other)| {
            other.address.cidr().is_some_and(|cidr| {
                u32::from(address) & cidr.mask() == u32::from(cidr.addr) & cidr.mask()
            })
        });
        if let Some((j, other)) = on_link {
            return Err(invalid(
                field,
                format!(
                    "{address} is on interfaces[{j}]'s subnet ({}): a NAT address is routed to the gateway, on none of its links",
                    other.address
                ),
            ));
        }
        if let Some(j) = self.interfaces[..i]
            .iter()
            .position(|other| other.nat_address == Some(address))
        {
            return Err(invalid(
                field,
                format!("{address} is interfaces[{j}]'s too"),
            ));
        }
        Ok(())
    }

    /// The index of the interface whose connected subnet holds `ip`.
    /// Interface `i`, a VLAN subinterface: its parent is a port or bond interface, its id
    /// is in range and no other subinterface of that parent has it, its MTU fits the
    /// parent's, and it sets nothing that belongs to the port.
    pub(crate) fn validate_vlan(&self, i: usize) -> Result<(), ConfigError> {
        let iface = &self.interfaces[i];
        let field = |name: &str| format!("interfaces[{i}].{name}");
        let (Some(parent), Some(vlan)) = (&iface.parent, iface.vlan) else {
            let (missing, given) = if iface.parent.is_none() {
                ("parent", "vlan")
            } else {
                ("vlan", "parent")
            };
            return Err(invalid(
                field(given),
                format!("a VLAN subinterface needs both parent and vlan; {missing} is missing"),
            ));
        };
        if !(1..=MAX_VLAN_ID).contains(&vlan) {
            return Err(invalid(
                field("vlan"),
                format!("{vlan} is not a VLAN id (1 to {MAX_VLAN_ID})"),
            ));
        }
        let Some(port) = self
            .interfaces
            .iter()
            .find(|other| &other.name == parent && !other.is_vlan())
        else {
            return Err(invalid(
                field("parent"),
                format!(
                    "{parent:?} names no port or bond interface (VLANs of VLANs are not supported)"
                ),
            ));
        };
        if let Some(j) = self.interfaces[..i]
            .iter()
            .position(|other| other.parent.as_ref() == Some(parent) && other.vlan == Some(vlan))
        {
            return Err(invalid(
                field("vlan"),
                format!("{parent} already has VLAN {vlan} (interfaces[{j}])"),
            ));
        }
        // A PPPoE VLAN's frames carry its datagrams and 8 bytes more.
        if iface.port_mtu() > port.port_mtu() {
            let pppoe = if iface.address.is_pppoe() {
                format!(" (with PPPoE's 8 bytes, {})", iface.port_mtu())
            } else {
                String::new()
            };
            return Err(invalid(
                field("mtu"),
                format!(
                    "{}{pppoe} is above its parent's ({}): raise {}'s mtu",
                    iface.mtu(),
                    port.port_mtu(),
                    port.name
                ),
            ));
        }
        let port_settings = [
            ("device", !iface.device.is_empty()),
            ("bond", iface.bond.is_some()),
            ("rss_key", iface.rss_key.is_some()),
            ("promiscuous", iface.promiscuous),
            ("vlan_offload", iface.vlan_offload.is_some()),
        ];
        if let Some((name, _)) = port_settings.iter().find(|(_, set)| *set) {
            return Err(invalid(
                field(name),
                "belongs to the parent's port: set it there",
            ));
        }
        Ok(())
    }
}

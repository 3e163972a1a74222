//! `[port_mapping]`: PCP and NAT-PMP for the hosts of some zones (`crate::control::port_mapping`
//! serves them; the table and its limits: `pipeline::portmap`). Off unless zones are listed.

use super::*;

/// `[port_mapping]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PortMappingConfig {
    /// The zones whose hosts may ask for mappings, on the addresses of the zones' interfaces
    /// (each needs a static address and a kernel twin, where the server listens). Empty: the
    /// feature is off. The `local` rules must still admit UDP 5351 from these zones.
    pub zones: Vec<String>,
    /// The interface whose address mappings take (a masquerading one, in no listed zone);
    /// omitted: the first masquerading interface.
    pub external_interface: Option<String>,
    /// Mappings one host may hold.
    pub per_host: usize,
    /// Mappings in all.
    pub total: usize,
    /// The shortest and longest lifetime granted, in seconds: a request asking for less or
    /// more gets these (RFC 6887 15 recommends 120 s and a day).
    pub min_lifetime_s: u32,
    pub max_lifetime_s: u32,
    /// The external ports mappings may take: outside `nat.port_range` (masquerade may hold
    /// any port of that). A static forward's ports and the ports the `local` rules open to
    /// the external interface's zone are never handed out.
    pub external_ports: PortRange,
    /// UPnP IGD too (SSDP and HTTP), for the clients that speak only it: a larger surface
    /// than PCP's and NAT-PMP's, so off unless asked for.
    pub upnp: bool,
    /// The HTTP port of UPnP's description and control, on each served address.
    pub upnp_http_port: u16,
}

impl Default for PortMappingConfig {
    fn default() -> Self {
        PortMappingConfig {
            zones: Vec::new(),
            external_interface: None,
            per_host: 100,
            total: 1024,
            min_lifetime_s: 120,
            max_lifetime_s: 86_400,
            external_ports: PortRange {
                first: 1024,
                last: 32767,
            },
            upnp: false,
            upnp_http_port: 5000,
        }
    }
}

/// The longest lifetime allowed: a week (UPnP's IGDv2 cap, RFC 6887's "24 hours" times 7).
const MAX_LIFETIME_S: u32 = 604_800;
/// The largest table: one mapping per port of one protocol.
const MAX_TOTAL: usize = 65_536;

impl PortMappingConfig {
    pub fn enabled(&self) -> bool {
        !self.zones.is_empty()
    }

    /// The limits the table enforces.
    pub fn limits(&self) -> pipeline::portmap::Limits {
        pipeline::portmap::Limits {
            per_host: self.per_host,
            total: self.total,
            lifetime: self.min_lifetime_s..=self.max_lifetime_s,
            external_ports: self.external_ports.first..=self.external_ports.last,
        }
    }
}

impl GatewayConfig {
    /// The interfaces the server listens on: those of the listed zones, in order.
    pub fn port_mapping_interfaces(&self) -> Vec<usize> {
        let zones = &self.port_mapping.zones;
        (self.interfaces.iter().enumerate())
            .filter(|(_, iface)| zones.contains(iface.zone.as_ref().unwrap_or(&iface.name)))
            .map(|(index, _)| index)
            .collect()
    }

    /// The interface whose address mappings take: as configured, else the first that
    /// masquerades. None when port mapping is off or no interface masquerades.
    pub fn port_mapping_external(&self) -> Option<usize> {
        let mapping = &self.port_mapping;
        if !mapping.enabled() {
            return None;
        }
        let name = match &mapping.external_interface {
            Some(name) => name,
            None => self.nat.masquerade.first()?,
        };
        self.interfaces.iter().position(|iface| &iface.name == name)
    }

    pub(crate) fn validate_port_mapping(&self) -> Result<(), ConfigError> {
        let mapping = &self.port_mapping;
        if !mapping.enabled() {
            return Ok(());
        }
        let zones = self.zone_names();
        for (i, zone) in mapping.zones.iter().enumerate() {
            if !zones.contains(zone) {
                return Err(invalid(
                    format!("port_mapping.zones[{i}]"),
                    format!("no interface is in zone {zone:?}"),
                ));
            }
        }
        let twins = crate::config::twins::twin_names(self);
        for index in self.port_mapping_interfaces() {
            let iface = &self.interfaces[index];
            if iface.address.cidr().is_none() {
                return Err(invalid(
                    format!("interfaces[{index}].address"),
                    format!(
                        "{} serves port mapping (port_mapping.zones) and needs a static address",
                        iface.name
                    ),
                ));
            }
            if twins[index].is_none() {
                return Err(invalid(
                    format!("interfaces[{index}].kernel_twin"),
                    format!(
                        "{} serves port mapping (port_mapping.zones) and needs a kernel twin, \
                         where the server listens",
                        iface.name
                    ),
                ));
            }
        }
        let field = "port_mapping.external_interface";
        let Some(external) = self.port_mapping_external() else {
            return Err(invalid(
                field,
                match &mapping.external_interface {
                    Some(name) => format!("no interface named {name:?}"),
                    None => "no interface masquerades (nat.masquerade): name one".to_string(),
                },
            ));
        };
        let external_iface = &self.interfaces[external];
        if !self.nat.masquerade.contains(&external_iface.name) {
            return Err(invalid(
                field,
                format!(
                    "{} does not masquerade (nat.masquerade)",
                    external_iface.name
                ),
            ));
        }
        if self.port_mapping_interfaces().contains(&external) {
            return Err(invalid(
                field,
                format!(
                    "{} is in a zone that port_mapping.zones serves",
                    external_iface.name
                ),
            ));
        }
        if mapping.per_host == 0 || mapping.per_host > mapping.total {
            return Err(invalid(
                "port_mapping.per_host",
                "must be at least 1 and at most port_mapping.total",
            ));
        }
        if mapping.total > MAX_TOTAL {
            return Err(invalid(
                "port_mapping.total",
                format!("at most {MAX_TOTAL}"),
            ));
        }
        if mapping.min_lifetime_s == 0 || mapping.min_lifetime_s > mapping.max_lifetime_s {
            return Err(invalid(
                "port_mapping.min_lifetime_s",
                "must be at least 1 and at most port_mapping.max_lifetime_s",
            ));
        }
        let (ports, nat) = (mapping.external_ports, self.nat.port_range);
        if ports.first <= nat.last && nat.first <= ports.last {
            return Err(invalid(
                "port_mapping.external_ports",
                format!(
                    "{}-{} overlaps nat.port_range {}-{}: masquerade may hold any port of that, \
                     and a mapping on one would take its replies; give each a range of its \
                     own (nat.port_range = \"32768-65535\" beside the default 1024-32767, where \
                     the ports games and phones ask for lie)",
                    ports.first, ports.last, nat.first, nat.last
                ),
            ));
        }
        if mapping.upnp && mapping.upnp_http_port == 0 {
            return Err(invalid("port_mapping.upnp_http_port", "0 is no port"));
        }
        // An HA pair's hosts ask the virtual address, where nothing listens, and a mapping
        // on a shared or routed NAT address would be this box's alone: refused. (With
        // `[ha.sync]` alone mappings are not synced: a takeover loses them until their
        // clients renew them.)
        for index in self.port_mapping_interfaces() {
            if self.interfaces[index].virtual_address.is_some() {
                return Err(invalid(
                    format!("interfaces[{index}].virtual_address"),
                    "port mapping serves the interface's own address, and its hosts would ask \
                     the virtual one: not on an HA pair's interface yet",
                ));
            }
        }
        if external_iface.virtual_address.is_some() || external_iface.nat_address.is_some() {
            return Err(invalid(
                field,
                format!(
                    "{} has a virtual_address or nat_address: mappings on it would be this \
                     box's alone (they are not synced)",
                    external_iface.name
                ),
            ));
        }
        if mapping.max_lifetime_s > MAX_LIFETIME_S {
            return Err(invalid(
                "port_mapping.max_lifetime_s",
                format!("at most {MAX_LIFETIME_S} (a week)"),
            ));
        }
        Ok(())
    }
}

//! The `[kernel_twins]` section, the twin each interface gets, and its checks (the twins
//! themselves are `crate::control::twins`).

use pipeline::pipeline::config::PuntConfig;
use serde::Deserialize;

use super::{ConfigError, GatewayConfig, RulePrefix};

/// Linux's limit on interface names (IFNAMSIZ less the NUL).
const MAX_NAME_LEN: usize = 15;

/// The `[kernel_twins]` section.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct KernelTwinsConfig {
    /// Whether interfaces that do not masquerade (LANs, DMZs) get a twin when they do not
    /// say (`kernel_twin`). Off unless set, so that starting a gateway never adds addresses
    /// and routes to a namespace unasked; the deployment configs turn it on.
    pub inside_by_default: bool,
    /// The network namespace (`ip netns` name, which must exist) the twins live in;
    /// omitted: the gateway's own.
    pub netns: Option<String>,
    /// Packets each worker may punt to the twins per second, with this burst; the rest are
    /// dropped as punt_policed.
    pub punt_per_sec: u32,
    pub punt_burst: u32,
    /// The prefixes the twins' routes may have (IPv4 and IPv6): a kernel route is mirrored
    /// into the FIB only if it lies inside (or is) one of them. Omitted: any prefix. Either
    /// way, none inside one of the gateway's own subnets (`RouterConfig::
    /// with_bounded_kernel_routes`). A list with no prefix of a family allows that family
    /// none (write "::/0" to keep the ISP's IPv6 default route).
    pub route_allow: Option<Vec<RulePrefix>>,
}

impl Default for KernelTwinsConfig {
    fn default() -> Self {
        KernelTwinsConfig {
            inside_by_default: false,
            netns: None,
            punt_per_sec: PuntConfig::DEFAULT_PER_SEC,
            punt_burst: PuntConfig::DEFAULT_BURST,
            route_allow: None,
        }
    }
}

/// Descriptors of a twin's queues (the tap PMD's own limits are generous); its RX ring is
/// filled from the packet pool, which `mempool.mbufs` must hold.
pub const TWIN_DESCRIPTORS: u16 = 512;

/// Each interface's twin name (in interface order), None where it has no twin.
pub fn twin_names(config: &GatewayConfig) -> Vec<Option<String>> {
    config
        .interfaces
        .iter()
        .map(|iface| {
            let inside = !config.nat.masquerade.contains(&iface.name);
            // A PPPoE session lives in the gateway; the kernel has no part of it.
            let default =
                inside && config.kernel_twins.inside_by_default && !iface.address.is_pppoe();
            iface.kernel_twin.unwrap_or(default).then(|| {
                iface
                    .kernel_twin_name
                    .clone()
                    .unwrap_or_else(|| iface.name.clone())
            })
        })
        .collect()
}

/// An allow-list without IPv6 prefixes while the kernel configures an interface's IPv6: the
/// ISP's advertised default route (and any other IPv6 route on the twins) is refused.
pub fn route_allow_warning(config: &GatewayConfig) -> Option<String> {
    let allow = config.kernel_twins.route_allow.as_ref()?;
    let follows = config.interfaces.iter().find(|iface| {
        iface
            .ipv6
            .as_ref()
            .is_some_and(|ipv6| ipv6.autoconfigure || ipv6.delegated_prefix)
    })?;
    if allow
        .iter()
        .any(|prefix| matches!(prefix, RulePrefix::V6(_)))
    {
        return None;
    }
    Some(format!(
        "kernel_twins.route_allow: lists no IPv6 prefix, so no IPv6 route from the twins is \
         taken, though the kernel configures {}'s IPv6 (its advertised default route \
         included); add \"::/0\" (or the prefixes meant)",
        follows.name
    ))
}

fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The twin settings' checks, naming the field at fault.
pub fn validate(config: &GatewayConfig) -> Result<(), ConfigError> {
    let invalid = |field: String, reason: String| ConfigError::Invalid { field, reason };
    let names = twin_names(config);
    for (i, (iface, name)) in config.interfaces.iter().zip(&names).enumerate() {
        let field = |f: &str| format!("interfaces[{i}].{f}");
        if iface.kernel_twin_name.is_some() && name.is_none() {
            return Err(invalid(
                field("kernel_twin_name"),
                "is set but the interface has no twin (kernel_twin = true makes one)".into(),
            ));
        }
        if iface.address.is_dhcp() && name.is_none() {
            return Err(invalid(
                field("address"),
                "\"dhcp\" needs a kernel twin (kernel_twin = true): the DHCP client runs on it"
                    .into(),
            ));
        }
        if let (Some(ipv6), None) = (&iface.ipv6, name) {
            for (set, flag) in [
                (ipv6.autoconfigure, "autoconfigure"),
                (ipv6.delegated_prefix, "delegated_prefix"),
            ] {
                if set {
                    return Err(invalid(
                        field(&format!("ipv6.{flag}")),
                        "needs a kernel twin (kernel_twin = true): the kernel and its DHCPv6 \
                         client configure the interface there"
                            .into(),
                    ));
                }
            }
        }
        let Some(name) = name else { continue };
        let which = if iface.kernel_twin_name.is_some() {
            field("kernel_twin_name")
        } else {
            field("name")
        };
        if name.len() > MAX_NAME_LEN || !is_plain_name(name) {
            return Err(invalid(
                which,
                format!(
                    "{name:?} cannot name a kernel twin: at most {MAX_NAME_LEN} letters, digits, \
                     '-', '_' or '.' (set kernel_twin_name)"
                ),
            ));
        }
        if names[..i].iter().flatten().any(|other| other == name) {
            return Err(invalid(
                which,
                format!("{name:?} is another interface's twin too"),
            ));
        }
    }
    let section = &config.kernel_twins;
    if let Some(netns) = &section.netns {
        if !is_plain_name(netns) {
            return Err(invalid(
                "kernel_twins.netns".into(),
                format!("{netns:?} is not a namespace name (letters, digits, '-', '_', '.')"),
            ));
        }
    }
    for (i, prefix) in section.route_allow.iter().flatten().enumerate() {
        let field = format!("kernel_twins.route_allow[{i}]");
        match prefix {
            RulePrefix::V4(cidr) => super::no_host_bits(field, cidr)?,
            RulePrefix::V6(cidr) => super::no_host_bits6(field, cidr)?,
        }
    }
    if section.punt_per_sec > 0 && section.punt_burst == 0 {
        return Err(invalid(
            "kernel_twins.punt_burst".into(),
            "must be positive while punt_per_sec is (0 and 0 turn punting off)".into(),
        ));
    }
    Ok(())
}

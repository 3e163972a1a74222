//! What the pipeline is told of the kernel twins: which interfaces have one and the punt
//! budget, and which kernel routes the FIB may take.

use pipeline::pipeline::config::{KernelRouteAllow, PuntConfig};
use pipeline::wire::ipv6::prefix_of;

use crate::config::twins::twin_names;
use crate::config::{GatewayConfig, RulePrefix};

/// Which kernel routes the FIB may take (`route_allow`); the PPPoE sessions' IPv4 routes are
/// the gateway's own, which the list does not bound (their twins' IPv4 routes are not taken,
/// `crate::control::netlink`).
pub fn kernel_route_allow(config: &GatewayConfig) -> KernelRouteAllow {
    let allow = config.kernel_twins.route_allow.as_ref();
    KernelRouteAllow {
        v4: allow.map(|prefixes| {
            prefixes
                .iter()
                .filter_map(|prefix| match prefix {
                    RulePrefix::V4(cidr) => Some((cidr.network(), cidr.len)),
                    RulePrefix::V6(_) => None,
                })
                .collect()
        }),
        v6: allow.map(|prefixes| {
            prefixes
                .iter()
                .filter_map(|prefix| match prefix {
                    RulePrefix::V6(cidr) => Some((prefix_of(cidr.addr, cidr.len), cidr.len)),
                    RulePrefix::V4(_) => None,
                })
                .collect()
        }),
        own_ports: config
            .interfaces
            .iter()
            .enumerate()
            .filter(|(_, iface)| iface.address.is_pppoe())
            .map(|(port, _)| port as u16)
            .collect(),
    }
}

/// What the pipeline needs to know: which interfaces have a twin, and the budget.
pub fn punt_config(config: &GatewayConfig) -> PuntConfig {
    PuntConfig {
        twins: twin_names(config).iter().map(Option::is_some).collect(),
        dhcp_clients: config
            .interfaces
            .iter()
            .map(|iface| iface.address.is_dhcp())
            .collect(),
        per_sec: config.kernel_twins.punt_per_sec,
        burst: config.kernel_twins.punt_burst,
    }
}

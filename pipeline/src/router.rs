//! The router's immutable configuration: interfaces and the route table. Workers share one
//! snapshot through an `Arc`; a reload builds a new one.

use std::fmt;
use std::net::Ipv4Addr;

use crate::route::{NextHop, Route, RouteError, RouteTable};
use crate::wire::EthernetAddress;

/// One gateway port as the pipeline sees it. Its index in [`RouterConfig::interfaces`] is the
/// port number used in verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub mac: EthernetAddress,
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: u16,
}

impl Interface {
    fn mask(&self) -> u32 {
        u32::MAX
            .checked_shl(32u32.saturating_sub(u32::from(self.prefix_len)))
            .unwrap_or(0)
    }

    pub fn network(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) & self.mask())
    }

    /// The subnet's directed broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }
}

/// A static route: `destination/len via gateway`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaticRoute {
    pub destination: Ipv4Addr,
    pub len: u8,
    pub via: Ipv4Addr,
}

#[derive(Debug)]
pub enum RouterError {
    /// The gateway of a static route is not in any interface's subnet.
    UnreachableGateway(StaticRoute),
    Route(RouteError),
    TooManyInterfaces,
    BadPrefixLength(u8),
}

impl fmt::Display for RouterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouterError::UnreachableGateway(r) => write!(
                f,
                "route {}/{}: gateway {} is not in a connected subnet",
                r.destination, r.len, r.via
            ),
            RouterError::Route(err) => write!(f, "{err}"),
            RouterError::TooManyInterfaces => write!(f, "more than 64 interfaces"),
            RouterError::BadPrefixLength(len) => write!(f, "interface prefix length {len} > 32"),
        }
    }
}

impl std::error::Error for RouterError {}

/// ICMP error generation limits, per worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpLimits {
    pub errors_per_sec: u32,
    pub burst: u32,
}

impl Default for IcmpLimits {
    fn default() -> Self {
        IcmpLimits {
            errors_per_sec: 1000,
            burst: 100,
        }
    }
}

#[derive(Debug)]
pub struct RouterConfig {
    pub interfaces: Vec<Interface>,
    pub routes: RouteTable,
    pub icmp: IcmpLimits,
}

impl RouterConfig {
    /// Connected routes come from the interfaces; static routes resolve their gateway to the
    /// interface whose subnet holds it.
    pub fn new(
        interfaces: Vec<Interface>,
        static_routes: &[StaticRoute],
        icmp: IcmpLimits,
    ) -> Result<RouterConfig, RouterError> {
        if interfaces.len() > 64 {
            return Err(RouterError::TooManyInterfaces);
        }
        if let Some(iface) = interfaces.iter().find(|iface| iface.prefix_len > 32) {
            return Err(RouterError::BadPrefixLength(iface.prefix_len));
        }
        let mut routes: Vec<Route> = interfaces
            .iter()
            .enumerate()
            .map(|(port, iface)| Route {
                prefix: iface.network(),
                len: iface.prefix_len,
                next_hop: NextHop {
                    port: port as u16,
                    gateway: None,
                },
            })
            .collect();
        for route in static_routes {
            let port = interfaces
                .iter()
                .position(|iface| {
                    iface.prefix_len > 0
                        && u32::from(route.via) & iface.mask() == u32::from(iface.network())
                })
                .ok_or(RouterError::UnreachableGateway(*route))?;
            routes.push(Route {
                prefix: route.destination,
                len: route.len,
                next_hop: NextHop {
                    port: port as u16,
                    gateway: Some(route.via),
                },
            });
        }
        let routes = RouteTable::build(&routes).map_err(RouterError::Route)?;
        Ok(RouterConfig {
            interfaces,
            routes,
            icmp,
        })
    }

    /// The port whose address is `ip`, if `ip` is one of the gateway's own.
    #[inline]
    pub fn local_port(&self, ip: Ipv4Addr) -> Option<u16> {
        self.interfaces
            .iter()
            .position(|iface| iface.addr == ip)
            .map(|port| port as u16)
    }
}

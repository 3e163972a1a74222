//! The home gateway most pipeline tests drive: LAN 192.168.10.1/24 on port 0, WAN
//! 10.0.0.1/24 on port 1 with the default route via 10.0.0.2, a LAN host the neighbour view
//! knows, and the upstream router.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use pipeline::state::firewall::ZoneId;
use pipeline::wire::EthernetAddress;
use pipeline::{Interface, StaticRoute};

pub const LAN: u16 = 0;
pub const WAN: u16 = 1;
pub const LAN_ZONE: ZoneId = ZoneId(0);
pub const WAN_ZONE: ZoneId = ZoneId(1);
pub const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
pub const LAN_ADDR: [u8; 4] = [192, 168, 10, 1];
pub const WAN_ADDR: [u8; 4] = [10, 0, 0, 1];
/// The LAN client most tests use.
pub const HOST: [u8; 4] = [192, 168, 10, 2];
pub const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
/// The default route's gateway.
pub const UPSTREAM: [u8; 4] = [10, 0, 0, 2];
pub const UPSTREAM_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];
pub const ETH_LEN: usize = 14;
pub const SECOND: u64 = 1_000_000_000;

pub fn ip(octets: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(octets)
}

/// The LAN and the WAN, the WAN with this MTU.
pub fn interfaces(wan_mtu: u16) -> Vec<Interface> {
    vec![
        Interface {
            mac: EthernetAddress(LAN_MAC),
            addr: ip(LAN_ADDR),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
        Interface {
            mac: EthernetAddress(WAN_MAC),
            addr: ip(WAN_ADDR),
            prefix_len: 24,
            mtu: wan_mtu,
            virtual_addr: None,
        },
    ]
}

/// 0.0.0.0/0 via the upstream router.
pub fn default_route() -> StaticRoute {
    StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: ip(UPSTREAM),
    }
}

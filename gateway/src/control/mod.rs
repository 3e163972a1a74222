//! The control thread's protocols: neighbours (ARP, ND, echo, held packets), the kernel twins
//! and netlink, the PPPoE client sessions, the uplinks' health checks, and session sync with
//! the peer of an HA pair.

pub mod netlink;
pub mod plane;
pub mod port_mapping;
pub mod pppoe_clients;
pub mod session_sync;
pub mod twins;
pub mod uplink_health;
pub mod virtual_addresses;

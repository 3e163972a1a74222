//! The control thread's protocols: neighbours (ARP, ND, echo, held packets), the kernel twins
//! and netlink, and the PPPoE client sessions.

pub mod netlink;
pub mod plane;
pub mod pppoe_clients;
pub mod twins;
pub mod uplink_health;

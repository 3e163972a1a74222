//! What the gateway tells the outside: Prometheus metrics and their HTTP server, the ports'
//! and bonds' watch, the NAT and firewall logs, and the healthcheck.

pub mod bond_watch;
pub mod firewall_log;
pub mod healthcheck;
pub mod metrics;
pub mod nat_log;
pub mod port_watch;
pub mod protocol;
pub mod timestamp;

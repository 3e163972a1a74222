//! The gateway appliance: the safe DPDK layer, configuration, and the workers and control
//! thread that drive the pure-Rust pipeline.

pub mod app;
pub mod bench;
pub mod bonds;
pub mod clock;
pub mod config;
pub mod config_apply;
pub mod config_history;
pub mod config_store;
pub mod control;
pub mod ctl;
pub mod dpdk;
pub mod egress;
pub mod firewall_log;
pub mod handoff;
pub mod healthcheck;
pub mod hugepages;
pub mod liveness;
pub mod metrics;
pub mod nat_log;
pub mod netlink;
pub mod pipeline_config;
pub mod port_layout;
pub mod port_watch;
pub mod pppoe;
pub mod published;
pub mod reload;
pub mod rule_hits;
pub mod shaping;
pub mod snapshot;
pub mod timestamp;
pub mod twins;
pub mod web_config;
pub mod worker;

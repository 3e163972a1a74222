//! The gateway appliance: the safe DPDK layer, configuration, and the workers that drive the
//! pure-Rust pipeline.

pub mod config;
pub mod dpdk;

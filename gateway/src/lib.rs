//! The gateway appliance: the safe DPDK layer, configuration, and the workers and control
//! thread that drive the pure-Rust pipeline. The folders, lowest layer first, are described
//! in `tests/layout.rs`, which holds their imports to a DAG.

pub mod bench;
pub mod compile;
pub mod config;
pub mod control;
pub mod ctl;
pub mod dataplane;
pub mod dpdk;
pub mod reload;
pub mod runtime;
pub mod telemetry;

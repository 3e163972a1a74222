//! What happens to one packet. Pure Rust: no DPDK, no unsafe, no allocation on the per-packet path.
#![forbid(unsafe_code)]

pub mod wire;

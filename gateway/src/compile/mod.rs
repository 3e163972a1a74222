//! From the config file to what the pipeline runs: the immutable router config (`router`) and
//! the firewall rules' hit counters that survive recompiling (`rule_hits`).

pub mod publish;
pub mod router;
pub mod rule_hits;
pub mod twins;

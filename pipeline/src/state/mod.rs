//! Layer 2: what a worker remembers about flows. The connection tracker ([`conntrack`]), the
//! NAT port pools and rewrites ([`nat`]), the per-host limits both count against ([`hosts`]),
//! the firewall rules a new flow is admitted by ([`firewall`]), and what a flow keeps besides
//! its tuples ([`flow_data`]), and the SYN cookies of the SYN proxy ([`syn_cookie`]). Built on
//! [`crate::flow`] and [`crate::wire`]; knows nothing of the features or the pipeline.

pub mod conntrack;
pub mod drop_log;
pub mod event_log;
pub mod firewall;
pub mod firewall_log;
pub mod flow_data;
pub mod hosts;
pub mod nat;
pub mod rule_hits;
pub mod syn_cookie;

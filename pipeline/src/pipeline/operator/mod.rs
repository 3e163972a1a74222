//! The operator's tools over a worker's state, outside the packet path: what the tables
//! would do with a packet ([`explain`], `gateway ctl trace`), the flows and NAT bindings
//! listed and cleared a slice at a time ([`flow_listing`], `gateway ctl flows`), and the
//! state snapshot kept across a restart ([`snapshot`]).

pub mod explain;
pub mod flow_listing;
pub mod snapshot;

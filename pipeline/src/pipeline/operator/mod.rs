//! The operator's tools over a worker's state, outside the packet path: what the tables
//! would do with a packet ([`explain`], `gateway ctl trace`), the flows and NAT bindings
//! listed and cleared a slice at a time ([`flow_listing`], `gateway ctl flows`), and the
//! state snapshot kept across a restart ([`snapshot`]), and the same flows streamed to the
//! other box of an HA pair ([`session_sync`]).

pub mod explain;
pub mod flow_listing;
pub mod session_sync;
pub mod snapshot;

//! What happens to one packet. Pure Rust: no DPDK, no unsafe, no allocation on the
//! per-packet path. The gateway's workers hand each packet to [`Pipeline::process`] and act
//! on the [`Verdict`].
//!
//! The modules are layered, and a module imports only from its own layer or lower ones
//! (`tests/layout.rs` checks it):
//!
//! 0. [`wire`] (packet formats), and the vocabulary every stage shares: [`packet`],
//!    [`verdict`], [`counters`], [`hash`], [`ratelimit`];
//! 1. [`flow`] (the 5-tuple), [`l3`] (FIB, neighbours, fragmentation), [`pppoe`] (the
//!    PPPoE client's state machine) and [`portmap`] (PCP and NAT-PMP mappings);
//! 2. [`state`] (conntrack, NAT, per-host limits, firewall rules, what a flow keeps);
//! 3. [`features`] (QoS, meters, content blocking, parental control);
//! 4. [`pipeline`] (the [`Pipeline`] and its stages, the router config).
#![forbid(unsafe_code)]

pub mod counters;
pub mod features;
pub mod flow;
pub mod hash;
pub mod l3;
pub mod packet;
pub mod pipeline;
pub mod portmap;
pub mod pppoe;
pub mod ratelimit;
pub mod state;
pub mod verdict;
pub mod wire;

pub use counters::WorkerCounters;
pub use l3::neighbor_view::NeighborView;
pub use packet::PacketBuf;
pub use pipeline::config::{
    IcmpLimits, Interface, KernelRoute, KernelRouteAllow, RefusedRoute, RouteRefusal, RouterConfig,
    SourceValidation, StaticRoute,
};
pub use pipeline::stage::{Ingress, MAX_BURST};
pub use pipeline::{Pipeline, WorkerSetup};
pub use verdict::{ControlWork, DropReason, InvalidReason, Verdict};

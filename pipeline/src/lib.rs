//! What happens to one packet. Pure Rust: no DPDK, no unsafe, no allocation on the
//! per-packet path. The gateway's workers hand each packet to [`Pipeline::process`] and act
//! on the [`Verdict`].
#![forbid(unsafe_code)]

pub mod conntrack;
pub mod content;
pub mod control;
pub mod counters;
pub mod fast_path;
pub mod firewall;
pub mod flow;
pub mod forward;
pub mod fragment;
pub mod hash;
pub mod hosts;
pub mod inspect;
pub mod meter;
pub mod nat;
pub mod neigh;
pub mod neighbor_view;
pub mod packet;
pub mod parental;
pub mod punt;
pub mod qos;
pub mod ratelimit;
pub mod route;
pub mod router;
pub mod snapshot;
pub mod stateful;
pub mod verdict;
pub mod wire;

pub use counters::WorkerCounters;
pub use fast_path::MAX_BURST;
pub use forward::{Ingress, Pipeline, WorkerSetup};
pub use neighbor_view::NeighborView;
pub use packet::PacketBuf;
pub use router::{IcmpLimits, Interface, KernelRoute, RouterConfig, SourceValidation, StaticRoute};
pub use verdict::{ControlWork, DropReason, Verdict};

//! The fast path around the pipeline: the worker loop, batching per output port, handing
//! packets between workers, shaping, the port layout, the clock, what the control thread
//! publishes to workers, and the workers' side of their links to the control thread and `ctl`.

pub mod armed;
pub mod clock;
pub mod ctl_link;
pub mod drop_tap;
pub mod egress;
pub mod flow_snapshot;
pub mod handoff;
pub mod liveness;
pub mod mailbox;
pub mod port_layout;
pub mod pppoe_frames;
pub mod published;
pub mod punt;
pub mod shaping;
pub mod sync_link;
pub mod trace_link;
pub mod worker;

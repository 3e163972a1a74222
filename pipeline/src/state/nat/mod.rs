//! NAT44 building blocks: external port pools and in-place packet translation.
//!
//! * [`ports`]: which worker owns which external port ([`Ownership`]), and each worker's
//!   [`NatPool`] of endpoint-independent, paired, refcounted bindings. A new outbound flow
//!   takes a reference with [`NatPool::allocate`] and gives it back with
//!   [`NatPool::release`] when its conntrack entry expires.
//! * [`blocks`]: port-block allocation, when on: which host holds which block of ports.
//! * [`log`]: the bindings (or blocks) made and freed, queued for the operator's NAT log.
//! * [`rewrite`]: source/destination rewrites of TCP, UDP and ICMP query packets, and the
//!   translation of ICMP errors together with the datagram they quote (RFC 5508), all with
//!   incrementally patched checksums. [`quoted_flow_key`] finds the flow an error belongs to.
//!
//! Nothing here keeps per-packet state across workers: a pool belongs to one worker, and the
//! rewrites are pure functions of the packet and the translation the caller looked up.

pub mod blocks;
pub mod log;
pub mod ports;
pub mod rewrite;

pub use log::{NatEvent, NatEventKind, NatLog, PortBlock};
pub use ports::{
    AllocError, BindingView, NatPool, NatPoolError, Ownership, RestoreError, DEFAULT_PORTS,
};
pub use rewrite::{
    quoted_flow_key, rewrite_destination, rewrite_icmp_error, rewrite_source, RewriteError,
};

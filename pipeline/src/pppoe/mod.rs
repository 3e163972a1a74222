//! A PPPoE client (RFC 2516), with the PPP it carries: LCP, PAP or CHAP-MD5, IPCP with DNS.
//!
//! It is a pure state machine: it owns no socket and no clock. The gateway hands it each
//! PPPoE frame it receives ([`Client::receive`]) and the time ([`Client::poll`]), and
//! transmits the frames the client pushes to `out`. That keeps every protocol decision
//! testable without a NIC, and the dataplane free of control-plane logic: once the session is
//! [`State::Up`], [`Client::session`] gives the dataplane all it needs to carry IPv4 inside
//! PPPoE ([`wire::ETHERTYPE_SESSION`], [`wire::PPP_IPV4`]).
//!
//! - [`wire`]: the bytes (discovery tags, PPPoE header, PPP control packets and options);
//! - [`client`]: the state machine.

pub mod client;
pub mod wire;

pub use client::{Client, ClientConfig, ClientCounters, EndReason, Session, State};

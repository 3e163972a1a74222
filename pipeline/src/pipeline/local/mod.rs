//! The gateway's own traffic: what a worker hands the control thread or a kernel twin, and
//! what the control thread answers itself. ARP answers, echo replies and ARP requests
//! ([`arp`]); IPv6 for the gateway (Neighbor Discovery, echo, Router Advertisements, MLD:
//! [`ipv6`]); and what goes to an interface's kernel twin, with its budget ([`punt`]).

pub mod arp;
pub mod ipv6;
pub mod punt;

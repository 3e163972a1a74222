//! Layer 1, beside [`crate::flow`]: where an IPv4 packet goes. The FIB ([`route`], and
//! [`route6`] for IPv6), the neighbours its next hops resolve to ([`neigh`], published to the workers as a
//! [`neighbor_view`]), fragmentation for a smaller MTU on the way out ([`fragment`]), and the ICMP errors
//! RFC 1812 answers with ([`icmp_error`]); IPv6's, RFC 4443's ([`icmpv6_error`]).
//! Built on [`crate::wire`] and the verdict vocabulary only.

pub mod fragment;
pub mod icmp_error;
pub mod icmpv6_error;
pub mod neigh;
pub mod neighbor_view;
pub mod route;
pub mod route6;

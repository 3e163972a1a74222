//! What a flow table is keyed by: [`FlowKey`] for IPv4, [`FlowKey6`] for IPv6. Each family has
//! a table of its own (`FlowTable<D, FlowKey6>` beside `FlowTable<D>`), so IPv4 keeps its
//! 13-byte keys, its two-word hash and its entry size: it pays nothing for IPv6, and the
//! instruction counts of `make instructions` did not move when the table became generic.

use std::fmt;
use std::net::Ipv4Addr;

use crate::flow::{FlowKey, FlowKey6};

/// A 5-tuple a [`super::FlowTable`] can hold.
pub trait TableKey: Copy + Eq + fmt::Debug {
    /// The key of no flow: what a free slot holds.
    const UNSPECIFIED: Self;

    fn protocol(&self) -> u8;

    /// A hash of the whole tuple under the table's random `keys`, so that remote hosts, who
    /// choose ports and sometimes addresses, cannot aim many flows at one probe chain.
    fn keyed_hash(&self, keys: &[u64; 3]) -> u64;

    /// The host that opened the flow as the per-host counts know it
    /// ([`crate::state::hosts::HostCounts`], keyed by 32 bits): IPv4's source address itself;
    /// for IPv6 a hash, under the table's `key`, of the source address's first `prefix6`
    /// bits (a /64 by default: one host may use any number of SLAAC or privacy addresses
    /// there, and is still one host), so that nobody can pick an address whose count is
    /// another host's.
    fn opener(&self, key: u64, prefix6: u8) -> u32;
}

impl TableKey for FlowKey {
    const UNSPECIFIED: FlowKey = FlowKey {
        src: Ipv4Addr::UNSPECIFIED,
        dst: Ipv4Addr::UNSPECIFIED,
        src_port: 0,
        dst_port: 0,
        protocol: 0,
    };

    #[inline]
    fn protocol(&self) -> u8 {
        self.protocol
    }

    #[inline]
    fn keyed_hash(&self, keys: &[u64; 3]) -> u64 {
        let addresses = (u64::from(u32::from(self.src)) << 32) | u64::from(u32::from(self.dst));
        let ports_and_protocol = (u64::from(self.src_port) << 24)
            | (u64::from(self.dst_port) << 8)
            | u64::from(self.protocol);
        let mixed = folded_multiply(addresses ^ keys[0], ports_and_protocol ^ keys[1]);
        folded_multiply(mixed ^ keys[2], 0x9e37_79b9_7f4a_7c15)
    }

    #[inline]
    fn opener(&self, _key: u64, _prefix6: u8) -> u32 {
        u32::from(self.src)
    }
}

impl TableKey for FlowKey6 {
    const UNSPECIFIED: FlowKey6 = FlowKey6::UNSPECIFIED;

    #[inline]
    fn protocol(&self) -> u8 {
        self.protocol
    }

    /// Each address's halves are mixed with keys before they meet (folded multiplies, as
    /// foldhash does), so no unkeyed fold lets a sender make distinct tuples collide.
    #[inline]
    fn keyed_hash(&self, keys: &[u64; 3]) -> u64 {
        let (src_high, src_low) = halves(u128::from(self.src));
        let (dst_high, dst_low) = halves(u128::from(self.dst));
        let ports_and_protocol = (u64::from(self.src_port) << 24)
            | (u64::from(self.dst_port) << 8)
            | u64::from(self.protocol);
        let src = folded_multiply(src_high ^ keys[0], src_low ^ keys[1]);
        let dst = folded_multiply(dst_high ^ keys[1], dst_low ^ keys[2]);
        let mixed = folded_multiply(src ^ ports_and_protocol, dst ^ keys[0]);
        folded_multiply(mixed ^ keys[2], 0x9e37_79b9_7f4a_7c15)
    }

    #[inline]
    fn opener(&self, key: u64, prefix6: u8) -> u32 {
        let mask = u128::MAX
            .checked_shl(128u32.saturating_sub(u32::from(prefix6)))
            .unwrap_or(0);
        let (high, low) = halves(u128::from(self.src) & mask);
        (folded_multiply(high ^ key, low ^ 0x9e37_79b9_7f4a_7c15) >> 32) as u32
    }
}

fn halves(value: u128) -> (u64, u64) {
    ((value >> 64) as u64, value as u64)
}

pub(super) fn folded_multiply(a: u64, b: u64) -> u64 {
    let product = u128::from(a) * u128::from(b);
    (product as u64) ^ ((product >> 64) as u64)
}

//! Several uplinks (multi-WAN): which masqueraded interface a new flow toward the default
//! route leaves by, decided once when the flow opens and kept by it for its life.
//!
//! - **Policy first**: the operator's rules (`[[routing.policy]]`), in order, by source and
//!   destination prefix, ingress zone, protocol and destination port; the first that matches
//!   names an uplink. If that uplink is down, the rule's `fallback` says whether the flow
//!   takes the shared choice below or is refused.
//! - **Shared by weight**: among the uplinks that are up, those of the best (lowest)
//!   priority share new flows in proportion to their weights, by a hash of the flow's source
//!   address (the default: a host keeps one public address, which banks and games need) or of
//!   its 5-tuple. A backup (a higher priority number) takes new flows only when every uplink
//!   before it is down.
//!
//! The choice reads a table of [`SELECTION_SLOTS`] slots built when the uplinks' states
//! change, never per flow: each slot goes to the uplink with the highest weighted rendezvous
//! score for it, so that an uplink going down moves only its own slots (its hosts) and one
//! coming back takes back only those; every other host keeps its address.
//!
//! A flow keeps its uplink (`FlowData::uplink`): its packets leave by it whatever the table
//! says later, and its replies come back to that uplink's address. When its uplink goes down,
//! the flow is ended at its next packet (with a TCP reset toward the LAN client where
//! configured), unless the operator keeps such flows.

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use crate::flow::FlowKey;
use crate::l3::route::NextHop;
use crate::state::firewall::ZoneId;

/// Slots of the selection table: enough that weights up to a few dozen share within a
/// fraction of a percent, small enough to rebuild in microseconds.
pub const SELECTION_SLOTS: usize = 1024;

/// Uplinks one gateway may have: an uplink's index is kept in a byte.
pub const MAX_UPLINKS: usize = 64;

/// Kept apart from the NAT pool's pairing and the workers' host hash, which hash the same
/// addresses: otherwise each worker's hosts, or each pool address's, would favour one uplink.
const UPLINK_SEED: u32 = 0x7f4a_7c15;

/// One masqueraded interface that flows toward the default route may leave by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uplink {
    /// The interface.
    pub port: u16,
    /// The next hop there: the ISP's router (None: the uplink has no next hop yet, a lease
    /// not taken; it counts as down).
    pub gateway: Option<Ipv4Addr>,
    /// Its share among the uplinks of its priority that are up (at least 1).
    pub weight: u32,
    /// Lower first: an uplink takes new flows only while every uplink of a lower number is
    /// down.
    pub priority: u8,
    /// Whether it takes new flows: its health checks pass, its link and address are there.
    pub up: bool,
}

impl Uplink {
    /// Whether new flows may take it: up, with a next hop.
    fn usable(&self) -> bool {
        self.up && self.gateway.is_some()
    }

    fn next_hop(&self) -> NextHop {
        NextHop {
            port: self.port,
            gateway: self.gateway,
        }
    }
}

/// What the shared choice hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UplinkHash {
    /// The source address: every flow of a host leaves by the same uplink.
    #[default]
    Source,
    /// The 5-tuple: a host's flows spread too (its sessions see several public addresses).
    Flow,
}

/// A policy-routing rule: flows it matches leave by `uplink`. Unset fields match anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UplinkPolicy {
    pub source: Option<(Ipv4Addr, u8)>,
    pub destination: Option<(Ipv4Addr, u8)>,
    /// The zone the flow comes from.
    pub from_zone: Option<ZoneId>,
    pub protocol: Option<u8>,
    /// Destination ports (TCP and UDP).
    pub ports: Option<RangeInclusive<u16>>,
    /// Index into the uplinks.
    pub uplink: usize,
    /// When `uplink` is down: take the shared choice (true) or refuse the flow (false).
    pub fallback: bool,
}

impl UplinkPolicy {
    fn matches(&self, key: &FlowKey, from: ZoneId) -> bool {
        let within = |prefix: Option<(Ipv4Addr, u8)>, addr: Ipv4Addr| {
            prefix.is_none_or(|(net, len)| {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                u32::from(addr) & mask == u32::from(net) & mask
            })
        };
        within(self.source, key.src)
            && within(self.destination, key.dst)
            && self.from_zone.is_none_or(|zone| zone == from)
            && self
                .protocol
                .is_none_or(|protocol| protocol == key.protocol)
            && self
                .ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&key.dst_port))
    }
}

/// What becomes of a flow toward the default route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UplinkChoice {
    /// It leaves by this uplink (an index into [`Uplinks::uplinks`]).
    Uplink(usize),
    /// No uplink takes it: every one is down, or its policy's is and it may not fall back.
    /// It goes by the routing table's default route, as with no uplinks, or is refused
    /// (`refused`: a policy without fallback).
    None { refused: bool },
}

/// The uplinks, their shared choice and the policy rules: part of the router config, rebuilt
/// (with the rest of it) when an uplink's state changes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uplinks {
    uplinks: Vec<Uplink>,
    /// Per interface, its uplink's index.
    by_port: Vec<Option<u8>>,
    /// [`SELECTION_SLOTS`] uplink indices, or empty while no uplink is usable.
    slots: Vec<u8>,
    hash: UplinkHash,
    policies: Vec<UplinkPolicy>,
    /// Whether a flow whose uplink went down is ended at its next packet.
    pub end_flows_on_down: bool,
    /// Whether such a flow's TCP client gets a reset when its next segment is refused.
    pub reset_on_down: bool,
}

impl Uplinks {
    /// `uplinks` over `interfaces` interfaces; policies name uplinks by index. Invalid input
    /// (a port out of range, a policy naming no uplink, too many uplinks) is the config
    /// compiler's to refuse: here it is left out.
    pub fn new(
        interfaces: usize,
        uplinks: Vec<Uplink>,
        hash: UplinkHash,
        policies: Vec<UplinkPolicy>,
    ) -> Uplinks {
        let mut uplinks = uplinks;
        uplinks.truncate(MAX_UPLINKS);
        let mut by_port = vec![None; interfaces];
        for (index, uplink) in uplinks.iter().enumerate() {
            if let Some(slot) = by_port.get_mut(usize::from(uplink.port)) {
                *slot = Some(index as u8);
            }
        }
        let policies = policies
            .into_iter()
            .filter(|policy| policy.uplink < uplinks.len())
            .collect();
        let mut built = Uplinks {
            uplinks,
            by_port,
            slots: Vec::new(),
            hash,
            policies,
            end_flows_on_down: true,
            reset_on_down: true,
        };
        built.slots = built.selection();
        built
    }

    /// The selection table for the uplinks' current states (see the module doc).
    fn selection(&self) -> Vec<u8> {
        let Some(best) = self
            .uplinks
            .iter()
            .filter(|uplink| uplink.usable())
            .map(|uplink| uplink.priority)
            .min()
        else {
            return Vec::new();
        };
        let tier: Vec<usize> = (0..self.uplinks.len())
            .filter(|&i| self.uplinks[i].usable() && self.uplinks[i].priority == best)
            .collect();
        (0..SELECTION_SLOTS)
            .map(|slot| {
                let score = |i: usize| {
                    // Weighted rendezvous hashing: weight / -ln(u), u uniform in (0, 1).
                    let hash = mix64((slot as u64) << 32 | u64::from(self.uplinks[i].port));
                    let unit = ((hash >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                    f64::from(self.uplinks[i].weight.max(1)) / -unit.ln()
                };
                let winner = tier
                    .iter()
                    .copied()
                    .max_by(|&a, &b| score(a).total_cmp(&score(b)));
                winner.unwrap_or(0) as u8
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.uplinks.is_empty()
    }

    pub fn uplinks(&self) -> &[Uplink] {
        &self.uplinks
    }

    /// The uplink on interface `port`, if it is one.
    #[inline]
    pub fn on_port(&self, port: u16) -> Option<&Uplink> {
        let index = (*self.by_port.get(usize::from(port))?)?;
        self.uplinks.get(usize::from(index))
    }

    /// Where a packet of a flow kept on the uplink of interface `port` goes next: that
    /// uplink's next hop as it is now (a lease renewed may have moved it). None when the
    /// interface is no longer an uplink or has no next hop.
    #[inline]
    pub fn next_hop(&self, port: u16) -> Option<NextHop> {
        let uplink = self.on_port(port)?;
        uplink.gateway.map(|_| uplink.next_hop())
    }

    /// Whether a flow kept on the uplink of interface `port` is to be ended now: that
    /// interface is an uplink, it is down, and the operator ends such flows.
    #[inline]
    pub fn ends_flow_on(&self, port: u16) -> bool {
        self.end_flows_on_down && self.on_port(port).is_some_and(|uplink| !uplink.usable())
    }

    /// The uplink a new flow `key` from zone `from`, whose route is the default route,
    /// leaves by.
    pub fn choose(&self, key: &FlowKey, from: ZoneId) -> UplinkChoice {
        if let Some(policy) = self
            .policies
            .iter()
            .find(|policy| policy.matches(key, from))
        {
            if self.uplinks[policy.uplink].usable() {
                return UplinkChoice::Uplink(policy.uplink);
            }
            if !policy.fallback {
                return UplinkChoice::None { refused: true };
            }
        }
        if self.slots.is_empty() {
            return UplinkChoice::None { refused: false };
        }
        let hash = match self.hash {
            UplinkHash::Source => mix32(u32::from(key.src) ^ UPLINK_SEED),
            UplinkHash::Flow => {
                let ends = u32::from(key.src) ^ u32::from(key.dst).rotate_left(16);
                let ports = u32::from(key.src_port) << 16 | u32::from(key.dst_port);
                mix32(mix32(ends ^ UPLINK_SEED) ^ ports ^ u32::from(key.protocol))
            }
        };
        // The high bits of hash * len: no division.
        let slot = ((u64::from(hash) * SELECTION_SLOTS as u64) >> 32) as usize;
        UplinkChoice::Uplink(usize::from(self.slots[slot]))
    }

    /// The interface of uplink `index`.
    pub fn port(&self, index: usize) -> u16 {
        self.uplinks[index].port
    }

    /// The routing table's default route with uplinks: by the first usable uplink of the
    /// best priority, else by the first with a next hop. What no uplink takes (every one
    /// down, the gateway's own traffic) goes there.
    pub fn default_next_hop(&self) -> Option<NextHop> {
        let with_next_hop = || {
            self.uplinks
                .iter()
                .filter(|uplink| uplink.gateway.is_some())
        };
        let best = with_next_hop()
            .filter(|uplink| uplink.usable())
            .min_by_key(|uplink| uplink.priority);
        best.or_else(|| with_next_hop().next())
            .map(Uplink::next_hop)
    }
}

/// murmur3's finaliser, as the NAT pool's pairing uses (fixed, so that a host's choice is the
/// same on every worker and after a restart).
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^= x >> 16;
    x
}

/// splitmix64's finaliser, for the rendezvous scores.
fn mix64(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::protocol;

    fn uplink(port: u16, weight: u32, priority: u8, up: bool) -> Uplink {
        Uplink {
            port,
            gateway: Some(Ipv4Addr::new(10, port as u8, 0, 2)),
            weight,
            priority,
            up,
        }
    }

    fn flow_from(host: u32) -> FlowKey {
        FlowKey {
            src: Ipv4Addr::from(0xc0a8_0000 + host),
            dst: Ipv4Addr::new(203, 0, 113, 9),
            src_port: 40000,
            dst_port: 443,
            protocol: protocol::TCP,
        }
    }

    fn shares(uplinks: &Uplinks, hosts: u32) -> Vec<usize> {
        let mut counts = vec![0; uplinks.uplinks().len()];
        for host in 0..hosts {
            match uplinks.choose(&flow_from(host), ZoneId(0)) {
                UplinkChoice::Uplink(i) => counts[i] += 1,
                UplinkChoice::None { .. } => panic!("no uplink for host {host}"),
            }
        }
        counts
    }

    #[test]
    fn weights_share_hosts() {
        let uplinks = Uplinks::new(
            3,
            vec![uplink(1, 2, 0, true), uplink(2, 1, 0, true)],
            UplinkHash::Source,
            Vec::new(),
        );
        let counts = shares(&uplinks, 30_000);
        let first = counts[0] as f64 / 30_000.0;
        assert!((first - 2.0 / 3.0).abs() < 0.02, "{counts:?}");
    }

    #[test]
    fn a_backup_takes_flows_only_when_the_primary_is_down() {
        let primary_up = Uplinks::new(
            3,
            vec![uplink(1, 1, 0, true), uplink(2, 1, 1, true)],
            UplinkHash::Source,
            Vec::new(),
        );
        assert_eq!(shares(&primary_up, 1000), vec![1000, 0]);
        let primary_down = Uplinks::new(
            3,
            vec![uplink(1, 1, 0, false), uplink(2, 1, 1, true)],
            UplinkHash::Source,
            Vec::new(),
        );
        assert_eq!(shares(&primary_down, 1000), vec![0, 1000]);
        assert!(primary_down.ends_flow_on(1));
        assert!(!primary_down.ends_flow_on(2));
        let none_up = Uplinks::new(
            3,
            vec![uplink(1, 1, 0, false), uplink(2, 1, 1, false)],
            UplinkHash::Source,
            Vec::new(),
        );
        assert_eq!(
            none_up.choose(&flow_from(1), ZoneId(0)),
            UplinkChoice::None { refused: false }
        );
    }

    #[test]
    fn an_uplink_going_down_moves_only_its_own_hosts() {
        let three = |third_up| {
            Uplinks::new(
                4,
                vec![
                    uplink(1, 1, 0, true),
                    uplink(2, 1, 0, true),
                    uplink(3, 1, 0, third_up),
                ],
                UplinkHash::Source,
                Vec::new(),
            )
        };
        let (before, after) = (three(true), three(false));
        for host in 0..5000 {
            let key = flow_from(host);
            let was = before.choose(&key, ZoneId(0));
            let now = after.choose(&key, ZoneId(0));
            if was != UplinkChoice::Uplink(2) {
                assert_eq!(was, now, "host {host} moved though its uplink stayed up");
            }
        }
    }

    #[test]
    fn a_host_keeps_its_uplink_by_source_and_spreads_by_flow() {
        let by = |hash| {
            Uplinks::new(
                3,
                vec![uplink(1, 1, 0, true), uplink(2, 1, 0, true)],
                hash,
                Vec::new(),
            )
        };
        let (source, flow) = (by(UplinkHash::Source), by(UplinkHash::Flow));
        let mut seen_by_flow = [false; 2];
        let first = source.choose(&flow_from(7), ZoneId(0));
        for port in 0..64 {
            let key = FlowKey {
                src_port: 40000 + port,
                ..flow_from(7)
            };
            assert_eq!(source.choose(&key, ZoneId(0)), first);
            if let UplinkChoice::Uplink(i) = flow.choose(&key, ZoneId(0)) {
                seen_by_flow[i] = true;
            }
        }
        assert_eq!(seen_by_flow, [true, true]);
    }

    #[test]
    fn a_policy_pins_its_flows_and_falls_back_as_told() {
        let policy = |fallback| UplinkPolicy {
            source: Some((Ipv4Addr::new(192, 168, 0, 7), 32)),
            destination: None,
            from_zone: None,
            protocol: Some(protocol::TCP),
            ports: Some(443..=443),
            uplink: 1,
            fallback,
        };
        let with = |backup_up, fallback| {
            Uplinks::new(
                3,
                vec![uplink(1, 1, 0, true), uplink(2, 1, 1, backup_up)],
                UplinkHash::Source,
                vec![policy(fallback)],
            )
        };
        let pinned = flow_from(7);
        let other = flow_from(8);
        assert_eq!(
            with(true, true).choose(&pinned, ZoneId(0)),
            UplinkChoice::Uplink(1)
        );
        assert_eq!(
            with(true, true).choose(&other, ZoneId(0)),
            UplinkChoice::Uplink(0)
        );
        let udp = FlowKey {
            protocol: protocol::UDP,
            ..pinned
        };
        assert_eq!(
            with(true, true).choose(&udp, ZoneId(0)),
            UplinkChoice::Uplink(0)
        );
        assert_eq!(
            with(false, true).choose(&pinned, ZoneId(0)),
            UplinkChoice::Uplink(0)
        );
        assert_eq!(
            with(false, false).choose(&pinned, ZoneId(0)),
            UplinkChoice::None { refused: true }
        );
    }

    #[test]
    fn an_uplink_without_a_next_hop_takes_nothing() {
        let mut leaseless = uplink(1, 1, 0, true);
        leaseless.gateway = None;
        let uplinks = Uplinks::new(
            3,
            vec![leaseless, uplink(2, 1, 0, true)],
            UplinkHash::Source,
            Vec::new(),
        );
        assert_eq!(shares(&uplinks, 500), vec![0, 500]);
        assert_eq!(uplinks.next_hop(1), None);
        assert_eq!(
            uplinks.next_hop(2),
            Some(NextHop {
                port: 2,
                gateway: Some(Ipv4Addr::new(10, 2, 0, 2))
            })
        );
    }
}

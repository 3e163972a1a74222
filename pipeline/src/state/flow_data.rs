//! What a worker keeps per flow besides the tuples ([`FlowData`], the conntrack table's
//! payload): the NAT binding it holds, how it was admitted, where its content inspection
//! stands, and the forwarding shortcuts of its two directions.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::state::nat::rewrite::ChecksumDeltas;
use crate::state::nat::NatPool;

/// What a worker keeps per flow besides the tuples. Serialized into state snapshots
/// (`crate::pipeline::operator::snapshot`): a change here is a change of the snapshot format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowData {
    /// The NAT binding the flow holds, released with it.
    pub(crate) binding: Option<Binding>,
    /// The zones the flow was classified by, to re-check it after a reload.
    pub(crate) from_zone: u8,
    pub(crate) to_zone: u8,
    /// The ICMP type of the first packet, for rules on ICMP type.
    pub(crate) icmp_type: Option<u8>,
    /// Admitted by a port forward, not by the rules.
    pub(crate) forwarded: bool,
    /// The rules generation the flow was admitted under.
    pub(crate) generation: u32,
    /// Keyword block and parental control: where the flow stands.
    pub(crate) content: ContentState,
    /// Opened through the SYN proxy (a SYN cookie), whose sequence numbers the gateway
    /// splices: see `crate::pipeline::syn_proxy`.
    pub(crate) syn_proxy: SynProxy,
    /// Per direction (original, reply): what forwarding decided for the last packet, so
    /// the next ones can skip the checks that decision depended on (the fast path's [`Shortcut`]).
    /// A cache, rebuilt by the next packet: not part of the snapshot.
    #[serde(skip)]
    pub(crate) shortcuts: [Shortcut; 2],
}

/// The `generation` of a copy the peer of an HA pair synced
/// (`crate::pipeline::operator::session_sync`) that this box has not forwarded a packet of
/// yet: never a config's generation, so the copy's first packet here takes the once-per-flow
/// recheck (`StatefulStage::recheck`), which makes it this box's own. Until then the copy is
/// not sent back to the peer, the peer's next copy refreshes it in place, and its binding is
/// not in this box's NAT log (the peer logged it). A marker in a field the flow has anyway:
/// a flag of its own would take `FlowData` from 84 bytes to 88.
pub const SYNCED_COPY: u32 = u32::MAX;

impl FlowData {
    /// A copy synced from the peer that this box has not forwarded a packet of yet.
    pub fn is_synced_copy(&self) -> bool {
        self.generation == SYNCED_COPY
    }
}

/// Whether a flow's content was judged: TCP flows from LAN devices are inspected on their
/// first payload packets; the verdict then stays with the flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContentState {
    #[default]
    Allowed,
    Inspecting,
    Blocked,
}

/// Where a flow the SYN proxy opened stands. The client's view of the server's sequence
/// numbers starts at the cookie, the server's own at its ISN: the proxy adds the difference
/// to what the server sends and takes it from what the client acknowledges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SynProxy {
    /// Not proxied: the endpoints' own handshake.
    #[default]
    Off,
    /// The client returned the cookie; its SYN went on to the server, whose SYN-ACK has
    /// not come back yet. `client_window` is the window the client offered (unscaled: the
    /// proxy negotiates no window scaling).
    AwaitingServer { cookie: u32, client_window: u16 },
    /// Both handshakes are done: the server's sequence numbers plus `delta` are the client's
    /// (`client_window` kept to answer a retransmitted SYN-ACK again).
    Spliced { delta: u32, client_window: u16 },
}

/// A NAT binding: protocol, external address, port.
pub(crate) type Binding = (u8, Ipv4Addr, u16);

/// Returns a flow's NAT binding to the pool. A synced copy's binding was never logged as
/// created here, so its end is not logged either.
pub(crate) fn release(nat: &mut Option<NatPool>, data: &FlowData) {
    if let (Some(pool), Some((protocol, addr, port))) = (nat.as_mut(), data.binding) {
        if data.is_synced_copy() {
            pool.release_unlogged(protocol, (addr, port));
        } else {
            pool.release(protocol, (addr, port));
        }
    }
}

/// The epoch a pipeline starts at (its router and its neighbour epoch, which stamp
/// [`Shortcut`]s); 0 marks an empty shortcut.
pub(crate) const FIRST_EPOCH: u32 = 1;

/// The epoch after `epoch`, never 0. Wrapping would need four billion reloads and
/// neighbour changes in one run; it is handled rather than assumed away.
pub(crate) fn next_epoch(epoch: u32) -> u32 {
    epoch.wrapping_add(1).max(FIRST_EPOCH)
}

/// What the features do with the packets of one flow direction, packed into a byte so that
/// a shortcut carries it in what was padding. 0: nothing. The pipeline's feature stage makes
/// it and acts on it; this layer only keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeaturePlan(u8);

impl FeaturePlan {
    pub const NONE: FeaturePlan = FeaturePlan(0);
    pub(crate) const POLICE: u8 = 1;
    /// Policed on the downlink (else the uplink).
    pub(crate) const DOWNLINK: u8 = 2;
    /// The class below holds for every packet (no rule looks at DSCP or a MAC).
    pub(crate) const CLASS_KNOWN: u8 = 4;
    pub(crate) const PRIORITY: u8 = 8;
    /// Metered against the source, as traffic it sent.
    pub(crate) const METER_UP: u8 = 16;
    /// Metered against the destination, as traffic it received.
    pub(crate) const METER_DOWN: u8 = 32;

    /// From its packed form (a shortcut's).
    pub(crate) fn from_bits(bits: u8) -> FeaturePlan {
        FeaturePlan(bits)
    }

    pub(crate) fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }

    /// The QoS link (0 uplink, 1 downlink) the packets are policed on, if any.
    pub(crate) fn police_link(self) -> Option<usize> {
        self.has(Self::POLICE)
            .then_some(usize::from(self.has(Self::DOWNLINK)))
    }

    /// Whether the packets are all of the priority class (`Some(true)`) or all bulk, where
    /// one class holds for every packet; None where each packet is classified.
    pub(crate) fn fixed_priority(self) -> Option<bool> {
        self.has(Self::CLASS_KNOWN)
            .then_some(self.has(Self::PRIORITY))
    }
}

/// The features of one direction of a flow: its plan, and the LAN hosts it is about, as
/// their IPv4 addresses. An IPv4 packet's hosts are its own addresses. An IPv6 packet's are
/// the IPv4 neighbours with the sender's MAC (for the host sending) or the next hop's (for
/// the host receiving), on that interface's subnet (traffic through a LAN router is the
/// router's, as the MAC says), so that a dual-stack host has one fair share and one line in
/// the meter. None: no such neighbour, or several (an IPv6-only device, a Wi-Fi extender's
/// clients behind its MAC); its traffic shares one fair share, under 0.0.0.0, and the
/// meter's unattributed entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Features {
    pub(crate) plan: FeaturePlan,
    pub(crate) sender: Option<Ipv4Addr>,
    pub(crate) receiver: Option<Ipv4Addr>,
}

/// What forwarding decided for the last packet of one direction of a flow, for the
/// established fast path (`crate::pipeline::fast_path`), which makes and checks it: the same
/// for both families but for `R`, what IPv4's adds ([`Nat44Shortcut`]; IPv6's adds nothing,
/// `()`: its packets leave as they came but for the hop limit). Its next hop's MAC, and an
/// IPv6 flow's feature hosts, are from one neighbour view: a newer view looks the next hop
/// up again (IPv4) or sends the direction's next packet down the full path (IPv6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shortcut<R = Nat44Shortcut> {
    /// The pipeline's router epoch when it was made; 0, which no epoch is, when there is none.
    pub(crate) router_epoch: u32,
    /// The neighbour epoch `next_hop_mac` is from.
    pub(crate) neighbor_epoch: u32,
    pub(crate) ingress: u16,
    pub(crate) egress: u16,
    pub(crate) next_hop_mac: [u8; 6],
    /// Made from a packet this worker received itself rather than one handed to it, so the
    /// source validation and the owner check ran (a handed-off packet skips both: its
    /// receiver ran them).
    pub(crate) received_here: bool,
    /// What QoS and the meter do with the direction's packets; with any, an IPv6 flow's
    /// hosts are in `StatefulStage6::feature_hosts`.
    pub(crate) features: FeaturePlan,
    pub(crate) family: R,
}

impl<R> Shortcut<R> {
    /// Whether the shortcut may decide for a packet of its direction arriving on `ingress`
    /// (`handed_off`: from another worker) under router epoch `router_epoch`: it was made
    /// under that config, for that ingress, and from a packet whose source validation and
    /// owner check ran here unless this one's ran elsewhere. The flow's own state (its
    /// content verdict, its rules generation) is the caller's to check.
    #[inline]
    pub(crate) fn serves(&self, router_epoch: u32, ingress: u16, handed_off: bool) -> bool {
        self.router_epoch == router_epoch
            && self.ingress == ingress
            && (self.received_here || handed_off)
    }
}

/// Whether an established flow may take the fast path at all: its content is allowed and
/// it was admitted (or rechecked) under the current rules `generation`.
#[inline]
pub(crate) fn settled(content: ContentState, admitted: u32, generation: u32) -> bool {
    content == ContentState::Allowed && admitted == generation
}

/// What an IPv4 shortcut adds: the route's next hop, to look its MAC up again under a newer
/// neighbour view, and the NAT rewrite's and the TTL decrement's checksum patches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Nat44Shortcut {
    /// An IPv4 address, as bits for `Default`.
    pub(crate) next_hop: u32,
    pub(crate) deltas: ChecksumDeltas,
}

/// What the stateful stage's one body (`crate::pipeline::track`) reads of either family's
/// flow data.
pub(crate) trait TrackedFlow {
    /// Where the flow's content verdict stands.
    fn content(&self) -> ContentState;
}

impl TrackedFlow for FlowData {
    #[inline]
    fn content(&self) -> ContentState {
        self.content
    }
}

impl TrackedFlow for FlowData6 {
    #[inline]
    fn content(&self) -> ContentState {
        self.content
    }
}

/// What an IPv6 flow keeps besides its tuples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FlowData6 {
    pub(crate) from_zone: u8,
    pub(crate) to_zone: u8,
    /// The stateful config's generation the flow was last admitted under: a reload that
    /// rechecks established flows (`recheck_established`) looks at the flow again.
    pub(crate) generation: u32,
    /// Whether the flow's content was judged (a TCP flow a LAN device opened, with a
    /// content policy on).
    pub(crate) content: ContentState,
    /// The opening device's IPv4 address as it was then (`Client6`), for flows a LAN device
    /// opened under a content policy: the inspector follows a stream for one device, and the
    /// MAC's neighbour entry may come or go mid-stream.
    pub(crate) device: Option<Ipv4Addr>,
    /// Per direction (original, reply): where forwarding sent the last packet, for the fast
    /// path.
    pub(crate) shortcuts: [Shortcut<()>; 2],
}

/// The LAN hosts of an IPv6 shortcut's features, and the sender they were decided for: kept
/// apart from the flow (`StatefulStage6::feature_hosts`), since most flows have no features
/// and every byte of a flow's data is on the line each of its packets reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FeatureHosts6 {
    pub(crate) features: Features,
    pub(crate) source_mac: [u8; 6],
}

#[cfg(test)]
mod size {
    /// A flow's data is a table's payload, a million flows of it: its size is part of the
    /// bench's bytes per flow (`gateway bench`, `bytes_per_flow`).
    #[test]
    fn flow_data_stays_84_bytes() {
        assert_eq!(std::mem::size_of::<super::FlowData>(), 84);
    }
}

//! What a worker keeps per flow besides the tuples ([`FlowData`], the conntrack table's
//! payload): the NAT binding it holds, how it was admitted, where its content inspection
//! stands, and the forwarding shortcuts of its two directions.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::state::nat::rewrite::ChecksumDeltas;
use crate::state::nat::NatPool;

/// What a worker keeps per flow besides the tuples. Serialized into state snapshots
/// (`crate::pipeline::snapshot`): a change here is a change of the snapshot format.
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

/// Returns a flow's NAT binding to the pool.
pub(crate) fn release(nat: &mut Option<NatPool>, data: &FlowData) {
    if let (Some(pool), Some((protocol, addr, port))) = (nat.as_mut(), data.binding) {
        pool.release(protocol, (addr, port));
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

/// What forwarding decided for the last packet of one direction of a flow, for the
/// established fast path (`crate::pipeline::fast_path`), which makes and checks it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shortcut {
    /// The pipeline's router epoch when it was made; 0, which no epoch is, when there is none.
    pub(crate) router_epoch: u32,
    /// The neighbour epoch `next_hop_mac` is from.
    pub(crate) neighbor_epoch: u32,
    pub(crate) ingress: u16,
    pub(crate) egress: u16,
    /// The route's next hop (an IPv4 address, as bits for `Default`).
    pub(crate) next_hop: u32,
    pub(crate) next_hop_mac: [u8; 6],
    /// The NAT rewrite's and the TTL decrement's checksum patches.
    pub(crate) deltas: ChecksumDeltas,
    /// Made from a packet this worker received itself rather than one handed to it, so the
    /// source validation and the owner check ran (a handed-off packet skips both: its
    /// receiver ran them).
    pub(crate) received_here: bool,
    /// What QoS and the meter do with the direction's packets: the pipeline's
    /// `FeaturePlan`, packed (this layer knows nothing of features).
    pub(crate) features: u8,
}

//! A worker's flows (`gateway ctl show flows`, `clear flows`) and NAT bindings (`show nat`)
//! listed and cleared for the operator, a slice of the table at a time: the worker walks a
//! bounded number of slots per poll loop, so a query over a million flows never stalls its
//! packets.
//!
//! Neither walk allocates: a listing fills a buffer the caller sized, and counts the matches
//! beyond it.

use std::net::Ipv4Addr;

use crate::flow::FlowKey;
use crate::pipeline::Pipeline;
use crate::state::conntrack::TcpState;
use crate::state::nat::BindingView;

/// Which flows a listing or a clear is about; every field given must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowFilter {
    /// An address either tuple names, as source or destination: the host itself, its
    /// translated address, or its peer.
    pub host: Option<Ipv4Addr>,
    /// A port either tuple names.
    pub port: Option<u16>,
    pub protocol: Option<u8>,
    /// Only TCP flows in this state.
    pub tcp_state: Option<TcpState>,
}

impl FlowFilter {
    /// Whether a flow with these tuples and TCP state matches.
    fn matches(&self, original: &FlowKey, reply: &FlowKey, tcp_state: Option<TcpState>) -> bool {
        self.names(&[original, reply])
            && self.tcp_state.is_none_or(|state| tcp_state == Some(state))
    }

    /// Whether a packet with this tuple matches the host, port and protocol (a TCP state
    /// describes flows, not packets, and is not checked): what `gateway ctl trace` follows.
    pub fn matches_packet(&self, key: &FlowKey) -> bool {
        self.names(&[key])
    }

    /// The host and port are in one of `keys`, as either end; the protocol is theirs.
    fn names(&self, keys: &[&FlowKey]) -> bool {
        let names_host = |host| keys.iter().any(|k| k.src == host || k.dst == host);
        let names_port = |port| {
            keys.iter()
                .any(|k| k.src_port == port || k.dst_port == port)
        };
        self.host.is_none_or(names_host)
            && self.port.is_none_or(names_port)
            && self.protocol.is_none_or(|p| p == keys[0].protocol)
    }
}

/// One flow as the operator sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    /// As the first packet travelled, before translation.
    pub original: FlowKey,
    /// As replies travel, before translation: where NAT applies, it differs from the
    /// reversed original (a masqueraded flow's replies come to the NAT address and port).
    pub reply: FlowKey,
    /// TCP flows only.
    pub tcp_state: Option<TcpState>,
    /// Nanoseconds until the flow times out unless a packet refreshes it.
    pub expires_in_ns: u64,
    /// A reply has been seen.
    pub replied: bool,
    /// Two-way traffic seen: early drop keeps it.
    pub assured: bool,
    /// Admitted by a port forward.
    pub forwarded: bool,
}

/// Where a slice of a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkStep {
    /// The slot to resume at; None when the table has been walked to its end.
    pub next: Option<usize>,
    /// Flows that matched in this slice (listed, or cleared).
    pub matched: usize,
}

impl Pipeline {
    /// The arena slots a walk goes over: `from` runs from 0 to this.
    pub fn flow_capacity(&self) -> usize {
        self.stateful.flows.capacity()
    }

    /// The binding slots a NAT listing goes over (0 without NAT).
    pub fn nat_binding_capacity(&self) -> usize {
        self.stateful
            .nat
            .as_ref()
            .map_or(0, |nat| nat.binding_capacity())
    }

    /// Lists the NAT bindings of internal host `host` (every host's, if None) in binding slots
    /// `from..from + slots`, as [`list_flows`](Self::list_flows) lists flows: into `out`'s
    /// spare capacity, every match counted.
    pub fn list_nat(
        &self,
        host: Option<Ipv4Addr>,
        from: usize,
        slots: usize,
        out: &mut Vec<BindingView>,
    ) -> WalkStep {
        let (range, next) = slice(from, slots, self.nat_binding_capacity());
        let mut matched = 0;
        if let Some(nat) = &self.stateful.nat {
            nat.bindings_in(range, |binding| {
                if host.is_none_or(|host| binding.internal.0 == host) {
                    matched += 1;
                    if out.len() < out.capacity() {
                        out.push(binding);
                    }
                }
            });
        }
        WalkStep { next, matched }
    }

    /// Lists the live flows matching `filter` in arena slots `from..from + slots`: each is
    /// appended to `out` while `out` has spare capacity (never beyond: no allocation), and
    /// counted in [`WalkStep::matched`] either way.
    pub fn list_flows(
        &self,
        filter: &FlowFilter,
        from: usize,
        slots: usize,
        now_ns: u64,
        out: &mut Vec<FlowRecord>,
    ) -> WalkStep {
        let (range, next) = slice(from, slots, self.stateful.flows.capacity());
        let mut matched = 0;
        for slot in range {
            let Some((_, flow)) = self.stateful.flows.exported_at(slot, now_ns) else {
                continue;
            };
            let tcp_state = flow.tcp.map(|tcp| tcp.state());
            if !filter.matches(&flow.original, &flow.reply, tcp_state) {
                continue;
            }
            matched += 1;
            if out.len() < out.capacity() {
                out.push(FlowRecord {
                    original: flow.original,
                    reply: flow.reply,
                    tcp_state,
                    expires_in_ns: flow.remaining_ns,
                    replied: flow.replied,
                    assured: flow.assured,
                    forwarded: flow.data.forwarded,
                });
            }
        }
        WalkStep { next, matched }
    }

    /// Ends the live flows matching `filter` in arena slots `from..from + slots`, as an
    /// expiry would: their NAT bindings are released and their content scanners forgotten.
    /// A packet of such a flow afterwards is a new flow, judged by today's rules.
    pub fn clear_flows(
        &mut self,
        filter: &FlowFilter,
        from: usize,
        slots: usize,
        now_ns: u64,
    ) -> WalkStep {
        let (range, next) = slice(from, slots, self.stateful.flows.capacity());
        let mut matched = 0;
        for slot in range {
            let Some((id, flow)) = self.stateful.flows.exported_at(slot, now_ns) else {
                continue;
            };
            if !filter.matches(&flow.original, &flow.reply, flow.tcp.map(|tcp| tcp.state())) {
                continue;
            }
            self.stateful.end_flow(id);
            matched += 1;
        }
        if matched > 0 {
            self.publish_table_stats();
        }
        WalkStep { next, matched }
    }
}

/// The slots `from..from + slots` within `capacity`, and where the walk resumes after them
/// (None: at the end).
fn slice(from: usize, slots: usize, capacity: usize) -> (std::ops::Range<usize>, Option<usize>) {
    let end = from.saturating_add(slots).min(capacity);
    (from.min(end)..end, (end < capacity).then_some(end))
}

//! What a worker's tables say of a packet before the pipeline runs it, for `gateway ctl
//! trace`: its flow (or that it would start one), and for a new flow the firewall's decision
//! and the rule that made it. Read-only, and only ever asked for traced packets.

use crate::flow::{Direction, FlowKey};
use crate::pipeline::fast_path::frame_key;
use crate::pipeline::stage::Ingress;
use crate::pipeline::Pipeline;
use crate::state::conntrack::TcpState;
use crate::state::firewall::{Action, ZoneId};
use crate::wire::{ethernet, ipv4, Ipv4Packet};

/// The firewall's decision on a flow a packet would start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirewallDecision {
    pub from: ZoneId,
    pub to: ZoneId,
    pub action: Action,
    /// The deciding rule's index in the router config's rule set; None: the zone pair's
    /// policy decided.
    pub rule: Option<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowMatch {
    /// The packet's flow, which way it travels in it, and its TCP state.
    Existing {
        direction: Direction,
        tcp_state: Option<TcpState>,
    },
    /// No flow yet: the packet would start one through a port forward (its rules are checked
    /// after the translation).
    NewForwarded,
    /// No flow yet: the packet would start one, as `firewall` decides (None: no firewall
    /// decision applies, e.g. the destination is unrouted).
    New { firewall: Option<FirewallDecision> },
}

/// What the tables say of one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The packet's 5-tuple; None for frames without one (ARP, fragments, malformed).
    pub key: Option<FlowKey>,
    /// None when the packet has no key.
    pub flow: Option<FlowMatch>,
}

impl Pipeline {
    /// Explains `frame`, received on `ingress`, without changing anything.
    pub fn explain(&self, frame: &[u8], ingress: Ingress) -> Explanation {
        let Some(key) = frame_key(frame) else {
            return Explanation {
                key: None,
                flow: None,
            };
        };
        let flow = match self.stateful.flows.lookup(&key) {
            Some((id, direction)) => FlowMatch::Existing {
                direction,
                tcp_state: self.stateful.flows.tcp_state(id),
            },
            None => self.new_flow_decision(frame, ingress, &key),
        };
        Explanation {
            key: Some(key),
            flow: Some(flow),
        }
    }

    fn new_flow_decision(&self, frame: &[u8], ingress: Ingress, key: &FlowKey) -> FlowMatch {
        let router = &*self.router;
        let stateful = &router.stateful;
        if stateful
            .port_forward(&router.interfaces, key.protocol, key.dst, key.dst_port)
            .is_some()
        {
            return FlowMatch::NewForwarded;
        }
        let Some(&from) = stateful.zones.get(usize::from(ingress.port)) else {
            return FlowMatch::New { firewall: None };
        };
        let to = if router.local_port(key.dst).is_some() {
            Some(ZoneId::LOCAL)
        } else {
            router
                .routes
                .lookup(key.dst)
                .and_then(|hop| stateful.zones.get(usize::from(hop.port)).copied())
        };
        let Some(to) = to else {
            return FlowMatch::New { firewall: None };
        };
        let icmp_type = (key.protocol == ipv4::protocol::ICMP)
            .then(|| icmp_type_of(frame))
            .flatten();
        let (action, rule) = stateful.firewall.evaluate(from, to, key, icmp_type);
        FlowMatch::New {
            firewall: Some(FirewallDecision {
                from,
                to,
                action,
                rule,
            }),
        }
    }
}

/// The ICMP type of an IPv4 frame that `frame_key` accepted, read as the stateful stage
/// reads it (the first byte of the IPv4 payload).
fn icmp_type_of(frame: &[u8]) -> Option<u8> {
    let ip = Ipv4Packet::new_checked(frame.get(ethernet::HEADER_LEN..)?).ok()?;
    ip.payload().first().copied()
}

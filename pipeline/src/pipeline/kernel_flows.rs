//! Connections the gateway's own kernel opens through a twin (dnsmasq forwarding DNS upstream,
//! an NTP query, FRR's BGP session, a package download), tracked as flows from the `local`
//! zone so that their replies come back and nothing unsolicited does, with no hand-written
//! rule.
//!
//! The control thread, which reads the twins, picks the kernel's frames to track
//! ([`kernel_flow`]) and hands each to the worker that owns its flow
//! ([`crate::pipeline::stateful::flow_owner`]). That worker admits a new flow under the
//! `local -> zone` policy (accept unless the operator says otherwise), masquerades it where
//! the interface masquerades (keeping the kernel's address and port where the pool can hold
//! them for it, else a port from the pool as for a LAN host, so that a reply is never
//! ambiguous with a LAN host's binding), and transmits it as the kernel framed it. A
//! reply matches the flow on its way in and goes to the twin
//! ([`StatefulStage::process`](crate::pipeline::stateful::StatefulStage)).
//!
//! Toward a zone that may reach the gateway anyway (an inside zone, by default) the kernel's
//! frames are not tracked: its answers to that zone's queries (dnsmasq's, to every LAN host)
//! would each open a flow and charge the gateway's address as a host.

use crate::flow::FlowKey;
use crate::packet::PacketBuf;
use crate::pipeline::config::RouterConfig;
use crate::pipeline::stage::{translate, Stage};
use crate::pipeline::stateful::{admit, StatefulStage};
use crate::pipeline::Pipeline;
use crate::state::conntrack::{Probe, TcpSegment, Track};
use crate::state::firewall::{Action, ZoneId};
use crate::state::firewall_log::Decision;
use crate::state::flow_data::{release, Binding, ContentState, FlowData, SynProxy};
use crate::verdict::{DropReason, Verdict};
use crate::wire::udp::{DHCP_CLIENT_PORT, DHCP_SERVER_PORT};
use crate::wire::{ethernet, icmp, ipv4, EthernetFrame, IcmpPacket, Ipv4Packet};

/// The flow key of a frame the kernel sent on interface `port`'s twin, if the frame is one to
/// track: IPv4 from one of the gateway's addresses to a unicast address not its own, TCP, UDP
/// or an echo request, out of an interface whose zone the zone pairs' default keeps from
/// reaching the gateway. Not the DHCP client's exchange with its server (its answers are
/// punted on their own terms, `punt_dhcp_answer`), nor a fragment or an ICMP error (the
/// kernel's answers to what reached it), nor anything from a port a port forward takes.
pub fn kernel_flow(router: &RouterConfig, port: u16, frame: &[u8]) -> Option<FlowKey> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    if frame.ethertype() != ethernet::ethertype::IPV4 {
        return None;
    }
    let stateful = &router.stateful;
    let zone = *stateful.zones.get(usize::from(port))?;
    if stateful.firewall.policy().default_for(zone, ZoneId::LOCAL) == Action::Accept {
        return None;
    }
    let ip = Ipv4Packet::new_checked(frame.payload()).ok()?;
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if router.local_port(src).is_none()
        || router.local_port(dst).is_some()
        || dst.is_broadcast()
        || dst.is_multicast()
        || router
            .interfaces
            .iter()
            .any(|iface| iface.is_directed_broadcast(dst))
    {
        return None;
    }
    let key = FlowKey::from_ipv4(&ip).ok()?;
    // A port the operator forwards is not the kernel's to open from: its replies would be
    // taken for the forward's (and owned by the forward's worker).
    if stateful
        .port_forward(&router.interfaces, key.protocol, key.src, key.src_port)
        .is_some()
    {
        return None;
    }
    let tracked = match key.protocol {
        ipv4::protocol::TCP => true,
        ipv4::protocol::UDP => (key.src_port, key.dst_port) != (DHCP_CLIENT_PORT, DHCP_SERVER_PORT),
        ipv4::protocol::ICMP => IcmpPacket::new_checked(ip.payload())
            .is_ok_and(|message| message.msg_type() == icmp::msg_type::ECHO_REQUEST),
        _ => false,
    };
    tracked.then_some(key)
}

impl Pipeline {
    /// A frame the kernel sent on interface `port`'s twin, handed to this worker by the
    /// control thread because [`kernel_flow`] picked it and this worker owns its flow: it
    /// leaves by `port`, tracked and translated, or is dropped and counted. The control
    /// thread's config may be older or newer than this worker's: a frame this config would
    /// not track leaves untouched, as it would have.
    pub fn process_kernel_frame(&mut self, pkt: &mut PacketBuf, port: u16, now_ns: u64) -> Verdict {
        let verdict = match kernel_flow(&self.router, port, pkt.bytes()) {
            None => Verdict::Transmit { port },
            Some(key) => {
                match self
                    .stateful
                    .track_kernel_frame(&self.router, pkt, key, port, now_ns)
                {
                    Stage::Done(verdict) => verdict,
                    _ => Verdict::Transmit { port },
                }
            }
        };
        self.counters.count(&verdict);
        verdict
    }
}

impl StatefulStage {
    /// Masqueraded from the gateway's own address there, the kernel's port is kept where no
    /// LAN host's binding can ever take it (outside the pool's range: `Some(None)`) or the
    /// pool binds exactly it to the flow (`Some(Some(binding))`), so that a service on the
    /// twin answers from its own port (a VPN endpoint, NTP) and what the kernel opens leaves
    /// as it chose. None: the port is a LAN host's or a forward's; the flow is translated.
    fn kept_kernel_source(&mut self, key: &FlowKey) -> Option<Option<Binding>> {
        let pool = self.nat.as_mut()?;
        if !pool.has_address(key.src) {
            return None;
        }
        if !pool.ports().contains(&key.src_port) {
            return Some(None);
        }
        let endpoint = (key.src, key.src_port);
        let new = pool
            .lookup_internal(key.protocol, endpoint, key.src)
            .is_none();
        pool.restore(key.protocol, endpoint, endpoint).ok()?;
        if new {
            // As `allocate` logs a new binding (`restore` is the state snapshot's, unlogged).
            pool.log_created(key.protocol, endpoint, endpoint);
        }
        Some(Some((key.protocol, key.src, key.src_port)))
    }

    /// The kernel's frame with `key`, leaving by `port`: a packet of a flow it opened, or
    /// the first of a new one, admitted under `local -> zone` and masqueraded where `port`
    /// masquerades. A TCP segment that opens nothing and belongs to no flow (the kernel's
    /// side of a connection made to it, or a reset) leaves untracked, as a frame toward a
    /// zone that may reach the gateway does.
    pub(crate) fn track_kernel_frame(
        &mut self,
        router: &RouterConfig,
        pkt: &mut PacketBuf,
        key: FlowKey,
        port: u16,
        now_ns: u64,
    ) -> Stage {
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let segment = TcpSegment::parse(&ip);
        let icmp_type = (key.protocol == ipv4::protocol::ICMP)
            .then(|| ip.payload().first().copied())
            .flatten();
        let hash = self.flows.hash(&key);
        let mut found = self.flows.probe(&key, hash);
        // A new connection on the tuple of a closed one (RFC 9293 3.6.1): a new flow.
        if let Probe::Found(id, _) = found {
            if segment.as_ref().is_some_and(TcpSegment::is_bare_syn) && self.flows.is_closed(id) {
                self.end_flow(id);
                found = self.flows.probe(&key, hash);
            }
        }
        let vacancy = match found {
            Probe::Found(id, direction) => {
                // Rules reloaded since, or the address it was masqueraded to gone.
                if let Some(verdict) = self.recheck(router, id) {
                    return Stage::Done(verdict);
                }
                if let Track::Invalid(_) = self.flows.track(id, direction, segment.as_ref(), now_ns)
                {
                    return Stage::Done(Verdict::Drop(DropReason::ConntrackInvalid));
                }
                let target = self.flows.key(id, direction.opposite()).reversed();
                return translate(pkt, &key, &target);
            }
            Probe::Vacant(vacancy) => vacancy,
        };
        if key.protocol == ipv4::protocol::TCP
            && !segment.as_ref().is_some_and(TcpSegment::is_bare_syn)
        {
            return Stage::Forward(None);
        }
        let stateful = &router.stateful;
        let to = stateful.zones[usize::from(port)];
        // The kernel's answer to a datagram a rule lets in from that zone (a DNS, NTP or VPN
        // service on the twin): leaves as it is, as its TCP answers do, rather than open a
        // flow per answer charged to the gateway's address.
        if key.protocol == ipv4::protocol::UDP {
            let asked = key.reversed();
            let (action, _) = stateful.firewall.evaluate(to, ZoneId::LOCAL, &asked, None);
            if action == Action::Accept {
                return Stage::Forward(None);
            }
        }
        let (action, rule) = admit(
            stateful,
            ZoneId::LOCAL,
            to,
            &key,
            (key.dst, key.dst_port),
            false,
            icmp_type,
        );
        let decision = Decision {
            action,
            from: ZoneId::LOCAL,
            to,
            ingress: port,
            egress: Some(port),
            forwarded_to: None,
            pinholed: false,
            from_kernel: true,
        };
        self.decided(stateful, rule, &key, decision, now_ns);
        if action != Action::Accept {
            return Stage::Done(Verdict::Drop(DropReason::FirewallDrop));
        }
        let (source, binding) = if !stateful.masquerade[usize::from(port)] {
            ((key.src, key.src_port), None)
        } else if let Some(binding) = self.kept_kernel_source(&key) {
            ((key.src, key.src_port), binding)
        } else {
            let address = router.interfaces[usize::from(port)].addr;
            match self.masquerade_source(&key, Some(address), None) {
                Ok(source) => source,
                Err(reason) => return Stage::Done(Verdict::Drop(reason)),
            }
        };
        let reply = crate::flow::reply_key(key.protocol, (key.dst, key.dst_port), source);
        let data = FlowData {
            binding,
            from_zone: ZoneId::LOCAL.0,
            to_zone: to.0,
            icmp_type,
            forwarded: false,
            generation: stateful.generation,
            content: ContentState::Allowed,
            syn_proxy: SynProxy::Off,
            shortcuts: Default::default(),
        };
        let StatefulStage { flows, nat, .. } = self;
        let inserted =
            flows.insert_vacant(vacancy, reply, data, segment.as_ref(), now_ns, |evicted| {
                release(nat, &evicted)
            });
        match inserted {
            Ok(id) => {
                self.inspector.forget(id.as_u32());
                translate(pkt, &key, &reply.reversed())
            }
            Err(error) => {
                release(&mut self.nat, &data);
                Stage::Done(Verdict::Drop(error.drop_reason()))
            }
        }
    }
}

//! The stateful stage between validation and routing: find or create the packet's flow,
//! admit new flows through the firewall, and translate addresses (masquerade, port forwards,
//! hairpin, ICMP errors per RFC 5508). Rules are consulted once per flow; an established
//! packet costs one table lookup, the TCP tracker and the rewrite.
//!
//! Flow ownership across workers: each flow lives on exactly one worker, which both of its
//! directions (and the ICMP errors and fragments about it) reach, whichever port and queue
//! they arrive on: see [`flow_owner`]. A packet that lands elsewhere is handed to its owner.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::counters::WorkerCounters;
use crate::features::content::{self, ContentInspector, ContentPolicy, DnsAction};
use crate::flow::{has_ports, reply_key, Direction, FlowKey, KeyError};
use crate::l3::icmp_error::IcmpError;
use crate::l3::route::NextHop;
use crate::packet::PacketBuf;
use crate::pipeline::config::RouterConfig;
use crate::pipeline::stage::{translate, FlowProbe, Ingress, Request, Stage, WallClock};
use crate::pipeline::track::{inspect_segment, track, TrackedPacket};
use crate::pipeline::uplinks::UplinkChoice;
use crate::state::conntrack::{FlowId, FlowTable, TcpSegment, Vacancy};
use crate::state::firewall::{Action, ZoneId};
use crate::state::firewall_log::{count_and_log, count_decision, Decision, FirewallLogger};
use crate::state::flow_data::{release, Binding, ContentState, FlowData, SynProxy};
use crate::state::nat::{self, AllocError, NatPool, Ownership};
use crate::state::syn_cookie::CookieJar;
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::udp::DNS_PORT;
use crate::wire::{
    ethernet, icmp, ipv4, EthernetAddress, IcmpPacket, Ipv4Packet, TcpPacket, UdpPacket,
};

/// One worker's stateful stage: its flow table, NAT pool and content scanners, and where the
/// worker sits among its peers. It reads the router config and counters it is lent and
/// returns what it decided ([`Stage`]), or what it needs done ([`Request`]); it never calls
/// back into the pipeline.
pub(crate) struct StatefulStage {
    pub(crate) flows: FlowTable<FlowData>,
    pub(crate) nat: Option<NatPool>,
    /// Scanners of TCP flows whose content is still being judged.
    pub(crate) inspector: ContentInspector,
    pub(crate) worker: u16,
    pub(crate) ownership: Ownership,
    pub(crate) wall_clock: WallClock,
    /// The SYN proxy's cookie key (`crate::pipeline::syn_proxy`).
    pub(crate) cookies: CookieJar,
    /// Where the decisions of rules marked `log = true` go (`[firewall.log]`).
    pub(crate) firewall_log: Option<FirewallLogger>,
}

impl StatefulStage {
    pub(crate) fn new(
        flows: FlowTable<FlowData>,
        nat: Option<NatPool>,
        worker: u16,
        ownership: Ownership,
    ) -> Self {
        StatefulStage {
            flows,
            nat,
            inspector: ContentInspector::new(content::DEFAULT_SLOTS),
            worker,
            ownership,
            wall_clock: WallClock::default(),
            cookies: CookieJar::new(),
            firewall_log: None,
        }
    }

    /// Rule `rule` (None: the zone pair's default, or the port forward the decision names)
    /// decided flow `key`'s first packet: its hit counter (or the pair's, or the forward's)
    /// counts it, and its decision is logged if the rule (the forward, the pair) says so.
    #[inline]
    pub(crate) fn decided(
        &mut self,
        stateful: &crate::pipeline::config::Stateful,
        rule: Option<usize>,
        key: &FlowKey,
        decision: Decision,
        now_ns: u64,
    ) {
        let when = (self.worker, self.unix_seconds(now_ns));
        let logger = self.firewall_log.as_mut();
        count_and_log(
            &stateful.firewall,
            logger,
            rule,
            key,
            decision,
            when,
            now_ns,
        );
    }

    /// Queues a decision counted already (`logged`: the name it is logged under, if it is),
    /// with the source masquerade gave the flow where it did.
    fn log_decision(
        &mut self,
        logged: Option<&Arc<str>>,
        key: &FlowKey,
        decision: Decision,
        translated_src: Option<(Ipv4Addr, u16)>,
        now_ns: u64,
    ) {
        if let (Some(name), Some(logger)) = (logged, self.firewall_log.as_mut()) {
            logger.record_translated(name, key, decision, translated_src, now_ns);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn process(
        &mut self,
        router: &RouterConfig,
        counters: &WorkerCounters,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Stage {
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let key = match FlowKey::from_ipv4(&ip) {
            Ok(key) => key,
            Err(KeyError::IcmpError) => return self.related_icmp_error(router, pkt, ingress),
            Err(KeyError::Fragment) => return self.later_fragment(router, &ip, ingress),
            Err(KeyError::Malformed) => return Stage::Done(Verdict::Drop(DropReason::MalformedL4)),
        };
        if let Some(worker) = self.foreign_owner(router, &key, ingress) {
            return Stage::Done(Verdict::Handoff { worker });
        }
        let segment = TcpSegment::parse(&ip);
        let icmp_type = if key.protocol == ipv4::protocol::ICMP {
            ip.payload().first().copied()
        } else {
            None
        };
        // The burst's probe of this key: its hash, and the table's answer if it looked.
        let probe = probe.filter(|probe| probe.key == key);
        let hash = probe.map_or_else(|| self.flows.hash(&key), |probe| probe.hash);
        let found = match probe.and_then(|probe| probe.found) {
            Some(found) => found,
            None => self.flows.probe(&key, hash),
        };
        let mut packet = Tracked4 {
            stage: self,
            router,
            counters,
            pkt,
            ingress,
            key,
            icmp_type,
            now_ns,
        };
        track(&mut packet, hash, found, segment, now_ns)
    }

    /// The last step of an established IPv4 packet: a LAN device's later DNS queries are
    /// filtered, a reply to the gateway's own connection goes to its kernel, and the rest is
    /// translated as its flow says.
    fn established(
        &mut self,
        packet: (&RouterConfig, &WorkerCounters, &mut PacketBuf, Ingress),
        key: &FlowKey,
        (id, direction): (FlowId, Direction),
    ) -> Stage {
        let (router, counters, pkt, ingress) = packet;
        if let Some(verdict) = self.filter_later_dns(router, counters, pkt, ingress, key, direction)
        {
            return Stage::Done(verdict);
        }
        let target = self.flows.key(id, direction.opposite()).reversed();
        if self.flows.data(id).from_zone == ZoneId::LOCAL.0 {
            return deliver_to_kernel(router, pkt, key, &target);
        }
        match translate(pkt, key, &target) {
            // A shortcut would not shift the sequence numbers.
            Stage::Forward(translation) if self.flows.data(id).syn_proxy != SynProxy::Off => {
                Stage::Forward(translation)
            }
            Stage::Forward(translation) => Stage::Established {
                translation,
                flow: id,
                direction,
            },
            done => done,
        }
    }

    /// A non-initial fragment carries no ports, so it cannot be matched to a flow. From the
    /// inside, toward a host the gateway does not translate for, it is forwarded as a router
    /// would; anything else (toward a NAT address, or from outside) is dropped and counted.
    fn later_fragment<T: AsRef<[u8]>>(
        &self,
        router: &RouterConfig,
        ip: &Ipv4Packet<T>,
        ingress: Ingress,
    ) -> Stage {
        let masquerade = &router.stateful.masquerade;
        let from_outside = masquerade[usize::from(ingress.port)];
        // Toward a masquerading interface it would leave with its inside source address.
        let to_outside = router
            .routes
            .lookup(ip.dst_addr())
            .is_some_and(|route| masquerade[usize::from(route.port)]);
        if from_outside || to_outside || router.local_port(ip.dst_addr()).is_some() {
            return Stage::Done(Verdict::Drop(DropReason::UntrackedFragment));
        }
        // Kept with the flow's first fragment, so a datagram's pieces leave in order.
        let owner = |ownership| {
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            address_owner(router, ownership, ip.protocol(), src, dst)
        };
        match ingress.foreign_owner(self.worker, self.ownership, owner) {
            Some(worker) => Stage::Done(Verdict::Handoff { worker }),
            None => Stage::Forward(None),
        }
    }

    /// The worker that owns `key`'s flow, when it is not this one.
    #[inline]
    fn foreign_owner(&self, router: &RouterConfig, key: &FlowKey, ingress: Ingress) -> Option<u16> {
        let owner = |ownership| flow_owner(router, ownership, key);
        ingress.foreign_owner(self.worker, self.ownership, owner)
    }

    /// After a reload with `recheck_established`, a flow admitted under older rules is
    /// checked once against the new ones; so is a copy synced from the HA peer, at the
    /// first packet this box forwards of it, which then becomes this box's own.
    pub(crate) fn recheck(&mut self, router: &RouterConfig, id: FlowId) -> Option<Verdict> {
        let stateful = &router.stateful;
        let data = *self.flows.data(id);
        if data.generation == stateful.generation {
            return None;
        }
        // On an uplink that went down (or was removed): ended, so that its host's next
        // connection takes an uplink that is up.
        if !router.uplinks.is_empty()
            && on_failed_uplink(
                router,
                (
                    self.flows.key(id, Direction::Original),
                    self.flows.key(id, Direction::Reply),
                ),
                &data,
            )
        {
            let data = self.flows.remove(id);
            release(&mut self.nat, &data);
            return Some(Verdict::Drop(DropReason::UplinkDown));
        }
        // Masqueraded to an address the gateway no longer has (its DHCP lease moved):
        // nothing would come back to it, and new flows take the new address.
        if let Some((_, external, _)) = data.binding {
            if !self
                .nat
                .as_ref()
                .is_some_and(|pool| pool.has_address(external))
            {
                let data = self.flows.remove(id);
                release(&mut self.nat, &data);
                return Some(Verdict::Drop(DropReason::NatAddressGone));
            }
        }
        if !stateful.recheck_established {
            // Checked once per config: a later config that rechecks has a new generation.
            self.keep_rechecked(id, stateful.generation);
            return None;
        }
        let original = self.flows.key(id, Direction::Original);
        // Where the flow's first packet went after a forward's translation.
        let reply = self.flows.key(id, Direction::Reply);
        let (from, to) = (ZoneId(data.from_zone), ZoneId(data.to_zone));
        let target = if data.forwarded {
            (reply.src, reply.src_port)
        } else {
            (original.dst, original.dst_port)
        };
        let (action, _) = admit(
            stateful,
            from,
            to,
            &original,
            target,
            data.forwarded,
            data.icmp_type,
        );
        if action == Action::Accept {
            self.keep_rechecked(id, stateful.generation);
            return None;
        }
        let data = self.flows.remove(id);
        release(&mut self.nat, &data);
        Some(Verdict::Drop(DropReason::FirewallRecheck))
    }

    /// A flow the recheck kept, now of `generation`. A synced copy becomes this box's own
    /// here: its binding enters this box's NAT log, whose deletion the log will show too.
    #[cold]
    #[inline(never)]
    fn keep_rechecked(&mut self, id: FlowId, generation: u32) {
        let data = self.flows.data_mut(id);
        let adopted = data.is_synced_copy();
        data.generation = generation;
        if let (true, Some((protocol, address, port)), Some(pool)) =
            (adopted, data.binding, self.nat.as_ref())
        {
            let original = self.flows.key(id, Direction::Original);
            pool.log_created(protocol, (original.src, original.src_port), (address, port));
        }
    }

    /// Ends a flow before its time, as an expiry would: its NAT binding released, its content
    /// scanner forgotten. For a closed TCP flow whose tuple a new connection reuses (RFC 9293
    /// 3.6.1), as Linux does: the new connection is a new flow, admitted by today's rules and
    /// forwards, with its content judged afresh (an old verdict must not pass or block a new
    /// stream) and its own NAT mapping; the binding is released first, so endpoint-independent
    /// mapping and port preservation hand the same external port back unless it has been
    /// taken. And for the operator's `clear flows`.
    pub(crate) fn end_flow(&mut self, id: FlowId) {
        let data = self.flows.remove(id);
        release(&mut self.nat, &data);
        self.inspector.forget(id.as_u32());
    }

    #[allow(clippy::too_many_arguments)]
    fn new_flow(
        &mut self,
        (router, counters, pkt, ingress): (&RouterConfig, &WorkerCounters, &mut PacketBuf, Ingress),
        vacancy: Vacancy,
        segment: Option<TcpSegment>,
        icmp_type: Option<u8>,
        now_ns: u64,
    ) -> Stage {
        let key = *vacancy.key();
        let stateful = &router.stateful;
        let interfaces = &router.interfaces;
        let forward = stateful.dnat_indexed(interfaces, &key);
        let dnat = forward.map(|(_, target)| target);
        let from = stateful.zones[usize::from(ingress.port)];
        let from_inside = !stateful.masquerade[usize::from(ingress.port)];
        let bare_syn = segment.as_ref().is_some_and(TcpSegment::is_bare_syn);
        // Under a flood, the SYN proxy's: a forward's SYN from outside.
        let cookie_due = bare_syn && dnat.is_some() && !from_inside && self.flows.half_open_full();
        if bare_syn && !cookie_due && !l4_checksum_ok(pkt) {
            return Stage::Done(Verdict::Drop(DropReason::L4Checksum));
        }
        if dnat.is_none() && router.local_port(key.dst).is_some() {
            let (action, rule) = stateful
                .firewall
                .evaluate(from, ZoneId::LOCAL, &key, icmp_type);
            let decision = Decision::to_gateway(action, from, ingress.port);
            self.decided(stateful, rule, &key, decision, now_ns);
            // The dataplane answers echo requests itself; other ICMP (the replies to the
            // kernel's own pings) is the kernel twin's, when the interface has one.
            let kernels = |icmp_type| {
                icmp_type != Some(icmp::msg_type::ECHO_REQUEST)
                    && router.punt.has_twin(ingress.port)
            };
            let verdict = match action {
                Action::Accept if key.protocol == ipv4::protocol::ICMP && !kernels(icmp_type) => {
                    Verdict::Control(ControlWork::LocalIcmp)
                }
                Action::Accept => router.deliver_locally(ingress.port),
                Action::Drop | Action::Reject => Verdict::Drop(DropReason::FirewallDrop),
            };
            return Stage::Done(verdict);
        }
        let (dst, dst_port) = dnat.unwrap_or((key.dst, key.dst_port));
        let Some((route, from_default)) = router.routes.lookup_from_default(dst) else {
            return Stage::Request(Request::IcmpError(IcmpError::NoRoute));
        };
        // With several uplinks, an inside host's flow toward the default route leaves by the
        // uplink their choice gives it: masqueraded to that uplink's address, which keeps it
        // there for its life (`RouterConfig::route_from`).
        let route = match from_default && from_inside && !router.uplinks.is_empty() {
            true => match uplink_route(router, &key, from) {
                Some(uplink) => uplink.unwrap_or(route),
                None => return Stage::Done(Verdict::Drop(DropReason::UplinkDown)),
            },
            false => route,
        };
        let egress = usize::from(route.port);
        let to = stateful.zones[egress];
        let (action, rule) = admit(
            stateful,
            from,
            to,
            &key,
            (dst, dst_port),
            dnat.is_some(),
            icmp_type,
        );
        let decision = Decision {
            action,
            from,
            to,
            ingress: ingress.port,
            egress: Some(route.port),
            forwarded_to: forward,
            pinholed: false,
            from_kernel: false,
        };
        let when = (self.worker, self.unix_seconds(now_ns));
        let logged = count_decision(&stateful.firewall, rule, &decision, when);
        // Masquerade toward an outside interface; hairpin: a LAN host reaching a forwarded
        // port must see replies come back through the gateway, so its source becomes ours.
        let hairpin = dnat.is_some() && !stateful.masquerade[usize::from(ingress.port)];
        // An accept is logged once its flow is admitted, with the source masquerade gave
        // it; a drop or reject now.
        if action != Action::Accept {
            self.log_decision(logged, &key, decision, None, now_ns);
        }
        match action {
            Action::Accept => {}
            Action::Drop => return Stage::Done(Verdict::Drop(DropReason::FirewallDrop)),
            Action::Reject => return Stage::Request(reject(&key, segment)),
        }
        if let (true, Some(syn)) = (cookie_due, segment) {
            let mtu_mss = interfaces[egress].mtu.saturating_sub(40);
            let mss = router
                .mss_limit(ingress.port, route.port)
                .map_or(mtu_mss, |limit| limit.min(mtu_mss));
            return self.answer_with_cookie(pkt, &key, &syn, mss, now_ns);
        }
        let mut segment = segment;
        let mut syn_proxy = SynProxy::Off;
        if let (Some(_), false, Some(tcp)) = (dnat, from_inside, segment) {
            if let Some((syn, state)) = self.open_by_cookie(pkt, &key, &tcp, now_ns) {
                segment = Some(syn);
                syn_proxy = state;
            }
        }
        // Parental control and keyword block apply to flows LAN devices open.
        let mut content = ContentState::Allowed;
        // Borrowed, not cloned: an Arc clone per new flow would be an atomic on a line every
        // worker shares.
        if let Some(policy) = stateful.content.as_deref() {
            if from_inside {
                let device = (key.src, Some(source_mac(pkt)));
                let unix_seconds = self.unix_seconds(now_ns);
                if !policy.device_allowed(device.0, device.1, unix_seconds) {
                    return Stage::Done(Verdict::Drop(DropReason::ParentalBlocked));
                }
                if key.protocol == ipv4::protocol::UDP && key.dst_port == DNS_PORT {
                    if let Some(verdict) = filter_dns(pkt, ingress, device, policy, counters) {
                        return Stage::Done(verdict);
                    }
                }
                if key.protocol == ipv4::protocol::TCP && policy.inspects_content() {
                    content = ContentState::Inspecting;
                }
            }
        }
        if stateful.masquerade[egress] && !interfaces[egress].has_address() {
            return Stage::Done(Verdict::Drop(DropReason::InterfaceUnaddressed));
        }
        let translated = if stateful.masquerade[egress] {
            self.masquerade_source(&key, Some(interfaces[egress].masquerade_addr()), None)
        } else if hairpin {
            let on = router.hairpin_nat_address();
            self.masquerade_source(&key, on, Some(interfaces[egress].masquerade_addr()))
        } else {
            Ok(((key.src, key.src_port), None))
        };
        let (source, binding) = match translated {
            Ok(translated) => translated,
            Err(reason) => return Stage::Done(Verdict::Drop(reason)),
        };
        let translated_src = (stateful.masquerade[egress] || hairpin).then_some(source);
        let StatefulStage { flows, nat, .. } = self;
        let reply = reply_key(key.protocol, (dst, dst_port), source);
        let data = FlowData {
            binding,
            from_zone: from.0,
            to_zone: to.0,
            icmp_type,
            forwarded: dnat.is_some(),
            generation: stateful.generation,
            content,
            syn_proxy,
            shortcuts: Default::default(),
        };
        let inserted =
            flows.insert_vacant(vacancy, reply, data, segment.as_ref(), now_ns, |evicted| {
                release(nat, &evicted)
            });
        if let Err(error) = inserted {
            release(nat, &data);
            return Stage::Done(Verdict::Drop(error.drop_reason()));
        }
        if let Ok(id) = inserted {
            // A recycled slot must not inherit an earlier flow's half-read stream.
            self.inspector.forget(id.as_u32());
        }
        self.log_decision(logged, &key, decision, translated_src, now_ns);
        if syn_proxy != SynProxy::Off {
            counters.syn_cookies_accepted.inc();
        }
        translate(pkt, &key, &reply.reversed())
    }

    /// The source a masqueraded flow `key` leaves with, and the NAT binding that holds it: a
    /// port of the pool on `address`, the address of the interface it leaves by (with several
    /// uplinks, each masquerades to its own), or for a protocol without ports (GRE, ESP) that
    /// address alone. Hairpin passes `shown`, the LAN interface's address the flow is shown
    /// with, and [`RouterConfig::hairpin_nat_address`] (None: the pool's first address): its
    /// port is taken there, whichever uplink its host's other flows use, so that no two
    /// hairpinned flows share a port on the address they are shown with.
    pub(crate) fn masquerade_source(
        &mut self,
        key: &FlowKey,
        address: Option<Ipv4Addr>,
        shown: Option<Ipv4Addr>,
    ) -> Result<((Ipv4Addr, u16), Option<Binding>), DropReason> {
        let Some(pool) = self.nat.as_mut() else {
            return Err(DropReason::NatPortsExhausted);
        };
        let Some(address) = address.or_else(|| pool.addresses().first().copied()) else {
            return Err(DropReason::NatPortsExhausted);
        };
        if !has_ports(key.protocol) {
            return Ok(((shown.unwrap_or(address), 0), None));
        }
        match pool.allocate_at(key.protocol, (key.src, key.src_port), address) {
            Ok((external, port)) => Ok((
                (shown.unwrap_or(external), port),
                Some((key.protocol, external, port)),
            )),
            Err(AllocError::HostLimit) => Err(DropReason::HostNatPortLimit),
            Err(AllocError::Exhausted) => Err(DropReason::NatPortsExhausted),
            // The interface's address is not yet the pool's (a lease just taken).
            Err(AllocError::UnknownAddress) => Err(DropReason::NatAddressGone),
        }
    }

    /// Feeds a client's payload to the content inspector; a blocked flow gets a TCP reset
    /// toward the client, and every later packet of it is dropped.
    fn inspect(
        &mut self,
        router: &RouterConfig,
        pkt: &PacketBuf,
        id: FlowId,
        key: &FlowKey,
        segment: Option<TcpSegment>,
    ) -> Option<Stage> {
        let policy = router.stateful.content.as_deref()?;
        let segment = segment?;
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let device = (key.src, Some(source_mac(pkt)));
        let flow = (id, &mut self.flows.data_mut(id).content);
        let blocked = inspect_segment(
            &mut self.inspector,
            policy,
            flow,
            device,
            &segment,
            ip.payload(),
        );
        blocked.then_some(Stage::Request(Request::Reset {
            key: *key,
            segment,
            reason: DropReason::ContentBlocked,
        }))
    }

    /// Every query of a DNS flow is checked, not only the one that created it: a resolver
    /// stub may send many names from one socket, so one 5-tuple carries them all. Only UDP to
    /// port 53 from a LAN device, with a content policy on, pays for it.
    #[inline]
    fn filter_later_dns(
        &self,
        router: &RouterConfig,
        counters: &WorkerCounters,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        key: &FlowKey,
        direction: Direction,
    ) -> Option<Verdict> {
        if key.protocol != ipv4::protocol::UDP
            || key.dst_port != DNS_PORT
            || direction != Direction::Original
        {
            return None;
        }
        let stateful = &router.stateful;
        if stateful.masquerade[usize::from(ingress.port)] {
            return None;
        }
        let policy = stateful.content.as_deref()?;
        let device = (key.src, Some(source_mac(pkt)));
        filter_dns(pkt, ingress, device, policy, counters)
    }

    /// The wall-clock second for `now_ns`, for parental time windows.
    pub(crate) fn unix_seconds(&self, now_ns: u64) -> i64 {
        self.wall_clock.unix_seconds(now_ns)
    }

    /// RFC 5508: an ICMP error about a translated flow is translated too, outer header and
    /// quoted datagram, so the sender of the quoted packet recognises it.
    fn related_icmp_error(
        &mut self,
        router: &RouterConfig,
        pkt: &mut PacketBuf,
        ingress: Ingress,
    ) -> Stage {
        let ip_bytes = &pkt.bytes()[ethernet::HEADER_LEN..];
        let Some(quoted) = nat::quoted_flow_key(ip_bytes) else {
            return Stage::Done(Verdict::Drop(DropReason::MalformedL4));
        };
        // The error travels against the quoted datagram: as if it were a reply to it.
        let as_reply = quoted.reversed();
        if let Some(worker) = self.foreign_owner(router, &as_reply, ingress) {
            return Stage::Done(Verdict::Handoff { worker });
        }
        let Some((id, direction)) = self.flows.lookup(&as_reply) else {
            return Stage::Done(Verdict::Drop(DropReason::UnrelatedIcmpError));
        };
        // How the quoted datagram's sender sent it, before the gateway translated it.
        let sent = self.flows.key(id, direction.opposite());
        // About a connection the gateway's kernel opened: its twin's, once translated.
        let done = if self.flows.data(id).from_zone == ZoneId::LOCAL.0 {
            Stage::Done(kernel_delivery(router, sent.src))
        } else {
            Stage::Forward(None)
        };
        let outer = Ipv4Packet::new_unchecked(ip_bytes);
        let outer_dst = (outer.dst_addr() != sent.src).then_some(sent.src);
        let outer_src =
            (outer.src_addr() == quoted.dst && quoted.dst != sent.dst).then_some(sent.dst);
        let inner_src = ((quoted.src, quoted.src_port) != (sent.src, sent.src_port))
            .then_some((sent.src, sent.src_port));
        let inner_dst = ((quoted.dst, quoted.dst_port) != (sent.dst, sent.dst_port))
            .then_some((sent.dst, sent.dst_port));
        if outer_dst.is_none() && outer_src.is_none() && inner_src.is_none() && inner_dst.is_none()
        {
            return done;
        }
        let ip_bytes = &mut pkt.bytes_mut()[ethernet::HEADER_LEN..];
        // An ICMP error is never answered with one, so it needs no `Translation`.
        match nat::rewrite_icmp_error(ip_bytes, outer_dst, outer_src, inner_src, inner_dst) {
            Ok(()) => done,
            Err(_) => Stage::Done(Verdict::Drop(DropReason::MalformedL4)),
        }
    }
}

/// One IPv4 packet in the stateful stage, for [`track`]: the worker's stage, the router
/// config and counters it is lent, the packet, and what [`StatefulStage::process`] parsed.
struct Tracked4<'a, 'p> {
    stage: &'a mut StatefulStage,
    router: &'a RouterConfig,
    counters: &'a WorkerCounters,
    pkt: &'a mut PacketBuf<'p>,
    ingress: Ingress,
    key: FlowKey,
    icmp_type: Option<u8>,
    now_ns: u64,
}

impl TrackedPacket for Tracked4<'_, '_> {
    type Key = FlowKey;
    type Data = FlowData;
    type Request = Request;

    #[inline]
    fn flows(&mut self) -> &mut FlowTable<FlowData> {
        &mut self.stage.flows
    }

    fn checksum_ok(&self) -> bool {
        l4_checksum_ok(self.pkt)
    }

    fn end_flow(&mut self, id: FlowId) {
        self.stage.end_flow(id);
    }

    fn new_flow(&mut self, vacancy: Vacancy, segment: Option<TcpSegment>) -> Stage {
        let Tracked4 {
            router,
            counters,
            ingress,
            icmp_type,
            now_ns,
            ..
        } = *self;
        let packet = (router, counters, &mut *self.pkt, ingress);
        self.stage
            .new_flow(packet, vacancy, segment, icmp_type, now_ns)
    }

    #[inline]
    fn segment_to_track(
        &mut self,
        id: FlowId,
        direction: Direction,
        segment: Option<TcpSegment>,
    ) -> Result<Option<TcpSegment>, Stage> {
        if self.stage.flows.data(id).syn_proxy == SynProxy::Off {
            return Ok(segment);
        }
        self.stage
            .splice(self.pkt, id, direction, segment, self.now_ns)
    }

    #[inline]
    fn recheck(
        &mut self,
        id: FlowId,
        direction: Direction,
        segment: Option<TcpSegment>,
    ) -> Option<Stage> {
        let uplinks = &self.router.uplinks;
        // The flow's own tuple, should its uplink's failure end it on the server's segment:
        // read before the flow goes, and only then.
        let client = (!uplinks.is_empty()
            && direction == Direction::Reply
            && segment.is_some()
            && uplinks.reset_on_down
            && self.stage.flows.data(id).generation != self.router.stateful.generation)
            .then(|| self.stage.flows.key(id, Direction::Original));
        let verdict = self.stage.recheck(self.router, id)?;
        // The LAN client of a flow whose uplink went down is told at once, whichever end
        // sent the packet that ended it, so that it reconnects (by another uplink) rather
        // than wait out its timeouts.
        let (Verdict::Drop(DropReason::UplinkDown), Some(segment), true) =
            (verdict, segment, uplinks.reset_on_down)
        else {
            return Some(Stage::Done(verdict));
        };
        let reason = DropReason::UplinkDown;
        let request = match (direction, client) {
            (Direction::Original, _) => Request::Reset {
                key: self.key,
                segment,
                reason,
            },
            (Direction::Reply, Some(client)) => Request::ResetReceiver {
                key: client,
                segment,
                reason,
            },
            (Direction::Reply, None) => return Some(Stage::Done(verdict)),
        };
        Some(Stage::Request(request))
    }

    fn inspect(&mut self, id: FlowId, segment: Option<TcpSegment>) -> Option<Stage> {
        self.stage
            .inspect(self.router, self.pkt, id, &self.key, segment)
    }

    #[inline]
    fn established(&mut self, id: FlowId, direction: Direction) -> Stage {
        let packet = (self.router, self.counters, &mut *self.pkt, self.ingress);
        self.stage.established(packet, &self.key, (id, direction))
    }
}

/// The next hop of the uplink a new flow `key` from zone `from` toward the default route
/// leaves by ([`crate::pipeline::uplinks`]): `Some(None)` when no uplink takes it (the
/// routing table's default route then does), None when its policy refuses it.
fn uplink_route(router: &RouterConfig, key: &FlowKey, from: ZoneId) -> Option<Option<NextHop>> {
    let uplinks = &router.uplinks;
    match uplinks.choose(key, from) {
        UplinkChoice::Uplink(index) => Some(uplinks.next_hop(uplinks.port(index))),
        UplinkChoice::None { refused: true } => None,
        UplinkChoice::None { refused: false } => Some(None),
    }
}

/// Whether a flow (`original`, `reply`, `data`) meets the outside on an uplink that is to
/// end its flows now (down, with `routing.on_uplink_down = "end"`): the uplink whose address
/// it was masqueraded to (its binding's, or for GRE and ESP its reply's destination), or, for
/// a port forward's flow from outside, the one whose address it came to. Not a hairpinned
/// flow (a forward's, with a binding), which never crosses an uplink, nor one the gateway's
/// own kernel opened: that is how its health checks probe a down uplink.
fn on_failed_uplink(
    router: &RouterConfig,
    (original, reply): (FlowKey, FlowKey),
    data: &FlowData,
) -> bool {
    if data.from_zone == ZoneId::LOCAL.0 {
        return false;
    }
    let address = match (data.binding, data.forwarded) {
        (Some(_), true) => return false,
        (Some((_, external, _)), false) => external,
        (None, true) => original.dst,
        (None, false) => reply.dst,
    };
    router
        .local_port(address)
        .is_some_and(|port| router.uplinks.ends_flow_on(port))
}

/// The firewall's reject: a TCP RST for TCP (never in answer to a RST, which the pipeline
/// sees to), ICMP administratively prohibited otherwise. Both are rate-limited like ICMP
/// errors.
fn reject(key: &FlowKey, segment: Option<TcpSegment>) -> Request {
    match segment {
        Some(segment) => Request::Reset {
            key: *key,
            segment,
            reason: DropReason::FirewallReject,
        },
        None => Request::IcmpError(IcmpError::AdminProhibited),
    }
}

/// A reply to a connection the gateway's kernel opened ([`crate::pipeline::kernel_flows`]),
/// translated back: the twin of the interface whose address it is addressed to takes it.
fn deliver_to_kernel(
    router: &RouterConfig,
    pkt: &mut PacketBuf,
    key: &FlowKey,
    target: &FlowKey,
) -> Stage {
    match translate(pkt, key, target) {
        Stage::Forward(_) => Stage::Done(kernel_delivery(router, target.dst)),
        done => done,
    }
}

/// To the twin of the interface that has `address`.
fn kernel_delivery(router: &RouterConfig, address: Ipv4Addr) -> Verdict {
    match router.local_port(address) {
        Some(port) => router.deliver_locally(port),
        // The address went away with a DHCP lease.
        None => Verdict::Drop(DropReason::LocalDelivery),
    }
}

/// The worker that owns the flow `key` travels in, the same from either direction of the
/// flow, before and after translation, so both directions meet on one worker:
/// - toward a port forward: the forward target's host;
/// - toward one of the gateway's own addresses: the destination port's class (masquerade and
///   hairpin replies carry a NAT port the owner allocated from its own classes);
/// - otherwise (routed, or on its way to be masqueraded): the inside host, where exactly one
///   end is inside (its route leaves by an interface that does not masquerade), so that all
///   of a host's masqueraded flows share one worker's NAT pool (endpoint-independent mapping)
///   and its per-host limits; where both ends are inside (a routed DMZ) or neither (transit
///   between outside links), a symmetric hash of both addresses.
///
/// Only addresses, never the ingress port, decide the last case: the two directions of a
/// routed flow arrive on different ports.
pub fn flow_owner(router: &RouterConfig, ownership: Ownership, key: &FlowKey) -> u16 {
    let stateful = &router.stateful;
    if let Some(forward) =
        stateful.port_forward(&router.interfaces, key.protocol, key.dst, key.dst_port)
    {
        return ownership.host_owner(forward.to);
    }
    if router.local_port(key.dst).is_some() {
        // A masqueraded protocol without ports (GRE, ESP) keeps its outside peer's address
        // alone: its replies name nothing else.
        if !has_ports(key.protocol) {
            return ownership.host_owner(key.src);
        }
        return ownership.port_owner(key.dst_port);
    }
    if router.local_port(key.src).is_some() {
        // A connection the gateway's kernel opens, as its replies above name it: by the
        // kernel's port, or (masqueraded) by a port of the owner's own share of the pool.
        if !has_ports(key.protocol) {
            return ownership.host_owner(key.dst);
        }
        return ownership.port_owner(key.src_port);
    }
    address_owner(router, ownership, key.protocol, key.src, key.dst)
}

/// The owner of traffic between two addresses that are not the gateway's: see [`flow_owner`].
/// Non-initial fragments, which carry no ports, are owned by it too.
pub(crate) fn address_owner(
    router: &RouterConfig,
    ownership: Ownership,
    protocol: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) -> u16 {
    let inside = |addr| {
        router.routes.lookup(addr).is_some_and(|route| {
            router.stateful.masquerade.get(usize::from(route.port)) == Some(&false)
        })
    };
    if !has_ports(protocol) {
        // A masqueraded flow without ports is answered to the gateway's address by its
        // outside peer alone (see `flow_owner`): the outside end owns such flows, the
        // destination first, since a flow toward the outside is the one masquerade
        // translates.
        return match (inside(src), inside(dst)) {
            (_, false) => ownership.host_owner(dst),
            (false, true) => ownership.host_owner(src),
            (true, true) => ownership.pair_owner(src, dst),
        };
    }
    match (inside(src), inside(dst)) {
        (true, false) => ownership.host_owner(src),
        (false, true) => ownership.host_owner(dst),
        _ => ownership.pair_owner(src, dst),
    }
}

/// The firewall's verdict on a new flow from zone `from` to zone `to`. Rules see the flow as
/// it leaves, after a port forward's translation (`target`: the forward's host and port, as
/// Linux's forward chain sees it after DNAT). A forward is open unless a rule says otherwise:
/// only a matching rule, never the zone pair's default, decides a forwarded flow, so that a
/// rule can limit a forward to some sources while forwards without rules work as configured.
/// Returns the action and the rule that decided it (`None`: the zone pair's default).
pub(crate) fn admit(
    stateful: &crate::pipeline::config::Stateful,
    from: ZoneId,
    to: ZoneId,
    key: &FlowKey,
    (dst, dst_port): (Ipv4Addr, u16),
    forwarded: bool,
    icmp_type: Option<u8>,
) -> (Action, Option<usize>) {
    let leaving = FlowKey {
        dst,
        dst_port,
        ..*key
    };
    match stateful.firewall.evaluate(from, to, &leaving, icmp_type) {
        (_, None) if forwarded => (Action::Accept, None),
        decided => decided,
    }
}

/// The packet's TCP, UDP (a zero UDP checksum is "none", which IPv4 allows) or ICMP checksum
/// is right, or the NIC said so on receipt. Other protocols, and first fragments (whose
/// checksum covers data not here), pass unchecked. Call before the packet is rewritten.
fn l4_checksum_ok(pkt: &PacketBuf) -> bool {
    if pkt.l4_checksum_good() {
        return true;
    }
    let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
    if ip.more_frags() {
        return true;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    match ip.protocol() {
        ipv4::protocol::TCP => TcpPacket::new_checked(ip.payload())
            .is_ok_and(|segment| segment.verify_checksum(src, dst)),
        ipv4::protocol::UDP => UdpPacket::new_checked(ip.payload())
            .is_ok_and(|datagram| datagram.verify_checksum(src, dst)),
        ipv4::protocol::ICMP => {
            IcmpPacket::new_checked(ip.payload()).is_ok_and(|message| message.verify_checksum())
        }
        _ => true,
    }
}

/// The sender's MAC: parental policies may name devices by it.
pub(crate) fn source_mac(pkt: &PacketBuf) -> EthernetAddress {
    crate::wire::EthernetFrame::new_unchecked(pkt.bytes()).src_addr()
}

/// A DNS query for a blocked name: answered NXDOMAIN from the address asked (or dropped,
/// as configured), and never forwarded.
fn filter_dns(
    pkt: &mut PacketBuf,
    ingress: Ingress,
    device: (Ipv4Addr, Option<EthernetAddress>),
    policy: &ContentPolicy,
    counters: &WorkerCounters,
) -> Option<Verdict> {
    let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    content::dns_query_blocked(policy, device, udp.payload())?;
    Some(answer_blocked_dns(pkt, ingress, policy, counters))
}

/// A DNS query (IPv4 or IPv6) for a blocked name: answered NXDOMAIN from the address asked,
/// back out of the port it came in by, or dropped, as `policy` says. Counted as blocked
/// content either way (the answer here, the drop by the caller).
pub(crate) fn answer_blocked_dns(
    pkt: &mut PacketBuf,
    ingress: Ingress,
    policy: &ContentPolicy,
    counters: &WorkerCounters,
) -> Verdict {
    if policy.dns_action() == DnsAction::Drop {
        return Verdict::Drop(DropReason::ContentBlocked);
    }
    let len = pkt.len();
    let Some(reply_len) = content::write_dns_nxdomain_reply(pkt.room_mut(), len) else {
        return Verdict::Drop(DropReason::ContentBlocked);
    };
    pkt.set_len(reply_len);
    counters.record_drop(DropReason::ContentBlocked);
    Verdict::Transmit { port: ingress.port }
}

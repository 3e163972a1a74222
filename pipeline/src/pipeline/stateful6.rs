//! The stateful stage for IPv6: connection tracking and the firewall's zone policy over the
//! worker's IPv6 flow table, a table of its own so that IPv4's keys stay 13 bytes (see
//! [`FlowKey6`]). There is no NAT66: an IPv6 flow is admitted or not, never translated.
//!
//! RFC 6092's simple security by default: a new flow is admitted by the firewall's rules
//! that apply to IPv6 (those without IPv4 prefixes), else by the policy of its zone pair
//! (`[firewall.policy]`: the LAN's flows out accepted, the WAN's in dropped) or a pinhole to
//! an inside host's service (`RouterConfig::pinholes6`); replies and ICMPv6 errors about a
//! tracked flow pass (RFC 4890 4.3.1), and nothing else does. A reject answers with ICMPv6
//! "administratively prohibited".
//!
//! Parental control and keyword block apply to the flows LAN devices open, as for IPv4
//! (`crate::pipeline::stateful`): a device is its MAC and the IPv4 address of that MAC
//! ([`Client6`]), its DNS queries over UDP are checked one by one, and its TCP flows are
//! inspected (SNI, Host, DNS over TCP) by a content inspector of this stage's own, the flow
//! ids of the IPv6 table being another numbering than IPv4's.
//!
//! Ownership: both directions of an IPv6 flow, its fragments and the errors about it belong
//! to the worker a symmetric hash of its two addresses names ([`Ownership::pair_owner6`]):
//! without NAT, neither end's address changes on the way.

use crate::features::content::{self, ContentInspector, ContentPolicy, Device};
use crate::flow::{Direction, FlowKey6, KeyError};
use crate::l3::icmpv6_error::Icmpv6Error;
use crate::pipeline::config::RouterConfig;
use crate::pipeline::stage::{Ingress, Request6, Stage, Stage6, WallClock};
use crate::pipeline::track::{inspect_segment, track, TrackedPacket};
use crate::state::conntrack::{FlowId, FlowTable, TcpSegment, Vacancy};
use crate::state::firewall::{Action, ZoneId};
use crate::state::firewall_log::{count_decision, Decision, FirewallLogger};
use crate::state::flow_data::{ContentState, FeatureHosts6, FlowData6};
use crate::state::nat::Ownership;
use crate::verdict::{DropReason, Verdict};
use crate::wire::checksum;
use crate::wire::ipv6::{next_header, Extensions};
use crate::wire::udp::DNS_PORT;
use crate::wire::{icmpv6, ipv6, Ipv6Packet, UdpPacket};

/// The LAN device a packet comes from, for the content policy: its IPv4 address (that of
/// its MAC on the interface's subnet, 0.0.0.0 without one) and its MAC, and the wall-clock
/// second, for parental time windows. Only for packets from an inside interface while a
/// content policy is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Client6 {
    pub(crate) device: Device,
    pub(crate) unix_seconds: i64,
}

impl Client6 {
    /// Whether parental control lets the device on the network now.
    fn allowed_by(&self, policy: &ContentPolicy) -> bool {
        let (address, mac) = self.device;
        policy.device_allowed(address, mac, self.unix_seconds)
    }
}

/// One worker's IPv6 flows.
pub(crate) struct StatefulStage6 {
    pub(crate) flows: FlowTable<FlowData6, FlowKey6>,
    /// Per flow slot and direction (`FlowId::as_u32`, original then reply): the hosts of a
    /// shortcut whose plan has features, valid only while it does.
    pub(crate) feature_hosts: Vec<[FeatureHosts6; 2]>,
    /// Scanners of TCP flows whose content is still being judged.
    inspector: ContentInspector,
    worker: u16,
    ownership: Ownership,
    pub(crate) wall_clock: WallClock,
}

impl StatefulStage6 {
    pub(crate) fn new(
        flows: FlowTable<FlowData6, FlowKey6>,
        worker: u16,
        ownership: Ownership,
    ) -> Self {
        let slots = flows.capacity();
        StatefulStage6 {
            feature_hosts: vec![Default::default(); slots],
            flows,
            inspector: ContentInspector::new(content::DEFAULT_SLOTS),
            worker,
            ownership,
            wall_clock: WallClock::default(),
        }
    }

    /// Tracks an IPv6 packet routed from `ingress` to `egress`: `ip` is the packet (fixed
    /// header on, its length checked), `ext` its extension headers' walk, `client` the LAN
    /// device it comes from where the content policy applies. `firewall_log`: the worker's
    /// firewall log, the IPv4 stage's, lent so that both families share one budget.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn process(
        &mut self,
        router: &RouterConfig,
        ip: &Ipv6Packet<&[u8]>,
        ext: &Extensions,
        (ingress, egress): (Ingress, u16),
        client: Option<Client6>,
        firewall_log: Option<&mut FirewallLogger>,
        now_ns: u64,
    ) -> Stage6 {
        let zones = (zone(router, ingress.port), zone(router, egress));
        let key = match FlowKey6::from_ipv6(ip, ext) {
            Ok(key) => key,
            Err(KeyError::Fragment) => {
                return self.later_fragment(router, ip, ingress, zones, client)
            }
            Err(KeyError::IcmpError) => return self.related_error(ip, ext, ingress),
            Err(KeyError::Malformed) => {
                return Stage6::Done(Verdict::Drop(DropReason::MalformedL4))
            }
        };
        if let Some(worker) = self.foreign_owner(&key, ingress) {
            return Stage6::Done(Verdict::Handoff { worker });
        }
        let upper = &ip.payload()[ext.offset..];
        let segment = if key.protocol == next_header::TCP {
            TcpSegment::of_segment(upper)
        } else {
            None
        };
        let hash = self.flows.hash(&key);
        let found = self.flows.probe(&key, hash);
        let mut packet = Tracked6 {
            stage: self,
            router,
            ext,
            upper,
            ip,
            ingress,
            egress,
            key,
            zones,
            client,
            firewall_log,
            now_ns,
        };
        track(&mut packet, hash, found, segment, now_ns)
    }

    /// A new flow from zone `from` to zone `to`, by their pair's policy, or a pinhole where
    /// the policy does not accept it; then, for a LAN device's, by the content policy.
    #[allow(clippy::too_many_arguments)]
    fn new_flow(
        &mut self,
        router: &RouterConfig,
        (ingress, egress): (Ingress, u16),
        vacancy: Vacancy<FlowKey6>,
        (from, to): (ZoneId, ZoneId),
        (segment, ext, upper): (Option<TcpSegment>, &Extensions, &[u8]),
        (client, firewall_log): (Option<Client6>, Option<&mut FirewallLogger>),
        now_ns: u64,
    ) -> Stage6 {
        let key = *vacancy.key();
        let stateful = &router.stateful;
        let pinholed = || {
            router
                .pinholes6
                .iter()
                .any(|pinhole| pinhole.admits(ingress.port, &key))
        };
        let (action, rule) = admit6(router, from, to, &key, pinholed);
        let decision = Decision {
            action,
            from,
            to,
            ingress: ingress.port,
            egress: Some(egress),
            forwarded_to: None,
            // A pinhole's accept is the pinhole's decision, not the pair's.
            pinholed: rule.is_none() && action != stateful.firewall.policy().default_for(from, to),
            from_kernel: false,
        };
        let when = (self.worker, self.wall_clock.unix_seconds(now_ns));
        let logged = count_decision(&stateful.firewall, rule, &decision, when);
        // An accept is logged once its flow is admitted (as IPv4's are); the rest now.
        let log = |logger: Option<&mut FirewallLogger>| {
            if let (Some(name), Some(logger)) = (logged, logger) {
                logger.record(name, &key, decision, now_ns);
            }
        };
        match action {
            Action::Accept => {}
            Action::Drop => {
                log(firewall_log);
                return Stage6::Done(Verdict::Drop(DropReason::FirewallDrop));
            }
            Action::Reject => {
                log(firewall_log);
                return Stage6::Request(Request6::IcmpError(Icmpv6Error::AdminProhibited));
            }
        }
        let mut content = ContentState::Allowed;
        if let (Some(policy), Some(client)) = (stateful.content.as_deref(), client) {
            if !client.allowed_by(policy) {
                return Stage6::Done(Verdict::Drop(DropReason::ParentalBlocked));
            }
            if let Some(stage) = later_dns(policy, client, &key, ext, upper) {
                return stage;
            }
            if key.protocol == next_header::TCP && policy.inspects_content() {
                content = ContentState::Inspecting;
            }
        }
        let data = FlowData6 {
            from_zone: from.0,
            to_zone: to.0,
            generation: stateful.generation,
            content,
            device: client.map(|client| client.device.0),
            shortcuts: Default::default(),
        };
        match self.flows.insert_vacant(
            vacancy,
            key.reversed(),
            data,
            segment.as_ref(),
            now_ns,
            |_| {},
        ) {
            Ok(id) => {
                // A recycled slot must not inherit an earlier flow's half-read stream.
                self.inspector.forget(id.as_u32());
                log(firewall_log);
                Stage6::Forward(None)
            }
            Err(error) => Stage6::Done(Verdict::Drop(error.drop_reason())),
        }
    }

    /// After a reload with `recheck_established`, a flow admitted under older rules is
    /// checked once against the new policy and pinholes.
    fn recheck(&mut self, router: &RouterConfig, id: FlowId) -> Option<Verdict> {
        let stateful = &router.stateful;
        let data = *self.flows.data(id);
        if data.generation == stateful.generation {
            return None;
        }
        let (from, to) = (ZoneId(data.from_zone), ZoneId(data.to_zone));
        let original = self.flows.key(id, Direction::Original);
        // A pinhole admits the flow if it opens on an interface of the flow's zone.
        let pinholed = || {
            router.pinholes6.iter().any(|pinhole| {
                zone(router, pinhole.interface) == from
                    && pinhole.admits(pinhole.interface, &original)
            })
        };
        if stateful.recheck_established
            && admit6(router, from, to, &original, pinholed).0 != Action::Accept
        {
            self.end_flow(id);
            return Some(Verdict::Drop(DropReason::FirewallRecheck));
        }
        self.flows.data_mut(id).generation = stateful.generation;
        None
    }

    /// Ends a flow before its time, its inspector slot freed with it.
    fn end_flow(&mut self, id: FlowId) {
        self.inspector.forget(id.as_u32());
        self.flows.remove(id);
    }

    /// The worker that owns the flow `key`, when it is not this one.
    #[inline]
    fn foreign_owner(&self, key: &FlowKey6, ingress: Ingress) -> Option<u16> {
        let owner = |ownership: Ownership| ownership.pair_owner6(key.src, key.dst);
        ingress.foreign_owner(self.worker, self.ownership, owner)
    }

    /// A later fragment carries no ports, so no flow can be found for it: it passes where its
    /// zone pair's policy admits new flows, on the owner of its addresses' flows (where its
    /// first fragment went, so the pieces leave in order), and is dropped elsewhere. A device
    /// parental control keeps off the network sends none.
    fn later_fragment(
        &self,
        router: &RouterConfig,
        ip: &Ipv6Packet<&[u8]>,
        ingress: Ingress,
        (from, to): (ZoneId, ZoneId),
        client: Option<Client6>,
    ) -> Stage6 {
        if router.stateful.firewall.policy().default_for(from, to) != Action::Accept {
            return Stage6::Done(Verdict::Drop(DropReason::UntrackedFragment));
        }
        if let (Some(policy), Some(client)) = (router.stateful.content.as_deref(), client) {
            if !client.allowed_by(policy) {
                return Stage6::Done(Verdict::Drop(DropReason::ParentalBlocked));
            }
        }
        let owner = |ownership: Ownership| ownership.pair_owner6(ip.src_addr(), ip.dst_addr());
        match ingress.foreign_owner(self.worker, self.ownership, owner) {
            Some(worker) => Stage6::Done(Verdict::Handoff { worker }),
            None => Stage6::Forward(None),
        }
    }

    /// An ICMPv6 error passes if it is about a tracked flow and goes to the quoted packet's
    /// sender (RFC 4890 4.3.1: Destination Unreachable, Packet Too Big, Time Exceeded and
    /// Parameter Problem must, or path-MTU discovery and connection set-up break).
    fn related_error(&self, ip: &Ipv6Packet<&[u8]>, ext: &Extensions, ingress: Ingress) -> Stage6 {
        let Some(quoted) = quoted_key(&ip.payload()[ext.offset..]) else {
            return Stage6::Done(Verdict::Drop(DropReason::UnrelatedIcmpError));
        };
        if ip.dst_addr() != quoted.src {
            return Stage6::Done(Verdict::Drop(DropReason::UnrelatedIcmpError));
        }
        if let Some(worker) = self.foreign_owner(&quoted, ingress) {
            return Stage6::Done(Verdict::Handoff { worker });
        }
        match self.flows.lookup(&quoted) {
            Some(_) => Stage6::Forward(None),
            None => Stage6::Done(Verdict::Drop(DropReason::UnrelatedIcmpError)),
        }
    }
}

/// One IPv6 packet in the stateful stage, for [`track`]: the worker's stage, the router
/// config it is lent, and what [`StatefulStage6::process`] parsed of the packet.
struct Tracked6<'a> {
    stage: &'a mut StatefulStage6,
    router: &'a RouterConfig,
    ip: &'a Ipv6Packet<&'a [u8]>,
    ext: &'a Extensions,
    /// The upper-layer header and payload.
    upper: &'a [u8],
    ingress: Ingress,
    egress: u16,
    key: FlowKey6,
    zones: (ZoneId, ZoneId),
    client: Option<Client6>,
    firewall_log: Option<&'a mut FirewallLogger>,
    now_ns: u64,
}

impl TrackedPacket for Tracked6<'_> {
    type Key = FlowKey6;
    type Data = FlowData6;
    type Request = Request6;

    #[inline]
    fn flows(&mut self) -> &mut FlowTable<FlowData6, FlowKey6> {
        &mut self.stage.flows
    }

    fn checksum_ok(&self) -> bool {
        l4_checksum_ok(self.ip, self.ext)
    }

    fn end_flow(&mut self, id: FlowId) {
        self.stage.end_flow(id);
    }

    fn new_flow(&mut self, vacancy: Vacancy<FlowKey6>, segment: Option<TcpSegment>) -> Stage6 {
        if segment.as_ref().is_some_and(TcpSegment::is_bare_syn) && !self.checksum_ok() {
            return Stage6::Done(Verdict::Drop(DropReason::L4Checksum));
        }
        let packet = (segment, self.ext, self.upper);
        let (router, zones, client) = (self.router, self.zones, self.client);
        let ports = (self.ingress, self.egress);
        let logged = (client, self.firewall_log.as_deref_mut());
        self.stage
            .new_flow(router, ports, vacancy, zones, packet, logged, self.now_ns)
    }

    #[inline]
    fn recheck(&mut self, id: FlowId, _: Direction, _: Option<TcpSegment>) -> Option<Stage6> {
        self.stage.recheck(self.router, id).map(Stage::Done)
    }

    /// The device is the one that opened the flow, by its IPv4 address where it had one,
    /// and this packet's MAC.
    fn inspect(&mut self, id: FlowId, segment: Option<TcpSegment>) -> Option<Stage6> {
        let policy = self.router.stateful.content.as_deref()?;
        let (client, segment) = (self.client?, segment?);
        let stage = &mut *self.stage;
        let opened_by = stage.flows.data(id).device;
        let device = (opened_by.unwrap_or(client.device.0), client.device.1);
        let flow = (id, &mut stage.flows.data_mut(id).content);
        let blocked = inspect_segment(
            &mut stage.inspector,
            policy,
            flow,
            device,
            &segment,
            self.upper,
        );
        blocked.then_some(Stage6::Request(Request6::Reset {
            key: self.key,
            segment,
        }))
    }

    /// A LAN device's later DNS queries are checked one by one; nothing is translated.
    #[inline]
    fn established(&mut self, id: FlowId, direction: Direction) -> Stage6 {
        let policy = self.router.stateful.content.as_deref();
        if let (Some(policy), Some(client), Direction::Original) = (policy, self.client, direction)
        {
            if let Some(stage) = later_dns(policy, client, &self.key, self.ext, self.upper) {
                return stage;
            }
        }
        Stage6::Established {
            translation: None,
            flow: id,
            direction,
        }
    }
}

/// The firewall's verdict on a new IPv6 flow from zone `from` to zone `to`: the first rule
/// that applies to IPv6 (no IPv4 prefix), else the pair's default; a flow a pinhole opens is
/// decided by a matching rule only, as a port forward is for IPv4 (`stateful::admit`).
/// Returns the action and the rule that decided it (`None`: the default or the pinhole).
fn admit6(
    router: &RouterConfig,
    from: ZoneId,
    to: ZoneId,
    key: &FlowKey6,
    pinholed: impl FnOnce() -> bool,
) -> (Action, Option<usize>) {
    match router.stateful.firewall.evaluate6(from, to, key) {
        (Action::Accept, None) => (Action::Accept, None),
        (_, None) if pinholed() => (Action::Accept, None),
        decided => decided,
    }
}

/// A DNS query over UDP from a LAN device for a blocked name, checked on every query of a
/// flow (a stub resolver may send many names from one socket); the first question's name
/// whatever its type, so AAAA queries are checked as A queries are. A query in fragments,
/// which cannot be read whole here and no stub resolver sends, is refused.
fn later_dns(
    policy: &ContentPolicy,
    client: Client6,
    key: &FlowKey6,
    ext: &Extensions,
    upper: &[u8],
) -> Option<Stage6> {
    if key.protocol != next_header::UDP || key.dst_port != DNS_PORT {
        return None;
    }
    if ext.fragment.is_some_and(|fragment| fragment.more) {
        return Some(Stage6::Done(Verdict::Drop(DropReason::ContentBlocked)));
    }
    let datagram = UdpPacket::new_checked(upper).ok()?;
    content::dns_query_blocked(policy, client.device, datagram.payload())?;
    Some(Stage6::Request(Request6::DnsBlocked))
}

/// The zone of interface `port`.
fn zone(router: &RouterConfig, port: u16) -> ZoneId {
    router.stateful.zones[usize::from(port)]
}

/// The flow key of the packet an ICMPv6 error quotes (`message`: the error from its type
/// on): its addresses, and its ports or echo identifier. None if the quote is too short or
/// carries extension headers, which a truncated quote may not hold whole.
fn quoted_key(message: &[u8]) -> Option<FlowKey6> {
    let quoted = message.get(icmpv6::HEADER_LEN..)?;
    let header = quoted.get(..ipv6::HEADER_LEN)?;
    let ip = Ipv6Packet::new_unchecked(header);
    let upper = &quoted[ipv6::HEADER_LEN..];
    let word = |at: usize| Some(u16::from_be_bytes([*upper.get(at)?, *upper.get(at + 1)?]));
    let protocol = ip.next_header();
    let (src_port, dst_port) = match protocol {
        next_header::TCP | next_header::UDP => (word(0)?, word(2)?),
        next_header::ICMPV6 => {
            let ident = word(4)?;
            (ident, ident)
        }
        _ => return None,
    };
    Some(FlowKey6 {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        src_port,
        dst_port,
        protocol,
    })
}

/// The upper layer's checksum is right: TCP, UDP (whose checksum IPv6 requires: zero is
/// wrong, RFC 8200 8.1) and ICMPv6. A first fragment's covers data not here and passes, as
/// do other protocols.
fn l4_checksum_ok(ip: &Ipv6Packet<&[u8]>, ext: &Extensions) -> bool {
    if ext.fragment.is_some_and(|fragment| fragment.more) {
        return true;
    }
    let upper = &ip.payload()[ext.offset..];
    match ext.protocol {
        next_header::UDP if upper.get(6..8) == Some(&[0, 0]) => false,
        next_header::TCP | next_header::UDP | next_header::ICMPV6 => {
            checksum::l4_checksum_v6(ip.src_addr(), ip.dst_addr(), ext.protocol, upper) == 0
        }
        _ => true,
    }
}

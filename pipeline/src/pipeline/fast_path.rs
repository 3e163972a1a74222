//! The burst and its established fast path.
//!
//! [`Pipeline::process_burst`] takes a worker's rx burst in three passes, the way VPP's
//! nodes and DPDK's l3fwd do: parse and hash every packet once and prefetch its flow index
//! slot; then read the slots and prefetch the flows and their data; then process. By the
//! third pass the cache misses of the whole burst have overlapped instead of queueing.
//!
//! A packet of an established flow whose direction has a current [`Shortcut`] is forwarded
//! without the full path. The shortcut holds what the full path decided for the previous
//! packet of that direction (ingress, egress, next hop and its MAC, the rewrite's checksum
//! deltas, what QoS and the meter do with it), and every check that decision depended on is a function of the flow's tuple and
//! the configuration: martian and directed-broadcast addresses, source validation, the
//! flow's owner, local delivery, the firewall, the route. The shortcut is stamped with the
//! pipeline's router epoch, which every new router config advances, so none of those can
//! change under it; and with its neighbour epoch, which every new neighbour view advances:
//! a shortcut from an older view looks its next hop up again (one probe, not the full
//! path), since ARP changes views far more often than operators reload.
//!
//! What depends on the packet itself is checked per packet: the Ethernet destination, the
//! IPv4 header (checksum, no options, not a fragment, TTL), the MTU, TCP flags (a SYN, FIN
//! or RST takes the full path, with its checksum check), the TCP tracker, and DNS and DHCP,
//! which the full path inspects per packet. Anything else takes the full path, which makes
//! a new shortcut. `the_burst_and_fast_path_decide_as_the_full_path_does` and the tests
//! beside it in `pipeline/tests/stateful.rs` hold both paths to the same verdicts, bytes and
//! state.
//!
//! IPv6 flows have the same fast path over their own table ([`Shortcut`]`<()>`): TCP and UDP
//! whose header follows the fixed header (no extension headers), the hop limit and the MTU
//! checked per packet, the hop limit decremented (IPv6 has no header checksum), nothing
//! translated. A shortcut from an older neighbour view is not refreshed but remade by the
//! full path. `pipeline/tests/forward6.rs` holds both paths to the same verdicts and bytes.
//!
//! What the two families' fast paths share is written once and inlined into both: whether
//! the shortcut is current (`shortcut_current`), the L2 check (`addressed_to_ingress`), the
//! tracker's step (`track_covered`) and the making of a shortcut (`shortcut_from`). The
//! header checks, the rewrite and the features' hosts stay each family's own. One body
//! generic over the family was tried and cost 15 to 20 instructions an established packet.

use std::net::Ipv4Addr;

use crate::flow::{reply_key, Direction, FlowKey, FlowKey6};
use crate::packet::PacketBuf;
use crate::pipeline::config::{Interface, RouterConfig};
use crate::pipeline::stage::{FlowProbe, Ingress, Route, MAX_BURST};
use crate::pipeline::Pipeline;
use crate::state::conntrack::{FlowHash, FlowId, FlowTable, Probe, TableKey, TcpSegment, Track};
use crate::state::firewall::ZoneId;
use crate::state::firewall_log::FirewallLogger;
use crate::state::flow_data::{
    settled, ContentState, FeatureHosts6, FeaturePlan, Features, Nat44Shortcut, Shortcut,
};
use crate::state::nat::rewrite::{self, ChecksumDeltas};
use crate::verdict::{DropReason, Verdict};
use crate::wire::ipv6::Upper6;
use crate::wire::udp::{DHCP_CLIENT_PORT, DNS_PORT};
use crate::wire::{
    checksum, ethernet, ipv4, ipv6, tcp, EthernetAddress, EthernetFrame, Ipv4Packet, Ipv6Packet,
    UdpPacket,
};

fn side(direction: Direction) -> usize {
    match direction {
        Direction::Original => 0,
        Direction::Reply => 1,
    }
}

/// The interface a shortcut's packet leaves by (`egress`), and the packet's Ethernet frame,
/// if the frame is one a shortcut may carry at L2: addressed to the MAC of the interface it
/// came in by. Both families' fast paths check this first of the packet itself.
#[inline(always)]
fn addressed_to_ingress<'r, 'f>(
    router: &'r RouterConfig,
    pkt: &'f PacketBuf,
    ingress: Ingress,
    egress: u16,
) -> Option<(&'r Interface, EthernetFrame<&'f [u8]>)> {
    let iface = router.interfaces.get(usize::from(ingress.port))?;
    let egress = router.interfaces.get(usize::from(egress))?;
    let frame = EthernetFrame::new_checked(pkt.bytes()).ok()?;
    (frame.dst_addr() == iface.mac).then_some((egress, frame))
}

/// Commits a packet a shortcut covers to it, in either family's table: trims the frame to
/// `frame_len` (its IP length) and tracks the packet as the full path would; false if the
/// tracker finds it invalid.
#[inline(always)]
fn track_covered<D: Copy, K: TableKey>(
    (flows, flow, direction): (&mut FlowTable<D, K>, FlowId, Direction),
    pkt: &mut PacketBuf,
    frame_len: usize,
    segment: Option<&TcpSegment>,
    now_ns: u64,
) -> bool {
    pkt.set_len(frame_len);
    !matches!(
        flows.track(flow, direction, segment, now_ns),
        Track::Invalid(_)
    )
}

/// Hands the drop log each of a burst's dropped packets, with the zone it arrived from.
#[cold]
fn log_drops(
    logger: &mut FirewallLogger,
    router: &RouterConfig,
    (packets, ingress): (&[PacketBuf], &[Ingress]),
    verdicts: &[Verdict],
    now_ns: u64,
) {
    for ((packet, ingress), verdict) in packets.iter().zip(ingress).zip(verdicts) {
        if let Verdict::Drop(reason) = *verdict {
            let zone = router.stateful.zones.get(usize::from(ingress.port));
            let zone = zone.copied().unwrap_or(ZoneId::LOCAL);
            logger.dropped(reason, packet.bytes(), (ingress.port, zone), now_ns);
        }
    }
}

/// The flow key of an IPv4 frame, if it has one (not a fragment, not malformed): what the
/// first pass hashes.
#[inline]
pub fn frame_key(frame: &[u8]) -> Option<FlowKey> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    if frame.ethertype() != ethernet::ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(frame.payload()).ok()?;
    FlowKey::from_ipv4(&ip).ok()
}

/// The flow key of an IPv6 frame whose TCP or UDP header follows the fixed header: what the
/// burst prefetches the IPv6 flow table for and the IPv6 fast path looks up. A frame with
/// extension headers has none here; the full path walks them and decides.
#[inline]
fn frame_key6(frame: &[u8]) -> Option<FlowKey6> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    if frame.ethertype() != ethernet::ethertype::IPV6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(frame.payload()).ok()?;
    let protocol = ip.next_header();
    if protocol != ipv6::next_header::TCP && protocol != ipv6::next_header::UDP {
        return None;
    }
    let ports = ip.payload().get(..4)?;
    Some(FlowKey6 {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        src_port: u16::from_be_bytes([ports[0], ports[1]]),
        dst_port: u16::from_be_bytes([ports[2], ports[3]]),
        protocol,
    })
}

/// Whether an IPv4 frame holding TCP (its key says so) is a bare SYN: SYN set, ACK, FIN
/// and RST clear. A hint for prefetching only; the full path decides.
#[inline]
fn frame_is_bare_syn(frame: &[u8]) -> bool {
    const SIGNIFICANT: u8 = tcp::flags::SYN | tcp::flags::ACK | tcp::flags::FIN | tcp::flags::RST;
    let Some(&version_and_ihl) = frame.get(ethernet::HEADER_LEN) else {
        return false;
    };
    let flags = ethernet::HEADER_LEN + usize::from(version_and_ihl & 0x0f) * 4 + tcp::field::FLAGS;
    frame
        .get(flags)
        .is_some_and(|flags| flags & SIGNIFICANT == tcp::flags::SYN)
}

/// Whether packets with `key` may take the fast path at all: TCP, and UDP but DNS queries,
/// which are checked against the block lists one by one, and answers to the gateway's own
/// DHCP client, which go to its kernel twin.
#[inline]
fn has_fast_path(key: &FlowKey) -> bool {
    match key.protocol {
        ipv4::protocol::TCP => true,
        ipv4::protocol::UDP => key.dst_port != DNS_PORT && key.dst_port != DHCP_CLIENT_PORT,
        _ => false,
    }
}

impl Pipeline {
    /// Decides the fate of a packet received on `ingress`, rewriting it in place, and counts
    /// the decision: a burst of one.
    #[inline]
    pub fn process(&mut self, pkt: &mut PacketBuf, ingress: u16, now_ns: u64) -> Verdict {
        let ingress = Ingress {
            port: ingress,
            handed_off: false,
        };
        self.process_from(pkt, ingress, now_ns)
    }

    /// As `process`, for a packet that may have come from another worker.
    #[inline]
    pub fn process_from(&mut self, pkt: &mut PacketBuf, ingress: Ingress, now_ns: u64) -> Verdict {
        let key = self.hashed_key(pkt.bytes());
        let verdict = match key {
            Some(_) => self.process_keyed(pkt, ingress, key.as_ref(), now_ns),
            None => {
                let key6 = self.hashed_key6(pkt.bytes());
                self.process_keyed6(pkt, ingress, key6.as_ref(), now_ns)
            }
        };
        self.keep_shape_request(0);
        verdict
    }

    /// Shaper mode: files what QoS asked of the worker for the packet just processed, at its
    /// place in the burst.
    #[inline(always)]
    fn keep_shape_request(&mut self, index: usize) {
        if self.shaping() {
            self.shape_requests[index] = self.shape_request.take();
        }
    }

    /// Decides the fate of a burst of packets, as [`process_from`](Pipeline::process_from)
    /// would one at a time, into `verdicts`. `ingress[i]` is how `packets[i]` arrived.
    /// `prefetch` is given the addresses to prefetch (the pipeline itself has no unsafe
    /// code to prefetch with). At most [`MAX_BURST`] packets, and no more than `ingress`
    /// and `verdicts` have room for, are processed; the rest are left as they are.
    pub fn process_burst(
        &mut self,
        packets: &mut [PacketBuf<'_>],
        ingress: &[Ingress],
        now_ns: u64,
        verdicts: &mut [Verdict],
        prefetch: impl Fn(*const u8),
    ) {
        let count = packets
            .len()
            .min(ingress.len())
            .min(verdicts.len())
            .min(MAX_BURST);
        let mut keys = [None::<(FlowKey, FlowHash)>; MAX_BURST];
        // IPv6 packets' keys and their hashes in the IPv6 table.
        let mut keys6 = [None::<(FlowKey6, FlowHash)>; MAX_BURST];
        let mut any_ipv6 = false;
        let mut opens_flow = false;
        for (slot_index, (slot, pkt)) in keys.iter_mut().zip(&packets[..count]).enumerate() {
            *slot = self.hashed_key(pkt.bytes());
            if slot.is_none() {
                if let Some((key6, hash)) = self.hashed_key6(pkt.bytes()) {
                    prefetch(self.stateful6.flows.index_address_hashed(hash));
                    keys6[slot_index] = Some((key6, hash));
                    any_ipv6 = true;
                }
            }
            if let Some((key, hash)) = slot {
                prefetch(self.stateful.flows.index_address_hashed(*hash));
                if key.protocol == ipv4::protocol::TCP && frame_is_bare_syn(pkt.bytes()) {
                    let forwarded = self.forwarded_reply(key, ingress[slot_index]);
                    // Under a flood the SYN proxy answers a forward's SYN with a cookie,
                    // without touching the table (`crate::pipeline::syn_proxy`).
                    let cookie = forwarded.is_some() && self.stateful.flows.half_open_full();
                    if cookie {
                        // The SYN-ACK's route back to a (likely spoofed, so random) source.
                        prefetch(self.router.routes.entry_address(key.src));
                    } else {
                        // Likely a new flow, whose insert would otherwise wait on each of these.
                        opens_flow = true;
                        for line in self.stateful.flows.insert_lines(key) {
                            prefetch(line);
                        }
                        if let Some(reply) = forwarded {
                            // The insert's first touch of it: a miss nothing else would overlap.
                            prefetch(
                                self.stateful
                                    .flows
                                    .index_address_hashed(self.stateful.flows.hash(&reply)),
                            );
                        }
                    }
                }
            }
        }
        for (_, hash) in keys[..count].iter().flatten() {
            for line in self
                .stateful
                .flows
                .flow_lines_hashed(*hash)
                .into_iter()
                .flatten()
            {
                prefetch(line);
            }
        }
        if any_ipv6 {
            for (_, hash) in keys6[..count].iter().flatten() {
                let lines = self.stateful6.flows.flow_lines_hashed(*hash);
                for line in lines.into_iter().flatten() {
                    prefetch(line);
                }
            }
        }
        if opens_flow {
            // Under a SYN flood the insert first evicts the oldest half-open flow.
            for line in self.stateful.flows.eviction_lines().into_iter().flatten() {
                prefetch(line);
            }
            // And the next victims' entries, for the next burst's evictions: read now, by
            // `eviction_lines` above, they would stall the burst.
            for line in self.stateful.flows.eviction_ahead_lines() {
                prefetch(line);
            }
        }
        for (i, pkt) in packets[..count].iter_mut().enumerate() {
            verdicts[i] = match keys6[i] {
                Some(key6) => self.process_keyed6(pkt, ingress[i], Some(&key6), now_ns),
                None => self.process_keyed(pkt, ingress[i], keys[i].as_ref(), now_ns),
            };
            self.keep_shape_request(i);
        }
        // The drop log (`[firewall.log] drops`) looks at the burst's verdicts once they are
        // all known; without it, a burst pays this one test.
        if let Some(logger) = self
            .stateful
            .firewall_log
            .as_mut()
            .filter(|logger| logger.logs_drops())
        {
            log_drops(
                logger,
                &self.router,
                (&packets[..count], &ingress[..count]),
                &verdicts[..count],
                now_ns,
            );
        }
    }

    /// The reply tuple of the flow a new packet with `key` would open through a port forward
    /// from outside (no source NAT: the forward's target answers the client itself), as
    /// the full path's `new_flow` would make it. A hint for prefetching only: the full path
    /// decides.
    #[inline]
    pub fn forwarded_reply(&self, key: &FlowKey, ingress: Ingress) -> Option<FlowKey> {
        let stateful = &self.router.stateful;
        if !stateful
            .masquerade
            .get(usize::from(ingress.port))
            .copied()?
        {
            return None;
        }
        let target = stateful.dnat(&self.router.interfaces, key)?;
        Some(reply_key(key.protocol, target, (key.src, key.src_port)))
    }

    /// The frame's flow key and its hash in the flow table, if it has a key.
    #[inline]
    fn hashed_key(&self, frame: &[u8]) -> Option<(FlowKey, FlowHash)> {
        frame_key(frame).map(|key| (key, self.stateful.flows.hash(&key)))
    }

    /// An IPv6 frame's TCP or UDP flow key (none behind extension headers) and its hash in
    /// the IPv6 flow table.
    #[inline]
    fn hashed_key6(&self, frame: &[u8]) -> Option<(FlowKey6, FlowHash)> {
        frame_key6(frame).map(|key| (key, self.stateful6.flows.hash(&key)))
    }

    /// One IPv6 packet (or any packet without an IPv4 key): the fast path if its flow
    /// direction has a current shortcut, else the full path.
    #[inline]
    fn process_keyed6(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        key6: Option<&(FlowKey6, FlowHash)>,
        now_ns: u64,
    ) -> Verdict {
        if let (Some(&(key6, hash)), true) = (key6, self.fast_path) {
            if let Probe::Found(flow, direction) = self.stateful6.flows.probe(&key6, hash) {
                // It counts its own drops, the only verdict besides a transmit it gives.
                if let Some(verdict) =
                    self.forward_established6(pkt, ingress, &key6, (flow, direction), now_ns)
                {
                    self.counters.fast_path.inc();
                    return verdict;
                }
            }
        }
        self.process_full(pkt, ingress, None, now_ns)
    }

    /// One packet, its flow key hashed already (None: it has none). The full path gets what
    /// the fast path learnt: the key's hash, and the table's answer when it looked.
    #[inline]
    fn process_keyed(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        key: Option<&(FlowKey, FlowHash)>,
        now_ns: u64,
    ) -> Verdict {
        let Some(&(key, hash)) = key else {
            return self.process_full(pkt, ingress, None, now_ns);
        };
        let mut found = None;
        if self.fast_path && has_fast_path(&key) {
            let probe = self.stateful.flows.probe(&key, hash);
            if let Probe::Found(flow, direction) = probe {
                if let Some(verdict) =
                    self.forward_established(pkt, ingress, &key, (flow, direction), now_ns)
                {
                    self.counters.fast_path.inc();
                    self.counters.count(&verdict);
                    return verdict;
                }
            }
            found = Some(probe);
        }
        let probe = FlowProbe { key, hash, found };
        self.process_full(pkt, ingress, Some(&probe), now_ns)
    }

    /// Whether `shortcut` may carry a packet received by `ingress`: made under the current
    /// router config for that ingress, its flow (content verdict and admitting rules, as
    /// `(content, generation)`) settled. Both families check this first.
    #[inline(always)]
    fn shortcut_current<F>(
        &self,
        shortcut: &Shortcut<F>,
        (content, generation): (ContentState, u32),
        ingress: Ingress,
    ) -> bool {
        shortcut.serves(self.router_epoch, ingress.port, ingress.handed_off)
            && settled(content, generation, self.router.stateful.generation)
    }

    /// The fast path: Some(verdict) if the packet's flow direction has a current shortcut
    /// and the packet is one it covers; None otherwise, with the table as it was (at most
    /// the shortcut's next-hop MAC refreshed from a newer neighbour view).
    #[inline]
    fn forward_established(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        key: &FlowKey,
        (flow, direction): (FlowId, Direction),
        now_ns: u64,
    ) -> Option<Verdict> {
        let data = self.stateful.flows.data(flow);
        let mut shortcut = data.shortcuts[side(direction)];
        if !self.shortcut_current(&shortcut, (data.content, data.generation), ingress) {
            return None;
        }
        if shortcut.neighbor_epoch != self.neighbor_epoch {
            // What the full path's `resolve_l2` would find now; none: it asks ARP.
            shortcut.next_hop_mac = self
                .neighbors
                .get(Ipv4Addr::from(shortcut.family.next_hop))?
                .0;
            shortcut.neighbor_epoch = self.neighbor_epoch;
            self.stateful.flows.data_mut(flow).shortcuts[side(direction)] = shortcut;
        }
        let (egress, frame) = addressed_to_ingress(&self.router, pkt, ingress, shortcut.egress)?;
        let (egress_mac, src_mac) = (egress.mac, frame.src_addr());
        // What `Ipv4Packet::new_checked` and `verify_checksum` would accept, for a header
        // without options (version 4, IHL 5: byte 0 is 0x45), read in one go.
        let header: &[u8; ipv4::HEADER_LEN] = pkt
            .bytes()
            .get(ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::HEADER_LEN)?
            .try_into()
            .ok()?;
        let datagram_len = u16::from_be_bytes([header[2], header[3]]);
        let flags_and_offset = u16::from_be_bytes([header[6], header[7]]);
        const MORE_FRAGMENTS_AND_OFFSET: u16 = 0x3fff;
        if header[0] != 0x45
            || usize::from(datagram_len) < ipv4::HEADER_LEN
            || ethernet::HEADER_LEN + usize::from(datagram_len) > pkt.len()
            || flags_and_offset & MORE_FRAGMENTS_AND_OFFSET != 0
            || header[8] <= 1
            || datagram_len > egress.mtu
            || checksum::fold(checksum::sum_ipv4_header(header)) != 0xffff
        {
            return None;
        }
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let segment = TcpSegment::parse(&ip);
        if key.protocol == ipv4::protocol::TCP {
            const STATE_CHANGING: u8 = tcp::flags::SYN | tcp::flags::FIN | tcp::flags::RST;
            if segment.as_ref()?.flags & STATE_CHANGING != 0 {
                return None;
            }
        }
        let src = ip.src_addr();

        // The packet is the shortcut's: from here on this path decides, as the full one would.
        let frame_len = ethernet::HEADER_LEN + usize::from(datagram_len);
        let tracked = (&mut self.stateful.flows, flow, direction);
        if !track_covered(tracked, pkt, frame_len, segment.as_ref(), now_ns) {
            return Some(Verdict::Drop(DropReason::ConntrackInvalid));
        }
        let target = self
            .stateful
            .flows
            .key(flow, direction.opposite())
            .reversed();
        let ip = &mut pkt.bytes_mut()[ethernet::HEADER_LEN..];
        if !rewrite::rewrite_forwarded(ip, key.protocol, &target, shortcut.family.deltas) {
            // Not reached: the checks above are the rewrite's preconditions.
            return Some(Verdict::Drop(DropReason::MalformedL4));
        }
        ethernet::write_l2(
            pkt.bytes_mut(),
            EthernetAddress(shortcut.next_hop_mac),
            egress_mac,
        );
        let verdict = Verdict::Transmit {
            port: shortcut.egress,
        };
        Some(self.apply_features(
            shortcut.features,
            (src, src_mac),
            pkt,
            verdict,
            frame_len,
            now_ns,
        ))
    }

    /// The IPv6 fast path: Some(verdict) if the packet's flow direction has a current
    /// shortcut and the packet is one it covers; None otherwise, with the table untouched.
    #[inline]
    fn forward_established6(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        key: &FlowKey6,
        (flow, direction): (FlowId, Direction),
        now_ns: u64,
    ) -> Option<Verdict> {
        let data = self.stateful6.flows.data(flow);
        let shortcut = &data.shortcuts[side(direction)];
        // An IPv6 shortcut from an older neighbour view is remade by the full path.
        if shortcut.neighbor_epoch != self.neighbor_epoch
            || !self.shortcut_current(shortcut, (data.content, data.generation), ingress)
        {
            return None;
        }
        // What the rest needs of the shortcut, before the tracker takes the table; the
        // features' hosts are read again only where there are features.
        let (egress_port, next_hop_mac) = (shortcut.egress, shortcut.next_hop_mac);
        let plan = shortcut.features;
        let (egress, frame) = addressed_to_ingress(&self.router, pkt, ingress, egress_port)?;
        let egress_mac = egress.mac;
        let ip = Ipv6Packet::new_checked(frame.payload()).ok()?;
        let packet_len = ipv6::HEADER_LEN + usize::from(ip.payload_len());
        if ip.hop_limit() <= 1 || packet_len > usize::from(egress.mtu) {
            return None;
        }
        // What the full path's flow key and tracker would take of the upper layer.
        let segment = if key.protocol == ipv6::next_header::TCP {
            let segment = TcpSegment::of_segment(ip.payload())?;
            if segment.changes_state() {
                return None;
            }
            Some(segment)
        } else {
            UdpPacket::new_checked(ip.payload()).ok()?;
            None
        };

        // The features' hosts are the sender MAC's (`Features`): another sender's packets
        // are the full path's, which finds theirs.
        let hosts = if plan == FeaturePlan::NONE {
            FeatureHosts6::default()
        } else {
            let hosts = *self.stateful6.feature_hosts.get(flow.as_u32() as usize)?;
            let hosts = hosts[side(direction)];
            if frame.src_addr().0 != hosts.source_mac {
                return None;
            }
            hosts
        };

        // The packet is the shortcut's: from here on this path decides, as the full one would.
        let frame_len = ethernet::HEADER_LEN + packet_len;
        let tracked = (&mut self.stateful6.flows, flow, direction);
        if !track_covered(tracked, pkt, frame_len, segment.as_ref(), now_ns) {
            return Some(self.ipv6_fast_path_drop(DropReason::ConntrackInvalid));
        }
        Ipv6Packet::new_unchecked(&mut pkt.bytes_mut()[ethernet::HEADER_LEN..])
            .decrement_hop_limit();
        ethernet::write_l2(pkt.bytes_mut(), EthernetAddress(next_hop_mac), egress_mac);
        let verdict = Verdict::Transmit { port: egress_port };
        if plan == FeaturePlan::NONE {
            return Some(verdict);
        }
        let (features, src_mac) = (hosts.features, EthernetAddress(hosts.source_mac));
        // `frame_key6` keys only packets whose upper-layer header follows the fixed one.
        let upper = Upper6 {
            protocol: key.protocol,
            header_at: Some(0),
        };
        match self.apply_features6(features, src_mac, pkt, upper, verdict, frame_len, now_ns) {
            Verdict::Drop(reason) => Some(self.ipv6_fast_path_drop(reason)),
            verdict => Some(verdict),
        }
    }

    /// An IPv6 packet the fast path drops: counted under `reason` and as IPv6's, as the full
    /// path counts its drops (`Pipeline::process_full`).
    #[cold]
    fn ipv6_fast_path_drop(&self, reason: DropReason) -> Verdict {
        self.counters.record_drop(reason);
        self.counters.record_ipv6_drop(reason);
        Verdict::Drop(reason)
    }

    /// After the full path transmitted a packet of an established IPv6 flow to `egress`
    /// (its L2 header written), the features it decided for the packet's sender `source_mac`:
    /// the shortcut for that flow direction's next packets.
    pub(crate) fn remember_shortcut6(
        &mut self,
        pkt: &PacketBuf,
        ingress: Ingress,
        flow: FlowId,
        direction: Direction,
        (egress, features, source_mac): (u16, Features, EthernetAddress),
    ) {
        // DNS queries are checked against the block lists one by one, as IPv4's are: their
        // direction gets no shortcut.
        let received = self.stateful6.flows.key(flow, direction);
        if received.protocol == ipv6::next_header::UDP && received.dst_port == DNS_PORT {
            return;
        }
        // A shortcut with features needs its hosts: without room for them (not reached: a
        // slot per flow), none is made.
        if features.plan != FeaturePlan::NONE {
            let Some(hosts) = self.stateful6.feature_hosts.get_mut(flow.as_u32() as usize) else {
                return;
            };
            hosts[side(direction)] = FeatureHosts6 {
                features,
                source_mac: source_mac.0,
            };
        }
        let shortcut = self.shortcut_from(pkt, ingress, egress, features.plan, ());
        self.stateful6.flows.data_mut(flow).shortcuts[side(direction)] = shortcut;
    }

    /// After the full path transmitted a packet of an established flow by `route` (its L2
    /// header written): the shortcut for that flow direction's next packets.
    pub(crate) fn remember_shortcut(
        &mut self,
        pkt: &PacketBuf,
        ingress: Ingress,
        flow: FlowId,
        direction: Direction,
        route: Route,
        features: FeaturePlan,
    ) {
        let received = self.stateful.flows.key(flow, direction);
        let target = self
            .stateful
            .flows
            .key(flow, direction.opposite())
            .reversed();
        let family = Nat44Shortcut {
            next_hop: u32::from(route.next_hop),
            deltas: ChecksumDeltas::new(&received, &target),
        };
        let shortcut = self.shortcut_from(pkt, ingress, route.egress, features, family);
        self.stateful.flows.data_mut(flow).shortcuts[side(direction)] = shortcut;
    }

    /// Either family's shortcut for the direction of a packet the full path just sent to
    /// `egress` (its L2 header written: the next hop's MAC is its destination), stamped
    /// with the epochs it depends on.
    fn shortcut_from<F>(
        &self,
        pkt: &PacketBuf,
        ingress: Ingress,
        egress: u16,
        features: FeaturePlan,
        family: F,
    ) -> Shortcut<F> {
        Shortcut {
            router_epoch: self.router_epoch,
            neighbor_epoch: self.neighbor_epoch,
            ingress: ingress.port,
            egress,
            next_hop_mac: EthernetFrame::new_unchecked(pkt.bytes()).dst_addr().0,
            received_here: !ingress.handed_off,
            features,
            family,
        }
    }
}

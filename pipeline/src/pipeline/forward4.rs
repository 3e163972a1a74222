//! IPv4 forwarding on the full path: the input checks every datagram passes (RFC 1812:
//! header, options, martian and broadcast addresses, source validation, TTL), the stateful
//! stage, routing and the next hop, the MSS clamp, the features, and the ICMP errors the
//! gateway raises on the way (RFC 1812 4.3.2, rate-limited). IPv6's is `forward6`.

use std::net::Ipv4Addr;

use crate::l3::icmp_error::{may_answer_with_icmp_error, IcmpError};
use crate::packet::PacketBuf;
use crate::pipeline::stage::{FlowProbe, Ingress, Route, Stage, Translation};
use crate::pipeline::Pipeline;
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::{ethernet, icmp, ipv4, tcp, EthernetFrame, IcmpPacket, Ipv4Packet, Ipv4Repr};

impl Pipeline {
    /// An IPv4 datagram: the checks every datagram must pass, then the stateful stage,
    /// routing and the features.
    pub(crate) fn ipv4(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        match self.admit_ipv4(pkt, ingress, now_ns) {
            Ok(datagram) => self.forward(pkt, ingress, datagram, probe, now_ns),
            Err(verdict) => verdict,
        }
    }

    /// The checks of a received datagram before any state is looked at: its header
    /// (checksum, options), DHCP answers for the kernel twin, its addresses (martians,
    /// broadcasts, the gateway's own, source validation), a unicast datagram in a link-layer
    /// broadcast, and its TTL. Trims the frame to the datagram. Err: what became of it.
    fn admit_ipv4(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        now_ns: u64,
    ) -> Result<Datagram, Verdict> {
        let Ok(ip) = Ipv4Packet::new_checked(&pkt.bytes()[ethernet::HEADER_LEN..]) else {
            return Err(Verdict::Drop(DropReason::MalformedIpv4));
        };
        if !ip.verify_checksum() {
            return Err(Verdict::Drop(DropReason::Ipv4Checksum));
        }
        if let Some(reason) = options_drop_reason(&ip) {
            return Err(Verdict::Drop(reason));
        }
        if self.router.punt.is_dhcp_client(ingress.port) {
            if let Some(verdict) = self.punt_dhcp_answer(&ip, ingress) {
                return Err(verdict);
            }
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let frame_len = ethernet::HEADER_LEN + usize::from(ip.total_len());
        let ttl = ip.ttl();
        // A directed-broadcast source must go too (RFC 1812 5.3.7): answering it, with an echo
        // reply or an ICMP error, would broadcast to the whole subnet. So must one of the
        // gateway's own addresses as source: it never receives what it sent, so that is a
        // spoof, and NAT would take it for a host and reflect replies to itself.
        if is_martian(src)
            || is_martian(dst)
            || self.router.interfaces.iter().any(|iface| {
                iface.is_own(src)
                    || iface.is_directed_broadcast(src)
                    || iface.is_directed_broadcast(dst)
            })
        {
            // Broadcast DHCP is for the kernel twin, when there is one.
            return Err(self
                .punt_broadcast(&ip, ingress, now_ns)
                .unwrap_or(Verdict::Drop(DropReason::MartianAddress)));
        }
        // A handed-off packet was checked by the worker that received it.
        if !ingress.handed_off && !self.router.source_allowed(ingress.port, src) {
            return Err(Verdict::Drop(DropReason::SourceValidation));
        }
        let local = self.router.local_port(dst).is_some();
        // RFC 1812 5.3.4: a unicast datagram in a link-layer broadcast is not forwarded.
        if !local
            && EthernetFrame::new_unchecked(pkt.bytes())
                .dst_addr()
                .is_multicast()
        {
            return Err(Verdict::Drop(DropReason::LinkLayerBroadcast));
        }
        // Ethernet pads short frames; what we send must end where the datagram does.
        pkt.set_len(frame_len);
        if !local && ttl <= 1 {
            return Err(self.icmp_error(pkt, ingress.port, now_ns, IcmpError::TimeExceeded));
        }
        Ok(Datagram { src, frame_len })
    }

    /// An admitted datagram through the stateful stage (conntrack, firewall, NAT, content),
    /// routing and the features; an established flow's direction gets its shortcut for the
    /// fast path.
    fn forward(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        Datagram { src, frame_len }: Datagram,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        let stage =
            self.stateful
                .process(&self.router, &self.counters, pkt, ingress, probe, now_ns);
        let (translation, established) = match stage {
            Stage::Forward(translation) => (translation, None),
            Stage::Established {
                translation,
                flow,
                direction,
            } => (translation, Some((flow, direction))),
            Stage::Done(verdict) => return verdict,
            Stage::Request(request) => return self.serve_request(request, pkt, ingress, now_ns),
        };
        let src_mac = EthernetFrame::new_unchecked(pkt.bytes()).src_addr();
        let mut shortcut = None;
        let verdict = match self.route_and_send(pkt, ingress.port, now_ns, translation) {
            Ok((Verdict::Transmit { port }, next_hop)) => {
                shortcut = established.map(|(flow, direction)| (flow, direction, port, next_hop));
                Verdict::Transmit { port }
            }
            Ok((verdict, _)) | Err(verdict) => verdict,
        };
        let (verdict, plan) = self.features(
            ingress.port,
            (src, src_mac),
            pkt,
            verdict,
            frame_len,
            now_ns,
        );
        if let Some((flow, direction, egress, next_hop)) = shortcut {
            let route = Route { egress, next_hop };
            self.remember_shortcut(pkt, ingress, flow, direction, route, plan);
        }
        verdict
    }

    /// Routes a datagram whose headers are final, decrements its TTL and writes its L2 header.
    /// `translation` is how the stateful stage rewrote it, undone for an ICMP error about it.
    /// With uplinks, a datagram leaving with an uplink's address goes by that uplink
    /// ([`RouterConfig::route_from`](crate::pipeline::config::RouterConfig::route_from)).
    /// Ok: the datagram itself goes on (or waits for its next hop's MAC), and the next hop it
    /// goes to; Err: it was dropped or turned into an ICMP error about it.
    fn route_and_send(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: u16,
        now_ns: u64,
        translation: Option<Translation>,
    ) -> Result<(Verdict, Ipv4Addr), Verdict> {
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let (ttl, dont_frag) = (ip.ttl(), ip.dont_frag());
        let datagram_len = usize::from(ip.total_len());
        if ttl <= 1 {
            // Only reachable for translated replies addressed to the gateway; an error about
            // a translated packet would confuse its sender, so none is sent.
            return Err(Verdict::Drop(DropReason::TtlExpired));
        }
        let Some(next_hop) = self.router.route_from(src, dst) else {
            let error = IcmpError::NoRoute;
            return Err(self.icmp_error_untranslated(pkt, ingress, now_ns, translation, error));
        };
        let egress = &self.router.interfaces[usize::from(next_hop.port)];
        if !egress.has_address() {
            return Err(Verdict::Drop(DropReason::InterfaceUnaddressed));
        }
        let too_big = usize::from(egress.mtu) < datagram_len;
        if too_big && dont_frag {
            let error = IcmpError::FragmentationNeeded { mtu: egress.mtu };
            return Err(self.icmp_error_untranslated(pkt, ingress, now_ns, translation, error));
        }
        let mut ip = Ipv4Packet::new_unchecked(&mut pkt.bytes_mut()[ethernet::HEADER_LEN..]);
        ip.decrement_ttl();
        let port = next_hop.port;
        if let Some(limit) = self.router.mss_limit(ingress, port) {
            self.clamp_mss(pkt, limit);
        }
        let next_hop = next_hop.resolve(dst);
        let verdict = match self.resolve_l2(pkt, port, next_hop) {
            None if too_big => Verdict::Fragment { port },
            None => Verdict::Transmit { port },
            Some(unresolved) => unresolved,
        };
        Ok((verdict, next_hop))
    }

    /// Lowers a forwarded TCP SYN's (or SYN-ACK's) MSS option to `limit`; only the full path
    /// forwards SYNs, so the fast path needs no clamp. Not
    /// for non-initial fragments, which hold no TCP header; a first fragment's checksum covers
    /// the whole datagram, which the incremental update keeps right.
    fn clamp_mss(&mut self, pkt: &mut PacketBuf, limit: u16) {
        let mut ip = Ipv4Packet::new_unchecked(&mut pkt.bytes_mut()[ethernet::HEADER_LEN..]);
        if ip.protocol() != ipv4::protocol::TCP || ip.frag_offset() != 0 {
            return;
        }
        let segment = ip.payload_mut();
        let is_syn = segment
            .get(tcp::field::FLAGS)
            .is_some_and(|flags| flags & tcp::flags::SYN != 0);
        if is_syn && tcp::clamp_mss(segment, limit).is_some() {
            self.counters.mss_clamped.inc();
        }
    }

    /// An ICMP error about a packet NAT rewrote must go to its sender and quote what that
    /// sender sent (the sender of a masqueraded packet would otherwise never learn the path
    /// MTU: the error would go to the gateway's own address).
    fn icmp_error_untranslated(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: u16,
        now_ns: u64,
        translation: Option<Translation>,
        error: IcmpError,
    ) -> Verdict {
        if translation.is_some_and(|translation| !translation.undo(pkt)) {
            return Verdict::Drop(error.drop_reason());
        }
        self.icmp_error(pkt, ingress, now_ns, error)
    }

    /// Writes the Ethernet header toward `next_hop` on `port`; returns a verdict only when
    /// the next hop's MAC is not known yet.
    #[inline]
    fn resolve_l2(&self, pkt: &mut PacketBuf, port: u16, next_hop: Ipv4Addr) -> Option<Verdict> {
        let Some(mac) = self.neighbors.get(next_hop) else {
            return Some(Verdict::Control(ControlWork::Resolve { port, next_hop }));
        };
        let src_mac = self.router.interfaces[usize::from(port)].mac;
        ethernet::write_l2(pkt.bytes_mut(), mac, src_mac);
        None
    }

    /// Rewrites the packet into the ICMP error about it (RFC 792, RFC 1812 4.3.2) and routes
    /// that back to the sender. The original is counted as dropped under the error's reason
    /// either way.
    pub(crate) fn icmp_error(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: u16,
        now_ns: u64,
        error: IcmpError,
    ) -> Verdict {
        let reason = error.drop_reason();
        if !may_answer_with_icmp_error(pkt.bytes()) {
            return Verdict::Drop(reason);
        }
        let original = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let sender = original.src_addr();
        let original_len = usize::from(original.total_len());
        // RFC 792: the quote must reach 8 bytes into the payload, where the sender finds the
        // ports that tie the error to a socket.
        let min_quote = original_len.min(usize::from(original.header_len()) + 8);
        let quote_len = original_len
            .min(ICMP_ERROR_MAX_LEN - ipv4::HEADER_LEN - icmp::HEADER_LEN)
            .min(pkt.capacity().saturating_sub(ICMP_ERROR_HEADERS));
        // Checked before taking a token, so errors that cannot be sent do not use up the
        // budget of those that can.
        if quote_len < min_quote {
            return Verdict::Drop(reason);
        }
        let source = self.router.interfaces[usize::from(ingress)].addr;
        // From the ingress's address, so by its uplink where it is one.
        let Some(route) = self.router.route_from(source, sender) else {
            return Verdict::Drop(reason);
        };
        if !self.icmp_errors.try_take(error.budget(), now_ns) {
            self.counters.icmp_errors_rate_limited.inc();
            return Verdict::Drop(reason);
        }
        let new_len = ICMP_ERROR_HEADERS + quote_len;

        let room = pkt.room_mut();
        room.copy_within(
            ethernet::HEADER_LEN..ethernet::HEADER_LEN + quote_len,
            ICMP_ERROR_HEADERS,
        );
        let icmp_len = icmp::HEADER_LEN + quote_len;
        {
            let mut message = IcmpPacket::new_unchecked(
                &mut room[ethernet::HEADER_LEN + ipv4::HEADER_LEN..new_len],
            );
            let (msg_type, code, rest) = error.header();
            message.set_msg_type(msg_type);
            message.set_code(code);
            message.set_rest_of_header(rest);
            message.fill_checksum();
        }
        let mut header = Ipv4Repr::new(
            source,
            sender,
            ipv4::protocol::ICMP,
            icmp_len as u16,
            ipv4::GENERATED_TTL,
        );
        header.dont_frag = false;
        header.emit(&mut Ipv4Packet::new_unchecked(
            &mut room[ethernet::HEADER_LEN..ethernet::HEADER_LEN + ipv4::HEADER_LEN],
        ));
        pkt.set_len(new_len);

        self.counters.record_drop(reason);
        self.counters.icmp_errors_sent.inc();
        let port = route.port;
        match self.resolve_l2(pkt, port, route.resolve(sender)) {
            None => Verdict::Transmit { port },
            Some(unresolved) => unresolved,
        }
    }

    /// Sends a packet the gateway generated in place (a TCP reset, the SYN proxy's segments)
    /// toward `dst`: from an uplink's address, by that uplink.
    pub(crate) fn send_generated(&mut self, pkt: &mut PacketBuf, dst: Ipv4Addr) -> Option<Verdict> {
        let src = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]).src_addr();
        let route = self.router.route_from(src, dst)?;
        let port = route.port;
        Some(match self.resolve_l2(pkt, port, route.resolve(dst)) {
            None => Verdict::Transmit { port },
            Some(unresolved) => unresolved,
        })
    }
}

/// RFC 1812 4.3.2.3: an ICMP error carries as much of the original as fits in 576 bytes.
const ICMP_ERROR_MAX_LEN: usize = 576;

/// Ethernet + IPv4 + ICMP headers in front of the quoted datagram.
const ICMP_ERROR_HEADERS: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp::HEADER_LEN;

/// What forwarding needs of a datagram the input checks admitted.
#[derive(Clone, Copy, Debug)]
struct Datagram {
    src: Ipv4Addr,
    /// Where the datagram ends in the frame (Ethernet pads short ones).
    frame_len: usize,
}

/// Source-routed datagrams (RFC 7126) and options that do not parse are not forwarded. Most
/// datagrams carry no options, and pay one comparison.
#[inline]
fn options_drop_reason<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Option<DropReason> {
    if usize::from(ip.header_len()) == ipv4::HEADER_LEN {
        return None;
    }
    match ipv4::check_options(ip.options()) {
        Ok(()) => None,
        Err(ipv4::OptionsError::SourceRoute) => Some(DropReason::Ipv4SourceRoute),
        Err(ipv4::OptionsError::Malformed) => Some(DropReason::MalformedIpv4Options),
    }
}

/// Addresses that must never be forwarded, as source or destination (RFC 1812 5.3.7).
fn is_martian(ip: Ipv4Addr) -> bool {
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.octets()[0] == 0
}

//! IPv6 forwarding for one worker (RFC 8200, RFC 4443): the checks a router makes of a
//! packet, the stateful stage ([`crate::pipeline::stateful6`]), the route, the hop limit,
//! the neighbour, and the ICMPv6 errors a router raises, rate-limited from IPv4's budgets.
//! Routers never fragment IPv6: a packet larger than the next link's MTU is answered with
//! Packet Too Big, which path-MTU discovery lives on.
//!
//! IPv6 for the gateway itself (Neighbor Discovery, echo, Router Solicitations, MLD) goes
//! to [`crate::pipeline::local::ipv6`]. QoS and the traffic meter see a LAN host's IPv6
//! traffic as its IPv4 address's ([`crate::state::flow_data::Features`]).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::l3::icmpv6_error::{self, Icmpv6Error};
use crate::packet::PacketBuf;
use crate::pipeline::config::Ipv6Interface;
use crate::pipeline::local::ipv6::{self as ipv6_local, scoped};
use crate::pipeline::local::punt::is_autoconfiguration6;
use crate::pipeline::stage::{Ingress, Stage};
use crate::pipeline::stateful::answer_blocked_dns;
use crate::pipeline::stateful6::Client6;
use crate::pipeline::Pipeline;
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::ipv6::Upper6;
use crate::wire::ipv6::{self, is_link_local, walk_extensions};
use crate::wire::{ethernet, EthernetAddress, EthernetFrame, Ipv6Packet};

impl Pipeline {
    /// An IPv6 frame on an interface with IPv6: for the gateway, or to forward.
    pub(crate) fn ipv6(&mut self, pkt: &mut PacketBuf, ingress: Ingress, now_ns: u64) -> Verdict {
        let Some(v6) = self.router.ipv6(ingress.port) else {
            return Verdict::Drop(DropReason::UnsupportedEthertype);
        };
        let Some(dst) = pkt
            .bytes()
            .get(ethernet::HEADER_LEN..)
            .and_then(|ip| Ipv6Packet::new_checked(ip).ok())
            .map(|ip| ip.dst_addr())
        else {
            return Verdict::Drop(DropReason::MalformedIpv6);
        };
        if dst.is_multicast() || v6.accepts(dst) {
            if v6.autoconfigure && v6.accepts(dst) && is_autoconfiguration6(pkt.bytes()) {
                return self.router.deliver_locally(ingress.port);
            }
            return ipv6_local::classify(pkt.bytes(), v6);
        }
        if self.router.owns6(dst) {
            // Another interface's address: what the gateway answers there it answers only on
            // that link so far.
            return Verdict::Drop(DropReason::Ipv6LocalUnhandled);
        }
        self.forward6(pkt, ingress, now_ns)
    }

    /// A unicast IPv6 packet for another host: checked, tracked, routed and sent.
    fn forward6(&mut self, pkt: &mut PacketBuf, ingress: Ingress, now_ns: u64) -> Verdict {
        let ip = Ipv6Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        // RFC 4291: nothing is sent from the unspecified, loopback or a multicast address,
        // nor to loopback or the unspecified address; link-local addresses never leave their link (2.5.6). Nor does one
        // of the gateway's own addresses arrive as a source: that is a spoof.
        if src.is_unspecified()
            || src.is_loopback()
            || src.is_multicast()
            || dst.is_loopback()
            || dst.is_unspecified()
            || self.router.owns6(src)
        {
            return Verdict::Drop(DropReason::MartianAddress);
        }
        if is_link_local(src) || is_link_local(dst) {
            return Verdict::Drop(DropReason::Ipv6NotForwarded);
        }
        // RFC 1812 5.3.4's rule, for IPv6 too: unicast in a link-layer multicast is not ours.
        if EthernetFrame::new_unchecked(pkt.bytes())
            .dst_addr()
            .is_multicast()
        {
            return Verdict::Drop(DropReason::LinkLayerBroadcast);
        }
        let ext = match walk_extensions(ip.next_header(), ip.payload()) {
            Ok(ext) => ext,
            Err(_) => return Verdict::Drop(DropReason::Ipv6ExtensionHeaders),
        };
        if !ingress.handed_off && !self.router.source_allowed6(ingress.port, src) {
            return Verdict::Drop(DropReason::SourceValidation);
        }
        let packet_len = ipv6::HEADER_LEN + usize::from(ip.payload_len());
        let hop_limit = ip.hop_limit();
        // Ethernet pads short frames; what we send must end where the packet does.
        pkt.set_len(ethernet::HEADER_LEN + packet_len);
        if hop_limit <= 1 {
            return self.icmpv6_error(pkt, ingress, now_ns, Icmpv6Error::HopLimitExceeded);
        }
        let Some(route) = self.router.routes6.lookup(dst) else {
            return self.icmpv6_error(pkt, ingress, now_ns, Icmpv6Error::NoRoute);
        };
        let egress = route.port;
        if self.router.ipv6(egress).is_none() {
            return Verdict::Drop(DropReason::Ipv6NotForwarded);
        }
        let mtu = self.router.interfaces[usize::from(egress)].mtu;
        if packet_len > usize::from(mtu) {
            let error = Icmpv6Error::PacketTooBig {
                mtu: u32::from(mtu),
            };
            return self.icmpv6_error(pkt, ingress, now_ns, error);
        }
        let client = self.content_client6(pkt, ingress.port, now_ns);
        let ip = Ipv6Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let firewall_log = self.stateful.firewall_log.as_mut();
        let stage = self.stateful6.process(
            &self.router,
            &ip,
            &ext,
            (ingress, egress),
            client,
            firewall_log,
            now_ns,
        );
        let established = match stage {
            Stage::Forward(_) => None,
            Stage::Established {
                flow, direction, ..
            } => Some((flow, direction)),
            Stage::Done(verdict) => return verdict,
            Stage::Request(request) => return self.serve_request6(request, pkt, ingress, now_ns),
        };
        Ipv6Packet::new_unchecked(&mut pkt.bytes_mut()[ethernet::HEADER_LEN..])
            .decrement_hop_limit();
        let src_mac = EthernetFrame::new_unchecked(pkt.bytes()).src_addr();
        let sent = self.send6(pkt, egress, route.resolve(dst));
        let upper = Upper6 {
            protocol: ext.protocol,
            header_at: ext.has_upper_layer_header().then_some(ext.offset),
        };
        let (verdict, features) = self.features6(ingress.port, src_mac, pkt, upper, sent, now_ns);
        if let (Verdict::Transmit { .. }, Some((flow, direction))) = (sent, established) {
            let route = (egress, features, src_mac);
            self.remember_shortcut6(pkt, ingress, flow, direction, route);
        }
        verdict
    }

    /// The LAN device `pkt` comes from on `port`, when the content policy applies to it: see
    /// [`Client6`].
    #[inline]
    fn content_client6(&self, pkt: &PacketBuf, port: u16, now_ns: u64) -> Option<Client6> {
        self.router.stateful.content.as_ref()?;
        if self.router.stateful.masquerade[usize::from(port)] {
            return None;
        }
        let mac = EthernetFrame::new_unchecked(pkt.bytes()).src_addr();
        let address = self.lan_host6(port, mac).unwrap_or(Ipv4Addr::UNSPECIFIED);
        Some(Client6 {
            device: (address, Some(mac)),
            unix_seconds: self.stateful.unix_seconds(now_ns),
        })
    }

    /// A LAN device's DNS query for a blocked name: answered NXDOMAIN from the address it
    /// asked, or dropped, as the policy says; counted as blocked content either way.
    #[cold]
    pub(crate) fn answer_blocked_dns(&mut self, pkt: &mut PacketBuf, ingress: Ingress) -> Verdict {
        let Some(policy) = self.router.stateful.content.as_deref() else {
            return Verdict::Drop(DropReason::ContentBlocked);
        };
        let verdict = answer_blocked_dns(pkt, ingress, policy, &self.counters);
        // An answer's drop was counted there; `process_full` marks a drop as IPv6's.
        if let Verdict::Transmit { .. } = verdict {
            self.counters.record_ipv6_drop(DropReason::ContentBlocked);
        }
        verdict
    }

    /// Writes the Ethernet header toward `next_hop` on `port` and sends, or asks the control
    /// thread to resolve it.
    pub(crate) fn send6(&self, pkt: &mut PacketBuf, port: u16, next_hop: Ipv6Addr) -> Verdict {
        let src_mac = self.router.interfaces[usize::from(port)].mac;
        // Link-local neighbours are known by their link (see `ipv6_local::scoped`).
        let Some(mac) = self.neighbors.get6(scoped(next_hop, port)) else {
            // On a PPPoE link every next hop is the access concentrator, whose MAC the
            // session's framing writes (no Neighbor Discovery runs there).
            if self.router.runs_pppoe(port) {
                ethernet::write_l2(pkt.bytes_mut(), src_mac, src_mac);
                return Verdict::Transmit { port };
            }
            return Verdict::Control(ControlWork::Resolve6 { port });
        };
        ethernet::write_l2(pkt.bytes_mut(), mac, src_mac);
        Verdict::Transmit { port }
    }

    /// Rewrites the packet into the ICMPv6 error about it (RFC 4443), from our address on
    /// the link it came in by, and routes that back to its sender. The original counts as
    /// dropped under the error's reason either way.
    pub(crate) fn icmpv6_error(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        now_ns: u64,
        error: Icmpv6Error,
    ) -> Verdict {
        let reason = error.drop_reason();
        if !icmpv6_error::may_answer(pkt.bytes(), error) {
            return Verdict::Drop(reason);
        }
        let sender = Ipv6Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]).src_addr();
        let Some(route) = self.router.routes6.lookup(sender) else {
            return Verdict::Drop(reason);
        };
        let Some(source) = self
            .router
            .ipv6(ingress.port)
            .and_then(|v6| error_source(v6, sender))
        else {
            return Verdict::Drop(reason);
        };
        if !self.icmp_errors.try_take(error.budget(), now_ns) {
            self.counters.icmp_errors_rate_limited.inc();
            return Verdict::Drop(reason);
        }
        let port = route.port;
        let src_mac = self.router.interfaces[usize::from(port)].mac;
        let frame_len = pkt.len();
        // The MAC is written once the next hop is known (below, or by the control thread).
        let unknown = EthernetAddress([0; 6]);
        let written = icmpv6_error::turn_into_icmpv6_error(
            pkt.room_mut(),
            frame_len,
            error,
            source,
            src_mac,
            unknown,
        );
        match written {
            Some(len) if pkt.set_len(len) => {}
            _ => return Verdict::Drop(reason),
        }
        self.counters.record_drop(reason);
        self.counters.record_ipv6_drop(reason);
        self.counters.icmp_errors_sent.inc();
        self.send6(pkt, port, route.resolve(sender))
    }
}

/// The address an error to `to` comes from: one of the interface's global addresses, the
/// one whose prefix holds `to` first; none without any (a link-local source would not be
/// answerable beyond the link).
fn error_source(v6: &Ipv6Interface, to: Ipv6Addr) -> Option<Ipv6Addr> {
    let on_link = v6
        .addresses
        .iter()
        .find(|&&(own, len)| ipv6::prefix_of(own, len) == ipv6::prefix_of(to, len));
    on_link.or(v6.addresses.first()).map(|&(own, _)| own)
}

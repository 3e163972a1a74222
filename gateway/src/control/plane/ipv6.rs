//! IPv6 on the control thread: neighbour discovery (solicits, advertisements, learning),
//! MLD reports, router advertisements, and resolving packets held for an IPv6 next hop.

use super::*;

impl ControlPlane {
    /// Answers IPv6 for the gateway (see `pipeline::pipeline::local::ipv6::answer`): the
    /// reply in place, or a Router Advertisement for a solicitation, within its rate.
    pub(crate) fn handle_ipv6(&mut self, router: &RouterConfig, ingress: u16, mut mbuf: Mbuf) {
        let iface = &router.interfaces[usize::from(ingress)];
        let Some(v6) = router.ipv6(ingress) else {
            return self.counters.record_drop(DropReason::UnsupportedEthertype);
        };
        // Routed by a worker (or an ICMPv6 error it raised), waiting for its next hop's MAC.
        if let Some(dst) = forwarded_destination(mbuf.data(), v6) {
            return self.resolve_ipv6(router, mbuf, dst);
        }
        // Before the answer is written over it: a twin with IPv6 hears its neighbours too.
        self.twins.copy_ndisc(
            (ingress, mbuf.data()),
            router,
            &self.pool,
            (self.clock.now_ns(), &self.counters),
        );
        let len = mbuf.len();
        let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
        let (answer, sighting) = ipv6_local::answer(&mut pkt, iface, v6);
        if let Some(sighting) = sighting {
            if !self.learn_ipv6(iface, v6, ingress, sighting, answer) {
                return;
            }
        }
        match answer {
            Answer::Learn => {}
            // No switch snoops a PPPoE link (see `announce`): queries there go unanswered.
            Answer::MldQuery if router.runs_pppoe(ingress) => {}
            Answer::MldQuery => {
                if self.mld_reports.try_take(self.clock.now_ns()) {
                    self.send_mld_report(iface, v6, ingress, mld_record::MODE_IS_EXCLUDE);
                } else {
                    self.counters.record_drop(DropReason::SlowPathPoliced);
                }
            }
            Answer::Reply => {
                let reply_len = pkt.len();
                if mbuf.set_len(reply_len).is_ok() {
                    self.send(ingress, mbuf);
                }
            }
            Answer::RouterSolicited { to, mac } => {
                let now_ns = self.clock.now_ns();
                let Some(advert) = v6.advertise.as_ref() else {
                    return self.counters.record_drop(DropReason::Ipv6LocalUnhandled);
                };
                if !self.solicited_adverts.try_take(now_ns) {
                    return self.counters.record_drop(DropReason::SlowPathPoliced);
                }
                let room = MAX_ADVERTISED_PREFIXES.saturating_sub(v6.addresses.len());
                let withdrawn = self.adverts.withdrawn(usize::from(ingress), room);
                let room = pkt.room_mut();
                let leases = (&withdrawn[..], crate::dataplane::clock::shared_secs());
                match ipv6_local::write_router_advert(room, iface, v6, advert, leases, to, mac) {
                    Some(len) if mbuf.set_len(len).is_ok() => {
                        self.counters.router_adverts.inc();
                        self.adverts.solicited(usize::from(ingress), now_ns);
                        self.send(ingress, mbuf);
                    }
                    _ => self.counters.record_drop(DropReason::NoBuffer),
                }
            }
            Answer::Drop(reason) => self.counters.record_drop(reason),
        }
    }

    /// Holds an IPv6 packet a worker routed until Neighbor Discovery finds its next hop, as
    /// `handle` does IPv4's with ARP; sends it at once if the table knows the MAC.
    pub(crate) fn resolve_ipv6(&mut self, router: &RouterConfig, mbuf: Mbuf, dst: Ipv6Addr) {
        let Some(route) = router.routes6.lookup(dst) else {
            return self.counters.record_drop(DropReason::NoRoute);
        };
        let port = route.port;
        let (Some(iface), Some(v6)) = (router.interfaces.get(usize::from(port)), router.ipv6(port))
        else {
            return self.counters.record_drop(DropReason::Ipv6NotForwarded);
        };
        let next_hop = route.resolve(dst);
        let held = HeldPacket { mbuf, port };
        // A PPPoE session's every next hop is its access concentrator, whose MAC the
        // session's framing writes (or refuses the packet as `pppoe_down`), as the workers'
        // `send6` relies on: no Neighbor Discovery there.
        if router.runs_pppoe(port) {
            return self.transmit_held(router, held, iface.mac);
        }
        // Link-local neighbours are known by their link.
        let key = scoped(next_hop, port);
        let now_ns = self.clock.now_ns();
        let evictions_before = self.table6.evictions();
        let counters = &self.counters;
        let evicted = |_held| counters.record_drop(DropReason::NeighborEvicted);
        let src = Some(source_for(v6, next_hop));
        match self.table6.lookup(key, now_ns, evicted) {
            Lookup::Resolved { mac, refresh } => {
                self.transmit_held(router, held, EthernetAddress(mac));
                if refresh {
                    let unicast = Some(EthernetAddress(mac));
                    self.send_neighbor_solicit(iface, port, next_hop, unicast, src);
                }
            }
            Lookup::Pending { send_request } => {
                if let Err((_held, reason)) = self.table6.enqueue(key, held) {
                    self.counters.record_drop(reason);
                }
                if send_request {
                    self.send_neighbor_solicit(iface, port, next_hop, None, src);
                }
            }
            Lookup::TableFull => self.counters.record_drop(DropReason::NeighborQueueFull),
        }
        self.counters.ipv6_neighbors.set(self.table6.len() as u64);
        if self.table6.evictions() != evictions_before {
            self.publish_view();
        }
    }

    /// Lets the IPv6 neighbour table learn what a packet showed, by the ARP policy (see
    /// `pipeline::l3::neigh`): false, counted, if the binding was refused, and then the
    /// packet's answer must not go (as ARP does not answer a refused claim). A refused change
    /// of MAC sends the unicast check to the MAC we have.
    pub(crate) fn learn_ipv6(
        &mut self,
        iface: &pipeline::Interface,
        v6: &pipeline::pipeline::config::Ipv6Interface,
        port: u16,
        sighting: Sighting,
        answer: Answer,
    ) -> bool {
        let now_ns = self.clock.now_ns();
        let counters = &self.counters;
        let mut released = Vec::new();
        let learned = self.table6.learn(
            scoped(sighting.ip, port),
            sighting.mac.0,
            sighting.source,
            now_ns,
            |held| released.push(held),
            |_held| counters.record_drop(DropReason::NeighborEvicted),
        );
        if !released.is_empty() {
            let (router, _) = self.router.load();
            for held in released {
                self.transmit_held(&router, held, sighting.mac);
            }
        }
        self.counters.ipv6_neighbors.set(self.table6.len() as u64);
        if learned == Learn::Changed {
            self.publish_view();
        }
        match learned {
            Learn::Refused {
                refusal,
                probe_old_mac,
            } => {
                self.counters.record_drop(refusal.ndisc_reason());
                if let Some(old) = probe_old_mac {
                    let src = source_for(v6, sighting.ip);
                    let unicast = Some(EthernetAddress(old));
                    self.send_neighbor_solicit(iface, port, sighting.ip, unicast, Some(src));
                }
                false
            }
            // An unsolicited advertisement about a neighbour we do not know: nothing to do.
            Learn::Ignored
                if answer == Answer::Learn && sighting.source != ArpSource::RequestForUs =>
            {
                self.counters.record_drop(DropReason::Ipv6LocalUnhandled);
                true
            }
            Learn::Changed | Learn::Confirmed | Learn::Ignored => true,
        }
    }

    /// Sends an MLDv2 report of the groups we listen to on `port`: see
    /// `ipv6_local::write_mld_report`.
    pub(crate) fn send_mld_report(
        &mut self,
        iface: &pipeline::Interface,
        v6: &pipeline::pipeline::config::Ipv6Interface,
        port: u16,
        record_type: u8,
    ) {
        let mut frame = [0u8; 512];
        if let Some(len) = ipv6_local::write_mld_report(&mut frame, iface, v6, record_type) {
            self.send_frame(port, &frame[..len]);
        }
    }

    /// Sends a Neighbor Solicitation for `target` out of `port`: see
    /// `ipv6_local::write_neighbor_solicit`.
    pub(crate) fn send_neighbor_solicit(
        &mut self,
        iface: &pipeline::Interface,
        port: u16,
        target: Ipv6Addr,
        unicast: Option<EthernetAddress>,
        src: Option<Ipv6Addr>,
    ) {
        let mut frame = [0u8; 128];
        if let Some(len) =
            ipv6_local::write_neighbor_solicit(&mut frame, iface, target, unicast, src)
        {
            self.send_frame(port, &frame[..len]);
        }
    }

    /// Sends the unsolicited Router Advertisements that are due, to all nodes.
    pub(crate) fn advertise(&mut self, router: &RouterConfig, now_ns: u64) {
        for (port, iface) in router.interfaces.iter().enumerate() {
            let Some(v6) = router.ipv6(port as u16) else {
                continue;
            };
            let Some(advert) = v6.advertise.as_ref() else {
                continue;
            };
            self.adverts
                .announce(port, &v6.addresses, advert.router_lifetime_secs);
            if !self.adverts.due(port, advert.interval_secs, now_ns) {
                continue;
            }
            let mut frame = [0u8; ADVERT_FRAME_ROOM];
            let all_nodes = pipeline::wire::ipv6::ALL_NODES;
            let mac = pipeline::wire::ipv6::multicast_mac(all_nodes);
            let room = MAX_ADVERTISED_PREFIXES.saturating_sub(v6.addresses.len());
            let withdrawn = self.adverts.withdrawn(port, room);
            let leases = (&withdrawn[..], crate::dataplane::clock::shared_secs());
            let written = ipv6_local::write_router_advert(
                &mut frame, iface, v6, advert, leases, all_nodes, mac,
            );
            if let Some(len) = written {
                self.counters.router_adverts.inc();
                self.send_frame(port as u16, &frame[..len]);
                self.adverts.advertised(port, withdrawn.len());
            }
        }
    }

    /// Ages the IPv6 neighbours and sends the solicitations their checks ask for, out of the
    /// interface whose link holds the address.
    pub(crate) fn maintain_ipv6(&mut self, router: &RouterConfig, now_ns: u64) {
        let mut probes: Vec<NeighborProbe<Ipv6Addr>> = Vec::new();
        let before = self.table6.len();
        let counters = self.counters.clone();
        self.table6.expire(
            now_ns,
            EXPIRE_BUDGET,
            |_held| counters.record_drop(DropReason::NeighborUnreachable),
            |probe| probes.push(probe),
        );
        self.counters.ipv6_neighbors.set(self.table6.len() as u64);
        if self.table6.len() != before {
            self.publish_view();
        }
        for NeighborProbe { ip, unicast } in probes {
            let Some((port, target)) = ipv6_local::neighbor_port(router, ip) else {
                continue;
            };
            let (Some(iface), Some(v6)) =
                (router.interfaces.get(usize::from(port)), router.ipv6(port))
            else {
                continue;
            };
            let src = source_for(v6, target);
            self.send_neighbor_solicit(
                iface,
                port,
                target,
                unicast.map(EthernetAddress),
                Some(src),
            );
        }
    }
}

/// Our address to solicit `target` from: one in the same prefix, else the link-local one.
pub(crate) fn source_for(
    v6: &pipeline::pipeline::config::Ipv6Interface,
    target: Ipv6Addr,
) -> Ipv6Addr {
    v6.addresses
        .iter()
        .find(|&&(own, len)| ipv6_local::prefix_of(own, len) == ipv6_local::prefix_of(target, len))
        .map_or(v6.link_local, |&(own, _)| own)
}

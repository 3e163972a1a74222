//! The control thread, on the main lcore: ARP (answers, resolution, ageing, gratuitous ARP
//! at start), echo replies for the gateway's own addresses, and packets held while their next
//! hop resolves. It owns the neighbour table and publishes read-only views to the workers.
//! What it sends goes over an SPSC ring to worker 0, which transmits it on its own TX queue:
//! every TX queue keeps a single writer, and devices with one queue per worker suffice.

mod ipv6;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pipeline::l3::neigh::{
    ArpProbe, ArpSource, Learn, Lookup, NeighborConfig, NeighborProbe, NeighborState, NeighborTable,
};
use pipeline::pipeline::local::arp::{
    echo_reply, handle_arp, is_arp, write_arp_probe, write_gratuitous_arp,
};
use pipeline::pipeline::local::ipv6::{
    self as ipv6_local, mld_record, scoped, AdvertSchedule, Answer, Sighting,
    MAX_ADVERTISED_PREFIXES,
};
use pipeline::ratelimit::TokenBucket;
use pipeline::wire::{ethernet, EthernetAddress, EthernetFrame, Ipv4Packet};
use pipeline::{DropReason, NeighborView, PacketBuf, RouterConfig, WorkerCounters};

use crate::control::pppoe_clients::{PppoeLinks, PppoeView};
use crate::control::twins::Twins;
use crate::control::virtual_addresses::VirtualHeld;
use crate::dataplane::clock::Clock;
use crate::dataplane::egress::split_into_fragments;
use crate::dataplane::published::Published;
use crate::dataplane::sync_link::SyncQueues;
use crate::dpdk::{Mbuf, MbufBatch, Mempool, RingConsumer, RingProducer};

/// How often the neighbour table is swept and stale entries re-probed.
const MAINTENANCE_INTERVAL_NS: u64 = 100_000_000;
const EXPIRE_BUDGET: usize = 256;
/// How often the PPPoE clients' timers run (theirs are seconds), and their status is
/// refreshed for metrics.
const PPPOE_TIMER_INTERVAL_NS: u64 = 10_000_000;
const PPPOE_STATUS_INTERVAL_NS: u64 = 1_000_000_000;
/// The neighbour view is republished at most this often: a flood of ARP from made-up senders,
/// each a new binding, costs one publish per interval, not one per packet. A change after a
/// quiet interval is published at once; the ones that come sooner go out together at its end.
const VIEW_PUBLISH_INTERVAL_NS: u64 = 2_000_000;
/// Router Advertisements answering solicitations, over all interfaces: a host asks a few
/// times when its link comes up, so a flood of solicitations gets no more than this.
const SOLICITED_ADVERTS_PER_SEC: u32 = 10;
const SOLICITED_ADVERTS_BURST: u32 = 20;
/// Room for the largest advertisement (8 prefixes, 8 DNS servers): under 500 bytes.
const ADVERT_FRAME_ROOM: usize = 1024;

/// A packet waiting for its next hop's MAC, and the port it leaves by.
struct HeldPacket {
    mbuf: Mbuf,
    port: u16,
}

pub struct ControlPlane {
    /// To worker 0, which transmits; each mbuf's port field names its egress interface.
    to_worker: RingProducer,
    outbox: MbufBatch,
    pub from_workers: Vec<RingConsumer>,
    pub pool: Arc<Mempool>,
    pub router: Arc<Published<RouterConfig>>,
    pub neighbors: Arc<Published<NeighborView>>,
    pub counters: Arc<WorkerCounters>,
    table: NeighborTable<HeldPacket>,
    /// IPv6 neighbours by Neighbor Discovery, under the same policy (link-local addresses
    /// scoped by port, `ipv6_local::scoped`). Nothing is held for them yet: IPv6 is not
    /// forwarded.
    table6: NeighborTable<HeldPacket, Ipv6Addr>,
    /// The interfaces' kernel twins (`crate::control::twins`); none unless configured.
    twins: Twins,
    /// The PPPoE interfaces' clients (`crate::dataplane::pppoe_frames`); none unless configured.
    pppoe: PppoeLinks,
    /// The PPPoE sessions' peers and their MACs: neighbours no ARP resolves.
    pppoe_peers: Vec<(Ipv4Addr, [u8; 6])>,
    /// A changed PPPoE view the router has not taken yet (`take_pppoe_view`).
    pppoe_view: Option<PppoeView>,
    clock: Clock,
    next_maintenance_ns: u64,
    next_pppoe_timers_ns: u64,
    next_pppoe_status_ns: u64,
    /// The neighbour table changed since the view was last published (within the interval).
    view_stale: bool,
    next_view_publish_ns: u64,
    /// When each IPv6 interface's next unsolicited Router Advertisement is due.
    adverts: AdvertSchedule,
    solicited_adverts: TokenBucket,
    /// MLD reports answering queries, over all interfaces (a guest's query flood gets no
    /// more than this).
    mld_reports: TokenBucket,
    /// Per interface: the IPv6 addresses whose groups it last reported joining (MLD), so
    /// that addresses learnt later (a delegated prefix) are reported as they come.
    reported_addresses: Vec<Vec<(Ipv6Addr, u8)>>,
    /// Per interface: whether its twin holds the interface's virtual address (this box is
    /// the HA pair's VRRP master there), as netlink last said; shared with the metrics.
    virtual_held: Arc<VirtualHeld>,
    /// The workers' ends of session sync (none without `[ha.sync]`): told of each takeover.
    sync_queues: Vec<Arc<SyncQueues>>,
}

impl ControlPlane {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        to_worker: RingProducer,
        from_workers: Vec<RingConsumer>,
        pool: Arc<Mempool>,
        router: Arc<Published<RouterConfig>>,
        neighbors: Arc<Published<NeighborView>>,
        counters: Arc<WorkerCounters>,
        neighbor_config: NeighborConfig,
    ) -> Self {
        let clock = Clock::new();
        let seed = clock.now_ns();
        ControlPlane {
            to_worker,
            outbox: MbufBatch::new(),
            from_workers,
            pool,
            router,
            neighbors,
            counters,
            table: NeighborTable::new(neighbor_config),
            table6: NeighborTable::new(neighbor_config),
            twins: Twins::default(),
            pppoe: PppoeLinks::default(),
            pppoe_peers: Vec::new(),
            pppoe_view: None,
            clock,
            next_maintenance_ns: 0,
            next_pppoe_timers_ns: 0,
            next_pppoe_status_ns: 0,
            view_stale: false,
            next_view_publish_ns: 0,
            adverts: AdvertSchedule::new(seed),
            solicited_adverts: TokenBucket::new(SOLICITED_ADVERTS_PER_SEC, SOLICITED_ADVERTS_BURST),
            mld_reports: TokenBucket::new(SOLICITED_ADVERTS_PER_SEC, SOLICITED_ADVERTS_BURST),
            reported_addresses: Vec::new(),
            virtual_held: Arc::default(),
            sync_queues: Vec::new(),
        }
    }

    /// Hands the control thread the record of the virtual addresses held, which it keeps.
    pub fn with_virtual_held(mut self, virtual_held: Arc<VirtualHeld>) -> Self {
        self.virtual_held = virtual_held;
        self
    }

    /// Hands the control thread the workers' ends of session sync, whose copies it has
    /// renewed when this box takes the pair's virtual addresses over.
    pub fn with_session_sync(mut self, sync_queues: Vec<Arc<SyncQueues>>) -> Self {
        self.sync_queues = sync_queues;
        self
    }

    /// Hands the control thread the PPPoE clients, and starts their discovery.
    pub fn with_pppoe(mut self, links: PppoeLinks) -> Self {
        self.pppoe = links;
        let now_ns = self.clock.now_ns();
        self.run_pppoe(|links, send| links.start(now_ns, send));
        self
    }

    /// The PPPoE sessions' addresses and routes, when they changed since the last call: for
    /// the router config, as the kernel's are.
    pub fn take_pppoe_view(&mut self) -> Option<PppoeView> {
        self.pppoe_view.take()
    }

    /// A reload: PPPoE clients whose settings changed reconnect with the new ones.
    pub fn reconfigure_pppoe(&mut self, config: &crate::config::GatewayConfig, macs: &[[u8; 6]]) {
        let now_ns = self.clock.now_ns();
        self.run_pppoe(|links, send| links.reconfigure(config, macs, now_ns, send));
    }

    /// Ends the PPPoE sessions politely, at shutdown.
    pub fn stop_pppoe(&mut self) {
        self.run_pppoe(|links, send| links.stop(send));
        self.flush();
    }

    /// Runs `work` on the PPPoE clients with a way to send their frames, then takes up a
    /// changed view: the peers become neighbours of the workers' view at once.
    fn run_pppoe(&mut self, work: impl FnOnce(&mut PppoeLinks, &mut dyn FnMut(u16, &[u8]))) {
        if self.pppoe.is_empty() {
            return;
        }
        let mut links = std::mem::take(&mut self.pppoe);
        work(&mut links, &mut |iface, frame| {
            self.send_frame(iface, frame)
        });
        if let Some(view) = links.take_view() {
            self.pppoe_peers = view.peers.clone();
            self.pppoe_view = Some(view);
            self.publish_view();
        }
        self.pppoe = links;
    }

    /// Sends a frame the control thread built as bytes (a PPPoE client's).
    fn send_frame(&mut self, iface: u16, frame: &[u8]) {
        match Mbuf::from_bytes(&self.pool, frame) {
            Some(mbuf) => self.send(iface, mbuf),
            None => self.counters.record_drop(DropReason::NoBuffer),
        }
    }

    /// Hands the control thread the kernel twins, which it then serves in every `poll`.
    pub fn with_twins(mut self, twins: Twins) -> Self {
        self.twins = twins;
        self
    }

    /// Follows which virtual addresses this box's twins hold (keepalived's VRRP state, read
    /// by netlink): ARP is answered for those only, and each newly held one is announced by
    /// gratuitous ARP, so that hosts and the upstream router send to this box at once after
    /// a takeover (keepalived's own announcements follow from the twin). On a takeover the
    /// workers renew the flows the peer synced, whose leases it will no longer refresh.
    pub fn follow_virtual_addresses(&mut self, held: &[bool]) {
        let (router, _) = self.router.load();
        let mut took_over = false;
        for (port, iface) in router.interfaces.iter().enumerate() {
            let Some(address) = iface.virtual_addr else {
                continue;
            };
            let now = held.get(port) == Some(&true);
            match (self.virtual_held.set(port, now), now) {
                (false, true) => {
                    tracing::info!(port, %address, "HA: this box holds the virtual address now (VRRP master): answering and announcing it");
                    self.send_gratuitous_arp(&router, port as u16, address);
                    took_over = true;
                }
                (true, false) => {
                    tracing::info!(port, %address, "HA: the virtual address left this box's twin (VRRP backup): no longer answered");
                }
                _ => {}
            }
        }
        self.flush();
        if took_over {
            for queues in &self.sync_queues {
                queues.takeovers.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn send_gratuitous_arp(&mut self, router: &RouterConfig, port: u16, address: Ipv4Addr) {
        let Some(mut mbuf) = Mbuf::alloc(&self.pool) else {
            return self.counters.record_drop(DropReason::NoBuffer);
        };
        let mut pkt = PacketBuf::new(mbuf.room_mut(), 0);
        let iface = &router.interfaces[usize::from(port)];
        if write_gratuitous_arp(&mut pkt, iface, address) {
            let len = pkt.len();
            if mbuf.set_len(len).is_ok() {
                self.send(port, mbuf);
            }
        }
    }

    /// Announces every interface's address, so neighbours refresh stale caches at once.
    pub fn announce(&mut self) {
        let (router, _) = self.router.load();
        for (port, iface) in router.interfaces.iter().enumerate() {
            // A gratuitous ARP is a request for one's own address; a PPPoE link has no ARP,
            // and an interface waiting for its address has nothing to announce.
            if !iface.addr.is_unspecified() && !router.runs_pppoe(port as u16) {
                self.send_arp_request(&router, port as u16, iface.addr, None);
            }
            // Duplicate address detection of the IPv6 addresses (RFC 4862 5.4): a node that
            // has one answers, counted as `ndisc_claims_our_address`. A PPPoE link has only
            // the access concentrator on it, and IPv6CP agreed the identifiers.
            if let Some(v6) = router
                .ipv6(port as u16)
                .filter(|_| !router.runs_pppoe(port as u16))
            {
                let own = std::iter::once(v6.link_local).chain(v6.addresses.iter().map(|a| a.0));
                for addr in own {
                    self.send_neighbor_solicit(iface, port as u16, addr, None, None);
                }
                // And say which groups we listen to, for switches that snoop MLD.
                self.send_mld_report(iface, v6, port as u16, mld_record::CHANGE_TO_EXCLUDE);
                self.note_reported(port, &v6.addresses);
            }
        }
        self.flush();
    }

    /// Records that interface `port` reported the groups of `addresses`; whether they
    /// differ from what it reported before.
    fn note_reported(&mut self, port: usize, addresses: &[(Ipv6Addr, u8)]) -> bool {
        if self.reported_addresses.len() <= port {
            self.reported_addresses.resize(port + 1, Vec::new());
        }
        if self.reported_addresses[port] == addresses {
            return false;
        }
        self.reported_addresses[port] = addresses.to_vec();
        true
    }

    /// Reports the groups of an interface whose IPv6 addresses changed since it last did
    /// (addresses the kernel twin learnt: SLAAC on the WAN, a delegated prefix), so that
    /// switches that snoop MLD forward the solicitations for the new addresses. No duplicate
    /// address detection of them here: the twin ran it on the same link before the kernel
    /// let netlink see them.
    fn report_changed_groups(&mut self, router: &RouterConfig) {
        for (port, iface) in router.interfaces.iter().enumerate() {
            // No switch snoops a PPPoE link (see `announce`).
            let Some(v6) = router
                .ipv6(port as u16)
                .filter(|_| !router.runs_pppoe(port as u16))
            else {
                continue;
            };
            if self.note_reported(port, &v6.addresses) {
                self.send_mld_report(iface, v6, port as u16, mld_record::CHANGE_TO_EXCLUDE);
            }
        }
    }

    /// One round: drain the workers' rings, do timed maintenance, flush TX. Returns how many
    /// packets it handled, so the caller can idle when there is nothing to do.
    pub fn poll(&mut self) -> usize {
        let mut handled = 0;
        let mut batch = MbufBatch::new();
        // ARP and IPv6 ND first: echo replies and held packets can wait, and the held ones
        // wait on ARP.
        // One burst per ring per round, so no worker's flood delays another's ARP.
        let mut later = MbufBatch::new();
        loop {
            let mut dequeued = 0;
            for ring in 0..self.from_workers.len() {
                dequeued += self.from_workers[ring].dequeue(&mut batch);
                for mbuf in batch.drain() {
                    if is_arp(mbuf.data()) || ipv6_local::is_ndisc(mbuf.data()) {
                        self.handle(mbuf);
                    } else if let Err(mbuf) = later.push(mbuf) {
                        self.handle(mbuf);
                    }
                }
            }
            for mbuf in later.drain() {
                self.handle(mbuf);
            }
            if dequeued == 0 {
                break;
            }
            handled += dequeued;
        }
        handled += self.poll_twins();
        let now_ns = self.clock.now_ns();
        if now_ns >= self.next_maintenance_ns {
            self.maintain(now_ns);
            self.next_maintenance_ns = now_ns + MAINTENANCE_INTERVAL_NS;
        }
        if now_ns >= self.next_pppoe_timers_ns {
            self.run_pppoe(|links, send| links.poll(now_ns, send));
            self.next_pppoe_timers_ns = now_ns + PPPOE_TIMER_INTERVAL_NS;
        }
        if now_ns >= self.next_pppoe_status_ns {
            self.pppoe.refresh_status();
            self.next_pppoe_status_ns = now_ns + PPPOE_STATUS_INTERVAL_NS;
        }
        if self.view_stale && now_ns >= self.next_view_publish_ns {
            self.publish_view_now(now_ns);
        }
        self.flush();
        handled
    }

    /// What workers punted goes to the twins; what the kernel sent on them goes to worker 0
    /// to transmit, as everything else the control thread sends.
    fn poll_twins(&mut self) -> usize {
        let mut twins = std::mem::take(&mut self.twins);
        let (router, _) = self.router.load();
        let counters = self.counters.clone();
        let handled = twins.poll(&router, &counters, |port, mbuf| self.send(port, mbuf));
        self.twins = twins;
        handled
    }

    fn handle(&mut self, mut mbuf: Mbuf) {
        let (router, _) = self.router.load();
        // Workers put the ingress interface's index in the port field.
        let ingress = usize::from(mbuf.port().0);
        if ingress >= router.interfaces.len() {
            return self.counters.record_drop(DropReason::NotOurMac);
        }
        let iface = &router.interfaces[ingress];
        let Ok(frame) = EthernetFrame::new_checked(mbuf.data()) else {
            return self.counters.record_drop(DropReason::TruncatedFrame);
        };
        match frame.ethertype() {
            ethernet::ethertype::ARP => return self.handle_arp(&router, ingress as u16, mbuf),
            ethernet::ethertype::IPV6 => return self.handle_ipv6(&router, ingress as u16, mbuf),
            ethernet::ethertype::PPPOE_DISCOVERY | ethernet::ethertype::PPPOE_SESSION => {
                let now_ns = self.clock.now_ns();
                let mut handled = false;
                self.run_pppoe(|links, send| {
                    handled = links.receive(ingress as u16, mbuf.data(), now_ns, send)
                });
                if !handled {
                    self.counters.record_drop(DropReason::UnsupportedEthertype);
                }
                return;
            }
            _ => {}
        }
        let Ok(ip) = Ipv4Packet::new_checked(&mbuf.data()[ethernet::HEADER_LEN..]) else {
            return self.counters.record_drop(DropReason::MalformedIpv4);
        };
        let dst = ip.dst_addr();
        if router.local_port(dst).is_some() {
            let len = mbuf.len();
            let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
            if echo_reply(&mut pkt, iface) {
                self.send(ingress as u16, mbuf);
            } else {
                self.counters.record_drop(DropReason::LocalDelivery);
            }
            return;
        }
        // Routed by a worker, waiting for its next hop's MAC: routed again the same way.
        let Some(route) = router.route_from(ip.src_addr(), dst) else {
            return self.counters.record_drop(DropReason::NoRoute);
        };
        let next_hop = route.resolve(dst);
        let held = HeldPacket {
            mbuf,
            port: route.port,
        };
        // A PPPoE peer is not ARP's to find (a worker may have asked before the view with
        // it reached it).
        if let Some(&(_, mac)) = self.pppoe_peers.iter().find(|(peer, _)| *peer == next_hop) {
            return self.transmit_held(&router, held, EthernetAddress(mac));
        }
        if router.runs_pppoe(route.port) {
            return self.counters.record_drop(DropReason::PppoeDown);
        }
        let now_ns = self.clock.now_ns();
        let evictions_before = self.table.evictions();
        let counters = &self.counters;
        let evicted = |_held| counters.record_drop(DropReason::NeighborEvicted);
        match self.table.lookup(next_hop, now_ns, evicted) {
            Lookup::Resolved { mac, refresh } => {
                self.transmit_held(&router, held, EthernetAddress(mac));
                if refresh {
                    let mac = Some(EthernetAddress(mac));
                    self.send_arp_request(&router, route.port, next_hop, mac);
                }
            }
            Lookup::Pending { send_request } => {
                if let Err((_held, reason)) = self.table.enqueue(next_hop, held) {
                    self.counters.record_drop(reason);
                }
                if send_request {
                    self.send_arp_request(&router, route.port, next_hop, None);
                }
            }
            Lookup::TableFull => self.counters.record_drop(DropReason::NeighborQueueFull),
        }
        if self.table.evictions() != evictions_before {
            // The entry that made room may have been one the workers use.
            self.publish_view();
        }
    }

    fn transmit_held(&mut self, router: &RouterConfig, held: HeldPacket, mac: EthernetAddress) {
        let HeldPacket { mut mbuf, port } = held;
        let egress = &router.interfaces[usize::from(port)];
        let len = mbuf.len();
        let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
        ethernet::write_l2(pkt.bytes_mut(), mac, egress.mac);
        if len - ethernet::HEADER_LEN > usize::from(egress.mtu) {
            let mut pieces = Vec::new();
            split_into_fragments(&mbuf, egress.mtu, &self.pool, &self.counters, |piece| {
                pieces.push(piece)
            });
            for piece in pieces {
                self.send(port, piece);
            }
        } else {
            self.send(port, mbuf);
        }
    }

    /// Lets the neighbour table learn from an ARP packet (see `pipeline::pipeline::local::arp::handle_arp`
    /// for what it may change), sends what waited for its sender, the reply if there is one
    /// and any probe, and republishes the workers' view when a binding changed.
    fn handle_arp(&mut self, router: &RouterConfig, ingress: u16, mut mbuf: Mbuf) {
        let iface = &router.interfaces[usize::from(ingress)];
        // Before the reply is written over it: the kernel learns its neighbours too.
        self.twins.copy_arp(
            (ingress, mbuf.data()),
            router,
            &self.pool,
            (self.clock.now_ns(), &self.counters),
        );
        let len = mbuf.len();
        let mut pkt = PacketBuf::new(mbuf.room_mut(), len);
        let mut released = Vec::new();
        let counters = &self.counters;
        let now_ns = self.clock.now_ns();
        let holds_virtual = self.virtual_held.is_held(usize::from(ingress));
        let handled = handle_arp(
            &mut pkt,
            (iface, holds_virtual),
            &mut self.table,
            now_ns,
            |held, mac| released.push((held, mac)),
            |_held| counters.record_drop(DropReason::NeighborEvicted),
        );
        let reply_len = pkt.len();
        if let Some(reason) = handled.dropped {
            self.counters.record_drop(reason);
        } else if handled.replied && mbuf.set_len(reply_len).is_ok() {
            self.send(ingress, mbuf);
        }
        if let Some(ArpProbe { ip, unicast }) = handled.probe {
            self.send_arp_request(router, ingress, ip, unicast.map(EthernetAddress));
        }
        for (held, mac) in released {
            self.transmit_held(router, held, mac);
        }
        if handled.view_changed {
            self.publish_view();
        }
    }

    fn maintain(&mut self, now_ns: u64) {
        // Old snapshots the workers have let go are freed here, not on a worker.
        self.router.free_retired();
        self.neighbors.free_retired();
        let (router, _) = self.router.load();
        self.advertise(&router, now_ns);
        self.report_changed_groups(&router);
        let before = self.table.len();
        let mut probes = Vec::new();
        let counters = self.counters.clone();
        self.table.expire(
            now_ns,
            EXPIRE_BUDGET,
            |_held| counters.record_drop(DropReason::NeighborUnreachable),
            |probe| probes.push(probe),
        );
        // Entries in use are refreshed before they go stale, so workers never lose them.
        let resolved: Vec<Ipv4Addr> = self
            .table
            .iter()
            .filter(|(_, _, state)| *state != NeighborState::Incomplete)
            .map(|(ip, _, _)| ip)
            .collect();
        for ip in resolved {
            // Only known addresses are looked up here, so nothing is created or evicted.
            let lookup = self.table.lookup(ip, now_ns, |_held| {
                counters.record_drop(DropReason::NeighborEvicted)
            });
            if let Lookup::Resolved { mac, refresh: true } = lookup {
                probes.push(ArpProbe {
                    ip,
                    unicast: Some(mac),
                });
            }
        }
        for ArpProbe { ip, unicast } in probes {
            if let Some(route) = router.routes.lookup(ip) {
                self.send_arp_request(&router, route.port, ip, unicast.map(EthernetAddress));
            }
        }
        self.maintain_ipv6(&router, now_ns);
        if self.table.len() != before {
            self.publish_view();
        }
    }

    /// Broadcast, or unicast to `unicast`: the MAC we have for a neighbour we are checking.
    fn send_arp_request(
        &mut self,
        router: &RouterConfig,
        port: u16,
        target: Ipv4Addr,
        unicast: Option<EthernetAddress>,
    ) {
        if router.runs_pppoe(port) {
            return;
        }
        let Some(mut mbuf) = Mbuf::alloc(&self.pool) else {
            return self.counters.record_drop(DropReason::NoBuffer);
        };
        let mut pkt = PacketBuf::new(mbuf.room_mut(), 0);
        let iface = &router.interfaces[usize::from(port)];
        if write_arp_probe(&mut pkt, iface, target, unicast) {
            let len = pkt.len();
            if mbuf.set_len(len).is_ok() {
                self.send(port, mbuf);
            }
        }
    }

    fn send(&mut self, port: u16, mut mbuf: Mbuf) {
        mbuf.set_port(port);
        if let Err(mbuf) = self.outbox.push(mbuf) {
            self.flush();
            let _ = self.outbox.push(mbuf);
        }
    }

    fn flush(&mut self) {
        let (_, refused) = self.to_worker.enqueue_or_free(&mut self.outbox);
        if refused > 0 {
            self.counters
                .record_drops(DropReason::ControlTxRingFull, refused as u64);
        }
    }

    /// Publishes the neighbour view now, or at the end of the publish interval if one went out
    /// less than [`VIEW_PUBLISH_INTERVAL_NS`] ago.
    fn publish_view(&mut self) {
        let now_ns = self.clock.now_ns();
        if now_ns >= self.next_view_publish_ns {
            self.publish_view_now(now_ns);
        } else {
            self.view_stale = true;
        }
    }

    fn publish_view_now(&mut self, now_ns: u64) {
        self.view_stale = false;
        self.next_view_publish_ns = now_ns + VIEW_PUBLISH_INTERVAL_NS;
        let peers = self
            .pppoe_peers
            .iter()
            .map(|&(ip, mac)| (ip, EthernetAddress(mac)));
        let view = NeighborView::new(
            self.table
                .iter()
                .filter(|(_, _, state)| *state != NeighborState::Incomplete)
                .map(|(ip, mac, _)| (ip, EthernetAddress(mac)))
                .chain(peers),
        )
        .with_ipv6(
            self.table6
                .iter()
                .filter(|(_, _, state)| *state != NeighborState::Incomplete)
                .map(|(ip, mac, _)| (ip, EthernetAddress(mac))),
        );
        self.neighbors.publish(Arc::new(view));
    }

    /// Neighbours currently resolved, for logs and metrics.
    pub fn neighbor_count(&self) -> usize {
        self.table.len()
    }
}

/// The destination of an IPv6 frame a worker sent the control thread, if it is not for the
/// gateway on this link (`v6`): a packet it routed, waiting for its next hop.
fn forwarded_destination(
    frame: &[u8],
    v6: &pipeline::pipeline::config::Ipv6Interface,
) -> Option<Ipv6Addr> {
    let ip = pipeline::wire::Ipv6Packet::new_checked(frame.get(ethernet::HEADER_LEN..)?).ok()?;
    let dst = ip.dst_addr();
    (!dst.is_multicast() && !v6.accepts(dst)).then_some(dst)
}

//! IPv4 forwarding for one worker: validate, track and translate (see `stateful.rs`), route,
//! decrement TTL, resolve the next hop, rewrite L2 in place, and answer with ICMP errors where
//! RFC 1812 says so.
//!
//! Layer 4, the top: the [`Pipeline`] a worker runs and its stages: the stateful stage, a
//! struct owning the worker's flow state that returns what it decided or needs done
//! ([`stateful::Request`]), and the stages that are methods of the pipeline (the burst and
//! its fast path, the punt path, snapshots), with the compiled router [`config`] they all
//! read. Everything below (`features`, `state`, `l3`,
//! `flow`, `wire`) is called from here and never calls back.

pub mod config;
pub mod control;
pub mod explain;
pub mod fast_path;
pub mod features;
pub mod flow_listing;
mod forward6;
pub mod ipv6_local;
pub mod kernel_flows;
pub mod punt;
mod requests;
pub mod snapshot;
pub mod stage;
pub mod stateful;
mod stateful6;
pub mod syn_proxy;

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::counters::WorkerCounters;
use crate::features::meter::HostMeter;
use crate::state::conntrack::{ConntrackConfig, FlowTable};
use crate::state::firewall_log::{FirewallLog, FirewallLogger};
use crate::state::nat::blocks::blocks_per_host;
use crate::state::nat::{NatEventKind, NatLog, NatPool, NatPoolError, Ownership, DEFAULT_PORTS};

/// NAT ports per internal host and worker unless configured: a few thousand, so that about
/// fifteen hosts at their limit still leave a worker's UDP ports to the rest.
pub const DEFAULT_HOST_PORTS: u32 = 4096;
use crate::features::qos::ShapeRequest;
use crate::features::qos::{Class, HostShares, Link, Qos, QosMode, QosStats};
use crate::l3::icmp_error::{may_answer_with_icmp_error, IcmpBudgets, IcmpError};
use crate::l3::neighbor_view::NeighborView;
use crate::packet::PacketBuf;
use crate::pipeline::config::{IcmpLimits, Interface, RouterConfig};
use crate::pipeline::stage::{
    ExtraFrames, FlowProbe, Ingress, Route, Stage, Translation, MAX_BURST,
};
use crate::pipeline::stateful::StatefulStage;
use crate::pipeline::stateful6::StatefulStage6;
use crate::ratelimit::TokenBucket;
use crate::state::flow_data::{next_epoch, FlowData, FlowData6, FIRST_EPOCH};
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::{ethernet, icmp, ipv4, tcp, EthernetFrame, IcmpPacket, Ipv4Packet, Ipv4Repr};

/// RFC 1812 4.3.2.3: an ICMP error carries as much of the original as fits in 576 bytes.
const ICMP_ERROR_MAX_LEN: usize = 576;
/// Ethernet + IPv4 + ICMP headers in front of the quoted datagram.
const ICMP_ERROR_HEADERS: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp::HEADER_LEN;

/// Where a worker sits among its peers, and the sizes of its tables.
#[derive(Clone, Debug)]
pub struct WorkerSetup {
    pub worker: u16,
    pub workers: u16,
    pub conntrack: ConntrackConfig,
    /// The IPv6 flow table's size and limits; None: a quarter of `conntrack`'s capacity (see
    /// `ipv6_conntrack`).
    pub conntrack6: Option<ConntrackConfig>,
    pub nat_ports: RangeInclusive<u16>,
    pub nat_bindings: usize,
    /// NAT bindings (external ports) one internal host may hold on this worker.
    pub nat_host_ports: u32,
    /// Ports are handed out to each internal host in blocks of this many (0: one by one).
    pub nat_port_block_size: u32,
    /// This worker's per-LAN-host byte and packet counts, written while the router config
    /// has the traffic meter on. Shared so the metrics thread can read what this worker alone
    /// writes. None: the meter cannot be switched on.
    pub meter: Option<Arc<HostMeter>>,
    /// Established flows take the fast path ([`crate::pipeline::fast_path`]). Off only to compare the
    /// two paths (the differential test, a bench run of the full path alone).
    pub fast_path: bool,
    /// Where this worker's NAT pool tells its bindings made and freed (`[nat.log]`).
    pub nat_log: Option<Arc<NatLog>>,
    /// Where the decisions of rules marked `log = true` go (`[firewall.log]`), with this
    /// worker's budget for them.
    pub firewall_log: Option<FirewallLogger>,
    /// Seeds the QoS fairness tables' hashing; None: a random seed, so that hosts cannot
    /// choose addresses that collide. Where a host's slot lies decides when the idle sweep
    /// uncounts it, so two pipelines meant to behave alike (the differential test's) need
    /// the same seed.
    pub qos_seed: Option<u64>,
}

impl Default for WorkerSetup {
    fn default() -> Self {
        WorkerSetup {
            worker: 0,
            workers: 1,
            conntrack: ConntrackConfig::default(),
            conntrack6: None,
            nat_ports: DEFAULT_PORTS,
            nat_bindings: 1 << 16,
            nat_host_ports: DEFAULT_HOST_PORTS,
            nat_port_block_size: 0,
            meter: None,
            fast_path: true,
            nat_log: None,
            firewall_log: None,
            qos_seed: None,
        }
    }
}

/// One worker's packet processor. Holds snapshots of shared, immutable state (the router
/// config and the neighbour view) and the worker's own state: flow table, NAT ports, ICMP
/// rate limiter and counters.
pub struct Pipeline {
    pub(crate) router: Arc<RouterConfig>,
    pub(crate) neighbors: Arc<NeighborView>,
    pub(crate) icmp_errors: IcmpBudgets,
    /// Echo requests to the gateway this worker may pass to the control thread.
    echo_requests: TokenBucket,
    /// Packets this worker may punt to the kernel twins ([`crate::pipeline::punt`]).
    punts: TokenBucket,
    pub(crate) counters: Arc<WorkerCounters>,
    /// Conntrack, firewall, NAT and content: the worker's flow state.
    pub(crate) stateful: StatefulStage,
    /// Its IPv6 flows, in a table of their own.
    pub(crate) stateful6: StatefulStage6,
    /// What the NAT pool is made of, but for its addresses: kept so that a new pool can be
    /// made when the masquerade addresses change (a DHCP lease).
    nat_setup: NatSetup,
    meter: Option<Arc<HostMeter>>,
    /// Uplink (LAN -> outside) and downlink policers, while the router config has QoS on.
    qos: Option<[Qos; 2]>,
    /// Their fairness tables while QoS is off, allocated at start for the hosts the worker
    /// serves and handed from policers to policers, so that a reload allocates none.
    idle_qos_hosts: [HostShares; 2],
    /// Their statistics, which outlive policers a reload rebuilds.
    qos_stats: [Arc<QosStats>; 2],
    /// Stamp the flows' forwarding shortcuts ([`crate::pipeline::fast_path`]): advanced by every new
    /// router config, and by every new neighbour view, so a shortcut made under an older
    /// config is not used, and one made under an older view has its next hop looked up again.
    pub(crate) router_epoch: u32,
    pub(crate) neighbor_epoch: u32,
    /// Whether established flows may take the fast path (`WorkerSetup::fast_path`).
    pub(crate) fast_path: bool,
    /// In shaper mode, what QoS asks of the worker for the packet being processed, and for
    /// each packet of the last burst ([`shape_requests`](Pipeline::shape_requests)).
    pub(crate) shape_request: Option<ShapeRequest>,
    shape_requests: [Option<ShapeRequest>; MAX_BURST],
    /// QoS is on in shaper mode (the router config's, kept here for the per-packet test).
    shaping: bool,
    /// Frames made beside the burst's packets (the SYN proxy's window updates), for the
    /// worker to send after it: [`Pipeline::extra_frames`].
    pub(crate) extra_frames: ExtraFrames,
}

impl Pipeline {
    /// A single worker with default table sizes: what tests and tools want.
    pub fn new(
        router: Arc<RouterConfig>,
        neighbors: Arc<NeighborView>,
        counters: Arc<WorkerCounters>,
    ) -> Self {
        let setup = WorkerSetup::default();
        let nat = nat_pool(&router, &setup).ok().flatten();
        Self::assemble(router, neighbors, counters, setup, nat)
    }

    /// Worker `setup.worker` of `setup.workers`, with its own flow table and NAT ports.
    pub fn for_worker(
        router: Arc<RouterConfig>,
        neighbors: Arc<NeighborView>,
        counters: Arc<WorkerCounters>,
        setup: WorkerSetup,
    ) -> Result<Self, NatPoolError> {
        let nat = nat_pool(&router, &setup)?;
        Ok(Self::assemble(router, neighbors, counters, setup, nat))
    }

    fn assemble(
        router: Arc<RouterConfig>,
        neighbors: Arc<NeighborView>,
        counters: Arc<WorkerCounters>,
        setup: WorkerSetup,
        nat: Option<NatPool>,
    ) -> Self {
        let icmp_errors = IcmpBudgets::new(router.icmp.errors_per_sec, router.icmp.burst);
        let echo_requests = echo_bucket(&router.icmp);
        let punts = punt_bucket(&router.punt);
        let flows = FlowTable::new(setup.conntrack, FlowData::default());
        let flows6 = FlowTable::new(
            setup
                .conntrack6
                .unwrap_or_else(|| ipv6_conntrack(&setup.conntrack, router.has_ipv6())),
            FlowData6::default(),
        );
        counters.conntrack_capacity.set(flows.capacity() as u64);
        let qos_stats = [Link::Uplink, Link::Downlink].map(|link| {
            // An equal split until the control thread rebalances by demand.
            let workers = u64::from(setup.workers.max(1));
            let rate = router
                .qos
                .as_ref()
                .map_or(0, |config| config.rate_bps(link));
            Arc::new(QosStats::new(rate / workers))
        });
        let nat_setup = NatSetup::of(&setup);
        let mut pipeline = Pipeline {
            nat_setup,
            neighbors,
            icmp_errors,
            echo_requests,
            punts,
            counters,
            stateful: StatefulStage::new(flows, nat, setup.worker, Ownership::new(setup.workers)),
            stateful6: StatefulStage6::new(flows6, setup.worker, Ownership::new(setup.workers)),
            meter: setup.meter,
            router_epoch: FIRST_EPOCH,
            neighbor_epoch: FIRST_EPOCH,
            fast_path: setup.fast_path,
            shape_request: None,
            shape_requests: [None; MAX_BURST],
            shaping: false,
            extra_frames: ExtraFrames::default(),
            qos: None,
            idle_qos_hosts: [(); 2].map(|_| HostShares::new(setup.conntrack.hosts, setup.qos_seed)),
            qos_stats,
            router,
        };
        pipeline.stateful.firewall_log = setup.firewall_log;
        pipeline.rebuild_policers();
        pipeline.reserve_forwarded_ports();
        pipeline.publish_table_stats();
        pipeline
    }

    pub fn router(&self) -> &Arc<RouterConfig> {
        &self.router
    }

    /// Policers for the router config's QoS (none with QoS off), their counts carried on
    /// and their fairness tables handed on from the old ones.
    fn rebuild_policers(&mut self) {
        let mut hosts = match self.qos.take() {
            Some(policers) => policers.map(Qos::into_hosts),
            None => std::mem::replace(
                &mut self.idle_qos_hosts,
                [(); 2].map(|_| HostShares::empty()),
            ),
        };
        self.shaping = self.router.qos.as_ref().map(|qos| qos.mode) == Some(QosMode::Shaper);
        self.shape_request = None;
        match &self.router.qos {
            Some(config) => {
                let [uplink, downlink] = self.qos_stats.clone();
                let [up_hosts, down_hosts] = hosts;
                self.qos = Some([
                    Qos::with_stats(config, uplink, up_hosts),
                    Qos::with_stats(config, downlink, down_hosts),
                ]);
            }
            None => {
                std::mem::swap(&mut self.idle_qos_hosts, &mut hosts);
                self.qos_stats
                    .iter()
                    .for_each(|stats| stats.policing_stopped());
            }
        }
    }

    /// Swaps in a new router config (a reload). Called between bursts. Flows stay.
    pub fn set_router(&mut self, router: Arc<RouterConfig>) {
        self.router_epoch = next_epoch(self.router_epoch);
        if router.icmp != self.router.icmp {
            self.icmp_errors = IcmpBudgets::new(router.icmp.errors_per_sec, router.icmp.burst);
            self.echo_requests = echo_bucket(&router.icmp);
        }
        if (router.punt.per_sec, router.punt.burst)
            != (self.router.punt.per_sec, self.router.punt.burst)
        {
            self.punts = punt_bucket(&router.punt);
        }
        let qos_changed = router.qos != self.router.qos;
        let old = std::mem::replace(&mut self.router, router);
        if qos_changed {
            self.rebuild_policers();
        }
        if old.nat_addresses() != self.router.nat_addresses() {
            self.renumber_nat();
        } else {
            self.release_unforwarded_ports(&old);
        }
        self.reserve_forwarded_ports();
    }

    /// The masquerade addresses changed (a DHCP lease came, moved or went): a new pool on
    /// the new addresses, holding the bindings of the flows whose address stays. Flows on an
    /// address that went are ended by their next packet (`nat_address_gone`) or expire; their
    /// release finds nothing in the new pool, so their mappings' ends are logged here, when
    /// the address goes. Allocates, once per change, between bursts.
    fn renumber_nat(&mut self) {
        let addresses = self.router.nat_addresses();
        let setup = &self.nat_setup;
        let mut pool = setup
            .pool(&addresses, self.stateful.worker, self.stateful.ownership)
            .ok()
            .flatten();
        if let Some(pool) = pool.as_mut() {
            self.stateful.flows.export(0, |flow| {
                if let Some((protocol, address, port)) = flow.data.binding {
                    if pool.has_address(address) {
                        let internal = (flow.original.src, flow.original.src_port);
                        let _ = pool.restore(protocol, internal, (address, port));
                    }
                }
            });
        }
        let kept = |address| pool.as_ref().is_some_and(|pool| pool.has_address(address));
        match (self.stateful.nat.as_ref(), setup.log.as_ref()) {
            (Some(old), Some(log)) if old.by_blocks() => old.held_blocks(|host, address, ports| {
                if !kept(address) {
                    log.record_block(NatEventKind::BlockDelete, host, address, ports);
                }
            }),
            (Some(old), Some(log)) => old.bindings_in(0..old.binding_capacity(), |binding| {
                if !kept(binding.external.0) {
                    let (internal, external) = (binding.internal, binding.external);
                    log.record(NatEventKind::Delete, binding.protocol, internal, external);
                }
            }),
            _ => {}
        }
        self.stateful.nat = pool;
    }

    /// Ports that `old`'s forwards kept out of masquerade and the current config no longer
    /// forwards go back to the pool.
    fn release_unforwarded_ports(&mut self, old: &RouterConfig) {
        let Some(nat) = self.stateful.nat.as_mut() else {
            return;
        };
        let forwards = &self.router.stateful.port_forwards;
        for forward in &old.stateful.port_forwards {
            for port in forward.ports.clone() {
                let still_forwarded = forwards
                    .iter()
                    .any(|f| f.protocol == forward.protocol && f.ports.contains(&port));
                if !still_forwarded {
                    nat.unreserve(forward.protocol, port);
                }
            }
        }
    }

    /// Ports a forward uses are never handed out by masquerade.
    fn reserve_forwarded_ports(&mut self) {
        let Some(nat) = self.stateful.nat.as_mut() else {
            return;
        };
        for forward in &self.router.stateful.port_forwards {
            for port in forward.ports.clone() {
                nat.reserve(forward.protocol, port);
            }
        }
    }

    /// Swaps in the control thread's latest neighbour view. Called between bursts.
    pub fn set_neighbors(&mut self, neighbors: Arc<NeighborView>) {
        self.neighbor_epoch = next_epoch(self.neighbor_epoch);
        self.neighbors = neighbors;
    }

    pub fn counters(&self) -> &WorkerCounters {
        &self.counters
    }

    /// The NAT log this worker records its mapping events in, if `[nat.log]` is on: the
    /// worker loop tells it the time of each loop.
    pub fn nat_log(&self) -> Option<&Arc<NatLog>> {
        self.nat_setup.log.as_ref()
    }

    /// The firewall log this worker queues logged rules' decisions in, if `[firewall.log]`
    /// is on: the worker loop tells it the time of each loop.
    pub fn firewall_log(&self) -> Option<&Arc<FirewallLog>> {
        self.stateful.firewall_log.as_ref().map(FirewallLogger::log)
    }

    /// The full path for one packet: every check, the stateful stage, routing, and the
    /// features; counts the decision. The fast path ([`crate::pipeline::fast_path`]) leaves to it
    /// every packet it does not cover.
    pub(crate) fn process_full(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        let mut verdict = self.classify(pkt, ingress, probe, now_ns);
        match verdict {
            Verdict::Control(ControlWork::LocalIcmp) if !self.echo_requests.try_take(now_ns) => {
                verdict = Verdict::Drop(DropReason::SlowPathPoliced);
            }
            Verdict::Punt { .. } if !self.punts.try_take(now_ns) => {
                verdict = Verdict::Drop(DropReason::PuntPoliced);
            }
            _ => {}
        }
        self.counters.count(&verdict);
        if let Verdict::Drop(reason) = verdict {
            let frame = EthernetFrame::new_checked(pkt.bytes());
            if frame.is_ok_and(|frame| frame.ethertype() == ethernet::ethertype::IPV6) {
                self.counters.record_ipv6_drop(reason);
            }
        }
        verdict
    }

    /// Bounded per-loop upkeep: expire a few flows (releasing their NAT ports) and publish
    /// table fill for metrics.
    pub fn housekeeping(&mut self, now_ns: u64, budget: usize) {
        let StatefulStage { flows, nat, .. } = &mut self.stateful;
        flows.expire(now_ns, budget, |data| {
            crate::state::flow_data::release(nat, &data)
        });
        self.stateful6.flows.expire(now_ns, budget, |_| {});
        if let Some(policers) = self.qos.as_mut() {
            for policer in policers {
                policer.tick(now_ns);
            }
        }
        self.publish_table_stats();
    }

    /// Tells the pipeline the Unix time (seconds) at its clock's `now_ns`, for parental time
    /// windows. Called at start; the pipeline then counts from its own clock.
    pub fn set_wall_clock(&mut self, unix_seconds: i64, now_ns: u64) {
        self.stateful.unix_epoch_at_zero = unix_seconds - (now_ns / 1_000_000_000) as i64;
    }

    /// Whether QoS is on in shaper mode: then the worker reads
    /// [`shape_requests`](Self::shape_requests) after every burst.
    #[inline]
    pub fn shaping(&self) -> bool {
        self.shaping
    }

    /// Frames the pipeline made beside the packets it was given (the SYN proxy's window
    /// updates, [`syn_proxy`]), each with the port it leaves by: the worker sends them after
    /// the burst, which must drain them (a full store drops further ones, counted).
    pub fn extra_frames(&mut self) -> &mut ExtraFrames {
        &mut self.extra_frames
    }

    /// In shaper mode, for each packet of the last [`process_burst`](Self::process_burst)
    /// (or the one of [`process_from`](Self::process_from), at index 0), what the worker's
    /// shaper is to do with it: None for a packet QoS leaves alone. Stale otherwise.
    #[inline]
    pub fn shape_requests(&self) -> &[Option<ShapeRequest>; MAX_BURST] {
        &self.shape_requests
    }

    /// Shaper mode: what the worker's shaper for `link` did with packets of `class` since
    /// the last call ([`Qos::shaped`]). Nothing with QoS off.
    pub fn qos_shaped(
        &mut self,
        link: Link,
        class: Class,
        sent: (u64, u64),
        dropped: (u64, u64),
        backlog: bool,
    ) {
        if let Some(policers) = self.qos.as_mut() {
            policers[link as usize].shaped(class, sent, dropped, backlog);
        }
    }

    /// This worker's share of `link`'s rate, bits per second (0 with QoS off): what its
    /// shaper for the link sends at.
    pub fn qos_share_bps(&self, link: Link) -> u64 {
        self.qos
            .as_ref()
            .map_or(0, |policers| policers[link as usize].share_bps())
    }

    /// The QoS statistics of this worker's uplink and downlink policers, for the control
    /// thread (rebalancing) and metrics. They exist with QoS off too, so that a reload can
    /// switch it on: the control thread assigns shares before it publishes that config.
    pub fn qos_stats(&self) -> [Arc<QosStats>; 2] {
        self.qos_stats.clone()
    }

    /// The traffic meter this worker counts into, if it has one (`WorkerSetup::meter`).
    pub fn meter(&self) -> Option<&Arc<HostMeter>> {
        self.meter.as_ref()
    }

    pub(crate) fn publish_table_stats(&self) {
        let stats = self.stateful.flows.stats();
        self.counters
            .conntrack_entries
            .set(self.stateful.flows.len() as u64);
        self.counters
            .conntrack_ipv6_entries
            .set(self.stateful6.flows.len() as u64);
        self.counters.conntrack_setups.set(stats.setups);
        self.counters.conntrack_expirations.set(stats.expirations);
        self.counters.conntrack_evictions.set(stats.evictions);
        for (gauge, count) in self
            .counters
            .conntrack_invalid
            .iter()
            .zip(stats.invalid_by_reason)
        {
            gauge.set(count);
        }
        self.counters
            .conntrack_tuple_exists
            .set(stats.refused_exists);
        self.counters
            .conntrack_ambiguous_tuple
            .set(stats.refused_ambiguous);
        self.counters
            .conntrack_stale_segments
            .set(stats.stale_segments);
        let (_, at_flow_limit, at_half_open_limit) = self.stateful.flows.hosts_at_limit();
        self.counters
            .conntrack_half_open
            .set(self.stateful.flows.half_open_len() as u64);
        self.counters.hosts_at_flow_limit.set(at_flow_limit as u64);
        self.counters
            .hosts_at_half_open_limit
            .set(at_half_open_limit as u64);
        if let Some(nat) = &self.stateful.nat {
            self.counters
                .hosts_at_nat_port_limit
                .set(nat.hosts_at_limit() as u64);
            self.counters.nat_ports_in_use.set(nat.in_use() as u64);
            self.counters
                .nat_ports_available
                .set(nat.available() as u64);
            let (blocks_held, blocks) = nat.blocks_in_use();
            self.counters.nat_port_blocks_in_use.set(blocks_held as u64);
            self.counters.nat_port_blocks.set(blocks as u64);
        }
    }

    /// The large arrays of this worker's tables (start, bytes), for the gateway to back
    /// with huge pages.
    pub fn table_memory(&self) -> impl Iterator<Item = (*const u8, usize)> {
        let v6 = self.stateful6.flows.memory_regions();
        let hosts6 = &self.stateful6.feature_hosts;
        let hosts6 = (
            hosts6.as_ptr().cast::<u8>(),
            std::mem::size_of_val(&hosts6[..]),
        );
        let v4 = self.stateful.flows.memory_regions();
        v4.into_iter().chain(v6).chain(std::iter::once(hosts6))
    }

    /// Flows in this worker's table.
    pub fn flow_count(&self) -> usize {
        self.stateful.flows.len()
    }

    /// Flows in this worker's IPv6 table.
    pub fn ipv6_flow_count(&self) -> usize {
        self.stateful6.flows.len()
    }

    /// The most half-open TCP flows the worker's table holds (`conntrack.half_open`).
    pub fn flow_half_open_limit(&self) -> usize {
        self.stateful.flows.config().half_open
    }

    fn classify(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        let Some(iface) = self.router.interfaces.get(usize::from(ingress.port)) else {
            return Verdict::Drop(DropReason::NotOurMac);
        };
        let Ok(frame) = EthernetFrame::new_checked(pkt.bytes()) else {
            return Verdict::Drop(DropReason::TruncatedFrame);
        };
        let dst_mac = frame.dst_addr();
        if dst_mac != iface.mac && !dst_mac.is_multicast() {
            return Verdict::Drop(DropReason::NotOurMac);
        }
        match frame.ethertype() {
            ethernet::ethertype::IPV4 => self.ipv4(pkt, ingress, probe, now_ns),
            ethernet::ethertype::ARP => Verdict::Control(ControlWork::Arp),
            ethernet::ethertype::IPV6 => self.ipv6(pkt, ingress, now_ns),
            ethernet::ethertype::VLAN | ethernet::ethertype::QINQ => {
                Verdict::Drop(DropReason::VlanTagged)
            }
            // The gateway's I/O decapsulated the session's IPv4; what is left is the
            // client's to read.
            ethernet::ethertype::PPPOE_DISCOVERY | ethernet::ethertype::PPPOE_SESSION
                if self.router.runs_pppoe(ingress.port) =>
            {
                Verdict::Control(ControlWork::Pppoe)
            }
            _ => Verdict::Drop(DropReason::UnsupportedEthertype),
        }
    }

    /// An IPv4 datagram: the checks every datagram must pass, then the stateful stage,
    /// routing and the features.
    fn ipv4(
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
                iface.addr == src
                    || is_directed_broadcast(iface, src)
                    || is_directed_broadcast(iface, dst)
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
        let (dst, ttl, dont_frag) = (ip.dst_addr(), ip.ttl(), ip.dont_frag());
        let datagram_len = usize::from(ip.total_len());
        if ttl <= 1 {
            // Only reachable for translated replies addressed to the gateway; an error about
            // a translated packet would confuse its sender, so none is sent.
            return Err(Verdict::Drop(DropReason::TtlExpired));
        }
        let Some(next_hop) = self.router.routes.lookup(dst) else {
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
        let Some(route) = self.router.routes.lookup(sender) else {
            return Verdict::Drop(reason);
        };
        if !self.icmp_errors.try_take(error.budget(), now_ns) {
            self.counters.icmp_errors_rate_limited.inc();
            return Verdict::Drop(reason);
        }
        let new_len = ICMP_ERROR_HEADERS + quote_len;
        let source = self.router.interfaces[usize::from(ingress)].addr;

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

    /// Sends a packet the gateway generated in place (a TCP reset) back toward `dst`.
    pub(crate) fn send_generated(&mut self, pkt: &mut PacketBuf, dst: Ipv4Addr) -> Option<Verdict> {
        let route = self.router.routes.lookup(dst)?;
        let port = route.port;
        Some(match self.resolve_l2(pkt, port, route.resolve(dst)) {
            None => Verdict::Transmit { port },
            Some(unresolved) => unresolved,
        })
    }
}

/// The IPv6 flow table's size: a quarter of IPv4's, since most flows are IPv4 still, and
/// one flow where no interface had IPv6 at start (adding it needs a restart).
fn ipv6_conntrack(v4: &ConntrackConfig, has_ipv6: bool) -> ConntrackConfig {
    let capacity = if has_ipv6 {
        (v4.capacity / 4).max(1024)
    } else {
        1
    };
    ConntrackConfig {
        capacity,
        half_open: v4.half_open.min(capacity),
        ..*v4
    }
}

/// The slow path is policed per worker so that a ping flood cannot keep the control thread
/// (and its ring) from ARP, which every forwarded packet depends on; ARP itself is exempt.
fn echo_bucket(limits: &IcmpLimits) -> TokenBucket {
    TokenBucket::new(limits.echo_per_sec, limits.echo_burst)
}

fn punt_bucket(punt: &crate::pipeline::config::PuntConfig) -> TokenBucket {
    TokenBucket::new(punt.per_sec, punt.burst)
}

/// What forwarding needs of a datagram the input checks admitted.
#[derive(Clone, Copy, Debug)]
struct Datagram {
    src: Ipv4Addr,
    /// Where the datagram ends in the frame (Ethernet pads short ones).
    frame_len: usize,
}

/// A worker's NAT pool settings, but for its addresses.
#[derive(Clone, Debug)]
struct NatSetup {
    ports: RangeInclusive<u16>,
    bindings: usize,
    host_ports: u32,
    port_block_size: u32,
    hosts: usize,
    log: Option<Arc<NatLog>>,
}

impl NatSetup {
    fn of(setup: &WorkerSetup) -> NatSetup {
        NatSetup {
            ports: setup.nat_ports.clone(),
            bindings: setup.nat_bindings,
            host_ports: setup.nat_host_ports,
            port_block_size: setup.nat_port_block_size,
            hosts: setup.conntrack.hosts,
            log: setup.nat_log.clone(),
        }
    }

    /// Worker `worker`'s pool on `addresses` (None without any), with these settings: at
    /// start and whenever the masquerade addresses change.
    fn pool(
        &self,
        addresses: &[Ipv4Addr],
        worker: u16,
        ownership: Ownership,
    ) -> Result<Option<NatPool>, NatPoolError> {
        if addresses.is_empty() {
            return Ok(None);
        }
        let mut pool = NatPool::new(
            addresses,
            self.ports.clone(),
            worker,
            ownership,
            self.bindings,
        )?
        .with_host_limit(self.host_ports, self.hosts);
        if self.port_block_size > 0 {
            let per_host = blocks_per_host(self.host_ports, self.port_block_size);
            pool = pool.with_port_blocks(self.port_block_size, per_host)?;
        }
        Ok(Some(pool.with_log(self.log.clone())))
    }
}

/// The NAT pool of a worker, when any interface masquerades.
fn nat_pool(router: &RouterConfig, setup: &WorkerSetup) -> Result<Option<NatPool>, NatPoolError> {
    let ownership = Ownership::new(setup.workers);
    NatSetup::of(setup).pool(&router.nat_addresses(), setup.worker, ownership)
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

/// /31 and /32 subnets have no broadcast address (RFC 3021): the all-ones address there is a
/// host, the point-to-point peer or the interface itself.
pub(crate) fn is_directed_broadcast(iface: &Interface, ip: Ipv4Addr) -> bool {
    iface.prefix_len < 31 && iface.broadcast() == ip
}

/// Addresses that must never be forwarded, as source or destination (RFC 1812 5.3.7).
fn is_martian(ip: Ipv4Addr) -> bool {
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.octets()[0] == 0
}

//! Layer 4, the top: the [`Pipeline`] one worker runs, its stages, and the compiled router
//! [`config`] they all read. Everything below (`features`, `state`, `l3`, `flow`, `wire`) is
//! called from here and never calls back; the stages hand each other the types of [`stage`].
//!
//! One packet's way, stage by stage:
//! 1. [`fast_path`]: the burst, parsed and hashed in passes; a packet of an established
//!    flow whose direction has a current shortcut is checked, rewritten and sent here.
//! 2. `classify`: everything else, by Ethernet type (the full path), its verdict policed
//!    and counted;
//! 3. `forward4` / `forward6`: each family's input checks (RFC 1812 / RFC 8200 and 4890),
//!    the gateway's own traffic ([`local::punt`], [`local::ipv6`]), then
//! 4. [`stateful`] (IPv4: conntrack, firewall, NAT, content; with the [`syn_proxy`] and
//!    [`kernel_flows`]) or `stateful6` (IPv6: conntrack, firewall, content): each finds the
//!    packet's key and probes its table, then runs `track`, the one tracking body both
//!    families share (closed-tuple reuse, checksum, tracker, recheck, content), and returns
//!    what it decided or asks for (`requests`: resets, ICMP errors, the proxy's answers);
//! 5. routing and the next hop, back in `forward4` / `forward6`;
//! 6. [`features`]: QoS and the traffic meter, one stage for both families;
//! 7. the verdict: transmit on a port, hand to the owning worker, punt, or drop (counted).
//!
//! Beside the path: `tables` (upkeep between bursts, table figures), the control thread's
//! helpers in [`local`] (ARP; IPv6 for the gateway; what goes to the kernel twins), and the
//! operator's tools in [`operator`] (explain, flow listing, the state snapshot).

// The path.
mod classify;
pub mod fast_path;
pub mod features;
mod forward4;
mod forward6;
pub mod kernel_flows;
mod requests;
pub mod stage;
pub mod stateful;
mod stateful6;
pub mod syn_proxy;
mod track;
// Beside it.
pub mod config;
pub mod local;
pub mod operator;
mod tables;
pub mod uplinks;

use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::counters::WorkerCounters;
use crate::features::meter::HostMeter;
use crate::state::conntrack::{ConntrackConfig, FlowTable};
use crate::state::firewall_log::{FirewallLog, FirewallLogger};
use crate::state::nat::blocks::blocks_per_host;
use crate::state::nat::{NatEventKind, NatLog, NatPool, NatPoolError, Ownership, DEFAULT_PORTS};

use crate::features::qos::{Class, HostShares, Link, Qos, QosMode, QosStats, ShapeRequest};
use crate::l3::icmp_error::IcmpBudgets;
use crate::l3::neighbor_view::NeighborView;
use crate::pipeline::config::{IcmpLimits, RouterConfig};
use crate::pipeline::stage::{ExtraFrames, WallClock, MAX_BURST};
use crate::pipeline::stateful::StatefulStage;
use crate::pipeline::stateful6::StatefulStage6;
use crate::ratelimit::TokenBucket;
use crate::state::flow_data::{next_epoch, FlowData, FlowData6, FIRST_EPOCH};

/// NAT ports per internal host and worker unless configured: a few thousand, so that about
/// fifteen hosts at their limit still leave a worker's UDP ports to the rest.
pub const DEFAULT_HOST_PORTS: u32 = 4096;
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
    /// Packets this worker may punt to the kernel twins ([`crate::pipeline::local::punt`]).
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
        let stateful = &self.router.stateful;
        for forward in old.stateful.all_port_forwards() {
            for port in forward.ports.clone() {
                if !stateful.forwards_port(forward.protocol, port) {
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
        for forward in self.router.stateful.all_port_forwards() {
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

    /// Tells the pipeline the Unix time (seconds) at its clock's `now_ns`, for parental time
    /// windows. Called at start; the pipeline then counts from its own clock.
    pub fn set_wall_clock(&mut self, unix_seconds: i64, now_ns: u64) {
        let clock = WallClock::at(unix_seconds, now_ns);
        self.stateful.wall_clock = clock;
        self.stateful6.wall_clock = clock;
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

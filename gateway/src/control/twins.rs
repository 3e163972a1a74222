//! Kernel twins: the exception path to Linux. An interface with a twin gets a network device
//! in the kernel (DPDK's net_tap PMD) carrying its MAC, address and MTU, in the gateway's own
//! network namespace or in `kernel_twins.netns`, so that Linux daemons (dnsmasq for DHCP and
//! DNS, sshd) serve the interface's link as if they sat on the wire.
//!
//! - What goes to the kernel is decided per packet by the pipeline (`pipeline::pipeline::local::punt`): a
//!   worker sends it over its SPSC punt ring to the control thread, which writes it to the
//!   twin. The worker never makes the syscall; a full ring is a counted drop, never a wait.
//! - What the kernel sends on a twin, the control thread reads and puts on its ring to
//!   worker 0, which transmits it with everything else the control thread sends: every TX
//!   queue keeps its single writer.
//! - ARP: the control thread copies the ARP it receives about the gateway's address to the
//!   twin, so the kernel learns its neighbours, and keeps the kernel's own ARP replies off the
//!   wire: the dataplane answers for its addresses and its neighbour table stays the one
//!   forwarding uses.
//!
//! Why net_tap and not virtio-user over vhost-net (the faster, KNI-replacing path): this
//! project's machines for tests have /dev/net/tun but no /dev/vhost-net, and a path that
//! cannot be tested is not offered. The twin is set up with `ip` once at start, never per
//! packet.

use std::process::Command;
use std::sync::Arc;

use pipeline::pipeline::config::PuntConfig;
use pipeline::pipeline::kernel_flows::kernel_flow;
use pipeline::pipeline::local::punt::{arp_for_twin, kernel_frame_refused, ndisc_for_twin};
use pipeline::pipeline::stateful::flow_owner;
use pipeline::ratelimit::TokenBucket;
use pipeline::state::nat::Ownership;
use pipeline::wire::EthernetAddress;
use pipeline::{DropReason, RouterConfig, WorkerCounters};

use crate::config::twins::{twin_names, TWIN_DESCRIPTORS};
use crate::config::GatewayConfig;
use crate::dataplane::punt::BatchedRing;
use crate::dpdk::{
    DpdkError, Eal, ErrorChain, Mbuf, MbufBatch, Mempool, Port, PortConfig, RingConsumer,
    RingProducer, RxQueue, RxQueueId, TxQueue, TxQueueId,
};

/// One interface's twin: the tap port's single queue pair, the control thread's (the queues
/// hold the port open), and what waits to be written to it.
struct Twin {
    rx: RxQueue,
    tx: TxQueue,
    to_kernel: MbufBatch,
    /// Whether the twin has IPv6 on (the kernel configures the interface's IPv6).
    ipv6: bool,
    /// A PPPoE interface's twin: IPv6 alone, either way (`session_link`).
    ipv6_only: bool,
    copies: CopyBudget,
}

/// The control thread's copies of ARP and Neighbor Discovery to one twin, held to the punt
/// budget (`kernel_twins.punt_per_sec`, `punt_burst`) as each worker's punts are, and counted
/// as punts: a flood of ARP requests from made-up senders costs the kernel no more than a
/// flood at the gateway's address (the dataplane still answers and learns as its ARP guard
/// says). Follows the budget a reload sets.
struct CopyBudget {
    bucket: TokenBucket,
    rate: (u32, u32),
}

impl CopyBudget {
    fn new((per_sec, burst): (u32, u32)) -> Self {
        CopyBudget {
            bucket: TokenBucket::new(per_sec, burst),
            rate: (per_sec, burst),
        }
    }

    /// Whether one more copy fits; counts it as punted, or as `punt_policed`.
    fn admit(&mut self, punt: &PuntConfig, now_ns: u64, counters: &WorkerCounters) -> bool {
        let rate = (punt.per_sec, punt.burst);
        if rate != self.rate {
            *self = CopyBudget::new(rate);
        }
        let admitted = self.bucket.try_take(now_ns);
        if admitted {
            counters.punted.inc();
        } else {
            counters.record_drop(DropReason::PuntPoliced);
        }
        admitted
    }
}

impl Twin {
    fn queue(&mut self, mbuf: Mbuf, counters: &WorkerCounters) {
        if let Err(mbuf) = self.to_kernel.push(mbuf) {
            self.flush(counters);
            let _ = self.to_kernel.push(mbuf);
        }
    }

    /// A kernel that is slow or gone refuses: counted, never waited for.
    fn flush(&mut self, counters: &WorkerCounters) {
        let (_, refused) = self.tx.tx_burst(&mut self.to_kernel);
        if refused > 0 {
            counters.record_drops(DropReason::TwinTxFull, refused as u64);
        }
    }
}

/// The twins, owned by the control thread, and the workers' punt rings it drains.
#[derive(Default)]
pub struct Twins {
    twins: Vec<Option<Twin>>,
    from_workers: Vec<RingConsumer>,
    /// To each worker, the kernel's frames of the flows it owns (`pipeline::pipeline::
    /// kernel_flows`), in worker order.
    to_workers: Vec<BatchedRing>,
    batch: MbufBatch,
}

/// A kernel twin that could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TwinError {
    /// `field` names the interface and its twin.
    #[error("{field}")]
    Twin {
        field: String,
        #[source]
        source: Box<TwinError>,
    },
    #[error(transparent)]
    Dpdk(#[from] DpdkError),
    #[error("moving the twin to namespace {netns:?} (does it exist?)")]
    Netns {
        netns: String,
        #[source]
        source: Box<TwinError>,
    },
    /// `what`: the sysctl being set, as "setting accept_ra".
    #[error("{what}")]
    Sysctl {
        what: &'static str,
        #[source]
        source: Box<TwinError>,
    },
    #[error("running {command}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {stderr}")]
    Failed { command: String, stderr: String },
}

impl Twins {
    /// Makes the twin of every interface that has one (`macs` in interface order): a tap
    /// with the interface's name (or `kernel_twin_name`), MAC and MTU, moved to the
    /// configured namespace, with the interface's address, IPv6 off unless the kernel
    /// configures the interface's IPv6 (`autoconfigure`, `delegated_prefix`), and up; a
    /// PPPoE interface's stays down until its session carries IPv6 (`session_link`).
    pub fn start(
        eal: &Eal,
        config: &GatewayConfig,
        macs: &[[u8; 6]],
        pool: &Arc<Mempool>,
    ) -> Result<Self, TwinError> {
        let mut twins = Vec::new();
        for (index, name) in twin_names(config).into_iter().enumerate() {
            let Some(name) = name else {
                twins.push(None);
                continue;
            };
            let iface = &config.interfaces[index];
            let field = format!("interfaces[{index}] ({}) kernel twin {name:?}", iface.name);
            let mac = EthernetAddress(macs[index]);
            let device = format!("net_tap_twin{index},iface={name},mac={mac}");
            let in_field = |source: TwinError| TwinError::Twin {
                field: field.clone(),
                source: Box::new(source),
            };
            let id = Port::probe(eal, &device).map_err(|err| in_field(err.into()))?;
            let port_config = PortConfig {
                rx_queues: 1,
                tx_queues: 1,
                rx_descriptors: TWIN_DESCRIPTORS,
                tx_descriptors: TWIN_DESCRIPTORS,
                mtu: Some(iface.mtu()),
                rss_key: None,
                promiscuous: false,
                ..PortConfig::default()
            };
            let mut port = Port::start(eal, id, &format!("twin-{name}"), &port_config, pool)
                .map_err(|err| in_field(err.into()))?;
            let netns = config.kernel_twins.netns.as_deref();
            // "dhcp": the DHCP client on the twin sets it (`crate::control::netlink` follows).
            let address = iface.address.cidr().map(|cidr| cidr.to_string());
            let ipv6 = match &iface.ipv6 {
                Some(_) if iface.address.is_pppoe() => TwinIpv6::Session,
                Some(ipv6) if ipv6.autoconfigure => TwinIpv6::Autoconfigured,
                Some(ipv6) if ipv6.delegated_prefix => TwinIpv6::Delegated,
                _ => TwinIpv6::Off,
            };
            set_up_kernel_side(&name, address.as_deref(), ipv6, netns).map_err(in_field)?;
            let mut twin = Twin {
                rx: port.take_rx_queue(RxQueueId(0))?,
                tx: port.take_tx_queue(TxQueueId(0))?,
                to_kernel: MbufBatch::new(),
                ipv6: ipv6 != TwinIpv6::Off,
                ipv6_only: ipv6 == TwinIpv6::Session,
                copies: CopyBudget::new((
                    config.kernel_twins.punt_per_sec,
                    config.kernel_twins.punt_burst,
                )),
            };
            // What the kernel sent before it was set up (IPv6 autoconfiguration) is dropped.
            let mut early = MbufBatch::new();
            while twin.rx.rx_burst(&mut early) > 0 {
                early.free_all();
            }
            tracing::info!(
                interface = %iface.name,
                twin = %name,
                netns = netns.unwrap_or("(the gateway's)"),
                address = address.as_deref().unwrap_or(if iface.address.is_pppoe() {
                    "none (PPPoE: IPv6 only, up while the session carries it)"
                } else {
                    "dhcp"
                }),
                %mac,
                tap_port = id.0,
                "kernel twin up"
            );
            twins.push(Some(twin));
        }
        Ok(Twins {
            twins,
            from_workers: Vec::new(),
            to_workers: Vec::new(),
            batch: MbufBatch::new(),
        })
    }

    /// Whether any interface has a twin: the workers need punt rings only then.
    pub fn any(&self) -> bool {
        self.twins.iter().any(Option::is_some)
    }

    /// The control thread's ends of the workers' punt rings, and of its rings of kernel
    /// frames to them (`kernel_ring`), in worker order.
    pub fn with_rings(
        mut self,
        from_workers: Vec<RingConsumer>,
        to_workers: Vec<RingProducer>,
    ) -> Self {
        self.from_workers = from_workers;
        self.to_workers = to_workers
            .into_iter()
            .map(|ring| BatchedRing::new(ring, DropReason::KernelRingFull))
            .collect();
        self
    }

    /// An ARP frame received on `ingress` (`iface`): the twin gets a copy if it is about the
    /// gateway's address there. The copy is a new buffer; the original goes on to the
    /// dataplane's ARP handling, which may rewrite it into the reply.
    pub fn copy_arp(
        &mut self,
        (ingress, frame): (u16, &[u8]),
        router: &RouterConfig,
        pool: &Mempool,
        (now_ns, counters): (u64, &WorkerCounters),
    ) {
        let Some(Some(twin)) = self.twins.get_mut(usize::from(ingress)) else {
            return;
        };
        let Some(iface) = router.interfaces.get(usize::from(ingress)) else {
            return;
        };
        if !arp_for_twin(frame, iface) || !twin.copies.admit(&router.punt, now_ns, counters) {
            return;
        }
        match Mbuf::from_bytes(pool, frame) {
            Some(copy) => twin.queue(copy, counters),
            None => counters.record_drop(DropReason::NoBuffer),
        }
    }

    /// A Neighbor Solicitation or Advertisement received on `ingress`: its twin gets a copy
    /// if it has IPv6, so that its duplicate address detection hears a node defending an
    /// address (which netlink then never takes: the kernel marks it failed) and it learns its
    /// neighbours. The original goes on to the dataplane's answer.
    pub fn copy_ndisc(
        &mut self,
        (ingress, frame): (u16, &[u8]),
        router: &RouterConfig,
        pool: &Mempool,
        (now_ns, counters): (u64, &WorkerCounters),
    ) {
        let Some(Some(twin)) = self.twins.get_mut(usize::from(ingress)) else {
            return;
        };
        if !twin.ipv6
            || !ndisc_for_twin(frame)
            || !twin.copies.admit(&router.punt, now_ns, counters)
        {
            return;
        }
        match Mbuf::from_bytes(pool, frame) {
            Some(copy) => twin.queue(copy, counters),
            None => counters.record_drop(DropReason::NoBuffer),
        }
    }

    /// One round on the control thread: what the workers punted goes to the twins (a burst
    /// per ring); what the kernel sent (a burst per twin), if it is the kernel's own
    /// (`kernel_frame_refused`: not its ARP replies, not what its namespace forwarded), goes
    /// to the worker that owns its flow where it is a connection to track (`kernel_flow`),
    /// else to `to_wire` with its interface. Returns the packets handled.
    pub fn poll(
        &mut self,
        router: &RouterConfig,
        counters: &WorkerCounters,
        mut to_wire: impl FnMut(u16, Mbuf),
    ) -> usize {
        let Twins {
            twins,
            from_workers,
            to_workers,
            batch,
        } = self;
        let ownership = Ownership::new(to_workers.len() as u16);
        let mut handled = 0;
        for ring in from_workers.iter_mut() {
            handled += ring.dequeue(batch);
            for mbuf in batch.drain() {
                match twins.get_mut(usize::from(mbuf.port().0)) {
                    // A PPPoE twin has no IPv4 address to take what was punted to the
                    // session's.
                    Some(Some(twin)) if twin.ipv6_only && !is_ipv6(mbuf.data()) => {
                        counters.record_drop(DropReason::LocalDelivery);
                    }
                    Some(Some(twin)) => twin.queue(mbuf, counters),
                    // A reload cannot add twins; nothing to take it.
                    _ => counters.record_drop(DropReason::LocalDelivery),
                }
            }
        }
        for (index, twin) in twins.iter_mut().enumerate() {
            let Some(twin) = twin else { continue };
            twin.flush(counters);
            let Some(iface) = router.interfaces.get(index) else {
                continue;
            };
            handled += twin.rx.rx_burst(batch);
            for mut mbuf in batch.drain() {
                if mbuf.segments() != 1 {
                    counters.record_drop(DropReason::MultiSegment);
                } else if twin.ipv6_only && !is_ipv6(mbuf.data()) {
                    // Its DHCPv4, ARP: the session's IPv4 is the gateway's own.
                    counters.record_drop(DropReason::TwinForeignSource);
                } else if let Some(reason) = kernel_frame_refused(mbuf.data(), iface, router) {
                    counters.record_drop(reason);
                } else {
                    counters.from_twins.inc();
                    let port = index as u16;
                    let owner = kernel_flow(router, port, mbuf.data())
                        .map(|key| usize::from(flow_owner(router, ownership, &key)));
                    match owner.and_then(|owner| to_workers.get_mut(owner)) {
                        Some(link) => {
                            mbuf.set_port(port);
                            link.push(mbuf, counters);
                        }
                        None => to_wire(port, mbuf),
                    }
                }
            }
        }
        for link in to_workers.iter_mut() {
            link.flush(counters);
        }
        handled
    }

    /// Writes what is still queued for the kernel (ARP copies made since the last poll).
    pub fn flush(&mut self, counters: &WorkerCounters) {
        for twin in self.twins.iter_mut().flatten() {
            twin.flush(counters);
        }
    }
}

/// What a twin does with IPv6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TwinIpv6 {
    /// Off: the dataplane answers for the interface's IPv6 itself.
    Off,
    /// On, taking Router Advertisements even where the namespace forwards (`accept_ra=2`):
    /// the kernel, or dhcpcd in its place, configures the interface from the ISP's.
    Autoconfigured,
    /// On for the addresses dhcpcd gives it from a delegated prefix; the kernel takes no
    /// Router Advertisement here (`accept_ra=0`), where the dataplane is the router.
    Delegated,
    /// A PPPoE session's, configured as `Autoconfigured` but with no address of its own
    /// making: its link-local address is the one IPv6CP agreed, set when the session
    /// carries IPv6 (`session_link`), and without Neighbor Discovery (`arp off`: the kernel
    /// sends to its own MAC, which the session's framing replaces with the access
    /// concentrator's, who answers solicitations without a link-layer address).
    Session,
}

/// Whether a frame is IPv6 (untagged: what the twins and the punt rings carry).
fn is_ipv6(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&pipeline::wire::ethernet::ethertype::IPV6.to_be_bytes()[..])
}

/// Moves the tap `name` to `netns` (if given), sets its IPv6 up as `ipv6` says, gives it
/// `address` (if configured) and brings it up. `ip` and `sysctl`, once, at start.
fn set_up_kernel_side(
    name: &str,
    address: Option<&str>,
    ipv6: TwinIpv6,
    netns: Option<&str>,
) -> Result<(), TwinError> {
    let ip = |args: &[&str]| -> Result<(), TwinError> {
        let mut command = Command::new("ip");
        if let Some(netns) = netns {
            command.args(["-n", netns]);
        }
        run(command.args(args))
    };
    if let Some(netns) = netns {
        run(Command::new("ip").args(["link", "set", "dev", name, "netns", netns])).map_err(
            |source| TwinError::Netns {
                netns: netns.to_string(),
                source: Box::new(source),
            },
        )?;
    }
    let sysctl = |setting: &str, value: &str| {
        let assignment = format!("net.ipv6.conf.{name}.{setting}={value}");
        match netns {
            Some(netns) => {
                run(Command::new("ip").args(["netns", "exec", netns, "sysctl", "-qw", &assignment]))
            }
            None => run(Command::new("sysctl").args(["-qw", &assignment])),
        }
    };
    if ipv6 == TwinIpv6::Session {
        // DPDK's tap start brought it up (and the kernel gave it a link-local address from
        // the MAC): down until the session carries IPv6, which flushes that address.
        ip(&["link", "set", "dev", name, "down"])?;
    }
    let accept_ra = match ipv6 {
        TwinIpv6::Off => {
            if let Err(err) = sysctl("disable_ipv6", "1") {
                // A kernel without IPv6 has nothing to turn off.
                tracing::debug!(twin = name, "IPv6 left as it is: {}", ErrorChain(&err));
            }
            None
        }
        TwinIpv6::Autoconfigured | TwinIpv6::Session => Some("2"),
        TwinIpv6::Delegated => Some("0"),
    };
    if let Some(accept_ra) = accept_ra {
        // The link-local address from the MAC (EUI-64), as the dataplane's is, whatever the
        // host's default (stable privacy): DHCPv6 servers answer the twin's client there.
        let setting = |what: &'static str| {
            move |source| TwinError::Sysctl {
                what,
                source: Box::new(source),
            }
        };
        // A session's twin gets the link-local address IPv6CP agreed (mode 1: none made).
        let mode = if ipv6 == TwinIpv6::Session { "1" } else { "0" };
        sysctl("addr_gen_mode", mode).map_err(setting("setting addr_gen_mode"))?;
        sysctl("disable_ipv6", "0").map_err(setting("turning IPv6 on"))?;
        sysctl("accept_ra", accept_ra).map_err(setting("setting accept_ra"))?;
    }
    if let Some(address) = address {
        ip(&["addr", "replace", address, "dev", name])?;
    }
    if ipv6 == TwinIpv6::Session {
        // Up once the session carries IPv6 (`session_link`).
        return ip(&["link", "set", "dev", name, "arp", "off"]);
    }
    ip(&["link", "set", "dev", name, "up"])?;
    Ok(())
}

fn run(command: &mut Command) -> Result<(), TwinError> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|source| TwinError::Spawn {
        command: shown.clone(),
        source,
    })?;
    if !output.status.success() {
        return Err(TwinError::Failed {
            command: shown,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}

pub mod session_link;

#[cfg(test)]
mod tests;

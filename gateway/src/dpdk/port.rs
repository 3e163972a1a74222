//! Ports and their queues, with the rules of DPDK's ethdev API carried by the types:
//!
//! - a port is started once ([`Port::start`] claims its id) and hands out each of its queues
//!   once, as an owned [`RxQueue`] or [`TxQueue`] that is neither `Copy` nor `Clone`;
//! - a queue is `Send` (a worker lcore takes it) but not `Sync`, and bursts take `&mut self`:
//!   one thread at a time polls it, which is what DPDK's lock-free bursts require;
//! - every queue, flow rule and monitor holds the port's shared state, so the port is stopped
//!   and closed only when the last of them is gone, and the port in turn holds its mempool and
//!   the EAL: drop order is ownership, not convention.
//!
//! The hot path pays nothing for this: a burst reads two `u16`s from the queue it is given.

mod device;
mod monitor;
mod queues;
mod types;

use device::*;
pub use monitor::*;
pub use types::*;

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::CString;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use super::eal::{Eal, EalHold};
use super::error::{check, DpdkError, Result};
use super::ids::{PortId, RxQueueId, SocketId, TxQueueId};
use super::mbuf::{MbufBatch, BURST_SIZE};
use super::mempool::{FastFreeClaim, Mempool};
use super::ring::{RingConsumer, RingProducer};

/// At most this many extended statistics are read per port: ixgbe reports about 150 with
/// its per-queue ones, so this only bounds a driver gone wrong.
pub const MAX_XSTATS: usize = 512;

/// `RTE_ETH_DEV_INTR_LSC` from rte_ethdev.h: the device reports link changes by interrupt.
const RTE_ETH_DEV_INTR_LSC: u32 = 1 << 1;

/// How many queues `rte_eth_stats` reports individually.
pub const QUEUE_STAT_COUNTERS: usize = dpdk_sys::RTE_ETHDEV_QUEUE_STAT_CNTRS as usize;

/// The ring ends a net_ring port uses. The port owns them once started, so they outlive it.
pub struct PortRings {
    _rx: RingConsumer,
    _tx: RingProducer,
}

/// Port ids some owner in this process holds: a started [`Port`] or an unstarted
/// [`RingDevice`]. Claiming is what makes a second `Port::start` of one device fail instead
/// of giving two owners that would both stop and close it.
static CLAIMED_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

struct PortClaim(PortId);

impl PortClaim {
    fn try_new(id: PortId, name: &str) -> Result<PortClaim> {
        let mut claimed = CLAIMED_PORTS
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if !claimed.insert(id.0) {
            return Err(DpdkError::Invalid {
                what: "port",
                detail: format!("{name} ({id}) is already started or owned in this process"),
            });
        }
        Ok(PortClaim(id))
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        CLAIMED_PORTS
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(&self.0 .0);
    }
}

/// A net_ring device made by [`Port::from_rings`], not started yet. Start it with
/// [`Port::start_rings`]; dropped unstarted, it closes the device before freeing its rings.
pub struct RingDevice {
    id: PortId,
    parts: Option<(PortClaim, PortRings)>,
    _eal: EalHold,
}

impl RingDevice {
    pub fn id(&self) -> PortId {
        self.id
    }
}

impl Drop for RingDevice {
    fn drop(&mut self) {
        if self.parts.is_some() {
            // SAFETY: the device was made by rte_eth_from_rings and never started (start_rings
            // takes the parts out); closing releases it before its rings are freed below.
            unsafe { dpdk_sys::rte_eth_dev_close(self.id.0) };
        }
    }
}

/// What a port's owner, its queues, flow rules and monitors share. The last of them to go
/// stops and closes the port, then releases (in field order) the fast-free right, the claim
/// on the id, the rings of a net_ring port, the pool it receives into, and its EAL share.
pub(crate) struct PortInner {
    id: PortId,
    name: String,
    started: bool,
    fast_free: Option<FastFreeClaim>,
    /// The NIC inserts 802.1Q tags for mbufs that ask (`RTE_MBUF_F_TX_VLAN`).
    vlan_insert: bool,
    _claim: PortClaim,
    rings: Option<PortRings>,
    /// Kept so the pool outlives the port's descriptors; read by debug builds' checks.
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    pool: Arc<Mempool>,
    _eal: EalHold,
}

impl Drop for PortInner {
    fn drop(&mut self) {
        if self.started {
            // SAFETY: the last user of the started port is gone: no queue, flow rule or
            // monitor is left to touch it.
            unsafe {
                dpdk_sys::rte_eth_dev_stop(self.id.0);
                dpdk_sys::rte_eth_dev_close(self.id.0);
            }
            tracing::debug!(port = self.name, "port stopped and closed");
        } else if self.rings.is_some() {
            // SAFETY: a net_ring device whose start failed; closing it releases the device
            // before its rings are freed with this struct's fields.
            unsafe { dpdk_sys::rte_eth_dev_close(self.id.0) };
        }
    }
}

/// A started port: configures and owns the device, and hands out each of its queues once.
/// Stopped and closed when it and every queue, flow rule and monitor it gave out are gone.
pub struct Port {
    inner: Arc<PortInner>,
    rx_taken: Vec<bool>,
    tx_taken: Vec<bool>,
    socket: SocketId,
}

impl Port {
    /// Finds the port a device string names. For `net_af_packet0,iface=x` that is
    /// `net_af_packet0`; for a PCI device, its address.
    pub fn find(_eal: &Eal, device: &str) -> Result<PortId> {
        let name = device.split(',').next().unwrap_or(device).trim();
        let cname = CString::new(name).map_err(|_| DpdkError::NoSuchPort(name.into()))?;
        let mut id = 0u16;
        // SAFETY: valid C string and out-pointer; the EAL is up.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret < 0 {
            return Err(DpdkError::NoSuchPort(name.into()));
        }
        Ok(PortId(id))
    }

    /// Probes a device after EAL start (hotplug), e.g. a vdev string, and returns its port.
    pub fn probe(eal: &Eal, device: &str) -> Result<PortId> {
        let cdev = CString::new(device).map_err(|_| DpdkError::NoSuchPort(device.into()))?;
        // SAFETY: valid C string; the EAL is up.
        let ret = unsafe { dpdk_sys::rte_dev_probe(cdev.as_ptr()) };
        if ret < 0 {
            let name = device.split(',').next().unwrap_or(device);
            return Err(match DpdkError::from_errno("rte_dev_probe", ret) {
                DpdkError::Call { message, .. } => DpdkError::Invalid {
                    what: "device",
                    detail: format!("cannot probe {name:?}: {message}"),
                },
                other => other,
            });
        }
        Self::find(eal, device)
    }

    /// The NUMA node of a port's device, where its pool and rings belong; `ANY` when the
    /// device does not say (virtual devices, single-node machines).
    pub fn socket(_eal: &Eal, id: PortId) -> SocketId {
        // SAFETY: the EAL is up; an unknown port returns an error value (negative).
        SocketId::from_raw(unsafe { dpdk_sys::rte_eth_dev_socket_id(id.0) })
    }

    /// A port over rings the caller owns (net_ring): what is enqueued on `rx` arrives as
    /// received packets; what the port transmits lands in `tx`. For benchmarks and tests.
    /// The PMD becomes the consumer of `rx` and the producer of `tx`, so the caller keeps the
    /// other ends only; the device keeps these ends, and the started port after it.
    pub fn from_rings(
        eal: &Eal,
        name: &str,
        rx: RingConsumer,
        tx: RingProducer,
    ) -> Result<RingDevice> {
        let cname = CString::new(name).map_err(|_| DpdkError::NoSuchPort(name.into()))?;
        let rx_rings = [rx.as_raw()];
        let tx_rings = [tx.as_raw()];
        // SAFETY: valid name; the ring arrays outlive the call and the rings outlive the
        // device because the RingDevice (then the Port) keeps their ends.
        let ret = unsafe {
            dpdk_sys::rte_eth_from_rings(
                cname.as_ptr(),
                rx_rings.as_ptr(),
                1,
                tx_rings.as_ptr(),
                1,
                dpdk_sys::rte_socket_id(),
            )
        };
        if ret < 0 {
            return Err(DpdkError::last("rte_eth_from_rings"));
        }
        let id = PortId(ret as u16);
        let rings = PortRings { _rx: rx, _tx: tx };
        match PortClaim::try_new(id, name) {
            Ok(claim) => Ok(RingDevice {
                id,
                parts: Some((claim, rings)),
                _eal: eal.hold(),
            }),
            Err(err) => {
                // A fresh device whose id someone else holds: not ours to close, and it points
                // at these rings, so they must stay.
                std::mem::forget(rings);
                Err(err)
            }
        }
    }

    /// Configures queues, RSS and MTU, sets up every queue from `pool`, and starts the port.
    /// Fails if the port is already started in this process.
    pub fn start(
        eal: &Eal,
        id: PortId,
        name: &str,
        config: &PortConfig,
        pool: &Arc<Mempool>,
    ) -> Result<Port> {
        let claim = PortClaim::try_new(id, name)?;
        Self::start_claimed(eal, id, claim, None, name, config, pool)
    }

    /// [`Port::start`] for a net_ring device; the port then owns its rings.
    pub fn start_rings(
        eal: &Eal,
        mut device: RingDevice,
        name: &str,
        config: &PortConfig,
        pool: &Arc<Mempool>,
    ) -> Result<Port> {
        let (claim, rings) = device
            .parts
            .take()
            .expect("an unstarted device has its parts");
        Self::start_claimed(eal, device.id, claim, Some(rings), name, config, pool)
    }

    fn start_claimed(
        eal: &Eal,
        id: PortId,
        claim: PortClaim,
        rings: Option<PortRings>,
        name: &str,
        config: &PortConfig,
        pool: &Arc<Mempool>,
    ) -> Result<Port> {
        // Built first, so that a failure below releases the claim and, for a ring device,
        // closes it before its rings go.
        let mut inner = PortInner {
            id,
            name: name.to_string(),
            started: false,
            fast_free: None,
            vlan_insert: false,
            _claim: claim,
            rings,
            pool: pool.clone(),
            _eal: eal.hold(),
        };
        let info = device_info(id)?;
        let limits = |what: &'static str, detail: String| DpdkError::Invalid {
            what,
            detail: format!("{name} ({}): {detail}", driver_name(&info)),
        };
        if config.rx_queues == 0 || config.rx_queues > info.max_rx_queues {
            return Err(limits(
                "rx queues",
                format!(
                    "{} asked, the device allows 1..={}",
                    config.rx_queues, info.max_rx_queues
                ),
            ));
        }
        if config.tx_queues == 0 || config.tx_queues > info.max_tx_queues {
            return Err(limits(
                "tx queues",
                format!(
                    "{} asked, the device allows 1..={}",
                    config.tx_queues, info.max_tx_queues
                ),
            ));
        }
        check_descriptors("rx descriptors", config.rx_descriptors, &info.rx_desc_lim)
            .map_err(|d| limits("rx descriptors", d))?;
        check_descriptors("tx descriptors", config.tx_descriptors, &info.tx_desc_lim)
            .map_err(|d| limits("tx descriptors", d))?;
        if let Some(mtu) = config.mtu {
            if mtu < info.min_mtu || mtu > info.max_mtu {
                return Err(limits(
                    "mtu",
                    format!(
                        "{mtu} asked, the device allows {}..={}",
                        info.min_mtu, info.max_mtu
                    ),
                ));
            }
        }

        // SAFETY: rte_eth_conf is a plain C struct for which all-zero is the documented default.
        let mut conf: dpdk_sys::rte_eth_conf = unsafe { std::mem::zeroed() };
        let rss_hash_types = config.rss_hash_types & info.flow_type_rss_offloads;
        if config.rx_queues > 1 && rss_hash_types != 0 {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hash_types;
        } else if config.rx_queues > 1 {
            tracing::warn!(
                port = name,
                "device offers no IPv4 RSS; flows land on queues as the driver likes"
            );
        }
        let mut key = config.rss_key.clone();
        if let Some(key) = key.as_mut().filter(|_| config.rx_queues > 1) {
            if info.hash_key_size != 0 && key.len() != info.hash_key_size as usize {
                return Err(limits(
                    "rss key",
                    format!(
                        "{} bytes given, the device wants {}",
                        key.len(),
                        info.hash_key_size
                    ),
                ));
            }
            conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
            conf.rx_adv_conf.rss_conf.rss_key_len = key.len() as u8;
        }
        // Link changes by interrupt where the device has them: a bond learns of a member
        // going down this way (members are configured like the bond), and polls the rest.
        let dev_flags = if info.dev_flags.is_null() {
            0
        } else {
            // SAFETY: dev_flags points at the device's flags word for as long as it exists.
            unsafe { *info.dev_flags }
        };
        if dev_flags & RTE_ETH_DEV_INTR_LSC != 0 {
            conf.intr_conf.set_lsc(1);
        }
        // The NIC's verdict on TCP and UDP checksums spares the pipeline checking in software
        // the SYNs, FINs and RSTs it must verify before they may change a flow.
        conf.rxmode.offloads |= info.rx_offload_capa
            & (dpdk_sys::flags::RTE_ETH_RX_OFFLOAD_TCP_CKSUM
                | dpdk_sys::flags::RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
        if config.vlan_offloads {
            // A stripped tag arrives in the mbuf's vlan_tci with RX_VLAN_STRIPPED set, which
            // the workers read as they would the tag in the frame.
            conf.rxmode.offloads |=
                info.rx_offload_capa & dpdk_sys::flags::RTE_ETH_RX_OFFLOAD_VLAN_STRIP;
            if info.tx_offload_capa & dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_VLAN_INSERT != 0 {
                conf.txmode.offloads |= dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_VLAN_INSERT;
                inner.vlan_insert = true;
            }
        }
        let driver = driver_name(&info);
        if config.fast_free
            && info.tx_offload_capa & dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE != 0
        {
            let claim = if driver == "net_bonding" {
                Err("the bonding PMD sends LACPDUs from pools of its own on the data queues".into())
            } else {
                FastFreeClaim::try_new(pool)
            };
            match claim {
                Ok(claim) => {
                    conf.txmode.offloads |= dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
                    inner.fast_free = Some(claim);
                }
                Err(why) => tracing::info!(port = name, "MBUF_FAST_FREE left off: {why}"),
            }
        }

        // SAFETY: the port exists, the conf is fully initialised and outlives the call (the
        // key is copied by the driver during configure).
        check("rte_eth_dev_configure", unsafe {
            dpdk_sys::rte_eth_dev_configure(id.0, config.rx_queues, config.tx_queues, &conf)
        })?;
        let mut rx_desc = config.rx_descriptors;
        let mut tx_desc = config.tx_descriptors;
        // SAFETY: valid port and out-pointers.
        check("rte_eth_dev_adjust_nb_rx_tx_desc", unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(id.0, &mut rx_desc, &mut tx_desc)
        })?;
        let socket = Self::socket(eal, id);
        let rxconf = rx_queue_conf(&info);
        for queue in 0..config.rx_queues {
            // SAFETY: configured port, queue in range, live mempool, rxconf valid for the call.
            check("rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    id.0,
                    queue,
                    rx_desc,
                    socket.raw() as u32,
                    &rxconf,
                    pool.as_ptr(),
                )
            })?;
        }
        let mut txconf = info.default_txconf;
        txconf.offloads = conf.txmode.offloads;
        for queue in 0..config.tx_queues {
            // SAFETY: configured port, queue in range, valid txconf.
            check("rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(id.0, queue, tx_desc, socket.raw() as u32, &txconf)
            })?;
        }
        if let Some(mtu) = config.mtu {
            // SAFETY: valid port.
            let ret = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id.0, mtu) };
            if ret == -(libc_enotsup()) {
                tracing::warn!(
                    port = name,
                    mtu,
                    "driver cannot set the MTU; keeping its own"
                );
            } else {
                check("rte_eth_dev_set_mtu", ret)?;
            }
        }
        // Devices such as the ixgbe count every queue in counter 0 unless told otherwise;
        // drivers that count per queue anyway refuse the mapping, which is fine.
        for queue in 0..config.rx_queues.min(QUEUE_STAT_COUNTERS as u16) {
            // SAFETY: configured port, queue in range; the call only sets a register map.
            unsafe {
                dpdk_sys::rte_eth_dev_set_rx_queue_stats_mapping(id.0, queue, queue as u8);
                dpdk_sys::rte_eth_dev_set_tx_queue_stats_mapping(id.0, queue, queue as u8);
            }
        }
        // SAFETY: all queues are set up.
        check("rte_eth_dev_start", unsafe {
            dpdk_sys::rte_eth_dev_start(id.0)
        })?;
        // SAFETY: started port. Failure only matters for PMDs without a MAC filter, which
        // take every frame anyway.
        let ret = unsafe {
            if config.promiscuous {
                dpdk_sys::rte_eth_promiscuous_enable(id.0)
            } else {
                dpdk_sys::rte_eth_promiscuous_disable(id.0)
            }
        };
        if ret < 0 {
            tracing::debug!(
                port = name,
                promiscuous = config.promiscuous,
                "the driver cannot change promiscuous mode"
            );
        }
        // The bonding PMD's 802.3ad receive drops every multicast frame while the bond is
        // neither promiscuous nor all-multicast, broadcast included: the partner side's ARP
        // requests for the gateway would never arrive (found with a host behind Open vSwitch
        // that had not heard from the gateway first). All-multicast lets them through; its
        // members then take multicast too, which the pipeline drops as it does on any port.
        if (driver == "net_bonding" || config.all_multicast) && !config.promiscuous {
            // SAFETY: started port.
            let ret = unsafe { dpdk_sys::rte_eth_allmulticast_enable(id.0) };
            // A PMD without multicast filtering (af_packet, tap) says it cannot, and takes
            // every frame anyway; a bond that cannot is the case to warn about.
            if ret == -libc::ENOTSUP && driver != "net_bonding" {
                tracing::debug!(port = name, "the driver has no all-multicast switch");
            } else if ret < 0 {
                tracing::warn!(
                    port = name,
                    "the port refused all-multicast ({ret}): a bond's broadcast ARP from the \
                     partner side, or IPv6 Neighbor Discovery, may not arrive"
                );
            }
        }
        inner.started = true;
        tracing::info!(
            port = name,
            id = id.0,
            driver,
            %socket,
            rx_queues = config.rx_queues,
            tx_queues = config.tx_queues,
            rx_desc,
            tx_desc,
            fast_free = inner.fast_free.is_some(),
            vlan_strip = conf.rxmode.offloads & dpdk_sys::flags::RTE_ETH_RX_OFFLOAD_VLAN_STRIP != 0,
            vlan_insert = inner.vlan_insert,
            "port started"
        );
        Ok(Port {
            inner: Arc::new(inner),
            rx_taken: vec![false; usize::from(config.rx_queues)],
            tx_taken: vec![false; usize::from(config.tx_queues)],
            socket,
        })
    }

    pub fn id(&self) -> PortId {
        self.inner.id
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn rx_queues(&self) -> u16 {
        self.rx_taken.len() as u16
    }

    pub fn tx_queues(&self) -> u16 {
        self.tx_taken.len() as u16
    }

    /// The NUMA node of the device, as at start.
    pub fn numa_socket(&self) -> SocketId {
        self.socket
    }

    /// Whether the port transmits with `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE`.
    pub fn fast_free(&self) -> bool {
        self.inner.fast_free.is_some()
    }

    /// Hands out RX queue `id`, once: a second call for the same queue fails.
    pub fn take_rx_queue(&mut self, id: RxQueueId) -> Result<RxQueue> {
        take(&mut self.rx_taken, id.0, &self.inner.name, "rx queue")?;
        Ok(RxQueue {
            port: self.inner.id.0,
            queue: id.0,
            _owner: self.inner.clone(),
            _one_user: PhantomData,
        })
    }

    /// Hands out TX queue `id`, once: a second call for the same queue fails.
    pub fn take_tx_queue(&mut self, id: TxQueueId) -> Result<TxQueue> {
        take(&mut self.tx_taken, id.0, &self.inner.name, "tx queue")?;
        Ok(TxQueue {
            port: self.inner.id.0,
            queue: id.0,
            vlan_insert: self.inner.vlan_insert,
            _owner: self.inner.clone(),
            _one_user: PhantomData,
        })
    }

    pub fn mac_address(&self) -> Result<[u8; 6]> {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: started port and a valid out-pointer.
        check("rte_eth_macaddr_get", unsafe {
            dpdk_sys::rte_eth_macaddr_get(self.inner.id.0, &mut addr)
        })?;
        Ok(addr.addr_bytes)
    }

    pub fn stats(&self) -> Result<PortStats> {
        stats(self.inner.id)
    }

    /// A read-only view (statistics, link) for another thread, such as the metrics server.
    pub fn monitor(&self) -> PortMonitor {
        PortMonitor {
            inner: self.inner.clone(),
        }
    }

    /// The shared state, for what must keep the port open while it lives (a flow rule).
    pub(crate) fn owner(&self) -> Arc<PortInner> {
        self.inner.clone()
    }
}

impl PortInner {
    pub(crate) fn id(&self) -> PortId {
        self.id
    }
}

fn take(taken: &mut [bool], index: u16, port: &str, what: &'static str) -> Result<()> {
    match taken.get_mut(usize::from(index)) {
        None => Err(DpdkError::Invalid {
            what,
            detail: format!("{port} has {} of them, no {what} {index}", taken.len()),
        }),
        Some(true) => Err(DpdkError::Invalid {
            what,
            detail: format!("{port}: {what} {index} was already handed out"),
        }),
        Some(slot) => {
            *slot = true;
            Ok(())
        }
    }
}

/// One RX queue of a started port, owned by the one thread that polls it. Not `Copy`, not
/// `Clone`, not `Sync`: DPDK's RX burst is lock-free only with a single poller per queue, and
/// this type is how that is enforced. It keeps its port open while it lives.
///
/// ```compile_fail
/// // Not Copy: a queue used after it was moved away does not compile.
/// fn twice(queue: gateway::dpdk::RxQueue) -> (gateway::dpdk::RxQueue, gateway::dpdk::RxQueue) {
///     (queue, queue)
/// }
/// ```
/// ```compile_fail
/// // Not Clone.
/// fn copy(queue: &gateway::dpdk::RxQueue) -> gateway::dpdk::RxQueue {
///     queue.clone()
/// }
/// ```
/// ```compile_fail
/// // Not Sync: two threads cannot poll one queue through a shared reference.
/// fn shared<T: Sync>() {}
/// shared::<gateway::dpdk::RxQueue>();
/// ```
/// ```compile_fail
/// // Bursts need the queue exclusively.
/// fn poll(queue: &gateway::dpdk::RxQueue, batch: &mut gateway::dpdk::MbufBatch) {
///     queue.rx_burst(batch);
/// }
/// ```
/// ```
/// // Send: a worker lcore can be given it.
/// fn sent<T: Send>() {}
/// sent::<gateway::dpdk::RxQueue>();
/// sent::<gateway::dpdk::TxQueue>();
/// ```
pub struct RxQueue {
    port: u16,
    queue: u16,
    _owner: Arc<PortInner>,
    _one_user: PhantomData<Cell<()>>,
}

/// One TX queue of a started port, owned by the one thread that transmits on it: the same
/// rules as [`RxQueue`].
///
/// ```compile_fail
/// fn copy(queue: &gateway::dpdk::TxQueue) -> gateway::dpdk::TxQueue {
///     queue.clone()
/// }
/// ```
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<gateway::dpdk::TxQueue>();
/// ```
/// ```compile_fail
/// // An RX queue id is not a TX queue id.
/// fn take(port: &mut gateway::dpdk::Port) {
///     let _ = port.take_tx_queue(gateway::dpdk::RxQueueId(0));
/// }
/// ```
pub struct TxQueue {
    port: u16,
    queue: u16,
    vlan_insert: bool,
    _owner: Arc<PortInner>,
    _one_user: PhantomData<Cell<()>>,
}

/// Statistics and link state of a started port, for another thread (metrics). Cloneable; it
/// keeps the port open while it lives, like a queue.
#[derive(Clone)]
pub struct PortMonitor {
    inner: Arc<PortInner>,
}

#[cfg(test)]
mod tests;

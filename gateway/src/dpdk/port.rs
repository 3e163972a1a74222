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

/// How to bring up one ethdev port. Every value is checked against the device's own limits
/// in [`Port::start`], so a bad config fails with the limit it broke.
#[derive(Clone, Debug)]
pub struct PortConfig {
    pub rx_queues: u16,
    pub tx_queues: u16,
    pub rx_descriptors: u16,
    pub tx_descriptors: u16,
    /// L3 MTU; `None` keeps the device's default.
    pub mtu: Option<u16>,
    /// RSS hash types (`dpdk_sys::flags::RTE_ETH_RSS_*`), trimmed to what the device offers.
    pub rss_hash_types: u64,
    /// A 40-byte (or device-sized) Toeplitz key; `None` lets the driver choose.
    pub rss_key: Option<Vec<u8>>,
    /// Receive frames for any MAC (flooded unicast too, each a `not_our_mac` drop a worker
    /// pays for); off, the port takes its own MAC, broadcast and the multicast it joined.
    pub promiscuous: bool,
    /// Receive every multicast frame (`rte_eth_allmulticast_enable`): for IPv6, whose
    /// Neighbor Discovery is sent to groups. Groups nobody here joined are dropped by the
    /// workers (`ipv6_not_forwarded`).
    pub all_multicast: bool,
    /// Ask for `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE` where the device has it. Granted only while
    /// the pool is the process's one packet pool (see `mempool.rs`), and never on a bond,
    /// whose PMD transmits LACPDUs from pools of its own on the data queues.
    pub fast_free: bool,
    /// Let the NIC strip 802.1Q tags on receipt and insert them on transmit, where it can
    /// (`RTE_ETH_RX_OFFLOAD_VLAN_STRIP`, `RTE_ETH_TX_OFFLOAD_VLAN_INSERT`): for a port that
    /// carries VLAN subinterfaces. Elsewhere the workers tag and untag in software.
    pub vlan_offloads: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            mtu: None,
            rss_hash_types: dpdk_sys::flags::RTE_ETH_RSS_IPV4_TCP_UDP,
            rss_key: None,
            promiscuous: false,
            all_multicast: false,
            fast_free: true,
            vlan_offloads: false,
        }
    }
}

/// A snapshot of `rte_eth_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// `imissed`: packets the NIC dropped before any queue took them. On ixgbe that is the
    /// RX packet buffer overflowing (MPC); with drop-enable on, a queue short of descriptors
    /// counts its own drops in `rx_queue_drops` instead of backing the buffer up.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// RX failures for want of an mbuf in the pool.
    pub rx_nombuf: u64,
    /// Per-queue packets, for the first RTE_ETHDEV_QUEUE_STAT_CNTRS queues.
    pub rx_queue_packets: [u64; QUEUE_STAT_COUNTERS],
    pub tx_queue_packets: [u64; QUEUE_STAT_COUNTERS],
    /// Per-queue drops (`q_errors`): on ixgbe, packets a queue dropped for want of a free
    /// descriptor (QPRDC), its worker having fallen behind.
    pub rx_queue_drops: [u64; QUEUE_STAT_COUNTERS],
}

impl PortStats {
    /// Calls `f` with each counter of `self` and the same counter of `other`.
    pub fn zip_counters_mut(&mut self, other: &PortStats, mut f: impl FnMut(&mut u64, u64)) {
        let scalars = [
            (&mut self.rx_packets, other.rx_packets),
            (&mut self.tx_packets, other.tx_packets),
            (&mut self.rx_bytes, other.rx_bytes),
            (&mut self.tx_bytes, other.tx_bytes),
            (&mut self.rx_missed, other.rx_missed),
            (&mut self.rx_errors, other.rx_errors),
            (&mut self.tx_errors, other.tx_errors),
            (&mut self.rx_nombuf, other.rx_nombuf),
        ];
        for (mine, theirs) in scalars {
            f(mine, theirs);
        }
        let queues = [
            (&mut self.rx_queue_packets, &other.rx_queue_packets),
            (&mut self.tx_queue_packets, &other.tx_queue_packets),
            (&mut self.rx_queue_drops, &other.rx_queue_drops),
        ];
        for (mine, theirs) in queues {
            for (mine, &theirs) in mine.iter_mut().zip(theirs) {
                f(mine, theirs);
            }
        }
    }
}

/// What a port is, for an info metric: its driver, firmware (empty where the driver has
/// none to tell) and EAL device name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortInfo {
    pub driver: String,
    pub firmware: String,
    pub device: String,
}

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

impl RxQueue {
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    pub fn id(&self) -> RxQueueId {
        RxQueueId(self.queue)
    }

    /// Receives into the free part of `batch`; returns how many arrived.
    #[inline]
    pub fn rx_burst(&mut self, batch: &mut MbufBatch) -> usize {
        let room = BURST_SIZE - batch.len;
        // SAFETY: the port is started and stays so while this queue lives (it holds the
        // port); &mut self on the one RxQueue of this index makes us its only poller; the
        // driver writes `got` owned mbuf pointers into the batch's free slots.
        let got = unsafe {
            dpdk_sys::shim_rte_eth_rx_burst(
                self.port,
                self.queue,
                batch.ptrs[batch.len..].as_mut_ptr(),
                room as u16,
            )
        } as usize;
        batch.len += got;
        got
    }
}

impl TxQueue {
    pub fn port(&self) -> PortId {
        PortId(self.port)
    }

    /// Whether the NIC inserts 802.1Q tags for this queue's mbufs that ask
    /// ([`Mbuf::request_tx_vlan`](super::Mbuf::request_tx_vlan)).
    pub fn vlan_insert(&self) -> bool {
        self.vlan_insert
    }

    pub fn id(&self) -> TxQueueId {
        TxQueueId(self.queue)
    }

    /// Sends the batch. What the driver accepted now belongs to it and is never touched
    /// again; what it refused is freed here. Returns (sent, dropped); the batch ends empty.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut MbufBatch) -> (usize, usize) {
        if batch.is_empty() {
            return (0, 0);
        }
        #[cfg(debug_assertions)]
        self.check_fast_free(batch);
        // SAFETY: the port is started and stays so while this queue lives; &mut self on the
        // one TxQueue of this index makes us its only user; the driver takes ownership of the
        // first `sent` mbufs.
        let sent = unsafe {
            dpdk_sys::shim_rte_eth_tx_burst(
                self.port,
                self.queue,
                batch.ptrs.as_mut_ptr(),
                batch.len as u16,
            )
        } as usize;
        batch.consume_front(sent);
        let dropped = batch.free_all();
        (sent, dropped)
    }

    /// A burst of nothing. Bonding in 802.3ad mode sends its pending LACPDUs from inside
    /// tx_burst, so a quiet link still needs calls.
    #[inline]
    pub fn tx_burst_idle(&mut self) {
        let mut none: [*mut dpdk_sys::rte_mbuf; 0] = [];
        // SAFETY: started port, this queue's only user, zero packets handed over.
        unsafe { dpdk_sys::shim_rte_eth_tx_burst(self.port, self.queue, none.as_mut_ptr(), 0) };
    }

    /// Debug builds check what release builds rely on: with MBUF_FAST_FREE, every mbuf sent is
    /// a direct, unshared, single-segment buffer of the port's one pool.
    #[cfg(debug_assertions)]
    fn check_fast_free(&self, batch: &MbufBatch) {
        if self._owner.fast_free.is_none() {
            return;
        }
        let pool = self._owner.pool.as_ptr();
        for &mbuf in &batch.ptrs[..batch.len] {
            // SAFETY: the batch owns these mbufs; the check only reads their headers.
            let ok = unsafe { dpdk_sys::shim_rte_mbuf_fast_free_ok(mbuf, pool) };
            debug_assert!(
                ok != 0,
                "an mbuf unfit for MBUF_FAST_FREE reached a TX queue"
            );
        }
    }
}

/// Statistics and link state of a started port, for another thread (metrics). Cloneable; it
/// keeps the port open while it lives, like a queue.
#[derive(Clone)]
pub struct PortMonitor {
    inner: Arc<PortInner>,
}

impl PortMonitor {
    pub fn id(&self) -> PortId {
        self.inner.id
    }

    pub fn stats(&self) -> Result<PortStats> {
        stats(self.inner.id)
    }

    /// The names of the port's extended statistics (at most [`MAX_XSTATS`]), in the order
    /// [`PortMonitor::xstats`] reads their values. Fixed once the port is started.
    pub fn xstat_names(&self) -> Result<Vec<String>> {
        // SAFETY: a NULL array with size 0 asks only for the count.
        let count =
            unsafe { dpdk_sys::rte_eth_xstats_get_names(self.inner.id.0, std::ptr::null_mut(), 0) };
        check("rte_eth_xstats_get_names", count)?;
        let mut names =
            vec![dpdk_sys::rte_eth_xstat_name::default(); (count as usize).min(MAX_XSTATS)];
        // SAFETY: the array holds names.len() entries, which the call fills at most.
        let filled = unsafe {
            dpdk_sys::rte_eth_xstats_get_names(
                self.inner.id.0,
                names.as_mut_ptr(),
                names.len() as u32,
            )
        };
        check("rte_eth_xstats_get_names", filled)?;
        names.truncate((filled as usize).min(names.len()));
        Ok(names.iter().map(|name| c_text(&name.name)).collect())
    }

    /// The extended statistics' values into `values`, one per name of
    /// [`PortMonitor::xstat_names`] (`values` is resized to that count).
    pub fn xstats(&self, values: &mut Vec<u64>, count: usize) -> Result<()> {
        let mut raw = vec![dpdk_sys::rte_eth_xstat::default(); count.min(MAX_XSTATS)];
        // SAFETY: the array holds raw.len() entries, which the call fills at most.
        let filled = unsafe {
            dpdk_sys::rte_eth_xstats_get(self.inner.id.0, raw.as_mut_ptr(), raw.len() as u32)
        };
        check("rte_eth_xstats_get", filled)?;
        values.clear();
        values.resize(raw.len(), 0);
        for stat in raw.iter().take(filled as usize) {
            if let Some(value) = values.get_mut(stat.id as usize) {
                *value = stat.value;
            }
        }
        Ok(())
    }

    /// The port's driver, firmware version and device name.
    pub fn info(&self) -> PortInfo {
        let id = self.inner.id.0;
        let driver =
            device_info(self.inner.id).map_or_else(|_| String::new(), |info| driver_name(&info));
        let mut firmware = [0 as std::ffi::c_char; 128];
        // SAFETY: the buffer's length is passed; the driver writes a NUL-terminated string
        // into it, or returns non-zero (no firmware to tell, or a longer one).
        let fw = unsafe {
            dpdk_sys::rte_eth_dev_fw_version_get(id, firmware.as_mut_ptr(), firmware.len())
        };
        let mut device = [0 as std::ffi::c_char; dpdk_sys::RTE_ETH_NAME_MAX_LEN as usize];
        // SAFETY: the buffer is RTE_ETH_NAME_MAX_LEN long, as the call requires.
        let named = unsafe { dpdk_sys::rte_eth_dev_get_name_by_port(id, device.as_mut_ptr()) };
        PortInfo {
            driver,
            firmware: if fw == 0 {
                c_text(&firmware)
            } else {
                String::new()
            },
            device: if named == 0 {
                c_text(&device)
            } else {
                String::new()
            },
        }
    }

    /// Link up, and speed in Mbit/s.
    pub fn link(&self) -> (bool, u32) {
        link_status(self.inner.id)
    }
}

/// A port's link: up, and its speed in Mbit/s (down and 0 when the driver cannot say). For
/// the ports the gateway started and for a bond's members, which the bonding PMD started.
pub fn link_status(id: PortId) -> (bool, u32) {
    let mut link = dpdk_sys::rte_eth_link::default();
    // SAFETY: a valid out-pointer; an unknown port returns an error; nowait never blocks.
    let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(id.0, &mut link) };
    if ret < 0 {
        return (false, 0);
    }
    (link.link_status() != 0, link.link_speed)
}

fn stats(id: PortId) -> Result<PortStats> {
    let mut raw = dpdk_sys::rte_eth_stats::default();
    // SAFETY: valid port and out-pointer.
    check("rte_eth_stats_get", unsafe {
        dpdk_sys::rte_eth_stats_get(id.0, &mut raw)
    })?;
    Ok(PortStats {
        rx_packets: raw.ipackets,
        tx_packets: raw.opackets,
        rx_bytes: raw.ibytes,
        tx_bytes: raw.obytes,
        rx_missed: raw.imissed,
        rx_errors: raw.ierrors,
        tx_errors: raw.oerrors,
        rx_nombuf: raw.rx_nombuf,
        rx_queue_packets: raw.q_ipackets,
        tx_queue_packets: raw.q_opackets,
        rx_queue_drops: raw.q_errors,
    })
}

/// The RX queues' config: the driver's defaults (thresholds, offloads it needs) with
/// drop-enable on. On ixgbe without it, a queue out of descriptors holds its packets in the
/// port's shared RX buffer, which fills and stops every queue of the port: one slow worker
/// would stall the others. With it, that queue alone drops, counted in `q_errors`.
fn rx_queue_conf(info: &dpdk_sys::rte_eth_dev_info) -> dpdk_sys::rte_eth_rxconf {
    let mut rxconf = info.default_rxconf;
    rxconf.rx_drop_en = 1;
    rxconf
}

/// A C string from a fixed buffer, up to its NUL or its end.
fn c_text(buffer: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn device_info(id: PortId) -> Result<dpdk_sys::rte_eth_dev_info> {
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    // SAFETY: valid out-pointer; an unknown port returns -ENODEV.
    check("rte_eth_dev_info_get", unsafe {
        dpdk_sys::rte_eth_dev_info_get(id.0, &mut info)
    })?;
    Ok(info)
}

fn driver_name(info: &dpdk_sys::rte_eth_dev_info) -> String {
    if info.driver_name.is_null() {
        return "unknown driver".into();
    }
    // SAFETY: driver_name points at the driver's static NUL-terminated name.
    unsafe { std::ffi::CStr::from_ptr(info.driver_name) }
        .to_string_lossy()
        .into_owned()
}

fn check_descriptors(
    what: &str,
    asked: u16,
    lim: &dpdk_sys::rte_eth_desc_lim,
) -> std::result::Result<(), String> {
    let align = lim.nb_align.max(1);
    if asked < lim.nb_min || asked > lim.nb_max || !asked.is_multiple_of(align) {
        return Err(format!(
            "{asked} {what} asked, the device allows {}..={} in steps of {align}",
            lim.nb_min, lim.nb_max
        ));
    }
    Ok(())
}

const fn libc_enotsup() -> i32 {
    95 // ENOTSUP on Linux
}

#[cfg(test)]
mod tests;

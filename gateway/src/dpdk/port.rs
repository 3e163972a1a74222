use std::ffi::CString;

use super::error::{check, DpdkError, Result};
use super::ids::{PortId, QueueId};
use super::mbuf::{MbufBatch, BURST_SIZE};
use super::mempool::Mempool;
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
    pub promiscuous: bool,
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
            promiscuous: true,
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
    /// Packets the NIC dropped because no RX descriptor was free (the poll loop fell behind).
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// RX failures for want of an mbuf in the pool.
    pub rx_nombuf: u64,
    /// Per-queue packets, for the first RTE_ETHDEV_QUEUE_STAT_CNTRS queues.
    pub rx_queue_packets: [u64; QUEUE_STAT_COUNTERS],
    pub tx_queue_packets: [u64; QUEUE_STAT_COUNTERS],
}

/// `RTE_ETH_DEV_INTR_LSC` from rte_ethdev.h: the device reports link changes by interrupt.
const RTE_ETH_DEV_INTR_LSC: u32 = 1 << 1;

/// How many queues `rte_eth_stats` reports individually.
pub const QUEUE_STAT_COUNTERS: usize = dpdk_sys::RTE_ETHDEV_QUEUE_STAT_CNTRS as usize;

/// The ring ends a net_ring port uses; keep it alive at least as long as the port.
pub struct PortRings {
    _rx: RingConsumer,
    _tx: RingProducer,
}

/// A started port. Stopped and closed on drop.
pub struct Port {
    id: PortId,
    name: String,
    rx_queues: u16,
    tx_queues: u16,
}

impl Port {
    /// Finds the port a device string names. For `net_af_packet0,iface=x` that is
    /// `net_af_packet0`; for a PCI device, its address.
    pub fn find(device: &str) -> Result<PortId> {
        let name = device.split(',').next().unwrap_or(device).trim();
        let cname = CString::new(name).map_err(|_| DpdkError::NoSuchPort(name.into()))?;
        let mut id = 0u16;
        // SAFETY: valid C string and out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret < 0 {
            return Err(DpdkError::NoSuchPort(name.into()));
        }
        Ok(PortId(id))
    }

    /// Probes a device after EAL start (hotplug), e.g. a vdev string, and returns its port.
    pub fn probe(device: &str) -> Result<PortId> {
        let cdev = CString::new(device).map_err(|_| DpdkError::NoSuchPort(device.into()))?;
        // SAFETY: valid C string; the EAL is running.
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
        Self::find(device)
    }

    /// A port over rings the caller owns (net_ring): what is enqueued on `rx` arrives as
    /// received packets; what the port transmits lands in `tx`. For benchmarks and tests.
    /// The PMD becomes the consumer of `rx` and the producer of `tx`, so the caller keeps the
    /// other ends only.
    pub fn from_rings(
        name: &str,
        rx: RingConsumer,
        tx: RingProducer,
    ) -> Result<(PortId, PortRings)> {
        let cname = CString::new(name).map_err(|_| DpdkError::NoSuchPort(name.into()))?;
        let rx_rings = [rx.as_raw()];
        let tx_rings = [tx.as_raw()];
        // SAFETY: valid name; the ring arrays outlive the call and the rings outlive the port
        // because the returned ends keep them alive.
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
        Ok((PortId(ret as u16), PortRings { _rx: rx, _tx: tx }))
    }

    /// Configures queues, RSS and MTU, sets up every queue from `pool`, and starts the port.
    pub fn start(id: PortId, name: &str, config: &PortConfig, pool: &Mempool) -> Result<Port> {
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
        if info.tx_offload_capa & dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE != 0 {
            // Safe for us: one pool, and no mbuf is referenced twice.
            conf.txmode.offloads |= dpdk_sys::flags::RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
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
        // SAFETY: valid port.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(id.0) };
        let socket = if socket < 0 {
            dpdk_sys::SOCKET_ID_ANY
        } else {
            socket
        };
        for queue in 0..config.rx_queues {
            // SAFETY: configured port, queue in range, live mempool; NULL conf means defaults.
            check("rte_eth_rx_queue_setup", unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    id.0,
                    queue,
                    rx_desc,
                    socket as u32,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            })?;
        }
        let mut txconf = info.default_txconf;
        txconf.offloads = conf.txmode.offloads;
        for queue in 0..config.tx_queues {
            // SAFETY: configured port, queue in range, valid txconf.
            check("rte_eth_tx_queue_setup", unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(id.0, queue, tx_desc, socket as u32, &txconf)
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
        if config.promiscuous {
            // SAFETY: started port. Failure only matters for PMDs without a MAC filter.
            let ret = unsafe { dpdk_sys::rte_eth_promiscuous_enable(id.0) };
            if ret < 0 {
                tracing::debug!(port = name, "promiscuous mode not supported");
            }
        }
        tracing::info!(
            port = name,
            id = id.0,
            driver = driver_name(&info),
            rx_queues = config.rx_queues,
            tx_queues = config.tx_queues,
            rx_desc,
            tx_desc,
            "port started"
        );
        Ok(Port {
            id,
            name: name.to_string(),
            rx_queues: config.rx_queues,
            tx_queues: config.tx_queues,
        })
    }

    pub fn id(&self) -> PortId {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn rx_queues(&self) -> u16 {
        self.rx_queues
    }

    pub fn tx_queues(&self) -> u16 {
        self.tx_queues
    }

    pub fn mac_address(&self) -> Result<[u8; 6]> {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: valid port and out-pointer.
        check("rte_eth_macaddr_get", unsafe {
            dpdk_sys::rte_eth_macaddr_get(self.id.0, &mut addr)
        })?;
        Ok(addr.addr_bytes)
    }

    pub fn stats(&self) -> Result<PortStats> {
        stats(self.id)
    }

    pub fn handle(&self) -> PortHandle {
        PortHandle { id: self.id }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: we own the started port; workers using it have been joined by now.
        unsafe {
            dpdk_sys::rte_eth_dev_stop(self.id.0);
            dpdk_sys::rte_eth_dev_close(self.id.0);
        }
        tracing::debug!(port = self.name, "port stopped and closed");
    }
}

/// What a worker holds to do I/O on a port: copyable, no ownership of the port itself.
/// Each worker uses only its own queue numbers, which is what makes bursts lock-free.
#[derive(Clone, Copy, Debug)]
pub struct PortHandle {
    id: PortId,
}

impl PortHandle {
    pub fn id(&self) -> PortId {
        self.id
    }

    /// Receives into the free part of `batch`; returns how many arrived.
    #[inline]
    pub fn rx_burst(&self, queue: QueueId, batch: &mut MbufBatch) -> usize {
        let room = BURST_SIZE - batch.len;
        // SAFETY: the port is started; the caller is the only poller of this queue; the
        // driver writes `got` owned mbuf pointers into the batch's free slots.
        let got = unsafe {
            dpdk_sys::shim_rte_eth_rx_burst(
                self.id.0,
                queue.0,
                batch.ptrs[batch.len..].as_mut_ptr(),
                room as u16,
            )
        } as usize;
        batch.len += got;
        got
    }

    /// Sends the batch. What the driver accepted now belongs to it and is never touched
    /// again; what it refused is freed here. Returns (sent, dropped); the batch ends empty.
    #[inline]
    pub fn tx_burst(&self, queue: QueueId, batch: &mut MbufBatch) -> (usize, usize) {
        if batch.is_empty() {
            return (0, 0);
        }
        // SAFETY: the port is started; the caller is the only user of this TX queue; the
        // driver takes ownership of the first `sent` mbufs.
        let sent = unsafe {
            dpdk_sys::shim_rte_eth_tx_burst(
                self.id.0,
                queue.0,
                batch.ptrs.as_mut_ptr(),
                batch.len as u16,
            )
        } as usize;
        batch.consume_front(sent);
        let dropped = batch.free_all();
        (sent, dropped)
    }

    pub fn stats(&self) -> Result<PortStats> {
        stats(self.id)
    }

    /// A burst of nothing. Bonding in 802.3ad mode sends its pending LACPDUs from inside
    /// tx_burst, so a quiet link still needs calls.
    #[inline]
    pub fn tx_burst_idle(&self, queue: QueueId) {
        let mut none: [*mut dpdk_sys::rte_mbuf; 0] = [];
        // SAFETY: started port, this worker's queue, zero packets handed over.
        unsafe { dpdk_sys::shim_rte_eth_tx_burst(self.id.0, queue.0, none.as_mut_ptr(), 0) };
    }

    /// Link up, and speed in Mbit/s.
    pub fn link(&self) -> (bool, u32) {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: valid port and out-pointer; nowait never blocks.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.id.0, &mut link) };
        if ret < 0 {
            return (false, 0);
        }
        (link.link_status() != 0, link.link_speed)
    }
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
    })
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

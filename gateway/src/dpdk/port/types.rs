//! What a port is started with, what it counts, and what it is.

use super::*;

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

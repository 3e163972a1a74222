//! `[eal]`, `[mempool]` and `[workers]`: what DPDK is given.

use super::*;

#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Default, Copy)]
#[serde(rename_all = "lowercase")]
pub enum HugepageMode {
    /// Use hugepages when mounted and reserved; otherwise run without, with a notice.
    #[default]
    Auto,
    /// Refuse to start without hugepages (production).
    Required,
    /// Never use hugepages (`--no-huge`): tests and labs.
    Off,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EalConfig {
    /// The main lcore, which runs the control thread; never a worker.
    pub main_lcore: u32,
    pub hugepages: HugepageMode,
    /// MiB of memory for DPDK (`-m`), from any NUMA node. Ignored when `socket_memory_mb`
    /// is set, since DPDK refuses `-m` beside `--socket-mem`.
    pub memory_mb: u32,
    /// MiB of hugepage memory per NUMA node, node 0 first (`--socket-mem`): the NIC's node
    /// only, e.g. `[2048, 0]`. Empty: `memory_mb` from wherever the EAL finds it. Without
    /// hugepages (`--no-huge` has no nodes) their sum is taken as `-m`.
    pub socket_memory_mb: Vec<u32>,
    /// Keeps this instance's runtime files apart from other DPDK processes.
    pub file_prefix: String,
    pub log_level: String,
    /// The CPU each lcore runs on, main lcore first, then the workers in order. Empty: lcore
    /// N runs on CPU N. Lets a small lab box run more lcores than it has CPUs.
    pub cpus: Vec<u32>,
    /// Passed to the EAL verbatim, after everything the config generates.
    pub extra_args: Vec<String>,
    /// Lets DPDK's own capture tools (`dpdk-dumpcap`, `dpdk-pdump`) capture any port and
    /// queue, RX and TX, into pcapng (`rte_pdump`). They are secondary processes: the EAL
    /// then runs with its runtime files (`/var/run/dpdk/<file_prefix>`, the hugepage files)
    /// instead of `--in-memory`, and needs hugepages. Nothing is copied while no tool
    /// captures.
    pub pdump: bool,
}

impl EalConfig {
    /// The MiB the EAL takes: the nodes' sum when given per node, else `memory_mb`.
    pub fn total_memory_mb(&self) -> u32 {
        match self.socket_memory_mb.iter().sum() {
            0 => self.memory_mb,
            per_node => per_node,
        }
    }
}

impl Default for EalConfig {
    fn default() -> Self {
        EalConfig {
            main_lcore: 0,
            hugepages: HugepageMode::Auto,
            memory_mb: 512,
            socket_memory_mb: Vec::new(),
            file_prefix: "gateway".into(),
            log_level: "notice".into(),
            cpus: Vec::new(),
            extra_args: Vec::new(),
            pdump: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MempoolConfig {
    /// Packet buffers in the pool. Must cover every RX descriptor of every queue, every TX
    /// descriptor, the rings, and bursts in flight; `2^n - 1` is the most memory-efficient.
    pub mbufs: u32,
    /// Per-lcore cache of buffers (at most 512, and mbufs / 1.5 or less).
    pub cache: u32,
    /// Bytes of packet data per buffer. 2048 carries a 1500-byte MTU; raise it for jumbo frames.
    pub data_room: u16,
}

impl Default for MempoolConfig {
    fn default() -> Self {
        MempoolConfig {
            mbufs: 16383,
            cache: 256,
            data_room: 2048,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WorkersConfig {
    /// One worker per lcore listed; each owns RX/TX queue i on every port.
    pub lcores: Vec<u32>,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig { lcores: vec![1] }
    }
}

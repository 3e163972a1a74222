//! The bench's series: the same established runs at several flow counts (the CSIT-style
//! sweep), and at several worker counts on the one core, with RSS misdirecting packets to
//! workers that do not own their flows (the handoff's cost and share).

use std::sync::Arc;
use std::time::Duration;

use pipeline::DropReason;

use crate::dpdk::{Eal, Mempool};

use super::lab::{Lab, LabKind};
use super::traffic::{features, router_config};
use super::{row_json, Row, IN_FLIGHT};

/// The flow counts of `--sweep`: from a table any L2 holds to FD.io CSIT's NAT44-ED top
/// (16.5M sessions), past any L3.
pub const SWEEP_FLOWS: [u32; 4] = [10_000, 1_000_000, 4_000_000, 16_000_000];

/// One flow count of the sweep: the established flows without and with every feature, on
/// a table of that size (a lab of its own, dropped before the next).
pub(super) struct SweepPoint {
    pub flows: u32,
    pub setup_rate: f64,
    pub established: Row,
    pub features: Row,
    /// The table's capacity, in flows.
    pub capacity: usize,
    /// The process's peak resident memory so far (VmHWM), in MiB: at the largest count, what
    /// that table needs.
    pub peak_rss_mib: Option<u64>,
}

impl SweepPoint {
    pub fn measure(
        eal: &Eal,
        pool: &Arc<Mempool>,
        flows: u32,
        seconds: Duration,
        hz: u64,
    ) -> anyhow::Result<SweepPoint> {
        let mut lab = Lab::new(eal, pool, flows, LabKind::Workers(1))?;
        let setup_cycles = lab.set_up_flows(flows)?;
        let plain = Arc::new(router_config(&lab.traffic, None)?);
        let featured = Arc::new(router_config(&lab.traffic, Some(&features()?))?);
        let established = lab.steady("nat44+spi, established flows", seconds, 0)?;
        lab.publish(&featured);
        let features = lab.steady("+ all features, established", seconds, 0)?;
        lab.publish(&plain);
        let drops = lab.dropped_total();
        anyhow::ensure!(
            drops == 0,
            "the sweep at {flows} flows dropped {drops} packets: {:?}",
            lab.drops_by_reason()
        );
        let capacity = lab.capacity;
        Ok(SweepPoint {
            flows,
            setup_rate: flows as f64 / (setup_cycles as f64 / hz as f64),
            established,
            features,
            capacity,
            peak_rss_mib: peak_rss_mib(),
        })
    }

    pub fn cycles_above_floor(&self, floor: &Row) -> f64 {
        self.established.cycles_per_packet() - floor.cycles_per_packet()
    }

    /// Every feature's Mpps over the plain run's.
    pub fn features_ratio(&self) -> f64 {
        self.established.cycles_per_packet() / self.features.cycles_per_packet()
    }

    pub fn json(&self, floor: &Row, hz: u64) -> String {
        format!(
            "{{\"flows\":{},\"flow_setups_per_second\":{:.0},\"capacity\":{},\"rows\":[{},{}],\"cycles_above_floor\":{:.1},\"feature_cycles_established\":{:.1},\"features_mpps_ratio\":{:.3},\"peak_rss_mib\":{}}}",
            self.flows,
            self.setup_rate,
            self.capacity,
            row_json(&self.established, hz),
            row_json(&self.features, hz),
            self.cycles_above_floor(floor),
            self.features.cycles_per_packet() - self.established.cycles_per_packet(),
            self.features_ratio(),
            self.peak_rss_mib
                .map_or_else(|| "null".to_string(), |mib| mib.to_string()),
        )
    }
}

/// The sweep's table; `headline` (an index into `points`) is marked with a `*`.
pub(super) fn print_sweep(points: &[SweepPoint], floor: &Row, hz: u64, headline: Option<usize>) {
    println!("sweep: NAT44+SPI established flows, 1 worker, without and with every feature (* the headline: the first table the host's L3 cannot hold)");
    println!(
        "{:>9} {:>10} {:>12} {:>12} {:>8} {:>12} {:>8} {:>9} {:>9}",
        "flows",
        "Mflows/s",
        "cycles/pkt",
        "above floor",
        "Mpps",
        "+features",
        "Mpps",
        "features",
        "peak MiB"
    );
    for (index, point) in points.iter().enumerate() {
        let (plain, featured) = (&point.established, &point.features);
        let mark = if Some(index) == headline { "*" } else { " " };
        println!(
            "{mark}{:>8} {:>10.2} {:>12.1} {:>12.1} {:>8.2} {:>12.1} {:>8.2} {:>9.3} {:>9}",
            point.flows,
            point.setup_rate / 1e6,
            plain.cycles_per_packet(),
            point.cycles_above_floor(floor),
            hz as f64 / plain.cycles_per_packet() / 1e6,
            featured.cycles_per_packet(),
            hz as f64 / featured.cycles_per_packet() / 1e6,
            point.features_ratio(),
            point
                .peak_rss_mib
                .map_or_else(|| "-".to_string(), |mib| mib.to_string()),
        );
    }
}

/// The process's peak resident set, from /proc/self/status (None where there is none).
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// One worker count of `--workers`: the established flows through that many worker loops,
/// polled in turn on this one core, each packet arriving on the queue RSS picks for it by a
/// hash that knows nothing of flow ownership, so (n-1)/n of them reach a worker that hands
/// them to the flow's owner through the handoff rings.
pub(super) struct WorkersPoint {
    pub workers: u16,
    pub row: Row,
    /// Packets dropped because an owner's handoff ring was full (`handoff_ring_full`): a
    /// worker takes up to a burst per port from its queues but one burst of handed-off
    /// packets per loop, so at (n-1)/n misdirected the rings can fill.
    pub ring_full: u64,
}

impl WorkersPoint {
    pub fn measure(
        eal: &Eal,
        pool: &Arc<Mempool>,
        workers: u16,
        flows: u32,
        seconds: Duration,
    ) -> anyhow::Result<WorkersPoint> {
        let mut lab = Lab::new(eal, pool, flows, LabKind::Workers(workers))?;
        lab.set_up_flows(flows)?;
        let drops_before = lab.dropped_total();
        let ring_full_before = lab.dropped(DropReason::HandoffRingFull);
        // As many packets in flight as one worker gets, wherever they wait (RX rings,
        // handoff rings): with more, a backlog in the handoff rings would grow until the
        // packet buffers fall out of the cache, and the figure would measure that instead.
        let in_flight = (IN_FLIGHT + IN_FLIGHT / 2) as u32;
        lab.warm_up(in_flight)?;
        let row = lab.steady_with_syns("nat44+spi, established flows", seconds, 0, 0, in_flight)?;
        let ring_full = lab.dropped(DropReason::HandoffRingFull) - ring_full_before;
        let other_drops = lab.dropped_total() - drops_before - ring_full;
        anyhow::ensure!(
            other_drops == 0,
            "{workers} workers dropped {other_drops} packets besides full handoff rings: {:?}",
            lab.drops_by_reason()
        );
        Ok(WorkersPoint {
            workers,
            row,
            ring_full,
        })
    }

    /// Of the packets received, the share handed to another worker.
    pub fn handoff_share(&self) -> f64 {
        self.row.handoffs as f64 / self.row.packets.max(1) as f64
    }

    /// Cycles per packet above one worker's.
    pub fn cycles_over_one(&self, one: &WorkersPoint) -> f64 {
        self.row.cycles_per_packet() - one.row.cycles_per_packet()
    }

    /// What each handed-off packet costs over one worker's path, all told.
    pub fn cycles_per_handoff(&self, one: &WorkersPoint) -> Option<f64> {
        (self.row.handoffs > 0).then(|| self.cycles_over_one(one) / self.handoff_share())
    }

    pub fn json(&self, one: &WorkersPoint, hz: u64) -> String {
        let cpp = self.row.cycles_per_packet();
        format!(
            "{{\"workers\":{},\"packets\":{},\"handed_off\":{},\"handoff_share\":{:.4},\"mpps\":{:.3},\"cycles_per_packet\":{:.1},\"cycles_over_one_worker\":{:.1},\"cycles_per_handoff\":{},\"handoff_ring_full_drops\":{}}}",
            self.workers,
            self.row.packets,
            self.row.handoffs,
            self.handoff_share(),
            hz as f64 / cpp / 1e6,
            cpp,
            self.cycles_over_one(one),
            self.cycles_per_handoff(one)
                .map_or_else(|| "null".to_string(), |c| format!("{c:.1}")),
            self.ring_full,
        )
    }
}

/// 1, 2, 4, ... below `most`, then `most`.
pub(super) fn worker_counts(most: u16) -> Vec<u16> {
    let most = most.max(1);
    let mut counts: Vec<u16> = std::iter::successors(Some(1u16), |&n| n.checked_mul(2))
        .take_while(|&n| n < most)
        .collect();
    counts.push(most);
    counts
}

pub(super) fn print_workers(points: &[WorkersPoint], flows: u32, hz: u64) {
    println!(
        "handoff as RSS misdirects it: NAT44+SPI established, {flows} flows, N worker loops polled in turn on this one core"
    );
    println!(
        "{:>7} {:>12} {:>12} {:>8} {:>11} {:>12} {:>12} {:>10}",
        "workers",
        "packets",
        "cycles/pkt",
        "Mpps",
        "handed off",
        "over 1 wkr",
        "per handoff",
        "ring full"
    );
    let Some(one) = points.first() else {
        return;
    };
    for point in points {
        let cpp = point.row.cycles_per_packet();
        println!(
            "{:>7} {:>12} {:>12.1} {:>8.2} {:>10.1}% {:>+12.1} {:>12} {:>10}",
            point.workers,
            point.row.packets,
            cpp,
            hz as f64 / cpp / 1e6,
            100.0 * point.handoff_share(),
            point.cycles_over_one(one),
            point
                .cycles_per_handoff(one)
                .map_or_else(|| "-".to_string(), |c| format!("{c:.1}")),
            point.ring_full,
        );
    }
}

/// Packets per second a 10 Gbit/s link carries one way: 64-byte frames, and Simple IMIX
/// (7:4:1 of 64, 594 and 1518 bytes), each with its 20 bytes of preamble and gap.
const TEN_GIG_64B_PPS: f64 = 10e9 / ((64.0 + 20.0) * 8.0);
const TEN_GIG_IMIX_PPS: f64 = 10e9 / (((7.0 * 64.0 + 4.0 * 594.0 + 1518.0) / 12.0 + 20.0) * 8.0);

/// The scaling law, from one core's measurements to many: a worker's cycles per packet are
/// one worker's, plus the handed-off share of its packets times what a handed-off packet
/// costs more. Without flow director, RSS hashes both directions by their own addresses and
/// ports, so (n-1)/n of all packets reach a worker that does not own their flow (the bench's
/// `--workers` rows); with the X550's flow director steering the replies to the owner (the
/// rules the gateway installs), only the outbound half is misdirected: (n-1)/2n. Each worker
/// is modelled on a core of its own at this clock. The error goes both ways: a handed-off
/// packet's cost is the one measured with the most loops on one core, so it includes their
/// polling and their working sets sharing one core's caches, which separate cores would not
/// pay; it leaves out the cache lines a handoff moves between cores and memory bandwidth.
pub(super) struct ScalingModel {
    pub one_worker_cycles: f64,
    pub cycles_per_handoff: f64,
    pub hz: f64,
}

impl ScalingModel {
    /// From the `--workers` points: the first (one worker) and the per-handoff cost measured
    /// with the most workers (None without a point that handed packets off).
    pub fn from_points(points: &[WorkersPoint], hz: u64) -> Option<ScalingModel> {
        let one = points.first()?;
        let most = points.last()?;
        Some(ScalingModel {
            one_worker_cycles: one.row.cycles_per_packet(),
            cycles_per_handoff: most.cycles_per_handoff(one)?,
            hz: hz as f64,
        })
    }

    pub fn cycles_per_packet(&self, workers: u32, replies_steered: bool) -> f64 {
        let n = f64::from(workers.max(1));
        let misdirected = (n - 1.0) / n * if replies_steered { 0.5 } else { 1.0 };
        self.one_worker_cycles + misdirected * self.cycles_per_handoff
    }

    /// All the workers' packets per second together.
    pub fn packets_per_second(&self, workers: u32, replies_steered: bool) -> f64 {
        f64::from(workers) * self.hz / self.cycles_per_packet(workers, replies_steered)
    }

    /// The fewest workers (cores) that carry `pps`, up to 1,024.
    pub fn workers_for(&self, pps: f64, replies_steered: bool) -> Option<u32> {
        (1..=1024).find(|&n| self.packets_per_second(n, replies_steered) >= pps)
    }

    /// The loads of issue 47: 2x10G and 4x10G, full duplex, at 64 bytes and at IMIX.
    pub fn loads() -> [(&'static str, f64); 4] {
        [
            ("2x10G full duplex, 64 B", 4.0 * TEN_GIG_64B_PPS),
            ("2x10G full duplex, IMIX", 4.0 * TEN_GIG_IMIX_PPS),
            ("4x10G full duplex, 64 B", 8.0 * TEN_GIG_64B_PPS),
            ("4x10G full duplex, IMIX", 8.0 * TEN_GIG_IMIX_PPS),
        ]
    }

    pub fn print(&self) {
        println!(
            "scaling model: {:.1} cycles/packet for one worker, +{:.1} for a handed-off packet (with the most loops measured), {:.2} GHz a core; modelled, not measured: one worker per core",
            self.one_worker_cycles,
            self.cycles_per_handoff,
            self.hz / 1e9
        );
        println!(
            "{:>8} {:>22} {:>30}",
            "workers", "Mpps, RSS only", "Mpps, replies steered (FDIR)"
        );
        for workers in [1, 2, 4, 8, 16] {
            println!(
                "{workers:>8} {:>22.2} {:>30.2}",
                self.packets_per_second(workers, false) / 1e6,
                self.packets_per_second(workers, true) / 1e6
            );
        }
        println!(
            "{:<26} {:>8} {:>16} {:>24}",
            "load", "Mpps", "workers, RSS", "workers, FDIR replies"
        );
        let count = |n: Option<u32>| n.map_or_else(|| ">1024".to_string(), |n| n.to_string());
        for (name, pps) in Self::loads() {
            println!(
                "{name:<26} {:>8.2} {:>16} {:>24}",
                pps / 1e6,
                count(self.workers_for(pps, false)),
                count(self.workers_for(pps, true))
            );
        }
    }

    pub fn json(&self) -> String {
        let loads: Vec<String> = Self::loads()
            .iter()
            .map(|(name, pps)| {
                let count = |n: Option<u32>| n.map_or_else(|| "null".to_string(), |n| n.to_string());
                format!(
                    "{{\"load\":\"{name}\",\"mpps\":{:.2},\"workers_rss\":{},\"workers_fdir_replies\":{}}}",
                    pps / 1e6,
                    count(self.workers_for(*pps, false)),
                    count(self.workers_for(*pps, true))
                )
            })
            .collect();
        format!(
            "{{\"one_worker_cycles_per_packet\":{:.1},\"cycles_per_handoff\":{:.1},\"loads\":[{}]}}",
            self.one_worker_cycles,
            self.cycles_per_handoff,
            loads.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_adds_the_misdirected_share_of_the_handoff_cost() {
        let model = ScalingModel {
            one_worker_cycles: 400.0,
            cycles_per_handoff: 400.0,
            hz: 2.0e9,
        };
        assert_eq!(model.cycles_per_packet(1, false), 400.0);
        // Two workers: half the packets misdirected by RSS, a quarter with the replies steered.
        assert_eq!(model.cycles_per_packet(2, false), 600.0);
        assert_eq!(model.cycles_per_packet(2, true), 500.0);
        // 5 Mpps a worker alone; two carry 2 x 2e9 / 600.
        assert_eq!(model.packets_per_second(1, false), 5e6);
        assert!((model.packets_per_second(2, false) - 2.0 * 2e9 / 600.0).abs() < 1.0);
        // 59.52 Mpps (2x10G full duplex at 64 B): n x 2e9 / (400 + 400 (n-1)/n) >= 59.52e6.
        let needed = model.workers_for(4.0 * TEN_GIG_64B_PPS, false).unwrap();
        assert!(model.packets_per_second(needed, false) >= 4.0 * TEN_GIG_64B_PPS);
        assert!(model.packets_per_second(needed - 1, false) < 4.0 * TEN_GIG_64B_PPS);
        assert_eq!(needed, 24);
        assert!(model.workers_for(4.0 * TEN_GIG_64B_PPS, true).unwrap() < needed);
    }

    #[test]
    fn line_rates_are_the_textbook_ones() {
        assert!((TEN_GIG_64B_PPS - 14_880_952.0).abs() < 1.0);
        // Simple IMIX: 361.8 bytes a frame on average, 3.27 Mpps at 10G.
        assert!((TEN_GIG_IMIX_PPS / 1e6 - 3.274).abs() < 0.001);
    }

    #[test]
    fn worker_counts_double_up_to_the_most() {
        assert_eq!(worker_counts(1), vec![1]);
        assert_eq!(worker_counts(4), vec![1, 2, 4]);
        assert_eq!(worker_counts(6), vec![1, 2, 4, 6]);
        assert_eq!(worker_counts(0), vec![1]);
    }
}

//! What capturing costs a worker while a capture is armed: `gateway ctl capture --drops` (the
//! workers' own drop capture) and `dpdk-dumpcap` (DPDK's `rte_pdump`, whose callback copies
//! each captured packet on the worker that receives or sends it).

use std::sync::atomic::Ordering;
use std::time::Duration;

use pipeline::verdict::ReasonSet;
use pipeline::DropReason;

use super::lab::Lab;
use super::Row;
use crate::dpdk::{self, Eal, MbufBatch, MbufRing, Mempool, SocketId, BURST_SIZE};

/// The established row again with every worker's drop capture armed (`gateway ctl capture
/// --drops firewall_drop`), for a reason none of the bench's packets is dropped for: what a
/// worker pays per packet while a drop capture waits, the copy of each frame as it arrived
/// (which a drop must be captured from, since the pipeline rewrites it). A captured drop
/// adds its record's copy and send, once per captured packet.
pub(super) fn drop_capture_armed(lab: &mut Lab, seconds: Duration) -> anyhow::Result<Row> {
    let mut reasons = ReasonSet::default();
    reasons.insert(DropReason::FirewallDrop);
    let (captured, done) = lab.arm_drop_capture(reasons)?;
    let row = lab.steady("nat44+spi, drop capture armed", seconds, 0);
    let armed = lab
        .workers()
        .iter()
        .all(|worker| worker.drop_capture_armed());
    done.store(true, Ordering::Relaxed);
    let row = row?;
    anyhow::ensure!(armed, "a bench worker's drop capture was not armed");
    anyhow::ensure!(
        captured.is_empty(),
        "the armed drop capture caught {} of the bench's packets",
        captured.len()
    );
    Ok(row)
}

/// What `rte_pdump`'s callback does on the worker for each packet `dpdk-dumpcap` captures:
/// a pcapng copy of the packet into the capture's pool (`rte_pcapng_copy`) and the enqueue
/// of the copies onto the capture's ring, a burst at a time, timed on the bench's frames.
/// Not timed: the callback's dispatch and a BPF filter (`-f`), and the dequeue and free,
/// which are the capturing process's. Nothing is installed on a port: the bench has no
/// secondary process to ask for a capture, so it times DPDK's copy directly.
pub(super) struct PdumpCopy {
    packets: u64,
    cycles: u64,
}

impl PdumpCopy {
    const ROUNDS: u64 = 20_000;
    /// What `dpdk-dumpcap` asks by default: whole frames.
    const SNAPLEN: u32 = u32::MAX;

    pub(super) fn measure(eal: &Eal, lab: &mut Lab) -> anyhow::Result<PdumpCopy> {
        // The capture's pool and ring, as dpdk-dumpcap makes them for the callback (smaller:
        // each round's copies are taken off and freed before the next).
        let capture_pool = Mempool::new(eal, "bench_capture", 1023, 0, 2048, SocketId::ANY)?;
        let (mut to_capture, mut capture) =
            MbufRing::create(eal, "bench_capture", BURST_SIZE as u32, SocketId::ANY)?;
        let mut burst = MbufBatch::new();
        for _ in 0..BURST_SIZE {
            let mut mbuf = lab.alloc()?;
            let len = lab.traffic.next_outbound(mbuf.room_mut(), 0);
            mbuf.set_len(len)?;
            if burst.push(mbuf).is_err() {
                anyhow::bail!("a burst holds {BURST_SIZE} packets");
            }
        }
        let (mut copies, mut taken) = (MbufBatch::new(), MbufBatch::new());
        let (mut packets, mut cycles) = (0, 0);
        for _ in 0..Self::ROUNDS {
            let start = dpdk::rdtsc();
            // As the callback does: one timestamp for the burst.
            let received_at = (true, dpdk::rdtsc());
            for mbuf in burst.iter_mut() {
                let copy =
                    dpdk::pcapng_copy(mbuf, &capture_pool, (0, 0), received_at, Self::SNAPLEN)
                        .ok_or_else(|| anyhow::anyhow!("the capture pool ran out"))?;
                // Not reached: the batch holds a burst, and takes one.
                let _ = copies.push(copy);
            }
            let enqueued = to_capture.enqueue(&mut copies);
            cycles += dpdk::rdtsc() - start;
            packets += enqueued as u64;
            anyhow::ensure!(
                enqueued == BURST_SIZE,
                "the capture ring took {enqueued} of {BURST_SIZE} copies"
            );
            capture.dequeue(&mut taken);
            taken.free_all();
        }
        Ok(PdumpCopy { packets, cycles })
    }

    fn cycles_per_packet(&self) -> f64 {
        self.cycles as f64 / self.packets.max(1) as f64
    }

    pub(super) fn summary(&self) -> String {
        format!(
            "dpdk-dumpcap capturing (rte_pdump's copy of each captured packet): {:.1} cycles/packet on the worker (rte_pcapng_copy and the ring enqueue, bursts of {BURST_SIZE}; the callback's dispatch and a -f filter not included)",
            self.cycles_per_packet()
        )
    }

    pub(super) fn json(&self) -> String {
        format!(
            "\"pdump_copy\":{{\"packets\":{},\"cycles_per_packet\":{:.1}}}",
            self.packets,
            self.cycles_per_packet()
        )
    }
}

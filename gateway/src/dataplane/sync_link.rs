//! A worker's end of session sync (`crate::control::session_sync`): it walks its flow table a
//! chunk of slots at a time, paced so that one sweep takes the refresh period, and hands
//! each live flow to the sync thread; and it installs the flows the peer sent that it owns.
//! Both queues are bounded and allocated at start: a full one loses the flow (counted) and
//! never blocks the worker, and the next sweep sends the flow again.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arrayvec::ArrayVec;
use crossbeam_queue::ArrayQueue;
use pipeline::pipeline::operator::snapshot::{SavedFlow, Skip};
use pipeline::Pipeline;

/// Flows each direction's queue holds: a few hundred milliseconds of the sync thread's
/// work, 3.5 MB per queue.
pub const QUEUE_FLOWS: usize = 16_384;
/// Slots walked at a time: one chunk is due every refresh period / (slots / CHUNK).
const CHUNK_SLOTS: usize = 64;
/// The peer's flows installed per loop at most, so a burst of them delays packets little.
const INSTALLS_PER_LOOP: usize = 32;
/// Slots renewed per loop after a takeover (some 90 KB of the table read): a 2M-slot table
/// (a million flows) in 4,096 loops, which a worker runs through in milliseconds.
const RENEW_SLOTS: usize = 512;
/// How long before a takeover the peer's last refresh of a copy may have been, beyond one
/// refresh period, for the copy to be renewed: keepalived's detection of a dead master
/// (three adverts and the skew, about 3.6 s at its default of one a second) and margin.
const TAKEOVER_DETECTION_NS: u64 = 5_000_000_000;

/// What a worker did for the sync, for metrics.
#[derive(Debug, Default)]
pub struct SyncWorkerStats {
    /// Flows handed to the sync thread.
    pub exported: AtomicU64,
    /// Flows lost because the queue to the sync thread was full.
    pub export_lost: AtomicU64,
    /// Whole sweeps of the table done.
    pub sweeps: AtomicU64,
    /// The peer's flows installed (a refresh counts again).
    pub installed: AtomicU64,
    /// The peer's flows not installed, indexed like [`Skip::ALL`].
    pub skipped: [AtomicU64; Skip::COUNT],
}

/// What a worker and the sync thread share.
pub struct SyncQueues {
    /// This worker's flows, for the peer.
    pub outbound: ArrayQueue<SavedFlow>,
    /// The peer's flows that this worker owns, to install.
    pub inbound: ArrayQueue<SavedFlow>,
    pub stats: SyncWorkerStats,
    /// How many times this box took the pair's virtual addresses over (the control thread
    /// counts, `crate::control::plane::ControlPlane::follow_virtual_addresses`): each time,
    /// the worker renews its copies, whose leases the dead peer will not refresh.
    pub takeovers: AtomicU32,
}

/// The worker's end.
pub struct SyncLink {
    queues: Arc<SyncQueues>,
    refresh_ns: u64,
    lease_ns: u64,
    /// The next slot to walk; 0 again after the last.
    cursor: usize,
    /// When the next chunk is due.
    next_due_ns: u64,
    /// When the current sweep began.
    sweep_start_ns: u64,
    /// Whether the first sweep has begun (the worker's clock is read at its first poll).
    started: bool,
    /// The takeovers whose renewal of the copies is done.
    renewed_takeovers: u32,
    /// The next slot to renew, while a renewal runs.
    renew_cursor: usize,
}

impl SyncLink {
    /// The shared queues (for the sync thread) and the worker's end.
    pub fn pair(refresh_ns: u64, lease_ns: u64) -> (Arc<SyncQueues>, SyncLink) {
        let queues = Arc::new(SyncQueues {
            outbound: ArrayQueue::new(QUEUE_FLOWS),
            inbound: ArrayQueue::new(QUEUE_FLOWS),
            stats: SyncWorkerStats::default(),
            takeovers: AtomicU32::new(0),
        });
        let link = SyncLink {
            queues: queues.clone(),
            refresh_ns: refresh_ns.max(1),
            lease_ns,
            cursor: 0,
            next_due_ns: 0,
            sweep_start_ns: 0,
            started: false,
            renewed_takeovers: 0,
            renew_cursor: 0,
        };
        (queues, link)
    }

    /// Once per loop: a chunk of the sweep when one is due, and a few of the peer's flows.
    #[inline]
    pub fn poll(&mut self, pipeline: &mut Pipeline, now_ns: u64) {
        if now_ns >= self.next_due_ns {
            self.export_chunk(pipeline, now_ns);
        }
        if !self.queues.inbound.is_empty() {
            self.install(pipeline, now_ns);
        }
        let takeovers = self.queues.takeovers.load(Ordering::Relaxed);
        if takeovers != self.renewed_takeovers {
            self.renew(pipeline, now_ns, takeovers);
        }
    }

    #[cold]
    fn renew(&mut self, pipeline: &mut Pipeline, now_ns: u64, takeovers: u32) {
        // A copy the peer refreshed within a refresh period and the detection before now has
        // at least this much of its lease left.
        let min_left_ns = self
            .lease_ns
            .saturating_sub(self.refresh_ns + TAKEOVER_DETECTION_NS);
        self.renew_cursor =
            pipeline.renew_synced_copies(self.renew_cursor, RENEW_SLOTS, now_ns, min_left_ns);
        if self.renew_cursor == 0 {
            self.renewed_takeovers = takeovers;
        }
    }

    #[cold]
    fn export_chunk(&mut self, pipeline: &Pipeline, now_ns: u64) {
        if !self.started {
            // The first sweep is paced from now, like the rest.
            self.started = true;
            self.sweep_start_ns = now_ns;
            self.next_due_ns = now_ns;
        }
        let stats = &self.queues.stats;
        let mut exported = 0;
        let mut lost = 0;
        let next =
            pipeline.export_flow_slots(self.cursor, CHUNK_SLOTS, now_ns, |flow| {
                match self.queues.outbound.push(flow) {
                    Ok(()) => exported += 1,
                    Err(_) => lost += 1,
                }
            });
        stats.exported.fetch_add(exported, Ordering::Relaxed);
        if lost > 0 {
            stats.export_lost.fetch_add(lost, Ordering::Relaxed);
        }
        self.cursor = next;
        if next == 0 {
            // The sweep is done: the next begins a period after this one began (at once if
            // this one took longer).
            stats.sweeps.fetch_add(1, Ordering::Relaxed);
            self.sweep_start_ns = (self.sweep_start_ns + self.refresh_ns).max(now_ns);
            self.next_due_ns = self.sweep_start_ns;
        } else {
            let chunks = pipeline.flow_slots().div_ceil(CHUNK_SLOTS).max(1) as u64;
            // Behind (a busy loop): the next chunk is due at once, and the sweep catches up
            // a chunk a loop.
            self.next_due_ns += self.refresh_ns / chunks;
        }
    }

    #[cold]
    fn install(&mut self, pipeline: &mut Pipeline, now_ns: u64) {
        let mut flows = ArrayVec::<SavedFlow, INSTALLS_PER_LOOP>::new();
        while !flows.is_full() {
            let Some(flow) = self.queues.inbound.pop() else {
                break;
            };
            flows.push(flow);
        }
        let report = pipeline.install_synced(&flows, now_ns, self.lease_ns);
        let stats = &self.queues.stats;
        stats
            .installed
            .fetch_add(report.restored, Ordering::Relaxed);
        for (reason, counter) in Skip::ALL.iter().zip(&stats.skipped) {
            let skipped = report.skipped(*reason);
            if skipped > 0 {
                counter.fetch_add(skipped, Ordering::Relaxed);
            }
        }
    }
}

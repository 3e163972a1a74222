//! Session sync's thread (issue 49): it sends the peer of an HA pair the flows this box's
//! workers hand it (`crate::dataplane::sync_link`), sealed in messages of up to
//! [`FLOWS_PER_MESSAGE`] flows, one UDP datagram each, and opens the peer's: each accepted
//! flow goes to the worker that owns it here, which installs it. A thread of its own on the
//! host's namespace, not the control thread: a slow or absent peer never delays ARP, the
//! twins or a reload, and the workers only ever meet its bounded queues.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use pipeline::pipeline::operator::session_sync::{
    Refusal, SyncReceiver, SyncSender, FLOWS_PER_MESSAGE, MAX_MESSAGE,
};
use pipeline::pipeline::operator::snapshot::{self, SavedFlow};
use pipeline::RouterConfig;

use crate::config::SessionSyncConfig;
use crate::dataplane::published::Published;
use crate::dataplane::sync_link::SyncQueues;

/// How long the thread waits for the peer's next datagram before it looks at the workers'
/// queues again: the most a flow waits in them once handed out.
const WAIT: Duration = Duration::from_millis(10);
/// Datagrams taken per round at most, so that a flood of them delays the sending (and a
/// stop) by no more than this many.
const RECEIVED_PER_ROUND: usize = 256;
/// And no longer than this: a peer sending slowly must not keep the round waiting on it.
const ROUND: Duration = Duration::from_millis(20);
/// The file in `state.directory` that keeps the last epoch this box sent with.
const EPOCH_FILE: &str = "ha-sync.epoch";

/// What the sync link did, for metrics.
#[derive(Debug, Default)]
pub struct SessionSyncStats {
    pub messages_sent: AtomicU64,
    /// Messages the peer's key signed, fresh and well-formed.
    pub messages_received: AtomicU64,
    pub flows_sent: AtomicU64,
    pub flows_received: AtomicU64,
    /// The peer's flows lost because their worker's queue was full.
    pub install_lost: AtomicU64,
    /// Datagrams the socket would not send (the peer unreachable, say).
    pub send_errors: AtomicU64,
    /// Messages refused, indexed like [`Refusal::ALL`].
    pub refused: [AtomicU64; Refusal::COUNT],
    /// Datagrams from another address than the peer's, not read.
    pub strangers: AtomicU64,
    /// When the last accepted message came, in Unix milliseconds; 0 before the first.
    pub last_received_unix_ms: AtomicU64,
}

/// The running thread; stops and is joined when dropped.
pub struct SessionSyncThread {
    pub stats: Arc<SessionSyncStats>,
    /// Each worker's queues, for their counters.
    pub workers: Vec<Arc<SyncQueues>>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SessionSyncThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// Now, in Unix milliseconds: the clock of `last_received_unix_ms` and of the epochs.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// The epoch to send with: this run's start in Unix milliseconds, but always above the last
/// run's (kept in `state_dir`), so that a clock stepped back at a restart does not make the
/// peer refuse this box's messages as an earlier run's.
fn next_epoch(state_dir: &Path) -> u64 {
    let file = state_dir.join(EPOCH_FILE);
    let last = std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let epoch = unix_ms().max(last.saturating_add(1));
    let kept = std::fs::create_dir_all(state_dir)
        .and_then(|()| std::fs::write(&file, format!("{epoch}\n")));
    if let Err(err) = kept {
        tracing::warn!(
            "session sync: the epoch could not be kept in {}: {err}",
            file.display()
        );
    }
    epoch
}

/// The sync link set up before the workers start: the key read, the socket bound, the
/// epoch chosen. A mistake here stops the start with the field named.
pub struct SessionSyncBound {
    socket: UdpSocket,
    peer: SocketAddr,
    sender: SyncSender,
    receiver: SyncReceiver,
}

/// Reads the key and binds `listen`.
pub fn bind(config: &SessionSyncConfig, state_dir: &Path) -> anyhow::Result<SessionSyncBound> {
    let (own_key, peer_key) = config.read_keys()?;
    let socket = UdpSocket::bind(config.listen)
        .with_context(|| format!("ha.sync.listen: binding {}", config.listen))?;
    socket.set_read_timeout(Some(WAIT))?;
    let epoch = next_epoch(state_dir);
    tracing::info!(
        listen = %config.listen,
        peer = %config.peer,
        refresh_ms = config.refresh_ms,
        lease_ms = config.lease_ms(),
        epoch,
        "session sync with the peer"
    );
    Ok(SessionSyncBound {
        socket,
        peer: config.peer,
        sender: SyncSender::new(own_key, epoch),
        receiver: SyncReceiver::new(peer_key),
    })
}

impl SessionSyncBound {
    /// Starts the thread over the workers' queues; `router` is the config in force, which
    /// decides each received flow's owner.
    pub fn spawn(
        self,
        workers: Vec<Arc<SyncQueues>>,
        router: Arc<Published<RouterConfig>>,
    ) -> anyhow::Result<SessionSyncThread> {
        let link = Link {
            socket: self.socket,
            peer: self.peer,
            sender: self.sender,
            receiver: self.receiver,
            workers: workers.clone(),
            router,
            stats: Arc::new(SessionSyncStats::default()),
        };
        let stats = link.stats.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let running = stop.clone();
        let handle = std::thread::Builder::new()
            .name("session-sync".into())
            .spawn(move || link.run(&running))
            .context("starting the session sync thread")?;
        Ok(SessionSyncThread {
            stats,
            workers,
            stop,
            handle: Some(handle),
        })
    }
}

struct Link {
    socket: UdpSocket,
    peer: SocketAddr,
    sender: SyncSender,
    receiver: SyncReceiver,
    workers: Vec<Arc<SyncQueues>>,
    router: Arc<Published<RouterConfig>>,
    stats: Arc<SessionSyncStats>,
}

impl Link {
    fn run(mut self, stop: &AtomicBool) {
        let mut batch = Vec::with_capacity(FLOWS_PER_MESSAGE);
        let mut datagram = vec![0u8; MAX_MESSAGE + 1];
        while !stop.load(Ordering::Relaxed) {
            for worker in 0..self.workers.len() {
                while let Some(flow) = self.workers[worker].outbound.pop() {
                    batch.push(flow);
                    if batch.len() == FLOWS_PER_MESSAGE {
                        self.send(&mut batch);
                    }
                }
            }
            if !batch.is_empty() {
                self.send(&mut batch);
            }
            // Each receive waits up to WAIT when nothing has come: the round's pause. A round
            // ends after RECEIVED_PER_ROUND datagrams or ROUND, whichever comes first.
            let round_end = Instant::now() + ROUND;
            for _ in 0..RECEIVED_PER_ROUND {
                let Ok((len, from)) = self.socket.recv_from(&mut datagram) else {
                    break;
                };
                if from.ip() == self.peer.ip() {
                    self.receive(&datagram[..len]);
                } else {
                    self.stats.strangers.fetch_add(1, Ordering::Relaxed);
                }
                if stop.load(Ordering::Relaxed) || Instant::now() >= round_end {
                    break;
                }
            }
        }
    }

    fn send(&mut self, batch: &mut Vec<SavedFlow>) {
        let stats = &self.stats;
        match self.sender.seal(batch) {
            Ok(message) => match self.socket.send_to(&message, self.peer) {
                Ok(_) => {
                    stats.messages_sent.fetch_add(1, Ordering::Relaxed);
                    (stats.flows_sent).fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    stats.send_errors.fetch_add(1, Ordering::Relaxed);
                }
            },
            // Unreachable: at most FLOWS_PER_MESSAGE flows of the tables' own making.
            Err(err) => tracing::warn!("session sync: a message was not sealed: {err}"),
        }
        batch.clear();
    }

    fn receive(&mut self, message: &[u8]) {
        let stats = &self.stats;
        let flows = match self.receiver.open(message) {
            Ok(flows) => flows,
            Err(refusal) => {
                for (counter, &reason) in stats.refused.iter().zip(&Refusal::ALL) {
                    counter.store(self.receiver.refused(reason), Ordering::Relaxed);
                }
                tracing::debug!(
                    reason = refusal.label(),
                    "session sync: a message was refused"
                );
                return;
            }
        };
        stats.messages_received.fetch_add(1, Ordering::Relaxed);
        stats
            .last_received_unix_ms
            .store(unix_ms(), Ordering::Relaxed);
        stats
            .flows_received
            .fetch_add(flows.len() as u64, Ordering::Relaxed);
        let (router, _) = self.router.load();
        let count = self.workers.len() as u16;
        for flow in flows {
            // A flow whose two directions no single worker here owns goes to worker 0,
            // which counts it as an ownership skip.
            let owner = snapshot::owner(&router, count, &flow).unwrap_or(0);
            let queue = &self.workers[usize::from(owner).min(self.workers.len() - 1)];
            if queue.inbound.push(flow).is_err() {
                stats.install_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

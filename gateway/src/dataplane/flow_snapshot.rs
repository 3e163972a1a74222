//! Sessions across a restart. At a normal stop (SIGTERM, SIGINT) every worker hands its flows
//! over once it has stopped polling, and they go to one snapshot file in `state.directory`,
//! written atomically (a temporary file, fsync, rename, fsync of the directory). At start the
//! file is read once, before any worker forwards: its flows are sorted by the worker that
//! owns each under the current worker count and put into that worker's tables, if they still
//! fit the config. The file is consumed either way (removed, or renamed to `.refused` when it
//! could not be read), so no snapshot is ever restored twice. What is kept and what is
//! refused is decided in `pipeline::pipeline::operator::snapshot`; this module does the files, the logs and the
//! counts for metrics.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use pipeline::pipeline::operator::snapshot::{
    self, RestoreReport, SavedFlow, Skip, Snapshot, SnapshotError,
};
use pipeline::{Pipeline, RouterConfig};

use crate::config::StateConfig;

/// The snapshot's name in the state directory.
pub const FILE_NAME: &str = "conntrack.snapshot";
/// What an unreadable snapshot is renamed to, for a look afterwards.
const REFUSED_SUFFIX: &str = ".refused";

/// Where the snapshot lives.
pub fn file(state: &StateConfig) -> PathBuf {
    state.directory.join(FILE_NAME)
}

/// What the start-up restore did, for metrics. Written once, before the metrics server starts.
#[derive(Debug, Default)]
pub struct SnapshotStatus {
    /// A snapshot was found and refused whole.
    pub refused: AtomicBool,
    pub restored: AtomicU64,
    /// Indexed like [`Skip::ALL`].
    pub skipped: [AtomicU64; Skip::COUNT],
}

impl SnapshotStatus {
    fn record(&self, report: &RestoreReport) {
        self.restored.store(report.restored, Ordering::Relaxed);
        for (counter, &skipped) in self.skipped.iter().zip(&report.skipped) {
            counter.store(skipped, Ordering::Relaxed);
        }
    }
}

/// The flows of a snapshot on their way into the new workers.
pub struct Restore {
    /// Removed once every worker has its flows: a start that fails before leaves it for the
    /// next one (which takes the longer downtime off every flow).
    path: PathBuf,
    per_worker: Vec<Vec<SavedFlow>>,
    report: RestoreReport,
    /// For the summary line.
    taken_secs_ago: f64,
    writer: String,
    workers_then: u16,
    total: usize,
}

impl Restore {
    /// Reads and consumes the snapshot, if any, and sorts its flows by their owner among
    /// `workers`. None, with one log line saying why, when there is nothing to restore:
    /// snapshots off, no file, or a file that is refused (nothing of it is loaded then).
    pub fn prepare(
        state: &StateConfig,
        router: &RouterConfig,
        workers: u16,
        status: &SnapshotStatus,
    ) -> Option<Restore> {
        if !state.snapshot {
            return None;
        }
        let path = file(state);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                tracing::info!(
                    "no state snapshot at {}: starting with empty flow tables",
                    path.display()
                );
                return None;
            }
            Err(err) => {
                status.refused.store(true, Ordering::Relaxed);
                tracing::error!(
                    "state snapshot {} refused, unreadable ({err}): starting with empty flow tables",
                    path.display()
                );
                consume(&path, false);
                return None;
            }
        };
        let snapshot = match snapshot::decode(&bytes) {
            Ok(snapshot) => snapshot,
            Err(err) => {
                consume(&path, false);
                status.refused.store(true, Ordering::Relaxed);
                tracing::error!(
                    "state snapshot {} refused ({err}): starting with empty flow tables; kept \
                     as {FILE_NAME}{REFUSED_SUFFIX}",
                    path.display()
                );
                return None;
            }
        };
        let Snapshot {
            taken_unix_ms,
            workers: workers_then,
            writer,
            flows,
        } = snapshot;
        // A clock set back since is taken as no time passed.
        let elapsed_ms = unix_ms().saturating_sub(taken_unix_ms);
        let total = flows.len();
        let mut report = RestoreReport::default();
        let per_worker = snapshot::distribute(
            router,
            workers,
            flows,
            elapsed_ms.saturating_mul(1_000_000),
            &mut report,
        );
        Some(Restore {
            path,
            per_worker,
            report,
            taken_secs_ago: elapsed_ms as f64 / 1000.0,
            writer,
            workers_then,
            total,
        })
    }

    /// Puts worker `worker`'s flows into its pipeline, whose clock starts at zero when it
    /// starts polling.
    pub fn apply(&mut self, worker: usize, pipeline: &mut Pipeline) {
        if let Some(flows) = self.per_worker.get_mut(worker) {
            let report = pipeline.restore_flows(flows, 0);
            self.report.add(&report);
            *flows = Vec::new();
        }
    }

    /// Consumes the file, logs the outcome in one line and keeps it for metrics.
    pub fn finish(self, status: &SnapshotStatus) {
        consume(&self.path, true);
        let report = self.report;
        status.record(&report);
        let skipped = Skip::ALL
            .iter()
            .map(|&reason| format!("{} {}", reason.label(), report.skipped(reason)))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::info!(
            restored = report.restored,
            skipped = report.skipped_total(),
            "state snapshot: restored {} of {} flows (taken {:.1} s ago by gateway {} on {} \
             workers); skipped: {skipped}",
            report.restored,
            self.total,
            self.taken_secs_ago,
            self.writer,
            self.workers_then,
        );
    }
}

/// Removes a read snapshot, or keeps a refused one aside under another name, so that the
/// next start does not read it again.
fn consume(path: &Path, accepted: bool) {
    let result = if accepted {
        fs::remove_file(path)
    } else {
        let mut refused = path.as_os_str().to_owned();
        refused.push(REFUSED_SUFFIX);
        fs::rename(path, refused)
    };
    if let Err(err) = result {
        tracing::warn!(
            "could not remove {} after reading it ({err}); the next start may read it again",
            path.display()
        );
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The snapshot file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    #[error(transparent)]
    Encode(#[from] SnapshotError),
    #[error("state.directory {}", .directory.display())]
    Directory {
        directory: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Writes the stopped workers' flows to the snapshot file, atomically: a reader finds the
/// old file, the new one, or none, never half of one. Returns the file written.
pub fn save(
    state: &StateConfig,
    workers: u16,
    flows: Vec<SavedFlow>,
) -> Result<PathBuf, SaveError> {
    let snapshot = Snapshot {
        taken_unix_ms: unix_ms(),
        workers,
        writer: env!("CARGO_PKG_VERSION").to_string(),
        flows,
    };
    let bytes = snapshot::encode(&snapshot)?;
    create_private_dir(&state.directory).map_err(|source| SaveError::Directory {
        directory: state.directory.clone(),
        source,
    })?;
    let path = file(state);
    let temporary = state
        .directory
        .join(format!(".{FILE_NAME}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut out = fs::File::create(&temporary)?;
        out.write_all(&bytes)?;
        out.sync_all()?;
        fs::rename(&temporary, &path)?;
        // The rename itself is durable once the directory is.
        fs::File::open(&state.directory)?.sync_all()
    })();
    if let Err(err) = written {
        let _ = fs::remove_file(&temporary);
        return Err(SaveError::Write { path, source: err });
    }
    Ok(path)
}

/// At a normal stop: the flows every stopped worker sent, saved, with one log line either way.
/// A failure to save is logged, not fatal: the gateway still stops cleanly.
pub fn save_stopped(
    state: &StateConfig,
    workers: u16,
    stopped: crossbeam_channel::Receiver<Vec<SavedFlow>>,
) {
    let flows: Vec<SavedFlow> = stopped.try_iter().flatten().collect();
    let count = flows.len();
    match save(state, workers, flows) {
        Ok(path) => tracing::info!(
            flows = count,
            "state snapshot: {count} flows saved to {} for the next start",
            path.display()
        ),
        Err(err) => {
            tracing::error!(
                "state snapshot not saved, the next start begins empty: {}",
                crate::dpdk::ErrorChain(&err)
            )
        }
    }
}

/// The state directory, created readable by root alone if missing: flows name every host's
/// connections.
fn create_private_dir(directory: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(directory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str) -> StateConfig {
        let directory =
            std::env::temp_dir().join(format!("gw-snapshot-test-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        StateConfig {
            directory,
            snapshot: true,
        }
    }

    fn router() -> RouterConfig {
        RouterConfig::new(Vec::new(), &[], pipeline::IcmpLimits::default()).unwrap()
    }

    #[test]
    fn save_writes_atomically_and_a_start_reads_it_once() {
        let state = state("once");
        let path = save(&state, 2, Vec::new()).unwrap();
        assert_eq!(path, file(&state));
        let names: Vec<_> = fs::read_dir(&state.directory)
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect();
        assert_eq!(names, [FILE_NAME], "no temporary file is left");
        let decoded = snapshot::decode(&fs::read(&path).unwrap()).unwrap();
        assert_eq!((decoded.workers, decoded.flows.len()), (2, 0));

        let status = SnapshotStatus::default();
        let restore = Restore::prepare(&state, &router(), 1, &status).unwrap();
        assert_eq!(restore.total, 0);
        restore.finish(&status);
        assert!(!path.exists(), "a read snapshot is consumed");
        assert!(Restore::prepare(&state, &router(), 1, &status).is_none());
        assert!(!status.refused.load(Ordering::Relaxed));
        fs::remove_dir_all(&state.directory).unwrap();
    }

    #[test]
    fn a_corrupt_snapshot_is_refused_and_put_aside() {
        let state = state("corrupt");
        let path = save(&state, 1, Vec::new()).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let status = SnapshotStatus::default();
        assert!(Restore::prepare(&state, &router(), 1, &status).is_none());
        assert!(status.refused.load(Ordering::Relaxed));
        assert!(!path.exists());
        assert!(state
            .directory
            .join(format!("{FILE_NAME}{REFUSED_SUFFIX}"))
            .exists());
        fs::remove_dir_all(&state.directory).unwrap();
    }

    #[test]
    fn a_start_that_fails_before_finishing_leaves_the_snapshot() {
        let state = state("unfinished");
        let path = save(&state, 1, Vec::new()).unwrap();
        let status = SnapshotStatus::default();
        drop(Restore::prepare(&state, &router(), 1, &status).unwrap());
        assert!(path.exists());
        Restore::prepare(&state, &router(), 1, &status)
            .unwrap()
            .finish(&status);
        assert!(!path.exists());
        fs::remove_dir_all(&state.directory).unwrap();
    }

    #[test]
    fn snapshots_off_reads_nothing() {
        let mut state = state("off");
        save(&state, 1, Vec::new()).unwrap();
        state.snapshot = false;
        let status = SnapshotStatus::default();
        assert!(Restore::prepare(&state, &router(), 1, &status).is_none());
        assert!(file(&state).exists());
        fs::remove_dir_all(&state.directory).unwrap();
    }
}

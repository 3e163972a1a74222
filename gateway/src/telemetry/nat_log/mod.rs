//! The NAT log (`[nat.log]`): every NAT mapping's creation and deletion as an RFC 5424 syslog
//! message, one datagram each, over UDP (RFC 5426) or a Unix socket (`syslog`), and/or as
//! IPFIX records (RFC 7011, RFC 8158's NAT44 BIB events) to a collector (`ipfix`).
//!
//! The workers queue events (`pipeline::state::nat::NatLog`, lock-free, bounded); this thread
//! drains every queue every [`DRAIN_INTERVAL`] and sends what it found, stamped with the
//! time of the drain (so to within that interval). A queue that fills between two drains
//! loses events, and a send that fails loses one; both are counted, and neither ever holds up
//! a worker.

use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{select, Sender};
use pipeline::state::event_log::EventLog;
use pipeline::state::nat::{NatEvent, NatLog};

use crate::config::NatLogConfig;

mod ipfix;
pub(crate) mod syslog;

pub const DRAIN_INTERVAL: Duration = Duration::from_millis(100);

/// What became of a log's events (the NAT log's, the firewall log's), for metrics.
#[derive(Debug)]
pub struct EventLogStats<E> {
    pub sent: AtomicU64,
    pub send_failed: AtomicU64,
    /// Every worker's queue, for the events lost to a full one.
    pub(crate) logs: Vec<Arc<EventLog<E>>>,
}

impl<E> EventLogStats<E> {
    pub fn new(logs: Vec<Arc<EventLog<E>>>) -> Self {
        EventLogStats {
            sent: AtomicU64::new(0),
            send_failed: AtomicU64::new(0),
            logs,
        }
    }

    pub fn lost(&self) -> u64 {
        self.logs.iter().map(|log| log.lost()).sum()
    }

    /// Counts `events` sent, or failed to send, by `result`.
    pub(crate) fn count(&self, result: &std::io::Result<usize>, events: usize) {
        let counter = if result.is_ok() {
            &self.sent
        } else {
            &self.send_failed
        };
        counter.fetch_add(events as u64, Ordering::Relaxed);
    }

    /// Takes every worker's queued events into `batch`, each dated (time since the Unix
    /// epoch) by its age on its worker's clock (`at_ns`).
    pub(crate) fn drain_dated(&self, batch: &mut Vec<(Duration, E)>, at_ns: impl Fn(&E) -> u64) {
        batch.clear();
        for log in &self.logs {
            let first = batch.len();
            log.drain(|event| batch.push((Duration::ZERO, event)));
            date(&mut batch[first..], &at_ns, log.now_ns(), unix_now());
        }
    }
}

pub type NatLogStats = EventLogStats<NatEvent>;

/// A log's running thread (the NAT log's, the firewall log's), which sends what the workers
/// queued every [`DRAIN_INTERVAL`]; dropping it sends once more and stops it.
pub struct LogThread<E> {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<EventLogStats<E>>,
}

impl<E> Drop for LogThread<E> {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl<E: Send + 'static> LogThread<E> {
    /// Starts thread `name`, which calls `send` with the stats (whose queues it drains)
    /// every [`DRAIN_INTERVAL`] and once more when told to stop.
    pub(crate) fn spawn(
        name: &str,
        stats: EventLogStats<E>,
        mut send: impl FnMut(&EventLogStats<E>) + Send + 'static,
    ) -> Result<Self, EventLogError> {
        let stats = Arc::new(stats);
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let thread = {
            let stats = stats.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let ticks = crossbeam_channel::tick(DRAIN_INTERVAL);
                    loop {
                        select! {
                            recv(ticks) -> _ => send(&stats),
                            recv(stopped) -> _ => {
                                send(&stats);
                                return;
                            }
                        }
                    }
                })
                .map_err(|source| EventLogError::Thread {
                    name: name.to_string(),
                    source,
                })?
        };
        Ok(LogThread {
            stop: Some(stop),
            thread: Some(thread),
            stats,
        })
    }
}

/// An event log (the NAT log, the firewall log) that could not start.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("starting the {name} thread")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{field}: binding a socket")]
    Bind {
        field: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{field}: a socket")]
    UnixSocket {
        field: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{field}: opening {} to append", path.display())]
    File {
        field: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The NAT log's thread.
pub type NatLogger = LogThread<NatEvent>;

/// Where a syslog message goes.
pub(crate) enum SyslogTransport {
    Udp(UdpSocket, SocketAddr),
    Unix(UnixDatagram, PathBuf),
}

impl SyslogTransport {
    pub(crate) fn send(&self, message: &[u8]) -> std::io::Result<usize> {
        match self {
            SyslogTransport::Udp(socket, to) => socket.send_to(message, to),
            SyslogTransport::Unix(socket, to) => socket.send_to(message, to),
        }
    }
}

enum Destination {
    Syslog(syslog::Header, SyslogTransport),
    Ipfix(UdpSocket, SocketAddr, ipfix::Exporter),
}

/// A UDP socket to send to `to` from any local address of its family.
pub(crate) fn udp_socket_for(
    to: SocketAddr,
    field: &'static str,
) -> Result<UdpSocket, EventLogError> {
    let local: SocketAddr = if to.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    UdpSocket::bind(local).map_err(|source| EventLogError::Bind { field, source })
}

/// Starts the thread for the workers' queues `logs`, when `config` names a destination.
pub fn spawn(
    config: &NatLogConfig,
    logs: Vec<Arc<NatLog>>,
) -> Result<Option<NatLogger>, EventLogError> {
    let header = || syslog::Header {
        priority: config.facility * 8 + syslog::SEVERITY_INFO,
        hostname: syslog::hostname(),
        pid: std::process::id(),
    };
    let mut destinations = Vec::new();
    if let Some(to) = config.syslog_udp {
        let socket = udp_socket_for(to, "nat.log.syslog_udp")?;
        destinations.push(Destination::Syslog(
            header(),
            SyslogTransport::Udp(socket, to),
        ));
    }
    if let Some(path) = &config.syslog_unix {
        let socket = UnixDatagram::unbound().map_err(|source| EventLogError::UnixSocket {
            field: "nat.log.syslog_unix",
            source,
        })?;
        let transport = SyslogTransport::Unix(socket, path.clone());
        destinations.push(Destination::Syslog(header(), transport));
    }
    if let Some(to) = config.ipfix_udp {
        let socket = udp_socket_for(to, "nat.log.ipfix_udp")?;
        let exporter = ipfix::Exporter::new(config.ipfix_domain);
        destinations.push(Destination::Ipfix(socket, to, exporter));
    }
    if destinations.is_empty() {
        return Ok(None);
    }
    let mut batch = Vec::new();
    let send = move |stats: &NatLogStats| drain(stats, &mut destinations, &mut batch);
    NatLogger::spawn("nat-log", NatLogStats::new(logs), send).map(Some)
}

/// Dates each of `events` (time since the Unix epoch, beside the event): the worker stamped
/// it with its clock (`at_ns`), and that clock read now beside the wall clock says how long
/// ago it was. Read after the drain, so every event drained is at or before it; re-read at
/// every drain, so the TSC's drift from the wall clock never adds up.
fn date<E>(
    events: &mut [(Duration, E)],
    at_ns: impl Fn(&E) -> u64,
    worker_now_ns: u64,
    wall_now: Duration,
) {
    for (unix, event) in events {
        let age = Duration::from_nanos(worker_now_ns.saturating_sub(at_ns(event)));
        *unix = wall_now.saturating_sub(age);
    }
}

pub(crate) fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Sends everything the workers queued since the last drain.
fn drain(
    stats: &NatLogStats,
    destinations: &mut [Destination],
    batch: &mut Vec<(Duration, NatEvent)>,
) {
    stats.drain_dated(batch, |event| event.at_ns);
    if batch.is_empty() {
        return;
    }
    let now = unix_now();
    let count = |result: std::io::Result<usize>, events: usize| stats.count(&result, events);
    let mut message = Vec::with_capacity(1500);
    for destination in destinations {
        match destination {
            Destination::Syslog(header, transport) => {
                for (unix, event) in batch.iter() {
                    message.clear();
                    let timestamp = crate::telemetry::timestamp::rfc3339(*unix);
                    syslog::format_event(&mut message, header, &timestamp, event);
                    count(transport.send(&message), 1);
                }
            }
            Destination::Ipfix(socket, to, exporter) => {
                for events in batch.chunks(ipfix::RECORDS_PER_MESSAGE) {
                    exporter.message(events, now.as_millis() as u64, &mut message);
                    count(socket.send_to(&message, *to), events.len());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::state::nat::NatEventKind;
    use std::net::Ipv4Addr;

    #[test]
    fn events_are_dated_by_their_age_on_the_workers_clock() {
        let event = |at_ns| NatEvent {
            at_ns,
            kind: NatEventKind::Create,
            protocol: 17,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 5300),
            external: (Ipv4Addr::new(10, 0, 0, 1), 5300),
            block: None,
        };
        let mut events = [
            (Duration::ZERO, event(1_000_000_000)),
            (Duration::ZERO, event(1_070_000_000)),
            // Stamped after the clock was read: dated now, never in the future.
            (Duration::ZERO, event(1_200_000_000)),
        ];
        let wall_now = Duration::from_secs(1_796_151_600);
        date(&mut events, |event| event.at_ns, 1_100_000_000, wall_now);
        assert_eq!(events[0].0, wall_now - Duration::from_millis(100));
        assert_eq!(events[1].0, wall_now - Duration::from_millis(30));
        assert_eq!(events[2].0, wall_now);
    }
}

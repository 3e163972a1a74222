//! The NAT log (`[nat.log]`): every NAT mapping's creation and deletion as an RFC 5424 syslog
//! message, one datagram each, over UDP (RFC 5426) or a Unix socket.
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

use anyhow::Context;
use crossbeam_channel::{select, Sender};
use pipeline::state::nat::{NatEvent, NatLog};

use crate::config::NatLogConfig;
use crate::ctl::protocol_name;

pub const DRAIN_INTERVAL: Duration = Duration::from_millis(100);
/// RFC 5424's SD-ID for our parameters: an enterprise number of the documentation range
/// (RFC 5612), as nothing else is registered for this gateway.
const SD_ID: &str = "nat@32473";
/// Severity informational (RFC 5424 6.2.1).
const SEVERITY_INFO: u8 = 6;

/// What became of the events, for metrics.
#[derive(Debug, Default)]
pub struct NatLogStats {
    pub sent: AtomicU64,
    pub send_failed: AtomicU64,
    /// Every worker's queue, for the events lost to a full one.
    logs: Vec<Arc<NatLog>>,
}

impl NatLogStats {
    pub fn lost(&self) -> u64 {
        self.logs.iter().map(|log| log.lost()).sum()
    }
}

/// The running thread; dropping it drains once more and stops it.
pub struct NatLogger {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<NatLogStats>,
}

impl Drop for NatLogger {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

enum Destination {
    Udp(UdpSocket, SocketAddr),
    Unix(UnixDatagram, PathBuf),
}

impl Destination {
    fn send(&self, message: &[u8]) -> std::io::Result<usize> {
        match self {
            Destination::Udp(socket, to) => socket.send_to(message, to),
            Destination::Unix(socket, to) => socket.send_to(message, to),
        }
    }
}

/// Starts the thread for the workers' queues `logs`, when `config` names a destination.
pub fn spawn(config: &NatLogConfig, logs: Vec<Arc<NatLog>>) -> anyhow::Result<Option<NatLogger>> {
    let mut destinations = Vec::new();
    if let Some(to) = config.syslog_udp {
        let local: SocketAddr = if to.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).context("nat.log.syslog_udp: binding a socket")?;
        destinations.push(Destination::Udp(socket, to));
    }
    if let Some(path) = &config.syslog_unix {
        let socket = UnixDatagram::unbound().context("nat.log.syslog_unix: a socket")?;
        destinations.push(Destination::Unix(socket, path.clone()));
    }
    if destinations.is_empty() {
        return Ok(None);
    }
    let stats = Arc::new(NatLogStats {
        logs,
        ..NatLogStats::default()
    });
    let header = Header {
        priority: config.facility * 8 + SEVERITY_INFO,
        hostname: hostname(),
        pid: std::process::id(),
    };
    let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
    let thread = {
        let stats = stats.clone();
        std::thread::Builder::new()
            .name("nat-log".into())
            .spawn(move || {
                let ticks = crossbeam_channel::tick(DRAIN_INTERVAL);
                loop {
                    select! {
                        recv(ticks) -> _ => drain(&stats, &header, &destinations),
                        recv(stopped) -> _ => {
                            drain(&stats, &header, &destinations);
                            return;
                        }
                    }
                }
            })
            .context("starting the NAT log thread")?
    };
    Ok(Some(NatLogger {
        stop: Some(stop),
        thread: Some(thread),
        stats,
    }))
}

struct Header {
    priority: u8,
    hostname: String,
    pid: u32,
}

fn drain(stats: &NatLogStats, header: &Header, destinations: &[Destination]) {
    let timestamp = rfc3339_now();
    let mut message = String::with_capacity(256);
    for log in &stats.logs {
        log.drain(|event| {
            message.clear();
            format_event(&mut message, header, &timestamp, &event);
            for destination in destinations {
                match destination.send(message.as_bytes()) {
                    Ok(_) => stats.sent.fetch_add(1, Ordering::Relaxed),
                    Err(_) => stats.send_failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        });
    }
}

/// `<134>1 2026-12-01T19:40:00.123Z gw gateway 4242 NAT [nat@32473 event="create"
/// protocol="udp" inside="192.168.10.2:5300" outside="10.0.0.1:5300"] NAT mapping create udp
/// 192.168.10.2:5300 -> 10.0.0.1:5300` (one line).
fn format_event(out: &mut String, header: &Header, timestamp: &str, event: &NatEvent) {
    use std::fmt::Write;
    let (kind, protocol) = (event.kind.label(), protocol_name(event.protocol));
    let inside = format!("{}:{}", event.internal.0, event.internal.1);
    let outside = format!("{}:{}", event.external.0, event.external.1);
    let _ = write!(
        out,
        "<{}>1 {timestamp} {} gateway {} NAT [{SD_ID} event=\"{kind}\" protocol=\"{protocol}\" inside=\"{inside}\" outside=\"{outside}\"] NAT mapping {kind} {protocol} {inside} -> {outside}",
        header.priority, header.hostname, header.pid
    );
}

/// The host's name, or "-" (RFC 5424's nil value) when it cannot be read.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or_else(|| "-".into())
}

fn rfc3339_now() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since_epoch)
}

/// UTC with milliseconds, e.g. `2026-12-01T19:40:00.123Z`.
fn rfc3339(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60,
        since_epoch.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::state::nat::NatEventKind;
    use std::net::Ipv4Addr;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day in a century year) 12:34:56.789.
        assert_eq!(
            rfc3339(Duration::from_millis(951_827_696_789)),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(1_796_151_600)),
            "2026-12-01T19:00:00.000Z"
        );
    }

    #[test]
    fn an_event_is_one_rfc5424_message() {
        let header = Header {
            priority: 16 * 8 + SEVERITY_INFO,
            hostname: "gw".into(),
            pid: 42,
        };
        let event = NatEvent {
            kind: NatEventKind::Delete,
            protocol: 17,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 5300),
            external: (Ipv4Addr::new(10, 0, 0, 1), 61000),
        };
        let mut message = String::new();
        format_event(&mut message, &header, "2026-12-01T19:00:00.000Z", &event);
        assert_eq!(
            message,
            "<134>1 2026-12-01T19:00:00.000Z gw gateway 42 NAT [nat@32473 event=\"delete\" protocol=\"udp\" inside=\"192.168.10.2:5300\" outside=\"10.0.0.1:61000\"] NAT mapping delete udp 192.168.10.2:5300 -> 10.0.0.1:61000"
        );
    }
}

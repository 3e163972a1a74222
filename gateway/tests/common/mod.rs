//! What the metrics tests share: the sources of a gateway with no ports or workers' traffic
//! (`sources`); and, for the server's tests under hostile clients, plain HTTP and TLS alike,
//! idle connections, clients that trickle a request's first bytes for ever, and scrapes
//! timed while they do.
// Each test crate uses its own part of this module.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gateway::dataplane::published::Published;
use gateway::reload::status::ReloadStatus;
use gateway::telemetry::bond_watch::BondWatch;
use gateway::telemetry::metrics::{MeterExport, MeterSource, Sources, MAX_CONNECTIONS};
use pipeline::{RouterConfig, WorkerCounters};

/// The metrics' sources of a gateway with no ports, one idle worker and, where given, the
/// router config in force; `metrics.rule_series` at its default.
pub fn sources(router: Option<Arc<Published<RouterConfig>>>) -> Sources {
    Sources {
        interfaces: Vec::new(),
        meter: MeterSource {
            workers: Vec::new(),
            export: Arc::new(Published::new(Arc::new(MeterExport::default()))),
        },
        qos: Vec::new(),
        ports: Default::default(),
        pool: None,
        bonds: Arc::new(BondWatch::default()),
        workers: vec![Arc::new(WorkerCounters::default())],
        control: Arc::new(WorkerCounters::default()),
        reload: Arc::new(ReloadStatus::new()),
        heartbeats: Vec::new(),
        snapshot: Default::default(),
        nat_log: None,
        firewall_log: None,
        pppoe: None,
        router,
        uplinks: None,
        session_sync: None,
        virtual_held: None,
        port_mapping: None,
        rule_series: 1000,
    }
}

pub fn threads_of_this_process() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("a Threads: line")
}

/// Opens `count` connections that never send a byte. The server holds at most
/// MAX_CONNECTIONS of them (and the evicted ones close at once): this process's descriptors
/// are the client ends and not many more.
pub fn open_idle_connections(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let idle: Vec<TcpStream> = (0..count)
        .map(|_| TcpStream::connect(addr).expect("open an idle connection"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let descriptors = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    assert!(
        descriptors < count + MAX_CONNECTIONS + 100,
        "{descriptors} open descriptors: the server holds more than {MAX_CONNECTIONS} connections"
    );
    idle
}

/// How many of `idle` the server has not closed: no end of stream (nor a last answer)
/// within a short read timeout.
pub fn still_open(idle: &[TcpStream]) -> usize {
    idle.iter()
        .filter(|&stream| {
            let mut stream: &TcpStream = stream;
            stream
                .set_read_timeout(Some(Duration::from_millis(20)))
                .expect("read timeout");
            matches!(
                stream.read(&mut [0; 64]),
                Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
            )
        })
        .count()
}

/// Sends `opening` and then one byte of `each` every 100 ms, for ever; when the server
/// closes the connection, opens a new one and starts again. Counts the closes.
pub fn trickle(
    addr: SocketAddr,
    (opening, each): (&[u8], &[u8]),
    stop: Arc<AtomicBool>,
    closed: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let mut sent = stream.write_all(opening);
        while sent.is_ok() && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            sent = stream.write_all(each);
        }
        if sent.is_err() {
            closed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What scraping every `every` until `until` saw.
pub struct Scrapes {
    pub count: usize,
    pub slowest: Duration,
    pub most_threads: usize,
}

pub fn scrape_until(
    until: Instant,
    every: Duration,
    mut scrape: impl FnMut() -> Duration,
) -> Scrapes {
    let mut scrapes = Scrapes {
        count: 0,
        slowest: Duration::ZERO,
        most_threads: 0,
    };
    while Instant::now() < until {
        scrapes.slowest = scrapes.slowest.max(scrape());
        scrapes.most_threads = scrapes.most_threads.max(threads_of_this_process());
        scrapes.count += 1;
        std::thread::sleep(every);
    }
    scrapes
}

//! The metrics server under hostile clients: a thousand idle connections and clients trickling
//! endless headers leave every scrape answered within a second on a fixed number of threads,
//! and a request with a megabyte of headers is refused without harming the next scrape. The
//! real `Metrics` with empty sources: no EAL, no ports.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;
use common::*;

use gateway::telemetry::metrics::{self, Metrics, HEADER_READ_TIMEOUT};

/// A running metrics server; stops it when dropped.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start() -> Server {
        let metrics = Metrics::new(common::sources(None));
        let stop = Arc::new(AtomicBool::new(false));
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (addr, thread) = metrics::serve_on(loopback, metrics, stop.clone()).expect("serve");
        Server {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the metrics thread does not panic");
        }
    }
}

/// One response: status line, headers, body.
struct Answer {
    status_line: String,
    headers: String,
    body: String,
}

/// Sends `GET target` with `Connection: close` and reads the whole response.
fn get(addr: SocketAddr, target: &str) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: gateway\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )
    .expect("send request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Answer {
        status_line: status_line.to_string(),
        headers: headers.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// A scrape, timed; asserts it is a full, good answer.
fn scrape(addr: SocketAddr) -> Duration {
    let start = Instant::now();
    let answer = get(addr, "/metrics");
    let elapsed = start.elapsed();
    assert_eq!(answer.status_line, "HTTP/1.1 200 OK");
    assert!(answer
        .headers
        .contains("content-type: text/plain; version=0.0.4; charset=utf-8"));
    assert!(
        answer.body.contains("gateway_build_info{"),
        "{}",
        answer.body
    );
    assert!(answer
        .body
        .contains("gateway_config_reloads_total{result=\"failure\"} 0"));
    elapsed
}

#[test]
fn idle_connections_and_trickling_clients_leave_scrapes_answered_on_few_threads() {
    let server = Server::start();
    let threads_before = threads_of_this_process();

    let idle = open_idle_connections(server.addr, 1000);

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, closed) = (stop.clone(), closed.clone());
            // The start of a request, then one header byte at a time.
            let request = (&b"GET /metrics HTTP/1.1\r\nX-Trickle: "[..], &b"a"[..]);
            std::thread::spawn(move || trickle(server.addr, request, stop, closed))
        })
        .collect();

    // Scrape for a while longer than the header timeout, so the tricklers have been closed
    // and have come back at least once.
    let until = Instant::now() + HEADER_READ_TIMEOUT * 2 + Duration::from_millis(500);
    let Scrapes {
        count: scrapes,
        slowest,
        most_threads,
    } = scrape_until(until, Duration::from_millis(250), || scrape(server.addr));

    stop.store(true, Ordering::Relaxed);
    for trickler in tricklers {
        trickler.join().expect("trickler");
    }
    eprintln!("{scrapes} scrapes, slowest {slowest:?}, at most {most_threads} threads");
    assert!(scrapes >= 10, "only {scrapes} scrapes");
    assert!(
        slowest < Duration::from_secs(1),
        "the slowest of {scrapes} scrapes took {slowest:?}"
    );
    // The test harness, this test, 4 tricklers and the server (its own thread was already
    // counted before): the server added none for 1,000 connections. Other tests of this file
    // run beside it, hence the margin.
    assert!(
        most_threads < 40,
        "{most_threads} threads (before the connections: {threads_before})"
    );
    assert!(
        closed.load(Ordering::Relaxed) >= 4,
        "the header timeout closed only {} trickling connections",
        closed.load(Ordering::Relaxed)
    );
    // By now the server closed every idle connection: past the header timeout, or as the
    // oldest beyond its connection limit.
    let still_open = still_open(&idle);
    assert_eq!(still_open, 0, "{still_open} idle connections still open");
}

#[test]
fn a_megabyte_of_headers_is_refused_and_the_server_keeps_serving() {
    let server = Server::start();
    let mut stream = TcpStream::connect(server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let mut request = b"GET /metrics HTTP/1.1\r\nHost: gateway\r\n".to_vec();
    let line = format!("X-Fill: {}\r\n", "a".repeat(1000));
    while request.len() < 1 << 20 {
        request.extend_from_slice(line.as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    // The server may close before it has read everything: a failed write is an answer too.
    let _ = stream.write_all(&request);
    let mut answer = Vec::new();
    match stream.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(err) if err.kind() == ErrorKind::ConnectionReset => {}
        Err(err) => panic!("reading the answer: {err}"),
    }
    let answer = String::from_utf8_lossy(&answer);
    eprintln!("1 MiB of headers: {:?}", answer.lines().next());
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431 "),
        "answered {answer}"
    );
    assert!(scrape(server.addr) < Duration::from_secs(1));
}

#[test]
fn pages_are_the_ones_the_gateway_always_served() {
    let server = Server::start();
    let root = get(server.addr, "/");
    assert_eq!(root.status_line, "HTTP/1.1 200 OK");
    assert_eq!(root.body, "gateway: see /metrics and /hosts\n");
    assert!(root
        .headers
        .contains("content-type: text/plain; charset=utf-8"));

    let hosts = get(server.addr, "/hosts");
    assert_eq!(hosts.status_line, "HTTP/1.1 200 OK");
    assert!(hosts.headers.contains("content-type: application/json"));
    assert_eq!(hosts.body, "{\"enabled\":false,\"hosts\":[]}\n");

    let missing = get(server.addr, "/metrics/extra");
    assert_eq!(missing.status_line, "HTTP/1.1 404 Not Found");
    assert_eq!(missing.body, "not found\n");

    // Every family `metric_names` promises that has a sample with these sources is there.
    let body = get(server.addr, "/metrics").body;
    for name in ["gateway_build_info", "gateway_conntrack_entries"] {
        assert!(body.contains(&format!("# TYPE {name} ")), "{name} missing");
    }
}

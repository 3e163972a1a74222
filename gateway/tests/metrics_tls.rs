//! The metrics endpoint with a web-config file (`metrics.web_config`): scrapes over TLS with
//! certificates made here (rcgen), plain HTTP refused on the TLS port, basic auth (401 with
//! `WWW-Authenticate` without the right password, bcrypt spared once it checked out, a flood
//! of wrong passwords leaving a known scraper served), client certificates, and the
//! connection limits of `metrics_server.rs` holding with TLS on: 1,000 idle connections and
//! clients trickling a handshake leave every scrape answered within a second on few threads.

mod common;
use common::*;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine as _;
use gateway::config::web::{self as web_config, WebConfig};
use gateway::telemetry::metrics::{self, Metrics, TLS_HANDSHAKE_TIMEOUT};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// A CA, a server certificate for "localhost" and a client certificate it signed, as PEM
/// files in a directory of their own.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let dir =
            std::env::temp_dir().join(format!("gw-metrics-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf = |names: Vec<String>, usage| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server, server_key) = leaf(
            vec!["localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = leaf(
            vec!["prometheus".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        for (file, pem) in [
            ("ca.crt", ca.pem()),
            ("server.crt", server),
            ("server.key", server_key),
            ("client.crt", client),
            ("client.key", client_key),
        ] {
            std::fs::write(dir.join(file), pem).unwrap();
        }
        Pki { dir }
    }

    /// A web-config file in the directory (its relative paths resolve there).
    fn web_config(&self, yaml: &str) -> WebConfig {
        let path = self.dir.join("web-config.yml");
        std::fs::write(&path, yaml).unwrap();
        web_config::load(&path).unwrap_or_else(|err| panic!("{yaml}: {err}"))
    }

    fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_file(self.dir.join("ca.crt")).unwrap())
            .unwrap();
        roots
    }

    /// A client that trusts the CA, with the client certificate or without.
    fn client(&self, with_certificate: bool) -> Arc<ClientConfig> {
        let roots = self.roots();
        let builder =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots);
        let config = if with_certificate {
            let certs = CertificateDer::pem_file_iter(self.dir.join("client.crt"))
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(self.dir.join("client.key")).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(config)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running metrics server; stops it when dropped.
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(web: WebConfig) -> Server {
        let metrics = Metrics::new(common::sources(None));
        let stop = Arc::new(AtomicBool::new(false));
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let (addr, thread) =
            metrics::serve_with(loopback, metrics, web, stop.clone()).expect("serve");
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

/// Status line, lower-cased headers and body of one response.
#[derive(Debug)]
struct Answer {
    status_line: String,
    headers: String,
    body: String,
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    Some(Answer {
        status_line: status_line.to_string(),
        headers: headers.to_ascii_lowercase(),
        body: body.to_string(),
    })
}

fn request(target: &str, authorization: Option<(&str, &str)>) -> String {
    let authorization = authorization.map_or(String::new(), |(user, password)| {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Authorization: Basic {encoded}\r\n")
    });
    format!("GET {target} HTTP/1.1\r\nHost: gateway\r\n{authorization}Connection: close\r\n\r\n")
}

/// Reads until the end of the stream or an error; what came before an error still counts
/// (a peer that closes without a TLS close_notify ends in one).
fn read_all(stream: &mut impl Read) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buffer = [0; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return raw,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
        }
    }
}

/// `GET target` over TLS; None when the handshake or the exchange fails before an answer.
fn https_get(
    addr: SocketAddr,
    client: &Arc<ClientConfig>,
    target: &str,
    authorization: Option<(&str, &str)>,
) -> Option<Answer> {
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(client.clone(), name).unwrap();
    let socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(connection, socket);
    tls.write_all(request(target, authorization).as_bytes())
        .ok()?;
    parse(&read_all(&mut tls))
}

/// A TLS scrape, timed; asserts it is a full, good answer.
fn scrape(addr: SocketAddr, client: &Arc<ClientConfig>) -> Duration {
    let start = Instant::now();
    let answer = https_get(addr, client, "/metrics", None).expect("an answer over TLS");
    let elapsed = start.elapsed();
    assert_eq!(answer.status_line, "HTTP/1.1 200 OK");
    assert!(
        answer.body.contains("gateway_build_info{"),
        "{}",
        answer.body
    );
    elapsed
}

const TLS_ONLY: &str = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";

#[test]
fn a_scrape_over_tls_is_answered_and_plain_http_on_the_tls_port_is_not() {
    let pki = Pki::new("plain");
    let server = Server::start(pki.web_config(TLS_ONLY));
    let client = pki.client(false);
    assert!(scrape(server.addr, &client) < Duration::from_secs(1));
    let hosts = https_get(server.addr, &client, "/hosts", None).expect("an answer");
    assert_eq!(hosts.body, "{\"enabled\":false,\"hosts\":[]}\n");

    let mut plain = TcpStream::connect(server.addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(request("/metrics", None).as_bytes())
        .unwrap();
    let raw = read_all(&mut plain);
    assert!(
        !String::from_utf8_lossy(&raw).contains("HTTP/1.1"),
        "plain HTTP got an HTTP answer: {raw:?}"
    );
    assert!(
        !String::from_utf8_lossy(&raw).contains("gateway_build_info"),
        "plain HTTP got the metrics"
    );
}

#[test]
fn only_tls_1_3_when_min_version_says_so() {
    let pki = Pki::new("tls13");
    let server = Server::start(pki.web_config(&format!("{TLS_ONLY}  min_version: TLS13\n")));
    let only_12 = Arc::new(
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(pki.roots())
            .with_no_client_auth(),
    );
    assert!(
        https_get(server.addr, &only_12, "/metrics", None).is_none(),
        "a TLS 1.2 client was served"
    );
    assert!(scrape(server.addr, &pki.client(false)) < Duration::from_secs(1));
}

#[test]
fn basic_auth_answers_401_without_the_right_password_and_200_with_it() {
    let pki = Pki::new("auth");
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let server = Server::start(pki.web_config(&format!(
        "{TLS_ONLY}basic_auth_users:\n  prometheus: {hash}\n"
    )));
    let client = pki.client(false);
    let get = |target, authorization| {
        https_get(server.addr, &client, target, authorization).expect("an answer")
    };
    for (what, authorization) in [
        ("no credentials", None),
        ("a wrong password", Some(("prometheus", "wrong"))),
        ("an unknown user", Some(("root", "s3cret"))),
    ] {
        for target in ["/metrics", "/", "/hosts"] {
            let answer = get(target, authorization);
            assert_eq!(
                answer.status_line, "HTTP/1.1 401 Unauthorized",
                "{what} on {target}"
            );
            assert!(
                answer.headers.contains("www-authenticate: basic"),
                "{what}: {}",
                answer.headers
            );
            assert!(!answer.body.contains("gateway_build_info"), "{what}");
        }
    }
    let good = Some(("prometheus", "s3cret"));
    let first = Instant::now();
    let answer = get("/metrics", good);
    let first = first.elapsed();
    assert_eq!(answer.status_line, "HTTP/1.1 200 OK");
    assert!(answer.body.contains("gateway_build_info{"));
    // Later scrapes are spared the bcrypt (cost 10: tens of milliseconds each).
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let start = Instant::now();
        assert_eq!(get("/metrics", good).status_line, "HTTP/1.1 200 OK");
        slowest = slowest.max(start.elapsed());
    }
    eprintln!("first authorised scrape {first:?}, later ones at most {slowest:?}");
    assert!(slowest < Duration::from_secs(1));
}

#[test]
fn a_flood_of_wrong_passwords_leaves_a_known_scraper_served() {
    let pki = Pki::new("flood");
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    // Plain HTTP here: the flood is of bcrypt checks, not handshakes.
    let path = pki.dir.join("web-config.yml");
    std::fs::write(&path, format!("basic_auth_users:\n  prometheus: {hash}\n")).unwrap();
    let server = Server::start(web_config::load(&path).unwrap());
    let get = |authorization: Option<(&str, &str)>| {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream
            .write_all(request("/metrics", authorization).as_bytes())
            .unwrap();
        parse(&read_all(&mut stream)).expect("an answer")
    };
    assert_eq!(
        get(Some(("prometheus", "s3cret"))).status_line,
        "HTTP/1.1 200 OK"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let (denied, busy) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let flooders: Vec<_> = (0..16)
        .map(|i| {
            let (stop, denied, busy, addr) =
                (stop.clone(), denied.clone(), busy.clone(), server.addr);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut stream) = TcpStream::connect(addr) else {
                        continue;
                    };
                    let password = format!("guess{i}");
                    let _ = stream
                        .write_all(request("/metrics", Some(("prometheus", &password))).as_bytes());
                    let answer = parse(&read_all(&mut stream));
                    match answer.as_ref().map(|a| a.status_line.as_str()) {
                        Some("HTTP/1.1 401 Unauthorized") => denied.fetch_add(1, Ordering::Relaxed),
                        Some("HTTP/1.1 503 Service Unavailable") => {
                            busy.fetch_add(1, Ordering::Relaxed)
                        }
                        other => panic!("a wrong password got {other:?}"),
                    };
                }
            })
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(4);
    let Scrapes {
        count: scrapes,
        slowest,
        most_threads,
    } = scrape_until(until, Duration::from_millis(200), || {
        let start = Instant::now();
        assert_eq!(
            get(Some(("prometheus", "s3cret"))).status_line,
            "HTTP/1.1 200 OK"
        );
        start.elapsed()
    });
    stop.store(true, Ordering::Relaxed);
    for flooder in flooders {
        flooder.join().expect("flooder");
    }
    let (denied, busy) = (denied.load(Ordering::Relaxed), busy.load(Ordering::Relaxed));
    eprintln!(
        "{scrapes} scrapes, slowest {slowest:?}; wrong passwords: {denied} denied, {busy} busy; \
         at most {most_threads} threads"
    );
    assert!(denied >= 10, "only {denied} wrong passwords were checked");
    assert!(scrapes >= 10, "only {scrapes} scrapes");
    assert!(
        slowest < Duration::from_secs(1),
        "a known scraper waited {slowest:?} behind the flood"
    );
    // The harness, this test, 16 flooders, the server and its one bcrypt thread; other tests
    // of this file run beside it.
    assert!(most_threads < 60, "{most_threads} threads");
}

#[test]
fn client_certificates_are_required_and_verified_when_asked_for() {
    let pki = Pki::new("mtls");
    let server = Server::start(pki.web_config(&format!(
        "{TLS_ONLY}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
    )));
    assert!(
        https_get(server.addr, &pki.client(false), "/metrics", None).is_none(),
        "a client without a certificate was served"
    );
    assert!(scrape(server.addr, &pki.client(true)) < Duration::from_secs(1));
}

#[test]
fn with_tls_idle_connections_and_trickled_handshakes_leave_scrapes_answered_on_few_threads() {
    let pki = Pki::new("idle");
    let server = Server::start(pki.web_config(TLS_ONLY));
    let client = pki.client(false);
    let threads_before = threads_of_this_process();

    let idle = open_idle_connections(server.addr, 1000);

    let stop = Arc::new(AtomicBool::new(false));
    let closed = Arc::new(AtomicUsize::new(0));
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            let (stop, closed) = (stop.clone(), closed.clone());
            // A handshake record, TLS 1.0 record version (as ClientHellos have), announcing 512
            // bytes; a ClientHello's type (1) and length; then zeros, one at a time.
            let hello = (
                &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc][..],
                &[0][..],
            );
            std::thread::spawn(move || trickle(server.addr, hello, stop, closed))
        })
        .collect();

    let until = Instant::now() + TLS_HANDSHAKE_TIMEOUT * 2 + Duration::from_millis(500);
    let Scrapes {
        count: scrapes,
        slowest,
        most_threads,
    } = scrape_until(until, Duration::from_millis(250), || {
        scrape(server.addr, &client)
    });
    stop.store(true, Ordering::Relaxed);
    for trickler in tricklers {
        trickler.join().expect("trickler");
    }
    eprintln!("{scrapes} TLS scrapes, slowest {slowest:?}, at most {most_threads} threads");
    assert!(scrapes >= 10, "only {scrapes} scrapes");
    assert!(
        slowest < Duration::from_secs(1),
        "the slowest of {scrapes} scrapes took {slowest:?}"
    );
    assert!(
        most_threads < 60,
        "{most_threads} threads (before the connections: {threads_before})"
    );
    assert!(
        closed.load(Ordering::Relaxed) >= 4,
        "the handshake timeout closed only {} trickling connections",
        closed.load(Ordering::Relaxed)
    );
    // Every idle connection is closed by now: past the handshake timeout, or evicted.
    let still_open = still_open(&idle);
    assert_eq!(still_open, 0, "{still_open} idle connections still open");
}

/// The example under deploy/ parses as a web-config file once its placeholders are real.
#[test]
fn the_deploy_example_loads_with_real_files() {
    let pki = Pki::new("example");
    let example = include_str!("../../deploy/prometheus/web-config.yml");
    let path: &Path = &pki.dir.join("example.yml");
    let text = example
        .replace("/etc/gateway/tls/", &format!("{}/", pki.dir.display()))
        .replace("gateway.crt", "server.crt")
        .replace("gateway.key", "server.key")
        .replace("prometheus-ca.crt", "ca.crt");
    std::fs::write(path, text).unwrap();
    let web = web_config::load(path).unwrap_or_else(|err| panic!("the example: {err}"));
    assert!(web.tls.is_some() && web.basic_auth.is_some(), "{web:?}");
}

/// Files that do not fit are refused at load, naming the field: a key that is not the
/// certificate's, a certificate file with no certificate in it. An empty file is plain HTTP.
#[test]
fn mismatched_or_empty_pem_files_are_refused_and_an_empty_file_means_plain_http() {
    let pki = Pki::new("mismatch");
    let path = pki.dir.join("web-config.yml");
    for (yaml, field) in [
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n",
            "tls_server_config.key_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
            "tls_server_config.cert_file",
        ),
        (
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.crt\n",
            "tls_server_config.key_file",
        ),
    ] {
        std::fs::write(&path, yaml).unwrap();
        let err = web_config::load(&path)
            .err()
            .unwrap_or_else(|| panic!("{yaml}: accepted"));
        assert_eq!(err.field, field, "{yaml}: {err}");
    }
    std::fs::write(&path, "# nothing yet\n").unwrap();
    let web = web_config::load(&path).expect("an empty file");
    assert!(web.tls.is_none() && web.basic_auth.is_none(), "{web:?}");
}

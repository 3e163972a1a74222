//! Health checks of the uplinks (`[uplinks.health]`), as OpenWrt's mwan3track does them:
//! rounds of probes to hosts beyond each ISP, sent through that uplink; `down` failed rounds
//! in a row take the uplink down, `up` passed rounds bring it back. A change goes to the
//! control thread, which compiles the router config again with it (as it does for a DHCP
//! lease) so that new flows leave by the uplinks that are up, and the flows kept on one that
//! went down end (`pipeline::pipeline::uplinks`).
//!
//! Why from the kernel twins and not from the dataplane: a probe is then an ordinary socket
//! (an ICMP echo on a raw socket, or a TCP connect) bound to the uplink's twin, and the
//! kernel does its routing and ARP; the dataplane tracks it as any connection the kernel
//! opens (`pipeline::pipeline::kernel_flows`: admitted under `local -> zone`, masqueraded
//! where the interface masquerades, its replies delivered back to the twin), so the probe
//! crosses the very path a LAN host's flow takes out of that uplink. Nothing is added to the
//! per-packet path. For an uplink with a `via`, the twins' namespace gets a routing table of
//! its own (`ip rule oif <twin> lookup <table>`, a default route via the ISP's router), which
//! only sockets bound to that twin use; one whose next hop a DHCP client learnt has the
//! client's default route on its twin already. A PPPoE uplink has no twin: its session's
//! own echo (LCP) is its health check, and a session that is down leaves the uplink without
//! an address, so down.
//!
//! One thread per checked uplink, each in the twins' namespace, each probe bounded by its
//! timeout: a dead ISP never blocks the control thread or another uplink's checks.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::config::{GatewayConfig, HealthConfig, ProbeKind};

/// The first of the routing tables (and rule priorities) this module writes in the twins'
/// namespace, one per uplink with a `via`: out of the way of the kernel's (253-255) and of
/// what FRR and most setups number.
const FIRST_TABLE: usize = 4200;

/// ICMP echo identifiers: this plus the uplink's index, to tell each thread's replies apart
/// on the raw sockets (every raw ICMP socket sees every ICMP reply).
const ECHO_ID_BASE: u16 = 0x4700;

/// What the health checks found, per `[[uplinks]]` entry: for metrics and `ctl show uplinks`.
#[derive(Debug, Default)]
pub struct UplinkHealth {
    pub uplinks: Vec<UplinkStats>,
}

/// Whether each uplink's port has carrier, as the control thread samples links: an uplink
/// whose link is down takes no new flows, whatever its probes said last.
#[derive(Debug, Default)]
pub struct UplinkLinks {
    /// Per uplink, its interface's port (a VLAN's, its parent's).
    ports: Vec<usize>,
    down: Vec<bool>,
}

impl UplinkLinks {
    pub fn new(ports: Vec<usize>) -> UplinkLinks {
        let down = vec![false; ports.len()];
        UplinkLinks { ports, down }
    }

    /// Takes the links as `link_up(port)` says they are now: true when any uplink's
    /// changed (the router config is to be compiled again).
    pub fn sample(&mut self, link_up: impl Fn(usize) -> bool) -> bool {
        let mut changed = false;
        for (port, down) in self.ports.iter().zip(&mut self.down) {
            let now = !link_up(*port);
            if now != *down {
                *down = now;
                changed = true;
            }
        }
        changed
    }

    /// Per uplink, whether its link is down.
    pub fn down(&self) -> &[bool] {
        &self.down
    }
}

#[derive(Debug, Default)]
pub struct UplinkStats {
    /// The uplink's interface.
    pub interface: String,
    /// Whether it has health checks at all.
    pub checked: bool,
    failed: AtomicBool,
    answered: AtomicU64,
    lost: AtomicU64,
    /// The last answered probe's round trip, in microseconds (u64::MAX: none yet).
    last_rtt_us: AtomicU64,
    /// Rounds in a row that failed, and that passed.
    failed_rounds: AtomicU32,
    passed_rounds: AtomicU32,
    /// Times it went down or came back.
    changes: AtomicU64,
}

impl UplinkStats {
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
    pub fn last_rtt(&self) -> Option<Duration> {
        let micros = self.last_rtt_us.load(Ordering::Relaxed);
        (micros != u64::MAX).then(|| Duration::from_micros(micros))
    }
    pub fn failed_rounds(&self) -> u32 {
        self.failed_rounds.load(Ordering::Relaxed)
    }
    pub fn passed_rounds(&self) -> u32 {
        self.passed_rounds.load(Ordering::Relaxed)
    }
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

impl UplinkHealth {
    /// Every uplink up, nothing probed yet.
    pub fn for_config(config: &GatewayConfig) -> UplinkHealth {
        UplinkHealth {
            uplinks: config
                .uplinks
                .iter()
                .map(|uplink| UplinkStats {
                    interface: uplink.interface.clone(),
                    checked: uplink.health.is_some(),
                    last_rtt_us: AtomicU64::new(u64::MAX),
                    ..UplinkStats::default()
                })
                .collect(),
        }
    }

    /// Per uplink, whether its checks failed or its link is down: the router config's input.
    pub fn failed(&self, links: &UplinkLinks) -> Vec<bool> {
        let link_down = |i: usize| links.down().get(i).copied().unwrap_or(false);
        (self.uplinks.iter().enumerate())
            .map(|(i, stats)| stats.failed() || link_down(i))
            .collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error("uplinks[{index}].health: setting up the twin's routing table: `{command}`: {reason}")]
    Table {
        index: usize,
        command: String,
        reason: String,
    },
    #[error("uplinks[{index}].health: starting its thread")]
    Thread {
        index: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("uplinks[{index}].health: entering the twins' namespace {netns:?}")]
    Netns {
        index: usize,
        netns: String,
        #[source]
        source: std::io::Error,
    },
}

/// One checked uplink, as its thread needs it.
struct Check {
    index: usize,
    twin: String,
    health: HealthConfig,
}

/// Starts a thread per uplink with health checks; each calls `changed(index, failed)` when
/// its uplink goes down or comes back, until `stop` is set. Sets up the twins' routing
/// tables for the uplinks with a `via` first (refused in one line naming the uplink).
pub fn spawn(
    config: &GatewayConfig,
    health: Arc<UplinkHealth>,
    stop: Arc<AtomicBool>,
    changed: impl Fn(usize, bool) + Clone + Send + 'static,
) -> Result<Vec<std::thread::JoinHandle<()>>, HealthError> {
    let twins = crate::config::twins::twin_names(config);
    let netns = config.kernel_twins.netns.clone();
    let mut threads = Vec::new();
    for (index, uplink) in config.uplinks.iter().enumerate() {
        let Some(settings) = &uplink.health else {
            continue;
        };
        // Validation made sure the interface exists and has a twin.
        let Some(port) = (config.interfaces.iter()).position(|i| i.name == uplink.interface) else {
            continue;
        };
        let Some(twin) = twins[port].clone() else {
            continue;
        };
        if let Some(via) = uplink.via {
            own_table(index, &twin, via, netns.as_deref())?;
        }
        let check = Check {
            index,
            twin,
            health: settings.clone(),
        };
        let (health, stop, changed, netns) =
            (health.clone(), stop.clone(), changed.clone(), netns.clone());
        // The thread says whether it entered the namespace: an uplink that cannot be
        // checked refuses the start rather than stay "up" unchecked.
        let (entered_tx, entered_rx) = crossbeam_channel::bounded(1);
        let thread = std::thread::Builder::new()
            .name(format!("uplink-{index}"))
            .spawn(move || {
                let entered = match &netns {
                    Some(netns) => enter(netns).map_err(|source| HealthError::Netns {
                        index,
                        netns: netns.clone(),
                        source,
                    }),
                    None => Ok(()),
                };
                let ok = entered.is_ok();
                let _ = entered_tx.send(entered);
                if ok {
                    run(&check, &health.uplinks[check.index], &stop, changed);
                }
            })
            .map_err(|source| HealthError::Thread { index, source })?;
        match entered_rx.recv() {
            Ok(Ok(())) => threads.push(thread),
            Ok(Err(err)) => {
                let _ = thread.join();
                return Err(err);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(HealthError::Thread {
                    index,
                    source: std::io::Error::other("it ended before entering the namespace"),
                });
            }
        }
    }
    Ok(threads)
}

fn enter(netns: &str) -> std::io::Result<()> {
    let file = std::fs::File::open(format!("/run/netns/{netns}"))?;
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from)
}

/// The table that sockets bound to `twin` route by: a default route via the ISP's router.
/// Written again at every start (a rule left by an earlier run is replaced, not doubled).
fn own_table(
    index: usize,
    twin: &str,
    via: Ipv4Addr,
    netns: Option<&str>,
) -> Result<(), HealthError> {
    let table = (FIRST_TABLE + index).to_string();
    let ip = |args: &[&str]| {
        let mut command = Command::new("ip");
        if let Some(netns) = netns {
            command.args(["-n", netns]);
        }
        command.args(args);
        let shown = format!("{command:?}");
        let refused = |reason: String| HealthError::Table {
            index,
            command: shown.clone(),
            reason,
        };
        let output = command.output().map_err(|err| refused(err.to_string()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(refused(
                String::from_utf8_lossy(&output.stderr).trim().to_string(),
            ))
        }
    };
    // Gone already on a fresh namespace: nothing to report.
    let _ = ip(&["rule", "del", "pref", &table]);
    ip(&[
        "route",
        "replace",
        "default",
        "via",
        &via.to_string(),
        "dev",
        twin,
        "table",
        &table,
    ])?;
    ip(&["rule", "add", "pref", &table, "oif", twin, "lookup", &table])
}

/// Rounds of probes every `interval_ms` until `stop`.
fn run(check: &Check, stats: &UplinkStats, stop: &AtomicBool, changed: impl Fn(usize, bool)) {
    let health = &check.health;
    let interval = Duration::from_millis(health.interval_ms);
    let timeout = Duration::from_millis(health.timeout_ms);
    let mut sequence: u16 = 0;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        sequence = sequence.wrapping_add(1);
        let answered = match health.probe {
            ProbeKind::Icmp => echo_round(check, sequence, timeout, stats),
            ProbeKind::Tcp(port) => connect_round(check, port, timeout, stats),
        };
        let lost = health.targets.len() - answered;
        stats.answered.fetch_add(answered as u64, Ordering::Relaxed);
        stats.lost.fetch_add(lost as u64, Ordering::Relaxed);
        if let Some(failed) = record_round(stats, health, answered >= health.reliability) {
            stats.changes.fetch_add(1, Ordering::Relaxed);
            if failed {
                tracing::warn!(
                    uplink = %stats.interface,
                    rounds = health.down,
                    "uplink down: its health checks failed; new flows leave by the others"
                );
            } else {
                tracing::info!(
                    uplink = %stats.interface,
                    rounds = health.up,
                    "uplink up again: its health checks pass"
                );
            }
            changed(check.index, failed);
        }
        // Sleeps in short steps, so that a stop is seen promptly.
        while let Some(left) = interval.checked_sub(started.elapsed()) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

/// Counts a round that `passed` or not: `Some(failed)` when the uplink's state changes.
fn record_round(stats: &UplinkStats, health: &HealthConfig, passed: bool) -> Option<bool> {
    let (this, other) = if passed {
        (&stats.passed_rounds, &stats.failed_rounds)
    } else {
        (&stats.failed_rounds, &stats.passed_rounds)
    };
    let in_a_row = this.load(Ordering::Relaxed).saturating_add(1);
    this.store(in_a_row, Ordering::Relaxed);
    other.store(0, Ordering::Relaxed);
    let failed = stats.failed();
    let change = if failed {
        passed && in_a_row >= health.up
    } else {
        !passed && in_a_row >= health.down
    };
    if change {
        stats.failed.store(!failed, Ordering::Relaxed);
        return Some(!failed);
    }
    None
}

/// An echo request to every target at once, then their replies until the timeout: how many
/// answered.
fn echo_round(check: &Check, sequence: u16, timeout: Duration, stats: &UplinkStats) -> usize {
    let socket = match echo_socket(&check.twin) {
        Ok(socket) => socket,
        Err(err) => {
            tracing::warn!(uplink = %stats.interface, "probe socket: {err}");
            return 0;
        }
    };
    let id = ECHO_ID_BASE.wrapping_add(check.index as u16);
    let request = echo_request(id, sequence);
    let sent_at = Instant::now();
    let targets = &check.health.targets;
    for target in targets {
        let to = SockAddr::from(SocketAddrV4::new(*target, 0));
        if let Err(err) = socket.send_to(&request, &to) {
            tracing::debug!(uplink = %stats.interface, %target, "echo request not sent: {err}");
        }
    }
    let mut answered = vec![false; targets.len()];
    let mut datagram = [0u8; 1500];
    while let Some(left) = timeout.checked_sub(sent_at.elapsed()) {
        // Under a millisecond left is none: a read timeout that small rounds to zero, which
        // the kernel takes for no timeout at all.
        if answered.iter().all(|&a| a) || left < Duration::from_millis(1) {
            break;
        }
        if socket.set_read_timeout(Some(left)).is_err() {
            break;
        }
        // A raw socket reads whole IPv4 datagrams: the sender is in the header.
        let Ok(len) = (&socket).read(&mut datagram) else {
            break;
        };
        let Some(from) = echo_reply_from(&datagram[..len], id, sequence) else {
            continue;
        };
        if let Some(i) = targets.iter().position(|target| *target == from) {
            if !answered[i] {
                answered[i] = true;
                let rtt = sent_at.elapsed().as_micros() as u64;
                stats.last_rtt_us.store(rtt, Ordering::Relaxed);
            }
        }
    }
    answered.iter().filter(|&&a| a).count()
}

/// A raw ICMP socket bound to the twin: its echo requests leave by that uplink.
fn echo_socket(twin: &str) -> std::io::Result<Socket> {
    let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::ICMPV4))?;
    socket.bind_device(Some(twin.as_bytes()))?;
    Ok(socket)
}

/// An ICMP echo request (RFC 792) with 16 bytes of payload, as `ping -s 16` sends.
fn echo_request(id: u16, sequence: u16) -> [u8; 24] {
    let mut message = [0u8; 24];
    message[0] = pipeline::wire::icmp::msg_type::ECHO_REQUEST;
    message[4..6].copy_from_slice(&id.to_be_bytes());
    message[6..8].copy_from_slice(&sequence.to_be_bytes());
    message[8..].copy_from_slice(b"gateway uplink!!");
    let checksum = pipeline::wire::checksum::checksum(&message);
    message[2..4].copy_from_slice(&checksum.to_be_bytes());
    message
}

/// The sender of `datagram` if it is the echo reply to request (`id`, `sequence`).
fn echo_reply_from(datagram: &[u8], id: u16, sequence: u16) -> Option<Ipv4Addr> {
    let ip = pipeline::wire::Ipv4Packet::new_checked(datagram).ok()?;
    if ip.protocol() != pipeline::wire::ipv4::protocol::ICMP {
        return None;
    }
    let message = ip.payload();
    let is_reply = message.first() == Some(&pipeline::wire::icmp::msg_type::ECHO_REPLY);
    let ours = message.get(4..8) == Some(&[id.to_be_bytes(), sequence.to_be_bytes()].concat()[..]);
    (is_reply && ours).then(|| ip.src_addr())
}

/// A TCP connection to each target's port, bound to the twin: how many answered. A refusal
/// (a reset) is an answer: the target was reached through this uplink.
fn connect_round(check: &Check, port: u16, timeout: Duration, stats: &UplinkStats) -> usize {
    let mut answered = 0;
    for target in &check.health.targets {
        let started = Instant::now();
        let reached =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).and_then(|socket| {
                socket.bind_device(Some(check.twin.as_bytes()))?;
                let to = SockAddr::from(SocketAddrV4::new(*target, port));
                socket.connect_timeout(&to, timeout)
            });
        let reached = match reached {
            Ok(()) => true,
            Err(err) => err.kind() == std::io::ErrorKind::ConnectionRefused,
        };
        if reached {
            answered += 1;
            let rtt = started.elapsed().as_micros() as u64;
            stats.last_rtt_us.store(rtt, Ordering::Relaxed);
        }
    }
    answered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(down: u32, up: u32) -> HealthConfig {
        HealthConfig {
            targets: vec![Ipv4Addr::new(192, 0, 2, 1)],
            probe: ProbeKind::Icmp,
            interval_ms: 1000,
            timeout_ms: 1000,
            reliability: 1,
            down,
            up,
        }
    }

    #[test]
    fn down_after_its_failed_rounds_and_up_after_its_passed_ones() {
        let stats = UplinkStats::default();
        let settings = health(3, 2);
        let rounds = [
            (false, None),
            (false, None),
            // A pass in between starts the count again.
            (true, None),
            (false, None),
            (false, None),
            (false, Some(true)),
            (false, None),
            (true, None),
            (false, None),
            (true, None),
            (true, Some(false)),
            (true, None),
        ];
        for (i, (passed, change)) in rounds.into_iter().enumerate() {
            assert_eq!(record_round(&stats, &settings, passed), change, "round {i}");
        }
        assert!(!stats.failed());
    }

    #[test]
    fn an_uplink_without_carrier_counts_as_failed() {
        let health = UplinkHealth {
            uplinks: vec![UplinkStats::default(), UplinkStats::default()],
        };
        // Uplink 0 on port 1, uplink 1 on port 2.
        let mut links = UplinkLinks::new(vec![1, 2]);
        assert!(!links.sample(|_| true), "all up: nothing changed");
        assert_eq!(health.failed(&links), [false, false]);
        assert!(links.sample(|port| port != 2));
        assert_eq!(health.failed(&links), [false, true]);
        assert!(!links.sample(|port| port != 2), "still down: no change");
        health.uplinks[0].failed.store(true, Ordering::Relaxed);
        assert!(links.sample(|_| true));
        assert_eq!(health.failed(&links), [true, false]);
    }

    #[test]
    fn only_the_reply_to_this_request_counts() {
        let request = echo_request(0x4701, 9);
        assert_eq!(pipeline::wire::checksum::checksum(&request), 0);
        let reply = |id: u16, sequence: u16, kind: u8| {
            let mut icmp = echo_request(id, sequence);
            icmp[0] = kind;
            icmp[2..4].fill(0);
            let checksum = pipeline::wire::checksum::checksum(&icmp);
            icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
            let mut datagram = Vec::new();
            etherparse::PacketBuilder::ipv4([198, 51, 100, 1], [10, 0, 0, 1], 64)
                .icmpv4_raw(kind, 0, [icmp[4], icmp[5], icmp[6], icmp[7]])
                .write(&mut datagram, &icmp[8..])
                .unwrap();
            datagram
        };
        let from = Some(Ipv4Addr::new(198, 51, 100, 1));
        assert_eq!(echo_reply_from(&reply(0x4701, 9, 0), 0x4701, 9), from);
        assert_eq!(echo_reply_from(&reply(0x4702, 9, 0), 0x4701, 9), None);
        assert_eq!(echo_reply_from(&reply(0x4701, 8, 0), 0x4701, 9), None);
        assert_eq!(echo_reply_from(&reply(0x4701, 9, 8), 0x4701, 9), None);
        assert_eq!(echo_reply_from(&[0x45, 0], 0x4701, 9), None);
    }
}

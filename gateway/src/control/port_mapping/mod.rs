//! The port mapping server: PCP (RFC 6887) and NAT-PMP (RFC 6886) on UDP 5351, and with
//! `upnp` UPnP IGD (SSDP on UDP 1900, HTTP on `upnp_http_port`), on the addresses of the
//! interfaces `[port_mapping]` serves, on a thread of its own with sockets in the twins'
//! namespace, each bound to its twin's device. Requests reach it as any traffic for the
//! gateway reaches the kernel twins: punted by the workers once the `local` rules admit
//! them, within the punt budget. The table and its limits are `pipeline::portmap`'s; this
//! thread answers ([`datagrams`], [`upnp`]), expires mappings, keeps them in the state
//! directory across restarts, and sends the whole set to the control thread whenever the
//! forwards change, which compiles them into the router config as port forwards of one port
//! each (`pipeline::pipeline::config::PortMappings`).
//!
//! Why the gateway's own server and not miniupnpd (which speaks all three): a refusal must
//! reach the client as one (the 101st mapping of a host, a static forward's port), and
//! miniupnpd has no per-host or overall quota; its mappings would live in the twins'
//! nftables, which the gateway would have to read back and prune behind its back.

mod datagrams;
mod upnp;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pipeline::pipeline::config::{PortForward, PortMappings};
use pipeline::portmap::{
    natpmp, pcp, Ask, Granted, Mapping, MappingTable, Origin, Refusal, CLIENT_PORT, SERVER_PORT,
    TCP, UDP,
};
use pipeline::ratelimit::TokenBucket;
use pipeline::state::firewall::{Action, ZoneId};
use pipeline::state::nat::{NatEvent, NatEventKind, NatLog};
use pipeline::RouterConfig;
use serde_json::{json, Value};

use crate::config::GatewayConfig;
use crate::control::netlink::{enter_namespace, NetlinkError};
use crate::dataplane::published::Published;

/// Requests answered per second over all hosts, and the burst; and per host: a host
/// flooding requests gets no more of the thread, nor the others' share.
const REQUESTS_PER_SEC: u32 = 200;
const REQUESTS_BURST: u32 = 400;
const HOST_REQUESTS_PER_SEC: u32 = 25;
const HOST_REQUESTS_BURST: u32 = 150;
/// Hosts whose budgets are remembered; past it the budgets start afresh.
const HOST_BUDGETS: usize = 4096;
/// How long a change may take to reach the router config before the answers go anyway
/// (the control thread compiles it between its polls: milliseconds).
const PUBLISH_WAIT: Duration = Duration::from_millis(500);
/// Changes reach the router config at most this often: each is a new router config for
/// every worker, whose flows then take the slow path once.
const PUBLISH_INTERVAL: Duration = Duration::from_millis(200);
/// The longest the thread sleeps in poll (for `stop` and the ticks).
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Expiry, the external address and the rules are checked this often; the state file and
/// the status follow renewals this often too.
const TICK: Duration = Duration::from_secs(1);
/// Announcements after a start or an address change: 10, the first at once, then at
/// intervals doubling from 250 ms (RFC 6886 3.2.1).
const ANNOUNCEMENTS: u32 = 10;
const FIRST_ANNOUNCEMENT_INTERVAL: Duration = Duration::from_millis(250);
/// Where the mappings are kept in the state directory.
pub const STATE_FILE: &str = "port-mappings.json";
/// All hosts: where the announcements go (RFC 6887 14.1.3, RFC 6886 3.2.1).
const ALL_HOSTS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);

/// An external port the gateway keeps for itself (protocol, port).
type Kept = dyn Fn(u8, u16) -> bool;

/// What the thread serves, from the config at start (`[port_mapping]` is restart-only).
pub struct Setup {
    /// The served interfaces: index, address, twin device.
    pub served: Vec<(u16, Ipv4Addr, String)>,
    /// The interface whose address mappings take.
    pub external: u16,
    pub limits: pipeline::portmap::Limits,
    /// Where the mappings are kept across restarts (None: `state.snapshot` is off).
    pub state_file: Option<PathBuf>,
    pub netns: Option<String>,
    /// The NAT log's queue for mapping events (`[nat.log]`), drained with the workers'.
    pub nat_log: Option<Arc<NatLog>>,
    /// UPnP IGD's HTTP port; None: UPnP off.
    pub upnp_http_port: Option<u16>,
}

impl Setup {
    /// None when port mapping is off.
    pub fn from_config(config: &GatewayConfig) -> Option<Setup> {
        let external = config.port_mapping_external()?;
        let twins = crate::config::twins::twin_names(config);
        let served = config
            .port_mapping_interfaces()
            .into_iter()
            .filter_map(|index| {
                let cidr = config.interfaces[index].address.cidr()?;
                Some((index as u16, cidr.addr, twins[index].clone()?))
            })
            .collect();
        let mapping = &config.port_mapping;
        Some(Setup {
            served,
            external: external as u16,
            limits: mapping.limits(),
            state_file: config
                .state
                .snapshot
                .then(|| config.state.directory.join(STATE_FILE)),
            netns: config.kernel_twins.netns.clone(),
            nat_log: config
                .nat
                .log
                .enabled()
                .then(|| Arc::new(NatLog::new(config.nat.log.queue_events))),
            upnp_http_port: mapping.upnp.then_some(mapping.upnp_http_port),
        })
    }

    /// The UPnP device's UUID: the same for every start of one config's box (from its
    /// served addresses and external interface), different between boxes that differ.
    fn uuid(&self) -> String {
        use sha2::Digest;
        let seed = format!("{:?} {}", self.served, self.external);
        let digest = sha2::Sha256::digest(seed.as_bytes());
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-4{}-8{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[13..16],
            &hex[17..20],
            &hex[20..32]
        )
    }
}

/// What metrics and `gateway ctl` read: the mappings, and the requests by origin and result.
#[derive(Debug, Default)]
pub struct PortMappingStatus {
    pub mappings: Mutex<Vec<Mapping>>,
    pub requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl PortMappingStatus {
    fn count(&self, origin: Origin, result: &'static str) {
        *self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((origin.label(), result))
            .or_default() += 1;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PortMappingError {
    #[error("starting the port mapping thread")]
    Thread(#[source] std::io::Error),
    #[error("the port mapping thread ended before it opened its sockets")]
    ThreadEnded,
    #[error("port mapping: entering the twins' namespace")]
    Namespace(#[source] NetlinkError),
    #[error("port mapping: listening on {address} on twin {twin} (is the twin up?)")]
    Bind {
        address: SocketAddrV4,
        twin: String,
        #[source]
        source: std::io::Error,
    },
}

/// Starts the server; it runs until `stop` is set. `publish` takes each new set of mappings
/// (the first at once when the state file restored some).
pub fn spawn(
    setup: Setup,
    router: Arc<Published<RouterConfig>>,
    status: Arc<PortMappingStatus>,
    stop: Arc<AtomicBool>,
    publish: impl Fn(PortMappings) + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, PortMappingError> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let thread = std::thread::Builder::new()
        .name("port-mapping".into())
        .spawn(move || {
            let sockets = match open(&setup) {
                Ok(sockets) => {
                    let _ = ready_tx.send(Ok(()));
                    sockets
                }
                Err(err) => {
                    let _ = ready_tx.send(Err(err));
                    return;
                }
            };
            Server::new(setup, sockets, router, status, publish).serve(&stop);
        })
        .map_err(PortMappingError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(err)) => {
            let _ = thread.join();
            Err(err)
        }
        Err(_) => Err(PortMappingError::ThreadEnded),
    }
}

/// The sockets, in the twins' namespace, each bound to its twin's device so that only what
/// arrived on a served link reaches it.
struct Sockets {
    /// PCP and NAT-PMP, one per served address; announcements leave by it.
    datagrams: Vec<std::net::UdpSocket>,
    /// SSDP (with UPnP): one socket on port 1900 per served link, in the group there.
    ssdp: Vec<std::net::UdpSocket>,
    /// HTTP (with UPnP), one per served address.
    listeners: Vec<std::net::TcpListener>,
}

fn open(setup: &Setup) -> Result<Sockets, PortMappingError> {
    use socket2::{Domain, Socket, Type};
    if let Some(netns) = &setup.netns {
        enter_namespace(netns).map_err(PortMappingError::Namespace)?;
    }
    match &setup.netns {
        Some(_) => reserve_in_kernel(&setup.limits.external_ports),
        None => tracing::info!(
            "port mapping: the twins share the host's namespace; its \
             net.ipv4.ip_local_reserved_ports is left as it is (the mapped ports may \
             collide with the host's own connections)"
        ),
    }
    let failed = |address: SocketAddrV4, twin: &str| {
        let twin = twin.to_string();
        move |source| PortMappingError::Bind {
            address,
            twin,
            source,
        }
    };
    let udp = |address: SocketAddrV4, twin: &str| -> std::io::Result<std::net::UdpSocket> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
        socket.set_reuse_address(true)?;
        socket.bind_device(Some(twin.as_bytes()))?;
        socket.bind(&SocketAddr::V4(address).into())?;
        socket.set_multicast_ttl_v4(1)?;
        socket.set_nonblocking(true)?;
        Ok(socket.into())
    };
    let mut sockets = Sockets {
        datagrams: Vec::new(),
        ssdp: Vec::new(),
        listeners: Vec::new(),
    };
    for (_, address, twin) in &setup.served {
        let at = SocketAddrV4::new(*address, SERVER_PORT);
        let socket = udp(at, twin).map_err(failed(at, twin))?;
        socket2::SockRef::from(&socket)
            .set_multicast_if_v4(address)
            .map_err(failed(at, twin))?;
        sockets.datagrams.push(socket);
    }
    let Some(http_port) = setup.upnp_http_port else {
        return Ok(sockets);
    };
    let group = pipeline::portmap::upnp::SSDP_GROUP;
    for (_, address, twin) in &setup.served {
        let at = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, pipeline::portmap::upnp::SSDP_PORT);
        let ssdp = (|| -> std::io::Result<std::net::UdpSocket> {
            let socket = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
            socket.set_reuse_address(true)?;
            socket.bind_device(Some(twin.as_bytes()))?;
            socket.bind(&SocketAddr::V4(at).into())?;
            socket.set_multicast_all_v4(false)?;
            socket.join_multicast_v4(&group, address)?;
            socket.set_nonblocking(true)?;
            Ok(socket.into())
        })()
        .map_err(failed(at, twin))?;
        sockets.ssdp.push(ssdp);
    }
    for (_, address, twin) in &setup.served {
        let at = SocketAddrV4::new(*address, http_port);
        let listener = (|| -> std::io::Result<std::net::TcpListener> {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
            socket.set_reuse_address(true)?;
            socket.bind_device(Some(twin.as_bytes()))?;
            socket.bind(&SocketAddr::V4(at).into())?;
            socket.listen(16)?;
            socket.set_nonblocking(true)?;
            Ok(socket.into())
        })()
        .map_err(failed(at, twin))?;
        sockets.listeners.push(listener);
    }
    Ok(sockets)
}

/// Keeps the kernel's own connections (on the twins: DNS, NTP) off the mapped ports, as
/// masquerade is kept off them: the twins' namespace reserves them from its ephemeral range.
fn reserve_in_kernel(ports: &std::ops::RangeInclusive<u16>) {
    let path = "/proc/sys/net/ipv4/ip_local_reserved_ports";
    let range = format!("{}-{}", ports.start(), ports.end());
    // Beside what is reserved already (the namespace's other users').
    let reserved = match std::fs::read_to_string(path).map(|text| text.trim().to_string()) {
        Ok(existing) if !existing.is_empty() => format!("{existing},{range}"),
        _ => range.clone(),
    };
    if let Err(err) = std::fs::write(path, &reserved) {
        tracing::warn!("port mapping: {path} not set to {reserved}: {err}");
    }
}

/// An answer waiting for the change it reports to reach the workers.
enum Held {
    /// A datagram's answer: the served socket, the client, the bytes.
    Answer(usize, SocketAddrV4, Vec<u8>),
    /// An HTTP connection and its response.
    Http(upnp::Connection, Vec<u8>),
}

/// What one request did: its answer, the result counted, and what the table gained, lost
/// or renewed.
pub(super) struct Outcome {
    answer: Option<Vec<u8>>,
    result: &'static str,
    created: Vec<Mapping>,
    deleted: Vec<Mapping>,
    renewed: bool,
}

impl Outcome {
    fn silent(result: &'static str) -> Outcome {
        Outcome {
            answer: None,
            result,
            created: Vec::new(),
            deleted: Vec::new(),
            renewed: false,
        }
    }

    fn answer(bytes: &[u8], result: &'static str) -> Outcome {
        Outcome {
            answer: Some(bytes.to_vec()),
            ..Outcome::silent(result)
        }
    }

    fn granting(mut self, granted: &Granted) -> Outcome {
        self.created.extend(granted.created);
        self.deleted.extend(granted.replaced);
        self.renewed = granted.created.is_none();
        self
    }

    fn deleting(mut self, gone: Vec<Mapping>) -> Outcome {
        self.deleted.extend(gone);
        self
    }
}

struct Server<P> {
    setup: Setup,
    sockets: Vec<std::net::UdpSocket>,
    /// SSDP, one per served link (with UPnP).
    ssdp: Vec<std::net::UdpSocket>,
    http: Option<upnp::Http>,
    router: Arc<Published<RouterConfig>>,
    status: Arc<PortMappingStatus>,
    publish: P,
    table: MappingTable,
    /// The forwards last published, when, and whether the table has changed since.
    published: PortMappings,
    last_publish: Option<Instant>,
    publish_pending: bool,
    /// Answers waiting for the pending change.
    held: Vec<Held>,
    /// Renewals not yet in the state file and the status.
    dirty: bool,
    /// The Unix second the mappings' epoch began (RFC 6887 8.5): at the first start, kept
    /// across restarts with the mappings, reset when the external address changes.
    epoch_start: u64,
    budget: TokenBucket,
    host_budgets: HashMap<Ipv4Addr, TokenBucket>,
    started: Instant,
    /// The external address last announced, and the announcements still due: when the
    /// next one is, how many are left, the interval after it.
    announced: Option<Ipv4Addr>,
    announcing: Option<(Instant, u32, Duration)>,
    /// The rules generation the table was last checked against (a reload may add a forward
    /// or open a port to the gateway).
    checked_generation: u32,
}

/// Seconds since the Unix epoch: the mappings' clock (the state file keeps it).
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl<P: Fn(PortMappings)> Server<P> {
    fn new(
        setup: Setup,
        sockets: Sockets,
        router: Arc<Published<RouterConfig>>,
        status: Arc<PortMappingStatus>,
        publish: P,
    ) -> Self {
        let table = MappingTable::new(setup.limits.clone());
        let http = (!sockets.listeners.is_empty()).then(|| upnp::Http {
            listeners: sockets.listeners,
            connections: Vec::new(),
            uuid: setup.uuid(),
        });
        let checked_generation = router.load().0.stateful.generation;
        let mut server = Server {
            setup,
            sockets: sockets.datagrams,
            ssdp: sockets.ssdp,
            http,
            router,
            status,
            publish,
            table,
            published: PortMappings::default(),
            last_publish: None,
            publish_pending: false,
            held: Vec::new(),
            dirty: false,
            epoch_start: unix_now(),
            budget: TokenBucket::new(REQUESTS_PER_SEC, REQUESTS_BURST),
            host_budgets: HashMap::new(),
            started: Instant::now(),
            announced: None,
            announcing: None,
            checked_generation,
        };
        server.restore();
        server
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn serve(mut self, stop: &AtomicBool) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut next_tick = Instant::now();
        let mut buf = [0u8; pcp::MAX_LEN + 4];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if let Some(log) = &self.setup.nat_log {
                // The NAT log dates events by this clock's reading at its drain.
                log.set_now(self.now_ns());
            }
            if now >= next_tick {
                self.tick();
                next_tick = now + TICK;
            }
            self.announce_if_due(now);
            self.answer_held(now);
            if let Some(http) = self.http.as_mut() {
                http.expire(now);
            }
            let (datagrams, ssdp, listeners) = (
                self.sockets.len(),
                self.ssdp.len(),
                self.http.as_ref().map_or(0, |http| http.listeners.len()),
            );
            // Wake for the held answers' publish, else within 100 ms (stop, ticks).
            let wait = self.publish_due().map_or(POLL_WAIT, |due| {
                due.saturating_duration_since(now).min(POLL_WAIT)
            });
            let ready: Vec<bool> = {
                let connections = self.http.iter().flat_map(|http| &http.connections);
                let mut fds: Vec<PollFd> = (self.sockets.iter().map(|s| s.as_fd()))
                    .chain(self.ssdp.iter().map(|s| s.as_fd()))
                    .chain(
                        self.http
                            .iter()
                            .flat_map(|h| h.listeners.iter().map(|l| l.as_fd())),
                    )
                    .chain(connections.map(|c| c.stream.as_fd()))
                    .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                    .collect();
                let timeout = PollTimeout::try_from(wait.as_millis().max(1) as i32)
                    .unwrap_or(PollTimeout::from(100u16));
                if poll(&mut fds, timeout).unwrap_or(0) <= 0 {
                    continue;
                }
                fds.iter()
                    .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                    .collect()
            };
            let router = self.router.load().0;
            let external = self.setup.external;
            let kept = move |protocol: u8, port: u16| kept(&router, external, protocol, port);
            for served in (0..datagrams).filter(|&i| ready[i]) {
                while let Ok((len, from)) = self.sockets[served].recv_from(&mut buf) {
                    if let SocketAddr::V4(from) = from {
                        if let Some(mut outcome) = self.datagram(served, &buf[..len], from, &kept) {
                            let answer = outcome.answer.take();
                            let held = answer.map(|bytes| Held::Answer(served, from, bytes));
                            self.apply(outcome, held);
                        }
                    }
                }
            }
            for served in (0..ssdp).filter(|&i| ready[datagrams + i]) {
                while let Ok((len, from)) = self.ssdp[served].recv_from(&mut buf) {
                    if let SocketAddr::V4(from) = from {
                        self.ssdp(served, &buf[..len], from);
                    }
                }
            }
            let first_connection = datagrams + ssdp + listeners;
            // Connections in reverse: serving one removes it by swapping in the last.
            for index in (0..ready.len().saturating_sub(first_connection)).rev() {
                if !ready[first_connection + index] {
                    continue;
                }
                if let Some((connection, response, outcome)) = self.serve_connection(index, &kept) {
                    let outcome = outcome.unwrap_or_else(|| Outcome::silent("query"));
                    self.apply(outcome, Some(Held::Http(connection, response)));
                }
            }
            for listener in (0..listeners).filter(|&i| ready[datagrams + ssdp + i]) {
                if let Some(http) = self.http.as_mut() {
                    http.accept(listener, Instant::now());
                }
            }
            self.answer_held(Instant::now());
        }
        if self.publish_pending {
            self.changed(false);
        }
        self.answer_held(Instant::now());
        if self.dirty {
            self.save();
        }
    }

    /// Takes what a request changed: in the logs at once; into the router config at most
    /// every `PUBLISH_INTERVAL` (a flood of changes costs the workers a few new router
    /// configs a second, not one per request); its answer is held until the workers have the
    /// change, so that a client told "mapped" can be reached through the mapping at once.
    fn apply(&mut self, outcome: Outcome, answer: Option<Held>) {
        for mapping in &outcome.deleted {
            self.note(NatEventKind::Delete, mapping, "port mapping deleted");
        }
        for mapping in &outcome.created {
            self.note(NatEventKind::Create, mapping, "port mapping created");
        }
        self.publish_pending |= !outcome.created.is_empty() || !outcome.deleted.is_empty();
        self.dirty |= outcome.renewed;
        self.held.extend(answer);
    }

    /// When the held answers go: at once without a change pending, else when it may be
    /// published.
    fn publish_due(&self) -> Option<Instant> {
        // The first change is due at once (the server's start is past).
        let due = self
            .last_publish
            .map_or(self.started, |at| at + PUBLISH_INTERVAL);
        self.publish_pending.then_some(due)
    }

    /// Publishes a pending change when due, then sends the answers held for it.
    fn answer_held(&mut self, now: Instant) {
        match self.publish_due() {
            Some(due) if due > now => return,
            Some(_) => {
                self.changed(true);
                self.last_publish = Some(Instant::now());
            }
            None => {}
        }
        for held in std::mem::take(&mut self.held) {
            match held {
                Held::Answer(served, to, bytes) => {
                    if let Some(socket) = self.sockets.get(served) {
                        let _ = socket.send_to(&bytes, to);
                    }
                }
                Held::Http(connection, response) => connection.answer(&response),
            }
        }
    }

    /// Whether `host` may be answered now: the request budget over all hosts, and its own.
    fn take_budget(&mut self, host: Ipv4Addr) -> bool {
        let now_ns = self.now_ns();
        if self.host_budgets.len() >= HOST_BUDGETS && !self.host_budgets.contains_key(&host) {
            self.host_budgets.clear();
        }
        let own = self
            .host_budgets
            .entry(host)
            .or_insert_with(|| TokenBucket::new(HOST_REQUESTS_PER_SEC, HOST_REQUESTS_BURST));
        own.try_take(now_ns) && self.budget.try_take(now_ns)
    }

    /// Whether `host` is a host (not the gateway) on served link `served`.
    fn on_served_link(&self, served: usize, host: Ipv4Addr) -> bool {
        let (router, _) = self.router.load();
        let Some((index, _, _)) = self.setup.served.get(served) else {
            return false;
        };
        (router.interfaces.get(usize::from(*index)))
            .is_some_and(|iface| iface.contains(host) && !iface.is_own(host))
    }

    /// The served link `host` is on, if any.
    fn served_link_of(&self, host: Ipv4Addr) -> Option<usize> {
        (0..self.setup.served.len()).find(|&served| self.on_served_link(served, host))
    }

    /// A PCP or NAT-PMP datagram on served link `served`.
    fn datagram(
        &mut self,
        served: usize,
        bytes: &[u8],
        from: SocketAddrV4,
        kept: &Kept,
    ) -> Option<Outcome> {
        let origin = match bytes.first() {
            Some(&natpmp::VERSION) => Origin::NatPmp,
            _ => Origin::Pcp,
        };
        if !self.on_served_link(served, *from.ip()) || from.port() == 0 {
            self.status.count(origin, "foreign");
            return None;
        }
        if !self.take_budget(*from.ip()) {
            self.status.count(origin, "policed");
            return None;
        }
        let outcome = match origin {
            Origin::NatPmp => self.natpmp(bytes, *from.ip(), kept),
            _ => self.pcp(bytes, *from.ip(), kept),
        };
        self.status.count(origin, outcome.result);
        Some(outcome)
    }

    /// Expires mappings, drops those whose port the gateway keeps since a reload, follows
    /// the external address, and writes renewals out.
    fn tick(&mut self) {
        let mut gone = self.table.expire(unix_now());
        for mapping in &gone {
            self.note(NatEventKind::Delete, mapping, "port mapping expired");
        }
        let (router, _) = self.router.load();
        if router.stateful.generation != self.checked_generation {
            self.checked_generation = router.stateful.generation;
            let external = self.setup.external;
            let taken = self
                .table
                .unmap_where(|m| kept(&router, external, m.protocol, m.external_port));
            for mapping in &taken {
                self.note(
                    NatEventKind::Delete,
                    mapping,
                    "port mapping ended: the port is kept",
                );
            }
            if !taken.is_empty() {
                self.lost_mappings();
            }
            gone.extend(taken);
        }
        if !gone.is_empty() {
            self.changed(false);
        } else if self.dirty {
            self.refresh_status();
            self.save();
            self.dirty = false;
        }
        let address = self.external_address();
        if address.is_some() && address != self.announced {
            if self.announced.is_some() {
                // Mappings on the old address are gone for the clients: a new epoch tells
                // them to map again (RFC 6887 8.5).
                self.epoch_start = unix_now();
                self.dirty = true;
            }
            self.announced = address;
            self.announcing = Some((Instant::now(), ANNOUNCEMENTS, FIRST_ANNOUNCEMENT_INTERVAL));
        }
    }

    /// Mappings went that their clients did not end: a new epoch, announced, tells them to
    /// map again (RFC 6887 8.5).
    fn lost_mappings(&mut self) {
        self.epoch_start = unix_now();
        self.dirty = true;
        self.announcing = Some((Instant::now(), ANNOUNCEMENTS, FIRST_ANNOUNCEMENT_INTERVAL));
    }

    fn epoch(&self) -> u32 {
        unix_now().saturating_sub(self.epoch_start) as u32
    }

    fn external_address(&self) -> Option<Ipv4Addr> {
        let (router, _) = self.router.load();
        let iface = router.interfaces.get(usize::from(self.setup.external))?;
        iface.has_address().then(|| iface.masquerade_addr())
    }

    /// Both protocols' announcements on every served interface, when one is due: clients
    /// renew their mappings (the address changed, or this gateway started and may have
    /// lost them).
    fn announce_if_due(&mut self, now: Instant) {
        let Some((due, left, interval)) = self.announcing else {
            return;
        };
        if now < due {
            return;
        }
        self.announcing = (left > 1).then(|| (now + interval, left - 1, interval * 2));
        let Some(address) = self.announced else {
            return;
        };
        let epoch = self.epoch();
        let mut natpmp_out = [0; natpmp::MAX_RESPONSE_LEN];
        let natpmp_len = natpmp::write_announcement(&mut natpmp_out, epoch, address);
        let mut pcp_out = [0; pcp::MAX_RESPONSE_LEN];
        let pcp_len = pcp::write_announcement(&mut pcp_out, epoch);
        let to = SocketAddrV4::new(ALL_HOSTS, CLIENT_PORT);
        for socket in &self.sockets {
            let _ = socket.send_to(&natpmp_out[..natpmp_len], to);
            let _ = socket.send_to(&pcp_out[..pcp_len], to);
        }
        if left == ANNOUNCEMENTS {
            tracing::info!(external = %address, "port mapping: external address announced");
        }
    }

    /// One mapping's creation or end: in the gateway's log and, with `[nat.log]`, in the
    /// NAT log as a binding of the external address's port to the host's.
    fn note(&self, kind: NatEventKind, mapping: &Mapping, what: &str) {
        let external = self.external_address().unwrap_or(Ipv4Addr::UNSPECIFIED);
        tracing::info!(
            protocol = protocol_name(mapping.protocol),
            internal = %SocketAddrV4::new(mapping.internal, mapping.internal_port),
            external = %SocketAddrV4::new(external, mapping.external_port),
            origin = mapping.origin.label(),
            "{what}"
        );
        if let Some(log) = &self.setup.nat_log {
            let now_ns = self.now_ns();
            log.set_now(now_ns);
            log.push(NatEvent {
                at_ns: now_ns,
                kind,
                protocol: mapping.protocol,
                internal: (mapping.internal, mapping.internal_port),
                external: (external, mapping.external_port),
                block: None,
            });
        }
    }

    /// The forwards changed: the router config takes the new set (waited for when
    /// `answers_wait`, so that the answers sent next hold), the status and the state file
    /// follow.
    fn changed(&mut self, answers_wait: bool) {
        let forwards = (self.table.mappings().iter())
            .map(|mapping| forward(self.setup.external, mapping))
            .collect();
        let mappings = PortMappings::new(forwards);
        if mappings != self.published {
            (self.publish)(mappings.clone());
            let deadline = Instant::now() + PUBLISH_WAIT;
            while answers_wait && self.router.load().0.stateful.port_mappings != mappings {
                if Instant::now() >= deadline {
                    tracing::warn!("port mappings not in the router config after {PUBLISH_WAIT:?}");
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            self.published = mappings;
        }
        self.publish_pending = false;
        self.refresh_status();
        self.save();
        self.dirty = false;
    }

    fn refresh_status(&self) {
        *self
            .status
            .mappings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.table.mappings().to_vec();
    }

    fn save(&self) {
        let Some(path) = &self.setup.state_file else {
            return;
        };
        let text = json!({
            "epoch_start": self.epoch_start,
            "mappings": self.table.mappings().iter().map(mapping_json).collect::<Vec<_>>(),
        })
        .to_string();
        let temporary = path.with_extension("json.tmp");
        let written = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&temporary, text))
            .and_then(|()| std::fs::rename(&temporary, path));
        if let Err(err) = written {
            tracing::warn!(path = %path.display(), "port mappings not saved: {err}");
        }
    }

    /// The mappings kept by the last run, checked again against this one's limits, links
    /// and forwards; its epoch goes on if any are restored.
    fn restore(&mut self) {
        let Some(path) = self.setup.state_file.clone() else {
            return;
        };
        let Ok(text) = std::fs::read_to_string(&path) else {
            return;
        };
        let Ok(saved) = serde_json::from_str::<Value>(&text) else {
            tracing::warn!(path = %path.display(), "port mappings file unreadable: ignored");
            return;
        };
        let mut left_out = 0;
        let mappings: Vec<Mapping> = (saved["mappings"].as_array().into_iter().flatten())
            .filter_map(mapping_from_json)
            .filter(|m| {
                // Still a host on a served link (the LAN may have been renumbered).
                let usable = m.internal_port != 0 && self.served_link_of(m.internal).is_some();
                left_out += usize::from(!usable);
                usable
            })
            .collect();
        let (router, _) = self.router.load();
        let external = self.setup.external;
        let now = unix_now();
        left_out += self.table.restore(mappings, now, |protocol, port| {
            kept(&router, external, protocol, port)
        });
        let restored = self.table.mappings().len();
        // The epoch goes on only if every mapping came back.
        if restored > 0 && left_out == 0 {
            self.epoch_start = saved["epoch_start"].as_u64().unwrap_or(now).min(now);
        }
        if restored > 0 {
            // Before the control thread serves: nobody waits on it.
            self.changed(false);
        }
        tracing::info!(
            restored,
            left_out,
            path = %path.display(),
            "port mappings restored"
        );
    }
}

/// Ports the gateway keeps on the external interface: its static forwards', and those the
/// `local` rules or the zone's policy may open to the interface's zone from any source (a
/// service of the gateway's own, which a forward would shadow).
fn kept(router: &RouterConfig, external: u16, protocol: u8, port: u16) -> bool {
    let stateful = &router.stateful;
    let forwarded = (stateful.port_forwards.iter()).any(|forward| {
        forward.interface == external
            && forward.protocol == protocol
            && forward.ports.contains(&port)
    });
    let Some(&zone) = stateful.zones.get(usize::from(external)) else {
        return forwarded;
    };
    let firewall = &stateful.firewall;
    let served = firewall.rules().iter().any(|rule| {
        rule.action == Action::Accept
            && rule.from.is_none_or(|from| from == zone)
            && rule.to.is_none_or(|to| to == ZoneId::LOCAL)
            && rule.protocol.is_none_or(|p| p == protocol)
            && rule
                .dst_ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&port))
            && rule.src6.is_none()
            && rule.dst6.is_none()
    });
    let open_policy = firewall.policy().default_for(zone, ZoneId::LOCAL) == Action::Accept;
    forwarded || served || open_policy
}

fn forward(external: u16, mapping: &Mapping) -> PortForward {
    PortForward {
        interface: external,
        protocol: mapping.protocol,
        ports: mapping.external_port..=mapping.external_port,
        to: mapping.internal,
        to_port: mapping.internal_port,
    }
}

fn protocol_name(protocol: u8) -> &'static str {
    match protocol {
        TCP => "tcp",
        _ => "udp",
    }
}

/// A mapping as the state file and `gateway ctl show nat` write it.
pub fn mapping_json(mapping: &Mapping) -> Value {
    json!({
        "protocol": protocol_name(mapping.protocol),
        "internal": mapping.internal.to_string(),
        "internal_port": mapping.internal_port,
        "external_port": mapping.external_port,
        "expires_at": mapping.expires_at,
        "origin": mapping.origin.label(),
        "nonce": mapping.nonce.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    })
}

fn mapping_from_json(value: &Value) -> Option<Mapping> {
    let port = |field: &str| u16::try_from(value[field].as_u64()?).ok();
    let nonce_text = value["nonce"].as_str()?;
    let bytes = crate::config::parse_hex(nonce_text).filter(|b| b.len() == 12)?;
    let mut nonce = [0; 12];
    nonce.copy_from_slice(&bytes);
    Some(Mapping {
        protocol: match value["protocol"].as_str()? {
            "tcp" => TCP,
            "udp" => UDP,
            _ => return None,
        },
        internal: value["internal"].as_str()?.parse().ok()?,
        internal_port: port("internal_port")?,
        external_port: port("external_port")?,
        expires_at: value["expires_at"].as_u64()?,
        origin: Origin::from_label(value["origin"].as_str()?)?,
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_survive_their_json() {
        let mapping = Mapping {
            protocol: TCP,
            internal: Ipv4Addr::new(192, 168, 10, 2),
            internal_port: 5000,
            external_port: 6000,
            expires_at: 1_800_000_000,
            origin: Origin::Pcp,
            nonce: [0xab; 12],
        };
        assert_eq!(mapping_from_json(&mapping_json(&mapping)), Some(mapping));
        let mut broken = mapping_json(&mapping);
        broken["nonce"] = json!("abcd");
        assert_eq!(mapping_from_json(&broken), None);
    }
}

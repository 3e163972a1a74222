//! The port mapping server: PCP (RFC 6887) and NAT-PMP (RFC 6886) on UDP 5351 of the
//! addresses of the interfaces `[port_mapping]` serves, on a thread of its own with sockets
//! in the twins' namespace. Requests reach it as any traffic for the gateway reaches the
//! kernel twins: punted by the workers once the `local` rules admit them, within the punt
//! budget. The table and its limits are `pipeline::portmap`'s; this thread answers, expires
//! mappings, keeps them in the state directory across restarts, and sends the whole set to
//! the control thread on each change, which compiles them into the router config as port
//! forwards of one port each (`pipeline::pipeline::config::PortMappings`).
//!
//! Why the gateway's own server and not miniupnpd (which speaks PCP and NAT-PMP too): a
//! refusal must reach the client as one (the 101st mapping of a host, a static forward's
//! port), and miniupnpd has no per-host or overall quota; its mappings would live in the
//! twins' nftables, which the gateway would have to read back and prune behind its back.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pipeline::flow::FlowKey;
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

/// Requests answered per second over all hosts, and the burst: a host flooding requests
/// gets no more of the thread (each change compiles the router config again).
const REQUESTS_PER_SEC: u32 = 200;
const REQUESTS_BURST: u32 = 400;
/// How long a refusal stands before the client should ask again (the lifetime field of an
/// error response, RFC 6887 7.4).
const ERROR_LIFETIME_S: u32 = 30;
/// How long a change may take to reach the router config before the answers go anyway
/// (the control thread compiles it between its polls: milliseconds).
const PUBLISH_WAIT: Duration = Duration::from_millis(500);
/// Expiry and the external address are checked this often.
const TICK: Duration = Duration::from_secs(1);
/// Where the mappings are kept in the state directory.
pub const STATE_FILE: &str = "port-mappings.json";
/// All hosts: where the announcements go (RFC 6887 14.1.3, RFC 6886 3.2.1).
const ALL_HOSTS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);

/// What the thread serves, from the config at start (`[port_mapping]` is restart-only).
pub struct Setup {
    /// The served interfaces: (index, address).
    pub served: Vec<(u16, Ipv4Addr)>,
    /// The interface whose address mappings take.
    pub external: u16,
    pub limits: pipeline::portmap::Limits,
    /// Where the mappings are kept across restarts (None: `state.snapshot` is off).
    pub state_file: Option<PathBuf>,
    pub netns: Option<String>,
    /// The NAT log's queue for mapping events (`[nat.log]`), drained with the workers'.
    pub nat_log: Option<Arc<NatLog>>,
}

impl Setup {
    /// None when port mapping is off.
    pub fn from_config(config: &GatewayConfig) -> Option<Setup> {
        let external = config.port_mapping_external()?;
        let served = config
            .port_mapping_interfaces()
            .into_iter()
            .filter_map(|index| {
                let cidr = config.interfaces[index].address.cidr()?;
                Some((index as u16, cidr.addr))
            })
            .collect();
        Some(Setup {
            served,
            external: external as u16,
            limits: config.port_mapping.limits(),
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
        })
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
    #[error("port mapping: listening on {address}:{SERVER_PORT} (is its kernel twin up?)")]
    Bind {
        address: Ipv4Addr,
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

/// One socket per served address, in the twins' namespace; announcements leave by it.
fn open(setup: &Setup) -> Result<Vec<std::net::UdpSocket>, PortMappingError> {
    if let Some(netns) = &setup.netns {
        enter_namespace(netns).map_err(PortMappingError::Namespace)?;
    }
    setup
        .served
        .iter()
        .map(|&(_, address)| {
            let bind = |address: Ipv4Addr| -> std::io::Result<std::net::UdpSocket> {
                use socket2::{Domain, Socket, Type};
                let socket = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
                socket.set_reuse_address(true)?;
                socket.bind(&SocketAddr::V4(SocketAddrV4::new(address, SERVER_PORT)).into())?;
                socket.set_multicast_if_v4(&address)?;
                socket.set_multicast_ttl_v4(1)?;
                socket.set_nonblocking(true)?;
                Ok(socket.into())
            };
            bind(address).map_err(|source| PortMappingError::Bind { address, source })
        })
        .collect()
}

struct Server<P> {
    setup: Setup,
    sockets: Vec<std::net::UdpSocket>,
    router: Arc<Published<RouterConfig>>,
    status: Arc<PortMappingStatus>,
    publish: P,
    table: MappingTable,
    /// The Unix second the mappings' epoch began (RFC 6887 8.5): at the first start, kept
    /// across restarts with the mappings.
    epoch_start: u64,
    budget: TokenBucket,
    started: Instant,
    /// The external address last announced.
    announced: Option<Ipv4Addr>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl<P: Fn(PortMappings)> Server<P> {
    fn new(
        setup: Setup,
        sockets: Vec<std::net::UdpSocket>,
        router: Arc<Published<RouterConfig>>,
        status: Arc<PortMappingStatus>,
        publish: P,
    ) -> Self {
        let table = MappingTable::new(setup.limits.clone());
        let mut server = Server {
            setup,
            sockets,
            router,
            status,
            publish,
            table,
            epoch_start: unix_now(),
            budget: TokenBucket::new(REQUESTS_PER_SEC, REQUESTS_BURST),
            started: Instant::now(),
            announced: None,
        };
        server.restore();
        server
    }

    fn serve(mut self, stop: &AtomicBool) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut next_tick = Instant::now();
        let mut buf = [0u8; pcp::MAX_LEN + 4];
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if let Some(log) = &self.setup.nat_log {
                // The NAT log dates events by this clock's reading at its drain.
                log.set_now(self.started.elapsed().as_nanos() as u64);
            }
            if now >= next_tick {
                self.tick();
                next_tick = now + TICK;
            }
            let ready: Vec<bool> = {
                let mut fds: Vec<PollFd> = (self.sockets.iter())
                    .map(|socket| PollFd::new(socket.as_fd(), PollFlags::POLLIN))
                    .collect();
                if poll(&mut fds, PollTimeout::from(200u16)).unwrap_or(0) <= 0 {
                    continue;
                }
                fds.iter()
                    .map(|fd| fd.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
                    .collect()
            };
            let mut changed = false;
            let mut answers = Vec::new();
            let ready = ready.into_iter().enumerate().filter(|&(_, ready)| ready);
            for (served, _) in ready {
                while let Ok((len, from)) = self.sockets[served].recv_from(&mut buf) {
                    if let SocketAddr::V4(from) = from {
                        changed |= self.handle(served, &buf[..len], from, &mut answers);
                    }
                }
            }
            if changed {
                self.changed(true);
            }
            // A client told "mapped" may be reached through the mapping at once.
            for (served, answer, to) in answers {
                let _ = self.sockets[served].send_to(&answer, to);
            }
        }
    }

    /// Expires mappings; announces a new external address.
    fn tick(&mut self) {
        let gone = self.table.expire(unix_now());
        for mapping in &gone {
            self.note(NatEventKind::Delete, mapping, "port mapping expired");
        }
        if !gone.is_empty() {
            self.changed(false);
        }
        let address = self.external_address();
        if address != self.announced && address.is_some() {
            self.announce(address.unwrap_or(Ipv4Addr::UNSPECIFIED));
            self.announced = address;
        }
    }

    fn epoch(&self) -> u32 {
        unix_now().saturating_sub(self.epoch_start) as u32
    }

    fn external_address(&self) -> Option<Ipv4Addr> {
        let (router, _) = self.router.load();
        let iface = router.interfaces.get(usize::from(self.setup.external))?;
        iface.has_address().then(|| iface.masquerade_addr())
    }

    /// Both protocols' announcements on every served interface: clients renew their
    /// mappings (the address changed, or this gateway restarted and may have lost them).
    fn announce(&self, address: Ipv4Addr) {
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
        tracing::info!(external = %address, "port mapping: external address announced");
    }

    /// Answers one datagram (the answer goes to `answers`, sent once the workers have the
    /// table); returns whether the table changed.
    fn handle(
        &mut self,
        served: usize,
        bytes: &[u8],
        from: SocketAddrV4,
        answers: &mut Vec<(usize, Vec<u8>, SocketAddrV4)>,
    ) -> bool {
        let (router, _) = self.router.load();
        let (index, _) = self.setup.served[served];
        let origin = match bytes.first() {
            Some(&natpmp::VERSION) => Origin::NatPmp,
            _ => Origin::Pcp,
        };
        // Only the served link's own hosts: the `local` rules may admit more.
        let on_link = router
            .interfaces
            .get(usize::from(index))
            .is_some_and(|iface| iface.contains(*from.ip()) && !iface.is_own(*from.ip()));
        if !on_link || from.port() == 0 {
            self.status.count(origin, "foreign");
            return false;
        }
        let now_ns = self.started.elapsed().as_nanos() as u64;
        if !self.budget.try_take(now_ns) {
            self.status.count(origin, "policed");
            return false;
        }
        let external_port_of = self.setup.external;
        let kept = |protocol: u8, port: u16| kept(&router, external_port_of, protocol, port);
        let external = self.external_address();
        let before = self.table.mappings().to_vec();
        let mut out = [0u8; pcp::MAX_RESPONSE_LEN];
        let (len, result) = match origin {
            Origin::NatPmp => self.natpmp(bytes, *from.ip(), external, &kept, &mut out),
            Origin::Pcp => self.pcp(bytes, *from.ip(), external, &kept, &mut out),
        };
        if let Some(result) = result {
            self.status.count(origin, result);
        }
        if len > 0 {
            answers.push((served, out[..len].to_vec(), from));
        }
        let changed = self.table.mappings() != before.as_slice();
        if changed {
            self.note_changes(&before);
        }
        changed
    }

    /// A NAT-PMP request: the answer's length and the result counted.
    fn natpmp(
        &mut self,
        bytes: &[u8],
        host: Ipv4Addr,
        external: Option<Ipv4Addr>,
        kept: &impl Fn(u8, u16) -> bool,
        out: &mut [u8; pcp::MAX_RESPONSE_LEN],
    ) -> (usize, Option<&'static str>) {
        let epoch = self.epoch();
        let out: &mut [u8; natpmp::MAX_RESPONSE_LEN] = (&mut out[..natpmp::MAX_RESPONSE_LEN])
            .try_into()
            .expect("the room is larger");
        let request = match natpmp::parse(bytes) {
            Ok(request) => request,
            Err(natpmp::Unanswered::Ignore) => return (0, Some("malformed")),
            Err(natpmp::Unanswered::UnsupportedOpcode(op)) => {
                return (
                    natpmp::write_unsupported_opcode(out, op, epoch),
                    Some("unsupported"),
                )
            }
        };
        let natpmp::Request::Map {
            protocol,
            internal_port,
            suggested_port,
            lifetime,
        } = request
        else {
            let (result, address) = match external {
                Some(address) => (natpmp::result::SUCCESS, address),
                None => (natpmp::result::NETWORK_FAILURE, Ipv4Addr::UNSPECIFIED),
            };
            return (
                natpmp::write_address_response(out, result, epoch, address),
                Some("address"),
            );
        };
        let answer = |out: &mut [u8; natpmp::MAX_RESPONSE_LEN], result, granted: (u16, u32)| {
            natpmp::write_map_response(
                out,
                protocol,
                result,
                epoch,
                (internal_port, granted.0, granted.1),
            )
        };
        if external.is_none() {
            let len = answer(out, natpmp::result::NETWORK_FAILURE, (0, 0));
            return (len, Some("no_external_address"));
        }
        if lifetime == 0 {
            let deleted = match internal_port {
                0 => Ok(self.table.unmap_host(protocol, host) > 0),
                port => self.table.unmap(protocol, host, port, None),
            };
            return match deleted {
                Ok(_) => (
                    answer(out, natpmp::result::SUCCESS, (0, 0)),
                    Some("deleted"),
                ),
                Err(refusal) => (
                    answer(out, natpmp::result::REFUSED, (0, 0)),
                    Some(refusal.label()),
                ),
            };
        }
        let ask = Ask {
            protocol,
            internal: host,
            internal_port,
            suggested_port,
            lifetime,
            origin: Origin::NatPmp,
            nonce: [0; 12],
            prefer_failure: false,
        };
        match self.table.map(&ask, unix_now(), kept) {
            Ok(Granted {
                external_port,
                lifetime,
            }) => (
                answer(out, natpmp::result::SUCCESS, (external_port, lifetime)),
                Some("mapped"),
            ),
            Err(refusal) => {
                let result = match refusal {
                    Refusal::NotOwner => natpmp::result::REFUSED,
                    _ => natpmp::result::OUT_OF_RESOURCES,
                };
                (answer(out, result, (0, 0)), Some(refusal.label()))
            }
        }
    }

    /// A PCP request: the answer's length and the result counted.
    fn pcp(
        &mut self,
        bytes: &[u8],
        host: Ipv4Addr,
        external: Option<Ipv4Addr>,
        kept: &impl Fn(u8, u16) -> bool,
        out: &mut [u8; pcp::MAX_RESPONSE_LEN],
    ) -> (usize, Option<&'static str>) {
        let epoch = self.epoch();
        let echo = |map: &pcp::Map| pcp::MapAnswer {
            nonce: map.nonce,
            protocol: map.protocol,
            internal_port: map.internal_port,
            external_port: map.suggested_port,
            external_address: map.suggested_address,
        };
        let refuse = |out: &mut [u8; pcp::MAX_RESPONSE_LEN], op, result, map: Option<&pcp::Map>| {
            let answer = map.map(echo);
            pcp::write_response(out, op, (result, ERROR_LIFETIME_S, epoch), answer.as_ref())
        };
        let request = match pcp::parse(bytes) {
            Ok(request) => request,
            Err(pcp::Unanswered::Ignore) => return (0, Some("malformed")),
            Err(pcp::Unanswered::Error {
                opcode,
                result,
                map,
            }) => {
                let label = match result {
                    pcp::result::UNSUPP_VERSION
                    | pcp::result::UNSUPP_OPCODE
                    | pcp::result::UNSUPP_OPTION => "unsupported",
                    _ => "malformed",
                };
                return (refuse(out, opcode, result, map.as_ref()), Some(label));
            }
        };
        let op = request.opcode;
        if request.client != pcp::mapped(host) {
            let len = refuse(out, op, pcp::result::ADDRESS_MISMATCH, request.map.as_ref());
            return (len, Some("address_mismatch"));
        }
        let Some(map) = request.map else {
            // ANNOUNCE: answered, so that a client can learn the epoch.
            let len = pcp::write_response(out, op, (pcp::result::SUCCESS, 0, epoch), None);
            return (len, Some("announce"));
        };
        let refused = |out: &mut [u8; pcp::MAX_RESPONSE_LEN], result, label| {
            (refuse(out, op, result, Some(&map)), Some(label))
        };
        if map.third_party.is_some_and(|third| third != request.client) {
            return refused(out, pcp::result::NOT_AUTHORIZED, "third_party");
        }
        if !matches!(map.protocol, TCP | UDP) {
            return refused(out, pcp::result::UNSUPP_PROTOCOL, "unsupported");
        }
        if map.internal_port == 0 {
            return refused(out, pcp::result::MALFORMED_REQUEST, "malformed");
        }
        let Some(address) = external else {
            return refused(out, pcp::result::NETWORK_FAILURE, "no_external_address");
        };
        let elsewhere =
            !pcp::is_any(map.suggested_address) && map.suggested_address != pcp::mapped(address);
        if elsewhere && map.prefer_failure {
            return refused(
                out,
                pcp::result::CANNOT_PROVIDE_EXTERNAL,
                Refusal::PortUnavailable.label(),
            );
        }
        let granted = |external_port, lifetime| {
            let answer = pcp::MapAnswer {
                external_port,
                external_address: pcp::mapped(address),
                ..echo(&map)
            };
            (answer, lifetime)
        };
        if request.lifetime == 0 {
            return match self
                .table
                .unmap(map.protocol, host, map.internal_port, Some(map.nonce))
            {
                Ok(_) => {
                    let (answer, _) = granted(0, 0);
                    let result = (pcp::result::SUCCESS, 0, epoch);
                    (
                        pcp::write_response(out, op, result, Some(&answer)),
                        Some("deleted"),
                    )
                }
                Err(refusal) => refused(out, pcp::result::NOT_AUTHORIZED, refusal.label()),
            };
        }
        let ask = Ask {
            protocol: map.protocol,
            internal: host,
            internal_port: map.internal_port,
            suggested_port: map.suggested_port,
            lifetime: request.lifetime,
            origin: Origin::Pcp,
            nonce: map.nonce,
            prefer_failure: map.prefer_failure,
        };
        match self.table.map(&ask, unix_now(), kept) {
            Ok(Granted {
                external_port,
                lifetime,
            }) => {
                let (answer, lifetime) = granted(external_port, lifetime);
                let result = (pcp::result::SUCCESS, lifetime, epoch);
                (
                    pcp::write_response(out, op, result, Some(&answer)),
                    Some("mapped"),
                )
            }
            Err(refusal) => {
                let result = match refusal {
                    Refusal::HostQuota => pcp::result::USER_EX_QUOTA,
                    Refusal::TableFull | Refusal::NoFreePort => pcp::result::NO_RESOURCES,
                    Refusal::PortUnavailable => pcp::result::CANNOT_PROVIDE_EXTERNAL,
                    Refusal::NotOwner => pcp::result::NOT_AUTHORIZED,
                };
                refused(out, result, refusal.label())
            }
        }
    }

    /// Logs the mappings the table gained since `before`, and those it lost.
    fn note_changes(&self, before: &[Mapping]) {
        let same = |a: &Mapping, b: &Mapping| {
            (a.protocol, a.internal, a.internal_port, a.external_port)
                == (b.protocol, b.internal, b.internal_port, b.external_port)
        };
        let after = self.table.mappings();
        for mapping in after.iter().filter(|m| !before.iter().any(|b| same(m, b))) {
            self.note(NatEventKind::Create, mapping, "port mapping created");
        }
        for mapping in before.iter().filter(|m| !after.iter().any(|a| same(m, a))) {
            self.note(NatEventKind::Delete, mapping, "port mapping deleted");
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
            let now_ns = self.started.elapsed().as_nanos() as u64;
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

    /// The table changed: the router config takes the new set (waited for when
    /// `answers_wait`, so that the answers sent next hold), the status and the state file
    /// follow.
    fn changed(&mut self, answers_wait: bool) {
        let forwards = (self.table.mappings().iter())
            .map(|mapping| forward(self.setup.external, mapping))
            .collect();
        let mappings = PortMappings::new(forwards);
        (self.publish)(mappings.clone());
        let deadline = Instant::now() + PUBLISH_WAIT;
        while answers_wait && self.router.load().0.stateful.port_mappings != mappings {
            if Instant::now() >= deadline {
                tracing::warn!("port mappings not in the router config after {PUBLISH_WAIT:?}");
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        *self
            .status
            .mappings
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.table.mappings().to_vec();
        self.save();
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

    /// The mappings kept by the last run, checked again against this one's limits and
    /// forwards; its epoch goes on if any are restored.
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
        let mappings: Vec<Mapping> = (saved["mappings"].as_array().into_iter().flatten())
            .filter_map(mapping_from_json)
            .collect();
        let (router, _) = self.router.load();
        let external = self.setup.external;
        let now = unix_now();
        let left_out = self.table.restore(mappings, now, |protocol, port| {
            kept(&router, external, protocol, port)
        });
        let restored = self.table.mappings().len();
        if restored > 0 {
            self.epoch_start = saved["epoch_start"].as_u64().unwrap_or(now).min(now);
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

/// Ports the gateway keeps on the external interface: its static forwards', and those its
/// `local` rules open to the interface's zone (a service of the gateway's own).
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
    let address = router
        .interfaces
        .get(usize::from(external))
        .map_or(Ipv4Addr::UNSPECIFIED, |iface| iface.masquerade_addr());
    let key = FlowKey {
        src: Ipv4Addr::UNSPECIFIED,
        dst: address,
        src_port: 0,
        dst_port: port,
        protocol,
    };
    let served = matches!(
        stateful.firewall.evaluate(zone, ZoneId::LOCAL, &key, None),
        (Action::Accept, Some(_))
    );
    forwarded || served
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

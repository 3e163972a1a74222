//! The control thread's side of PPPoE: one client per `address = "pppoe"` interface, fed the
//! frames the workers hand to control and polled for its timers. When a session comes up or
//! goes down it sets the workers' [`SessionStates`], and what it negotiated (the address,
//! the peer and its MAC, the DNS servers, IPv6CP's link-local addresses) becomes a
//! [`PppoeView`] for the router config.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

use pipeline::pppoe::client::{Client, ClientConfig, ClientCounters, EndReason, Session};
use pipeline::KernelRoute;

use crate::config::{GatewayConfig, PppoeConfig};
use crate::dataplane::pppoe_frames::{SessionState, SessionStates};

/// What the PPPoE sessions give the router: per interface its address (a /32: the link is
/// point to point), the routes through the peers, and each peer's MAC (the access
/// concentrator's), which no ARP would find.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PppoeView {
    pub addresses: Vec<Option<(Ipv4Addr, u8)>>,
    pub routes: Vec<KernelRoute>,
    pub peers: Vec<(Ipv4Addr, [u8; 6])>,
    /// Per interface, the session's MTU: the configured one, or a peer's smaller MRU.
    pub mtus: Vec<Option<u16>>,
    /// The sessions that carry IPv6 (IPv6CP open).
    pub ipv6: Vec<SessionIpv6>,
}

/// One session's IPv6, as IPv6CP opened it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionIpv6 {
    pub iface: u16,
    /// Our link-local address (the dataplane's on the interface, and its twin's).
    pub local: Ipv6Addr,
    /// The session's MTU, the twin's.
    pub mtu: u16,
}

impl PppoeView {
    /// Per interface, the link-local address its session's IPv6CP agreed.
    pub fn link_locals6(&self) -> Vec<Option<Ipv6Addr>> {
        let mut all = Vec::new();
        for session in &self.ipv6 {
            let index = usize::from(session.iface);
            if all.len() <= index {
                all.resize(index + 1, None);
            }
            all[index] = Some(session.local);
        }
        all
    }
}

/// One interface's session, for metrics and `gateway ctl`.
#[derive(Clone, Debug, Default)]
pub struct LinkStatus {
    pub interface: String,
    pub state: &'static str,
    pub session_id: Option<u16>,
    pub local: Option<Ipv4Addr>,
    pub peer: Option<Ipv4Addr>,
    pub dns: Vec<Ipv4Addr>,
    pub mtu: Option<u16>,
    /// The peer's link-local address while IPv6CP is open ("::" if it named none).
    pub ipv6_peer: Option<Ipv6Addr>,
    pub ipv6_opened: u64,
    pub ipv6_failures: u64,
    pub sessions_up: u64,
    /// Per [`EndReason`], in `EndReason::ALL` order.
    pub ends: Vec<(&'static str, u64)>,
    pub control_sent: u64,
    pub control_received: u64,
    pub malformed: u64,
    pub ignored: u64,
    pub echo_requests_sent: u64,
    pub echo_replies_received: u64,
}

/// Every PPPoE interface's status, written by the control thread after each change and read
/// by the metrics thread.
#[derive(Debug, Default)]
pub struct PppoeStatus {
    links: Mutex<Vec<LinkStatus>>,
}

impl PppoeStatus {
    pub fn links(&self) -> Vec<LinkStatus> {
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

struct Link {
    iface: u16,
    name: String,
    config: PppoeConfig,
    /// Whether the interface has IPv6, so the client negotiates IPv6CP.
    ipv6: bool,
    /// The client's IPv6CP failures already logged.
    ipv6_failures_logged: u64,
    client: Client,
    /// The counters of the clients a reload replaced, so the interface's totals carry on.
    earlier: ClientCounters,
    /// What the workers and the router were last told.
    applied: (SessionState, Option<Session>),
}

pub struct PppoeLinks {
    links: Vec<Link>,
    sessions: Arc<SessionStates>,
    status: Arc<PppoeStatus>,
    /// Frames the clients want sent, reused between calls.
    out: Vec<Vec<u8>>,
    /// Whether a session's address or peer changed since the last `take_view`.
    view_changed: bool,
    seed: u64,
}

impl Default for PppoeLinks {
    fn default() -> Self {
        PppoeLinks {
            links: Vec::new(),
            sessions: Arc::new(SessionStates::new(0)),
            status: Arc::default(),
            out: Vec::new(),
            view_changed: false,
            seed: 0,
        }
    }
}

fn client_config(config: &PppoeConfig, mac: [u8; 6], mtu: u16, ipv6: bool) -> ClientConfig {
    ClientConfig {
        username: config.username.clone(),
        password: config.password.clone(),
        service_name: config.service_name.clone(),
        ac_name: config.ac_name.clone(),
        mac,
        mru: mtu,
        echo_interval_ns: config.lcp_echo_interval_secs.saturating_mul(1_000_000_000),
        echo_failures: config.lcp_echo_failures,
        ipv6,
    }
}

impl PppoeLinks {
    /// A client for each PPPoE interface of `config` (none started yet); `macs` per
    /// interface, `seed` for the clients' magic numbers and Host-Uniq.
    pub fn new(
        config: &GatewayConfig,
        macs: &[[u8; 6]],
        sessions: Arc<SessionStates>,
        seed: u64,
    ) -> PppoeLinks {
        let mut links = PppoeLinks {
            sessions,
            seed,
            ..PppoeLinks::default()
        };
        for (index, iface) in config.interfaces.iter().enumerate() {
            let (Some(pppoe), Some(mac)) = (&iface.pppoe, macs.get(index)) else {
                continue;
            };
            let ipv6 = iface.ipv6.is_some();
            let config = client_config(pppoe, *mac, iface.mtu(), ipv6);
            let client = Client::new(config, links.next_seed());
            links.links.push(Link {
                iface: index as u16,
                name: iface.name.clone(),
                config: pppoe.clone(),
                ipv6,
                ipv6_failures_logged: 0,
                client,
                earlier: ClientCounters::default(),
                applied: (SessionState::DOWN, None),
            });
        }
        links.publish_status();
        links
    }

    fn next_seed(&mut self) -> u64 {
        // splitmix64's increment: each client (and each restart) gets its own stream.
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.seed
    }

    pub fn status(&self) -> Arc<PppoeStatus> {
        self.status.clone()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Sends every client's first PADI.
    pub fn start(&mut self, now_ns: u64, mut send: impl FnMut(u16, &[u8])) {
        for index in 0..self.links.len() {
            self.links[index].client.start(now_ns, &mut self.out);
            self.after(index, &mut send);
        }
    }

    /// A discovery or PPP control frame that arrived on interface `iface` (untagged).
    pub fn receive(
        &mut self,
        iface: u16,
        frame: &[u8],
        now_ns: u64,
        mut send: impl FnMut(u16, &[u8]),
    ) -> bool {
        let Some(index) = self.links.iter().position(|link| link.iface == iface) else {
            return false;
        };
        self.links[index]
            .client
            .receive(frame, now_ns, &mut self.out);
        self.after(index, &mut send);
        true
    }

    /// The clients' timers: retransmissions, echoes, backoff.
    pub fn poll(&mut self, now_ns: u64, mut send: impl FnMut(u16, &[u8])) {
        for index in 0..self.links.len() {
            self.links[index].client.poll(now_ns, &mut self.out);
            self.after(index, &mut send);
        }
    }

    /// A reload: a client whose settings changed ends its session politely and starts again
    /// with the new ones (credentials apply only by reconnecting).
    pub fn reconfigure(
        &mut self,
        config: &GatewayConfig,
        macs: &[[u8; 6]],
        now_ns: u64,
        mut send: impl FnMut(u16, &[u8]),
    ) {
        for index in 0..self.links.len() {
            let iface = usize::from(self.links[index].iface);
            let (Some(new), Some(mac)) = (
                config.interfaces.get(iface).and_then(|i| i.pppoe.as_ref()),
                macs.get(iface),
            ) else {
                continue;
            };
            let ipv6 = config.interfaces[iface].ipv6.is_some();
            if (new, ipv6) == (&self.links[index].config, self.links[index].ipv6) {
                continue;
            }
            tracing::info!(
                interface = %self.links[index].name,
                "PPPoE settings changed: reconnecting with the new ones"
            );
            self.links[index].client.stop(&mut self.out);
            self.after(index, &mut send);
            let mtu = config.interfaces[iface].mtu();
            let seed = self.next_seed();
            let link = &mut self.links[index];
            link.earlier = link.earlier.plus(link.client.counters());
            link.client = Client::new(client_config(new, *mac, mtu, ipv6), seed);
            link.config = new.clone();
            link.ipv6 = ipv6;
            link.ipv6_failures_logged = 0;
            link.client.start(now_ns, &mut self.out);
            self.after(index, &mut send);
        }
    }

    /// Ends every session (LCP Terminate, PADT), at shutdown.
    pub fn stop(&mut self, mut send: impl FnMut(u16, &[u8])) {
        for index in 0..self.links.len() {
            self.links[index].client.stop(&mut self.out);
            self.after(index, &mut send);
        }
    }

    /// After a client ran: its frames go out, and a changed session reaches the workers (and
    /// the router, through `take_view`).
    fn after(&mut self, index: usize, send: &mut impl FnMut(u16, &[u8])) {
        let link = &mut self.links[index];
        for frame in self.out.drain(..) {
            send(link.iface, &frame);
        }
        let ipv6_failures = link.client.counters().ipv6_failures;
        if ipv6_failures > link.ipv6_failures_logged {
            link.ipv6_failures_logged = ipv6_failures;
            tracing::warn!(
                interface = %link.name,
                "PPPoE session without IPv6: the peer refused IPv6CP or did not answer it, or the link is below IPv6's 1280 bytes"
            );
        }
        let session = link.client.session().cloned();
        let discovered = link.client.discovery_session();
        let ipv6 = session.as_ref().and_then(|up| up.ipv6);
        let mut state = SessionState::new(discovered.map(|(id, _)| id), session.is_some())
            .with_ipv6(ipv6.is_some());
        if let Some((_, ac_mac)) = discovered {
            state = state.from_access_concentrator(ac_mac);
        }
        if (state, &session) == (link.applied.0, &link.applied.1) {
            return;
        }
        let was_up = link.applied.1.is_some();
        match &session {
            Some(up) if !was_up => tracing::info!(
                interface = %link.name,
                session_id = up.id,
                local = %up.local,
                peer = %up.peer,
                dns = ?up.dns,
                mtu = up.mtu,
                "PPPoE session up"
            ),
            None if was_up => tracing::warn!(
                interface = %link.name,
                state = link.client.state().name(),
                "PPPoE session down"
            ),
            _ => {}
        }
        let had_ipv6 = link.applied.1.as_ref().and_then(|up| up.ipv6);
        match (had_ipv6, ipv6) {
            (None, Some(up)) => tracing::info!(
                interface = %link.name,
                local = %up.local_link_local(),
                peer = %up.peer_link_local().map_or("(not named)".to_string(), |a| a.to_string()),
                "PPPoE session carries IPv6 (IPv6CP open)"
            ),
            (Some(_), None) if session.is_some() => tracing::warn!(
                interface = %link.name,
                "PPPoE session carries IPv4 only: IPv6CP closed"
            ),
            _ => {}
        }
        // Datagrams stop before the router forgets the address, and start after it knows it
        // (the router's view follows on this thread's next turn): the few in between are
        // counted as pppoe_down.
        self.sessions.set(link.iface, state);
        if session != link.applied.1 {
            self.view_changed = true;
        }
        link.applied = (state, session);
        self.publish_status();
    }

    /// The sessions' addresses, routes and peers, if they changed since the last call.
    pub fn take_view(&mut self) -> Option<PppoeView> {
        if !std::mem::take(&mut self.view_changed) {
            return None;
        }
        Some(self.view())
    }

    pub fn view(&self) -> PppoeView {
        let mut view = PppoeView::default();
        for link in &self.links {
            let Some(session) = &link.applied.1 else {
                continue;
            };
            let iface = usize::from(link.iface);
            if view.addresses.len() <= iface {
                view.addresses.resize(iface + 1, None);
                view.mtus.resize(iface + 1, None);
            }
            view.addresses[iface] = Some((session.local, 32));
            view.mtus[iface] = Some(session.mtu);
            view.peers.push((session.peer, session.ac_mac));
            view.routes.push(KernelRoute {
                destination: session.peer,
                len: 32,
                port: link.iface,
                via: None,
            });
            if link.config.default_route {
                view.routes.push(KernelRoute {
                    destination: Ipv4Addr::UNSPECIFIED,
                    len: 0,
                    port: link.iface,
                    via: Some(session.peer),
                });
            }
            if let Some(ipv6) = session.ipv6 {
                view.ipv6.push(SessionIpv6 {
                    iface: link.iface,
                    local: ipv6.local_link_local(),
                    mtu: session.mtu,
                });
            }
        }
        view
    }

    fn publish_status(&self) {
        let links = self
            .links
            .iter()
            .map(|link| {
                let counters = &link.earlier.plus(link.client.counters());
                let session = link.applied.1.as_ref();
                LinkStatus {
                    interface: link.name.clone(),
                    state: link.client.state().name(),
                    session_id: link.client.discovery_session().map(|(id, _)| id),
                    local: session.map(|s| s.local),
                    peer: session.map(|s| s.peer),
                    dns: session.map(|s| s.dns.clone()).unwrap_or_default(),
                    mtu: session.map(|s| s.mtu),
                    ipv6_peer: session
                        .and_then(|s| s.ipv6)
                        .map(|ipv6| ipv6.peer_link_local().unwrap_or(Ipv6Addr::UNSPECIFIED)),
                    ipv6_opened: counters.ipv6_opened,
                    ipv6_failures: counters.ipv6_failures,
                    sessions_up: counters.sessions_up,
                    ends: EndReason::ALL
                        .iter()
                        .map(|reason| (reason.name(), counters.ends[*reason as usize]))
                        .collect(),
                    control_sent: counters.control_sent,
                    control_received: counters.control_received,
                    malformed: counters.malformed,
                    ignored: counters.ignored,
                    echo_requests_sent: counters.echo_requests_sent,
                    echo_replies_received: counters.echo_replies_received,
                }
            })
            .collect();
        *self
            .status
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = links;
    }

    /// Counters move on every frame; the metrics see them at most this often.
    pub fn refresh_status(&self) {
        self.publish_status();
    }
}

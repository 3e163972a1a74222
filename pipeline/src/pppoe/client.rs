//! The PPPoE client's state machine: discovery (RFC 2516), then LCP (RFC 1661), PAP
//! (RFC 1334) or CHAP-MD5 (RFC 1994), and IPCP with DNS (RFC 1332, RFC 1877), until the
//! session is [`State::Up`]; then echoes keep watch on it, and any end leads through a backoff
//! to a new discovery. With [`ClientConfig::ipv6`], IPv6CP (RFC 5072) runs beside IPCP: the
//! session carries IPv6 once it opens ([`Session::ipv6`]), and a peer that refuses it leaves
//! the session to IPv4 alone.
//!
//! The phases follow one another; the client is in exactly one [`State`]:
//!
//! ```text
//! Stopped --start--> Discovery --PADO--> Requesting --PADS--> Lcp
//!                     ^    ^                 |                 | open (no auth asked: to Ipcp)
//!                     |    +--PADR timeout---+                 v
//!                     |                                  Authenticating
//!              backoff elapsed                                 | PAP Ack / CHAP Success
//!                     |                                        v
//!                  Backoff <-- any end: PADT, Terminate,  <-- Ipcp --open--> Up
//!                              echo timeout, retries exhausted, auth failure
//! ```
//!
//! IPv6CP is not a phase: it has its own restart timer, and neither its failure nor its end
//! ends the session.
//!
//! LCP, IPCP and IPv6CP use RFC 1661's option negotiation, reduced to what a client needs: each side
//! of the link has its own request, and a layer is open once our request was Acked and we
//! Acked the peer's. The full automaton's ten states collapse into those two flags, because a
//! client never passively waits for a peer nor has a layer above it that may close LCP on its
//! own.
//!
//! The client never trusts a received length and never grows anything per received frame
//! beyond the frames it answers with (at most a few per frame in).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use super::wire::{
    self, chap, code, control, ipcp_option, ipv6cp_option, lcp_option, pap, tag, ChapValue,
    ControlPacket, Options, PppPacket, PppoeFrame, Tags, BROADCAST_MAC, PPP_CHAP, PPP_IPCP,
    PPP_IPV4, PPP_IPV6, PPP_IPV6CP, PPP_LCP, PPP_PAP,
};

const SECOND_NS: u64 = 1_000_000_000;
/// PADI retransmission: the first wait, doubled after each PADI up to the cap, forever: there
/// is nothing better to do than look for an access concentrator.
const PADI_FIRST_INTERVAL_NS: u64 = SECOND_NS;
const PADI_MAX_INTERVAL_NS: u64 = 8 * SECOND_NS;
/// PADR retransmission; after the last one the chosen AC is given up and discovery restarts.
const PADR_INTERVAL_NS: u64 = 3 * SECOND_NS;
const PADR_MAX_SENDS: u32 = 5;
/// RFC 1661's Restart timer and Max-Configure, also used for PAP's retransmissions and for how
/// long we wait for a CHAP challenge.
const RESTART_INTERVAL_NS: u64 = 3 * SECOND_NS;
const MAX_CONFIGURE: u32 = 10;
/// RFC 1661's Max-Failure: after this many Configure-Naks in a row, the options we keep
/// Nak-ing are Rejected instead, so a peer that will not move cannot loop us forever.
const MAX_FAILURE: u32 = 5;
const MAX_AUTHENTICATE: u32 = 10;
/// The wait before a new discovery after a session ends: doubled per consecutive failure, so a
/// broken AC or wrong password is not hammered, and reset once a session comes up.
const BACKOFF_FIRST_NS: u64 = SECOND_NS;
const BACKOFF_MAX_NS: u64 = 32 * SECOND_NS;
/// RFC 1661's MRU when the peer does not state one.
const DEFAULT_PEER_MRU: u16 = 1500;
/// RFC 2516's most for the MRU: a 1500-byte Ethernet payload less PPPoE's 6 bytes and PPP's 2.
/// More only where the AC granted it by RFC 4638's PPP-Max-Payload.
const PPPOE_MRU: u16 = 1492;
/// The least MTU IPv6 may run on (RFC 8200 section 5).
const IPV6_MIN_MTU: u16 = 1280;
/// A discovery tag's type and length, before its value.
const TAG_HEADER_LEN: usize = 4;
/// The most a discovery frame carries after the PPPoE header in a 1500-byte payload.
const MAX_DISCOVERY_PAYLOAD: usize = 1500 - wire::PPPOE_HEADER_LEN;
/// The smallest MRU we accept from or grant to a peer: the datagram every IPv4 host must
/// take (RFC 791), and the config's own floor for an interface MTU. pppd takes 128, which
/// would leave an MTU below what the ICMP errors and the MSS clamp assume, and a 1,500-byte
/// datagram in a dozen fragments (issue 44); a peer that asks for less is Naked with this.
const MIN_MRU: u16 = 576;
/// The peer's address when its IPCP request gives none, as pppd uses.
const DEFAULT_PEER_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 64, 64, 64);
/// The Auth-Protocol option value for CHAP with MD5, which we suggest in a Nak when the peer
/// asks for an authentication we cannot do.
const CHAP_MD5_OPTION: [u8; 3] = {
    let protocol = PPP_CHAP.to_be_bytes();
    [protocol[0], protocol[1], chap::ALGORITHM_MD5]
};

/// What the gateway's configuration tells the client.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientConfig {
    pub username: String,
    pub password: String,
    /// The service to ask for; "" asks for any service.
    pub service_name: String,
    /// `Some`: accept PADOs only from the AC with that AC-Name.
    pub ac_name: Option<String>,
    /// Our MAC, the Ethernet source of every frame.
    pub mac: [u8; 6],
    /// Our MRU, normally 1492 (1500 less the PPPoE and PPP headers). Above 1492, discovery asks
    /// for it by RFC 4638's PPP-Max-Payload, and LCP asks for it only if the AC echoes the tag
    /// (else for 1492).
    pub mru: u16,
    /// LCP Echo-Request period once LCP is open; 0 sends no echoes.
    pub echo_interval_ns: u64,
    /// Unanswered echoes in a row that end the session; 0 never ends it for that.
    pub echo_failures: u32,
    /// Negotiate IPv6CP too (the interface has IPv6); false answers it with Protocol-Reject.
    pub ipv6: bool,
}

/// Hand-written so that the password never reaches a log through `{:?}`.
impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("service_name", &self.service_name)
            .field("ac_name", &self.ac_name)
            .field("mac", &self.mac)
            .field("mru", &self.mru)
            .field("echo_interval_ns", &self.echo_interval_ns)
            .field("echo_failures", &self.echo_failures)
            .field("ipv6", &self.ipv6)
            .finish()
    }
}

/// The phase the client is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Sending PADIs, waiting for a PADO we like.
    Discovery,
    /// Sent a PADR to the chosen AC, waiting for its PADS.
    Requesting,
    /// In a session; negotiating LCP.
    Lcp,
    /// LCP open; proving who we are with PAP or CHAP.
    Authenticating,
    /// Authenticated (or no authentication asked); negotiating IPCP.
    Ipcp,
    /// IPCP open both ways: [`Client::session`] is ready for the dataplane.
    Up,
    /// A session ended; waiting before a new discovery.
    Backoff,
    /// Not started, or stopped by [`Client::stop`]: sends nothing, ignores everything.
    Stopped,
}

impl State {
    /// Every state, in the order a session goes through them.
    pub const ALL: [State; 8] = [
        State::Discovery,
        State::Requesting,
        State::Lcp,
        State::Authenticating,
        State::Ipcp,
        State::Up,
        State::Backoff,
        State::Stopped,
    ];

    /// The name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            State::Discovery => "discovery",
            State::Requesting => "requesting",
            State::Lcp => "lcp",
            State::Authenticating => "authenticating",
            State::Ipcp => "ipcp",
            State::Up => "up",
            State::Backoff => "backoff",
            State::Stopped => "stopped",
        }
    }

    /// The phases that ride a PPPoE session (a PADS was accepted).
    fn has_session(self) -> bool {
        matches!(
            self,
            State::Lcp | State::Authenticating | State::Ipcp | State::Up
        )
    }

    /// The phases past LCP's opening, where echoes run and unknown protocols are rejected.
    fn lcp_is_open(self) -> bool {
        matches!(self, State::Authenticating | State::Ipcp | State::Up)
    }
}

/// Why a session ended: one counter each in [`ClientCounters::ends`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The AC sent a PADT.
    Padt,
    /// The peer sent an LCP (or IPCP) Terminate-Request.
    LcpTerminate,
    /// `echo_failures` Echo-Requests in a row went unanswered.
    EchoTimeout,
    /// LCP, authentication or IPCP ran out of retries, or could not agree at all (the peer
    /// rejected IP-Address, refused IPCP, or gave us no address).
    NegotiationTimeout,
    /// PAP Authenticate-Nak or CHAP Failure: wrong username or password.
    AuthFailed,
    /// [`Client::stop`].
    Stopped,
}

impl EndReason {
    pub const COUNT: usize = 6;
    pub const ALL: [EndReason; EndReason::COUNT] = [
        EndReason::Padt,
        EndReason::LcpTerminate,
        EndReason::EchoTimeout,
        EndReason::NegotiationTimeout,
        EndReason::AuthFailed,
        EndReason::Stopped,
    ];

    /// The name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            EndReason::Padt => "padt",
            EndReason::LcpTerminate => "lcp_terminate",
            EndReason::EchoTimeout => "echo_timeout",
            EndReason::NegotiationTimeout => "negotiation_timeout",
            EndReason::AuthFailed => "auth_failed",
            EndReason::Stopped => "stopped",
        }
    }
}

/// The negotiated session, what the dataplane needs to carry IPv4 over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The PPPoE session id of every session frame.
    pub id: u16,
    /// The AC's MAC, the Ethernet destination of every session frame.
    pub ac_mac: [u8; 6],
    /// Our IPv4 address.
    pub local: Ipv4Addr,
    /// The peer's IPv4 address (10.64.64.64 if it gave none, as pppd).
    pub peer: Ipv4Addr,
    /// The DNS servers IPCP gave us, primary first; none if the peer rejected the options.
    pub dns: Vec<Ipv4Addr>,
    /// The largest IPv4 packet to send: our MRU (as negotiated) and the peer's, whichever is
    /// smaller.
    pub mtu: u16,
    /// IPv6CP's outcome once it opened: the session carries IPv6 too.
    pub ipv6: Option<Ipv6Link>,
}

/// The interface identifiers IPv6CP agreed (RFC 5072): each end's link-local address is
/// fe80::/64 with its identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Link {
    /// Ours: the modified EUI-64 of our MAC unless the peer Naked it with another (as
    /// BRASes that assign identifiers do), which we then take.
    pub local_id: [u8; 8],
    /// The peer's, if its request named one.
    pub peer_id: Option<[u8; 8]>,
}

impl Ipv6Link {
    pub fn local_link_local(&self) -> Ipv6Addr {
        link_local_of(self.local_id)
    }

    /// The peer's link-local address: the source of its Router Advertisements, the next hop
    /// of the routes they give.
    pub fn peer_link_local(&self) -> Option<Ipv6Addr> {
        self.peer_id.map(link_local_of)
    }
}

fn link_local_of(id: [u8; 8]) -> Ipv6Addr {
    let mut octets = [0u8; 16];
    octets[..2].copy_from_slice(&[0xfe, 0x80]);
    octets[8..].copy_from_slice(&id);
    Ipv6Addr::from(octets)
}

/// The modified EUI-64 interface identifier of `mac` (RFC 4291 appendix A).
fn modified_eui64(mac: [u8; 6]) -> [u8; 8] {
    let [a, b, c, d, e, f] = mac;
    [a ^ 0x02, b, c, 0xff, 0xfe, d, e, f]
}

/// What the client did, for metrics.
#[derive(Clone, Debug, Default)]
pub struct ClientCounters {
    /// Frames pushed to `out`.
    pub control_sent: u64,
    /// Frames handed to [`Client::receive`], whatever became of them.
    pub control_received: u64,
    /// Received frames refused by the parser.
    pub malformed: u64,
    /// Well-formed received frames that were not for us or came in the wrong state.
    pub ignored: u64,
    pub echo_requests_sent: u64,
    pub echo_replies_received: u64,
    /// Sessions that reached [`State::Up`].
    pub sessions_up: u64,
    /// Sessions (a PADS accepted) that ended, by [`EndReason`] (`ends[reason as usize]`).
    pub ends: [u64; EndReason::COUNT],
    /// Times IPv6CP opened, and times it failed (the peer refused it, Nak'ed our interface
    /// identifier, or did not answer): the session then carries IPv4 alone.
    pub ipv6_opened: u64,
    pub ipv6_failures: u64,
    /// Discovery attempts that failed after a PADO was chosen, before any session: a PADS
    /// with an error tag or no session id, or no PADS after every PADR. Not in `ends`, since
    /// no session had begun.
    pub discovery_failures: u64,
}

impl ClientCounters {
    /// These counters plus `other`'s: the totals of an interface over the clients a reload
    /// replaced.
    pub fn plus(&self, other: &ClientCounters) -> ClientCounters {
        let mut ends = self.ends;
        for (sum, more) in ends.iter_mut().zip(other.ends) {
            *sum += more;
        }
        ClientCounters {
            control_sent: self.control_sent + other.control_sent,
            control_received: self.control_received + other.control_received,
            malformed: self.malformed + other.malformed,
            ignored: self.ignored + other.ignored,
            echo_requests_sent: self.echo_requests_sent + other.echo_requests_sent,
            echo_replies_received: self.echo_replies_received + other.echo_replies_received,
            sessions_up: self.sessions_up + other.sessions_up,
            ends,
            ipv6_opened: self.ipv6_opened + other.ipv6_opened,
            ipv6_failures: self.ipv6_failures + other.ipv6_failures,
            discovery_failures: self.discovery_failures + other.discovery_failures,
        }
    }
}

/// The authentication the peer asked for in its LCP Configure-Request, which we Acked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Authentication {
    None,
    Pap,
    ChapMd5,
}

/// The layers that negotiate options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    Lcp,
    Ipcp,
    Ipv6cp,
}

/// What a Configure-Request's options came to (`Client::answer_configure_request`): those to
/// Reject, and the Nak's suggestions with the options they answer as received.
struct RequestVerdict {
    rejected: Vec<u8>,
    naked: Vec<u8>,
    naked_as_received: Vec<u8>,
}

/// IPv6CP's progress: it runs beside IPCP, on its own timer.
#[derive(Clone, Debug, Default)]
struct Ipv6cp {
    negotiation: Negotiation,
    /// Whether a negotiation is running (or open); false before the network phase, after a
    /// failure, and after the peer terminated it.
    active: bool,
    /// Whether our requests still carry the Interface-Identifier (the peer may Reject it).
    ask_id: bool,
    /// The identifier we ask for: the MAC's, or the one the peer's Nak suggested.
    local_id: [u8; 8],
    /// The peer's, once we Acked it; and the one its latest request named, Acked or not,
    /// which a Nak must not hand us.
    peer_id: Option<[u8; 8]>,
    peer_asked: Option<[u8; 8]>,
    due_ns: Option<u64>,
    sends: u32,
    open: Option<Ipv6Link>,
}

/// One layer's progress through RFC 1661 option negotiation.
#[derive(Clone, Debug, Default)]
struct Negotiation {
    /// The identifier of our outstanding Configure-Request; replies with another are stale.
    request_id: u8,
    /// The options of that request: an Ack must carry exactly these (RFC 1661 section 5.2).
    request: Vec<u8>,
    ack_received: bool,
    ack_sent: bool,
    /// Configure-Naks we sent in a row, for Max-Failure.
    naks_sent: u32,
}

impl Negotiation {
    fn new(first_id: u8) -> Negotiation {
        Negotiation {
            request_id: first_id,
            ..Negotiation::default()
        }
    }

    fn is_open(&self) -> bool {
        self.ack_received && self.ack_sent
    }

    /// Whether an Ack, Nak or Reject with this identifier answers our current request.
    fn awaits_reply(&self, identifier: u8) -> bool {
        !self.ack_received && identifier == self.request_id
    }

    /// Whether `ack` Acks our current request: its identifier, and exactly its options (RFC
    /// 1661 section 5.2).
    fn is_acked_by(&self, ack: &ControlPacket<'_>) -> bool {
        self.awaits_reply(ack.identifier) && ack.data == self.request.as_slice()
    }
}

/// What we ask for in our LCP Configure-Request. An option the peer Rejected is left out of
/// later requests.
#[derive(Clone, Debug)]
struct LcpWants {
    mru: u16,
    ask_mru: bool,
    ask_magic: bool,
}

/// What we ask for in our IPCP Configure-Request: 0.0.0.0 means "give me one", and a Nak
/// replaces it with what the peer offers. `None`: the peer Rejected that DNS option.
#[derive(Clone, Debug)]
struct IpcpWants {
    address: Ipv4Addr,
    primary_dns: Option<Ipv4Addr>,
    secondary_dns: Option<Ipv4Addr>,
}

impl Default for IpcpWants {
    fn default() -> IpcpWants {
        IpcpWants {
            address: Ipv4Addr::UNSPECIFIED,
            primary_dns: Some(Ipv4Addr::UNSPECIFIED),
            secondary_dns: Some(Ipv4Addr::UNSPECIFIED),
        }
    }
}

/// SplitMix64: enough to make magic numbers, Host-Uniqs and identifiers that differ between
/// clients and attempts; nothing here needs to be unpredictable to an attacker on the link,
/// who sees every frame anyway.
#[derive(Clone, Debug)]
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_u8(&mut self) -> u8 {
        self.next_u64().to_be_bytes()[0]
    }
}

/// How a received frame was taken, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Handled,
    Ignored,
    Malformed,
}

/// The PPPoE client. See the module documentation.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    rng: SplitMix64,
    state: State,
    counters: ClientCounters,

    /// The deadline of the current phase's timer (retransmission, or the end of a backoff).
    phase_due_ns: Option<u64>,
    /// Frames the current phase has sent (PADIs, PADRs, Configure-Requests, PAP requests), or
    /// for CHAP the restart intervals spent waiting: what the retry limits count.
    phase_sends: u32,
    padi_interval_ns: u64,
    /// The next backoff's length.
    backoff_ns: u64,

    host_uniq: [u8; 8],
    ac_mac: [u8; 6],
    /// 0 until a PADS is accepted.
    session_id: u16,
    ac_cookie: Option<Vec<u8>>,
    relay_session_id: Option<Vec<u8>>,
    /// The PPP-Max-Payload the AC's PADS granted (RFC 4638), above 1492; None: 1492.
    max_payload: Option<u16>,

    magic: u32,
    lcp: Negotiation,
    lcp_wants: LcpWants,
    peer_mru: u16,
    peer_authentication: Authentication,
    /// Identifier of our Echo-Requests, Code-Rejects, Protocol-Rejects and Terminate-Requests.
    next_lcp_id: u8,
    echo_due_ns: Option<u64>,
    echoes_unanswered: u32,

    pap_id: u8,
    /// The identifier of the last challenge we answered: Success and Failure must carry it.
    chap_id: Option<u8>,

    ipcp: Negotiation,
    ipcp_wants: IpcpWants,
    peer_address: Ipv4Addr,

    ipv6cp: Ipv6cp,
    /// IPv6CP failed in this LCP session: the peer's later requests get a Terminate-Ack (RFC
    /// 1661's Closed state) instead of a new negotiation, until LCP starts over.
    ipv6_refused: bool,

    up: Option<Session>,
}

impl Client {
    /// A client in [`State::Stopped`]; [`Client::start`] begins discovery. `seed` makes the
    /// magic number, Host-Uniq and identifiers; give each client (and each run) its own.
    pub fn new(config: ClientConfig, seed: u64) -> Client {
        let mut rng = SplitMix64 { state: seed };
        let magic = nonzero_magic(&mut rng, 0);
        let lcp_wants = LcpWants {
            mru: config.mru,
            ask_mru: true,
            ask_magic: true,
        };
        Client {
            rng,
            state: State::Stopped,
            counters: ClientCounters::default(),
            phase_due_ns: None,
            phase_sends: 0,
            padi_interval_ns: PADI_FIRST_INTERVAL_NS,
            backoff_ns: BACKOFF_FIRST_NS,
            host_uniq: [0; 8],
            ac_mac: [0; 6],
            session_id: 0,
            ac_cookie: None,
            relay_session_id: None,
            max_payload: None,
            magic,
            lcp: Negotiation::default(),
            lcp_wants,
            peer_mru: DEFAULT_PEER_MRU,
            peer_authentication: Authentication::None,
            next_lcp_id: 0,
            echo_due_ns: None,
            echoes_unanswered: 0,
            pap_id: 0,
            chap_id: None,
            ipcp: Negotiation::default(),
            ipcp_wants: IpcpWants::default(),
            peer_address: DEFAULT_PEER_ADDRESS,
            ipv6cp: Ipv6cp::default(),
            ipv6_refused: false,
            up: None,
            config,
        }
    }

    /// Sends the first PADI. Does nothing unless the client is [`State::Stopped`], so that a
    /// second call cannot disturb a session in progress.
    pub fn start(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if self.state != State::Stopped {
            return;
        }
        self.backoff_ns = BACKOFF_FIRST_NS;
        self.begin_discovery(now_ns, out);
    }

    /// An untagged Ethernet frame (14-byte header, ethertype 0x8863 discovery or 0x8864
    /// session) received on the interface.
    pub fn receive(&mut self, frame: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.counters.control_received += 1;
        let outcome = match PppoeFrame::parse(frame) {
            Err(_) => Outcome::Malformed,
            Ok(frame)
                if frame.destination != self.config.mac && frame.destination != BROADCAST_MAC =>
            {
                Outcome::Ignored
            }
            Ok(frame) if frame.ethertype == wire::ETHERTYPE_DISCOVERY => {
                self.on_discovery(&frame, now_ns, out)
            }
            Ok(frame) => self.on_session(&frame, now_ns, out),
        };
        match outcome {
            Outcome::Handled => {}
            Outcome::Ignored => self.counters.ignored += 1,
            Outcome::Malformed => self.counters.malformed += 1,
        }
    }

    /// Timers: retransmissions, echoes, backoff. The caller calls it at least every 100 ms.
    pub fn poll(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.poll_echo(now_ns, out);
        self.poll_ipv6cp(now_ns, out);
        let Some(due) = self.phase_due_ns else {
            return;
        };
        if now_ns < due {
            return;
        }
        match self.state {
            State::Backoff => self.begin_discovery(now_ns, out),
            State::Discovery => {
                self.padi_interval_ns = (self.padi_interval_ns * 2).min(PADI_MAX_INTERVAL_NS);
                self.send_padi(out);
                self.arm_phase_timer(now_ns, self.padi_interval_ns);
            }
            State::Requesting if self.phase_sends >= PADR_MAX_SENDS => {
                self.counters.discovery_failures += 1;
                self.begin_discovery(now_ns, out);
            }
            State::Requesting => {
                self.send_padr(out);
                self.arm_phase_timer(now_ns, PADR_INTERVAL_NS);
            }
            State::Lcp | State::Ipcp if self.phase_sends >= MAX_CONFIGURE => {
                self.end(EndReason::NegotiationTimeout, now_ns, out);
            }
            State::Lcp => self.send_configure_request(Layer::Lcp, false, now_ns, out),
            State::Ipcp => self.send_configure_request(Layer::Ipcp, false, now_ns, out),
            State::Authenticating if self.phase_sends >= MAX_AUTHENTICATE => {
                self.end(EndReason::NegotiationTimeout, now_ns, out);
            }
            State::Authenticating => {
                // PAP is ours to retransmit; with CHAP the peer retransmits its challenge, and
                // this only counts how long we have waited.
                if self.peer_authentication == Authentication::Pap {
                    self.send_pap_request(out);
                }
                self.arm_phase_timer(now_ns, RESTART_INTERVAL_NS);
            }
            State::Up | State::Stopped => self.phase_due_ns = None,
        }
    }

    /// Ends the session politely (LCP Terminate-Request, then PADT) and stays Stopped (for
    /// reload/shutdown). The PADT follows at once rather than after a Terminate-Ack: the
    /// caller is going away, and the PADT alone is enough for the AC to free the session.
    pub fn stop(&mut self, out: &mut Vec<Vec<u8>>) {
        if self.state == State::Stopped {
            return;
        }
        if self.state.has_session() {
            let id = self.next_lcp_identifier();
            self.send_control(out, PPP_LCP, control::TERMINATE_REQUEST, id, &[]);
            self.send_padt(out);
            self.count_end(EndReason::Stopped);
        }
        self.clear_session();
        self.state = State::Stopped;
        self.phase_due_ns = None;
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// The session id and AC MAC once a PADS was accepted (LCP/auth/IPCP frames then ride the
    /// session), until the session ends.
    pub fn discovery_session(&self) -> Option<(u16, [u8; 6])> {
        self.state
            .has_session()
            .then_some((self.session_id, self.ac_mac))
    }

    /// The negotiated session, only while State::Up (IPCP open both ways).
    pub fn session(&self) -> Option<&Session> {
        self.up.as_ref().filter(|_| self.state == State::Up)
    }

    pub fn counters(&self) -> &ClientCounters {
        &self.counters
    }

    // ---- discovery ----

    fn on_discovery(
        &mut self,
        frame: &PppoeFrame<'_>,
        now_ns: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> Outcome {
        let Ok(tags) = Tags::parse(frame.payload) else {
            return Outcome::Malformed;
        };
        match frame.code {
            code::PADO if self.state == State::Discovery => self.on_pado(frame, tags, now_ns, out),
            code::PADS if self.state == State::Requesting => self.on_pads(frame, tags, now_ns, out),
            // Believed only from our AC and for our session: anyone on the segment can send
            // a PADT, and one from elsewhere must not cut us off.
            code::PADT
                if self.state.has_session()
                    && frame.source == self.ac_mac
                    && frame.session_id == self.session_id =>
            {
                self.end(EndReason::Padt, now_ns, out);
                Outcome::Handled
            }
            _ => Outcome::Ignored,
        }
    }

    fn on_pado(
        &mut self,
        frame: &PppoeFrame<'_>,
        tags: Tags<'_>,
        now_ns: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> Outcome {
        let wanted_service = self.config.service_name.as_bytes();
        let acceptable = tags.first(tag::HOST_UNIQ) == Some(&self.host_uniq[..])
            && tags.error().is_none()
            && is_unicast(frame.source)
            && self
                .config
                .ac_name
                .as_ref()
                .is_none_or(|name| tags.first(tag::AC_NAME) == Some(name.as_bytes()))
            && (wanted_service.is_empty()
                || tags
                    .all(tag::SERVICE_NAME)
                    .any(|offered| offered == wanted_service));
        // A PADR echoes the cookie and relay id: an offer whose PADR would not fit a
        // 1500-byte frame is no offer (a conforming AC's never comes near).
        let echoed = |kind| {
            tags.first(kind)
                .map_or(0, |value| TAG_HEADER_LEN + value.len())
        };
        let padr_tags = 2 * TAG_HEADER_LEN
            + wanted_service.len()
            + self.host_uniq.len()
            + echoed(tag::AC_COOKIE)
            + echoed(tag::RELAY_SESSION_ID)
            + if self.asks_max_payload() {
                TAG_HEADER_LEN + 2
            } else {
                0
            };
        if !acceptable || padr_tags > MAX_DISCOVERY_PAYLOAD {
            return Outcome::Ignored;
        }
        self.ac_mac = frame.source;
        self.ac_cookie = tags.first(tag::AC_COOKIE).map(<[u8]>::to_vec);
        self.relay_session_id = tags.first(tag::RELAY_SESSION_ID).map(<[u8]>::to_vec);
        self.state = State::Requesting;
        self.phase_sends = 0;
        self.send_padr(out);
        self.arm_phase_timer(now_ns, PADR_INTERVAL_NS);
        Outcome::Handled
    }

    fn on_pads(
        &mut self,
        frame: &PppoeFrame<'_>,
        tags: Tags<'_>,
        now_ns: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> Outcome {
        if frame.source != self.ac_mac || tags.first(tag::HOST_UNIQ) != Some(&self.host_uniq[..]) {
            return Outcome::Ignored;
        }
        if tags.error().is_some() || frame.session_id == 0 {
            // The AC refused us (RFC 2516: error tag, session id 0): try again later, perhaps
            // with another AC.
            self.counters.discovery_failures += 1;
            self.back_off(now_ns);
            return Outcome::Handled;
        }
        self.session_id = frame.session_id;
        // RFC 4638: an MRU above 1492 only if the AC echoed our PPP-Max-Payload, and no more
        // than it allows.
        self.max_payload = tags
            .first(tag::PPP_MAX_PAYLOAD)
            .filter(|_| self.asks_max_payload())
            .and_then(|value| value.first_chunk::<2>())
            .map(|value| u16::from_be_bytes(*value))
            .filter(|&granted| granted > PPPOE_MRU);
        self.begin_lcp(now_ns, out);
        Outcome::Handled
    }

    fn begin_discovery(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.clear_session();
        // A new Host-Uniq per attempt, so that a late PADO or PADS for an earlier attempt
        // cannot be taken for an answer to this one.
        self.host_uniq = self.rng.next_u64().to_be_bytes();
        self.state = State::Discovery;
        self.padi_interval_ns = PADI_FIRST_INTERVAL_NS;
        self.phase_sends = 0;
        self.send_padi(out);
        self.arm_phase_timer(now_ns, PADI_FIRST_INTERVAL_NS);
    }

    fn send_padi(&mut self, out: &mut Vec<Vec<u8>>) {
        let mut tags = Vec::new();
        wire::push_tag(
            &mut tags,
            tag::SERVICE_NAME,
            self.config.service_name.as_bytes(),
        );
        wire::push_tag(&mut tags, tag::HOST_UNIQ, &self.host_uniq);
        self.push_max_payload(&mut tags);
        self.send_discovery(out, BROADCAST_MAC, code::PADI, 0, &tags);
    }

    /// Whether our MRU needs RFC 4638's PPP-Max-Payload.
    fn asks_max_payload(&self) -> bool {
        self.config.mru > PPPOE_MRU
    }

    fn push_max_payload(&self, tags: &mut Vec<u8>) {
        if self.asks_max_payload() {
            wire::push_tag(tags, tag::PPP_MAX_PAYLOAD, &self.config.mru.to_be_bytes());
        }
    }

    /// The MRU LCP asks for: ours, within RFC 2516's 1492 unless the AC granted more.
    fn link_mru(&self) -> u16 {
        self.config.mru.min(self.max_payload.unwrap_or(PPPOE_MRU))
    }

    fn send_padr(&mut self, out: &mut Vec<Vec<u8>>) {
        let mut tags = Vec::new();
        wire::push_tag(
            &mut tags,
            tag::SERVICE_NAME,
            self.config.service_name.as_bytes(),
        );
        wire::push_tag(&mut tags, tag::HOST_UNIQ, &self.host_uniq);
        // The AC may need these back to find its state for us (RFC 2516 sections 5.2, 5.3).
        if let Some(cookie) = &self.ac_cookie {
            wire::push_tag(&mut tags, tag::AC_COOKIE, cookie);
        }
        if let Some(relay) = &self.relay_session_id {
            wire::push_tag(&mut tags, tag::RELAY_SESSION_ID, relay);
        }
        self.push_max_payload(&mut tags);
        self.send_discovery(out, self.ac_mac, code::PADR, 0, &tags);
    }

    fn send_padt(&mut self, out: &mut Vec<Vec<u8>>) {
        self.send_discovery(out, self.ac_mac, code::PADT, self.session_id, &[]);
    }

    // ---- session frames ----

    fn on_session(
        &mut self,
        frame: &PppoeFrame<'_>,
        now_ns: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> Outcome {
        let Ok(ppp) = PppPacket::parse(frame.payload) else {
            return Outcome::Malformed;
        };
        if !self.state.has_session()
            || frame.source != self.ac_mac
            || frame.session_id != self.session_id
        {
            return Outcome::Ignored;
        }
        match ppp.protocol {
            PPP_LCP => self.on_lcp(ppp.information, now_ns, out),
            PPP_PAP => self.on_pap(ppp.information, now_ns, out),
            PPP_CHAP => self.on_chap(ppp.information, now_ns, out),
            PPP_IPCP => self.on_ipcp(ppp.information, now_ns, out),
            PPP_IPV6CP if self.config.ipv6 => self.on_ipv6cp(ppp.information, now_ns, out),
            // The dataplane's business (it takes both before they reach us).
            PPP_IPV4 | PPP_IPV6 => Outcome::Ignored,
            // IPv6CP without IPv6, CCP, anything: RFC 1661 section 5.7 has us say we do not speak it,
            // so the peer stops sending it; before LCP is open, such packets are discarded.
            protocol if self.state.lcp_is_open() => {
                self.send_protocol_reject(protocol, ppp.information, out);
                Outcome::Handled
            }
            _ => Outcome::Ignored,
        }
    }

    // ---- LCP ----

    fn begin_lcp(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.state = State::Lcp;
        self.up = None;
        self.chap_id = None;
        self.echo_due_ns = None;
        self.echoes_unanswered = 0;
        self.lcp = Negotiation::new(self.rng.next_u8());
        self.lcp_wants = LcpWants {
            mru: self.link_mru(),
            ask_mru: true,
            ask_magic: true,
        };
        self.peer_mru = DEFAULT_PEER_MRU;
        self.peer_authentication = Authentication::None;
        self.ipcp = Negotiation::default();
        self.ipv6cp = Ipv6cp::default();
        self.ipv6_refused = false;
        self.phase_sends = 0;
        self.send_configure_request(Layer::Lcp, true, now_ns, out);
    }

    fn on_lcp(&mut self, information: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Ok(packet) = ControlPacket::parse(information) else {
            return Outcome::Malformed;
        };
        match packet.code {
            control::CONFIGURE_REQUEST => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if self.state.lcp_is_open() {
                    // RFC 1661: a Configure-Request on an open link renegotiates it, and
                    // everything above LCP starts over.
                    self.begin_lcp(now_ns, out);
                }
                self.answer_lcp_request(&packet, options, out);
                self.open_lcp_if_agreed(now_ns, out);
                Outcome::Handled
            }
            control::CONFIGURE_ACK => {
                if self.state != State::Lcp || !self.lcp.is_acked_by(&packet) {
                    return Outcome::Ignored;
                }
                self.lcp.ack_received = true;
                self.open_lcp_if_agreed(now_ns, out);
                Outcome::Handled
            }
            control::CONFIGURE_NAK | control::CONFIGURE_REJECT => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if self.state != State::Lcp || !self.lcp.awaits_reply(packet.identifier) {
                    return Outcome::Ignored;
                }
                if packet.code == control::CONFIGURE_NAK {
                    self.adopt_lcp_nak(options);
                } else {
                    self.drop_lcp_rejected(options);
                }
                self.request_again(Layer::Lcp, now_ns, out);
                Outcome::Handled
            }
            control::TERMINATE_REQUEST => {
                self.send_control(out, PPP_LCP, control::TERMINATE_ACK, packet.identifier, &[]);
                self.end(EndReason::LcpTerminate, now_ns, out);
                Outcome::Handled
            }
            // We never wait for a Terminate-Ack (stop() sends the PADT at once); a
            // Discard-Request is meant to be dropped; a Code-Reject of an Echo or Discard
            // changes nothing for us.
            control::TERMINATE_ACK | control::DISCARD_REQUEST | control::CODE_REJECT => {
                Outcome::Handled
            }
            control::PROTOCOL_REJECT => {
                let rejected = packet
                    .data
                    .first_chunk::<2>()
                    .map(|b| u16::from_be_bytes(*b));
                if rejected == Some(PPP_IPCP) && self.state.has_session() {
                    // No IPCP, no IPv4: this session can never carry anything for us.
                    self.end(EndReason::NegotiationTimeout, now_ns, out);
                }
                if rejected == Some(PPP_IPV6CP) && self.ipv6cp.active {
                    // An IPv4-only access concentrator: the session goes on without IPv6.
                    self.give_up_ipv6(false, out);
                }
                Outcome::Handled
            }
            control::ECHO_REQUEST => self.answer_echo(&packet, out),
            control::ECHO_REPLY => {
                if packet.data.len() < 4 {
                    return Outcome::Malformed;
                }
                if !self.state.lcp_is_open() {
                    return Outcome::Ignored;
                }
                self.echoes_unanswered = 0;
                self.counters.echo_replies_received += 1;
                Outcome::Handled
            }
            _ => {
                self.send_code_reject(PPP_LCP, packet.packet, out);
                Outcome::Handled
            }
        }
    }

    /// Answers the peer's LCP Configure-Request: Reject what we do not know (taking precedence,
    /// as RFC 1661 says), else Nak what we cannot accept with what we could, else Ack and adopt
    /// the peer's MRU and authentication.
    fn answer_lcp_request(
        &mut self,
        packet: &ControlPacket<'_>,
        options: Options<'_>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let mut rejected = Vec::new();
        let mut naked = Vec::new();
        // The options we Nak, as received: Rejected instead once Max-Failure is reached.
        let mut naked_as_received = Vec::new();
        let mut mru = DEFAULT_PEER_MRU;
        let mut authentication = Authentication::None;
        // Each kind is suggested once however often the request repeats it, so that a Nak
        // is never longer than a few options (a request of hundreds of bogus Auth-Protocols
        // must not become a Nak bigger than the link's MTU).
        let mut suggested: Vec<u8> = Vec::new();
        let mut nak = |naked: &mut Vec<u8>, kind: u8, value: &[u8]| {
            if !suggested.contains(&kind) {
                suggested.push(kind);
                wire::push_option(naked, kind, value);
            }
        };
        for option in options.iter() {
            match option.kind {
                lcp_option::MRU => match option.value_u16() {
                    Some(value) if value >= MIN_MRU => mru = value,
                    Some(_) => {
                        nak(&mut naked, lcp_option::MRU, &MIN_MRU.to_be_bytes());
                        naked_as_received.extend_from_slice(option.raw);
                    }
                    None => rejected.extend_from_slice(option.raw),
                },
                // Character escaping means nothing on Ethernet: any map is harmless.
                lcp_option::ACCM if option.value.len() == 4 => {}
                lcp_option::AUTH_PROTOCOL => {
                    if option.value == PPP_PAP.to_be_bytes() {
                        authentication = Authentication::Pap;
                    } else if option.value == CHAP_MD5_OPTION {
                        authentication = Authentication::ChapMd5;
                    } else {
                        // MS-CHAP, EAP, ...: offer what we can do.
                        nak(&mut naked, lcp_option::AUTH_PROTOCOL, &CHAP_MD5_OPTION);
                        naked_as_received.extend_from_slice(option.raw);
                    }
                }
                lcp_option::MAGIC_NUMBER => match option.value_u32() {
                    // Our own number coming back: the link may be looped. RFC 1661 section
                    // 6.4 has us Nak with another number.
                    Some(value) if value == self.magic => {
                        let suggestion = nonzero_magic(&mut self.rng, self.magic);
                        nak(
                            &mut naked,
                            lcp_option::MAGIC_NUMBER,
                            &suggestion.to_be_bytes(),
                        );
                        naked_as_received.extend_from_slice(option.raw);
                    }
                    Some(_) => {}
                    None => rejected.extend_from_slice(option.raw),
                },
                // PFC and ACFC (RFC 2516 forbids them on PPPoE), and everything unknown.
                _ => rejected.extend_from_slice(option.raw),
            }
        }
        let verdict = RequestVerdict {
            rejected,
            naked,
            naked_as_received,
        };
        if self.answer_configure_request(Layer::Lcp, packet, verdict, out) {
            self.peer_mru = mru;
            self.peer_authentication = authentication;
        }
    }

    /// A Nak of our MRU lowers it (never raises it: we cannot take bigger frames than the
    /// link's); a Nak of our magic number means the peer saw its own, so we draw another.
    fn adopt_lcp_nak(&mut self, options: Options<'_>) {
        for option in options.iter() {
            match option.kind {
                lcp_option::MRU => {
                    if let Some(value) = option.value_u16() {
                        if (MIN_MRU..self.lcp_wants.mru).contains(&value) {
                            self.lcp_wants.mru = value;
                        }
                    }
                }
                lcp_option::MAGIC_NUMBER => self.magic = nonzero_magic(&mut self.rng, self.magic),
                _ => {}
            }
        }
    }

    fn drop_lcp_rejected(&mut self, options: Options<'_>) {
        for option in options.iter() {
            match option.kind {
                lcp_option::MRU => self.lcp_wants.ask_mru = false,
                lcp_option::MAGIC_NUMBER => self.lcp_wants.ask_magic = false,
                _ => {}
            }
        }
    }

    fn lcp_request_options(&self) -> Vec<u8> {
        let mut options = Vec::new();
        if self.lcp_wants.ask_mru {
            wire::push_option(
                &mut options,
                lcp_option::MRU,
                &self.lcp_wants.mru.to_be_bytes(),
            );
        }
        if self.lcp_wants.ask_magic {
            wire::push_option(
                &mut options,
                lcp_option::MAGIC_NUMBER,
                &self.magic.to_be_bytes(),
            );
        }
        options
    }

    fn open_lcp_if_agreed(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if self.state != State::Lcp || !self.lcp.is_open() {
            return;
        }
        self.echoes_unanswered = 0;
        self.echo_due_ns = (self.config.echo_interval_ns > 0)
            .then(|| now_ns.saturating_add(self.config.echo_interval_ns));
        self.phase_sends = 0;
        match self.peer_authentication {
            Authentication::None => self.begin_network_phase(now_ns, out),
            Authentication::Pap => {
                self.state = State::Authenticating;
                self.pap_id = self.rng.next_u8();
                self.send_pap_request(out);
                self.arm_phase_timer(now_ns, RESTART_INTERVAL_NS);
            }
            Authentication::ChapMd5 => {
                // The peer speaks first, with a challenge; the timer bounds the wait.
                self.state = State::Authenticating;
                self.phase_sends = 1;
                self.phase_due_ns = Some(now_ns.saturating_add(RESTART_INTERVAL_NS));
            }
        }
    }

    /// Echo-Reply with our magic number and the request's data (RFC 1661 section 5.8), only
    /// on an open link. A request carrying our own magic number is our own, looped back.
    fn answer_echo(&mut self, packet: &ControlPacket<'_>, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Some((their_magic, data)) = packet.data.split_first_chunk::<4>() else {
            return Outcome::Malformed;
        };
        if !self.state.lcp_is_open() {
            return Outcome::Ignored;
        }
        let our_magic = self.echo_magic();
        if our_magic != 0 && u32::from_be_bytes(*their_magic) == our_magic {
            return Outcome::Ignored;
        }
        let room = self.peer_room(8);
        let data = data.get(..room).unwrap_or(data);
        let mut reply = Vec::with_capacity(4 + data.len());
        reply.extend_from_slice(&our_magic.to_be_bytes());
        reply.extend_from_slice(data);
        self.send_control(out, PPP_LCP, control::ECHO_REPLY, packet.identifier, &reply);
        Outcome::Handled
    }

    fn poll_echo(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if !self.state.lcp_is_open() {
            return;
        }
        let Some(due) = self.echo_due_ns else {
            return;
        };
        if now_ns < due {
            return;
        }
        if self.config.echo_failures > 0 && self.echoes_unanswered >= self.config.echo_failures {
            self.end(EndReason::EchoTimeout, now_ns, out);
            return;
        }
        let id = self.next_lcp_identifier();
        let magic = self.echo_magic().to_be_bytes();
        self.send_control(out, PPP_LCP, control::ECHO_REQUEST, id, &magic);
        self.counters.echo_requests_sent += 1;
        self.echoes_unanswered = self.echoes_unanswered.saturating_add(1);
        self.echo_due_ns = Some(now_ns.saturating_add(self.config.echo_interval_ns));
    }

    /// RFC 1661: the Magic-Number field of echoes is 0 unless the option was negotiated.
    fn echo_magic(&self) -> u32 {
        if self.lcp_wants.ask_magic {
            self.magic
        } else {
            0
        }
    }

    fn send_protocol_reject(&mut self, protocol: u16, information: &[u8], out: &mut Vec<Vec<u8>>) {
        let room = self.peer_room(6);
        let information = information.get(..room).unwrap_or(information);
        let mut data = Vec::with_capacity(2 + information.len());
        data.extend_from_slice(&protocol.to_be_bytes());
        data.extend_from_slice(information);
        let id = self.next_lcp_identifier();
        self.send_control(out, PPP_LCP, control::PROTOCOL_REJECT, id, &data);
    }

    /// Code-Reject carrying the rejected packet, cut to what the peer's MRU takes.
    fn send_code_reject(&mut self, protocol: u16, rejected: &[u8], out: &mut Vec<Vec<u8>>) {
        let room = self.peer_room(4);
        let rejected = rejected.get(..room).unwrap_or(rejected);
        let id = self.next_lcp_identifier();
        self.send_control(out, protocol, control::CODE_REJECT, id, rejected);
    }

    /// How many bytes of a control packet's data fit in the peer's MRU after `overhead` bytes
    /// of headers, so that what we echo back is never too big to be received.
    fn peer_room(&self, overhead: usize) -> usize {
        usize::from(self.peer_mru.min(self.lcp_wants.mru)).saturating_sub(overhead)
    }

    fn next_lcp_identifier(&mut self) -> u8 {
        self.next_lcp_id = self.next_lcp_id.wrapping_add(1);
        self.next_lcp_id
    }

    // ---- authentication ----

    fn send_pap_request(&mut self, out: &mut Vec<Vec<u8>>) {
        let data = wire::pap_request_data(
            self.config.username.as_bytes(),
            self.config.password.as_bytes(),
        );
        self.send_control(out, PPP_PAP, pap::AUTHENTICATE_REQUEST, self.pap_id, &data);
    }

    fn on_pap(&mut self, information: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Ok(packet) = ControlPacket::parse(information) else {
            return Outcome::Malformed;
        };
        if self.state != State::Authenticating
            || self.peer_authentication != Authentication::Pap
            || packet.identifier != self.pap_id
        {
            return Outcome::Ignored;
        }
        match packet.code {
            pap::AUTHENTICATE_ACK => {
                self.begin_network_phase(now_ns, out);
                Outcome::Handled
            }
            pap::AUTHENTICATE_NAK => {
                self.end(EndReason::AuthFailed, now_ns, out);
                Outcome::Handled
            }
            _ => Outcome::Ignored,
        }
    }

    /// CHAP: the peer challenges, we answer, it says Success or Failure. It may challenge
    /// again at any time while the link is up (RFC 1994 section 2.2), and we answer that too.
    fn on_chap(&mut self, information: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Ok(packet) = ControlPacket::parse(information) else {
            return Outcome::Malformed;
        };
        if self.peer_authentication != Authentication::ChapMd5 || !self.state.lcp_is_open() {
            return Outcome::Ignored;
        }
        match packet.code {
            chap::CHALLENGE => {
                let Ok(challenge) = ChapValue::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                let response = wire::chap_md5_response(
                    packet.identifier,
                    self.config.password.as_bytes(),
                    challenge.value,
                );
                let data = wire::chap_value_data(&response, self.config.username.as_bytes());
                self.send_control(out, PPP_CHAP, chap::RESPONSE, packet.identifier, &data);
                self.chap_id = Some(packet.identifier);
                Outcome::Handled
            }
            chap::SUCCESS if self.chap_id == Some(packet.identifier) => {
                if self.state == State::Authenticating {
                    self.begin_network_phase(now_ns, out);
                }
                Outcome::Handled
            }
            chap::FAILURE if self.chap_id == Some(packet.identifier) => {
                self.end(EndReason::AuthFailed, now_ns, out);
                Outcome::Handled
            }
            _ => Outcome::Ignored,
        }
    }

    // ---- IPCP ----

    /// Authenticated: IPCP, and IPv6CP beside it where the interface has IPv6 and the link
    /// carries IPv6's minimum MTU (RFC 8200: 1280; an MRU that small is Naked up to 576 only).
    fn begin_network_phase(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.begin_ipcp(now_ns, out);
        if !self.config.ipv6 {
            return;
        }
        if self.lcp_wants.mru.min(self.peer_mru) < IPV6_MIN_MTU {
            self.counters.ipv6_failures += 1;
            self.ipv6_refused = true;
        } else {
            self.begin_ipv6cp(now_ns, out);
        }
    }

    fn begin_ipcp(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.state = State::Ipcp;
        self.up = None;
        self.ipcp = Negotiation::new(self.rng.next_u8());
        self.ipcp_wants = IpcpWants::default();
        self.peer_address = DEFAULT_PEER_ADDRESS;
        self.phase_sends = 0;
        self.send_configure_request(Layer::Ipcp, true, now_ns, out);
    }

    fn on_ipcp(&mut self, information: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Ok(packet) = ControlPacket::parse(information) else {
            return Outcome::Malformed;
        };
        // RFC 1661: NCP packets before the network phase are silently discarded.
        if !matches!(self.state, State::Ipcp | State::Up) {
            return Outcome::Ignored;
        }
        match packet.code {
            control::CONFIGURE_REQUEST => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if self.state == State::Up {
                    // Renegotiation: the addresses may change, so the session is down until
                    // IPCP opens again.
                    self.begin_ipcp(now_ns, out);
                }
                self.answer_ipcp_request(&packet, options, out);
                self.come_up_if_agreed(now_ns, out);
                Outcome::Handled
            }
            control::CONFIGURE_ACK => {
                if self.state != State::Ipcp || !self.ipcp.is_acked_by(&packet) {
                    return Outcome::Ignored;
                }
                self.ipcp.ack_received = true;
                self.come_up_if_agreed(now_ns, out);
                Outcome::Handled
            }
            control::CONFIGURE_NAK | control::CONFIGURE_REJECT => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if self.state != State::Ipcp || !self.ipcp.awaits_reply(packet.identifier) {
                    return Outcome::Ignored;
                }
                if packet.code == control::CONFIGURE_NAK {
                    self.adopt_ipcp_nak(options);
                } else if options.iter().any(|o| o.kind == ipcp_option::IP_ADDRESS) {
                    // The peer will not give us an address: IPCP cannot succeed.
                    self.end(EndReason::NegotiationTimeout, now_ns, out);
                    return Outcome::Handled;
                } else {
                    self.drop_ipcp_rejected(options);
                }
                self.request_again(Layer::Ipcp, now_ns, out);
                Outcome::Handled
            }
            control::TERMINATE_REQUEST => {
                // Without IPCP the session carries nothing: end it as the peer asks.
                self.send_control(
                    out,
                    PPP_IPCP,
                    control::TERMINATE_ACK,
                    packet.identifier,
                    &[],
                );
                self.end(EndReason::LcpTerminate, now_ns, out);
                Outcome::Handled
            }
            control::TERMINATE_ACK | control::CODE_REJECT => Outcome::Handled,
            _ => {
                self.send_code_reject(PPP_IPCP, packet.packet, out);
                Outcome::Handled
            }
        }
    }

    /// Acks the peer's IP-Address (its address, whatever it is) and Rejects everything else:
    /// VJ compression, NBNS and the like are nothing the dataplane does.
    fn answer_ipcp_request(
        &mut self,
        packet: &ControlPacket<'_>,
        options: Options<'_>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let mut rejected = Vec::new();
        let mut address = None;
        for option in options.iter() {
            match (option.kind, option.value_ipv4()) {
                (ipcp_option::IP_ADDRESS, Some(value)) => address = Some(value),
                _ => rejected.extend_from_slice(option.raw),
            }
        }
        let verdict = RequestVerdict {
            rejected,
            naked: Vec::new(),
            naked_as_received: Vec::new(),
        };
        if self.answer_configure_request(Layer::Ipcp, packet, verdict, out) {
            self.peer_address = address
                .filter(|a| !a.is_unspecified())
                .unwrap_or(DEFAULT_PEER_ADDRESS);
        }
    }

    /// A Nak carries the values the peer wants us to use: our address and its DNS servers.
    fn adopt_ipcp_nak(&mut self, options: Options<'_>) {
        for option in options.iter() {
            let Some(value) = option.value_ipv4() else {
                continue;
            };
            let wants = &mut self.ipcp_wants;
            match option.kind {
                ipcp_option::IP_ADDRESS => wants.address = value,
                ipcp_option::PRIMARY_DNS if wants.primary_dns.is_some() => {
                    wants.primary_dns = Some(value);
                }
                ipcp_option::SECONDARY_DNS if wants.secondary_dns.is_some() => {
                    wants.secondary_dns = Some(value);
                }
                _ => {}
            }
        }
    }

    fn drop_ipcp_rejected(&mut self, options: Options<'_>) {
        for option in options.iter() {
            match option.kind {
                ipcp_option::PRIMARY_DNS => self.ipcp_wants.primary_dns = None,
                ipcp_option::SECONDARY_DNS => self.ipcp_wants.secondary_dns = None,
                _ => {}
            }
        }
    }

    fn ipcp_request_options(&self) -> Vec<u8> {
        let mut options = Vec::new();
        let wants = &self.ipcp_wants;
        wire::push_option(
            &mut options,
            ipcp_option::IP_ADDRESS,
            &wants.address.octets(),
        );
        if let Some(dns) = wants.primary_dns {
            wire::push_option(&mut options, ipcp_option::PRIMARY_DNS, &dns.octets());
        }
        if let Some(dns) = wants.secondary_dns {
            wire::push_option(&mut options, ipcp_option::SECONDARY_DNS, &dns.octets());
        }
        options
    }

    fn come_up_if_agreed(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if self.state != State::Ipcp || !self.ipcp.is_open() {
            return;
        }
        let wants = &self.ipcp_wants;
        if wants.address.is_unspecified() {
            // The peer Acked "give me an address" without giving one.
            self.end(EndReason::NegotiationTimeout, now_ns, out);
            return;
        }
        let dns = [wants.primary_dns, wants.secondary_dns]
            .into_iter()
            .flatten()
            .filter(|a| !a.is_unspecified())
            .collect();
        self.up = Some(Session {
            id: self.session_id,
            ac_mac: self.ac_mac,
            local: wants.address,
            peer: self.peer_address,
            dns,
            mtu: self.lcp_wants.mru.min(self.peer_mru),
            ipv6: self.ipv6cp.open,
        });
        self.state = State::Up;
        self.phase_due_ns = None;
        self.backoff_ns = BACKOFF_FIRST_NS;
        self.counters.sessions_up += 1;
    }

    // ---- IPv6CP ----

    fn begin_ipv6cp(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        self.set_ipv6_open(None);
        self.ipv6cp = Ipv6cp {
            negotiation: Negotiation::new(self.rng.next_u8()),
            active: true,
            ask_id: true,
            local_id: modified_eui64(self.config.mac),
            ..Ipv6cp::default()
        };
        self.send_configure_request(Layer::Ipv6cp, true, now_ns, out);
    }

    fn on_ipv6cp(&mut self, information: &[u8], now_ns: u64, out: &mut Vec<Vec<u8>>) -> Outcome {
        let Ok(packet) = ControlPacket::parse(information) else {
            return Outcome::Malformed;
        };
        // RFC 1661: NCP packets before the network phase are silently discarded.
        if !matches!(self.state, State::Ipcp | State::Up) {
            return Outcome::Ignored;
        }
        match packet.code {
            control::CONFIGURE_REQUEST => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if self.ipv6_refused {
                    // Closed: RFC 1661 answers a Configure-Request with a Terminate-Ack.
                    self.send_control(
                        out,
                        PPP_IPV6CP,
                        control::TERMINATE_ACK,
                        packet.identifier,
                        &[],
                    );
                    return Outcome::Handled;
                }
                if self.ipv6cp.open.is_some() || !self.ipv6cp.active {
                    // Renegotiation, or the peer starting again after a Terminate: our side
                    // starts over with it.
                    self.begin_ipv6cp(now_ns, out);
                }
                self.answer_ipv6cp_request(&packet, options, out);
                self.open_ipv6_if_agreed();
                Outcome::Handled
            }
            control::CONFIGURE_ACK => {
                if !self.ipv6cp.active || !self.ipv6cp.negotiation.is_acked_by(&packet) {
                    return Outcome::Ignored;
                }
                // The timer runs on until the layer is open: a peer that Acks and never asks
                // must not hold IPv6CP half-open.
                self.ipv6cp.negotiation.ack_received = true;
                self.open_ipv6_if_agreed();
                Outcome::Handled
            }
            control::CONFIGURE_NAK | control::CONFIGURE_REJECT => {
                let Ok(options) = Options::parse(packet.data) else {
                    return Outcome::Malformed;
                };
                if !self.ipv6cp.active || !self.ipv6cp.negotiation.awaits_reply(packet.identifier) {
                    return Outcome::Ignored;
                }
                let suggested = options
                    .iter()
                    .find(|o| o.kind == ipv6cp_option::INTERFACE_IDENTIFIER);
                match (packet.code, suggested) {
                    (control::CONFIGURE_NAK, Some(option)) => {
                        // RFC 5072 section 4.1: the peer's suggestion is ours to use (a BRAS
                        // may assign identifiers); the dataplane and the twin follow it. A
                        // zero or malformed one is no suggestion: we ask again with ours.
                        let ipv6cp = &mut self.ipv6cp;
                        match <[u8; 8]>::try_from(option.value) {
                            Ok(id)
                                if id != [0; 8]
                                    && Some(id) != ipv6cp.peer_id
                                    && Some(id) != ipv6cp.peer_asked =>
                            {
                                ipv6cp.local_id = id;
                                // Asked for again even after an earlier Reject of the option.
                                ipv6cp.ask_id = true;
                            }
                            _ => {}
                        }
                    }
                    // RFC 5072 section 4.1: we keep our identifier, unannounced.
                    (control::CONFIGURE_REJECT, Some(_)) => self.ipv6cp.ask_id = false,
                    _ => {}
                }
                self.request_again(Layer::Ipv6cp, now_ns, out);
                Outcome::Handled
            }
            control::TERMINATE_REQUEST => {
                self.send_control(
                    out,
                    PPP_IPV6CP,
                    control::TERMINATE_ACK,
                    packet.identifier,
                    &[],
                );
                // IPv6 stops; IPv4 goes on, and the peer may open IPv6CP again.
                self.ipv6cp = Ipv6cp::default();
                self.set_ipv6_open(None);
                Outcome::Handled
            }
            control::TERMINATE_ACK | control::CODE_REJECT => Outcome::Handled,
            _ => {
                self.send_code_reject(PPP_IPV6CP, packet.packet, out);
                Outcome::Handled
            }
        }
    }

    /// Acks the peer's Interface-Identifier when it is usable (not zero, not ours), Naks it
    /// with one that is otherwise (RFC 5072 section 4.1), and Rejects every other option
    /// (IPv6 header compression is nothing the dataplane does).
    fn answer_ipv6cp_request(
        &mut self,
        packet: &ControlPacket<'_>,
        options: Options<'_>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let ours = self.ipv6cp.local_id;
        let mut rejected = Vec::new();
        let mut naked = Vec::new();
        let mut naked_as_received = Vec::new();
        let mut peer_id = None;
        for option in options.iter() {
            let id = <[u8; 8]>::try_from(option.value).ok();
            if let (ipv6cp_option::INTERFACE_IDENTIFIER, Some(asked)) = (option.kind, id) {
                self.ipv6cp.peer_asked = Some(asked);
            }
            match (option.kind, id) {
                (ipv6cp_option::INTERFACE_IDENTIFIER, Some(id)) if id != [0; 8] && id != ours => {
                    peer_id = Some(id);
                }
                (ipv6cp_option::INTERFACE_IDENTIFIER, Some(_)) if naked.is_empty() => {
                    let suggestion = unused_interface_id(&mut self.rng, ours);
                    wire::push_option(&mut naked, ipv6cp_option::INTERFACE_IDENTIFIER, &suggestion);
                    naked_as_received.extend_from_slice(option.raw);
                }
                (ipv6cp_option::INTERFACE_IDENTIFIER, Some(_)) => {
                    naked_as_received.extend_from_slice(option.raw);
                }
                _ => rejected.extend_from_slice(option.raw),
            }
        }
        let verdict = RequestVerdict {
            rejected,
            naked,
            naked_as_received,
        };
        if self.answer_configure_request(Layer::Ipv6cp, packet, verdict, out) {
            self.ipv6cp.peer_id = peer_id;
        }
    }

    fn ipv6cp_request_options(&self) -> Vec<u8> {
        let mut options = Vec::new();
        if self.ipv6cp.ask_id {
            wire::push_option(
                &mut options,
                ipv6cp_option::INTERFACE_IDENTIFIER,
                &self.ipv6cp.local_id,
            );
        }
        options
    }

    fn open_ipv6_if_agreed(&mut self) {
        if !self.ipv6cp.active || self.ipv6cp.open.is_some() || !self.ipv6cp.negotiation.is_open() {
            return;
        }
        self.ipv6cp.due_ns = None;
        self.counters.ipv6_opened += 1;
        self.set_ipv6_open(Some(Ipv6Link {
            local_id: self.ipv6cp.local_id,
            peer_id: self.ipv6cp.peer_id,
        }));
    }

    /// What IPv6CP gives the session, now and whenever IPCP (re)opens it.
    fn set_ipv6_open(&mut self, link: Option<Ipv6Link>) {
        self.ipv6cp.open = link;
        if let Some(up) = &mut self.up {
            up.ipv6 = link;
        }
    }

    /// IPv6CP failed: the session carries IPv4 alone, until LCP starts over. `tell_peer`:
    /// close the layer with a Terminate-Request (not after a Protocol-Reject: the peer has no
    /// such layer).
    fn give_up_ipv6(&mut self, tell_peer: bool, out: &mut Vec<Vec<u8>>) {
        if tell_peer {
            let id = self.ipv6cp.negotiation.request_id.wrapping_add(1);
            self.send_control(out, PPP_IPV6CP, control::TERMINATE_REQUEST, id, &[]);
        }
        self.counters.ipv6_failures += 1;
        self.ipv6_refused = true;
        self.ipv6cp = Ipv6cp::default();
        self.set_ipv6_open(None);
    }

    /// IPv6CP's restart timer, on its own beside the phase's.
    fn poll_ipv6cp(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let Some(due) = self.ipv6cp.due_ns else {
            return;
        };
        if now_ns < due || !matches!(self.state, State::Ipcp | State::Up) {
            return;
        }
        if self.ipv6cp.sends >= MAX_CONFIGURE {
            self.give_up_ipv6(false, out);
        } else {
            self.send_configure_request(Layer::Ipv6cp, false, now_ns, out);
        }
    }

    // ---- shared by LCP, IPCP and IPv6CP ----

    /// Answers the peer's Configure-Request for `layer` as RFC 1661 section 5 says: Reject
    /// what we do not know (taking precedence), else Nak what we cannot take with what we
    /// could (or, after Max-Failure Naks in a row, Reject it as received, so a peer that will
    /// not move cannot loop us), else Ack. Returns whether it Acked.
    fn answer_configure_request(
        &mut self,
        layer: Layer,
        packet: &ControlPacket<'_>,
        verdict: RequestVerdict,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        let (protocol, negotiation) = match layer {
            Layer::Lcp => (PPP_LCP, &mut self.lcp),
            Layer::Ipcp => (PPP_IPCP, &mut self.ipcp),
            Layer::Ipv6cp => (PPP_IPV6CP, &mut self.ipv6cp.negotiation),
        };
        let acked = verdict.rejected.is_empty() && verdict.naked.is_empty();
        negotiation.ack_sent = acked;
        let (code, data) = if !verdict.rejected.is_empty() {
            (control::CONFIGURE_REJECT, verdict.rejected.as_slice())
        } else if verdict.naked.is_empty() {
            negotiation.naks_sent = 0;
            (control::CONFIGURE_ACK, packet.data)
        } else if negotiation.naks_sent >= MAX_FAILURE {
            (
                control::CONFIGURE_REJECT,
                verdict.naked_as_received.as_slice(),
            )
        } else {
            negotiation.naks_sent += 1;
            (control::CONFIGURE_NAK, verdict.naked.as_slice())
        };
        self.send_control(out, protocol, code, packet.identifier, data);
        acked
    }

    /// Sends our Configure-Request for `layer` and (re)arms the restart timer. `fresh_id`:
    /// the options changed (or a reply came), so RFC 1661 wants a new identifier; a plain
    /// retransmission keeps it, so that a late Ack to the previous copy still counts.
    fn send_configure_request(
        &mut self,
        layer: Layer,
        fresh_id: bool,
        now_ns: u64,
        out: &mut Vec<Vec<u8>>,
    ) {
        let (options, protocol) = match layer {
            Layer::Lcp => (self.lcp_request_options(), PPP_LCP),
            Layer::Ipcp => (self.ipcp_request_options(), PPP_IPCP),
            Layer::Ipv6cp => (self.ipv6cp_request_options(), PPP_IPV6CP),
        };
        let negotiation = match layer {
            Layer::Lcp => &mut self.lcp,
            Layer::Ipcp => &mut self.ipcp,
            Layer::Ipv6cp => &mut self.ipv6cp.negotiation,
        };
        if fresh_id {
            negotiation.request_id = negotiation.request_id.wrapping_add(1);
        }
        // RFC 1661: a timeout in Ack-Rcvd goes back to Req-Sent; the new copy needs its Ack.
        negotiation.ack_received = false;
        let packet =
            wire::control_packet(control::CONFIGURE_REQUEST, negotiation.request_id, &options);
        negotiation.request = options;
        self.send_ppp(out, protocol, &packet);
        if layer == Layer::Ipv6cp {
            self.ipv6cp.sends = self.ipv6cp.sends.saturating_add(1);
            self.ipv6cp.due_ns = Some(now_ns.saturating_add(RESTART_INTERVAL_NS));
        } else {
            self.arm_phase_timer(now_ns, RESTART_INTERVAL_NS);
        }
    }

    /// After a Nak or Reject: a new request, unless Max-Configure requests have gone already
    /// (counting these too keeps a peer that Naks forever from holding us in the phase).
    fn request_again(&mut self, layer: Layer, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if layer == Layer::Ipv6cp && self.ipv6cp.sends >= MAX_CONFIGURE {
            self.give_up_ipv6(true, out);
        } else if layer != Layer::Ipv6cp && self.phase_sends >= MAX_CONFIGURE {
            self.end(EndReason::NegotiationTimeout, now_ns, out);
        } else {
            self.send_configure_request(layer, true, now_ns, out);
        }
    }

    // ---- ends and timers ----

    /// Ends the session: a PADT unless the AC ended it with one, then the backoff.
    fn end(&mut self, reason: EndReason, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        if reason != EndReason::Padt && self.state.has_session() {
            self.send_padt(out);
        }
        self.count_end(reason);
        self.back_off(now_ns);
    }

    fn count_end(&mut self, reason: EndReason) {
        if let Some(count) = self.counters.ends.get_mut(reason as usize) {
            *count += 1;
        }
    }

    /// Drops the session and waits before a new discovery, twice as long as last time.
    fn back_off(&mut self, now_ns: u64) {
        self.clear_session();
        self.state = State::Backoff;
        self.phase_sends = 0;
        self.phase_due_ns = Some(now_ns.saturating_add(self.backoff_ns));
        self.backoff_ns = (self.backoff_ns * 2).min(BACKOFF_MAX_NS);
    }

    fn clear_session(&mut self) {
        self.session_id = 0;
        self.ac_mac = [0; 6];
        self.ac_cookie = None;
        self.relay_session_id = None;
        self.max_payload = None;
        self.lcp = Negotiation::default();
        self.ipcp = Negotiation::default();
        self.ipv6cp = Ipv6cp::default();
        self.ipv6_refused = false;
        self.peer_authentication = Authentication::None;
        self.peer_mru = DEFAULT_PEER_MRU;
        self.chap_id = None;
        self.echo_due_ns = None;
        self.echoes_unanswered = 0;
        self.up = None;
    }

    /// Counts one more send of the current phase and sets when the next is due.
    fn arm_phase_timer(&mut self, now_ns: u64, interval_ns: u64) {
        self.phase_sends = self.phase_sends.saturating_add(1);
        self.phase_due_ns = Some(now_ns.saturating_add(interval_ns));
    }

    // ---- output ----

    fn send_discovery(
        &mut self,
        out: &mut Vec<Vec<u8>>,
        destination: [u8; 6],
        code: u8,
        session_id: u16,
        tags: &[u8],
    ) {
        out.push(wire::discovery_frame(
            destination,
            self.config.mac,
            code,
            session_id,
            tags,
        ));
        self.counters.control_sent += 1;
    }

    fn send_ppp(&mut self, out: &mut Vec<Vec<u8>>, protocol: u16, information: &[u8]) {
        out.push(wire::session_frame(
            self.ac_mac,
            self.config.mac,
            self.session_id,
            protocol,
            information,
        ));
        self.counters.control_sent += 1;
    }

    fn send_control(
        &mut self,
        out: &mut Vec<Vec<u8>>,
        protocol: u16,
        code: u8,
        identifier: u8,
        data: &[u8],
    ) {
        let packet = wire::control_packet(code, identifier, data);
        self.send_ppp(out, protocol, &packet);
    }
}

/// A magic number that is neither 0 (RFC 1661: means "not negotiated") nor `avoid`.
fn nonzero_magic(rng: &mut SplitMix64, avoid: u32) -> u32 {
    let [a, b, c, d, ..] = rng.next_u64().to_be_bytes();
    let value = u32::from_be_bytes([a, b, c, d]);
    if value == 0 || value == avoid {
        // Next to impossible; stepping off keeps the function free of an unbounded loop.
        avoid.wrapping_add(1).max(1)
    } else {
        value
    }
}

/// An interface identifier for a peer whose own is unusable: neither zero nor `ours`, with
/// the universal/local bit clear (RFC 4291: not a globally unique one).
fn unused_interface_id(rng: &mut SplitMix64, ours: [u8; 8]) -> [u8; 8] {
    let mut id = rng.next_u64().to_be_bytes();
    id[0] &= !0x02;
    if id == [0; 8] || id == ours {
        // Next to impossible; stepping off keeps the function free of an unbounded loop.
        let mut other = ours;
        other[7] ^= 1;
        other
    } else {
        id
    }
}

/// An AC must be a single station: a PADO from a multicast or all-zero source is bogus.
fn is_unicast(mac: [u8; 6]) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::OnceLock;

    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;
    use crate::pppoe::wire::{
        control_packet, discovery_frame, push_option, push_tag, session_frame, ETHERTYPE_DISCOVERY,
        ETHERTYPE_SESSION, PPP_IPV6CP,
    };

    const CLIENT_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
    const AC_MAC: [u8; 6] = [0x02, 0xac, 0x00, 0x00, 0x00, 0x01];
    const STRANGER_MAC: [u8; 6] = [0x02, 0xbb, 0x00, 0x00, 0x00, 0x02];
    const SESSION_ID: u16 = 0x1234;
    const USERNAME: &str = "alice";
    const PASSWORD: &str = "wonderland";
    const COOKIE: &[u8] = b"cookie-123";
    const LOCAL: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 10);
    const PEER: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
    const DNS1: Ipv4Addr = Ipv4Addr::new(9, 9, 9, 9);
    const DNS2: Ipv4Addr = Ipv4Addr::new(1, 1, 1, 1);
    const AC_MAGIC: u32 = 0x0bad_cafe;
    const VJ_OPTION: [u8; 6] = [
        ipcp_option::IP_COMPRESSION_PROTOCOL,
        6,
        0x00,
        0x2d,
        0x0f,
        0x01,
    ];
    const S: u64 = SECOND_NS;

    fn config() -> ClientConfig {
        ClientConfig {
            username: USERNAME.into(),
            password: PASSWORD.into(),
            service_name: String::new(),
            ac_name: None,
            mac: CLIENT_MAC,
            mru: 1492,
            echo_interval_ns: 10 * S,
            echo_failures: 3,
            ipv6: false,
        }
    }

    fn config_with_ipv6() -> ClientConfig {
        ClientConfig {
            ipv6: true,
            ..config()
        }
    }

    /// The AC's IPv6CP interface identifier: its link-local address is fe80::1.
    const AC_INTERFACE_ID: [u8; 8] = [0, 0, 0, 0, 0, 0, 0, 1];
    /// CLIENT_MAC's modified EUI-64.
    const CLIENT_INTERFACE_ID: [u8; 8] = [0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01];

    /// What the scripted AC does with the client's IPv6CP.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum AcIpv6 {
        /// An IPv4-only AC: LCP Protocol-Reject.
        Refuse,
        /// Acks the client's identifier and asks for this one of its own.
        Accept([u8; 8]),
        /// Naks any other identifier of the client's with the first (a BRAS assigning
        /// identifiers), then Acks it; asks for the second of its own.
        Assign([u8; 8], [u8; 8]),
        /// Never answers.
        Silent,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum AcAuth {
        None,
        Pap,
        Chap,
    }

    /// An access concentrator written from the RFCs' side of the exchange: it answers what the
    /// client sends, and notes what it saw for the assertions.
    struct ScriptedAc {
        auth: AcAuth,
        /// The MRU the AC asks for in its LCP request (none: the option is left out).
        mru: Option<u16>,
        /// Extra options the AC's LCP request carries.
        extra_lcp_options: Vec<u8>,
        answer_echoes: bool,
        pap_accepts: bool,
        reject_dns: bool,
        /// Asks for VJ compression in its first IPCP request.
        ask_vj: bool,
        /// The AC's own IP-Address option (none: left out).
        address: Option<Ipv4Addr>,
        /// Answers discovery but nothing in the session.
        silent_in_session: bool,
        ipv6: AcIpv6,
        /// RFC 4638: echo a PADR's PPP-Max-Payload in the PADS, up to this.
        max_payload: Option<u16>,
        /// The PPP-Max-Payload of the last PADI and PADR (None: no tag).
        asked_max_payload: (Option<u16>, Option<u16>),
        ipv6cp_requested: bool,
        /// The client's IPv6CP Configure-Acks and Terminate-Requests it received.
        ipv6cp_acks: u32,
        ipv6cp_terminates: u32,

        client_acked_lcp: bool,
        acked_client_lcp: bool,
        challenge: Vec<u8>,
        chap_id: u8,
        challenged: bool,
        ipcp_requested: bool,
        ipcp_id: u8,
        vj_rejected: bool,

        padr_cookie: Option<Vec<u8>>,
        pap_credentials: Option<(Vec<u8>, Vec<u8>)>,
        chap_responses_verified: u32,
        padts: u32,
        /// LCP and IPCP packets it has no script for: (protocol, code, data).
        unscripted: Vec<(u16, u8, Vec<u8>)>,
        /// Every frame it sent, the proptest's corpus.
        sent: Vec<Vec<u8>>,
    }

    impl ScriptedAc {
        fn new(auth: AcAuth) -> ScriptedAc {
            ScriptedAc {
                auth,
                mru: Some(1492),
                extra_lcp_options: Vec::new(),
                answer_echoes: true,
                pap_accepts: true,
                reject_dns: false,
                ask_vj: false,
                address: Some(PEER),
                silent_in_session: false,
                ipv6: AcIpv6::Refuse,
                max_payload: None,
                asked_max_payload: (None, None),
                ipv6cp_requested: false,
                ipv6cp_acks: 0,
                ipv6cp_terminates: 0,
                client_acked_lcp: false,
                acked_client_lcp: false,
                challenge: vec![0x5a; 16],
                chap_id: 0x31,
                challenged: false,
                ipcp_requested: false,
                ipcp_id: 0x70,
                vj_rejected: false,
                padr_cookie: None,
                pap_credentials: None,
                chap_responses_verified: 0,
                padts: 0,
                unscripted: Vec::new(),
                sent: Vec::new(),
            }
        }

        fn handle(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
            let replies = self.answer(frame);
            self.sent.extend(replies.iter().cloned());
            replies
        }

        fn answer(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
            let frame = PppoeFrame::parse(frame).expect("the client sends well-formed frames");
            assert_eq!(frame.source, CLIENT_MAC);
            if frame.ethertype == ETHERTYPE_DISCOVERY {
                let tags = Tags::parse(frame.payload).expect("well-formed tags");
                let host_uniq = tags.first(tag::HOST_UNIQ).map(<[u8]>::to_vec);
                let max_payload = tags
                    .first(tag::PPP_MAX_PAYLOAD)
                    .map(|value| u16::from_be_bytes(value.try_into().expect("2 bytes")));
                match frame.code {
                    code::PADI => self.asked_max_payload.0 = max_payload,
                    code::PADR => self.asked_max_payload.1 = max_payload,
                    _ => {}
                }
                return match frame.code {
                    code::PADI => {
                        assert_eq!(frame.destination, BROADCAST_MAC);
                        let host_uniq = host_uniq.expect("a PADI with Host-Uniq");
                        assert_eq!(host_uniq.len(), 8);
                        assert_eq!(tags.first(tag::SERVICE_NAME), Some(&b""[..]));
                        // A new attempt: the AC's session state starts over.
                        self.client_acked_lcp = false;
                        self.acked_client_lcp = false;
                        self.challenged = false;
                        self.ipcp_requested = false;
                        self.ipv6cp_requested = false;
                        self.vj_rejected = false;
                        vec![pado(&host_uniq, b"test-ac", &[b"", b"isp"])]
                    }
                    code::PADR => {
                        assert_eq!(frame.destination, AC_MAC);
                        self.padr_cookie = tags.first(tag::AC_COOKIE).map(<[u8]>::to_vec);
                        let mut tags = Vec::new();
                        push_tag(&mut tags, tag::SERVICE_NAME, b"");
                        push_tag(&mut tags, tag::HOST_UNIQ, &host_uniq.expect("Host-Uniq"));
                        if let (Some(asked), Some(most)) = (max_payload, self.max_payload) {
                            push_tag(
                                &mut tags,
                                tag::PPP_MAX_PAYLOAD,
                                &asked.min(most).to_be_bytes(),
                            );
                        }
                        let mut out = vec![discovery_frame(
                            CLIENT_MAC,
                            AC_MAC,
                            code::PADS,
                            SESSION_ID,
                            &tags,
                        )];
                        if !self.silent_in_session {
                            out.push(self.lcp_request());
                        }
                        out
                    }
                    code::PADT => {
                        assert_eq!(frame.session_id, SESSION_ID);
                        self.padts += 1;
                        Vec::new()
                    }
                    other => panic!("the client sent discovery code {other:#x}"),
                };
            }
            assert_eq!(frame.destination, AC_MAC);
            assert_eq!(frame.session_id, SESSION_ID);
            if self.silent_in_session {
                return Vec::new();
            }
            let ppp = PppPacket::parse(frame.payload).expect("a PPP packet");
            let packet = ControlPacket::parse(ppp.information).expect("a control packet");
            match ppp.protocol {
                PPP_LCP => self.on_lcp(&packet),
                PPP_PAP => self.on_pap(&packet),
                PPP_CHAP => self.on_chap(&packet),
                PPP_IPCP => self.on_ipcp(&packet),
                PPP_IPV6CP => self.on_ipv6cp(ppp.information, &packet),
                other => panic!("the client sent PPP protocol {other:#06x}"),
            }
        }

        fn lcp_request(&self) -> Vec<u8> {
            let mut options = Vec::new();
            if let Some(mru) = self.mru {
                push_option(&mut options, lcp_option::MRU, &mru.to_be_bytes());
            }
            match self.auth {
                AcAuth::None => {}
                AcAuth::Pap => push_option(&mut options, lcp_option::AUTH_PROTOCOL, &[0xc0, 0x23]),
                AcAuth::Chap => {
                    push_option(&mut options, lcp_option::AUTH_PROTOCOL, &[0xc2, 0x23, 5]);
                }
            }
            push_option(
                &mut options,
                lcp_option::MAGIC_NUMBER,
                &AC_MAGIC.to_be_bytes(),
            );
            options.extend_from_slice(&self.extra_lcp_options);
            ac_control(PPP_LCP, control::CONFIGURE_REQUEST, 1, &options)
        }

        fn on_lcp(&mut self, packet: &ControlPacket<'_>) -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            match packet.code {
                control::CONFIGURE_REQUEST => {
                    out.push(ac_control(
                        PPP_LCP,
                        control::CONFIGURE_ACK,
                        packet.identifier,
                        packet.data,
                    ));
                    self.acked_client_lcp = true;
                }
                control::CONFIGURE_ACK => self.client_acked_lcp = true,
                control::ECHO_REQUEST if self.answer_echoes => {
                    let mut data = AC_MAGIC.to_be_bytes().to_vec();
                    data.extend_from_slice(&packet.data[4..]);
                    out.push(ac_control(
                        PPP_LCP,
                        control::ECHO_REPLY,
                        packet.identifier,
                        &data,
                    ));
                }
                control::ECHO_REQUEST => {}
                code => self.unscripted.push((PPP_LCP, code, packet.data.to_vec())),
            }
            let just_opened = self.client_acked_lcp
                && self.acked_client_lcp
                && matches!(
                    packet.code,
                    control::CONFIGURE_REQUEST | control::CONFIGURE_ACK
                );
            match self.auth {
                AcAuth::Chap if just_opened && !self.challenged => {
                    self.challenged = true;
                    out.push(self.challenge_frame());
                }
                AcAuth::None if just_opened => out.extend(self.first_ipcp_request()),
                _ => {}
            }
            out
        }

        fn challenge_frame(&self) -> Vec<u8> {
            let data = wire::chap_value_data(&self.challenge, b"test-ac");
            ac_control(PPP_CHAP, chap::CHALLENGE, self.chap_id, &data)
        }

        fn on_pap(&mut self, packet: &ControlPacket<'_>) -> Vec<Vec<u8>> {
            assert_eq!(packet.code, pap::AUTHENTICATE_REQUEST);
            let (peer_id, password) = wire::parse_pap_request(packet.data).expect("PAP fields");
            self.pap_credentials = Some((peer_id.to_vec(), password.to_vec()));
            if !self.pap_accepts {
                return vec![ac_control(
                    PPP_PAP,
                    pap::AUTHENTICATE_NAK,
                    packet.identifier,
                    &[0],
                )];
            }
            let mut out = vec![ac_control(
                PPP_PAP,
                pap::AUTHENTICATE_ACK,
                packet.identifier,
                &[0],
            )];
            out.extend(self.first_ipcp_request());
            out
        }

        fn on_chap(&mut self, packet: &ControlPacket<'_>) -> Vec<Vec<u8>> {
            assert_eq!(packet.code, chap::RESPONSE);
            assert_eq!(packet.identifier, self.chap_id);
            let response = ChapValue::parse(packet.data).expect("CHAP response fields");
            // MD5 over identifier || secret || challenge, computed here independently of the
            // client's code.
            let mut input = vec![self.chap_id];
            input.extend_from_slice(PASSWORD.as_bytes());
            input.extend_from_slice(&self.challenge);
            let expected: [u8; 16] = <md5::Md5 as md5::Digest>::digest(&input).into();
            assert_eq!(response.value, expected);
            assert_eq!(response.name, USERNAME.as_bytes());
            self.chap_responses_verified += 1;
            let mut out = vec![ac_control(
                PPP_CHAP,
                chap::SUCCESS,
                packet.identifier,
                b"ok",
            )];
            out.extend(self.first_ipcp_request());
            out
        }

        fn first_ipcp_request(&mut self) -> Option<Vec<u8>> {
            if self.ipcp_requested {
                return None;
            }
            self.ipcp_requested = true;
            Some(self.ipcp_request())
        }

        fn ipcp_request(&mut self) -> Vec<u8> {
            let mut options = Vec::new();
            if self.ask_vj && !self.vj_rejected {
                options.extend_from_slice(&VJ_OPTION);
            }
            if let Some(address) = self.address {
                push_option(&mut options, ipcp_option::IP_ADDRESS, &address.octets());
            }
            self.ipcp_id = self.ipcp_id.wrapping_add(1);
            ac_control(PPP_IPCP, control::CONFIGURE_REQUEST, self.ipcp_id, &options)
        }

        fn on_ipcp(&mut self, packet: &ControlPacket<'_>) -> Vec<Vec<u8>> {
            match packet.code {
                control::CONFIGURE_REQUEST => {
                    let options = Options::parse(packet.data).expect("IPCP options");
                    let is_dns = |kind| {
                        kind == ipcp_option::PRIMARY_DNS || kind == ipcp_option::SECONDARY_DNS
                    };
                    let id = packet.identifier;
                    if self.reject_dns && options.iter().any(|o| is_dns(o.kind)) {
                        let rejected: Vec<u8> = options
                            .iter()
                            .filter(|o| is_dns(o.kind))
                            .flat_map(|o| o.raw.to_vec())
                            .collect();
                        return vec![ac_control(
                            PPP_IPCP,
                            control::CONFIGURE_REJECT,
                            id,
                            &rejected,
                        )];
                    }
                    if options.iter().any(|o| o.value == [0, 0, 0, 0]) {
                        let mut naked = Vec::new();
                        for option in options.iter() {
                            let value = match option.kind {
                                ipcp_option::IP_ADDRESS => LOCAL,
                                ipcp_option::PRIMARY_DNS => DNS1,
                                ipcp_option::SECONDARY_DNS => DNS2,
                                _ => continue,
                            };
                            push_option(&mut naked, option.kind, &value.octets());
                        }
                        return vec![ac_control(PPP_IPCP, control::CONFIGURE_NAK, id, &naked)];
                    }
                    vec![ac_control(
                        PPP_IPCP,
                        control::CONFIGURE_ACK,
                        id,
                        packet.data,
                    )]
                }
                control::CONFIGURE_ACK => Vec::new(),
                control::CONFIGURE_REJECT => {
                    assert_eq!(packet.data, VJ_OPTION);
                    self.vj_rejected = true;
                    vec![self.ipcp_request()]
                }
                code => {
                    self.unscripted.push((PPP_IPCP, code, packet.data.to_vec()));
                    Vec::new()
                }
            }
        }

        fn on_ipv6cp(&mut self, information: &[u8], packet: &ControlPacket<'_>) -> Vec<Vec<u8>> {
            let id = packet.identifier;
            match (self.ipv6, packet.code) {
                (AcIpv6::Refuse, _) => {
                    let mut data = PPP_IPV6CP.to_be_bytes().to_vec();
                    data.extend_from_slice(information);
                    vec![ac_control(PPP_LCP, control::PROTOCOL_REJECT, 0x44, &data)]
                }
                (AcIpv6::Silent, _) => Vec::new(),
                (_, control::TERMINATE_REQUEST) => {
                    self.ipv6cp_terminates += 1;
                    vec![ac_control(PPP_IPV6CP, control::TERMINATE_ACK, id, &[])]
                }
                (_, control::CONFIGURE_ACK) => {
                    self.ipv6cp_acks += 1;
                    Vec::new()
                }
                (AcIpv6::Assign(assigned, _), control::CONFIGURE_REQUEST)
                    if packet.data[2..] != assigned =>
                {
                    let mut naked = Vec::new();
                    push_option(&mut naked, ipv6cp_option::INTERFACE_IDENTIFIER, &assigned);
                    vec![ac_control(PPP_IPV6CP, control::CONFIGURE_NAK, id, &naked)]
                }
                (AcIpv6::Accept(own) | AcIpv6::Assign(_, own), control::CONFIGURE_REQUEST) => {
                    let mut out = vec![ac_control(
                        PPP_IPV6CP,
                        control::CONFIGURE_ACK,
                        id,
                        packet.data,
                    )];
                    if !self.ipv6cp_requested {
                        self.ipv6cp_requested = true;
                        let mut options = Vec::new();
                        push_option(&mut options, ipv6cp_option::INTERFACE_IDENTIFIER, &own);
                        out.push(ac_control(
                            PPP_IPV6CP,
                            control::CONFIGURE_REQUEST,
                            0x60,
                            &options,
                        ));
                    }
                    out
                }
                (_, code) => {
                    self.unscripted
                        .push((PPP_IPV6CP, code, packet.data.to_vec()));
                    Vec::new()
                }
            }
        }
    }

    fn pado(host_uniq: &[u8], ac_name: &[u8], services: &[&[u8]]) -> Vec<u8> {
        let mut tags = Vec::new();
        push_tag(&mut tags, tag::AC_NAME, ac_name);
        for service in services {
            push_tag(&mut tags, tag::SERVICE_NAME, service);
        }
        push_tag(&mut tags, tag::HOST_UNIQ, host_uniq);
        push_tag(&mut tags, tag::AC_COOKIE, COOKIE);
        discovery_frame(CLIENT_MAC, AC_MAC, code::PADO, 0, &tags)
    }

    fn ac_control(protocol: u16, code: u8, identifier: u8, data: &[u8]) -> Vec<u8> {
        session_frame(
            CLIENT_MAC,
            AC_MAC,
            SESSION_ID,
            protocol,
            &control_packet(code, identifier, data),
        )
    }

    fn padt_from(source: [u8; 6], session_id: u16) -> Vec<u8> {
        discovery_frame(CLIENT_MAC, source, code::PADT, session_id, &[])
    }

    /// (protocol, code, identifier, data) of a session frame the client sent.
    fn control_of(frame: &[u8]) -> (u16, u8, u8, Vec<u8>) {
        let frame = PppoeFrame::parse(frame).expect("a frame");
        assert_eq!(frame.ethertype, ETHERTYPE_SESSION);
        let ppp = PppPacket::parse(frame.payload).expect("a PPP packet");
        let packet = ControlPacket::parse(ppp.information).expect("a control packet");
        (
            ppp.protocol,
            packet.code,
            packet.identifier,
            packet.data.to_vec(),
        )
    }

    /// The PPPoE discovery code of a frame, `None` for a session frame.
    fn discovery_code(frame: &[u8]) -> Option<u8> {
        let frame = PppoeFrame::parse(frame).expect("a frame");
        (frame.ethertype == ETHERTYPE_DISCOVERY).then_some(frame.code)
    }

    /// The client and the AC, wired together, on a fake clock.
    struct Harness {
        client: Client,
        ac: ScriptedAc,
        now: u64,
        /// Every frame the client sent, in order.
        client_sent: Vec<Vec<u8>>,
    }

    impl Harness {
        fn new(ac: ScriptedAc) -> Harness {
            Harness::with_config(ac, config())
        }

        fn with_config(ac: ScriptedAc, config: ClientConfig) -> Harness {
            Harness {
                client: Client::new(config, 0x5eed),
                ac,
                now: 1_000 * S,
                client_sent: Vec::new(),
            }
        }

        /// Starts the client and plays the exchange out until nothing is in flight or the
        /// client reaches `target`.
        fn start_until(&mut self, target: Option<State>) {
            let mut out = Vec::new();
            self.client.start(self.now, &mut out);
            self.client_sent.extend(out.iter().cloned());
            if Some(self.client.state()) != target {
                self.deliver(out, target);
            }
        }

        fn start(&mut self) {
            self.start_until(None);
        }

        /// Hands frames the client sent (and `client_sent` already holds) to the AC, its
        /// answers to the client, and so on.
        fn deliver(&mut self, frames: Vec<Vec<u8>>, target: Option<State>) {
            let mut in_flight: VecDeque<Vec<u8>> = frames.into();
            for _ in 0..200 {
                let Some(frame) = in_flight.pop_front() else {
                    return;
                };
                for reply in self.ac.handle(&frame) {
                    let out = self.receive(&reply);
                    if Some(self.client.state()) == target {
                        return;
                    }
                    in_flight.extend(out);
                }
            }
            panic!("the exchange did not settle");
        }

        /// Hands a frame to the client; returns what it sent, without delivering it.
        fn receive(&mut self, frame: &[u8]) -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            self.client.receive(frame, self.now, &mut out);
            self.client_sent.extend(out.iter().cloned());
            out
        }

        /// Moves the clock to `now` and polls; returns what the client sent, undelivered.
        fn poll_at(&mut self, now: u64) -> Vec<Vec<u8>> {
            self.now = now;
            let mut out = Vec::new();
            self.client.poll(now, &mut out);
            self.client_sent.extend(out.iter().cloned());
            out
        }

        fn last_lcp_request(&self) -> (u8, Vec<u8>) {
            self.client_sent
                .iter()
                .filter(|f| discovery_code(f).is_none())
                .map(|f| control_of(f))
                .rfind(|(protocol, code, _, _)| {
                    *protocol == PPP_LCP && *code == control::CONFIGURE_REQUEST
                })
                .map(|(_, _, id, data)| (id, data))
                .expect("an LCP Configure-Request")
        }
    }

    fn up_with(ac: ScriptedAc) -> Harness {
        let mut harness = Harness::new(ac);
        harness.start();
        assert_eq!(harness.client.state(), State::Up);
        harness
    }

    #[test]
    fn a_pap_handshake_reaches_up_with_the_negotiated_session() {
        let harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let client = &harness.client;
        assert_eq!(
            client.session(),
            Some(&Session {
                id: SESSION_ID,
                ac_mac: AC_MAC,
                local: LOCAL,
                peer: PEER,
                dns: vec![DNS1, DNS2],
                mtu: 1492,
                ipv6: None,
            })
        );
        assert_eq!(client.discovery_session(), Some((SESSION_ID, AC_MAC)));
        assert_eq!(
            harness.ac.pap_credentials,
            Some((USERNAME.as_bytes().to_vec(), PASSWORD.as_bytes().to_vec()))
        );
        assert_eq!(harness.ac.padr_cookie.as_deref(), Some(COOKIE));
        let counters = client.counters();
        assert_eq!(counters.sessions_up, 1);
        assert_eq!((counters.malformed, counters.ignored), (0, 0));
        assert_eq!(counters.control_sent, harness.client_sent.len() as u64);
        assert!(
            harness.ac.unscripted.is_empty(),
            "{:?}",
            harness.ac.unscripted
        );
        // Every frame leaves from our MAC.
        for frame in &harness.client_sent {
            assert_eq!(frame[6..12], CLIENT_MAC);
        }
    }

    #[test]
    fn a_chap_handshake_reaches_up_and_a_smaller_peer_mru_lowers_the_mtu() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.mru = Some(1400);
        let mut harness = up_with(ac);
        assert_eq!(harness.ac.chap_responses_verified, 1);
        let session = harness.client.session().expect("up").clone();
        assert_eq!(session.mtu, 1400);
        assert_eq!((session.local, session.peer), (LOCAL, PEER));

        // Re-authentication while up: a new challenge is answered, and the session stays.
        harness.ac.chap_id = 0x32;
        harness.ac.challenge = (1..=20).collect();
        let challenge = harness.ac.challenge_frame();
        let out = harness.receive(&challenge);
        harness.deliver(out, None);
        assert_eq!(harness.ac.chap_responses_verified, 2);
        assert_eq!(harness.client.state(), State::Up);
        assert_eq!(harness.client.session(), Some(&session));
    }

    #[test]
    fn a_peer_that_asks_no_authentication_goes_straight_to_ipcp() {
        let harness = up_with(ScriptedAc::new(AcAuth::None));
        assert!(harness.ac.pap_credentials.is_none());
        assert_eq!(harness.ac.chap_responses_verified, 0);
        assert_eq!(harness.client.session().map(|s| s.local), Some(LOCAL));
    }

    #[test]
    fn a_padt_is_believed_only_from_the_ac_for_our_session() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        assert!(harness
            .receive(&padt_from(STRANGER_MAC, SESSION_ID))
            .is_empty());
        assert!(harness
            .receive(&padt_from(AC_MAC, SESSION_ID + 1))
            .is_empty());
        assert_eq!(harness.client.state(), State::Up);
        assert_eq!(harness.client.counters().ignored, 2);

        let out = harness.receive(&padt_from(AC_MAC, SESSION_ID));
        assert!(out.is_empty(), "no PADT answers a PADT");
        assert_eq!(harness.client.state(), State::Backoff);
        assert_eq!(harness.client.session(), None);
        assert_eq!(harness.client.discovery_session(), None);
        assert_eq!(harness.client.counters().ends[EndReason::Padt as usize], 1);

        let ended = harness.now;
        assert!(harness.poll_at(ended + S / 2).is_empty());
        let out = harness.poll_at(ended + S);
        assert_eq!(out.len(), 1);
        assert_eq!(discovery_code(&out[0]), Some(code::PADI));
        assert_eq!(out[0][..6], BROADCAST_MAC);
        assert_eq!(harness.client.state(), State::Discovery);
        // And the new attempt comes up again, the backoff back at its start.
        harness.deliver(out, None);
        assert_eq!(harness.client.state(), State::Up);
        assert_eq!(harness.client.counters().sessions_up, 2);
    }

    #[test]
    fn unanswered_echoes_end_the_session_after_echo_failures_intervals() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.answer_echoes = false;
        let mut harness = up_with(ac);
        let up_at = harness.now;
        for tick in 1..=3 {
            let out = harness.poll_at(up_at + tick * 10 * S);
            assert_eq!(out.len(), 1);
            let (protocol, code, _, data) = control_of(&out[0]);
            assert_eq!((protocol, code), (PPP_LCP, control::ECHO_REQUEST));
            assert_eq!(data.len(), 4);
            harness.deliver(out, None);
            assert_eq!(harness.client.state(), State::Up);
        }
        assert!(harness.poll_at(up_at + 35 * S).is_empty());
        let out = harness.poll_at(up_at + 40 * S);
        assert_eq!(out.len(), 1);
        assert_eq!(discovery_code(&out[0]), Some(code::PADT));
        assert_eq!(harness.client.state(), State::Backoff);
        let counters = harness.client.counters();
        assert_eq!(counters.echo_requests_sent, 3);
        assert_eq!(counters.ends[EndReason::EchoTimeout as usize], 1);
    }

    #[test]
    fn an_echo_reply_resets_the_unanswered_count() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.answer_echoes = false;
        let mut harness = up_with(ac);
        let up_at = harness.now;
        harness.poll_at(up_at + 10 * S);
        harness.poll_at(up_at + 20 * S);
        harness.ac.answer_echoes = true;
        let out = harness.poll_at(up_at + 30 * S);
        harness.deliver(out, None);
        assert_eq!(harness.client.counters().echo_replies_received, 1);
        harness.ac.answer_echoes = false;
        for tick in 4..=6 {
            harness.poll_at(up_at + tick * 10 * S);
        }
        assert_eq!(harness.client.state(), State::Up);
        harness.poll_at(up_at + 70 * S);
        assert_eq!(harness.client.state(), State::Backoff);
    }

    #[test]
    fn a_terminate_request_is_acked_and_ends_the_session() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let out = harness.receive(&ac_control(
            PPP_LCP,
            control::TERMINATE_REQUEST,
            0x42,
            b"bye",
        ));
        assert_eq!(out.len(), 2);
        assert_eq!(
            control_of(&out[0]),
            (PPP_LCP, control::TERMINATE_ACK, 0x42, Vec::new())
        );
        assert_eq!(discovery_code(&out[1]), Some(code::PADT));
        assert_eq!(harness.client.state(), State::Backoff);
        assert_eq!(
            harness.client.counters().ends[EndReason::LcpTerminate as usize],
            1
        );
    }

    #[test]
    fn ipv6cp_gets_a_protocol_reject() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let ipv6cp = control_packet(
            control::CONFIGURE_REQUEST,
            7,
            &[1, 10, 0, 0, 0, 0, 0, 0, 0, 1],
        );
        let frame = session_frame(CLIENT_MAC, AC_MAC, SESSION_ID, PPP_IPV6CP, &ipv6cp);
        let out = harness.receive(&frame);
        assert_eq!(out.len(), 1);
        let (protocol, code, _, data) = control_of(&out[0]);
        assert_eq!((protocol, code), (PPP_LCP, control::PROTOCOL_REJECT));
        assert_eq!(data[..2], PPP_IPV6CP.to_be_bytes());
        assert_eq!(data[2..], ipv6cp[..]);
        assert_eq!(harness.client.state(), State::Up);
    }

    fn up_with_ipv6(ac: ScriptedAc) -> Harness {
        let mut harness = Harness::with_config(ac, config_with_ipv6());
        harness.start();
        assert_eq!(harness.client.state(), State::Up);
        harness
    }

    /// The client's IPv6CP packets, as (code, identifier, data).
    fn ipv6cp_sent(harness: &Harness) -> Vec<(u8, u8, Vec<u8>)> {
        harness
            .client_sent
            .iter()
            .filter(|f| discovery_code(f).is_none())
            .map(|f| control_of(f))
            .filter(|(protocol, ..)| *protocol == PPP_IPV6CP)
            .map(|(_, code, id, data)| (code, id, data))
            .collect()
    }

    #[test]
    fn ipv6cp_opens_beside_ipcp_with_the_macs_identifier() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let harness = up_with_ipv6(ac);
        let session = harness.client.session().expect("up");
        let link = session.ipv6.expect("IPv6CP open");
        assert_eq!(link.local_id, CLIENT_INTERFACE_ID);
        assert_eq!(link.peer_id, Some(AC_INTERFACE_ID));
        assert_eq!(
            link.peer_link_local(),
            Some("fe80::1".parse::<Ipv6Addr>().unwrap())
        );
        assert_eq!(
            link.local_link_local(),
            crate::wire::ipv6::link_local(crate::wire::EthernetAddress(CLIENT_MAC))
        );
        assert_eq!(harness.ac.ipv6cp_acks, 1);
        let mut request = Vec::new();
        push_option(
            &mut request,
            ipv6cp_option::INTERFACE_IDENTIFIER,
            &CLIENT_INTERFACE_ID,
        );
        assert_eq!(ipv6cp_sent(&harness)[0].2, request);
        assert_eq!(harness.client.counters().ipv6_opened, 1);
        // IPv4 is what it was.
        assert_eq!(session.local, LOCAL);
    }

    #[test]
    fn without_ipv6_configured_the_client_sends_no_ipv6cp() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let harness = up_with(ac);
        assert!(ipv6cp_sent(&harness).is_empty());
        assert_eq!(harness.client.session().unwrap().ipv6, None);
    }

    #[test]
    fn an_ipv4_only_peer_leaves_the_session_up_without_ipv6() {
        let mut harness = up_with_ipv6(ScriptedAc::new(AcAuth::Pap));
        assert_eq!(harness.client.session().unwrap().ipv6, None);
        assert_eq!(harness.client.counters().ipv6_failures, 1);
        let sent = ipv6cp_sent(&harness).len();
        // No more IPv6CP requests, however long it runs.
        for step in 1..=40 {
            let out = harness.poll_at(1_000 * S + step * S);
            harness.deliver(out, None);
        }
        assert_eq!(ipv6cp_sent(&harness).len(), sent);
        assert_eq!(harness.client.state(), State::Up);
    }

    #[test]
    fn an_identifier_the_peer_assigns_by_nak_is_taken() {
        let assigned = [0x02, 0, 0, 0, 0, 0, 0, 0x22];
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Assign(assigned, AC_INTERFACE_ID);
        let harness = up_with_ipv6(ac);
        let link = harness.client.session().unwrap().ipv6.expect("IPv6CP open");
        assert_eq!(link.local_id, assigned);
        assert_eq!(
            link.local_link_local(),
            "fe80::200:0:0:22".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(harness.client.counters().ipv6_failures, 0);
        assert_eq!(harness.ac.ipv6cp_terminates, 0);
    }

    #[test]
    fn a_nak_never_hands_us_the_peers_own_identifier() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let mut harness = up_with_ipv6(ac);
        // The AC renegotiates with a request we Reject (so its identifier is not Acked), then
        // Naks ours with its own identifier.
        let mut options = Vec::new();
        push_option(
            &mut options,
            ipv6cp_option::INTERFACE_IDENTIFIER,
            &AC_INTERFACE_ID,
        );
        let mut request = options.clone();
        request.extend_from_slice(&[ipv6cp_option::IPV6_COMPRESSION_PROTOCOL, 4, 0x00, 0x4f]);
        let out = harness.receive(&ac_control(
            PPP_IPV6CP,
            control::CONFIGURE_REQUEST,
            0x63,
            &request,
        ));
        let (_, _, ours, _) = out
            .iter()
            .map(|frame| control_of(frame))
            .find(|(_, code, ..)| *code == control::CONFIGURE_REQUEST)
            .expect("our request again");
        let out = harness.receive(&ac_control(
            PPP_IPV6CP,
            control::CONFIGURE_NAK,
            ours,
            &options,
        ));
        let (_, code, _, request) = control_of(out.last().expect("our request again"));
        assert_eq!(code, control::CONFIGURE_REQUEST);
        assert_eq!(
            request[2..],
            CLIENT_INTERFACE_ID,
            "the peer's identifier taken"
        );
    }

    #[test]
    fn once_ipv6cp_failed_the_peers_requests_get_a_terminate_ack_until_lcp_restarts() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Silent;
        let mut harness = up_with_ipv6(ac);
        for step in 1..=40 {
            let out = harness.poll_at(1_000 * S + step * S);
            harness.deliver(out, None);
        }
        assert_eq!(harness.client.counters().ipv6_failures, 1);
        let sent = ipv6cp_sent(&harness).len();
        let mut options = Vec::new();
        push_option(
            &mut options,
            ipv6cp_option::INTERFACE_IDENTIFIER,
            &AC_INTERFACE_ID,
        );
        for id in [0x61, 0x62] {
            let request = ac_control(PPP_IPV6CP, control::CONFIGURE_REQUEST, id, &options);
            let out = harness.receive(&request);
            assert_eq!(out.len(), 1);
            let (protocol, code, answered, _) = control_of(&out[0]);
            assert_eq!(
                (protocol, code, answered),
                (PPP_IPV6CP, control::TERMINATE_ACK, id)
            );
        }
        assert_eq!(ipv6cp_sent(&harness).len(), sent + 2);
        assert_eq!(harness.client.counters().ipv6_failures, 1);
        assert_eq!(harness.client.session().unwrap().ipv6, None);
    }

    #[test]
    fn a_link_below_1280_bytes_gets_no_ipv6cp() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        ac.mru = Some(1200);
        let harness = up_with_ipv6(ac);
        assert!(ipv6cp_sent(&harness).is_empty());
        assert_eq!(harness.client.session().unwrap().ipv6, None);
        assert_eq!(harness.client.counters().ipv6_failures, 1);
    }

    #[test]
    fn ipv6_stays_open_across_an_ipcp_renegotiation_and_restarts_with_lcp() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let mut harness = up_with_ipv6(ac);
        assert!(harness.client.session().unwrap().ipv6.is_some());
        // The AC asks IPCP again: the session is down until it opens, then carries IPv6 as
        // before.
        let request = harness.ac.ipcp_request();
        let out = harness.receive(&request);
        assert_eq!(harness.client.session(), None);
        harness.deliver(out, None);
        let session = harness.client.session().expect("up again");
        assert!(session.ipv6.is_some());
        // LCP starts over: so does IPv6CP, and it opens again.
        let opened = harness.client.counters().ipv6_opened;
        harness.ac.ipv6cp_requested = false;
        harness.ac.challenged = false;
        harness.ac.ipcp_requested = false;
        harness.ac.client_acked_lcp = false;
        harness.ac.acked_client_lcp = false;
        let lcp = harness.ac.lcp_request();
        let out = harness.receive(&lcp);
        assert_eq!(harness.client.session(), None);
        harness.deliver(out, None);
        assert!(harness.client.session().expect("up again").ipv6.is_some());
        assert_eq!(harness.client.counters().ipv6_opened, opened + 1);
    }

    #[test]
    fn a_silent_ipv6cp_peer_costs_ipv6_alone_after_max_configure() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Silent;
        let mut harness = up_with_ipv6(ac);
        for step in 1..=60 {
            let out = harness.poll_at(1_000 * S + step * S);
            harness.deliver(out, None);
        }
        let requests = ipv6cp_sent(&harness)
            .iter()
            .filter(|(code, ..)| *code == control::CONFIGURE_REQUEST)
            .count();
        assert_eq!(requests, MAX_CONFIGURE as usize);
        assert_eq!(harness.client.state(), State::Up);
        assert_eq!(harness.client.counters().ipv6_failures, 1);
    }

    #[test]
    fn an_unusable_peer_identifier_is_naked_and_other_options_rejected() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let mut harness = up_with_ipv6(ac);
        for (bad, id) in [([0u8; 8], 0x71), (CLIENT_INTERFACE_ID, 0x72)] {
            let mut options = Vec::new();
            push_option(&mut options, ipv6cp_option::INTERFACE_IDENTIFIER, &bad);
            let request = ac_control(PPP_IPV6CP, control::CONFIGURE_REQUEST, id, &options);
            let out = harness.receive(&request);
            let (_, code, answered, data) = control_of(out.last().expect("an answer"));
            assert_eq!((code, answered), (control::CONFIGURE_NAK, id));
            let suggested = &data[2..];
            assert_eq!(suggested.len(), 8);
            assert!(suggested != [0; 8] && suggested != CLIENT_INTERFACE_ID);
            // Renegotiating: IPv6 is down until it opens again.
            assert_eq!(harness.client.session().unwrap().ipv6, None);
        }
        let compression = [ipv6cp_option::IPV6_COMPRESSION_PROTOCOL, 4, 0x00, 0x4f];
        let request = ac_control(PPP_IPV6CP, control::CONFIGURE_REQUEST, 0x73, &compression);
        let out = harness.receive(&request);
        let (_, code, _, data) = control_of(out.last().expect("an answer"));
        assert_eq!(
            (code, data),
            (control::CONFIGURE_REJECT, compression.to_vec())
        );
    }

    #[test]
    fn a_terminate_request_stops_ipv6_and_keeps_ipv4() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        let mut harness = up_with_ipv6(ac);
        assert!(harness.client.session().unwrap().ipv6.is_some());
        let out = harness.receive(&ac_control(PPP_IPV6CP, control::TERMINATE_REQUEST, 9, &[]));
        let (protocol, code, id, _) = control_of(&out[0]);
        assert_eq!(
            (protocol, code, id),
            (PPP_IPV6CP, control::TERMINATE_ACK, 9)
        );
        let session = harness.client.session().expect("IPv4 stays up");
        assert_eq!(session.ipv6, None);
        assert_eq!(session.local, LOCAL);
    }

    fn config_with_mru(mru: u16) -> ClientConfig {
        ClientConfig { mru, ..config() }
    }

    #[test]
    fn an_mru_above_1492_is_asked_by_ppp_max_payload_and_used_where_granted() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.mru = Some(1500);
        ac.max_payload = Some(1500);
        let mut harness = Harness::with_config(ac, config_with_mru(1500));
        harness.start();
        assert_eq!(harness.ac.asked_max_payload, (Some(1500), Some(1500)));
        let (_, request) = harness.last_lcp_request();
        let mut mru = Vec::new();
        push_option(&mut mru, lcp_option::MRU, &1500u16.to_be_bytes());
        assert!(request.starts_with(&mru), "{request:02x?}");
        assert_eq!(harness.client.session().expect("up").mtu, 1500);
    }

    #[test]
    fn without_the_acs_echo_the_mru_stays_at_1492() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.mru = Some(1500);
        let mut harness = Harness::with_config(ac, config_with_mru(1500));
        harness.start();
        assert_eq!(harness.ac.asked_max_payload, (Some(1500), Some(1500)));
        let (_, request) = harness.last_lcp_request();
        let mut mru = Vec::new();
        push_option(&mut mru, lcp_option::MRU, &1492u16.to_be_bytes());
        assert!(request.starts_with(&mru), "{request:02x?}");
        assert_eq!(harness.client.session().expect("up").mtu, 1492);
        // An AC granting less than asked: the least of the two.
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.mru = Some(1500);
        ac.max_payload = Some(1496);
        let mut harness = Harness::with_config(ac, config_with_mru(1500));
        harness.start();
        assert_eq!(harness.client.session().expect("up").mtu, 1496);
    }

    #[test]
    fn an_mru_of_1492_or_less_sends_no_ppp_max_payload() {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.max_payload = Some(1500);
        let harness = up_with(ac);
        assert_eq!(harness.ac.asked_max_payload, (None, None));
        assert_eq!(harness.client.session().unwrap().mtu, 1492);
    }

    #[test]
    fn an_unknown_lcp_code_gets_a_code_reject() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let unknown = ac_control(PPP_LCP, 0x2a, 9, &[1, 2, 3]);
        let out = harness.receive(&unknown);
        assert_eq!(out.len(), 1);
        let (protocol, code, _, data) = control_of(&out[0]);
        assert_eq!((protocol, code), (PPP_LCP, control::CODE_REJECT));
        assert_eq!(data, [0x2a, 9, 0, 7, 1, 2, 3]);
    }

    #[test]
    fn unknown_lcp_options_pfc_and_acfc_get_a_configure_reject() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        let unknown = [0x42, 3, 0x99];
        ac.extra_lcp_options = [&unknown[..], &[7, 2], &[8, 2]].concat();
        let mut harness = Harness::new(ac);
        harness.start();
        let rejects: Vec<_> = harness
            .client_sent
            .iter()
            .filter(|f| discovery_code(f).is_none())
            .map(|f| control_of(f))
            .filter(|(_, code, _, _)| *code == control::CONFIGURE_REJECT)
            .collect();
        assert_eq!(rejects.len(), 1);
        assert_eq!(rejects[0].0, PPP_LCP);
        assert_eq!(rejects[0].3, [0x42, 3, 0x99, 7, 2, 8, 2]);
        // This AC does not retry without them, so LCP does not open.
        assert_eq!(harness.client.state(), State::Lcp);
    }

    #[test]
    fn a_magic_number_equal_to_ours_is_naked_with_another() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        let (_, our_options) = harness.last_lcp_request();
        let our_magic = Options::parse(&our_options)
            .unwrap()
            .iter()
            .find(|o| o.kind == lcp_option::MAGIC_NUMBER)
            .and_then(|o| o.value_u32())
            .expect("we send a magic number");
        let mut options = Vec::new();
        push_option(
            &mut options,
            lcp_option::MAGIC_NUMBER,
            &our_magic.to_be_bytes(),
        );
        let out = harness.receive(&ac_control(
            PPP_LCP,
            control::CONFIGURE_REQUEST,
            5,
            &options,
        ));
        assert_eq!(out.len(), 1);
        let (_, code, id, data) = control_of(&out[0]);
        assert_eq!((code, id), (control::CONFIGURE_NAK, 5));
        let suggested = Options::parse(&data).unwrap().iter().next().unwrap();
        assert_eq!(suggested.kind, lcp_option::MAGIC_NUMBER);
        assert_ne!(suggested.value_u32(), Some(our_magic));
    }

    #[test]
    fn an_mru_below_576_is_naked_either_way() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        // The peer asks us to send it frames of at most 128 bytes: Naked with 576.
        let mut options = Vec::new();
        push_option(&mut options, lcp_option::MRU, &128u16.to_be_bytes());
        let out = harness.receive(&ac_control(
            PPP_LCP,
            control::CONFIGURE_REQUEST,
            7,
            &options,
        ));
        let (_, code, id, data) = control_of(&out[0]);
        assert_eq!((code, id), (control::CONFIGURE_NAK, 7));
        assert_eq!(data, [lcp_option::MRU, 4, 0x02, 0x40]);
        // The peer Naks our MRU down to 575: our request keeps asking for 1492.
        let (id, _) = harness.last_lcp_request();
        let mut nak = Vec::new();
        push_option(&mut nak, lcp_option::MRU, &575u16.to_be_bytes());
        harness.receive(&ac_control(PPP_LCP, control::CONFIGURE_NAK, id, &nak));
        let (_, options) = harness.last_lcp_request();
        let mru = Options::parse(&options)
            .unwrap()
            .iter()
            .find(|o| o.kind == lcp_option::MRU)
            .and_then(|o| o.value_u16());
        assert_eq!(mru, Some(1492));
    }

    #[test]
    fn chap_with_another_algorithm_is_naked_with_chap_md5() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        let mut options = Vec::new();
        push_option(&mut options, lcp_option::AUTH_PROTOCOL, &[0xc2, 0x23, 0x81]);
        let out = harness.receive(&ac_control(
            PPP_LCP,
            control::CONFIGURE_REQUEST,
            6,
            &options,
        ));
        let (_, code, id, data) = control_of(&out[0]);
        assert_eq!((code, id), (control::CONFIGURE_NAK, 6));
        assert_eq!(data, [lcp_option::AUTH_PROTOCOL, 5, 0xc2, 0x23, 5]);
    }

    #[test]
    fn a_nak_lowers_our_mru_but_never_raises_it() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        let mru_of = |options: &[u8]| {
            Options::parse(options)
                .unwrap()
                .iter()
                .find(|o| o.kind == lcp_option::MRU)
                .and_then(|o| o.value_u16())
        };
        let (id, options) = harness.last_lcp_request();
        assert_eq!(mru_of(&options), Some(1492));
        let mut nak = Vec::new();
        push_option(&mut nak, lcp_option::MRU, &1400u16.to_be_bytes());
        harness.receive(&ac_control(PPP_LCP, control::CONFIGURE_NAK, id, &nak));
        let (id, options) = harness.last_lcp_request();
        assert_eq!(mru_of(&options), Some(1400));

        let mut nak = Vec::new();
        push_option(&mut nak, lcp_option::MRU, &1500u16.to_be_bytes());
        harness.receive(&ac_control(PPP_LCP, control::CONFIGURE_NAK, id, &nak));
        let (id, options) = harness.last_lcp_request();
        assert_eq!(mru_of(&options), Some(1400));

        // A Reject drops the option from later requests.
        let mut reject = Vec::new();
        push_option(&mut reject, lcp_option::MRU, &1400u16.to_be_bytes());
        harness.receive(&ac_control(PPP_LCP, control::CONFIGURE_REJECT, id, &reject));
        let (_, options) = harness.last_lcp_request();
        assert_eq!(mru_of(&options), None);
        // A reply to a stale identifier is ignored.
        let before = harness.client.counters().ignored;
        harness.receive(&ac_control(PPP_LCP, control::CONFIGURE_NAK, id, &nak));
        assert_eq!(harness.client.counters().ignored, before + 1);
    }

    #[test]
    fn rejected_dns_options_are_dropped_and_the_peers_extra_options_rejected() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.reject_dns = true;
        ac.ask_vj = true;
        let harness = up_with(ac);
        assert!(harness.ac.vj_rejected);
        let session = harness.client.session().unwrap();
        assert_eq!(session.dns, Vec::<Ipv4Addr>::new());
        assert_eq!((session.local, session.peer), (LOCAL, PEER));
    }

    #[test]
    fn a_peer_without_an_address_gets_pppds_default() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.address = None;
        let harness = up_with(ac);
        assert_eq!(
            harness.client.session().map(|s| s.peer),
            Some(Ipv4Addr::new(10, 64, 64, 64))
        );
    }

    #[test]
    fn a_pap_nak_ends_the_session_as_an_authentication_failure() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.pap_accepts = false;
        let mut harness = Harness::new(ac);
        harness.start();
        assert_eq!(harness.client.state(), State::Backoff);
        assert_eq!(
            harness.client.counters().ends[EndReason::AuthFailed as usize],
            1
        );
        assert_eq!(harness.ac.padts, 1);
    }

    #[test]
    fn stop_terminates_lcp_then_sends_a_padt_and_stays_stopped() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let mut out = Vec::new();
        harness.client.stop(&mut out);
        assert_eq!(out.len(), 2);
        let (protocol, code, _, _) = control_of(&out[0]);
        assert_eq!((protocol, code), (PPP_LCP, control::TERMINATE_REQUEST));
        assert_eq!(discovery_code(&out[1]), Some(code::PADT));
        assert_eq!(out[1][..6], AC_MAC);
        assert_eq!(harness.client.state(), State::Stopped);
        assert_eq!(
            harness.client.counters().ends[EndReason::Stopped as usize],
            1
        );
        assert!(harness.poll_at(harness.now + 100 * S).is_empty());
        assert!(harness.receive(&padt_from(AC_MAC, SESSION_ID)).is_empty());
        // start() begins again.
        let mut out = Vec::new();
        harness.client.start(harness.now, &mut out);
        assert_eq!(discovery_code(&out[0]), Some(code::PADI));
    }

    #[test]
    fn padis_are_retransmitted_with_a_doubling_interval_capped_at_8_s() {
        let mut client = Client::new(config(), 1);
        let mut out = Vec::new();
        let start = 50 * S;
        client.start(start, &mut out);
        assert_eq!(out.len(), 1);
        let mut sent_at = vec![start];
        let mut now = start;
        while now < start + 40 * S {
            now += S / 10;
            let mut out = Vec::new();
            client.poll(now, &mut out);
            if !out.is_empty() {
                assert_eq!(discovery_code(&out[0]), Some(code::PADI));
                sent_at.push(now);
            }
        }
        let intervals: Vec<u64> = sent_at
            .windows(2)
            .map(|w| (w[1] - w[0]) / (S / 10))
            .collect();
        assert_eq!(intervals, [10, 20, 40, 80, 80, 80, 80]);
    }

    #[test]
    fn padrs_give_up_after_five_and_discovery_starts_again() {
        let mut client = Client::new(config(), 2);
        let mut out = Vec::new();
        client.start(0, &mut out);
        let host_uniq = {
            let frame = PppoeFrame::parse(&out[0]).unwrap();
            Tags::parse(frame.payload)
                .unwrap()
                .first(tag::HOST_UNIQ)
                .unwrap()
                .to_vec()
        };
        let mut out = Vec::new();
        client.receive(&pado(&host_uniq, b"ac", &[b""]), 0, &mut out);
        assert_eq!(client.state(), State::Requesting);
        let padr = PppoeFrame::parse(&out[0]).unwrap();
        assert_eq!((padr.code, padr.destination), (code::PADR, AC_MAC));
        let mut padrs = 1;
        let mut now = 0;
        while client.state() == State::Requesting {
            now += S;
            let mut out = Vec::new();
            client.poll(now, &mut out);
            padrs += out
                .iter()
                .filter(|f| discovery_code(f) == Some(code::PADR))
                .count();
        }
        assert_eq!(padrs, 5);
        assert_eq!(now, 15 * S);
        assert_eq!(client.state(), State::Discovery);
        assert_eq!(client.counters().discovery_failures, 1);
    }

    #[test]
    fn pados_that_do_not_match_are_ignored() {
        let mut config = config();
        config.ac_name = Some("wanted-ac".into());
        config.service_name = "isp".into();
        let mut client = Client::new(config, 3);
        let mut out = Vec::new();
        client.start(0, &mut out);
        let host_uniq = {
            let frame = PppoeFrame::parse(&out[0]).unwrap();
            Tags::parse(frame.payload)
                .unwrap()
                .first(tag::HOST_UNIQ)
                .unwrap()
                .to_vec()
        };
        let offers = [
            pado(&[0; 8], b"wanted-ac", &[b"isp"]),
            pado(&host_uniq, b"other-ac", &[b"isp"]),
            pado(&host_uniq, b"wanted-ac", &[b"other"]),
        ];
        for offer in &offers {
            let mut out = Vec::new();
            client.receive(offer, 0, &mut out);
            assert!(out.is_empty());
        }
        let mut with_error = Vec::new();
        push_tag(&mut with_error, tag::AC_NAME, b"wanted-ac");
        push_tag(&mut with_error, tag::SERVICE_NAME, b"isp");
        push_tag(&mut with_error, tag::HOST_UNIQ, &host_uniq);
        push_tag(&mut with_error, tag::AC_SYSTEM_ERROR, b"full");
        let mut out = Vec::new();
        client.receive(
            &discovery_frame(CLIENT_MAC, AC_MAC, code::PADO, 0, &with_error),
            0,
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(client.counters().ignored, 4);
        assert_eq!(client.state(), State::Discovery);

        let mut out = Vec::new();
        client.receive(&pado(&host_uniq, b"wanted-ac", &[b"", b"isp"]), 0, &mut out);
        assert_eq!(client.state(), State::Requesting);
    }

    #[test]
    fn a_pads_with_an_error_tag_backs_off() {
        let mut client = Client::new(config(), 4);
        let mut out = Vec::new();
        client.start(0, &mut out);
        let host_uniq = {
            let frame = PppoeFrame::parse(&out[0]).unwrap();
            Tags::parse(frame.payload)
                .unwrap()
                .first(tag::HOST_UNIQ)
                .unwrap()
                .to_vec()
        };
        client.receive(&pado(&host_uniq, b"ac", &[b""]), 0, &mut Vec::new());
        let mut tags = Vec::new();
        push_tag(&mut tags, tag::HOST_UNIQ, &host_uniq);
        push_tag(&mut tags, tag::SERVICE_NAME_ERROR, b"");
        let mut out = Vec::new();
        client.receive(
            &discovery_frame(CLIENT_MAC, AC_MAC, code::PADS, 0, &tags),
            0,
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(client.state(), State::Backoff);
        assert_eq!(client.counters().discovery_failures, 1);
        let mut out = Vec::new();
        client.poll(S, &mut out);
        assert_eq!(client.state(), State::Discovery);
    }

    #[test]
    fn a_silent_lcp_peer_times_out_after_max_configure_and_backoff_doubles() {
        let mut ac = ScriptedAc::new(AcAuth::Pap);
        ac.silent_in_session = true;
        let mut harness = Harness::new(ac);
        harness.start();
        assert_eq!(harness.client.state(), State::Lcp);
        let mut requests = 1;
        let mut now = harness.now;
        while harness.client.state() == State::Lcp {
            now += S;
            requests += harness
                .poll_at(now)
                .iter()
                .filter(|f| discovery_code(f).is_none())
                .count();
        }
        assert_eq!(requests, MAX_CONFIGURE as usize);
        assert_eq!(harness.client.state(), State::Backoff);
        assert_eq!(
            harness.client.counters().ends[EndReason::NegotiationTimeout as usize],
            1
        );
        // First backoff 1 s, the next one 2 s.
        let ended = now;
        let out = harness.poll_at(ended + S);
        assert_eq!(harness.client.state(), State::Discovery);
        harness.deliver(out, None);
        assert_eq!(harness.client.state(), State::Lcp);
        let mut now = harness.now;
        while harness.client.state() == State::Lcp {
            now += S;
            harness.poll_at(now);
        }
        harness.poll_at(now + S);
        assert_eq!(harness.client.state(), State::Backoff);
        harness.poll_at(now + 2 * S);
        assert_eq!(harness.client.state(), State::Discovery);
    }

    #[test]
    fn bad_pppoe_lengths_are_counted_as_malformed() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        let good = ac_control(PPP_LCP, control::ECHO_REQUEST, 1, &[0, 0, 0, 0]);

        let mut too_long = good.clone();
        too_long[18..20].copy_from_slice(&1000u16.to_be_bytes());
        let mut too_short_for_ppp = good.clone();
        too_short_for_ppp[18..20].copy_from_slice(&1u16.to_be_bytes());
        let mut lcp_length_past_the_end = good.clone();
        lcp_length_past_the_end[24..26].copy_from_slice(&200u16.to_be_bytes());
        let mut wrong_version = good.clone();
        wrong_version[14] = 0x21;
        let truncated_header = good[..17].to_vec();
        for (n, frame) in [
            too_long,
            too_short_for_ppp,
            lcp_length_past_the_end,
            wrong_version,
            truncated_header,
        ]
        .iter()
        .enumerate()
        {
            assert!(harness.receive(frame).is_empty());
            assert_eq!(harness.client.counters().malformed, n as u64 + 1);
        }
        assert_eq!(harness.client.state(), State::Lcp);
    }

    #[test]
    fn an_lcp_option_shorter_than_two_is_malformed() {
        let mut harness = Harness::new(ScriptedAc::new(AcAuth::Pap));
        harness.ac.silent_in_session = true;
        harness.start_until(Some(State::Lcp));
        let out = harness.receive(&ac_control(
            PPP_LCP,
            control::CONFIGURE_REQUEST,
            3,
            &[1, 1, 5],
        ));
        assert!(out.is_empty());
        assert_eq!(harness.client.counters().malformed, 1);
    }

    #[test]
    fn frames_in_the_wrong_state_or_for_another_session_are_ignored() {
        let mut harness = up_with(ScriptedAc::new(AcAuth::Pap));
        let before = harness.client.counters().ignored;
        let other_session = session_frame(
            CLIENT_MAC,
            AC_MAC,
            SESSION_ID + 1,
            PPP_LCP,
            &control_packet(control::TERMINATE_REQUEST, 1, &[]),
        );
        let mut tags = Vec::new();
        push_tag(&mut tags, tag::HOST_UNIQ, &[0; 8]);
        let late_pads = discovery_frame(CLIENT_MAC, AC_MAC, code::PADS, 9, &tags);
        let mut not_for_us = ac_control(PPP_LCP, control::TERMINATE_REQUEST, 1, &[]);
        not_for_us[..6].copy_from_slice(&STRANGER_MAC);
        for frame in [other_session, late_pads, not_for_us] {
            assert!(harness.receive(&frame).is_empty());
        }
        assert_eq!(harness.client.counters().ignored, before + 3);
        assert_eq!(harness.client.state(), State::Up);
    }

    #[test]
    fn names_are_the_metric_labels() {
        let names: Vec<&str> = EndReason::ALL.iter().map(EndReason::name).collect();
        assert_eq!(
            names,
            [
                "padt",
                "lcp_terminate",
                "echo_timeout",
                "negotiation_timeout",
                "auth_failed",
                "stopped"
            ]
        );
        for (index, reason) in EndReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index);
        }
        assert_eq!(State::Authenticating.name(), "authenticating");
        assert!(!format!("{:?}", config()).contains(PASSWORD));
    }

    // ---- robustness ----

    /// A client driven to `state` by the scripted AC (CHAP, so that every phase is passed).
    /// The proptest's client and AC: CHAP, and IPv6CP beside IPCP.
    fn proptest_pair() -> Harness {
        let mut ac = ScriptedAc::new(AcAuth::Chap);
        ac.ipv6 = AcIpv6::Accept(AC_INTERFACE_ID);
        Harness::with_config(ac, config_with_ipv6())
    }

    fn harness_in(state: State) -> Harness {
        let mut harness = proptest_pair();
        match state {
            State::Stopped => {}
            State::Backoff => {
                harness.start();
                harness.receive(&padt_from(AC_MAC, SESSION_ID));
            }
            target => harness.start_until(Some(target)),
        }
        assert_eq!(harness.client.state(), state);
        harness
    }

    /// Valid frames an AC sends, for the mutations to start from: the whole CHAP handshake,
    /// and what can come later. The handshake is the one [`harness_in`] plays, with the same
    /// seed, so its Host-Uniq and identifiers are the ones the client under test expects, and
    /// lightly mutated frames get past those checks into the state machine.
    fn corpus() -> &'static [Vec<u8>] {
        static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
        CORPUS.get_or_init(|| {
            let mut harness = proptest_pair();
            harness.ac.ask_vj = true;
            harness.start();
            assert_eq!(harness.client.state(), State::Up);
            let mut corpus = harness.ac.sent.clone();
            let mut options = Vec::new();
            push_option(&mut options, lcp_option::MRU, &1400u16.to_be_bytes());
            push_option(&mut options, lcp_option::AUTH_PROTOCOL, &[0xc2, 0x23, 0x81]);
            options.extend_from_slice(&[7, 2, 8, 2, 0x42, 3, 0]);
            corpus.extend([
                ac_control(PPP_LCP, control::CONFIGURE_REQUEST, 2, &options),
                padt_from(AC_MAC, SESSION_ID),
                ac_control(PPP_LCP, control::ECHO_REQUEST, 1, &[1, 2, 3, 4, 5]),
                ac_control(PPP_LCP, control::ECHO_REPLY, 1, &[1, 2, 3, 4]),
                ac_control(PPP_LCP, control::TERMINATE_REQUEST, 1, &[]),
                ac_control(
                    PPP_LCP,
                    control::PROTOCOL_REJECT,
                    1,
                    &PPP_IPCP.to_be_bytes(),
                ),
                ac_control(PPP_IPCP, control::CONFIGURE_NAK, 1, &[3, 6, 1, 2, 3, 4]),
                ac_control(PPP_IPCP, control::TERMINATE_REQUEST, 1, &[]),
                ac_control(PPP_PAP, pap::AUTHENTICATE_ACK, 1, &[0]),
                ac_control(PPP_CHAP, chap::FAILURE, 0x31, &[]),
                session_frame(CLIENT_MAC, AC_MAC, SESSION_ID, PPP_IPV6CP, &[1, 1, 0, 4]),
                ac_control(
                    PPP_IPV6CP,
                    control::CONFIGURE_NAK,
                    1,
                    &[1, 10, 0, 0, 0, 0, 0, 0, 0, 9],
                ),
                ac_control(
                    PPP_IPV6CP,
                    control::CONFIGURE_REJECT,
                    1,
                    &[1, 10, 0, 0, 0, 0, 0, 0, 0, 1],
                ),
                ac_control(PPP_IPV6CP, control::TERMINATE_REQUEST, 1, &[]),
                ac_control(
                    PPP_LCP,
                    control::PROTOCOL_REJECT,
                    1,
                    &PPP_IPV6CP.to_be_bytes(),
                ),
            ]);
            corpus
        })
    }

    /// A frame from the corpus with its Ethernet header kept (so the parser goes past it)
    /// and the rest flipped, cut or lengthened; often with the PPPoE length then set to what
    /// is there, so that the mutation reaches the tags, PPP and options behind it.
    fn mutated_frame() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<prop::sample::Index>(),
            vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            proptest::option::weighted(0.3, any::<prop::sample::Index>()),
            vec(any::<u8>(), 0..12),
            any::<bool>(),
        )
            .prop_map(|(pick, flips, cut, tail, fit_length)| {
                let mut frame = pick.get(corpus()).clone();
                let body = frame.len() - ETHERNET_HEADER;
                for (at, mask) in flips {
                    frame[ETHERNET_HEADER + at.index(body)] ^= mask;
                }
                if let Some(cut) = cut {
                    frame.truncate(ETHERNET_HEADER + cut.index(body + 1));
                }
                frame.extend(tail);
                if fit_length && frame.len() >= wire::PPPOE_PAYLOAD_OFFSET {
                    let payload = frame.len() - wire::PPPOE_PAYLOAD_OFFSET;
                    let length = u16::try_from(payload).unwrap_or(u16::MAX);
                    frame[18..20].copy_from_slice(&length.to_be_bytes());
                }
                frame
            })
    }

    const ETHERNET_HEADER: usize = wire::ETHERNET_HEADER_LEN;

    /// Arbitrary bytes behind a PPPoE-looking Ethernet header, or no header at all.
    fn arbitrary_frame() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            vec(any::<u8>(), 0..80),
            (
                prop_oneof![Just(ETHERTYPE_DISCOVERY), Just(ETHERTYPE_SESSION)],
                vec(any::<u8>(), 0..80)
            )
                .prop_map(|(ethertype, rest)| {
                    let mut frame = CLIENT_MAC.to_vec();
                    frame.extend_from_slice(&AC_MAC);
                    frame.extend_from_slice(&ethertype.to_be_bytes());
                    frame.extend(rest);
                    frame
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn no_input_in_any_state_panics_or_floods(
            state in prop::sample::select(State::ALL.to_vec()),
            frames in vec(prop_oneof![4 => mutated_frame(), 1 => arbitrary_frame()], 1..10),
        ) {
            let mut harness = harness_in(state);
            let received_before = harness.client.counters().control_received;
            for (n, frame) in frames.iter().enumerate() {
                let mut out = Vec::new();
                harness.client.receive(frame, harness.now, &mut out);
                prop_assert!(out.len() <= 3, "{} frames answer one", out.len());
                harness.now += S / 2;
                harness.client.poll(harness.now, &mut out);
                prop_assert!(out.len() <= 5, "{} frames after a poll", out.len());
                for sent in &out {
                    prop_assert!(PppoeFrame::parse(sent).is_ok());
                    prop_assert!(sent.len() <= 1514);
                    prop_assert_eq!(&sent[6..12], &CLIENT_MAC[..]);
                }
                let counters = harness.client.counters();
                prop_assert_eq!(counters.control_received, received_before + n as u64 + 1);
                prop_assert!(counters.malformed + counters.ignored <= counters.control_received);
                if let Some(session) = harness.client.session() {
                    prop_assert_eq!(harness.client.state(), State::Up);
                    prop_assert!(session.mtu >= MIN_MRU);
                }
            }
        }
    }
}

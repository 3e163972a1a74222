//! The PPPoE client's state machine (`pipeline::pppoe::Client`: discovery, LCP, PAP or
//! CHAP-MD5, IPCP and IPv6CP, echoes, ends and backoff) driven by an access concentrator the
//! input plays.
//!
//! One client with a fixed seed and the default config (any service, any AC, MRU 1492,
//! echoes every 10 s, 3 unanswered end the session, IPv6CP on), so its Host-Uniq, magic number and
//! identifiers are the same on every run; `start(0)`, then the input is a sequence of steps,
//! each a step byte `S` and what that kind reads after it:
//!
//! - `S & 3 == 0`, a frame: a u16 length and that many bytes (cut at 1500): the PPPoE header
//!   (ver/type, code, session id, length) and what follows, which the harness puts behind an
//!   Ethernet header and hands to `receive` at the current time. `S & 4`: ethertype 0x8864
//!   (session), else 0x8863 (discovery). `S & 16`: to the broadcast address, else to the
//!   client's MAC. `(S >> 5) & 3`: the source: the AC, another AC, a multicast or the zero
//!   MAC. `S & 8`, patch, makes the frame answer the client's latest output so the fuzzer gets
//!   past the checks a peer must pass: the session id becomes the client's (when it has a
//!   session); a discovery frame gets a Host-Uniq tag with the value of the client's latest
//!   PADI/PADR put first; in a session frame a Configure-Ack/Nak/Reject (LCP, IPCP, IPv6CP), a PAP
//!   Ack/Nak or a CHAP Success/Failure takes the identifier of the client's latest
//!   Configure-Request, Authenticate-Request or CHAP Response, and a Configure-Ack its
//!   options too; then the control packet's Length (session frames) and the PPPoE length are
//!   set to the bytes there, the payload cut at 1500 again. Patching needs the 6-byte PPPoE
//!   header (shorter payloads go as they are), its session-frame part the control fields
//!   after it (12 bytes in all). Bit 7 is unused.
//! - `S & 3 == 1`: a u16 N; the clock moves N ms on, then `poll`.
//! - `S & 3 == 2`: `stop`. `S & 3 == 3`: `start` at the current time.
//!
//! Checked after every call, besides "no panic": at most 8 frames out; each at most 1514
//! bytes, from the client's MAC, ethertype 0x8863/0x8864, parsing with `PppoeFrame::parse`
//! with nothing after its PPPoE length; a PADI goes to broadcast and a PADR to a unicast AC
//! that sent us something, both with session id 0 and an 8-byte Host-Uniq; a PADT and every
//! session frame go to the session's AC with its (nonzero) id; session frames carry one whole
//! LCP, PAP, CHAP, IPCP or IPv6CP control packet. `session()` is Some exactly in `State::Up`, for the
//! session `discovery_session()` has, with an address and an MTU in 128..=1492. A stopped
//! client sends nothing on receive or poll; `start` does nothing unless stopped, and else
//! sends one PADI; `stop` leaves it stopped. No counter ever decreases; `control_sent` grows
//! by the frames out, `control_received` by one per receive, at most one of `malformed` and
//! `ignored` per receive, `echo_requests_sent` by the Echo-Requests out; a call ends at most
//! one session, only one that existed before it, and leaves the client in backoff (or
//! stopped); `sessions_up` grows only by one, into Up. After the last step come a `stop` and
//! a `poll` 100 s later, checked the same way.
//!
//! Seeds: `scripts/fuzz-seeds.py pppoe fuzz/seeds` (PAP, CHAP and no authentication to Up,
//! echoes, re-challenge, renegotiation, PADT, Terminate, echo timeout, stop/start, timeouts).
//!
//! FUZZ_VERBOSE=1: print every state change and the states each input reached (to check
//! that the seeds reach Up).
#![no_main]

use std::sync::OnceLock;

use gateway_fuzz::{Bytes, ETH_LEN};
use libfuzzer_sys::fuzz_target;
use pipeline::pppoe::wire::{
    self, chap, code, control, pap, tag, ControlPacket, PppPacket, PppoeFrame, Tags, BROADCAST_MAC,
    ETHERTYPE_DISCOVERY, ETHERTYPE_SESSION, PPP_CHAP, PPP_IPCP, PPP_IPV6CP, PPP_LCP, PPP_PAP,
};
use pipeline::pppoe::{Client, ClientConfig, ClientCounters, State};

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const AC_MAC: [u8; 6] = [0x02, 0xac, 0, 0, 0, 0x01];
const OTHER_AC_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const SOURCES: [[u8; 6]; 4] = [AC_MAC, OTHER_AC_MAC, [0x01, 0, 0x5e, 0, 0, 0x01], [0; 6]];
const SEED: u64 = 0x5eed;
const MRU: u16 = 1492;
const MAX_FRAME: usize = 1514;
/// What a frame step may give after the Ethernet header, PPPoE header included.
const MAX_PAYLOAD: usize = MAX_FRAME - ETH_LEN;
const MAX_OUT: usize = 8;
const PPPOE_HEADER: usize = 6;
/// PPPoE header, PPP protocol, control code, identifier and length.
const CONTROL_FIELDS: usize = PPPOE_HEADER + 2 + 4;
const MS: u64 = 1_000_000;

fn config() -> ClientConfig {
    ClientConfig {
        username: "alice".into(),
        password: "wonderland".into(),
        service_name: String::new(),
        ac_name: None,
        mac: CLIENT_MAC,
        mru: MRU,
        echo_interval_ns: 10_000 * MS,
        echo_failures: 3,
        ipv6: true,
    }
}

fn verbose() -> bool {
    static VERBOSE: OnceLock<bool> = OnceLock::new();
    *VERBOSE.get_or_init(|| std::env::var_os("FUZZ_VERBOSE").is_some_and(|v| v == "1"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Start,
    Receive,
    Poll,
    Stop,
}

/// What the client sent last, for the patch.
#[derive(Default)]
struct Seen {
    host_uniq: Option<Vec<u8>>,
    lcp_request: Option<(u8, Vec<u8>)>,
    ipcp_request: Option<(u8, Vec<u8>)>,
    ipv6cp_request: Option<(u8, Vec<u8>)>,
    pap_request: Option<u8>,
    chap_response: Option<u8>,
}

fn word(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn set_word(bytes: &mut [u8], at: usize, value: usize) {
    let value = u16::try_from(value).unwrap_or(u16::MAX);
    bytes[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// The counters as one array, to check that none decreases.
fn counter_values(c: &ClientCounters) -> Vec<u64> {
    let mut values = vec![
        c.control_sent,
        c.control_received,
        c.malformed,
        c.ignored,
        c.echo_requests_sent,
        c.echo_replies_received,
        c.sessions_up,
        c.discovery_failures,
        c.ipv6_opened,
        c.ipv6_failures,
    ];
    values.extend_from_slice(&c.ends);
    values
}

struct Harness {
    client: Client,
    now_ns: u64,
    seen: Seen,
    counters: ClientCounters,
    reached: Vec<State>,
}

impl Harness {
    fn new() -> Harness {
        let client = Client::new(config(), SEED);
        let counters = client.counters().clone();
        Harness {
            client,
            now_ns: 0,
            seen: Seen::default(),
            counters,
            reached: vec![State::Stopped],
        }
    }

    /// Makes `call` on the client and checks what it did.
    fn call(&mut self, call: Call, frame: &[u8]) {
        let state_before = self.client.state();
        let session_before = self.client.discovery_session();
        let mut out = Vec::new();
        match call {
            Call::Start => self.client.start(self.now_ns, &mut out),
            Call::Receive => self.client.receive(frame, self.now_ns, &mut out),
            Call::Poll => self.client.poll(self.now_ns, &mut out),
            Call::Stop => self.client.stop(&mut out),
        }
        let state = self.client.state();
        if verbose() && state != state_before {
            eprintln!(
                "pppoe_client: {call:?} at {} ms: {} -> {}",
                self.now_ns / MS,
                state_before.name(),
                state.name()
            );
        }
        if !self.reached.contains(&state) {
            self.reached.push(state);
        }
        assert!(
            out.len() <= MAX_OUT,
            "{} frames out of one {call:?} in {state_before:?}",
            out.len()
        );
        let session_after = self.client.discovery_session();
        let mut echo_requests = 0;
        for frame in &out {
            echo_requests += self.check_frame(frame, session_before, session_after);
        }
        match call {
            Call::Receive | Call::Poll if state_before == State::Stopped => {
                assert!(out.is_empty(), "a stopped client sent {} frames", out.len());
            }
            Call::Start if state_before == State::Stopped => {
                assert_eq!(state, State::Discovery);
                assert_eq!(out.len(), 1, "start sends one PADI");
            }
            Call::Start => {
                assert!(out.is_empty(), "start while {state_before:?} sent frames");
                assert_eq!(
                    state, state_before,
                    "start while not stopped changed the state"
                );
            }
            Call::Stop => assert_eq!(state, State::Stopped),
            _ => {}
        }
        match self.client.session() {
            Some(session) => {
                assert_eq!(state, State::Up, "a session outside Up");
                assert_eq!(Some((session.id, session.ac_mac)), session_after);
                assert!(!session.local.is_unspecified(), "up without an address");
                assert!(
                    (128..=MRU).contains(&session.mtu),
                    "session MTU {}",
                    session.mtu
                );
            }
            None => assert_ne!(state, State::Up, "Up without a session"),
        }
        self.check_counters(call, &out, echo_requests, session_before.is_some());
    }

    /// Checks one frame the client sent and notes what the patch needs; returns 1 for an LCP
    /// Echo-Request.
    fn check_frame(
        &mut self,
        frame: &[u8],
        session_before: Option<(u16, [u8; 6])>,
        session_after: Option<(u16, [u8; 6])>,
    ) -> u64 {
        assert!(frame.len() <= MAX_FRAME, "a frame of {} bytes", frame.len());
        assert!(frame.len() >= ETH_LEN, "a frame of {} bytes", frame.len());
        assert_eq!(&frame[6..12], &CLIENT_MAC, "not from our MAC");
        let ethertype = word(frame, 12);
        assert!(
            ethertype == ETHERTYPE_DISCOVERY || ethertype == ETHERTYPE_SESSION,
            "ethertype {ethertype:#06x}"
        );
        let parsed = PppoeFrame::parse(frame)
            .unwrap_or_else(|e| panic!("the client sent a frame that does not parse: {e:?}"));
        assert_eq!(
            frame.len(),
            wire::PPPOE_PAYLOAD_OFFSET + parsed.payload.len(),
            "bytes after the PPPoE length"
        );
        if ethertype == ETHERTYPE_DISCOVERY {
            let tags = Tags::parse(parsed.payload).expect("the client's tags parse");
            match parsed.code {
                code::PADI | code::PADR => {
                    if parsed.code == code::PADI {
                        assert_eq!(parsed.destination, BROADCAST_MAC, "PADI not broadcast");
                    } else {
                        assert!(
                            parsed.destination == AC_MAC || parsed.destination == OTHER_AC_MAC,
                            "PADR to {:02x?}",
                            parsed.destination
                        );
                    }
                    assert_eq!(parsed.session_id, 0);
                    let host_uniq = tags.first(tag::HOST_UNIQ).expect("a Host-Uniq");
                    assert_eq!(host_uniq.len(), 8);
                    self.seen.host_uniq = Some(host_uniq.to_vec());
                }
                code::PADT => assert_eq!(
                    Some((parsed.session_id, parsed.destination)),
                    session_before,
                    "a PADT for no session of ours"
                ),
                other => panic!("the client sent discovery code {other:#04x}"),
            }
            return 0;
        }
        assert_ne!(parsed.session_id, 0, "a session frame with session id 0");
        let this = Some((parsed.session_id, parsed.destination));
        assert!(
            this == session_before || this == session_after,
            "a session frame for {this:?}, the session being {session_before:?} / {session_after:?}"
        );
        let ppp = PppPacket::parse(parsed.payload).expect("a PPP packet");
        let packet = ControlPacket::parse(ppp.information).expect("a whole control packet");
        assert_eq!(
            packet.packet.len(),
            ppp.information.len(),
            "bytes after the control packet"
        );
        match (ppp.protocol, packet.code) {
            (PPP_LCP, control::CONFIGURE_REQUEST) => {
                self.seen.lcp_request = Some((packet.identifier, packet.data.to_vec()));
            }
            (PPP_LCP, control::ECHO_REQUEST) => return 1,
            (PPP_LCP, _) => {}
            (PPP_IPCP, control::CONFIGURE_REQUEST) => {
                self.seen.ipcp_request = Some((packet.identifier, packet.data.to_vec()));
            }
            (PPP_IPCP, _) => {}
            (PPP_IPV6CP, control::CONFIGURE_REQUEST) => {
                self.seen.ipv6cp_request = Some((packet.identifier, packet.data.to_vec()));
            }
            (PPP_IPV6CP, _) => {}
            (PPP_PAP, pap::AUTHENTICATE_REQUEST) => self.seen.pap_request = Some(packet.identifier),
            (PPP_CHAP, chap::RESPONSE) => self.seen.chap_response = Some(packet.identifier),
            (protocol, code) => panic!("the client sent protocol {protocol:#06x} code {code}"),
        }
        0
    }

    fn check_counters(
        &mut self,
        call: Call,
        out: &[Vec<u8>],
        echo_requests: u64,
        had_session: bool,
    ) {
        let before = &self.counters;
        let after = self.client.counters();
        for (n, (old, new)) in counter_values(before)
            .into_iter()
            .zip(counter_values(after))
            .enumerate()
        {
            assert!(new >= old, "counter {n} went from {old} to {new}");
        }
        assert_eq!(after.control_sent, before.control_sent + out.len() as u64);
        let received = u64::from(call == Call::Receive);
        assert_eq!(after.control_received, before.control_received + received);
        assert!(
            (after.malformed - before.malformed) + (after.ignored - before.ignored) <= received,
            "a {call:?} counted malformed {} -> {}, ignored {} -> {}",
            before.malformed,
            after.malformed,
            before.ignored,
            after.ignored
        );
        assert!(after.malformed + after.ignored <= after.control_received);
        assert_eq!(
            after.echo_requests_sent,
            before.echo_requests_sent + echo_requests
        );
        assert!(after.echo_replies_received <= before.echo_replies_received + received);
        let ends = |c: &ClientCounters| c.ends.iter().sum::<u64>();
        let ended = ends(after) - ends(before);
        assert!(ended <= 1, "one {call:?} ended {ended} sessions");
        if ended == 1 {
            assert!(had_session, "a session ended that had not begun");
            assert!(
                matches!(self.client.state(), State::Backoff | State::Stopped),
                "ended into {:?}",
                self.client.state()
            );
        }
        let came_up = after.sessions_up - before.sessions_up;
        assert!(came_up <= 1);
        if came_up == 1 {
            assert_eq!(
                self.client.state(),
                State::Up,
                "sessions_up grew outside Up"
            );
        }
        self.counters = after.clone();
    }

    /// The patch described in the module documentation.
    fn patch(&self, session: bool, payload: &mut Vec<u8>) {
        if payload.len() < PPPOE_HEADER {
            return;
        }
        if let Some((id, _)) = self.client.discovery_session() {
            set_word(payload, 2, usize::from(id));
        }
        if !session {
            if let Some(host_uniq) = &self.seen.host_uniq {
                let mut tags = Vec::new();
                wire::push_tag(&mut tags, tag::HOST_UNIQ, host_uniq);
                payload.splice(PPPOE_HEADER..PPPOE_HEADER, tags);
            }
        } else if payload.len() >= CONTROL_FIELDS {
            let (protocol, code) = (word(payload, PPPOE_HEADER), payload[PPPOE_HEADER + 2]);
            let is_reply = matches!(
                code,
                control::CONFIGURE_ACK | control::CONFIGURE_NAK | control::CONFIGURE_REJECT
            );
            let request = match protocol {
                PPP_LCP if is_reply => self.seen.lcp_request.as_ref(),
                PPP_IPCP if is_reply => self.seen.ipcp_request.as_ref(),
                PPP_IPV6CP if is_reply => self.seen.ipv6cp_request.as_ref(),
                _ => None,
            };
            let identifier = match (protocol, code) {
                (PPP_LCP | PPP_IPCP | PPP_IPV6CP, _) => request.map(|(id, _)| *id),
                (PPP_PAP, pap::AUTHENTICATE_ACK | pap::AUTHENTICATE_NAK) => self.seen.pap_request,
                (PPP_CHAP, chap::SUCCESS | chap::FAILURE) => self.seen.chap_response,
                _ => None,
            };
            if let Some(id) = identifier {
                payload[PPPOE_HEADER + 3] = id;
            }
            if let Some((_, options)) = request.filter(|_| code == control::CONFIGURE_ACK) {
                payload.truncate(CONTROL_FIELDS);
                payload.extend_from_slice(options);
            }
        }
        payload.truncate(MAX_PAYLOAD);
        if session && payload.len() >= CONTROL_FIELDS {
            let len = payload.len() - PPPOE_HEADER - 2;
            set_word(payload, PPPOE_HEADER + 4, len);
        }
        let len = payload.len() - PPPOE_HEADER;
        set_word(payload, 4, len);
    }

    fn step(&mut self, input: &mut Bytes) {
        let step = input.u8();
        match step & 3 {
            0 => {
                let session = step & 4 != 0;
                let destination = if step & 16 != 0 {
                    BROADCAST_MAC
                } else {
                    CLIENT_MAC
                };
                let source = SOURCES[usize::from(step >> 5) & 3];
                let mut payload = input.slice(MAX_PAYLOAD).to_vec();
                if step & 8 != 0 {
                    self.patch(session, &mut payload);
                }
                let ethertype = if session {
                    ETHERTYPE_SESSION
                } else {
                    ETHERTYPE_DISCOVERY
                };
                let mut frame = Vec::with_capacity(ETH_LEN + payload.len());
                frame.extend_from_slice(&destination);
                frame.extend_from_slice(&source);
                frame.extend_from_slice(&ethertype.to_be_bytes());
                frame.extend_from_slice(&payload);
                self.call(Call::Receive, &frame);
            }
            1 => {
                self.now_ns += u64::from(input.u16()) * MS;
                self.call(Call::Poll, &[]);
            }
            2 => self.call(Call::Stop, &[]),
            _ => self.call(Call::Start, &[]),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let mut harness = Harness::new();
    harness.call(Call::Start, &[]);
    while !input.is_empty() {
        harness.step(&mut input);
    }
    // However it ended, stop leaves it silent for good.
    harness.call(Call::Stop, &[]);
    harness.now_ns += 100_000 * MS;
    harness.call(Call::Poll, &[]);
    if verbose() {
        let reached: Vec<&str> = harness.reached.iter().map(State::name).collect();
        let c = harness.client.counters();
        eprintln!(
            "pppoe_client: reached {}; sessions_up {}, ends {:?}, malformed {}, ignored {}",
            reached.join(" "),
            c.sessions_up,
            c.ends,
            c.malformed,
            c.ignored
        );
    }
});

//! Keyword and domain blocking, and parental control, decided on the first packets of a flow.
//!
//! The decision is made once per flow and the caller stores it with the flow (in its
//! `FlowData`), so established traffic pays nothing. The pieces:
//!
//! - [`ContentPolicy`]: what is blocked, immutable and shared by all workers (rebuilt on
//!   reload): one global list of domains and keywords, per-category domain lists, and the
//!   parental-control policies that say which device may use the network when and which
//!   categories it may not reach.
//! - [`ContentInspector`]: per worker, the scanners of TCP flows whose first flight (an HTTP
//!   request head, a TLS ClientHello, a DNS-over-TCP query) has not fully arrived yet, in a
//!   fixed side table allocated up front.
//! - [`dns_query_blocked`] and [`write_dns_nxdomain_reply`]: a DNS query over UDP is one
//!   packet, so it needs no state; a blocked one is answered with NXDOMAIN in place.
//!
//! # Use from the pipeline
//!
//! When a flow is created: [`ContentPolicy::device_allowed`] (pause and time windows), then
//! [`ContentInspector::forget`] for the new flow's id. The id is a conntrack slot that may
//! have belonged to a flow that expired mid-inspection, and expiry does not report ids, so
//! forgetting at creation is what guarantees the new flow starts with a fresh scanner.
//! Then, for each client-to-server TCP packet of the flow, [`ContentInspector::inspect_tcp_seq`]
//! (or [`ContentInspector::inspect_tcp`] when the sequence number is not at hand) until it
//! returns something other than [`Inspection::Pending`]; store that verdict with the flow.
//! When a flow is removed before a verdict, call `forget`.
//!
//! # Fail-open
//!
//! Whatever this module cannot read is allowed: a first flight that is not HTTP, TLS or DNS; a
//! request head too long for the HTTP scanner; a name that has not arrived after
//! [`MAX_PAYLOAD_PACKETS`] packets; and a flow that needs a slot when the table (or the flow's
//! probe window) is full of live flows. Blocking instead would break every protocol the
//! scanners do not know, and would let a burst of slow handshakes deny service to everyone
//! behind the gateway; a content filter on a home or office gateway is there to keep honest
//! devices off listed sites, not to stop a determined evader (who has DoH, ECH and VPNs
//! anyway). [`InspectorStats`] counts the cases where a listed name may have been missed (all but
//! the first), so a table sized too small shows up in metrics rather than as silent bypass.
//!
//! Only the first request or query of a connection is read: later HTTP requests or DNS
//! queries on a kept-alive connection ride on the first one's verdict.

#![forbid(unsafe_code)]

use core::mem::size_of;
use std::net::Ipv4Addr;

use crate::features::inspect::{
    dns, BuildError, ClientHelloScanner, DomainMatcher, HttpScanner, HttpState, SniResult,
};
use crate::features::parental::{LocalTime, ParentalControl, Policy};
use crate::state::flow_data::ContentState;
use crate::wire::ipv4::GENERATED_TTL;
use crate::wire::{
    checksum, ethernet, ipv4, ipv6, udp, EthernetAddress, EthernetFrame, Ipv4Packet, Ipv4Repr,
    Ipv6Packet, UdpPacket,
};

/// A device as the pipeline knows it: its address and, when learnt, its MAC.
pub type Device = (Ipv4Addr, Option<EthernetAddress>);

/// What to do with a DNS query for a blocked name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DnsAction {
    /// Answer NXDOMAIN at once ([`write_dns_nxdomain_reply`]): the client gives up on the
    /// name immediately instead of retrying and timing out.
    #[default]
    Nxdomain,
    /// Drop the query silently.
    Drop,
}

/// Why a name or flow is blocked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockReason {
    /// The global list: a configured domain or keyword, for every device.
    Keyword,
    /// A category the device's parental-control policy blocks, by index into the categories
    /// given to [`ContentPolicy::new`].
    Category(usize),
}

/// The verdict on a TCP flow after one of its packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Inspection {
    /// Let the flow through from now on.
    Allow,
    /// Not decided yet: forward this packet and inspect the flow's next one.
    Pending,
    /// Drop (or reset) the flow.
    Block(BlockReason),
}

impl Inspection {
    /// Whether the caller can store this verdict and stop inspecting the flow.
    pub fn is_final(self) -> bool {
        self != Inspection::Pending
    }

    fn from_block(reason: Option<BlockReason>) -> Self {
        reason.map_or(Inspection::Allow, Inspection::Block)
    }
}

/// Why a [`ContentPolicy`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    /// The global domain and keyword list.
    #[error("global block list: {0}")]
    Global(#[source] BuildError),
    #[error("category {name:?}: {error}")]
    Category {
        name: String,
        #[source]
        error: BuildError,
    },
    /// Two categories share a name, so configuration naming it would be ambiguous.
    #[error("category {0:?} is defined twice")]
    DuplicateCategory(String),
    /// Policy `policy` (by position) blocks a category index that does not exist.
    #[error("policy {policy} blocks unknown category {category}")]
    UnknownCategory { policy: usize, category: usize },
    /// Not within a day of UTC: most likely hours or seconds given where minutes are meant.
    #[error("UTC offset of {0} minutes is more than a day (the offset is in minutes)")]
    UtcOffset(i32),
}

/// Real zones lie within -12:00 and +14:00; a day either way leaves room for any of them
/// while still catching an offset given in the wrong unit.
const MAX_UTC_OFFSET_MINUTES: u32 = 24 * 60;

/// What is blocked, for whom, and when. Immutable: shared by all workers through the router
/// configuration and rebuilt on reload.
#[derive(Clone, Debug)]
pub struct ContentPolicy {
    /// `None` when no domain or keyword is configured, so the common "parental control
    /// only" setup never runs an empty automaton.
    global: Option<DomainMatcher>,
    /// Indexed by the category numbers that policies and [`BlockReason::Category`] use.
    categories: Vec<(String, DomainMatcher)>,
    parental: ParentalControl,
    dns_action: DnsAction,
    utc_offset_minutes: i32,
}

impl ContentPolicy {
    /// Builds the matchers (allocates: call on configuration, not per packet).
    ///
    /// `categories` are named domain lists, typically read by the caller with
    /// [`parse_domain_list`](crate::features::inspect::parse_domain_list); their position is the index
    /// policies name in [`Policy::blocked_categories`] (see [`category_index`](Self::category_index)).
    /// `utc_offset_minutes` is the local zone's offset in force, for the policies' time
    /// windows.
    pub fn new(
        block_domains: &[String],
        block_keywords: &[String],
        categories: Vec<(String, Vec<String>)>,
        policies: Vec<Policy>,
        dns_action: DnsAction,
        utc_offset_minutes: i32,
    ) -> Result<Self, ContentError> {
        if utc_offset_minutes.unsigned_abs() > MAX_UTC_OFFSET_MINUTES {
            return Err(ContentError::UtcOffset(utc_offset_minutes));
        }
        let global = if block_domains.is_empty() && block_keywords.is_empty() {
            None
        } else {
            Some(DomainMatcher::new(block_domains, block_keywords).map_err(ContentError::Global)?)
        };
        let mut built: Vec<(String, DomainMatcher)> = Vec::with_capacity(categories.len());
        for (name, domains) in categories {
            if built.iter().any(|(existing, _)| *existing == name) {
                return Err(ContentError::DuplicateCategory(name));
            }
            match DomainMatcher::new(&domains, &[]) {
                Ok(matcher) => built.push((name, matcher)),
                Err(error) => return Err(ContentError::Category { name, error }),
            }
        }
        for (index, policy) in policies.iter().enumerate() {
            if let Some(&category) = policy
                .blocked_categories
                .iter()
                .find(|&&c| c >= built.len())
            {
                return Err(ContentError::UnknownCategory {
                    policy: index,
                    category,
                });
            }
        }
        Ok(ContentPolicy {
            global,
            categories: built,
            parental: ParentalControl::new(policies),
            dns_action,
            utc_offset_minutes,
        })
    }

    /// Nothing configured: callers skip inspection (and the time checks) entirely.
    pub fn is_empty(&self) -> bool {
        self.global.is_none() && self.parental.policies().is_empty()
    }

    /// Whether any name can be blocked: a global list, or a policy blocking a category. With
    /// only pauses and time windows configured, flows need [`device_allowed`](Self::device_allowed)
    /// but no inspection.
    pub fn inspects_content(&self) -> bool {
        self.global.is_some()
            || self
                .parental
                .policies()
                .iter()
                .any(|p| !p.blocked_categories.is_empty())
    }

    pub fn dns_action(&self) -> DnsAction {
        self.dns_action
    }

    pub fn utc_offset_minutes(&self) -> i32 {
        self.utc_offset_minutes
    }

    pub fn parental(&self) -> &ParentalControl {
        &self.parental
    }

    /// The index of the category called `name`, for building policies from configuration.
    pub fn category_index(&self, name: &str) -> Option<usize> {
        self.categories.iter().position(|(n, _)| n == name)
    }

    /// The name of category `index`, for logs and metrics labels.
    pub fn category_name(&self, index: usize) -> Option<&str> {
        self.categories.get(index).map(|(name, _)| name.as_str())
    }

    /// Checked when a flow starts: may this device open flows now? False while its policy is
    /// paused or outside all of the policy's time windows; true for devices without a policy.
    pub fn device_allowed(
        &self,
        src: Ipv4Addr,
        mac: Option<EthernetAddress>,
        unix_seconds: i64,
    ) -> bool {
        match self.parental.device_policy(src, mac) {
            None => true,
            Some(policy) => {
                let local = LocalTime::from_unix(unix_seconds, self.utc_offset_minutes);
                policy.allowed_at(local.weekday, local.minute)
            }
        }
    }

    /// Whether a name (DNS qname, TLS SNI, HTTP host; lowercase, as the scanners give it) or,
    /// with `path`, a URL hits the global list or a category the device's policy blocks.
    /// The global list is checked first: it applies to every device.
    pub fn blocks(
        &self,
        device_ip: Ipv4Addr,
        device_mac: Option<EthernetAddress>,
        host: &[u8],
        path: Option<&[u8]>,
    ) -> Option<BlockReason> {
        let hit = |matcher: &DomainMatcher| match path {
            Some(path) => matcher.matches_url(host, path).is_some(),
            None => matcher.matches(host).is_some(),
        };
        if self.global.as_ref().is_some_and(hit) {
            return Some(BlockReason::Keyword);
        }
        let policy = self.parental.device_policy(device_ip, device_mac)?;
        policy
            .blocked_categories
            .iter()
            .copied()
            .find(|&c| self.categories.get(c).is_some_and(|(_, m)| hit(m)))
            .map(BlockReason::Category)
    }
}

/// Payload-carrying packets a flow may take to reveal its name. A ClientHello with a
/// post-quantum key share takes two full segments, and a few more when an evasion tool cuts
/// it into tiny records; a client still short of a name after this many is not one the
/// scanners will understand, and holding its slot longer only starves other flows.
pub const MAX_PAYLOAD_PACKETS: u8 = 8;

/// Default table size: enough for the flows of a busy small network that are between their
/// first and their name-carrying segment at any instant.
pub const DEFAULT_SLOTS: usize = 1024;

/// Upper bound on the table, so a configuration typo cannot ask for gigabytes.
pub const MAX_SLOTS: usize = 1 << 20;

/// Consecutive slots a flow id may occupy, starting at its hash. Lookups read all of them
/// (deletion leaves holes, so an empty slot does not end a search); their tags are 24 bytes,
/// so a window is three cache lines.
const PROBE: usize = 8;

/// A slot untouched for this many inspected packets per table slot is presumed abandoned (its
/// flow expired without `forget`) and may be reclaimed when a window is full. Counting
/// packets rather than time keeps the API clock-free; at 64 per slot a 1024-slot table
/// reclaims after 65 536 packets, seconds to minutes of real traffic, far longer than a live
/// handshake pauses.
const STALE_PACKETS_PER_SLOT: u32 = 64;

/// A slot's bookkeeping, kept apart from the scanners so a lookup reads only these.
#[derive(Clone, Copy, Debug, Default)]
struct Tag {
    flow: u32,
    /// The client's address. With `server_port`, it tells a flow id reused by another flow
    /// (whose old slot was never forgotten) from the flow that took the slot.
    device: u32,
    server_port: u16,
    /// Payload-carrying packets seen, for [`MAX_PAYLOAD_PACKETS`].
    packets: u8,
    used: bool,
    /// The sequence number of the next byte the scanner expects, when the caller gives them.
    seq_known: bool,
    next_seq: u32,
    /// The inspector's packet clock when the slot was last fed.
    last_used: u32,
}

/// A flow's parser state. The HTTP scanner's 512-byte head buffer sets the size.
// Every slot of the preallocated table holds one of these whichever variant is live, so the
// size difference costs nothing; boxing the large variant would allocate per flow.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Scanner {
    Free,
    Http(HttpScanner),
    Tls(ClientHelloScanner),
    /// DNS over TCP (RFC 7766). `prefix_only`: the first segment held only the 2-byte length
    /// prefix (some stub resolvers write it separately), so the next one starts the message.
    DnsTcp {
        prefix_only: bool,
    },
}

/// What feeding bytes to a scanner came to.
enum Step {
    Done(Inspection),
    /// The scanner cannot decide, ever (a head too long to hold): allowed, and counted.
    GaveUp,
    More,
}

/// Request methods as they begin a request line, space included, for recognising HTTP on
/// ports other than 80.
const HTTP_STARTS: [&[u8]; 8] = [
    b"GET ",
    b"POST ",
    b"HEAD ",
    b"PUT ",
    b"DELETE ",
    b"OPTIONS ",
    b"PATCH ",
    b"CONNECT ",
];

impl Scanner {
    /// The scanner for a flow's first payload, or `None` for a protocol none reads. The port
    /// picks the parser for what its first bytes do not settle (port 80 leaving room for
    /// blank lines before the request line); bytes that clearly are TLS or HTTP win over the
    /// port, so neither protocol escapes by running on the other's port.
    fn for_first_payload(server_port: u16, payload: &[u8]) -> Option<Scanner> {
        if server_port == 53 {
            return Some(Scanner::DnsTcp { prefix_only: false });
        }
        if looks_like_tls(payload) {
            return Some(Scanner::Tls(ClientHelloScanner::new()));
        }
        if looks_like_http(payload) {
            return Some(Scanner::Http(HttpScanner::new()));
        }
        match server_port {
            80 => Some(Scanner::Http(HttpScanner::new())),
            443 => Some(Scanner::Tls(ClientHelloScanner::new())),
            _ => None,
        }
    }

    fn feed(&mut self, policy: &ContentPolicy, device: Device, bytes: &[u8]) -> Step {
        let (ip, mac) = device;
        match self {
            Scanner::Free => Step::Done(Inspection::Allow),
            Scanner::Http(scanner) => match scanner.feed(bytes) {
                HttpState::NeedMore => Step::More,
                HttpState::Request { host, path, .. } => Step::Done(Inspection::from_block(
                    policy.blocks(ip, mac, host, Some(path)),
                )),
                HttpState::NotHttp => Step::Done(Inspection::Allow),
                HttpState::TooLong => Step::GaveUp,
            },
            Scanner::Tls(scanner) => match scanner.feed(bytes) {
                SniResult::NeedMore => Step::More,
                SniResult::Found(name) => {
                    Step::Done(Inspection::from_block(policy.blocks(ip, mac, name, None)))
                }
                SniResult::NoSni | SniResult::NotTls => Step::Done(Inspection::Allow),
            },
            Scanner::DnsTcp { prefix_only } => {
                let mut out = [0u8; 256];
                let name = if *prefix_only {
                    dns::query_name(bytes, &mut out)
                } else {
                    dns::query_name_tcp(bytes, &mut out)
                };
                match name {
                    Some(name) => {
                        Step::Done(Inspection::from_block(policy.blocks(ip, mac, name, None)))
                    }
                    None if !*prefix_only && bytes.len() == 2 => {
                        *prefix_only = true;
                        Step::More
                    }
                    None => Step::Done(Inspection::Allow),
                }
            }
        }
    }
}

/// A TLS handshake record of version 3.x, or as much of its start as arrived.
fn looks_like_tls(payload: &[u8]) -> bool {
    matches!(payload, [0x16] | [0x16, 3, ..])
}

/// A request line's method and space, or as much of them as arrived.
fn looks_like_http(payload: &[u8]) -> bool {
    HTTP_STARTS.iter().any(|start| {
        let n = payload.len().min(start.len());
        payload.get(..n) == start.get(..n)
    })
}

/// How often each fail-open case happened; see the module doc.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InspectorStats {
    /// Flows allowed because no slot was free in their probe window.
    pub overflows: u64,
    /// Flows allowed because no name showed up within [`MAX_PAYLOAD_PACKETS`] packets, or the
    /// request head outgrew the HTTP scanner.
    pub gave_up: u64,
    /// Slots taken back from flows that stopped sending without being forgotten, or whose
    /// flow id turned up again for another flow.
    pub stale_reclaimed: u64,
}

/// Per worker: the scanners of TCP flows still being inspected, in a fixed table allocated by
/// [`new`](Self::new). No call after that allocates, locks or panics.
///
/// A flow only takes a slot when its first payload packet leaves the name undecided (the
/// usual single-segment request or ClientHello is decided on the stack), and gives it back
/// on its verdict.
#[derive(Clone, Debug)]
pub struct ContentInspector {
    tags: Box<[Tag]>,
    scanners: Box<[Scanner]>,
    /// `len - 1`; the length is a power of two.
    mask: usize,
    /// `32 - log2(len)`, for Fibonacci hashing of the flow id.
    shift: u32,
    in_use: usize,
    /// Counts payload-carrying packets: the age of a slot is measured in it.
    clock: u32,
    stale_after: u32,
    stats: InspectorStats,
}

/// Memory per slot: its tag and its scanner, 556 bytes on 64-bit targets (24 + 532, the
/// HTTP scanner's head buffer being most of it), so [`DEFAULT_SLOTS`] take about 556 KiB.
pub const BYTES_PER_SLOT: usize = size_of::<Tag>() + size_of::<Scanner>();

impl ContentInspector {
    /// A table of `slots` rounded up to a power of two, at least 8 and at most [`MAX_SLOTS`],
    /// [`BYTES_PER_SLOT`] each, all allocated here.
    pub fn new(slots: usize) -> Self {
        let len = slots.clamp(PROBE, MAX_SLOTS).next_power_of_two();
        ContentInspector {
            tags: vec![Tag::default(); len].into_boxed_slice(),
            scanners: vec![Scanner::Free; len].into_boxed_slice(),
            mask: len - 1,
            shift: 32 - len.trailing_zeros(),
            in_use: 0,
            clock: 0,
            stale_after: u32::try_from(len)
                .unwrap_or(u32::MAX)
                .saturating_mul(STALE_PACKETS_PER_SLOT),
            stats: InspectorStats::default(),
        }
    }

    /// Inspects a client-to-server packet of a TCP flow (the caller decides the direction),
    /// until the result is final. `flow` is the conntrack `FlowId::as_u32`, `device` the
    /// client, `server_port` the server's port: 80 reads HTTP, 443 TLS, 53 DNS over TCP,
    /// others whichever of HTTP and TLS the first payload bytes show (anything else is
    /// allowed at once).
    ///
    /// Packets without payload (the SYN, pure ACKs) are `Pending` and change nothing.
    /// Payloads are taken as consecutive stream bytes: a retransmitted or reordered segment
    /// would be read twice or out of place, which ends in `Allow`. Prefer
    /// [`inspect_tcp_seq`](Self::inspect_tcp_seq) when the sequence number is at hand.
    pub fn inspect_tcp(
        &mut self,
        policy: &ContentPolicy,
        flow: u32,
        device: Device,
        server_port: u16,
        payload: &[u8],
    ) -> Inspection {
        self.inspect(policy, flow, device, server_port, None, payload)
    }

    /// [`inspect_tcp`](Self::inspect_tcp) with the segment's sequence number, so that
    /// retransmitted bytes are not fed twice (a partly new segment feeds its new part) and a
    /// segment past a gap is not read out of place. Nothing is buffered: the bytes past a gap
    /// are read only if they come again (a retransmission that carries them too); otherwise
    /// the flow runs out of [`MAX_PAYLOAD_PACKETS`] and is allowed, as it is when its very
    /// first payload segment was lost, since the stream's start is then never seen.
    pub fn inspect_tcp_seq(
        &mut self,
        policy: &ContentPolicy,
        flow: u32,
        device: Device,
        server_port: u16,
        seq: u32,
        payload: &[u8],
    ) -> Inspection {
        self.inspect(policy, flow, device, server_port, Some(seq), payload)
    }

    /// Judges a client's TCP payload on flow slot `flow` whose content is being inspected
    /// (`state`), as [`inspect_tcp_seq`](Self::inspect_tcp_seq) reads it: a verdict is kept
    /// in `state`, a blocked flow's slot freed. True when the flow is now blocked (and
    /// should be reset). What both families' stateful stages do with a client's segment.
    #[allow(clippy::too_many_arguments)]
    pub fn judge_tcp(
        &mut self,
        policy: &ContentPolicy,
        flow: u32,
        state: &mut ContentState,
        device: Device,
        server_port: u16,
        seq: u32,
        payload: &[u8],
    ) -> bool {
        if payload.is_empty() {
            return false;
        }
        match self.inspect_tcp_seq(policy, flow, device, server_port, seq, payload) {
            Inspection::Pending => false,
            Inspection::Allow => {
                *state = ContentState::Allowed;
                false
            }
            Inspection::Block(_) => {
                *state = ContentState::Blocked;
                self.forget(flow);
                true
            }
        }
    }

    /// A flow ended, or was decided elsewhere: frees its slot, if it has one.
    pub fn forget(&mut self, flow: u32) {
        // Every new flow is forgotten: with nothing inspected (keyword block off, or no
        // stream in flight), that must not cost a cache miss in the table.
        if self.in_use == 0 {
            return;
        }
        if let Some(i) = self.find(flow) {
            self.free(i);
        }
    }

    /// Slots in use, for metrics.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    pub fn capacity(&self) -> usize {
        self.tags.len()
    }

    /// The table's memory, allocated once.
    pub fn memory_bytes(&self) -> usize {
        self.capacity() * BYTES_PER_SLOT
    }

    /// Flows allowed uninspected because the table was full (fail-open; see the module doc).
    pub fn inspection_overflows(&self) -> u64 {
        self.stats.overflows
    }

    pub fn stats(&self) -> InspectorStats {
        self.stats
    }

    fn inspect(
        &mut self,
        policy: &ContentPolicy,
        flow: u32,
        device: Device,
        server_port: u16,
        seq: Option<u32>,
        payload: &[u8],
    ) -> Inspection {
        if payload.is_empty() {
            return Inspection::Pending;
        }
        self.clock = self.clock.wrapping_add(1);
        let client = u32::from(device.0);
        if let Some(i) = self.find(flow) {
            let tag = self.tags[i];
            if tag.device == client && tag.server_port == server_port {
                return self.continue_flow(i, policy, device, seq, payload);
            }
            // The id was reused by another flow before its old slot was forgotten.
            self.stats.stale_reclaimed += 1;
            self.free(i);
        }
        let Some(mut scanner) = Scanner::for_first_payload(server_port, payload) else {
            return Inspection::Allow;
        };
        match scanner.feed(policy, device, payload) {
            Step::Done(verdict) => return verdict,
            Step::GaveUp => {
                self.stats.gave_up += 1;
                return Inspection::Allow;
            }
            Step::More => {}
        }
        let Some(i) = self.allocate(flow) else {
            self.stats.overflows += 1;
            return Inspection::Allow;
        };
        // The payload length fits u32: it is within one IPv4 datagram.
        let len = payload.len() as u32;
        self.tags[i] = Tag {
            flow,
            device: client,
            server_port,
            packets: 1,
            used: true,
            seq_known: seq.is_some(),
            next_seq: seq.unwrap_or(0).wrapping_add(len),
            last_used: self.clock,
        };
        self.scanners[i] = scanner;
        self.in_use += 1;
        Inspection::Pending
    }

    fn continue_flow(
        &mut self,
        i: usize,
        policy: &ContentPolicy,
        device: Device,
        seq: Option<u32>,
        payload: &[u8],
    ) -> Inspection {
        let clock = self.clock;
        let tag = &mut self.tags[i];
        tag.last_used = clock;
        tag.packets = tag.packets.saturating_add(1);
        let fresh = match (tag.seq_known, seq) {
            (true, Some(seq)) => {
                // Serial-number arithmetic (RFC 1982): how far this segment starts past the
                // next expected byte, negative when it starts at bytes already fed.
                let ahead = seq.wrapping_sub(tag.next_seq) as i32;
                if ahead > 0 {
                    &[][..]
                } else {
                    payload
                        .get(ahead.unsigned_abs() as usize..)
                        .unwrap_or_default()
                }
            }
            _ => payload,
        };
        tag.next_seq = tag.next_seq.wrapping_add(fresh.len() as u32);
        let packets = tag.packets;
        let step = if fresh.is_empty() {
            Step::More
        } else {
            self.scanners[i].feed(policy, device, fresh)
        };
        match step {
            Step::Done(verdict) => {
                self.free(i);
                verdict
            }
            Step::GaveUp => {
                self.free(i);
                self.stats.gave_up += 1;
                Inspection::Allow
            }
            Step::More if packets >= MAX_PAYLOAD_PACKETS => {
                self.free(i);
                self.stats.gave_up += 1;
                Inspection::Allow
            }
            Step::More => Inspection::Pending,
        }
    }

    /// The flow's probe window. Fibonacci hashing spreads the dense, sequential conntrack
    /// slot numbers over the table; the mask keeps every index in bounds.
    fn window(&self, flow: u32) -> impl Iterator<Item = usize> {
        let start = (flow.wrapping_mul(0x9E37_79B9) >> self.shift) as usize;
        let mask = self.mask;
        (0..PROBE).map(move |k| (start + k) & mask)
    }

    fn find(&self, flow: u32) -> Option<usize> {
        self.window(flow).find(|&i| {
            let tag = &self.tags[i];
            tag.used && tag.flow == flow
        })
    }

    /// A free slot in the flow's window, else the one idle longest if it is past
    /// `stale_after`, else none.
    fn allocate(&mut self, flow: u32) -> Option<usize> {
        let mut oldest: Option<(usize, u32)> = None;
        for i in self.window(flow) {
            let tag = &self.tags[i];
            if !tag.used {
                return Some(i);
            }
            let idle = self.clock.wrapping_sub(tag.last_used);
            let older = match oldest {
                Some((_, max)) => idle > max,
                None => true,
            };
            if idle >= self.stale_after && older {
                oldest = Some((i, idle));
            }
        }
        let (i, _) = oldest?;
        self.stats.stale_reclaimed += 1;
        self.free(i);
        Some(i)
    }

    fn free(&mut self, i: usize) {
        let tag = &mut self.tags[i];
        if tag.used {
            tag.used = false;
            self.in_use -= 1;
        }
        self.scanners[i] = Scanner::Free;
    }
}

impl Default for ContentInspector {
    fn default() -> Self {
        Self::new(DEFAULT_SLOTS)
    }
}

/// A DNS query over UDP from `device` (the UDP payload): the reason, if the first question's
/// name is blocked for it. Not a query, or malformed: `None` (the resolver will refuse it).
pub fn dns_query_blocked(
    policy: &ContentPolicy,
    device: Device,
    udp_payload: &[u8],
) -> Option<BlockReason> {
    let mut out = [0u8; 256];
    let name = dns::query_name(udp_payload, &mut out)?;
    policy.blocks(device.0, device.1, name, None)
}

/// [`dns_query_blocked`] for one DNS-over-TCP segment (2-byte length prefix first). TCP flows
/// to port 53 are also covered by [`ContentInspector::inspect_tcp`], which handles a prefix
/// sent in a segment of its own.
pub fn dns_tcp_query_blocked(
    policy: &ContentPolicy,
    device: Device,
    tcp_payload: &[u8],
) -> Option<BlockReason> {
    let mut out = [0u8; 256];
    let name = dns::query_name_tcp(tcp_payload, &mut out)?;
    policy.blocks(device.0, device.1, name, None)
}

/// Turns a blocked DNS query frame (Ethernet + IPv4 + UDP + DNS, the first `len` bytes of
/// `room`) into the NXDOMAIN reply going back to the client, in place: the DNS message
/// rewritten by [`dns::write_nxdomain`], IP addresses, UDP ports and MAC addresses swapped, a
/// fresh option-less IP header (IP options a client sent are not for its answer), lengths and
/// both checksums computed. Returns the reply's length, never more than `len`.
///
/// The reply comes from the address the client asked, so its stub resolver accepts it. `None`,
/// with the frame untouched, for anything but an unfragmented IPv4/UDP datagram holding a
/// standard query, or an IPv6 one whose UDP header follows the fixed header.
pub fn write_dns_nxdomain_reply(room: &mut [u8], len: usize) -> Option<usize> {
    const IP_START: usize = ethernet::HEADER_LEN;
    const UDP_START: usize = IP_START + ipv4::HEADER_LEN;
    let frame = room.get_mut(..len)?;
    let eth = EthernetFrame::new_checked(&*frame).ok()?;
    if eth.ethertype() == ethernet::ethertype::IPV6 {
        return write_dns_nxdomain_reply6(frame);
    }
    if eth.ethertype() != ethernet::ethertype::IPV4 {
        return None;
    }
    let (client_mac, server_mac) = (eth.src_addr(), eth.dst_addr());
    let ip = Ipv4Packet::new_checked(frame.get(IP_START..)?).ok()?;
    if ip.protocol() != ipv4::protocol::UDP || ip.is_fragment() {
        return None;
    }
    let (client, server) = (ip.src_addr(), ip.dst_addr());
    let l4_start = IP_START + usize::from(ip.header_len());
    let datagram = UdpPacket::new_checked(ip.payload()).ok()?;
    let (client_port, server_port) = (datagram.src_port(), datagram.dst_port());
    let dns_start = l4_start + udp::HEADER_LEN;
    let dns_end = l4_start + usize::from(datagram.len());
    let dns_len = dns_end - dns_start;

    // Everything above only read; from here on the frame is rewritten, and every range below
    // lies inside what was just checked (the reply is never longer than the query).
    let answer_len = dns::write_nxdomain(frame.get_mut(dns_start..dns_end)?, dns_len)?;
    let udp_len = udp::HEADER_LEN + answer_len;
    if l4_start != UDP_START {
        frame.copy_within(l4_start..l4_start + udp_len, UDP_START);
    }
    // udp_len <= the query's UDP length, a u16.
    let header = Ipv4Repr::new(
        server,
        client,
        ipv4::protocol::UDP,
        udp_len as u16,
        GENERATED_TTL,
    );
    header.emit(&mut Ipv4Packet::new_unchecked(
        frame.get_mut(IP_START..UDP_START)?,
    ));
    let mut reply = UdpPacket::new_unchecked(frame.get_mut(UDP_START..UDP_START + udp_len)?);
    reply.set_src_port(server_port);
    reply.set_dst_port(client_port);
    reply.set_len(udp_len as u16);
    reply.fill_checksum(server, client);
    let mut eth = EthernetFrame::new_unchecked(&mut *frame);
    eth.set_dst_addr(client_mac);
    eth.set_src_addr(server_mac);
    Some(UDP_START + udp_len)
}

/// [`write_dns_nxdomain_reply`] for an IPv6 frame: the header keeps its traffic class and
/// flow label, gets the reply's length and a fresh hop limit, and the addresses swapped.
fn write_dns_nxdomain_reply6(frame: &mut [u8]) -> Option<usize> {
    const IP_START: usize = ethernet::HEADER_LEN;
    const UDP_START: usize = IP_START + ipv6::HEADER_LEN;
    let eth = EthernetFrame::new_checked(&*frame).ok()?;
    let (client_mac, server_mac) = (eth.src_addr(), eth.dst_addr());
    let ip = Ipv6Packet::new_checked(frame.get(IP_START..)?).ok()?;
    if ip.next_header() != ipv6::next_header::UDP {
        return None;
    }
    let (client, server) = (ip.src_addr(), ip.dst_addr());
    let datagram = UdpPacket::new_checked(ip.payload()).ok()?;
    let (client_port, server_port) = (datagram.src_port(), datagram.dst_port());
    let dns_start = UDP_START + udp::HEADER_LEN;
    let dns_end = UDP_START + usize::from(datagram.len());
    let dns_len = dns_end - dns_start;

    // As for IPv4: everything was checked above, and the reply is never the longer.
    let answer_len = dns::write_nxdomain(frame.get_mut(dns_start..dns_end)?, dns_len)?;
    let udp_len = udp::HEADER_LEN + answer_len;
    let mut ip = Ipv6Packet::new_unchecked(frame.get_mut(IP_START..UDP_START)?);
    ip.set_src_addr(server);
    ip.set_dst_addr(client);
    // udp_len <= the query's UDP length, a u16.
    ip.set_payload_len(udp_len as u16);
    ip.set_hop_limit(GENERATED_TTL);
    let segment = frame.get_mut(UDP_START..UDP_START + udp_len)?;
    let mut reply = UdpPacket::new_unchecked(&mut *segment);
    reply.set_src_port(server_port);
    reply.set_dst_port(client_port);
    reply.set_len(udp_len as u16);
    reply.set_checksum(0);
    let sum = match checksum::l4_checksum_v6(server, client, ipv6::next_header::UDP, segment) {
        // RFC 8200 8.1: a computed zero is sent as all ones.
        0 => 0xffff,
        sum => sum,
    };
    UdpPacket::new_unchecked(&mut *segment).set_checksum(sum);
    let mut eth = EthernetFrame::new_unchecked(&mut *frame);
    eth.set_dst_addr(client_mac);
    eth.set_src_addr(server_mac);
    Some(UDP_START + udp_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::inspect::parse_domain_list;
    use crate::features::parental::days::WORKDAYS;
    use crate::features::parental::{DeviceMatch, TimeWindow};
    use etherparse::{Ethernet2Header, Ipv4Header, PacketBuilder, UdpHeader};
    use proptest::prelude::*;

    const KID_A: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const KID_B: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 11);
    const GUEST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 50);
    const OTHER: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 99);
    const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x0a]);
    const MAC_X: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x77]);
    const GAMES: usize = 0;
    const SOCIAL: usize = 1;
    /// 2024-01-01 00:00:00 UTC, a Monday.
    const MONDAY: i64 = 1_704_067_200;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn at(hour: i64, minute: i64) -> i64 {
        hour * 3_600 + minute * 60
    }

    /// Kid A (by IP, or by MAC) may not reach games, only on workdays 16:00-19:00 local;
    /// kid B may not reach social networks, any time; the guest is paused. The zone is two
    /// hours ahead of UTC.
    fn policy() -> ContentPolicy {
        let games = parse_domain_list("# games\n0.0.0.0 games.example\n0.0.0.0 play.example\n");
        let social = parse_domain_list("social.example\n");
        ContentPolicy::new(
            &strings(&["blocked.example", "server"]),
            &strings(&["casino"]),
            vec![("games".into(), games), ("social".into(), social)],
            vec![
                Policy {
                    devices: vec![DeviceMatch::Ip(KID_A), DeviceMatch::Mac(MAC_A)],
                    blocked_categories: vec![GAMES],
                    windows: vec![TimeWindow {
                        weekdays: WORKDAYS,
                        start_minute: 16 * 60,
                        end_minute: 19 * 60,
                    }],
                    paused: false,
                },
                Policy {
                    devices: vec![DeviceMatch::Ip(KID_B)],
                    blocked_categories: vec![SOCIAL],
                    ..Policy::default()
                },
                Policy {
                    devices: vec![DeviceMatch::Ip(GUEST)],
                    paused: true,
                    ..Policy::default()
                },
            ],
            DnsAction::Nxdomain,
            120,
        )
        .unwrap()
    }

    fn dev(ip: Ipv4Addr) -> Device {
        (ip, None)
    }

    /// A minimal valid TLS 1.2-style ClientHello record naming `name`, with `padding` bytes
    /// of a padding extension (RFC 7685) before the server_name one.
    fn client_hello(name: &[u8], padding: usize) -> Vec<u8> {
        let mut exts = Vec::new();
        if padding > 0 {
            exts.extend_from_slice(&21u16.to_be_bytes());
            exts.extend_from_slice(&(padding as u16).to_be_bytes());
            exts.extend_from_slice(&vec![0u8; padding]);
        }
        let entry_len = 3 + name.len();
        exts.extend_from_slice(&0u16.to_be_bytes());
        exts.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
        exts.extend_from_slice(&(entry_len as u16).to_be_bytes());
        exts.push(0);
        exts.extend_from_slice(&(name.len() as u16).to_be_bytes());
        exts.extend_from_slice(name);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[0x11; 32]);
        body.push(0); // no session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut handshake = vec![1];
        handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        handshake.extend_from_slice(&body);
        let mut record = vec![22, 3, 1];
        record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
        record.extend_from_slice(&handshake);
        record
    }

    /// RFC 8448 §3's ClientHello for "server" (the fixture of `inspect::tls`'s tests).
    fn rfc8448_record() -> Vec<u8> {
        let hex = "16 03 01 00 c4
            01 00 00 c0 03 03 cb 34 ec b1 e7 81 63 ba 1c 38 c6 da cb 19 6a 6d ff a2 1a 8d 99 12
            ec 18 a2 ef 62 83 02 4d ec e7 00 00 06 13 01 13 03 13 02 01 00 00 91 00 00 00 0b 00
            09 00 00 06 73 65 72 76 65 72 ff 01 00 01 00 00 0a 00 14 00 12 00 1d 00 17 00 18 00
            19 01 00 01 01 01 02 01 03 01 04 00 23 00 00 00 33 00 26 00 24 00 1d 00 20 99 38 1d
            e5 60 e4 bd 43 d2 3d 8e 43 5a 7d ba fe b3 c0 6e 51 c1 3c ae 4d 54 13 69 1e 52 9a af
            2c 00 2b 00 03 02 03 04 00 0d 00 20 00 1e 04 03 05 03 06 03 02 03 08 04 08 05 08 06
            04 01 05 01 06 01 02 01 04 02 05 02 06 02 02 02 00 2d 00 02 01 01 00 1c 00 02 40 01";
        hex.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// A DNS query (RD, QTYPE A, QCLASS IN) for `name`.
    fn dns_query(id: u16, name: &str) -> Vec<u8> {
        let mut m = id.to_be_bytes().to_vec();
        m.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
        for label in name.split('.') {
            m.push(label.len() as u8);
            m.extend_from_slice(label.as_bytes());
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        m
    }

    #[test]
    fn http_split_across_two_packets_is_blocked() {
        let policy = policy();
        let mut ins = ContentInspector::new(1024);
        let first = b"GET /index.html HTTP/1.1\r\nUser-Agent: t\r\nHost: www.bloc";
        let second = b"ked.example\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            ins.inspect_tcp(&policy, 7, dev(OTHER), 80, &[]),
            Inspection::Pending
        );
        assert_eq!(ins.in_use(), 0, "no slot for a packet without payload");
        assert_eq!(
            ins.inspect_tcp(&policy, 7, dev(OTHER), 80, first),
            Inspection::Pending
        );
        assert_eq!(ins.in_use(), 1);
        assert_eq!(
            ins.inspect_tcp(&policy, 7, dev(OTHER), 80, second),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(ins.in_use(), 0, "a verdict frees the slot");
        // A keyword in the path, in one packet: decided without taking a slot.
        let req = b"GET /casino/poker HTTP/1.1\r\nHost: news.example\r\n\r\n";
        assert_eq!(
            ins.inspect_tcp(&policy, 8, dev(OTHER), 80, req),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(ins.stats(), InspectorStats::default());
    }

    #[test]
    fn allowed_host_is_allowed_and_frees_its_slot() {
        let policy = policy();
        let mut ins = ContentInspector::new(16);
        let req = b"GET / HTTP/1.1\r\nHost: news.example\r\n\r\n";
        let (a, b) = req.split_at(20);
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 80, a),
            Inspection::Pending
        );
        assert_eq!(ins.in_use(), 1);
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 80, b),
            Inspection::Allow
        );
        assert_eq!(ins.in_use(), 0);
        assert!(Inspection::Allow.is_final() && !Inspection::Pending.is_final());
    }

    #[test]
    fn tls_client_hello_with_blocked_sni() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        // The RFC 8448 fixture names "server", which the global list holds.
        assert_eq!(
            ins.inspect_tcp(&policy, 1, dev(OTHER), 443, &rfc8448_record()),
            Inspection::Block(BlockReason::Keyword)
        );
        let hello = client_hello(b"WWW.Blocked.Example", 0);
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(OTHER), 443, &hello),
            Inspection::Block(BlockReason::Keyword)
        );
        // A name past the first segment: pending, then blocked.
        let hello = client_hello(b"cdn.blocked.example", 1500);
        let (a, b) = hello.split_at(1460);
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 443, a),
            Inspection::Pending
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 443, b),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 4, dev(OTHER), 443, &client_hello(b"ok.example", 0)),
            Inspection::Allow
        );
        assert_eq!(ins.in_use(), 0);
    }

    #[test]
    fn protocol_is_sniffed_off_the_standard_ports() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        let req = b"POST /x HTTP/1.1\r\nHost: blocked.example:8080\r\n\r\n";
        assert_eq!(
            ins.inspect_tcp(&policy, 1, dev(OTHER), 8080, req),
            Inspection::Block(BlockReason::Keyword)
        );
        let hello = client_hello(b"blocked.example", 0);
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(OTHER), 8443, &hello),
            Inspection::Block(BlockReason::Keyword)
        );
        // TLS on port 80 and HTTP on port 443 are read as what they are.
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 80, &hello),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 4, dev(OTHER), 443, req),
            Inspection::Block(BlockReason::Keyword)
        );
        // A request split inside its method on another port is still recognised.
        assert_eq!(
            ins.inspect_tcp(&policy, 5, dev(OTHER), 8080, b"PO"),
            Inspection::Pending
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 5, dev(OTHER), 8080, &req[2..]),
            Inspection::Block(BlockReason::Keyword)
        );
        // Neither: allowed at once, no slot.
        assert_eq!(
            ins.inspect_tcp(&policy, 6, dev(OTHER), 22, b"SSH-2.0-OpenSSH_9.6\r\n"),
            Inspection::Allow
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 7, dev(OTHER), 443, b"SSH-2.0-OpenSSH_9.6\r\n"),
            Inspection::Allow
        );
        assert_eq!(ins.in_use(), 0);
    }

    #[test]
    fn device_time_windows_and_pause() {
        let policy = policy();
        assert!(!policy.is_empty() && policy.inspects_content());
        // Monday 14:30 UTC is 16:30 local (+2h): inside 16:00-19:00.
        assert!(policy.device_allowed(KID_A, None, MONDAY + at(14, 30)));
        assert!(policy.device_allowed(KID_A, None, MONDAY + at(14, 0)));
        assert!(!policy.device_allowed(KID_A, None, MONDAY + at(13, 59)));
        assert!(!policy.device_allowed(KID_A, None, MONDAY + at(17, 0)));
        // Same instants, recognised by MAC from an address the policy does not name.
        assert!(policy.device_allowed(OTHER, Some(MAC_A), MONDAY + at(14, 30)));
        assert!(!policy.device_allowed(OTHER, Some(MAC_A), MONDAY + at(17, 0)));
        // Saturday (day 5) is not a workday.
        assert!(!policy.device_allowed(KID_A, None, MONDAY + 5 * 86_400 + at(15, 0)));
        // No windows: always; paused: never; no policy: always.
        assert!(policy.device_allowed(KID_B, None, MONDAY + at(3, 0)));
        assert!(!policy.device_allowed(GUEST, None, MONDAY + at(12, 0)));
        assert!(policy.device_allowed(OTHER, Some(MAC_X), MONDAY + at(3, 0)));
        // The offset is what places the window: in UTC, 14:30 would be outside it.
        let utc = ContentPolicy::new(
            &[],
            &[],
            Vec::new(),
            policy.parental().policies().to_vec(),
            DnsAction::Drop,
            0,
        );
        assert!(matches!(
            utc,
            Err(ContentError::UnknownCategory {
                policy: 0,
                category: GAMES
            })
        ));
        let windows_only: Vec<Policy> = policy
            .parental()
            .policies()
            .iter()
            .map(|p| Policy {
                blocked_categories: Vec::new(),
                ..p.clone()
            })
            .collect();
        let utc =
            ContentPolicy::new(&[], &[], Vec::new(), windows_only, DnsAction::Drop, 0).unwrap();
        assert!(!utc.device_allowed(KID_A, None, MONDAY + at(14, 30)));
        assert!(utc.device_allowed(KID_A, None, MONDAY + at(16, 30)));
        assert!(!utc.is_empty() && !utc.inspects_content());
        assert_eq!(utc.dns_action(), DnsAction::Drop);
    }

    #[test]
    fn categories_are_blocked_per_device() {
        let policy = policy();
        assert_eq!(policy.category_index("games"), Some(GAMES));
        assert_eq!(policy.category_name(SOCIAL), Some("social"));
        assert_eq!(policy.category_index("news"), None);
        let games = Some(BlockReason::Category(GAMES));
        assert_eq!(
            policy.blocks(KID_A, None, b"www.games.example", None),
            games
        );
        assert_eq!(
            policy.blocks(OTHER, Some(MAC_A), b"play.example", None),
            games
        );
        assert_eq!(policy.blocks(KID_B, None, b"www.games.example", None), None);
        assert_eq!(policy.blocks(OTHER, None, b"games.example", None), None);
        assert_eq!(
            policy.blocks(KID_B, None, b"social.example", None),
            Some(BlockReason::Category(SOCIAL))
        );
        assert_eq!(policy.blocks(KID_A, None, b"social.example", None), None);
        // The global list applies to everyone, and wins.
        assert_eq!(
            policy.blocks(KID_A, None, b"casino.games.example", None),
            Some(BlockReason::Keyword)
        );
        // Through the inspector, TLS for A and HTTP for B.
        let mut ins = ContentInspector::new(64);
        let hello = client_hello(b"games.example", 0);
        assert_eq!(
            ins.inspect_tcp(&policy, 1, dev(KID_A), 443, &hello),
            Inspection::Block(BlockReason::Category(GAMES))
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(KID_B), 443, &hello),
            Inspection::Allow
        );
        let req = b"GET / HTTP/1.1\r\nHost: games.example\r\n\r\n";
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(KID_B), 80, req),
            Inspection::Allow
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 4, (OTHER, Some(MAC_A)), 80, req),
            Inspection::Block(BlockReason::Category(GAMES))
        );
    }

    #[test]
    fn building_refuses_bad_configuration() {
        let err = |r: Result<ContentPolicy, ContentError>| r.unwrap_err();
        let e = err(ContentPolicy::new(
            &[],
            &[],
            Vec::new(),
            Vec::new(),
            DnsAction::Nxdomain,
            3600,
        ));
        assert!(matches!(e, ContentError::UtcOffset(3600)));
        assert!(e.to_string().contains("minutes"));
        let e = err(ContentPolicy::new(
            &strings(&[" "]),
            &[],
            Vec::new(),
            Vec::new(),
            DnsAction::Nxdomain,
            0,
        ));
        assert!(matches!(e, ContentError::Global(BuildError::EmptyEntry(0))));
        let e = err(ContentPolicy::new(
            &[],
            &[],
            vec![("a".into(), strings(&["ok.example", "*."]))],
            Vec::new(),
            DnsAction::Nxdomain,
            0,
        ));
        assert!(
            matches!(&e, ContentError::Category { name, error: BuildError::EmptyEntry(1) } if name == "a")
        );
        assert!(std::error::Error::source(&e).is_some());
        let e = err(ContentPolicy::new(
            &[],
            &[],
            vec![("a".into(), Vec::new()), ("a".into(), Vec::new())],
            Vec::new(),
            DnsAction::Nxdomain,
            0,
        ));
        assert!(matches!(e, ContentError::DuplicateCategory(ref n) if n == "a"));
        let empty = ContentPolicy::new(&[], &[], Vec::new(), Vec::new(), DnsAction::Nxdomain, -720)
            .unwrap();
        assert!(empty.is_empty() && !empty.inspects_content());
        assert_eq!(
            empty.blocks(OTHER, None, b"blocked.example", Some(b"/casino")),
            None
        );
        assert!(empty.device_allowed(OTHER, None, 0));
    }

    #[test]
    fn table_full_fails_open_and_counts() {
        let policy = policy();
        // The smallest table: 8 slots, one probe window covering them all.
        let mut ins = ContentInspector::new(1);
        assert_eq!(ins.capacity(), 8);
        let partial = b"GET / HTTP/1.1\r\nHost: blocked";
        for flow in 0..8 {
            assert_eq!(
                ins.inspect_tcp(&policy, flow, dev(OTHER), 80, partial),
                Inspection::Pending
            );
        }
        assert_eq!(ins.in_use(), 8);
        assert_eq!(ins.inspection_overflows(), 0);
        assert_eq!(
            ins.inspect_tcp(&policy, 100, dev(OTHER), 80, partial),
            Inspection::Allow,
            "no slot: fail open"
        );
        assert_eq!(ins.inspection_overflows(), 1);
        // A flow decided in its first packet needs no slot, table full or not.
        let whole = b"GET / HTTP/1.1\r\nHost: blocked.example\r\n\r\n";
        assert_eq!(
            ins.inspect_tcp(&policy, 101, dev(OTHER), 80, whole),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(ins.inspection_overflows(), 1);
        // Forgetting makes room again.
        ins.forget(3);
        ins.forget(3);
        assert_eq!(ins.in_use(), 7);
        assert_eq!(
            ins.inspect_tcp(&policy, 100, dev(OTHER), 80, partial),
            Inspection::Pending
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 100, dev(OTHER), 80, b".example\r\n"),
            Inspection::Block(BlockReason::Keyword)
        );
    }

    #[test]
    fn abandoned_slots_are_reclaimed_once_stale() {
        let policy = policy();
        let mut ins = ContentInspector::new(8);
        let partial = b"GET / HTTP/1.1\r\nHost: a";
        for flow in 0..8 {
            assert_eq!(
                ins.inspect_tcp(&policy, flow, dev(OTHER), 80, partial),
                Inspection::Pending
            );
        }
        // Flow 0 keeps sending; the others go quiet. Decided flows tick the clock.
        let whole = b"GET / HTTP/1.1\r\nHost: news.example\r\n\r\n";
        for _ in 0..8 * STALE_PACKETS_PER_SLOT {
            assert_eq!(
                ins.inspect_tcp(&policy, 50, dev(OTHER), 80, whole),
                Inspection::Allow
            );
        }
        assert_eq!(
            ins.inspect_tcp(&policy, 0, dev(OTHER), 80, b"b"),
            Inspection::Pending
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 100, dev(OTHER), 80, partial),
            Inspection::Pending
        );
        assert_eq!(ins.inspection_overflows(), 0);
        assert_eq!(ins.stats().stale_reclaimed, 1);
        assert_eq!(ins.in_use(), 8);
        // Flow 0 was fed in between, so it kept its slot.
        assert_eq!(
            ins.inspect_tcp(&policy, 0, dev(OTHER), 80, b".example\r\n"),
            Inspection::Allow
        );
    }

    #[test]
    fn reused_flow_id_starts_over() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        assert_eq!(
            ins.inspect_tcp(&policy, 9, dev(OTHER), 80, b"GET / HTTP/1.1\r\nHost: x"),
            Inspection::Pending
        );
        // The old flow expired unforgotten; its id now belongs to another client's flow.
        let hello = client_hello(b"blocked.example", 0);
        assert_eq!(
            ins.inspect_tcp(&policy, 9, dev(KID_B), 443, &hello),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(ins.stats().stale_reclaimed, 1);
        assert_eq!(ins.in_use(), 0);
    }

    #[test]
    fn too_many_packets_without_a_name_gives_up() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        let mut verdicts = Vec::new();
        verdicts.push(ins.inspect_tcp(&policy, 1, dev(OTHER), 80, b"GET / HTTP/1.1\r\n"));
        for _ in 1..MAX_PAYLOAD_PACKETS {
            verdicts.push(ins.inspect_tcp(&policy, 1, dev(OTHER), 80, b"X-Pad: 1\r\n"));
        }
        let (last, pending) = verdicts.split_last().unwrap();
        assert!(pending.iter().all(|v| *v == Inspection::Pending));
        assert_eq!(*last, Inspection::Allow);
        assert_eq!(ins.stats().gave_up, 1);
        assert_eq!(ins.in_use(), 0);
        // A request line too long for the scanner: given up at once.
        let long = format!(
            "GET /{} HTTP/1.1\r\nHost: blocked.example\r\n",
            "a".repeat(600)
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(OTHER), 80, long.as_bytes()),
            Inspection::Allow
        );
        assert_eq!(ins.stats().gave_up, 2);
    }

    #[test]
    fn sequence_numbers_skip_retransmissions_and_wait_out_gaps() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        let hello = client_hello(b"blocked.example", 1500);
        let isn = u32::MAX - 700; // wraps inside the hello
        let seq = |offset: usize| isn.wrapping_add(offset as u32);
        let (a, rest) = hello.split_at(1000);
        assert_eq!(
            ins.inspect_tcp_seq(&policy, 1, dev(OTHER), 443, seq(0), a),
            Inspection::Pending
        );
        // The first segment again (retransmitted): nothing new.
        assert_eq!(
            ins.inspect_tcp_seq(&policy, 1, dev(OTHER), 443, seq(0), a),
            Inspection::Pending
        );
        // A segment past a gap waits.
        let tail = &hello[1200..];
        assert_eq!(
            ins.inspect_tcp_seq(&policy, 1, dev(OTHER), 443, seq(1200), tail),
            Inspection::Pending
        );
        // A retransmission overlapping what was read, then carrying the rest.
        assert_eq!(
            ins.inspect_tcp_seq(&policy, 1, dev(OTHER), 443, seq(900), &hello[900..]),
            Inspection::Block(BlockReason::Keyword)
        );
        assert!(!rest.is_empty());
        // Without sequence numbers, the same retransmission derails the TLS parser: allowed.
        let mut blind = ContentInspector::new(64);
        assert_eq!(
            blind.inspect_tcp(&policy, 1, dev(OTHER), 443, a),
            Inspection::Pending
        );
        assert_eq!(
            blind.inspect_tcp(&policy, 1, dev(OTHER), 443, a),
            Inspection::Allow
        );
    }

    #[test]
    fn dns_over_tcp_in_the_inspector() {
        let policy = policy();
        let mut ins = ContentInspector::new(64);
        let query = dns_query(5, "www.blocked.example");
        let mut segment = (query.len() as u16).to_be_bytes().to_vec();
        segment.extend_from_slice(&query);
        assert_eq!(
            ins.inspect_tcp(&policy, 1, dev(OTHER), 53, &segment),
            Inspection::Block(BlockReason::Keyword)
        );
        assert_eq!(
            dns_tcp_query_blocked(&policy, dev(OTHER), &segment),
            Some(BlockReason::Keyword)
        );
        // The length prefix in a segment of its own.
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(OTHER), 53, &segment[..2]),
            Inspection::Pending
        );
        assert_eq!(
            ins.inspect_tcp(&policy, 2, dev(OTHER), 53, &segment[2..]),
            Inspection::Block(BlockReason::Keyword)
        );
        let ok = dns_query(6, "news.example");
        let mut segment = (ok.len() as u16).to_be_bytes().to_vec();
        segment.extend_from_slice(&ok);
        assert_eq!(
            ins.inspect_tcp(&policy, 3, dev(OTHER), 53, &segment),
            Inspection::Allow
        );
        assert_eq!(ins.in_use(), 0);
    }

    fn dns_frame(query: &[u8]) -> Vec<u8> {
        let builder = PacketBuilder::ethernet2(MAC_A.0, MAC_X.0)
            .ipv4(KID_A.octets(), [9, 9, 9, 9], 64)
            .udp(40_000, 53);
        let mut frame = Vec::new();
        builder.write(&mut frame, query).unwrap();
        frame
    }

    /// Parses the reply with etherparse and checks every field the rewrite touched,
    /// checksums recomputed independently. Returns the DNS message.
    fn check_reply(reply: &[u8]) -> Vec<u8> {
        let (eth, rest) = Ethernet2Header::from_slice(reply).unwrap();
        assert_eq!(eth.source, MAC_X.0);
        assert_eq!(eth.destination, MAC_A.0);
        let (ip, rest) = Ipv4Header::from_slice(rest).unwrap();
        assert_eq!(ip.header_len(), 20);
        assert_eq!(ip.source, [9, 9, 9, 9]);
        assert_eq!(ip.destination, KID_A.octets());
        assert_eq!(usize::from(ip.total_len), reply.len() - 14);
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        assert!(!ip.more_fragments && ip.fragment_offset.value() == 0);
        let (udp, rest) = UdpHeader::from_slice(rest).unwrap();
        assert_eq!((udp.source_port, udp.destination_port), (53, 40_000));
        assert_eq!(usize::from(udp.length), 8 + rest.len());
        let expected = udp
            .calc_checksum_ipv4_raw(ip.source, ip.destination, rest)
            .unwrap();
        assert_eq!(udp.checksum, expected);
        rest.to_vec()
    }

    #[test]
    fn blocked_dns_query_gets_an_nxdomain_reply() {
        let policy = policy();
        let query = dns_query(0xBEEF, "ads.Blocked.example");
        assert_eq!(
            dns_query_blocked(&policy, dev(OTHER), &query),
            Some(BlockReason::Keyword)
        );
        assert_eq!(
            dns_query_blocked(&policy, dev(OTHER), &dns_query(1, "news.example")),
            None
        );
        assert_eq!(
            dns_query_blocked(
                &policy,
                (OTHER, Some(MAC_A)),
                &dns_query(1, "games.example")
            ),
            Some(BlockReason::Category(GAMES))
        );

        let mut frame = dns_frame(&query);
        let len = frame.len();
        frame.resize(2048, 0xAA);
        let n = write_dns_nxdomain_reply(&mut frame, len).unwrap();
        assert!(n <= len);
        let dns = check_reply(&frame[..n]);
        assert_eq!(&dns[..2], &0xBEEFu16.to_be_bytes());
        assert_eq!(dns[2] & 0x80, 0x80, "QR");
        assert_eq!(dns[3] & 0x0F, 3, "NXDOMAIN");
        assert_eq!(&dns[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        // The question is echoed as asked.
        assert_eq!(&dns[12..], &query[12..]);
    }

    #[test]
    fn a_blocked_ipv6_query_gets_its_nxdomain_reply_from_the_address_asked() {
        let (client, server) = (
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, 5),
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 0x53),
        );
        let query = dns_query(0xCAFE, "ads.blocked.example");
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(MAC_A.0, MAC_X.0)
            .ipv6(client.octets(), server.octets(), 64)
            .udp(40_000, 53)
            .write(&mut frame, &query)
            .unwrap();
        let len = frame.len();
        frame.resize(2048, 0xAA);
        let n = write_dns_nxdomain_reply(&mut frame, len).unwrap();
        let sliced = etherparse::SlicedPacket::from_ethernet(&frame[..n]).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = sliced.link else {
            panic!("no Ethernet")
        };
        assert_eq!((eth.source(), eth.destination()), (MAC_X.0, MAC_A.0));
        let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else {
            panic!("not IPv6")
        };
        let header = ip.header().to_header();
        assert_eq!(header.source, server.octets());
        assert_eq!(header.destination, client.octets());
        assert_eq!(usize::from(header.payload_length), n - 14 - 40);
        let Some(etherparse::TransportSlice::Udp(udp)) = sliced.transport else {
            panic!("not UDP")
        };
        let udp_header = udp.to_header();
        assert_eq!(
            (udp_header.source_port, udp_header.destination_port),
            (53, 40_000)
        );
        let expected = udp_header
            .calc_checksum_ipv6(&header, udp.payload())
            .unwrap();
        assert_eq!(udp_header.checksum, expected);
        let dns = udp.payload();
        assert_eq!(&dns[..2], &0xCAFEu16.to_be_bytes());
        assert_eq!(dns[3] & 0x0F, 3, "NXDOMAIN");
        assert_eq!(&dns[12..], &query[12..]);
    }

    #[test]
    fn nxdomain_reply_drops_ip_options_and_trailing_bytes() {
        let query = dns_query(7, "blocked.example");
        let mut ip = Ipv4Header::new(
            (8 + query.len()) as u16,
            64,
            etherparse::IpNumber::UDP,
            KID_A.octets(),
            [9, 9, 9, 9],
        )
        .unwrap();
        ip.options = [1, 1, 1, 0].into();
        ip.total_len = (ip.header_len() + 8 + query.len()) as u16;
        ip.header_checksum = ip.calc_header_checksum();
        let udp = UdpHeader::with_ipv4_checksum(40_000, 53, &ip, &query).unwrap();
        let eth = Ethernet2Header {
            source: MAC_A.0,
            destination: MAC_X.0,
            ether_type: etherparse::EtherType::IPV4,
        };
        let mut frame = Vec::new();
        eth.write(&mut frame).unwrap();
        ip.write(&mut frame).unwrap();
        udp.write(&mut frame).unwrap();
        frame.extend_from_slice(&query);
        frame.extend_from_slice(&[0; 6]); // Ethernet padding
        let len = frame.len();
        let n = write_dns_nxdomain_reply(&mut frame, len).unwrap();
        let dns = check_reply(&frame[..n]);
        assert_eq!(dns[3] & 0x0F, 3);
        assert_eq!(n, 14 + 20 + 8 + query.len());
    }

    #[test]
    fn nxdomain_reply_refuses_what_it_cannot_answer() {
        let query = dns_query(7, "blocked.example");
        let frame = dns_frame(&query);
        let refuse = |mutate: &dyn Fn(&mut Vec<u8>)| {
            let mut f = frame.clone();
            mutate(&mut f);
            let before = f.clone();
            let len = f.len();
            assert_eq!(write_dns_nxdomain_reply(&mut f, len), None);
            assert_eq!(f, before, "untouched");
        };
        refuse(&|f| f[12] = 0x86); // not IPv4
        refuse(&|f| f[14 + 9] = 6); // TCP
        refuse(&|f| f[14 + 6] |= 0x20); // more fragments
        refuse(&|f| f[14 + 20 + 8 + 2] |= 0x80); // a response
        refuse(&|f| f.truncate(40)); // cut short
        let mut f = frame.clone();
        assert_eq!(write_dns_nxdomain_reply(&mut f, frame.len() + 1), None);
    }

    #[test]
    fn sizes() {
        // The HTTP scanner's 512-byte head buffer dominates a slot.
        const { assert!(BYTES_PER_SLOT <= 640) };
        let ins = ContentInspector::new(DEFAULT_SLOTS);
        assert_eq!(ins.capacity(), 1024);
        assert_eq!(ins.memory_bytes(), 1024 * BYTES_PER_SLOT);
        assert!(ins.memory_bytes() <= 640 * 1024);
        assert_eq!(ContentInspector::new(1000).capacity(), 1024);
        assert_eq!(ContentInspector::new(usize::MAX).capacity(), MAX_SLOTS);
        fn shared<T: Send + Sync>() {}
        shared::<ContentPolicy>();
        fn owned<T: Send>() {}
        owned::<ContentInspector>();
    }

    fn port() -> impl Strategy<Value = u16> {
        prop_oneof![Just(80u16), Just(443), Just(53), Just(8080), any::<u16>()]
    }

    /// Payloads that start like something a scanner reads, and then go anywhere.
    fn payload() -> impl Strategy<Value = Vec<u8>> {
        let start = prop_oneof![
            Just(Vec::new()),
            Just(b"GET / HTTP/1.1\r\nHost: ".to_vec()),
            Just(client_hello(b"blocked.example", 0)[..20].to_vec()),
            Just(vec![0, 40, 0, 1, 1, 0, 0, 1]),
        ];
        (start, proptest::collection::vec(any::<u8>(), 0..700)).prop_map(|(mut s, tail)| {
            s.extend_from_slice(&tail);
            s
        })
    }

    proptest! {
        #[test]
        fn random_payloads_never_panic(
            packets in proptest::collection::vec(
                (0u32..12, port(), any::<u32>(), any::<bool>(), payload()),
                1..24,
            ),
        ) {
            let policy = policy();
            let mut ins = ContentInspector::new(8);
            for (flow, port, seq, with_seq, bytes) in &packets {
                let _ = if *with_seq {
                    ins.inspect_tcp_seq(&policy, *flow, dev(KID_A), *port, *seq, bytes)
                } else {
                    ins.inspect_tcp(&policy, *flow, dev(KID_A), *port, bytes)
                };
                prop_assert!(ins.in_use() <= ins.capacity());
                let _ = dns_query_blocked(&policy, dev(KID_A), bytes);
                let _ = dns_tcp_query_blocked(&policy, dev(KID_A), bytes);
                if flow % 5 == 0 {
                    ins.forget(*flow);
                }
            }
            let used = ins.tags.iter().filter(|t| t.used).count();
            prop_assert_eq!(used, ins.in_use());
        }

        /// However a blocked request is split (within the packet budget), it is blocked.
        #[test]
        fn splitting_does_not_change_the_verdict(
            cuts in proptest::collection::vec(0usize..200, 0..(MAX_PAYLOAD_PACKETS as usize - 1)),
            tls in any::<bool>(),
        ) {
            let policy = policy();
            let stream = if tls {
                client_hello(b"x.blocked.example", 100)
            } else {
                b"GET /a HTTP/1.1\r\nAccept: */*\r\nHost: x.blocked.example\r\n\r\n".to_vec()
            };
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % stream.len()).collect();
            cuts.sort_unstable();
            cuts.push(stream.len());
            let mut ins = ContentInspector::new(8);
            let mut last = 0;
            let mut verdict = Inspection::Pending;
            for c in cuts {
                verdict = ins.inspect_tcp(&policy, 1, dev(OTHER), 443, &stream[last..c]);
                last = c;
                if verdict.is_final() {
                    break;
                }
            }
            prop_assert_eq!(verdict, Inspection::Block(BlockReason::Keyword));
            prop_assert_eq!(ins.in_use(), 0);
        }

        #[test]
        fn random_frames_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            len in 0usize..250,
        ) {
            let mut frame = bytes.clone();
            if let Some(n) = write_dns_nxdomain_reply(&mut frame, len) {
                prop_assert!(n <= len);
            } else {
                prop_assert_eq!(frame, bytes);
            }
        }

        /// A valid query frame with one byte changed and perhaps cut: no panic, and any
        /// reply produced is well-formed.
        #[test]
        fn mutated_query_frames(
            at in 0usize..80,
            value in any::<u8>(),
            cut in 0usize..8,
        ) {
            let frame = dns_frame(&dns_query(3, "a.blocked.example"));
            let mut f = frame.clone();
            let at = at % f.len();
            f[at] = value;
            let len = f.len() - cut;
            if let Some(n) = write_dns_nxdomain_reply(&mut f, len) {
                prop_assert!(n <= len);
                let reply = &f[..n];
                let (ip, rest) = Ipv4Header::from_slice(&reply[14..]).unwrap();
                prop_assert_eq!(ip.header_checksum, ip.calc_header_checksum());
                let (udp, dns) = UdpHeader::from_slice(rest).unwrap();
                prop_assert_eq!(usize::from(udp.length), 8 + dns.len());
                let sum = udp.calc_checksum_ipv4_raw(ip.source, ip.destination, dns).unwrap();
                prop_assert_eq!(udp.checksum, sum);
                prop_assert_eq!(dns[3] & 0x0F, 3);
            }
        }
    }
}

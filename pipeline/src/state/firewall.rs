//! The stateful firewall's rule engine: which [`Action`] a new flow gets.
//!
//! Rules are consulted once, when a flow is created; the caller stores the decision with the
//! flow, so established traffic never reaches this module. Every interface belongs to a zone
//! and traffic addressed to the gateway itself goes to the pseudo-zone [`ZoneId::LOCAL`]; a
//! flow is classified by its (from zone, to zone) pair. The first matching rule in
//! configuration order wins; if none matches, the zone pair's [`Policy`] default applies.
//!
//! # Compiled structure
//!
//! A first packet must not pay for every rule in a list of thousands, so [`RuleSet::compile`]
//! builds an index in which each rule is stored in exactly one place:
//!
//! 1. **Zone classes.** Every zone named by a rule or by the policy gets a class `1..=k`;
//!    every other zone maps to class 0 through a 256-entry table. Rules with the same
//!    (from, to) zone spec form a *group*; a wildcard side uses class 0. A `(k+1)²` cell
//!    table holds each pair's group and its default action. A flow from class `f` to class
//!    `t` has at most four groups that can match: `(*, *)`, `(f, *)`, `(*, t)` and `(f, t)`.
//!    Wildcard rules are deliberately not copied into every concrete pair: with many zones
//!    that would multiply memory by `k²`, whereas visiting four groups costs four lookups.
//! 2. **Protocol.** Within a group, rules without a protocol form one list; the others are
//!    split into per-protocol buckets, found by binary search over the few protocols used.
//! 3. **Destination port.** Within a TCP or UDP bucket, rules with a destination port range
//!    are indexed by *elementary intervals*: the port space is cut at every range's start
//!    and one past its end, and each interval holds the ascending indices of the rules whose
//!    range covers it. Binary search over the cut points finds the port's interval. ICMP
//!    buckets are indexed the same way on the ICMP type, the only field that tells ICMP
//!    rules apart. Rules with no indexed field, and port ranges spanning all 65536 ports,
//!    go into the bucket's small unindexed list.
//!
//! Evaluation gathers at most 12 sorted candidate lists (per group: no-protocol rules, the
//! bucket's unindexed rules, the port interval's rules) and merges them by rule index on the
//! stack. Each candidate is checked against all of its fields, and the merge stops at the
//! first match, which is therefore the lowest-indexed matching rule: exactly the linear
//! first-match answer, which a property test checks against a naive scan.
//!
//! # Cost
//!
//! With `z` distinct protocols in a group and `m` elementary intervals in a bucket, a
//! first-packet lookup costs `O(log z + log m)` per group plus `O(c)` full rule checks, where
//! `c` is the number of candidates indexed below the answer: rules that share the flow's zone
//! groups and protocol and whose port range covers the flow's port (or that have none), but
//! differ only in addresses, source ports or zones. With distinct destination ports `c` stays
//! a handful regardless of the list's length. Rules that differ only in address are not
//! indexed and are checked linearly within their bucket.
//!
//! Memory is one entry per rule plus, per bucket, one entry per (interval, covering rule)
//! pair. For typical rule sets (single ports and a few wide ranges) that is linear; many
//! deeply nested ranges in one bucket approach the quadratic worst case `O(n²)`, paid once at
//! compile time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::sync::Arc;

use crate::flow::{FlowKey, FlowKey6};
use crate::state::rule_hits::RuleHits;
use crate::wire::ipv4::protocol;

/// A firewall zone. Numbering is up to the configuration; only [`ZoneId::LOCAL`] is fixed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct ZoneId(pub u8);

impl ZoneId {
    /// The gateway itself: traffic addressed to one of its own addresses.
    pub const LOCAL: ZoneId = ZoneId(255);
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum Action {
    Accept,
    /// Silently discard, so a scanner learns nothing.
    Drop,
    /// Discard and tell the sender (TCP RST or ICMP unreachable), so legitimate clients fail
    /// fast instead of timing out.
    Reject,
}

impl Action {
    /// As the config writes it: "accept", "drop", "reject".
    pub fn name(self) -> &'static str {
        match self {
            Action::Accept => "accept",
            Action::Drop => "drop",
            Action::Reject => "reject",
        }
    }
}

/// One configured rule. `None` in a match field means "any".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub from: Option<ZoneId>,
    pub to: Option<ZoneId>,
    /// Source prefix (address, length). Host bits must be clear.
    pub src: Option<(Ipv4Addr, u8)>,
    pub dst: Option<(Ipv4Addr, u8)>,
    /// IPv6 source and destination prefixes: a rule with either matches IPv6 flows only, as
    /// one with an IPv4 prefix matches IPv4 flows only; a rule has prefixes of one family.
    pub src6: Option<(Ipv6Addr, u8)>,
    pub dst6: Option<(Ipv6Addr, u8)>,
    pub protocol: Option<u8>,
    /// Only with protocol TCP or UDP.
    pub src_ports: Option<RangeInclusive<u16>>,
    /// Only with protocol TCP or UDP.
    pub dst_ports: Option<RangeInclusive<u16>>,
    /// Only with protocol ICMP.
    pub icmp_type: Option<u8>,
    pub action: Action,
}

fn any_or_eq<T: PartialEq>(wanted: Option<T>, actual: T) -> bool {
    match wanted {
        None => true,
        Some(wanted) => wanted == actual,
    }
}

impl Rule {
    /// A rule named `name` that matches every flow and decides `action`: what a rule's
    /// match fields narrow.
    pub fn matching_all(name: &str, action: Action) -> Rule {
        Rule {
            name: name.to_string(),
            from: None,
            to: None,
            src: None,
            dst: None,
            src6: None,
            dst6: None,
            protocol: None,
            src_ports: None,
            dst_ports: None,
            icmp_type: None,
            action,
        }
    }

    /// The reference semantics, written field by field with no index. The compiled
    /// [`RuleSet`] must agree with a first-match scan over this; it is public so that tools
    /// and tests can explain a decision without trusting the index.
    pub fn matches(&self, from: ZoneId, to: ZoneId, key: &FlowKey, icmp_type: Option<u8>) -> bool {
        fn in_prefix(addr: Ipv4Addr, prefix: Option<(Ipv4Addr, u8)>) -> bool {
            let Some((net, len)) = prefix else {
                return true;
            };
            // A shift by 32 does not exist for u32; checked_shr turns /0 into "compare nothing".
            let shift = 32u32.saturating_sub(u32::from(len));
            u32::from(addr).checked_shr(shift).unwrap_or(0)
                == u32::from(net).checked_shr(shift).unwrap_or(0)
        }
        fn in_ports(port: u16, range: &Option<RangeInclusive<u16>>) -> bool {
            match range {
                None => true,
                Some(range) => range.contains(&port),
            }
        }
        self.src6.is_none()
            && self.dst6.is_none()
            && any_or_eq(self.from, from)
            && any_or_eq(self.to, to)
            && in_prefix(key.src, self.src)
            && in_prefix(key.dst, self.dst)
            && any_or_eq(self.protocol, key.protocol)
            && in_ports(key.src_port, &self.src_ports)
            && in_ports(key.dst_port, &self.dst_ports)
            && icmp_type_matches(self.icmp_type, icmp_type)
    }
}

impl Rule {
    /// The reference semantics for IPv6 flows: a rule with an IPv4 prefix or an ICMP type
    /// matches none; otherwise as [`Rule::matches`] over the IPv6 prefixes.
    pub fn matches6(&self, from: ZoneId, to: ZoneId, key: &FlowKey6) -> bool {
        fn in_ports(port: u16, range: &Option<RangeInclusive<u16>>) -> bool {
            range.as_ref().is_none_or(|range| range.contains(&port))
        }
        fn in_prefix6(addr: Ipv6Addr, prefix: Option<(Ipv6Addr, u8)>) -> bool {
            prefix.is_none_or(|(net, len)| {
                let shift = 128u32.saturating_sub(u32::from(len));
                u128::from(addr).checked_shr(shift).unwrap_or(0)
                    == u128::from(net).checked_shr(shift).unwrap_or(0)
            })
        }
        self.src.is_none()
            && self.dst.is_none()
            && self.icmp_type.is_none()
            && in_prefix6(key.src, self.src6)
            && in_prefix6(key.dst, self.dst6)
            && any_or_eq(self.from, from)
            && any_or_eq(self.to, to)
            && any_or_eq(self.protocol, key.protocol)
            && in_ports(key.src_port, &self.src_ports)
            && in_ports(key.dst_port, &self.dst_ports)
    }
}

/// A rule's ICMP type needs the flow to have that type; a flow without one (not ICMP, or
/// unknown) matches only rules that do not ask.
fn icmp_type_matches(wanted: Option<u8>, actual: Option<u8>) -> bool {
    match wanted {
        None => true,
        Some(_) => wanted == actual,
    }
}

/// Default actions for flows no rule matches: one per (from, to) zone pair, and a fallback
/// for pairs not listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    fallback: Action,
    pairs: HashMap<(ZoneId, ZoneId), Action>,
}

impl Policy {
    pub fn new(fallback: Action) -> Policy {
        Policy {
            fallback,
            pairs: HashMap::new(),
        }
    }

    /// Setting a pair twice keeps the later action, as a configuration overlay would expect.
    #[must_use]
    pub fn set(mut self, from: ZoneId, to: ZoneId, action: Action) -> Policy {
        self.pairs.insert((from, to), action);
        self
    }

    pub fn fallback(&self) -> Action {
        self.fallback
    }

    pub fn default_for(&self, from: ZoneId, to: ZoneId) -> Action {
        self.pairs
            .get(&(from, to))
            .copied()
            .unwrap_or(self.fallback)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Source,
    Destination,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Source => "source",
            Self::Destination => "destination",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleProblem {
    BadPrefixLength {
        endpoint: Endpoint,
        len: u8,
    },
    /// Rejected rather than masked: a prefix with host bits is almost always a typo for a
    /// different length, and silently filtering the wrong range is worse than refusing.
    HostBitsSet {
        endpoint: Endpoint,
    },
    /// Only TCP and UDP have ports; on any other protocol a port match could never be true
    /// (or, for ICMP, would match the query identifier), so it is certainly a mistake.
    PortsWithoutTcpOrUdp,
    IcmpTypeWithoutIcmp,
    /// A range whose start is above its end matches nothing, which is never what was meant.
    ReversedPortRange {
        endpoint: Endpoint,
    },
    /// An IPv4 prefix and an IPv6 one: no flow has both.
    MixedFamilies,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirewallError {
    InvalidRule {
        index: usize,
        name: String,
        problem: RuleProblem,
    },
    /// Rule indices are stored as `u32` to halve the index's memory.
    TooManyRules { count: usize },
}

impl fmt::Display for FirewallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRule {
                index,
                name,
                problem,
            } => {
                write!(f, "firewall rule {index} ({name:?}): ")?;
                match problem {
                    RuleProblem::BadPrefixLength { endpoint, len } => {
                        write!(
                            f,
                            "{endpoint} prefix length {len} is too long for its family"
                        )
                    }
                    RuleProblem::HostBitsSet { endpoint } => {
                        write!(f, "{endpoint} prefix has host bits set")
                    }
                    RuleProblem::PortsWithoutTcpOrUdp => {
                        write!(f, "ports need protocol TCP (6) or UDP (17)")
                    }
                    RuleProblem::IcmpTypeWithoutIcmp => {
                        write!(f, "an ICMP type needs protocol ICMP (1)")
                    }
                    RuleProblem::ReversedPortRange { endpoint } => {
                        write!(f, "{endpoint} port range is reversed")
                    }
                    RuleProblem::MixedFamilies => {
                        write!(f, "an IPv4 and an IPv6 prefix: no flow has both")
                    }
                }
            }
            Self::TooManyRules { count } => {
                write!(
                    f,
                    "{count} firewall rules; at most {} are supported",
                    u32::MAX
                )
            }
        }
    }
}

impl std::error::Error for FirewallError {}

/// A rule reduced to masks and bounds, so that checking a candidate is a few integer
/// comparisons with no `Option<RangeInclusive>` unpacking.
#[derive(Clone, Copy, Debug)]
struct Matcher {
    from: Option<ZoneId>,
    to: Option<ZoneId>,
    src_net: u32,
    src_mask: u32,
    dst_net: u32,
    dst_mask: u32,
    protocol: Option<u8>,
    src_ports: (u16, u16),
    dst_ports: (u16, u16),
    icmp_type: Option<u8>,
    /// The rule names IPv4 prefixes, so no IPv6 flow matches it.
    ipv4_only: bool,
    /// The rule names IPv6 prefixes (below), so no IPv4 flow matches it.
    ipv6_only: bool,
    src6_net: u128,
    src6_mask: u128,
    dst6_net: u128,
    dst6_mask: u128,
    action: Action,
}

impl Matcher {
    fn new(index: usize, rule: &Rule) -> Result<Matcher, FirewallError> {
        let invalid = |problem| FirewallError::InvalidRule {
            index,
            name: rule.name.clone(),
            problem,
        };
        let prefix = |endpoint, prefix: Option<(Ipv4Addr, u8)>| match prefix {
            None => Ok((0, 0)),
            Some((_, len)) if len > 32 => {
                Err(invalid(RuleProblem::BadPrefixLength { endpoint, len }))
            }
            Some((addr, len)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                let net = u32::from(addr);
                if net & !mask != 0 {
                    Err(invalid(RuleProblem::HostBitsSet { endpoint }))
                } else {
                    Ok((net, mask))
                }
            }
        };
        let ports = |endpoint, range: &Option<RangeInclusive<u16>>| match range {
            None => Ok((0, u16::MAX)),
            Some(range) if range.is_empty() => {
                Err(invalid(RuleProblem::ReversedPortRange { endpoint }))
            }
            Some(range) => Ok((*range.start(), *range.end())),
        };
        let prefix6 = |endpoint, prefix: Option<(Ipv6Addr, u8)>| match prefix {
            None => Ok((0, 0)),
            Some((_, len)) if len > 128 => {
                Err(invalid(RuleProblem::BadPrefixLength { endpoint, len }))
            }
            Some((addr, len)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                let net = u128::from(addr);
                if net & !mask != 0 {
                    Err(invalid(RuleProblem::HostBitsSet { endpoint }))
                } else {
                    Ok((net, mask))
                }
            }
        };
        let ipv4_only = rule.src.is_some() || rule.dst.is_some();
        let ipv6_only = rule.src6.is_some() || rule.dst6.is_some();
        if ipv4_only && ipv6_only {
            return Err(invalid(RuleProblem::MixedFamilies));
        }
        let (src_net, src_mask) = prefix(Endpoint::Source, rule.src)?;
        let (dst_net, dst_mask) = prefix(Endpoint::Destination, rule.dst)?;
        let (src6_net, src6_mask) = prefix6(Endpoint::Source, rule.src6)?;
        let (dst6_net, dst6_mask) = prefix6(Endpoint::Destination, rule.dst6)?;
        let src_ports = ports(Endpoint::Source, &rule.src_ports)?;
        let dst_ports = ports(Endpoint::Destination, &rule.dst_ports)?;
        let has_ports = rule.src_ports.is_some() || rule.dst_ports.is_some();
        if has_ports && !matches!(rule.protocol, Some(protocol::TCP | protocol::UDP)) {
            return Err(invalid(RuleProblem::PortsWithoutTcpOrUdp));
        }
        if rule.icmp_type.is_some() && rule.protocol != Some(protocol::ICMP) {
            return Err(invalid(RuleProblem::IcmpTypeWithoutIcmp));
        }
        Ok(Matcher {
            from: rule.from,
            to: rule.to,
            src_net,
            src_mask,
            dst_net,
            dst_mask,
            protocol: rule.protocol,
            src_ports,
            dst_ports,
            icmp_type: rule.icmp_type,
            ipv4_only,
            ipv6_only,
            src6_net,
            src6_mask,
            dst6_net,
            dst6_mask,
            action: rule.action,
        })
    }

    /// Every field is checked, zones included, even those the index already guarantees: it
    /// costs a few comparisons and means an indexing mistake can only cost speed, never
    /// return a rule that does not match.
    #[inline]
    fn matches(&self, from: ZoneId, to: ZoneId, key: &FlowKey, icmp_type: Option<u8>) -> bool {
        !self.ipv6_only
            && any_or_eq(self.from, from)
            && any_or_eq(self.to, to)
            && u32::from(key.src) & self.src_mask == self.src_net
            && u32::from(key.dst) & self.dst_mask == self.dst_net
            && any_or_eq(self.protocol, key.protocol)
            && (self.src_ports.0..=self.src_ports.1).contains(&key.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&key.dst_port)
            && icmp_type_matches(self.icmp_type, icmp_type)
    }

    /// [`matches`](Self::matches) for an IPv6 flow: a rule without prefixes (zones,
    /// protocol, ports) matches both families, one with IPv4 prefixes only IPv4 flows.
    #[inline]
    fn matches6(&self, from: ZoneId, to: ZoneId, key: &FlowKey6) -> bool {
        !self.ipv4_only
            && any_or_eq(self.from, from)
            && any_or_eq(self.to, to)
            && u128::from(key.src) & self.src6_mask == self.src6_net
            && u128::from(key.dst) & self.dst6_mask == self.dst6_net
            && any_or_eq(self.protocol, key.protocol)
            && (self.src_ports.0..=self.src_ports.1).contains(&key.src_port)
            && (self.dst_ports.0..=self.dst_ports.1).contains(&key.dst_port)
            // ICMP types are ICMPv4's: a rule naming one matches no IPv6 flow.
            && self.icmp_type.is_none()
    }
}

/// One protocol's rules within a zone group.
#[derive(Debug, Default)]
struct Bucket {
    /// Sorted cut points of the indexed key space; `starts[0] == 0` when non-empty, and
    /// interval `i` is `starts[i] ..= starts[i + 1] - 1` (the last one runs to 65535).
    starts: Vec<u16>,
    /// `members[offsets[i]..offsets[i + 1]]` are the ascending rule indices covering interval
    /// `i`. Flattened so that a bucket is three allocations, not one per interval.
    offsets: Vec<usize>,
    members: Vec<u32>,
    /// Rules with no indexed field, ascending.
    unindexed: Vec<u32>,
}

impl Bucket {
    fn build(indexed: &[(u32, u16, u16)], unindexed: Vec<u32>) -> Bucket {
        if indexed.is_empty() {
            return Bucket {
                unindexed,
                ..Bucket::default()
            };
        }
        let mut starts = vec![0u16];
        for &(_, low, high) in indexed {
            starts.push(low);
            if let Some(next) = high.checked_add(1) {
                starts.push(next);
            }
        }
        starts.sort_unstable();
        starts.dedup();
        let mut lists = vec![Vec::new(); starts.len()];
        // Rules arrive in index order, so every interval's list comes out sorted.
        for &(index, low, high) in indexed {
            let first = starts.partition_point(|&s| s < low);
            let end = starts.partition_point(|&s| s <= high);
            for list in lists.iter_mut().take(end).skip(first) {
                list.push(index);
            }
        }
        let mut offsets = Vec::with_capacity(lists.len() + 1);
        let mut members = Vec::with_capacity(lists.iter().map(Vec::len).sum());
        offsets.push(0);
        for list in lists {
            members.extend(list);
            offsets.push(members.len());
        }
        Bucket {
            starts,
            offsets,
            members,
            unindexed,
        }
    }

    #[inline]
    fn indexed(&self, key: u16) -> &[u32] {
        let end = self.starts.partition_point(|&s| s <= key);
        let Some(interval) = end.checked_sub(1) else {
            return &[];
        };
        match (self.offsets.get(interval), self.offsets.get(end)) {
            (Some(&first), Some(&last)) => self.members.get(first..last).unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// The rules sharing one (from, to) zone spec.
#[derive(Debug)]
struct Group {
    any_protocol: Vec<u32>,
    /// Sorted by protocol. A handful of entries, so binary search beats a 256-entry table in
    /// both memory and cache footprint.
    by_protocol: Vec<(u8, Bucket)>,
}

#[derive(Default)]
struct GroupBuilder {
    any_protocol: Vec<u32>,
    by_protocol: BTreeMap<u8, BucketBuilder>,
}

#[derive(Default)]
struct BucketBuilder {
    /// (rule index, low, high) of the indexed key range.
    indexed: Vec<(u32, u16, u16)>,
    unindexed: Vec<u32>,
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    group: Option<usize>,
    default: Action,
}

/// Per group: no-protocol rules, unindexed rules, the key's interval.
const LISTS_PER_GROUP: usize = 3;
/// (*, *), (from, *), (*, to), (from, to).
const MAX_GROUPS: usize = 4;
const MAX_LISTS: usize = LISTS_PER_GROUP * MAX_GROUPS;

/// The sorted candidate lists of one evaluation, on the stack.
#[derive(Default)]
struct CandidateLists<'a> {
    lists: [&'a [u32]; MAX_LISTS],
    filled: usize,
}

impl<'a> CandidateLists<'a> {
    #[inline]
    fn add(&mut self, list: &'a [u32]) {
        if list.is_empty() {
            return;
        }
        if let Some(slot) = self.lists.get_mut(self.filled) {
            *slot = list;
            self.filled += 1;
        }
    }

    /// Removes and returns the smallest head. A linear scan over at most 12 heads is cheaper
    /// than maintaining a heap for so few lists.
    #[inline]
    fn pop_smallest(&mut self) -> Option<u32> {
        let mut smallest: Option<(usize, u32)> = None;
        for (position, list) in self.lists.iter().take(self.filled).enumerate() {
            if let Some(&head) = list.first() {
                let better = match smallest {
                    None => true,
                    Some((_, best)) => head < best,
                };
                if better {
                    smallest = Some((position, head));
                }
            }
        }
        let (position, index) = smallest?;
        if let Some(list) = self.lists.get_mut(position) {
            *list = list.get(1..).unwrap_or(&[]);
        }
        Some(index)
    }
}

/// What [`RuleSet::evaluate_traced`] found, with how much work it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trace {
    pub action: Action,
    pub rule: Option<usize>,
    /// Candidate rules whose fields were checked: the index's effectiveness for this flow.
    pub candidates_checked: usize,
}

/// A compiled, immutable rule set. See the module documentation for its structure.
#[derive(Debug)]
pub struct RuleSet {
    rules: Vec<Rule>,
    matchers: Vec<Matcher>,
    policy: Policy,
    /// Class of each zone; 0 for zones no rule or policy entry names.
    zone_class: [u16; 256],
    /// Number of classes including 0: the side of the square `cells` table.
    classes: usize,
    cells: Vec<Cell>,
    groups: Vec<Group>,
    /// Each rule's hit counter, in rule order; empty: not counted (`attach_hits`).
    hits: Vec<Arc<RuleHits>>,
    /// Each rule's name if its decisions are logged (`log = true`), in rule order; empty:
    /// none is (`attach_logged`).
    logged: Vec<Option<Arc<str>>>,
    /// The zone pairs whose default decisions are counted (`attach_pair_hits`), and each
    /// cell's counter (a pair's, by its zones' classes).
    pairs: Vec<PairHits>,
    pair_cells: Vec<Option<Arc<RuleHits>>>,
    /// Each cell's name to log its zone pair's default decisions under (`policy wan->lan`),
    /// by its zones' classes; empty: none is (`attach_pair_logged`).
    pair_logged: Vec<Option<Arc<str>>>,
    /// Each port forward's counter of the first packets it decided (no rule matched: a
    /// forward is open), in the router config's forward order; empty: not counted
    /// (`attach_forward_hits`).
    forward_hits: Vec<Arc<RuleHits>>,
    /// Each port forward's name if its decisions are logged, in forward order; empty: none
    /// is (`attach_forward_logged`).
    forward_logged: Vec<Option<Arc<str>>>,
}

/// A zone pair (from, to) and the name its default's decisions are logged under, if they are
/// (`RuleSet::attach_pair_logged`).
pub type LoggedPair = ((ZoneId, ZoneId), Option<Arc<str>>);

/// A zone pair's counter of the first packets its default decided (no rule matched),
/// labelled with the zones' names.
#[derive(Clone, Debug)]
pub struct PairHits {
    pub from: (ZoneId, Arc<str>),
    pub to: (ZoneId, Arc<str>),
    pub hits: Arc<RuleHits>,
}

impl RuleSet {
    pub fn compile(rules: Vec<Rule>, policy: Policy) -> Result<RuleSet, FirewallError> {
        if u32::try_from(rules.len()).is_err() {
            return Err(FirewallError::TooManyRules { count: rules.len() });
        }
        let matchers = rules
            .iter()
            .enumerate()
            .map(|(index, rule)| Matcher::new(index, rule))
            .collect::<Result<Vec<_>, _>>()?;

        // Sorted so that the layout, and thus any debugging output, does not depend on
        // HashMap iteration order.
        let named: BTreeSet<ZoneId> = rules
            .iter()
            .flat_map(|rule| [rule.from, rule.to])
            .flatten()
            .chain(policy.pairs.keys().flat_map(|&(from, to)| [from, to]))
            .collect();
        let mut zone_class = [0u16; 256];
        // Class c >= 1 is zones[c - 1].
        let zones: Vec<ZoneId> = named.into_iter().collect();
        for (class, zone) in (1u16..).zip(&zones) {
            zone_class[usize::from(zone.0)] = class;
        }
        let classes = zones.len() + 1;

        let mut cells = vec![
            Cell {
                group: None,
                default: policy.fallback,
            };
            classes * classes
        ];
        for (from_index, &from) in zones.iter().enumerate() {
            for (to_index, &to) in zones.iter().enumerate() {
                if let Some(cell) = cells.get_mut((from_index + 1) * classes + to_index + 1) {
                    cell.default = policy.default_for(from, to);
                }
            }
        }

        let class_of =
            |zone: Option<ZoneId>| zone.map_or(0, |z| usize::from(zone_class[usize::from(z.0)]));
        let mut builders: BTreeMap<usize, GroupBuilder> = BTreeMap::new();
        for (index, (rule, matcher)) in (0u32..).zip(rules.iter().zip(&matchers)) {
            let cell = class_of(rule.from) * classes + class_of(rule.to);
            let group = builders.entry(cell).or_default();
            let Some(proto) = rule.protocol else {
                group.any_protocol.push(index);
                continue;
            };
            let bucket = group.by_protocol.entry(proto).or_default();
            let key_range = if proto == protocol::ICMP {
                rule.icmp_type.map(|t| (u16::from(t), u16::from(t)))
            } else {
                rule.dst_ports.as_ref().map(|_| matcher.dst_ports)
            };
            match key_range {
                // Covering every port narrows nothing; indexing it would only copy it into
                // every interval.
                Some((low, high)) if !(low == 0 && high == u16::MAX) => {
                    bucket.indexed.push((index, low, high));
                }
                _ => bucket.unindexed.push(index),
            }
        }

        let mut groups = Vec::with_capacity(builders.len());
        for (cell, builder) in builders {
            let by_protocol = builder
                .by_protocol
                .into_iter()
                .map(|(proto, bucket)| (proto, Bucket::build(&bucket.indexed, bucket.unindexed)))
                .collect();
            if let Some(cell) = cells.get_mut(cell) {
                cell.group = Some(groups.len());
            }
            groups.push(Group {
                any_protocol: builder.any_protocol,
                by_protocol,
            });
        }

        Ok(RuleSet {
            rules,
            matchers,
            policy,
            zone_class,
            classes,
            cells,
            groups,
            hits: Vec::new(),
            logged: Vec::new(),
            pairs: Vec::new(),
            pair_cells: Vec::new(),
            pair_logged: Vec::new(),
            forward_hits: Vec::new(),
            forward_logged: Vec::new(),
        })
    }

    /// Gives each rule its hit counter, in rule order (one per rule, or nothing changes).
    pub fn attach_hits(&mut self, hits: Vec<Arc<RuleHits>>) {
        if hits.len() == self.rules.len() {
            self.hits = hits;
        }
    }

    /// Rule `rule` decided a new flow on `worker` at Unix second `unix_seconds`.
    #[inline]
    pub fn count_hit(&self, rule: Option<usize>, worker: u16, unix_seconds: i64) {
        if let Some(hits) = rule.and_then(|rule| self.hits.get(rule)) {
            hits.add(worker, unix_seconds);
        }
    }

    /// Marks the rules whose decisions are logged: per rule, in rule order, its name if so
    /// (one per rule, or nothing changes).
    pub fn attach_logged(&mut self, logged: Vec<Option<Arc<str>>>) {
        if logged.len() == self.rules.len() {
            self.logged = logged;
        }
    }

    /// The name to log rule `rule`'s decisions under, if they are logged.
    #[inline]
    pub fn logged(&self, rule: Option<usize>) -> Option<&Arc<str>> {
        rule.and_then(|rule| self.logged.get(rule))?.as_ref()
    }

    /// Gives the zone pairs their default-decision counters. Zones no rule or policy names
    /// share a class, and so a counter: the gateway's built-in defaults name every zone.
    pub fn attach_pair_hits(&mut self, pairs: Vec<PairHits>) {
        let mut cells = vec![None; self.classes * self.classes];
        for pair in &pairs {
            if let Some(cell) = cells.get_mut(self.cell_of(pair.from.0, pair.to.0)) {
                *cell = Some(pair.hits.clone());
            }
        }
        self.pair_cells = cells;
        self.pairs = pairs;
    }

    /// A first packet decided on `worker` at Unix second `unix_seconds`: by rule `rule`, or
    /// with no rule matching, by the zone pair's default where `by_pair` (not where a
    /// forward or a pinhole decided).
    #[inline]
    pub fn count_decision(
        &self,
        rule: Option<usize>,
        (from, to): (ZoneId, ZoneId),
        by_pair: bool,
        (worker, unix_seconds): (u16, i64),
    ) {
        match rule {
            Some(_) => self.count_hit(rule, worker, unix_seconds),
            None if by_pair => self.count_default(from, to, worker, unix_seconds),
            None => {}
        }
    }

    /// The zone pair `from -> to`'s default decided a new flow on `worker` (no rule matched)
    /// at Unix second `unix_seconds`.
    #[inline]
    pub fn count_default(&self, from: ZoneId, to: ZoneId, worker: u16, unix_seconds: i64) {
        if let Some(Some(hits)) = self.pair_cells.get(self.cell_of(from, to)) {
            hits.add(worker, unix_seconds);
        }
    }

    /// The counted zone pairs, as attached.
    pub fn pair_hits(&self) -> &[PairHits] {
        &self.pairs
    }

    /// The name zone `zone` has in the attached pairs' labels (`local` for the gateway),
    /// for what names zones off the workers (the firewall log's thread); None if no pair is
    /// attached. A scan of the pairs: not for a worker.
    pub fn zone_name(&self, zone: ZoneId) -> Option<&Arc<str>> {
        self.pairs.iter().find_map(|pair| {
            [&pair.from, &pair.to]
                .into_iter()
                .find(|(id, _)| *id == zone)
                .map(|(_, name)| name)
        })
    }

    /// Marks the zone pairs whose default decisions are logged (`log = true` on a
    /// `[firewall.policy]` entry), each with the name to log them under; a later entry for a
    /// pair replaces an earlier one, as it does in the policy. A pair whose zones the rules
    /// and policy do not name shares its cell with other pairs, so it is left unlogged rather
    /// than log theirs (the policy names the zones of each of its entries).
    pub fn attach_pair_logged(&mut self, logged: Vec<LoggedPair>) {
        let named = |zone: ZoneId| self.zone_class[usize::from(zone.0)] != 0;
        let mut cells = vec![None; self.classes * self.classes];
        let mut any = false;
        for ((from, to), name) in logged {
            if !(named(from) && named(to)) {
                continue;
            }
            if let Some(cell) = cells.get_mut(self.cell_of(from, to)) {
                any |= name.is_some();
                *cell = name;
            }
        }
        self.pair_logged = if any { cells } else { Vec::new() };
    }

    /// The name to log the zone pair `from -> to`'s default decisions under, if they are
    /// logged.
    #[inline]
    pub fn pair_logged(&self, (from, to): (ZoneId, ZoneId)) -> Option<&Arc<str>> {
        self.pair_logged.get(self.cell_of(from, to))?.as_ref()
    }

    #[inline]
    fn cell_of(&self, from: ZoneId, to: ZoneId) -> usize {
        let class = |zone: ZoneId| usize::from(self.zone_class[usize::from(zone.0)]);
        class(from) * self.classes + class(to)
    }

    /// The rules' hit counters, in rule order (empty if none are attached).
    pub fn hits(&self) -> &[Arc<RuleHits>] {
        &self.hits
    }

    /// Gives each port forward its counter, in the router config's forward order.
    pub fn attach_forward_hits(&mut self, hits: Vec<Arc<RuleHits>>) {
        self.forward_hits = hits;
    }

    /// Port forward `forward` decided a new flow on `worker` at Unix second `unix_seconds`:
    /// no rule matched it.
    #[inline]
    pub fn count_forward(&self, forward: usize, (worker, unix_seconds): (u16, i64)) {
        if let Some(hits) = self.forward_hits.get(forward) {
            hits.add(worker, unix_seconds);
        }
    }

    /// Marks the port forwards whose decisions are logged: per forward, in the router
    /// config's forward order, its name if so.
    pub fn attach_forward_logged(&mut self, logged: Vec<Option<Arc<str>>>) {
        self.forward_logged = logged;
    }

    /// The name to log port forward `forward`'s decisions under, if they are logged.
    #[inline]
    pub fn forward_logged(&self, forward: usize) -> Option<&Arc<str>> {
        self.forward_logged.get(forward)?.as_ref()
    }

    /// The port forwards' counters, in forward order (empty if none are attached).
    pub fn forward_hits(&self) -> &[Arc<RuleHits>] {
        &self.forward_hits
    }

    /// First matching rule in order wins; otherwise the zone pair's default. Returns the
    /// action and the index of the matching rule (`None` for the default), so metrics can
    /// count per rule. `icmp_type` is the type of an ICMP flow's first packet; the flow key
    /// cannot carry it because its ports hold the query identifier.
    #[inline]
    pub fn evaluate(
        &self,
        from: ZoneId,
        to: ZoneId,
        key: &FlowKey,
        icmp_type: Option<u8>,
    ) -> (Action, Option<usize>) {
        let trace = self.evaluate_traced(from, to, key, icmp_type);
        (trace.action, trace.rule)
    }

    /// [`RuleSet::evaluate`], also reporting how many candidate rules were checked. The
    /// count is a local integer, so this is as cheap as `evaluate` and safe to use live.
    pub fn evaluate_traced(
        &self,
        from: ZoneId,
        to: ZoneId,
        key: &FlowKey,
        icmp_type: Option<u8>,
    ) -> Trace {
        // ICMP rules are indexed by type; everything else with an index is TCP or UDP by
        // destination port, and other protocols' buckets have no index to consult.
        let index_key = if key.protocol == protocol::ICMP {
            icmp_type.map(u16::from)
        } else {
            Some(key.dst_port)
        };
        self.first_match(from, to, key.protocol, index_key, |matcher| {
            matcher.matches(from, to, key, icmp_type)
        })
    }

    /// [`RuleSet::evaluate`] for a new IPv6 flow: the rules without IPv4 prefixes apply
    /// (see [`Rule::matches6`]), then the zone pair's default.
    pub fn evaluate6(&self, from: ZoneId, to: ZoneId, key: &FlowKey6) -> (Action, Option<usize>) {
        let trace = self.first_match(from, to, key.protocol, Some(key.dst_port), |matcher| {
            matcher.matches6(from, to, key)
        });
        (trace.action, trace.rule)
    }

    /// The first rule for the zone pair, `protocol` and `index_key` (a TCP or UDP flow's
    /// destination port, an ICMP flow's type) that `matches`, or the pair's default.
    #[inline]
    fn first_match(
        &self,
        from: ZoneId,
        to: ZoneId,
        protocol: u8,
        index_key: Option<u16>,
        matches: impl Fn(&Matcher) -> bool,
    ) -> Trace {
        let from_class = usize::from(self.zone_class[usize::from(from.0)]);
        let to_class = usize::from(self.zone_class[usize::from(to.0)]);
        let default = self
            .cells
            .get(from_class * self.classes + to_class)
            .map_or(self.policy.fallback, |cell| cell.default);
        // A zone named by no rule has class 0 and shares the wildcard groups; visiting them
        // once keeps each rule in at most one list.
        let from_specs = [0, from_class];
        let to_specs = [0, to_class];
        let from_count = if from_class == 0 { 1 } else { 2 };
        let to_count = if to_class == 0 { 1 } else { 2 };
        let group_of = |from_spec: usize, to_spec: usize| {
            self.cells
                .get(from_spec * self.classes + to_spec)
                .and_then(|cell| cell.group)
        };
        // No rule for this pair of zones (every pair, in a config of policies only): the
        // default, without setting up the merge (about 150 instructions a new flow).
        let any_group = from_specs[..from_count].iter().any(|&from| {
            to_specs[..to_count]
                .iter()
                .any(|&to| group_of(from, to).is_some())
        });
        if !any_group {
            return Trace {
                action: default,
                rule: None,
                candidates_checked: 0,
            };
        }
        let mut lists = CandidateLists::default();
        for &from_spec in from_specs.iter().take(from_count) {
            for &to_spec in to_specs.iter().take(to_count) {
                let Some(group) =
                    group_of(from_spec, to_spec).and_then(|group| self.groups.get(group))
                else {
                    continue;
                };
                lists.add(&group.any_protocol);
                if let Ok(position) = group
                    .by_protocol
                    .binary_search_by_key(&protocol, |&(proto, _)| proto)
                {
                    if let Some((_, bucket)) = group.by_protocol.get(position) {
                        lists.add(&bucket.unindexed);
                        if let Some(index_key) = index_key {
                            lists.add(bucket.indexed(index_key));
                        }
                    }
                }
            }
        }

        // Merge by taking the smallest head each time: every list is ascending and no rule
        // is in two lists, so candidates are visited in rule order and the first match is
        // the lowest-indexed one.
        let mut candidates_checked = 0;
        while let Some(index) = lists.pop_smallest() {
            candidates_checked += 1;
            let index = index as usize;
            if let Some(matcher) = self.matchers.get(index) {
                if matches(matcher) {
                    return Trace {
                        action: matcher.action,
                        rule: Some(index),
                        candidates_checked,
                    };
                }
            }
        }
        Trace {
            action: default,
            rule: None,
            candidates_checked,
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule an index from [`RuleSet::evaluate`] refers to. Panics if `index` is out of
    /// range, like slice indexing: indices from `evaluate` are always valid.
    pub fn rule(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv6Addr;

    const ICMP: u8 = protocol::ICMP;
    const TCP: u8 = protocol::TCP;
    const UDP: u8 = protocol::UDP;
    const GRE: u8 = 47;

    const LAN: ZoneId = ZoneId(1);
    const WAN: ZoneId = ZoneId(2);
    const DMZ: ZoneId = ZoneId(3);
    /// Named by no rule and no policy entry.
    const UNNAMED: ZoneId = ZoneId(9);

    fn rule(name: &str, action: Action) -> Rule {
        Rule::matching_all(name, action)
    }

    fn key(protocol: u8, src: [u8; 4], src_port: u16, dst: [u8; 4], dst_port: u16) -> FlowKey {
        FlowKey {
            src: Ipv4Addr::from(src),
            dst: Ipv4Addr::from(dst),
            src_port,
            dst_port,
            protocol,
        }
    }

    fn tcp(dst_port: u16) -> FlowKey {
        key(TCP, [10, 0, 0, 1], 40000, [192, 0, 2, 1], dst_port)
    }

    fn net(a: [u8; 4], len: u8) -> Option<(Ipv4Addr, u8)> {
        Some((Ipv4Addr::from(a), len))
    }

    fn naive(
        rules: &[Rule],
        policy: &Policy,
        from: ZoneId,
        to: ZoneId,
        key: &FlowKey,
        icmp_type: Option<u8>,
    ) -> (Action, Option<usize>) {
        match rules
            .iter()
            .position(|r| r.matches(from, to, key, icmp_type))
        {
            Some(i) => (rules[i].action, Some(i)),
            None => (policy.default_for(from, to), None),
        }
    }

    /// The same ports and protocol between two IPv6 addresses.
    /// The IPv6 flow of an IPv4 one: its addresses in 2001:db8::/96 (see [`as_prefix6`]).
    fn as_ipv6(key: &FlowKey) -> FlowKey6 {
        FlowKey6 {
            src: embedded(key.src),
            dst: embedded(key.dst),
            src_port: key.src_port,
            dst_port: key.dst_port,
            protocol: key.protocol,
        }
    }

    fn embedded(addr: Ipv4Addr) -> Ipv6Addr {
        Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(u32::from(addr)))
    }

    /// An IPv4 prefix as the IPv6 prefix holding [`embedded`] addresses of it.
    fn as_prefix6((addr, len): (Ipv4Addr, u8)) -> (Ipv6Addr, u8) {
        (embedded(addr), len + 96)
    }

    fn naive6(
        rules: &[Rule],
        policy: &Policy,
        from: ZoneId,
        to: ZoneId,
        key: &FlowKey6,
    ) -> (Action, Option<usize>) {
        match rules.iter().position(|r| r.matches6(from, to, key)) {
            Some(i) => (rules[i].action, Some(i)),
            None => (policy.default_for(from, to), None),
        }
    }

    struct Probe {
        from: ZoneId,
        to: ZoneId,
        key: FlowKey,
        icmp_type: Option<u8>,
    }

    fn probe(from: ZoneId, to: ZoneId, key: FlowKey) -> Probe {
        Probe {
            from,
            to,
            key,
            icmp_type: None,
        }
    }

    /// One rule accepting, a drop default: each probe must match or miss as stated, in the
    /// compiled set and in the reference semantics alike.
    fn check_field(rule: Rule, matching: &[Probe], missing: &[Probe]) {
        let set = RuleSet::compile(vec![rule.clone()], Policy::new(Action::Drop)).unwrap();
        for p in matching {
            assert!(
                rule.matches(p.from, p.to, &p.key, p.icmp_type),
                "{:?}",
                p.key
            );
            assert_eq!(
                set.evaluate(p.from, p.to, &p.key, p.icmp_type),
                (rule.action, Some(0)),
                "{:?} {:?}->{:?} icmp {:?}",
                p.key,
                p.from,
                p.to,
                p.icmp_type
            );
        }
        for p in missing {
            assert!(
                !rule.matches(p.from, p.to, &p.key, p.icmp_type),
                "{:?}",
                p.key
            );
            assert_eq!(
                set.evaluate(p.from, p.to, &p.key, p.icmp_type),
                (Action::Drop, None),
                "{:?} {:?}->{:?} icmp {:?}",
                p.key,
                p.from,
                p.to,
                p.icmp_type
            );
        }
    }

    #[test]
    fn each_zone_pairs_default_counts_on_its_own_counter() {
        let (lan, wan) = (ZoneId(0), ZoneId(1));
        let policy = Policy::new(Action::Drop).set(lan, wan, Action::Accept).set(
            wan,
            ZoneId::LOCAL,
            Action::Drop,
        );
        let mut rules = RuleSet::compile(Vec::new(), policy).unwrap();
        let pair = |from: ZoneId, to: ZoneId| PairHits {
            from: (from, Arc::from("from")),
            to: (to, Arc::from("to")),
            hits: Arc::new(RuleHits::new(2)),
        };
        rules.attach_pair_hits(vec![
            pair(lan, wan),
            pair(wan, ZoneId::LOCAL),
            pair(wan, lan),
        ]);
        rules.count_default(lan, wan, 0, 1);
        rules.count_default(lan, wan, 1, 1);
        rules.count_default(wan, ZoneId::LOCAL, 1, 1);
        let totals: Vec<u64> = rules.pair_hits().iter().map(|p| p.hits.total()).collect();
        assert_eq!(totals, [2, 1, 0]);
        // Before any attachment, or for a pair not attached: nothing, and no panic.
        RuleSet::compile(Vec::new(), Policy::new(Action::Drop))
            .unwrap()
            .count_default(lan, wan, 0, 1);
        rules.count_default(ZoneId::LOCAL, lan, 0, 1);
        assert_eq!(
            rules
                .pair_hits()
                .iter()
                .map(|p| p.hits.total())
                .sum::<u64>(),
            3
        );
    }

    #[test]
    fn a_logged_pair_names_its_own_cell_only() {
        let policy = Policy::new(Action::Drop)
            .set(LAN, WAN, Action::Accept)
            .set(WAN, LAN, Action::Drop)
            .set(WAN, ZoneId::LOCAL, Action::Drop);
        let mut rules = RuleSet::compile(Vec::new(), policy).unwrap();
        assert_eq!(rules.pair_logged((WAN, LAN)), None, "none attached");
        let name: Arc<str> = Arc::from("policy wan->lan");
        rules.attach_pair_logged(vec![
            ((WAN, LAN), Some(name.clone())),
            ((LAN, WAN), None),
            // Zones nothing names share a cell with every such pair: never logged.
            ((UNNAMED, LAN), Some(Arc::from("policy unnamed->lan"))),
        ]);
        assert_eq!(rules.pair_logged((WAN, LAN)), Some(&name));
        assert_eq!(rules.pair_logged((LAN, WAN)), None);
        assert_eq!(rules.pair_logged((WAN, ZoneId::LOCAL)), None);
        assert_eq!(rules.pair_logged((UNNAMED, LAN)), None);
        assert_eq!(rules.pair_logged((DMZ, LAN)), None);
        // A later entry for the pair replaces the earlier one, as in the policy.
        rules.attach_pair_logged(vec![((WAN, LAN), Some(name)), ((WAN, LAN), None)]);
        assert_eq!(rules.pair_logged((WAN, LAN)), None);
    }

    #[test]
    fn a_zone_is_named_as_its_pairs_label_it() {
        let mut rules = RuleSet::compile(Vec::new(), Policy::new(Action::Drop)).unwrap();
        assert_eq!(rules.zone_name(LAN), None, "no pair attached");
        rules.attach_pair_hits(vec![PairHits {
            from: (ZoneId::LOCAL, Arc::from("local")),
            to: (LAN, Arc::from("lan")),
            hits: Arc::new(RuleHits::new(1)),
        }]);
        assert_eq!(rules.zone_name(LAN).map(|name| &**name), Some("lan"));
        assert_eq!(
            rules.zone_name(ZoneId::LOCAL).map(|name| &**name),
            Some("local")
        );
        assert_eq!(rules.zone_name(WAN), None);
    }

    #[test]
    fn from_zone_matches_only_that_zone() {
        let r = Rule {
            from: Some(LAN),
            ..rule("from-lan", Action::Accept)
        };
        check_field(
            r,
            &[probe(LAN, WAN, tcp(80)), probe(LAN, ZoneId::LOCAL, tcp(22))],
            &[
                probe(WAN, LAN, tcp(80)),
                probe(UNNAMED, WAN, tcp(80)),
                probe(ZoneId::LOCAL, LAN, tcp(80)),
            ],
        );
    }

    #[test]
    fn to_zone_matches_only_that_zone() {
        let r = Rule {
            to: Some(ZoneId::LOCAL),
            ..rule("to-gateway", Action::Accept)
        };
        check_field(
            r,
            &[
                probe(WAN, ZoneId::LOCAL, tcp(22)),
                probe(UNNAMED, ZoneId::LOCAL, tcp(22)),
            ],
            &[probe(WAN, LAN, tcp(22)), probe(ZoneId::LOCAL, WAN, tcp(22))],
        );
    }

    #[test]
    fn source_prefix_matches_inside_only() {
        let r = Rule {
            src: net([192, 168, 1, 0], 24),
            ..rule("src", Action::Accept)
        };
        let from = |a| probe(LAN, WAN, key(TCP, a, 1, [8, 8, 8, 8], 53));
        check_field(
            r,
            &[from([192, 168, 1, 0]), from([192, 168, 1, 255])],
            &[from([192, 168, 0, 255]), from([192, 168, 2, 0])],
        );
    }

    #[test]
    fn destination_prefix_matches_inside_only() {
        let r = Rule {
            dst: net([203, 0, 113, 64], 26),
            ..rule("dst", Action::Accept)
        };
        let to = |a| probe(LAN, WAN, key(UDP, [10, 0, 0, 1], 1, a, 53));
        check_field(
            r,
            &[to([203, 0, 113, 64]), to([203, 0, 113, 127])],
            &[to([203, 0, 113, 63]), to([203, 0, 113, 128])],
        );
    }

    #[test]
    fn protocol_matches_only_that_protocol() {
        let r = Rule {
            protocol: Some(GRE),
            ..rule("gre", Action::Accept)
        };
        let with = |p| probe(WAN, LAN, key(p, [1, 1, 1, 1], 0, [10, 0, 0, 1], 0));
        check_field(
            r,
            &[with(GRE)],
            &[with(TCP), with(UDP), with(ICMP), with(4)],
        );
    }

    #[test]
    fn source_ports_match_inclusive_range() {
        let r = Rule {
            protocol: Some(UDP),
            src_ports: Some(1000..=2000),
            ..rule("sport", Action::Accept)
        };
        let sport = |p| probe(LAN, WAN, key(UDP, [10, 0, 0, 1], p, [1, 1, 1, 1], 53));
        check_field(
            r,
            &[sport(1000), sport(1500), sport(2000)],
            &[
                sport(999),
                sport(2001),
                probe(LAN, WAN, key(TCP, [10, 0, 0, 1], 1500, [1, 1, 1, 1], 53)),
            ],
        );
    }

    #[test]
    fn destination_ports_match_inclusive_range() {
        let r = Rule {
            protocol: Some(TCP),
            dst_ports: Some(8000..=8080),
            ..rule("dport", Action::Reject)
        };
        let dport = |p| probe(WAN, LAN, tcp(p));
        check_field(
            r,
            &[dport(8000), dport(8042), dport(8080)],
            &[
                dport(7999),
                dport(8081),
                dport(0),
                dport(65535),
                probe(WAN, LAN, key(UDP, [10, 0, 0, 1], 1, [1, 1, 1, 1], 8000)),
            ],
        );
    }

    #[test]
    fn port_range_edges_of_the_port_space() {
        let r = Rule {
            protocol: Some(TCP),
            dst_ports: Some(65535..=65535),
            ..rule("top", Action::Accept)
        };
        check_field(
            r,
            &[probe(LAN, WAN, tcp(65535))],
            &[probe(LAN, WAN, tcp(65534))],
        );
        let r = Rule {
            protocol: Some(TCP),
            dst_ports: Some(0..=0),
            ..rule("bottom", Action::Accept)
        };
        check_field(r, &[probe(LAN, WAN, tcp(0))], &[probe(LAN, WAN, tcp(1))]);
        let r = Rule {
            protocol: Some(TCP),
            dst_ports: Some(0..=65535),
            ..rule("all", Action::Accept)
        };
        check_field(
            r,
            &[probe(LAN, WAN, tcp(0)), probe(LAN, WAN, tcp(65535))],
            &[probe(LAN, WAN, key(UDP, [1, 1, 1, 1], 1, [2, 2, 2, 2], 1))],
        );
    }

    #[test]
    fn icmp_type_matches_only_that_type() {
        let r = Rule {
            protocol: Some(ICMP),
            icmp_type: Some(8),
            ..rule("ping", Action::Accept)
        };
        // The ports of an ICMP key hold the query identifier; 8 here must not be mistaken
        // for the type.
        let echo = key(ICMP, [1, 1, 1, 1], 8, [10, 0, 0, 1], 8);
        let with = |t| Probe {
            from: WAN,
            to: ZoneId::LOCAL,
            key: echo,
            icmp_type: t,
        };
        check_field(
            r,
            &[with(Some(8))],
            &[
                with(Some(0)),
                with(Some(13)),
                with(None),
                Probe {
                    from: WAN,
                    to: ZoneId::LOCAL,
                    key: tcp(8),
                    icmp_type: Some(8),
                },
            ],
        );
    }

    #[test]
    fn icmp_rules_by_type_and_any_type_keep_their_order() {
        let rules = vec![
            Rule {
                from: Some(WAN),
                to: Some(ZoneId::LOCAL),
                protocol: Some(ICMP),
                icmp_type: Some(8),
                ..rule("wan-ping", Action::Accept)
            },
            Rule {
                from: Some(WAN),
                protocol: Some(ICMP),
                ..rule("wan-icmp", Action::Drop)
            },
            Rule {
                protocol: Some(ICMP),
                icmp_type: Some(13),
                ..rule("timestamp", Action::Reject)
            },
        ];
        let set = RuleSet::compile(rules, Policy::new(Action::Accept)).unwrap();
        let echo = key(ICMP, [1, 1, 1, 1], 7, [10, 0, 0, 1], 7);
        let eval = |from, to, t| set.evaluate(from, to, &echo, t);
        assert_eq!(eval(WAN, ZoneId::LOCAL, Some(8)), (Action::Accept, Some(0)));
        assert_eq!(eval(WAN, ZoneId::LOCAL, Some(13)), (Action::Drop, Some(1)));
        assert_eq!(eval(WAN, ZoneId::LOCAL, None), (Action::Drop, Some(1)));
        assert_eq!(eval(WAN, LAN, Some(8)), (Action::Drop, Some(1)));
        assert_eq!(
            eval(LAN, ZoneId::LOCAL, Some(13)),
            (Action::Reject, Some(2))
        );
        assert_eq!(eval(LAN, ZoneId::LOCAL, Some(8)), (Action::Accept, None));
    }

    #[test]
    fn action_is_the_rules_action() {
        for action in [Action::Accept, Action::Drop, Action::Reject] {
            let set =
                RuleSet::compile(vec![rule("any", action)], Policy::new(Action::Accept)).unwrap();
            assert_eq!(set.evaluate(LAN, WAN, &tcp(1), None), (action, Some(0)));
        }
    }

    #[test]
    fn zero_length_prefix_matches_every_address() {
        let r = Rule {
            src: net([0, 0, 0, 0], 0),
            dst: net([0, 0, 0, 0], 0),
            ..rule("everything", Action::Accept)
        };
        let between = |s, d| probe(LAN, WAN, key(TCP, s, 1, d, 1));
        check_field(
            r,
            &[
                between([0, 0, 0, 0], [255, 255, 255, 255]),
                between([255, 255, 255, 255], [0, 0, 0, 0]),
                between([10, 1, 2, 3], [128, 0, 0, 0]),
            ],
            &[],
        );
    }

    #[test]
    fn host_prefix_matches_one_address() {
        let r = Rule {
            dst: net([192, 0, 2, 7], 32),
            ..rule("host", Action::Accept)
        };
        let to = |d| probe(LAN, WAN, key(TCP, [10, 0, 0, 1], 1, d, 1));
        check_field(
            r,
            &[to([192, 0, 2, 7])],
            &[to([192, 0, 2, 6]), to([192, 0, 2, 8]), to([64, 0, 2, 7])],
        );
    }

    #[test]
    fn short_prefixes_compare_only_the_leading_bits() {
        let r = Rule {
            src: net([128, 0, 0, 0], 1),
            ..rule("upper-half", Action::Accept)
        };
        let from = |s| probe(WAN, LAN, key(UDP, s, 1, [10, 0, 0, 1], 1));
        check_field(
            r,
            &[from([128, 0, 0, 0]), from([255, 255, 255, 255])],
            &[from([127, 255, 255, 255]), from([0, 0, 0, 0])],
        );
        let r = Rule {
            src: net([10, 0, 0, 0], 31),
            ..rule("pair", Action::Accept)
        };
        check_field(
            r,
            &[from([10, 0, 0, 0]), from([10, 0, 0, 1])],
            &[from([10, 0, 0, 2]), from([9, 255, 255, 255])],
        );
    }

    #[test]
    fn first_match_wins_over_a_later_more_specific_rule() {
        let rules = vec![
            Rule {
                protocol: Some(TCP),
                dst_ports: Some(1..=65535),
                ..rule("broad-drop", Action::Drop)
            },
            Rule {
                from: Some(LAN),
                to: Some(WAN),
                src: net([10, 0, 0, 1], 32),
                protocol: Some(TCP),
                dst_ports: Some(22..=22),
                ..rule("exact-ssh", Action::Accept)
            },
        ];
        let set = RuleSet::compile(rules, Policy::new(Action::Reject)).unwrap();
        assert_eq!(
            set.evaluate(LAN, WAN, &tcp(22), None),
            (Action::Drop, Some(0))
        );
        // Port 0 escapes the broad rule and not the exact one's port check.
        assert_eq!(
            set.evaluate(LAN, WAN, &tcp(0), None),
            (Action::Reject, None)
        );
    }

    #[test]
    fn order_holds_across_zone_groups() {
        let rules = vec![
            Rule {
                to: Some(WAN),
                protocol: Some(UDP),
                ..rule("to-wan-udp", Action::Drop)
            },
            Rule {
                from: Some(LAN),
                to: Some(WAN),
                protocol: Some(TCP),
                dst_ports: Some(443..=443),
                ..rule("lan-wan-https", Action::Accept)
            },
            Rule {
                from: Some(LAN),
                protocol: Some(TCP),
                ..rule("from-lan-tcp", Action::Reject)
            },
            rule("catch-all", Action::Accept),
        ];
        let set = RuleSet::compile(rules, Policy::new(Action::Drop)).unwrap();
        let udp = key(UDP, [10, 0, 0, 1], 5, [1, 1, 1, 1], 443);
        assert_eq!(set.evaluate(LAN, WAN, &udp, None), (Action::Drop, Some(0)));
        assert_eq!(
            set.evaluate(LAN, WAN, &tcp(443), None),
            (Action::Accept, Some(1))
        );
        assert_eq!(
            set.evaluate(LAN, WAN, &tcp(80), None),
            (Action::Reject, Some(2))
        );
        assert_eq!(
            set.evaluate(LAN, DMZ, &tcp(443), None),
            (Action::Reject, Some(2))
        );
        assert_eq!(
            set.evaluate(DMZ, LAN, &tcp(443), None),
            (Action::Accept, Some(3))
        );
        assert_eq!(
            set.evaluate(UNNAMED, WAN, &udp, None),
            (Action::Drop, Some(0))
        );
    }

    #[test]
    fn defaults_per_zone_pair_and_fallback() {
        let policy = Policy::new(Action::Drop)
            .set(LAN, WAN, Action::Accept)
            .set(WAN, ZoneId::LOCAL, Action::Reject)
            .set(LAN, LAN, Action::Accept)
            .set(LAN, LAN, Action::Reject);
        assert_eq!(policy.fallback(), Action::Drop);
        // A rule that never matches these probes must not change any default.
        let rules = vec![Rule {
            protocol: Some(GRE),
            ..rule("gre", Action::Accept)
        }];
        let set = RuleSet::compile(rules, policy.clone()).unwrap();
        for (from, to, expected) in [
            (LAN, WAN, Action::Accept),
            (WAN, ZoneId::LOCAL, Action::Reject),
            (LAN, LAN, Action::Reject),
            (WAN, LAN, Action::Drop),
            (LAN, ZoneId::LOCAL, Action::Drop),
            (ZoneId::LOCAL, WAN, Action::Drop),
            (UNNAMED, WAN, Action::Drop),
            (LAN, UNNAMED, Action::Drop),
            (UNNAMED, UNNAMED, Action::Drop),
        ] {
            assert_eq!(policy.default_for(from, to), expected);
            assert_eq!(
                set.evaluate(from, to, &tcp(80), None),
                (expected, None),
                "{from:?}->{to:?}"
            );
        }
        let empty = RuleSet::compile(Vec::new(), Policy::new(Action::Reject)).unwrap();
        assert!(empty.is_empty());
        assert_eq!(
            empty.evaluate(LAN, WAN, &tcp(80), None),
            (Action::Reject, None)
        );
    }

    #[test]
    fn wildcard_zone_rules_apply_to_every_matching_pair() {
        let rules = vec![
            Rule {
                to: Some(ZoneId::LOCAL),
                protocol: Some(TCP),
                dst_ports: Some(22..=22),
                ..rule("ssh-to-gateway", Action::Accept)
            },
            Rule {
                from: Some(WAN),
                ..rule("from-wan", Action::Drop)
            },
            Rule {
                protocol: Some(UDP),
                dst_ports: Some(53..=53),
                ..rule("dns-anywhere", Action::Accept)
            },
        ];
        let set = RuleSet::compile(rules, Policy::new(Action::Reject)).unwrap();
        let dns = key(UDP, [10, 0, 0, 1], 5353, [10, 0, 0, 2], 53);
        assert_eq!(
            set.evaluate(UNNAMED, ZoneId::LOCAL, &tcp(22), None),
            (Action::Accept, Some(0))
        );
        assert_eq!(
            set.evaluate(WAN, ZoneId::LOCAL, &tcp(22), None),
            (Action::Accept, Some(0))
        );
        assert_eq!(
            set.evaluate(WAN, LAN, &tcp(22), None),
            (Action::Drop, Some(1))
        );
        assert_eq!(
            set.evaluate(WAN, UNNAMED, &dns, None),
            (Action::Drop, Some(1))
        );
        assert_eq!(
            set.evaluate(LAN, UNNAMED, &dns, None),
            (Action::Accept, Some(2))
        );
        assert_eq!(
            set.evaluate(UNNAMED, DMZ, &dns, None),
            (Action::Accept, Some(2))
        );
        assert_eq!(
            set.evaluate(LAN, DMZ, &tcp(22), None),
            (Action::Reject, None)
        );
    }

    #[test]
    fn overlapping_port_ranges_agree_with_a_linear_scan_on_every_port() {
        let rules = vec![
            Rule {
                src: net([10, 0, 0, 9], 32),
                protocol: Some(TCP),
                dst_ports: Some(100..=200),
                ..rule("a", Action::Accept)
            },
            Rule {
                protocol: Some(TCP),
                dst_ports: Some(150..=150),
                ..rule("b", Action::Reject)
            },
            Rule {
                protocol: Some(TCP),
                src_ports: Some(40000..=40000),
                dst_ports: Some(120..=300),
                ..rule("c", Action::Drop)
            },
            Rule {
                protocol: Some(TCP),
                src_ports: Some(1..=2),
                ..rule("d", Action::Drop)
            },
            Rule {
                protocol: Some(TCP),
                dst_ports: Some(0..=65535),
                ..rule("e", Action::Accept)
            },
            Rule {
                protocol: Some(TCP),
                dst_ports: Some(250..=65535),
                ..rule("f", Action::Reject)
            },
        ];
        let policy = Policy::new(Action::Drop);
        let set = RuleSet::compile(rules.clone(), policy.clone()).unwrap();
        for src in [[10, 0, 0, 9], [10, 0, 0, 8]] {
            for src_port in [1, 40000] {
                for dst_port in (0..=400).chain([65534, 65535]) {
                    let k = key(TCP, src, src_port, [1, 1, 1, 1], dst_port);
                    assert_eq!(
                        set.evaluate(LAN, WAN, &k, None),
                        naive(&rules, &policy, LAN, WAN, &k, None),
                        "{k:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn accessors_return_the_configured_rules() {
        let rules = vec![rule("first", Action::Accept), rule("second", Action::Drop)];
        let set = RuleSet::compile(rules.clone(), Policy::new(Action::Drop)).unwrap();
        assert_eq!(set.len(), 2);
        assert!(!set.is_empty());
        assert_eq!(set.rule(1), &rules[1]);
        assert_eq!(set.rules(), &rules[..]);
        assert_eq!(set.policy(), &Policy::new(Action::Drop));
    }

    fn compile_error(bad: Rule) -> FirewallError {
        // The bad rule sits second so that the error must name it, not the first.
        RuleSet::compile(
            vec![rule("fine", Action::Accept), bad],
            Policy::new(Action::Drop),
        )
        .unwrap_err()
    }

    fn invalid(problem: RuleProblem) -> FirewallError {
        FirewallError::InvalidRule {
            index: 1,
            name: "bad".to_string(),
            problem,
        }
    }

    #[test]
    fn compile_rejects_invalid_rules() {
        let bad = || rule("bad", Action::Accept);
        let cases = [
            (
                Rule {
                    src: net([10, 0, 0, 0], 33),
                    ..bad()
                },
                RuleProblem::BadPrefixLength {
                    endpoint: Endpoint::Source,
                    len: 33,
                },
            ),
            (
                Rule {
                    dst: net([0, 0, 0, 0], 255),
                    ..bad()
                },
                RuleProblem::BadPrefixLength {
                    endpoint: Endpoint::Destination,
                    len: 255,
                },
            ),
            (
                Rule {
                    src: net([10, 0, 0, 1], 24),
                    ..bad()
                },
                RuleProblem::HostBitsSet {
                    endpoint: Endpoint::Source,
                },
            ),
            (
                Rule {
                    dst: net([128, 0, 0, 0], 0),
                    ..bad()
                },
                RuleProblem::HostBitsSet {
                    endpoint: Endpoint::Destination,
                },
            ),
            (
                Rule {
                    dst_ports: Some(80..=80),
                    ..bad()
                },
                RuleProblem::PortsWithoutTcpOrUdp,
            ),
            (
                Rule {
                    protocol: Some(ICMP),
                    src_ports: Some(1..=2),
                    ..bad()
                },
                RuleProblem::PortsWithoutTcpOrUdp,
            ),
            (
                Rule {
                    protocol: Some(GRE),
                    dst_ports: Some(1..=2),
                    ..bad()
                },
                RuleProblem::PortsWithoutTcpOrUdp,
            ),
            (
                Rule {
                    protocol: Some(TCP),
                    icmp_type: Some(8),
                    ..bad()
                },
                RuleProblem::IcmpTypeWithoutIcmp,
            ),
            (
                Rule {
                    icmp_type: Some(8),
                    ..bad()
                },
                RuleProblem::IcmpTypeWithoutIcmp,
            ),
            (
                Rule {
                    protocol: Some(TCP),
                    #[allow(clippy::reversed_empty_ranges)]
                    dst_ports: Some(90..=80),
                    ..bad()
                },
                RuleProblem::ReversedPortRange {
                    endpoint: Endpoint::Destination,
                },
            ),
            (
                Rule {
                    protocol: Some(UDP),
                    #[allow(clippy::reversed_empty_ranges)]
                    src_ports: Some(2..=1),
                    ..bad()
                },
                RuleProblem::ReversedPortRange {
                    endpoint: Endpoint::Source,
                },
            ),
        ];
        for (rule, problem) in cases {
            let err = compile_error(rule);
            assert_eq!(err, invalid(problem));
            let message = err.to_string();
            assert!(
                message.contains("rule 1") && message.contains("\"bad\""),
                "{message}"
            );
        }
    }

    #[test]
    fn compile_accepts_edge_prefixes() {
        let rules = vec![
            Rule {
                src: net([0, 0, 0, 0], 0),
                dst: net([255, 255, 255, 255], 32),
                ..rule("edges", Action::Accept)
            },
            Rule {
                protocol: Some(ICMP),
                icmp_type: Some(255),
                ..rule("icmp-255", Action::Accept)
            },
        ];
        assert!(RuleSet::compile(rules, Policy::new(Action::Drop)).is_ok());
    }

    #[test]
    fn thousands_of_rules_check_only_a_few_candidates() {
        const RULES: u16 = 5000;
        let pairs = [(LAN, WAN), (WAN, LAN), (WAN, ZoneId::LOCAL), (DMZ, WAN)];
        let mut rules: Vec<Rule> = (0..RULES)
            .map(|i| {
                let (from, to) = pairs[usize::from(i) % pairs.len()];
                Rule {
                    from: Some(from),
                    to: Some(to),
                    dst: net([192, 0, 2, 0], 24),
                    protocol: Some(if i % 2 == 0 { TCP } else { UDP }),
                    dst_ports: Some(10000 + i..=10000 + i),
                    action: if i % 3 == 0 {
                        Action::Drop
                    } else {
                        Action::Accept
                    },
                    ..rule(&format!("port-{i}"), Action::Accept)
                }
            })
            .collect();
        rules.push(Rule {
            from: Some(WAN),
            ..rule("wan-catch-all", Action::Reject)
        });
        let policy = Policy::new(Action::Drop);
        let set = RuleSet::compile(rules.clone(), policy.clone()).unwrap();
        for i in 0..RULES {
            let index = usize::from(i);
            let (from, to) = pairs[index % pairs.len()];
            let protocol = if i % 2 == 0 { TCP } else { UDP };
            let k = key(protocol, [10, 0, 0, 1], 40000, [192, 0, 2, 1], 10000 + i);
            let trace = set.evaluate_traced(from, to, &k, None);
            assert_eq!(trace.rule, Some(index));
            assert_eq!(trace.action, rules[index].action);
            assert_eq!(trace.candidates_checked, 1, "rule {i}");
            // The same port from another zone pair or protocol reaches at most the catch-all.
            let (other_from, other_to) = pairs[(index + 1) % pairs.len()];
            let miss = set.evaluate_traced(other_from, other_to, &k, None);
            assert!(miss.candidates_checked <= 1, "rule {i}: {miss:?}");
            assert_eq!(
                (miss.action, miss.rule),
                naive(&rules, &policy, other_from, other_to, &k, None)
            );
        }
        let unused_port = set.evaluate_traced(LAN, WAN, &tcp(80), None);
        assert_eq!(unused_port.rule, None);
        assert_eq!(unused_port.candidates_checked, 0);
    }

    // Random rule sets over a deliberately small universe of zones, addresses and ports, so
    // that rules overlap and flows hit them often enough for order to matter.
    const ZONES: [ZoneId; 4] = [LAN, WAN, DMZ, ZoneId::LOCAL];
    const PROTOCOLS: [u8; 4] = [ICMP, TCP, UDP, GRE];
    const PORTS: [u16; 8] = [0, 1, 2, 3, 80, 443, 65534, 65535];

    fn zone() -> impl Strategy<Value = ZoneId> {
        prop_oneof![
            4 => proptest::sample::select(&ZONES[..]),
            1 => Just(UNNAMED),
        ]
    }

    fn maybe_zone() -> impl Strategy<Value = Option<ZoneId>> {
        proptest::option::weighted(0.6, proptest::sample::select(&ZONES[..]))
    }

    fn address() -> impl Strategy<Value = Ipv4Addr> {
        prop_oneof![
            4 => (0..4u8, 0..4u8).prop_map(|(c, d)| Ipv4Addr::new(10, 0, c, d)),
            1 => any::<u32>().prop_map(Ipv4Addr::from),
        ]
    }

    fn prefix() -> impl Strategy<Value = Option<(Ipv4Addr, u8)>> {
        proptest::option::weighted(
            0.4,
            (
                address(),
                prop_oneof![Just(0u8), Just(8), Just(24), Just(30), Just(32), 0..=32u8],
            )
                .prop_map(|(addr, len)| {
                    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                    (Ipv4Addr::from(u32::from(addr) & mask), len)
                }),
        )
    }

    fn port() -> impl Strategy<Value = u16> {
        prop_oneof![
            3 => proptest::sample::select(&PORTS[..]),
            1 => any::<u16>(),
        ]
    }

    fn port_range() -> impl Strategy<Value = Option<RangeInclusive<u16>>> {
        proptest::option::weighted(0.5, (port(), port()).prop_map(|(a, b)| a.min(b)..=a.max(b)))
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            Just(Action::Accept),
            Just(Action::Drop),
            Just(Action::Reject)
        ]
    }

    fn random_rule() -> impl Strategy<Value = Rule> {
        (
            (maybe_zone(), maybe_zone(), prefix(), prefix()),
            proptest::option::weighted(0.8, proptest::sample::select(&PROTOCOLS[..])),
            (port_range(), port_range()),
            proptest::option::weighted(0.5, 0..4u8),
            action(),
        )
            .prop_map(
                |((from, to, src, dst), protocol, (src_ports, dst_ports), icmp_type, action)| {
                    // Drop the fields the protocol cannot have, so every generated rule
                    // compiles and the comparison exercises matching, not validation.
                    let has_ports = matches!(protocol, Some(TCP | UDP));
                    // A third of the rules with prefixes name them in IPv6 instead.
                    let ipv6 = matches!(src.or(dst), Some((addr, _)) if u32::from(addr) % 3 == 0);
                    Rule {
                        name: String::new(),
                        from,
                        to,
                        src: src.filter(|_| !ipv6),
                        dst: dst.filter(|_| !ipv6),
                        src6: src.filter(|_| ipv6).map(as_prefix6),
                        dst6: dst.filter(|_| ipv6).map(as_prefix6),
                        protocol,
                        src_ports: src_ports.filter(|_| has_ports),
                        dst_ports: dst_ports.filter(|_| has_ports),
                        icmp_type: icmp_type.filter(|_| protocol == Some(ICMP)),
                        action,
                    }
                },
            )
    }

    fn random_policy() -> impl Strategy<Value = Policy> {
        (
            action(),
            proptest::collection::vec((zone(), zone(), action()), 0..8),
        )
            .prop_map(|(fallback, pairs)| {
                pairs
                    .into_iter()
                    .fold(Policy::new(fallback), |p, (from, to, a)| p.set(from, to, a))
            })
    }

    fn random_flow() -> impl Strategy<Value = (ZoneId, ZoneId, FlowKey, Option<u8>)> {
        (
            zone(),
            zone(),
            (address(), address(), port(), port()),
            prop_oneof![
                3 => proptest::sample::select(&PROTOCOLS[..]),
                1 => any::<u8>(),
            ],
            proptest::option::weighted(0.8, 0..5u8),
        )
            .prop_map(
                |(from, to, (src, dst, src_port, dst_port), protocol, icmp_type)| {
                    let key = FlowKey {
                        src,
                        dst,
                        src_port,
                        dst_port,
                        protocol,
                    };
                    (from, to, key, icmp_type)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn evaluate_agrees_with_a_linear_first_match(
            rules in proptest::collection::vec(random_rule(), 0..=200),
            policy in random_policy(),
            flows in proptest::collection::vec(random_flow(), 64),
            flows6 in proptest::collection::vec(random_flow(), 16),
        ) {
            let set = RuleSet::compile(rules.clone(), policy.clone()).unwrap();
            for (from, to, key, icmp_type) in flows {
                let trace = set.evaluate_traced(from, to, &key, icmp_type);
                prop_assert_eq!(
                    (trace.action, trace.rule),
                    naive(&rules, &policy, from, to, &key, icmp_type),
                    "{:?}->{:?} {:?} icmp {:?}", from, to, key, icmp_type
                );
                // Candidates are visited in rule order, so none beyond the answer is checked.
                prop_assert!(trace.candidates_checked <= trace.rule.map_or(rules.len(), |r| r + 1));
            }
            // Flows built from each rule's own fields hit rules far more often than random
            // ones, which is where ordering mistakes would show.
            for r in &rules {
                let from = r.from.unwrap_or(UNNAMED);
                let to = r.to.unwrap_or(ZoneId::LOCAL);
                // An IPv6 prefix's address is an embedded IPv4 one: its low 32 bits.
                let unembedded = |prefix: Option<(Ipv6Addr, u8)>| {
                    prefix.map(|(addr, len)| (Ipv4Addr::from(u128::from(addr) as u32), len))
                };
                let key = FlowKey {
                    src: r.src.or(unembedded(r.src6)).map_or(Ipv4Addr::new(10, 0, 0, 1), |(a, _)| a),
                    dst: r.dst.or(unembedded(r.dst6)).map_or(Ipv4Addr::new(10, 0, 0, 2), |(a, _)| a),
                    src_port: r.src_ports.as_ref().map_or(7, |p| *p.end()),
                    dst_port: r.dst_ports.as_ref().map_or(7, |p| *p.start()),
                    protocol: r.protocol.unwrap_or(GRE),
                };
                let icmp_type = r.icmp_type.or(Some(0));
                prop_assert_eq!(
                    set.evaluate(from, to, &key, icmp_type),
                    naive(&rules, &policy, from, to, &key, icmp_type)
                );
                // The same flow in IPv6: only the rules without IPv4 prefixes or ICMP types.
                let key6 = as_ipv6(&key);
                prop_assert_eq!(set.evaluate6(from, to, &key6), naive6(&rules, &policy, from, to, &key6));
            }
            for (from, to, key, _) in flows6 {
                let key6 = as_ipv6(&key);
                prop_assert_eq!(set.evaluate6(from, to, &key6), naive6(&rules, &policy, from, to, &key6));
            }
        }
    }
}

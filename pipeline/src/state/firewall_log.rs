//! What the rules (port forwards, zone pairs) marked `log = true` decided, for the firewall
//! log (`[firewall.log]`): one event per first packet such a rule decides (as its hit counter
//! counts them), IPv4's and IPv6's alike, queued by the worker in its [`EventLog`] within a
//! budget of its own (a token bucket), and sent by a thread off the workers. What is over the
//! budget or finds the queue full is lost, counted.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use crate::flow::{FlowKey, FlowKey6};
use crate::ratelimit::TokenBucket;
use crate::state::drop_log::{dropped_flow, DropSampler, Sampled};
use crate::state::event_log::EventLog;
use crate::state::firewall::{Action, RuleSet, ZoneId};
use crate::verdict::DropReason;

/// One decision of a logged rule, port forward or zone pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirewallEvent {
    /// The worker's clock in the loop the decision was made in.
    pub at_ns: u64,
    /// The rule's name (`forward tcp 8080 -> ...`, `policy wan->lan` for the others).
    pub rule: Arc<str>,
    pub action: Action,
    /// The zone pair it was decided for (`ZoneId::LOCAL`: the gateway itself), named by the
    /// log's thread: a name is the config's, not the worker's.
    pub from: ZoneId,
    pub to: ZoneId,
    /// The interface the packet came in by, and the one it was to leave by (None: to the
    /// gateway itself). For what the gateway's kernel opens, both are the twin's interface.
    pub ingress: u16,
    pub egress: Option<u16>,
    /// The flow as it arrived: IP protocol, source and destination with their ports (ICMP:
    /// the query id).
    pub protocol: u8,
    pub src: (IpAddr, u16),
    pub dst: (IpAddr, u16),
    /// Where a port forward sends it (the rules judge the flow after this translation).
    /// IPv4 only: a port forward is NAT44, and IPv6 has no NAT66 to forward with.
    pub forwarded_to: Option<(Ipv4Addr, u16)>,
    /// The source an accepted flow leaves with, where masquerade (or a hairpin through a
    /// forward) translates it. IPv4 only, as NAT44 is.
    pub translated_src: Option<(Ipv4Addr, u16)>,
    /// From the gateway's own kernel (the `local` zone).
    pub from_kernel: bool,
    /// A drop the drop log sampled (`[firewall.log] drops`), not a rule's decision: `rule`
    /// is then the reason's label, both zones are the ingress interface's (where the packet
    /// was going was not decided), and the flow is what the dropped frame says of itself.
    pub dropped: Option<DropReason>,
}

/// One worker's queue of firewall events.
pub type FirewallLog = EventLog<FirewallEvent>;

/// A worker's end of the firewall log: the queue and the worker's budget for it, and the
/// drop log's sampler where drops are logged too.
#[derive(Clone, Debug)]
pub struct FirewallLogger {
    log: Arc<FirewallLog>,
    budget: TokenBucket,
    drops: Option<DropLog>,
}

/// The drop log's part of a worker's logger: the sampler, and each reason's label as the
/// events name it (made once, so that an event shares it).
#[derive(Clone, Debug)]
struct DropLog {
    sampler: DropSampler,
    labels: Vec<Arc<str>>,
}

/// Where and how a decision was made, beside the flow: for [`FirewallLogger::record`] and
/// the zone pairs' counters.
#[derive(Clone, Copy, Debug)]
pub struct Decision {
    pub action: Action,
    /// The zone pair it was made for.
    pub from: ZoneId,
    pub to: ZoneId,
    pub ingress: u16,
    pub egress: Option<u16>,
    /// The port forward that translated it: its place in the router config's forwards, and
    /// where it sends the flow.
    pub forwarded_to: Option<(usize, (Ipv4Addr, u16))>,
    /// An IPv6 pinhole admitted it where the pair's default would not: neither a rule's
    /// decision nor the pair's.
    pub pinholed: bool,
    pub from_kernel: bool,
}

/// A flow key of either family, as an event records it.
pub trait LoggedFlow {
    /// The IP protocol, and the source and destination with their ports.
    fn logged(&self) -> (u8, (IpAddr, u16), (IpAddr, u16));
}

impl LoggedFlow for FlowKey {
    fn logged(&self) -> (u8, (IpAddr, u16), (IpAddr, u16)) {
        let (src, dst) = (IpAddr::V4(self.src), IpAddr::V4(self.dst));
        (self.protocol, (src, self.src_port), (dst, self.dst_port))
    }
}

impl LoggedFlow for FlowKey6 {
    fn logged(&self) -> (u8, (IpAddr, u16), (IpAddr, u16)) {
        let (src, dst) = (IpAddr::V6(self.src), IpAddr::V6(self.dst));
        (self.protocol, (src, self.src_port), (dst, self.dst_port))
    }
}

/// A first packet's decision on flow `key`, either family's: counted where it belongs (the
/// rule's counter; with no rule matching, the port forward's, or the zone pair's default's
/// unless a pinhole admitted it), and queued in `logger` where that rule, forward or pair is
/// logged. `when`: the worker and the Unix second, for the counters. What is not logged costs
/// an Option check.
#[inline]
pub fn count_and_log(
    firewall: &RuleSet,
    logger: Option<&mut FirewallLogger>,
    rule: Option<usize>,
    key: &impl LoggedFlow,
    decision: Decision,
    when: (u16, i64),
    now_ns: u64,
) {
    if let (Some(name), Some(logger)) = (count_decision(firewall, rule, &decision, when), logger) {
        logger.record(name, key, decision, now_ns);
    }
}

/// [`count_and_log`]'s first half: counts the decision where it belongs and returns the name
/// it is logged under, if it is logged, for a caller that logs it later (once masquerade has
/// translated the flow's source).
#[inline]
pub fn count_decision<'r>(
    firewall: &'r RuleSet,
    rule: Option<usize>,
    decision: &Decision,
    when: (u16, i64),
) -> Option<&'r Arc<str>> {
    // A forward or a pinhole without a matching rule is its own decision, not the pair's.
    let by_pair = decision.forwarded_to.is_none() && !decision.pinholed;
    let pair = (decision.from, decision.to);
    firewall.count_decision(rule, pair, by_pair, when);
    match (rule, decision.forwarded_to) {
        (Some(_), _) => firewall.logged(rule),
        (None, Some((forward, _))) => {
            firewall.count_forward(forward, when);
            firewall.forward_logged(forward)
        }
        (None, None) if by_pair => firewall.pair_logged(pair),
        (None, None) => None,
    }
}

impl Decision {
    /// `action` on a packet from zone `from`, received on `ingress`, to the gateway itself.
    pub fn to_gateway(action: Action, from: ZoneId, ingress: u16) -> Self {
        Decision {
            action,
            from,
            to: ZoneId::LOCAL,
            ingress,
            egress: None,
            forwarded_to: None,
            pinholed: false,
            from_kernel: false,
        }
    }
}

impl FirewallLogger {
    /// `per_sec` events a second, `burst` at once, into `log`.
    pub fn new(log: Arc<FirewallLog>, per_sec: u32, burst: u32) -> Self {
        FirewallLogger {
            log,
            budget: TokenBucket::new(per_sec, burst),
            drops: None,
        }
    }

    /// Logs the drops `sampler` samples too, within its own budget.
    pub fn with_drops(mut self, sampler: DropSampler) -> Self {
        let labels = DropReason::ALL
            .iter()
            .map(|reason| Arc::from(reason.label()))
            .collect();
        self.drops = Some(DropLog { sampler, labels });
        self
    }

    /// Whether drops are logged: else a burst's verdicts are not looked at.
    #[inline]
    pub fn logs_drops(&self) -> bool {
        self.drops.is_some()
    }

    /// A packet dropped for `reason`, as `frame` holds it, received by port `ingress` of
    /// zone `zone`: queued if the drop log asks for the reason and samples this one (within
    /// its budget; over it, counted lost). A frame that is not IP is not logged: it has no
    /// flow to name (`gateway ctl capture --drops` shows it).
    #[inline]
    pub fn dropped(
        &mut self,
        reason: DropReason,
        frame: &[u8],
        (ingress, zone): (u16, ZoneId),
        now_ns: u64,
    ) {
        if self
            .drops
            .as_ref()
            .is_some_and(|drops| drops.sampler.wants(reason))
        {
            self.record_drop(reason, frame, (ingress, zone), now_ns);
        }
    }

    #[cold]
    fn record_drop(
        &mut self,
        reason: DropReason,
        frame: &[u8],
        (ingress, zone): (u16, ZoneId),
        now_ns: u64,
    ) {
        let Some(drops) = self.drops.as_mut() else {
            return;
        };
        // Read first: a frame with no flow to name takes no turn of the sample, nor budget.
        let Some(flow) = dropped_flow(frame) else {
            return;
        };
        match drops.sampler.sample(now_ns) {
            Sampled::Skipped => return,
            Sampled::OverBudget => return self.log.count_lost(),
            Sampled::Logged => {}
        }
        self.log.push(FirewallEvent {
            at_ns: self.log.now_ns(),
            rule: drops.labels[reason as usize].clone(),
            action: Action::Drop,
            from: zone,
            to: zone,
            ingress,
            egress: None,
            protocol: flow.protocol,
            src: flow.src,
            dst: flow.dst,
            forwarded_to: None,
            translated_src: None,
            from_kernel: false,
            dropped: Some(reason),
        });
    }

    pub fn log(&self) -> &Arc<FirewallLog> {
        &self.log
    }

    /// Queues rule `rule`'s decision on flow `key`, within the budget; over it, counted lost.
    /// No allocation: the name is shared (a reference count).
    #[cold]
    pub fn record(
        &mut self,
        rule: &Arc<str>,
        key: &impl LoggedFlow,
        decision: Decision,
        now_ns: u64,
    ) {
        self.record_translated(rule, key, decision, None, now_ns);
    }

    /// [`record`](Self::record) for an accepted flow whose source masquerade translated to
    /// `translated_src`.
    #[cold]
    pub fn record_translated(
        &mut self,
        rule: &Arc<str>,
        key: &impl LoggedFlow,
        decision: Decision,
        translated_src: Option<(Ipv4Addr, u16)>,
        now_ns: u64,
    ) {
        if !self.budget.try_take(now_ns) {
            self.log.count_lost();
            return;
        }
        let (protocol, src, dst) = key.logged();
        self.log.push(FirewallEvent {
            at_ns: self.log.now_ns(),
            rule: rule.clone(),
            action: decision.action,
            from: decision.from,
            to: decision.to,
            ingress: decision.ingress,
            egress: decision.egress,
            protocol,
            src,
            dst,
            forwarded_to: decision.forwarded_to.map(|(_, target)| target),
            translated_src,
            from_kernel: decision.from_kernel,
            dropped: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::rule_hits::RuleHits;

    #[test]
    fn the_budget_holds_a_flood_and_counts_what_it_refuses() {
        let log = Arc::new(FirewallLog::new(100));
        let mut logger = FirewallLogger::new(log.clone(), 10, 3);
        let key = FlowKey {
            protocol: 6,
            src: Ipv4Addr::new(192, 168, 10, 2),
            src_port: 40000,
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dst_port: 9,
        };
        let decision = Decision {
            action: Action::Drop,
            from: ZoneId(0),
            to: ZoneId(1),
            ingress: 0,
            egress: Some(1),
            forwarded_to: None,
            pinholed: false,
            from_kernel: false,
        };
        let rule: Arc<str> = Arc::from("no-discard");
        for _ in 0..10 {
            logger.record(&rule, &key, decision, 1_000);
        }
        let mut events = Vec::new();
        log.drain(|event| events.push(event));
        assert_eq!(events.len(), 3, "the burst");
        assert_eq!(log.lost(), 7);
        assert_eq!(&*events[0].rule, "no-discard");
        assert_eq!(events[0].dst, (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 9));
        assert_eq!((events[0].from, events[0].to), (ZoneId(0), ZoneId(1)));
        // A tenth of a second later, one more token.
        logger.record(&rule, &key, decision, 100_001_000);
        log.drain(|event| events.push(event));
        assert_eq!(events.len(), 4);
    }

    /// A rule set with one rule (`to-wan-9`, not logged), the pair `wan -> lan` logged and
    /// counted: what [`count_and_log`] decides between.
    fn logged_pair_rules() -> (RuleSet, Arc<RuleHits>) {
        use crate::state::firewall::{PairHits, Policy, Rule};
        let (lan, wan) = (ZoneId(0), ZoneId(1));
        let policy = Policy::new(Action::Accept).set(wan, lan, Action::Drop);
        let rule = Rule {
            protocol: Some(6),
            dst_ports: Some(9..=9),
            ..Rule::matching_all("to-wan-9", Action::Drop)
        };
        let mut rules = RuleSet::compile(vec![rule], policy).unwrap();
        let hits = Arc::new(RuleHits::new(1));
        rules.attach_pair_hits(vec![PairHits {
            from: (wan, Arc::from("wan")),
            to: (lan, Arc::from("lan")),
            hits: hits.clone(),
        }]);
        rules.attach_pair_logged(vec![((wan, lan), Some(Arc::from("policy wan->lan")))]);
        (rules, hits)
    }

    fn inbound(action: Action) -> Decision {
        Decision {
            action,
            from: ZoneId(1),
            to: ZoneId(0),
            ingress: 1,
            egress: Some(0),
            forwarded_to: None,
            pinholed: false,
            from_kernel: false,
        }
    }

    #[test]
    fn a_logged_pair_logs_what_its_default_decides_and_nothing_else() {
        let (rules, pair_hits) = logged_pair_rules();
        let log = Arc::new(FirewallLog::new(16));
        let mut logger = FirewallLogger::new(log.clone(), 100, 100);
        let key6 = FlowKey6 {
            protocol: 17,
            src: "2001:db8::2".parse().unwrap(),
            src_port: 5000,
            dst: "2001:db8:1::5".parse().unwrap(),
            dst_port: 53,
        };
        let when = (0, 1);
        // The pair's default decides: counted there and logged under the pair's name.
        count_and_log(
            &rules,
            Some(&mut logger),
            None,
            &key6,
            inbound(Action::Drop),
            when,
            0,
        );
        // A rule decides: the rule's (not logged), not the pair's.
        count_and_log(
            &rules,
            Some(&mut logger),
            Some(0),
            &key6,
            inbound(Action::Drop),
            when,
            0,
        );
        // A pinhole or a port forward decides: neither counted nor logged as the pair's.
        let pinholed = Decision {
            pinholed: true,
            ..inbound(Action::Accept)
        };
        count_and_log(&rules, Some(&mut logger), None, &key6, pinholed, when, 0);
        let forwarded = Decision {
            forwarded_to: Some((0, (Ipv4Addr::new(192, 168, 10, 5), 80))),
            ..inbound(Action::Accept)
        };
        count_and_log(&rules, Some(&mut logger), None, &key6, forwarded, when, 0);
        // Another pair's default: not logged.
        let outbound = Decision {
            from: ZoneId(0),
            to: ZoneId(1),
            ..inbound(Action::Accept)
        };
        count_and_log(&rules, Some(&mut logger), None, &key6, outbound, when, 0);
        // Without a logger, counted all the same.
        count_and_log(&rules, None, None, &key6, inbound(Action::Drop), when, 0);

        assert_eq!(pair_hits.total(), 2, "the pair's default decided twice");
        let mut events = Vec::new();
        log.drain(|event| events.push(event));
        assert_eq!(events.len(), 1, "{events:?}");
        let event = &events[0];
        assert_eq!(&*event.rule, "policy wan->lan");
        assert_eq!((event.from, event.to), (ZoneId(1), ZoneId(0)));
        assert_eq!(event.src, (IpAddr::V6(key6.src), 5000));
        assert_eq!(event.dst, (IpAddr::V6(key6.dst), 53));
        assert_eq!(event.protocol, 17);
        assert_eq!(log.lost(), 0);
    }
}

//! What the rules marked `log = true` decided, for the firewall log (`[firewall.log]`): one
//! event per first packet such a rule decides (as its hit counter counts them), queued by the
//! worker in its [`EventLog`] within a budget of its own (a token bucket), and sent by a
//! thread off the workers. What is over the budget or finds the queue full is lost, counted.

use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::flow::FlowKey;
use crate::ratelimit::TokenBucket;
use crate::state::event_log::EventLog;
use crate::state::firewall::{Action, ZoneId};

/// One decision of a logged rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirewallEvent {
    /// The worker's clock in the loop the decision was made in.
    pub at_ns: u64,
    /// The rule's name.
    pub rule: Arc<str>,
    pub action: Action,
    /// The interface the packet came in by, and the one it was to leave by (None: to the
    /// gateway itself). For what the gateway's kernel opens, both are the twin's interface.
    pub ingress: u16,
    pub egress: Option<u16>,
    /// The flow as it arrived: IP protocol, source and destination with their ports (ICMP:
    /// the query id).
    pub protocol: u8,
    pub src: (Ipv4Addr, u16),
    pub dst: (Ipv4Addr, u16),
    /// Where a port forward sends it (the rules judge the flow after this translation).
    pub forwarded_to: Option<(Ipv4Addr, u16)>,
    /// From the gateway's own kernel (the `local` zone).
    pub from_kernel: bool,
}

/// One worker's queue of firewall events.
pub type FirewallLog = EventLog<FirewallEvent>;

/// A worker's end of the firewall log: the queue and the worker's budget for it.
#[derive(Clone, Debug)]
pub struct FirewallLogger {
    log: Arc<FirewallLog>,
    budget: TokenBucket,
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
    pub from_kernel: bool,
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
        }
    }

    pub fn log(&self) -> &Arc<FirewallLog> {
        &self.log
    }

    /// Queues rule `rule`'s decision on flow `key`, within the budget; over it, counted lost.
    /// No allocation: the name is shared (a reference count).
    #[cold]
    pub fn record(&mut self, rule: &Arc<str>, key: &FlowKey, decision: Decision, now_ns: u64) {
        if !self.budget.try_take(now_ns) {
            self.log.count_lost();
            return;
        }
        self.log.push(FirewallEvent {
            at_ns: self.log.now_ns(),
            rule: rule.clone(),
            action: decision.action,
            ingress: decision.ingress,
            egress: decision.egress,
            protocol: key.protocol,
            src: (key.src, key.src_port),
            dst: (key.dst, key.dst_port),
            forwarded_to: decision.forwarded_to.map(|(_, target)| target),
            from_kernel: decision.from_kernel,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(events[0].dst, (Ipv4Addr::new(10, 0, 0, 2), 9));
        // A tenth of a second later, one more token.
        logger.record(&rule, &key, decision, 100_001_000);
        log.drain(|event| events.push(event));
        assert_eq!(events.len(), 4);
    }
}

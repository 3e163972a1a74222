//! A worker's end of `gateway ctl`'s flow and NAT queries. The ctl thread sends a query down a
//! one-slot channel; the worker takes it at the end of a poll loop and walks
//! [`SLOTS_PER_LOOP`] slots of its flow table per loop until it is done, then sends the
//! answer back. A walk costs a loop a few microseconds; no loop waits for the ctl thread.
//!
//! The worker allocates nothing: a listing fills the buffer the query brought (sized by the
//! ctl thread) and hands it back in the answer.

use crossbeam_channel::Sender;
use pipeline::pipeline::operator::flow_listing::{FlowFilter, FlowRecord, WalkStep};
use pipeline::state::nat::BindingView;
use pipeline::Pipeline;

use super::mailbox::{Mailbox, MailboxSender};

/// Flow-table slots a worker visits per poll loop while a query is under way: a million
/// slots take about a thousand loops, a few milliseconds at idle.
pub const SLOTS_PER_LOOP: usize = 1024;

/// What the ctl thread asks one worker.
pub enum WorkerQuery {
    /// The flows matching `filter`, in `out` as far as its capacity goes.
    ListFlows {
        filter: FlowFilter,
        out: Vec<FlowRecord>,
        answer: Sender<FlowListing>,
    },
    /// End the flows matching `filter`; the answer is how many were.
    ClearFlows {
        filter: FlowFilter,
        answer: Sender<usize>,
    },
    /// The NAT bindings of `host` (all, if None), in `out` as far as its capacity goes.
    ListNat {
        host: Option<std::net::Ipv4Addr>,
        out: Vec<BindingView>,
        answer: Sender<Listing<BindingView>>,
    },
}

/// A worker's answer to a listing.
pub struct Listing<T> {
    pub items: Vec<T>,
    /// Every match, listed or not.
    pub matched: usize,
}

/// A worker's answer to [`WorkerQuery::ListFlows`].
pub type FlowListing = Listing<FlowRecord>;

/// The ctl thread's end: send a query with `try_send`, so a worker that is still busy with
/// an earlier query is reported, not waited for.
pub type QuerySender = MailboxSender<WorkerQuery>;

/// The worker's end.
pub struct CtlLink {
    queries: Mailbox<WorkerQuery>,
    walk: Option<Walk>,
}

struct Walk {
    query: WorkerQuery,
    next: usize,
    matched: usize,
}

impl CtlLink {
    /// One worker's link: the ctl thread keeps the sender.
    pub fn pair() -> (QuerySender, CtlLink) {
        let (queries_in, queries) = Mailbox::pair();
        (
            queries_in,
            CtlLink {
                queries,
                walk: None,
            },
        )
    }

    /// Once per poll loop: takes a new query if none is under way, and walks one slice.
    #[inline]
    pub fn poll(&mut self, pipeline: &mut Pipeline, now_ns: u64) {
        if self.walk.is_none() {
            // Idle: one load of the mailbox's flag.
            let Some(query) = self
                .queries
                .has_mail()
                .then(|| self.queries.take())
                .flatten()
            else {
                return;
            };
            self.walk = Some(Walk {
                query,
                next: 0,
                matched: 0,
            });
        }
        self.advance(pipeline, now_ns);
    }

    #[cold]
    fn advance(&mut self, pipeline: &mut Pipeline, now_ns: u64) {
        let Some(walk) = self.walk.as_mut() else {
            return;
        };
        let step: WalkStep = match &mut walk.query {
            WorkerQuery::ListFlows { filter, out, .. } => {
                pipeline.list_flows(filter, walk.next, SLOTS_PER_LOOP, now_ns, out)
            }
            WorkerQuery::ClearFlows { filter, .. } => {
                pipeline.clear_flows(filter, walk.next, SLOTS_PER_LOOP, now_ns)
            }
            WorkerQuery::ListNat { host, out, .. } => {
                pipeline.list_nat(*host, walk.next, SLOTS_PER_LOOP, out)
            }
        };
        walk.matched += step.matched;
        if let Some(next) = step.next {
            walk.next = next;
            return;
        }
        let Some(done) = self.walk.take() else {
            return;
        };
        // An answer nobody waits for any more (the ctl thread gave up) is dropped.
        match done.query {
            WorkerQuery::ListFlows { out, answer, .. } => {
                let _ = answer.try_send(Listing {
                    items: out,
                    matched: done.matched,
                });
            }
            WorkerQuery::ListNat { out, answer, .. } => {
                let _ = answer.try_send(Listing {
                    items: out,
                    matched: done.matched,
                });
            }
            WorkerQuery::ClearFlows { answer, .. } => {
                let _ = answer.try_send(done.matched);
            }
        }
    }
}

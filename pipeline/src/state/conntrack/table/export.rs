//! A table's flows taken out and put back: what a restart carries over in the state snapshot
//! (`crate::pipeline::operator::snapshot`). A flow leaves as an [`ExportedFlow`], with the time it has left
//! rather than its deadline, since a deadline on one process's monotonic clock means nothing
//! to the next; [`FlowTable::import`] puts it in a table the way `insert` would have left
//! it: both tuples indexed, its host charged, on the half-open list if half-open, within
//! every limit of the table's config. Neither allocates beyond what the caller collects.

use serde::{Deserialize, Serialize};

use super::super::index::FlowRef;
use super::super::tcp::{TcpConn, TcpState};
use super::super::FlowId;
use super::{tcp_half_open, Flow, FlowTable, Tracker, HOST_FLOWS};
use crate::flow::{Direction, FlowKey};
use crate::state::hosts::Refusal;
use crate::wire::ipv4::protocol;

/// One flow as [`FlowTable::export`] hands it out. `D` is the caller's data, verbatim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportedFlow<D> {
    pub original: FlowKey,
    pub reply: FlowKey,
    /// Nanoseconds until the flow's deadline at the time of export (at least 1: expired
    /// flows are not exported).
    pub remaining_ns: u64,
    /// The TCP tracker's state, for TCP flows only.
    pub tcp: Option<TcpTracking>,
    /// A packet travelling in the reply direction has been accepted.
    pub replied: bool,
    /// Has seen two-way traffic, so early drop keeps it.
    pub assured: bool,
    pub data: D,
}

/// A TCP flow's tracker (sequence windows, scaling, FIN and RST facts), opaque but for its
/// state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TcpTracking(TcpConn);

impl TcpTracking {
    pub fn state(&self) -> TcpState {
        self.0.state()
    }

    /// The same connection, judged from now on as one picked up mid-stream: every segment
    /// with plausible flags accepted, its windows not checked. For a copy that lags the
    /// connection (a session synced from the peer of an HA pair, whose sequence numbers have
    /// moved on since).
    pub fn picked_up(self) -> TcpTracking {
        TcpTracking(self.0.picked_up())
    }
}

impl<D> ExportedFlow<D> {
    /// Built the way the table builds flows: a tracker exactly for TCP, two different tuples
    /// of one protocol, a tracker within RFC 7323's limits, time left. What a snapshot
    /// decoder checks of every flow before it accepts any.
    pub fn is_well_formed(&self) -> bool {
        let tcp = self.original.protocol == protocol::TCP;
        self.original.protocol == self.reply.protocol
            && self.original != self.reply
            && self.remaining_ns > 0
            && match self.tcp {
                Some(TcpTracking(conn)) => tcp && conn.is_plausible(),
                None => !tcp,
            }
    }

    /// As the table counts half-open flows (see the module doc of `conntrack`).
    pub fn is_half_open(&self) -> bool {
        self.tcp
            .is_some_and(|TcpTracking(conn)| tcp_half_open(conn.state(), self.replied))
    }
}

/// Why [`FlowTable::import`] did not take a flow. The table is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportError {
    /// Not [`ExportedFlow::is_well_formed`].
    Malformed,
    /// One of its tuples already belongs to a flow.
    Exists,
    /// No free slot (an import never evicts).
    Full,
    /// Its opening host holds `host_flows` flows already.
    HostFlowLimit,
    /// Its opening host holds `host_half_open` half-open flows already.
    HostHalfOpenLimit,
    /// The table holds `half_open` half-open flows already.
    HalfOpenLimit,
}

impl<D: Copy> FlowTable<D> {
    /// Hands every live flow to `out`, with its time left at `now_ns`; expired flows (the
    /// sweep has not reached them yet) are left out. Half-open flows come last, oldest first,
    /// so that importing in this order keeps the order early drop replaces them in.
    pub fn export(&self, now_ns: u64, mut out: impl FnMut(ExportedFlow<D>)) {
        for (slot, flow) in self.flows.iter().enumerate() {
            if !flow.is_free() && !flow.is_half_open() && now_ns < flow.deadline_ns {
                out(self.exported(slot, now_ns));
            }
        }
        for slot in self.half_open.iter() {
            if now_ns < self.flows[slot].deadline_ns {
                out(self.exported(slot, now_ns));
            }
        }
    }

    /// The live flow in arena slot `slot` (below [`FlowTable::capacity`]), as exported, with
    /// its id; None for a free slot or an expired flow. Walking the slots a few at a time
    /// lists a table without a pause as long as the whole.
    pub fn exported_at(&self, slot: usize, now_ns: u64) -> Option<(FlowId, ExportedFlow<D>)> {
        let flow = self.flows.get(slot)?;
        (!flow.is_free() && now_ns < flow.deadline_ns)
            .then(|| (FlowId(slot as u32), self.exported(slot, now_ns)))
    }

    /// The live flow in `slot`, if there is one.
    pub fn live_at(&self, slot: usize, now_ns: u64) -> Option<FlowId> {
        let flow = self.flows.get(slot)?;
        (!flow.is_free() && now_ns < flow.deadline_ns).then_some(FlowId(slot as u32))
    }

    /// Gives flow `id` the time its state's timeout gives, as if a packet of it passed now
    /// (not less than it has): for a synced copy whose lease no refresh will renew.
    pub fn renew(&mut self, id: FlowId, now_ns: u64) {
        let flow = &mut self.flows[id.index()];
        let renewed = now_ns.saturating_add(flow.timeout(&self.config.timeouts));
        flow.deadline_ns = flow.deadline_ns.max(renewed);
    }

    /// Brings flow `id` up to `flow`, a later export of the same flow (its tuples are the
    /// caller's to check): its tracker, reply and assured facts, and its deadline as
    /// [`import`](Self::import) sets one; its data is left as it is. The half-open list and
    /// the host's half-open count follow its state, as `track` keeps them.
    pub fn refresh(
        &mut self,
        id: FlowId,
        flow: &ExportedFlow<D>,
        now_ns: u64,
    ) -> Result<(), ImportError> {
        if !flow.is_well_formed() {
            return Err(ImportError::Malformed);
        }
        let slot = id.index();
        let current = &mut self.flows[slot];
        if current.is_free() {
            return Err(ImportError::Malformed);
        }
        let was_half_open = current.is_half_open();
        current.tracker = match flow.tcp {
            Some(TcpTracking(conn)) => Tracker::Tcp(conn),
            None => Tracker::Stateless,
        };
        current.replied = flow.replied;
        current.assured = flow.assured;
        let remaining = flow
            .remaining_ns
            .min(current.timeout(&self.config.timeouts));
        current.deadline_ns = now_ns.saturating_add(remaining);
        let is_half_open = current.is_half_open();
        if is_half_open != was_half_open {
            let (host, charged) = (
                self.index
                    .opener(&current.original, self.config.host_prefix6),
                current.charged,
            );
            let change = [0, 1];
            if is_half_open {
                self.half_open.push(slot);
                if charged {
                    self.hosts.force(host, change);
                }
            } else {
                self.half_open.remove(slot);
                if charged {
                    self.hosts.credit(host, change);
                }
            }
        }
        Ok(())
    }

    fn exported(&self, slot: usize, now_ns: u64) -> ExportedFlow<D> {
        let flow = &self.flows[slot];
        ExportedFlow {
            original: flow.original,
            reply: flow.reply,
            remaining_ns: flow.deadline_ns - now_ns,
            tcp: match flow.tracker {
                Tracker::Tcp(conn) => Some(TcpTracking(conn)),
                Tracker::Free | Tracker::Stateless => None,
            },
            replied: flow.replied,
            assured: flow.assured,
            data: self.data[slot],
        }
    }

    /// Puts an exported flow back, its deadline `remaining_ns` after `now_ns` but no later
    /// than its state's timeout in this table's config allows. The table's limits apply as
    /// to a new flow (per host, half-open), but nothing is evicted for it: restored state
    /// never pushes out what is already there.
    pub fn import(&mut self, flow: &ExportedFlow<D>, now_ns: u64) -> Result<FlowId, ImportError> {
        if !flow.is_well_formed() {
            return Err(ImportError::Malformed);
        }
        if self.lookup(&flow.original).is_some() || self.lookup(&flow.reply).is_some() {
            return Err(ImportError::Exists);
        }
        let half_open = flow.is_half_open();
        let charge = [1, u32::from(half_open)];
        if let Err(Refusal::AtLimit { counter }) = self.hosts.check(flow.original.src, charge) {
            return Err(if counter == HOST_FLOWS {
                ImportError::HostFlowLimit
            } else {
                ImportError::HostHalfOpenLimit
            });
        }
        if half_open && self.half_open.len() >= self.config.half_open {
            return Err(ImportError::HalfOpenLimit);
        }
        let Some(slot) = self.free_flows.pop() else {
            return Err(ImportError::Full);
        };
        let slot = slot as usize;
        let charged = match self.hosts.charge(flow.original.src, charge) {
            Ok(()) => true,
            Err(_) => {
                self.stats.untracked_hosts += 1;
                false
            }
        };
        let mut restored = Flow {
            original: flow.original,
            reply: flow.reply,
            deadline_ns: 0,
            tracker: match flow.tcp {
                Some(TcpTracking(conn)) => Tracker::Tcp(conn),
                None => Tracker::Stateless,
            },
            replied: flow.replied,
            assured: flow.assured,
            charged,
        };
        let remaining = flow
            .remaining_ns
            .min(restored.timeout(&self.config.timeouts));
        restored.deadline_ns = now_ns.saturating_add(remaining);
        self.flows[slot] = restored;
        if half_open {
            self.half_open.push(slot);
        }
        self.data[slot] = flow.data;
        let indexed = self
            .index
            .insert(&flow.original, FlowRef::new(slot, Direction::Original))
            && self
                .index
                .insert(&flow.reply, FlowRef::new(slot, Direction::Reply));
        if !indexed {
            // Unreachable while the index is sized for every tuple, as in `insert`.
            self.release(slot);
            return Err(ImportError::Full);
        }
        Ok(FlowId(slot as u32))
    }
}

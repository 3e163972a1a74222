//! NAT mapping events for the operator's log (`[nat.log]`): a mapping's creation, when an
//! internal endpoint first gets an external port, and its deletion, when the last flow
//! holding it ends. A worker records them in a bounded lock-free queue of its own; a thread
//! off the workers drains it and sends them. A full queue loses the event, counted, and never
//! holds up a packet.

use std::net::Ipv4Addr;

use crate::state::event_log::EventLog;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NatEventKind {
    Create,
    Delete,
    /// A host took a block of ports (`nat.port_block_size`), or gave it back.
    BlockCreate,
    BlockDelete,
}

impl NatEventKind {
    pub fn label(self) -> &'static str {
        match self {
            NatEventKind::Create => "create",
            NatEventKind::Delete => "delete",
            NatEventKind::BlockCreate => "block-create",
            NatEventKind::BlockDelete => "block-delete",
        }
    }
}

/// The external ports of a block: `first`, then every `step`th up to `last`, `ports` in all
/// (RFC 8158's portRangeStart, portRangeEnd, portRangeStepSize and portRangeNumPorts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortBlock {
    pub first: u16,
    pub last: u16,
    pub step: u16,
    pub ports: u16,
}

/// One mapping event, as RFC 8158's NAT44 BIB events describe it (no destination: a mapping
/// is endpoint-independent), or one port block event: then `block` names the ports, the
/// protocol is 0 (the block holds its ports in every protocol) and so are both ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatEvent {
    /// The worker's clock (its pipeline's `now_ns`) in the loop the event happened in.
    pub at_ns: u64,
    pub kind: NatEventKind,
    /// The IP protocol (6, 17, 1: the port is an ICMP query id).
    pub protocol: u8,
    pub internal: (Ipv4Addr, u16),
    pub external: (Ipv4Addr, u16),
    pub block: Option<PortBlock>,
}

/// One worker's queue of NAT events (`EventLog`), written by that worker only.
pub type NatLog = EventLog<NatEvent>;

impl NatLog {
    /// Queues the event, stamped with the worker's clock, or counts it lost when the queue
    /// is full. Lock-free, no allocation.
    #[inline]
    pub(crate) fn record(
        &self,
        kind: NatEventKind,
        protocol: u8,
        internal: (Ipv4Addr, u16),
        external: (Ipv4Addr, u16),
    ) {
        self.push(NatEvent {
            at_ns: self.now_ns(),
            kind,
            protocol,
            internal,
            external,
            block: None,
        });
    }

    /// Queues a block event (`kind` is `BlockCreate` or `BlockDelete`) as [`record`] does.
    ///
    /// [`record`]: Self::record
    #[inline]
    pub(crate) fn record_block(
        &self,
        kind: NatEventKind,
        host: Ipv4Addr,
        address: Ipv4Addr,
        block: PortBlock,
    ) {
        self.push(NatEvent {
            at_ns: self.now_ns(),
            kind,
            protocol: 0,
            internal: (host, 0),
            external: (address, 0),
            block: Some(block),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(log: &NatLog, port: u16) {
        log.record(
            NatEventKind::Create,
            17,
            (Ipv4Addr::new(192, 168, 10, 2), port),
            (Ipv4Addr::new(10, 0, 0, 1), port),
        );
    }

    #[test]
    fn events_carry_the_workers_clock_of_their_loop() {
        let log = NatLog::new(4);
        log.set_now(1_000);
        record(&log, 1);
        log.set_now(5_000);
        record(&log, 2);
        let mut stamps = Vec::new();
        log.drain(|e| stamps.push(e.at_ns));
        assert_eq!(stamps, [1_000, 5_000]);
        assert_eq!(log.now_ns(), 5_000);
    }
}

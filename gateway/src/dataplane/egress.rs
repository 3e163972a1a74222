//! Batching packets per output port for one TX queue, shared by workers and the control
//! thread: one tx_burst per port per loop, refused packets freed and counted.

use pipeline::l3::fragment;
use pipeline::{DropReason, WorkerCounters};

use std::sync::Arc;

use crate::dataplane::port_layout::Link;
use crate::dataplane::pppoe_frames::{self, SessionStates};
use crate::dpdk::{Mbuf, MbufBatch, Mempool, TxQueue};

pub struct Egress {
    /// This thread's TX queue on each port, and the burst gathering for it.
    queues: Vec<TxQueue>,
    batches: Vec<MbufBatch>,
    /// Per interface: its port, and its 802.1Q tag if it is a VLAN subinterface.
    links: Vec<Link>,
    /// Per port: whether the NIC inserts tags (else they are written here, in software).
    nic_inserts_tags: Vec<bool>,
    /// The PPPoE interfaces' sessions, for the links that run one.
    sessions: Arc<SessionStates>,
}

impl Egress {
    /// `queues` is indexed by port number (`PortLayout`), `links` by interface number; every
    /// link names one of the queues' ports. `sessions` frames the PPPoE links' datagrams.
    pub fn new(queues: Vec<TxQueue>, links: Vec<Link>, sessions: Arc<SessionStates>) -> Self {
        assert!(
            links
                .iter()
                .all(|link| usize::from(link.port) < queues.len()),
            "an interface on a port without a queue"
        );
        let batches = queues.iter().map(|_| MbufBatch::new()).collect();
        let nic_inserts_tags = queues.iter().map(TxQueue::vlan_insert).collect();
        Egress {
            queues,
            batches,
            links,
            nic_inserts_tags,
            sessions,
        }
    }

    /// How many interfaces there are to send by.
    pub fn interface_count(&self) -> usize {
        self.links.len()
    }

    /// An empty burst on every queue, for the bonds' LACPDUs on quiet links.
    pub fn tx_idle(&mut self) {
        for queue in &mut self.queues {
            queue.tx_burst_idle();
        }
    }

    /// Queues `mbuf` to leave by interface `iface` (in its PPPoE session, tagged for a VLAN
    /// subinterface).
    #[inline]
    pub fn send(&mut self, iface: u16, mut mbuf: Mbuf, counters: &WorkerCounters) {
        let Some(link) = self.links.get(usize::from(iface)) else {
            counters.record_drop(DropReason::NotOurMac);
            return;
        };
        if link.pppoe {
            if let Err(reason) = pppoe_frames::encapsulate(self.sessions.get(iface), &mut mbuf) {
                counters.record_drop(reason);
                return;
            }
        }
        if let Some(counters) = counters.interface(iface) {
            counters.count_tx(mbuf.len());
        }
        let index = usize::from(link.port);
        if let Some(tci) = link.vlan {
            if self.nic_inserts_tags[index] {
                mbuf.request_tx_vlan(tci);
            } else if !mbuf.push_vlan_tag(tci) {
                counters.record_drop(DropReason::NoBuffer);
                return;
            }
        }
        if let Err(mbuf) = self.batches[index].push(mbuf) {
            self.flush_port(index, counters);
            // The batch is empty after a flush, so this push succeeds.
            let _ = self.batches[index].push(mbuf);
        }
    }

    /// Splits a datagram larger than `mtu` into fragments and queues them on `port`.
    pub fn send_fragments(
        &mut self,
        port: u16,
        original: Mbuf,
        mtu: u16,
        pool: &Mempool,
        counters: &WorkerCounters,
    ) {
        split_into_fragments(&original, mtu, pool, counters, |piece| {
            self.send(port, piece, counters)
        });
    }

    pub fn flush(&mut self, counters: &WorkerCounters) {
        for index in 0..self.batches.len() {
            self.flush_port(index, counters);
        }
    }

    #[inline]
    fn flush_port(&mut self, index: usize, counters: &WorkerCounters) {
        let (sent, refused) = self.queues[index].tx_burst(&mut self.batches[index]);
        counters.transmitted.add(sent as u64);
        if refused > 0 {
            counters.record_drops(DropReason::TxQueueFull, refused as u64);
        }
    }
}

/// Writes the fragments of a datagram larger than `mtu` into fresh buffers from `pool` and
/// hands each to `emit`. The original is left to the caller to free.
pub fn split_into_fragments(
    original: &Mbuf,
    mtu: u16,
    pool: &Mempool,
    counters: &WorkerCounters,
    mut emit: impl FnMut(Mbuf),
) {
    let count = fragment::fragment_count(original.data(), mtu);
    if count == 0 {
        counters.record_drop(DropReason::MalformedIpv4);
        return;
    }
    for index in 0..count {
        let Some(mut piece) = Mbuf::alloc(pool) else {
            counters.record_drop(DropReason::NoBuffer);
            return;
        };
        let written = fragment::write_fragment(original.data(), mtu, index, piece.room_mut());
        match written.map(|len| piece.set_len(len)) {
            Some(Ok(())) => emit(piece),
            _ => {
                counters.record_drop(DropReason::NoBuffer);
                return;
            }
        }
    }
}

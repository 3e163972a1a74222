//! A worker's end of `gateway ctl trace`: while a trace is armed, the worker explains each
//! packet of a burst that matches the trace's filter before the pipeline runs it (its flow,
//! or the firewall's decision on the flow it would start), and records what the pipeline then
//! did (the verdict, the tuple as it leaves, its next hop's MAC). Armed and answered as
//! [`super::armed`] says; unarmed, a loop pays one load of a flag nobody writes and a burst
//! one branch (`gateway bench` measures it: `trace_unarmed`).

use super::armed::{Armed, ArmedRequest, Arming};
use super::mailbox::MailboxSender;
use pipeline::flow::FlowKey;
use pipeline::pipeline::fast_path::frame_key;
use pipeline::pipeline::operator::explain::Explanation;
use pipeline::pipeline::operator::flow_listing::FlowFilter;
use pipeline::wire::EthernetFrame;
use pipeline::{Ingress, PacketBuf, Pipeline, Verdict, MAX_BURST};

/// What the ctl thread asks: the next `count` packets matching `filter` (its host, port and
/// protocol; a state does not apply to packets) on this worker.
pub struct TraceRequest {
    pub filter: FlowFilter,
    pub arming: Arming<TraceRecord>,
}

impl ArmedRequest for TraceRequest {
    type Record = TraceRecord;
    fn arming(&mut self) -> &mut Arming<TraceRecord> {
        &mut self.arming
    }
}

/// One traced packet.
#[derive(Clone, Copy, Debug)]
pub struct TraceRecord {
    pub worker: u16,
    pub ingress: Ingress,
    pub length: usize,
    pub explanation: Explanation,
    pub verdict: Verdict,
    /// The tuple as the packet leaves (after NAT), if it is sent.
    pub sent_as: Option<FlowKey>,
    /// The destination MAC it is sent to.
    pub next_hop_mac: Option<[u8; 6]>,
}

/// The ctl thread's end.
pub type TraceSender = MailboxSender<TraceRequest>;

pub struct TraceLink {
    worker: u16,
    armed: Armed<TraceRequest>,
}

/// The packets of a burst being traced: their place in the burst and their explanation.
pub type Traced = arrayvec::ArrayVec<(usize, Explanation), MAX_BURST>;

impl TraceLink {
    pub fn pair(worker: u16) -> (TraceSender, TraceLink) {
        let (requests, armed) = Armed::pair();
        (requests, TraceLink { worker, armed })
    }

    /// Once per poll loop (see [`Armed::poll`]).
    #[inline]
    pub fn poll(&mut self) {
        self.armed.poll();
    }

    #[inline]
    pub fn is_armed(&self) -> bool {
        self.armed.is_armed()
    }

    /// Before the pipeline: the burst's packets the trace wants, explained.
    #[cold]
    pub fn before(
        &self,
        pipeline: &Pipeline,
        packets: &[PacketBuf],
        ingress: &[Ingress],
    ) -> Traced {
        let mut traced = Traced::new();
        let Some(active) = self.armed.active() else {
            return traced;
        };
        for (i, (packet, &arrived)) in packets.iter().zip(ingress).enumerate() {
            let explanation = pipeline.explain(packet.bytes(), arrived);
            if explanation
                .key
                .is_some_and(|key| active.filter.matches_packet(&key))
            {
                traced.push((i, explanation));
            }
        }
        traced
    }

    /// After the pipeline: records what became of the traced packets. The trace ends when it
    /// has its count or when nobody reads its records any more.
    #[cold]
    pub fn after(
        &mut self,
        traced: Traced,
        packets: &[PacketBuf],
        ingress: &[Ingress],
        verdicts: &[Verdict],
    ) {
        for (i, explanation) in traced {
            let packet = &packets[i];
            let sent = matches!(
                verdicts[i],
                Verdict::Transmit { .. } | Verdict::Fragment { .. }
            );
            let record = TraceRecord {
                worker: self.worker,
                ingress: ingress[i],
                length: packet.len(),
                explanation,
                verdict: verdicts[i],
                sent_as: sent.then(|| frame_key(packet.bytes())).flatten(),
                next_hop_mac: sent.then(|| destination_mac(packet.bytes())).flatten(),
            };
            if !self.armed.deliver(record) {
                return;
            }
        }
    }
}

fn destination_mac(frame: &[u8]) -> Option<[u8; 6]> {
    EthernetFrame::new_checked(frame)
        .ok()
        .map(|f| f.dst_addr().0)
}

//! A worker's end of `gateway ctl capture --drops`: while a drop capture is armed, the worker
//! copies each packet of a burst as it arrived (before the pipeline rewrites anything), and
//! sends back the copies of those the pipeline then dropped for one of the asked reasons.
//! No port capture can show them: a dropped packet is never sent, and on receipt nothing
//! tells it from one that passes.
//!
//! Armed and answered as [`super::armed`] says, the burst's copies kept in a buffer this link
//! allocated at start, so the worker allocates nothing. Unarmed, a loop pays one load of a
//! flag nobody writes and a burst one branch, as `gateway ctl trace` does. Drops decided after the pipeline (a full
//! transmit queue, a full ring to another worker or the control thread) are not seen here:
//! they are counted, under their reasons, in `gateway ctl show drops`.

use super::armed::{Armed, ArmedRequest, Arming};
use super::mailbox::MailboxSender;
use pipeline::verdict::{DropReason, ReasonSet};
use pipeline::{Ingress, PacketBuf, Verdict, MAX_BURST};

/// The most bytes of a dropped frame a capture keeps: a whole frame of the mbufs' default
/// data room.
pub const SNAPLEN: usize = 2048;

/// What the ctl thread asks: the next `count` packets this worker drops for one of `reasons`.
pub struct DropCaptureRequest {
    pub reasons: ReasonSet,
    pub arming: Arming<DroppedPacket>,
}

impl ArmedRequest for DropCaptureRequest {
    type Record = DroppedPacket;
    fn arming(&mut self) -> &mut Arming<DroppedPacket> {
        &mut self.arming
    }
}

/// One dropped packet, as it arrived.
#[derive(Clone, Copy)]
pub struct DroppedPacket {
    pub worker: u16,
    pub ingress: Ingress,
    pub reason: DropReason,
    /// The frame's length as received.
    pub len: usize,
    /// Its first `min(len, SNAPLEN)` bytes.
    pub bytes: [u8; SNAPLEN],
}

impl DroppedPacket {
    /// The bytes kept of the frame.
    pub fn frame(&self) -> &[u8] {
        &self.bytes[..self.len.min(SNAPLEN)]
    }
}

/// The ctl thread's end.
pub type DropCaptureSender = MailboxSender<DropCaptureRequest>;

pub struct DropTap {
    worker: u16,
    armed: Armed<DropCaptureRequest>,
    /// The armed burst's frames as they arrived, and their lengths.
    arrived: Box<[[u8; SNAPLEN]]>,
    lens: [usize; MAX_BURST],
}

impl DropTap {
    pub fn pair(worker: u16) -> (DropCaptureSender, DropTap) {
        let (requests, armed) = Armed::pair();
        (
            requests,
            DropTap {
                worker,
                armed,
                arrived: vec![[0; SNAPLEN]; MAX_BURST].into_boxed_slice(),
                lens: [0; MAX_BURST],
            },
        )
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

    /// Before the pipeline: keeps a copy of each of the burst's frames.
    #[cold]
    pub fn before(&mut self, packets: &[PacketBuf]) {
        for ((copy, len), packet) in self.arrived.iter_mut().zip(&mut self.lens).zip(packets) {
            let bytes = packet.bytes();
            let kept = bytes.len().min(SNAPLEN);
            copy[..kept].copy_from_slice(&bytes[..kept]);
            *len = bytes.len();
        }
    }

    /// After the pipeline: sends the copies of the packets it dropped for an asked reason.
    /// The capture ends when it has its count or when nobody reads its records any more;
    /// a record the channel has no room for is not sent.
    #[cold]
    pub fn after(&mut self, ingress: &[Ingress], verdicts: &[Verdict]) {
        let Some(reasons) = self.armed.active().map(|active| active.reasons) else {
            return;
        };
        for (i, verdict) in verdicts.iter().enumerate() {
            let Verdict::Drop(reason) = *verdict else {
                continue;
            };
            if !reasons.contains(reason) {
                continue;
            }
            let (Some(bytes), Some(&len), Some(&arrived)) =
                (self.arrived.get(i), self.lens.get(i), ingress.get(i))
            else {
                continue;
            };
            let record = DroppedPacket {
                worker: self.worker,
                ingress: arrived,
                reason,
                len,
                bytes: *bytes,
            };
            if !self.armed.deliver(record) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn ingress(port: u16) -> Ingress {
        Ingress {
            port,
            handed_off: false,
        }
    }

    #[test]
    fn only_packets_dropped_for_an_asked_reason_come_back_as_they_arrived() {
        let (requests, mut tap) = DropTap::pair(3);
        let (records_in, records) = crossbeam_channel::bounded(8);
        let mut reasons = ReasonSet::default();
        reasons.insert(DropReason::ConntrackInvalid);
        let done = Arc::new(AtomicBool::new(false));
        let request = DropCaptureRequest {
            reasons,
            arming: Arming {
                count: 8,
                records: records_in,
                done: done.clone(),
            },
        };
        assert!(requests.try_send(request).is_ok());
        assert!(!tap.is_armed());
        tap.poll();
        assert!(tap.is_armed());

        let mut rooms = [[1u8; 64], [2u8; 64], [3u8; 64]];
        let mut packets: Vec<PacketBuf> = rooms
            .iter_mut()
            .map(|room| PacketBuf::new(room, 60))
            .collect();
        tap.before(&packets);
        // What the pipeline does to a packet after the copy must not show in the capture.
        packets[1].bytes_mut()[0] = 0xee;
        let verdicts = [
            Verdict::Drop(DropReason::ConntrackInvalid),
            Verdict::Drop(DropReason::ConntrackInvalid),
            Verdict::Drop(DropReason::FirewallDrop),
        ];
        tap.after(&[ingress(0), ingress(1), ingress(2)], &verdicts);
        let got: Vec<DroppedPacket> = records.try_iter().collect();
        assert_eq!(got.len(), 2, "the firewall's drop was not asked for");
        assert_eq!(got[1].worker, 3);
        assert_eq!(got[1].ingress.port, 1);
        assert_eq!(got[1].reason, DropReason::ConntrackInvalid);
        assert_eq!(got[1].frame(), &[2u8; 60][..], "as it arrived, 60 bytes");

        done.store(true, Ordering::Relaxed);
        tap.poll();
        assert!(!tap.is_armed(), "disarmed once the ctl thread is done");
    }

    #[test]
    fn a_capture_disarms_itself_at_its_count() {
        let (requests, mut tap) = DropTap::pair(0);
        let (records_in, records) = crossbeam_channel::bounded(8);
        let mut reasons = ReasonSet::default();
        reasons.insert(DropReason::FirewallDrop);
        let request = DropCaptureRequest {
            reasons,
            arming: Arming {
                count: 1,
                records: records_in,
                done: Arc::new(AtomicBool::new(false)),
            },
        };
        assert!(requests.try_send(request).is_ok());
        tap.poll();
        let mut rooms = [[0u8; 64], [0u8; 64]];
        let packets: Vec<PacketBuf> = rooms
            .iter_mut()
            .map(|room| PacketBuf::new(room, 64))
            .collect();
        tap.before(&packets);
        let drop = Verdict::Drop(DropReason::FirewallDrop);
        tap.after(&[ingress(0), ingress(0)], &[drop, drop]);
        assert_eq!(records.try_iter().count(), 1);
        assert!(!tap.is_armed());
    }
}

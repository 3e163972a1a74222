//! NAT mapping events as IPFIX (RFC 7011) over UDP, in RFC 8158's NAT44 BIB create and delete
//! record: the time, the event, the internal address and port, the external address and port,
//! the protocol. Each message carries its template set, so a collector that starts late (or
//! loses a datagram) decodes the next message at once, as RFC 7011 10.3.6 lets UDP exporters do.

use std::time::Duration;

use pipeline::state::nat::{NatEvent, NatEventKind};

const VERSION: u16 = 10;
const HEADER_LEN: usize = 16;
const TEMPLATE_SET_ID: u16 = 2;
/// Our one template's id (data set ids start at 256).
const TEMPLATE_ID: u16 = 256;
/// RFC 8158 natEvent values (IANA's "NAT Event Type" registry; 6 and 7 are NAT64 sessions).
const NAT44_BIB_CREATE: u8 = 8;
const NAT44_BIB_DELETE: u8 = 9;

/// The record's fields: (information element, length). IANA's IPFIX registry numbers.
const FIELDS: [(u16, u16); 7] = [
    (323, 8), // observationTimeMilliseconds
    (230, 1), // natEvent
    (8, 4),   // sourceIPv4Address
    (225, 4), // postNATSourceIPv4Address
    (4, 1),   // protocolIdentifier
    (7, 2),   // sourceTransportPort
    (227, 2), // postNAPTSourceTransportPort
];
const RECORD_LEN: usize = 22;
const TEMPLATE_SET_LEN: usize = 4 + 4 + 4 * FIELDS.len();
/// Records per message: the message stays under 1,400 bytes, below any path's MTU.
pub const RECORDS_PER_MESSAGE: usize = 50;

const _: () = {
    let mut sum = 0;
    let mut i = 0;
    while i < FIELDS.len() {
        sum += FIELDS[i].1 as usize;
        i += 1;
    }
    assert!(sum == RECORD_LEN);
    assert!(HEADER_LEN + TEMPLATE_SET_LEN + 4 + RECORDS_PER_MESSAGE * RECORD_LEN <= 1400);
};

/// Builds messages for one exporter: its observation domain and its sequence number (the
/// data records it has exported before, RFC 7011 3.1).
pub struct Exporter {
    domain: u32,
    sequence: u32,
}

impl Exporter {
    pub fn new(domain: u32) -> Exporter {
        Exporter {
            domain,
            sequence: 0,
        }
    }

    /// One message with the template and `events` (at most [`RECORDS_PER_MESSAGE`]), each
    /// record with its event's time, exported at `at_ms` (Unix milliseconds), into `out`.
    pub fn message(&mut self, events: &[(Duration, NatEvent)], at_ms: u64, out: &mut Vec<u8>) {
        let events = &events[..events.len().min(RECORDS_PER_MESSAGE)];
        out.clear();
        let length = HEADER_LEN + TEMPLATE_SET_LEN + 4 + events.len() * RECORD_LEN;
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&(length as u16).to_be_bytes());
        out.extend_from_slice(&((at_ms / 1000) as u32).to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.domain.to_be_bytes());

        out.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
        out.extend_from_slice(&(TEMPLATE_SET_LEN as u16).to_be_bytes());
        out.extend_from_slice(&TEMPLATE_ID.to_be_bytes());
        out.extend_from_slice(&(FIELDS.len() as u16).to_be_bytes());
        for (element, len) in FIELDS {
            out.extend_from_slice(&element.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
        }

        out.extend_from_slice(&TEMPLATE_ID.to_be_bytes());
        out.extend_from_slice(&((4 + events.len() * RECORD_LEN) as u16).to_be_bytes());
        for (unix, event) in events {
            out.extend_from_slice(&(unix.as_millis() as u64).to_be_bytes());
            out.push(match event.kind {
                NatEventKind::Create => NAT44_BIB_CREATE,
                NatEventKind::Delete => NAT44_BIB_DELETE,
            });
            out.extend_from_slice(&event.internal.0.octets());
            out.extend_from_slice(&event.external.0.octets());
            out.push(event.protocol);
            out.extend_from_slice(&event.internal.1.to_be_bytes());
            out.extend_from_slice(&event.external.1.to_be_bytes());
        }
        debug_assert_eq!(out.len(), length);
        self.sequence = self.sequence.wrapping_add(events.len() as u32);
    }
}

/// A decoded record: time, natEvent, internal and external address, protocol, internal and
/// external port.
#[cfg(test)]
type Record = (
    u64,
    u8,
    std::net::Ipv4Addr,
    std::net::Ipv4Addr,
    u8,
    u16,
    u16,
);

/// The events of one message, decoded back (for the tests: what a collector would read).
#[cfg(test)]
fn decode(message: &[u8]) -> (u32, Vec<Record>) {
    let be16 = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]);
    let be32 = |at: usize| u32::from_be_bytes(message[at..at + 4].try_into().unwrap());
    assert_eq!(be16(0), VERSION);
    assert_eq!(usize::from(be16(2)), message.len());
    let sequence = be32(8);
    let mut at = HEADER_LEN;
    let mut records = Vec::new();
    while at < message.len() {
        let (set, len) = (be16(at), usize::from(be16(at + 2)));
        if set == TEMPLATE_ID {
            let mut record = at + 4;
            while record + RECORD_LEN <= at + len {
                let ip = |at: usize| std::net::Ipv4Addr::from(be32(at));
                records.push((
                    u64::from_be_bytes(message[record..record + 8].try_into().unwrap()),
                    message[record + 8],
                    ip(record + 9),
                    ip(record + 13),
                    message[record + 17],
                    be16(record + 18),
                    be16(record + 20),
                ));
                record += RECORD_LEN;
            }
        } else {
            assert_eq!(set, TEMPLATE_SET_ID);
            assert_eq!(be16(at + 4), TEMPLATE_ID);
            assert_eq!(usize::from(be16(at + 6)), FIELDS.len());
        }
        at += len;
    }
    (sequence, records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn messages_carry_the_template_and_count_their_records() {
        // Each record carries its own event's time, not the export's.
        let event = |kind, port, unix_ms| {
            let event = NatEvent {
                at_ns: 0,
                kind,
                protocol: 17,
                internal: (Ipv4Addr::new(192, 168, 10, 2), port),
                external: (Ipv4Addr::new(10, 0, 0, 1), port + 1),
            };
            (Duration::from_millis(unix_ms), event)
        };
        let mut exporter = Exporter::new(1);
        let mut message = Vec::new();
        exporter.message(
            &[
                event(NatEventKind::Create, 5300, 1_796_151_600_123),
                event(NatEventKind::Delete, 5301, 1_796_151_600_456),
            ],
            1_796_151_600_500,
            &mut message,
        );
        let (sequence, records) = decode(&message);
        assert_eq!(sequence, 0);
        assert_eq!(
            records,
            [
                (
                    1_796_151_600_123,
                    8,
                    Ipv4Addr::new(192, 168, 10, 2),
                    Ipv4Addr::new(10, 0, 0, 1),
                    17,
                    5300,
                    5301
                ),
                (
                    1_796_151_600_456,
                    9,
                    Ipv4Addr::new(192, 168, 10, 2),
                    Ipv4Addr::new(10, 0, 0, 1),
                    17,
                    5301,
                    5302
                ),
            ]
        );
        let many = vec![event(NatEventKind::Create, 1, 0); RECORDS_PER_MESSAGE + 5];
        exporter.message(&many, 0, &mut message);
        let (sequence, records) = decode(&message);
        assert_eq!((sequence, records.len()), (2, RECORDS_PER_MESSAGE));
        assert!(message.len() <= 1400);
        exporter.message(&[], 0, &mut message);
        assert_eq!(decode(&message).0, 2 + RECORDS_PER_MESSAGE as u32);
    }
}

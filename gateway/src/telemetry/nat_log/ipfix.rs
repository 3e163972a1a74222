//! NAT mapping events as IPFIX (RFC 7011) over UDP, in RFC 8158's NAT44 BIB create and delete
//! record: the time, the event, the internal address and port, the external address and port,
//! the protocol; and port block events (`nat.port_block_size`) in its port block allocation
//! and de-allocation record: the time, the event, the host, the external address and the
//! ports' start, end, step and count. Each message carries its template set, so a collector that starts late (or
//! loses a datagram) decodes the next message at once, as RFC 7011 10.3.6 lets UDP exporters do.

use std::time::Duration;

#[cfg(test)]
use pipeline::state::nat::PortBlock;
use pipeline::state::nat::{NatEvent, NatEventKind};

const VERSION: u16 = 10;
const HEADER_LEN: usize = 16;
const TEMPLATE_SET_ID: u16 = 2;
/// Our templates' ids (data set ids start at 256): mappings, and port blocks.
const MAPPING_TEMPLATE_ID: u16 = 256;
const BLOCK_TEMPLATE_ID: u16 = 257;
/// RFC 8158 natEvent values (IANA's "NAT Event Type" registry; 6 and 7 are NAT64 sessions).
const NAT44_BIB_CREATE: u8 = 8;
const NAT44_BIB_DELETE: u8 = 9;
const PORT_BLOCK_ALLOCATION: u8 = 16;
const PORT_BLOCK_DEALLOCATION: u8 = 17;

/// The mapping record's fields: (information element, length). IANA's IPFIX registry numbers.
const MAPPING_FIELDS: [(u16, u16); 7] = [
    (323, 8), // observationTimeMilliseconds
    (230, 1), // natEvent
    (8, 4),   // sourceIPv4Address
    (225, 4), // postNATSourceIPv4Address
    (4, 1),   // protocolIdentifier
    (7, 2),   // sourceTransportPort
    (227, 2), // postNAPTSourceTransportPort
];
/// The port block record's (RFC 8158 4.4): the host, its external address and the ports.
const BLOCK_FIELDS: [(u16, u16); 8] = [
    (323, 8), // observationTimeMilliseconds
    (230, 1), // natEvent
    (8, 4),   // sourceIPv4Address
    (225, 4), // postNATSourceIPv4Address
    (361, 2), // portRangeStart
    (362, 2), // portRangeEnd
    (363, 2), // portRangeStepSize
    (364, 2), // portRangeNumPorts
];
const MAPPING_RECORD_LEN: usize = 22;
const BLOCK_RECORD_LEN: usize = 25;
const TEMPLATE_SET_LEN: usize = 4 + (4 + 4 * MAPPING_FIELDS.len()) + (4 + 4 * BLOCK_FIELDS.len());
/// Records per message: the message stays under 1,400 bytes, below any path's MTU, even if
/// every record needs a data set of its own (mappings and blocks alternating).
pub const RECORDS_PER_MESSAGE: usize = 40;

const fn record_len(fields: &[(u16, u16)]) -> usize {
    let mut sum = 0;
    let mut i = 0;
    while i < fields.len() {
        sum += fields[i].1 as usize;
        i += 1;
    }
    sum
}

const _: () = {
    assert!(record_len(&MAPPING_FIELDS) == MAPPING_RECORD_LEN);
    assert!(record_len(&BLOCK_FIELDS) == BLOCK_RECORD_LEN);
    assert!(HEADER_LEN + TEMPLATE_SET_LEN + RECORDS_PER_MESSAGE * (4 + BLOCK_RECORD_LEN) <= 1400);
};

/// The template an event's record follows.
fn template_of(event: &NatEvent) -> u16 {
    if event.block.is_some() {
        BLOCK_TEMPLATE_ID
    } else {
        MAPPING_TEMPLATE_ID
    }
}

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

    /// One message with both templates and `events` (at most [`RECORDS_PER_MESSAGE`]), in
    /// order, a data set for each run of one template, each record with its event's time,
    /// exported at `at_ms` (Unix milliseconds), into `out`.
    pub fn message(&mut self, events: &[(Duration, NatEvent)], at_ms: u64, out: &mut Vec<u8>) {
        let events = &events[..events.len().min(RECORDS_PER_MESSAGE)];
        out.clear();
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&[0, 0]); // the length, written at the end
        out.extend_from_slice(&((at_ms / 1000) as u32).to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.domain.to_be_bytes());

        out.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
        out.extend_from_slice(&(TEMPLATE_SET_LEN as u16).to_be_bytes());
        for (id, fields) in [
            (MAPPING_TEMPLATE_ID, &MAPPING_FIELDS[..]),
            (BLOCK_TEMPLATE_ID, &BLOCK_FIELDS[..]),
        ] {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
            for (element, len) in fields {
                out.extend_from_slice(&element.to_be_bytes());
                out.extend_from_slice(&len.to_be_bytes());
            }
        }

        for run in events.chunk_by(|a, b| template_of(&a.1) == template_of(&b.1)) {
            let set_start = out.len();
            out.extend_from_slice(&template_of(&run[0].1).to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            for (unix, event) in run {
                write_record(out, *unix, event);
            }
            let set_len = (out.len() - set_start) as u16;
            out[set_start + 2..set_start + 4].copy_from_slice(&set_len.to_be_bytes());
        }
        let length = out.len() as u16;
        out[2..4].copy_from_slice(&length.to_be_bytes());
        self.sequence = self.sequence.wrapping_add(events.len() as u32);
    }
}

fn write_record(out: &mut Vec<u8>, unix: Duration, event: &NatEvent) {
    out.extend_from_slice(&(unix.as_millis() as u64).to_be_bytes());
    out.push(match event.kind {
        NatEventKind::Create => NAT44_BIB_CREATE,
        NatEventKind::Delete => NAT44_BIB_DELETE,
        NatEventKind::BlockCreate => PORT_BLOCK_ALLOCATION,
        NatEventKind::BlockDelete => PORT_BLOCK_DEALLOCATION,
    });
    out.extend_from_slice(&event.internal.0.octets());
    out.extend_from_slice(&event.external.0.octets());
    match event.block {
        Some(block) => {
            for value in [block.first, block.last, block.step, block.ports] {
                out.extend_from_slice(&value.to_be_bytes());
            }
        }
        None => {
            out.push(event.protocol);
            out.extend_from_slice(&event.internal.1.to_be_bytes());
            out.extend_from_slice(&event.external.1.to_be_bytes());
        }
    }
}

/// A decoded mapping record: time, natEvent, internal and external address, protocol,
/// internal and external port.
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

/// A decoded block record: time, natEvent, internal and external address, then the ports'
/// start, end, step and count.
#[cfg(test)]
type BlockRecord = (u64, u8, std::net::Ipv4Addr, std::net::Ipv4Addr, [u16; 4]);

/// The records of one message, decoded back (for the tests: what a collector would read),
/// mappings and blocks apart, and the data sets' templates in order.
#[cfg(test)]
fn decode(message: &[u8]) -> (u32, Vec<Record>, Vec<BlockRecord>, Vec<u16>) {
    let be16 = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]);
    let be32 = |at: usize| u32::from_be_bytes(message[at..at + 4].try_into().unwrap());
    let ip = |at: usize| std::net::Ipv4Addr::from(be32(at));
    let time = |at: usize| u64::from_be_bytes(message[at..at + 8].try_into().unwrap());
    assert_eq!(be16(0), VERSION);
    assert_eq!(usize::from(be16(2)), message.len());
    let sequence = be32(8);
    let mut at = HEADER_LEN;
    let (mut records, mut blocks, mut sets) = (Vec::new(), Vec::new(), Vec::new());
    while at < message.len() {
        let (set, len) = (be16(at), usize::from(be16(at + 2)));
        match set {
            TEMPLATE_SET_ID => {
                assert_eq!(len, TEMPLATE_SET_LEN);
                assert_eq!(be16(at + 4), MAPPING_TEMPLATE_ID);
                assert_eq!(usize::from(be16(at + 6)), MAPPING_FIELDS.len());
                let block_template = at + 8 + 4 * MAPPING_FIELDS.len();
                assert_eq!(be16(block_template), BLOCK_TEMPLATE_ID);
                assert_eq!(usize::from(be16(block_template + 2)), BLOCK_FIELDS.len());
            }
            MAPPING_TEMPLATE_ID => {
                sets.push(set);
                let mut record = at + 4;
                while record + MAPPING_RECORD_LEN <= at + len {
                    records.push((
                        time(record),
                        message[record + 8],
                        ip(record + 9),
                        ip(record + 13),
                        message[record + 17],
                        be16(record + 18),
                        be16(record + 20),
                    ));
                    record += MAPPING_RECORD_LEN;
                }
            }
            BLOCK_TEMPLATE_ID => {
                sets.push(set);
                let mut record = at + 4;
                while record + BLOCK_RECORD_LEN <= at + len {
                    let ports = [17, 19, 21, 23].map(|offset| be16(record + offset));
                    blocks.push((
                        time(record),
                        message[record + 8],
                        ip(record + 9),
                        ip(record + 13),
                        ports,
                    ));
                    record += BLOCK_RECORD_LEN;
                }
            }
            other => panic!("unknown set {other}"),
        }
        at += len;
    }
    (sequence, records, blocks, sets)
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
                block: None,
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
        let (sequence, records, blocks, _) = decode(&message);
        assert_eq!(sequence, 0);
        assert!(blocks.is_empty());
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
        let (sequence, records, _, _) = decode(&message);
        assert_eq!((sequence, records.len()), (2, RECORDS_PER_MESSAGE));
        assert!(message.len() <= 1400);
        exporter.message(&[], 0, &mut message);
        assert_eq!(decode(&message).0, 2 + RECORDS_PER_MESSAGE as u32);
    }

    #[test]
    fn port_blocks_are_records_of_their_own_template_in_order() {
        let mapping = NatEvent {
            at_ns: 0,
            kind: NatEventKind::Create,
            protocol: 6,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 40000),
            external: (Ipv4Addr::new(10, 0, 0, 1), 40000),
            block: None,
        };
        let block = |kind| NatEvent {
            at_ns: 0,
            kind,
            protocol: 0,
            internal: (Ipv4Addr::new(192, 168, 10, 3), 0),
            external: (Ipv4Addr::new(10, 0, 0, 1), 0),
            block: Some(PortBlock {
                first: 1025,
                last: 1151,
                step: 2,
                ports: 64,
            }),
        };
        let at = Duration::from_millis(1_796_151_600_000);
        let events = [
            (at, block(NatEventKind::BlockCreate)),
            (at, mapping),
            (at, block(NatEventKind::BlockDelete)),
        ];
        let mut message = Vec::new();
        Exporter::new(1).message(&events, 1_796_151_600_100, &mut message);
        let (_, records, blocks, sets) = decode(&message);
        assert_eq!(
            sets,
            [BLOCK_TEMPLATE_ID, MAPPING_TEMPLATE_ID, BLOCK_TEMPLATE_ID]
        );
        assert_eq!(records.len(), 1);
        let expected = |event| {
            (
                1_796_151_600_000,
                event,
                Ipv4Addr::new(192, 168, 10, 3),
                Ipv4Addr::new(10, 0, 0, 1),
                [1025, 1151, 2, 64],
            )
        };
        assert_eq!(blocks, [expected(16), expected(17)]);
        let worst: Vec<_> = (0..RECORDS_PER_MESSAGE).map(|i| events[i % 2]).collect();
        Exporter::new(1).message(&worst, 0, &mut message);
        assert!(message.len() <= 1400, "{}", message.len());
    }
}

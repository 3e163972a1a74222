//! NAT mapping events as RFC 5424 syslog messages, one per event.

use pipeline::state::nat::NatEvent;

use crate::telemetry::protocol::protocol_name;

/// RFC 5424's SD-ID for our parameters: an enterprise number of the documentation range
/// (RFC 5612), as nothing else is registered for this gateway.
const SD_ID: &str = "nat@32473";
/// Severity informational (RFC 5424 6.2.1).
pub(crate) const SEVERITY_INFO: u8 = 6;

/// What every message of this gateway starts with.
pub(crate) struct Header {
    pub priority: u8,
    pub hostname: String,
    pub pid: u32,
}

/// `<134>1 2026-12-01T19:40:00.123Z gw gateway 4242 NAT [nat@32473 event="create"
/// protocol="udp" inside="192.168.10.2:5300" outside="10.0.0.1:5300"] NAT mapping create udp
/// 192.168.10.2:5300 -> 10.0.0.1:5300` (one line).
///
/// A port block's: `... NAT [nat@32473 event="block-create" inside="192.168.10.2"
/// outside="10.0.0.1" ports="1025-1151" step="2" count="64"] NAT port block create
/// 192.168.10.2 -> 10.0.0.1:1025-1151`.
pub(super) fn format_event(out: &mut Vec<u8>, header: &Header, timestamp: &str, event: &NatEvent) {
    use std::io::Write;
    let kind = event.kind.label();
    let _ = write!(
        out,
        "<{}>1 {timestamp} {} gateway {} NAT [{SD_ID} event=\"{kind}\" ",
        header.priority, header.hostname, header.pid
    );
    let _ = match event.block {
        Some(block) => {
            let (inside, outside) = (event.internal.0, event.external.0);
            let ports = format!("{}-{}", block.first, block.last);
            let what = kind.strip_prefix("block-").unwrap_or(kind);
            write!(
                out,
                "inside=\"{inside}\" outside=\"{outside}\" ports=\"{ports}\" step=\"{}\" count=\"{}\"] NAT port block {what} {inside} -> {outside}:{ports}",
                block.step, block.ports
            )
        }
        None => {
            let protocol = protocol_name(event.protocol);
            let inside = format!("{}:{}", event.internal.0, event.internal.1);
            let outside = format!("{}:{}", event.external.0, event.external.1);
            write!(
                out,
                "protocol=\"{protocol}\" inside=\"{inside}\" outside=\"{outside}\"] NAT mapping {kind} {protocol} {inside} -> {outside}"
            )
        }
    };
}

/// The host's name, or "-" (RFC 5424's nil value) when it cannot be read.
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::state::nat::NatEventKind;
    use std::net::Ipv4Addr;

    /// `event` as facility local0 (16) of host "gw", pid 42, at a fixed time.
    fn formatted(event: &NatEvent) -> String {
        let header = Header {
            priority: 16 * 8 + SEVERITY_INFO,
            hostname: "gw".into(),
            pid: 42,
        };
        let mut message = Vec::new();
        format_event(&mut message, &header, "2026-12-01T19:00:00.000Z", event);
        String::from_utf8(message).unwrap()
    }

    #[test]
    fn an_event_is_one_rfc5424_message() {
        let event = NatEvent {
            at_ns: 0,
            kind: NatEventKind::Delete,
            protocol: 17,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 5300),
            external: (Ipv4Addr::new(10, 0, 0, 1), 61000),
            block: None,
        };
        assert_eq!(
            formatted(&event),
            "<134>1 2026-12-01T19:00:00.000Z gw gateway 42 NAT [nat@32473 event=\"delete\" protocol=\"udp\" inside=\"192.168.10.2:5300\" outside=\"10.0.0.1:61000\"] NAT mapping delete udp 192.168.10.2:5300 -> 10.0.0.1:61000"
        );
    }

    #[test]
    fn a_port_block_is_one_message_naming_its_ports() {
        let event = NatEvent {
            at_ns: 0,
            kind: NatEventKind::BlockCreate,
            protocol: 0,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 0),
            external: (Ipv4Addr::new(10, 0, 0, 1), 0),
            block: Some(pipeline::state::nat::PortBlock {
                first: 1025,
                last: 1151,
                step: 2,
                ports: 64,
            }),
        };
        assert_eq!(
            formatted(&event),
            "<134>1 2026-12-01T19:00:00.000Z gw gateway 42 NAT [nat@32473 event=\"block-create\" inside=\"192.168.10.2\" outside=\"10.0.0.1\" ports=\"1025-1151\" step=\"2\" count=\"64\"] NAT port block create 192.168.10.2 -> 10.0.0.1:1025-1151"
        );
    }
}

//! NAT mapping events as RFC 5424 syslog messages, one per event.

use std::time::Duration;

use pipeline::state::nat::NatEvent;

use crate::ctl::protocol_name;

/// RFC 5424's SD-ID for our parameters: an enterprise number of the documentation range
/// (RFC 5612), as nothing else is registered for this gateway.
const SD_ID: &str = "nat@32473";
/// Severity informational (RFC 5424 6.2.1).
pub(super) const SEVERITY_INFO: u8 = 6;

/// What every message of this gateway starts with.
pub(super) struct Header {
    pub priority: u8,
    pub hostname: String,
    pub pid: u32,
}

/// `<134>1 2026-12-01T19:40:00.123Z gw gateway 4242 NAT [nat@32473 event="create"
/// protocol="udp" inside="192.168.10.2:5300" outside="10.0.0.1:5300"] NAT mapping create udp
/// 192.168.10.2:5300 -> 10.0.0.1:5300` (one line).
pub(super) fn format_event(out: &mut Vec<u8>, header: &Header, timestamp: &str, event: &NatEvent) {
    use std::io::Write;
    let (kind, protocol) = (event.kind.label(), protocol_name(event.protocol));
    let inside = format!("{}:{}", event.internal.0, event.internal.1);
    let outside = format!("{}:{}", event.external.0, event.external.1);
    let _ = write!(
        out,
        "<{}>1 {timestamp} {} gateway {} NAT [{SD_ID} event=\"{kind}\" protocol=\"{protocol}\" inside=\"{inside}\" outside=\"{outside}\"] NAT mapping {kind} {protocol} {inside} -> {outside}",
        header.priority, header.hostname, header.pid
    );
}

/// The host's name, or "-" (RFC 5424's nil value) when it cannot be read.
pub(super) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic()))
        .unwrap_or_else(|| "-".into())
}

/// UTC with milliseconds, e.g. `2026-12-01T19:40:00.123Z`.
pub(super) fn rfc3339(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs();
    let (days, day_secs) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        day_secs / 3600,
        day_secs / 60 % 60,
        day_secs % 60,
        since_epoch.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::state::nat::NatEventKind;
    use std::net::Ipv4Addr;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day in a century year) 12:34:56.789.
        assert_eq!(
            rfc3339(Duration::from_millis(951_827_696_789)),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(1_796_151_600)),
            "2026-12-01T19:00:00.000Z"
        );
    }

    #[test]
    fn an_event_is_one_rfc5424_message() {
        let header = Header {
            priority: 16 * 8 + SEVERITY_INFO,
            hostname: "gw".into(),
            pid: 42,
        };
        let event = NatEvent {
            kind: NatEventKind::Delete,
            protocol: 17,
            internal: (Ipv4Addr::new(192, 168, 10, 2), 5300),
            external: (Ipv4Addr::new(10, 0, 0, 1), 61000),
        };
        let mut message = Vec::new();
        format_event(&mut message, &header, "2026-12-01T19:00:00.000Z", &event);
        assert_eq!(
            String::from_utf8(message).unwrap(),
            "<134>1 2026-12-01T19:00:00.000Z gw gateway 42 NAT [nat@32473 event=\"delete\" protocol=\"udp\" inside=\"192.168.10.2:5300\" outside=\"10.0.0.1:61000\"] NAT mapping delete udp 192.168.10.2:5300 -> 10.0.0.1:61000"
        );
    }
}

//! The firewall log (`[firewall.log]`): each first packet a rule marked `log = true` decides,
//! as one RFC 5424 syslog message, over UDP (RFC 5426) or a Unix socket (`/dev/log`).
//!
//! The workers queue decisions within a budget each (`pipeline::state::firewall_log`); this
//! thread drains every queue every [`DRAIN_INTERVAL`] and sends them, as the NAT log does
//! (`crate::telemetry::nat_log`, whose transport and syslog header it shares). Over the budget, a full
//! queue or a failed send: counted, never a worker held up.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use pipeline::state::firewall::Action;
use pipeline::state::firewall_log::{FirewallEvent, FirewallLog};

use crate::config::FirewallLogConfig;
use crate::telemetry::nat_log::syslog::{self, Header};
use crate::telemetry::nat_log::{
    udp_socket_for, EventLogError, EventLogStats, LogThread, SyslogTransport,
};
use crate::telemetry::protocol::protocol_name;

/// RFC 5424's SD-ID for the firewall's parameters (the documentation enterprise number, as
/// the NAT log's).
const SD_ID: &str = "fw@32473";

pub type FirewallLogStats = EventLogStats<FirewallEvent>;

/// The firewall log's thread.
pub type FirewallLogger = LogThread<FirewallEvent>;

/// Starts the thread for the workers' queues `logs`, when `config` names a destination.
/// `interfaces`: the interfaces' names, in port order (restart-only, so they stay true).
pub fn spawn(
    config: &FirewallLogConfig,
    logs: Vec<Arc<FirewallLog>>,
    interfaces: Vec<String>,
) -> Result<Option<FirewallLogger>, EventLogError> {
    let mut transports = Vec::new();
    if let Some(to) = config.syslog_udp {
        let socket = udp_socket_for(to, "firewall.log.syslog_udp")?;
        transports.push(SyslogTransport::Udp(socket, to));
    }
    if let Some(path) = &config.syslog_unix {
        let socket = UnixDatagram::unbound().map_err(|source| EventLogError::UnixSocket {
            field: "firewall.log.syslog_unix",
            source,
        })?;
        transports.push(SyslogTransport::Unix(socket, path.clone()));
    }
    if transports.is_empty() {
        return Ok(None);
    }
    let header = Header {
        // Warning for what a rule dropped or rejected, notice for what it accepted.
        priority: config.facility * 8,
        hostname: syslog::hostname(),
        pid: std::process::id(),
    };
    let mut batch = Vec::new();
    let mut message = Vec::with_capacity(512);
    let send = move |stats: &FirewallLogStats| {
        stats.drain_dated(&mut batch, |event| event.at_ns);
        for (unix, event) in &batch {
            message.clear();
            let timestamp = crate::telemetry::timestamp::rfc3339(*unix);
            format_event(&mut message, &header, &timestamp, event, &interfaces);
            for transport in &transports {
                stats.count(&transport.send(&message), 1);
            }
        }
    };
    FirewallLogger::spawn("firewall-log", FirewallLogStats::new(logs), send).map(Some)
}

/// Syslog severity (RFC 5424 6.2.1): warning (4) for a drop or reject, notice (5) for an
/// accept.
fn severity(action: Action) -> u8 {
    match action {
        Action::Accept => 5,
        Action::Drop | Action::Reject => 4,
    }
}

/// `<132>1 2026-12-05T11:00:00.000Z gw gateway 42 FIREWALL [fw@32473 rule="no-discard"
/// action="drop" in="lan" out="wan" protocol="tcp" src="192.168.10.2:40000"
/// dst="10.0.0.2:9"] firewall drop by no-discard: tcp 192.168.10.2:40000 -> 10.0.0.2:9`
/// (one line). `out="local"` for traffic to the gateway; a port forward adds
/// `forwarded_to="192.168.10.5:80"`; what the gateway's kernel opened, `origin="kernel"`.
fn format_event(
    out: &mut Vec<u8>,
    header: &Header,
    timestamp: &str,
    event: &FirewallEvent,
    interfaces: &[String],
) {
    let name = |port: u16| {
        interfaces
            .get(usize::from(port))
            .map_or("?", String::as_str)
    };
    let action = event.action.name();
    let protocol = protocol_name(event.protocol);
    let (src, dst) = (
        format!("{}:{}", event.src.0, event.src.1),
        format!("{}:{}", event.dst.0, event.dst.1),
    );
    let _ = write!(
        out,
        "<{}>1 {timestamp} {} gateway {} FIREWALL [{SD_ID} rule=\"{}\" action=\"{action}\" in=\"{}\" out=\"{}\" protocol=\"{protocol}\" src=\"{src}\" dst=\"{dst}\"",
        header.priority + severity(event.action),
        header.hostname,
        header.pid,
        sd_escape(&event.rule),
        name(event.ingress),
        event.egress.map_or("local", name),
    );
    if let Some((address, port)) = event.forwarded_to {
        let _ = write!(out, " forwarded_to=\"{address}:{port}\"");
    }
    if event.from_kernel {
        let _ = write!(out, " origin=\"kernel\"");
    }
    let _ = write!(
        out,
        "] firewall {action} by {}: {protocol} {src} -> {dst}",
        event.rule
    );
}

/// A PARAM-VALUE with `"`, `\` and `]` escaped (RFC 5424 6.3.3).
fn sd_escape(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '"' | '\\' | ']') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_decision_is_one_rfc5424_message() {
        let header = Header {
            priority: 16 * 8,
            hostname: "gw".into(),
            pid: 42,
        };
        let event = FirewallEvent {
            at_ns: 0,
            rule: Arc::from("no \"discard\""),
            action: Action::Drop,
            ingress: 0,
            egress: Some(1),
            protocol: 6,
            src: (Ipv4Addr::new(192, 168, 10, 2), 40000),
            dst: (Ipv4Addr::new(10, 0, 0, 2), 9),
            forwarded_to: None,
            from_kernel: false,
        };
        let mut message = Vec::new();
        let interfaces = ["lan".to_string(), "wan".to_string()];
        format_event(
            &mut message,
            &header,
            "2026-12-05T11:00:00.000Z",
            &event,
            &interfaces,
        );
        assert_eq!(
            String::from_utf8(message).unwrap(),
            "<132>1 2026-12-05T11:00:00.000Z gw gateway 42 FIREWALL [fw@32473 rule=\"no \\\"discard\\\"\" action=\"drop\" in=\"lan\" out=\"wan\" protocol=\"tcp\" src=\"192.168.10.2:40000\" dst=\"10.0.0.2:9\"] firewall drop by no \"discard\": tcp 192.168.10.2:40000 -> 10.0.0.2:9"
        );
    }
}

//! The firewall log (`[firewall.log]`): each first packet a rule (a port forward, a zone
//! pair) marked `log = true` decides, IPv4's and IPv6's, as one RFC 5424 syslog message, over
//! UDP (RFC 5426) or a Unix socket (`/dev/log`), and/or as one JSON object a line appended to
//! a file (`json_file`).
//!
//! The workers queue decisions within a budget each (`pipeline::state::firewall_log`); this
//! thread drains every queue every [`DRAIN_INTERVAL`] and sends them, as the NAT log does
//! (`crate::telemetry::nat_log`, whose transport and syslog header it shares). Over the budget, a full
//! queue or a failed send: counted, never a worker held up.

use std::fs::File;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use pipeline::state::firewall::{Action, ZoneId};
use pipeline::state::firewall_log::{FirewallEvent, FirewallLog};
use pipeline::{DropReason, RouterConfig};
use serde::Serialize;

use crate::config::FirewallLogConfig;
use crate::dataplane::published::Published;
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

/// What an event's numbers are called: its interfaces' names, in port order (restart-only,
/// so they stay true), and its zones' (`local` for the gateway), by zone id.
struct Labels {
    interfaces: Vec<String>,
    zones: Vec<Option<Arc<str>>>,
}

impl Labels {
    fn interface(&self, port: u16) -> &str {
        self.interfaces
            .get(usize::from(port))
            .map_or("?", String::as_str)
    }

    fn zone(&self, zone: ZoneId) -> &str {
        match self.zones.get(usize::from(zone.0)) {
            Some(Some(name)) => name,
            _ if zone == ZoneId::LOCAL => "local",
            _ => "?",
        }
    }
}

/// The zones' names as the published router config labels its pairs (the metrics' and
/// `ctl show rules`' `from`/`to`), taken again whenever a reload publishes another: a reload
/// may rename a zone, or give an interface another. An event queued just before a reload and
/// sent just after (within [`DRAIN_INTERVAL`]) is named by the new config.
struct ZoneNames {
    router: Arc<Published<RouterConfig>>,
    seen: u64,
}

impl ZoneNames {
    fn new(router: Arc<Published<RouterConfig>>, labels: &mut Labels) -> Self {
        let (current, seen) = router.load();
        labels.zones = zone_names(&current);
        ZoneNames { router, seen }
    }

    fn refresh(&mut self, labels: &mut Labels) {
        if let Some(current) = self.router.changed_since(&mut self.seen) {
            labels.zones = zone_names(&current);
        }
    }
}

/// Each zone id's name in `router`, where it has one.
fn zone_names(router: &RouterConfig) -> Vec<Option<Arc<str>>> {
    (0..=u8::MAX)
        .map(|id| router.stateful.firewall.zone_name(ZoneId(id)).cloned())
        .collect()
}

/// The JSON lines file (`json_file`), kept open in append mode.
struct JsonFile {
    file: File,
    /// The lines of one drain, written at once.
    lines: Vec<u8>,
}

/// Starts the thread for the workers' queues `logs`, when `config` names a destination.
/// `interfaces`: the interfaces' names, in port order; `router`: the published router
/// config, whose zone names the entries carry.
pub fn spawn(
    config: &FirewallLogConfig,
    logs: Vec<Arc<FirewallLog>>,
    interfaces: Vec<String>,
    router: Arc<Published<RouterConfig>>,
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
    let mut json = match &config.json_file {
        Some(path) => Some(JsonFile {
            file: open_json_file(path)?,
            lines: Vec::with_capacity(64 * 1024),
        }),
        None => None,
    };
    if transports.is_empty() && json.is_none() {
        return Ok(None);
    }
    let header = Header {
        // Warning for what a rule dropped or rejected, notice for what it accepted.
        priority: config.facility * 8,
        hostname: syslog::hostname(),
        pid: std::process::id(),
    };
    let mut labels = Labels {
        interfaces,
        zones: Vec::new(),
    };
    let mut zones = ZoneNames::new(router, &mut labels);
    let mut batch = Vec::new();
    let mut message = Vec::with_capacity(512);
    let send = move |stats: &FirewallLogStats| {
        stats.drain_dated(&mut batch, |event| event.at_ns);
        if batch.is_empty() {
            return;
        }
        zones.refresh(&mut labels);
        if let Some(json) = json.as_mut() {
            json.lines.clear();
        }
        for (unix, event) in &batch {
            let timestamp = crate::telemetry::timestamp::rfc3339(*unix);
            if !transports.is_empty() {
                message.clear();
                format_event(&mut message, &header, &timestamp, event, &labels);
                for transport in &transports {
                    stats.count(&transport.send(&message), 1);
                }
            }
            if let Some(json) = json.as_mut() {
                json_line(&mut json.lines, &timestamp, event, &labels);
            }
        }
        // One write a drain: the file has every line of it, or the lines are counted failed.
        if let Some(json) = json.as_mut() {
            let written = json
                .file
                .write_all(&json.lines)
                .and_then(|()| json.file.flush());
            stats.count(&written.map(|()| json.lines.len()), batch.len());
        }
    };
    FirewallLogger::spawn("firewall-log", FirewallLogStats::new(logs), send).map(Some)
}

/// `path`, opened to append to (made if missing): kept open, so a rotation must copy and
/// truncate it (logrotate's `copytruncate`), which appending follows.
fn open_json_file(path: &std::path::Path) -> Result<File, EventLogError> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| EventLogError::File {
            field: "firewall.log.json_file",
            path: path.to_path_buf(),
            source,
        })
}

/// One JSON lines entry: its keys in this order, `forwarded_to`, `translated_src` and
/// `origin` only where set.
/// A sampled drop has `reason` in place of `rule`, and no `to` or `out` (where the packet
/// was going was not decided).
#[derive(Serialize)]
struct JsonEntry<'a> {
    time: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    rule: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    action: &'static str,
    from: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
    #[serde(rename = "in")]
    ingress: &'a str,
    #[serde(rename = "out", skip_serializing_if = "Option::is_none")]
    egress: Option<&'a str>,
    protocol: String,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    forwarded_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    translated_src: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    origin: Option<&'static str>,
}

/// `{"time":"2026-12-05T11:00:00.000Z","rule":"no-discard","action":"drop","from":"lan",
/// "to":"wan","in":"lan","out":"wan","protocol":"tcp","src":"192.168.10.2","src_port":40000,
/// "dst":"10.0.0.2","dst_port":9}` and a newline, appended to `out`: the syslog message's
/// parameters, the addresses bare and the ports apart.
fn json_line(out: &mut Vec<u8>, timestamp: &str, event: &FirewallEvent, labels: &Labels) {
    let decided = event.dropped.is_none();
    let entry = JsonEntry {
        time: timestamp,
        rule: decided.then_some(&*event.rule),
        reason: event.dropped.map(DropReason::label),
        action: event.action.name(),
        from: labels.zone(event.from),
        to: decided.then(|| labels.zone(event.to)),
        ingress: labels.interface(event.ingress),
        egress: decided.then(|| event.egress.map_or("local", |port| labels.interface(port))),
        protocol: protocol_name(event.protocol),
        src: event.src.0,
        src_port: event.src.1,
        dst: event.dst.0,
        dst_port: event.dst.1,
        forwarded_to: event
            .forwarded_to
            .map(|(address, port)| format!("{address}:{port}")),
        translated_src: event
            .translated_src
            .map(|(address, port)| format!("{address}:{port}")),
        origin: event.from_kernel.then_some("kernel"),
    };
    // Strings and numbers only: serializing into memory cannot fail.
    if serde_json::to_writer(&mut *out, &entry).is_ok() {
        out.push(b'\n');
    }
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
/// action="drop" from="lan" to="wan" in="lan" out="wan" protocol="tcp"
/// src="192.168.10.2:40000" dst="10.0.0.2:9"] firewall drop by no-discard: tcp
/// 192.168.10.2:40000 -> 10.0.0.2:9` (one line; IPv6 addresses in brackets,
/// `[2001:db8::1]:443`). `out="local"` (and `to="local"`) for traffic to the gateway; a port
/// forward adds `forwarded_to="192.168.10.5:80"`, an accept masquerade translates
/// `translated_src="203.0.113.5:1024"` (the source it leaves with); what the gateway's kernel opened,
/// `origin="kernel"`.
fn format_event(
    out: &mut Vec<u8>,
    header: &Header,
    timestamp: &str,
    event: &FirewallEvent,
    labels: &Labels,
) {
    let action = event.action.name();
    let protocol = protocol_name(event.protocol);
    // A socket address writes an IPv6 address in brackets before its port.
    let (src, dst) = (SocketAddr::from(event.src), SocketAddr::from(event.dst));
    if let Some(reason) = event.dropped {
        let _ = write!(
            out,
            "<{}>1 {timestamp} {} gateway {} FIREWALL [{SD_ID} reason=\"{}\" action=\"drop\" from=\"{}\" in=\"{}\" protocol=\"{protocol}\" src=\"{src}\" dst=\"{dst}\"] dropped ({}): {protocol} {src} -> {dst}",
            header.priority + severity(Action::Drop),
            header.hostname,
            header.pid,
            reason.label(),
            sd_escape(labels.zone(event.from)),
            labels.interface(event.ingress),
            reason.label(),
        );
        return;
    }
    let _ = write!(
        out,
        "<{}>1 {timestamp} {} gateway {} FIREWALL [{SD_ID} rule=\"{}\" action=\"{action}\" from=\"{}\" to=\"{}\" in=\"{}\" out=\"{}\" protocol=\"{protocol}\" src=\"{src}\" dst=\"{dst}\"",
        header.priority + severity(event.action),
        header.hostname,
        header.pid,
        sd_escape(&event.rule),
        sd_escape(labels.zone(event.from)),
        sd_escape(labels.zone(event.to)),
        labels.interface(event.ingress),
        event.egress.map_or("local", |port| labels.interface(port)),
    );
    if let Some((address, port)) = event.forwarded_to {
        let _ = write!(out, " forwarded_to=\"{address}:{port}\"");
    }
    if let Some((address, port)) = event.translated_src {
        let _ = write!(out, " translated_src=\"{address}:{port}\"");
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
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn header() -> Header {
        Header {
            priority: 16 * 8,
            hostname: "gw".into(),
            pid: 42,
        }
    }

    fn labels() -> Labels {
        let mut zones = vec![None; 256];
        zones[0] = Some(Arc::from("lan"));
        zones[1] = Some(Arc::from("wan"));
        zones[usize::from(ZoneId::LOCAL.0)] = Some(Arc::from("local"));
        Labels {
            interfaces: vec!["lan".to_string(), "wan".to_string()],
            zones,
        }
    }

    fn drop_to_discard() -> FirewallEvent {
        FirewallEvent {
            at_ns: 0,
            rule: Arc::from("no \"discard\""),
            action: Action::Drop,
            from: ZoneId(0),
            to: ZoneId(1),
            ingress: 0,
            egress: Some(1),
            protocol: 6,
            src: (IpAddr::V4(Ipv4Addr::new(192, 168, 10, 2)), 40000),
            dst: (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 9),
            forwarded_to: None,
            translated_src: None,
            from_kernel: false,
            dropped: None,
        }
    }

    fn message(event: &FirewallEvent, labels: &Labels) -> String {
        let mut message = Vec::new();
        let timestamp = "2026-12-05T11:00:00.000Z";
        format_event(&mut message, &header(), timestamp, event, labels);
        String::from_utf8(message).unwrap()
    }

    #[test]
    fn a_decision_is_one_rfc5424_message() {
        assert_eq!(
            message(&drop_to_discard(), &labels()),
            "<132>1 2026-12-05T11:00:00.000Z gw gateway 42 FIREWALL [fw@32473 rule=\"no \\\"discard\\\"\" action=\"drop\" from=\"lan\" to=\"wan\" in=\"lan\" out=\"wan\" protocol=\"tcp\" src=\"192.168.10.2:40000\" dst=\"10.0.0.2:9\"] firewall drop by no \"discard\": tcp 192.168.10.2:40000 -> 10.0.0.2:9"
        );
    }

    #[test]
    fn an_ipv6_decision_brackets_its_addresses() {
        let event = FirewallEvent {
            rule: Arc::from("policy wan->lan"),
            from: ZoneId(1),
            to: ZoneId(0),
            ingress: 1,
            egress: Some(0),
            protocol: 17,
            src: (
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
                5000,
            ),
            dst: (
                IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1)),
                443,
            ),
            ..drop_to_discard()
        };
        let message = message(&event, &labels());
        assert!(
            message.contains(
                "rule=\"policy wan->lan\" action=\"drop\" from=\"wan\" to=\"lan\" in=\"wan\" out=\"lan\" protocol=\"udp\" src=\"[2001:db8::2]:5000\" dst=\"[2001:db8:1::1]:443\"]"
            ),
            "{message}"
        );
        assert!(
            message.ends_with("udp [2001:db8::2]:5000 -> [2001:db8:1::1]:443"),
            "{message}"
        );
    }

    #[test]
    fn the_gateway_and_an_unnamed_zone_have_names_too() {
        let event = FirewallEvent {
            from: ZoneId(7),
            to: ZoneId::LOCAL,
            egress: None,
            ..drop_to_discard()
        };
        let unnamed = Labels {
            zones: Vec::new(),
            ..labels()
        };
        let message = message(&event, &unnamed);
        assert!(
            message.contains("from=\"?\" to=\"local\" in=\"lan\" out=\"local\""),
            "{message}"
        );
    }

    #[test]
    fn a_decision_is_one_json_line() {
        let mut lines = Vec::new();
        let timestamp = "2026-12-05T11:00:00.000Z";
        json_line(&mut lines, timestamp, &drop_to_discard(), &labels());
        let forwarded = FirewallEvent {
            rule: Arc::from("forward tcp 8080 -> 192.168.10.5:80"),
            action: Action::Accept,
            from: ZoneId(1),
            to: ZoneId(0),
            src: (IpAddr::V6(Ipv6Addr::LOCALHOST), 1),
            forwarded_to: Some((Ipv4Addr::new(192, 168, 10, 5), 80)),
            translated_src: Some((Ipv4Addr::new(10, 0, 0, 1), 1024)),
            from_kernel: true,
            ..drop_to_discard()
        };
        json_line(&mut lines, timestamp, &forwarded, &labels());
        let text = String::from_utf8(lines).unwrap();
        let lines: Vec<&str> = text.split_terminator('\n').collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(
            lines[0],
            r#"{"time":"2026-12-05T11:00:00.000Z","rule":"no \"discard\"","action":"drop","from":"lan","to":"wan","in":"lan","out":"wan","protocol":"tcp","src":"192.168.10.2","src_port":40000,"dst":"10.0.0.2","dst_port":9}"#
        );
        let second: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["src"], "::1");
        assert_eq!(second["from"], "wan");
        assert_eq!(second["forwarded_to"], "192.168.10.5:80");
        assert_eq!(second["translated_src"], "10.0.0.1:1024");
        assert_eq!(second["origin"], "kernel");
    }

    /// A sampled drop names its reason where a decision names its rule, and has no `to` or
    /// `out`: where the packet was going was not decided.
    #[test]
    fn a_sampled_drop_names_its_reason() {
        let dropped = FirewallEvent {
            rule: Arc::from("conntrack_invalid"),
            from: ZoneId(1),
            to: ZoneId(1),
            ingress: 1,
            egress: None,
            dropped: Some(DropReason::ConntrackInvalid),
            ..drop_to_discard()
        };
        assert_eq!(
            message(&dropped, &labels()),
            "<132>1 2026-12-05T11:00:00.000Z gw gateway 42 FIREWALL [fw@32473 reason=\"conntrack_invalid\" action=\"drop\" from=\"wan\" in=\"wan\" protocol=\"tcp\" src=\"192.168.10.2:40000\" dst=\"10.0.0.2:9\"] dropped (conntrack_invalid): tcp 192.168.10.2:40000 -> 10.0.0.2:9"
        );
        let mut line = Vec::new();
        json_line(&mut line, "2026-12-05T11:00:00.000Z", &dropped, &labels());
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "{\"time\":\"2026-12-05T11:00:00.000Z\",\"reason\":\"conntrack_invalid\",\"action\":\"drop\",\"from\":\"wan\",\"in\":\"wan\",\"protocol\":\"tcp\",\"src\":\"192.168.10.2\",\"src_port\":40000,\"dst\":\"10.0.0.2\",\"dst_port\":9}\n"
        );
    }

    #[test]
    fn a_json_file_is_appended_to_and_a_missing_directory_names_the_field() {
        let dir = std::env::temp_dir().join(format!("gw-fwlog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("firewall.jsonl");
        std::fs::write(&path, "kept\n").unwrap();
        open_json_file(&path).unwrap().write_all(b"more\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept\nmore\n");
        let err = open_json_file(&dir.join("missing/firewall.jsonl")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("firewall.log.json_file: opening "),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

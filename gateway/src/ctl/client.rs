//! `gateway ctl`'s command-line end: sends one request to the socket, prints the answer as a
//! table, or as the JSON the gateway sent with `--json`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;

use super::Request;

/// Longer than the gateway's own wait for its workers.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
const CONFIG_REPLY_TIMEOUT: Duration = Duration::from_secs(90);

/// Sends `request` and returns the gateway's answer (the `ok` part), or its error.
pub fn request(socket: &Path, request: &Request) -> anyhow::Result<Value> {
    let mut stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "connecting to {} (is the gateway running, and may you use its ctl.socket?)",
            socket.display()
        )
    })?;
    // A trace waits as long as it was told to, then answers.
    let wait = match request {
        Request::Trace { timeout_ms, .. } | Request::CaptureDrops { timeout_ms, .. } => {
            REPLY_TIMEOUT + Duration::from_millis(*timeout_ms)
        }
        // Longer than the gateway's own wait for a load's verdict.
        Request::ConfigDiff { .. }
        | Request::ConfigApply { .. }
        | Request::ConfigRollback { .. }
        | Request::ConfigReload => CONFIG_REPLY_TIMEOUT,
        _ => REPLY_TIMEOUT,
    };
    stream.set_read_timeout(Some(wait))?;
    let mut line = serde_json::to_string(request)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .context("reading the gateway's answer")?;
    let mut reply: Value = serde_json::from_str(&reply).context("the gateway's answer")?;
    if let Some(error) = reply.get("error").and_then(Value::as_str) {
        bail!("{error}");
    }
    reply
        .get_mut("ok")
        .map(Value::take)
        .context("the gateway's answer has neither ok nor error")
}

/// Prints `answer` to `request`: JSON as sent, or a table.
pub fn print(request: &Request, answer: &Value, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(answer)?);
        return Ok(());
    }
    match request {
        Request::ShowFlows { .. } => print_flows(answer),
        Request::ShowDrops => print_drops(answer),
        Request::ShowWorkers => print_workers(answer),
        Request::ShowInterfaces => print_interfaces(answer),
        Request::ShowRoutes => print_routes(answer),
        Request::ShowUplinks => print_uplinks(answer),
        Request::ShowNeighbors => print_neighbors(answer),
        Request::ShowConfig => print_config(answer),
        Request::ShowRules => print_rules(answer),
        Request::ConfigDiff { .. } => print_diff(answer),
        Request::ConfigApply { .. } | Request::ConfigRollback { .. } | Request::ConfigReload => {
            print_applied(answer)
        }
        Request::ConfigConfirm => println!("confirmed version {}", cell(&answer["version"])),
        Request::ShowNat { .. } => print_nat(answer),
        Request::Trace { .. } => print_trace(answer),
        Request::ClearFlows { .. } => println!("cleared {} flows", cell(&answer["cleared"])),
        Request::CaptureDrops { .. } => {
            println!("captured {} dropped packets", cell(&answer["captured"]))
        }
        Request::CaptureTarget { .. } => println!(
            "{}: DPDK port {} ({}), vlan {}, file prefix {}",
            cell(&answer["interface"]),
            cell(&answer["port_id"]),
            cell(&answer["port"]),
            cell(&answer["vlan"]),
            cell(&answer["file_prefix"])
        ),
    }
    Ok(())
}

/// A value as a table cell: strings without their quotes. (`Value`'s Display ignores widths.)
fn cell(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn endpoint(key: &Value, side: &str) -> String {
    format!(
        "{}:{}",
        cell(&key[side]),
        cell(&key[format!("{side}_port")])
    )
}

fn tuple(key: &Value) -> String {
    format!("{} -> {}", endpoint(key, "src"), endpoint(key, "dst"))
}

fn print_flows(answer: &Value) {
    println!(
        "{:<6} {:<5} {:<12} {:<45} {:<45} {:>8}  flags",
        "worker", "proto", "state", "original", "reply", "expires"
    );
    for flow in answer["flows"].as_array().into_iter().flatten() {
        let flags: Vec<&str> = ["replied", "assured", "forwarded"]
            .into_iter()
            .filter(|flag| flow[*flag].as_bool() == Some(true))
            .collect();
        println!(
            "{:<6} {:<5} {:<12} {:<45} {:<45} {:>7}s  {}",
            cell(&flow["worker"]),
            cell(&flow["protocol"]),
            cell(&flow["state"]),
            tuple(&flow["original"]),
            tuple(&flow["reply"]),
            cell(&flow["expires_in_seconds"]),
            flags.join(",")
        );
    }
    println!(
        "{} of {} matching flows listed",
        cell(&answer["listed"]),
        cell(&answer["matched"])
    );
}

fn print_drops(answer: &Value) {
    println!("{:<8} {:<32} {:>14}", "worker", "reason", "packets");
    for drop in answer["drops"].as_array().into_iter().flatten() {
        println!(
            "{:<8} {:<32} {:>14}",
            cell(&drop["worker"]),
            cell(&drop["reason"]),
            cell(&drop["packets"])
        );
    }
}

fn print_workers(answer: &Value) {
    println!(
        "{:<6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>6} {:>10} {:>10}",
        "worker", "rx", "tx", "dropped", "handed_off", "received", "busy", "flows", "capacity"
    );
    for w in answer["workers"].as_array().into_iter().flatten() {
        println!(
            "{:<6} {:>14} {:>14} {:>12} {:>12} {:>12} {:>5.1}% {:>10} {:>10}",
            cell(&w["worker"]),
            cell(&w["rx_packets"]),
            cell(&w["tx_packets"]),
            cell(&w["dropped_packets"]),
            cell(&w["handoffs_sent"]),
            cell(&w["handoffs_received"]),
            w["busy_share"].as_f64().unwrap_or(0.0) * 100.0,
            cell(&w["flows"]),
            cell(&w["flow_capacity"])
        );
    }
}

/// Bits per second as Mbit/s with one decimal; "-" before the first 10-s window closes.
fn mbits(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_string(), |bits| format!("{:.1}", bits / 1e6))
}

fn print_interfaces(answer: &Value) {
    println!(
        "{:<10} {:<20} {:<18} {:>5} {:<10} {:>14} {:>14} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "name",
        "address",
        "mac",
        "mtu",
        "link",
        "rx",
        "tx",
        "rx Mbit/s",
        "tx Mbit/s",
        "rx_missed",
        "q_drops",
        "errors"
    );
    for i in answer["interfaces"].as_array().into_iter().flatten() {
        let link = if i["link_up"].as_bool() == Some(true) {
            format!("up {}M", cell(&i["speed_mbps"]))
        } else {
            "down".to_string()
        };
        let errors = i["rx_errors"].as_u64().unwrap_or(0) + i["tx_errors"].as_u64().unwrap_or(0);
        println!(
            "{:<10} {:<20} {:<18} {:>5} {:<10} {:>14} {:>14} {:>9} {:>9} {:>10} {:>10} {:>10}",
            cell(&i["name"]),
            cell(&i["address"]),
            cell(&i["mac"]),
            cell(&i["mtu"]),
            link,
            cell(&i["rx_packets"]),
            cell(&i["tx_packets"]),
            mbits(&i["rates"]["rx_bits_per_sec"]),
            mbits(&i["rates"]["tx_bits_per_sec"]),
            cell(&i["rx_missed"]),
            cell(&i["rx_queue_drops"]),
            errors
        );
        for address in i["ipv6_addresses"].as_array().into_iter().flatten() {
            println!("{:<10} {}", "", cell(address));
        }
    }
}

fn print_routes(answer: &Value) {
    let routes = answer["routes"].as_array();
    // IPv4 prefixes fit 20 columns; an IPv6 one widens the column for all.
    let width = routes
        .into_iter()
        .flatten()
        .map(|route| cell(&route["prefix"]).len())
        .max()
        .unwrap_or(0)
        .max(20);
    println!("{:<width$} {:<10} {:<16}", "prefix", "interface", "via");
    for route in routes.into_iter().flatten() {
        println!(
            "{:<width$} {:<10} {:<16}",
            cell(&route["prefix"]),
            cell(&route["interface"]),
            cell(&route["via"])
        );
    }
}

fn print_uplinks(answer: &Value) {
    println!(
        "{:<10} {:<16} {:>6} {:>8} {:<12} {:>9} {:>9} {:>9} {:>8}",
        "uplink", "via", "weight", "priority", "state", "answered", "lost", "rtt_ms", "changes"
    );
    for uplink in answer["uplinks"].as_array().into_iter().flatten() {
        let health = &uplink["health"];
        println!(
            "{:<10} {:<16} {:>6} {:>8} {:<12} {:>9} {:>9} {:>9} {:>8}",
            cell(&uplink["interface"]),
            cell(&uplink["via"]),
            cell(&uplink["weight"]),
            cell(&uplink["priority"]),
            cell(&uplink["state"]),
            cell(&health["answered"]),
            cell(&health["lost"]),
            cell(&health["last_rtt_ms"]),
            cell(&health["changes"]),
        );
    }
}

fn print_neighbors(answer: &Value) {
    let neighbors = answer["neighbors"].as_array();
    // IPv4 addresses fit 16 columns; an IPv6 one widens the column for all.
    let width = neighbors
        .into_iter()
        .flatten()
        .map(|neighbor| cell(&neighbor["address"]).len())
        .max()
        .unwrap_or(0)
        .max(16);
    println!("{:<width$} {:<18} {:<10}", "address", "mac", "interface");
    for neighbor in neighbors.into_iter().flatten() {
        println!(
            "{:<width$} {:<18} {:<10}",
            cell(&neighbor["address"]),
            cell(&neighbor["mac"]),
            cell(&neighbor["interface"])
        );
    }
}

/// Unix seconds as RFC 3339 UTC, or the value as it came.
fn when(value: &Value) -> String {
    value.as_u64().map_or_else(
        || cell(value),
        |secs| crate::telemetry::timestamp::rfc3339(std::time::Duration::from_secs(secs)),
    )
}

fn print_config(answer: &Value) {
    println!(
        "{} version {} since {}\nsha256 {}",
        cell(&answer["path"]),
        cell(&answer["version"]),
        when(&answer["since_unix"]),
        cell(&answer["sha256"])
    );
    let reloads = answer["reloads"].as_array().cloned().unwrap_or_default();
    if reloads.is_empty() {
        println!("no reload since start");
    }
    for reload in &reloads {
        let list = |key: &str| {
            let names: Vec<String> = reload[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(cell)
                .collect();
            if names.is_empty() {
                "nothing".to_string()
            } else {
                names.join(", ")
            }
        };
        match reload["error"].as_str() {
            Some(error) => println!(
                "{} {} refused: {error}",
                when(&reload["at_unix"]),
                cell(&reload["source"])
            ),
            None => {
                println!(
                    "{} {} applied: changed {}",
                    when(&reload["at_unix"]),
                    cell(&reload["source"]),
                    list("changed")
                );
                if reload["restart_required"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty())
                {
                    println!(
                        "  kept as running until a restart: {}",
                        list("restart_required")
                    );
                }
            }
        }
    }
}

fn print_rules(answer: &Value) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    println!(
        "{:>5} {:<32} {:<7} {:>12}  last match",
        "index", "rule", "action", "hits"
    );
    let rows = answer["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|rule| {
            let index = cell(&rule["index"]);
            (index, cell(&rule["name"]), rule)
        });
    let defaults = answer["defaults"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|pair| {
            let name = format!("default {} -> {}", cell(&pair["from"]), cell(&pair["to"]));
            ("-".to_string(), name, pair)
        });
    let forwards = answer["forwards"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|forward| {
            let name = format!("forward {}", cell(&forward["forward"]));
            ("-".to_string(), name, forward)
        });
    for (index, name, row) in rows.chain(defaults).chain(forwards) {
        println!(
            "{:>5} {:<32} {:<7} {:>12}  {}",
            index,
            name,
            cell(&row["action"]),
            cell(&row["hits"]),
            ago(&row["last_matched"], now)
        );
    }
}

/// A Unix second as how long before `now` it was ("12s ago"), or "never".
fn ago(unix_seconds: &Value, now: u64) -> String {
    match unix_seconds.as_u64() {
        Some(then) => format!("{}s ago", now.saturating_sub(then)),
        None => "never".to_string(),
    }
}

/// `names` as a comma-separated list, or "nothing".
fn listing(names: &Value) -> String {
    let names: Vec<String> = names.as_array().into_iter().flatten().map(cell).collect();
    if names.is_empty() {
        "nothing".to_string()
    } else {
        names.join(", ")
    }
}

fn print_diff(answer: &Value) {
    println!("would change: {}", listing(&answer["changed"]));
    println!(
        "would wait for a restart: {}",
        listing(&answer["restart_required"])
    );
    for warning in answer["warnings"].as_array().into_iter().flatten() {
        println!("warning: {}", cell(warning));
    }
}

fn print_applied(answer: &Value) {
    println!(
        "applied version {} (sha256 {}): changed {}",
        cell(&answer["version"]),
        cell(&answer["sha256"]),
        listing(&answer["changed"])
    );
    if answer["restart_required"]
        .as_array()
        .is_some_and(|fields| !fields.is_empty())
    {
        println!(
            "kept as running until a restart: {}",
            listing(&answer["restart_required"])
        );
    }
    if let Some(secs) = answer["confirm_within_secs"].as_u64() {
        println!("rolls back in {secs} s unless confirmed: gateway ctl config confirm");
    }
}

fn print_nat(answer: &Value) {
    println!(
        "NAT ports in use {} of {}; bindings by internal host (among those listed):",
        cell(&answer["ports_in_use"]),
        answer["ports_in_use"].as_u64().unwrap_or(0)
            + answer["ports_available"].as_u64().unwrap_or(0)
    );
    println!("{:<16} {:>9}", "host", "bindings");
    for host in answer["hosts"].as_array().into_iter().flatten() {
        println!("{:<16} {:>9}", cell(&host["host"]), cell(&host["bindings"]));
    }
    println!();
    println!(
        "{:<6} {:<5} {:<22} {:<22} {:>6}",
        "worker", "proto", "inside", "outside", "flows"
    );
    for binding in answer["bindings"].as_array().into_iter().flatten() {
        println!(
            "{:<6} {:<5} {:<22} {:<22} {:>6}",
            cell(&binding["worker"]),
            cell(&binding["protocol"]),
            cell(&binding["inside"]),
            cell(&binding["outside"]),
            cell(&binding["flows"])
        );
    }
    println!(
        "{} of {} matching bindings listed",
        cell(&answer["listed"]),
        cell(&answer["matched"])
    );
    let mappings = answer["port_mappings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if mappings.is_empty() {
        return;
    }
    println!();
    println!("port mappings (PCP, NAT-PMP):");
    println!(
        "{:<5} {:<8} {:<22} {:>8} {:>10}",
        "proto", "origin", "inside", "outside", "expires_in"
    );
    for mapping in &mappings {
        println!(
            "{:<5} {:<8} {:<22} {:>8} {:>9}s",
            cell(&mapping["protocol"]),
            cell(&mapping["origin"]),
            format!(
                "{}:{}",
                cell(&mapping["internal"]),
                cell(&mapping["internal_port"])
            ),
            cell(&mapping["external_port"]),
            cell(&mapping["expires_in_s"])
        );
    }
}

fn print_trace(answer: &Value) {
    for (n, packet) in answer["packets"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let received = &packet["received"];
        println!(
            "Packet {} (worker {}{})",
            n + 1,
            cell(&packet["worker"]),
            if packet["handed_off"].as_bool() == Some(true) {
                ", handed off"
            } else {
                ""
            }
        );
        println!(
            "  ingress     {} {} bytes: {} {}",
            cell(&packet["ingress"]),
            cell(&packet["length"]),
            cell(&received["protocol"]),
            tuple(received)
        );
        let flow = &packet["flow"];
        match flow["match"].as_str() {
            Some("existing") => println!(
                "  conntrack   hit: {} direction, {}",
                cell(&flow["direction"]),
                flow["state"].as_str().unwrap_or("no TCP state")
            ),
            Some("new") if flow["port_forward"].as_bool() == Some(true) => {
                println!("  conntrack   miss: a new flow through a port forward")
            }
            Some("new") => {
                println!("  conntrack   miss: a new flow");
                let firewall = &flow["firewall"];
                if firewall.is_null() {
                    println!("  firewall    no decision (no route, or no zone)");
                } else {
                    println!(
                        "  firewall    {} by {} ({} -> {})",
                        cell(&firewall["action"]),
                        firewall["rule"]
                            .as_str()
                            .map_or("the zone policy".to_string(), |rule| format!(
                                "rule \"{rule}\""
                            )),
                        cell(&firewall["from"]),
                        cell(&firewall["to"])
                    );
                }
            }
            _ => println!("  conntrack   (no 5-tuple)"),
        }
        let verdict = &packet["verdict"];
        match verdict["kind"].as_str() {
            Some("transmit" | "fragment") => {
                let sent = &packet["sent_as"];
                if !sent.is_null()
                    && (sent["src"] != received["src"]
                        || sent["dst"] != received["dst"]
                        || sent["src_port"] != received["src_port"]
                        || sent["dst_port"] != received["dst_port"])
                {
                    println!("  nat         {} -> {}", tuple(received), tuple(sent));
                }
                println!(
                    "  verdict     {} on {} to {}",
                    cell(&verdict["kind"]),
                    cell(&verdict["interface"]),
                    cell(&packet["next_hop_mac"])
                );
            }
            Some("drop") => println!("  verdict     drop: {}", cell(&verdict["reason"])),
            _ => println!("  verdict     {}", verdict),
        }
    }
    println!(
        "{} of {} packets traced",
        cell(&answer["traced"]),
        cell(&answer["asked"])
    );
}

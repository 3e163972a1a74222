//! The deployment kit against the code: every metric the Grafana dashboard and the Prometheus
//! alerts query is one the gateway exports (`gateway::telemetry::metrics::metric_names()`), and the X550
//! configs validate against the schema, give the EAL arguments DPDK accepts and size their
//! mempools for every port. No DPDK, no files written.
//!
//! The kit is read as text: expressions are pulled out of the dashboard's JSON strings and the
//! alert rules' `expr:` values without a JSON or YAML parser (no new dependencies).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gateway::config::{is_pci_address, GatewayConfig, HugepageMode};
use gateway::telemetry::metrics::metric_names;

/// Metrics the kit may use before the gateway exports them, each with the issue that brings
/// it. Remove an entry when the gateway exports it (a test below fails as a reminder).
const NOT_YET_EXPORTED: &[(&str, &str)] = &[];

const DASHBOARD: &str = "deploy/grafana/gateway-dashboard.json";
const ALERTS: &str = "deploy/prometheus/gateway-alerts.yml";

fn repo_file(relative: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    (path, text)
}

/// Every `gateway_[a-z0-9_]+` identifier in `text`, whole words only (not `xgateway_a`), with
/// the position just after it.
fn metric_identifiers(text: &str) -> Vec<(String, usize)> {
    let bytes = text.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("gateway_") {
        let start = from + offset;
        let mut end = start + "gateway_".len();
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end].is_ascii_digit()
                || bytes[end] == b'_')
        {
            end += 1;
        }
        let whole_word = (start == 0 || !is_word(bytes[start - 1]))
            && (end == bytes.len() || !is_word(bytes[end]));
        if whole_word && end > start + "gateway_".len() {
            found.push((text[start..end].to_string(), end));
        }
        from = end;
    }
    found
}

/// The metric names an expression uses. Label names and values never start with `gateway_`
/// here, so every such identifier is a metric.
fn metrics_in(expr: &str) -> Vec<String> {
    metric_identifiers(expr)
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// The decoded value of every JSON string that follows `"key":` in `json`.
fn json_string_values(json: &str, key: &str) -> Vec<String> {
    let needle = format!("\"{key}\":");
    let mut values = Vec::new();
    let mut rest = json;
    while let Some(at) = rest.find(&needle) {
        rest = rest[at + needle.len()..].trim_start();
        let Some(body) = rest.strip_prefix('"') else {
            continue; // an object or a number, e.g. the templating "query": {...}
        };
        let mut value = String::new();
        let mut chars = body.char_indices();
        let mut end = body.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    end = i + 1;
                    break;
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, 't')) => value.push('\t'),
                    Some((_, 'u')) => {
                        let hex: String = chars.by_ref().take(4).map(|(_, c)| c).collect();
                        let code = u32::from_str_radix(&hex, 16).expect("a \\u escape");
                        value.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                    }
                    Some((_, other)) => value.push(other),
                    None => panic!("an unterminated JSON string after {needle}"),
                },
                c => value.push(c),
            }
        }
        values.push(value);
        rest = &body[end..];
    }
    values
}

/// The `expr:` values of the rules, inline or as a block scalar (`expr: >` and the lines
/// indented deeper than the key).
fn yaml_exprs(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut exprs = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let key = line.trim_start().trim_start_matches("- ").trim_start();
        // The key's column: a block scalar's lines are indented deeper than it.
        let indent = line.len() - key.len();
        let Some(value) = key.strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if matches!(value, "" | ">" | "|" | ">-" | "|-" | ">+" | "|+") {
            let mut block = Vec::new();
            while i < lines.len() {
                let next = lines[i];
                let next_indent = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && next_indent <= indent {
                    break;
                }
                block.push(next.trim());
                i += 1;
            }
            exprs.push(block.join(" ").trim().to_string());
        } else {
            exprs.push(value.trim_matches(|c| c == '\'' || c == '"').to_string());
        }
    }
    exprs
}

/// Checks every metric in `exprs` against the exported families and the allow-list.
/// `metric_names()` gives the names exactly as exposed: counters already end in `_total`, and
/// the gateway has no histograms or summaries, so there is no `_bucket`/`_sum`/`_count` suffix
/// to strip and names are compared as they are.
fn unknown_metrics(exprs: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let exported: BTreeSet<String> = metric_names().into_iter().collect();
    let allowed: BTreeSet<&str> = NOT_YET_EXPORTED.iter().map(|(name, _)| *name).collect();
    let mut used = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    for expr in exprs {
        for name in metrics_in(expr) {
            if !exported.contains(&name) && !allowed.contains(name.as_str()) {
                unknown.insert(format!("{name} (in `{expr}`)"));
            }
            used.insert(name);
        }
    }
    (used, unknown)
}

fn dashboard_exprs() -> Vec<String> {
    let (_, json) = repo_file(DASHBOARD);
    let mut exprs = json_string_values(&json, "expr");
    // The template variables' queries (label_values(gateway_build_info, instance)).
    exprs.extend(json_string_values(&json, "definition"));
    exprs.extend(json_string_values(&json, "query"));
    exprs
}

fn alert_exprs() -> Vec<String> {
    let (_, yaml) = repo_file(ALERTS);
    yaml_exprs(&yaml)
}

#[test]
fn extraction_reads_json_strings_and_yaml_blocks() {
    let json =
        r#"{"expr": "rate(gateway_a_total[5m]) / \"x\"", "query": {"q": 1}, "query": "gateway_b"}"#;
    assert_eq!(
        json_string_values(json, "expr"),
        ["rate(gateway_a_total[5m]) / \"x\""]
    );
    assert_eq!(json_string_values(json, "query"), ["gateway_b"]);
    let yaml = "rules:\n  - expr: gateway_x == 0\n    for: 1m\n  - expr: >\n      gateway_y\n      / gateway_z\n    labels: {}\n";
    assert_eq!(
        yaml_exprs(yaml),
        ["gateway_x == 0", "gateway_y / gateway_z"]
    );
    assert_eq!(
        metrics_in(
            "sum by (reason) (rate(gateway_dropped_packets_total{worker!=\"control\"}[5m]))"
        ),
        ["gateway_dropped_packets_total"]
    );
    assert!(metrics_in("xgateway_a + gateway_ + job:gateway_b:rate5m").is_empty());
}

#[test]
fn dashboard_queries_only_exported_metrics() {
    let exprs = dashboard_exprs();
    let (used, unknown) = unknown_metrics(&exprs);
    assert!(
        exprs.len() >= 20 && used.len() >= 20,
        "{DASHBOARD}: found only {} queries using {} metrics; is the extraction still right?",
        exprs.len(),
        used.len()
    );
    assert!(
        unknown.is_empty(),
        "{DASHBOARD} queries metrics the gateway does not export:\n  {}\nExported: {:?}",
        unknown.into_iter().collect::<Vec<_>>().join("\n  "),
        metric_names()
    );
}

#[test]
fn alerts_query_only_exported_metrics() {
    let exprs = alert_exprs();
    let (used, unknown) = unknown_metrics(&exprs);
    let (_, yaml) = repo_file(ALERTS);
    let rules = yaml.matches("- alert:").count();
    assert!(
        rules >= 6 && exprs.len() == rules,
        "{ALERTS}: {rules} alerts but {} expr values were read",
        exprs.len()
    );
    assert!(
        used.len() >= 9,
        "{ALERTS}: only {} metrics used",
        used.len()
    );
    assert!(
        unknown.is_empty(),
        "{ALERTS} queries metrics the gateway does not export:\n  {}",
        unknown.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn metrics_named_in_the_kits_prose_exist_too() {
    // Descriptions and comments point operators at metrics; they must not name stale ones.
    // A name followed by `*` is a prefix (gateway_bond_member_*), not a metric.
    for file in [DASHBOARD, ALERTS] {
        let (_, text) = repo_file(file);
        let exprs: Vec<String> = metric_identifiers(&text)
            .into_iter()
            .filter(|&(_, end)| !text[end..].starts_with('*'))
            .map(|(name, _)| name)
            .collect();
        let (_, unknown) = unknown_metrics(&exprs);
        assert!(
            unknown.is_empty(),
            "{file} mentions metrics the gateway does not export: {unknown:?}"
        );
    }
}

#[test]
fn allow_list_is_used_and_not_yet_exported() {
    let exported = metric_names();
    let mut used: BTreeSet<String> = unknown_metrics(&dashboard_exprs()).0;
    used.extend(unknown_metrics(&alert_exprs()).0);
    for (name, issue) in NOT_YET_EXPORTED {
        assert!(
            !exported.iter().any(|e| e == name),
            "{name} is exported now ({issue} landed): remove it from NOT_YET_EXPORTED"
        );
        assert!(
            used.contains(*name),
            "{name} is allow-listed but the kit no longer uses it: remove it from NOT_YET_EXPORTED"
        );
    }
}

#[test]
fn x550_config_validates_and_is_a_production_config() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/x550.toml");
    let config =
        GatewayConfig::load(&path).unwrap_or_else(|err| panic!("configs/x550.toml: {err}"));
    assert_eq!(config.eal.hugepages, HugepageMode::Required);
    assert_eq!(config.eal.main_lcore, 0);
    assert_eq!(config.workers.lcores, [2, 3, 4, 5]);
    let devices: Vec<&str> = config
        .interfaces
        .iter()
        .map(|i| i.device.as_str())
        .collect();
    assert_eq!(devices, ["0000:03:00.0", "0000:03:00.1"]);
    assert!(devices.iter().all(|d| is_pci_address(d)));
    assert_eq!(config.nat.masquerade, ["wan"]);
    assert!(!config.nat.port_forwards.is_empty());
    assert_eq!(
        config.metrics.listen.port(),
        gateway::config::DEFAULT_METRICS_PORT
    );
}

/// Every config in configs/, loaded.
fn shipped_configs() -> Vec<(String, GatewayConfig)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut configs: Vec<(String, GatewayConfig)> = std::fs::read_dir(&dir)
        .expect("configs/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let config = GatewayConfig::load(&path).unwrap_or_else(|err| panic!("{name}: {err}"));
            (name, config)
        })
        .collect();
    configs.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(configs.len() >= 3, "lab, x550 and x550-lacp at least");
    configs
}

#[test]
fn every_shipped_configs_eal_arguments_pass_dpdks_option_rules() {
    for (name, config) in shipped_configs() {
        // With hugepages, and without where the config may fall back to --no-huge.
        let modes: &[bool] = match config.eal.hugepages {
            HugepageMode::Required => &[false],
            HugepageMode::Off => &[true],
            HugepageMode::Auto => &[false, true],
        };
        for &no_huge in modes {
            let argv = gateway::runtime::eal_args::eal_args_with(&config, no_huge).to_argv();
            gateway::dpdk::check_option_rules(&argv)
                .unwrap_or_else(|err| panic!("{name} (no_huge {no_huge}): {err}"));
            if !config.eal.socket_memory_mb.is_empty() && !no_huge {
                assert!(
                    argv.iter().any(|a| a.starts_with("--socket-mem=")),
                    "{name}: {argv:?}"
                );
            }
        }
    }
}

#[test]
fn x550_mempools_cover_every_ports_descriptors_and_caches() {
    for (name, config) in shipped_configs()
        .into_iter()
        .filter(|(name, _)| name.starts_with("x550"))
    {
        // Each worker owns one RX and one TX queue on every port; a bond's members are the
        // ports that hold descriptors, each with the bond's queues.
        let queues = config.workers.lcores.len() as u32;
        let descriptors: u32 = config
            .interfaces
            .iter()
            .map(|i| {
                let ports = i.bond.as_ref().map_or(1, |bond| bond.members.len() as u32);
                ports * queues * (u32::from(i.rx_descriptors) + u32::from(i.tx_descriptors))
            })
            .sum();
        let caches = (queues + 1) * config.mempool.cache * 3 / 2;
        assert!(
            config.mempool.mbufs >= descriptors + caches,
            "{name}: mempool.mbufs {} < {descriptors} descriptors + {caches} cached",
            config.mempool.mbufs
        );
    }
}

//! The config file as the gateway loads it: TOML through the `config` crate into
//! `GatewayConfig` and `validate` (`GatewayConfig::from_text`, as start-up and reload load
//! it), then compiled into the pipeline's `RouterConfig`
//! (`pipeline_config::router_config`: routes, zones, NAT, firewall rules, QoS, keyword block,
//! parental control) and the flow table settings. What must hold: nothing panics. A config
//! that validates may still fail to compile (parental time windows, MACs and category names
//! are only checked there); start and reload refuse it with the error, as they must.
//!
//! An input with a line `#reload` is two configs, the running one and the file reloaded over
//! it: both go the way above, and the reload's merge too (`reload::merge_for_reload`, then
//! validated whole and compiled, as `reload::load_for_reload` does). What must also hold: the
//! merged config needs no restart against the running one (every restart-only setting is
//! kept as it runs).
//!
//! Two things differ from a real load, for speed and determinism: routes shorter than /12
//! are left out of the compiled table (a default route fills all 2^24 entries of the DIR-24-8
//! table, 32 MiB per exec; the route table has its own property tests), and parental
//! category files are all read from /dev/null.
#![no_main]

use std::path::Path;

use gateway::compile::router::{conntrack_config, router_config};
use gateway::config::GatewayConfig;
use gateway::reload::{merge_for_reload, restart_required};
use libfuzzer_sys::fuzz_target;

/// Routes this short would make every exec fill megabytes of route table.
const SHORTEST_COMPILED_PREFIX: u8 = 12;

/// FUZZ_VERBOSE=1: say how far each input got (to check seeds).
fn verbose(what: impl FnOnce() -> String) {
    static VERBOSE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *VERBOSE.get_or_init(|| std::env::var_os("FUZZ_VERBOSE").is_some_and(|v| v == "1")) {
        eprintln!("{}", what());
    }
}

/// As the gateway loads it (`GatewayConfig::from_text`: the keys checked, the `config` crate,
/// validation), without the file; no `GATEWAY__*` overrides are set here.
fn parse(text: &str) -> Option<GatewayConfig> {
    let parsed = GatewayConfig::from_text(Path::new("fuzz.toml"), text);
    if let Err(error) = &parsed {
        verbose(|| format!("load: {error}"));
    }
    parsed.ok()
}

/// Loads, checks and compiles one config as start-up would; `None` if it does not load.
fn start(text: &str) -> Option<GatewayConfig> {
    let config = parse(text)?;
    compile(config.clone());
    Some(config)
}

fn compile(mut config: GatewayConfig) {
    let _ = conntrack_config(&config);
    for iface in &config.interfaces {
        let _ = iface.eal_devices();
    }
    let _ = config.zone_names();
    let _ = config.warnings();
    if config.interfaces.iter().any(|iface| {
        iface
            .address
            .cidr()
            .is_some_and(|cidr| cidr.len < SHORTEST_COMPILED_PREFIX)
    }) {
        return;
    }
    config
        .routes
        .retain(|route| route.destination.len >= SHORTEST_COMPILED_PREFIX);
    for path in config.parental_control.categories.values_mut() {
        *path = "/dev/null".to_string();
    }
    let macs: Vec<[u8; 6]> = (0..config.interfaces.len())
        .map(|i| [0x02, 0, 0, 0, (i >> 8) as u8, i as u8])
        .collect();
    match router_config(&config, &macs) {
        Ok(_) => verbose(|| "compiled".to_string()),
        Err(error) => verbose(|| format!("compile: {error:#}")),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some((running_text, reloaded_text)) = text.split_once("\n#reload\n") else {
        start(text);
        return;
    };
    let Some(running) = start(running_text) else {
        return;
    };
    let Some(reloaded) = start(reloaded_text) else {
        return;
    };
    let merged = merge_for_reload(&running, reloaded);
    let kept = restart_required(&running, &merged);
    assert!(
        kept.is_empty(),
        "the merge changed restart-only settings: {kept:?}"
    );
    match merged.validate() {
        Ok(()) => compile(merged),
        Err(error) => verbose(|| format!("merge: {error}")),
    }
});

//! The config file as the gateway loads it: TOML through the `config` crate into
//! `GatewayConfig`, `validate`, then compiled into the pipeline's `RouterConfig`
//! (`pipeline_config::router_config`: routes, zones, NAT, firewall rules, QoS, keyword block,
//! parental control) and the flow table settings. What must hold: nothing panics. A config
//! that validates may still fail to compile (parental time windows, MACs and category names
//! are only checked there); start and reload refuse it with the error, as they must.
//!
//! Two things differ from a real load, for speed and determinism: routes shorter than /12
//! are left out of the compiled table (a default route fills all 2^24 entries of the DIR-24-8
//! table, 32 MiB per exec; the route table has its own property tests), and parental
//! category files are all read from /dev/null.
#![no_main]

use gateway::config::GatewayConfig;
use gateway::pipeline_config::{conntrack_config, router_config};
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

fn parse(text: &str) -> Option<GatewayConfig> {
    // As GatewayConfig::load, without the file and the environment overrides.
    let parsed = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .and_then(|built| built.try_deserialize());
    if let Err(error) = &parsed {
        verbose(|| format!("parse: {error}"));
    }
    parsed.ok()
}

/// Known, not ours: the `config` crate (0.14.1) reads a quoted key as a path with array
/// subscripts and grows the array to the subscript. A negative one past the start
/// (`["1[-9].12"]`) computes `len - 9`, which overflows (a panic with overflow checks; in a
/// release build it wraps and `Vec::resize` panics with "capacity overflow"); a huge one
/// (`["a[33333333333332]"]`) makes `Vec::resize` abort on a petabyte allocation. Either way
/// `gateway check-config` and `run` die on such a file. Inputs with a subscript in a quoted
/// string are skipped unless FUZZ_STRICT=1, so the campaign can look for anything else.
fn known_subscript_key(text: &str) -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *STRICT.get_or_init(|| std::env::var_os("FUZZ_STRICT").is_some_and(|v| v == "1")) {
        return false;
    }
    text.lines().any(|line| {
        line.split('"').skip(1).step_by(2).any(|quoted| {
            // The path parser allows whitespace inside the brackets.
            quoted.split('[').skip(1).any(|after| {
                after
                    .trim_start()
                    .starts_with(|c: char| c == '-' || c.is_ascii_digit())
            })
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if known_subscript_key(text) {
        return;
    }
    let Some(mut config) = parse(text) else {
        return;
    };
    if let Err(error) = config.validate() {
        verbose(|| format!("validate: {error}"));
        return;
    }
    let _ = conntrack_config(&config);
    for iface in &config.interfaces {
        let _ = iface.eal_devices();
    }
    let _ = config.zone_names();
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
});

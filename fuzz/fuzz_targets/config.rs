//! The config file as the gateway loads it: TOML through the `config` crate into
//! `GatewayConfig`, `validate`, then compiled into the pipeline's `RouterConfig`
//! (`pipeline_config::router_config`: routes, zones, NAT, firewall rules, QoS, keyword block,
//! parental control) and the flow table settings. What must hold: nothing panics, and a
//! config that `validate` accepts compiles (a reload that validated would otherwise fail
//! only when applied).
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

fn parse(text: &str) -> Option<GatewayConfig> {
    // As GatewayConfig::load, without the file and the environment overrides.
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()
        .ok()?
        .try_deserialize()
        .ok()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(mut config) = parse(text) else {
        return;
    };
    if config.validate().is_err() {
        return;
    }
    let _ = conntrack_config(&config);
    for iface in &config.interfaces {
        let _ = iface.eal_devices();
    }
    let _ = config.zone_names();
    if config
        .interfaces
        .iter()
        .any(|iface| iface.address.len < SHORTEST_COMPILED_PREFIX)
    {
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
    if let Err(error) = router_config(&config, &macs) {
        panic!("a config that validates does not compile: {error:#}");
    }
});

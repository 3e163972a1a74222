//! `gateway check-config` runs the validation start runs: a table of bad files, each refused
//! with a message that names the field and says why. Each case is the lab config with one
//! change (a line replaced, or a section appended).

use std::path::PathBuf;

use gateway::compile::router::check_startable;
use gateway::config::GatewayConfig;

const LAB: &str = include_str!("../../configs/lab.toml");

/// Writes `text` to a file of its own and runs check-config's validation on it.
fn check(name: &str, text: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("gw-check-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let result = GatewayConfig::load(&path)
        .map_err(anyhow::Error::from)
        .and_then(|config| Ok(check_startable(&config)?))
        .map_err(|err| format!("{err:#}"));
    std::fs::remove_file(&path).ok();
    result
}

/// The lab config with `from` replaced by `to` (which must occur).
fn replaced(from: &str, to: &str) -> String {
    assert!(LAB.contains(from), "the lab config has no {from:?}");
    LAB.replacen(from, to, 1)
}

fn appended(extra: &str) -> String {
    format!("{LAB}\n{extra}\n")
}

/// Every config in configs/ (the lab's, the deployments', the examples for real networks).
#[test]
fn the_shipped_configs_pass() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../configs");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("configs/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            check(&name, &text).unwrap_or_else(|err| panic!("configs/{name}.toml: {err}"));
            names.push(name);
        }
    }
    names.sort();
    for expected in ["home-router", "lab", "small-office", "x550", "x550-lacp"] {
        assert!(
            names.iter().any(|n| n == expected),
            "configs/{expected}.toml is missing"
        );
    }
}

#[test]
fn every_bad_file_is_refused_naming_its_field() {
    let missing_list = std::env::temp_dir().join("gw-check-config-no-such-list.txt");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "EAL memory in extra_args beside memory_mb",
            replaced("extra_args = []", "extra_args = [\"--socket-mem=1024,0\"]"),
            "eal.extra_args[0]",
        ),
        (
            "-m in extra_args",
            replaced("extra_args = []", "extra_args = [\"--no-telemetry\", \"-m2048\"]"),
            "eal.extra_args[1]",
        ),
        (
            "per-node memory that gives no node any",
            replaced("extra_args = []", "extra_args = []\nsocket_memory_mb = [0, 0]"),
            "eal.socket_memory_mb",
        ),
        (
            "overlapping subnets",
            replaced("address = \"10.0.0.1/24\"", "address = \"192.168.10.200/16\""),
            "interfaces[1].address",
        ),
        (
            "two default routes",
            appended("[[routes]]\ndestination = \"0.0.0.0/0\"\nvia = \"10.0.0.3\""),
            "routes[1].destination",
        ),
        (
            "a missing category file",
            appended(&format!(
                "[parental_control]\nenabled = true\ncategories = {{ games = {:?} }}",
                missing_list.display().to_string()
            )),
            "parental_control.categories.games",
        ),
        (
            "a firewall prefix with host bits",
            replaced("icmp_type = 8\n", "icmp_type = 8\nsource = \"203.0.113.7/24\"\n"),
            "firewall.rules[0].source",
        ),
        (
            "hours on no day",
            appended(
                "[parental_control]\nenabled = true\n[[parental_control.devices]]\nname = \"tab\"\naddresses = [\"192.168.10.50\"]\nallowed = [\"someday 25:00-26:00\"]",
            ),
            "parental_control.devices[0].allowed[0]",
        ),
        (
            "a forward to the gateway itself",
            replaced("to = \"192.168.10.2\"", "to = \"192.168.10.1\""),
            "nat.port_forwards[0].to",
        ),
        (
            "a forward to no connected subnet's host",
            replaced("to = \"192.168.10.2\"", "to = \"192.168.10.255\""),
            "nat.port_forwards[0].to",
        ),
        (
            "a mempool smaller than the descriptors",
            replaced("mbufs = 16383", "mbufs = 2047"),
            "mempool.mbufs",
        ),
        (
            "a reachable time that wraps",
            replaced("reachable_secs = 300", "reachable_secs = 20000000000"),
            "neighbors.reachable_secs",
        ),
        (
            "a QoS MAC that does not parse",
            appended(
                "[qos]\nenabled = true\nuplink_mbps = 100\ndownlink_mbps = 100\n[[qos.priority]]\nmac = \"02:00:zz:00:00:05\"",
            ),
            "qos.priority[0].mac",
        ),
        (
            "a parental MAC that does not parse",
            appended(
                "[parental_control]\nenabled = true\n[[parental_control.devices]]\nname = \"tab\"\nmacs = [\"not-a-mac\"]",
            ),
            "parental_control.devices[0].macs[0]",
        ),
        (
            "an unknown blocked category",
            appended(
                "[parental_control]\nenabled = true\n[[parental_control.devices]]\nname = \"tab\"\naddresses = [\"192.168.10.50\"]\nblocked_categories = [\"nope\"]",
            ),
            "parental_control.devices[0].blocked_categories",
        ),
        (
            "a route via an unconnected router",
            replaced("via = \"10.0.0.2\"", "via = \"172.16.0.1\""),
            "routes[0].via",
        ),
        (
            "a route prefix with host bits",
            replaced("destination = \"0.0.0.0/0\"", "destination = \"10.9.9.9/16\""),
            "routes[0].destination",
        ),
        (
            "the main lcore as a worker",
            replaced("lcores = [1]", "lcores = [0]"),
            "workers.lcores[0]",
        ),
        (
            "no workers",
            replaced("lcores = [1]", "lcores = []"),
            "workers.lcores",
        ),
        (
            "an MTU the buffers cannot hold",
            replaced("mtu = 1500\n", "mtu = 9000\n"),
            "interfaces[0].mtu",
        ),
        (
            "a masquerade of no interface",
            replaced("masquerade = [\"wan\"]", "masquerade = [\"wna\"]"),
            "nat.masquerade",
        ),
        (
            "a forward on no interface",
            replaced("interface = \"wan\"\nprotocol", "interface = \"dmz\"\nprotocol"),
            "nat.port_forwards[0].interface",
        ),
        (
            "an empty port range",
            replaced("port_range = \"1024-65535\"", "port_range = \"2000-1000\""),
            "nat.port_range",
        ),
        (
            "a policy for an unknown zone",
            replaced(
                "{ from = \"lan\", to = \"wan\", action = \"accept\" }",
                "{ from = \"lan\", to = \"wna\", action = \"accept\" }",
            ),
            "firewall.policy",
        ),
        (
            "a rule for an unknown zone",
            replaced("from = \"wan\"\nto = \"local\"", "from = \"wna\"\nto = \"local\""),
            "firewall.rules[0].from",
        ),
        (
            "ports on an ICMP rule",
            replaced("icmp_type = 8\n", "icmp_type = 8\ndestination_ports = \"22\"\n"),
            "firewall.rules[0]",
        ),
        (
            "a zero conntrack capacity",
            replaced("capacity = 262144", "capacity = 0"),
            "conntrack.capacity",
        ),
        (
            "a cache larger than the pool allows",
            replaced("cache = 256", "cache = 4096"),
            "mempool.cache",
        ),
        (
            "a bad RSS key",
            replaced(
                "address = \"10.0.0.1/24\"",
                "address = \"10.0.0.1/24\"\nrss_key = \"xyz\"",
            ),
            "interfaces[1].rss_key",
        ),
        (
            "an unknown source validation mode",
            replaced(
                "address = \"10.0.0.1/24\"",
                "address = \"10.0.0.1/24\"\nsource_validation = \"paranoid\"",
            ),
            "source_validation",
        ),
        (
            "a quoted key with a negative subscript (crashed the config crate)",
            appended("[\"1[-9].12\"]"),
            "1[-9].12",
        ),
        (
            "a quoted key with a huge subscript (aborted on the allocation)",
            appended("[\"a[33333333333332]\"]\nx = 1"),
            "a[33333333333332]",
        ),
        (
            "an unknown field",
            replaced("[workers]", "[workers]\nspeed = 3"),
            "speed",
        ),
    ];
    assert!(cases.len() >= 25);
    let mut wrong = Vec::new();
    for (i, (what, text, field)) in cases.iter().enumerate() {
        match check(&format!("case-{i}"), text) {
            Ok(()) => wrong.push(format!("{what}: accepted")),
            Err(message) if !message.contains(field) => {
                wrong.push(format!("{what}: {message:?} does not name {field}"))
            }
            Err(_) => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        cases.len(),
        wrong.join("\n")
    );
}

/// `metrics.web_config`: check-config reads the web-config file as start does, and names the
/// config field, the file and the field in it.
#[test]
fn a_bad_web_config_file_is_refused_naming_its_field() {
    let dir = std::env::temp_dir().join(format!("gw-check-web-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good_hash = bcrypt::hash("pw", 4).unwrap();
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("a web-config file that is not there", None, "No such file"),
        (
            "a user whose hash is not bcrypt",
            Some("basic_auth_users:\n  prometheus: secret\n".into()),
            "basic_auth_users.prometheus: not a bcrypt hash",
        ),
        (
            "a missing certificate file",
            Some(format!(
                "tls_server_config:\n  cert_file: {0}/none.crt\n  key_file: {0}/none.key\n",
                dir.display()
            )),
            "tls_server_config.cert_file:",
        ),
        (
            "TLS without a key file",
            Some("tls_server_config:\n  cert_file: gateway.crt\n".into()),
            "tls_server_config.key_file: is required",
        ),
        (
            "a misspelt section (TLS silently off otherwise)",
            Some("tls_server_confg:\n  cert_file: a.crt\n".into()),
            "unknown field `tls_server_confg`",
        ),
        (
            "an unknown key in tls_server_config",
            Some("tls_server_config:\n  cert: a.crt\n  certfile: a.crt\n".into()),
            "unknown field `certfile`",
        ),
        (
            "TLS 1.0",
            Some(
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n".into(),
            ),
            "tls_server_config.min_version: TLS10 is not supported",
        ),
        (
            "client certificates asked for without a CA",
            Some(
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  \
                 client_auth_type: RequireAndVerifyClientCert\n"
                    .into(),
            ),
            "tls_server_config.client_ca_file: is required",
        ),
        (
            "not YAML",
            Some("basic_auth_users: [\n".into()),
            "metrics.web_config",
        ),
    ];
    let mut wrong = Vec::new();
    for (i, (what, yaml, expected)) in cases.iter().enumerate() {
        let path = dir.join(format!("web-{i}.yml"));
        match yaml {
            Some(yaml) => std::fs::write(&path, yaml).unwrap(),
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
        let text = replaced(
            "listen = \"127.0.0.1:9469\"",
            &format!(
                "listen = \"127.0.0.1:9469\"\nweb_config = \"{}\"",
                path.display()
            ),
        );
        match check(&format!("web-{i}"), &text) {
            Ok(()) => wrong.push(format!("{what}: accepted")),
            Err(message)
                if !message.contains("metrics.web_config")
                    || !message.contains(&path.display().to_string())
                    || !message.contains(expected) =>
            {
                wrong.push(format!("{what}: {message:?} does not say {expected:?}"))
            }
            Err(_) => {}
        }
    }
    // A good one passes: basic auth only (TLS is proved in metrics_tls.rs).
    let good = dir.join("web-good.yml");
    std::fs::write(
        &good,
        format!("basic_auth_users:\n  prometheus: {good_hash}\n"),
    )
    .unwrap();
    let text = replaced(
        "listen = \"127.0.0.1:9469\"",
        &format!(
            "listen = \"127.0.0.1:9469\"\nweb_config = \"{}\"",
            good.display()
        ),
    );
    if let Err(err) = check("web-good", &text) {
        wrong.push(format!("a good web-config file: {err}"));
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A file that cannot be read is named with the system's reason, once (`{:#}` prints an
/// error's sources after it: the reason must not be both).
#[test]
fn a_missing_file_is_named_once_with_its_reason() {
    let path = std::env::temp_dir().join(format!(
        "gw-check-config-missing-{}.toml",
        std::process::id()
    ));
    let err = GatewayConfig::load(&path)
        .map(|_| ())
        .map_err(|err| format!("{:#}", anyhow::Error::from(err)))
        .expect_err("a missing file is refused");
    assert!(err.starts_with(&path.display().to_string()), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

/// deploy/frr/gateway-bgp.toml is a fragment (its header says so): added to the config it
/// names, the file passes (tests/e2e/test_frr_bgp.sh proves the rule end to end).
#[test]
fn the_bgp_fragment_added_to_the_x550_config_passes() {
    let fragment = include_str!("../../deploy/frr/gateway-bgp.toml");
    assert!(
        fragment.contains("add to the gateway's config (configs/x550.toml)"),
        "the fragment's header names the config it is added to"
    );
    let x550 = include_str!("../../configs/x550.toml");
    check("x550-with-bgp", &format!("{x550}\n{fragment}")).expect("x550.toml with the BGP rule");
}

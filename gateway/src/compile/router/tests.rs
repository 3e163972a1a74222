use super::*;

#[test]
fn windows_parse_days_ranges_and_times() {
    let window = parse_window("mon-fri 07:00-21:30").unwrap();
    assert_eq!(window.weekdays, days::WORKDAYS);
    assert_eq!((window.start_minute, window.end_minute), (420, 1290));
    assert_eq!(
        parse_window("sat,sun 22:00-06:00").unwrap().weekdays,
        days::WEEKEND
    );
    assert_eq!(
        parse_window("fri-mon 00:00-24:00").unwrap().weekdays,
        days::FRIDAY | days::SATURDAY | days::SUNDAY | days::MONDAY
    );
    assert_eq!(
        parse_window("daily 06:00-23:00").unwrap().weekdays,
        days::EVERY_DAY
    );
    assert!(parse_window("someday 06:00-07:00").is_err());
    assert!(parse_window("mon 25:00-26:00").is_err());
    assert!(parse_window("mon").is_err());
}

/// Closed between zones: only what a policy names crosses from one zone to another; an
/// inside zone still reaches itself and the gateway, an outside one neither.
#[test]
fn a_zone_pair_without_a_policy_is_dropped() {
    let config = GatewayConfig::from_text(
        std::path::Path::new("zones.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "lan2"
zone = "lan"
device = "net_ring2"
address = "192.168.2.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "guest"
parent = "lan"
vlan = 20
address = "192.168.20.1/24"
[nat]
masquerade = ["wan"]
[firewall]
policy = [{ from = "lan", to = "wan", action = "accept" }]
"#,
    )
    .unwrap();
    let router = router_config(&config, &[[2, 0, 0, 0, 0, 1]; 4]).unwrap();
    let policy = router.stateful.firewall.policy();
    let (lan, wan, guest) = (ZoneId(0), ZoneId(1), ZoneId(2));
    for (from, to, expected) in [
        (lan, wan, Action::Accept),
        (lan, lan, Action::Accept),
        (lan, ZoneId::LOCAL, Action::Accept),
        (lan, guest, Action::Drop),
        (guest, lan, Action::Drop),
        (guest, wan, Action::Drop),
        (guest, guest, Action::Accept),
        (guest, ZoneId::LOCAL, Action::Accept),
        (wan, lan, Action::Drop),
        (wan, wan, Action::Drop),
        (wan, ZoneId::LOCAL, Action::Drop),
        // What the kernel opens is tracked; its replies need no wan -> local rule.
        (ZoneId::LOCAL, wan, Action::Accept),
        (ZoneId::LOCAL, lan, Action::Accept),
        (ZoneId::LOCAL, guest, Action::Accept),
    ] {
        assert_eq!(policy.default_for(from, to), expected, "{from:?} -> {to:?}");
    }
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("zone \"guest\"") && warnings[0].contains("to = \"wan\""),
        "{warnings:?}"
    );
}

/// A policy entry with `log = true` logs its pair's default decisions under `policy FROM->TO`;
/// the other pairs' do not.
#[test]
fn a_logged_policy_entry_names_its_pair() {
    let config = GatewayConfig::from_text(
        std::path::Path::new("logged-pairs.toml"),
        r#"
[workers]
lcores = [1]
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[nat]
masquerade = ["wan"]
[firewall]
policy = [
    { from = "lan", to = "wan", action = "accept", log = true },
    { from = "wan", to = "local", action = "drop", log = true },
    { from = "wan", to = "lan", action = "drop" },
]
[firewall.log]
syslog_udp = "127.0.0.1:514"
"#,
    )
    .unwrap();
    let router = router_config(&config, &[[2, 0, 0, 0, 0, 1]; 2]).unwrap();
    let firewall = &router.stateful.firewall;
    let (lan, wan) = (ZoneId(0), ZoneId(1));
    let logged = |from, to| {
        firewall
            .pair_logged((from, to))
            .map(|name| name.to_string())
    };
    assert_eq!(logged(lan, wan).as_deref(), Some("policy lan->wan"));
    assert_eq!(
        logged(wan, ZoneId::LOCAL).as_deref(),
        Some("policy wan->local")
    );
    assert_eq!(logged(wan, lan), None);
    assert_eq!(logged(lan, ZoneId::LOCAL), None);
    assert_eq!(logged(ZoneId::LOCAL, wan), None);
}

/// CompileError prints what the anyhow chain it replaced printed: a field over a message,
/// and a context over a std error, each with `{:#}` (through anyhow, as main.rs prints)
/// and with ErrorChain (as reload/load.rs does), and `{}` alone.
#[test]
fn compile_errors_print_as_their_anyhow_chains_did() {
    use crate::dpdk::ErrorChain;
    let typed =
        CompileError::at("firewall.policy[0].to".into())(CompileError::NoZone("dmz".into()));
    let old = anyhow::anyhow!("no zone named {:?}", "dmz").context("firewall.policy[0].to");
    assert_eq!(
        format!("{:#}", anyhow::Error::from(typed)),
        format!("{old:#}")
    );
    let typed =
        CompileError::at("firewall.policy[0].to".into())(CompileError::NoZone("dmz".into()));
    assert_eq!(ErrorChain(&typed).to_string(), format!("{old:#}"));
    assert_eq!(typed.to_string(), old.to_string());
    assert_eq!(
        ErrorChain(&typed).to_string(),
        "firewall.policy[0].to: no zone named \"dmz\""
    );

    let cause = || u8::try_from(300_usize).unwrap_err();
    let typed = CompileError::at("interfaces[0].zone".into())(CompileError::TooManyZones(cause()));
    let old = anyhow::Error::new(cause())
        .context("too many zones")
        .context("interfaces[0].zone");
    assert_eq!(ErrorChain(&typed).to_string(), format!("{old:#}"));
    assert_eq!(
        format!("{:#}", anyhow::Error::from(typed)),
        format!("{old:#}")
    );
}

use super::*;

const LAB: &str = r#"
        [workers]
        lcores = [1]
        [[interfaces]]
        name = "lan"
        device = "net_af_packet0,iface=gw-lan"
        address = "192.168.10.1/24"
        [[interfaces]]
        name = "wan"
        device = "net_af_packet1,iface=gw-wan"
        address = "10.0.0.1/24"
        [[routes]]
        destination = "0.0.0.0/0"
        via = "10.0.0.2"
    "#;

fn parse(text: &str) -> Result<GatewayConfig, ConfigError> {
    let dir = std::env::temp_dir().join(format!("gw-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Tests run in parallel threads: each call gets a file of its own.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let file = dir.join(format!("config-{n}.toml"));
    std::fs::write(&file, text).unwrap();
    let result = GatewayConfig::load(&file);
    std::fs::remove_file(&file).ok();
    result
}

/// Start-up and reload read the file once and load from that text, so the digest they
/// keep of it is of what loaded; `path` only names the file in errors.
#[test]
fn from_text_loads_the_text_given_and_names_the_path_in_errors() {
    let path = Path::new("/nonexistent/gateway.toml");
    let config = GatewayConfig::from_text(path, LAB).unwrap();
    assert_eq!(config.interfaces[1].name, "wan");
    let bad = GatewayConfig::from_text(path, "[workers\nlcores = [1]")
        .unwrap_err()
        .to_string();
    assert!(bad.starts_with("/nonexistent/gateway.toml: "), "{bad}");
    // A value of the wrong type: the field, and the file it is in.
    let mistyped = format!("{LAB}\n[icmp]\nerrors_per_sec = \"many\"\n");
    let mistyped = GatewayConfig::from_text(path, &mistyped)
        .unwrap_err()
        .to_string();
    assert!(mistyped.starts_with("icmp.errors_per_sec: "), "{mistyped}");
    assert!(
        mistyped.ends_with("in /nonexistent/gateway.toml"),
        "{mistyped}"
    );
    let unreadable = read_config_file(path).unwrap_err().to_string();
    assert!(
        unreadable.starts_with("/nonexistent/gateway.toml: "),
        "{unreadable}"
    );
    assert!(unreadable.contains("No such file"), "{unreadable}");
}

#[test]
fn lab_config_loads_with_defaults() {
    let config = parse(LAB).unwrap();
    assert_eq!(config.interfaces[0].mtu(), 1500);
    assert_eq!(config.eal.hugepages, HugepageMode::Auto);
    assert_eq!(config.routes[0].destination.len, 0);
    assert_eq!(config.interface_for("10.0.0.2".parse().unwrap()), Some(1));
}

#[test]
fn icmp_echo_budget_is_optional_beside_the_error_budget() {
    let config = parse(&format!("{LAB}\n[icmp]\nerrors_per_sec = 5\n")).unwrap();
    let defaults = IcmpConfig::default();
    assert_eq!(config.icmp.errors_per_sec, 5);
    assert_eq!(config.icmp.burst, defaults.burst);
    assert_eq!(
        (config.icmp.echo_per_sec, config.icmp.echo_burst),
        (1000, 100)
    );
    let config = parse(&format!(
        "{LAB}\n[icmp]\necho_per_sec = 7\necho_burst = 2\n"
    ))
    .unwrap();
    assert_eq!((config.icmp.echo_per_sec, config.icmp.echo_burst), (7, 2));
    assert_eq!(config.icmp.errors_per_sec, defaults.errors_per_sec);
}

#[test]
fn errors_name_the_field() {
    let bad_via = LAB.replace("via = \"10.0.0.2\"", "via = \"172.16.0.1\"");
    let err = parse(&bad_via).unwrap_err().to_string();
    assert!(err.starts_with("routes[0].via:"), "{err}");

    let bad_cidr = LAB.replace("192.168.10.1/24", "192.168.10.1/40");
    let err = parse(&bad_cidr).unwrap_err().to_string();
    assert!(err.contains("prefix length"), "{err}");

    let unknown = LAB.replace("[workers]", "[workers]\nspeed = 3");
    let err = parse(&unknown).unwrap_err().to_string();
    assert!(err.contains("speed"), "{err}");

    let twice = LAB
        .replace("gw-wan", "gw-lan")
        .replace("net_af_packet1", "net_af_packet0");
    let err = parse(&twice).unwrap_err().to_string();
    assert!(err.starts_with("interfaces[1].device:"), "{err}");

    let main_as_worker = LAB.replace("lcores = [1]", "lcores = [0]");
    let err = parse(&main_as_worker).unwrap_err().to_string();
    assert!(err.starts_with("workers.lcores[0]:"), "{err}");
}

#[test]
fn a_virtual_address_is_a_host_of_its_twinned_interfaces_static_subnet() {
    let with = |address: &str, vip: &str, twin: bool| {
        LAB.replace(
            "address = \"10.0.0.1/24\"",
            &format!("address = \"{address}\"\nvirtual_address = \"{vip}\"\nkernel_twin = {twin}"),
        )
    };
    let config = parse(&with("10.0.0.3/24", "10.0.0.1", true)).unwrap();
    assert_eq!(
        config.interfaces[1].virtual_address,
        Some("10.0.0.1".parse().unwrap())
    );
    for (address, vip, twin, why) in [
        ("10.0.0.3/24", "10.0.1.1", true, "outside"),
        (
            "10.0.0.3/24",
            "10.0.0.3",
            true,
            "other than the interface's own",
        ),
        (
            "10.0.0.3/24",
            "10.0.0.0",
            true,
            "other than the interface's own",
        ),
        (
            "10.0.0.3/24",
            "10.0.0.255",
            true,
            "other than the interface's own",
        ),
        ("10.0.0.3/24", "10.0.0.1", false, "needs a kernel twin"),
        ("dhcp", "10.0.0.1", true, "needs a static address"),
    ] {
        let err = parse(&with(address, vip, twin)).unwrap_err().to_string();
        assert!(
            err.starts_with("interfaces[1].virtual_address:") && err.contains(why),
            "{address} {vip} twin {twin}: {err}"
        );
    }
}

#[test]
fn a_nat_address_is_routed_to_a_masquerading_interface_and_on_no_link() {
    let with = |nat: &str, masquerade: &str| {
        format!(
            "{}\n[nat]\nmasquerade = [{masquerade}]\n",
            LAB.replace(
                "address = \"10.0.0.1/24\"",
                &format!("address = \"10.0.0.1/24\"\nnat_address = \"{nat}\""),
            )
        )
    };
    let config = parse(&with("100.64.0.3", "\"wan\"")).unwrap();
    assert_eq!(
        config.interfaces[1].nat_address,
        Some("100.64.0.3".parse().unwrap())
    );
    for (nat, masquerade, why) in [
        ("100.64.0.3", "", "not in nat.masquerade"),
        ("10.0.0.7", "\"wan\"", "on interfaces[1]'s subnet"),
        ("192.168.10.7", "\"wan\"", "on interfaces[0]'s subnet"),
        ("224.0.0.9", "\"wan\"", "not a unicast host address"),
        ("0.0.0.0", "\"wan\"", "not a unicast host address"),
    ] {
        let err = parse(&with(nat, masquerade)).unwrap_err().to_string();
        assert!(
            err.starts_with("interfaces[1].nat_address:") && err.contains(why),
            "{nat} masquerade [{masquerade}]: {err}"
        );
    }
}

/// Two ISPs: WAN1 (10.0.0.0/24) and WAN2 (10.1.0.0/24), both masqueraded, WAN2 with a twin
/// for its health checks; `extra` is appended.
fn two_uplinks(extra: &str) -> String {
    format!(
        r#"
        [workers]
        lcores = [1]
        [[interfaces]]
        name = "lan"
        device = "net_ring0"
        address = "192.168.10.1/24"
        [[interfaces]]
        name = "wan1"
        device = "net_ring1"
        address = "10.0.0.1/24"
        [[interfaces]]
        name = "wan2"
        device = "net_ring2"
        address = "10.1.0.1/24"
        kernel_twin = true
        [nat]
        masquerade = ["wan1", "wan2"]
        [[uplinks]]
        interface = "wan1"
        via = "10.0.0.2"
        weight = 2
        [[uplinks]]
        interface = "wan2"
        via = "10.1.0.2"
        priority = 1
        [uplinks.health]
        targets = ["198.51.100.1", "198.51.100.2"]
        {extra}
        "#
    )
}

#[test]
fn several_interfaces_masquerade_as_uplinks() {
    let config = parse(&two_uplinks("")).unwrap();
    assert_eq!(config.nat.masquerade, ["wan1", "wan2"]);
    assert_eq!(config.uplinks.len(), 2);
    let health = config.uplinks[1].health.as_ref().unwrap();
    assert_eq!((health.interval_ms, health.down, health.up), (1000, 3, 3));
    assert_eq!(config.routing.on_uplink_down, OnUplinkDown::End);
    assert!(config.routing.resets_tcp());
    let tcp = parse(&two_uplinks("probe = \"tcp:443\"\ninterval_ms = 2000")).unwrap();
    let probe = tcp.uplinks[1].health.as_ref().map(|health| health.probe);
    assert_eq!(probe, Some(ProbeKind::Tcp(443)));
    let twice = LAB.replace(
        "via = \"10.0.0.2\"",
        "via = \"10.0.0.2\"\n[nat]\nmasquerade = [\"wan\", \"wan\"]",
    );
    let err = parse(&twice).unwrap_err().to_string();
    assert!(err.starts_with("nat.masquerade[1]:"), "{err}");
}

#[test]
fn uplink_errors_name_the_field() {
    let cases = [
        (
            two_uplinks("").replace(
                "masquerade = [\"wan1\", \"wan2\"]",
                "masquerade = [\"wan1\"]",
            ),
            "uplinks[1].interface:",
            "not in nat.masquerade",
        ),
        (
            two_uplinks("").replace("via = \"10.1.0.2\"", "via = \"10.0.0.3\""),
            "uplinks[1].via:",
            "subnet",
        ),
        (
            two_uplinks("").replace("weight = 2", "weight = 0"),
            "uplinks[0].weight:",
            "1 to 1000",
        ),
        (
            two_uplinks("").replace("        kernel_twin = true\n", ""),
            "uplinks[1].health:",
            "kernel_twin",
        ),
        (
            two_uplinks("probe = \"tcp\""),
            "uplinks[1].health.probe:",
            "\"tcp:PORT\"",
        ),
        (
            // A PPPoE uplink's twin carries IPv6 only: nothing to probe from.
            two_uplinks("")
                .replace(
                    "address = \"10.1.0.1/24\"\n        kernel_twin = true\n",
                    "address = \"pppoe\"\n        kernel_twin = true\n        [interfaces.pppoe]\n        username = \"u\"\n        password = \"p\"\n        [interfaces.ipv6]\n        autoconfigure = true\n",
                )
                .replace("via = \"10.1.0.2\"\n", ""),
            "uplinks[1].health:",
            "LCP echoes",
        ),
        (
            two_uplinks("probe = \"tcp:0\""),
            "uplinks[1].health.probe:",
            "1-65535",
        ),
        (
            two_uplinks("").replace("\"198.51.100.2\"]", "\"198.51.100.1\"]"),
            "uplinks[1].health.targets[1]:",
            "listed twice",
        ),
        (
            two_uplinks("probe = \"tcp:443\"\ninterval_ms = 1500"),
            "uplinks[1].health.timeout_ms:",
            "one after another",
        ),
        (
            two_uplinks("reliability = 3"),
            "uplinks[1].health.reliability:",
            "number of targets",
        ),
        (
            two_uplinks("timeout_ms = 5000"),
            "uplinks[1].health.timeout_ms:",
            "interval_ms",
        ),
        (
            two_uplinks("[[routes]]\ndestination = \"0.0.0.0/0\"\nvia = \"10.0.0.2\""),
            "routes[0].destination:",
            "uplinks",
        ),
        (
            two_uplinks("[[routing.policy]]\nsource = \"192.168.10.7/32\"\nuplink = \"lan\""),
            "routing.policy[0].uplink:",
            "not one of [[uplinks]]",
        ),
        (
            two_uplinks("[[routing.policy]]\nport = \"443\"\nuplink = \"wan2\""),
            "routing.policy[0].port:",
            "protocol",
        ),
        (
            two_uplinks("[[routing.policy]]\nfrom_zone = \"dmz\"\nuplink = \"wan2\""),
            "routing.policy[0].from_zone:",
            "dmz",
        ),
    ];
    for (text, field, reason) in cases {
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.starts_with(field) && err.contains(reason),
            "{field}: {err}"
        );
    }
    let policy = two_uplinks(
        "[routing]\nhash = \"flow\"\non_uplink_down = \"keep\"\n\
         [[routing.policy]]\nsource = \"192.168.10.7/32\"\nprotocol = \"tcp\"\n\
         port = \"443\"\nuplink = \"wan2\"\nfallback = false",
    );
    let config = parse(&policy).unwrap();
    assert_eq!(config.routing.hash, UplinkHashConfig::Flow);
    assert_eq!(config.routing.on_uplink_down, OnUplinkDown::Keep);
    assert!(!config.routing.policy[0].fallback);
}

#[test]
fn an_ipv6_side_is_checked_field_by_field() {
    let with_ipv6 = |lan: &str, wan: &str| {
        let text = LAB
            .replace(
                "address = \"192.168.10.1/24\"",
                &format!("address = \"192.168.10.1/24\"\n[interfaces.ipv6]\n{lan}"),
            )
            .replace(
                "address = \"10.0.0.1/24\"",
                &format!("address = \"10.0.0.1/24\"\n{wan}"),
            );
        parse(&text)
    };
    let good = "addresses = [\"2001:db8:1::1/64\", \"fd00:1::1/48\"]\nrouter_advertisements = true\ndns_servers = [\"2001:db8:1::53\"]";
    let config = with_ipv6(good, "").unwrap();
    let ipv6 = config.interfaces[0].ipv6.as_ref().unwrap();
    assert_eq!(ipv6.addresses[0].to_string(), "2001:db8:1::1/64");
    assert_eq!(ipv6.ra_interval_secs, 600);
    assert!(config.interfaces[1].ipv6.is_none());
    let cases = [
        (
            "addresses = [\"2001:db8:1::1\"]",
            "interfaces[0].ipv6.addresses",
            "address/prefix-length",
        ),
        (
            "addresses = [\"2001:db8:1::1/129\"]",
            "interfaces[0].ipv6.addresses",
            "prefix length",
        ),
        (
            "addresses = [\"fe80::1/64\"]",
            "interfaces[0].ipv6.addresses[0]:",
            "link-local",
        ),
        (
            "addresses = [\"ff02::1/64\"]",
            "interfaces[0].ipv6.addresses[0]:",
            "not a unicast",
        ),
        (
            "addresses = [\"2001:db8:1::1/0\"]",
            "interfaces[0].ipv6.addresses[0]:",
            "1..=128",
        ),
        (
            "router_advertisements = true",
            "interfaces[0].ipv6.router_advertisements:",
            "needs addresses",
        ),
        (
            "addresses = [\"2001:db8:1::1/64\"]\nra_interval_secs = 3",
            "interfaces[0].ipv6.ra_interval_secs:",
            "4..=1800",
        ),
        (
            "addresses = [\"2001:db8:1::1/64\"]\ndns_servers = [\"ff02::1\"]",
            "interfaces[0].ipv6.dns_servers:",
            "unicast",
        ),
        (
            "addresses = [\"2001:db8:1::1/64\"]\nspeed = 1",
            "speed",
            "unknown field",
        ),
    ];
    for (fields, field, reason) in cases {
        let err = with_ipv6(fields, "").unwrap_err().to_string();
        assert!(
            err.contains(field) && err.contains(reason),
            "{fields:?}: {err}"
        );
    }
    // One prefix on two interfaces.
    let overlap = with_ipv6(
        "addresses = [\"2001:db8:1::1/64\"]",
        "[interfaces.ipv6]\naddresses = [\"2001:db8:1::2/48\"]",
    )
    .unwrap_err()
    .to_string();
    assert!(
        overlap.starts_with("interfaces[1].ipv6.addresses[0]:") && overlap.contains("overlaps"),
        "{overlap}"
    );
}

#[test]
fn ipv6_routes_are_checked_and_compiled() {
    let with_routes = |routes: &str| {
        let text = LAB.replace(
            "address = \"10.0.0.1/24\"",
            "address = \"10.0.0.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:ff::1/64\"]",
        ) + routes;
        parse(&text)
    };
    let good = "[[ipv6_routes]]\ndestination = \"::/0\"\nvia = \"fe80::1\"\ninterface = \"wan\"\n\
                    [[ipv6_routes]]\ndestination = \"2001:db8:77::/48\"\nvia = \"2001:db8:ff::2\"\n";
    let config = with_routes(good).unwrap();
    assert_eq!(config.ipv6_route_port(0).unwrap(), 1);
    assert_eq!(config.ipv6_route_port(1).unwrap(), 1);
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let router = crate::compile::router::router_config(&config, &macs).unwrap();
    let hop = |addr: &str| router.routes6.lookup(addr.parse().unwrap());
    // The connected prefix, the static /48, the default.
    assert_eq!(
        hop("2001:db8:ff::9").map(|h| (h.port, h.gateway)),
        Some((1, None))
    );
    assert_eq!(
        hop("2001:db8:77:1::1").and_then(|h| h.gateway),
        Some("2001:db8:ff::2".parse().unwrap())
    );
    assert_eq!(
        hop("2606:4700::1").and_then(|h| h.gateway),
        Some("fe80::1".parse().unwrap())
    );
    let cases = [
        (
            "destination = \"::/0\"\nvia = \"fe80::1\"",
            "ipv6_routes[0].interface:",
            "link-local",
        ),
        (
            "destination = \"::/0\"\nvia = \"fe80::1\"\ninterface = \"lan\"",
            "ipv6_routes[0].interface:",
            "no [interfaces.ipv6]",
        ),
        (
            "destination = \"::/0\"\nvia = \"2001:db8:99::1\"",
            "ipv6_routes[0].via:",
            "no interface's IPv6 prefix",
        ),
        (
            "destination = \"2001:db8::1/32\"\nvia = \"2001:db8:ff::2\"",
            "ipv6_routes[0].destination:",
            "host bits",
        ),
        (
            "destination = \"::/0\"\nvia = \"ff02::1\"\ninterface = \"wan\"",
            "ipv6_routes[0].via:",
            "unicast",
        ),
    ];
    for (fields, field, reason) in cases {
        let err = with_routes(&format!("[[ipv6_routes]]\n{fields}\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(field) && err.contains(reason),
            "{fields:?}: {err}"
        );
    }
    let twice =
        format!("{good}[[ipv6_routes]]\ndestination = \"::/0\"\nvia = \"2001:db8:ff::3\"\n");
    let err = with_routes(&twice).unwrap_err().to_string();
    assert!(
        err.starts_with("ipv6_routes[2].destination:") && err.contains("second route"),
        "{err}"
    );
}

#[test]
fn rules_take_prefixes_of_either_family_and_not_both() {
    let with_rule = |fields: &str| {
        parse(&format!(
            "{LAB}\n[[firewall.rules]]\nname = \"r\"\naction = \"drop\"\n{fields}\n"
        ))
    };
    let config = with_rule(
        "source = \"2001:db8:77::/48\"\ndestination = \"2001:db8:10::5/128\"\nprotocol = \"tcp\"",
    )
    .unwrap();
    let rule = config.firewall.rules.last().unwrap();
    assert_eq!(
        rule.source,
        Some(RulePrefix::V6("2001:db8:77::/48".parse().unwrap()))
    );
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    crate::compile::router::router_config(&config, &macs).unwrap();
    assert!(matches!(
        with_rule("source = \"10.0.0.0/8\"")
            .unwrap()
            .firewall
            .rules
            .last()
            .unwrap()
            .source,
        Some(RulePrefix::V4(_))
    ));
    for (fields, field, reason) in [
        (
            "source = \"10.0.0.0/8\"\ndestination = \"2001:db8::/32\"",
            "firewall.rules[0].destination:",
            "another family",
        ),
        (
            "source = \"2001:db8:77::1/48\"",
            "firewall.rules[0].source:",
            "did you mean 2001:db8:77::/48",
        ),
        (
            "destination = \"2001:db8::/32\"\nprotocol = \"icmp\"",
            "firewall.rules[0].protocol:",
            "IPv4",
        ),
        (
            "source = \"2001:db8::/129\"",
            "firewall.rules[0].source",
            "0..=128",
        ),
        (
            "source = \"2001:db8::/32\"\nto = \"local\"",
            "firewall.rules[0].to:",
            "IPv6",
        ),
    ] {
        let err = with_rule(fields).unwrap_err().to_string();
        assert!(
            err.contains(field) && err.contains(reason),
            "{fields}: {err}"
        );
    }
}

#[test]
fn ipv6_pinholes_are_checked_and_compiled() {
    let with_pinholes = |pinholes: &str| {
        let text = LAB
                .replace(
                    "address = \"10.0.0.1/24\"",
                    "address = \"10.0.0.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:ff::1/64\"]",
                )
                .replace(
                    "address = \"192.168.10.1/24\"",
                    "address = \"192.168.10.1/24\"\n[interfaces.ipv6]\naddresses = [\"2001:db8:10::1/64\"]",
                )
                + pinholes;
        parse(&text)
    };
    let good = "[[firewall.pinholes]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = \"22\"\n\
                    to = \"2001:db8:10::5\"\nsource = \"2001:db8:77::/48\"\n";
    let config = with_pinholes(good).unwrap();
    let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]];
    let router = crate::compile::router::router_config(&config, &macs).unwrap();
    assert_eq!(
        router.pinholes6,
        [pipeline::pipeline::config::Pinhole6 {
            interface: 1,
            protocol: 6,
            ports: 22..=22,
            to: "2001:db8:10::5".parse().unwrap(),
            from: ("2001:db8:77::".parse().unwrap(), 48),
        }]
    );
    let cases = [
        (
            "interface = \"dmz\"",
            "to = \"2001:db8:10::5\"",
            "interface:",
            "no interface",
        ),
        (
            "interface = \"wan\"",
            "to = \"fe80::5\"",
            "to:",
            "global unicast",
        ),
        (
            "interface = \"wan\"",
            "to = \"2001:db8:10::1\"",
            "to:",
            "own address",
        ),
        (
            "interface = \"wan\"",
            "to = \"2001:db8:99::5\"",
            "to:",
            "no interface's IPv6",
        ),
        (
            "interface = \"wan\"",
            "to = \"2001:db8:10::5\"\nsource = \"2001:db8:77::1/48\"",
            "source:",
            "host bits",
        ),
    ];
    for (interface, to, field, reason) in cases {
        let pinhole = format!(
            "[[firewall.pinholes]]\n{interface}\nprotocol = \"udp\"\nport = \"53\"\n{to}\n"
        );
        let err = with_pinholes(&pinhole).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("firewall.pinholes[0].{field}")) && err.contains(reason),
            "{pinhole:?}: {err}"
        );
    }
    // On an interface without IPv6.
    let text = LAB.to_string() + good;
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("no [interfaces.ipv6]"), "{err}");
}

#[test]
fn a_vlan_subinterface_is_checked_by_name() {
    let with_vlan = |vlan: &str| {
        let vlan = format!("[[interfaces]]\nname = \"guest\"\n{vlan}\n[[routes]]");
        parse(&LAB.replacen("[[routes]]", &vlan, 1))
    };
    let good = "parent = \"lan\"\nvlan = 20\naddress = \"192.168.20.1/24\"";
    let config = with_vlan(good).unwrap();
    assert!(config.interfaces[2].is_vlan() && !config.interfaces[0].is_vlan());
    assert!(config.interfaces[2].eal_devices().is_empty());
    let cases = [
        (
            "vlan = 20\naddress = \"192.168.20.1/24\"",
            "interfaces[2].vlan:",
            "parent is missing",
        ),
        (
            "parent = \"lan\"\naddress = \"192.168.20.1/24\"",
            "interfaces[2].parent:",
            "vlan is missing",
        ),
        (
            "parent = \"lan\"\nvlan = 4095\naddress = \"192.168.20.1/24\"",
            "interfaces[2].vlan:",
            "not a VLAN id",
        ),
        (
            "parent = \"lan\"\nvlan = 0\naddress = \"192.168.20.1/24\"",
            "interfaces[2].vlan:",
            "not a VLAN id",
        ),
        (
            "parent = \"dmz\"\nvlan = 20\naddress = \"192.168.20.1/24\"",
            "interfaces[2].parent:",
            "names no port",
        ),
        (
            "parent = \"lan\"\nvlan = 20\nmtu = 1600\naddress = \"192.168.20.1/24\"",
            "interfaces[2].mtu:",
            "above its parent",
        ),
        (
            "parent = \"lan\"\nvlan = 20\ndevice = \"net_ring0\"\naddress = \"192.168.20.1/24\"",
            "interfaces[2].device:",
            "parent's port",
        ),
        (
            "parent = \"lan\"\nvlan = 20\npromiscuous = true\naddress = \"192.168.20.1/24\"",
            "interfaces[2].promiscuous:",
            "parent's port",
        ),
        (
            "address = \"192.168.20.1/24\"",
            "interfaces[2].device:",
            "missing",
        ),
    ];
    for (fields, field, reason) in cases {
        let err = with_vlan(fields).unwrap_err().to_string();
        assert!(
            err.starts_with(field) && err.contains(reason),
            "{fields:?}: {err}"
        );
    }
    // A VLAN of a VLAN, and one id twice on a port.
    let twice = format!(
            "{good}\n[[interfaces]]\nname = \"iot\"\nparent = \"lan\"\nvlan = 20\naddress = \"192.168.30.1/24\""
        );
    let err = with_vlan(&twice).unwrap_err().to_string();
    assert!(
        err.starts_with("interfaces[3].vlan:") && err.contains("already has VLAN 20"),
        "{err}"
    );
    let nested = format!(
            "{good}\n[[interfaces]]\nname = \"iot\"\nparent = \"guest\"\nvlan = 30\naddress = \"192.168.30.1/24\""
        );
    let err = with_vlan(&nested).unwrap_err().to_string();
    assert!(err.starts_with("interfaces[3].parent:"), "{err}");
    // The same id on another port is another VLAN.
    let other_port = format!(
            "{good}\n[[interfaces]]\nname = \"wan20\"\nparent = \"wan\"\nvlan = 20\naddress = \"172.16.0.1/24\""
        );
    with_vlan(&other_port).unwrap();
}

#[test]
fn neighbor_arp_limits_have_defaults_and_are_checked_by_name() {
    let config = parse(LAB).unwrap();
    assert_eq!(
        (config.neighbors.pending_total, config.neighbors.locktime_ms),
        (512, 1000)
    );
    for (setting, field) in [
        ("pending_total = 0", "neighbors.pending_total:"),
        // A quarter of the default 16383 mbufs is 4095.
        ("pending_total = 4096", "neighbors.pending_total:"),
        ("locktime_ms = 300000", "neighbors.locktime_ms:"),
    ] {
        let bad = format!("{LAB}\n[neighbors]\n{setting}\n");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.starts_with(field), "{setting}: {err}");
    }
    let fine = format!("{LAB}\n[neighbors]\npending_total = 4095\nlocktime_ms = 0\n");
    assert_eq!(parse(&fine).unwrap().neighbors.pending_total, 4095);
}

#[test]
fn a_logged_rule_needs_a_firewall_log_destination() {
    let rule = "\n[[firewall.rules]]\nname = \"x\"\naction = \"drop\"\nlog = true\n";
    let err = parse(&format!("{LAB}{rule}")).unwrap_err().to_string();
    assert!(err.starts_with("firewall.rules[0].log:"), "{err}");
    let sent = format!("{LAB}{rule}\n[firewall.log]\nsyslog_udp = \"127.0.0.1:514\"\n");
    assert!(parse(&sent).unwrap().firewall.rules[0].log);
    // A logged port forward as well.
    let forward = "\n[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\n\
                   port = 8080\nto = \"192.168.10.5\"\nlog = true\n";
    let err = parse(&format!("{LAB}{forward}")).unwrap_err().to_string();
    assert!(err.starts_with("nat.port_forwards[0].log:"), "{err}");
    let sent = format!("{LAB}{forward}\n[firewall.log]\nsyslog_udp = \"127.0.0.1:514\"\n");
    assert!(parse(&sent).unwrap().nat.port_forwards[0].log);
    // A logged zone pair as well.
    let lab = format!(
        "{LAB}\n[[firewall.policy]]\nfrom = \"wan\"\nto = \"lan\"\naction = \"drop\"\nlog = true\n"
    );
    let err = parse(&lab).unwrap_err().to_string();
    assert!(err.starts_with("firewall.policy[0].log:"), "{err}");
    let logged = format!("{lab}\n[firewall.log]\nsyslog_udp = \"127.0.0.1:514\"\n");
    assert!(parse(&logged).unwrap().firewall.policy[0].log);
    // A JSON lines file is a destination of its own.
    let to_file =
        format!("{lab}\n[firewall.log]\njson_file = \"/var/log/gateway-firewall.jsonl\"\n");
    let config = parse(&to_file).unwrap();
    assert!(config.firewall.policy.iter().any(|pair| pair.log));
    assert!(config.firewall.log.enabled());
    let relative = to_file.replace("\"/var/log/", "\"var/log/");
    let err = parse(&relative).unwrap_err().to_string();
    assert!(err.starts_with("firewall.log.json_file:"), "{err}");
    for (line, field) in [
        ("per_sec = 0", "firewall.log.per_sec:"),
        ("facility = 24", "firewall.log.facility:"),
        ("syslog_unix = \"dev/log\"", "firewall.log.syslog_unix:"),
    ] {
        let err = parse(&format!("{sent}{line}\n")).unwrap_err().to_string();
        assert!(err.starts_with(field), "{line}: {err}");
    }
}

#[test]
fn no_rule_takes_the_metrics_label_of_the_rules_past_the_series_limit() {
    let rule = "\n[[firewall.rules]]\nname = \"(other rules)\"\naction = \"drop\"\n";
    let err = parse(&format!("{LAB}{rule}")).unwrap_err().to_string();
    assert!(err.starts_with("firewall.rules[0].name:"), "{err}");
    assert!(parse(&format!("{LAB}{}", rule.replace("(other rules)", "others"))).is_ok());
}

#[test]
fn the_drop_log_names_known_reasons_and_needs_a_destination() {
    let drops = "\n[firewall.log]\ndrops = [\"conntrack_invalid\", \"no_such_reason\"]\n";
    let err = parse(&format!("{LAB}{drops}")).unwrap_err().to_string();
    assert!(err.starts_with("firewall.log.drops[1]:"), "{err}");
    assert!(
        err.contains("\"no_such_reason\" is no drop reason"),
        "{err}"
    );
    let known = drops.replace(", \"no_such_reason\"", "");
    let err = parse(&format!("{LAB}{known}")).unwrap_err().to_string();
    assert!(err.starts_with("firewall.log.drops:"), "{err}");
    let sent = format!("{LAB}{known}syslog_udp = \"127.0.0.1:514\"\n");
    let config = parse(&sent).unwrap();
    let reasons = config.firewall.log.drop_reasons();
    assert!(reasons.contains(pipeline::DropReason::ConntrackInvalid));
    assert!(!reasons.contains(pipeline::DropReason::FirewallDrop));
    assert_eq!(
        (
            config.firewall.log.drops_sample,
            config.firewall.log.drops_per_sec
        ),
        (1, 10),
        "each asked drop, at most 10 a second per worker, unless told otherwise"
    );
    // A reason only the gateway decides, outside the pipeline: no drop log sees it.
    let outside = known.replace(
        "\"conntrack_invalid\"",
        "\"firewall_drop\", \"tx_queue_full\"",
    );
    let err = parse(&format!("{LAB}{outside}syslog_udp = \"127.0.0.1:514\"\n"))
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("firewall.log.drops[1]:"), "{err}");
    assert!(err.contains("decided outside the pipeline"), "{err}");
    for (line, field) in [
        ("drops_sample = 0", "firewall.log.drops_sample:"),
        ("drops_per_sec = 0", "firewall.log.drops_per_sec:"),
        ("drops_per_sec = 5000", "firewall.log.drops_per_sec:"),
    ] {
        let err = parse(&format!("{sent}{line}\n")).unwrap_err().to_string();
        assert!(err.starts_with(field), "{line}: {err}");
    }
}

#[test]
fn pdump_needs_hugepages_and_leaves_in_memory() {
    let off = format!("{LAB}\n[eal]\npdump = true\nhugepages = \"off\"\n");
    let err = parse(&off).unwrap_err().to_string();
    assert!(err.starts_with("eal.pdump:"), "{err}");
    let on = parse(&format!(
        "{LAB}\n[eal]\npdump = true\nhugepages = \"required\"\n"
    ))
    .unwrap();
    assert!(on.eal.pdump);
    assert!(!crate::runtime::eal_args::eal_args_with(&on, false).in_memory);
    assert!(crate::runtime::eal_args::eal_args_with(&parse(LAB).unwrap(), false).in_memory);
}

#[test]
fn per_host_limits_default_and_are_validated_by_field() {
    let config = parse(LAB).unwrap();
    assert_eq!(config.conntrack.host_flows, 4096);
    assert_eq!(config.nat.host_ports, 4096);
    let table = crate::compile::router::conntrack_config(&config);
    assert_eq!(table.half_open, config.conntrack.capacity / 4);
    for (section, line, field) in [
        ("[conntrack]", "host_flows = 0", "conntrack.host_flows:"),
        (
            "[conntrack]",
            "host_half_open = 0",
            "conntrack.host_half_open:",
        ),
        ("[conntrack]", "half_open = 0", "conntrack.half_open:"),
        (
            "[conntrack]",
            "capacity = 100\nhalf_open = 101",
            "conntrack.half_open:",
        ),
        ("[conntrack]", "hosts = 0", "conntrack.hosts:"),
        ("[nat]", "host_ports = 0", "nat.host_ports:"),
    ] {
        let bad = format!("{LAB}\n{section}\n{line}\n");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.starts_with(field), "{line}: {err}");
    }
    let set = format!("{LAB}\n[conntrack]\nhalf_open = 77\nhost_flows = 9\n");
    let table = crate::compile::router::conntrack_config(&parse(&set).unwrap());
    assert_eq!((table.half_open, table.host_flows), (77, 9));
}

#[test]
fn port_blocks_are_validated_by_field() {
    let with = |lines: &str| parse(&format!("{LAB}\n[nat]\n{lines}\n"));
    assert_eq!(
        with("port_block_size = 256").unwrap().nat.port_block_size,
        256
    );
    assert_eq!(parse(LAB).unwrap().nat.port_block_size, 0);
    for (lines, says) in [
        ("port_block_size = 100", "multiple of 64"),
        ("port_block_size = 65536", "multiple of 64"),
        ("port_block_size = 64", "64 blocks of 64 per host"),
    ] {
        let err = with(lines).unwrap_err().to_string();
        assert!(err.starts_with("nat.port_block_size:"), "{lines}: {err}");
        assert!(err.contains(says), "{lines}: {err}");
    }
    let three = LAB.replace("lcores = [1]", "lcores = [1, 2, 3]");
    let err = parse(&format!("{three}\n[nat]\nport_block_size = 256\n"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("power-of-two number of workers"), "{err}");
}

/// Files that parse but cannot mean what they say (issue 43): refused, naming the field
/// and what is wrong.
#[test]
fn files_that_cannot_mean_what_they_say_are_refused() {
    let forward = |port: &str, to_port: &str| {
        format!(
            "[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = \"{port}\"\n\
                 to = \"192.168.10.2\"\n{to_port}\n"
        )
    };
    let lan_address = |address: &str| {
        LAB.replace(
            "address = \"192.168.10.1/24\"",
            &format!("address = \"{address}\""),
        )
    };
    let cases = [
            (
                format!("{LAB}\n{}", forward("80", "to_port = 0")),
                "nat.port_forwards[0].to_port:",
                "0 is no port",
            ),
            (
                format!("{LAB}\n{}\n{}", forward("80", ""), forward("80", "")),
                "nat.port_forwards[1].port:",
                "overlaps nat.port_forwards[0]",
            ),
            (
                format!("{LAB}\n{}\n{}", forward("8000-8010", ""), forward("8010-8020", "")),
                "nat.port_forwards[1].port:",
                "8010-8020 overlaps nat.port_forwards[0] (8000-8010)",
            ),
            (
                lan_address("192.168.10.0/24"),
                "interfaces[0].address:",
                "network address",
            ),
            (
                lan_address("192.168.10.255/24"),
                "interfaces[0].address:",
                "broadcast address",
            ),
            (
                lan_address("127.0.0.1/8"),
                "interfaces[0].address:",
                "loopback",
            ),
            (
                lan_address("224.0.0.1/24"),
                "interfaces[0].address:",
                "multicast",
            ),
            (
                LAB.replace(
                    "address = \"192.168.10.1/24\"",
                    "address = \"192.168.10.1/24\"\nzone = \"local\"",
                ),
                "interfaces[0].zone:",
                "the gateway itself",
            ),
            (
                format!(
                    "{LAB}\n[firewall]\npolicy = [\n{{ from = \"lan\", to = \"wan\", action = \"accept\" }},\n\
                     {{ from = \"lan\", to = \"wan\", action = \"drop\" }},\n]\n"
                ),
                "firewall.policy[1]:",
                "already firewall.policy[0]",
            ),
        ];
    for (text, field, says) in cases {
        let err = parse(&text).expect_err(&text).to_string();
        assert!(err.starts_with(field), "{field}: {err}");
        assert!(err.contains(says), "{says}: {err}");
    }
    // Disjoint ranges, or one port on two protocols, are two forwards.
    let udp = forward("80", "").replace("\"tcp\"", "\"udp\"");
    parse(&format!(
        "{LAB}\n{}\n{udp}\n{}",
        forward("80", ""),
        forward("81-90", "")
    ))
    .unwrap();
}

/// Issue 43: `gateway check-config` refuses what start refuses and what cannot mean what
/// it says, and each message names the field, the value and what is allowed.
#[test]
fn a_table_of_bad_files_each_refused_by_field() {
    let with = |section: &str| format!("{LAB}\n{section}\n");
    // A line (or subtable) more in the "lan" interface.
    let lan = |extra: &str| {
        LAB.replace(
            "address = \"192.168.10.1/24\"",
            &format!("address = \"192.168.10.1/24\"\n{extra}"),
        )
    };
    let lan_address = |address: &str| {
        LAB.replace(
            "address = \"192.168.10.1/24\"",
            &format!("address = \"{address}\""),
        )
    };
    let bond_mac = |mac: &str| {
        lan(&format!(
            "[interfaces.bond]\nmembers = [\"net_af_packet2,iface=gw-lan2\"]\nmac = \"{mac}\""
        ))
        .replace("net_af_packet0,iface=gw-lan", "net_bonding0")
    };
    let vlan = |id: &str| {
        with(&format!(
                "[[interfaces]]\nname = \"iot\"\nparent = \"lan\"\nvlan = {id}\naddress = \"192.168.20.1/24\""
            ))
    };
    let forward = |port: &str, to_port: &str| {
        with(&format!(
            "[[nat.port_forwards]]\ninterface = \"wan\"\nprotocol = \"tcp\"\nport = {port}\n\
                 to = \"192.168.10.2\"\n{to_port}"
        ))
    };
    let rule = |fields: &str| {
        with(&format!(
            "[[firewall.rules]]\nname = \"r\"\naction = \"accept\"\n{fields}"
        ))
    };
    let policy = |from: &str, to: &str, action: &str| {
        format!("{{ from = \"{from}\", to = \"{to}\", action = \"{action}\" }}")
    };
    let route = |destination: &str, via: &str| {
        LAB.replace("0.0.0.0/0", destination)
            .replace("via = \"10.0.0.2\"", &format!("via = \"{via}\""))
    };
    let cases: Vec<(String, &str, &str)> = vec![
            // Wrong types: never coerced from text.
            (lan("mtu = \"1500\""), "interfaces[0].mtu:", "without quotes, mtu = 1500"),
            (with("[conntrack]\ntcp_loose = \"yes\""), "conntrack.tcp_loose:", "tcp_loose = true"),
            (with("[workers]\nlcores = \"1\"").replace("[workers]\n        lcores = [1]", ""), "workers.lcores:", "expected a sequence"),
            (with("[icmp]\nburst = -1"), "icmp.burst:", "0 to 4294967295"),
            (lan("promiscuous = 1"), "interfaces[0].promiscuous:", "expected a boolean"),
            // Unknown keys: the nearest field suggested.
            (LAB.replace("[workers]", "[workers]\nspeed = 3"), "workers.speed:", "unknown field"),
            (lan("mut = 1400"), "interfaces[0].mut:", "did you mean `mtu`?"),
            (with("[conntrak]\ncapacity = 1"), "conntrak:", "did you mean `conntrack`?"),
            (with("[[interfaces]]\nname = \"dmz\"\ndevice = \"net_af_packet3\""), "interfaces[2].address:", "missing field"),
            // Out of range.
            (lan("mtu = 100000"), "interfaces[0].mtu:", "576 up to mempool.data_room"),
            (lan("mtu = 500"), "interfaces[0].mtu:", "at least 576"),
            (lan("mtu = 9000"), "interfaces[0].mtu:", "fit mempool.data_room (2048)"),
            (lan("tcp_mss = 100"), "interfaces[0].tcp_mss:", "from 536"),
            (LAB.replace("lcores = [1]", "lcores = [99999]"), "workers.lcores[0]:", "DPDK's are 0 to 127"),
            (LAB.replace("lcores = [1]", "lcores = [1, 2, 1]"), "workers.lcores[2]:", "listed twice"),
            (with("[eal]\nmain_lcore = 128"), "eal.main_lcore:", "0 to 127"),
            (with("[eal]\nlog_level = \"verbose\""), "eal.log_level:", "\"verbose\" is not a DPDK log level: emerg, alert, crit, err, warning, notice, info, debug, or 1 to 8"),
            (with("[eal]\nlog_level = \"verbose\""), "eal.log_level:", "; did you mean \"debug\"?"),
            (with("[eal]\nlog_level = \"9\""), "eal.log_level:", "1 to 8"),
            (with("[conntrack]\ncapacity = 1000000000"), "conntrack.capacity:", "1 to 268435456"),
            (with("[conntrack]\ncapacity = 0"), "conntrack.capacity:", "1 to 268435456"),
            (with("[nat]\nbinding_capacity = 0"), "nat.binding_capacity:", "1 to 16777216"),
            (with("[nat]\nbinding_capacity = 16777217"), "nat.binding_capacity:", "1 to 16777216"),
            (with("[icmp]\nburst = 0"), "icmp.burst:", "must be positive while its rate is"),
            (with("[icmp]\necho_burst = 0"), "icmp.echo_burst:", "must be positive while its rate is"),
            (with("[nat.log]\nfacility = 30"), "nat.log.facility:", "0-23"),
            (with("[nat]\nport_range = \"80-90\""), "nat.port_range:", "1024 or above"),
            (with("[[qos.priority]]\ndscp = 64"), "qos.priority[0].dscp:", "0..=63"),
            (with("[[qos.priority]]\n"), "qos.priority[0]:", "matches every packet"),
            (with("[[parental_control.devices]]\nname = \"tablet\""), "parental_control.devices[0]:", "\"tablet\" names no device"),
            (LAB.replacen("name = \"lan\"", "name = \"local\"", 1).replacen("zone = \"lan\"\n", "", 1), "interfaces[0].name:", "\"local\" is the gateway itself"),
            (lan("rx_descriptors = 0"), "interfaces[0].rx_descriptors:", "must be positive"),
            (lan("tx_descriptors = 0"), "interfaces[0].tx_descriptors:", "must be positive"),
            // Each member of a bond has its own rings: 15 of 1,024 descriptors outgrow 16,383 mbufs.
            (lan(&format!("[interfaces.bond]\nmembers = {:?}", (0..15).map(|i| format!("net_ring{i}")).collect::<Vec<_>>())).replace("net_af_packet0,iface=gw-lan", "net_bonding0"), "mempool.mbufs:", "per member of a bond"),
            (lan("[interfaces.bond]\nmembers = []").replace("net_af_packet0,iface=gw-lan", "net_bonding0"), "interfaces[0].bond.members:", "a bond needs a member"),
            (lan("[interfaces.bond]\nmembers = [\"net_bonding0\"]").replace("net_af_packet0,iface=gw-lan", "net_bonding0"), "interfaces[0].bond.members[0]:", "used twice"),
            // Ports.
            (forward("70000", ""), "nat.port_forwards[0].port:", "a port 1-65535 or a range \"8000-8010\""),
            (forward("0", ""), "nat.port_forwards[0].port:", "a port 1-65535"),
            (forward("\"90-80\"", ""), "nat.port_forwards[0].port:", "did you mean \"80-90\"?"),
            (forward("\"http\"", ""), "nat.port_forwards[0].port:", "a port 1-65535 or a range"),
            (forward("80", "to_port = 70000"), "nat.port_forwards[0].to_port:", "a port is 1 to 65535"),
            (forward("80", "to_port = 0"), "nat.port_forwards[0].to_port:", "0 is no port"),
            (format!("{}\n{}", forward("80", ""), forward("80", "").replace(LAB, "")), "nat.port_forwards[1].port:", "overlaps nat.port_forwards[0]"),
            (format!("{}\n{}", forward("\"8000-8010\"", ""), forward("\"8010-8020\"", "").replace(LAB, "")), "nat.port_forwards[1].port:", "8010-8020 overlaps nat.port_forwards[0] (8000-8010)"),
            (forward("80", "").replace("\"tcp\"", "\"sctp\""), "nat.port_forwards[0].protocol:", "unknown variant `sctp`, expected `tcp` or `udp`;"),
            (rule("protocol = \"tcp\"\ndestination_ports = \"ssh\""), "firewall.rules[0].destination_ports:", "a port 1-65535"),
            (rule("icmp_type = 8"), "firewall.rules[0].icmp_type:", "needs protocol = \"icmp\""),
            // Actions and other choices: the allowed values listed, the likely one named.
            (with(&format!("[firewall]\npolicy = [{}]", policy("lan", "wan", "allow"))), "firewall.policy[0].action:", "expected one of `accept`, `drop`, `reject`; did you mean `accept`?"),
            (rule("").replace("\"accept\"", "\"deny\""), "firewall.rules[0].action:", "did you mean `drop`?"),
            (with("[eal]\nhugepages = \"yes\""), "eal.hugepages:", "expected one of `auto`, `required`, `off`"),
            (lan("source_validation = \"strikt\""), "interfaces[0].source_validation:", "strict, loose or off"),
            // Addresses and prefixes.
            (lan_address("192.168.10.1/40"), "interfaces[0].address:", "prefix length 0..=32"),
            (lan_address("192.168.10.1/31"), "interfaces[0].address:", "1..=30"),
            (lan_address("192.168.10.300/24"), "interfaces[0].address:", "not an IPv4 address"),
            (lan_address("192.168.10.1"), "interfaces[0].address:", "address/prefix-length"),
            (lan_address("192.168.10.0/24"), "interfaces[0].address:", "network address"),
            (lan_address("192.168.10.255/24"), "interfaces[0].address:", "broadcast address"),
            (lan_address("127.0.0.1/8"), "interfaces[0].address:", "loopback"),
            (lan_address("224.0.0.1/24"), "interfaces[0].address:", "multicast"),
            (lan_address("10.0.0.5/16"), "interfaces[1].address:", "overlaps interfaces[0]"),
            (lan("[interfaces.ipv6]\naddresses = [\"ff02::1/64\"]"), "interfaces[0].ipv6.addresses[0]:", "not a unicast"),
            (lan("[interfaces.ipv6]\naddresses = [\"2001:db8::1/129\"]"), "interfaces[0].ipv6.addresses[0]:", "prefix length 0..=128"),
            (route("10.1.0.1/16", "10.0.0.2"), "routes[0].destination:", "did you mean 10.1.0.0/16?"),
            (route("10.1.0.0", "10.0.0.2"), "routes[0].destination:", "address/prefix-length"),
            (route("0.0.0.0/0", "172.16.0.1"), "routes[0].via:", "not in any interface's subnet"),
            (route("0.0.0.0/0", "10.0.0.256"), "routes[0].via:", "invalid"),
            (rule("source = \"10.0.0.0/33\""), "firewall.rules[0].source:", "prefix length 0..=32"),
            (rule("destination = \"10.0.0.1/8\""), "firewall.rules[0].destination:", "did you mean 10.0.0.0/8?"),
            (with("[metrics]\nlisten = \"0.0.0.0\""), "metrics.listen:", "invalid socket address"),
            (with("[state]\ndirectory = \"var/lib/gateway\""), "state.directory:", "absolute"),
            // Zones and interfaces named.
            (lan("zone = \"local\""), "interfaces[0].zone:", "the gateway itself"),
            (with(&format!("[firewall]\npolicy = [{}]", policy("lan", "dmz", "drop"))), "firewall.policy[0].to:", "no zone named \"dmz\""),
            (with(&format!("[firewall]\npolicy = [{}, {}]", policy("lan", "wan", "accept"), policy("lan", "wan", "drop"))), "firewall.policy[1]:", "already firewall.policy[0]"),
            (rule("from = \"guest\""), "firewall.rules[0].from:", "no zone named \"guest\""),
            (with("[nat]\nmasquerade = [\"wan0\"]"), "nat.masquerade[0]:", "no interface named \"wan0\""),
            (forward("80", "").replace("interface = \"wan\"", "interface = \"uplink\""), "nat.port_forwards[0].interface:", "no interface named \"uplink\""),
            (LAB.replace("name = \"wan\"", "name = \"lan\""), "interfaces[1].name:", "used twice"),
            (LAB.replace("net_af_packet1,iface=gw-wan", "net_af_packet0,iface=gw-lan"), "interfaces[1].device:", "used twice"),
            // VLANs.
            (vlan("0"), "interfaces[2].vlan:", "1 to 4094"),
            (vlan("4095"), "interfaces[2].vlan:", "1 to 4094"),
            (vlan("70000"), "interfaces[2].vlan:", "a VLAN id is 1 to 4094"),
            (vlan("10").replace("parent = \"lan\"", "parent = \"lan0\""), "interfaces[2].parent:", "names no port or bond"),
            // A bond's MAC goes into the EAL's device string.
            (bond_mac("zz:zz"), "interfaces[0].bond.mac:", "not a MAC address"),
            (bond_mac("02:00:00:00:00:01,mode=0"), "interfaces[0].bond.mac:", "not a MAC address"),
            (bond_mac("01:00:5e:00:00:01"), "interfaces[0].bond.mac:", "multicast MAC"),
            (bond_mac("00:00:00:00:00:00"), "interfaces[0].bond.mac:", "all zero"),
            (lan("rss_key = \"xyz\""), "interfaces[0].rss_key:", "hex digits"),
        ];
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for (text, field, says) in &cases {
        assert!(field.ends_with(':'), "{field}");
        match parse(text) {
            Err(err) if err.to_string().starts_with(field) && err.to_string().contains(says) => {}
            Err(err) => wrong.push(format!("{field} {says}\n  got: {err}")),
            Ok(_) => wrong.push(format!("{field} {says}\n  loaded:\n{text}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The bases of the cases load: each file is refused for its one fault.
    parse(&bond_mac("02:00:00:00:00:0a")).unwrap();
    parse(&vlan("10")).unwrap();
    parse(&forward("\"8000-8010\"", "to_port = 9000")).unwrap();
    parse(&with("[eal]\nlog_level = \"pmd.net.*:debug\"")).unwrap();
    parse(&with(
        "[eal]\nlog_level = \"err\"\n[conntrack]\ncapacity = 268435456",
    ))
    .unwrap();
}

/// Environment overrides are text: they still become numbers and booleans, while the
/// same text written in the file is refused.
#[test]
fn environment_overrides_are_parsed_but_file_values_are_typed() {
    let environment = [
        ("GATEWAY__CONNTRACK__TCP_LOOSE", "true"),
        ("GATEWAY__CONNTRACK__CAPACITY", "4096"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect();
    let path = Path::new("/etc/gateway/gateway.toml");
    let config = GatewayConfig::from_text_and_environment(path, LAB, Some(environment)).unwrap();
    assert!(config.conntrack.tcp_loose);
    assert_eq!(config.conntrack.capacity, 4096);
    let quoted = format!("{LAB}\n[conntrack]\ncapacity = \"4096\"\n");
    let err = parse(&quoted).unwrap_err().to_string();
    assert!(err.starts_with("conntrack.capacity:"), "{err}");
    assert!(err.contains("capacity = 4096"), "{err}");
}

#[test]
fn metrics_on_every_address_are_warned_of() {
    // Both zones let out, so that the metrics' warning is the only one.
    let lab = format!(
        "{LAB}\n[firewall]\npolicy = [\n{{ from = \"lan\", to = \"wan\", action = \"accept\" }},\n\
             {{ from = \"wan\", to = \"lan\", action = \"accept\" }},\n]\n"
    );
    assert!(parse(&lab).unwrap().warnings().is_empty());
    for listen in ["0.0.0.0:9469", "[::]:9469"] {
        let open = parse(&format!("{lab}\n[metrics]\nlisten = \"{listen}\"\n")).unwrap();
        let warnings = open.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("metrics.listen:"), "{warnings:?}");
        assert!(warnings[0].contains("every address"), "{warnings:?}");
        assert!(warnings[0].contains("metrics.web_config"), "{warnings:?}");
    }
}

#[test]
fn rss_keys_are_hex() {
    assert_eq!(parse_hex("6d5a:6D5A"), Some(vec![0x6d, 0x5a, 0x6d, 0x5a]));
    assert_eq!(parse_hex("6d5"), None);
    assert_eq!(parse_hex("zz"), None);
    let bad = LAB.replace(
        "address = \"10.0.0.1/24\"",
        "address = \"10.0.0.1/24\"\nrss_key = \"xyz\"",
    );
    let err = parse(&bad).unwrap_err().to_string();
    assert!(err.starts_with("interfaces[1].rss_key:"), "{err}");
}

#[test]
fn source_validation_is_strict_loose_or_off() {
    let loose = LAB.replace(
        "address = \"192.168.10.1/24\"",
        "address = \"192.168.10.1/24\"\nsource_validation = \"loose\"",
    );
    let config = parse(&loose).unwrap();
    assert_eq!(
        config.interfaces[0].source_validation,
        Some(SourceValidationConfig::Loose)
    );
    assert_eq!(config.interfaces[1].source_validation, None);
    let bad = LAB.replace(
        "address = \"10.0.0.1/24\"",
        "address = \"10.0.0.1/24\"\nsource_validation = \"paranoid\"",
    );
    let err = parse(&bad).unwrap_err().to_string();
    assert!(err.contains("source_validation"), "{err}");
    assert!(err.contains("strict"), "the error lists the choices: {err}");
}

#[test]
fn pppoe_needs_its_table_gets_1492_and_clamps_by_default() {
    // The session supplies the default route: none in [[routes]].
    let base = LAB
            .replace(
                "        [[routes]]\n        destination = \"0.0.0.0/0\"\n        via = \"10.0.0.2\"\n",
                "",
            )
            .replace(
                "address = \"10.0.0.1/24\"",
                "address = \"10.0.0.1/24\"\n[[interfaces]]\nname = \"isp\"\nparent = \"wan\"\nvlan = 7\naddress = \"pppoe\"",
            );
    let table = "\n[interfaces.pppoe]\nusername = \"gw\"\npassword = \"pw\"\n";
    let with = |extra: &str| {
        base.replace(
            "address = \"pppoe\"",
            &format!("address = \"pppoe\"{extra}"),
        )
    };
    let config = parse(&with(table)).unwrap();
    let isp = &config.interfaces[2];
    assert!(isp.address.is_pppoe());
    assert_eq!(isp.mtu(), PPPOE_MTU);
    assert_eq!(isp.port_mtu(), 1500);
    assert_eq!(isp.tcp_mss_bytes(isp.mtu()), Some(1452));
    // A peer's smaller MRU lowers the automatic clamp.
    assert_eq!(isp.tcp_mss_bytes(1480), Some(1440));
    assert_eq!(config.interfaces[1].mtu(), 1500);
    assert_eq!(config.interfaces[1].tcp_mss_bytes(1500), None);
    let pppoe = isp.pppoe.as_ref().unwrap();
    assert_eq!(
        (pppoe.lcp_echo_interval_secs, pppoe.lcp_echo_failures),
        (10, 3)
    );
    assert!(pppoe.default_route);
    assert!(
        !format!("{pppoe:?}").contains("pw\""),
        "the password is logged"
    );
    let refused = |text: &str, field: &str| {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.starts_with(field), "{field}: {err}");
    };
    refused(&base, "interfaces[2].pppoe:");
    refused(
        &LAB.replace(
            "address = \"10.0.0.1/24\"",
            &format!("address = \"10.0.0.1/24\"{table}"),
        ),
        "interfaces[1].pppoe:",
    );
    // RFC 4638: 1500 over PPPoE where the parent carries 1508-byte payloads.
    let too_big = with(&format!("\nmtu = 1500{table}"));
    refused(&too_big, "interfaces[2].mtu:");
    let err = parse(&too_big).unwrap_err().to_string();
    assert!(
        err.contains("1508") && err.contains("raise wan's mtu"),
        "{err}"
    );
    let baby_jumbo = too_big.replace(
        "address = \"10.0.0.1/24\"",
        "address = \"10.0.0.1/24\"\nmtu = 1508",
    );
    let config = parse(&baby_jumbo).unwrap();
    let isp = &config.interfaces[2];
    assert_eq!((isp.mtu(), isp.port_mtu()), (1500, 1508));
    refused(
        &with(&format!("{table}lcp_echo_failures = 0\n")),
        "interfaces[2].pppoe.lcp_echo_failures:",
    );
    refused(
        &with(&table.replace("\"gw\"", "\"\"")),
        "interfaces[2].pppoe.username:",
    );
    refused(
        &with(&format!("{table}secret = 1\n")),
        "interfaces[2].pppoe",
    );
    // A static default route and the session's would fight.
    refused(&LAB.replace("address = \"10.0.0.1/24\"", "address = \"10.0.0.1/24\"\n[[interfaces]]\nname = \"isp\"\nparent = \"wan\"\nvlan = 7\naddress = \"pppoe\"").replace("address = \"pppoe\"", &format!("address = \"pppoe\"{table}")), "interfaces[2].pppoe.default_route:");
    let config = parse(&with(&format!("\nmtu = 1400\ntcp_mss = 1300{table}"))).unwrap();
    assert_eq!(config.interfaces[2].tcp_mss_bytes(1400), Some(1300));
    // A twin only for the IPv6 the ISP configures over the session.
    let twin = format!("\nkernel_twin = true{table}");
    refused(&with(&twin), "interfaces[2].kernel_twin:");
    let autoconfigured = format!("{twin}[interfaces.ipv6]\nautoconfigure = true\n");
    let config = parse(&with(&autoconfigured)).unwrap();
    assert_eq!(
        crate::config::twins::twin_names(&config)[2].as_deref(),
        Some("isp")
    );
    refused(
        &with(&format!(
            "{twin}[interfaces.ipv6]\ndelegated_prefix = true\n"
        )),
        "interfaces[2].ipv6.delegated_prefix:",
    );
    refused(
        &with(&format!(
            "{autoconfigured}router_advertisements = true\naddresses = [\"2001:db8:a::2/64\"]\n"
        )),
        "interfaces[2].ipv6.router_advertisements:",
    );
    // Without a twin, IPv6 on the session is the operator's to configure.
    let config = parse(&with(&format!(
        "{table}[interfaces.ipv6]\naddresses = [\"2001:db8:a::2/64\"]\n"
    )))
    .unwrap();
    assert_eq!(crate::config::twins::twin_names(&config)[2], None);
}

#[test]
fn qos_shapes_by_default_and_polices_when_told() {
    let on = format!("{LAB}\n[qos]\nenabled = true\n");
    assert_eq!(parse(&on).unwrap().qos.mode, QosModeSetting::Shaper);
    let policer = format!("{on}mode = \"policer\"\n");
    let config = parse(&policer).unwrap();
    assert_eq!(config.qos.mode, QosModeSetting::Policer);
    assert_eq!(
        crate::compile::router::qos_config(&config.qos).map(|qos| qos.mode),
        Some(pipeline::features::qos::QosMode::Policer)
    );
    let bad = format!("{on}mode = \"fq_codel\"\n");
    let err = parse(&bad).unwrap_err().to_string();
    assert!(err.contains("qos.mode"), "the error names the field: {err}");
    assert!(err.contains("shaper"), "the error lists the choices: {err}");
}

#[test]
fn tcp_mss_is_auto_or_bytes_within_the_mtu() {
    let with = |value: &str| {
        LAB.replace(
            "address = \"10.0.0.1/24\"",
            &format!("address = \"10.0.0.1/24\"\nmtu = 1492\ntcp_mss = {value}"),
        )
    };
    let config = parse(&with("\"auto\"")).unwrap();
    assert_eq!(config.interfaces[1].tcp_mss, Some(TcpMssConfig::Auto));
    assert_eq!(config.interfaces[1].tcp_mss.unwrap().bytes(1492), 1452);
    assert_eq!(config.interfaces[0].tcp_mss, None);
    let config = parse(&with("1400")).unwrap();
    assert_eq!(
        config.interfaces[1].tcp_mss,
        Some(TcpMssConfig::Bytes(1400))
    );
    for bad in ["1453", "535", "-1", "70000", "\"big\""] {
        let err = parse(&with(bad)).unwrap_err().to_string();
        assert!(err.contains("tcp_mss"), "{bad}: {err}");
    }
    let err = parse(&with("1453")).unwrap_err().to_string();
    assert!(err.starts_with("interfaces[1].tcp_mss:"), "{err}");
}

#[test]
fn pci_addresses_are_told_from_vdevs() {
    assert!(is_pci_address("0000:03:00.0"));
    assert!(is_pci_address("03:00.1"));
    assert!(!is_pci_address("net_af_packet0,iface=x"));
    assert_eq!(device_name("net_tap0,iface=t0"), "net_tap0");
}

#[test]
fn state_directory_defaults_and_must_be_an_absolute_directory() {
    let config = parse(LAB).unwrap();
    assert_eq!(config.state.directory, Path::new("/var/lib/gateway"));
    assert!(config.state.snapshot);
    let config = parse(&format!(
        "{LAB}\n[state]\ndirectory = \"/tmp/gw-state\"\nsnapshot = false\n"
    ))
    .unwrap();
    assert_eq!(config.state.directory, Path::new("/tmp/gw-state"));
    assert!(!config.state.snapshot);
    let err = parse(&format!("{LAB}\n[state]\ndirectory = \"state\"\n"))
        .unwrap_err()
        .to_string();
    assert_eq!(err, "state.directory: state is not an absolute path");
    let file = std::env::temp_dir().join(format!("gw-state-file-{}", std::process::id()));
    std::fs::write(&file, "").unwrap();
    let err = parse(&format!(
        "{LAB}\n[state]\ndirectory = \"{}\"\n",
        file.display()
    ))
    .unwrap_err()
    .to_string();
    std::fs::remove_file(&file).ok();
    assert!(err.ends_with("exists and is not a directory"), "{err}");
}

/// `[ha.sync]`: a config with one, and each mistake refused naming its field.
#[test]
fn session_sync_settings_are_checked_and_name_the_field() {
    let sync = |extra: &str| {
        format!(
            "{LAB}\n[ha.sync]\nlisten = \"192.0.2.1:7440\"\npeer = \"192.0.2.2:7440\"\nkey_file = \"/etc/gateway/ha-sync.key\"\n{extra}"
        )
    };
    let config = parse(&sync("")).unwrap();
    let settings = config.ha.sync.as_ref().unwrap();
    assert_eq!((settings.refresh_ms, settings.lease_ms()), (10_000, 30_000));
    let longer = parse(&sync("refresh_ms = 20000")).unwrap();
    assert_eq!(longer.ha.sync.unwrap().lease_ms(), 60_000);
    let cases = [
        (
            sync("").replace("192.0.2.2:7440", "192.0.2.1:7440"),
            "ha.sync.peer:",
            "own end",
        ),
        (
            sync("").replace("192.0.2.2:7440", "0.0.0.0:7440"),
            "ha.sync.peer:",
            "names no peer",
        ),
        (sync("refresh_ms = 50"), "ha.sync.refresh_ms:", "100-600000"),
        (
            sync("").replace("192.0.2.1:7440", "0.0.0.0:7440"),
            "ha.sync.listen:",
            "no address of this box's own",
        ),
        (
            sync("lease_ms = 90000000"),
            "ha.sync.lease_ms:",
            "more than a day",
        ),
        (
            sync("refresh_ms = 5000\nlease_ms = 4000"),
            "ha.sync.lease_ms:",
            "shorter than ha.sync.refresh_ms",
        ),
    ];
    for (text, field, reason) in cases {
        let err = parse(&text).unwrap_err().to_string();
        assert!(err.starts_with(field) && err.contains(reason), "{err}");
    }
}

/// The key file is read at start: a missing one, and one too short, are refused naming the
/// field; whitespace at its end is not part of the key.
#[test]
fn the_session_sync_key_file_must_hold_a_long_enough_key() {
    let dir = std::env::temp_dir().join(format!("gw-ha-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = |key_file: PathBuf| SessionSyncConfig {
        listen: "192.0.2.1:7440".parse().unwrap(),
        peer: "192.0.2.2:7440".parse().unwrap(),
        key_file,
        refresh_ms: 10_000,
        lease_ms: None,
    };
    let missing = settings(dir.join("absent.key")).read_keys().err().unwrap();
    assert!(
        missing.to_string().starts_with("ha.sync.key_file:"),
        "{missing}"
    );
    let private = |path: &Path, text: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    let short = dir.join("short.key");
    // Fifteen bytes and a newline: the newline does not count.
    private(&short, "fifteen-bytes!!\n");
    let err = settings(short).read_keys().err().unwrap().to_string();
    assert!(
        err.starts_with("ha.sync.key_file:") && err.contains("15 bytes"),
        "{err}"
    );
    let good = dir.join("good.key");
    private(&good, "sixteen-bytes!!!\n");
    assert!(settings(good.clone()).read_keys().is_ok());
    // The same key, readable by others: refused.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let err = settings(good).read_keys().err().unwrap().to_string();
    assert!(err.contains("mode 644"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The LAB with a twin on the LAN, the WAN masqueraded, and `[port_mapping]` as `table`.
fn port_mapping(table: &str) -> String {
    format!(
        "{}\n[nat]\nmasquerade = [\"wan\"]\nport_range = \"32768-65535\"\n[port_mapping]\n{table}\n",
        LAB.replace(
            "address = \"192.168.10.1/24\"",
            "address = \"192.168.10.1/24\"\nkernel_twin = true",
        )
    )
}

#[test]
fn port_mapping_is_off_by_default_and_served_only_where_it_can_be() {
    let off = parse(LAB).unwrap();
    assert!(!off.port_mapping.enabled());
    assert_eq!(off.port_mapping_external(), None);
    let on = parse(&port_mapping("zones = [\"lan\"]")).unwrap();
    assert_eq!(on.port_mapping_interfaces(), vec![0]);
    assert_eq!(on.port_mapping_external(), Some(1));
    let limits = on.port_mapping.limits();
    assert_eq!((limits.per_host, limits.total), (100, 1024));
    assert_eq!(limits.lifetime, 120..=86_400);
    assert_eq!(limits.external_ports, 1024..=32767);
    assert!(!on.port_mapping.upnp);
    assert_eq!(on.port_mapping.upnp_http_port, 5000);
    for (table, field, why) in [
        (
            "zones = [\"dmz\"]",
            "port_mapping.zones[0]",
            "no interface is in zone",
        ),
        (
            "zones = [\"wan\"]",
            "interfaces[1].kernel_twin",
            "needs a kernel twin",
        ),
        (
            "zones = [\"lan\"]\nexternal_interface = \"lan\"",
            "port_mapping.external_interface",
            "does not masquerade",
        ),
        (
            "zones = [\"lan\"]\nexternal_interface = \"isp\"",
            "port_mapping.external_interface",
            "no interface named",
        ),
        (
            "zones = [\"lan\"]\nper_host = 0",
            "port_mapping.per_host",
            "at least 1",
        ),
        (
            "zones = [\"lan\"]\nper_host = 20\ntotal = 10",
            "port_mapping.per_host",
            "at most port_mapping.total",
        ),
        (
            "zones = [\"lan\"]\ntotal = 70000",
            "port_mapping.total",
            "at most 65536",
        ),
        (
            "zones = [\"lan\"]\nmin_lifetime_s = 600\nmax_lifetime_s = 60",
            "port_mapping.min_lifetime_s",
            "at most port_mapping.max_lifetime_s",
        ),
        (
            "zones = [\"lan\"]\nmax_lifetime_s = 700000",
            "port_mapping.max_lifetime_s",
            "a week",
        ),
        (
            "zones = [\"lan\"]\nport = 5351",
            "port_mapping",
            "unknown field",
        ),
        (
            "zones = [\"lan\"]\nexternal_ports = \"30000-40000\"",
            "port_mapping.external_ports",
            "overlaps nat.port_range 32768-65535",
        ),
        (
            "zones = [\"lan\"]\nupnp = true\nupnp_http_port = 0",
            "port_mapping.upnp_http_port",
            "no port",
        ),
    ] {
        let err = format!("{:#}", parse(&port_mapping(table)).unwrap_err());
        assert!(err.contains(field) && err.contains(why), "{table}: {err}");
    }
    // The WAN in a served zone: served and mapped to at once.
    let wan_twin = port_mapping("zones = [\"lan\", \"wan\"]").replace(
        "address = \"10.0.0.1/24\"",
        "address = \"10.0.0.1/24\"\nkernel_twin = true",
    );
    let err = parse(&wan_twin).unwrap_err().to_string();
    assert!(
        err.starts_with("port_mapping.external_interface:") && err.contains("in a zone"),
        "{err}"
    );
    // Not on an HA pair's addresses: the hosts would ask the virtual one, and the other box
    // would not forward the mappings.
    let routed = port_mapping("zones = [\"lan\"]").replace(
        "address = \"10.0.0.1/24\"",
        "address = \"10.0.0.1/24\"\nnat_address = \"100.64.0.3\"",
    );
    let err = parse(&routed).unwrap_err().to_string();
    assert!(
        err.starts_with("port_mapping.external_interface:") && err.contains("not synced"),
        "{err}"
    );
    let pair = port_mapping("zones = [\"lan\"]").replace(
        "address = \"192.168.10.1/24\"",
        "address = \"192.168.10.1/24\"\nvirtual_address = \"192.168.10.254\"",
    );
    let err = parse(&pair).unwrap_err().to_string();
    assert!(
        err.starts_with("interfaces[0].virtual_address:") && err.contains("HA pair"),
        "{err}"
    );
}

/// A VLAN subinterface rides on its port's rings and adds none to what `mempool.mbufs` must
/// hold: 14 of them counted as ports would need 16,896 of the default 16,383.
#[test]
fn vlan_subinterfaces_add_no_rings_to_the_mempool_check() {
    let vlans: String = (1..=14)
        .map(|i| {
            format!(
                "[[interfaces]]\nname = \"v{i}\"\nparent = \"lan\"\nvlan = {}\n\
                 address = \"192.168.{}.1/24\"\nkernel_twin = false\n",
                100 + i,
                100 + i
            )
        })
        .collect();
    let config = parse(&format!("{LAB}\n{vlans}")).expect("14 VLANs fit the default pool");
    assert_eq!(config.mempool.mbufs, 16383, "the default pool");
}

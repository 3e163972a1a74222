use super::*;
use crate::compile::twins::{kernel_route_allow, punt_config};
use crate::config::twins::route_allow_warning;

fn config(extra_lan: &str, section: &str) -> Result<GatewayConfig, String> {
    let text = format!(
        r#"
[[interfaces]]
name = "lan"
device = "net_null0"
address = "192.168.10.1/24"
{extra_lan}
[[interfaces]]
name = "wan"
device = "net_null1"
address = "10.0.0.1/24"
[nat]
masquerade = ["wan"]
{section}
"#
    );
    let dir = std::env::temp_dir().join(format!("gw-twins-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{:x}.toml", text.len() * 31 + section.len()));
    std::fs::write(&path, text).unwrap();
    let loaded = GatewayConfig::load(&path).map_err(|err| err.to_string());
    let _ = std::fs::remove_file(&path);
    loaded
}

#[test]
fn twins_are_off_unless_asked_and_inside_by_default_gives_the_lan_one() {
    let plain = config("", "").unwrap();
    assert_eq!(twin_names(&plain), vec![None, None]);
    assert_eq!(punt_config(&plain).twins, vec![false, false]);
    let inside = config("", "[kernel_twins]\ninside_by_default = true").unwrap();
    assert_eq!(twin_names(&inside), vec![Some("lan".to_string()), None]);
    let off = config(
        "kernel_twin = false",
        "[kernel_twins]\ninside_by_default = true",
    )
    .unwrap();
    assert_eq!(twin_names(&off), vec![None, None]);
    let named = config("kernel_twin = true\nkernel_twin_name = \"gw-lan\"", "").unwrap();
    assert_eq!(twin_names(&named), vec![Some("gw-lan".to_string()), None]);
    assert_eq!(punt_config(&named).twins, vec![true, false]);
}

#[test]
fn bad_twin_settings_name_their_field() {
    let err = config("kernel_twin_name = \"x\"", "").unwrap_err();
    assert!(err.starts_with("interfaces[0].kernel_twin_name:"), "{err}");
    let err = config(
        "kernel_twin = true\nkernel_twin_name = \"a-name-far-too-long\"",
        "",
    )
    .unwrap_err();
    assert!(err.starts_with("interfaces[0].kernel_twin_name:"), "{err}");
    let err = config("kernel_twin = true\nkernel_twin_name = \"a,b\"", "").unwrap_err();
    assert!(err.starts_with("interfaces[0].kernel_twin_name:"), "{err}");
    let err = config("", "[kernel_twins]\nnetns = \"../x\"").unwrap_err();
    assert!(err.starts_with("kernel_twins.netns:"), "{err}");
    let err = config("", "[kernel_twins]\npunt_burst = 0").unwrap_err();
    assert!(err.starts_with("kernel_twins.punt_burst:"), "{err}");
}

#[test]
fn the_route_allow_list_takes_both_families_and_names_a_bad_prefix_by_place() {
    let omitted = kernel_route_allow(&config("", "").unwrap());
    assert_eq!((omitted.v4, omitted.v6), (None, None));
    let listed = config(
        "",
        "[kernel_twins]\nroute_allow = [\"0.0.0.0/0\", \"198.51.100.0/24\", \"2001:db8::/32\"]",
    )
    .unwrap();
    let allow = kernel_route_allow(&listed);
    assert_eq!(
        allow.v4,
        Some(vec![
            (std::net::Ipv4Addr::UNSPECIFIED, 0),
            (std::net::Ipv4Addr::new(198, 51, 100, 0), 24)
        ])
    );
    assert_eq!(allow.v6, Some(vec![("2001:db8::".parse().unwrap(), 32)]));
    // An IPv4-only list allows IPv6 nothing: said, not guessed, and warned of where the
    // kernel configures an interface's IPv6.
    let v4_only = config("", "[kernel_twins]\nroute_allow = [\"0.0.0.0/0\"]").unwrap();
    assert_eq!(kernel_route_allow(&v4_only).v6, Some(Vec::new()));
    assert_eq!(route_allow_warning(&v4_only), None);
    let autoconfigured = config(
        "kernel_twin = true\n[interfaces.ipv6]\nautoconfigure = true",
        "[kernel_twins]\nroute_allow = [\"0.0.0.0/0\"]",
    )
    .unwrap();
    let warning = route_allow_warning(&autoconfigured).unwrap();
    assert!(
        warning.starts_with("kernel_twins.route_allow:"),
        "{warning}"
    );
    assert!(autoconfigured.warnings().contains(&warning));
    assert_eq!(route_allow_warning(&listed), None);
    for (list, field, reason) in [
        (
            "[\"0.0.0.0/0\", \"198.51.100.1/24\"]",
            "[1]",
            "did you mean 198.51.100.0/24",
        ),
        (
            "[\"::/0\", \"2001:db8::1/32\"]",
            "[1]",
            "did you mean 2001:db8::/32",
        ),
        ("[\"198.51.100.0\"]", "[0]", "address/prefix-length"),
        ("[\"10.0.0.0/33\"]", "[0]", "prefix length"),
        ("\"0.0.0.0/0\"", "", ""),
    ] {
        let err = config("", &format!("[kernel_twins]\nroute_allow = {list}")).unwrap_err();
        assert!(
            err.starts_with(&format!("kernel_twins.route_allow{field}")),
            "{list}: {err}"
        );
        assert!(err.contains(reason), "{list}: {err}");
    }
}

#[test]
fn ipv6_from_the_kernel_needs_a_twin_and_says_so_in_its_field() {
    for (flag, adverts) in [("autoconfigure", false), ("delegated_prefix", true)] {
        let ipv6 = format!("[interfaces.ipv6]\n{flag} = true\nrouter_advertisements = {adverts}");
        let err = config(&ipv6, "").unwrap_err();
        assert!(
            err.starts_with(&format!("interfaces[0].ipv6.{flag}:")),
            "{err}"
        );
        assert!(err.contains("kernel twin"), "{err}");
        // With a twin, the prefix to announce may come later, from the kernel.
        let loaded = config(&format!("kernel_twin = true\n{ipv6}"), "").unwrap();
        assert!(loaded.interfaces[0].ipv6.as_ref().unwrap().follows_kernel());
    }
    // The ISP's link is not ours to advertise on; nor is one interface both.
    let both = "kernel_twin = true\n[interfaces.ipv6]\nautoconfigure = true\n";
    let err = config(&format!("{both}router_advertisements = true"), "").unwrap_err();
    assert!(
        err.starts_with("interfaces[0].ipv6.router_advertisements:"),
        "{err}"
    );
    let err = config(&format!("{both}delegated_prefix = true"), "").unwrap_err();
    assert!(
        err.starts_with("interfaces[0].ipv6.delegated_prefix:"),
        "{err}"
    );
    // Without either, advertisements still need an address to announce.
    let err = config(
        "kernel_twin = true\n[interfaces.ipv6]\nrouter_advertisements = true",
        "",
    )
    .unwrap_err();
    assert!(
        err.starts_with("interfaces[0].ipv6.router_advertisements:"),
        "{err}"
    );
}

#[test]
fn dhcp_needs_a_twin_and_says_so_in_the_address_field() {
    let dhcp = |extra: &str| config(&format!("{extra}\n"), "").map(|c| c.interfaces[0].address);
    let text = |extra: &str| {
        format!(
            r#"
[[interfaces]]
name = "wan"
device = "net_null0"
address = "dhcp"
{extra}
"#
        )
    };
    let load = |extra: &str| {
        let dir = std::env::temp_dir().join(format!("gw-twins-dhcp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.toml", extra.len()));
        std::fs::write(&path, text(extra)).unwrap();
        let loaded = GatewayConfig::load(&path).map_err(|err| err.to_string());
        let _ = std::fs::remove_file(&path);
        loaded
    };
    let err = load("").unwrap_err();
    assert!(err.starts_with("interfaces[0].address:"), "{err}");
    assert!(err.contains("kernel twin"), "{err}");
    let loaded = load("kernel_twin = true").unwrap();
    assert!(loaded.interfaces[0].address.is_dhcp());
    assert_eq!(punt_config(&loaded).dhcp_clients, vec![true]);
    // A static address is no DHCP client.
    assert_eq!(dhcp("").unwrap().cidr().map(|c| c.len), Some(24));
    let err = load("kernel_twin = true\naddress2 = 1").unwrap_err();
    assert!(err.contains("address2"), "{err}");
}

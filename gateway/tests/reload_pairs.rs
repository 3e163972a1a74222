//! A reload applies exactly what the file says, or nothing (issue 43): pairs of configs,
//! the running one and the file reloaded over it, with interfaces added, removed, renamed and
//! reordered (a VLAN among them), zones, policies, rules and port forwards, each pair loaded
//! as the `config-load` thread loads it (`reload::load_for_reload`). What it publishes is
//! either refused, with the running config left as it was (the loader keeps it), or decides
//! as the new file's own compiled config does, compared by name:
//! - every port forward lands on the interface the file names;
//! - every firewall decision between two zones the file knows (policies and rules together,
//!   probed with TCP to several ports and ping) is the file's own;
//! - between zones only the running interfaces still have (their removal waits for a
//!   restart) nothing is open that a rule of the file does not open: the closed default.
//!
//! And a file that needs no restart and compiles alone is never refused.

use std::net::Ipv4Addr;
use std::path::Path;

use gateway::compile::router::router_config;
use gateway::config::history::FileText;
use gateway::config::GatewayConfig;
use gateway::control::netlink::KernelView;
use gateway::reload::{load_for_reload, restart_required, Loaded};
use pipeline::flow::FlowKey;
use pipeline::state::firewall::{Action, ZoneId};
use pipeline::RouterConfig;
use proptest::prelude::*;

/// The interfaces a config may have; `wan` is always there (and masqueraded).
const OPTIONAL: [&str; 3] = ["lan", "dmz", "guest"];
/// Zone names an interface may be put in, besides its own name.
const ZONES: [&str; 3] = ["inside", "dmz", "lan"];
/// Zone names policies and rules may name: every zone any config may have, and the gateway.
const NAMED: [&str; 7] = ["lan", "wan", "dmz", "guest", "inside", "local", "nowhere"];
const ACTIONS: [&str; 3] = ["accept", "drop", "reject"];
const PROBE_PORTS: [u16; 4] = [22, 80, 443, 9999];

#[derive(Clone, Debug)]
struct Model {
    /// In file order: name and zone (`None`: its own name).
    interfaces: Vec<(&'static str, Option<&'static str>)>,
    policies: Vec<(&'static str, &'static str, &'static str)>,
    rules: Vec<(
        Option<&'static str>,
        Option<&'static str>,
        u16,
        &'static str,
    )>,
    forwards: Vec<(&'static str, u16)>,
}

fn model() -> impl Strategy<Value = Model> {
    let interfaces = prop::sample::subsequence(OPTIONAL.to_vec(), 0..=OPTIONAL.len())
        .prop_flat_map(|mut names| {
            names.push("wan");
            let count = names.len();
            (
                Just(names).prop_shuffle(),
                prop::collection::vec(
                    prop::option::of(prop::sample::select(ZONES.to_vec())),
                    count,
                ),
            )
        })
        .prop_map(|(names, zones)| {
            names
                .into_iter()
                .zip(zones)
                // The WAN stays its own zone: masquerade makes it the outside one.
                .map(|(name, zone)| (name, if name == "wan" { None } else { zone }))
                .collect::<Vec<_>>()
        });
    let named = || prop::sample::select(NAMED.to_vec());
    (
        interfaces,
        prop::collection::vec(
            (named(), named(), prop::sample::select(ACTIONS.to_vec())),
            0..6,
        ),
        prop::collection::vec(
            (
                prop::option::of(named()),
                prop::option::of(named()),
                prop::sample::select(PROBE_PORTS.to_vec()),
                prop::sample::select(ACTIONS.to_vec()),
            ),
            0..4,
        ),
        prop::collection::vec(
            (
                prop::sample::select(vec!["lan", "wan", "dmz", "guest"]),
                8000u16..8003,
            ),
            0..3,
        ),
    )
        .prop_map(|(interfaces, policies, rules, forwards)| Model {
            interfaces,
            policies,
            rules,
            forwards,
        })
}

/// Each interface keeps its device and address whatever its place: moving one is a rename
/// of that place. `guest` is VLAN 20 of `lan` where there is a `lan`.
fn interface_text(name: &str, zone: Option<&str>, has_lan: bool) -> String {
    let (device, address) = match name {
        "lan" => ("net_null0", "192.168.10.1/24"),
        "wan" => ("net_null1", "10.0.0.1/24"),
        "dmz" => ("net_null2", "172.16.30.1/24"),
        _ => ("net_null3", "192.168.20.1/24"),
    };
    let attachment = if name == "guest" && has_lan {
        "parent = \"lan\"\nvlan = 20\n".to_string()
    } else {
        format!("device = \"{device}\"\n")
    };
    let zone = zone.map_or(String::new(), |zone| format!("zone = \"{zone}\"\n"));
    format!("[[interfaces]]\nname = \"{name}\"\n{attachment}address = \"{address}\"\n{zone}")
}

/// The model as a file. Policies and rules that name a zone the model lacks are left out
/// (and a pair's second policy), as are forwards on interfaces it lacks (all forwards without
/// a LAN to reach), so that most files
/// are valid alone and the interesting refusals are the reload's own.
fn text(model: &Model) -> String {
    let names: Vec<&str> = model.interfaces.iter().map(|(name, _)| *name).collect();
    let zones: Vec<&str> = model
        .interfaces
        .iter()
        .map(|(name, zone)| zone.unwrap_or(name))
        .collect();
    let known = |zone: &str| zone == "local" || zones.contains(&zone);
    let mut out = String::from("[workers]\nlcores = [1]\n");
    for (name, zone) in &model.interfaces {
        out += &interface_text(name, *zone, names.contains(&"lan"));
    }
    out += "[nat]\nmasquerade = [\"wan\"]\n";
    let mut forwarded = Vec::new();
    for &(interface, port) in &model.forwards {
        // The forwards' host is on the LAN: none without one.
        if names.contains(&"lan")
            && names.contains(&interface)
            && !forwarded.contains(&(interface, port))
        {
            forwarded.push((interface, port));
            out += &format!(
                "[[nat.port_forwards]]\ninterface = \"{interface}\"\nprotocol = \"tcp\"\n\
                 port = {port}\nto = \"192.168.10.2\"\n"
            );
        }
    }
    let mut pairs = Vec::new();
    out += "[firewall]\npolicy = [\n";
    for &(from, to, action) in &model.policies {
        if from != "local" && known(from) && known(to) && !pairs.contains(&(from, to)) {
            pairs.push((from, to));
            out += &format!("{{ from = \"{from}\", to = \"{to}\", action = \"{action}\" }},\n");
        }
    }
    out += "]\n";
    for (i, &(from, to, port, action)) in model.rules.iter().enumerate() {
        if from.is_some_and(|from| from == "local" || !known(from))
            || to.is_some_and(|to| !known(to))
        {
            continue;
        }
        out += &format!("[[firewall.rules]]\nname = \"r{i}\"\nprotocol = \"tcp\"\n");
        out += &format!("destination_ports = \"{port}\"\naction = \"{action}\"\n");
        if let Some(from) = from {
            out += &format!("from = \"{from}\"\n");
        }
        if let Some(to) = to {
            out += &format!("to = \"{to}\"\n");
        }
    }
    out
}

fn zone_id(config: &GatewayConfig, name: &str) -> Option<ZoneId> {
    if name == "local" {
        return Some(ZoneId::LOCAL);
    }
    let index = config.zone_names().iter().position(|zone| zone == name)?;
    Some(ZoneId(u8::try_from(index).unwrap()))
}

/// TCP to each probe port, and a ping: (key, ICMP type).
fn probes() -> Vec<(FlowKey, Option<u8>)> {
    let key = |protocol, dst_port| FlowKey {
        src: Ipv4Addr::new(192, 168, 10, 2),
        dst: Ipv4Addr::new(10, 0, 0, 2),
        src_port: 40000,
        dst_port,
        protocol,
    };
    let mut probes: Vec<_> = PROBE_PORTS
        .iter()
        .map(|&port| (key(6, port), None))
        .collect();
    probes.push((key(1, 0), Some(8)));
    probes
}

/// Whether the zone holds no masqueraded interface: an inside zone may reach itself and the
/// gateway without a policy.
fn inside(config: &GatewayConfig, zone: &str) -> bool {
    !config.interfaces.iter().any(|iface| {
        iface.zone.as_deref().unwrap_or(&iface.name) == zone
            && config.nat.masquerade.contains(&iface.name)
    })
}

fn check_published(
    merged: &GatewayConfig,
    router: &RouterConfig,
    new: &GatewayConfig,
    own: &RouterConfig,
) -> Result<(), TestCaseError> {
    let forwards = &router.stateful.port_forwards;
    prop_assert_eq!(forwards.len(), new.nat.port_forwards.len());
    for (compiled, written) in forwards.iter().zip(&new.nat.port_forwards) {
        let landed = &merged.interfaces[usize::from(compiled.interface)].name;
        prop_assert_eq!(
            landed,
            &written.interface,
            "a forward landed on another interface"
        );
        prop_assert_eq!(
            compiled.ports.clone(),
            written.port.first..=written.port.last
        );
    }
    let mut targets = merged.zone_names();
    targets.push("local".into());
    for from in merged.zone_names() {
        for to in &targets {
            for (key, icmp_type) in probes() {
                let (action, rule) = router.stateful.firewall.evaluate(
                    zone_id(merged, &from).unwrap(),
                    zone_id(merged, to).unwrap(),
                    &key,
                    icmp_type,
                );
                match (zone_id(new, &from), zone_id(new, to)) {
                    (Some(own_from), Some(own_to)) => {
                        let (own_action, _) = own
                            .stateful
                            .firewall
                            .evaluate(own_from, own_to, &key, icmp_type);
                        prop_assert_eq!(
                            action,
                            own_action,
                            "{} -> {} ({:?}): not what the file's own config decides",
                            from,
                            to,
                            key
                        );
                    }
                    _ if rule.is_none() => {
                        let open = inside(merged, &from) && (from == *to || to == "local");
                        let expected = if open { Action::Accept } else { Action::Drop };
                        prop_assert_eq!(
                            action,
                            expected,
                            "{} -> {} (a zone the file lacks) is not closed by default",
                            from,
                            to
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_reload_publishes_what_the_file_says_or_nothing(running in model(), next in model()) {
        let path = Path::new("pair.toml");
        let (running_text, next_text) = (text(&running), text(&next));
        let running = GatewayConfig::from_text(path, &running_text);
        prop_assume!(running.is_ok());
        let running = running.unwrap();
        let macs = vec![[2, 0, 0, 0, 0, 1]; 4];
        let alone = GatewayConfig::from_text(path, &next_text)
            .ok()
            .and_then(|new| router_config(&new, &macs).ok().map(|own| (new, own)));
        let loaded = load_for_reload(
            path,
            &next_text,
            &running,
            &FileText::new(&running_text),
            &macs,
            &KernelView::default(),
        );
        match loaded {
            Loaded::Refused(reason) => {
                if let Some((new, _)) = &alone {
                    let restart = restart_required(&running, new);
                    prop_assert!(
                        !restart.is_empty(),
                        "a file that needs no restart and compiles was refused: {}",
                        reason
                    );
                }
            }
            Loaded::Ready { config: merged, router, restart, .. } => {
                let Some((new, own)) = alone else {
                    return Err(TestCaseError::fail("a file that does not compile alone was applied"));
                };
                prop_assert_eq!(&restart, &restart_required(&running, &new));
                if restart.is_empty() {
                    prop_assert_eq!(&*merged, &new, "nothing waits for a restart, yet it is not the file");
                }
                check_published(&merged, &router, &new, &own)?;
            }
        }
    }
}

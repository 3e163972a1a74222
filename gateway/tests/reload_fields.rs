//! Every field of the config schema is either applied by a reload or reported as needing a
//! restart (issue 15, item 2). The fields are not listed by hand: a tracing deserializer
//! walks `GatewayConfig`'s own `Deserialize` and records every leaf, inside options, arrays
//! and maps too, so a field added to the schema shows up here and fails the test until it is
//! classified below. Each classification is then proved on a fully populated config:
//! - `Restart`: changing the field makes `reload::restart_required` report it (by a name that
//!   covers it) and `merge_for_reload` keeps the running value;
//! - `Applied`: nothing is reported, the merged config carries the change, and what a reload
//!   publishes (the compiled router config, the meter export) differs;
//! - `Label`: a name for people and logs only: reported as nothing, carried, and it changes
//!   nothing compiled.
//!
//! docs/operations.md's list of restart-only settings (Reload) is checked against the same classification.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use gateway::compile::router::{check_startable, router_config};
use gateway::config::GatewayConfig;
use gateway::reload::{merge_for_reload, restart_required};
use gateway::telemetry::metrics::MeterExport;
use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, Visitor};
use serde::Deserialize;

// --- the tracer ----------------------------------------------------------------------------

#[derive(Debug)]
struct TraceError(String);

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TraceError {}

impl de::Error for TraceError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TraceError(msg.to_string())
    }
}

/// Strings the schema's string-typed leaves accept, tried in turn: any text, an address with
/// a prefix, an address, a socket address, a source-validation mode.
const STRING_CANDIDATES: &[&str] = &[
    "10.0.0.1/24",
    "10.0.0.1",
    "127.0.0.1:9100",
    "strict",
    "shaper",
    "2001:db8:1::1/64",
    "2001:db8:1::53",
    "::/0",
    "fe80::1",
    "wan",
    "icmp",
];

/// What one walk shares: the leaves seen with the kind of value each reads, the string
/// candidate chosen per path, and the last string leaf handed out (the one at fault when a
/// parse fails: each parse follows its read).
#[derive(Default)]
struct Trace {
    leaves: RefCell<BTreeMap<String, &'static str>>,
    choice: RefCell<BTreeMap<String, usize>>,
    last_string: RefCell<Option<String>>,
}

#[derive(Clone, Copy)]
struct Tracer<'t> {
    trace: &'t Trace,
}

struct At<'t> {
    tracer: Tracer<'t>,
    path: String,
}

impl At<'_> {
    fn leaf(&self, kind: &'static str) {
        self.tracer
            .trace
            .leaves
            .borrow_mut()
            .insert(self.path.clone(), kind);
    }

    fn child(&self, path: String) -> Self {
        At {
            tracer: self.tracer,
            path,
        }
    }

    fn string(&self) -> &'static str {
        let choice = *self
            .tracer
            .trace
            .choice
            .borrow()
            .get(&self.path)
            .unwrap_or(&0);
        *self.tracer.trace.last_string.borrow_mut() = Some(self.path.clone());
        STRING_CANDIDATES[choice]
    }
}

macro_rules! number {
    ($($method:ident => $visit:ident($value:expr) as $kind:literal),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
            self.leaf($kind);
            visitor.$visit($value)
        })*
    };
}

impl<'de> Deserializer<'de> for At<'_> {
    type Error = TraceError;

    number! {
        deserialize_bool => visit_bool(false) as "bool",
        deserialize_i8 => visit_i8(1) as "integer",
        deserialize_i16 => visit_i16(1) as "integer",
        deserialize_i32 => visit_i32(1) as "integer",
        deserialize_i64 => visit_i64(1) as "integer",
        deserialize_u8 => visit_u8(1) as "integer",
        deserialize_u16 => visit_u16(1) as "integer",
        deserialize_u32 => visit_u32(1) as "integer",
        deserialize_u64 => visit_u64(1) as "integer",
        deserialize_f32 => visit_f32(1.0) as "float",
        deserialize_f64 => visit_f64(1.0) as "float",
        deserialize_char => visit_char('a') as "string",
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.leaf("unit");
        visitor.visit_unit()
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        visitor.visit_unit()
    }

    /// Self-describing input is asked for by untagged enums (a port "80" or "80-90"): a number.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.leaf("integer or string");
        visitor.visit_u64(80)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.leaf("string");
        visitor.visit_str(self.string())
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.leaf("string");
        visitor.visit_bytes(b"a")
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        self.deserialize_bytes(visitor)
    }

    /// Options are explored: what is inside them is part of the schema.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        visitor.visit_some(self)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        visitor.visit_newtype_struct(self)
    }

    /// One element, at `path[]`.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        let element = self.child(format!("{}[]", self.path));
        visitor.visit_seq(Elements(Some(element)))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.deserialize_seq(visitor)
    }

    /// One entry, its value at `path{}`.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TraceError> {
        let value = self.child(format!("{}{{}}", self.path));
        visitor.visit_map(Fields {
            names: MAP_KEY.iter().copied(),
            value_at: Box::new(move |_| value.child(value.path.clone())),
            pending: None,
        })
    }

    /// Every field the type declares, each at `path.field`.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        let parent = self;
        visitor.visit_map(Fields {
            names: fields.iter().copied(),
            value_at: Box::new(move |name| {
                let path = if parent.path.is_empty() {
                    name.to_string()
                } else {
                    format!("{}.{name}", parent.path)
                };
                parent.child(path)
            }),
            pending: None,
        })
    }

    /// The first variant, as a unit variant (every enum of the schema is one).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TraceError> {
        self.leaf("string");
        visitor.visit_enum(variants[0].into_deserializer())
    }
}

struct Elements<'t>(Option<At<'t>>);

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = TraceError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, TraceError> {
        self.0.take().map(|at| seed.deserialize(at)).transpose()
    }
}

/// The one key of a traced map.
const MAP_KEY: &[&str] = &["key"];

type ValueAt<'t> = Box<dyn Fn(&'static str) -> At<'t> + 't>;

struct Fields<'t> {
    names: std::iter::Copied<std::slice::Iter<'static, &'static str>>,
    value_at: ValueAt<'t>,
    pending: Option<&'static str>,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = TraceError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, TraceError> {
        let Some(name) = self.names.next() else {
            return Ok(None);
        };
        self.pending = Some(name);
        seed.deserialize(name.into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, TraceError> {
        let name = self.pending.take().expect("a key before its value");
        seed.deserialize((self.value_at)(name))
    }
}

/// Every leaf field of `GatewayConfig`: "eal.memory_mb", "interfaces[].bond.members",
/// "parental_control.categories" (a list or map of plain values is one leaf).
fn schema_leaves() -> BTreeSet<String> {
    schema_kinds().into_keys().collect()
}

/// Every leaf field with the kind of value it takes, as the reference writes it: "integer",
/// "array of strings" (`ports[]`), "table of strings" (`categories{}`).
fn schema_kinds() -> BTreeMap<String, String> {
    let trace = Trace::default();
    for _attempt in 0..1000 {
        trace.leaves.borrow_mut().clear();
        *trace.last_string.borrow_mut() = None;
        let root = At {
            tracer: Tracer { trace: &trace },
            path: String::new(),
        };
        match GatewayConfig::deserialize(root) {
            Ok(_) => {
                return trace
                    .leaves
                    .borrow()
                    .iter()
                    .map(|(leaf, kind)| {
                        if let Some(array) = leaf.strip_suffix("[]") {
                            (array.to_string(), format!("array of {kind}s"))
                        } else if let Some(map) = leaf.strip_suffix("{}") {
                            (map.to_string(), format!("table of {kind}s"))
                        } else {
                            (leaf.clone(), kind.to_string())
                        }
                    })
                    .collect();
            }
            Err(err) => {
                // The last string handed out did not parse as its type: try the next candidate.
                let path = trace.last_string.borrow().clone().unwrap_or_else(|| {
                    panic!("the schema could not be walked: {err} (not at a string leaf)")
                });
                let mut choice = trace.choice.borrow_mut();
                let next = choice.entry(path.clone()).or_insert(0);
                *next += 1;
                assert!(
                    *next < STRING_CANDIDATES.len(),
                    "config field {path}: no sample string parses ({err}); add one to \
                     STRING_CANDIDATES in {}",
                    file!()
                );
            }
        }
    }
    panic!("the schema walk did not settle");
}

// --- the classification --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    /// Kept as it runs and reported by `restart_required`.
    Restart,
    /// Published by a reload.
    Applied,
    /// A name only: carried by a reload, changes nothing that runs.
    Label,
    /// A PPPoE session's setting: carried by a reload and compiled into nothing; the control
    /// thread's client ends its session and reconnects with it (`PppoeLinks::reconfigure`,
    /// proved end to end by tests/e2e/test_pppoe.sh).
    Reconnect,
}
use Class::{Applied, Label, Reconnect, Restart};

/// Every leaf field, how a reload treats it, and a change that proves it: a TOML value put at
/// the field's path in `FULL` (`[]` becomes `[0]`), or at the path given instead.
const FIELDS: &[(&str, Class, &str, Option<&str>)] = &[
    ("eal.main_lcore", Restart, "2", None),
    ("eal.hugepages", Restart, "\"auto\"", None),
    ("eal.memory_mb", Restart, "1024", None),
    ("eal.socket_memory_mb", Restart, "[512]", None),
    ("eal.file_prefix", Restart, "\"other\"", None),
    ("eal.log_level", Restart, "\"debug\"", None),
    ("eal.cpus", Restart, "[0, 1]", None),
    ("eal.extra_args", Restart, "[\"--no-telemetry\"]", None),
    ("eal.pdump", Restart, "true", None),
    ("mempool.mbufs", Restart, "32767", None),
    ("mempool.cache", Restart, "128", None),
    ("mempool.data_room", Restart, "4096", None),
    ("workers.lcores", Restart, "[2]", None),
    ("interfaces[].name", Restart, "\"lan2\"", None),
    ("interfaces[].device", Restart, "\"net_bonding9\"", None),
    (
        "interfaces[].bond.members",
        Restart,
        "[\"net_ring4\"]",
        None,
    ),
    ("interfaces[].bond.xmit_policy", Restart, "\"l2\"", None),
    ("interfaces[].bond.lacp_rate", Restart, "\"slow\"", None),
    (
        "interfaces[].bond.mac",
        Restart,
        "\"02:00:00:00:00:99\"",
        None,
    ),
    (
        "interfaces[].address",
        Restart,
        "\"192.168.10.254/24\"",
        None,
    ),
    ("interfaces[].zone", Applied, "\"wan\"", None),
    ("interfaces[].mtu", Restart, "1400", None),
    ("interfaces[].rx_descriptors", Restart, "512", None),
    ("interfaces[].tx_descriptors", Restart, "512", None),
    ("interfaces[].rss_key", Restart, "\"6d5a6d5a\"", None),
    ("interfaces[].promiscuous", Restart, "true", None),
    ("interfaces[].kernel_twin", Restart, "false", None),
    (
        "interfaces[].kernel_twin_name",
        Restart,
        "\"lan-twin\"",
        None,
    ),
    (
        "interfaces[].virtual_address",
        Restart,
        "\"10.1.0.253\"",
        Some("interfaces[4].virtual_address"),
    ),
    (
        "interfaces[].nat_address",
        Restart,
        "\"198.51.100.7\"",
        Some("interfaces[5].nat_address"),
    ),
    ("kernel_twins.inside_by_default", Restart, "true", None),
    ("kernel_twins.netns", Restart, "\"gateway\"", None),
    ("kernel_twins.punt_per_sec", Applied, "5", None),
    ("kernel_twins.punt_burst", Applied, "5", None),
    (
        "kernel_twins.route_allow",
        Applied,
        "[\"198.51.100.0/24\"]",
        None,
    ),
    ("state.directory", Restart, "\"/tmp/other\"", None),
    ("state.snapshot", Restart, "false", None),
    ("ha.sync.listen", Restart, "\"127.0.0.1:7442\"", None),
    ("ha.sync.peer", Restart, "\"127.0.0.1:7443\"", None),
    (
        "ha.sync.key_file",
        Restart,
        "\"/etc/gateway/other.key\"",
        None,
    ),
    ("ha.sync.refresh_ms", Restart, "5000", None),
    // Off in FULL: switched on whole (the LAN's zone, ports below the NAT range's), the
    // other fields each alone.
    (
        "port_mapping.zones",
        Restart,
        "{ zones = [\"inside\"], external_ports = \"1-1023\" }",
        Some("port_mapping"),
    ),
    ("port_mapping.external_interface", Restart, "\"wan\"", None),
    ("port_mapping.per_host", Restart, "10", None),
    ("port_mapping.total", Restart, "100", None),
    ("port_mapping.min_lifetime_s", Restart, "60", None),
    ("port_mapping.max_lifetime_s", Restart, "3600", None),
    (
        "port_mapping.external_ports",
        Restart,
        "\"2000-3000\"",
        None,
    ),
    ("port_mapping.upnp", Restart, "true", None),
    ("port_mapping.upnp_http_port", Restart, "5001", None),
    ("ha.sync.lease_ms", Restart, "60000", None),
    ("interfaces[].source_validation", Applied, "\"off\"", None),
    ("interfaces[].tcp_mss", Applied, "1400", None),
    (
        "interfaces[].parent",
        Restart,
        "\"lan\"",
        Some("interfaces[2].parent"),
    ),
    (
        "interfaces[].vlan",
        Restart,
        "30",
        Some("interfaces[2].vlan"),
    ),
    ("interfaces[].vlan_offload", Restart, "false", None),
    (
        "interfaces[].ipv6.addresses",
        Applied,
        "[\"2001:db8:3::1/64\"]",
        Some("interfaces[1].ipv6.addresses"),
    ),
    (
        "interfaces[].ipv6.router_advertisements",
        Applied,
        "false",
        Some("interfaces[1].ipv6.router_advertisements"),
    ),
    (
        "interfaces[].ipv6.dns_servers",
        Applied,
        "[\"2001:db8:1::54\"]",
        Some("interfaces[1].ipv6.dns_servers"),
    ),
    (
        "interfaces[].ipv6.ra_interval_secs",
        Applied,
        "200",
        Some("interfaces[1].ipv6.ra_interval_secs"),
    ),
    (
        "interfaces[].ipv6.autoconfigure",
        Restart,
        "true",
        Some("interfaces[0].ipv6.autoconfigure"),
    ),
    (
        "interfaces[].ipv6.delegated_prefix",
        Restart,
        "true",
        Some("interfaces[0].ipv6.delegated_prefix"),
    ),
    (
        "interfaces[].pppoe.username",
        Reconnect,
        "\"other\"",
        Some("interfaces[3].pppoe.username"),
    ),
    (
        "interfaces[].pppoe.password",
        Reconnect,
        "\"other\"",
        Some("interfaces[3].pppoe.password"),
    ),
    (
        "interfaces[].pppoe.service_name",
        Reconnect,
        "\"other\"",
        Some("interfaces[3].pppoe.service_name"),
    ),
    (
        "interfaces[].pppoe.ac_name",
        Reconnect,
        "\"other\"",
        Some("interfaces[3].pppoe.ac_name"),
    ),
    (
        "interfaces[].pppoe.lcp_echo_interval_secs",
        Reconnect,
        "30",
        Some("interfaces[3].pppoe.lcp_echo_interval_secs"),
    ),
    (
        "interfaces[].pppoe.lcp_echo_failures",
        Reconnect,
        "5",
        Some("interfaces[3].pppoe.lcp_echo_failures"),
    ),
    (
        "interfaces[].pppoe.default_route",
        Reconnect,
        "false",
        Some("interfaces[3].pppoe.default_route"),
    ),
    ("routes[].destination", Applied, "\"172.16.0.0/12\"", None),
    ("routes[].via", Applied, "\"10.0.0.3\"", None),
    (
        "ipv6_routes[].destination",
        Applied,
        "\"2001:db8:88::/48\"",
        None,
    ),
    ("ipv6_routes[].via", Applied, "\"fe80::2\"", None),
    ("ipv6_routes[].interface", Applied, "\"lan\"", None),
    ("icmp.errors_per_sec", Applied, "5", None),
    ("icmp.burst", Applied, "5", None),
    ("icmp.echo_per_sec", Applied, "5", None),
    ("icmp.echo_burst", Applied, "5", None),
    ("neighbors.capacity", Restart, "100", None),
    ("neighbors.pending_per_neighbor", Restart, "8", None),
    ("neighbors.reachable_secs", Restart, "60", None),
    ("neighbors.pending_total", Restart, "100", None),
    ("neighbors.locktime_ms", Restart, "500", None),
    ("conntrack.capacity", Restart, "2000", None),
    ("conntrack.tcp_established_secs", Restart, "8000", None),
    ("conntrack.tcp_transitory_secs", Restart, "300", None),
    ("conntrack.tcp_time_wait_secs", Restart, "60", None),
    ("conntrack.tcp_close_secs", Restart, "5", None),
    ("conntrack.udp_secs", Restart, "200", None),
    ("conntrack.icmp_secs", Restart, "30", None),
    ("conntrack.other_secs", Restart, "300", None),
    ("conntrack.tcp_loose", Restart, "true", None),
    ("conntrack.host_flows", Restart, "100", None),
    ("conntrack.host_half_open", Restart, "10", None),
    ("conntrack.half_open", Restart, "500", None),
    ("conntrack.hosts", Restart, "100", None),
    ("conntrack.host_prefix6", Restart, "56", None),
    (
        "nat.masquerade",
        Restart,
        "[\"lan\", \"wan2\", \"wan3\"]",
        None,
    ),
    (
        "uplinks[].interface",
        Restart,
        "\"wan\"",
        Some("uplinks[1].interface"),
    ),
    // A checked uplink's via is its probes' routing table too: restart-only there.
    ("uplinks[].via", Restart, "\"10.1.0.3\"", None),
    (
        "uplinks[].via",
        Applied,
        "\"10.2.0.3\"",
        Some("uplinks[1].via"),
    ),
    ("uplinks[].weight", Applied, "5", None),
    ("uplinks[].priority", Applied, "2", None),
    (
        "uplinks[].health.targets",
        Restart,
        "[\"198.51.100.9\"]",
        None,
    ),
    ("uplinks[].health.probe", Restart, "\"icmp\"", None),
    ("uplinks[].health.interval_ms", Restart, "4000", None),
    ("uplinks[].health.timeout_ms", Restart, "500", None),
    ("uplinks[].health.reliability", Restart, "2", None),
    ("uplinks[].health.down", Restart, "5", None),
    ("uplinks[].health.up", Restart, "5", None),
    ("routing.hash", Applied, "\"flow\"", None),
    ("routing.on_uplink_down", Applied, "\"keep\"", None),
    ("routing.reset_tcp", Applied, "false", None),
    (
        "routing.policy[].source",
        Applied,
        "\"192.168.10.8/32\"",
        None,
    ),
    (
        "routing.policy[].destination",
        Applied,
        "\"198.51.100.0/25\"",
        None,
    ),
    ("routing.policy[].from_zone", Applied, "\"wan3\"", None),
    ("routing.policy[].protocol", Applied, "\"udp\"", None),
    ("routing.policy[].port", Applied, "\"444\"", None),
    ("routing.policy[].uplink", Applied, "\"wan3\"", None),
    ("routing.policy[].fallback", Applied, "false", None),
    ("nat.port_range", Restart, "\"2000-3000\"", None),
    ("nat.binding_capacity", Restart, "1000", None),
    ("nat.host_ports", Restart, "100", None),
    ("nat.port_block_size", Restart, "512", None),
    ("nat.port_forwards[].interface", Applied, "\"lan\"", None),
    ("nat.port_forwards[].protocol", Applied, "\"udp\"", None),
    ("nat.port_forwards[].port", Applied, "\"9000-9001\"", None),
    ("nat.port_forwards[].to", Applied, "\"192.168.10.3\"", None),
    ("nat.port_forwards[].to_port", Applied, "81", None),
    ("nat.port_forwards[].log", Applied, "true", None),
    ("firewall.policy[].from", Applied, "\"local\"", None),
    ("firewall.policy[].to", Applied, "\"inside\"", None),
    ("firewall.policy[].action", Applied, "\"drop\"", None),
    ("firewall.policy[].log", Applied, "true", None),
    ("firewall.rules[].name", Applied, "\"other\"", None),
    ("firewall.pinholes[].interface", Applied, "\"lan\"", None),
    ("firewall.pinholes[].protocol", Applied, "\"udp\"", None),
    ("firewall.pinholes[].port", Applied, "\"2222\"", None),
    (
        "firewall.pinholes[].to",
        Applied,
        "\"2001:db8:5::23\"",
        None,
    ),
    (
        "firewall.pinholes[].source",
        Applied,
        "\"2001:db8:78::/48\"",
        None,
    ),
    ("firewall.rules[].from", Applied, "\"local\"", None),
    ("firewall.rules[].to", Applied, "\"wan\"", None),
    ("firewall.rules[].source", Applied, "\"10.0.1.0/24\"", None),
    (
        "firewall.rules[].destination",
        Applied,
        "\"10.0.0.0/24\"",
        None,
    ),
    ("firewall.rules[].protocol", Applied, "\"udp\"", None),
    (
        "firewall.rules[].source_ports",
        Applied,
        "\"2000-3000\"",
        None,
    ),
    (
        "firewall.rules[].destination_ports",
        Applied,
        "\"23\"",
        None,
    ),
    (
        "firewall.rules[].icmp_type",
        Applied,
        "0",
        Some("firewall.rules[1].icmp_type"),
    ),
    ("firewall.rules[].action", Applied, "\"reject\"", None),
    ("firewall.rules[].log", Applied, "true", None),
    (
        "firewall.log.syslog_udp",
        Restart,
        "\"127.0.0.1:5515\"",
        None,
    ),
    (
        "firewall.log.syslog_unix",
        Restart,
        "\"/run/other-log\"",
        None,
    ),
    (
        "firewall.log.json_file",
        Restart,
        "\"/var/log/other-firewall.jsonl\"",
        None,
    ),
    ("firewall.log.facility", Restart, "17", None),
    ("firewall.log.per_sec", Restart, "50", None),
    ("firewall.log.burst", Restart, "50", None),
    ("firewall.log.queue_events", Restart, "1024", None),
    (
        "firewall.log.drops",
        Restart,
        "[\"conntrack_invalid\"]",
        None,
    ),
    ("firewall.log.drops_sample", Restart, "10", None),
    ("firewall.log.drops_per_sec", Restart, "5", None),
    ("firewall.recheck_established", Applied, "true", None),
    ("metrics.listen", Restart, "\"127.0.0.1:9200\"", None),
    ("metrics.rule_series", Restart, "10", None),
    (
        "metrics.web_config",
        Restart,
        "\"/etc/gateway/web-config.yml\"",
        None,
    ),
    ("nat.log.syslog_udp", Restart, "\"127.0.0.1:5514\"", None),
    ("nat.log.syslog_unix", Restart, "\"/run/other-log\"", None),
    ("nat.log.facility", Restart, "17", None),
    ("nat.log.queue_events", Restart, "1024", None),
    ("nat.log.ipfix_udp", Restart, "\"127.0.0.1:4740\"", None),
    ("nat.log.ipfix_domain", Restart, "7", None),
    ("ctl.socket", Restart, "\"/run/gateway/other.sock\"", None),
    ("ctl.group", Restart, "\"adm\"", None),
    ("reload.watch", Restart, "false", None),
    ("traffic_meter.enabled", Applied, "false", None),
    ("traffic_meter.capacity", Restart, "128", None),
    ("traffic_meter.top_hosts", Applied, "7", None),
    (
        "traffic_meter.named_hosts",
        Applied,
        "[\"192.168.10.3\"]",
        None,
    ),
    ("qos.enabled", Applied, "false", None),
    ("qos.uplink_mbps", Applied, "200", None),
    ("qos.downlink_mbps", Applied, "200", None),
    ("qos.burst_ms", Applied, "30", None),
    ("qos.mode", Applied, "\"policer\"", None),
    ("qos.priority[].host", Applied, "\"192.168.10.6\"", None),
    ("qos.priority[].mac", Applied, "\"02:00:00:00:00:51\"", None),
    ("qos.priority[].dscp", Applied, "34", None),
    ("qos.priority[].protocol", Applied, "\"tcp\"", None),
    ("qos.priority[].ports", Applied, "\"5061\"", None),
    ("keyword_block.enabled", Applied, "false", None),
    ("keyword_block.domains", Applied, "[\"example.org\"]", None),
    ("keyword_block.keywords", Applied, "[\"poker\"]", None),
    ("keyword_block.dns_action", Applied, "\"drop\"", None),
    ("parental_control.enabled", Applied, "false", None),
    ("parental_control.utc_offset_minutes", Applied, "120", None),
    (
        "parental_control.categories",
        Applied,
        "{ adult = \"{DIR}/other.txt\" }",
        None,
    ),
    ("parental_control.devices[].name", Label, "\"kid2\"", None),
    (
        "parental_control.devices[].addresses",
        Applied,
        "[\"192.168.10.21\"]",
        None,
    ),
    (
        "parental_control.devices[].macs",
        Applied,
        "[\"02:00:00:00:00:22\"]",
        None,
    ),
    (
        "parental_control.devices[].blocked_categories",
        Applied,
        "[]",
        None,
    ),
    (
        "parental_control.devices[].allowed",
        Applied,
        "[\"daily 08:00-20:00\"]",
        None,
    ),
    ("parental_control.devices[].paused", Applied, "true", None),
];

/// A config with every section, option and array populated, so each change above lands on
/// something that is there. `{DIR}` is the test's directory (category files).
const FULL: &str = r#"
[eal]
main_lcore = 0
hugepages = "required"
memory_mb = 512
socket_memory_mb = []
file_prefix = "gw"
log_level = "notice"
cpus = []
extra_args = []

[mempool]
mbufs = 16383
cache = 256
data_room = 2048

[workers]
lcores = [1]

[[interfaces]]
name = "lan"
device = "net_bonding0"
address = "192.168.10.1/24"
zone = "inside"
mtu = 1500
rx_descriptors = 1024
tx_descriptors = 1024
rss_key = "6d5a"
source_validation = "strict"
tcp_mss = "auto"
kernel_twin = true
promiscuous = false
vlan_offload = true
[interfaces.bond]
members = ["net_ring2", "net_ring3"]
xmit_policy = "l34"
lacp_rate = "fast"
mac = "02:00:00:00:00:10"
[interfaces.ipv6]
addresses = ["2001:db8:5::1/64"]

[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[interfaces.ipv6]
addresses = ["2001:db8:1::1/64"]
router_advertisements = true
dns_servers = ["2001:db8:1::53"]
ra_interval_secs = 600

[[interfaces]]
name = "guest"
parent = "wan"
vlan = 20
address = "192.168.20.1/24"

[[interfaces]]
name = "isp"
parent = "wan"
vlan = 7
address = "pppoe"
[interfaces.pppoe]
username = "gateway"
password = "secret"
service_name = "internet"
ac_name = "bras-1"
lcp_echo_interval_secs = 10
lcp_echo_failures = 3
default_route = true

# Two more uplinks beside the PPPoE session.
[[interfaces]]
name = "wan2"
device = "net_ring5"
address = "10.1.0.1/24"
kernel_twin = true
virtual_address = "10.1.0.254"

[[interfaces]]
name = "wan3"
device = "net_ring6"
address = "10.2.0.1/24"
nat_address = "198.51.100.6"

[[uplinks]]
interface = "wan2"
via = "10.1.0.2"
weight = 2
priority = 0
[uplinks.health]
targets = ["198.51.100.1", "198.51.100.2"]
probe = "tcp:80"
interval_ms = 3000
timeout_ms = 1000
reliability = 1
down = 3
up = 3

[[uplinks]]
interface = "wan3"

[routing]
hash = "source"
on_uplink_down = "end"
reset_tcp = true
[[routing.policy]]
source = "192.168.10.7/32"
destination = "198.51.100.0/24"
from_zone = "guest"
protocol = "tcp"
port = "443"
uplink = "wan2"
fallback = true

# The PPPoE session brings the default route.
[[routes]]
destination = "10.99.0.0/16"
via = "10.0.0.2"

[[ipv6_routes]]
destination = "::/0"
via = "fe80::1"
interface = "wan"

[icmp]
errors_per_sec = 1000
burst = 100
echo_per_sec = 1000
echo_burst = 100

[neighbors]
capacity = 4096
pending_per_neighbor = 4
reachable_secs = 300
pending_total = 512
locktime_ms = 1000

[conntrack]
capacity = 4096
half_open = 1000
host_prefix6 = 64

[nat]
masquerade = ["wan", "wan2", "wan3"]
port_range = "1024-65535"
binding_capacity = 65536
host_ports = 4096
port_block_size = 256
[[nat.port_forwards]]
interface = "wan"
protocol = "tcp"
port = 8080
to = "192.168.10.2"
to_port = 80
[nat.log]
syslog_udp = "127.0.0.1:514"
syslog_unix = "/dev/log"
facility = 16
queue_events = 65536
ipfix_udp = "127.0.0.1:4739"
ipfix_domain = 1

[firewall]
recheck_established = false
[firewall.log]
syslog_udp = "127.0.0.1:515"
syslog_unix = "/dev/log"
json_file = "/var/log/gateway-firewall.jsonl"
facility = 16
per_sec = 100
burst = 100
queue_events = 4096
[[firewall.policy]]
from = "wan"
to = "local"
action = "accept"
log = false
[[firewall.rules]]
name = "ssh"
from = "wan"
to = "local"
source = "10.0.0.0/24"
destination = "10.0.0.1/32"
protocol = "tcp"
source_ports = "1024-65535"
destination_ports = "22"
action = "accept"
[[firewall.rules]]
name = "ping"
protocol = "icmp"
icmp_type = 8
action = "accept"
[[firewall.pinholes]]
interface = "wan"
protocol = "tcp"
port = "22"
to = "2001:db8:5::22"
source = "2001:db8:77::/48"

[metrics]
listen = "127.0.0.1:9100"

[ctl]
socket = "/run/gateway/ctl.sock"
group = "gateway"

[reload]
watch = true

[kernel_twins]
inside_by_default = false
netns = "gwns"
punt_per_sec = 10000
punt_burst = 256
route_allow = ["0.0.0.0/0", "::/0"]

[state]
directory = "/var/lib/gateway"
snapshot = true

[ha.sync]
listen = "127.0.0.1:7440"
peer = "127.0.0.1:7441"
key_file = "/etc/gateway/ha-sync.key"
refresh_ms = 10000
lease_ms = 30000

[port_mapping]
zones = []
per_host = 100
total = 1024
min_lifetime_s = 120
max_lifetime_s = 86400
external_ports = "1-1023"
upnp = false
upnp_http_port = 5000

[traffic_meter]
enabled = true
capacity = 64
top_hosts = 5
named_hosts = ["192.168.10.2"]

[qos]
enabled = true
uplink_mbps = 100
downlink_mbps = 100
burst_ms = 20
[[qos.priority]]
host = "192.168.10.5"
mac = "02:00:00:00:00:50"
dscp = 46
protocol = "udp"
ports = "5060"

[keyword_block]
enabled = true
domains = ["example.com"]
keywords = ["casino"]
dns_action = "nxdomain"

[parental_control]
enabled = true
utc_offset_minutes = 60
categories = { adult = "{DIR}/adult.txt" }
[[parental_control.devices]]
name = "kid"
addresses = ["192.168.10.20"]
macs = ["02:00:00:00:00:21"]
blocked_categories = ["adult"]
allowed = ["mon-fri 07:00-21:00"]
paused = false
"#;

/// A directory with the files FULL names, one per test (tests run at once and each removes its own).
fn test_dir(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gw-reload-fields-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("adult.txt"), "adult.example\n").unwrap();
    std::fs::write(dir.join("other.txt"), "other.example\nmore.example\n").unwrap();
    dir
}

fn full_value(dir: &std::path::Path) -> toml::Value {
    let text = FULL.replace("{DIR}", &dir.display().to_string());
    toml::Value::Table(text.parse::<toml::Table>().expect("FULL is TOML"))
}

/// The config a TOML tree gives, validated as a load validates it.
fn config_of(value: toml::Value) -> Result<GatewayConfig, String> {
    let config = parsed(value)?;
    config.validate().map_err(|err| err.to_string())?;
    Ok(config)
}

/// The config a TOML tree parses to, before validation: where serde's defaults show.
fn parsed(value: toml::Value) -> Result<GatewayConfig, String> {
    value
        .try_into()
        .map_err(|err: toml::de::Error| err.to_string())
}

/// What check-config says of a TOML tree: validated, then compiled as start compiles it
/// (`check_startable`: the router config, category files, the NAT pools). What the operator
/// supplies to the host need not be on this one: a file an example names, a group.
fn startable(value: toml::Value) -> Result<(), String> {
    let config = config_of(value)?;
    match check_startable(&config).map_err(|err| format!("{:#}", anyhow::Error::from(err))) {
        Err(err) if err.contains("No such file") || err.contains("on this host") => Ok(()),
        result => result,
    }
}

/// Puts `value` at `path` ("a.b[0].c"), creating the last key if it is missing.
fn set(tree: &mut toml::Value, path: &str, value: toml::Value) {
    let (table, key) = slot(tree, path);
    table.insert(key.to_string(), value);
}

/// Takes the key at `path` out of the tree, as if the operator had not written it.
fn remove(tree: &mut toml::Value, path: &str) {
    let (table, key) = slot(tree, path);
    table.remove(key);
}

/// The table that holds the last key of `path`, and that key.
fn slot<'v, 'p>(tree: &'v mut toml::Value, path: &'p str) -> (&'v mut toml::Table, &'p str) {
    let mut at = tree;
    let segments: Vec<&str> = path.split('.').collect();
    for (i, segment) in segments.iter().enumerate() {
        let (key, index) = match segment.split_once('[') {
            Some((key, rest)) => (
                key,
                Some(rest.trim_end_matches(']').parse::<usize>().unwrap()),
            ),
            None => (*segment, None),
        };
        let table = at
            .as_table_mut()
            .unwrap_or_else(|| panic!("{path}: {key} is not in a table"));
        if i + 1 == segments.len() && index.is_none() {
            return (table, key);
        }
        at = table
            .get_mut(key)
            .unwrap_or_else(|| panic!("{path}: FULL has no {key}"));
        if let Some(index) = index {
            at = at
                .as_array_mut()
                .and_then(|items| items.get_mut(index))
                .unwrap_or_else(|| panic!("{path}: FULL has no {key}[{index}]"));
        }
    }
    panic!("{path}: an empty path");
}

/// What a reload of `config` publishes, with the generation (new on every build) left out.
fn published(config: &GatewayConfig) -> String {
    let macs: Vec<[u8; 6]> = (0..config.interfaces.len())
        .map(|i| [0x02, 0, 0, 0, 1, i as u8])
        .collect();
    let router = router_config(config, &macs).expect("the config compiles");
    // The route table's Debug shows only its size: where sample addresses go shows its routes.
    let routes: Vec<_> = [
        "10.0.0.2",
        "10.0.0.77",
        "172.16.1.1",
        "8.8.8.8",
        "192.168.10.5",
        "10.99.1.1",
    ]
    .iter()
    .map(|ip| {
        let ip: std::net::Ipv4Addr = ip.parse().unwrap();
        router
            .routes
            .lookup(ip)
            .map(|hop| (hop.port, hop.resolve(ip)))
    })
    .collect();
    let routes6: Vec<_> = ["2001:db8:88::1", "2606:4700::1", "2001:db8:1::5"]
        .iter()
        .map(|ip| {
            let ip: std::net::Ipv6Addr = ip.parse().unwrap();
            router
                .routes6
                .lookup(ip)
                .map(|hop| (hop.port, hop.resolve(ip)))
        })
        .collect();
    let text = sorted_maps(&format!(
        "{router:?}\nroutes {routes:?}\nroutes6 {routes6:?}\n{:?}",
        MeterExport::from(&config.traffic_meter)
    ));
    let mut normalized = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("generation: ") {
        normalized.push_str(&rest[..at]);
        rest = rest[at + "generation: ".len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    normalized.push_str(rest);
    normalized
}

/// The zone-pair policy is a hash map, whose Debug order differs between two builds of one
/// config: its entries sorted.
fn sorted_maps(text: &str) -> String {
    const OPEN: &str = "pairs: {";
    let Some(start) = text.find(OPEN).map(|at| at + OPEN.len()) else {
        return text.to_string();
    };
    let end = start + text[start..].find('}').expect("the map ends");
    let mut entries: Vec<String> = text[start..end]
        .split(", (ZoneId")
        .enumerate()
        .map(|(i, entry)| {
            if i == 0 {
                entry.to_string()
            } else {
                format!("(ZoneId{entry}")
            }
        })
        .collect();
    entries.sort();
    format!("{}{}{}", &text[..start], entries.join(", "), &text[end..])
}

/// Whether a name `restart_required` reports ("conntrack", "interfaces[0].bond/rss_key",
/// "interfaces[0].rx/tx_descriptors") covers `field` ("interfaces[].rss_key").
fn covers(reported: &str, field: &str) -> bool {
    let mut normalized = String::new();
    let mut chars = reported.chars().peekable();
    while let Some(c) = chars.next() {
        normalized.push(c);
        if c == '[' {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
        }
    }
    let (prefix, last) = match normalized.rsplit_once('.') {
        Some((prefix, last)) => (format!("{prefix}."), last.to_string()),
        None => (String::new(), normalized.clone()),
    };
    let Some(rest) = field.strip_prefix(&prefix) else {
        return false;
    };
    let segment = rest.split('.').next().unwrap_or(rest);
    last.split('/')
        .any(|name| segment == name || segment.starts_with(&format!("{name}_")))
}

#[test]
fn the_walk_finds_fields_inside_options_arrays_and_maps() {
    let leaves = schema_leaves();
    for field in [
        "eal.memory_mb",
        "interfaces[].bond.members",
        "interfaces[].rss_key",
        "nat.port_forwards[].to_port",
        "firewall.rules[].icmp_type",
        "parental_control.categories",
        "parental_control.devices[].allowed",
        "metrics.listen",
    ] {
        assert!(
            leaves.contains(field),
            "the walk missed {field}: {leaves:?}"
        );
    }
    assert!(
        !leaves.contains("interfaces") && !leaves.contains("interfaces[].bond"),
        "sections and arrays of tables are not leaves: {leaves:?}"
    );
}

#[test]
fn every_field_is_applied_by_a_reload_or_reported_as_needing_a_restart() {
    let leaves = schema_leaves();
    let classified: BTreeSet<String> = FIELDS.iter().map(|f| f.0.to_string()).collect();
    let unclassified: Vec<&String> = leaves.difference(&classified).collect();
    assert!(
        unclassified.is_empty(),
        "config field(s) {unclassified:?} are neither applied by a reload nor reported as \
         needing a restart: apply them in reload::merge_for_reload (and what it compiles), or \
         report them in reload::restart_required and keep them there; then classify them in \
         FIELDS in {}",
        file!()
    );
    let stale: Vec<&String> = classified.difference(&leaves).collect();
    assert!(
        stale.is_empty(),
        "FIELDS classifies {stale:?}, which the schema no longer has"
    );

    let dir = test_dir("classes");
    let running = config_of(full_value(&dir)).expect("FULL is a valid config");
    let before = published(&running);
    assert_eq!(
        before,
        published(&running),
        "compiling one config twice must publish the same thing, or no comparison means much"
    );
    let mut failures = Vec::new();
    for &(field, class, change, at) in FIELDS {
        let path = at.map_or_else(|| field.replace("[]", "[0]"), str::to_string);
        let value = toml_value(&change.replace("{DIR}", &dir.display().to_string()))
            .unwrap_or_else(|err| panic!("{field}: change {change}: {err}"));
        let mut tree = full_value(&dir);
        set(&mut tree, &path, value);
        let new = match config_of(tree) {
            Ok(new) => new,
            Err(err) => {
                failures.push(format!(
                    "{field}: the change {change} does not validate: {err}"
                ));
                continue;
            }
        };
        if new == running {
            failures.push(format!("{field}: the change {change} changes nothing"));
            continue;
        }
        let reported = restart_required(&running, &new);
        let merged = merge_for_reload(&running, new.clone());
        match class {
            Restart => {
                if !reported.iter().any(|name| covers(name, field)) {
                    failures.push(format!(
                        "{field} is restart-only, but a reload that changes it reports {reported:?}"
                    ));
                }
                if merged != running {
                    failures.push(format!(
                        "{field} is restart-only, but a reload does not keep the running value"
                    ));
                }
            }
            Reconnect => {
                if !reported.is_empty() {
                    failures.push(format!(
                        "{field} reconnects the PPPoE session, but a reload that changes it reports {reported:?} as needing a restart"
                    ));
                }
                if merged != new || merged.interfaces == running.interfaces {
                    failures.push(format!(
                        "{field} reconnects the PPPoE session, but the merged config does not carry the change"
                    ));
                }
                if published(&merged) != before {
                    failures.push(format!(
                        "{field} only reconnects the PPPoE session, but changing it changes what is compiled"
                    ));
                }
            }
            Applied | Label => {
                if !reported.is_empty() {
                    failures.push(format!(
                        "{field} applies on reload, but a reload that changes it reports {reported:?} as needing a restart"
                    ));
                }
                if merged != new {
                    failures.push(format!(
                        "{field} applies on reload, but the merged config does not carry the change"
                    ));
                }
                let after = published(&merged);
                if class == Applied && after == before {
                    failures.push(format!(
                        "{field} is classified as applied, but changing it publishes nothing new"
                    ));
                }
                if class == Label && after != before {
                    failures.push(format!(
                        "{field} is classified as a label, but changing it changes what runs"
                    ));
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// docs/operations.md's list (Reload) of what needs a restart names every restart-only field (by itself, its
/// section or subsection, or, per interface, its name), and nothing that applies.
#[test]
fn the_readme_lists_what_needs_a_restart() {
    let readme = include_str!("../../docs/operations.md");
    let start = readme
        .find("These need a restart and are kept as they are")
        .expect("docs/operations.md: the restart paragraph (Reload)");
    let paragraph = &readme[start..];
    let paragraph = &paragraph[..paragraph.find("\n\n").unwrap_or(paragraph.len())];
    let named: BTreeSet<&str> = paragraph.split('`').skip(1).step_by(2).collect();
    let restart: Vec<&str> = FIELDS
        .iter()
        .filter(|f| f.1 == Restart)
        .map(|f| f.0)
        .collect();
    let names_for = |field: &str| -> Vec<String> {
        let mut names = vec![field.to_string()];
        let section = field.split(['.', '[']).next().unwrap().to_string();
        names.push(section);
        // A subsection (`nat.log` for `nat.log.facility`).
        names.extend(
            field
                .match_indices('.')
                .map(|(dot, _)| field[..dot].to_string()),
        );
        if let Some(rest) = field.strip_prefix("interfaces[].") {
            names.push(rest.split('.').next().unwrap().to_string());
        }
        names.push(field.rsplit('.').next().unwrap().to_string());
        names
    };
    for field in &restart {
        let names = names_for(field);
        assert!(
            names.iter().any(|name| named.contains(name.as_str())),
            "docs/operations.md (Reload): the restart list does not name {field} (nor any of {names:?})"
        );
    }
    for name in &named {
        let known = restart
            .iter()
            .any(|field| names_for(field).iter().any(|n| n == name));
        assert!(
            known,
            "docs/operations.md (Reload): the restart list names `{name}`, which is not restart-only"
        );
    }
}

// --- the reference -------------------------------------------------------------------------

/// One row of docs/configuration.md's reference: `| key | type | default | range | reload | example |`.
struct ReferenceRow {
    key: String,
    kind: String,
    default: String,
    range: String,
    reload: String,
    example: String,
}

/// The rows of the reference (its section, "## Reference", to the next section or the end).
fn reference_rows() -> Vec<ReferenceRow> {
    let doc = include_str!("../../docs/configuration.md");
    let start = doc
        .find("\n## Reference")
        .expect("docs/configuration.md: the Reference section");
    let section = &doc[start + 1..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            assert_eq!(
                cells.len(),
                6,
                "docs/configuration.md (Reference): a row has six cells: {line}"
            );
            ReferenceRow {
                key: cells[0].trim_matches('`').to_string(),
                kind: cells[1].to_string(),
                default: cells[2].to_string(),
                range: cells[3].to_string(),
                reload: cells[4].to_string(),
                example: cells[5].to_string(),
            }
        })
        .collect()
}

/// The text inside a cell that is one backticked span and nothing else.
fn literal(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.contains('`')).then_some(inner)
}

/// A TOML value written as it would stand after `key = `.
fn toml_value(text: &str) -> Result<toml::Value, String> {
    format!("v = {text}")
        .parse::<toml::Table>()
        .map_err(|err| err.to_string())
        .map(|mut table| table.remove("v").expect("the one key"))
}

fn reload_word(class: Class) -> &'static str {
    match class {
        Restart => "restart",
        Applied => "reload",
        Label => "label",
        Reconnect => "reconnect",
    }
}

/// Every key of the schema has one row in docs/configuration.md's reference, and every row
/// names a key that exists; each row's type is the kind of value the key reads, its reload
/// class the one `FIELDS` proves, its default what omitting the key gives (a literal is
/// checked against the config with the key taken out; `required` must be refused as missing),
/// and its example is accepted where the key stands in a full config.
#[test]
fn the_configuration_reference_documents_every_field() {
    let kinds = schema_kinds();
    let rows = reference_rows();
    let mut failures = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &rows {
        if !documented.insert(row.key.as_str()) {
            failures.push(format!("{}: documented twice", row.key));
        }
    }
    for key in kinds.keys() {
        if !documented.contains(key.as_str()) {
            failures.push(format!("{key}: in the schema, not in the reference"));
        }
    }
    for key in &documented {
        if !kinds.contains_key(*key) {
            failures.push(format!("{key}: in the reference, not in the schema"));
        }
    }

    let dir = test_dir("reference");
    // FULL's ctl.group need not exist on this host: without it, FULL compiles as start
    // compiles it, so an example that breaks the compile is seen (the group's own row puts
    // it back).
    let mut full = full_value(&dir);
    remove(&mut full, "ctl.group");
    let compiled = config_of(full.clone())
        .map(|config| check_startable(&config).map_err(|err| err.to_string()));
    assert!(
        matches!(compiled, Ok(Ok(()))),
        "FULL without ctl.group passes check-config: {compiled:?}"
    );
    for row in rows.iter().filter(|row| kinds.contains_key(&row.key)) {
        let key = row.key.as_str();
        let kind = &kinds[key];
        if row.kind.split(" (").next() != Some(kind.as_str()) {
            failures.push(format!(
                "{key}: type {:?}, but the key reads {kind}",
                row.kind
            ));
        }
        if row.range.is_empty() {
            failures.push(format!("{key}: no range"));
        }
        // A key proved in two classes (a checked uplink's via restarts, another's reloads)
        // names both; one proved in one class names just that.
        let proofs: Vec<_> = FIELDS.iter().filter(|field| field.0 == key).collect();
        let Some(&&(_, _, _, at)) = proofs.first() else {
            continue; // reported by the classification test
        };
        let words: Vec<&str> = proofs.iter().map(|field| reload_word(field.1)).collect();
        let named = match words.as_slice() {
            [word] => row.reload == *word,
            _ => words.iter().all(|word| row.reload.contains(word)),
        };
        if !named {
            failures.push(format!(
                "{key}: reload {:?}, but the field is proved {words:?}",
                row.reload
            ));
        }
        // Where FIELDS proves the key at another element, the reference is checked there too.
        // Where FIELDS writes a table whole (port mapping, off in FULL) to prove one of its
        // keys, every key of that table is checked in the table so written: switched on.
        let last = key.rsplit('.').next().unwrap_or(key);
        let parent = key.rsplit_once('.').map_or("", |(parent, _)| parent);
        let mut base = full.clone();
        if let Some(&(_, _, whole, Some(table))) = FIELDS
            .iter()
            .find(|field| field.3.is_some_and(|at| at == parent.replace("[]", "[0]")))
        {
            let whole = toml_value(&whole.replace("{DIR}", &dir.display().to_string()))
                .expect("FIELDS' changes are TOML");
            set(&mut base, table, whole);
        }
        let path = match at {
            Some(at) if at.rsplit('.').next() == Some(last) => at.to_string(),
            _ => key.replace("[]", "[0]"),
        };
        let mut omitted = base.clone();
        remove(&mut omitted, &path);
        if row.default == "required" {
            match parsed(omitted) {
                Err(err) if err.contains("missing field") => {}
                other => failures.push(format!(
                    "{key}: documented as required, but leaving it out gives {:?}",
                    other.map(|_| "a config")
                )),
            }
        } else if let Some(default) = literal(&row.default) {
            let written = toml_value(default).map(|value| {
                let mut tree = base.clone();
                set(&mut tree, &path, value);
                tree
            });
            // Defaults are serde's: compare what the two files parse to, before validation
            // (which may refuse both for another key's sake, alike).
            match (parsed(omitted), written.and_then(parsed)) {
                (Ok(omitted), Ok(written)) if omitted == written => {}
                (Ok(_), Ok(_)) => failures.push(format!(
                    "{key}: leaving it out is not the same as writing the default {default}"
                )),
                (omitted, written) => failures.push(format!(
                    "{key}: the default {default} cannot be checked: without the key {:?}, with it {:?}",
                    omitted.map(|_| "parsed"),
                    written.map(|_| "parsed")
                )),
            }
        } else if row.default.is_empty() || row.default.starts_with('`') {
            failures.push(format!(
                "{key}: the default {:?} is neither one literal, `required`, nor prose",
                row.default
            ));
        }
        let example = literal(&row.example).and_then(|line| line.split_once(" = "));
        match example {
            Some((name, value)) if name == last => {
                let mut tree = base.clone();
                match toml_value(value).map(|value| set(&mut tree, &path, value)) {
                    Ok(()) => {
                        if let Err(err) = startable(tree) {
                            failures.push(format!("{key}: the example {value} is refused: {err}"));
                        }
                    }
                    Err(err) => {
                        failures.push(format!("{key}: the example {value} is not TOML: {err}"))
                    }
                }
            }
            _ => failures.push(format!(
                "{key}: the example {:?} is not one `{last} = value`",
                row.example
            )),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        failures.is_empty(),
        "docs/configuration.md (Reference):\n{}",
        failures.join("\n")
    );
}

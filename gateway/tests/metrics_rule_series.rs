//! `gateway_firewall_rule_hits_total`: the first `metrics.rule_series` rules have series of
//! their own; the rest are summed per action under `rule="(other rules)"`, so a long rule
//! list cannot swell every scrape.

use std::net::Ipv4Addr;
use std::sync::Arc;

use gateway::dataplane::published::Published;
use gateway::reload::status::ReloadStatus;
use gateway::telemetry::bond_watch::BondWatch;
use gateway::telemetry::metrics::{MeterExport, MeterSource, Metrics, Sources};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet};
use pipeline::state::rule_hits::RuleHits;
use pipeline::wire::EthernetAddress;
use pipeline::{IcmpLimits, Interface, KernelRouteAllow, RouterConfig, WorkerCounters};

fn rule(name: &str, action: Action, port: u16) -> Rule {
    Rule {
        name: name.to_string(),
        from: None,
        to: None,
        src: None,
        dst: None,
        src6: None,
        dst6: None,
        protocol: Some(6),
        src_ports: None,
        dst_ports: Some(port..=port),
        icmp_type: None,
        action,
    }
}

/// Four rules whose counters stand at 1, 2, 3 and 4 hits, the last two drops; the third
/// matched last at Unix second 300, the fourth at 200.
fn router() -> Arc<RouterConfig> {
    let iface = |addr: [u8; 4], last: u8| Interface {
        mac: EthernetAddress([2, 0, 0, 0, 0, last]),
        addr: Ipv4Addr::from(addr),
        prefix_len: 24,
        mtu: 1500,
    };
    let interfaces = vec![iface([192, 168, 10, 1], 1), iface([10, 0, 0, 1], 2)];
    let mut config = RouterConfig::with_bounded_kernel_routes(
        interfaces,
        &[],
        &[],
        KernelRouteAllow::default(),
        IcmpLimits::default(),
    )
    .unwrap();
    let rules = vec![
        rule("web", Action::Accept, 443),
        rule("mail", Action::Accept, 25),
        rule("no-telnet", Action::Drop, 23),
        rule("no-discard", Action::Drop, 9),
    ];
    let mut firewall = RuleSet::compile(rules, Policy::new(Action::Accept)).unwrap();
    let hits: Vec<Arc<RuleHits>> = (0..4).map(|_| Arc::new(RuleHits::new(1))).collect();
    for (index, counter) in hits.iter().enumerate() {
        let last = if index == 2 { 300 } else { 200 };
        for _ in 0..=index {
            counter.add(0, last);
        }
    }
    firewall.attach_hits(hits);
    config.stateful.firewall = firewall;
    Arc::new(config)
}

fn metrics(rule_series: usize) -> Metrics {
    Metrics::new(Sources {
        interfaces: Vec::new(),
        meter: MeterSource {
            workers: Vec::new(),
            export: Arc::new(Published::new(Arc::new(MeterExport::default()))),
        },
        qos: Vec::new(),
        ports: Default::default(),
        pool: None,
        bonds: Arc::new(BondWatch::default()),
        workers: vec![Arc::new(WorkerCounters::default())],
        control: Arc::new(WorkerCounters::default()),
        reload: Arc::new(ReloadStatus::new()),
        heartbeats: Vec::new(),
        snapshot: Default::default(),
        nat_log: None,
        firewall_log: None,
        pppoe: None,
        router: Some(Arc::new(Published::new(router()))),
        rule_series,
    })
}

/// The rule-hit series of a scrape, as `rule action value` lines, sorted.
fn rule_hits(text: &str) -> Vec<String> {
    let mut series: Vec<String> = text
        .lines()
        .filter_map(|line| line.strip_prefix("gateway_firewall_rule_hits_total{"))
        .map(|rest| rest.replace("} ", " "))
        .collect();
    series.sort();
    series
}

#[test]
fn rules_past_the_series_limit_are_summed_per_action() {
    let text = metrics(2).render();
    assert_eq!(
        rule_hits(&text),
        [
            "action=\"accept\",rule=\"mail\" 2",
            "action=\"accept\",rule=\"web\" 1",
            "action=\"drop\",rule=\"(other rules)\" 7",
        ],
        "{text}"
    );
    assert!(
        text.contains(
            "gateway_firewall_rule_last_match_timestamp_seconds{rule=\"(other rules)\"} 300"
        ),
        "the summed rules' latest match: {text}"
    );
    // Under the limit, every rule has its own series.
    let all = rule_hits(&metrics(1000).render());
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.contains(&"action=\"drop\",rule=\"no-telnet\" 3".to_string()));
}

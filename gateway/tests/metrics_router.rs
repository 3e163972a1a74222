//! What the metrics read from the router config in force at each scrape:
//! `gateway_kernel_routes_refused` (how many of the kernel's current routes it refused, by
//! reason, as the control thread published it) and `gateway_firewall_rule_hits_total` (the
//! first `metrics.rule_series` rules with series of their own, the rest summed per action
//! under `rule="(other rules)"`, so a long rule list cannot swell every scrape).

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;

use gateway::dataplane::published::Published;
use gateway::telemetry::metrics::{Metrics, Sources};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet};
use pipeline::state::rule_hits::RuleHits;
use pipeline::wire::EthernetAddress;
use pipeline::{IcmpLimits, Interface, KernelRoute, KernelRouteAllow, RouterConfig};

/// The metrics of a gateway whose router config in force is `router`'s latest.
fn metrics(router: Arc<Published<RouterConfig>>, rule_series: usize) -> Metrics {
    Metrics::new(Sources {
        rule_series,
        ..common::sources(Some(router))
    })
}

fn router(kernel: &[KernelRoute], allow: KernelRouteAllow) -> Arc<RouterConfig> {
    let iface = |addr: [u8; 4], last: u8| Interface {
        mac: EthernetAddress([2, 0, 0, 0, 0, last]),
        addr: Ipv4Addr::from(addr),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    };
    let interfaces = vec![iface([192, 168, 10, 1], 1), iface([10, 0, 0, 1], 2)];
    let config = RouterConfig::with_bounded_kernel_routes(
        interfaces,
        &[],
        kernel,
        allow,
        IcmpLimits::default(),
    )
    .unwrap();
    Arc::new(config)
}

fn line<'a>(text: &'a str, reason: &str) -> &'a str {
    let series = format!("gateway_kernel_routes_refused{{reason=\"{reason}\"}} ");
    text.lines()
        .find(|line| line.starts_with(&series))
        .unwrap_or_else(|| panic!("no {series}in {text}"))
}

#[test]
fn the_refused_kernel_routes_of_the_router_in_force_are_counted_by_reason() {
    let route = |destination: [u8; 4], len: u8| KernelRoute {
        destination: Ipv4Addr::from(destination),
        len,
        port: 1,
        via: Some(Ipv4Addr::new(10, 0, 0, 2)),
    };
    let kernel = [
        route([192, 168, 10, 0], 25),
        route([192, 168, 10, 128], 25),
        route([0, 0, 0, 0], 0),
        route([198, 51, 100, 0], 24),
    ];
    let allow = KernelRouteAllow {
        v4: Some(vec![(Ipv4Addr::new(198, 51, 100, 0), 24)]),
        ..KernelRouteAllow::default()
    };
    let published = Arc::new(Published::new(router(&[], KernelRouteAllow::default())));
    let metrics = metrics(published.clone(), 1000);
    // Both series from the start, at 0: an alert can test the value, not its presence.
    let text = metrics.render();
    assert!(line(&text, "overlaps_connected").ends_with(" 0"), "{text}");
    assert!(line(&text, "not_allowed").ends_with(" 0"), "{text}");
    published.publish(router(&kernel, allow));
    let text = metrics.render();
    assert!(line(&text, "overlaps_connected").ends_with(" 2"), "{text}");
    assert!(line(&text, "not_allowed").ends_with(" 1"), "{text}");
    // The kernel took them away: a gauge, so back to 0.
    published.publish(router(&kernel[3..], KernelRouteAllow::default()));
    let text = metrics.render();
    assert!(line(&text, "overlaps_connected").ends_with(" 0"), "{text}");
}

fn rule(name: &str, action: Action, port: u16) -> Rule {
    Rule {
        protocol: Some(6),
        dst_ports: Some(port..=port),
        ..Rule::matching_all(name, action)
    }
}

/// Four rules whose counters stand at 1, 2, 3 and 4 hits, the last two drops; the third
/// matched last at Unix second 300, the fourth at 200.
fn ruled_router() -> Arc<RouterConfig> {
    let mut config = Arc::try_unwrap(router(&[], KernelRouteAllow::default())).unwrap();
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
    let router = || Arc::new(Published::new(ruled_router()));
    let text = metrics(router(), 2).render();
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
    let all = rule_hits(&metrics(router(), 1000).render());
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.contains(&"action=\"drop\",rule=\"no-telnet\" 3".to_string()));
}

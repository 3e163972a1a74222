//! `gateway_kernel_routes_refused`: how many of the kernel's current routes the router config
//! in force refused, by reason, read at each scrape from what the control thread published.

use std::net::Ipv4Addr;
use std::sync::Arc;

use gateway::dataplane::published::Published;
use gateway::reload::status::ReloadStatus;
use gateway::telemetry::bond_watch::BondWatch;
use gateway::telemetry::metrics::{MeterExport, MeterSource, Metrics, Sources};
use pipeline::wire::EthernetAddress;
use pipeline::{
    IcmpLimits, Interface, KernelRoute, KernelRouteAllow, RouterConfig, WorkerCounters,
};

fn router(kernel: &[KernelRoute], allow: KernelRouteAllow) -> Arc<RouterConfig> {
    let iface = |addr: [u8; 4], last: u8| Interface {
        mac: EthernetAddress([2, 0, 0, 0, 0, last]),
        addr: Ipv4Addr::from(addr),
        prefix_len: 24,
        mtu: 1500,
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
    let metrics = Metrics::new(Sources {
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
        router: Some(published.clone()),
        rule_series: 1000,
    });
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

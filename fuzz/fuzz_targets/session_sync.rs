//! Session sync's receiving end, as a hostile network or a hostile peer drives it. The first
//! byte picks what the rest is: 0, a datagram as it arrives (mostly refused before anything
//! is decoded: the tag); otherwise, a payload the fuzzer cannot sign, signed here with the
//! peer's key, so that the decoder, the well-formedness checks and the install behind them
//! are reached. Every accepted flow is installed into a worker of a home gateway (a LAN, a
//! masqueraded WAN, a port forward) twice over, the second a refresh.
//!
//! Checked, besides "no panic": an accepted message installs at most what it carries, once
//! per flow however often it is refreshed; and after every lease has run out the worker's
//! table is empty and every NAT port was given back.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::pipeline::operator::session_sync::{SyncKey, SyncReceiver, SyncSender};
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    IcmpLimits, Interface, NeighborView, Pipeline, RouterConfig, StaticRoute, WorkerCounters,
    WorkerSetup,
};

const SECRET: &[u8] = b"the fuzzed pair's shared secret";
const PEER: &str = "192.0.2.2:7440";
const SECOND: u64 = 1_000_000_000;
const LEASE: u64 = 30 * SECOND;

fn home() -> Arc<RouterConfig> {
    static HOME: OnceLock<Arc<RouterConfig>> = OnceLock::new();
    HOME.get_or_init(|| {
        let side = |mac: u8, addr: [u8; 4]| Interface {
            mac: EthernetAddress([2, 0, 0, 0, 0, mac]),
            addr: Ipv4Addr::from(addr),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        };
        let policy = Policy::new(Action::Drop)
            .set(ZoneId(0), ZoneId(1), Action::Accept)
            .set(ZoneId(0), ZoneId::LOCAL, Action::Accept);
        let router = RouterConfig::new(
            vec![side(1, [192, 168, 10, 1]), side(2, [10, 0, 0, 1])],
            &[StaticRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                len: 0,
                via: Ipv4Addr::new(10, 0, 0, 2),
            }],
            IcmpLimits::default(),
        )
        .expect("a valid router")
        .with_stateful(Stateful {
            content: None,
            zones: vec![ZoneId(0), ZoneId(1)],
            masquerade: vec![false, true],
            firewall: RuleSet::compile(Vec::new(), policy).expect("valid rules"),
            port_mappings: Default::default(),
            port_forwards: vec![PortForward {
                interface: 1,
                protocol: 6,
                ports: 8080..=8080,
                to: Ipv4Addr::new(192, 168, 10, 3),
                to_port: 80,
            }],
            recheck_established: false,
            generation: 0,
        })
        .expect("a valid stateful config");
        Arc::new(router)
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let key = || SyncKey::for_sender(SECRET, PEER).expect("a long secret");
    let message = match mode {
        0 => rest.to_vec(),
        _ => SyncSender::new(key(), 1).seal_payload(rest),
    };
    let mut receiver = SyncReceiver::new(key());
    let Ok(flows) = receiver.open(&message) else {
        return;
    };
    let counters = Arc::new(WorkerCounters::default());
    let setup = WorkerSetup {
        conntrack: ConntrackConfig {
            capacity: 64,
            half_open: 16,
            hosts: 64,
            ..ConntrackConfig::default()
        },
        nat_bindings: 64,
        ..WorkerSetup::default()
    };
    let mut worker = Pipeline::for_worker(
        home(),
        Arc::new(NeighborView::new(std::iter::empty())),
        counters.clone(),
        setup,
    )
    .expect("a worker");
    let first = worker.install_synced(&flows, SECOND, LEASE);
    assert!(first.restored <= flows.len() as u64);
    let installed = counters.conntrack_entries.get();
    assert!(installed <= first.restored);
    // The same flows again: each copy replaced, none added.
    worker.install_synced(&flows, 2 * SECOND, LEASE);
    assert!(counters.conntrack_entries.get() <= installed.max(flows.len() as u64));
    worker.housekeeping(2 * SECOND + LEASE + SECOND, usize::MAX);
    assert_eq!(
        counters.conntrack_entries.get(),
        0,
        "a flow outlived its lease"
    );
    assert_eq!(
        counters.nat_ports_in_use.get(),
        0,
        "a NAT port was not given back"
    );
});

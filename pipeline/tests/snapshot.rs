//! State snapshots end to end: connections through masquerade and a port forward on a home
//! gateway (LAN 192.168.10.1/24, WAN 10.0.0.1/24 masquerading, TCP 8080 forwarded to
//! 192.168.10.3:80), exported from one set of workers, encoded, decoded and restored into
//! fresh workers, perhaps of another count. What the restored workers do with a connection's
//! next packets in both directions must be what the old ones did, to the byte; corrupt
//! snapshots must be refused whole.
//!
//! Session sync (an HA pair) streams the same records: the same connections, walked out of
//! one gateway's tables a slice at a time, sealed, opened and installed into a standby, must
//! be carried on by the standby as the first would have carried them.

use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::pipeline::operator::session_sync::{
    Refusal, SealError, SyncKey, SyncReceiver, SyncSender, FLOWS_PER_MESSAGE, MAX_MESSAGE,
};
use pipeline::pipeline::operator::snapshot::{
    self, RestoreReport, SavedFlow, Skip, Snapshot, SnapshotError,
};
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    IcmpLimits, Ingress, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig, StaticRoute,
    Verdict, WorkerCounters, WorkerSetup,
};
use proptest::prelude::*;

const LAN: u16 = 0;
const WAN: u16 = 1;
const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
const UPSTREAM_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const WAN_ADDR: [u8; 4] = [10, 0, 0, 1];
const SERVER: [u8; 4] = [192, 168, 10, 3];
const REMOTE: [u8; 4] = [203, 0, 113, 5];
const SECOND: u64 = 1_000_000_000;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

fn ip(octets: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(octets)
}

fn router(forward: bool, wan_addr: [u8; 4], rules: Vec<Rule>) -> RouterConfig {
    let interfaces = vec![
        Interface {
            mac: EthernetAddress(LAN_MAC),
            addr: ip([192, 168, 10, 1]),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
        Interface {
            mac: EthernetAddress(WAN_MAC),
            addr: ip(wan_addr),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
    ];
    let default_route = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: ip([wan_addr[0], wan_addr[1], wan_addr[2], 2]),
    };
    let policy = Policy::new(Action::Drop)
        .set(ZoneId(0), ZoneId(1), Action::Accept)
        .set(ZoneId(0), ZoneId::LOCAL, Action::Accept);
    let port_forwards = if forward {
        vec![PortForward {
            interface: WAN,
            protocol: 6,
            ports: 8080..=8080,
            to: ip(SERVER),
            to_port: 80,
        }]
    } else {
        Vec::new()
    };
    RouterConfig::new(interfaces, &[default_route], IcmpLimits::default())
        .unwrap()
        .with_stateful(Stateful {
            content: None,
            zones: vec![ZoneId(0), ZoneId(1)],
            masquerade: vec![false, true],
            firewall: RuleSet::compile(rules, policy).unwrap(),
            port_mappings: Default::default(),
            port_forwards,
            recheck_established: false,
            generation: 0,
        })
        .unwrap()
}

/// Built once: a route table costs tens of megabytes.
fn home() -> Arc<RouterConfig> {
    static HOME: OnceLock<Arc<RouterConfig>> = OnceLock::new();
    HOME.get_or_init(|| Arc::new(router(true, WAN_ADDR, Vec::new())))
        .clone()
}

/// The LAN hosts the tests' connections come from: 192.168.10.10 and up.
fn lan_host(n: u8) -> [u8; 4] {
    [192, 168, 10, 10 + n]
}

fn neighbors(wan_addr: [u8; 4]) -> Arc<NeighborView> {
    let mut entries: Vec<_> = (0..40)
        .map(|n| (ip(lan_host(n)), EthernetAddress(HOST_MAC)))
        .collect();
    entries.push((ip(SERVER), EthernetAddress(HOST_MAC)));
    let upstream = [wan_addr[0], wan_addr[1], wan_addr[2], 2];
    entries.push((ip(upstream), EthernetAddress(UPSTREAM_MAC)));
    Arc::new(NeighborView::new(entries))
}

/// Small tables: a test builds many workers.
fn setup(worker: u16, workers: u16) -> WorkerSetup {
    WorkerSetup {
        worker,
        workers,
        conntrack: ConntrackConfig {
            capacity: 1024,
            half_open: 256,
            hosts: 256,
            ..ConntrackConfig::default()
        },
        nat_bindings: 1024,
        ..WorkerSetup::default()
    }
}

/// A gateway of `workers` workers; a packet goes to worker 0 first and on to its owner, as
/// the handoff rings carry it.
struct Gateway {
    workers: Vec<Pipeline>,
}

impl Gateway {
    fn new(router: Arc<RouterConfig>, workers: u16, wan_addr: [u8; 4]) -> Gateway {
        let workers = (0..workers)
            .map(|worker| {
                Pipeline::for_worker(
                    router.clone(),
                    neighbors(wan_addr),
                    Arc::new(WorkerCounters::default()),
                    setup(worker, workers),
                )
                .unwrap()
            })
            .collect();
        Gateway { workers }
    }

    fn process(&mut self, frame: &[u8], port: u16, now_ns: u64) -> (Verdict, Vec<u8>) {
        let mut room = [0xa5u8; 2048];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let ingress = Ingress {
            port,
            handed_off: false,
        };
        let mut verdict = self.workers[0].process_from(&mut pkt, ingress, now_ns);
        if let Verdict::Handoff { worker } = verdict {
            let ingress = Ingress {
                port,
                handed_off: true,
            };
            verdict = self.workers[usize::from(worker)].process_from(&mut pkt, ingress, now_ns);
        }
        (verdict, pkt.bytes().to_vec())
    }

    fn export(&self, now_ns: u64) -> Snapshot {
        let mut flows = Vec::new();
        for worker in &self.workers {
            worker.export_flows(now_ns, &mut flows);
        }
        Snapshot {
            taken_unix_ms: 1_700_000_000_000,
            workers: self.workers.len() as u16,
            writer: "test".into(),
            flows,
        }
    }

    /// Restores `snapshot` into these (fresh) workers `elapsed_ns` after it was taken.
    fn restore(&mut self, snapshot: Snapshot, elapsed_ns: u64) -> RestoreReport {
        let mut report = RestoreReport::default();
        let router = self.workers[0].router().clone();
        let per_worker = snapshot::distribute(
            &router,
            self.workers.len() as u16,
            snapshot.flows,
            elapsed_ns,
            &mut report,
        );
        for (worker, flows) in self.workers.iter_mut().zip(per_worker) {
            report.add(&worker.restore_flows(&flows, 0));
        }
        report
    }

    /// Every worker's flows, walked out of its table `slice` slots at a time, as a worker
    /// does for session sync.
    fn walk(&self, slice: usize, now_ns: u64) -> Vec<SavedFlow> {
        let mut flows = Vec::new();
        for worker in &self.workers {
            let mut from = 0;
            loop {
                from = worker.export_flow_slots(from, slice, now_ns, |flow| flows.push(flow));
                if from == 0 {
                    break;
                }
            }
        }
        flows
    }

    /// Installs opened sync messages' flows, each into the worker that owns it here (those
    /// no worker owns, split by this worker count, are counted by worker 0).
    fn install(&mut self, flows: &[SavedFlow], now_ns: u64, lease_ns: u64) -> RestoreReport {
        let router = self.workers[0].router().clone();
        let count = self.workers.len() as u16;
        let mut report = RestoreReport::default();
        for flow in flows {
            let worker = snapshot::owner(&router, count, flow).unwrap_or(0);
            let installed = self.workers[usize::from(worker)].install_synced(
                std::slice::from_ref(flow),
                now_ns,
                lease_ns,
            );
            report.add(&installed);
        }
        report
    }

    fn flows(&self) -> usize {
        self.workers
            .iter()
            .map(|w| w.counters().conntrack_entries.get() as usize)
            .sum()
    }

    fn nat_ports_in_use(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.counters().nat_ports_in_use.get())
            .sum()
    }
}

type Endpoint = ([u8; 4], u16);

fn macs(ingress: u16) -> ([u8; 6], [u8; 6]) {
    match ingress {
        LAN => (HOST_MAC, LAN_MAC),
        _ => (UPSTREAM_MAC, WAN_MAC),
    }
}

fn tcp(
    ingress: u16,
    src: Endpoint,
    dst: Endpoint,
    flags: u8,
    seq: u32,
    ack: u32,
    len: usize,
) -> Vec<u8> {
    let (src_mac, dst_mac) = macs(ingress);
    let mut builder = PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src.0, dst.0, 64)
        .tcp(src.1, dst.1, seq, 65535);
    if flags & SYN != 0 {
        builder = builder.syn();
    }
    if flags & ACK != 0 {
        builder = builder.ack(ack);
    }
    if flags & PSH != 0 {
        builder = builder.psh();
    }
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut frame = Vec::new();
    builder.write(&mut frame, &payload).unwrap();
    frame
}

fn udp(ingress: u16, src: Endpoint, dst: Endpoint) -> Vec<u8> {
    let (src_mac, dst_mac) = macs(ingress);
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src.0, dst.0, 64)
        .udp(src.1, dst.1)
        .write(&mut frame, b"datagram")
        .unwrap();
    frame
}

fn echo(ingress: u16, src: [u8; 4], dst: [u8; 4], id: u16, request: bool) -> Vec<u8> {
    let (src_mac, dst_mac) = macs(ingress);
    let builder = PacketBuilder::ethernet2(src_mac, dst_mac).ipv4(src, dst, 64);
    let builder = if request {
        builder.icmpv4_echo_request(id, 1)
    } else {
        builder.icmpv4_echo_reply(id, 1)
    };
    let mut frame = Vec::new();
    builder.write(&mut frame, b"ping").unwrap();
    frame
}

/// The source of a frame the gateway sent: the masquerade address and port it chose.
fn source(frame: &[u8]) -> Endpoint {
    let sliced = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(NetSlice::Ipv4(ipv4)) = sliced.net else {
        panic!("not IPv4")
    };
    let addr = ipv4.header().source();
    let port = match sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => tcp.source_port(),
        Some(TransportSlice::Udp(udp)) => udp.source_port(),
        Some(TransportSlice::Icmpv4(icmp)) => {
            u16::from_be_bytes([icmp.bytes5to8()[0], icmp.bytes5to8()[1]])
        }
        _ => panic!("no transport"),
    };
    (addr, port)
}

/// One connection through the gateway, and the packets that must pass after a restart.
#[derive(Clone, Debug)]
enum Conn {
    /// TCP from a LAN host to REMOTE:80 through masquerade.
    Masquerade { host: u8, port: u16 },
    /// TCP from REMOTE to the forward WAN:8080 -> SERVER:80.
    Forward { port: u16 },
    /// UDP from a LAN host through masquerade.
    Udp { host: u8, port: u16 },
    /// An ICMP echo from a LAN host through masquerade.
    Ping { host: u8, id: u16 },
}

const C_ISN: u32 = 1000;
const S_ISN: u32 = 9000;

impl Conn {
    /// Opens it (handshake and a first exchange) and returns the packets to check after
    /// the restore: (frame, ingress port).
    fn open(&self, gateway: &mut Gateway, now_ns: u64) -> Vec<(Vec<u8>, u16)> {
        let pass = |gateway: &mut Gateway, frame: Vec<u8>, port: u16| {
            let (verdict, out) = gateway.process(&frame, port, now_ns);
            assert!(
                matches!(verdict, Verdict::Transmit { .. }),
                "{self:?}: {verdict:?}"
            );
            out
        };
        match *self {
            Conn::Masquerade { host, port } => {
                let client = (lan_host(host), port);
                let server = (REMOTE, 80);
                let out = pass(gateway, tcp(LAN, client, server, SYN, C_ISN, 0, 0), LAN);
                let (addr, nat_port) = source(&out);
                let outside = (addr, nat_port);
                pass(
                    gateway,
                    tcp(WAN, server, outside, SYN | ACK, S_ISN, C_ISN + 1, 0),
                    WAN,
                );
                pass(
                    gateway,
                    tcp(LAN, client, server, ACK | PSH, C_ISN + 1, S_ISN + 1, 100),
                    LAN,
                );
                pass(
                    gateway,
                    tcp(WAN, server, outside, ACK | PSH, S_ISN + 1, C_ISN + 101, 50),
                    WAN,
                );
                vec![
                    (
                        tcp(LAN, client, server, ACK | PSH, C_ISN + 101, S_ISN + 51, 10),
                        LAN,
                    ),
                    (
                        tcp(WAN, server, outside, ACK | PSH, S_ISN + 51, C_ISN + 111, 10),
                        WAN,
                    ),
                ]
            }
            Conn::Forward { port } => {
                let client = (REMOTE, port);
                let public = (WAN_ADDR, 8080);
                let target = (SERVER, 80);
                pass(gateway, tcp(WAN, client, public, SYN, C_ISN, 0, 0), WAN);
                pass(
                    gateway,
                    tcp(LAN, target, client, SYN | ACK, S_ISN, C_ISN + 1, 0),
                    LAN,
                );
                pass(
                    gateway,
                    tcp(WAN, client, public, ACK | PSH, C_ISN + 1, S_ISN + 1, 100),
                    WAN,
                );
                pass(
                    gateway,
                    tcp(LAN, target, client, ACK | PSH, S_ISN + 1, C_ISN + 101, 50),
                    LAN,
                );
                vec![
                    (
                        tcp(WAN, client, public, ACK | PSH, C_ISN + 101, S_ISN + 51, 10),
                        WAN,
                    ),
                    (
                        tcp(LAN, target, client, ACK | PSH, S_ISN + 51, C_ISN + 111, 10),
                        LAN,
                    ),
                ]
            }
            Conn::Udp { host, port } => {
                let client = (lan_host(host), port);
                let server = (REMOTE, 53);
                let out = pass(gateway, udp(LAN, client, server), LAN);
                let (addr, nat_port) = source(&out);
                let outside = (addr, nat_port);
                pass(gateway, udp(WAN, server, outside), WAN);
                vec![
                    (udp(LAN, client, server), LAN),
                    (udp(WAN, server, outside), WAN),
                ]
            }
            Conn::Ping { host, id } => {
                let out = pass(gateway, echo(LAN, lan_host(host), REMOTE, id, true), LAN);
                let (addr, nat_id) = source(&out);
                vec![
                    (echo(LAN, lan_host(host), REMOTE, id, true), LAN),
                    (echo(WAN, REMOTE, addr, nat_id, false), WAN),
                ]
            }
        }
    }

    /// Only a masqueraded flow can be split by a new worker count (its external port's
    /// class decides one direction's owner, its inside host the other's).
    fn masqueraded(&self) -> bool {
        !matches!(self, Conn::Forward { .. })
    }
}

fn conn() -> impl Strategy<Value = Conn> {
    prop_oneof![
        (0..40u8, 1024..60000u16).prop_map(|(host, port)| Conn::Masquerade { host, port }),
        (1024..60000u16).prop_map(|port| Conn::Forward { port }),
        (0..40u8, 1024..60000u16).prop_map(|(host, port)| Conn::Udp { host, port }),
        (0..40u8, 1..60000u16).prop_map(|(host, id)| Conn::Ping { host, id }),
    ]
}

/// Distinct connections: one per tuple.
fn distinct(conns: Vec<Conn>) -> Vec<Conn> {
    let mut seen = std::collections::HashSet::new();
    conns
        .into_iter()
        .filter(|conn| {
            seen.insert(match *conn {
                Conn::Masquerade { host, port } => (0, host, port),
                Conn::Forward { port } => (1, 0, port),
                Conn::Udp { host, port } => (2, host, port),
                Conn::Ping { host, id } => (3, host, id),
            })
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Export, encode, decode, restore into another worker count: every connection whose
    /// directions still meet on one worker is carried on exactly as before, the rest are
    /// counted as ownership skips, and with the same worker count nothing is skipped.
    #[test]
    fn restored_workers_translate_as_the_old_ones_did(
        conns in prop::collection::vec(conn(), 1..12),
        old_workers in 1..=4u16,
        new_workers in 1..=4u16,
    ) {
        let conns = distinct(conns);
        let mut old = Gateway::new(home(), old_workers, WAN_ADDR);
        let checks: Vec<_> = conns.iter().map(|conn| conn.open(&mut old, SECOND)).collect();
        let snapshot = old.export(2 * SECOND);
        prop_assert_eq!(snapshot.flows.len(), conns.len());
        let bytes = snapshot::encode(&snapshot).unwrap();
        let decoded = snapshot::decode(&bytes).unwrap();
        prop_assert_eq!(&decoded, &snapshot);

        let mut new = Gateway::new(home(), new_workers, WAN_ADDR);
        let report = new.restore(decoded, SECOND);
        let split = report.skipped(Skip::Ownership);
        prop_assert_eq!(report.restored + split, conns.len() as u64, "{:?}", report);
        prop_assert_eq!(report.skipped_total(), split);
        if new_workers == old_workers {
            prop_assert_eq!(split, 0);
        }
        prop_assert_eq!(new.flows() as u64, report.restored);
        let mut restored = 0;
        for (conn, packets) in conns.iter().zip(checks) {
            let before = new.flows();
            let results: Vec<_> = packets
                .iter()
                .map(|(frame, port)| (old.process(frame, *port, 3 * SECOND), new.process(frame, *port, 3 * SECOND)))
                .collect();
            let kept = results.iter().all(|(old, new)| old == new);
            if kept {
                restored += 1;
                let transmitted = results
                    .iter()
                    .all(|((verdict, _), _)| matches!(verdict, Verdict::Transmit { .. }));
                prop_assert!(transmitted, "{:?}: {:?}", conn, results);
                prop_assert_eq!(new.flows(), before, "{:?} made a new flow", conn);
            } else {
                prop_assert!(conn.masqueraded(), "{:?} was not carried on: {:?}", conn, results);
            }
        }
        prop_assert_eq!(restored, report.restored);
    }

    /// Any change to a snapshot's bytes, and any truncation, is refused.
    #[test]
    fn corrupt_snapshots_are_refused(
        conns in prop::collection::vec(conn(), 1..6),
        position in any::<prop::sample::Index>(),
        flip in 1..=255u8,
        cut in any::<prop::sample::Index>(),
    ) {
        let conns = distinct(conns);
        let mut gateway = Gateway::new(home(), 1, WAN_ADDR);
        for conn in &conns {
            conn.open(&mut gateway, SECOND);
        }
        let bytes = snapshot::encode(&gateway.export(2 * SECOND)).unwrap();
        let mut corrupt = bytes.clone();
        corrupt[position.index(bytes.len())] ^= flip;
        prop_assert!(snapshot::decode(&corrupt).is_err());
        prop_assert!(snapshot::decode(&bytes[..cut.index(bytes.len())]).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        prop_assert!(snapshot::decode(&longer).is_err());
    }
}

fn snapshot_of(conns: &[Conn]) -> (Gateway, Snapshot) {
    let mut gateway = Gateway::new(home(), 1, WAN_ADDR);
    for conn in conns {
        conn.open(&mut gateway, SECOND);
    }
    let snapshot = gateway.export(2 * SECOND);
    (gateway, snapshot)
}

#[test]
fn the_refusals_say_why() {
    let (_, snapshot) = snapshot_of(&[Conn::Forward { port: 40000 }]);
    let bytes = snapshot::encode(&snapshot).unwrap();
    let refusal = |bytes: &[u8]| snapshot::decode(bytes).unwrap_err();
    assert!(matches!(
        refusal(b"not a snapshot at all, truly"),
        SnapshotError::Foreign
    ));
    assert!(matches!(refusal(b""), SnapshotError::Truncated { .. }));
    assert!(matches!(
        refusal(&bytes[..30]),
        SnapshotError::Truncated { .. }
    ));
    let mut old = bytes.clone();
    old[8] = 0;
    assert!(matches!(refusal(&old), SnapshotError::Version { found: 0 }));
    let mut corrupt = bytes.clone();
    *corrupt.last_mut().unwrap() ^= 1;
    assert!(matches!(refusal(&corrupt), SnapshotError::Checksum { .. }));
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"xx");
    assert!(matches!(
        refusal(&longer),
        SnapshotError::TrailingBytes { extra: 2 }
    ));
    // A checksum that holds over a flow the tracker could not have built.
    let mut malformed = snapshot.clone();
    malformed.flows[0].tcp = None;
    let bytes = snapshot::encode(&malformed).unwrap();
    assert!(matches!(
        refusal(&bytes),
        SnapshotError::MalformedFlow { index: 0 }
    ));
    assert!(refusal(&bytes).to_string().contains("flow 0"));
}

#[test]
fn flows_the_config_no_longer_makes_are_skipped_and_their_ports_stay_free() {
    let conns = [
        Conn::Masquerade {
            host: 1,
            port: 40000,
        },
        Conn::Forward { port: 40001 },
        Conn::Udp {
            host: 2,
            port: 40002,
        },
    ];
    let (_, snapshot) = snapshot_of(&conns);

    // The forward is gone: its flow goes, masquerade stays.
    let mut without_forward =
        Gateway::new(Arc::new(router(false, WAN_ADDR, Vec::new())), 1, WAN_ADDR);
    let report = without_forward.restore(snapshot.clone(), 0);
    assert_eq!(
        (report.restored, report.skipped(Skip::Config)),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(without_forward.nat_ports_in_use(), 2);

    // A new WAN address: neither the masquerade bindings nor the forwarded address are ours
    // any more.
    let renumbered = [10, 9, 9, 1];
    let mut moved = Gateway::new(
        Arc::new(router(true, renumbered, Vec::new())),
        1,
        renumbered,
    );
    let report = moved.restore(snapshot.clone(), 0);
    assert_eq!(
        (report.restored, report.skipped(Skip::Config)),
        (0, 3),
        "{report:?}"
    );
    assert_eq!(moved.nat_ports_in_use(), 0);

    // A rule now drops UDP from the LAN.
    let no_udp = Rule {
        from: Some(ZoneId(0)),
        protocol: Some(17),
        ..Rule::matching_all("no-udp", Action::Drop)
    };
    let mut strict = Gateway::new(Arc::new(router(true, WAN_ADDR, vec![no_udp])), 1, WAN_ADDR);
    let report = strict.restore(snapshot.clone(), 0);
    assert_eq!(
        (report.restored, report.skipped(Skip::Config)),
        (2, 1),
        "{report:?}"
    );
    assert_eq!(strict.nat_ports_in_use(), 1);

    // Down for longer than UDP's timeout (300 s): the UDP flow expired meanwhile.
    let mut late = Gateway::new(home(), 1, WAN_ADDR);
    let report = late.restore(snapshot.clone(), 400 * SECOND);
    assert_eq!(
        (report.restored, report.skipped(Skip::Expired)),
        (2, 1),
        "{report:?}"
    );

    // Restored twice into the same workers: the second copy finds its tuples and ports
    // taken, and changes nothing.
    let mut twice = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(twice.restore(snapshot.clone(), 0).restored, 3);
    let ports = twice.nat_ports_in_use();
    let report = twice.restore(snapshot, 0);
    assert_eq!(report.restored, 0, "{report:?}");
    assert_eq!(
        report.skipped(Skip::NatPort) + report.skipped(Skip::Table),
        3
    );
    assert_eq!((twice.flows(), twice.nat_ports_in_use()), (3, ports));
}

#[test]
fn a_restored_binding_is_kept_for_its_host_and_never_handed_to_another() {
    let (mut old, snapshot) = snapshot_of(&[Conn::Masquerade {
        host: 1,
        port: 40000,
    }]);
    let SavedFlow { reply, .. } = snapshot.flows[0];
    let mut new = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(new.restore(snapshot, 0).restored, 1);
    // Another host asking for the same source port gets another external port...
    let (verdict, out) = new.process(
        &tcp(LAN, (lan_host(2), 40000), (REMOTE, 80), SYN, 1, 0, 0),
        LAN,
        SECOND,
    );
    assert!(matches!(verdict, Verdict::Transmit { .. }));
    assert_ne!(source(&out).1, reply.dst_port);
    // ...while the restored host's new flow from the same endpoint shares its binding
    // (endpoint-independent mapping), as it did before the restart.
    let frame = tcp(
        LAN,
        (lan_host(1), 40000),
        ([198, 51, 100, 7], 443),
        SYN,
        1,
        0,
        0,
    );
    let (_, before) = old.process(&frame, LAN, 3 * SECOND);
    let (_, after) = new.process(&frame, LAN, 3 * SECOND);
    assert_eq!(source(&after), (reply.dst.octets(), reply.dst_port));
    assert_eq!(before, after);
}

/// The active box's sending key in these tests.
fn sync_key() -> SyncKey {
    SyncKey::for_sender(b"the pair's shared secret", "192.0.2.1:7440").unwrap()
}

/// Flows sealed into messages of at most [`FLOWS_PER_MESSAGE`] flows.
fn seal_all(sender: &mut SyncSender, flows: &[SavedFlow]) -> Vec<Vec<u8>> {
    flows
        .chunks(FLOWS_PER_MESSAGE)
        .map(|chunk| sender.seal(chunk).unwrap())
        .collect()
}

/// A lease far longer than the tests' clocks run.
const LONG_LEASE: u64 = 3600 * SECOND;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Walked out a slice at a time, sealed, opened and installed into a standby of another
    /// worker count: every connection whose directions meet on one of the standby's workers
    /// is carried on exactly as the first gateway carries it, the rest are counted as
    /// ownership skips. Every message stays within one datagram.
    #[test]
    fn a_standby_carries_the_synced_connections_on(
        conns in prop::collection::vec(conn(), 1..20),
        active_workers in 1..=4u16,
        standby_workers in 1..=4u16,
        slice in 1..300usize,
    ) {
        let conns = distinct(conns);
        let mut active = Gateway::new(home(), active_workers, WAN_ADDR);
        let checks: Vec<_> = conns.iter().map(|conn| conn.open(&mut active, SECOND)).collect();
        let walked = active.walk(slice, 2 * SECOND);
        prop_assert_eq!(walked.len(), conns.len());
        let mut sender = SyncSender::new(sync_key(), 1_700_000_000_000);
        let messages = seal_all(&mut sender, &walked);
        let mut receiver = SyncReceiver::new(sync_key());
        let mut opened = Vec::new();
        for message in &messages {
            prop_assert!(message.len() <= MAX_MESSAGE, "{} bytes", message.len());
            opened.extend(receiver.open(message).unwrap());
        }
        prop_assert_eq!(&opened, &walked);

        let mut standby = Gateway::new(home(), standby_workers, WAN_ADDR);
        let report = standby.install(&opened, SECOND, LONG_LEASE);
        let split = report.skipped(Skip::Ownership);
        prop_assert_eq!(report.restored + split, conns.len() as u64, "{:?}", report);
        if standby_workers == active_workers {
            prop_assert_eq!(split, 0);
        }
        let mut carried = 0;
        for (conn, packets) in conns.iter().zip(checks) {
            let results: Vec<_> = packets
                .iter()
                .map(|(frame, port)| (active.process(frame, *port, 3 * SECOND), standby.process(frame, *port, 3 * SECOND)))
                .collect();
            if results.iter().all(|(active, standby)| active == standby) {
                carried += 1;
                let transmitted = results
                    .iter()
                    .all(|((verdict, _), _)| matches!(verdict, Verdict::Transmit { .. }));
                prop_assert!(transmitted, "{:?}: {:?}", conn, results);
            } else {
                prop_assert!(conn.masqueraded(), "{:?} was not carried on: {:?}", conn, results);
            }
        }
        prop_assert_eq!(carried, report.restored);
    }
}

/// The standby's copy lags the connection: by takeover its sequence numbers have moved on
/// far beyond the windows the copy holds, and it passes all the same (picked up
/// mid-stream), where the first gateway's own tracking refuses so wide a jump.
#[test]
fn a_synced_tcp_connection_passes_however_far_its_sequence_numbers_moved() {
    let conn = Conn::Forward { port: 40100 };
    let mut active = Gateway::new(home(), 1, WAN_ADDR);
    conn.open(&mut active, SECOND);
    let mut standby = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(
        standby
            .install(&active.walk(64, 2 * SECOND), SECOND, LONG_LEASE)
            .restored,
        1
    );
    let moved_on = 50_000_000;
    let client = (REMOTE, 40100);
    let later = tcp(
        WAN,
        client,
        (WAN_ADDR, 8080),
        ACK | PSH,
        C_ISN + 101 + moved_on,
        S_ISN + 51 + moved_on,
        10,
    );
    let (verdict, _) = active.process(&later, WAN, 3 * SECOND);
    assert!(!matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    let (verdict, out) = standby.process(&later, WAN, 3 * SECOND);
    assert!(matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    let sliced = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(NetSlice::Ipv4(ipv4)) = sliced.net else {
        panic!("not IPv4")
    };
    assert_eq!(ipv4.header().destination(), SERVER);
}

/// No removal is ever sent: a flow the active gateway no longer refreshes runs out on the
/// standby at its lease, and its NAT port is free again; a refresh replaces the copy and
/// extends it.
#[test]
fn a_synced_flow_lives_its_lease_unless_refreshed() {
    let conn = Conn::Masquerade {
        host: 3,
        port: 40200,
    };
    let mut active = Gateway::new(home(), 1, WAN_ADDR);
    let checks = conn.open(&mut active, SECOND);
    let lease = 5 * SECOND;
    let mut standby = Gateway::new(home(), 1, WAN_ADDR);
    let walked = active.walk(64, 2 * SECOND);
    assert_eq!(standby.install(&walked, SECOND, lease).restored, 1);
    assert_eq!((standby.flows(), standby.nat_ports_in_use()), (1, 1));
    // Refreshed at 5 s: the copy is replaced (one flow, one port), its lease from then on.
    assert_eq!(standby.install(&walked, 5 * SECOND, lease).restored, 1);
    assert_eq!((standby.flows(), standby.nat_ports_in_use()), (1, 1));
    // At 9 s, past the first lease (6 s), within the refreshed one (10 s).
    standby.workers[0].housekeeping(9 * SECOND, usize::MAX);
    assert_eq!((standby.flows(), standby.nat_ports_in_use()), (1, 1));
    let (reply, port) = &checks[1];
    let (verdict, _) = standby.process(reply, *port, 9 * SECOND);
    assert!(matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    // Forwarding it refreshed it as the standby's own; no packet for longer than the
    // lease after that, and nothing refreshes it: the reply finds no flow.
    let mut standby = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(standby.install(&walked, SECOND, lease).restored, 1);
    let expired = SECOND + lease + SECOND;
    standby.workers[0].housekeeping(expired, usize::MAX);
    assert_eq!((standby.flows(), standby.nat_ports_in_use()), (0, 0));
    let (verdict, _) = standby.process(reply, *port, expired);
    assert!(!matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
}

/// A takeover renews the copies: no refresh will come for them from the dead peer, and a
/// connection idle through the takeover must still be there when it speaks again, as long
/// after as its state's timeout allows.
#[test]
fn a_takeover_renews_copies_past_their_lease() {
    let conn = Conn::Masquerade {
        host: 3,
        port: 40300,
    };
    let mut active = Gateway::new(home(), 2, WAN_ADDR);
    let checks = conn.open(&mut active, SECOND);
    let lease = 5 * SECOND;
    let mut standby = Gateway::new(home(), 2, WAN_ADDR);
    let walked = active.walk(64, 2 * SECOND);
    assert_eq!(standby.install(&walked, SECOND, lease).restored, 1);
    // A copy with less than 2 s left at the takeover (not refreshed since long enough
    // before it: the peer ended it) is left to run out; this one has 3 s left at 3 s.
    let stale = Conn::Masquerade {
        host: 4,
        port: 40301,
    };
    let stale_checks = stale.open(&mut active, SECOND);
    let walked_stale: Vec<_> = active
        .walk(64, 2 * SECOND)
        .into_iter()
        .filter(|flow| !walked.contains(flow))
        .collect();
    assert_eq!(standby.install(&walked_stale, 0, 4 * SECOND).restored, 1);
    // The takeover at 3 s, renewed a few slots at a time as the workers do.
    for worker in &mut standby.workers {
        let mut from = 0;
        loop {
            from = worker.renew_synced_copies(from, 7, 3 * SECOND, 2 * SECOND);
            if from == 0 {
                break;
            }
        }
    }
    // A minute later, far past the lease (6 s): the copy is there, and forwards.
    let idle = 63 * SECOND;
    for worker in &mut standby.workers {
        worker.housekeeping(idle, usize::MAX);
    }
    assert_eq!((standby.flows(), standby.nat_ports_in_use()), (1, 1));
    let (reply, port) = &checks[1];
    let (verdict, _) = standby.process(reply, *port, idle);
    assert!(matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    let (reply, port) = &stale_checks[1];
    let (verdict, _) = standby.process(reply, *port, idle);
    assert!(!matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
}

/// A message with flows that comes again, or altered, or from the peer's earlier run, is
/// refused before anything is installed; so are more flows than one message takes.
#[test]
fn forged_and_replayed_sync_messages_install_nothing() {
    let conns: Vec<Conn> = (0..9)
        .map(|n| Conn::Masquerade {
            host: n,
            port: 41000 + u16::from(n),
        })
        .collect();
    let mut active = Gateway::new(home(), 1, WAN_ADDR);
    for conn in &conns {
        conn.open(&mut active, SECOND);
    }
    let walked = active.walk(1024, 2 * SECOND);
    let mut earlier_run = SyncSender::new(sync_key(), 1_000);
    let from_earlier_run = earlier_run.seal(&walked[..1]).unwrap();
    let mut sender = SyncSender::new(sync_key(), 2_000);
    assert_eq!(
        sender.seal(&walked),
        Err(SealError::TooManyFlows { count: 9 })
    );
    // Eight TCP flows with bindings, the largest records: within one datagram.
    let full = sender.seal(&walked[..FLOWS_PER_MESSAGE]).unwrap();
    assert!(full.len() <= MAX_MESSAGE, "{} bytes", full.len());
    let mut receiver = SyncReceiver::new(sync_key());
    assert_eq!(receiver.open(&full).unwrap().len(), FLOWS_PER_MESSAGE);
    assert_eq!(receiver.open(&full), Err(Refusal::Replayed));
    assert_eq!(receiver.open(&from_earlier_run), Err(Refusal::StaleEpoch));
    let mut forged = sender.seal(&walked[8..]).unwrap();
    // The flow's NAT port, somewhere in the payload: any byte changed breaks the tag.
    forged[40] ^= 0x40;
    assert_eq!(receiver.open(&forged), Err(Refusal::BadTag));
    let strange_key = SyncKey::for_sender(b"somebody else's key", "192.0.2.1:7440").unwrap();
    let mut stranger = SyncSender::new(strange_key, 3_000);
    assert_eq!(
        receiver.open(&stranger.seal(&walked[8..]).unwrap()),
        Err(Refusal::BadTag)
    );
    assert_eq!(receiver.accepted(), 1);
    assert_eq!(
        Refusal::ALL
            .iter()
            .map(|&r| receiver.refused(r))
            .sum::<u64>(),
        4
    );
}

/// Both boxes sweep and install. The standby's copies are not sent back; a copy of a flow
/// the receiving box forwards itself is refused (as a duplicate) and leaves that flow as it
/// was; once the standby forwards a packet of a copy, the flow is its own: it is swept to
/// the peer from then on and the peer's copies no longer touch it.
#[test]
fn sync_runs_both_ways_without_echo_and_a_forwarded_copy_becomes_its_own() {
    let conn = Conn::Forward { port: 40300 };
    let mut active = Gateway::new(home(), 1, WAN_ADDR);
    let checks = conn.open(&mut active, SECOND);
    let mut standby = Gateway::new(home(), 1, WAN_ADDR);
    let walked = active.walk(64, 2 * SECOND);
    assert_eq!(standby.install(&walked, SECOND, LONG_LEASE).restored, 1);
    // The standby holds a copy, and sends none of it back.
    assert!(standby.walk(64, 2 * SECOND).is_empty());
    // The active box's own flow, offered back to it, is refused and left alone: its windows
    // are still judged (a wide jump refused), which a picked-up copy would not do.
    let report = active.install(&walked, 2 * SECOND, LONG_LEASE);
    assert_eq!(
        (report.restored, report.skipped(Skip::Table)),
        (0, 1),
        "{report:?}"
    );
    let jump = tcp(
        WAN,
        (REMOTE, 40300),
        (WAN_ADDR, 8080),
        ACK | PSH,
        C_ISN + 101 + 50_000_000,
        S_ISN + 51,
        10,
    );
    let (verdict, _) = active.process(&jump, WAN, 3 * SECOND);
    assert!(!matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    // The standby forwards the connection's next packet: the flow is its own now.
    let (frame, port) = &checks[0];
    let (verdict, _) = standby.process(frame, *port, 3 * SECOND);
    assert!(matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    assert_eq!(standby.walk(64, 4 * SECOND).len(), 1);
    let report = standby.install(&walked, 4 * SECOND, LONG_LEASE);
    assert_eq!(report.skipped(Skip::Table), 1, "{report:?}");
}

/// A standby's state snapshot keeps its copies as copies: restored, they are still not
/// sent back, and the peer's next copy refreshes them.
#[test]
fn a_snapshot_of_a_standby_restores_its_copies_as_copies() {
    let conn = Conn::Udp {
        host: 4,
        port: 40400,
    };
    let mut active = Gateway::new(home(), 1, WAN_ADDR);
    conn.open(&mut active, SECOND);
    let walked = active.walk(64, 2 * SECOND);
    let mut standby = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(standby.install(&walked, SECOND, LONG_LEASE).restored, 1);
    let mut restarted = Gateway::new(home(), 1, WAN_ADDR);
    assert_eq!(restarted.restore(standby.export(2 * SECOND), 0).restored, 1);
    assert!(restarted.walk(64, SECOND).is_empty());
    let report = restarted.install(&walked, 2 * SECOND, LONG_LEASE);
    assert_eq!(report.restored, 1, "{report:?}");
    assert_eq!(restarted.flows(), 1);
}

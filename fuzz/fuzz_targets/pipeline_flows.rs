//! Many packets through two workers, as the gateway runs them: a LAN (192.168.10.1/24), a
//! masqueraded WAN (10.0.0.1/24, default route via 10.0.0.2) and a routed DMZ
//! (172.16.0.1/24, 198.18.0.0/15 behind 172.16.0.254), port forwards into both inside
//! networks, content inspection on. The input is a program: open conversations between
//! hosts, send their packets either way (with choosable flags, sequence numbers, payloads and
//! fragmentation), ICMP errors about them, raw frames, time steps with housekeeping, and
//! reloads to altered configs (one worker at a time, as workers pick up a reload at their own
//! pace). A packet goes to either worker (RSS is arbitrary); a handoff goes to the other with
//! `handed_off: true`.
//!
//! Checked, besides "no panic":
//! - what arrived with valid checksums leaves with valid IP, TCP, UDP and ICMP checksums (the
//!   quoted IP header of an ICMP error too) and a total length that matches the frame;
//! - translation is invertible: while a conversation's flow lives, its packets keep the tuple
//!   they first left with, and the other side's answer to that tuple arrives as exactly the
//!   reverse of what the first side sent, on the port it came from; an ICMP error about a
//!   translated packet quotes, on arrival, what its sender sent;
//! - no NAT port is owned twice: a port the gateway puts as source on one of its addresses
//!   belongs to the class of the worker that sent it, is never a forwarded port, and stands
//!   for one internal endpoint while no flow was removed;
//! - tables stay within bounds, and once every flow has expired each worker's table is empty
//!   and every NAT binding was given back.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use gateway_fuzz::{
    check_datagram, quoted_tuple, tuple, write_frame, Bytes, Ip, Tuple, ETH_LEN, GRE, ICMP, L4,
    TCP, UDP,
};
use libfuzzer_sys::fuzz_target;
use pipeline::features::content::{ContentPolicy, DnsAction};
use pipeline::features::qos::{QosConfig, QosMode};
use pipeline::pipeline::config::{PortForward, PortMappings, Stateful};
use pipeline::state::conntrack::{ConntrackConfig, Timeouts};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::state::nat::Ownership;
use pipeline::wire::EthernetAddress;
use pipeline::{
    IcmpLimits, Ingress, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig, StaticRoute,
    Verdict, WorkerCounters, WorkerSetup,
};

const ROOM: usize = 2048;
const SECOND: u64 = 1_000_000_000;
const WORKERS: u16 = 2;
/// Small, so that full tables, eviction and NAT exhaustion are a few packets away.
const FLOWS: usize = 24;
const NAT_PORTS: std::ops::RangeInclusive<u16> = 1024..=1119;
const NAT_BINDINGS: usize = 40;
const CONVERSATIONS: usize = 8;
/// Longer than every timeout of `timeouts()`.
const FOREVER: u64 = 10_000 * SECOND;

const LAN: u16 = 0;
const WAN: u16 = 1;
const DMZ: u16 = 2;
const PORTS: u16 = 3;
const GATEWAY_ADDRS: [[u8; 4]; 3] = [[192, 168, 10, 1], [10, 0, 0, 1], [172, 16, 0, 1]];

const DMZ_ROUTER: [u8; 4] = [172, 16, 0, 254];
const UPSTREAM: [u8; 4] = [10, 0, 0, 2];

/// Hosts conversations are between, with the port they sit behind.
const HOSTS: [([u8; 4], u16); 15] = [
    ([192, 168, 10, 2], LAN),
    ([192, 168, 10, 3], LAN), // the target of most forwards
    ([192, 168, 10, 4], LAN),
    ([192, 168, 10, 9], LAN), // no neighbour entry: packets to it wait for ARP
    (UPSTREAM, WAN),
    ([10, 0, 0, 7], WAN),
    ([203, 0, 113, 5], WAN),
    ([198, 51, 100, 20], WAN),
    ([203, 0, 113, 66], WAN), // what the reject rules refuse
    ([172, 16, 0, 5], DMZ),
    ([172, 16, 0, 6], DMZ),
    ([198, 18, 0, 9], DMZ), // behind the DMZ router
    ([192, 168, 10, 1], LAN),
    ([10, 0, 0, 1], WAN),
    ([172, 16, 0, 1], DMZ),
];
const CLIENT_PORTS: [u16; 8] = [40000, 40001, 1024, 1100, 53, 8080, 1030, 0];
const SERVER_PORTS: [u16; 16] = [
    80, 443, 53, 8080, 5000, 5002, 1100, 2222, 22, 5201, 123, 1050, 0, 6000, 1200, 9000,
];

fn mac_of(ip: [u8; 4]) -> [u8; 6] {
    [0x02, 0xaa, ip[0], ip[1], ip[2], ip[3]]
}

fn gateway_mac(port: u16) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, port as u8 + 1]
}

fn ip(octets: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(octets)
}

fn timeouts() -> Timeouts {
    Timeouts {
        tcp_established_ns: 600 * SECOND,
        tcp_transitory_ns: 120 * SECOND,
        tcp_time_wait_ns: 60 * SECOND,
        tcp_close_ns: 10 * SECOND,
        udp_ns: 120 * SECOND,
        icmp_ns: 60 * SECOND,
        other_ns: 300 * SECOND,
    }
}

/// Mappings as PCP or NAT-PMP makes them (one port each), one inside the NAT range.
fn mappings() -> Vec<PortForward> {
    [
        (UDP, 1200, [192, 168, 10, 4], 1200),
        (TCP, 9000, [192, 168, 10, 3], 22),
    ]
    .into_iter()
    .map(|(protocol, port, to, to_port)| PortForward {
        interface: WAN,
        protocol,
        ports: port..=port,
        to: ip(to),
        to_port,
    })
    .collect()
}

fn forwards() -> Vec<PortForward> {
    vec![
        PortForward {
            interface: WAN,
            protocol: TCP,
            ports: 8080..=8080,
            to: ip([192, 168, 10, 3]),
            to_port: 80,
        },
        PortForward {
            interface: WAN,
            protocol: UDP,
            ports: 5000..=5002,
            to: ip([192, 168, 10, 3]),
            to_port: 6000,
        },
        // Inside the NAT range: masquerade must never hand it out.
        PortForward {
            interface: WAN,
            protocol: UDP,
            ports: 1100..=1100,
            to: ip([192, 168, 10, 4]),
            to_port: 1100,
        },
        PortForward {
            interface: WAN,
            protocol: TCP,
            ports: 2222..=2222,
            to: ip([172, 16, 0, 5]),
            to_port: 22,
        },
    ]
}

fn rule(name: &str, action: Action) -> Rule {
    Rule::matching_all(name, action)
}

/// The router config of each reload variant. The forwards, addresses and masquerade flags
/// stay: a reload that moves a forward onto a port in use legitimately re-homes its flows.
fn config(variant: usize) -> RouterConfig {
    let (lan, wan, dmz) = (ZoneId(0), ZoneId(1), ZoneId(2));
    let mut policy = Policy::new(Action::Drop)
        .set(lan, wan, Action::Accept)
        .set(lan, dmz, Action::Accept)
        .set(lan, ZoneId::LOCAL, Action::Accept)
        .set(dmz, wan, Action::Accept)
        .set(wan, dmz, Action::Accept);
    let mut rules = vec![
        Rule {
            from: Some(lan),
            dst: Some((ip([203, 0, 113, 66]), 32)),
            protocol: Some(TCP),
            ..rule("reject-tcp", Action::Reject)
        },
        Rule {
            from: Some(lan),
            dst: Some((ip([203, 0, 113, 66]), 32)),
            ..rule("reject-other", Action::Reject)
        },
        Rule {
            from: Some(wan),
            to: Some(ZoneId::LOCAL),
            protocol: Some(ICMP),
            icmp_type: Some(8),
            ..rule("ping-the-gateway", Action::Accept)
        },
    ];
    let (mut wan_mtu, mut dmz_mtu) = (1500, 1500);
    let mut content = Some(DnsAction::Nxdomain);
    let mut qos = None;
    let recheck = variant % 2 == 1;
    match variant {
        1 => {
            rules.insert(
                0,
                Rule {
                    from: Some(lan),
                    protocol: Some(UDP),
                    dst_ports: Some(53..=53),
                    ..rule("no-outside-dns", Action::Drop)
                },
            );
            (wan_mtu, dmz_mtu) = (1400, 576);
            content = None;
        }
        2 => {
            policy = policy.set(dmz, lan, Action::Accept);
            content = Some(DnsAction::Drop);
            qos = Some(QosConfig {
                uplink_bps: 2_000_000,
                downlink_bps: 8_000_000,
                burst_ms: 5,
                classes: Vec::new(),
                mode: QosMode::Policer,
            });
        }
        3 => {
            rules.insert(
                0,
                Rule {
                    src: Some((ip([192, 168, 10, 2]), 32)),
                    ..rule("quarantine", Action::Drop)
                },
            );
            wan_mtu = 576;
        }
        _ => {}
    }
    let content = content.map(|dns_action| {
        Arc::new(
            ContentPolicy::new(
                &["blocked.example".to_string()],
                &["badword".to_string()],
                Vec::new(),
                Vec::new(),
                dns_action,
                0,
            )
            .expect("the keyword policy builds"),
        )
    });
    let interfaces = [(LAN, 24, 1500), (WAN, 24, wan_mtu), (DMZ, 24, dmz_mtu)]
        .map(|(port, prefix_len, mtu)| Interface {
            mac: EthernetAddress(gateway_mac(port)),
            addr: ip(GATEWAY_ADDRS[usize::from(port)]),
            prefix_len,
            mtu,
            virtual_addr: None,
        })
        .to_vec();
    let routes = [
        StaticRoute {
            destination: Ipv4Addr::UNSPECIFIED,
            len: 0,
            via: ip(UPSTREAM),
        },
        StaticRoute {
            destination: ip([198, 18, 0, 0]),
            len: 15,
            via: ip(DMZ_ROUTER),
        },
    ];
    let icmp = IcmpLimits {
        errors_per_sec: 50,
        burst: 8,
        ..IcmpLimits::default()
    };
    RouterConfig::new(interfaces, &routes, icmp)
        .expect("the fuzz router config builds")
        .with_stateful(Stateful {
            zones: vec![lan, wan, dmz],
            masquerade: vec![false, true, false],
            firewall: RuleSet::compile(rules, policy).expect("the fuzz rules compile"),
            port_mappings: PortMappings::new(mappings()),
            port_forwards: forwards(),
            recheck_established: recheck,
            generation: variant as u32,
            content,
        })
        .expect("the fuzz stateful config fits")
        // MSS clamping on the DMZ always and on the WAN in half the variants: SYNs between
        // them get the lower clamp.
        .with_tcp_mss(&[
            None,
            (variant % 2 == 1).then_some(wan_mtu.saturating_sub(40)),
            Some(1200),
        ])
        .expect("one clamp an interface")
        .with_qos(qos)
}

struct Shared {
    configs: Vec<Arc<RouterConfig>>,
    neighbors: Arc<NeighborView>,
}

/// Built once: a route table with a default route fills 32 MiB.
fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        configs: (0..4).map(|variant| Arc::new(config(variant))).collect(),
        neighbors: Arc::new(NeighborView::new(
            HOSTS
                .iter()
                .map(|&(addr, _)| addr)
                .chain([DMZ_ROUTER])
                .filter(|&addr| addr != [192, 168, 10, 9] && !GATEWAY_ADDRS.contains(&addr))
                .map(|addr| (ip(addr), EthernetAddress(mac_of(addr)))),
        )),
    })
}

/// One exchange the input drives: `client` talks to `server` as the client addresses it.
#[derive(Clone, Copy, Debug)]
struct Conversation {
    protocol: u8,
    client: Tuple,
    client_port: u16,
    /// The client's tuple as it left the gateway, the port it left by, and the removal epoch
    /// it was seen in: valid while no flow has been removed since.
    outside: Option<(Tuple, u16, u64)>,
    /// The worker that sent the client's packet out, for the symmetry check.
    owner: u16,
    /// The last datagram (IP header on) each side received through the gateway in the
    /// current epoch, for ICMP errors about it: [to the server side, to the client side].
    seen: [Option<Seen>; 2],
    client_seq: u32,
    server_seq: u32,
}

/// A NAT port: (protocol, port). The only NAT address is the WAN's (hairpin uses the
/// interface addresses with the same ports).
type NatPort = (u8, u16);
/// Who holds it: (worker, internal address, internal port).
type NatPortHolder = (u16, Ipv4Addr, u16);

struct Harness {
    workers: Vec<Pipeline>,
    counters: Vec<Arc<WorkerCounters>>,
    /// Which config each worker runs.
    config: [usize; WORKERS as usize],
    now: u64,
    conversations: Vec<Conversation>,
    next_conversation: usize,
    /// Bumped whenever a flow may have gone (expiry, eviction, recheck): learnt mappings are
    /// only trusted within one epoch.
    epoch: u64,
    removals: u64,
    /// NAT ports seen on the gateway's addresses this epoch.
    nat_ports: Vec<(NatPort, NatPortHolder)>,
    ownership: Ownership,
    buf: [u8; ROOM],
}

/// What happened to one packet once handoffs were followed.
struct Outcome {
    verdict: Verdict,
    /// The worker that gave the final verdict.
    worker: u16,
    len: usize,
}

impl Harness {
    fn new() -> Harness {
        let shared = shared();
        let counters: Vec<Arc<WorkerCounters>> = (0..WORKERS)
            .map(|_| Arc::new(WorkerCounters::default()))
            .collect();
        let workers = (0..WORKERS)
            .map(|worker| {
                let setup = WorkerSetup {
                    worker,
                    workers: WORKERS,
                    conntrack: ConntrackConfig {
                        capacity: FLOWS,
                        timeouts: timeouts(),
                        tcp_loose: worker == 1,
                        // Worker 0's half-open table fills after a few SYNs, so that its
                        // SYN proxy answers for the forwards (cookies, splices).
                        half_open: if worker == 0 { 4 } else { FLOWS },
                        ..ConntrackConfig::default()
                    },
                    nat_ports: NAT_PORTS,
                    nat_bindings: NAT_BINDINGS,
                    // Worker 1 hands its ports out by blocks (one per host, all 48 of its
                    // ports), worker 0 port by port.
                    nat_host_ports: if worker == 1 { 64 } else { 4096 },
                    nat_port_block_size: if worker == 1 { 64 } else { 0 },
                    meter: Some(Arc::new(pipeline::features::meter::HostMeter::new(16))),
                    ..WorkerSetup::default()
                };
                let mut pipeline = Pipeline::for_worker(
                    shared.configs[0].clone(),
                    shared.neighbors.clone(),
                    counters[usize::from(worker)].clone(),
                    setup,
                )
                .expect("the fuzz workers build");
                pipeline.set_wall_clock(1_700_000_000, 0);
                pipeline
            })
            .collect();
        Harness {
            workers,
            counters,
            config: [0; WORKERS as usize],
            now: SECOND,
            conversations: Vec::with_capacity(CONVERSATIONS),
            next_conversation: 0,
            epoch: 0,
            removals: 0,
            nat_ports: Vec::new(),
            ownership: Ownership::new(WORKERS),
            buf: [0xa5; ROOM],
        }
    }

    /// Runs the frame in `self.buf[..len]` through worker `worker`, following a handoff.
    fn process(&mut self, len: usize, port: u16, worker: u16) -> Outcome {
        let ingress_port = port;
        // A router forwards a bad transport checksum as it came (NAT patches it, keeping it
        // bad); only what arrived valid must leave valid.
        let arrived_valid = check_datagram(&self.buf[..len]).is_ok();
        let mut pkt = PacketBuf::new(&mut self.buf, len);
        let ingress = Ingress {
            port,
            handed_off: false,
        };
        let mut verdict =
            self.workers[usize::from(worker)].process_from(&mut pkt, ingress, self.now);
        let mut worker = worker;
        if let Verdict::Handoff { worker: owner } = verdict {
            assert!(
                owner < WORKERS && owner != worker,
                "handoff to {owner} from {worker}"
            );
            worker = owner;
            let ingress = Ingress {
                port,
                handed_off: true,
            };
            verdict = self.workers[usize::from(owner)].process_from(&mut pkt, ingress, self.now);
            assert!(
                !matches!(verdict, Verdict::Handoff { .. }),
                "a handed-off packet was handed off again"
            );
        }
        let len = pkt.len();
        assert!(len <= ROOM);
        for pipeline in &mut self.workers {
            // Budget 0: publishes the table gauges, removes nothing.
            pipeline.housekeeping(self.now, 0);
            assert!(pipeline.flow_count() <= FLOWS, "flow table over capacity");
        }
        self.note_removals();
        if let Verdict::Transmit { port } | Verdict::Fragment { port } = verdict {
            count(Check::Transmitted);
            if arrived_valid {
                count(Check::ChecksumsVerified);
            }
            assert!(port < PORTS, "transmit on port {port}");
            let frame = &self.buf[..len];
            assert_eq!(
                &frame[6..12],
                &gateway_mac(port),
                "source MAC of port {port}"
            );
            if let (true, Err(what)) = (arrived_valid, check_datagram(frame)) {
                panic!("transmitted a bad datagram ({what}) on port {port}: {verdict:?}");
            }
            let router = self.workers[usize::from(worker)].router();
            if let (Some(mss), Some(limit)) = (syn_mss(frame), router.mss_limit(ingress_port, port))
            {
                count(Check::MssClamped);
                assert!(
                    mss <= limit,
                    "a SYN left by port {port} announcing MSS {mss} over {limit}"
                );
            }
        }
        Outcome {
            verdict,
            worker,
            len,
        }
    }

    /// Starts a new epoch if any flow was removed since the last look.
    fn note_removals(&mut self) {
        // However a flow goes (expiry, eviction, recheck, a reopened port), it was set up and
        // is no longer there.
        let removals: u64 = self
            .counters
            .iter()
            .map(|c| c.conntrack_setups.get() - c.conntrack_entries.get())
            .sum();
        if removals != self.removals {
            self.removals = removals;
            self.epoch += 1;
            self.nat_ports.clear();
        }
    }

    /// A transmitted packet whose source is one of the gateway's addresses and carries a port
    /// (or ICMP query identifier) was given a NAT port: it must be one the sending worker
    /// owns, not a forwarded one, and stand for one internal endpoint.
    fn check_nat_port(&mut self, out: Tuple, internal: Tuple, worker: u16, config: usize) {
        if !GATEWAY_ADDRS.contains(&out.src.octets())
            || !matches!(out.protocol, TCP | UDP | ICMP)
            || (out.src, out.src_port) == (internal.src, internal.src_port)
        {
            return;
        }
        let router = &shared().configs[config];
        // A forward's reply leaves from the forwarded port.
        if router
            .stateful
            .port_forwards
            .iter()
            .any(|f| f.protocol == out.protocol && f.ports.contains(&out.src_port))
            && out.protocol != ICMP
        {
            return;
        }
        assert!(
            NAT_PORTS.contains(&out.src_port),
            "NAT port {} outside the range: {out:?} from {internal:?}",
            out.src_port
        );
        assert_eq!(
            self.ownership.port_owner(out.src_port),
            worker,
            "worker {worker} sent NAT port {} of another worker's class: {out:?}",
            out.src_port
        );
        count(Check::NatPortOwned);
        let key = (out.protocol, out.src_port);
        let value = (worker, internal.src, internal.src_port);
        match self.nat_ports.iter().find(|(k, _)| *k == key) {
            Some((_, seen)) => assert_eq!(
                *seen, value,
                "NAT port {key:?} stands for two internal endpoints at once"
            ),
            None => self.nat_ports.push((key, value)),
        }
    }

    fn worker_config(&self, worker: u16) -> usize {
        self.config[usize::from(worker)]
    }
}

/// Frame layout choices for a conversation packet.
struct Shape {
    flags: u8,
    payload: &'static [u8],
    fragment: u8,
    dont_frag: bool,
    ttl: u8,
}

const PAYLOADS: [&[u8]; 8] = [
    b"",
    b"GET / HTTP/1.1\r\nHost: blocked.example\r\n\r\n",
    b"GET /page HTTP/1.1\r\nHost: fine.example\r\nUser-Agent: fuzz\r\n\r\n",
    b"GET /badword HTTP/1.1\r\n",
    // A TLS ClientHello head naming blocked.example (SNI), cut short.
    b"\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x00\x00\x02\x13\x01\x01\x00\x00\x14\x00\x00\x00\x10\x00\x0e\x00\x00\x0bblocked.example",
    // A DNS query for blocked.example.
    b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07blocked\x07example\x00\x00\x01\x00\x01",
    b"\x12\x35\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04fine\x07example\x00\x00\x01\x00\x01",
    &[0x5a; 1460],
];

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

fn shape(input: &mut Bytes) -> Shape {
    let choice = input.u8();
    Shape {
        flags: input.pick(&[
            ACK,
            ACK | PSH,
            SYN,
            SYN | ACK,
            FIN | ACK,
            RST,
            RST | ACK,
            input_flags(),
        ]),
        payload: PAYLOADS[usize::from(choice & 7)],
        fragment: (choice >> 3) & 3,
        dont_frag: choice & 0x20 != 0,
        ttl: if choice & 0xc0 == 0xc0 { 1 } else { 64 },
    }
}

/// A flags byte that is rarely valid: SYN|FIN|RST and friends.
const fn input_flags() -> u8 {
    SYN | FIN | RST | PSH | ACK | 0x20
}

/// Writes a conversation packet from `src` to `dst` (as the sender addresses it) into `buf`.
#[allow(clippy::too_many_arguments)]
fn write_packet(
    buf: &mut [u8],
    eth_dst: [u8; 6],
    t: Tuple,
    shape: &Shape,
    seq: u32,
    ack: u32,
    ident: u16,
    from_client: bool,
) -> usize {
    let mut header = Ip::new(t.src, t.dst, t.protocol);
    header.ttl = shape.ttl;
    header.ident = ident;
    header.dont_frag = shape.dont_frag;
    match shape.fragment {
        1 => header.more_frags = true,
        2 => header.frag_offset = 185,
        3 => {
            header.frag_offset = 185;
            header.more_frags = true;
        }
        _ => {}
    }
    let l4 = match t.protocol {
        ICMP => L4 {
            // Echo requests from the client, replies from the server; a RST swaps them.
            icmp_type: if from_client != (shape.flags == RST) {
                8
            } else {
                0
            },
            icmp_rest: (u32::from(t.src_port) << 16) | (seq & 0xffff),
            ..L4::default()
        },
        _ => L4 {
            src_port: t.src_port,
            dst_port: t.dst_port,
            seq,
            ack: if shape.flags & ACK != 0 { ack } else { 0 },
            flags: shape.flags,
            window: 0xffff,
            // SYNs in both option layouts, most with an MSS some interface clamps.
            window_scale: (shape.flags & SYN != 0 && seq & 1 == 0).then_some(7),
            mss: (shape.flags & SYN != 0 && seq & 2 == 0).then_some(if seq & 4 == 0 {
                1460
            } else {
                8960
            }),
            ..L4::default()
        },
    };
    let payload = match t.protocol {
        TCP | UDP | ICMP if shape.fragment < 2 => shape.payload,
        _ => &shape.payload[..shape.payload.len().min(64)],
    };
    write_frame(
        buf,
        (eth_dst, mac_of(t.src.octets())),
        &header,
        &l4,
        payload,
    )
}

/// The head of a datagram one side received, and the epoch it was received in.
#[derive(Clone, Copy, Debug)]
struct Seen {
    head: [u8; 64],
    len: usize,
    epoch: u64,
}

fn remember(seen: &mut Option<Seen>, datagram: &[u8], epoch: u64) {
    let mut head = [0u8; 64];
    let len = datagram.len().min(64);
    head[..len].copy_from_slice(&datagram[..len]);
    *seen = Some(Seen { head, len, epoch });
}

impl Harness {
    fn new_conversation(&mut self, input: &mut Bytes) {
        let (client, client_port) = input.pick(&HOSTS);
        let (server, _) = input.pick(&HOSTS);
        let protocol = input.pick(&[TCP, TCP, UDP, UDP, ICMP, GRE]);
        let mut src_port = input.pick(&CLIENT_PORTS);
        let mut dst_port = input.pick(&SERVER_PORTS);
        if src_port == 0 {
            src_port = input.u16();
        }
        if dst_port == 0 {
            dst_port = input.u16();
        }
        let (src_port, dst_port) = match protocol {
            ICMP => (src_port, src_port),
            GRE => (0, 0),
            _ => (src_port, dst_port),
        };
        let conversation = Conversation {
            protocol,
            client: Tuple {
                src: ip(client),
                dst: ip(server),
                protocol,
                src_port,
                dst_port,
            },
            client_port,
            outside: None,
            owner: 0,
            seen: [None, None],
            client_seq: input.u32(),
            server_seq: input.u32(),
        };
        let index = if self.conversations.len() < CONVERSATIONS {
            self.conversations.push(conversation);
            self.conversations.len() - 1
        } else {
            let index = self.next_conversation;
            self.conversations[index] = conversation;
            self.next_conversation = (index + 1) % CONVERSATIONS;
            index
        };
        // Its opening packet: a SYN for TCP, an echo request for ICMP.
        let first = Shape {
            flags: SYN,
            payload: b"",
            fragment: 0,
            dont_frag: true,
            ttl: 64,
        };
        let worker = input.u8() as u16 % WORKERS;
        self.send_from_client(index, &first, 0, worker);
    }

    /// A packet of conversation `index` from its client. Once it leaves, it is what the
    /// server side sees; it must leave as every earlier one did while the flow lives.
    fn send_from_client(&mut self, index: usize, shape: &Shape, seq_skew: u32, worker: u16) {
        let mut c = self.conversations[index];
        let seq = c.client_seq.wrapping_add(seq_skew);
        let len = write_packet(
            &mut self.buf,
            gateway_mac(c.client_port),
            c.client,
            shape,
            seq,
            c.server_seq,
            (seq as u16) ^ 0x5555,
            true,
        );
        if len == 0 {
            return;
        }
        advance(&mut c.client_seq, shape, seq_skew);
        let outcome = self.process(len, c.client_port, worker);
        if let Verdict::Transmit { port } = outcome.verdict {
            let datagram = &self.buf[ETH_LEN..outcome.len];
            let config = self.worker_config(outcome.worker);
            match tuple(datagram) {
                Some(out) if shape.fragment < 2 && is_forwarded_copy(&c, out) => {
                    match c.outside {
                        Some((seen, seen_port, epoch)) if epoch == self.epoch => {
                            count(Check::StableTranslation);
                            assert_eq!(out, seen, "a live flow's packet left translated otherwise");
                            assert_eq!(
                                port, seen_port,
                                "a live flow's packet left by another port"
                            );
                        }
                        _ => {
                            c.outside = Some((out, port, self.epoch));
                            c.owner = outcome.worker;
                        }
                    }
                    remember(&mut c.seen[0], datagram, self.epoch);
                    self.check_nat_port(out, c.client, outcome.worker, config);
                }
                _ => {}
            }
        }
        self.conversations[index] = c;
    }

    /// A packet of conversation `index` from its server, to the tuple the client's packets
    /// left with: it must arrive as the exact reverse of what the client sent.
    fn send_from_server(&mut self, index: usize, shape: &Shape, seq_skew: u32, worker: u16) {
        let mut c = self.conversations[index];
        let Some((outside, out_port, epoch)) = c.outside else {
            return;
        };
        let seq = c.server_seq.wrapping_add(seq_skew);
        let len = write_packet(
            &mut self.buf,
            gateway_mac(out_port),
            outside.reversed(),
            shape,
            seq,
            c.client_seq,
            (seq as u16) ^ 0x2222,
            false,
        );
        if len == 0 {
            return;
        }
        advance(&mut c.server_seq, shape, seq_skew);
        let outcome = self.process(len, out_port, worker);
        if let Verdict::Transmit { port } = outcome.verdict {
            let datagram = &self.buf[ETH_LEN..outcome.len];
            match tuple(datagram) {
                Some(arrived)
                    if epoch == self.epoch
                        && shape.fragment < 2
                        && !is_generated(arrived, &outside.reversed()) =>
                {
                    assert_eq!(
                        arrived,
                        c.client.reversed(),
                        "the answer to a translated tuple did not translate back: {c:?}"
                    );
                    assert_eq!(port, c.client_port, "the answer left by another port");
                    assert!(
                        outcome.worker == c.owner,
                        "the answer was handled by worker {}, the flow by {}: {c:?}",
                        outcome.worker,
                        c.owner
                    );
                    count(Check::AnswerTranslatedBack);
                    remember(&mut c.seen[1], datagram, self.epoch);
                }
                _ => {}
            }
        }
        self.conversations[index] = c;
    }

    /// An ICMP error about the last datagram one side received, from that side (or a router
    /// on its path): if the gateway passes it on, it must reach the other side quoting what
    /// that side sent.
    fn icmp_error(&mut self, index: usize, input: &mut Bytes) {
        let c = self.conversations[index];
        let from_server = input.bool();
        let Some(seen) = c.seen[usize::from(!from_server)] else {
            return;
        };
        let Some((outside, out_port, _)) = c.outside else {
            return;
        };
        let (icmp_type, icmp_code, rest) = input.pick(&[
            (3u8, 3u8, 0u32),
            (3, 1, 0),
            (3, 4, 1280),
            (11, 0, 0),
            (3, 13, 0),
        ]);
        let quoted = &seen.head[..seen
            .len
            .min(20 + usize::from(input.pick(&[8u8, 8, 4, 0, 44])))];
        let quote_len = quoted.len();
        // The error's sender: the receiver itself, or a router before it.
        let (receiver, port) = if from_server {
            (outside.dst, out_port)
        } else {
            (c.client.src, c.client_port)
        };
        let sender = match input.u8() % 3 {
            0 => receiver,
            1 if from_server => ip(UPSTREAM),
            1 => ip([192, 168, 10, 4]),
            _ => ip([198, 51, 100, 9]),
        };
        let quoted_src = tuple(quoted).map(|t| t.src);
        let Some(error_dst) = quoted_src else { return };
        let header = Ip::new(sender, error_dst, ICMP);
        let l4 = L4 {
            icmp_type,
            icmp_code,
            icmp_rest: rest,
            ..L4::default()
        };
        let len = write_frame(
            &mut self.buf,
            (gateway_mac(port), mac_of(sender.octets())),
            &header,
            &l4,
            quoted,
        );
        let worker = input.u8() as u16 % WORKERS;
        let outcome = self.process(len, port, worker);
        if let Verdict::Transmit { port: egress } = outcome.verdict {
            let frame = &self.buf[..outcome.len];
            let quoted = quoted_tuple(frame);
            let Some(quoted) = quoted else { return };
            if seen.epoch != self.epoch || quote_len < 28 {
                return;
            }
            // The sent side of the erroring datagram, before the gateway translated it.
            let (original, expected_port) = if from_server {
                (c.client, c.client_port)
            } else {
                (outside.reversed(), out_port)
            };
            assert_eq!(
                quoted, original,
                "an ICMP error quotes a tuple its receiver never sent"
            );
            assert_eq!(
                egress, expected_port,
                "an ICMP error left by the wrong port"
            );
            let outer_dst = Ipv4Addr::from(<[u8; 4]>::try_from(&frame[30..34]).expect("4 bytes"));
            assert_eq!(
                outer_dst, original.src,
                "an ICMP error went to someone else"
            );
            count(Check::IcmpErrorTranslatedBack);
        }
    }

    fn raw_frame(&mut self, input: &mut Bytes) {
        let control = input.u8();
        let port = u16::from(control) % (PORTS + 1);
        let worker = u16::from(control >> 2) % WORKERS;
        let bytes = input.slice(ROOM);
        self.buf[..bytes.len()].copy_from_slice(bytes);
        // Captured frames carry the lab's MACs: make them ours, most of the time.
        if control & 0x80 == 0 && bytes.len() >= 6 {
            self.buf[..6].copy_from_slice(&gateway_mac(port.min(PORTS - 1)));
        }
        let _ = self.process(bytes.len(), port, worker);
    }

    fn step_time(&mut self, input: &mut Bytes) {
        let any = u64::from(input.u16()) * (SECOND / 100);
        let step = input.pick(&[
            SECOND / 1000,
            SECOND,
            11 * SECOND,
            61 * SECOND,
            121 * SECOND,
            301 * SECOND,
            601 * SECOND,
            any,
        ]);
        self.now += step;
        let budget = usize::from(input.u8() % 32);
        for pipeline in &mut self.workers {
            pipeline.housekeeping(self.now, budget);
            assert!(pipeline.flow_count() <= FLOWS);
        }
        self.note_removals();
    }

    fn reload(&mut self, input: &mut Bytes) {
        let choice = input.u8();
        let variant = usize::from(choice & 3);
        let configs = &shared().configs;
        for (worker, pipeline) in self.workers.iter_mut().enumerate() {
            if choice & (0x10 << worker) == 0 {
                pipeline.set_router(configs[variant].clone());
                self.config[worker] = variant;
            }
        }
    }

    /// Every flow times out: nothing may stay behind, in the tables or the NAT pools.
    fn drain(&mut self) {
        self.now += FOREVER;
        for (worker, pipeline) in self.workers.iter_mut().enumerate() {
            pipeline.housekeeping(self.now, FLOWS);
            assert_eq!(
                pipeline.flow_count(),
                0,
                "worker {worker} kept flows past their timeout"
            );
            let counters = &self.counters[worker];
            assert_eq!(
                counters.nat_ports_in_use.get(),
                0,
                "worker {worker} kept NAT bindings of expired flows"
            );
        }
    }
}

/// Whether `out` (what left the gateway) is the conversation's own packet, not something the
/// gateway generated in its place (a reset, an ICMP error, a DNS answer).
fn is_forwarded_copy(c: &Conversation, out: Tuple) -> bool {
    out.protocol == c.protocol && out.dst != c.client.src
}

/// Whether what left is the gateway's own answer to `sent` (an ICMP error about it, a reset
/// or a DNS answer) rather than `sent` itself, translated.
fn is_generated(out: Tuple, sent: &Tuple) -> bool {
    out.protocol != sent.protocol || out.dst == sent.src
}

fn advance(seq: &mut u32, shape: &Shape, skew: u32) {
    if skew != 0 {
        return;
    }
    let mut len = shape.payload.len() as u32;
    if shape.flags & (SYN | FIN) != 0 {
        len += 1;
    }
    *seq = seq.wrapping_add(len);
}

thread_local! {
    /// Reused from one input to the next: building two workers costs more than running most
    /// inputs (their content inspectors alone are over 1 MiB). Every input ends with all flows
    /// expired and all bindings returned (checked), so the next starts from empty tables.
    /// `FUZZ_FRESH=1` builds new workers for every input, to replay a crash from scratch.
    static HARNESS: std::cell::RefCell<Option<Harness>> = const { std::cell::RefCell::new(None) };
}

/// Far from where `now` would overflow, even after the largest time steps of an input.
const REBUILD_AFTER_NS: u64 = 1 << 62;

/// How often each check ran, so a campaign can show its invariants were not vacuous:
/// FUZZ_STATS=1 prints them every 1,000 inputs (e.g. over a corpus with -runs=0).
#[derive(Clone, Copy)]
enum Check {
    Transmitted,
    ChecksumsVerified,
    StableTranslation,
    AnswerTranslatedBack,
    IcmpErrorTranslatedBack,
    NatPortOwned,
    Drained,
    MssClamped,
}

static CHECKS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];
const CHECK_NAMES: [&str; 8] = [
    "transmitted",
    "checksums verified",
    "stable translation",
    "answer translated back",
    "ICMP error translated back",
    "NAT port owned",
    "drained",
    "SYN's MSS within the clamp",
];

/// The MSS option of a TCP SYN (or SYN-ACK) in an Ethernet + IPv4 `frame`, if it has one:
/// the harness's own walk of the options, independent of the pipeline's.
fn syn_mss(frame: &[u8]) -> Option<u16> {
    let ip = frame.get(ETH_LEN..)?;
    let ip_header_len = usize::from(ip.first()? & 0x0f) * 4;
    let not_first_fragment = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]) & 0x1fff != 0;
    if *ip.get(9)? != TCP || not_first_fragment {
        return None;
    }
    let segment = ip.get(ip_header_len..)?;
    if segment.get(13)? & SYN == 0 {
        return None;
    }
    let options = segment.get(20..usize::from(segment.get(12)? >> 4) * 4)?;
    let mut at = 0;
    while at < options.len() {
        match options[at] {
            0 => return None,
            1 => at += 1,
            kind => {
                let len = usize::from(*options.get(at + 1)?);
                if kind == 2 && len == 4 {
                    return Some(u16::from_be_bytes([
                        *options.get(at + 2)?,
                        *options.get(at + 3)?,
                    ]));
                }
                if len < 2 {
                    return None;
                }
                at += len;
            }
        }
    }
    None
}

fn count(check: Check) {
    CHECKS[check as usize].fetch_add(1, Relaxed);
}

fn report_checks() {
    static STATS: OnceLock<bool> = OnceLock::new();
    static INPUTS: AtomicU64 = AtomicU64::new(0);
    if !*STATS.get_or_init(|| std::env::var_os("FUZZ_STATS").is_some_and(|v| v == "1")) {
        return;
    }
    let inputs = INPUTS.fetch_add(1, Relaxed) + 1;
    if inputs.is_multiple_of(1000) {
        let counts: Vec<String> = CHECKS
            .iter()
            .zip(CHECK_NAMES)
            .map(|(n, name)| format!("{name} {}", n.load(Relaxed)))
            .collect();
        eprintln!("checks after {inputs} inputs: {}", counts.join(", "));
    }
}

fn fresh() -> bool {
    static FRESH: OnceLock<bool> = OnceLock::new();
    *FRESH.get_or_init(|| std::env::var_os("FUZZ_FRESH").is_some_and(|v| v == "1"))
}

impl Harness {
    /// Back to the first config, with nothing remembered from the previous input.
    fn reset(&mut self) {
        for pipeline in &mut self.workers {
            pipeline.set_router(shared().configs[0].clone());
        }
        self.config = [0; WORKERS as usize];
        self.conversations.clear();
        self.next_conversation = 0;
        self.nat_ports.clear();
        self.epoch += 1;
        self.note_removals();
    }
}

fn run(data: &[u8]) {
    HARNESS.with(|cell| {
        let mut cell = cell.borrow_mut();
        if fresh() || cell.as_ref().is_none_or(|h| h.now > REBUILD_AFTER_NS) {
            *cell = Some(Harness::new());
        }
        let harness = cell.as_mut().expect("just built");
        harness.reset();
        run_program(harness, data);
    });
}

fn run_program(harness: &mut Harness, data: &[u8]) {
    let mut input = Bytes::new(data);
    let mut steps = 0;
    while !input.is_empty() && steps < 256 {
        steps += 1;
        let op = input.u8();
        let count = harness.conversations.len();
        match op % 8 {
            0 => harness.new_conversation(&mut input),
            1..=3 if count > 0 => {
                let index = usize::from(input.u8()) % count;
                let shape = shape(&mut input);
                let skew = match input.u8() {
                    0..=191 => 0,
                    192..=223 => 1u32.wrapping_sub(u32::from(input.u8())),
                    _ => input.u32(),
                };
                let worker = u16::from(op >> 7);
                if op % 8 == 1 {
                    harness.send_from_client(index, &shape, skew, worker);
                } else {
                    harness.send_from_server(index, &shape, skew, worker);
                }
            }
            4 if count > 0 => {
                let index = usize::from(input.u8()) % count;
                harness.icmp_error(index, &mut input);
            }
            5 => harness.raw_frame(&mut input),
            6 => harness.step_time(&mut input),
            7 => harness.reload(&mut input),
            _ => {}
        }
    }
    harness.drain();
    count(Check::Drained);
    report_checks();
}

fuzz_target!(|data: &[u8]| run(data));

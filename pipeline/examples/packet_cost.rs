//! What a packet costs the pipeline, without DPDK, so that valgrind can count it to the
//! instruction on a noisy machine: `packet_cost FLOWS PACKETS KIND EVERY`. Established UDP
//! flows through masquerade (outbound and reply, as `gateway bench` sends them) run for
//! PACKETS packets; every EVERY-th packet (0: none) is instead one of KIND:
//! - `syn`: a SYN from a random (spoofed) source at a TCP port forward;
//! - `new`: the first packet of a new UDP flow from a LAN host through masquerade;
//! - `handoff`: a packet of a flow another worker owns (this pipeline is worker 0 of 2, the
//!   established flows are its own): what the receiving worker spends deciding to hand it
//!   off. The owner then processes it as any other packet.
//! - `features`: no other packets (EVERY is ignored); the established flows run with QoS
//!   and the traffic meter on, as in `gateway bench`'s "+ all features" rows (keyword block
//!   and parental control decide a flow once, at its set-up).
//! - `ipv6`: no other packets (EVERY is ignored); the established flows are IPv6 UDP flows
//!   through the stateful firewall (no NAT66), out and reply, as `forward6` takes them.
//! - `uplinks`: no other packets (EVERY is ignored); the established flows leave by two
//!   uplinks (weights 2:1, each masquerading to its own address, replies on each), as
//!   `pipeline::pipeline::uplinks` shares them.
//! - `uplinks-new`: as `new`, with the two uplinks: what choosing a flow's uplink adds.
//!
//! `scripts/instructions.sh` runs it under `valgrind --tool=callgrind` at two lengths and
//! reports the difference over the packets between them: instructions per packet, free of
//! set-up costs. Run alone, it prints nanoseconds per packet (noisy, for a first look).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Instant;

use etherparse::PacketBuilder;
use pipeline::features::meter::HostMeter;
use pipeline::features::qos::{Class, ClassRule, QosConfig, QosMode};
use pipeline::pipeline::config::{Ipv6Interface, PortForward, Stateful, StaticRoute6};
use pipeline::pipeline::uplinks::{Uplink, UplinkHash, Uplinks};
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::wire::ipv6::link_local;
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig,
    StaticRoute, Verdict, WorkerCounters, WorkerSetup,
};

const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const UPSTREAM_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xff, 0x01];
const WAN_ADDR: [u8; 4] = [100, 64, 0, 1];
const UPSTREAM: [u8; 4] = [100, 64, 0, 2];
// The second uplink, with the `uplinks` kinds.
const WAN2_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x03];
const UPSTREAM2_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xff, 0x02];
const WAN2_ADDR: [u8; 4] = [100, 64, 1, 1];
const UPSTREAM2: [u8; 4] = [100, 64, 1, 2];
const HOSTS: u32 = 1000;
const FORWARDED_PORT: u16 = 8080;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Syn,
    NewFlow,
    Handoff,
    Features,
    Ipv6,
    Uplinks,
    UplinksNew,
}

impl Kind {
    /// SYNs come from the WAN, new flows from the LAN.
    fn ingress(self) -> u16 {
        match self {
            Kind::Syn => 1,
            Kind::NewFlow
            | Kind::Handoff
            | Kind::Features
            | Kind::Ipv6
            | Kind::Uplinks
            | Kind::UplinksNew => 0,
        }
    }
}

fn host(h: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0100 + h)
}

fn host_mac(h: u32) -> [u8; 6] {
    let [_, _, a, b] = h.to_be_bytes();
    [0x02, 0x10, 0, 0, a, b]
}

fn remote(flow: u32) -> Ipv4Addr {
    Ipv4Addr::from(0xc612_0000 + flow / HOSTS)
}

/// QoS as `gateway bench` sets it: a rate no traffic reaches, one priority rule.
fn qos() -> QosConfig {
    QosConfig {
        uplink_bps: 1_000_000_000_000,
        downlink_bps: 1_000_000_000_000,
        burst_ms: 20,
        classes: vec![ClassRule::new(Class::Priority)
            .with_protocol(17)
            .with_ports(5060, 5061)],
        mode: QosMode::Policer,
    }
}

fn host6(h: u32) -> Ipv6Addr {
    Ipv6Addr::from(0x2001_0db8_0010_0000_0000_0000_0000_0000u128 + u128::from(h) + 2)
}

fn remote6(flow: u32) -> Ipv6Addr {
    Ipv6Addr::from(0x2001_0db8_c612_0000_0000_0000_0000_0000u128 + u128::from(flow / HOSTS))
}

const GATEWAY6_LAN: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, 1);
const GATEWAY6_WAN: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
const UPSTREAM6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);

/// `router(false, false)` with IPv6 on both interfaces and an IPv6 default route via the upstream.
fn router6() -> Arc<RouterConfig> {
    let side = |mac, addr| {
        Some(Ipv6Interface {
            link_local: link_local(EthernetAddress(mac)),
            addresses: vec![(addr, 64)],
            advertise: None,
            autoconfigure: false,
        })
    };
    let default_route = StaticRoute6 {
        destination: Ipv6Addr::UNSPECIFIED,
        len: 0,
        via: UPSTREAM6,
        port: 1,
    };
    let router = Arc::try_unwrap(router(false, false)).expect("a new config");
    Arc::new(
        router
            .with_ipv6(
                vec![side(LAN_MAC, GATEWAY6_LAN), side(WAN_MAC, GATEWAY6_WAN)],
                &[default_route],
            )
            .unwrap(),
    )
}

fn udp6(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv6(src.octets(), dst.octets(), 64)
        .udp(5000, 443)
        .write(&mut out, &[0; 18])
        .unwrap();
    out
}

/// The `ipv6` kind: established IPv6 flows, out and reply.
fn run_ipv6(flows: u32, packets: u64) {
    let neighbors = NeighborView::new([]).with_ipv6(
        (0..HOSTS)
            .map(|h| (host6(h), EthernetAddress(host_mac(h))))
            .chain([(UPSTREAM6, EthernetAddress(UPSTREAM_MAC))]),
    );
    // The IPv6 table is a quarter of conntrack.capacity: room for every flow in it.
    let capacity = (4 * (flows as usize + flows as usize / 2)).next_power_of_two();
    let counters = Arc::new(WorkerCounters::default());
    let mut pipeline = Pipeline::for_worker(
        router6(),
        Arc::new(neighbors),
        counters.clone(),
        WorkerSetup {
            conntrack: ConntrackConfig {
                capacity,
                host_flows: capacity as u32,
                half_open: capacity / 16,
                ..ConntrackConfig::default()
            },
            ..WorkerSetup::default()
        },
    )
    .unwrap();
    let outbound: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            let h = f % HOSTS;
            udp6(host_mac(h), LAN_MAC, host6(h), remote6(f))
        })
        .collect();
    // The remote's answer carries the flow's ports reversed.
    let replies: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            let mut out = Vec::new();
            PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
                .ipv6(remote6(f).octets(), host6(f % HOSTS).octets(), 64)
                .udp(443, 5000)
                .write(&mut out, &[0; 18])
                .unwrap();
            out
        })
        .collect();
    let mut room = vec![0u8; 2048];
    for frame in &outbound {
        let verdict = process(&mut pipeline, frame, 0, &mut room);
        assert!(matches!(verdict, Verdict::Transmit { .. }), "{verdict:?}");
    }
    let start = Instant::now();
    let reply_ports = vec![1; replies.len()];
    let replies = (&replies[..], &reply_ports[..]);
    let (forwarded, _) = measure(&mut pipeline, &outbound, replies, (&[], 0), packets, 0);
    let elapsed = start.elapsed();
    println!(
        "{packets} IPv6 packets, {forwarded} forwarded, {:.1} ns/packet",
        elapsed.as_nanos() as f64 / packets as f64
    );
    assert_eq!(forwarded, packets, "every IPv6 packet forwarded");
}

fn router(features: bool, uplinks: bool) -> Arc<RouterConfig> {
    let mut interfaces = vec![
        Interface {
            mac: EthernetAddress(LAN_MAC),
            addr: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 16,
            mtu: 1500,
            virtual_addr: None,
        },
        Interface {
            mac: EthernetAddress(WAN_MAC),
            addr: Ipv4Addr::from(WAN_ADDR),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
    ];
    let default_route = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: Ipv4Addr::from(UPSTREAM),
    };
    if uplinks {
        interfaces.push(Interface {
            mac: EthernetAddress(WAN2_MAC),
            addr: Ipv4Addr::from(WAN2_ADDR),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        });
    }
    let policy = Policy::new(Action::Drop).set(ZoneId(0), ZoneId(1), Action::Accept);
    let (mut zones, mut masquerade) = (vec![ZoneId(0), ZoneId(1)], vec![false, true]);
    if uplinks {
        zones.push(ZoneId(1));
        masquerade.push(true);
    }
    let shared = |port, gateway: [u8; 4], weight| Uplink {
        port,
        gateway: Some(Ipv4Addr::from(gateway)),
        weight,
        priority: 0,
        up: true,
    };
    let uplinks = match uplinks {
        true => vec![shared(1, UPSTREAM, 2), shared(2, UPSTREAM2, 1)],
        false => Vec::new(),
    };
    let ports = interfaces.len();
    let stateful = Stateful {
        content: None,
        zones,
        masquerade,
        firewall: RuleSet::compile(Vec::new(), policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: vec![PortForward {
            interface: 1,
            protocol: 6,
            ports: FORWARDED_PORT..=FORWARDED_PORT,
            to: host(0),
            to_port: 80,
        }],
        recheck_established: false,
        generation: 0,
    };
    Arc::new(
        RouterConfig::new(interfaces, &[default_route], IcmpLimits::default())
            .unwrap()
            .with_stateful(stateful)
            .unwrap()
            .with_uplinks(Uplinks::new(ports, uplinks, UplinkHash::Source, Vec::new()))
            .unwrap()
            .with_qos(features.then(qos))
            .with_traffic_meter(features),
    )
}

fn udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ports: (u16, u16),
) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src.octets(), dst.octets(), 64)
        .udp(ports.0, ports.1)
        .write(&mut out, &[0; 18])
        .unwrap();
    out
}

fn syn(src: Ipv4Addr, src_port: u16, seq: u32) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(UPSTREAM_MAC, WAN_MAC)
        .ipv4(src.octets(), WAN_ADDR, 64)
        .tcp(src_port, FORWARDED_PORT, seq, 64240)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

fn process(pipeline: &mut Pipeline, frame: &[u8], ingress: u16, room: &mut [u8]) -> Verdict {
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(room, frame.len());
    pipeline.process(&mut pkt, ingress, 0)
}

fn main() {
    const USAGE: &str =
        "usage: packet_cost FLOWS PACKETS syn|new|handoff|features|ipv6|uplinks|uplinks-new EVERY";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [flows, packets, kind, every] = &args[..] else {
        panic!("{USAGE}");
    };
    let number = |arg: &str| arg.parse::<u64>().expect(USAGE);
    let (flows, packets, every) = (number(flows), number(packets), number(every));
    let kind = match kind.as_str() {
        "syn" => Kind::Syn,
        "new" => Kind::NewFlow,
        "handoff" => Kind::Handoff,
        "features" => Kind::Features,
        "ipv6" => Kind::Ipv6,
        "uplinks" => Kind::Uplinks,
        "uplinks-new" => Kind::UplinksNew,
        _ => panic!("{USAGE}"),
    };
    if matches!(kind, Kind::Ipv6) {
        return run_ipv6(flows as u32, packets);
    }
    let features = matches!(kind, Kind::Features);
    let uplinks = matches!(kind, Kind::Uplinks | Kind::UplinksNew);
    let every = if features || matches!(kind, Kind::Uplinks) {
        0
    } else {
        every
    };
    let flows = flows as u32;
    let neighbors = NeighborView::new(
        (0..HOSTS)
            .map(|h| (host(h), EthernetAddress(host_mac(h))))
            .chain([(Ipv4Addr::from(UPSTREAM), EthernetAddress(UPSTREAM_MAC))])
            .chain([(Ipv4Addr::from(UPSTREAM2), EthernetAddress(UPSTREAM2_MAC))]),
    );
    // As `gateway bench` sizes it, with room for the new flows too.
    let extras = packets.checked_div(every).unwrap_or(0) as usize;
    let capacity = (flows as usize + extras + (flows as usize + extras) / 2).next_power_of_two();
    let counters = Arc::new(WorkerCounters::default());
    let mut pipeline = Pipeline::for_worker(
        router(features, uplinks),
        Arc::new(neighbors),
        counters.clone(),
        WorkerSetup {
            conntrack: ConntrackConfig {
                capacity,
                host_flows: capacity as u32,
                half_open: capacity / 16,
                ..ConntrackConfig::default()
            },
            // Room for the new flows' bindings too.
            nat_bindings: 4 * HOSTS as usize + packets as usize,
            workers: if matches!(kind, Kind::Handoff) { 2 } else { 1 },
            meter: features.then(|| Arc::new(HostMeter::new(2 * HOSTS as usize))),
            ..WorkerSetup::default()
        },
    )
    .unwrap();
    let mut room = vec![0u8; 2048];
    // The LAN hosts this worker owns (all, with one worker) and the others'.
    let (ours, theirs): (Vec<u32>, Vec<u32>) = (0..HOSTS).partition(|&h| {
        let probe = udp(
            host_mac(h),
            LAN_MAC,
            host(h),
            Ipv4Addr::new(192, 0, 2, 1),
            (9, 9),
        );
        !matches!(
            process(&mut pipeline, &probe, 0, &mut room),
            Verdict::Handoff { .. }
        )
    });
    let host_of = |f: u32| ours[(f as usize) % ours.len()];
    let outbound: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            let h = host_of(f);
            udp(host_mac(h), LAN_MAC, host(h), remote(f), (5000, 443))
        })
        .collect();
    // The uplink, address and external port of each host's one binding, from its first
    // translated packet.
    let mut external = vec![(1u16, Ipv4Addr::UNSPECIFIED, 0u16); HOSTS as usize];
    for (f, frame) in outbound.iter().enumerate() {
        let Verdict::Transmit { port } = process(&mut pipeline, frame, 0, &mut room) else {
            panic!("flow {f} was not forwarded");
        };
        let address = Ipv4Addr::new(room[26], room[27], room[28], room[29]);
        let external_port = u16::from_be_bytes([room[34], room[35]]);
        external[host_of(f as u32) as usize] = (port, address, external_port);
    }
    // Each reply on the uplink its flow left by.
    let (replies, reply_ports): (Vec<Vec<u8>>, Vec<u16>) = (0..flows)
        .map(|f| {
            let (uplink, address, port) = external[host_of(f) as usize];
            let (upstream_mac, wan_mac) = match uplink {
                1 => (UPSTREAM_MAC, WAN_MAC),
                _ => (UPSTREAM2_MAC, WAN2_MAC),
            };
            let reply = udp(upstream_mac, wan_mac, remote(f), address, (443, port));
            (reply, uplink)
        })
        .unzip();
    if uplinks {
        let second = reply_ports.iter().filter(|&&port| port == 2).count();
        println!("{second} of {flows} flows on the second uplink");
    }
    let extras: Vec<Vec<u8>> = (0..extras as u32)
        .map(|i| {
            let x = i.wrapping_mul(0x9e37_79b9) ^ (i >> 7);
            match kind {
                Kind::Syn => syn(
                    Ipv4Addr::from(0x0b00_0000 | (x & 0x00ff_ffff)),
                    1024 | (x >> 22) as u16,
                    x,
                ),
                // Host i % HOSTS, a source port of its own per flow.
                Kind::NewFlow | Kind::UplinksNew => udp(
                    host_mac(i % HOSTS),
                    LAN_MAC,
                    host(i % HOSTS),
                    remote(x),
                    (10_000 + (i / HOSTS) as u16, 443),
                ),
                // A host of the other worker's, to ever new remotes.
                Kind::Handoff => {
                    let h = theirs[i as usize % theirs.len()];
                    udp(host_mac(h), LAN_MAC, host(h), remote(x), (5000, 443))
                }
                Kind::Features | Kind::Ipv6 | Kind::Uplinks => {
                    unreachable!("no packets of its own (EVERY is 0)")
                }
            }
        })
        .collect();
    let start = Instant::now();
    let (forwarded, extras_sent) = measure(
        &mut pipeline,
        &outbound,
        (&replies, &reply_ports),
        (&extras, kind.ingress()),
        packets,
        every,
    );
    let elapsed = start.elapsed();
    println!(
        "{packets} packets ({extras_sent} {kind:?}), {forwarded} forwarded, {:.1} ns/packet",
        elapsed.as_nanos() as f64 / packets as f64
    );
    for &reason in DropReason::ALL {
        if counters.dropped(reason) > 0 {
            println!("dropped as {reason:?}: {}", counters.dropped(reason));
        }
    }
}

/// The measured loop, apart so that `valgrind --toggle-collect='*measure*'` counts only it.
#[inline(never)]
fn measure(
    pipeline: &mut Pipeline,
    outbound: &[Vec<u8>],
    (replies, reply_ports): (&[Vec<u8>], &[u16]),
    (extras, ingress): (&[Vec<u8>], u16),
    packets: u64,
    every: u64,
) -> (u64, usize) {
    let (mut forwarded, mut extras_sent) = (0u64, 0usize);
    let mut room = vec![0u8; 2048];
    let flows = outbound.len() as u64;
    for i in 0..packets {
        let verdict = if every != 0 && i % every == 0 && extras_sent < extras.len() {
            extras_sent += 1;
            process(pipeline, &extras[extras_sent - 1], ingress, &mut room)
        } else {
            let flow = (i / 2 % flows) as usize;
            if i % 2 == 0 {
                process(pipeline, &outbound[flow], 0, &mut room)
            } else {
                process(pipeline, &replies[flow], reply_ports[flow], &mut room)
            }
        };
        forwarded += u64::from(matches!(verdict, Verdict::Transmit { .. }));
    }
    (forwarded, extras_sent)
}

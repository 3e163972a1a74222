//! What a spoofed SYN at a port forward costs next to established NAT traffic, without DPDK,
//! so that valgrind can count it: `cargo run --release -p pipeline --example syn_cost --
//! FLOWS PACKETS SYN_EVERY`. Established UDP flows through masquerade (outbound and reply, as
//! `gateway bench` sends them) run for PACKETS packets; every SYN_EVERY-th packet (0: none) is
//! instead a SYN from a random source at the forwarded port. Under
//! `valgrind --tool=callgrind`, the difference between SYN_EVERY = 0 and another value, over
//! the number of SYNs, is the instructions (and with `--cache-sim=yes`, the misses) per SYN.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use etherparse::PacketBuilder;
use pipeline::conntrack::ConntrackConfig;
use pipeline::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::router::{PortForward, Stateful};
use pipeline::wire::EthernetAddress;
use pipeline::{
    IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig, StaticRoute, Verdict,
    WorkerCounters, WorkerSetup,
};

const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const UPSTREAM_MAC: [u8; 6] = [0x02, 0, 0, 0, 0xff, 0x01];
const WAN_ADDR: [u8; 4] = [100, 64, 0, 1];
const UPSTREAM: [u8; 4] = [100, 64, 0, 2];
const HOSTS: u32 = 1000;
const FORWARDED_PORT: u16 = 8080;

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

fn router() -> Arc<RouterConfig> {
    let interfaces = vec![
        Interface {
            mac: EthernetAddress(LAN_MAC),
            addr: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 16,
            mtu: 1500,
        },
        Interface {
            mac: EthernetAddress(WAN_MAC),
            addr: Ipv4Addr::from(WAN_ADDR),
            prefix_len: 24,
            mtu: 1500,
        },
    ];
    let default_route = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: Ipv4Addr::from(UPSTREAM),
    };
    let policy = Policy::new(Action::Drop).set(ZoneId(0), ZoneId(1), Action::Accept);
    let stateful = Stateful {
        content: None,
        zones: vec![ZoneId(0), ZoneId(1)],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(Vec::new(), policy).unwrap(),
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
            .unwrap(),
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
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|arg| arg.parse().expect("FLOWS PACKETS SYN_EVERY"))
        .collect();
    let [flows, packets, syn_every] = args[..] else {
        panic!("usage: syn_cost FLOWS PACKETS SYN_EVERY");
    };
    let flows = flows as u32;
    let neighbors = NeighborView::new(
        (0..HOSTS)
            .map(|h| (host(h), EthernetAddress(host_mac(h))))
            .chain([(Ipv4Addr::from(UPSTREAM), EthernetAddress(UPSTREAM_MAC))]),
    );
    let capacity = (flows as usize + flows as usize / 2).next_power_of_two();
    let mut pipeline = Pipeline::for_worker(
        router(),
        Arc::new(neighbors),
        Arc::new(WorkerCounters::default()),
        WorkerSetup {
            conntrack: ConntrackConfig {
                capacity,
                host_flows: capacity as u32,
                half_open: capacity / 16,
                ..ConntrackConfig::default()
            },
            nat_bindings: 4 * HOSTS as usize,
            ..WorkerSetup::default()
        },
    )
    .unwrap();
    let mut room = vec![0u8; 2048];
    let outbound: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            udp(
                host_mac(f % HOSTS),
                LAN_MAC,
                host(f % HOSTS),
                remote(f),
                (5000, 443),
            )
        })
        .collect();
    // The external port of each host's one binding, from its first translated packet.
    let mut external = vec![0u16; HOSTS as usize];
    for (f, frame) in outbound.iter().enumerate() {
        assert!(matches!(
            process(&mut pipeline, frame, 0, &mut room),
            Verdict::Transmit { .. }
        ));
        external[f % HOSTS as usize] = u16::from_be_bytes([room[34], room[35]]);
    }
    let replies: Vec<Vec<u8>> = (0..flows)
        .map(|f| {
            let port = external[(f % HOSTS) as usize];
            udp(
                UPSTREAM_MAC,
                WAN_MAC,
                remote(f),
                Ipv4Addr::from(WAN_ADDR),
                (443, port),
            )
        })
        .collect();
    let syns: Vec<Vec<u8>> = (0..packets.checked_div(syn_every).unwrap_or(0) as u32)
        .map(|i| {
            let x = i.wrapping_mul(0x9e37_79b9) ^ (i >> 7);
            syn(
                Ipv4Addr::from(0x0b00_0000 | (x & 0x00ff_ffff)),
                1024 | (x >> 22) as u16,
                x,
            )
        })
        .collect();

    let start = Instant::now();
    let (forwarded, syns_sent) = measure(
        &mut pipeline,
        &outbound,
        &replies,
        &syns,
        packets,
        syn_every,
    );
    let elapsed = start.elapsed();
    println!(
        "{packets} packets ({syns_sent} SYNs), {forwarded} forwarded, {:.1} ns/packet",
        elapsed.as_nanos() as f64 / packets as f64
    );
}

/// The measured loop, apart so that `valgrind --toggle-collect='*measure*'` counts only it.
#[inline(never)]
fn measure(
    pipeline: &mut Pipeline,
    outbound: &[Vec<u8>],
    replies: &[Vec<u8>],
    syns: &[Vec<u8>],
    packets: u64,
    syn_every: u64,
) -> (u64, usize) {
    let (mut forwarded, mut syns_sent) = (0u64, 0usize);
    let mut room = vec![0u8; 2048];
    let flows = outbound.len() as u64;
    for i in 0..packets {
        let verdict = if syn_every != 0 && i % syn_every == 0 && syns_sent < syns.len() {
            syns_sent += 1;
            process(pipeline, &syns[syns_sent - 1], 1, &mut room)
        } else {
            let flow = (i / 2 % flows) as usize;
            if i % 2 == 0 {
                process(pipeline, &outbound[flow], 0, &mut room)
            } else {
                process(pipeline, &replies[flow], 1, &mut room)
            }
        };
        forwarded += u64::from(matches!(verdict, Verdict::Transmit { .. }));
    }
    (forwarded, syns_sent)
}

//! Flow ownership across workers, in every topology: for random configs (two to four
//! interfaces, each masquerading or not, a default route and a static route out of random
//! interfaces, port forwards on random interfaces) and random flows between any two places
//! (hosts on each connected subnet, hosts behind the routes, the gateway's own addresses), on 1
//! to 8 workers, a flow's first packet, its reply and an ICMP error about it all end on the
//! same worker, whichever worker's queue each arrives on, and the reply matches the flow that
//! the first packet created (it is translated back, and no second flow appears).
//!
//! Frames are built with etherparse; the pipeline is the real one, one per worker, and a
//! `Handoff` verdict is followed the way the worker loop follows it: to the named worker, with
//! `handed_off` set.

use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::icmpv4::DestUnreachableHeader;
use etherparse::{Icmpv4Type, IpNumber, Ipv4Header, PacketBuilder, TcpHeader, UdpHeader};
use pipeline::pipeline::config::{PortForward, PuntConfig, Stateful};
use pipeline::pipeline::kernel_flows::kernel_flow;
use pipeline::pipeline::stateful::flow_owner;
use pipeline::state::conntrack::ConntrackConfig;
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::state::nat::Ownership;
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Ingress, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig,
    StaticRoute, Verdict, WorkerCounters, WorkerSetup,
};
use proptest::prelude::*;

const ROOM: usize = 2048;
const TCP: u8 = 6;
const UDP: u8 = 17;
/// A protocol without ports: masquerade can only change its address.
const GRE: u8 = 47;
const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FORWARDED_TCP: u16 = 8080;
const FORWARDED_UDP: u16 = 5000;
/// Outside every connected subnet: reached by the static route.
const ROUTED_NET: [u8; 2] = [172, 16];
/// Outside every subnet and the static route: reached by the default route.
const REMOTE_NET: [u8; 2] = [198, 51];

/// Interface `i` is 10.i.0.1/24 with MAC 02:00:00:00:00:0i.
fn iface_addr(i: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, i as u8, 0, 1)
}

fn iface_mac(i: u16) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, i as u8]
}

/// The MAC of any host or router beyond the gateway: derived from its address.
fn host_mac(addr: Ipv4Addr) -> [u8; 6] {
    let [a, b, c, d] = addr.octets();
    [0x06, a, b, c, d, 0x01]
}

/// The default route's and the static route's next hops on their interfaces.
fn default_hop(port: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, port as u8, 0, 254)
}

fn static_hop(port: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, port as u8, 0, 253)
}

#[derive(Clone, Debug)]
struct Topology {
    masquerade: Vec<bool>,
    default_port: u16,
    static_port: u16,
    /// (interface receiving it, target interface, target host byte)
    forwards: Vec<(u16, u16, u8)>,
}

impl Topology {
    fn interfaces(&self) -> u16 {
        self.masquerade.len() as u16
    }

    fn router(&self) -> RouterConfig {
        // Everything may start a flow: ownership, not policy, is under test.
        self.router_with(Policy::new(Action::Accept))
    }

    /// As a gateway with kernel twins on every interface and the zones closed to `local`, so
    /// that what the kernel opens is tracked (`pipeline::pipeline::kernel_flows`).
    fn router_with_twins(&self) -> RouterConfig {
        let n = self.interfaces();
        let zones = (0..n).map(|i| ZoneId(i as u8));
        let policy = zones.fold(Policy::new(Action::Drop), |policy, zone| {
            policy.set(ZoneId::LOCAL, zone, Action::Accept)
        });
        self.router_with(policy)
            .with_punt(PuntConfig {
                twins: vec![true; usize::from(n)],
                ..PuntConfig::none(usize::from(n))
            })
            .unwrap()
    }

    fn router_with(&self, policy: Policy) -> RouterConfig {
        let n = self.interfaces();
        let interfaces: Vec<Interface> = (0..n)
            .map(|i| Interface {
                mac: EthernetAddress(iface_mac(i)),
                addr: iface_addr(i),
                prefix_len: 24,
                mtu: 1500,
                virtual_addr: None,
            })
            .collect();
        let routes = [
            StaticRoute {
                destination: Ipv4Addr::UNSPECIFIED,
                len: 0,
                via: default_hop(self.default_port),
            },
            StaticRoute {
                destination: Ipv4Addr::new(ROUTED_NET[0], ROUTED_NET[1], 0, 0),
                len: 16,
                via: static_hop(self.static_port),
            },
        ];
        let port_forwards = self
            .forwards
            .iter()
            .flat_map(|&(interface, target, host)| {
                let to = Ipv4Addr::new(10, target as u8, 0, host);
                [
                    PortForward {
                        interface,
                        protocol: TCP,
                        ports: FORWARDED_TCP..=FORWARDED_TCP,
                        to,
                        to_port: 80,
                    },
                    PortForward {
                        interface,
                        protocol: UDP,
                        ports: FORWARDED_UDP..=FORWARDED_UDP,
                        to,
                        to_port: 6000,
                    },
                ]
            })
            .collect();
        let stateful = Stateful {
            content: None,
            zones: (0..n).map(|i| ZoneId(i as u8)).collect(),
            masquerade: self.masquerade.clone(),
            firewall: RuleSet::compile(Vec::new(), policy).unwrap(),
            port_mappings: Default::default(),
            port_forwards,
            recheck_established: false,
            generation: 0,
        };
        RouterConfig::new(interfaces, &routes, IcmpLimits::default())
            .unwrap()
            .with_stateful(stateful)
            .unwrap()
    }

    /// The interface a packet from `addr` arrives on (symmetric routing).
    fn port_of(&self, addr: Ipv4Addr) -> u16 {
        let [a, b, c, _] = addr.octets();
        if a == 10 && c == 0 && u16::from(b) < self.interfaces() {
            u16::from(b)
        } else if [a, b] == ROUTED_NET {
            self.static_port
        } else {
            self.default_port
        }
    }

    /// The L2 sender of a frame from `addr`: the host itself on a connected subnet, otherwise
    /// the router it sits behind.
    fn l2_sender(&self, addr: Ipv4Addr) -> Ipv4Addr {
        let [a, b, c, _] = addr.octets();
        if a == 10 && c == 0 && u16::from(b) < self.interfaces() {
            addr
        } else if [a, b] == ROUTED_NET {
            static_hop(self.static_port)
        } else {
            default_hop(self.default_port)
        }
    }
}

/// Where an endpoint of a flow is.
#[derive(Clone, Copy, Debug)]
enum Place {
    /// A host on interface `i`'s subnet.
    Connected(u16, u8),
    Routed(u8, u8),
    Remote(u8, u8),
    /// The gateway's own address on interface `i` (as a destination only).
    Gateway(u16),
}

impl Place {
    fn addr(self, interfaces: u16) -> Ipv4Addr {
        match self {
            Place::Connected(i, host) => Ipv4Addr::new(10, (i % interfaces) as u8, 0, host),
            Place::Routed(c, d) => Ipv4Addr::new(ROUTED_NET[0], ROUTED_NET[1], c, d),
            Place::Remote(c, d) => Ipv4Addr::new(REMOTE_NET[0], REMOTE_NET[1], c, d),
            Place::Gateway(i) => iface_addr(i % interfaces),
        }
    }
}

fn host_byte() -> impl Strategy<Value = u8> {
    // Not .0, .1 (the gateway), .253/.254 (the next hops) or .255 (broadcast).
    2u8..=252
}

fn source() -> impl Strategy<Value = Place> {
    prop_oneof![
        3 => (0u16..4, host_byte()).prop_map(|(i, h)| Place::Connected(i, h)),
        1 => (0u8..=255, 1u8..=254).prop_map(|(c, d)| Place::Routed(c, d)),
        2 => (0u8..=255, 1u8..=254).prop_map(|(c, d)| Place::Remote(c, d)),
    ]
}

fn destination() -> impl Strategy<Value = Place> {
    prop_oneof![
        3 => source(),
        2 => (0u16..4).prop_map(Place::Gateway),
    ]
}

fn topology() -> impl Strategy<Value = Topology> {
    (2usize..=4)
        .prop_flat_map(|n| {
            (
                proptest::collection::vec(any::<bool>(), n),
                0..n as u16,
                0..n as u16,
                proptest::collection::vec((0..n as u16, 0..n as u16, host_byte()), 0..=2),
            )
        })
        .prop_map(|(masquerade, default_port, static_port, forwards)| {
            // Any number of masqueraded interfaces, as `nat.masquerade` allows: each flow is
            // masqueraded to the address of the interface it leaves by, and a hairpinned
            // flow takes its port on the pool's first address, so that no two hairpinned
            // flows share a port on the address they are shown with (with paired pooling
            // they could: found by this test on 2026-12-04, when one interface was the limit).
            Topology {
                masquerade,
                default_port,
                static_port,
                forwards,
            }
        })
}

#[derive(Clone, Debug)]
struct Flow {
    protocol: u8,
    src: Place,
    dst: Place,
    src_port: u16,
    /// Used unless the destination is the gateway, where a forwarded or any port is picked.
    dst_port: u16,
    to_forwarded_port: bool,
    /// The worker whose queue each of the three packets arrives on (modulo the worker count).
    arrivals: [u16; 3],
}

fn flow() -> impl Strategy<Value = Flow> {
    (
        prop_oneof![Just(TCP), Just(UDP), Just(GRE)],
        source(),
        destination(),
        1024u16..,
        1u16..,
        any::<bool>(),
        [0u16..8, 0u16..8, 0u16..8],
    )
        .prop_map(
            |(protocol, src, dst, src_port, dst_port, to_forwarded_port, arrivals)| Flow {
                protocol,
                src,
                dst,
                src_port,
                dst_port,
                to_forwarded_port,
                arrivals,
            },
        )
}

fn frame(
    topology: &Topology,
    protocol: u8,
    (src, src_port): (Ipv4Addr, u16),
    (dst, dst_port): (Ipv4Addr, u16),
    tcp_flags: u8,
) -> Vec<u8> {
    let ingress = topology.port_of(src);
    let builder = PacketBuilder::ethernet2(host_mac(topology.l2_sender(src)), iface_mac(ingress))
        .ipv4(src.octets(), dst.octets(), 64);
    let payload = [0x5a; 16];
    let mut out = Vec::new();
    if protocol == TCP {
        let mut builder = builder.tcp(src_port, dst_port, 1000, 65535);
        if tcp_flags & SYN != 0 {
            builder = builder.syn();
        }
        if tcp_flags & ACK != 0 {
            // Both sides start at sequence 1000; a reply acknowledges the SYN.
            builder = builder.ack(1001);
        }
        let body: &[u8] = if tcp_flags == SYN { &[] } else { &payload };
        builder.write(&mut out, body).unwrap();
    } else if protocol == UDP {
        builder
            .udp(src_port, dst_port)
            .write(&mut out, &payload)
            .unwrap();
    } else {
        builder
            .write(&mut out, IpNumber(protocol), &payload)
            .unwrap();
    }
    out
}

/// The IP addresses and L4 ports of a frame the pipeline sent.
fn tuple(frame: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16) {
    let (ip, rest) = Ipv4Header::from_slice(&frame[14..]).unwrap();
    let (src_port, dst_port) = match ip.protocol {
        IpNumber::TCP => {
            let tcp = TcpHeader::from_slice(rest).unwrap().0;
            (tcp.source_port, tcp.destination_port)
        }
        IpNumber(GRE) => (0, 0),
        _ => {
            let udp = UdpHeader::from_slice(rest).unwrap().0;
            (udp.source_port, udp.destination_port)
        }
    };
    (
        Ipv4Addr::from(ip.source),
        src_port,
        Ipv4Addr::from(ip.destination),
        dst_port,
    )
}

struct Workers {
    pipelines: Vec<Pipeline>,
    counters: Vec<Arc<WorkerCounters>>,
}

impl Workers {
    fn new(router: Arc<RouterConfig>, topology: &Topology, workers: u16) -> Workers {
        // Every next hop and host resolved, so a sent packet is always a Transmit.
        let neighbors: Vec<(Ipv4Addr, EthernetAddress)> = (0..topology.interfaces())
            .flat_map(|i| (2..=254).map(move |h| Ipv4Addr::new(10, i as u8, 0, h)))
            .map(|addr| (addr, EthernetAddress(host_mac(addr))))
            .collect();
        let neighbors = Arc::new(NeighborView::new(neighbors));
        let counters: Vec<_> = (0..workers)
            .map(|_| Arc::new(WorkerCounters::default()))
            .collect();
        let pipelines = (0..workers)
            .map(|worker| {
                let setup = WorkerSetup {
                    worker,
                    workers,
                    conntrack: ConntrackConfig {
                        capacity: 64,
                        ..ConntrackConfig::default()
                    },
                    nat_bindings: 64,
                    ..WorkerSetup::default()
                };
                Pipeline::for_worker(
                    router.clone(),
                    neighbors.clone(),
                    counters[usize::from(worker)].clone(),
                    setup,
                )
                .unwrap()
            })
            .collect();
        Workers {
            pipelines,
            counters,
        }
    }

    /// Offers the frame to `arrival`'s queue and follows a handoff: returns the worker that
    /// decided, its verdict and the frame as it left.
    fn deliver(&mut self, frame: &[u8], port: u16, arrival: u16) -> (u16, Verdict, Vec<u8>) {
        let workers = self.pipelines.len() as u16;
        let mut worker = arrival % workers;
        let mut ingress = Ingress {
            port,
            handed_off: false,
        };
        loop {
            let mut room = [0xa5; ROOM];
            room[..frame.len()].copy_from_slice(frame);
            let mut pkt = PacketBuf::new(&mut room, frame.len());
            let verdict = self.pipelines[usize::from(worker)].process_from(&mut pkt, ingress, 0);
            match verdict {
                Verdict::Handoff { worker: owner } => {
                    assert!(!ingress.handed_off, "a handed-off packet was handed on");
                    assert_ne!(owner, worker, "handed to itself");
                    assert!(owner < workers);
                    worker = owner;
                    ingress.handed_off = true;
                }
                verdict => return (worker, verdict, pkt.bytes().to_vec()),
            }
        }
    }

    fn flows(&self) -> usize {
        self.pipelines.iter().map(Pipeline::flow_count).sum()
    }

    fn dropped(&self, reason: DropReason) -> u64 {
        self.counters.iter().map(|c| c.dropped(reason)).sum()
    }
}

/// An ICMP port unreachable about `sent`, from the host or router it was sent toward.
fn icmp_error_about(topology: &Topology, sent: &[u8]) -> Vec<u8> {
    let (_, _, dst, _) = tuple(sent);
    let reporter = topology.l2_sender(dst);
    let quote = &sent[14..14 + 28];
    let mut out = Vec::new();
    PacketBuilder::ethernet2(host_mac(reporter), iface_mac(topology.port_of(dst)))
        .ipv4(
            reporter.octets(),
            Ipv4Header::from_slice(&sent[14..]).unwrap().0.source,
            64,
        )
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            DestUnreachableHeader::Port,
        ))
        .write(&mut out, quote)
        .unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn both_directions_and_errors_of_every_flow_meet_on_one_worker(
        topology in topology(),
        flows in proptest::collection::vec(flow(), 1..6),
        workers in 1u16..=8,
    ) {
        let router = Arc::new(topology.router());
        let mut gateway = Workers::new(router, &topology, workers);
        let n = topology.interfaces();
        let mut seen = std::collections::HashSet::new();
        for flow in flows {
            let src = flow.src.addr(n);
            let dst = flow.dst.addr(n);
            // A repeated source is another packet of an earlier flow, or shares its mapping.
            // Without ports, two inside hosts masqueraded to one peer would share a reply
            // tuple: one such flow per case.
            let src_port = if flow.protocol == GRE { 0 } else { flow.src_port };
            let dedupe = if flow.protocol == GRE { Ipv4Addr::UNSPECIFIED } else { src };
            if src == dst || !seen.insert((flow.protocol, dedupe, src_port)) {
                continue;
            }
            let dst_port = match (flow.dst, flow.to_forwarded_port, flow.protocol) {
                (Place::Gateway(_), true, TCP) => FORWARDED_TCP,
                (Place::Gateway(_), true, UDP) => FORWARDED_UDP,
                _ if flow.protocol == GRE => 0,
                _ => flow.dst_port,
            };
            let first = frame(&topology, flow.protocol, (src, src_port), (dst, dst_port), SYN);
            let ingress = topology.port_of(src);
            let flows_before = gateway.flows();
            let (owner, verdict, sent) = gateway.deliver(&first, ingress, flow.arrivals[0]);
            let Verdict::Transmit { port: egress } = verdict else {
                // Local delivery, a martian pair, a repeated tuple: nothing to follow.
                continue;
            };
            prop_assert_eq!(gateway.flows(), flows_before + 1, "the first packet made one flow");

            // The reply: the far end answers what it received, from where it sits.
            let (out_src, out_src_port, out_dst, out_dst_port) = tuple(&sent);
            prop_assert_eq!(topology.port_of(out_dst), egress, "sent toward its route");
            let reply = frame(
                &topology,
                flow.protocol,
                (out_dst, out_dst_port),
                (out_src, out_src_port),
                SYN | ACK,
            );
            let (reply_owner, verdict, back) =
                gateway.deliver(&reply, egress, flow.arrivals[1]);
            prop_assert_eq!(reply_owner, owner, "the reply reached another worker");
            prop_assert_eq!(verdict, Verdict::Transmit { port: ingress }, "the reply was not sent back");
            prop_assert_eq!(gateway.flows(), flows_before + 1, "the reply made a flow of its own");
            let (back_src, back_src_port, back_dst, back_dst_port) = tuple(&back);
            prop_assert_eq!((back_dst, back_dst_port), (src, src_port), "reply not translated back");
            prop_assert_eq!((back_src, back_src_port), (dst, dst_port), "reply source not restored");

            // An ICMP error about the packet as it left, from where it went.
            let error = icmp_error_about(&topology, &sent);
            let (error_owner, verdict, _) = gateway.deliver(&error, egress, flow.arrivals[2]);
            prop_assert_eq!(error_owner, owner, "the ICMP error reached another worker");
            prop_assert_eq!(verdict, Verdict::Transmit { port: ingress }, "the ICMP error was not relayed");
        }
        prop_assert_eq!(gateway.dropped(DropReason::ConntrackInvalid), 0);
        prop_assert_eq!(gateway.dropped(DropReason::UnrelatedIcmpError), 0);
    }
}

/// A TCP segment from `src` to `dst` with explicit sequence numbers.
fn segment(
    topology: &Topology,
    (src, src_port): (Ipv4Addr, u16),
    (dst, dst_port): (Ipv4Addr, u16),
    (seq, ack): (u32, u32),
    fin: bool,
    payload: &[u8],
) -> Vec<u8> {
    let ingress = topology.port_of(src);
    let mut builder =
        PacketBuilder::ethernet2(host_mac(topology.l2_sender(src)), iface_mac(ingress))
            .ipv4(src.octets(), dst.octets(), 64)
            .tcp(src_port, dst_port, seq, 65535)
            .ack(ack);
    if fin {
        builder = builder.fin();
    }
    let mut out = Vec::new();
    builder.write(&mut out, payload).unwrap();
    out
}

/// Packets of one flow can reach its owner by two paths: its own queue, and another worker's
/// queue and the handoff ring (af_packet's fanout rolling over, fragments, a RETA change).
/// The ring's packets then come later than those sent after them. Reordering within the
/// window, of data, of acknowledgements and of the FIN, is no reason to drop (as in Linux's
/// tracker).
#[test]
fn segments_reordered_across_the_handoff_path_are_not_dropped() {
    let topology = Topology {
        masquerade: vec![false, false, true],
        default_port: 2,
        static_port: 1,
        forwards: vec![(2, 0, 9)],
    };
    let router = Arc::new(topology.router());
    let client = (Ipv4Addr::new(10, 0, 0, 7), 40000);
    // Masqueraded, routed to another inside interface, and through the forward.
    let servers = [
        (Ipv4Addr::new(198, 51, 7, 7), 443),
        (Ipv4Addr::new(10, 1, 0, 9), 22),
        (iface_addr(2), FORWARDED_TCP),
    ];
    for workers in [2u16, 3, 4] {
        let mut gateway = Workers::new(router.clone(), &topology, workers);
        for (n, &server) in servers.iter().enumerate() {
            let client = if server.1 == FORWARDED_TCP {
                (Ipv4Addr::new(198, 51, 1, 2), 50000)
            } else {
                (client.0, client.1 + n as u16)
            };
            let syn = frame(&topology, TCP, client, server, SYN);
            let (owner, verdict, sent) = gateway.deliver(&syn, topology.port_of(client.0), 0);
            let Verdict::Transmit { port: egress } = verdict else {
                panic!("SYN to {server:?}: {verdict:?}");
            };
            let (out_src, out_src_port, out_dst, out_dst_port) = tuple(&sent);
            let far = (out_dst, out_dst_port);
            let near = (out_src, out_src_port);
            let syn_ack = frame(&topology, TCP, far, near, SYN | ACK);
            let verdict = gateway.deliver(&syn_ack, egress, owner).1;
            assert!(
                matches!(verdict, Verdict::Transmit { .. }),
                "{workers} workers, SYN-ACK from {server:?}: {verdict:?} owner {owner} flows {:?} sent {:?}", gateway.pipelines.iter().map(|p| p.flow_count()).collect::<Vec<_>>(), tuple(&sent)
            );
            // The other worker's queue: every packet that lands there goes round by the ring.
            let other = (owner + 1) % workers;
            let ingress = topology.port_of(client.0);
            // Client data 1001.. in 8 segments of 100 bytes, then its FIN. Odd segments take
            // the direct path, even ones the ring, and arrive after everything the direct
            // path carried, last first. Then the server acknowledges each, its ACKs split
            // the same way (an ACK cannot overtake the data it acknowledges: that data
            // reached the server through this worker). Then the server closes.
            let data = [0x42u8; 100];
            let mut client_side = (Vec::new(), Vec::new());
            let mut server_side = (Vec::new(), Vec::new());
            for i in 0..9u32 {
                let seq = 1001 + i * 100;
                let fin = i == 8;
                let payload: &[u8] = if fin { &[] } else { &data };
                let end = seq + payload.len() as u32 + u32::from(fin);
                let from_client = segment(&topology, client, server, (seq, 1001), fin, payload);
                let ack = segment(&topology, far, near, (1001, end), false, &[]);
                let (paths, acks) = (&mut client_side, &mut server_side);
                if i % 2 == 0 {
                    paths.1.push(from_client);
                    acks.1.push(ack);
                } else {
                    paths.0.push(from_client);
                    acks.0.push(ack);
                }
            }
            let server_fin = segment(&topology, far, near, (1001, 1802), true, &[]);
            let last_ack = segment(&topology, client, server, (1802, 1002), false, &[]);
            let mut arrivals: Vec<(Vec<u8>, u16, u16)> = Vec::new();
            for ((direct, ringed), port) in [(client_side, ingress), (server_side, egress)] {
                arrivals.extend(direct.into_iter().map(|f| (f, port, owner)));
                arrivals.extend(ringed.into_iter().rev().map(|f| (f, port, other)));
            }
            arrivals.push((server_fin, egress, other));
            arrivals.push((last_ack, ingress, other));
            for (k, (frame, port, arrival)) in arrivals.iter().enumerate() {
                let (decided, verdict, _) = gateway.deliver(frame, *port, *arrival);
                assert_eq!(decided, owner, "{workers} workers, server {server:?}");
                assert!(
                    matches!(verdict, Verdict::Transmit { .. }),
                    "{workers} workers, server {server:?}: reordered segment {k} got {verdict:?}"
                );
            }
        }
        assert_eq!(gateway.dropped(DropReason::ConntrackInvalid), 0);
    }
}

/// A flow the gateway's kernel opens from interface `egress`'s address toward `dst`: the frame
/// as its twin sends it.
fn kernel_frame(
    topology: &Topology,
    protocol: u8,
    src_port: u16,
    (dst, dst_port): (Ipv4Addr, u16),
) -> (Vec<u8>, u16) {
    let egress = topology.port_of(dst);
    let src = iface_addr(egress);
    let mut out = Vec::new();
    let builder = PacketBuilder::ethernet2(iface_mac(egress), host_mac(topology.l2_sender(dst)))
        .ipv4(src.octets(), dst.octets(), 64);
    if protocol == TCP {
        builder
            .tcp(src_port, dst_port, 1000, 65535)
            .syn()
            .write(&mut out, &[])
            .unwrap();
    } else {
        builder
            .udp(src_port, dst_port)
            .write(&mut out, &[0x5a; 16])
            .unwrap();
    }
    (out, egress)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// What the kernel opens through a twin: the control thread hands it to the worker
    /// `flow_owner` names, which tracks it (masqueraded where its interface is); the reply
    /// reaches that worker, whichever queue it lands on, is translated back and punted to
    /// the twin; the same datagram from another port of the peer is not.
    #[test]
    fn connections_the_kernel_opens_and_their_replies_meet_on_one_worker(
        topology in topology(),
        flows in proptest::collection::vec(flow(), 1..6),
        workers in 1u16..=8,
    ) {
        let router = Arc::new(topology.router_with_twins());
        let mut gateway = Workers::new(router.clone(), &topology, workers);
        let ownership = Ownership::new(workers);
        let n = topology.interfaces();
        let mut seen = std::collections::HashSet::new();
        for flow in flows {
            let dst = flow.dst.addr(n);
            let protocol = if flow.protocol == GRE { UDP } else { flow.protocol };
            // The kernel's ephemeral ports (Linux: 32768-60999), clear of the forwards.
            let src_port = 32768 + flow.src_port % 28232;
            if matches!(flow.dst, Place::Gateway(_)) || !seen.insert((protocol, src_port)) {
                continue;
            }
            let (frame, egress) = kernel_frame(&topology, protocol, src_port, (dst, flow.dst_port));
            let key = kernel_flow(&router, egress, &frame);
            prop_assert!(key.is_some(), "not tracked");
            let owner = flow_owner(&router, ownership, &key.unwrap());
            let mut room = [0u8; ROOM];
            room[..frame.len()].copy_from_slice(&frame);
            let mut pkt = PacketBuf::new(&mut room, frame.len());
            let verdict = gateway.pipelines[usize::from(owner)].process_kernel_frame(&mut pkt, egress, 0);
            prop_assert_eq!(verdict, Verdict::Transmit { port: egress });
            let sent = pkt.bytes().to_vec();
            let (out_src, out_src_port, out_dst, out_dst_port) = tuple(&sent);
            prop_assert_eq!((out_dst, out_dst_port), (dst, flow.dst_port));
            prop_assert_eq!(out_src, iface_addr(egress));
            if !topology.masquerade[usize::from(egress)] {
                prop_assert_eq!(out_src_port, src_port, "translated without masquerade");
            }
            let reply = frame_from(&topology, protocol, (dst, flow.dst_port), (out_src, out_src_port));
            let (reply_owner, verdict, back) = gateway.deliver(&reply, egress, flow.arrivals[1]);
            prop_assert_eq!(reply_owner, owner, "the reply reached another worker");
            prop_assert_eq!(verdict, Verdict::Punt { port: egress });
            let (_, _, back_dst, back_dst_port) = tuple(&back);
            prop_assert_eq!((back_dst, back_dst_port), (iface_addr(egress), src_port));
            // Unsolicited: the peer's other port, to the same address and port.
            let other = frame_from(
                &topology,
                protocol,
                (dst, flow.dst_port ^ 0x8000),
                (out_src, out_src_port),
            );
            let (_, verdict, _) = gateway.deliver(&other, egress, flow.arrivals[2]);
            prop_assert_eq!(verdict, Verdict::Drop(DropReason::FirewallDrop));
        }
        prop_assert_eq!(gateway.dropped(DropReason::ConntrackInvalid), 0);
    }
}

/// A reply from `src` (where it sits) to the gateway's `dst`.
fn frame_from(
    topology: &Topology,
    protocol: u8,
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
) -> Vec<u8> {
    let flags = if protocol == TCP { SYN | ACK } else { 0 };
    frame(topology, protocol, src, dst, flags)
}

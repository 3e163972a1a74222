//! What the WAN can reach, on a home gateway: LAN 192.168.10.1/24, WAN 10.0.0.1/24 with the
//! default route and masquerade, and a port forward of WAN TCP 8080 to 192.168.10.3:80.
//! - RFC 3704 source validation: by default the LAN is strict (only sources routed back out
//!   the LAN) and the WAN loose (any routable source, but never one of the LAN's addresses).
//! - Port forwards pass through the firewall's rules: open unless a rule says otherwise.

use std::net::Ipv4Addr;
use std::sync::Arc;

use etherparse::PacketBuilder;
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    DropReason, IcmpLimits, Interface, NeighborView, PacketBuf, Pipeline, RouterConfig,
    SourceValidation, StaticRoute, Verdict, WorkerCounters,
};

const LAN: u16 = 0;
const WAN: u16 = 1;
const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const PEER_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x09];
const SERVER: [u8; 4] = [192, 168, 10, 3];
const UPSTREAM: [u8; 4] = [10, 0, 0, 2];

fn router(modes: [Option<SourceValidation>; 2]) -> Arc<RouterConfig> {
    router_with(modes, Vec::new(), 0)
}

fn router_with(
    modes: [Option<SourceValidation>; 2],
    rules: Vec<Rule>,
    generation: u32,
) -> Arc<RouterConfig> {
    let interfaces = vec![
        Interface {
            mac: EthernetAddress(LAN_MAC),
            addr: Ipv4Addr::new(192, 168, 10, 1),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
        Interface {
            mac: EthernetAddress(WAN_MAC),
            addr: Ipv4Addr::new(10, 0, 0, 1),
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
    let stateful = Stateful {
        content: None,
        zones: vec![ZoneId(0), ZoneId(1)],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(
            rules,
            Policy::new(Action::Drop).set(ZoneId(0), ZoneId(1), Action::Accept),
        )
        .unwrap(),
        port_mappings: Default::default(),
        port_forwards: vec![PortForward {
            interface: WAN,
            protocol: 6,
            ports: 8080..=8080,
            to: Ipv4Addr::from(SERVER),
            to_port: 80,
        }],
        recheck_established: true,
        generation,
    };
    Arc::new(
        RouterConfig::new(interfaces, &[default_route], IcmpLimits::default())
            .unwrap()
            .with_stateful(stateful)
            .unwrap()
            .with_source_validation(&modes)
            .unwrap(),
    )
}

fn pipeline(router: Arc<RouterConfig>) -> (Pipeline, Arc<WorkerCounters>) {
    let neighbors = NeighborView::new([
        (
            Ipv4Addr::from(UPSTREAM),
            EthernetAddress([0x02, 0xbb, 0, 0, 0, 2]),
        ),
        (
            Ipv4Addr::from(SERVER),
            EthernetAddress([0x02, 0xaa, 0, 0, 0, 3]),
        ),
    ]);
    let counters = Arc::new(WorkerCounters::default());
    let pipeline = Pipeline::new(router, Arc::new(neighbors), counters.clone());
    (pipeline, counters)
}

fn syn(ingress: u16, src: [u8; 4], dst: [u8; 4], dst_port: u16) -> Vec<u8> {
    let our_mac = if ingress == LAN { LAN_MAC } else { WAN_MAC };
    let mut out = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, our_mac)
        .ipv4(src, dst, 64)
        .tcp(40000, dst_port, 1000, 65535)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

fn verdict(pipeline: &mut Pipeline, frame: &[u8], ingress: u16) -> Verdict {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    pipeline.process(&mut pkt, ingress, 0)
}

const REFUSED: Verdict = Verdict::Drop(DropReason::SourceValidation);

#[test]
fn by_default_the_wan_cannot_claim_lan_addresses_and_the_lan_cannot_claim_others() {
    let (mut gw, counters) = pipeline(router([None, None]));
    // The conformance suite's spoofing probe: a WAN packet with a LAN source at the forward.
    let spoofed = syn(WAN, [192, 168, 10, 77], [10, 0, 0, 1], 8080);
    assert_eq!(verdict(&mut gw, &spoofed, WAN), REFUSED);
    // The same forward from a real internet address is open.
    let genuine = syn(WAN, [203, 0, 113, 5], [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &genuine, WAN),
        Verdict::Transmit { port: LAN }
    );
    // The LAN is strict: only its own subnet may be a source there.
    for src in [[203, 0, 113, 5], [10, 0, 0, 9], [172, 16, 0, 1]] {
        let frame = syn(LAN, src, [198, 51, 100, 1], 443);
        assert_eq!(verdict(&mut gw, &frame, LAN), REFUSED, "LAN source {src:?}");
    }
    let from_lan = syn(LAN, [192, 168, 10, 2], [198, 51, 100, 1], 443);
    assert_eq!(
        verdict(&mut gw, &from_lan, LAN),
        Verdict::Transmit { port: WAN }
    );
    assert_eq!(counters.dropped(DropReason::SourceValidation), 4);
}

#[test]
fn loose_and_off_are_chosen_per_interface() {
    // Loose on the LAN (a routed network behind a LAN router with no route of ours).
    let (mut gw, _) = pipeline(router([Some(SourceValidation::Loose), None]));
    let behind_a_lan_router = syn(LAN, [203, 0, 113, 5], [198, 51, 100, 1], 443);
    assert_eq!(
        verdict(&mut gw, &behind_a_lan_router, LAN),
        Verdict::Transmit { port: WAN }
    );
    // Loose still refuses another link's connected subnet.
    let wan_subnet = syn(LAN, [10, 0, 0, 9], [198, 51, 100, 1], 443);
    assert_eq!(verdict(&mut gw, &wan_subnet, LAN), REFUSED);

    // Strict on the WAN: the default route leaves by it, so internet sources pass and LAN
    // ones do not.
    let (mut gw, _) = pipeline(router([None, Some(SourceValidation::Strict)]));
    let genuine = syn(WAN, [203, 0, 113, 5], [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &genuine, WAN),
        Verdict::Transmit { port: LAN }
    );
    let spoofed = syn(WAN, [192, 168, 10, 77], [10, 0, 0, 1], 8080);
    assert_eq!(verdict(&mut gw, &spoofed, WAN), REFUSED);

    // Off: anything goes (the firewall and NAT still decide).
    let (mut gw, _) = pipeline(router([Some(SourceValidation::Off); 2]));
    let spoofed = syn(WAN, [192, 168, 10, 77], [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &spoofed, WAN),
        Verdict::Transmit { port: LAN }
    );
    assert_eq!(
        verdict(&mut gw, &wan_subnet, LAN),
        Verdict::Transmit { port: WAN }
    );
}

#[test]
fn the_defaults_follow_the_default_route() {
    let config = router([None, None]);
    assert_eq!(
        config.source_validation,
        vec![SourceValidation::Strict, SourceValidation::Loose]
    );
}

const OFFICE: [u8; 4] = [198, 51, 100, 7];
const ELSEWHERE: [u8; 4] = [203, 0, 113, 5];

/// Only the office's /24 may reach the forwarded web server. Rules see the flow after the
/// forward's translation: toward 192.168.10.3 port 80.
fn office_only(action: Action) -> Vec<Rule> {
    let web = Rule {
        from: Some(ZoneId(1)),
        src: Some((Ipv4Addr::new(198, 51, 100, 0), 24)),
        dst: Some((Ipv4Addr::from(SERVER), 32)),
        protocol: Some(6),
        dst_ports: Some(80..=80),
        ..Rule::matching_all("web-from-office", Action::Accept)
    };
    let others = Rule {
        name: "web-from-elsewhere".to_string(),
        src: None,
        action,
        ..web.clone()
    };
    vec![web, others]
}

#[test]
fn a_rule_limits_a_port_forward_to_some_sources() {
    let (mut gw, counters) = pipeline(router_with([None, None], office_only(Action::Drop), 0));
    let from_office = syn(WAN, OFFICE, [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &from_office, WAN),
        Verdict::Transmit { port: LAN }
    );
    let from_elsewhere = syn(WAN, ELSEWHERE, [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &from_elsewhere, WAN),
        Verdict::Drop(DropReason::FirewallDrop)
    );
    assert_eq!(counters.dropped(DropReason::FirewallDrop), 1);

    // Reject answers with a reset from the address the client contacted.
    let (mut gw, _) = pipeline(router_with([None, None], office_only(Action::Reject), 0));
    let mut room = [0u8; 2048];
    room[..from_elsewhere.len()].copy_from_slice(&from_elsewhere);
    let mut pkt = PacketBuf::new(&mut room, from_elsewhere.len());
    assert_eq!(
        gw.process(&mut pkt, WAN, 0),
        Verdict::Transmit { port: WAN }
    );
    let (ip, rest) = etherparse::Ipv4Header::from_slice(&pkt.bytes()[14..]).unwrap();
    let tcp = etherparse::TcpHeader::from_slice(rest).unwrap().0;
    assert_eq!((ip.source, ip.destination), ([10, 0, 0, 1], ELSEWHERE));
    assert_eq!(tcp.source_port, 8080);
    assert!(tcp.rst);
}

#[test]
fn a_reload_that_limits_a_forward_rechecks_its_flows() {
    let (mut gw, counters) = pipeline(router_with([None, None], Vec::new(), 0));
    let from_elsewhere = syn(WAN, ELSEWHERE, [10, 0, 0, 1], 8080);
    assert_eq!(
        verdict(&mut gw, &from_elsewhere, WAN),
        Verdict::Transmit { port: LAN }
    );
    // The new rules (recheck_established on) refuse the flow's next packet, here the SYN
    // again (a retransmission, which the tracker accepts).
    gw.set_router(router_with([None, None], office_only(Action::Drop), 1));
    assert_eq!(
        verdict(&mut gw, &from_elsewhere, WAN),
        Verdict::Drop(DropReason::FirewallRecheck)
    );
    assert_eq!(counters.dropped(DropReason::FirewallRecheck), 1);
    assert_eq!(gw.flow_count(), 0);
}

/// An outbound SYN from LAN host 192.168.10.`host` and source port 8080, which masquerade
/// keeps as its external port (port preservation) unless a forward reserves it.
fn lan_syn_from_8080(host: u8) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, LAN_MAC)
        .ipv4([192, 168, 10, host], [198, 51, 100, 1], 64)
        .tcp(8080, 443, 1000, 65535)
        .syn()
        .write(&mut out, &[])
        .unwrap();
    out
}

fn external_source_port(pipeline: &mut Pipeline, frame: &[u8]) -> u16 {
    let mut room = [0u8; 2048];
    room[..frame.len()].copy_from_slice(frame);
    let mut pkt = PacketBuf::new(&mut room, frame.len());
    assert_eq!(
        pipeline.process(&mut pkt, LAN, 0),
        Verdict::Transmit { port: WAN }
    );
    let (_, rest) = etherparse::Ipv4Header::from_slice(&pkt.bytes()[14..]).unwrap();
    etherparse::TcpHeader::from_slice(rest)
        .unwrap()
        .0
        .source_port
}

#[test]
fn a_reload_that_removes_a_forward_gives_its_port_back_to_masquerade() {
    let (mut gw, _) = pipeline(router([None, None]));
    assert_ne!(external_source_port(&mut gw, &lan_syn_from_8080(2)), 8080);
    let mut without_forward = Arc::try_unwrap(router([None, None])).unwrap();
    without_forward.stateful.port_forwards.clear();
    gw.set_router(Arc::new(without_forward));
    assert_eq!(external_source_port(&mut gw, &lan_syn_from_8080(4)), 8080);
}

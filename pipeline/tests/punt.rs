//! The exception path to the kernel twins: what is punted (traffic for the gateway's own
//! addresses that the `local` rules admit and the dataplane does not answer, broadcast DHCP)
//! and what never is (routed traffic, port forwards, echo requests, ARP), the local rules,
//! and the per-worker budget. A home gateway: LAN 192.168.10.1/24 (zone 0, with a twin
//! unless a test says otherwise), WAN 10.0.0.1/24 (zone 1, masquerading, no twin), lan->wan
//! and lan->local accepted, everything else dropped.

mod common;
use common::*;

use std::sync::Arc;

use etherparse::PacketBuilder;
use pipeline::pipeline::config::PuntConfig;
use pipeline::pipeline::config::{PortForward, Stateful};
use pipeline::state::firewall::{Action, Policy, Rule, RuleSet, ZoneId};
use pipeline::wire::EthernetAddress;
use pipeline::{
    ControlWork, DropReason, IcmpLimits, NeighborView, PacketBuf, Pipeline, RouterConfig, Verdict,
    WorkerCounters,
};

const REMOTE: [u8; 4] = [203, 0, 113, 5];

fn allow(name: &str, from: ZoneId, protocol: u8, port: u16) -> Rule {
    Rule {
        from: Some(from),
        to: Some(ZoneId::LOCAL),
        protocol: Some(protocol),
        dst_ports: Some(port..=port),
        ..Rule::matching_all(name, Action::Accept)
    }
}

/// The gateway with `twins` (per port) and `rules`; `lan_local` is the lan->local policy.
fn gateway(twins: [bool; 2], rules: Vec<Rule>, lan_local: Action, budget: (u32, u32)) -> Gw {
    gateway_on(interfaces(1500), twins, rules, lan_local, budget)
}

fn gateway_on(
    interfaces: Vec<pipeline::pipeline::config::Interface>,
    twins: [bool; 2],
    rules: Vec<Rule>,
    lan_local: Action,
    budget: (u32, u32),
) -> Gw {
    let policy = Policy::new(Action::Drop)
        .set(LAN_ZONE, WAN_ZONE, Action::Accept)
        .set(LAN_ZONE, ZoneId::LOCAL, lan_local);
    let stateful = Stateful {
        content: None,
        zones: vec![LAN_ZONE, WAN_ZONE],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(rules, policy).unwrap(),
        port_mappings: Default::default(),
        port_forwards: vec![PortForward {
            interface: WAN,
            protocol: 6,
            ports: 8080..=8080,
            to: ip(HOST),
            to_port: 80,
        }],
        recheck_established: false,
        generation: 0,
    };
    let config = RouterConfig::new(interfaces, &[default_route()], IcmpLimits::default())
        .unwrap()
        .with_stateful(stateful)
        .unwrap()
        .with_punt(PuntConfig {
            twins: twins.to_vec(),
            dhcp_clients: vec![false; 2],
            per_sec: budget.0,
            burst: budget.1,
        })
        .unwrap();
    let neighbors = NeighborView::new([
        (ip(UPSTREAM), EthernetAddress(UPSTREAM_MAC)),
        (ip(HOST), EthernetAddress(HOST_MAC)),
    ]);
    let counters = Arc::new(WorkerCounters::default());
    let pipeline = Pipeline::new(Arc::new(config), Arc::new(neighbors), counters.clone());
    Gw { pipeline, counters }
}

fn lan_gateway() -> Gw {
    let budget = (PuntConfig::DEFAULT_PER_SEC, PuntConfig::DEFAULT_BURST);
    gateway([true, false], Vec::new(), Action::Accept, budget)
}

struct Gw {
    pipeline: Pipeline,
    counters: Arc<WorkerCounters>,
}

impl Gw {
    /// The verdict, and whether the frame came out as it went in.
    fn process(&mut self, frame: &[u8], ingress: u16, now_ns: u64) -> (Verdict, bool) {
        let (verdict, out) = self.process_out(frame, ingress, now_ns);
        (verdict, out == frame)
    }

    /// The verdict, and the frame as it came out.
    fn process_out(&mut self, frame: &[u8], ingress: u16, now_ns: u64) -> (Verdict, Vec<u8>) {
        let mut room = [0xa5; 2048];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let verdict = self.pipeline.process(&mut pkt, ingress, now_ns);
        (verdict, pkt.bytes().to_vec())
    }
}

fn tcp_syn(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], port: u16) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src, dst, 64)
        .tcp(40000, port, 1, 1024)
        .syn()
        .write(&mut frame, &[])
        .unwrap();
    frame
}

fn udp(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ports: (u16, u16),
) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src, dst, 64)
        .udp(ports.0, ports.1)
        .write(&mut frame, &[0u8; 240])
        .unwrap();
    frame
}

/// A DHCPDISCOVER as a client without an address sends it.
fn dhcp_discover() -> Vec<u8> {
    udp(HOST_MAC, BROADCAST_MAC, [0; 4], [255; 4], (68, 67))
}

fn icmp(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4], reply: bool) -> Vec<u8> {
    let mut frame = Vec::new();
    let builder = PacketBuilder::ethernet2(src_mac, dst_mac).ipv4(src, dst, 64);
    let builder = if reply {
        builder.icmpv4_echo_reply(7, 1)
    } else {
        builder.icmpv4_echo_request(7, 1)
    };
    builder.write(&mut frame, &[0u8; 32]).unwrap();
    frame
}

#[test]
fn tcp_to_the_lan_address_goes_to_the_lan_twin_unchanged() {
    let mut gw = lan_gateway();
    let syn = tcp_syn(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, 22);
    let (verdict, unchanged) = gw.process(&syn, LAN, 0);
    assert_eq!(verdict, Verdict::Punt { port: LAN });
    assert!(unchanged, "the kernel must get the frame as it was sent");
    // The gateway's other address, reached from the LAN, is the kernel's too (weak host).
    let syn = tcp_syn(HOST_MAC, LAN_MAC, HOST, WAN_ADDR, 22);
    assert_eq!(gw.process(&syn, LAN, 0).0, Verdict::Punt { port: LAN });
    let reply = udp(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, (53, 33000));
    assert_eq!(gw.process(&reply, LAN, 0).0, Verdict::Punt { port: LAN });
    assert_eq!(gw.counters.punted.get(), 3);
    assert_eq!(gw.counters.dropped_total(), 0);
}

#[test]
fn without_a_twin_local_traffic_is_dropped_as_before() {
    let budget = (PuntConfig::DEFAULT_PER_SEC, PuntConfig::DEFAULT_BURST);
    let mut gw = gateway([false, false], Vec::new(), Action::Accept, budget);
    let syn = tcp_syn(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, 22);
    assert_eq!(
        gw.process(&syn, LAN, 0).0,
        Verdict::Drop(DropReason::LocalDelivery)
    );
    assert_eq!(
        gw.process(&dhcp_discover(), LAN, 0).0,
        Verdict::Drop(DropReason::MartianAddress)
    );
    assert_eq!(gw.counters.punted.get(), 0);
}

#[test]
fn the_wan_is_refused_by_the_local_policy_and_a_rule_cannot_punt_without_a_twin() {
    let mut gw = lan_gateway();
    for dst in [LAN_ADDR, WAN_ADDR] {
        let syn = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, dst, 22);
        assert_eq!(
            gw.process(&syn, WAN, 0).0,
            Verdict::Drop(DropReason::FirewallDrop),
            "from the WAN to {dst:?}"
        );
    }
    // A local rule admits it, but the WAN has no twin to take it.
    let budget = (PuntConfig::DEFAULT_PER_SEC, PuntConfig::DEFAULT_BURST);
    let rules = vec![allow("ssh-from-wan", WAN_ZONE, 6, 22)];
    let mut gw = gateway([true, false], rules.clone(), Action::Accept, budget);
    let syn = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, WAN_ADDR, 22);
    assert_eq!(
        gw.process(&syn, WAN, 0).0,
        Verdict::Drop(DropReason::LocalDelivery)
    );
    // With a WAN twin, the rule opens it.
    let mut gw = gateway([true, true], rules, Action::Accept, budget);
    assert_eq!(gw.process(&syn, WAN, 0).0, Verdict::Punt { port: WAN });
    let other = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, WAN_ADDR, 23);
    assert_eq!(
        gw.process(&other, WAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
}

#[test]
fn a_lan_local_drop_policy_keeps_the_kernel_out_of_reach() {
    let budget = (PuntConfig::DEFAULT_PER_SEC, PuntConfig::DEFAULT_BURST);
    let rules = vec![allow("dhcp", LAN_ZONE, 17, 67)];
    let mut gw = gateway([true, false], rules, Action::Drop, budget);
    let syn = tcp_syn(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, 22);
    assert_eq!(
        gw.process(&syn, LAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
    // The rule for DHCP admits broadcast DHCP; other broadcast UDP stays martian.
    assert_eq!(
        gw.process(&dhcp_discover(), LAN, 0).0,
        Verdict::Punt { port: LAN }
    );
    let broadcast_dns = udp(HOST_MAC, BROADCAST_MAC, HOST, [255; 4], (5353, 53));
    assert_eq!(
        gw.process(&broadcast_dns, LAN, 0).0,
        Verdict::Drop(DropReason::MartianAddress)
    );
    // Without the rule, the policy drops DHCP too.
    let mut gw = gateway([true, false], Vec::new(), Action::Drop, budget);
    assert_eq!(
        gw.process(&dhcp_discover(), LAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
}

#[test]
fn broadcast_dhcp_reaches_the_twin_of_the_port_it_came_in_by_only() {
    let mut gw = lan_gateway();
    let (verdict, unchanged) = gw.process(&dhcp_discover(), LAN, 0);
    assert_eq!(verdict, Verdict::Punt { port: LAN });
    assert!(unchanged);
    // A renewing client broadcasts from its address (REBINDING).
    let rebind = udp(HOST_MAC, BROADCAST_MAC, HOST, [255; 4], (68, 67));
    assert_eq!(gw.process(&rebind, LAN, 0).0, Verdict::Punt { port: LAN });
    // The WAN has no twin: broadcast DHCP there is martian, as it always was.
    let on_wan = udp(UPSTREAM_MAC, BROADCAST_MAC, [0; 4], [255; 4], (68, 67));
    assert_eq!(
        gw.process(&on_wan, WAN, 0).0,
        Verdict::Drop(DropReason::MartianAddress)
    );
}

#[test]
fn echo_requests_and_arp_stay_with_the_dataplane_echo_replies_go_to_the_kernel() {
    let mut gw = lan_gateway();
    let request = icmp(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, false);
    assert_eq!(
        gw.process(&request, LAN, 0).0,
        Verdict::Control(ControlWork::LocalIcmp)
    );
    let reply = icmp(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, true);
    assert_eq!(gw.process(&reply, LAN, 0).0, Verdict::Punt { port: LAN });
    let mut arp = Vec::new();
    arp.extend_from_slice(&BROADCAST_MAC);
    arp.extend_from_slice(&HOST_MAC);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&HOST_MAC);
    arp.extend_from_slice(&HOST);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&LAN_ADDR);
    assert_eq!(
        gw.process(&arp, LAN, 0).0,
        Verdict::Control(ControlWork::Arp)
    );
}

#[test]
fn routed_and_forwarded_traffic_is_never_punted() {
    let mut gw = lan_gateway();
    let out = tcp_syn(HOST_MAC, LAN_MAC, HOST, REMOTE, 443);
    assert_eq!(gw.process(&out, LAN, 0).0, Verdict::Transmit { port: WAN });
    // To the WAN address, but a port forward's: the LAN host's, not the kernel's.
    let forwarded = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, WAN_ADDR, 8080);
    assert_eq!(
        gw.process(&forwarded, WAN, 0).0,
        Verdict::Transmit { port: LAN }
    );
    assert_eq!(gw.counters.punted.get(), 0);
}

#[test]
fn a_flood_at_the_lan_address_is_held_to_the_punt_budget_and_forwarding_goes_on() {
    let mut gw = gateway([true, false], Vec::new(), Action::Accept, (10, 3));
    let mut punted = 0;
    for port in 0..100u16 {
        let flood = udp(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, (40000 + port, 9));
        match gw.process(&flood, LAN, SECOND).0 {
            Verdict::Punt { port: LAN } => punted += 1,
            Verdict::Drop(DropReason::PuntPoliced) => {}
            other => panic!("{other:?}"),
        }
        let routed = udp(HOST_MAC, LAN_MAC, HOST, REMOTE, (50000 + port, 9));
        assert_eq!(
            gw.process(&routed, LAN, SECOND).0,
            Verdict::Transmit { port: WAN },
            "forwarding during the flood"
        );
    }
    assert_eq!(punted, 3, "the burst");
    assert_eq!(gw.counters.dropped(DropReason::PuntPoliced), 97);
    // Half a second later, five more tokens.
    let mut later = 0;
    for port in 0..20u16 {
        let flood = udp(HOST_MAC, LAN_MAC, HOST, LAN_ADDR, (41000 + port, 9));
        later += matches!(
            gw.process(&flood, LAN, SECOND + SECOND / 2).0,
            Verdict::Punt { .. }
        ) as u32;
    }
    assert_eq!(later, 3, "refilled at 10/s but capped at the burst of 3");
}

/// One box of an HA pair: the LAN's and the WAN's virtual addresses (keepalived's, shared with
/// the peer box), twins on both interfaces, and `rules`.
const LAN_VIRTUAL: [u8; 4] = [192, 168, 10, 254];
const WAN_VIRTUAL: [u8; 4] = [10, 0, 0, 254];
/// The peer box's own addresses.
const PEER_LAN: [u8; 4] = [192, 168, 10, 3];
const PEER_WAN: [u8; 4] = [10, 0, 0, 3];
const PEER_MAC: [u8; 6] = [0x02, 0xcc, 0, 0, 0, 3];

fn pair_box(rules: Vec<Rule>) -> Gw {
    let mut interfaces = interfaces(1500);
    interfaces[usize::from(LAN)].virtual_addr = Some(ip(LAN_VIRTUAL));
    interfaces[usize::from(WAN)].virtual_addr = Some(ip(WAN_VIRTUAL));
    let budget = (PuntConfig::DEFAULT_PER_SEC, PuntConfig::DEFAULT_BURST);
    gateway_on(interfaces, [true, true], rules, Action::Accept, budget)
}

/// The source and destination addresses of an IPv4 frame.
fn addresses(frame: &[u8]) -> ([u8; 4], [u8; 4]) {
    let ip = &frame[ETH_LEN..];
    (
        ip[12..16].try_into().unwrap(),
        ip[16..20].try_into().unwrap(),
    )
}

#[test]
fn a_box_of_a_pair_masquerades_to_the_virtual_address_and_forwards_on_it() {
    let mut gw = pair_box(Vec::new());
    // Outbound: translated to the WAN's virtual address, which the peer would use too.
    let out = tcp_syn(HOST_MAC, LAN_MAC, HOST, REMOTE, 443);
    let (verdict, frame) = gw.process_out(&out, LAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: WAN });
    assert_eq!(addresses(&frame), (WAN_VIRTUAL, REMOTE));
    // The port forward answers on the virtual address.
    let forwarded = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, WAN_VIRTUAL, 8080);
    let (verdict, frame) = gw.process_out(&forwarded, WAN, 0);
    assert_eq!(verdict, Verdict::Transmit { port: LAN });
    assert_eq!(addresses(&frame), (REMOTE, HOST));
    // It is one of the gateway's addresses: the kernel's from the LAN, the WAN's policy's
    // from outside; and no host may send from it.
    let to_twin = tcp_syn(HOST_MAC, LAN_MAC, HOST, LAN_VIRTUAL, 22);
    assert_eq!(gw.process(&to_twin, LAN, 0).0, Verdict::Punt { port: LAN });
    let from_wan = tcp_syn(UPSTREAM_MAC, WAN_MAC, REMOTE, WAN_VIRTUAL, 22);
    assert_eq!(
        gw.process(&from_wan, WAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
    let spoofed = tcp_syn(HOST_MAC, LAN_MAC, LAN_VIRTUAL, REMOTE, 443);
    assert_eq!(
        gw.process(&spoofed, LAN, 0).0,
        Verdict::Drop(DropReason::MartianAddress)
    );
}

/// A VRRP advert (IP protocol 112) from `src` to `dst` with `ttl`.
fn vrrp(src: [u8; 4], dst: [u8; 4], ttl: u8) -> Vec<u8> {
    const VRRP_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 18];
    let mut frame = Vec::new();
    PacketBuilder::ethernet2(PEER_MAC, VRRP_MAC)
        .ipv4(src, dst, ttl)
        .write(
            &mut frame,
            etherparse::IpNumber(112),
            &[0x31, 51, 100, 1, 0, 30, 0, 0],
        )
        .unwrap();
    frame
}

fn vrrp_rule(from: ZoneId) -> Rule {
    Rule {
        from: Some(from),
        to: Some(ZoneId::LOCAL),
        protocol: Some(112),
        ..Rule::matching_all("vrrp-from-the-peer", Action::Accept)
    }
}

#[test]
fn vrrp_adverts_from_a_neighbour_reach_the_twin_by_a_rule_and_no_other_multicast_does() {
    const GROUP: [u8; 4] = [224, 0, 0, 18];
    let martian = Verdict::Drop(DropReason::MartianAddress);
    // Without a rule, not even the LAN's policy to local (accept) lets an advert in.
    let mut gw = pair_box(Vec::new());
    for (src, port) in [(PEER_LAN, LAN), (PEER_WAN, WAN)] {
        let advert = vrrp(src, GROUP, 255);
        assert_eq!(
            gw.process(&advert, port, 0).0,
            Verdict::Drop(DropReason::FirewallDrop)
        );
    }
    let mut gw = pair_box(vec![vrrp_rule(LAN_ZONE), vrrp_rule(WAN_ZONE)]);
    for (src, port) in [(PEER_LAN, LAN), (PEER_WAN, WAN)] {
        let (verdict, unchanged) = gw.process(&vrrp(src, GROUP, 255), port, 0);
        assert_eq!(verdict, Verdict::Punt { port });
        assert!(unchanged, "keepalived checks the advert as sent (TTL 255)");
    }
    // Only from a neighbour on the interface's subnet, never from ourselves or from afar,
    // only with TTL 255 and to VRRP's group, and only where there is a twin.
    for (src, dst, ttl) in [
        (REMOTE, GROUP, 255),
        (PEER_LAN, GROUP, 255),
        (WAN_VIRTUAL, GROUP, 255),
        (WAN_ADDR, GROUP, 255),
        (PEER_WAN, GROUP, 254),
        (PEER_WAN, [224, 0, 0, 5], 255),
        (PEER_WAN, [239, 1, 1, 1], 255),
    ] {
        let frame = vrrp(src, dst, ttl);
        assert_eq!(
            gw.process(&frame, WAN, 0).0,
            martian,
            "{src:?} -> {dst:?} ttl {ttl}"
        );
    }
    // mDNS from a LAN host stays off the kernel, whatever the LAN's policy to local says.
    let mdns = udp(
        HOST_MAC,
        [0x01, 0x00, 0x5e, 0, 0, 0xfb],
        HOST,
        [224, 0, 0, 251],
        (5353, 5353),
    );
    assert_eq!(gw.process(&mdns, LAN, 0).0, martian);
    let mut no_twin = gateway(
        [false, false],
        vec![vrrp_rule(LAN_ZONE)],
        Action::Accept,
        (100, 100),
    );
    assert_eq!(
        no_twin.process(&vrrp(PEER_LAN, GROUP, 255), LAN, 0).0,
        martian
    );
}

/// UPnP's SSDP searches (UDP to 239.255.255.250:1900) from a LAN host reach the LAN twin,
/// where the port mapping server answers, only by a rule: the LAN's policy to `local`
/// (accept here) does not admit them, nor anything else to the group or its port.
#[test]
fn ssdp_searches_from_a_lan_host_reach_the_twin_by_a_rule_only() {
    const SSDP_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0x7f, 0xff, 0xfa];
    const GROUP: [u8; 4] = [239, 255, 255, 250];
    let datagram = |src, dst, port, text: &[u8]| {
        let mut frame = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC, SSDP_MAC)
            .ipv4(src, dst, 2)
            .udp(40000, port)
            .write(&mut frame, text)
            .unwrap();
        frame
    };
    let search = |src, dst, port| datagram(src, dst, port, b"M-SEARCH * HTTP/1.1\r\n\r\n");
    let notify = |src, dst, port| datagram(src, dst, port, b"NOTIFY * HTTP/1.1\r\n\r\n");
    let martian = Verdict::Drop(DropReason::MartianAddress);
    let mut open = gateway([true, true], Vec::new(), Action::Accept, (100, 100));
    assert_eq!(
        open.process(&search(HOST, GROUP, 1900), LAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
    let rule = allow("upnp-search", LAN_ZONE, 17, 1900);
    let mut gw = gateway([true, true], vec![rule], Action::Accept, (100, 100));
    assert_eq!(
        gw.process(&search(HOST, GROUP, 1900), LAN, 0).0,
        Verdict::Punt { port: LAN }
    );
    // A NOTIFY, another port of the group, another group, a source off the link, the
    // gateway's own.
    assert_eq!(gw.process(&notify(HOST, GROUP, 1900), LAN, 0).0, martian);
    for (src, dst, port) in [
        (HOST, GROUP, 1901),
        (HOST, [239, 255, 255, 251], 1900),
        (REMOTE, GROUP, 1900),
        (LAN_ADDR, GROUP, 1900),
    ] {
        assert_eq!(
            gw.process(&search(src, dst, port), LAN, 0).0,
            martian,
            "{src:?} -> {dst:?}:{port}"
        );
    }
    // From the WAN, by the LAN's rule: no.
    assert_eq!(
        gw.process(&search(UPSTREAM, GROUP, 1900), WAN, 0).0,
        Verdict::Drop(DropReason::FirewallDrop)
    );
}

//! ARP as the control thread sees it: frames go through `control::handle_arp` with a real
//! neighbour table, and what comes out (the reply, the drop reason, probes, the table's
//! bindings) is checked. The attacker throughout is a LAN guest making claims with its own MAC.

use std::net::Ipv4Addr;

use etherparse::{EtherType, Ethernet2Header};
use pipeline::l3::neigh::{ArpProbe, Lookup, NeighborConfig, NeighborState, NeighborTable};
use pipeline::pipeline::local::arp::{self as control, ArpHandled};
use pipeline::wire::{ArpOperation, ArpPacket, ArpRepr, EthernetAddress};
use pipeline::{DropReason, Interface, PacketBuf};

const ROOM: usize = 2048;
const GARBAGE: u8 = 0xa5;
const SECOND: u64 = 1_000_000_000;

const LAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const WAN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
const LAN_ADDR: [u8; 4] = [192, 168, 10, 1];
const WAN_ADDR: [u8; 4] = [10, 0, 0, 1];
/// A LAN host.
const HOST: [u8; 4] = [192, 168, 10, 2];
const HOST_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x02];
/// The MAC of the LAN guest who lies.
const GUEST_MAC: [u8; 6] = [0x02, 0x66, 0, 0, 0, 0x66];
/// The upstream router on the WAN side, and another WAN host.
const UPSTREAM: [u8; 4] = [10, 0, 0, 2];
const UPSTREAM_MAC: [u8; 6] = [0x02, 0xbb, 0, 0, 0, 0x02];
const WAN_HOST: [u8; 4] = [10, 0, 0, 3];
const BROADCAST_MAC: [u8; 6] = [0xff; 6];
const REQUEST: u16 = 1;
const REPLY: u16 = 2;

fn ip(octets: [u8; 4]) -> Ipv4Addr {
    Ipv4Addr::from(octets)
}

fn lan() -> Interface {
    Interface {
        mac: EthernetAddress(LAN_MAC),
        addr: ip(LAN_ADDR),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

fn wan() -> Interface {
    Interface {
        mac: EthernetAddress(WAN_MAC),
        addr: ip(WAN_ADDR),
        prefix_len: 24,
        mtu: 1500,
        virtual_addr: None,
    }
}

struct Frame {
    eth_dst: [u8; 6],
    op: u16,
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
}

impl Frame {
    fn bytes(&self) -> Vec<u8> {
        let mut frame = Vec::with_capacity(60);
        frame.extend_from_slice(&self.eth_dst);
        frame.extend_from_slice(&self.sha);
        frame.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04]);
        frame.extend_from_slice(&self.op.to_be_bytes());
        frame.extend_from_slice(&self.sha);
        frame.extend_from_slice(&self.spa);
        frame.extend_from_slice(&self.tha);
        frame.extend_from_slice(&self.tpa);
        frame.resize(60, 0);
        frame
    }
}

/// "who-has `tpa` tell `spa` (at `sha`)", broadcast.
fn request(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    Frame {
        eth_dst: BROADCAST_MAC,
        op: REQUEST,
        sha,
        spa,
        tha: [0; 6],
        tpa,
    }
    .bytes()
}

/// A reply addressed to the interface `to` (its MAC and address).
fn reply_to(to: &Interface, sha: [u8; 6], spa: [u8; 4]) -> Vec<u8> {
    Frame {
        eth_dst: to.mac.0,
        op: REPLY,
        sha,
        spa,
        tha: to.mac.0,
        tpa: to.addr.octets(),
    }
    .bytes()
}

/// The gratuitous forms: a request and a broadcast reply for the sender's own address.
fn gratuitous(sha: [u8; 6], spa: [u8; 4]) -> [Vec<u8>; 2] {
    [
        request(sha, spa, spa),
        Frame {
            eth_dst: BROADCAST_MAC,
            op: REPLY,
            sha,
            spa,
            tha: BROADCAST_MAC,
            tpa: spa,
        }
        .bytes(),
    ]
}

/// The control thread's ARP state: the table, and the held packets it released or evicted.
struct Control {
    table: NeighborTable<u32>,
    released: Vec<(u32, EthernetAddress)>,
    evicted: Vec<u32>,
    /// This box's twin holds the interfaces' virtual addresses (VRRP master).
    holds_virtual: bool,
}

impl Control {
    fn new() -> Control {
        Control {
            table: NeighborTable::new(NeighborConfig::default()),
            released: Vec::new(),
            evicted: Vec::new(),
            holds_virtual: false,
        }
    }

    fn receive(&mut self, frame: &[u8], iface: &Interface, now_ns: u64) -> (ArpHandled, Vec<u8>) {
        let mut room = [GARBAGE; ROOM];
        room[..frame.len()].copy_from_slice(frame);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let (released, evicted) = (&mut self.released, &mut self.evicted);
        let handled = control::handle_arp(
            &mut pkt,
            (iface, self.holds_virtual),
            &mut self.table,
            now_ns,
            |held, mac| released.push((held, mac)),
            |held| evicted.push(held),
        );
        (handled, pkt.bytes().to_vec())
    }

    /// Resolves `addr` the ordinary way: our request on `iface`, then its answer.
    fn resolve(&mut self, iface: &Interface, addr: [u8; 4], mac: [u8; 6], now_ns: u64) {
        assert_eq!(
            self.table.lookup(ip(addr), now_ns, |_| ()),
            Lookup::Pending { send_request: true }
        );
        let (handled, _) = self.receive(&reply_to(iface, mac, addr), iface, now_ns);
        assert_eq!(handled, consumed(true));
        assert_eq!(self.mac_of(addr), Some(mac));
    }

    fn mac_of(&self, addr: [u8; 4]) -> Option<[u8; 6]> {
        self.table.get(ip(addr)).map(|(mac, _)| mac)
    }
}

fn dropped(reason: DropReason) -> ArpHandled {
    ArpHandled {
        replied: false,
        view_changed: false,
        probe: None,
        dropped: Some(reason),
    }
}

fn consumed(view_changed: bool) -> ArpHandled {
    ArpHandled {
        replied: false,
        view_changed,
        probe: None,
        dropped: None,
    }
}

fn parse_arp(frame: &[u8]) -> (Ethernet2Header, ArpRepr) {
    let (eth, rest) = Ethernet2Header::from_slice(frame).unwrap();
    assert_eq!(eth.ether_type, EtherType::ARP);
    let repr = ArpRepr::parse(&ArpPacket::new_checked(rest).unwrap()).unwrap();
    (eth, repr)
}

#[test]
fn a_request_for_us_is_answered_and_its_sender_learnt_unconfirmed() {
    let mut control = Control::new();
    let (handled, reply) = control.receive(&request(HOST_MAC, HOST, LAN_ADDR), &lan(), 0);
    assert_eq!(
        handled,
        ArpHandled {
            replied: true,
            view_changed: true,
            probe: None,
            dropped: None,
        }
    );
    let mut expected = Vec::new();
    expected.extend_from_slice(&HOST_MAC);
    expected.extend_from_slice(&LAN_MAC);
    expected.extend_from_slice(&[0x08, 0x06]);
    expected.extend_from_slice(&[0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02]);
    expected.extend_from_slice(&LAN_MAC);
    expected.extend_from_slice(&LAN_ADDR);
    expected.extend_from_slice(&HOST_MAC);
    expected.extend_from_slice(&HOST);
    expected.resize(60, 0);
    assert_eq!(reply, expected);
    assert_eq!(
        control.table.get(ip(HOST)),
        Some((HOST_MAC, NeighborState::Stale))
    );
    // Asked again by the same host: answered, nothing changes.
    let (handled, _) = control.receive(&request(HOST_MAC, HOST, LAN_ADDR), &lan(), 1);
    assert_eq!((handled.replied, handled.view_changed), (true, false));
}

#[test]
fn a_lan_guest_cannot_bind_wan_addresses_in_any_form() {
    let mut control = Control::new();
    control.resolve(&wan(), UPSTREAM, UPSTREAM_MAC, 0);
    // The gateway is resolving the other WAN host just now, so a reply would be an answer
    // if it came in on the right port.
    assert_eq!(
        control.table.lookup(ip(WAN_HOST), 0, |_| ()),
        Lookup::Pending { send_request: true }
    );
    for claimed in [UPSTREAM, WAN_HOST, [172, 16, 3, 4]] {
        let [gratuitous_request, gratuitous_reply] = gratuitous(GUEST_MAC, claimed);
        for frame in [
            // The reported attack: "who-has <gateway LAN address> tell <WAN host>".
            request(GUEST_MAC, claimed, LAN_ADDR),
            gratuitous_request,
            gratuitous_reply,
            reply_to(&lan(), GUEST_MAC, claimed),
            reply_to(&wan(), GUEST_MAC, claimed),
        ] {
            let (handled, after) = control.receive(&frame, &lan(), 10 * SECOND);
            assert_eq!(handled, dropped(DropReason::ArpWrongInterface));
            assert_eq!(after, frame, "not answered");
        }
    }
    assert_eq!(control.mac_of(UPSTREAM), Some(UPSTREAM_MAC));
    assert_eq!(
        control.table.get(ip(WAN_HOST)),
        Some(([0; 6], NeighborState::Incomplete))
    );
    assert_eq!(control.table.len(), 2);
}

#[test]
fn only_host_addresses_of_the_ingress_subnet_are_neighbours() {
    let mut control = Control::new();
    for claimed in [[192, 168, 10, 0], [192, 168, 10, 255]] {
        let (handled, _) = control.receive(&request(GUEST_MAC, claimed, LAN_ADDR), &lan(), 0);
        assert_eq!(handled, dropped(DropReason::ArpWrongInterface));
    }
    assert!(control.table.is_empty());
    // On a point-to-point /31 both addresses are hosts (RFC 3021).
    let p2p = Interface {
        prefix_len: 31,
        addr: Ipv4Addr::new(10, 9, 0, 0),
        ..wan()
    };
    assert!(control::is_neighbor_address(
        &p2p,
        Ipv4Addr::new(10, 9, 0, 1)
    ));
    assert!(!control::is_neighbor_address(
        &p2p,
        Ipv4Addr::new(10, 9, 0, 2)
    ));
    assert!(control::is_neighbor_address(&lan(), ip(HOST)));
    assert!(!control::is_neighbor_address(&lan(), ip(UPSTREAM)));
}

/// An HA pair's shared address on the LAN (keepalived's VRRP address on the twins).
const VIRTUAL: [u8; 4] = [192, 168, 10, 254];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

fn lan_of_pair() -> Interface {
    Interface {
        virtual_addr: Some(ip(VIRTUAL)),
        ..lan()
    }
}

#[test]
fn the_virtual_address_is_answered_only_while_held_and_the_peers_claim_binds_nothing() {
    let mut control = Control::new();
    // Backup: a host asking for the virtual address gets no answer from us (the master
    // answers it).
    let (handled, _) = control.receive(&request(HOST_MAC, HOST, VIRTUAL), &lan_of_pair(), 0);
    assert!(
        !handled.replied,
        "the backup answered for the virtual address"
    );
    // The master's gratuitous ARP for it binds nothing here, in either form.
    for frame in gratuitous(PEER_MAC, VIRTUAL) {
        let (handled, _) = control.receive(&frame, &lan_of_pair(), 0);
        assert_eq!(handled, dropped(DropReason::ArpNotForUs));
    }
    assert_eq!(control.mac_of(VIRTUAL), None);
    // Master: answered from the virtual address, with the port's MAC.
    control.holds_virtual = true;
    let (handled, reply) = control.receive(&request(HOST_MAC, HOST, VIRTUAL), &lan_of_pair(), 1);
    assert!(handled.replied && handled.dropped.is_none(), "{handled:?}");
    let (ether, arp) = parse_arp(&reply);
    assert_eq!(ether.destination, HOST_MAC);
    assert_eq!(arp.source_hardware_addr, EthernetAddress(LAN_MAC));
    assert_eq!(arp.source_protocol_addr, ip(VIRTUAL));
    assert_eq!(arp.target_protocol_addr, ip(HOST));
    // And defended: another MAC claiming it while we hold it is a conflict.
    let [claim, _] = gratuitous(PEER_MAC, VIRTUAL);
    let (handled, _) = control.receive(&claim, &lan_of_pair(), 2);
    assert_eq!(handled, dropped(DropReason::ArpClaimsOurAddress));
    // The interface's own address is answered either way.
    control.holds_virtual = false;
    let (handled, _) = control.receive(&request(HOST_MAC, HOST, LAN_ADDR), &lan_of_pair(), 3);
    assert!(handled.replied);
}

#[test]
fn a_claim_on_our_own_address_is_a_conflict_and_our_own_echo_is_not() {
    let mut control = Control::new();
    let [claim, _] = gratuitous(GUEST_MAC, LAN_ADDR);
    let (handled, _) = control.receive(&claim, &lan(), 0);
    assert_eq!(handled, dropped(DropReason::ArpClaimsOurAddress));
    let [ours, _] = gratuitous(LAN_MAC, LAN_ADDR);
    let (handled, _) = control.receive(&ours, &lan(), 0);
    assert_eq!(handled, dropped(DropReason::ArpNotForUs));
    assert!(control.table.is_empty());
}

#[test]
fn a_guest_claiming_a_lan_neighbour_is_locked_out_then_checked_with_the_neighbour() {
    let mut control = Control::new();
    control.resolve(&lan(), HOST, HOST_MAC, 0);
    let claims = |control: &mut Control, now_ns| -> Vec<ArpHandled> {
        let [gratuitous_request, gratuitous_reply] = gratuitous(GUEST_MAC, HOST);
        [
            request(GUEST_MAC, HOST, LAN_ADDR),
            gratuitous_request,
            gratuitous_reply,
            reply_to(&lan(), GUEST_MAC, HOST),
        ]
        .iter()
        .map(|frame| control.receive(frame, &lan(), now_ns).0)
        .collect()
    };
    // Within a second of the confirmation: refused outright, not even a probe.
    for handled in claims(&mut control, SECOND / 2) {
        assert_eq!(handled, dropped(DropReason::ArpLocked));
    }
    // Later: refused until proven, and the first claim sends one unicast probe to the MAC
    // we know. A "reply" from the guest is no answer to a probe it could not receive.
    let later = claims(&mut control, 5 * SECOND);
    assert_eq!(
        later[0],
        ArpHandled {
            probe: Some(ArpProbe {
                ip: ip(HOST),
                unicast: Some(HOST_MAC),
            }),
            ..dropped(DropReason::ArpMacChangeUnconfirmed)
        }
    );
    for handled in &later[1..] {
        assert_eq!(*handled, dropped(DropReason::ArpMacChangeUnconfirmed));
    }
    assert_eq!(control.mac_of(HOST), Some(HOST_MAC));
    // The neighbour answers our probe: it stays where it is, and the lock starts over.
    let (handled, _) = control.receive(&reply_to(&lan(), HOST_MAC, HOST), &lan(), 5 * SECOND + 1);
    assert_eq!(handled, consumed(false));
    assert_eq!(
        control.table.get(ip(HOST)),
        Some((HOST_MAC, NeighborState::Reachable))
    );
    for handled in claims(&mut control, 5 * SECOND + 2) {
        assert_eq!(handled, dropped(DropReason::ArpLocked));
    }
}

#[test]
fn a_neighbour_that_really_moved_is_believed_after_our_broadcast_probe() {
    let mut control = Control::new();
    control.resolve(&lan(), HOST, HOST_MAC, 0);
    const NEW_MAC: [u8; 6] = [0x02, 0xaa, 0, 0, 0, 0x99];
    let [announcement, _] = gratuitous(NEW_MAC, HOST);
    let (handled, _) = control.receive(&announcement, &lan(), 5 * SECOND);
    assert_eq!(
        handled.probe,
        Some(ArpProbe {
            ip: ip(HOST),
            unicast: Some(HOST_MAC),
        })
    );
    // The old MAC stays silent; the sweep broadcasts, and the host answers with its new MAC.
    let mut probes = Vec::new();
    control
        .table
        .expire(6 * SECOND, 1024, |_| (), |probe| probes.push(probe));
    assert_eq!(
        probes,
        vec![ArpProbe {
            ip: ip(HOST),
            unicast: None,
        }]
    );
    let (handled, _) = control.receive(&reply_to(&lan(), NEW_MAC, HOST), &lan(), 6 * SECOND + 1);
    assert_eq!(handled, consumed(true));
    assert_eq!(control.mac_of(HOST), Some(NEW_MAC));
}

#[test]
fn an_answer_releases_held_packets_to_the_senders_mac() {
    let mut control = Control::new();
    control.table.lookup(ip(UPSTREAM), 0, |_| ());
    control.table.enqueue(ip(UPSTREAM), 1).unwrap();
    control.table.enqueue(ip(UPSTREAM), 2).unwrap();
    let (handled, _) = control.receive(&reply_to(&wan(), UPSTREAM_MAC, UPSTREAM), &wan(), 1);
    assert_eq!(handled, consumed(true));
    let to = EthernetAddress(UPSTREAM_MAC);
    assert_eq!(control.released, vec![(1, to), (2, to)]);
    assert!(control.evicted.is_empty());
}

#[test]
fn arp_about_hosts_we_do_not_track_teaches_nothing() {
    let mut control = Control::new();
    for frame in [
        reply_to(&lan(), HOST_MAC, HOST),
        request(HOST_MAC, HOST, [192, 168, 10, 77]),
        gratuitous(HOST_MAC, HOST)[0].clone(),
    ] {
        let (handled, after) = control.receive(&frame, &lan(), 0);
        assert_eq!(handled, dropped(DropReason::ArpNotForUs));
        assert_eq!(after, frame, "left as it was");
    }
    assert!(control.table.is_empty());
}

#[test]
fn odd_senders_and_malformed_arp_are_dropped_unanswered() {
    let mut control = Control::new();
    // A multicast sender MAC, or an address probe's unspecified sender (RFC 5227).
    for (sha, spa) in [([0x01, 0, 0x5e, 0, 0, 1], HOST), (HOST_MAC, [0, 0, 0, 0])] {
        let (handled, _) = control.receive(&request(sha, spa, LAN_ADDR), &lan(), 0);
        assert_eq!(handled, dropped(DropReason::ArpNotForUs));
    }
    let good = request(HOST_MAC, HOST, LAN_ADDR);
    for len in [0, 13, 14, 41] {
        let (handled, _) = control.receive(&good[..len], &lan(), 0);
        assert_eq!(handled, dropped(DropReason::MalformedArp), "{len} bytes");
    }
    let mut not_ipv4 = good.clone();
    not_ipv4[16] = 0x86;
    let mut unknown_op = good.clone();
    unknown_op[21] = 3;
    for frame in [not_ipv4, unknown_op] {
        let (handled, _) = control.receive(&frame, &lan(), 0);
        assert_eq!(handled, dropped(DropReason::MalformedArp));
    }
    assert!(control.table.is_empty());
}

#[test]
fn a_unicast_probe_goes_to_the_known_mac_only() {
    let mut room = [GARBAGE; ROOM];
    let mut pkt = PacketBuf::new(&mut room, 0);
    let known = EthernetAddress(HOST_MAC);
    assert!(control::write_arp_probe(
        &mut pkt,
        &lan(),
        ip(HOST),
        Some(known)
    ));
    let (eth, repr) = parse_arp(pkt.bytes());
    assert_eq!((eth.destination, eth.source), (HOST_MAC, LAN_MAC));
    assert_eq!(
        repr,
        ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress(LAN_MAC),
            source_protocol_addr: ip(LAN_ADDR),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ip(HOST),
        }
    );
}

mod guest_sequences {
    use super::*;
    use proptest::prelude::*;

    /// One frame from the guest's port: any operation, sender address among the interesting
    /// ones (a WAN host, the upstream router, the LAN host, the gateway's own address), any
    /// target, always with the guest's MAC as sender.
    #[derive(Clone, Debug)]
    struct GuestFrame {
        reply: bool,
        spa: [u8; 4],
        to_gateway: bool,
        gratuitous: bool,
        after_ms: u64,
    }

    fn guest_frame() -> impl Strategy<Value = GuestFrame> {
        (
            any::<bool>(),
            prop::sample::select(vec![WAN_HOST, UPSTREAM, HOST, LAN_ADDR, WAN_ADDR]),
            any::<bool>(),
            any::<bool>(),
            0u64..1500,
        )
            .prop_map(
                |(reply, spa, to_gateway, gratuitous, after_ms)| GuestFrame {
                    reply,
                    spa,
                    to_gateway,
                    gratuitous,
                    after_ms,
                },
            )
    }

    impl GuestFrame {
        fn bytes(&self) -> Vec<u8> {
            let lan = lan();
            let (tha, tpa) = match (self.gratuitous, self.to_gateway) {
                (true, _) => ([0; 6], self.spa),
                (false, true) => (lan.mac.0, LAN_ADDR),
                (false, false) => ([0; 6], [192, 168, 10, 77]),
            };
            Frame {
                eth_dst: if self.to_gateway {
                    LAN_MAC
                } else {
                    BROADCAST_MAC
                },
                op: if self.reply { REPLY } else { REQUEST },
                sha: GUEST_MAC,
                spa: self.spa,
                tha,
                tpa,
            }
            .bytes()
        }
    }

    proptest! {
        /// Whatever the guest sends, and whenever, the upstream router and the WAN host keep
        /// the MACs learnt on the WAN port, and the LAN host, which answers every probe sent
        /// to it, keeps its own. Nothing the guest sends is ever answered.
        #[test]
        fn no_guest_sequence_moves_another_hosts_binding(
            frames in proptest::collection::vec(guest_frame(), 1..120),
        ) {
            let mut control = Control::new();
            control.resolve(&wan(), UPSTREAM, UPSTREAM_MAC, 0);
            control.resolve(&wan(), WAN_HOST, UPSTREAM_MAC, 0);
            control.resolve(&lan(), HOST, HOST_MAC, 0);
            let mut now = 0;
            for frame in frames {
                now += frame.after_ms * 1_000_000;
                let (handled, _) = control.receive(&frame.bytes(), &lan(), now);
                prop_assert!(!handled.replied);
                prop_assert!(!handled.view_changed);
                prop_assert!(handled.dropped.is_some());
                if let Some(probe) = handled.probe {
                    // Only the LAN host's binding is ever checked, and only with its own MAC.
                    prop_assert_eq!(probe, ArpProbe { ip: ip(HOST), unicast: Some(HOST_MAC) });
                    let answer = reply_to(&lan(), HOST_MAC, HOST);
                    prop_assert_eq!(control.receive(&answer, &lan(), now + 1).0, consumed(false));
                }
                let mut probes = Vec::new();
                control.table.expire(now, 1024, |_| (), |probe| probes.push(probe));
                prop_assert!(
                    probes.iter().all(|probe| probe.unicast.is_none() && probe.ip != ip(HOST)),
                    "no broadcast check of the LAN host, which always answered: {:?}",
                    probes
                );
                prop_assert_eq!(control.mac_of(UPSTREAM), Some(UPSTREAM_MAC));
                prop_assert_eq!(control.mac_of(WAN_HOST), Some(UPSTREAM_MAC));
                prop_assert_eq!(control.mac_of(HOST), Some(HOST_MAC));
            }
        }
    }
}

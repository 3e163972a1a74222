//! The bench's synthetic traffic and the router config it runs through.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use anyhow::Context;
use pipeline::pipeline::config::{Ipv6Interface, PortForward, Stateful, StaticRoute6};
use pipeline::pipeline::uplinks::{Uplink, UplinkHash, Uplinks};
use pipeline::state::firewall::{Action, Policy, RuleSet, ZoneId};
use pipeline::wire::{checksum, tcp, EthernetAddress, TcpPacket};
use pipeline::{IcmpLimits, Interface, RouterConfig, StaticRoute};

use crate::compile::router::{content_policy, qos_config};
use crate::config::{KeywordBlockConfig, ParentalConfig, QosSettings, TrafficMeterConfig};

/// LAN hosts; flows are spread over them and over remote addresses.
pub(super) const HOSTS: u32 = 1000;
pub(super) const FRAME_LEN: usize = 60; // 64 bytes on the wire with the FCS
/// Ethernet, IPv6 and UDP headers and no payload: 66 bytes on the wire with the FCS, IPv6's
/// smallest UDP datagram.
pub(super) const FRAME6_LEN: usize = 62;
const LAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x10, 0, 0, 0, 0, 1);
const WAN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
pub(super) const UPSTREAM6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 2);

/// The step [`Traffic::next_outbound`] visits flows by: a prime, so coprime to every flow
/// count below it (the bench's tables hold at most 2^28).
const FLOW_STEP: u64 = 2_654_435_761;
const LAN_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const WAN_ADDR: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 1);
pub(super) const UPSTREAM: Ipv4Addr = Ipv4Addr::new(100, 64, 0, 2);
pub(super) const UPSTREAM_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0xff, 0x01]);
/// The second uplink's address and its ISP's router, in the labs that have one.
const WAN2_ADDR: Ipv4Addr = Ipv4Addr::new(100, 65, 0, 1);
pub(super) const UPSTREAM2: Ipv4Addr = Ipv4Addr::new(100, 65, 0, 2);
pub(super) const UPSTREAM2_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0xff, 0x02]);
/// The WAN port forwarded (TCP) to LAN host 0's port 80, the SYN flood's target.
const FORWARDED_PORT: u16 = 8080;
/// Ethernet, IPv4 and a bare TCP header.
const SYN_FRAME_LEN: usize = 54;

/// Every feature switched on, as in `make lab-bench`'s "All on" row: QoS far above the bench's
/// rate (its cost, not its limit; the policer, as docs/performance.md's figures since issue 7 measured
/// it), the meter, keyword block, and parental control with a policy for some of the bench's
/// hosts that lets them online all day.
const FEATURES: &str = r#"
[qos]
enabled = true
mode = "policer"
uplink_mbps = 1000000
downlink_mbps = 1000000
burst_ms = 20
[[qos.priority]]
protocol = "udp"
ports = "5060-5061"

[traffic_meter]
enabled = true

[keyword_block]
enabled = true
domains = ["blocked-by-bench.example"]
keywords = ["casino"]

[parental_control]
enabled = true
[[parental_control.devices]]
name = "bench-hosts"
addresses = ["10.0.1.0", "10.0.1.1", "10.0.1.2", "10.0.1.3"]
allowed = ["daily 00:00-24:00"]
"#;

/// The feature sections of a config file, parsed and checked as the gateway does.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Features {
    qos: QosSettings,
    traffic_meter: TrafficMeterConfig,
    keyword_block: KeywordBlockConfig,
    parental_control: ParentalConfig,
}

pub(super) fn features() -> anyhow::Result<Features> {
    config::Config::builder()
        .add_source(config::File::from_str(FEATURES, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
        .context("the bench's feature sections")
}

/// [`features`] with QoS in shaper mode (at the same rate far above the bench's): what the
/// shaper costs a packet that its link's share lets through at once.
pub(super) fn shaper_features() -> anyhow::Result<Features> {
    let mut features = features()?;
    features.qos.mode = crate::config::QosModeSetting::Shaper;
    Ok(features)
}

pub(super) fn router_config(
    traffic: &Traffic,
    features: Option<&Features>,
) -> anyhow::Result<RouterConfig> {
    if let Some(second) = &traffic.second_uplink {
        return uplinks_router_config(traffic, second);
    }
    let interfaces = vec![
        Interface {
            mac: traffic.lan_mac,
            addr: LAN_ADDR,
            prefix_len: 16,
            mtu: 1500,
            virtual_addr: None,
        },
        Interface {
            mac: traffic.wan_mac,
            addr: WAN_ADDR,
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        },
    ];
    let (lan, wan) = (ZoneId(0), ZoneId(1));
    let policy = Policy::new(Action::Drop).set(lan, wan, Action::Accept).set(
        lan,
        ZoneId::LOCAL,
        Action::Accept,
    );
    let stateful = Stateful {
        zones: vec![lan, wan],
        masquerade: vec![false, true],
        firewall: RuleSet::compile(Vec::new(), policy)?,
        port_mappings: Default::default(),
        port_forwards: vec![PortForward {
            interface: 1,
            protocol: 6,
            ports: FORWARDED_PORT..=FORWARDED_PORT,
            to: Traffic::host(0),
            to_port: 80,
        }],
        recheck_established: false,
        generation: 0,
        content: match features {
            Some(f) => content_policy(&f.keyword_block, &f.parental_control)?.map(Arc::new),
            None => None,
        },
    };
    let router = RouterConfig::new(interfaces, &fib(), IcmpLimits::default())?;
    let router = router
        .with_stateful(stateful)?
        .with_qos(features.and_then(|f| qos_config(&f.qos)))
        .with_traffic_meter(features.is_some_and(|f| f.traffic_meter.enabled));
    if !traffic.ipv6 {
        return Ok(router);
    }
    // IPv6 on both ports, the default route via the upstream router: the remotes' IPv6
    // addresses all take it (no FIB to scatter them over, unlike IPv4's).
    let side = |mac, addr| {
        Some(Ipv6Interface {
            link_local: pipeline::wire::ipv6::link_local(mac),
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
    Ok(router.with_ipv6(
        vec![side(traffic.lan_mac, LAN6), side(traffic.wan_mac, WAN6)],
        &[default_route],
    )?)
}

/// The router of the labs with a second WAN port (port 2, masqueraded like the first): with
/// `second.shared`, the two ports are uplinks of equal weight sharing the default route by
/// source (`[[uplinks]]`, `routing.hash = "source"`); without, the default route leaves by
/// the first alone, as a gateway with one uplink and a spare port. The FIB is the default
/// route alone, so that every flow's first packet goes through the uplink choice; its
/// `tbl24` is as full (a /0 fills every entry) and its lookups read the same scattered
/// lines as the full FIB's.
fn uplinks_router_config(traffic: &Traffic, second: &SecondUplink) -> anyhow::Result<RouterConfig> {
    let side = |mac, addr, prefix_len| Interface {
        mac,
        addr,
        prefix_len,
        mtu: 1500,
        virtual_addr: None,
    };
    let interfaces = vec![
        side(traffic.lan_mac, LAN_ADDR, 16),
        side(traffic.wan_mac, WAN_ADDR, 24),
        side(second.mac, WAN2_ADDR, 24),
    ];
    let (lan, wan) = (ZoneId(0), ZoneId(1));
    let policy = Policy::new(Action::Drop).set(lan, wan, Action::Accept);
    let stateful = Stateful {
        zones: vec![lan, wan, wan],
        masquerade: vec![false, true, true],
        firewall: RuleSet::compile(Vec::new(), policy)?,
        port_mappings: Default::default(),
        port_forwards: Vec::new(),
        recheck_established: false,
        generation: 0,
        content: None,
    };
    let default_route = StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: UPSTREAM,
    };
    let router = RouterConfig::new(interfaces, &[default_route], IcmpLimits::default())?
        .with_stateful(stateful)?;
    if !second.shared {
        return Ok(router);
    }
    let uplink = |port, gateway| Uplink {
        port,
        gateway: Some(gateway),
        weight: 1,
        priority: 0,
        up: true,
    };
    let uplinks = vec![uplink(1, UPSTREAM), uplink(2, UPSTREAM2)];
    Ok(router.with_uplinks(Uplinks::new(3, uplinks, UplinkHash::Source, Vec::new()))?)
}

/// A lab's second WAN port.
pub(super) struct SecondUplink {
    pub mac: EthernetAddress,
    /// Whether it shares the default route with the first (two uplinks), or stands idle.
    pub shared: bool,
}

/// Flow `f`'s remote IPv6 address: its own, in 2001:db8:8000::/33.
pub(super) fn remote6(flow: u32) -> Ipv6Addr {
    Ipv6Addr::from(0x2001_0db8_8000_0000_0000_0000_0000_0000u128 | u128::from(flow) << 16 | 1)
}

/// Where the remote ends live: 64.0.0.0/3, public unicast, 2^21 /24 blocks.
const REMOTE_SPACE: u32 = 0x4000_0000;
/// /24 blocks in a 64-byte line of the FIB's `tbl24` (2-byte entries): a /19.
const BLOCKS_PER_LINE: u32 = 32;
/// The /19s (`tbl24` lines) of the remote space.
const REMOTE_LINES: u32 = 1 << 16;
/// Odd, so multiplying by it permutes the /19s; large, so consecutive flows land far apart.
const SCATTER: u32 = 0x9e37_79b9;

/// Flow `f`'s remote address: its own address for every flow below 2^21 x 254, and for the
/// first 65,536 flows its own /19, so no two of them share a line of the FIB's `tbl24` and
/// the route lookups of a burst never hit a line another packet brought in. Flow `f` takes
/// /19 number `(f * SCATTER) mod 2^16` (a permutation), the /24 `(f >> 16) mod 32` in it and
/// the host byte `1 + (f >> 21) mod 254`.
pub(super) fn remote(flow: u32) -> Ipv4Addr {
    let line = flow.wrapping_mul(SCATTER) % REMOTE_LINES;
    let block = line * BLOCKS_PER_LINE + (flow / REMOTE_LINES) % BLOCKS_PER_LINE;
    let host = 1 + (flow >> 21) % 254;
    Ipv4Addr::from(REMOTE_SPACE | block << 8 | host)
}

/// The bench router's static routes, all via the upstream router on the WAN port: the
/// default route, and one route in each of the 65,536 /19s of the remotes' space, of a
/// length from /19 to /24 and at a place in its /19 that a hash of the /19 picks (as in a
/// full Internet table, most prefixes are long). A remote outside its /19's route takes the
/// default route, also to WAN. So the FIB is large and sparse, and the lookups of 1M flows
/// read all 4 MiB of `tbl24` that the remotes' space covers.
pub(super) fn fib() -> Vec<StaticRoute> {
    let mut routes = vec![StaticRoute {
        destination: Ipv4Addr::UNSPECIFIED,
        len: 0,
        via: UPSTREAM,
    }];
    routes.extend((0..REMOTE_LINES).map(|line| {
        let hash = mix32(line ^ FIB_SEED);
        let len = 19 + (hash % 6) as u8;
        // Which of the /19's 2^(len-19) prefixes of this length.
        let index = (hash >> 8) & ((1 << (len - 19)) - 1);
        let base = REMOTE_SPACE | line << 13;
        StaticRoute {
            destination: Ipv4Addr::from(base | index << (32 - len)),
            len,
            via: UPSTREAM,
        }
    }));
    routes
}

/// Any constant, for the FIB's prefix lengths.
const FIB_SEED: u32 = 0x2545_f491;

/// The synthetic traffic: flow `f` goes from LAN host `f % HOSTS` (one source port per host,
/// so the NAT keeps one binding per host) to [`remote`]`(f)`, UDP port 443; or, in IPv6,
/// from the host's IPv6 address to [`remote6`]`(f)`, through the firewall untranslated.
pub(super) struct Traffic {
    pub lan_mac: EthernetAddress,
    pub wan_mac: EthernetAddress,
    /// IPv6 flows instead of IPv4's.
    pub ipv6: bool,
    /// A second WAN port (port 2), in the uplinks' labs.
    pub second_uplink: Option<SecondUplink>,
    flows: u32,
    next_new: u32,
    /// Outbound packets generated: which of them open new flows.
    next_packet: u32,
    /// Established flows visited: which one is next.
    next_established: u32,
    syn_counter: u32,
    /// xorshift32 state for the spoofed sources.
    syn_random: u32,
}

impl Traffic {
    pub fn new(lan_mac: EthernetAddress, wan_mac: EthernetAddress, flows: u32) -> Traffic {
        Traffic {
            lan_mac,
            wan_mac,
            ipv6: false,
            second_uplink: None,
            flows,
            next_new: flows,
            next_packet: 0,
            next_established: 0,
            syn_counter: 0,
            syn_random: 0x9e37_79b9,
        }
    }

    pub fn host(index: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 1, 0)) + index)
    }

    pub fn host6(index: u32) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(LAN6) + 2 + u128::from(index))
    }

    pub fn host_mac(index: u32) -> EthernetAddress {
        let [_, _, a, b] = index.to_be_bytes();
        EthernetAddress([0x02, 0, 0, 0x10, a, b])
    }

    /// The next outbound packet: an established flow, visited in a scattered order so the
    /// flow table is read the way real traffic reads it, or a new one.
    pub fn next_outbound(&mut self, room: &mut [u8], new_percent: u32) -> usize {
        let packet = self.next_packet;
        self.next_packet = self.next_packet.wrapping_add(1);
        if new_percent > 0 && packet % 100 < new_percent {
            // New flows only ever send one packet: the table evicts them first when full.
            self.next_new = self.next_new.wrapping_add(1).max(self.flows);
            return self.outbound(room, self.next_new);
        }
        // A multiplicative step modulo the flow count scatters consecutive packets over the
        // table and, being coprime to it, visits every flow once in each run of `flows`
        // established packets, as `Lab::warm_up` needs. (Its own counter: with the packet's,
        // the flows that share a residue mod 100 with the new ones would never be visited.)
        let counter = self.next_established;
        self.next_established = self.next_established.wrapping_add(1);
        let flow = (u64::from(counter % self.flows) * FLOW_STEP % u64::from(self.flows)) as u32;
        self.outbound(room, flow)
    }

    pub fn outbound(&self, room: &mut [u8], flow: u32) -> usize {
        let host = flow % HOSTS;
        if self.ipv6 {
            let frame = &mut room[..FRAME6_LEN];
            frame[0..6].copy_from_slice(&self.lan_mac.0);
            frame[6..12].copy_from_slice(&Self::host_mac(host).0);
            frame[12..14].copy_from_slice(&[0x86, 0xdd]);
            let ports = (20000 + host as u16, 443);
            write_ipv6_udp(&mut frame[14..], Self::host6(host), remote6(flow), ports);
            return FRAME6_LEN;
        }
        let remote = remote(flow);
        let frame = &mut room[..FRAME_LEN];
        frame[0..6].copy_from_slice(&self.lan_mac.0);
        frame[6..12].copy_from_slice(&Self::host_mac(host).0);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        write_ipv4_udp(
            &mut frame[14..],
            Self::host(host),
            remote,
            20000 + host as u16,
            443,
        );
        FRAME_LEN
    }

    /// Whether the next reply is replaced by a spoofed SYN: `syn_percent` of them, spread.
    pub fn syn_due(&mut self, syn_percent: u32) -> bool {
        if syn_percent == 0 {
            return false;
        }
        self.syn_counter = self.syn_counter.wrapping_add(1);
        self.syn_counter.wrapping_mul(37) % 100 < syn_percent
    }

    /// A SYN from a random address in 11.0.0.0/8 (routable back through the default route,
    /// so nothing refuses it as a martian) and a random port, to the TCP port forward.
    pub fn spoofed_syn(&mut self, room: &mut [u8]) -> usize {
        let mut x = self.syn_random;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.syn_random = x;
        let src = Ipv4Addr::from(0x0b00_0000 | (x & 0x00ff_ffff));
        let frame = &mut room[..SYN_FRAME_LEN];
        frame[0..6].copy_from_slice(&self.wan_mac.0);
        frame[6..12].copy_from_slice(&UPSTREAM_MAC.0);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut frame[14..];
        ip[..20].copy_from_slice(&[
            0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]);
        ip[12..16].copy_from_slice(&src.octets());
        ip[16..20].copy_from_slice(&WAN_ADDR.octets());
        let sum = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let mut syn = TcpPacket::new_unchecked(&mut ip[20..40]);
        syn.set_src_port(1024 | (x >> 24) as u16 | ((x & 0x3f) as u16) << 8);
        syn.set_dst_port(FORWARDED_PORT);
        syn.set_seq_number(x);
        syn.set_ack_number(0);
        syn.set_header_len(20);
        syn.set_flags(tcp::flags::SYN);
        syn.set_window_len(64240);
        syn.set_urgent(0);
        syn.fill_checksum(src, WAN_ADDR);
        SYN_FRAME_LEN
    }

    /// Turns a packet the gateway sent upstream into the remote end's reply, and says which
    /// port it comes back by: the WAN port whose address it was sent from (1, or 2 for the
    /// second uplink's). None for anything that is not UDP from one of them.
    pub fn reflect(&self, frame: &mut [u8]) -> Option<u16> {
        if self.ipv6 {
            return self.reflect6(frame).then_some(1);
        }
        if frame.len() < FRAME_LEN || frame[23] != 17 {
            return None;
        }
        let (port, mac, upstream_mac) = match &frame[26..30] {
            from if from == WAN_ADDR.octets() => (1, self.wan_mac, UPSTREAM_MAC),
            from if from == WAN2_ADDR.octets() => {
                (2, self.second_uplink.as_ref()?.mac, UPSTREAM2_MAC)
            }
            _ => return None,
        };
        frame[0..6].copy_from_slice(&mac.0);
        frame[6..12].copy_from_slice(&upstream_mac.0);
        let (src, dst) = (
            Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]),
            Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]),
        );
        let (sport, dport) = (
            u16::from_be_bytes([frame[34], frame[35]]),
            u16::from_be_bytes([frame[36], frame[37]]),
        );
        write_ipv4_udp(&mut frame[14..], dst, src, dport, sport);
        Some(port)
    }
}

impl Traffic {
    /// [`reflect`](Self::reflect) for IPv6: UDP from a LAN host's address to a remote.
    fn reflect6(&self, frame: &mut [u8]) -> bool {
        if frame.len() < FRAME6_LEN || frame[12..14] != [0x86, 0xdd] || frame[20] != 17 {
            return false;
        }
        let address = |at: usize| {
            Ipv6Addr::from(<[u8; 16]>::try_from(&frame[at..at + 16]).expect("16 bytes"))
        };
        let (src, dst) = (address(22), address(38));
        if u128::from(src) >> 64 != u128::from(LAN6) >> 64 {
            return false;
        }
        let (sport, dport) = (
            u16::from_be_bytes([frame[54], frame[55]]),
            u16::from_be_bytes([frame[56], frame[57]]),
        );
        frame[0..6].copy_from_slice(&self.wan_mac.0);
        frame[6..12].copy_from_slice(&UPSTREAM_MAC.0);
        write_ipv6_udp(&mut frame[14..], dst, src, (dport, sport));
        true
    }
}

/// A 48-byte IPv6/UDP datagram, no payload, with its checksum (which IPv6 requires).
fn write_ipv6_udp(ip: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, (sport, dport): (u16, u16)) {
    ip[..8].copy_from_slice(&[0x60, 0, 0, 0, 0, 8, 17, 64]);
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    let udp = &mut ip[40..48];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&dport.to_be_bytes());
    udp[4..6].copy_from_slice(&8u16.to_be_bytes());
    udp[6..8].fill(0);
    // A computed 0 is sent as all ones: 0 would mean "no checksum", which IPv6 refuses.
    let sum = match checksum::l4_checksum_v6(src, dst, 17, udp) {
        0 => 0xffff,
        sum => sum,
    };
    udp[6..8].copy_from_slice(&sum.to_be_bytes());
}

/// A 46-byte IPv4/UDP datagram (18 bytes of zero payload, no UDP checksum).
fn write_ipv4_udp(ip: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) {
    ip[..20].copy_from_slice(&[
        0x45, 0, 0, 46, 0, 0, 0x40, 0, 64, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]);
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    let sum = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    ip[20..22].copy_from_slice(&sport.to_be_bytes());
    ip[22..24].copy_from_slice(&dport.to_be_bytes());
    ip[24..26].copy_from_slice(&26u16.to_be_bytes());
    ip[26..46].fill(0);
}

/// The queue a NIC's RSS would pick for `frame` among `queues`: a hash of its addresses and
/// ports that has nothing to do with how the gateway assigns flows to workers (as RSS with
/// the default, asymmetric Toeplitz key), so only about 1/queues of the packets arrive at
/// the worker that owns their flow.
pub(super) fn rss_queue(frame: &[u8], queues: usize) -> usize {
    let Some(tuple) = frame.get(26..38) else {
        return 0;
    };
    let word =
        |at: usize| u32::from_be_bytes([tuple[at], tuple[at + 1], tuple[at + 2], tuple[at + 3]]);
    let hash = mix32(word(0) ^ mix32(word(4) ^ mix32(word(8) ^ RSS_SEED)));
    ((u64::from(hash) * queues as u64) >> 32) as usize
}

/// Any constant: what matters is that the gateway's ownership hash does not know it.
const RSS_SEED: u32 = 0x6d5a_56da;

/// The murmur3 finalizer: every input bit reaches every output bit.
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^ (x >> 16)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    /// An IPv6 flow's packet out, and the remote's answer made of it: valid UDP checksums
    /// both ways, the addresses and ports swapped, from the upstream router's MAC.
    #[test]
    fn ipv6_packets_are_valid_and_reflect_into_their_replies() {
        let lan_mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let wan_mac = EthernetAddress([2, 0, 0, 0, 0, 2]);
        let mut traffic = Traffic::new(lan_mac, wan_mac, 5000);
        traffic.ipv6 = true;
        let udp_ok = |frame: &[u8]| {
            let ip = pipeline::wire::Ipv6Packet::new_checked(&frame[14..]).unwrap();
            checksum::l4_checksum_v6(ip.src_addr(), ip.dst_addr(), 17, ip.payload()) == 0
        };
        let mut frame = [0u8; 128];
        for flow in [0, 1, 999, 1000, 4999] {
            let len = traffic.outbound(&mut frame, flow);
            assert_eq!(len, FRAME6_LEN);
            assert!(udp_ok(&frame[..len]), "flow {flow} out");
            let ip = pipeline::wire::Ipv6Packet::new_checked(&frame[14..len]).unwrap();
            assert_eq!(ip.src_addr(), Traffic::host6(flow % HOSTS));
            assert_eq!(ip.dst_addr(), remote6(flow));
            assert_eq!(traffic.reflect(&mut frame[..len]), Some(1));
            assert!(udp_ok(&frame[..len]), "flow {flow} back");
            let ip = pipeline::wire::Ipv6Packet::new_checked(&frame[14..len]).unwrap();
            assert_eq!(
                (ip.src_addr(), ip.dst_addr()),
                (remote6(flow), Traffic::host6(flow % HOSTS))
            );
            assert_eq!(&frame[..12], &[wan_mac.0, UPSTREAM_MAC.0].concat()[..]);
            // A reply is not reflected again.
            assert_eq!(traffic.reflect(&mut frame[..len]), None);
        }
    }

    /// The uplinks' labs: each flow's packets leave by the uplink its source address is on,
    /// and the reply made of a packet comes back by the port it left.
    #[test]
    fn two_uplinks_route_by_their_address_and_replies_come_back_by_their_port() {
        let mut traffic = Traffic::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            1000,
        );
        let wan2_mac = EthernetAddress([2, 0, 0, 0, 0, 3]);
        let mut frame = [0u8; 128];
        let len = traffic.outbound(&mut frame, 7);
        // As masqueraded to the second uplink's address.
        write_ipv4_udp(&mut frame[14..], WAN2_ADDR, remote(7), 1024, 443);
        assert_eq!(traffic.reflect(&mut frame[..len].to_vec()), None);
        for shared in [false, true] {
            traffic.second_uplink = Some(SecondUplink {
                mac: wan2_mac,
                shared,
            });
            let router = router_config(&traffic, None).unwrap();
            let hop = router.route_from(WAN2_ADDR, remote(7)).unwrap();
            let expected = if shared {
                (2, UPSTREAM2)
            } else {
                (1, UPSTREAM)
            };
            assert_eq!((hop.port, hop.gateway), (expected.0, Some(expected.1)));
            let hop = router.route_from(WAN_ADDR, remote(7)).unwrap();
            assert_eq!((hop.port, hop.gateway), (1, Some(UPSTREAM)));
        }
        let mut reply = frame[..len].to_vec();
        assert_eq!(traffic.reflect(&mut reply), Some(2));
        assert_eq!(&reply[..12], &[wan2_mac.0, UPSTREAM2_MAC.0].concat()[..]);
        assert_eq!(&reply[30..34], &WAN2_ADDR.octets());
    }

    #[test]
    fn remotes_are_distinct_public_addresses() {
        let mut seen = HashSet::new();
        for flow in 0..4_200_000u32 {
            let addr = remote(flow);
            let [a, _, _, d] = addr.octets();
            assert!((64..96).contains(&a), "{addr} for flow {flow}");
            assert!((1..=254).contains(&d), "{addr} for flow {flow}");
            assert!(seen.insert(addr), "flow {flow} repeats {addr}");
        }
    }

    #[test]
    fn the_first_65536_remotes_each_have_a_tbl24_line_of_their_own() {
        let lines: HashSet<u32> = (0..REMOTE_LINES)
            .map(|flow| (u32::from(remote(flow)) >> 8) / BLOCKS_PER_LINE)
            .collect();
        assert_eq!(lines.len(), REMOTE_LINES as usize);
    }

    #[test]
    fn the_fib_is_large_and_every_remote_leaves_by_wan() {
        let traffic = Traffic::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            1,
        );
        let router = router_config(&traffic, None).unwrap();
        assert!(
            router.routes.len() > 65_536,
            "{} routes",
            router.routes.len()
        );
        let routes = fib();
        let mut by_own_route = 0;
        for flow in (0..4_000_000u32).step_by(997) {
            let addr = u32::from(remote(flow));
            let hop = router.routes.lookup(remote(flow)).expect("a route");
            assert_eq!(hop.port, 1, "flow {flow}");
            assert_eq!(hop.gateway, Some(UPSTREAM));
            let own = &routes[1 + ((addr - REMOTE_SPACE) >> 13) as usize];
            let mask = u32::MAX << (32 - own.len);
            by_own_route += usize::from(addr & mask == u32::from(own.destination));
        }
        // Some remotes are in their /19's prefix, others take the default route.
        assert!(by_own_route > 100, "{by_own_route}");
    }

    /// The warm-up sends each flow one packet each way and relies on that reaching every
    /// flow: `flows` consecutive outbound packets must visit each flow exactly once.
    #[test]
    fn consecutive_outbound_packets_visit_every_flow_once() {
        for flows in [1, 7, 1_000, 65_536, 1_000_000] {
            let mut traffic = Traffic::new(
                EthernetAddress([2, 0, 0, 0, 0, 1]),
                EthernetAddress([2, 0, 0, 0, 0, 2]),
                flows,
            );
            // Each flow has a remote address of its own (the test above).
            let flow_of: HashMap<Ipv4Addr, u32> = (0..flows).map(|f| (remote(f), f)).collect();
            let mut frame = [0u8; 2048];
            let mut seen = vec![false; flows as usize];
            for _ in 0..flows {
                let len = traffic.next_outbound(&mut frame, 0);
                assert_eq!(len, FRAME_LEN);
                let remote = Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]);
                let flow = flow_of[&remote];
                assert!(!seen[flow as usize], "flow {flow} of {flows} visited twice");
                seen[flow as usize] = true;
            }
        }
    }

    #[test]
    fn rss_spreads_packets_over_the_queues() {
        let traffic = Traffic::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            100_000,
        );
        let mut counts = [0u32; 4];
        let mut frame = [0u8; 2048];
        for flow in 0..100_000 {
            let len = traffic.outbound(&mut frame, flow);
            counts[rss_queue(&frame[..len], 4)] += 1;
        }
        for count in counts {
            assert!((23_000..27_000).contains(&count), "{counts:?}");
        }
    }
}

//! The per-packet features after forwarding decided: QoS policing and the traffic meter,
//! each only while the router config has it on.
//!
//! What they do with a packet depends on its interfaces and addresses (which link it is
//! policed on, which LAN host it is metered against) and on its classification, all of
//! which a flow direction keeps packet after packet. So the full path works them out into a
//! [`FeaturePlan`] for every packet, and keeps the plan in the flow direction's shortcut for
//! the fast path, which then only polices and counts. The packets of one flow direction may
//! differ in their DSCP and in the LAN host's MAC: with a rule on either, the plan leaves the
//! class to each packet.
//!
//! IPv6 traffic is a LAN host's by its MAC: the IPv4 neighbour with the same MAC is the host
//! (see [`Features`]), so a dual-stack host has one fair share, one set of QoS rules and one
//! line in the meter for both families.

use std::net::Ipv4Addr;

use crate::features::qos::ShapeRequest;
use crate::features::qos::{Class, Decision, Link, PacketInfo};
use crate::features::shaper::Arrival;
use crate::packet::PacketBuf;
use crate::pipeline::Pipeline;
use crate::state::flow_data::{FeaturePlan, Features};
use crate::verdict::{DropReason, Verdict};
use crate::wire::ipv6::Upper6;
use crate::wire::{ethernet, ipv4, ipv6, EthernetAddress, EthernetFrame, Ipv4Packet, Ipv6Packet};

/// A hash of the packet's addresses, protocol and ports (as it leaves): its shaper flow
/// queue. Not the flow table's key hash, which the fast path's callers do not all carry;
/// any spread will do, as the queue index takes its low bits.
#[inline]
fn shaper_flow_hash(ip: &Ipv4Packet<&[u8]>) -> u64 {
    let (src_port, dst_port) = l4_ports(ip);
    let ports = (u64::from(src_port) << 16) | u64::from(dst_port);
    let addresses =
        (u64::from(u32::from(ip.src_addr())) << 32) | u64::from(u32::from(ip.dst_addr()));
    mix_flow_hash(addresses, ports, ip.protocol())
}

/// The shaper flow hash of a packet's folded addresses, its ports (source above destination)
/// and its protocol, whichever its family.
#[inline]
fn mix_flow_hash(addresses: u64, ports: u64, protocol: u8) -> u64 {
    let mixed = (addresses ^ ports.rotate_left(17) ^ u64::from(protocol))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    mixed ^ (mixed >> 29)
}

/// [`shaper_flow_hash`] for an IPv6 packet.
#[inline]
fn shaper_flow_hash6(ip: &Ipv6Packet<&[u8]>, upper: Upper6) -> u64 {
    let (src_port, dst_port) = l4_ports6(ip, upper);
    let ports = (u64::from(src_port) << 16) | u64::from(dst_port);
    let fold = |address: std::net::Ipv6Addr| {
        let bits = u128::from(address);
        (bits as u64) ^ ((bits >> 64) as u64)
    };
    let addresses = fold(ip.src_addr()) ^ fold(ip.dst_addr()).rotate_left(32);
    mix_flow_hash(addresses, ports, upper.protocol)
}

/// What the worker's shaper for `link` (0 uplink, 1 downlink) needs to know of a packet of
/// `class` from or to the LAN host `host`: its `flow` hash, and whether it is ECN-capable.
/// Out of line: the policer's path stays as short as it was without the shaper.
#[inline(never)]
fn shape_request(
    link: usize,
    class: Class,
    host: Ipv4Addr,
    (flow, ecn_capable): (u64, bool),
    frame_len: usize,
) -> ShapeRequest {
    ShapeRequest {
        link: if link == 0 {
            Link::Uplink
        } else {
            Link::Downlink
        },
        class,
        arrival: Arrival {
            len: frame_len as u32,
            host: u64::from(u32::from(host)),
            flow,
            ecn_capable,
        },
    }
}

/// Sets an ECN-capable IP packet's ECN field to CE (Congestion Experienced), an IPv4
/// header's checksum updated: what a shaper does instead of dropping it. `frame` starts
/// with the Ethernet header the pipeline wrote. False, with nothing changed, for a frame that
/// is neither IPv4 nor IPv6, or not ECN-capable.
pub fn mark_congestion(frame: &mut [u8]) -> bool {
    if frame.len() < ethernet::HEADER_LEN + 20 {
        return false;
    }
    let ethertype = EthernetFrame::new_unchecked(&*frame).ethertype();
    if ethertype == ethernet::ethertype::IPV6 && frame.len() >= ethernet::HEADER_LEN + 40 {
        let mut ip = Ipv6Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]);
        let traffic_class = ip.traffic_class();
        return match traffic_class & 3 {
            0 => false,
            3 => true,
            _ => {
                // IPv6 has no header checksum, and no upper-layer checksum covers the field.
                ip.set_traffic_class(traffic_class | 3);
                true
            }
        };
    }
    if ethertype != ethernet::ethertype::IPV4 {
        return false;
    }
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[ethernet::HEADER_LEN..]);
    let ecn = ip.ecn();
    if ecn == 0 || ecn == 3 {
        return ecn == 3;
    }
    ip.set_ecn(3);
    // The header was checked on the way in, so summing it again is as good as a patch.
    ip.fill_checksum();
    true
}

/// The class every packet of a plan's flow direction is of, where one holds for all.
#[inline]
fn known_class(plan: FeaturePlan) -> Option<Class> {
    plan.fixed_priority().map(|priority| {
        if priority {
            Class::Priority
        } else {
            Class::Bulk
        }
    })
}

/// The QoS link a packet is policed on: 0 (uplink) from an inside interface to a masqueraded
/// one, 1 (downlink) the other way; none between two of a kind (LAN to LAN, to the gateway).
#[inline]
fn police_link(from_outside: bool, to_outside: bool) -> Option<usize> {
    match (from_outside, to_outside) {
        (false, true) => Some(0),
        (true, false) => Some(1),
        _ => None,
    }
}

/// The LAN host a packet policed on `link` (0 uplink, 1 downlink) is from or to, and its
/// MAC: the sender and its MAC (kept before L2 was rewritten) for uplink, the receiver and
/// the next hop's MAC (the host itself) for downlink; 0.0.0.0 for a host not known.
#[inline]
fn lan_host(
    link: usize,
    packet: &impl FeaturePacket,
    src_mac: EthernetAddress,
    pkt: &PacketBuf,
) -> (Ipv4Addr, EthernetAddress) {
    let (host, mac) = if link == 0 {
        (packet.sender(), src_mac)
    } else {
        (
            packet.receiver(),
            EthernetFrame::new_unchecked(pkt.bytes()).dst_addr(),
        )
    };
    (host.unwrap_or(Ipv4Addr::UNSPECIFIED), mac)
}

/// A TCP or UDP packet's source and destination ports; (0, 0) for other protocols.
#[inline]
fn l4_ports(ip: &Ipv4Packet<&[u8]>) -> (u16, u16) {
    match ip.protocol() {
        ipv4::protocol::TCP | ipv4::protocol::UDP if ip.payload().len() >= 4 => {
            let l4 = ip.payload();
            (
                u16::from_be_bytes([l4[0], l4[1]]),
                u16::from_be_bytes([l4[2], l4[3]]),
            )
        }
        _ => (0, 0),
    }
}

/// [`l4_ports`] for an IPv6 packet whose upper layer is `upper`.
#[inline]
fn l4_ports6(ip: &Ipv6Packet<&[u8]>, upper: Upper6) -> (u16, u16) {
    let (ipv6::next_header::TCP | ipv6::next_header::UDP, Some(at)) =
        (upper.protocol, upper.header_at)
    else {
        return (0, 0);
    };
    match ip.payload().get(at..).and_then(|header| header.get(..4)) {
        Some(&[a, b, c, d]) => (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d])),
        _ => (0, 0),
    }
}

/// [`packet_info`] for an IPv6 packet whose upper layer is `upper`.
fn packet_info6(
    ip: &Ipv6Packet<&[u8]>,
    upper: Upper6,
    host: Ipv4Addr,
    mac: EthernetAddress,
) -> PacketInfo {
    let (src_port, dst_port) = l4_ports6(ip, upper);
    PacketInfo {
        host,
        mac: Some(mac),
        dscp: ip.dscp(),
        protocol: upper.protocol,
        src_port,
        dst_port,
    }
}

/// A packet's QoS classification fields, `host` and `mac` being the LAN host's.
fn packet_info(ip: &Ipv4Packet<&[u8]>, host: Ipv4Addr, mac: EthernetAddress) -> PacketInfo {
    let (src_port, dst_port) = l4_ports(ip);
    PacketInfo {
        host,
        mac: Some(mac),
        dscp: ip.dscp(),
        protocol: ip.protocol(),
        src_port,
        dst_port,
    }
}

/// A packet as the features see it, whichever its family: what QoS classifies it by, and
/// its shaper flow. The IPv4 and IPv6 entry points below wrap the packet in one and share
/// the rest of the stage.
trait FeaturePacket {
    /// The LAN host that sent it, as its IPv4 address, where known.
    fn sender(&self) -> Option<Ipv4Addr>;
    /// The LAN host it goes to, where known.
    fn receiver(&self) -> Option<Ipv4Addr>;
    /// Its classification fields, `host` and `mac` being the LAN host's.
    fn info(&self, host: Ipv4Addr, mac: EthernetAddress) -> PacketInfo;
    /// Its shaper flow hash, and whether it is ECN-capable.
    fn shaper_flow(&self) -> (u64, bool);
}

/// An IPv4 packet and its sender's address from before translation: its hosts are its
/// addresses, always known (which the compiler sees, so the IPv4 stage tests no `Option`).
struct Ipv4Features<'a> {
    ip: Ipv4Packet<&'a [u8]>,
    src: Ipv4Addr,
}

impl FeaturePacket for Ipv4Features<'_> {
    #[inline(always)]
    fn sender(&self) -> Option<Ipv4Addr> {
        Some(self.src)
    }

    #[inline(always)]
    fn receiver(&self) -> Option<Ipv4Addr> {
        Some(self.ip.dst_addr())
    }

    #[inline]
    fn info(&self, host: Ipv4Addr, mac: EthernetAddress) -> PacketInfo {
        packet_info(&self.ip, host, mac)
    }

    #[inline]
    fn shaper_flow(&self) -> (u64, bool) {
        (shaper_flow_hash(&self.ip), self.ip.ecn() != 0)
    }
}

/// An IPv6 packet, its upper layer, and the LAN hosts its MACs name ([`Features`]).
struct Ipv6Features<'a> {
    ip: Ipv6Packet<&'a [u8]>,
    upper: Upper6,
    hosts: Features,
}

impl FeaturePacket for Ipv6Features<'_> {
    #[inline(always)]
    fn sender(&self) -> Option<Ipv4Addr> {
        self.hosts.sender
    }

    #[inline(always)]
    fn receiver(&self) -> Option<Ipv4Addr> {
        self.hosts.receiver
    }

    #[inline]
    fn info(&self, host: Ipv4Addr, mac: EthernetAddress) -> PacketInfo {
        packet_info6(&self.ip, self.upper, host, mac)
    }

    #[inline]
    fn shaper_flow(&self) -> (u64, bool) {
        (shaper_flow_hash6(&self.ip, self.upper), self.ip.ecn() != 0)
    }
}

/// Where a packet's LAN hosts stand, for its plan: whether its sender and its receiver are
/// on an inside interface (metered up, down), and whether the receiver is known (policed
/// on the downlink against it).
#[derive(Clone, Copy)]
struct HostsInside {
    sender: bool,
    receiver: bool,
    receiver_known: bool,
}

impl Pipeline {
    /// Whether any per-packet feature is on: with none, a packet costs the features this
    /// one test.
    #[inline(always)]
    pub(crate) fn features_on(&self) -> bool {
        self.qos.is_some() || self.router.traffic_meter
    }

    /// The features for an IPv4 packet the full path decided, `source` being its sender's
    /// address and MAC (from before L2 was rewritten). Returns the verdict, which policing
    /// may turn into a drop, and the plan the packet's flow direction can keep.
    ///
    /// An IPv4 packet's LAN hosts are its addresses: the sender's is metered "up" where it
    /// is on its inside (not masqueraded) ingress interface's subnet, the receiver's "down"
    /// where it is on the egress interface's.
    #[inline(always)]
    pub(crate) fn features(
        &mut self,
        ingress: u16,
        source: (Ipv4Addr, EthernetAddress),
        pkt: &PacketBuf,
        verdict: Verdict,
        frame_len: usize,
        now_ns: u64,
    ) -> (Verdict, FeaturePlan) {
        if !self.features_on() {
            return (verdict, FeaturePlan::NONE);
        }
        let Some(egress) = verdict.egress_port() else {
            return (verdict, FeaturePlan::NONE);
        };
        let (src, src_mac) = source;
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let dst = ip.dst_addr();
        let router = &*self.router;
        let inside = |port: u16, ip: Ipv4Addr| {
            let index = usize::from(port);
            !router.stateful.masquerade[index] && router.interfaces[index].contains(ip)
        };
        let hosts_inside = HostsInside {
            sender: inside(ingress, src),
            receiver: inside(egress, dst),
            receiver_known: true,
        };
        let packet = Ipv4Features { ip, src };
        let plan = self.feature_plan((ingress, egress), hosts_inside, src_mac, &packet, pkt);
        (
            self.apply(plan, src_mac, &packet, pkt, verdict, frame_len, now_ns),
            plan,
        )
    }

    /// Polices and meters an IPv4 packet of `frame_len` bytes by `plan` (on the fast path,
    /// its flow direction's), `source` being its sender's address and MAC.
    /// A plan of nothing costs this one test (the work is not inlined into every caller).
    #[inline(always)]
    pub(crate) fn apply_features(
        &mut self,
        plan: FeaturePlan,
        (src, src_mac): (Ipv4Addr, EthernetAddress),
        pkt: &PacketBuf,
        verdict: Verdict,
        frame_len: usize,
        now_ns: u64,
    ) -> Verdict {
        if plan == FeaturePlan::NONE {
            return verdict;
        }
        let ip = Ipv4Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let packet = Ipv4Features { ip, src };
        self.apply(plan, src_mac, &packet, pkt, verdict, frame_len, now_ns)
    }

    /// The LAN host on `port` that has `mac`, as its IPv4 address: see [`Features`].
    pub(crate) fn lan_host6(&self, port: u16, mac: EthernetAddress) -> Option<Ipv4Addr> {
        let index = usize::from(port);
        if self.router.stateful.masquerade[index] {
            return None;
        }
        let interface = &self.router.interfaces[index];
        self.neighbors
            .ipv4_of_mac(mac)
            .filter(|&ip| interface.contains(ip))
    }

    /// [`Pipeline::features`] for an IPv6 packet the full path decided, `src_mac` being its
    /// sender's MAC (from before L2 was rewritten) and `upper` its upper layer.
    ///
    /// Its LAN hosts are those its MACs name ([`Features`]): every packet from an inside
    /// interface is metered up, and every one sent to one down, against its host or as
    /// unattributed. The receiving host is known once the packet is on its way (its L2
    /// header written): a packet waiting for its next hop is neither policed on the downlink
    /// nor metered as received (a few packets as a flow starts), rather than taken for no
    /// host's.
    #[inline(always)]
    pub(crate) fn features6(
        &mut self,
        ingress: u16,
        src_mac: EthernetAddress,
        pkt: &PacketBuf,
        upper: Upper6,
        verdict: Verdict,
        now_ns: u64,
    ) -> (Verdict, Features) {
        if !self.features_on() {
            return (verdict, Features::default());
        }
        let Some(egress) = verdict.egress_port() else {
            return (verdict, Features::default());
        };
        let masquerade = &self.router.stateful.masquerade;
        let sent = matches!(verdict, Verdict::Transmit { .. });
        let hosts_inside = HostsInside {
            sender: !masquerade[usize::from(ingress)],
            receiver: !masquerade[usize::from(egress)] && sent,
            receiver_known: sent,
        };
        let dst_mac = EthernetFrame::new_unchecked(pkt.bytes()).dst_addr();
        let hosts = Features {
            plan: FeaturePlan::NONE,
            sender: self.lan_host6(ingress, src_mac),
            receiver: sent.then(|| self.lan_host6(egress, dst_mac)).flatten(),
        };
        let ip = Ipv6Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let packet = Ipv6Features { ip, upper, hosts };
        let plan = self.feature_plan((ingress, egress), hosts_inside, src_mac, &packet, pkt);
        let features = Features { plan, ..hosts };
        let frame_len = pkt.len();
        (
            self.apply_features6(features, src_mac, pkt, upper, verdict, frame_len, now_ns),
            features,
        )
    }

    /// [`Pipeline::apply_features`] for an IPv6 packet whose upper layer is `upper`, its
    /// hosts as `features` names them.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_features6(
        &mut self,
        features: Features,
        src_mac: EthernetAddress,
        pkt: &PacketBuf,
        upper: Upper6,
        verdict: Verdict,
        frame_len: usize,
        now_ns: u64,
    ) -> Verdict {
        if features.plan == FeaturePlan::NONE {
            return verdict;
        }
        let ip = Ipv6Packet::new_unchecked(&pkt.bytes()[ethernet::HEADER_LEN..]);
        let packet = Ipv6Features {
            ip,
            upper,
            hosts: features,
        };
        self.apply(
            features.plan,
            src_mac,
            &packet,
            pkt,
            verdict,
            frame_len,
            now_ns,
        )
    }

    /// Works out what the features do with this packet and the rest of its flow direction,
    /// from `ingress` to `egress`.
    ///
    /// QoS polices the WAN links: traffic from an inside host leaving by a masqueraded
    /// interface is uplink, traffic entering by one toward an inside host is downlink;
    /// everything else (LAN to LAN, to the gateway) is not policed. The meter counts a
    /// forwarded packet against the LAN hosts it comes from or goes to, as `inside` says.
    fn feature_plan(
        &self,
        (ingress, egress): (u16, u16),
        inside: HostsInside,
        src_mac: EthernetAddress,
        packet: &impl FeaturePacket,
        pkt: &PacketBuf,
    ) -> FeaturePlan {
        let masquerade = &self.router.stateful.masquerade;
        let (from_outside, to_outside) = (
            masquerade[usize::from(ingress)],
            masquerade[usize::from(egress)],
        );
        let mut bits = 0;
        if let Some(policers) = &self.qos {
            let link = police_link(from_outside, to_outside)
                .filter(|&link| link == 0 || inside.receiver_known);
            if let Some(link) = link {
                bits |= FeaturePlan::POLICE;
                if link == 1 {
                    bits |= FeaturePlan::DOWNLINK;
                }
                let policer = &policers[link];
                if !policer.classifies_per_packet() {
                    bits |= FeaturePlan::CLASS_KNOWN;
                    let (host, mac) = lan_host(link, packet, src_mac, pkt);
                    if policer.classify(&packet.info(host, mac)) == Class::Priority {
                        bits |= FeaturePlan::PRIORITY;
                    }
                }
            }
        }
        if self.router.traffic_meter && self.meter.is_some() {
            if inside.sender {
                bits |= FeaturePlan::METER_UP;
            }
            if inside.receiver {
                bits |= FeaturePlan::METER_DOWN;
            }
        }
        FeaturePlan::from_bits(bits)
    }

    /// Polices and meters a packet of `frame_len` bytes by `plan`, against the hosts the
    /// packet names (`src_mac` being its sender's MAC).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        plan: FeaturePlan,
        src_mac: EthernetAddress,
        packet: &impl FeaturePacket,
        pkt: &PacketBuf,
        verdict: Verdict,
        frame_len: usize,
        now_ns: u64,
    ) -> Verdict {
        if plan == FeaturePlan::NONE {
            return verdict;
        }
        let subject = (src_mac, packet, pkt);
        // One copy of the work per QoS mode, so the policer's has no test of the mode inside.
        if self.shaping() {
            self.police_and_meter::<true>(plan, subject, verdict, frame_len, now_ns)
        } else {
            self.police_and_meter::<false>(plan, subject, verdict, frame_len, now_ns)
        }
    }

    /// With `SHAPING`, QoS files a request for the worker's shaper instead of policing. A
    /// host not known (an IPv6 sender without an IPv4 neighbour) is policed as 0.0.0.0 and
    /// metered as unattributed.
    #[inline(never)]
    fn police_and_meter<const SHAPING: bool>(
        &mut self,
        plan: FeaturePlan,
        (src_mac, packet, pkt): (EthernetAddress, &impl FeaturePacket, &PacketBuf),
        verdict: Verdict,
        frame_len: usize,
        now_ns: u64,
    ) -> Verdict {
        let bytes = frame_len as u64;
        if let (Some(link), Some(policers)) = (plan.police_link(), self.qos.as_mut()) {
            let policer = &mut policers[link];
            let (host, mac) = lan_host(link, packet, src_mac, pkt);
            let class =
                known_class(plan).unwrap_or_else(|| policer.classify(&packet.info(host, mac)));
            if SHAPING {
                // Metered now: the shaper sends it, or drops it much later, as CoDel decides.
                policer.offered(bytes, now_ns);
                let flow = packet.shaper_flow();
                self.shape_request = Some(shape_request(link, class, host, flow, frame_len));
            } else if policer.police(class, host, bytes, now_ns) == Decision::Drop {
                // Not metered: the meter counts what the host sent and got.
                return Verdict::Drop(DropReason::QosPoliced);
            }
        }
        if let Some(meter) = &self.meter {
            if plan.has(FeaturePlan::METER_UP) {
                match packet.sender() {
                    Some(host) => meter.record_up(host, bytes),
                    None => meter.record_unattributed_up(bytes),
                }
            }
            if plan.has(FeaturePlan::METER_DOWN) {
                match packet.receiver() {
                    Some(host) => meter.record_down(host, bytes),
                    None => meter.record_unattributed_down(bytes),
                }
            }
        }
        verdict
    }
}

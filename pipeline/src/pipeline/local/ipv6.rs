//! IPv6 for the gateway itself: on an interface with IPv6 addresses the gateway answers
//! Neighbor Solicitations for them and echo requests to them, and sends Router
//! Advertisements of their prefixes, so that LAN hosts form SLAAC addresses and reach it.
//! The advertisements offer the gateway as default router only when an IPv6 default route
//! leaves by another interface (`RouterConfig::with_ipv6`); what is not for the gateway is
//! forwarded by `forward6`, and what the gateway does not answer is dropped and counted.
//!
//! A worker only classifies ([`classify`]); the control thread answers ([`answer`]), learns
//! its neighbours from what [`answer`] saw (a [`Sighting`], for the neighbour table's ARP
//! policy: learnt only on the link, a confirmed MAC not overwritten by the unsolicited), and
//! builds advertisements and solicitations ([`write_router_advert`],
//! [`write_neighbor_solicit`]), as it does ARP and IPv4 echo.

use std::net::Ipv6Addr;

use crate::l3::neigh::ArpSource;
use crate::packet::PacketBuf;
use crate::pipeline::config::{
    Interface, Ipv6Interface, PrefixLease, RouterAdvertConfig, RouterConfig,
};
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::icmpv6::{self, msg_type};
use crate::wire::ipv6::{self, next_header, walk_extensions, ALL_NODES, ND_HOP_LIMIT};
use crate::wire::ndisc::{self, NdError, NdRepr, PrefixInfo, RouterAdvert};
use crate::wire::{ethernet, EthernetAddress, EthernetFrame, Icmpv6Packet, Ipv6Packet, Ipv6Repr};

/// The hop limit of the gateway's own IPv6 packets other than ND (whose is 255).
const HOP_LIMIT: u8 = 64;
/// RFC 4861's defaults (AdvValidLifetime, AdvPreferredLifetime): 30 and 7 days.
const PREFIX_VALID_SECS: u32 = 2_592_000;
const PREFIX_PREFERRED_SECS: u32 = 604_800;
/// RFC 9096's ND_VALID_LIMIT and ND_PREFERRED_LIMIT: a prefix that came with a lease is
/// announced for at most 90 and 45 minutes, so hosts let go of it soon if the ISP renumbers
/// without a word (a reboot of the gateway, a lost withdrawal).
const LEASED_VALID_LIMIT_SECS: u32 = 5_400;
const LEASED_PREFERRED_LIMIT_SECS: u32 = 2_700;
/// How long announced DNS servers stay valid: RFC 8106 suggests at least three times the
/// maximum advertisement interval.
const DNS_LIFETIME_INTERVALS: u32 = 3;
/// Prefixes one advertisement carries: an interface's addresses beyond are not announced.
pub const MAX_ADVERTISED_PREFIXES: usize = 8;
/// DNS servers one advertisement carries.
pub const MAX_ADVERTISED_DNS_SERVERS: usize = 8;

/// What a worker does with an IPv6 frame arriving on an interface with IPv6 `v6`: ND and
/// echo for the gateway go to the control thread; the rest is dropped under its reason.
pub fn classify(frame: &[u8], v6: &Ipv6Interface) -> Verdict {
    let Some(ip_bytes) = frame.get(ethernet::HEADER_LEN..) else {
        return Verdict::Drop(DropReason::TruncatedFrame);
    };
    let Ok(ip) = Ipv6Packet::new_checked(ip_bytes) else {
        return Verdict::Drop(DropReason::MalformedIpv6);
    };
    // A multicast or loopback source is no sender's (RFC 4291 2.7, 2.5.3); an answer to it
    // would go to a group.
    if is_martian_source(ip.src_addr()) {
        return Verdict::Drop(DropReason::MartianAddress);
    }
    let ext = match walk_extensions(ip.next_header(), ip.payload()) {
        Ok(ext) => ext,
        Err(_) => return Verdict::Drop(DropReason::Ipv6ExtensionHeaders),
    };
    if !v6.accepts(ip.dst_addr()) {
        return Verdict::Drop(DropReason::Ipv6NotForwarded);
    }
    if ext.protocol != next_header::ICMPV6 || ext.fragment.is_some() {
        return Verdict::Drop(DropReason::Ipv6LocalUnhandled);
    }
    match ip.payload().get(ext.offset) {
        Some(
            &(msg_type::NEIGHBOR_SOLICIT
            | msg_type::NEIGHBOR_ADVERT
            | msg_type::ROUTER_SOLICIT
            | msg_type::ROUTER_ADVERT),
        ) => Verdict::Control(ControlWork::Ndisc),
        Some(&msg_type::ECHO_REQUEST) => Verdict::Control(ControlWork::LocalIcmp),
        // A switch or router asking which groups we listen to: see `write_mld_report`.
        Some(&msg_type::MLD_QUERY) => Verdict::Control(ControlWork::Ndisc),
        _ => Verdict::Drop(DropReason::Ipv6LocalUnhandled),
    }
}

/// What the control thread does with an IPv6 packet a worker sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The packet now holds the answer: send it back out the ingress port (unless the
    /// sighting that came with it was refused).
    Reply,
    /// Nothing to send: an advertisement to learn from (its [`Sighting`]).
    Learn,
    /// A Multicast Listener Query: answer with [`write_mld_report`] (current state).
    MldQuery,
    /// A valid Router Solicitation: answer with [`write_router_advert`] to this address and
    /// MAC, if the caller's rate limit allows.
    RouterSolicited {
        to: Ipv6Addr,
        mac: EthernetAddress,
    },
    Drop(DropReason),
}

/// A neighbour's binding a packet showed: `ip` is at `mac`, and how it was said (the
/// neighbour table's [`ArpSource`] policy applies to it). Only for addresses on the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sighting {
    pub ip: Ipv6Addr,
    pub mac: EthernetAddress,
    pub source: ArpSource,
}

/// Answers one IPv6 packet for the gateway received on `iface` (whose IPv6 side is `v6`):
/// a Neighbor Solicitation for one of its addresses becomes the Advertisement, an echo
/// request to one of them the reply, both in place; a solicitation or an advertisement
/// also says where its sender is (the [`Sighting`]). Checks everything again: the control
/// thread does not trust what workers classified.
pub fn answer(
    pkt: &mut PacketBuf,
    iface: &Interface,
    v6: &Ipv6Interface,
) -> (Answer, Option<Sighting>) {
    let mut sighting = None;
    let answer = answer_and_see(pkt, iface, v6, &mut sighting);
    (answer, sighting)
}

fn answer_and_see(
    pkt: &mut PacketBuf,
    iface: &Interface,
    v6: &Ipv6Interface,
    sighting: &mut Option<Sighting>,
) -> Answer {
    let frame = pkt.bytes();
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Answer::Drop(DropReason::TruncatedFrame);
    };
    let requester_mac = eth.src_addr();
    let Ok(ip) = Ipv6Packet::new_checked(&frame[ethernet::HEADER_LEN..]) else {
        return Answer::Drop(DropReason::MalformedIpv6);
    };
    let (src, dst, hop_limit) = (ip.src_addr(), ip.dst_addr(), ip.hop_limit());
    if is_martian_source(src) {
        return Answer::Drop(DropReason::MartianAddress);
    }
    let ext = match walk_extensions(ip.next_header(), ip.payload()) {
        Ok(ext) if ext.protocol == next_header::ICMPV6 && ext.fragment.is_none() => ext,
        Ok(_) => return Answer::Drop(DropReason::Ipv6LocalUnhandled),
        Err(_) => return Answer::Drop(DropReason::Ipv6ExtensionHeaders),
    };
    if !v6.accepts(dst) {
        return Answer::Drop(DropReason::Ipv6NotForwarded);
    }
    let Ok(icmp) = Icmpv6Packet::new_checked(&ip.payload()[ext.offset..]) else {
        return Answer::Drop(DropReason::MalformedIpv6);
    };
    if icmp.msg_type() == msg_type::ECHO_REQUEST {
        return echo_reply(pkt, iface, v6);
    }
    // RFC 3810 5.1.14: a query comes from a link-local address with hop limit 1 (and a
    // router alert, which the walk let through); anything else is not believed.
    if icmp.msg_type() == msg_type::MLD_QUERY {
        let from_link = ipv6::is_link_local(src) && hop_limit == 1;
        if !from_link || icmp.code() != 0 || !icmp.verify_checksum(src, dst) {
            return Answer::Drop(DropReason::MalformedNdisc);
        }
        return Answer::MldQuery;
    }
    match NdRepr::parse(&icmp, hop_limit, src, dst) {
        Ok(NdRepr::NeighborSolicit { target, source_mac }) => {
            if !v6.owns(target) {
                return Answer::Drop(DropReason::Ipv6LocalUnhandled);
            }
            // Its sender is about to talk to us (RFC 4861 7.2.3: create or update the entry).
            if let Some(mac) = source_mac.filter(|_| !src.is_unspecified() && v6.on_link(src)) {
                *sighting = Some(Sighting {
                    ip: src,
                    mac,
                    source: ArpSource::RequestForUs,
                });
            }
            // A duplicate address probe (from ::) is told to everyone, unsolicited (RFC
            // 4861 7.2.4); anyone else gets the answer to the MAC it gave or sent from.
            let (to, to_mac, solicited) = if src.is_unspecified() {
                (ALL_NODES, ipv6::multicast_mac(ALL_NODES), false)
            } else {
                (src, source_mac.unwrap_or(requester_mac), true)
            };
            let headers = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
            let room = pkt.room_mut();
            let Some(message_len) = room.get_mut(headers..).and_then(|message| {
                ndisc::emit_neighbor_advert(message, target, iface.mac, true, solicited, true)
            }) else {
                return Answer::Drop(DropReason::NoBuffer);
            };
            let len = write_headers(
                room,
                iface.mac,
                to_mac,
                target,
                to,
                ND_HOP_LIMIT,
                message_len,
            );
            if !pkt.set_len(len) {
                return Answer::Drop(DropReason::NoBuffer);
            }
            Answer::Reply
        }
        Ok(NdRepr::RouterSolicit { source_mac }) => {
            if v6.advertise.is_none() {
                return Answer::Drop(DropReason::Ipv6LocalUnhandled);
            }
            // From :: (a host without an address yet): to all nodes (RFC 4861 6.2.6).
            if src.is_unspecified() {
                return Answer::RouterSolicited {
                    to: ALL_NODES,
                    mac: ipv6::multicast_mac(ALL_NODES),
                };
            }
            Answer::RouterSolicited {
                to: src,
                mac: source_mac.unwrap_or(requester_mac),
            }
        }
        Ok(NdRepr::NeighborAdvert {
            solicited,
            target,
            target_mac,
            ..
        }) => {
            // Another node answering for one of our addresses (its duplicate address
            // detection found ours, or it claims it).
            if v6.owns(target) {
                return Answer::Drop(DropReason::NdiscClaimsOurAddress);
            }
            let Some(mac) = target_mac.filter(|_| v6.on_link(target)) else {
                return Answer::Drop(DropReason::Ipv6LocalUnhandled);
            };
            // An answer only if solicited and to one of our addresses; the table then decides
            // whether a request of ours is outstanding.
            let source = if solicited && v6.owns(dst) {
                ArpSource::ReplyToUs
            } else {
                ArpSource::Other
            };
            *sighting = Some(Sighting {
                ip: target,
                mac,
                source,
            });
            Answer::Learn
        }
        // Other routers' advertisements: nothing uses them until IPv6 is forwarded.
        Ok(NdRepr::RouterAdvert { .. }) => Answer::Drop(DropReason::Ipv6LocalUnhandled),
        Err(NdError::NotNd) => Answer::Drop(DropReason::Ipv6LocalUnhandled),
        Err(_) => Answer::Drop(DropReason::MalformedNdisc),
    }
}

fn is_martian_source(src: Ipv6Addr) -> bool {
    src.is_multicast() || src.is_loopback()
}

/// Turns an echo request to one of the gateway's addresses into the reply, in place.
fn echo_reply(pkt: &mut PacketBuf, iface: &Interface, v6: &Ipv6Interface) -> Answer {
    let bytes = pkt.bytes_mut();
    let requester_mac = EthernetFrame::new_unchecked(&*bytes).src_addr();
    let Ok(mut ip) = Ipv6Packet::new_checked(&mut bytes[ethernet::HEADER_LEN..]) else {
        return Answer::Drop(DropReason::MalformedIpv6);
    };
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    // Not to a group (a ping of ff02::1 would make every answer a flood), and only
    // without extension headers, which the reply would have to carry back.
    if !v6.owns(dst) || ip.next_header() != next_header::ICMPV6 {
        return Answer::Drop(DropReason::Ipv6LocalUnhandled);
    }
    {
        let Ok(mut icmp) = Icmpv6Packet::new_checked(ip.payload_mut()) else {
            return Answer::Drop(DropReason::MalformedIpv6);
        };
        if icmp.code() != 0 || !icmp.verify_checksum(src, dst) {
            return Answer::Drop(DropReason::L4Checksum);
        }
        icmp.set_msg_type(msg_type::ECHO_REPLY);
        icmp.fill_checksum(dst, src);
    }
    ip.set_src_addr(dst);
    ip.set_dst_addr(src);
    ip.set_hop_limit(HOP_LIMIT);
    let mut frame = EthernetFrame::new_unchecked(bytes);
    frame.set_dst_addr(requester_mac);
    frame.set_src_addr(iface.mac);
    Answer::Reply
}

/// Writes the Ethernet and IPv6 headers in front of an ICMPv6 message of `message_len` bytes
/// already at its place in `room`, and fills its checksum. Returns the frame's length.
fn write_headers(
    room: &mut [u8],
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    message_len: usize,
) -> usize {
    let headers = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
    let len = headers + message_len;
    let frame = &mut room[..len];
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst_addr(dst_mac);
        eth.set_src_addr(src_mac);
        eth.set_ethertype(ethernet::ethertype::IPV6);
    }
    let repr = Ipv6Repr {
        src,
        dst,
        next_header: next_header::ICMPV6,
        // Messages are a few hundred bytes at most.
        payload_len: message_len as u16,
        hop_limit,
        traffic_class: 0,
        flow_label: 0,
    };
    repr.emit(&mut Ipv6Packet::new_unchecked(
        &mut frame[ethernet::HEADER_LEN..],
    ));
    Icmpv6Packet::new_unchecked(&mut frame[headers..]).fill_checksum(src, dst);
    len
}

/// Writes a whole Router Advertisement frame for `iface` into `room`, to `dst` at `dst_mac`:
/// every address of a /64 as a SLAAC prefix, others as on-link prefixes, then the
/// `withdrawn` prefixes with zero lifetimes (RFC 7084 L-13: hosts stop choosing addresses
/// in a prefix the link no longer has), the MTU unless it is Ethernet's 1500, the DNS
/// servers, and the router lifetime the config worked out (0 without an IPv6 default route
/// elsewhere: see `RouterConfig::with_ipv6`). At most [`MAX_ADVERTISED_PREFIXES`] prefixes,
/// the current ones first; one that came with a lease is announced for what is left of it
/// at `now_secs`, and no longer than RFC 9096's limits. Returns its length, or `None` if
/// `room` is too short.
pub fn write_router_advert(
    room: &mut [u8],
    iface: &Interface,
    v6: &Ipv6Interface,
    advert: &RouterAdvertConfig,
    (withdrawn, now_secs): (&[(Ipv6Addr, u8)], u64),
    dst: Ipv6Addr,
    dst_mac: EthernetAddress,
) -> Option<usize> {
    let mut prefixes = [PrefixInfo {
        prefix: Ipv6Addr::UNSPECIFIED,
        len: 0,
        on_link: false,
        autonomous: false,
        valid_secs: 0,
        preferred_secs: 0,
    }; MAX_ADVERTISED_PREFIXES];
    let mut count = 0;
    // Config validation allows 1..=128; anything else would make an option receivers refuse
    // (found by fuzzing a hand-built interface with /129), so it is left out.
    let valid = v6
        .addresses
        .iter()
        .filter(|&&(_, len)| (1..=128).contains(&len));
    for (&(addr, len), slot) in valid.zip(&mut prefixes) {
        let prefix = prefix_of(addr, len);
        let lease = advert
            .leases
            .iter()
            .find(|lease| (prefix_of(lease.prefix, lease.len), lease.len) == (prefix, len));
        let (valid_secs, preferred_secs) = match lease {
            Some(lease) => leased_lifetimes(lease, now_secs),
            None => (PREFIX_VALID_SECS, PREFIX_PREFERRED_SECS),
        };
        *slot = PrefixInfo {
            prefix,
            len,
            on_link: true,
            autonomous: len == 64,
            valid_secs,
            preferred_secs,
        };
        count += 1;
    }
    for &(prefix, len) in withdrawn {
        let current = prefixes[..count]
            .iter()
            .any(|info| (info.prefix, info.len) == (prefix, len));
        if count == prefixes.len() || current || !(1..=128).contains(&len) {
            continue;
        }
        // Valid 0: RFC 4862 5.5.3 e) has hosts keep the addresses two hours more, for the
        // connections that use them; preferred 0: none new.
        prefixes[count] = PrefixInfo {
            prefix: prefix_of(prefix, len),
            len,
            on_link: true,
            autonomous: len == 64,
            valid_secs: 0,
            preferred_secs: 0,
        };
        count += 1;
    }
    let dns_servers =
        &advert.dns_servers[..advert.dns_servers.len().min(MAX_ADVERTISED_DNS_SERVERS)];
    let ra = RouterAdvert {
        cur_hop_limit: HOP_LIMIT,
        managed: false,
        other: false,
        router_lifetime_secs: advert.router_lifetime_secs,
        source_mac: iface.mac,
        mtu: (iface.mtu != 1500).then_some(u32::from(iface.mtu)),
        prefixes: &prefixes[..count],
        dns_servers,
        dns_lifetime_secs: advert.interval_secs.saturating_mul(DNS_LIFETIME_INTERVALS),
    };
    let headers = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
    let message_len = ra.emit(room.get_mut(headers..)?)?;
    Some(write_headers(
        room,
        iface.mac,
        dst_mac,
        v6.link_local,
        dst,
        ND_HOP_LIMIT,
        message_len,
    ))
}

/// The valid and preferred lifetimes to announce for a leased prefix at `now_secs`: what is
/// left of the lease, within RFC 9096's limits; preferred never beyond valid. A deprecated
/// address (its preferred lifetime over) is announced with a preferred lifetime of 0.
fn leased_lifetimes(lease: &PrefixLease, now_secs: u64) -> (u32, u32) {
    let left = |until: Option<u64>, limit: u32| match until {
        None => limit,
        Some(until) => until.saturating_sub(now_secs).min(u64::from(limit)) as u32,
    };
    let valid = left(lease.valid_until_secs, LEASED_VALID_LIMIT_SECS);
    let preferred = left(lease.preferred_until_secs, LEASED_PREFERRED_LIMIT_SECS);
    (valid, preferred.min(valid))
}

/// Writes a whole Neighbor Solicitation frame for `target` into `room`: to the MAC we have
/// for it (a unicast check that it is still there), or to its solicited-node group. From
/// `src` with our link-layer address, or, with `src` None, from `::` without one: duplicate
/// address detection of one of our own addresses (RFC 4862 5.4.2). Returns its length, or
/// `None` if `room` is too short.
pub fn write_neighbor_solicit(
    room: &mut [u8],
    iface: &Interface,
    target: Ipv6Addr,
    unicast: Option<EthernetAddress>,
    src: Option<Ipv6Addr>,
) -> Option<usize> {
    let headers = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
    let source_mac = src.map(|_| iface.mac);
    let message_len = ndisc::emit_neighbor_solicit(room.get_mut(headers..)?, target, source_mac)?;
    let (dst, dst_mac) = match unicast {
        Some(mac) => (target, mac),
        None => {
            let group = ipv6::solicited_node(target);
            (group, ipv6::multicast_mac(group))
        }
    };
    let src = src.unwrap_or(Ipv6Addr::UNSPECIFIED);
    Some(write_headers(
        room,
        iface.mac,
        dst_mac,
        src,
        dst,
        ND_HOP_LIMIT,
        message_len,
    ))
}

/// MLDv2 record types (RFC 3810 5.2.12) the gateway sends.
pub mod mld_record {
    /// In a report answering a query: the group is listened to (exclude mode, no sources).
    pub const MODE_IS_EXCLUDE: u8 = 2;
    /// In an unsolicited report: start listening to the group.
    pub const CHANGE_TO_EXCLUDE: u8 = 4;
}

/// `ff02::16`: where MLDv2 reports go.
pub const ALL_MLDV2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);
/// Groups one report names at most: the solicited-node groups of the link-local address
/// and of up to [`MAX_ADVERTISED_PREFIXES`] others, and all routers.
const MAX_MLD_GROUPS: usize = MAX_ADVERTISED_PREFIXES + 2;

/// The groups the gateway listens to on an interface (RFC 4861 7.2.1: a node joins the
/// solicited-node group of each of its addresses; a router, all routers), without repeats.
pub fn joined_groups(v6: &Ipv6Interface) -> impl Iterator<Item = Ipv6Addr> + '_ {
    let solicited = std::iter::once(v6.link_local)
        .chain(v6.addresses.iter().map(|&(addr, _)| addr))
        .map(ipv6::solicited_node);
    let mut seen: Vec<Ipv6Addr> = Vec::new();
    solicited
        .chain(std::iter::once(ipv6::ALL_ROUTERS))
        .filter(move |group| {
            let new = !seen.contains(group);
            if new {
                seen.push(*group);
            }
            new
        })
        .take(MAX_MLD_GROUPS)
}

/// Writes a whole MLDv2 report frame (RFC 3810 5.2) into `room`: from our link-local address
/// with hop limit 1 and a router alert, to all MLDv2 routers, naming each group we listen to
/// with `record_type` ([`mld_record`]). Snooping switches forward a group's traffic (Neighbor
/// Solicitations for us among it) only to ports that reported it. Returns its length, or
/// `None` if `room` is too short.
pub fn write_mld_report(
    room: &mut [u8],
    iface: &Interface,
    v6: &Ipv6Interface,
    record_type: u8,
) -> Option<usize> {
    /// Next header ICMPv6, length 0 (8 bytes): a router alert for MLD (RFC 2711, value 0)
    /// and a PadN of 2.
    const HOP_BY_HOP: [u8; 8] = [next_header::ICMPV6, 0, 5, 2, 0, 0, 1, 0];
    const RECORD_LEN: usize = 20;
    let mut groups = [Ipv6Addr::UNSPECIFIED; MAX_MLD_GROUPS];
    let mut count = 0;
    for (slot, group) in groups.iter_mut().zip(joined_groups(v6)) {
        *slot = group;
        count += 1;
    }
    let message_len = icmpv6::HEADER_LEN + count * RECORD_LEN;
    let start = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
    let len = start + HOP_BY_HOP.len() + message_len;
    let frame = room.get_mut(..len)?;
    frame.fill(0);
    {
        let mut eth = EthernetFrame::new_unchecked(&mut *frame);
        eth.set_dst_addr(ipv6::multicast_mac(ALL_MLDV2_ROUTERS));
        eth.set_src_addr(iface.mac);
        eth.set_ethertype(ethernet::ethertype::IPV6);
    }
    let repr = Ipv6Repr {
        src: v6.link_local,
        dst: ALL_MLDV2_ROUTERS,
        next_header: next_header::HOP_BY_HOP,
        payload_len: (HOP_BY_HOP.len() + message_len) as u16,
        hop_limit: 1,
        traffic_class: 0,
        flow_label: 0,
    };
    repr.emit(&mut Ipv6Packet::new_unchecked(
        &mut frame[ethernet::HEADER_LEN..],
    ));
    frame[start..start + HOP_BY_HOP.len()].copy_from_slice(&HOP_BY_HOP);
    let message = &mut frame[start + HOP_BY_HOP.len()..];
    message[0] = msg_type::MLD_V2_REPORT;
    message[6..8].copy_from_slice(&(count as u16).to_be_bytes());
    for (record, group) in message[icmpv6::HEADER_LEN..]
        .chunks_exact_mut(RECORD_LEN)
        .zip(&groups[..count])
    {
        record[0] = record_type;
        record[4..20].copy_from_slice(&group.octets());
    }
    Icmpv6Packet::new_unchecked(message).fill_checksum(v6.link_local, ALL_MLDV2_ROUTERS);
    Some(len)
}

/// `addr` with its interface in it, if it is link-local: the same `fe80::1` on two links is
/// two neighbours, and the neighbour table is keyed by address alone. The port goes into
/// the second 16-bit word, which a link-local address has zero (fe80::/64), as BSD's stack
/// embeds its scope. [`unscoped`] takes it out again.
pub fn scoped(addr: Ipv6Addr, port: u16) -> Ipv6Addr {
    let mut segments = addr.segments();
    if ipv6::is_link_local(addr) {
        segments[1] = port.wrapping_add(1);
    }
    Ipv6Addr::from(segments)
}

/// The interface a neighbour-table address (as [`scoped`] keys it) is on, and the address
/// as it goes on the wire: the interface whose link holds it (for a link-local one, the port
/// in it).
pub fn neighbor_port(router: &RouterConfig, scoped_addr: Ipv6Addr) -> Option<(u16, Ipv6Addr)> {
    let addr = unscoped(scoped_addr);
    (0..router.interfaces.len() as u16)
        .find(|&port| {
            router
                .ipv6(port)
                .is_some_and(|v6| v6.on_link(addr) && scoped(addr, port) == scoped_addr)
        })
        .map(|port| (port, addr))
}

/// `addr` as it goes on the wire: [`scoped`]'s port taken out of a link-local address.
pub fn unscoped(addr: Ipv6Addr) -> Ipv6Addr {
    let mut segments = addr.segments();
    if ipv6::is_link_local(addr) {
        segments[1] = 0;
    }
    Ipv6Addr::from(segments)
}

pub use crate::wire::ipv6::prefix_of;

/// Whether `frame` is IPv6 Neighbor Discovery (no extension headers): the control thread
/// serves it with ARP, before anything else.
pub fn is_ndisc(frame: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    if eth.ethertype() != ethernet::ethertype::IPV6 {
        return false;
    }
    let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else {
        return false;
    };
    ip.next_header() == next_header::ICMPV6
        && matches!(
            ip.payload().first(),
            Some(&(msg_type::ROUTER_SOLICIT..=msg_type::NEIGHBOR_ADVERT))
        )
}

/// The Ethernet + IPv6 + ICMPv6 headers of the gateway's messages: what room an echo reply
/// or an ND answer needs beyond its body.
pub const HEADERS_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + icmpv6::HEADER_LEN;

/// RFC 4861 6.2.4: the first few unsolicited advertisements go at most this far apart, so
/// that hosts hear of a new router soon.
const MAX_INITIAL_ADVERT_INTERVAL_NS: u64 = 16 * SECOND_NS;
const MAX_INITIAL_ADVERTS: u32 = 3;
/// RFC 4861 6.2.6's MIN_DELAY_BETWEEN_RAS: however often the announcement changes (a
/// flapping uplink, a prefix delegated and withdrawn), advertisements go at most this often.
const MIN_DELAY_BETWEEN_ADVERTS_NS: u64 = 3 * SECOND_NS;
const SECOND_NS: u64 = 1_000_000_000;

/// When each interface's next unsolicited Router Advertisement is due (RFC 4861 6.2.4): at a
/// random point between a third of the interval and the interval (MinRtrAdvInterval's
/// default), the first three at most 16 s apart. Randomised so that routers on one link do
/// not synchronise.
#[derive(Debug)]
pub struct AdvertSchedule {
    /// Per interface: when the next is due, how many have gone, and when the last went.
    next_ns: Vec<u64>,
    sent: Vec<u32>,
    last_ns: Vec<Option<u64>>,
    /// Per interface: the prefixes and router lifetime it last announced.
    announced: Vec<(Vec<(Ipv6Addr, u8)>, u16)>,
    /// Per interface: prefixes it announced and no longer has, with how many unsolicited
    /// advertisements are still to carry them with zero lifetimes.
    withdrawn: Vec<Vec<(Ipv6Addr, u8, u32)>>,
    random: u64,
}

/// Unsolicited advertisements that carry a withdrawn prefix: the quick initial series that
/// a change starts, so a host that misses one still hears it.
const WITHDRAWN_ADVERTS: u32 = MAX_INITIAL_ADVERTS;

impl AdvertSchedule {
    /// `seed`: any value that differs between runs (the clock).
    pub fn new(seed: u64) -> AdvertSchedule {
        AdvertSchedule {
            next_ns: Vec::new(),
            sent: Vec::new(),
            last_ns: Vec::new(),
            announced: Vec::new(),
            withdrawn: Vec::new(),
            random: seed | 1,
        }
    }

    /// Whether interface `port`, advertising at most every `interval_secs`, is due for an
    /// unsolicited advertisement at `now_ns`; if it is, the next is scheduled from now.
    pub fn due(&mut self, port: usize, interval_secs: u32, now_ns: u64) -> bool {
        if self.next_ns.len() <= port {
            self.next_ns.resize(port + 1, 0);
            self.sent.resize(port + 1, 0);
            self.last_ns.resize(port + 1, None);
        }
        if now_ns < self.next_ns[port] {
            return false;
        }
        self.last_ns[port] = Some(now_ns);
        let max_ns = u64::from(interval_secs.max(1)) * SECOND_NS;
        let min_ns = max_ns / 3;
        let mut wait = min_ns + self.next_random() % (max_ns - min_ns + 1);
        if self.sent[port] < MAX_INITIAL_ADVERTS {
            wait = wait.min(MAX_INITIAL_ADVERT_INTERVAL_NS);
        }
        self.sent[port] = self.sent[port].saturating_add(1);
        self.next_ns[port] = now_ns.saturating_add(wait);
        true
    }

    /// Interface `port` is to announce `addresses` (their prefixes) and `router_lifetime_secs`.
    /// If that differs from what it announced last (another address in a prefix it had does
    /// not), the next advertisement is due as soon as RFC 4861 6.2.6 allows (3 s after the
    /// last) and the quick initial series starts again (6.2.4), so that hosts learn a prefix
    /// delegated a moment ago, or a default route just learnt, without waiting out the
    /// interval.
    pub fn announce(
        &mut self,
        port: usize,
        addresses: &[(Ipv6Addr, u8)],
        router_lifetime_secs: u16,
    ) {
        if self.announced.len() <= port {
            self.announced.resize(port + 1, (Vec::new(), 0));
        }
        let mut new: Vec<(Ipv6Addr, u8)> = addresses
            .iter()
            .map(|&(addr, len)| (prefix_of(addr, len), len))
            .collect();
        // A set: the kernel may list addresses in another order, or two in one prefix.
        new.sort_unstable();
        new.dedup();
        let last = &mut self.announced[port];
        if last.0 == new && last.1 == router_lifetime_secs {
            return;
        }
        let old = std::mem::replace(last, (new.clone(), router_lifetime_secs)).0;
        if self.withdrawn.len() <= port {
            self.withdrawn.resize(port + 1, Vec::new());
        }
        let withdrawn = &mut self.withdrawn[port];
        withdrawn.retain(|&(prefix, len, _)| !new.contains(&(prefix, len)));
        for gone in old.into_iter().filter(|prefix| !new.contains(prefix)) {
            withdrawn.retain(|&(prefix, len, _)| (prefix, len) != gone);
            withdrawn.push((gone.0, gone.1, WITHDRAWN_ADVERTS));
        }
        if let (Some(next), Some(sent)) = (self.next_ns.get_mut(port), self.sent.get_mut(port)) {
            let last = self.last_ns.get(port).copied().flatten();
            *next = last.map_or(0, |last| last.saturating_add(MIN_DELAY_BETWEEN_ADVERTS_NS));
            *sent = 0;
        }
    }

    /// A solicited advertisement went out on `port` at `now_ns`: the next change waits 3 s
    /// from it too.
    pub fn solicited(&mut self, port: usize, now_ns: u64) {
        if let Some(last) = self.last_ns.get_mut(port) {
            *last = Some(now_ns);
        }
    }

    /// The prefixes interface `port` withdrew that its advertisements still carry, with zero
    /// lifetimes (see [`write_router_advert`]): the earliest withdrawn first, at most `room`
    /// (what the advertisement has room for beside the interface's current prefixes).
    pub fn withdrawn(&self, port: usize, room: usize) -> Vec<(Ipv6Addr, u8)> {
        self.withdrawn.get(port).map_or(Vec::new(), |withdrawn| {
            withdrawn
                .iter()
                .take(room)
                .map(|&(prefix, len, _)| (prefix, len))
                .collect()
        })
    }

    /// An unsolicited advertisement carrying the first `carried` of `port`'s withdrawn
    /// prefixes went out: one fewer to go for each of those (the others wait for room).
    pub fn advertised(&mut self, port: usize, carried: usize) {
        if let Some(withdrawn) = self.withdrawn.get_mut(port) {
            for entry in withdrawn.iter_mut().take(carried) {
                entry.2 = entry.2.saturating_sub(1);
            }
            withdrawn.retain(|&(_, _, left)| left > 0);
        }
    }

    /// xorshift64: the spread of the intervals needs no better.
    fn next_random(&mut self) -> u64 {
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use etherparse::{Icmpv6Type, PacketBuilder};

    use super::*;
    use crate::wire::ipv6::{link_local, solicited_node};
    use crate::wire::ndisc::{emit_neighbor_solicit, emit_router_solicit, NdOption};

    const GW_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
    const HOST_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x10]);
    const GW: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
    const HOST: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);

    fn iface() -> Interface {
        Interface {
            mac: GW_MAC,
            addr: Ipv4Addr::new(192, 168, 1, 1),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        }
    }

    fn v6(advertise: bool) -> Ipv6Interface {
        Ipv6Interface {
            link_local: link_local(GW_MAC),
            addresses: vec![(GW, 64), (Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1), 48)],
            advertise: advertise.then(|| RouterAdvertConfig {
                interval_secs: 600,
                dns_servers: vec![GW],
                router_lifetime_secs: 0,
                leases: Vec::new(),
            }),
            autoconfigure: false,
        }
    }

    /// A frame from the host carrying ICMPv6 `message` (checksum filled) to `dst`.
    fn frame(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        dst_mac: EthernetAddress,
        hop_limit: u8,
        mut message: Vec<u8>,
    ) -> Vec<u8> {
        Icmpv6Packet::new_unchecked(&mut message[..]).fill_checksum(src, dst);
        let mut frame = vec![0u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN];
        let message_len = message.len();
        frame.extend(message);
        frame.resize(2048, 0);
        let len = write_headers(
            &mut frame,
            HOST_MAC,
            dst_mac,
            src,
            dst,
            hop_limit,
            message_len,
        );
        // write_headers filled the checksum again, over the same bytes.
        frame.truncate(len);
        frame
    }

    fn run(frame: &[u8], advertise: bool) -> (Answer, Vec<u8>) {
        let (answer, _, reply) = run_and_see(frame, advertise);
        (answer, reply)
    }

    fn run_and_see(frame: &[u8], advertise: bool) -> (Answer, Option<Sighting>, Vec<u8>) {
        let mut room = frame.to_vec();
        room.resize(2048, 0);
        let mut pkt = PacketBuf::new(&mut room, frame.len());
        let (answer, sighting) = answer(&mut pkt, &iface(), &v6(advertise));
        let len = pkt.len();
        (answer, sighting, room[..len].to_vec())
    }

    fn advertisement(target: Ipv6Addr, dst: Ipv6Addr, solicited: bool) -> Vec<u8> {
        let mut message = [0u8; 64];
        let len =
            ndisc::emit_neighbor_advert(&mut message, target, HOST_MAC, false, solicited, true)
                .unwrap();
        let dst_mac = if dst.is_multicast() {
            ipv6::multicast_mac(dst)
        } else {
            GW_MAC
        };
        frame(target, dst, dst_mac, 255, message[..len].to_vec())
    }

    fn solicitation(src: Ipv6Addr, target: Ipv6Addr, with_mac: bool) -> Vec<u8> {
        let mut message = [0u8; 64];
        let len =
            emit_neighbor_solicit(&mut message, target, with_mac.then_some(HOST_MAC)).unwrap();
        let dst = solicited_node(target);
        frame(
            src,
            dst,
            ipv6::multicast_mac(dst),
            255,
            message[..len].to_vec(),
        )
    }

    #[test]
    fn a_solicitation_for_our_address_is_answered() {
        let ns = solicitation(HOST, GW, true);
        assert_eq!(
            classify(&ns, &v6(false)),
            Verdict::Control(ControlWork::Ndisc)
        );
        assert!(is_ndisc(&ns));
        let (answer, reply) = run(&ns, false);
        assert_eq!(answer, Answer::Reply);
        // etherparse reads it as an advertisement from our address to the host.
        let parsed = etherparse::SlicedPacket::from_ethernet(&reply).unwrap();
        let Some(etherparse::LinkSlice::Ethernet2(eth)) = parsed.link else {
            panic!()
        };
        assert_eq!((eth.source(), eth.destination()), (GW_MAC.0, HOST_MAC.0));
        let Some(etherparse::NetSlice::Ipv6(ip)) = parsed.net else {
            panic!()
        };
        assert_eq!(
            (ip.header().source_addr(), ip.header().destination_addr()),
            (GW, HOST)
        );
        assert_eq!(ip.header().hop_limit(), 255);
        let ip6 = Ipv6Packet::new_checked(&reply[ethernet::HEADER_LEN..]).unwrap();
        let icmp = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
        assert_eq!(
            NdRepr::parse(&icmp, 255, GW, HOST),
            Ok(NdRepr::NeighborAdvert {
                router: true,
                solicited: true,
                override_: true,
                target: GW,
                target_mac: Some(GW_MAC),
            })
        );
        // The link-local address too.
        let ns = solicitation(HOST, link_local(GW_MAC), false);
        assert_eq!(run(&ns, false).0, Answer::Reply);
    }

    #[test]
    fn solicitations_and_advertisements_say_where_neighbours_are() {
        // A solicitation for us with the sender's MAC: it is about to talk to us.
        let (answer, sighting, _) = run_and_see(&solicitation(HOST, GW, true), false);
        assert_eq!(answer, Answer::Reply);
        assert_eq!(
            sighting,
            Some(Sighting {
                ip: HOST,
                mac: HOST_MAC,
                source: ArpSource::RequestForUs
            })
        );
        // Without one, nothing to learn (the answer goes to the frame's source).
        assert_eq!(run_and_see(&solicitation(HOST, GW, false), false).1, None);
        // A solicited advertisement to us answers; an unsolicited one to all nodes does not.
        let (answer, sighting, _) = run_and_see(&advertisement(HOST, GW, true), false);
        assert_eq!(answer, Answer::Learn);
        assert_eq!(sighting.map(|seen| seen.source), Some(ArpSource::ReplyToUs));
        let (_, sighting, _) = run_and_see(&advertisement(HOST, ALL_NODES, false), false);
        assert_eq!(sighting.map(|seen| seen.source), Some(ArpSource::Other));
        // Off the link: not learnt.
        let far = Ipv6Addr::new(0x2001, 0xdb8, 99, 0, 0, 0, 0, 1);
        let (answer, sighting, _) = run_and_see(&advertisement(far, GW, true), false);
        assert_eq!(
            (answer, sighting),
            (Answer::Drop(DropReason::Ipv6LocalUnhandled), None)
        );
        // One of our own addresses advertised by another node.
        let (answer, sighting, _) = run_and_see(&advertisement(GW, ALL_NODES, false), false);
        assert_eq!(
            (answer, sighting),
            (Answer::Drop(DropReason::NdiscClaimsOurAddress), None)
        );
    }

    #[test]
    fn our_solicitations_and_duplicate_address_probes() {
        let mut room = [0u8; 128];
        // A check of a neighbour at the MAC we have: unicast, from us, with our MAC.
        let len =
            write_neighbor_solicit(&mut room, &iface(), HOST, Some(HOST_MAC), Some(GW)).unwrap();
        let ip = Ipv6Packet::new_checked(&room[ethernet::HEADER_LEN..len]).unwrap();
        assert_eq!(
            (ip.src_addr(), ip.dst_addr(), ip.hop_limit()),
            (GW, HOST, 255)
        );
        assert_eq!(room[..6], HOST_MAC.0);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(
            NdRepr::parse(&icmp, 255, GW, HOST),
            Ok(NdRepr::NeighborSolicit {
                target: HOST,
                source_mac: Some(GW_MAC)
            })
        );
        // Duplicate address detection: from ::, to the solicited-node group, no MAC option,
        // which a receiver must accept as a valid probe.
        let len = write_neighbor_solicit(&mut room, &iface(), GW, None, None).unwrap();
        let ip = Ipv6Packet::new_checked(&room[ethernet::HEADER_LEN..len]).unwrap();
        assert_eq!(
            (ip.src_addr(), ip.dst_addr()),
            (Ipv6Addr::UNSPECIFIED, solicited_node(GW))
        );
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(
            NdRepr::parse(&icmp, 255, Ipv6Addr::UNSPECIFIED, solicited_node(GW)),
            Ok(NdRepr::NeighborSolicit {
                target: GW,
                source_mac: None
            })
        );
        assert_eq!(
            write_neighbor_solicit(&mut room[..70], &iface(), GW, None, None),
            None
        );
    }

    #[test]
    fn our_mld_report_names_every_group_we_listen_to() {
        let v6 = v6(false);
        let mut room = [0u8; 512];
        let len =
            write_mld_report(&mut room, &iface(), &v6, mld_record::CHANGE_TO_EXCLUDE).unwrap();
        assert_eq!(room[..6], [0x33, 0x33, 0, 0, 0, 0x16]);
        let ip = Ipv6Packet::new_checked(&room[ethernet::HEADER_LEN..len]).unwrap();
        assert_eq!(
            (ip.src_addr(), ip.dst_addr(), ip.hop_limit()),
            (link_local(GW_MAC), ALL_MLDV2_ROUTERS, 1)
        );
        let ext = walk_extensions(ip.next_header(), ip.payload()).unwrap();
        assert!(ext.hop_by_hop);
        assert_eq!((ext.protocol, ext.offset), (next_header::ICMPV6, 8));
        // The router alert option for MLD.
        assert_eq!(ip.payload()[2..6], [5, 2, 0, 0]);
        let message = Icmpv6Packet::new_checked(&ip.payload()[8..]).unwrap();
        assert_eq!(message.msg_type(), msg_type::MLD_V2_REPORT);
        assert!(message.verify_checksum(ip.src_addr(), ip.dst_addr()));
        let count = usize::from(u16::from_be_bytes([
            ip.payload()[8 + 6],
            ip.payload()[8 + 7],
        ]));
        // The three addresses end alike (::1 and the MAC's ...:00:01), so they share one
        // solicited-node group, named once; and all routers.
        assert_eq!(count, 2);
        let groups: Vec<Ipv6Addr> = message
            .data()
            .chunks_exact(20)
            .map(|record| {
                assert_eq!(record[0], mld_record::CHANGE_TO_EXCLUDE);
                Ipv6Addr::from(<[u8; 16]>::try_from(&record[4..20]).unwrap())
            })
            .collect();
        assert!(groups.contains(&solicited_node(GW)));
        assert!(groups.contains(&solicited_node(link_local(GW_MAC))));
        assert!(groups.contains(&ipv6::ALL_ROUTERS));
        assert_eq!(write_mld_report(&mut room[..100], &iface(), &v6, 2), None);
    }

    #[test]
    fn mld_queries_are_answered_only_from_the_link() {
        // A general query (MLDv1 form: 24 bytes), from a link-local router, hop limit 1.
        let router = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x99);
        let mut query = vec![msg_type::MLD_QUERY, 0, 0, 0, 0, 0x27, 0x10, 0];
        query.extend([0u8; 16]);
        let from_link = frame(
            router,
            ALL_NODES,
            ipv6::multicast_mac(ALL_NODES),
            1,
            query.clone(),
        );
        assert_eq!(
            classify(&from_link, &v6(false)),
            Verdict::Control(ControlWork::Ndisc)
        );
        assert_eq!(run(&from_link, false).0, Answer::MldQuery);
        let routed = frame(
            router,
            ALL_NODES,
            ipv6::multicast_mac(ALL_NODES),
            64,
            query.clone(),
        );
        assert_eq!(
            run(&routed, false).0,
            Answer::Drop(DropReason::MalformedNdisc)
        );
        let global = frame(HOST, ALL_NODES, ipv6::multicast_mac(ALL_NODES), 1, query);
        assert_eq!(
            run(&global, false).0,
            Answer::Drop(DropReason::MalformedNdisc)
        );
    }

    #[test]
    fn link_local_neighbours_are_scoped_by_port() {
        let router = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
        assert_ne!(scoped(router, 0), scoped(router, 1));
        assert_eq!(unscoped(scoped(router, 7)), router);
        // Global addresses are one everywhere.
        assert_eq!(scoped(HOST, 3), HOST);
        assert_eq!(unscoped(HOST), HOST);
    }

    #[test]
    fn a_duplicate_address_probe_of_ours_is_told_to_all_nodes() {
        let ns = solicitation(Ipv6Addr::UNSPECIFIED, GW, false);
        let (answer, reply) = run(&ns, false);
        assert_eq!(answer, Answer::Reply);
        let ip6 = Ipv6Packet::new_checked(&reply[ethernet::HEADER_LEN..]).unwrap();
        assert_eq!(ip6.dst_addr(), ALL_NODES);
        assert_eq!(reply[..6], [0x33, 0x33, 0, 0, 0, 1]);
        let icmp = Icmpv6Packet::new_checked(ip6.payload()).unwrap();
        assert!(matches!(
            NdRepr::parse(&icmp, 255, GW, ALL_NODES),
            Ok(NdRepr::NeighborAdvert {
                solicited: false,
                ..
            })
        ));
    }

    #[test]
    fn what_is_not_answered_is_counted() {
        // Another host's address.
        let other = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x99);
        let ns = solicitation(HOST, other, true);
        assert_eq!(
            classify(&ns, &v6(false)),
            Verdict::Drop(DropReason::Ipv6NotForwarded)
        );
        // Its solicited-node group is ours by chance? No: it is not, so the worker drops it;
        // sent to our group, the control thread still refuses a target that is not ours.
        let mut message = [0u8; 64];
        let len = emit_neighbor_solicit(&mut message, other, Some(HOST_MAC)).unwrap();
        let to_ours = frame(
            HOST,
            solicited_node(GW),
            HOST_MAC,
            255,
            message[..len].to_vec(),
        );
        assert_eq!(
            run(&to_ours, false).0,
            Answer::Drop(DropReason::Ipv6LocalUnhandled)
        );
        // From beyond a router.
        let far = frame(
            HOST,
            solicited_node(GW),
            HOST_MAC,
            64,
            message[..len].to_vec(),
        );
        assert_eq!(run(&far, false).0, Answer::Drop(DropReason::MalformedNdisc));
        // Routed traffic.
        let mut udp = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC.0, GW_MAC.0)
            .ipv6(
                HOST.octets(),
                Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1).octets(),
                64,
            )
            .udp(1, 2)
            .write(&mut udp, b"x")
            .unwrap();
        assert_eq!(
            classify(&udp, &v6(false)),
            Verdict::Drop(DropReason::Ipv6NotForwarded)
        );
        // UDP to us.
        let mut to_us = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC.0, GW_MAC.0)
            .ipv6(HOST.octets(), GW.octets(), 64)
            .udp(1, 2)
            .write(&mut to_us, b"x")
            .unwrap();
        assert_eq!(
            classify(&to_us, &v6(false)),
            Verdict::Drop(DropReason::Ipv6LocalUnhandled)
        );
        // A Type 0 routing header.
        let mut rh0 = to_us.clone();
        let at = ethernet::HEADER_LEN;
        rh0[at + 6] = next_header::ROUTING;
        rh0.splice(at + 40..at + 40, [next_header::UDP, 0, 0, 0, 0, 0, 0, 0]);
        let payload_len = u16::from_be_bytes([rh0[at + 4], rh0[at + 5]]) + 8;
        rh0[at + 4..at + 6].copy_from_slice(&payload_len.to_be_bytes());
        assert_eq!(
            classify(&rh0, &v6(false)),
            Verdict::Drop(DropReason::Ipv6ExtensionHeaders)
        );
        // Truncated.
        assert_eq!(
            classify(&to_us[..50], &v6(false)),
            Verdict::Drop(DropReason::MalformedIpv6)
        );
        // A router solicitation where nothing is advertised.
        let mut rs = [0u8; 16];
        let len = emit_router_solicit(&mut rs, HOST_MAC).unwrap();
        let rs = frame(
            link_local(HOST_MAC),
            ipv6::ALL_ROUTERS,
            HOST_MAC,
            255,
            rs[..len].to_vec(),
        );
        assert_eq!(
            run(&rs, false).0,
            Answer::Drop(DropReason::Ipv6LocalUnhandled)
        );
    }

    #[test]
    fn echo_requests_to_our_addresses_are_answered() {
        let mut request = Vec::new();
        PacketBuilder::ethernet2(HOST_MAC.0, GW_MAC.0)
            .ipv6(HOST.octets(), GW.octets(), 64)
            .icmpv6_echo_request(7, 1)
            .write(&mut request, b"abcdefgh")
            .unwrap();
        assert_eq!(
            classify(&request, &v6(false)),
            Verdict::Control(ControlWork::LocalIcmp)
        );
        let (answer, reply) = run(&request, false);
        assert_eq!(answer, Answer::Reply);
        let parsed = etherparse::SlicedPacket::from_ethernet(&reply).unwrap();
        let Some(etherparse::TransportSlice::Icmpv6(icmp)) = parsed.transport else {
            panic!()
        };
        assert!(
            matches!(icmp.icmp_type(), Icmpv6Type::EchoReply(echo) if echo.id == 7 && echo.seq == 1)
        );
        assert_eq!(icmp.payload(), b"abcdefgh");
        let Some(etherparse::NetSlice::Ipv6(ip)) = parsed.net else {
            panic!()
        };
        assert_eq!(
            (ip.header().source_addr(), ip.header().destination_addr()),
            (GW, HOST)
        );
        let message = Ipv6Packet::new_checked(&reply[ethernet::HEADER_LEN..]).unwrap();
        assert!(Icmpv6Packet::new_checked(message.payload())
            .unwrap()
            .verify_checksum(GW, HOST));
        // A bad checksum is not answered.
        let mut bad = request.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert_eq!(run(&bad, false).0, Answer::Drop(DropReason::L4Checksum));
    }

    #[test]
    fn solicited_and_periodic_advertisements() {
        let mut rs = [0u8; 16];
        let len = emit_router_solicit(&mut rs, HOST_MAC).unwrap();
        let from = link_local(HOST_MAC);
        let rs = frame(from, ipv6::ALL_ROUTERS, HOST_MAC, 255, rs[..len].to_vec());
        assert_eq!(
            run(&rs, true).0,
            Answer::RouterSolicited {
                to: from,
                mac: HOST_MAC
            }
        );
        let v6 = v6(true);
        let mut room = [0u8; 512];
        let len = write_router_advert(
            &mut room,
            &iface(),
            &v6,
            v6.advertise.as_ref().unwrap(),
            (&[], 0),
            from,
            HOST_MAC,
        )
        .unwrap();
        let ip = Ipv6Packet::new_checked(&room[ethernet::HEADER_LEN..len]).unwrap();
        assert_eq!(ip.src_addr(), link_local(GW_MAC));
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let Ok(NdRepr::RouterAdvert {
            router_lifetime_secs,
            mut options,
            ..
        }) = NdRepr::parse(&icmp, ip.hop_limit(), ip.src_addr(), ip.dst_addr())
        else {
            panic!("not a valid advertisement");
        };
        // Not a default router: the test's config has no IPv6 default route.
        assert_eq!(router_lifetime_secs, 0);
        let prefixes: Vec<PrefixInfo> = options
            .filter_map(|option| match option {
                Ok(NdOption::PrefixInfo(prefix)) => Some(prefix),
                _ => None,
            })
            .collect();
        assert_eq!(prefixes.len(), 2);
        assert_eq!(
            prefixes[0].prefix,
            Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0)
        );
        assert!(prefixes[0].autonomous && prefixes[0].on_link);
        // A /48 is on-link but no SLAAC prefix.
        assert_eq!((prefixes[1].len, prefixes[1].autonomous), (48, false));
        assert!(options.any(|option| matches!(option, Ok(NdOption::Rdnss { .. }))));
    }

    #[test]
    fn unsolicited_advertisements_follow_rfc_4861_timing() {
        let mut schedule = AdvertSchedule::new(12345);
        let second = SECOND_NS;
        // Due at once, then three at most 16 s apart, then between 200 and 600 s.
        assert!(schedule.due(1, 600, 0));
        assert!(!schedule.due(1, 600, 0));
        let mut now = 0;
        let mut gaps = Vec::new();
        while gaps.len() < 40 {
            now += second / 10;
            if schedule.due(1, 600, now) {
                gaps.push(now);
            }
        }
        let gaps: Vec<u64> = std::iter::once(gaps[0])
            .chain(gaps.windows(2).map(|pair| pair[1] - pair[0]))
            .collect();
        assert!(gaps[..2]
            .iter()
            .all(|&gap| gap <= 16 * second + second / 10));
        assert!(gaps[3..]
            .iter()
            .all(|&gap| (200 * second..=600 * second + second / 10).contains(&gap)));
        // Random: not all the same.
        assert!(gaps[3..].iter().any(|&gap| gap != gaps[3]));
        // Another interface has its own schedule.
        assert!(schedule.due(0, 4, now));
    }

    /// The prefixes an advertisement carries, with their valid and preferred lifetimes.
    fn advertised_prefixes(frame: &[u8]) -> Vec<(Ipv6Addr, u8, u32, u32)> {
        let ip = Ipv6Packet::new_checked(&frame[ethernet::HEADER_LEN..]).unwrap();
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let Ok(NdRepr::RouterAdvert { options, .. }) =
            NdRepr::parse(&icmp, ip.hop_limit(), ip.src_addr(), ip.dst_addr())
        else {
            panic!("not a valid advertisement");
        };
        options
            .filter_map(|option| match option {
                Ok(NdOption::PrefixInfo(p)) => {
                    Some((p.prefix, p.len, p.valid_secs, p.preferred_secs))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_withdrawn_prefix_is_advertised_with_zero_lifetimes_a_few_times() {
        let old = Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x100, 0, 0, 0, 1);
        let new = Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x200, 0, 0, 0, 1);
        let old_prefix = Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x100, 0, 0, 0, 0);
        let mut schedule = AdvertSchedule::new(7);
        schedule.announce(0, &[(old, 64)], 1800);
        assert!(schedule.withdrawn(0, 8).is_empty());
        // The ISP delegates another prefix: the old one is withdrawn.
        schedule.announce(0, &[(new, 64)], 1800);
        assert_eq!(schedule.withdrawn(0, 8), [(old_prefix, 64)]);
        let mut v6 = v6(true);
        v6.addresses = vec![(new, 64)];
        let advert = v6.advertise.clone().unwrap();
        let mut room = [0u8; 512];
        let withdrawn = schedule.withdrawn(0, 7);
        let len = write_router_advert(
            &mut room,
            &iface(),
            &v6,
            &advert,
            (&withdrawn, 0),
            ALL_NODES,
            ipv6::multicast_mac(ALL_NODES),
        )
        .unwrap();
        let prefixes = advertised_prefixes(&room[..len]);
        assert_eq!(prefixes.len(), 2, "{prefixes:?}");
        assert_eq!(
            (prefixes[0].2, prefixes[0].3),
            (PREFIX_VALID_SECS, PREFIX_PREFERRED_SECS)
        );
        assert_eq!(prefixes[1], (old_prefix, 64, 0, 0));
        // Three unsolicited advertisements carry it, then no more; one with no room for it
        // does not count.
        schedule.advertised(0, 0);
        for _ in 0..WITHDRAWN_ADVERTS {
            assert!(!schedule.withdrawn(0, 8).is_empty());
            schedule.advertised(0, 1);
        }
        assert!(schedule.withdrawn(0, 8).is_empty());
        // A prefix that comes back is no longer withdrawn.
        schedule.announce(0, &[(old, 64)], 1800);
        assert_eq!(
            schedule.withdrawn(0, 8),
            [(Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x200, 0, 0, 0, 0), 64)]
        );
        assert!(schedule.withdrawn(0, 0).is_empty(), "no room");
        schedule.announce(0, &[(old, 64), (new, 64)], 1800);
        assert!(schedule.withdrawn(0, 8).is_empty());
    }

    /// A leased prefix is announced for what is left of its lease, within RFC 9096's 90 and
    /// 45 minutes; a deprecated one with preferred 0; configured prefixes for RFC 4861's
    /// defaults.
    #[test]
    fn a_leased_prefix_is_announced_for_what_is_left_of_its_lease() {
        let delegated = Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x100, 0, 0, 0, 1);
        let advertise = |lease: PrefixLease, now_secs: u64| {
            let mut v6 = v6(true);
            v6.addresses = vec![(GW, 64), (delegated, 64)];
            let mut advert = v6.advertise.clone().unwrap();
            advert.leases = vec![lease];
            let mut room = [0u8; 512];
            let to = (ALL_NODES, ipv6::multicast_mac(ALL_NODES));
            let len = write_router_advert(
                &mut room,
                &iface(),
                &v6,
                &advert,
                (&[], now_secs),
                to.0,
                to.1,
            )
            .unwrap();
            let prefixes = advertised_prefixes(&room[..len]);
            assert_eq!(
                (prefixes[0].2, prefixes[0].3),
                (PREFIX_VALID_SECS, PREFIX_PREFERRED_SECS),
                "the configured prefix"
            );
            (prefixes[1].2, prefixes[1].3)
        };
        let lease = |valid: Option<u64>, preferred: Option<u64>| PrefixLease {
            prefix: prefix_of(delegated, 64),
            len: 64,
            valid_until_secs: valid,
            preferred_until_secs: preferred,
        };
        // Kea's 4000 s valid, 3000 s preferred, 100 s ago: within the limits, what is left.
        assert_eq!(advertise(lease(Some(4100), Some(3100)), 100), (4000, 2700));
        assert_eq!(advertise(lease(Some(1100), Some(600)), 100), (1000, 500));
        // A lease for ever: the limits.
        assert_eq!(advertise(lease(None, None), 100), (5400, 2700));
        // Deprecated, still valid for a minute.
        assert_eq!(advertise(lease(Some(160), Some(90)), 100), (60, 0));
        // Gone: nothing left, whatever the clock says.
        assert_eq!(advertise(lease(Some(50), Some(50)), 100), (0, 0));
        // Preferred never beyond valid.
        assert_eq!(advertise(lease(Some(200), None), 100), (100, 100));
    }

    #[test]
    fn a_changed_announcement_goes_at_once_and_starts_the_quick_series_again() {
        let mut schedule = AdvertSchedule::new(99);
        let delegated = [(Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x100, 0, 0, 0, 1), 64)];
        schedule.announce(1, &[], 0);
        assert!(schedule.due(1, 600, 0));
        // Settled into the long interval.
        let mut now = 0;
        for _ in 0..4 {
            now += 17 * SECOND_NS;
            schedule.due(1, 600, now);
        }
        now += SECOND_NS;
        assert!(!schedule.due(1, 600, now));
        // The same announcement again changes nothing; a new prefix goes now (the last
        // advertisement went more than 3 s ago).
        schedule.announce(1, &[], 0);
        assert!(!schedule.due(1, 600, now));
        schedule.announce(1, &delegated, 0);
        assert!(schedule.due(1, 600, now));
        // ... and the next within 16 s, as after start.
        let next = (1..=160).find(|tenth| schedule.due(1, 600, now + tenth * SECOND_NS / 10));
        let next = now + next.expect("the quick series") * SECOND_NS / 10;
        // Another address in the same prefix is no new announcement.
        let other_address = [(Ipv6Addr::new(0x2001, 0xdb8, 0xff00, 0x100, 0, 0, 0, 2), 64)];
        schedule.announce(1, &other_address, 0);
        assert!(!schedule.due(1, 600, next + SECOND_NS));
        // A new router lifetime is, but goes no sooner than 3 s after the last (RFC 4861
        // 6.2.6), however often the announcement changes.
        schedule.announce(1, &other_address, 1800);
        schedule.announce(1, &delegated, 0);
        schedule.announce(1, &delegated, 1800);
        assert!(!schedule.due(1, 600, next + 2 * SECOND_NS));
        assert!(schedule.due(1, 600, next + 3 * SECOND_NS));
    }

    #[test]
    fn prefixes_clear_host_bits() {
        assert_eq!(
            prefix_of(GW, 64),
            Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0)
        );
        assert_eq!(prefix_of(GW, 0), Ipv6Addr::UNSPECIFIED);
        assert_eq!(prefix_of(GW, 128), GW);
        assert_eq!(prefix_of(GW, 200), GW);
    }
}

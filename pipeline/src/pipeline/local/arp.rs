//! Packet work for the control thread: ARP (what to learn, answers, requests), echo replies.
//! Each rewrites or writes a frame in place; the control thread decides when to call them.

use std::net::Ipv4Addr;

use crate::l3::neigh::{ArpProbe, ArpSource, Learn, NeighborTable};
use crate::packet::PacketBuf;
use crate::pipeline::config::Interface;
use crate::verdict::ControlWork;
use crate::verdict::DropReason;
use crate::wire::{
    arp, checksum, ethernet, icmp, ipv4, ArpOperation, ArpPacket, ArpRepr, EthernetAddress,
    EthernetFrame, IcmpPacket, Ipv4Packet,
};

/// Ethernet's minimum frame without FCS; shorter frames are padded with zeros.
pub const MIN_FRAME_LEN: usize = 60;

/// Whether slow-path `work` may join a control ring holding `queued` of `capacity` packets.
/// PPPoE's control frames (discovery, LCP, authentication, IPCP) may fill it; ARP and
/// Neighbor Discovery stop at three quarters, echo requests and packets awaiting resolution
/// at half. So however a LAN host floods ARP or ND (which land on the same worker as the
/// PPPoE session: non-IP frames go to queue 0), the LCP echoes that keep the session still
/// find room, and however echo requests flood, so does the ARP every next hop depends on.
pub fn admits_to_control(work: ControlWork, queued: usize, capacity: usize) -> bool {
    match work {
        ControlWork::Pppoe => queued < capacity,
        ControlWork::Arp | ControlWork::Ndisc => queued < capacity / 4 * 3,
        ControlWork::LocalIcmp | ControlWork::Resolve { .. } | ControlWork::Resolve6 { .. } => {
            queued < capacity / 2
        }
    }
}

/// The control thread's order within a batch: ARP first, as the rest may wait on it.
pub fn is_arp(frame: &[u8]) -> bool {
    EthernetFrame::new_checked(frame)
        .is_ok_and(|frame| frame.ethertype() == ethernet::ethertype::ARP)
}

/// What the control thread does with one received ARP packet, decided by [`handle_arp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpHandled {
    /// The packet now holds our reply, ready to send back out the ingress port.
    pub replied: bool,
    /// The neighbour table changed a binding the workers use: republish their view.
    pub view_changed: bool,
    /// A request to send out the ingress port (a check that a neighbour is still where we
    /// think, before another MAC is believed for it).
    pub probe: Option<ArpProbe>,
    /// Neither answered nor learnt from: drop it, counted under this reason. `None` with
    /// `replied` false: consumed, its binding stored or confirmed.
    pub dropped: Option<DropReason>,
}

impl ArpHandled {
    fn dropped(reason: DropReason) -> ArpHandled {
        ArpHandled {
            replied: false,
            view_changed: false,
            probe: None,
            dropped: Some(reason),
        }
    }
}

/// Handles one ARP frame received on `iface`: checks that its sender may be a neighbour on
/// this interface, lets `table` apply the binding (see [`crate::l3::neigh`] for what may change
/// what), and turns a request for our address into the reply in place, unless the sender's
/// binding was refused. Packets the binding releases go to `on_released` with the MAC to send
/// them to; packets of an entry evicted to make room go to `on_evicted`.
///
/// The sender must be a host of `iface`'s own connected subnet: the port an ARP packet came
/// in on is where its sender is, so a host on one port can never bind another port's
/// addresses (a LAN guest claiming a WAN host's address or the upstream router's).
///
/// `holds_virtual`: this box's twin holds `iface`'s virtual address (VRRP master), which is
/// then answered and defended as the interface's own. Held by the HA peer instead, it is
/// nobody's neighbour here: the peer's announcements of it bind nothing.
pub fn handle_arp<P>(
    pkt: &mut PacketBuf,
    (iface, holds_virtual): (&Interface, bool),
    table: &mut NeighborTable<P>,
    now_ns: u64,
    mut on_released: impl FnMut(P, EthernetAddress),
    on_evicted: impl FnMut(P),
) -> ArpHandled {
    let Some(arp) = parse_arp(pkt.bytes()) else {
        return ArpHandled::dropped(DropReason::MalformedArp);
    };
    let held = iface.virtual_addr.filter(|_| holds_virtual);
    let ours = |ip: Ipv4Addr| ip == iface.addr || Some(ip) == held;
    let source = match arp.operation {
        ArpOperation::Request if ours(arp.target_protocol_addr) => ArpSource::RequestForUs,
        ArpOperation::Reply
            if arp.target_protocol_addr == iface.addr && arp.target_hardware_addr == iface.mac =>
        {
            ArpSource::ReplyToUs
        }
        ArpOperation::Request | ArpOperation::Reply => ArpSource::Other,
        ArpOperation::Unknown(_) => return ArpHandled::dropped(DropReason::MalformedArp),
    };
    let (ip, mac) = (arp.source_protocol_addr, arp.source_hardware_addr);
    if !mac.is_unicast() || ip.is_unspecified() {
        // Address probes (RFC 5227) and nonsense: no binding, and a reply would go nowhere.
        return ArpHandled::dropped(DropReason::ArpNotForUs);
    }
    if Some(ip) == iface.virtual_addr && held.is_none() {
        return ArpHandled::dropped(DropReason::ArpNotForUs);
    }
    if ours(ip) {
        return ArpHandled::dropped(if mac == iface.mac {
            // Our own gratuitous ARP, seen again.
            DropReason::ArpNotForUs
        } else {
            DropReason::ArpClaimsOurAddress
        });
    }
    if !is_neighbor_address(iface, ip) {
        return ArpHandled::dropped(DropReason::ArpWrongInterface);
    }
    let released = |held| on_released(held, mac);
    let learned = table.learn(ip, mac.0, source, now_ns, released, on_evicted);
    let mut handled = ArpHandled {
        replied: false,
        view_changed: learned == Learn::Changed,
        probe: None,
        dropped: None,
    };
    match learned {
        Learn::Refused {
            refusal,
            probe_old_mac,
        } => {
            handled.dropped = Some(refusal.arp_reason());
            handled.probe = probe_old_mac.map(|old| ArpProbe {
                ip,
                unicast: Some(old),
            });
            return handled;
        }
        Learn::Ignored if source != ArpSource::RequestForUs => {
            handled.dropped = Some(DropReason::ArpNotForUs);
            return handled;
        }
        Learn::Changed | Learn::Confirmed | Learn::Ignored => {}
    }
    if source == ArpSource::RequestForUs {
        let reply = ArpRepr {
            operation: ArpOperation::Reply,
            source_hardware_addr: iface.mac,
            source_protocol_addr: arp.target_protocol_addr,
            target_hardware_addr: mac,
            target_protocol_addr: ip,
        };
        handled.replied = write_arp(pkt, &reply, mac).is_some();
        if !handled.replied {
            handled.dropped = Some(DropReason::NoBuffer);
        }
    }
    handled
}

fn parse_arp(frame: &[u8]) -> Option<ArpRepr> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).ok()?).ok()
}

/// Whether `ip` can be a neighbour on `iface`: a host address of its connected subnet (on a
/// /31 or /32 every address is a host; RFC 3021).
pub fn is_neighbor_address(iface: &Interface, ip: Ipv4Addr) -> bool {
    iface.contains(ip)
        && (iface.prefix_len >= 31 || (ip != iface.network() && ip != iface.broadcast()))
}

/// Writes a broadcast ARP request from `iface` for `target` into `pkt`.
pub fn write_arp_request(pkt: &mut PacketBuf, iface: &Interface, target: Ipv4Addr) -> bool {
    write_arp_probe(pkt, iface, target, None)
}

/// Writes an ARP request from `iface` for `target` into `pkt`: broadcast, or unicast to the
/// MAC we have for it, as Linux probes a known neighbour, so that only it can hear and answer.
/// The target hardware address is zero either way (RFC 826 leaves it unset in requests).
pub fn write_arp_probe(
    pkt: &mut PacketBuf,
    iface: &Interface,
    target: Ipv4Addr,
    unicast: Option<EthernetAddress>,
) -> bool {
    let request = ArpRepr {
        operation: ArpOperation::Request,
        source_hardware_addr: iface.mac,
        source_protocol_addr: iface.addr,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let eth_dst = unicast.unwrap_or(EthernetAddress::BROADCAST);
    write_arp(pkt, &request, eth_dst).is_some()
}

/// A gratuitous ARP announcing that `address` (`iface`'s own, or its virtual one on taking it
/// over) is at `iface`'s MAC, so neighbours update their caches at once: a request for the
/// address, from it (RFC 5227 3).
pub fn write_gratuitous_arp(pkt: &mut PacketBuf, iface: &Interface, address: Ipv4Addr) -> bool {
    let announcement = ArpRepr {
        operation: ArpOperation::Request,
        source_hardware_addr: iface.mac,
        source_protocol_addr: address,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: address,
    };
    write_arp(pkt, &announcement, EthernetAddress::BROADCAST).is_some()
}

fn write_arp(pkt: &mut PacketBuf, repr: &ArpRepr, eth_dst: EthernetAddress) -> Option<()> {
    let room = pkt.room_mut();
    if room.len() < MIN_FRAME_LEN {
        return None;
    }
    let frame_bytes = &mut room[..MIN_FRAME_LEN];
    frame_bytes.fill(0);
    let mut frame = EthernetFrame::new_unchecked(&mut *frame_bytes);
    frame.set_dst_addr(eth_dst);
    frame.set_src_addr(repr.source_hardware_addr);
    frame.set_ethertype(ethernet::ethertype::ARP);
    let arp_bytes = &mut frame_bytes[ethernet::HEADER_LEN..ethernet::HEADER_LEN + arp::BUFFER_LEN];
    repr.emit(&mut ArpPacket::new_unchecked(arp_bytes));
    pkt.set_len(MIN_FRAME_LEN).then_some(())
}

/// Turns an ICMP echo request to `iface` into the echo reply, in place. False if the packet
/// is not a well-formed echo request, which the caller drops.
pub fn echo_reply(pkt: &mut PacketBuf, iface: &Interface) -> bool {
    let bytes = pkt.bytes_mut();
    let Some(ip_bytes) = bytes.get_mut(ethernet::HEADER_LEN..) else {
        return false;
    };
    let Ok(mut ip) = Ipv4Packet::new_checked(ip_bytes) else {
        return false;
    };
    if ip.protocol() != ipv4::protocol::ICMP || ip.is_fragment() || !ip.verify_checksum() {
        return false;
    }
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    {
        let Ok(mut echo) = IcmpPacket::new_checked(ip.payload_mut()) else {
            return false;
        };
        if echo.msg_type() != icmp::msg_type::ECHO_REQUEST || echo.code() != 0 {
            return false;
        }
        echo.set_msg_type(icmp::msg_type::ECHO_REPLY);
        let word_before = u16::from(icmp::msg_type::ECHO_REQUEST) << 8;
        let word_after = u16::from(icmp::msg_type::ECHO_REPLY) << 8;
        let updated = checksum::update16(echo.checksum(), word_before, word_after);
        echo.set_checksum(updated);
    }
    // Eqn. 3 gives 0x0000 where recomputation gives 0xffff: for all-zero data, which a reply
    // with zero identifier and sequence and no payload is (found by fuzzing). A receiver
    // summing such a reply would not get 0xffff and would drop it.
    let message = ip.payload_mut();
    if message[2..4] == [0, 0] && message.iter().all(|&b| b == 0) {
        message[2..4].copy_from_slice(&[0xff, 0xff]);
    }
    ip.set_src_addr(dst);
    ip.set_dst_addr(src);
    ip.set_ttl(64);
    ip.fill_checksum();
    let mut frame = EthernetFrame::new_unchecked(bytes);
    let requester = frame.src_addr();
    frame.set_dst_addr(requester);
    frame.set_src_addr(iface.mac);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::checksum;

    /// An echo request of `data` with the given identifier and sequence, to 192.168.10.1.
    fn echo_request(ident: u16, seq: u16, data: &[u8]) -> Vec<u8> {
        let mut frame = vec![0u8; ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp::HEADER_LEN];
        frame[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
        frame[6..12].copy_from_slice(&[0x02, 0xaa, 0, 0, 0, 0x02]);
        frame[12..14].copy_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(data);
        let total = (frame.len() - ethernet::HEADER_LEN) as u16;
        let ip = &mut frame[ethernet::HEADER_LEN..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = ipv4::protocol::ICMP;
        ip[12..16].copy_from_slice(&[192, 168, 10, 2]);
        ip[16..20].copy_from_slice(&[192, 168, 10, 1]);
        let header_sum = !checksum::fold(checksum::sum(&ip[..ipv4::HEADER_LEN]));
        ip[10..12].copy_from_slice(&header_sum.to_be_bytes());
        let message = &mut ip[ipv4::HEADER_LEN..];
        message[0] = icmp::msg_type::ECHO_REQUEST;
        message[4..6].copy_from_slice(&ident.to_be_bytes());
        message[6..8].copy_from_slice(&seq.to_be_bytes());
        let sum = !checksum::fold(checksum::sum(message));
        message[2..4].copy_from_slice(&sum.to_be_bytes());
        frame
    }

    fn reply_to(mut frame: Vec<u8>) -> Vec<u8> {
        let iface = Interface {
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0x01]),
            addr: Ipv4Addr::new(192, 168, 10, 1),
            prefix_len: 24,
            mtu: 1500,
            virtual_addr: None,
        };
        let len = frame.len();
        let mut pkt = PacketBuf::new(&mut frame, len);
        assert!(echo_reply(&mut pkt, &iface));
        frame
    }

    /// A fuzzing find (fuzz target control_builders): identifier 0, sequence 0 and no data
    /// make the reply all zeros but its checksum, which must then be 0xffff, not 0x0000.
    #[test]
    fn echo_reply_of_all_zero_data_has_a_checksum_that_verifies() {
        for (ident, seq, data) in [(0, 0, &b""[..]), (0, 0, &[0, 0][..]), (7, 1, &b"ping"[..])] {
            let reply = reply_to(echo_request(ident, seq, data));
            let message = &reply[ethernet::HEADER_LEN + ipv4::HEADER_LEN..];
            assert_eq!(message[0], icmp::msg_type::ECHO_REPLY);
            assert_eq!(
                checksum::fold(checksum::sum(message)),
                0xffff,
                "ident {ident} seq {seq} data {data:?}: checksum {:#06x}",
                u16::from_be_bytes([message[2], message[3]])
            );
        }
    }

    #[test]
    fn arp_keeps_half_the_control_ring_for_itself() {
        let resolve = ControlWork::Resolve {
            port: 0,
            next_hop: Ipv4Addr::new(192, 168, 10, 2),
        };
        for work in [ControlWork::LocalIcmp, resolve] {
            assert!(admits_to_control(work, 0, 1024));
            assert!(admits_to_control(work, 511, 1024));
            assert!(!admits_to_control(work, 512, 1024), "{work:?}");
            assert!(!admits_to_control(work, 1024, 1024));
        }
        for work in [ControlWork::Arp, ControlWork::Ndisc] {
            assert!(admits_to_control(work, 512, 1024));
            assert!(admits_to_control(work, 767, 1024));
            assert!(!admits_to_control(work, 768, 1024), "{work:?}");
        }
        // PPPoE's control keeps the last quarter: an ARP flood cannot end the session.
        assert!(admits_to_control(ControlWork::Pppoe, 768, 1024));
        assert!(admits_to_control(ControlWork::Pppoe, 1023, 1024));
        assert!(!admits_to_control(ControlWork::Pppoe, 1024, 1024));
    }

    #[test]
    fn arp_frames_are_told_from_the_rest() {
        let mut frame = [0u8; MIN_FRAME_LEN];
        frame[12..14].copy_from_slice(&ethernet::ethertype::ARP.to_be_bytes());
        assert!(is_arp(&frame));
        frame[12..14].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        assert!(!is_arp(&frame));
        assert!(!is_arp(&frame[..10]), "truncated");
    }
}

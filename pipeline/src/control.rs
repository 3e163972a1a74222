//! Packet work for the control thread: ARP answers, echo replies, ARP requests. Each rewrites
//! or writes a frame in place; the control thread decides when to call them.

use std::net::Ipv4Addr;

use crate::packet::PacketBuf;
use crate::router::Interface;
use crate::verdict::ControlWork;
use crate::wire::{
    arp, checksum, ethernet, icmp, ipv4, ArpOperation, ArpPacket, ArpRepr, EthernetAddress,
    EthernetFrame, IcmpPacket, Ipv4Packet,
};

/// Ethernet's minimum frame without FCS; shorter frames are padded with zeros.
pub const MIN_FRAME_LEN: usize = 60;

/// Whether slow-path `work` may join a control ring holding `queued` of `capacity` packets.
/// ARP may fill it; echo requests and packets awaiting resolution stop at half, so however
/// those flood, the ARP that every next hop depends on still finds room.
pub fn admits_to_control(work: ControlWork, queued: usize, capacity: usize) -> bool {
    match work {
        ControlWork::Arp => queued < capacity,
        ControlWork::LocalIcmp | ControlWork::Resolve { .. } => queued < capacity / 2,
    }
}

/// The control thread's order within a batch: ARP first, as the rest may wait on it.
pub fn is_arp(frame: &[u8]) -> bool {
    EthernetFrame::new_checked(frame)
        .is_ok_and(|frame| frame.ethertype() == ethernet::ethertype::ARP)
}

/// What an ARP packet told us and whether it became a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpOutcome {
    /// The sender's binding, worth learning: it asked us, or it answered.
    pub learned: Option<(Ipv4Addr, EthernetAddress)>,
    /// The packet now holds our reply, ready to send back out the ingress port.
    pub replied: bool,
}

/// Handles one received ARP frame on `iface`. None if it is not valid Ethernet/IPv4 ARP.
pub fn answer_arp(pkt: &mut PacketBuf, iface: &Interface) -> Option<ArpOutcome> {
    let frame = EthernetFrame::new_checked(pkt.bytes()).ok()?;
    let request = ArpRepr::parse(&ArpPacket::new_checked(frame.payload()).ok()?).ok()?;
    let for_us = request.target_protocol_addr == iface.addr;
    let sender_valid =
        request.source_hardware_addr.is_unicast() && !request.source_protocol_addr.is_unspecified();
    let learned = (sender_valid && (for_us || request.operation == ArpOperation::Reply))
        .then_some((request.source_protocol_addr, request.source_hardware_addr));
    if request.operation != ArpOperation::Request || !for_us || !sender_valid {
        return Some(ArpOutcome {
            learned,
            replied: false,
        });
    }
    let reply = ArpRepr {
        operation: ArpOperation::Reply,
        source_hardware_addr: iface.mac,
        source_protocol_addr: iface.addr,
        target_hardware_addr: request.source_hardware_addr,
        target_protocol_addr: request.source_protocol_addr,
    };
    write_arp(pkt, &reply, request.source_hardware_addr)?;
    Some(ArpOutcome {
        learned,
        replied: true,
    })
}

/// Writes a broadcast ARP request from `iface` for `target` into `pkt`.
pub fn write_arp_request(pkt: &mut PacketBuf, iface: &Interface, target: Ipv4Addr) -> bool {
    let request = ArpRepr {
        operation: ArpOperation::Request,
        source_hardware_addr: iface.mac,
        source_protocol_addr: iface.addr,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    write_arp(pkt, &request, EthernetAddress::BROADCAST).is_some()
}

/// A gratuitous ARP announcing `iface`'s address, so neighbours update their caches at start.
pub fn write_gratuitous_arp(pkt: &mut PacketBuf, iface: &Interface) -> bool {
    write_arp_request(pkt, iface, iface.addr)
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

/// Writes the Ethernet addresses of a routed packet.
#[inline]
pub fn write_l2(pkt: &mut PacketBuf, dst: EthernetAddress, src: EthernetAddress) {
    if let Ok(mut frame) = EthernetFrame::new_checked(pkt.bytes_mut()) {
        frame.set_dst_addr(dst);
        frame.set_src_addr(src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(admits_to_control(ControlWork::Arp, 512, 1024));
        assert!(admits_to_control(ControlWork::Arp, 1023, 1024));
        assert!(!admits_to_control(ControlWork::Arp, 1024, 1024));
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

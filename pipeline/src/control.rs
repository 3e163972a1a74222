//! Packet work for the control thread: ARP answers, echo replies, ARP requests. Each rewrites
//! or writes a frame in place; the control thread decides when to call them.

use std::net::Ipv4Addr;

use crate::packet::PacketBuf;
use crate::router::Interface;
use crate::wire::{
    arp, checksum, ethernet, icmp, ipv4, ArpOperation, ArpPacket, ArpRepr, EthernetAddress,
    EthernetFrame, IcmpPacket, Ipv4Packet,
};

/// Ethernet's minimum frame without FCS; shorter frames are padded with zeros.
pub const MIN_FRAME_LEN: usize = 60;

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
}

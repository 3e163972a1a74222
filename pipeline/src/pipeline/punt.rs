//! The exception path to Linux: which packets go to an interface's kernel twin.
//!
//! An interface may have a kernel twin: a network device in Linux carrying the interface's
//! MAC and address (the gateway makes it; see gateway/src/twins.rs). Traffic for the
//! gateway's own addresses that the dataplane does not serve itself (it answers ARP and echo
//! requests, and port forwards are not the gateway's) goes to the twin of the interface it
//! arrived on, once the `local` zone's rules admit it, so that Linux daemons (dnsmasq, sshd)
//! can serve it. So does broadcast DHCP, which the martian check would otherwise refuse.
//!
//! Nothing else ever takes this path: both checks sit on branches forwarding has already
//! left (a destination that is one of ours, a martian address), so routed packets pay
//! nothing for it. The path is policed per worker (`PuntConfig::per_sec`): what is over
//! budget is dropped as `punt_policed`, so a flood at the gateway's addresses costs each
//! worker at most its budget.
//!
//! IPv6: on an interface its routers configure (a WAN's ISP, `Ipv6Interface::autoconfigure`),
//! their Router Advertisements and the DHCPv6 server's answers go to the twin, where the
//! kernel or dhcpcd takes the WAN's addresses, default route and delegated prefix from them
//! (`gateway/src/netlink.rs` reads the result back).

use crate::flow::FlowKey;
use crate::pipeline::config::{Interface, RouterConfig};
use crate::pipeline::{Ingress, Pipeline};
use crate::state::firewall::{Action, ZoneId};
use crate::verdict::{DropReason, Verdict};
use crate::wire::icmpv6::msg_type;
use crate::wire::ipv6::{is_link_local, next_header, walk_extensions, ND_HOP_LIMIT};
use crate::wire::udp::{
    DHCPV6_CLIENT_PORT, DHCPV6_SERVER_PORT, DHCP_CLIENT_PORT, DHCP_SERVER_PORT,
};
use crate::wire::{
    ethernet, ipv4, ArpOperation, ArpPacket, EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket,
};

/// Traffic for one of the gateway's addresses that the `local` rules accepted and that
/// the dataplane does not answer itself: to the twin of the interface it came in by.
/// Without a twin there, nothing can take it: dropped as `local_delivery`.
#[inline]
pub(crate) fn deliver_locally(router: &RouterConfig, ingress: u16) -> Verdict {
    if router.punt.has_twin(ingress) {
        Verdict::Punt { port: ingress }
    } else {
        Verdict::Drop(DropReason::LocalDelivery)
    }
}

impl Pipeline {
    /// On an interface whose twin runs a DHCP client: a DHCP server's answer (UDP from port
    /// 67 to port 68) goes to the twin, before any other check. The server sends it to the
    /// address it offers (not ours yet), to ours when renewing, or to broadcast, and it is
    /// the answer to the kernel's own request, as a reply is to a flow, so the `local`
    /// rules (which drop from the WAN by default) do not apply. Policed as every punt.
    #[cold]
    pub(crate) fn punt_dhcp_answer<T: AsRef<[u8]>>(
        &self,
        ip: &Ipv4Packet<T>,
        ingress: Ingress,
    ) -> Option<Verdict> {
        if ip.protocol() != ipv4::protocol::UDP || !self.router.punt.has_twin(ingress.port) {
            return None;
        }
        let key = FlowKey::from_ipv4(ip).ok()?;
        (key.src_port == DHCP_SERVER_PORT && key.dst_port == DHCP_CLIENT_PORT)
            .then_some(Verdict::Punt { port: ingress.port })
    }

    /// A datagram the martian check refused. Broadcast DHCP (UDP to port 67 or 68, to the
    /// limited broadcast address; a client without an address sends from 0.0.0.0) on an
    /// interface with a twin is the one kind the kernel must see, if the rules from the
    /// interface's zone to `local` admit it. None: the martian drop stands.
    #[cold]
    pub(crate) fn punt_broadcast<T: AsRef<[u8]>>(
        &self,
        ip: &Ipv4Packet<T>,
        ingress: Ingress,
    ) -> Option<Verdict> {
        let router = &*self.router;
        if !router.punt.has_twin(ingress.port)
            || ip.protocol() != ipv4::protocol::UDP
            || !ip.dst_addr().is_broadcast()
        {
            return None;
        }
        let key = FlowKey::from_ipv4(ip).ok()?;
        if !matches!(key.dst_port, DHCP_SERVER_PORT | DHCP_CLIENT_PORT) {
            return None;
        }
        let from = *router.stateful.zones.get(usize::from(ingress.port))?;
        let (action, _) = router
            .stateful
            .firewall
            .evaluate(from, ZoneId::LOCAL, &key, None);
        Some(match action {
            Action::Accept => Verdict::Punt { port: ingress.port },
            Action::Drop | Action::Reject => Verdict::Drop(DropReason::FirewallDrop),
        })
    }
}

/// Whether an ARP frame received on `iface` concerns the gateway's address there (a request
/// for it, a reply to it), so that the kernel twin gets a copy: Linux then learns its
/// neighbours as it would on a wire of its own. The dataplane's table stays the one that
/// forwarding uses, and still decides what to answer and learn.
pub fn arp_for_twin(frame: &[u8], iface: &Interface) -> bool {
    parse_arp(frame).is_some_and(|arp| {
        arp.target_protocol_addr() == iface.addr
            && matches!(arp.operation(), ArpOperation::Request | ArpOperation::Reply)
    })
}

/// Whether a frame the kernel sent on `iface`'s twin must stay off the wire: an ARP reply
/// from the gateway's own address. The dataplane answers requests for it itself, after its
/// checks (a sender it refuses to bind gets no answer), which the kernel's answer would
/// bypass. The kernel's requests, and everything else, go out.
pub fn is_kernel_arp_reply(frame: &[u8], iface: &Interface) -> bool {
    parse_arp(frame).is_some_and(|arp| {
        arp.operation() == ArpOperation::Reply && arp.sender_protocol_addr() == iface.addr
    })
}

/// Whether an IPv6 frame for the gateway is one its kernel twin configures the interface
/// from: a Router Advertisement as RFC 4861 6.1.2 lets a host accept it (with hop limit
/// 255, so from a router on the link), or a DHCPv6 server's answer to the twin's client
/// (UDP from 547 to 546). Both from a link-local address: a server answers a client on its
/// link (RFC 8415 18.3.10), so nothing from beyond the link spends the punt budget on them.
/// Fragments are neither.
pub fn is_autoconfiguration6(frame: &[u8]) -> bool {
    let Some(ip) = frame
        .get(ethernet::HEADER_LEN..)
        .and_then(|bytes| Ipv6Packet::new_checked(bytes).ok())
    else {
        return false;
    };
    let Ok(ext) = walk_extensions(ip.next_header(), ip.payload()) else {
        return false;
    };
    if ext.fragment.is_some() {
        return false;
    }
    let Some(upper) = ip.payload().get(ext.offset..) else {
        return false;
    };
    if !is_link_local(ip.src_addr()) {
        return false;
    }
    match ext.protocol {
        next_header::ICMPV6 => {
            upper.first() == Some(&msg_type::ROUTER_ADVERT) && ip.hop_limit() == ND_HOP_LIMIT
        }
        next_header::UDP => UdpPacket::new_checked(upper).is_ok_and(|udp| {
            udp.src_port() == DHCPV6_SERVER_PORT && udp.dst_port() == DHCPV6_CLIENT_PORT
        }),
        _ => false,
    }
}

/// Whether a frame is a Neighbor Solicitation or Advertisement: a twin that has IPv6 gets a
/// copy of those the gateway receives (as it gets ARP), so that its duplicate address
/// detection hears a node that defends the address and its neighbour cache fills. The
/// dataplane still answers and learns by its own rules.
pub fn ndisc_for_twin(frame: &[u8]) -> bool {
    let is_ipv6 = EthernetFrame::new_checked(frame)
        .is_ok_and(|eth| eth.ethertype() == ethernet::ethertype::IPV6);
    let Some(ip) = frame
        .get(ethernet::HEADER_LEN..)
        .filter(|_| is_ipv6)
        .and_then(|bytes| Ipv6Packet::new_checked(bytes).ok())
    else {
        return false;
    };
    ip.next_header() == next_header::ICMPV6
        && matches!(
            ip.payload().first(),
            Some(&(msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT))
        )
}

fn parse_arp(frame: &[u8]) -> Option<ArpPacket<&[u8]>> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    if frame.ethertype() != ethernet::ethertype::ARP {
        return None;
    }
    let payload = &frame.into_inner()[ethernet::HEADER_LEN..];
    ArpPacket::new_checked(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ArpRepr, EthernetAddress};
    use std::net::Ipv4Addr;

    const OURS: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 1);
    const HOST: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 2);
    const OTHER: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 3);
    const OUR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const HOST_MAC: EthernetAddress = EthernetAddress([2, 0xaa, 0, 0, 0, 2]);

    fn iface() -> Interface {
        Interface {
            mac: OUR_MAC,
            addr: OURS,
            prefix_len: 24,
            mtu: 1500,
        }
    }

    fn arp(
        operation: ArpOperation,
        sender: (EthernetAddress, Ipv4Addr),
        target: Ipv4Addr,
    ) -> Vec<u8> {
        let mut frame = vec![0u8; 42];
        frame[..6].copy_from_slice(&[0xff; 6]);
        frame[6..12].copy_from_slice(&sender.0 .0);
        frame[12..14].copy_from_slice(&ethernet::ethertype::ARP.to_be_bytes());
        let repr = ArpRepr {
            operation,
            source_hardware_addr: sender.0,
            source_protocol_addr: sender.1,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        };
        repr.emit(&mut ArpPacket::new_unchecked(&mut frame[14..]));
        frame
    }

    #[test]
    fn the_twin_gets_arp_about_our_address_only() {
        let iface = iface();
        assert!(arp_for_twin(
            &arp(ArpOperation::Request, (HOST_MAC, HOST), OURS),
            &iface
        ));
        assert!(arp_for_twin(
            &arp(ArpOperation::Reply, (HOST_MAC, HOST), OURS),
            &iface
        ));
        assert!(!arp_for_twin(
            &arp(ArpOperation::Request, (HOST_MAC, HOST), OTHER),
            &iface
        ));
        assert!(!arp_for_twin(
            &arp(ArpOperation::Unknown(9), (HOST_MAC, HOST), OURS),
            &iface
        ));
        assert!(!arp_for_twin(&[0u8; 10], &iface));
    }

    #[test]
    fn the_kernels_replies_for_our_address_stay_off_the_wire_its_requests_go() {
        let iface = iface();
        assert!(is_kernel_arp_reply(
            &arp(ArpOperation::Reply, (OUR_MAC, OURS), HOST),
            &iface
        ));
        assert!(!is_kernel_arp_reply(
            &arp(ArpOperation::Request, (OUR_MAC, OURS), HOST),
            &iface
        ));
        assert!(!is_kernel_arp_reply(
            &arp(ArpOperation::Reply, (HOST_MAC, HOST), OURS),
            &iface
        ));
        assert!(!is_kernel_arp_reply(&[0u8; 60], &iface));
    }

    #[test]
    fn twins_get_neighbor_solicitations_and_advertisements_only() {
        let icmpv6 = |type_u8: u8| {
            let mut frame = Vec::new();
            etherparse::PacketBuilder::ethernet2(HOST_MAC.0, OUR_MAC.0)
                .ipv6(
                    [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                    [0xff; 16],
                    255,
                )
                .icmpv6(etherparse::Icmpv6Type::Unknown {
                    type_u8,
                    code_u8: 0,
                    bytes5to8: [0; 4],
                })
                .write(&mut frame, &[0; 16])
                .unwrap();
            frame
        };
        assert!(ndisc_for_twin(&icmpv6(135)), "a solicitation");
        assert!(ndisc_for_twin(&icmpv6(136)), "an advertisement");
        for other in [133, 134, 128, 143] {
            assert!(!ndisc_for_twin(&icmpv6(other)), "type {other}");
        }
        assert!(!ndisc_for_twin(&arp(
            ArpOperation::Request,
            (HOST_MAC, HOST),
            OURS
        )));
        assert!(!ndisc_for_twin(&icmpv6(135)[..30]), "truncated");
    }
}

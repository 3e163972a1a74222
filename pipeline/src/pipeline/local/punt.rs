//! The exception path to Linux: which packets go to an interface's kernel twin.
//!
//! An interface may have a kernel twin: a network device in Linux carrying the interface's
//! MAC and address (the gateway makes it; see gateway/src/twins.rs). Traffic for the
//! gateway's own addresses that the dataplane does not serve itself (it answers ARP and echo
//! requests, and port forwards are not the gateway's) goes to the twin of the interface it
//! arrived on, once the `local` zone's rules admit it, so that Linux daemons (dnsmasq, sshd)
//! can serve it. So do broadcast DHCP and an HA pair's VRRP adverts, which the martian check
//! would otherwise refuse.
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
use crate::pipeline::stage::Ingress;
use crate::pipeline::Pipeline;
use crate::portmap::upnp;
use crate::state::firewall::{Action, ZoneId};
use crate::state::firewall_log::Decision;
use crate::verdict::{DropReason, Verdict};
use crate::wire::icmpv6::msg_type;
use crate::wire::ipv6::{is_link_local, next_header, walk_extensions, ND_HOP_LIMIT};
use crate::wire::udp::{
    DHCPV6_CLIENT_PORT, DHCPV6_SERVER_PORT, DHCP_CLIENT_PORT, DHCP_SERVER_PORT,
};
use crate::wire::{
    ethernet, ipv4, ArpOperation, ArpPacket, EthernetFrame, Ipv4Packet, Ipv6Packet, UdpPacket,
};

impl Pipeline {
    /// On an interface whose twin runs a DHCP client: a DHCP server's answer (UDP from port
    /// 67 to port 68) goes to the twin, before any other check. The server sends it to the
    /// address it offers (not ours yet), to ours when renewing, or to broadcast, and it is
    /// the answer to the kernel's own request, as a reply is to a flow, so the `local`
    /// rules (which drop from the WAN by default) do not apply. Policed as every punt.
    /// Never for an address on another interface's subnet (a LAN host's, or our own there):
    /// no server offers those, and the twins' kernel would route it past the firewall; such
    /// a datagram goes the way of any other (the zone policy drops it).
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
        if key.src_port != DHCP_SERVER_PORT || key.dst_port != DHCP_CLIENT_PORT {
            return None;
        }
        let dst = ip.dst_addr();
        let elsewhere = self
            .router
            .interfaces
            .iter()
            .enumerate()
            .any(|(port, iface)| {
                port != usize::from(ingress.port) && iface.has_address() && iface.contains(dst)
            });
        (dst.is_broadcast() || !elsewhere).then_some(Verdict::Punt { port: ingress.port })
    }

    /// A datagram the martian check refused. Three kinds on an interface with a twin are for
    /// the kernel: broadcast DHCP (UDP to port 67 or 68, to the limited broadcast address;
    /// a client without an address sends from 0.0.0.0), if the rules from the interface's
    /// zone to `local` admit it; VRRP adverts between the twins of an HA pair (IP protocol
    /// 112 to 224.0.0.18 with TTL 255, RFC 9568 5.1.1.3, from a neighbour on the
    /// interface's own subnet) and UPnP's SSDP searches (UDP to 239.255.255.250:1900 from
    /// a neighbour, for the port mapping server), each only where a rule admits it by name:
    /// a zone's policy to `local` does not, so nothing else of the multicast a LAN chatters
    /// (mDNS, LLMNR, IGMP) reaches the kernel or spends the punt budget. None: the martian
    /// drop stands.
    #[cold]
    pub(crate) fn punt_broadcast<T: AsRef<[u8]>>(
        &mut self,
        ip: &Ipv4Packet<T>,
        ingress: Ingress,
        now_ns: u64,
    ) -> Option<Verdict> {
        let router = self.router.clone();
        if !router.punt.has_twin(ingress.port) {
            return None;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let key = FlowKey::from_ipv4(ip).ok()?;
        let dhcp = ip.protocol() == ipv4::protocol::UDP
            && dst.is_broadcast()
            && matches!(key.dst_port, DHCP_SERVER_PORT | DHCP_CLIENT_PORT);
        let neighbor = router
            .interfaces
            .get(usize::from(ingress.port))
            .is_some_and(|iface| iface.contains(src) && !iface.is_own(src));
        let vrrp = ip.protocol() == ipv4::protocol::VRRP
            && dst == VRRP_GROUP
            && ip.ttl() == VRRP_TTL
            && neighbor;
        // Searches only: the LAN's NOTIFY chatter to the group is for other devices.
        let ssdp = ip.protocol() == ipv4::protocol::UDP
            && dst == upnp::SSDP_GROUP
            && key.dst_port == upnp::SSDP_PORT
            && neighbor
            && UdpPacket::new_checked(ip.payload())
                .is_ok_and(|udp| udp.payload().starts_with(b"M-SEARCH "));
        if !dhcp && !vrrp && !ssdp {
            return None;
        }
        let from = *router.stateful.zones.get(usize::from(ingress.port))?;
        let (action, rule) = router
            .stateful
            .firewall
            .evaluate(from, ZoneId::LOCAL, &key, None);
        // VRRP and SSDP by a rule only: a zone's policy to `local` does not admit them.
        let action = match (vrrp || ssdp, rule) {
            (true, None) => Action::Drop,
            _ => action,
        };
        let decision = Decision::to_gateway(action, from, ingress.port);
        self.stateful
            .decided(&router.stateful, rule, &key, decision, now_ns);
        Some(match action {
            Action::Accept => Verdict::Punt { port: ingress.port },
            Action::Drop | Action::Reject => Verdict::Drop(DropReason::FirewallDrop),
        })
    }
}

/// VRRP's group (RFC 9568 5.1.1.2) and the TTL its adverts must carry, so that none came
/// from beyond the link.
const VRRP_GROUP: std::net::Ipv4Addr = std::net::Ipv4Addr::new(224, 0, 0, 18);
const VRRP_TTL: u8 = 255;

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

/// Why a frame the kernel sent on `iface`'s twin must stay off the wire, if it must. Only
/// the kernel's own traffic leaves by a twin, so that nothing reaches the wire, and another
/// zone, without the dataplane's checks:
/// - an ARP reply from the gateway's own address or its virtual one (`kernel_arp_reply`):
///   the dataplane answers requests for them itself, after its checks (a sender it refuses
///   to bind gets no answer), which the kernel's answer would bypass; its requests, probes
///   and gratuitous ARP (keepalived's, on taking the virtual address over) go out;
/// - anything not from the kernel's own addresses (`twin_foreign_source`): IPv4 from an
///   address of ours (a host may reach any of them by any interface; or from 0.0.0.0 to a
///   DHCP server, a client without a lease), IPv6 from an address of ours, a link-local one
///   or the unspecified one (Neighbor Discovery, DHCPv6), ARP from the interface's address
///   (or 0.0.0.0, a probe); any other
///   source is a datagram the twins' namespace forwarded (from another twin, or one punted
///   to it) or a spoof, and any other EtherType is nothing the gateway's kernel sends.
pub fn kernel_frame_refused(
    frame: &[u8],
    iface: &Interface,
    router: &RouterConfig,
) -> Option<DropReason> {
    let foreign = Some(DropReason::TwinForeignSource);
    let Ok(ether) = EthernetFrame::new_checked(frame) else {
        return foreign;
    };
    match ether.ethertype() {
        ethernet::ethertype::ARP => {
            let Some(arp) = parse_arp(frame) else {
                return foreign;
            };
            let sender = arp.sender_protocol_addr();
            // keepalived announces the virtual address it takes over by gratuitous ARP,
            // a request or a reply about itself.
            let announces_virtual =
                Some(sender) == iface.virtual_addr && arp.target_protocol_addr() == sender;
            let own = sender == iface.addr || Some(sender) == iface.virtual_addr;
            if arp.operation() == ArpOperation::Reply && own && !announces_virtual {
                Some(DropReason::KernelArpReply)
            } else if own || sender.is_unspecified() {
                None
            } else {
                foreign
            }
        }
        ethernet::ethertype::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(ether.payload()) else {
                return foreign;
            };
            let src = ip.src_addr();
            let dhcp_request = || {
                ip.protocol() == ipv4::protocol::UDP
                    && FlowKey::from_ipv4(&ip).is_ok_and(|key| key.dst_port == DHCP_SERVER_PORT)
            };
            // Any address of ours: a LAN host that reached the WAN address (punted to the
            // LAN's twin, the one it came in by) is answered from it.
            if router.local_port(src).is_some() || (src.is_unspecified() && dhcp_request()) {
                None
            } else {
                foreign
            }
        }
        ethernet::ethertype::IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(ether.payload()) else {
                return foreign;
            };
            let src = ip.src_addr();
            if src.is_unspecified() || is_link_local(src) || router.owns6(src) {
                None
            } else {
                foreign
            }
        }
        _ => foreign,
    }
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
            virtual_addr: None,
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

    /// A frame the kernel sends on the twin, from `src` to `dst`, UDP to `dst_port`.
    fn udp_from_kernel(src: Ipv4Addr, dst: Ipv4Addr, dst_port: u16) -> Vec<u8> {
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2(OUR_MAC.0, HOST_MAC.0)
            .ipv4(src.octets(), dst.octets(), 64)
            .udp(68, dst_port)
            .write(&mut frame, b"x")
            .unwrap();
        frame
    }

    fn ipv6_from_kernel(src: [u8; 16]) -> Vec<u8> {
        let mut frame = Vec::new();
        etherparse::PacketBuilder::ethernet2(OUR_MAC.0, HOST_MAC.0)
            .ipv6(
                src,
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
                64,
            )
            .udp(546, 547)
            .write(&mut frame, b"x")
            .unwrap();
        frame
    }

    #[test]
    fn only_the_kernels_own_traffic_leaves_by_its_twin() {
        let iface = iface();
        const WAN_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
        let wan = Interface {
            addr: WAN_ADDRESS,
            ..iface.clone()
        };
        let router = RouterConfig::new(
            vec![iface.clone(), wan],
            &[],
            crate::pipeline::config::IcmpLimits::default(),
        )
        .unwrap();
        let refused = |frame: &[u8]| kernel_frame_refused(frame, &iface, &router);
        // ARP: the kernel's replies for our address stay off the wire; its requests and
        // probes go; one in another's name does not.
        assert_eq!(
            refused(&arp(ArpOperation::Reply, (OUR_MAC, OURS), HOST)),
            Some(DropReason::KernelArpReply)
        );
        assert_eq!(
            refused(&arp(ArpOperation::Request, (OUR_MAC, OURS), HOST)),
            None
        );
        let probe = arp(
            ArpOperation::Request,
            (OUR_MAC, Ipv4Addr::UNSPECIFIED),
            OURS,
        );
        assert_eq!(refused(&probe), None);
        let foreign = Some(DropReason::TwinForeignSource);
        assert_eq!(
            refused(&arp(ArpOperation::Reply, (HOST_MAC, HOST), OURS)),
            foreign
        );
        // IPv4: from our address; from 0.0.0.0 only to a DHCP server; a forwarded datagram
        // (another's source) never.
        assert_eq!(refused(&udp_from_kernel(OURS, HOST, 53)), None);
        // The answer to a LAN host that reached the WAN address, by the LAN's twin.
        assert_eq!(refused(&udp_from_kernel(WAN_ADDRESS, HOST, 53)), None);
        let discover = udp_from_kernel(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, 67);
        assert_eq!(refused(&discover), None);
        let unspecified = udp_from_kernel(Ipv4Addr::UNSPECIFIED, HOST, 53);
        assert_eq!(refused(&unspecified), foreign);
        let forwarded = udp_from_kernel(Ipv4Addr::new(10, 0, 0, 2), HOST, 68);
        assert_eq!(refused(&forwarded), foreign);
        // IPv6: link-local and unspecified go (Neighbor Discovery, DHCPv6); a global address
        // that is not ours does not.
        let mut link_local = [0u8; 16];
        link_local[..2].copy_from_slice(&[0xfe, 0x80]);
        link_local[15] = 1;
        assert_eq!(refused(&ipv6_from_kernel(link_local)), None);
        assert_eq!(refused(&ipv6_from_kernel([0; 16])), None);
        let mut global = [0u8; 16];
        global[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        global[15] = 7;
        assert_eq!(refused(&ipv6_from_kernel(global)), foreign);
        // Nothing else, and nothing too short to read.
        let mut lldp = udp_from_kernel(OURS, HOST, 53);
        lldp[12..14].copy_from_slice(&0x88ccu16.to_be_bytes());
        assert_eq!(refused(&lldp), foreign);
        assert_eq!(refused(&[0u8; 10]), foreign);
    }

    #[test]
    fn keepalived_announces_the_virtual_address_but_the_kernel_never_answers_for_it() {
        const VIRTUAL: Ipv4Addr = Ipv4Addr::new(192, 168, 10, 254);
        let iface = Interface {
            virtual_addr: Some(VIRTUAL),
            ..iface()
        };
        let router = RouterConfig::new(
            vec![iface.clone()],
            &[],
            crate::pipeline::config::IcmpLimits::default(),
        )
        .unwrap();
        let refused = |frame: &[u8]| kernel_frame_refused(frame, &iface, &router);
        // Gratuitous ARP, as a request or a reply about itself, goes out (a takeover).
        for operation in [ArpOperation::Request, ArpOperation::Reply] {
            let gratuitous = arp(operation, (OUR_MAC, VIRTUAL), VIRTUAL);
            assert_eq!(refused(&gratuitous), None, "{operation:?}");
        }
        // An answer to a host stays off the wire: the dataplane answers, while it holds it.
        assert_eq!(
            refused(&arp(ArpOperation::Reply, (OUR_MAC, VIRTUAL), HOST)),
            Some(DropReason::KernelArpReply)
        );
        // Datagrams from it (a service on the twin reached at the virtual address) go.
        assert_eq!(refused(&udp_from_kernel(VIRTUAL, HOST, 53)), None);
        // Another address of the subnet, announced by the twin, is not ours to announce.
        assert_eq!(
            refused(&arp(ArpOperation::Request, (OUR_MAC, OTHER), OTHER)),
            Some(DropReason::TwinForeignSource)
        );
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

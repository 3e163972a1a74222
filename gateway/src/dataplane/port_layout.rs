//! Which interface each received frame belongs to, and which port and 802.1Q tag each
//! interface sends by: the one place that knows a VLAN subinterface is not a port.
//!
//! Interfaces are numbered in config order, and the pipeline, the control thread and the
//! rings only ever name interfaces. Ports are the interfaces with a device (a NIC port or a
//! bond), numbered in the same order; a VLAN subinterface rides on its parent's port. On
//! receipt a worker maps (port, tag) to an interface and takes the tag off (or reads the one
//! the NIC stripped); on transmit it puts the interface's tag back. The pipeline sees
//! untagged frames only.

use std::sync::Arc;

use pipeline::{DropReason, Ingress};

use crate::config::GatewayConfig;
use crate::dataplane::pppoe_frames::{self, SessionStates};
use crate::dpdk::Mbuf;

/// VLAN ids are 12 bits of the TCI; the other 4 are priority and the drop-eligible bit.
const VLAN_ID_MASK: u16 = 0x0fff;
const VLAN_IDS: usize = 4096;
/// No interface has this VLAN id on the port.
const NO_INTERFACE: u16 = u16::MAX;
/// 802.1Q's priority tag: a frame of the port's own (untagged) network that carries only a
/// priority, as some phones and hosts send.
const PRIORITY_TAG_ID: usize = 0;

/// Where an interface's frames go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The port's number (its index among the ports).
    pub port: u16,
    /// The 802.1Q TCI its frames carry; None: untagged.
    pub vlan: Option<u16>,
    /// Its IPv4 rides a PPPoE session (`crate::dataplane::pppoe_frames`).
    pub pppoe: bool,
}

#[derive(Clone, Debug)]
struct PortInterfaces {
    /// The interface of the port's untagged frames: the port's own.
    untagged: u16,
    /// The interface of each VLAN id; empty where the port has no subinterfaces (tagged
    /// frames there are all refused without a lookup).
    by_vlan: Vec<u16>,
}

impl PortInterfaces {
    fn has_vlans(&self) -> bool {
        !self.by_vlan.is_empty()
    }

    /// See [`PortLayout::interface`].
    #[inline]
    fn interface(&self, tci: Option<u16>) -> Result<u16, DropReason> {
        match tci {
            None => Ok(self.untagged),
            Some(tci) => match self.by_vlan.get(usize::from(tci & VLAN_ID_MASK)) {
                Some(&iface) if iface != NO_INTERFACE => Ok(iface),
                _ => Err(DropReason::VlanTagged),
            },
        }
    }
}

/// Default: no ports.
#[derive(Clone, Debug)]
pub struct PortLayout {
    /// Per interface.
    links: Vec<Link>,
    /// Per port.
    ports: Vec<PortInterfaces>,
    /// The PPPoE interfaces' sessions, shared with the control thread and every worker.
    sessions: Arc<SessionStates>,
}

impl Default for PortLayout {
    fn default() -> Self {
        PortLayout::ports_only(0)
    }
}

impl PortLayout {
    /// The layout of a validated config (every VLAN's parent is a port interface).
    pub fn new(config: &GatewayConfig) -> PortLayout {
        let interfaces = &config.interfaces;
        let port_interfaces: Vec<usize> = (0..interfaces.len())
            .filter(|&i| !interfaces[i].is_vlan())
            .collect();
        let port_of = |name: &str| {
            port_interfaces
                .iter()
                .position(|&i| interfaces[i].name == name)
        };
        let mut ports: Vec<PortInterfaces> = port_interfaces
            .iter()
            .map(|&i| PortInterfaces {
                untagged: i as u16,
                by_vlan: Vec::new(),
            })
            .collect();
        let mut links = Vec::with_capacity(interfaces.len());
        for (i, iface) in interfaces.iter().enumerate() {
            let link = match (&iface.parent, iface.vlan) {
                (Some(parent), Some(vlan)) => {
                    let port = port_of(parent).expect("validated: a VLAN's parent is a port");
                    let PortInterfaces { untagged, by_vlan } = &mut ports[port];
                    if by_vlan.is_empty() {
                        by_vlan.resize(VLAN_IDS, NO_INTERFACE);
                        by_vlan[PRIORITY_TAG_ID] = *untagged;
                    }
                    by_vlan[usize::from(vlan & VLAN_ID_MASK)] = i as u16;
                    Link {
                        port: port as u16,
                        vlan: Some(vlan),
                        pppoe: iface.address.is_pppoe(),
                    }
                }
                _ => Link {
                    port: port_of(&iface.name).expect("a port interface is a port") as u16,
                    vlan: None,
                    pppoe: iface.address.is_pppoe(),
                },
            };
            links.push(link);
        }
        PortLayout {
            sessions: Arc::new(SessionStates::new(links.len())),
            links,
            ports,
        }
    }

    /// Interfaces that are their ports, untagged: interface i is port i.
    pub fn ports_only(count: u16) -> PortLayout {
        PortLayout {
            links: (0..count)
                .map(|port| Link {
                    port,
                    vlan: None,
                    pppoe: false,
                })
                .collect(),
            ports: (0..count)
                .map(|untagged| PortInterfaces {
                    untagged,
                    by_vlan: Vec::new(),
                })
                .collect(),
            sessions: Arc::new(SessionStates::new(usize::from(count))),
        }
    }

    /// The PPPoE sessions the workers frame by; the control thread's clients set them.
    pub fn sessions(&self) -> &Arc<SessionStates> {
        &self.sessions
    }

    /// Per interface, where it sends by.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// Each port's own interface (its untagged one), in port order.
    pub fn port_interfaces(&self) -> impl Iterator<Item = usize> + '_ {
        self.ports.iter().map(|port| usize::from(port.untagged))
    }

    /// Whether `port` carries VLAN subinterfaces, so its frames must be looked at for tags.
    #[inline]
    pub fn port_has_vlans(&self, port: usize) -> bool {
        self.ports.get(port).is_some_and(PortInterfaces::has_vlans)
    }

    /// Where interface `iface` sends by; None for a number that is no interface.
    #[inline]
    pub fn link(&self, iface: u16) -> Option<Link> {
        self.links.get(usize::from(iface)).copied()
    }

    /// How a frame received on `port` arrived: its interface, with the 802.1Q tag taken out
    /// of the frame where the port has subinterfaces (or read from the NIC, which may have
    /// stripped it), and on a PPPoE interface the session's framing taken off its IPv4
    /// ([`pppoe::decapsulate`]). On a port without subinterfaces a tag left in the frame is
    /// the pipeline's to refuse; one the NIC stripped is refused here.
    #[inline]
    pub fn ingress(&self, port: usize, mbuf: &mut Mbuf) -> Result<Ingress, DropReason> {
        let iface = self.interface_of(port, mbuf)?;
        if self
            .links
            .get(usize::from(iface))
            .is_some_and(|link| link.pppoe)
        {
            pppoe_frames::decapsulate(self.sessions.get(iface), mbuf)?;
        }
        Ok(Ingress {
            port: iface,
            handed_off: false,
        })
    }

    #[inline]
    fn interface_of(&self, port: usize, mbuf: &mut Mbuf) -> Result<u16, DropReason> {
        let port = self.ports.get(port).ok_or(DropReason::NotOurMac)?;
        let stripped = mbuf.rx_stripped_vlan();
        let tci = if port.has_vlans() {
            deciding_tag(mbuf, stripped)?
        } else {
            stripped
        };
        port.interface(tci)
    }

    /// The interface a frame received on `port` belongs to, given its 802.1Q TCI if it was
    /// tagged. A tag no subinterface of the port has is refused as `vlan_tagged`; a priority
    /// tag (id 0) on a port with subinterfaces is the port's own. (On a port without any, no
    /// tag is taken off, and the pipeline refuses priority-tagged frames with the others.)
    #[inline]
    pub fn interface(&self, port: usize, tci: Option<u16>) -> Result<u16, DropReason> {
        self.ports
            .get(port)
            .ok_or(DropReason::NotOurMac)?
            .interface(tci)
    }
}

/// The tag that decides a trunk frame's subinterface, taken out of the frame: the outer one,
/// which is the one the NIC stripped if it did, else the frame's own. A PMD that strips may
/// also put the same tag back into the frame (af_packet does, unless asked to strip): that
/// copy is taken out too. A tag left behind the deciding one makes the frame double-tagged,
/// refused whichever tag the NIC took, so that an outer tag of one VLAN never delivers the
/// frame into an inner one's (VLAN hopping), and an inner tag 0 never into the native LAN.
#[inline]
fn deciding_tag(mbuf: &mut Mbuf, stripped: Option<u16>) -> Result<Option<u16>, DropReason> {
    let tci = match stripped {
        Some(outer) => {
            if mbuf.vlan_tag() == Some(outer) {
                mbuf.pop_vlan_tag();
            }
            Some(outer)
        }
        None => mbuf.pop_vlan_tag(),
    };
    if tci.is_some() && mbuf.starts_with_any_tag() {
        return Err(DropReason::VlanDoubleTagged);
    }
    Ok(tci)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(interfaces: &str) -> PortLayout {
        let text = format!(
            "[workers]\nlcores = [1]\n{interfaces}\n[[routes]]\ndestination = \"0.0.0.0/0\"\nvia = \"10.0.0.2\"\n"
        );
        let config = GatewayConfig::from_text(std::path::Path::new("test.toml"), &text)
            .expect("a valid config");
        PortLayout::new(&config)
    }

    const TRUNK: &str = r#"
[[interfaces]]
name = "lan"
device = "net_ring0"
address = "192.168.1.1/24"
[[interfaces]]
name = "guest"
parent = "lan"
vlan = 20
address = "192.168.20.1/24"
[[interfaces]]
name = "wan"
device = "net_ring1"
address = "10.0.0.1/24"
[[interfaces]]
name = "iot"
parent = "lan"
vlan = 30
address = "192.168.30.1/24"
"#;

    #[test]
    fn subinterfaces_ride_on_their_parents_port_with_their_tag() {
        let layout = layout(TRUNK);
        assert_eq!(layout.port_interfaces().collect::<Vec<_>>(), [0, 2]);
        let link = |port, vlan| {
            Some(Link {
                port,
                vlan,
                pppoe: false,
            })
        };
        assert_eq!(layout.link(0), link(0, None));
        assert_eq!(layout.link(1), link(0, Some(20)));
        assert_eq!(layout.link(2), link(1, None));
        assert_eq!(layout.link(3), link(0, Some(30)));
        assert_eq!(layout.link(4), None);
        assert!(layout.port_has_vlans(0));
        assert!(!layout.port_has_vlans(1));
    }

    #[test]
    fn frames_map_to_interfaces_by_port_and_vlan_id() {
        let layout = layout(TRUNK);
        assert_eq!(layout.interface(0, None), Ok(0));
        assert_eq!(layout.interface(0, Some(20)), Ok(1));
        assert_eq!(layout.interface(0, Some(30)), Ok(3));
        // Priority bits are not part of the id.
        assert_eq!(layout.interface(0, Some(0xe000 | 30)), Ok(3));
        assert_eq!(layout.interface(1, None), Ok(2));
        // A priority tag (id 0) is the untagged network's.
        assert_eq!(layout.interface(0, Some(0)), Ok(0));
        assert_eq!(layout.interface(0, Some(0xa000)), Ok(0));
        // An id no subinterface has, or a tag on a port without VLANs: refused and counted.
        assert_eq!(layout.interface(0, Some(40)), Err(DropReason::VlanTagged));
        assert_eq!(layout.interface(1, Some(0)), Err(DropReason::VlanTagged));
        assert_eq!(layout.interface(1, Some(20)), Err(DropReason::VlanTagged));
        assert_eq!(layout.interface(2, None), Err(DropReason::NotOurMac));
    }

    #[test]
    fn without_vlans_interfaces_are_ports() {
        let layout = layout(
            "[[interfaces]]\nname = \"lan\"\ndevice = \"net_ring0\"\naddress = \"192.168.1.1/24\"\n\
             [[interfaces]]\nname = \"wan\"\ndevice = \"net_ring1\"\naddress = \"10.0.0.1/24\"\n",
        );
        assert!(!layout.port_has_vlans(0) && !layout.port_has_vlans(1));
        for i in 0..2_u16 {
            assert_eq!(
                layout.link(i),
                Some(Link {
                    port: i,
                    vlan: None,
                    pppoe: false,
                })
            );
            assert_eq!(layout.interface(usize::from(i), None), Ok(i));
        }
    }
}

//! What the features do with one flow direction's packets, worked out once by the full path
//! and kept in the direction's shortcut ([`FeaturePlan`]), the LAN hosts an IPv6 flow's
//! features are about ([`Features6`]), and what QoS in shaper mode hands the worker
//! ([`ShapeRequest`]). The pipeline's feature stage makes and applies them.

use std::net::Ipv4Addr;

use crate::features::qos::{Class, Link};
use crate::features::shaper::Arrival;

/// What the features do with the packets of one flow direction, packed into a byte so that
/// a shortcut carries it in what was padding. 0: nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeaturePlan(u8);

impl FeaturePlan {
    pub const NONE: FeaturePlan = FeaturePlan(0);
    pub(crate) const POLICE: u8 = 1;
    /// Policed on the downlink (else the uplink).
    pub(crate) const DOWNLINK: u8 = 2;
    /// The class below holds for every packet (no rule looks at DSCP or a MAC).
    pub(crate) const CLASS_KNOWN: u8 = 4;
    pub(crate) const PRIORITY: u8 = 8;
    /// Metered against the source, as traffic it sent.
    pub(crate) const METER_UP: u8 = 16;
    /// Metered against the destination, as traffic it received.
    pub(crate) const METER_DOWN: u8 = 32;

    /// From its packed form (a shortcut's).
    pub(crate) fn from_bits(bits: u8) -> FeaturePlan {
        FeaturePlan(bits)
    }

    pub(crate) fn bits(self) -> u8 {
        self.0
    }

    pub(crate) fn has(self, flag: u8) -> bool {
        self.0 & flag != 0
    }

    /// The QoS link (0 uplink, 1 downlink) the packets are policed on, if any.
    pub(crate) fn police_link(self) -> Option<usize> {
        self.has(Self::POLICE)
            .then_some(usize::from(self.has(Self::DOWNLINK)))
    }

    pub(crate) fn known_class(self) -> Option<Class> {
        self.has(Self::CLASS_KNOWN)
            .then_some(if self.has(Self::PRIORITY) {
                Class::Priority
            } else {
                Class::Bulk
            })
    }
}

/// The features of one direction of an IPv6 flow: its plan, and the LAN hosts it is about,
/// as their IPv4 addresses. A LAN host is the IPv4 neighbour with the sender's MAC (for the
/// host sending) or the next hop's (for the host receiving), on that interface's subnet
/// (traffic through a LAN router is the router's, as the MAC says). None: no such neighbour,
/// or several (an IPv6-only device, a Wi-Fi extender's clients behind its MAC); its traffic
/// shares one fair share, under 0.0.0.0, and the meter's unattributed entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Features6 {
    pub(crate) plan: FeaturePlan,
    pub(crate) sender: Option<Ipv4Addr>,
    pub(crate) receiver: Option<Ipv4Addr>,
}

/// An IPv6 packet's upper layer: its protocol, and where its header is in the packet's
/// payload (past the extension headers); None for a later fragment, which carries none (its
/// first bytes are data, not ports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Upper6 {
    pub(crate) protocol: u8,
    pub(crate) header_at: Option<usize>,
}

/// A packet QoS hands to the worker's shaper rather than deciding itself (shaper mode): the
/// worker queues bulk packets in `link`'s shaper and sends priority ones at once, charging the
/// link for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeRequest {
    pub link: Link,
    pub class: Class,
    pub arrival: Arrival,
}

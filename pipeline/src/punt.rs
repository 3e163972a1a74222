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

use crate::firewall::{Action, ZoneId};
use crate::flow::FlowKey;
use crate::forward::{Ingress, Pipeline};
use crate::verdict::{DropReason, Verdict};
use crate::wire::{ipv4, Ipv4Packet};

/// The DHCP server's UDP port (the kernel twin's dnsmasq, for a LAN).
pub const DHCP_SERVER_PORT: u16 = 67;
/// The DHCP client's UDP port (a DHCP client on the twin, for a WAN).
pub const DHCP_CLIENT_PORT: u16 = 68;

/// Which interfaces have a kernel twin, and each worker's budget for what goes to them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PuntConfig {
    /// Per interface, in port order: whether it has a twin to punt to.
    pub twins: Vec<bool>,
    /// Packets per second each worker may punt, with this burst; the rest are dropped as
    /// `punt_policed`.
    pub per_sec: u32,
    pub burst: u32,
}

impl PuntConfig {
    /// Enough for DHCP, DNS and an SSH session many times over, yet a small share of a
    /// worker's packet rate (a few million per second).
    pub const DEFAULT_PER_SEC: u32 = 10_000;
    pub const DEFAULT_BURST: u32 = 256;

    /// No twins: nothing is punted (what the gateway did before twins existed).
    pub fn none(interfaces: usize) -> Self {
        PuntConfig {
            twins: vec![false; interfaces],
            per_sec: Self::DEFAULT_PER_SEC,
            burst: Self::DEFAULT_BURST,
        }
    }

    #[inline]
    pub fn has_twin(&self, port: u16) -> bool {
        self.twins.get(usize::from(port)).copied().unwrap_or(false)
    }
}

impl Pipeline {
    /// Traffic for one of the gateway's addresses that the `local` rules accepted and that
    /// the dataplane does not answer itself: to the twin of the interface it came in by.
    /// Without a twin there, nothing can take it: dropped as `local_delivery`.
    #[inline]
    pub(crate) fn deliver_locally(&self, ingress: u16) -> Verdict {
        if self.router.punt.has_twin(ingress) {
            Verdict::Punt { port: ingress }
        } else {
            Verdict::Drop(DropReason::LocalDelivery)
        }
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

//! The full path's first stage: a frame the fast path did not take is classified by its
//! Ethernet type (IPv4, IPv6, ARP, PPPoE; tagged frames refused), handed to its family's
//! forwarding, and its verdict policed (echo requests and punts to the kernel twins have
//! budgets) and counted.

use crate::packet::PacketBuf;
use crate::pipeline::stage::{FlowProbe, Ingress};
use crate::pipeline::Pipeline;
use crate::verdict::{ControlWork, DropReason, Verdict};
use crate::wire::{ethernet, EthernetFrame};

impl Pipeline {
    /// The full path for one packet: every check, the stateful stage, routing, and the
    /// features; counts the decision. The fast path ([`crate::pipeline::fast_path`]) leaves to it
    /// every packet it does not cover.
    pub(crate) fn process_full(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        let mut verdict = self.classify(pkt, ingress, probe, now_ns);
        match verdict {
            Verdict::Control(ControlWork::LocalIcmp) if !self.echo_requests.try_take(now_ns) => {
                verdict = Verdict::Drop(DropReason::SlowPathPoliced);
            }
            Verdict::Punt { .. } if !self.punts.try_take(now_ns) => {
                verdict = Verdict::Drop(DropReason::PuntPoliced);
            }
            _ => {}
        }
        self.counters.count(&verdict);
        if let Verdict::Drop(reason) = verdict {
            let frame = EthernetFrame::new_checked(pkt.bytes());
            if frame.is_ok_and(|frame| frame.ethertype() == ethernet::ethertype::IPV6) {
                self.counters.record_ipv6_drop(reason);
            }
        }
        verdict
    }

    fn classify(
        &mut self,
        pkt: &mut PacketBuf,
        ingress: Ingress,
        probe: Option<&FlowProbe>,
        now_ns: u64,
    ) -> Verdict {
        let Some(iface) = self.router.interfaces.get(usize::from(ingress.port)) else {
            return Verdict::Drop(DropReason::NotOurMac);
        };
        let Ok(frame) = EthernetFrame::new_checked(pkt.bytes()) else {
            return Verdict::Drop(DropReason::TruncatedFrame);
        };
        let dst_mac = frame.dst_addr();
        if dst_mac != iface.mac && !dst_mac.is_multicast() {
            return Verdict::Drop(DropReason::NotOurMac);
        }
        match frame.ethertype() {
            ethernet::ethertype::IPV4 => self.ipv4(pkt, ingress, probe, now_ns),
            ethernet::ethertype::ARP => Verdict::Control(ControlWork::Arp),
            ethernet::ethertype::IPV6 => self.ipv6(pkt, ingress, now_ns),
            ethernet::ethertype::VLAN | ethernet::ethertype::QINQ => {
                Verdict::Drop(DropReason::VlanTagged)
            }
            // The gateway's I/O decapsulated the session's IPv4; what is left is the
            // client's to read.
            ethernet::ethertype::PPPOE_DISCOVERY | ethernet::ethertype::PPPOE_SESSION
                if self.router.runs_pppoe(ingress.port) =>
            {
                Verdict::Control(ControlWork::Pppoe)
            }
            _ => Verdict::Drop(DropReason::UnsupportedEthertype),
        }
    }
}

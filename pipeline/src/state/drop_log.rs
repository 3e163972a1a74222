//! The sampled log of drops by reason (`[firewall.log] drops`): of the packets a worker drops
//! for one of the asked reasons, one in `sample_every` goes to the firewall log, within a
//! budget of its own (a token bucket, apart from the rules' decisions, so that a flood of
//! drops cannot silence them). A drop that is sampled but over the budget is counted lost.
//! Unasked reasons cost one bit test per dropped packet; nothing is looked at for packets
//! that pass.

use std::net::IpAddr;

use crate::ratelimit::TokenBucket;
use crate::verdict::{DropReason, ReasonSet};
use crate::wire::{ethernet, ipv4, ipv6, EthernetFrame, Ipv4Packet, Ipv6Packet};

/// A worker's drop sampler.
#[derive(Clone, Debug)]
pub struct DropSampler {
    reasons: ReasonSet,
    sample_every: u32,
    /// Asked-for drops since the last sampled one.
    since_sample: u32,
    budget: TokenBucket,
}

/// What [`DropSampler::sample`] makes of an asked-for drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampled {
    /// Not the sample's: passed over, as sampling means.
    Skipped,
    /// The sample's, within the budget: to be logged.
    Logged,
    /// The sample's but over the budget: lost, and counted so.
    OverBudget,
}

impl DropSampler {
    /// One in `sample_every` (at least 1) of the drops for `reasons`, at most `per_sec` a
    /// second and `burst` at once.
    pub fn new(reasons: ReasonSet, sample_every: u32, per_sec: u32, burst: u32) -> Self {
        DropSampler {
            reasons,
            sample_every: sample_every.max(1),
            since_sample: 0,
            budget: TokenBucket::new(per_sec, burst),
        }
    }

    /// Whether drops for `reason` are asked for.
    #[inline]
    pub fn wants(&self, reason: DropReason) -> bool {
        self.reasons.contains(reason)
    }

    /// An asked-for drop at `now_ns`: the first of every `sample_every` is the sample's.
    pub fn sample(&mut self, now_ns: u64) -> Sampled {
        let due = self.since_sample == 0;
        self.since_sample = (self.since_sample + 1) % self.sample_every;
        match (due, due && self.budget.try_take(now_ns)) {
            (false, _) => Sampled::Skipped,
            (true, true) => Sampled::Logged,
            (true, false) => Sampled::OverBudget,
        }
    }
}

/// What a dropped frame says of its flow, as far as it can be read: the IP protocol, the
/// source and the destination, with their ports for TCP and UDP (0 where there are none, or
/// in a later fragment or behind IPv6 extension headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DroppedFlow {
    pub protocol: u8,
    pub src: (IpAddr, u16),
    pub dst: (IpAddr, u16),
}

/// The flow of a dropped frame; None for one that is not IP or whose IP header is cut short.
pub fn dropped_flow(frame: &[u8]) -> Option<DroppedFlow> {
    let frame = EthernetFrame::new_checked(frame).ok()?;
    let (protocol, (src, dst), ports) = match frame.ethertype() {
        ethernet::ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(frame.payload()).ok()?;
            let upper: &[u8] = if ip.frag_offset() == 0 {
                ip.payload()
            } else {
                &[]
            };
            let addresses = (ip.src_addr().into(), ip.dst_addr().into());
            (ip.protocol(), addresses, ports(ip.protocol(), upper))
        }
        ethernet::ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(frame.payload()).ok()?;
            let addresses = (ip.src_addr().into(), ip.dst_addr().into());
            (
                ip.next_header(),
                addresses,
                ports(ip.next_header(), ip.payload()),
            )
        }
        _ => return None,
    };
    Some(DroppedFlow {
        protocol,
        src: (src, ports.0),
        dst: (dst, ports.1),
    })
}

/// A TCP or UDP header's ports (the numbers are the same in both families' headers), or
/// none.
fn ports(protocol: u8, upper: &[u8]) -> (u16, u16) {
    const _: () = assert!(ipv4::protocol::TCP == ipv6::next_header::TCP);
    const _: () = assert!(ipv4::protocol::UDP == ipv6::next_header::UDP);
    match (protocol, upper) {
        (ipv4::protocol::TCP | ipv4::protocol::UDP, [a, b, c, d, ..]) => {
            (u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))
        }
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_in_n_of_the_asked_reasons_within_the_budget() {
        let mut reasons = ReasonSet::default();
        reasons.insert(DropReason::ConntrackInvalid);
        let mut sampler = DropSampler::new(reasons, 3, 10, 2);
        assert!(sampler.wants(DropReason::ConntrackInvalid));
        assert!(!sampler.wants(DropReason::FirewallDrop));
        let taken: Vec<Sampled> = (0..9).map(|_| sampler.sample(1_000)).collect();
        use Sampled::*;
        assert_eq!(
            taken,
            [Logged, Skipped, Skipped, Logged, Skipped, Skipped, OverBudget, Skipped, Skipped],
            "the 1st, 4th and 7th are the sample's; the budget holds two at once"
        );
        // A tenth of a second later, one more token.
        assert_eq!(sampler.sample(100_001_000), Logged);
    }

    #[test]
    fn a_dropped_frame_gives_its_addresses_and_ports() {
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame[12..14].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        frame[14] = 0x45;
        frame[16..18].copy_from_slice(&28u16.to_be_bytes());
        frame[23] = ipv4::protocol::UDP;
        frame[26..30].copy_from_slice(&[10, 0, 0, 2]);
        frame[30..34].copy_from_slice(&[192, 168, 10, 2]);
        frame[34..36].copy_from_slice(&5353u16.to_be_bytes());
        frame[36..38].copy_from_slice(&9u16.to_be_bytes());
        let flow = dropped_flow(&frame).unwrap();
        assert_eq!(flow.protocol, ipv4::protocol::UDP);
        assert_eq!(flow.src, ("10.0.0.2".parse().unwrap(), 5353));
        assert_eq!(flow.dst, ("192.168.10.2".parse().unwrap(), 9));
        // A later fragment has no ports to read.
        frame[20..22].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(dropped_flow(&frame).unwrap().src.1, 0);
        // Not IP: nothing.
        frame[12..14].copy_from_slice(&ethernet::ethertype::ARP.to_be_bytes());
        assert!(dropped_flow(&frame).is_none());
    }
}

//! The ICMP errors a worker raises (RFC 1812): which kinds there are, the type and code each
//! is sent with, the budget each is spent from and the drop reason of the packet it answers,
//! and which packets may be answered with one at all. The error itself is written by the
//! pipeline, which knows the interface addresses it comes from.

use crate::ratelimit::TokenBucket;
use crate::verdict::DropReason;
use crate::wire::{ethernet, icmp, ipv4, EthernetFrame, Ipv4Packet};

/// Which ICMP error: the reason a packet is answered with one.
#[derive(Clone, Copy, Debug)]
pub(crate) enum IcmpError {
    TimeExceeded,
    NoRoute,
    FragmentationNeeded {
        mtu: u16,
    },
    /// The firewall's reject for non-TCP flows.
    AdminProhibited,
}

/// The budgets ICMP errors and resets are spent from, one each, so that a flood of one kind
/// (TTL expiry from a traceroute storm or a routing loop, unreachables from a scan) cannot
/// starve another: above all "fragmentation needed", without which path-MTU discovery
/// black-holes TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IcmpBudget {
    TimeExceeded,
    /// No route.
    Unreachable,
    FragmentationNeeded,
    /// The firewall's rejects and content blocking's resets (TCP RST or ICMP prohibited).
    Reject,
}

impl IcmpBudget {
    const COUNT: usize = 4;
}

/// One token bucket per [`IcmpBudget`], each with the configured rate and burst
/// (`IcmpLimits::errors_per_sec` and `burst` of the router config).
#[derive(Clone, Debug)]
pub(crate) struct IcmpBudgets([TokenBucket; IcmpBudget::COUNT]);

impl IcmpBudgets {
    pub(crate) fn new(per_sec: u32, burst: u32) -> Self {
        IcmpBudgets(std::array::from_fn(|_| TokenBucket::new(per_sec, burst)))
    }

    #[inline]
    pub(crate) fn try_take(&mut self, budget: IcmpBudget, now_ns: u64) -> bool {
        self.0[budget as usize].try_take(now_ns)
    }
}

impl IcmpError {
    pub(crate) fn budget(self) -> IcmpBudget {
        match self {
            IcmpError::TimeExceeded => IcmpBudget::TimeExceeded,
            IcmpError::NoRoute => IcmpBudget::Unreachable,
            IcmpError::FragmentationNeeded { .. } => IcmpBudget::FragmentationNeeded,
            IcmpError::AdminProhibited => IcmpBudget::Reject,
        }
    }

    pub(crate) fn drop_reason(self) -> DropReason {
        match self {
            IcmpError::TimeExceeded => DropReason::TtlExpired,
            IcmpError::NoRoute => DropReason::NoRoute,
            IcmpError::FragmentationNeeded { .. } => DropReason::FragmentationNeeded,
            IcmpError::AdminProhibited => DropReason::FirewallReject,
        }
    }

    /// Type, code and the 32-bit rest of the ICMP header.
    pub(crate) fn header(self) -> (u8, u8, u32) {
        match self {
            IcmpError::TimeExceeded => (icmp::msg_type::TIME_EXCEEDED, 0, 0),
            IcmpError::NoRoute => (icmp::msg_type::DEST_UNREACHABLE, icmp::unreach_code::NET, 0),
            IcmpError::FragmentationNeeded { mtu } => (
                icmp::msg_type::DEST_UNREACHABLE,
                icmp::unreach_code::FRAG_NEEDED,
                u32::from(mtu),
            ),
            IcmpError::AdminProhibited => (
                icmp::msg_type::DEST_UNREACHABLE,
                icmp::unreach_code::ADMIN_PROHIBITED,
                0,
            ),
        }
    }
}

/// RFC 1812 4.3.2.7: never answer an ICMP error with one, nor a non-initial fragment, nor
/// a link-layer broadcast or multicast.
pub(crate) fn may_answer_with_icmp_error(frame: &[u8]) -> bool {
    let eth = EthernetFrame::new_unchecked(frame);
    if eth.dst_addr().is_multicast() {
        return false;
    }
    let ip = Ipv4Packet::new_unchecked(&frame[ethernet::HEADER_LEN..]);
    if ip.frag_offset() != 0 {
        return false;
    }
    if ip.protocol() == ipv4::protocol::ICMP {
        let Some(&msg_type) = ip.payload().first() else {
            return false;
        };
        return matches!(
            msg_type,
            icmp::msg_type::ECHO_REQUEST
                | icmp::msg_type::ECHO_REPLY
                | icmp::msg_type::TIMESTAMP
                | icmp::msg_type::TIMESTAMP_REPLY
                | icmp::msg_type::INFO_REQUEST
                | icmp::msg_type::INFO_REPLY
        );
    }
    true
}

//! How long a flow may stay idle before it is forgotten, by protocol and TCP state.

use super::tcp::TcpState;
use crate::wire::ipv4::protocol;
use crate::wire::ipv6::next_header;

const SECOND_NS: u64 = 1_000_000_000;

/// Idle timeouts in nanoseconds. Every accepted packet restarts its flow's timer with the
/// value for the state the packet leaves the flow in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub tcp_established_ns: u64,
    /// Handshake and closing states: SYN_SENT, SYN_RECEIVED, FIN_WAIT, CLOSE_WAIT, LAST_ACK.
    pub tcp_transitory_ns: u64,
    pub tcp_time_wait_ns: u64,
    /// After a reset: long enough for stray segments still in flight to be recognised.
    pub tcp_close_ns: u64,
    pub udp_ns: u64,
    /// ICMP queries (echo, timestamp, information), and ICMPv6 echo.
    pub icmp_ns: u64,
    /// Any other IP protocol.
    pub other_ns: u64,
}

impl Default for Timeouts {
    /// The minimums the NAT behaviour RFCs set, so that default settings never break an
    /// application that keeps to them: RFC 5382 REQ-5 (established TCP at least 2 h 4 min,
    /// transitory at least 4 min), RFC 4787 REQ-5 (UDP at least 2 min, 5 min recommended) and
    /// RFC 5508 REQ-1 (ICMP queries at least 60 s). TIME_WAIT is the 2 min that Linux's
    /// conntrack uses (2 MSL with its 60 s MSL); only a retransmitted final ACK needs it.
    fn default() -> Self {
        Self {
            tcp_established_ns: 7440 * SECOND_NS,
            tcp_transitory_ns: 240 * SECOND_NS,
            tcp_time_wait_ns: 120 * SECOND_NS,
            tcp_close_ns: 10 * SECOND_NS,
            udp_ns: 300 * SECOND_NS,
            icmp_ns: 60 * SECOND_NS,
            other_ns: 600 * SECOND_NS,
        }
    }
}

impl Timeouts {
    pub(super) fn for_tcp(&self, state: TcpState) -> u64 {
        match state {
            TcpState::Established => self.tcp_established_ns,
            TcpState::SynSent
            | TcpState::SynReceived
            | TcpState::FinWait
            | TcpState::CloseWait
            | TcpState::LastAck => self.tcp_transitory_ns,
            TcpState::TimeWait => self.tcp_time_wait_ns,
            TcpState::Closed => self.tcp_close_ns,
        }
    }

    /// For every protocol but TCP, whose timeout depends on its state.
    pub(super) fn for_stateless(&self, ip_protocol: u8) -> u64 {
        match ip_protocol {
            protocol::UDP => self.udp_ns,
            // ICMPv6's number is IPv6's own, and no IPv4 packet carries it.
            protocol::ICMP | next_header::ICMPV6 => self.icmp_ns,
            _ => self.other_ns,
        }
    }
}

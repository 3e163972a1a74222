//! `[icmp]`, `[neighbors]` and `[conntrack]`: the limits and timers of the protocols the
//! gateway speaks and tracks.

use super::*;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IcmpConfig {
    /// ICMP errors (time exceeded, unreachable, fragmentation needed) each worker may send
    /// per second; the rest are dropped and counted. Each kind has a bucket of its own.
    pub errors_per_sec: u32,
    pub burst: u32,
    /// Echo requests to the gateway each worker passes to the control thread per second;
    /// the rest are dropped as slow_path_policed. ARP is exempt.
    pub echo_per_sec: u32,
    pub echo_burst: u32,
}

impl Default for IcmpConfig {
    fn default() -> Self {
        IcmpConfig {
            errors_per_sec: 1000,
            burst: 100,
            echo_per_sec: 1000,
            echo_burst: 100,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NeighborsConfig {
    pub capacity: usize,
    /// Packets held per unresolved next hop while ARP runs; more are dropped and counted.
    pub pending_per_neighbor: usize,
    /// How long an ARP answer is trusted before it is refreshed.
    pub reachable_secs: u64,
    /// Packets held over all unresolved next hops together; more are dropped and counted
    /// (`neighbor_held_limit`), so that unresolvable next hops cannot drain the mempool.
    pub pending_total: usize,
    /// Milliseconds after a neighbour's confirmation during which ARP claiming another MAC
    /// for it is refused outright (Linux's `locktime`). Later, a claim sends a probe to the
    /// known MAC first and is believed only if that goes unanswered and a broadcast probe is
    /// answered with the new MAC. 0: no lock, claims are still checked by probe.
    pub locktime_ms: u64,
}

impl Default for NeighborsConfig {
    fn default() -> Self {
        NeighborsConfig {
            capacity: 4096,
            pending_per_neighbor: 4,
            reachable_secs: 300,
            pending_total: 512,
            locktime_ms: 1000,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConntrackConfig {
    /// Flows per worker, preallocated at start.
    pub capacity: usize,
    /// TCP established idle timeout; RFC 5382 asks for at least 2 h 4 min.
    pub tcp_established_secs: u64,
    /// TCP opening and closing states; RFC 5382 asks for 4 min.
    pub tcp_transitory_secs: u64,
    pub tcp_time_wait_secs: u64,
    /// After a RST.
    pub tcp_close_secs: u64,
    /// RFC 4787 asks for at least 2 min; 5 min is its recommendation.
    pub udp_secs: u64,
    pub icmp_secs: u64,
    /// Other IP protocols (GRE, ESP, ...).
    pub other_secs: u64,
    /// Accept TCP flows picked up mid-stream (after a restart) instead of requiring a SYN.
    pub tcp_loose: bool,
    /// Flows one host (the address that opened them) may hold per worker.
    pub host_flows: u32,
    /// Half-open TCP flows one host may hold per worker.
    pub host_half_open: u32,
    /// Half-open TCP flows per worker; by default a quarter of `capacity`.
    pub half_open: Option<usize>,
    /// Hosts per worker that the per-host counts have room for (flows and NAT ports).
    pub hosts: usize,
    /// An IPv6 host for `host_flows` and `host_half_open`: its source address's first this
    /// many bits, 32 to 128 (a /64 by default: every address a host takes in its LAN's /64,
    /// SLAAC, privacy or made up, counts as that one host).
    pub host_prefix6: u8,
}

impl Default for ConntrackConfig {
    fn default() -> Self {
        ConntrackConfig {
            capacity: 262_144,
            tcp_established_secs: 7440,
            tcp_transitory_secs: 240,
            tcp_time_wait_secs: 120,
            tcp_close_secs: 10,
            udp_secs: 300,
            icmp_secs: 60,
            other_secs: 600,
            tcp_loose: false,
            host_flows: pipeline::state::conntrack::DEFAULT_HOST_FLOWS,
            host_half_open: pipeline::state::conntrack::DEFAULT_HOST_HALF_OPEN,
            half_open: None,
            hosts: pipeline::state::conntrack::DEFAULT_HOSTS,
            host_prefix6: pipeline::state::conntrack::DEFAULT_HOST_PREFIX6,
        }
    }
}

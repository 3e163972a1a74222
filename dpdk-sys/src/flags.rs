//! Flag constants that DPDK defines with `RTE_BIT64(n)`, which bindgen cannot evaluate.
//! The single-bit ones are read from rte_ethdev.h at build time; the unions DPDK builds
//! from them are restated here with the same composition as the header.

include!(concat!(env!("OUT_DIR"), "/bit64_flags.rs"));

/// `RTE_ETH_RSS_IP` for IPv4: the plain and fragmented IPv4 hash types.
pub const RTE_ETH_RSS_IPV4_ALL: u64 =
    RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_FRAG_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_OTHER;
/// IPv4 with TCP and UDP ports: what the gateway spreads flows by.
pub const RTE_ETH_RSS_IPV4_TCP_UDP: u64 =
    RTE_ETH_RSS_IPV4_ALL | RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_NONFRAG_IPV4_UDP;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_rte_ethdev_h() {
        assert_eq!(RTE_ETH_RSS_IPV4, 1 << 2);
        assert_eq!(RTE_ETH_RSS_NONFRAG_IPV4_TCP, 1 << 4);
        assert_eq!(RTE_ETH_RSS_NONFRAG_IPV4_UDP, 1 << 5);
        assert_eq!(RTE_ETH_RX_OFFLOAD_RSS_HASH, 1 << 19);
        assert_eq!(RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE, 1 << 16);
    }
}

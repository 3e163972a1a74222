//! SYN cookies (RFC 4987 3.6) for the SYN proxy in front of port forwards: the initial
//! sequence number the gateway answers a SYN with encodes the connection (its tuple, the
//! client's ISN, the time) and the client's MSS, so that nothing is kept per SYN. Only a
//! client that receives the SYN-ACK can return the cookie in its ACK, and only then does the
//! connection take a place in the flow table.
//!
//! A cookie is a keyed hash (SipHash-1-3, keyed per worker from [`RandomState`]) of the tuple,
//! the client's ISN and the current 64-second period, its low three bits replaced by an
//! index into [`MSS_TABLE`]. An ACK is checked against the current and the previous period,
//! so a cookie stays valid 64 to 128 seconds, as Linux's do for about two minutes. A guess
//! passes with odds of 2 in 2^29 per ACK.
//!
//! Each worker keys its own jar: a flow's SYN and its ACK have the same tuple, so the same
//! worker ([`crate::pipeline::stateful`]'s owner) makes and checks its cookie.

use std::hash::{BuildHasher, RandomState};

use siphasher::sip::SipHasher13;

use crate::flow::FlowKey;

/// The MSS values a cookie can carry (3 bits), as Linux's `msstab`: the common path MTUs
/// less 40 bytes of headers. A client gets the largest entry not above its own MSS.
pub const MSS_TABLE: [u16; 8] = [536, 1220, 1300, 1360, 1400, 1440, 1452, 1460];
/// The MSS a SYN without the option stands for (RFC 9293 3.7.1).
pub const DEFAULT_MSS: u16 = 536;
const MSS_BITS: u32 = 0b111;
/// 2^36 ns, about 68.7 s: the period a cookie's time stamp counts.
const PERIOD_SHIFT: u32 = 36;

/// One worker's cookie key.
#[derive(Clone, Debug)]
pub struct CookieJar {
    key: SipHasher13,
}

impl Default for CookieJar {
    fn default() -> Self {
        CookieJar::new()
    }
}

impl CookieJar {
    /// A jar with a fresh random key.
    pub fn new() -> Self {
        let random = RandomState::new();
        let [key0, key1] = [0_u8, 1].map(|i| random.hash_one(i));
        CookieJar {
            key: SipHasher13::new_with_keys(key0, key1),
        }
    }

    /// The ISN to answer the SYN of `key` (client to server, as received) with, at `now_ns`.
    pub fn make(&self, key: &FlowKey, client_isn: u32, client_mss: u16, now_ns: u64) -> u32 {
        let index = MSS_TABLE
            .iter()
            .rposition(|&mss| mss <= client_mss)
            .unwrap_or(0) as u32;
        (self.mac(key, client_isn, now_ns >> PERIOD_SHIFT) & !MSS_BITS) | index
    }

    /// The MSS the client announced, if `cookie` (its ACK's acknowledgement number less one)
    /// is one this jar made for `key` and `client_isn` (its sequence number less one) in
    /// this period or the last.
    pub fn check(&self, key: &FlowKey, client_isn: u32, cookie: u32, now_ns: u64) -> Option<u16> {
        let period = now_ns >> PERIOD_SHIFT;
        let valid = [period, period.wrapping_sub(1)]
            .into_iter()
            .any(|period| self.mac(key, client_isn, period) & !MSS_BITS == cookie & !MSS_BITS);
        valid.then(|| MSS_TABLE[(cookie & MSS_BITS) as usize])
    }

    fn mac(&self, key: &FlowKey, client_isn: u32, period: u64) -> u32 {
        // One 24-byte message: SipHash pays per write.
        let mut message = [0_u8; 24];
        message[..4].copy_from_slice(&key.src.octets());
        message[4..8].copy_from_slice(&key.dst.octets());
        message[8..10].copy_from_slice(&key.src_port.to_be_bytes());
        message[10..12].copy_from_slice(&key.dst_port.to_be_bytes());
        message[12..16].copy_from_slice(&client_isn.to_be_bytes());
        message[16..].copy_from_slice(&period.to_le_bytes());
        self.key.hash(&message) as u32
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::wire::ipv4;

    const PERIOD_NS: u64 = 1 << PERIOD_SHIFT;

    fn key(src_port: u16) -> FlowKey {
        FlowKey {
            src: Ipv4Addr::new(198, 51, 100, 7),
            dst: Ipv4Addr::new(203, 0, 113, 1),
            src_port,
            dst_port: 22,
            protocol: ipv4::protocol::TCP,
        }
    }

    #[test]
    fn a_cookie_checks_for_its_own_connection_only() {
        let jar = CookieJar::new();
        let now = 5 * PERIOD_NS + 17;
        let cookie = jar.make(&key(40000), 1000, 1460, now);
        assert_eq!(jar.check(&key(40000), 1000, cookie, now), Some(1460));
        assert_eq!(jar.check(&key(40001), 1000, cookie, now), None);
        assert_eq!(jar.check(&key(40000), 1001, cookie, now), None);
        assert_eq!(jar.check(&key(40000), 1000, cookie ^ 0x100, now), None);
        // Another worker's jar (another key) does not take it.
        assert_eq!(CookieJar::new().check(&key(40000), 1000, cookie, now), None);
    }

    #[test]
    fn a_cookie_lasts_one_to_two_periods() {
        let jar = CookieJar::new();
        let made = 9 * PERIOD_NS + PERIOD_NS - 1;
        let cookie = jar.make(&key(1), 7, 1460, made);
        assert!(jar.check(&key(1), 7, cookie, made + 1).is_some());
        assert!(jar.check(&key(1), 7, cookie, made + PERIOD_NS).is_some());
        assert!(jar
            .check(&key(1), 7, cookie, made + PERIOD_NS + 1)
            .is_none());
    }

    #[test]
    fn the_mss_rounds_down_to_the_table() {
        let jar = CookieJar::new();
        for (announced, carried) in [
            (1460, 1460),
            (1459, 1452),
            (9000, 1460),
            (600, 536),
            (100, 536),
        ] {
            let cookie = jar.make(&key(2), 0, announced, 0);
            assert_eq!(
                jar.check(&key(2), 0, cookie, 0),
                Some(carried),
                "MSS {announced}"
            );
        }
    }
}

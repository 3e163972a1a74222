//! IPv4 longest-prefix match whose cost does not grow with the table: DIR-24-8, the layout of
//! DPDK's `rte_lpm`.
//!
//! The top 24 bits of the destination index `tbl24` directly. Prefixes of /24 or shorter are
//! expanded into every `tbl24` entry they cover; a longer prefix turns its one `tbl24` entry
//! into a pointer to a 256-entry `tbl8` group indexed by the last octet. A lookup is therefore
//! one read, or two when the /24 holds something longer, whatever the number of routes. The
//! deduplicated next-hop table is read last, but it is small enough to stay in L1.
//!
//! The table is built once from the complete route list and never modified: a route change
//! builds a new table and swaps it in, so workers only ever read an immutable structure.
//!
//! Memory: `tbl24` is 2^24 `u16` = 32 MiB (zeroed pages from `calloc`, so untouched ranges cost
//! no RSS); each `tbl8` group is 512 B, at most 32768 groups = 16 MiB.

use std::collections::HashMap;
use std::fmt;
use std::net::Ipv4Addr;

const TBL24_ENTRIES: usize = 1 << 24;
const TBL8_GROUP_ENTRIES: usize = 256;

/// Entry encoding shared by `tbl24` and `tbl8`: 0 is "no route", otherwise `n` is next hop
/// `n - 1`. In `tbl24` only, the flag bit turns the remaining 15 bits into a `tbl8` group index.
const NO_ROUTE: u16 = 0;
const TBL8_FLAG: u16 = 0x8000;
const MAX_NEXT_HOPS: usize = 0x7fff;
const MAX_TBL8_GROUPS: usize = 0x8000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NextHop {
    pub port: u16,
    /// `None` for a directly connected prefix, where the destination itself is the neighbour.
    pub gateway: Option<Ipv4Addr>,
}

impl NextHop {
    /// The address whose MAC the frame must be sent to, i.e. what ARP has to resolve.
    #[inline]
    pub fn resolve(&self, dst: Ipv4Addr) -> Ipv4Addr {
        self.gateway.unwrap_or(dst)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    pub prefix: Ipv4Addr,
    pub len: u8,
    pub next_hop: NextHop,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} port {}",
            self.prefix, self.len, self.next_hop.port
        )?;
        match self.next_hop.gateway {
            Some(gateway) => write!(f, " via {gateway}"),
            None => write!(f, " connected"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("prefix length above 32 in route {route}")]
    BadPrefixLength { route: Route },
    /// Rejected rather than masked: a prefix with host bits is almost always a typo for a
    /// different prefix length, and silently routing the wrong range is worse than refusing.
    #[error("host bits set in route {route}")]
    HostBitsSet { route: Route },
    #[error("more than {MAX_NEXT_HOPS} distinct next hops")]
    TooManyNextHops,
    #[error("more than {MAX_TBL8_GROUPS} /24 blocks contain prefixes longer than /24")]
    TooManyTbl8Groups,
    /// Two routes for the same prefix would make the result depend on input order.
    #[error("duplicate prefix in route {route}")]
    DuplicateRoute { route: Route },
}

pub struct RouteTable {
    /// A fixed-size array rather than a slice so that indexing with `dst >> 8` is provably in
    /// bounds and the lookup carries no bounds check.
    tbl24: Box<[u16; TBL24_ENTRIES]>,
    tbl8: Vec<[u16; TBL8_GROUP_ENTRIES]>,
    next_hops: Vec<NextHop>,
    routes: Vec<Route>,
    /// The default route's entry, its own even where another route has the same next hop,
    /// so that a lookup can tell the default route (which the uplinks share) from the
    /// others; NO_ROUTE without one.
    default_entry: u16,
}

impl fmt::Debug for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteTable")
            .field("routes", &self.routes.len())
            .field("next_hops", &self.next_hops.len())
            .field("tbl8_groups", &self.tbl8.len())
            .finish_non_exhaustive()
    }
}

impl RouteTable {
    /// Routes are written shortest prefix first, so each write only ever overwrites less
    /// specific routes and the result does not depend on the order of `routes`.
    pub fn build(routes: &[Route]) -> Result<Self, RouteError> {
        for route in routes {
            if route.len > 32 {
                return Err(RouteError::BadPrefixLength { route: *route });
            }
            if u32::from(route.prefix) & !prefix_mask(route.len) != 0 {
                return Err(RouteError::HostBitsSet { route: *route });
            }
        }

        let mut by_length = routes.to_vec();
        by_length.sort_by_key(|route| (route.len, u32::from(route.prefix)));
        if let Some(pair) = by_length
            .windows(2)
            .find(|pair| pair[0].len == pair[1].len && pair[0].prefix == pair[1].prefix)
        {
            return Err(RouteError::DuplicateRoute { route: pair[1] });
        }

        let Ok(mut tbl24) =
            Box::<[u16; TBL24_ENTRIES]>::try_from(vec![NO_ROUTE; TBL24_ENTRIES].into_boxed_slice())
        else {
            unreachable!("a boxed slice of TBL24_ENTRIES converts to an array of that length");
        };
        let mut tbl8: Vec<[u16; TBL8_GROUP_ENTRIES]> = Vec::new();
        let mut next_hops: Vec<NextHop> = Vec::new();
        let mut next_hop_entries: HashMap<NextHop, u16> = HashMap::new();

        let mut default_entry = NO_ROUTE;
        for route in &by_length {
            let shared = next_hop_entries.get(&route.next_hop).copied();
            let entry = match shared.filter(|_| route.len != 0) {
                Some(entry) => entry,
                None => {
                    if next_hops.len() >= MAX_NEXT_HOPS {
                        return Err(RouteError::TooManyNextHops);
                    }
                    next_hops.push(route.next_hop);
                    let entry =
                        u16::try_from(next_hops.len()).map_err(|_| RouteError::TooManyNextHops)?;
                    if route.len == 0 {
                        default_entry = entry;
                    } else {
                        next_hop_entries.insert(route.next_hop, entry);
                    }
                    entry
                }
            };

            let addr = u32::from(route.prefix);
            let tbl24_index = (addr >> 8) as usize;
            if route.len <= 24 {
                let covered = 1usize << (24 - route.len);
                tbl24[tbl24_index..tbl24_index + covered].fill(entry);
                continue;
            }

            let slot = &mut tbl24[tbl24_index];
            let group = if *slot & TBL8_FLAG != 0 {
                usize::from(*slot & !TBL8_FLAG)
            } else {
                if tbl8.len() >= MAX_TBL8_GROUPS {
                    return Err(RouteError::TooManyTbl8Groups);
                }
                // The new group inherits whatever shorter route covered the whole /24.
                tbl8.push([*slot; TBL8_GROUP_ENTRIES]);
                let group = tbl8.len() - 1;
                *slot =
                    TBL8_FLAG | u16::try_from(group).map_err(|_| RouteError::TooManyTbl8Groups)?;
                group
            };
            let first = (addr & 0xff) as usize;
            let covered = 1usize << (32 - route.len);
            tbl8[group][first..first + covered].fill(entry);
        }

        Ok(Self {
            tbl24,
            tbl8,
            next_hops,
            routes: routes.to_vec(),
            default_entry,
        })
    }

    #[inline]
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<NextHop> {
        self.lookup_entry(dst).0
    }

    /// As [`lookup`](Self::lookup), saying whether the match is the default route (0/0)
    /// rather than a longer prefix: what the uplinks share is the default route's traffic.
    #[inline]
    pub fn lookup_from_default(&self, dst: Ipv4Addr) -> Option<(NextHop, bool)> {
        let (next_hop, entry) = self.lookup_entry(dst);
        next_hop.map(|next_hop| (next_hop, entry == self.default_entry))
    }

    #[inline]
    fn lookup_entry(&self, dst: Ipv4Addr) -> (Option<NextHop>, u16) {
        let addr = u32::from(dst);
        let mut entry = self.tbl24[(addr >> 8) as usize];
        if entry & TBL8_FLAG != 0 {
            entry = self
                .tbl8
                .get(usize::from(entry & !TBL8_FLAG))
                .map_or(NO_ROUTE, |group| group[(addr & 0xff) as usize]);
        }
        // NO_ROUTE wraps to usize::MAX and misses, so "no route" needs no branch of its own.
        let next_hop = self
            .next_hops
            .get(usize::from(entry).wrapping_sub(1))
            .copied();
        (next_hop, entry)
    }

    /// Where [`lookup`](Self::lookup) of `dst` reads first (its `tbl24` entry), for a
    /// prefetch ahead of it.
    #[inline]
    pub fn entry_address(&self, dst: Ipv4Addr) -> *const u8 {
        let index = (u32::from(dst) >> 8) as usize;
        self.tbl24[index..].as_ptr().cast()
    }

    /// The routes as given to `build`, in their original order, for the control plane to show
    /// or to derive the next table from.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

fn prefix_mask(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hop(port: u16) -> NextHop {
        NextHop {
            port,
            gateway: Some(Ipv4Addr::new(192, 0, 2, port as u8)),
        }
    }

    fn route(prefix: [u8; 4], len: u8, next_hop: NextHop) -> Route {
        Route {
            prefix: Ipv4Addr::from(prefix),
            len,
            next_hop,
        }
    }

    fn ip(octets: [u8; 4]) -> Ipv4Addr {
        Ipv4Addr::from(octets)
    }

    #[test]
    fn next_hop_resolves_to_gateway_or_destination() {
        let dst = ip([10, 1, 2, 3]);
        assert_eq!(hop(1).resolve(dst), ip([192, 0, 2, 1]));
        let connected = NextHop {
            port: 1,
            gateway: None,
        };
        assert_eq!(connected.resolve(dst), dst);
    }

    #[test]
    fn empty_table_has_no_route() {
        let table = RouteTable::build(&[]).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.lookup(ip([0, 0, 0, 0])), None);
        assert_eq!(table.lookup(ip([255, 255, 255, 255])), None);
    }

    #[test]
    fn default_route_matches_everything() {
        let table = RouteTable::build(&[route([0, 0, 0, 0], 0, hop(7))]).unwrap();
        for addr in [[0, 0, 0, 0], [10, 0, 0, 1], [255, 255, 255, 255]] {
            assert_eq!(table.lookup(ip(addr)), Some(hop(7)));
        }
    }

    #[test]
    fn the_default_route_is_told_from_a_route_with_its_next_hop() {
        let table = RouteTable::build(&[
            route([198, 51, 100, 0], 24, hop(7)),
            route([0, 0, 0, 0], 0, hop(7)),
            route([10, 0, 0, 0], 8, hop(3)),
        ])
        .unwrap();
        assert_eq!(
            table.lookup_from_default(ip([1, 1, 1, 1])),
            Some((hop(7), true))
        );
        let specific = table.lookup_from_default(ip([198, 51, 100, 9]));
        assert_eq!(specific, Some((hop(7), false)));
        assert_eq!(
            table.lookup_from_default(ip([10, 2, 3, 4])),
            Some((hop(3), false))
        );
        let without = RouteTable::build(&[route([10, 0, 0, 0], 8, hop(3))]).unwrap();
        assert_eq!(
            without.lookup_from_default(ip([10, 2, 3, 4])),
            Some((hop(3), false))
        );
        assert_eq!(without.lookup_from_default(ip([11, 2, 3, 4])), None);
    }

    #[test]
    fn host_route_matches_only_its_address() {
        let table = RouteTable::build(&[
            route([0, 0, 0, 0], 0, hop(1)),
            route([10, 0, 0, 5], 32, hop(2)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip([10, 0, 0, 5])), Some(hop(2)));
        assert_eq!(table.lookup(ip([10, 0, 0, 4])), Some(hop(1)));
        assert_eq!(table.lookup(ip([10, 0, 0, 6])), Some(hop(1)));
    }

    #[test]
    fn host_route_without_covering_route() {
        let table = RouteTable::build(&[route([10, 0, 0, 5], 32, hop(2))]).unwrap();
        assert_eq!(table.lookup(ip([10, 0, 0, 5])), Some(hop(2)));
        assert_eq!(table.lookup(ip([10, 0, 0, 4])), None);
    }

    #[test]
    fn slash24_inside_slash16() {
        let table = RouteTable::build(&[
            route([172, 16, 0, 0], 16, hop(1)),
            route([172, 16, 5, 0], 24, hop(2)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip([172, 16, 5, 1])), Some(hop(2)));
        assert_eq!(table.lookup(ip([172, 16, 4, 255])), Some(hop(1)));
        assert_eq!(table.lookup(ip([172, 16, 6, 0])), Some(hop(1)));
        assert_eq!(table.lookup(ip([172, 17, 5, 1])), None);
    }

    #[test]
    fn longer_prefixes_inside_slash24_use_tbl8() {
        let mut routes = vec![route([10, 1, 1, 0], 24, hop(24))];
        // 10.1.1.128/25, 10.1.1.192/26, ..., 10.1.1.255/32: each nested in the previous one.
        for len in 25..=32u8 {
            let size = 1u16 << (32 - len);
            routes.push(route([10, 1, 1, (256 - size) as u8], len, hop(len.into())));
        }
        let table = RouteTable::build(&routes).unwrap();

        assert_eq!(table.lookup(ip([10, 1, 1, 0])), Some(hop(24)));
        assert_eq!(table.lookup(ip([10, 1, 1, 127])), Some(hop(24)));
        assert_eq!(table.lookup(ip([10, 1, 1, 128])), Some(hop(25)));
        assert_eq!(table.lookup(ip([10, 1, 1, 191])), Some(hop(25)));
        assert_eq!(table.lookup(ip([10, 1, 1, 192])), Some(hop(26)));
        assert_eq!(table.lookup(ip([10, 1, 1, 253])), Some(hop(30)));
        assert_eq!(table.lookup(ip([10, 1, 1, 254])), Some(hop(31)));
        assert_eq!(table.lookup(ip([10, 1, 1, 255])), Some(hop(32)));
        assert_eq!(table.lookup(ip([10, 1, 0, 255])), None);
        assert_eq!(table.lookup(ip([10, 1, 2, 0])), None);
    }

    #[test]
    fn tbl8_group_without_covering_slash24() {
        let table = RouteTable::build(&[
            route([10, 0, 0, 0], 8, hop(8)),
            route([10, 9, 9, 64], 26, hop(26)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip([10, 9, 9, 64])), Some(hop(26)));
        assert_eq!(table.lookup(ip([10, 9, 9, 127])), Some(hop(26)));
        // The rest of the group inherits the /8.
        assert_eq!(table.lookup(ip([10, 9, 9, 63])), Some(hop(8)));
        assert_eq!(table.lookup(ip([10, 9, 9, 128])), Some(hop(8)));
    }

    #[test]
    fn result_does_not_depend_on_input_order() {
        let routes = [
            route([0, 0, 0, 0], 0, hop(0)),
            route([10, 0, 0, 0], 8, hop(8)),
            route([10, 1, 0, 0], 16, hop(16)),
            route([10, 1, 1, 0], 24, hop(24)),
            route([10, 1, 1, 128], 25, hop(25)),
            route([10, 1, 1, 200], 32, hop(32)),
        ];
        let probes = [
            [1, 1, 1, 1],
            [10, 2, 0, 0],
            [10, 1, 2, 0],
            [10, 1, 1, 1],
            [10, 1, 1, 129],
            [10, 1, 1, 200],
            [10, 1, 1, 201],
        ];
        let forward = RouteTable::build(&routes).unwrap();
        let mut reversed_routes = routes;
        reversed_routes.reverse();
        let reversed = RouteTable::build(&reversed_routes).unwrap();
        let expected = [0, 8, 16, 24, 25, 32, 25].map(|port| Some(hop(port)));
        for (probe, expected) in probes.iter().zip(expected) {
            assert_eq!(forward.lookup(ip(*probe)), expected, "{probe:?}");
            assert_eq!(reversed.lookup(ip(*probe)), expected, "{probe:?}");
        }
        assert_eq!(reversed.routes(), &reversed_routes);
        assert_eq!(reversed.len(), routes.len());
    }

    #[test]
    fn next_hops_are_deduplicated() {
        let routes: Vec<Route> = (0..=255u8)
            .map(|third| route([10, 0, third, 0], 24, hop(1)))
            .collect();
        let table = RouteTable::build(&routes).unwrap();
        assert_eq!(table.next_hops.len(), 1);
        assert_eq!(table.lookup(ip([10, 0, 77, 1])), Some(hop(1)));
    }

    #[test]
    fn rejects_prefix_length_above_32() {
        let bad = route([10, 0, 0, 0], 33, hop(1));
        assert_eq!(
            RouteTable::build(&[bad]).unwrap_err(),
            RouteError::BadPrefixLength { route: bad }
        );
    }

    #[test]
    fn rejects_host_bits() {
        let bad = route([10, 0, 0, 1], 24, hop(1));
        let err = RouteTable::build(&[route([0, 0, 0, 0], 0, hop(0)), bad]).unwrap_err();
        assert_eq!(err, RouteError::HostBitsSet { route: bad });
        assert_eq!(
            err.to_string(),
            "host bits set in route 10.0.0.1/24 port 1 via 192.0.2.1"
        );
        let bad_default = route([0, 0, 0, 1], 0, hop(1));
        assert_eq!(
            RouteTable::build(&[bad_default]).unwrap_err(),
            RouteError::HostBitsSet { route: bad_default }
        );
    }

    #[test]
    fn rejects_duplicate_prefix_even_with_different_next_hop() {
        let first = route([10, 0, 0, 0], 8, hop(1));
        let second = route([10, 0, 0, 0], 8, hop(2));
        assert!(matches!(
            RouteTable::build(&[first, route([10, 0, 0, 0], 16, hop(3)), second]),
            Err(RouteError::DuplicateRoute { .. })
        ));
    }

    #[test]
    fn rejects_too_many_next_hops() {
        let routes: Vec<Route> = (0..=MAX_NEXT_HOPS as u32)
            .map(|i| Route {
                prefix: Ipv4Addr::from(i << 8),
                len: 24,
                next_hop: NextHop {
                    port: i as u16,
                    gateway: None,
                },
            })
            .collect();
        assert_eq!(
            RouteTable::build(&routes[..MAX_NEXT_HOPS])
                .unwrap()
                .next_hops
                .len(),
            MAX_NEXT_HOPS
        );
        assert_eq!(
            RouteTable::build(&routes).unwrap_err(),
            RouteError::TooManyNextHops
        );
    }

    #[test]
    fn rejects_too_many_tbl8_groups() {
        let routes: Vec<Route> = (0..=MAX_TBL8_GROUPS as u32)
            .map(|i| Route {
                prefix: Ipv4Addr::from(i << 8),
                len: 25,
                next_hop: hop(1),
            })
            .collect();
        let table = RouteTable::build(&routes[..MAX_TBL8_GROUPS]).unwrap();
        let last = u32::from(routes[MAX_TBL8_GROUPS - 1].prefix);
        assert_eq!(table.lookup(Ipv4Addr::from(last | 1)), Some(hop(1)));
        assert_eq!(table.lookup(Ipv4Addr::from(last | 128)), None);
        assert_eq!(
            RouteTable::build(&routes).unwrap_err(),
            RouteError::TooManyTbl8Groups
        );
    }

    fn naive_lookup(routes: &[Route], dst: Ipv4Addr) -> Option<NextHop> {
        routes
            .iter()
            .filter(|r| u32::from(dst) & prefix_mask(r.len) == u32::from(r.prefix))
            .max_by_key(|r| r.len)
            .map(|r| r.next_hop)
    }

    fn prefix_length() -> impl Strategy<Value = u8> {
        // Short prefixes are rare in real tables and each one rewrites millions of entries.
        prop_oneof![1 => 0..=8u8, 4 => 9..=24u8, 5 => 25..=32u8]
    }

    fn random_routes() -> impl Strategy<Value = Vec<Route>> {
        proptest::collection::vec((any::<u32>(), prefix_length(), 0..8u16), 0..=64).prop_map(
            |raw| {
                let mut seen = std::collections::HashSet::new();
                raw.into_iter()
                    .map(|(addr, len, port)| Route {
                        prefix: Ipv4Addr::from(addr & prefix_mask(len)),
                        len,
                        next_hop: hop(port),
                    })
                    .filter(|r| seen.insert((r.prefix, r.len)))
                    .collect()
            },
        )
    }

    /// Uniform addresses almost never hit a long prefix, so most probes are derived from one
    /// of the routes: inside it, just outside either edge, or with one bit flipped.
    fn probe_address(routes: &[Route], (pick, noise, kind): (usize, u32, u8)) -> Ipv4Addr {
        let Some(route) = routes.get(pick % routes.len().max(1)) else {
            return Ipv4Addr::from(noise);
        };
        let base = u32::from(route.prefix);
        let mask = prefix_mask(route.len);
        let addr = match kind % 5 {
            0 => noise,
            1 => base | (noise & !mask),
            2 => base.wrapping_sub(1),
            3 => (base | !mask).wrapping_add(1),
            _ => base ^ (1 << (noise % 32)),
        };
        Ipv4Addr::from(addr)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn lookup_matches_naive_longest_match(
            routes in random_routes(),
            probes in proptest::collection::vec((any::<usize>(), any::<u32>(), any::<u8>()), 256),
        ) {
            let table = RouteTable::build(&routes).unwrap();
            for probe in probes {
                let dst = probe_address(&routes, probe);
                prop_assert_eq!(table.lookup(dst), naive_lookup(&routes, dst), "dst {}", dst);
            }
            for route in &routes {
                prop_assert_eq!(table.lookup(route.prefix), naive_lookup(&routes, route.prefix));
            }
        }
    }
}

//! IPv6 longest-prefix match, the counterpart of [`super::route`]: a multibit trie whose cost
//! is bounded by the prefix length, not by the number of routes.
//!
//! The top 16 bits of the destination index `tbl16` directly. Prefixes of /16 or shorter are
//! expanded into every `tbl16` entry they cover; a longer prefix turns its `tbl16` entry into a
//! pointer to a 256-entry group indexed by the third byte, and so on one byte per level until
//! the byte holding the prefix's last bit, where the prefix is expanded into the entries it
//! covers (controlled prefix expansion). A lookup reads `tbl16`, then one group per byte for as
//! long as the entry it read is a pointer: the default route costs one read, a /48 five, a /64
//! seven, a /128 fifteen. As in [`super::route`], the deduplicated next-hop table is read last.
//!
//! The table is built once from the complete route list and never modified: a route change
//! builds a new table and swaps it in, so workers only ever read an immutable structure.
//! Routes are written shortest prefix first, so a longer prefix only ever overwrites shorter
//! ones and a group created for it starts as a copy of the shorter route that covered its range.
//!
//! Memory: `tbl16` is 2^16 `u32` = 256 KiB (zeroed pages from `calloc`). Each group is 1 KiB; a
//! prefix of length L > 16 creates at most ceil((L - 16) / 8) of them, fewer when it shares its
//! path with a route inserted before it: a lone /48 takes 4, a /64 under it 2 more, a /128 at
//! most 14. Groups are capped at 65,536 = 64 MiB, so no configuration can make the build
//! allocate more (it fails with [`RouteError6::TooManyGroups`] instead); a gateway's table
//! (connected /64s under one or two /48s, a default route, a few statics) takes a few dozen.
//!
//! Why not DPDK's `rte_lpm6` or `rte_fib6`: this crate has no DPDK (pure Rust, no `unsafe`,
//! tested on any machine), and both are sized for full BGP tables: a first level of 2^24
//! entries (tens of MiB whatever the table holds) and a tbl8 pool fixed when the table is
//! created. The 16-bit first stride keeps the part every lookup touches at 256 KiB, at the cost
//! of one more read than a 24-bit first stride for prefixes longer than /24. Measuring this
//! against `rte_fib6` is left to the gateway crate, which links DPDK.

use std::collections::HashMap;
use std::fmt;
use std::net::Ipv6Addr;

const TBL16_ENTRIES: usize = 1 << 16;
const GROUP_ENTRIES: usize = 256;

type Group = [u32; GROUP_ENTRIES];

/// Entry encoding shared by `tbl16` and the groups: 0 is "no route"; with the flag bit clear,
/// `n` is next hop `n - 1`; with it set, the remaining 31 bits are a group index.
const NO_ROUTE: u32 = 0;
const GROUP_FLAG: u32 = 0x8000_0000;
/// The IPv4 table's limit, so the control plane has one number to check; the encoding would
/// allow 2^31 - 1.
const MAX_NEXT_HOPS: usize = 0x7fff;
/// 64 MiB of groups.
const MAX_GROUPS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NextHop6 {
    pub port: u16,
    /// `None` for a directly connected prefix, where the destination itself is the neighbour.
    pub gateway: Option<Ipv6Addr>,
}

impl NextHop6 {
    /// The address whose MAC the frame must be sent to, i.e. what neighbour discovery has to
    /// resolve.
    #[inline]
    pub fn resolve(&self, dst: Ipv6Addr) -> Ipv6Addr {
        self.gateway.unwrap_or(dst)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route6 {
    pub prefix: Ipv6Addr,
    pub len: u8,
    pub next_hop: NextHop6,
}

impl fmt::Display for Route6 {
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
pub enum RouteError6 {
    #[error("prefix length above 128 in route {route}")]
    BadPrefixLength { route: Route6 },
    /// Rejected rather than masked, as for IPv4: a prefix with host bits is almost always a
    /// typo for a different prefix length, and silently routing the wrong range is worse than
    /// refusing.
    #[error("host bits set in route {route}")]
    HostBitsSet { route: Route6 },
    #[error("more than {MAX_NEXT_HOPS} distinct next hops")]
    TooManyNextHops,
    #[error(
        "the prefixes longer than /16 need more than {MAX_GROUPS} 256-entry groups ({} MiB)",
        (MAX_GROUPS * std::mem::size_of::<Group>()) >> 20
    )]
    TooManyGroups,
    /// Two routes for the same prefix would make the result depend on input order.
    #[error("duplicate prefix in route {route}")]
    DuplicateRoute { route: Route6 },
}

pub struct RouteTable6 {
    /// A fixed-size array rather than a slice so that indexing with the top 16 bits is provably
    /// in bounds and the lookup carries no bounds check.
    tbl16: Box<[u32; TBL16_ENTRIES]>,
    groups: Vec<Group>,
    next_hops: Vec<NextHop6>,
    routes: Vec<Route6>,
}

impl fmt::Debug for RouteTable6 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouteTable6")
            .field("routes", &self.routes.len())
            .field("next_hops", &self.next_hops.len())
            .field("groups", &self.groups.len())
            .finish_non_exhaustive()
    }
}

impl RouteTable6 {
    /// Routes are written shortest prefix first, so each write only ever overwrites less
    /// specific routes and the result does not depend on the order of `routes`.
    pub fn build(routes: &[Route6]) -> Result<Self, RouteError6> {
        for route in routes {
            if route.len > 128 {
                return Err(RouteError6::BadPrefixLength { route: *route });
            }
            if u128::from(route.prefix) & !prefix_mask(route.len) != 0 {
                return Err(RouteError6::HostBitsSet { route: *route });
            }
        }

        let mut by_length = routes.to_vec();
        by_length.sort_by_key(|route| (route.len, u128::from(route.prefix)));
        if let Some(pair) = by_length
            .windows(2)
            .find(|pair| pair[0].len == pair[1].len && pair[0].prefix == pair[1].prefix)
        {
            return Err(RouteError6::DuplicateRoute { route: pair[1] });
        }

        let Ok(mut tbl16) =
            Box::<[u32; TBL16_ENTRIES]>::try_from(vec![NO_ROUTE; TBL16_ENTRIES].into_boxed_slice())
        else {
            unreachable!("a boxed slice of TBL16_ENTRIES converts to an array of that length");
        };
        let mut groups: Vec<Group> = Vec::new();
        let mut next_hops: Vec<NextHop6> = Vec::new();
        let mut next_hop_entries: HashMap<NextHop6, u32> = HashMap::new();

        for route in &by_length {
            let entry = match next_hop_entries.get(&route.next_hop) {
                Some(&entry) => entry,
                None => {
                    if next_hops.len() >= MAX_NEXT_HOPS {
                        return Err(RouteError6::TooManyNextHops);
                    }
                    next_hops.push(route.next_hop);
                    let entry =
                        u32::try_from(next_hops.len()).map_err(|_| RouteError6::TooManyNextHops)?;
                    next_hop_entries.insert(route.next_hop, entry);
                    entry
                }
            };

            // Host bits are clear, so every range below starts aligned to its own size and
            // ends inside its array.
            let [high, low, rest @ ..] = route.prefix.octets();
            let top = usize::from(u16::from_be_bytes([high, low]));
            if route.len <= 16 {
                let covered = 1usize << (16 - route.len);
                tbl16[top..top + covered].fill(entry);
                continue;
            }

            // `rest[i]` holds bits 16 + 8i .. 24 + 8i; the prefix's last bit is in `rest[last]`.
            let last = usize::from((route.len - 17) / 8);
            let (pointer, mut group) = child_group(tbl16[top], &mut groups)?;
            tbl16[top] = pointer;
            for &octet in &rest[..last] {
                let index = usize::from(octet);
                let (pointer, child) = child_group(groups[group][index], &mut groups)?;
                groups[group][index] = pointer;
                group = child;
            }
            let first = usize::from(rest[last]);
            let covered = 1usize << (8 * (last + 3) - usize::from(route.len));
            groups[group][first..first + covered].fill(entry);
        }

        groups.shrink_to_fit();
        next_hops.shrink_to_fit();
        Ok(Self {
            tbl16,
            groups,
            next_hops,
            routes: routes.to_vec(),
        })
    }

    #[inline]
    pub fn lookup(&self, dst: Ipv6Addr) -> Option<NextHop6> {
        let [high, low, rest @ ..] = dst.octets();
        let mut entry = self.tbl16[usize::from(u16::from_be_bytes([high, low]))];
        for octet in rest {
            if entry & GROUP_FLAG == 0 {
                break;
            }
            entry = self
                .groups
                .get((entry & !GROUP_FLAG) as usize)
                .map_or(NO_ROUTE, |group| group[usize::from(octet)]);
        }
        // NO_ROUTE wraps to usize::MAX and misses, so "no route" needs no branch of its own. A
        // group pointer cannot be left over (nothing extends past the last byte), and would
        // miss too: its flag puts it beyond any next-hop index.
        self.next_hops
            .get((entry as usize).wrapping_sub(1))
            .copied()
    }

    /// The routes as given to `build`, in their original order, for the control plane to show
    /// or to derive the next table from.
    pub fn routes(&self) -> &[Route6] {
        &self.routes
    }

    pub fn len(&self) -> usize {
        self.routes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Heap bytes the table holds: `tbl16`, the groups, the next hops and the route list.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<[u32; TBL16_ENTRIES]>()
            + self.groups.capacity() * std::mem::size_of::<Group>()
            + self.next_hops.capacity() * std::mem::size_of::<NextHop6>()
            + self.routes.capacity() * std::mem::size_of::<Route6>()
    }
}

/// The group `entry` points to, and the entry that must replace it. A next hop or "no route"
/// becomes a new group filled with that value, so the group inherits whatever shorter route
/// covered its whole range.
fn child_group(entry: u32, groups: &mut Vec<Group>) -> Result<(u32, usize), RouteError6> {
    if entry & GROUP_FLAG != 0 {
        return Ok((entry, (entry & !GROUP_FLAG) as usize));
    }
    if groups.len() >= MAX_GROUPS {
        return Err(RouteError6::TooManyGroups);
    }
    groups.push([entry; GROUP_ENTRIES]);
    let group = groups.len() - 1;
    let pointer = GROUP_FLAG | u32::try_from(group).map_err(|_| RouteError6::TooManyGroups)?;
    Ok((pointer, group))
}

/// Lengths above 128 (rejected by `build` before it gets here) mask nothing.
fn prefix_mask(len: u8) -> u128 {
    u128::MAX
        .checked_shl(128u32.saturating_sub(u32::from(len)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hop(port: u16) -> NextHop6 {
        NextHop6 {
            port,
            gateway: Some(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, port)),
        }
    }

    fn ip(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    fn route(prefix: &str, len: u8, next_hop: NextHop6) -> Route6 {
        Route6 {
            prefix: ip(prefix),
            len,
            next_hop,
        }
    }

    #[test]
    fn next_hop_resolves_to_gateway_or_destination() {
        let dst = ip("2001:db8::1");
        assert_eq!(hop(1).resolve(dst), ip("fe80::1"));
        let connected = NextHop6 {
            port: 1,
            gateway: None,
        };
        assert_eq!(connected.resolve(dst), dst);
    }

    #[test]
    fn route_display() {
        assert_eq!(
            route("2001:db8:1::", 48, hop(3)).to_string(),
            "2001:db8:1::/48 port 3 via fe80::3"
        );
        let connected = NextHop6 {
            port: 0,
            gateway: None,
        };
        assert_eq!(
            route("2001:db8:1:2::", 64, connected).to_string(),
            "2001:db8:1:2::/64 port 0 connected"
        );
    }

    #[test]
    fn empty_table_has_no_route() {
        let table = RouteTable6::build(&[]).unwrap();
        assert!(table.is_empty());
        assert_eq!(table.len(), 0);
        assert_eq!(table.lookup(Ipv6Addr::UNSPECIFIED), None);
        assert_eq!(table.lookup(ip("2001:db8::1")), None);
        assert_eq!(table.lookup(Ipv6Addr::from(u128::MAX)), None);
    }

    #[test]
    fn default_route_only_matches_everything() {
        let table = RouteTable6::build(&[route("::", 0, hop(7))]).unwrap();
        assert!(table.groups.is_empty());
        for addr in [
            "::",
            "::1",
            "2001:db8::1",
            "fe80::1",
            "ffff:ffff:ffff:ffff::",
        ] {
            assert_eq!(table.lookup(ip(addr)), Some(hop(7)), "{addr}");
        }
        assert_eq!(table.lookup(Ipv6Addr::from(u128::MAX)), Some(hop(7)));
    }

    #[test]
    fn default_route_is_the_fallback_beside_longer_prefixes() {
        let table = RouteTable6::build(&[
            route("2001:db8:1::", 48, hop(48)),
            route("::", 0, hop(0)),
            route("2001:db8:1:5::", 64, hop(64)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip("2001:db8:1:5::1")), Some(hop(64)));
        assert_eq!(table.lookup(ip("2001:db8:1:6::1")), Some(hop(48)));
        // Inside groups created for the /48 and the /64, the rest inherits the default route.
        assert_eq!(table.lookup(ip("2001:db8:2::1")), Some(hop(0)));
        assert_eq!(table.lookup(ip("2001:db9::1")), Some(hop(0)));
        assert_eq!(table.lookup(ip("2001:db8::")), Some(hop(0)));
        assert_eq!(table.lookup(ip("fe80::1")), Some(hop(0)));
    }

    #[test]
    fn slash64_beside_and_inside_slash48() {
        let table = RouteTable6::build(&[
            route("2001:db8:1::", 48, hop(48)),
            route("2001:db8:1:5::", 64, hop(64)),
            route("2001:db8:2::", 64, hop(2)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip("2001:db8:1:5::1")), Some(hop(64)));
        assert_eq!(
            table.lookup(ip("2001:db8:1:5:ffff:ffff:ffff:ffff")),
            Some(hop(64))
        );
        assert_eq!(
            table.lookup(ip("2001:db8:1:4:ffff:ffff:ffff:ffff")),
            Some(hop(48))
        );
        assert_eq!(table.lookup(ip("2001:db8:1:6::")), Some(hop(48)));
        assert_eq!(table.lookup(ip("2001:db8:1:ffff::1")), Some(hop(48)));
        // The /64 next to the /48 covers only its own /64.
        assert_eq!(table.lookup(ip("2001:db8:2::1")), Some(hop(2)));
        assert_eq!(table.lookup(ip("2001:db8:2:1::1")), None);
        assert_eq!(table.lookup(ip("2001:db8:0:ffff::1")), None);
        assert_eq!(table.lookup(ip("2001:db8:3::1")), None);
    }

    #[test]
    fn host_route_matches_only_its_address() {
        let table = RouteTable6::build(&[
            route("2001:db8:1:5::", 64, hop(64)),
            route("2001:db8:1:5::42", 128, hop(128)),
        ])
        .unwrap();
        assert_eq!(table.lookup(ip("2001:db8:1:5::42")), Some(hop(128)));
        assert_eq!(table.lookup(ip("2001:db8:1:5::41")), Some(hop(64)));
        assert_eq!(table.lookup(ip("2001:db8:1:5::43")), Some(hop(64)));
        assert_eq!(table.lookup(ip("2001:db8:1:5:1::42")), Some(hop(64)));
    }

    #[test]
    fn host_route_without_covering_route() {
        let table = RouteTable6::build(&[route("2001:db8::42", 128, hop(128))]).unwrap();
        assert_eq!(table.lookup(ip("2001:db8::42")), Some(hop(128)));
        assert_eq!(table.lookup(ip("2001:db8::43")), None);
        assert_eq!(table.lookup(ip("2001:db8::")), None);
    }

    #[test]
    fn short_prefixes_expand_in_tbl16() {
        let table = RouteTable6::build(&[
            route("2000::", 3, hop(3)),
            route("2001::", 16, hop(16)),
            route("fc00::", 7, hop(7)),
        ])
        .unwrap();
        assert!(table.groups.is_empty());
        assert_eq!(table.lookup(ip("2001:db8::1")), Some(hop(16)));
        assert_eq!(table.lookup(ip("2002::1")), Some(hop(3)));
        assert_eq!(table.lookup(ip("3fff:ffff::1")), Some(hop(3)));
        assert_eq!(table.lookup(ip("4000::")), None);
        assert_eq!(table.lookup(ip("fd12:3456::1")), Some(hop(7)));
        assert_eq!(table.lookup(ip("fe80::1")), None);
    }

    /// Every prefix of one address, nested: a destination that leaves the address at bit `b`
    /// must match the longest of them no longer than `b`.
    #[test]
    fn overlapping_prefixes_match_the_longest() {
        let addr = u128::from(ip("2001:db8:aaaa:bbbb:cccc:dddd:eeee:ffff"));
        let lengths = [
            0u8, 3, 16, 17, 23, 24, 25, 32, 47, 48, 56, 63, 64, 65, 96, 120, 127, 128,
        ];
        let routes: Vec<Route6> = lengths
            .iter()
            .map(|&len| Route6 {
                prefix: Ipv6Addr::from(addr & prefix_mask(len)),
                len,
                next_hop: hop(len.into()),
            })
            .collect();
        let forward = RouteTable6::build(&routes).unwrap();
        let mut reversed_routes = routes.clone();
        reversed_routes.reverse();
        let reversed = RouteTable6::build(&reversed_routes).unwrap();

        for table in [&forward, &reversed] {
            assert_eq!(table.lookup(Ipv6Addr::from(addr)), Some(hop(128)));
            for bit in 0..128u8 {
                let dst = Ipv6Addr::from(addr ^ (1u128 << (127 - bit)));
                let longest = lengths.iter().copied().filter(|&len| len <= bit).max();
                assert_eq!(
                    table.lookup(dst),
                    longest.map(|len| hop(len.into())),
                    "{dst}"
                );
            }
        }
        assert_eq!(reversed.routes(), &reversed_routes[..]);
        assert_eq!(reversed.len(), routes.len());
    }

    /// One group per byte past the 16th, shared by routes on the same path: the number of
    /// reads a lookup makes is one more than the groups on its path.
    #[test]
    fn groups_follow_the_prefix_length() {
        let groups = |routes: &[Route6]| RouteTable6::build(routes).unwrap().groups.len();
        assert_eq!(groups(&[route("2001::", 16, hop(1))]), 0);
        assert_eq!(groups(&[route("2001:8000::", 17, hop(1))]), 1);
        assert_eq!(groups(&[route("2001:db8:1::", 48, hop(1))]), 4);
        assert_eq!(groups(&[route("2001:db8:1:5::", 64, hop(1))]), 6);
        assert_eq!(
            groups(&[
                route("2001:db8:1::", 48, hop(1)),
                route("2001:db8:1:5::", 64, hop(2)),
                route("2001:db8:1:6::", 64, hop(2)),
            ]),
            6,
            "/64s in the same /56 share every group"
        );
        assert_eq!(
            groups(&[
                route("2001:db8:1::", 48, hop(1)),
                route("2001:db8:1:5::", 64, hop(2)),
                route("2001:db8:1:105::", 64, hop(2)),
            ]),
            7,
            "a /64 in another /56 of the /48 adds the group for its eighth byte"
        );
        assert_eq!(groups(&[route("2001:db8::1", 128, hop(1))]), 14);
    }

    #[test]
    fn memory_bytes_counts_tbl16_and_groups() {
        let empty = RouteTable6::build(&[]).unwrap();
        assert_eq!(empty.memory_bytes(), 256 * 1024);
        let table = RouteTable6::build(&[route("2001:db8:1::", 48, hop(1))]).unwrap();
        assert_eq!(
            table.memory_bytes(),
            256 * 1024 + 4 * 1024 + std::mem::size_of::<NextHop6>() + std::mem::size_of::<Route6>()
        );
    }

    #[test]
    fn next_hops_are_deduplicated() {
        let routes: Vec<Route6> = (0..=255u16)
            .map(|i| Route6 {
                prefix: Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 0),
                len: 64,
                next_hop: hop(1),
            })
            .collect();
        let table = RouteTable6::build(&routes).unwrap();
        assert_eq!(table.next_hops.len(), 1);
        assert_eq!(table.lookup(ip("2001:db8:77::1")), Some(hop(1)));
    }

    #[test]
    fn rejects_prefix_length_above_128() {
        let bad = route("2001:db8::", 129, hop(1));
        let err = RouteTable6::build(&[route("::", 0, hop(0)), bad]).unwrap_err();
        assert_eq!(err, RouteError6::BadPrefixLength { route: bad });
        assert_eq!(
            err.to_string(),
            "prefix length above 128 in route 2001:db8::/129 port 1 via fe80::1"
        );
        let worst = route("2001:db8::", u8::MAX, hop(1));
        assert_eq!(
            RouteTable6::build(&[worst]).unwrap_err(),
            RouteError6::BadPrefixLength { route: worst }
        );
    }

    #[test]
    fn rejects_host_bits() {
        let bad = route("2001:db8:1::1", 64, hop(1));
        let err = RouteTable6::build(&[route("::", 0, hop(0)), bad]).unwrap_err();
        assert_eq!(err, RouteError6::HostBitsSet { route: bad });
        assert_eq!(
            err.to_string(),
            "host bits set in route 2001:db8:1::1/64 port 1 via fe80::1"
        );
        let bad_default = route("::1", 0, hop(1));
        assert_eq!(
            RouteTable6::build(&[bad_default]).unwrap_err(),
            RouteError6::HostBitsSet { route: bad_default }
        );
        let bad_short = route("2001:db8::", 16, hop(1));
        assert_eq!(
            RouteTable6::build(&[bad_short]).unwrap_err(),
            RouteError6::HostBitsSet { route: bad_short }
        );
    }

    #[test]
    fn rejects_duplicate_prefix_even_with_different_next_hop() {
        let first = route("2001:db8::", 32, hop(1));
        let second = route("2001:db8::", 32, hop(2));
        assert!(matches!(
            RouteTable6::build(&[first, route("2001:db8::", 48, hop(3)), second]),
            Err(RouteError6::DuplicateRoute { .. })
        ));
    }

    #[test]
    fn rejects_too_many_next_hops() {
        let routes: Vec<Route6> = (0..=MAX_NEXT_HOPS as u128)
            .map(|i| Route6 {
                prefix: Ipv6Addr::from(i << 112),
                len: 16,
                next_hop: NextHop6 {
                    port: i as u16,
                    gateway: None,
                },
            })
            .collect();
        assert_eq!(
            RouteTable6::build(&routes[..MAX_NEXT_HOPS])
                .unwrap()
                .next_hops
                .len(),
            MAX_NEXT_HOPS
        );
        let err = RouteTable6::build(&routes).unwrap_err();
        assert_eq!(err, RouteError6::TooManyNextHops);
        assert_eq!(err.to_string(), "more than 32767 distinct next hops");
    }

    /// Builds 64 MiB of groups, then asks for one more.
    #[test]
    fn rejects_too_many_groups() {
        // A /24 under each of the 65,536 /16s: one group each.
        let mut routes: Vec<Route6> = (0..MAX_GROUPS as u128)
            .map(|i| Route6 {
                prefix: Ipv6Addr::from(i << 112),
                len: 24,
                next_hop: hop(1),
            })
            .collect();
        let table = RouteTable6::build(&routes).unwrap();
        assert_eq!(table.groups.len(), MAX_GROUPS);
        assert_eq!(table.lookup(ip("ffff:ab::1")), Some(hop(1)));
        assert_eq!(table.lookup(ip("ffff:100::1")), None);
        drop(table);

        // 0:1::/32 needs a group under ::/24's entry.
        routes.push(route("0:1::", 32, hop(2)));
        let err = RouteTable6::build(&routes).unwrap_err();
        assert_eq!(err, RouteError6::TooManyGroups);
        assert_eq!(
            err.to_string(),
            "the prefixes longer than /16 need more than 65536 256-entry groups (64 MiB)"
        );
    }

    fn naive_lookup(routes: &[Route6], dst: Ipv6Addr) -> Option<NextHop6> {
        routes
            .iter()
            .filter(|r| u128::from(dst) & prefix_mask(r.len) == u128::from(r.prefix))
            .max_by_key(|r| r.len)
            .map(|r| r.next_hop)
    }

    fn prefix_length() -> impl Strategy<Value = u8> {
        prop_oneof![
            1 => 0..=16u8,
            3 => 17..=64u8,
            2 => 65..=128u8,
            // Stride boundaries and the lengths real tables use.
            3 => prop::sample::select(vec![16u8, 17, 24, 25, 32, 48, 56, 63, 64, 65, 127, 128]),
        ]
    }

    /// Independent random prefixes would share nothing past their first few bits, so each
    /// route copies a random number of leading bits from one of at most three base addresses
    /// and takes the rest at random: routes nest in and sit beside each other at every depth.
    fn random_routes() -> impl Strategy<Value = Vec<Route6>> {
        (
            proptest::collection::vec(any::<u128>(), 1..=3),
            proptest::collection::vec(
                (
                    any::<prop::sample::Index>(),
                    0..=128u8,
                    any::<u128>(),
                    prefix_length(),
                    0..8u16,
                ),
                0..=48,
            ),
        )
            .prop_map(|(bases, raw)| {
                let mut seen = std::collections::HashSet::new();
                raw.into_iter()
                    .map(|(base, shared, noise, len, port)| {
                        let shared_mask = prefix_mask(shared);
                        let addr = (*base.get(&bases) & shared_mask) | (noise & !shared_mask);
                        Route6 {
                            prefix: Ipv6Addr::from(addr & prefix_mask(len)),
                            len,
                            next_hop: hop(port),
                        }
                    })
                    .filter(|r| seen.insert((r.prefix, r.len)))
                    .collect()
            })
    }

    /// Uniform addresses almost never hit a long prefix, so most probes are derived from one
    /// of the routes: inside it, just outside either edge, or with one bit flipped.
    fn probe_address(routes: &[Route6], (pick, noise, kind): (usize, u128, u8)) -> Ipv6Addr {
        let Some(route) = routes.get(pick % routes.len().max(1)) else {
            return Ipv6Addr::from(noise);
        };
        let base = u128::from(route.prefix);
        let mask = prefix_mask(route.len);
        let addr = match kind % 5 {
            0 => noise,
            1 => base | (noise & !mask),
            2 => base.wrapping_sub(1),
            3 => (base | !mask).wrapping_add(1),
            _ => base ^ (1 << (noise % 128)),
        };
        Ipv6Addr::from(addr)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn lookup_matches_naive_longest_match(
            routes in random_routes(),
            probes in proptest::collection::vec((any::<usize>(), any::<u128>(), any::<u8>()), 256),
        ) {
            let table = RouteTable6::build(&routes).unwrap();
            for probe in probes {
                let dst = probe_address(&routes, probe);
                prop_assert_eq!(table.lookup(dst), naive_lookup(&routes, dst), "dst {}", dst);
            }
            for route in &routes {
                let last = Ipv6Addr::from(u128::from(route.prefix) | !prefix_mask(route.len));
                for dst in [route.prefix, last] {
                    prop_assert_eq!(table.lookup(dst), naive_lookup(&routes, dst), "dst {}", dst);
                }
            }
        }
    }
}

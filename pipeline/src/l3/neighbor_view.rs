//! The read-only neighbour map workers consult per packet. The control thread owns the ARP
//! and Neighbor Discovery state machines ([`crate::l3::neigh::NeighborTable`]) and publishes a
//! fresh view whenever an answer changes, so workers never write neighbour state and never
//! lock. IPv4 and IPv6 neighbours are two maps side by side: an IPv4 lookup reads only its own.
//! A third map, from a MAC to the IPv4 neighbour that has it, lets the features (QoS, the
//! meter, parental control) treat a dual-stack host's IPv6 traffic as the IPv4 host's. A MAC
//! with several IPv4 neighbours (a Wi-Fi extender that puts its clients behind its own MAC,
//! a host with two addresses, one MAC on two VLANs) is left out of it: which host its IPv6
//! belongs to cannot be told.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::EthernetAddress;

/// Address -> MAC maps, built once, then only read.
#[derive(Clone, Debug, Default)]
pub struct NeighborView {
    v4: AddrMap<Ipv4Addr>,
    /// Link-local addresses scoped by port (`crate::pipeline::local::ipv6::scoped`).
    v6: AddrMap<Ipv6Addr>,
    /// A MAC's IPv4 neighbour, for MACs that have exactly one.
    v4_by_mac: AddrMap<EthernetAddress, Ipv4Addr>,
}

impl NeighborView {
    pub fn new(entries: impl IntoIterator<Item = (Ipv4Addr, EthernetAddress)>) -> Self {
        let v4 = AddrMap::new(entries);
        let mut by_mac: Vec<(EthernetAddress, Ipv4Addr)> =
            v4.iter().map(|(ip, mac)| (mac, ip)).collect();
        by_mac.sort_unstable();
        let alone = |i: usize| {
            let mac = by_mac[i].0;
            (i == 0 || by_mac[i - 1].0 != mac) && by_mac.get(i + 1).is_none_or(|next| next.0 != mac)
        };
        let unambiguous: Vec<_> = (0..by_mac.len())
            .filter(|&i| alone(i))
            .map(|i| by_mac[i])
            .collect();
        NeighborView {
            v4,
            v6: AddrMap::default(),
            v4_by_mac: AddrMap::new(unambiguous),
        }
    }

    /// The view with these IPv6 neighbours.
    pub fn with_ipv6(
        mut self,
        entries: impl IntoIterator<Item = (Ipv6Addr, EthernetAddress)>,
    ) -> Self {
        self.v6 = AddrMap::new(entries);
        self
    }

    #[inline]
    pub fn get(&self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        self.v4.get(ip)
    }

    #[inline]
    pub fn get6(&self, ip: Ipv6Addr) -> Option<EthernetAddress> {
        self.v6.get(ip)
    }

    /// The IPv4 neighbour with this MAC, if it is the only one.
    #[inline]
    pub fn ipv4_of_mac(&self, mac: EthernetAddress) -> Option<Ipv4Addr> {
        self.v4_by_mac.get(mac)
    }

    /// IPv4 neighbours.
    pub fn len(&self) -> usize {
        self.v4.len
    }

    /// Every IPv4 neighbour and its MAC, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Ipv4Addr, EthernetAddress)> + '_ {
        self.v4.iter()
    }

    /// Every IPv6 neighbour (link-local ones scoped by port) and its MAC.
    pub fn iter6(&self) -> impl Iterator<Item = (Ipv6Addr, EthernetAddress)> + '_ {
        self.v6.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.v4.len == 0 && self.v6.len == 0
    }
}

/// An address a map is keyed by, with the hash that places it.
trait ViewKey: Copy + Eq {
    fn home_hash(&self) -> u32;
}

impl ViewKey for Ipv4Addr {
    #[inline]
    fn home_hash(&self) -> u32 {
        // Fibonacci hashing: spreads neighbouring addresses across the table.
        u32::from(*self).wrapping_mul(0x9E37_79B9) >> 8
    }
}

impl ViewKey for Ipv6Addr {
    #[inline]
    fn home_hash(&self) -> u32 {
        // Interface identifiers vary in the low bits; the prefix (and a link-local's port)
        // in the high ones.
        let bits = u128::from(*self);
        let folded = (bits as u64) ^ ((bits >> 64) as u64).rotate_left(17);
        (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32
    }
}

impl ViewKey for EthernetAddress {
    #[inline]
    fn home_hash(&self) -> u32 {
        // The low three bytes are the device's; the high three its vendor's.
        let [a, b, c, d, e, f] = self.0;
        let bits = u64::from_be_bytes([0, 0, a, b, c, d, e, f]);
        (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as u32
    }
}

/// One open-addressed map from an address to another (a neighbour's MAC, by default), at
/// most half full.
#[derive(Clone, Debug)]
struct AddrMap<A, V = EthernetAddress> {
    slots: Vec<Option<(A, V)>>,
    mask: usize,
    len: usize,
}

impl<A: ViewKey, V: Copy> Default for AddrMap<A, V> {
    fn default() -> Self {
        Self::new(std::iter::empty())
    }
}

impl<A: ViewKey, V: Copy> AddrMap<A, V> {
    fn new(entries: impl IntoIterator<Item = (A, V)>) -> Self {
        let entries: Vec<_> = entries.into_iter().collect();
        // At most half full, so probes stay short.
        let size = (entries.len() * 2).max(16).next_power_of_two();
        let mut map = AddrMap {
            slots: vec![None; size],
            mask: size - 1,
            len: 0,
        };
        for (ip, mac) in entries {
            let mut slot = map.home(ip);
            loop {
                match &mut map.slots[slot] {
                    Some((existing, old_mac)) if *existing == ip => {
                        *old_mac = mac;
                        break;
                    }
                    Some(_) => slot = (slot + 1) & map.mask,
                    empty @ None => {
                        *empty = Some((ip, mac));
                        map.len += 1;
                        break;
                    }
                }
            }
        }
        map
    }

    #[inline]
    fn home(&self, ip: A) -> usize {
        ip.home_hash() as usize & self.mask
    }

    #[inline]
    fn get(&self, ip: A) -> Option<V> {
        let mut slot = self.home(ip);
        loop {
            match self.slots[slot] {
                Some((key, value)) if key == ip => return Some(value),
                Some(_) => slot = (slot + 1) & self.mask,
                None => return None,
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (A, V)> + '_ {
        self.slots.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_it_was_built_with_and_nothing_else() {
        let entries: Vec<_> = (0..100u32)
            .map(|i| {
                let ip = Ipv4Addr::from(0x0a00_0000 + i * 7);
                (ip, EthernetAddress([2, 0, 0, 0, 0, i as u8]))
            })
            .collect();
        let view = NeighborView::new(entries.clone());
        assert_eq!(view.len(), 100);
        for (ip, mac) in entries {
            assert_eq!(view.get(ip), Some(mac));
        }
        assert_eq!(view.get(Ipv4Addr::new(10, 0, 0, 1)), None);
        assert_eq!(NeighborView::default().get(Ipv4Addr::new(1, 2, 3, 4)), None);
    }

    #[test]
    fn ipv6_neighbours_are_a_map_of_their_own() {
        let entries: Vec<_> = (0..100u16)
            .map(|i| {
                let ip = Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0, 0, 0, i);
                (ip, EthernetAddress([2, 0, 0, 0, 1, i as u8]))
            })
            .collect();
        let view = NeighborView::new([(Ipv4Addr::new(10, 0, 0, 1), EthernetAddress([9; 6]))])
            .with_ipv6(entries.clone());
        for (ip, mac) in entries {
            assert_eq!(view.get6(ip), Some(mac));
        }
        assert_eq!(
            view.get6(Ipv6Addr::new(0x2001, 0xdb8, 11, 0, 0, 0, 0, 1)),
            None
        );
        assert_eq!((view.len(), view.iter6().count()), (1, 100));
        assert_eq!(
            view.get(Ipv4Addr::new(10, 0, 0, 1)),
            Some(EthernetAddress([9; 6]))
        );
    }

    #[test]
    fn a_mac_gives_its_ipv4_neighbour_if_it_has_only_one() {
        let (extender, laptop, tablet) = (
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            EthernetAddress([4; 6]),
            EthernetAddress([5; 6]),
        );
        let view = NeighborView::new([
            (Ipv4Addr::new(10, 0, 0, 9), extender),
            (Ipv4Addr::new(10, 0, 0, 3), laptop),
            (Ipv4Addr::new(10, 0, 0, 7), extender),
            (Ipv4Addr::new(10, 0, 0, 8), extender),
            (Ipv4Addr::new(10, 0, 0, 4), tablet),
        ]);
        assert_eq!(
            view.ipv4_of_mac(extender),
            None,
            "three hosts behind one MAC"
        );
        assert_eq!(view.ipv4_of_mac(laptop), Some(Ipv4Addr::new(10, 0, 0, 3)));
        assert_eq!(view.ipv4_of_mac(tablet), Some(Ipv4Addr::new(10, 0, 0, 4)));
        assert_eq!(view.ipv4_of_mac(EthernetAddress([6; 6])), None);
    }

    #[test]
    fn a_later_entry_for_the_same_ip_wins() {
        let ip = Ipv4Addr::new(10, 0, 0, 2);
        let view =
            NeighborView::new([(ip, EthernetAddress([2; 6])), (ip, EthernetAddress([3; 6]))]);
        assert_eq!(view.len(), 1);
        assert_eq!(view.get(ip), Some(EthernetAddress([3; 6])));
    }
}

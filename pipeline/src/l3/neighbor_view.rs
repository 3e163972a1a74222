//! The read-only neighbour map workers consult per packet. The control thread owns the ARP
//! state machine ([`crate::l3::neigh::NeighborTable`]) and publishes a fresh view whenever an
//! answer changes, so workers never write neighbour state and never lock.

use std::net::Ipv4Addr;

use crate::wire::EthernetAddress;

/// An open-addressed IPv4 -> MAC map, built once, then only read.
#[derive(Clone, Debug)]
pub struct NeighborView {
    slots: Vec<Option<(Ipv4Addr, EthernetAddress)>>,
    mask: usize,
    len: usize,
}

impl Default for NeighborView {
    fn default() -> Self {
        Self::new(std::iter::empty())
    }
}

impl NeighborView {
    pub fn new(entries: impl IntoIterator<Item = (Ipv4Addr, EthernetAddress)>) -> Self {
        let entries: Vec<_> = entries.into_iter().collect();
        // At most half full, so probes stay short.
        let size = (entries.len() * 2).max(16).next_power_of_two();
        let mut view = NeighborView {
            slots: vec![None; size],
            mask: size - 1,
            len: 0,
        };
        for (ip, mac) in entries {
            let mut slot = view.home(ip);
            loop {
                match &mut view.slots[slot] {
                    Some((existing, old_mac)) if *existing == ip => {
                        *old_mac = mac;
                        break;
                    }
                    Some(_) => slot = (slot + 1) & view.mask,
                    empty @ None => {
                        *empty = Some((ip, mac));
                        view.len += 1;
                        break;
                    }
                }
            }
        }
        view
    }

    #[inline]
    fn home(&self, ip: Ipv4Addr) -> usize {
        // Fibonacci hashing: spreads neighbouring addresses across the table.
        (u32::from(ip).wrapping_mul(0x9E37_79B9) >> 8) as usize & self.mask
    }

    #[inline]
    pub fn get(&self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        let mut slot = self.home(ip);
        loop {
            match self.slots[slot] {
                Some((key, mac)) if key == ip => return Some(mac),
                Some(_) => slot = (slot + 1) & self.mask,
                None => return None,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Every neighbour and its MAC, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Ipv4Addr, EthernetAddress)> + '_ {
        self.slots.iter().flatten().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
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
    fn a_later_entry_for_the_same_ip_wins() {
        let ip = Ipv4Addr::new(10, 0, 0, 2);
        let view =
            NeighborView::new([(ip, EthernetAddress([2; 6])), (ip, EthernetAddress([3; 6]))]);
        assert_eq!(view.len(), 1);
        assert_eq!(view.get(ip), Some(EthernetAddress([3; 6])));
    }
}

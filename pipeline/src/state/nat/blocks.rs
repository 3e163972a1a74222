//! Port-block allocation (`nat.port_block_size`): an internal host's external ports come from
//! blocks of consecutive slots on its paired address, which it holds while any of its
//! mappings uses one of their ports. The NAT log then says one line per block (RFC 8158's
//! port block allocation and de-allocation events) instead of one per mapping, which is what
//! lets a CGNAT keep its logs: a host's thousand connections are one or two lines.
//!
//! A block is shared by the three protocols (TCP, UDP and ICMP ids): whoever holds a block
//! holds its port numbers in all three, so a log line names a host, an address and a port
//! range, as RFC 8158's record does. A host holds at most `blocks_per_host` blocks; a new
//! mapping finds a free port in one of them, else takes a new block.
//!
//! Slots are the worker's ports in port order ([`super::ports`]). Blocks are `size` slots
//! (a multiple of 64, so a block is whole words of the pool's bitmaps) from slot 0; the last
//! block of an address may be shorter. Everything is allocated by [`PortBlocks::new`]; the
//! per-host table is a [`HostSlots`], sized so that it is at most half full even with every
//! block held by a different host.

use std::net::Ipv4Addr;
use std::ops::Range;

use crate::state::hosts::{HostEntry, HostSlots};

/// The most blocks one host may hold on a worker: `nat.host_ports / nat.port_block_size`,
/// rounded up, may not exceed it.
pub const MAX_BLOCKS_PER_HOST: usize = 16;

/// Blocks are whole words of the pool's bitmaps.
pub const BLOCK_ALIGN: u32 = 64;

const NO_BLOCK: u32 = u32::MAX;

/// How many blocks of `size` ports a host may hold for its limit of `host_ports` (rounded
/// up, so a host can always use all of its limit).
pub fn blocks_per_host(host_ports: u32, size: u32) -> usize {
    host_ports.div_ceil(size.max(1)).max(1) as usize
}

/// Why a host got no new block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRefusal {
    /// The host holds `blocks_per_host` blocks already.
    HostLimit,
    /// Every block of the address is held (or, most unlikely, the host finds no slot in the
    /// per-host table near its home).
    Exhausted,
    /// The block is another host's (a restored mapping that disagrees with the table).
    Conflict,
}

/// The blocks one host holds.
#[derive(Clone, Copy, Debug)]
struct HostBlocks {
    host: u32,
    /// `count` block ids, then [`NO_BLOCK`].
    blocks: [u32; MAX_BLOCKS_PER_HOST],
    /// 0: the slot is vacant.
    count: u8,
}

impl HostEntry for HostBlocks {
    const VACANT: HostBlocks = HostBlocks {
        host: 0,
        blocks: [NO_BLOCK; MAX_BLOCKS_PER_HOST],
        count: 0,
    };

    fn host(&self) -> u32 {
        self.host
    }

    fn is_vacant(&self) -> bool {
        self.count == 0
    }
}

/// One worker's blocks over its external addresses, and which host holds each.
#[derive(Debug)]
pub struct PortBlocks {
    size: u32,
    slots: u32,
    per_address: u32,
    blocks_per_host: usize,
    /// Per block (address-major): its holder, meaningful while it is held.
    holder: Vec<u32>,
    held: Vec<bool>,
    held_count: usize,
    /// Mappings (any protocol) using the block's ports.
    mappings: Vec<u32>,
    /// Per block: where the next search for a free port in it starts, so that a port a
    /// mapping just gave back is reused as late as the block allows.
    cursor: Vec<u32>,
    /// Per address: where the next search for a free block starts.
    next_block: Vec<u32>,
    hosts: HostSlots<HostBlocks>,
}

impl PortBlocks {
    /// `size` slots per block (a positive multiple of [`BLOCK_ALIGN`]) over `slots` slots
    /// per address, for `addresses` addresses; each host holds at most `blocks_per_host`
    /// (1 to [`MAX_BLOCKS_PER_HOST`]). Allocates: at set-up.
    pub fn new(size: u32, slots: u32, addresses: usize, blocks_per_host: usize) -> PortBlocks {
        debug_assert!(size > 0 && size.is_multiple_of(BLOCK_ALIGN));
        let size = size.max(BLOCK_ALIGN);
        let per_address = slots.div_ceil(size).max(1);
        let blocks = per_address as usize * addresses.max(1);
        PortBlocks {
            size,
            slots,
            per_address,
            blocks_per_host: blocks_per_host.clamp(1, MAX_BLOCKS_PER_HOST),
            holder: vec![0; blocks],
            held: vec![false; blocks],
            held_count: 0,
            mappings: vec![0; blocks],
            cursor: vec![0; blocks],
            next_block: vec![0; addresses.max(1)],
            // Every host holds a block: at most one host per block.
            hosts: HostSlots::new(blocks),
        }
    }

    /// Blocks held now.
    pub fn held_count(&self) -> usize {
        self.held_count
    }

    /// Blocks over every address.
    pub fn count(&self) -> u32 {
        self.held.len() as u32
    }

    /// The block holding `slot` of `address`.
    pub fn block_of(&self, address: usize, slot: u32) -> u32 {
        address as u32 * self.per_address + slot / self.size
    }

    /// The address (its index) a block is on.
    pub fn address_of(&self, block: u32) -> usize {
        (block / self.per_address) as usize
    }

    /// The slots of `block`.
    pub fn slots_of(&self, block: u32) -> Range<u32> {
        let first = block % self.per_address * self.size;
        first..(first + self.size).min(self.slots)
    }

    /// Where a search for a free slot in `block` starts (a slot of the block).
    pub fn cursor(&self, block: u32) -> u32 {
        self.slots_of(block).start + self.cursor[block as usize]
    }

    /// The search in `block` found `slot`: the next starts after it.
    pub fn advance(&mut self, block: u32, slot: u32) {
        let slots = self.slots_of(block);
        let next = slot + 1 - slots.start;
        self.cursor[block as usize] = if next < slots.end - slots.start {
            next
        } else {
            0
        };
    }

    /// The blocks `host` holds now.
    pub fn blocks_of(&self, host: Ipv4Addr) -> &[u32] {
        match self.hosts.find(u32::from(host)) {
            Ok(slot) => {
                let entry = &self.hosts[slot];
                &entry.blocks[..usize::from(entry.count)]
            }
            Err(_) => &[],
        }
    }

    /// Who holds `block`, if anyone.
    pub fn holder(&self, block: u32) -> Option<Ipv4Addr> {
        let block = block as usize;
        self.held[block].then(|| Ipv4Addr::from(self.holder[block]))
    }

    /// Hands `host` a free block of `address`, with no mapping yet: the caller takes a port
    /// in it and [`hold`](Self::hold)s it, or gives it back with [`abandon`](Self::abandon).
    pub fn claim(&mut self, host: Ipv4Addr, address: usize) -> Result<u32, BlockRefusal> {
        if self.blocks_of(host).len() >= self.blocks_per_host {
            return Err(BlockRefusal::HostLimit);
        }
        let first = address as u32 * self.per_address;
        let start = self.next_block[address];
        let block = (0..self.per_address)
            .map(|step| first + (start + step) % self.per_address)
            .find(|&block| !self.held[block as usize])
            .ok_or(BlockRefusal::Exhausted)?;
        self.give(host, block)?;
        self.next_block[address] = (block - first + 1) % self.per_address;
        Ok(block)
    }

    /// A restored mapping's block: `host`'s already, or a free one it now holds.
    pub fn adopt(&mut self, host: Ipv4Addr, block: u32) -> Result<(), BlockRefusal> {
        match self.holder(block) {
            Some(holder) if holder == host => Ok(()),
            Some(_) => Err(BlockRefusal::Conflict),
            None if self.blocks_of(host).len() >= self.blocks_per_host => {
                Err(BlockRefusal::HostLimit)
            }
            None => self.give(host, block),
        }
    }

    /// One more mapping in `block`.
    pub fn hold(&mut self, block: u32) {
        self.mappings[block as usize] += 1;
    }

    /// One mapping fewer in `block`; true when that was its last and the block is free again.
    pub fn release(&mut self, block: u32) -> bool {
        let mappings = &mut self.mappings[block as usize];
        *mappings = mappings.saturating_sub(1);
        if *mappings > 0 {
            return false;
        }
        self.take_back(block);
        true
    }

    /// Gives back a block claimed for a mapping that found no port in it.
    pub fn abandon(&mut self, block: u32) {
        if self.mappings[block as usize] == 0 {
            self.take_back(block);
        }
    }

    fn give(&mut self, host: Ipv4Addr, block: u32) -> Result<(), BlockRefusal> {
        let host = u32::from(host);
        let slot = match self.hosts.find(host) {
            Ok(slot) => slot,
            Err(Some(vacant)) => {
                self.hosts[vacant].host = host;
                vacant
            }
            Err(None) => return Err(BlockRefusal::Exhausted),
        };
        let entry = &mut self.hosts[slot];
        entry.blocks[usize::from(entry.count)] = block;
        entry.count += 1;
        self.holder[block as usize] = host;
        self.held[block as usize] = true;
        self.held_count += 1;
        self.mappings[block as usize] = 0;
        Ok(())
    }

    fn take_back(&mut self, block: u32) {
        let index = block as usize;
        if !self.held[index] {
            return;
        }
        self.held[index] = false;
        self.held_count -= 1;
        let Ok(slot) = self.hosts.find(self.holder[index]) else {
            return;
        };
        let entry = &mut self.hosts[slot];
        let count = usize::from(entry.count);
        if let Some(at) = entry.blocks[..count].iter().position(|&b| b == block) {
            entry.blocks.copy_within(at + 1..count, at);
            entry.blocks[count - 1] = NO_BLOCK;
            entry.count -= 1;
        }
        if entry.count == 0 {
            self.hosts.remove(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn host(n: u32) -> Ipv4Addr {
        Ipv4Addr::from(0x0a00_0000 + n)
    }

    #[test]
    fn blocks_cover_the_slots_and_the_last_may_be_short() {
        let blocks = PortBlocks::new(128, 300, 2, 4);
        assert_eq!(blocks.slots_of(0), 0..128);
        assert_eq!(blocks.slots_of(2), 256..300);
        assert_eq!(blocks.slots_of(3), 0..128);
        assert_eq!(blocks.address_of(3), 1);
        assert_eq!(blocks.block_of(1, 299), 5);
    }

    #[test]
    fn a_host_takes_blocks_up_to_its_limit_and_gives_them_back() {
        let mut blocks = PortBlocks::new(64, 64 * 4, 1, 2);
        let a = blocks.claim(host(1), 0).unwrap();
        blocks.hold(a);
        let b = blocks.claim(host(1), 0).unwrap();
        blocks.hold(b);
        assert_ne!(a, b);
        assert_eq!(blocks.blocks_of(host(1)), [a, b]);
        assert_eq!(blocks.claim(host(1), 0), Err(BlockRefusal::HostLimit));
        let c = blocks.claim(host(2), 0).unwrap();
        blocks.hold(c);
        let d = blocks.claim(host(3), 0).unwrap();
        blocks.abandon(d);
        assert_eq!(blocks.holder(d), None);
        blocks.hold(a);
        assert!(!blocks.release(a));
        assert!(blocks.release(a));
        assert_eq!(blocks.blocks_of(host(1)), [b]);
        assert_eq!(blocks.holder(a), None);
        assert_eq!(blocks.adopt(host(2), b), Err(BlockRefusal::Conflict));
        assert_eq!(blocks.adopt(host(2), c), Ok(()));
    }

    #[test]
    fn a_full_address_refuses_new_blocks_and_freed_ones_come_last() {
        let mut blocks = PortBlocks::new(64, 64 * 3, 1, 1);
        let held: Vec<u32> = (0..3)
            .map(|h| {
                let block = blocks.claim(host(h), 0).unwrap();
                blocks.hold(block);
                block
            })
            .collect();
        assert_eq!(blocks.claim(host(9), 0), Err(BlockRefusal::Exhausted));
        assert!(blocks.release(held[0]));
        assert_eq!(blocks.claim(host(9), 0), Ok(held[0]));
    }

    #[test]
    fn the_cursor_moves_past_the_last_slot_found_and_wraps() {
        let mut blocks = PortBlocks::new(64, 200, 1, 1);
        assert_eq!(blocks.cursor(3), 192);
        blocks.advance(3, 195);
        assert_eq!(blocks.cursor(3), 196);
        blocks.advance(3, 199);
        assert_eq!(blocks.cursor(3), 192);
    }

    proptest! {
        /// Against a model: every held block has one holder, each host's list is exactly the
        /// blocks it holds, and no host exceeds its limit, through any claims and releases.
        #[test]
        fn agrees_with_a_model(ops in proptest::collection::vec((0..24u32, any::<bool>()), 0..300)) {
            let mut blocks = PortBlocks::new(64, 64 * 20, 2, 3);
            let mut model: HashMap<u32, Vec<u32>> = HashMap::new();
            for (h, claim) in ops {
                if claim {
                    let address = (h % 2) as usize;
                    match blocks.claim(host(h), address) {
                        Ok(block) => {
                            blocks.hold(block);
                            model.entry(h).or_default().push(block);
                        }
                        Err(BlockRefusal::HostLimit) => {
                            prop_assert_eq!(model.get(&h).map_or(0, Vec::len), 3)
                        }
                        Err(refusal) => {
                            let held_here = model
                                .values()
                                .flatten()
                                .filter(|&&b| blocks.address_of(b) == address)
                                .count();
                            prop_assert_eq!(refusal, BlockRefusal::Exhausted);
                            prop_assert_eq!(held_here, 20);
                        }
                    }
                } else if let Some(block) = model.get_mut(&h).and_then(Vec::pop) {
                    prop_assert!(blocks.release(block));
                }
                prop_assert_eq!(blocks.held_count(), model.values().map(Vec::len).sum::<usize>());
                for (&h, held) in &model {
                    let mut listed = blocks.blocks_of(host(h)).to_vec();
                    let mut expected = held.clone();
                    listed.sort_unstable();
                    expected.sort_unstable();
                    prop_assert_eq!(listed, expected);
                    for &block in held {
                        prop_assert_eq!(blocks.holder(block), Some(host(h)));
                    }
                }
            }
        }
    }
}

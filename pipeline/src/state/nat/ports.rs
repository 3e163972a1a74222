//! Which worker owns which external port, and each worker's pool of NAT bindings.
//!
//! # Ownership
//!
//! A reply from the WAN is steered to a worker by its destination port alone: a NIC flow rule
//! per class matches `dst_port & mask == class` and sends it to that worker's queue
//! ([`Ownership::port_owner`]). So a worker may only hand out ports it owns, and then every
//! reply lands on the worker that holds the binding, with no state shared between workers.
//! Outbound traffic is steered by internal host ([`Ownership::host_owner`]), so one worker
//! sees all of a host's flows, which is what lets endpoint-independent mapping and paired
//! pooling be per-worker decisions.
//!
//! # Pool layout and memory
//!
//! Only ports that are in the configured range and owned by the worker get a *slot*; slots
//! are numbered in port order, and the port/slot conversion is arithmetic (ownership is
//! periodic in `mask + 1`), so no table is needed for it. With `n` slots:
//!
//! * Per (protocol, external address): a bitmap of free slots, `n / 8` bytes, plus a summary
//!   bitmap with one bit per bitmap word (`n / 512` bytes) so that finding the next free slot
//!   reads a bounded number of words whatever the occupancy (at most `2 * n / 4096 + 3`, 35
//!   for a full 16-bit range), and a rotating cursor. With the default range, one worker and
//!   one address that is 3 x 8 KiB; a bitmap rather than a per-port free list keeps large
//!   address pools cheap (64 addresses over 4 workers: 3 x 64 x 2 KiB = 384 KiB per worker).
//! * Per protocol: a bitmap of reserved (port-forwarded) slots, `n / 8` bytes.
//! * Per binding of `binding_capacity`: a 16-byte binding entry, a 4-byte free-stack entry and
//!   a 4-byte slot in each of two open-addressing indexes (by internal endpoint, by external
//!   endpoint), each with `next_power_of_two(2 * binding_capacity)` slots so that they stay
//!   at most half full. That is 36 bytes per binding when `binding_capacity` is a power of
//!   two, up to 52 bytes otherwise: a million bindings cost 36 MB.
//!
//! Everything is allocated by [`NatPool::new`] (and [`NatPool::with_host_limit`]); allocate,
//! release and the lookups never allocate, and each is O(1) (expected, for the hashed
//! indexes).
//!
//! # Per-host limit
//!
//! With [`NatPool::with_host_limit`], an internal host holds at most that many bindings (so
//! external ports, whatever the protocol) on this worker; a new one beyond is refused with
//! [`AllocError::HostLimit`], while its existing bindings keep serving new flows (EIM). A host
//! spraying from ever-new source ports then takes its share, not the pool. The count is a
//! fixed [`HostCounts`] table; a host that finds no room in it is not limited (fail open).

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;
use std::sync::Arc;

use super::blocks::{BlockRefusal, PortBlocks, BLOCK_ALIGN, MAX_BLOCKS_PER_HOST};
use super::log::{NatEventKind, NatLog, PortBlock};
use crate::state::hosts::{HostCounts, Refusal};
use crate::wire::ipv4::protocol;

/// IANA's dynamic range plus the registered one: everything above the well-known ports, which
/// servers on the WAN may treat as privileged.
pub const DEFAULT_PORTS: RangeInclusive<u16> = 1024..=65535;

/// Keeps the indexes (`2 * capacity` slots) and binding numbers comfortably within `u32`.
pub const MAX_BINDINGS: usize = 1 << 24;

/// Bindings record the address as an index, which the internal-endpoint key holds in its
/// top 14 bits.
pub const MAX_ADDRESSES: usize = 1 << 14;

/// TCP, UDP and ICMP query identifiers: the three namespaces a binding can live in.
const PROTOCOLS: usize = 3;

const VACANT: u32 = u32::MAX;

/// Makes the external-address choice independent of [`Ownership::host_owner`], which hashes
/// the same internal address: without it, with 2 workers and 2 addresses, each worker's hosts
/// would all land on one address.
const PAIRING_SEED: u32 = 0x9e37_79b9;

/// murmur3's finaliser: every input bit affects every output bit, so the consecutive addresses
/// of a DHCP range spread evenly over workers and external addresses. Fixed rather than keyed,
/// because the dispatcher and every worker must agree on it.
fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x85eb_ca6b);
    x ^= x >> 13;
    x = x.wrapping_mul(0xc2b2_ae35);
    x ^= x >> 16;
    x
}

/// The IP protocol of a binding's namespace ([`protocol_index`]'s inverse).
fn protocol_of_index(index: u8) -> u8 {
    [protocol::TCP, protocol::UDP, protocol::ICMP][usize::from(index)]
}

fn protocol_index(protocol: u8) -> Option<usize> {
    match protocol {
        protocol::TCP => Some(0),
        protocol::UDP => Some(1),
        protocol::ICMP => Some(2),
        _ => None,
    }
}

/// How ports (and internal hosts) are divided among `workers` workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ownership {
    workers: u16,
    mask: u16,
}

impl Ownership {
    /// `workers` of 0 is taken as 1, so that the arithmetic below never divides by zero.
    pub fn new(workers: u16) -> Ownership {
        let workers = workers.max(1);
        // In u32: the next power of two above 32768 is 65536.
        let mask = (u32::from(workers).next_power_of_two() - 1) as u16;
        Ownership { workers, mask }
    }

    pub fn workers(&self) -> u16 {
        self.workers
    }

    /// The bits of the port a NIC rule matches on.
    pub fn mask(&self) -> u16 {
        self.mask
    }

    /// Unless `workers` is a power of two, some workers own two classes and others one, so
    /// the low-numbered workers get up to twice the ports. The NIC can only match masked
    /// bits, so an exact split would need as many rules as ports.
    pub fn port_owner(&self, port: u16) -> u16 {
        (port & self.mask) % self.workers
    }

    /// The worker that handles every flow of internal host `ip`.
    pub fn host_owner(&self, ip: Ipv4Addr) -> u16 {
        (mix32(u32::from(ip)) % u32::from(self.workers)) as u16
    }

    /// The worker for traffic between two hosts, neither of them the flow's one inside host:
    /// the same for `(a, b)` and `(b, a)`, and spread by both, so that a busy server's peers
    /// do not all land on one worker.
    pub fn pair_owner(&self, a: Ipv4Addr, b: Ipv4Addr) -> u16 {
        let mixed = mix32(u32::from(a)) ^ mix32(u32::from(b));
        (mix32(mixed) % u32::from(self.workers)) as u16
    }

    /// The worker for an IPv6 flow between `a` and `b`, the same for both directions. IPv6
    /// is not translated, so the addresses are all there is: a flow's fragments and the
    /// ICMPv6 errors about it (by the addresses they quote) reach the same worker.
    pub fn pair_owner6(&self, a: Ipv6Addr, b: Ipv6Addr) -> u16 {
        let fold = |addr: Ipv6Addr| {
            let bits = u128::from(addr);
            mix32((bits >> 96) as u32 ^ (bits >> 64) as u32 ^ (bits >> 32) as u32 ^ bits as u32)
        };
        (mix32(fold(a) ^ fold(b)) % u32::from(self.workers)) as u16
    }

    pub fn owns(&self, worker: u16, port: u16) -> bool {
        self.port_owner(port) == worker
    }

    /// The values of `port & mask` that belong to `worker`: one NIC rule each.
    pub fn classes(&self, worker: u16) -> impl Iterator<Item = u16> {
        let last = if worker < self.workers { self.mask } else { 0 };
        // worker >= 1 when out of range, so the range below is empty then.
        (worker..=last).step_by(usize::from(self.workers))
    }

    fn period(&self) -> u32 {
        u32::from(self.mask) + 1
    }

    /// How many classes in one period of `mask + 1` ports belong to `worker` (>= 1 for a
    /// worker in range, as `worker < workers <= mask + 1`).
    fn classes_owned(&self, worker: u16) -> u32 {
        if worker >= self.workers {
            return 0;
        }
        (u32::from(self.mask) - u32::from(worker)) / u32::from(self.workers) + 1
    }

    /// How many ports below `port` (up to 65536) `worker` owns.
    fn owned_below(&self, worker: u16, port: u32) -> u32 {
        let period = self.period();
        let full = port / period * self.classes_owned(worker);
        let rest = port % period;
        let worker = u32::from(worker);
        let partial = if rest > worker {
            (rest - 1 - worker) / u32::from(self.workers) + 1
        } else {
            0
        };
        full + partial
    }

    /// The `n`th port (from 0) that `worker` owns; the inverse of `owned_below`.
    fn nth_owned(&self, worker: u16, n: u32) -> u32 {
        let per_period = self.classes_owned(worker).max(1);
        n / per_period * self.period()
            + u32::from(worker)
            + n % per_period * u32::from(self.workers)
    }
}

/// Why a pool configuration cannot work. Checked once at start-up, so that a misconfigured
/// worker does not silently drop every new flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NatPoolError {
    #[error("no external address")]
    NoExternalAddress,
    #[error("more than {MAX_ADDRESSES} external addresses")]
    TooManyAddresses,
    #[error("worker {worker} out of range for {workers} workers")]
    WorkerOutOfRange { worker: u16, workers: u16 },
    /// The worker owns no port in the range.
    #[error("the worker owns no port in the range")]
    NoOwnedPorts,
    /// Zero, or above [`MAX_BINDINGS`].
    #[error("binding capacity must be 1..={MAX_BINDINGS}")]
    BindingCapacity,
    /// Port blocks of zero ports or of a number that is not a multiple of
    /// [`BLOCK_ALIGN`], or more than [`MAX_BLOCKS_PER_HOST`] per host.
    #[error(
        "a port block must be a positive multiple of {BLOCK_ALIGN} ports, at most {MAX_BLOCKS_PER_HOST} per host"
    )]
    PortBlockSize,
    /// Port blocks with a worker count that is not a power of two: a worker would own two
    /// port classes of unequal spacing, so a block's ports would not step evenly.
    #[error("port blocks need a power-of-two number of workers")]
    PortBlockWorkers,
}

/// Why [`NatPool::allocate_checked`] found no external endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// No free port on the host's paired address, no free binding entry, or a protocol
    /// without ports.
    Exhausted,
    /// The internal host holds its limit of bindings.
    HostLimit,
    /// The address asked for is not one of the pool's.
    UnknownAddress,
}

/// Why [`NatPool::restore`] refused a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// The external address is not this pool's, the protocol has no ports, or the port is
    /// outside the range or owned by another worker.
    NotOurs,
    /// The port is reserved for a forward or bound to another endpoint, or the internal
    /// endpoint is bound to another port.
    Conflict,
    /// No free binding entry.
    Exhausted,
    /// The internal host holds its limit of bindings.
    HostLimit,
}

/// One endpoint-independent mapping.
/// One live binding as [`NatPool::bindings_in`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindingView {
    /// The IP protocol (the port is an ICMP query id for ICMP).
    pub protocol: u8,
    pub internal: (Ipv4Addr, u16),
    pub external: (Ipv4Addr, u16),
    /// The flows holding it.
    pub flows: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Binding {
    internal_ip: u32,
    /// Flows using the binding; 0 only while the entry is on the free stack.
    refcount: u32,
    internal_port: u16,
    external_port: u16,
    /// Index into the pool's sorted address list.
    address: u16,
    protocol: u8,
    /// Counted against its internal host's limit.
    charged: bool,
}

// The memory figures in the module docs depend on it.
const _: () = assert!(std::mem::size_of::<Binding>() == 16);

impl Binding {
    fn internal_key(&self) -> u64 {
        internal_key(
            usize::from(self.protocol),
            self.address,
            self.internal_ip,
            self.internal_port,
        )
    }

    fn external_key(&self) -> u64 {
        external_key(usize::from(self.protocol), self.address, self.external_port)
    }
}

/// Distinct keys map to distinct integers, so a key comparison is an integer comparison.
/// The external address is part of the internal endpoint's key: an endpoint whose flows
/// leave by two uplinks holds a binding on each uplink's address (endpoint-independent
/// mapping per address, the most that two addresses allow).
fn internal_key(protocol: usize, address: u16, ip: u32, port: u16) -> u64 {
    u64::from(address) << 50 | (protocol as u64) << 48 | u64::from(ip) << 16 | u64::from(port)
}

fn external_key(protocol: usize, address: u16, port: u16) -> u64 {
    (protocol as u64) << 32 | u64::from(address) << 16 | u64::from(port)
}

enum Probe {
    Found {
        slot: usize,
        binding: usize,
    },
    Vacant {
        slot: usize,
    },
    /// Only if the at-most-half-full invariant broke; treated as a refusal, not a panic.
    Full,
}

/// Open addressing with linear probing over binding numbers; the key is read from the binding
/// itself, so a slot is 4 bytes. Deletion shifts the cluster back (no tombstones), so probe
/// lengths do not grow with churn. Multiply-shift hashing with a random multiplier keeps
/// internal hosts from choosing ports that all collide.
struct Index {
    slots: Vec<u32>,
    multiplier: u64,
    shift: u32,
}

impl Index {
    fn new(capacity: usize, multiplier: u64) -> Index {
        let len = (capacity * 2).next_power_of_two().max(2);
        Index {
            slots: vec![VACANT; len],
            multiplier: multiplier | 1,
            shift: 64 - len.trailing_zeros(),
        }
    }

    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(self.multiplier) >> self.shift) as usize
    }

    fn find(&self, key: u64, bindings: &[Binding], key_of: fn(&Binding) -> u64) -> Probe {
        let mask = self.slots.len() - 1;
        let mut slot = self.home(key);
        for _ in 0..self.slots.len() {
            let binding = self.slots[slot];
            if binding == VACANT {
                return Probe::Vacant { slot };
            }
            let binding = binding as usize;
            if key_of(&bindings[binding]) == key {
                return Probe::Found { slot, binding };
            }
            slot = (slot + 1) & mask;
        }
        Probe::Full
    }

    fn remove(&mut self, removed: usize, bindings: &[Binding], key_of: fn(&Binding) -> u64) {
        let mask = self.slots.len() - 1;
        let mut hole = removed;
        let mut slot = (hole + 1) & mask;
        for _ in 0..self.slots.len() {
            let binding = self.slots[slot];
            if binding == VACANT {
                break;
            }
            let home = self.home(key_of(&bindings[binding as usize]));
            // Move it into the hole unless its home lies after the hole, where a lookup
            // would start past the hole and so never see it there.
            if slot.wrapping_sub(home) & mask >= slot.wrapping_sub(hole) & mask {
                self.slots[hole] = binding;
                hole = slot;
            }
            slot = (slot + 1) & mask;
        }
        self.slots[hole] = VACANT;
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct PortGroup {
    /// Where the next search for a free slot starts: just after the last slot handed out by
    /// a search, so a released port is reused as late as possible (the remote end may still
    /// hold the old connection in TIME-WAIT).
    cursor: u32,
    free: u32,
}

/// One worker's external ports and bindings. See the module docs for layout and memory.
pub struct NatPool {
    ownership: Ownership,
    worker: u16,
    /// Sorted and deduplicated, so that an external address maps back to its index by binary
    /// search.
    addresses: Vec<Ipv4Addr>,
    ports: RangeInclusive<u16>,
    /// `owned_below(ports.start)`: slot `s` is the owned port number `slot_base + s`.
    slot_base: u32,
    /// Slots per (protocol, address).
    slots: u32,
    words: usize,
    summary_words: usize,
    /// Group `protocol * addresses.len() + address` owns `words` words from
    /// `group * words`; a set bit is a free slot.
    free: Vec<u64>,
    /// Bit `w` set when word `w` of the group's `free` bitmap is non-zero.
    summary: Vec<u64>,
    groups: Vec<PortGroup>,
    /// Per protocol, `words` words; a set bit is a port kept for port forwarding.
    reserved: Vec<u64>,
    reserved_count: [u32; PROTOCOLS],
    free_total: usize,
    bindings: Vec<Binding>,
    /// Unused binding numbers; its capacity is reserved up front, so pushes never allocate.
    free_bindings: Vec<u32>,
    by_internal: Index,
    by_external: Index,
    /// Bindings per internal host, when limited.
    hosts: Option<HostCounts<1>>,
    /// Where new and freed bindings are told, when logged.
    log: Option<Arc<NatLog>>,
    /// Which host holds which block of ports, when ports are handed out by blocks.
    blocks: Option<PortBlocks>,
}

impl fmt::Debug for NatPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatPool")
            .field("worker", &self.worker)
            .field("ownership", &self.ownership)
            .field("addresses", &self.addresses)
            .field("ports", &self.ports)
            .field("in_use", &self.in_use())
            .field("available", &self.available())
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl NatPool {
    /// Port 0 is never handed out (it is not a valid TCP or UDP port), whatever the range.
    /// Duplicate addresses are ignored.
    pub fn new(
        external: &[Ipv4Addr],
        ports: RangeInclusive<u16>,
        worker: u16,
        ownership: Ownership,
        binding_capacity: usize,
    ) -> Result<NatPool, NatPoolError> {
        let mut addresses = external.to_vec();
        addresses.sort_unstable();
        addresses.dedup();
        if addresses.is_empty() {
            return Err(NatPoolError::NoExternalAddress);
        }
        if addresses.len() > MAX_ADDRESSES {
            return Err(NatPoolError::TooManyAddresses);
        }
        if worker >= ownership.workers() {
            return Err(NatPoolError::WorkerOutOfRange {
                worker,
                workers: ownership.workers(),
            });
        }
        if binding_capacity == 0 || binding_capacity > MAX_BINDINGS {
            return Err(NatPoolError::BindingCapacity);
        }
        let ports = (*ports.start()).max(1)..=*ports.end();
        let slot_base = ownership.owned_below(worker, u32::from(*ports.start()));
        let slots = if ports.is_empty() {
            0
        } else {
            ownership.owned_below(worker, u32::from(*ports.end()) + 1) - slot_base
        };
        if slots == 0 {
            return Err(NatPoolError::NoOwnedPorts);
        }

        let words = (slots as usize).div_ceil(64);
        let summary_words = words.div_ceil(64);
        // Bits past the last slot (and past the last word) stay clear, so that searches
        // never find them.
        let mut group_free = vec![u64::MAX; words];
        group_free[words - 1] = u64::MAX >> (words * 64 - slots as usize);
        let mut group_summary = vec![u64::MAX; summary_words];
        group_summary[summary_words - 1] = u64::MAX >> (summary_words * 64 - words);
        let groups = PROTOCOLS * addresses.len();
        let random = RandomState::new();

        Ok(NatPool {
            ownership,
            worker,
            ports,
            slot_base,
            slots,
            words,
            summary_words,
            free: group_free.repeat(groups),
            summary: group_summary.repeat(groups),
            groups: vec![
                PortGroup {
                    cursor: 0,
                    free: slots
                };
                groups
            ],
            reserved: vec![0; PROTOCOLS * words],
            reserved_count: [0; PROTOCOLS],
            free_total: groups * slots as usize,
            bindings: vec![Binding::default(); binding_capacity],
            // Popped from the end, so bindings are used from 0 upwards.
            free_bindings: (0..binding_capacity as u32).rev().collect(),
            by_internal: Index::new(binding_capacity, random.hash_one(0x696e_7465_726e_616c_u64)),
            by_external: Index::new(binding_capacity, random.hash_one(0x6578_7465_726e_616c_u64)),
            addresses,
            hosts: None,
            log: None,
            blocks: None,
        })
    }

    /// Tells `log` of every binding made by [`allocate`](Self::allocate) and of every one
    /// the last [`release`](Self::release) frees (restored bindings continue a mapping, so
    /// they are not news).
    pub fn with_log(mut self, log: Option<Arc<NatLog>>) -> NatPool {
        self.log = log;
        self
    }

    /// Limits every internal host to `ports_per_host` bindings (0 is taken as 1), counted in
    /// a table with room for `hosts` hosts. Allocates: call at set-up.
    pub fn with_host_limit(mut self, ports_per_host: u32, hosts: usize) -> NatPool {
        self.hosts = Some(HostCounts::new(hosts, [ports_per_host]));
        self
    }

    /// Hands ports out by blocks of `size` (a multiple of [`BLOCK_ALIGN`]), at most
    /// `blocks_per_host` per host, logged per block instead of per mapping: see
    /// [`super::blocks`]. Needs a power-of-two number of workers, so that each owns one port
    /// class and a block's ports step evenly. Allocates: call at set-up.
    pub fn with_port_blocks(
        mut self,
        size: u32,
        blocks_per_host: usize,
    ) -> Result<NatPool, NatPoolError> {
        if size == 0
            || !size.is_multiple_of(BLOCK_ALIGN)
            || !(1..=MAX_BLOCKS_PER_HOST).contains(&blocks_per_host)
        {
            return Err(NatPoolError::PortBlockSize);
        }
        if u32::from(self.ownership.workers()) != self.ownership.period() {
            return Err(NatPoolError::PortBlockWorkers);
        }
        self.blocks = Some(PortBlocks::new(
            size,
            self.slots,
            self.addresses.len(),
            blocks_per_host,
        ));
        Ok(self)
    }

    /// Port blocks held and blocks in all, over every address (0 and 0 port by port).
    pub fn blocks_in_use(&self) -> (usize, usize) {
        self.blocks.as_ref().map_or((0, 0), |blocks| {
            (blocks.held_count(), blocks.count() as usize)
        })
    }

    /// Whether ports are handed out (and logged) by blocks.
    pub fn by_blocks(&self) -> bool {
        self.blocks.is_some()
    }

    /// Every held block: its host, its external address and its ports.
    pub fn held_blocks(&self, mut each: impl FnMut(Ipv4Addr, Ipv4Addr, PortBlock)) {
        let Some(blocks) = self.blocks.as_ref() else {
            return;
        };
        for block in 0..blocks.count() {
            if let Some(host) = blocks.holder(block) {
                let address = self.addresses[blocks.address_of(block)];
                each(host, address, self.block_ports(blocks, block));
            }
        }
    }

    /// The ports of `block`, as the log names them.
    fn block_ports(&self, blocks: &PortBlocks, block: u32) -> PortBlock {
        let slots = blocks.slots_of(block);
        PortBlock {
            first: self.port_of(slots.start),
            last: self.port_of(slots.end - 1),
            step: self.ownership.period() as u16,
            ports: (slots.end - slots.start) as u16,
        }
    }

    /// A free slot of `group` in one of `host`'s blocks on `address` (the internal port's own
    /// when it is one of them and free), or in a block it newly takes. The block is returned
    /// beside the slot, and is new if the host did not hold it.
    fn block_slot(
        &mut self,
        group: usize,
        address: usize,
        host: Ipv4Addr,
        port: u16,
    ) -> Result<(u32, u32, bool), Option<AllocError>> {
        let Some(blocks) = self.blocks.as_ref() else {
            return Err(None);
        };
        let preserved = self.slot_of(port).filter(|&slot| self.is_free(group, slot));
        for &block in blocks.blocks_of(host) {
            if blocks.address_of(block) != address {
                continue;
            }
            if let Some(slot) = preserved.filter(|&slot| blocks.block_of(address, slot) == block) {
                return Ok((block, slot, false));
            }
            if let Some(slot) = self.free_in_block(blocks, group, block) {
                return Ok((block, slot, false));
            }
        }
        let blocks = self.blocks.as_mut().ok_or(None)?;
        let block = match blocks.claim(host, address) {
            Ok(block) => block,
            Err(BlockRefusal::HostLimit) => return Err(Some(AllocError::HostLimit)),
            Err(_) => return Err(None),
        };
        let blocks = self.blocks.as_ref().ok_or(None)?;
        let found = preserved
            .filter(|&slot| blocks.block_of(address, slot) == block)
            .or_else(|| self.free_in_block(blocks, group, block));
        match found {
            Some(slot) => Ok((block, slot, true)),
            None => {
                // Every port of the new block is kept for a forward in this protocol.
                if let Some(blocks) = self.blocks.as_mut() {
                    blocks.abandon(block);
                }
                Err(None)
            }
        }
    }

    /// The first free slot of `group` in `block` from the block's cursor, wrapping within it.
    fn free_in_block(&self, blocks: &PortBlocks, group: usize, block: u32) -> Option<u32> {
        let slots = blocks.slots_of(block);
        let free = &self.free[group * self.words..][..self.words];
        let cursor = blocks.cursor(block);
        let (first_word, end_word) = ((slots.start / 64) as usize, slots.end.div_ceil(64) as usize);
        let cursor_word = (cursor / 64) as usize;
        let here = free[cursor_word] & (u64::MAX << (cursor % 64));
        if here != 0 {
            return Some(cursor_word as u32 * 64 + here.trailing_zeros());
        }
        // The words after the cursor's, then from the block's start round to it again.
        (cursor_word + 1..end_word)
            .chain(first_word..=cursor_word)
            .find(|&word| free[word] != 0)
            .map(|word| word as u32 * 64 + free[word].trailing_zeros())
    }

    /// The bindings `ip` holds, as counted for its limit (0 without a limit).
    pub fn host_ports(&self, ip: Ipv4Addr) -> u32 {
        self.hosts.as_ref().map_or(0, |hosts| hosts.counts(ip)[0])
    }

    /// Internal hosts at their binding limit now.
    pub fn hosts_at_limit(&self) -> usize {
        self.hosts.as_ref().map_or(0, |hosts| hosts.at_limit(0))
    }

    /// The external endpoint for a new flow from `internal`: its existing binding if it has
    /// one (endpoint-independent mapping, RFC 4787 REQ-1), else a new one on the address
    /// paired with the internal host (REQ-2), keeping the internal port if this worker owns
    /// it and it is free there.
    ///
    /// None when the protocol has no ports (only TCP, UDP and ICMP are pooled), when the
    /// paired address has no free port or when the binding table is full; the caller drops
    /// the packet and counts it. Every `Some` must be matched by one [`NatPool::release`].
    pub fn allocate(&mut self, protocol: u8, internal: (Ipv4Addr, u16)) -> Option<(Ipv4Addr, u16)> {
        self.allocate_checked(protocol, internal).ok()
    }

    /// As [`allocate`](Self::allocate), saying why it failed: a host at its limit (see the
    /// module doc) is told apart from exhaustion.
    pub fn allocate_checked(
        &mut self,
        protocol: u8,
        internal: (Ipv4Addr, u16),
    ) -> Result<(Ipv4Addr, u16), AllocError> {
        let address = self.paired_index(internal.0);
        self.allocate_new(protocol, internal, address)
            .map_err(|refused| refused.unwrap_or(AllocError::Exhausted))
    }

    /// As [`allocate_checked`](Self::allocate_checked), on external address `address`
    /// rather than the one paired with the host: the address of the uplink the flow leaves
    /// by, where several masquerade.
    pub fn allocate_at(
        &mut self,
        protocol: u8,
        internal: (Ipv4Addr, u16),
        address: Ipv4Addr,
    ) -> Result<(Ipv4Addr, u16), AllocError> {
        let address = self
            .addresses
            .binary_search(&address)
            .map_err(|_| AllocError::UnknownAddress)?;
        self.allocate_new(protocol, internal, address)
            .map_err(|refused| refused.unwrap_or(AllocError::Exhausted))
    }

    /// `Err(None)` is exhaustion, so that `?` on an Option says it.
    fn allocate_new(
        &mut self,
        protocol: u8,
        internal: (Ipv4Addr, u16),
        address: usize,
    ) -> Result<(Ipv4Addr, u16), Option<AllocError>> {
        let ip_protocol = protocol;
        let protocol = protocol_index(protocol).ok_or(None)?;
        let (ip, port) = (u32::from(internal.0), internal.1);
        let key = internal_key(protocol, address as u16, ip, port);
        let internal_slot = match self
            .by_internal
            .find(key, &self.bindings, Binding::internal_key)
        {
            Probe::Found { binding, .. } => {
                let binding = &mut self.bindings[binding];
                binding.refcount = binding.refcount.checked_add(1).ok_or(None)?;
                return Ok((
                    self.addresses[usize::from(binding.address)],
                    binding.external_port,
                ));
            }
            Probe::Vacant { slot } => slot,
            Probe::Full => return Err(None),
        };
        let binding = *self.free_bindings.last().ok_or(None)?;
        if let Some(hosts) = &self.hosts {
            if let Err(Refusal::AtLimit { .. }) = hosts.check(internal.0, [1]) {
                return Err(Some(AllocError::HostLimit));
            }
        }

        let group = protocol * self.addresses.len() + address;
        let (slot, preserved, block) = if self.blocks.is_some() {
            let (block, slot, new) = self.block_slot(group, address, internal.0, port)?;
            (slot, true, Some((block, new)))
        } else {
            match self.slot_of(port) {
                Some(slot) if self.is_free(group, slot) => (slot, true, None),
                _ => (self.find_free(group).ok_or(None)?, false, None),
            }
        };
        let external_port = self.port_of(slot);
        let external_slot = match self.by_external.find(
            external_key(protocol, address as u16, external_port),
            &self.bindings,
            Binding::external_key,
        ) {
            Probe::Vacant { slot } => slot,
            // A free port with a binding would be a bookkeeping bug; refusing keeps the
            // existing binding intact rather than handing its port out twice.
            Probe::Found { .. } | Probe::Full => {
                if let (Some(blocks), Some((block, true))) = (self.blocks.as_mut(), block) {
                    blocks.abandon(block);
                }
                return Err(None);
            }
        };
        let charged = self
            .hosts
            .as_mut()
            .is_some_and(|hosts| hosts.charge(internal.0, [1]).is_ok());

        self.take(group, slot);
        if !preserved {
            self.groups[group].cursor = if slot + 1 < self.slots { slot + 1 } else { 0 };
        }
        self.free_bindings.pop();
        self.bindings[binding as usize] = Binding {
            internal_ip: ip,
            refcount: 1,
            internal_port: port,
            external_port,
            address: address as u16,
            protocol: protocol as u8,
            charged,
        };
        self.by_internal.slots[internal_slot] = binding;
        self.by_external.slots[external_slot] = binding;
        let external = (self.addresses[address], external_port);
        match (block, self.blocks.as_mut()) {
            (Some((block, new)), Some(blocks)) => {
                blocks.hold(block);
                blocks.advance(block, slot);
                if let (true, Some(log), Some(blocks)) = (new, &self.log, &self.blocks) {
                    let ports = self.block_ports(blocks, block);
                    log.record_block(NatEventKind::BlockCreate, internal.0, external.0, ports);
                }
            }
            _ => {
                if let Some(log) = &self.log {
                    log.record(NatEventKind::Create, ip_protocol, internal, external);
                }
            }
        }
        Ok(external)
    }

    /// Drops one flow's hold on the binding of `external`; the last release frees the port.
    /// Returns false (and changes nothing) if there is no such binding.
    pub fn release(&mut self, protocol: u8, external: (Ipv4Addr, u16)) -> bool {
        self.release_logged(protocol, external, true)
    }

    /// [`release`](Self::release) without a NAT log event: for a binding whose creation was
    /// not logged here (a flow synced from the peer of an HA pair, which logged it).
    pub fn release_unlogged(&mut self, protocol: u8, external: (Ipv4Addr, u16)) -> bool {
        self.release_logged(protocol, external, false)
    }

    fn release_logged(&mut self, protocol: u8, external: (Ipv4Addr, u16), logged: bool) -> bool {
        let ip_protocol = protocol;
        let Some((protocol, address)) = self.external_group(protocol, external.0) else {
            return false;
        };
        let key = external_key(protocol, address as u16, external.1);
        let Probe::Found {
            slot: external_slot,
            binding,
        } = self
            .by_external
            .find(key, &self.bindings, Binding::external_key)
        else {
            return false;
        };
        let entry = &mut self.bindings[binding];
        entry.refcount -= 1;
        if entry.refcount > 0 {
            return true;
        }
        let internal_key = entry.internal_key();
        if entry.charged {
            let ip = Ipv4Addr::from(entry.internal_ip);
            if let Some(hosts) = self.hosts.as_mut() {
                hosts.credit(ip, [1]);
            }
        }

        self.by_external
            .remove(external_slot, &self.bindings, Binding::external_key);
        if let Probe::Found { slot, .. } =
            self.by_internal
                .find(internal_key, &self.bindings, Binding::internal_key)
        {
            self.by_internal
                .remove(slot, &self.bindings, Binding::internal_key);
        }
        self.free_bindings.push(binding as u32);
        let slot = self.slot_of(external.1);
        if let Some(slot) = slot {
            if !self.is_reserved(protocol, slot) {
                self.put(protocol * self.addresses.len() + address, slot);
            }
        }
        let freed = &self.bindings[binding];
        let internal = (Ipv4Addr::from(freed.internal_ip), freed.internal_port);
        let log = self.log.as_ref().filter(|_| logged);
        match (self.blocks.as_mut(), slot) {
            (Some(blocks), Some(slot)) => {
                let block = blocks.block_of(address, slot);
                if blocks.release(block) {
                    if let (Some(log), Some(blocks)) = (log, &self.blocks) {
                        let ports = self.block_ports(blocks, block);
                        log.record_block(NatEventKind::BlockDelete, internal.0, external.0, ports);
                    }
                }
            }
            _ => {
                if let Some(log) = log {
                    log.record(NatEventKind::Delete, ip_protocol, internal, external);
                }
            }
        }
        true
    }

    /// The live bindings among binding slots `slots` (below [`binding_capacity`]), for the
    /// operator's listing: a walk over the slots a few at a time lists the pool.
    ///
    /// [`binding_capacity`]: Self::binding_capacity
    pub fn bindings_in(&self, slots: std::ops::Range<usize>, mut each: impl FnMut(BindingView)) {
        let end = slots.end.min(self.bindings.len());
        for binding in &self.bindings[slots.start.min(end)..end] {
            if binding.refcount == 0 {
                continue;
            }
            each(BindingView {
                protocol: protocol_of_index(binding.protocol),
                internal: (Ipv4Addr::from(binding.internal_ip), binding.internal_port),
                external: (
                    self.addresses[usize::from(binding.address)],
                    binding.external_port,
                ),
                flows: binding.refcount,
            });
        }
    }

    /// Takes a reference on the binding of `internal` to exactly `external`, as a flow
    /// restored from a state snapshot holds it: the binding's existing reference count goes
    /// up, or a new binding takes that port, which must be owned by this worker, in range,
    /// not reserved for a forward and free. So no port is ever bound twice, and the binding
    /// counts against its host as [`allocate`](Self::allocate)'s would. Changes nothing on
    /// refusal. A matching [`release`](Self::release) gives the reference back.
    /// Logs a binding made outside `allocate` (a restore that is not a snapshot's) as
    /// `allocate` logs its own: the NAT log then has the creation its deletion answers.
    pub fn log_created(&self, protocol: u8, internal: (Ipv4Addr, u16), external: (Ipv4Addr, u16)) {
        if let Some(log) = &self.log {
            log.record(NatEventKind::Create, protocol, internal, external);
        }
    }

    pub fn restore(
        &mut self,
        protocol: u8,
        internal: (Ipv4Addr, u16),
        external: (Ipv4Addr, u16),
    ) -> Result<(), RestoreError> {
        let (protocol, address) = self
            .external_group(protocol, external.0)
            .ok_or(RestoreError::NotOurs)?;
        let (ip, port) = (u32::from(internal.0), internal.1);
        let internal_slot = match self.by_internal.find(
            internal_key(protocol, address as u16, ip, port),
            &self.bindings,
            Binding::internal_key,
        ) {
            Probe::Found { binding, .. } => {
                let binding = &mut self.bindings[binding];
                if (usize::from(binding.address), binding.external_port) != (address, external.1) {
                    return Err(RestoreError::Conflict);
                }
                binding.refcount = binding
                    .refcount
                    .checked_add(1)
                    .ok_or(RestoreError::Conflict)?;
                return Ok(());
            }
            Probe::Vacant { slot } => slot,
            Probe::Full => return Err(RestoreError::Exhausted),
        };
        let slot = self.slot_of(external.1).ok_or(RestoreError::NotOurs)?;
        let group = protocol * self.addresses.len() + address;
        if self.is_reserved(protocol, slot) || !self.is_free(group, slot) {
            return Err(RestoreError::Conflict);
        }
        let external_slot = match self.by_external.find(
            external_key(protocol, address as u16, external.1),
            &self.bindings,
            Binding::external_key,
        ) {
            Probe::Vacant { slot } => slot,
            Probe::Found { .. } => return Err(RestoreError::Conflict),
            Probe::Full => return Err(RestoreError::Exhausted),
        };
        let binding = *self.free_bindings.last().ok_or(RestoreError::Exhausted)?;
        // A restored mapping brings its block with it, unless the block is another's.
        let block = match self.blocks.as_mut() {
            Some(blocks) => {
                let block = blocks.block_of(address, slot);
                blocks
                    .adopt(internal.0, block)
                    .map_err(|refusal| match refusal {
                        BlockRefusal::Conflict => RestoreError::Conflict,
                        BlockRefusal::HostLimit => RestoreError::HostLimit,
                        BlockRefusal::Exhausted => RestoreError::Exhausted,
                    })?;
                Some(block)
            }
            None => None,
        };
        let charged = match self
            .hosts
            .as_mut()
            .map(|hosts| hosts.charge(internal.0, [1]))
        {
            Some(Err(Refusal::AtLimit { .. })) => {
                // A block adopted for this mapping alone goes back (abandon leaves one that
                // holds other mappings).
                if let (Some(blocks), Some(block)) = (self.blocks.as_mut(), block) {
                    blocks.abandon(block);
                }
                return Err(RestoreError::HostLimit);
            }
            Some(Ok(())) => true,
            Some(Err(Refusal::Untracked)) | None => false,
        };
        if let (Some(blocks), Some(block)) = (self.blocks.as_mut(), block) {
            blocks.hold(block);
        }
        self.take(group, slot);
        self.free_bindings.pop();
        self.bindings[binding as usize] = Binding {
            internal_ip: ip,
            refcount: 1,
            internal_port: port,
            external_port: external.1,
            address: address as u16,
            protocol: protocol as u8,
            charged,
        };
        self.by_internal.slots[internal_slot] = binding;
        self.by_external.slots[external_slot] = binding;
        Ok(())
    }

    /// The internal endpoint that `external` maps to, for traffic arriving from the WAN.
    pub fn lookup_external(
        &self,
        protocol: u8,
        external: (Ipv4Addr, u16),
    ) -> Option<(Ipv4Addr, u16)> {
        let (protocol, address) = self.external_group(protocol, external.0)?;
        let key = external_key(protocol, address as u16, external.1);
        match self
            .by_external
            .find(key, &self.bindings, Binding::external_key)
        {
            Probe::Found { binding, .. } => {
                let binding = &self.bindings[binding];
                Some((Ipv4Addr::from(binding.internal_ip), binding.internal_port))
            }
            Probe::Vacant { .. } | Probe::Full => None,
        }
    }

    /// The external endpoint `internal` is bound to on external address `address`, without
    /// taking a reference.
    pub fn lookup_internal(
        &self,
        protocol: u8,
        internal: (Ipv4Addr, u16),
        address: Ipv4Addr,
    ) -> Option<(Ipv4Addr, u16)> {
        let (protocol, address) = self.external_group(protocol, address)?;
        let key = internal_key(protocol, address as u16, internal.0.into(), internal.1);
        match self
            .by_internal
            .find(key, &self.bindings, Binding::internal_key)
        {
            Probe::Found { binding, .. } => {
                let binding = &self.bindings[binding];
                Some((
                    self.addresses[usize::from(binding.address)],
                    binding.external_port,
                ))
            }
            Probe::Vacant { .. } | Probe::Full => None,
        }
    }

    /// Keeps `external_port` of `protocol` out of the pool on every external address, for a
    /// port-forwarding rule. A port bound at the time stays bound until released and is then
    /// kept out. Ports this worker does not own are never handed out here anyway.
    pub fn reserve(&mut self, protocol: u8, external_port: u16) {
        let (Some(protocol), Some(slot)) = (protocol_index(protocol), self.slot_of(external_port))
        else {
            return;
        };
        if self.is_reserved(protocol, slot) {
            return;
        }
        let (word, bit) = self.bit(protocol * self.words, slot);
        self.reserved[word] |= bit;
        self.reserved_count[protocol] += 1;
        for address in 0..self.addresses.len() {
            let group = protocol * self.addresses.len() + address;
            if self.is_free(group, slot) {
                self.take(group, slot);
            }
        }
    }

    /// Gives back a port that [`NatPool::reserve`] kept out, when its forward is removed: free
    /// again on every external address where no binding holds it (one made before the
    /// reservation keeps it until released, and then frees it as usual).
    pub fn unreserve(&mut self, protocol: u8, external_port: u16) {
        let (Some(protocol), Some(slot)) = (protocol_index(protocol), self.slot_of(external_port))
        else {
            return;
        };
        if !self.is_reserved(protocol, slot) {
            return;
        }
        let (word, bit) = self.bit(protocol * self.words, slot);
        self.reserved[word] &= !bit;
        self.reserved_count[protocol] -= 1;
        for address in 0..self.addresses.len() {
            let group = protocol * self.addresses.len() + address;
            let key = external_key(protocol, address as u16, external_port);
            let bound = matches!(
                self.by_external
                    .find(key, &self.bindings, Binding::external_key),
                Probe::Found { .. }
            );
            if !bound && !self.is_free(group, slot) {
                self.put(group, slot);
            }
        }
    }

    /// Live bindings.
    pub fn in_use(&self) -> usize {
        self.bindings.len() - self.free_bindings.len()
    }

    /// Free (protocol, address, port) triples. A new binding also needs a free binding entry,
    /// and a given host can only use its paired address.
    pub fn available(&self) -> usize {
        self.free_total
    }

    /// (protocol, address, port) triples this pool can hand out: owned, in range, and not
    /// reserved.
    pub fn capacity(&self) -> usize {
        self.reserved_count
            .iter()
            .map(|&reserved| (self.slots - reserved) as usize * self.addresses.len())
            .sum()
    }

    pub fn binding_capacity(&self) -> usize {
        self.bindings.len()
    }

    /// Sorted and deduplicated.
    pub fn addresses(&self) -> &[Ipv4Addr] {
        &self.addresses
    }

    pub fn worker(&self) -> u16 {
        self.worker
    }

    pub fn ownership(&self) -> Ownership {
        self.ownership
    }

    /// Port 0 excluded.
    pub fn ports(&self) -> RangeInclusive<u16> {
        self.ports.clone()
    }

    /// The external address for every binding of internal host `ip`. Stateless, so it holds
    /// across protocols and across the host's bindings coming and going.
    pub fn paired_address(&self, ip: Ipv4Addr) -> Ipv4Addr {
        self.addresses[self.paired_index(ip)]
    }

    fn paired_index(&self, ip: Ipv4Addr) -> usize {
        let hash = u64::from(mix32(u32::from(ip) ^ PAIRING_SEED));
        // The high bits of hash * len: unbiased enough, and no division.
        ((hash * self.addresses.len() as u64) >> 32) as usize
    }

    /// Whether `address` is one of this pool's external addresses.
    pub fn has_address(&self, address: Ipv4Addr) -> bool {
        self.addresses.binary_search(&address).is_ok()
    }

    fn external_group(&self, protocol: u8, address: Ipv4Addr) -> Option<(usize, usize)> {
        let protocol = protocol_index(protocol)?;
        let address = self.addresses.binary_search(&address).ok()?;
        Some((protocol, address))
    }

    fn slot_of(&self, port: u16) -> Option<u32> {
        if !self.ports.contains(&port) || !self.ownership.owns(self.worker, port) {
            return None;
        }
        Some(self.ownership.owned_below(self.worker, u32::from(port)) - self.slot_base)
    }

    fn port_of(&self, slot: u32) -> u16 {
        self.ownership.nth_owned(self.worker, self.slot_base + slot) as u16
    }

    /// The word index (from `base`) and mask of `slot`'s bit.
    fn bit(&self, base: usize, slot: u32) -> (usize, u64) {
        (base + (slot / 64) as usize, 1 << (slot % 64))
    }

    fn is_free(&self, group: usize, slot: u32) -> bool {
        let (word, bit) = self.bit(group * self.words, slot);
        self.free[word] & bit != 0
    }

    fn is_reserved(&self, protocol: usize, slot: u32) -> bool {
        let (word, bit) = self.bit(protocol * self.words, slot);
        self.reserved[word] & bit != 0
    }

    /// Marks a free slot used.
    fn take(&mut self, group: usize, slot: u32) {
        let (word, bit) = self.bit(group * self.words, slot);
        self.free[word] &= !bit;
        if self.free[word] == 0 {
            let (summary_word, summary_bit) = self.bit(group * self.summary_words, slot / 64);
            self.summary[summary_word] &= !summary_bit;
        }
        self.groups[group].free -= 1;
        self.free_total -= 1;
    }

    /// Marks a used slot free.
    fn put(&mut self, group: usize, slot: u32) {
        let (word, bit) = self.bit(group * self.words, slot);
        self.free[word] |= bit;
        let (summary_word, summary_bit) = self.bit(group * self.summary_words, slot / 64);
        self.summary[summary_word] |= summary_bit;
        self.groups[group].free += 1;
        self.free_total += 1;
    }

    /// The first free slot at or after the cursor, wrapping around.
    fn find_free(&self, group: usize) -> Option<u32> {
        if self.groups[group].free == 0 {
            return None;
        }
        let free = &self.free[group * self.words..][..self.words];
        let summary = &self.summary[group * self.summary_words..][..self.summary_words];
        let cursor = self.groups[group].cursor;
        let word = (cursor / 64) as usize;
        let here = free[word] & (u64::MAX << (cursor % 64));
        if here != 0 {
            return Some(word as u32 * 64 + here.trailing_zeros());
        }
        // From word 0 the search may come back to the cursor's word, below the cursor.
        let word = next_set(summary, word + 1).or_else(|| next_set(summary, 0))?;
        Some(word as u32 * 64 + free[word].trailing_zeros())
    }
}

/// The first set bit at or after `from`.
fn next_set(bits: &[u64], from: usize) -> Option<usize> {
    let mut index = from / 64;
    let mut word = *bits.get(index)? & (u64::MAX << (from % 64));
    loop {
        if word != 0 {
            return Some(index * 64 + word.trailing_zeros() as usize);
        }
        index += 1;
        word = *bits.get(index)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    const TCP: u8 = protocol::TCP;
    const UDP: u8 = protocol::UDP;
    const ICMP: u8 = protocol::ICMP;
    const EXT: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);

    fn host(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 1, last)
    }

    fn pool(ports: RangeInclusive<u16>, worker: u16, workers: u16) -> NatPool {
        NatPool::new(&[EXT], ports, worker, Ownership::new(workers), 4096).unwrap()
    }

    #[test]
    fn ownership_arithmetic_matches_brute_force() {
        for workers in 1..=9u16 {
            let ownership = Ownership::new(workers);
            assert!(ownership.mask() as u32 + 1 >= u32::from(workers));
            assert!((ownership.mask() as u32 + 1).is_power_of_two());
            for worker in 0..workers {
                let mut below = 0;
                let mut owned = Vec::new();
                for port in 0..=65536u32 {
                    assert_eq!(ownership.owned_below(worker, port), below);
                    if port <= 65535 && ownership.owns(worker, port as u16) {
                        owned.push(port);
                        below += 1;
                    }
                }
                for (n, &port) in owned.iter().enumerate() {
                    assert_eq!(ownership.nth_owned(worker, n as u32), port);
                }
                let classes: Vec<u16> = ownership.classes(worker).collect();
                assert!(classes.iter().all(|&c| ownership.port_owner(c) == worker));
                assert_eq!(classes.len() as u32, ownership.classes_owned(worker));
            }
            // Every class belongs to exactly one worker.
            let mut all: Vec<u16> = (0..workers).flat_map(|w| ownership.classes(w)).collect();
            all.sort_unstable();
            assert_eq!(all, (0..=ownership.mask()).collect::<Vec<_>>());
            assert_eq!(ownership.classes(workers).count(), 0);
        }
    }

    #[test]
    fn ownership_of_zero_workers_is_one_worker() {
        let ownership = Ownership::new(0);
        assert_eq!((ownership.workers(), ownership.mask()), (1, 0));
        assert!(ownership.owns(0, 12345));
        assert_eq!(ownership.host_owner(host(7)), 0);
        let huge = Ownership::new(u16::MAX);
        assert_eq!(huge.mask(), u16::MAX);
        assert_eq!(huge.port_owner(65535), 0);
    }

    #[test]
    fn host_owner_spreads_a_subnet() {
        let ownership = Ownership::new(4);
        let mut counts = [0u32; 4];
        for i in 0..4096u32 {
            counts[usize::from(ownership.host_owner(Ipv4Addr::from(0x0a00_0000 + i)))] += 1;
        }
        assert!(counts.iter().all(|&c| c > 900), "{counts:?}");
    }

    #[test]
    fn config_errors() {
        let ownership = Ownership::new(2);
        let new = |external: &[Ipv4Addr], ports, worker, capacity| {
            NatPool::new(external, ports, worker, ownership, capacity).map(|_| ())
        };
        assert_eq!(
            new(&[], DEFAULT_PORTS, 0, 16),
            Err(NatPoolError::NoExternalAddress)
        );
        assert_eq!(
            new(&[EXT], DEFAULT_PORTS, 2, 16),
            Err(NatPoolError::WorkerOutOfRange {
                worker: 2,
                workers: 2
            })
        );
        assert_eq!(
            new(&[EXT], DEFAULT_PORTS, 0, 0),
            Err(NatPoolError::BindingCapacity)
        );
        assert_eq!(
            new(&[EXT], DEFAULT_PORTS, 0, MAX_BINDINGS + 1),
            Err(NatPoolError::BindingCapacity)
        );
        // Port 1 belongs to worker 1; port 0 is never used.
        assert_eq!(new(&[EXT], 0..=1, 0, 16), Err(NatPoolError::NoOwnedPorts));
        assert_eq!(
            new(&[EXT], RangeInclusive::new(2000, 1000), 0, 16),
            Err(NatPoolError::NoOwnedPorts)
        );
        assert_eq!(new(&[EXT, EXT], 0..=1, 1, 16), Ok(()));
        let err: Box<dyn std::error::Error> = Box::new(NatPoolError::NoOwnedPorts);
        assert_eq!(err.to_string(), "the worker owns no port in the range");
    }

    #[test]
    fn every_allocated_port_is_owned_by_the_worker() {
        for workers in 1..=5u16 {
            let ownership = Ownership::new(workers);
            let mut total = 0;
            for worker in 0..workers {
                let mut p = pool(1000..=1999, worker, workers);
                let capacity = p.capacity();
                assert_eq!(p.available(), capacity);
                for protocol in [TCP, UDP, ICMP] {
                    let mut seen = HashSet::new();
                    for i in 0..capacity / PROTOCOLS {
                        let internal = (host(1), 5000 + i as u16);
                        let (ip, port) = p.allocate(protocol, internal).unwrap();
                        assert_eq!(ip, EXT);
                        assert!((1000..=1999).contains(&port));
                        assert_eq!(ownership.port_owner(port), worker, "workers {workers}");
                        assert!(seen.insert(port));
                    }
                    assert_eq!(p.allocate(protocol, (host(1), 9999)), None);
                }
                assert_eq!((p.available(), p.in_use()), (0, capacity));
                total += capacity;
            }
            // The workers' pools partition the range.
            assert_eq!(total, 1000 * PROTOCOLS, "workers {workers}");
        }
    }

    #[test]
    fn internal_port_is_preserved_when_owned_and_free() {
        let mut p = pool(DEFAULT_PORTS, 1, 4);
        // 40001 & 3 == 1: owned by worker 1.
        assert_eq!(p.allocate(TCP, (host(2), 40001)), Some((EXT, 40001)));
        // Same port from another host: taken on the only address, so another owned port.
        let (_, other) = p.allocate(TCP, (host(3), 40001)).unwrap();
        assert_ne!(other, 40001);
        assert!(p.ownership().owns(1, other));
        // A port the worker does not own is never kept.
        let (_, moved) = p.allocate(TCP, (host(4), 40002)).unwrap();
        assert!(p.ownership().owns(1, moved));
        // Out of range is not kept either.
        let (_, low) = p.allocate(UDP, (host(2), 53)).unwrap();
        assert!(low >= 1024);
        // Protocols are separate namespaces.
        assert_eq!(p.allocate(UDP, (host(5), 40001)), Some((EXT, 40001)));
        assert_eq!(p.allocate(ICMP, (host(5), 40001)), Some((EXT, 40001)));
    }

    #[test]
    fn search_rotates_instead_of_reusing_the_last_port() {
        let mut p = pool(1024..=1027, 0, 1);
        let a = p.allocate(UDP, (host(1), 1)).unwrap();
        let b = p.allocate(UDP, (host(1), 2)).unwrap();
        assert_eq!((a.1, b.1), (1024, 1025));
        assert!(p.release(UDP, a));
        // 1024 is free again, but the cursor has moved on.
        assert_eq!(p.allocate(UDP, (host(1), 3)), Some((EXT, 1026)));
        assert_eq!(p.allocate(UDP, (host(1), 4)), Some((EXT, 1027)));
        assert_eq!(p.allocate(UDP, (host(1), 5)), Some((EXT, 1024)));
    }

    #[test]
    fn endpoint_independent_mapping_is_refcounted() {
        let mut p = pool(DEFAULT_PORTS, 0, 1);
        let internal = (host(9), 5555);
        let external = p.allocate(UDP, internal).unwrap();
        assert_eq!(external, (EXT, 5555));
        // A second flow of the same endpoint (another destination) shares the binding.
        assert_eq!(p.allocate(UDP, internal), Some(external));
        assert_eq!(p.in_use(), 1);
        assert_eq!(p.available(), p.capacity() - 1);
        assert_eq!(p.lookup_external(UDP, external), Some(internal));
        assert_eq!(p.lookup_internal(UDP, internal, EXT), Some(external));
        assert_eq!(p.lookup_external(TCP, external), None);

        assert!(p.release(UDP, external));
        assert_eq!(p.lookup_external(UDP, external), Some(internal));
        assert!(p.release(UDP, external));
        assert_eq!(p.lookup_external(UDP, external), None);
        assert_eq!(p.lookup_internal(UDP, internal, EXT), None);
        assert_eq!((p.in_use(), p.available()), (0, p.capacity()));
        assert!(!p.release(UDP, external));
        assert!(!p.release(UDP, (Ipv4Addr::new(1, 2, 3, 4), 5555)));
        assert!(!p.release(47, external));
        assert_eq!(p.allocate(47, internal), None);
    }

    #[test]
    fn paired_pooling_keeps_a_host_on_one_address() {
        let addresses: Vec<Ipv4Addr> = (1..=4).map(|i| Ipv4Addr::new(198, 51, 100, i)).collect();
        for workers in [1u16, 2, 3] {
            let ownership = Ownership::new(workers);
            let mut used = HashSet::new();
            for worker in 0..workers {
                let mut p =
                    NatPool::new(&addresses, DEFAULT_PORTS, worker, ownership, 1 << 16).unwrap();
                for i in 0..512u32 {
                    let ip = Ipv4Addr::from(0x0a00_0000 + i);
                    if ownership.host_owner(ip) != worker {
                        continue;
                    }
                    let mut mine = HashSet::new();
                    for (n, protocol) in [TCP, UDP, ICMP, TCP, UDP].into_iter().enumerate() {
                        let (external, _) = p.allocate(protocol, (ip, 1000 + n as u16)).unwrap();
                        assert_eq!(external, p.paired_address(ip));
                        mine.insert(external);
                        used.insert((worker, external));
                    }
                    assert_eq!(mine.len(), 1, "{ip} spread over {mine:?}");
                }
            }
            // Each worker's hosts still use every address.
            assert_eq!(used.len(), 4 * usize::from(workers), "workers {workers}");
        }
    }

    #[test]
    fn exhaustion_then_recovery() {
        let mut p = pool(2000..=2007, 0, 1);
        let bound: Vec<_> = (0..8)
            .map(|i| p.allocate(TCP, (host(i), 80)).unwrap())
            .collect();
        assert_eq!(p.allocate(TCP, (host(100), 80)), None);
        assert_eq!(p.available(), 2 * 8);
        // An existing binding still gets another reference.
        assert_eq!(p.allocate(TCP, (host(0), 80)), Some(bound[0]));
        assert!(p.release(TCP, bound[3]));
        assert_eq!(p.allocate(TCP, (host(100), 80)), Some(bound[3]));

        // The binding table is a separate limit.
        let mut small = NatPool::new(&[EXT], DEFAULT_PORTS, 0, Ownership::new(1), 2).unwrap();
        let a = small.allocate(UDP, (host(1), 1)).unwrap();
        small.allocate(TCP, (host(1), 1)).unwrap();
        assert_eq!(small.allocate(ICMP, (host(1), 1)), None);
        assert!(small.release(UDP, a));
        assert!(small.allocate(ICMP, (host(1), 1)).is_some());
    }

    #[test]
    fn a_host_spraying_new_source_ports_takes_its_limit_and_others_still_get_ports() {
        // 256 UDP ports, at most 100 per host.
        let mut p = pool(3000..=3255, 0, 1).with_host_limit(100, 16);
        let sprayer = host(1);
        let mut sprayed = Vec::new();
        for port in 10000.. {
            match p.allocate_checked(UDP, (sprayer, port)) {
                Ok(external) => sprayed.push(external),
                Err(error) => {
                    assert_eq!(error, AllocError::HostLimit);
                    break;
                }
            }
        }
        assert_eq!(sprayed.len(), 100);
        assert_eq!((p.host_ports(sprayer), p.hosts_at_limit()), (100, 1));
        // Its existing bindings still serve new flows (endpoint-independent mapping).
        assert_eq!(p.allocate_checked(UDP, (sprayer, 10000)), Ok(sprayed[0]));
        // The limit spans protocols: a binding is a port whatever its protocol.
        assert_eq!(
            p.allocate_checked(TCP, (sprayer, 1)),
            Err(AllocError::HostLimit)
        );
        // Every other host still gets ports.
        for i in 2..20 {
            assert!(p.allocate_checked(UDP, (host(i), 53)).is_ok(), "host {i}");
        }
        // Exhaustion is told apart from the limit.
        let mut others = 2;
        let exhausted = loop {
            others += 1;
            match p.allocate_checked(UDP, (host(others % 200 + 20), others as u16)) {
                Ok(_) => continue,
                Err(error) => break error,
            }
        };
        assert_eq!(exhausted, AllocError::Exhausted);
        // The last release of a binding gives the host its room back.
        assert!(p.release(UDP, sprayed[0]));
        assert_eq!(p.host_ports(sprayer), 100);
        assert!(p.release(UDP, sprayed[0]));
        assert_eq!((p.host_ports(sprayer), p.hosts_at_limit()), (99, 0));
        for external in &sprayed[1..] {
            assert!(p.release(UDP, *external));
        }
        assert_eq!(p.host_ports(sprayer), 0);
        assert!(p.allocate_checked(UDP, (sprayer, 1)).is_ok());
    }

    #[test]
    fn without_a_host_limit_nothing_is_counted() {
        let mut p = pool(3000..=3255, 0, 1);
        for port in 0..256 {
            assert!(p.allocate_checked(UDP, (host(1), port)).is_ok());
        }
        assert_eq!(
            p.allocate_checked(UDP, (host(1), 999)),
            Err(AllocError::Exhausted)
        );
        assert_eq!((p.host_ports(host(1)), p.hosts_at_limit()), (0, 0));
    }

    /// One worker's pool of ports 1024-1100 on two external addresses.
    fn two_address_pool() -> NatPool {
        NatPool::new(
            &[EXT, Ipv4Addr::new(203, 0, 113, 2)],
            1024..=1100,
            0,
            Ownership::new(1),
            4096,
        )
        .unwrap()
    }

    #[test]
    fn an_endpoint_leaving_by_two_uplinks_holds_a_binding_on_each_address() {
        let mut p = two_address_pool();
        let second = Ipv4Addr::new(203, 0, 113, 2);
        let internal = (host(1), 1050);
        let on_first = p.allocate_at(UDP, internal, EXT).unwrap();
        let on_second = p.allocate_at(UDP, internal, second).unwrap();
        assert_eq!((on_first, on_second), ((EXT, 1050), (second, 1050)));
        // Endpoint-independent per address: another flow on the first shares its binding.
        assert_eq!(p.allocate_at(UDP, internal, EXT), Ok(on_first));
        assert_eq!(p.in_use(), 2);
        assert_eq!(p.lookup_internal(UDP, internal, second), Some(on_second));
        assert_eq!(p.lookup_external(UDP, on_second), Some(internal));
        let elsewhere = Ipv4Addr::new(198, 51, 100, 1);
        assert_eq!(
            p.allocate_at(UDP, internal, elsewhere),
            Err(AllocError::UnknownAddress)
        );
        assert!(p.release(UDP, on_second));
        assert_eq!(p.lookup_internal(UDP, internal, second), None);
        assert_eq!(p.lookup_internal(UDP, internal, EXT), Some(on_first));
    }

    #[test]
    fn reserved_ports_are_never_allocated() {
        let mut p = two_address_pool();
        let full = p.capacity();
        p.reserve(TCP, 1025);
        p.reserve(TCP, 1025);
        p.reserve(TCP, 80); // out of range: nothing to do
        p.reserve(47, 1026);
        assert_eq!(p.capacity(), full - 2);
        assert_eq!(p.available(), full - 2);
        // Not even by port preservation.
        let (_, port) = p.allocate(TCP, (host(1), 1025)).unwrap();
        assert_ne!(port, 1025);
        assert_eq!(p.allocate(UDP, (host(1), 1025)).unwrap().1, 1025);
        for i in 0..200u16 {
            if let Some((_, port)) = p.allocate(TCP, (host(2), i)) {
                assert_ne!(port, 1025);
            }
        }

        // Reserving a bound port takes effect when the binding goes.
        let (ip, port) = p.allocate(UDP, (host(3), 1030)).unwrap();
        assert_eq!(port, 1030);
        p.reserve(UDP, 1030);
        assert!(p.release(UDP, (ip, port)));
        assert_eq!(
            p.allocate(UDP, (host(3), 1030)).map(|e| e.1 != 1030),
            Some(true)
        );
    }

    #[test]
    fn unreserved_ports_come_back_once_unbound() {
        let mut p = two_address_pool();
        let full = p.capacity();
        p.reserve(TCP, 1025);
        p.unreserve(TCP, 1025);
        p.unreserve(TCP, 1025); // twice: nothing more to give back
        p.unreserve(TCP, 80); // out of range
        assert_eq!((p.capacity(), p.available()), (full, full));
        assert_eq!(p.allocate(TCP, (host(1), 1025)).unwrap().1, 1025);

        // A binding made before the reservation keeps the port until released, then frees it.
        let (ip, port) = p.allocate(UDP, (host(3), 1030)).unwrap();
        p.reserve(UDP, 1030);
        p.unreserve(UDP, 1030);
        assert_eq!(
            p.available(),
            full - 2,
            "the other address's 1030 is free again"
        );
        assert!(p.release(UDP, (ip, port)));
        assert_eq!(p.available(), full - 1);
        assert_eq!(p.allocate(UDP, (host(3), 1030)).unwrap().1, 1030);
    }

    #[test]
    fn search_crosses_words_and_wraps() {
        // 1000 slots: 16 bitmap words, so the summary is consulted.
        let mut p = pool(1..=1000, 0, 1);
        let mut held: Vec<(Ipv4Addr, u16)> = (0..1000u32)
            .map(|i| p.allocate(UDP, (Ipv4Addr::from(i), 0)).unwrap())
            .collect();
        assert_eq!(p.allocate(UDP, (host(1), 0)), None);
        // Free one port far behind the cursor (which has wrapped to slot 0).
        let victim = held.remove(700);
        assert!(p.release(UDP, victim));
        assert_eq!(p.allocate(UDP, (host(1), 0)), Some(victim));
        let victim = held.remove(10);
        assert!(p.release(UDP, victim));
        assert_eq!(p.allocate(UDP, (host(2), 0)), Some(victim));
    }

    type Endpoint = (Ipv4Addr, u16);

    #[derive(Clone, Debug)]
    enum Op {
        Allocate { protocol: u8, host: u8, port: u16 },
        Release { index: usize },
        Reserve { protocol: u8, port: u16 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let protocol = prop_oneof![Just(TCP), Just(UDP), Just(ICMP)];
        prop_oneof![
            6 => (protocol.clone(), 0..12u8, 1020..1060u16)
                .prop_map(|(protocol, host, port)| Op::Allocate { protocol, host, port }),
            4 => any::<usize>().prop_map(|index| Op::Release { index }),
            1 => (protocol, 1020..1060u16).prop_map(|(protocol, port)| Op::Reserve { protocol, port }),
        ]
    }

    #[test]
    fn ipv6_pairs_spread_over_the_workers() {
        let ownership = Ownership::new(4);
        let server = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
        let mut per_worker = [0u32; 4];
        for client in 1..=4000u16 {
            let client = Ipv6Addr::new(0x2001, 0xdb8, 10, 0, 0x1234, client, 7, 9);
            per_worker[usize::from(ownership.pair_owner6(client, server))] += 1;
        }
        // A busy server's clients do not all land on one worker.
        assert!(
            per_worker.iter().all(|&n| (700..1300).contains(&n)),
            "{per_worker:?}"
        );
    }

    proptest! {
        /// Both directions of an IPv6 flow have one owner, among the workers there are.
        #[test]
        fn an_ipv6_pair_has_one_owner_both_ways(
            workers in 1..=8u16,
            a in any::<u128>(),
            b in any::<u128>(),
        ) {
            let ownership = Ownership::new(workers);
            let (a, b) = (Ipv6Addr::from(a), Ipv6Addr::from(b));
            let owner = ownership.pair_owner6(a, b);
            prop_assert!(owner < workers);
            prop_assert_eq!(owner, ownership.pair_owner6(b, a));
        }

        #[test]
        fn random_alloc_release_never_double_allocates(
            workers in 1..=4u16,
            worker_pick in any::<prop::sample::Index>(),
            addresses in 1..=3u8,
            ops in prop::collection::vec(op(), 0..300),
        ) {
            let worker = worker_pick.index(usize::from(workers)) as u16;
            let ownership = Ownership::new(workers);
            let external: Vec<Ipv4Addr> = (1..=addresses).map(|i| Ipv4Addr::new(203, 0, 113, i)).collect();
            let mut p = NatPool::new(&external, 1024..=1050, worker, ownership, 24).unwrap();
            // Model: internal endpoint -> (external, refcount), and the reverse.
            let mut model: HashMap<(u8, Ipv4Addr, u16), (Endpoint, u32)> = HashMap::new();
            let mut owners: HashMap<(u8, Endpoint), Endpoint> = HashMap::new();
            let mut reserved: HashSet<(u8, u16)> = HashSet::new();
            let mut held: Vec<(u8, Endpoint)> = Vec::new();
            for op in ops {
                match op {
                    Op::Allocate { protocol, host: h, port } => {
                        let internal = (host(h), port);
                        let result = p.allocate(protocol, internal);
                        match model.get_mut(&(protocol, internal.0, internal.1)) {
                            Some((external, count)) => {
                                prop_assert_eq!(result, Some(*external));
                                *count += 1;
                            }
                            None => {
                                if let Some(external) = result {
                                    prop_assert!(ownership.owns(worker, external.1));
                                    prop_assert!((1024..=1050).contains(&external.1));
                                    prop_assert!(!reserved.contains(&(protocol, external.1)));
                                    let previous = owners.insert((protocol, external), internal);
                                    prop_assert!(previous.is_none(), "{:?} handed out twice", external);
                                    model.insert((protocol, internal.0, internal.1), (external, 1));
                                } else if model.len() < 24 {
                                    // Only allowed when the host's paired address is full.
                                    let address = p.paired_address(internal.0);
                                    let mut taken: HashSet<u16> = owners
                                        .keys()
                                        .filter(|(pr, e)| *pr == protocol && e.0 == address)
                                        .map(|(_, e)| e.1)
                                        .collect();
                                    taken.extend(reserved.iter().filter(|r| r.0 == protocol).map(|r| r.1));
                                    let owned = (1024..=1050u16).filter(|&q| ownership.owns(worker, q)).count();
                                    prop_assert_eq!(taken.len(), owned);
                                }
                            }
                        }
                        if let Some(external) = result {
                            held.push((protocol, external));
                        }
                    }
                    Op::Release { index } => {
                        if held.is_empty() {
                            continue;
                        }
                        let (protocol, external) = held.swap_remove(index % held.len());
                        prop_assert!(p.release(protocol, external));
                        let internal = owners[&(protocol, external)];
                        let key = (protocol, internal.0, internal.1);
                        let count = &mut model.get_mut(&key).unwrap().1;
                        *count -= 1;
                        if *count == 0 {
                            model.remove(&key);
                            owners.remove(&(protocol, external));
                            prop_assert_eq!(p.lookup_external(protocol, external), None);
                        }
                    }
                    Op::Reserve { protocol, port } => {
                        p.reserve(protocol, port);
                        if ownership.owns(worker, port) && (1024..=1050).contains(&port) {
                            reserved.insert((protocol, port));
                        }
                    }
                }
                prop_assert_eq!(p.in_use(), model.len());
                for (&(protocol, external), &internal) in &owners {
                    prop_assert_eq!(p.lookup_external(protocol, external), Some(internal));
                }
                // Free ports plus bound unreserved ports account for the whole capacity.
                let bound_unreserved = owners
                    .keys()
                    .filter(|(protocol, external)| !reserved.contains(&(*protocol, external.1)))
                    .count();
                prop_assert_eq!(p.available() + bound_unreserved, p.capacity());
            }
        }
    }
    #[test]
    fn restore_binds_exactly_the_port_given_and_never_twice() {
        let mut p = two_address_pool();
        let other = Ipv4Addr::new(203, 0, 113, 2);
        let full = p.available();
        p.restore(TCP, (host(1), 5000), (other, 1050)).unwrap();
        assert_eq!(p.lookup_external(TCP, (other, 1050)), Some((host(1), 5000)));
        assert_eq!(
            p.lookup_internal(TCP, (host(1), 5000), other),
            Some((other, 1050))
        );
        assert_eq!((p.in_use(), p.available()), (1, full - 1));
        // A second flow of the same binding takes another reference...
        p.restore(TCP, (host(1), 5000), (other, 1050)).unwrap();
        // ...and nobody else gets the port, by restore or by allocation.
        assert_eq!(
            p.restore(TCP, (host(2), 5000), (other, 1050)),
            Err(RestoreError::Conflict)
        );
        assert_eq!(
            p.restore(TCP, (host(1), 5000), (other, 1051)),
            Err(RestoreError::Conflict)
        );
        for i in 0..200u16 {
            if let Some(endpoint) = p.allocate(TCP, (host(3), i)) {
                assert_ne!(endpoint, (other, 1050));
            }
        }
        // EIM: a new flow of the restored endpoint on its address shares its binding.
        assert_eq!(
            p.allocate_at(TCP, (host(1), 5000), other),
            Ok((other, 1050))
        );
        assert!(p.release(TCP, (other, 1050)));
        assert!(p.release(TCP, (other, 1050)));
        assert_eq!(p.lookup_external(TCP, (other, 1050)), Some((host(1), 5000)));
        assert!(p.release(TCP, (other, 1050)));
        assert_eq!(p.lookup_external(TCP, (other, 1050)), None);
    }

    #[test]
    fn restore_refuses_what_the_pool_does_not_own() {
        let mut p = two_address_pool();
        p.reserve(TCP, 1025);
        let refused = [
            (
                TCP,
                Ipv4Addr::new(198, 51, 100, 1),
                1050,
                RestoreError::NotOurs,
            ),
            (TCP, EXT, 80, RestoreError::NotOurs),
            (TCP, EXT, 2000, RestoreError::NotOurs),
            (47, EXT, 1050, RestoreError::NotOurs),
            (TCP, EXT, 1025, RestoreError::Conflict),
        ];
        for (protocol, address, port, error) in refused {
            assert_eq!(
                p.restore(protocol, (host(1), 4000), (address, port)),
                Err(error),
                "{protocol} {address}:{port}"
            );
        }
        assert_eq!(p.in_use(), 0);
        // Ports of another worker's classes.
        let mut odd = pool(1024..=2047, 1, 2);
        assert_eq!(
            odd.restore(UDP, (host(1), 4000), (EXT, 1030)),
            Err(RestoreError::NotOurs)
        );
        odd.restore(UDP, (host(1), 4000), (EXT, 1031)).unwrap();
    }

    #[test]
    fn restore_counts_against_the_host_limit() {
        let mut p = two_address_pool().with_host_limit(2, 64);
        p.restore(TCP, (host(1), 1), (EXT, 1030)).unwrap();
        p.restore(UDP, (host(1), 1), (EXT, 1030)).unwrap();
        assert_eq!(p.host_ports(host(1)), 2);
        assert_eq!(
            p.restore(TCP, (host(1), 2), (EXT, 1031)),
            Err(RestoreError::HostLimit)
        );
        assert!(p.release(UDP, (EXT, 1030)));
        assert_eq!(p.host_ports(host(1)), 1);
    }

    fn block_events(log: &NatLog) -> Vec<(NatEventKind, Ipv4Addr, PortBlock)> {
        let mut events = Vec::new();
        log.drain(|event| events.push((event.kind, event.internal.0, event.block.unwrap())));
        events
    }

    #[test]
    fn port_blocks_give_each_host_its_own_ports_and_one_log_line_per_block() {
        let log = Arc::new(NatLog::new(64));
        let mut p = pool(1024..=65535, 1, 2)
            .with_port_blocks(64, 2)
            .unwrap()
            .with_log(Some(log.clone()));
        let mut a = Vec::new();
        for port in [5000, 5001, 5002] {
            a.push(p.allocate(UDP, (host(1), port)).unwrap());
        }
        a.push(p.allocate(TCP, (host(1), 6000)).unwrap());
        let b = p.allocate(UDP, (host(2), 5000)).unwrap();
        let events = block_events(&log);
        assert_eq!(events.len(), 2, "one block each: {events:?}");
        assert_eq!(p.blocks_in_use(), (2, 504));
        let (kind, holder, block) = events[0];
        assert_eq!((kind, holder), (NatEventKind::BlockCreate, host(1)));
        // Worker 1 of 2 owns the odd ports: the block is 64 of them, stepping by 2.
        assert_eq!((block.step, block.ports), (2, 64));
        assert_eq!(block.last, block.first + 2 * 63);
        for (_, port) in &a {
            assert!(
                (block.first..=block.last).contains(port) && port % 2 == 1,
                "{port}"
            );
        }
        let other = events[1].2;
        assert!(other.first > block.last || other.last < block.first);
        assert!((other.first..=other.last).contains(&b.1));
        // The host's ports go back one by one; the block with the last of them.
        for (i, &(address, port)) in a.iter().enumerate() {
            let protocol = if i == 3 { TCP } else { UDP };
            assert!(p.release(protocol, (address, port)));
        }
        let events = block_events(&log);
        assert_eq!(events, [(NatEventKind::BlockDelete, host(1), block)]);
    }

    #[test]
    fn a_host_gets_more_blocks_up_to_its_limit() {
        let mut p = pool(1024..=65535, 0, 1).with_port_blocks(64, 2).unwrap();
        for port in 0..128 {
            p.allocate_checked(UDP, (host(1), 10_000 + port)).unwrap();
        }
        assert_eq!(
            p.allocate_checked(UDP, (host(1), 20_000)),
            Err(AllocError::HostLimit)
        );
        // Its TCP ports come from the same blocks, which it holds in every protocol.
        assert!(p.allocate_checked(TCP, (host(1), 20_000)).is_ok());
        assert!(p.allocate_checked(UDP, (host(2), 20_000)).is_ok());
    }

    #[test]
    fn port_blocks_need_aligned_sizes_and_power_of_two_workers() {
        let blocks = |size, workers| {
            pool(1024..=65535, 0, workers)
                .with_port_blocks(size, 2)
                .map(|_| ())
        };
        assert_eq!(blocks(100, 1), Err(NatPoolError::PortBlockSize));
        assert_eq!(blocks(0, 1), Err(NatPoolError::PortBlockSize));
        assert_eq!(blocks(64, 3), Err(NatPoolError::PortBlockWorkers));
        assert_eq!(blocks(64, 4), Ok(()));
    }

    #[test]
    fn a_restored_mapping_brings_its_block_and_another_host_cannot_share_it() {
        let mut p = pool(1024..=65535, 0, 1).with_port_blocks(64, 1).unwrap();
        p.restore(UDP, (host(1), 5000), (EXT, 1030)).unwrap();
        assert_eq!(
            p.restore(UDP, (host(2), 5000), (EXT, 1031)),
            Err(RestoreError::Conflict)
        );
        // The host's next mapping is in the restored block: 1024..=1087.
        let (_, port) = p.allocate(TCP, (host(1), 7000)).unwrap();
        assert!((1024..=1087).contains(&port), "{port}");
        assert_eq!(
            p.restore(UDP, (host(1), 5001), (EXT, 2000)),
            Err(RestoreError::HostLimit)
        );
    }

    proptest! {
        /// Through any allocations and releases by blocks: every binding's port is in a block
        /// its host holds, no block has two holders, and the pool's counts agree.
        #[test]
        fn blocks_are_never_shared(ops in proptest::collection::vec((0..6u32, 0..40u16, any::<bool>()), 0..300)) {
            let mut p = pool(1024..=2047, 1, 2).with_port_blocks(64, 2).unwrap();
            let mut held: Vec<(u8, Ipv4Addr, (Ipv4Addr, u16))> = Vec::new();
            for (h, port, allocate) in ops {
                let protocol = if port % 2 == 0 { UDP } else { TCP };
                if allocate {
                    if let Some(external) = p.allocate(protocol, (host(h as u8), 4000 + port)) {
                        held.push((protocol, host(h as u8), external));
                    }
                } else if let Some(at) = held.iter().position(|&(_, owner, _)| owner == host(h as u8)) {
                    let (protocol, _, external) = held.swap_remove(at);
                    prop_assert!(p.release(protocol, external));
                }
                let blocks = p.blocks.as_ref().unwrap();
                for &(_, owner, (_, port)) in &held {
                    let slot = p.slot_of(port).unwrap();
                    prop_assert_eq!(blocks.holder(blocks.block_of(0, slot)), Some(owner));
                }
            }
            for (protocol, _, external) in held.drain(..) {
                prop_assert!(p.release(protocol, external));
            }
            prop_assert_eq!(p.in_use(), 0);
            let mut any = false;
            p.held_blocks(|_, _, _| any = true);
            prop_assert!(!any, "every block is back once every mapping is");
        }
    }
}

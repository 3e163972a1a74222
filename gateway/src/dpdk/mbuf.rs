use std::ptr::NonNull;

use super::error::{DpdkError, Result};
use super::mempool::Mempool;

/// Packets per rx/tx burst, as in DPDK's examples: big enough to amortise the call, small
/// enough to stay in L1.
pub const BURST_SIZE: usize = 32;

/// `RTE_MBUF_F_RX_L4_CKSUM_MASK` and `_GOOD` from rte_mbuf_core.h (bindgen types them as
/// 32-bit; `ol_flags` is 64).
const RX_L4_CKSUM_MASK: u64 = dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK as u64;
const RX_L4_CKSUM_GOOD: u64 = dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD as u64;
/// The NIC (or the PMD: af_packet takes the kernel's tag) removed an 802.1Q tag into
/// `vlan_tci`.
const RX_VLAN_STRIPPED: u64 = dpdk_sys::RTE_MBUF_F_RX_VLAN_STRIPPED as u64;
/// Asks the NIC to insert an 802.1Q tag with the mbuf's `vlan_tci` (bindgen types it 64-bit).
const TX_VLAN: u64 = dpdk_sys::RTE_MBUF_F_TX_VLAN;
/// 802.1Q's TPID, and what a tag adds to a frame.
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
const VLAN_TAG_LEN: usize = 4;
/// The two MAC addresses a tag follows.
const MAC_ADDRESSES_LEN: usize = 12;

/// The `rte_mbuf` fields read and written directly below, checked at compile time against
/// the layout dpdk-sys/shim.h declares, which shim.c checks against the C header with
/// `_Static_assert`. bindgen, the C compiler and this file therefore agree, or nothing builds.
mod layout {
    use dpdk_sys::rte_mbuf;
    use std::mem::{offset_of, size_of};

    /// The size of a field's type, from a never-called accessor.
    const fn size_of_field<T, F>(_: fn(&T) -> &F) -> usize {
        size_of::<F>()
    }

    macro_rules! check_field {
        ($field:ident, $offset:ident, $size:ident) => {
            const _: () = assert!(
                offset_of!(rte_mbuf, $field) == dpdk_sys::$offset as usize,
                concat!(
                    "bindgen's rte_mbuf.",
                    stringify!($field),
                    " is not where shim.h says"
                )
            );
            const _: () = assert!(
                size_of_field(|m: &rte_mbuf| &m.$field) == dpdk_sys::$size as usize,
                concat!(
                    "bindgen's rte_mbuf.",
                    stringify!($field),
                    " is not the size shim.h says"
                )
            );
        };
    }

    const _: () = assert!(size_of::<rte_mbuf>() == dpdk_sys::SHIM_MBUF_SIZE as usize);
    check_field!(buf_addr, SHIM_MBUF_BUF_ADDR_OFFSET, SHIM_MBUF_BUF_ADDR_SIZE);
    check_field!(data_off, SHIM_MBUF_DATA_OFF_OFFSET, SHIM_MBUF_DATA_OFF_SIZE);
    check_field!(nb_segs, SHIM_MBUF_NB_SEGS_OFFSET, SHIM_MBUF_NB_SEGS_SIZE);
    check_field!(port, SHIM_MBUF_PORT_OFFSET, SHIM_MBUF_PORT_SIZE);
    check_field!(ol_flags, SHIM_MBUF_OL_FLAGS_OFFSET, SHIM_MBUF_OL_FLAGS_SIZE);
    check_field!(pkt_len, SHIM_MBUF_PKT_LEN_OFFSET, SHIM_MBUF_PKT_LEN_SIZE);
    check_field!(data_len, SHIM_MBUF_DATA_LEN_OFFSET, SHIM_MBUF_DATA_LEN_SIZE);
    check_field!(vlan_tci, SHIM_MBUF_VLAN_TCI_OFFSET, SHIM_MBUF_VLAN_TCI_SIZE);
    check_field!(buf_len, SHIM_MBUF_BUF_LEN_OFFSET, SHIM_MBUF_BUF_LEN_SIZE);
}

/// One owned packet buffer, freed exactly once: on drop, or by whoever `into_raw` hands it to.
/// Deliberately not `Clone`: a cloned owner would free twice. Nor is there any way to share,
/// attach or reference-count one: what MBUF_FAST_FREE relies on (see `mempool.rs`).
/// Transparent, so that a batch's pointer slots can be lent out as `&mut Mbuf`
/// (`MbufBatch::iter_mut`): `NonNull<T>` has the layout of `*mut T`.
#[repr(transparent)]
pub struct Mbuf {
    ptr: NonNull<dpdk_sys::rte_mbuf>,
}

// SAFETY: an mbuf has one owner at a time; moving that ownership across threads is how
// DPDK hands packets between lcores.
unsafe impl Send for Mbuf {}

impl Mbuf {
    pub fn alloc(pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: the pool is alive; NULL means the pool is empty.
        let ptr = unsafe { dpdk_sys::shim_rte_pktmbuf_alloc(pool.as_ptr()) };
        NonNull::new(ptr).map(|ptr| Mbuf { ptr })
    }

    /// Takes ownership of a raw mbuf pointer.
    ///
    /// # Safety
    /// `ptr` must be a valid mbuf that nobody else owns or will free.
    pub(crate) unsafe fn from_raw(ptr: *mut dpdk_sys::rte_mbuf) -> Mbuf {
        Mbuf {
            ptr: NonNull::new_unchecked(ptr),
        }
    }

    /// The raw mbuf, for a DPDK call that only reads it while `self` is borrowed.
    pub(crate) fn as_raw(&self) -> *const dpdk_sys::rte_mbuf {
        self.ptr.as_ptr()
    }

    /// Gives up ownership without freeing; the receiver (a driver, a ring) now owns it.
    pub(crate) fn into_raw(self) -> *mut dpdk_sys::rte_mbuf {
        let ptr = self.ptr.as_ptr();
        std::mem::forget(self);
        ptr
    }

    /// The mbuf header. Plain field reads and writes are inlined here rather than going
    /// through the C shim: they run several times per packet.
    #[inline]
    fn header(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: the pointer is a valid mbuf we own for as long as &self lives.
        unsafe { self.ptr.as_ref() }
    }

    #[inline]
    fn data_ptr(&self) -> *mut u8 {
        let header = self.header();
        // SAFETY: data_off is within the buffer by the mbuf invariant (rte_pktmbuf_mtod).
        unsafe { (header.buf_addr as *mut u8).add(usize::from(header.data_off)) }
    }

    /// Bytes of the packet's first segment. The gateway never enables scatter, so every
    /// packet it receives has one segment.
    /// A fresh mbuf from `pool` holding a copy of `bytes` (a frame the control thread built,
    /// or one it copies for a twin); None when the pool is empty or the frame does not fit.
    pub fn from_bytes(pool: &Mempool, bytes: &[u8]) -> Option<Mbuf> {
        let mut mbuf = Mbuf::alloc(pool)?;
        mbuf.room_mut()
            .get_mut(..bytes.len())?
            .copy_from_slice(bytes);
        mbuf.set_len(bytes.len()).ok()?;
        Some(mbuf)
    }

    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: data_off + data_len lies inside the buffer we own; the bytes are plain u8.
        unsafe { std::slice::from_raw_parts(self.data_ptr(), self.len()) }
    }

    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), self.len()) }
    }

    /// The packet's bytes plus the tailroom after them, so a packet can be rewritten into a
    /// longer one in place (an ICMP error quoting it, say). Set the new length with `set_len`.
    #[inline]
    pub fn room_mut(&mut self) -> &mut [u8] {
        let header = self.header();
        let room = usize::from(header.buf_len).saturating_sub(usize::from(header.data_off));
        // SAFETY: from data_off to buf_len is the buffer we own; stale tailroom bytes are
        // plain bytes, any value is valid, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data_ptr(), room) }
    }

    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.header().data_len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments; more than one means the packet does not fit `data()`.
    #[inline]
    pub fn segments(&self) -> u16 {
        self.header().nb_segs
    }

    /// Sets the length of a single-segment packet, within its buffer.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        let header = self.header();
        let fits = header.nb_segs == 1
            && usize::from(header.data_off) + len <= usize::from(header.buf_len);
        if !fits {
            return Err(DpdkError::Invalid {
                what: "mbuf length",
                detail: format!("{len} bytes do not fit the buffer"),
            });
        }
        // SAFETY: we own the mbuf; the length was checked against the buffer above, and
        // fits in u16 because buf_len does.
        unsafe {
            let header = self.ptr.as_mut();
            header.data_len = len as u16;
            header.pkt_len = len as u32;
        }
        Ok(())
    }

    /// The port the packet arrived on.
    #[inline]
    pub fn port(&self) -> super::PortId {
        super::PortId(self.header().port)
    }

    /// Overwrites the port field. The gateway reuses it on its own rings to say which
    /// interface a packet leaves by.
    pub fn set_port(&mut self, port: u16) {
        // SAFETY: writes a field of the mbuf we own.
        unsafe { self.ptr.as_mut().port = port }
    }

    /// The NIC's RSS hash of the packet (0 when the port computed none).
    pub fn rss_hash(&self) -> u32 {
        // SAFETY: reads a field of the mbuf we own.
        unsafe { dpdk_sys::shim_rte_mbuf_rss_hash(self.ptr.as_ptr()) }
    }

    /// The NIC verified the packet's TCP or UDP checksum and found it good. Only with the
    /// port's RX checksum offloads on; otherwise the flag is unknown and this says false.
    #[inline]
    pub fn rx_l4_checksum_good(&self) -> bool {
        // SAFETY: reads a field of the mbuf we own.
        let ol_flags = unsafe { self.ptr.as_ref().ol_flags };
        // Two bits: GOOD alone; both set means NONE (no valid checksum), not good.
        ol_flags & RX_L4_CKSUM_MASK == RX_L4_CKSUM_GOOD
    }

    /// The TCI of an 802.1Q tag the port removed on receipt (VLAN stripping), if it did.
    #[inline]
    pub fn rx_stripped_vlan(&self) -> Option<u16> {
        let header = self.header();
        (header.ol_flags & RX_VLAN_STRIPPED != 0).then_some(header.vlan_tci)
    }

    /// The TCI of the frame's own 802.1Q tag, left in place; None if the frame has none.
    #[inline]
    pub fn vlan_tag(&self) -> Option<u16> {
        let frame = self.data();
        let tagged = frame.len() >= MAC_ADDRESSES_LEN + VLAN_TAG_LEN + 2
            && frame[MAC_ADDRESSES_LEN..MAC_ADDRESSES_LEN + 2] == ETHERTYPE_VLAN.to_be_bytes();
        tagged.then(|| u16::from_be_bytes([frame[14], frame[15]]))
    }

    /// Whether the frame's EtherType is a tag of any kind: 802.1Q, 802.1ad (a QinQ service
    /// tag) or the older 0x9100.
    #[inline]
    pub fn starts_with_any_tag(&self) -> bool {
        self.data()
            .get(MAC_ADDRESSES_LEN..MAC_ADDRESSES_LEN + 2)
            .is_some_and(|ethertype| {
                [ETHERTYPE_VLAN, ETHERTYPE_QINQ, ETHERTYPE_QINQ_OLD]
                    .iter()
                    .any(|tag| ethertype == tag.to_be_bytes())
            })
    }

    /// Records that the port stripped an 802.1Q tag with `tci` on receipt, as a PMD with VLAN
    /// stripping does: for generators and tests that stand in for a NIC.
    #[inline]
    pub fn mark_rx_stripped_vlan(&mut self, tci: u16) {
        // SAFETY: writes two fields of the mbuf we own.
        unsafe {
            let header = self.ptr.as_mut();
            header.ol_flags |= RX_VLAN_STRIPPED;
            header.vlan_tci = tci;
        }
    }

    /// Takes an 802.1Q tag out of the frame, returning its TCI; None, with the frame as it
    /// was, if the frame has none.
    #[inline]
    pub fn pop_vlan_tag(&mut self) -> Option<u16> {
        let tci = self.vlan_tag()?;
        self.remove_after_addresses(VLAN_TAG_LEN).then_some(tci)
    }

    /// Takes the `len` bytes after the MAC addresses out of the frame (a tag, or an
    /// encapsulation's header): the addresses move up over them, and the frame starts `len`
    /// bytes later. False, with the frame as it was, if the frame has no `len` bytes after
    /// its addresses or spans segments.
    #[inline]
    pub fn remove_after_addresses(&mut self, len: usize) -> bool {
        if self.segments() != 1 || self.len() < MAC_ADDRESSES_LEN + len {
            return false;
        }
        self.data_mut().copy_within(0..MAC_ADDRESSES_LEN, len);
        let remaining = self.len() - len;
        // SAFETY: we own the mbuf; data_off + len and the remaining length stay inside the
        // same buffer (the frame had at least len bytes, checked above), and the sum
        // data_off + data_len is unchanged.
        unsafe {
            let header = self.ptr.as_mut();
            header.data_off += len as u16;
            header.data_len = remaining as u16;
            header.pkt_len = remaining as u32;
        }
        true
    }

    /// Opens `len` bytes after the MAC addresses (for a tag, or an encapsulation's header)
    /// and returns them to be written; the frame then starts `len` bytes earlier. None, with
    /// the frame as it was, if the buffer has not `len` bytes of headroom, the frame no
    /// addresses, or it spans segments.
    #[inline]
    pub fn insert_after_addresses(&mut self, len: usize) -> Option<&mut [u8]> {
        let header = self.header();
        let data_off = usize::from(header.data_off);
        let old_len = self.len();
        if data_off < len || old_len < MAC_ADDRESSES_LEN || self.segments() != 1 {
            return None;
        }
        // SAFETY: we own the mbuf; the headroom's `len` bytes before data_off and the frame
        // after it are one range of the buffer (data_off >= len was checked), plain bytes,
        // and &mut self makes the access exclusive. The new length is the old plus len,
        // ending where the frame ended, so it fits the buffer and u16.
        let frame = unsafe {
            let header = self.ptr.as_mut();
            header.data_off -= len as u16;
            header.data_len += len as u16;
            header.pkt_len += len as u32;
            std::slice::from_raw_parts_mut(self.data_ptr(), old_len + len)
        };
        frame.copy_within(len..len + MAC_ADDRESSES_LEN, 0);
        Some(&mut frame[MAC_ADDRESSES_LEN..MAC_ADDRESSES_LEN + len])
    }

    /// Asks the NIC to tag the frame with `tci` as it sends it: only for a queue whose port
    /// inserts tags ([`TxQueue::vlan_insert`](super::TxQueue::vlan_insert)).
    #[inline]
    pub fn request_tx_vlan(&mut self, tci: u16) {
        // SAFETY: writes two fields of the mbuf we own.
        unsafe {
            let header = self.ptr.as_mut();
            header.ol_flags |= TX_VLAN;
            header.vlan_tci = tci;
        }
    }

    /// Puts an 802.1Q tag with `tci` after the MAC addresses. False, with the frame as it
    /// was, if the buffer has no 4 bytes of headroom or the frame no addresses.
    #[inline]
    pub fn push_vlan_tag(&mut self, tci: u16) -> bool {
        let Some(tag) = self.insert_after_addresses(VLAN_TAG_LEN) else {
            return false;
        };
        tag[..2].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
        tag[2..].copy_from_slice(&tci.to_be_bytes());
        true
    }

    /// Hints the CPU to fetch the packet's first cache line.
    #[inline]
    pub fn prefetch(&self) {
        super::prefetch(self.data_ptr());
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we are the one owner; ownership given away went through into_raw.
        unsafe { dpdk_sys::shim_rte_pktmbuf_free(self.ptr.as_ptr()) }
    }
}

/// Up to BURST_SIZE owned mbufs in an array of raw pointers, the shape rx/tx bursts and
/// rings want. No allocation: it lives on the worker's stack or in its state. Whatever is
/// still in it when dropped is freed.
pub struct MbufBatch {
    pub(crate) ptrs: [*mut dpdk_sys::rte_mbuf; BURST_SIZE],
    pub(crate) len: usize,
}

// SAFETY: the batch owns its mbufs exclusively, like a Vec<Mbuf> would.
unsafe impl Send for MbufBatch {}

impl Default for MbufBatch {
    fn default() -> Self {
        MbufBatch {
            ptrs: [std::ptr::null_mut(); BURST_SIZE],
            len: 0,
        }
    }
}

impl MbufBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == BURST_SIZE
    }

    /// Adds a packet, or gives it back when the batch is full.
    pub fn push(&mut self, mbuf: Mbuf) -> std::result::Result<(), Mbuf> {
        if self.is_full() {
            return Err(mbuf);
        }
        self.ptrs[self.len] = mbuf.into_raw();
        self.len += 1;
        Ok(())
    }

    /// The packets' bytes, without taking them out.
    pub fn packets(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.ptrs[..self.len].iter().map(|&ptr| {
            // SAFETY: the first `len` pointers are valid mbufs the batch owns; the slices
            // borrow the batch, so no mbuf leaves it while they live.
            unsafe {
                let header = &*ptr;
                let data = (header.buf_addr as *const u8).add(usize::from(header.data_off));
                std::slice::from_raw_parts(data, usize::from(header.data_len))
            }
        })
    }

    /// The packets, borrowed mutably each, in order: a burst's packets can be rewritten side
    /// by side (the pipeline's burst) while the batch keeps them.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Mbuf> + '_ {
        self.ptrs[..self.len].iter_mut().map(|ptr| {
            // SAFETY: the first `len` pointers are valid mbufs the batch owns, each a distinct
            // buffer. `Mbuf` is a transparent wrapper of the pointer, so a `&mut` to the array
            // slot is a `&mut Mbuf` to that packet, exclusive for as long as the batch is
            // borrowed; the iterator hands out each slot once.
            unsafe { &mut *(ptr as *mut *mut dpdk_sys::rte_mbuf as *mut Mbuf) }
        })
    }

    /// Keeps the packets `keep` says yes to, in order, and frees the others; returns how
    /// many were freed.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Mbuf) -> bool) -> usize {
        let len = std::mem::take(&mut self.len);
        let mut kept = 0;
        for i in 0..len {
            // SAFETY: each of the first `len` pointers is owned by the batch and taken once;
            // `len` is zero meanwhile, so a panic in `keep` leaks rather than double-frees.
            let mut mbuf = unsafe { Mbuf::from_raw(self.ptrs[i]) };
            if keep(&mut mbuf) {
                self.ptrs[kept] = mbuf.into_raw();
                kept += 1;
            }
        }
        self.len = kept;
        len - kept
    }

    /// Takes the packets out in order, leaving the batch empty.
    pub fn drain(&mut self) -> impl Iterator<Item = Mbuf> + '_ {
        let len = std::mem::take(&mut self.len);
        self.ptrs[..len].iter().map(|&ptr| {
            // SAFETY: the first `len` pointers were owned by the batch, and `len` is already
            // zero, so each is handed out exactly once.
            unsafe { Mbuf::from_raw(ptr) }
        })
    }

    /// Frees every packet in the batch; returns how many.
    pub fn free_all(&mut self) -> usize {
        let freed = self.len;
        if freed > 0 {
            // SAFETY: the first `len` pointers are owned mbufs; len is reset so none is
            // freed twice.
            unsafe { dpdk_sys::rte_pktmbuf_free_bulk(self.ptrs.as_mut_ptr(), freed as u32) };
            self.len = 0;
        }
        freed
    }

    /// Forgets the first `accepted` packets (their new owner took them) and keeps the rest,
    /// moved to the front.
    pub(crate) fn consume_front(&mut self, accepted: usize) {
        debug_assert!(accepted <= self.len);
        self.ptrs.copy_within(accepted..self.len, 0);
        self.len -= accepted;
    }
}

impl Drop for MbufBatch {
    fn drop(&mut self) {
        self.free_all();
    }
}

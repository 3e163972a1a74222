//! The bytes of one packet as the pipeline sees them: the frame, plus spare room after it
//! so a reply can grow in place without allocating.

/// A frame of `len` bytes at the start of `room`. The worker builds it over an mbuf's data
/// and tailroom, and sets the mbuf's length from `len()` afterwards.
#[derive(Debug)]
pub struct PacketBuf<'a> {
    room: &'a mut [u8],
    len: usize,
    /// The NIC checked the TCP or UDP checksum of the frame as received and found it good.
    l4_checksum_good: bool,
}

impl<'a> PacketBuf<'a> {
    /// `len` is clamped to the room.
    pub fn new(room: &'a mut [u8], len: usize) -> Self {
        let len = len.min(room.len());
        PacketBuf {
            room,
            len,
            l4_checksum_good: false,
        }
    }

    /// Says the NIC found the received frame's TCP or UDP checksum good (DPDK's
    /// `RTE_MBUF_F_RX_L4_CKSUM_GOOD`), so the pipeline need not verify it in software.
    /// Anything else the NIC says (bad, none, unknown) leaves it to the software check.
    pub fn with_l4_checksum_good(mut self, good: bool) -> Self {
        self.l4_checksum_good = good;
        self
    }

    /// Whether the NIC vouched for the L4 checksum of the frame as it was received; says
    /// nothing about the frame once the pipeline has rewritten it.
    #[inline]
    pub fn l4_checksum_good(&self) -> bool {
        self.l4_checksum_good
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.room[..self.len]
    }

    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.room[..self.len]
    }

    /// Everything writable, frame and spare room.
    pub fn room_mut(&mut self) -> &mut [u8] {
        self.room
    }

    pub fn capacity(&self) -> usize {
        self.room.len()
    }

    /// Sets the frame length; false (and no change) if it exceeds the room.
    pub fn set_len(&mut self, len: usize) -> bool {
        if len > self.room.len() {
            return false;
        }
        self.len = len;
        true
    }
}

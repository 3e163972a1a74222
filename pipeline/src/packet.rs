//! The bytes of one packet as the pipeline sees them: the frame, plus spare room after it
//! so a reply can grow in place without allocating.

/// A frame of `len` bytes at the start of `room`. The worker builds it over an mbuf's data
/// and tailroom, and sets the mbuf's length from `len()` afterwards.
#[derive(Debug)]
pub struct PacketBuf<'a> {
    room: &'a mut [u8],
    len: usize,
}

impl<'a> PacketBuf<'a> {
    /// `len` is clamped to the room.
    pub fn new(room: &'a mut [u8], len: usize) -> Self {
        let len = len.min(room.len());
        PacketBuf { room, len }
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

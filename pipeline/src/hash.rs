//! Hashing of small keys (LAN host addresses) into open-addressed tables.

/// MurmurHash3's 64-bit finaliser of `key ^ seed`, masked to a power-of-two table: every
/// input bit reaches every output bit. Sequential LAN addresses differ in their low bits only,
/// and a plain multiplicative hash maps them to arithmetic progressions that can collide
/// badly; a per-table random seed keeps a host from picking addresses that crowd others out.
#[inline]
pub fn home_slot(key: u64, seed: u64, mask: usize) -> usize {
    let mut h = key ^ seed;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    // Masked to the table size, so the truncation loses nothing.
    (h as usize) & mask
}

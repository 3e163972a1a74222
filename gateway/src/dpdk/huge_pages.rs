//! Transparent huge pages for the workers' tables.
//!
//! A worker's flow table is hundreds of MiB of heap read at random: on 4 KiB pages nearly
//! every flow lookup also misses the TLB and walks the page table (issue 19). DPDK's own
//! hugepages hold the packet pool; the tables are plain Rust allocations, so they get
//! transparent huge pages instead: `MADV_HUGEPAGE`, then `MADV_COLLAPSE` (Linux 6.1), which
//! moves what is already there into huge pages now rather than whenever khugepaged passes.

use std::ffi::c_void;

const HUGE_PAGE: usize = 2 << 20;

/// What [`back_with_huge_pages`] managed for one region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugePageAdvice {
    /// Bytes of the region inside whole 2 MiB pages: what the advice covered.
    pub covered: usize,
    /// Whether the kernel collapsed them into huge pages now (false: too old a kernel,
    /// THP off, or no free huge pages; the pages stay 4 KiB, which is only slower).
    pub collapsed: bool,
}

/// Asks the kernel to back the whole 2 MiB pages inside `[start, start + len)` with huge
/// pages. Best effort: a refusal leaves the memory as it was.
pub fn back_with_huge_pages(start: *const u8, len: usize) -> HugePageAdvice {
    let begin = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize).saturating_add(len) / HUGE_PAGE * HUGE_PAGE;
    if end <= begin {
        return HugePageAdvice::default();
    }
    let (address, length) = (begin as *mut c_void, end - begin);
    // SAFETY: MADV_HUGEPAGE and MADV_COLLAPSE change how the kernel backs the pages, never
    // their contents or whether they are mapped (an unmapped range is refused with ENOMEM),
    // so no memory this process uses can change under it, whatever the range.
    let collapsed = unsafe {
        libc::madvise(address, length, libc::MADV_HUGEPAGE) == 0
            && libc::madvise(address, length, libc::MADV_COLLAPSE) == 0
    };
    HugePageAdvice {
        covered: length,
        collapsed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_huge_pages_inside_the_region_are_advised() {
        assert_eq!(back_with_huge_pages(std::ptr::null(), 0).covered, 0);
        let region = vec![1u8; 8 * HUGE_PAGE];
        let advice = back_with_huge_pages(region.as_ptr(), region.len());
        // The Vec's start is not 2 MiB aligned in general: 7 or 8 whole pages inside it.
        assert!(advice.covered >= 7 * HUGE_PAGE && advice.covered <= 8 * HUGE_PAGE);
        assert_eq!(advice.covered % HUGE_PAGE, 0);
        // The advice never changes what the memory holds.
        assert!(region.iter().all(|&byte| byte == 1));
        assert_eq!(
            back_with_huge_pages(region.as_ptr(), HUGE_PAGE - 1).covered,
            0
        );
    }
}

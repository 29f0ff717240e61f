//! A counting global allocator: current and peak heap bytes, for the memory rows (Flex keeps
//! its tensors on the heap).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// `p`, after counting `bytes` more in use (when `p` is an allocation, not null).
fn grown(p: *mut u8, bytes: usize) -> *mut u8 {
    if !p.is_null() {
        let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
    p
}

// SAFETY: every call is handed to `System` as it came, which upholds `GlobalAlloc`'s
// contract; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: our caller's `layout` obligations, passed on unchanged.
        grown(unsafe { System.alloc(layout) }, layout.size())
    }

    /// Handed to `System`'s own (`calloc`): a large zeroed buffer then comes from the OS
    /// untouched, as it does without this allocator. The default (alloc, then zero every
    /// byte) would touch each page on the allocating thread and time that in every row that
    /// makes a fresh tensor.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: our caller's `layout` obligations, passed on unchanged.
        grown(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` (every allocation here is its) with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `dealloc`, with our caller's `new_size` obligations passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grown(p, new_size - layout.size());
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Heap bytes in use now.
pub fn current() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Starts a new peak measurement from the current level.
pub fn reset_peak() {
    PEAK.store(current(), Ordering::Relaxed);
}

/// The peak since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

//! Fresh output buffers on huge pages. A large vector's memory comes from the OS as
//! untouched 4 KiB pages, and the first write to each is a page fault (dear in a virtual
//! machine: filling a fresh 64 MiB buffer took 2.3x as long as on 2 MiB pages on a 2-core
//! VM). Where Linux's transparent huge pages are enabled `madvise` (a common default),
//! asking for them on a buffer's range makes those first writes fault once per 2 MiB.

/// Buffers from this size up are advised onto huge pages (smaller ones gain little).
const HUGE_FROM: usize = 4 << 20;

/// Asks the OS to back the memory of `v` with huge pages, where it is large enough and the
/// OS offers them. Advisory: the values, and anything else about `v`, are unchanged.
///
/// ```
/// let mut v = vec![0f32; 4 << 20];
/// burn_amp_kernels::cpu::pages::advise_huge(&mut v);
/// v.fill(1.0); // a page fault per 2 MiB where the OS gave huge pages
/// assert_eq!(v[123], 1.0);
/// ```
pub fn advise_huge<T>(v: &mut [T]) {
    let bytes = core::mem::size_of_val(v);
    if bytes < HUGE_FROM {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // The whole pages inside the buffer.
        const PAGE: usize = 4096;
        let start = (v.as_mut_ptr() as usize).next_multiple_of(PAGE);
        let end = (v.as_mut_ptr() as usize + bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range lies inside `v`'s allocation, which we borrow mutably;
            // MADV_HUGEPAGE changes how the kernel backs the pages, never their contents,
            // and a refusal (THP off) is an error code we may ignore.
            let _ = unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE)
            };
        }
    }
}

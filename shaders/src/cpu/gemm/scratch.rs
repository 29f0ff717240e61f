//! A thread's packing buffers and f32 sums, kept between products so that a training step
//! does not fault in fresh pages for every matmul. Packed panels start on a cache line.

/// 64 bytes on a 64-byte boundary: the unit of the packing buffers, so that every packed
/// panel (a whole number of lines) starts a cache line. A tile row of AMX is a line: loaded
/// from a panel 16 bytes off the boundary (where a large `Vec<u32>` lands), each row spans
/// two lines, and 2x2 tiles of `tdpbf16ps` fed from L1 ran at 0.9-1.1 TFLOP/s against 3.0
/// aligned, on one core of a Xeon with AMX.
#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// A growable run of words that starts on a cache line.
#[derive(Default)]
pub(super) struct Lines(Vec<Line>);

impl Lines {
    /// The first `len` words, grown (zero-filled) when shorter; their contents are what the
    /// last user left.
    pub fn words(&mut self, len: usize) -> &mut [u32] {
        let lines = len.div_ceil(16);
        if self.0.len() < lines {
            self.0.resize(lines, Line::default());
        }
        // SAFETY: `Line` is 16 `u32`s with no padding (64 bytes, `repr(C)`), so `lines`
        // lines are `16 * lines >= len` initialised words, borrowed from `self` as the
        // slice is.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u32>(), len) }
    }

    /// Every word held.
    pub fn all(&self) -> &[u32] {
        // SAFETY: as in `words`: `16 * len` initialised words, borrowed from `self`.
        unsafe { core::slice::from_raw_parts(self.0.as_ptr().cast::<u32>(), 16 * self.0.len()) }
    }
}

/// Packed A rows, packed B columns, and a block's f32 sums.
#[derive(Default)]
pub(super) struct Scratch {
    pub a: Lines,
    pub b: Lines,
    pub acc: Vec<f32>,
}

thread_local! {
    /// Why a thread-local: packing buffers are per-thread scratch (megabytes, reused by
    /// every product the thread runs); they hold no state between products.
    static SCRATCH: core::cell::Cell<Option<Scratch>> = const { core::cell::Cell::new(None) };
}

impl Scratch {
    /// This thread's scratch (empty the first time, or while another product on this
    /// thread holds it).
    pub fn take() -> Scratch {
        SCRATCH.with(|s| s.take()).unwrap_or_default()
    }

    /// Keeps it for the thread's next product.
    pub fn give_back(self) {
        SCRATCH.with(|s| s.set(Some(self)));
    }
}

#[cfg(test)]
mod tests {
    use super::Lines;

    #[test]
    fn words_start_a_line_and_keep_their_length() {
        let mut lines = Lines::default();
        for len in [1, 15, 16, 17, 1000, 5] {
            let words = lines.words(len);
            assert_eq!(words.len(), len);
            assert_eq!(words.as_ptr() as usize % 64, 0);
            words.fill(7);
        }
        assert_eq!(lines.words(3), &[7, 7, 7]);
    }
}

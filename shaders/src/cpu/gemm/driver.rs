//! The blocking driver, written once for every kernel (Goto's loop order). A product small
//! enough for one thread runs on the calling thread:
//!
//! ```text
//! for each NC columns:         pack B's KC x NC panel (rounded to the compute format)
//!   for each KC of k:
//!     for each MC rows:        pack A's MC x KC panel
//!       for each NR, MR tile:  kernel (written on the first KC, added on the next)
//! ```
//!
//! The AMX kernel turns it round: it walks C along the rows, so the block that must stay in
//! L2 while every tile reads it is B's, and A's rows are packed once for all of B's columns:
//!
//! ```text
//! for each MC rows:
//!   for each KC of k:          pack A's MC x KC panel
//!     for each NC columns:     pack B's KC x NC panel (half of L2)
//!       for each MR, NR tile:  kernel
//! ```
//!
//! A larger one is cut into a grid of blocks of C (`grid`), rows by columns, and each block
//! runs that loop on one of rayon's threads, packing its own rows of A (unless A was packed
//! once for many products: `packed`) and columns of B:
//! one hand-over to the pool per product, where packing the shared operands first would
//! take two per KC step, each of which costs a sleeping thread's wake-up (about 15 us on a
//! virtual machine's cores, a small product's whole time).
//!
//! Both accumulate in f32: straight into C when C is f32, else into an f32 block that is
//! rounded into C once at the end (so a narrow output is rounded once, not once per KC).
//! The blocks are sized from the CPU's caches ([`Blocking`]), the same whatever the thread
//! count, and every element is summed over the same KC steps in the same order wherever
//! its tile falls: a product is the same bits on any number of threads.

use super::MatRef;
use super::kernel::Kernel;
use super::pack::{SLACK, pack_a, pack_b};
use crate::cpu::cast::{self, CpuFloat, Format};

#[path = "grid.rs"]
mod grid;
#[path = "packed.rs"]
mod packed;
#[path = "scratch.rs"]
mod scratch;

pub use packed::PackedA;
use scratch::Scratch;

/// The block sizes of a kernel on a CPU: k per packed panel (`kc`: a B micro-panel of
/// `kc x nr` fills half the L1 data cache, or all of it for the `vdpbf16ps` kernel), rows
/// per packed A block (`mc`: `mc x kc` fills half of L2, a multiple of the tile height) and
/// columns per packed B block (`nc`, on one thread: `kc x nc` within a quarter of the
/// last-level cache); for AMX, B's block in L2 and A's in the last level (see
/// [`Blocking::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Blocking {
    pub kc: usize,
    pub mc: usize,
    pub nc: usize,
}

impl Blocking {
    /// The blocking for `kernel` on the CPU its instruction set describes.
    pub fn of(kernel: Kernel) -> Blocking {
        let caches = kernel.isa().caches();
        let (mr, nr) = (kernel.mr(), kernel.nr());
        // Bytes one value of k takes in a packed row or column: a word per value, or per
        // pair of bf16 values.
        let per_k = 4 * kernel.k_steps(64) / 64;
        if kernel.amx_a() {
            // AMX walks C along its rows (see `block`): a B block of `kc x nc` stays in
            // half of L2 while every row tile reads it, and the A rows packed for a KC step
            // are read once per B block, from L3. A deep k spreads the C tiles' load and
            // store over more products.
            let kc = (caches.l2 as usize / 8 / (nr * per_k)).clamp(128, 1024) / 32 * 32;
            let nc = (caches.l2 as usize / 2 / (kc * per_k)).clamp(nr, 8192) / nr * nr;
            let mc = (caches.l3 as usize / 4 / (kc * per_k)).clamp(mr, 4096) / mr * mr;
            return Blocking { kc, mc, nc };
        }
        // B's micro-panel stays in L1 while A's micro-panels and C's tiles pass through
        // it: in half of it, or all of it where the kernel's reads of B are few enough for
        // L2 to keep up (`vdpbf16ps`: on a 2-core AMD EPYC, 512 k instead of 256 took a
        // 1024 x 4096 x 4096 bf16 product from 320-345 to 360-378 GFLOP/s, with
        // `grid`'s row blocks no longer capped at `mc`).
        let share = if kernel.b_panel_fills_l1() { 1 } else { 2 };
        let kc = (caches.l1d as usize / share / (nr * per_k)).clamp(128, 1024) / 32 * 32;
        let mc = (caches.l2 as usize / 2 / (kc * per_k)).clamp(mr, 4096) / mr * mr;
        let nc = (caches.l3 as usize / 4 / (kc * per_k)).clamp(nr, 8192) / nr * nr;
        Blocking { kc, mc, nc }
    }
}

/// Multiply-adds below which a product runs on the calling thread alone.
const PARALLEL_WORK: usize = 1 << 21;

/// A raw pointer that may cross to rayon's threads: each task writes a disjoint block.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: tasks write disjoint blocks of the output, which outlives the scope.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// A bias added to the f32 sums: one value per column of C (a linear layer's), or per row
/// (a convolution's, whose rows are output channels).
#[derive(Clone, Copy)]
pub(super) enum Bias<'a> {
    Cols(&'a [f32]),
    Rows(&'a [f32]),
}

impl Bias<'_> {
    fn at(&self, i: usize, j: usize) -> f32 {
        match self {
            Bias::Cols(b) => b[j],
            Bias::Rows(b) => b[i],
        }
    }

    /// Adds itself to `sums`, the f32 sums of C's row `i` from column `j` on.
    fn add_to_row(&self, sums: &mut [f32], (i, j): (usize, usize)) {
        let n = sums.len();
        match self {
            Bias::Cols(b) => sums.iter_mut().zip(&b[j..j + n]).for_each(|(c, b)| *c += b),
            Bias::Rows(b) => sums.iter_mut().for_each(|c| *c += b[i]),
        }
    }
}

/// Which threads a product may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// Rayon's pool, for a product large enough to pay for it.
    Pool,
    /// The calling thread alone: its caller splits the work across threads itself.
    Caller,
}

/// A product's left operand: a matrix whose blocks each pack the rows they read, or one
/// packed once for every product ([`PackedA`], whose kernel is the product's).
pub(super) enum Lhs<'a, A> {
    Matrix(MatRef<'a, A>),
    Packed(&'a PackedA),
}

impl<A: CpuFloat> Lhs<'_, A> {
    fn rows(&self) -> usize {
        match self {
            Lhs::Matrix(a) => a.rows(),
            Lhs::Packed(a) => a.rows(),
        }
    }

    fn cols(&self) -> usize {
        match self {
            Lhs::Matrix(a) => a.cols(),
            Lhs::Packed(a) => a.depth(),
        }
    }
}

/// `c = a b + bias` (shapes checked by the caller).
pub(super) fn run<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    kernel: Kernel,
    a: Lhs<'_, A>,
    b: MatRef<'_, B>,
    bias: Option<Bias<'_>>,
    c: &mut [C],
    threads: Threads,
) {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        match bias {
            Some(bias) => c.chunks_mut(n).enumerate().for_each(|(i, row)| {
                row.iter_mut()
                    .enumerate()
                    .for_each(|(j, c)| *c = C::from_f32(bias.at(i, j)))
            }),
            None => c.fill(C::default()),
        }
        return;
    }
    let problem = Problem {
        kernel,
        a,
        b,
        bias,
        blocking: Blocking::of(kernel),
    };
    let work = m.saturating_mul(n).saturating_mul(k);
    let threads = match threads {
        Threads::Pool if work >= PARALLEL_WORK => rayon::current_num_threads().max(1),
        _ => 1,
    };
    let grid = grid::Grid::new(&problem, threads);
    if grid.tasks() > 1 {
        grid.run(&problem, c);
        return;
    }
    // SAFETY: `c` holds the m x n product (checked by the caller), all of it this thread's.
    unsafe { block(&problem, SendPtr(c.as_mut_ptr()), (0, m), (0, n)) };
}

/// One product's operands and blocking: what every block of C reads.
struct Problem<'a, A, B> {
    kernel: Kernel,
    a: Lhs<'a, A>,
    b: MatRef<'a, B>,
    bias: Option<Bias<'a>>,
    blocking: Blocking,
}

/// Rows `r0..r0 + rs` and columns `c0..c0 + cs` of the product, written into C (`m x n`,
/// row-major, at `c`) on the calling thread.
///
/// # Safety
/// `c` points at the `m x n` product; the block lies inside it and no other thread touches
/// it while this runs.
unsafe fn block<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    problem: &Problem<'_, A, B>,
    c: SendPtr<C>,
    (r0, rs): (usize, usize),
    (c0, cs): (usize, usize),
) {
    let Problem { kernel, a, b, .. } = problem;
    let kernel = *kernel;
    let kc_max = problem.blocking.kc;
    let k = a.cols();
    let (mr, nr) = (kernel.mr(), kernel.nr());
    let mut scratch = Scratch::take();
    // SAFETY: the block lies inside C, whose rows hold `b.cols()` values (our contract).
    let acc = unsafe {
        Accumulator::new(
            c,
            b.cols(),
            (r0, c0),
            (rs, cs),
            k <= kc_max,
            &mut scratch.acc,
        )
    };
    for step in steps(kernel.amx_a(), (rs, cs, k), problem.blocking) {
        let Step {
            rows: (ic, mc),
            cols: (jc, nc),
            pc,
            pack,
        } = step;
        let kc = kc_max.min(k - pc);
        let steps = kernel.k_steps(kc);
        if pack.b {
            let b_panels = scratch.b.words(nc.div_ceil(nr) * steps * nr);
            pack_b(kernel, b, (pc, kc), (c0 + jc, nc), b_panels);
        }
        let a_len = mc.div_ceil(mr) * steps * mr + SLACK;
        if let (true, Lhs::Matrix(a)) = (pack.a, a) {
            pack_a(kernel, a, (r0 + ic, mc), (pc, kc), scratch.a.words(a_len));
        }
        let panels = Panels {
            a: match a {
                Lhs::Matrix(_) => scratch.a.words(a_len),
                Lhs::Packed(a) => a.panels((r0 + ic, mc), pc),
            },
            b: scratch.b.words(nc.div_ceil(nr) * steps * nr),
            kc,
        };
        // SAFETY: rows ic..ic + mc and columns jc..jc + nc of the block, this
        // thread's alone.
        unsafe { panels.multiply::<C>(kernel, &acc, problem.bias, (ic, mc), (jc, nc), pc > 0) };
    }
    // SAFETY: the whole block, complete.
    unsafe { acc.finish::<A, B, C>(problem) };
    scratch.give_back();
}

/// A tile's f32 sums on the stack, on a cache line: AMX stores a tile row as one 64-byte
/// line, which, off the boundary, spans two (products with k of 128-512 into bf16 gained
/// 3-5% on one thread from this alone).
#[repr(C, align(64))]
struct TileSums([f32; 32 * 32]);

/// One KC step of a block's rows by columns: its first row and rows, first column and
/// columns (relative to the block), its first k, and which operands it packs.
struct Step {
    rows: (usize, usize),
    cols: (usize, usize),
    pc: usize,
    pack: Pack,
}

/// The KC steps of an `rs x cs` block with depth `k`, in the order its kernel wants. Rows
/// outer for AMX (`rows_outer`): A's row block packed once, at its first column block, and
/// B's block (half of L2) packed at every step. Goto's order otherwise: B's block packed once
/// per column block and depth, A's rows at every step.
fn steps(
    rows_outer: bool,
    (rs, cs, k): (usize, usize, usize),
    blocking: Blocking,
) -> impl Iterator<Item = Step> {
    let spans = |len: usize, size: usize| {
        (0..len)
            .step_by(size)
            .map(move |at| (at, size.min(len - at)))
    };
    let (outer, inner) = if rows_outer {
        ((rs, blocking.mc), (cs, blocking.nc))
    } else {
        ((cs, blocking.nc), (rs, blocking.mc))
    };
    spans(outer.0, outer.1).flat_map(move |o| {
        (0..k).step_by(blocking.kc).flat_map(move |pc| {
            spans(inner.0, inner.1).enumerate().map(move |(n, i)| {
                let first = n == 0;
                match rows_outer {
                    true => Step {
                        rows: o,
                        cols: i,
                        pc,
                        pack: Pack { a: first, b: true },
                    },
                    false => Step {
                        rows: i,
                        cols: o,
                        pc,
                        pack: Pack { a: true, b: first },
                    },
                }
            })
        })
    })
}

/// Which operands a step packs (the other's panels are the last step's).
#[derive(Clone, Copy)]
struct Pack {
    a: bool,
    b: bool,
}

/// One KC step's packed A rows and B columns.
struct Panels<'p> {
    /// `ceil(mc / mr)` A micro-panels.
    a: &'p [u32],
    /// `ceil(nc / nr)` B micro-panels.
    b: &'p [u32],
    kc: usize,
}

impl Panels<'_> {
    /// Adds the product of the packed panels to the accumulator's rows `ic..ic + mc` and
    /// columns `jc..jc + nc` (written when `accumulate` is false), tile by tile; a partial
    /// tile goes through a whole one on the stack, and so does every tile of a direct
    /// accumulator, which is then rounded into C with `bias`.
    ///
    /// # Safety
    /// Those rows and columns lie inside the accumulator, and no other thread touches them;
    /// `C` is the type of the accumulator's C.
    unsafe fn multiply<C: CpuFloat>(
        &self,
        kernel: Kernel,
        acc: &Accumulator,
        bias: Option<Bias<'_>>,
        (ic, mc): (usize, usize),
        (jc, nc): (usize, usize),
        accumulate: bool,
    ) {
        let (mr, nr, steps) = (kernel.mr(), kernel.nr(), kernel.k_steps(self.kc));
        let mut tile = TileSums([0f32; 32 * 32]);
        let tile = &mut tile.0;
        kernel.with_tiles(|| {
            let (row_tiles, col_tiles) = (mc.div_ceil(mr), nc.div_ceil(nr));
            for t in 0..row_tiles * col_tiles {
                let (ir, jr) = if kernel.amx_a() {
                    // Along C's rows: tiles of a row block in turn, so C is written 128
                    // bytes a row at a time, row after row, and the A micro-panel is read
                    // from near caches while B's block (in L2) passes by (a weight gradient
                    // x^T g of 128 x 4096 x 4096 into f32 went from 264 to 510-627
                    // GFLOP/s on two threads).
                    ((t / col_tiles) * mr, (t % col_tiles) * nr)
                } else {
                    // Down C's columns: one B micro-panel stays in L1 for the whole column.
                    ((t % row_tiles) * mr, (t / row_tiles) * nr)
                };
                let (rows, cols) = (mr.min(mc - ir), nr.min(nc - jr));
                let ap = self.a[ir / mr * steps * mr..].as_ptr();
                let bp = self.b[jr / nr * steps * nr..].as_ptr();
                // SAFETY: the tile is inside the accumulator (our caller's); a partial one,
                // and every one of a direct accumulator, goes through `tile`, which holds
                // a whole one; `C` is the accumulator's (our caller's).
                unsafe {
                    if acc.direct {
                        debug_assert!(!accumulate, "a direct accumulator has one KC step");
                        let at = ((ic + ir, rows), (jc + jr, cols));
                        acc.prefetch_tile::<C>(at);
                        kernel.tile(self.kc, ap, bp, tile.as_mut_ptr(), nr, false);
                        acc.round_tile::<C>(kernel, bias, at, tile);
                        continue;
                    }
                    let dst = acc.ptr.add((ic + ir) * acc.ld + jc + jr);
                    if rows == mr && cols == nr {
                        kernel.tile(self.kc, ap, bp, dst, acc.ld, accumulate);
                    } else {
                        kernel.tile(self.kc, ap, bp, tile.as_mut_ptr(), nr, false);
                        for i in 0..rows {
                            let d = core::slice::from_raw_parts_mut(dst.add(i * acc.ld), cols);
                            let s = &tile[i * nr..i * nr + cols];
                            if accumulate {
                                d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
                            } else {
                                d.copy_from_slice(s);
                            }
                        }
                    }
                }
            }
        });
    }
}

/// Where a block of C is summed in f32: C itself when C is f32; else, when k fits one KC
/// step, each tile on the stack, rounded into C as soon as its one kernel call ends
/// (direct); else an f32 block of its own. Tiles address it relative to the block's first
/// element.
struct Accumulator {
    /// The block's element (0, 0) (unused when direct).
    ptr: *mut f32,
    /// The row stride of the sums (C's when in place, else the block's width).
    ld: usize,
    /// Whether it is C itself.
    in_place: bool,
    /// Whether tiles are rounded into C one by one ([`Accumulator::round_tile`]). A block
    /// summed in its own f32 buffer is written out and read back once more to be rounded:
    /// on AMX, a product with k of 128 spent as long on that as on its multiply-adds.
    direct: bool,
    /// C's element at the block's (0, 0), for the final conversion.
    c: *mut u8,
    /// C's row stride.
    c_ld: usize,
    /// The block's first row and column in C (where its bias starts).
    origin: (usize, usize),
    /// The block's rows and columns.
    size: (usize, usize),
}

impl Accumulator {
    /// The accumulator of the `rs x cs` block at `(r0, c0)` of C (row-major, `c_ld` values a
    /// row), direct when C is not f32 and `one_step` (k fits one KC step); `own` holds the
    /// f32 sums when it is neither in place nor direct.
    ///
    /// # Safety
    /// `c` points at C, which holds the block.
    unsafe fn new<C: CpuFloat>(
        c: SendPtr<C>,
        c_ld: usize,
        (r0, c0): (usize, usize),
        (rs, cs): (usize, usize),
        one_step: bool,
        own: &mut Vec<f32>,
    ) -> Self {
        // SAFETY: the block's first element lies inside C (our contract).
        let c_block = unsafe { c.0.add(r0 * c_ld + c0) };
        let direct = C::FORMAT != Format::F32 && one_step;
        let (ptr, ld, in_place) = if C::FORMAT == Format::F32 {
            (c_block.cast::<f32>(), c_ld, true)
        } else if direct {
            (core::ptr::null_mut(), cs, false)
        } else {
            // The first KC step writes every entry before any is read (as it does C when C
            // is f32), so the buffer kept from the last product is reused as it is: grown
            // (zero-filled) when too small, never cleared, which on a 4096 x 4096 product
            // was a 64 MiB memset on one thread.
            if own.len() < rs * cs {
                own.resize(rs * cs, 0.0);
            }
            (own.as_mut_ptr(), cs, false)
        };
        Accumulator {
            ptr,
            ld,
            in_place,
            direct,
            c: c_block.cast(),
            c_ld,
            origin: (r0, c0),
            size: (rs, cs),
        }
    }

    /// Adds the bias to the block's f32 sums and, when C is not f32, rounds them into C (a
    /// direct accumulator did both tile by tile).
    ///
    /// # Safety
    /// The block is complete (every KC added) and no other thread touches it.
    unsafe fn finish<A, B, C: CpuFloat>(&self, problem: &Problem<'_, A, B>) {
        if self.direct {
            return;
        }
        let ((i0, j0), (mb, nb)) = (self.origin, self.size);
        if let Some(bias) = problem.bias {
            for i in 0..mb {
                // SAFETY: row i of the accumulator block.
                let row = unsafe { core::slice::from_raw_parts_mut(self.ptr.add(i * self.ld), nb) };
                bias.add_to_row(row, (i0 + i, j0));
            }
        }
        if self.in_place {
            return;
        }
        let isa = problem.kernel.isa();
        let c = self.c.cast::<C>();
        for i in 0..mb {
            // SAFETY: row i of the accumulator block, and of C's block.
            let (src, dst) = unsafe {
                (
                    core::slice::from_raw_parts(self.ptr.add(i * self.ld), nb),
                    core::slice::from_raw_parts_mut(c.add(i * self.c_ld), nb),
                )
            };
            cast::convert(isa, src, dst).expect("equal lengths");
        }
    }

    /// Asks for C's lines of the tile at rows `i..i + rows`, columns `j..j + cols` of the
    /// block, to be written: they arrive while the kernel multiplies, where the rounding's
    /// stores would otherwise wait for each (a product of 2048 x 256 x 2048 into bf16 spent
    /// a third of its rounding's time in those stores).
    ///
    /// # Safety
    /// The accumulator is direct, `C` is its C's type, and the tile lies inside the block.
    unsafe fn prefetch_tile<C: CpuFloat>(
        &self,
        ((i, rows), (j, cols)): ((usize, usize), (usize, usize)),
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
            let c = self.c.cast::<C>();
            for r in 0..rows {
                // SAFETY: the first and last values of row i + r of the tile, inside C
                // (our contract); a prefetch never faults.
                unsafe {
                    let row = c.add((i + r) * self.c_ld + j);
                    _mm_prefetch::<_MM_HINT_ET0>(row.cast());
                    _mm_prefetch::<_MM_HINT_ET0>(row.add(cols - 1).cast());
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = ((i, rows), (j, cols));
    }

    /// Adds the bias to a complete tile's f32 sums (`rows x cols` at the kernel's `nr`
    /// values a row, in `tile`) and rounds them into C's block at rows `i..i + rows`,
    /// columns `j..j + cols`, row by row straight into C.
    ///
    /// # Safety
    /// The accumulator is direct, `C` is its C's type, the tile lies inside the block, and
    /// no other thread touches it.
    unsafe fn round_tile<C: CpuFloat>(
        &self,
        kernel: Kernel,
        bias: Option<Bias<'_>>,
        ((i, rows), (j, cols)): ((usize, usize), (usize, usize)),
        tile: &mut [f32; 32 * 32],
    ) {
        let ld = kernel.nr();
        let (i0, j0) = (self.origin.0 + i, self.origin.1 + j);
        let sums = &mut tile[..rows * ld];
        if let Some(bias) = bias {
            for (r, row) in sums.chunks_exact_mut(ld).enumerate() {
                bias.add_to_row(&mut row[..cols], (i0 + r, j0));
            }
        }
        // SAFETY: rows i..i + rows, columns j..j + cols of the block (our contract).
        unsafe {
            let c = self.c.cast::<C>().add(i * self.c_ld + j);
            cast::convert_rows(kernel.isa(), (sums, ld), (c, self.c_ld), (rows, cols));
        }
    }
}

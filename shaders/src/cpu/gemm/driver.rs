//! The blocking driver, written once for every kernel (Goto's loop order): C is split into
//! column (or row) blocks, one per thread; each block runs
//!
//! ```text
//! for each NC columns:         pack B's KC x NC panel (rounded to the compute format)
//!   for each KC of k:
//!     for each MC rows:        pack A's MC x KC panel
//!       for each NR, MR tile:  kernel (written on the first KC, added on the next)
//! ```
//!
//! and accumulates in f32: straight into C when C is f32, else into an f32 block that is
//! rounded into C once at the end (so a narrow output is rounded once, not once per KC).

use rayon::prelude::*;

use super::MatRef;
use super::kernel::Kernel;
use super::pack::{SLACK, pack_a, pack_b};
use crate::cpu::cast::{self, CpuFloat, Format};

/// k per packed panel: a B micro-panel (KC x NR) stays in L1 while A's block streams.
const KC: usize = 256;
/// Rows per packed A block (a multiple of both tile heights): MC x KC f32 fits L2.
const MC: usize = 144;
/// Columns per packed B block: KC x NC f32 (2 MiB) fits a last-level cache slice.
const NC: usize = 2048;
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
}

/// `c = a b + bias` (shapes checked by the caller).
pub(super) fn run<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    kernel: Kernel,
    a: MatRef<'_, A>,
    b: MatRef<'_, B>,
    bias: Option<Bias<'_>>,
    c: &mut [C],
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
    let threads = rayon::current_num_threads().max(1);
    let work = m.saturating_mul(n).saturating_mul(k);
    let tasks = if work < PARALLEL_WORK { 1 } else { threads };
    // Split the longer side of C, in whole tiles.
    let split_cols = n.div_ceil(kernel.nr()) >= m.div_ceil(kernel.mr());
    let (extent, unit) = if split_cols {
        (n, kernel.nr())
    } else {
        (m, kernel.mr())
    };
    let tiles = extent.div_ceil(unit);
    let tasks = tasks.min(tiles);
    let per_task = tiles.div_ceil(tasks) * unit;
    let out = SendPtr(c.as_mut_ptr());
    let problem = Problem { kernel, a, b, bias };
    let block = |t: usize| {
        let lo = t * per_task;
        let hi = extent.min(lo + per_task);
        if lo >= hi {
            return;
        }
        let (rows, cols) = if split_cols {
            ((0, m), (lo, hi - lo))
        } else {
            ((lo, hi - lo), (0, n))
        };
        // SAFETY: blocks of distinct tasks are disjoint, inside `c` (m x n, row-major).
        unsafe { run_block(&problem, out, n, rows, cols) };
    };
    if tasks == 1 {
        block(0);
    } else {
        (0..tasks).into_par_iter().for_each(block);
    }
}

/// One product's operands: what every block of C reads.
struct Problem<'a, A, B> {
    kernel: Kernel,
    a: MatRef<'a, A>,
    b: MatRef<'a, B>,
    bias: Option<Bias<'a>>,
}

/// C's block `rows x cols` (each an (offset, length) pair), plus the bias's columns.
///
/// # Safety
/// `c` points at a row-major `? x ldc` matrix holding the block; no other thread touches it.
unsafe fn run_block<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    problem: &Problem<'_, A, B>,
    c: SendPtr<C>,
    ldc: usize,
    (i0, mb): (usize, usize),
    (j0, nb): (usize, usize),
) {
    let Problem { kernel, a, b, bias } = problem;
    let (kernel, bias) = (*kernel, *bias);
    let k = a.cols();
    let (mr, nr) = (kernel.mr(), kernel.nr());
    let mut scratch = Scratch::take();
    // The f32 accumulator: C itself when f32, else a block of its own.
    let (acc, ldacc) = if C::FORMAT == Format::F32 {
        // SAFETY: C is f32; element (i0, j0) of the block.
        (unsafe { c.0.cast::<f32>().add(i0 * ldc + j0) }, ldc)
    } else {
        scratch.acc.clear();
        scratch.acc.resize(mb * nb, 0.0);
        (scratch.acc.as_mut_ptr(), nb)
    };
    let mut tile = [0f32; 12 * 32];
    for jc in (0..nb).step_by(NC) {
        let nc = NC.min(nb - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let steps = kernel.k_steps(kc);
            resize(&mut scratch.b, nc.div_ceil(nr) * steps * nr);
            pack_b(kernel, b, (pc, kc), (j0 + jc, nc), &mut scratch.b);
            for ic in (0..mb).step_by(MC) {
                let mc = MC.min(mb - ic);
                resize(&mut scratch.a, mc.div_ceil(mr) * steps * mr + SLACK);
                pack_a(kernel, a, (i0 + ic, mc), (pc, kc), &mut scratch.a);
                for jr in (0..nc).step_by(nr) {
                    let cols = nr.min(nc - jr);
                    let bp = scratch.b[jr / nr * steps * nr..].as_ptr();
                    for ir in (0..mc).step_by(mr) {
                        let rows = mr.min(mc - ir);
                        let ap = scratch.a[ir / mr * steps * mr..].as_ptr();
                        // SAFETY: the block is inside the accumulator; partial tiles go
                        // through `tile`, which holds a whole one.
                        unsafe {
                            let dst = acc.add((ic + ir) * ldacc + jc + jr);
                            if rows == mr && cols == nr {
                                kernel.tile(kc, ap, bp, dst, ldacc, pc > 0);
                            } else {
                                kernel.tile(kc, ap, bp, tile.as_mut_ptr(), nr, false);
                                for i in 0..rows {
                                    let d =
                                        core::slice::from_raw_parts_mut(dst.add(i * ldacc), cols);
                                    let s = &tile[i * nr..i * nr + cols];
                                    if pc > 0 {
                                        d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
                                    } else {
                                        d.copy_from_slice(s);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(bias) = bias {
        for i in 0..mb {
            // SAFETY: row i of the accumulator block.
            let row = unsafe { core::slice::from_raw_parts_mut(acc.add(i * ldacc), nb) };
            match bias {
                Bias::Cols(b) => row
                    .iter_mut()
                    .zip(&b[j0..j0 + nb])
                    .for_each(|(c, b)| *c += b),
                Bias::Rows(b) => row.iter_mut().for_each(|c| *c += b[i0 + i]),
            }
        }
    }
    if C::FORMAT != Format::F32 {
        let isa = kernel.isa();
        for i in 0..mb {
            let src = &scratch.acc[i * nb..(i + 1) * nb];
            // SAFETY: row i of the block, inside `c`.
            let dst = unsafe { core::slice::from_raw_parts_mut(c.0.add((i0 + i) * ldc + j0), nb) };
            cast::convert(isa, src, dst).expect("equal lengths");
        }
    }
    scratch.give_back();
}

fn resize(buf: &mut Vec<u32>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// A thread's packing buffers, kept between products so that a training step does not
/// fault in fresh pages for every matmul.
#[derive(Default)]
struct Scratch {
    a: Vec<u32>,
    b: Vec<u32>,
    acc: Vec<f32>,
}

thread_local! {
    /// Why a thread-local: packing buffers are per-thread scratch (megabytes, reused by
    /// every product the thread runs); they hold no state between products.
    static SCRATCH: core::cell::Cell<Option<Scratch>> = const { core::cell::Cell::new(None) };
}

impl Scratch {
    fn take() -> Scratch {
        SCRATCH.with(|s| s.take()).unwrap_or_default()
    }

    fn give_back(self) {
        SCRATCH.with(|s| s.set(Some(self)));
    }
}

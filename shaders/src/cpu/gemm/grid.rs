//! A product on several threads: C cut into a grid of tasks (blocks of `mc` rows by chunks
//! of columns, whole tiles each), and for each KC of k two parallel steps: every A block and
//! B chunk of that KC is packed once, by whichever thread is free, then every task adds its
//! block's product. A product of few rows (a layer's forward pass on a small batch) spreads
//! over its columns; one of few columns over its rows.

use rayon::prelude::*;

use super::super::kernel::Kernel;
use super::super::pack::{SLACK, pack_a, pack_b};
use super::{Accumulator, Panels, Problem, Scratch, SendPtr, resize};
use crate::cpu::cast::CpuFloat;

/// Tasks per thread the grid aims for, so that threads that finish early find more.
const TASKS_PER_THREAD: usize = 2;

/// How C is cut into tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::cpu::gemm) struct Grid {
    m: usize,
    n: usize,
    /// Rows per task (the blocking's `mc`, the last task's fewer).
    rows: usize,
    /// Columns per task (whole tiles, the last task's fewer).
    cols: usize,
}

impl Grid {
    /// The grid of `problem` for `threads` threads: about [`TASKS_PER_THREAD`] tasks per
    /// thread, row blocks of at most the blocking's `mc` rows and column chunks, no block
    /// or chunk smaller than one tile. One thread: one task.
    pub fn new<A, B>(problem: &Problem<'_, A, B>, threads: usize) -> Grid
    where
        A: CpuFloat,
        B: CpuFloat,
    {
        let (m, n) = (problem.a.rows(), problem.b.cols());
        if threads <= 1 {
            return Grid {
                m,
                n,
                rows: m,
                cols: n,
            };
        }
        let (mr, nr) = (problem.kernel.mr(), problem.kernel.nr());
        let target = threads * TASKS_PER_THREAD;
        let (row_tiles, col_tiles) = (m.div_ceil(mr), n.div_ceil(nr));
        // Rows in blocks of at most `mc`; the columns cut to make up the tasks; then, when
        // the columns are too few (a tall product), the rows cut finer, in whole tiles.
        let mut rows = problem.blocking.mc.min(row_tiles * mr);
        let chunks = target.div_ceil(m.div_ceil(rows)).clamp(1, col_tiles);
        let wanted_row_blocks = target.div_ceil(chunks).min(row_tiles);
        if m.div_ceil(rows) < wanted_row_blocks {
            rows = row_tiles.div_ceil(wanted_row_blocks) * mr;
        }
        let cols = col_tiles.div_ceil(chunks) * nr;
        Grid { m, n, rows, cols }
    }

    fn row_blocks(&self) -> usize {
        self.m.div_ceil(self.rows)
    }

    fn col_chunks(&self) -> usize {
        self.n.div_ceil(self.cols)
    }

    /// How many tasks.
    pub fn tasks(&self) -> usize {
        self.row_blocks() * self.col_chunks()
    }

    /// Row block `i`: its first row and its rows.
    fn rows_of(&self, i: usize) -> (usize, usize) {
        let lo = i * self.rows;
        (lo, self.rows.min(self.m - lo))
    }

    /// Column chunk `j`: its first column and its columns.
    fn cols_of(&self, j: usize) -> (usize, usize) {
        let lo = j * self.cols;
        (lo, self.cols.min(self.n - lo))
    }

    /// `c = a b + bias` on rayon's threads, task by task.
    pub fn run<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
        &self,
        problem: &Problem<'_, A, B>,
        c: &mut [C],
    ) {
        let Problem { kernel, a, b, .. } = problem;
        let kernel = *kernel;
        let k = a.cols();
        let kc_max = problem.blocking.kc;
        // The calling thread's scratch: the f32 sums (when C is not f32) and the packed
        // operands of one KC step, which the tasks share.
        let mut scratch = Scratch::take();
        // SAFETY: `c` holds the m x n product.
        let acc = unsafe {
            Accumulator::new(SendPtr(c.as_mut_ptr()), (self.m, self.n), &mut scratch.acc)
        };
        let (a_words, b_words) = self.packed_words(kernel, kernel.k_steps(kc_max.min(k)));
        resize(&mut scratch.a, a_words * self.row_blocks());
        resize(&mut scratch.b, b_words * self.col_chunks());
        let (a_out, b_out) = (
            SendPtr(scratch.a.as_mut_ptr()),
            SendPtr(scratch.b.as_mut_ptr()),
        );
        let tasks: Vec<(usize, usize)> = (0..self.row_blocks())
            .flat_map(|i| (0..self.col_chunks()).map(move |j| (i, j)))
            .collect();
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            // Every A block and B chunk of this KC, packed once.
            let jobs = self.row_blocks() + self.col_chunks();
            (0..jobs).into_par_iter().for_each(|job| {
                if job < self.row_blocks() {
                    // SAFETY: job `job` writes its own `a_words` of the A buffer (panels and
                    // their slack), sized above.
                    let out = unsafe {
                        core::slice::from_raw_parts_mut(a_out.get().add(job * a_words), a_words)
                    };
                    pack_a(kernel, a, self.rows_of(job), (pc, kc), out);
                } else {
                    let j = job - self.row_blocks();
                    // SAFETY: as above, in the B buffer.
                    let out = unsafe {
                        core::slice::from_raw_parts_mut(b_out.get().add(j * b_words), b_words)
                    };
                    pack_b(kernel, b, (pc, kc), self.cols_of(j), out);
                }
            });
            let last = pc + kc >= k;
            let acc = &acc;
            tasks.par_iter().for_each(|&(i, j)| {
                let (rows, cols) = (self.rows_of(i), self.cols_of(j));
                // SAFETY: the packing above is done (the parallel step returned); tasks only
                // read the packed panels.
                let panels = unsafe {
                    Panels {
                        a: core::slice::from_raw_parts(a_out.get().add(i * a_words), a_words),
                        b: core::slice::from_raw_parts(b_out.get().add(j * b_words), b_words),
                        kc,
                    }
                };
                // SAFETY: task (i, j) alone touches its block of the accumulator (and of C);
                // rounds run one after the other.
                unsafe {
                    panels.multiply(kernel, acc, rows, cols, pc > 0);
                    if last {
                        acc.finish::<A, B, C>(problem, rows, cols);
                    }
                }
            });
        }
        scratch.give_back();
    }

    /// Words of one packed A block (with its slack) and of one packed B chunk, at
    /// `steps` k steps.
    fn packed_words(&self, kernel: Kernel, steps: usize) -> (usize, usize) {
        let (mr, nr) = (kernel.mr(), kernel.nr());
        (
            self.rows.div_ceil(mr) * steps * mr + SLACK,
            self.cols.div_ceil(nr) * steps * nr,
        )
    }
}

/// The grid is a partition: every element of C in exactly one task, whole tiles inside.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Isa;
    use crate::cpu::cast::Format;
    use crate::cpu::gemm::MatRef;
    use crate::cpu::gemm::driver::Blocking;

    #[test]
    fn the_grid_covers_c_once_with_whole_tiles_on_any_thread_count() {
        let kernel = Kernel::select(Isa::PORTABLE, Format::Bf16);
        for (m, n) in [
            (1, 1),
            (7, 300),
            (128, 4096),
            (1000, 33),
            (4096, 4096),
            (13, 97),
        ] {
            let (a, b) = (vec![0f32; m], vec![0f32; n]);
            let problem = Problem {
                kernel,
                a: MatRef::new(&a, 0, m, 1, 1, 1).unwrap(),
                b: MatRef::new(&b, 0, 1, n, 1, 1).unwrap(),
                bias: None,
                blocking: Blocking::of(kernel),
            };
            for threads in [1, 2, 3, 16, 64] {
                let grid = Grid::new(&problem, threads);
                let mut seen = vec![0u8; m * n];
                for i in 0..grid.row_blocks() {
                    for j in 0..grid.col_chunks() {
                        let ((r0, rs), (c0, cs)) = (grid.rows_of(i), grid.cols_of(j));
                        assert!(
                            rs > 0 && cs > 0,
                            "{m}x{n}, {threads} threads: an empty task"
                        );
                        assert!(r0 % kernel.mr() == 0 && c0 % kernel.nr() == 0);
                        for r in r0..r0 + rs {
                            for c in c0..c0 + cs {
                                seen[r * n + c] += 1;
                            }
                        }
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "{m}x{n}, {threads} threads");
                if threads > 1 && m * n >= 64 * 64 {
                    assert!(grid.tasks() >= threads.min(m.div_ceil(32) * n.div_ceil(32)) / 2);
                }
            }
        }
    }
}

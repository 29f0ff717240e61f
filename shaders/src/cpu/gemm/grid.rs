//! A product on several threads: C cut into a grid of blocks (rows by columns, whole
//! tiles each), each block a task that packs its own rows of A and columns of B and runs
//! the blocking loop on one of rayon's threads. The cut is the one a cost model of packing
//! and multiplying finds cheapest: a product of few rows (a layer's forward pass on a small
//! batch) spreads over its columns, one of few columns (a large batch through a narrow
//! layer) over its rows.

use super::{Problem, SendPtr, block};
use crate::cpu::cast::CpuFloat;
use crate::cpu::parallel;

/// Tasks per thread the grid aims for, so that threads that finish early find more.
const TASKS_PER_THREAD: usize = 2;

/// What packing one value of A or B costs, in multiply-adds of the product (measured on
/// AVX-512: about 0.4 ns to round and lay out a value, 0.017 ns a multiply-add). Every
/// task packs the A rows and B columns it reads, so a value is packed once per task that
/// reads it.
const PACK_COST: usize = 24;

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
    /// thread, no block or chunk smaller than one tile, for AMX row blocks of at most the
    /// blocking's `mc` rows; of the ways to cut C so, the one that takes least by
    /// [`Grid::cost`]. One thread: one task.
    ///
    /// Goto's order runs any number of rows in one task, `mc` at a time, each column
    /// block of B packed once for all of them: a task of more rows packs B fewer times
    /// over the product (a transposed f32 weight, `g W^T`, costs about three times a
    /// row-major one to pack). AMX walks its row block outermost and packs B at every
    /// step, so its blocks keep to `mc` rows.
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
        let fewest = match problem.kernel.amx_a() {
            true => row_tiles.div_ceil((problem.blocking.mc / mr).max(1)),
            false => 1,
        };
        let most = target.max(fewest);
        (fewest..=row_tiles.min(most))
            .flat_map(|blocks| (1..=col_tiles.min(most)).map(move |chunks| (blocks, chunks)))
            .map(|(blocks, chunks)| Grid {
                m,
                n,
                rows: row_tiles.div_ceil(blocks) * mr,
                cols: col_tiles.div_ceil(chunks) * nr,
            })
            // Enough tasks to keep the threads busy (where C has that many tiles) and not
            // many more than the target, if such a cut exists; then the cheapest; of equal
            // costs, the most tasks (the first of those).
            .min_by_key(|grid| {
                let tasks = grid.tasks();
                (
                    tasks < threads.min(row_tiles * col_tiles) || tasks > most,
                    grid.cost(threads),
                    usize::MAX - tasks,
                )
            })
            .expect("at least one way to cut C")
    }

    /// A model of the time of one KC step on `threads` threads, in multiply-adds: rounds
    /// of `threads` tasks of the largest block, each packing its A rows and B columns and
    /// multiplying them.
    fn cost(&self, threads: usize) -> usize {
        let (rows, cols) = (self.rows.min(self.m), self.cols.min(self.n));
        self.tasks().div_ceil(threads) * (PACK_COST * (rows + cols) + rows * cols)
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

    /// `c = a b + bias` on rayon's threads, a block each.
    pub fn run<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
        &self,
        problem: &Problem<'_, A, B>,
        c: &mut [C],
    ) {
        debug_assert_eq!(c.len(), self.m * self.n);
        let c = SendPtr(c.as_mut_ptr());
        let chunks = self.col_chunks();
        parallel::for_each(self.tasks(), |task| {
            let (i, j) = (task / chunks, task % chunks);
            // SAFETY: `c` holds the m x n product; the blocks partition it, one task each.
            unsafe { block(problem, c, self.rows_of(i), self.cols_of(j)) };
        });
    }
}

/// The grid is a partition: every element of C in exactly one task, whole tiles inside.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::Isa;
    use crate::cpu::cast::Format;
    use crate::cpu::gemm::driver::{Blocking, Lhs};
    use crate::cpu::gemm::{Kernel, MatRef};

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
                a: Lhs::Matrix(MatRef::new(&a, 0, m, 1, 1, 1).unwrap()),
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

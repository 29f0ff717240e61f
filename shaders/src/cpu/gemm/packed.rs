//! A left operand packed once: the panels every block of a product would pack from A,
//! laid out for all of A's rows and every KC step, so that products that share A (a
//! convolution's weight times each chunk of the batch's columns) round and lay it out once.

use super::Blocking;
use super::scratch::Lines;
use crate::cpu::cast::CpuFloat;
use crate::cpu::gemm::MatRef;
use crate::cpu::gemm::kernel::Kernel;
use crate::cpu::gemm::pack::{SLACK, pack_a};

/// A matrix packed as the left operand of products on one [`Kernel`], for
/// [`gemm_packed_on`](crate::cpu::gemm::gemm_packed_on). The products are the same bits
/// as [`gemm_on`](crate::cpu::gemm::gemm_on)'s with the matrix it was packed from.
///
/// ```
/// use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef, PackedA, Threads};
/// use burn_amp_kernels::cpu::{Isa, cast::Format};
///
/// let kernel = Kernel::select(Isa::detect(), Format::Bf16);
/// let w = [1f32, 2.0, 3.0, 4.0]; // 2 x 2
/// let packed = PackedA::new(kernel, MatRef::row_major(&w, 2, 2)?);
/// // Packed once, multiplied twice: each unit vector picks a column of w.
/// for (x, column) in [([1f32, 0.0], [1f32, 3.0]), ([0.0, 1.0], [2.0, 4.0])] {
///     let mut y = [0f32; 2];
///     let x = MatRef::row_major(&x, 2, 1)?;
///     gemm::gemm_packed_on::<_, f32, _>(Threads::Caller, &packed, x, None, &mut y)?;
///     assert_eq!(y, column);
/// }
/// # Ok::<(), gemm::GemmError>(())
/// ```
pub struct PackedA {
    kernel: Kernel,
    rows: usize,
    depth: usize,
    /// k per KC step (the kernel's blocking).
    kc: usize,
    /// Where each KC step's panels start in `words`.
    starts: Vec<usize>,
    words: Lines,
}

impl core::fmt::Debug for PackedA {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PackedA")
            .field("kernel", &self.kernel)
            .field("rows", &self.rows)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl PackedA {
    /// `a` packed for `kernel`: its values rounded to the kernel's compute format.
    pub fn new<A: CpuFloat>(kernel: Kernel, a: MatRef<'_, A>) -> PackedA {
        let (rows, depth) = (a.rows(), a.cols());
        let kc = Blocking::of(kernel).kc;
        let mr = kernel.mr();
        // Each step's panels, with the slack the packing may write past them, on whole lines.
        let step_len =
            |kc: usize| (rows.div_ceil(mr) * kernel.k_steps(kc) * mr + SLACK).next_multiple_of(16);
        // Each KC step's first k, where its panels start, and the words they take.
        let mut steps = Vec::new();
        let mut total = 0;
        for pc in (0..depth).step_by(kc) {
            let len = step_len(kc.min(depth - pc));
            steps.push((pc, total, len));
            total += len;
        }
        let mut words = Lines::default();
        let buf = words.words(total);
        for &(pc, start, len) in &steps {
            let k = (pc, kc.min(depth - pc));
            pack_a(kernel, &a, (0, rows), k, &mut buf[start..][..len]);
        }
        let starts = steps.iter().map(|&(_, start, _)| start).collect();
        PackedA {
            kernel,
            rows,
            depth,
            kc,
            starts,
            words,
        }
    }

    /// The kernel it was packed for.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Rows of the matrix packed.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix packed: the products' depth.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The panels of rows `i0..i0 + mc` (`i0` a whole number of tiles) for the KC step at
    /// `pc`, as [`pack_a`] would write them, with its slack.
    pub(in crate::cpu::gemm) fn panels(&self, (i0, mc): (usize, usize), pc: usize) -> &[u32] {
        let mr = self.kernel.mr();
        debug_assert!(i0.is_multiple_of(mr) && i0 + mc <= self.rows && pc.is_multiple_of(self.kc));
        let steps = self.kernel.k_steps(self.kc.min(self.depth - pc));
        let at = self.starts[pc / self.kc] + i0 / mr * steps * mr;
        &self.words.all()[at..][..mc.div_ceil(mr) * steps * mr + SLACK]
    }
}

//! Matmul and linear on Flex through the CPU GEMM: operands of any float dtype (an f32
//! weight, bf16 activations) rounded to the compute format while packed, products summed
//! in f32, the result written in the dtype asked for; and their gradients, each written in
//! its operand's dtype (an f32 weight gets an f32 gradient, with no bf16 copy between).

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::cast::CpuFloat;
use burn_amp_kernels::cpu::gemm::{self, Kernel};
use burn_amp_kernels::cpu::{Isa, cast, parallel};
use burn_tensor::{DType, Shape};

use super::tensor::{
    converted, flatten_rows, format, from_vec, matrix, reshaped, to_fill, values_f32,
};
use crate::dtype::with_float;

/// How a matmul's operands line up.
#[derive(Clone, Debug)]
pub(crate) enum Plan {
    /// The same batch dimensions on both sides (or none): one product per batch entry.
    Batched,
    /// A right-hand side without batch (all its batch dimensions are 1): the left-hand
    /// side's batch and rows form the rows of one product, as in a linear layer. `out` is
    /// the broadcast output shape.
    Shared { out: Shape },
}

impl Plan {
    /// The plan for `lhs @ rhs`, or `None` for what the CPU kernels do not take (other
    /// dtypes, other broadcasts): those go to the backend.
    pub(crate) fn of(lhs: &FlexTensor, rhs: &FlexTensor) -> Option<Plan> {
        format(lhs.dtype())?;
        format(rhs.dtype())?;
        let (ls, rs) = (lhs.layout().shape(), rhs.layout().shape());
        let (lr, rr) = (ls.num_dims(), rs.num_dims());
        if lr < 2 || rr < 2 || ls[lr - 1] != rs[rr - 2] {
            return None;
        }
        if lr == rr && ls[..lr - 2] == rs[..rr - 2] {
            return Some(Plan::Batched);
        }
        if rr <= lr && rs[..rr - 2].iter().all(|d| *d == 1) {
            let mut out = ls.to_vec();
            out[lr - 1] = rs[rr - 1];
            return Some(Plan::Shared {
                out: Shape::from(out),
            });
        }
        None
    }

    /// `lhs @ rhs`, operands rounded to `kernel`'s format, in `out`.
    pub(crate) fn forward(
        &self,
        kernel: Kernel,
        lhs: &FlexTensor,
        rhs: &FlexTensor,
        out: DType,
    ) -> FlexTensor {
        match self {
            Plan::Batched => product(kernel, lhs, false, rhs, false, None, out),
            Plan::Shared { out: shape } => {
                let y = product(
                    kernel,
                    &flatten_rows(lhs),
                    false,
                    &squeeze(rhs),
                    false,
                    None,
                    out,
                );
                reshaped(y, shape.clone())
            }
        }
    }

    /// The gradient of `lhs` from the output's: `grad @ rhs^T`, in `dtype`.
    pub(crate) fn grad_lhs(
        &self,
        kernel: Kernel,
        grad: &FlexTensor,
        rhs: &FlexTensor,
        lhs_shape: &Shape,
        dtype: DType,
    ) -> FlexTensor {
        match self {
            Plan::Batched => product(kernel, grad, false, rhs, true, None, dtype),
            Plan::Shared { .. } => {
                let g = product(
                    kernel,
                    &flatten_rows(grad),
                    false,
                    &squeeze(rhs),
                    true,
                    None,
                    dtype,
                );
                reshaped(g, lhs_shape.clone())
            }
        }
    }

    /// The gradient of `rhs` from the output's: `lhs^T @ grad`, in `dtype`.
    pub(crate) fn grad_rhs(
        &self,
        kernel: Kernel,
        lhs: &FlexTensor,
        grad: &FlexTensor,
        rhs_shape: &Shape,
        dtype: DType,
    ) -> FlexTensor {
        match self {
            Plan::Batched => product(kernel, lhs, true, grad, false, None, dtype),
            Plan::Shared { .. } => {
                let g = product(
                    kernel,
                    &flatten_rows(lhs),
                    true,
                    &flatten_rows(grad),
                    false,
                    None,
                    dtype,
                );
                reshaped(g, rhs_shape.clone())
            }
        }
    }
}

/// A tensor whose leading dimensions are all 1, as its last two.
fn squeeze(t: &FlexTensor) -> FlexTensor {
    let layout = t.layout();
    let r = layout.num_dims();
    if r == 2 {
        return t.clone();
    }
    let (shape, strides) = (layout.shape(), layout.strides());
    let layout = burn::backend::flex::Layout::new(
        Shape::new([shape[r - 2], shape[r - 1]]),
        vec![strides[r - 2], strides[r - 1]],
        layout.start_offset(),
    );
    FlexTensor::from_arc(t.data_arc(), layout, t.dtype())
}

/// Whether the CPU kernels take this linear layer: float dtypes they read, a `[in, out]`
/// weight whose `in` is `x`'s last dimension, a bias of `out` values.
pub(crate) fn takes_linear(x: &FlexTensor, weight: &FlexTensor, bias: Option<&FlexTensor>) -> bool {
    let (xs, ws) = (x.layout().shape(), weight.layout().shape());
    let dtypes = format(x.dtype()).is_some()
        && format(weight.dtype()).is_some()
        && bias.is_none_or(|b| format(b.dtype()).is_some());
    dtypes
        && xs.num_dims() >= 1
        && ws.num_dims() == 2
        && xs[xs.num_dims() - 1] == ws[0]
        && bias.is_none_or(|b| b.layout().shape().as_slice() == [ws[1]])
}

/// `x @ weight + bias` over the last dimension of `x` (`weight` is `[in, out]`), in `out`.
pub(crate) fn linear(
    kernel: Kernel,
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
    out: DType,
) -> FlexTensor {
    let mut shape = x.layout().shape().to_vec();
    let last = shape.len() - 1;
    shape[last] = weight.layout().shape()[1];
    let bias = bias.map(|b| values_f32(kernel.isa(), b));
    let y = product(kernel, &flatten_rows(x), false, weight, false, bias, out);
    reshaped(y, Shape::from(shape))
}

/// The three gradients of a linear layer from the output's (`None` where not asked for):
/// `grad @ weight^T`, `x^T @ grad` and the column sums of `grad`, each in its operand's
/// dtype.
pub(crate) fn linear_grads(
    kernel: Kernel,
    grad: &FlexTensor,
    x: Option<&FlexTensor>,
    weight: Option<&FlexTensor>,
    dtypes: [DType; 3],
    wants: [bool; 3],
) -> [Option<FlexTensor>; 3] {
    let g = flatten_rows(grad);
    let grad_x = (wants[0]).then(|| {
        let weight = weight.expect("the weight is kept when x needs a gradient");
        let mut shape = grad.layout().shape().to_vec();
        let last = shape.len() - 1;
        shape[last] = weight.layout().shape()[0];
        let gx = product(kernel, &g, false, weight, true, None, dtypes[0]);
        reshaped(gx, Shape::from(shape))
    });
    let grad_w = (wants[1]).then(|| {
        let x = x.expect("x is kept when the weight needs a gradient");
        product(kernel, &flatten_rows(x), true, &g, false, None, dtypes[1])
    });
    let grad_b = (wants[2]).then(|| column_sums(kernel.isa(), &g, dtypes[2]));
    [grad_x, grad_w, grad_b]
}

/// The sum of each column of a `[rows, cols]` matrix, in f32, then in `dtype`.
fn column_sums(isa: Isa, g: &FlexTensor, dtype: DType) -> FlexTensor {
    let g = if g.layout().strides()[1] == 1 {
        g.clone()
    } else {
        g.to_contiguous()
    };
    let layout = g.layout();
    let (rows, cols) = (layout.shape()[0], layout.shape()[1]);
    let (start, row_stride) = (layout.start_offset(), layout.strides()[0]);
    let sums = with_float!(g.dtype(), T => {
        let data = g.storage::<T>();
        let partial = |range: core::ops::Range<usize>| {
            let mut acc = vec![0f32; cols];
            for i in range {
                let at = (start as isize + i as isize * row_stride) as usize;
                cast::add_widened(isa, &data[at..at + cols], &mut acc).expect("equal lengths");
            }
            acc
        };
        let chunk = (1usize << 16).div_ceil(cols.max(1)).max(1);
        parallel::map(rows.div_ceil(chunk), |c| partial(c * chunk..rows.min((c + 1) * chunk)))
            .into_iter()
            // The chunks' sums added in order: the same bits whichever thread ran which.
            .fold(vec![0f32; cols], |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
                a
            })
    }, _ => panic!("a gradient of dtype {:?}", g.dtype()));
    with_float!(dtype, D => {
        from_vec::<D>(converted::<f32, D>(isa, &sums), Shape::new([cols]))
    }, _ => panic!("a bias of dtype {dtype:?}"))
}

/// `a @ b` (each optionally transposed in its last two dimensions, both with the same
/// batch dimensions) plus `bias`, rounded to `format`, as a new contiguous tensor in `out`.
fn product(
    kernel: Kernel,
    a: &FlexTensor,
    a_t: bool,
    b: &FlexTensor,
    b_t: bool,
    bias: Option<Vec<f32>>,
    out: DType,
) -> FlexTensor {
    with_float!(a.dtype(), A => {
        with_float!(b.dtype(), B => {
            with_float!(out, C => {
                typed_product::<A, B, C>(kernel, a, a_t, b, b_t, bias.as_deref())
            }, _ => panic!("a product in {out:?}"))
        }, _ => panic!("an operand of dtype {:?}", b.dtype()))
    }, _ => panic!("an operand of dtype {:?}", a.dtype()))
}

fn typed_product<A, B, C>(
    kernel: Kernel,
    a: &FlexTensor,
    a_t: bool,
    b: &FlexTensor,
    b_t: bool,
    bias: Option<&[f32]>,
) -> FlexTensor
where
    A: CpuFloat + burn_tensor::Element + bytemuck::Pod,
    B: CpuFloat + burn_tensor::Element + bytemuck::Pod,
    C: CpuFloat + burn_tensor::Element + bytemuck::Pod,
{
    let (al, bl) = (a.layout(), b.layout());
    let r = al.num_dims();
    let batch: Vec<usize> = al.shape()[..r - 2].to_vec();
    debug_assert_eq!(batch.as_slice(), &bl.shape()[..r - 2]);
    let view = |t: &FlexTensor, transposed: bool| {
        let s = t.layout().shape();
        if transposed {
            (s[r - 1], s[r - 2])
        } else {
            (s[r - 2], s[r - 1])
        }
    };
    let (m, _) = view(a, a_t);
    let (_, n) = view(b, b_t);
    let count: usize = batch.iter().product();
    // The offset of batch entry `e` in a tensor with these strides.
    let offset = |strides: &[isize], mut e: usize| -> isize {
        let mut off = 0;
        for d in (0..batch.len()).rev() {
            off += (e % batch[d]) as isize * strides[d];
            e /= batch[d];
        }
        off
    };
    let mut c = to_fill::<C>(count * m * n);
    let run = |e: usize, c: &mut [C]| {
        let am = matrix::<A>(a, offset(al.strides(), e));
        let bm = matrix::<B>(b, offset(bl.strides(), e));
        let am = if a_t { am.transpose() } else { am };
        let bm = if b_t { bm.transpose() } else { bm };
        gemm::gemm_bias(kernel, am, bm, bias, c).expect("shapes checked by the plan");
    };
    if count == 1 || m * n == 0 {
        if m * n > 0 {
            run(0, &mut c);
        }
    } else {
        parallel::chunks(&mut c, m * n, run);
    }
    let mut shape = batch;
    shape.extend([m, n]);
    from_vec::<C>(c, Shape::from(shape))
}

//! A [`GemmPlan`] carried out on the CPU, in cuBLASLt's terms (column-major matrices,
//! leading dimensions, transpose flags, batch strides, offsets, epilogue): the reference
//! the plans are tested against, so that a wrong layout fails on any machine, not on the
//! first GPU.

use super::plan::{Epilogue, GemmDtype, GemmPlan, Layout};

/// `value` rounded to `dtype` (FP8 formats: their OCP rounding, saturating) and back.
fn rounded(value: f32, dtype: GemmDtype) -> f32 {
    match dtype {
        GemmDtype::F32 => value,
        GemmDtype::F16 => half::f16::from_f32(value).to_f32(),
        GemmDtype::BF16 => half::bf16::from_f32(value).to_f32(),
        GemmDtype::E4M3 | GemmDtype::E5M2 => {
            use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, reference};
            let format = if dtype == GemmDtype::E4M3 {
                Fp8Format::E4M3
            } else {
                Fp8Format::E5M2
            };
            let code = reference::encode_scaled(value, 1.0, Fp8Cast::new(format), 0);
            reference::decode_scaled(code, format, 1.0)
        }
    }
}

/// Element `(row, col)` of batch entry `e` of a stored matrix, as its type rounds it.
fn stored(data: &[f32], layout: &Layout, e: usize, row: usize, col: usize) -> f32 {
    rounded(
        data[layout.offset + e * layout.batch_stride + row + col * layout.ld],
        layout.dtype,
    )
}

/// Element `(i, p)` of `op(stored)`.
fn op(data: &[f32], layout: &Layout, e: usize, i: usize, p: usize) -> f32 {
    if layout.transposed {
        stored(data, layout, e, p, i)
    } else {
        stored(data, layout, e, i, p)
    }
}

/// The call `plan` describes, on f32 buffers standing for its operands' (values in their
/// type), `out` Burn's row-major output (the call's column-major `D`). `a_scale_inv` and
/// `b_scale_inv` multiply an FP8 product (1 otherwise); `bias` is the epilogue's.
///
/// # Panics
/// When a buffer is too short for the plan's layouts.
pub fn gemm(
    plan: &GemmPlan,
    (a, b): (&[f32], &[f32]),
    bias: Option<&[f32]>,
    (a_scale_inv, b_scale_inv): (f32, f32),
    out: &mut [f32],
) {
    assert_eq!(out.len(), plan.out_len(), "the output holds Burn's product");
    for e in 0..plan.batch {
        for j in 0..plan.n {
            for i in 0..plan.m {
                let mut sum = 0f32;
                for p in 0..plan.k {
                    sum += op(a, &plan.a, e, i, p) * op(b, &plan.b, e, p, j);
                }
                let mut value = sum * a_scale_inv * b_scale_inv;
                if plan.epilogue == Epilogue::Bias {
                    let bias = bias.expect("the bias epilogue reads a bias");
                    value += rounded(bias[i], plan.d.dtype);
                }
                out[plan.d.offset + e * plan.d.batch_stride + i + j * plan.d.ld] =
                    rounded(value, plan.d.dtype);
            }
        }
    }
}

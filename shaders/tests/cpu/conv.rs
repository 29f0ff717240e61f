//! The convolution's columns: `weight x im2col(x)` on the GEMM is a direct convolution in
//! f64 (stride, padding, dilation, 1-d, a kernel as large as the input), and `col2im` is
//! `im2col`'s adjoint (`<im2col(x), y> = <x, col2im(y)>`) and the value-by-value sum.

use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::conv::{self, ConvError, ConvShape};
use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef};

use super::Rng;

fn shapes() -> Vec<(ConvShape, usize)> {
    let base = ConvShape::new(3, 4, [9, 7], [3, 3]);
    vec![
        (base, 5),
        (
            ConvShape {
                stride: [2, 2],
                padding: [1, 1],
                ..base
            },
            6,
        ),
        (
            ConvShape {
                size: [8, 10],
                stride: [2, 2],
                padding: [0, 1],
                ..base
            },
            3,
        ),
        (
            ConvShape {
                dilation: [2, 1],
                padding: [2, 0],
                ..base
            },
            3,
        ),
        (
            ConvShape {
                kernel: [1, 5],
                size: [1, 17],
                stride: [1, 3],
                padding: [0, 2],
                ..base
            },
            2,
        ),
        (
            ConvShape {
                kernel: [9, 7],
                ..base
            },
            4,
        ),
        // Strided convolutions whose output is as wide as a phase plane (ceil(w / sx)):
        // the columns come from the phase planes (the two above too); in the second, two
        // kernel columns read only padding.
        (
            ConvShape {
                size: [11, 8],
                stride: [3, 2],
                dilation: [2, 1],
                padding: [3, 1],
                ..base
            },
            3,
        ),
        (
            ConvShape {
                size: [7, 2],
                stride: [3, 2],
                dilation: [1, 2],
                padding: [1, 2],
                ..base
            },
            2,
        ),
        // Rows longer than a vector at stride 2.
        (
            ConvShape {
                size: [4, 71],
                stride: [2, 2],
                padding: [1, 1],
                ..base
            },
            2,
        ),
        // A stride far past the input (one output): a gather, not 2^40 phase planes.
        (
            ConvShape {
                size: [3, 4],
                stride: [1 << 20, 1 << 20],
                padding: [1, 1],
                ..base
            },
            2,
        ),
        // A strided output narrower than a phase plane: a gather per output row.
        (
            ConvShape {
                stride: [2, 2],
                ..base
            },
            3,
        ),
        // "Same" convolutions (stride 1, output as wide as the input): the columns' rows
        // are copied as one run of each plane, its padding columns cleared after.
        (
            ConvShape {
                padding: [1, 1],
                ..base
            },
            3,
        ),
        (
            ConvShape {
                size: [6, 9],
                dilation: [1, 2],
                padding: [0, 2],
                ..base
            },
            2,
        ),
        (
            ConvShape {
                kernel: [3, 5],
                size: [5, 4],
                padding: [2, 2],
                ..base
            },
            2,
        ),
        (
            ConvShape {
                batch: 1,
                channels: 1,
                ..base
            },
            1,
        ),
    ]
}

/// Calls `read` with every (sample, patch entry, output position) whose input value lies
/// inside the image: `(n, k, [i, j], input)`, `k` the index of patch entry `(c, a, b)` and
/// `input` the value's index in `x`.
fn reads(s: &ConvShape, mut read: impl FnMut(usize, usize, [usize; 2], usize)) {
    let [oh, ow] = s.out_size().unwrap();
    let [h, wd] = s.size;
    let [kh, kw] = s.kernel;
    for n in 0..s.batch {
        for c in 0..s.channels {
            for a in 0..kh {
                for b in 0..kw {
                    for i in 0..oh {
                        for j in 0..ow {
                            let iy = (i * s.stride[0] + a * s.dilation[0]) as isize
                                - s.padding[0] as isize;
                            let ix = (j * s.stride[1] + b * s.dilation[1]) as isize
                                - s.padding[1] as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                continue;
                            }
                            let input = ((n * s.channels + c) * h + iy as usize) * wd + ix as usize;
                            read(n, (c * kh + a) * kw + b, [i, j], input);
                        }
                    }
                }
            }
        }
    }
}

/// A direct convolution in f64: `[batch, out, oh, ow]`.
fn direct(s: &ConvShape, out: usize, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
    let [oh, ow] = s.out_size().unwrap();
    let mut y = vec![0f64; s.batch * out * oh * ow];
    for (at, v) in y.iter_mut().enumerate() {
        *v = bias[at / (oh * ow) % out] as f64;
    }
    let patch = s.patch();
    reads(s, |n, k, [i, j], input| {
        for o in 0..out {
            y[((n * out + o) * oh + i) * ow + j] += x[input] as f64 * w[o * patch + k] as f64;
        }
    });
    y
}

#[test]
fn columns_times_the_weight_are_the_direct_convolution() {
    for (shape, out) in shapes() {
        let mut rng = Rng(shape.patch() as u64);
        let x: Vec<f32> = (0..shape.batch * shape.sample())
            .map(|_| rng.uniform())
            .collect();
        let w: Vec<f32> = (0..out * shape.patch()).map(|_| rng.uniform()).collect();
        let bias: Vec<f32> = (0..out).map(|_| rng.uniform()).collect();
        let want = direct(&shape, out, &x, &w, &bias);
        let (k, l) = (shape.patch(), shape.positions());
        let kernel = Kernel::select(Isa::PORTABLE, Format::F32);
        for isa in Isa::available() {
            let mut got = Vec::new();
            for n in 0..shape.batch {
                let mut cols = vec![0f32; k * l];
                conv::im2col(isa, &shape, &x, n..n + 1, &mut cols).unwrap();
                let mut y = vec![0f32; out * l];
                gemm::gemm_row_bias(
                    kernel,
                    MatRef::row_major(&w, out, k).unwrap(),
                    MatRef::row_major(&cols, k, l).unwrap(),
                    &bias,
                    &mut y,
                )
                .unwrap();
                got.extend(y);
            }
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let bound = 1e-5 * (k as f64 + 1.0);
                assert!(
                    (*g as f64 - e).abs() <= bound,
                    "{shape:?} on {isa}: [{i}] {g} vs {e}"
                );
            }
            // The whole batch in one call: the samples' columns side by side.
            let mut all = vec![0f32; k * shape.batch * l];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut all).unwrap();
            for n in 0..shape.batch {
                let mut one = vec![0f32; k * l];
                conv::im2col(isa, &shape, &x, n..n + 1, &mut one).unwrap();
                for r in 0..k {
                    assert_eq!(
                        all[r * shape.batch * l + n * l..][..l],
                        one[r * l..][..l],
                        "{shape:?}: sample {n}, row {r}"
                    );
                }
            }
        }
    }
}

#[test]
fn columns_in_another_format_are_the_f32_columns_rounded() {
    // The same-format copy (bf16 to bf16) and the staged conversion (f32 to bf16, bf16 to
    // f32) take their own paths at every stride: each must agree with the f32 columns.
    use half::bf16;
    for (shape, _) in shapes() {
        let mut rng = Rng(11 + shape.patch() as u64);
        let x: Vec<f32> = (0..shape.batch * shape.sample())
            .map(|_| rng.uniform())
            .collect();
        let xb: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let x_rounded: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
        let n = shape.patch() * shape.batch * shape.positions();
        for isa in Isa::available() {
            let mut want = vec![0f32; n];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut want).unwrap();
            let want: Vec<bf16> = want.iter().map(|&v| bf16::from_f32(v)).collect();
            let mut from_f32 = vec![bf16::ZERO; n];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut from_f32).unwrap();
            assert_eq!(from_f32, want, "{shape:?} on {isa}: f32 to bf16");
            let mut from_bf16 = vec![bf16::ZERO; n];
            conv::im2col(isa, &shape, &xb, 0..shape.batch, &mut from_bf16).unwrap();
            assert_eq!(from_bf16, want, "{shape:?} on {isa}: bf16 to bf16");
            let mut widened = vec![0f32; n];
            conv::im2col(isa, &shape, &xb, 0..shape.batch, &mut widened).unwrap();
            let mut exact = vec![0f32; n];
            conv::im2col(isa, &shape, &x_rounded, 0..shape.batch, &mut exact).unwrap();
            assert_eq!(widened, exact, "{shape:?} on {isa}: bf16 to f32");
        }
    }
}

#[test]
fn col2im_is_the_adjoint_of_im2col() {
    for (shape, _) in shapes() {
        let mut rng = Rng(7 + shape.patch() as u64);
        let x: Vec<f32> = (0..shape.batch * shape.sample())
            .map(|_| rng.uniform())
            .collect();
        let n = shape.patch() * shape.batch * shape.positions();
        let y: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
        let mut cols = vec![0f32; n];
        conv::im2col(Isa::detect(), &shape, &x, 0..shape.batch, &mut cols).unwrap();
        let mut back = vec![0f32; x.len()];
        conv::col2im(&shape, &y, 0..shape.batch, &mut back).unwrap();
        let lhs: f64 = cols
            .iter()
            .zip(&y)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        let rhs: f64 = x
            .iter()
            .zip(&back)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum();
        assert!(
            (lhs - rhs).abs() <= 1e-4 * lhs.abs().max(1.0),
            "{shape:?}: {lhs} vs {rhs}"
        );
    }
}

/// `col2im` value by value in f64: each column gradient added where its patch entry read.
fn direct_col2im(s: &ConvShape, dcols: &[f32]) -> Vec<f64> {
    let [oh, ow] = s.out_size().unwrap();
    let width = s.batch * oh * ow;
    let mut dx = vec![0f64; s.batch * s.sample()];
    reads(s, |n, k, [i, j], input| {
        dx[input] += dcols[k * width + (n * oh + i) * ow + j] as f64;
    });
    dx
}

#[test]
fn col2im_adds_each_gradient_where_its_patch_read() {
    // Every shape (strided, dilated, padded, 1-d) against the value-by-value sum, added
    // onto what dx held.
    for (shape, _) in shapes() {
        let mut rng = Rng(19 + shape.patch() as u64);
        let n = shape.patch() * shape.batch * shape.positions();
        let dcols: Vec<f32> = (0..n).map(|_| rng.uniform()).collect();
        let want = direct_col2im(&shape, &dcols);
        let mut got = vec![1f32; shape.batch * shape.sample()];
        conv::col2im(&shape, &dcols, 0..shape.batch, &mut got).unwrap();
        let bound = 1e-5 * (shape.kernel[0] * shape.kernel[1]) as f64;
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            assert!(
                (*g as f64 - 1.0 - e).abs() <= bound,
                "{shape:?}: [{i}] {g} vs 1 + {e}"
            );
        }
    }
}

#[test]
fn bad_geometry_and_lengths_are_typed_errors() {
    let big = ConvShape::new(1, 1, [2, 2], [3, 3]);
    let mut cols = vec![0f32; 9];
    assert!(matches!(
        conv::im2col(Isa::detect(), &big, &[0f32; 4], 0..1, &mut cols),
        Err(ConvError::Geometry { .. })
    ));
    let zero_stride = ConvShape {
        stride: [0, 1],
        ..ConvShape::new(1, 1, [4, 4], [2, 2])
    };
    assert_eq!(zero_stride.out_size(), None);
    let ok = ConvShape::new(2, 1, [4, 4], [2, 2]);
    let mut cols = vec![0f32; 4 * 9];
    assert!(matches!(
        conv::im2col(Isa::detect(), &ok, &[0f32; 3], 0..1, &mut cols),
        Err(ConvError::Length { .. })
    ));
    assert!(matches!(
        conv::im2col(Isa::detect(), &ok, &[0f32; 32], 1..3, &mut cols),
        Err(ConvError::Length { .. })
    ));
}

//! The convolution's columns: `weight x im2col(x)` on the GEMM is a direct convolution in
//! f64 (stride, padding, dilation, 1-d, a kernel as large as the input), and `col2im` is
//! `im2col`'s adjoint (`<im2col(x), y> = <x, col2im(y)>`) and the value-by-value sum.

use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{CpuFloat, Format};
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
                // NaN: a column value im2col leaves unwritten (a buffer reused, as the backend's
                // are) fails the comparison.
                let mut cols = vec![f32::NAN; k * l];
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
            let mut all = vec![f32::NAN; k * shape.batch * l];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut all).unwrap();
            for n in 0..shape.batch {
                let mut one = vec![f32::NAN; k * l];
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
            let mut want = vec![f32::NAN; n];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut want).unwrap();
            let want: Vec<bf16> = want.iter().map(|&v| bf16::from_f32(v)).collect();
            let mut from_f32 = vec![bf16::NAN; n];
            conv::im2col(isa, &shape, &x, 0..shape.batch, &mut from_f32).unwrap();
            assert_eq!(from_f32, want, "{shape:?} on {isa}: f32 to bf16");
            let mut from_bf16 = vec![bf16::NAN; n];
            conv::im2col(isa, &shape, &xb, 0..shape.batch, &mut from_bf16).unwrap();
            assert_eq!(from_bf16, want, "{shape:?} on {isa}: bf16 to bf16");
            let mut widened = vec![f32::NAN; n];
            conv::im2col(isa, &shape, &xb, 0..shape.batch, &mut widened).unwrap();
            let mut exact = vec![f32::NAN; n];
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

/// The input gradient value by value in f64: `dx[input] += w[o, k] dy[n, o, i, j]` for
/// every input value patch entry `k` of output position `(i, j)` read.
fn direct_input_grad(s: &ConvShape, out: usize, w: &[f32], dy: &[f32]) -> Vec<f64> {
    let [oh, ow] = s.out_size().unwrap();
    let patch = s.patch();
    let mut dx = vec![0f64; s.batch * s.sample()];
    reads(s, |n, k, [i, j], input| {
        for o in 0..out {
            dx[input] += w[o * patch + k] as f64 * dy[((n * out + o) * oh + i) * ow + j] as f64;
        }
    });
    dx
}

/// The input gradient of the samples `samples` by phases: each phase's columns of `dy`
/// times its weight on the GEMM (f32), stored into `dx` (`[samples, channels, h, w]`).
fn by_phases<D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    out: usize,
    (w, dy): (&[f32], &[f32]),
    samples: core::ops::Range<usize>,
    dx: &mut [D],
) {
    let kernel = Kernel::select(Isa::PORTABLE, Format::F32);
    let phases = shape.grad_phases().unwrap();
    let mut products = Vec::new();
    for phase in &phases {
        let (depth, width) = (phase.depth(out), samples.len() * phase.positions());
        let mut wt = vec![0f32; shape.channels * depth];
        phase.weight(shape, out, w, &mut wt).unwrap();
        // NaN: a value the phase's columns leave unwritten fails the sums.
        let mut cols = vec![f32::NAN; depth * width];
        phase
            .columns(isa, shape, out, dy, samples.clone(), &mut cols)
            .unwrap();
        // A phase of depth 0 stores zeros over whatever its product holds.
        let mut product = vec![f32::NAN; shape.channels * width];
        if depth > 0 {
            gemm::gemm(
                kernel,
                MatRef::row_major(&wt, shape.channels, depth).unwrap(),
                MatRef::row_major(&cols, depth, width).unwrap(),
                &mut product,
            )
            .unwrap();
        }
        products.push(product);
    }
    let products: Vec<&[f32]> = products.iter().map(|p| p.as_slice()).collect();
    conv::store_phases(isa, shape, out, &phases, &products, None, dx).unwrap();
}

#[test]
fn the_input_gradient_by_phases_is_the_direct_sum() {
    // Every shape (strides past the kernel and the input, dilations, padding wider than
    // the kernel's reach, 1-d) against the value-by-value sum; dx starts as NaNs, so a
    // position no phase stores fails; the samples of a chunk are those samples' gradient.
    for (shape, out) in shapes() {
        let mut rng = Rng(23 + shape.patch() as u64);
        let w: Vec<f32> = (0..out * shape.patch()).map(|_| rng.uniform()).collect();
        let dy: Vec<f32> = (0..shape.batch * out * shape.positions())
            .map(|_| rng.uniform())
            .collect();
        let want = direct_input_grad(&shape, out, &w, &dy);
        for isa in Isa::available() {
            let mut got = vec![f32::NAN; shape.batch * shape.sample()];
            by_phases(isa, &shape, out, (&w, &dy), 0..shape.batch, &mut got);
            let bound = 1e-5 * (shape.patch() * out) as f64;
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (*g as f64 - e).abs() <= bound,
                    "{shape:?} on {isa}: [{i}] {g} vs {e}"
                );
            }
            let tail = 1..shape.batch;
            let mut part = vec![f32::NAN; tail.len() * shape.sample()];
            by_phases(isa, &shape, out, (&w, &dy), tail, &mut part);
            assert_eq!(
                part,
                got[shape.sample()..],
                "{shape:?} on {isa}: samples 1.."
            );
        }
    }
}

#[test]
fn phases_cover_every_input_position_and_every_kernel_entry_that_reads_once() {
    for (shape, _) in shapes() {
        let phases = shape.grad_phases().unwrap();
        let [h, w] = shape.size;
        let mut seen = vec![0u32; h * w];
        for phase in &phases {
            let ([ry, rx], [ph, pw]) = (phase.residue(), phase.size());
            for t in 0..ph {
                for u in 0..pw {
                    seen[(ry + t * shape.stride[0]) * w + rx + u * shape.stride[1]] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&v| v == 1), "{shape:?}: {seen:?}");
        // The kernel entries that read an input value, from the value-by-value reads.
        let mut entries = std::collections::BTreeSet::new();
        reads(&shape, |n, k, _, _| {
            if n == 0 && k < shape.kernel[0] * shape.kernel[1] {
                entries.insert(k);
            }
        });
        let taps: usize = phases.iter().map(|p| p.taps()[0] * p.taps()[1]).sum();
        assert_eq!(taps, entries.len(), "{shape:?}");
        assert_eq!(
            phases[0].depth(3),
            3 * phases[0].taps()[0] * phases[0].taps()[1]
        );
    }
    // A 1x1 kernel of stride 2: three phases of four receive nothing.
    let shape = ConvShape {
        stride: [2, 2],
        ..ConvShape::new(1, 1, [4, 4], [1, 1])
    };
    let depths: Vec<usize> = shape
        .grad_phases()
        .unwrap()
        .iter()
        .map(|p| p.depth(5))
        .collect();
    assert_eq!(depths, [5, 0, 0, 0]);
}

#[test]
fn phase_columns_and_stores_in_another_format_are_the_f32_ones_rounded() {
    use half::bf16;
    for (shape, out) in shapes() {
        let mut rng = Rng(29 + shape.patch() as u64);
        let dy: Vec<f32> = (0..shape.batch * out * shape.positions())
            .map(|_| rng.uniform())
            .collect();
        let dyb: Vec<bf16> = dy.iter().map(|&v| bf16::from_f32(v)).collect();
        let round = |v: &[f32]| v.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>();
        for isa in Isa::available() {
            for phase in shape.grad_phases().unwrap() {
                let n = phase.depth(out) * shape.batch * phase.positions();
                let all = 0..shape.batch;
                let mut want = vec![f32::NAN; n];
                phase
                    .columns(isa, &shape, out, &dy, all.clone(), &mut want)
                    .unwrap();
                let mut from_f32 = vec![bf16::NAN; n];
                phase
                    .columns(isa, &shape, out, &dy, all.clone(), &mut from_f32)
                    .unwrap();
                assert_eq!(from_f32, round(&want), "{shape:?} on {isa}: f32 to bf16");
                let mut from_bf16 = vec![bf16::NAN; n];
                phase
                    .columns(isa, &shape, out, &dyb, all.clone(), &mut from_bf16)
                    .unwrap();
                assert_eq!(from_bf16, from_f32, "{shape:?} on {isa}: bf16 to bf16");
            }
            // A store of every phase: bf16 is the f32 store rounded.
            let phases = shape.grad_phases().unwrap();
            let products: Vec<Vec<f32>> = phases
                .iter()
                .map(|p| {
                    let m = shape.channels * shape.batch * p.positions();
                    (0..m).map(|_| rng.uniform() * 3.0).collect()
                })
                .collect();
            let products: Vec<&[f32]> = products.iter().map(|p| p.as_slice()).collect();
            let mut wide = vec![0f32; shape.batch * shape.sample()];
            conv::store_phases(isa, &shape, out, &phases, &products, None, &mut wide).unwrap();
            let mut narrow = vec![bf16::ZERO; wide.len()];
            conv::store_phases(isa, &shape, out, &phases, &products, None, &mut narrow).unwrap();
            assert_eq!(narrow, round(&wide), "{shape:?} on {isa}: a bf16 store");
            // With a bias: each channel's values plus its bias, added in f32 before the
            // rounding (a phase of depth 0 stores the bias alone).
            let bias: Vec<f32> = (0..shape.channels).map(|c| c as f32 - 1.25).collect();
            let mut biased = vec![0f32; wide.len()];
            let b = Some(bias.as_slice());
            conv::store_phases(isa, &shape, out, &phases, &products, b, &mut biased).unwrap();
            let plane = shape.size[0] * shape.size[1];
            let want: Vec<f32> = wide
                .iter()
                .enumerate()
                .map(|(i, v)| v + bias[i / plane % shape.channels])
                .collect();
            assert_eq!(biased, want, "{shape:?} on {isa}: a biased store");
            let mut narrow = vec![bf16::ZERO; wide.len()];
            conv::store_phases(isa, &shape, out, &phases, &products, b, &mut narrow).unwrap();
            assert_eq!(
                narrow,
                round(&want),
                "{shape:?} on {isa}: a biased bf16 store"
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
    assert!(matches!(big.grad_phases(), Err(ConvError::Geometry { .. })));
    // The phases' inputs and outputs are checked against the shapes.
    let phase = &ok.grad_phases().unwrap()[0];
    let (dy, mut cols) = (vec![0f32; 2 * 3 * 9], vec![0f32; phase.depth(3) * 16]);
    for (from, samples, at) in [(1, 0..1, 0), (0, 1..3, 0), (0, 0..2, 1)] {
        let got = phase.columns(Isa::detect(), &ok, 3, &dy[from..], samples, &mut cols[at..]);
        assert!(matches!(got, Err(ConvError::Length { .. })), "{got:?}");
    }
    assert!(
        phase
            .columns(Isa::detect(), &ok, 3, &dy, 0..1, &mut cols)
            .is_ok()
    );
    let mut wt = vec![0f32; phase.depth(3)];
    let weight = vec![0f32; 3 * 4];
    assert!(phase.weight(&ok, 3, &weight[1..], &mut wt).is_err());
    assert!(phase.weight(&ok, 3, &weight, &mut wt[1..]).is_err());
    let phases = ok.grad_phases().unwrap();
    let store = |products: &[&[f32]], dx: &mut [f32], phases: &[conv::GradPhase]| {
        conv::store_phases(Isa::detect(), &ok, 3, phases, products, None, dx)
    };
    let mut dx = vec![0f32; 16];
    let (short, whole) = ([0f32; 15], [0f32; 16]);
    assert!(store(&[&short], &mut dx, &phases).is_err());
    assert!(store(&[&whole], &mut dx[1..], &phases).is_err());
    assert!(store(&[&whole, &whole], &mut dx, &phases).is_err());
    let others = ConvShape {
        stride: [2, 1],
        ..ok
    }
    .grad_phases()
    .unwrap();
    assert_eq!(
        store(&[&whole], &mut dx, &others[..1]),
        Err(ConvError::Phases)
    );
    assert!(store(&[&whole], &mut dx, &phases).is_ok());
    // A bias of another length than the channels.
    let got = conv::store_phases(
        Isa::detect(),
        &ok,
        3,
        &phases,
        &[&whole],
        Some(&[0.0; 2]),
        &mut dx,
    );
    assert!(
        matches!(got, Err(ConvError::Length { what: "bias", .. })),
        "{got:?}"
    );
}

/// A depthwise convolution in f64 (each channel its own kernel, `w [channels, kh, kw]`):
/// the output, and the input, weight and bias gradients for the output gradient `dy`.
fn direct_depthwise(
    s: &ConvShape,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    dy: &[f32],
) -> [Vec<f64>; 4] {
    let [oh, ow] = s.out_size().unwrap();
    let taps = s.kernel[0] * s.kernel[1];
    let c = s.channels;
    let mut y: Vec<f64> = (0..s.batch * c * oh * ow)
        .map(|at| bias[at / (oh * ow) % c] as f64)
        .collect();
    let mut dx = vec![0f64; x.len()];
    let mut dw = vec![0f64; w.len()];
    let mut db = vec![0f64; c];
    for (at, g) in dy.iter().enumerate() {
        db[at / (oh * ow) % c] += *g as f64;
    }
    // Patch entry k = (channel, a, b) is weight entry k.
    reads(s, |n, k, [i, j], input| {
        let out = ((n * c + k / taps) * oh + i) * ow + j;
        y[out] += x[input] as f64 * w[k] as f64;
        dx[input] += w[k] as f64 * dy[out] as f64;
        dw[k] += x[input] as f64 * dy[out] as f64;
    });
    [y, dx, dw, db]
}

/// The depthwise kernels' output, input, weight and bias gradients.
fn depthwise_run(
    isa: Isa,
    s: &ConvShape,
    format: Format,
    (x, w, bias, dy): (&[f32], &[f32], &[f32], &[f32]),
) -> [Vec<f32>; 4] {
    let [oh, ow] = s.out_size().unwrap();
    let mut y = vec![f32::NAN; s.batch * s.channels * oh * ow];
    conv::depthwise(isa, s, format, x, w, Some(bias), &mut y).unwrap();
    let mut dx = vec![f32::NAN; x.len()];
    conv::depthwise_input_grad(isa, s, format, dy, w, &mut dx).unwrap();
    let (mut dw, mut db) = (vec![f32::NAN; w.len()], vec![f32::NAN; s.channels]);
    conv::depthwise_weight_grad(isa, s, format, x, dy, &mut dw, Some(&mut db)).unwrap();
    [y, dx, dw, db]
}

#[test]
fn depthwise_convolutions_and_their_gradients_are_the_direct_sums() {
    let names = [
        "output",
        "input gradient",
        "weight gradient",
        "bias gradient",
    ];
    // Rows of sixteen and more take the register blocks (and their edges); the others
    // lane by lane.
    let wide = ConvShape {
        padding: [1, 2],
        ..ConvShape::new(2, 3, [6, 37], [3, 5])
    };
    for shape in shapes().into_iter().map(|(s, _)| s).chain([wide]) {
        let mut rng = Rng(41 + shape.patch() as u64);
        let mut draw = |n: usize| (0..n).map(|_| rng.uniform()).collect::<Vec<f32>>();
        let [oh, ow] = shape.out_size().unwrap();
        let c = shape.channels;
        let x = draw(shape.batch * shape.sample());
        let w = draw(c * shape.kernel[0] * shape.kernel[1]);
        let bias = draw(c);
        let dy = draw(shape.batch * c * oh * ow);
        let want = direct_depthwise(&shape, &x, &w, &bias, &dy);
        let portable = depthwise_run(Isa::PORTABLE, &shape, Format::F32, (&x, &w, &bias, &dy));
        for isa in Isa::available() {
            let got = depthwise_run(isa, &shape, Format::F32, (&x, &w, &bias, &dy));
            for ((name, got), (want, portable)) in
                names.iter().zip(&got).zip(want.iter().zip(&portable))
            {
                let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
                for (i, (g, r)) in got.iter().zip(want).enumerate() {
                    let err = (*g as f64 - r).abs();
                    assert!(
                        err <= 1e-5 * scale,
                        "{shape:?} on {isa}: {name}[{i}] {g} vs {r}"
                    );
                }
                // The same IEEE operations in the same order on every instruction set.
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(got),
                    bits(portable),
                    "{shape:?} on {isa}: {name}, the portable bits"
                );
            }
            // In bf16: the f32 run on the operands rounded first; the bias gradient sums
            // the output gradient as given.
            let round = |v: &[f32]| v.iter().map(|v| Format::Bf16.round(*v)).collect::<Vec<_>>();
            let (xr, dyr) = (round(&x), round(&dy));
            let narrow = depthwise_run(isa, &shape, Format::Bf16, (&x, &w, &bias, &dy));
            let rounded = depthwise_run(isa, &shape, Format::F32, (&xr, &w, &bias, &dyr));
            for i in 0..3 {
                assert_eq!(
                    narrow[i], rounded[i],
                    "{shape:?} on {isa}: {} in bf16",
                    names[i]
                );
            }
            let full = depthwise_run(isa, &shape, Format::F32, (&xr, &w, &bias, &dy));
            assert_eq!(
                narrow[3], full[3],
                "{shape:?} on {isa}: the bias gradient in bf16"
            );
        }
    }
}

#[test]
fn depthwise_bad_geometry_and_lengths_are_typed_errors() {
    let isa = Isa::detect();
    let big = ConvShape::new(1, 2, [2, 2], [3, 3]);
    let mut y = vec![0f32; 2];
    let got = conv::depthwise(
        isa,
        &big,
        Format::F32,
        &[0f32; 8],
        &[0f32; 18],
        None,
        &mut y,
    );
    assert!(matches!(got, Err(ConvError::Geometry { .. })), "{got:?}");
    let ok = ConvShape::new(2, 3, [4, 4], [3, 3]);
    let (x, w, mut y) = (
        vec![0f32; 2 * 3 * 16],
        vec![0f32; 27],
        vec![0f32; 2 * 3 * 4],
    );
    let bad = [
        conv::depthwise(isa, &ok, Format::F32, &x[1..], &w, None, &mut y),
        conv::depthwise(isa, &ok, Format::F32, &x, &w[1..], None, &mut y),
        conv::depthwise(isa, &ok, Format::F32, &x, &w, Some(&[0.0; 2]), &mut y),
        conv::depthwise(isa, &ok, Format::F32, &x, &w, None, &mut y[1..]),
    ];
    for got in bad {
        assert!(matches!(got, Err(ConvError::Length { .. })), "{got:?}");
    }
    let mut dx = vec![0f32; x.len()];
    let got = conv::depthwise_input_grad(isa, &ok, Format::F32, &y[1..], &w, &mut dx);
    assert!(matches!(got, Err(ConvError::Length { .. })), "{got:?}");
    let mut dw = vec![0f32; 27];
    let got =
        conv::depthwise_weight_grad(isa, &ok, Format::F32, &x, &y, &mut dw, Some(&mut [0.0; 4]));
    assert!(
        matches!(
            got,
            Err(ConvError::Length {
                what: "bias gradient",
                ..
            })
        ),
        "{got:?}"
    );
    assert!(conv::depthwise_weight_grad(isa, &ok, Format::F32, &x, &y, &mut dw, None).is_ok());
}

/// Max pooling value by value, as Burn's backends scan a window: the first valid value,
/// replaced by a strictly larger one; `(-inf, NO_POSITION)` for a window wholly in the
/// padding.
fn direct_max_pool(s: &ConvShape, x: &[f32]) -> (Vec<f32>, Vec<u32>) {
    let [oh, ow] = s.out_size().unwrap();
    let [h, w] = s.size;
    let mut out = vec![];
    for p in 0..s.batch * s.channels {
        for i in 0..oh {
            for j in 0..ow {
                let mut best = (f32::NEG_INFINITY, conv::NO_POSITION);
                for a in 0..s.kernel[0] {
                    for b in 0..s.kernel[1] {
                        let iy =
                            (i * s.stride[0] + a * s.dilation[0]) as isize - s.padding[0] as isize;
                        let ix =
                            (j * s.stride[1] + b * s.dilation[1]) as isize - s.padding[1] as isize;
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                            continue;
                        }
                        let at = iy as usize * w + ix as usize;
                        let v = x[p * h * w + at];
                        if best.1 == conv::NO_POSITION || v > best.0 {
                            best = (v, at as u32);
                        }
                    }
                }
                out.push(best);
            }
        }
    }
    out.into_iter().unzip()
}

#[test]
fn max_pools_pick_the_first_largest_value_of_each_window_and_add_gradients_back_there() {
    use half::bf16;
    let mut cases: Vec<ConvShape> = shapes().into_iter().map(|(s, _)| s).collect();
    // Windows wholly in the padding (a 1x1 window padded by 1).
    cases.push(ConvShape {
        padding: [1, 1],
        ..ConvShape::new(2, 2, [3, 4], [1, 1])
    });
    // The 2x2 windows of stride 2 that have their own path: even and odd sizes (the last
    // row or column left out), a plane of one window, many planes a task.
    for (batch, channels, size) in [
        (2, 3, [6, 8]),
        (1, 2, [5, 7]),
        (1, 1, [2, 2]),
        (9, 40, [4, 6]),
    ] {
        cases.push(ConvShape {
            stride: [2, 2],
            ..ConvShape::new(batch, channels, size, [2, 2])
        });
    }
    for shape in cases {
        let mut rng = Rng(51 + shape.patch() as u64);
        // Few levels (ties), a NaN and a -inf now and then.
        let x: Vec<f32> = (0..shape.batch * shape.sample())
            .map(|i| match i % 23 {
                5 => f32::NAN,
                11 => f32::NEG_INFINITY,
                _ => (rng.uniform() * 4.0).round(),
            })
            .collect();
        let (want, want_at) = direct_max_pool(&shape, &x);
        let grad: Vec<f32> = (0..want.len()).map(|_| rng.uniform()).collect();
        let mut dx_want = vec![0f64; x.len()];
        let plane = shape.size[0] * shape.size[1];
        let out_plane = want.len() / (shape.batch * shape.channels).max(1);
        for (o, (&at, g)) in want_at.iter().zip(&grad).enumerate() {
            if at != conv::NO_POSITION {
                dx_want[o / out_plane * plane + at as usize] += *g as f64;
            }
        }
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for isa in Isa::available() {
            let (mut y, mut at) = (vec![0f32; want.len()], vec![0u32; want.len()]);
            conv::max_pool(isa, &shape, &x, &mut y, Some(&mut at)).unwrap();
            assert_eq!(at, want_at, "{shape:?} on {isa}: positions");
            assert_eq!(bits(&y), bits(&want), "{shape:?} on {isa}: values");
            let mut plain = vec![0f32; want.len()];
            conv::max_pool(isa, &shape, &x, &mut plain, None).unwrap();
            assert_eq!(
                bits(&plain),
                bits(&want),
                "{shape:?} on {isa}: without positions"
            );
            // bf16: the same windows of the same values (these are exact in bf16).
            let xb: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
            let mut yb = vec![bf16::ZERO; want.len()];
            let mut atb = vec![0u32; want.len()];
            conv::max_pool(isa, &shape, &xb, &mut yb, Some(&mut atb)).unwrap();
            assert_eq!(atb, want_at, "{shape:?} on {isa}: bf16 positions");
            let yb: Vec<f32> = yb.iter().map(|v| v.to_f32()).collect();
            assert_eq!(bits(&yb), bits(&want), "{shape:?} on {isa}: bf16 values");
            let mut dx = vec![f32::NAN; x.len()];
            conv::max_pool_backward(&shape, &grad, &at, &mut dx).unwrap();
            for (i, (d, w)) in dx.iter().zip(&dx_want).enumerate() {
                assert!(
                    (*d as f64 - w).abs() <= 1e-6,
                    "{shape:?}: dx[{i}] {d} vs {w}"
                );
            }
        }
    }
    // A position outside its plane, and lengths, are typed errors.
    let shape = ConvShape::new(1, 1, [2, 2], [1, 1]);
    let mut dx = [0f32; 4];
    let got = conv::max_pool_backward(&shape, &[1.0f32; 4], &[0, 1, 2, 4], &mut dx);
    assert!(
        matches!(
            got,
            Err(ConvError::Length {
                what: "positions",
                ..
            })
        ),
        "{got:?}"
    );
    let got = conv::max_pool_backward(&shape, &[1.0f32; 3], &[0, 1, 2], &mut dx);
    assert!(matches!(got, Err(ConvError::Length { .. })), "{got:?}");
    let mut y = [0f32; 4];
    let got = conv::max_pool(Isa::detect(), &shape, &[0f32; 3], &mut y, None);
    assert!(matches!(got, Err(ConvError::Length { .. })), "{got:?}");
    let big = ConvShape::new(1, 1, [2, 2], [3, 3]);
    let got = conv::max_pool(Isa::detect(), &big, &[0f32; 4], &mut y[..0], None);
    assert!(matches!(got, Err(ConvError::Geometry { .. })), "{got:?}");
}

#[test]
fn global_average_pools_sum_each_plane_in_order_and_spread_its_gradient() {
    use half::{bf16, f16};
    // Plane sizes around the side-by-side lanes (8 planes) and the task size, one plane,
    // planes of one value. The reference: each plane summed in f32 from the first value,
    // divided by the count (Flex's order), and within f32 rounding of the f64 mean.
    for (planes, plane) in [
        (1, 1),
        (3, 7),
        (8, 1024),
        (13, 49),
        (1024, 1024),
        (70, 3000),
    ] {
        let x: Vec<f32> = {
            let mut rng = Rng(planes as u64 * 31 + plane as u64);
            (0..planes * plane).map(|_| rng.uniform() * 4.0).collect()
        };
        let want: Vec<f32> = x
            .chunks(plane)
            .map(|p| p.iter().fold(0f32, |s, v| s + v) / plane as f32)
            .collect();
        let mut y = vec![0f32; planes];
        conv::global_avg_pool(&x, plane, &mut y).unwrap();
        let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&y), bits(&want), "{planes} planes of {plane}");
        for (p, (y, x)) in y.iter().zip(x.chunks(plane)).enumerate() {
            let exact = x.iter().map(|v| *v as f64).sum::<f64>() / plane as f64;
            assert!(
                (*y as f64 - exact).abs() <= 1e-5 * (1.0 + exact.abs()),
                "plane {p}"
            );
        }
        // bf16 in, bf16 out: the f32 mean of the bf16 values, rounded once.
        let xb: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
        let mut yb = vec![bf16::ZERO; planes];
        conv::global_avg_pool(&xb, plane, &mut yb).unwrap();
        let want_b: Vec<bf16> = xb
            .chunks(plane)
            .map(|p| bf16::from_f32(p.iter().fold(0f32, |s, v| s + v.to_f32()) / plane as f32))
            .collect();
        assert_eq!(yb, want_b, "bf16, {planes} planes of {plane}");
        // f16 summed in f32 (not in f16).
        let xh: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
        let mut yh = vec![f16::ZERO; planes];
        conv::global_avg_pool(&xh, plane, &mut yh).unwrap();
        let want_h: Vec<f16> = xh
            .chunks(plane)
            .map(|p| f16::from_f32(p.iter().fold(0f32, |s, v| s + v.to_f32()) / plane as f32))
            .collect();
        assert_eq!(yh, want_h, "f16, {planes} planes of {plane}");
        // The gradient: each plane its share, a negative zero written as +0.
        let mut g: Vec<f32> = y.iter().map(|v| v * 3.0).collect();
        g[0] = -0.0;
        let mut dx = vec![bf16::ONE; planes * plane];
        conv::global_avg_pool_backward(&g, plane, &mut dx).unwrap();
        for (p, d) in dx.chunks(plane).enumerate() {
            let share = bf16::from_f32(0.0 + g[p] / plane as f32);
            assert!(
                d.iter().all(|v| v.to_bits() == share.to_bits()),
                "plane {p}"
            );
        }
        assert_eq!(dx[0].to_bits(), 0, "+0 for a gradient of -0");
    }
    // No values in a plane: a mean of 0, as Flex's count of at least one gives.
    let mut y = [1f32; 3];
    conv::global_avg_pool::<f32, f32>(&[], 0, &mut y).unwrap();
    assert_eq!(y, [0.0; 3]);
    // Lengths that disagree, sizes that overflow: typed errors.
    let mut y = [0f32; 2];
    assert!(matches!(
        conv::global_avg_pool(&[0f32; 7], 4, &mut y),
        Err(ConvError::Length { .. })
    ));
    let mut dx = [0f32; 7];
    assert!(matches!(
        conv::global_avg_pool_backward(&[0f32; 2], 4, &mut dx),
        Err(ConvError::Length { .. })
    ));
    assert!(matches!(
        conv::global_avg_pool(&[0f32; 1], usize::MAX, &mut y),
        Err(ConvError::TooLarge { .. })
    ));
}

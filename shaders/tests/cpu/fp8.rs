//! The CPU's FP8 fake quantization against the FP8 reference, byte for byte, on every
//! instruction set the CPU runs: every bf16 and every f16 value, f32 values of every kind
//! (subnormals, the grid's rounding boundaries, overflows, infinities, NaN), under each
//! format (biased ones too), overflow rule and scale; block layouts whose blocks cut rows
//! and tasks; stochastic rounding; and the refusals.

use burn_amp_kernels::LaunchError;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{CpuFloat, Format};
use burn_amp_kernels::cpu::fp8;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::reference::{decode_scaled, encode_scaled, quantize_blocks};
use burn_amp_kernels::fp8::scale::{BlockScale, ScaleRule, amax_bits};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow, Rounding};
use half::{bf16, f16};

use super::Rng;

/// A value's bits, through its exact f32 image (NaN payloads included).
fn bits<T: CpuFloat>(v: T) -> u32 {
    v.to_f32().to_bits()
}

/// What the reference makes of element `i` under `scale`.
fn reference<T: CpuFloat>(x: T, cast: Fp8Cast, s: BlockScale, i: usize) -> T {
    let code = encode_scaled(x.to_f32(), s.scale, cast, i as u32);
    T::from_f32(decode_scaled(code, cast.format, s.scale_inv))
}

fn formats() -> Vec<Fp8Format> {
    let mut f = vec![Fp8Format::E4M3, Fp8Format::E5M2];
    for (format, bias) in [
        (Fp8Format::E4M3, 0),
        (Fp8Format::E4M3, 11),
        (Fp8Format::E4M3, 63),
        (Fp8Format::E5M2, 1),
        (Fp8Format::E5M2, 40),
        (Fp8Format::E5M2, 63),
    ] {
        f.push(format.with_bias(bias).unwrap());
    }
    f
}

const OVERFLOWS: [Overflow; 3] = [
    Overflow::Saturate,
    Overflow::SaturateFinite,
    Overflow::NonSaturating,
];

fn scales() -> Vec<BlockScale> {
    [
        1.0f32,
        448.0 / 300.0,
        0.75,
        3.0e-5,
        2f32.powi(-40),
        1.0e9,
        65536.0,
    ]
    .into_iter()
    .map(|scale| BlockScale {
        scale,
        scale_inv: 1.0 / scale,
        e8m0: 127,
    })
    .collect()
}

/// Every layout-free case for `values` against the reference, on every instruction set:
/// the round trip, the codes, and the codes decoded.
fn check_all<T: CpuFloat + core::fmt::Debug>(values: &[T]) {
    let layout = BlockLayout::per_tensor(values.len() as u32);
    let mut out = vec![T::default(); values.len()];
    let mut codes = vec![0u8; values.len()];
    for isa in Isa::available() {
        for format in formats() {
            for overflow in OVERFLOWS {
                let cast = Fp8Cast::new(format).with_overflow(overflow);
                for s in scales() {
                    fp8::quantize(isa, values, &mut codes, layout, cast, &[s.scale]).unwrap();
                    for (i, (x, c)) in values.iter().zip(&codes).enumerate() {
                        let want = encode_scaled(x.to_f32(), s.scale, cast, i as u32);
                        assert_eq!(
                            *c, want,
                            "{isa}: code of {x:?} under {format:?}, {overflow:?}, scale {}",
                            s.scale
                        );
                    }
                    fp8::dequantize(isa, &codes, &mut out, layout, format, &[s.scale_inv]).unwrap();
                    for (c, y) in codes.iter().zip(&out) {
                        let want = T::from_f32(decode_scaled(*c, format, s.scale_inv));
                        assert_eq!(bits(*y), bits(want), "{isa}: code {c:#x} of {format:?}");
                    }
                    fp8::fake_quantize_scaled(isa, values, &mut out, layout, cast, &[s]).unwrap();
                    for (i, (x, y)) in values.iter().zip(&out).enumerate() {
                        let want = reference(*x, cast, s, i);
                        assert_eq!(
                            bits(*y),
                            bits(want),
                            "{isa}: {x:?} under {format:?}, {overflow:?}, scale {}: got {y:?}, want {want:?}",
                            s.scale
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_bf16_and_f16_value_rounds_as_the_reference() {
    let b: Vec<bf16> = (0..=u16::MAX).map(bf16::from_bits).collect();
    check_all(&b);
    let h: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    check_all(&h);
}

#[test]
fn amaxes_of_every_bf16_and_f16_value_are_the_reference() {
    // Every bit pattern, NaN payloads of both signs among them (a NaN's amax is its quiet
    // form), each its own block, in blocks of 256 and as one tensor.
    fn check<T: CpuFloat>(values: &[T]) {
        let len = values.len() as u32;
        for layout in [
            BlockLayout::per_tensor(len),
            BlockLayout::blocks(len, 256, 1, 256),
            BlockLayout::blocks(len, 256, 1, 1),
        ] {
            let mut want = vec![0u32; layout.num_blocks() as usize];
            for (i, v) in values.iter().enumerate() {
                let b = &mut want[layout.block_of(i as u32) as usize];
                *b = (*b).max(amax_bits(&[v.to_f32()]));
            }
            for isa in Isa::available() {
                let got = fp8::block_amax(isa, values, layout).unwrap();
                assert_eq!(got, want, "{isa}: {layout:?}");
            }
        }
    }
    check(&(0..=u16::MAX).map(bf16::from_bits).collect::<Vec<_>>());
    check(&(0..=u16::MAX).map(f16::from_bits).collect::<Vec<_>>());
}

#[test]
fn f32_values_of_every_kind_round_as_the_reference() {
    let mut rng = Rng(7);
    let mut v: Vec<f32> = (0..40_000)
        .map(|_| f32::from_bits(rng.next() as u32))
        .collect();
    // Rounding boundaries of every format's grid: each representable value's neighbours and
    // the midpoints between them, in f32 ulps.
    for format in formats() {
        for code in 0..=255u8 {
            let d = burn_amp_kernels::fp8::reference::decode(code, format);
            if d.is_finite() {
                let b = d.to_bits();
                for delta in [
                    0i64,
                    1,
                    -1,
                    1 << 19,
                    1 << 20,
                    (1 << 20) + 1,
                    (1 << 20) - 1,
                    1 << 21,
                ] {
                    for bits in [b as i64 + delta, b as i64 - delta] {
                        if (0..=u32::MAX as i64).contains(&bits) {
                            v.push(f32::from_bits(bits as u32));
                        }
                    }
                }
            }
        }
    }
    v.extend([
        0.0,
        -0.0,
        f32::from_bits(1),
        -f32::from_bits(0x007f_ffff),
        f32::MIN_POSITIVE,
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
    ]);
    check_all(&v);
}

/// The reference's blockwise quantization, decoded back into `T`.
fn reference_blocks<T: CpuFloat>(
    values: &[T],
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> (Vec<T>, Vec<BlockScale>) {
    let f: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
    let (codes, scales) = quantize_blocks(&f, layout, cast, Some(rule));
    let out = codes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let s = scales[layout.block_of(i as u32) as usize];
            T::from_f32(decode_scaled(*c, cast.format, s.scale_inv))
        })
        .collect();
    (out, scales)
}

#[test]
fn blocks_across_rows_and_tasks_take_their_own_scales() {
    let mut rng = Rng(11);
    // Rows of 300 (blocks of 128 cut them), 70 rows (past one task of 2^14 values), blocks
    // of 1x128, 32x32 and 128x128, and per tensor; magnitudes that differ by block.
    let (rows, cols) = (70usize, 300usize);
    let values: Vec<bf16> = (0..rows * cols)
        .map(|i| bf16::from_f32(rng.uniform() * 10f32.powi((i % 7) as i32 - 3)))
        .collect();
    let len = (rows * cols) as u32;
    let layouts = [
        BlockLayout::per_tensor(len),
        BlockLayout::blocks(len, cols as u32, 1, 128),
        BlockLayout::blocks(len, cols as u32, 32, 32),
        BlockLayout::blocks(len, cols as u32, 128, 128),
        BlockLayout::blocks(len, cols as u32, 3, 7),
    ];
    let rules = [
        ScaleRule::Float { margin: 0 },
        ScaleRule::Float { margin: 2 },
        ScaleRule::E8M0,
    ];
    let mut out = vec![bf16::ZERO; values.len()];
    for isa in Isa::available() {
        for layout in layouts {
            let f: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
            let amax = fp8::block_amax(isa, &values, layout).unwrap();
            let mut want = vec![0u32; layout.num_blocks() as usize];
            for (i, v) in f.iter().enumerate() {
                let b = &mut want[layout.block_of(i as u32) as usize];
                *b = (*b).max(amax_bits(&[*v]));
            }
            assert_eq!(amax, want, "{isa}: amaxes of {layout:?}");
            for rule in rules {
                for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
                    let cast = Fp8Cast::new(format);
                    let scales =
                        fp8::fake_quantize(isa, &values, &mut out, layout, cast, rule).unwrap();
                    let (want, want_scales) = reference_blocks(&values, layout, cast, rule);
                    assert_eq!(scales, want_scales, "{isa}: scales of {layout:?}, {rule:?}");
                    assert!(
                        out.iter().zip(&want).all(|(a, b)| bits(*a) == bits(*b)),
                        "{isa}: values of {layout:?}, {rule:?}, {format:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn non_finite_blocks_and_stochastic_rounding_follow_the_reference() {
    let mut rng = Rng(3);
    let mut values: Vec<f32> = (0..5_000).map(|_| rng.uniform() * 100.0).collect();
    values[17] = f32::NAN; // block 0 (of 1x1000 blocks) gets a NaN amax
    values[1_500] = f32::INFINITY; // block 1 an infinite one
    let layout = BlockLayout::blocks(5_000, 1_000, 1, 1_000);
    let mut out = vec![0f32; values.len()];
    for isa in Isa::available() {
        for rule in [ScaleRule::Float { margin: 0 }, ScaleRule::E8M0] {
            for rounding in [Rounding::NearestEven, Rounding::Stochastic { seed: 42 }] {
                let cast = Fp8Cast::new(Fp8Format::E4M3)
                    .with_rounding(rounding)
                    .with_overflow(Overflow::SaturateFinite);
                let scales =
                    fp8::fake_quantize(isa, &values, &mut out, layout, cast, rule).unwrap();
                let (want, want_scales) = reference_blocks(&values, layout, cast, rule);
                assert_eq!(
                    scales.iter().map(|s| s.scale.to_bits()).collect::<Vec<_>>(),
                    want_scales
                        .iter()
                        .map(|s| s.scale.to_bits())
                        .collect::<Vec<_>>()
                );
                for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                    assert_eq!(
                        bits(*a),
                        bits(*b),
                        "{isa}: {rule:?} {rounding:?}, element {i}"
                    );
                }
            }
        }
    }
}

/// `fake_quantize_through(x, format)` against `fake_quantize` of `x` cast to `format`, widened.
fn check_through<N: CpuFloat>(values: &[f32], format: Format, layout: BlockLayout, cast: Fp8Cast) {
    let narrow: Vec<N> = values.iter().map(|v| N::from_f32(*v)).collect();
    let mut want = vec![N::default(); values.len()];
    let mut got = vec![0f32; values.len()];
    for isa in Isa::available() {
        for rule in [ScaleRule::Float { margin: 0 }, ScaleRule::E8M0] {
            let want_scales =
                fp8::fake_quantize(isa, &narrow, &mut want, layout, cast, rule).unwrap();
            let scales =
                fp8::fake_quantize_through(isa, values, &mut got, format, layout, cast, rule)
                    .unwrap();
            let key = |s: &[BlockScale]| {
                s.iter()
                    .map(|s| (s.scale.to_bits(), s.scale_inv.to_bits(), s.e8m0))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                key(&scales),
                key(&want_scales),
                "{isa}: {format:?} {layout:?} {rule:?} {cast:?}"
            );
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    bits(*b),
                    "{isa}: {format:?} {layout:?} {rule:?} {cast:?}, element {i}"
                );
            }
        }
    }
}

#[test]
fn f32_values_quantized_through_a_16_bit_format_are_the_cast_values_quantized() {
    let mut rng = Rng(11);
    // Values whose rounding to 16 bits changes them (and so the amax, and the FP8 code
    // at a tie), across magnitudes; then the edges: a value past f16's range (an infinity
    // through f16), one that rounds up to the block's amax, subnormals of each format, NaN.
    let mut values: Vec<f32> = (0..6_000)
        .map(|i| rng.uniform() * 2f32.powi(i % 24 - 12))
        .collect();
    values[5] = 70_000.0;
    values[9] = f32::from_bits(1f32.to_bits() | 0x7fff); // rounds up in bf16 and f16
    values[13] = 1.0e-6;
    values[21] = 1.0e-39;
    values[33] = f32::from_bits(1f32.to_bits() | 0x8000); // a bf16 tie: down to even
    values[34] = f32::from_bits(1f32.to_bits() | 0x1_8000); // a bf16 tie: up to even
    values[35] = -f32::from_bits(0x0000_8000); // a tie among bf16's subnormals
    // A finite run with no NaN or infinity, so that one scale covers the whole tensor.
    let finite = values.clone();
    values[4_000] = f32::NAN;
    values[4_040] = f32::MAX; // an infinity through bf16 and f16
    values[4_100] = -f32::from_bits(0x7f80_0001); // a signalling NaN, negative
    let len = values.len() as u32;
    let cases = [
        (&finite, BlockLayout::per_tensor(len)),
        (&values, BlockLayout::per_tensor(len)),
        (&values, BlockLayout::blocks(len, 100, 1, 32)),
        (&values, BlockLayout::blocks(len, 100, 7, 13)),
    ];
    for (values, layout) in cases {
        for cast in [
            Fp8Cast::new(Fp8Format::E4M3),
            Fp8Cast::new(Fp8Format::E5M2).with_overflow(Overflow::SaturateFinite),
            Fp8Cast::new(Fp8Format::E4M3).with_rounding(Rounding::Stochastic { seed: 7 }),
        ] {
            check_through::<bf16>(values, Format::Bf16, layout, cast);
            check_through::<f16>(values, Format::F16, layout, cast);
            check_through::<f32>(values, Format::F32, layout, cast);
        }
    }
}

#[test]
fn bad_layouts_and_lengths_are_refused() {
    let isa = Isa::detect();
    let values = [bf16::ONE; 12];
    let mut out = [bf16::ZERO; 12];
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let rule = ScaleRule::Float { margin: 0 };
    // 12 values are not rows of 5; the layout says 10 values, not 12.
    for layout in [
        BlockLayout::blocks(12, 5, 1, 1),
        BlockLayout::per_tensor(10),
    ] {
        assert!(matches!(
            fp8::fake_quantize(isa, &values, &mut out, layout, cast, rule),
            Err(LaunchError::Layout(_))
        ));
        assert!(matches!(
            fp8::block_amax(isa, &values, layout),
            Err(LaunchError::Layout(_))
        ));
    }
    let layout = BlockLayout::per_tensor(12);
    assert!(matches!(
        fp8::fake_quantize(isa, &values, &mut out[..11], layout, cast, rule),
        Err(LaunchError::TooShort { buffer: "out", .. })
    ));
    let blocks = BlockLayout::blocks(12, 4, 1, 2); // 6 blocks
    let two = [BlockScale {
        scale: 1.0,
        scale_inv: 1.0,
        e8m0: 127,
    }; 2];
    assert!(matches!(
        fp8::fake_quantize_scaled(isa, &values, &mut out, blocks, cast, &two),
        Err(LaunchError::TooShort {
            buffer: "scales",
            ..
        })
    ));
    let mut codes = [0u8; 12];
    assert!(matches!(
        fp8::quantize(isa, &values, &mut codes, blocks, cast, &[1.0; 2]),
        Err(LaunchError::TooShort {
            buffer: "scales",
            ..
        })
    ));
    assert!(matches!(
        fp8::dequantize(isa, &codes, &mut out[..4], layout, cast.format, &[1.0]),
        Err(LaunchError::TooShort { buffer: "out", .. })
    ));
    assert!(out.iter().all(|v| *v == bf16::ZERO), "nothing written");
    // Empty input: one block of amax 0, scale 1, nothing to write.
    let scales =
        fp8::fake_quantize::<bf16>(isa, &[], &mut [], BlockLayout::per_tensor(0), cast, rule)
            .unwrap();
    assert_eq!(scales.len(), 1);
}

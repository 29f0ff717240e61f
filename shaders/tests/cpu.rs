//! The CPU kernels against their references: every cast bit for bit against `half`, every
//! GEMM kernel the CPU runs against an f64 product of the rounded operands, and the AdamW,
//! unscale and finite-count kernels of every instruction set the CPU runs against the
//! portable ones, bit for bit; the `nn` kernels (softmax, layer norm, GELU, arithmetic,
//! dropout masks, strided copies) against f64 references and across instruction sets
//! (`cpu/nn.rs`); a convolution's columns against a direct convolution (`cpu/conv.rs`); FP8 fake
//! quantization against the FP8 reference, byte for byte (`cpu/fp8.rs`).

use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::caches::CacheSizes;
use burn_amp_kernels::cpu::cast::{self, CastError, CpuFloat, Format};
use burn_amp_kernels::cpu::gemm::{self, GemmError, Kernel, MatRef};
use half::{bf16, f16};

#[path = "cpu/conv.rs"]
mod conv;
#[path = "cpu/fp8.rs"]
mod fp8;
#[path = "cpu/nn.rs"]
mod nn;

/// A deterministic 64-bit generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn report_isas() {
    let names: Vec<String> = Isa::available().iter().map(|i| i.to_string()).collect();
    eprintln!(
        "CPU kernels tested here: {} (best: {})",
        names.join(", "),
        Isa::detect()
    );
}

/// f32 inputs for the narrowing casts: 10^6 random bit patterns, every sign/exponent/top
/// mantissa with the low bits at each rounding boundary of bf16 and of f16, and the edges.
fn f32_inputs() -> Vec<u32> {
    let mut rng = Rng(7);
    let mut v: Vec<u32> = (0..1_000_000).map(|_| rng.next() as u32).collect();
    for hi in 0..=u16::MAX as u32 {
        for lo in [0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF] {
            v.push(hi << 16 | lo);
        }
    }
    for hi in 0..1u32 << 19 {
        for lo in [0, 0x0FFF, 0x1000, 0x1001] {
            v.push(hi << 13 | lo);
        }
    }
    v.extend([
        0x7F80_0000, // inf
        0xFF80_0000, // -inf
        0x7FC0_0000, // quiet NaN
        0x7F80_0001, // signalling NaN, low payload
        0xFFBF_FFFF, // negative signalling NaN, full payload
        0x7F7F_FFFF, // f32::MAX: rounds to inf in bf16 and f16
        0x0000_0001, // smallest subnormal
        0x8000_0000, // -0
        0x0080_0000, // smallest normal
        0x477F_F000, // 65520: f16 tie at the overflow boundary
        0x3380_0000, // 2^-24: smallest f16 subnormal
        0x3300_0000, // 2^-25: f16 tie to zero
    ]);
    v
}

fn check_narrowing<D: CpuFloat>(reference: impl Fn(f32) -> u16, bits: impl Fn(D) -> u16) {
    let input: Vec<f32> = f32_inputs().into_iter().map(f32::from_bits).collect();
    let expected: Vec<u16> = input.iter().map(|x| reference(*x)).collect();
    for isa in Isa::available() {
        let out: Vec<D> = cast::to_vec(isa, &input);
        for (i, (o, e)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(
                bits(*o),
                *e,
                "{isa}: f32 {:#010x} -> {:?}",
                input[i].to_bits(),
                D::FORMAT
            );
        }
    }
}

#[test]
fn f32_to_bf16_is_halfs_on_edges_ties_and_a_million_random() {
    report_isas();
    check_narrowing::<bf16>(|x| bf16::from_f32(x).to_bits(), bf16::to_bits);
}

#[test]
fn f32_to_f16_is_halfs_on_edges_ties_and_a_million_random() {
    check_narrowing::<f16>(|x| f16::from_f32(x).to_bits(), f16::to_bits);
    // half's software rounding agrees with the F16C one it uses at run time.
    for x in f32_inputs().into_iter().step_by(97).map(f32::from_bits) {
        assert_eq!(
            f16::from_f32(x).to_bits(),
            f16::from_f32_const(x).to_bits(),
            "{x:e}"
        );
    }
}

#[test]
fn widening_is_halfs_on_every_16_bit_pattern() {
    let patterns: Vec<u16> = (0..=u16::MAX).collect();
    let bf: Vec<bf16> = patterns.iter().map(|b| bf16::from_bits(*b)).collect();
    let hf: Vec<f16> = patterns.iter().map(|b| f16::from_bits(*b)).collect();
    for isa in Isa::available() {
        let out: Vec<f32> = cast::to_vec(isa, &bf);
        for (b, o) in bf.iter().zip(&out) {
            assert_eq!(
                o.to_bits(),
                b.to_f32().to_bits(),
                "{isa}: bf16 {:#06x}",
                b.to_bits()
            );
        }
        let out: Vec<f32> = cast::to_vec(isa, &hf);
        for (h, o) in hf.iter().zip(&out) {
            assert_eq!(
                o.to_bits(),
                h.to_f32().to_bits(),
                "{isa}: f16 {:#06x}",
                h.to_bits()
            );
            assert_eq!(
                o.to_bits(),
                h.to_f32_const().to_bits(),
                "f16 {:#06x}",
                h.to_bits()
            );
        }
        // Between the 16-bit formats: through f32, as half would.
        let out: Vec<f16> = cast::to_vec(isa, &bf);
        for (b, o) in bf.iter().zip(&out) {
            assert_eq!(o.to_bits(), f16::from_f32(b.to_f32()).to_bits(), "{isa}");
        }
        let out: Vec<bf16> = cast::to_vec(isa, &hf);
        for (h, o) in hf.iter().zip(&out) {
            assert_eq!(o.to_bits(), bf16::from_f32(h.to_f32()).to_bits(), "{isa}");
        }
    }
}

#[test]
fn every_length_and_the_threaded_split_convert_every_value() {
    let mut rng = Rng(3);
    for len in (0..70).chain([65_535, 65_536, 65_537, 200_003]) {
        let src: Vec<f32> = (0..len).map(|_| rng.uniform() * 1e3).collect();
        for isa in Isa::available() {
            let narrow: Vec<bf16> = cast::to_vec(isa, &src);
            assert!(
                narrow
                    .iter()
                    .zip(&src)
                    .all(|(n, s)| *n == bf16::from_f32(*s)),
                "{len}"
            );
            let wide: Vec<f32> = cast::to_vec(isa, &narrow);
            assert!(
                wide.iter().zip(&narrow).all(|(w, n)| *w == n.to_f32()),
                "{len}"
            );
            let same: Vec<f32> = cast::to_vec(isa, &src);
            assert_eq!(same, src);
        }
    }
}

#[test]
fn a_length_mismatch_is_an_error_and_writes_nothing() {
    let mut dst = [bf16::ONE; 3];
    let err = cast::convert(Isa::detect(), &[1.0f32; 4], &mut dst).unwrap_err();
    assert_eq!(err, CastError::LengthMismatch { src: 4, dst: 3 });
    assert_eq!(dst, [bf16::ONE; 3]);
}

#[test]
fn adding_widened_values_is_adding_halfs_widening_on_every_16_bit_pattern() {
    // Every bf16 and f16 pattern (NaNs, infinities, subnormals) added onto sums that hold
    // ordinary values, infinities of both signs and a NaN, at every length up to a vector's
    // tail; and f32 sources, whose sums are plain additions.
    let patterns: Vec<u16> = (0..=u16::MAX).collect();
    let start: Vec<f32> = (0..patterns.len())
        .map(|i| match i % 11 {
            0 => f32::INFINITY,
            1 => f32::NEG_INFINITY,
            2 => f32::NAN,
            _ => (i as f32).sin() * 1e4,
        })
        .collect();
    fn check<S: CpuFloat + Copy>(src: &[S], start: &[f32]) {
        let expected: Vec<f32> = start.iter().zip(src).map(|(a, s)| a + s.to_f32()).collect();
        for isa in Isa::available() {
            for len in (0..40).chain([src.len()]) {
                let mut acc = start[..len].to_vec();
                cast::add_widened(isa, &src[..len], &mut acc).unwrap();
                for (i, (a, e)) in acc.iter().zip(&expected).enumerate() {
                    assert!(
                        a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan()),
                        "{isa} {:?} #{i}: {a} against {e}",
                        S::FORMAT
                    );
                }
            }
        }
    }
    let bf: Vec<bf16> = patterns.iter().map(|b| bf16::from_bits(*b)).collect();
    let hf: Vec<f16> = patterns.iter().map(|b| f16::from_bits(*b)).collect();
    let f: Vec<f32> = (0..patterns.len())
        .map(|i| (i as f32).cos() * 3e3)
        .collect();
    check(&bf, &start);
    check(&hf, &start);
    check(&f, &start);
    let mut acc = [1.0f32; 3];
    let err = cast::add_widened(Isa::detect(), &[bf16::ONE; 4], &mut acc).unwrap_err();
    assert_eq!(err, CastError::LengthMismatch { src: 4, dst: 3 });
    assert_eq!(acc, [1.0; 3]);
}

#[test]
fn sums_of_widened_values_follow_the_documented_order_on_every_instruction_set() {
    // The order `sum_widened` documents, written out: sixteen running sums, value i into sum
    // i % 16, then halves added (j + 8, j + 4, j + 2, j + 1).
    fn documented(values: &[f32]) -> f32 {
        let mut lanes = [0f32; 16];
        for (i, v) in values.iter().enumerate() {
            lanes[i % 16] += v;
        }
        for width in [8, 4, 2, 1] {
            for j in 0..width {
                lanes[j] += lanes[j + width];
            }
        }
        lanes[0]
    }
    fn check<S: CpuFloat>(seed: u64) {
        for len in (0..70).chain([255, 256, 257, 1000, 4099, 65_536 + 3]) {
            let src: Vec<S> = random(len, seed + len as u64);
            let wide: Vec<f32> = src.iter().map(|v| v.to_f32()).collect();
            let expected = documented(&wide);
            let exact: f64 = wide.iter().map(|&v| f64::from(v)).sum();
            let magnitude: f64 = wide.iter().map(|&v| f64::from(v).abs()).sum();
            assert!(
                (f64::from(expected) - exact).abs()
                    <= len as f64 * f64::from(f32::EPSILON) * magnitude,
                "{len}"
            );
            for isa in Isa::available() {
                let sum = cast::sum_widened(isa, &src);
                assert_eq!(
                    sum.to_bits(),
                    expected.to_bits(),
                    "{isa} {:?} {len}",
                    S::FORMAT
                );
            }
        }
    }
    check::<f32>(11);
    check::<bf16>(12);
    check::<f16>(13);
    // Infinities and NaNs carry through.
    let special = [1.0, f32::INFINITY, 2.0].map(bf16::from_f32);
    assert_eq!(cast::sum_widened(Isa::detect(), &special), f32::INFINITY);
    let special = [1.0, f32::NAN, 2.0].map(f16::from_f32);
    assert!(cast::sum_widened(Isa::detect(), &special).is_nan());
}

#[test]
fn sums_of_products_follow_the_documented_order_on_every_instruction_set() {
    // `dot_widened`: each product rounded to f32, then summed in `sum_widened`'s order, so
    // the sum of the products written out.
    fn check<S: CpuFloat>(seed: u64) {
        for len in (0..40).chain([255, 256, 257, 1000, 4099]) {
            let a: Vec<S> = random(len, seed + len as u64);
            let b: Vec<S> = random(len, seed + 1000 + len as u64);
            let products: Vec<f32> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| x.to_f32() * y.to_f32())
                .collect();
            let expected = cast::sum_widened(Isa::PORTABLE, &products);
            for isa in Isa::available() {
                let dot = cast::dot_widened(isa, &a, &b).unwrap();
                assert_eq!(
                    dot.to_bits(),
                    expected.to_bits(),
                    "{isa} {:?} {len}",
                    S::FORMAT
                );
            }
        }
    }
    check::<f32>(21);
    check::<bf16>(22);
    check::<f16>(23);
    let err = cast::dot_widened(Isa::detect(), &[1.0f32; 4], &[1.0f32; 3]).unwrap_err();
    assert_eq!(err, CastError::LengthMismatch { src: 4, dst: 3 });
    let special = [1.0, f32::NAN].map(bf16::from_f32);
    assert!(
        cast::dot_widened(Isa::detect(), &special, &special)
            .unwrap()
            .is_nan()
    );
}

// ---- GEMM ----

fn round(x: f32, format: Format) -> f64 {
    match format {
        Format::F32 => x as f64,
        Format::Bf16 => bf16::from_f32(x).to_f64(),
        Format::F16 => f16::from_f32(x).to_f64(),
    }
}

/// The exact product of the rounded operands (f64), and the sum of |a||b| of each entry.
fn reference<A: CpuFloat, B: CpuFloat>(
    a: &MatRef<'_, A>,
    b: &MatRef<'_, B>,
    at: impl Fn(usize, usize) -> A,
    bt: impl Fn(usize, usize) -> B,
    format: Format,
) -> (Vec<f64>, Vec<f64>) {
    let (m, n, k) = (a.rows(), b.cols(), a.cols());
    let mut exact = vec![0f64; m * n];
    let mut magnitude = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                let x = round(at(i, p).to_f32(), format) * round(bt(p, j).to_f32(), format);
                exact[i * n + j] += x;
                magnitude[i * n + j] += x.abs();
            }
        }
    }
    (exact, magnitude)
}

/// The bound every kernel meets: f32 accumulation of k exact products (k + 1 roundings of
/// 2^-24 relative to the sum of magnitudes), plus the output's own rounding, plus 2^-100
/// for the products `vdpbf16ps` flushes.
fn check_within_bound<C: CpuFloat>(
    what: &str,
    got: &[C],
    (exact, magnitude): &(Vec<f64>, Vec<f64>),
    k: usize,
) {
    let out_u = match C::FORMAT {
        Format::F32 => 0.0,
        Format::Bf16 => 2f64.powi(-8),
        Format::F16 => 2f64.powi(-11),
    };
    for (idx, g) in got.iter().enumerate() {
        let (g, e, mag) = (g.to_f32() as f64, exact[idx], magnitude[idx]);
        if e.is_nan() {
            assert!(
                g.is_nan(),
                "{what}: entry {idx}: {g} where the product is NaN"
            );
            continue;
        }
        if e.is_infinite() {
            assert_eq!(g, e, "{what}: entry {idx}");
            continue;
        }
        let bound = (k + 1) as f64 * 2f64.powi(-24) * mag * (1.0 + out_u)
            + out_u * e.abs()
            + 2f64.powi(-100);
        assert!(
            (g - e).abs() <= bound,
            "{what}: entry {idx}: {g} vs exact {e} (bound {bound:e})"
        );
    }
}

fn random<T: CpuFloat>(len: usize, seed: u64) -> Vec<T> {
    let mut rng = Rng(seed);
    (0..len).map(|_| T::from_f32(rng.uniform())).collect()
}

fn kernels(format: Format) -> Vec<Kernel> {
    let all = Kernel::all(Isa::detect(), format);
    eprintln!(
        "{format:?} kernels tested: {}",
        all.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    );
    all
}

/// Runs `a b` (both row-major, optionally transposed in storage) through every kernel.
fn check_shape<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    (m, n, k): (usize, usize, usize),
    a_transposed: bool,
    b_transposed: bool,
    format: Format,
) {
    let a_data: Vec<A> = random(m * k, (m * 31 + k) as u64);
    let b_data: Vec<B> = random(k * n, (n * 17 + k) as u64);
    let a = if a_transposed {
        MatRef::row_major(&a_data, k, m).unwrap().transpose()
    } else {
        MatRef::row_major(&a_data, m, k).unwrap()
    };
    let b = if b_transposed {
        MatRef::row_major(&b_data, n, k).unwrap().transpose()
    } else {
        MatRef::row_major(&b_data, k, n).unwrap()
    };
    let at = |i: usize, p: usize| {
        if a_transposed {
            a_data[p * m + i]
        } else {
            a_data[i * k + p]
        }
    };
    let bt = |p: usize, j: usize| {
        if b_transposed {
            b_data[j * k + p]
        } else {
            b_data[p * n + j]
        }
    };
    let expected = reference(&a, &b, at, bt, format);
    for kernel in kernels(format) {
        let mut c = vec![C::from_f32(7.0); m * n];
        gemm::gemm(kernel, a, b, &mut c).unwrap();
        let what = format!(
            "{kernel}: {m}x{k} @ {k}x{n} (A{} B{}) {:?}x{:?}->{:?}",
            if a_transposed { "^T" } else { "" },
            if b_transposed { "^T" } else { "" },
            A::FORMAT,
            B::FORMAT,
            C::FORMAT
        );
        check_within_bound(&what, &c, &expected, k);
    }
}

#[test]
fn gemm_square_skinny_odd_and_transposed_shapes_are_within_the_bound() {
    let shapes = [
        (64, 64, 64),
        (1, 300, 70),
        (300, 1, 70),
        (37, 41, 53),
        (13, 35, 17),
        (1, 1, 1),
    ];
    for format in [Format::Bf16, Format::F16, Format::F32] {
        for shape in shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check_shape::<f32, f32, f32>(shape, ta, tb, format);
            }
        }
    }
}

#[test]
fn gemm_mixed_operand_and_output_dtypes_are_within_the_bound() {
    let shape = (19, 70, 45);
    check_shape::<bf16, f32, bf16>(shape, false, true, Format::Bf16);
    check_shape::<f32, bf16, f32>(shape, true, false, Format::Bf16);
    check_shape::<bf16, bf16, bf16>(shape, false, false, Format::Bf16);
    check_shape::<f16, f32, f16>(shape, false, true, Format::F16);
    check_shape::<f16, f16, f32>(shape, true, true, Format::F16);
    // A format that differs from the operands' rounds them: f16 values to bf16 and back.
    check_shape::<f16, bf16, f32>(shape, false, false, Format::Bf16);
    check_shape::<bf16, f16, f16>(shape, false, false, Format::F16);
}

#[test]
fn gemm_blocks_and_threads_cover_every_entry() {
    // Crosses the row, column and k blocks (144, 2048, 256) and splits over threads.
    check_shape::<f32, f32, f32>((150, 2100, 600), false, true, Format::Bf16);
    check_shape::<bf16, f32, bf16>((300, 97, 530), true, false, Format::Bf16);
    check_shape::<f32, f32, f16>((150, 300, 300), false, false, Format::F16);
}

/// Every kernel of `formats` on this CPU, with caches so small that the products of the
/// tests below cross several KC steps and row blocks (AMX's blocks of rows, from L3, then
/// hold 256 rows: 603 rows cross two), and with the CPU's own.
fn kernels_on_both_caches(formats: &[Format]) -> Vec<(CacheSizes, Kernel)> {
    let small = CacheSizes {
        l1d: 8 << 10,
        l2: 64 << 10,
        l3: 256 << 10,
    };
    let isa = Isa::detect();
    [small, isa.caches()]
        .into_iter()
        .flat_map(|caches| {
            let isa = isa.with_caches(caches);
            formats
                .iter()
                .flat_map(move |&format| Kernel::all(isa, format))
                .map(move |kernel| (caches, kernel))
        })
        .collect()
}

/// An `m x k` view of `data`: row-major, or the transpose of a row-major `k x m`.
fn view_of<T: CpuFloat>(data: &[T], (m, k): (usize, usize), transposed: bool) -> MatRef<'_, T> {
    if transposed {
        MatRef::row_major(data, k, m).unwrap().transpose()
    } else {
        MatRef::row_major(data, m, k).unwrap()
    }
}

/// `c = a b + bias` on a pool of `threads` threads.
fn gemm_on<C: CpuFloat>(
    threads: usize,
    kernel: Kernel,
    (a, b): (MatRef<'_, f32>, MatRef<'_, bf16>),
    bias: Option<&[f32]>,
) -> Vec<C> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let mut c = vec![C::from_f32(7.0); a.rows() * b.cols()];
    pool.install(|| gemm::gemm_bias(kernel, a, b, bias, &mut c))
        .unwrap();
    c
}

/// The grid of tasks the driver cuts a product into depends on the thread count; the sums
/// must not: 1, 2 and 3 threads (3 on 2 cores still cuts three ways) give the same bits,
/// within the bound of the exact product, for odd shapes that cross every block (blocks
/// made small by small caches), wide, tall and transposed, with and without a bias, into
/// f32 and bf16.
#[test]
fn gemm_gives_the_same_bits_on_1_2_and_3_threads_within_the_bound() {
    let shapes = [
        (150, 301, 300, false),
        (7, 1501, 260, true),
        (603, 33, 150, false),
        (97, 215, 530, true),
    ];
    {
        for (caches, kernel) in kernels_on_both_caches(&[Format::Bf16, Format::F16]) {
            let format = kernel.format();
            for (m, n, k, transposed) in shapes {
                let a_data: Vec<f32> = random(m * k, (m + k) as u64);
                let b_data: Vec<bf16> = random(k * n, (n + 3 * k) as u64);
                let bias: Vec<f32> = random(n, n as u64);
                let a = view_of(&a_data, (m, k), transposed);
                let b = MatRef::row_major(&b_data, k, n).unwrap();
                let what = format!("{kernel} {caches:?}: {m}x{k} @ {k}x{n}");
                let bits = |c: Vec<bf16>| c.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                let one: Vec<f32> = gemm_on(1, kernel, (a, b), Some(&bias));
                let one16 = bits(gemm_on(1, kernel, (a, b), None));
                // A bf16 C is the f32 sums plus the bias, rounded once: whether
                // its tiles are rounded as they complete (k in one KC step) or
                // summed in a buffer first (small caches: several).
                let rounded: Vec<bf16> = gemm_on(1, kernel, (a, b), Some(&bias));
                let once = one.iter().map(|&v| bf16::from_f32(v).to_bits());
                assert!(
                    once.eq(bits(rounded)),
                    "{what}: bf16 C is not the f32 product rounded"
                );
                for threads in [2, 3] {
                    let many: Vec<f32> = gemm_on(threads, kernel, (a, b), Some(&bias));
                    let same = one
                        .iter()
                        .zip(&many)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "{what}: {threads} threads differ from one (f32, bias)"
                    );
                    let many16 = bits(gemm_on(threads, kernel, (a, b), None));
                    assert!(one16 == many16, "{what}: {threads} threads differ (bf16)");
                }
                {
                    let at =
                        |i: usize, p: usize| a_data[if transposed { p * m + i } else { i * k + p }];
                    let bt = |p: usize, j: usize| b_data[p * n + j];
                    let (mut exact, magnitude) = reference(&a, &b, at, bt, format);
                    for (i, e) in exact.iter_mut().enumerate() {
                        *e += round(bias[i % n], format);
                    }
                    check_within_bound(&what, &one, &(exact, magnitude), k);
                }
            }
        }
    }
}

/// A packed once ([`PackedA`]) gives [`gemm::gemm_on`]'s bits with the matrix it was packed
/// from, on every kernel, into f32 and bf16, with a row bias, on 1, 2 and 3 threads (whose
/// grids start row blocks at other rows), with blocks made small (several KC steps and row
/// blocks) and the CPU's own; a matrix of the wrong shape is refused.
#[test]
fn packed_a_gives_the_bits_of_packing_it_in_every_product() {
    use burn_amp_kernels::cpu::gemm::{PackedA, Threads};
    let shapes = [
        (150, 301, 300, false),
        (603, 33, 150, true),
        (97, 215, 530, false),
        (13, 35, 17, true),
        (1, 1, 1, false),
    ];
    let formats = [Format::Bf16, Format::F16, Format::F32];
    for (caches, kernel) in kernels_on_both_caches(&formats) {
        for (m, n, k, transposed) in shapes {
            let a_data: Vec<f32> = random(m * k, (m + 5 * k) as u64);
            let b_data: Vec<bf16> = random(k * n, (n + 7 * k) as u64);
            let bias: Vec<f32> = random(m, m as u64);
            let a = view_of(&a_data, (m, k), transposed);
            let b = MatRef::row_major(&b_data, k, n).unwrap();
            let packed = PackedA::new(kernel, a);
            assert_eq!((packed.rows(), packed.depth()), (m, k));
            let what = format!("{kernel} {caches:?}: {m}x{k} @ {k}x{n}");
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let mut want = vec![7f32; m * n];
                    let mut got = vec![-7f32; m * n];
                    gemm::gemm_on(Threads::Pool, kernel, a, b, Some(&bias), &mut want).unwrap();
                    gemm::gemm_packed_on(Threads::Pool, &packed, b, Some(&bias), &mut got).unwrap();
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{what}, {threads} threads: f32 C differs");
                    let mut want = vec![bf16::ONE; m * n];
                    let mut got = vec![bf16::ZERO; m * n];
                    gemm::gemm_on::<_, _, f32, _>(Threads::Caller, kernel, a, b, None, &mut want)
                        .unwrap();
                    gemm::gemm_packed_on::<_, f32, _>(Threads::Caller, &packed, b, None, &mut got)
                        .unwrap();
                    assert!(want == got, "{what}, {threads} threads: bf16 C differs");
                });
            }
        }
    }
    let kernel = Kernel::select(Isa::detect(), Format::Bf16);
    let a = vec![1f32; 6];
    let packed = PackedA::new(kernel, MatRef::row_major(&a, 2, 3).unwrap());
    let b = vec![1f32; 8];
    let run = |b: MatRef<'_, f32>, bias: Option<&[f32]>, len: usize| {
        let mut c = vec![0f32; len];
        gemm::gemm_packed_on(Threads::Caller, &packed, b, bias, &mut c)
    };
    assert!(matches!(
        run(MatRef::row_major(&b, 4, 2).unwrap(), None, 4),
        Err(GemmError::ShapeMismatch { .. })
    ));
    let b3 = MatRef::row_major(&b[..6], 3, 2).unwrap();
    assert!(matches!(
        run(b3, None, 5),
        Err(GemmError::OutputLength { .. })
    ));
    assert!(matches!(
        run(b3, Some(&[0.0; 3]), 4),
        Err(GemmError::BiasLength { .. })
    ));
    assert_eq!(run(b3, Some(&[0.5, 1.0]), 4), Ok(()));
}

/// The AMX-BF16 kernel, where the CPU has it: chosen for bf16 products, within the bound
/// of the exact product at odd shapes (k not a multiple of its 32-k blocks, partial tiles,
/// transposed operands), and the same bits on any thread count.
#[test]
#[ignore = "needs a CPU with AMX-BF16 and a Linux that grants its tile state (Sapphire \
            Rapids or newer): cargo test -p burn-amp-kernels --test cpu -- --ignored amx"]
fn amx_kernel_is_chosen_and_within_the_bound() {
    use burn_amp_kernels::cpu::isa::{AmxStatus, amx_status};
    assert_eq!(
        amx_status(),
        AmxStatus::Granted,
        "this CPU runs no AMX-BF16"
    );
    let kernel = Kernel::select(Isa::detect(), Format::Bf16);
    assert!(kernel.name().starts_with("amx_bf16"), "{kernel} chosen");
    for (m, n, k) in [
        (32, 32, 32),
        (37, 41, 53),
        (1, 300, 70),
        (300, 1, 70),
        (150, 301, 300),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            check_shape::<f32, f32, f32>((m, n, k), ta, tb, Format::Bf16);
            check_shape::<bf16, bf16, bf16>((m, n, k), ta, tb, Format::Bf16);
        }
    }
}

/// bf16 products run on `vdpbf16ps` pairs where the CPU runs it at full rate, and on f32
/// FMAs of the widened values where it runs at half the FMAs' rate; AMX tiles, where
/// granted, whatever the rate; every level below AVX-512 BF16 is unaffected. Both choices
/// are among the kernels the tests above hold to the bound.
#[test]
fn the_bf16_kernel_follows_the_dot_product_rate() {
    use burn_amp_kernels::cpu::isa::{Bf16Dot, IsaLevel};
    for isa in Isa::available() {
        let [full, half] = [Bf16Dot::FullRate, Bf16Dot::HalfRate]
            .map(|rate| Kernel::select(isa.with_bf16_dot(rate), Format::Bf16));
        for (kernel, rate) in [(full, Bf16Dot::FullRate), (half, Bf16Dot::HalfRate)] {
            let all = Kernel::all(isa.with_bf16_dot(rate), Format::Bf16);
            assert_eq!(all.last(), Some(&kernel), "{kernel}");
            let names: Vec<_> = Kernel::all(isa, Format::Bf16)
                .iter()
                .map(|k| k.name())
                .collect();
            assert!(names.contains(&kernel.name()), "{kernel}");
        }
        let (full, half) = (full.name(), half.name());
        match isa.level() {
            IsaLevel::Avx512Bf16 => {
                assert!(full.starts_with("avx512_bf16 vdpbf16ps"), "{isa}: {full}");
                assert!(half.starts_with("avx512f f32"), "{isa}: {half}");
            }
            IsaLevel::AmxBf16 => {
                assert!(
                    full.starts_with("amx_bf16") && half == full,
                    "{isa}: {full}, {half}"
                )
            }
            _ => assert_eq!(full, half, "{isa}"),
        }
        // f16 products widen to f32 whatever the bf16 rate.
        let [f16_full, f16_half] = [Bf16Dot::FullRate, Bf16Dot::HalfRate]
            .map(|rate| Kernel::select(isa.with_bf16_dot(rate), Format::F16));
        assert_eq!(f16_full.name(), f16_half.name(), "{isa}");
    }
}

#[test]
fn gemm_reads_strided_and_negatively_strided_views_in_place() {
    let (m, n, k) = (23, 40, 33);
    // A: every other column of a wider matrix; B: rows and columns flipped.
    let a_store: Vec<f32> = random(m * 2 * k, 5);
    let b_store: Vec<f32> = random(k * n, 6);
    let a = MatRef::new(&a_store, 1, m, k, 2 * k as isize, 2).unwrap();
    let b = MatRef::new(&b_store, k * n - 1, k, n, -(n as isize), -1).unwrap();
    let at = |i: usize, p: usize| a_store[1 + i * 2 * k + 2 * p];
    let bt = |p: usize, j: usize| b_store[k * n - 1 - p * n - j];
    for format in [Format::Bf16, Format::F16] {
        let expected = reference(&a, &b, at, bt, format);
        for kernel in kernels(format) {
            let mut c = vec![0f32; m * n];
            gemm::gemm(kernel, a, b, &mut c).unwrap();
            check_within_bound(&format!("{kernel} strided"), &c, &expected, k);
        }
    }
}

#[test]
fn gemm_zero_sizes_and_k_zero() {
    for kernel in kernels(Format::Bf16) {
        let empty: [f32; 0] = [];
        let a = MatRef::row_major(&empty, 0, 5).unwrap();
        let b_data = [1f32; 10];
        let b = MatRef::row_major(&b_data, 5, 2).unwrap();
        let mut c: [f32; 0] = [];
        gemm::gemm(kernel, a, b, &mut c).unwrap();
        // k = 0: the product is all zeros.
        let a = MatRef::row_major(&empty, 3, 0).unwrap();
        let b = MatRef::row_major(&empty, 0, 4).unwrap();
        let mut c = [bf16::ONE; 12];
        gemm::gemm(kernel, a, b, &mut c).unwrap();
        assert_eq!(c, [bf16::ZERO; 12], "{kernel}");
    }
}

#[test]
fn gemm_propagates_inf_and_nan() {
    let (m, n, k) = (14, 40, 36);
    let mut a: Vec<f32> = random(m * k, 8);
    let mut b: Vec<f32> = random(k * n, 9);
    a[3 * k + 5] = f32::NAN; // row 3 of C: NaN
    a[7 * k + 2] = f32::INFINITY; // row 7: +-inf, or NaN where b[2][j] is 0
    b[2 * n + 11] = 0.0; // ... here: inf * 0
    b[4 * n + 30] = f32::NEG_INFINITY; // column 30: -+inf
    let am = MatRef::row_major(&a, m, k).unwrap();
    let bm = MatRef::row_major(&b, k, n).unwrap();
    for format in [Format::Bf16, Format::F16] {
        let expected = reference(&am, &bm, |i, p| a[i * k + p], |p, j| b[p * n + j], format);
        assert!(expected.0[3 * n].is_nan() && expected.0[7 * n + 11].is_nan());
        assert!(expected.0[7 * n].is_infinite() && expected.0[30].is_infinite());
        for kernel in kernels(format) {
            let mut c = vec![bf16::ZERO; m * n];
            gemm::gemm(kernel, am, bm, &mut c).unwrap();
            check_within_bound(&format!("{kernel} inf/NaN"), &c, &expected, k);
        }
    }
}

#[test]
fn gemm_refuses_bad_shapes_and_views() {
    let data = [0f32; 12];
    let a = MatRef::row_major(&data, 3, 4).unwrap();
    let kernel = Kernel::select(Isa::detect(), Format::Bf16);
    let mut c = [0f32; 9];
    assert!(matches!(
        gemm::gemm(kernel, a, a, &mut c),
        Err(GemmError::ShapeMismatch {
            a_cols: 4,
            b_rows: 3,
            ..
        })
    ));
    let b = MatRef::row_major(&data, 4, 3).unwrap();
    let mut short = [0f32; 8];
    assert!(matches!(
        gemm::gemm(kernel, a, b, &mut short),
        Err(GemmError::OutputLength { len: 8, .. })
    ));
    assert!(matches!(
        MatRef::row_major(&data, 4, 4),
        Err(GemmError::OutOfBounds { .. })
    ));
    assert!(MatRef::new(&data, 2, 2, 2, -3, 1).is_err()); // reaches before the slice
    assert!(MatRef::new(&data, 0, 2, 2, isize::MAX, 1).is_err()); // overflows
    assert!(MatRef::new(&data, 11, 3, 4, -4, -1).is_ok()); // the whole slice, flipped
}

/// Views of stride 0 name any size over one value (a broadcast read): a product whose
/// output count wraps around to the output's length, or whose operands cannot be
/// addressed, is refused before anything is written, never run past the output.
#[test]
fn gemm_refuses_sizes_that_overflow_instead_of_wrapping() {
    let one = [1f32];
    let kernel = Kernel::select(Isa::detect(), Format::Bf16);
    // rows * cols = 2^64 + 4, which wraps to 4: the output's length.
    let rows = (1usize << 62) + 1;
    let a = MatRef::new(&one, 0, rows, 1, 0, 0).unwrap();
    let b = MatRef::new(&one, 0, 1, 4, 0, 0).unwrap();
    let mut c = [0f32; 4];
    assert!(
        matches!(
            gemm::gemm(kernel, a, b, &mut c),
            Err(GemmError::TooLarge { .. })
        ),
        "a wrapping output count is refused"
    );
    assert_eq!(c, [0.0; 4], "nothing is written");
    // An output of 0 values (no columns) with an unaddressable depth.
    let depth = 1usize << 63;
    let a = MatRef::new(&one, 0, 2, depth, 0, 0).unwrap();
    let b = MatRef::new(&one, 0, depth, 0, 0, 0).unwrap();
    assert!(matches!(
        gemm::gemm::<f32, f32, f32>(kernel, a, b, &mut []),
        Err(GemmError::TooLarge { .. })
    ));
    // Broadcast reads of a sane size still run.
    let a = MatRef::new(&one, 0, 2, 3, 0, 0).unwrap();
    let b = MatRef::new(&one, 0, 3, 2, 0, 0).unwrap();
    let mut c = [0f32; 4];
    gemm::gemm(kernel, a, b, &mut c).unwrap();
    assert_eq!(c, [3.0; 4]);
}

/// The other safe entries that take sizes: a strided copy and the convolution columns
/// refuse shapes whose products overflow, with their typed errors.
#[test]
fn copies_and_convolution_columns_refuse_overflowing_sizes() {
    use burn_amp_kernels::cpu::conv::{self, ConvError, ConvShape};
    use burn_amp_kernels::cpu::layout::{LayoutError, copy_strided};
    let src = [1f32; 4];
    let mut dst = [0f32; 4];
    // 2^62 * 4 = 2^64 values: it would wrap to 0.
    let huge = [1usize << 62, 4, 1];
    assert!(matches!(
        copy_strided(&src, 0, &huge, &[0, 0, 0], &mut dst),
        Err(LayoutError::Shape { .. })
    ));
    assert!(matches!(
        copy_strided(&src, 0, &[2, 2], &[isize::MAX, 1], &mut dst),
        Err(LayoutError::OutOfBounds { .. })
    ));
    assert_eq!(dst, [0.0; 4], "nothing is written");
    copy_strided(&src, 0, &[2, 2], &[0, 1], &mut dst).unwrap();
    let shape = ConvShape::new(1 << 40, 1 << 40, [1, 1], [1, 1]);
    let mut cols = [0f32; 4];
    assert!(matches!(
        conv::im2col(Isa::detect(), &shape, &src, 0..1, &mut cols),
        Err(ConvError::TooLarge { .. })
    ));
    let mut shape = ConvShape::new(1, 1, [4, 4], [2, 2]);
    shape.padding = [usize::MAX / 2, 0];
    assert!(conv::im2col(Isa::detect(), &shape, &src, 0..1, &mut cols).is_err());
}

#[test]
fn gemm_bias_is_added_before_the_output_is_rounded() {
    let (m, n, k) = (9, 45, 300);
    let a: Vec<f32> = random(m * k, 31);
    let b: Vec<f32> = random(k * n, 32);
    let bias: Vec<f32> = random::<f32>(n, 33).iter().map(|v| v * 3.0).collect();
    let am = MatRef::row_major(&a, m, k).unwrap();
    let bm = MatRef::row_major(&b, k, n).unwrap();
    for format in [Format::Bf16, Format::F16] {
        let (mut exact, mut magnitude) =
            reference(&am, &bm, |i, p| a[i * k + p], |p, j| b[p * n + j], format);
        for (idx, (e, mag)) in exact.iter_mut().zip(&mut magnitude).enumerate() {
            let r = round(bias[idx % n], format);
            *e += r;
            *mag += r.abs();
        }
        let expected = (exact, magnitude);
        for kernel in kernels(format) {
            let mut c = vec![bf16::ZERO; m * n];
            gemm::gemm_bias(kernel, am, bm, Some(&bias), &mut c).unwrap();
            check_within_bound(&format!("{kernel} + bias"), &c, &expected, k + 1);
            // k = 0: the product is the rounded bias on every row.
            let empty: [f32; 0] = [];
            let mut c = vec![0f32; 2 * n];
            let (a0, b0) = (
                MatRef::row_major(&empty, 2, 0).unwrap(),
                MatRef::row_major(&empty, 0, n).unwrap(),
            );
            gemm::gemm_bias(kernel, a0, b0, Some(&bias), &mut c).unwrap();
            for (j, v) in c.iter().enumerate() {
                assert_eq!(*v as f64, round(bias[j % n], format), "{kernel}: k = 0");
            }
        }
    }
    let kernel = Kernel::select(Isa::detect(), Format::Bf16);
    let mut c = vec![0f32; m * n];
    assert_eq!(
        gemm::gemm_bias(kernel, am, bm, Some(&bias[..3]), &mut c),
        Err(GemmError::BiasLength { cols: n, len: 3 })
    );
}

/// Reproducible values in `[-scale, scale)` (a 64-bit LCG).
fn lcg_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn adamw_on<G: CpuFloat>(isa: Isa, grad: &[G], scale: Option<f32>) -> [Vec<u32>; 3] {
    use burn_amp_kernels::cpu::optim::{AdamwStep, adamw};
    let n = grad.len();
    let mut p = lcg_values(n, 1, 1.0);
    let mut m = lcg_values(n, 2, 1e-2);
    let mut v: Vec<f32> = lcg_values(n, 3, 1e-4).iter().map(|x| x.abs()).collect();
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.1);
    adamw(isa, &mut p, grad, &mut m, &mut v, &step.at(7), scale).unwrap();
    [p, m, v].map(|x| x.iter().map(|f| f.to_bits()).collect())
}

/// [`adamw_on`] written out as the module documents it (Burn's `AdamW`), one value at a time.
fn adamw_by_hand(grad: &[f32], scale: Option<f32>) -> [Vec<u32>; 3] {
    let n = grad.len();
    let (mut p, mut m) = (lcg_values(n, 1, 1.0), lcg_values(n, 2, 1e-2));
    let mut v: Vec<f32> = lcg_values(n, 3, 1e-4).iter().map(|x| x.abs()).collect();
    // The step's scalars as the kernel is handed them (`powi` may fold differently in a
    // constant); the element arithmetic below is what is checked.
    let at = burn_amp_kernels::cpu::optim::AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.1).at(7);
    let (lr, b1, b2, eps, decay) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, at.step.decay);
    let (c1, c2) = (at.c1, at.c2);
    for i in 0..n {
        let g = scale.map_or(grad[i], |s| grad[i] / s);
        m[i] = m[i] * b1 + g * (1.0 - b1);
        v[i] = v[i] * b2 + (g * g) * (1.0 - b2);
        p[i] = p[i] * decay - ((m[i] / c1) / ((v[i] / c2).sqrt() + eps)) * lr;
    }
    [p, m, v].map(|x| x.iter().map(|f| f.to_bits()).collect())
}

#[test]
fn adamw_unscale_and_count_give_the_portable_bits_on_every_instruction_set() {
    use burn_amp_kernels::cpu::optim::{count_nonfinite, unscale};
    let portable = Isa::new(burn_amp_kernels::cpu::isa::IsaLevel::Portable).unwrap();
    // Lengths around the 8- and 16-wide loops and past one threaded chunk.
    for n in [0, 1, 7, 8, 15, 16, 17, 33, 100_003] {
        let g32 = lcg_values(n, 4, 0.5);
        let gbf: Vec<bf16> = g32.iter().map(|&x| bf16::from_f32(x)).collect();
        let gf16: Vec<f16> = g32.iter().map(|&x| f16::from_f32(x)).collect();
        for scale in [None, Some(1000.0)] {
            assert_eq!(
                adamw_on(portable, &g32, scale),
                adamw_by_hand(&g32, scale),
                "{n}"
            );
        }
        for isa in Isa::available() {
            let level = isa.level().name();
            for scale in [None, Some(1024.0)] {
                assert_eq!(
                    adamw_on(isa, &g32, scale),
                    adamw_on(portable, &g32, scale),
                    "f32 {level} {n}"
                );
                assert_eq!(
                    adamw_on(isa, &gbf, scale),
                    adamw_on(portable, &gbf, scale),
                    "bf16 {level} {n}"
                );
                assert_eq!(
                    adamw_on(isa, &gf16, scale),
                    adamw_on(portable, &gf16, scale),
                    "f16 {level} {n}"
                );
            }
            let mut with_bad = g32.clone();
            if n > 9 {
                with_bad[3] = f32::NAN;
                with_bad[n - 1] = f32::INFINITY;
                with_bad[7] = 3e38; // finite, in f32's largest binade
            }
            let want = with_bad.iter().filter(|x| !x.is_finite()).count();
            assert_eq!(count_nonfinite(isa, &with_bad), want, "{level} {n}");
            // The 16-bit formats on their own exponent fields: 70000 overflows f16 (to an
            // infinity) but not bf16; 40000 and 3e38, each format's largest binade, are finite.
            let mut bad_bf: Vec<bf16> = with_bad.iter().map(|&x| bf16::from_f32(x)).collect();
            let mut bad_h: Vec<f16> = with_bad.iter().map(|&x| f16::from_f32(x)).collect();
            if n > 9 {
                bad_bf[5] = bf16::from_f32(7e4);
                bad_h[5] = f16::from_f32(7e4);
                bad_bf[6] = bf16::from_f32(3e38);
                bad_h[6] = f16::from_f32(4e4);
            }
            let count = |x: &[f32]| x.iter().filter(|x| !x.is_finite()).count();
            let widen_bf: Vec<f32> = bad_bf.iter().map(|x| x.to_f32()).collect();
            let widen_h: Vec<f32> = bad_h.iter().map(|x| x.to_f32()).collect();
            assert_eq!(
                count_nonfinite(isa, &bad_bf),
                count(&widen_bf),
                "bf16 {level} {n}"
            );
            assert_eq!(
                count_nonfinite(isa, &bad_h),
                count(&widen_h),
                "f16 {level} {n}"
            );
            if n > 9 {
                // 70000 and 3e38 overflow f16 alone.
                assert_eq!(count(&widen_h), count(&widen_bf) + 2, "f16 {level} {n}");
            }
            let (mut a, mut b) = (g32.clone(), g32.clone());
            unscale(isa, &mut a, 3.0);
            unscale(portable, &mut b, 3.0);
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{level} {n}"
            );
        }
    }
}

#[test]
fn widening_casts_past_the_streaming_size_match_half_at_any_alignment() {
    // 3M values: 12 MB of f32 output, past the size from which widening casts write with
    // non-temporal stores; every bf16 and f16 pattern repeated, at offsets 0 to 7.
    let n = 3 << 20;
    let codes: Vec<u16> = (0..n)
        .map(|i| (i as u32).wrapping_mul(40503) as u16)
        .collect();
    let bf: Vec<bf16> = codes.iter().map(|&c| bf16::from_bits(c)).collect();
    let hf: Vec<f16> = codes.iter().map(|&c| f16::from_bits(c)).collect();
    for isa in Isa::available() {
        for offset in [0usize, 1, 3, 7] {
            let mut out = vec![0f32; n + offset];
            cast::convert(isa, &bf[..n], &mut out[offset..]).unwrap();
            let same = bf
                .iter()
                .zip(&out[offset..])
                .all(|(b, o)| b.to_f32().to_bits() == o.to_bits());
            assert!(same, "bf16 -> f32, {} offset {offset}", isa.level().name());
            cast::convert(isa, &hf[..n], &mut out[offset..]).unwrap();
            let same = hf
                .iter()
                .zip(&out[offset..])
                .all(|(h, o)| h.to_f32().to_bits() == o.to_bits());
            assert!(same, "f16 -> f32, {} offset {offset}", isa.level().name());
        }
    }
}

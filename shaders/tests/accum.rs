//! Blocked accumulation: the kernels against the CPU reference bit for bit on wgpu
//! (lavapipe in CI), chunking's accuracy on 2^20 values from U(0,1), and the block-scaled
//! FP8 matmul against an f64 matmul of its dequantized inputs.

use burn_amp_kernels::accum::launch;
use burn_amp_kernels::accum::reference::{self, Fp8MatmulConfig};
use burn_amp_kernels::accum::{AccumConfig, Accumulator};
use burn_amp_kernels::fp8::launch::{self as fp8_launch, BlockLayout};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

type R = WgpuRuntime;

fn client() -> ComputeClient<R> {
    R::client(&WgpuDevice::default())
}

fn read_f32(client: &ComputeClient<R>, h: cubecl::server::Handle, len: usize) -> Vec<f32> {
    f32::from_bytes(&client.read_one_unchecked(h))[..len].to_vec()
}

fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn configs() -> Vec<AccumConfig> {
    use Accumulator::*;
    vec![
        AccumConfig::naive(F16),
        AccumConfig::naive(BF16),
        AccumConfig::naive(F32),
        AccumConfig::chunked(F16, 32),
        AccumConfig::chunked(F16, 64),
        AccumConfig::chunked(F16, 256),
        AccumConfig::chunked(BF16, 64),
        AccumConfig::chunked(F16, 64).with_combine(F16),
        AccumConfig::chunked(F16, 64).with_stochastic(5),
        AccumConfig::naive(BF16).with_stochastic(6),
        AccumConfig::chunked(E8M13, 128),
    ]
}

fn same(got: &[f32], want: &[f32]) -> bool {
    got.iter()
        .zip(want)
        .all(|(a, b)| a.to_bits() == b.to_bits())
}

#[test]
fn row_sums_and_dots_match_the_reference_bit_for_bit() {
    let client = client();
    let (rows, cols) = (7usize, 1000usize);
    let x = uniform(rows * cols, 1, -1.0, 3.0);
    let y = uniform(rows * cols, 2, -2.0, 2.0);
    for config in configs() {
        let input = client.create_from_slice(f32::as_bytes(&x));
        let sums = launch::row_sums::<R, f32>(
            &client,
            input.clone(),
            None,
            rows as u32,
            cols as u32,
            config,
        )
        .expect("a valid launch");
        let want = reference::row_sums(&x, cols, config);
        let got = read_f32(&client, sums, rows);
        assert!(same(&got, &want), "sums {config:?}: {got:?} vs {want:?}");

        let other = client.create_from_slice(f32::as_bytes(&y[..cols]));
        let dot = launch::row_sums::<R, f32>(&client, input, Some(other), 1, cols as u32, config)
            .expect("a valid launch");
        let got = read_f32(&client, dot, 1);
        let want = reference::dot(&x[..cols], &y[..cols], config);
        assert_eq!(
            got[0].to_bits(),
            want.to_bits(),
            "dot {config:?}: {} vs {want}",
            got[0]
        );
    }
}

#[test]
fn matmul_matches_the_reference_bit_for_bit() {
    let client = client();
    let (m, k, n) = (9usize, 300usize, 11usize);
    let a = uniform(m * k, 3, -1.0, 1.0);
    let b = uniform(k * n, 4, -1.0, 1.0);
    for config in configs() {
        let ha = client.create_from_slice(f32::as_bytes(&a));
        let hb = client.create_from_slice(f32::as_bytes(&b));
        let out = launch::matmul::<R, f32>(&client, ha, hb, (m as u32, k as u32, n as u32), config)
            .expect("a valid launch");
        let got = read_f32(&client, out, m * n);
        let want = reference::matmul(&a, &b, m, k, n, config);
        assert!(same(&got, &want), "matmul {config:?}");
    }
}

fn rel_error(sum: f32, exact: f64) -> f64 {
    (f64::from(sum) - exact).abs() / exact.abs()
}

/// IBM's claim, on 2^20 values from U(0, 1): chunks of 64 in f16 (chunk sums combined in
/// f32) are at least 100 times more accurate than the naive f16 running sum.
#[test]
fn chunk_64_beats_naive_f16_by_100x_on_a_million_uniform_values() {
    let client = client();
    let n = 1usize << 20;
    let x = uniform(n, 7, 0.0, 1.0);
    let exact: f64 = x.iter().map(|v| f64::from(*v)).sum();
    let run = |config: AccumConfig| {
        let input = client.create_from_slice(f32::as_bytes(&x));
        read_f32(
            &client,
            launch::row_sums::<R, f32>(&client, input, None, 1, n as u32, config)
                .expect("a valid launch"),
            1,
        )[0]
    };
    let naive = rel_error(run(AccumConfig::naive(Accumulator::F16)), exact);
    let chunked = rel_error(run(AccumConfig::chunked(Accumulator::F16, 64)), exact);
    let stochastic = rel_error(
        run(AccumConfig::naive(Accumulator::F16).with_stochastic(1)),
        exact,
    );
    let f16_combine =
        run(AccumConfig::chunked(Accumulator::F16, 64).with_combine(Accumulator::F16));
    eprintln!(
        "2^20 U(0,1): naive f16 {naive:.3e}, chunk 64 {chunked:.3e}, naive stochastic {stochastic:.3e}"
    );
    assert!(naive > 0.9, "the naive f16 sum stalls (swamping): {naive}");
    assert!(
        chunked * 100.0 <= naive,
        "chunk 64: {chunked} vs naive {naive}"
    );
    assert!(
        f16_combine.is_infinite(),
        "combining in f16 overflows past 65504: {f16_combine}"
    );
    assert!(
        stochastic.is_infinite(),
        "stochastic rounding escapes the stall, up to f16's max: {stochastic}"
    );
    // Below f16's max, stochastic rounding tracks the sum that round-to-nearest loses.
    let n16 = 1usize << 16;
    let exact16: f64 = x[..n16].iter().map(|v| f64::from(*v)).sum();
    let sum16 = |config: AccumConfig| {
        let input = client.create_from_slice(f32::as_bytes(&x[..n16]));
        read_f32(
            &client,
            launch::row_sums::<R, f32>(&client, input, None, 1, n16 as u32, config)
                .expect("a valid launch"),
            1,
        )[0]
    };
    let sr16 = rel_error(
        sum16(AccumConfig::naive(Accumulator::F16).with_stochastic(1)),
        exact16,
    );
    let rne16 = rel_error(sum16(AccumConfig::naive(Accumulator::F16)), exact16);
    eprintln!("2^16 U(0,1): naive f16 {rne16:.3e}, naive f16 stochastic {sr16:.3e}");
    assert!(sr16 * 10.0 < rne16, "stochastic {sr16} vs nearest {rne16}");
}

#[test]
fn fp8_block_scaled_matmul_matches_the_reference_and_tracks_f64() {
    let client = client();
    let (m, k, n) = (16usize, 512usize, 136usize);
    let a = uniform(m * k, 11, -4.0, 4.0);
    let b = uniform(k * n, 12, -0.05, 0.05);
    let format = Fp8Format::E4M3;
    let cast = Fp8Cast::new(format);
    let quantize = |values: &[f32], layout: BlockLayout| {
        let input = client.create_from_slice(f32::as_bytes(values));
        let amax =
            fp8_launch::amax::<R, f32>(&client, input.clone(), layout).expect("a valid launch");
        let (s, si) = fp8_launch::scales::<R>(
            &client,
            amax,
            layout.num_blocks(),
            format,
            ScaleRule::Float { margin: 0 },
        )
        .expect("a valid launch");
        let codes = fp8_launch::quantize::<R, f32>(&client, input, s, layout, cast)
            .expect("a valid launch");
        (codes, si)
    };
    let la = BlockLayout::blocks((m * k) as u32, k as u32, 1, 128);
    let lb = BlockLayout::blocks((k * n) as u32, n as u32, 128, 128);
    let (ca, sa) = quantize(&a, la);
    let (cb, sb) = quantize(&b, lb);
    let bytes =
        |h: cubecl::server::Handle, len: usize| client.read_one_unchecked(h)[..len].to_vec();
    let (a_codes, b_codes) = (bytes(ca.clone(), m * k), bytes(cb.clone(), k * n));
    let (a_si, b_si) = (
        read_f32(&client, sa.clone(), la.num_blocks() as usize),
        read_f32(&client, sb.clone(), lb.num_blocks() as usize),
    );

    // f64 matmul of the dequantized inputs.
    let deq = |codes: &[u8], si: &[f32], layout: BlockLayout| -> Vec<f64> {
        codes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                f64::from(burn_amp_kernels::fp8::reference::decode(*c, format))
                    * f64::from(si[layout.block_of(i as u32) as usize])
            })
            .collect()
    };
    let (da, db) = (deq(&a_codes, &a_si, la), deq(&b_codes, &b_si, lb));
    let exact: Vec<f64> = (0..m * n)
        .map(|u| {
            (0..k)
                .map(|t| da[(u / n) * k + t] * db[t * n + u % n])
                .sum()
        })
        .collect();
    let norm = (exact.iter().map(|v| v * v).sum::<f64>() / exact.len() as f64).sqrt();

    let mut errors = Vec::new();
    for (name, config) in [
        (
            "promoted every 128 (E8M13 windows)",
            Fp8MatmulConfig {
                block: 128,
                window: 128,
                accumulator: Accumulator::E8M13,
                promote: true,
            },
        ),
        (
            "promoted every 32 (E8M13 windows)",
            Fp8MatmulConfig {
                block: 128,
                window: 32,
                accumulator: Accumulator::E8M13,
                promote: true,
            },
        ),
        (
            "naive f16 accumulation",
            Fp8MatmulConfig {
                block: 128,
                window: 128,
                accumulator: Accumulator::F16,
                promote: false,
            },
        ),
        (
            "naive E8M13 accumulation",
            Fp8MatmulConfig {
                block: 128,
                window: 128,
                accumulator: Accumulator::E8M13,
                promote: false,
            },
        ),
    ] {
        let (a, b) = (
            launch::Fp8Operand {
                codes: ca.clone(),
                scale_invs: sa.clone(),
            },
            launch::Fp8Operand {
                codes: cb.clone(),
                scale_invs: sb.clone(),
            },
        );
        let out = launch::fp8_matmul::<R>(
            &client,
            a,
            b,
            (m as u32, k as u32, n as u32),
            format,
            config,
        )
        .expect("a valid launch");
        let got = read_f32(&client, out, m * n);
        let want =
            reference::fp8_matmul(&a_codes, &a_si, &b_codes, &b_si, (m, k, n), format, config);
        assert!(same(&got, &want), "{name}: kernel and reference differ");
        let err = (got
            .iter()
            .zip(&exact)
            .map(|(g, e)| (f64::from(*g) - e).powi(2))
            .sum::<f64>()
            / exact.len() as f64)
            .sqrt()
            / norm;
        eprintln!("fp8 matmul {name}: relative RMS error vs f64 {err:.3e}");
        errors.push(err);
    }
    // Tolerance: each of the k / 128 windows sums 128 products with 14-bit rounding, whose
    // errors average out like a random walk: about sqrt(128) * 2^-14 / sqrt(terms) of the
    // output's scale; 1e-3 is a ceiling several times above what is measured.
    assert!(errors[0] < 1e-3, "promoted every 128: {}", errors[0]);
    assert!(errors[1] <= errors[0] * 1.5, "shorter windows are no worse");
    assert!(
        errors[0] < errors[2],
        "promotion beats naive f16 accumulation"
    );
    assert!(
        errors[0] < errors[3],
        "promotion beats naive E8M13 accumulation"
    );
}

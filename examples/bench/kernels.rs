//! Rows for the CubeCL kernels on any CubeCL runtime (wgpu here, CUDA with the `cuda`
//! feature): FP8 quantize / dequantize against a device copy, chunked against naive
//! accumulation, promoted against naive FP8 matmul.

use burn_amp_kernels::accum::{self, AccumConfig, Accumulator, Fp8MatmulConfig};
use burn_amp_kernels::fp8::launch::{self, BlockLayout};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::Row;
use crate::stats::{Summary, time_pair};

fn sync<R: Runtime>(client: &ComputeClient<R>) {
    cubecl::future::block_on(client.sync()).expect("the device finishes");
}

pub fn rows<R: Runtime>(device: &R::Device, quick: bool, runs: usize, backend: &str) -> Vec<Row> {
    let client = R::client(device);
    let mut out = Vec::new();

    // FP8: effective bandwidth (bytes each kernel must move) against a plain copy.
    let n: u32 = if quick { 1 << 12 } else { 1 << 24 };
    let values: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) * 0.37).collect();
    let input = client.create_from_slice(f32::as_bytes(&values));
    let layout = BlockLayout::blocks(n, 4096.min(n), 1, 128);
    let amax = launch::amax::<R, f32>(&client, input.clone(), layout).expect("a valid launch");
    let rule = ScaleRule::Float { margin: 0 };
    let (scales, scale_invs) =
        launch::scales::<R>(&client, amax, layout.num_blocks(), Fp8Format::E4M3, rule)
            .expect("a valid launch");
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let codes = launch::quantize::<R, f32>(&client, input.clone(), scales.clone(), layout, cast)
        .expect("a valid launch");
    sync(&client);
    let copy = || {
        let _ = launch::copy::<R>(&client, input.clone(), n).expect("a valid launch");
        sync(&client);
    };
    let (copy_q, quantize) = time_pair(1, runs, copy, || {
        let _ = launch::quantize::<R, f32>(&client, input.clone(), scales.clone(), layout, cast)
            .expect("a valid launch");
        sync(&client);
    });
    let (copy_d, dequantize) = time_pair(1, runs, copy, || {
        let _ = launch::dequantize::<R, f32>(
            &client,
            codes.clone(),
            scale_invs.clone(),
            layout,
            Fp8Format::E4M3,
        )
        .expect("a valid launch");
        sync(&client);
    });
    let gbs = |bytes: f64, s: &Summary| bytes / s.median / 1e9;
    for (name, copy, s) in [
        ("FP8 E4M3 quantize (1x128 scales)", copy_q, quantize),
        ("FP8 E4M3 dequantize (1x128 scales)", copy_d, dequantize),
    ] {
        let copy_bw = gbs(8.0 * f64::from(n), &copy);
        let bw = gbs(5.0 * f64::from(n), &s);
        out.push(Row {
            what: format!(
                "{name}, 2^{} values: bandwidth vs a device copy",
                n.trailing_zeros()
            ),
            backend: backend.into(),
            baseline: format!("copy {copy_bw:.2} GB/s, {} ms", copy.ms()),
            measured: format!("{bw:.2} GB/s, {} ms", s.ms()),
            ratio: bw / copy_bw,
            goal: crate::Goal::AtLeast(0.85),
            note: if backend.contains("lavapipe") {
                "the goal is for GPUs; on lavapipe both sides are CPU code".into()
            } else {
                String::new()
            },
        });
    }

    // Accumulation: chunk 64 in f16 against the naive f16 running sum, 2^20 values.
    let n: u32 = if quick { 1 << 12 } else { 1 << 20 };
    let values: Vec<f32> = (0..n).map(|i| (i % 997) as f32 / 997.0).collect();
    let input = client.create_from_slice(f32::as_bytes(&values));
    let (naive, chunked) = time_pair(
        1,
        runs,
        || {
            let _ = accum::launch::row_sums::<R, f32>(
                &client,
                input.clone(),
                None,
                1,
                n,
                AccumConfig::naive(Accumulator::F16),
            )
            .expect("a valid launch");
            sync(&client);
        },
        || {
            let _ = accum::launch::row_sums::<R, f32>(
                &client,
                input.clone(),
                None,
                1,
                n,
                AccumConfig::chunked(Accumulator::F16, 64),
            )
            .expect("a valid launch");
            sync(&client);
        },
    );
    out.push(Row {
        what: format!(
            "Chunked sum (f16, chunk 64) vs naive f16, 2^{} values",
            n.trailing_zeros()
        ),
        backend: backend.into(),
        baseline: format!("naive {} ms", naive.ms()),
        measured: format!("chunk 64 {} ms", chunked.ms()),
        ratio: chunked.median / naive.median,
        goal: crate::Goal::AtMost(1.2),
        note: "the naive sum is one sequential running sum; chunks run in parallel".into(),
    });

    // Block-scaled FP8 matmul: promoted every 128 products against naive f16 accumulation.
    let (m, k, nn) = if quick {
        (16u32, 256u32, 16u32)
    } else {
        (128, 1024, 128)
    };
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let b: Vec<f32> = (0..k * nn)
        .map(|i| ((i * 13 % 89) as f32 - 44.0) / 400.0)
        .collect();
    let quantize = |v: &[f32], layout: BlockLayout| {
        let h = client.create_from_slice(f32::as_bytes(v));
        let amax = launch::amax::<R, f32>(&client, h.clone(), layout).expect("a valid launch");
        let (s, si) =
            launch::scales::<R>(&client, amax, layout.num_blocks(), Fp8Format::E4M3, rule)
                .expect("a valid launch");
        (
            launch::quantize::<R, f32>(&client, h, s, layout, cast).expect("a valid launch"),
            si,
        )
    };
    let (ca, sa) = quantize(&a, BlockLayout::blocks(m * k, k, 1, 128));
    let (cb, sb) = quantize(&b, BlockLayout::blocks(k * nn, nn, 128, 128));
    let config = |promote, accumulator| Fp8MatmulConfig {
        block: 128,
        window: 128,
        accumulator,
        promote,
    };
    let run = |c: Fp8MatmulConfig| {
        let operand = |codes: &Handle, scale_invs: &Handle| accum::launch::Fp8Operand {
            codes: codes.clone(),
            scale_invs: scale_invs.clone(),
        };
        let _ = accum::launch::fp8_matmul::<R>(
            &client,
            operand(&ca, &sa),
            operand(&cb, &sb),
            (m, k, nn),
            Fp8Format::E4M3,
            c,
        )
        .expect("a valid launch");
        sync(&client);
    };
    let (naive, promoted) = time_pair(
        1,
        runs,
        || run(config(false, Accumulator::F16)),
        || run(config(true, Accumulator::E8M13)),
    );
    out.push(Row {
        what: format!(
            "FP8 matmul {m}x{k}x{nn}: promoted every 128 (E8M13) vs naive f16 accumulation"
        ),
        backend: backend.into(),
        baseline: format!("naive {} ms", naive.ms()),
        measured: format!("promoted {} ms", promoted.ms()),
        ratio: promoted.median / naive.median,
        goal: crate::Goal::AtMost(1.2),
        note: "emulated accumulators: scalar kernels, one output per unit".into(),
    });
    out
}

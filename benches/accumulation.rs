//! Blocked accumulation on wgpu: the chunked sum against the naive one, and the chunked and
//! FP8 block-scaled matmuls. `cargo bench --bench accumulation`.

use burn_amp_kernels::accum::{self, AccumConfig, Accumulator, Fp8MatmulConfig};
use burn_amp_kernels::fp8::launch::{self as fp8, BlockLayout};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
use criterion::{Criterion, criterion_group, criterion_main};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

type R = WgpuRuntime;

fn sync(client: &ComputeClient<R>) {
    cubecl::future::block_on(client.sync()).expect("the device finishes");
}

fn sums(c: &mut Criterion) {
    let client = R::client(&WgpuDevice::default());
    let n = 1u32 << 20;
    let values: Vec<f32> = (0..n).map(|i| (i % 997) as f32 / 997.0).collect();
    let input = client.create_from_slice(f32::as_bytes(&values));
    let mut group = c.benchmark_group("sum of 2^20 values (wgpu)");
    group.sample_size(10);
    for (name, config) in [
        ("naive f16", AccumConfig::naive(Accumulator::F16)),
        ("chunk 64 f16", AccumConfig::chunked(Accumulator::F16, 64)),
        (
            "chunk 64 f16, stochastic",
            AccumConfig::chunked(Accumulator::F16, 64).with_stochastic(1),
        ),
        ("naive f32", AccumConfig::naive(Accumulator::F32)),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let out =
                    accum::launch::row_sums::<R, f32>(&client, input.clone(), None, 1, n, config)
                        .expect("a valid launch");
                sync(&client);
                out
            })
        });
    }
    group.finish();
}

fn matmuls(c: &mut Criterion) {
    let client = R::client(&WgpuDevice::default());
    let (m, k, n) = (128u32, 1024u32, 128u32);
    let a: Vec<f32> = (0..m * k)
        .map(|i| ((i * 7 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let b: Vec<f32> = (0..k * n)
        .map(|i| ((i * 13 % 89) as f32 - 44.0) / 400.0)
        .collect();
    let (ha, hb) = (
        client.create_from_slice(f32::as_bytes(&a)),
        client.create_from_slice(f32::as_bytes(&b)),
    );
    let mut group = c.benchmark_group("matmul 128x1024x128 (wgpu)");
    group.sample_size(10);
    for (name, config) in [
        (
            "chunked f16, chunk 64",
            AccumConfig::chunked(Accumulator::F16, 64),
        ),
        ("naive f16", AccumConfig::naive(Accumulator::F16)),
    ] {
        group.bench_function(name, |bch| {
            bch.iter(|| {
                let out = accum::launch::matmul::<R, f32>(
                    &client,
                    ha.clone(),
                    hb.clone(),
                    (m, k, n),
                    config,
                )
                .expect("a valid launch");
                sync(&client);
                out
            })
        });
    }
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let quantize = |h: cubecl::server::Handle, layout: BlockLayout| {
        let amax = fp8::amax::<R, f32>(&client, h.clone(), layout).expect("a valid launch");
        let (s, si) = fp8::scales::<R>(
            &client,
            amax,
            layout.num_blocks(),
            Fp8Format::E4M3,
            ScaleRule::Float { margin: 0 },
        )
        .expect("a valid launch");
        (
            fp8::quantize::<R, f32>(&client, h, s, layout, cast).expect("a valid launch"),
            si,
        )
    };
    let (ca, sa) = quantize(ha, BlockLayout::blocks(m * k, k, 1, 128));
    let (cb, sb) = quantize(hb, BlockLayout::blocks(k * n, n, 128, 128));
    for (name, promote, accumulator) in [
        (
            "fp8 block-scaled, promoted every 128",
            true,
            Accumulator::E8M13,
        ),
        ("fp8, naive f16 accumulation", false, Accumulator::F16),
    ] {
        let config = Fp8MatmulConfig {
            block: 128,
            window: 128,
            accumulator,
            promote,
        };
        group.bench_function(name, |bch| {
            bch.iter(|| {
                let a = accum::launch::Fp8Operand {
                    codes: ca.clone(),
                    scale_invs: sa.clone(),
                };
                let b = accum::launch::Fp8Operand {
                    codes: cb.clone(),
                    scale_invs: sb.clone(),
                };
                let out = accum::launch::fp8_matmul::<R>(
                    &client,
                    a,
                    b,
                    (m, k, n),
                    Fp8Format::E4M3,
                    config,
                )
                .expect("a valid launch");
                sync(&client);
                out
            })
        });
    }
    group.finish();
}

criterion_group!(benches, sums, matmuls);
criterion_main!(benches);

//! FP8 quantize / dequantize throughput against a plain device copy of the same bytes.
//!
//! `cargo bench --bench fp8` (wgpu: the machine's GPU, or lavapipe on a CPU). Each kernel's
//! effective bandwidth counts the bytes it must move: quantize reads 4 bytes (f32) and
//! writes 1 per value; dequantize reads 1 and writes 4; the copy reads and writes 4.
//! Goal on a GPU: FP8 kernels at >= 85% of the copy's bandwidth.

use burn_amp_kernels::fp8::launch::{self, BlockLayout};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

type R = WgpuRuntime;

fn sync(client: &ComputeClient<R>) {
    cubecl::future::block_on(client.sync()).expect("the device finishes");
}

fn bench(c: &mut Criterion) {
    let client = R::client(&WgpuDevice::default());
    let n: u32 = 1 << 24;
    let values: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) * 0.37).collect();
    let input = client.create_from_slice(f32::as_bytes(&values));
    let layout = BlockLayout::blocks(n, 4096, 1, 128);
    let amax = launch::amax::<R, f32>(&client, input.clone(), layout).expect("a valid launch");
    let (scales, scale_invs) = launch::scales::<R>(
        &client,
        amax,
        layout.num_blocks(),
        Fp8Format::E4M3,
        burn_amp_kernels::fp8::ScaleRule::Float { margin: 0 },
    )
    .expect("a valid launch");
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let codes = launch::quantize::<R, f32>(&client, input.clone(), scales.clone(), layout, cast)
        .expect("a valid launch");
    sync(&client);

    let mut group = c.benchmark_group("fp8 (wgpu, 2^24 values)");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(u64::from(n) * 8));
    group.bench_function("copy f32 (8 B/value)", |b| {
        b.iter(|| {
            let out = launch::copy::<R>(&client, input.clone(), n).expect("a valid launch");
            sync(&client);
            out
        })
    });
    group.throughput(Throughput::Bytes(u64::from(n) * 5));
    group.bench_function("quantize e4m3 1x128 (5 B/value)", |b| {
        b.iter(|| {
            let out =
                launch::quantize::<R, f32>(&client, input.clone(), scales.clone(), layout, cast)
                    .expect("a valid launch");
            sync(&client);
            out
        })
    });
    group.bench_function("dequantize e4m3 1x128 (5 B/value)", |b| {
        b.iter(|| {
            let out = launch::dequantize::<R, f32>(
                &client,
                codes.clone(),
                scale_invs.clone(),
                layout,
                Fp8Format::E4M3,
            )
            .expect("a valid launch");
            sync(&client);
            out
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

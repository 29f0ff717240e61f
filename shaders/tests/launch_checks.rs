//! Every public CubeCL launch entry refuses, with its typed error and before launching,
//! buffers too short or misaligned for the layout it is given, layouts that do not hold
//! together and sizes past 32-bit indexing (on wgpu; lavapipe in CI). Each case is the
//! valid launch with one thing wrong, so the valid launch is tried too.

use burn_amp_kernels::LaunchError;
use burn_amp_kernels::accum::launch::{self as accum, Fp8Operand};
use burn_amp_kernels::accum::{AccumConfig, Accumulator, Fp8MatmulConfig};
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_amp_kernels::fp8::launch::{self as fp8, BlockLayout};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
use burn_amp_kernels::half16::{Half16, launch as half16};
use burn_amp_kernels::optim::{AdamwBuffers, AdamwOutputs, adamw, adamw_into};
use cubecl::prelude::*;
use cubecl::server::Handle;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use std::ops::Deref;

type R = WgpuRuntime;

/// The wgpu client of a test, which waits for the device when the test ends: the valid
/// launches run, and a process that exits while lavapipe still runs them can crash on the
/// way out (after every test passed).
struct Client(ComputeClient<R>);

impl Deref for Client {
    type Target = ComputeClient<R>;

    fn deref(&self) -> &ComputeClient<R> {
        &self.0
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A failed wait cannot fail the test from here; the exit is what it protects.
        let _ = cubecl::future::block_on(self.0.sync());
    }
}

fn client() -> Client {
    Client(R::client(&WgpuDevice::default()))
}

/// A buffer of `n` f32 (ones).
fn f32s(client: &ComputeClient<R>, n: usize) -> Handle {
    client.create_from_slice(f32::as_bytes(&vec![1.0f32; n]))
}

/// A buffer of `n` u32 (zeros).
fn u32s(client: &ComputeClient<R>, n: usize) -> Handle {
    client.create_from_slice(u32::as_bytes(&vec![0u32; n]))
}

/// `TooShort` naming `buffer`.
fn too_short<T>(result: Result<T, LaunchError>, buffer: &str) {
    match result {
        Err(LaunchError::TooShort {
            buffer: b,
            needed,
            got,
        }) => {
            assert_eq!(b, buffer);
            assert!(got < needed, "{got} < {needed}");
        }
        Err(other) => panic!("expected {buffer} refused as too short, got {other:?}"),
        Ok(_) => panic!("expected {buffer} refused as too short, but it launched"),
    }
}

const LEN: u32 = 256;

/// 256 values as 16 rows of 16, in blocks of 4 x 8: 8 blocks.
fn layout() -> BlockLayout {
    BlockLayout::blocks(LEN, 16, 4, 8)
}

#[test]
fn fp8_entries_refuse_short_buffers() {
    let c = client();
    let (l, n, blocks) = (layout(), LEN as usize, layout().num_blocks() as usize);
    assert_eq!(blocks, 8);
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let words = fp8::packed_len(LEN) as usize;

    // quantize: input, scales, output.
    fp8::quantize::<R, f32>(&c, f32s(&c, n), f32s(&c, blocks), l, cast).unwrap();
    too_short(
        fp8::quantize::<R, f32>(&c, f32s(&c, n - 1), f32s(&c, blocks), l, cast),
        "input",
    );
    too_short(
        fp8::quantize::<R, f32>(&c, f32s(&c, n), f32s(&c, blocks - 1), l, cast),
        "scales",
    );
    let q = |out| fp8::quantize_into::<R, f32>(&c, f32s(&c, n), f32s(&c, blocks), out, l, cast);
    q(u32s(&c, words)).unwrap();
    too_short(q(u32s(&c, words - 1)), "output");

    // dequantize: codes, scale inverses, output.
    let e4m3 = Fp8Format::E4M3;
    fp8::dequantize::<R, f32>(&c, u32s(&c, words), f32s(&c, blocks), l, e4m3).unwrap();
    too_short(
        fp8::dequantize::<R, f32>(&c, u32s(&c, words - 1), f32s(&c, blocks), l, e4m3),
        "codes",
    );
    too_short(
        fp8::dequantize::<R, f32>(&c, u32s(&c, words), f32s(&c, blocks - 1), l, e4m3),
        "scale_invs",
    );
    let d =
        |out| fp8::dequantize_into::<R, f32>(&c, u32s(&c, words), f32s(&c, blocks), out, l, e4m3);
    d(f32s(&c, n)).unwrap();
    too_short(d(f32s(&c, n - 1)), "output");
    // f16 values are two bytes: half the f32 buffer is enough, one value less is not.
    let d16 = |out| {
        fp8::dequantize_into::<R, half::f16>(&c, u32s(&c, words), f32s(&c, blocks), out, l, e4m3)
    };
    d16(f32s(&c, n / 2)).unwrap();
    too_short(d16(c.create_from_slice(&vec![0u8; 2 * n - 2])), "output");

    // amax: input, output.
    fp8::amax::<R, f32>(&c, f32s(&c, n), l).unwrap();
    too_short(fp8::amax::<R, f32>(&c, f32s(&c, n - 1), l), "input");
    too_short(
        fp8::amax_into::<R, f32>(&c, f32s(&c, n), u32s(&c, blocks - 1), l),
        "output",
    );

    // scales: amax, scales, scale inverses.
    let rule = ScaleRule::Float { margin: 0 };
    let b = blocks as u32;
    fp8::scales::<R>(&c, u32s(&c, blocks), b, e4m3, rule).unwrap();
    too_short(
        fp8::scales::<R>(&c, u32s(&c, blocks - 1), b, e4m3, rule),
        "amax",
    );
    let s = |out| fp8::scales_into::<R>(&c, u32s(&c, blocks), out, b, e4m3, rule);
    too_short(s((f32s(&c, blocks - 1), f32s(&c, blocks))), "scales");
    too_short(s((f32s(&c, blocks), f32s(&c, blocks - 1))), "scale_invs");

    // copy: input, output.
    fp8::copy::<R>(&c, u32s(&c, 8), 8).unwrap();
    too_short(fp8::copy::<R>(&c, u32s(&c, 7), 8), "input");
    too_short(
        fp8::copy_into::<R>(&c, u32s(&c, 8), u32s(&c, 7), 8),
        "output",
    );
}

#[test]
fn fp8_entries_refuse_layouts_that_do_not_hold_together() {
    let c = client();
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let bad = [
        BlockLayout {
            len: 10,
            cols: 4,
            block_rows: 2,
            block_cols: 2,
        }, // 2.5 rows
        BlockLayout {
            len: 8,
            cols: 0,
            block_rows: 1,
            block_cols: 1,
        },
        BlockLayout {
            len: 8,
            cols: 4,
            block_rows: 0,
            block_cols: 1,
        },
        BlockLayout {
            len: 8,
            cols: 4,
            block_rows: 1,
            block_cols: 0,
        },
    ];
    for l in bad {
        let err = fp8::quantize::<R, f32>(&c, f32s(&c, 64), f32s(&c, 64), l, cast).unwrap_err();
        assert!(matches!(err, LaunchError::Layout(_)), "{l:?}: {err:?}");
        let err = fp8::amax::<R, f32>(&c, f32s(&c, 64), l).unwrap_err();
        assert!(matches!(err, LaunchError::Layout(_)), "{l:?}: {err:?}");
        let err = fp8::dequantize::<R, f32>(&c, u32s(&c, 64), f32s(&c, 64), l, Fp8Format::E5M2)
            .unwrap_err();
        assert!(matches!(err, LaunchError::Layout(_)), "{l:?}: {err:?}");
    }
}

#[test]
fn a_buffer_at_an_offset_off_its_element_boundary_is_refused() {
    let c = client();
    let l = BlockLayout::per_tensor(4);
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let input = f32s(&c, 8).offset_start(2);
    let err = fp8::quantize::<R, f32>(&c, input, f32s(&c, 1), l, cast).unwrap_err();
    assert_eq!(
        err,
        LaunchError::Misaligned {
            buffer: "input",
            offset: 2,
            align: 4
        }
    );
    // An offset on the boundary counts only the bytes after it (256 bytes: an offset every
    // runtime binds).
    let input = f32s(&c, 67).offset_start(256);
    too_short(
        fp8::quantize::<R, f32>(&c, input, f32s(&c, 1), l, cast),
        "input",
    );
    let input = f32s(&c, 68).offset_start(256);
    fp8::quantize::<R, f32>(&c, input, f32s(&c, 1), l, cast).unwrap();
}

#[test]
fn accumulation_entries_refuse_short_buffers() {
    let c = client();
    let config = AccumConfig::chunked(Accumulator::F32, 8);
    let (rows, cols) = (4u32, 32u32);
    let n = (rows * cols) as usize;

    accum::row_sums::<R, f32>(&c, f32s(&c, n), Some(f32s(&c, n)), rows, cols, config).unwrap();
    too_short(
        accum::row_sums::<R, f32>(&c, f32s(&c, n - 1), None, rows, cols, config),
        "input",
    );
    too_short(
        accum::row_sums::<R, f32>(&c, f32s(&c, n), Some(f32s(&c, n - 1)), rows, cols, config),
        "other",
    );
    too_short(
        accum::row_sums_into::<R, f32>(&c, f32s(&c, n), None, f32s(&c, 3), (rows, cols), config),
        "output",
    );

    let (m, k, nn) = (3u32, 5u32, 7u32);
    let dims = (m, k, nn);
    accum::matmul::<R, f32>(&c, f32s(&c, 15), f32s(&c, 35), dims, config).unwrap();
    too_short(
        accum::matmul::<R, f32>(&c, f32s(&c, 14), f32s(&c, 35), dims, config),
        "a",
    );
    too_short(
        accum::matmul::<R, f32>(&c, f32s(&c, 15), f32s(&c, 34), dims, config),
        "b",
    );
    too_short(
        accum::matmul_into::<R, f32>(&c, f32s(&c, 15), f32s(&c, 35), f32s(&c, 20), dims, config),
        "output",
    );
    // Sizes whose product passes 32 bits.
    let err = accum::matmul::<R, f32>(&c, f32s(&c, 1), f32s(&c, 1), (1 << 16, 1 << 16, 1), config)
        .unwrap_err();
    assert!(matches!(err, LaunchError::TooLarge { .. }), "{err:?}");
}

#[test]
fn fp8_matmul_refuses_short_buffers_and_zero_blocks() {
    let c = client();
    let (m, k, n) = (4u32, 256u32, 8u32);
    let config = Fp8MatmulConfig {
        block: 128,
        window: 128,
        accumulator: Accumulator::E8M13,
        promote: true,
    };
    let (kb, nb) = (2usize, 1usize);
    let a_words = (m * k / 4) as usize;
    let b_words = (k * n / 4) as usize;
    let op = |codes, scale_invs| Fp8Operand { codes, scale_invs };
    let run = |a: Fp8Operand, b: Fp8Operand, config| {
        accum::fp8_matmul::<R>(&c, a, b, (m, k, n), Fp8Format::E4M3, config)
    };
    let a = || op(u32s(&c, a_words), f32s(&c, m as usize * kb));
    let b = || op(u32s(&c, b_words), f32s(&c, kb * nb));
    run(a(), b(), config).unwrap();
    too_short(
        run(op(u32s(&c, a_words - 1), f32s(&c, 8)), b(), config),
        "a.codes",
    );
    too_short(
        run(op(u32s(&c, a_words), f32s(&c, 7)), b(), config),
        "a.scale_invs",
    );
    too_short(
        run(a(), op(u32s(&c, b_words - 1), f32s(&c, 2)), config),
        "b.codes",
    );
    too_short(
        run(a(), op(u32s(&c, b_words), f32s(&c, 1)), config),
        "b.scale_invs",
    );
    let into =
        |out| accum::fp8_matmul_into::<R>(&c, a(), b(), out, (m, k, n), Fp8Format::E4M3, config);
    too_short(into(f32s(&c, (m * n) as usize - 1)), "output");
    for bad in [
        Fp8MatmulConfig { block: 0, ..config },
        Fp8MatmulConfig {
            window: 0,
            ..config
        },
    ] {
        let err = run(a(), b(), bad).unwrap_err();
        assert!(matches!(err, LaunchError::Layout(_)), "{err:?}");
    }
}

#[test]
fn half16_entries_refuse_short_buffers() {
    let c = client();
    let len = 9u32; // five words of codes
    for format in [Half16::Shp { bias: 15 }, Half16::Uhp] {
        half16::encode::<R>(&c, f32s(&c, 9), len, format).unwrap();
        too_short(half16::encode::<R>(&c, f32s(&c, 8), len, format), "input");
        too_short(
            half16::encode_into::<R>(&c, f32s(&c, 9), u32s(&c, 4), len, format),
            "output",
        );
        half16::decode::<R>(&c, u32s(&c, 5), len, format).unwrap();
        too_short(half16::decode::<R>(&c, u32s(&c, 4), len, format), "codes");
        too_short(
            half16::decode_into::<R>(&c, u32s(&c, 5), f32s(&c, 8), len, format),
            "output",
        );
    }
}

#[test]
fn adamw_refuses_short_buffers() {
    let c = client();
    let len = 64u32;
    let n = len as usize;
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.01);
    let buffers = |short: &str| {
        let size = |name: &str, full: usize| if name == short { full - 1 } else { full };
        AdamwBuffers {
            param: f32s(&c, size("param", n)),
            grad: f32s(&c, size("grad", n)),
            m: f32s(&c, size("m", n)),
            v: f32s(&c, size("v", n)),
            time: f32s(&c, size("time", 1)),
            len,
        }
    };
    assert!(adamw::<R, f32>(&c, buffers(""), Some(f32s(&c, 1)), &step).is_ok());
    for name in ["param", "grad", "m", "v", "time"] {
        too_short(adamw::<R, f32>(&c, buffers(name), None, &step), name);
    }
    too_short(
        adamw::<R, f32>(&c, buffers(""), Some(f32s(&c, 0)), &step),
        "found",
    );
    // A gradient of f16 values needs half the bytes.
    assert!(adamw::<R, half::f16>(&c, buffers(""), None, &step).is_ok());
    for name in ["param_out", "m_out", "v_out", "time_out"] {
        let mut outputs = AdamwOutputs::new(&c, len);
        let short = f32s(&c, if name == "time_out" { 0 } else { n - 1 });
        match name {
            "param_out" => outputs.param = short,
            "m_out" => outputs.m = short,
            "v_out" => outputs.v = short,
            _ => outputs.time = short,
        }
        too_short(
            adamw_into::<R, f32>(&c, buffers(""), None, &outputs, &step),
            name,
        );
    }
}

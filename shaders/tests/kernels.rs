//! The CubeCL kernels against the CPU reference, byte for byte, on wgpu (lavapipe in CI):
//! all 2^16 f16 bit patterns, a million random f32 bit patterns (NaN payloads, subnormals
//! and infinities included), the named edge cases, every code back, and the scaled paths
//! (amax, scales, quantize, dequantize) for per-tensor, 1x128, 128x128 and MX blocks.

use burn_amp_kernels::fp8::launch::{self, BlockLayout};
use burn_amp_kernels::fp8::reference::{self, decode_scaled, encode_scaled};
use burn_amp_kernels::fp8::scale::{ScaleRule, amax_bits, block_scale};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Fp8Layout, Overflow, Rounding};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

type R = WgpuRuntime;

fn client() -> ComputeClient<R> {
    R::client(&WgpuDevice::default())
}

fn read_u8(client: &ComputeClient<R>, handle: cubecl::server::Handle, len: usize) -> Vec<u8> {
    let bytes = client.read_one_unchecked(handle);
    bytes[..len].to_vec()
}

fn read_u32(client: &ComputeClient<R>, handle: cubecl::server::Handle) -> Vec<u32> {
    u32::from_bytes(&client.read_one_unchecked(handle)).to_vec()
}

fn read_f32(client: &ComputeClient<R>, handle: cubecl::server::Handle, len: usize) -> Vec<f32> {
    f32::from_bytes(&client.read_one_unchecked(handle))[..len].to_vec()
}

fn casts() -> Vec<Fp8Cast> {
    let mut formats = vec![Fp8Format::E4M3, Fp8Format::E5M2];
    for bias in [0, 11, 31, 63] {
        formats.push(Fp8Format::new(Fp8Layout::E4M3, bias).unwrap());
        formats.push(Fp8Format::new(Fp8Layout::E5M2, bias).unwrap());
    }
    formats
        .into_iter()
        .flat_map(|f| {
            [
                Fp8Cast::new(f),
                Fp8Cast::new(f).with_overflow(Overflow::NonSaturating),
                Fp8Cast::new(f).with_overflow(Overflow::SaturateFinite),
                Fp8Cast::new(f).with_rounding(Rounding::Stochastic { seed: 42 }),
            ]
        })
        .collect()
}

/// Quantizes unscaled f32 values on the device.
fn device_codes(client: &ComputeClient<R>, values: &[f32], cast: Fp8Cast) -> Vec<u8> {
    let input = client.create_from_slice(f32::as_bytes(values));
    let layout = BlockLayout::per_tensor(values.len() as u32);
    let scales = client.create_from_slice(f32::as_bytes(&[1.0]));
    let codes =
        launch::quantize::<R, f32>(client, input, scales, layout, cast).expect("a valid launch");
    read_u8(client, codes, values.len())
}

/// Quantizes `values` on the device under every cast of [`casts`] and compares the bytes
/// with the reference (element `i` uses `i` as its stochastic-rounding counter).
#[track_caller]
fn assert_every_cast_matches_the_reference(client: &ComputeClient<R>, values: &[f32]) {
    for cast in casts() {
        let want: Vec<u8> = values
            .iter()
            .enumerate()
            .map(|(i, &x)| reference::encode(x, cast, i as u32))
            .collect();
        let got = device_codes(client, values, cast);
        assert_same_bytes(&got, &want, values, &format!("{cast:?}"));
    }
}

#[track_caller]
fn assert_same_bytes(got: &[u8], want: &[u8], inputs: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    let bad: Vec<_> = (0..got.len())
        .filter(|&i| got[i] != want[i])
        .take(5)
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} mismatches, first: {:?}",
        (0..got.len()).filter(|&i| got[i] != want[i]).count(),
        bad.iter()
            .map(|&i| format!(
                "{:#010x} -> {:#04x} (want {:#04x})",
                inputs[i].to_bits(),
                got[i],
                want[i]
            ))
            .collect::<Vec<_>>()
    );
}

#[test]
fn all_f16_bit_patterns_quantize_like_the_reference() {
    let client = client();
    let values: Vec<f32> = (0..=u16::MAX)
        .map(|b| half::f16::from_bits(b).to_f32())
        .collect();
    assert_every_cast_matches_the_reference(&client, &values);
}

#[test]
fn f16_inputs_quantize_like_their_f32_values() {
    let client = client();
    let halves: Vec<half::f16> = (0..=u16::MAX).map(half::f16::from_bits).collect();
    let values: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let input = client.create_from_slice(half::f16::as_bytes(&halves));
    let scales = client.create_from_slice(f32::as_bytes(&[1.0]));
    let layout = BlockLayout::per_tensor(values.len() as u32);
    let codes = launch::quantize::<R, half::f16>(&client, input, scales, layout, cast)
        .expect("a valid launch");
    let got = read_u8(&client, codes, values.len());
    let want: Vec<u8> = values
        .iter()
        .map(|&x| reference::encode(x, cast, 0))
        .collect();
    assert_same_bytes(&got, &want, &values, "f16 input");
}

#[test]
fn a_million_random_f32_quantize_like_the_reference() {
    let client = client();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 32) as u32
    };
    let mut values: Vec<f32> = (0..1_000_000).map(|_| f32::from_bits(next())).collect();
    // Plus uniformly spread magnitudes near FP8's range, where most codes are hit.
    values.extend((0..200_000).map(|_| {
        let e = (next() % 60) as i32 - 30;
        f32::from_bits(next() & 0x807f_ffff | (((e + 127) as u32) << 23))
    }));
    assert_every_cast_matches_the_reference(&client, &values);
}

#[test]
fn the_edge_cases_quantize_like_the_reference() {
    let client = client();
    let mut values = vec![
        0.0,
        -0.0,
        448.0,
        -448.0,
        463.99,
        464.0,
        464.01,
        480.0,
        57344.0,
        61439.99,
        61440.0,
        61440.01,
        65536.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x807f_ffff),
        1.0625,
        1.1875,
        -3.0 * 2f32.powi(-10),
        2f32.powi(-6),
        2f32.powi(-6) - 2f32.powi(-10),
        2f32.powi(-9),
        2f32.powi(-10),
        2f32.powi(-14),
        2f32.powi(-16),
        2f32.powi(-17),
        3.0 * 2f32.powi(-18),
    ];
    for payload in [
        0x7f80_0001u32,
        0x7fc0_0000,
        0x7fff_ffff,
        0xff80_0001,
        0xffc1_2345,
    ] {
        values.push(f32::from_bits(payload));
    }
    assert_every_cast_matches_the_reference(&client, &values);
}

#[test]
fn scales_of_non_finite_and_zero_amaxes_match_the_reference_bit_for_bit() {
    // An infinite or NaN amax: no scale (1) under the float and power-of-two rules, the
    // canonical NaN under E8M0 (an MX block holding an inf or NaN); a zero amax: 1.
    let client = client();
    let amaxes = [
        0x7f80_0000u32,
        0x7f80_0001,
        0x7fc0_0000,
        0x7fff_ffff,
        0,
        0x3f80_0000,
    ];
    for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
        for rule in [
            ScaleRule::Float { margin: 0 },
            ScaleRule::PowerOfTwo { margin: 2 },
            ScaleRule::E8M0,
        ] {
            let amax = client.create_from_slice(u32::as_bytes(&amaxes));
            let (scales, scale_invs) =
                launch::scales::<R>(&client, amax, amaxes.len() as u32, format, rule)
                    .expect("a valid launch");
            let got_s = read_f32(&client, scales, amaxes.len());
            let got_si = read_f32(&client, scale_invs, amaxes.len());
            for (b, &a) in amaxes.iter().enumerate() {
                let want = block_scale(a, format, rule);
                assert_eq!(
                    got_s[b].to_bits(),
                    want.scale.to_bits(),
                    "{format} {rule:?} {a:#x}"
                );
                assert_eq!(
                    got_si[b].to_bits(),
                    want.scale_inv.to_bits(),
                    "{format} {rule:?} {a:#x}"
                );
            }
        }
    }
}

#[test]
fn float_scales_of_random_amaxes_match_ieee_division_bit_for_bit() {
    // The float rule divides (fp8_max / amax, then 1 / scale) in integer arithmetic, since a
    // Vulkan driver may divide 2.5 ulp off; every quotient must round as IEEE division does.
    let client = client();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut amaxes: Vec<u32> = (0..1 << 16)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Positive, finite, non-zero: normals and subnormals of every exponent.
            ((state >> 33) as u32 % 0x7f80_0000).max(1)
        })
        .collect();
    amaxes.extend([
        1,
        0x007f_ffff,
        0x0080_0000,
        0x3f80_0000,
        0x43e0_0000,
        0x7f7f_ffff,
    ]);
    let n = amaxes.len() as u32;
    for format in [
        Fp8Format::E4M3,
        Fp8Format::E5M2,
        Fp8Format::E4M3.with_bias(11).unwrap(),
    ] {
        for rule in [
            ScaleRule::Float { margin: 0 },
            ScaleRule::Float { margin: 3 },
        ] {
            let amax = client.create_from_slice(u32::as_bytes(&amaxes));
            let (scales, scale_invs) =
                launch::scales::<R>(&client, amax, n, format, rule).expect("a valid launch");
            let got_s = read_f32(&client, scales, amaxes.len());
            let got_si = read_f32(&client, scale_invs, amaxes.len());
            for (b, &a) in amaxes.iter().enumerate() {
                let want = block_scale(a, format, rule);
                assert_eq!(
                    (got_s[b].to_bits(), got_si[b].to_bits()),
                    (want.scale.to_bits(), want.scale_inv.to_bits()),
                    "{format} {rule:?} amax {a:#x}"
                );
            }
        }
    }
}

#[test]
fn every_code_dequantizes_like_the_reference() {
    let client = client();
    let codes: Vec<u8> = (0..=255).collect();
    for cast in casts() {
        let format = cast.format;
        let handle = client.create_from_slice(&codes);
        let layout = BlockLayout::per_tensor(256);
        let ones = client.create_from_slice(f32::as_bytes(&[1.0]));
        let out = launch::dequantize::<R, f32>(&client, handle, ones, layout, format)
            .expect("a valid launch");
        let got = read_f32(&client, out, 256);
        for (code, value) in codes.iter().zip(&got) {
            let want = reference::decode(*code, format);
            assert!(
                value.to_bits() == want.to_bits() || (value.is_nan() && want.is_nan()),
                "{format} {code:#04x}: {value} vs {want}"
            );
        }
    }
}

/// A heavy-tailed test tensor: normal-ish values with rare large outliers.
fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut uniform = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    };
    (0..n)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            let normal = (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
            // Student-t-like tails: divide by a small uniform now and then.
            if uniform() < 0.01 {
                normal / (uniform() * 0.05 + 1e-3)
            } else {
                normal
            }
        })
        .collect()
}

#[test]
fn scaled_quantization_matches_the_reference_for_every_recipe() {
    let client = client();
    let (rows, cols) = (300u32, 260u32); // not multiples of the block sizes
    let len = rows * cols;
    let values = heavy_tailed(len as usize, 5);
    let layouts = [
        ("per-tensor", BlockLayout::per_tensor(len)),
        ("1x128", BlockLayout::blocks(len, cols, 1, 128)),
        ("128x128", BlockLayout::blocks(len, cols, 128, 128)),
        ("mx32", BlockLayout::blocks(len, cols, 1, 32)),
    ];
    let rules = [
        ScaleRule::Float { margin: 0 },
        ScaleRule::Float { margin: 1 },
        ScaleRule::PowerOfTwo { margin: 0 },
        ScaleRule::E8M0,
    ];
    for (name, layout) in layouts {
        // amax per block
        let input = client.create_from_slice(f32::as_bytes(&values));
        let amax = launch::amax::<R, f32>(&client, input.clone(), layout).expect("a valid launch");
        let got_amax = read_u32(&client, amax.clone());
        let mut blocks: Vec<Vec<f32>> = vec![Vec::new(); layout.num_blocks() as usize];
        for (i, v) in values.iter().enumerate() {
            blocks[layout.block_of(i as u32) as usize].push(*v);
        }
        let want_amax: Vec<u32> = blocks.iter().map(|b| amax_bits(b)).collect();
        assert_eq!(got_amax[..want_amax.len()], want_amax[..], "{name}: amax");

        for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
            for rule in rules {
                let (scales, scale_invs) =
                    launch::scales::<R>(&client, amax.clone(), layout.num_blocks(), format, rule)
                        .expect("a valid launch");
                let want: Vec<_> = want_amax
                    .iter()
                    .map(|&a| block_scale(a, format, rule))
                    .collect();
                let got_s = read_f32(&client, scales.clone(), want.len());
                let got_si = read_f32(&client, scale_invs.clone(), want.len());
                for (b, w) in want.iter().enumerate() {
                    assert_eq!(
                        got_s[b].to_bits(),
                        w.scale.to_bits(),
                        "{name} {format} {rule:?}: scale of block {b}"
                    );
                    assert_eq!(
                        got_si[b].to_bits(),
                        w.scale_inv.to_bits(),
                        "{name} {format} {rule:?}: scale_inv {b}"
                    );
                }
                let cast = Fp8Cast::new(format).with_rounding(Rounding::Stochastic { seed: 3 });
                for cast in [Fp8Cast::new(format), cast] {
                    let codes = launch::quantize::<R, f32>(
                        &client,
                        input.clone(),
                        scales.clone(),
                        layout,
                        cast,
                    )
                    .expect("a valid launch");
                    let got = read_u8(&client, codes.clone(), len as usize);
                    let want_codes: Vec<u8> = values
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| {
                            encode_scaled(
                                x,
                                want[layout.block_of(i as u32) as usize].scale,
                                cast,
                                i as u32,
                            )
                        })
                        .collect();
                    assert_same_bytes(
                        &got,
                        &want_codes,
                        &values,
                        &format!("{name} {format} {rule:?} {cast:?}"),
                    );

                    let back = launch::dequantize::<R, f32>(
                        &client,
                        codes,
                        scale_invs.clone(),
                        layout,
                        format,
                    )
                    .expect("a valid launch");
                    let got = read_f32(&client, back, len as usize);
                    for (i, (g, c)) in got.iter().zip(&want_codes).enumerate() {
                        let w = decode_scaled(
                            *c,
                            format,
                            want[layout.block_of(i as u32) as usize].scale_inv,
                        );
                        assert!(
                            g.to_bits() == w.to_bits(),
                            "{name} {format} {rule:?}: dequantized {i}: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}

/// A launch over more than 65535 cubes of 256 units (WebGPU's per-axis dispatch limit) is
/// spread over two axes, and every unit of the spread grid lands on the right element.
#[test]
fn launches_past_the_per_axis_dispatch_limit_cover_every_element() {
    let client = client();
    let words: u32 = 65_535 * 256 + 1_000;
    let input: Vec<u32> = (0..words).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let handle = client.create_from_slice(u32::as_bytes(&input));
    let output = read_u32(
        &client,
        launch::copy::<R>(&client, handle, words).expect("a valid launch"),
    );
    assert_eq!(output.len(), input.len());
    let wrong = (0..input.len()).filter(|&i| output[i] != input[i]).count();
    assert_eq!(wrong, 0, "{wrong} of {words} words copied wrong");
}

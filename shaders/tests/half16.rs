//! SHP and UHP: the reference over all 2^16 codes of each format (SHP at four biases) by
//! its rules, round trips from f32 against an independent f64 rounding, and the CubeCL
//! kernels byte for byte against the reference on wgpu (lavapipe in CI).

use burn_amp_kernels::half16::reference::{UHP_INF, decode, encode};
use burn_amp_kernels::half16::{Half16, launch};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

type R = WgpuRuntime;

fn formats() -> Vec<Half16> {
    let mut out: Vec<Half16> = [0, 15, 31, 63].map(|b| Half16::shp(b).unwrap()).to_vec();
    out.push(Half16::Uhp);
    out
}

/// The value a code stands for, from its fields in f64 (independent of `decode`).
fn value_of(code: u16, format: Half16) -> f64 {
    let (negative, magnitude) = match format {
        Half16::Shp { .. } => (code >> 15 == 1, u32::from(code & 0x7fff)),
        Half16::Uhp => (false, u32::from(code)),
    };
    let field = (magnitude >> 10) as i32;
    let mantissa = f64::from(magnitude & 0x3ff);
    let bias = format.bias();
    let v = if field == 0 {
        mantissa / 1024.0 * 2f64.powi(1 - bias)
    } else {
        (1.0 + mantissa / 1024.0) * 2f64.powi(field - bias)
    };
    if negative { -v } else { v }
}

#[test]
fn every_shp_code_is_a_number_that_encodes_back_to_itself() {
    for format in formats()
        .into_iter()
        .filter(|f| matches!(f, Half16::Shp { .. }))
    {
        for code in 0..=u16::MAX {
            let x = decode(code, format);
            assert!(x.is_finite(), "{format:?} {code:#06x} decodes to {x}");
            assert_eq!(
                f64::from(x),
                value_of(code, format),
                "{format:?} {code:#06x}"
            );
            assert_eq!(encode(x, format), code, "{format:?} {code:#06x} ({x:e})");
        }
        // Subnormals are kept: the smallest code is the smallest subnormal.
        assert_eq!(decode(1, format), format.min_subnormal());
        assert_eq!(decode(0x7fff, format), format.max());
        // No inf or NaN: they clamp.
        assert_eq!(encode(f32::INFINITY, format), 0x7fff);
        assert_eq!(encode(f32::NEG_INFINITY, format), 0xffff);
        assert_eq!(encode(f32::NAN, format), 0x7fff);
        assert_eq!(encode(format.max() * 1.01, format), 0x7fff);
    }
}

#[test]
fn every_uhp_code_follows_its_rules() {
    let format = Half16::Uhp;
    let (mut finite, mut flushed) = (0u32, 0u32);
    for code in 0..=u16::MAX {
        let x = decode(code, format);
        let field = code >> 10;
        let mantissa = code & 0x3ff;
        match (field, mantissa) {
            (63, 0) => assert_eq!(x, f32::INFINITY),
            (63, _) => assert!(x.is_nan(), "{code:#06x}"),
            (0, m) if m != 0 => {
                // Subnormal encodings are flushed: they read as zero, and zero encodes as 0.
                assert_eq!(x.to_bits(), 0, "{code:#06x}");
                flushed += 1;
            }
            _ => {
                assert!(x >= 0.0);
                assert_eq!(f64::from(x), value_of(code, format), "{code:#06x}");
                assert_eq!(encode(x, format), code, "{code:#06x} ({x:e})");
                finite += 1;
            }
        }
    }
    assert_eq!((finite, flushed), (62 * 1024 + 1, 1023));
    assert_eq!(encode(-1.0, format), 0);
    assert_eq!(encode(f32::NEG_INFINITY, format), 0);
    assert_eq!(encode(f32::INFINITY, format), UHP_INF);
    assert_eq!(encode(format.max() * 1.01, format), UHP_INF);
    assert_eq!(encode(format.min_normal() * 0.99, format), 0);
    assert_eq!(
        decode(encode(format.min_normal(), format), format),
        format.min_normal()
    );
}

/// Round to nearest even on the format's grid, in f64: the exponent of `|x|` clamped to
/// the subnormal range (SHP) and the quotient by the ulp rounded.
fn oracle(x: f32, format: Half16) -> f32 {
    if x.is_nan() {
        return match format {
            Half16::Shp { .. } => format.max(),
            Half16::Uhp => f32::NAN,
        };
    }
    let a = f64::from(x.abs());
    let negative = x.is_sign_negative();
    if let Half16::Uhp = format
        && (negative || a < f64::from(format.min_normal()))
    {
        return 0.0;
    }
    let rounded = if a == 0.0 {
        0.0
    } else if a.is_infinite() {
        f64::INFINITY
    } else {
        let e = (a.log2().floor() as i32).max(1 - format.bias());
        let ulp = 2f64.powi(e - 10);
        let q = a / ulp;
        let mut r = q.floor();
        let frac = q - r;
        if frac > 0.5 || (frac == 0.5 && r % 2.0 == 1.0) {
            r += 1.0;
        }
        r * ulp
    };
    let max = f64::from(format.max());
    let v = match format {
        Half16::Shp { .. } => rounded.min(max),
        Half16::Uhp if rounded > max => f64::INFINITY,
        Half16::Uhp => rounded,
    } as f32;
    if negative { -v } else { v }
}

fn random_f32s(n: usize) -> Vec<f32> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 32) as u32
    };
    let mut values: Vec<f32> = (0..n).map(|_| f32::from_bits(next())).collect();
    // Plus magnitudes spread over both formats' ranges, where every code is hit.
    values.extend((0..n).map(|_| {
        let e = (next() % 160) as i32 - 100;
        f32::from_bits(next() & 0x807f_ffff | (((e.clamp(-126, 127) + 127) as u32) << 23))
    }));
    values.extend([
        0.0,
        -0.0,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.0 + 2f32.powi(-11),       // a tie: to even (1.0)
        1.0 + 3.0 * 2f32.powi(-11), // a tie: to even (1 + 2^-9)
    ]);
    values
}

#[test]
fn f32_round_trips_match_an_independent_rounding() {
    let values = random_f32s(300_000);
    for format in formats() {
        for &x in &values {
            let got = decode(encode(x, format), format);
            let want = oracle(x, format);
            let same = got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
            assert!(
                same,
                "{format:?}: {x:e} ({:#010x}) -> {got:e}, want {want:e}",
                x.to_bits()
            );
            // In the normal range the error is at most half an ulp: 2^-11 relative.
            let a = x.abs();
            if a >= format.min_normal()
                && a <= format.max()
                && !(matches!(format, Half16::Uhp) && x < 0.0)
            {
                assert!(f64::from((got - x).abs()) <= f64::from(a) * 2f64.powi(-11));
            }
        }
    }
}

fn client() -> ComputeClient<R> {
    R::client(&WgpuDevice::default())
}

#[test]
fn kernels_decode_every_code_and_encode_like_the_reference_on_wgpu() {
    let client = client();
    let codes: Vec<u16> = (0..=u16::MAX).collect();
    let mut values = random_f32s(500_000);
    // Every code's value and its neighbours half an ulp away (the ties).
    for format in formats() {
        for &c in &codes {
            let x = decode(c, format);
            values.push(x);
            values.push(f32::from_bits(x.to_bits().wrapping_add(1 << 12)));
        }
    }
    let len = values.len() as u32;
    for format in formats() {
        // Decode: all 2^16 codes (an odd count too, to cover the half-filled last word).
        for n in [codes.len(), codes.len() - 1] {
            let words: Vec<u32> = codes[..n]
                .chunks(2)
                .map(|p| u32::from(p[0]) | (u32::from(*p.get(1).unwrap_or(&0)) << 16))
                .collect();
            let handle = client.create_from_slice(u32::as_bytes(&words));
            let out =
                launch::decode::<R>(&client, handle, n as u32, format).expect("a valid launch");
            let got = f32::from_bytes(&client.read_one_unchecked(out))[..n].to_vec();
            for (i, g) in got.iter().enumerate() {
                let want = decode(codes[i], format);
                assert!(
                    g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                    "{format:?} decode {:#06x}: {g:e}, want {want:e}",
                    codes[i]
                );
            }
        }
        // Encode: the same codes as the reference, byte for byte.
        let input = client.create_from_slice(f32::as_bytes(&values));
        let out = launch::encode::<R>(&client, input, len, format).expect("a valid launch");
        let bytes = client.read_one_unchecked(out);
        let got: Vec<u16> = bytes
            .chunks(2)
            .take(values.len())
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let bad: Vec<String> = values
            .iter()
            .zip(&got)
            .filter(|(x, g)| encode(**x, format) != **g)
            .take(5)
            .map(|(x, g)| {
                format!(
                    "{:#010x} -> {g:#06x} (want {:#06x})",
                    x.to_bits(),
                    encode(*x, format)
                )
            })
            .collect();
        assert!(bad.is_empty(), "{format:?} encode: {bad:?}");
    }
}

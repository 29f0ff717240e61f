//! FP8 scales stay usable: given scales are checked, computed ones are clamped to
//! `[2^-126, 2^126]` on the host and in the kernels alike, so no finite input comes back NaN.

use burn::backend::{Flex, Wgpu};
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_amp::fp8::{Fp8Backend, Fp8Cast, Fp8Error, Fp8Format, Fp8Recipe, Fp8Tensor, ScaleRule};
use burn_amp_kernels::fp8::scale::{MAX_SCALE, MIN_SCALE, block_scale};

use super::{bytes_on, reference_bytes};

/// `[2, 256]` in 1x128 blocks: four blocks.
fn four_blocks<B: Backend>() -> Tensor<B, 2> {
    let values: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) / 64.0).collect();
    Tensor::from_data(TensorData::new(values, [2, 256]), &Default::default())
}

#[test]
fn given_scales_outside_the_normal_range_are_refused_naming_the_block() {
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let recipe = Fp8Recipe::blocks_1x128();
    let with_scale = |bad: f32| {
        let scales = Tensor::<Flex, 1>::from_floats([1.0, 2.0, bad, 4.0], &Default::default());
        Fp8Tensor::quantize_with_scales(four_blocks::<Flex>(), cast, recipe, scales)
    };
    let subnormal = f32::MIN_POSITIVE / 4.0;
    for bad in [
        0.0,
        -0.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        subnormal,
        2f32.powi(127),
    ] {
        match with_scale(bad) {
            Err(Fp8Error::InvalidScale { block, scale }) => {
                assert_eq!(block, 2, "{bad}");
                assert!(
                    scale.to_bits() == bad.to_bits(),
                    "{bad} reported as {scale}"
                );
            }
            other => panic!("scale {bad} accepted: {:?}", other.map(|t| t.to_bytes())),
        }
    }
    let err = with_scale(0.0).unwrap_err().to_string();
    assert!(err.contains("2^-126") && err.contains("block 2"), "{err}");
    // The ends of the range are fine, and their inverses are finite.
    for ok in [MIN_SCALE, MAX_SCALE] {
        let q = with_scale(ok).unwrap();
        let inv = q.scale_inv().into_data().to_vec::<f32>().unwrap();
        assert!(
            inv.iter().all(|s| s.is_finite() && *s > 0.0),
            "{ok}: {inv:?}"
        );
    }
}

#[test]
fn computed_float_scales_are_clamped_so_that_outputs_stay_finite() {
    // The float rule with margin 50 on amax 1e30: 448 / 1e30 / 2^50 is an f32 subnormal,
    // whose inverse was inf (every output NaN). Now it is clamped to 2^-126.
    let s = block_scale(
        1e30f32.to_bits(),
        Fp8Format::E4M3,
        ScaleRule::Float { margin: 50 },
    );
    assert_eq!((s.scale, s.scale_inv), (MIN_SCALE, MAX_SCALE));
    // A tiny amax would give an infinite scale: clamped to 2^126.
    let s = block_scale(
        1e-37f32.to_bits(),
        Fp8Format::E4M3,
        ScaleRule::Float { margin: 0 },
    );
    assert_eq!((s.scale, s.scale_inv), (MAX_SCALE, MIN_SCALE));

    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let values = [1e30f32, -3e29, 1e20, 0.0, 1.0, -1e30, 5e29, 7.0];
    let tiny = [1e-37f32, -5e-38, 0.0, 2e-38, 1e-37, 3e-38, -1e-37, 0.0];
    for (values, margin) in [(values, 50), (tiny, 0)] {
        let recipe = Fp8Recipe::per_tensor().with_rule(ScaleRule::Float { margin });
        let reference = reference_bytes(&values, 4, cast, recipe);
        assert_eq!(bytes_on::<Flex>(&values, 4, cast, recipe), reference);
        assert_eq!(
            bytes_on::<Wgpu>(&values, 4, cast, recipe),
            reference,
            "kernel"
        );
        for out in [
            dequantized::<Flex>(&values, recipe, cast),
            dequantized::<Wgpu>(&values, recipe, cast),
        ] {
            assert!(
                out.iter().all(|v| v.is_finite()),
                "margin {margin}: {out:?}"
            );
        }
    }
}

fn dequantized<B: Fp8Backend>(values: &[f32], recipe: Fp8Recipe, cast: Fp8Cast) -> Vec<f32> {
    let x = Tensor::<B, 2>::from_data(
        TensorData::new(values.to_vec(), [2, 4]),
        &Default::default(),
    );
    let q = Fp8Tensor::quantize(x, cast, recipe).unwrap();
    q.dequantize().into_data().to_vec::<f32>().unwrap()
}

#[test]
fn an_all_zero_block_quantizes_to_zeros_with_scale_one() {
    let mut values: Vec<f32> = (0..512).map(|i| (i as f32 - 256.0) / 64.0).collect();
    values[128..256].fill(0.0); // block 1
    for cast in [Fp8Cast::new(Fp8Format::E4M3), Fp8Cast::new(Fp8Format::E5M2)] {
        let recipe = Fp8Recipe::blocks_1x128();
        let reference = reference_bytes(&values, 256, cast, recipe);
        assert!(reference[128..256].iter().all(|b| *b == 0), "{cast:?}");
        assert_eq!(bytes_on::<Wgpu>(&values, 256, cast, recipe), reference);
        let x = Tensor::<Wgpu, 2>::from_data(
            TensorData::new(values.clone(), [2, 256]),
            &Default::default(),
        );
        let q = Fp8Tensor::quantize(x, cast, recipe).unwrap();
        assert_eq!(q.scale_inv().into_data().to_vec::<f32>().unwrap()[1], 1.0);
        let out = q.dequantize().into_data().to_vec::<f32>().unwrap();
        assert!(out[128..256].iter().all(|v| *v == 0.0));
    }
}

/// Under MX a block holding an inf or NaN gets the NaN scale: every value of the block is
/// NaN, on the kernels too. lavapipe does not keep IEEE NaN semantics (`x * NaN` came back
/// finite and saturated), so the kernels decide NaN scales on bits, as the reference does.
#[test]
fn an_mx_block_holding_an_inf_or_nan_is_nan_on_every_backend() {
    let mut values: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) / 8.0).collect();
    values[1] = f32::INFINITY; // block 0 (32 values)
    values[40] = f32::NAN; // block 1
    for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
        for overflow in [
            burn_amp::fp8::Overflow::Saturate,
            burn_amp::fp8::Overflow::NonSaturating,
        ] {
            let cast = Fp8Cast::new(format).with_overflow(overflow);
            let recipe = Fp8Recipe::mx();
            let reference = reference_bytes(&values, 64, cast, recipe);
            assert_eq!(
                bytes_on::<Flex>(&values, 64, cast, recipe),
                reference,
                "{cast:?}"
            );
            assert_eq!(
                bytes_on::<Wgpu>(&values, 64, cast, recipe),
                reference,
                "wgpu {cast:?}"
            );
            let x = Tensor::<Wgpu, 2>::from_data(
                TensorData::new(values.clone(), [1, 64]),
                &Default::default(),
            );
            let out = Fp8Tensor::quantize(x, cast, recipe).unwrap().dequantize();
            let out = out.into_data().to_vec::<f32>().unwrap();
            assert!(out.iter().all(|v| v.is_nan()), "{cast:?}: {out:?}");
        }
    }
}

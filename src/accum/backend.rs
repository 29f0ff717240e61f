//! `AccumBackend`: the blocked-accumulation operations a backend provides, on its
//! primitives. The default methods run the CPU reference (a round trip through the host);
//! CubeCL backends override them with the kernels.

use burn_amp_kernels::accum::reference;
use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};
use burn_amp_kernels::fp8::Fp8Format;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{FloatTensor, IntTensor};

use crate::fp8::backend::{float_vec, host_f32, host_u32};

/// A backend that can run blocked accumulation. Implemented for Burn's CubeCL backends
/// (kernels), Flex, NdArray (reference), `Autodiff<B>` and
/// [`MixedPrecision<B>`](crate::MixedPrecision) (by handing the work to `B`); a custom
/// backend gets the reference path with `impl AccumBackend for MyBackend {}`.
pub trait AccumBackend: Backend {
    /// The chunked sum of each row of `tensor` (`[rows, cols]`), or of `tensor * other`;
    /// `[rows]` f32.
    fn blocked_row_sums(
        tensor: FloatTensor<Self>,
        other: Option<FloatTensor<Self>>,
        rows: u32,
        cols: u32,
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let device = Self::float_device(&tensor);
        let x = host_f32::<Self>(tensor);
        let sums = match other {
            None => reference::row_sums(&x, cols as usize, config),
            Some(other) => vec![reference::dot(&x, &host_f32::<Self>(other), config)],
        };
        debug_assert_eq!(sums.len(), rows as usize);
        float_vec::<Self>(sums, &device)
    }

    /// The chunked matrix product (`[m, k] x [k, n]`); `[m * n]` f32.
    fn blocked_matmul(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        (m, k, n): (u32, u32, u32),
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let device = Self::float_device(&a);
        let (a, b) = (host_f32::<Self>(a), host_f32::<Self>(b));
        let out = reference::matmul(&a, &b, m as usize, k as usize, n as usize, config);
        float_vec::<Self>(out, &device)
    }

    /// The block-scaled FP8 matrix product of packed codes; `[m * n]` f32.
    fn fp8_block_matmul(
        a_codes: IntTensor<Self>,
        a_scale_invs: FloatTensor<Self>,
        b_codes: IntTensor<Self>,
        b_scale_invs: FloatTensor<Self>,
        dims: (u32, u32, u32),
        format: Fp8Format,
        config: Fp8MatmulConfig,
    ) -> FloatTensor<Self> {
        let device = Self::float_device(&a_scale_invs);
        let bytes = |codes: IntTensor<Self>, len: u32| -> Vec<u8> {
            host_u32::<Self>(codes)
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .take(len as usize)
                .collect()
        };
        let (m, k, n) = dims;
        let a = bytes(a_codes, m * k);
        let b = bytes(b_codes, k * n);
        let (sa, sb) = (
            host_f32::<Self>(a_scale_invs),
            host_f32::<Self>(b_scale_invs),
        );
        let dims = (m as usize, k as usize, n as usize);
        float_vec::<Self>(
            reference::fp8_matmul(&a, &sa, &b, &sb, dims, format, config),
            &device,
        )
    }
}

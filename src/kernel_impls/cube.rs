//! The kernel traits for Burn's CubeCL backends (wgpu, CUDA, ...): the CubeCL kernels of
//! `burn-amp-kernels`, launched on the tensors' buffers (FP8, blocked accumulation, the
//! fused AdamW step).

use burn_amp_kernels::fp8::launch::{self, BlockLayout};
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_tensor::{DType, FloatDType, Shape};
use cubecl::prelude::{CubeElement, Float};

use burn_amp_kernels::LaunchError;
use burn_amp_kernels::accum::{self, AccumConfig, Fp8MatmulConfig};

use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_amp_kernels::optim::AdamwBuffers;

use crate::accum::AccumBackend;
use crate::cpu::{AdamwIn, AdamwRouted, AdamwState, Routed};
use crate::dtype::with_float;
use crate::fp8::Fp8Backend;
use crate::fp8::backend::composed_fake_quantize;
use crate::optim::kernel_takes;
use crate::registry::{BackendKernels, KernelBackend};

fn output<R: CubeRuntime>(
    like: &CubeTensor<R>,
    handle: cubecl::server::Handle,
    len: usize,
    dtype: DType,
) -> CubeTensor<R> {
    CubeTensor::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        Shape::new([len]),
        handle,
        dtype,
    )
}

/// A checked launch's result. A refused launch (a layout that does not match its tensors)
/// stops here with the kernels' reason, as the portable path's bounds checks do, instead of
/// reading or writing past a buffer on the device.
fn launched<T>(op: &'static str, result: Result<T, LaunchError>) -> T {
    result.unwrap_or_else(|err| panic!("burn-amp: {op}: {err}"))
}

fn quantize_as<R: CubeRuntime, F: Float + CubeElement>(
    tensor: CubeTensor<R>,
    scales: CubeTensor<R>,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> CubeTensor<R> {
    let codes = launched(
        "fp8_quantize",
        launch::quantize::<R, F>(
            &tensor.client,
            tensor.handle.clone(),
            scales.handle.clone(),
            layout,
            cast,
        ),
    );
    output(
        &tensor,
        codes,
        launch::packed_len(layout.len) as usize,
        DType::U32,
    )
}

impl<R, F, I, BT> Fp8Backend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn fp8_amax(tensor: CubeTensor<R>, layout: BlockLayout) -> CubeTensor<R> {
        let tensor = into_contiguous(tensor);
        let handle = with_float!(tensor.dtype, E => {
            launch::amax::<R, E>(&tensor.client, tensor.handle.clone(), layout)
        });
        let handle = launched("fp8_amax", handle);
        // The kernel writes f32 bits as u32: the same buffer, read as f32.
        output(&tensor, handle, layout.num_blocks() as usize, DType::F32)
    }

    fn fp8_scales(
        amax: CubeTensor<R>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (CubeTensor<R>, CubeTensor<R>) {
        let amax = into_contiguous(amax);
        let blocks = amax.meta.shape().num_elements() as u32;
        let (s, si) = launched(
            "fp8_scales",
            launch::scales::<R>(&amax.client, amax.handle.clone(), blocks, format, rule),
        );
        (
            output(&amax, s, blocks as usize, DType::F32),
            output(&amax, si, blocks as usize, DType::F32),
        )
    }

    fn fp8_quantize(
        tensor: CubeTensor<R>,
        scales: CubeTensor<R>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> CubeTensor<R> {
        let tensor = into_contiguous(tensor);
        let scales = into_contiguous(scales);
        with_float!(tensor.dtype, E => quantize_as::<R, E>(tensor, scales, layout, cast))
    }

    fn fp8_dequantize(
        codes: CubeTensor<R>,
        scale_invs: CubeTensor<R>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> CubeTensor<R> {
        let codes = into_contiguous(codes);
        let scale_invs = into_contiguous(scale_invs);
        let dtype = DType::from(dtype);
        let handle = with_float!(dtype, E => launch::dequantize::<R, E>(
            &codes.client,
            codes.handle.clone(),
            scale_invs.handle.clone(),
            layout,
            format,
        ));
        output(
            &codes,
            launched("fp8_dequantize", handle),
            layout.len as usize,
            dtype,
        )
    }

    fn fp8_fake_quantize(
        tensor: CubeTensor<R>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> CubeTensor<R> {
        composed_fake_quantize::<Self>(tensor, layout, cast, rule)
    }
}

impl<R, F, I, BT> AccumBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn blocked_row_sums(
        tensor: CubeTensor<R>,
        other: Option<CubeTensor<R>>,
        rows: u32,
        cols: u32,
        config: AccumConfig,
    ) -> CubeTensor<R> {
        let tensor = into_contiguous(tensor);
        let other = other.map(|o| into_contiguous(o).handle.clone());
        let handle = with_float!(tensor.dtype, E => accum::launch::row_sums::<R, E>(
            &tensor.client,
            tensor.handle.clone(),
            other,
            rows,
            cols,
            config,
        ));
        let handle = launched("blocked_row_sums", handle);
        output(&tensor, handle, rows as usize, DType::F32)
    }

    fn blocked_matmul(
        a: CubeTensor<R>,
        b: CubeTensor<R>,
        dims: (u32, u32, u32),
        config: AccumConfig,
    ) -> CubeTensor<R> {
        let (a, b) = (into_contiguous(a), into_contiguous(b));
        let handle = with_float!(a.dtype, E => accum::launch::matmul::<R, E>(
            &a.client,
            a.handle.clone(),
            b.handle.clone(),
            dims,
            config,
        ));
        let handle = launched("blocked_matmul", handle);
        output(&a, handle, (dims.0 * dims.2) as usize, DType::F32)
    }

    fn fp8_block_matmul(
        a_codes: CubeTensor<R>,
        a_scale_invs: CubeTensor<R>,
        b_codes: CubeTensor<R>,
        b_scale_invs: CubeTensor<R>,
        dims: (u32, u32, u32),
        format: Fp8Format,
        config: Fp8MatmulConfig,
    ) -> CubeTensor<R> {
        let [ac, asi, bc, bsi] =
            [a_codes, a_scale_invs, b_codes, b_scale_invs].map(into_contiguous);
        let operand =
            |codes: &CubeTensor<R>, scale_invs: &CubeTensor<R>| accum::launch::Fp8Operand {
                codes: codes.handle.clone(),
                scale_invs: scale_invs.handle.clone(),
            };
        let handle = accum::launch::fp8_matmul::<R>(
            &ac.client,
            operand(&ac, &asi),
            operand(&bc, &bsi),
            dims,
            format,
            config,
        );
        let handle = launched("fp8_block_matmul", handle);
        output(&asi, handle, (dims.0 * dims.2) as usize, DType::F32)
    }
}

impl<R, F, I, BT> KernelBackend for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn kernels(_: burn_amp_kernels::cpu::Isa) -> BackendKernels<Self> {
        BackendKernels {
            adamw: Some(fused_adamw::<R, F, I, BT>),
            ..Default::default()
        }
    }
}

/// The fused AdamW step on the CubeCL kernel (see `crate::cpu::AdamwFn`).
fn fused_adamw<R, F, I, BT>(
    _: burn_amp_kernels::cpu::Isa,
    operands: AdamwIn<CubeBackend<R, F, I, BT>>,
    step: &AdamwStep,
    found: Option<&CubeTensor<R>>,
) -> AdamwRouted<CubeBackend<R, F, I, BT>>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    if !kernel_takes::<CubeBackend<R, F, I, BT>>(&operands, found) {
        return Routed::Declined(operands);
    }
    let (param, grad, state) = operands;
    let shape = param.meta.shape().clone();
    let len = shape.num_elements() as u32; // at most u32::MAX: checked by kernel_takes
    let [param, grad, m, v, time] =
        [param, grad, state.m, state.v, state.time].map(into_contiguous);
    let found = found.map(|f| into_contiguous(f.clone()).handle);
    let buffers = AdamwBuffers {
        param: param.handle.clone(),
        grad: grad.handle.clone(),
        m: m.handle.clone(),
        v: v.handle.clone(),
        time: time.handle.clone(),
        len,
    };
    let out = with_float!(grad.dtype, G => burn_amp_kernels::optim::adamw::<R, G>(
        &param.client,
        buffers,
        found,
        step,
    ));
    let out = launched("adamw", out);
    let tensor = |handle, shape: Shape| {
        CubeTensor::new_contiguous(
            param.client.clone(),
            param.device.clone(),
            shape,
            handle,
            DType::F32,
        )
    };
    let state = AdamwState {
        m: tensor(out.m, shape.clone()),
        v: tensor(out.v, shape.clone()),
        time: tensor(out.time, Shape::new([1])),
    };
    Routed::Ran((tensor(out.param, shape), state))
}

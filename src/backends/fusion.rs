//! The kernel traits for fused backends (`Fusion<B>`, what Burn's `Wgpu` and `Cuda` are with
//! their default features): each operation is registered in the fusion stream as a custom
//! operation that runs `B`'s implementation (the CubeCL kernels) on the resolved tensors,
//! in stream order.

use core::marker::PhantomData;

use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};
use burn_tensor::ops::{FloatTensor, IntTensor};
use burn_tensor::{DType, FloatDType, Shape};

use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};

use burn_amp_kernels::cpu::optim::AdamwStep;

use crate::accum::AccumBackend;
use crate::cpu::{AdamwIn, AdamwOut, AdamwState, Routed};
use crate::fp8::Fp8Backend;
use crate::fp8::backend::composed_fake_quantize;
use crate::optim::{AdamwKernel, kernel_takes};

type Handles<B> =
    HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;

/// Which operation a custom fused op runs, with its parameters.
#[derive(Clone, Debug)]
enum Fp8Op {
    Amax(BlockLayout),
    Scales(Fp8Format, ScaleRule),
    Quantize(BlockLayout, Fp8Cast),
    Dequantize(BlockLayout, Fp8Format, FloatDType),
    RowSums(u32, u32, AccumConfig),
    Dot(u32, AccumConfig),
    Matmul((u32, u32, u32), AccumConfig),
    Fp8Matmul((u32, u32, u32), Fp8Format, Fp8MatmulConfig),
}

#[derive(Clone, Debug)]
struct Fp8Fused<B> {
    desc: CustomOpIr,
    op: Fp8Op,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + Fp8Backend + AccumBackend> Operation<B::FusionRuntime> for Fp8Fused<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        match &self.op {
            Fp8Op::Amax(layout) => {
                let ([input], [out]) = self.desc.as_fixed();
                let input = handles.get_float_tensor::<B>(input);
                let amax = B::fp8_amax(input, *layout);
                handles.register_float_tensor::<B>(&out.id, amax);
            }
            Fp8Op::Scales(format, rule) => {
                let ([amax], [scales, scale_invs]) = self.desc.as_fixed();
                let amax = handles.get_float_tensor::<B>(amax);
                let (s, si) = B::fp8_scales(amax, *format, *rule);
                handles.register_float_tensor::<B>(&scales.id, s);
                handles.register_float_tensor::<B>(&scale_invs.id, si);
            }
            Fp8Op::Quantize(layout, cast) => {
                let ([input, scales], [codes]) = self.desc.as_fixed();
                let input = handles.get_float_tensor::<B>(input);
                let scales = handles.get_float_tensor::<B>(scales);
                let out = B::fp8_quantize(input, scales, *layout, *cast);
                handles.register_int_tensor::<B>(&codes.id, out);
            }
            Fp8Op::Dequantize(layout, format, dtype) => {
                let ([codes, scale_invs], [out]) = self.desc.as_fixed();
                let codes = handles.get_int_tensor::<B>(codes);
                let scale_invs = handles.get_float_tensor::<B>(scale_invs);
                let values = B::fp8_dequantize(codes, scale_invs, *layout, *format, *dtype);
                handles.register_float_tensor::<B>(&out.id, values);
            }
            Fp8Op::RowSums(rows, cols, config) => {
                let ([input], [out]) = self.desc.as_fixed();
                let input = handles.get_float_tensor::<B>(input);
                let sums = B::blocked_row_sums(input, None, *rows, *cols, *config);
                handles.register_float_tensor::<B>(&out.id, sums);
            }
            Fp8Op::Dot(cols, config) => {
                let ([x, y], [out]) = self.desc.as_fixed();
                let x = handles.get_float_tensor::<B>(x);
                let y = handles.get_float_tensor::<B>(y);
                let sums = B::blocked_row_sums(x, Some(y), 1, *cols, *config);
                handles.register_float_tensor::<B>(&out.id, sums);
            }
            Fp8Op::Matmul(dims, config) => {
                let ([a, b], [out]) = self.desc.as_fixed();
                let a = handles.get_float_tensor::<B>(a);
                let b = handles.get_float_tensor::<B>(b);
                handles
                    .register_float_tensor::<B>(&out.id, B::blocked_matmul(a, b, *dims, *config));
            }
            Fp8Op::Fp8Matmul(dims, format, config) => {
                let ([ac, asi, bc, bsi], [out]) = self.desc.as_fixed();
                let ac = handles.get_int_tensor::<B>(ac);
                let asi = handles.get_float_tensor::<B>(asi);
                let bc = handles.get_int_tensor::<B>(bc);
                let bsi = handles.get_float_tensor::<B>(bsi);
                let result = B::fp8_block_matmul(ac, asi, bc, bsi, *dims, *format, *config);
                handles.register_float_tensor::<B>(&out.id, result);
            }
        }
    }
}

/// Registers `op` on `inputs` with outputs of the given `(len, dtype)`.
fn register<B: FusionBackend + Fp8Backend + AccumBackend>(
    name: &'static str,
    op: Fp8Op,
    inputs: Vec<burn_fusion::FusionTensor<B::FusionRuntime>>,
    outputs: &[(usize, DType)],
) -> Vec<burn_fusion::FusionTensor<B::FusionRuntime>> {
    let outputs = outputs
        .iter()
        .map(|(len, dtype)| (Shape::new([*len]), *dtype));
    register_custom::<B, _>(name, inputs, outputs, |desc| Fp8Fused::<B> {
        desc,
        op,
        _backend: PhantomData,
    })
}

/// Registers the custom operation `make` builds from its description, on `inputs`, with
/// outputs of the given shapes and dtypes, in the inputs' streams.
fn register_custom<B: FusionBackend, O: Operation<B::FusionRuntime> + 'static>(
    name: &'static str,
    inputs: Vec<burn_fusion::FusionTensor<B::FusionRuntime>>,
    outputs: impl IntoIterator<Item = (Shape, DType)>,
    make: impl FnOnce(CustomOpIr) -> O,
) -> Vec<burn_fusion::FusionTensor<B::FusionRuntime>> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    client.register(streams, OperationIr::Custom(desc.clone()), make(desc))
}

impl<B: FusionBackend + Fp8Backend + AccumBackend> Fp8Backend for Fusion<B> {
    fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
        let blocks = layout.num_blocks() as usize;
        register::<B>(
            "fp8_amax",
            Fp8Op::Amax(layout),
            vec![tensor],
            &[(blocks, DType::F32)],
        )
        .output()
    }

    fn fp8_scales(
        amax: FloatTensor<Self>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let blocks = amax.shape.num_elements();
        let [s, si] = register::<B>(
            "fp8_scales",
            Fp8Op::Scales(format, rule),
            vec![amax],
            &[(blocks, DType::F32), (blocks, DType::F32)],
        )
        .outputs();
        (s, si)
    }

    fn fp8_quantize(
        tensor: FloatTensor<Self>,
        scales: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> IntTensor<Self> {
        let words = layout.len.div_ceil(4) as usize;
        register::<B>(
            "fp8_quantize",
            Fp8Op::Quantize(layout, cast),
            vec![tensor, scales],
            &[(words, DType::U32)],
        )
        .output()
    }

    fn fp8_dequantize(
        codes: IntTensor<Self>,
        scale_invs: FloatTensor<Self>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        register::<B>(
            "fp8_dequantize",
            Fp8Op::Dequantize(layout, format, dtype),
            vec![codes, scale_invs],
            &[(layout.len as usize, dtype.into())],
        )
        .output()
    }

    fn fp8_fake_quantize(
        tensor: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        composed_fake_quantize::<Self>(tensor, layout, cast, rule)
    }
}

impl<B: FusionBackend + Fp8Backend + AccumBackend> AccumBackend for Fusion<B> {
    fn blocked_row_sums(
        tensor: FloatTensor<Self>,
        other: Option<FloatTensor<Self>>,
        rows: u32,
        cols: u32,
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let out = [(rows as usize, DType::F32)];
        match other {
            None => register::<B>(
                "blocked_sum",
                Fp8Op::RowSums(rows, cols, config),
                vec![tensor],
                &out,
            ),
            Some(other) => register::<B>(
                "blocked_dot",
                Fp8Op::Dot(cols, config),
                vec![tensor, other],
                &out,
            ),
        }
        .output()
    }

    fn blocked_matmul(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        dims: (u32, u32, u32),
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let out = [((dims.0 * dims.2) as usize, DType::F32)];
        register::<B>(
            "blocked_matmul",
            Fp8Op::Matmul(dims, config),
            vec![a, b],
            &out,
        )
        .output()
    }

    fn fp8_block_matmul(
        a_codes: IntTensor<Self>,
        a_scale_invs: FloatTensor<Self>,
        b_codes: IntTensor<Self>,
        b_scale_invs: FloatTensor<Self>,
        dims: (u32, u32, u32),
        format: Fp8Format,
        config: Fp8MatmulConfig,
    ) -> FloatTensor<Self> {
        let out = [((dims.0 * dims.2) as usize, DType::F32)];
        let inputs = vec![a_codes, a_scale_invs, b_codes, b_scale_invs];
        register::<B>(
            "fp8_matmul",
            Fp8Op::Fp8Matmul(dims, format, config),
            inputs,
            &out,
        )
        .output()
    }
}

/// A fused AdamW step in the fusion stream: runs `B`'s kernel on the resolved tensors.
#[derive(Clone, Debug)]
struct AdamwFused<B> {
    desc: CustomOpIr,
    step: AdamwStep,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + AdamwKernel> Operation<B::FusionRuntime> for AdamwFused<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let inputs: Vec<_> = self
            .desc
            .inputs
            .iter()
            .map(|t| handles.get_float_tensor::<B>(t))
            .collect();
        let mut inputs = inputs.into_iter();
        let mut next = || inputs.next().expect("registered with five or six inputs");
        let (param, grad) = (next(), next());
        let state = AdamwState {
            m: next(),
            v: next(),
            time: next(),
        };
        let found = inputs.next();
        let [p_out, m_out, v_out, t_out] = &self.desc.outputs[..] else {
            unreachable!("registered with four outputs")
        };
        match B::fused_adamw(param, grad, state, &self.step, found.as_ref()) {
            Routed::Ran((param, state)) => {
                handles.register_float_tensor::<B>(&p_out.id, param);
                handles.register_float_tensor::<B>(&m_out.id, state.m);
                handles.register_float_tensor::<B>(&v_out.id, state.v);
                handles.register_float_tensor::<B>(&t_out.id, state.time);
            }
            // The dtypes were checked with the same rule before the op was registered.
            Routed::Declined(_) => unreachable!("the fused AdamW kernel declined checked dtypes"),
        }
    }
}

impl<B: FusionBackend + AdamwKernel> AdamwKernel for Fusion<B> {
    fn fused_adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: AdamwState<FloatTensor<Self>>,
        step: &AdamwStep,
        found: Option<&FloatTensor<Self>>,
    ) -> Routed<AdamwOut<Self>, AdamwIn<Self>> {
        let len = param.shape.num_elements();
        let takes = kernel_takes(
            (param.dtype, len),
            (grad.dtype, grad.shape.num_elements()),
            [state.m.dtype, state.v.dtype, state.time.dtype],
            found.map(|f| f.dtype),
        );
        if !takes || u32::try_from(len).is_err() {
            return Routed::Declined((param, grad, state));
        }
        let shape = param.shape.clone();
        let mut inputs = vec![param, grad, state.m, state.v, state.time];
        inputs.extend(found.cloned());
        let outputs =
            [shape.clone(), shape.clone(), shape, Shape::new([1])].map(|shape| (shape, DType::F32));
        let [param, m, v, time] =
            register_custom::<B, _>("fused_adamw", inputs, outputs, |desc| AdamwFused::<B> {
                desc,
                step: *step,
                _backend: PhantomData,
            })
            .outputs();
        Routed::Ran((param, AdamwState { m, v, time }))
    }
}

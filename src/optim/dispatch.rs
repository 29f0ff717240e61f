//! Which backends run [`FusedAdamW`](super::FusedAdamW)'s step on a kernel of burn-amp's
//! (by `TypeId`, as the decorator's routed ops: an optimizer's inner backend may be any
//! `B`): Flex on the CPU kernel, Burn's wgpu and CUDA backends (plain or fused) on the
//! CubeCL kernel; and the Burn tensor-op version every other backend runs: the same
//! arithmetic, op by op, as Burn's `AdamW`.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Shape, TensorMetadata};

use crate::cpu::{AdamwFn, AdamwIn, AdamwOut, AdamwState, Routed};
use crate::registry::{Capability, Registry, Table};

/// A backend with a fused AdamW kernel on its own tensors (Burn's CubeCL backends, and the
/// fused backends over them): what the table below points at for the concrete types.
pub(crate) trait AdamwKernel: Backend {
    /// One step of one parameter (see [`AdamwFn`]).
    fn fused_adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        state: AdamwState<FloatTensor<Self>>,
        step: &AdamwStep,
        found: Option<&FloatTensor<Self>>,
    ) -> Routed<AdamwOut<Self>, AdamwIn<Self>>;
}

/// Whether a fused AdamW kernel takes these dtypes: f32 parameter, moments, step count and
/// skip count, an f32, f16 or bf16 gradient of the parameter's size.
#[allow(dead_code)]
pub(crate) fn kernel_takes(
    param: (burn_tensor::DType, usize),
    grad: (burn_tensor::DType, usize),
    state: [burn_tensor::DType; 3],
    found: Option<burn_tensor::DType>,
) -> bool {
    use burn_tensor::DType;
    param.0 == DType::F32
        && state.iter().all(|d| *d == DType::F32)
        && found.is_none_or(|d| d == DType::F32)
        && matches!(grad.0, DType::F32 | DType::F16 | DType::BF16)
        && grad.1 == param.1
}

/// The optimizer kernels of one backend type.
struct OptimKernels<B: Backend> {
    adamw: AdamwFn<B>,
}

impl<B: Backend> Clone for OptimKernels<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for OptimKernels<B> {}

/// Why a global: an optimizer's inner backend may be any `B`, and whether it is Flex (or a
/// decorator of Flex) is answered by `TypeId`. Built once, never written after.
/// The capability [`OptimKernels`].
struct Kernels;

impl Capability for Kernels {
    type Of<B: Backend> = OptimKernels<B>;
}

static KERNELS: Registry<Kernels> = Registry::new(|| {
    #[allow(unused_mut)]
    let mut table = Table::<Kernels>::default();
    #[cfg(feature = "flex")]
    {
        use burn::backend::Flex;
        let adamw = crate::cpu::flex_adamw();
        table.insert::<Flex>(OptimKernels { adamw });
        // The decorator's tensors are its inner backend's: the same function.
        table.insert::<crate::MixedPrecision<Flex>>(OptimKernels { adamw });
    }
    #[cfg(feature = "wgpu")]
    {
        type Cube = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u32>;
        cube_kernels::<Cube>(&mut table);
        #[cfg(feature = "fusion")]
        cube_kernels::<burn_fusion::Fusion<Cube>>(&mut table);
    }
    #[cfg(feature = "cuda")]
    {
        type Cube = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
        cube_kernels::<Cube>(&mut table);
        #[cfg(feature = "fusion")]
        cube_kernels::<burn_fusion::Fusion<Cube>>(&mut table);
    }
    table
});

/// `B`'s kernel, for `B` and for the decorator over it (whose tensors are `B`'s).
#[allow(dead_code)]
fn cube_kernels<B: AdamwKernel>(table: &mut Table<Kernels>) {
    let adamw: AdamwFn<B> = B::fused_adamw;
    table.insert::<B>(OptimKernels { adamw });
    table.insert::<crate::MixedPrecision<B>>(OptimKernels { adamw });
}

fn lookup<B: Backend>() -> Option<OptimKernels<B>> {
    KERNELS.get::<B>()
}

fn flat<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 1> {
    let n = t.shape().num_elements();
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(t, Shape::new([n]))))
}

fn shaped<B: Backend>(t: Tensor<B, 1>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(t.into_primitive().tensor(), shape)
}

/// One AdamW step of one parameter (see [`AdamwFn`]).
pub(crate) fn adamw<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    state: AdamwState<FloatTensor<B>>,
    step: &AdamwStep,
    found: Option<&FloatTensor<B>>,
) -> (FloatTensor<B>, AdamwState<FloatTensor<B>>) {
    let (param, grad, state) = match lookup::<B>() {
        Some(k) => match (k.adamw)(param, grad, state, step, found) {
            Routed::Ran(out) => return out,
            Routed::Declined(operands) => operands,
        },
        None => (param, grad, state),
    };
    adamw_tensor_ops::<B>(param, grad, state, step, found)
}

/// The step in Burn tensor ops, in `AdamW`'s order; the bias corrections from the step
/// count on the device, and a skipped step selected away on the device.
fn adamw_tensor_ops<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    state: AdamwState<FloatTensor<B>>,
    step: &AdamwStep,
    found: Option<&FloatTensor<B>>,
) -> (FloatTensor<B>, AdamwState<FloatTensor<B>>) {
    let shape = param.shape();
    let (p, g) = (flat::<B>(param), flat::<B>(grad));
    let (m, v) = (flat::<B>(state.m), flat::<B>(state.v));
    let time = flat::<B>(state.time);
    // 1 where the step runs, 0 where it is skipped.
    let runs = found.map(|f| flat::<B>(f.clone()).lower_equal_elem(0.0).float());
    let t = match &runs {
        Some(runs) => time.clone() + runs.clone(),
        None => time.clone().add_scalar(1.0),
    };
    // `beta` as a one-value tensor in `t`'s dtype (f32): built from `t`, since a tensor
    // created under a `float16` or `bfloat16` policy is created in that dtype (where 0.999
    // rounds to 1 in bf16, and the bias correction to 0).
    let correction = |beta: f32| {
        t.clone()
            .mul_scalar(0.0)
            .add_scalar(beta)
            .powf(t.clone())
            .neg()
            .add_scalar(1.0)
    };
    let (c1, c2) = (correction(step.beta_1), correction(step.beta_2));
    let m1 = m
        .clone()
        .mul_scalar(step.beta_1)
        .add(g.clone().mul_scalar(1.0 - step.beta_1));
    let v1 = v
        .clone()
        .mul_scalar(step.beta_2)
        .add(g.square().mul_scalar(1.0 - step.beta_2));
    let delta = m1
        .clone()
        .div(c1)
        .div(v1.clone().div(c2).sqrt().add_scalar(step.epsilon));
    let decayed = if step.decay == 1.0 {
        p.clone()
    } else {
        p.clone().mul_scalar(step.decay)
    };
    let p1 = decayed - delta.mul_scalar(step.lr);
    let (p1, m1, v1) = match runs {
        Some(runs) => {
            let skip = runs.equal_elem(0.0).expand(p.shape());
            (
                p1.mask_where(skip.clone(), p),
                m1.mask_where(skip.clone(), m),
                v1.mask_where(skip, v),
            )
        }
        None => (p1, m1, v1),
    };
    let n_shape = |t: Tensor<B, 1>| shaped::<B>(t, shape.clone());
    (
        n_shape(p1),
        AdamwState {
            m: n_shape(m1),
            v: n_shape(v1),
            time: shaped::<B>(t, Shape::new([1])),
        },
    )
}

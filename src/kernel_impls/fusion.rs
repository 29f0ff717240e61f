//! The kernel traits for fused backends (`Fusion<B>`, what Burn's `Wgpu` and `Cuda` are with
//! their default features): each operation is registered in the fusion stream as a custom
//! operation that runs `B`'s implementation (the CubeCL kernels) on the resolved tensors,
//! in stream order (`in_stream`). The kernel traits' methods are made from the table of
//! kernel ops (`table.rs`); `FusedAdamW`'s step is registered the same way.

use std::sync::Arc;

use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};
use burn_tensor::backend::Backend;
use burn_tensor::ops::{FloatTensor, IntTensor};
use burn_tensor::{DType, FloatDType, Shape, TensorMetadata};

use super::table::{kernel_ops, param_ty, return_ty};
use crate::accum::AccumBackend;
use crate::cpu::{AdamwFn, AdamwIn, AdamwRouted, AdamwState, Routed};
use crate::fp8::Fp8Backend;
use crate::optim::kernel_takes;
use crate::registry::{BackendKernels, KernelBackend};

type Handles<B> =
    HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;
type Stream<B> = FusionTensor<<B as FusionBackend>::FusionRuntime>;

/// One of `B`'s tensors as a custom op reads or writes it: float, or int (FP8 codes).
enum Operand<B: Backend> {
    Float(FloatTensor<B>),
    Int(IntTensor<B>),
}

impl<B: Backend> Operand<B> {
    fn float(self) -> FloatTensor<B> {
        match self {
            Self::Float(t) => t,
            Self::Int(_) => unreachable!("registered as a float tensor"),
        }
    }

    fn int(self) -> IntTensor<B> {
        match self {
            Self::Int(t) => t,
            Self::Float(_) => unreachable!("registered as an int tensor"),
        }
    }
}

/// What a custom op runs on `B`'s tensors: its inputs in registration order, its outputs.
type Run<B> = dyn Fn(Vec<Operand<B>>) -> Vec<Operand<B>> + Send + Sync;

/// A custom op of the fusion stream that runs `run` on the resolved tensors.
struct InStream<B: FusionBackend> {
    desc: CustomOpIr,
    run: Arc<Run<B>>,
}

impl<B: FusionBackend> core::fmt::Debug for InStream<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("InStream")
            .field("desc", &self.desc)
            .finish()
    }
}

impl<B: FusionBackend> Operation<B::FusionRuntime> for InStream<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let inputs = self
            .desc
            .inputs
            .iter()
            .map(|ir| {
                if ir.dtype.is_float() {
                    Operand::Float(handles.get_float_tensor::<B>(ir))
                } else {
                    Operand::Int(handles.get_int_tensor::<B>(ir))
                }
            })
            .collect();
        let outputs = (self.run)(inputs);
        debug_assert_eq!(outputs.len(), self.desc.outputs.len());
        for (ir, output) in self.desc.outputs.iter().zip(outputs) {
            match output {
                Operand::Float(t) => handles.register_float_tensor::<B>(&ir.id, t),
                Operand::Int(t) => handles.register_int_tensor::<B>(&ir.id, t),
            }
        }
    }
}

/// Registers `run` in the inputs' streams, on `inputs`, with outputs of the given shapes
/// and dtypes (a float dtype: a float tensor; else an int one); returns the outputs.
fn in_stream<B: FusionBackend, const N: usize>(
    name: &'static str,
    inputs: Vec<Stream<B>>,
    outputs: [(Shape, DType); N],
    run: impl Fn(Vec<Operand<B>>) -> [Operand<B>; N] + Send + Sync + 'static,
) -> [Stream<B>; N] {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(inputs.iter());
    let outputs: Vec<TensorIr> = outputs
        .into_iter()
        .map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype))
        .collect();
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let run: Arc<Run<B>> = Arc::new(move |inputs| Vec::from(run(inputs)));
    let op = InStream::<B> {
        desc: desc.clone(),
        run,
    };
    client
        .register(streams, OperationIr::Custom(desc), op)
        .outputs()
}

/// The number of values of a tensor (what the table's output lengths read).
fn len<T: TensorMetadata>(tensor: &T) -> usize {
    tensor.shape().num_elements()
}

/// A flat tensor's shape and dtype.
fn flat(len: usize, dtype: DType) -> (Shape, DType) {
    (Shape::new([len]), dtype)
}

/// One kernel trait for `Fusion<B>`: each method registers `B`'s in the stream, on its
/// tensor parameters, with the table's outputs.
macro_rules! in_stream_ops {
    (() $trait:ident [$($c:tt)*] {
        $($op:ident($($arg:ident: $kind:tt),*) -> $ret:tt [$(($len:expr, $dtype:expr)),*];)*
    }) => {
        impl<B: FusionBackend + Fp8Backend + AccumBackend> $trait for Fusion<B> {
            $(
                // One push per tensor parameter of the table's line.
                #[allow(clippy::vec_init_then_push)]
                fn $op($($arg: param_ty!($kind)),*) -> return_ty!($ret) {
                    let outputs = [$(flat(($len) as usize, DType::from($dtype))),*];
                    let mut inputs = Vec::new();
                    $(stream_arg!($kind, $arg, inputs);)*
                    let results = in_stream::<B, _>(stringify!($op), inputs, outputs, move |inputs| {
                        let mut inputs = inputs.into_iter();
                        $(let $arg = resolved_arg!($kind, $arg, inputs);)*
                        let result = B::$op($($arg),*);
                        operands!($ret, result)
                    });
                    stream_result!($ret, results)
                }
            )*
        }
    };
}

/// A parameter before registration: a tensor goes into `inputs` (an optional one leaves
/// whether it was there), anything else stays for the op to capture.
macro_rules! stream_arg {
    (F, $arg:ident, $inputs:ident) => {
        $inputs.push($arg)
    };
    (I, $arg:ident, $inputs:ident) => {
        $inputs.push($arg)
    };
    (O, $arg:ident, $inputs:ident) => {
        let $arg = $arg.map(|t| $inputs.push(t)).is_some();
    };
    ($kind:tt, $arg:ident, $inputs:ident) => {
        ()
    };
}

/// A parameter as `B`'s op takes it, from the resolved inputs in registration order.
macro_rules! resolved_arg {
    (F, $arg:ident, $inputs:ident) => {
        next(&mut $inputs).float()
    };
    (I, $arg:ident, $inputs:ident) => {
        next(&mut $inputs).int()
    };
    (O, $arg:ident, $inputs:ident) => {
        $arg.then(|| next(&mut $inputs).float())
    };
    ($kind:tt, $arg:ident, $inputs:ident) => {
        $arg
    };
}

/// `B`'s result as the op's outputs.
macro_rules! operands {
    (F, $result:ident) => {
        [Operand::Float($result)]
    };
    (I, $result:ident) => {
        [Operand::Int($result)]
    };
    ((F, F), $result:ident) => {
        [Operand::Float($result.0), Operand::Float($result.1)]
    };
}

/// The registered outputs as the method returns them.
macro_rules! stream_result {
    (F, $results:ident) => {{
        let [out] = $results;
        out
    }};
    (I, $results:ident) => {{
        let [out] = $results;
        out
    }};
    ((F, F), $results:ident) => {{
        let [a, b] = $results;
        (a, b)
    }};
}

/// The next resolved input.
fn next<B: Backend>(inputs: &mut impl Iterator<Item = Operand<B>>) -> Operand<B> {
    inputs.next().expect("as many inputs as were registered")
}

kernel_ops!(in_stream_ops!());

impl<B: FusionBackend + KernelBackend> KernelBackend for Fusion<B> {
    fn kernels(isa: Isa) -> BackendKernels<Self> {
        BackendKernels {
            adamw: B::kernels(isa)
                .adamw
                .map(|_| fused_adamw::<B> as AdamwFn<Self>),
            ..Default::default()
        }
    }
}

/// The fused AdamW step registered in the fusion stream, to run `B`'s kernel there.
fn fused_adamw<B: FusionBackend + KernelBackend>(
    isa: Isa,
    operands: AdamwIn<Fusion<B>>,
    step: &AdamwStep,
    found: Option<&FloatTensor<Fusion<B>>>,
) -> AdamwRouted<Fusion<B>> {
    let kernel = B::kernels(isa).adamw;
    let Some(kernel) = kernel.filter(|_| kernel_takes::<Fusion<B>>(&operands, found)) else {
        return Routed::Declined(operands);
    };
    let (param, grad, state) = operands;
    let shape = param.shape.clone();
    let mut inputs = vec![param, grad, state.m, state.v, state.time];
    inputs.extend(found.cloned());
    let out = [shape.clone(), shape.clone(), shape, Shape::new([1])].map(|s| (s, DType::F32));
    let step = *step;
    let [param, m, v, time] = in_stream::<B, 4>("fused_adamw", inputs, out, move |inputs| {
        let mut inputs = inputs.into_iter().map(Operand::float);
        let mut next = || inputs.next().expect("registered with five or six inputs");
        let (param, grad) = (next(), next());
        let state = AdamwState {
            m: next(),
            v: next(),
            time: next(),
        };
        let found = inputs.next();
        match kernel(isa, (param, grad, state), &step, found.as_ref()) {
            Routed::Ran((param, state)) => {
                [param, state.m, state.v, state.time].map(Operand::Float)
            }
            // The operands were checked with the same rule before the op was registered.
            Routed::Declined(_) => unreachable!("the fused AdamW kernel declined checked operands"),
        }
    });
    Routed::Ran((param, AdamwState { m, v, time }))
}

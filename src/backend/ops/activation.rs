//! `ActivationOps`: softmax, log-softmax, softmin and log-sigmoid in f32; the rest in their
//! input dtype.

use burn_tensor::backend::Backend;
use burn_tensor::ops::{ActivationOps, FloatTensor};
use burn_tensor::{Scalar, TensorMetadata};

use crate::MixedPrecision;
use crate::backend::autocast;
use crate::context;
use crate::cost::{Counted, OpClass, OpRow};
use crate::cpu::Routed;

// The ops of `ActivationOps` written out below, each with its class.
const SOFTMAX: OpRow = OpRow::new("softmax", OpClass::Float32);
const LOG_SOFTMAX: OpRow = OpRow::new("log_softmax", OpClass::Float32);
const GELU: OpRow = OpRow::new("gelu", OpClass::Forwarded);
const RELU: OpRow = OpRow::new("relu", OpClass::Forwarded);

/// Every op of `ActivationOps` written out below: the class table's rows for them.
const WRITTEN: [OpRow; 4] = [SOFTMAX, LOG_SOFTMAX, GELU, RELU];

/// Softmax or log-softmax in f32: over the last dimension on burn-amp's kernels where the
/// policy routes (one op reading the input in its dtype, summing in f32, with its own
/// backward pass), else the input cast to f32 and the backend's op.
fn softmax_f32<B: Backend>(
    row: OpRow,
    log: bool,
    tensor: FloatTensor<B>,
    dim: usize,
    inner: fn(FloatTensor<B>, usize) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let op = context::of::<B>(&tensor);
    let last = tensor.shape().num_dims().saturating_sub(1);
    let _op = row.record(Some(burn_tensor::DType::F32));
    let tensor = match op.routed_ops() {
        Some(ops)
            if dim == last && autocast::dtype::<B>(&tensor) != burn_tensor::FloatDType::F64 =>
        {
            match (ops.softmax)(ops.isa, tensor, log) {
                Routed::Ran(out) => return out,
                Routed::Declined(tensor) => tensor,
            }
        }
        _ => tensor,
    };
    let [tensor] = autocast::to_f32::<B, 1>([tensor], &op);
    inner(tensor, dim)
}

/// An activation in its input's dtype: on the routed kernel `pick` chooses where the policy
/// routes, else the backend's op `inner`.
fn activation<B: Backend>(
    tensor: FloatTensor<B>,
    pick: fn(&crate::cpu::RoutedOps<B>) -> crate::cpu::UnaryFn<B>,
    inner: fn(FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<B> {
    if autocast::dtype::<B>(&tensor) != burn_tensor::FloatDType::F64
        && let Some(ops) = context::of::<B>(&tensor).routed_ops()
    {
        return match pick(&ops)(ops.isa, tensor) {
            Routed::Ran(out) => out,
            Routed::Declined(tensor) => inner(tensor),
        };
    }
    inner(tensor)
}

/// The ops of `ActivationOps` that apply one casting rule.
macro_rules! activation_autocast {
    ($then:ident) => {
        $then! { B;
            to_f32 fn softmin(tensor; dim: usize) -> FloatTensor<Self>;
            to_f32 fn log_sigmoid(tensor) -> FloatTensor<Self>;
            to_widest fn prelu(tensor, alpha) -> FloatTensor<Self>;
            // Called only by an autodiff decorator outside this one: saved input and gradient
            // may differ in dtype.
            to_widest fn relu_backward(output, grad) -> FloatTensor<Self>;
            to_widest fn gelu_backward(x, grad) -> FloatTensor<Self>;
            to_widest fn sigmoid_backward(output, grad) -> FloatTensor<Self>;
            to_widest fn log_sigmoid_backward(x, grad) -> FloatTensor<Self>;
        }
    };
}

/// The ops of `ActivationOps` handed to the inner backend as they are.
macro_rules! activation_forwarded {
    ($then:ident) => {
        $then! { B;
            fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self>;
            fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self>;
        }
    };
}

impl<B: Backend> ActivationOps<Self> for MixedPrecision<B> {
    /// Float32 class (see `softmax_f32`).
    fn softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        softmax_f32::<B>(SOFTMAX, false, tensor, dim, B::softmax)
    }

    /// Float32 class (see `softmax_f32`).
    fn log_softmax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        softmax_f32::<B>(LOG_SOFTMAX, true, tensor, dim, B::log_softmax)
    }

    /// In the input's dtype; on burn-amp's kernels where the policy routes (f32 arithmetic,
    /// a vectorised erf, and its own backward pass).
    fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let _op = GELU.record(None);
        activation::<B>(tensor, |ops| ops.gelu, B::gelu)
    }

    /// In the input's dtype; on burn-amp's kernels where the policy routes (one pass in
    /// f32, its own backward pass; NaN stays NaN there, where Flex's makes it 0).
    fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        let _op = RELU.record(None);
        activation::<B>(tensor, |ops| ops.relu, B::relu)
    }

    activation_autocast!(autocast);

    activation_forwarded!(forward);
}

/// The class table's rows of `ActivationOps`: the ops written out above, then the tables.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    let tables = activation_autocast!(autocast_classes)
        .into_iter()
        .chain(activation_forwarded!(forward_classes));
    super::rows(&WRITTEN, tables)
}

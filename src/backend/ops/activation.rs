//! `ActivationOps`: softmax, log-softmax, softmin and log-sigmoid in f32; the rest in their
//! input dtype.

use burn_tensor::Scalar;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{ActivationOps, FloatTensor};

use crate::MixedPrecision;

impl<B: Backend> ActivationOps<Self> for MixedPrecision<B> {
    autocast! { B;
        to_f32 fn softmax(tensor; dim: usize) -> FloatTensor<Self>;
        to_f32 fn log_softmax(tensor; dim: usize) -> FloatTensor<Self>;
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

    forward! { B;
        fn leaky_relu(tensor: FloatTensor<Self>, negative_slope: Scalar) -> FloatTensor<Self>;
        fn relu(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn gelu(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn sigmoid(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
        fn hard_sigmoid(tensor: FloatTensor<Self>, alpha: Scalar, beta: Scalar) -> FloatTensor<Self>;
    }
}

//! Walks a module's parameters to read or rewrite their gradients in a `GradientsParams`:
//! the finiteness check (counted on the device; read back once where the host decides) and
//! unscaling (manual mode).

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Tensor, TensorPrimitive};
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use crate::MixedPrecision;
use crate::backend::scale;
use crate::cost;

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// Sums, on the device, the non-finite counts of the gradients it visits.
struct NonFiniteCount<'a, X: AutodiffBackend> {
    grads: &'a GradientsParams,
    count: Option<FloatTensor<X::InnerBackend>>,
}

impl<X: AutodiffBackend> ModuleVisitor<MixedPrecision<X>> for NonFiniteCount<'_, X> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<MixedPrecision<X>, D>>) {
        let Some(grad) = self.grads.get::<Inner<MixedPrecision<X>>, D>(param.id) else {
            return;
        };
        // The decorator's tensors are its inner backend's: counted by that backend.
        let grad: FloatTensor<X::InnerBackend> = grad.into_primitive().tensor();
        let bad = scale::count_nonfinite::<X::InnerBackend>(&grad);
        self.count = Some(match self.count.take() {
            Some(count) => {
                let device = X::InnerBackend::float_device(&count);
                X::InnerBackend::float_add(count, X::InnerBackend::float_to_device(bad, &device))
            }
            None => bad,
        });
    }
}

/// The non-finite values of every gradient of `module`'s parameters in `grads`, counted on
/// the device (one read-only pass each) and summed on the first one's device; `None`
/// without gradients. Nothing is read back.
pub(crate) fn nonfinite_count<X: AutodiffBackend, M: AutodiffModule<MixedPrecision<X>>>(
    grads: &GradientsParams,
    module: &M,
) -> Option<FloatTensor<X::InnerBackend>> {
    let mut visitor = NonFiniteCount::<X> { grads, count: None };
    module.visit(&mut visitor);
    visitor.count
}

/// Whether every gradient of `module`'s parameters in `grads` is finite: the count read
/// back once.
pub(crate) fn all_finite<X: AutodiffBackend, M: AutodiffModule<MixedPrecision<X>>>(
    grads: &GradientsParams,
    module: &M,
) -> bool {
    nonfinite_count::<X, M>(grads, module).is_none_or(|count| {
        cost::read(|| {
            Tensor::<X::InnerBackend, 1>::from_primitive(TensorPrimitive::Float(count))
                .into_scalar()
                .elem::<f32>()
        }) == 0.0
    })
}

/// Divides every gradient of `module`'s parameters by `scale`.
struct Unscale<'a> {
    grads: &'a mut GradientsParams,
    scale: f32,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Unscale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if let Some(grad) = self.grads.remove::<Inner<B>, D>(param.id) {
            self.grads.register(param.id, grad.div_scalar(self.scale));
        }
    }
}

pub(crate) fn unscale<B: AutodiffBackend, M: AutodiffModule<B>>(
    mut grads: GradientsParams,
    module: &M,
    scale: f32,
) -> GradientsParams {
    if scale != 1.0 {
        module.visit(&mut Unscale {
            grads: &mut grads,
            scale,
        });
    }
    grads
}

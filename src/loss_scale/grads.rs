//! Walks a module's parameters to read or rewrite their gradients in a `GradientsParams`:
//! the finiteness check (one device-to-host read for all of them) and unscaling.

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{ElementConversion, Int, Tensor};

type Inner<B> = <B as AutodiffBackend>::InnerBackend;

/// Counts, on the device, the gradients holding an inf or NaN.
struct NonFiniteCount<'a, B: AutodiffBackend> {
    grads: &'a GradientsParams,
    count: Option<Tensor<Inner<B>, 1, Int>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for NonFiniteCount<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let Some(grad) = self.grads.get::<Inner<B>, D>(param.id) else {
            return;
        };
        let bad = grad.is_finite().bool_not().any().int();
        self.count = Some(match self.count.take() {
            Some(count) => count + bad,
            None => bad,
        });
    }
}

/// Whether every gradient of `module`'s parameters in `grads` is finite. All the checks stay
/// on the device and are read back once.
pub(crate) fn all_finite<B: AutodiffBackend, M: AutodiffModule<B>>(
    grads: &GradientsParams,
    module: &M,
) -> bool {
    let mut visitor = NonFiniteCount::<B> { grads, count: None };
    module.visit(&mut visitor);
    match visitor.count {
        Some(count) => count.into_scalar().elem::<i64>() == 0,
        None => true,
    }
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

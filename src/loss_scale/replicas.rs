//! A [`LossScaleOptimizer`](super::LossScaleOptimizer)'s step across data-parallel replicas:
//! the gradients compressed (`grads=aps`, with each layer's amax reduced over the replicas),
//! averaged over the replicas in one collective call, and the FP8 amax histories reduced.
//! Every replica then checks the same sums for an overflow, so all take the same skip or
//! step and move their scale alike; no separate overflow flag needs to travel.

use core::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use burn::module::{AutodiffModule, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{DType, FloatDType, Shape, Tensor};
use burn_tensor::TensorPrimitive;

use super::compress::Rounding;
use crate::MixedPrecision;
use crate::collective::{Collective, CollectiveError, all_reduce_sum_all};
use crate::cost;
use crate::fp8::GradientCompression;
use crate::fp8::training::finite_or_zero;

/// The backend under the autodiff one that `MixedPrecision<B>` wraps (gradients live there).
type MixedInner<B> = <MixedPrecision<B> as AutodiffBackend>::InnerBackend;
/// The raw backend under the gradients' (their primitives are its).
type Raw<B> = <B as AutodiffBackend>::InnerBackend;

/// The collective an optimizer reduces through, its backend erased (an
/// `Arc<dyn Collective<R>>` inside): `LossScaleOptimizer<O>` names no backend.
#[derive(Clone)]
pub(crate) struct Replicas {
    collective: Arc<dyn Any + Send + Sync>,
    /// Whether the step reduces the gradients; `false` where the engine did already
    /// (Burn's DDP, during `backward`) and only the amaxes remain.
    pub gradients: bool,
}

impl Replicas {
    pub fn new<R: Backend>(collective: Arc<dyn Collective<R>>, gradients: bool) -> Self {
        Self {
            collective: Arc::new(collective),
            gradients,
        }
    }

    /// The collective, if it was made for `R`.
    pub fn get<R: Backend>(&self) -> Result<&Arc<dyn Collective<R>>, CollectiveError> {
        self.collective
            .downcast_ref::<Arc<dyn Collective<R>>>()
            .ok_or_else(|| {
                CollectiveError::Mismatch(format!(
                    "the optimizer's collective was made for another backend than {}",
                    core::any::type_name::<R>()
                ))
            })
    }
}

/// One parameter's gradient, flattened.
struct Flat<R: Backend> {
    id: ParamId,
    shape: Shape,
    dtype: DType,
    values: Tensor<R, 1>,
}

/// Takes every parameter's gradient out of `grads`, flattened, in visit order.
struct Gather<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    flat: Vec<Flat<Raw<B>>>,
}

impl<B: AutodiffBackend> ModuleVisitor<MixedPrecision<B>> for Gather<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<MixedPrecision<B>, D>>) {
        let Some(grad) = self.grads.remove::<MixedInner<B>, D>(param.id) else {
            return;
        };
        let shape = grad.shape();
        let dtype = grad.dtype();
        let raw = Tensor::<Raw<B>, D>::from_primitive(TensorPrimitive::Float(
            grad.into_primitive().tensor(),
        ));
        self.flat.push(Flat {
            id: param.id,
            values: raw.reshape([shape.num_elements()]),
            shape,
            dtype,
        });
    }
}

/// Puts the reduced gradients back, in their shapes.
struct Scatter<'a, B: AutodiffBackend> {
    grads: &'a mut GradientsParams,
    flat: HashMap<ParamId, (Shape, Tensor<Raw<B>, 1>)>,
}

impl<B: AutodiffBackend> ModuleVisitor<MixedPrecision<B>> for Scatter<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<MixedPrecision<B>, D>>) {
        let Some((shape, values)) = self.flat.remove(&param.id) else {
            return;
        };
        let dims: [usize; D] = shape.dims();
        let grad = Tensor::<MixedInner<B>, D>::from_primitive(TensorPrimitive::Float(
            values.reshape(dims).into_primitive().tensor(),
        ));
        self.grads.register(param.id, grad);
    }
}

/// `grads` of this replica, compressed as `how` says with each layer's amax reduced over
/// the replicas, then averaged over them.
pub(crate) fn reduce<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
    mut grads: GradientsParams,
    module: &M,
    how: GradientCompression,
    collective: &dyn Collective<Raw<B>>,
) -> Result<GradientsParams, CollectiveError> {
    let mut gather = Gather::<B> {
        grads: &mut grads,
        flat: Vec::new(),
    };
    module.visit(&mut gather);
    let mut flat = gather.flat;
    if flat.is_empty() {
        return Ok(grads);
    }
    if how != GradientCompression::None {
        compress(&mut flat, how, collective)?;
    }
    let world = collective.world_size();
    let values: Vec<Tensor<Raw<B>, 1>> = flat
        .iter()
        .map(|f| f.values.clone().cast(FloatDType::F32))
        .collect();
    let summed = all_reduce_sum_all(collective, values)?;
    let flat = flat
        .into_iter()
        .zip(summed)
        .map(|(f, sum)| {
            let mean = if world == 1 {
                sum
            } else {
                sum.div_scalar(world as f32)
            };
            (f.id, (f.shape, mean.cast(f.dtype)))
        })
        .collect();
    module.visit(&mut Scatter::<B> {
        grads: &mut grads,
        flat,
    });
    Ok(grads)
}

/// APS of every layer: the layers' finite amaxes reduced with MAX in one call, then each
/// layer rounded with the scale of the replicas' amax and their count (where, as
/// [`Rounding`] decides).
fn compress<R: Backend>(
    flat: &mut [Flat<R>],
    how: GradientCompression,
    collective: &dyn Collective<R>,
) -> Result<(), CollectiveError> {
    let amaxes: Vec<Tensor<R, 1>> = flat
        .iter()
        .map(|f| finite_or_zero(f.values.clone().cast(FloatDType::F32).abs()).max())
        .collect();
    let amax = collective.all_reduce_max(Tensor::cat(amaxes, 0))?;
    let world = collective.world_size();
    let rounding = Rounding::<R>::new(how);
    let host_amax = if rounding.on_host() {
        cost::read(|| amax.clone().into_data().convert::<f32>().to_vec::<f32>())
            .map_err(|e| CollectiveError::Mismatch(format!("amax vector: {e:?}")))?
    } else {
        Vec::new()
    };
    for (i, f) in flat.iter_mut().enumerate() {
        if f.values.dims()[0] == 0 {
            continue;
        }
        let layer = amax.clone().slice(i..i + 1);
        let host = host_amax.get(i).copied().unwrap_or(0.0);
        let mut rounded = rounding
            .layer(vec![f.values.clone()], Some((layer, host)), world)
            .map_err(CollectiveError::Mismatch)?;
        f.values = rounded.remove(0);
    }
    Ok(())
}

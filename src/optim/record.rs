//! [`FusedAdamW`](super::FusedAdamW)'s record is Burn's `AdamW` record: these convert a
//! parameter's state to it and back, checking what comes from disk before it is used.

use burn::module::ParamId;
use burn::optim::record::{AdaptorRecord, AdaptorRecordV1};
use burn::optim::{AdamW, AdamWState, AdaptiveMomentumState};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor, TensorPrimitive};
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Shape, TensorMetadata};

use super::state::{ParamState, step_count};
use crate::cost;
use crate::cpu::AdamwState;

/// Why a record was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A step count of 0: its bias correction would divide by zero.
    #[error("the AdamW state of parameter {param} has step count 0 (a saved state has at least 1)")]
    ZeroSteps {
        /// The parameter's id.
        param: String,
    },
    /// Moments of different shapes.
    #[error("the AdamW moments of parameter {param} have shapes {m:?} and {v:?}")]
    ShapeMismatch {
        /// The parameter's id.
        param: String,
        /// The first moment's shape.
        m: Vec<usize>,
        /// The second moment's shape.
        v: Vec<usize>,
    },
    /// An AMSGrad state, which `FusedAdamW` does not fuse.
    #[error(
        "the AdamW state of parameter {param} holds an AMSGrad moment: FusedAdamW does not \
         fuse AMSGrad; load it into Burn's AdamW (amsgrad = true)"
    )]
    Amsgrad {
        /// The parameter's id.
        param: String,
    },
    /// A moment holding inf or NaN, or a negative second moment.
    #[error("the AdamW moments of parameter {param} hold {what}")]
    BadValues {
        /// The parameter's id.
        param: String,
        /// What was found.
        what: &'static str,
    },
    /// A loaded state whose moments cannot belong to the parameter they are keyed to: the
    /// record is another model's. Found at the first step after loading, which sees the
    /// module.
    #[error(
        "the AdamW state loaded for parameter `{param}` (id {id}) has moments of shape \
         {found:?}, but the parameter's shape is {expected:?}: the record is not this model's"
    )]
    NotThisModel {
        /// The parameter's module path, e.g. `fc1.weight`.
        param: String,
        /// The parameter's id.
        id: String,
        /// The parameter's shape.
        expected: Vec<usize>,
        /// The loaded moments' shape.
        found: Vec<usize>,
    },
    /// A parameter of rank 0 (Burn's modules have none).
    #[error("the AdamW state of parameter {param} has rank 0")]
    RankZero {
        /// The parameter's id.
        param: String,
    },
}

/// The state as Burn's record of it (reads the step count back from the device).
pub(super) fn to_burn<B: AutodiffBackend>(
    state: &AdamwState<FloatTensor<B::InnerBackend>>,
) -> AdaptorRecord<AdamW, B> {
    type I<B> = <B as AutodiffBackend>::InnerBackend;
    let time = cost::read(|| {
        Tensor::<I<B>, 1>::from_primitive(TensorPrimitive::Float(state.time.clone()))
            .into_scalar()
            .elem::<f64>()
    }) as usize;
    macro_rules! ranks {
        ($($n:literal => $variant:ident),*) => {
            match state.m.shape().num_dims() {
                $($n => AdaptorRecord::V1(AdaptorRecordV1::$variant(AdamWState {
                    momentum: AdaptiveMomentumState {
                        time,
                        moment_1: Tensor::<I<B>, $n>::from_primitive(TensorPrimitive::Float(state.m.clone())),
                        moment_2: Tensor::<I<B>, $n>::from_primitive(TensorPrimitive::Float(state.v.clone())),
                        max_moment_2: None,
                    },
                })),)*
                other => panic!("a parameter of rank {other}: Burn's records hold ranks 1 to 8"),
            }
        };
    }
    ranks!(1 => Rank1, 2 => Rank2, 3 => Rank3, 4 => Rank4, 5 => Rank5, 6 => Rank6, 7 => Rank7, 8 => Rank8)
}

/// Burn's record of one parameter as its state, after checking it.
pub(super) fn from_burn<B: AutodiffBackend>(
    id: ParamId,
    record: AdaptorRecord<AdamW, B>,
) -> Result<ParamState<B::InnerBackend>, RecordError> {
    let param = || format!("{id}");
    macro_rules! ranks {
        ($($variant:ident),*) => {
            match record {
                AdaptorRecord::V1(AdaptorRecordV1::Rank0(_)) => Err(RecordError::RankZero { param: param() }),
                $(AdaptorRecord::V1(AdaptorRecordV1::$variant(state)) => {
                    let s = state.momentum;
                    if s.max_moment_2.is_some() {
                        return Err(RecordError::Amsgrad { param: param() });
                    }
                    check::<B::InnerBackend>(&param(), s.time, s.moment_1.into_primitive().tensor(), s.moment_2.into_primitive().tensor())
                })*
            }
        };
    }
    ranks!(Rank1, Rank2, Rank3, Rank4, Rank5, Rank6, Rank7, Rank8)
}

fn check<I: Backend>(
    param: &str,
    time: usize,
    m: FloatTensor<I>,
    v: FloatTensor<I>,
) -> Result<ParamState<I>, RecordError> {
    if time == 0 {
        return Err(RecordError::ZeroSteps {
            param: param.into(),
        });
    }
    let (ms, vs) = (m.shape(), v.shape());
    if ms != vs {
        return Err(RecordError::ShapeMismatch {
            param: param.into(),
            m: ms.to_vec(),
            v: vs.to_vec(),
        });
    }
    let values = |t: &FloatTensor<I>| {
        cost::read(|| {
            Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(I::float_reshape(
                t.clone(),
                Shape::new([t.shape().num_elements()]),
            )))
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 values")
        })
    };
    let bad = |what| {
        Err(RecordError::BadValues {
            param: param.into(),
            what,
        })
    };
    if values(&m).iter().any(|x| !x.is_finite()) {
        return bad("inf or NaN in the first moment");
    }
    let v_values = values(&v);
    if v_values.iter().any(|x| !x.is_finite()) {
        return bad("inf or NaN in the second moment");
    }
    if v_values.iter().any(|x| *x < 0.0) {
        return bad("a negative second moment");
    }
    let device = I::float_device(&m);
    Ok(ParamState {
        state: AdamwState {
            m,
            v,
            time: step_count::<I>(time, &device),
        },
    })
}

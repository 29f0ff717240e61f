//! Delayed scaling: the scale of step `t` comes from the amaxes of earlier steps
//! (Transformer Engine's recipe), kept in a history of configurable length.

use std::collections::VecDeque;

use burn::record::{PrecisionSettings, Record};
use burn_amp_kernels::fp8::Fp8Cast;
use burn_amp_kernels::fp8::scale::{ScaleRule, block_scale};
use burn_tensor::Tensor;
use burn_tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use super::backend::{Fp8Backend, host_f32};
use super::{Fp8Error, Fp8Recipe, Fp8Tensor};

/// Which amax of the history the scale follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AmaxCompute {
    /// The largest amax in the history (Transformer Engine's default).
    Max,
    /// The most recent amax.
    MostRecent,
}

/// Per-tensor delayed scaling: each call quantizes with the scale derived from the amax
/// history, then records the tensor's amax. A zero or non-finite amax (an all-zero or
/// overflowed step) never lowers the scale to zero or makes it non-finite: the scale then
/// stays what it was (a bug Transformer Engine once had), and a non-finite amax is recorded
/// as 0, no observation (the scale follows the largest finite amax), so the history can be
/// saved with every Burn recorder, JSON's included.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_amp::fp8::{AmaxCompute, DelayedScaling, Fp8Cast, Fp8Format};
///
/// let device = Default::default();
/// let mut scaling = DelayedScaling::new(16, 0, AmaxCompute::Max)?;
/// let cast = Fp8Cast::new(Fp8Format::E4M3);
/// let x = Tensor::<Flex, 1>::from_floats([2.0, -7.0], &device);
/// let _first = scaling.quantize(x.clone(), cast)?; // scale 1: no history yet
/// assert_eq!(scaling.scale(), 64.0); // 448 / 7, rounded down to a power of two
/// # Ok::<(), burn_amp::fp8::Fp8Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct DelayedScaling {
    history: VecDeque<f32>,
    length: usize,
    margin: u32,
    compute: AmaxCompute,
    rule: ScaleRule,
    scale: f32,
}

impl DelayedScaling {
    /// A history of `length` amaxes, `margin` powers of two of headroom, power-of-two scales.
    ///
    /// # Errors
    /// [`Fp8Error::InvalidRecipe`] for a history of length 0.
    pub fn new(length: usize, margin: u32, compute: AmaxCompute) -> Result<Self, Fp8Error> {
        if length == 0 {
            return Err(Fp8Error::InvalidRecipe(
                "an amax history needs a length of at least 1".into(),
            ));
        }
        Ok(Self {
            history: VecDeque::with_capacity(length),
            length,
            margin,
            compute,
            rule: ScaleRule::PowerOfTwo { margin },
            scale: 1.0,
        })
    }

    /// With float scales (`max / amax`) instead of powers of two.
    pub fn with_float_scales(mut self) -> Self {
        self.rule = ScaleRule::Float {
            margin: self.margin,
        };
        self
    }

    /// The scale the next call will use.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The recorded amaxes, oldest first.
    pub fn history(&self) -> impl Iterator<Item = f32> + '_ {
        self.history.iter().copied()
    }

    /// Quantizes `tensor` with the current scale, then records its amax and moves the
    /// scale for the next call (one read of the amax back to the host).
    ///
    /// # Errors
    /// As [`Fp8Tensor::quantize`].
    pub fn quantize<B: Fp8Backend, const D: usize>(
        &mut self,
        tensor: Tensor<B, D>,
        cast: Fp8Cast,
    ) -> Result<Fp8Tensor<B, D>, Fp8Error> {
        let device = tensor.device();
        let scales =
            Tensor::<B, 1>::from_data(burn_tensor::TensorData::new(vec![self.scale], [1]), &device);
        let recipe = Fp8Recipe::PerTensor { rule: self.rule };
        let out = Fp8Tensor::quantize_with_scales(tensor.clone(), cast, recipe, scales)?;
        let layout = recipe.layout(&tensor.shape())?;
        let flat = tensor
            .detach()
            .reshape([layout.len as usize])
            .into_primitive()
            .tensor();
        let amax = host_f32::<B>(B::fp8_amax(flat, layout))[0];
        self.record(amax, cast);
        Ok(out)
    }

    /// Records an amax and moves the scale.
    pub fn record(&mut self, amax: f32, cast: Fp8Cast) {
        if self.history.len() == self.length {
            self.history.pop_front();
        }
        self.history
            .push_back(if amax.is_finite() { amax.abs() } else { 0.0 });
        let pick = match self.compute {
            AmaxCompute::Max => self
                .history
                .iter()
                .copied()
                .filter(|a| a.is_finite())
                .fold(0.0, f32::max),
            AmaxCompute::MostRecent => amax.abs(),
        };
        if pick.is_finite() && pick > 0.0 {
            let s = block_scale(pick.to_bits(), cast.format, self.rule).scale;
            if s.is_finite() && s > 0.0 {
                self.scale = s;
            }
        }
    }
}

/// [`DelayedScaling`]'s serialized form: the history and the scale survive a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DelayedScalingItem {
    history: Vec<f32>,
    length: usize,
    margin: u32,
    compute: AmaxCompute,
    float_scales: bool,
    scale: f32,
}

impl<B: Backend> Record<B> for DelayedScaling {
    type Item<S: PrecisionSettings> = DelayedScalingItem;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        DelayedScalingItem {
            history: self.history.into_iter().collect(),
            length: self.length,
            margin: self.margin,
            compute: self.compute,
            float_scales: matches!(self.rule, ScaleRule::Float { .. }),
            scale: self.scale,
        }
    }

    /// Loads a checked item.
    ///
    /// # Panics
    /// With [`Fp8Error::InvalidRecord`]'s message where the item does not check out
    /// ([`DelayedScaling::try_from_item`] returns it instead).
    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, _device: &B::Device) -> Self {
        DelayedScaling::try_from_item(item).unwrap_or_else(|err| panic!("{err}"))
    }
}

/// The longest history an item may hold (a guard against a corrupted length).
const MAX_ITEM_HISTORY: usize = 1 << 20;

impl DelayedScaling {
    /// The scaling an item (a checkpoint's) describes, after checking every number a
    /// resumed run would use.
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::record::Record;
    /// use burn_amp::fp8::{AmaxCompute, DelayedScaling};
    ///
    /// let scaling = DelayedScaling::new(4, 0, AmaxCompute::Max)?;
    /// let item = Record::<Flex>::into_item::<burn::record::FullPrecisionSettings>(scaling.clone());
    /// assert_eq!(DelayedScaling::try_from_item(item)?, scaling);
    /// # Ok::<(), burn_amp::fp8::Fp8Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Fp8Error::InvalidRecord`] naming the field: a length of 0 or over 2^20, a history
    /// longer than the length, a negative amax, a scale that is not a valid FP8 scale, a
    /// margin over 64.
    pub fn try_from_item(item: DelayedScalingItem) -> Result<Self, Fp8Error> {
        let bad = |what: String| Err(Fp8Error::InvalidRecord(what));
        if item.length == 0 || item.length > MAX_ITEM_HISTORY {
            return bad(format!("length = {}: must be in 1..=2^20", item.length));
        }
        if item.history.len() > item.length {
            return bad(format!(
                "history: {} amaxes, more than its length {}",
                item.history.len(),
                item.length
            ));
        }
        if let Some(a) = item.history.iter().find(|a| **a < 0.0) {
            return bad(format!("history: amax {a} is negative"));
        }
        if !burn_amp_kernels::fp8::scale::is_valid_scale(item.scale) {
            return bad(format!(
                "scale = {}: must be finite, in [2^-126, 2^126]",
                item.scale
            ));
        }
        if item.margin > 64 {
            return bad(format!("margin = {}: at most 64", item.margin));
        }
        let rule = if item.float_scales {
            ScaleRule::Float {
                margin: item.margin,
            }
        } else {
            ScaleRule::PowerOfTwo {
                margin: item.margin,
            }
        };
        Ok(Self {
            // An older checkpoint's non-finite amaxes: no observation, as recorded now.
            history: item
                .history
                .into_iter()
                .map(|a| if a.is_finite() { a } else { 0.0 })
                .collect(),
            length: item.length,
            margin: item.margin,
            compute: item.compute,
            rule,
            scale: item.scale,
        })
    }
}

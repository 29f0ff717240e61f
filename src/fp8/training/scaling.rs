//! How FP8 training scales each tensor: the scaling recipe (current, blockwise, delayed,
//! exponent bias), the format choice (HFP8's hybrid or automatic) and the roles a site
//! quantizes.

use core::fmt;

use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow};

use crate::fp8::{AmaxCompute, Fp8Recipe};

/// The scaling recipe of an FP8 training policy.
///
/// | scaling | scale of a tensor | state | from | spec |
/// |---------|-------------------|-------|------|------|
/// | [`PerTensor`](Self::PerTensor) | `max / amax` of the tensor itself | none | Transformer Engine's `Float8CurrentScaling` | `fp8=tensor` |
/// | [`Blockwise`](Self::Blockwise) | per 1 x 128 tile (weights: 128 x 128 block) | none | DeepSeek-V3 | `fp8=blockwise` |
/// | [`Delayed`](Self::Delayed) | `max / amax` over the site's amax history of earlier steps | history per site and role | Transformer Engine's `DelayedScaling`, Keras' `float8_*` | `fp8=delayed` |
/// | [`ExponentBias`](Self::ExponentBias) | a power-of-two exponent bias, moved only when the range drifts | bias per site and role | Tesla's CFloat8 | `fp8=bias` |
///
/// The two stateful ones keep their state in the [`Fp8History`](crate::fp8::Fp8History) of
/// the [`LossScaleOptimizer`](crate::LossScaleOptimizer) bound to the device, which saves it
/// in its record.
///
/// ```
/// use burn_amp::Policy;
/// use burn_amp::fp8::{DelayedRecipe, Fp8Scaling};
///
/// let policy: Policy = "float8_from_mixed_bfloat16".parse()?;
/// assert_eq!(policy.fp8_scaling(), Some(Fp8Scaling::PerTensor));
/// let blockwise = policy.with_fp8_scaling(Fp8Scaling::Blockwise);
/// assert_eq!(blockwise.to_string(), "params=float32,compute=bfloat16,output=float32,fp8=blockwise");
/// assert_eq!(blockwise.to_string().parse::<Policy>()?, blockwise);
///
/// let delayed: Policy = "c=bf16,fp8=delayed,history=16".parse()?;
/// let recipe = DelayedRecipe { history: 16, ..DelayedRecipe::default() };
/// assert_eq!(delayed.fp8_scaling(), Some(Fp8Scaling::Delayed(recipe)));
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fp8Scaling {
    /// One scale per tensor, `448 / amax` (E4M3) or `57344 / amax` (E5M2).
    #[default]
    PerTensor,
    /// 1 x 128 tiles for activations and gradients, 128 x 128 blocks for weights.
    Blockwise,
    /// Delayed scaling: each tensor's scale comes from the amaxes its site and role had at
    /// earlier steps; a site seen for the first time uses current scaling.
    Delayed(DelayedRecipe),
    /// CFloat8: no float scale, but an exponent bias per site and role (a power of two),
    /// kept while the tensor's range stays within `drift` binades of it.
    ExponentBias(ExponentBiasRecipe),
}

/// The settings of delayed scaling. The defaults are Transformer Engine's and Keras':
/// 1024 steps of history, margin 0, the history's maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DelayedRecipe {
    /// How many steps of amaxes a site and role remember (`history=`).
    pub history: u32,
    /// Headroom: the scale is divided by `2^margin` (`margin=`).
    pub margin: u32,
    /// Which amax of the history sets the scale (`amax=max` or `amax=most_recent`).
    pub amax: AmaxCompute,
}

impl Default for DelayedRecipe {
    fn default() -> Self {
        Self {
            history: 1024,
            margin: 0,
            amax: AmaxCompute::Max,
        }
    }
}

/// The settings of CFloat8-style exponent-bias scaling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExponentBiasRecipe {
    /// How many binades of unused range a tensor may drift from its bias before the bias is
    /// raised (`drift=`); a tensor that would overflow lowers it at once. Default 2.
    pub drift: u32,
}

impl Default for ExponentBiasRecipe {
    fn default() -> Self {
        Self { drift: 2 }
    }
}

/// Which FP8 format each role is rounded to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fp8Formats {
    /// E4M3 for inputs and weights, E5M2 for gradients (HFP8's hybrid; the default).
    #[default]
    Hybrid,
    /// Chosen per tensor from its measured range (`format=auto`), by
    /// [`choose_format`](crate::fp8::choose_format): E4M3 unless it loses more than
    /// [`AUTO_FORMAT_TOLERANCE`](crate::fp8::AUTO_FORMAT_TOLERANCE) of the values beyond what
    /// E5M2 would lose.
    Auto,
}

impl Fp8Formats {
    /// The name in policy specs: `hybrid` or `auto`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hybrid => "hybrid",
            Self::Auto => "auto",
        }
    }
}

/// How parameter gradients are compressed before the optimizer (and, with several devices,
/// before they are summed), as [`LossScaleOptimizer`](crate::LossScaleOptimizer) applies it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GradientCompression {
    /// Gradients stay as they are (the default).
    #[default]
    None,
    /// APS: each parameter's gradient is rounded to E5M2 with a per-layer power-of-two scale
    /// from the maximum over workers of that layer's amax (`grads=aps`); see
    /// [`aps_scale`](crate::fp8::aps_scale).
    Aps,
    /// As `Aps`, into Tesla's 16-bit SHP format with the APS exponent as its bias
    /// (`grads=aps_shp`).
    ApsShp,
}

impl GradientCompression {
    /// The name in policy specs: `none`, `aps` or `aps_shp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Aps => "aps",
            Self::ApsShp => "aps_shp",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "aps" => Some(Self::Aps),
            "aps_shp" => Some(Self::ApsShp),
            _ => None,
        }
    }
}

/// What an FP8 site quantizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fp8Role {
    /// The left operand (the activation `x` of a linear or convolution).
    Input,
    /// The right operand (the weight of a linear or convolution).
    Weight,
    /// The gradient flowing back into the op's output.
    Gradient,
}

impl Fp8Role {
    /// The three roles, in report order.
    pub const ALL: [Fp8Role; 3] = [Self::Input, Self::Weight, Self::Gradient];

    /// The role's short name, as the numerics report prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::Weight => "weight",
            Self::Gradient => "grad",
        }
    }

    /// The role's number in records (0, 1, 2 in [`ALL`](Self::ALL)'s order).
    pub(crate) fn index(self) -> u8 {
        match self {
            Self::Input => 0,
            Self::Weight => 1,
            Self::Gradient => 2,
        }
    }

    pub(crate) fn from_index(index: u8) -> Option<Self> {
        Self::ALL.get(usize::from(index)).copied()
    }

    /// The cast of the role under the hybrid format: E4M3 forward, E5M2 backward (HFP8),
    /// round to nearest even, OCP non-saturating overflow. Current scaling maps each block's
    /// amax onto the format's largest value, so finite values never overflow; an inf or NaN
    /// stays non-finite (NaN in E4M3, which has no infinity), so an overflowed step still
    /// reaches the loss scaler as one, instead of being clamped into a plausible number.
    pub fn cast(self) -> Fp8Cast {
        let format = match self {
            Self::Input | Self::Weight => Fp8Format::E4M3,
            Self::Gradient => Fp8Format::E5M2,
        };
        Fp8Cast::new(format).with_overflow(Overflow::NonSaturating)
    }
}

impl Fp8Scaling {
    /// The block recipe a tensor of `role` is quantized with. The stateful scalings scale
    /// whole tensors.
    pub fn recipe(self, role: Fp8Role) -> Fp8Recipe {
        match (self, role) {
            (Self::Blockwise, Fp8Role::Weight) => Fp8Recipe::blocks_128x128(),
            (Self::Blockwise, _) => Fp8Recipe::blocks_1x128(),
            _ => Fp8Recipe::per_tensor(),
        }
    }

    /// Whether the scaling keeps state between steps (delayed, exponent bias).
    pub fn is_stateful(self) -> bool {
        matches!(self, Self::Delayed(_) | Self::ExponentBias(_))
    }

    /// The name in policy specs: `tensor`, `blockwise`, `delayed` or `bias`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PerTensor => "tensor",
            Self::Blockwise => "blockwise",
            Self::Delayed(_) => "delayed",
            Self::ExponentBias(_) => "bias",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "tensor" | "per_tensor" | "current" => Some(Self::PerTensor),
            "blockwise" | "block" | "blocks" => Some(Self::Blockwise),
            "delayed" => Some(Self::Delayed(DelayedRecipe::default())),
            "bias" | "exponent_bias" | "cfloat8" => {
                Some(Self::ExponentBias(ExponentBiasRecipe::default()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Fp8Scaling {
    /// The spec keys of the scaling: `fp8=delayed,history=16` (settings at their defaults
    /// are left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            Self::Delayed(recipe) => {
                let default = DelayedRecipe::default();
                if recipe.history != default.history {
                    write!(f, ",history={}", recipe.history)?;
                }
                if recipe.margin != default.margin {
                    write!(f, ",margin={}", recipe.margin)?;
                }
                if recipe.amax != default.amax {
                    f.write_str(",amax=most_recent")?;
                }
                Ok(())
            }
            Self::ExponentBias(recipe) if *recipe != ExponentBiasRecipe::default() => {
                write!(f, ",drift={}", recipe.drift)
            }
            _ => Ok(()),
        }
    }
}

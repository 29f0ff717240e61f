//! How FP8 training scales each tensor: the formats (E4M3 forward, E5M2 backward) and the
//! block recipe of each role (activation, weight, gradient).

use core::fmt;

use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow};

use crate::fp8::Fp8Recipe;

/// The scaling recipe of an FP8 training policy. Both are *current* scaling: each scale
/// comes from the tensor being quantized, so the decorator keeps no state between steps.
///
/// | scaling | activations (lhs) | weights (rhs) | incoming gradients | from |
/// |---------|-------------------|---------------|--------------------|------|
/// | [`PerTensor`](Self::PerTensor) | one scale | one scale | one scale | Transformer Engine's `Float8CurrentScaling` |
/// | [`Blockwise`](Self::Blockwise) | 1 x 128 | 128 x 128 | 1 x 128 | DeepSeek-V3's fine-grained scaling |
///
/// Written `fp8=tensor` or `fp8=blockwise` in a policy spec:
///
/// ```
/// use burn_amp::Policy;
/// use burn_amp::fp8::Fp8Scaling;
///
/// let policy: Policy = "float8_from_mixed_bfloat16".parse()?;
/// assert_eq!(policy.fp8_scaling(), Some(Fp8Scaling::PerTensor));
/// let blockwise = policy.with_fp8_scaling(Fp8Scaling::Blockwise);
/// assert_eq!(blockwise.to_string(), "params=float32,compute=bfloat16,output=float32,fp8=blockwise");
/// assert_eq!(blockwise.to_string().parse::<Policy>()?, blockwise);
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fp8Scaling {
    /// One scale per tensor, `448 / amax` (E4M3) or `57344 / amax` (E5M2).
    #[default]
    PerTensor,
    /// 1 x 128 tiles for activations and gradients, 128 x 128 blocks for weights.
    Blockwise,
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

    /// The cast of the role: E4M3 forward, E5M2 backward (HFP8's hybrid), round to
    /// nearest even, OCP non-saturating overflow. Current scaling maps each block's amax
    /// onto the format's largest value, so finite values never overflow; an inf or NaN
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
    /// The recipe a tensor of `role` is quantized with.
    pub fn recipe(self, role: Fp8Role) -> Fp8Recipe {
        match (self, role) {
            (Self::PerTensor, _) => Fp8Recipe::per_tensor(),
            (Self::Blockwise, Fp8Role::Weight) => Fp8Recipe::blocks_128x128(),
            (Self::Blockwise, _) => Fp8Recipe::blocks_1x128(),
        }
    }

    /// The name in policy specs: `tensor` or `blockwise`.
    pub fn name(self) -> &'static str {
        match self {
            Self::PerTensor => "tensor",
            Self::Blockwise => "blockwise",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "tensor" | "per_tensor" => Some(Self::PerTensor),
            "blockwise" | "block" | "blocks" => Some(Self::Blockwise),
            _ => None,
        }
    }
}

impl fmt::Display for Fp8Scaling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

//! Scaling recipes: how a tensor is cut into scale blocks, and how each block's scale
//! follows from its amax. Delayed scaling (an amax history) is [`DelayedScaling`].

use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_tensor::Shape;

use super::Fp8Error;

/// How a tensor is scaled into FP8's range.
///
/// | recipe | blocks | scale | from |
/// |--------|--------|-------|------|
/// | [`Unscaled`](Self::Unscaled) | one | 1 | plain conversion |
/// | [`per_tensor`](Self::per_tensor) | one | `max / amax` | Transformer Engine's current scaling |
/// | [`blocks_1x128`](Self::blocks_1x128) | 1 x 128 along the last dim | `max / amax` | DeepSeek-V3 activations |
/// | [`blocks_128x128`](Self::blocks_128x128) | 128 x 128 | `max / amax` | DeepSeek-V3 weights |
/// | [`mx`](Self::mx) | 1 x 32 along the last dim | E8M0 power of two | OCP MX |
///
/// A tensor of any rank is seen as `[elements / last_dim, last_dim]` for blocking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Recipe {
    /// No scaling: values are converted as they are.
    Unscaled,
    /// One scale for the whole tensor, from its current amax.
    PerTensor {
        /// How the scale follows from the amax.
        rule: ScaleRule,
    },
    /// One scale per `rows x cols` block.
    Blocks {
        /// Block height (rows of the `[n / last, last]` view).
        rows: usize,
        /// Block width (along the last dimension).
        cols: usize,
        /// How each scale follows from its block's amax.
        rule: ScaleRule,
    },
}

impl Fp8Recipe {
    /// Per-tensor current scaling, `scale = max / amax`.
    pub const fn per_tensor() -> Self {
        Self::PerTensor {
            rule: ScaleRule::Float { margin: 0 },
        }
    }

    /// 1 x 128 blocks along the last dimension (DeepSeek-V3's activation tiles).
    pub const fn blocks_1x128() -> Self {
        Self::Blocks {
            rows: 1,
            cols: 128,
            rule: ScaleRule::Float { margin: 0 },
        }
    }

    /// 128 x 128 blocks (DeepSeek-V3's weight blocks).
    pub const fn blocks_128x128() -> Self {
        Self::Blocks {
            rows: 128,
            cols: 128,
            rule: ScaleRule::Float { margin: 0 },
        }
    }

    /// OCP MX: 32 values along the last dimension share an E8M0 (power-of-two) scale.
    pub const fn mx() -> Self {
        Self::Blocks {
            rows: 1,
            cols: 32,
            rule: ScaleRule::E8M0,
        }
    }

    /// The same blocks with another scale rule.
    pub fn with_rule(self, rule: ScaleRule) -> Self {
        match self {
            Self::Unscaled => Self::Unscaled,
            Self::PerTensor { .. } => Self::PerTensor { rule },
            Self::Blocks { rows, cols, .. } => Self::Blocks { rows, cols, rule },
        }
    }

    /// The scale rule, if any.
    pub fn rule(&self) -> Option<ScaleRule> {
        match self {
            Self::Unscaled => None,
            Self::PerTensor { rule } | Self::Blocks { rule, .. } => Some(*rule),
        }
    }

    /// The block layout over a tensor of `shape`.
    ///
    /// # Errors
    /// [`Fp8Error::TooLarge`] past 2^32 - 1 elements, [`Fp8Error::InvalidRecipe`] for an
    /// empty block.
    pub fn layout(&self, shape: &Shape) -> Result<BlockLayout, Fp8Error> {
        let len = shape.num_elements();
        let len32 = u32::try_from(len).map_err(|_| Fp8Error::TooLarge(len))?;
        let last = shape.iter().last().copied().unwrap_or(1).max(1) as u32;
        Ok(match *self {
            Self::Unscaled | Self::PerTensor { .. } => BlockLayout::per_tensor(len32),
            Self::Blocks { rows, cols, .. } => {
                if rows == 0 || cols == 0 {
                    return Err(Fp8Error::InvalidRecipe(format!(
                        "blocks of {rows} x {cols}: both sides must be at least 1"
                    )));
                }
                let clamp = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
                BlockLayout::blocks(len32, last, clamp(rows), clamp(cols))
            }
        })
    }
}

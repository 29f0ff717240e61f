//! Dtype policies: which float dtype variables live in, which one the heavy ops compute in,
//! and which one the model hands back.
//!
//! A [`Policy`] is the Keras idea (`keras.mixed_precision.Policy`) with jmp's third field:
//!
//! | name             | variable dtype | compute dtype | output dtype |
//! |------------------|----------------|---------------|--------------|
//! | `float32`        | f32            | f32           | f32          |
//! | `float16`        | f16            | f16           | f16          |
//! | `bfloat16`       | bf16           | bf16          | bf16         |
//! | `mixed_float16`  | f32            | f16           | f32          |
//! | `mixed_bfloat16` | f32            | bf16          | f32          |
//!
//! Any other combination is written the jmp way,
//! `params=float32,compute=bfloat16,output=float32`.
//!
//! Keras' FP8 policies put a name after `float8_from_`: `float8_from_mixed_bfloat16` and
//! `float8_from_mixed_float16` are those mixed policies, with every matmul, linear and
//! convolution fed E4M3 inputs in the forward pass and an E5M2 gradient in the backward
//! pass (see [`crate::fp8::training`]). In a spec, the key `fp8=` picks the scaling
//! (`tensor`, `blockwise`, `delayed` with `history=`, `margin=`, `amax=`, or `bias` with
//! `drift=`), `format=auto` lets each tensor pick E4M3 or E5M2, and `grads=aps` (or
//! `aps_shp`) compresses parameter gradients with APS's per-layer scales.
//!
//! The key `kernels=` says whose kernels run a mixed policy's casts, products and the ops
//! around them: burn-amp's where the backend has them (`auto`, the default: on Flex, a GEMM
//! that rounds operands while packing them for matmuls, linears and convolutions,
//! vectorised casts, and one-op softmax, layer norm, activations, arithmetic and dropout
//! masks with their own backward passes), or always the backend's own ops (`backend`, for
//! comparisons).
//!
//! This module holds values only. Which policy an op runs under is decided in one place,
//! the crate's context: a scoped override ([`with_policy`](crate::with_policy)) wins over a
//! per-device policy ([`MixedPrecision::set_policy`](crate::MixedPrecision::set_policy)),
//! which wins over the global one ([`set_global_policy`](crate::set_global_policy)). With
//! none of them set the policy is `float32`, as in Keras, and
//! [`MixedPrecision`](crate::MixedPrecision) casts nothing that is already f32.

mod error;
mod names;
mod parse;

pub use error::PolicyError;
pub use parse::IntoPolicy;

use burn_tensor::FloatDType;

use crate::fp8::{Fp8Formats, Fp8Scaling, GradientCompression};

/// Whose kernels run a policy's casts, products and the ops around them (spec key
/// `kernels=`).
///
/// ```
/// use burn_amp::{Policy, policy::Kernels};
///
/// let policy: Policy = "params=float32,compute=bfloat16,output=float32,kernels=backend".parse()?;
/// assert_eq!(policy.kernels(), Kernels::Backend);
/// assert_eq!(policy, Policy::mixed_bfloat16().with_kernels(Kernels::Backend));
/// assert_eq!(Policy::mixed_bfloat16().kernels(), Kernels::Auto);
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Kernels {
    /// burn-amp's kernels where the backend has them, the backend's ops elsewhere. On Flex
    /// (with or without `Autodiff`): casts by vectorised, threaded conversions, and
    /// matmuls and linears in the compute dtype by a GEMM that reads operands of any float
    /// dtype and rounds them while packing, so a weight's cast costs no pass of its own.
    #[default]
    Auto,
    /// Always the inner backend's ops: each cast a separate op, then the backend's matmul
    /// (what `MixedPrecision` did before it had kernels of its own).
    Backend,
}

impl Kernels {
    /// The name in specs: `auto` or `backend`.
    pub fn name(self) -> &'static str {
        match self {
            Kernels::Auto => "auto",
            Kernels::Backend => "backend",
        }
    }
}

/// A dtype policy: the variable, compute and output dtypes of a model.
///
/// Build one from its Keras name, from a jmp-style spec, or with the constructors:
///
/// ```
/// use burn_amp::Policy;
/// use burn_tensor::FloatDType;
///
/// let policy: Policy = "mixed_float16".parse()?;
/// assert_eq!(policy.variable_dtype(), FloatDType::F32);
/// assert_eq!(policy.compute_dtype(), FloatDType::F16);
/// assert_eq!(policy.output_dtype(), FloatDType::F32);
/// assert_eq!(policy, Policy::mixed_float16());
///
/// let custom: Policy = "params=float32,compute=bfloat16,output=bfloat16".parse()?;
/// assert_eq!(custom.to_string(), "params=float32,compute=bfloat16,output=bfloat16");
///
/// let err = "mixed_float61".parse::<Policy>().unwrap_err();
/// assert!(err.to_string().contains("mixed_float16"));
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    variable: FloatDType,
    compute: FloatDType,
    output: FloatDType,
    fp8: Option<Fp8Scaling>,
    formats: Fp8Formats,
    grads: GradientCompression,
    kernels: Kernels,
}

impl Policy {
    /// Every policy name the crate documents, in the order its errors list them: Keras'
    /// `float32`, `float16`, `bfloat16`, `mixed_float16` and `mixed_bfloat16`, then the FP8
    /// `float8_from_mixed_bfloat16` and `float8_from_mixed_float16`. Each parses, and the
    /// policy prints as its name: a command line can offer them as its choices.
    ///
    /// ```
    /// use burn_amp::Policy;
    ///
    /// for name in Policy::NAMES {
    ///     let policy: Policy = name.parse()?;
    ///     assert_eq!(policy.to_string(), *name);
    /// }
    /// assert!(Policy::NAMES.contains(&"mixed_bfloat16"));
    /// # Ok::<(), burn_amp::PolicyError>(())
    /// ```
    pub const NAMES: &'static [&'static str] = &names::NAMES;

    /// Everything in f32: the default, and a pure pass-through for f32 tensors.
    pub const fn float32() -> Self {
        Self::from_dtypes(FloatDType::F32, FloatDType::F32, FloatDType::F32)
    }

    /// Everything in f16, variables included (Keras' `"float16"`).
    pub const fn float16() -> Self {
        Self::from_dtypes(FloatDType::F16, FloatDType::F16, FloatDType::F16)
    }

    /// Everything in bf16, variables included (Keras' `"bfloat16"`).
    pub const fn bfloat16() -> Self {
        Self::from_dtypes(FloatDType::BF16, FloatDType::BF16, FloatDType::BF16)
    }

    /// f32 variables, f16 compute, f32 outputs (Keras' `"mixed_float16"`). Train it with a
    /// loss scale: f16 gradients underflow below 2^-24.
    pub const fn mixed_float16() -> Self {
        Self::from_dtypes(FloatDType::F32, FloatDType::F16, FloatDType::F32)
    }

    /// f32 variables, bf16 compute, f32 outputs (Keras' `"mixed_bfloat16"`). bf16 has f32's
    /// exponent range, so no loss scale is needed.
    pub const fn mixed_bfloat16() -> Self {
        Self::from_dtypes(FloatDType::F32, FloatDType::BF16, FloatDType::F32)
    }

    /// `mixed_bfloat16` with FP8 matmuls (Keras' `"float8_from_mixed_bfloat16"`): E4M3
    /// inputs forward, E5M2 gradients backward, per-tensor current scaling.
    pub const fn float8_from_mixed_bfloat16() -> Self {
        Self::mixed_bfloat16().with_fp8_scaling(Fp8Scaling::PerTensor)
    }

    /// `mixed_float16` with FP8 matmuls (Keras' `"float8_from_mixed_float16"`); train it
    /// with a loss scale, as `mixed_float16`.
    pub const fn float8_from_mixed_float16() -> Self {
        Self::mixed_float16().with_fp8_scaling(Fp8Scaling::PerTensor)
    }

    /// The same dtypes, with FP8 matmuls scaled by `scaling`.
    pub const fn with_fp8_scaling(mut self, scaling: Fp8Scaling) -> Self {
        self.fp8 = Some(scaling);
        self
    }

    /// The same dtypes, without FP8 (the policy an FP8 policy is "from"); gradient
    /// compression, which is not FP8 matmuls, stays.
    pub const fn without_fp8(mut self) -> Self {
        self.fp8 = None;
        self.formats = Fp8Formats::Hybrid;
        self
    }

    /// How matmuls, linears and convolutions are scaled into FP8, or `None` when they run
    /// in the compute dtype.
    pub fn fp8_scaling(&self) -> Option<Fp8Scaling> {
        self.fp8
    }

    /// The same policy with FP8 formats chosen by `formats` (spec key `format=`).
    pub const fn with_fp8_formats(mut self, formats: Fp8Formats) -> Self {
        self.formats = formats;
        self
    }

    /// Which FP8 format each tensor is rounded to (hybrid unless `format=auto`).
    pub fn fp8_formats(&self) -> Fp8Formats {
        self.formats
    }

    /// The same policy with parameter gradients compressed by `grads` (spec key `grads=`).
    pub const fn with_gradient_compression(mut self, grads: GradientCompression) -> Self {
        self.grads = grads;
        self
    }

    /// How [`LossScaleOptimizer`](crate::LossScaleOptimizer) compresses parameter gradients
    /// before the update (none unless `grads=aps` or `grads=aps_shp`).
    pub fn gradient_compression(&self) -> GradientCompression {
        self.grads
    }

    /// The same policy with its casts, matmuls and linears run by `kernels` (spec key
    /// `kernels=`).
    pub const fn with_kernels(mut self, kernels: Kernels) -> Self {
        self.kernels = kernels;
        self
    }

    /// Whose kernels run the policy's casts, matmuls and linears.
    pub fn kernels(&self) -> Kernels {
        self.kernels
    }

    /// A policy from its three dtypes.
    ///
    /// # Errors
    /// [`PolicyError::InvalidSpec`] when a dtype is not one of f32, f16 and bf16.
    pub fn new(
        variable: FloatDType,
        compute: FloatDType,
        output: FloatDType,
    ) -> Result<Self, PolicyError> {
        for (field, dtype) in [
            ("params", variable),
            ("compute", compute),
            ("output", output),
        ] {
            if parse::dtype_name(dtype).is_none() {
                return Err(PolicyError::InvalidSpec {
                    spec: format!("{field}={dtype:?}"),
                    reason: format!(
                        "{dtype:?} is not a policy dtype; use float32, float16 or bfloat16"
                    ),
                });
            }
        }
        Ok(Self::from_dtypes(variable, compute, output))
    }

    const fn from_dtypes(variable: FloatDType, compute: FloatDType, output: FloatDType) -> Self {
        Self {
            variable,
            compute,
            output,
            fp8: None,
            formats: Fp8Formats::Hybrid,
            grads: GradientCompression::None,
            kernels: Kernels::Auto,
        }
    }

    /// The dtype parameters are created and kept in (Keras' `variable_dtype`).
    pub fn variable_dtype(&self) -> FloatDType {
        self.variable
    }

    /// The dtype matmuls, linears, convolutions and attention run in (Keras' `compute_dtype`).
    pub fn compute_dtype(&self) -> FloatDType {
        self.compute
    }

    /// The dtype a model's output and its loss are handed back in (jmp's `output_dtype`).
    pub fn output_dtype(&self) -> FloatDType {
        self.output
    }

    /// The policy's name: its Keras name where it has one, else its jmp-style spec.
    /// Parsing the name gives the same policy back.
    pub fn name(&self) -> String {
        self.to_string()
    }

    /// Whether any dtype of the policy is narrower than f32, FP8 included.
    pub fn is_reduced_precision(&self) -> bool {
        self.fp8.is_some()
            || self.grads != GradientCompression::None
            || [self.variable, self.compute, self.output]
                .iter()
                .any(|d| matches!(d, FloatDType::F16 | FloatDType::BF16))
    }

    /// Whether gradients need a loss scale to survive: true when the compute dtype is f16,
    /// whose smallest subnormal is 2^-24. bf16 shares f32's exponent range and needs none.
    pub fn needs_loss_scaling(&self) -> bool {
        self.compute == FloatDType::F16 || self.variable == FloatDType::F16
    }

    /// The same policy with f16 and bf16 swapped everywhere (FP8 kept): the nearest policy
    /// for a device that lacks one of the two.
    pub(crate) fn with_16_bit_formats_swapped(&self) -> Self {
        let swap = |d: FloatDType| match d {
            FloatDType::F16 => FloatDType::BF16,
            FloatDType::BF16 => FloatDType::F16,
            other => other,
        };
        Self {
            variable: swap(self.variable),
            compute: swap(self.compute),
            output: swap(self.output),
            ..*self
        }
    }

    /// The dtypes a device must support for this policy, without duplicates.
    pub(crate) fn required_dtypes(&self) -> Vec<FloatDType> {
        let mut out = Vec::with_capacity(3);
        for d in [self.variable, self.compute, self.output] {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        out
    }
}

impl Default for Policy {
    /// `float32`, the policy in force when none is set (as in Keras).
    fn default() -> Self {
        Self::float32()
    }
}

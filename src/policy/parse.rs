//! Policy names: Keras' five names and jmp's `params=…,compute=…,output=…` specs, both ways.

use core::fmt;
use core::str::FromStr;

use burn_tensor::FloatDType;

use super::{Policy, PolicyError};
use crate::fp8::Fp8Scaling;

/// The Keras policy names [`Policy`] parses.
pub(crate) const VALID_NAMES: [&str; 5] = [
    "float32",
    "float16",
    "bfloat16",
    "mixed_float16",
    "mixed_bfloat16",
];

/// The FP8 policies, shown in errors (any name of [`VALID_NAMES`] after `float8_from_`
/// parses too).
pub(crate) const FP8_NAMES: [&str; 2] = ["float8_from_mixed_bfloat16", "float8_from_mixed_float16"];

/// The prefix of Keras' FP8 policy names.
const FP8_PREFIX: &str = "float8_from_";

/// An example of the jmp-style spec, shown in errors.
pub(crate) const SPEC_EXAMPLE: &str = "params=float32,compute=bfloat16,output=float32";

/// What a spec may hold, shown in every spec error: its keys, the dtype spellings, the FP8
/// scalings.
pub(crate) const SPEC_HELP: &str = "a spec is key=value pairs joined by commas, such as \
    \"params=float32,compute=bfloat16,output=float32\"; keys: params (or param, p), \
    compute (or c), output (or o), fp8; dtypes: float32 (or f32, full), float16 (or f16, \
    half), bfloat16 (or bf16); fp8: tensor (or per_tensor), blockwise (or block, blocks), \
    none; a missing dtype key means float32";

fn named(name: &str) -> Option<Policy> {
    if let Some(base) = name.strip_prefix(FP8_PREFIX) {
        return named_dtypes(base).map(|p| p.with_fp8_scaling(Fp8Scaling::PerTensor));
    }
    named_dtypes(name)
}

fn named_dtypes(name: &str) -> Option<Policy> {
    Some(match name {
        "float32" => Policy::float32(),
        "float16" => Policy::float16(),
        "bfloat16" => Policy::bfloat16(),
        "mixed_float16" => Policy::mixed_float16(),
        "mixed_bfloat16" => Policy::mixed_bfloat16(),
        _ => return None,
    })
}

/// The name a dtype has in policy strings, or `None` for dtypes a policy cannot use.
pub(crate) fn dtype_name(dtype: FloatDType) -> Option<&'static str> {
    match dtype {
        FloatDType::F32 => Some("float32"),
        FloatDType::F16 => Some("float16"),
        FloatDType::BF16 => Some("bfloat16"),
        _ => None,
    }
}

fn parse_dtype(name: &str) -> Option<FloatDType> {
    match name {
        "float32" | "f32" | "full" => Some(FloatDType::F32),
        "float16" | "f16" | "half" => Some(FloatDType::F16),
        "bfloat16" | "bf16" => Some(FloatDType::BF16),
        _ => None,
    }
}

fn parse_spec(spec: &str) -> Result<Policy, PolicyError> {
    let invalid = |reason: String| PolicyError::InvalidSpec {
        spec: spec.to_string(),
        reason,
    };
    let mut fields: [Option<FloatDType>; 3] = [None; 3];
    let mut fp8 = None;
    for part in spec.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("{part:?} is not of the form key=dtype")))?;
        if key.trim() == "fp8" {
            let value = value.trim();
            let scaling = match value {
                "none" => None,
                other => Some(Fp8Scaling::from_name(other).ok_or_else(|| {
                    invalid(format!(
                        "unknown fp8 scaling {other:?}; use tensor, blockwise or none"
                    ))
                })?),
            };
            if fp8.replace(scaling).is_some() {
                return Err(invalid("key \"fp8\" is given twice".into()));
            }
            continue;
        }
        let slot = match key.trim() {
            "params" | "param" | "p" => 0,
            "compute" | "c" => 1,
            "output" | "o" => 2,
            other => {
                return Err(invalid(format!(
                    "unknown key {other:?}; the keys are params, compute, output and fp8"
                )));
            }
        };
        let value = value.trim();
        let dtype = parse_dtype(value)
            .ok_or_else(|| invalid(format!("unknown dtype {value:?} for key {:?}", key.trim())))?;
        if fields[slot].replace(dtype).is_some() {
            return Err(invalid(format!("key {:?} is given twice", key.trim())));
        }
    }
    let [p, c, o] = fields.map(|f| f.unwrap_or(FloatDType::F32));
    let policy = Policy::new(p, c, o)?;
    Ok(match fp8.flatten() {
        Some(scaling) => policy.with_fp8_scaling(scaling),
        None => policy,
    })
}

impl FromStr for Policy {
    type Err = PolicyError;

    /// Parses a Keras name (`"mixed_float16"`) or a jmp-style spec
    /// (`"params=float32,compute=float16,output=float32"`; keys may be shortened to `p`, `c`,
    /// `o`, dtypes to `f32`, `f16`, `bf16`; a missing key means float32).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(policy) = named(s) {
            return Ok(policy);
        }
        if s.contains('=') {
            return parse_spec(s);
        }
        Err(PolicyError::UnknownName {
            name: s.to_string(),
        })
    }
}

impl fmt::Display for Policy {
    /// Writes the Keras name where the policy has one (`float8_from_…` for per-tensor FP8),
    /// else its jmp-style spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = self.without_fp8();
        let keras = VALID_NAMES
            .iter()
            .find(|n| named_dtypes(n).as_ref() == Some(&base));
        match (keras, self.fp8) {
            (Some(name), None) => return f.write_str(name),
            (Some(name), Some(Fp8Scaling::PerTensor)) => {
                return write!(f, "{FP8_PREFIX}{name}");
            }
            _ => {}
        }
        let name = |d| dtype_name(d).unwrap_or("float32");
        write!(
            f,
            "params={},compute={},output={}",
            name(self.variable),
            name(self.compute),
            name(self.output)
        )?;
        match self.fp8 {
            Some(scaling) => write!(f, ",fp8={scaling}"),
            None => Ok(()),
        }
    }
}

/// Anything a policy can be given as: a [`Policy`], or its name as `&str` or `String`.
pub trait IntoPolicy {
    /// The policy, or why the value is not one.
    fn into_policy(self) -> Result<Policy, PolicyError>;
}

impl IntoPolicy for Policy {
    fn into_policy(self) -> Result<Policy, PolicyError> {
        Ok(self)
    }
}

impl IntoPolicy for &str {
    fn into_policy(self) -> Result<Policy, PolicyError> {
        self.parse()
    }
}

impl IntoPolicy for String {
    fn into_policy(self) -> Result<Policy, PolicyError> {
        self.parse()
    }
}

impl IntoPolicy for &String {
    fn into_policy(self) -> Result<Policy, PolicyError> {
        self.parse()
    }
}

//! Policy names: Keras' five names and jmp's `params=…,compute=…,output=…` specs, both ways.

use core::fmt;
use core::str::FromStr;

use burn_tensor::FloatDType;

use super::names::{FP8_PREFIX, VALID_NAMES, nearest_name};
use super::{Kernels, Policy, PolicyError};
use crate::fp8::{
    AmaxCompute, DelayedRecipe, ExponentBiasRecipe, Fp8Formats, Fp8Scaling, GradientCompression,
};

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

/// The FP8 keys of a spec, as given.
#[derive(Default)]
struct Fp8Keys {
    scaling: Option<Option<Fp8Scaling>>,
    history: Option<u32>,
    margin: Option<u32>,
    amax: Option<AmaxCompute>,
    drift: Option<u32>,
    formats: Option<Fp8Formats>,
    grads: Option<GradientCompression>,
    kernels: Option<Kernels>,
}

/// Stores `value` in `slot`; `twice()` when the slot already held one (a key given twice,
/// perhaps under another of its names).
fn set_once<T, E>(slot: &mut Option<T>, value: T, twice: impl FnOnce() -> E) -> Result<(), E> {
    match slot.replace(value) {
        None => Ok(()),
        Some(_) => Err(twice()),
    }
}

fn parse_spec(spec: &str) -> Result<Policy, PolicyError> {
    let invalid = |reason: String| PolicyError::InvalidSpec {
        spec: spec.to_string(),
        reason,
    };
    let mut fields: [Option<FloatDType>; 3] = [None; 3];
    let mut keys = Fp8Keys::default();
    for part in spec.split(',') {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| invalid(format!("{part:?} is not of the form key=value")))?;
        let (key, value) = (key.trim(), value.trim());
        let twice = || invalid(format!("key {key:?} is given twice"));
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| invalid(format!("{key}={value:?} is not a whole number")))
        };
        match key {
            "fp8" => {
                let scaling = match value {
                    "none" => None,
                    other => Some(Fp8Scaling::from_name(other).ok_or_else(|| {
                        invalid(format!(
                            "unknown fp8 scaling {other:?}; use tensor, blockwise, delayed, \
                             bias or none"
                        ))
                    })?),
                };
                set_once(&mut keys.scaling, scaling, twice)?;
            }
            "history" | "amax_history_len" | "amax_history_length" => {
                let n = number()?;
                if n == 0 {
                    return Err(invalid(
                        "history=0: an amax history holds at least 1 step".into(),
                    ));
                }
                set_once(&mut keys.history, n, twice)?;
            }
            "margin" => {
                let n = number()?;
                if n > 64 {
                    return Err(invalid(format!(
                        "margin={n}: at most 64 binades of headroom"
                    )));
                }
                set_once(&mut keys.margin, n, twice)?;
            }
            "amax" | "amax_compute_algo" => {
                let amax = match value {
                    "max" => AmaxCompute::Max,
                    "most_recent" => AmaxCompute::MostRecent,
                    other => {
                        return Err(invalid(format!(
                            "unknown amax rule {other:?}; use max or most_recent"
                        )));
                    }
                };
                set_once(&mut keys.amax, amax, twice)?;
            }
            "drift" => {
                let n = number()?;
                set_once(&mut keys.drift, n, twice)?;
            }
            "format" | "fp8_format" => {
                let formats = match value {
                    "hybrid" => Fp8Formats::Hybrid,
                    "auto" => Fp8Formats::Auto,
                    other => {
                        return Err(invalid(format!(
                            "unknown fp8 format choice {other:?}; use hybrid or auto"
                        )));
                    }
                };
                set_once(&mut keys.formats, formats, twice)?;
            }
            "grads" => {
                let grads = GradientCompression::from_name(value).ok_or_else(|| {
                    invalid(format!(
                        "unknown gradient compression {value:?}; use aps, aps_shp or none"
                    ))
                })?;
                set_once(&mut keys.grads, grads, twice)?;
            }
            "kernels" => {
                let kernels = match value {
                    "auto" => Kernels::Auto,
                    "backend" => Kernels::Backend,
                    other => {
                        return Err(invalid(format!(
                            "unknown kernels {other:?}; use auto or backend"
                        )));
                    }
                };
                set_once(&mut keys.kernels, kernels, twice)?;
            }
            _ => {
                let slot = match key {
                    "params" | "param" | "p" => 0,
                    "compute" | "c" => 1,
                    "output" | "o" => 2,
                    other => {
                        return Err(invalid(format!(
                            "unknown key {other:?}; the keys are params, compute, output, fp8, \
                             history, margin, amax, drift, format, grads and kernels"
                        )));
                    }
                };
                let dtype = parse_dtype(value)
                    .ok_or_else(|| invalid(format!("unknown dtype {value:?} for key {key:?}")))?;
                set_once(&mut fields[slot], dtype, twice)?;
            }
        }
    }
    let [p, c, o] = fields.map(|f| f.unwrap_or(FloatDType::F32));
    let policy = Policy::new(p, c, o)?;
    let scaling = fp8_scaling(&keys).map_err(invalid)?;
    if keys.formats.is_some() && scaling.is_none() {
        return Err(invalid("format= needs an fp8= scaling".into()));
    }
    let policy = match scaling {
        Some(scaling) => policy.with_fp8_scaling(scaling),
        None => policy,
    };
    Ok(policy
        .with_fp8_formats(keys.formats.unwrap_or_default())
        .with_gradient_compression(keys.grads.unwrap_or_default())
        .with_kernels(keys.kernels.unwrap_or_default()))
}

/// The scaling the keys describe; a setting of another scaling than the one named is an
/// error, not silently ignored.
fn fp8_scaling(keys: &Fp8Keys) -> Result<Option<Fp8Scaling>, String> {
    let scaling = keys.scaling.flatten();
    let delayed_keys = keys.history.is_some() || keys.margin.is_some() || keys.amax.is_some();
    Ok(match scaling {
        Some(Fp8Scaling::Delayed(default)) => {
            if keys.drift.is_some() {
                return Err("drift= belongs to fp8=bias, not fp8=delayed".into());
            }
            Some(Fp8Scaling::Delayed(DelayedRecipe {
                history: keys.history.unwrap_or(default.history),
                margin: keys.margin.unwrap_or(default.margin),
                amax: keys.amax.unwrap_or(default.amax),
            }))
        }
        Some(Fp8Scaling::ExponentBias(default)) => {
            if delayed_keys {
                return Err("history=, margin= and amax= belong to fp8=delayed".into());
            }
            Some(Fp8Scaling::ExponentBias(ExponentBiasRecipe {
                drift: keys.drift.unwrap_or(default.drift),
            }))
        }
        other => {
            if delayed_keys || keys.drift.is_some() {
                return Err(
                    "history=, margin= and amax= need fp8=delayed; drift= needs fp8=bias".into(),
                );
            }
            other
        }
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
            suggestion: nearest_name(s),
        })
    }
}

impl fmt::Display for Policy {
    /// Writes the Keras name where the policy has one (`float8_from_…` for per-tensor FP8),
    /// else its jmp-style spec with its FP8 keys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let base = self.without_fp8();
        let keras = VALID_NAMES
            .iter()
            .find(|n| named_dtypes(n).as_ref() == Some(&base));
        let plain = self.formats == Fp8Formats::Hybrid
            && self.grads == GradientCompression::None
            && self.kernels == Kernels::Auto;
        match (keras, self.fp8) {
            (Some(name), None) if plain => return f.write_str(name),
            (Some(name), Some(Fp8Scaling::PerTensor)) if plain => {
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
        if let Some(scaling) = self.fp8 {
            write!(f, ",fp8={scaling}")?;
        }
        if self.formats != Fp8Formats::Hybrid {
            write!(f, ",format={}", self.formats.name())?;
        }
        if self.grads != GradientCompression::None {
            write!(f, ",grads={}", self.grads.name())?;
        }
        if self.kernels != Kernels::Auto {
            write!(f, ",kernels={}", self.kernels.name())?;
        }
        Ok(())
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

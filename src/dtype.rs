//! `with_float!`: a body generic over the float element, run with the Rust type of a
//! tensor's dtype. Every kernel family (CPU, CubeCL) dispatches through it.

/// Runs `$body` with `$F` bound to the Rust type of the float dtype `$dtype` (f32, f16,
/// bf16; CubeCL's `Flex32` is stored as f32). Another dtype evaluates `$other` when given,
/// else panics naming it: the callers' own checks keep other dtypes away.
macro_rules! with_float {
    ($dtype:expr, $F:ident => $body:expr, _ => $other:expr) => {
        match $dtype {
            burn_tensor::DType::F32 | burn_tensor::DType::Flex32 => {
                type $F = f32;
                $body
            }
            burn_tensor::DType::F16 => {
                type $F = half::f16;
                $body
            }
            burn_tensor::DType::BF16 => {
                type $F = half::bf16;
                $body
            }
            _ => $other,
        }
    };
    ($dtype:expr, $F:ident => $body:expr) => {{
        let dtype = $dtype;
        $crate::dtype::with_float!(dtype, $F => $body, _ => panic!(
            "burn-amp's kernels take f32, f16 or bf16 tensors, not {dtype:?}"
        ))
    }};
}
pub(crate) use with_float;

//! The two macros the op families are written with: `forward!` hands an op to the inner
//! backend untouched, `autocast!` first applies one of the casting rules of
//! `crate::backend::autocast`. Each takes a table of signatures, one line an op.

/// Generates ops that call the inner backend's op of the same name with the same arguments,
/// so every fast path of the inner backend is kept. `=> post` applies `post` to the result
/// (used to re-tag a `TensorPrimitive<B>` as `TensorPrimitive<MixedPrecision<B>>`).
macro_rules! forward {
    ($inner:ident; $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? $(=> $post:path)? ; )*) => {
        $(
            #[inline]
            #[allow(unused_parens)]
            fn $name( $($arg : $ty),* ) $(-> $ret)? {
                let _op = $crate::cost::forwarded(stringify!($name));
                $( $post )? ( $inner::$name( $($arg),* ) )
            }
        )*
    };
}

/// Generates ops that pass their leading float-tensor arguments through a casting rule
/// (`to_compute`, `to_f32`, `to_widest`, `to_dtype_of_first`) before calling the inner
/// backend. `fn float_sum_dim(tensor; dim: usize) -> FloatTensor<Self>` reads: `tensor` is
/// a float tensor subject to the rule, `dim` is passed as it is.
macro_rules! autocast {
    ($inner:ident; $( $rule:ident fn $name:ident ( $($cast:ident),+ $(; $($arg:ident : $ty:ty),* )? ) -> $ret:ty ; )*) => {
        $(
            #[inline]
            fn $name( $($cast : FloatTensor<Self>,)+ $($($arg : $ty),*)? ) -> $ret {
                let policy = $crate::backend::autocast::policy_of::<$inner>([$(&$cast),+][0]);
                let [$($cast),+] = $crate::backend::autocast::$rule::<$inner, _>([$($cast),+], &policy);
                let runs_in = burn_tensor::TensorMetadata::dtype([$(&$cast),+][0]);
                let _op = $crate::cost::op($crate::backend::autocast::class::$rule, stringify!($name), Some(runs_in));
                $inner::$name( $($cast,)+ $($($arg),*)? )
            }
        )*
    };
}

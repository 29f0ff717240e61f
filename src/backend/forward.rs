//! The two macros the op families are written with: `forward!` hands an op to the inner
//! backend untouched, `autocast!` first applies one of the casting rules of
//! `crate::backend::autocast`. Each takes a table of signatures, one line an op; each op file
//! names its tables (`macro_rules! float_forwarded { ($then:ident) => { $then! { .. } } }`),
//! so that one table makes both the ops (`float_forwarded!(forward)`) and their rows of the
//! class table (`float_forwarded!(forward_classes)`), and no op can be left out of the cost
//! report.

/// Generates ops that call the inner backend's op of the same name with the same arguments,
/// so every fast path of the inner backend is kept. `=> post` applies `post` to the result
/// (used to re-tag a `TensorPrimitive<B>` as `TensorPrimitive<MixedPrecision<B>>`). A line
/// marked `#[read]` is a read back to the host, `#[query]` touches no values (see
/// [`counted!`]).
macro_rules! forward {
    ($inner:ident; $( $(#[$how:ident])? fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? $(=> $post:path)? ; )*) => {
        $(
            #[inline]
            #[allow(unused_parens)]
            fn $name( $($arg : $ty),* ) $(-> $ret)? {
                let _op = $crate::cost::counted(stringify!($name), counted!($($how)?));
                $( $post )? ( $inner::$name( $($arg),* ) )
            }
        )*
    };
}

/// How the cost report counts a `forward!` line: as a forwarded op, or, marked `#[read]`, as
/// a read back to the host the user made, or, marked `#[query]` (a device, a flag), not at
/// all.
macro_rules! counted {
    () => {
        $crate::cost::Counted::Op($crate::cost::OpClass::Forwarded)
    };
    (read) => {
        $crate::cost::Counted::UserRead
    };
    (query) => {
        $crate::cost::Counted::Query
    };
}

/// The class table's rows of a `forward!` table: `(name, how it is counted)`.
macro_rules! forward_classes {
    ($inner:ident; $( $(#[$how:ident])? fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)? $(=> $post:path)? ; )*) => {
        [$( (stringify!($name), counted!($($how)?)) ),*]
    };
}

/// The class table's rows of an `autocast!` table: each op in its rule's class.
macro_rules! autocast_classes {
    ($inner:ident; $( $rule:ident fn $name:ident ( $($cast:ident),+ $(; $($arg:ident : $ty:ty),* )? ) -> $ret:ty ; )*) => {
        [$( (stringify!($name), $crate::cost::Counted::Op($crate::backend::autocast::class::$rule)) ),*]
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
                let op = $crate::context::of::<$inner>([$(&$cast),+][0]);
                let [$($cast),+] = $crate::backend::autocast::$rule::<$inner, _>([$($cast),+], &op);
                let runs_in = burn_tensor::TensorMetadata::dtype([$(&$cast),+][0]);
                let _op = $crate::cost::op($crate::backend::autocast::class::$rule, stringify!($name), Some(runs_in));
                $inner::$name( $($cast,)+ $($($arg),*)? )
            }
        )*
    };
}

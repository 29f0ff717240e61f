//! One file per Burn op trait, named as in `burn-autodiff`. Each file also gives its rows of
//! the class table ([`op_classes`]): the ops it writes out, then its `forward!` and
//! `autocast!` tables, read from the same tables that make the ops.

mod activation;
mod bool_tensor;
mod int_tensor;
mod module;
mod qtensor;
mod tensor;
mod transaction;

use crate::cost::Counted;

/// The class table: every op of Burn's backend traits that
/// [`MixedPrecision`](crate::MixedPrecision) implements, with how the cost report
/// ([`cost`](crate::cost)) counts it, sorted by name.
///
/// ```
/// use burn_amp::cost::{Counted, OpClass};
///
/// let table = burn_amp::op_classes();
/// let class = |op| table.iter().find(|(name, _)| *name == op).map(|(_, how)| *how);
/// assert_eq!(class("float_matmul"), Some(Counted::Op(OpClass::Compute)));
/// assert_eq!(class("softmax"), Some(Counted::Op(OpClass::Float32)));
/// assert_eq!(class("float_into_data"), Some(Counted::UserRead));
/// ```
pub fn op_classes() -> Vec<(&'static str, Counted)> {
    let mut rows = [
        activation::classes(),
        bool_tensor::classes(),
        int_tensor::classes(),
        module::classes(),
        qtensor::classes(),
        tensor::classes(),
        transaction::classes(),
    ]
    .concat();
    rows.sort_unstable_by_key(|(name, _)| *name);
    rows
}

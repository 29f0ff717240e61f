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

use burn_tensor::DType;
use burn_tensor::backend::Backend;

use crate::context::{self, Fp8Use, OpContext};
use crate::cost::{self, Counted, OpClass, OpRow};

/// A compute-class op written out by hand (not in a `forward!`/`autocast!` table): its row
/// of the class table and whether its products go through the FP8 site under an FP8
/// policy, stated once, beside the op; the op and its file's list of written ops (the
/// class table's rows) both read it.
#[derive(Clone, Copy, Debug)]
struct ComputeOp {
    row: OpRow,
    fp8: Fp8Use,
}

impl ComputeOp {
    /// An op whose products run in FP8 under an FP8 policy.
    const fn fp8(name: &'static str) -> Self {
        Self {
            row: OpRow::new(name, OpClass::Compute),
            fp8: Fp8Use::Site,
        }
    }

    /// An op that stays in the compute dtype under an FP8 policy.
    const fn no_fp8(name: &'static str) -> Self {
        Self {
            row: OpRow::new(name, OpClass::Compute),
            fp8: Fp8Use::Never,
        }
    }

    /// The op's name.
    const fn name(self) -> &'static str {
        self.row.name
    }

    /// What the op runs under on `device`.
    fn resolve<B: Backend>(self, device: &B::Device) -> OpContext<B> {
        context::resolve::<B>(device, self.fp8)
    }

    /// Counts the op in the cost report (and times it), running in `dtype`.
    fn record(self, dtype: Option<DType>) -> cost::Timed {
        self.row.record(dtype)
    }
}

/// The class table's rows of the ops a file writes out by hand, then of its tables.
fn rows(
    written: &[OpRow],
    tables: impl IntoIterator<Item = (&'static str, Counted)>,
) -> Vec<(&'static str, Counted)> {
    written.iter().map(|op| op.row()).chain(tables).collect()
}

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

//! `TransactionOps`: a batch of reads goes to the inner backend in one transaction.

use burn_tensor::backend::{Backend, ExecutionError};
use burn_tensor::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};

use crate::MixedPrecision;
use crate::cost::{self, Counted};

impl<B: Backend> TransactionOps<Self> for MixedPrecision<B> {
    async fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> Result<TransactionPrimitiveData, ExecutionError> {
        cost::user_read();
        B::tr_execute(TransactionPrimitive::new(
            transaction.read_floats,
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        ))
        .await
    }
}

/// The class table's row of `TransactionOps`: a batch of reads, one read back to the host.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    vec![("tr_execute", Counted::UserRead)]
}

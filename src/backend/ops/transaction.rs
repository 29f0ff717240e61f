//! `TransactionOps`: a batch of reads goes to the inner backend in one transaction.

use burn_tensor::backend::{Backend, ExecutionError};
use burn_tensor::ops::{TransactionOps, TransactionPrimitive, TransactionPrimitiveData};

use crate::MixedPrecision;

impl<B: Backend> TransactionOps<Self> for MixedPrecision<B> {
    async fn tr_execute(
        transaction: TransactionPrimitive<Self>,
    ) -> Result<TransactionPrimitiveData, ExecutionError> {
        B::tr_execute(TransactionPrimitive::new(
            transaction.read_floats,
            transaction.read_qfloats,
            transaction.read_ints,
            transaction.read_bools,
        ))
        .await
    }
}

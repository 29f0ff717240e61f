//! One file per Burn op trait, named as in `burn-autodiff`.

mod activation;
mod bool_tensor;
mod int_tensor;
mod module;
mod qtensor;
mod tensor;
mod transaction;

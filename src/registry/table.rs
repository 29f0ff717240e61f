//! A table of one capability's values, one per backend type.

use core::any::{Any, TypeId};
use core::marker::PhantomData;
use std::collections::HashMap;

use burn_tensor::backend::Backend;

/// A kind of capability: its value for backend `B` (function pointers on `B`'s tensors).
pub(crate) trait Capability: 'static {
    type Of<B: Backend>: Copy + Send + Sync + 'static;

    /// The type `B`'s value is found by: `B` itself unless the capability says otherwise.
    fn key<B: Backend>() -> TypeId {
        TypeId::of::<B>()
    }
}

/// One capability's value per backend type.
pub(crate) struct Table<C: Capability> {
    values: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
    _capability: PhantomData<fn() -> C>,
}

impl<C: Capability> Default for Table<C> {
    fn default() -> Self {
        Self {
            values: HashMap::new(),
            _capability: PhantomData,
        }
    }
}

impl<C: Capability> Table<C> {
    /// Records `B`'s value, replacing any.
    pub(crate) fn insert<B: Backend>(&mut self, value: C::Of<B>) {
        self.values.insert(C::key::<B>(), Box::new(value));
    }

    /// `B`'s value, if it has one.
    pub(crate) fn get<B: Backend>(&self) -> Option<C::Of<B>> {
        self.values
            .get(&C::key::<B>())
            .and_then(|value| value.downcast_ref::<C::Of<B>>())
            .copied()
    }
}

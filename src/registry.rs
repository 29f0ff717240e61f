//! What each backend type can do, found by its `TypeId`: `MixedPrecision<B>` and
//! `FusedAdamW` are generic over any `B`, and Rust cannot ask "does `B` implement this
//! trait?" inside them. Each capability (the CPU ops routed to burn-amp's kernels, the AdamW
//! kernels, the FP8 operations) is one [`Registry`]: the backends burn-amp is built with,
//! filled once and read without a lock, and those registered at run time.

use core::any::{Any, TypeId};
use core::marker::PhantomData;
use std::collections::HashMap;
use std::sync::{LazyLock, RwLock};

use burn_tensor::backend::Backend;

/// A kind of capability: its value for backend `B` (function pointers on `B`'s tensors).
pub(crate) trait Capability: 'static {
    type Of<B: Backend>: Copy + Send + Sync + 'static;
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
        self.values.insert(TypeId::of::<B>(), Box::new(value));
    }

    fn get<B: Backend>(&self) -> Option<C::Of<B>> {
        self.values
            .get(&TypeId::of::<B>())
            .and_then(|value| value.downcast_ref::<C::Of<B>>())
            .copied()
    }
}

/// One capability's table: the built-in backends' values, then those registered later.
pub(crate) struct Registry<C: Capability> {
    builtin: LazyLock<Table<C>, fn() -> Table<C>>,
    registered: RwLock<Option<Table<C>>>,
}

impl<C: Capability> Registry<C> {
    /// A registry whose built-in values `builtin` makes on first use.
    pub(crate) const fn new(builtin: fn() -> Table<C>) -> Self {
        Self {
            builtin: LazyLock::new(builtin),
            registered: RwLock::new(None),
        }
    }

    /// `B`'s value, if it has one.
    pub(crate) fn get<B: Backend>(&self) -> Option<C::Of<B>> {
        self.builtin.get::<B>().or_else(|| {
            let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
            registered.as_ref().and_then(|table| table.get::<B>())
        })
    }

    /// Adds values at run time (a backend burn-amp is not built with).
    pub(crate) fn register(&self, add: impl FnOnce(&mut Table<C>)) {
        let mut registered = self.registered.write().unwrap_or_else(|e| e.into_inner());
        add(registered.get_or_insert_with(Table::default));
    }
}

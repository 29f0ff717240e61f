//! The registry of backend capabilities: what burn-amp can run on each backend type, found
//! by `TypeId`. `MixedPrecision<B>` and `FusedAdamW` are generic over any `B`, and Rust
//! cannot ask "does `B` implement this trait?" inside them; so each backend's capabilities
//! (the CPU ops the decorator hands to burn-amp's kernels, `FusedAdamW`'s fused step, the FP8
//! operations an FP8 policy needs) are recorded here, once, from its [`KernelBackend`]
//! impl: by [`register`], which burn-amp calls itself for the backends it is built with.

mod builtin;
mod kernels;
mod table;

use std::sync::{LazyLock, RwLock};

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn_amp_kernels::cpu::Isa;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use core::any::TypeId;

pub use kernels::{BackendKernels, KernelBackend};

use crate::cpu::{AdamwFn, RoutedOps};
use crate::fp8::training::ops::{self as fp8_ops, Fp8Ops};
use table::{Capability, Table};

/// The CPU ops routed to burn-amp's kernels ([`RoutedOps`]).
struct Routes;

impl Capability for Routes {
    type Of<B: Backend> = RoutedOps<B>;
}

/// The FP8 operations ([`Fp8Ops`]).
struct Fp8;

impl Capability for Fp8 {
    type Of<B: Backend> = Fp8Ops<B>;
}

/// `FusedAdamW`'s fused step ([`AdamwFn`]): found by the tensor type, so that a decorator
/// whose tensors are its inner backend's (`MixedPrecision<B>`) has `B`'s kernel.
struct Adamw;

impl Capability for Adamw {
    type Of<B: Backend> = AdamwFn<B>;

    fn key<B: Backend>() -> TypeId {
        TypeId::of::<FloatTensor<B>>()
    }
}

/// Every capability's table, for a CPU with `isa` (what the CPU ops are given).
struct Tables {
    isa: Isa,
    routed: Table<Routes>,
    fp8: Table<Fp8>,
    adamw: Table<Adamw>,
}

impl Tables {
    fn new(isa: Isa) -> Self {
        Self {
            isa,
            routed: Table::default(),
            fp8: Table::default(),
            adamw: Table::default(),
        }
    }

    /// Records what `B` and `Autodiff<B>` (both checkpointing strategies) can run.
    fn insert<B: KernelBackend>(&mut self) {
        self.insert_kernels(B::kernels(self.isa));
        self.fp8.insert::<B>(fp8_ops::plain::<B>());
        self.insert_autodiff::<B, NoCheckpointing>();
        self.insert_autodiff::<B, BalancedCheckpointing>();
    }

    fn insert_autodiff<B: KernelBackend, C: CheckpointStrategy>(&mut self) {
        self.insert_kernels(B::autodiff_kernels::<C>(self.isa));
        self.fp8
            .insert::<Autodiff<B, C>>(fp8_ops::autodiff::<B, C>());
    }

    fn insert_kernels<B: Backend>(&mut self, kernels: BackendKernels<B>) {
        if let Some(routed) = kernels.routed {
            self.routed.insert::<B>(routed);
        }
        if let Some(adamw) = kernels.adamw {
            self.adamw.insert::<B>(adamw);
        }
    }
}

/// Why a global: the answer to "what can `B` run?" is asked inside blanket impls over any
/// `B`, by `TypeId`. The backends burn-amp is built with are recorded on first use and read
/// without a lock; those registered at run time sit behind the lock. The CPU's instruction
/// set is detected here, once, and handed to every table.
static CAPABILITIES: Capabilities = Capabilities {
    isa: LazyLock::new(detect_isa),
    builtin: LazyLock::new(|| builtin::tables(*CAPABILITIES.isa)),
    registered: RwLock::new(None),
};

/// The CPU's instruction set, saying once when AMX is there but refused (its tile state not
/// granted by the operating system).
fn detect_isa() -> Isa {
    use burn_amp_kernels::cpu::isa::{AmxStatus, amx_status};
    if amx_status() == AmxStatus::Refused {
        log::warn!(
            "burn-amp: this CPU has AMX-BF16 but the operating system refused the tile state \
             (arch_prctl(ARCH_REQ_XCOMP_PERM)); bf16 products run on the AVX-512 BF16 kernel"
        );
    }
    Isa::detect()
}

struct Capabilities {
    isa: LazyLock<Isa>,
    builtin: LazyLock<Tables, fn() -> Tables>,
    registered: RwLock<Option<Tables>>,
}

impl Capabilities {
    fn get<C: Capability, B: Backend>(&self, table: fn(&Tables) -> &Table<C>) -> Option<C::Of<B>> {
        table(&self.builtin).get::<B>().or_else(|| {
            let registered = self.registered.read().unwrap_or_else(|e| e.into_inner());
            registered
                .as_ref()
                .and_then(|tables| table(tables).get::<B>())
        })
    }
}

/// Lets burn-amp run its kernels on backend `B`: FP8 policies on `MixedPrecision<B>` and
/// `MixedPrecision<Autodiff<B>>` (both checkpointing strategies), and whatever else `B`'s
/// [`KernelBackend`] impl brings ([`FusedAdamW`](crate::FusedAdamW)'s fused step on Burn's
/// CubeCL backends, say). Flex, NdArray, Wgpu and Cuda (as burn-amp's features enable them,
/// with their default type parameters) are registered already; call this once for another
/// backend, or for one with other type parameters (`Wgpu<half::f16>`, say). Registering a
/// backend again changes nothing.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn_amp::MixedPrecision;
///
/// burn_amp::register::<Flex>(); // already there: a no-op
/// MixedPrecision::<Autodiff<Flex>>::set_policy(&Default::default(), "float8_from_mixed_bfloat16")?;
/// # MixedPrecision::<Autodiff<Flex>>::clear_policy(&Default::default());
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
pub fn register<B: KernelBackend>() {
    let mut registered = CAPABILITIES
        .registered
        .write()
        .unwrap_or_else(|e| e.into_inner());
    registered
        .get_or_insert_with(|| Tables::new(*CAPABILITIES.isa))
        .insert::<B>();
}

/// `B`'s CPU ops routed to burn-amp's kernels, if it has any.
pub(crate) fn routed<B: Backend>() -> Option<RoutedOps<B>> {
    CAPABILITIES.get::<Routes, B>(|t| &t.routed)
}

/// `B`'s FP8 operations, if registered.
pub(crate) fn fp8<B: Backend>() -> Option<Fp8Ops<B>> {
    CAPABILITIES.get::<Fp8, B>(|t| &t.fp8)
}

/// The CPU's instruction set, detected once: what burn-amp's CPU kernels run with.
pub(crate) fn isa() -> Isa {
    *CAPABILITIES.isa
}

/// `FusedAdamW`'s fused step on `B`'s tensors, if burn-amp has one.
pub(crate) fn adamw<B: Backend>() -> Option<AdamwFn<B>> {
    CAPABILITIES.get::<Adamw, B>(|t| &t.adamw)
}

#[cfg(all(test, feature = "flex", feature = "ndarray", feature = "wgpu"))]
mod tests;

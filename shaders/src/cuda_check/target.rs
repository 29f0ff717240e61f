//! The GPU architectures the check compiles for, and the options CubeCL's CUDA runtime would
//! give a device of each: the device properties its kernels are expanded with and the
//! compiler options their CUDA C++ is generated with.
//!
//! The rules follow cubecl-cuda 0.10's device initialisation (`DeviceService::init` in its
//! `runtime.rs`), which reads the compute capability from the driver; here it is given. The
//! hardware limits are those of the named card of each architecture.

use cubecl::ir::{
    BarrierLevel, DeviceProperties, ElemType, FloatKind, HardwareProperties,
    MemoryDeviceProperties, OpaqueType, SemanticType, StorageType, Type, VectorSize,
    features::{AtomicUsage, Plane, Tma, TypeUsage},
};
use cubecl::profile::TimingMethod;
use cubecl_cpp::cuda::{CudaDialect, arch::CudaArchitecture, mma::CudaWmmaCompiler};
use cubecl_cpp::shared::{
    CompilationOptions, CppSupportedFeatures, register_mma_features, register_scaled_mma_features,
    register_wmma_features,
};
use cubecl_cpp::{DialectWmmaCompiler, register_supported_types};

/// The CUDA C++ dialect cubecl-cuda compiles with (its default WMMA compiler).
pub(crate) type Dialect = CudaDialect<CudaWmmaCompiler>;

/// A GPU architecture to compile for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CudaTarget {
    /// Compute capability as `10 * major + minor`: 80, 89, 90, 100, ...
    pub sm: u32,
}

impl CudaTarget {
    /// A100 (Ampere).
    pub const SM80: Self = Self { sm: 80 };
    /// L4, L40, RTX 40 (Ada).
    pub const SM89: Self = Self { sm: 89 };
    /// H100, H200 (Hopper).
    pub const SM90: Self = Self { sm: 90 };
    /// B200 (Blackwell).
    pub const SM100: Self = Self { sm: 100 };

    /// The architectures the check covers by default.
    pub const DEFAULT: [Self; 4] = [Self::SM80, Self::SM89, Self::SM90, Self::SM100];

    /// The card whose limits stand for the architecture.
    pub fn card(self) -> &'static str {
        match self.sm {
            80 => "A100",
            86 => "RTX 30",
            89 => "L4",
            90 => "H100",
            100 => "B200",
            120 => "RTX 50",
            _ => "generic",
        }
    }

    /// NVRTC's `--gpu-architecture` value, as cubecl-cuda passes it: the
    /// architecture-specific `sm_XXa` from Hopper on.
    pub fn nvrtc_arch(self) -> String {
        if self.sm >= 90 {
            format!("sm_{}a", self.sm)
        } else {
            format!("sm_{}", self.sm)
        }
    }

    /// The column name in the check's table.
    pub fn label(self) -> String {
        format!("{} ({})", self.nvrtc_arch(), self.card())
    }

    /// The device properties CubeCL's CUDA runtime registers for a device of this
    /// architecture.
    pub fn device_properties(self) -> DeviceProperties {
        let sm = self.sm;
        let major = sm / 10;
        let arch = CudaArchitecture { version: sm };
        let hardware = HardwareProperties {
            load_width: 128,
            plane_size_min: 32,
            plane_size_max: 32,
            max_bindings: u32::MAX,
            max_shared_memory_size: self.max_shared_memory(),
            max_cube_count: (i32::MAX as u32, u16::MAX as u32, u16::MAX as u32),
            max_units_per_cube: 1024,
            max_cube_dim: (1024, 1024, 64),
            num_streaming_multiprocessors: Some(self.multiprocessors()),
            num_tensor_cores: match sm {
                70 | 75 => Some(8),
                80 | 86 | 89 | 90 | 91 | 92 | 100 => Some(4),
                _ => None,
            },
            min_tensor_cores_dim: Some(8),
            num_cpu_cores: None,
            max_vector_size: VectorSize::MAX,
        };
        let memory = MemoryDeviceProperties {
            max_page_size: 1 << 32,
            alignment: 512,
        };
        let mut props =
            DeviceProperties::new(Default::default(), memory, hardware, TimingMethod::System);
        register_supported_types(&mut props);
        props.register_type_usage(ElemType::Float(FloatKind::TF32), TypeUsage::Conversion);
        let atomic = |elem: FloatKind| Type::new(StorageType::Atomic(ElemType::Float(elem)));
        let add_store = AtomicUsage::Add | AtomicUsage::LoadStore;
        if sm >= 60 {
            props.register_atomic_type_usage(atomic(FloatKind::F64), add_store);
        }
        if sm >= 70 {
            props.register_atomic_type_usage(atomic(FloatKind::F16), add_store);
            props.register_atomic_type_usage(atomic(FloatKind::F16).with_vector_size(2), add_store);
            props.register_semantic_type(SemanticType::Pipeline);
            props.register_type_usage(OpaqueType::Barrier(BarrierLevel::Unit), TypeUsage::Buffer);
            props.register_type_usage(OpaqueType::Barrier(BarrierLevel::Cube), TypeUsage::Buffer);
            props.features.plane.insert(Plane::Sync);
        }
        if sm >= 75 {
            for kind in [FloatKind::F16, FloatKind::BF16] {
                props
                    .features
                    .matmul
                    .ldmatrix
                    .insert(ElemType::Float(kind).into());
            }
        }
        if sm >= 80 {
            props.features.copy_async = true;
        }
        if sm >= 89 {
            for kind in [FloatKind::E4M3, FloatKind::E5M2] {
                props.register_type_usage(
                    ElemType::Float(kind),
                    TypeUsage::Conversion | TypeUsage::Buffer,
                );
            }
        }
        if sm >= 90 {
            props.features.tma.insert(Tma::Base);
            props.register_semantic_type(SemanticType::TensorMap);
            props.features.cube_cluster = true;
            for kind in [FloatKind::F16, FloatKind::BF16] {
                props
                    .features
                    .matmul
                    .stmatrix
                    .insert(ElemType::Float(kind).into());
            }
            for width in [2, 4] {
                props.register_atomic_type_usage(
                    atomic(FloatKind::F32).with_vector_size(width),
                    add_store,
                );
            }
        }
        if sm >= 100 {
            props.features.tma.insert(Tma::Im2colWide);
        }
        if (10..=12).contains(&major) {
            let e2m1 = ElemType::Float(FloatKind::E2M1);
            props.register_type_usage(e2m1, TypeUsage::Conversion);
            props.register_type_usage(
                StorageType::Packed(e2m1, 2),
                TypeUsage::Conversion | TypeUsage::Buffer,
            );
            for kind in [FloatKind::E2M3, FloatKind::E3M2, FloatKind::UE8M0] {
                props.register_type_usage(
                    ElemType::Float(kind),
                    TypeUsage::Conversion | TypeUsage::Buffer,
                );
            }
            if cuda_version() >= 12080 {
                props.features.tma.insert(Tma::SwizzleAtomicity);
            }
        }
        props.features.memory_reinterpret = true;
        props.features.alignment = true;
        props.features.plane.insert(Plane::Ops);
        props.features.plane.insert(Plane::NonUniformControlFlow);
        register_wmma_features(
            <CudaWmmaCompiler as DialectWmmaCompiler<Dialect>>::supported_wmma_combinations(&arch),
            &mut props,
        );
        register_mma_features(
            <CudaWmmaCompiler as DialectWmmaCompiler<Dialect>>::supported_mma_combinations(&arch),
            &mut props,
        );
        register_scaled_mma_features(
            <CudaWmmaCompiler as DialectWmmaCompiler<Dialect>>::supported_scaled_mma_combinations(
                &arch,
            ),
            &mut props,
        );
        props
    }

    /// The options CubeCL's CUDA compiler generates code with for this architecture.
    pub fn compilation_options(self) -> CompilationOptions {
        let sm = self.sm;
        CompilationOptions {
            warp_size: 32,
            supports_features: CppSupportedFeatures {
                fast_math: true,
                grid_constants: sm >= 70,
                fast_tanh: sm >= 75 && cuda_version() >= 12080,
                clusters: sm >= 90,
                elect_sync: sm >= 90,
            },
        }
    }

    /// Shared memory a block may opt in to, in bytes, on the architecture's card.
    fn max_shared_memory(self) -> usize {
        match self.sm {
            80 | 87 => 163 * 1024,
            90 | 100 => 227 * 1024,
            _ => 99 * 1024,
        }
    }

    /// Streaming multiprocessors of the architecture's card.
    fn multiprocessors(self) -> u32 {
        match self.sm {
            80 => 108,
            89 => 58,
            90 => 132,
            100 => 148,
            _ => 64,
        }
    }
}

impl core::fmt::Display for CudaTarget {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "sm_{}", self.sm)
    }
}

/// The CUDA version cubecl-cuda was built against (`CUDA_VERSION`, e.g. 13040), which
/// decides some of its code generation (`fast_tanh` from 12.8).
pub fn cuda_version() -> u32 {
    cudarc::driver::sys::CUDA_VERSION
}

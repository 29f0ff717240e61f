//! Every instantiation of this crate's CubeCL kernels: each comptime parameter's values, each
//! element type, launched through the crate's own launch functions on any runtime.
//!
//! A kernel's comptime parameters and generic element type each give a different kernel
//! (different source); its runtime scalars (lengths, block sizes, exponent bias, seed,
//! learning rate) do not, so one value of each stands for all.

use cubecl::prelude::*;
use cubecl::server::Handle;
use half::{bf16, f16};

use crate::accum::{self, AccumConfig, Accumulator, Fp8MatmulConfig};
use crate::cpu::optim::AdamwStep;
use crate::fp8::launch::{self as fp8, BlockLayout};
use crate::fp8::{Fp8Cast, Fp8Format, Overflow, Rounding, ScaleRule};
use crate::half16::{self, Half16};
use crate::optim::{self, AdamwBuffers};
use crate::order;

/// An element type a kernel is generic over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// `f32`.
    F32,
    /// `f16`.
    F16,
    /// `bf16`.
    BF16,
}

impl Elem {
    const ALL: [Self; 3] = [Self::F32, Self::F16, Self::BF16];
}

/// Calls `$f::<F>` with the Rust type of an [`Elem`].
macro_rules! with_elem {
    ($elem:expr, $f:ident, $($arg:expr),*) => {
        match $elem {
            Elem::F32 => $f::<R, f32>($($arg),*),
            Elem::F16 => $f::<R, f16>($($arg),*),
            Elem::BF16 => $f::<R, bf16>($($arg),*),
        }
    };
}

/// One launch of the crate's launch functions; the kernels it generates are one
/// instantiation each (`row_sums` launches two).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Launch {
    /// [`fp8::quantize`].
    Quantize(Elem, Fp8Cast),
    /// [`fp8::dequantize`].
    Dequantize(Elem, Fp8Format),
    /// [`fp8::amax`].
    Amax(Elem),
    /// [`fp8::scales`].
    Scales(ScaleRule),
    /// [`fp8::copy`].
    Copy,
    /// [`half16::launch::encode`].
    Half16Encode(Half16),
    /// [`half16::launch::decode`].
    Half16Decode(Half16),
    /// [`accum::launch::row_sums`] over `cols`-long rows (`product`: of two inputs).
    RowSums {
        /// The input's element type.
        elem: Elem,
        /// The accumulation.
        config: AccumConfig,
        /// Sums of products of two inputs rather than of one input.
        product: bool,
        /// Row length (long rows unroll the kernel's loop differently).
        cols: u32,
    },
    /// [`accum::launch::matmul`].
    Matmul(Elem, AccumConfig),
    /// [`accum::launch::fp8_matmul`].
    Fp8Matmul(Fp8Format, Fp8MatmulConfig),
    /// [`optim::launch::adamw`] (`skippable`: with the loss scaler's overflow flag).
    Adamw(Elem, bool),
    /// [`order::launch::signal`].
    Signal,
    /// [`order::launch::spin`].
    Spin,
}

/// A launch with the name of its kernel family and a description of the instantiation.
#[derive(Clone, Debug)]
pub struct Instantiation {
    /// The kernel family: `fp8::quantize`, `accum::matmul`, ...
    pub family: &'static str,
    /// The comptime choices and element type, in words.
    pub variant: String,
    /// How to launch it.
    pub launch: Launch,
}

fn accumulator_name(acc: Accumulator) -> &'static str {
    match acc {
        Accumulator::F32 => "f32",
        Accumulator::F16 => "f16",
        Accumulator::BF16 => "bf16",
        Accumulator::E8M13 => "e8m13",
    }
}

fn format_name(format: Fp8Format) -> &'static str {
    match format.layout() {
        crate::fp8::Fp8Layout::E4M3 => "E4M3",
        crate::fp8::Fp8Layout::E5M2 => "E5M2",
    }
}

const ACCUMULATORS: [Accumulator; 4] = [
    Accumulator::F32,
    Accumulator::F16,
    Accumulator::BF16,
    Accumulator::E8M13,
];
const FORMATS: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];

/// Every instantiation of every kernel of this crate.
pub fn instantiations() -> Vec<Instantiation> {
    let mut all = Vec::new();
    let mut add = |family: &'static str, variant: String, launch: Launch| {
        all.push(Instantiation {
            family,
            variant,
            launch,
        })
    };
    for elem in Elem::ALL {
        for format in FORMATS {
            for rounding in [Rounding::NearestEven, Rounding::Stochastic { seed: 7 }] {
                for overflow in [
                    Overflow::Saturate,
                    Overflow::NonSaturating,
                    Overflow::SaturateFinite,
                ] {
                    let cast = Fp8Cast::new(format)
                        .with_rounding(rounding)
                        .with_overflow(overflow);
                    let rounding = match rounding {
                        Rounding::NearestEven => "nearest-even",
                        Rounding::Stochastic { .. } => "stochastic",
                    };
                    add(
                        "fp8::quantize",
                        format!("{elem:?} {} {rounding} {overflow:?}", format_name(format)),
                        Launch::Quantize(elem, cast),
                    );
                }
            }
            add(
                "fp8::dequantize",
                format!("{elem:?} {}", format_name(format)),
                Launch::Dequantize(elem, format),
            );
        }
        add("fp8::amax", format!("{elem:?}"), Launch::Amax(elem));
    }
    for rule in [
        ScaleRule::Float { margin: 0 },
        ScaleRule::PowerOfTwo { margin: 0 },
        ScaleRule::E8M0,
    ] {
        add("fp8::scales", format!("{rule:?}"), Launch::Scales(rule));
    }
    add("fp8::copy", "u32".into(), Launch::Copy);
    add("order::signal", "u32".into(), Launch::Signal);
    add("order::spin", "u32".into(), Launch::Spin);
    for format in [Half16::Shp { bias: 15 }, Half16::Uhp] {
        let name = if matches!(format, Half16::Uhp) {
            "UHP"
        } else {
            "SHP"
        };
        add("half16::encode", name.into(), Launch::Half16Encode(format));
        add("half16::decode", name.into(), Launch::Half16Decode(format));
    }
    for elem in Elem::ALL {
        for acc in ACCUMULATORS {
            for stochastic in [false, true] {
                let mut config = AccumConfig::chunked(acc, 64).with_combine(acc);
                if stochastic {
                    config = config.with_stochastic(11);
                }
                let rounding = if stochastic { "stochastic" } else { "nearest" };
                for product in [false, true] {
                    let what = if product { "products" } else { "values" };
                    add(
                        "accum::row_sums",
                        format!(
                            "{elem:?} sums of {what} in {} ({rounding})",
                            accumulator_name(acc)
                        ),
                        Launch::RowSums {
                            elem,
                            config,
                            product,
                            cols: 256,
                        },
                    );
                }
                for combine in ACCUMULATORS {
                    add(
                        "accum::matmul",
                        format!(
                            "{elem:?} chunks in {}, combined in {} ({rounding})",
                            accumulator_name(acc),
                            accumulator_name(combine)
                        ),
                        Launch::Matmul(elem, config.with_combine(combine)),
                    );
                }
            }
        }
    }
    // A row longer than 60,000 values: the chunk loop unrolled by 2 and 4.
    for cols in [90_000, 180_001] {
        add(
            "accum::row_sums",
            format!("F32 one chunk of {cols} values (loop unrolled)"),
            Launch::RowSums {
                elem: Elem::F32,
                config: AccumConfig::naive(Accumulator::F32),
                product: false,
                cols,
            },
        );
    }
    for format in FORMATS {
        for accumulator in ACCUMULATORS {
            for promote in [false, true] {
                let config = Fp8MatmulConfig {
                    block: 128,
                    window: 32,
                    accumulator,
                    promote,
                };
                let how = if promote {
                    "promoted to f32"
                } else {
                    "not promoted"
                };
                add(
                    "accum::fp8_matmul",
                    format!(
                        "{} windows in {} {how}",
                        format_name(format),
                        accumulator_name(accumulator)
                    ),
                    Launch::Fp8Matmul(format, config),
                );
            }
        }
    }
    for elem in Elem::ALL {
        for skippable in [false, true] {
            let how = if skippable {
                "with overflow skip"
            } else {
                "plain"
            };
            add(
                "optim::adamw",
                format!("{elem:?} grads, {how}"),
                Launch::Adamw(elem, skippable),
            );
        }
    }
    all
}

const LEN: u32 = 1024;
const COLS: u32 = 256;

fn quantize<R: Runtime, F: Float + CubeElement>(client: &ComputeClient<R>, cast: Fp8Cast) {
    let layout = BlockLayout::blocks(LEN, COLS, 1, 128);
    let input = client.empty(LEN as usize * size_of::<F>());
    let scales = client.empty(layout.num_blocks() as usize * 4);
    fp8::quantize::<R, F>(client, input, scales, layout, cast)
        .expect("the catalog's buffers fit its layouts");
}

fn dequantize<R: Runtime, F: Float + CubeElement>(client: &ComputeClient<R>, format: Fp8Format) {
    let layout = BlockLayout::blocks(LEN, COLS, 1, 128);
    let codes = client.empty(fp8::packed_len(LEN) as usize * 4);
    let scale_invs = client.empty(layout.num_blocks() as usize * 4);
    fp8::dequantize::<R, F>(client, codes, scale_invs, layout, format)
        .expect("the catalog's buffers fit its layouts");
}

fn amax<R: Runtime, F: Float + CubeElement>(client: &ComputeClient<R>) {
    let input = client.empty(LEN as usize * size_of::<F>());
    fp8::amax::<R, F>(client, input, BlockLayout::per_tensor(LEN))
        .expect("the catalog's buffers fit its layouts");
}

fn row_sums<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    config: AccumConfig,
    product: bool,
    cols: u32,
) {
    let rows = 2;
    let bytes = (rows * cols) as usize * size_of::<F>();
    let input = client.empty(bytes);
    let other = product.then(|| client.empty(bytes));
    accum::launch::row_sums::<R, F>(client, input, other, rows, cols, config)
        .expect("the catalog's buffers fit its layouts");
}

fn matmul<R: Runtime, F: Float + CubeElement>(client: &ComputeClient<R>, config: AccumConfig) {
    let (m, k, n) = (16, 256, 16);
    let a = client.empty((m * k) as usize * size_of::<F>());
    let b = client.empty((k * n) as usize * size_of::<F>());
    accum::launch::matmul::<R, F>(client, a, b, (m, k, n), config)
        .expect("the catalog's buffers fit its layouts");
}

fn adamw<R: Runtime, G: Float + CubeElement>(client: &ComputeClient<R>, skippable: bool) {
    let len = LEN as usize;
    let buffers = AdamwBuffers {
        param: client.empty(len * 4),
        grad: client.empty(len * size_of::<G>()),
        m: client.empty(len * 4),
        v: client.empty(len * 4),
        time: client.empty(4),
        len: LEN,
    };
    let found = skippable.then(|| client.empty(4));
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.01);
    optim::launch::adamw::<R, G>(client, buffers, found, &step)
        .expect("the catalog's buffers fit its layouts");
}

fn empty_words<R: Runtime>(client: &ComputeClient<R>, words: u32) -> Handle {
    client.empty(words.max(1) as usize * 4)
}

/// Launches one instantiation on `client`'s device, on buffers of the sizes it reads
/// (their contents are left as allocated).
pub fn launch<R: Runtime>(client: &ComputeClient<R>, launch: Launch) {
    match launch {
        Launch::Quantize(elem, cast) => with_elem!(elem, quantize, client, cast),
        Launch::Dequantize(elem, format) => with_elem!(elem, dequantize, client, format),
        Launch::Amax(elem) => with_elem!(elem, amax, client),
        Launch::Scales(rule) => {
            let blocks = 8;
            let amax = empty_words(client, blocks);
            fp8::scales(client, amax, blocks, Fp8Format::E4M3, rule)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Copy => {
            fp8::copy(client, empty_words(client, LEN), LEN)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Signal => {
            order::launch::signal(client, &empty_words(client, 1), 1)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Spin => {
            let bound = [empty_words(client, LEN), empty_words(client, LEN)];
            order::launch::spin(client, &empty_words(client, 1), 1, &bound)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Half16Encode(format) => {
            let input = empty_words(client, LEN);
            half16::launch::encode(client, input, LEN, format)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Half16Decode(format) => {
            let codes = empty_words(client, half16::launch::packed_len(LEN));
            half16::launch::decode(client, codes, LEN, format)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::RowSums {
            elem,
            config,
            product,
            cols,
        } => with_elem!(elem, row_sums, client, config, product, cols),
        Launch::Matmul(elem, config) => with_elem!(elem, matmul, client, config),
        Launch::Fp8Matmul(format, config) => {
            let (m, k, n) = (16, 256, 128);
            let (kb, nb) = (k.div_ceil(config.block), n.div_ceil(config.block));
            let a = empty_words(client, (m * k).div_ceil(4));
            let a_scale_invs = empty_words(client, m * kb);
            let b = empty_words(client, (k * n).div_ceil(4));
            let b_scale_invs = empty_words(client, kb * nb);
            let a = accum::launch::Fp8Operand {
                codes: a,
                scale_invs: a_scale_invs,
            };
            let b = accum::launch::Fp8Operand {
                codes: b,
                scale_invs: b_scale_invs,
            };
            accum::launch::fp8_matmul(client, a, b, (m, k, n), format, config)
                .expect("the catalog's buffers fit its layouts");
        }
        Launch::Adamw(elem, skippable) => with_elem!(elem, adamw, client, skippable),
    }
}

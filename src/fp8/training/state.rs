//! What the FP8 history remembers of each matmul site and each of its roles: the state the
//! history keeps on the host and the device copy is uploaded from.

use std::collections::{BTreeMap, VecDeque};

use burn_amp_kernels::fp8::Fp8Format;

use super::scaling::Fp8Role;

/// What one role of one site remembers.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleState {
    /// The amaxes of the steps so far (oldest first): at most the delayed recipe's `history`
    /// of them; under exponent-bias scaling the last 16, for the report.
    pub history: VecDeque<f32>,
    /// The scale the last quantization used (1 under exponent-bias scaling).
    pub scale: f32,
    /// The format the last quantization used, with its exponent bias.
    pub format: Fp8Format,
    /// Exponent-bias scaling: the bias in force for E4M3 and for E5M2, once chosen.
    pub bias: [Option<i32>; 2],
    /// How many times this role was quantized.
    pub steps: u64,
    /// How many of those picked E4M3 and E5M2 (both formats count under `format=auto`).
    pub chosen: [u64; 2],
}

impl RoleState {
    pub(crate) fn new(role: Fp8Role) -> Self {
        Self {
            history: VecDeque::new(),
            scale: 1.0,
            format: role.cast().format,
            bias: [None; 2],
            steps: 0,
            chosen: [0; 2],
        }
    }
}

/// One matmul site: its label (op and operand shapes when first seen) and its roles.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteState {
    /// The site's number (call order within a step).
    pub site: u32,
    /// The op and its operand shapes, e.g. `linear [64, 784] x [784, 256]`.
    pub label: String,
    /// What each role remembers.
    pub roles: BTreeMap<Fp8Role, RoleState>,
}

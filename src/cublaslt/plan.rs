//! A Burn product as one cuBLASLt call, worked out on the host: no GPU, no library, only
//! the numbers the call takes. Burn's tensors are row-major views (any strides, an
//! offset, broadcast batch dimensions); cuBLASLt's matrices are column-major. A row-major
//! `C = A B` is the column-major `C^T = B^T A^T`, so cuBLASLt's first operand is Burn's
//! right-hand side and its second Burn's left-hand side: a row-major view with unit
//! column stride is, read column-major, its transpose with `ld` = its row stride (no copy,
//! no transpose flag), and a view with unit row stride (a transposed tensor) is itself,
//! column-major, with `ld` = its column stride and the transpose flag set.

use core::fmt;

/// The element types a cuBLASLt product reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmDtype {
    /// IEEE f32.
    F32,
    /// IEEE f16.
    F16,
    /// bfloat16.
    BF16,
    /// FP8 E4M3 (OCP).
    E4M3,
    /// FP8 E5M2 (OCP).
    E5M2,
}

impl GemmDtype {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::E4M3 | Self::E5M2 => 1,
        }
    }

    /// Whether this is an FP8 format.
    pub fn is_fp8(self) -> bool {
        matches!(self, Self::E4M3 | Self::E5M2)
    }
}

/// A row-major view of a Burn tensor: `shape[..r-2]` batch dimensions then rows and
/// columns; element `idx` at `offset + sum(idx[d] * strides[d])` (in elements) of its
/// buffer. A broadcast dimension has stride 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The shape, at least two dimensions.
    pub shape: Vec<usize>,
    /// The strides, in elements.
    pub strides: Vec<isize>,
    /// The offset of the first element, in elements.
    pub offset: usize,
    /// The element type.
    pub dtype: GemmDtype,
}

impl View {
    /// A contiguous row-major view.
    pub fn contiguous(shape: &[usize], dtype: GemmDtype) -> Self {
        let mut strides = vec![0isize; shape.len()];
        let mut step = 1isize;
        for d in (0..shape.len()).rev() {
            strides[d] = step;
            step *= shape[d].max(1) as isize;
        }
        Self {
            shape: shape.to_vec(),
            strides,
            offset: 0,
            dtype,
        }
    }

    fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Rows and columns.
    fn matrix(&self) -> (usize, usize) {
        let r = self.rank();
        (self.shape[r - 2], self.shape[r - 1])
    }

    /// Row and column strides, with the stride of a dimension of size one chosen so that the
    /// view reads as row-major when it can.
    fn matrix_strides(&self) -> (isize, isize) {
        let r = self.rank();
        let (rows, cols) = self.matrix();
        let (mut rs, mut cs) = (self.strides[r - 2], self.strides[r - 1]);
        if cols == 1 {
            cs = 1;
            if rows == 1 {
                rs = 1;
            }
        } else if rows == 1 {
            rs = cols as isize * cs.max(1);
        }
        (rs, cs)
    }
}

/// A matrix as cuBLASLt reads it: column-major `rows x cols` with leading dimension `ld`,
/// under `op` (transposed or not), `batch_stride` elements between batch entries, starting
/// `offset` elements into its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Rows of the stored matrix (before `transposed`).
    pub rows: usize,
    /// Columns of the stored matrix.
    pub cols: usize,
    /// Elements between columns.
    pub ld: usize,
    /// Elements between batch entries (0: the same matrix for every entry).
    pub batch_stride: usize,
    /// Offset of element (0, 0) of the first entry, in elements.
    pub offset: usize,
    /// `CUBLAS_OP_T`: the call reads the stored matrix transposed.
    pub transposed: bool,
    /// The element type.
    pub dtype: GemmDtype,
}

/// What cuBLASLt adds after the product (`CUBLASLT_MATMUL_DESC_EPILOGUE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// Nothing.
    None,
    /// A bias per row of the column-major result: per column of Burn's output (a linear
    /// layer's), `n` values in the output's dtype.
    Bias,
}

/// Per-tensor scales of an FP8 product, read from device memory (no host read): the
/// dequantized product is `a_scale_inv * b_scale_inv * (A B)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8Scales {
    /// `CUBLASLT_MATMUL_DESC_FAST_ACCUM`: forward products (Transformer Engine's fprop);
    /// gradient products keep split accumulation.
    pub fast_accum: bool,
}

/// The compute type of the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// `CUBLAS_COMPUTE_32F`: f32 accumulation.
    F32,
    /// `CUBLAS_COMPUTE_32F_FAST_TF32`: f32 operands multiplied as TF32 (PyTorch's
    /// `allow_tf32`).
    Tf32,
}

/// How the call is asked for beyond its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanOptions {
    /// The output's element type.
    pub out: GemmDtype,
    /// The epilogue.
    pub epilogue: Epilogue,
    /// TF32 products for f32 operands.
    pub tf32: bool,
    /// FP8 scales, for FP8 operands.
    pub fp8: Option<Fp8Scales>,
}

impl PlanOptions {
    /// A plain product written in `out`.
    pub fn new(out: GemmDtype) -> Self {
        Self {
            out,
            epilogue: Epilogue::None,
            tf32: false,
            fp8: None,
        }
    }
}

/// One cuBLASLt call: `D = op(A) op(B) (+ bias)`, column-major, `batch` times; `A` is
/// Burn's right-hand side, `B` its left-hand side, `D` its output (row-major, contiguous).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GemmPlan {
    /// Rows of `op(A)` and `D`: Burn's `n`.
    pub m: usize,
    /// Columns of `op(B)` and `D`: Burn's `m`.
    pub n: usize,
    /// The shared dimension.
    pub k: usize,
    /// Batch entries.
    pub batch: usize,
    /// cuBLASLt's A.
    pub a: Layout,
    /// cuBLASLt's B.
    pub b: Layout,
    /// The output (C and D alike).
    pub d: Layout,
    /// Burn's output shape (the broadcast batch dimensions, then `m x n`).
    pub out_shape: Vec<usize>,
    /// The compute type.
    pub compute: Compute,
    /// The epilogue.
    pub epilogue: Epilogue,
    /// FP8 scales.
    pub fp8: Option<Fp8Scales>,
}

/// Why a product cannot be one cuBLASLt call as it stands (the caller makes an operand
/// contiguous, or runs the product elsewhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The shapes do not multiply (or broadcast).
    Shape(String),
    /// An operand has no unit stride in its last two dimensions, a negative stride, or
    /// overlapping rows: it needs a contiguous copy.
    Strides(&'static str),
    /// An operand's batch dimensions do not collapse to one stride over the output's
    /// batch: it needs a contiguous copy.
    Batch(&'static str),
    /// An FP8 product needs both operands K-major (the TN layout), leading dimensions and
    /// K a multiple of 16, and scales.
    Fp8(String),
    /// A combination of types cuBLASLt does not run.
    Types(String),
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape(s) => write!(f, "shapes: {s}"),
            Self::Strides(which) => write!(f, "{which}: strides cuBLASLt cannot read in place"),
            Self::Batch(which) => write!(f, "{which}: batch dimensions with no single stride"),
            Self::Fp8(s) => write!(f, "FP8: {s}"),
            Self::Types(s) => write!(f, "types: {s}"),
        }
    }
}

impl std::error::Error for PlanError {}

impl GemmPlan {
    /// The call for `lhs @ rhs` (Burn's matmul: batch dimensions broadcast), written into a
    /// new contiguous output.
    pub fn new(lhs: &View, rhs: &View, options: PlanOptions) -> Result<GemmPlan, PlanError> {
        for (v, name) in [(lhs, "lhs"), (rhs, "rhs")] {
            if v.rank() < 2 || v.strides.len() != v.rank() {
                return Err(PlanError::Shape(format!(
                    "{name}: shape {:?} with strides {:?}",
                    v.shape, v.strides
                )));
            }
        }
        let ((m, k), (k2, n)) = (lhs.matrix(), rhs.matrix());
        if k != k2 {
            return Err(PlanError::Shape(format!(
                "{:?} @ {:?}: inner dimensions {k} and {k2}",
                lhs.shape, rhs.shape
            )));
        }
        let batch_shape = broadcast(&lhs.shape, &rhs.shape)?;
        let batch: usize = batch_shape.iter().product();
        check_types(lhs.dtype, rhs.dtype, options)?;
        // cuBLASLt's A is Burn's rhs read as its transpose (n x k), B is lhs^T (k x m).
        let a = operand(rhs, &batch_shape, "rhs")?;
        let b = operand(lhs, &batch_shape, "lhs")?;
        let mut out_shape = batch_shape.clone();
        out_shape.extend([m, n]);
        let d = Layout {
            rows: n,
            cols: m,
            ld: n.max(1),
            batch_stride: m * n,
            offset: 0,
            transposed: false,
            dtype: options.out,
        };
        let plan = GemmPlan {
            m: n,
            n: m,
            k,
            batch,
            a,
            b,
            d,
            out_shape,
            compute: if options.tf32 && lhs.dtype == GemmDtype::F32 {
                Compute::Tf32
            } else {
                Compute::F32
            },
            epilogue: options.epilogue,
            fp8: options.fp8,
        };
        if lhs.dtype.is_fp8() {
            plan.check_fp8()?;
        }
        Ok(plan)
    }

    /// Hopper's FP8 products read both operands K-major (cuBLASLt's "TN": A transposed, B
    /// not), with leading dimensions and K multiples of 16.
    fn check_fp8(&self) -> Result<(), PlanError> {
        if self.fp8.is_none() {
            return Err(PlanError::Fp8("no scales".into()));
        }
        if !self.a.transposed || self.b.transposed {
            return Err(PlanError::Fp8(
                "operands not K-major: the weight must be stored transposed ([n, k]) and \
                 the input row-major ([m, k])"
                    .into(),
            ));
        }
        let sixteens = [self.k, self.a.ld, self.b.ld].map(|v| v.is_multiple_of(16));
        if sixteens.contains(&false) {
            return Err(PlanError::Fp8(format!(
                "K ({}) and leading dimensions ({}, {}) must be multiples of 16",
                self.k, self.a.ld, self.b.ld
            )));
        }
        Ok(())
    }

    /// Elements of Burn's output.
    pub fn out_len(&self) -> usize {
        self.out_shape.iter().product()
    }
}

/// The broadcast batch shape of two operands (their dimensions before the last two, aligned
/// from the right; size 1 broadcasts).
fn broadcast(lhs: &[usize], rhs: &[usize]) -> Result<Vec<usize>, PlanError> {
    let (lb, rb) = (&lhs[..lhs.len() - 2], &rhs[..rhs.len() - 2]);
    let rank = lb.len().max(rb.len());
    let at = |s: &[usize], d: usize| {
        let pad = rank - s.len();
        if d < pad { 1 } else { s[d - pad] }
    };
    (0..rank)
        .map(|d| match (at(lb, d), at(rb, d)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err(PlanError::Shape(format!(
                "batch dimensions {lb:?} and {rb:?} do not broadcast ({x} vs {y})"
            ))),
        })
        .collect()
}

/// `view` as one of cuBLASLt's operands: the transpose of the row-major matrix, with one
/// batch stride over `batch` (the output's batch shape).
fn operand(view: &View, batch: &[usize], name: &'static str) -> Result<Layout, PlanError> {
    let (rows, cols) = view.matrix();
    let (rs, cs) = view.matrix_strides();
    if rs < 0 || cs < 0 {
        return Err(PlanError::Strides(name));
    }
    let (rs, cs) = (rs as usize, cs as usize);
    // Row-major with unit column stride: column-major `cols x rows`, ld = rs, not
    // transposed. Unit row stride (a transposed tensor): column-major `rows x cols`, ld =
    // cs, read transposed.
    let (stored_rows, stored_cols, ld, transposed) = if cs == 1 && (rs >= cols || rows == 1) {
        (cols, rows, rs.max(cols).max(1), false)
    } else if rs == 1 && (cs >= rows || cols == 1) {
        (rows, cols, cs.max(rows).max(1), true)
    } else {
        return Err(PlanError::Strides(name));
    };
    Ok(Layout {
        rows: stored_rows,
        cols: stored_cols,
        ld,
        batch_stride: batch_stride(view, batch).ok_or(PlanError::Batch(name))?,
        offset: view.offset,
        transposed,
        dtype: view.dtype,
    })
}

/// The one stride between consecutive entries of `batch` (flattened row-major) in `view`,
/// whose batch dimensions align with `batch` from the right (missing or size-1 ones
/// broadcast): `None` when there is none.
fn batch_stride(view: &View, batch: &[usize]) -> Option<usize> {
    let own = &view.shape[..view.rank() - 2];
    let pad = batch.len() - own.len();
    // The stride of each output batch dimension in this view (0 where it broadcasts).
    let strides: Vec<isize> = (0..batch.len())
        .map(|d| {
            if d < pad || own[d - pad] == 1 {
                0
            } else {
                view.strides[d - pad]
            }
        })
        .collect();
    // Entry e = sum(idx[d] * inner[d]) must sit at e * s for one s: each dimension's
    // stride is s times the entries below it, over the dimensions that are not size 1.
    let mut s: Option<isize> = None;
    let mut inner = 1isize;
    for d in (0..batch.len()).rev() {
        if batch[d] > 1 {
            let stride = strides[d];
            if stride % inner != 0 {
                return None;
            }
            let this = stride / inner;
            match s {
                None => s = Some(this),
                Some(s) if s == this => {}
                Some(_) => return None,
            }
        }
        inner *= batch[d] as isize;
    }
    let s = s.unwrap_or(0);
    usize::try_from(s).ok()
}

/// The combinations of types the plan builds calls for: f32, f16 and bf16 operands of one
/// type with f32 accumulation, written in their type or f32; FP8 operands (E4M3 x E4M3,
/// E5M2 x E4M3, E4M3 x E5M2) written in bf16, f16 or f32.
fn check_types(lhs: GemmDtype, rhs: GemmDtype, options: PlanOptions) -> Result<(), PlanError> {
    use GemmDtype::*;
    let out = options.out;
    let ok = match (lhs, rhs) {
        (F32, F32) => out == F32,
        (F16, F16) => matches!(out, F16 | F32),
        (BF16, BF16) => matches!(out, BF16 | F32),
        (E4M3 | E5M2, E4M3 | E5M2) => {
            !(lhs == E5M2 && rhs == E5M2) && matches!(out, BF16 | F16 | F32)
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(PlanError::Types(format!("{lhs:?} x {rhs:?} -> {out:?}")))
    }
}

//! Flex tensors as the CPU kernels' slices and matrix views.

use burn::backend::flex::{FlexTensor, Layout};
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{CpuFloat, Format};
use burn_amp_kernels::cpu::gemm::MatRef;
use burn_tensor::{DType, Element, Shape};

/// The kernels' format of a Burn dtype, if they take it.
pub(super) fn format(dtype: DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(Format::F32),
        DType::BF16 => Some(Format::Bf16),
        DType::F16 => Some(Format::F16),
        _ => None,
    }
}

/// A new contiguous tensor of `shape` holding `values`.
pub(super) fn from_vec<T: CpuFloat + Element + bytemuck::NoUninit>(
    values: Vec<T>,
    shape: Shape,
) -> FlexTensor {
    debug_assert_eq!(values.len(), shape.num_elements());
    FlexTensor::new(
        super::pool::bytes(values),
        Layout::contiguous(shape),
        T::dtype(),
    )
}

/// A buffer of `len` zeros of `T` (see [`pool`](super::pool)).
pub(super) fn zeros<T: bytemuck::Pod>(len: usize) -> Vec<T> {
    super::pool::zeros(len)
}

/// `src` converted to `D`, in a buffer of [`to_fill`].
pub(super) fn converted<S: CpuFloat, D: CpuFloat + bytemuck::Pod>(isa: Isa, src: &[S]) -> Vec<D> {
    let mut dst = to_fill(src.len());
    burn_amp_kernels::cpu::cast::convert(isa, src, &mut dst).expect("equal lengths");
    dst
}

/// A buffer of `len` values of `T` for a caller that writes every one (its values until
/// then are unspecified; see [`pool`](super::pool)).
pub(super) fn to_fill<T: bytemuck::Pod>(len: usize) -> Vec<T> {
    super::pool::to_fill(len)
}

/// The matrix formed by the last two dimensions of `t`, starting `offset` values past its
/// start.
pub(super) fn matrix<T: CpuFloat + Element + bytemuck::Pod>(
    t: &FlexTensor,
    offset: isize,
) -> MatRef<'_, T> {
    let layout = t.layout();
    let (shape, strides) = (layout.shape(), layout.strides());
    let r = shape.num_dims();
    let start = layout.start_offset() as isize + offset;
    MatRef::new(
        t.storage::<T>(),
        start as usize,
        shape[r - 2],
        shape[r - 1],
        strides[r - 2],
        strides[r - 1],
    )
    .expect("a Flex layout stays inside its buffer")
}

/// `t`'s leading dimensions merged into one: a `[rows, last]` view sharing its buffer, or a
/// contiguous copy when the layout cannot merge them. The last dimension keeps its stride.
pub(super) fn flatten_rows(t: &FlexTensor) -> FlexTensor {
    let layout = t.layout();
    let (shape, strides) = (layout.shape(), layout.strides());
    let r = shape.num_dims();
    let last = shape[r - 1];
    let rows = shape.num_elements() / last.max(1);
    if r == 2 {
        return t.clone();
    }
    let (row_stride, last_stride) = if r == 1 {
        (last as isize, strides[0])
    } else {
        // Dims 0..r-1 merge when each steps over the whole of the next.
        let mergeable = (0..r - 2)
            .all(|i| shape[i] == 1 || strides[i] == strides[i + 1] * shape[i + 1] as isize);
        if !mergeable {
            return flatten_rows(&t.to_contiguous());
        }
        (strides[r - 2], strides[r - 1])
    };
    let layout = Layout::new(
        Shape::new([rows, last]),
        vec![row_stride, last_stride],
        layout.start_offset(),
    );
    FlexTensor::from_arc(t.data_arc(), layout, t.dtype())
}

/// A contiguous tensor's data under another shape of the same size.
pub(super) fn reshaped(t: FlexTensor, shape: Shape) -> FlexTensor {
    debug_assert!(t.is_contiguous() && t.layout().start_offset() == 0);
    let dtype = t.dtype();
    FlexTensor::from_arc(t.data_arc(), Layout::contiguous(shape), dtype)
}

/// The values of a contiguous tensor of element type `T`.
pub(super) fn values<T: CpuFloat + Element + bytemuck::Pod>(t: &FlexTensor) -> &[T] {
    t.as_slice::<T>()
        .expect("a contiguous tensor of its own dtype")
}

/// A small tensor's values in f32 (a bias, gamma, beta), in its logical order.
pub(super) fn values_f32(isa: burn_amp_kernels::cpu::Isa, t: &FlexTensor) -> Vec<f32> {
    let t = super::layout::contiguous(t);
    crate::dtype::with_float!(t.dtype(), T => {
        burn_amp_kernels::cpu::cast::to_vec::<T, f32>(isa, values::<T>(&t))
    })
}

/// A new contiguous tensor of `$shape` in `$dtype`, its values written by `$body` into `$y`
/// (a zeroed slice of the dtype's element type).
macro_rules! new_tensor {
    ($shape:expr, $dtype:expr, $y:ident => $body:expr) => {{
        let shape: Shape = $shape;
        with_float!($dtype, O => {
            let mut out = to_fill::<O>(shape.num_elements());
            {
                let $y: &mut [O] = &mut out;
                $body;
            }
            from_vec::<O>(out, shape)
        })
    }};
}

//! Flex tensors made contiguous by the layout kernel (`burn_amp_kernels::cpu::layout`), a
//! row at a time, where Flex's own copy computes a strided index per value.

use burn::backend::flex::{FlexTensor, Layout};
use burn_amp_kernels::cpu::layout::copy_strided;

/// `t` itself when contiguous, else a contiguous copy of its values.
pub(crate) fn contiguous(t: &FlexTensor) -> FlexTensor {
    if t.is_contiguous() {
        return t.clone();
    }
    let layout = t.layout();
    let (shape, strides, offset) = (layout.shape(), layout.strides(), layout.start_offset());
    let n = shape.num_elements();
    macro_rules! copy {
        ($word:ty) => {{
            let Ok(src) = bytemuck::try_cast_slice::<u8, $word>(t.bytes()) else {
                return t.to_contiguous();
            };
            let mut out = super::pool::to_fill::<$word>(n);
            if copy_strided(src, offset, shape.as_slice(), strides, &mut out).is_err() {
                return t.to_contiguous();
            }
            super::pool::bytes(out)
        }};
    }
    let bytes = match t.dtype().size() {
        2 => copy!(u16),
        4 => copy!(u32),
        8 => copy!(u64),
        _ => return t.to_contiguous(),
    };
    FlexTensor::new(bytes, Layout::contiguous(shape.clone()), t.dtype())
}

//! `float_cast` on Flex through the CPU kernels: vectorised and threaded, bit for bit
//! `half`'s conversions (Flex's own cast goes through an f64 vector, one value at a time).

use burn::backend::Flex;
use burn::backend::flex::{FlexTensor, Layout};
use burn_amp_kernels::cpu::Isa;
use burn_tensor::ops::FloatTensorOps;
use burn_tensor::{DType, FloatDType};

use crate::dtype::with_float;

/// `t` in `dtype`. Views that cover their buffer in some order of dimensions (a transposed
/// weight) are cast in place of a copy, keeping their strides; other views are made
/// contiguous first. Dtypes the kernels do not take (f64) go to Flex.
pub(crate) fn cast(isa: Isa, t: FlexTensor, dtype: FloatDType) -> FlexTensor {
    let target = DType::from(dtype);
    if t.dtype() == target {
        return t;
    }
    if super::tensor::format(t.dtype()).is_none() || super::tensor::format(target).is_none() {
        return Flex::float_cast(t, dtype);
    }
    let t = if covers_buffer(&t) {
        t
    } else {
        t.to_contiguous()
    };
    let layout = t.layout().clone();
    let bytes = with_float!(t.dtype(), S => {
        let src = &t.storage::<S>()[..layout.num_elements()];
        with_float!(target, D => {
            super::pool::bytes(super::tensor::converted::<S, D>(isa, src))
        }, _ => unreachable!("checked above"))
    }, _ => unreachable!("checked above"));
    FlexTensor::new(bytes, layout, target)
}

/// Whether `t`'s elements are exactly its whole buffer, in row-major order of some
/// permutation of its dimensions (offset 0, positive strides): then the buffer can be cast
/// as one slice and the strides kept.
fn covers_buffer(t: &FlexTensor) -> bool {
    let layout: &Layout = t.layout();
    let elem = match t.dtype() {
        DType::F32 => 4,
        _ => 2,
    };
    if layout.start_offset() != 0 || t.bytes().len() != layout.num_elements() * elem {
        return false;
    }
    let mut dims: Vec<(isize, usize)> = layout
        .strides()
        .iter()
        .zip(layout.shape().iter())
        .filter(|(_, size)| **size != 1)
        .map(|(s, size)| (*s, *size))
        .collect();
    dims.sort_by_key(|(s, _)| core::cmp::Reverse(*s));
    let mut expected = 1isize;
    for (stride, size) in dims.iter().rev() {
        if *stride != expected {
            return false;
        }
        expected *= *size as isize;
    }
    true
}

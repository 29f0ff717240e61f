//! `Fp8Tensor`: FP8 codes with their scales, format and block layout.

use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::is_valid_scale;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::backend::Backend;
use burn_tensor::{DType, FloatDType, Int, Shape, Tensor, TensorPrimitive};

use super::backend::{Fp8Backend, host_f32, host_u32};
use super::{Fp8Error, Fp8Recipe};

/// A tensor quantized to FP8: one byte per value (packed four to a `u32` word), an f32
/// dequantization scale per block, and what it takes to read them back.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_amp::fp8::{Fp8Cast, Fp8Format, Fp8Recipe, Fp8Tensor};
///
/// let device = Default::default();
/// let x = Tensor::<Flex, 2>::from_floats([[0.5, -3.0, 1000.0, 1e-4]], &device);
/// let q = Fp8Tensor::quantize(x, Fp8Cast::new(Fp8Format::E4M3), Fp8Recipe::per_tensor())?;
/// assert_eq!(q.to_bytes().len(), 4);
/// let back = q.dequantize().into_data().to_vec::<f32>().unwrap();
/// assert!((back[2] - 1000.0).abs() < 1e-3); // the amax maps to 448, E4M3's largest value
/// assert!((back[1] + 3.0).abs() < 0.1); // 3 bits of mantissa: within 1/16 relative
/// assert_eq!(back[3], 0.0); // 1e-4 * 448 / 1000 is under E4M3's smallest subnormal
/// # Ok::<(), burn_amp::fp8::Fp8Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Fp8Tensor<B: Backend, const D: usize> {
    codes: Tensor<B, 1, Int>,
    scale_inv: Tensor<B, 1>,
    shape: Shape,
    format: Fp8Format,
    recipe: Fp8Recipe,
    layout: BlockLayout,
    dtype: FloatDType,
}

fn check_dtype(dtype: DType) -> Result<FloatDType, Fp8Error> {
    match dtype {
        DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => Ok(dtype.into()),
        other => Err(Fp8Error::UnsupportedDType(other)),
    }
}

impl<B: Fp8Backend, const D: usize> Fp8Tensor<B, D> {
    /// Quantizes `tensor` to FP8 by `cast` (format, rounding, overflow), with the scales of
    /// `recipe` computed from the tensor itself (current scaling).
    ///
    /// ```
    /// use burn::backend::Flex;
    /// use burn::tensor::{Tensor, TensorData};
    /// use burn_amp::fp8::{Fp8Cast, Fp8Format, Fp8Recipe, Fp8Tensor};
    ///
    /// let device = Default::default();
    /// let x = Tensor::<Flex, 1>::from_data(TensorData::from([0.5f32, -3.0, 448.0, 1e-9]), &device);
    /// let q = Fp8Tensor::quantize(x, Fp8Cast::new(Fp8Format::E4M3), Fp8Recipe::Unscaled)?;
    /// // 0.5, -3 and 448 are E4M3 values; 1e-9 is below its smallest subnormal.
    /// assert_eq!(q.to_bytes(), vec![0x30, 0xC4, 0x7E, 0x00]);
    /// let back = Fp8Tensor::<Flex, 1>::from_bytes(&q.to_bytes(), [4], Fp8Format::E4M3, &device)?;
    /// assert_eq!(back.dequantize().into_data().to_vec::<f32>().unwrap(), [0.5, -3.0, 448.0, 0.0]);
    /// # Ok::<(), burn_amp::fp8::Fp8Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Fp8Error`] for an f64 or integer tensor, more than 2^32 - 1 elements, or an empty
    /// block in `recipe`.
    pub fn quantize(
        tensor: Tensor<B, D>,
        cast: Fp8Cast,
        recipe: Fp8Recipe,
    ) -> Result<Self, Fp8Error> {
        let dtype = check_dtype(tensor.dtype())?;
        let shape = tensor.shape();
        let layout = recipe.layout(&shape)?;
        let device = tensor.device();
        let flat = tensor
            .detach()
            .reshape([shape.num_elements()])
            .into_primitive()
            .tensor();
        let (scales, scale_invs) = match recipe.rule() {
            None => {
                let one = B::float_ones(Shape::new([1]), &device, FloatDType::F32);
                (one.clone(), one)
            }
            Some(rule) => {
                let amax = B::fp8_amax(flat.clone(), layout);
                B::fp8_scales(amax, cast.format, rule)
            }
        };
        let codes = B::fp8_quantize(flat, scales, layout, cast);
        Ok(Self {
            codes: Tensor::from_primitive(codes),
            scale_inv: Tensor::from_primitive(TensorPrimitive::Float(scale_invs)),
            shape,
            format: cast.format,
            recipe,
            layout,
            dtype,
        })
    }

    /// Quantizes `tensor` with given per-block `scales` (what values are multiplied by; one
    /// f32 per block of `recipe`'s layout): how delayed scaling applies a scale computed
    /// earlier.
    ///
    /// The scales are read back to the host and checked first (one small read).
    ///
    /// # Errors
    /// As [`quantize`](Self::quantize), [`Fp8Error::InvalidRecipe`] when `scales` does not
    /// hold one value per block, and [`Fp8Error::InvalidScale`] for a scale that is zero,
    /// negative, subnormal, non-finite or above `2^126` (see
    /// [`is_valid_scale`](burn_amp_kernels::fp8::scale::is_valid_scale)).
    pub fn quantize_with_scales(
        tensor: Tensor<B, D>,
        cast: Fp8Cast,
        recipe: Fp8Recipe,
        scales: Tensor<B, 1>,
    ) -> Result<Self, Fp8Error> {
        let dtype = check_dtype(tensor.dtype())?;
        let shape = tensor.shape();
        let layout = recipe.layout(&shape)?;
        if scales.dims()[0] != layout.num_blocks() as usize {
            return Err(Fp8Error::InvalidRecipe(format!(
                "{} scales given for {} blocks",
                scales.dims()[0],
                layout.num_blocks()
            )));
        }
        let scales = scales.cast(FloatDType::F32);
        check_scales(&scales)?;
        let scale_inv = scales.clone().recip();
        let flat = tensor
            .detach()
            .reshape([shape.num_elements()])
            .into_primitive()
            .tensor();
        let codes = B::fp8_quantize(flat, scales.into_primitive().tensor(), layout, cast);
        Ok(Self {
            codes: Tensor::from_primitive(codes),
            scale_inv,
            shape,
            format: cast.format,
            recipe,
            layout,
            dtype,
        })
    }

    /// An unscaled FP8 tensor from its codes, one byte per value in row-major order (as
    /// [`to_bytes`](Self::to_bytes) gives them); it dequantizes to f32.
    ///
    /// # Errors
    /// [`Fp8Error::InvalidRecipe`] when `codes` does not hold one byte per element of
    /// `shape`, [`Fp8Error::TooLarge`] past 2^32 - 1 elements.
    pub fn from_bytes(
        codes: &[u8],
        shape: [usize; D],
        format: Fp8Format,
        device: &B::Device,
    ) -> Result<Self, Fp8Error> {
        let shape = Shape::new(shape);
        if codes.len() != shape.num_elements() {
            return Err(Fp8Error::InvalidRecipe(format!(
                "{} codes given for a tensor of shape {:?}",
                codes.len(),
                shape.dims::<D>()
            )));
        }
        let recipe = Fp8Recipe::Unscaled;
        let layout = recipe.layout(&shape)?;
        let words: Vec<u32> = codes
            .chunks(4)
            .map(|c| c.iter().rev().fold(0u32, |w, b| (w << 8) | u32::from(*b)))
            .collect();
        let len = words.len();
        let codes = Tensor::from_primitive(B::int_from_data(
            burn_tensor::TensorData::new(words, [len]),
            device,
        ));
        Ok(Self {
            codes,
            scale_inv: Tensor::from_primitive(TensorPrimitive::Float(B::float_ones(
                Shape::new([1]),
                device,
                FloatDType::F32,
            ))),
            shape,
            format,
            recipe,
            layout,
            dtype: FloatDType::F32,
        })
    }

    /// The values back, in the dtype the tensor had.
    pub fn dequantize(&self) -> Tensor<B, D> {
        self.dequantize_as(self.dtype)
    }

    /// The values back, in `dtype`.
    pub fn dequantize_as(&self, dtype: FloatDType) -> Tensor<B, D> {
        let flat = B::fp8_dequantize(
            self.codes.clone().into_primitive(),
            self.scale_inv.clone().into_primitive().tensor(),
            self.layout,
            self.format,
            dtype,
        );
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(flat)).reshape(self.shape.clone())
    }

    /// The codes, one byte per value in row-major order (read back from the device).
    pub fn to_bytes(&self) -> Vec<u8> {
        let words = host_u32::<B>(self.codes.clone().into_primitive());
        words
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .take(self.layout.len as usize)
            .collect()
    }

    /// The dequantization scale of each block (f32, on the device).
    pub fn scale_inv(&self) -> Tensor<B, 1> {
        self.scale_inv.clone()
    }

    /// The E8M0 byte of each block's scale (exact for the power-of-two rules; the MX
    /// recipe's storage format), read back from the device.
    pub fn e8m0_scales(&self) -> Vec<u8> {
        host_f32::<B>(self.scale_inv.clone().into_primitive().tensor())
            .iter()
            .map(|s| {
                if s.is_nan() {
                    0xff
                } else {
                    ((s.to_bits() >> 23) & 0xff) as u8
                }
            })
            .collect()
    }

    /// The packed codes (`u32` words, four codes each, on the device).
    pub fn codes(&self) -> Tensor<B, 1, Int> {
        self.codes.clone()
    }

    /// The original shape.
    pub fn shape(&self) -> Shape {
        self.shape.clone()
    }

    /// The FP8 format.
    pub fn format(&self) -> Fp8Format {
        self.format
    }

    /// The recipe the scales came from.
    pub fn recipe(&self) -> Fp8Recipe {
        self.recipe
    }

    /// The scale blocks.
    pub fn layout(&self) -> BlockLayout {
        self.layout
    }

    /// Bytes on the device: the codes plus four per scale.
    pub fn size_in_bytes(&self) -> usize {
        4 * (self.layout.len.div_ceil(4) as usize + self.layout.num_blocks() as usize)
    }
}

/// Refuses the first scale FP8 quantization cannot use.
fn check_scales<B: Backend>(scales: &Tensor<B, 1>) -> Result<(), Fp8Error> {
    let values = scales
        .to_data()
        .into_vec::<f32>()
        .map_err(|e| Fp8Error::InvalidRecipe(format!("unreadable scales: {e:?}")))?;
    match values.iter().position(|s| !is_valid_scale(*s)) {
        Some(block) => Err(Fp8Error::InvalidScale {
            block,
            scale: values[block],
        }),
        None => Ok(()),
    }
}

//! 1-d and 2-d convolutions (one group) on Flex through the CPU GEMM: `im2col` of a chunk
//! of the batch in the compute format, `weight x cols` with the bias added to the f32
//! sums, the result in the dtype asked for; and the gradients, each in its operand's dtype
//! (an f32 weight's summed over the batch in f32, written in f32).

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{self, CpuFloat, Format};
use burn_amp_kernels::cpu::conv::{self, ConvShape};
use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef};
use burn_amp_kernels::cpu::layout::copy_strided;
use burn_tensor::{DType, Shape};

use super::super::ConvGeometry;
use super::layout::contiguous;
use super::tensor::{format, from_vec, values, values_f32, zeros};
use crate::dtype::with_float;

/// Runs `$body` with `$F` bound to the element type of the compute format `$format`.
macro_rules! with_format {
    ($format:expr, $F:ident => $body:expr) => {
        match $format {
            Format::F32 => {
                type $F = f32;
                $body
            }
            Format::Bf16 => {
                type $F = half::bf16;
                $body
            }
            Format::F16 => {
                type $F = half::f16;
                $body
            }
        }
    };
}

/// Column values a chunk of the batch may take (16 MiB of bf16).
const COLUMNS: usize = 1 << 23;

/// A convolution the kernels take, with its shapes.
#[derive(Clone, Debug)]
pub(crate) struct ConvPlan {
    shape: ConvShape,
    out_channels: usize,
    /// The output's shape (rank 3 for a 1-d convolution, 4 for a 2-d one).
    out: Shape,
}

impl ConvPlan {
    /// The plan of a convolution, or `None` for what the kernels do not take (groups,
    /// other ranks or dtypes, a kernel that does not fit): those go to the backend.
    pub(crate) fn of(
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        g: &ConvGeometry,
    ) -> Option<ConvPlan> {
        format(x.dtype())?;
        format(weight.dtype())?;
        if let Some(b) = bias {
            format(b.dtype())?;
        }
        let (xs, ws) = (x.layout().shape(), weight.layout().shape());
        let rank = xs.num_dims();
        if g.groups != 1 || ws.num_dims() != rank || !(rank == 3 || rank == 4) || ws[1] != xs[1] {
            return None;
        }
        let (size, kernel) = if rank == 4 {
            ([xs[2], xs[3]], [ws[2], ws[3]])
        } else {
            ([1, xs[2]], [1, ws[2]])
        };
        let shape = ConvShape {
            batch: xs[0],
            channels: xs[1],
            size,
            kernel,
            stride: g.stride,
            padding: g.padding,
            dilation: g.dilation,
        };
        let out_channels = ws[0];
        if bias.is_some_and(|b| b.layout().num_elements() != out_channels) {
            return None;
        }
        let [oh, ow] = shape.out_size()?;
        let out = if rank == 4 {
            Shape::new([xs[0], out_channels, oh, ow])
        } else {
            Shape::new([xs[0], out_channels, ow])
        };
        Some(ConvPlan {
            shape,
            out_channels,
            out,
        })
    }

    /// Samples per chunk, so that a chunk's columns stay within `COLUMNS` values.
    fn chunk(&self) -> usize {
        let per_sample = (self.shape.patch() * self.shape.positions()).max(1);
        (COLUMNS / per_sample).clamp(1, self.shape.batch.max(1))
    }

    fn chunks(&self) -> impl Iterator<Item = core::ops::Range<usize>> {
        let (n, step) = (self.shape.batch, self.chunk());
        (0..n.div_ceil(step)).map(move |i| i * step..n.min((i + 1) * step))
    }

    /// The convolution of `x` by `weight` plus `bias`, operands rounded to `kernel`'s
    /// format, in `out`.
    pub(crate) fn forward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        out: DType,
    ) -> FlexTensor {
        let (x, weight) = (contiguous(x), contiguous(weight));
        let bias = bias.map(|b| values_f32(kernel.isa(), &contiguous(b)));
        with_float!(x.dtype(), X => with_float!(weight.dtype(), W => with_float!(out, O => {
            with_format!(kernel.format(), F => from_vec::<O>(
                self.forward_typed::<X, W, F, O>(
                    kernel,
                    values::<X>(&x),
                    values::<W>(&weight),
                    bias.as_deref(),
                ),
                self.out.clone(),
            ))
        })))
    }

    fn forward_typed<X: CpuFloat, W: CpuFloat, F: CpuFloat, O: CpuFloat>(
        &self,
        kernel: Kernel,
        x: &[X],
        weight: &[W],
        bias: Option<&[f32]>,
    ) -> Vec<O> {
        let isa = kernel.isa();
        let (k, l, oc) = (
            self.shape.patch(),
            self.shape.positions(),
            self.out_channels,
        );
        let mut y = zeros::<O>(self.shape.batch * oc * l);
        let w = MatRef::row_major(weight, oc, k).expect("a weight of out x patch values");
        // Buffers for the largest chunk, reused by the others.
        let most = self.chunk();
        let mut cols = zeros::<F>(k * most * l);
        let mut tmp = if most > 1 {
            zeros::<O>(oc * most * l)
        } else {
            Vec::new()
        };
        for samples in self.chunks() {
            let count = samples.len();
            let cols = self.columns(isa, x, samples.clone(), &mut cols);
            let dst = &mut y[samples.start * oc * l..samples.end * oc * l];
            // One sample's product is its output ([out, positions]); several are [out,
            // samples, positions], permuted into [samples, out, positions].
            let product = |c: &mut [O]| {
                match bias {
                    Some(b) => gemm::gemm_row_bias(kernel, w, cols, b, c),
                    None => gemm::gemm(kernel, w, cols, c),
                }
                .expect("shapes checked by the plan")
            };
            if count == 1 {
                product(dst);
            } else {
                let tmp = &mut tmp[..oc * count * l];
                product(tmp);
                copy_strided(
                    tmp,
                    0,
                    &[count, oc, l],
                    &[l as isize, (count * l) as isize, 1],
                    dst,
                )
                .expect("a permutation of the product");
            }
        }
        y
    }

    /// The columns of the samples `samples` of `x`, in the front of `buf`.
    fn columns<'a, X: CpuFloat, F: CpuFloat>(
        &self,
        isa: Isa,
        x: &[X],
        samples: core::ops::Range<usize>,
        buf: &'a mut [F],
    ) -> MatRef<'a, F> {
        let (k, width) = (self.shape.patch(), samples.len() * self.shape.positions());
        let cols = &mut buf[..k * width];
        conv::im2col(isa, &self.shape, x, samples, cols).expect("checked by the plan");
        MatRef::row_major(cols, k, width).expect("patch x positions")
    }

    /// The gradients of `x`, `weight` and the bias (those `wants` asks for) from the
    /// output's gradient `dy`, each in its dtype of `dtypes`, the products' operands
    /// rounded to `kernel`'s format.
    pub(crate) fn backward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        dy: &FlexTensor,
        wants: [bool; 3],
        dtypes: [DType; 3],
    ) -> [Option<FlexTensor>; 3] {
        let (x, weight, dy) = (contiguous(x), contiguous(weight), contiguous(dy));
        let [dx, dw, db] = with_float!(x.dtype(), X => with_float!(weight.dtype(), W => {
            with_float!(dy.dtype(), G => with_format!(kernel.format(), F => {
                self.backward_typed::<X, W, G, F>(
                    kernel,
                    values::<X>(&x),
                    values::<W>(&weight),
                    values::<G>(&dy),
                    wants,
                )
            }))
        }));
        let isa = kernel.isa();
        let to = |v: Option<Vec<f32>>, dtype: DType, shape: Shape| {
            v.map(
                |v| with_float!(dtype, D => from_vec::<D>(cast::to_vec::<f32, D>(isa, &v), shape)),
            )
        };
        [
            to(dx, dtypes[0], x.layout().shape().clone()),
            to(dw, dtypes[1], weight.layout().shape().clone()),
            to(db, dtypes[2], Shape::new([self.out_channels])),
        ]
    }

    fn backward_typed<X: CpuFloat, W: CpuFloat, G: CpuFloat, F: CpuFloat>(
        &self,
        kernel: Kernel,
        x: &[X],
        weight: &[W],
        dy: &[G],
        wants: [bool; 3],
    ) -> [Option<Vec<f32>>; 3] {
        let isa = kernel.isa();
        let (k, l, oc) = (
            self.shape.patch(),
            self.shape.positions(),
            self.out_channels,
        );
        let mut dx = wants[0].then(|| vec![0f32; x.len()]);
        let mut dw = wants[1].then(|| vec![0f32; k * oc]);
        let mut db = wants[2].then(|| vec![0f32; oc]);
        let w = MatRef::row_major(weight, oc, k).expect("a weight of out x patch values");
        let sample = self.shape.sample();
        // Buffers for the largest chunk, reused by the others.
        let most = self.chunk();
        let mut g = zeros::<G>(oc * most * l);
        let mut cols = if wants[1] {
            zeros::<F>(k * most * l)
        } else {
            Vec::new()
        };
        let mut dcols = if wants[0] {
            zeros::<f32>(k * most * l)
        } else {
            Vec::new()
        };
        let mut part = vec![0f32; k * oc];
        for samples in self.chunks() {
            let count = samples.len();
            // The chunk's output gradient as [out, samples * positions].
            let g = &mut g[..oc * count * l];
            copy_strided(
                dy,
                samples.start * oc * l,
                &[oc, count, l],
                &[l as isize, (oc * l) as isize, 1],
                g,
            )
            .expect("the chunk of the output gradient");
            let gm = MatRef::row_major(g, oc, count * l).expect("out x positions");
            if let Some(dw) = dw.as_mut() {
                // dw^T = cols g^T: both operands pack along their unit stride, and a panel
                // of the output spans the output channels (a patch may be narrower).
                let cols = &mut cols[..k * count * l];
                conv::im2col(isa, &self.shape, x, samples.clone(), cols)
                    .expect("checked by the plan");
                let cm = MatRef::row_major(cols, k, count * l).expect("k x positions");
                gemm::gemm(kernel, cm, gm.transpose(), &mut part).expect("k x out");
                dw.iter_mut().zip(&part).for_each(|(a, p)| *a += p);
            }
            if let Some(dx) = dx.as_mut() {
                let dcols = &mut dcols[..k * count * l];
                gemm::gemm(kernel, w.transpose(), gm, dcols).expect("k x positions");
                let dst = &mut dx[samples.start * sample..samples.end * sample];
                dst.fill(0.0);
                conv::col2im(&self.shape, dcols, samples.clone(), dst)
                    .expect("checked by the plan");
            }
            if let Some(db) = db.as_mut() {
                let mut row = vec![0f32; count * l];
                for (o, sum) in db.iter_mut().enumerate() {
                    cast::convert(isa, &g[o * count * l..(o + 1) * count * l], &mut row)
                        .expect("equal lengths");
                    *sum += row.iter().sum::<f32>();
                }
            }
        }
        // dw was summed transposed: [patch, out] into [out, patch].
        let dw = dw.map(|t| {
            let mut out = vec![0f32; oc * k];
            copy_strided(&t, 0, &[oc, k], &[1, oc as isize], &mut out).expect("a transpose");
            out
        });
        [dx, dw, db]
    }
}

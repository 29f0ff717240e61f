//! 1-d and 2-d convolutions (one group) on Flex through the CPU GEMM: `im2col` of a chunk
//! of the batch in the compute format (a pointwise convolution's input samples are their
//! own columns, read where they lie), `weight x cols` with the bias added to the f32
//! sums (the weight packed for the GEMM once per call), the result in the dtype asked for;
//! and the gradients, each in its operand's dtype (an f32 weight's summed over the batch in
//! f32, written in f32; the input's a product per phase of the stride, from the output
//! gradient's columns, each phase's weight packed once per call). A transposed
//! convolution is that input gradient (plus its bias): it runs as such, and its gradients
//! are the convolution's output and weight gradient.

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::cast::{self, CpuFloat, Format};
use burn_amp_kernels::cpu::conv::{self, ConvShape, GradPhase};
use burn_amp_kernels::cpu::{Isa, parallel};
use core::cell::Cell;
use core::ops::Range;

use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef, PackedA, Threads};
use burn_amp_kernels::cpu::layout::copy_strided;
use burn_tensor::{DType, Shape};
use bytemuck::Pod;

use super::super::ConvGeometry;
use super::arithmetic::block_sums;
use super::layout::contiguous;
use super::tensor::{converted, format, from_vec, to_fill, values, values_f32, zeros};
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

/// Column values a chunk of the batch may take when one product runs on all threads (16
/// MiB of bf16).
const COLUMNS: usize = 1 << 23;

/// Column values a chunk of the batch aims at when each runs on one thread (256 KiB of
/// bf16): with its product, within a core's L2 cache.
const TASK_COLUMNS: usize = 1 << 17;

/// A convolution the kernels take, with its shapes. A transposed convolution is planned
/// as the convolution whose input gradient it is (`shape`: that convolution's), so that
/// its output is that input gradient, its input gradient that convolution's output, and
/// its weight gradient that convolution's, with input and output gradient swapped.
#[derive(Clone, Debug)]
pub(crate) struct ConvPlan {
    shape: ConvShape,
    out_channels: usize,
    /// The convolution's output shape (rank 3 for a 1-d convolution, 4 for a 2-d one).
    out: Shape,
    /// The convolution's input shape: a transposed convolution's output.
    input: Shape,
    transposed: bool,
}

impl ConvPlan {
    /// The plan of a convolution or a transposed one, or `None` for what the kernels do
    /// not take (groups, other ranks or dtypes, a kernel that does not fit, an output
    /// padding of a stride or more): those go to the backend.
    pub(crate) fn of(
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        g: &ConvGeometry,
    ) -> Option<ConvPlan> {
        let ops = Operands::of(x, weight, bias)?;
        let (xs, ws) = (ops.x, ops.weight);
        if g.groups != 1 {
            return None;
        }
        let size = ops.spatial(xs);
        let kernel = ops.spatial(ws);
        // The convolution's input channels, output channels and input size.
        let (channels, out_channels, size) = match g.transposed {
            None if ws[1] == xs[1] => (xs[1], ws[0], size),
            Some(padding_out) if ws[0] == xs[1] => {
                let axis = |a: usize| {
                    (size[a].checked_sub(1)?.checked_mul(g.stride[a])?)
                        .checked_add(g.dilation[a].checked_mul(kernel[a].checked_sub(1)?)?)?
                        .checked_add(1)?
                        .checked_add(padding_out[a])?
                        .checked_sub(g.padding[a].checked_mul(2)?)
                };
                (ws[1], ws[0], [axis(0)?, axis(1)?])
            }
            _ => return None,
        };
        let shape = ops.conv_shape(channels, size, g);
        let transposed = g.transposed.is_some();
        let biased = if transposed { channels } else { out_channels };
        if bias.is_some_and(|b| b.layout().num_elements() != biased) {
            return None;
        }
        let out_size = shape.out_size()?;
        // A transposed convolution's input is its convolution's output, whole (an output
        // padding of a stride or more would leave positions out).
        if transposed && out_size != ops.spatial(xs) {
            return None;
        }
        let of = |c: usize, size: [usize; 2]| ops.shape(c, size);
        Some(ConvPlan {
            shape,
            out_channels,
            out: of(out_channels, out_size),
            input: of(channels, size),
            transposed,
        })
    }

    /// How the batch is split. With at least as many samples as threads, each thread takes
    /// an equal run of samples, in chunks whose columns fit a core's caches, each product on
    /// that thread; otherwise (a few samples) one run, in chunks bounded by `COLUMNS`, each
    /// product on all threads. The runs depend on the thread count alone, so the weight
    /// gradient's sums do too: a run is repeatable.
    fn split(&self) -> Split {
        let per_sample = (self.shape.patch() * self.shape.positions()).max(1);
        let batch = self.shape.batch;
        let threads = rayon::current_num_threads().max(1);
        if threads > 1 && batch >= threads {
            let runs = (0..threads)
                .map(|t| batch * t / threads..batch * (t + 1) / threads)
                .collect();
            let step = (TASK_COLUMNS / per_sample).max(1);
            Split {
                runs,
                step,
                threads: Threads::Caller,
            }
        } else {
            Split {
                runs: core::iter::once(0..batch).collect(),
                step: (COLUMNS / per_sample).clamp(1, batch.max(1)),
                threads: Threads::Pool,
            }
        }
    }

    /// The convolution (or transposed convolution) of `x` by `weight` plus `bias`,
    /// operands rounded to `kernel`'s format, in `out`.
    pub(crate) fn forward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        out: DType,
    ) -> FlexTensor {
        if self.transposed {
            let bias = bias.map(|b| values_f32(kernel.isa(), b));
            return self.input_grad(kernel, weight, x, bias.as_deref(), out);
        }
        self.direct(kernel, x, weight, bias, out)
    }

    /// The convolution's output: `x` by `weight` plus `bias`.
    fn direct(
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

    fn forward_typed<X: CpuFloat, W: CpuFloat, F: CpuFloat + Pod, O: CpuFloat + Pod>(
        &self,
        kernel: Kernel,
        x: &[X],
        weight: &[W],
        bias: Option<&[f32]>,
    ) -> Vec<O> {
        let (l, oc) = (self.shape.positions(), self.out_channels);
        let mut y = to_fill::<O>(self.shape.batch * oc * l);
        // The weight rounded and laid out for the kernel once, for every chunk's product.
        let weight = rounded::<W, F>(kernel.isa(), weight);
        let weight = MatRef::row_major(&weight, oc, self.shape.patch())
            .expect("a weight of out x patch values");
        let weight = PackedA::new(kernel, weight);
        let split = self.split();
        let run = |(samples, dst): (Range<usize>, &mut [O])| {
            let mut bufs = Buffers::take();
            for chunk in split.chunks(samples.clone()) {
                let at =
                    (chunk.start - samples.start) * oc * l..(chunk.end - samples.start) * oc * l;
                let dst = &mut dst[at];
                self.forward_chunk::<X, F, O>(
                    kernel,
                    split.threads,
                    x,
                    &weight,
                    bias,
                    chunk,
                    dst,
                    &mut bufs,
                );
            }
            bufs.give_back();
        };
        let runs = split.runs.iter().cloned();
        let jobs: Vec<_> = runs.zip(split.slices(&mut y, oc * l)).collect();
        match split.threads {
            Threads::Caller => drop(parallel::map_each(jobs, run)),
            Threads::Pool => jobs.into_iter().for_each(run),
        }
        y
    }

    /// The output `dst` (`[samples, out, positions]`) of the samples `samples`, with the
    /// thread's buffers.
    #[allow(clippy::too_many_arguments)]
    fn forward_chunk<X: CpuFloat, F: CpuFloat + Pod, O: CpuFloat + Pod>(
        &self,
        kernel: Kernel,
        threads: Threads,
        x: &[X],
        weight: &PackedA,
        bias: Option<&[f32]>,
        samples: Range<usize>,
        dst: &mut [O],
        bufs: &mut Buffers,
    ) {
        let [cols, tmp, ..] = &mut bufs.0;
        let (k, l, oc) = (
            self.shape.patch(),
            self.shape.positions(),
            self.out_channels,
        );
        let count = samples.len();
        if self.shape.is_pointwise() {
            // A sample of the input is its own columns: each product reads it where it
            // lies (the packing rounds it as `im2col` would) and writes its output.
            for (i, sample) in samples.enumerate() {
                let x = MatRef::row_major(&x[sample * k * l..][..k * l], k, l)
                    .expect("a sample of patch x positions");
                gemm::gemm_packed_on(threads, weight, x, bias, &mut dst[i * oc * l..][..oc * l])
                    .expect("shapes checked by the plan");
            }
            return;
        }
        let cols = self.columns(kernel.isa(), x, samples, grown::<F>(cols, k * count * l));
        // One sample's product is its output ([out, positions]); several are [out,
        // samples, positions], permuted into [samples, out, positions].
        let product = |c: &mut [O]| {
            gemm::gemm_packed_on(threads, weight, cols, bias, c)
                .expect("shapes checked by the plan")
        };
        if count == 1 {
            product(dst);
        } else {
            let tmp = grown::<O>(tmp, oc * count * l);
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
        if !self.transposed {
            return self.gradients(kernel, x, weight, dy, wants, dtypes);
        }
        // y = the convolution's input gradient of x, plus the bias: dx is the
        // convolution's output of dy, dw its weight gradient at input dy and output
        // gradient x, the bias's gradient dy's channel sums.
        let dx = wants[0].then(|| self.direct(kernel, dy, weight, None, dtypes[0]));
        let dw = if wants[1] {
            let [_, dw, _] = self.gradients(kernel, dy, weight, x, [false, true, false], dtypes);
            dw
        } else {
            None
        };
        let db = wants[2].then(|| {
            let isa = kernel.isa();
            let dy = contiguous(dy);
            let plane = self.shape.size[0] * self.shape.size[1];
            let blocks = [self.shape.batch, self.shape.channels, plane];
            let sums = with_float!(dy.dtype(), G => block_sums(isa, values::<G>(&dy), blocks));
            let shape = Shape::new([self.shape.channels]);
            with_float!(dtypes[2], D => from_vec::<D>(converted::<f32, D>(isa, &sums), shape))
        });
        [dx, dw, db]
    }

    /// The convolution's input gradient from `dy` (its output's gradient), plus `bias`
    /// (one value per input channel), in `dtype`: a transposed convolution's output.
    fn input_grad(
        &self,
        kernel: Kernel,
        weight: &FlexTensor,
        dy: &FlexTensor,
        bias: Option<&[f32]>,
        dtype: DType,
    ) -> FlexTensor {
        let (weight, dy) = (contiguous(weight), contiguous(dy));
        let mut dx = InputGrad::zeros(dtype, self.input.num_elements());
        with_float!(weight.dtype(), W => with_float!(dy.dtype(), G => {
            with_format!(kernel.format(), F => {
                // No weight gradient is asked for: the input (`&[]`) is not read.
                self.backward_typed::<G, W, G, F>(
                    kernel,
                    &[],
                    values::<W>(&weight),
                    values::<G>(&dy),
                    Some((&mut dx, bias)),
                    [false, false],
                )
            })
        }));
        dx.into_tensor(self.input.clone())
    }

    /// The convolution's gradients (see [`ConvPlan::backward`]).
    fn gradients(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        dy: &FlexTensor,
        wants: [bool; 3],
        dtypes: [DType; 3],
    ) -> [Option<FlexTensor>; 3] {
        let (x, weight, dy) = (contiguous(x), contiguous(weight), contiguous(dy));
        let isa = kernel.isa();
        let x_len = x.layout().num_elements();
        let mut dx = wants[0].then(|| InputGrad::zeros(dtypes[0], x_len));
        let [dw, db] = with_float!(x.dtype(), X => with_float!(weight.dtype(), W => {
            with_float!(dy.dtype(), G => with_format!(kernel.format(), F => {
                self.backward_typed::<X, W, G, F>(
                    kernel,
                    values::<X>(&x),
                    values::<W>(&weight),
                    values::<G>(&dy),
                    dx.as_mut().map(|dx| (dx, None)),
                    [wants[1], wants[2]],
                )
            }))
        }));
        let to = |v: Option<Vec<f32>>, dtype: DType, shape: Shape| {
            v.map(|v| with_float!(dtype, D => from_vec::<D>(converted::<f32, D>(isa, &v), shape)))
        };
        [
            dx.map(|dx| dx.into_tensor(x.layout().shape().clone())),
            to(dw, dtypes[1], weight.layout().shape().clone()),
            to(db, dtypes[2], Shape::new([self.out_channels])),
        ]
    }

    /// The weight and bias gradients (those `wants` asks for, in f32), and the input
    /// gradient into `dx` where given, with its bias (a transposed convolution's) added.
    fn backward_typed<X: CpuFloat, W: CpuFloat, G: CpuFloat + Pod, F: CpuFloat + Pod>(
        &self,
        kernel: Kernel,
        x: &[X],
        weight: &[W],
        dy: &[G],
        dx: Option<(&mut InputGrad, Option<&[f32]>)>,
        wants: [bool; 2],
    ) -> [Option<Vec<f32>>; 2] {
        let (k, oc) = (self.shape.patch(), self.out_channels);
        let weight = rounded::<W, F>(kernel.isa(), weight);
        let weight = weight.as_slice();
        let bias = dx.as_ref().and_then(|(_, bias)| bias.map(<[f32]>::to_vec));
        let phases = dx
            .is_some()
            .then(|| self.phase_weights(kernel, weight, bias));
        let phases = phases.as_ref();
        let split = self.split();
        // Each run's input gradient is its own slice of dx.
        let parts: Vec<Option<InputGradPart>> = match dx {
            Some((dx, _)) => dx
                .parts(&split, self.shape.sample())
                .into_iter()
                .map(Some)
                .collect(),
            None => split.runs.iter().map(|_| None).collect(),
        };
        let run = |(samples, mut dx): (Range<usize>, Option<InputGradPart>)| {
            let mut sums = Sums::zeros(wants, k * oc, oc);
            let mut bufs = Buffers::take();
            for chunk in split.chunks(samples.clone()) {
                let sample = self.shape.sample();
                let at =
                    (chunk.start - samples.start) * sample..(chunk.end - samples.start) * sample;
                let dx = dx.as_mut().map(|dx| (dx, at));
                let operands = (x, phases, dy);
                self.backward_chunk::<X, F, G>(
                    kernel,
                    split.threads,
                    operands,
                    chunk,
                    dx,
                    &mut sums,
                    &mut bufs,
                );
            }
            bufs.give_back();
            sums
        };
        let jobs: Vec<_> = split.runs.iter().cloned().zip(parts).collect();
        // Summed in the runs' order, whichever thread ends first.
        let runs: Vec<Sums> = match split.threads {
            Threads::Caller => parallel::map_each(jobs, run),
            Threads::Pool => jobs.into_iter().map(run).collect(),
        };
        let Sums { dw, db } = runs
            .into_iter()
            .reduce(Sums::add)
            .unwrap_or_else(|| Sums::zeros(wants, k * oc, oc));
        // dw was summed transposed: [patch, out] into [out, patch].
        let dw = dw.map(|t| {
            let mut out = vec![0f32; oc * k];
            copy_strided(&t, 0, &[oc, k], &[1, oc as isize], &mut out).expect("a transpose");
            out
        });
        [dw, db]
    }

    /// The input gradient's phases, each with its weight (from the weight already rounded
    /// to the compute format `F`: a copy) packed for `kernel`, once for every chunk; and
    /// the bias added to the input gradient.
    fn phase_weights<F: CpuFloat>(
        &self,
        kernel: Kernel,
        weight: &[F],
        bias: Option<Vec<f32>>,
    ) -> PhaseWeights {
        let oc = self.out_channels;
        let phases = self.shape.grad_phases().expect("checked by the plan");
        let weights = phases
            .iter()
            .map(|phase| {
                let mut wt = vec![F::default(); self.shape.channels * phase.depth(oc)];
                phase
                    .weight(&self.shape, oc, weight, &mut wt)
                    .expect("a weight of out x patch values");
                let wt = MatRef::row_major(&wt, self.shape.channels, phase.depth(oc))
                    .expect("channels x depth");
                PackedA::new(kernel, wt)
            })
            .collect();
        PhaseWeights {
            phases,
            weights,
            bias,
        }
    }

    /// The gradients of the samples `samples`: their input gradient into `dx` (a product
    /// per phase of the input gradient, from the phases' weights `phases`), their weight
    /// and bias gradients added to `sums`.
    #[allow(clippy::too_many_arguments)]
    fn backward_chunk<X: CpuFloat, F: CpuFloat + Pod, G: CpuFloat + Pod>(
        &self,
        kernel: Kernel,
        threads: Threads,
        (x, phases, dy_all): (&[X], Option<&PhaseWeights>, &[G]),
        samples: Range<usize>,
        dx: Option<(&mut InputGradPart, Range<usize>)>,
        sums: &mut Sums,
        bufs: &mut Buffers,
    ) {
        let [g_buf, cols_buf, product_buf, part_buf] = &mut bufs.0;
        let isa = kernel.isa();
        let (k, l, oc) = (
            self.shape.patch(),
            self.shape.positions(),
            self.out_channels,
        );
        let count = samples.len();
        // The chunk's output gradient as [out, samples * positions]: one sample's is its
        // slice of dy, several are permuted.
        let dy = &dy_all[samples.start * oc * l..samples.end * oc * l];
        let g: &[G] = if count == 1 {
            dy
        } else {
            let g = grown::<G>(g_buf, oc * count * l);
            copy_strided(
                dy,
                0,
                &[oc, count, l],
                &[l as isize, (oc * l) as isize, 1],
                g,
            )
            .expect("the chunk of the output gradient");
            g
        };
        let gm = MatRef::row_major(g, oc, count * l).expect("out x positions");
        if let Some(dw) = sums.dw.as_mut() {
            // dw^T = cols g^T: both operands pack along their unit stride, and a panel of
            // the output spans the output channels (a patch may be narrower).
            let cols = grown::<F>(cols_buf, k * count * l);
            conv::im2col(isa, &self.shape, x, samples.clone(), cols).expect("checked by the plan");
            let cm = MatRef::row_major(cols, k, count * l).expect("k x positions");
            let part = grown::<f32>(part_buf, k * oc);
            gemm::gemm_on::<_, _, f32, _>(threads, kernel, cm, gm.transpose(), None, part)
                .expect("k x out");
            dw.iter_mut().zip(part.iter()).for_each(|(a, p)| *a += p);
        }
        if let (Some((dx, at)), Some(pw)) = (dx, phases) {
            // Each phase's positions from dy's columns at stride 1 in the compute format, in
            // place of weight^T g (a column gradient `patch` times dy's size, in f32) summed
            // into a cleared dx by col2im: about a third of a small CNN's step on a 2-core
            // Xeon went to that sum, its clearing and the input gradient's rounding.
            let c = self.shape.channels;
            let widths: Vec<usize> = pw.phases.iter().map(|p| count * p.positions()).collect();
            let all = grown::<f32>(product_buf, c * widths.iter().sum::<usize>());
            let mut rest = &mut all[..];
            let mut products: Vec<&[f32]> = Vec::with_capacity(widths.len());
            for ((phase, wt), &width) in pw.phases.iter().zip(&pw.weights).zip(&widths) {
                let (product, tail) = core::mem::take(&mut rest).split_at_mut(c * width);
                rest = tail;
                let depth = phase.depth(oc);
                if self.shape.is_pointwise() {
                    // The one phase's columns are the chunk's output gradient itself.
                    gemm::gemm_packed_on::<_, f32, _>(threads, wt, gm, None, product)
                        .expect("channels x positions");
                } else if depth > 0 {
                    let cols = grown::<F>(cols_buf, depth * width);
                    phase
                        .columns(isa, &self.shape, oc, dy_all, samples.clone(), cols)
                        .expect("checked by the plan");
                    let b = MatRef::row_major(cols, depth, width).expect("depth x positions");
                    gemm::gemm_packed_on::<_, f32, _>(threads, wt, b, None, product)
                        .expect("channels x positions");
                }
                products.push(product);
            }
            dx.store(isa, &self.shape, oc, pw, &products, at);
        }
        if let Some(db) = sums.db.as_mut() {
            // Each channel's row summed where it lies, in lanes (one running sum waited on
            // every addition: about a tenth of a small CNN's step on a 2-core Xeon).
            for (o, sum) in db.iter_mut().enumerate() {
                *sum += cast::sum_widened(isa, &g[o * count * l..(o + 1) * count * l]);
            }
        }
    }
}

/// A convolution's operands as burn-amp's kernels take them: dtypes they read (the bias's
/// too), an input and a weight of one rank, 3 (1-d, read as 2-d of height 1) or 4.
pub(super) struct Operands<'a> {
    pub x: &'a Shape,
    pub weight: &'a Shape,
}

impl<'a> Operands<'a> {
    pub(super) fn of(
        x: &'a FlexTensor,
        weight: &'a FlexTensor,
        bias: Option<&FlexTensor>,
    ) -> Option<Operands<'a>> {
        format(x.dtype())?;
        format(weight.dtype())?;
        if let Some(b) = bias {
            format(b.dtype())?;
        }
        let (xs, ws) = (x.layout().shape(), weight.layout().shape());
        let rank = xs.num_dims();
        (ws.num_dims() == rank && (rank == 3 || rank == 4))
            .then_some(Operands { x: xs, weight: ws })
    }

    /// The height and width of `s` (one of the operands' rank; height 1 in 1-d).
    pub(super) fn spatial(&self, s: &Shape) -> [usize; 2] {
        match s.num_dims() {
            4 => [s[2], s[3]],
            _ => [1, s[2]],
        }
    }

    /// The shape `[batch, channels, h, w]` of the operands' rank (`[batch, channels, w]`
    /// in 1-d).
    pub(super) fn shape(&self, channels: usize, [h, w]: [usize; 2]) -> Shape {
        match self.x.num_dims() {
            4 => Shape::new([self.x[0], channels, h, w]),
            _ => Shape::new([self.x[0], channels, w]),
        }
    }

    /// The geometry of a convolution of `channels` input channels of `size` by the
    /// weight's kernel.
    pub(super) fn conv_shape(
        &self,
        channels: usize,
        size: [usize; 2],
        g: &ConvGeometry,
    ) -> ConvShape {
        ConvShape {
            batch: self.x[0],
            channels,
            size,
            kernel: self.spatial(self.weight),
            stride: g.stride,
            padding: g.padding,
            dilation: g.dilation,
        }
    }
}

/// The weight in the compute format `F`, rounded once per convolution: every chunk's
/// product packs it, and a copy already in `F` packs without rounding again (the same
/// rounding, so the same bits).
fn rounded<W: CpuFloat, F: CpuFloat>(isa: Isa, weight: &[W]) -> Vec<F> {
    cast::to_vec(isa, weight)
}

/// How a convolution's batch is split across threads (see `ConvPlan::split`).
struct Split {
    /// Each thread's samples, in order.
    runs: Vec<Range<usize>>,
    /// Samples a chunk of a run takes at most.
    step: usize,
    /// Who runs each product.
    threads: Threads,
}

impl Split {
    /// The chunks of the run `samples`.
    fn chunks(&self, samples: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let step = self.step;
        samples
            .clone()
            .step_by(step)
            .map(move |s| s..(s + step).min(samples.end))
    }

    /// `buf` (`per_sample` values a sample) cut into the runs' slices.
    fn slices<'a, T>(&self, mut buf: &'a mut [T], per_sample: usize) -> Vec<&'a mut [T]> {
        self.runs
            .iter()
            .map(|run| {
                let (head, rest) = core::mem::take(&mut buf).split_at_mut(run.len() * per_sample);
                buf = rest;
                head
            })
            .collect()
    }
}

/// A run's share of the weight gradient (transposed, `[patch, out]`) and of the bias
/// gradient, summed over the chunks in f32.
struct Sums {
    dw: Option<Vec<f32>>,
    db: Option<Vec<f32>>,
}

impl Sums {
    /// Zeros for the gradients `[dw, db]` asks for.
    fn zeros([dw, db]: [bool; 2], weight: usize, out: usize) -> Sums {
        Sums {
            dw: dw.then(|| vec![0f32; weight]),
            db: db.then(|| vec![0f32; out]),
        }
    }

    fn add(mut self, other: Sums) -> Sums {
        let add = |a: &mut Option<Vec<f32>>, b: Option<Vec<f32>>| {
            if let (Some(a), Some(b)) = (a.as_mut(), b) {
                a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
            }
        };
        add(&mut self.dw, other.dw);
        add(&mut self.db, other.db);
        self
    }
}

/// The input gradient of a convolution, in its dtype.
enum InputGrad {
    F32(Vec<f32>),
    Bf16(Vec<half::bf16>),
    F16(Vec<half::f16>),
}

/// A run's slice of an [`InputGrad`].
enum InputGradPart<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [half::bf16]),
    F16(&'a mut [half::f16]),
}

impl InputGrad {
    /// `len` zeros of `dtype` (f32, bf16 or f16, as [`with_float!`] takes).
    fn zeros(dtype: DType, len: usize) -> InputGrad {
        match dtype {
            DType::BF16 => InputGrad::Bf16(zeros(len)),
            DType::F16 => InputGrad::F16(zeros(len)),
            DType::F32 | DType::Flex32 => InputGrad::F32(zeros(len)),
            other => panic!("burn-amp's kernels take f32, f16 or bf16 tensors, not {other:?}"),
        }
    }

    /// The runs' slices of `split` (`per_sample` values a sample).
    fn parts(&mut self, split: &Split, per_sample: usize) -> Vec<InputGradPart<'_>> {
        match self {
            InputGrad::F32(v) => split
                .slices(v, per_sample)
                .into_iter()
                .map(InputGradPart::F32)
                .collect(),
            InputGrad::Bf16(v) => split
                .slices(v, per_sample)
                .into_iter()
                .map(InputGradPart::Bf16)
                .collect(),
            InputGrad::F16(v) => split
                .slices(v, per_sample)
                .into_iter()
                .map(InputGradPart::F16)
                .collect(),
        }
    }

    fn into_tensor(self, shape: Shape) -> FlexTensor {
        match self {
            InputGrad::F32(v) => from_vec(v, shape),
            InputGrad::Bf16(v) => from_vec(v, shape),
            InputGrad::F16(v) => from_vec(v, shape),
        }
    }
}

impl InputGradPart<'_> {
    /// Stores the phases' products (f32) at their positions of the slice `at`, plus the
    /// bias, rounded.
    fn store(
        &mut self,
        isa: Isa,
        shape: &ConvShape,
        out_channels: usize,
        pw: &PhaseWeights,
        products: &[&[f32]],
        at: Range<usize>,
    ) {
        let (oc, p, b, phases) = (out_channels, products, pw.bias.as_deref(), &pw.phases);
        let stored = match self {
            InputGradPart::F32(v) => conv::store_phases(isa, shape, oc, phases, p, b, &mut v[at]),
            InputGradPart::Bf16(v) => conv::store_phases(isa, shape, oc, phases, p, b, &mut v[at]),
            InputGradPart::F16(v) => conv::store_phases(isa, shape, oc, phases, p, b, &mut v[at]),
        };
        stored.expect("a chunk's values");
    }
}

/// The input gradient's phases and each one's weight `[channels, depth]`, packed; the
/// bias added to the input gradient (a transposed convolution's), one value a channel.
struct PhaseWeights {
    phases: Vec<GradPhase>,
    weights: Vec<PackedA>,
    bias: Option<Vec<f32>>,
}

/// A thread's buffers for its chunks (columns, products, gradients), kept between calls:
/// a training step then neither faults in fresh pages nor unmaps megabytes per
/// convolution (an unmap interrupts every core to flush its TLB). They hold what the
/// largest chunk the thread has run needed.
#[derive(Default)]
struct Buffers([Vec<u32>; 4]);

thread_local! {
    /// Why a thread-local: per-thread scratch reused by every convolution the thread runs
    /// (as the GEMM's packing buffers are); it holds no state between calls.
    static BUFFERS: Cell<Option<Buffers>> = const { Cell::new(None) };
}

impl Buffers {
    fn take() -> Buffers {
        BUFFERS.with(|b| b.take()).unwrap_or_default()
    }

    fn give_back(self) {
        BUFFERS.with(|b| b.set(Some(self)));
    }
}

/// The first `len` values of type `T` in `buf`, grown to hold them.
fn grown<T: Pod>(buf: &mut Vec<u32>, len: usize) -> &mut [T] {
    let words = (len * core::mem::size_of::<T>()).div_ceil(4);
    if buf.len() < words {
        buf.resize(words, 0);
    }
    &mut bytemuck::cast_slice_mut::<u32, T>(&mut buf[..words])[..len]
}

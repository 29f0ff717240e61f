//! The Keras guide's custom training loop: forward, `loss.backward()`, optimizer step.
//! Loss scaling is automatic: the `LossScaleOptimizer` scales the backward pass.

use std::time::Instant;

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Tensor};
use burn_amp::fp8::Fp8Numerics;
use burn_amp::{FusedAdamWConfig, LossScaleOptimizer, MixedPrecision};

use crate::data::{Digit, DigitBatcher, shuffled};
use crate::model::KerasMlp;
use crate::numerics;
use crate::report::{EpochLine, Progress};
use crate::run::{Options, test_accuracy};
use burn::data::dataloader::batcher::Batcher;

pub fn train<B: AutodiffBackend>(
    device: &B::Device,
    options: &Options,
    train: &[Digit],
    test: &[Digit],
) -> EpochLine {
    type M<B> = MixedPrecision<B>;
    let mut model = KerasMlp::<M<B>>::new(device);
    let mut optim =
        LossScaleOptimizer::new(FusedAdamWConfig::adam().init::<M<B>, KerasMlp<M<B>>>());

    let mut last_line = None;
    for epoch in 1..=options.epochs {
        let start = Instant::now();
        let mut progress = Progress::new();
        let order = shuffled(train.len(), options.seed + epoch as u64);
        let mut loss_sum = Tensor::<M<B>, 1>::zeros([1], device);
        let mut correct = 0usize;
        let mut seen = 0usize;
        let steps = order.len().div_ceil(options.batch_size);
        for (step, chunk) in order.chunks(options.batch_size).enumerate() {
            let items = chunk.iter().map(|&i| train[i].clone()).collect();
            let batch = <DigitBatcher as Batcher<M<B>, _, _>>::batch(&DigitBatcher, items, device);
            let labels = batch.labels.clone();
            // `--numerics` and `--cost`: the last step of the run is recorded.
            let last = epoch == options.epochs && step + 1 == steps;
            // `--cost`: what the last step of the run costs, counted.
            let step_body = |model: KerasMlp<M<B>>, loss_sum: Tensor<M<B>, 1>| {
                let forward_backward = || {
                    let output = model.classify(batch);
                    let grads = output.loss.backward();
                    (output, grads)
                };
                let (output, grads) = match (&options.numerics, last) {
                    (Some(path), true) => {
                        let (step, report) = Fp8Numerics::record(forward_backward);
                        if let Err(message) = numerics::publish(&report, path) {
                            eprintln!("error: {message}");
                        }
                        let history = optim.fp8_history();
                        if !history.is_empty() {
                            println!(
                                "FP8 scaling state (per site and role) after the last step:\n{history}"
                            );
                        }
                        step
                    }
                    _ => forward_backward(),
                };
                let n = chunk.len();
                let loss_sum = loss_sum + output.loss.clone().detach().mul_scalar(n as f64);
                let predicted = output.output.clone().detach().argmax(1).squeeze_dim::<1>(1);
                let hits = predicted.equal(labels).int().sum().into_scalar();
                correct += hits.elem::<i64>() as usize;
                seen += n;

                let grads = GradientsParams::from_grads(grads, &model);
                (optim.step(options.lr, model, grads), loss_sum)
            };
            (model, loss_sum) = if options.cost && last {
                let (out, cost) = burn_amp::cost::record(|| step_body(model, loss_sum));
                println!(
                    "what the last training step cost under {}:\n{cost}",
                    options.policy
                );
                out
            } else {
                step_body(model, loss_sum)
            };
            progress.update(epoch, seen, train.len(), None);
        }
        let loss = loss_sum.into_scalar().elem::<f64>() / seen as f64;
        let accuracy = test_accuracy::<<M<B> as AutodiffBackend>::InnerBackend>(
            &model.valid(),
            test,
            options.batch_size,
            device,
        );
        let line = EpochLine {
            epoch,
            epochs: options.epochs,
            loss,
            train_accuracy: correct as f64 / seen as f64,
            test_accuracy: accuracy,
            loss_scale: options
                .policy
                .needs_loss_scaling()
                .then(|| optim.loss_scale()),
            skipped: optim.skipped_steps(),
            seconds: start.elapsed().as_secs_f64(),
        };
        line.print();
        last_line = Some(line);
        let _ = <M<B> as Backend>::sync(device);
    }
    last_line.expect("at least one epoch")
}

use burn::backend::{Autodiff, Flex};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::prelude::*;
use burn::tensor::Distribution;
use burn_amp::{LossScaleOptimizer, MixedPrecision};

// Was `Autodiff<Flex>`. MixedPrecision goes outside Autodiff: variables stay f32.
type B = MixedPrecision<Autodiff<Flex>>;

fn main() -> Result<(), burn_amp::PolicyError> {
    let device = Default::default();
    // f32 variables, f16 matmuls, f32 softmax and losses; a typo is an error naming the
    // valid policies.
    MixedPrecision::<Autodiff<Flex>>::set_policy(&device, "mixed_float16")?;

    let mut model: Linear<B> = LinearConfig::new(16, 16).init(&device);
    // f16 gradients can underflow: scale the loss, skip steps that overflow.
    let mut optim = LossScaleOptimizer::new(AdamConfig::new().init());
    let loss_fn = CrossEntropyLossConfig::new().init(&device);
    for _ in 0..20 {
        let x = Tensor::<B, 2>::random([32, 16], Distribution::Default, &device);
        let y = x.clone().argmax(1).reshape([32]); // the largest input's index
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
    let (dtype, scale) = (model.weight.val().dtype(), optim.loss_scale());
    println!("weights {dtype:?}, loss scale {scale}");
    Ok(())
}

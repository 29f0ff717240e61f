//! Quickstart: an ordinary Burn model and training loop; the only changes for mixed
//! precision are the backend type (`MixedPrecision<...>`) and the policy line.
//!
//! ```sh
//! cargo run --release --example quickstart                      # mixed_bfloat16 on Flex
//! cargo run --release --example quickstart -- mixed_float16     # any policy name
//! ```

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::activation::softmax;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_amp::MixedPrecision;

/// Was `type MyBackend = Autodiff<Flex>;`: the one line that changes.
type MyBackend = MixedPrecision<Autodiff<Flex>>;

/// An ordinary Burn model, untouched.
#[derive(Module, Debug)]
struct Model<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    act: Relu,
}

impl<B: Backend> Model<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(64, 128).init(device),
            fc2: LinearConfig::new(128, 4).init(device),
            act: Relu::new(),
        }
    }

    fn hidden(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.act.forward(self.fc1.forward(x))
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.fc2.forward(self.hidden(x))
    }
}

/// A toy task: the class is the quarter of the input vector with the largest sum.
fn batch<B: Backend>(device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let x = Tensor::<B, 2>::random([32, 64], Distribution::Uniform(-1.0, 1.0), device);
    let labels = x
        .clone()
        .reshape([32, 4, 16])
        .sum_dim(2)
        .reshape([32, 4])
        .argmax(1);
    (x, labels.reshape([32]))
}

fn main() {
    if let Err(err) = run() {
        eprintln!("error: {err}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), burn_amp::PolicyError> {
    let policy = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "mixed_bfloat16".into());
    let device = Default::default();
    // The other new line: the policy, checked against the device (a typed error if the
    // backend cannot run it).
    MixedPrecision::<Autodiff<Flex>>::set_policy(&device, policy.as_str())?;
    MyBackend::seed(&device, 0);

    let mut model = Model::<MyBackend>::new(&device);
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(&device);

    let (x, _) = batch::<MyBackend>(&device);
    let activation = model.hidden(x.clone());
    let probs = softmax(model.forward(x), 1);
    println!(
        "policy           {}",
        MixedPrecision::<Autodiff<Flex>>::policy(&device)?
    );
    println!("variable  dtype  {:?}", model.fc1.weight.val().dtype());
    println!("activation dtype {:?}", activation.dtype());
    println!("softmax   dtype  {:?}", probs.dtype());

    for step in 1..=200 {
        let (x, y) = batch::<MyBackend>(&device);
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = loss.backward();
        if step == 1 {
            let grad = model.fc1.weight.grad(&grads).expect("fc1 has a gradient");
            println!("gradient  dtype  {:?}", grad.dtype());
            println!("loss      dtype  {:?}", loss.dtype());
        }
        if step % 50 == 0 {
            println!("step {step:3}  loss {:.4}", loss.clone().into_scalar());
        }
        let grads = GradientsParams::from_grads(grads, &model);
        model = optim.step(1e-3, model, grads);
    }
    Ok(())
}

//! FP8 conformance tool: reads little-endian f32 values from stdin and writes one FP8 code
//! byte per value to stdout; `--decode` does the reverse (codes in, f32 out). Unscaled:
//! the values are converted as they are, so the output can be compared byte for byte with
//! other implementations (ml_dtypes, PyTorch's float8 types, Transformer Engine).
//!
//! ```sh
//! python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<3f', 1.0, 464.0, -1e-3))" \
//!   | cargo run --example fp8_cast -- --format e4m3 --overflow nan | xxd
//! ```

use std::io::{Read, Write};

use burn::backend::{Flex, Wgpu};
use burn::tensor::{Tensor, TensorData};
use burn_amp::fp8::{Fp8Backend, Fp8Cast, Fp8Format, Fp8Recipe, Fp8Tensor, Overflow, Rounding};

const USAGE: &str = "\
usage: fp8_cast [--decode] [--format e4m3|e5m2] [--overflow saturate|nan]
                [--rounding nearest|stochastic] [--seed N] [--bias N] [--device cpu|wgpu|cuda]

  stdin   little-endian f32 values (or, with --decode, one FP8 code byte per value)
  stdout  one FP8 code byte per value (or, with --decode, little-endian f32 values)

  --format    e4m3 (OCP E4M3FN, default) or e5m2
  --overflow  saturate (default: clamp to +-max) or nan (OCP: E4M3 -> NaN, E5M2 -> inf)
  --rounding  nearest (to even, default) or stochastic (with --seed, default 0)
  --bias      the exponent bias, 0..=63 (default 7 for e4m3, 15 for e5m2)
  --device    cpu (the portable path, default), wgpu or cuda (the CubeCL kernels)";

#[derive(Debug)]
struct Args {
    decode: bool,
    cast: Fp8Cast,
    device: String,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut decode, mut standard, mut bias) = (false, Fp8Format::E4M3, None);
    let (mut overflow, mut stochastic, mut seed) = (Overflow::Saturate, false, 0u32);
    let mut device = "cpu".to_string();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--decode" => decode = true,
            "--format" => {
                standard = match value()?.as_str() {
                    "e4m3" => Fp8Format::E4M3,
                    "e5m2" => Fp8Format::E5M2,
                    other => return Err(format!("--format: {other:?} is not e4m3 or e5m2")),
                }
            }
            "--overflow" => {
                overflow = match value()?.as_str() {
                    "saturate" => Overflow::Saturate,
                    "nan" => Overflow::NonSaturating,
                    other => return Err(format!("--overflow: {other:?} is not saturate or nan")),
                }
            }
            "--rounding" => {
                stochastic = match value()?.as_str() {
                    "nearest" => false,
                    "stochastic" => true,
                    other => {
                        return Err(format!(
                            "--rounding: {other:?} is not nearest or stochastic"
                        ));
                    }
                }
            }
            "--seed" => {
                let v = value()?;
                seed = v
                    .parse()
                    .map_err(|_| format!("--seed: {v:?} is not a u32"))?;
            }
            "--bias" => {
                let v = value()?;
                bias = Some(
                    v.parse::<i32>()
                        .map_err(|_| format!("--bias: {v:?} is not an integer"))?,
                );
            }
            "--device" => {
                device = value()?;
                if !["cpu", "wgpu", "cuda"].contains(&device.as_str()) {
                    return Err(format!("--device: {device:?} is not cpu, wgpu or cuda"));
                }
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let format = match bias {
        Some(bias) => standard.with_bias(bias).map_err(|e| e.to_string())?,
        None => standard,
    };
    let rounding = if stochastic {
        Rounding::Stochastic { seed }
    } else {
        Rounding::NearestEven
    };
    let cast = Fp8Cast::new(format)
        .with_overflow(overflow)
        .with_rounding(rounding);
    Ok(Args {
        decode,
        cast,
        device,
    })
}

fn run<B: Fp8Backend>(args: &Args, input: &[u8]) -> Result<Vec<u8>, String> {
    let device = Default::default();
    // A device that cannot start (no Vulkan driver, no GPU) is an error message, not a panic.
    burn_amp::probe_backend::<B>(&device).map_err(|why| why.to_string())?;
    if args.decode {
        let n = input.len();
        let q = Fp8Tensor::<B, 1>::from_bytes(input, [n], args.cast.format, &device)
            .map_err(|e| e.to_string())?;
        let values = q
            .dequantize()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .unwrap();
        return Ok(values.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
    if !input.len().is_multiple_of(4) {
        return Err(format!(
            "stdin holds {} bytes, not a whole number of little-endian f32 values",
            input.len()
        ));
    }
    let values: Vec<f32> = input
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let n = values.len();
    let x = Tensor::<B, 1>::from_data(TensorData::new(values, [n]), &device);
    let q = Fp8Tensor::quantize(x, args.cast, Fp8Recipe::Unscaled).map_err(|e| e.to_string())?;
    Ok(q.to_bytes())
}

fn main() {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) if message.is_empty() => {
            println!("{USAGE}");
            return;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("error: reading stdin: {e}");
        std::process::exit(2);
    }
    let output = if input.is_empty() {
        Ok(Vec::new())
    } else {
        match args.device.as_str() {
            "wgpu" => run::<Wgpu>(&args, &input),
            "cuda" => run_cuda(&args, &input),
            _ => run::<Flex>(&args, &input),
        }
    };
    match output {
        Ok(bytes) => {
            if let Err(e) = std::io::stdout().write_all(&bytes) {
                eprintln!("error: writing stdout: {e}");
                std::process::exit(2);
            }
        }
        Err(message) => {
            eprintln!("error: {message}");
            std::process::exit(2);
        }
    }
}

#[cfg(feature = "cuda")]
fn run_cuda(args: &Args, input: &[u8]) -> Result<Vec<u8>, String> {
    run::<burn::backend::Cuda>(args, input)
}

#[cfg(not(feature = "cuda"))]
fn run_cuda(_: &Args, _: &[u8]) -> Result<Vec<u8>, String> {
    Err("this build has no CUDA backend: rebuild with `--features cuda`".into())
}

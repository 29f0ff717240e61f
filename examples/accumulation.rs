//! Swamping and chunk-based accumulation, measured: the relative error of summing n values
//! from U(0, 1) (n = 2^10 ... 2^24) against an f64 sum, for the naive f16 running sum,
//! chunks of 32 / 64 / 128 / 256 in f16 (chunk sums combined in f32), and f32; with the time
//! of each; then the error of `fp8_matmul` (E8M13 windows promoted to f32) against naive
//! FP8 accumulation in f16. Prints markdown tables and writes a PNG plot (the guide's,
//! `guide/img/accumulation.png`, unless `--out` says where), dated and naming the machine;
//! `--write FILE` also puts the tables between the `accumulation` markers of FILE.
//!
//! ```sh
//! cargo run --release --example accumulation -- --write BENCHMARKS.md   # Flex (CPU reference)
//! cargo run --release --example accumulation -- --backend wgpu --out target/accumulation.png
//! ```

#[path = "common/png.rs"]
mod png;
#[path = "common/section.rs"]
mod section;

use std::fmt::Write as _;
use std::time::Instant;

use burn::backend::{Flex, Wgpu};
use burn::tensor::{ElementConversion, FloatDType, Tensor, TensorData};
use burn_amp::accum::{
    AccumBackend, AccumConfig, Accumulator, Fp8MatmulConfig, blocked_sum, fp8_matmul,
};
use burn_amp::fp8::{Fp8Backend, Fp8Cast, Fp8Format, Fp8Recipe, Fp8Tensor};
use plotters::prelude::*;

const FONT: &[u8] = include_bytes!("data/fonts/DejaVuSans.ttf");

struct Series {
    name: &'static str,
    config: AccumConfig,
    errors: Vec<f64>,
    millis: Vec<f64>,
}

fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

fn measure<B: AccumBackend>(series: &mut [Series], sizes: &[u32]) {
    let device = Default::default();
    let all = uniform(1 << sizes.iter().max().unwrap(), 2026);
    for &log in sizes {
        let n = 1usize << log;
        let exact: f64 = all[..n].iter().map(|v| f64::from(*v)).sum();
        let x = Tensor::<B, 2>::from_data(TensorData::new(all[..n].to_vec(), [1, n]), &device);
        for s in series.iter_mut() {
            let _ = B::sync(&device);
            let start = Instant::now();
            let sum: f64 = blocked_sum(x.clone(), s.config)
                .expect("a valid sum")
                .into_scalar()
                .elem();
            let millis = start.elapsed().as_secs_f64() * 1e3;
            s.errors.push((sum - exact).abs() / exact);
            s.millis.push(millis);
        }
        eprintln!("  n = 2^{log} done");
    }
}

/// Values from N(0, 1) (Box-Muller over the same generator as `uniform`).
fn normal(n: usize, seed: u64) -> Vec<f32> {
    let u = uniform(2 * n, seed);
    (0..n)
        .map(|i| {
            let (a, b) = (f64::from(u[2 * i]).max(1e-12), f64::from(u[2 * i + 1]));
            ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
        })
        .collect()
}

/// The relative RMS error of `fp8_matmul` on a 16 x 512 x 136 product of N(0, 1) operands
/// quantized to E4M3 (1 x 128 and 128 x 128 scales), against the f64 product of the
/// dequantized operands: `(label, error)` for each accumulation.
fn fp8_matmul_errors<B: AccumBackend + Fp8Backend>() -> Vec<(String, f64)> {
    let (m, k, n) = (16, 512, 136);
    let device = Default::default();
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let a = Tensor::<B, 2>::from_data(TensorData::new(normal(m * k, 7), [m, k]), &device);
    let b = Tensor::<B, 2>::from_data(TensorData::new(normal(k * n, 8), [k, n]), &device);
    let qa = Fp8Tensor::quantize(a, cast, Fp8Recipe::blocks_1x128()).expect("quantize a");
    let qb = Fp8Tensor::quantize(b, cast, Fp8Recipe::blocks_128x128()).expect("quantize b");
    let host = |t: Tensor<B, 2>| t.into_data().convert::<f32>().to_vec::<f32>().expect("f32");
    let (da, db) = (host(qa.dequantize()), host(qb.dequantize()));
    let exact: Vec<f64> = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k)
                .map(|t| f64::from(da[i * k + t]) * f64::from(db[t * n + j]))
                .sum()
        })
        .collect();
    let norm = exact.iter().map(|v| v * v).sum::<f64>().sqrt();
    let configs = [
        (
            "E8M13 windows of 128, promoted to f32",
            Accumulator::E8M13,
            128,
            true,
        ),
        (
            "E8M13 windows of 32, promoted to f32",
            Accumulator::E8M13,
            32,
            true,
        ),
        (
            "naive: every product summed in f16",
            Accumulator::F16,
            128,
            false,
        ),
    ];
    configs
        .into_iter()
        .map(|(label, accumulator, window, promote)| {
            let config = Fp8MatmulConfig {
                block: 128,
                window,
                accumulator,
                promote,
            };
            let got = host(fp8_matmul(&qa, &qb, config, FloatDType::F32).expect("fp8_matmul"));
            let err = got
                .iter()
                .zip(&exact)
                .map(|(g, e)| (f64::from(*g) - e).powi(2))
                .sum::<f64>()
                .sqrt();
            (label.to_string(), err / norm)
        })
        .collect()
}

fn plot(
    series: &[Series],
    sizes: &[u32],
    path: &str,
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the embedded font could not be loaded")?;
    const SIZE: (u32, u32) = (960, 600);
    let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    draw(
        series,
        sizes,
        title,
        BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(),
    )?;
    png::save(std::path::Path::new(path), SIZE, &rgb)?;
    Ok(())
}

/// The curves on `root`.
fn draw(
    series: &[Series],
    sizes: &[u32],
    title: &str,
    root: DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    // The machine and date in a strip along the bottom edge, below the chart.
    let (_, h) = root.dim_in_pixel();
    let (root, footer) = root.split_vertically(h - 22);
    footer.draw(&Text::new(
        format!("{} on {}", section::date(), section::machine()),
        (16, 4),
        ("sans-serif", 12).into_font().color(&BLACK.mix(0.7)),
    ))?;
    let (lo, hi) = (
        *sizes.first().unwrap() as f64,
        *sizes.last().unwrap() as f64,
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(lo..hi, (1e-9f64..2.0f64).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("n (values summed)")
        .y_desc("relative error vs f64")
        .x_label_formatter(&|x| format!("2^{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0e}"))
        .label_style(("sans-serif", 15))
        .draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    for (s, color) in series.iter().zip(colors) {
        let points: Vec<(f64, f64)> = sizes
            .iter()
            .zip(&s.errors)
            .map(|(l, e)| (*l as f64, e.clamp(1e-9, 2.0)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::LowerRight)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() {
    let mut backend = "flex".to_string();
    let mut out = concat!(env!("CARGO_MANIFEST_DIR"), "/guide/img/accumulation.png").to_string();
    let mut write = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--backend", Some(b)) if b == "flex" || b == "wgpu" => backend = b,
            ("--out", Some(p)) => out = p,
            ("--write", Some(p)) => write = Some(p),
            _ => {
                eprintln!(
                    "usage: accumulation [--backend flex|wgpu] [--out FILE.png] [--write FILE.md]"
                );
                std::process::exit(2);
            }
        }
    }
    let sizes: Vec<u32> = (10..=24).collect();
    let mut series: Vec<Series> = [
        ("naive f16", AccumConfig::naive(Accumulator::F16)),
        ("f16, chunk 32", AccumConfig::chunked(Accumulator::F16, 32)),
        ("f16, chunk 64", AccumConfig::chunked(Accumulator::F16, 64)),
        (
            "f16, chunk 128",
            AccumConfig::chunked(Accumulator::F16, 128),
        ),
        (
            "f16, chunk 256",
            AccumConfig::chunked(Accumulator::F16, 256),
        ),
        ("naive f32", AccumConfig::naive(Accumulator::F32)),
    ]
    .into_iter()
    .map(|(name, config)| Series {
        name,
        config,
        errors: Vec::new(),
        millis: Vec::new(),
    })
    .collect();
    eprintln!("summing U(0,1) values on {backend}");
    match backend.as_str() {
        "wgpu" => measure::<Wgpu>(&mut series, &sizes),
        _ => measure::<Flex>(&mut series, &sizes),
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Relative error of the sum of n values from U(0, 1) against an f64 sum ({backend}); \
         time in ms. Measured {} on {}.\n",
        section::date(),
        section::machine()
    );
    let _ = write!(md, "| n |");
    for s in &series {
        let _ = write!(md, " {} | ms |", s.name);
    }
    let _ = writeln!(md, "\n|---|{}", "---|---|".repeat(series.len()));
    for (i, log) in sizes.iter().enumerate() {
        let _ = write!(md, "| 2^{log} |");
        for s in &series {
            let _ = write!(md, " {:.2e} | {:.1} |", s.errors[i], s.millis[i]);
        }
        let _ = writeln!(md);
    }
    let errors = match backend.as_str() {
        "wgpu" => fp8_matmul_errors::<Wgpu>(),
        _ => fp8_matmul_errors::<Flex>(),
    };
    let _ = writeln!(
        md,
        "\n`fp8_matmul` of a 16 x 512 x 136 product of N(0, 1) operands in E4M3 (1 x 128 and \
         128 x 128 scales): relative RMS error against the f64 product of the dequantized \
         operands ({backend}).\n\n| accumulation | relative RMS error |\n|---|---|"
    );
    for (label, err) in errors {
        let _ = writeln!(md, "| {label} | {err:.2e} |");
    }
    print!("{md}");
    if let Some(path) = &write {
        let command = format!(
            "cargo run --release --example accumulation -- --backend {backend} --write {path}"
        );
        if let Err(e) =
            section::write_section(std::path::Path::new(path), "accumulation", &command, &md)
        {
            eprintln!("error: writing {path}: {e}");
            std::process::exit(2);
        }
        eprintln!("tables written to {path}");
    }
    let title = format!("Summing n values from U(0,1) with an f16 accumulator ({backend})");
    match plot(&series, &sizes, &out, &title) {
        Ok(()) => eprintln!("plot written to {out}"),
        Err(e) => {
            eprintln!("error: writing {out}: {e}");
            std::process::exit(2);
        }
    }
}

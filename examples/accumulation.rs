//! Swamping and chunk-based accumulation, measured: the relative error of summing n values
//! from U(0, 1) (n = 2^10 ... 2^24) against an f64 sum, for the naive f16 running sum,
//! chunks of 32 / 64 / 128 / 256 in f16 (chunk sums combined in f32), and f32; with the time
//! of each. Prints a markdown table and writes a PNG plot.
//!
//! ```sh
//! cargo run --release --example accumulation                       # Flex (CPU reference)
//! cargo run --release --example accumulation -- --backend wgpu --out docs/accumulation.png
//! ```

use std::time::Instant;

use burn::backend::{Flex, Wgpu};
use burn::tensor::{ElementConversion, Tensor, TensorData};
use burn_amp::accum::{AccumBackend, AccumConfig, Accumulator, blocked_sum};
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

fn plot(
    series: &[Series],
    sizes: &[u32],
    path: &str,
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the embedded font could not be loaded")?;
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
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
    let mut out = "accumulation.png".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--backend", Some(b)) if b == "flex" || b == "wgpu" => backend = b,
            ("--out", Some(p)) => out = p,
            _ => {
                eprintln!("usage: accumulation [--backend flex|wgpu] [--out FILE.png]");
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
    println!(
        "Relative error of the sum of n values from U(0, 1) against an f64 sum ({backend}); time in ms.\n"
    );
    print!("| n |");
    for s in &series {
        print!(" {} | ms |", s.name);
    }
    println!();
    println!("|---|{}", "---|---|".repeat(series.len()));
    for (i, log) in sizes.iter().enumerate() {
        print!("| 2^{log} |");
        for s in &series {
            print!(" {:.2e} | {:.1} |", s.errors[i], s.millis[i]);
        }
        println!();
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

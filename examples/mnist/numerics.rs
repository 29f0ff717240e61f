//! `--numerics`: the FP8 numerics report of one training step, printed as a table and drawn
//! as a PNG histogram (one panel per tensor role, against its format's range).

use std::path::Path;

use burn_amp::fp8::{Fp8Numerics, Fp8Role};
use plotters::prelude::*;

const FONT: &[u8] = include_bytes!("../data/fonts/DejaVuSans.ttf");

/// Prints the report and writes its histogram to `path`.
pub fn publish(report: &Fp8Numerics, path: &Path) -> Result<(), String> {
    if report.is_empty() {
        println!("numerics: no FP8 site ran (the policy has no FP8)");
        return Ok(());
    }
    println!(
        "FP8 numerics of the last training step (uf = underflow to zero, sat = saturated; * = format used):"
    );
    print!("{report}");
    plot(report, path).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!("numerics histogram written to {}", path.display());
    Ok(())
}

fn plot(report: &Fp8Numerics, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the embedded font could not be loaded")?;
    let root = BitMapBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "FP8 numerics: log2 |value x scale| of every quantized value, all sites",
        ("sans-serif", 22),
    )?;
    let panels = root.split_evenly((3, 1));
    let lo = Fp8Numerics::HISTOGRAM_MIN_EXPONENT as f64;
    let hi = Fp8Numerics::HISTOGRAM_MAX_EXPONENT as f64 + 1.0;
    for (role, area) in Fp8Role::ALL.iter().zip(panels.iter()) {
        let counts = report.histogram(*role);
        let total = counts.iter().sum::<u64>().max(1) as f64;
        let shares: Vec<f64> = counts.iter().map(|c| 100.0 * *c as f64 / total).collect();
        let top = shares.iter().cloned().fold(1.0, f64::max) * 1.1;
        let format = role.cast().format;
        let (min_sub, max) = (
            format.min_subnormal().log2() as f64,
            format.max().log2() as f64,
        );
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{} ({}): representable from 2^{min_sub:.0} to {:.0}",
                    role.name(),
                    format,
                    format.max()
                ),
                ("sans-serif", 17),
            )
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(56)
            .build_cartesian_2d(lo..hi, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("exponent e (bin e holds |x * scale| in [2^e, 2^(e+1)))")
            .y_desc("% of values")
            .label_style(("sans-serif", 13))
            .draw()?;
        // The representable window of the format: shaded.
        chart.draw_series(std::iter::once(Rectangle::new(
            [(min_sub - 1.0, 0.0), (max + 1.0, top)],
            GREEN.mix(0.12).filled(),
        )))?;
        chart.draw_series(shares.iter().enumerate().map(|(i, share)| {
            let e = lo + i as f64;
            // Bins below half the smallest subnormal round to zero.
            let color = if e + 1.0 <= min_sub - 1.0 { RED } else { BLUE };
            Rectangle::new([(e + 0.1, 0.0), (e + 0.9, *share)], color.mix(0.8).filled())
        }))?;
    }
    root.present()?;
    Ok(())
}

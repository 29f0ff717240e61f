//! `--compare`: every policy trained with the same seed and batch order, then one PNG with
//! all loss curves and a table (final validation loss, relative difference to float32,
//! tokens/s, peak memory, skipped steps).

use std::path::Path;

use plotters::prelude::*;

use crate::run::{Summary, label};

const FONT: &[u8] = include_bytes!("../data/fonts/DejaVuSans.ttf");
const COLORS: [RGBColor; 6] = [
    RGBColor(0, 0, 0),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
];

/// One table row per run.
pub struct Row {
    pub policy: String,
    pub valid: f32,
    /// Relative to float32's final validation loss, in percent.
    pub relative: Option<f64>,
    pub tokens_per_second: f64,
    pub peak_mib: f64,
    pub skipped: u64,
    pub steps: usize,
}

pub fn rows(runs: &[Summary]) -> Vec<Row> {
    let reference = runs
        .iter()
        .find(|r| r.policy == burn_amp::Policy::float32())
        .map(Summary::final_valid_loss);
    runs.iter()
        .map(|r| Row {
            policy: label(&r.policy),
            valid: r.final_valid_loss(),
            relative: reference
                .map(|f| 100.0 * (r.final_valid_loss() as f64 - f as f64) / f as f64),
            tokens_per_second: r.tokens_per_second,
            peak_mib: r.peak_heap_bytes as f64 / (1 << 20) as f64,
            skipped: r.skipped_steps,
            steps: r.train_losses.len(),
        })
        .collect()
}

/// The table in Markdown.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| Policy | Final validation loss | vs float32 | Tokens/s | Peak heap | Skipped steps |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out += &format!(
            "| `{}` | {:.4} | {} | {:.0} | {:.0} MiB | {} of {} |\n",
            r.policy,
            r.valid,
            r.relative.map_or("-".into(), |x| format!("{x:+.2}%")),
            r.tokens_per_second,
            r.peak_mib,
            r.skipped,
            r.steps
        );
    }
    out
}

/// The mean of each run of `width` steps: a readable training curve.
fn smoothed(losses: &[f32], width: usize) -> Vec<(f64, f64)> {
    losses
        .chunks(width)
        .enumerate()
        .map(|(i, c)| {
            let x = (i * width + c.len()) as f64;
            (x, c.iter().map(|&l| l as f64).sum::<f64>() / c.len() as f64)
        })
        .collect()
}

pub fn plot(runs: &[Summary], title: &str, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| "the embedded font could not be loaded")?;
    const SIZE: (u32, u32) = (1400, 980);
    let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    draw(
        runs,
        title,
        BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area(),
    )?;
    crate::png::save(path, SIZE, &rgb)?;
    Ok(())
}

/// The curves and the table on `root`.
fn draw(
    runs: &[Summary],
    title: &str,
    root: DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
) -> Result<(), Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    // The machine and date along the bottom edge.
    let (_, h) = root.dim_in_pixel();
    root.draw(&Text::new(
        format!(
            "{} on {}",
            crate::section::date(),
            crate::section::machine()
        ),
        (16, h as i32 - 20),
        ("sans-serif", 14).into_font().color(&BLACK.mix(0.7)),
    ))?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (charts, table) = root.split_vertically(680);
    let (left, right) = charts.split_horizontally(700);
    let steps = runs.iter().map(|r| r.train_losses.len()).max().unwrap_or(1) as f64;
    let width = (steps as usize / 40).max(1);
    let curves: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| smoothed(&r.train_losses, width))
        .collect();
    let valids: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| {
            r.valid_losses
                .iter()
                .map(|&(s, l)| (s as f64, l as f64))
                .collect()
        })
        .collect();
    for (area, series, caption) in [
        (
            &left,
            &curves,
            format!("training loss (mean of each {width} steps)"),
        ),
        (
            &right,
            &valids,
            "validation loss (held-out 10%)".to_string(),
        ),
    ] {
        let points = series
            .iter()
            .flatten()
            .map(|p| p.1)
            .filter(|y| y.is_finite());
        let (lo, hi) = points.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
        let (lo, hi) = if lo < hi { (lo, hi) } else { (0.0, 6.0) };
        let pad = (hi - lo) * 0.05;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..steps, (lo - pad).max(0.0)..hi + pad)?;
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("cross-entropy (nats per byte)")
            .label_style(("sans-serif", 13))
            .draw()?;
        for (i, (run, points)) in runs.iter().zip(series.iter()).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(label(&run.policy))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    draw_table(&table, &rows(runs))?;
    root.present()?;
    Ok(())
}

fn draw_table<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[Row],
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    let columns = [30, 480, 690, 830, 970, 1120];
    let header = [
        "Policy",
        "Final validation loss",
        "vs float32",
        "Tokens/s",
        "Peak heap",
        "Skipped steps",
    ];
    let style = ("sans-serif", 17).into_font();
    let bold = ("sans-serif", 17).into_font().style(FontStyle::Bold);
    for (x, text) in columns.iter().zip(header) {
        area.draw(&Text::new(text, (*x, 20), bold.clone()))?;
    }
    for (i, r) in rows.iter().enumerate() {
        let y = 55 + 34 * i as i32;
        let color = COLORS[i % COLORS.len()];
        let cells = [
            r.policy.clone(),
            format!("{:.4}", r.valid),
            r.relative.map_or("-".into(), |x| format!("{x:+.2}%")),
            format!("{:.0}", r.tokens_per_second),
            format!("{:.0} MiB", r.peak_mib),
            format!("{} of {}", r.skipped, r.steps),
        ];
        for (x, text) in columns.iter().zip(cells) {
            area.draw(&Text::new(text, (*x, y), style.clone().color(&color)))?;
        }
    }
    Ok(())
}

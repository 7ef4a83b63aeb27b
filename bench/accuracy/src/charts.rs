//! The two charts (SVG, plotters): per-kernel ratios in the manner of the KLARAPTOR paper's
//! Fig. 1, and predicted against measured time over the shapes for a few kernels in the
//! manner of its Fig. 4.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::study::{Case, Method, Study};

const KLARAPTOR: RGBColor = RGBColor(31, 119, 180);
const DEFAULT: RGBColor = RGBColor(150, 150, 150);
const OCCUPANCY: RGBColor = RGBColor(255, 127, 14);
const PREDICTED: RGBColor = RGBColor(214, 39, 40);
/// The ratio axis runs past 1 to leave room for the legend and the times.
const XMAX: f64 = 1.32;

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e:?}")
}

/// The case shown for each kernel in the ratio chart: its largest size (by the product of
/// its data sizes) among the cases with an optimum.
pub fn largest_cases(st: &Study) -> Vec<&Case> {
    let mut out: Vec<&Case> = Vec::new();
    for c in &st.cases {
        if c.picks
            .get(&Method::Optimum)
            .is_none_or(|p| p.block.is_none())
        {
            continue;
        }
        match out
            .iter_mut()
            .find(|x| x.program == c.program && x.kernel == c.kernel)
        {
            Some(x) => {
                if c.work() > x.work() {
                    *x = c;
                }
            }
            None => out.push(c),
        }
    }
    out
}

/// Horizontal bars: per kernel (at its largest size) the ratio of klaraptor, the default
/// and the occupancy shape, a line at 0.90, and klaraptor's time in ms beside its bar.
pub fn ratio_chart(st: &Study, path: &Path, title: &str) -> Result<()> {
    let cases = largest_cases(st);
    let rows = cases.len().max(1);
    let height = 110 + 34 * rows as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .margin_left(240)
        .x_label_area_size(36)
        .build_cartesian_2d(0.0f64..XMAX, -0.6f64..(rows as f64 - 0.4))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(12)
        .x_desc("time of the optimal shape / time of the method's shape")
        .draw()
        .map_err(err)?;
    let methods = [
        (Method::Klaraptor, KLARAPTOR, -0.28),
        (Method::Default, DEFAULT, 0.0),
        (Method::Occupancy, OCCUPANCY, 0.28),
    ];
    // Row 0 at the top.
    let y_of = |i: usize| (rows - 1 - i) as f64;
    for (m, color, dy) in methods {
        let bars: Vec<Rectangle<(f64, f64)>> = cases
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let r = c.ratio(m)?;
                let y = y_of(i) - dy;
                Some(Rectangle::new(
                    [(0.0, y - 0.12), (r.min(XMAX), y + 0.12)],
                    color.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(m.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.9, -0.6), (0.9, rows as f64 - 0.4)],
            6,
            4,
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label("0.90")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    // Kernel names left of the rows, klaraptor's time right of its bar.
    let name_style = ("sans-serif", 13).into_font().color(&BLACK);
    let small = ("sans-serif", 11).into_font().color(&KLARAPTOR);
    for (i, c) in cases.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(0.0, y_of(i)));
        let label = format!("{} {} ({})", c.program, c.kernel, c.sizes_text());
        root.draw(&Text::new(label, (px - 232, py - 7), name_style.clone()))
            .map_err(err)?;
        if let Some(p) = c.picks.get(&Method::Klaraptor) {
            if let (Some(r), Some(t)) = (p.ratio, p.time_ms) {
                let (bx, by) = chart.backend_coord(&(r.min(XMAX), y_of(i) + 0.28));
                root.draw(&Text::new(
                    format!("{t:.3} ms"),
                    (bx + 4, by - 6),
                    small.clone(),
                ))
                .map_err(err)?;
            }
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// The kernels shown in the shapes chart: the named ones that have a case with predictions
/// (at their largest size), else the first few kernels that do.
pub fn shape_cases<'a>(st: &'a Study, wanted: &[String], max: usize) -> Vec<&'a Case> {
    let with_pred: Vec<&Case> = largest_cases(st)
        .into_iter()
        .filter(|c| c.measured.keys().any(|b| c.predicted.contains_key(b)))
        .collect();
    let mut out: Vec<&Case> = wanted
        .iter()
        .filter_map(|w| with_pred.iter().find(|c| &c.kernel == w).copied())
        .collect();
    if out.is_empty() {
        out = with_pred.into_iter().take(max).collect();
    }
    out.truncate(max);
    out
}

fn shape_label(b: [u32; 3], dim: u8) -> String {
    if dim <= 1 {
        format!("{}", b[0])
    } else {
        format!("{}x{}", b[0], b[1])
    }
}

/// Per chosen kernel, measured and predicted time over its shapes (ordered by threads per
/// block, then bx), on a log scale; the measured optimum and klaraptor's shape marked.
pub fn shapes_chart(st: &Study, path: &Path, wanted: &[String], title: &str) -> Result<usize> {
    let cases = shape_cases(st, wanted, 4);
    let n = cases.len().max(1);
    let cols = if n > 1 { 2 } else { 1 };
    let rows_n = n.div_ceil(cols);
    let root =
        SVGBackend::new(path, (560 * cols as u32, 40 + 380 * rows_n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(40);
    top.draw(&Text::new(
        title.to_string(),
        (12, 12),
        ("sans-serif", 18).into_font(),
    ))
    .map_err(err)?;
    let panels = body.split_evenly((rows_n, cols));
    for (c, area) in cases.iter().zip(panels.iter()) {
        panel(c, area)?;
    }
    root.present().map_err(err)?;
    Ok(cases.len())
}

/// 20, 1, 0.05, 0.002: a tick label without exponent.
fn time_label(y: f64) -> String {
    if y <= 0.0 || !y.is_finite() {
        return String::new();
    }
    if y >= 1.0 {
        format!("{y:.0}")
    } else {
        let digits = (-y.log10()).ceil().max(1.0) as usize;
        format!("{y:.digits$}")
    }
}

fn panel(c: &Case, area: &DrawingArea<SVGBackend, Shift>) -> Result<()> {
    let mut shapes: Vec<[u32; 3]> = c.measured.keys().copied().collect();
    shapes.sort_by_key(|b| {
        (
            u64::from(b[0]) * u64::from(b[1]) * u64::from(b[2]),
            b[0],
            b[1],
        )
    });
    let meas: Vec<(f64, f64)> = shapes
        .iter()
        .enumerate()
        .map(|(i, b)| (i as f64, c.measured[b]))
        .collect();
    let pred: Vec<(f64, f64)> = shapes
        .iter()
        .enumerate()
        .filter_map(|(i, b)| c.predicted.get(b).map(|&p| (i as f64, p)))
        .filter(|(_, p)| *p > 0.0)
        .collect();
    let all = meas.iter().chain(pred.iter()).map(|p| p.1);
    let lo = all.clone().fold(f64::INFINITY, f64::min).max(1e-6);
    let hi = all.fold(0.0f64, f64::max).max(lo * 10.0);
    let labels: Vec<String> = shapes.iter().map(|b| shape_label(*b, c.dim)).collect();
    let fmt = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let yfmt = |y: &f64| time_label(*y);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{} {} ({})", c.program, c.kernel, c.sizes_text()),
            ("sans-serif", 15),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(
            -0.5f64..(shapes.len() as f64 - 0.5),
            (lo / 1.5..hi * 1.5).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(10)
        .x_label_formatter(&fmt)
        .y_label_formatter(&yfmt)
        .x_desc("block shape (by threads per block)")
        .y_desc("time, ms")
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(meas.clone(), KLARAPTOR.stroke_width(2)))
        .map_err(err)?
        .label("measured")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], KLARAPTOR.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(pred.clone(), PREDICTED.stroke_width(2)))
        .map_err(err)?
        .label("predicted")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], PREDICTED.stroke_width(2)));
    let idx = |b: Option<[u32; 3]>| b.and_then(|b| shapes.iter().position(|s| *s == b));
    if let Some(i) = idx(c.picks.get(&Method::Optimum).and_then(|p| p.block)) {
        chart
            .draw_series([Circle::new(meas[i], 6, BLACK.stroke_width(2))])
            .map_err(err)?
            .label("optimum")
            .legend(|(x, y)| Circle::new((x + 7, y), 5, BLACK.stroke_width(2)));
    }
    if let Some(i) = idx(c.picks.get(&Method::Klaraptor).and_then(|p| p.block)) {
        chart
            .draw_series([TriangleMarker::new(meas[i], 7, PREDICTED.filled())])
            .map_err(err)?
            .label("klaraptor's choice")
            .legend(|(x, y)| TriangleMarker::new((x + 7, y), 5, PREDICTED.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(err)?;
    Ok(())
}

//! Plots of bench rows (`cargo xtask bench --plot DIR`, or `cargo xtask plot JSON... --out DIR`
//! from the JSON of earlier runs): per op and element type, one SVG with two panels: the time of
//! DT and of every baseline at each shape (log scale), and DT's time over the best baseline's.

use crate::results::{Row, DT_COPY, PY_COPY};
use plotters::prelude::*;
use plotters::style::text_anchor;
use std::path::{Path, PathBuf};

/// Colours of the series, DT's first.
const PALETTE: &[RGBColor] = &[
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// Writes `<op>_<dtype>.svg` under `dir` for each op and element type of `rows`; returns the
/// files written.
pub fn plot(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in rows.iter().filter(|r| r.dt_ms.is_some()) {
        if !groups.contains(&(r.op.as_str(), r.dtype.as_str())) {
            groups.push((&r.op, &r.dtype));
        }
    }
    let mut written = Vec::new();
    for (op, dtype) in groups {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.op == op && r.dtype == dtype && r.dt_ms.is_some()).collect();
        let path = dir.join(format!("{op}_{dtype}.svg"));
        draw(&format!("{op} {dtype}"), &mine, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The series of a plot: DT, then every baseline that timed some row, copies last.
fn series(rows: &[&Row]) -> Vec<String> {
    let mut names = vec!["DT".to_string()];
    for r in rows {
        for (n, ms, _) in &r.baselines {
            if ms.is_some() && !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let copies: Vec<String> = names.iter().filter(|n| *n == DT_COPY || *n == PY_COPY).cloned().collect();
    names.retain(|n| n != DT_COPY && n != PY_COPY);
    names.extend(copies);
    names
}

fn time_of(r: &Row, series: &str) -> Option<f64> {
    if series == "DT" {
        r.dt_ms
    } else {
        r.baseline_ms(series)
    }
}

fn draw(title: &str, rows: &[&Row], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let names = series(rows);
    let labels: Vec<String> = rows.iter().map(|r| r.shape.clone()).collect();
    let width = (120 + rows.len() as u32 * (40 + 14 * names.len() as u32).max(150)).max(720);
    let root = SVGBackend::new(path, (width, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(470);
    let n = rows.len() as f64;
    let label_style =
        ("sans-serif", 13).into_font().color(&BLACK).pos(text_anchor::Pos::new(text_anchor::HPos::Center, text_anchor::VPos::Top));
    // Every shape's name under its group of bars (the axis's own ticks would skip some), at the
    // pixels `at` gives the bottom of each group.
    let shape_labels = |area: &DrawingArea<SVGBackend<'_>, _>, at: &dyn Fn(f64) -> (i32, i32)| {
        let (x0, y0) = area.get_base_pixel();
        for (i, l) in labels.iter().enumerate() {
            let (px, py) = at(i as f64 + 0.5);
            area.draw(&Text::new(l.clone(), (px - x0, py - y0 + 6), label_style.clone()))?;
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    };
    let times: Vec<f64> = rows.iter().flat_map(|r| names.iter().filter_map(|n| time_of(r, n))).filter(|t| *t > 0.0).collect();
    let (lo, hi) = times.iter().fold((f64::MAX, 0.0f64), |(a, b), t| (a.min(*t), b.max(*t)));
    let mut chart = ChartBuilder::on(&top)
        .caption(format!("{title}: time (ms, log scale)"), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, (lo / 1.5..hi * 1.5).log_scale())?;
    chart.configure_mesh().disable_x_mesh().x_labels(0).y_desc("ms").draw()?;
    let slot = 0.8 / names.len() as f64;
    for (s, name) in names.iter().enumerate() {
        let colour = PALETTE[s % PALETTE.len()];
        let bars = rows.iter().enumerate().filter_map(|(i, r)| {
            let t = time_of(r, name)?;
            let x0 = i as f64 + 0.1 + s as f64 * slot;
            Some(Rectangle::new([(x0, lo / 1.5), (x0 + slot * 0.9, t)], colour.filled()))
        });
        chart.draw_series(bars)?.label(name.as_str()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    shape_labels(&top, &|x| chart.backend_coord(&(x, lo / 1.5)))?;
    // DT over the best baseline, on a log scale where DT is several times slower somewhere.
    let ratios: Vec<Option<f64>> = rows.iter().map(|r| Some(r.dt_ms? / r.best.as_ref()?.1)).collect();
    let (rlo, rhi) = ratios.iter().flatten().fold((0.9f64, 1.1f64), |(a, b), r| (a.min(*r * 0.9), b.max(*r * 1.1)));
    let caption = format!("{title}: DT / best baseline (below 1: DT faster)");
    if rhi > 4.0 {
        let mut chart = ChartBuilder::on(&bottom)
            .caption(caption, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n, (rlo..rhi).log_scale())?;
        chart.configure_mesh().disable_x_mesh().x_labels(0).y_desc("DT / best (log scale)").draw()?;
        chart.draw_series(ratio_bars(&ratios, rlo))?;
        chart.draw_series(LineSeries::new([(0.0, 1.0), (n, 1.0)], BLACK.stroke_width(1)))?;
        shape_labels(&bottom, &|x| chart.backend_coord(&(x, rlo)))?;
    } else {
        let mut chart = ChartBuilder::on(&bottom)
            .caption(caption, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n, 0.0..rhi)?;
        chart.configure_mesh().disable_x_mesh().x_labels(0).y_desc("DT / best").draw()?;
        chart.draw_series(ratio_bars(&ratios, 0.0))?;
        chart.draw_series(LineSeries::new([(0.0, 1.0), (n, 1.0)], BLACK.stroke_width(1)))?;
        shape_labels(&bottom, &|x| chart.backend_coord(&(x, 0.0)))?;
    }
    root.present()?;
    Ok(())
}

/// A bar from `floor` to each ratio.
fn ratio_bars(ratios: &[Option<f64>], floor: f64) -> impl Iterator<Item = Rectangle<(f64, f64)>> + '_ {
    ratios
        .iter()
        .enumerate()
        .filter_map(move |(i, r)| Some(Rectangle::new([(i as f64 + 0.3, floor), (i as f64 + 0.7, (*r)?)], PALETTE[0].filled())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plot per op, naming DT and each baseline.
    #[test]
    fn plots_one_svg_per_op_with_every_series() {
        let row = |op: &str, shape: &str, dt: f64, base: f64| {
            let mut r = Row {
                op: op.into(),
                shape: shape.into(),
                dtype: "f16".into(),
                dt_ms: Some(dt),
                status: "ok".into(),
                baselines: vec![("cublas".into(), Some(base), "ok".into()), ("torch_eager".into(), Some(base * 1.1), "ok".into())],
                ..Default::default()
            };
            r.pick_best();
            r
        };
        let rows = vec![
            row("matmul", "512x512x512", 0.0067, 0.0063),
            row("matmul", "4096x4096x4096", 0.2, 0.18),
            row("softmax", "4096x1024", 0.01, 0.011),
        ];
        let dir = std::env::temp_dir().join(format!("dt-plot-{}", std::process::id()));
        let files = plot(&rows, &dir).unwrap();
        assert_eq!(
            files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect::<Vec<_>>(),
            ["matmul_f16.svg", "softmax_f16.svg"]
        );
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        for text in ["matmul f16: time (ms, log scale)", "DT / best baseline", "cublas", "torch_eager", "4096x4096x4096", "512x512x512"] {
            assert!(svg.contains(text), "{text} missing");
        }
    }
}

//! `--chart FILE.svg`: ops/s against thread count, a line per target, a panel per workload,
//! drawn with plotters' SVG backend.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use crate::report::Record;

const PANEL_WIDTH: u32 = 480;
const PANEL_HEIGHT: u32 = 320;
const PANELS_PER_ROW: usize = 3;
const PALETTE: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Series of one panel: target -> (threads, ops/s) in thread order.
type Panel = BTreeMap<String, Vec<(usize, f64)>>;

/// Writes the chart of `records` to `path`.
pub fn write_chart(records: &[Record], path: &Path) -> Result<(), String> {
    let mut panels: Vec<(String, Panel)> = Vec::new();
    for r in records {
        let index = match panels.iter().position(|(w, _)| *w == r.workload) {
            Some(i) => i,
            None => {
                panels.push((r.workload.clone(), Panel::new()));
                panels.len() - 1
            }
        };
        panels[index]
            .1
            .entry(r.target.clone())
            .or_default()
            .push((r.threads, r.ops_per_sec));
    }
    if panels.is_empty() {
        return Err("nothing to chart".into());
    }
    let targets: Vec<String> = {
        let mut t: Vec<String> = records.iter().map(|r| r.target.clone()).collect();
        t.sort();
        t.dedup();
        t
    };
    let columns = panels.len().min(PANELS_PER_ROW);
    let rows = panels.len().div_ceil(PANELS_PER_ROW);
    let size = (PANEL_WIDTH * columns as u32, PANEL_HEIGHT * rows as u32);
    let root = SVGBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((rows, columns));
    for ((workload, series), area) in panels.iter().zip(areas.iter()) {
        let max_threads = series
            .values()
            .flatten()
            .map(|p| p.0)
            .max()
            .unwrap_or(1)
            .max(2);
        let max_ops = series
            .values()
            .flatten()
            .map(|p| p.1)
            .fold(1.0_f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(workload, ("sans-serif", 18))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(60)
            // A little room either side so the 1-thread and last points are not on the frame.
            .build_cartesian_2d(
                (0.8..max_threads as f64 * 1.25).log_scale(),
                0.0..max_ops * 1.1,
            )
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_desc("ops/s")
            .y_label_formatter(&|v| crate::report::human_count(*v))
            .draw()
            .map_err(|e| err(&e))?;
        for (target, points) in series {
            let i = targets.iter().position(|t| t == target).unwrap_or(0);
            let color = PALETTE[i % PALETTE.len()];
            let mut points: Vec<(f64, f64)> =
                points.iter().map(|&(t, ops)| (t as f64, ops)).collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(|e| err(&e))?
                .label(target.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}

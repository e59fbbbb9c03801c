//! Throughput vs message size over TCP loopback, one line per stack (plotters, SVG backend).

use std::path::Path;

use plotters::prelude::*;

use crate::{Results, Variant};

pub fn throughput_svg(path: &Path, sizes: &[(usize, String)], variants: &[Variant], results: &Results, runs: usize) {
    if sizes.is_empty() {
        return;
    }
    let series: Vec<(&str, Vec<(f64, f64)>)> = variants
        .iter()
        .map(|v| {
            let pts = sizes
                .iter()
                .filter_map(|(size, id)| results.median(id, v.name, "msgs_per_s").map(|m| (*size as f64, m)))
                .collect();
            (v.name, pts)
        })
        .filter(|(_, p): &(&str, Vec<(f64, f64)>)| !p.is_empty())
        .collect();
    if series.is_empty() {
        return;
    }
    let ymax = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(1.0, f64::max) * 2.0;
    let ymin = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(f64::INFINITY, f64::min) / 2.0;
    let xmin = sizes.iter().map(|s| s.0).min().unwrap() as f64 / 1.5;
    let xmax = sizes.iter().map(|s| s.0).max().unwrap() as f64 * 1.5;

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("PUSH/PULL throughput, TCP loopback (median of {runs} run{})", if runs == 1 { "" } else { "s" }),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin.max(1.0)..ymax).log_scale())
        .unwrap();
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc("messages / s")
        .x_label_formatter(&|x| {
            if *x >= 1024.0 { format!("{:.0} KiB", x / 1024.0) } else { format!("{x:.0} B") }
        })
        .y_label_formatter(&|y| {
            if *y >= 1e6 { format!("{:.1} M", y / 1e6) } else { format!("{:.0} k", y / 1e3) }
        })
        .draw()
        .unwrap();
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle { color, filled: true, stroke_width: if *name == "zmtp" { 4 } else { 2 } };
        chart
            .draw_series(LineSeries::new(pts.clone(), style))
            .unwrap()
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, style))).unwrap();
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .unwrap();
    root.present().unwrap();
}

//! `cargo xtask bench plot`: the SVG plots of docs/BENCHMARKS.md, drawn from the
//! benchmarks' JSON results (docs/bench/*.json, written by `bench cpu|load --write-docs`)
//! with plotters' SVG backend. The plots are a view of the JSON: rerunning a benchmark
//! with `--write-docs` rewrites both.
//!
//! - docs/lookup-instructions.svg: callgrind instructions per lookup against table size,
//!   one panel per workload (hits, misses, mixed), one line per lookup;
//! - docs/lookup-time.svg: the fastest-round time per lookup, the same way;
//! - docs/load-binary.svg: `__tgt_rtl_load_binary` time against indirect entries, ours
//!   beside LLVM 16's plugin.

use crate::util;
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// docs/bench/: the JSON results the plots and tables come from.
pub fn data_dir() -> PathBuf {
    util::root().join("docs/bench")
}

pub const CPU_JSON: &str = "cpu-lookup.json";
pub const LOAD_JSON: &str = "load-binary.json";

#[derive(clap::Args)]
pub struct Args {}

pub fn main(_: Args) -> Result<()> {
    let mut drawn = 0;
    let cpu = data_dir().join(CPU_JSON);
    if cpu.is_file() {
        cpu_plots(&read_json(&cpu)?)?;
        drawn += 2;
    }
    let load = data_dir().join(LOAD_JSON);
    if load.is_file() {
        load_plot(&read_json(&load)?)?;
        drawn += 1;
    }
    if drawn == 0 {
        bail!(
            "no results in {}: run `cargo xtask bench cpu --write-docs` or `bench load --write-docs`",
            data_dir().display()
        );
    }
    Ok(())
}

pub fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// One line of a plot: its legend, colour and (x, y) points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// The lookups the CPU plots show, with their colours (the experiments stay in the
/// tables only).
const CPU_LINES: [(&str, RGBColor); 5] = [
    ("ours_index", RGBColor(0xd6, 0x27, 0x28)),
    ("ours", RGBColor(0x1f, 0x77, 0xb4)),
    ("plain_lower_bound", RGBColor(0x7f, 0x7f, 0x7f)),
    ("libgomp_hash", RGBColor(0x2c, 0xa0, 0x2c)),
    ("upstream_style", RGBColor(0xff, 0x7f, 0x0e)),
];

const WORKLOADS: [&str; 3] = ["hits", "misses", "mixed"];

/// Both CPU plots from `bench cpu`'s JSON: `{"results": [{"size", "workload", "impl",
/// "instructions", "fastest_round_ns", ...}]}`.
pub fn cpu_plots(json: &Value) -> Result<()> {
    let rows = json["results"]
        .as_array()
        .context("no `results` array in the CPU JSON")?;
    for (file, field, y_desc) in [
        (
            "lookup-instructions.svg",
            "instructions",
            "instructions per lookup (callgrind)",
        ),
        (
            "lookup-time.svg",
            "fastest_round_ns",
            "ns per lookup (fastest round)",
        ),
    ] {
        if !rows.iter().any(|r| r[field].is_number()) {
            eprintln!(
                "no `{field}` in the CPU results (not measured in that run): {file} not drawn"
            );
            continue;
        }
        let path = util::root().join("docs").join(file);
        let root = SVGBackend::new(&path, (1260, 440)).into_drawing_area();
        root.fill(&WHITE)?;
        let panels = root.split_evenly((1, WORKLOADS.len()));
        for (panel, workload) in panels.iter().zip(WORKLOADS) {
            let series: Vec<Series> = CPU_LINES
                .iter()
                .map(|&(name, color)| {
                    let points = rows
                        .iter()
                        .filter(|r| r["workload"] == workload && r["impl"] == name)
                        .filter_map(|r| Some((r["size"].as_f64()?, r[field].as_f64()?)))
                        .collect();
                    (name, color, points)
                })
                .filter(|(_, _, p): &Series| !p.is_empty())
                .collect();
            // Time spans three decades: a log axis; instructions fit a linear one.
            let log_y = field == "fastest_round_ns";
            draw_panel(panel, workload, y_desc, "table entries", &series, log_y)?;
        }
        root.present()
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The load plot from `bench load`'s JSON: `{"results": [{"entries", "what",
/// "fastest_ns", "median_ns"}]}`.
pub fn load_plot(json: &Value) -> Result<()> {
    let rows = json["results"]
        .as_array()
        .context("no `results` array in the load JSON")?;
    let lines = [
        (
            "abi_ours",
            "ours (table + index)",
            RGBColor(0xd6, 0x27, 0x28),
        ),
        ("abi_llvm", "LLVM 16 (no table)", RGBColor(0x7f, 0x7f, 0x7f)),
    ];
    let series: Vec<Series> = lines
        .iter()
        .map(|&(what, label, color)| {
            let points = rows
                .iter()
                .filter(|r| r["what"] == what)
                .filter_map(|r| Some((r["entries"].as_f64()?, r["fastest_ns"].as_f64()? / 1e6)))
                .collect();
            (label, color, points)
        })
        .collect();
    let path = util::root().join("docs/load-binary.svg");
    let root = SVGBackend::new(&path, (640, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    draw_panel(
        &root,
        "__tgt_rtl_load_binary, x86_64 host device",
        "ms (fastest)",
        "indirect entries",
        &series,
        true,
    )?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// One log-x chart of named lines, with a legend.
fn draw_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    y_desc: &str,
    x_desc: &str,
    series: &[Series],
    log_y: bool,
) -> Result<()> {
    let points = series.iter().flat_map(|(_, _, p)| p.iter().copied());
    let (mut x_min, mut x_max, mut y_min, mut y_max) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if x_min > x_max {
        bail!("no data for the plot `{title}`");
    }
    let x_range = (x_min.max(1.0) / 1.5)..(x_max * 1.5);
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    // The log axis puts its labels at powers of ten: 1, 10, ..., 1k, ..., 1M.
    let x_label = |x: &f64| {
        let x = x.round();
        if x >= 1e6 {
            format!("{}M", x / 1e6)
        } else if x >= 1e3 {
            format!("{}k", x / 1e3)
        } else {
            format!("{x}")
        }
    };
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&x_label)
                .light_line_style(WHITE.mix(0.0))
                .draw()?;
            for (name, color, points) in series {
                let color = *color;
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                    .label(*name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log_y {
        let y_range = (y_min.max(1e-3) / 1.5)..(y_max * 1.5);
        draw!(builder.build_cartesian_2d(x_range.log_scale(), y_range.log_scale())?);
    } else {
        let y_range = 0.0..(y_max * 1.15);
        draw!(builder.build_cartesian_2d(x_range.log_scale(), y_range)?);
    }
    Ok(())
}

//! The results: the table printed (and `--markdown`'s), and `--json`'s.

use crate::bench::Measure;
use crate::kernel::{Pattern, TOTAL_THREADS};
use std::collections::HashMap;
use std::fmt::Write as _;

pub fn render_table(
    results: &[Measure],
    variants: &[&str],
    iters: &HashMap<(usize, Pattern), u64>,
) -> String {
    let mut cases: Vec<(usize, Pattern)> = iters.keys().copied().collect();
    cases.sort();
    let mut out = String::from("G lookups/s (share of direct's rate in parentheses)\n\n");
    let _ = writeln!(out, "| size | keys | iters | {} |", variants.join(" | "));
    let _ = writeln!(out, "|---:|---|---:|{}", "---:|".repeat(variants.len()));
    for (size, pattern) in cases {
        let rate = |v: &str| {
            results
                .iter()
                .find(|r| r.variant == v && r.size == size && r.pattern == pattern)
                .map(Measure::lookups_per_second)
        };
        let cells: Vec<String> = variants
            .iter()
            .map(|v| match (rate(v), rate("direct")) {
                (Some(r), Some(d)) if *v != "direct" => {
                    format!("{:.2} ({:.2})", r / 1e9, r / d)
                }
                (Some(r), _) => format!("{:.2}", r / 1e9),
                (None, _) => "n/a".into(),
            })
            .collect();
        let _ = writeln!(
            out,
            "| {size} | {} | {} | {} |",
            pattern.name(),
            iters[&(size, pattern)],
            cells.join(" | ")
        );
    }
    out
}

pub fn render_json(results: &[Measure], device: &str, sm: u32) -> String {
    let escaped: String = device
        .chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let rows: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "    {{\"variant\": \"{}\", \"size\": {}, \"keys\": \"{}\", \"iters\": {}, \
                 \"threads\": {TOTAL_THREADS}, \"best_seconds\": {:.9}, \
                 \"lookups_per_second\": {:.1}}}",
                r.variant,
                r.size,
                r.pattern.name(),
                r.iters,
                r.best.as_secs_f64(),
                r.lookups_per_second()
            )
        })
        .collect();
    format!(
        "{{\n  \"device\": \"{escaped}\",\n  \"sm\": {sm},\n  \"results\": [\n{}\n  ]\n}}\n",
        rows.join(",\n")
    )
}

//! SVG plots of a run, after Jepsen's perf checker: latency of every op on a log scale
//! ([`latency_raw_svg`]), latency quantiles over time windows ([`latency_quantiles_svg`]),
//! throughput per second ([`rate_svg`]), and in a run with clock faults each node's clock
//! offset ([`clock::clock_svg`], after Jepsen's clock plot).
//!
//! Each plot shades every fault span in its kind's colour and labels it in a lane above
//! the plot, has a legend (outcomes, op kinds, fault kinds), takes the history's clock as
//! seconds since the start on x, and is titled with the test, seed and verdict. Plain SVG,
//! no scripts and no network: it opens from disk and embeds in a page, at the page's width,
//! with its legend inside the plot area's frame.
//!
//! ```
//! use checker::report::plot::{PlotTitle, render_all};
//! let csv = format!(
//!     "{}\n\
//!      0,1000000,0,invoke,acquire,a,100,,,\n\
//!      1,3000000,0,ok,acquire,a,,5,n1,\n\
//!      2,4000000,nemesis,info,kill,,n1,,,\n\
//!      3,9000000,nemesis,info,restart,,n1,,,\n",
//!     history::csv::HEADER
//! );
//! let ops = history::csv::read_str(&csv).unwrap();
//! let paired = history::pair::pair_with_faults(&ops).unwrap();
//! let title = PlotTitle { test: "lockd-kill".into(), seed: Some(7), verdict: "valid".into() };
//! let plots = render_all(&title, &paired.operations, &paired.faults);
//! assert!(plots.latency_raw.contains("data-fault=\"kill\""));
//! ```

pub mod clock;
pub mod faults;
pub mod svg;

use std::fmt;
use std::path::{Path, PathBuf};

use history::{Op, OpName, OpType, Operation};

use self::faults::{FaultSpan, fault_spans};
use self::svg::{Canvas, Entry, LinearScale, LogScale, Swatch, marker, op_shape, outcome_colour};

/// At most this many markers are drawn; longer histories are sampled evenly.
pub const PLOT_POINTS_MAX: usize = 20_000;

/// The file names [`write_all`] writes, in the order of [`Plots`]' fields (`clock.svg` only
/// for a run with clock faults).
pub const PLOT_FILES: [&str; 4] = [
    "latency.svg",
    "latency-quantiles.svg",
    "rate.svg",
    "clock.svg",
];

/// What a plot's title says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlotTitle {
    /// The test's name (or the history's path).
    pub test: String,
    /// The run's seed, when it has one.
    pub seed: Option<u64>,
    /// `valid`, `invalid` or `unknown`.
    pub verdict: String,
}

impl fmt::Display for PlotTitle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.test)?;
        if let Some(seed) = self.seed {
            write!(f, ", seed {seed}")?;
        }
        if !self.verdict.is_empty() {
            write!(f, ": {}", self.verdict)?;
        }
        Ok(())
    }
}

/// The plots of a history.
#[derive(Clone, Debug)]
pub struct Plots {
    /// `latency.svg`.
    pub latency_raw: String,
    /// `latency-quantiles.svg`.
    pub latency_quantiles: String,
    /// `rate.svg`.
    pub rate: String,
    /// `clock.svg`, for a run with clock faults.
    pub clock: Option<String>,
}

/// Renders the plots (the clock plot only with clock faults).
pub fn render_all(title: &PlotTitle, operations: &[Operation], faults: &[Op]) -> Plots {
    let title = title.to_string();
    Plots {
        latency_raw: latency_raw_svg(&title, operations, faults),
        latency_quantiles: latency_quantiles_svg(&title, operations, faults),
        rate: rate_svg(&title, operations, faults),
        clock: {
            let done = completed(operations);
            let end = end_ns(&done, operations, faults);
            clock::clock_svg(&title, faults, &fault_spans(faults, end), end)
        },
    }
}

/// Renders the plots and writes them into `dir` as [`PLOT_FILES`]; returns the paths written.
pub fn write_all(
    dir: &Path,
    title: &PlotTitle,
    operations: &[Operation],
    faults: &[Op],
) -> std::io::Result<Vec<PathBuf>> {
    let plots = render_all(title, operations, faults);
    let texts = [
        Some(&plots.latency_raw),
        Some(&plots.latency_quantiles),
        Some(&plots.rate),
        plots.clock.as_ref(),
    ];
    let mut paths = Vec::new();
    for (name, text) in PLOT_FILES.iter().zip(texts) {
        let Some(text) = text else {
            // No clock faults: no clock plot, and none left from an earlier write.
            let _ = std::fs::remove_file(dir.join(name));
            continue;
        };
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        paths.push(path);
    }
    Ok(paths)
}

/// The latency plot under its older name (kept for callers that pass a plain title).
pub fn latency_svg(title: &str, operations: &[Operation], faults: &[Op]) -> String {
    latency_raw_svg(title, operations, faults)
}

/// One completed client op: invoke time, latency, outcome, op kind.
struct Done<'a> {
    call_ns: u64,
    return_ns: u64,
    outcome: OpType,
    f: &'a str,
}

impl Done<'_> {
    fn latency_ms(&self) -> f64 {
        self.return_ns.saturating_sub(self.call_ns) as f64 / 1e6
    }
}

fn completed(operations: &[Operation]) -> Vec<Done<'_>> {
    operations
        .iter()
        .filter_map(|op| {
            let c = op.completion.as_ref()?;
            Some(Done {
                call_ns: op.call_ns(),
                return_ns: c.time_ns.max(op.call_ns()),
                outcome: c.op_type,
                f: &op.f,
            })
        })
        .collect()
}

/// The end of the plotted time: the last completion or fault.
fn end_ns(done: &[Done<'_>], operations: &[Operation], faults: &[Op]) -> u64 {
    done.iter()
        .map(|d| d.return_ns)
        .chain(operations.iter().map(|o| o.call_ns()))
        .chain(faults.iter().map(|f| f.time_ns))
        .max()
        .unwrap_or(0)
        .max(1_000_000)
}

/// The op kinds in the history, acquire/release/write/read first.
fn op_kinds<'a>(done: &[Done<'a>]) -> Vec<&'a str> {
    let order = [
        OpName::Acquire,
        OpName::Release,
        OpName::Write,
        OpName::Read,
    ];
    let mut kinds: Vec<&str> = done.iter().map(|d| d.f).collect();
    kinds.sort_by_key(|k| (order.iter().position(|o| o == k).unwrap_or(order.len()), *k));
    kinds.dedup();
    kinds
}

fn outcome_name(t: OpType) -> &'static str {
    match t {
        OpType::Ok => "ok",
        OpType::Fail => "fail",
        _ => "info",
    }
}

fn frame(title: &str, what: &str, spans: &[FaultSpan], end: u64) -> Canvas {
    let mut canvas = Canvas::new(title, what, spans, end);
    canvas.x_axis();
    canvas
}

/// Latency of every completed client op over time: x is the invoke, y the latency on a
/// log scale; colour is the outcome, shape the op kind.
pub fn latency_raw_svg(title: &str, operations: &[Operation], faults: &[Op]) -> String {
    let done = completed(operations);
    let end = end_ns(&done, operations, faults);
    let spans = fault_spans(faults, end);
    let mut canvas = frame(title, "latency of every op (log scale)", &spans, end);
    let (min, max) = done.iter().fold((f64::MAX, 0f64), |(lo, hi), d| {
        let l = d.latency_ms();
        (if l > 0.0 { lo.min(l) } else { lo }, hi.max(l))
    });
    let scale = LogScale::new(
        if min == f64::MAX { 1.0 } else { min },
        max,
        canvas.top,
        canvas.bottom,
    );
    canvas.y_axis(&scale.ticks("ms"), "latency (ms)");
    let stride = done.len().div_ceil(PLOT_POINTS_MAX).max(1);
    canvas.out.push_str("<g id=\"points\">\n");
    for d in done.iter().step_by(stride) {
        let (x, y) = (canvas.x(d.call_ns), scale.y(d.latency_ms()));
        marker(
            &mut canvas.out,
            op_shape(d.f),
            x,
            y,
            2.2,
            outcome_colour(outcome_name(d.outcome)),
        );
    }
    canvas.out.push_str("</g>\n");
    let mut entries: Vec<Entry> = ["ok", "fail", "info"]
        .into_iter()
        .map(|o| Entry {
            swatch: Swatch::Marker(svg::Shape::Circle, outcome_colour(o)),
            label: o.to_string(),
        })
        .collect();
    for kind in op_kinds(&done) {
        entries.push(Entry {
            swatch: Swatch::Marker(op_shape(kind), "#24292f"),
            label: kind.to_string(),
        });
    }
    canvas.finish(&entries)
}

/// The quantiles each window of [`latency_quantiles_svg`] shows.
const QUANTILES: [(&str, f64, &str); 4] = [
    ("p50", 0.50, "#0969da"),
    ("p95", 0.95, "#1a7f37"),
    ("p99", 0.99, "#bf8700"),
    ("max", 1.0, "#cf222e"),
];

/// A dash pattern per op kind, so quantile lines of two kinds stay apart.
fn dash(i: usize) -> &'static str {
    ["", "6 3", "2 2", "8 3 2 3", "1 4"][i % 5]
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A window of about 1/40 of the run, rounded (0.5 s, 1 s, 2 s, 5 s, ...).
fn window_ns(end: u64) -> u64 {
    let s = svg::nice_step(end as f64 / 1e9, 40.0).max(0.1);
    (s * 1e9) as u64
}

/// Latency quantiles p50, p95, p99 and max of every op kind (all outcomes), over windows
/// of invoke time; a point sits at its window's middle.
pub fn latency_quantiles_svg(title: &str, operations: &[Operation], faults: &[Op]) -> String {
    let done = completed(operations);
    let end = end_ns(&done, operations, faults);
    let spans = fault_spans(faults, end);
    let window = window_ns(end);
    let what = format!(
        "latency quantiles per op kind, {} s windows (log scale)",
        svg::fmt_number(window as f64 / 1e9)
    );
    let mut canvas = frame(title, &what, &spans, end);
    let kinds = op_kinds(&done);
    // (kind, window) -> sorted latencies
    let mut series: Vec<Vec<(u64, Vec<f64>)>> = Vec::new();
    for kind in &kinds {
        let mut windows: std::collections::BTreeMap<u64, Vec<f64>> = Default::default();
        for d in done.iter().filter(|d| d.f == *kind) {
            windows
                .entry(d.call_ns / window)
                .or_default()
                .push(d.latency_ms());
        }
        let mut out: Vec<(u64, Vec<f64>)> = windows.into_iter().collect();
        for (_, v) in &mut out {
            v.sort_by(f64::total_cmp);
        }
        series.push(out);
    }
    let all = series.iter().flatten().flat_map(|(_, v)| v.iter().copied());
    let (min, max) = all.fold((f64::MAX, 0f64), |(lo, hi), l| {
        (if l > 0.0 { lo.min(l) } else { lo }, hi.max(l))
    });
    let scale = LogScale::new(
        if min == f64::MAX { 1.0 } else { min },
        max,
        canvas.top,
        canvas.bottom,
    );
    canvas.y_axis(&scale.ticks("ms"), "latency (ms)");
    canvas.out.push_str("<g id=\"lines\">\n");
    for (k, windows) in series.iter().enumerate() {
        for (name, q, colour) in QUANTILES {
            let points: Vec<(f64, f64)> = windows
                .iter()
                .map(|(w, v)| (canvas.x(w * window + window / 2), scale.y(quantile(v, q))))
                .collect();
            polyline(
                &mut canvas.out,
                &points,
                colour,
                dash(k),
                &format!("{} {name}", kinds[k]),
            );
        }
    }
    canvas.out.push_str("</g>\n");
    let mut entries: Vec<Entry> = QUANTILES
        .iter()
        .map(|(name, _, colour)| Entry {
            swatch: Swatch::Line(colour, ""),
            label: name.to_string(),
        })
        .collect();
    for (k, kind) in kinds.iter().enumerate() {
        entries.push(Entry {
            swatch: Swatch::Line("#24292f", dash(k)),
            label: kind.to_string(),
        });
    }
    canvas.finish(&entries)
}

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, dash: &str, what: &str) {
    if points.is_empty() {
        return;
    }
    let coords: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    out.push_str(&format!(
        "<polyline data-series=\"{what}\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" stroke-dasharray=\"{dash}\"/>\n",
        coords.join(" ")
    ));
    for (x, y) in points {
        out.push_str(&format!(
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"1.8\" fill=\"{colour}\"/>\n"
        ));
    }
}

/// Completed client ops per second, by outcome, counted at their completion time.
pub fn rate_svg(title: &str, operations: &[Operation], faults: &[Op]) -> String {
    let done = completed(operations);
    let end = end_ns(&done, operations, faults);
    let spans = fault_spans(faults, end);
    // One-second buckets; a long run gets wider ones, still reported per second.
    let bucket = (svg::nice_step(end as f64 / 1e9, 300.0).max(1.0) * 1e9) as u64;
    let what = format!(
        "throughput by outcome (ops/s, {} s buckets)",
        svg::fmt_number(bucket as f64 / 1e9)
    );
    let mut canvas = frame(title, &what, &spans, end);
    let buckets = (end / bucket + 1) as usize;
    let outcomes = ["ok", "fail", "info"];
    let mut counts = vec![vec![0u64; buckets]; outcomes.len()];
    for d in &done {
        let o = outcomes
            .iter()
            .position(|o| *o == outcome_name(d.outcome))
            .unwrap_or(2);
        counts[o][(d.return_ns / bucket) as usize] += 1;
    }
    let per_s = bucket as f64 / 1e9;
    let max = counts.iter().flatten().copied().max().unwrap_or(0) as f64 / per_s;
    let scale = LinearScale::new(max, canvas.top, canvas.bottom);
    canvas.y_axis(&scale.ticks(""), "ops per second");
    canvas.out.push_str("<g id=\"lines\">\n");
    for (o, outcome) in outcomes.iter().enumerate() {
        let points: Vec<(f64, f64)> = counts[o]
            .iter()
            .enumerate()
            .map(|(b, &n)| {
                (
                    canvas.x(b as u64 * bucket + bucket / 2),
                    scale.y(n as f64 / per_s),
                )
            })
            .collect();
        polyline(
            &mut canvas.out,
            &points,
            outcome_colour(outcome),
            "",
            outcome,
        );
    }
    canvas.out.push_str("</g>\n");
    let entries: Vec<Entry> = outcomes
        .iter()
        .map(|o| Entry {
            swatch: Swatch::Line(outcome_colour(o), ""),
            label: o.to_string(),
        })
        .collect();
    canvas.finish(&entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A history's rows, without the header.
    const ROWS: &str = "0,1000000,0,invoke,acquire,a,100,,,\n\
                       1,3000000,0,ok,acquire,a,,5,n1,\n\
                       2,4000000,nemesis,info,kill,,n1,,,\n\
                       3,5000000,1,invoke,acquire,a,100,,,\n\
                       4,9000000,1,fail,acquire,a,,,n2,busy\n\
                       5,9500000,nemesis,info,restart,,n1,,,\n\
                       6,9600000,2,invoke,release,b,,4,,\n\
                       7,9700000,2,info,release,b,,,,timeout\n\
                       8,9800000,3,invoke,acquire,b,100,,,\n";

    fn paired() -> history::pair::Paired {
        let csv = format!("{}\n{ROWS}", history::csv::HEADER);
        history::pair::pair_with_faults(&history::csv::read_str(&csv).unwrap()).unwrap()
    }

    #[test]
    fn the_raw_plot_has_one_marker_per_completed_op_a_legend_and_the_faults() {
        let p = paired();
        let svg = latency_raw_svg("run", &p.operations, &p.faults);
        let points = svg
            .split("<g id=\"points\">")
            .nth(1)
            .unwrap()
            .split("</g>")
            .next()
            .unwrap();
        assert_eq!(
            points.lines().filter(|l| l.starts_with('<')).count(),
            3,
            "{points}"
        );
        assert!(points.contains("<rect"), "a release is a square");
        for label in ["ok", "fail", "info", "acquire", "release", "kill"] {
            assert!(svg.contains(&format!("data-legend=\"{label}\"")), "{label}");
        }
        assert!(svg.contains("kill n1 (row 2, 0.004 s) .. restart n1 (row 5, 0.010 s)"));
        assert!(svg.contains("data-kind=\"kill\""));
    }

    #[test]
    fn quantiles_and_rate_count_what_happened() {
        let p = paired();
        let svg = latency_quantiles_svg("run", &p.operations, &p.faults);
        assert!(svg.contains("data-series=\"acquire p99\""));
        assert!(svg.contains("data-series=\"release max\""));
        let rate = rate_svg("run", &p.operations, &p.faults);
        assert!(rate.contains("data-series=\"fail\""));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.99), 4.0);
        let title = PlotTitle {
            test: "t".into(),
            seed: Some(3),
            verdict: "invalid".into(),
        };
        assert_eq!(title.to_string(), "t, seed 3: invalid");
    }
}

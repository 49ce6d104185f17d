//! The frame every plot shares: title, fault lanes and shading, axes with ticks, legend.
//!
//! Plain SVG text with no scripts or external references, so a plot opens from disk in
//! any browser and embeds in a page. Elements a reader (or a test) looks for carry ids and
//! data attributes: `#legend` with one `[data-legend]` group per entry, `#faults` with one
//! `[data-kind]` lane per fault kind.

use std::fmt::Write as _;

use history::OpName;

use super::faults::{FaultSpan, kind_colour, kinds};

/// The whole image's width in its own units (the viewBox); the image itself is drawn at
/// the width of its page (`width="100%"`), so a plot uses the whole page (issue 28: at a
/// fixed 980 px it took half the page and left the rest empty).
pub const WIDTH: f64 = 980.0;
const PLOT_HEIGHT: f64 = 330.0;
const LEFT: f64 = 100.0;
/// Right of the plot area: room for the last x tick's label only. The legend sits inside
/// the plot area's frame, in its top right corner.
const RIGHT_MARGIN: f64 = 24.0;
const TITLE_HEIGHT: f64 = 46.0;
const LANE_HEIGHT: f64 = 15.0;
const BOTTOM_MARGIN: f64 = 48.0;

/// The outcome colours, shared by every plot.
pub fn outcome_colour(outcome: &str) -> &'static str {
    match outcome {
        "ok" => "#1a7f37",
        "fail" => "#cf222e",
        _ => "#6e7781",
    }
}

/// A marker shape per op kind, so that ops of two kinds with one outcome stay apart.
pub fn op_shape(f: &str) -> Shape {
    match OpName::parse(f) {
        Some(OpName::Acquire) => Shape::Circle,
        Some(OpName::Release) => Shape::Square,
        Some(OpName::Write) => Shape::Triangle,
        Some(OpName::Read) => Shape::Diamond,
        _ => Shape::Cross,
    }
}

/// A marker shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// acquire
    Circle,
    /// release
    Square,
    /// write
    Triangle,
    /// read
    Diamond,
    /// anything else
    Cross,
}

/// One marker at (x, y), radius about `r`.
pub fn marker(out: &mut String, shape: Shape, x: f64, y: f64, r: f64, colour: &str) {
    let _ = match shape {
        Shape::Circle => writeln!(
            out,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r:.1}\" fill=\"{colour}\"/>"
        ),
        Shape::Square => writeln!(
            out,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"/>",
            x - r,
            y - r,
            2.0 * r,
            2.0 * r
        ),
        Shape::Triangle => writeln!(
            out,
            "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"{colour}\"/>",
            x,
            y - 1.3 * r,
            x - 1.2 * r,
            y + r,
            x + 1.2 * r,
            y + r
        ),
        Shape::Diamond => writeln!(
            out,
            "<polygon points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"{colour}\"/>",
            x,
            y - 1.4 * r,
            x + 1.4 * r,
            y,
            x,
            y + 1.4 * r,
            x - 1.4 * r,
            y
        ),
        Shape::Cross => writeln!(
            out,
            "<path d=\"M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}\" stroke=\"{colour}\" stroke-width=\"1.2\"/>",
            x - r,
            y - r,
            x + r,
            y + r,
            x - r,
            y + r,
            x + r,
            y - r
        ),
    };
}

/// What a legend entry draws before its label.
#[derive(Clone, Debug)]
pub enum Swatch {
    /// A marker.
    Marker(Shape, &'static str),
    /// A line (colour, dash array or empty).
    Line(&'static str, &'static str),
}

/// One legend entry.
#[derive(Clone, Debug)]
pub struct Entry {
    /// What it draws.
    pub swatch: Swatch,
    /// Its text.
    pub label: String,
}

/// A plot under construction: the frame is drawn, the caller adds marks inside
/// [`Canvas::left`]..[`Canvas::right`] x [`Canvas::top`]..[`Canvas::bottom`].
pub struct Canvas {
    /// The SVG text so far.
    pub out: String,
    /// Plot area, px.
    pub left: f64,
    /// Plot area, px.
    pub right: f64,
    /// Plot area, px.
    pub top: f64,
    /// Plot area, px.
    pub bottom: f64,
    end_s: f64,
    spans: Vec<FaultSpan>,
}

impl Canvas {
    /// Starts a plot of `end_ns` of history (x from 0 s), with its title and fault spans.
    pub fn new(title: &str, what: &str, spans: &[FaultSpan], end_ns: u64) -> Canvas {
        let lanes = kinds(spans).len() as f64;
        let top = TITLE_HEIGHT + lanes * LANE_HEIGHT + 8.0;
        let height = top + PLOT_HEIGHT + BOTTOM_MARGIN;
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\" \
             viewBox=\"0 0 {WIDTH} {height}\" preserveAspectRatio=\"xMinYMin meet\" \
             font-family=\"sans-serif\" font-size=\"11\">\n\
             <title>{t}: {w}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n\
             <text id=\"title\" x=\"{LEFT}\" y=\"20\" font-size=\"15\" font-weight=\"bold\">{t}</text>\n\
             <text x=\"{LEFT}\" y=\"37\" font-size=\"12\" fill=\"#444\">{w}</text>\n",
            t = escape(title),
            w = escape(what),
        );
        out.push_str("<g id=\"plot-area\"/>\n");
        let mut canvas = Canvas {
            out,
            left: LEFT,
            right: WIDTH - RIGHT_MARGIN,
            top,
            bottom: top + PLOT_HEIGHT,
            end_s: (end_ns as f64 / 1e9).max(1e-3),
            spans: spans.to_vec(),
        };
        canvas.draw_faults();
        canvas
    }

    /// The x of a history time; a time past the end (a window's middle) sits on the edge.
    pub fn x(&self, t_ns: u64) -> f64 {
        let s = (t_ns as f64 / 1e9).min(self.end_s);
        self.left + s / self.end_s * (self.right - self.left)
    }

    /// Fault lanes above the plot (one per kind, labelled) and shading inside it.
    fn draw_faults(&mut self) {
        let lanes = kinds(&self.spans);
        self.out.push_str("<g id=\"faults\">\n");
        for (i, kind) in lanes.iter().enumerate() {
            let colour = kind_colour(kind);
            let y = TITLE_HEIGHT + i as f64 * LANE_HEIGHT;
            let _ = writeln!(
                self.out,
                "<g class=\"fault-lane\" data-kind=\"{k}\"><text x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\" fill=\"{colour}\">{k}</text>",
                k = escape(kind),
                lx = self.left - 6.0,
                ty = y + 10.0,
            );
            for span in self.spans.iter().filter(|s| &s.kind == kind) {
                let x0 = self.x(span.start_ns);
                let w = (self.x(span.end_ns) - x0).max(2.0);
                let _ = writeln!(
                    self.out,
                    "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" fill=\"{colour}\"><title>{t}</title></rect>\n\
                     <rect class=\"fault-shade\" x=\"{x0:.1}\" y=\"{top:.1}\" width=\"{w:.1}\" height=\"{ph:.1}\" fill=\"{colour}\" fill-opacity=\"0.10\"><title>{t}</title></rect>",
                    h = LANE_HEIGHT - 4.0,
                    t = escape(&span.text),
                    top = self.top,
                    ph = self.bottom - self.top,
                );
            }
            self.out.push_str("</g>\n");
        }
        self.out.push_str("</g>\n");
    }

    /// The x axis: seconds since the start, with ticks.
    pub fn x_axis(&mut self) {
        let step = nice_step(self.end_s, 10.0);
        let (b, l, r) = (self.bottom, self.left, self.right);
        let _ = writeln!(
            self.out,
            "<g id=\"x-axis\"><line x1=\"{l}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#444\"/>"
        );
        let mut i = 0u32;
        loop {
            let t = f64::from(i) * step;
            if t > self.end_s * 1.0001 {
                break;
            }
            let x = self.left + t / self.end_s * (self.right - self.left);
            let _ = writeln!(
                self.out,
                "<line x1=\"{x:.1}\" y1=\"{b}\" x2=\"{x:.1}\" y2=\"{y2}\" stroke=\"#444\"/>\
                 <text x=\"{x:.1}\" y=\"{ty}\" text-anchor=\"middle\">{}</text>",
                fmt_number(t),
                y2 = b + 5.0,
                ty = b + 17.0,
            );
            i += 1;
        }
        let _ = writeln!(
            self.out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">time since the start (s)</text></g>",
            (l + r) / 2.0,
            b + 36.0
        );
    }

    /// A y axis with these ticks (value, label, position px, gridline) and a name.
    pub fn y_axis(&mut self, ticks: &[(String, f64, bool)], name: &str) {
        let (t, b, l, r) = (self.top, self.bottom, self.left, self.right);
        let _ = writeln!(
            self.out,
            "<g id=\"y-axis\"><line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{b}\" stroke=\"#444\"/>"
        );
        for (label, y, major) in ticks {
            let (len, grid) = if *major {
                (5.0, "#e1e4e8")
            } else {
                (3.0, "#f3f4f6")
            };
            let _ = writeln!(
                self.out,
                "<line x1=\"{l}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" stroke=\"{grid}\"/>\
                 <line x1=\"{x1}\" y1=\"{y:.1}\" x2=\"{l}\" y2=\"{y:.1}\" stroke=\"#444\"/>",
                x1 = l - len,
            );
            if !label.is_empty() {
                let _ = writeln!(
                    self.out,
                    "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                    l - 7.0,
                    y + 3.5,
                    escape(label)
                );
            }
        }
        let _ = writeln!(
            self.out,
            "<text transform=\"translate(22 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text></g>",
            (t + b) / 2.0,
            escape(name)
        );
    }

    /// The legend inside the plot area's frame, in its top right corner on a white box:
    /// `entries`, then one box per fault kind of the run.
    pub fn finish(mut self, entries: &[Entry]) -> String {
        let kinds = kinds(&self.spans);
        let labels = entries.iter().map(|e| e.label.as_str());
        let longest = labels
            .chain(kinds.iter().map(String::as_str))
            .chain(["faults"])
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0);
        let rows = entries.len() + if kinds.is_empty() { 0 } else { kinds.len() + 1 };
        let width = 24.0 + 6.5 * longest as f64 + 14.0;
        let height = 16.0 * rows as f64 + 10.0 + if kinds.is_empty() { 0.0 } else { 6.0 };
        let x = self.right - width - 6.0;
        let mut y = self.top + 14.0;
        let _ = writeln!(
            self.out,
            "<g id=\"legend\"><rect class=\"legend-frame\" x=\"{:.1}\" y=\"{:.1}\" width=\"{width:.1}\" height=\"{height:.1}\" fill=\"#ffffff\" fill-opacity=\"0.88\" stroke=\"#d0d7de\"/>",
            x - 6.0,
            self.top + 4.0,
        );
        for entry in entries {
            let _ = write!(
                self.out,
                "<g class=\"legend-entry\" data-legend=\"{}\">",
                escape(&entry.label)
            );
            match &entry.swatch {
                Swatch::Marker(shape, colour) => {
                    marker(&mut self.out, *shape, x + 8.0, y, 4.0, colour)
                }
                Swatch::Line(colour, dash) => {
                    let _ = write!(
                        self.out,
                        "<line x1=\"{x}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\"/>",
                        x + 18.0
                    );
                }
            }
            self.legend_text(x, y, &entry.label);
            y += 16.0;
        }
        if !kinds.is_empty() {
            y += 6.0;
            let _ = writeln!(
                self.out,
                "<text x=\"{x}\" y=\"{:.1}\" font-weight=\"bold\">faults</text>",
                y + 4.0
            );
            y += 16.0;
        }
        for kind in kinds {
            let _ = write!(
                self.out,
                "<g class=\"legend-entry\" data-legend=\"{k}\" data-fault=\"{k}\"><rect x=\"{x}\" y=\"{:.1}\" width=\"18\" height=\"10\" fill=\"{}\" fill-opacity=\"0.6\"/>",
                y - 5.0,
                kind_colour(&kind),
                k = escape(&kind),
            );
            self.legend_text(x, y, &kind);
            y += 16.0;
        }
        self.out.push_str("</g>\n</svg>\n");
        self.out
    }

    fn legend_text(&mut self, x: f64, y: f64, label: &str) {
        let _ = writeln!(
            self.out,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
            x + 24.0,
            y + 4.0,
            escape(label)
        );
    }
}

/// A log scale from `min` to `max` (both > 0) over `bottom`..`top` px.
#[derive(Clone, Copy, Debug)]
pub struct LogScale {
    lo: f64,
    hi: f64,
    top: f64,
    bottom: f64,
}

impl LogScale {
    /// Spans whole decades around `min`..`max`.
    pub fn new(min: f64, max: f64, top: f64, bottom: f64) -> LogScale {
        let min = min.max(1e-3);
        let lo = min.log10().floor();
        let hi = max.max(min * 10.0).log10().ceil().max(lo + 1.0);
        LogScale {
            lo,
            hi,
            top,
            bottom,
        }
    }

    /// The y of a value (values below the scale sit on its floor).
    pub fn y(&self, v: f64) -> f64 {
        let l = v.max(10f64.powf(self.lo)).log10();
        self.bottom - (l - self.lo) / (self.hi - self.lo) * (self.bottom - self.top)
    }

    /// Ticks: every decade labelled, 2 and 5 labelled too when the scale spans at most
    /// three decades, and the other integers as small unlabelled ticks.
    pub fn ticks(&self, unit: &str) -> Vec<(String, f64, bool)> {
        let few = self.hi - self.lo <= 3.0;
        let mut out = Vec::new();
        let mut decade = self.lo;
        while decade <= self.hi {
            for m in 1..10 {
                let v = f64::from(m) * 10f64.powf(decade);
                if decade == self.hi && m > 1 {
                    break;
                }
                let labelled = m == 1 || (few && (m == 2 || m == 5));
                let label = if labelled {
                    format!("{} {unit}", fmt_number(v))
                } else {
                    String::new()
                };
                out.push((label, self.y(v), m == 1));
            }
            decade += 1.0;
        }
        out
    }
}

/// A linear scale from 0 to `max` over `bottom`..`top` px.
#[derive(Clone, Copy, Debug)]
pub struct LinearScale {
    max: f64,
    top: f64,
    bottom: f64,
}

impl LinearScale {
    /// From 0 to a round number at or above `max`.
    pub fn new(max: f64, top: f64, bottom: f64) -> LinearScale {
        let step = nice_step(max.max(1.0), 6.0);
        LinearScale {
            max: (max.max(1.0) / step).ceil() * step,
            top,
            bottom,
        }
    }

    /// The y of a value.
    pub fn y(&self, v: f64) -> f64 {
        self.bottom - v / self.max * (self.bottom - self.top)
    }

    /// Round ticks from 0 to the top.
    pub fn ticks(&self, unit: &str) -> Vec<(String, f64, bool)> {
        let step = nice_step(self.max, 6.0);
        let n = (self.max / step).round() as u32;
        (0..=n)
            .map(|i| {
                let v = f64::from(i) * step;
                (format!("{} {unit}", fmt_number(v)), self.y(v), true)
            })
            .collect()
    }
}

/// A step of 1, 2 or 5 times a power of ten that cuts `range` into about `count` parts.
pub fn nice_step(range: f64, count: f64) -> f64 {
    let raw = (range / count).max(1e-9);
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    let nice = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// A number without trailing zeros: `0.25`, `2`, `1000`.
pub fn fmt_number(v: f64) -> String {
    let text = format!("{v:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-0" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// Escapes text for SVG/HTML text and attributes.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_cover_the_decades_and_label_2_and_5_on_short_scales() {
        let scale = LogScale::new(0.4, 80.0, 0.0, 300.0);
        let labels: Vec<String> = scale
            .ticks("ms")
            .into_iter()
            .map(|t| t.0)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(
            labels,
            [
                "0.1 ms", "0.2 ms", "0.5 ms", "1 ms", "2 ms", "5 ms", "10 ms", "20 ms", "50 ms",
                "100 ms"
            ]
        );
        assert!((scale.y(0.1) - 300.0).abs() < 1e-9 && scale.y(100.0).abs() < 1e-9);
        assert!(scale.y(1.0) > scale.y(10.0), "larger values are higher");
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(60.0, 10.0), 10.0);
        assert_eq!(nice_step(7.0, 10.0), 1.0);
        assert_eq!(nice_step(0.9, 10.0), 0.1);
        assert_eq!(fmt_number(0.25), "0.25");
        assert_eq!(fmt_number(20.0), "20");
    }
}

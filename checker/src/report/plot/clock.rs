//! The clock plot, `clock.svg` (issue 28, after Jepsen's `clock.svg`): each node's clock
//! offset over the run, drawn for every run with clock faults.
//!
//! The offset is the node's lease clock minus the run's clock, as the clock nemesis set it,
//! read from the history's nemesis rows alone (so any history in our schema can have one;
//! the store's [`super::write_all`] writes it). A `skew` row
//! (`n2 rate=500/1000 jump=-250ms`) sets the rate and jumps; a `strobe` row
//! (`n3 delta=64ms period=16ms count=6`) alternates a backward jump of `delta` with half
//! speed every `period`; `reset-clock` sets the rate back to 1 (no jump), whatever its value
//! says. The clock is lockd's (`NodeClock`, as `lockd::server::clock` runs it): it never
//! reads less than it has read, so after a backward jump it stands still until real time
//! catches up. A node starts at offset 0 (its clock is taken to start with the run); the
//! plot shows what the faults did to it, not a measured reading. A clock row this module
//! cannot read is left out and counted in the subtitle.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use history::{FaultVerb, Op};

use super::faults::FaultSpan;
use super::svg::{Canvas, Entry, Swatch, escape, fmt_number, nice_step};

/// Line colours of the nodes, in node order (repeating past eight nodes).
const NODE_COLOURS: [&str; 8] = [
    "#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#e85aad", "#57606a",
];
/// Points per node line besides the fault instants.
const SAMPLES: u64 = 600;
/// Settings one strobe row may make (the harness's own strobes make at most 64); a row that
/// asks for more is not read: its value is input, and a huge count would never finish.
const STROBE_SETTINGS_MAX: f64 = 1000.0;
/// Y axis ticks at most.
const TICKS_MAX: usize = 40;

/// lockd's clock: `anchor_ms + (t - anchor_t) * rate`, never reading less than before.
#[derive(Clone, Copy, Debug)]
struct NodeClock {
    anchor_t: f64,
    anchor_ms: f64,
    rate: f64,
    last_ms: f64,
}

impl NodeClock {
    fn new() -> NodeClock {
        NodeClock {
            anchor_t: 0.0,
            anchor_ms: 0.0,
            rate: 1.0,
            last_ms: 0.0,
        }
    }

    fn read(&mut self, t: f64) -> f64 {
        let reading = self.anchor_ms + (t - self.anchor_t) * self.rate;
        self.last_ms = self.last_ms.max(reading);
        self.last_ms
    }

    fn set(&mut self, t: f64, rate: f64, jump_ms: f64) {
        let now = self.read(t);
        self.anchor_t = t;
        self.anchor_ms = now + jump_ms;
        self.rate = rate;
    }
}

/// One clock setting: at `t` ms, these nodes get `rate` and a jump.
#[derive(Clone, Debug, PartialEq)]
struct Setting {
    t: f64,
    nodes: Vec<u64>,
    rate: f64,
    jump_ms: f64,
}

/// The settings the clock rows of `faults` make, and how many rows could not be read.
fn settings(faults: &[Op]) -> (Vec<Setting>, usize) {
    let mut out = Vec::new();
    let mut unread = 0;
    let mut previous: Option<(&str, &str)> = None;
    for op in faults {
        let verb = FaultVerb::parse(&op.f);
        if !matches!(
            verb,
            Some(FaultVerb::Skew | FaultVerb::Strobe | FaultVerb::ResetClock)
        ) {
            continue;
        }
        // The harness records a fault before and after it acts: one setting per pair.
        if previous == Some((op.f.as_str(), op.value.as_str())) {
            previous = None;
            continue;
        }
        previous = Some((op.f.as_str(), op.value.as_str()));
        match parse(op) {
            Some(mut made) => out.append(&mut made),
            None => unread += 1,
        }
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    (out, unread)
}

/// The settings of one clock row; `None` when its value does not read.
fn parse(op: &Op) -> Option<Vec<Setting>> {
    let words: Vec<&str> = op.value.split_whitespace().collect();
    let nodes: Vec<u64> = words
        .iter()
        .take_while(|w| !w.contains('='))
        .filter_map(|w| w.strip_prefix('n')?.parse().ok())
        .collect();
    let param = |name: &str| -> Option<f64> {
        let w = words
            .iter()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))?;
        let number: f64 = w.trim_end_matches("ms").split('/').next()?.parse().ok()?;
        // Only finite figures of a plausible size draw (no inf, NaN or 1e300 ms).
        (number.is_finite() && number.abs() <= 1e12).then_some(number)
    };
    let t = op.time_ns as f64 / 1e6;
    let setting = |t: f64, rate: f64, jump_ms: f64| Setting {
        t,
        nodes: nodes.clone(),
        rate,
        jump_ms,
    };
    match op.f.as_str() {
        "strobe" => {
            let (delta, period, count) = (param("delta")?, param("period")?, param("count")?);
            if !(0.0..=STROBE_SETTINGS_MAX).contains(&count) {
                return None;
            }
            Some(
                (0..count.max(0.0) as u64)
                    .map(|j| {
                        let at = t + j as f64 * period;
                        if j % 2 == 0 {
                            setting(at, 1.0, -delta)
                        } else {
                            setting(at, 0.5, 0.0)
                        }
                    })
                    .collect(),
            )
        }
        // `reset-clock` runs the clock at the normal rate again, whatever its value says.
        "reset-clock" => Some(vec![setting(t, 1.0, 0.0)]),
        _ => Some(vec![setting(t, param("rate")? / 1000.0, param("jump")?)]),
    }
}

/// Each node's offset line: (t ms, offset ms) points, the instants of its settings twice
/// (before and after), so jumps draw as steps.
fn lines(settings: &[Setting], end_ms: f64) -> BTreeMap<u64, Vec<(f64, f64)>> {
    let nodes: std::collections::BTreeSet<u64> =
        settings.iter().flat_map(|s| s.nodes.clone()).collect();
    let mut out = BTreeMap::new();
    for node in nodes {
        let mine: Vec<&Setting> = settings
            .iter()
            .filter(|s| s.nodes.contains(&node))
            .collect();
        let mut times: Vec<f64> = (0..=SAMPLES)
            .map(|i| end_ms * i as f64 / SAMPLES as f64)
            .chain(mine.iter().map(|s| s.t))
            .collect();
        times.sort_by(f64::total_cmp);
        let mut clock = NodeClock::new();
        let mut next = 0;
        let mut points = Vec::with_capacity(times.len() + mine.len());
        for t in times {
            while let Some(s) = mine.get(next).filter(|s| s.t <= t) {
                points.push((s.t, clock.read(s.t) - s.t));
                clock.set(s.t, s.rate, s.jump_ms);
                points.push((s.t, clock.read(s.t) - s.t));
                next += 1;
            }
            points.push((t, clock.read(t) - t));
        }
        out.insert(node, points);
    }
    out
}

/// The clock plot of a history whose nemesis rows are `faults`, over `end_ns`; `None`
/// when the history has no clock fault.
pub fn clock_svg(title: &str, faults: &[Op], spans: &[FaultSpan], end_ns: u64) -> Option<String> {
    let clock_rows = faults.iter().any(|f| {
        matches!(
            FaultVerb::parse(&f.f),
            Some(FaultVerb::Skew | FaultVerb::Strobe)
        )
    });
    if !clock_rows {
        return None;
    }
    let (settings, unread) = settings(faults);
    let end_ms = end_ns as f64 / 1e6;
    let lines = lines(&settings, end_ms);
    let what = format!(
        "clock offset of each node: its lease clock minus the run's clock, as the clock nemesis set it{}",
        if unread == 0 {
            String::new()
        } else {
            format!(" ({unread} clock row(s) not read)")
        }
    );
    let mut canvas = Canvas::new(title, &what, spans, end_ns);
    let offsets = lines.values().flatten().map(|p| p.1);
    let (low, high) = offsets.fold((0.0f64, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let step = nice_step((high - low).max(1.0), 6.0);
    let (low, high) = ((low / step).floor() * step, (high / step).ceil() * step);
    let high = if high <= low { low + step } else { high };
    let y = |v: f64| canvas.bottom - (v - low) / (high - low) * (canvas.bottom - canvas.top);
    let mut ticks = Vec::new();
    let mut v = low;
    while v <= high + step / 2.0 && ticks.len() < TICKS_MAX {
        ticks.push((format!("{} ms", fmt_number(v)), y(v), true));
        v += step;
    }
    let mut marks = String::new();
    let mut entries = Vec::new();
    for (i, (node, points)) in lines.iter().enumerate() {
        let colour = NODE_COLOURS[i % NODE_COLOURS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|(t, o)| {
                let x = canvas.x((t.max(0.0) * 1e6) as u64);
                format!("{x:.1},{:.1}", y(*o))
            })
            .collect();
        let _ = writeln!(
            marks,
            "<polyline class=\"clock-line\" data-node=\"n{node}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>",
            path.join(" "),
            escape(&format!("n{node}: clock offset"))
        );
        entries.push(Entry {
            swatch: Swatch::Line(colour, ""),
            label: format!("n{node}"),
        });
    }
    canvas.x_axis();
    canvas.y_axis(&ticks, "clock offset (ms)");
    canvas.out.push_str("<g id=\"clock-lines\">\n");
    canvas.out.push_str(&marks);
    canvas.out.push_str("</g>\n");
    Some(canvas.finish(&entries))
}

#[cfg(test)]
mod tests {
    use super::super::faults::tests::faults;
    use super::*;

    #[test]
    fn a_skew_slows_a_node_and_a_backward_jump_holds_its_clock_still() {
        // Issue 28 item 5: lockd's clock (server::clock) never reads less than it has read.
        let f = faults(
            "0,1000000000,nemesis,info,skew,,n2 rate=500/1000 jump=-250ms,,,\n\
             1,1001000000,nemesis,info,skew,,n2 rate=500/1000 jump=-250ms,,,\n\
             2,3000000000,nemesis,info,reset-clock,,n2 rate=1000/1000 jump=0ms,,,\n\
             3,3001000000,nemesis,info,reset-clock,,n2 rate=1000/1000 jump=0ms,,,\n",
        );
        let (settings, unread) = settings(&f);
        assert_eq!((settings.len(), unread), (2, 0));
        let lines = lines(&settings, 4000.0);
        let at = |t: f64| {
            lines[&2]
                .iter()
                .rev()
                .find(|p| p.0 <= t)
                .map(|p| p.1)
                .unwrap()
        };
        assert_eq!(at(999.0), 0.0);
        // At 1000 ms the clock read 1000; it jumps back to 750 at half speed and holds 1000
        // until 1500 ms. At 2000 ms it reads 750 + 1000 / 2 = 1250: offset -750.
        assert!(
            (at(1400.0) - (1000.0 - 1400.0)).abs() < 1e-6,
            "{}",
            at(1400.0)
        );
        assert!((at(2000.0) + 750.0).abs() < 1e-6, "{}", at(2000.0));
        // Reset at 3000 ms (reading 1750): the offset stays at -1250 from then on.
        assert!((at(3000.0) + 1250.0).abs() < 1e-6, "{}", at(3000.0));
        assert!((at(3900.0) - at(3000.0)).abs() < 1e-6);
    }

    #[test]
    fn a_strobe_draws_one_line_per_node_and_bad_values_are_counted_not_fatal() {
        let f = faults(
            "0,1000000000,nemesis,info,strobe,,n3 n5 delta=64ms period=16ms count=6,,,\n\
             1,1100000000,nemesis,info,strobe,,n3 n5 delta=64ms period=16ms count=6,,,\n\
             2,2000000000,nemesis,info,skew,,n1 x1.5,,,\n\
             3,2001000000,nemesis,info,skew,,n1 x1.5,,,\n\
             4,2100000000,nemesis,info,strobe,,n2 delta=1ms period=1ms count=1e300,,,\n\
             5,2200000000,nemesis,info,skew,,n4 rate=inf/1000 jump=0ms,,,\n",
        );
        let spans = super::super::faults::fault_spans(&f, 3_000_000_000);
        let svg = clock_svg("t", &f, &spans, 3_000_000_000).expect("clock faults");
        assert!(svg.contains("data-node=\"n3\"") && svg.contains("data-node=\"n5\""));
        assert!(!svg.contains("data-node=\"n1\""));
        // Bad values (no rate, a count past any strobe, an infinite rate) are counted, and
        // drawing stays bounded.
        assert!(svg.contains("3 clock row(s) not read"), "{svg}");
        assert!(clock_svg("t", &[], &[], 1).is_none());
    }
}

//! An SVG plot of latency over time: one dot per completed client operation (x = invoke
//! time, y = latency, colour = outcome), with nemesis fault periods shaded. Plain SVG, no
//! scripts: it opens in any browser and embeds in the HTML report.

use history::{Op, OpType, Operation};

use crate::report::timeline::fault_periods;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 360.0;
const MARGIN_LEFT: f64 = 60.0;
const MARGIN_BOTTOM: f64 = 40.0;
const MARGIN_TOP: f64 = 30.0;
const MARGIN_RIGHT: f64 = 20.0;
/// At most this many dots are drawn; longer histories are sampled evenly.
pub const PLOT_POINTS_MAX: usize = 20_000;

/// Renders the latency plot of `operations` with `faults` (nemesis rows) shaded.
pub fn latency_svg(title: &str, operations: &[Operation], faults: &[Op]) -> String {
    let done: Vec<(u64, u64, OpType)> = operations
        .iter()
        .filter_map(|op| {
            let c = op.completion.as_ref()?;
            Some((
                op.call_ns(),
                c.time_ns.saturating_sub(op.call_ns()),
                c.op_type,
            ))
        })
        .collect();
    let t_min = done.iter().map(|d| d.0).min().unwrap_or(0);
    let t_max = done
        .iter()
        .map(|d| d.0 + d.1)
        .chain(faults.iter().map(|f| f.time_ns))
        .max()
        .unwrap_or(1)
        .max(t_min + 1);
    let latency_max = done.iter().map(|d| d.1).max().unwrap_or(1).max(1);
    let plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
    let plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM;
    let x =
        |t: u64| MARGIN_LEFT + (t.saturating_sub(t_min)) as f64 / (t_max - t_min) as f64 * plot_w;
    let y = |l: u64| MARGIN_TOP + plot_h - l as f64 / latency_max as f64 * plot_h;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <title>{}</title>\n<text x=\"{MARGIN_LEFT}\" y=\"18\" font-size=\"14\">{}</text>\n",
        escape(title),
        escape(title)
    );
    for period in fault_periods(faults, t_max) {
        let left = x(period.start_ns);
        let w = (x(period.end_ns) - left).max(1.0);
        svg.push_str(&format!(
            "<rect x=\"{left:.1}\" y=\"{MARGIN_TOP}\" width=\"{w:.1}\" height=\"{plot_h}\" fill=\"#ffaa00\" fill-opacity=\"0.18\"><title>{}</title></rect>\n",
            escape(&period.text)
        ));
    }
    svg.push_str(&format!(
        "<line x1=\"{MARGIN_LEFT}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#444\"/>\n\
         <line x1=\"{MARGIN_LEFT}\" y1=\"{MARGIN_TOP}\" x2=\"{MARGIN_LEFT}\" y2=\"{b}\" stroke=\"#444\"/>\n\
         <text x=\"{MARGIN_LEFT}\" y=\"{lx}\">{t0:.3} s</text><text x=\"{r}\" y=\"{lx}\" text-anchor=\"end\">{t1:.3} s</text>\n\
         <text x=\"{ylab}\" y=\"{MARGIN_TOP}\" text-anchor=\"end\">{lmax:.1} ms</text><text x=\"{ylab}\" y=\"{b}\" text-anchor=\"end\">0 ms</text>\n",
        b = MARGIN_TOP + plot_h,
        r = MARGIN_LEFT + plot_w,
        lx = HEIGHT - 12.0,
        t0 = t_min as f64 / 1e9,
        t1 = t_max as f64 / 1e9,
        ylab = MARGIN_LEFT - 4.0,
        lmax = latency_max as f64 / 1e6,
    ));
    let stride = done.len().div_ceil(PLOT_POINTS_MAX).max(1);
    for &(call, latency, op_type) in done.iter().step_by(stride) {
        let colour = match op_type {
            OpType::Ok => "#1a7f37",
            OpType::Fail => "#cf222e",
            _ => "#777777",
        };
        svg.push_str(&format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.6\" fill=\"{colour}\"/>\n",
            x(call),
            y(latency)
        ));
    }
    svg.push_str("</svg>\n");
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plot_has_one_dot_per_completed_op_and_shades_faults() {
        // Issue 3: latency over time with nemesis periods shaded.
        let csv = "index,time_ns,process,type,f,key,value,token,node,error\n\
                   0,1000000,0,invoke,acquire,a,100,,,\n\
                   1,3000000,0,ok,acquire,a,,5,n1,\n\
                   2,4000000,nemesis,info,kill,,n1,,,\n\
                   3,5000000,1,invoke,acquire,a,100,,,\n\
                   4,9000000,1,fail,acquire,a,,,n2,busy\n\
                   5,9500000,nemesis,info,restart,,n1,,,\n\
                   6,9600000,2,invoke,acquire,b,100,,,\n";
        let ops = history::csv::read_str(csv).unwrap();
        let paired = history::pair::pair_with_faults(&ops).unwrap();
        let svg = latency_svg("run", &paired.operations, &paired.faults);
        assert_eq!(svg.matches("<circle").count(), 2);
        assert_eq!(svg.matches("fill=\"#ffaa00\"").count(), 1);
        assert!(svg.contains("kill n1 (row 2) .. restart n1 (row 5)"));
        assert!(svg.contains("#cf222e"));
    }
}

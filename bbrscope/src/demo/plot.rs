//! `--plot FILE.svg|FILE.png`: for every flow on shared time axes, the goodput the run is about
//! (with each flow's average as a labelled line, so a flow at 3% of the other still reads), cwnd
//! below it and smoothed RTT at the bottom. The chart is drawn as SVG; PNG is that SVG rasterised
//! by resvg (text needs a system font).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

use anyhow::Result;

use super::run::FlowRun;
use crate::{
    figure::{self, Area, escape},
    units::fmt_rate,
};

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 860.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const GOODPUT_H: f64 = 250.0;
const CWND_H: f64 = 220.0;
const GAP: f64 = 60.0;
const RTT_H: f64 = 150.0;
/// Goodput is averaged over this long: the observer's 50 ms samples of a lossy flow jump between
/// zero and line rate, which would paint a solid band instead of a line.
const GOODPUT_BUCKET_S: f64 = 0.5;

/// Colours per algorithm; others take the next free one.
fn colour(cc: &str, i: usize) -> &'static str {
    match cc {
        "cubic" => "#d62728",
        "bbr" => "#1f77b4",
        "reno" => "#2ca02c",
        _ => ["#9467bd", "#ff7f0e", "#8c564b", "#e377c2"][i % 4],
    }
}

/// Writes the chart of `runs` (one round) to `path`, as SVG or PNG by its extension.
pub(crate) fn write(path: &Path, title: &str, duration_s: f64, runs: &[&FlowRun]) -> Result<()> {
    figure::write(path, &svg(title, duration_s, runs))
}

/// `path` with `-k` before its extension: one figure per round ("fair.svg" -> "fair-2.svg").
pub(crate) fn numbered(path: &Path, k: usize) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    path.with_file_name(format!("{stem}-{k}{ext}"))
}

/// One panel: time on x, `value` of each flow's samples on y.
struct Panel<'a> {
    top: f64,
    height: f64,
    label: &'a str,
    value: fn(&crate::observe::flow::Point) -> Option<f64>,
    /// Average the values over buckets of this many seconds.
    bucket_s: Option<f64>,
    /// Draw each run's `FlowRun::goodput_bps` (in the panel's unit) as a labelled dashed line.
    averages: bool,
}

/// (seconds since the run's start, value) for each of `r`'s samples, or the mean per bucket.
fn points(
    r: &FlowRun,
    value: fn(&crate::observe::flow::Point) -> Option<f64>,
    bucket_s: Option<f64>,
) -> Vec<(f64, f64)> {
    let raw = r.series.iter().filter_map(|p| value(p).map(|v| (p.ts_ns.saturating_sub(r.start_ns) as f64 / 1e9, v)));
    let Some(b) = bucket_s else { return raw.collect() };
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    for (t, v) in raw {
        let k = (t / b).floor();
        match out.last_mut() {
            Some(last) if last.0 == k => {
                last.1 += v;
                last.2 += 1;
            }
            _ => out.push((k, v, 1)),
        }
    }
    out.into_iter().map(|(k, sum, n)| ((k + 0.5) * b, sum / n as f64)).collect()
}

pub(crate) fn svg(title: &str, duration_s: f64, runs: &[&FlowRun]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>
"#,
        escape(title)
    );
    for (i, r) in runs.iter().enumerate() {
        let x = LEFT + 10.0 + i as f64 * 200.0;
        let c = colour(&r.cc, i);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="44" x2="{}" y2="44" stroke="{c}" stroke-width="3"/><text x="{}" y="48">{} {}</text>"#,
            x + 24.0,
            x + 30.0,
            escape(&r.cc),
            fmt_rate(r.goodput_bps)
        );
    }
    let panels = [
        Panel {
            top: TOP,
            height: GOODPUT_H,
            label: "goodput (Mbit/s)",
            value: |p| p.throughput_bps.map(|v| v as f64 / 1e6),
            bucket_s: Some(GOODPUT_BUCKET_S),
            averages: true,
        },
        Panel {
            top: TOP + GOODPUT_H + GAP,
            height: CWND_H,
            label: "cwnd (packets)",
            value: |p| p.cwnd.map(f64::from),
            bucket_s: None,
            averages: false,
        },
        Panel {
            top: TOP + GOODPUT_H + GAP + CWND_H + GAP,
            height: RTT_H,
            label: "smoothed RTT (ms)",
            value: |p| p.srtt_us.map(|v| f64::from(v) / 1e3),
            bucket_s: None,
            averages: false,
        },
    ];
    for panel in &panels {
        draw_panel(&mut s, panel, duration_s, runs);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time (s)</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        HEIGHT - 8.0
    );
    s.push_str("</svg>\n");
    s
}

fn draw_panel(s: &mut String, panel: &Panel, duration_s: f64, runs: &[&FlowRun]) {
    let w = WIDTH - LEFT - RIGHT;
    let (top, h) = (panel.top, panel.height);
    let series: Vec<Vec<(f64, f64)>> = runs.iter().map(|r| points(r, panel.value, panel.bucket_s)).collect();
    let averages: Vec<f64> = if panel.averages { runs.iter().map(|r| r.goodput_bps / 1e6).collect() } else { vec![] };
    let ymax =
        series.iter().flatten().map(|p| p.1).chain(averages.iter().copied()).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let x_of = |t: f64| LEFT + t / duration_s * w;
    let y_of = |v: f64| top + h - v / ymax * h;
    let area = Area { x: LEFT, y: top, w, h };
    for v in ticks(ymax) {
        area.y_tick(s, y_of(v), &tick_label(v));
    }
    for t in ticks(duration_s) {
        area.x_tick(s, x_of(t), &tick_label(t));
    }
    area.frame(s, panel.label, 55.0);
    for (i, (r, pts_of)) in runs.iter().zip(&series).enumerate() {
        let mut pts = String::new();
        for &(t, v) in pts_of {
            let _ = write!(pts, "{:.1},{:.1} ", x_of(t.min(duration_s)), y_of(v));
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" stroke-linejoin="round" points="{}"/>"#,
            colour(&r.cc, i),
            pts.trim_end()
        );
    }
    for (i, (r, avg)) in runs.iter().zip(&averages).enumerate() {
        let y = y_of(*avg);
        let _ = writeln!(
            s,
            r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{c}" stroke-width="1" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="{c}">{} average {}</text>"#,
            LEFT + w,
            LEFT + w - 6.0,
            y - 5.0,
            escape(&r.cc),
            fmt_rate(r.goodput_bps),
            c = colour(&r.cc, i),
        );
    }
}

/// Round tick positions from 0 to `max` (steps of 1, 2 or 5 x 10^n, about five of them).
#[expect(clippy::maybe_infinite_iter, reason = "take_while ends it at `max`")]
fn ticks(max: f64) -> Vec<f64> {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag);
    (0..).map(|i| f64::from(i) * step).take_while(|&v| v <= max + 1e-9).collect()
}

fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_figures_keep_directory_and_extension() {
        assert_eq!(numbered(Path::new("/tmp/fair.svg"), 3), PathBuf::from("/tmp/fair-3.svg"));
        assert_eq!(numbered(Path::new("fair.png"), 1), PathBuf::from("fair-1.png"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(30.0), vec![0.0, 10.0, 20.0, 30.0]);
        assert_eq!(ticks(870.0), vec![0.0, 200.0, 400.0, 600.0, 800.0]);
        assert_eq!(ticks(0.9).len(), 5);
    }

    /// The chart leads with the goodput the run is about, each flow's average labelled.
    #[test]
    fn the_chart_shows_goodput_with_averages() {
        use crate::demo::summary::tests::run;
        let (cubic, bbr) = (run("cubic", 1_500_000.0), run("bbr", 44_000_000.0));
        let svg = svg("cubic vs bbr", 30.0, &[&cubic, &bbr]);
        assert!(svg.contains("goodput (Mbit/s)"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 6, "goodput, cwnd and RTT for both flows");
        assert!(svg.contains("cubic average 1.50 Mbit/s") && svg.contains("bbr average 44.00 Mbit/s"), "{svg}");
        // Goodput is averaged per half second: 60 points per flow over 30 s, not 600 samples.
        let first = svg.split("<polyline").nth(1).unwrap();
        let points = first.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(points.split(' ').count(), 60, "{points}");
    }
}

//! The experiment's figure: per group, the completion-time CDFs of the two arms (x on a log
//! scale: completion times span microseconds to minutes). Arm A is a solid line, arm B a dashed
//! one, so the figure reads in greyscale and for colour-blind readers too. SVG written by hand;
//! PNG is that SVG rasterised by resvg, as the demo's figure.

use std::fmt::Write as _;

use super::{
    Observation,
    analysis::{Analysis, GroupResult},
    conclusion::verdict_words,
    format::{clip, fmt_count},
};
use crate::figure::{Area, escape};

const WIDTH: f64 = 960.0;
const COLS: usize = 2;
const PANEL_W: f64 = 380.0;
const PANEL_H: f64 = 200.0;
const LEFT: f64 = 70.0;
const COL_GAP: f64 = 80.0;
const TOP: f64 = 80.0;
const ROW_GAP: f64 = 90.0;
/// Points per line at most: a CDF of 100,000 flows drawn point by point is a megabyte of SVG that
/// looks the same.
const MAX_POINTS: usize = 400;

/// Arm A red and solid, arm B blue and dashed.
const STYLE: [(&str, &str); 2] = [("#d62728", ""), ("#1f77b4", r#" stroke-dasharray="7 4""#)];

/// The figure: one panel per group of `analysis` that has flows in both arms, in the analysis's
/// order, at most `max_panels`.
pub(crate) fn svg(obs: &[Observation], analysis: &Analysis, max_panels: usize) -> String {
    let names = [&analysis.arms[0].cc, &analysis.arms[1].cc];
    let groups: Vec<&GroupResult> =
        analysis.groups.iter().filter(|g| g.arms.iter().all(|a| a.flows > 0)).take(max_panels.max(1)).collect();
    let rows = groups.len().div_ceil(COLS).max(1);
    let height = TOP + rows as f64 * (PANEL_H + ROW_GAP);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="15" font-weight="bold">Flow completion time: {} (A) vs {} (B)</text>
"#,
        escape(names[0]),
        escape(names[1])
    );
    for (arm, (colour, dash)) in STYLE.iter().enumerate() {
        let x = LEFT + arm as f64 * 220.0;
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="46" x2="{}" y2="46" stroke="{colour}" stroke-width="2"{dash}/><text x="{}" y="50">arm {} {} ({} flows)</text>"#,
            x + 34.0,
            x + 40.0,
            ["A", "B"][arm],
            escape(names[arm]),
            fmt_count(analysis.arms[arm].flows)
        );
    }
    if groups.is_empty() {
        let _ = writeln!(s, r#"<text x="{LEFT}" y="{}">no group has flows in both arms</text>"#, TOP + 20.0);
    }
    for (i, g) in groups.iter().enumerate() {
        let x0 = LEFT + (i % COLS) as f64 * (PANEL_W + COL_GAP);
        let y0 = TOP + (i / COLS) as f64 * (PANEL_H + ROW_GAP) + 20.0;
        panel(&mut s, obs, g, names, x0, y0);
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, obs: &[Observation], g: &GroupResult, names: [&String; 2], x0: f64, y0: f64) {
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for &i in &g.members {
        let o = &obs[i];
        // A log axis has no place for 0: a flow that closed within the clock's resolution is
        // drawn at 1 µs.
        if let Some(t) = times.get_mut(o.arm) {
            t.push(o.client_s().max(1e-6));
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    let lo = times.iter().filter_map(|t| t.first()).fold(f64::INFINITY, |a, &b| a.min(b));
    let hi = times.iter().filter_map(|t| t.last()).fold(0.0f64, |a, &b| a.max(b));
    // Whole decades around the data, at least one.
    let (d0, mut d1) = (lo.log10().floor(), hi.log10().ceil());
    if d1 <= d0 {
        d1 = d0 + 1.0;
    }
    let x_of = |t: f64| x0 + (t.log10() - d0) / (d1 - d0) * PANEL_W;
    let y_of = |p: f64| y0 + PANEL_H - p * PANEL_H;
    let verdict = format!("{} (B's completion time vs A's)", verdict_words([names[0], names[1]], g));
    let _ = writeln!(
        s,
        r#"<text x="{x0}" y="{:.1}" font-weight="bold">{} — {} {} / {} {} flows</text><text x="{x0}" y="{:.1}" font-size="11">{}</text>"#,
        y0 - 24.0,
        escape(&clip(&g.label, 28)),
        fmt_count(times[0].len()),
        escape(names[0]),
        fmt_count(times[1].len()),
        escape(names[1]),
        y0 - 8.0,
        escape(&verdict)
    );
    let area = Area { x: x0, y: y0, w: PANEL_W, h: PANEL_H };
    for p in [0.0, 0.25, 0.5, 0.75, 1.0] {
        area.y_tick(s, y_of(p), &p.to_string());
    }
    for d in (d0 as i32)..=(d1 as i32) {
        area.x_tick(s, x_of(10f64.powi(d)), &decade_label(d));
    }
    area.frame(s, "share of flows", 40.0);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">completion time (log)</text>"#,
        x0 + PANEL_W / 2.0,
        y0 + PANEL_H + 34.0
    );
    for (arm, t) in times.iter().enumerate() {
        let (colour, dash) = STYLE[arm];
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.8"{dash} points="{}"/>"#,
            cdf_points(t).iter().map(|&(v, p)| format!("{:.1},{:.1}", x_of(v), y_of(p))).collect::<Vec<_>>().join(" ")
        );
    }
}

/// The empirical CDF of sorted values as a step line, thinned to at most `MAX_POINTS` steps
/// (evenly in probability, so the tails keep their shape).
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(MAX_POINTS).max(1);
    let mut out = Vec::new();
    let mut prev = 0.0;
    for i in (step - 1..n).step_by(step).chain(std::iter::once(n - 1)) {
        let p = (i + 1) as f64 / n as f64;
        if out.last().is_some_and(|&(_, q)| q >= p) {
            continue;
        }
        out.push((sorted[i], prev));
        out.push((sorted[i], p));
        prev = p;
    }
    out
}

fn decade_label(d: i32) -> String {
    match d {
        ..=-7 => format!("1e{d} s"),
        -6 => "1 µs".into(),
        -5 => "10 µs".into(),
        -4 => "100 µs".into(),
        -3 => "1 ms".into(),
        -2 => "10 ms".into(),
        -1 => "100 ms".into(),
        0 => "1 s".into(),
        1 => "10 s".into(),
        2 => "100 s".into(),
        _ => format!("1e{d} s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::analysis::{Options, analyze, tests::lossy_and_clean};

    #[test]
    fn one_solid_and_one_dashed_cdf_per_group() {
        let obs = lossy_and_clean(4);
        let a = analyze(&obs, &Options::default());
        let svg = svg(&obs, &a, 12);
        // all flows, two RTT bands, two prefixes.
        let panels = 5;
        assert_eq!(svg.matches("<polyline").count(), 2 * panels);
        assert_eq!(
            svg.matches("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.8\" stroke-dasharray").count(),
            panels
        );
        assert!(svg.contains("203.0.113.0/24 — 600 cubic / 600 bbr flows"), "{svg}");
        // Each caption is the group's verdict with its number, as the report says it.
        assert!(svg.contains(">BBR faster −"), "{svg}");
        assert!(svg.contains(">no difference &gt; 5% ") || svg.contains(">inconclusive "), "{svg}");
        // Log axis: decade ticks.
        assert!(svg.contains(">1 ms<") && svg.contains(">1 s<"));
        assert!(resvg::usvg::Tree::from_str(&svg, &resvg::usvg::Options::default()).is_ok());
        assert_eq!(super::svg(&obs, &a, 2).matches("<polyline").count(), 4);
    }

    #[test]
    fn cdf_is_thinned_but_keeps_its_ends() {
        let x: Vec<f64> = (1..=10_000).map(f64::from).collect();
        let p = cdf_points(&x);
        assert!(p.len() <= 2 * MAX_POINTS + 2, "{}", p.len());
        assert_eq!(p.last(), Some(&(10_000.0, 1.0)));
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(cdf_points(&[]).is_empty());
    }

    #[test]
    fn writes_png() {
        let obs = lossy_and_clean(4);
        let a = analyze(&obs, &Options { by_prefix: false, ..Options::default() });
        let path = std::env::temp_dir().join(format!("bbrscope-experiment-{}.png", std::process::id()));
        crate::figure::write(&path, &svg(&obs, &a, 4)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    }
}

//! `--plot FILE.svg|FILE.png`: cwnd over time for every flow on one chart, smoothed RTT below.
//! The chart is drawn as SVG; PNG is that SVG rasterised by resvg (text needs a system font).

use std::{fmt::Write as _, path::Path};

use anyhow::{Context as _, Result, bail};

use super::run::FlowRun;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 640.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const CWND_H: f64 = 300.0;
const GAP: f64 = 60.0;
const RTT_H: f64 = 150.0;

/// Colours per algorithm; others take the next free one.
fn colour(cc: &str, i: usize) -> &'static str {
    match cc {
        "cubic" => "#d62728",
        "bbr" => "#1f77b4",
        "reno" => "#2ca02c",
        _ => ["#9467bd", "#ff7f0e", "#8c564b", "#e377c2"][i % 4],
    }
}

/// Whether `path` names a format this module can write, checked before anything runs.
pub fn check_path(path: &Path) -> Result<(), String> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg" | "png") => Ok(()),
        _ => Err(format!("--plot {}: the file must end in .svg or .png", path.display())),
    }
}

/// Writes the chart of `runs` (one round) to `path`, as SVG or PNG by its extension.
pub fn write(path: &Path, title: &str, duration_s: f64, runs: &[&FlowRun]) -> Result<()> {
    let svg = svg(title, duration_s, runs);
    let bytes =
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) { png(&svg)? } else { svg.into_bytes() };
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// One panel: time on x, `value` of each flow's samples on y.
struct Panel<'a> {
    top: f64,
    height: f64,
    label: &'a str,
    value: fn(&crate::flow::Point) -> Option<f64>,
}

pub fn svg(title: &str, duration_s: f64, runs: &[&FlowRun]) -> String {
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
        let x = LEFT + 10.0 + i as f64 * 110.0;
        let c = colour(&r.cc, i);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="44" x2="{}" y2="44" stroke="{c}" stroke-width="3"/><text x="{}" y="48">{}</text>"#,
            x + 24.0,
            x + 30.0,
            escape(&r.cc)
        );
    }
    let panels = [
        Panel { top: TOP, height: CWND_H, label: "cwnd (packets)", value: |p| p.cwnd.map(f64::from) },
        Panel {
            top: TOP + CWND_H + GAP,
            height: RTT_H,
            label: "smoothed RTT (ms)",
            value: |p| p.srtt_us.map(|v| v as f64 / 1e3),
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
    let ymax = runs.iter().flat_map(|r| r.series.iter().filter_map(panel.value)).fold(0.0f64, f64::max).max(1.0) * 1.05;
    let x_of = |t: f64| LEFT + t / duration_s * w;
    let y_of = |v: f64| top + h - v / ymax * h;
    for v in ticks(ymax) {
        let y = y_of(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + w,
            LEFT - 6.0,
            y + 4.0,
            tick_label(v)
        );
    }
    for t in ticks(duration_s) {
        let x = x_of(t);
        let _ = writeln!(
            s,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + h,
            top + h + 16.0,
            tick_label(t)
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/><text x="{:.1}" y="{:.1}" transform="rotate(-90 {:.1} {:.1})" text-anchor="middle">{}</text>"##,
        LEFT - 55.0,
        top + h / 2.0,
        LEFT - 55.0,
        top + h / 2.0,
        panel.label
    );
    for (i, r) in runs.iter().enumerate() {
        let mut pts = String::new();
        for p in &r.series {
            if let Some(v) = (panel.value)(p) {
                let t = p.ts_ns.saturating_sub(r.start_ns) as f64 / 1e9;
                let _ = write!(pts, "{:.1},{:.1} ", x_of(t.min(duration_s)), y_of(v));
            }
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{}" stroke-width="1.5" stroke-linejoin="round" points="{}"/>"#,
            colour(&r.cc, i),
            pts.trim_end()
        );
    }
}

/// Round tick positions from 0 to `max` (steps of 1, 2 or 5 x 10^n, about five of them).
fn ticks(max: f64) -> Vec<f64> {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|&s| s >= raw).unwrap_or(10.0 * mag);
    (0..).map(|i| i as f64 * step).take_while(|&v| v <= max + 1e-9).collect()
}

fn tick_label(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v}") }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn png(svg: &str) -> Result<Vec<u8>> {
    let mut opt = resvg::usvg::Options::default();
    opt.fontdb_mut().load_system_fonts();
    if opt.fontdb.is_empty() {
        eprintln!(
            "bbrscope: warning: no system fonts found; the PNG has no labels (install fonts-dejavu-core, or use .svg)"
        );
    }
    let tree = resvg::usvg::Tree::from_str(svg, &opt).context("parsing the chart")?;
    let size = tree.size().to_int_size();
    let Some(mut pixmap) = resvg::tiny_skia::Pixmap::new(size.width(), size.height()) else {
        bail!("cannot allocate a {}x{} image", size.width(), size.height());
    };
    resvg::render(&tree, resvg::tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().context("encoding the PNG")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(10.0), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(30.0), vec![0.0, 10.0, 20.0, 30.0]);
        assert_eq!(ticks(870.0), vec![0.0, 200.0, 400.0, 600.0, 800.0]);
        assert_eq!(ticks(0.9).len(), 5);
    }

    #[test]
    fn only_svg_and_png() {
        assert!(check_path(Path::new("out.svg")).is_ok());
        assert!(check_path(Path::new("out.PNG")).is_ok());
        assert!(check_path(Path::new("out.pdf")).is_err());
        assert!(check_path(Path::new("out")).is_err());
    }
}

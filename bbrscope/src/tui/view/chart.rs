//! Time-series charts on a shared "seconds before now" axis.

use ratatui::{
    Frame,
    layout::Rect,
    style::Style,
    symbols::Marker,
    text::Span,
    widgets::{Axis, Block, Chart, Dataset, GraphType, LegendPosition},
};

use crate::tui::theme::Theme;

pub(super) struct Series {
    pub(crate) name: String,
    pub(crate) style: Style,
    pub(crate) points: Vec<(f64, f64)>,
    /// Drawn as dots (events) rather than a line.
    pub(crate) scatter: bool,
}

impl Series {
    pub(super) fn line(name: impl Into<String>, style: Style, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), style, points, scatter: false }
    }

    pub(super) fn dots(name: impl Into<String>, style: Style, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), style, points, scatter: true }
    }
}

/// Without colour, lines are told apart by their marker (NO_COLOR: two braille lines in the same
/// style cannot be), and the legend shows each one's symbol. With colour every line is braille.
const LINE_MARKERS: [(Marker, &str); 3] = [(Marker::Braille, "⣀"), (Marker::Dot, "•"), (Marker::Bar, "▄")];

/// x in seconds relative to now (negative = past).
pub(super) fn rel_s(ts_ns: u64, now_ns: u64) -> f64 {
    -((now_ns.saturating_sub(ts_ns)) as f64 / 1e9)
}

/// The y-axis top for the values of `series`: 10% above the highest.
pub(super) fn auto_top(series: &[Series]) -> f64 {
    series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max) * 1.1
}

/// A top that follows the bulk of `values` rather than its extremes: the `q` quantile plus a
/// quarter. A start-up burst or a pacing rate of thousands of Mbit/s before the first RTT sample
/// would otherwise flatten the line that matters; values above are clipped to the top edge.
pub(super) fn quantile_top(values: impl Iterator<Item = f64>, q: f64) -> Option<f64> {
    let v: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    crate::quantile::nearest_rank(&v, q).map(|top| top * 1.25)
}

/// Decimals that keep the axis labels 0, top/2 and top distinct (not "0.0 / 0.1 / 0.1").
pub(super) fn decimals(top: f64) -> usize {
    if top <= 0.0 || !top.is_finite() {
        return 1;
    }
    (1 - (top / 2.0).log10().floor() as i32).clamp(0, 4) as usize
}

/// The unit for times up to `max_us`: µs below a millisecond (loopback), else ms. Returns the
/// unit's name and microseconds per unit.
pub(super) fn time_unit(max_us: f64) -> (&'static str, f64) {
    if max_us < 1_000.0 { ("µs", 1.0) } else { ("ms", 1_000.0) }
}

/// Draws `series` over the last `window_s` seconds with y from 0 to `y_top` (or just above the
/// highest value); values above the top are drawn on it.
pub(super) fn draw(
    f: &mut Frame,
    area: Rect,
    title: &str,
    series: &[Series],
    window_s: f64,
    y_top: Option<f64>,
    theme: &Theme,
) {
    let y_max = y_top.unwrap_or_else(|| auto_top(series)).max(1e-9);
    let clipped: Vec<Vec<(f64, f64)>> =
        series.iter().map(|s| s.points.iter().map(|&(x, y)| (x, y.min(y_max))).collect()).collect();
    let mut line_no = 0;
    let mut datasets: Vec<Dataset> = series
        .iter()
        .zip(&clipped)
        .map(|(s, points)| {
            let (marker, name) = if s.scatter {
                (Marker::Dot, s.name.clone())
            } else {
                let (m, symbol) = LINE_MARKERS[line_no % LINE_MARKERS.len()];
                line_no += 1;
                if theme.color { (Marker::Braille, s.name.clone()) } else { (m, format!("{symbol} {}", s.name)) }
            };
            Dataset::default()
                .name(name)
                .marker(marker)
                .graph_type(if s.scatter { GraphType::Scatter } else { GraphType::Line })
                .style(s.style)
                .data(points)
        })
        .collect();
    // Later datasets are drawn over earlier ones: the first line (cwnd, srtt, throughput) goes
    // last of the lines so that another line's markers never hide it; event dots stay on top.
    let lines = series.iter().take_while(|s| !s.scatter).count();
    datasets[..lines].reverse();
    let x_labels = vec![
        Span::styled(format!("-{window_s:.0}s"), theme.dim()),
        Span::styled(format!("-{:.0}s", window_s / 2.0), theme.dim()),
        Span::styled("now", theme.dim()),
    ];
    let d = decimals(y_max);
    let y_labels = vec![Span::raw("0"), Span::raw(format!("{:.d$}", y_max / 2.0)), Span::raw(format!("{y_max:.d$}"))];
    let chart = Chart::new(datasets)
        .block(Block::bordered().title(Span::styled(title.to_string(), theme.title())).border_style(theme.dim()))
        .x_axis(Axis::default().bounds([-window_s, 0.0]).labels(x_labels).style(theme.dim()))
        .y_axis(Axis::default().bounds([0.0, y_max]).labels(y_labels).style(theme.dim()))
        .legend_position(Some(LegendPosition::TopLeft))
        .hidden_legend_constraints((
            ratatui::layout::Constraint::Percentage(60),
            ratatui::layout::Constraint::Percentage(60),
        ));
    f.render_widget(chart, area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_labels_stay_distinct() {
        let labels = |top: f64| {
            let d = decimals(top);
            [format!("{:.d$}", 0.0), format!("{:.d$}", top / 2.0), format!("{top:.d$}")]
        };
        for top in [0.011, 0.15, 0.9, 2.2, 9.0, 55.0, 167.0, 1200.0, 25_000.0] {
            let l = labels(top);
            assert!(l[0] != l[1] && l[1] != l[2], "{top}: {l:?}");
        }
        assert_eq!(labels(110.0), ["0", "55", "110"]);
        assert_eq!(time_unit(80.0), ("µs", 1.0));
        assert_eq!(time_unit(120_000.0), ("ms", 1000.0));
    }

    #[test]
    fn quantile_top_ignores_a_spike() {
        let mut v: Vec<f64> = vec![20.0; 95];
        v.extend([23_524.0; 5]);
        assert_eq!(quantile_top(v.into_iter(), 0.9), Some(25.0));
        assert_eq!(quantile_top(std::iter::empty(), 0.9), None);
    }
}

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

pub struct Series {
    pub name: String,
    pub style: Style,
    pub points: Vec<(f64, f64)>,
    /// Drawn as dots (events) rather than a line.
    pub scatter: bool,
}

impl Series {
    pub fn line(name: impl Into<String>, style: Style, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), style, points, scatter: false }
    }

    pub fn dots(name: impl Into<String>, style: Style, points: Vec<(f64, f64)>) -> Self {
        Series { name: name.into(), style, points, scatter: true }
    }
}

/// x in seconds relative to now (negative = past).
pub fn rel_s(ts_ns: u64, now_ns: u64) -> f64 {
    -((now_ns.saturating_sub(ts_ns)) as f64 / 1e9)
}

/// Draws `series` over the last `window_s` seconds with y from 0 to at least `y_min_top`.
pub fn draw(
    f: &mut Frame,
    area: Rect,
    title: &str,
    series: &[Series],
    window_s: f64,
    y_fmt: &dyn Fn(f64) -> String,
    theme: &Theme,
) {
    let y_max = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0f64, f64::max).max(1e-9) * 1.1;
    let datasets = series
        .iter()
        .map(|s| {
            Dataset::default()
                .name(s.name.clone())
                .marker(if s.scatter { Marker::Dot } else { Marker::Braille })
                .graph_type(if s.scatter { GraphType::Scatter } else { GraphType::Line })
                .style(s.style)
                .data(&s.points)
        })
        .collect();
    let x_labels = vec![
        Span::styled(format!("-{window_s:.0}s"), theme.dim()),
        Span::styled(format!("-{:.0}s", window_s / 2.0), theme.dim()),
        Span::styled("now", theme.dim()),
    ];
    let y_labels = vec![Span::raw(y_fmt(0.0)), Span::raw(y_fmt(y_max / 2.0)), Span::raw(y_fmt(y_max))];
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

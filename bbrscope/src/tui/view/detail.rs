//! The selected flow: its verdict in words, its current state, and charts of cwnd (with
//! ssthresh, retransmits and state changes), RTT (with min RTT) and rates over the window.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Color,
    text::{Line, Span},
    widgets::{Block, Paragraph, Wrap},
};

use super::chart::{self, Series, rel_s};
use crate::{
    observe::flow::{Flow, FlowTable, Mark},
    tui::{app::App, fmt, theme::Theme},
};

/// Charts in the pane: cwnd, RTT, rates.
pub(crate) const CHARTS: usize = 3;
/// Rows a chart needs to show a shape (border, axis labels and at least five plotted rows).
const MIN_CHART_ROWS: u16 = 8;
/// The rate axis tops out a quarter above this quantile of throughput and delivery rate.
const RATE_AXIS_QUANTILE: f64 = 0.9;

/// Who owns the flow, as "nginx[812] accept netns 4026531840", where known.
fn owner(flow: &Flow) -> Option<String> {
    let o = flow.life.owner.as_ref()?;
    let mut parts = Vec::new();
    match (&o.comm, o.pid) {
        (Some(c), Some(p)) => parts.push(format!("{c}[{p}]")),
        (Some(c), None) => parts.push(c.to_string()),
        (None, Some(p)) => parts.push(format!("pid {p}")),
        (None, None) => {}
    }
    parts.extend(o.side.map(str::to_owned));
    parts.extend(o.netns.map(|n| format!("netns {n}")));
    (!parts.is_empty()).then(|| parts.join(" "))
}

pub(super) fn draw(f: &mut Frame, area: Rect, app: &App, table: &FlowTable, theme: &Theme) {
    let Some(flow) = app.selected_flow(table) else {
        return;
    };
    let now = app.view_now();
    let verdict = app.verdicts.verdict(flow, now);
    let mut title = vec![
        Span::styled(format!(" {} → {} ", flow.src, flow.dst), theme.title()),
        Span::styled(format!("{} ", flow.cc), theme.cc(&flow.cc)),
        Span::styled(format!("{} ", flow.ca_state.as_str()), theme.dim()),
    ];
    if let Some(owner) = owner(flow) {
        title.push(Span::styled(format!("· {owner} "), theme.dim()));
    }
    let title = Line::from(title);
    let block = Block::bordered().title(title).border_style(theme.dim());
    let inner = block.inner(area);
    f.render_widget(block, area);
    let text_rows = if inner.width >= 110 { 2 } else { 3 };
    let [words, state, charts] =
        Layout::vertical([Constraint::Length(text_rows), Constraint::Length(1), Constraint::Min(0)]).areas(inner);
    f.render_widget(Paragraph::new(verdict.explain(&flow.cc)).wrap(Wrap { trim: true }).style(theme.warn()), words);
    f.render_widget(Line::from(fmt::fit_marked(state_line(flow, theme), state.width.into())), state);
    if charts.height < 5 {
        return;
    }
    let window_s = app.window_ns() as f64 / 1e9;
    let since = now.saturating_sub(app.window_ns());
    let pts: Vec<_> = flow.since(since).collect();
    let xy = |get: &dyn Fn(&crate::observe::flow::Point) -> Option<f64>| -> Vec<(f64, f64)> {
        pts.iter().filter_map(|p| get(p).map(|v| (rel_s(p.ts_ns, now), v))).collect()
    };

    // As many charts as fit at a readable height; the rest are a key (t) away.
    let wide = charts.width >= 150;
    let fit = if wide { CHARTS } else { (charts.height / MIN_CHART_ROWS).clamp(1, CHARTS as u16) as usize };
    let shown: Vec<usize> = (0..fit).map(|i| (app.chart_tab + i) % CHARTS).collect();
    let hint = if fit < CHARTS { "· t: next chart " } else { "" };
    let areas: Vec<Rect> = if wide {
        Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(charts).to_vec()
    } else {
        Layout::vertical(vec![Constraint::Ratio(1, fit as u32); fit]).split(charts).to_vec()
    };
    for (&which, area) in shown.iter().zip(areas) {
        match which {
            0 => {
                let mut retrans = Vec::new();
                let mut states = Vec::new();
                for m in flow.marks.iter().filter(|m| m.ts_ns() >= since) {
                    match m {
                        Mark::Retransmit { ts_ns, cwnd, .. } => retrans.push((rel_s(*ts_ns, now), f64::from(*cwnd))),
                        Mark::State { ts_ns, cwnd, .. } => states.push((rel_s(*ts_ns, now), f64::from(*cwnd))),
                    }
                }
                let cwnd = vec![
                    Series::line("cwnd", theme.fg(Color::Cyan), xy(&|p| p.cwnd.map(f64::from))),
                    Series::line("ssthresh", theme.fg(Color::Yellow), xy(&|p| p.ssthresh.map(f64::from))),
                    Series::dots("retransmit", theme.fg(Color::Red), retrans),
                    Series::dots("state change", theme.fg(Color::Magenta), states),
                ];
                let title = format!(" cwnd (packets) {hint}");
                chart::draw(f, area, &title, &cwnd, window_s, None, theme);
            }
            1 => {
                let max_us = pts.iter().filter_map(|p| p.srtt_us.max(p.min_rtt_us)).max().unwrap_or(0);
                let (unit, per) = chart::time_unit(f64::from(max_us));
                let rtt = vec![
                    Series::line("srtt", theme.fg(Color::Green), xy(&|p| p.srtt_us.map(|v| f64::from(v) / per))),
                    Series::line("min rtt", theme.fg(Color::Gray), xy(&|p| p.min_rtt_us.map(|v| f64::from(v) / per))),
                ];
                chart::draw(f, area, &format!(" RTT ({unit}) {hint}"), &rtt, window_s, None, theme);
            }
            _ => {
                let mbps = |v: Option<u64>| v.map(|b| b as f64 / 1e6);
                let rates = vec![
                    Series::line("throughput", theme.fg(Color::White), xy(&|p| mbps(p.throughput_bps))),
                    Series::line("delivery", theme.fg(Color::Green), xy(&|p| mbps(p.delivery_rate_bps))),
                    Series::line("pacing", theme.fg(Color::Blue), xy(&|p| mbps(p.pacing_rate_bps))),
                ];
                // The axis follows what the flow moves (throughput and delivery rate), not the
                // pacing rate, which starts out at thousands of Mbit/s before the first RTT sample.
                let top = chart::quantile_top(
                    rates[..2].iter().flat_map(|s| s.points.iter().map(|p| p.1)),
                    RATE_AXIS_QUANTILE,
                );
                chart::draw(f, area, &format!(" rate (Mbit/s) {hint}"), &rates, window_s, top, theme);
            }
        }
    }
}

/// The flow's state in parts, each shown whole or not at all (see [`fmt::fit_marked`]).
fn state_line(flow: &Flow, theme: &Theme) -> Vec<Span<'static>> {
    let Some(m) = flow.metrics.as_ref() else { return Vec::new() };
    let opt = |v: Option<u32>| v.map_or("-".into(), |v| v.to_string());
    // BBR's state first: it is what the dashboard is for, and at 80 columns the line has room
    // for it and little else (what does not fit is marked, see `fmt::fit_marked`).
    let mut spans = Vec::new();
    if let Some(b) = &m.bbr {
        spans.push(Span::styled(
            format!(
                "BBR {} gain {:.2}/{:.2} bw {}",
                // Not known of a connection older than bbrscope on a BBR other than v1.
                b.mode.as_deref().unwrap_or("mode n/a"),
                b.pacing_gain.unwrap_or(0.0),
                b.cwnd_gain.unwrap_or(0.0),
                fmt::opt_bps(b.bw_bps)
            ),
            theme.cc("bbr"),
        ));
    }
    let sep = if spans.is_empty() { "" } else { " · " };
    spans.extend([
        Span::raw(format!("{sep}cwnd {} ssthresh {}", opt(m.cwnd), m.ssthresh.map_or("∞".into(), |v| v.to_string()))),
        Span::raw(format!(" · rtt {} min {}", fmt::opt_ms(m.srtt_us), fmt::opt_ms(m.min_rtt_us))),
        Span::raw(format!(" · pacing {}", fmt::opt_bps(m.pacing_rate_bps))),
        Span::raw(format!(" · delivery {}", fmt::opt_bps(m.delivery_rate_bps))),
        Span::raw(format!(" · retrans {}", opt(m.retrans_total))),
    ]);
    if let Some(c) = &m.cubic
        && let Some(w) = c.w_max
    {
        spans.push(Span::styled(format!(" · CUBIC W_max {w}"), theme.cc("cubic")));
    }
    spans
}

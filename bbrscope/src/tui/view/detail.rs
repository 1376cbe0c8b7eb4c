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
    diagnose,
    flow::{Flow, Mark},
    tui::{app::App, fmt, theme::Theme},
};

/// Who owns the flow, as "nginx[812] accept netns 4026531840", where known.
fn owner(flow: &Flow) -> Option<String> {
    let o = flow.life.owner.as_ref()?;
    let mut parts = Vec::new();
    match (&o.comm, o.pid) {
        (Some(c), Some(p)) => parts.push(format!("{c}[{p}]")),
        (Some(c), None) => parts.push(c.clone()),
        (None, Some(p)) => parts.push(format!("pid {p}")),
        (None, None) => {}
    }
    parts.extend(o.side.clone());
    parts.extend(o.netns.map(|n| format!("netns {n}")));
    (!parts.is_empty()).then(|| parts.join(" "))
}

pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let Some(flow) = app.selected_flow() else {
        return;
    };
    let now = app.view_now();
    let verdict = diagnose::diagnose(flow, now);
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
    f.render_widget(state_line(flow, theme), state);
    if charts.height < 5 {
        return;
    }
    let areas: Vec<Rect> = if charts.width >= 150 {
        Layout::horizontal([Constraint::Ratio(1, 3); 3]).split(charts).to_vec()
    } else {
        Layout::vertical([Constraint::Ratio(1, 3); 3]).split(charts).to_vec()
    };
    let window_s = app.window_ns() as f64 / 1e9;
    let since = now.saturating_sub(app.window_ns());
    let pts: Vec<_> = flow.since(since).collect();
    let xy = |get: &dyn Fn(&crate::flow::Point) -> Option<f64>| -> Vec<(f64, f64)> {
        pts.iter().filter_map(|p| get(p).map(|v| (rel_s(p.ts_ns, now), v))).collect()
    };

    let mut retrans = Vec::new();
    let mut states = Vec::new();
    for m in flow.marks.iter().filter(|m| m.ts_ns() >= since) {
        match m {
            Mark::Retransmit { ts_ns, cwnd, .. } => retrans.push((rel_s(*ts_ns, now), *cwnd as f64)),
            Mark::State { ts_ns, cwnd, .. } => states.push((rel_s(*ts_ns, now), *cwnd as f64)),
        }
    }
    let cwnd = vec![
        Series::line("cwnd", theme.fg(Color::Cyan), xy(&|p| p.cwnd.map(f64::from))),
        Series::line("ssthresh", theme.fg(Color::Yellow), xy(&|p| p.ssthresh.map(f64::from))),
        Series::dots("retransmit", theme.fg(Color::Red), retrans),
        Series::dots("state change", theme.fg(Color::Magenta), states),
    ];
    chart::draw(f, areas[0], " cwnd (packets) ", &cwnd, window_s, &|v| format!("{v:.0}"), theme);

    let rtt = vec![
        Series::line("srtt", theme.fg(Color::Green), xy(&|p| p.srtt_us.map(|v| v as f64 / 1e3))),
        Series::line("min rtt", theme.fg(Color::Gray), xy(&|p| p.min_rtt_us.map(|v| v as f64 / 1e3))),
    ];
    chart::draw(f, areas[1], " RTT (ms) ", &rtt, window_s, &|v| format!("{v:.1}"), theme);

    let mbps = |v: Option<u64>| v.map(|b| b as f64 / 1e6);
    let rates = vec![
        Series::line("throughput", theme.fg(Color::White), xy(&|p| mbps(p.throughput_bps))),
        Series::line("delivery", theme.fg(Color::Green), xy(&|p| mbps(p.delivery_rate_bps))),
        Series::line("pacing", theme.fg(Color::Blue), xy(&|p| mbps(p.pacing_rate_bps))),
    ];
    chart::draw(f, areas[2], " rate (Mbit/s) ", &rates, window_s, &|v| format!("{v:.1}"), theme);
}

fn state_line<'a>(flow: &Flow, theme: &Theme) -> Line<'a> {
    let Some(m) = flow.metrics.as_ref() else { return Line::raw("") };
    let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or("-".into());
    let mut spans = vec![Span::raw(format!(
        "cwnd {} ssthresh {} · rtt {} min {} · pacing {} delivery {} · retrans {}",
        opt(m.cwnd),
        m.ssthresh.map(|v| v.to_string()).unwrap_or("∞".into()),
        fmt::opt_ms(m.srtt_us),
        fmt::opt_ms(m.min_rtt_us),
        fmt::opt_bps(m.pacing_rate_bps),
        fmt::opt_bps(m.delivery_rate_bps),
        opt(m.retrans_total),
    ))];
    if let Some(b) = &m.bbr {
        spans.push(Span::styled(
            format!(
                " · BBR {} gain {:.2}/{:.2} bw {}",
                b.mode.as_deref().unwrap_or("?"),
                b.pacing_gain.unwrap_or(0.0),
                b.cwnd_gain.unwrap_or(0.0),
                fmt::opt_bps(b.bw_bps)
            ),
            theme.cc("bbr"),
        ));
    }
    if let Some(c) = &m.cubic
        && let Some(w) = c.w_max
    {
        spans.push(Span::styled(format!(" · CUBIC W_max {w}"), theme.cc("cubic")));
    }
    Line::from(spans)
}

//! CUBIC vs BBR side by side (or the two marked flows): throughput, retransmit rate and RTT
//! inflation for each, on charts with one shared scale — the same link at the same moment.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Block, Paragraph},
};

use super::chart::{self, Series, rel_s};
use crate::{
    observe::diagnose,
    observe::flow::{Flow, FlowTable},
    tui::{app::App, theme::Theme},
};

struct Group<'a> {
    label: String,
    style: Style,
    flows: Vec<&'a Flow>,
}

/// The two sides: the marked flows if two are marked, else flows grouped by algorithm (CUBIC and
/// BBR first, otherwise the two most common).
fn groups<'a>(app: &App, table: &'a FlowTable, theme: &Theme) -> Vec<Group<'a>> {
    if app.marked.len() == 2 {
        return app
            .marked
            .iter()
            .filter_map(|id| table.get(*id))
            .map(|fl| Group { label: format!("{} {}", fl.cc, fl.dst), style: theme.cc(&fl.cc), flows: vec![fl] })
            .collect();
    }
    // Flows still open; once a replay (or a demo round) has ended and every flow has closed,
    // the closed ones that are still listed, so the comparison stays on screen.
    let visible = app.visible(table);
    let open: Vec<&Flow> = visible.iter().copied().filter(|f| f.closed_ns.is_none()).collect();
    let algos_of =
        |flows: &[&Flow]| flows.iter().map(|f| f.cc.as_str()).collect::<std::collections::BTreeSet<_>>().len();
    let live = if algos_of(&open) >= 2 || algos_of(&visible) < 2 { open } else { visible };
    let mut algos: Vec<(String, usize)> = Vec::new();
    for fl in &live {
        match algos.iter_mut().find(|(cc, _)| *cc == *fl.cc) {
            Some((_, n)) => *n += 1,
            None => algos.push((fl.cc.to_string(), 1)),
        }
    }
    algos.sort_by(|a, b| {
        let pri = |cc: &str| ["cubic", "bbr"].iter().position(|c| *c == cc).unwrap_or(2);
        pri(&a.0).cmp(&pri(&b.0)).then(b.1.cmp(&a.1))
    });
    algos
        .into_iter()
        .take(2)
        .map(|(cc, n)| Group {
            label: format!("{cc} ({n} flow{})", if n == 1 { "" } else { "s" }),
            style: theme.cc(&cc),
            flows: live.iter().copied().filter(|f| f.cc == cc).collect(),
        })
        .collect()
}

/// Sum over the group's flows of their mean value per bucket (throughput adds up across flows),
/// or the mean across flows (RTT).
fn bucketed(
    flows: &[&Flow],
    since: u64,
    now: u64,
    buckets: usize,
    get: &dyn Fn(&crate::observe::flow::Point) -> Option<f64>,
    sum_flows: bool,
) -> Vec<(f64, f64)> {
    let width = ((now - since) / buckets as u64).max(1);
    let mut total = vec![(0.0, 0usize); buckets];
    for fl in flows {
        let mut per = vec![(0.0, 0usize); buckets];
        for p in fl.since(since) {
            if let Some(v) = get(p) {
                let b = (((p.ts_ns - since) / width) as usize).min(buckets - 1);
                per[b].0 += v;
                per[b].1 += 1;
            }
        }
        for (t, (s, n)) in total.iter_mut().zip(per) {
            if n > 0 {
                t.0 += s / n as f64;
                t.1 += 1;
            }
        }
    }
    total
        .into_iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(i, (s, n))| {
            let ts = since + width * i as u64 + width / 2;
            (rel_s(ts, now), if sum_flows { s } else { s / n as f64 })
        })
        .collect()
}

pub(super) fn draw(f: &mut Frame, area: Rect, app: &App, table: &FlowTable, theme: &Theme) {
    let groups = groups(app, table, theme);
    if groups.len() < 2 {
        let msg = "Compare needs flows with two different algorithms (e.g. one CUBIC, one BBR), \
                   or two flows marked with space. Esc: back.";
        f.render_widget(Paragraph::new(msg).style(theme.dim()).block(Block::bordered().title(" compare ")), area);
        return;
    }
    let now = app.view_now();
    let since = now.saturating_sub(app.window_ns());
    let window_s = app.window_ns() as f64 / 1e9;
    let buckets = (area.width as usize).clamp(20, 240);
    let recent = now.saturating_sub(diagnose::WINDOW_NS);

    let [summary, thr, rtt] =
        Layout::vertical([Constraint::Length(6), Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)]).areas(area);
    let cols = Layout::horizontal([Constraint::Ratio(1, 2); 2]).split(summary);
    for (g, col) in groups.iter().zip(cols.iter()) {
        let thr: u64 = g.flows.iter().filter_map(|f| f.rate_bps).sum();
        let retr: f64 = g.flows.iter().filter_map(|f| f.retrans_per_s(recent)).sum();
        let infl: Vec<f64> = g.flows.iter().filter_map(|f| f.rtt_inflation()).collect();
        let infl = if infl.is_empty() {
            "-".to_string()
        } else {
            format!("{:.2}x", infl.iter().sum::<f64>() / infl.len() as f64)
        };
        let verdicts: Vec<String> = g.flows.iter().take(2).map(|f| app.verdicts.verdict(f, now).label()).collect();
        let lines = vec![
            Line::from(vec![Span::raw("throughput 1s  "), Span::styled(crate::units::fmt_rate_compact(thr), g.style)]),
            Line::raw(format!("retransmits    {retr:.1} segs/s")),
            Line::raw(format!("RTT inflation  {infl}  (srtt / min RTT)")),
            Line::raw(format!("verdict        {}", verdicts.join(", "))),
        ];
        let block = Block::bordered().title(Span::styled(format!(" {} ", g.label), g.style)).border_style(theme.dim());
        f.render_widget(Paragraph::new(lines).block(block), *col);
    }

    let mbps = |p: &crate::observe::flow::Point| p.throughput_bps.map(|b| b as f64 / 1e6);
    let thr_series: Vec<Series> = groups
        .iter()
        .map(|g| Series::line(g.label.clone(), g.style, bucketed(&g.flows, since, now, buckets, &mbps, true)))
        .collect();
    // A start-up burst would flatten both lines: scale to the bulk and clip it.
    let top = chart::quantile_top(thr_series.iter().flat_map(|s| s.points.iter().map(|p| p.1)), 0.95);
    chart::draw(f, thr, " throughput (Mbit/s) ", &thr_series, window_s, top, theme);
    let srtt_us = |p: &crate::observe::flow::Point| p.srtt_us.map(f64::from);
    let mut rtt_series: Vec<Series> = groups
        .iter()
        .map(|g| Series::line(g.label.clone(), g.style, bucketed(&g.flows, since, now, buckets, &srtt_us, false)))
        .collect();
    let (unit, per) =
        chart::time_unit(rtt_series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max));
    for s in &mut rtt_series {
        s.points.iter_mut().for_each(|p| p.1 /= per);
    }
    chart::draw(f, rtt, &format!(" smoothed RTT ({unit}) "), &rtt_series, window_s, None, theme);
}

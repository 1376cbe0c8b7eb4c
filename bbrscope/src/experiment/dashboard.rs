//! A running experiment as a panel of the dashboard ([`crate::tui::Panel`]): where it stands
//! (progress, guardrail, split), the arms side by side on the flows so far (completion time by
//! response size, retransmit rate, srtt, each with B's difference and its interval), and one line
//! per client group with its verdict. Everything comes from the experiment's own state
//! ([`super::progress`]); nothing is computed here. The only file of the experiment that draws;
//! the dashboard knows the experiment only as a [`crate::tui::Panel`].

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Block, Cell, Paragraph, Row, Table},
};

use super::{
    analysis::{Metric, MetricKind, Verdict},
    conclusion, format,
    progress::{LiveExperiment, clock},
    report::Report,
};
use crate::tui::{Panel, theme::Theme};

/// Rows above the tables: the experiment, the guardrail, the analysis.
const STATUS_ROWS: u16 = 3;

impl Panel for LiveExperiment {
    fn draw(&self, f: &mut Frame, area: Rect, scroll: usize, theme: &Theme) {
        draw(f, area, self, scroll, theme);
    }
}

fn draw(f: &mut Frame, area: Rect, x: &LiveExperiment, scroll: usize, theme: &Theme) {
    let rep = x.latest.as_ref().map(|a| &a.report);
    let arm_rows = rep.map_or(0, |r| arm_metrics(r).len() as u16);
    // The arms' table gets what it needs, leaving the groups at least four rows.
    let arms_height = (arm_rows + 5).min(area.height.saturating_sub(STATUS_ROWS + 4)).max(3);
    let [status, arms, groups] =
        Layout::vertical([Constraint::Length(STATUS_ROWS), Constraint::Length(arms_height), Constraint::Min(0)])
            .areas(area);
    draw_status(f, status, x, theme);
    match rep {
        Some(r) => {
            draw_arms(f, arms, x, r, theme);
            draw_groups(f, groups, scroll, r, theme);
        }
        None => f.render_widget(
            Paragraph::new(format!(
                "No finished flows analysed yet: the report appears once flows in scope ({}) have closed.",
                x.scope
            ))
            .style(theme.dim())
            .block(Block::bordered().title(" arms ").border_style(theme.dim())),
            arms,
        ),
    }
}

fn arm_label(x: &LiveExperiment, arm: usize) -> String {
    format!("{} ({})", x.arms[arm], ["A", "B"][arm])
}

fn draw_status(f: &mut Frame, area: Rect, x: &LiveExperiment, theme: &Theme) {
    let mut first = vec![
        Span::styled(arm_label(x, 0), theme.cc(&x.arms[0]).add_modifier(ratatui::style::Modifier::BOLD)),
        Span::raw(" vs "),
        Span::styled(arm_label(x, 1), theme.cc(&x.arms[1]).add_modifier(ratatui::style::Modifier::BOLD)),
        Span::raw(format!(" · {} · {} · {}", x.assignment(), x.scope, x.progress())),
    ];
    if x.sample_pct < 100 {
        first.push(Span::raw(format!(" · {}% sampled", x.sample_pct)));
    }
    let stopping = x.guard.as_ref().is_some_and(|g| g.stop);
    let guard_style = if stopping {
        theme.bad()
    } else if x.guardrail {
        theme.good()
    } else {
        theme.warn()
    };
    let guard = Line::from(vec![Span::styled("guardrail ", theme.title()), Span::styled(x.guard_words(), guard_style)]);
    let mut third = vec![
        Span::styled("finished ", theme.title()),
        Span::raw(format!(
            "{} A / {} B · open {} / {}",
            format::fmt_count(x.finished[0]),
            format::fmt_count(x.finished[1]),
            x.open[0],
            x.open[1]
        )),
    ];
    if let Some(s) = &x.latest {
        third.push(Span::styled(
            format!(" · analysis: {} flows at {}, {} ms", format::fmt_count(s.flows), clock(s.at), s.took.as_millis()),
            theme.dim(),
        ));
    }
    if let Some(a) = &x.latest
        && a.report.sample_ratio.mismatch
    {
        third.push(Span::styled(" · SPLIT MISMATCH: flows lost or added unevenly", theme.bad()));
    }
    f.render_widget(Paragraph::new(vec![Line::from(first), guard, Line::from(third)]), area);
}

/// The all-flows group's metrics shown per arm: completion p50/p95 per size bucket with flows,
/// the retransmit rate, srtt p50/p95.
fn arm_metrics(r: &Report) -> Vec<&Metric> {
    let Some(all) = r.groups.first() else { return Vec::new() };
    all.result
        .metrics
        .iter()
        .filter(|m| match m.kind {
            MetricKind::Completion => m.quantile != Some(0.99) && (m.n[0] > 0 || m.n[1] > 0),
            MetricKind::RetransRate | MetricKind::Srtt => true,
            MetricKind::Goodput | MetricKind::RttInflation => false,
        })
        .collect()
}

/// B's difference, its interval and a mark: `*` the (fixed-level, secondary) interval excludes
/// zero, as in the text report; "needs N per arm" while a cell lacks flows.
fn diff_cells(m: &Metric, theme: &Theme) -> [Cell<'static>; 2] {
    match &m.diff {
        Some(d) => {
            let mark = if d.significant { "*" } else { "" };
            let style = match m.better_arm() {
                Some(1) => theme.good(),
                Some(_) => theme.bad(),
                None => Style::default(),
            };
            [Cell::from(format!("{}{mark}", format::fmt_diff(d))).style(style), Cell::from(format::fmt_interval(d))]
        }
        None => [
            Cell::from(""),
            Cell::from(m.needs.map_or("too few flows".into(), |n| format!("needs {}/arm", format::fmt_count(n))))
                .style(theme.dim()),
        ],
    }
}

fn draw_arms(f: &mut Frame, area: Rect, x: &LiveExperiment, r: &Report, theme: &Theme) {
    let header = Row::new(vec![
        Cell::from("all flows"),
        Cell::from(arm_label(x, 0)).style(theme.cc(&x.arms[0])),
        Cell::from(arm_label(x, 1)).style(theme.cc(&x.arms[1])),
        Cell::from("B vs A"),
        Cell::from(format!("{:.0}% interval", r.level * 100.0)),
    ])
    .style(theme.title());
    let mut rows = vec![
        Row::new(vec![
            Cell::from("flows"),
            Cell::from(format::fmt_count(r.arms[0].flows)),
            Cell::from(format::fmt_count(r.arms[1].flows)),
        ]),
        Row::new(vec![
            Cell::from("bytes"),
            Cell::from(format::fmt_bytes(r.arms[0].bytes)),
            Cell::from(format::fmt_bytes(r.arms[1].bytes)),
        ]),
    ];
    for m in arm_metrics(r) {
        let value = |v: Option<f64>| v.map_or("-".into(), |v| format::fmt_value(v, m.unit));
        let [diff, ci] = diff_cells(m, theme);
        rows.push(Row::new(vec![
            Cell::from(m.label.clone()),
            Cell::from(value(m.a)),
            Cell::from(value(m.b)),
            diff,
            ci,
        ]));
    }
    let widths = [
        Constraint::Length(26),
        Constraint::Length(11),
        Constraint::Length(11),
        Constraint::Length(8),
        Constraint::Min(10),
    ];
    let title = format!(" arms: {} flows analysed ", format::fmt_count(r.arms[0].flows + r.arms[1].flows));
    draw_table(f, area, Table::new(rows, widths).header(header), title, theme);
}

fn draw_groups(f: &mut Frame, area: Rect, scroll: usize, r: &Report, theme: &Theme) {
    let fit = area.height.saturating_sub(3) as usize;
    let first = scroll.min(r.groups.len().saturating_sub(fit.max(1)));
    let rows: Vec<Row> = r
        .groups
        .iter()
        .skip(first)
        .take(fit)
        .map(|g| {
            let res = &g.result;
            let style = match res.verdict {
                Verdict::ABetter | Verdict::BBetter | Verdict::ArmsOverridden => theme.warn(),
                Verdict::NoDifference | Verdict::Inconclusive => Style::default(),
                Verdict::TooFewFlows => theme.dim(),
            };
            Row::new(vec![
                Cell::from(res.label.clone()),
                Cell::from(format!(
                    "{}/{}",
                    format::fmt_count(res.arms[0].flows),
                    format::fmt_count(res.arms[1].flows)
                )),
                Cell::from(conclusion::verdict_words([&r.arms[0].arm, &r.arms[1].arm], res)).style(style),
            ])
        })
        .collect();
    let header = Row::new(vec!["group", "flows A/B", "verdict: B's completion time vs A's (always-valid interval)"])
        .style(theme.title());
    let widths = [Constraint::Length(18), Constraint::Length(11), Constraint::Min(20)];
    let more = r.groups.len().saturating_sub(first + fit);
    let mut title = format!(" groups ({}", r.groups.len());
    if r.sparse_prefixes.groups > 0 {
        title.push_str(&format!(
            ", {} prefixes with too few flows not shown",
            format::fmt_count(r.sparse_prefixes.groups)
        ));
    }
    title.push_str(if more > 0 || first > 0 { "; ↑↓ scroll) " } else { ") " });
    draw_table(f, area, Table::new(rows, widths).header(header), title, theme);
}

/// A table in a bordered block titled `title`, as both of this view's tables are drawn.
fn draw_table(f: &mut Frame, area: Rect, table: Table, title: String, theme: &Theme) {
    f.render_widget(
        table
            .column_spacing(1)
            .block(Block::bordered().title(Span::styled(title, theme.title())).border_style(theme.dim())),
        area,
    );
}

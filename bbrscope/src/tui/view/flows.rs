//! The flow list: one row per flow, closed flows dimmed while they linger.

use ratatui::{
    Frame,
    layout::{Constraint, Rect},
    text::{Line, Span},
    widgets::{Block, Cell, Row, Table, TableState},
};

use crate::{
    observe::diagnose::{self, Verdict},
    observe::flow::Flow,
    tui::{app::App, fmt, theme::Theme},
};

/// `flows`: `app.visible()`, computed once per frame by the caller.
pub(super) fn draw(f: &mut Frame, area: Rect, app: &App, flows: &[&Flow], theme: &Theme) {
    let now = app.view_now();
    let wide = area.width >= 120;
    // Below this the full columns (87 columns inside the border) would be cut mid-number:
    // rates are shortened (`48.3M` under `BIT/S`) and RTT loses its min (the detail shows it).
    let narrow = area.width < 89;
    // Below this even those do not fit: the local port and the retransmission rate go (the
    // detail below shows both).
    let tiny = area.width < 75;
    let keep = |i: usize| !tiny || (i != 2 && i != 7);
    // Only the rows that fit are built (and diagnosed): with thousands of flows the rest would
    // cost a frame's worth of CPU for nothing.
    let fit = area.height.saturating_sub(3).max(1) as usize;
    let selected = app.selected.and_then(|id| flows.iter().position(|f| f.id == id));
    let offset = selected.map_or(0, |s| (s + 1).saturating_sub(fit));
    let shown = &flows[offset.min(flows.len())..(offset + fit).min(flows.len())];
    // In an experiment the arm goes beside the algorithm: in an A/A run it is all that tells
    // the arms apart.
    let experiment = app.panel.is_some();
    let mut header = vec![
        "",
        "PEER",
        "LOCAL",
        if experiment { "CC ARM" } else { "CC" },
        // Goodput over the last second (the help says so when the narrow header cannot).
        if narrow { "BIT/S" } else { "THRPUT 1s" },
        "CWND",
        if narrow { "RTT" } else { "RTT/MIN" },
        if narrow { "RTX/s" } else { "RETR/s" },
        "VERDICT",
    ];
    if wide {
        header.splice(7..7, ["PACING", "STATE"]);
    }
    let rows: Vec<Row> = shown
        .iter()
        .map(|fl| {
            let m = fl.metrics.as_ref();
            let verdict = app.verdicts.verdict(fl, now);
            let verdict_style = match verdict {
                Verdict::LossLimited { .. } | Verdict::HeavyLoss { .. } | Verdict::Stalled => theme.bad(),
                Verdict::Bufferbloat { .. } | Verdict::ReceiverWindow { .. } | Verdict::BbrUnderLoss { .. } => {
                    theme.warn()
                }
                Verdict::Healthy { .. } => theme.good(),
                _ => theme.dim(),
            };
            let mark = if app.marked.contains(&fl.id) { "◆" } else { " " };
            let srtt = fmt::opt_ms(m.and_then(|m| m.srtt_us));
            let rtt = if narrow { srtt } else { format!("{srtt}/{}", fmt::opt_ms(m.and_then(|m| m.min_rtt_us))) };
            let thrput = if narrow { fmt::opt_bps_short(fl.rate_bps) } else { fmt::opt_bps(fl.rate_bps) };
            let retr =
                fl.retrans_per_s(now.saturating_sub(diagnose::WINDOW_NS)).map_or("-".into(), |r| format!("{r:.1}"));
            let mut cells = vec![
                Cell::from(mark),
                Cell::from(fl.dst.to_string()),
                Cell::from(format!(":{}", fl.src.port())),
                Cell::from(Span::styled(cc_cell(fl, experiment), theme.cc(&fl.cc))),
                Cell::from(thrput),
                Cell::from(m.and_then(|m| m.cwnd).map_or("-".into(), |c| c.to_string())),
                Cell::from(rtt),
                Cell::from(retr),
                Cell::from(Span::styled(verdict.label(), verdict_style)),
            ];
            if wide {
                cells.splice(
                    7..7,
                    [Cell::from(fmt::opt_bps(m.and_then(|m| m.pacing_rate_bps))), Cell::from(fl.ca_state.as_str())],
                );
            }
            let row = Row::new(cells.into_iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, c)| c));
            if fl.closed_ns.is_some() { row.style(theme.dim()) } else { row }
        })
        .collect();
    let mut widths = if narrow {
        // 1 + 15 + 6 + 5 + 5 + 5 + 6 + 5 + 17 and 8 spaces: 73 of the 78 inside 80 columns,
        // the rest to the peer (a full IPv4 address and port) and the verdict; 60 when tiny.
        vec![
            Constraint::Length(1),
            Constraint::Min(15),
            Constraint::Length(6),
            Constraint::Length(if experiment { 8 } else { 5 }),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Min(17),
        ]
    } else {
        vec![
            Constraint::Length(1),
            Constraint::Min(16),
            Constraint::Length(6),
            Constraint::Length(if experiment { 8 } else { 6 }),
            Constraint::Length(10),
            Constraint::Length(6),
            Constraint::Length(15),
            Constraint::Length(6),
            Constraint::Min(13),
        ]
    };
    if wide {
        widths.splice(7..7, [Constraint::Length(10), Constraint::Length(9)]);
    }
    let header = header.into_iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, h)| h);
    let widths = widths.into_iter().enumerate().filter(|(i, _)| keep(*i)).map(|(_, w)| w);
    let mut title =
        vec![Span::styled(" flows ", theme.title()), Span::styled(format!("({}) ", flows.len()), theme.dim())];
    // Columns left out are named, with the width that shows them: nothing vanishes unsaid.
    let hidden: Vec<&str> = [(tiny, "LOCAL RETR/s"), (narrow, "RTT MIN"), (!wide, "PACING STATE")]
        .into_iter()
        .filter_map(|(cut, names)| cut.then_some(names))
        .collect();
    if !hidden.is_empty() {
        title.push(Span::styled(format!("· {} at ≥120 columns ", hidden.join(" ")), theme.dim()));
    }
    let title = Line::from(title);
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(theme.title()))
        .block(Block::bordered().title(title).border_style(theme.dim()))
        .row_highlight_style(theme.selected())
        .column_spacing(1);
    let mut state = TableState::default().with_selected(selected.map(|s| s - offset));
    f.render_stateful_widget(table, area, &mut state);
    if flows.is_empty() {
        let hint = if app.filter.is_empty() {
            "  waiting for flows that send data…"
        } else {
            "  no flow matches the filter"
        };
        let inner = Rect { x: area.x + 1, y: area.y + 2, width: area.width.saturating_sub(2), height: 1 };
        if area.height > 3 {
            f.render_widget(Line::styled(hint, theme.dim()), inner);
        }
    }
}

/// The flow's algorithm, and in an experiment its arm ("bbr B"; "-" for a flow outside it).
fn cc_cell(fl: &Flow, experiment: bool) -> String {
    if !experiment {
        return fl.cc.to_string();
    }
    match fl.life.owner.as_ref().and_then(|o| o.arm) {
        Some(arm @ 1..=2) => format!("{} {}", fl.cc, ["A", "B"][usize::from(arm - 1)]),
        _ => format!("{} -", fl.cc),
    }
}

#[cfg(test)]
mod tests {
    use super::cc_cell;
    use crate::{observe::event::Owner, observe::flow::tests::flow_with};

    #[test]
    fn an_experiments_flows_show_their_arm() {
        let mut fl = flow_with("bbr", vec![]);
        assert_eq!(cc_cell(&fl, false), "bbr");
        assert_eq!(cc_cell(&fl, true), "bbr -", "a flow outside the experiment's scope");
        fl.life.owner = Some(Owner { arm: Some(2), ..Owner::default() });
        assert_eq!(cc_cell(&fl, true), "bbr B");
        fl.life.owner = Some(Owner { arm: Some(1), ..Owner::default() });
        assert_eq!(cc_cell(&fl, true), "bbr A");
    }
}

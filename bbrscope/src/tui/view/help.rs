//! The help overlay: every key, and how to read the charts.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Clear, Paragraph, Wrap},
};

use crate::tui::{app::KEYS, theme::Theme};

pub(super) fn draw(f: &mut Frame, area: Rect, theme: &Theme) {
    let width = area.width.saturating_sub(4).min(84);
    let height = area.height.saturating_sub(2).min(KEYS.len() as u16 + 11);
    let [_, mid, _] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Length(width), Constraint::Fill(1)]).areas(area);
    let [_, popup, _] =
        Layout::vertical([Constraint::Fill(1), Constraint::Length(height), Constraint::Fill(1)]).areas(mid);
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(vec![Span::styled(format!("{k:>11}  "), theme.title()), Span::raw(*what)]))
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::styled(
        "cwnd chart: red dots are retransmits, magenta dots congestion-state changes. CUBIC's \
         sawtooth shows as teeth; BBR holds cwnd near 2x the path's bandwidth-delay product.",
        theme.dim(),
    ));
    lines.push(Line::styled(
        "THRPUT 1s (BIT/S when narrow): goodput, the bytes acked over the last second. A line \
         ending in … left out parts that a wider terminal shows.",
        theme.dim(),
    ));
    lines.push(Line::styled(
        "Units: cwnd in packets, rates in bit/s as tc prints them (Mbit/s), RTT in ms (µs below 1 ms). \
         Any key closes this help.",
        theme.dim(),
    ));
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(Span::styled(" keys ", theme.title()))),
        popup,
    );
}

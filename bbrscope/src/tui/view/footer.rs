//! bbrscope's own cost, playback position, and the keys that matter most.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
};

use crate::tui::{app::App, fmt, theme::Theme};

pub(super) fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut spans = Vec::new();
    if let Some(p) = &app.playback {
        let state = if p.finished {
            "end"
        } else if p.waiting {
            "waiting for input"
        } else if p.paused {
            "paused"
        } else {
            "playing"
        };
        spans.push(Span::styled(
            format!(" replay {state} x{} {:.0}/{:.0}s ", p.speed, p.position_s, p.length_s),
            theme.title(),
        ));
        if p.skipped > 0 {
            spans.push(Span::styled(
                format!("· {} unreadable line{} skipped ", p.skipped, if p.skipped == 1 { "" } else { "s" }),
                theme.warn(),
            ));
        }
    }
    if let Some(s) = &app.stats {
        if !s.observer.is_empty() {
            spans.push(Span::styled(format!(" {} ", s.observer), theme.dim()));
        }
        spans.push(Span::raw(format!(
            " events {}/s · records {}/s · cpu {:.1}% ",
            fmt::count(s.events_per_s),
            fmt::count(s.records_per_s),
            s.cpu_cores * 100.0
        )));
        if let Some(ns) = s.ns_per_event {
            spans.push(Span::raw(format!("· {ns:.0} ns/event ")));
        }
        if s.evicted_total > 0 {
            spans.push(Span::styled(
                format!("· flow table full, {} evicted (raise --max-flows) ", s.evicted_total),
                theme.bad(),
            ));
        }
        if s.drops_total > 0 {
            spans.push(Span::styled(
                format!("· drops {} (raise --ring-size or --interval) ", s.drops_total),
                theme.bad(),
            ));
        } else {
            spans.push(Span::styled("· no drops ", theme.good()));
        }
    }
    // The keys stay visible however narrow the terminal; of the rest, the parts that fit, whole.
    let keys = match app.panel {
        Some(name) => format!(" ? help  q end the {name} "),
        None => " ? help  q quit ".to_string(),
    };
    let [left, right] = Layout::horizontal([Constraint::Min(0), Constraint::Length(keys.len() as u16)]).areas(area);
    let mut spans = fmt::fit(spans, left.width.into());
    // A notice (what this kernel lacks) is long: what fits of it, after the rest.
    if let Some(n) = app.notices.first() {
        spans.push(Span::styled(format!("· {n} "), theme.warn()));
    }
    f.render_widget(Line::from(spans), left);
    f.render_widget(Line::styled(keys, theme.dim()), right);
}

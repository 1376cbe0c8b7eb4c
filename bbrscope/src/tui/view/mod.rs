//! Drawing the dashboard: header, flow list, selected-flow detail or the compare view, footer,
//! and the help overlay. Layout adapts from 80x24 up.

mod chart;
mod compare;
mod detail;
mod flows;
mod footer;
mod help;

use ratatui::{
    Frame,
    layout::{Constraint, Layout},
    text::{Line, Span},
};

pub(crate) use self::detail::CHARTS;
use super::{
    Panel,
    app::{App, View, WINDOWS},
    theme::Theme,
};
use crate::observe::flow::FlowTable;

/// The detail pane needs this many rows to show its charts.
const DETAIL_MIN_ROWS: u16 = 12;

/// The dashboard showing `table`; `panel` is drawn in [`View::Panel`] (the running experiment's
/// view).
pub fn draw(f: &mut Frame, app: &App, table: &FlowTable, panel: Option<&dyn Panel>, theme: &Theme) {
    let [header, body, footer] =
        Layout::vertical([Constraint::Length(1), Constraint::Min(0), Constraint::Length(1)]).areas(f.area());
    draw_header(f, header, app, table, theme);
    match app.view {
        View::Flows => {
            let flows = app.visible(table);
            let rows = (flows.len() as u16).saturating_add(3);
            let max_list = body.height.saturating_sub(DETAIL_MIN_ROWS).max(body.height * 2 / 5);
            let [list, detail] =
                Layout::vertical([Constraint::Length(rows.clamp(4, max_list.max(4))), Constraint::Min(0)]).areas(body);
            flows::draw(f, list, app, &flows, theme);
            // Only a listed flow (see App::keep_selection_visible; this holds between ticks too).
            if app.selected.is_some_and(|id| flows.iter().any(|fl| fl.id == id)) {
                detail::draw(f, detail, app, table, theme);
            }
        }
        View::Compare => compare::draw(f, body, app, table, theme),
        View::Panel => {
            if let Some(p) = panel {
                p.draw(f, body, app.group_scroll, theme);
            }
        }
    }
    footer::draw(f, footer, app, theme);
    if app.help {
        help::draw(f, f.area(), theme);
    }
}

fn draw_header(f: &mut Frame, area: ratatui::layout::Rect, app: &App, table: &FlowTable, theme: &Theme) {
    let live = table.iter().filter(|fl| fl.closed_ns.is_none()).count();
    let mut spans = vec![
        Span::styled(" bbrscope ", theme.title()),
        Span::raw(format!(
            "· {} · {live} flows · window {}s · sort {}{}",
            app.source,
            WINDOWS[app.window],
            app.sort.name(),
            if app.sort_ascending { " ↑" } else { " ↓" }
        )),
    ];
    if app.editing_filter || !app.filter.is_empty() {
        spans.push(Span::styled(
            format!(" · filter: {}{}", app.filter, if app.editing_filter { "▏" } else { "" }),
            theme.warn(),
        ));
    }
    if app.frozen_at.is_some() {
        spans.push(Span::styled(" · PAUSED", theme.warn()));
    }
    if app.view == View::Compare {
        spans.push(Span::styled(" · compare", theme.title()));
    }
    if let (View::Panel, Some(name)) = (app.view, app.panel) {
        spans.push(Span::styled(format!(" · {name}"), theme.title()));
    }
    f.render_widget(Line::from(spans), area);
}

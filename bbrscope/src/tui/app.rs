//! The dashboard's state and what keys do to it. No terminal here: rendering reads an `App`,
//! tests drive one with events and keys.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::{
    observe::flow::{Flow, FlowTable},
    observe::stats::StatsReport,
};

/// Points kept per flow: 20 minutes at the default 100 ms interval.
pub(crate) const HISTORY_POINTS: usize = 12_000;
/// Points kept over all flows (about 25 MB): a few flows keep their full history; 10,000 flows
/// keep about 20 points each.
pub(crate) const HISTORY_BUDGET: usize = 200_000;
/// Chart windows `+`/`-` step through, in seconds (a silent flow is kept for the longest:
/// [`crate::observe::pipeline::Retention`]'s dashboard policy).
pub(crate) const WINDOWS: [u64; 6] = [10, 30, 60, 120, 300, 600];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Flows,
    Compare,
    /// The command's own view ([`crate::tui::Panel`]): a running experiment's arms and groups
    /// (`bbrscope experiment` only).
    Panel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Throughput,
    Cwnd,
    Rtt,
    Retransmits,
    Age,
    Algorithm,
}

impl SortKey {
    const ALL: [SortKey; 6] =
        [SortKey::Throughput, SortKey::Cwnd, SortKey::Rtt, SortKey::Retransmits, SortKey::Age, SortKey::Algorithm];

    pub fn name(&self) -> &'static str {
        match self {
            SortKey::Throughput => "throughput",
            SortKey::Cwnd => "cwnd",
            SortKey::Rtt => "rtt",
            SortKey::Retransmits => "retransmits",
            SortKey::Age => "age",
            SortKey::Algorithm => "algorithm",
        }
    }

    fn next(self) -> Self {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }
}

/// Playback controls when the events come from a recording.
#[derive(Clone, Debug, PartialEq)]
pub struct Playback {
    pub speed: f64,
    pub paused: bool,
    pub finished: bool,
    /// Position and length of the recording, in seconds.
    pub position_s: f64,
    pub(crate) length_s: f64,
    /// Played up to what has arrived; the input (a pipe) is still open.
    pub waiting: bool,
    /// Unreadable lines skipped so far.
    pub(crate) skipped: u64,
}

impl Playback {
    pub fn new(speed: f64, paused: bool) -> Self {
        Playback { speed, paused, finished: false, position_s: 0.0, length_s: 0.0, waiting: false, skipped: 0 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    Quit,
}

/// What the dashboard shows and how: selection, sort, filter, view, zoom. The flows themselves
/// are in a [`FlowTable`] that whoever feeds the dashboard owns and prunes (the observer's loop
/// live, the recording's [`crate::tui::Feed`] in a replay); every method that needs them is
/// handed it.
pub struct App {
    /// The time the display shows as "now" (CLOCK_MONOTONIC ns live; recording time in replay).
    pub(crate) now_ns: u64,
    /// Live view frozen at this time (`p`); events keep being recorded.
    pub(crate) frozen_at: Option<u64>,
    pub(crate) stats: Option<StatsReport>,
    pub(crate) selected: Option<u64>,
    /// Up to two flows to compare directly.
    pub(crate) marked: Vec<u64>,
    pub sort: SortKey,
    pub(crate) sort_ascending: bool,
    pub(crate) filter: String,
    pub(crate) editing_filter: bool,
    pub view: View,
    pub(crate) window: usize,
    /// The first of the selected flow's charts shown when not all fit (`t` steps through them).
    pub(crate) chart_tab: usize,
    pub help: bool,
    /// Where the events come from ("live" or a file name) and what the kernel lacks.
    pub(crate) source: String,
    pub(crate) notices: Vec<String>,
    pub playback: Option<Playback>,
    /// The name of the command's own view, drawn by its [`crate::tui::Panel`] (`experiment`), if
    /// it has one. The one panel is a running experiment's, whose flows carry their arm: the
    /// flow list shows it.
    pub(crate) panel: Option<&'static str>,
    /// The first row the panel lists (↑/↓ there scroll; the experiment's groups).
    pub(crate) group_scroll: usize,
    /// The verdicts on screen, held steady (see [`super::steady`]).
    pub(crate) verdicts: super::steady::Steady,
}

impl App {
    pub fn new(source: impl Into<String>, notices: Vec<String>, playback: Option<Playback>) -> Self {
        App {
            now_ns: 0,
            frozen_at: None,
            stats: None,
            selected: None,
            marked: Vec::new(),
            sort: SortKey::Throughput,
            sort_ascending: false,
            filter: String::new(),
            editing_filter: false,
            view: View::Flows,
            window: 2,
            chart_tab: 0,
            help: false,
            source: source.into(),
            notices,
            playback,
            panel: None,
            group_scroll: 0,
            verdicts: super::steady::Steady::default(),
        }
    }

    /// A dashboard with a panel of its command's, `name`d, which it opens on.
    pub fn with_panel(mut self, name: &'static str) -> Self {
        self.panel = Some(name);
        self.view = View::Panel;
        self
    }

    /// The view Tab goes to next: flows, compare, and the experiment's when there is one.
    fn next_view(&self) -> View {
        match self.view {
            View::Flows => View::Compare,
            View::Compare if self.panel.is_some() => View::Panel,
            View::Compare | View::Panel => View::Flows,
        }
    }

    /// The flow table a dashboard draws from: each flow's history for the longest chart window,
    /// within one budget over all flows.
    pub fn table() -> FlowTable {
        FlowTable::new(HISTORY_POINTS).with_budget(HISTORY_BUDGET)
    }

    /// The time charts end at.
    pub(crate) fn view_now(&self) -> u64 {
        self.frozen_at.unwrap_or(self.now_ns)
    }

    pub fn window_ns(&self) -> u64 {
        WINDOWS[self.window] * 1_000_000_000
    }

    /// Advances "now" to `now_ns`; what `table` no longer holds is neither selected nor marked.
    pub(crate) fn tick(&mut self, now_ns: u64, table: &FlowTable) {
        self.now_ns = now_ns;
        self.keep_selection_visible(table);
        self.marked.retain(|id| table.get(*id).is_some());
    }

    /// The selection is always a listed flow: after a filter hides it (or it is forgotten) the
    /// first listed flow is selected, or none, so the detail pane never shows a flow the list
    /// does not.
    fn keep_selection_visible(&mut self, table: &FlowTable) {
        let visible = self.visible(table);
        if self.selected.is_none_or(|id| !visible.iter().any(|f| f.id == id)) {
            self.selected = visible.first().map(|f| f.id);
        }
    }

    /// Flows of `table` shown in the list: filtered, sorted, closed ones last.
    pub fn visible<'t>(&self, table: &'t FlowTable) -> Vec<&'t Flow> {
        let needle = self.filter.to_lowercase();
        let mut flows: Vec<&Flow> = table
            .iter()
            .filter(|f| {
                needle.is_empty()
                    || f.src.to_string().contains(&needle)
                    || f.dst.to_string().contains(&needle)
                    || f.cc.to_lowercase().contains(&needle)
            })
            .collect();
        let key = |f: &Flow| -> i128 {
            let m = f.metrics.as_ref();
            match self.sort {
                SortKey::Throughput => i128::from(f.rate_bps.unwrap_or(0)),
                SortKey::Cwnd => i128::from(m.and_then(|m| m.cwnd).unwrap_or(0)),
                SortKey::Rtt => i128::from(m.and_then(|m| m.srtt_us).unwrap_or(0)),
                SortKey::Retransmits => i128::from(f.retrans_segs),
                SortKey::Age => -i128::from(f.first_ns),
                SortKey::Algorithm => 0,
            }
        };
        flows.sort_by(|a, b| {
            let ord = if self.sort == SortKey::Algorithm { a.cc.cmp(&b.cc) } else { key(a).cmp(&key(b)) };
            let ord = if self.sort_ascending { ord } else { ord.reverse() };
            // Closed flows sink to the bottom; ties keep a stable order by id.
            a.closed_ns.is_some().cmp(&b.closed_ns.is_some()).then(ord).then(a.id.cmp(&b.id))
        });
        flows
    }

    pub fn selected_flow<'t>(&self, table: &'t FlowTable) -> Option<&'t Flow> {
        self.selected.and_then(|id| table.get(id))
    }

    fn move_selection(&mut self, delta: isize, table: &FlowTable) {
        let ids: Vec<u64> = self.visible(table).iter().map(|f| f.id).collect();
        if ids.is_empty() {
            self.selected = None;
            return;
        }
        let cur = self.selected.and_then(|id| ids.iter().position(|&i| i == id)).unwrap_or(0) as isize;
        let next = (cur + delta).clamp(0, ids.len() as isize - 1) as usize;
        self.selected = Some(ids[next]);
    }

    /// What `key` does, to a dashboard showing `table`.
    pub fn on_key(&mut self, key: KeyEvent, table: &FlowTable) -> Action {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if self.editing_filter {
            match key.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.filter.clear();
                    self.editing_filter = false;
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.keep_selection_visible(table);
            return Action::Continue;
        }
        if self.help {
            // Any key closes help; q still quits.
            self.help = false;
            return if key.code == KeyCode::Char('q') { Action::Quit } else { Action::Continue };
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Esc if !self.filter.is_empty() => {
                self.filter.clear();
                self.keep_selection_visible(table);
            }
            KeyCode::Esc if self.view == View::Compare => self.view = View::Flows,
            KeyCode::Up | KeyCode::Char('k') if self.view == View::Panel => {
                self.group_scroll = self.group_scroll.saturating_sub(1);
            }
            KeyCode::Down | KeyCode::Char('j') if self.view == View::Panel => self.group_scroll += 1,
            KeyCode::Char('e') if self.panel.is_some() => self.view = View::Panel,
            KeyCode::Char('?' | 'h') | KeyCode::F(1) => self.help = true,
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1, table),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1, table),
            KeyCode::PageUp => self.move_selection(-10, table),
            KeyCode::PageDown => self.move_selection(10, table),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2, table),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2, table),
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('S') => self.sort_ascending = !self.sort_ascending,
            KeyCode::Char('/') => self.editing_filter = true,
            KeyCode::Char('c') => self.view = if self.view == View::Compare { View::Flows } else { View::Compare },
            KeyCode::Tab => self.view = self.next_view(),
            KeyCode::Char(' ' | 'm') => {
                if let Some(id) = self.selected {
                    if let Some(i) = self.marked.iter().position(|&m| m == id) {
                        self.marked.remove(i);
                    } else {
                        if self.marked.len() == 2 {
                            self.marked.remove(0);
                        }
                        self.marked.push(id);
                    }
                }
            }
            KeyCode::Char('t') => self.chart_tab = (self.chart_tab + 1) % crate::tui::view::CHARTS,
            KeyCode::Char('+' | '=') => self.window = self.window.saturating_sub(1),
            KeyCode::Char('-' | '_') => self.window = (self.window + 1).min(WINDOWS.len() - 1),
            KeyCode::Char('p') => match &mut self.playback {
                Some(p) => p.paused = !p.paused,
                None => self.frozen_at = if self.frozen_at.is_some() { None } else { Some(self.now_ns) },
            },
            KeyCode::Char(']') => {
                if let Some(p) = &mut self.playback {
                    p.speed = (p.speed * 2.0).min(64.0);
                }
            }
            KeyCode::Char('[') => {
                if let Some(p) = &mut self.playback {
                    p.speed = (p.speed / 2.0).max(0.125);
                }
            }
            _ => {}
        }
        Action::Continue
    }
}

/// Every key the dashboard knows, for the help overlay (kept next to `on_key`).
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("↑ ↓  j k", "select a flow (PgUp/PgDn, g/G: jump)"),
    ("s / S", "sort by the next column / reverse the order"),
    ("/", "filter by address, port or algorithm (Enter keeps, Esc clears)"),
    ("c", "compare view: CUBIC vs BBR, or the two marked flows"),
    ("e", "experiment view: per arm and per client group, with verdicts (↑ ↓ scroll the groups)"),
    ("Tab", "next view: flows, compare, experiment"),
    ("space  m", "mark / unmark the selected flow for comparison (two at most)"),
    ("+ -", "zoom the time axis (10 s … 10 min)"),
    ("t", "next chart, when the terminal is too short for all three"),
    ("p", "pause (live: freeze the charts; replay: pause playback)"),
    ("[ ]", "replay: half / double speed"),
    ("? h F1", "this help"),
    ("Esc", "clear the filter / back to the flow list"),
    ("q  Ctrl-C", "quit (in an experiment: end it, restore everything, print the report)"),
];

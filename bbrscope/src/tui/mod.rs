//! `bbrscope top` and `bbrscope replay`: the dashboard, fed by the kernel or by a recording.
//!
//! Live, the dashboard is a sink of the observer's loop ([`crate::observe::pipeline`]): the loop
//! keeps the flow table (with [`Retention::DASHBOARD`]) and the dashboard draws it on its frames.
//! A recording has no observer: [`Feed`] plays it into a table of its own on a virtual clock,
//! and [`replay`] draws that.

pub mod app;
mod fmt;
mod steady;
pub mod theme;
pub mod view;

use std::{
    collections::VecDeque,
    io::{self, BufRead, IsTerminal as _},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use ratatui::{
    DefaultTerminal, Frame,
    crossterm::event::{self, Event as TermEvent, KeyEventKind},
    layout::Rect,
};
use tokio::{sync::mpsc, time::Interval};

use self::{
    app::{Action, App, Playback},
    theme::Theme,
};
use crate::{
    error::usage,
    observe::{
        clock::Clock,
        event::Event,
        flow::{Change, FlowTable},
        pipeline::{self, Control, Retention, Settings, Side, Signals, Sink},
        replay::{Reader, Record, Skipped, Summary},
        session::Live,
        stats::StatsReport,
    },
};
pub(crate) use ratatui::crossterm::event::Event as Input;

/// A view of the command's own that the dashboard shows beside its flow views (Tab, `e`): a
/// running experiment's arms and groups. The dashboard knows it only as this, so the feature
/// that owns a panel uses the dashboard and never the other way round.
pub trait Panel {
    /// Draws into `area`, its rows scrolled by `scroll` (↑/↓ in the panel).
    fn draw(&self, f: &mut Frame, area: Rect, scroll: usize, theme: &Theme);
}

/// Redraws per second, whatever the event rate.
pub(crate) const FPS: u64 = 15;

/// The dashboard on the terminal: raw mode on the alternate screen, input read on its own thread
/// (crossterm's reader blocks). Restored on drop (normal exit, error, signal) and by ratatui's
/// panic hook on panic.
pub(crate) struct Dashboard {
    term: DefaultTerminal,
    theme: Theme,
    keys: mpsc::UnboundedReceiver<TermEvent>,
    stop_input: Arc<AtomicBool>,
}

impl Dashboard {
    pub(crate) fn new() -> Result<Self> {
        if !std::io::stdout().is_terminal() {
            usage!("the dashboard needs a terminal; for pipes and scripts use `bbrscope stream`");
        }
        let term = ratatui::try_init()?;
        let (tx, keys) = mpsc::unbounded_channel();
        let stop_input = Arc::new(AtomicBool::new(false));
        let stopped = stop_input.clone();
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                if event::poll(Duration::from_millis(100)).unwrap_or(false) {
                    let Ok(ev) = event::read() else { break };
                    if tx.send(ev).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Dashboard { term, theme: Theme::from_env(), keys, stop_input })
    }

    /// The next terminal input; pending forever once input has ended.
    pub(crate) async fn input(&mut self) -> TermEvent {
        match self.keys.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    /// Draws `app` showing `table`, and `panel` when its view is open.
    pub(crate) fn draw(&mut self, app: &App, table: &FlowTable, panel: Option<&dyn Panel>) -> Result<()> {
        let theme = &self.theme;
        self.term.draw(|f| view::draw(f, app, table, panel, theme))?;
        Ok(())
    }
}

/// Applies terminal input to the app showing `table` (anything but a key only redraws).
pub(crate) fn handle(app: &mut App, ev: TermEvent, table: &FlowTable) -> Action {
    match ev {
        TermEvent::Key(k) if k.kind != KeyEventKind::Release => app.on_key(k, table),
        _ => Action::Continue,
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop_input.store(true, Ordering::Relaxed);
        ratatui::restore();
    }
}

/// How many records a [`Feed`] holds ahead of playback; its reader waits while the queue is full,
/// so a recording of any length replays in bounded memory.
pub(crate) const FEED_AHEAD: usize = 50_000;

enum FeedMsg {
    Record(Record),
    /// The reader's skipped-lines count so far.
    Skipped(Skipped),
    /// The input ended: cleanly, or with the error that stopped the reader.
    End(Option<String>),
}

/// What a feed has seen of its input before playback starts.
#[derive(Debug, PartialEq)]
pub(crate) enum FirstRecord {
    /// At least one record is ready.
    Ready,
    /// Nothing yet, the input is still open (a pipe whose writer has not written).
    Waiting,
    /// The input ended with no record; the reader's error, if it stopped on one.
    Empty(Option<String>),
}

/// A recording played back against a virtual clock. Records come from memory or from a reader
/// thread ([`Feed::from_reader`]) that parses a file or a pipe while it plays: playback never
/// runs ahead of what has arrived, so `bbrscope stream | bbrscope replay -` shows flows as they
/// come.
pub struct Feed {
    /// Records not yet played, in time order.
    pending: VecDeque<Record>,
    source: Option<std::sync::mpsc::Receiver<FeedMsg>>,
    /// The input has ended (everything it held is in `pending` or played).
    ended: bool,
    /// The reader's error, if one ended the input early.
    pub(crate) error: Option<String>,
    pub skipped: Skipped,
    /// Time of the first record and the latest seen; `None` before the first arrives.
    span: Option<(u64, u64)>,
    pos_ns: u64,
}

impl Feed {
    /// A whole recording, already in memory.
    pub fn new(mut records: Vec<Record>) -> Self {
        records.sort_by_key(Record::ts_ns);
        let span = records.first().map(Record::ts_ns).zip(records.last().map(Record::ts_ns));
        Feed {
            pending: records.into(),
            source: None,
            ended: true,
            error: None,
            skipped: Skipped::default(),
            span,
            pos_ns: span.map_or(0, |s| s.0),
        }
    }

    /// Records parsed from `input` on a thread of their own, at most [`FEED_AHEAD`] of them
    /// waiting at a time.
    pub fn from_reader(input: impl BufRead + Send + 'static) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(FEED_AHEAD);
        std::thread::spawn(move || {
            let mut reader = Reader::new(input);
            let mut skipped = 0;
            let end = loop {
                let next = reader.next_record();
                if reader.skipped.lines != skipped {
                    skipped = reader.skipped.lines;
                    if tx.send(FeedMsg::Skipped(reader.skipped.clone())).is_err() {
                        return;
                    }
                }
                match next {
                    Ok(Some(r)) => {
                        if tx.send(FeedMsg::Record(r)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break None,
                    Err(e) => break Some(format!("{e:#}")),
                }
            };
            let _ = tx.send(FeedMsg::End(end));
        });
        Feed {
            pending: VecDeque::new(),
            source: Some(rx),
            ended: false,
            error: None,
            skipped: Skipped::default(),
            span: None,
            pos_ns: 0,
        }
    }

    fn take(&mut self, msg: FeedMsg) {
        match msg {
            FeedMsg::Record(r) => {
                let ts = r.ts_ns();
                self.span = Some(self.span.map_or((ts, ts), |(a, b)| (a.min(ts), b.max(ts))));
                if self.pos_ns == 0 {
                    self.pos_ns = ts;
                }
                // Mostly in order already: the insertion point is at or near the back.
                let at = self.pending.partition_point(|p| p.ts_ns() <= ts);
                self.pending.insert(at, r);
            }
            FeedMsg::Skipped(s) => self.skipped = s,
            FeedMsg::End(e) => {
                self.ended = true;
                self.error = e;
                self.source = None;
            }
        }
    }

    /// Takes what the reader has sent, up to [`FEED_AHEAD`] records waiting.
    fn pull(&mut self) {
        while self.pending.len() < FEED_AHEAD {
            let Some(rx) = &self.source else { return };
            match rx.try_recv() {
                Ok(msg) => self.take(msg),
                Err(std::sync::mpsc::TryRecvError::Empty) => return,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => self.take(FeedMsg::End(None)),
            }
        }
    }

    /// Waits up to `limit` for the first record or the end of the input, so that input which is
    /// not a recording is refused before the dashboard takes the screen.
    pub(crate) fn wait_first(&mut self, limit: Duration) -> FirstRecord {
        let deadline = Instant::now() + limit;
        loop {
            self.pull();
            if !self.pending.is_empty() {
                return FirstRecord::Ready;
            }
            if self.ended {
                return FirstRecord::Empty(self.error.clone());
            }
            let Some(rx) = &self.source else { return FirstRecord::Empty(None) };
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(msg) => self.take(msg),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return FirstRecord::Waiting,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => self.take(FeedMsg::End(None)),
            }
        }
    }

    /// Seconds from the first record to the latest one seen (the whole recording once the input
    /// has ended).
    pub(crate) fn length_s(&self) -> f64 {
        self.span.map_or(0.0, |(a, b)| (b - a) as f64 / 1e9)
    }

    /// Moves the virtual clock `real` * speed forward and plays everything now due into `table`,
    /// which is pruned at recording time as the live dashboard's is. While the input is open
    /// the clock stops at the latest record that has arrived.
    pub fn advance(&mut self, app: &mut App, table: &mut FlowTable, real: Duration) {
        let Some(p) = app.playback.clone() else { return };
        self.pull();
        let Some((start, latest)) = self.span else {
            if let Some(pb) = &mut app.playback {
                (pb.waiting, pb.finished) = (!self.ended, self.ended);
            }
            return;
        };
        if !p.paused {
            self.pos_ns += (real.as_secs_f64() * p.speed * 1e9) as u64;
        }
        self.pos_ns = self.pos_ns.min(latest);
        while let Some(r) = self.pending.front().filter(|r| r.ts_ns() <= self.pos_ns) {
            match r {
                Record::Event(ev) => {
                    table.apply(ev);
                }
                Record::Summary(s) => play_summary(table, s),
                Record::Stats(_, s) => app.stats = Some((**s).clone()),
            }
            self.pending.pop_front();
            self.pull();
        }
        let finished = self.ended && self.pending.is_empty();
        Retention::DASHBOARD.prune(table, self.pos_ns);
        app.tick(self.pos_ns, table);
        if let Some(pb) = &mut app.playback {
            pb.finished = finished;
            pb.waiting = !self.ended && self.pos_ns >= latest;
            pb.position_s = self.pos_ns.saturating_sub(start) as f64 / 1e9;
            pb.length_s = self.length_s();
            pb.skipped = self.skipped.lines;
        }
    }
}

/// A recorded `flow_summary`: it opens and closes its flow, unless the recording showed the flow
/// already (then its `flow_open` ... `flow_close` did).
pub(crate) fn play_summary(table: &mut FlowTable, s: &Summary) {
    if table.get(s.close.head.flow).is_none() {
        table.apply(&Event::Open(Box::new(s.open.clone())));
        table.apply(&Event::Sample(Box::new(s.close.clone())));
    }
}

/// What a dashboard waits for beside the flows: its terminal's input and its frame clock.
pub(crate) struct Screen {
    pub(crate) dash: Dashboard,
    frame: Interval,
}

impl Screen {
    /// The dashboard on the terminal, drawn [`FPS`] times a second.
    pub(crate) fn new() -> Result<Self> {
        Ok(Screen { dash: Dashboard::new()?, frame: tokio::time::interval(Duration::from_millis(1000 / FPS)) })
    }
}

pub(crate) enum Wake {
    Frame,
    Input(TermEvent),
}

impl Side for Screen {
    type Wake = Wake;

    async fn next(&mut self) -> Wake {
        tokio::select! {
            _ = self.frame.tick() => Wake::Frame,
            ev = self.dash.input() => Wake::Input(ev),
        }
    }
}

/// `bbrscope top`: the dashboard as the sink of the observer's loop. Events only change the
/// table; the frames draw it.
struct Top {
    app: App,
}

impl Sink for Top {
    type Side = Screen;

    fn event(&mut self, _ev: &Event, _change: Change, _table: &FlowTable) -> io::Result<()> {
        Ok(())
    }

    fn stats(&mut self, _now_ns: u64, stats: &StatsReport) -> io::Result<()> {
        self.app.stats = Some(stats.clone());
        Ok(())
    }

    fn woken(&mut self, wake: Wake, screen: &mut Screen, table: &FlowTable) -> Result<Control> {
        match wake {
            Wake::Frame => self.app.tick(Clock::monotonic_ns(), table),
            Wake::Input(ev) => {
                if handle(&mut self.app, ev, table) == Action::Quit {
                    return Ok(Control::Stop);
                }
            }
        }
        screen.dash.draw(&self.app, table, None)?;
        Ok(Control::Continue)
    }
}

/// The dashboard over live kernel events, until q, a signal or `duration`.
pub(crate) async fn top(opts: &crate::observe::kernel::loader::Options, duration: Option<Duration>) -> Result<()> {
    let mut signals = Signals::catch()?;
    let mut live = Live::start("bbrscope top", opts)?;
    let mut sink = Top { app: App::new("live", live.degraded().to_vec(), None) };
    let mut screen = Screen::new()?;
    let settings = Settings { duration, stats: Some(Duration::from_secs(1)), retention: Retention::DASHBOARD };
    // The dashboard writes nothing but the screen, whose errors are the loop's own.
    pipeline::run(&mut live, &mut signals, &mut App::table(), &mut sink, &mut screen, settings).await??;
    Ok(())
}

/// The dashboard over a recording until q or a signal; the feed is handed back for what it
/// skipped.
pub(crate) async fn replay(mut feed: Feed, name: &str, speed: f64, paused: bool) -> Result<Feed> {
    let mut signals = Signals::catch()?;
    let mut playback = Playback::new(speed, paused);
    playback.length_s = feed.length_s();
    let mut app = App::new(name, Vec::new(), Some(playback));
    let mut table = App::table();
    let mut screen = Screen::new()?;
    let mut last_frame = Instant::now();
    loop {
        tokio::select! {
            wake = screen.next() => match wake {
                Wake::Frame => {
                    feed.advance(&mut app, &mut table, last_frame.elapsed());
                    last_frame = Instant::now();
                }
                Wake::Input(ev) => {
                    if handle(&mut app, ev, &table) == Action::Quit {
                        return Ok(feed);
                    }
                }
            },
            _ = signals.recv() => return Ok(feed),
        }
        screen.dash.draw(&app, &table, None)?;
    }
}

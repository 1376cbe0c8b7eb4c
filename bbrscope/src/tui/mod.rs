//! `bbrscope top` and `bbrscope replay`: the live dashboard, fed by the kernel or by a recording.

pub mod app;
mod fmt;
pub mod theme;
pub mod view;

use std::{
    io::IsTerminal as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Result;
use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event as TermEvent, KeyEventKind},
};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use self::{
    app::{Action, App, Playback},
    theme::Theme,
};
use crate::{clock::Clock, error::usage, replay::Record, session::Live};
pub use ratatui::crossterm::event::Event as Input;

/// Redraws per second, whatever the event rate.
pub const FPS: u64 = 15;

/// The dashboard on the terminal: raw mode on the alternate screen, input read on its own thread
/// (crossterm's reader blocks). Restored on drop (normal exit, error, signal) and by ratatui's
/// panic hook on panic.
pub struct Dashboard {
    term: DefaultTerminal,
    theme: Theme,
    keys: mpsc::UnboundedReceiver<TermEvent>,
    stop_input: Arc<AtomicBool>,
}

impl Dashboard {
    pub fn new() -> Result<Self> {
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
    pub async fn input(&mut self) -> TermEvent {
        match self.keys.recv().await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }

    pub fn draw(&mut self, app: &App) -> Result<()> {
        let theme = &self.theme;
        self.term.draw(|f| view::draw(f, app, theme))?;
        Ok(())
    }
}

/// Applies terminal input to the app (anything but a key only redraws).
pub fn handle(app: &mut App, ev: TermEvent) -> Action {
    match ev {
        TermEvent::Key(k) if k.kind != KeyEventKind::Release => app.on_key(k),
        _ => Action::Continue,
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.stop_input.store(true, Ordering::Relaxed);
        ratatui::restore();
    }
}

/// A recording played back against a virtual clock.
pub struct Feed {
    records: Vec<Record>,
    next: usize,
    start_ns: u64,
    pos_ns: u64,
}

impl Feed {
    pub fn new(records: Vec<Record>) -> Self {
        let start_ns = records.first().map(Record::ts_ns).unwrap_or(0);
        Feed { records, next: 0, start_ns, pos_ns: start_ns }
    }

    pub fn length_s(&self) -> f64 {
        self.records.last().map(|r| (r.ts_ns() - self.start_ns) as f64 / 1e9).unwrap_or(0.0)
    }

    /// Moves the virtual clock `real` * speed forward and applies everything now due.
    pub fn advance(&mut self, app: &mut App, real: Duration) {
        let Some(p) = app.playback.clone() else { return };
        if !p.paused {
            self.pos_ns += (real.as_secs_f64() * p.speed * 1e9) as u64;
        }
        while let Some(r) = self.records.get(self.next).filter(|r| r.ts_ns() <= self.pos_ns) {
            match r {
                Record::Event(ev) => app.apply(ev),
                Record::Stats(_, s) => app.stats = Some(s.clone()),
            }
            self.next += 1;
        }
        let finished = self.next >= self.records.len();
        if finished {
            self.pos_ns = self.pos_ns.min(self.records.last().map(Record::ts_ns).unwrap_or(self.pos_ns));
        }
        app.tick(self.pos_ns);
        if let Some(pb) = &mut app.playback {
            pb.finished = finished;
            pb.position_s = (self.pos_ns - self.start_ns) as f64 / 1e9;
        }
    }
}

pub enum Source {
    Live(Box<Live>),
    Replay(Feed),
}

pub async fn run(mut source: Source, mut app: App) -> Result<()> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut dash = Dashboard::new()?;
    let mut frame = tokio::time::interval(Duration::from_millis(1000 / FPS));
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_frame = Instant::now();

    loop {
        let mut redraw = false;
        let live_batch = async {
            match &mut source {
                Source::Live(live) => live.next_batch(|ev| app.apply(&ev)).await,
                Source::Replay(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            r = live_batch => r?,
            ev = dash.input() => {
                if handle(&mut app, ev) == Action::Quit {
                    return Ok(());
                }
                redraw = true;
            }
            _ = frame.tick() => {
                let elapsed = last_frame.elapsed();
                last_frame = Instant::now();
                match &mut source {
                    Source::Live(_) => app.tick(Clock::monotonic_ns()),
                    Source::Replay(feed) => feed.advance(&mut app, elapsed),
                }
                redraw = true;
            }
            _ = stats_tick.tick() => {
                if let Source::Live(live) = &mut source {
                    app.stats = Some(live.stats(app.table.len())?);
                }
            }
            _ = sigterm.recv() => return Ok(()),
            _ = sigint.recv() => return Ok(()),
        }
        if redraw {
            dash.draw(&app)?;
        }
    }
}

/// The dashboard over live kernel events.
pub async fn top(opts: &crate::kernel::loader::Options) -> Result<()> {
    let live = Live::start("bbrscope top", opts)?;
    let app = App::new("live", live.degraded().to_vec(), None);
    run(Source::Live(Box::new(live)), app).await
}

/// The dashboard over a recording.
pub async fn replay(records: Vec<Record>, name: &str, speed: f64, paused: bool) -> Result<()> {
    let feed = Feed::new(records);
    let playback = Playback { speed, paused, finished: false, position_s: 0.0, length_s: feed.length_s() };
    let app = App::new(name, Vec::new(), Some(playback));
    run(Source::Replay(feed), app).await
}

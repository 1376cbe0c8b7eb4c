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

/// Redraws per second, whatever the event rate.
const FPS: u64 = 15;

/// The terminal in raw mode on the alternate screen; restored on drop (normal exit, error,
/// signal) and by ratatui's panic hook on panic.
struct Terminal(DefaultTerminal);

impl Terminal {
    fn new() -> Result<Self> {
        if !std::io::stdout().is_terminal() {
            usage!("the dashboard needs a terminal; for pipes and scripts use `bbrscope stream`");
        }
        Ok(Terminal(ratatui::try_init()?))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Reads terminal input on its own thread (crossterm's reader blocks) and forwards it.
fn spawn_input() -> (mpsc::UnboundedReceiver<TermEvent>, Arc<AtomicBool>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::spawn(move || {
        while !stopped.load(Ordering::Relaxed) {
            if event::poll(Duration::from_millis(100)).unwrap_or(false) {
                match event::read() {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
    });
    (rx, stop)
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
    let theme = Theme::from_env();
    let mut term = Terminal::new()?;
    let (mut keys, stop_input) = spawn_input();
    let mut frame = tokio::time::interval(Duration::from_millis(1000 / FPS));
    let mut stats_tick = tokio::time::interval(Duration::from_secs(1));
    let mut last_frame = Instant::now();

    let result = loop {
        let live_batch = async {
            match &mut source {
                Source::Live(live) => live.next_batch(|ev| app.apply(&ev)).await,
                Source::Replay(_) => std::future::pending().await,
            }
        };
        let mut redraw = false;
        tokio::select! {
            r = live_batch => { if let Err(e) = r { break Err(e); } }
            Some(ev) = keys.recv() => {
                if let TermEvent::Key(k) = ev
                    && k.kind != KeyEventKind::Release
                    && app.on_key(k) == Action::Quit
                {
                    break Ok(());
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
                    match live.stats(app.table.len()) {
                        Ok(s) => app.stats = Some(s),
                        Err(e) => break Err(e),
                    }
                }
            }
            _ = sigterm.recv() => break Ok(()),
            _ = sigint.recv() => break Ok(()),
        }
        if redraw && let Err(e) = term.0.draw(|f| view::draw(f, &app, &theme)) {
            break Err(e.into());
        }
    };
    stop_input.store(true, Ordering::Relaxed);
    drop(term);
    result
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

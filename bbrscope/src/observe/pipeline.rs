//! The observer's event loop: the next batch of kernel records → the flow table → a [`Sink`];
//! the flow table pruned and the observer's own cost reported on a tick; ended by SIGINT,
//! SIGTERM or a deadline. Commands that only consume flows (`stream`, `advise`) hand it a sink
//! and get the loop, its retention policy and its signal handling written once.

use std::{io, time::Duration};

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};

use crate::observe::{
    clock::Clock,
    event::Event,
    flow::{Change, FlowTable},
    session::Live,
    stats::StatsReport,
};

/// Closed flows are kept this long so late events (the summary after the final sample) still
/// find their flow's name.
pub const CLOSED_LINGER: Duration = Duration::from_secs(5);
/// Flows silent this long are forgotten (their close may have been lost).
pub const SILENT_FORGET: Duration = Duration::from_secs(300);

/// What consumes the observed flows, one event at a time.
pub trait Sink {
    /// `ev` after the flow table took it (`change` says what it changed). A flow whose summary
    /// arrived ([`Change::Ended`]) is removed from `table` right after this call.
    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()>;
    /// The observer's own cost, every stats period (see [`Settings::stats`]); by default
    /// ignored.
    fn stats(&mut self, _now_ns: u64, _stats: &StatsReport) -> io::Result<()> {
        Ok(())
    }
    /// After every batch: what the sink holds goes out (nothing, for a sink that writes nothing).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// How long the loop runs and how often it reports.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Stop after this long (default: until a signal).
    pub duration: Option<Duration>,
    /// How often [`Sink::stats`] is called; `None`: never.
    pub stats: Option<Duration>,
}

/// How often the flow table is pruned.
const PRUNE_PERIOD: Duration = Duration::from_secs(1);

/// SIGINT and SIGTERM, caught from [`Signals::catch`] on: taken before the programs are
/// attached, so that a signal during start-up still ends the run through its cleanup.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn catch() -> io::Result<Self> {
        Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }
}

/// Drives `live` into `sink` until a signal or the deadline. A write error ends the loop and is
/// returned as it is (a closed pipe is the caller's to call normal).
pub async fn run(
    live: &mut Live,
    signals: &mut Signals,
    table: &mut FlowTable,
    sink: &mut impl Sink,
    settings: Settings,
) -> Result<io::Result<()>> {
    let after = |period| tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut prune_tick = after(PRUNE_PERIOD);
    // Never due without a stats period (an interval must have one; this one is never reached).
    let mut stats_tick = after(settings.stats.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    let deadline = tokio::time::sleep(settings.duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let result: io::Result<()> = loop {
        let mut write_err = None;
        tokio::select! {
            batch = live.next_batch(|ev| {
                let change = table.apply(&ev);
                if write_err.is_none() {
                    write_err = sink.event(&ev, change, table).err();
                }
                if change == Change::Ended {
                    table.remove(ev.head().flow);
                }
            }) => { batch?; }
            _ = prune_tick.tick() => {
                let now = Clock::monotonic_ns();
                table.prune(
                    now.saturating_sub(CLOSED_LINGER.as_nanos() as u64),
                    now.saturating_sub(SILENT_FORGET.as_nanos() as u64),
                );
            }
            _ = stats_tick.tick() => {
                write_err = sink.stats(Clock::monotonic_ns(), &live.stats(table.len())?).err();
            }
            _ = signals.int.recv() => break Ok(()),
            _ = signals.term.recv() => break Ok(()),
            _ = &mut deadline => break Ok(()),
        }
        if let Some(e) = write_err {
            break Err(e);
        }
        if let Err(e) = sink.flush() {
            break Err(e);
        }
    };
    Ok(result.and_then(|()| sink.flush()))
}

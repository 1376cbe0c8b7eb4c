//! The observer's event loop: the next batch of kernel records → the flow table → a [`Sink`];
//! the flow table pruned and the observer's own cost reported on a tick; ended by SIGINT,
//! SIGTERM, a deadline or the sink. Every command that watches live flows (`stream`, `advise`,
//! `export`, `experiment`) hands it a sink, and gets the loop, the retention policy and the
//! signal handling written once. What else a command waits for (the exporter's HTTP clients run
//! as a task of their own; the experiment's keys, frames and analyses) is the sink's [`Side`].

use std::{convert::Infallible, future::Future, io, time::Duration};

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};

use crate::observe::{
    clock::Clock,
    event::Event,
    flow::{Change, FlowTable},
    session::Live,
    stats::StatsReport,
};

/// How long the flow table keeps a flow. The one policy of every live command; only what it
/// does with flows that go quiet or end differs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    /// Closed flows are kept this long, so that late events (the summary after the final
    /// sample) still find their flow, and a dashboard lists them dimmed.
    pub(crate) closed: Duration,
    /// Flows silent this long are forgotten (their close may have been lost); `None`: kept until
    /// they end.
    pub(crate) silent: Option<Duration>,
    /// A flow whose summary arrived stays until `closed` has passed (a dashboard lists it);
    /// otherwise it is removed as soon as its sink has seen the summary.
    pub(crate) keep_ended: bool,
}

impl Retention {
    /// `stream`, `advise`, `export`: a flow silent for five minutes is forgotten, so that lost
    /// closes cannot grow the table without bound.
    pub(crate) const WATCH: Retention =
        Retention { closed: Duration::from_secs(5), silent: Some(Duration::from_secs(300)), keep_ended: false };
    /// `experiment`: a flow's arm is needed when it ends, however long it was idle (the flows
    /// are only those in the experiment's scope, and the run is bounded in time).
    pub(crate) const UNTIL_END: Retention =
        Retention { closed: Duration::from_secs(5), silent: None, keep_ended: false };
    /// The dashboard (`top`, `replay`, an experiment's or a demo's): a closed flow stays listed,
    /// dimmed, for ten seconds; a silent one for the longest chart window
    /// ([`crate::tui::app::WINDOWS`]), so that its chart can still be read.
    pub(crate) const DASHBOARD: Retention =
        Retention { closed: Duration::from_secs(10), silent: Some(Duration::from_secs(600)), keep_ended: true };

    /// Forgets what this policy no longer keeps at `now_ns` (on the table's own clock: the
    /// kernel's live, the recording's in a replay).
    pub(crate) fn prune(&self, table: &mut FlowTable, now_ns: u64) {
        let before = |d: Duration| now_ns.saturating_sub(d.as_nanos() as u64);
        // Silent before time 0: none.
        table.prune(before(self.closed), self.silent.map_or(0, before));
    }
}

/// What the loop does after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    Continue,
    Stop,
}

/// Why the loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Interrupt,
    Terminate,
    Deadline,
    /// The sink said stop ([`Sink::woken`] or [`Sink::done`]).
    Sink,
}

/// What a command waits for beside the observer's records: keys, a frame clock, a computation
/// in flight. Kept apart from its [`Sink`] so that the loop can wait for both at once; what it
/// delivers is handed to [`Sink::woken`] with both.
pub(crate) trait Side {
    type Wake;
    /// The next wake-up. Cancel-safe: when a batch of records comes first the future is dropped
    /// and asked for again.
    fn next(&mut self) -> impl Future<Output = Self::Wake>;
}

/// Nothing beside the observer.
pub(crate) struct NoSide;

impl Side for NoSide {
    type Wake = Infallible;
    async fn next(&mut self) -> Infallible {
        std::future::pending().await
    }
}

/// What consumes the observed flows, one event at a time.
pub(crate) trait Sink {
    /// What else the command waits for ([`NoSide`]: nothing).
    type Side: Side;
    /// Called before the flow table takes `ev` (what a flow was before an event, for sinks that
    /// count differences).
    fn before(&mut self, _ev: &Event, _table: &FlowTable) {}
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
    /// After the table was pruned (once a second).
    fn pruned(&mut self, _table: &FlowTable) {}
    /// What its [`Side`] delivered; [`Control::Stop`] ends the loop.
    fn woken(
        &mut self,
        _wake: <Self::Side as Side>::Wake,
        _side: &mut Self::Side,
        _table: &FlowTable,
    ) -> Result<Control> {
        Ok(Control::Continue)
    }
    /// Asked after every turn: whether the sink has seen all it wanted.
    fn done(&self) -> bool {
        false
    }
}

/// How long the loop runs and how often it reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    /// Stop after this long (default: until a signal).
    pub(crate) duration: Option<Duration>,
    /// How often [`Sink::stats`] is called; `None`: never.
    pub(crate) stats: Option<Duration>,
    pub(crate) retention: Retention,
}

/// How often the flow table is pruned.
const PRUNE_PERIOD: Duration = Duration::from_secs(1);

/// SIGINT and SIGTERM, caught from [`Signals::catch`] on: taken before the programs are
/// attached, so that a signal during start-up still ends the run through its cleanup.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn catch() -> io::Result<Self> {
        Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    /// The next of them: [`End::Interrupt`] or [`End::Terminate`].
    pub(crate) async fn recv(&mut self) -> End {
        tokio::select! {
            _ = self.int.recv() => End::Interrupt,
            _ = self.term.recv() => End::Terminate,
        }
    }
}

/// Drives `live` into `sink` until a signal, the deadline or the sink ends it. A write error ends
/// the loop and is returned as it is (a closed pipe is the caller's to call normal); an error of
/// the observer or of [`Sink::woken`] is the outer one.
pub(crate) async fn run<S: Sink>(
    live: &mut Live,
    signals: &mut Signals,
    table: &mut FlowTable,
    sink: &mut S,
    side: &mut S::Side,
    settings: Settings,
) -> Result<io::Result<End>> {
    let after = |period| tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut prune_tick = after(PRUNE_PERIOD);
    // Never due without a stats period (an interval must have one; this one is never reached).
    let mut stats_tick = after(settings.stats.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    let deadline = tokio::time::sleep(settings.duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let result: io::Result<End> = loop {
        let mut write_err = None;
        tokio::select! {
            batch = live.next_batch(|ev| {
                sink.before(&ev, table);
                let change = table.apply(&ev);
                if write_err.is_none() {
                    write_err = sink.event(&ev, change, table).err();
                }
                if change == Change::Ended && !settings.retention.keep_ended {
                    table.remove(ev.head().flow);
                }
            }) => { batch?; }
            _ = prune_tick.tick() => {
                settings.retention.prune(table, Clock::monotonic_ns());
                sink.pruned(table);
            }
            _ = stats_tick.tick() => {
                write_err = sink.stats(Clock::monotonic_ns(), &live.stats(table.len())?).err();
            }
            wake = side.next() => {
                if sink.woken(wake, side, table)? == Control::Stop {
                    break Ok(End::Sink);
                }
            }
            end = signals.recv() => break Ok(end),
            () = &mut deadline => break Ok(End::Deadline),
        }
        if let Some(e) = write_err {
            break Err(e);
        }
        if let Err(e) = sink.flush() {
            break Err(e);
        }
        if sink.done() {
            break Ok(End::Sink);
        }
    };
    Ok(result.and_then(|end| sink.flush().map(|()| end)))
}

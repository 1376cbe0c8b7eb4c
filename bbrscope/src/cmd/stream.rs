//! `bbrscope stream`: events as newline-delimited JSON on stdout.

use std::{io, time::Duration};

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::StreamArgs,
    observe::clock::Clock,
    observe::flow::{Change, FlowTable},
    observe::session::Live,
    observe::sink::{json::JsonSink, queued::QueuedWriter},
};

/// Closed flows are kept this long so late events still find their flow's name.
const CLOSED_LINGER: Duration = Duration::from_secs(5);
/// Flows silent this long are forgotten (their close may have been lost).
const SILENT_FORGET: Duration = Duration::from_secs(300);

pub async fn run(args: StreamArgs) -> Result<()> {
    let opts = args.observe.options()?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    // A reader that stops reading blocks this task in a write, where it cannot see a signal.
    crate::output::exit_when_stuck_after_signal(Duration::from_secs(2));
    let mut live = Live::start("bbrscope stream", &opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    let mut table = FlowTable::new(0);
    // Lines are written by a thread of their own: a write that blocks must not stop the ring
    // being read (it overflows in under a second at thousands of flows a second).
    let mut sink = JsonSink::new(QueuedWriter::new(io::stdout())?, Clock::new());
    let stats_period = Duration::from_secs_f64(if args.stats_interval > 0.0 { args.stats_interval } else { 3600.0 });
    let mut stats_tick = tokio::time::interval_at(tokio::time::Instant::now() + stats_period, stats_period);
    let deadline = tokio::time::sleep(args.duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);

    let result: io::Result<()> = loop {
        let mut write_err = None;
        tokio::select! {
            batch = live.next_batch(|ev| {
                let change = table.apply(&ev);
                if write_err.is_none() {
                    write_err = sink.event(&ev, change, &table).err();
                }
                if change == Change::Ended {
                    table.remove(ev.head().flow);
                }
            }) => { batch?; }
            _ = stats_tick.tick() => {
                let now = Clock::monotonic_ns();
                table.prune(
                    now.saturating_sub(CLOSED_LINGER.as_nanos() as u64),
                    now.saturating_sub(SILENT_FORGET.as_nanos() as u64),
                );
                if args.stats_interval > 0.0 {
                    write_err = sink.stats(now, &live.stats(table.len())?).err();
                }
            }
            _ = sigint.recv() => break Ok(()),
            _ = sigterm.recv() => break Ok(()),
            _ = &mut deadline => break Ok(()),
        }
        if let Some(e) = write_err {
            break Err(e);
        }
        if let Err(e) = sink.flush() {
            break Err(e);
        }
    };
    match result.and_then(|()| sink.flush()).and_then(|()| sink.writer().finish()) {
        // The reader went away (e.g. `| head`): a normal way for a stream to end.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

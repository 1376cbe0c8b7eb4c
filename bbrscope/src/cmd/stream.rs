//! `bbrscope stream`: events as newline-delimited JSON on stdout.

use std::{
    io::{self, BufWriter},
    time::Duration,
};

use anyhow::Result;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::StreamArgs,
    clock::Clock,
    event::Decoder,
    flow::FlowTable,
    kernel::loader::Observer,
    sink::json::JsonSink,
    stats::StatsTracker,
    sys::privileges,
};

/// Closed flows are kept this long so late events still find their flow's name.
const CLOSED_LINGER: Duration = Duration::from_secs(5);
/// Flows silent this long are forgotten (their close may have been lost).
const SILENT_FORGET: Duration = Duration::from_secs(300);

pub async fn run(args: StreamArgs) -> Result<()> {
    let opts = args.observe.options()?;
    if !(args.stats_interval >= 0.0 && args.stats_interval.is_finite()) {
        crate::error::usage!("--stats-interval must be 0 (off) or a positive number of seconds");
    }
    privileges::require_tracing("bbrscope stream")?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut observer = Observer::start(&opts)?;
    for note in &observer.degraded {
        eprintln!("bbrscope: warning: {note}");
    }
    let layout = observer.layout.clone();
    let decoder = Decoder { layout: &layout };
    let mut table = FlowTable::new(0);
    let mut sink = JsonSink::new(BufWriter::with_capacity(1 << 16, io::stdout()), Clock::new());
    let mut records = 0u64;
    let mut tracker = StatsTracker::new(observer.counters()?, 0, observer.probe_runtime());
    let stats_period = Duration::from_secs_f64(if args.stats_interval > 0.0 { args.stats_interval } else { 3600.0 });
    let mut stats_tick = tokio::time::interval_at(tokio::time::Instant::now() + stats_period, stats_period);
    let deadline = tokio::time::sleep(args.duration.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);

    let result: io::Result<()> = loop {
        let mut write_err = None;
        tokio::select! {
            drained = observer.drain(|bytes| {
                records += 1;
                let Some(ev) = decoder.decode(bytes) else { return };
                let change = table.apply(&ev);
                if write_err.is_none() {
                    write_err = sink.event(&ev, change, &table).err();
                }
            }) => { drained?; }
            _ = stats_tick.tick() => {
                let now = Clock::monotonic_ns();
                table.prune(
                    now.saturating_sub(CLOSED_LINGER.as_nanos() as u64),
                    now.saturating_sub(SILENT_FORGET.as_nanos() as u64),
                );
                if args.stats_interval > 0.0 {
                    let report = tracker.report(observer.counters()?, records, observer.probe_runtime(), table.len());
                    write_err = sink.stats(now, &report).err();
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
    match result.and_then(|()| sink.flush()) {
        // The reader went away (e.g. `| head`): a normal way for a stream to end.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

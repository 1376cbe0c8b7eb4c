//! `bbrscope stream`: events as newline-delimited JSON on stdout.

use std::{io, time::Duration};

use anyhow::Result;

use crate::{
    cli::StreamArgs,
    observe::clock::Clock,
    observe::flow::FlowTable,
    observe::pipeline::{self, NoSide, Retention, Settings, Signals},
    observe::session::Live,
    observe::sink::{json::JsonSink, queued::QueuedWriter},
};

pub async fn run(args: StreamArgs) -> Result<()> {
    let opts = args.observe.options()?;
    let mut signals = Signals::catch()?;
    // A reader that stops reading blocks this task in a write, where it cannot see a signal.
    crate::output::exit_when_stuck_after_signal(Duration::from_secs(2));
    let mut live = Live::start("bbrscope stream", &opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    // Lines are written by a thread of their own: a write that blocks must not stop the ring
    // being read (it overflows in under a second at thousands of flows a second).
    let mut sink = JsonSink::new(QueuedWriter::new(io::stdout())?, Clock::new());
    let settings = Settings {
        duration: args.duration,
        stats: (args.stats_interval > 0.0).then(|| Duration::from_secs_f64(args.stats_interval)),
        retention: Retention::WATCH,
    };
    let result =
        pipeline::run(&mut live, &mut signals, &mut FlowTable::new(0), &mut sink, &mut NoSide, settings).await?;
    match result.and_then(|_| sink.writer().finish()) {
        // The reader went away (e.g. `| head`): a normal way for a stream to end.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

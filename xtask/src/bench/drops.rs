//! Drops forced on purpose (the smallest ring buffer, a 1 ms sample interval, 100 busy flows):
//! the kernel counts every record it could not write, and what `stream`'s `stats` records and
//! the dashboard footer report must be that same number.

use std::{
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use bbrscope_common::counter;
use serde::Serialize;

use super::{
    pty,
    scale::StatsTap,
    scenarios::{Observer, Setup, Traced, bbrscope_stream, bbrscope_top},
    workload::{Bulk, Ends, PathKind},
};

pub(super) const ARGS: [&str; 4] = ["--ring-size", "4K", "--interval", "1"];
pub(super) const FLOWS: usize = 100;

#[derive(Debug, Serialize)]
pub(crate) struct ForcedDrops {
    pub observer: Observer,
    pub args: String,
    pub flows: usize,
    pub seconds: f64,
    /// RING_FULL summed over CPUs, read by the benchmark once the traffic had stopped.
    pub kernel_drops: u64,
    /// What the observer said: `drops_total` of the next `stats` record, or the footer's count.
    pub reported_drops: Option<u64>,
}

impl ForcedDrops {
    pub(crate) fn reported_exactly(&self) -> bool {
        self.kernel_drops > 0 && self.reported_drops == Some(self.kernel_drops)
    }
}

pub(super) fn run(setup: &Setup, observer: Observer, seconds: f64) -> Result<ForcedDrops> {
    let (traced, tap) = match observer {
        Observer::Stream => {
            let args = [&ARGS[..], &["--stats-interval", "0.2"]].concat();
            let mut t = bbrscope_stream(setup, &args, Stdio::piped())?;
            let tap = StatsTap::new(t.child.stdout.take().context("stream stdout")?);
            (t, Some(tap))
        }
        _ => (bbrscope_top(setup, &ARGS)?, None),
    };
    let bulk = Bulk::start(FLOWS, "cubic", Ends::of(PathKind::Loopback, None)?, None)?;
    thread::sleep(Duration::from_secs_f64(seconds));
    bulk.stop();
    // Closing flows writes their last records; let those settle before reading the count.
    thread::sleep(Duration::from_millis(300));
    let kernel_drops = traced.counters.as_ref().context("bbrscope's counters")?.read()?[counter::RING_FULL as usize];
    let reported_drops = match &tap {
        Some(tap) => tap.next_after(Instant::now(), Duration::from_secs(3)).and_then(|v| v["drops_total"].as_u64()),
        None => footer_drops(&traced)?,
    };
    traced.stop_in_time()?;
    Ok(ForcedDrops { observer, args: ARGS.join(" "), flows: FLOWS, seconds, kernel_drops, reported_drops })
}

/// The drop count on the dashboard's footer ("drops N (raise ..."), once it has refreshed
/// (every second).
fn footer_drops(traced: &Traced) -> Result<Option<u64>> {
    let pty = traced.pty.as_ref().context("the dashboard's terminal")?;
    thread::sleep(Duration::from_millis(1500));
    Ok(pty::number_after(&pty::plain(&pty.redraw()?), "drops "))
}

//! A live observation session: the loaded programs, decoding, and cost accounting, shared by
//! every command that watches live flows (`stream`, `top`, `demo`).

use anyhow::{Context as _, Result};

use crate::{
    event::{Decoder, Event},
    kernel::{
        layout::Layout,
        loader::{Observer, Options},
    },
    stats::{StatsReport, StatsTracker},
    sys::privileges,
};

pub struct Live {
    /// Holds the kernel's BPF run-time statistics on while bbrscope runs (`--bpf-stats`); the
    /// kernel turns them off again when this closes, whatever way bbrscope exits.
    _bpf_stats: Option<std::os::fd::OwnedFd>,
    observer: Observer,
    layout: Layout,
    records: u64,
    tracker: StatsTracker,
}

impl Live {
    /// Checks privileges, loads and attaches the programs. `what` names the command in errors.
    pub fn start(what: &str, opts: &Options) -> Result<Self> {
        privileges::require_tracing(what)?;
        let bpf_stats = match opts.bpf_stats {
            true => Some(
                aya::sys::enable_stats(aya::sys::Stats::RunTime)
                    .context("enabling BPF run-time statistics (needs Linux 5.8+)")?,
            ),
            false => None,
        };
        let observer = Observer::start(opts)?;
        let layout = observer.layout.clone();
        let tracker = StatsTracker::new(observer.counters()?, 0, observer.probe_runtime(), opts.max_flows);
        Ok(Live { _bpf_stats: bpf_stats, observer, layout, records: 0, tracker })
    }

    /// What this kernel lacks, in words.
    pub fn degraded(&self) -> &[String] {
        &self.observer.degraded
    }

    /// Waits for records, then decodes each and passes it to `f`.
    pub async fn next_batch(&mut self, mut f: impl FnMut(Event)) -> Result<()> {
        let decoder = Decoder { layout: &self.layout };
        let records = &mut self.records;
        self.observer
            .drain(|bytes| {
                *records += 1;
                if let Some(ev) = decoder.decode(bytes) {
                    f(ev);
                }
            })
            .await?;
        Ok(())
    }

    /// Cost and health since the previous call.
    pub fn stats(&mut self, flows_active: usize) -> Result<StatsReport> {
        let counters = self.observer.counters()?;
        Ok(self.tracker.report(counters, self.records, self.observer.probe_runtime(), flows_active))
    }
}

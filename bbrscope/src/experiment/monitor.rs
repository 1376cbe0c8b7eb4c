//! The [`Monitor`] that keeps a running experiment's analysis current without stalling the
//! dashboard: separate from the state it updates ([`super::progress`]) because it is the only
//! part that runs work off the UI task.
//!
//! The analysis is the one the final report uses ([`setup::report`], [`setup::guardrail`]). It is
//! recomputed every [`Monitor::PERIOD`] if flows have finished since the last time, on tokio's
//! blocking pool over a copy of the observations: the dashboard keeps drawing and
//! taking keys while it runs, and at most one computation is in flight, so a slow one (a huge
//! experiment) lowers the refresh rate instead of piling up work.

use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::task::JoinHandle;

use super::{
    Observation,
    guardrail::Held,
    progress::{Analysed, Update},
    setup::{self, Setup},
};

/// Runs the analysis off the UI task (see the module comment).
pub(crate) struct Monitor {
    job: Option<JoinHandle<Update>>,
    /// Flows the latest computation covered.
    analyzed: Option<usize>,
    setup: Setup,
    /// Whether to build the report (someone shows it).
    report: bool,
    /// The report is not rebuilt before this (see [`Monitor::REST`]).
    report_after: Option<Instant>,
    /// The groups the guardrail sent back so far (`guardrail::held_of`): they stay sent back.
    held: Held,
}

impl Monitor {
    /// How often the guardrail is checked, and the report rebuilt at most, when flows have
    /// finished since the last time.
    pub(crate) const PERIOD: Duration = Duration::from_secs(2);
    /// After a report that took T, the next waits REST x T: the live report takes at most a
    /// fifth of one core, however large the experiment (100,000 flows in 200 client prefixes
    /// take seconds). The guardrail (a few cells) is checked every period regardless.
    pub(crate) const REST: u32 = 4;

    pub(crate) fn new(setup: Setup, report: bool) -> Self {
        Monitor { job: None, analyzed: None, setup, report, report_after: None, held: Held::default() }
    }

    /// Starts a computation over `obs` if one is due: none in flight and new flows since the
    /// last. Called every `PERIOD`.
    pub(crate) fn maybe_start(&mut self, obs: &[Observation], elapsed: Duration) {
        let want_report = self.report && self.report_after.is_none_or(|t| Instant::now() >= t);
        let due = self.job.is_none() && !obs.is_empty() && self.analyzed != Some(obs.len());
        if !due || (self.setup.guardrail_pct.is_none() && !want_report) {
            return;
        }
        self.analyzed = Some(obs.len());
        let obs = obs.to_vec();
        let setup = self.setup.clone();
        let held = self.held;
        self.job = Some(tokio::task::spawn_blocking(move || {
            let guard = setup::guardrail(&obs, &setup, held);
            let analysed = want_report.then(|| {
                let t = Instant::now();
                let report = setup::report(&obs, &setup, None).0;
                Analysed { report, flows: obs.len(), took: t.elapsed(), at: elapsed }
            });
            Update { guard, analysed }
        }));
    }

    /// The computation in flight, when it completes; pending forever without one. Cancel-safe
    /// (a `select!` may drop it and call again).
    pub(crate) async fn finished(&mut self) -> Result<Update> {
        let Some(job) = self.job.as_mut() else { return std::future::pending().await };
        let update = job.await;
        self.job = None;
        let update = update?;
        if let Some(a) = &update.analysed {
            self.report_after = Some(Instant::now() + a.took * Self::REST);
        }
        if let Some(g) = &update.guard {
            self.held = self.held.union(super::guardrail::held_of(&g.switched_back));
        }
        Ok(update)
    }
}

//! Where a running experiment stands, as the dashboard's experiment view and the progress lines
//! show it ([`LiveExperiment`]: plain data, no terminal, no kernel). Kept apart from the loop
//! that feeds it ([`super::run`]) and the panel that draws it ([`super::dashboard`]) so that both
//! read one state, and the dashboard's tests can build it from a recording.

use std::time::Duration;

use super::{format::fmt_count, guardrail::GuardDecision, report::Report};
use crate::observe::flow::FlowTable;

/// When the experiment ends by itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    Time(Duration),
    Flows(u64),
}

/// One computation of the report.
#[derive(Clone, Debug)]
pub struct Analysed {
    pub report: Report,
    /// Finished flows it covers.
    pub flows: usize,
    /// How long the computation took.
    pub took: Duration,
    /// The experiment's elapsed time when it was computed.
    pub at: Duration,
}

/// What one computation of the [`Monitor`] brings.
#[derive(Clone, Debug)]
pub struct Update {
    /// The stop rule's decision (`None` with `--no-guardrail`).
    pub guard: Option<GuardDecision>,
    /// The report, when it was due (see [`Monitor`]) and someone shows it.
    pub analysed: Option<Analysed>,
}

/// What is shown of a running experiment.
#[derive(Clone, Debug)]
pub struct LiveExperiment {
    pub arms: [String; 2],
    pub split_pct: u32,
    pub sample_pct: u32,
    /// Which connections are in it, in words (`port 443`, `every new connection`).
    pub scope: String,
    pub limit: Limit,
    pub elapsed: Duration,
    /// Flows finished per arm so far (counted as they end; the analysis lags behind).
    pub finished: [usize; 2],
    /// Flows of each arm still open.
    pub open: [usize; 2],
    pub guardrail: bool,
    /// The stop rule's latest decision.
    pub guard: Option<GuardDecision>,
    /// The latest report on the flows finished so far.
    pub latest: Option<Analysed>,
}

impl LiveExperiment {
    pub fn new(spec: &crate::observe::kernel::loader::ExperimentSpec, limit: Limit, guardrail: bool) -> Self {
        LiveExperiment {
            arms: spec.arms.each_ref().map(ToString::to_string),
            split_pct: spec.split_pct,
            sample_pct: spec.sample_pct,
            scope: scope_words(spec),
            limit,
            elapsed: Duration::ZERO,
            finished: [0, 0],
            open: [0, 0],
            guardrail,
            guard: None,
            latest: None,
        }
    }

    pub fn update(&mut self, u: Update) {
        if u.guard.is_some() {
            self.guard = u.guard;
        }
        if u.analysed.is_some() {
            self.latest = u.analysed;
        }
    }

    /// A flow of arm `arm` (0 = A) has finished.
    pub fn flow_finished(&mut self, arm: usize) {
        if let Some(n) = self.finished.get_mut(arm) {
            *n += 1;
        }
    }

    /// Counts the open flows of each arm in the flow table.
    pub fn count_open(&mut self, table: &FlowTable) {
        self.open = [0, 0];
        for f in table.iter().filter(|f| f.closed_ns.is_none()) {
            match f.life.owner.as_ref().and_then(|o| o.arm) {
                Some(1) => self.open[0] += 1,
                Some(2) => self.open[1] += 1,
                _ => {}
            }
        }
    }

    /// How far along it is, e.g. `1:23 of 10:00 (8:37 left)` or `412 of 1,000 flows`.
    pub fn progress(&self) -> String {
        match self.limit {
            Limit::Time(total) => {
                // Whole seconds left, rounded up: 0:00 of 5:00 is 5:00 left, not 4:59.
                let left = total.saturating_sub(self.elapsed);
                let left = Duration::from_secs(left.as_secs() + u64::from(left.subsec_nanos() > 0));
                format!("{} of {} ({} left)", clock(self.elapsed), clock(total), clock(left))
            }
            Limit::Flows(n) => format!(
                "{} of {} flows, {} running",
                fmt_count(self.finished[0] + self.finished[1]),
                fmt_count(n as usize),
                clock(self.elapsed)
            ),
        }
    }

    /// When it ends by itself, e.g. `after 10:00`, `after 1,000 flows`.
    pub fn ends(&self) -> String {
        match self.limit {
            Limit::Time(total) => format!("after {}", clock(total)),
            Limit::Flows(n) => format!("after {} flows", fmt_count(n as usize)),
        }
    }

    /// The guardrail's state in words.
    pub fn guard_words(&self) -> String {
        match (self.guardrail, &self.guard) {
            (false, _) => "off (--no-guardrail)".into(),
            (true, None) => "waiting for the first finished flows".into(),
            (true, Some(d)) => d.reason.clone(),
        }
    }

    /// One line for a log (stderr when it is not a terminal).
    pub fn progress_line(&self) -> String {
        format!(
            "bbrscope: experiment {}: {} (A) {} flows, {} (B) {} flows finished; guardrail: {}",
            self.progress(),
            self.arms[0],
            fmt_count(self.finished[0]),
            self.arms[1],
            fmt_count(self.finished[1]),
            self.guard_words()
        )
    }
}

/// `m:ss`, or `h:mm:ss` from an hour.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

fn scope_words(spec: &crate::observe::kernel::loader::ExperimentSpec) -> String {
    let mut parts = Vec::new();
    if let Some(p) = spec.port {
        parts.push(format!("port {p}"));
    }
    if let Some(c) = &spec.cgroup {
        parts.push(format!("cgroup {}", c.path.display()));
    }
    if !spec.dst.is_empty() {
        parts.push(format!(
            "to {}",
            spec.dst.iter().map(std::string::ToString::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    if parts.is_empty() { "every new connection".into() } else { parts.join(", ") }
}

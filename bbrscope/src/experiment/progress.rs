//! Where a running experiment stands, as the dashboard's experiment view and the progress lines
//! show it ([`LiveExperiment`]: plain data, no terminal, no kernel). Kept apart from the loop
//! that feeds it ([`super::run`]) and the panel that draws it ([`super::dashboard`]) so that both
//! read one state, and the dashboard's tests can build it from a recording.

use std::time::Duration;

use super::{
    format::fmt_count,
    guardrail::GuardDecision,
    report::Report,
    schedule::{Kind, Schedule},
    setup::Design,
};
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
    pub(crate) arms: [String; 2],
    pub(crate) split_pct: u32,
    pub(crate) sample_pct: u32,
    /// Which connections are in it, in words (`port 443`, `every new connection`).
    pub(crate) scope: String,
    pub(crate) limit: Limit,
    /// A switchback's blocks (`None`: each connection draws its arm, or gets its client's).
    pub(crate) schedule: Option<Schedule>,
    /// Every connection of a client on its client's arm (`--design client`).
    pub(crate) by_client: bool,
    pub elapsed: Duration,
    /// The wall clock at `elapsed`, Unix seconds: which block a switchback is in.
    pub(crate) now: f64,
    /// Flows finished per arm so far (counted as they end; the analysis lags behind).
    pub(crate) finished: [usize; 2],
    /// Flows of each arm still open.
    pub(crate) open: [usize; 2],
    pub(crate) guardrail: bool,
    /// The stop rule's latest decision.
    pub(crate) guard: Option<GuardDecision>,
    /// The latest report on the flows finished so far.
    pub(crate) latest: Option<Analysed>,
}

impl LiveExperiment {
    pub fn new(
        spec: &crate::observe::kernel::loader::ExperimentSpec,
        design: Design,
        limit: Limit,
        guardrail: bool,
    ) -> Self {
        LiveExperiment {
            arms: spec.arms.each_ref().map(ToString::to_string),
            split_pct: spec.split_pct,
            sample_pct: spec.sample_pct,
            scope: scope_words(spec),
            limit,
            schedule: design.schedule(),
            by_client: matches!(design, Design::Client { .. }),
            elapsed: Duration::ZERO,
            now: 0.0,
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
    pub(crate) fn count_open(&mut self, table: &FlowTable) {
        self.open = open_per_arm(table);
    }

    /// How far along it is, e.g. `1:23 of 10:00 (8:37 left)` or `412 of 1,000 flows`.
    pub(crate) fn progress(&self) -> String {
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
    pub(crate) fn ends(&self) -> String {
        match self.limit {
            Limit::Time(total) => format!("after {}", clock(total)),
            Limit::Flows(n) => format!("after {} flows", fmt_count(n as usize)),
        }
    }

    /// How connections get their arms now: the split, or where a switchback stands, e.g.
    /// `switchback: block B (everyone reno), 9 s left; round 3`.
    pub(crate) fn assignment(&self) -> String {
        let Some(s) = self.schedule else {
            let of = if self.by_client { "of clients " } else { "" };
            return format!("{}% {of}to B", self.split_pct);
        };
        let k = s.block_of(self.now);
        // A host-level switchback's block is this host's alone.
        let (design, everyone) =
            if s.host.is_some() { ("host-level switchback", "everyone here on") } else { ("switchback", "everyone") };
        let what = match s.kind(k) {
            Kind::A => format!("A ({everyone} {})", self.arms[0]),
            Kind::B => format!("B ({everyone} {})", self.arms[1]),
            Kind::Mixed => format!("mixed ({}% to B)", self.split_pct),
        };
        let burn_in = if s.in_burn_in(self.now) { ", burn-in" } else { "" };
        let left = (s.start_of(k + 1) - self.now).ceil();
        // Rounds counted from the one the experiment started in.
        let round = Schedule::round_of(k) - Schedule::round_of(s.block_of(self.now - self.elapsed.as_secs_f64())) + 1;
        format!("{design}: block {what}{burn_in}, {left} s left; round {round}")
    }

    /// The guardrail's state in words.
    pub(crate) fn guard_words(&self) -> String {
        match (self.guardrail, &self.guard) {
            (false, _) => "off (--no-guardrail)".into(),
            (true, None) => "waiting for the first finished flows".into(),
            (true, Some(d)) => d.reason.clone(),
        }
    }

    /// One line for a log (stderr when it is not a terminal).
    pub(crate) fn progress_line(&self) -> String {
        // The split of a per-connection experiment is in the line that started it; a
        // switchback's block changes.
        let block = if self.schedule.is_some() { format!("; {}", self.assignment()) } else { String::new() };
        format!(
            "bbrscope: experiment {}: {} (A) {} flows, {} (B) {} flows finished{block}; guardrail: {}",
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
pub(crate) fn clock(d: Duration) -> String {
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

/// The flows of each arm (A, B) open in the flow table now.
pub(crate) fn open_per_arm(table: &FlowTable) -> [usize; 2] {
    let mut open = [0, 0];
    for f in table.iter().filter(|f| f.closed_ns.is_none()) {
        match f.life.owner.as_ref().and_then(|o| o.arm) {
            Some(1) => open[0] += 1,
            Some(2) => open[1] += 1,
            _ => {}
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{experiment::Arm, observe::kernel::loader::ExperimentSpec};

    /// A switchback's line names the block it is in by the wall clock, what it gives, the time
    /// left in it and the round counted from the start.
    #[test]
    fn a_switchback_names_its_block() {
        let schedule = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 9, host: None };
        let spec = ExperimentSpec {
            arms: ["cubic", "reno"].map(|a| Arm::parse(a).unwrap()),
            split_pct: 30,
            sample_pct: 100,
            port: None,
            cgroup: None,
            dst: Vec::new(),
            salt: 0,
        };
        let mut x =
            LiveExperiment::new(&spec, Design::Switchback(schedule), Limit::Time(Duration::from_secs(600)), true);
        // The third round after the start, 6 s into its B block (9 s left).
        let start = schedule.start_of(3 * 1_000);
        let b = (3 * 1_002..3 * 1_003).find(|&k| schedule.kind(k) == Kind::B).unwrap();
        x.now = schedule.start_of(b) + 6.0;
        x.elapsed = Duration::from_secs_f64(x.now - start);
        assert_eq!(x.assignment(), "switchback: block B (everyone reno), 9 s left; round 3");
        assert!(x.progress_line().contains("; switchback: block B (everyone reno), 9 s left; round 3; guardrail"));
        let mixed = (3 * 1_002..3 * 1_003).find(|&k| schedule.kind(k) == Kind::Mixed).unwrap();
        x.now = schedule.start_of(mixed) + 1.0;
        x.elapsed = Duration::from_secs_f64(x.now - start);
        assert_eq!(x.assignment(), "switchback: block mixed (30% to B), burn-in, 14 s left; round 3");
        // A host-level switchback's blocks are this host's own, and its line says so.
        let host = Schedule { host: Some(Schedule::host_salt("edge-1")), ..schedule };
        x.schedule = Some(host);
        let b = (3 * 1_002..3 * 1_003).find(|&k| host.kind(k) == Kind::B).unwrap();
        x.now = host.start_of(b) + 6.0;
        x.elapsed = Duration::from_secs_f64(x.now - start);
        assert_eq!(x.assignment(), "host-level switchback: block B (everyone here on reno), 9 s left; round 3");
        // Per connection: the split, and the progress line as before.
        x.schedule = None;
        assert_eq!(x.assignment(), "30% to B");
        assert!(!x.progress_line().contains("30% to B"));
        // By client: the split is of clients.
        x.by_client = true;
        assert_eq!(x.assignment(), "30% of clients to B");
    }
}

//! What the `experiment` command needs from the analysis: the guardrail check while it runs, and
//! the report, figure and recommendation at the end (live, or of a recording).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::{
    Observation,
    analysis::{self, PrefixList},
    decide::Rule,
    guardrail::{self, GuardDecision, StopRule},
    plot,
    report::{self, InScope},
};
use crate::{
    error::usage,
    output::{self, outln},
};

/// What an experiment was asked: the same live and when a recording is analysed again.
#[derive(Clone, Debug, Default)]
pub struct Setup {
    /// The arms' algorithms (`--arms`); `None` for a recording that does not name them (then the
    /// algorithm most of each arm's flows ran).
    pub arms: Option<[String; 2]>,
    pub split_pct: u32,
    pub scope: InScope,
    pub rule: Rule,
    /// The guardrail's margin, %; `None` with `--no-guardrail`.
    pub guardrail_pct: Option<f64>,
    pub prefix_lists: Vec<PrefixList>,
    /// What the connections would run without the experiment, when one algorithm is known
    /// ([`super::status_quo`]): the guardrail watches the arms that differ from it.
    pub status_quo: Option<String>,
}

impl Setup {
    fn names(&self, obs: &[Observation]) -> [String; 2] {
        self.arms.clone().unwrap_or_else(|| analysis::arm_names(obs))
    }

    fn stop_rule(&self, pct: f64) -> StopRule {
        StopRule { margin_pct: pct, alpha: self.rule.alpha, status_quo: self.status_quo.clone(), ..StopRule::default() }
    }
}

/// The guardrail's decision on the flows so far (`None` with `--no-guardrail`).
pub fn guardrail(obs: &[Observation], setup: &Setup) -> Option<GuardDecision> {
    let pct = setup.guardrail_pct?;
    Some(guardrail::guardrail(obs, &setup.stop_rule(pct), &setup.names(obs)))
}

/// What the live guardrail, with margin `pct`, would have done on a recording's flows, looking
/// as often as the running experiment does. Flows still running at the end are left out: the
/// live guardrail never saw them (they are counted after it stopped looking).
pub fn guardrail_replay(obs: &[Observation], setup: &Setup, pct: f64) -> guardrail::Replay {
    let finished: Vec<Observation> = obs.iter().filter(|o| !o.censored).cloned().collect();
    let obs = &finished[..];
    guardrail::replay(obs, &setup.stop_rule(pct), &setup.names(obs), super::live::Monitor::PERIOD.as_secs_f64())
}

/// The report on the flows so far: the same analysis at the end and while it runs.
pub fn report(
    obs: &[Observation],
    setup: &Setup,
    guard_stop: Option<GuardDecision>,
) -> (report::Report, analysis::Analysis) {
    let opts = analysis::Options {
        arms: setup.arms.clone(),
        split_b: f64::from(setup.split_pct) / 100.0,
        rule: setup.rule,
        prefix_lists: setup.prefix_lists.clone(),
        ..analysis::Options::default()
    };
    let a = analysis::analyze(obs, &opts);
    let ctx = report::Context { scope: setup.scope.clone(), service_cgroup: service_cgroup(obs), guard_stop };
    (report::build(&a, &ctx), a)
}

/// The cgroup every flow of the experiment was in, when they were all in one (the narrowest
/// `apply` that covers a `--port` service).
fn service_cgroup(obs: &[Observation]) -> Option<String> {
    let first = obs.first()?;
    if obs.iter().any(|o| o.cgroup_id != first.cgroup_id) {
        return None;
    }
    first
        .cgroup
        .clone()
        .or_else(|| first.cgroup_id.and_then(|id| crate::sys::cgroup::CgroupNames::new().name(id).map(str::to_string)))
}

/// `--plot` must be writable before the experiment runs, not found unwritable after.
pub fn check_plot_path(p: &Path) -> Result<()> {
    if let Err(e) = crate::figure::check_path(p) {
        usage!("{e}");
    }
    Ok(())
}

pub struct Output {
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub recommend: bool,
    /// Why the run ended early (a signal, q, the guardrail).
    pub stopped_by: Option<String>,
    /// The guardrail's stop, when it ended the run.
    pub guard: Option<GuardDecision>,
    /// `--analyze`: what the live guardrail would have done on the recording.
    pub replay: Option<guardrail::Replay>,
}

/// `--json`: the report with how the run ended.
#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a report::Report,
    /// Null when it ran its course (duration or flow count reached).
    stopped_by: Option<&'a str>,
    /// The guardrail's stop in numbers (null unless it stopped the run).
    guardrail: Option<&'a GuardDecision>,
    /// `--analyze`: the live guardrail's checks replayed in completion order.
    guardrail_replay: Option<&'a guardrail::Replay>,
}

/// Prints the final report. Its first line is the guardrail's reason when it stopped the run.
pub fn finish(obs: &[Observation], setup: &Setup, out: &Output) -> Result<report::Report> {
    let guard_stop = out.guard.clone().filter(|g| g.stop);
    let (rep, a) = report(obs, setup, guard_stop);
    if let Some(p) = &out.plot {
        crate::figure::write(p, &plot::svg(obs, &a, 6))?;
    }
    output::guard(|| {
        if out.json {
            outln!(
                "{}",
                serde_json::to_string(&JsonReport {
                    report: &rep,
                    stopped_by: out.stopped_by.as_deref(),
                    guardrail: out.guard.as_ref().filter(|g| g.stop),
                    guardrail_replay: out.replay.as_ref(),
                })?
            )?;
            return Ok(());
        }
        if let Some(why) = &out.stopped_by {
            outln!("{why}")?;
        }
        outln!("{}", rep.render_text().trim_end())?;
        if let Some(r) = &out.replay {
            outln!()?;
            match r.stopped_at_s {
                Some(t) => outln!(
                    "guardrail replayed ({} looks, every {:.0} s of recorded time): would have stopped at {:.0} s, after \
                     {} flows: {}",
                    r.looks,
                    r.period_s,
                    t,
                    r.flows_at_stop.unwrap_or(0),
                    r.decision.reason
                )?,
                None => outln!(
                    "guardrail replayed ({} looks, every {:.0} s of recorded time): would not have stopped ({})",
                    r.looks,
                    r.period_s,
                    r.decision.reason
                )?,
            }
        }
        if out.recommend {
            outln!()?;
            if rep.recommend.commands.is_empty() {
                outln!("recommended: nothing to apply")?;
            }
            for (c, why) in rep.recommend.commands.iter().zip(&rep.recommend.evidence) {
                outln!("{c}    # {why}")?;
            }
        }
        Ok(())
    })?;
    Ok(rep)
}

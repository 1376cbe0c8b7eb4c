//! What an experiment was asked ([`Setup`], the same live and when a recording is analysed
//! again), and the analyses run under it: the guardrail's check while it runs, its replay on a
//! recording, and the report. One place, so that the live view, the final report and
//! `--analyze` judge the same flows the same way.

use super::{
    Observation, analysis,
    decide::{PrimaryMetric, Rule},
    groups::PrefixList,
    guardrail::{self, GuardDecision, Held, StopRule},
    report::{self, InScope},
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
    /// How connections got their arms.
    pub design: Design,
    /// How the answers weigh their strata (`--metric`); `None`: the design's.
    pub metric: Option<PrimaryMetric>,
}

/// How the experiment gives connections their arms (`--design`), and so what its answer means.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Design {
    /// Each connection draws its arm: B beside A, on shared bottlenecks.
    #[default]
    PerConnection,
    /// Blocks of time where everyone runs A, everyone B, or each draws ([`super::schedule`]):
    /// B for everyone against A for everyone.
    Switchback(super::schedule::Schedule),
    /// Every connection of a client address on the arm its salted hash gives it
    /// (`bbrscope_common::client_gets_b`): B for whole clients against A for whole clients
    /// ([`super::client`]).
    Client {
        /// The hash's salt: the run's `--seed`.
        salt: u64,
    },
}

impl Design {
    /// The design every host of a fleet runs: a host-level switchback's without this host's
    /// salt (each host draws its own blocks of the same schedule), the others as they are.
    pub(crate) fn of_fleet(self) -> Design {
        match self {
            Design::Switchback(s) => Design::Switchback(super::schedule::Schedule { host: s.host.map(|_| 0), ..s }),
            d => d,
        }
    }

    /// A switchback's schedule, `None` in the other designs.
    pub(crate) fn schedule(&self) -> Option<super::schedule::Schedule> {
        match *self {
            Design::Switchback(s) => Some(s),
            Design::PerConnection | Design::Client { .. } => None,
        }
    }
}

impl Setup {
    pub(super) fn names(&self, obs: &[Observation]) -> [String; 2] {
        self.arms.clone().unwrap_or_else(|| analysis::arm_names(obs))
    }

    pub(super) fn stop_rule(&self, pct: f64) -> StopRule {
        StopRule {
            margin_pct: pct,
            alpha: self.rule.alpha,
            status_quo: self.status_quo.clone(),
            prefix_lists: self.prefix_lists.clone(),
            ..StopRule::under(&self.design)
        }
    }
}

/// The guardrail's decision on the flows so far (`None` with `--no-guardrail`), the groups in
/// `held` sent back before (`guardrail::held_of`).
pub fn guardrail(obs: &[Observation], setup: &Setup, held: Held) -> Option<GuardDecision> {
    let pct = setup.guardrail_pct?;
    Some(guardrail::guardrail(obs, &setup.stop_rule(pct), &setup.names(obs), held))
}

/// What the live guardrail, with margin `pct`, would have done on a recording's flows, looking
/// as often as the running experiment does. Flows still running at the end are left out: the
/// live guardrail never saw them (they are counted after it stopped looking).
pub(crate) fn guardrail_replay(obs: &[Observation], setup: &Setup, pct: f64) -> guardrail::Replay {
    let finished: Vec<Observation> = obs.iter().filter(|o| !o.censored).cloned().collect();
    let obs = &finished[..];
    guardrail::replay(obs, &setup.stop_rule(pct), &setup.names(obs), super::monitor::Monitor::PERIOD.as_secs_f64())
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
        design: setup.design,
        metric: setup.metric,
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

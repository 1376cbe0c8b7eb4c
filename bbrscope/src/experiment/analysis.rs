//! The statistics of `bbrscope experiment`: per arm and per client group, flow completion time by
//! response size, goodput, RTT and retransmissions, and the difference between the arms with a
//! confidence interval and a verdict.
//!
//! Methods (standard ones, so that a reader can check them; every result is deterministic given
//! the seed):
//! - **Quantile metrics** (completion time p50/p95/p99 per size bucket, median goodput, srtt
//!   p50/p95, median RTT inflation): percentile bootstrap of B's statistic relative to A's
//!   (`B/A − 1`, in %), each arm resampled independently, `resamples` times (default 2000). A
//!   resample's quantile is not found by drawing n flows and sorting them: the k-th smallest of n
//!   draws with replacement from sorted x is `x[ceil(n·U)]` with `U ~ Beta(k, n−k+1)` (the k-th
//!   order statistic of n uniforms), so it is drawn directly. The result has exactly the
//!   bootstrap's distribution and costs O(1) per resample whatever the number of flows, which
//!   keeps the live guardrail cheap on a busy server.
//! - **Retransmit rate** (sum of retransmits / sum of data segments, a ratio of sums over flows):
//!   the delta method (Deng, Knoblich, Lu 2018, "Applying the delta method in metric
//!   analytics"), difference in percentage points (a relative change of a rate that is often 0
//!   in arm A means nothing).
//! - **Verdict per group**: from the completion-time metrics with enough flows only, with
//!   Holm–Bonferroni across them (bootstrap p-values), so a group where the arms do not differ
//!   is called different at most `1 − level` of the time however many buckets it has.
//! - **Sample ratio**: Pearson's chi-square with one degree of freedom, flagged below p = 0.001
//!   (the usual sample-ratio-mismatch threshold; strict because it is checked over and over while
//!   the experiment runs).
//! - **Small samples**: a cell (arm x group x metric) needs `min_flows` flows per arm, and a tail
//!   quantile q needs `min_tail_flows / (1−q)` (p95: 100, p99: 500 by default): below that a
//!   percentile bootstrap of a tail quantile is just the sample maximum and its interval lies.
//!
//! - **Switchback** (`Options::design`): each group's answer is the switchback's
//!   everyone-switched estimate ([`super::switchback`]), beside its per-connection and
//!   interference estimates; the secondary tables describe its A and B blocks' counted flows, and
//!   the sample ratio is checked on its mixed blocks' flows, where arms are drawn.
//! - **Client-clustered** (`Options::design`): each group's answer is the per-connection
//!   estimate with its variance clustered by client address ([`super::client`]); the sample
//!   ratio is checked on clients, which is what the hash splits.
//!
//! RTT bands group flows by their own `min_rtt`, measured after the arm was assigned; the
//! minimum RTT is the path's propagation delay, which the sender's algorithm does not change, so
//! the band is as good as a pre-assignment attribute. Destination prefixes are pre-assignment
//! attributes proper.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use serde::Serialize;

use crate::{quantile::type7, rng::Rng};

use super::client::{self, ClientGroup};
use super::{
    Observation,
    decide::{self, Answer, CellSums, Outcome, PrimaryMetric, Rule, Strata},
    format::quantile_name,
    groups::{Bucket, Group, GroupKind, PrefixList, groups},
    schedule::Kind,
    setup::Design,
    stats::{Diff, DiffUnit, SampleRatio, bootstrap_rel, erfc, normal_quantile, ratio_of_sums, sample_ratio},
    switchback::{self, Place, SwitchbackGroup},
};

/// How a group's answer is judged, by design: its estimate and what the design carries beside it.
enum Judged {
    PerConnection(Option<decide::Estimate>),
    /// A quantile metric's: each arm's completion times, sorted, and the quantile.
    Quantile([Vec<f64>; 2], f64),
    Switchback(switchback::Estimates),
    Client(client::Estimates),
}

impl Judged {
    /// The group's estimate under the run's design, and the strata it leaves out for want of
    /// flows. A switchback's answer is its everyone-switched estimate; the per-connection
    /// strata's flows-per-cell rule does not apply to it (its residuals use every counted flow).
    fn of(obs: &[Observation], g: &Group, opts: &Options) -> (Judged, Vec<decide::LeftOut>) {
        let metric = opts.metric();
        match opts.design {
            Design::Switchback(s) => {
                let e = switchback::estimate(obs, &g.members, &s, &opts.rtt_bands_ms, metric);
                (Judged::Switchback(e), Vec::new())
            }
            Design::Client { salt } => {
                let e = client::estimate(obs, &g.members, salt, split_pct(opts), &opts.rtt_bands_ms, metric);
                let left_out = e.left_out.clone();
                (Judged::Client(e), left_out)
            }
            Design::PerConnection if let Some(q) = metric.quantile() => {
                (Judged::Quantile(values(obs, &g.members, |o| Some(o.client_s())), q), Vec::new())
            }
            Design::PerConnection => {
                let mut strata = Strata::weighted(metric);
                for &i in &g.members {
                    strata.add(&obs[i], &opts.rtt_bands_ms);
                }
                (Judged::PerConnection(strata.estimate()), strata.left_out(&opts.rtt_bands_ms))
            }
        }
    }

    /// Whether there is an estimate to judge (the count of judged groups).
    fn has_estimate(&self) -> bool {
        match self {
            Judged::PerConnection(e) => e.is_some(),
            Judged::Quantile(t, _) => t.iter().all(|t| t.len() >= decide::MIN_CELL),
            Judged::Switchback(e) => e.everyone.is_some(),
            Judged::Client(e) => e.est.is_some(),
        }
    }

    /// The answer at the group's α, and what its design reports beside it.
    fn answer(self, alpha: f64, rule: &Rule) -> (Answer, Option<SwitchbackGroup>, Option<ClientGroup>) {
        match self {
            Judged::Switchback(e) => {
                let (answer, other) = switchback::judge(&e, alpha, rule);
                (answer, Some(other), None)
            }
            Judged::Client(e) => {
                let (answer, clients) = client::judge(&e, alpha, rule);
                (answer, None, Some(clients))
            }
            Judged::PerConnection(est) => (decide::answer(est, alpha, rule), None, None),
            Judged::Quantile(times, q) => (decide::quantile_answer(&times, q, alpha, rule), None, None),
        }
    }
}

/// How to analyse.
#[derive(Clone, Debug)]
pub struct Options {
    /// The arms' algorithms; `None`: the `cc` of each arm's first observation.
    pub arms: Option<[String; 2]>,
    /// The share of new connections asked to go to arm B (`--split 50` is 0.5).
    pub split_b: f64,
    /// Confidence level of the intervals (0.95).
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
    /// Flows per arm a cell needs before anything is claimed about it.
    pub min_flows: usize,
    /// Flows per arm beyond a tail quantile (p95, p99) a cell needs.
    pub min_tail_flows: usize,
    pub by_rtt: bool,
    /// RTT band edges in ms (`[10, 50, 150]`: <10, 10–50, 50–150, ≥150).
    pub rtt_bands_ms: Vec<f64>,
    pub by_prefix: bool,
    pub v4_prefix: u8,
    pub v6_prefix: u8,
    pub prefix_lists: Vec<PrefixList>,
    /// Significance level of the sample-ratio check.
    pub srm_alpha: f64,
    /// How the primary question is decided: α across groups, δ, the smallest absolute change.
    pub rule: Rule,
    /// Compute the secondary tables (bootstrap intervals per quantile); off where only the
    /// decision is wanted (the guardrail's replay, the error-rate harness).
    pub secondary: bool,
    /// How connections got their arms: a switchback's answers are its everyone-switched
    /// estimates ([`switchback`]).
    pub design: Design,
    /// How the answer weighs its strata (`--metric`); `None`: the design's
    /// ([`PrimaryMetric::default_for`]).
    pub metric: Option<PrimaryMetric>,
}

impl Options {
    /// The metric the answers are in: the one asked, or the design's.
    pub(crate) fn metric(&self) -> PrimaryMetric {
        self.metric.unwrap_or_else(|| PrimaryMetric::default_for(&self.design))
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            arms: None,
            split_b: 0.5,
            level: 0.95,
            resamples: 2000,
            seed: 1,
            min_flows: 30,
            min_tail_flows: 5,
            by_rtt: true,
            rtt_bands_ms: vec![10.0, 50.0, 150.0],
            by_prefix: true,
            v4_prefix: 24,
            v6_prefix: 48,
            prefix_lists: Vec::new(),
            srm_alpha: 0.001,
            rule: Rule::default(),
            secondary: true,
            design: Design::PerConnection,
            metric: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MetricKind {
    Completion,
    Goodput,
    Srtt,
    RttInflation,
    RetransRate,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Ok,
    /// Fewer flows in an arm than the cell needs: nothing is claimed.
    TooFewFlows,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Metric {
    /// Stable name, e.g. `completion_p95_256k_4m`, `goodput_p50`, `retrans_rate`.
    pub(crate) key: String,
    pub(crate) kind: MetricKind,
    pub(crate) bucket: Option<Bucket>,
    pub(crate) quantile: Option<f64>,
    /// For people, e.g. `p95 completion 256 KB–4 MB`.
    pub(crate) label: String,
    /// Unit of `a` and `b`: `s`, `bit/s`, `us`, `ratio`, `share` (0..1).
    pub(crate) unit: &'static str,
    pub(crate) higher_is_better: bool,
    /// Flows per arm with a value for this metric.
    pub(crate) n: [usize; 2],
    /// The arms' values (`null` without flows).
    pub(crate) a: Option<f64>,
    pub(crate) b: Option<f64>,
    /// `null` when `status` is `too_few_flows` (or A's value is 0, so no relative change exists).
    pub(crate) diff: Option<Diff>,
    pub(crate) status: Status,
    /// `too_few_flows`: the flows per arm this cell needs (a tail quantile needs many).
    pub(crate) needs: Option<usize>,
}

impl Metric {
    /// The arm this metric's significant difference favours (0 = A, 1 = B).
    pub(crate) fn better_arm(&self) -> Option<usize> {
        let d = self.diff.as_ref().filter(|d| d.significant)?;
        Some(usize::from((d.estimate > 0.0) == self.higher_is_better))
    }
}

/// A group's verdict: the answer to the primary question (see [`decide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// B's completion times worse (arm A better).
    ABetter,
    BBetter,
    /// No difference larger than δ.
    NoDifference,
    /// Not decided yet: more flows would decide.
    Inconclusive,
    /// No stratum has enough flows in both arms.
    TooFewFlows,
    /// The service set its own algorithm on too many flows: the arms are not what was assigned,
    /// and nothing is concluded.
    ArmsOverridden,
}

impl Verdict {
    /// Every verdict, in the order a panel lists them.
    pub(crate) const ALL: [Verdict; 6] = [
        Verdict::ABetter,
        Verdict::BBetter,
        Verdict::NoDifference,
        Verdict::Inconclusive,
        Verdict::TooFewFlows,
        Verdict::ArmsOverridden,
    ];

    fn of(o: Outcome) -> Verdict {
        match o {
            Outcome::BBetter => Verdict::BBetter,
            Outcome::BWorse => Verdict::ABetter,
            Outcome::NoDifference => Verdict::NoDifference,
            Outcome::Inconclusive => Verdict::Inconclusive,
            Outcome::TooFewFlows => Verdict::TooFewFlows,
        }
    }

    /// The arm it finds better (0 = A, 1 = B).
    pub fn better_arm(self) -> Option<usize> {
        match self {
            Verdict::ABetter => Some(0),
            Verdict::BBetter => Some(1),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ArmStats {
    pub(crate) flows: usize,
    pub(crate) bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupResult {
    pub kind: GroupKind,
    pub label: String,
    pub(crate) prefixes: Vec<IpNet>,
    /// Per arm (A, B).
    pub(crate) arms: [ArmStats; 2],
    pub verdict: Verdict,
    /// The primary question's answer: B's effect on completion time (as the client feels it),
    /// stratified, with its always-valid interval.
    pub answer: Answer,
    /// Strata with flows the answer leaves out (fewer than 10 in an arm), most time first.
    pub(crate) left_out: Vec<decide::LeftOut>,
    /// Secondary metrics: shown, never deciding.
    pub(crate) metrics: Vec<Metric>,
    /// Indices into the observations (for the figure).
    #[serde(skip)]
    pub(crate) members: Vec<usize>,
    /// The design the answer came from, under a switchback (`switchback`: B for everyone
    /// against A for everyone) or by client (`client`: B for whole clients against A for whole
    /// clients); absent for a per-connection A/B.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) design: Option<&'static str>,
    /// A switchback's other estimates: the per-connection A/B on the same traffic, the
    /// interference, the flows the schedule left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) switchback: Option<SwitchbackGroup>,
    /// A client design's clients per arm and its flows on another arm than their client's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) clients: Option<ClientGroup>,
}

impl GroupResult {
    pub(crate) fn flows(&self) -> usize {
        self.arms[0].flows + self.arms[1].flows
    }
}

/// Destination prefixes left out of the report for want of flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Sparse {
    pub(crate) groups: usize,
    pub(crate) flows: usize,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ArmInfo {
    /// The algorithm.
    pub(crate) cc: String,
    pub(crate) flows: usize,
    pub(crate) bytes: u64,
}

/// Whether each flow ran its arm's algorithm for its whole life.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Integrity {
    /// Flows per arm left out: they ran another algorithm than their arm's, or more than one
    /// (the application set its own with setsockopt(TCP_CONGESTION)).
    pub(crate) excluded: [usize; 2],
    /// Of all flows.
    pub(crate) excluded_share: f64,
    /// The algorithms they ran instead, most frequent first.
    pub(crate) ran_instead: Vec<String>,
    /// More than [`MAX_OVERRIDDEN`] of the flows: the service sets its own algorithm, and the
    /// experiment concludes nothing.
    pub(crate) overridden: bool,
    /// Response sizes where more than [`MAX_OVERRIDDEN`] of the flows ran another algorithm
    /// though all flows together stay under it (a service that sets its own for its largest
    /// responses): what the arms are said to do at that size is the service's doing.
    pub(crate) concentrated: Vec<Concentrated>,
}

/// Overrides concentrated in one response size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Concentrated {
    pub(crate) bucket: Bucket,
    /// Flows of that size left out, and all flows of that size.
    pub(crate) excluded: usize,
    pub(crate) flows: usize,
}

/// Share of flows that may run another algorithm than their arm's before nothing is concluded.
pub(crate) const MAX_OVERRIDDEN: f64 = 0.02;

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub(crate) arms: [ArmInfo; 2],
    pub(crate) level: f64,
    pub(crate) resamples: usize,
    pub(crate) seed: u64,
    pub(crate) min_flows: usize,
    /// The decision's rules: family-wise α, δ, the smallest absolute change.
    pub(crate) alpha: f64,
    pub(crate) delta_pct: f64,
    pub(crate) min_effect_ms: f64,
    /// Groups with an answer (α was split at the start: [`AlphaSplit`]).
    pub(crate) groups_judged: usize,
    pub(crate) integrity: Integrity,
    pub(crate) sample_ratio: SampleRatio,
    /// "all flows" first, then RTT bands, prefixes with enough flows, lists.
    pub groups: Vec<GroupResult>,
    pub(crate) sparse_prefixes: Sparse,
    /// The experiment's flows per second (first to last finish), for "≈ T more" estimates.
    pub(crate) flows_per_s: Option<f64>,
    /// Flows per arm still running when it ended (after the drain): in the analysis with their
    /// elapsed time as their completion time (see [`Observation::censored`]).
    pub(crate) in_flight: [usize; 2],
    #[serde(skip)]
    pub(crate) design: Design,
    /// How the answers weigh their strata (the one asked, or the design's).
    pub(crate) metric: PrimaryMetric,
}

/// The arms' algorithms as the observations say: the algorithm most of each arm's flows ran
/// (`?` without flows).
pub(crate) fn arm_names(obs: &[Observation]) -> [String; 2] {
    [0, 1].map(|arm| {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for o in obs.iter().filter(|o| o.arm == arm) {
            *counts.entry(o.cc.as_str()).or_default() += 1;
        }
        counts.into_iter().max_by_key(|&(_, n)| n).map_or_else(|| "?".to_string(), |(cc, _)| cc.to_string())
    })
}

/// Whether a flow ran its arm's algorithm, and only that.
pub(crate) fn ran_its_arm(o: &Observation, names: &[String; 2]) -> bool {
    !o.switched && names.get(o.arm).is_some_and(|n| super::Arm::cc_of(n) == o.cc)
}

fn integrity(obs: &[Observation], names: &[String; 2]) -> Integrity {
    let mut excluded = [0, 0];
    let mut instead: BTreeMap<&str, usize> = BTreeMap::new();
    for o in obs.iter().filter(|o| !ran_its_arm(o, names)) {
        if let Some(n) = excluded.get_mut(o.arm) {
            *n += 1;
            *instead.entry(o.cc.as_str()).or_default() += 1;
        }
    }
    let share = if obs.is_empty() { 0.0 } else { (excluded[0] + excluded[1]) as f64 / obs.len() as f64 };
    let mut ran_instead: Vec<(&str, usize)> = instead.into_iter().collect();
    ran_instead.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    let overridden = share > MAX_OVERRIDDEN;
    // Per size: a few overrides in all, but many of one size, move that size's comparison.
    let mut by_size: BTreeMap<Bucket, (usize, usize)> = BTreeMap::new();
    for o in obs {
        let e = by_size.entry(Bucket::of(o.bytes)).or_default();
        e.1 += 1;
        e.0 += usize::from(!ran_its_arm(o, names));
    }
    let concentrated = by_size
        .into_iter()
        .filter(|&(_, (excluded, flows))| {
            !overridden && excluded >= 3 && excluded as f64 > MAX_OVERRIDDEN * flows as f64
        })
        .map(|(bucket, (excluded, flows))| Concentrated { bucket, excluded, flows })
        .collect();
    Integrity {
        excluded,
        excluded_share: share,
        ran_instead: ran_instead.into_iter().map(|(cc, _)| cc.to_string()).collect(),
        overridden,
        concentrated,
    }
}

/// How the family's α is split among the groups, fixed before the first flow: the groups declared
/// up front (all flows, each RTT band, each prefix list) share half of it equally (all of it when
/// destination prefixes are not judged), and the destination prefixes the other half, the j-th to
/// reach `min_flows` flows per arm getting `(α/2)·6/(π²j²)` (a series that sums to α/2). A
/// group's level is thus known when it first appears and never changes as other groups come: a
/// group first judged at α/3 no longer drifts to α/14 as prefixes fill up, and the family-wise
/// rate stays at most α over every look (each group's confidence sequence holds at its level).
struct AlphaSplit {
    /// Each declared group's.
    declared: f64,
    /// The prefixes' share, all together.
    prefixes: f64,
}

impl AlphaSplit {
    fn new(opts: &Options) -> Self {
        let bands = if opts.by_rtt { opts.rtt_bands_ms.len() + 1 } else { 0 };
        let declared = 1 + bands + opts.prefix_lists.len();
        let shared = if opts.by_prefix { opts.rule.alpha / 2.0 } else { opts.rule.alpha };
        AlphaSplit { declared: shared / declared as f64, prefixes: opts.rule.alpha - shared }
    }

    /// Each group's α, in order: prefixes by when they reached `min_flows` per arm (finish time
    /// of the flow that brought the second arm there; ties, and recordings without times, by
    /// prefix).
    fn of<'g>(&self, obs: &[Observation], groups: impl Iterator<Item = &'g Group>, min_flows: usize) -> Vec<f64> {
        let groups: Vec<&Group> = groups.collect();
        let mut prefixes: Vec<(f64, &str, usize)> = groups
            .iter()
            .enumerate()
            .filter(|(_, g)| g.kind == GroupKind::Prefix)
            .map(|(i, g)| (reached_at(obs, &g.members, min_flows), g.label.as_str(), i))
            .collect();
        prefixes.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(y.1)));
        let mut out = vec![self.declared; groups.len()];
        for (j, (_, _, i)) in prefixes.into_iter().enumerate() {
            let j = (j + 1) as f64;
            out[i] = self.prefixes * 6.0 / (std::f64::consts::PI * std::f64::consts::PI * j * j);
        }
        out
    }
}

/// When `members` first had `min_flows` finished flows in each arm (Unix seconds; infinity for
/// flows without a finish time, as in the oldest recordings).
fn reached_at(obs: &[Observation], members: &[usize], min_flows: usize) -> f64 {
    let mut ends: Vec<(f64, usize)> =
        members.iter().map(|&i| (obs[i].end_ts.unwrap_or(f64::INFINITY), obs[i].arm)).collect();
    ends.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut n = [0usize; 2];
    for (t, arm) in ends {
        n[arm.min(1)] += 1;
        if n[0] >= min_flows && n[1] >= min_flows {
            return t;
        }
    }
    f64::INFINITY
}

/// The whole analysis of a finished (or running) experiment.
pub fn analyze(obs: &[Observation], opts: &Options) -> Analysis {
    let names = opts.arms.clone().unwrap_or_else(|| arm_names(obs));
    let integrity = integrity(obs, &names);
    let keep: Vec<bool> = obs.iter().map(|o| ran_its_arm(o, &names)).collect();
    let all = arm_stats(obs, &(0..obs.len()).filter(|&i| keep[i]).collect::<Vec<_>>());
    let mut kept_groups = Vec::new();
    let mut sparse = Sparse::default();
    for g in groups(obs, &keep, opts) {
        if g.kind == GroupKind::Prefix {
            let s = arm_stats(obs, &g.members);
            // A server sees thousands of /24s with a handful of flows each: listing them only to
            // say "too few flows" would bury the ones that can be judged.
            if s[0].flows < opts.min_flows || s[1].flows < opts.min_flows {
                sparse.groups += 1;
                sparse.flows += g.members.len();
                continue;
            }
        }
        let (judged, left_out) = Judged::of(obs, &g, opts);
        kept_groups.push((g, judged, left_out));
    }
    let judged = kept_groups.iter().filter(|(_, j, _)| j.has_estimate()).count();
    let alphas = AlphaSplit::new(opts).of(obs, kept_groups.iter().map(|(g, ..)| g), opts.min_flows);
    let results = kept_groups
        .into_iter()
        .zip(alphas)
        .map(|((g, judged, left_out), alpha_g)| {
            let (answer, switchback, clients) = judged.answer(alpha_g, &opts.rule);
            let verdict = if integrity.overridden { Verdict::ArmsOverridden } else { Verdict::of(answer.outcome) };
            let metrics =
                if opts.secondary { secondary_metrics(obs, &shown(obs, &g.members, opts), opts) } else { Vec::new() };
            GroupResult {
                kind: g.kind,
                label: g.label.clone(),
                prefixes: g.nets,
                arms: arm_stats(obs, &g.members),
                verdict,
                answer,
                left_out,
                metrics,
                members: g.members,
                design: answered_by(&opts.design),
                switchback,
                clients,
            }
        })
        .collect();
    Analysis {
        groups_judged: judged,
        integrity,
        sample_ratio: drawn_sample_ratio(obs, opts),
        groups: results,
        sparse_prefixes: sparse,
        flows_per_s: flows_per_s(obs),
        in_flight: [0, 1].map(|arm| obs.iter().filter(|o| o.censored && o.arm == arm).count()),
        ..Analysis::of_run(names, all, opts)
    }
}

/// The sample ratio of every flow the kernel gave an arm, whether it ran it or not: the check is
/// of the assignment. Flows whose service overrode the arm (left out of the answers) are counted
/// in the integrity line as what they are, not read as flows lost. A switchback draws arms only
/// in its mixed blocks: the split is checked there. A client design's hash splits clients, not
/// flows: the split is checked on clients.
fn drawn_sample_ratio(obs: &[Observation], opts: &Options) -> SampleRatio {
    let drawn: Vec<usize> = match opts.design {
        Design::PerConnection | Design::Client { .. } => (0..obs.len()).collect(),
        Design::Switchback(s) => (0..obs.len())
            .filter(|&i| matches!(switchback::place(&obs[i], &s), Place::Counted(_, Kind::Mixed)))
            .collect(),
    };
    let assigned = match opts.design {
        Design::Client { .. } => {
            let clients =
                |arm| drawn.iter().filter(|&&i| obs[i].arm == arm).map(|&i| obs[i].peer).collect::<BTreeSet<_>>();
            [0, 1].map(|arm| clients(arm).len())
        }
        _ => arm_stats(obs, &drawn).map(|s| s.flows),
    };
    sample_ratio(assigned, opts.split_b, opts.srm_alpha)
}

/// Finished flows per second over the span of their ends. Flows still running at the end did
/// not finish then: not in the rate.
fn flows_per_s(obs: &[Observation]) -> Option<f64> {
    let ends: Vec<f64> = obs.iter().filter(|o| !o.censored).filter_map(|o| o.end_ts).collect();
    let span =
        ends.iter().copied().fold(f64::NEG_INFINITY, f64::max) - ends.iter().copied().fold(f64::INFINITY, f64::min);
    (ends.len() > 1 && span > 0.0).then(|| ends.len() as f64 / span)
}

impl Analysis {
    /// What every analysis says of the run and its rule, before its groups.
    fn of_run([na, nb]: [String; 2], all: [ArmStats; 2], opts: &Options) -> Analysis {
        Analysis {
            arms: [
                ArmInfo { cc: na, flows: all[0].flows, bytes: all[0].bytes },
                ArmInfo { cc: nb, flows: all[1].flows, bytes: all[1].bytes },
            ],
            level: opts.level,
            resamples: opts.resamples,
            seed: opts.seed,
            min_flows: opts.min_flows,
            alpha: opts.rule.alpha,
            delta_pct: opts.rule.delta * 100.0,
            min_effect_ms: opts.rule.min_abs_s * 1e3,
            groups_judged: 0,
            integrity: Integrity::default(),
            sample_ratio: sample_ratio([0, 0], opts.split_b, opts.srm_alpha),
            groups: Vec::new(),
            sparse_prefixes: Sparse::default(),
            flows_per_s: None,
            in_flight: [0, 0],
            design: opts.design,
            metric: opts.metric(),
        }
    }
}

/// One arm's flows of one stratum, as a fleet's sums give them: the moments and the bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CellTotals {
    pub(crate) sums: CellSums,
    pub(crate) bytes: u64,
}

/// The flows of some clients known only by their sums: per stratum and arm, and a switchback's
/// tallies per RTT band.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pool {
    pub(crate) cells: BTreeMap<decide::Key, [CellTotals; 2]>,
    pub(crate) tallies: BTreeMap<usize, switchback::Tally>,
}

/// An experiment's sums (a fleet's, added across hosts): all flows', each `--prefix-list`
/// group's (by its label, in `opts.prefix_lists`' order), and each host group's (`--by-host`:
/// its label, e.g. `hosts dc="fra"`, in the order given).
#[derive(Clone, Debug, Default)]
pub(crate) struct Pools {
    pub(crate) all: Pool,
    pub(crate) lists: Vec<Pool>,
    pub(crate) hosts: Vec<(String, Pool)>,
}

/// The analysis of an experiment known only by its sums (`pools`), with `overridden` flows per
/// arm left out of them: all flows, each RTT band and each prefix-list group, judged as
/// [`analyze`] judges them, at the same α (the destination prefixes' share kept for them, though
/// sums have none: a host's `--analyze` and its fleet's answer at the same level). A
/// switchback's answers come from its tallies, added across hosts.
pub(crate) fn of_sums(pools: &Pools, overridden: [usize; 2], opts: &Options) -> Analysis {
    let (cells, tallies) = (&pools.all.cells, &pools.all.tallies);
    let names = opts.arms.clone().unwrap_or_default();
    let arms_of = |cells: &BTreeMap<decide::Key, [CellTotals; 2]>, band: Option<usize>| {
        let mut s = [ArmStats::default(); 2];
        for (_, arms) in cells.iter().filter(|((b, _), _)| band.is_none_or(|x| x == *b)) {
            for (stats, cell) in s.iter_mut().zip(arms) {
                stats.flows += cell.sums.n;
                stats.bytes += cell.bytes;
            }
        }
        s
    };
    let alpha = AlphaSplit::new(opts).declared;
    let bands = (1..=opts.rtt_bands_ms.len() + 1).filter(|_| opts.by_rtt).map(Some);
    let mut groups: Vec<GroupResult> = std::iter::once(None)
        .chain(bands)
        .filter(|band| arms_of(cells, *band) != [ArmStats::default(); 2] || band.is_none())
        .map(|band| {
            let (kind, label) = match band {
                None => (GroupKind::All, "all flows".to_string()),
                Some(b) => (GroupKind::Rtt, crate::units::band_label(b, &opts.rtt_bands_ms)),
            };
            sums_group((kind, label), band, &pools.all, alpha, opts, arms_of(cells, band))
        })
        .collect();
    // The prefix-list groups with flows, as a host's analysis shows them.
    for (list, pool) in opts.prefix_lists.iter().zip(&pools.lists) {
        let arms = arms_of(&pool.cells, None);
        if arms != [ArmStats::default(); 2] {
            groups.push(sums_group((GroupKind::List, list.label.clone()), None, pool, alpha, opts, arms));
        }
    }
    // Host groups take the share a host keeps for its destination prefixes (a fleet's sums have
    // none), split as it splits it: the j-th at share·6/(π²j²), so the declared groups' levels
    // are a host's whatever the host groups.
    let share = AlphaSplit::new(opts).prefixes;
    for (j, (label, pool)) in pools.hosts.iter().enumerate() {
        let j = (j + 1) as f64;
        let alpha = share * 6.0 / (std::f64::consts::PI * std::f64::consts::PI * j * j);
        let arms = arms_of(&pool.cells, None);
        groups.push(sums_group((GroupKind::Hosts, label.clone()), None, pool, alpha, opts, arms));
    }
    let all = arms_of(cells, None);
    let total = all[0].flows + all[1].flows + overridden[0] + overridden[1];
    let share = if total == 0 { 0.0 } else { (overridden[0] + overridden[1]) as f64 / total as f64 };
    let integrity = Integrity {
        excluded: overridden,
        excluded_share: share,
        overridden: share > MAX_OVERRIDDEN,
        ..Integrity::default()
    };
    let groups = if integrity.overridden {
        groups.into_iter().map(|g| GroupResult { verdict: Verdict::ArmsOverridden, ..g }).collect()
    } else {
        groups
    };
    Analysis {
        groups_judged: groups.iter().filter(|g| g.answer.outcome != Outcome::TooFewFlows).count(),
        // A switchback draws arms in its mixed blocks alone: the split is checked there.
        sample_ratio: sample_ratio(
            match opts.design {
                Design::Switchback(_) => switchback::Tally::sum(tallies.values()).mixed(),
                Design::PerConnection | Design::Client { .. } => {
                    [all[0].flows + overridden[0], all[1].flows + overridden[1]]
                }
            },
            opts.split_b,
            opts.srm_alpha,
        ),
        integrity,
        groups,
        ..Analysis::of_run(names, all, opts)
    }
}

/// The design a group's answer names (`None`: the per-connection A/B, whose reports have no
/// design per group, as before there were others).
fn answered_by(design: &Design) -> Option<&'static str> {
    (*design != Design::PerConnection).then(|| super::record::design_key(design))
}

/// One group of [`of_sums`] (`kind` and `label`: all flows, an RTT band, a prefix-list group) at
/// level `alpha`, from `pool`'s sums of RTT band `band` (or all of them), its flows per arm
/// `arms`: a per-connection answer from the strata's sums, a switchback's from its tallies.
fn sums_group(
    (kind, label): (GroupKind, String),
    band: Option<usize>,
    pool: &Pool,
    alpha: f64,
    opts: &Options,
    arms: [ArmStats; 2],
) -> GroupResult {
    let metric = opts.metric();
    let (cells, tallies) = (&pool.cells, &pool.tallies);
    let (answer, left_out, switchback) = match opts.design {
        Design::Switchback(_) => {
            let tally = match band {
                None => switchback::Tally::sum(tallies.values()),
                Some(b) => tallies.get(&b).cloned().unwrap_or_default(),
            };
            let (answer, group) = switchback::judge(&tally.estimates(metric), alpha, &opts.rule);
            (answer, Vec::new(), Some(group))
        }
        Design::PerConnection | Design::Client { .. } => {
            let strata = Strata::of_sums(
                metric,
                cells
                    .iter()
                    .filter(|((b, _), _)| band.is_none_or(|x| x == *b))
                    .map(|(key, arms)| (*key, arms.map(|c| c.sums))),
            );
            (decide::answer(strata.estimate(), alpha, &opts.rule), strata.left_out(&opts.rtt_bands_ms), None)
        }
    };
    GroupResult {
        kind,
        label,
        prefixes: Vec::new(),
        arms,
        verdict: Verdict::of(answer.outcome),
        answer,
        left_out,
        metrics: Vec::new(),
        members: Vec::new(),
        design: answered_by(&opts.design),
        switchback,
        clients: None,
    }
}

/// The flows a group's secondary tables describe: all its members for a per-connection A/B;
/// under a switchback, those of its A and B blocks after their burn-in (everyone on A against
/// everyone on B, as its answer).
fn shown(obs: &[Observation], members: &[usize], opts: &Options) -> Vec<usize> {
    match opts.design {
        Design::PerConnection | Design::Client { .. } => members.to_vec(),
        Design::Switchback(s) => members
            .iter()
            .copied()
            .filter(|&i| matches!(switchback::place(&obs[i], &s), Place::Counted(_, Kind::A | Kind::B)))
            .collect(),
    }
}

/// The share of connections (clients, by design) asked to go to B, as the kernel's percent.
fn split_pct(opts: &Options) -> u32 {
    (opts.split_b * 100.0).round() as u32
}

fn arm_stats(obs: &[Observation], members: &[usize]) -> [ArmStats; 2] {
    let mut s = [ArmStats::default(); 2];
    for &i in members {
        let o = &obs[i];
        if let Some(a) = s.get_mut(o.arm) {
            a.flows += 1;
            a.bytes += o.bytes;
        }
    }
    s
}

/// The values of `f` for each arm's members, sorted, without NaNs.
fn values(obs: &[Observation], members: &[usize], f: impl Fn(&Observation) -> Option<f64>) -> [Vec<f64>; 2] {
    let mut v = [Vec::new(), Vec::new()];
    for &i in members {
        let o = &obs[i];
        if let (Some(arm), Some(x)) = (v.get_mut(o.arm), f(o).filter(|x| x.is_finite())) {
            arm.push(x);
        }
    }
    for arm in &mut v {
        arm.sort_by(f64::total_cmp);
    }
    v
}

/// Flows per arm a quantile needs: `min_flows`, and `min_tail` flows beyond the quantile.
fn needed(q: f64, opts: &Options) -> usize {
    let tail = q.min(1.0 - q).max(1e-9);
    opts.min_flows.max((opts.min_tail_flows as f64 / tail).ceil() as usize)
}

/// A seed per metric, so that a result does not depend on what else was computed before it, and
/// the same flows get the same interval whichever group they are looked at in (an RTT band and
/// a prefix holding the same flows must not disagree by Monte Carlo noise).
fn seed_for(seed: u64, key: &str) -> u64 {
    // FNV-1a over the name, then mixed with the user's seed.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    Rng::new(seed ^ h).next_u64()
}

struct QuantileSpec<'a> {
    key: String,
    label: String,
    kind: MetricKind,
    bucket: Option<Bucket>,
    q: f64,
    unit: &'static str,
    higher_is_better: bool,
    values: &'a [Vec<f64>; 2],
}

fn quantile_metric(spec: QuantileSpec, opts: &Options) -> Metric {
    let [a, b] = spec.values;
    let n = [a.len(), b.len()];
    let need = needed(spec.q, opts);
    let ok = n[0] >= need && n[1] >= need;
    let diff =
        if ok { bootstrap_rel(a, b, spec.q, opts.resamples, opts.level, seed_for(opts.seed, &spec.key)) } else { None };
    Metric {
        key: spec.key,
        kind: spec.kind,
        bucket: spec.bucket,
        quantile: Some(spec.q),
        label: spec.label,
        unit: spec.unit,
        higher_is_better: spec.higher_is_better,
        n,
        a: (!a.is_empty()).then(|| type7(a, spec.q)),
        b: (!b.is_empty()).then(|| type7(b, spec.q)),
        diff,
        status: if ok { Status::Ok } else { Status::TooFewFlows },
        needs: (!ok).then_some(need),
    }
}

/// The tables shown beside the answer: completion time (as the client feels it) by size bucket
/// at p50/p95/p99, goodput, RTT, RTT inflation and retransmissions, each with a fixed-level
/// bootstrap interval. They describe; they do not decide (see [`decide`]).
fn secondary_metrics(obs: &[Observation], members: &[usize], opts: &Options) -> Vec<Metric> {
    let mut metrics = Vec::new();
    for bucket in Bucket::ALL {
        let v = values(obs, members, |o| (Bucket::of(o.bytes) == bucket).then_some(o.client_s()));
        if v[0].is_empty() && v[1].is_empty() {
            continue;
        }
        for q in [0.5, 0.95, 0.99] {
            let spec = QuantileSpec {
                key: format!("completion_{}_{}", quantile_name(q), bucket.key()),
                label: format!("{} completion {}", quantile_name(q), bucket.label()),
                kind: MetricKind::Completion,
                bucket: Some(bucket),
                q,
                unit: "s",
                higher_is_better: false,
                values: &v,
            };
            metrics.push(quantile_metric(spec, opts));
        }
    }
    let goodput = values(obs, members, |o| o.goodput_bps.map(|x| x as f64));
    let srtt = values(obs, members, |o| o.srtt_median_us.map(f64::from));
    let inflation = values(obs, members, |o| match (o.srtt_median_us, o.min_rtt_us) {
        (Some(s), Some(m)) if m > 0 => Some(f64::from(s) / f64::from(m)),
        _ => None,
    });
    let other = |key: &str, label: &str, kind, q, unit, higher_is_better, values| QuantileSpec {
        key: key.into(),
        label: label.into(),
        kind,
        bucket: None,
        q,
        unit,
        higher_is_better,
        values,
    };
    for spec in [
        other("goodput_p50", "median goodput", MetricKind::Goodput, 0.5, "bit/s", true, &goodput),
        other("srtt_p50", "p50 srtt", MetricKind::Srtt, 0.5, "us", false, &srtt),
        other("srtt_p95", "p95 srtt", MetricKind::Srtt, 0.95, "us", false, &srtt),
        other("rtt_inflation_p50", "median RTT inflation", MetricKind::RttInflation, 0.5, "ratio", false, &inflation),
    ] {
        metrics.push(quantile_metric(spec, opts));
    }
    metrics.push(retrans_metric(obs, members, opts));
    metrics
}

/// Retransmit rate per arm with a delta-method interval for B − A (percentage points).
fn retrans_metric(obs: &[Observation], members: &[usize], opts: &Options) -> Metric {
    let mut flows: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for &i in members {
        let o = &obs[i];
        if let Some(arm) = flows.get_mut(o.arm) {
            arm.push((f64::from(o.retrans), f64::from(o.data_segs_out)));
        }
    }
    let n = [flows[0].len(), flows[1].len()];
    let rates = flows.each_ref().map(|f| ratio_of_sums(f));
    let ok = n[0] >= opts.min_flows && n[1] >= opts.min_flows && rates.iter().all(Option::is_some);
    let diff = ok.then(|| {
        let (ra, va) = rates[0].expect("checked");
        let (rb, vb) = rates[1].expect("checked");
        let est = (rb - ra) * 100.0;
        let se = (va + vb).sqrt() * 100.0;
        let z = normal_quantile(0.5 + opts.level / 2.0);
        let (low, high) = (est - z * se, est + z * se);
        let p_value = if se > 0.0 { erfc((est / se).abs() / std::f64::consts::SQRT_2) } else { 1.0 };
        Diff {
            unit: DiffUnit::Points,
            estimate: est,
            low,
            high,
            p_value,
            significant: se > 0.0 && (low > 0.0 || high < 0.0),
        }
    });
    Metric {
        key: "retrans_rate".into(),
        kind: MetricKind::RetransRate,
        bucket: None,
        quantile: None,
        label: "retransmit rate".into(),
        unit: "share",
        higher_is_better: false,
        n,
        a: rates[0].map(|r| r.0),
        b: rates[1].map(|r| r.0),
        diff,
        status: if ok { Status::Ok } else { Status::TooFewFlows },
        needs: (!ok).then_some(opts.min_flows),
    }
}
#[cfg(test)]
pub(crate) mod tests {
    /// `g` answers as `w`: the same group, verdict, flows per arm and level, the estimate and
    /// interval ends to 1e-9 (a fleet's sums against the analysis of the flows themselves).
    pub(crate) fn assert_same_answer(g: &super::GroupResult, w: &super::GroupResult) {
        assert_eq!((&g.label, g.verdict, g.arms, g.answer.level), (&w.label, w.verdict, w.arms, w.answer.level));
        for (x, y) in [
            (g.answer.effect_pct, w.answer.effect_pct),
            (g.answer.low_pct, w.answer.low_pct),
            (g.answer.high_pct, w.answer.high_pct),
        ] {
            let (x, y) = (x.unwrap(), y.unwrap());
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{}: {x} vs {y}", g.label);
        }
    }

    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    /// A client population for synthetic experiments.
    pub(crate) struct Population {
        /// First three octets of the clients' /24.
        pub(crate) net: [u8; 3],
        pub(crate) rtt_ms: f64,
        /// Completion time multiplier per arm (1.0 = the population's own).
        pub(crate) slowdown: [f64; 2],
        pub(crate) flows_per_arm: usize,
    }

    /// A population of `flows_per_arm` flows per arm from `net`, `rtt_ms` away, each arm's
    /// completion times times `slowdown`.
    pub(crate) fn pop(net: [u8; 3], rtt_ms: f64, slowdown: [f64; 2], flows_per_arm: usize) -> Population {
        Population { net, rtt_ms, slowdown, flows_per_arm }
    }

    /// A heavy-tailed response size: half under 16 KB, 30% 20–220 KB, 15% 0.3–3.3 MB and 5% from
    /// 5 MB to 5 MB + `top`.
    pub(crate) fn response_bytes(rng: &mut Rng, top: f64) -> u64 {
        let u = rng.uniform();
        (match u {
            u if u < 0.5 => 500.0 + rng.uniform() * 15_000.0,
            u if u < 0.8 => 20_000.0 + rng.uniform() * 200_000.0,
            u if u < 0.95 => 300_000.0 + rng.uniform() * 3_000_000.0,
            _ => 5_000_000.0 + rng.uniform() * top,
        }) as u64
    }

    /// Flows of `pops` in both arms: response sizes mixed over the four buckets, completion time
    /// a few round trips per doubling of the size with lognormal noise, as a server sees them;
    /// accepted connections whose handshake took one round trip. Flows of both arms interleave
    /// in completion order, one every 10 ms.
    pub(crate) fn synth(pops: &[Population], seed: u64) -> Vec<Observation> {
        let mut rng = Rng::new(seed);
        let mut out = Vec::new();
        for p in pops {
            for _ in 0..p.flows_per_arm {
                for arm in 0..2 {
                    let bytes = response_bytes(&mut rng, 15_000_000.0);
                    let rtt = p.rtt_ms / 1e3;
                    let rounds = 1.0 + (bytes as f64 / 10_000.0).max(1.0).log2();
                    let duration_s = rtt * rounds * p.slowdown[arm] * (0.4 * rng.normal()).exp();
                    let segs = (bytes / 1448 + 1) as u32;
                    out.push(Observation {
                        arm,
                        cc: ["cubic", "bbr"][arm].to_string(),
                        switched: false,
                        peer: IpAddr::V4(Ipv4Addr::new(p.net[0], p.net[1], p.net[2], (rng.next_u64() % 250) as u8 + 1)),
                        bytes,
                        duration_s,
                        handshake_s: rtt,
                        end_ts: None,
                        goodput_bps: Some((bytes as f64 * 8.0 / duration_s) as u64),
                        srtt_median_us: Some((p.rtt_ms * 1e3 * (1.1 + 0.2 * rng.uniform())) as u32),
                        min_rtt_us: Some((p.rtt_ms * 1e3) as u32),
                        retrans: (rng.uniform() * rng.uniform() * f64::from(segs) * 0.05) as u32,
                        data_segs_out: segs,
                        cgroup_id: Some(7),
                        cgroup: Some("/system.slice/nginx.service".into()),
                        censored: false,
                        status_quo: None,
                        host: None,
                    });
                }
            }
        }
        // Populations finish interleaved, as a server's clients do.
        let mut keyed: Vec<(u64, Observation)> = out.into_iter().map(|o| (rng.next_u64(), o)).collect();
        keyed.sort_by_key(|(k, _)| *k);
        keyed
            .into_iter()
            .enumerate()
            .map(|(i, (_, o))| Observation { end_ts: Some(1_700_000_000.0 + i as f64 * 0.01), ..o })
            .collect()
    }

    pub(crate) fn lossy_and_clean(seed: u64) -> Vec<Observation> {
        synth(
            &[
                Population { net: [203, 0, 113], rtt_ms: 150.0, slowdown: [1.0, 0.6], flows_per_arm: 600 },
                Population { net: [10, 0, 0], rtt_ms: 2.0, slowdown: [1.0, 1.0], flows_per_arm: 600 },
            ],
            seed,
        )
    }

    pub(crate) fn group<'a>(a: &'a Analysis, label: &str) -> &'a GroupResult {
        a.groups.iter().find(|g| g.label == label).unwrap_or_else(|| panic!("no group {label}"))
    }

    /// α is split before the first flow: the declared groups (all flows, four RTT bands) share
    /// half, and a prefix keeps the level it had when it first reached `min_flows` per arm however
    /// many prefixes come after it; the whole family stays within α.
    #[test]
    fn a_groups_alpha_is_fixed_when_it_first_appears() {
        let level_of = |a: &Analysis, label: &str| group(a, label).answer.level;
        // The far clients' flows all finish first: the near /24 reaches `min_flows` per arm only
        // in the second half.
        let mut obs = lossy_and_clean(2);
        for (i, o) in obs.iter_mut().enumerate() {
            let far = o.min_rtt_us.is_some_and(|r| r > 100_000);
            o.end_ts = Some(if far { 0.0 } else { 1e6 } + i as f64);
        }
        obs.sort_by(|x, y| x.end_ts.unwrap().total_cmp(&y.end_ts.unwrap()));
        let opts = Options::default();
        let early = analyze(&obs[..obs.len() / 2], &opts);
        let late = analyze(&obs, &opts);
        let prefixes: Vec<&str> =
            early.groups.iter().filter(|g| g.kind == GroupKind::Prefix).map(|g| g.label.as_str()).collect();
        assert_eq!(prefixes, ["203.0.113.0/24"]);
        for label in prefixes.iter().copied().chain(["all flows"]) {
            assert!((level_of(&early, label) - level_of(&late, label)).abs() < 1e-15, "{label}");
        }
        assert!((level_of(&late, "all flows") - (1.0 - 0.05 / 2.0 / 5.0)).abs() < 1e-12);
        // The first prefix gets (α/2)·6/π², the next a quarter of that.
        let mut prefix_alphas: Vec<f64> =
            late.groups.iter().filter(|g| g.kind == GroupKind::Prefix).map(|g| 1.0 - g.answer.level).collect();
        prefix_alphas.sort_by(|x, y| y.total_cmp(x));
        let first = 0.025 * 6.0 / (std::f64::consts::PI * std::f64::consts::PI);
        assert!((prefix_alphas[0] - first).abs() < 1e-12, "{prefix_alphas:?}");
        assert!((prefix_alphas[1] - first / 4.0).abs() < 1e-12, "{prefix_alphas:?}");
        let family: f64 = late.groups.iter().map(|g| 1.0 - g.answer.level).sum();
        assert!(family <= 0.05 + 1e-12, "{family}");
    }

    /// B 40% faster for the far /24 and no different for the near one: the first is found, the
    /// second is called no different (or, at worst, inconclusive), never different.
    #[test]
    fn finds_the_group_that_gains_and_not_the_one_that_does_not() {
        for seed in 20..25 {
            let a = analyze(&lossy_and_clean(seed), &Options::default());
            let far = group(&a, "203.0.113.0/24");
            assert_eq!(far.verdict, Verdict::BBetter, "seed {seed}: {:?}", far.answer);
            assert!(far.answer.practical);
            // 40% faster once the response is on its way; the handshake's round trip, which no
            // algorithm changes, makes it a little less as the client feels it.
            let e = far.answer.effect_pct.unwrap();
            assert!((-45.0..-25.0).contains(&e), "{e}");
            assert!(far.answer.high_pct.unwrap() < -20.0, "{:?}", far.answer);
            assert_eq!(group(&a, "RTT ≥150 ms").verdict, Verdict::BBetter, "seed {seed}");
            let near = group(&a, "10.0.0.0/24");
            assert!(matches!(near.verdict, Verdict::NoDifference | Verdict::Inconclusive), "{:?}", near.answer);
            // The same flows, the same answer, whatever the group is called.
            assert_eq!(near.answer.effect_pct, group(&a, "RTT <10 ms").answer.effect_pct);
        }
        // Deterministic.
        let obs = lossy_and_clean(11);
        let (x, y) = (analyze(&obs, &Options::default()), analyze(&obs, &Options::default()));
        assert_eq!(group(&x, "203.0.113.0/24").metrics, group(&y, "203.0.113.0/24").metrics);
        assert_eq!(x.arms.each_ref().map(|x| x.cc.as_str()), ["cubic", "bbr"]);
    }

    /// Simpson's paradox: B drew twice as many far clients as A, and no group differs. A median
    /// pooled over the populations would call B 2x slower; the stratified answer does not.
    #[test]
    fn a_mix_of_clients_is_not_an_effect() {
        let mut rng = Rng::new(3);
        let far =
            synth(&[Population { net: [203, 0, 113], rtt_ms: 220.0, slowdown: [1.0, 1.0], flows_per_arm: 400 }], 1);
        let near = synth(&[Population { net: [10, 0, 0], rtt_ms: 2.0, slowdown: [1.0, 1.0], flows_per_arm: 400 }], 2);
        // Keep all far B flows and half the far A ones; all near A flows and half the near B ones.
        let mut obs: Vec<Observation> = far.into_iter().filter(|o| o.arm == 1 || rng.uniform() < 0.5).collect();
        obs.extend(near.into_iter().filter(|o| o.arm == 0 || rng.uniform() < 0.5));
        let pooled = values(&obs, &(0..obs.len()).collect::<Vec<_>>(), |o| Some(o.client_s()));
        assert!(type7(&pooled[1], 0.5) > 2.0 * type7(&pooled[0], 0.5), "the mix alone makes B look slower");
        let a = analyze(&obs, &Options::default());
        let all = group(&a, "all flows");
        assert!(matches!(all.verdict, Verdict::NoDifference | Verdict::Inconclusive), "{:?}", all.answer);
        assert!(all.answer.effect_pct.unwrap().abs() < 8.0, "{:?}", all.answer);
    }

    #[test]
    fn too_few_flows_claims_nothing() {
        let obs = synth(&[Population { net: [198, 51, 100], rtt_ms: 80.0, slowdown: [1.0, 0.3], flows_per_arm: 8 }], 5);
        let opts = Options { prefix_lists: PrefixList::parse("few 198.51.100.0/24").unwrap(), ..Options::default() };
        let a = analyze(&obs, &opts);
        let few = group(&a, "few");
        assert_eq!(few.verdict, Verdict::TooFewFlows);
        assert!(few.metrics.iter().all(|m| m.status == Status::TooFewFlows && m.diff.is_none() && m.needs.is_some()));
        // The /24 itself is too small to be listed.
        assert_eq!(a.sparse_prefixes, Sparse { groups: 1, flows: 16 });
    }

    /// A/A, simulated: three client groups, no effect anywhere, 300 experiments. The family-wise
    /// promise: any group called different in at most 5% of experiments.
    #[test]
    fn a_a_experiments_rarely_call_any_group_different() {
        let opts = Options { secondary: false, ..Options::default() };
        let reps = 300;
        let mut any = 0;
        for rep in 0..reps {
            let obs = synth(
                &[
                    Population { net: [203, 0, 113], rtt_ms: 200.0, slowdown: [1.0, 1.0], flows_per_arm: 150 },
                    Population { net: [198, 51, 100], rtt_ms: 30.0, slowdown: [1.0, 1.0], flows_per_arm: 150 },
                    Population { net: [10, 0, 0], rtt_ms: 2.0, slowdown: [1.0, 1.0], flows_per_arm: 150 },
                ],
                1000 + rep,
            );
            let a = analyze(&obs, &opts);
            any += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
        }
        crate::output::errln!("A/A: {any}/{reps} experiments call some group different");
        assert!(any as f64 / reps as f64 <= 0.05, "{any}/{reps}");
    }

    /// `--metric p95`, per connection: 200 A/A experiments (two client groups, 1,000 flows per
    /// arm each) call some group different in at most 5%; B's slowest fifth made 3x slower
    /// (the typical response unchanged) is found as B worse at the 95th percentile, with its
    /// interval, in every one of 20 runs of 5,000 flows per arm and group.
    #[test]
    fn a_quantile_metric_holds_its_error_rate_and_finds_a_heavier_tail() {
        let opts = Options { secondary: false, metric: Some(PrimaryMetric::P95), ..Options::default() };
        let pops = |flows_per_arm| {
            [
                Population { net: [203, 0, 113], rtt_ms: 120.0, slowdown: [1.0, 1.0], flows_per_arm },
                Population { net: [198, 51, 100], rtt_ms: 30.0, slowdown: [1.0, 1.0], flows_per_arm },
            ]
        };
        let reps = 200;
        let mut any = 0;
        for rep in 0..reps {
            let a = analyze(&synth(&pops(1_000), 5_000 + rep), &opts);
            assert_eq!(a.metric, PrimaryMetric::P95);
            any += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
        }
        crate::output::errln!("A/A, --metric p95: {any}/{reps} experiments call some group different");
        assert!(any as f64 / reps as f64 <= 0.05, "{any}/{reps}");
        // An undecided group: the flows said to decide do, one fewer does not.
        let obs = synth(&pops(1_000), 5_000);
        let a = analyze(&obs, &opts);
        let g = a.groups.iter().find(|g| g.answer.outcome == Outcome::Inconclusive).unwrap();
        let more = g.answer.more_flows.unwrap();
        let times = values(&obs, &g.members, |o| Some(o.client_s()));
        let n = g.flows() as f64;
        let decides = |m: u64| {
            let r = crate::experiment::quantile_cs::scaled_log_ratio(
                &times[0],
                &times[1],
                0.95,
                g.answer.level.mul_add(-1.0, 1.0),
                (n + m as f64) / n,
            );
            r.is_some_and(|[_, lo, hi]| decide::answer_outcome(lo, hi, &opts.rule) != Outcome::Inconclusive)
        };
        assert!(decides(more) && !decides(more - 1), "{more}");
        for rep in 0..20 {
            let mut rng = Rng::new(rep);
            let heavier: Vec<Observation> = synth(&pops(5_000), 7_000 + rep)
                .into_iter()
                .map(|o| {
                    let slow = o.arm == 1 && rng.uniform() < 0.2;
                    Observation { duration_s: o.duration_s * if slow { 3.0 } else { 1.0 }, ..o }
                })
                .collect();
            let a = analyze(&heavier, &opts);
            let all = a.groups.iter().find(|g| g.kind == GroupKind::All).unwrap();
            assert_eq!(all.answer.outcome, Outcome::BWorse, "{:?}", all.answer);
            let [est, lo, hi] = [all.answer.effect_pct, all.answer.low_pct, all.answer.high_pct].map(Option::unwrap);
            assert!(lo > 0.0 && lo <= est && est <= hi && all.answer.effect_ms.unwrap() > 0.0, "{:?}", all.answer);
            assert_eq!((all.answer.flows, all.answer.strata), ([10_000, 10_000], 1));
        }
    }

    /// `o` added to its cell's sums, as a host's `--metrics-listen` adds it.
    fn add_to_cells(cells: &mut BTreeMap<decide::Key, [CellTotals; 2]>, o: &Observation, bands: &[f64]) {
        let t = o.client_s().max(decide::FLOOR_S);
        let c = &mut cells.entry((crate::units::band_of(o.min_rtt_us, bands), Bucket::of(o.bytes))).or_default()[o.arm];
        c.sums.n += 1;
        c.sums.ln += t.ln();
        c.sums.ln_squares += t.ln() * t.ln();
        c.sums.seconds += t;
        c.bytes += o.bytes;
    }

    /// A fleet's judgments ("all flows", host group 1, host group 2) by `fleet(slowdown of B on
    /// group 1's hosts, seed)`: 200 A/A fleets call a difference for all flows at most 5%, for
    /// either group at most 10% (two looks); B 30% slower on group 1, 50 fleets: found with its
    /// sign at least 40 times, never the wrong sign, the other group at most 3 calls.
    fn fleet_error_rate_and_power(name: &str, fleet: impl Fn(f64, u64) -> [Verdict; 3]) {
        let called = |v: Verdict| matches!(v, Verdict::ABetter | Verdict::BBetter);
        let a_a: Vec<[Verdict; 3]> = (0..200).map(|seed| fleet(1.0, seed)).collect();
        let fleet_calls = a_a.iter().filter(|v| called(v[0])).count();
        let group_calls = a_a.iter().filter(|v| called(v[1]) || called(v[2])).count();
        assert!(fleet_calls <= 10, "A/A: the fleet called a difference in {fleet_calls} of 200");
        assert!(group_calls <= 20, "A/A: a host group called one in {group_calls} of 200 (two looks each)");
        let planted: Vec<[Verdict; 3]> = (0..50).map(|seed| fleet(1.3, 1_000 + seed)).collect();
        let found = planted.iter().filter(|v| v[1] == Verdict::ABetter).count();
        let wrong = planted.iter().filter(|v| v[1] == Verdict::BBetter).count();
        let other = planted.iter().filter(|v| called(v[2])).count();
        assert_eq!(wrong, 0, "the harmed group's answer had the wrong sign");
        assert!(found >= 40, "B 30% slower on one group: found in {found} of 50");
        assert!(other <= 3, "the other group called a difference in {other} of 50");
        eprintln!(
            "{name} A/A: all flows {fleet_calls}/200, a host group {group_calls}/200; planted x1.3 on one group: \
             found {found}/50 (wrong sign {wrong}), the other group {other}/50"
        );
    }

    /// A fleet, judged from its hosts' sums added (what `--analyze-prometheus` reads): twelve
    /// hosts, each with its own clients (RTTs from 20 to 185 ms), two host groups of six (as
    /// `--hosts 'dc="fra"'` selects them). 200 A/A fleets, arms re-drawn: "all flows" called
    /// different (B better would be an apply) at most 5%. B 30% slower on one group's hosts only:
    /// that group's answer finds it with its sign and never the other sign, the other group's
    /// calls nothing beyond 5%.
    #[test]
    fn a_fleet_a_a_rarely_calls_a_difference_and_a_host_groups_harm_is_found_with_its_sign() {
        let opts = Options { arms: Some(["cubic".into(), "bbr".into()]), secondary: false, ..Options::default() };
        let all = |a: &Analysis| a.groups.iter().find(|g| g.kind == GroupKind::All).unwrap().verdict;
        let fleet = |slower: f64, seed: u64| {
            // Each host's own flows (a seed of its own), its sums added into its group's and the
            // fleet's.
            let (mut groups, mut both): ([BTreeMap<decide::Key, [CellTotals; 2]>; 2], _) = Default::default();
            for host in 0..12u8 {
                let group = usize::from(host >= 6);
                let b = if group == 0 { slower } else { 1.0 };
                let p = pop([198, 51, host], 20.0 + 15.0 * f64::from(host), [1.0, b], 60);
                for o in synth(&[p], seed * 100 + u64::from(host)) {
                    add_to_cells(&mut groups[group], &o, &opts.rtt_bands_ms);
                    add_to_cells(&mut both, &o, &opts.rtt_bands_ms);
                }
            }
            [&both, &groups[0], &groups[1]].map(|cells| all(&of_sums(&pools(cells, &BTreeMap::new()), [0, 0], &opts)))
        };
        fleet_error_rate_and_power("fleet", fleet);
    }

    /// The analysis of sums (a fleet's) answers all flows and each RTT band as the analysis of
    /// the flows does — estimate, interval, verdict, arms, α — on an effect in one band and on an
    /// A/A; the overridden flows it is told of are left out and counted the same way.
    #[test]
    fn the_analysis_of_sums_is_the_analysis_of_the_flows() {
        let names = ["cubic".to_string(), "bbr".to_string()];
        let opts = Options { arms: Some(names.clone()), secondary: false, ..Options::default() };
        for (seed, far) in [(21, 1.4), (22, 1.0)] {
            let mut obs =
                synth(&[pop([203, 0, 113], 200.0, [1.0, far], 300), pop([10, 0, 0], 2.0, [1.0, 1.0], 300)], seed);
            obs[3].cc = "reno".into();
            let mut cells: BTreeMap<decide::Key, [CellTotals; 2]> = BTreeMap::new();
            let mut overridden = [0, 0];
            for o in &obs {
                if !ran_its_arm(o, &names) {
                    overridden[o.arm] += 1;
                    continue;
                }
                add_to_cells(&mut cells, o, &opts.rtt_bands_ms);
            }
            let (want, got) = (analyze(&obs, &opts), of_sums(&pools(&cells, &BTreeMap::new()), overridden, &opts));
            assert_eq!(got.integrity.excluded, want.integrity.excluded);
            assert_eq!((got.arms[0].flows, got.arms[1].bytes), (want.arms[0].flows, want.arms[1].bytes));
            let judged: Vec<&GroupResult> =
                want.groups.iter().filter(|g| matches!(g.kind, GroupKind::All | GroupKind::Rtt)).collect();
            assert_eq!(got.groups.len(), judged.len());
            for (g, w) in got.groups.iter().zip(judged) {
                assert_same_answer(g, w);
            }
            let far_band = got.groups.iter().find(|g| g.label == "RTT ≥150 ms").unwrap();
            let better = if far > 1.0 { Some(0) } else { None };
            assert_eq!(far_band.verdict.better_arm(), better, "{far}: {:?}", far_band.verdict);
        }
    }

    /// A host's flows `obs` added to a fleet's sums as its `--metrics-listen` serves them and
    /// Prometheus adds them: its cells, and its switchback tallies per RTT band under `s`.
    /// Sums of all flows, no prefix-list group.
    fn pools(cells: &BTreeMap<decide::Key, [CellTotals; 2]>, tallies: &BTreeMap<usize, switchback::Tally>) -> Pools {
        Pools { all: Pool { cells: cells.clone(), tallies: tallies.clone() }, ..Pools::default() }
    }

    fn add_host(
        cells: &mut BTreeMap<decide::Key, [CellTotals; 2]>,
        tallies: &mut BTreeMap<usize, switchback::Tally>,
        obs: &[Observation],
        s: &crate::experiment::schedule::Schedule,
        bands: &[f64],
    ) {
        let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, o) in obs.iter().enumerate() {
            add_to_cells(cells, o, bands);
            members.entry(crate::units::band_of(o.min_rtt_us, bands)).or_default().push(i);
        }
        for (band, m) in members {
            let t = switchback::tally(obs, &m, s, bands);
            let fleet = tallies.entry(band).or_default();
            let added = switchback::Tally::sum([&*fleet, &t]);
            *fleet = added;
        }
    }

    /// A switchback across a fleet, judged from its hosts' sums added: twelve hosts on one
    /// schedule (a seed of the fleet's, re-drawn for each fleet), each with its own traffic over a
    /// shared bottleneck of its own; two host groups of six. 200 A/A fleets: "all flows" called
    /// different (B better would be an apply) at most 5%, either host group at most 10% (two
    /// looks). B 30% slower for everyone on one group's hosts: that group's answer finds it with
    /// its sign, never the other sign; the other group calls nothing beyond 5%.
    #[test]
    fn a_switchback_fleet_a_a_rarely_calls_a_difference_and_a_host_groups_harm_is_found_with_its_sign() {
        use crate::experiment::switchback::tests::{Assign, Bottleneck, schedule, shared};
        let all = |a: &Analysis| a.groups.iter().find(|g| g.kind == GroupKind::All).unwrap().verdict;
        let fleet = |slower: f64, seed: u64| {
            let s = schedule(seed);
            let opts = Options {
                arms: Some(["cubic".into(), "bbr".into()]),
                secondary: false,
                design: Design::Switchback(s),
                ..Options::default()
            };
            let mut sums: [(BTreeMap<_, _>, BTreeMap<_, _>); 3] = Default::default();
            for host in 0..12u64 {
                let group = usize::from(host >= 6);
                let link = Bottleneck { b: if group == 0 { slower } else { 1.0 }, beside_a: 0.0, beside_b: 0.0 };
                let obs = shared(seed * 100 + host, 10, 0.5, link, Assign::Switchback(s));
                for i in [0, 1 + group] {
                    let (cells, tallies) = &mut sums[i];
                    add_host(cells, tallies, &obs, &s, &opts.rtt_bands_ms);
                }
            }
            sums.each_ref().map(|(cells, tallies)| all(&of_sums(&pools(cells, tallies), [0, 0], &opts)))
        };
        fleet_error_rate_and_power("switchback fleet", fleet);
    }

    /// A switchback known only by its hosts' sums (three hosts on one schedule, each with its
    /// share of a shared bottleneck's flows, their tallies per RTT band added as Prometheus adds
    /// them) is judged as the analysis of all the flows judges it: every estimate and interval
    /// end of all flows and each band, the per-connection and interference contrasts beside
    /// them, the flows the schedule left out, whether the blocks fit.
    #[test]
    fn a_switchback_known_by_its_hosts_sums_is_judged_as_its_flows_are() {
        use crate::experiment::switchback::tests::{Assign, Bottleneck, schedule, shared};
        let names = ["cubic".to_string(), "bbr".to_string()];
        let s = schedule(5);
        let opts = Options {
            arms: Some(names.clone()),
            secondary: false,
            design: Design::Switchback(s),
            ..Options::default()
        };
        let link = Bottleneck { b: 0.8, beside_a: 0.5, beside_b: 0.0 };
        let obs = shared(31, 12, 4.0, link, Assign::Switchback(s));
        let (mut cells, mut tallies) = (BTreeMap::new(), BTreeMap::new());
        for host in 0..3 {
            let theirs: Vec<Observation> = obs.iter().skip(host).step_by(3).cloned().collect();
            add_host(&mut cells, &mut tallies, &theirs, &s, &opts.rtt_bands_ms);
        }
        let (want, got) = (analyze(&obs, &opts), of_sums(&pools(&cells, &tallies), [0, 0], &opts));
        let judged: Vec<&GroupResult> =
            want.groups.iter().filter(|g| matches!(g.kind, GroupKind::All | GroupKind::Rtt)).collect();
        assert_eq!(got.groups.len(), judged.len());
        assert_eq!(got.sample_ratio, want.sample_ratio);
        let close = |x: Option<f64>, y: Option<f64>, what: &str| {
            let (x, y) = (x.unwrap(), y.unwrap());
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{what}: {x} vs {y}");
        };
        for (g, w) in got.groups.iter().zip(judged) {
            assert_eq!((&g.label, g.verdict, g.arms, g.design), (&w.label, w.verdict, w.arms, Some("switchback")));
            let (gs, ws) = (g.switchback.as_ref().unwrap(), w.switchback.as_ref().unwrap());
            for (x, y, what) in
                [(&g.answer, &w.answer, "everyone"), (&gs.per_connection, &ws.per_connection, "per connection")]
            {
                close(x.effect_pct, y.effect_pct, what);
                close(x.low_pct, y.low_pct, what);
                close(x.high_pct, y.high_pct, what);
            }
            close(gs.interference.effect_pct, ws.interference.effect_pct, "interference");
            assert_eq!((gs.rounds, gs.left_out, gs.more_rounds), (ws.rounds, ws.left_out, ws.more_rounds));
            let (gc, wc) = (gs.carryover, ws.carryover);
            assert_eq!((gc.counted, gc.overran, gc.fits, gc.p99_s), (wc.counted, wc.overran, wc.fits, None));
        }
        let all = &got.groups[0];
        assert!(all.switchback.as_ref().unwrap().rounds >= 8, "{:?}", all.switchback);
        assert!(all.answer.effect_pct.unwrap() < 0.0, "{:?}", all.answer);
    }

    #[test]
    fn flows_that_did_not_run_their_arm_are_left_out_and_many_conclude_nothing() {
        let mut obs = lossy_and_clean(4);
        // The service set cubic on 1% of B's flows: left out, counted, the rest concluded.
        let n = obs.len();
        for o in obs.iter_mut().filter(|o| o.arm == 1).take(n / 200) {
            o.cc = "cubic".into();
        }
        let a = analyze(&obs, &Options { arms: Some(["cubic".into(), "bbr".into()]), ..Options::default() });
        assert_eq!(a.integrity.excluded, [0, n / 200]);
        assert!(!a.integrity.overridden);
        assert_eq!(group(&a, "203.0.113.0/24").verdict, Verdict::BBetter);
        // On every flow (`--arms reno,bbr`, the service sets cubic): nothing is concluded.
        for o in &mut obs {
            o.cc = "cubic".into();
        }
        let a = analyze(&obs, &Options { arms: Some(["reno".into(), "bbr".into()]), ..Options::default() });
        assert!(a.integrity.overridden && a.integrity.ran_instead == ["cubic"]);
        assert!(a.groups.iter().all(|g| g.verdict == Verdict::ArmsOverridden));
        assert_eq!(a.arms.each_ref().map(|x| x.cc.as_str()), ["reno", "bbr"]);
        // Switched mid-flow counts as not running its arm.
        let mut obs = lossy_and_clean(4);
        obs[0].switched = true;
        let a = analyze(&obs, &Options::default());
        assert_eq!(a.integrity.excluded.iter().sum::<usize>(), 1);
    }

    #[test]
    fn sample_ratio_flags_a_70_30_split() {
        let bad = sample_ratio([700, 300], 0.5, 0.001);
        assert!(bad.mismatch && bad.p_value < 1e-20 && (bad.chi2 - 160.0).abs() < 1e-9, "{bad:?}");
        assert!(!sample_ratio([510, 490], 0.5, 0.001).mismatch);
        // 70/30 is right when 30% was asked for B.
        assert!(!sample_ratio([700, 300], 0.3, 0.001).mismatch);
        assert!(!sample_ratio([0, 0], 0.5, 0.001).mismatch);
        let a = analyze(&lossy_and_clean(2), &Options { split_b: 0.5, ..Options::default() });
        assert!(!a.sample_ratio.mismatch);
        // A service that overrides its algorithm on a quarter of arm B's flows: they are left out
        // of the comparison, and the split, a check of the assignment, is still right (it read
        // as "MISMATCH: flows lost" when it counted only the flows that ran their arm).
        let mut obs = lossy_and_clean(2);
        for o in obs.iter_mut().filter(|o| o.arm == 1).step_by(4) {
            o.switched = true;
        }
        let a = analyze(&obs, &Options { split_b: 0.5, ..Options::default() });
        assert_eq!(a.integrity.excluded, [0, 300], "{:?}", a.integrity);
        assert_eq!(a.sample_ratio.flows, [1200, 1200]);
        assert!(!a.sample_ratio.mismatch, "{:?}", a.sample_ratio);
    }
}

/// The primary metric (`--metric`): what each weighs, and what it buys.
#[cfg(test)]
mod metric_tests {
    use std::collections::BTreeMap;

    use super::{
        tests::{group, pop, synth},
        *,
    };
    use crate::{experiment::groups::Bucket, units::band_of};

    /// B 50% slower for responses under 256 KB and twice as fast above, one client group whose
    /// large responses take six times as long as the sizes alone would: the
    /// time-weighted answer (where the time goes: the large responses) says B faster, the
    /// per-response one (most responses are small) B slower. Each equals the strata's mean log
    /// ratios weighted by hand, by their time or by their responses.
    #[test]
    fn the_metric_weighs_strata_by_their_time_or_by_their_responses() {
        let mut obs = synth(&[pop([203, 0, 113], 100.0, [1.0, 1.0], 1500)], 3);
        for o in &mut obs {
            // The large responses take most of the time, as multi-MB ones do on a real path.
            let large = o.bytes >= 256 * 1024;
            o.duration_s *= if large { 6.0 } else { 1.0 };
            if o.arm == 1 {
                o.duration_s *= if large { 0.5 } else { 1.5 };
            }
        }
        let bands = Options::default().rtt_bands_ms;
        // By hand, per stratum and arm: flows, the sum of their log times, their time.
        type Cell = [(usize, f64, f64); 2];
        let mut cells: BTreeMap<(usize, Bucket), Cell> = BTreeMap::new();
        for o in &obs {
            let c = &mut cells.entry((band_of(o.min_rtt_us, &bands), Bucket::of(o.bytes))).or_default()[o.arm];
            c.0 += 1;
            c.1 += o.client_s().ln();
            c.2 += o.client_s();
        }
        let by_hand = |weigh: &dyn Fn(&Cell) -> f64| {
            let counted: Vec<_> = cells.values().filter(|[a, b]| a.0 >= 10 && b.0 >= 10).collect();
            let total: f64 = counted.iter().map(|c| weigh(c)).sum();
            counted.iter().map(|c @ [a, b]| weigh(c) / total * (b.1 / b.0 as f64 - a.1 / a.0 as f64)).sum::<f64>()
        };
        let time = by_hand(&|[a, b]| a.2 + b.2);
        let responses = by_hand(&|[a, b]| (a.0 + b.0) as f64);
        let answer = |metric| {
            let a = analyze(&obs, &Options { metric: Some(metric), secondary: false, ..Options::default() });
            assert_eq!(a.metric, metric);
            group(&a, "all flows").clone()
        };
        let (tw, pr) = (answer(PrimaryMetric::TimeWeighted), answer(PrimaryMetric::PerResponse));
        let ln = |g: &GroupResult| (g.answer.effect_pct.unwrap() / 100.0).ln_1p();
        assert!((ln(&tw) - time).abs() < 1e-9, "time-weighted {} against {time} by hand", ln(&tw));
        assert!((ln(&pr) - responses).abs() < 1e-9, "per response {} against {responses} by hand", ln(&pr));
        assert_eq!((tw.verdict, pr.verdict), (Verdict::BBetter, Verdict::ABetter), "{:?} / {:?}", tw.answer, pr.answer);
        // Without --metric, the design's: time-weighted for a per-connection A/B.
        let default = analyze(&obs, &Options { secondary: false, ..Options::default() });
        assert_eq!(default.metric, PrimaryMetric::TimeWeighted);
    }

    /// A/A, 300 runs of two client groups (200 and 2 ms, 300 flows per arm each, heavy-tailed
    /// sizes): per response, any group called better or worse in at most 5% of runs. And B 10%
    /// slower for every response, 100 runs of the same size: per response finds it far more often
    /// than time-weighted, whose few multi-MB responses carry most of its variance. And "no
    /// difference" is reachable when B is A: per response in 50 of 50 runs of 3,000 flows per
    /// arm and group (time-weighted: 19 of 50).
    #[test]
    fn per_response_keeps_its_error_rate_and_answers_sooner_on_heavy_tailed_traffic() {
        let per_response = Options { metric: Some(PrimaryMetric::PerResponse), secondary: false, ..Options::default() };
        let time_weighted = Options { metric: Some(PrimaryMetric::TimeWeighted), ..per_response.clone() };
        let called = |a: &Analysis| a.groups.iter().any(|g| g.verdict.better_arm().is_some());
        let a_a = (0..300)
            .filter(|&seed| {
                let obs = synth(&[pop([203, 0, 113], 200.0, [1.0; 2], 300), pop([10, 0, 0], 2.0, [1.0; 2], 300)], seed);
                called(&analyze(&obs, &per_response))
            })
            .count();
        let (mut found_pr, mut found_tw) = (0, 0);
        for seed in 0..100 {
            let obs = synth(
                &[pop([203, 0, 113], 200.0, [1.0, 1.1], 300), pop([10, 0, 0], 2.0, [1.0, 1.1], 300)],
                1000 + seed,
            );
            let worse = |o: &Options| group(&analyze(&obs, o), "all flows").verdict == Verdict::ABetter;
            found_pr += usize::from(worse(&per_response));
            found_tw += usize::from(worse(&time_weighted));
        }
        crate::output::errln!(
            "per response: A/A {a_a}/300 called; x1.1 found {found_pr}/100 per response, {found_tw}/100 time-weighted"
        );
        assert!(a_a <= 15, "A/A per response: {a_a}/300 called");
        // Equivalence is reachable: B = A, "no difference" for all flows in most runs of 3,000
        // flows per arm and group (12,000 in all) per response; time-weighted, rarely.
        let mut equivalent = [[0; 2]; 3];
        for (sizes, per_arm) in equivalent.iter_mut().zip([300, 1000, 3000]) {
            for seed in 0..50 {
                let obs = synth(
                    &[pop([203, 0, 113], 200.0, [1.0; 2], per_arm), pop([10, 0, 0], 2.0, [1.0; 2], per_arm)],
                    5000 + seed,
                );
                for (n, o) in sizes.iter_mut().zip([&per_response, &time_weighted]) {
                    *n += usize::from(group(&analyze(&obs, o), "all flows").verdict == Verdict::NoDifference);
                }
            }
        }
        crate::output::errln!(
            "A/A no difference in 50 runs (per response, time-weighted): 300 flows per arm and group {:?}, \
             1,000 {:?}, 3,000 {:?}",
            equivalent[0],
            equivalent[1],
            equivalent[2]
        );
        assert!(equivalent[2][0] >= 45, "per response at 3,000 flows per arm and group: {:?}", equivalent[2]);
        assert!(found_pr >= found_tw + 20, "x1.1: per response {found_pr}/100, time-weighted {found_tw}/100");
    }
}

//! The experiment's one pre-declared question per client group, and its answer: does arm B change
//! completion time for this group's traffic, and by how much? Everything `bbrscope experiment`
//! decides (a group's verdict, the guardrail's stop, the recommended `apply` commands) comes from
//! here; the per-quantile tables of [`super::analysis`] are shown beside it and decide nothing.
//!
//! The method (docs/experiment-method.md has it in full, with the error rates measured):
//! - **Strata.** Flows are compared only with flows like them: the same client group, the same
//!   band of minimum RTT (the path's distance, which no congestion control changes) and the same
//!   response-size bucket. Clients 2 ms and 200 ms away are never pooled into one median, so the
//!   mix of clients an arm happened to draw cannot pass for an effect (Simpson's paradox).
//! - **Effect.** In each stratum, B's mean log completion time minus A's: the log of the ratio of
//!   the two arms' geometric means. Strata are combined by the run's pre-declared [`PrimaryMetric`]
//!   (`--metric`): *time-weighted*, with weights proportional to the completion time spent in
//!   them (both arms together), the change "where the time goes", which is where congestion
//!   control can act (larger responses, far clients); or *per response*, with weights
//!   proportional to their responses, the change the typical response sees (what users of short
//!   responses care about, and far less noisy on heavy-tailed traffic). A stratum needs
//!   [`MIN_CELL`] flows in each arm; the share of time in strata left out is reported.
//! - **Always-valid interval.** The estimate is asymptotically normal with variance
//!   `V = Σ w² (s²_A/n_A + s²_B/n_B)`. Its interval is the normal-mixture confidence sequence
//!   (the mSPRT of Johari, Pekelis and Walsh, "Always valid inference", 2022; the asymptotic
//!   confidence sequences of Waudby-Smith et al., 2024): `θ̂ ± sqrt(V (V+τ²)/τ² · ln((V+τ²)/(V α²)))`.
//!   It holds at every look at once, so the live view and the guardrail may look every 2 s
//!   and the final report is still valid at the promised level.
//! - **Family.** A run answers for several groups at once (all flows, RTT bands, prefixes,
//!   lists); α is split among them before the first flow (`analysis::AlphaSplit`: half equally
//!   over the groups declared up front, half over the prefixes in the order they fill), so an
//!   experiment where B changes nothing says "B differs" anywhere at most `α` of the time, and no
//!   group's level moves as other groups come.
//! - **Four outcomes.** B better by X [interval]; B worse by X [interval]; no difference larger
//!   than δ (the whole interval inside ±δ); or inconclusive, with about how many more flows
//!   would decide if the estimate held.

use serde::{Deserialize, Serialize};

use super::{
    Observation,
    groups::Bucket,
    stats::{normal_quantile, t_two_sided_quantile},
};
use crate::units::{band_label, band_of};

/// Flows per arm a stratum needs before it counts. Below this a stratum's sample variance is too
/// unstable for the normal approximation the interval rests on (A/A runs with 5 per arm gave
/// intervals that missed zero several times too often).
pub(crate) const MIN_CELL: usize = 10;

/// The mixing scale of the confidence sequence, in log-ratio units: tightest for effects of
/// about 15%. Smaller values make early looks stricter and late ones looser.
pub(crate) const TAU: f64 = 0.15;

/// Shortest completion time counted (the log of 0 is not a time).
pub(crate) const FLOOR_S: f64 = 1e-6;

/// Running mean and variance of log completion times (Welford), and the time they add up to.
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    n: usize,
    mean: f64,
    m2: f64,
    time_s: f64,
}

impl Moments {
    fn push(&mut self, t: f64) {
        let t = t.max(FLOOR_S);
        let x = t.ln();
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
        self.time_s += t;
    }

    /// The moments of both samples together (Chan, Golub and LeVeque's pairwise update).
    fn combine(&mut self, o: &Moments) {
        if o.n == 0 {
            return;
        }
        let n = self.n + o.n;
        let d = o.mean - self.mean;
        self.mean += d * o.n as f64 / n as f64;
        self.m2 += o.m2 + d * d * self.n as f64 * o.n as f64 / n as f64;
        self.n = n;
        self.time_s += o.time_s;
    }

    /// The moments of flows whose sums are `s`.
    fn of_sums(s: &CellSums) -> Moments {
        if s.n == 0 {
            return Moments::default();
        }
        let mean = s.ln / s.n as f64;
        // Σx² − (Σx)²/n: what Welford's m2 holds, from sums that add across hosts.
        Moments { n: s.n, mean, m2: (s.ln_squares - s.ln * mean).max(0.0), time_s: s.seconds }
    }

    /// Variance of the mean.
    fn var_of_mean(&self) -> f64 {
        let s2 = if self.n > 1 { self.m2 / (self.n - 1) as f64 } else { 0.0 };
        // A stratum of identical times would claim certainty it does not have.
        s2.max(1e-6) / self.n as f64
    }
}

/// How a run's answer weighs its strata (`--metric`), declared before the first flow and kept in
/// the recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrimaryMetric {
    /// Each stratum by the completion time spent in it: where the time goes.
    #[default]
    TimeWeighted,
    /// Each stratum by its responses: what the typical response sees.
    PerResponse,
    /// The group's median completion time, each arm's bounded at every look by a quantile
    /// confidence sequence ([`super::quantile_cs`]): no strata (arms drawn per connection see
    /// the same mix of sizes and distances), per-connection designs only.
    P50,
    /// The group's 95th percentile of completion time: what the slow responses see.
    P95,
    /// The group's 99th percentile of completion time.
    P99,
}

impl PrimaryMetric {
    /// The metric a design answers in when none is asked: a switchback per response (its rounds
    /// compare flows alike), a client design per response (below), a per-connection A/B
    /// time-weighted.
    pub(crate) fn default_for(design: &super::setup::Design) -> PrimaryMetric {
        // A whole client's flows move together, and on heavy-tailed traffic the clients that ask
        // for large responses carry most of the time: on ten minutes of recorded traffic of 240
        // clients, time-weighted found a 10% change in 18% of re-drawn salts and never said "no
        // difference" to B = A; per response, 100% and 79% (docs/experiment-method.md, "Client
        // design on recorded real traffic").
        match design {
            super::setup::Design::Switchback(_) | super::setup::Design::Client { .. } => PrimaryMetric::PerResponse,
            super::setup::Design::PerConnection => PrimaryMetric::TimeWeighted,
        }
    }

    /// What it measures, in words for the report's header.
    pub(crate) fn says(self) -> &'static str {
        match self {
            PrimaryMetric::TimeWeighted => "time-weighted (each stratum by its completion time)",
            PrimaryMetric::PerResponse => "per response (each stratum by its responses)",
            PrimaryMetric::P50 => "the median completion time (each arm's bounded at every look)",
            PrimaryMetric::P95 => "the 95th percentile of completion time (each arm's bounded at every look)",
            PrimaryMetric::P99 => "the 99th percentile of completion time (each arm's bounded at every look)",
        }
    }

    /// The quantile a quantile metric answers for.
    pub(crate) fn quantile(self) -> Option<f64> {
        match self {
            PrimaryMetric::TimeWeighted | PrimaryMetric::PerResponse => None,
            PrimaryMetric::P50 => Some(0.5),
            PrimaryMetric::P95 => Some(0.95),
            PrimaryMetric::P99 => Some(0.99),
        }
    }

    /// A stratum's weight before normalising: its completion time, or its responses. (A
    /// quantile metric's answer has no strata; where strata are built beside it, as the
    /// guardrail's, each stratum counts by its responses.)
    fn weight(self, n: usize, time_s: f64) -> f64 {
        match self {
            PrimaryMetric::TimeWeighted => time_s,
            PrimaryMetric::PerResponse | PrimaryMetric::P50 | PrimaryMetric::P95 | PrimaryMetric::P99 => n as f64,
        }
    }
}

/// One arm's flows in one stratum as sums (what a running experiment serves, `experiment/sums.rs`):
/// n, Σ ln T, Σ (ln T)² and Σ T, T floored as [`Moments`] floors it. Sums of hosts add.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CellSums {
    pub(crate) n: usize,
    pub(crate) ln: f64,
    pub(crate) ln_squares: f64,
    pub(crate) seconds: f64,
}

/// Whether a stratum counts: [`MIN_CELL`] flows in each arm.
fn counts([a, b]: &[Moments; 2]) -> bool {
    a.n >= MIN_CELL && b.n >= MIN_CELL
}

/// A stratum: band of minimum RTT x response-size bucket.
pub(crate) type Key = (usize, Bucket);

/// The strata of one group, filled as flows finish (cheap enough to keep per look: O(1) a
/// flow, O(strata) an estimate).
#[derive(Clone, Debug, Default)]
pub(crate) struct Strata {
    cells: std::collections::BTreeMap<Key, [Moments; 2]>,
    /// Flows per arm added.
    pub(crate) flows: [usize; 2],
    /// How the estimate weighs the strata.
    metric: PrimaryMetric,
}

impl Strata {
    /// Empty strata whose estimate weighs them by `metric`.
    pub(crate) fn weighted(metric: PrimaryMetric) -> Self {
        Strata { metric, ..Strata::default() }
    }

    /// The strata whose cells' sums are `cells` (stratum → A's, B's), weighed by `metric`: the
    /// same estimate as adding each flow.
    pub(crate) fn of_sums(metric: PrimaryMetric, cells: impl IntoIterator<Item = (Key, [CellSums; 2])>) -> Self {
        let mut s = Strata::weighted(metric);
        for (key, sums) in cells {
            let cell = s.cells.entry(key).or_default();
            for arm in 0..2 {
                cell[arm].combine(&Moments::of_sums(&sums[arm]));
                s.flows[arm] += sums[arm].n;
            }
        }
        s
    }

    /// A stratum's share of the strata that count, `total` their [`PrimaryMetric::weight`]s' sum.
    fn share(&self, [a, b]: &[Moments; 2], total: f64) -> f64 {
        self.metric.weight(a.n + b.n, a.time_s + b.time_s) / total
    }

    /// The sum of the weights of the strata that count ([`counts`]): this group's weight in a
    /// union of groups.
    pub(crate) fn total_weight(&self) -> f64 {
        self.cells.values().filter(|c| counts(c)).map(|[a, b]| self.metric.weight(a.n + b.n, a.time_s + b.time_s)).sum()
    }

    pub(crate) fn add(&mut self, o: &Observation, rtt_bands_ms: &[f64]) {
        let key = (band_of(o.min_rtt_us, rtt_bands_ms), Bucket::of(o.bytes));
        if let Some(m) = self.cells.entry(key).or_default().get_mut(o.arm) {
            m.push(o.client_s());
            self.flows[o.arm] += 1;
        }
    }

    /// Adds `other`'s flows, stratum by stratum.
    pub(crate) fn merge(&mut self, other: &Strata) {
        for (key, [a, b]) in &other.cells {
            let cell = self.cells.entry(*key).or_default();
            cell[0].combine(a);
            cell[1].combine(b);
        }
        self.flows[0] += other.flows[0];
        self.flows[1] += other.flows[1];
    }

    /// The strata with flows that the estimate leaves out, fewer than [`MIN_CELL`] in an arm,
    /// most of the group's time first: what a verdict does not speak for, and what it needs.
    pub(crate) fn left_out(&self, rtt_bands_ms: &[f64]) -> Vec<LeftOut> {
        let time_all: f64 = self.cells.values().map(|[a, b]| a.time_s + b.time_s).sum();
        let mut out: Vec<LeftOut> = self
            .cells
            .iter()
            .filter(|(_, c @ [a, b])| a.n + b.n > 0 && !counts(c))
            .map(|(&(band, bucket), [a, b])| LeftOut {
                stratum: format!("{} {}", band_label(band, rtt_bands_ms), bucket.label()),
                flows: [a.n, b.n],
                time_share: if time_all > 0.0 { (a.time_s + b.time_s) / time_all } else { 0.0 },
            })
            .collect();
        out.sort_by(|x, y| y.time_share.total_cmp(&x.time_share));
        out
    }

    /// The stratified estimate, if any stratum has [`MIN_CELL`] flows in both arms.
    pub(crate) fn estimate(&self) -> Option<Estimate> {
        let (mut included, mut time_all, mut time_in) = (0usize, 0.0, 0.0);
        let mut flows_in = [0usize; 2];
        for cell @ [a, b] in self.cells.values() {
            time_all += a.time_s + b.time_s;
            if counts(cell) {
                included += 1;
                time_in += a.time_s + b.time_s;
                flows_in[0] += a.n;
                flows_in[1] += b.n;
            }
        }
        if included == 0 || time_in <= 0.0 {
            return None;
        }
        let total = self.total_weight();
        let (mut theta, mut var) = (0.0, 0.0);
        for cell @ [a, b] in self.cells.values().filter(|c| counts(c)) {
            let w = self.share(cell, total);
            theta += w * (b.mean - a.mean);
            var += w * w * (a.var_of_mean() + b.var_of_mean());
        }
        let n = (flows_in[0] + flows_in[1]) as f64;
        Some(Estimate {
            log_ratio: theta,
            var,
            flows: flows_in,
            strata: included,
            coverage: time_in / time_all,
            mean_s: time_in / n,
        })
    }
}

impl Strata {
    /// Each flow's influence on [`Strata::estimate`], for a variance clustered by something the
    /// strata do not know (the client design's client addresses): `±w/n · (ln T − mean)` of its
    /// cell (+ for B, − for A), scaled by `√(n/(n−1))` so that the squares of a cell's flows add
    /// up to that cell's `w² s²/n` in the unclustered variance. `None` for a flow in a stratum
    /// the estimate leaves out (or of no arm).
    pub(crate) fn influence<'s>(&'s self, rtt_bands_ms: &'s [f64]) -> impl Fn(&Observation) -> Option<f64> + 's {
        let total = self.total_weight();
        move |o| {
            let cell = self.cells.get(&(band_of(o.min_rtt_us, rtt_bands_ms), Bucket::of(o.bytes)))?;
            let m = cell.get(o.arm).filter(|_| counts(cell))?;
            let w = self.share(cell, total);
            let n = m.n as f64;
            let sign = if o.arm == 1 { 1.0 } else { -1.0 };
            Some(sign * w / n * (n / (n - 1.0)).sqrt() * (o.client_s().max(FLOOR_S).ln() - m.mean))
        }
    }
}

/// A stratum the estimate leaves out for want of flows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct LeftOut {
    /// `RTT ≥150 ms >4 MB`.
    pub(crate) stratum: String,
    /// Per arm; each needs [`MIN_CELL`].
    pub(crate) flows: [usize; 2],
    /// Its share of the group's completion time (0..1).
    pub(crate) time_share: f64,
}

/// The stratified estimate of B's effect on completion time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Estimate {
    /// ln(B/A): the mean over strata, weighted by the run's [`PrimaryMetric`], of the log ratio of
    /// geometric means.
    pub(crate) log_ratio: f64,
    /// Its variance.
    pub(crate) var: f64,
    /// Flows per arm in the strata that count.
    pub(crate) flows: [usize; 2],
    pub(crate) strata: usize,
    /// Share of the group's completion time in the strata that count (0..1).
    pub(crate) coverage: f64,
    /// Mean completion time of the flows that count, both arms: the scale of an absolute change.
    pub(crate) mean_s: f64,
}

/// Half-width of the normal-mixture confidence sequence at level `1 − alpha` for an estimator of
/// variance `v` (mixing variance `TAU²`): valid at every look at once.
pub(crate) fn cs_half_width(v: f64, alpha: f64) -> f64 {
    let t2 = TAU * TAU;
    (v * (v + t2) / t2 * ((v + t2) / (v * alpha * alpha)).ln()).sqrt()
}

/// What the interval says, given the smallest change that matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// B's completion times lower: the whole interval below zero.
    BBetter,
    /// B's completion times higher: the whole interval above zero.
    BWorse,
    /// The whole interval within ±δ: no difference that matters.
    NoDifference,
    /// None of the above yet.
    Inconclusive,
    /// No stratum has enough flows in both arms.
    TooFewFlows,
}

/// The answer to the primary question for one group, in the units people read.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Answer {
    pub(crate) outcome: Outcome,
    /// B's completion time relative to A's, % (`(B/A − 1)·100`); null without an estimate.
    pub(crate) effect_pct: Option<f64>,
    /// The always-valid interval of `effect_pct`.
    pub(crate) low_pct: Option<f64>,
    pub(crate) high_pct: Option<f64>,
    /// The change per response in milliseconds at this group's mean completion time.
    pub(crate) effect_ms: Option<f64>,
    /// The level of the interval after sharing α across the groups judged (e.g. 0.99).
    pub(crate) level: f64,
    /// The smallest change that matters, % (`--delta`).
    pub(crate) delta_pct: f64,
    /// Better or worse by at least δ and by at least the smallest absolute change that matters.
    pub practical: bool,
    /// Flows per arm in the strata that count.
    pub(crate) flows: [usize; 2],
    pub(crate) strata: usize,
    /// Share of the group's completion time the estimate covers (0..1).
    pub(crate) coverage: f64,
    /// Inconclusive: about how many more flows (both arms, this group's mix) would decide if the
    /// estimate held.
    pub(crate) more_flows: Option<u64>,
    /// The smallest change, %, that the flows so far could tell from none: an effect whose log
    /// is the interval's half-width, `(e^h − 1)·100`. A true effect smaller than this is not
    /// found at this count, whichever way it goes.
    pub(crate) detectable_pct: Option<f64>,
}

/// The rules of the decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// Family-wise error rate across the groups judged (0.05).
    pub(crate) alpha: f64,
    /// The smallest relative change that matters (0.05 = 5%).
    pub(crate) delta: f64,
    /// The smallest absolute change per response that matters, seconds.
    pub(crate) min_abs_s: f64,
}

impl Default for Rule {
    fn default() -> Self {
        Rule { alpha: 0.05, delta: 0.05, min_abs_s: 0.005 }
    }
}

/// The answer for an estimate judged at `alpha` (already shared across the family).
pub(crate) fn answer(est: Option<Estimate>, alpha: f64, rule: &Rule) -> Answer {
    let none = Answer {
        outcome: Outcome::TooFewFlows,
        effect_pct: None,
        low_pct: None,
        high_pct: None,
        effect_ms: None,
        level: 1.0 - alpha,
        delta_pct: rule.delta * 100.0,
        practical: false,
        flows: [0, 0],
        strata: 0,
        coverage: 0.0,
        more_flows: None,
        detectable_pct: None,
    };
    let Some(e) = est else { return none };
    let h = cs_half_width(e.var, alpha);
    let (lo, hi) = (e.log_ratio - h, e.log_ratio + h);
    let outcome = answer_outcome(lo, hi, rule);
    let pct = super::format::pct_of_log;
    let effect_ms = e.mean_s * (e.log_ratio.exp() - 1.0) * 1e3;
    let practical = practical(outcome, e.log_ratio, effect_ms, rule);
    let more_flows = (outcome == Outcome::Inconclusive).then(|| more_flows(&e, alpha, rule));
    Answer {
        outcome,
        effect_pct: Some(pct(e.log_ratio)),
        low_pct: Some(pct(lo)),
        high_pct: Some(pct(hi)),
        effect_ms: Some(effect_ms),
        practical,
        flows: e.flows,
        strata: e.strata,
        coverage: e.coverage,
        more_flows,
        detectable_pct: Some(pct(h)),
        ..none
    }
}

/// What an interval `[lo, hi]` of the log ratio says, given the smallest change that matters.
pub(crate) fn answer_outcome(lo: f64, hi: f64, rule: &Rule) -> Outcome {
    let (eq_lo, eq_hi) = ((1.0 - rule.delta).ln(), (1.0 + rule.delta).ln());
    if lo >= eq_lo && hi <= eq_hi {
        Outcome::NoDifference
    } else if hi < 0.0 {
        Outcome::BBetter
    } else if lo > 0.0 {
        Outcome::BWorse
    } else {
        Outcome::Inconclusive
    }
}

/// A difference found, and as large as the rule asks, relatively and per response.
fn practical(outcome: Outcome, log_ratio: f64, effect_ms: f64, rule: &Rule) -> bool {
    matches!(outcome, Outcome::BBetter | Outcome::BWorse)
        && super::format::pct_of_log(log_ratio).abs() >= rule.delta * 100.0
        && effect_ms.abs() >= rule.min_abs_s * 1e3
}

/// Beyond this many more flows a quantile answer is not said to decide.
pub(crate) const MAX_MORE_QUANTILE_FLOWS: u64 = 10_000_000;

/// A quantile metric's answer for one group judged at `alpha`: the arms' completion times
/// (`times`, each sorted), the ratio of their quantiles and its always-valid interval
/// ([`super::quantile_cs::log_ratio`]). Too few flows until each arm has [`MIN_CELL`] and both
/// quantiles are bounded on both sides. Inconclusive, the flows that would decide if each arm
/// kept its distribution (the bounds at the larger count); `None` past
/// [`MAX_MORE_QUANTILE_FLOWS`].
pub(crate) fn quantile_answer(times: &[Vec<f64>; 2], q: f64, alpha: f64, rule: &Rule) -> Answer {
    let flows = [times[0].len(), times[1].len()];
    let none = answer(None, alpha, rule);
    let enough = flows.iter().all(|&n| n >= MIN_CELL);
    let Some([log_ratio, lo, hi]) = super::quantile_cs::log_ratio(&times[0], &times[1], q, alpha).filter(|_| enough)
    else {
        return Answer { flows, ..none };
    };
    let outcome = answer_outcome(lo, hi, rule);
    let n = (flows[0] + flows[1]) as f64;
    let decides = |more: u64| {
        let scale = (n + more as f64) / n;
        super::quantile_cs::scaled_log_ratio(&times[0], &times[1], q, alpha, scale)
            .is_some_and(|[_, lo, hi]| answer_outcome(lo, hi, rule) != Outcome::Inconclusive)
    };
    // Deciding is monotone in the count (the bounds only narrow).
    let more_flows = (outcome == Outcome::Inconclusive)
        .then(|| super::stats::first_where(0, MAX_MORE_QUANTILE_FLOWS, decides))
        .flatten();
    let at = |s: &[f64]| crate::quantile::nearest_rank(s, q).unwrap_or_default();
    let effect_ms = (at(&times[1]) - at(&times[0])) * 1e3;
    let pct = super::format::pct_of_log;
    Answer {
        outcome,
        effect_pct: Some(pct(log_ratio)),
        low_pct: Some(pct(lo)),
        high_pct: Some(pct(hi)),
        effect_ms: Some(effect_ms),
        practical: practical(outcome, log_ratio, effect_ms, rule),
        flows,
        strata: 1,
        coverage: 1.0,
        more_flows,
        ..none
    }
}

/// The answer for an estimate whose variance was estimated from `clusters` clusters (a
/// switchback's rounds, a client design's clients), judged at `alpha`: [`answer`] on the variance
/// widened to Student's t with `clusters − 1` degrees of freedom ([`widened`]).
pub(crate) fn clustered_answer(est: Option<(Estimate, usize)>, alpha: f64, rule: &Rule) -> Answer {
    answer(est.map(|(e, clusters)| widened(e, clusters, alpha)), alpha, rule)
}

/// The clusters (a switchback's rounds, a client design's clients) to add, up to `max`, before
/// the clustered answer decides if its estimate stays where it is: the cluster-level variance
/// shrinks as 1/G, and Student's t with G − 1 degrees of freedom tightens with it, so this is
/// fewer than scaling the flows, as [`more_flows`] does, would say. `None` past `max`.
pub(crate) fn more_clusters(e: Estimate, clusters: usize, alpha: f64, rule: &Rule, max: u64) -> Option<u64> {
    let decides = |more: u64| {
        let g = clusters + more as usize;
        let at = Estimate { var: e.var * clusters as f64 / g as f64, ..e };
        clustered_answer(Some((at, g)), alpha, rule).outcome != Outcome::Inconclusive
    };
    // Deciding is monotone in the clusters (the half-width only shrinks).
    super::stats::first_where(0, max, decides)
}

/// `V` estimated from G clusters makes `θ̂/√V̂` a t rather than a normal: V is scaled by
/// `(t/z)²`, the squared ratio of their two-sided `alpha` quantiles (at α 0.005: ×2.06 with 8
/// clusters, ×1.17 with 30).
pub(crate) fn widened(e: Estimate, clusters: usize, alpha: f64) -> Estimate {
    let z = normal_quantile(1.0 - alpha / 2.0);
    let t = t_two_sided_quantile(alpha, (clusters - 1) as f64);
    Estimate { var: e.var * (t / z).powi(2), ..e }
}

/// Flows (both arms) to add, in the same mix, before the interval decides if the estimate stays
/// where it is: narrow enough to leave out zero, or to fit inside ±δ, whichever comes first.
fn more_flows(e: &Estimate, alpha: f64, rule: &Rule) -> u64 {
    let d = (1.0 + rule.delta).ln().min(-(1.0 - rule.delta).ln());
    let x = e.log_ratio.abs();
    let target = x.max(d - x);
    // The variance shrinks as 1/n; find the share f of today's variance that gives `target`
    // (the half-width grows with the variance).
    let (mut lo, mut hi) = (1e-9_f64, 1.0_f64);
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if cs_half_width(e.var * mid, alpha) > target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let n = (e.flows[0] + e.flows[1]) as f64;
    (n * (1.0 / lo - 1.0)).ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strata built from per-cell sums, split over three "hosts" and added, give the estimate
    /// of adding every flow, to 1e-9, with either metric.
    #[test]
    fn sums_added_across_hosts_give_the_estimate_of_the_flows() {
        use crate::experiment::analysis::tests::{pop, synth};
        let obs = synth(&[pop([203, 0, 113], 120.0, [1.0, 1.3], 200), pop([10, 0, 0], 2.0, [1.0, 1.0], 200)], 5);
        let bands = [10.0, 50.0, 150.0];
        for metric in [PrimaryMetric::TimeWeighted, PrimaryMetric::PerResponse] {
            let mut flows = Strata::weighted(metric);
            // Three hosts, each with every third flow, each summing its own.
            let mut hosts: [std::collections::BTreeMap<Key, [CellSums; 2]>; 3] = Default::default();
            for (i, o) in obs.iter().enumerate() {
                flows.add(o, &bands);
                let t = o.client_s().max(FLOOR_S);
                let key = (band_of(o.min_rtt_us, &bands), Bucket::of(o.bytes));
                let c = &mut hosts[i % 3].entry(key).or_default()[o.arm];
                c.n += 1;
                c.ln += t.ln();
                c.ln_squares += t.ln() * t.ln();
                c.seconds += t;
            }
            // Added across hosts, as `sum by (arm, rtt_band, size)` adds them.
            let mut fleet: std::collections::BTreeMap<Key, [CellSums; 2]> = Default::default();
            for (key, arms) in hosts.iter().flatten() {
                let cell = fleet.entry(*key).or_default();
                for arm in 0..2 {
                    cell[arm].n += arms[arm].n;
                    cell[arm].ln += arms[arm].ln;
                    cell[arm].ln_squares += arms[arm].ln_squares;
                    cell[arm].seconds += arms[arm].seconds;
                }
            }
            let (want, got) = (flows.estimate().unwrap(), Strata::of_sums(metric, fleet).estimate().unwrap());
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-3);
            assert!(close(got.log_ratio, want.log_ratio) && close(got.var, want.var), "{got:?} vs {want:?}");
            assert_eq!((got.flows, got.strata), (want.flows, want.strata));
        }
    }

    /// Reference values: the mixture likelihood ratio of a N(θ̂; 0, V) estimate against the
    /// N(0, τ²) mixture over θ, integrated numerically with scipy.integrate.quad, the boundary found with brentq:
    /// `quad(lambda t: norm.pdf(x, t, sqrt(V)) * norm.pdf(t, 0, tau), -inf, inf)[0] /
    /// norm.pdf(x, 0, sqrt(V))` at `x = cs_half_width(V, α)` must be exactly 1/α (the boundary of
    /// the confidence sequence), whatever V and α.
    #[test]
    fn the_boundary_is_where_the_mixture_ratio_reaches_one_over_alpha() {
        for (v, alpha, want) in REFERENCE {
            let got = cs_half_width(v, alpha);
            assert!((got - want).abs() < 1e-6 * want.max(1.0), "V {v} alpha {alpha}: {got} vs {want}");
        }
    }

    /// scripts/reference/cs_boundary.py's output (scipy 1.17.1).
    const REFERENCE: [(f64, f64, f64); 6] = [
        (0.01, 0.05, 0.32182043658752235),
        (0.001, 0.05, 0.09775000466133896),
        (0.0001, 0.05, 0.0338566382624799),
        (0.0004, 0.05 / 6.0, 0.07447036276487318),
        (0.0025, 0.01, 0.1788305021907788),
        (1e-05, 0.05 / 40.0, 0.014525056246950505),
    ];

    #[test]
    fn a_group_with_a_clear_gain_is_better_and_one_without_is_equivalent() {
        let rule = Rule::default();
        let e = |log_ratio, var| {
            Some(Estimate { log_ratio, var, flows: [500, 500], strata: 4, coverage: 1.0, mean_s: 1.0 })
        };
        assert_eq!(answer(e((0.5_f64).ln(), 0.001), 0.05, &rule).outcome, Outcome::BBetter);
        assert_eq!(answer(e((1.5_f64).ln(), 0.001), 0.05, &rule).outcome, Outcome::BWorse);
        assert_eq!(answer(e(0.0, 0.00001), 0.05, &rule).outcome, Outcome::NoDifference);
        let unsure = answer(e(0.02, 0.01), 0.05, &rule);
        assert_eq!(unsure.outcome, Outcome::Inconclusive);
        // More flows that would decide: with them, the interval fits within ±5% around +2%.
        let more = unsure.more_flows.unwrap() as f64;
        let shrunk = 0.01 * 1000.0 / (1000.0 + more);
        assert!(cs_half_width(shrunk, 0.05) <= (1.05_f64).ln() - 0.02 + 1e-9);
        assert!(cs_half_width(shrunk * 1.05, 0.05) > (1.05_f64).ln() - 0.02);
        // Significant but small: below δ, not practical.
        let small = answer(e((0.97_f64).ln(), 0.000001), 0.05, &rule);
        assert_eq!((small.outcome, small.practical), (Outcome::NoDifference, false));
        let small_abs = answer(
            Some(Estimate {
                log_ratio: (0.8_f64).ln(),
                var: 1e-4,
                flows: [500, 500],
                strata: 1,
                coverage: 1.0,
                mean_s: 0.001,
            }),
            0.05,
            &rule,
        );
        assert_eq!((small_abs.outcome, small_abs.practical), (Outcome::BBetter, false), "{small_abs:?}");
        assert_eq!(answer(None, 0.05, &rule).outcome, Outcome::TooFewFlows);
    }
}

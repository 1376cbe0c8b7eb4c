//! The switchback's analysis: what everyone on B against everyone on A did to a group's
//! completion time, what a per-connection A/B on the same traffic would have said, and how much
//! A's own flows were slowed (or helped) by B's beside them (docs/experiment-method.md,
//! "Switchback"). Pure: observations and a [`Schedule`] in, estimates out.
//!
//! - **Attribution.** A flow belongs to the block it started in ([`Observation::start_ts`]);
//!   flows that started in a block's burn-in, and flows whose arm is not their A or B block's
//!   (a connection the kernel assigned at a switch), are left out and counted.
//! - **Residuals.** Each flow's `ln T` minus the pooled mean of its stratum (RTT band x response
//!   size, as [`super::decide`] builds them, all counted flows of the group): the sizes and
//!   distances a block happened to draw are not an effect, and the blocks' means vary less.
//! - **Per round.** A round's three blocks are adjacent in time: each estimate is a weighted mean
//!   over rounds of a difference of block means within the round (B block − A block; mixed B −
//!   mixed A; mixed A − A block), so a slow drift of the traffic cancels. Each flow counts the
//!   same within its block: the estimand is per response.
//! - **Variance.** Rounds are the clusters: the sandwich variance of the weighted mean with the
//!   small-sample factor R/(R−1), widened to Student's t with R−1 degrees of freedom at the
//!   confidence sequence's level ([`answer`]). No estimate before [`MIN_ROUNDS`] rounds.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    Observation,
    decide::{self, Answer, Estimate, FLOOR_S, Outcome, PrimaryMetric, Rule},
    groups::Bucket,
    schedule::{Kind, Schedule},
    stats::cluster_variance,
};
use crate::units::band_of;

/// Rounds an estimate needs before it is made. Its variance is estimated from the rounds alone
/// (R − 1 degrees of freedom): with fewer, one unusual round moves the interval's width by half
/// and the Student-t widening grows fast (at α 0.005, ×2.06 on the variance with 8 rounds, ×4.0
/// with 5).
pub(crate) const MIN_ROUNDS: usize = 8;

/// Where a flow stands in the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Counted: round, the kind of the block it started in.
    Counted(i64, Kind),
    /// Started within the burn-in of its block.
    BurnIn,
    /// Its arm is not its A or B block's (assigned at a switch), or its start is not known.
    Mismatched,
}

/// Where `o` stands in schedule `s`.
pub(crate) fn place(o: &Observation, s: &Schedule) -> Place {
    let Some(ts) = o.start_ts() else { return Place::Mismatched };
    if s.in_burn_in(ts) {
        return Place::BurnIn;
    }
    let k = s.block_of(ts);
    match (s.of(o).kind(k), o.arm) {
        (kind @ (Kind::Mixed | Kind::A), 0) | (kind @ (Kind::Mixed | Kind::B), 1) => {
            Place::Counted(Schedule::round_of(k), kind)
        }
        _ => Place::Mismatched,
    }
}

/// The part of a round a counted flow is in: the A block, the B block, the mixed block's A flows
/// or its B flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    ABlock,
    BBlock,
    MixedA,
    MixedB,
}

impl Part {
    const ALL: [Part; 4] = [Part::ABlock, Part::BBlock, Part::MixedA, Part::MixedB];

    /// Where a counted flow of arm `arm` that started in a block of `kind` goes.
    pub(crate) fn of(kind: Kind, arm: usize) -> Part {
        match (kind, arm) {
            (Kind::A, _) => Part::ABlock,
            (Kind::B, _) => Part::BBlock,
            (Kind::Mixed, 0) => Part::MixedA,
            (Kind::Mixed, _) => Part::MixedB,
        }
    }

    /// The block's kind and the arm, as a fleet's series label them (`block`, `arm`).
    pub(crate) fn keys(self) -> (&'static str, &'static str) {
        match self {
            Part::ABlock => ("a", "a"),
            Part::BBlock => ("b", "b"),
            Part::MixedA => ("mixed", "a"),
            Part::MixedB => ("mixed", "b"),
        }
    }

    /// The part a fleet's series labels (`block`, `arm`) name.
    pub(crate) fn of_keys(block: &str, arm: &str) -> Option<Part> {
        Part::ALL.into_iter().find(|p| p.keys() == (block, arm))
    }
}

/// Where in the schedule and in which stratum (RTT band, response size) counted flows are: the
/// finest cut the estimates need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Slot {
    pub(crate) round: i64,
    pub(crate) part: Part,
    pub(crate) band: usize,
    pub(crate) size: Bucket,
}

/// The counted flows of a slot: how many, Σ ln T, Σ T (T their completion time, floored).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Moments {
    pub(crate) n: usize,
    pub(crate) ln: f64,
    pub(crate) seconds: f64,
}

impl Moments {
    fn add(&mut self, m: Moments) {
        self.n += m.n;
        self.ln += m.ln;
        self.seconds += m.seconds;
    }
}

/// A group's flows as the switchback's estimates need them: the counted flows' moments per slot,
/// and what the schedule left out. Every field is a sum over flows, so the tallies of a fleet's
/// hosts (which share the schedule) add into the fleet's, and one host's [`Tally::estimates`]
/// and a fleet's are the same computation.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Tally {
    pub(crate) slots: BTreeMap<Slot, Moments>,
    pub(crate) burn_in: usize,
    pub(crate) mismatched: usize,
    pub(crate) carryover: Carryover,
}

/// One part of a round: its flows, their residuals' weighted sum and their weights' (a flow
/// weighs 1 per response, its stratum's mean completion time when time-weighted), their
/// completion time.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    n: usize,
    sum: f64,
    weight: f64,
    time_s: f64,
}

impl Cell {
    /// The weighted mean residual.
    fn mean(&self) -> f64 {
        self.sum / self.weight
    }
}

/// A difference over rounds, before it is judged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Contrast {
    pub(crate) est: Estimate,
    /// Rounds with flows in both cells.
    pub(crate) rounds: usize,
}

/// A group's three estimates and what the schedule left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Estimates {
    /// B block − A block: everyone on B against everyone on A.
    pub(crate) everyone: Option<Contrast>,
    /// Mixed B − mixed A: the per-connection A/B on the same traffic.
    pub(crate) per_connection: Option<Contrast>,
    /// Mixed A − A block: A's flows beside B's against A's alone.
    pub(crate) interference: Option<Contrast>,
    /// Rounds with flows in both an A and a B block, and in both the A block and the mixed
    /// block's A flows (the interference's), whether or not they are enough.
    pub(crate) rounds: usize,
    pub(crate) interference_rounds: usize,
    /// Flows left out: started in a burn-in; on another arm than their block's.
    pub(crate) burn_in: usize,
    pub(crate) mismatched: usize,
    /// Whether the blocks fit these flows.
    pub(crate) carryover: Carryover,
}

/// Above this share of counted flows running past the next block's burn-in, the blocks are too
/// short for the traffic.
pub(crate) const OVERRUN_SHARE: f64 = 0.02;

/// Whether the blocks fit the traffic. A counted flow still running once the next block's
/// counted flows begin (past its burn-in) shares the path with them, on its own block's arm:
/// the carryover the burn-in is there to keep out, which pulls the everyone-switched estimate
/// toward the per-connection one. The schedule is fixed before the run (every host of a fleet
/// computes it from the seed), so it cannot follow the traffic; the report says whether it fit,
/// and the shortest blocks that would have (shorter blocks: more rounds, a narrower interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Carryover {
    /// Counted flows, and those of them still running past the next block's burn-in.
    pub(crate) counted: usize,
    pub(crate) overran: usize,
    /// The counted flows' 99th percentile of time on the server (how long each held the path),
    /// seconds.
    pub(crate) p99_s: Option<f64>,
    /// At most [`OVERRUN_SHARE`] overran.
    pub(crate) fits: bool,
    /// The shortest of [`CANDIDATE_BLOCKS_S`] (a fifth of it the burn-in), seconds, whose
    /// blocks these flows would have fit: when the run's do not fit, a longer one; when they do,
    /// a shorter one if any (more rounds from the same run). `None` when none would, or when
    /// the flows are not at hand (a fleet's sums).
    pub(crate) suggest: Option<[f64; 2]>,
}

/// The block lengths a suggestion is drawn from, seconds, each with a fifth of it as its
/// burn-in (the defaults' proportion, 15 s and 3 s): from a block that holds a second to five
/// minutes, past which a run of the default ten minutes has fewer than [`MIN_ROUNDS`] rounds.
const CANDIDATE_BLOCKS_S: [f64; 15] =
    [1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0, 300.0];

/// Fewer flows than this counted under a candidate, and its share says too little to suggest it.
const MIN_FIT_FLOWS: usize = 50;

impl Carryover {
    /// The carryover of the counted flows `counted` (each with its block) under `s`, and the
    /// shortest candidate blocks the group's flows `all` (whatever their block or arm) fit.
    fn of(counted: &[(&Observation, i64)], all: &[&Observation], s: &Schedule) -> Carryover {
        let overran = counted.iter().filter(|(o, k)| Carryover::overran(o, *k, s)).count();
        let mut times: Vec<f64> = counted.iter().map(|(o, _)| o.duration_s).collect();
        times.sort_by(f64::total_cmp);
        let p99_s = (!times.is_empty()).then(|| times[((times.len() - 1) as f64 * 0.99).round() as usize]);
        let c = Carryover::of_counts(counted.len(), overran, p99_s);
        Carryover { suggest: Carryover::shortest_fit(all, s.block_s, c.fits), ..c }
    }

    /// The shortest candidate blocks (and a fifth of each as burn-in) that `flows` would have
    /// fit, longer than `block_s` when the run's blocks did not fit (`fits` false), shorter when
    /// they did. Arm-blind: whether a flow would overrun depends on when it started and how
    /// long it ran, which the suggestion takes as they were.
    fn shortest_fit(flows: &[&Observation], block_s: f64, fits: bool) -> Option<[f64; 2]> {
        CANDIDATE_BLOCKS_S
            .into_iter()
            .filter(|&b| if fits { b < block_s } else { b > block_s })
            .map(|b| Schedule { block_s: b, burn_in_s: b / 5.0, seed: 0, host: None })
            .find(|c| {
                let (mut counted, mut overran) = (0, 0);
                for o in flows {
                    let Some(ts) = o.start_ts().filter(|&ts| !c.in_burn_in(ts)) else { continue };
                    counted += 1;
                    overran += usize::from(Carryover::overran(o, c.block_of(ts), c));
                }
                counted >= MIN_FIT_FLOWS && overran as f64 <= OVERRUN_SHARE * counted as f64
            })
            .map(|c| [c.block_s, c.burn_in_s])
    }

    /// Whether `o`, counted in block `k`, was still running once the next block's counted flows
    /// began.
    pub(crate) fn overran(o: &Observation, k: i64, s: &Schedule) -> bool {
        o.end_ts.is_some_and(|end| end > s.start_of(k + 1) + s.burn_in_s)
    }

    /// The carryover of `counted` flows of which `overran` overran, their time's 99th
    /// percentile `p99_s` where known (a fleet's sums have none), with no suggestion (it needs
    /// the flows).
    pub(crate) fn of_counts(counted: usize, overran: usize, p99_s: Option<f64>) -> Carryover {
        let fits = overran as f64 <= OVERRUN_SHARE * counted as f64;
        Carryover { counted, overran, p99_s, fits, suggest: None }
    }
}

/// The three estimates for the flows `members` of `obs`.
pub(crate) fn estimate(
    obs: &[Observation],
    members: &[usize],
    s: &Schedule,
    rtt_bands_ms: &[f64],
    metric: PrimaryMetric,
) -> Estimates {
    tally(obs, members, s, rtt_bands_ms).estimates(metric)
}

/// Where the flows `members` of `obs` stand in schedule `s`, summed per slot.
pub(crate) fn tally(obs: &[Observation], members: &[usize], s: &Schedule, rtt_bands_ms: &[f64]) -> Tally {
    let mut out = Tally::default();
    let mut blocks = Vec::new();
    for &i in members {
        let o = &obs[i];
        match place(o, s) {
            Place::BurnIn => out.burn_in += 1,
            Place::Mismatched => out.mismatched += 1,
            Place::Counted(round, kind) => {
                blocks.push((o, o.start_ts().map_or(0, |ts| s.block_of(ts))));
                out.slots.entry(slot(o, round, kind, rtt_bands_ms)).or_default().add(moments(o));
            }
        }
    }
    let all: Vec<&Observation> = members.iter().map(|&i| &obs[i]).collect();
    out.carryover = Carryover::of(&blocks, &all, s);
    out
}

/// The slot of `o`, counted in `round` in a block of `kind`.
pub(crate) fn slot(o: &Observation, round: i64, kind: Kind, rtt_bands_ms: &[f64]) -> Slot {
    Slot { round, part: Part::of(kind, o.arm), band: band_of(o.min_rtt_us, rtt_bands_ms), size: Bucket::of(o.bytes) }
}

/// One flow's moments.
pub(crate) fn moments(o: &Observation) -> Moments {
    let t = o.client_s().max(FLOOR_S);
    Moments { n: 1, ln: t.ln(), seconds: t }
}

impl Tally {
    /// The tallies `parts` (of disjoint groups, or of hosts running the same schedule) as one.
    /// The carryover's percentile and suggestion are not sums: the whole has neither.
    pub(crate) fn sum<'a>(parts: impl IntoIterator<Item = &'a Tally>) -> Tally {
        let mut out = Tally::default();
        let mut overran = 0;
        for t in parts {
            for (slot, m) in &t.slots {
                out.slots.entry(*slot).or_default().add(*m);
            }
            out.burn_in += t.burn_in;
            out.mismatched += t.mismatched;
            overran += t.carryover.overran;
        }
        let counted = out.slots.values().map(|m| m.n).sum();
        out.carryover = Carryover::of_counts(counted, overran, None);
        out
    }

    /// Counted flows of the mixed blocks per arm: the only ones that drew their arm.
    pub(crate) fn mixed(&self) -> [usize; 2] {
        [Part::MixedA, Part::MixedB].map(|p| self.slots.iter().filter(|(s, _)| s.part == p).map(|(_, m)| m.n).sum())
    }

    /// The three estimates. Residuals are each flow's `ln T` minus its stratum's mean over the
    /// counted flows; a slot's residuals sum to its Σ ln T minus its flows times that mean.
    pub(crate) fn estimates(&self, metric: PrimaryMetric) -> Estimates {
        // Per stratum: flows, the sum of their log times, their time.
        let mut strata: BTreeMap<(usize, Bucket), Moments> = BTreeMap::new();
        for (slot, m) in &self.slots {
            strata.entry((slot.band, slot.size)).or_default().add(*m);
        }
        let mut rounds: BTreeMap<i64, [Cell; 4]> = BTreeMap::new();
        for (slot, m) in &self.slots {
            let st = strata[&(slot.band, slot.size)];
            // Time-weighted, a stratum's flows together weigh its share of the time, as the
            // per-connection estimate's strata do: each flow its stratum's mean time.
            let v = match metric {
                PrimaryMetric::TimeWeighted => st.seconds / st.n as f64,
                // A quantile metric is the per-connection design's: per response here.
                PrimaryMetric::PerResponse | PrimaryMetric::P50 | PrimaryMetric::P95 | PrimaryMetric::P99 => 1.0,
            };
            let c = &mut rounds.entry(slot.round).or_default()[slot.part as usize];
            c.n += m.n;
            c.weight += v * m.n as f64;
            c.sum += v * (m.ln - m.n as f64 * st.ln / st.n as f64);
            c.time_s += m.seconds;
        }
        let contrast = |from: Part, to: Part| contrast(&rounds, from as usize, to as usize, strata.len());
        Estimates {
            everyone: contrast(Part::ABlock, Part::BBlock),
            per_connection: contrast(Part::MixedA, Part::MixedB),
            interference: contrast(Part::ABlock, Part::MixedA),
            rounds: paired(&rounds, Part::ABlock as usize, Part::BBlock as usize).count(),
            interference_rounds: paired(&rounds, Part::ABlock as usize, Part::MixedA as usize).count(),
            burn_in: self.burn_in,
            mismatched: self.mismatched,
            carryover: self.carryover,
        }
    }
}

/// Cells `from` and `to` of each round that has flows in both.
fn paired(rounds: &BTreeMap<i64, [Cell; 4]>, from: usize, to: usize) -> impl Iterator<Item = [&Cell; 2]> {
    rounds.values().filter(move |c| c[from].n > 0 && c[to].n > 0).map(move |c| [&c[from], &c[to]])
}

/// Cell `to`'s mean residual minus cell `from`'s, per round, weighted by `n_from·n_to/(n_from +
/// n_to)` (a round's inverse variance were its flows alike), with the rounds-as-clusters
/// sandwich variance; `None` before [`MIN_ROUNDS`] rounds have flows in both cells.
fn contrast(rounds: &BTreeMap<i64, [Cell; 4]>, from: usize, to: usize, strata: usize) -> Option<Contrast> {
    let pairs: Vec<(f64, f64, [&Cell; 2])> = paired(rounds, from, to)
        .map(|[a, b]| {
            let (na, nb) = (a.n as f64, b.n as f64);
            (na * nb / (na + nb), b.mean() - a.mean(), [a, b])
        })
        .collect();
    let r = pairs.len();
    if r < MIN_ROUNDS {
        return None;
    }
    let w_all: f64 = pairs.iter().map(|p| p.0).sum();
    let theta = pairs.iter().map(|&(w, d, _)| w * d).sum::<f64>() / w_all;
    let scores: Vec<f64> = pairs.iter().map(|&(w, d, _)| w * (d - theta) / w_all).collect();
    let var = cluster_variance(&scores);
    let flows = [0, 1].map(|side| pairs.iter().map(|p| p.2[side].n).sum::<usize>());
    let time_s: f64 = pairs.iter().map(|p| p.2[0].time_s + p.2[1].time_s).sum();
    Some(Contrast {
        est: Estimate {
            log_ratio: theta,
            // Rounds that all agree would claim a certainty they do not have.
            var: var.max(1e-8),
            flows,
            strata,
            coverage: 1.0,
            mean_s: time_s / (flows[0] + flows[1]) as f64,
        },
        rounds: r,
    })
}

/// A switchback group's estimates beside its answer, as the report carries them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct SwitchbackGroup {
    /// Rounds with flows in both an A and a B block (the answer's).
    pub(crate) rounds: usize,
    /// What a per-connection A/B says on the same traffic: the mixed blocks' B flows against
    /// their A flows, at the group's level; it decides nothing.
    pub(crate) per_connection: Answer,
    /// A's own flows beside B's (mixed blocks) against A's alone (A blocks).
    pub(crate) interference: Interference,
    /// The per-connection effect minus the everyone-switched one, percentage points: how far a
    /// per-connection A/B is off here.
    pub(crate) bias_pts: Option<f64>,
    /// Flows left out: started in a block's burn-in; on another arm than their block's.
    pub(crate) left_out: LeftOut,
    /// Whether the blocks fit the traffic.
    pub(crate) carryover: Carryover,
    /// Inconclusive: about how many more rounds would decide if the estimate held (rounds, not
    /// flows, decide a switchback; the answer's `more_flows` is null). Null once decided, or
    /// past [`MAX_MORE_ROUNDS`].
    pub(crate) more_rounds: Option<u64>,
}

/// Beyond this many more rounds a switchback is not said to decide: at a block of a few
/// seconds that is days, and the estimate would not hold still that long.
pub(crate) const MAX_MORE_ROUNDS: u64 = 100_000;

/// How much slower (positive) or faster A's flows were beside B's than alone, %.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Interference {
    pub(crate) effect_pct: Option<f64>,
    /// The always-valid interval, at the group's level.
    pub(crate) low_pct: Option<f64>,
    pub(crate) high_pct: Option<f64>,
    pub(crate) level: f64,
    /// A's flows alone (A blocks), and beside B's (mixed blocks).
    pub(crate) flows: [usize; 2],
    pub(crate) rounds: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LeftOut {
    pub(crate) burn_in: usize,
    pub(crate) mismatched: usize,
}

/// A group's answer (everyone switched) and the rest it carries, each judged at the group's
/// `alpha`.
pub(crate) fn judge(e: &Estimates, alpha: f64, rule: &Rule) -> (Answer, SwitchbackGroup) {
    let mut everyone = answer(e.everyone, alpha, rule);
    let more_rounds =
        e.everyone.filter(|_| everyone.outcome == Outcome::Inconclusive).and_then(|c| more_rounds(c, alpha, rule));
    everyone.more_flows = None;
    let per_connection = answer(e.per_connection, alpha, rule);
    let i = answer(e.interference, alpha, rule);
    let bias_pts = everyone.effect_pct.zip(per_connection.effect_pct).map(|(ev, pc)| pc - ev);
    let other = SwitchbackGroup {
        rounds: e.rounds,
        per_connection,
        interference: Interference {
            effect_pct: i.effect_pct,
            low_pct: i.low_pct,
            high_pct: i.high_pct,
            level: i.level,
            flows: i.flows,
            rounds: e.interference_rounds,
        },
        bias_pts,
        left_out: LeftOut { burn_in: e.burn_in, mismatched: e.mismatched },
        carryover: e.carryover,
        more_rounds,
    };
    (everyone, other)
}

/// The rounds to add before the answer decides if its estimate stays where it is
/// ([`decide::more_clusters`]: the rounds are the clusters).
fn more_rounds(c: Contrast, alpha: f64, rule: &Rule) -> Option<u64> {
    decide::more_clusters(c.est, c.rounds, alpha, rule, MAX_MORE_ROUNDS)
}

/// The answer for a contrast judged at `alpha`: the confidence sequence of [`decide`] on a
/// variance widened to Student's t with R − 1 degrees of freedom (the rounds are its clusters).
pub(crate) fn answer(c: Option<Contrast>, alpha: f64, rule: &Rule) -> Answer {
    decide::clustered_answer(c.map(|c| (c.est, c.rounds)), alpha, rule)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::{
        experiment::{
            analysis::{Analysis, Options, Verdict, analyze},
            report::{build, tests::everything},
            setup::Design,
        },
        rng::Rng,
    };

    /// The schedule of the simulations: 20 s blocks, 4 s burn-in.
    pub(crate) fn schedule(seed: u64) -> Schedule {
        Schedule { block_s: 20.0, burn_in_s: 4.0, seed, host: None }
    }

    /// How a simulated flow's completion time depends on its arm and on the flows beside it:
    /// `beside_a`: A's flows are slower by this share of their time per B share among the flows
    /// that started in the `WINDOW_S` before (1.0: beside B alone they take twice as long);
    /// `b`: B's own factor (everyone on B); `beside_b`: B's flows' slowdown per A share.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Bottleneck {
        pub(crate) b: f64,
        pub(crate) beside_a: f64,
        pub(crate) beside_b: f64,
    }

    /// The flows sharing a bottleneck with a new one: those started in the last 3 s (shorter than
    /// the burn-in, so an A or B block's counted flows share it with their own arm alone).
    const WINDOW_S: f64 = 3.0;

    /// Which arm each simulated connection runs.
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Assign {
        /// As the switchback schedule gives it (mixed blocks: B with probability ½).
        Switchback(Schedule),
        /// Every connection the same arm.
        All(usize),
    }

    /// A shared bottleneck: Poisson arrivals at `rate` per second over `rounds` rounds of the
    /// schedule's blocks, from two client /24s (20 ms and 100 ms away), response sizes over the
    /// four buckets; completion time a few round trips per doubling of the size with lognormal
    /// noise, times the arm's factor and the slowdown from the flows beside it. The arrivals,
    /// sizes and noise depend on `seed` only, not on the arms: the same seed under
    /// [`Assign::All`] gives the everyone-A and everyone-B runs the truth is taken from.
    pub(crate) fn shared(seed: u64, rounds: i64, rate: f64, link: Bottleneck, assign: Assign) -> Vec<Observation> {
        let mut rng = Rng::new(seed);
        let mut arm_rng = Rng::new(seed ^ 0x5eed);
        // Round-aligned start, as the schedule's blocks are to the epoch.
        let s = schedule(0);
        let t0 = s.start_of(3 * 600_000_000);
        let end = t0 + rounds as f64 * 3.0 * s.block_s;
        let mut t = t0;
        let mut starts: Vec<(f64, usize)> = Vec::new();
        let mut out = Vec::new();
        loop {
            t += -rng.uniform().max(1e-12).ln() / rate;
            if t >= end {
                break;
            }
            let far = rng.uniform() < 0.4;
            let rtt = if far { 0.100 } else { 0.020 };
            let bytes = crate::experiment::analysis::tests::response_bytes(&mut rng, 10_000_000.0);
            let noise = (0.4 * rng.normal()).exp();
            let host = (rng.next_u64() % 250) as u8 + 1;
            let arm = match assign {
                Assign::All(arm) => arm,
                Assign::Switchback(sch) => match sch.kind(sch.block_of(t)) {
                    Kind::A => 0,
                    Kind::B => 1,
                    Kind::Mixed => usize::from(arm_rng.uniform() < 0.5),
                },
            };
            let recent = starts.iter().rev().take_while(|&&(st, _)| st > t - WINDOW_S);
            let (n, nb) = recent.fold((0usize, 0usize), |(n, nb), &(_, a)| (n + 1, nb + a));
            let share_b = if n > 0 { nb as f64 / n as f64 } else { 0.0 };
            starts.push((t, arm));
            let factor =
                if arm == 0 { 1.0 + link.beside_a * share_b } else { link.b * (1.0 + link.beside_b * (1.0 - share_b)) };
            let rounds_of_rtt = 1.0 + (bytes as f64 / 10_000.0).max(1.0).log2();
            let duration_s = rtt * rounds_of_rtt * noise * factor;
            let net = if far { [203, 0, 113] } else { [198, 51, 100] };
            out.push(simulated(
                arm,
                IpAddr::V4(Ipv4Addr::new(net[0], net[1], net[2], host)),
                bytes,
                rtt,
                t,
                duration_s,
            ));
        }
        out.sort_by(|x, y| x.end_ts.unwrap().total_cmp(&y.end_ts.unwrap()));
        out
    }

    /// A simulated flow of arm `arm` from `peer`: `bytes` over a path `rtt` s long, started at
    /// `t` (Unix seconds), taking `duration_s` on the server's side.
    pub(crate) fn simulated(arm: usize, peer: IpAddr, bytes: u64, rtt: f64, t: f64, duration_s: f64) -> Observation {
        Observation {
            arm,
            cc: ["cubic", "bbr"][arm].to_string(),
            switched: false,
            peer,
            bytes,
            duration_s,
            handshake_s: rtt,
            end_ts: Some(t + duration_s),
            goodput_bps: Some((bytes as f64 * 8.0 / duration_s) as u64),
            srtt_median_us: Some((rtt * 1.2e6) as u32),
            min_rtt_us: Some((rtt * 1e6) as u32),
            retrans: 0,
            data_segs_out: (bytes / 1448 + 1) as u32,
            cgroup_id: Some(7),
            cgroup: Some("/system.slice/nginx.service".into()),
            censored: false,
            status_quo: None,
            host: None,
        }
    }

    /// The truth by construction: the per-response mean of `ln(T_B/T_A)` over the same seeded
    /// arrivals run everyone-A and everyone-B, the flows of A and B blocks after their burn-in.
    pub(crate) fn truth(seed: u64, rounds: i64, rate: f64, link: Bottleneck) -> f64 {
        let key = |o: &Observation| o.start_ts().unwrap();
        let mut all = [0, 1].map(|arm| shared(seed, rounds, rate, link, Assign::All(arm)));
        for run in &mut all {
            run.sort_by(|x, y| key(x).total_cmp(&key(y)));
        }
        let s = schedule(0);
        let pairs: Vec<f64> = all[0]
            .iter()
            .zip(&all[1])
            .filter(|(a, _)| !s.in_burn_in(key(a)))
            .map(|(a, b)| (b.client_s() / a.client_s()).ln())
            .collect();
        pairs.iter().sum::<f64>() / pairs.len() as f64
    }

    const BANDS: [f64; 3] = [10.0, 50.0, 150.0];

    /// Flows are placed by their start: in burn-in, on their block's arm, or at a switch on the
    /// other one; the counts add up to the flows.
    #[test]
    fn flows_are_placed_by_their_start_and_the_left_out_counted() {
        let s = schedule(3);
        let link = Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 };
        let mut obs = shared(1, 12, 3.0, link, Assign::Switchback(s));
        // A connection assigned at a switch: in an A block, on arm B.
        let at_switch = obs.iter().position(|o| place(o, &s) == Place::Counted(place_round(o, &s), Kind::A)).unwrap();
        obs[at_switch].arm = 1;
        let e = estimate(&obs, &(0..obs.len()).collect::<Vec<_>>(), &s, &BANDS, PrimaryMetric::PerResponse);
        let burn = obs.iter().filter(|o| s.in_burn_in(o.start_ts().unwrap())).count();
        assert_eq!((e.burn_in, e.mismatched), (burn, 1));
        let c = e.everyone.unwrap();
        let per = e.per_connection.unwrap();
        assert_eq!(c.est.flows[0] + c.est.flows[1] + per.est.flows[0] + per.est.flows[1] + burn + 1, obs.len());
        assert_eq!((e.rounds, c.rounds), (12, 12));
        // A flow without a time cannot be placed: counted as such, never silently dropped.
        obs[0].end_ts = None;
        assert_eq!(place(&obs[0], &s), Place::Mismatched);
    }

    /// Flows every 0.1 s over 30 rounds of 20 s blocks (4 s burn-in), each on its block's arm
    /// (a mixed block's alternating), a share `long` of them (drawn) taking 12 s, the rest 0.5 s.
    fn steady(long: f64) -> Vec<Observation> {
        let s = schedule(5);
        let peer = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7));
        let mut rng = crate::rng::Rng::new(11);
        (0..18_000)
            .map(|i| {
                let t = 1_800_000_000.0 + i as f64 * 0.1;
                let arm = match s.kind(s.block_of(t)) {
                    Kind::A => 0,
                    Kind::B => 1,
                    Kind::Mixed => i % 2,
                };
                let duration_s = if rng.uniform() < long { 12.0 } else { 0.5 };
                simulated(arm, peer, 20_000, 0.05, t, duration_s)
            })
            .collect()
    }

    /// Short flows (0.5 s, one every 0.1 s) fit 20 s blocks with a 4 s burn-in, and 2 s blocks
    /// would have (the shortest that do: in 1 s blocks, those started in the last 0.3 s run past
    /// the next one's 0.2 s burn-in, two of every eight counted). When 10% of them take 12 s,
    /// half of those (the ones starting in the block's last 8 s) run past the next block's
    /// burn-in: 5% of the counted flows, too many;
    /// 30 s blocks (6 s burn-in) would still see a quarter of them overrun (2.5%), 45 s blocks
    /// (9 s) a twelfth (0.8%): 45 s would have fit. The report says both.
    #[test]
    fn the_report_says_whether_the_blocks_fit_the_traffic() {
        let s = schedule(5);
        let carryover = |obs: &[Observation]| {
            estimate(obs, &(0..obs.len()).collect::<Vec<_>>(), &s, &BANDS, PrimaryMetric::PerResponse).carryover
        };
        let short = carryover(&steady(0.0));
        assert!(short.fits && short.overran == 0, "{short:?}");
        assert_eq!((short.p99_s, short.suggest), (Some(0.5), Some([2.0, 0.4])));
        let long = carryover(&steady(0.1));
        let share = long.overran as f64 / long.counted as f64;
        assert!(!long.fits && (0.04..0.06).contains(&share), "{long:?} ({share})");
        assert_eq!((long.p99_s, long.suggest), (Some(12.0), Some([45.0, 9.0])));
        // Those flows started in the last 8 s of their block: placed, counted, never at a switch.
        assert_eq!(long.counted, 18_000 - 18_000 / 5);
    }

    fn place_round(o: &Observation, s: &Schedule) -> i64 {
        Schedule::round_of(s.block_of(o.start_ts().unwrap()))
    }

    /// Fewer rounds than [`MIN_ROUNDS`] with flows in both cells: no estimate.
    #[test]
    fn no_estimate_before_min_rounds() {
        let s = schedule(5);
        let link = Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 };
        let obs = shared(2, MIN_ROUNDS as i64 - 1, 3.0, link, Assign::Switchback(s));
        let e = estimate(&obs, &(0..obs.len()).collect::<Vec<_>>(), &s, &BANDS, PrimaryMetric::PerResponse);
        assert!(e.everyone.is_none() && e.per_connection.is_none() && e.interference.is_none(), "{e:?}");
        let obs = shared(2, MIN_ROUNDS as i64, 3.0, link, Assign::Switchback(s));
        let e = estimate(&obs, &(0..obs.len()).collect::<Vec<_>>(), &s, &BANDS, PrimaryMetric::PerResponse);
        assert_eq!(e.everyone.unwrap().rounds, MIN_ROUNDS);
    }

    /// The Student-t widening: large with few rounds, nothing left of it with many.
    #[test]
    fn the_interval_is_widened_to_students_t_by_the_rounds() {
        let c = |rounds| Contrast {
            est: Estimate { log_ratio: 0.0, var: 4e-4, flows: [100, 100], strata: 4, coverage: 1.0, mean_s: 1.0 },
            rounds,
        };
        let ratio = |rounds| decide::widened(c(rounds).est, rounds, 0.005).var / 4e-4;
        // t 4.029 (7 d.f.) and 3.038 (29 d.f.) against z 2.807 at 0.005, two-sided.
        assert!((ratio(8) - (4.029_337 / 2.807_034_f64).powi(2)).abs() < 1e-4, "{}", ratio(8));
        assert!((ratio(30) - (3.038_046 / 2.807_034_f64).powi(2)).abs() < 1e-4, "{}", ratio(30));
        assert!(ratio(100_000) < 1.0001, "{}", ratio(100_000));
    }

    fn switchback_run(seed: u64, rounds: i64, link: Bottleneck) -> (Vec<Observation>, Options) {
        let s = schedule(seed);
        let obs = shared(seed, rounds, RATE, link, Assign::Switchback(s));
        (obs, Options { design: Design::Switchback(s), secondary: false, ..Options::default() })
    }

    /// New flows per second in the simulations: about 48 counted per block.
    const RATE: f64 = 3.0;

    /// A shared bottleneck where A's flows are slowed in proportion to the share of B's beside
    /// them and B's barely: B beside A looks far better than everyone on B against everyone on A.
    /// The switchback's interval holds the truth (the same arrivals run everyone-A and
    /// everyone-B); the per-connection A/B on the same traffic (its mixed blocks) is biased, its
    /// interval far from the truth; the interference is found, and said so.
    #[test]
    fn on_a_shared_bottleneck_the_switchback_finds_the_truth_and_the_per_connection_bias() {
        let link = Bottleneck { b: 0.85, beside_a: 0.8, beside_b: 0.1 };
        let pct = crate::experiment::format::pct_of_log;
        for seed in 1..=5 {
            let truth = pct(truth(seed, 30, RATE, link));
            let (obs, opts) = switchback_run(seed, 30, link);
            let r = build(&analyze(&obs, &opts), &everything());
            let g = &r.groups[0];
            let (ans, sb) = (&g.result.answer, g.result.switchback.as_ref().unwrap());
            let (lo, hi) = (ans.low_pct.unwrap(), ans.high_pct.unwrap());
            assert!(lo <= truth && truth <= hi, "seed {seed}: truth {truth:.1}% outside [{lo:.1}, {hi:.1}]");
            let pc = &sb.per_connection;
            assert!(pc.high_pct.unwrap() < truth, "seed {seed}: per-connection {pc:?}, truth {truth:.1}%");
            assert!(sb.bias_pts.unwrap() < -5.0, "{:?}", sb.bias_pts);
            let i = &sb.interference;
            assert!(i.low_pct.unwrap() > 0.0, "seed {seed}: {i:?}");
            let words = g.interference.as_deref().unwrap();
            assert!(
                words.starts_with("interference for all flows: CUBIC's own flows were ")
                    && words.contains("slower beside BBR than alone: a per-connection A/B here says −"),
                "{words}"
            );
            assert!(
                g.conclusion.contains("BBR for everyone against CUBIC for everyone: completion time"),
                "{}",
                g.conclusion
            );
            // The commands rest on the everyone-switched answer, without the per-connection caveat.
            assert_eq!(r.recommend.commands, ["bbrscope apply bbr"], "{:?}", r.recommend);
            assert!(r.recommend.notes.iter().all(|n| !n.contains("per-connection A/B")), "{:?}", r.recommend);
            if seed == 1 {
                crate::output::errln!(
                    "shared bottleneck: truth {truth:.1}%, switchback {:.1}% [{lo:.1}, {hi:.1}], per-connection \
                     {:.1}% [{:.1}, {:.1}], interference {:.1}% [{:.1}, {:.1}]\n{words}",
                    ans.effect_pct.unwrap(),
                    pc.effect_pct.unwrap(),
                    pc.low_pct.unwrap(),
                    pc.high_pct.unwrap(),
                    i.effect_pct.unwrap(),
                    i.low_pct.unwrap(),
                    i.high_pct.unwrap()
                );
                let v = serde_json::to_value(&r).unwrap();
                assert_eq!(v["design"]["name"], "switchback");
                assert_eq!((v["design"]["block_s"].as_f64(), v["design"]["rounds"].as_u64()), (Some(20.0), Some(30)));
                assert_eq!(v["groups"][0]["design"], "switchback");
                assert!(v["groups"][0]["switchback"]["left_out"]["burn_in"].as_u64().unwrap() > 0);
                let text = r.render_text();
                assert!(
                    text.contains("  design: switchback, blocks of 20 s (burn-in 4 s, seed 1), 30 rounds"),
                    "{text}"
                );
                assert!(text.contains("\ninterference for all flows: CUBIC's own flows were "), "{text}");
                assert!(v["groups"][0]["switchback"]["carryover"]["counted"].as_u64().unwrap() > 0, "{v}");
                assert!(
                    text.contains("\n  blocks fit this traffic: ") || text.contains("\n  blocks too short"),
                    "{text}"
                );
                assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
            }
        }
    }

    /// The sign the audit saw flip: B slower for everyone, yet its flows beside A's
    /// (which they slow) faster than A's. The per-connection A/B on the same traffic says B is
    /// faster; the switchback says it is slower, and recommends A, never B.
    #[test]
    fn where_the_per_connection_sign_is_wrong_the_switchback_recommends_against_b() {
        let link = Bottleneck { b: 1.15, beside_a: 1.0, beside_b: 0.0 };
        for seed in 1..=3 {
            let (obs, opts) = switchback_run(seed, 30, link);
            let r = build(&analyze(&obs, &opts), &everything());
            let g = &r.groups[0];
            let pc = &g.result.switchback.as_ref().unwrap().per_connection;
            assert_eq!(pc.outcome, decide::Outcome::BBetter, "seed {seed}: {pc:?}");
            assert_eq!(g.result.verdict, Verdict::ABetter, "seed {seed}: {}", g.conclusion);
            assert!(r.recommend.commands.iter().all(|c| !c.contains(" bbr")), "{:?}", r.recommend);
        }
    }

    /// Runs of `rounds` rounds of `link`, blocks re-drawn with each seed: how often any group is
    /// called better or worse, how often a command comes, and how often "all flows" says B is
    /// worse (the power against a planted slowdown).
    fn rates(seeds: std::ops::Range<u64>, rounds: i64, link: Bottleneck) -> (f64, f64, f64) {
        let (mut called, mut commands, mut worse) = (0, 0, 0);
        let n = (seeds.end - seeds.start) as f64;
        for seed in seeds {
            let (obs, opts) = switchback_run(seed, rounds, link);
            let a = analyze(&obs, &opts);
            called += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
            worse += usize::from(a.groups[0].verdict == Verdict::ABetter);
            commands += usize::from(!build(&a, &everything()).recommend.commands.is_empty());
        }
        (called as f64 / n, commands as f64 / n, worse as f64 / n)
    }

    /// A/A (B is A, no interference), 200 runs each of 30 rounds (30 min of 20 s blocks) and of
    /// [`MIN_ROUNDS`] (the fewest that judge): any group called different, and any command, in at
    /// most 5% (measured: 0 and 0 of 200 with 30 rounds, 1 and 0 of 200 with 8).
    #[test]
    fn a_a_switchbacks_rarely_call_a_difference_or_recommend() {
        let same = Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 };
        for rounds in [30, MIN_ROUNDS as i64] {
            let (called, commands, _) = rates(0..200, rounds, same);
            crate::output::errln!("switchback A/A, {rounds} rounds: called {called:.3}, commands {commands:.3}");
            assert!(called <= 0.05 && commands <= 0.05, "{rounds} rounds: called {called}, commands {commands}");
        }
    }

    /// Power: everyone on B 30% (or 10%) slower on the server's side, no interference: how often
    /// "all flows" finds B worse in 100 runs of 30 rounds and of 10.
    #[test]
    fn a_planted_everyone_slowdown_is_found() {
        let power = |b, rounds| rates(0..100, rounds, Bottleneck { b, beside_a: 0.0, beside_b: 0.0 }).2;
        let p = [power(1.3, 30), power(1.3, 10), power(1.1, 30), power(1.1, 10)];
        let said =
            format!("x1.3: {:.2} at 30 rounds, {:.2} at 10; x1.1: {:.2} at 30, {:.2} at 10", p[0], p[1], p[2], p[3]);
        crate::output::errln!("switchback power, {said}");
        assert!(p[0] >= 0.95 && p[1] >= 0.8 && p[2] >= 0.8, "{said}");
    }

    /// A fleet of `hosts` hosts given schedule `fleet`, each its own uplink `link` with its own
    /// arrivals, under one fleet-wide swing: every flow starting in block k, on every host, takes
    /// exp(`swing`·z_k) times as long (a fleet's peak, an upstream fault; the same on both arms,
    /// so the truth is unmoved). `host_level`: each host draws its own order of the rounds
    /// (`--design host-switchback`), else every host runs the fleet's. The flows pooled as
    /// pooled recordings give them (each with its host's salt), and the options of their analysis.
    fn fleet_run(seed: u64, hosts: u64, link: Bottleneck, host_level: bool, swing: f64) -> (Vec<Observation>, Options) {
        const ROUNDS: i64 = 10;
        let fleet = schedule(seed);
        let mut rng = Rng::new(seed ^ 0xf1ee7);
        let first = fleet.block_of(schedule(0).start_of(3 * 600_000_000));
        let z: Vec<f64> = (0..3 * ROUNDS + 3).map(|_| rng.normal()).collect();
        let mut obs = Vec::new();
        for h in 0..hosts {
            let s = Schedule { host: host_level.then(|| Schedule::host_salt(&format!("edge-{h}"))), ..fleet };
            for o in shared(seed * 100 + h, ROUNDS, 1.5, link, Assign::Switchback(s)) {
                let start = o.start_ts().unwrap();
                let factor = (swing * z[(fleet.block_of(start) - first) as usize]).exp();
                let (duration_s, handshake_s) = (o.duration_s * factor, o.handshake_s * factor);
                obs.push(Observation { duration_s, handshake_s, end_ts: Some(start + duration_s), host: s.host, ..o });
            }
        }
        obs.sort_by(|x, y| x.end_ts.unwrap().total_cmp(&y.end_ts.unwrap()));
        let design = Design::Switchback(Schedule { host: host_level.then_some(0), ..fleet });
        (obs, Options { design, secondary: false, ..Options::default() })
    }

    /// Six hosts, ten rounds, a fleet-wide swing of 15% from block to block. A host-level
    /// switchback spreads every block over the kinds across the hosts, so the swing falls on A
    /// and B alike within a round: A/A, any group called different or any command in at most 5%
    /// of 100 runs; everyone on B 30% slower on the server's side (+20.4% as clients feel it: the
    /// truth from the same arrivals run everyone-A and everyone-B) found in most runs, its
    /// interval holding the truth in at least 90%, and narrower than the synchronized schedule's,
    /// whose rounds carry the swing whole (both valid: the synchronized one holds the truth as
    /// often, but finds the slowdown far less often). Measured: A/A 0 and 0 of 100; found 74 of
    /// 100 against 2, held 100 and 100, median widths 33.9 and 85.7 points.
    #[test]
    fn a_host_level_switchback_keeps_its_error_rate_and_outruns_fleet_wide_swings() {
        let same = Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 };
        let slower = Bottleneck { b: 1.3, ..same };
        let runs = |link: Bottleneck, host_level: bool| -> Vec<Analysis> {
            (0..100)
                .map(|seed| {
                    let (obs, opts) = fleet_run(seed, 6, link, host_level, 0.15);
                    analyze(&obs, &opts)
                })
                .collect()
        };
        let aa = runs(same, true);
        let called = aa.iter().filter(|a| a.groups.iter().any(|g| g.verdict.better_arm().is_some())).count();
        let commands = aa.iter().filter(|a| !build(a, &everything()).recommend.commands.is_empty()).count();
        let truth: f64 = (0..6).map(|h| truth(h, 10, 1.5, slower)).sum::<f64>() / 6.0;
        let truth = crate::experiment::format::pct_of_log(truth);
        let judged = |host_level: bool| {
            let all: Vec<Answer> = runs(slower, host_level).into_iter().map(|a| a.groups[0].answer.clone()).collect();
            let found = all.iter().filter(|a| a.outcome == Outcome::BWorse).count();
            let held = all.iter().filter(|a| a.low_pct.unwrap() <= truth && truth <= a.high_pct.unwrap()).count();
            let mut widths: Vec<f64> = all.iter().map(|a| a.high_pct.unwrap() - a.low_pct.unwrap()).collect();
            widths.sort_by(f64::total_cmp);
            (found, held, widths[widths.len() / 2])
        };
        let (host, sync) = (judged(true), judged(false));
        let said = format!(
            "host-level A/A: {called}/100 called, {commands}/100 commands; B {truth:+.1}%: host-level found {}/100, \
             held {}/100, median width {:.1} points; synchronized found {}/100, held {}/100, width {:.1}",
            host.0, host.1, host.2, sync.0, sync.1, sync.2
        );
        crate::output::errln!("{said}");
        assert!(called <= 5 && commands <= 5, "{said}");
        assert!(host.0 >= 60 && host.1 >= 90 && sync.1 >= 90, "{said}");
        assert!(host.2 < 0.6 * sync.2 && sync.0 < host.0, "{said}");
    }

    /// Time-weighted (`--metric time-weighted`), a switchback weighs each flow by its stratum's
    /// mean completion time: 200 A/A runs of 10 rounds call a difference, or recommend, in at most
    /// 5% of them; everyone on B 30% slower is found in most runs of 30 rounds; and the
    /// report says the metric. Per response stays the switchback's default.
    #[test]
    fn a_time_weighted_switchback_keeps_its_error_rate_and_finds_a_planted_slowdown() {
        let tw = |seed: u64, rounds: i64, b: f64| {
            let (obs, opts) = switchback_run(seed, rounds, Bottleneck { b, beside_a: 0.0, beside_b: 0.0 });
            assert_eq!(opts.metric(), PrimaryMetric::PerResponse, "the switchback's default");
            analyze(&obs, &Options { metric: Some(PrimaryMetric::TimeWeighted), ..opts })
        };
        let (mut called, mut commands) = (0, 0);
        for seed in 0..200 {
            let a = tw(seed, 10, 1.0);
            called += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
            commands += usize::from(!build(&a, &everything()).recommend.commands.is_empty());
        }
        let found = (0..50).filter(|&seed| tw(seed, 30, 1.3).groups[0].verdict == Verdict::ABetter).count();
        crate::output::errln!(
            "time-weighted switchback: A/A {called}/200 called, {commands}/200 commands; x1.3 found {found}/50"
        );
        assert!(called <= 10 && commands <= 10, "A/A: {called}/200 called, {commands}/200 commands");
        assert!(found >= 40, "x1.3 found in {found}/50");
        let r = build(&tw(1, 10, 1.0), &everything());
        assert_eq!(serde_json::to_value(&r).unwrap()["decision"]["metric"], "time_weighted");
        assert!(r.render_text().contains("  metric: time-weighted (each stratum by its completion time)"));
    }

    /// The guardrail under a switchback, its looks every 2 s over whole runs of 10 rounds (10 min
    /// of 20 s blocks): 200 A/A runs stop, or send a group back, in at most 5% of them, watching
    /// both arms or the moved one; a big everyone-B win never stops one; an everyone-B 40% slower
    /// is stopped.
    #[test]
    fn the_guardrail_under_a_switchback_holds_its_error_rate_and_its_purpose() {
        use crate::experiment::guardrail::{StopRule, replay};
        let names = ["cubic".to_string(), "bbr".to_string()];
        let moved = StopRule { status_quo: Some("cubic".into()), ..StopRule::default() };
        let stopped = |link: Bottleneck, seeds: std::ops::Range<u64>, rule: &StopRule| {
            seeds
                .filter(|&seed| {
                    let (obs, opts) = switchback_run(seed, 10, link);
                    let rule = StopRule { switchback: opts.design.schedule(), ..rule.clone() };
                    let r = replay(&obs, &rule, &names, 2.0);
                    r.stopped_at_s.is_some() || !r.switched_back.is_empty()
                })
                .count()
        };
        let same = Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 };
        let (both, one) = (stopped(same, 0..200, &StopRule::default()), stopped(same, 200..400, &moved));
        crate::output::errln!("switchback A/A guardrail: {both}/200 (both arms watched), {one}/200 (B watched)");
        assert!(both <= 10 && one <= 10, "{both}/200, {one}/200");
        let win = Bottleneck { b: 0.5, beside_a: 0.0, beside_b: 0.0 };
        assert_eq!(stopped(win, 0..20, &moved), 0, "a big win stopped a run");
        let harm = Bottleneck { b: 1.4, beside_a: 0.0, beside_b: 0.0 };
        assert_eq!(stopped(harm, 0..20, &moved), 20, "B 40% slower for everyone went on");
    }

    /// An undecided switchback says how many more rounds would decide if its estimate held: with
    /// them the same estimate's interval decides, with one fewer it does not; fewer than scaling
    /// its flows would say (Student's t tightens with the rounds); and the conclusion says rounds
    /// and their time (three blocks each), not flows.
    #[test]
    fn an_undecided_switchback_says_the_rounds_that_would_decide() {
        let rule = Rule::default();
        let alpha = 0.05;
        let c = Contrast {
            est: Estimate { log_ratio: 0.08, var: 0.004, flows: [300, 300], strata: 8, coverage: 1.0, mean_s: 1.0 },
            rounds: 10,
        };
        let at = |more: u64| {
            let r = c.rounds + more as usize;
            answer(
                Some(Contrast { est: Estimate { var: c.est.var * 10.0 / r as f64, ..c.est }, rounds: r }),
                alpha,
                &rule,
            )
            .outcome
        };
        assert_eq!(at(0), Outcome::Inconclusive);
        let k = more_rounds(c, alpha, &rule).expect("decides within the bound");
        assert!(k > 1, "{k}");
        assert_eq!(at(k), Outcome::BWorse, "{k} more rounds");
        assert_eq!(at(k - 1), Outcome::Inconclusive, "{} more rounds", k - 1);
        let flows = answer(Some(c), alpha, &rule).more_flows.unwrap();
        assert!((k as f64) < flows as f64 * 10.0 / 600.0, "{k} rounds against {flows} flows");
        // Rounds so noisy that no bounded run would decide are not promised.
        let noisy = Contrast { est: Estimate { var: 1e4, ..c.est }, ..c };
        assert_eq!(more_rounds(noisy, alpha, &rule), None);

        let mut said = 0;
        for seed in 0..20 {
            let (obs, opts) = switchback_run(seed, 10, Bottleneck { b: 1.1, beside_a: 0.0, beside_b: 0.0 });
            let r = build(&analyze(&obs, &opts), &everything());
            let g = &r.groups[0];
            if g.result.verdict != Verdict::Inconclusive {
                continue;
            }
            let sb = g.result.switchback.as_ref().unwrap();
            assert_eq!(g.result.answer.more_flows, None, "rounds decide a switchback, not flows");
            let Some(k) = sb.more_rounds else { continue };
            let when = crate::experiment::format::fmt_span(k as f64 * 3.0 * 20.0);
            let rounds = if k == 1 { "round" } else { "rounds" };
            let want = format!(
                "; about {} more {rounds} (≈ {when}) would decide",
                crate::experiment::format::fmt_count(k as usize)
            );
            assert!(g.conclusion.contains(&want), "{} lacks {want}", g.conclusion);
            assert!(!g.conclusion.contains("more flows"), "{}", g.conclusion);
            said += 1;
        }
        assert!(said >= 3, "{said} undecided runs said their rounds");
    }

    /// The interference line says what its interval says: slower beside B only with the interval
    /// above 0, faster only below, "none shown" when it holds 0; and a group without the rounds
    /// says how many it has of those it needs.
    #[test]
    fn the_interference_line_never_contradicts_its_interval() {
        let mut seen = [false; 3];
        for (seed, beside_a) in [(1, 0.8), (2, -0.4), (3, 0.0), (4, 0.0), (5, -0.4), (6, 0.8)] {
            let (obs, opts) = switchback_run(seed, 20, Bottleneck { b: 0.9, beside_a, beside_b: 0.0 });
            let r = build(&analyze(&obs, &opts), &everything());
            for g in &r.groups {
                let i = &g.result.switchback.as_ref().unwrap().interference;
                let (lo, hi) = (i.low_pct.unwrap(), i.high_pct.unwrap());
                let words = g.interference.as_deref().unwrap();
                if words.contains(" slower beside BBR than alone") {
                    assert!(lo > 0.0, "{words}");
                    seen[0] = true;
                } else if words.contains(" faster beside BBR than alone") {
                    assert!(hi < 0.0, "{words}");
                    seen[1] = true;
                } else {
                    assert!(lo <= 0.0 && hi >= 0.0 && words.contains(": none shown: "), "{words}");
                    seen[2] = true;
                }
            }
        }
        assert_eq!(seen, [true; 3], "every wording met");
        let (obs, opts) = switchback_run(7, 5, Bottleneck { b: 0.9, beside_a: 0.0, beside_b: 0.0 });
        let r = build(&analyze(&obs, &opts), &everything());
        let g = &r.groups[0];
        assert_eq!(g.result.verdict, Verdict::TooFewFlows);
        assert_eq!(
            g.conclusion,
            "too few rounds for all flows: 5 of the 8 needed with flows in both an A and a B block"
        );
        assert!(
            g.interference.as_deref().unwrap().contains("not measured yet (5 of the 8 rounds needed)"),
            "{:?}",
            g.interference
        );
    }
}

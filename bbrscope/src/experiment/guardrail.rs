//! The guardrail: ends an experiment early when an arm is clearly worse for some client group.
//!
//! The rule, checked every [`super::monitor::Monitor::PERIOD`] while flows finish:
//! - **Client groups, never a pooled median.** The groups watched are all flows and each band of
//!   minimum RTT, each measured by the stratified estimate of [`super::decide`] (strata of RTT
//!   band x response size), so an arm that drew more far-away clients early is not "slower".
//! - **The arms that moved clients off their status quo** ([`super::status_quo`]), one-sided:
//!   an arm slower than the status quo harms the clients it was given. The status-quo arm
//!   slower is what its clients would have had anyway: a big win for the other arm never stops a
//!   run. Where the status quo is not known (namespaces or routes that disagree, a recording
//!   made before it was kept), both arms are watched.
//! - **Stop** when a group's always-valid interval lies wholly on the worse side of zero *and*
//!   the estimate is worse by more than the margin (`--guardrail-pct`): harm that is both real and
//!   large. The interval is a confidence sequence at level `1 − α/k` (k the groups watched), so
//!   however often it looks, an experiment whose arms do not differ is stopped at most α of the
//!   time.

use serde::Serialize;

use super::{
    Observation,
    analysis::ran_its_arm,
    decide::{Strata, cs_half_width},
    format::{fmt_count, fmt_pct},
};
use crate::units::{band_label, band_of};

/// When to end an experiment early.
#[derive(Clone, Debug, PartialEq)]
pub struct StopRule {
    /// Stop when an arm's completion time is worse by more than this (%) ...
    pub margin_pct: f64,
    /// ... with the always-valid interval, at this family-wise error rate, wholly above zero.
    pub alpha: f64,
    /// The RTT bands watched (edges in ms).
    pub rtt_bands_ms: Vec<f64>,
    /// The algorithm the experiment's connections would run without it, when one is known.
    pub status_quo: Option<String>,
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule { margin_pct: 20.0, alpha: 0.05, rtt_bands_ms: vec![10.0, 50.0, 150.0], status_quo: None }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct GuardDecision {
    pub stop: bool,
    /// Why it stops, or where the watch stands.
    pub reason: String,
    /// A stop: the group, the arm found worse (0 = A), and its completion time relative to the
    /// other arm's, % with the interval.
    pub group: Option<String>,
    pub worse_arm: Option<usize>,
    pub worse_pct: Option<[f64; 3]>,
}

/// The strata the guardrail watches, filled as flows finish.
#[derive(Clone, Debug)]
pub struct Watch {
    names: [String; 2],
    rule: StopRule,
    all: Strata,
    /// Index: the band ([`band_of`]).
    bands: Vec<Strata>,
}

impl Watch {
    pub fn new(names: [String; 2], rule: StopRule) -> Self {
        let bands = vec![Strata::default(); rule.rtt_bands_ms.len() + 2];
        Watch { names, rule, all: Strata::default(), bands }
    }

    /// A finished flow; one that did not run its arm's algorithm is not counted.
    pub fn add(&mut self, o: &Observation) {
        if !ran_its_arm(o, &self.names) {
            return;
        }
        self.all.add(o, &self.rule.rtt_bands_ms);
        self.bands[band_of(o.min_rtt_us, &self.rule.rtt_bands_ms)].add(o, &self.rule.rtt_bands_ms);
    }

    /// The decision on the flows added so far.
    pub fn check(&self) -> GuardDecision {
        let k = self.bands.len() + 1;
        let alpha = self.rule.alpha / k as f64;
        let margin = (1.0 + self.rule.margin_pct / 100.0).ln();
        let watched = std::iter::once(("all flows".to_string(), &self.all)).chain(
            self.bands
                .iter()
                .enumerate()
                .map(|(b, s)| (format!("clients at {}", band_label(b, &self.rule.rtt_bands_ms)), s)),
        );
        let moved = super::status_quo::moved(&self.names, self.rule.status_quo.as_deref());
        if moved == [false, false] {
            let sq = self.rule.status_quo.as_deref().unwrap_or_default();
            let reason = format!("nothing to guard: both arms are the status quo ({sq})");
            return GuardDecision { stop: false, reason, group: None, worse_arm: None, worse_pct: None };
        }
        let mut judged = 0;
        for (label, strata) in watched {
            let Some(e) = strata.estimate() else { continue };
            judged += 1;
            let h = cs_half_width(e.var, alpha);
            // The worse arm's log ratio against the other: B/A for B, A/B for A; an arm that is
            // the status quo is not watched.
            for (arm, x) in [(1, e.log_ratio), (0, -e.log_ratio)] {
                if moved[arm] && x - h > 0.0 && x >= margin {
                    let pct = |v: f64| (v.exp() - 1.0) * 100.0;
                    let worse = [pct(x), pct(x - h), pct(x + h)];
                    let reason = format!(
                        "{} (arm {}) slower for {label}: completion time {} [{}, {}] vs {} ({} / {} flows); the guardrail \
                         stops an arm that moved clients off {} when slower by more than {} with its always-valid {:.0}% \
                         interval above zero",
                        self.names[arm],
                        ["A", "B"][arm],
                        fmt_pct(worse[0]),
                        fmt_pct(worse[1]),
                        fmt_pct(worse[2]),
                        self.names[1 - arm],
                        fmt_count(e.flows[arm]),
                        fmt_count(e.flows[1 - arm]),
                        self.rule
                            .status_quo
                            .as_deref()
                            .map_or("their status quo".into(), |sq| format!("the status quo ({sq})")),
                        fmt_pct(self.rule.margin_pct),
                        (1.0 - self.rule.alpha) * 100.0,
                    );
                    return GuardDecision {
                        stop: true,
                        reason,
                        group: Some(label),
                        worse_arm: Some(arm),
                        worse_pct: Some(worse),
                    };
                }
            }
        }
        let [a, b] = self.all.flows.map(fmt_count);
        let arms = match moved {
            [true, true] => "both arms".to_string(),
            _ => {
                let arm = usize::from(moved[1]);
                format!(
                    "arm {} ({}), which moved clients off {}",
                    ["A", "B"][arm],
                    self.names[arm],
                    self.names[1 - arm]
                )
            }
        };
        let reason = if judged == 0 {
            format!("watching {arms}: {a} / {b} flows, no stratum has {} per arm yet", super::decide::MIN_CELL)
        } else {
            format!("within the guardrail ({arms}; {judged} client groups checked, {a} / {b} flows)")
        };
        GuardDecision { stop: false, reason, group: None, worse_arm: None, worse_pct: None }
    }
}

/// The guardrail's decision on `obs` (all the flows finished so far).
pub fn guardrail(obs: &[Observation], rule: &StopRule, names: &[String; 2]) -> GuardDecision {
    let mut w = Watch::new(names.clone(), rule.clone());
    for o in obs {
        w.add(o);
    }
    w.check()
}

/// What the live guardrail would have done on a recording: its checks replayed in completion
/// order, one every `period_s` of recorded time, as the running experiment makes them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Replay {
    pub looks: usize,
    pub period_s: f64,
    /// Seconds after the first flow finished when it would have stopped; null if it would not.
    pub stopped_at_s: Option<f64>,
    /// Flows finished by then.
    pub flows_at_stop: Option<usize>,
    pub decision: GuardDecision,
}

/// Replays the guardrail over `obs` in completion order (flows without an end time are left
/// out: they cannot be placed).
pub fn replay(obs: &[Observation], rule: &StopRule, names: &[String; 2], period_s: f64) -> Replay {
    let mut order: Vec<&Observation> = obs.iter().filter(|o| o.end_ts.is_some()).collect();
    order.sort_by(|x, y| x.end_ts.unwrap_or(0.0).total_cmp(&y.end_ts.unwrap_or(0.0)));
    let mut w = Watch::new(names.clone(), rule.clone());
    let Some(t0) = order.first().and_then(|o| o.end_ts) else {
        return Replay { looks: 0, period_s, stopped_at_s: None, flows_at_stop: None, decision: w.check() };
    };
    let mut next = t0 + period_s;
    let mut looks = 0;
    for (i, o) in order.iter().enumerate() {
        let t = o.end_ts.unwrap_or(t0);
        // Every look due before this flow finished sees the flows before it.
        if t >= next {
            looks += 1;
            let d = w.check();
            if d.stop {
                return Replay { looks, period_s, stopped_at_s: Some(next - t0), flows_at_stop: Some(i), decision: d };
            }
            next += ((t - next) / period_s).floor().max(0.0) * period_s + period_s;
        }
        w.add(o);
    }
    looks += 1;
    let d = w.check();
    let stopped = d.stop.then_some(order.last().and_then(|o| o.end_ts).unwrap_or(t0) - t0);
    Replay { looks, period_s, stopped_at_s: stopped, flows_at_stop: d.stop.then_some(order.len()), decision: d }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        experiment::analysis::tests::{Population, synth},
        rng::Rng,
    };

    fn names() -> [String; 2] {
        ["cubic".to_string(), "bbr".to_string()]
    }

    fn pop(net: [u8; 3], rtt_ms: f64, slowdown: [f64; 2], n: usize) -> Population {
        Population { net, rtt_ms, slowdown, flows_per_arm: n }
    }

    #[test]
    fn stops_on_either_arm_clearly_worse_and_not_on_a_small_difference() {
        let rule = StopRule::default();
        let worse = synth(&[pop([203, 0, 113], 100.0, [1.0, 1.8], 300)], 1);
        let d = guardrail(&worse, &rule, &names());
        assert!(d.stop && d.worse_arm == Some(1), "{d:?}");
        assert!(d.reason.starts_with("bbr (arm B) slower for all flows: completion time +"), "{}", d.reason);
        // Arm A worse stops too.
        let a_worse = synth(&[pop([203, 0, 113], 100.0, [1.8, 1.0], 300)], 1);
        let d = guardrail(&a_worse, &rule, &names());
        assert!(d.stop && d.worse_arm == Some(0) && d.reason.starts_with("cubic (arm A) slower"), "{d:?}");
        // Equal: no stop.
        assert!(!guardrail(&synth(&[pop([203, 0, 113], 100.0, [1.0, 1.0], 300)], 1), &rule, &names()).stop);
        // Too early to say, however bad it looks.
        let d = guardrail(&synth(&[pop([203, 0, 113], 100.0, [1.0, 3.0], 5)], 1), &rule, &names());
        assert!(!d.stop && d.reason.starts_with("watching both arms: "), "{d:?}");
        // Worse by less than the margin, with many flows: no stop.
        let slightly = synth(&[pop([203, 0, 113], 100.0, [1.0, 1.1], 3000)], 1);
        assert!(!guardrail(&slightly, &rule, &names()).stop);
        // Worse for one client group only (the far one): stops, naming it.
        let far_only = synth(&[pop([203, 0, 113], 200.0, [1.0, 2.0], 300), pop([10, 0, 0], 2.0, [1.0, 1.0], 300)], 2);
        let d = guardrail(&far_only, &rule, &names());
        assert!(
            d.stop && d.group.as_deref().is_some_and(|g| g.contains("150")) || d.group.as_deref() == Some("all flows"),
            "{d:?}"
        );
    }

    fn with_status_quo(sq: &str) -> StopRule {
        StopRule { status_quo: Some(sq.into()), ..StopRule::default() }
    }

    /// The status quo (cubic, arm A) slower than a big B win is what its clients would have had
    /// anyway: the whole run goes its length, looks every 2 s. A worse B still stops, for the
    /// one group it is worse in, and so does A when the status quo is not known.
    #[test]
    fn a_big_win_never_stops_and_a_moved_arm_that_loses_does() {
        let win = synth(&[pop([203, 0, 113], 200.0, [2.5, 1.0], 400), pop([10, 0, 0], 2.0, [1.0, 1.0], 400)], 3);
        let r = replay(&win, &with_status_quo("cubic"), &names(), 2.0);
        assert!(r.stopped_at_s.is_none() && r.looks >= 6, "{r:?}");
        assert!(r.decision.reason.contains("arm B (bbr), which moved clients off cubic"), "{}", r.decision.reason);
        assert!(replay(&win, &StopRule::default(), &names(), 2.0).stopped_at_s.is_some(), "unknown: both watched");
        // B 40% worse for the far group only.
        let lose = synth(&[pop([203, 0, 113], 200.0, [1.0, 1.4], 400), pop([10, 0, 0], 2.0, [1.0, 1.0], 400)], 4);
        let d = guardrail(&lose, &with_status_quo("cubic"), &names());
        assert!(d.stop && d.worse_arm == Some(1), "{d:?}");
        assert!(d.reason.contains("moved clients off the status quo (cubic)"), "{}", d.reason);
        // With B the status quo (BBR already the default), A is the arm that moved clients.
        let d = guardrail(&win, &with_status_quo("bbr"), &names());
        assert!(d.stop && d.worse_arm == Some(0), "{d:?}");
        // Both arms the status quo: nothing to guard.
        let same = ["cubic".to_string(), "cubic".to_string()];
        assert!(guardrail(&win, &with_status_quo("cubic"), &same).reason.starts_with("nothing to guard"));
    }

    /// A/A with the status quo known (one arm watched): looks every 2 s over 200 whole runs stop
    /// at most 5% of them.
    #[test]
    fn a_a_runs_watching_the_moved_arm_are_rarely_stopped() {
        let runs = 200;
        let stops = (0..runs)
            .filter(|run| {
                let obs = synth(
                    &[pop([203, 0, 113], 200.0, [1.0, 1.0], 300), pop([10, 0, 0], 2.0, [1.0, 1.0], 300)],
                    900 + run,
                );
                replay(&obs, &with_status_quo("cubic"), &names(), 2.0).stopped_at_s.is_some()
            })
            .count();
        crate::output::errln!("A/A guardrail, B watched: {stops}/{runs} runs stopped");
        assert!(stops as f64 / runs as f64 <= 0.05, "{stops}/{runs}");
    }

    /// The audit's false stop: early on, B drew more far clients than A; no group differs.
    #[test]
    fn a_mix_of_clients_does_not_stop_it() {
        let mut rng = Rng::new(9);
        let far = synth(&[pop([203, 0, 113], 220.0, [1.0, 1.0], 300)], 1);
        let near = synth(&[pop([10, 0, 0], 2.0, [1.0, 1.0], 300)], 2);
        let mut obs: Vec<Observation> = far.into_iter().filter(|o| o.arm == 1 || rng.uniform() < 0.6).collect();
        obs.extend(near.into_iter().filter(|o| o.arm == 0 || rng.uniform() < 0.6));
        let d = guardrail(&obs, &StopRule::default(), &names());
        assert!(!d.stop, "{d:?}");
    }

    /// Looks every 2 s over a whole A/A run, 200 runs: the guardrail may stop at most 5% of them.
    #[test]
    fn a_a_runs_with_looks_every_two_seconds_are_rarely_stopped() {
        let runs = 200;
        let mut stops = 0;
        for run in 0..runs {
            let obs =
                synth(&[pop([203, 0, 113], 200.0, [1.0, 1.0], 300), pop([10, 0, 0], 2.0, [1.0, 1.0], 300)], 700 + run);
            // 1,200 flows finishing 10 ms apart: a look every 200 flows, six looks.
            let r = replay(&obs, &StopRule::default(), &names(), 2.0);
            assert!(r.looks >= 6 || r.stopped_at_s.is_some(), "{r:?}");
            stops += usize::from(r.stopped_at_s.is_some());
        }
        crate::output::errln!("A/A guardrail: {stops}/{runs} runs stopped");
        assert!(stops as f64 / runs as f64 <= 0.05, "{stops}/{runs}");
    }

    #[test]
    fn the_replay_stops_where_the_live_rule_would() {
        let worse = synth(&[pop([203, 0, 113], 100.0, [1.0, 2.0], 400)], 1);
        let r = replay(&worse, &StopRule::default(), &names(), 0.5);
        let at = r.flows_at_stop.unwrap();
        assert!(r.decision.stop && at < worse.len(), "{r:?}");
        // The live rule on the flows finished by then stops too, and one look earlier did not.
        let mut sorted = worse.clone();
        sorted.sort_by(|x, y| x.end_ts.unwrap().total_cmp(&y.end_ts.unwrap()));
        assert!(guardrail(&sorted[..at], &StopRule::default(), &names()).stop);
        assert!(!guardrail(&sorted[..at.saturating_sub(50)], &StopRule::default(), &names()).stop);
    }
}

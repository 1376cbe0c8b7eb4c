//! The experiment's report as data: one JSON object for `--json`, built from an analysis with
//! each group's conclusion ([`super::conclusion`]) and the recommendation ([`super::recommend`]).
//! Its plain-text rendering is [`super::text`]; the number formats all share are
//! [`super::format`]. This file holds the report's shape, which the JSON golden test pins.
//!
//! JSON shape (numbers are JSON numbers; `null` where there is no value):
//! ```text
//! { "design": {"name": "per_connection" | "switchback" | "host_switchback" | "client", "answers": "B beside A: ...",
//!              (switchback:) "block_s": 20.0, "burn_in_s": 4.0, "seed": 7, "rounds": 30,
//!              (client:) "salt": 7},
//!   "arms": [ {"label": "a", "arm": "cubic", "flows": 1204, "bytes": 123456789},
//!             {"label": "b", "arm": "bbr",   "flows": 1198, "bytes": 120000000} ],
//!   "level": 0.95, "method": "...",
//!   "decision": {"metric": "time_weighted" | "per_response", "alpha": 0.05, "delta_pct": 5.0,
//!                "min_effect_ms": 5.0, "groups_judged": 6},
//!   "integrity": {"excluded": [0, 3], "excluded_share": 0.001, "ran_instead": ["cubic"],
//!                 "overridden": false,
//!                 "concentrated": [{"bucket": ">4M", "excluded": 3, "flows": 60}]},
//!   "sample_ratio": {"flows": [1204, 1198], "expected_b": 0.5, "observed_b": 0.4988,
//!                    "chi2": 0.015, "p_value": 0.90, "mismatch": false},
//!   "scope": {"known": true, "port": 443, "cgroup": null, "dst": []},
//!   "groups": [ { "kind": "all" | "rtt" | "prefix" | "list", "label": "203.0.113.0/24",
//!                 "prefixes": ["203.0.113.0/24"], "arms": [{"flows", "bytes"}, {..}],
//!                 "verdict": "a_better" | "b_better" | "no_difference" | "inconclusive"
//!                            | "too_few_flows" | "arms_overridden",
//!                 "answer": {"outcome": "b_better", "effect_pct": -52.0, "low_pct": -61.0,
//!                            "high_pct": -41.0, "effect_ms": -2600.0, "level": 0.99167,
//!                            "delta_pct": 5.0, "practical": true, "flows": [600, 598],
//!                            "strata": 7, "coverage": 0.98, "more_flows": null,
//!                            "detectable_pct": 12.5},
//!                 "left_out": [{"stratum": "RTT ≥150 ms >4 MB", "flows": [3, 7],
//!                               "time_share": 0.31}],
//!                 "conclusion": "BBR faster for 203.0.113.0/24: ...",
//!                 "metrics": [ { "key": "completion_p95_256k_4m", "kind": "completion",
//!                                "bucket": "256K-4M", "quantile": 0.95, "label": "...",
//!                                "unit": "s", "higher_is_better": false, "n": [310, 305],
//!                                "a": 2.1, "b": 1.3, "status": "ok" | "too_few_flows",
//!                                "needs": null | 100,
//!                                "diff": {"unit": "relative_pct" | "points", "estimate": -38.0,
//!                                         "low": -45.0, "high": -30.0, "p_value": 0.0005,
//!                                         "significant": true} | null } ],
//!                 (switchback only:)
//!                 "design": "switchback",
//!                 "switchback": {"rounds": 30, "per_connection": {..as answer..},
//!                                "interference": {"effect_pct": 26.0, "low_pct": 18.0,
//!                                                 "high_pct": 35.0, "level": 0.995,
//!                                                 "flows": [1210, 780], "rounds": 30},
//!                                "bias_pts": -17.5,
//!                                "left_out": {"burn_in": 1069, "mismatched": 0},
//!                                "more_rounds": null | 14},   (the answer's more_flows is null)
//!                 "interference": "interference for all flows: CUBIC's own flows were ...",
//!                 (client only:)
//!                 "design": "client",
//!                 "clients": {"clients": [61, 59], "min_clients": 8, "mismatched": 0,
//!                             "more_clients": null | 40} } ],   (the answer's more_flows is null)
//!   "sparse_prefixes": {"groups": 312, "flows": 2001},
//!   "in_flight": {"a": 10, "b": 1},
//!   "recommend": {"scope": "system" | "routes" | "cgroup" | "none", "arm": "bbr" | null,
//!                 "commands": ["bbrscope apply bbr --route 203.0.113.0/24"],
//!                 "evidence": ["BBR faster for 203.0.113.0/24: ..."], "notes": ["..."]} }
//! ```
//! `answer` is the decision (see [`super::decide`]); `metrics` are secondary: fixed-level
//! bootstrap intervals per quantile, shown and never deciding. `in_flight`: flows per arm still
//! running when the experiment ended, after its drain; they are in every count and analysis
//! above (`flows`, `sample_ratio`, `answer`) with their elapsed time as their completion time, a
//! lower bound (0 and 0 in recordings made before flows in flight were kept). Under a switchback
//! `answer` is everyone on B against everyone on A ([`super::switchback`]); a per-connection
//! report has none of the switchback's fields, exactly as before that design existed.

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{
    analysis::{Analysis, GroupResult, Integrity, Sparse},
    conclusion::{conclusion, interference},
    decide::PrimaryMetric,
    groups::GroupKind,
    guardrail::GuardDecision,
    recommend::{Recommendation, recommend},
    setup::Design as SetupDesign,
    stats::SampleRatio,
};

/// The connections the experiment covered (its `--port`, `--cgroup`, `--dst`): what a
/// recommendation may reach and no further.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InScope {
    /// False for a capture that does not say (recorded before the experiment wrote its scope).
    pub(crate) known: bool,
    pub port: Option<u16>,
    /// The cgroup v2 path given with `--cgroup`.
    pub(crate) cgroup: Option<String>,
    pub(crate) dst: Vec<IpNet>,
}

impl InScope {
    /// In words: `port 443`, `every new connection`.
    pub(crate) fn words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.port {
            parts.push(format!("port {p}"));
        }
        if let Some(c) = &self.cgroup {
            parts.push(format!("cgroup {c}"));
        }
        if !self.dst.is_empty() {
            parts.push(format!(
                "clients in {}",
                self.dst.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        if !self.known {
            "not recorded".into()
        } else if parts.is_empty() {
            "every new connection".into()
        } else {
            parts.join(", ")
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// How connections got their arms, and so what question the answers are to.
    pub(crate) design: Design,
    pub(crate) arms: [ArmReport; 2],
    pub(crate) level: f64,
    /// How the decision and the intervals were computed, for the reader.
    pub(crate) method: String,
    pub(crate) decision: DecisionRule,
    pub(crate) integrity: Integrity,
    pub(crate) sample_ratio: SampleRatio,
    pub(crate) scope: InScope,
    pub(crate) groups: Vec<GroupReport>,
    pub(crate) sparse_prefixes: Sparse,
    /// Flows per arm still running when the experiment ended (after its drain), counted with
    /// their elapsed time as their completion time.
    pub(crate) in_flight: InFlight,
    pub(crate) recommend: Recommendation,
}

/// The experiment's design: the per-connection A/B, or the switchback with its schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct Design {
    /// `per_connection`, `switchback`, `host_switchback` or `client`.
    pub(crate) name: &'static str,
    /// The question its answers are to, in a sentence.
    pub(crate) answers: &'static str,
    /// A switchback's schedule (absent in the other designs).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) schedule: Option<ScheduleReport>,
    /// A client design's salt, its `--seed` (absent in the other designs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) salt: Option<u64>,
}

/// A switchback's schedule and how much of it the flows covered.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct ScheduleReport {
    pub(crate) block_s: f64,
    pub(crate) burn_in_s: f64,
    pub(crate) seed: u64,
    /// Rounds with flows (all flows) in both an A and a B block.
    pub(crate) rounds: usize,
}

impl Design {
    /// Each new connection draws its arm; both arms share every bottleneck on their clients'
    /// paths (docs/experiment-method.md, "What a per-connection A/B answers").
    pub(crate) const PER_CONNECTION: Design = Design {
        name: "per_connection",
        answers: "B beside A: each arm's flows shared their bottlenecks with the other arm's, so where clients share \
                  one (a mobile cell, a busy shallow link) everyone on B can fare otherwise than B's flows did here",
        schedule: None,
        salt: None,
    };

    /// Blocks of time where every new connection runs A, or every one B, or each draws
    /// (docs/experiment-method.md, "Switchback").
    const SWITCHBACK: Design = Design {
        name: "switchback",
        answers: "B for everyone against A for everyone: blocks of time where every new connection of the group ran A, \
                  or every one B, compared round by round; the mixed blocks show what a per-connection \
                  A/B says on the same traffic, and how A's flows fared beside B's",
        schedule: None,
        salt: None,
    };

    /// A switchback in which each host of a fleet draws its own order of the rounds
    /// (docs/experiment-method.md, "Host-level switchback").
    const HOST_SWITCHBACK: Design = Design {
        name: "host_switchback",
        answers: "B for all of a host against A for all of it: blocks of time where every new connection of the \
                  host ran A, or every one B, each host in its own randomized order, compared round by round and \
                  added across the hosts; what one host's uplink does if all of it switches while the rest of the \
                  fleet is on a mix, not what the whole fleet does if it switches at once",
        schedule: None,
        salt: None,
    };

    /// Every connection of a client address on its client's hashed arm
    /// (docs/experiment-method.md, "Client-clustered").
    const CLIENT: Design = Design {
        name: "client",
        answers: "B for whole clients against A for whole clients: every connection of a client address ran the arm \
                  a salted hash gave the client, so a client's flows competed only with each other; where each \
                  client's bottleneck is its own link (mobile, home) that is everyone switched, where clients share \
                  one it is still B beside A",
        schedule: None,
        salt: None,
    };

    fn of(a: &Analysis) -> Design {
        match a.design {
            SetupDesign::PerConnection => Design::PER_CONNECTION,
            SetupDesign::Client { salt } => Design { salt: Some(salt), ..Design::CLIENT },
            SetupDesign::Switchback(s) => Design {
                schedule: Some(ScheduleReport {
                    block_s: s.block_s,
                    burn_in_s: s.burn_in_s,
                    seed: s.seed,
                    rounds: a
                        .groups
                        .iter()
                        .find(|g| g.kind == GroupKind::All)
                        .and_then(|g| g.switchback.as_ref())
                        .map_or(0, |sb| sb.rounds),
                }),
                ..if s.host.is_some() { Design::HOST_SWITCHBACK } else { Design::SWITCHBACK }
            },
        }
    }
}

/// Flows per arm still running at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct InFlight {
    pub(crate) a: usize,
    pub(crate) b: usize,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct DecisionRule {
    /// The primary metric (`--metric`): `time_weighted` or `per_response`.
    pub(crate) metric: PrimaryMetric,
    pub(crate) alpha: f64,
    pub(crate) delta_pct: f64,
    pub(crate) min_effect_ms: f64,
    pub(crate) groups_judged: usize,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct ArmReport {
    /// `a` or `b`, as in the stream's `arm` field.
    pub(crate) label: &'static str,
    /// The algorithm.
    pub(crate) arm: String,
    pub(crate) flows: usize,
    pub(crate) bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct GroupReport {
    #[serde(flatten)]
    pub(crate) result: GroupResult,
    pub(crate) conclusion: String,
    /// A switchback's interference in words (absent in the other designs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interference: Option<String>,
}

/// What the report needs beyond the analysis.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub scope: InScope,
    /// The cgroup path all the experiment's flows shared, when they shared one.
    pub service_cgroup: Option<String>,
    /// The guardrail's stop, when it ended the run: it leads the report and nothing contradicts it.
    pub guard_stop: Option<GuardDecision>,
}

/// The report of an analysis.
pub(crate) fn build(a: &Analysis, ctx: &Context) -> Report {
    Report {
        design: Design::of(a),
        arms: [0, 1].map(|i| ArmReport {
            label: ["a", "b"][i],
            arm: a.arms[i].cc.clone(),
            flows: a.arms[i].flows,
            bytes: a.arms[i].bytes,
        }),
        level: a.level,
        method: method(a),
        decision: DecisionRule {
            metric: a.metric,
            alpha: a.alpha,
            delta_pct: a.delta_pct,
            min_effect_ms: a.min_effect_ms,
            groups_judged: a.groups_judged,
        },
        integrity: a.integrity.clone(),
        sample_ratio: a.sample_ratio.clone(),
        scope: ctx.scope.clone(),
        groups: a
            .groups
            .iter()
            .map(|g| GroupReport { result: g.clone(), conclusion: conclusion(a, g), interference: interference(a, g) })
            .collect(),
        sparse_prefixes: a.sparse_prefixes,
        in_flight: InFlight { a: a.in_flight[0], b: a.in_flight[1] },
        recommend: recommend(a, ctx),
    }
}

/// How the decision and the intervals were computed, in one paragraph for the reader.
fn method(a: &Analysis) -> String {
    let weighted = match a.metric {
        PrimaryMetric::TimeWeighted => "by the completion time in them (time-weighted)",
        PrimaryMetric::PerResponse | PrimaryMetric::P50 | PrimaryMetric::P95 | PrimaryMetric::P99 => {
            "by their responses (per response)"
        }
    };
    let mut sequence = format!("a normal-mixture confidence sequence (always valid, tau {})", super::decide::TAU);
    let estimate = match a.design {
        SetupDesign::PerConnection if let Some(q) = a.metric.quantile() => {
            sequence = "each arm's quantile bounded by a confidence sequence for a fixed quantile (always valid; \
                        Howard & Ramdas 2022, polynomial stitching s 1.4, eta 2) at half the group's alpha, the \
                        ratio's interval from the two arms' bounds"
                .into();
            format!(
                "B's {} of completion time as the client feels it (handshake included) against A's, over the \
                 group's flows (no strata: arms drawn per connection see the same mix)",
                super::format::quantile_name(q)
            )
        }
        SetupDesign::PerConnection => format!(
            "B's effect on completion time as the client feels it (handshake included), the mean over strata (RTT \
             band x response size), weighted {weighted}, of the log ratio of the arms' geometric means"
        ),
        SetupDesign::Switchback(s) => format!(
            "{}: each flow's log completion time as the client feels \
             it (handshake included, attributed to the block it started in, burn-in left out) less its stratum's \
             (RTT band x response size) pooled mean; per round the B block's mean minus the A block's, {} within \
             its block; rounds weighted n_A*n_B/(n_A+n_B), their cluster-robust \
             variance times R/(R-1) widened to Student's t with R-1 degrees of freedom, from {} rounds on",
            if s.host.is_some() {
                "all of a host on B against all of it on A (host switchback: each host its own order of the rounds, \
                 a round's blocks added across the hosts)"
            } else {
                "everyone on B against everyone on A (switchback)"
            },
            match a.metric {
                PrimaryMetric::TimeWeighted => "each flow weighted by its stratum's mean time (time-weighted)",
                PrimaryMetric::PerResponse | PrimaryMetric::P50 | PrimaryMetric::P95 | PrimaryMetric::P99 => {
                    "each flow equal (per response)"
                }
            },
            super::switchback::MIN_ROUNDS
        ),
        SetupDesign::Client { .. } => format!(
            "B for whole clients against A for whole clients (every connection of a client address on the arm its \
             salted hash gave it): the mean over strata (RTT band x response size), weighted {weighted}, of the log \
             ratio of the arms' geometric means, its variance clustered by client address (each flow's influence summed \
             per client, sandwich times C/(C-1)) widened to Student's t with C-1 degrees of freedom, from {} \
             clients per arm on; flows on another arm than their client's left out",
            super::client::MIN_CLIENTS
        ),
    };
    format!(
        "decision: per client group, {estimate}, with {sequence} at family-wise alpha {} split at the start (half equally over the groups declared up front: all flows, RTT \
         bands, prefix lists; half over destination prefixes, the j-th to reach {} flows per arm \
         alpha/2*6/(pi^2 j^2); {} groups judged); no difference when the interval lies within +-{}%; a change that \
         matters is at least {}% and {} ms per response. Secondary tables: percentile bootstrap of B/A-1, {} \
         resamples per arm, seed {}; retransmit rate: delta method, B-A in percentage points; at least {} flows \
         per arm per cell (more for p95/p99)",
        a.alpha,
        a.min_flows,
        a.groups_judged,
        a.delta_pct,
        a.delta_pct,
        a.min_effect_ms,
        a.resamples,
        a.seed,
        a.min_flows
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::Value;

    use super::*;
    use crate::experiment::analysis::{
        Options, analyze,
        tests::{Population, lossy_and_clean, synth},
    };

    pub(crate) fn pop(net: [u8; 3], rtt_ms: f64, b: f64) -> Population {
        Population { net, rtt_ms, slowdown: [1.0, b], flows_per_arm: 600 }
    }

    /// An experiment on every new connection.
    pub(crate) fn everything() -> Context {
        Context { scope: InScope { known: true, ..InScope::default() }, ..Context::default() }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = build(&analyze(&lossy_and_clean(4), &Options::default()), &everything());
        let v: Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["design"]["name"], "per_connection");
        assert!(r.render_text().contains("design: per connection: answers B beside A"), "{}", r.render_text());
        assert_eq!(v["arms"][0]["arm"], "cubic");
        assert_eq!(v["arms"][1]["arm"], "bbr");
        assert_eq!(v["arms"][1]["label"], "b");
        assert_eq!(v["arms"][0]["flows"], 1200);
        assert!(v["arms"][0]["bytes"].as_u64().unwrap() > 0);
        assert_eq!(v["level"], 0.95);
        for k in ["alpha", "delta_pct", "min_effect_ms", "groups_judged"] {
            assert!(!v["decision"][k].is_null(), "decision.{k}");
        }
        assert_eq!(v["integrity"]["overridden"], false);
        for k in ["flows", "expected_b", "observed_b", "chi2", "p_value", "mismatch"] {
            assert!(!v["sample_ratio"][k].is_null(), "sample_ratio.{k}");
        }
        let groups = v["groups"].as_array().unwrap();
        assert_eq!(groups[0]["kind"], "all");
        let lossy = groups.iter().find(|g| g["label"] == "203.0.113.0/24").unwrap();
        assert_eq!(lossy["kind"], "prefix");
        assert_eq!(lossy["prefixes"], serde_json::json!(["203.0.113.0/24"]));
        assert_eq!(lossy["verdict"], "b_better");
        assert_eq!(lossy["arms"][1]["flows"], 600);
        let c = lossy["conclusion"].as_str().unwrap();
        assert!(
            c.starts_with("BBR faster for 203.0.113.0/24: BBR's completion time −") && c.ends_with(", 1,200 flows"),
            "{c}"
        );
        let ans = &lossy["answer"];
        for k in ["outcome", "effect_pct", "low_pct", "high_pct", "effect_ms", "level", "practical", "coverage"] {
            assert!(!ans[k].is_null(), "answer.{k}");
        }
        assert!(ans["high_pct"].as_f64().unwrap() < 0.0 && ans["effect_ms"].as_f64().unwrap() < 0.0);
        let keys: Vec<&str> = lossy["metrics"].as_array().unwrap().iter().map(|m| m["key"].as_str().unwrap()).collect();
        for k in [
            "completion_p50_lt16k",
            "completion_p99_gt4m",
            "goodput_p50",
            "srtt_p95",
            "rtt_inflation_p50",
            "retrans_rate",
        ] {
            assert!(keys.contains(&k), "{k} in {keys:?}");
        }
        let retrans = lossy["metrics"].as_array().unwrap().iter().find(|m| m["key"] == "retrans_rate").unwrap();
        assert_eq!(retrans["diff"]["unit"], "points");
        let clean = groups.iter().find(|g| g["label"] == "10.0.0.0/24").unwrap();
        let c = clean["conclusion"].as_str().unwrap();
        assert!(
            c.starts_with("no difference larger than 5% for 10.0.0.0/24: ") || c.starts_with("inconclusive for"),
            "{c}"
        );
        assert_eq!(v["recommend"]["scope"], "routes");
        assert_eq!(
            v["recommend"]["commands"].as_array().unwrap().len(),
            v["recommend"]["evidence"].as_array().unwrap().len()
        );
        assert!(v["members"].is_null() && lossy["members"].is_null());
    }

    /// Flows still running at the end: counted per arm (JSON and text), in the arms' flows and
    /// the answer, at their elapsed time, which pulls the slower arm's estimate toward no
    /// difference and never past it.
    #[test]
    fn flows_in_flight_are_counted_and_taken_as_lower_bounds() {
        let full = synth(&[pop([10, 0, 0], 40.0, 1.5)], 5);
        let effect = |obs: &[crate::experiment::Observation]| {
            let r = build(&analyze(obs, &Options::default()), &everything());
            (r.groups[0].result.answer.effect_pct.unwrap(), r)
        };
        let (truth, _) = effect(&full);
        // B's 20 slowest and A's 3 slowest still running, at half their time so far.
        let mut censored = full.clone();
        let mut by_time: Vec<usize> = (0..censored.len()).collect();
        by_time.sort_by(|&i, &j| censored[j].duration_s.total_cmp(&censored[i].duration_s));
        let mut left = [3, 20];
        for i in by_time {
            let o = &mut censored[i];
            if left[o.arm] > 0 {
                left[o.arm] -= 1;
                o.censored = true;
                o.duration_s /= 2.0;
            }
        }
        let (lower, r) = effect(&censored);
        assert!(truth > 0.0 && lower > 0.0 && lower <= truth, "{lower} of {truth}");
        assert_eq!(r.in_flight, InFlight { a: 3, b: 20 });
        assert_eq!(r.arms.each_ref().map(|a| a.flows), [600, 600], "in the arms' flows");
        assert_eq!(r.groups[0].result.answer.flows, [600, 600], "in the answer");
        let v: Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["in_flight"], serde_json::json!({"a": 3, "b": 20}));
        let text = r.render_text();
        assert!(
            text.contains(
                "\n  3 A / 20 B flows still running at the end, counted as taking at least their elapsed time\n"
            ),
            "{text}"
        );
        let (_, none) = effect(&full);
        assert_eq!(none.in_flight, InFlight::default());
        assert!(!none.render_text().contains("still running"));
    }
}

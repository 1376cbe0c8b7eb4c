//! The experiment's report: one JSON object for `--json`, a plain-text rendering for the terminal
//! (at most 100 columns), a conclusion in plain words per group, and the `bbrscope apply`
//! commands the evidence supports — never wider than the connections the experiment covered.
//!
//! JSON shape (numbers are JSON numbers; `null` where there is no value):
//! ```text
//! { "arms": [ {"label": "a", "arm": "cubic", "flows": 1204, "bytes": 123456789},
//!             {"label": "b", "arm": "bbr",   "flows": 1198, "bytes": 120000000} ],
//!   "level": 0.95, "method": "...",
//!   "decision": {"alpha": 0.05, "delta_pct": 5.0, "min_effect_ms": 5.0, "groups_judged": 6},
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
//!                                         "significant": true} | null } ] } ],
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
//! lower bound (0 and 0 in recordings made before flows in flight were kept).

use std::fmt::Write as _;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::{
    analysis::{Analysis, Diff, DiffUnit, GroupKind, GroupResult, Integrity, SampleRatio, Sparse, Status, Verdict},
    guardrail::GuardDecision,
};
use crate::units;

/// The connections the experiment covered (its `--port`, `--cgroup`, `--dst`): what a
/// recommendation may reach and no further.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InScope {
    /// False for a capture that does not say (recorded before the experiment wrote its scope).
    pub known: bool,
    pub port: Option<u16>,
    /// The cgroup v2 path given with `--cgroup`.
    pub cgroup: Option<String>,
    pub dst: Vec<IpNet>,
}

impl InScope {
    /// In words: `port 443`, `every new connection`.
    pub fn words(&self) -> String {
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
    pub arms: [ArmReport; 2],
    pub level: f64,
    /// How the decision and the intervals were computed, for the reader.
    pub method: String,
    pub decision: DecisionRule,
    pub integrity: Integrity,
    pub sample_ratio: SampleRatio,
    pub scope: InScope,
    pub groups: Vec<GroupReport>,
    pub sparse_prefixes: Sparse,
    /// Flows per arm still running when the experiment ended (after its drain), counted with
    /// their elapsed time as their completion time.
    pub in_flight: InFlight,
    pub recommend: Recommendation,
}

/// Flows per arm still running at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InFlight {
    pub a: usize,
    pub b: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct DecisionRule {
    pub alpha: f64,
    pub delta_pct: f64,
    pub min_effect_ms: f64,
    pub groups_judged: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ArmReport {
    /// `a` or `b`, as in the stream's `arm` field.
    pub label: &'static str,
    /// The algorithm.
    pub arm: String,
    pub flows: usize,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct GroupReport {
    #[serde(flatten)]
    pub result: GroupResult,
    pub conclusion: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    System,
    Routes,
    Cgroup,
    None,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    pub scope: Scope,
    /// The algorithm recommended.
    pub arm: Option<String>,
    /// One `bbrscope apply` command per line (`--route` takes one prefix per invocation).
    pub commands: Vec<String>,
    /// Per command, the finding it rests on.
    pub evidence: Vec<String>,
    /// Why, and what the evidence does not support.
    pub notes: Vec<String>,
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
pub fn build(a: &Analysis, ctx: &Context) -> Report {
    Report {
        arms: [0, 1].map(|i| ArmReport {
            label: ["a", "b"][i],
            arm: a.arms[i].cc.clone(),
            flows: a.arms[i].flows,
            bytes: a.arms[i].bytes,
        }),
        level: a.level,
        method: format!(
            "decision: per client group, B's effect on completion time as the client feels it (handshake \
             included), the time-weighted mean over strata (RTT band x response size) of the log ratio of the \
             arms' geometric means, with a normal-mixture confidence sequence (always valid, tau {}) at \
             family-wise alpha {} shared over {} groups; no difference when the interval lies within +-{}%; a \
             change that matters is at least {}% and {} ms per response. Secondary tables: percentile bootstrap \
             of B/A-1, {} resamples per arm, seed {}; retransmit rate: delta method, B-A in percentage points; \
             at least {} flows per arm per cell (more for p95/p99)",
            super::decide::TAU,
            a.alpha,
            a.groups_judged,
            a.delta_pct,
            a.delta_pct,
            a.min_effect_ms,
            a.resamples,
            a.seed,
            a.min_flows
        ),
        decision: DecisionRule {
            alpha: a.alpha,
            delta_pct: a.delta_pct,
            min_effect_ms: a.min_effect_ms,
            groups_judged: a.groups_judged,
        },
        integrity: a.integrity.clone(),
        sample_ratio: a.sample_ratio.clone(),
        scope: ctx.scope.clone(),
        groups: a.groups.iter().map(|g| GroupReport { result: g.clone(), conclusion: conclusion(a, g) }).collect(),
        sparse_prefixes: a.sparse_prefixes,
        in_flight: InFlight { a: a.in_flight[0], b: a.in_flight[1] },
        recommend: recommend(a, ctx),
    }
}

/// An algorithm's name as people write it: `BBR`, `CUBIC`, `RENO`.
fn shout(cc: &str) -> String {
    cc.to_uppercase()
}

/// A change per response: `−2.6 s`, `+31 ms`.
fn fmt_signed_ms(ms: f64) -> String {
    let sign = if ms < 0.0 { "−" } else { "+" };
    format!("{sign}{}", fmt_seconds(ms.abs() / 1e3))
}

/// The verdict in a few words with its number, as the dashboard and the figure caption show it:
/// `BBR faster −52% [−61%, −41%]`, `no difference > 5%`, `inconclusive −8% [−20%, +6%]`.
pub fn verdict_words(names: [&str; 2], g: &GroupResult) -> String {
    let ans = &g.answer;
    let num = match (ans.effect_pct, ans.low_pct, ans.high_pct) {
        (Some(e), Some(lo), Some(hi)) => format!(" {} [{}, {}]", fmt_pct(e), fmt_pct(lo), fmt_pct(hi)),
        _ => String::new(),
    };
    match g.verdict {
        Verdict::ABetter | Verdict::BBetter => {
            let arm = usize::from(g.verdict == Verdict::BBetter);
            format!("{} faster{num}", shout(names[arm]))
        }
        Verdict::NoDifference => format!("no difference > {}%{num}", fmt_num(ans.delta_pct)),
        Verdict::Inconclusive => format!("inconclusive{num}"),
        Verdict::TooFewFlows => "too few flows".into(),
        Verdict::ArmsOverridden => "arms overridden".into(),
    }
}

/// The strata an answer leaves out, as the conclusion names them: the three with most of the
/// group's time, with their flows per arm and what each needs.
fn left_out(strata: &[super::decide::LeftOut]) -> String {
    if strata.is_empty() {
        return String::new();
    }
    let named: Vec<String> = strata
        .iter()
        .take(3)
        .map(|l| {
            format!("{} ({} / {} flows, {:.0}% of the time)", l.stratum, l.flows[0], l.flows[1], l.time_share * 100.0)
        })
        .collect();
    let more = strata.len().saturating_sub(3);
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    format!("; left out: {}{more}, each needing {} flows per arm", named.join(", "), super::decide::MIN_CELL)
}

/// The group's answer in one line, e.g. "BBR faster for 203.0.113.0/24: completion time −52%
/// [−61%, −41%], ≈ −2.6 s per response, 1,204 flows".
pub fn conclusion(a: &Analysis, g: &GroupResult) -> String {
    let names = [&a.arms[0].cc, &a.arms[1].cc];
    let ans = &g.answer;
    let flows = fmt_count(g.flows());
    let change = || match (ans.effect_pct, ans.low_pct, ans.high_pct, ans.effect_ms) {
        (Some(e), Some(lo), Some(hi), Some(ms)) => format!(
            "{}'s completion time {} [{}, {}], ≈ {} per response",
            shout(names[1]),
            fmt_pct(e),
            fmt_pct(lo),
            fmt_pct(hi),
            fmt_signed_ms(ms)
        ),
        _ => String::new(),
    };
    let coverage = if ans.coverage > 0.0 && ans.coverage < 0.9 {
        format!(" (covers {:.0}% of its time{})", ans.coverage * 100.0, left_out(&g.left_out))
    } else {
        String::new()
    };
    let small = if ans.practical {
        String::new()
    } else {
        format!(": less than the {}% and {} ms that matter", fmt_num(a.delta_pct), fmt_num(a.min_effect_ms))
    };
    match g.verdict {
        Verdict::BBetter | Verdict::ABetter => {
            let arm = usize::from(g.verdict == Verdict::BBetter);
            format!("{} faster for {}: {}, {flows} flows{coverage}{small}", shout(names[arm]), g.label, change())
        }
        Verdict::NoDifference => {
            format!(
                "no difference larger than {}% for {}: {}, {flows} flows{coverage}",
                fmt_num(a.delta_pct),
                g.label,
                change()
            )
        }
        Verdict::Inconclusive => {
            let more = ans.more_flows.unwrap_or(0);
            let when = a.flows_per_s.filter(|r| *r > 0.0).map_or(String::new(), |r| {
                let share = g.flows() as f64 / (a.arms[0].flows + a.arms[1].flows).max(1) as f64;
                format!(" (≈ {} at this run's rate)", fmt_span(more as f64 / (r * share.max(1e-9))))
            });
            // fmt_pct signs it "+"; a change either way is meant.
            let detectable = ans.detectable_pct.map_or(String::new(), |d| {
                format!(" (changes of ±{} are detectable now)", fmt_pct(d).trim_start_matches('+'))
            });
            format!(
                "inconclusive for {}: {}, {flows} flows{detectable}; about {} more flows{when} would decide{coverage}",
                g.label,
                change(),
                fmt_count(more as usize)
            )
        }
        Verdict::TooFewFlows => format!(
            "too few flows for {}: {} {} / {} {} (a stratum of RTT band and response size needs {} per arm)",
            g.label,
            fmt_count(g.arms[0].flows),
            names[0],
            fmt_count(g.arms[1].flows),
            names[1],
            super::decide::MIN_CELL
        ),
        Verdict::ArmsOverridden => {
            format!("no conclusion for {}: the flows did not run their arms' algorithms", g.label)
        }
    }
}

/// The `bbrscope apply` commands the evidence supports, each with its evidence.
///
/// Nothing when the guardrail stopped the run, when the service overrode the arms, or when no
/// group shows a change that matters (better at the family-wise level, by at least δ and the
/// smallest absolute change). The whole experiment's scope when "all flows" shows one and no
/// group is better on the other arm: the system for an experiment on every new connection, the
/// `--dst` prefixes as routes, the `--cgroup` (or, for `--port`, the one cgroup all the service's
/// flows were in); otherwise one `--route` per prefix of each prefix or list group that shows
/// one, where a route is no wider than the experiment (no `--port`/`--cgroup`).
pub fn recommend(a: &Analysis, ctx: &Context) -> Recommendation {
    let none = |arm: Option<String>, notes: Vec<String>| Recommendation {
        scope: Scope::None,
        arm,
        commands: vec![],
        evidence: vec![],
        notes,
    };
    if a.integrity.overridden {
        return none(
            None,
            vec![format!(
                "{:.1}% of the flows ran another algorithm than their arm's ({}): the service sets its own \
                 (setsockopt TCP_CONGESTION), so the arms are not what was assigned and nothing is concluded; \
                 configure the service's algorithm instead, or run the experiment where it does not set one",
                a.integrity.excluded_share * 100.0,
                a.integrity.ran_instead.join(", ")
            )],
        );
    }
    let practical = |g: &GroupResult| g.answer.practical && g.verdict.better_arm().is_some();
    let all = a.groups.iter().find(|g| g.kind == GroupKind::All);
    let sub: Vec<&GroupResult> = a.groups.iter().filter(|g| g.kind != GroupKind::All).collect();
    let arm = match all.filter(|g| practical(g)) {
        Some(g) => g.verdict.better_arm(),
        None => {
            let wins = |arm| sub.iter().filter(|g| practical(g) && g.verdict.better_arm() == Some(arm)).count();
            match (wins(0), wins(1)) {
                (0, 0) => None,
                (wa, wb) => Some(usize::from(wb >= wa)),
            }
        }
    };
    let Some(arm) = arm else {
        return none(
            None,
            vec![format!(
                "no group shows a change that matters (at least {}% and {} ms per response, at family-wise α {}): \
                 nothing to change",
                fmt_num(a.delta_pct),
                fmt_num(a.min_effect_ms),
                a.alpha
            )],
        );
    };
    // The guardrail stopped the arm that would be recommended: nothing. (The report's intervals
    // are at least as wide as the guardrail's, so no group can call that arm faster; this holds
    // even where the flows finished after the stop would tip one.)
    if let Some(g) = ctx.guard_stop.as_ref().filter(|g| g.worse_arm == Some(arm)) {
        return none(None, vec![format!("the guardrail stopped the experiment ({}): nothing to apply", g.reason)]);
    }
    let cc = a.arms[arm].cc.clone();
    let other = &a.arms[1 - arm].cc;
    // An arm with an initial window applies as a route setting beside its algorithm; no other
    // scope of `apply` sets a window.
    let iw = super::Arm::iw_of(&cc);
    let algo = super::Arm::cc_of(&cc);
    let route_cmd = |net: &IpNet| {
        let window = iw.map(|n| format!(" --initcwnd {n}")).unwrap_or_default();
        format!("bbrscope apply {algo} --route {net}{window}")
    };
    let iw_note = |notes: &mut Vec<String>| {
        if let Some(n) = iw {
            notes.push(format!(
                "{cc}'s initial window of {n} is a route setting (`bbrscope apply --route PREFIX --initcwnd {n}`): \
                 run the experiment with --dst naming the clients' prefixes to get commands for their routes"
            ));
        }
    };
    let against: Vec<&str> =
        a.groups.iter().filter(|g| g.verdict.better_arm() == Some(1 - arm)).map(|g| g.label.as_str()).collect();
    let mut notes = Vec::new();
    if let Some(g) = &ctx.guard_stop {
        notes.push(format!("the guardrail ended the experiment early because {other} was slower: {}", g.reason));
    }
    if !against.is_empty() {
        notes.push(format!("{other} is faster for {}: not switched there", against.join(", ")));
    }
    let scope = &ctx.scope;
    let wins = |g: &GroupResult| practical(g) && g.verdict.better_arm() == Some(arm);
    let routable = |g: &GroupResult| matches!(g.kind, GroupKind::Prefix | GroupKind::List);
    let judged: Vec<&GroupResult> =
        sub.iter().copied().filter(|g| !matches!(g.verdict, Verdict::TooFewFlows | Verdict::ArmsOverridden)).collect();
    // The whole scope when every client group gains, or when the gain belongs to no prefix and
    // no group is left unsure (each gains, or differs by less than δ); otherwise only the
    // prefixes that gain.
    let whole = all.filter(|g| wins(g)).filter(|_| {
        against.is_empty()
            && (judged.iter().all(|g| wins(g))
                || (!judged.iter().any(|g| routable(g) && wins(g))
                    && judged.iter().all(|g| wins(g) || g.verdict == Verdict::NoDifference)))
    });
    if let Some(g) = whole {
        let evidence = conclusion(a, g);
        let (kind, commands): (Scope, Vec<String>) = if !scope.known {
            notes.push(format!(
                "the recording does not say which connections the experiment covered: apply {cc} at the scope it \
                 ran on (bbrscope apply {algo} --route/--cgroup/--netns), not wider"
            ));
            (Scope::None, vec![])
        } else if !scope.dst.is_empty() {
            if scope.port.is_some() || scope.cgroup.is_some() {
                notes.push(format!(
                    "a route changes every connection to its prefix, not only those in the experiment's scope \
                     ({}): other services' were not tested",
                    scope.words()
                ));
            }
            (Scope::Routes, scope.dst.iter().map(route_cmd).collect())
        } else if iw.is_some() {
            iw_note(&mut notes);
            (Scope::None, vec![])
        } else if let Some(c) = &scope.cgroup {
            (Scope::Cgroup, vec![format!("bbrscope apply {cc} --cgroup {c}")])
        } else if let Some(port) = scope.port {
            match ctx.service_cgroup.as_deref().filter(|c| *c != "/" && !c.is_empty()) {
                Some(c) => {
                    notes.push(format!("the narrowest apply that covers port {port}'s service is its cgroup, {c}"));
                    (Scope::Cgroup, vec![format!("bbrscope apply {cc} --cgroup {c}")])
                }
                None => {
                    notes.push(format!(
                        "only port {port} was tested and its flows are in no cgroup of their own: bbrscope has no \
                         apply scope that narrow, and a system-wide `bbrscope apply {cc}` would change services \
                         that were not tested; move the service into its own cgroup and apply there"
                    ));
                    (Scope::None, vec![])
                }
            }
        } else {
            (Scope::System, vec![format!("bbrscope apply {cc}")])
        };
        let flat: Vec<&str> =
            judged.iter().filter(|g| g.verdict == Verdict::NoDifference).map(|g| g.label.as_str()).collect();
        if !flat.is_empty() && !commands.is_empty() {
            notes.push(format!(
                "no difference larger than {}% for {}: the change costs them nothing measurable",
                fmt_num(a.delta_pct),
                flat.join(", ")
            ));
        }
        let evidence = vec![evidence; commands.len()];
        return Recommendation { scope: kind, arm: Some(cc), commands, evidence, notes };
    }
    let mut commands: Vec<String> = Vec::new();
    let mut evidence = Vec::new();
    // A route reaches every connection to its prefix: within what was tested when the experiment
    // covered every connection, or named its clients (`--dst`, said when it also named a port or
    // cgroup); never for an experiment of one service on all its clients.
    let within_dst = |net: &IpNet| scope.dst.iter().any(|d| d.contains(net));
    let routes_allowed = scope.known && (!scope.dst.is_empty() || (scope.port.is_none() && scope.cgroup.is_none()));
    for g in sub.iter().filter(|g| wins(g)) {
        match g.kind {
            GroupKind::Prefix | GroupKind::List if routes_allowed => {
                for net in g.prefixes.iter().filter(|n| scope.dst.is_empty() || within_dst(n)) {
                    let c = route_cmd(net);
                    if !commands.contains(&c) {
                        commands.push(c);
                        evidence.push(conclusion(a, g));
                    }
                }
            }
            GroupKind::Prefix | GroupKind::List => notes.push(format!(
                "{cc} is faster for {}, but a route changes every connection to it, not only {}'s (not tested): \
                 no command",
                g.label,
                scope.words()
            )),
            GroupKind::Rtt | GroupKind::All => notes.push(format!(
                "{cc} is faster for {}, which is not a prefix: name the clients' prefixes with --prefix-list FILE",
                g.label
            )),
        }
    }
    if !commands.is_empty() && !scope.dst.is_empty() && (scope.port.is_some() || scope.cgroup.is_some()) {
        notes.push(format!(
            "a route changes every connection to its prefix, not only those in the experiment's scope ({}): \
             other services' were not tested",
            scope.words()
        ));
    }
    if commands.is_empty() {
        return none(Some(cc), notes);
    }
    Recommendation { scope: Scope::Routes, arm: Some(cc), commands, evidence, notes }
}

impl Report {
    /// The report for the terminal, every group with its table of metrics: at most 100 columns.
    pub fn render_text(&self) -> String {
        self.render(true)
    }

    /// The report without the tables: the arms, the split, one conclusion per group, the
    /// recommendation (for many prefixes, or a live view).
    pub fn render_summary(&self) -> String {
        self.render(false)
    }

    fn render(&self, tables: bool) -> String {
        let mut s = String::new();
        self.render_head(&mut s);
        if !tables {
            let _ = writeln!(s);
        }
        for g in &self.groups {
            if !tables {
                for line in wrap(&g.conclusion, 98) {
                    let _ = writeln!(s, "{line}");
                }
                continue;
            }
            self.render_group(&mut s, g);
        }
        if self.sparse_prefixes.groups > 0 {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "{} more destination prefixes with too few flows to judge ({} flows): not shown",
                fmt_count(self.sparse_prefixes.groups),
                fmt_count(self.sparse_prefixes.flows)
            );
        }
        if tables {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "* fixed-level interval excludes zero: a description, not a decision (the conclusions decide)"
            );
        }
        let rec = &self.recommend;
        let _ = writeln!(s);
        let _ = writeln!(s, "recommendation:");
        for c in &rec.commands {
            let _ = writeln!(s, "  {c}");
        }
        if rec.commands.is_empty() {
            let _ = writeln!(s, "  (no change)");
        }
        for n in &rec.notes {
            for line in wrap(n, 96) {
                let _ = writeln!(s, "  {line}");
            }
        }
        s
    }

    /// The report's first lines: the arms, the split, flows left out or still running, the rule.
    fn render_head(&self, s: &mut String) {
        let [a, b] = [&self.arms[0], &self.arms[1]];
        let _ = writeln!(
            s,
            "bbrscope experiment: {} (A) vs {} (B), {} flows, scope: {}",
            a.arm,
            b.arm,
            fmt_count(a.flows + b.flows),
            self.scope.words()
        );
        for arm in [a, b] {
            let _ = writeln!(
                s,
                "  arm {} {:<10} {:>9} flows  {:>10}",
                arm.label.to_uppercase(),
                clip(&arm.arm, 10),
                fmt_count(arm.flows),
                fmt_bytes(arm.bytes)
            );
        }
        let sr = &self.sample_ratio;
        let _ = writeln!(
            s,
            "  split: {:.1}% of flows in B, {:.1}% requested (chi-square p = {}): {}",
            sr.observed_b * 100.0,
            sr.expected_b * 100.0,
            fmt_p(sr.p_value),
            if sr.mismatch { "MISMATCH: flows lost or added unevenly, the results are suspect" } else { "ok" }
        );
        let ig = &self.integrity;
        if ig.excluded != [0, 0] {
            let _ = writeln!(
                s,
                "  left out: {} / {} flows that ran another algorithm than their arm's ({}){}",
                fmt_count(ig.excluded[0]),
                fmt_count(ig.excluded[1]),
                ig.ran_instead.join(", "),
                if ig.overridden { ": THE SERVICE SETS ITS OWN ALGORITHM, nothing is concluded" } else { "" }
            );
            for c in &ig.concentrated {
                let _ = writeln!(
                    s,
                    "  OVERRIDES CONCENTRATED in {} responses: {} of {} flows ran another algorithm:\n    \
                     what the arms do at that size is partly the service's doing",
                    c.bucket.label(),
                    fmt_count(c.excluded),
                    fmt_count(c.flows)
                );
            }
        }
        let f = self.in_flight;
        if f.a + f.b > 0 {
            let _ = writeln!(
                s,
                "  {} A / {} B flows still running at the end, counted as taking at least their elapsed time",
                fmt_count(f.a),
                fmt_count(f.b)
            );
        }
        let d = &self.decision;
        let _ = writeln!(
            s,
            "  decides: completion time as the client feels it, per client group (α {} over {} groups)",
            d.alpha, d.groups_judged
        );
        let _ = writeln!(s, "  matters: {}% and {} ms per response", fmt_num(d.delta_pct), fmt_num(d.min_effect_ms));
    }

    /// A group's heading, conclusion and table of secondary metrics.
    fn render_group(&self, s: &mut String, g: &GroupReport) {
        let [a, b] = [&self.arms[0], &self.arms[1]];
        let r = &g.result;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "== {} ({}: {} {} / {} {})",
            clip(&r.label, 50),
            kind_name(r.kind),
            fmt_count(r.arms[0].flows),
            clip(&a.arm, 10),
            fmt_count(r.arms[1].flows),
            clip(&b.arm, 10)
        );
        for line in wrap(&g.conclusion, 98) {
            let _ = writeln!(s, "{line}");
        }
        if r.metrics.is_empty() || matches!(r.verdict, Verdict::TooFewFlows | Verdict::ArmsOverridden) {
            return;
        }
        let _ = writeln!(
            s,
            "  {:<26} {:>10} {:>10} {:>8} {:<21} {:>13}",
            "secondary (not deciding)",
            clip(&a.arm, 10),
            clip(&b.arm, 10),
            "B vs A",
            format!("{:.0}% interval", self.level * 100.0),
            "flows A/B"
        );
        for m in &r.metrics {
            let (diff, ci) = match (&m.diff, m.status, m.needs) {
                (Some(d), _, _) => (fmt_diff(d), fmt_interval(d)),
                (None, Status::TooFewFlows, Some(n)) => (String::new(), format!("needs {} per arm", fmt_count(n))),
                (None, Status::TooFewFlows, None) => (String::new(), "too few flows".into()),
                (None, Status::Ok, _) => (String::new(), "n/a".into()),
            };
            let mark = if m.diff.as_ref().is_some_and(|d| d.significant) { "*" } else { "" };
            let _ = writeln!(
                s,
                "  {:<26} {:>10} {:>10} {:>8} {:<21} {:>13}{mark}",
                clip(&m.label, 26),
                m.a.map_or("-".into(), |v| fmt_value(v, m.unit)),
                m.b.map_or("-".into(), |v| fmt_value(v, m.unit)),
                diff,
                ci,
                format!("{}/{}", fmt_count(m.n[0]), fmt_count(m.n[1])),
            );
        }
    }
}

/// A number without trailing zeros: `5`, `2.5`.
fn fmt_num(x: f64) -> String {
    let s = format!("{x:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A time span for people: `40 s`, `12 min`, `3.5 h`.
fn fmt_span(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s => format!("{:.1} h", s / 3600.0),
    }
}

fn kind_name(k: GroupKind) -> &'static str {
    match k {
        GroupKind::All => "all",
        GroupKind::Rtt => "RTT band",
        GroupKind::Prefix => "prefix",
        GroupKind::List => "prefix list",
    }
}

/// Splits text into lines of at most `width` characters at spaces (continuations indented).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let cur = lines.last_mut().expect("one line");
        if !cur.is_empty() && cur.chars().count() + 1 + word.chars().count() > width {
            lines.push(format!("    {word}"));
        } else {
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(word);
        }
    }
    lines
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).chain(['…']).collect() }
}

/// A signed percentage with a real minus sign: `−38%`, `+1.2%` (one decimal below 10, two
/// below 0.1, so that a bound just above zero never reads as zero).
pub fn fmt_pct(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "+" };
    let m = x.abs();
    if m >= 9.95 {
        format!("{sign}{m:.0}%")
    } else if m >= 0.095 || m == 0.0 {
        format!("{sign}{m:.1}%")
    } else {
        format!("{sign}{m:.2}%")
    }
}

fn fmt_points(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "+" };
    let m = x.abs();
    if m >= 0.995 { format!("{sign}{m:.1} pp") } else { format!("{sign}{m:.2} pp") }
}

pub fn fmt_diff(d: &Diff) -> String {
    match d.unit {
        DiffUnit::RelativePct => fmt_pct(d.estimate),
        DiffUnit::Points => fmt_points(d.estimate),
    }
}

/// `[−45%, −30%]`.
pub fn fmt_interval(d: &Diff) -> String {
    match d.unit {
        DiffUnit::RelativePct => format!("[{}, {}]", fmt_pct(d.low), fmt_pct(d.high)),
        DiffUnit::Points => format!("[{}, {}]", fmt_points(d.low), fmt_points(d.high)),
    }
}

fn fmt_p(p: f64) -> String {
    if p < 0.001 { "<0.001".into() } else { format!("{p:.3}") }
}

/// `1,204`.
pub fn fmt_count(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn fmt_bytes(b: u64) -> String {
    units::fmt_bytes(b as f64)
}

/// A metric's value in its unit, for people.
pub fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "s" => fmt_seconds(v),
        "us" => fmt_seconds(v / 1e6),
        "bit/s" => units::fmt_rate(v),
        "ratio" => format!("{v:.2}x"),
        "share" => format!("{:.2}%", v * 100.0),
        _ => format!("{v}"),
    }
}

pub fn fmt_seconds(s: f64) -> String {
    match s {
        x if x >= 10.0 => format!("{x:.1} s"),
        x if x >= 1.0 => format!("{x:.2} s"),
        x if x >= 0.01 => format!("{:.0} ms", x * 1e3),
        x if x >= 0.001 => format!("{:.1} ms", x * 1e3),
        x => format!("{:.0} µs", x * 1e6),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::experiment::analysis::{
        Options, PrefixList, analyze,
        tests::{Population, lossy_and_clean, synth},
    };

    fn pop(net: [u8; 3], rtt_ms: f64, b: f64) -> Population {
        Population { net, rtt_ms, slowdown: [1.0, b], flows_per_arm: 600 }
    }

    /// An experiment on every new connection.
    fn everything() -> Context {
        Context { scope: InScope { known: true, ..InScope::default() }, ..Context::default() }
    }

    #[test]
    fn json_has_the_documented_shape() {
        let r = build(&analyze(&lossy_and_clean(4), &Options::default()), &everything());
        let v: Value = serde_json::to_value(&r).unwrap();
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

    #[test]
    fn text_fits_100_columns_and_says_it_plainly() {
        let opts = Options { prefix_lists: PrefixList::parse("far 203.0.113.0/24").unwrap(), ..Options::default() };
        let text = build(&analyze(&lossy_and_clean(4), &opts), &everything()).render_text();
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
        assert!(text.contains("\nBBR faster for 203.0.113.0/24: BBR's completion time −"), "{text}");
        assert!(text.contains("\nBBR faster for far: "), "{text}");
        assert!(text.contains("  bbrscope apply bbr --route 203.0.113.0/24\n"), "{text}");
        assert!(text.contains("split: 50.0% of flows in B, 50.0% requested"), "{text}");
        assert!(text.contains("secondary (not deciding)"), "{text}");
        let summary = build(&analyze(&lossy_and_clean(4), &opts), &everything()).render_summary();
        assert!(summary.lines().count() < 30 && summary.contains("\nBBR faster for far: "), "{summary}");
        assert!(!summary.contains("retransmit rate"), "{summary}");
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

    /// Every group's sentence agrees with its numbers: "faster" only with the interval on that
    /// side of zero, "no difference" only with it inside ±δ, and a command only with a change
    /// that matters.
    #[test]
    fn conclusions_never_contradict_their_numbers() {
        for seed in 0..30 {
            let b = [0.5, 0.8, 0.95, 1.0, 1.05, 1.3][seed as usize % 6];
            let obs = synth(&[pop([203, 0, 113], 150.0, b), pop([10, 0, 0], 2.0, 1.0)], seed);
            let a = analyze(&obs, &Options::default());
            let r = build(&a, &everything());
            for g in &r.groups {
                let ans = &g.result.answer;
                let c = &g.conclusion;
                let (lo, hi) = (ans.low_pct.unwrap_or(0.0), ans.high_pct.unwrap_or(0.0));
                if c.starts_with("BBR faster") {
                    assert!(hi < 0.0, "{c}");
                } else if c.starts_with("CUBIC faster") {
                    assert!(lo > 0.0, "{c}");
                } else if c.starts_with("no difference") {
                    assert!(lo >= -5.0 - 1e-9 && hi <= 5.0 + 1e-9, "{c}");
                }
            }
            for (cmd, why) in r.recommend.commands.iter().zip(&r.recommend.evidence) {
                let arm = if cmd.contains(" bbr") { "BBR faster" } else { "CUBIC faster" };
                assert!(why.starts_with(arm) && !why.contains("less than the"), "{cmd}: {why}");
            }
        }
    }

    /// `bbr` vs `bbr+iw32`, every flow running BBR: the flows count as their arms', and the
    /// winning window becomes a route setting beside the algorithm, only where routes are named.
    #[test]
    fn an_initial_window_arm_is_recommended_as_a_route_setting() {
        let mut obs = synth(&[pop([203, 0, 113], 100.0, 0.6)], 5);
        for o in &mut obs {
            o.cc = "bbr".into();
        }
        let opts = Options { arms: Some(["bbr".into(), "bbr+iw32".into()]), ..Options::default() };
        let a = analyze(&obs, &opts);
        assert!(!a.integrity.overridden && a.integrity.excluded == [0, 0], "{:?}", a.integrity);
        let dst = Context {
            scope: InScope { known: true, dst: vec!["203.0.113.0/24".parse().unwrap()], ..InScope::default() },
            ..Context::default()
        };
        let r = recommend(&a, &dst);
        assert_eq!(r.commands, vec!["bbrscope apply bbr --route 203.0.113.0/24 --initcwnd 32".to_string()], "{r:?}");
        assert_eq!(r.arm.as_deref(), Some("bbr+iw32"));
        // Every connection, or a port: no `apply` scope sets a window there; the note says how.
        let r = recommend(&a, &everything());
        assert!(r.commands.is_empty(), "{r:?}");
        assert!(r.notes.iter().any(|n| n.contains("--initcwnd 32") && n.contains("--dst")), "{r:?}");
    }

    #[test]
    fn recommends_within_the_experiments_scope_only() {
        // Both far prefixes gain and the near one is no different: "all flows" gains, so the
        // whole scope — here every new connection: system-wide.
        let both = synth(&[pop([203, 0, 113], 150.0, 0.6), pop([198, 51, 100], 120.0, 0.6)], 8);
        let a = analyze(&both, &Options::default());
        let r = recommend(&a, &everything());
        assert_eq!((r.scope, r.commands.clone()), (Scope::System, vec!["bbrscope apply bbr".to_string()]), "{r:?}");

        // --dst: the prefixes it named, never the system.
        let dst = Context {
            scope: InScope {
                known: true,
                dst: vec!["203.0.113.0/24".parse().unwrap(), "198.51.100.0/24".parse().unwrap()],
                ..InScope::default()
            },
            ..Context::default()
        };
        let r = recommend(&a, &dst);
        assert_eq!(r.scope, Scope::Routes);
        assert_eq!(
            r.commands,
            ["203.0.113.0/24", "198.51.100.0/24"].map(|p| format!("bbrscope apply bbr --route {p}"))
        );
        // --cgroup: that cgroup.
        let cg = Context {
            scope: InScope { known: true, cgroup: Some("/web".into()), ..InScope::default() },
            ..Context::default()
        };
        assert_eq!(recommend(&a, &cg).commands, vec!["bbrscope apply bbr --cgroup /web".to_string()]);
        // --port: the service's own cgroup when its flows share one, else nothing but words.
        let port = Context {
            scope: InScope { known: true, port: Some(443), ..InScope::default() },
            service_cgroup: Some("/system.slice/nginx.service".into()),
            ..Context::default()
        };
        let r = recommend(&a, &port);
        assert_eq!(
            (r.scope, r.commands.clone()),
            (Scope::Cgroup, vec!["bbrscope apply bbr --cgroup /system.slice/nginx.service".to_string()])
        );
        let r = recommend(&a, &Context { service_cgroup: None, ..port.clone() });
        assert!(r.commands.is_empty() && r.notes.iter().any(|n| n.contains("only port 443 was tested")), "{r:?}");
        // A recording that does not say: no command wider than its prefixes.
        let r = recommend(&a, &Context::default());
        assert!(r.commands.iter().all(|c| c.contains("--route")), "{r:?}");

        // One gains, one does not: a route for the one, nothing for the other.
        let a = analyze(&lossy_and_clean(8), &Options::default());
        let r = recommend(&a, &everything());
        assert_eq!(r.commands, vec!["bbrscope apply bbr --route 203.0.113.0/24".to_string()], "{r:?}");
        // The same with --port: a route would change other services' connections too.
        let r = recommend(&a, &Context { service_cgroup: None, ..port.clone() });
        assert!(r.commands.is_empty(), "{r:?}");
        // --port with --dst naming the clients: the route of the group that gains, within them.
        let both_scopes = Context {
            scope: InScope {
                dst: vec!["203.0.113.0/24".parse().unwrap(), "10.0.0.0/24".parse().unwrap()],
                ..port.scope.clone()
            },
            ..port
        };
        let r = recommend(&a, &both_scopes);
        assert_eq!(r.commands, vec!["bbrscope apply bbr --route 203.0.113.0/24".to_string()], "{r:?}");
        assert!(r.notes.iter().any(|n| n.contains("other services")), "{r:?}");

        // A prefix list that gains: one command per prefix in it.
        let opts = Options {
            by_prefix: false,
            prefix_lists: PrefixList::parse("far 203.0.113.0/25 203.0.113.128/25\nnear 10.0.0.0/8").unwrap(),
            ..Options::default()
        };
        let r = recommend(&analyze(&lossy_and_clean(8), &opts), &everything());
        assert_eq!(
            r.commands,
            ["203.0.113.0/25", "203.0.113.128/25"].map(|p| format!("bbrscope apply bbr --route {p}")).to_vec()
        );

        // Nothing gains: nothing to run.
        let equal = synth(&[pop([203, 0, 113], 150.0, 1.0), pop([10, 0, 0], 2.0, 1.0)], 8);
        let r = recommend(&analyze(&equal, &Options::default()), &everything());
        assert_eq!((r.scope, r.commands.len()), (Scope::None, 0), "{r:?}");

        // Arm A wins everywhere: apply A.
        let a_wins = synth(&[pop([203, 0, 113], 150.0, 1.7), pop([198, 51, 100], 120.0, 1.7)], 8);
        let r = recommend(&analyze(&a_wins, &Options::default()), &everything());
        assert_eq!(r.commands, vec!["bbrscope apply cubic".to_string()]);

        // Faster by a few percent only: not worth a change.
        let slight = synth(&[pop([203, 0, 113], 30.0, 0.97), pop([198, 51, 100], 30.0, 0.97)], 8);
        let r = recommend(&analyze(&slight, &Options::default()), &everything());
        assert!(r.commands.is_empty(), "{r:?}");

        // A guardrail stop: nothing, whatever the analysis says.
        // A guardrail stop of the arm it would recommend: nothing, whatever the analysis says.
        let stop = |arm| GuardDecision {
            stop: true,
            reason: "slower".into(),
            group: Some("all flows".into()),
            worse_arm: Some(arm),
            worse_pct: Some([30.0, 10.0, 50.0]),
        };
        let stopped = Context { guard_stop: Some(stop(1)), ..everything() };
        assert!(recommend(&analyze(&both, &Options::default()), &stopped).commands.is_empty());
        // A stop because the other arm (here the current algorithm) was slower: the finding stands.
        let stopped = Context { guard_stop: Some(stop(0)), ..everything() };
        let r = recommend(&analyze(&both, &Options::default()), &stopped);
        assert_eq!(r.commands, vec!["bbrscope apply bbr".to_string()], "{r:?}");
        assert!(r.notes[0].starts_with("the guardrail ended the experiment early because cubic was slower"), "{r:?}");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(fmt_pct(-38.2), "−38%");
        assert_eq!(fmt_pct(1.23), "+1.2%");
        assert_eq!(fmt_pct(0.04), "+0.04%");
        assert_eq!(fmt_count(1204), "1,204");
        assert_eq!(fmt_count(1_234_567), "1,234,567");
        assert_eq!(fmt_count(12), "12");
        assert_eq!(fmt_value(0.0123, "s"), "12 ms");
        assert_eq!(fmt_value(150_000.0, "us"), "150 ms");
        assert_eq!(fmt_value(0.0052, "share"), "0.52%");
        assert_eq!(fmt_num(5.0), "5");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_signed_ms(-2600.0), "−2.60 s");
    }

    /// An inconclusive answer says the smallest change its flows could tell from none: the
    /// interval's half-width, on the ratio scale, and fewer flows make it larger.
    #[test]
    fn an_inconclusive_answer_says_what_is_detectable_now() {
        let flat =
            |n| synth(&[Population { net: [203, 0, 113], rtt_ms: 100.0, slowdown: [1.0, 1.02], flows_per_arm: n }], 6);
        let r = build(&analyze(&flat(150), &Options::default()), &everything());
        let g = r.groups.iter().find(|g| g.result.label == "all flows").unwrap();
        let ans = &g.result.answer;
        assert_eq!(g.result.verdict, crate::experiment::analysis::Verdict::Inconclusive, "{}", g.conclusion);
        let d = ans.detectable_pct.unwrap();
        // The interval is the estimate ± h on the log scale: its upper end is (1 + effect)·e^h.
        let h = ((1.0 + ans.high_pct.unwrap() / 100.0) / (1.0 + ans.effect_pct.unwrap() / 100.0)).ln();
        assert!((d - (h.exp() - 1.0) * 100.0).abs() < 1e-9, "{d} vs {h}");
        assert!(
            g.conclusion.contains(&format!("(changes of ±{} are detectable now)", fmt_pct(d).trim_start_matches('+'))),
            "{}",
            g.conclusion
        );
        let more = analyze(&flat(1500), &Options::default());
        let all = more.groups.iter().find(|g| g.label == "all flows").unwrap();
        assert!(all.answer.detectable_pct.unwrap() < d, "more flows detect less");
    }

    /// A service that sets its own algorithm for its largest responses only (about 1% of all
    /// flows, under the 2% that stops every conclusion) is flagged at that size.
    #[test]
    fn overrides_concentrated_in_one_size_are_flagged() {
        let mut obs = lossy_and_clean(2);
        for o in obs.iter_mut().filter(|o| o.arm == 1 && o.bytes > 4 << 20).step_by(2) {
            o.switched = true;
        }
        let a = analyze(&obs, &Options::default());
        assert!(!a.integrity.overridden && a.integrity.excluded_share < 0.02, "{:?}", a.integrity);
        let c = &a.integrity.concentrated;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(
            (c[0].bucket, c[0].excluded),
            (crate::experiment::analysis::Bucket::Over4M, a.integrity.excluded[1])
        );
        let text = build(&a, &everything()).render_text();
        assert!(text.contains("OVERRIDES CONCENTRATED in >4 MB responses"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(analyze(&lossy_and_clean(2), &Options::default()).integrity.concentrated.is_empty());
    }

    /// A verdict that leaves strata out for want of flows says which, with their flows and
    /// share of the time (100 flows per arm: the >4 MB responses, a twentieth of the flows and
    /// much of the time, have too few); with flows enough in every stratum it names none.
    #[test]
    fn a_conclusion_names_the_strata_it_leaves_out() {
        let few =
            synth(&[Population { net: [203, 0, 113], rtt_ms: 100.0, slowdown: [1.0, 0.7], flows_per_arm: 100 }], 5);
        let r = build(&analyze(&few, &Options::default()), &everything());
        let all = r.groups.iter().find(|g| g.result.label == "all flows").unwrap();
        let big = all.result.left_out.iter().find(|l| l.stratum.ends_with(">4 MB")).expect("the >4 MB stratum");
        assert!(big.flows.iter().any(|&n| n < 10) && big.time_share > 0.1, "{big:?}");
        assert!(all.result.answer.coverage < 0.9, "{:?}", all.result.answer);
        assert!(all.conclusion.contains("; left out: RTT 50–150 ms >4 MB ("), "{}", all.conclusion);
        assert!(all.conclusion.contains("each needing 10 flows per arm"), "{}", all.conclusion);
        let json = serde_json::to_value(&r).unwrap();
        assert!(json["groups"][0]["left_out"][0]["stratum"].is_string(), "{}", json["groups"][0]);
        let many = build(&analyze(&lossy_and_clean(4), &Options::default()), &everything());
        let far = many.groups.iter().find(|g| g.result.label == "203.0.113.0/24").unwrap();
        assert!(!far.conclusion.contains("left out"), "{}", far.conclusion);
    }
}

//! The experiment's report: one JSON object for `--json`, a plain-text rendering for the terminal
//! (at most 100 columns), a conclusion in plain words per group, and the `bbrscope apply`
//! commands the evidence supports.
//!
//! JSON shape (numbers are JSON numbers; `null` where there is no value):
//! ```text
//! { "arms": [ {"label": "a", "arm": "cubic", "flows": 1204, "bytes": 123456789},
//!             {"label": "b", "arm": "bbr",   "flows": 1198, "bytes": 120000000} ],
//!   "level": 0.95, "method": "...",
//!   "sample_ratio": {"flows": [1204, 1198], "expected_b": 0.5, "observed_b": 0.4988,
//!                    "chi2": 0.015, "p_value": 0.90, "mismatch": false},
//!   "groups": [ { "kind": "all" | "rtt" | "prefix" | "list", "label": "203.0.113.0/24",
//!                 "prefixes": ["203.0.113.0/24"], "arms": [{"flows", "bytes"}, {..}],
//!                 "verdict": "a_better" | "b_better" | "mixed" | "no_difference" | "too_few_flows",
//!                 "headline": 4, "conclusion": "BBR faster for 203.0.113.0/24: ...",
//!                 "metrics": [ { "key": "completion_p95_256k_4m", "kind": "completion",
//!                                "bucket": "256K-4M", "quantile": 0.95, "label": "...",
//!                                "unit": "s", "higher_is_better": false, "n": [310, 305],
//!                                "a": 2.1, "b": 1.3, "status": "ok" | "too_few_flows",
//!                                "primary": true, "decisive": true,
//!                                "diff": {"unit": "relative_pct" | "points", "estimate": -38.0,
//!                                         "low": -45.0, "high": -30.0, "p_value": 0.0005,
//!                                         "significant": true} | null } ] } ],
//!   "sparse_prefixes": {"groups": 312, "flows": 2001},
//!   "recommend": {"scope": "system" | "routes" | "none", "arm": "bbr" | null,
//!                 "commands": ["bbrscope apply bbr --route 203.0.113.0/24"], "notes": ["..."]} }
//! ```

use std::fmt::Write as _;

use serde::Serialize;

use super::analysis::{Analysis, Diff, DiffUnit, GroupKind, GroupResult, Metric, SampleRatio, Sparse, Status, Verdict};

/// Share of the judged groups the better arm must win for a system-wide recommendation.
const SYSTEM_SHARE: f64 = 0.9;

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub arms: [ArmReport; 2],
    pub level: f64,
    /// How the intervals were computed, for the reader.
    pub method: String,
    pub sample_ratio: SampleRatio,
    pub groups: Vec<GroupReport>,
    pub sparse_prefixes: Sparse,
    pub recommend: Recommendation,
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
    None,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    pub scope: Scope,
    /// The algorithm recommended.
    pub arm: Option<String>,
    /// One `bbrscope apply` command per line (`--route` takes one prefix per invocation).
    pub commands: Vec<String>,
    /// Why, and what the evidence does not support.
    pub notes: Vec<String>,
}

/// The report of an analysis.
pub fn build(a: &Analysis) -> Report {
    Report {
        arms: [0, 1].map(|i| ArmReport {
            label: ["a", "b"][i],
            arm: a.arms[i].cc.clone(),
            flows: a.arms[i].flows,
            bytes: a.arms[i].bytes,
        }),
        level: a.level,
        method: format!(
            "quantiles: percentile bootstrap of B/A-1, {} resamples per arm, seed {}; retransmit rate: delta \
             method, B-A in percentage points; verdicts: completion times, Holm-corrected; at least {} flows per \
             arm per cell (more for p95/p99)",
            a.resamples, a.seed, a.min_flows
        ),
        sample_ratio: a.sample_ratio.clone(),
        groups: a.groups.iter().map(|g| GroupReport { result: g.clone(), conclusion: conclusion(a, g) }).collect(),
        sparse_prefixes: a.sparse_prefixes,
        recommend: recommend(a),
    }
}

/// An algorithm's name as people write it: `BBR`, `CUBIC`, `RENO`.
fn shout(cc: &str) -> String {
    cc.to_uppercase()
}

/// The group's verdict in one line, e.g. "BBR faster for 203.0.113.0/24: p95 completion
/// 256 KB–4 MB −38% [−45%, −30%], 1,204 flows".
pub fn conclusion(a: &Analysis, g: &GroupResult) -> String {
    let names = [&a.arms[0].cc, &a.arms[1].cc];
    let flows = fmt_count(g.flows());
    let head = g.headline.map(|i| &g.metrics[i]);
    let detail = |m: &Metric| {
        m.diff.as_ref().map_or(String::new(), |d| format!("{} {} {}", m.label, fmt_diff(d), fmt_interval(d)))
    };
    match (g.verdict, head) {
        (Verdict::ABetter | Verdict::BBetter, Some(m)) => {
            let arm = if g.verdict == Verdict::BBetter { 1 } else { 0 };
            format!("{} faster for {}: {}, {flows} flows", shout(names[arm]), g.label, detail(m))
        }
        (Verdict::Mixed, _) => {
            let on = |arm| {
                g.metrics
                    .iter()
                    .filter(|m| m.decisive && m.better_arm() == Some(arm))
                    .map(|m| m.label.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "mixed for {}: {} faster on {}; {} faster on {}; {flows} flows",
                g.label,
                shout(names[1]),
                on(1),
                shout(names[0]),
                on(0)
            )
        }
        (Verdict::NoDifference, Some(m)) => {
            format!("no detectable difference for {}: {}, {flows} flows", g.label, detail(m))
        }
        (Verdict::NoDifference, None) => format!("no detectable difference for {}, {flows} flows", g.label),
        _ => format!(
            "too few flows for {}: {} {} / {} {} (at least {} per arm in a size bucket needed)",
            g.label,
            fmt_count(g.arms[0].flows),
            names[0],
            fmt_count(g.arms[1].flows),
            names[1],
            a.min_flows
        ),
    }
}

/// The `bbrscope apply` commands the evidence supports.
///
/// Judged groups are those other than "all flows" whose verdict is not "too few flows" (RTT
/// bands, prefixes with enough flows, lists); without any, "all flows" alone. The candidate is
/// the arm with more winning groups. System-wide when it wins in at least 90% of the judged
/// groups and loses (or is mixed) in none: a group with no detectable difference loses nothing
/// by the switch, but a system-wide change on the strength of one group is not what the data
/// says. Otherwise one `--route` command per prefix of each prefix or list group it wins; RTT
/// bands cannot be routed and only get a note.
pub fn recommend(a: &Analysis) -> Recommendation {
    let judged: Vec<&GroupResult> = {
        let sub: Vec<_> =
            a.groups.iter().filter(|g| g.kind != GroupKind::All && g.verdict != Verdict::TooFewFlows).collect();
        if sub.is_empty() {
            a.groups.iter().filter(|g| g.kind == GroupKind::All && g.verdict != Verdict::TooFewFlows).collect()
        } else {
            sub
        }
    };
    let wins = |arm| {
        let v = if arm == 1 { Verdict::BBetter } else { Verdict::ABetter };
        judged.iter().filter(|g| g.verdict == v).count()
    };
    let (wa, wb) = (wins(0), wins(1));
    let none = |note: String| Recommendation { scope: Scope::None, arm: None, commands: vec![], notes: vec![note] };
    if judged.is_empty() {
        return none(format!("no group has enough flows to judge (at least {} per arm per cell)", a.min_flows));
    }
    if wa == 0 && wb == 0 {
        return none("no group shows a detectable difference: nothing to change".into());
    }
    let arm = if wb >= wa { 1 } else { 0 };
    let cc = a.arms[arm].cc.clone();
    let other = &a.arms[1 - arm].cc;
    let better = if arm == 1 { Verdict::BBetter } else { Verdict::ABetter };
    let against: Vec<&str> = judged
        .iter()
        .filter(|g| g.verdict == Verdict::Mixed || (g.verdict != better && g.verdict != Verdict::NoDifference))
        .map(|g| g.label.as_str())
        .collect();
    let won = wins(arm);
    let mut notes = Vec::new();
    if against.is_empty() && won as f64 >= SYSTEM_SHARE * judged.len() as f64 {
        notes.push(format!("{cc} is faster in {won} of {} groups with enough flows and slower in none", judged.len()));
        notes.extend(retrans_notes(a, &judged, arm));
        return Recommendation {
            scope: Scope::System,
            arm: Some(cc.clone()),
            commands: vec![format!("bbrscope apply {cc}")],
            notes,
        };
    }
    let mut commands: Vec<String> = Vec::new();
    let mut routed = Vec::new();
    for g in judged.iter().filter(|g| g.verdict == better) {
        match g.kind {
            GroupKind::Prefix | GroupKind::List => {
                for net in &g.prefixes {
                    let c = format!("bbrscope apply {cc} --route {net}");
                    if !commands.contains(&c) {
                        commands.push(c);
                    }
                }
                routed.push(*g);
            }
            GroupKind::Rtt | GroupKind::All => notes.push(format!(
                "{cc} is faster for {}, which is not a prefix: see the prefix groups (or give --prefix-list)",
                g.label
            )),
        }
    }
    if !against.is_empty() {
        notes.push(format!("{other} is as fast or faster for {}: not switched", against.join(", ")));
    }
    let flat = judged.iter().filter(|g| g.verdict == Verdict::NoDifference).count();
    if flat > 0 {
        notes.push(format!("{flat} groups with no detectable difference: left alone"));
    }
    notes.extend(retrans_notes(a, &routed, arm));
    if commands.is_empty() {
        return Recommendation { scope: Scope::None, arm: Some(cc), commands, notes };
    }
    Recommendation { scope: Scope::Routes, arm: Some(cc), commands, notes }
}

/// A faster algorithm may still retransmit more (BBRv1 on a shallow buffer): say so.
fn retrans_notes(a: &Analysis, groups: &[&GroupResult], arm: usize) -> Vec<String> {
    groups
        .iter()
        .filter_map(|g| {
            let m = g.metrics.iter().find(|m| m.key == "retrans_rate")?;
            let d = m.diff.as_ref()?;
            (m.better_arm() == Some(1 - arm)).then(|| {
                format!(
                    "but {} retransmits more for {}: {} {}",
                    a.arms[arm].cc,
                    g.label,
                    fmt_diff(&flip(d, arm)),
                    fmt_interval(&flip(d, arm))
                )
            })
        })
        .collect()
}

/// The difference as seen from `arm` (B − A as is for B, negated for A; only for points).
fn flip(d: &Diff, arm: usize) -> Diff {
    if arm == 1 || d.unit != DiffUnit::Points {
        return d.clone();
    }
    Diff { estimate: -d.estimate, low: -d.high, high: -d.low, ..d.clone() }
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
        let [a, b] = [&self.arms[0], &self.arms[1]];
        let _ = writeln!(
            s,
            "bbrscope experiment: {} (A) vs {} (B), {} flows, {:.0}% intervals",
            a.arm,
            b.arm,
            fmt_count(a.flows + b.flows),
            self.level * 100.0
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
        if !tables {
            let _ = writeln!(s);
        }
        for g in &self.groups {
            let r = &g.result;
            if !tables {
                for line in wrap(&g.conclusion, 98) {
                    let _ = writeln!(s, "{line}");
                }
                continue;
            }
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
            if r.verdict == Verdict::TooFewFlows {
                continue;
            }
            let _ = writeln!(
                s,
                "  {:<26} {:>10} {:>10} {:>8} {:<21} {:>13}",
                "metric",
                clip(&a.arm, 10),
                clip(&b.arm, 10),
                "B vs A",
                format!("{:.0}% interval", self.level * 100.0),
                "flows A/B"
            );
            for m in &r.metrics {
                let (diff, ci) = match (&m.diff, m.status) {
                    (Some(d), _) => (fmt_diff(d), fmt_interval(d)),
                    (None, Status::TooFewFlows) => ("".into(), "too few flows".into()),
                    (None, Status::Ok) => ("".into(), "n/a".into()),
                };
                let mark = if m.decisive {
                    "**"
                } else if m.diff.as_ref().is_some_and(|d| d.significant) {
                    "*"
                } else {
                    ""
                };
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
                "* interval excludes zero; ** decisive for the verdict (Holm-corrected over completion times)"
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

/// A signed percentage with a real minus sign: `−38%`, `+1.2%` (one decimal below 10).
pub fn fmt_pct(x: f64) -> String {
    let sign = if x < 0.0 { "−" } else { "+" };
    let m = x.abs();
    if m >= 9.95 { format!("{sign}{m:.0}%") } else { format!("{sign}{m:.1}%") }
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
    match b as f64 {
        x if x >= 1e9 => format!("{:.2} GB", x / 1e9),
        x if x >= 1e6 => format!("{:.1} MB", x / 1e6),
        x if x >= 1e3 => format!("{:.0} KB", x / 1e3),
        x => format!("{x:.0} B"),
    }
}

/// A metric's value in its unit, for people.
pub fn fmt_value(v: f64, unit: &str) -> String {
    match unit {
        "s" => fmt_seconds(v),
        "us" => fmt_seconds(v / 1e6),
        "bit/s" => match v {
            x if x >= 1e9 => format!("{:.2} Gb/s", x / 1e9),
            x if x >= 1e6 => format!("{:.2} Mb/s", x / 1e6),
            x if x >= 1e3 => format!("{:.0} kb/s", x / 1e3),
            x => format!("{x:.0} b/s"),
        },
        "ratio" => format!("{v:.2}x"),
        "share" => format!("{:.2}%", v * 100.0),
        _ => format!("{v}"),
    }
}

fn fmt_seconds(s: f64) -> String {
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

    #[test]
    fn json_has_the_documented_shape() {
        let r = build(&analyze(&lossy_and_clean(4), &Options::default()));
        let v: Value = serde_json::to_value(&r).unwrap();
        assert_eq!(v["arms"][0]["arm"], "cubic");
        assert_eq!(v["arms"][1]["arm"], "bbr");
        assert_eq!(v["arms"][1]["label"], "b");
        assert_eq!(v["arms"][0]["flows"], 1200);
        assert!(v["arms"][0]["bytes"].as_u64().unwrap() > 0);
        assert_eq!(v["level"], 0.95);
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
        assert!(c.starts_with("BBR faster for 203.0.113.0/24: ") && c.ends_with(", 1,200 flows"), "{c}");
        let m = &lossy["metrics"][lossy["headline"].as_u64().unwrap() as usize];
        assert_eq!(
            (m["kind"].as_str(), m["primary"].as_bool(), m["decisive"].as_bool()),
            (Some("completion"), Some(true), Some(true))
        );
        for k in ["unit", "estimate", "low", "high", "p_value", "significant"] {
            assert!(!m["diff"][k].is_null(), "diff.{k}");
        }
        assert!(m["diff"]["estimate"].as_f64().unwrap() < -20.0);
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
        assert!(clean["conclusion"].as_str().unwrap().starts_with("no detectable difference for 10.0.0.0/24: "));
        assert_eq!(v["recommend"]["scope"], "routes");
        assert!(v["members"].is_null() && lossy["members"].is_null());
    }

    #[test]
    fn text_fits_100_columns_and_says_it_plainly() {
        let opts = Options { prefix_lists: PrefixList::parse("far 203.0.113.0/24").unwrap(), ..Options::default() };
        let text = build(&analyze(&lossy_and_clean(4), &opts)).render_text();
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
        assert!(text.contains("\nBBR faster for 203.0.113.0/24: p"), "{text}");
        assert!(text.contains("\nBBR faster for far: p"), "{text}");
        assert!(text.contains("\nno detectable difference for 10.0.0.0/24: "), "{text}");
        assert!(text.contains("  bbrscope apply bbr --route 203.0.113.0/24\n"), "{text}");
        assert!(text.contains("split: 50.0% of flows in B, 50.0% requested"), "{text}");
        let summary = build(&analyze(&lossy_and_clean(4), &opts)).render_summary();
        assert!(summary.lines().count() < 20 && summary.contains("\nBBR faster for far: p"), "{summary}");
        assert!(!summary.contains("retransmit rate") && !summary.contains("decisive"), "{summary}");
    }

    #[test]
    fn recommends_system_wide_only_when_it_wins_nearly_everywhere() {
        // Both far prefixes gain: system-wide.
        let both = synth(&[pop([203, 0, 113], 150.0, 0.6), pop([198, 51, 100], 120.0, 0.6)], 8);
        let r = recommend(&analyze(&both, &Options::default()));
        assert_eq!((r.scope, r.commands.clone()), (Scope::System, vec!["bbrscope apply bbr".to_string()]), "{r:?}");

        // One gains, one does not: a route for the one, nothing for the other.
        let r = recommend(&analyze(&lossy_and_clean(8), &Options::default()));
        assert_eq!(r.scope, Scope::Routes, "{r:?}");
        assert_eq!(r.commands, vec!["bbrscope apply bbr --route 203.0.113.0/24".to_string()]);
        assert!(r.notes.iter().any(|n| n.contains("not a prefix")), "{r:?}");

        // A prefix list that gains: one command per prefix in it.
        let opts = Options {
            by_prefix: false,
            prefix_lists: PrefixList::parse("far 203.0.113.0/25 203.0.113.128/25\nnear 10.0.0.0/8").unwrap(),
            ..Options::default()
        };
        let r = recommend(&analyze(&lossy_and_clean(8), &opts));
        assert_eq!(
            r.commands,
            ["203.0.113.0/25", "203.0.113.128/25"].map(|p| format!("bbrscope apply bbr --route {p}")).to_vec()
        );

        // Nothing gains: nothing to run.
        let equal = synth(&[pop([203, 0, 113], 150.0, 1.0), pop([10, 0, 0], 2.0, 1.0)], 8);
        let r = recommend(&analyze(&equal, &Options::default()));
        assert_eq!((r.scope, r.commands.len()), (Scope::None, 0), "{r:?}");

        // Arm A (here the algorithm under test) wins everywhere: apply A.
        let a_wins = synth(&[pop([203, 0, 113], 150.0, 1.7), pop([198, 51, 100], 120.0, 1.7)], 8);
        let r = recommend(&analyze(&a_wins, &Options::default()));
        assert_eq!(r.commands, vec!["bbrscope apply cubic".to_string()]);

        // Too little data anywhere: no claim.
        let few =
            synth(&[Population { net: [203, 0, 113], rtt_ms: 150.0, slowdown: [1.0, 0.5], flows_per_arm: 10 }], 8);
        let r = recommend(&analyze(&few, &Options::default()));
        assert_eq!(r.scope, Scope::None);
        assert!(r.notes[0].contains("enough flows"), "{r:?}");
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(fmt_pct(-38.2), "−38%");
        assert_eq!(fmt_pct(1.23), "+1.2%");
        assert_eq!(fmt_count(1204), "1,204");
        assert_eq!(fmt_count(1_234_567), "1,234,567");
        assert_eq!(fmt_count(12), "12");
        assert_eq!(fmt_value(0.0123, "s"), "12 ms");
        assert_eq!(fmt_value(150_000.0, "us"), "150 ms");
        assert_eq!(fmt_value(0.0052, "share"), "0.52%");
    }
}

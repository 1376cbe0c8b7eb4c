//! Each group's answer in plain words: the conclusion the report prints under it, and the few
//! words the dashboard and the figure show. Apart from the numbers' formats ([`super::format`])
//! and the report ([`super::report`]) because these sentences must never contradict the
//! numbers, and are tested for that on their own.

use super::{
    analysis::{Analysis, GroupResult, Verdict},
    client::{MAX_MORE_CLIENTS, MIN_CLIENTS},
    decide::Answer,
    format::{fmt_count, fmt_num, fmt_pct, fmt_signed_ms, fmt_span, shout},
    setup::Design,
    switchback::{MAX_MORE_ROUNDS, MIN_ROUNDS},
};

/// The verdict in a few words with its number, as the dashboard and the figure caption show it:
/// `BBR faster −52% [−61%, −41%]`, `no difference > 5%`, `inconclusive −8% [−20%, +6%]`.
pub(crate) fn verdict_words(names: [&str; 2], g: &GroupResult) -> String {
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
        Verdict::TooFewFlows if g.clients.is_some_and(|c| c.too_few()) => "too few clients".into(),
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
pub(crate) fn conclusion(a: &Analysis, g: &GroupResult) -> String {
    let names = [&a.arms[0].cc, &a.arms[1].cc];
    let ans = &g.answer;
    let flows = flows_counted(g);
    let whose = whose(a, g);
    // A quantile's change is at that rank, not the mean response's.
    let per =
        a.metric.quantile().map_or("per response".into(), |q| format!("at the {}", super::format::quantile_name(q)));
    let change = || match (ans.effect_pct, ans.low_pct, ans.high_pct, ans.effect_ms) {
        (Some(e), Some(lo), Some(hi), Some(ms)) => {
            format!("{whose} {} [{}, {}], ≈ {} {per}", fmt_pct(e), fmt_pct(lo), fmt_pct(hi), fmt_signed_ms(ms))
        }
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
            format!("{} faster for {}: {}, {flows}{coverage}{small}", shout(names[arm]), g.label, change())
        }
        Verdict::NoDifference => {
            format!(
                "no difference larger than {}% for {}: {}, {flows}{coverage}",
                fmt_num(a.delta_pct),
                g.label,
                change()
            )
        }
        Verdict::Inconclusive => {
            // fmt_pct signs it "+"; a change either way is meant.
            let detectable = ans.detectable_pct.map_or(String::new(), |d| {
                format!(" (changes of ±{} are detectable now)", fmt_pct(d).trim_start_matches('+'))
            });
            format!("inconclusive for {}: {}, {flows}{detectable}; {}{coverage}", g.label, change(), what_decides(a, g))
        }
        Verdict::TooFewFlows => too_few(a, g),
        Verdict::ArmsOverridden => {
            format!("no conclusion for {}: the flows did not run their arms' algorithms", g.label)
        }
    }
}

/// The flows a group's answer rests on: a switchback's A and B blocks' counted flows (not all
/// the group's), a client design's flows and clients.
fn flows_counted(g: &GroupResult) -> String {
    let ans = &g.answer;
    match (&g.switchback, &g.clients) {
        (Some(sb), _) => {
            format!("{} flows in the A and B blocks of {} rounds", fmt_count(ans.flows[0] + ans.flows[1]), sb.rounds)
        }
        (None, Some(c)) => {
            format!("{} flows from {} clients", fmt_count(g.flows()), fmt_count(c.clients[0] + c.clients[1]))
        }
        (None, None) => format!("{} flows", fmt_count(g.flows())),
    }
}

/// Whose completion time the answer compares: a switchback's answer is everyone on B against
/// everyone on A, a client design's whole clients on B against whole clients on A, and each
/// says so.
fn whose(a: &Analysis, g: &GroupResult) -> String {
    let names = [&a.arms[0].cc, &a.arms[1].cc];
    match (&g.switchback, &g.clients) {
        (Some(_), _) if host_level(a) => format!(
            "{} for all of each host against {} for all of it: completion time",
            shout(names[1]),
            shout(names[0])
        ),
        (Some(_), _) => {
            format!("{} for everyone against {} for everyone: completion time", shout(names[1]), shout(names[0]))
        }
        (None, Some(_)) => format!(
            "{} for whole clients against {} for whole clients: completion time",
            shout(names[1]),
            shout(names[0])
        ),
        (None, None) => match a.metric.quantile() {
            Some(q) => format!("{}'s {} completion time", shout(names[1]), super::format::quantile_name(q)),
            None => format!("{}'s completion time", shout(names[1])),
        },
    }
}

/// What a group without an answer lacks, in its design's unit: rounds, clients, or flows (for a
/// quantile, the flows that bound it; otherwise a stratum's).
fn too_few(a: &Analysis, g: &GroupResult) -> String {
    let names = [&a.arms[0].cc, &a.arms[1].cc];
    if let Some(sb) = &g.switchback {
        return format!(
            "too few rounds for {}: {} of the {} needed with flows in both an A and a B block",
            g.label, sb.rounds, MIN_ROUNDS
        );
    }
    if let Some(c) = g.clients.as_ref().filter(|c| c.too_few()) {
        return format!(
            "too few clients for {}: {} {} / {} {} clients with flows in strata that count, {} needed in each arm",
            g.label,
            fmt_count(c.clients[0]),
            names[0],
            fmt_count(c.clients[1]),
            names[1],
            MIN_CLIENTS
        );
    }
    let needs = match a.metric.quantile() {
        Some(q) => format!(
            "each arm's {} is bounded on both sides from about {} flows at this level",
            super::format::quantile_name(q),
            fmt_count(super::quantile_cs::flows_to_bound(q, g.answer.level))
        ),
        None => format!("a stratum of RTT band and response size needs {} per arm", super::decide::MIN_CELL),
    };
    format!(
        "too few flows for {}: {} {} / {} {} ({needs})",
        g.label,
        fmt_count(g.arms[0].flows),
        names[0],
        fmt_count(g.arms[1].flows),
        names[1]
    )
}

/// What would decide an inconclusive answer if its estimate held: "about 1,200 more flows (≈ 5 min
/// at this run's rate) would decide"; a switchback's rounds, not its flows, decide it: "about 14
/// more rounds (≈ 10 min) would decide", or "no run of up to 100,000 more rounds would decide".
fn what_decides(a: &Analysis, g: &GroupResult) -> String {
    if let Some(sb) = &g.switchback {
        let Some(more) = sb.more_rounds else {
            return format!("no run of up to {} more rounds would decide", fmt_count(MAX_MORE_ROUNDS as usize));
        };
        let when = match a.design {
            Design::Switchback(s) => format!(" (≈ {})", fmt_span(more as f64 * 3.0 * s.block_s)),
            Design::PerConnection | Design::Client { .. } => String::new(),
        };
        let rounds = if more == 1 { "round" } else { "rounds" };
        return format!("about {} more {rounds}{when} would decide", fmt_count(more as usize));
    }
    // A client design's variance shrinks with its clients, not with more flows of the same ones.
    if let Some(c) = &g.clients {
        let Some(more) = c.more_clients else {
            return format!("no run of up to {} more clients would decide", fmt_count(MAX_MORE_CLIENTS as usize));
        };
        let noun = if more == 1 { "client" } else { "clients" };
        return format!(
            "about {} more {noun} (with as many flows each as so far) would decide",
            fmt_count(more as usize)
        );
    }
    let Some(more) = g.answer.more_flows else {
        return format!(
            "no run of up to {} more flows would decide",
            fmt_count(super::decide::MAX_MORE_QUANTILE_FLOWS as usize)
        );
    };
    let when = a.flows_per_s.filter(|r| *r > 0.0).map_or(String::new(), |r| {
        let share = g.flows() as f64 / (a.arms[0].flows + a.arms[1].flows).max(1) as f64;
        format!(" (≈ {} at this run's rate)", fmt_span(more as f64 / (r * share.max(1e-9))))
    });
    format!("about {} more flows{when} would decide", fmt_count(more as usize))
}

/// A switchback group's interference in words, worded by its interval: "interference for all
/// flows: CUBIC's own flows were 38% [21%, 57%] slower beside BBR than alone: a per-connection A/B
/// here says −52% [..], everyone switched −18% [..]"; "no interference shown" when the interval
/// holds 0. `None` for a per-connection A/B.
pub(crate) fn interference(a: &Analysis, g: &GroupResult) -> Option<String> {
    let sb = g.switchback.as_ref()?;
    let [na, nb] = [shout(&a.arms[0].cc), shout(&a.arms[1].cc)];
    let i = &sb.interference;
    let unsigned = |x: f64| fmt_pct(x).trim_start_matches(['+', '−']).to_string();
    let said = |ans: &Answer| match (ans.effect_pct, ans.low_pct, ans.high_pct) {
        (Some(e), Some(lo), Some(hi)) => format!("{} [{}, {}]", fmt_pct(e), fmt_pct(lo), fmt_pct(hi)),
        _ => "nothing yet".into(),
    };
    let shown = match (i.effect_pct, i.low_pct, i.high_pct) {
        (Some(e), Some(lo), Some(hi)) if lo > 0.0 => {
            format!(
                "{na}'s own flows were {} [{}, {}] slower beside {nb} than alone",
                unsigned(e),
                unsigned(lo),
                unsigned(hi)
            )
        }
        (Some(e), Some(lo), Some(hi)) if hi < 0.0 => {
            format!(
                "{na}'s own flows were {} [{}, {}] faster beside {nb} than alone",
                unsigned(e),
                unsigned(hi),
                unsigned(lo)
            )
        }
        (Some(e), Some(lo), Some(hi)) => format!(
            "none shown: {na}'s own flows beside {nb} against alone {} [{}, {}]",
            fmt_pct(e),
            fmt_pct(lo),
            fmt_pct(hi)
        ),
        _ => format!("not measured yet ({} of the {MIN_ROUNDS} rounds needed)", i.rounds),
    };
    let switched = if host_level(a) { "all of each host switched" } else { "everyone switched" };
    Some(format!(
        "interference for {}: {shown}: a per-connection A/B here says {}, {switched} {}",
        g.label,
        said(&sb.per_connection),
        said(&g.answer)
    ))
}

/// Whether the analysis is of a host-level switchback: each host its own order of the rounds,
/// so its answer is all of a host switched, not everyone at once.
fn host_level(a: &Analysis) -> bool {
    a.design.schedule().is_some_and(|s| s.host.is_some())
}

#[cfg(test)]
mod tests {
    use crate::experiment::{
        analysis::{
            Options, analyze,
            tests::{Population, lossy_and_clean, synth},
        },
        format::fmt_pct,
        report::{
            build,
            tests::{everything, pop},
        },
    };

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

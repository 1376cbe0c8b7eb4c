//! The report as text for the terminal: every group with its conclusion and its table of
//! secondary metrics, or only the conclusions (a live view, many prefixes); at most 100 columns.
//! Apart from the report's data ([`super::report`]) so that its shape and its reading stay two
//! things.

use crate::prose::wrap;
use std::fmt::Write as _;

use super::{
    analysis::{Status, Verdict},
    format::{clip, fmt_bytes, fmt_count, fmt_diff, fmt_interval, fmt_num, fmt_p, fmt_value},
    groups::GroupKind,
    report::{GroupReport, Report},
    switchback::Carryover,
};

impl Report {
    /// The report for the terminal, every group with its table of metrics: at most 100 columns.
    pub(crate) fn render_text(&self) -> String {
        self.render(true)
    }

    /// The report without the tables: the arms, the split, one conclusion per group, the
    /// recommendation (for many prefixes, or a live view).
    #[cfg(test)]
    pub(crate) fn render_summary(&self) -> String {
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
                for line in g.lines() {
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
            for line in wrap(n, 96, "    ") {
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
            "  split: {:.1}% of {} in B, {:.1}% requested (chi-square p = {}): {}",
            sr.observed_b * 100.0,
            match self.design.name {
                "switchback" | "host_switchback" => "mixed-block flows",
                "client" => "clients",
                _ => "flows",
            },
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
            "  decides: completion time as the client feels it, per group (α {} split up front, {} judged)",
            d.alpha, d.groups_judged
        );
        let _ = writeln!(s, "  metric: {}", d.metric.says());
        let _ = writeln!(s, "  matters: {}% and {} ms per response", fmt_num(d.delta_pct), fmt_num(d.min_effect_ms));
        if let Some(salt) = self.design.salt {
            let (clients, mismatched) = self
                .groups
                .iter()
                .find(|g| g.result.kind == GroupKind::All)
                .and_then(|g| g.result.clients)
                .map_or(([0, 0], 0), |c| (c.clients, c.mismatched));
            let _ = writeln!(
                s,
                "  design: client (seed {salt}): answers B for whole clients against A for whole clients\n    \
                 ({} / {} clients; {} flows on another arm than their client's left out)",
                fmt_count(clients[0]),
                fmt_count(clients[1]),
                fmt_count(mismatched)
            );
            return;
        }
        let Some(sch) = self.design.schedule else {
            // The full sentence is in the JSON and, where it limits a command, in the recommendation.
            let _ = writeln!(
                s,
                "  design: {}: answers B beside A, not B for everyone (the arms shared their bottlenecks)",
                self.design.name.replace('_', " ")
            );
            return;
        };
        let answers = match self.design.name {
            "host_switchback" => {
                "B for all of\n    each host against A for all of it (each host its own order of the rounds)"
            }
            _ => "B for everyone\n    against A for everyone",
        };
        let _ = writeln!(
            s,
            "  design: {}, blocks of {} s (burn-in {} s, seed {}), {} rounds: answers {answers}",
            self.design.name.replace('_', " "),
            fmt_num(sch.block_s),
            fmt_num(sch.burn_in_s),
            sch.seed,
            sch.rounds
        );
        if let Some(sb) =
            self.groups.iter().find(|g| g.result.kind == GroupKind::All).and_then(|g| g.result.switchback.as_ref())
        {
            let _ = writeln!(
                s,
                "  left out by the schedule: {} flows started in a burn-in, {} on another arm than their block's",
                fmt_count(sb.left_out.burn_in),
                fmt_count(sb.left_out.mismatched)
            );
            for line in carryover_lines(&sb.carryover) {
                let _ = writeln!(s, "  {line}");
            }
        }
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
        for line in g.lines() {
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

impl GroupReport {
    /// The conclusion, and a switchback's interference, wrapped to 98 columns.
    fn lines(&self) -> Vec<String> {
        let mut lines = wrap(&self.conclusion, 98, "    ");
        if let Some(i) = &self.interference {
            lines.extend(wrap(i, 98, "    "));
        }
        lines
    }
}

/// Whether the blocks fit the traffic, in words (none before a counted flow), and the shortest
/// that would have: longer ones when these did not fit, shorter ones (more rounds) when they did.
/// A fleet's sums have no percentile of the flows' time and no flows to try blocks on: its words
/// go without either.
fn carryover_lines(c: &Carryover) -> Vec<String> {
    if c.counted == 0 {
        return Vec::new();
    }
    let share = format!("{:.1}%", 100.0 * c.overran as f64 / c.counted as f64);
    let p99 = c.p99_s.map_or(String::new(), |p99| format!(" (99th percentile of their time {} s)", fmt_num(p99)));
    let blocks = |[block, burn_in]: [f64; 2]| format!("--block {}s --burn-in {}s", fmt_num(block), fmt_num(burn_in));
    let text = if c.fits {
        let shorter =
            c.suggest.map_or(String::new(), |b| format!("; {} would have fit too, with more rounds", blocks(b)));
        format!("blocks fit this traffic: {share} of counted flows ran past the next block's burn-in{p99}{shorter}")
    } else {
        format!(
            "blocks too short for this traffic: {share} of counted flows ran past the next block's burn-in, sharing \
             the path with its flows on their own arm{p99}, which pulls the everyone-switched estimate toward B \
             beside A; {}",
            match (c.suggest, c.p99_s) {
                (Some(b), _) => format!("{} would have fit", blocks(b)),
                (None, Some(_)) => "no block of up to 5 minutes would have: its longest responses outlast any".into(),
                (None, None) => "each host's own report says which --block and --burn-in would fit".into(),
            }
        )
    };
    wrap(&text, 96, "  ")
}

fn kind_name(k: GroupKind) -> &'static str {
    match k {
        GroupKind::All => "all",
        GroupKind::Rtt => "RTT band",
        GroupKind::Prefix => "prefix",
        GroupKind::List => "prefix list",
        GroupKind::Hosts => "hosts",
    }
}

#[cfg(test)]
mod tests {
    use crate::experiment::{
        analysis::{Options, analyze, tests::lossy_and_clean},
        groups::PrefixList,
        report::{build, tests::everything},
    };

    /// The blocks' fit in words: what fits says so, and which shorter blocks would have; what
    /// does not says what it does to the estimate and what would have fit (or that nothing
    /// would, or, for a fleet, where to look), within the report's width.
    #[test]
    fn the_blocks_fit_or_what_would() {
        use crate::experiment::switchback::Carryover;
        let fits = Carryover { counted: 1000, overran: 4, p99_s: Some(1.25), fits: true, suggest: None };
        assert_eq!(
            super::carryover_lines(&fits).join("\n"),
            "blocks fit this traffic: 0.4% of counted flows ran past the next block's burn-in (99th\n  \
             percentile of their time 1.25 s)"
        );
        let shorter = Carryover { suggest: Some([5.0, 1.0]), ..fits };
        // The words whatever the wrapping.
        let words =
            |c: &Carryover| super::carryover_lines(c).join(" ").split_whitespace().collect::<Vec<_>>().join(" ");
        let text = words(&shorter);
        assert!(text.ends_with("1.25 s); --block 5s --burn-in 1s would have fit too, with more rounds"), "{text}");
        let short =
            Carryover { counted: 1000, overran: 50, p99_s: Some(12.0), fits: false, suggest: Some([45.0, 9.0]) };
        let text = words(&short);
        assert!(text.starts_with("blocks too short for this traffic: 5.0% of counted flows ran past"), "{text}");
        assert!(text.ends_with("toward B beside A; --block 45s --burn-in 9s would have fit"), "{text}");
        let none = words(&Carryover { suggest: None, ..short });
        assert!(none.ends_with("no block of up to 5 minutes would have: its longest responses outlast any"), "{none}");
        let fleet = words(&Carryover { suggest: None, p99_s: None, ..short });
        assert!(fleet.ends_with("each host's own report says which --block and --burn-in would fit"), "{fleet}");
        for c in [fits, shorter, short] {
            assert!(super::carryover_lines(&c).iter().all(|l| l.chars().count() <= 98));
        }
        assert!(super::carryover_lines(&Carryover::default()).is_empty());
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
        // The recommendation's note on what a per-connection A/B answers takes four lines.
        assert!(summary.lines().count() < 34 && summary.contains("\nBBR faster for far: "), "{summary}");
        assert!(!summary.contains("retransmit rate"), "{summary}");
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
        assert_eq!((c[0].bucket, c[0].excluded), (crate::experiment::groups::Bucket::Over4M, a.integrity.excluded[1]));
        let text = build(&a, &everything()).render_text();
        assert!(text.contains("OVERRIDES CONCENTRATED in >4 MB responses"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(analyze(&lossy_and_clean(2), &Options::default()).integrity.concentrated.is_empty());
    }
}

//! The `bbrscope apply` commands the evidence supports, each with the finding it rests on, never
//! wider than the connections the experiment covered. Apart from the report ([`super::report`])
//! because it is the one place the experiment turns evidence into a change of the host, and its
//! rules (which arm, which scope, which prefixes) are tested on their own.

use ipnet::IpNet;
use serde::Serialize;

use super::{
    Arm,
    analysis::{Analysis, GroupResult, Verdict},
    conclusion::conclusion,
    format::fmt_num,
    groups::GroupKind,
    report::Context,
    setup::Design,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Scope {
    System,
    Routes,
    Cgroup,
    None,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    pub(crate) scope: Scope,
    /// The algorithm recommended.
    pub(crate) arm: Option<String>,
    /// One `bbrscope apply` command per line (`--route` takes one prefix per invocation).
    pub commands: Vec<String>,
    /// Per command, the finding it rests on.
    pub(crate) evidence: Vec<String>,
    /// Why, and what the evidence does not support.
    pub(crate) notes: Vec<String>,
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
    let all = a.groups.iter().find(|g| g.kind == GroupKind::All);
    let sub: Vec<&GroupResult> = a.groups.iter().filter(|g| g.kind != GroupKind::All).collect();
    let Some(arm) = chosen_arm(all, &sub) else {
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
    let winner = Winner::new(a, ctx, arm, sub);
    let mut rec = match all.filter(|g| winner.takes_the_whole_scope(g)) {
        Some(g) => winner.whole_scope(g),
        None => winner.routes(),
    };
    // A switchback's commands rest on everyone on the arm against everyone on the other: no
    // caveat about flows beside each other. A client design's, on whole clients: beside each
    // other only where clients share a bottleneck beyond their own links.
    if !rec.commands.is_empty() {
        match a.design {
            Design::PerConnection => rec.notes.push(BESIDE.into()),
            Design::Client { .. } => rec.notes.push(WHOLE_CLIENTS.into()),
            Design::Switchback(_) => {}
        }
    }
    rec
}

/// What a client design's commands rest on, said with them (docs/experiment-method.md,
/// "Client-clustered").
const WHOLE_CLIENTS: &str = "this rests on whole clients on each arm: it is everyone switched where each client's \
                             bottleneck is its own link (mobile, home); where clients share one beyond it (a busy \
                             cell, a shared shallow link), clients on the new algorithm ran beside clients on the old \
                             there, and a switchback answers for everyone";

/// What a per-connection A/B's commands rest on, said with them (docs/experiment-method.md,
/// "What a per-connection A/B answers"): an audit's paired runs found the everyone-switched
/// effect of the opposite sign on a shared shallow link and a mobile-like group.
const BESIDE: &str = "this rests on a per-connection A/B, where each arm's flows ran beside the other's: where these \
                      clients share a bottleneck (a mobile cell, a busy link with a shallow buffer), everyone on the \
                      new algorithm can fare worse than its flows did here; apply where each client has a bottleneck \
                      of its own, or to a share of the traffic first and compare";

/// Nothing to apply, and why.
fn none(arm: Option<String>, notes: Vec<String>) -> Recommendation {
    Recommendation { scope: Scope::None, arm, commands: vec![], evidence: vec![], notes }
}

/// A group that shows a change that matters, on either arm.
fn practical(g: &GroupResult) -> bool {
    g.answer.practical && g.verdict.better_arm().is_some()
}

/// The arm to recommend: the one "all flows" favours when it shows a change that matters, else
/// the one more groups favour (B on a tie); `None` when no group shows one.
fn chosen_arm(all: Option<&GroupResult>, sub: &[&GroupResult]) -> Option<usize> {
    match all.filter(|g| practical(g)) {
        Some(g) => g.verdict.better_arm(),
        None => {
            let wins = |arm| sub.iter().filter(|g| practical(g) && g.verdict.better_arm() == Some(arm)).count();
            match (wins(0), wins(1)) {
                (0, 0) => None,
                (wa, wb) => Some(usize::from(wb >= wa)),
            }
        }
    }
}

/// The arm chosen, and what its recommendation is built from: the notes gather as the scope is
/// worked out.
struct Winner<'a> {
    a: &'a Analysis,
    ctx: &'a Context,
    arm: usize,
    /// Its label (`bbr+iw32`), its algorithm (`bbr`) and its initial window (32).
    cc: String,
    algo: &'a str,
    iw: Option<u32>,
    /// The groups other than "all flows", and those of them with a verdict.
    sub: Vec<&'a GroupResult>,
    judged: Vec<&'a GroupResult>,
    /// The groups where the other arm is faster.
    against: Vec<&'a str>,
    notes: Vec<String>,
}

impl<'a> Winner<'a> {
    fn new(a: &'a Analysis, ctx: &'a Context, arm: usize, sub: Vec<&'a GroupResult>) -> Self {
        let cc = a.arms[arm].cc.clone();
        let other = &a.arms[1 - arm].cc;
        let against: Vec<&str> =
            a.groups.iter().filter(|g| g.verdict.better_arm() == Some(1 - arm)).map(|g| g.label.as_str()).collect();
        let mut notes = Vec::new();
        if let Some(g) = &ctx.guard_stop {
            notes.push(format!("the guardrail ended the experiment early because {other} was slower: {}", g.reason));
        }
        if !against.is_empty() {
            notes.push(format!("{other} is faster for {}: not switched there", against.join(", ")));
        }
        let judged: Vec<&GroupResult> = sub
            .iter()
            .copied()
            .filter(|g| !matches!(g.verdict, Verdict::TooFewFlows | Verdict::ArmsOverridden))
            .collect();
        Winner {
            a,
            ctx,
            arm,
            // An arm with an initial window applies as a route setting beside its algorithm; no
            // other scope of `apply` sets a window.
            iw: Arm::iw_of(&cc),
            algo: Arm::cc_of(&a.arms[arm].cc),
            cc,
            sub,
            judged,
            against,
            notes,
        }
    }

    fn wins(&self, g: &GroupResult) -> bool {
        practical(g) && g.verdict.better_arm() == Some(self.arm)
    }

    fn route_cmd(&self, net: &IpNet) -> String {
        let window = self.iw.map(|n| format!(" --initcwnd {n}")).unwrap_or_default();
        format!("bbrscope apply {} --route {net}{window}", self.algo)
    }

    fn iw_note(&mut self) {
        if let Some(n) = self.iw {
            self.notes.push(format!(
                "{}'s initial window of {n} is a route setting (`bbrscope apply --route PREFIX --initcwnd {n}`): \
                 run the experiment with --dst naming the clients' prefixes to get commands for their routes",
                self.cc
            ));
        }
    }

    /// The whole scope when every client group gains, or when the gain belongs to no prefix and
    /// no group is left unsure (each gains, or differs by less than δ); otherwise only the
    /// prefixes that gain.
    fn takes_the_whole_scope(&self, all: &GroupResult) -> bool {
        let routable = |g: &GroupResult| matches!(g.kind, GroupKind::Prefix | GroupKind::List);
        let judged = &self.judged;
        self.wins(all)
            && self.against.is_empty()
            && (judged.iter().all(|g| self.wins(g))
                || (!judged.iter().any(|g| routable(g) && self.wins(g))
                    && judged.iter().all(|g| self.wins(g) || g.verdict == Verdict::NoDifference)))
    }

    /// The experiment's whole scope, on the evidence of "all flows" (`all`).
    fn whole_scope(mut self, all: &GroupResult) -> Recommendation {
        let evidence = conclusion(self.a, all);
        let (kind, commands) = self.scope_commands();
        let flat: Vec<&str> =
            self.judged.iter().filter(|g| g.verdict == Verdict::NoDifference).map(|g| g.label.as_str()).collect();
        if !flat.is_empty() && !commands.is_empty() {
            self.notes.push(format!(
                "no difference larger than {}% for {}: the change costs them nothing measurable",
                fmt_num(self.a.delta_pct),
                flat.join(", ")
            ));
        }
        let evidence = vec![evidence; commands.len()];
        Recommendation { scope: kind, arm: Some(self.cc), commands, evidence, notes: self.notes }
    }

    /// The commands that reach what the experiment covered and no further: the system for every
    /// new connection, the `--dst` prefixes as routes, the `--cgroup`, or for `--port` the one
    /// cgroup all the service's flows were in.
    fn scope_commands(&mut self) -> (Scope, Vec<String>) {
        let scope = &self.ctx.scope;
        let cc = &self.cc;
        if !scope.known {
            self.notes.push(format!(
                "the recording does not say which connections the experiment covered: apply {cc} at the scope it \
                 ran on (bbrscope apply {} --route/--cgroup/--netns), not wider",
                self.algo
            ));
            (Scope::None, vec![])
        } else if !scope.dst.is_empty() {
            if scope.port.is_some() || scope.cgroup.is_some() {
                self.notes.push(format!(
                    "a route changes every connection to its prefix, not only those in the experiment's scope \
                     ({}): other services' were not tested",
                    scope.words()
                ));
            }
            (Scope::Routes, scope.dst.iter().map(|net| self.route_cmd(net)).collect())
        } else if self.iw.is_some() {
            self.iw_note();
            (Scope::None, vec![])
        } else if let Some(c) = &scope.cgroup {
            (Scope::Cgroup, vec![format!("bbrscope apply {cc} --cgroup {c}")])
        } else if let Some(port) = scope.port {
            self.service_cgroup_command(port)
        } else {
            (Scope::System, vec![format!("bbrscope apply {cc}")])
        }
    }

    /// `--port`: the service's own cgroup when its flows shared one, else nothing but words.
    fn service_cgroup_command(&mut self, port: u16) -> (Scope, Vec<String>) {
        let cc = &self.cc;
        match self.ctx.service_cgroup.as_deref().filter(|c| *c != "/" && !c.is_empty()) {
            Some(c) => {
                self.notes.push(format!("the narrowest apply that covers port {port}'s service is its cgroup, {c}"));
                (Scope::Cgroup, vec![format!("bbrscope apply {cc} --cgroup {c}")])
            }
            None => {
                self.notes.push(format!(
                    "only port {port} was tested and its flows are in no cgroup of their own: bbrscope has no \
                     apply scope that narrow, and a system-wide `bbrscope apply {cc}` would change services \
                     that were not tested; move the service into its own cgroup and apply there"
                ));
                (Scope::None, vec![])
            }
        }
    }

    /// One `--route` per prefix of each prefix or list group that gains. A route reaches every
    /// connection to its prefix: within what was tested when the experiment covered every
    /// connection, or named its clients (`--dst`, said when it also named a port or cgroup);
    /// never for an experiment of one service on all its clients.
    fn routes(mut self) -> Recommendation {
        let mut commands: Vec<String> = Vec::new();
        let mut evidence = Vec::new();
        let scope = &self.ctx.scope;
        let within_dst = |net: &IpNet| scope.dst.iter().any(|d| d.contains(net));
        let routes_allowed = scope.known && (!scope.dst.is_empty() || (scope.port.is_none() && scope.cgroup.is_none()));
        let gaining: Vec<&GroupResult> = self.sub.iter().copied().filter(|g| self.wins(g)).collect();
        for g in gaining {
            match g.kind {
                GroupKind::Prefix | GroupKind::List if routes_allowed => {
                    for net in g.prefixes.iter().filter(|n| scope.dst.is_empty() || within_dst(n)) {
                        let c = self.route_cmd(net);
                        if !commands.contains(&c) {
                            commands.push(c);
                            evidence.push(conclusion(self.a, g));
                        }
                    }
                }
                GroupKind::Prefix | GroupKind::List => self.notes.push(format!(
                    "{} is faster for {}, but a route changes every connection to it, not only {}'s (not tested): \
                     no command",
                    self.cc,
                    g.label,
                    scope.words()
                )),
                GroupKind::Rtt | GroupKind::All => self.notes.push(format!(
                    "{} is faster for {}, which is not a prefix: name the clients' prefixes with --prefix-list FILE",
                    self.cc, g.label
                )),
                GroupKind::Hosts => self.notes.push(format!(
                    "{} is faster for {}: apply it on those hosts (fleet-experiment.yml applies on all of them only for \
                     all flows)",
                    self.cc, g.label
                )),
            }
        }
        if !commands.is_empty() && !scope.dst.is_empty() && (scope.port.is_some() || scope.cgroup.is_some()) {
            self.notes.push(format!(
                "a route changes every connection to its prefix, not only those in the experiment's scope ({}): \
                 other services' were not tested",
                scope.words()
            ));
        }
        if commands.is_empty() {
            return none(Some(self.cc), self.notes);
        }
        Recommendation { scope: Scope::Routes, arm: Some(self.cc), commands, evidence, notes: self.notes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{
        analysis::{
            Options, analyze,
            tests::{lossy_and_clean, synth},
        },
        groups::PrefixList,
        guardrail::GuardDecision,
        report::{
            InScope,
            tests::{everything, pop},
        },
    };

    /// Both far prefixes gain (B 40% faster) and nothing else is there.
    fn both_far_gain() -> Vec<crate::experiment::Observation> {
        synth(&[pop([203, 0, 113], 150.0, 0.6), pop([198, 51, 100], 120.0, 0.6)], 8)
    }

    /// An experiment of the service on port 443, whose flows shared one cgroup.
    fn port_443() -> Context {
        Context {
            scope: InScope { known: true, port: Some(443), ..InScope::default() },
            service_cgroup: Some("/system.slice/nginx.service".into()),
            ..Context::default()
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
    fn a_gain_everywhere_is_recommended_for_the_experiments_whole_scope() {
        // Both far prefixes gain and the near one is no different: "all flows" gains, so the
        // whole scope — here every new connection: system-wide.
        let a = analyze(&both_far_gain(), &Options::default());
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
        let port = port_443();
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
    }

    #[test]
    fn a_gain_for_some_prefixes_is_recommended_as_their_routes_within_the_scope() {
        // One gains, one does not: a route for the one, nothing for the other.
        let port = port_443();
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
    }

    #[test]
    fn no_gain_that_matters_or_a_guardrail_stop_of_the_arm_recommends_nothing() {
        let both = both_far_gain();
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
            switched_back: Vec::new(),
        };
        let stopped = Context { guard_stop: Some(stop(1)), ..everything() };
        assert!(recommend(&analyze(&both, &Options::default()), &stopped).commands.is_empty());
        // A stop because the other arm (here the current algorithm) was slower: the finding stands.
        let stopped = Context { guard_stop: Some(stop(0)), ..everything() };
        let r = recommend(&analyze(&both, &Options::default()), &stopped);
        assert_eq!(r.commands, vec!["bbrscope apply bbr".to_string()], "{r:?}");
        assert!(r.notes[0].starts_with("the guardrail ended the experiment early because cubic was slower"), "{r:?}");
        // Commands come with what a per-connection A/B answers; no commands, no such note.
        assert_eq!(r.notes.last().map(String::as_str), Some(BESIDE), "{r:?}");
        let none =
            recommend(&analyze(&both, &Options::default()), &Context { guard_stop: Some(stop(1)), ..everything() });
        assert!(!none.notes.iter().any(|n| n == BESIDE), "{none:?}");
    }
}

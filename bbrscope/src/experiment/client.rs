//! The client-clustered design's analysis: every connection of a client address ran the arm its
//! salted hash gave it (`bbrscope_common::client_gets_b`), so the answer is B for whole clients
//! against A for whole clients (docs/experiment-method.md, "Client-clustered"). Pure:
//! observations, the salt and the split in, an estimate out.
//!
//! - **Estimate.** The per-connection A/B's stratified estimate ([`Strata`]), unchanged: within
//!   RTT band and response size, B's mean log completion time minus A's, strata weighted by
//!   their time.
//! - **Variance.** A client's flows share its link, its device and its day: they are not
//!   independent, and with several flows per client the per-flow variance is too small. The
//!   clients are the clusters: each flow's influence on the estimate ([`Strata::influence`])
//!   summed per client address, the sandwich variance with the small-sample factor C/(C−1)
//!   ([`cluster_variance`]), widened to Student's t with C−1 degrees of freedom
//!   ([`decide::clustered_answer`]). With one flow per client it is the per-connection
//!   variance times C/(C−1).
//! - **The assignment checked.** A flow whose arm is not its client's hashed arm (the kernel
//!   did not give it, or the recording's salt is not the run's) is left out and counted.
//! - No estimate before [`MIN_CLIENTS`] clients in each arm: "too few clients".

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
};

use serde::Serialize;

use super::{
    Observation,
    decide::{self, Answer, Estimate, LeftOut, PrimaryMetric, Rule, Strata},
    stats::cluster_variance,
};

/// Clients each arm needs before an estimate is made. The variance comes from the clients
/// alone (C − 1 degrees of freedom): with fewer, one unusual client moves it by half and the
/// Student-t widening grows fast (at α 0.005, ×1.3 with 16 clients, ×2.06 with 8).
pub(crate) const MIN_CLIENTS: usize = 8;

/// The arm (0 A, 1 B) the client at `peer` gets under `salt` and `split_pct`: the kernel's own
/// function, on the address as the kernel reads it (IPv4 as IPv4-mapped IPv6).
pub(crate) fn arm_of(peer: IpAddr, salt: u64, split_pct: u32) -> usize {
    let addr = match peer {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    usize::from(bbrscope_common::client_gets_b(&addr.octets(), salt, split_pct))
}

/// A group's clustered estimate and what it rests on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Estimates {
    /// The estimate with its clustered variance, and the clients it has (its clusters).
    pub(crate) est: Option<(Estimate, usize)>,
    /// Clients per arm with flows in the strata that count.
    pub(crate) clients: [usize; 2],
    /// Strata with flows that the estimate leaves out, as the per-connection A/B's.
    pub(crate) left_out: Vec<LeftOut>,
    /// Flows left out: on another arm than their client's.
    pub(crate) mismatched: usize,
}

/// The clustered estimate for the flows `members` of `obs`.
pub(crate) fn estimate(
    obs: &[Observation],
    members: &[usize],
    salt: u64,
    split_pct: u32,
    rtt: &[f64],
    metric: PrimaryMetric,
) -> Estimates {
    let (kept, mismatched): (Vec<usize>, Vec<usize>) =
        members.iter().partition(|&&i| obs[i].arm == arm_of(obs[i].peer, salt, split_pct));
    let mut strata = Strata::weighted(metric);
    for &i in &kept {
        strata.add(&obs[i], rtt);
    }
    let influence = strata.influence(rtt);
    let mut scores: BTreeMap<IpAddr, f64> = BTreeMap::new();
    let mut clients = [BTreeSet::new(), BTreeSet::new()];
    for &i in &kept {
        let o = &obs[i];
        if let Some(u) = influence(o) {
            *scores.entry(o.peer).or_default() += u;
            clients[o.arm].insert(o.peer);
        }
    }
    let clients = clients.map(|c| c.len());
    let enough = clients.iter().all(|&c| c >= MIN_CLIENTS);
    let scores: Vec<f64> = scores.into_values().collect();
    let est = strata
        .estimate()
        .filter(|_| enough)
        // Clients that all agree would claim a certainty they do not have.
        .map(|e| (Estimate { var: cluster_variance(&scores).max(1e-8), ..e }, scores.len()));
    Estimates { est, clients, left_out: strata.left_out(rtt), mismatched: mismatched.len() }
}

/// A client-clustered group's clients, as the report carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct ClientGroup {
    /// Clients per arm with flows in the strata that count; each arm needs [`MIN_CLIENTS`].
    pub(crate) clients: [usize; 2],
    pub(crate) min_clients: usize,
    /// Flows left out: on another arm than their client's hashed one.
    pub(crate) mismatched: usize,
    /// Inconclusive: about how many more clients, with as many flows each as so far, would
    /// decide if the estimate held (clients, not flows, narrow a clustered interval; the
    /// answer's `more_flows` is null). Null once decided, or past [`MAX_MORE_CLIENTS`].
    pub(crate) more_clients: Option<u64>,
}

/// Beyond this many more clients a client design is not said to decide.
pub(crate) const MAX_MORE_CLIENTS: u64 = 10_000_000;

impl ClientGroup {
    /// Whether the answer lacks clients (rather than flows in its strata).
    pub(crate) fn too_few(&self) -> bool {
        self.clients.iter().any(|&c| c < self.min_clients)
    }
}

/// A group's answer (B for whole clients against A for whole clients) judged at `alpha`, and
/// its clients.
pub(crate) fn judge(e: &Estimates, alpha: f64, rule: &Rule) -> (Answer, ClientGroup) {
    let mut answer = decide::clustered_answer(e.est, alpha, rule);
    let more_clients = e
        .est
        .filter(|_| answer.outcome == decide::Outcome::Inconclusive)
        .and_then(|(est, clients)| decide::more_clusters(est, clients, alpha, rule, MAX_MORE_CLIENTS));
    answer.more_flows = None;
    let group = ClientGroup { clients: e.clients, min_clients: MIN_CLIENTS, mismatched: e.mismatched, more_clients };
    (answer, group)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::{
        experiment::{
            analysis::{Options, Verdict, analyze},
            format::fmt_count,
            report::{build, tests::everything},
            setup::Design,
            switchback::tests::simulated,
        },
        rng::Rng,
    };

    const BANDS: [f64; 3] = [10.0, 50.0, 150.0];

    /// `clients` clients of two /16s (20 ms and 100 ms away), each with `per_client` flows and
    /// its own slowness shared by all its flows (lognormal, `client_sd`), each flow its own
    /// noise (`flow_sd`); B's flows `b` times A's. The client's arm is its hashed one.
    fn clustered(seed: u64, clients: u32, per_client: usize, client_sd: f64, flow_sd: f64, b: f64) -> Vec<Observation> {
        let mut rng = Rng::new(seed);
        let mut out = Vec::new();
        let mut t = 1_800_000_000.0;
        for c in 0..clients {
            let far = c % 2 == 1;
            let peer = IpAddr::V4(Ipv4Addr::from(if far { 0xcb00_0000 } else { 0xc633_0000 } + c));
            let arm = arm_of(peer, seed, 50);
            let slowness = (client_sd * rng.normal()).exp();
            let rtt = if far { 0.100 } else { 0.020 };
            for _ in 0..per_client {
                let bytes = crate::experiment::analysis::tests::response_bytes(&mut rng, 1_000_000.0);
                let rounds_of_rtt = 1.0 + (bytes as f64 / 10_000.0).max(1.0).log2();
                let duration_s =
                    rtt * rounds_of_rtt * slowness * (flow_sd * rng.normal()).exp() * if arm == 1 { b } else { 1.0 };
                t += 0.05;
                out.push(simulated(arm, peer, bytes, rtt, t, duration_s));
            }
        }
        out
    }

    fn all(obs: &[Observation]) -> Vec<usize> {
        (0..obs.len()).collect()
    }

    /// The kernel's hash, as userspace reads an address: an IPv4 client hashes as its
    /// IPv4-mapped form (what the sock_ops program reads from an AF_INET socket), and its
    /// IPv4-mapped IPv6 form (a dual-stack socket's) the same; about half the clients get B.
    #[test]
    fn the_userspace_arm_is_the_kernels_hash() {
        let v4 = Ipv4Addr::new(127, 0, 0, 2);
        let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2];
        for salt in [0, 7, u64::MAX] {
            let kernel = usize::from(bbrscope_common::client_gets_b(&mapped, salt, 50));
            assert_eq!(arm_of(IpAddr::V4(v4), salt, 50), kernel);
            assert_eq!(arm_of(IpAddr::V6(v4.to_ipv6_mapped()), salt, 50), kernel);
        }
        let b: usize = (0..1000u32).map(|i| arm_of(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), 3, 50)).sum();
        assert!((440..560).contains(&b), "{b} of 1,000 clients on B");
    }

    /// With one flow per client the clustered variance is the per-connection one times the
    /// small-sample factor C/(C−1), to rounding: clustering changes nothing where there is
    /// nothing to cluster.
    #[test]
    fn with_one_flow_per_client_the_clustered_variance_is_the_unclustered_one() {
        for seed in 1..=5 {
            let obs = clustered(seed, 800, 1, 0.5, 0.4, 1.0);
            let e = estimate(&obs, &all(&obs), seed, 50, &BANDS, PrimaryMetric::TimeWeighted);
            let (clustered, c) = e.est.unwrap();
            let mut strata = Strata::default();
            for o in &obs {
                strata.add(o, &BANDS);
            }
            let plain = strata.estimate().unwrap();
            // One client per flow in the strata that count.
            assert_eq!(c, plain.flows[0] + plain.flows[1]);
            assert_eq!(clustered.log_ratio, plain.log_ratio);
            let factor = c as f64 / (c as f64 - 1.0);
            assert!((clustered.var / (plain.var * factor) - 1.0).abs() < 1e-9, "{} vs {}", clustered.var, plain.var);
        }
    }

    /// A/A with each client's own slowness shared by its flows (8 flows each, 120 clients): over
    /// 300 re-draws of clients and salt, the clustered interval calls a difference in at most 5%
    /// of runs; the per-flow (unclustered) variance on the same data in far more: its flows are
    /// not independent, and that is why the variance is clustered.
    #[test]
    fn a_a_with_client_slowness_the_clustered_interval_holds_and_the_per_flow_one_does_not() {
        let rule = Rule::default();
        let alpha = rule.alpha;
        let (mut clustered_called, mut naive_called) = (0, 0);
        let runs = 300;
        for seed in 0..runs {
            let obs = clustered(seed, 120, 8, 0.6, 0.3, 1.0);
            let e = estimate(&obs, &all(&obs), seed, 50, &BANDS, PrimaryMetric::TimeWeighted);
            let ans = decide::clustered_answer(e.est, alpha, &rule);
            clustered_called += usize::from(matches!(ans.outcome, decide::Outcome::BBetter | decide::Outcome::BWorse));
            let mut strata = Strata::default();
            for o in &obs {
                strata.add(o, &BANDS);
            }
            let naive = decide::answer(strata.estimate(), alpha, &rule);
            naive_called += usize::from(matches!(naive.outcome, decide::Outcome::BBetter | decide::Outcome::BWorse));
        }
        let (c, n) = (clustered_called as f64 / runs as f64, naive_called as f64 / runs as f64);
        crate::output::errln!("client A/A, {runs} runs of 120 clients x 8 flows: clustered {c:.3}, per-flow {n:.3}");
        assert!(c <= 0.05, "clustered false decisions {c}");
        assert!(n > 0.05 && n > 3.0 * c.max(0.01), "per-flow false decisions {n} (clustered {c})");
    }

    /// Through the whole analysis: a client design's answer is B for whole clients, said so in
    /// the conclusion and the JSON; a planted B 30% faster is found; a flow on another arm than
    /// its client's is left out and counted; too few clients is said as such.
    #[test]
    fn the_report_answers_for_whole_clients_and_says_too_few_clients() {
        let salt = 11;
        let mut obs = clustered(salt, 200, 6, 0.3, 0.3, 0.7);
        obs[0].arm = 1 - obs[0].arm;
        obs[0].cc = ["cubic", "bbr"][obs[0].arm].to_string();
        let opts = Options { design: Design::Client { salt }, secondary: false, ..Options::default() };
        let r = build(&analyze(&obs, &opts), &everything());
        let g = &r.groups[0];
        assert_eq!(g.result.verdict, Verdict::BBetter, "{}", g.conclusion);
        assert!(
            g.conclusion
                .starts_with("BBR faster for all flows: BBR for whole clients against CUBIC for whole clients: "),
            "{}",
            g.conclusion
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["design"]["name"], "client");
        assert_eq!(v["design"]["salt"], salt);
        assert_eq!(v["groups"][0]["design"], "client");
        assert_eq!(v["groups"][0]["clients"]["mismatched"], 1);
        assert!(r.recommend.notes.iter().any(|n| n.starts_with("this rests on whole clients")), "{:?}", r.recommend);
        let text = r.render_text();
        assert!(text.contains("  design: client (seed 11): answers B for whole clients against A for whole"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        // Twelve clients, many flows each: flows enough, clients not.
        let few = clustered(salt, 12, 60, 0.3, 0.3, 1.0);
        let r = build(&analyze(&few, &opts), &everything());
        let g = &r.groups[0];
        assert_eq!(g.result.verdict, Verdict::TooFewFlows);
        assert!(g.conclusion.starts_with("too few clients for all flows: "), "{}", g.conclusion);
        assert!(g.conclusion.contains(&format!("{MIN_CLIENTS} needed in each arm")), "{}", g.conclusion);
    }

    /// An undecided client design says how many more clients would decide, not more flows: more
    /// flows of the clients it has would not narrow an interval clustered by client. K more
    /// clients is the fewest at which the clustered answer, its variance scaled C/(C+K) and
    /// its t at C+K−1 degrees of freedom, decides: at K it does, at K−1 it does not.
    #[test]
    fn an_undecided_client_design_counts_what_would_decide_in_clients() {
        let mut said = 0;
        for salt in 0..20 {
            let obs = clustered(salt, 60, 6, 0.5, 0.3, 1.1);
            let opts = Options { design: Design::Client { salt }, secondary: false, ..Options::default() };
            let a = analyze(&obs, &opts);
            let e = estimate(&obs, &(0..obs.len()).collect::<Vec<_>>(), salt, 50, &BANDS, opts.metric());
            let r = build(&a, &everything());
            let g = &r.groups[0];
            if g.result.verdict != Verdict::Inconclusive {
                continue;
            }
            assert_eq!(g.result.answer.more_flows, None, "clients decide a client design, not flows");
            let want = g.result.clients.as_ref().and_then(|c| c.more_clients).unwrap() as usize;
            let (est, clients) = e.est.unwrap();
            let alpha = 1.0 - g.result.answer.level;
            let at = |more: usize| {
                let at = Estimate { var: est.var * clients as f64 / (clients + more) as f64, ..est };
                decide::clustered_answer(Some((at, clients + more)), alpha, &opts.rule).outcome
            };
            assert_ne!(at(want), decide::Outcome::Inconclusive, "{want} more clients");
            assert_eq!(at(want - 1), decide::Outcome::Inconclusive, "{} more clients", want - 1);
            let noun = if want == 1 { "client" } else { "clients" };
            let words =
                format!("; about {} more {noun} (with as many flows each as so far) would decide", fmt_count(want));
            assert!(g.conclusion.contains(&words), "{} lacks {words}", g.conclusion);
            assert!(!g.conclusion.contains("more flows"), "{}", g.conclusion);
            said += 1;
        }
        assert!(said >= 3, "{said} undecided runs");
    }
}

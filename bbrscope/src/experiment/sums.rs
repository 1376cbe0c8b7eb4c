//! A running experiment's sufficient statistics as Prometheus series (`--metrics-listen`): per
//! arm and stratum (RTT band x response size), the flows that ran their arm, Σ ln T, Σ (ln T)²
//! and Σ T of their completion times T as the client feels them (seconds, floored as the
//! analysis floors them). Sums add across hosts and scrapes lose nothing between them, so the
//! per-connection stratified estimate and its variance of every RTT band and of all flows follow
//! from them, pooled over any set of hosts (docs/experiment-method.md, "Sums for a fleet").
//!
//! Bounded by construction: 2 arms x 5 bands x 4 sizes (x the combinations of `--prefix-list`
//! groups clients fall in, when there is a list), five series each, plus two per arm
//! (overridden flows, flows in flight), one per band and one per `--prefix-list` group (the
//! guardrail's hold) and one info series: at most 210 series per experiment without a list.
//! A switchback adds its slots ([`switchback::Tally`]): at most 240 series a round, growing with
//! the run (docs/experiment-method.md states the numbers).

use anyhow::Result;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use super::{
    Observation,
    analysis::ran_its_arm,
    decide::{FLOOR_S, PrimaryMetric, Rule},
    groups::{Bucket, PrefixList},
    guardrail::{Held, RTT_BANDS_MS, StopRule},
    record,
    request::Serve,
    schedule::Schedule,
    setup::{Design, Setup},
    switchback::{self, Carryover, Place},
};
use crate::{
    observe::pipeline::Signals,
    scrape::{FloatCounter, FloatGauge, Served},
    units::{band_edges, band_of},
};

/// What a fleet must agree on to pool the sums: the series say it beside them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    id: String,
    design: String,
    arm_a: String,
    arm_b: String,
    split_pct: String,
    metric: String,
    seed: String,
    block_s: String,
    burn_in_s: String,
    delta: String,
    alpha: String,
    /// The `--prefix-list` groups' fingerprint ([`super::groups::fingerprint`]; empty: none).
    prefix_lists: String,
}

/// An arm.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ArmLabels {
    id: String,
    arm: &'static str,
    cc: String,
}

/// A stratum of an arm, among the clients of some `--prefix-list` groups (their labels,
/// comma-separated; empty for none): a group's answer is the sum of the cells that name it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CellLabels {
    #[prometheus(flatten)]
    arm: ArmLabels,
    rtt_band: String,
    size: &'static str,
    prefix_lists: String,
}

/// A switchback's slot: a stratum of one part of a round ([`switchback::Slot`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SlotLabels {
    #[prometheus(flatten)]
    cell: CellLabels,
    round: String,
    block: &'static str,
}

/// A stratum of a guardrail's watch: the arm whose watch it is (the flow's connection was moved
/// off its status quo by that arm).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    #[prometheus(flatten)]
    cell: CellLabels,
    watched: &'static str,
}

/// The flows of an arm the guardrail counted, by where their status quo came from: the kernel's
/// per-connection reading (`connection`), else the run's (its algorithm's name, or `unknown`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CountedLabels {
    #[prometheus(flatten)]
    arm: ArmLabels,
    status_quo: String,
}

/// The guardrail's watch as sums ([`super::guardrail::GuardSums`]): what a fleet needs to judge
/// the host's rule on every host's flows together.
struct WatchSums {
    rule: StopRule,
    flows: Family<WatchLabels, Counter>,
    ln_sum: Family<WatchLabels, FloatGauge>,
    ln_squares: Family<WatchLabels, FloatCounter>,
    seconds: Family<WatchLabels, FloatCounter>,
    counted: Family<CountedLabels, Counter>,
}

/// Why a switchback left flows out, by band and `--prefix-list` groups.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeftOutLabels {
    id: String,
    reason: &'static str,
    rtt_band: String,
    prefix_lists: String,
}

/// A switchback's flows that overran their block, by band and `--prefix-list` groups.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OverranLabels {
    id: String,
    rtt_band: String,
    prefix_lists: String,
}

/// A switchback's series: the finest cut its estimates need, each a sum over flows
/// ([`switchback::Tally`]).
struct SwitchbackSums {
    schedule: Schedule,
    flows: Family<SlotLabels, Counter>,
    ln_sum: Family<SlotLabels, FloatGauge>,
    seconds: Family<SlotLabels, FloatCounter>,
    left_out: Family<LeftOutLabels, Counter>,
    overran: Family<OverranLabels, Counter>,
}

/// The experiment's run so far, as the series a scrape reads.
pub(crate) struct Sums {
    id: String,
    names: [String; 2],
    rtt_bands_ms: Vec<f64>,
    flows: Family<CellLabels, Counter>,
    ln_sum: Family<CellLabels, FloatGauge>,
    ln_squares: Family<CellLabels, FloatCounter>,
    seconds: Family<CellLabels, FloatCounter>,
    bytes: Family<CellLabels, Counter>,
    overridden: Family<ArmLabels, Counter>,
    in_flight: Family<ArmLabels, Gauge>,
    held: Family<BandLabels, Gauge>,
    lists: Vec<PrefixList>,
    held_lists: Family<ListLabels, Gauge>,
    switchback: Option<SwitchbackSums>,
    /// The guardrail's watch (none with `--no-guardrail`).
    watch: Option<WatchSums>,
}

/// A band of clients the guardrail watches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BandLabels {
    id: String,
    rtt_band: String,
}

/// A `--prefix-list` group of clients the guardrail watches, by its label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListLabels {
    id: String,
    prefix_list: String,
}

/// What the info series says of the run.
struct About<'a> {
    pub(crate) id: &'a str,
    pub(crate) names: [String; 2],
    pub(crate) split_pct: u32,
    pub(crate) design: &'a Design,
    pub(crate) metric: PrimaryMetric,
    pub(crate) rule: &'a Rule,
    pub(crate) rtt_bands_ms: &'a [f64],
    /// The `--prefix-list` groups.
    pub(crate) lists: Vec<PrefixList>,
    /// The guardrail's rule (none with `--no-guardrail`).
    pub(crate) guard: Option<StopRule>,
}

impl<'a> About<'a> {
    /// A live run's, by `id`.
    fn of(id: &'a str, setup: &'a Setup) -> Self {
        About {
            id,
            names: setup.names(&[]),
            split_pct: setup.split_pct,
            design: &setup.design,
            metric: setup.metric.unwrap_or_else(|| PrimaryMetric::default_for(&setup.design)),
            rule: &setup.rule,
            rtt_bands_ms: &RTT_BANDS_MS,
            lists: setup.prefix_lists.clone(),
            guard: setup.guardrail_pct.map(|pct| setup.stop_rule(pct)),
        }
    }
}

impl Sums {
    /// Registers the series of the run `about` in `registry`.
    fn new(registry: &mut Registry, about: &About) -> Self {
        let s = Sums {
            id: about.id.to_string(),
            names: about.names.clone(),
            rtt_bands_ms: about.rtt_bands_ms.to_vec(),
            flows: Family::default(),
            ln_sum: Family::default(),
            ln_squares: Family::default(),
            seconds: Family::default(),
            bytes: Family::default(),
            overridden: Family::default(),
            in_flight: Family::default(),
            held: Family::default(),
            lists: about.lists.clone(),
            held_lists: Family::default(),
            switchback: match about.design {
                Design::Switchback(schedule) => Some(SwitchbackSums {
                    schedule: *schedule,
                    flows: Family::default(),
                    ln_sum: Family::default(),
                    seconds: Family::default(),
                    left_out: Family::default(),
                    overran: Family::default(),
                }),
                Design::PerConnection | Design::Client { .. } => None,
            },
            watch: about.guard.clone().map(|rule| WatchSums {
                rule,
                flows: Family::default(),
                ln_sum: Family::default(),
                ln_squares: Family::default(),
                seconds: Family::default(),
                counted: Family::default(),
            }),
        };
        // Zero from the start, so that a rate or a panel has a series before the first.
        for arm in 0..2 {
            s.overridden.get_or_create(&s.arm(arm)).inc_by(0);
        }
        s.in_flight([0, 0]);
        s.hold(Held::default());
        // A watch with no flow yet is told from no watch (`--no-guardrail`) by these.
        if let Some(w) = &s.watch {
            for arm in 0..2 {
                let labels = CountedLabels { arm: s.arm(arm), status_quo: "connection".into() };
                w.counted.get_or_create(&labels).inc_by(0);
            }
        }
        registry.register(
            "bbrscope_experiment_info",
            "A running experiment: its id, design, arms, split, primary metric, seed (switchback) or salt (client), \
             its rule's delta and alpha, and its prefix lists' fingerprint",
            s.info(about),
        );
        s.register(registry);
        s
    }

    /// The info series: what a fleet must agree on to pool the sums.
    fn info(&self, about: &About) -> Family<InfoLabels, Gauge> {
        let (seed, block_s, burn_in_s) = match about.design {
            Design::PerConnection => Default::default(),
            Design::Switchback(sb) => (sb.seed.to_string(), sb.block_s.to_string(), sb.burn_in_s.to_string()),
            Design::Client { salt } => (salt.to_string(), String::new(), String::new()),
        };
        let info: Family<InfoLabels, Gauge> = Family::default();
        info.get_or_create(&InfoLabels {
            id: self.id.clone(),
            design: record::design_key(about.design).into(),
            arm_a: self.names[0].clone(),
            arm_b: self.names[1].clone(),
            split_pct: about.split_pct.to_string(),
            metric: record::metric_key(about.metric),
            seed,
            block_s,
            burn_in_s,
            delta: about.rule.delta.to_string(),
            alpha: about.rule.alpha.to_string(),
            prefix_lists: super::groups::fingerprint(&about.lists),
        })
        .set(1);
        info
    }

    /// Registers the sums' series (each a clone of the family it updates).
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "bbrscope_experiment_flows",
            "Finished flows that ran their arm, by arm, RTT band (minimum RTT) and response size",
            self.flows.clone(),
        );
        registry.register(
            "bbrscope_experiment_completion_ln_seconds",
            "Sum over those flows of ln(T / 1 s), T the completion time as the client feels it (handshake included)",
            self.ln_sum.clone(),
        );
        registry.register(
            "bbrscope_experiment_completion_ln_seconds_squared",
            "Sum over those flows of ln(T / 1 s) squared",
            self.ln_squares.clone(),
        );
        registry.register_with_unit(
            "bbrscope_experiment_completion",
            "Sum over those flows of T, the completion time as the client feels it",
            prometheus_client::registry::Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register_with_unit(
            "bbrscope_experiment_acked",
            "Sum over those flows of the bytes the clients acknowledged",
            prometheus_client::registry::Unit::Bytes,
            self.bytes.clone(),
        );
        registry.register(
            "bbrscope_experiment_overridden_flows",
            "Finished flows of an arm that did not run its algorithm (the service set its own): left out of the sums",
            self.overridden.clone(),
        );
        registry.register(
            "bbrscope_experiment_in_flight_flows",
            "Flows of an arm open now (started, not finished): not in the sums until they finish; those still \
             running at the run's end are added to the sums as censored (their elapsed time), as its report counts \
             them",
            self.in_flight.clone(),
        );
        registry.register(
            "bbrscope_experiment_guardrail_held",
            "1 while the guardrail holds a band of clients at its status quo (no arm for its new connections), else 0",
            self.held.clone(),
        );
        registry.register(
            "bbrscope_experiment_guardrail_held_prefix_list",
            "1 while the guardrail holds a --prefix-list group at its status quo (no arm for its new connections), else 0",
            self.held_lists.clone(),
        );
        if let Some(w) = &self.watch {
            w.register(registry);
        }
        if let Some(sb) = &self.switchback {
            sb.register(registry);
        }
    }

    fn arm(&self, arm: usize) -> ArmLabels {
        ArmLabels { id: self.id.clone(), arm: ["a", "b"][arm], cc: self.names[arm].clone() }
    }

    /// The groups the guardrail holds now: RTT bands (bit `i` of `held.bands`: band `i`,
    /// [`band_of`]'s numbering) and `--prefix-list` groups (bit `g` of `held.lists`).
    pub(crate) fn hold(&self, held: Held) {
        for band in 0..self.rtt_bands_ms.len() + 2 {
            let labels = BandLabels { id: self.id.clone(), rtt_band: band_key(band, &self.rtt_bands_ms) };
            self.held.get_or_create(&labels).set(i64::from(held.bands & 1 << band != 0));
        }
        for (g, list) in self.lists.iter().enumerate() {
            let labels = ListLabels { id: self.id.clone(), prefix_list: list.label.clone() };
            self.held_lists.get_or_create(&labels).set(i64::from(held.lists & 1 << g != 0));
        }
    }

    /// The flows of each arm open now (A, B).
    pub(crate) fn in_flight(&self, open: [usize; 2]) {
        for (arm, n) in open.into_iter().enumerate() {
            self.in_flight.get_or_create(&self.arm(arm)).set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// A finished flow of an arm.
    pub(crate) fn add(&self, o: &Observation) {
        if o.arm > 1 {
            return;
        }
        let arm = self.arm(o.arm);
        if !ran_its_arm(o, &self.names) {
            self.overridden.get_or_create(&arm).inc();
            return;
        }
        let band = band_of(o.min_rtt_us, &self.rtt_bands_ms);
        let groups: Vec<&str> = self.lists.iter().filter(|l| l.contains(o.peer)).map(|l| l.label.as_str()).collect();
        let cell = CellLabels {
            arm,
            rtt_band: band_key(band, &self.rtt_bands_ms),
            size: Bucket::of(o.bytes).key(),
            prefix_lists: groups.join(","),
        };
        let t = o.client_s().max(FLOOR_S);
        self.flows.get_or_create(&cell).inc();
        self.ln_sum.get_or_create(&cell).inc_by(t.ln());
        self.ln_squares.get_or_create(&cell).inc_by(t.ln() * t.ln());
        self.seconds.get_or_create(&cell).inc_by(t);
        self.bytes.get_or_create(&cell).inc_by(o.bytes);
        if let Some(w) = &self.watch {
            w.add(o, &cell, &self.names);
        }
        if let Some(sb) = &self.switchback {
            sb.add(o, cell, &self.id, &self.rtt_bands_ms);
        }
    }
}

impl WatchSums {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "bbrscope_experiment_guardrail_flows",
            "Finished flows the guardrail counted, in the watch of each arm that moved their connection off its \
             status quo (watched), by arm, RTT band, response size and --prefix-list groups",
            self.flows.clone(),
        );
        registry.register(
            "bbrscope_experiment_guardrail_completion_ln_seconds",
            "Sum over those flows of ln(T / 1 s), T the completion time as the client feels it",
            self.ln_sum.clone(),
        );
        registry.register(
            "bbrscope_experiment_guardrail_completion_ln_seconds_squared",
            "Sum over those flows of ln(T / 1 s) squared",
            self.ln_squares.clone(),
        );
        registry.register_with_unit(
            "bbrscope_experiment_guardrail_completion",
            "Sum over those flows of T",
            prometheus_client::registry::Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register(
            "bbrscope_experiment_guardrail_counted_flows",
            "Finished flows the guardrail counted, by arm and where their status quo came from (connection: the \
             kernel's reading of each; else the run's algorithm, or unknown)",
            self.counted.clone(),
        );
    }

    /// A finished flow in its stratum `cell`, where the guardrail counts it
    /// ([`StopRule::admit`]: its prefix-list groups are the cell's, the rule's lists being the
    /// run's).
    fn add(&self, o: &Observation, cell: &CellLabels, names: &[String; 2]) {
        let Some(a) = self.rule.admit(o, names) else { return };
        let status_quo = match (a.known, &self.rule.status_quo) {
            (true, _) => "connection".to_string(),
            (false, Some(sq)) => sq.clone(),
            (false, None) => "unknown".to_string(),
        };
        self.counted.get_or_create(&CountedLabels { arm: cell.arm.clone(), status_quo }).inc();
        let t = o.client_s().max(FLOOR_S);
        for watched in [0, 1].into_iter().filter(|&w| a.moves[w]) {
            let labels = WatchLabels { cell: cell.clone(), watched: ["a", "b"][watched] };
            self.flows.get_or_create(&labels).inc();
            self.ln_sum.get_or_create(&labels).inc_by(t.ln());
            self.ln_squares.get_or_create(&labels).inc_by(t.ln() * t.ln());
            self.seconds.get_or_create(&labels).inc_by(t);
        }
    }
}

impl SwitchbackSums {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "bbrscope_experiment_switchback_flows",
            "A switchback's counted flows (started past their block's burn-in, on their block's arm) by round, block \
             (a, b, mixed), arm, RTT band and response size",
            self.flows.clone(),
        );
        registry.register(
            "bbrscope_experiment_switchback_completion_ln_seconds",
            "Sum over those flows of ln(T / 1 s), T the completion time as the client feels it",
            self.ln_sum.clone(),
        );
        registry.register_with_unit(
            "bbrscope_experiment_switchback_completion",
            "Sum over those flows of T, the completion time as the client feels it",
            prometheus_client::registry::Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register(
            "bbrscope_experiment_switchback_left_out_flows",
            "A switchback's flows left out, by reason (burn_in: started in a block's burn-in; mismatched: on another \
             arm than their block's) and RTT band",
            self.left_out.clone(),
        );
        registry.register(
            "bbrscope_experiment_switchback_overran_flows",
            "Counted flows still running once the next block's counted flows began, by RTT band",
            self.overran.clone(),
        );
    }

    /// A flow that ran its arm, in its stratum `cell`: counted in its slot, or left out.
    fn add(&self, o: &Observation, cell: CellLabels, id: &str, rtt_bands_ms: &[f64]) {
        let s = &self.schedule;
        let (rtt_band, prefix_lists) = (cell.rtt_band.clone(), cell.prefix_lists.clone());
        let reason = match switchback::place(o, s) {
            Place::BurnIn => "burn_in",
            Place::Mismatched => "mismatched",
            Place::Counted(round, kind) => {
                let slot = switchback::slot(o, round, kind, rtt_bands_ms);
                let m = switchback::moments(o);
                let labels = SlotLabels { cell, round: round.to_string(), block: slot.part.keys().0 };
                self.flows.get_or_create(&labels).inc();
                self.ln_sum.get_or_create(&labels).inc_by(m.ln);
                self.seconds.get_or_create(&labels).inc_by(m.seconds);
                let k = o.start_ts().map_or(0, |ts| s.block_of(ts));
                if Carryover::overran(o, k, s) {
                    self.overran.get_or_create(&OverranLabels { id: id.to_string(), rtt_band, prefix_lists }).inc();
                }
                return;
            }
        };
        self.left_out.get_or_create(&LeftOutLabels { id: id.to_string(), reason, rtt_band, prefix_lists }).inc();
    }
}

/// `--metrics-listen`'s socket, bound before anything is attached (a port in use ends the run
/// before it starts), with the id its series carry.
pub(crate) struct Bound {
    listener: std::net::TcpListener,
    id: String,
}

/// Binds `--metrics-listen`, when asked.
pub(crate) fn bind(serve: Option<&Serve>) -> Result<Option<Bound>> {
    let Some(serve) = serve else { return Ok(None) };
    Ok(Some(Bound { listener: crate::scrape::bind(serve.listen)?, id: serve.id.clone() }))
}

/// The series of the live run `setup` served on `bound` until the [`Served`] is dropped, and the
/// sums that fill them; the address is named on stderr.
pub(crate) fn serve(bound: Option<Bound>, setup: &Setup) -> Result<Option<(Sums, Served)>> {
    let Some(Bound { listener, id }) = bound else { return Ok(None) };
    let mut registry = Registry::default();
    let sums = Sums::new(&mut registry, &About::of(&id, setup));
    let (at, served) = crate::scrape::serve(listener, registry)?;
    crate::output::errln!("bbrscope: the experiment's sums for Prometheus: http://{at}/metrics (id {id})");
    Ok(Some((sums, served)))
}

/// Keeps serving a run's last sums (its flows still running at the end, counted as censored
/// as its report counts them) until one more scrape reads them, or twice the scraper's cadence
/// (at most [`LINGER_MAX`]), or a signal: a fleet's analysis then holds what the host's own
/// report holds. Nothing to wait for when nothing has scraped twice.
pub(crate) async fn last_scrape(served: Option<&Served>, signals: &mut Signals) {
    let Some((served, wait)) = served.and_then(|s| Some((s, s.lingers(LINGER_MAX)?))) else { return };
    crate::output::errln!(
        "bbrscope: serving the run's last sums until Prometheus reads them (at most {:.0} s; Ctrl-C ends it)",
        wait.as_secs_f64().ceil()
    );
    tokio::select! {
        _ = served.linger(LINGER_MAX) => {}
        _ = signals.recv() => {}
    }
}

/// The longest a run waits after its end for its last sums to be scraped.
const LINGER_MAX: std::time::Duration = std::time::Duration::from_secs(60);

/// A band as a label value: `lt10ms`, `10_50ms`, `ge150ms`, `unknown` ([`band_of`]'s numbering).
pub(super) fn band_key(band: usize, edges_ms: &[f64]) -> String {
    let Some(edges) = band_edges(band, edges_ms) else { return "unknown".into() };
    match edges {
        (None, Some(hi)) => format!("lt{hi}ms"),
        (Some(lo), Some(hi)) => format!("{lo}_{hi}ms"),
        (Some(lo), None) => format!("ge{lo}ms"),
        (None, None) => "any".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{
        analysis::tests::{pop, synth},
        fleet,
    };

    /// The series of a synthetic run: each cell's sums are its flows', computed here from the
    /// observations; overridden flows are counted apart and left out.
    #[test]
    fn the_sums_are_each_strata_cells_flows() {
        let names = ["cubic".to_string(), "bbr".to_string()];
        let mut obs = synth(&[pop([203, 0, 113], 80.0, [1.0, 1.2], 50), pop([10, 0, 0], 2.0, [1.0, 1.0], 50)], 3);
        obs[0].cc = "reno".into();
        let mut registry = Registry::default();
        let about = About {
            id: "t1",
            names: names.clone(),
            split_pct: 50,
            design: &Design::PerConnection,
            metric: PrimaryMetric::TimeWeighted,
            rule: &Rule::default(),
            rtt_bands_ms: &[10.0, 50.0, 150.0],
            lists: super::super::groups::PrefixList::parse("mobile-a 203.0.113.0/24\nmobile-b 198.51.100.0/24")
                .unwrap(),
            guard: None,
        };
        let sums = Sums::new(&mut registry, &about);
        for o in &obs {
            sums.add(o);
        }
        let text = crate::scrape::render(&registry);
        assert!(
            text.contains("bbrscope_experiment_info{id=\"t1\",design=\"per_connection\",arm_a=\"cubic\""),
            "{text}"
        );
        let over =
            format!("bbrscope_experiment_overridden_flows_total{{id=\"t1\",arm=\"{}\",cc=", ["a", "b"][obs[0].arm]);
        assert!(text.lines().any(|l| l.starts_with(&over) && l.ends_with(" 1")), "{text}");
        // One cell, by hand: the far band's B flows under 16 KB.
        let cell: Vec<f64> = obs[1..]
            .iter()
            .filter(|o| o.arm == 1 && o.min_rtt_us == Some(80_000) && o.bytes < 16 * 1024)
            .map(Observation::client_s)
            .collect();
        // Its clients are in the first prefix-list group.
        let labels = "{id=\"t1\",arm=\"b\",cc=\"bbr\",rtt_band=\"50_150ms\",size=\"lt16k\",prefix_lists=\"mobile-a\"}";
        let value = |name: &str| -> f64 {
            let line = text
                .lines()
                .find(|l| l.starts_with(&format!("{name}{labels} ")))
                .unwrap_or_else(|| panic!("{name}: {text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        assert_eq!(value("bbrscope_experiment_flows_total"), cell.len() as f64);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
        assert!(close(value("bbrscope_experiment_completion_ln_seconds"), cell.iter().map(|t| t.ln()).sum()));
        let squares: f64 = cell.iter().map(|t| t.ln() * t.ln()).sum();
        assert!(close(value("bbrscope_experiment_completion_ln_seconds_squared_total"), squares));
        assert!(close(value("bbrscope_experiment_completion_seconds_total"), cell.iter().sum()));
        // Bounded: 2 arms x 5 bands x 4 sizes x 5 series at most, plus the arms' two, the bands',
        // the prefix lists' and the info.
        let series = text.lines().filter(|l| !l.starts_with('#')).count();
        assert!(series <= 2 * 5 * 4 * 5 + 2 * 2 + 5 + 2 + 1, "{series}");
        // Flows in flight, per arm, 0 from the start.
        let in_flight = |arm: &str, cc: &str, v: u8| {
            format!("bbrscope_experiment_in_flight_flows{{id=\"t1\",arm=\"{arm}\",cc=\"{cc}\"}} {v}")
        };
        assert!(text.contains(&in_flight("a", "cubic", 0)) && text.contains(&in_flight("b", "bbr", 0)), "{text}");
        sums.in_flight([3, 7]);
        let text = crate::scrape::render(&registry);
        assert!(text.contains(&in_flight("a", "cubic", 3)) && text.contains(&in_flight("b", "bbr", 7)), "{text}");
        // The guardrail's hold, a gauge per band and per prefix-list group, each 0 from the start.
        let list_held = |label: &str, v: u8| {
            format!("bbrscope_experiment_guardrail_held_prefix_list{{id=\"t1\",prefix_list=\"{label}\"}} {v}")
        };
        assert!(text.contains(&list_held("mobile-a", 0)) && text.contains(&list_held("mobile-b", 0)), "{text}");
        sums.hold(Held { bands: 1 << 4, lists: 1 << 1 });
        let text = crate::scrape::render(&registry);
        assert!(text.contains("bbrscope_experiment_guardrail_held{id=\"t1\",rtt_band=\"ge150ms\"} 1"), "{text}");
        assert!(text.contains("bbrscope_experiment_guardrail_held{id=\"t1\",rtt_band=\"lt10ms\"} 0"), "{text}");
        assert!(text.contains(&list_held("mobile-a", 0)) && text.contains(&list_held("mobile-b", 1)), "{text}");
    }

    /// A switchback's series: each slot's counted flows and sums are its tally's, the left-out
    /// flows are counted by reason, the info series names the schedule.
    #[test]
    fn a_switchbacks_series_are_its_tallys_slots() {
        use crate::experiment::switchback::tests::{Assign, Bottleneck, schedule, shared};
        let s = schedule(9);
        let obs = shared(4, 9, 3.0, Bottleneck { b: 1.0, beside_a: 0.0, beside_b: 0.0 }, Assign::Switchback(s));
        let mut registry = Registry::default();
        let design = Design::Switchback(s);
        let about = About {
            id: "t2",
            names: ["cubic".into(), "bbr".into()],
            split_pct: 50,
            design: &design,
            metric: PrimaryMetric::PerResponse,
            rule: &Rule::default(),
            rtt_bands_ms: &RTT_BANDS_MS,
            lists: Vec::new(),
            guard: None,
        };
        let sums = Sums::new(&mut registry, &about);
        for o in &obs {
            sums.add(o);
        }
        let text = crate::scrape::render(&registry);
        assert!(text.contains(",seed=\"9\",block_s=\"20\",burn_in_s=\"4\","), "{text}");
        let tally = switchback::tally(&obs, &(0..obs.len()).collect::<Vec<_>>(), &s, &RTT_BANDS_MS);
        assert!(tally.slots.len() > 20 && tally.burn_in > 0, "{tally:?}");
        let value = |line: String| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line} in {text}"))
                .parse()
                .unwrap()
        };
        for (slot, m) in &tally.slots {
            let (block, arm) = slot.part.keys();
            let cc = ["cubic", "bbr"][usize::from(arm == "b")];
            let labels = format!(
                "{{id=\"t2\",arm=\"{arm}\",cc=\"{cc}\",rtt_band=\"{}\",size=\"{}\",prefix_lists=\"\",round=\"{}\",block=\"{block}\"}} ",
                band_key(slot.band, &RTT_BANDS_MS),
                slot.size.key(),
                slot.round
            );
            assert_eq!(value(format!("bbrscope_experiment_switchback_flows_total{labels}")), m.n as f64);
            let ln = value(format!("bbrscope_experiment_switchback_completion_ln_seconds{labels}"));
            assert!((ln - m.ln).abs() <= 1e-9 * m.ln.abs().max(1.0), "{labels}: {ln} vs {}", m.ln);
        }
        let left: f64 = text
            .lines()
            .filter(|l| {
                l.starts_with("bbrscope_experiment_switchback_left_out_flows_total{id=\"t2\",reason=\"burn_in\"")
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(left, tally.burn_in as f64);
    }

    /// What three hosts serve of experiment `g` (arms cubic, bbr), each given every third flow
    /// of `obs`.
    fn expositions(
        obs: &[Observation],
        design: &Design,
        lists: &[PrefixList],
        guard: Option<&StopRule>,
    ) -> Vec<String> {
        (0..3).map(|h| exposition(obs.iter().skip(h).step_by(3), design, lists, guard)).collect()
    }

    /// What a host serves of experiment `g` (arms cubic, bbr) that ran `design` and saw `obs`.
    fn exposition<'a>(
        obs: impl Iterator<Item = &'a Observation>,
        design: &Design,
        lists: &[PrefixList],
        guard: Option<&StopRule>,
    ) -> String {
        let mut registry = Registry::default();
        let about = About {
            id: "g",
            names: ["cubic".into(), "bbr".into()],
            split_pct: 50,
            design,
            metric: PrimaryMetric::PerResponse,
            rule: &Rule::default(),
            rtt_bands_ms: &RTT_BANDS_MS,
            lists: lists.to_vec(),
            guard: guard.cloned(),
        };
        let sums = Sums::new(&mut registry, &about);
        obs.for_each(|o| sums.add(o));
        crate::scrape::render(&registry)
    }

    /// The fleet's look at experiment `g` served by `hosts` (their expositions), with
    /// `--by-host` `by`: the default rule and guardrail margin.
    fn fleet_look(hosts: Vec<String>, by: Option<&str>) -> fleet::Look {
        try_fleet_look(hosts, by).unwrap()
    }

    /// [`fleet_look`], its error kept.
    fn try_fleet_look(hosts: Vec<String>, by: Option<&str>) -> Result<fleet::Look> {
        let source = fleet::Source {
            url: "http://fleet".into(),
            id: "g".into(),
            hosts: None,
            lookback: std::time::Duration::from_secs(3600),
            by: by.map(str::to_string),
            headers: Vec::new(),
        };
        let same = |n: &str| n.to_string();
        fleet::judge(&prometheus_of(hosts), &same, &same, &source, (Rule::default(), None, 20.0))
    }

    /// A fleet A/A on real traffic, blocks re-drawn: the recorded A/A run
    /// (tests/fixtures/switchback-a-a.ndjson, six minutes of real connections on one algorithm)
    /// split over three hosts, two in dc `fra` and one in `ams`, each running a host-level
    /// switchback of 5 s blocks (its own order, the fleet's seed drawn anew each time) whose arms
    /// are only labels; the fleet's answer from the sums each host serves, with `--by-host dc`.
    /// Over 100 seeds: any group called different, or any command, at most 5%. The same with B's
    /// flows on `fra`'s hosts made 1.2x slower: the `fra` group finds B worse in most, `ams`
    /// (whose flows had no change) calls B better or worse in at most 2 of 50. Measured: 0 and 0
    /// of 100; found 43 of 50, `ams` 0.
    #[test]
    fn a_fleet_a_a_on_recorded_traffic_rarely_calls_and_finds_a_host_groups_harm_with_its_sign() {
        use crate::experiment::{
            analysis::Verdict,
            report::{build, tests::everything},
            schedule::{Kind, Schedule},
        };
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/switchback-a-a.ndjson");
        let recorded = record::read(std::io::BufReader::new(std::fs::File::open(path).unwrap()), true).unwrap().obs;
        let dcs = ["fra", "fra", "ams"];
        let draw = |seed: u64, slower: f64| -> fleet::Look {
            let fleet = Schedule { block_s: 5.0, burn_in_s: 1.0, seed, host: None };
            let mut rng = crate::rng::Rng::new(seed);
            let served = (0..3)
                .map(|h| {
                    let s = Schedule { host: Some(Schedule::host_salt(&format!("edge-{h}"))), ..fleet };
                    let obs: Vec<Observation> = recorded
                        .iter()
                        .skip(h)
                        .step_by(3)
                        .map(|o| {
                            let start = o.start_ts().unwrap();
                            let arm = match s.kind(s.block_of(start)) {
                                Kind::A => 0,
                                Kind::B => 1,
                                Kind::Mixed => usize::from(rng.uniform() < 0.5),
                            };
                            let factor = if arm == 1 && dcs[h] == "fra" { slower } else { 1.0 };
                            let duration_s = o.duration_s * factor;
                            let cc = ["cubic", "bbr"][arm].to_string();
                            Observation { arm, cc, duration_s, end_ts: Some(start + duration_s), ..o.clone() }
                        })
                        .collect();
                    let text = exposition(obs.iter(), &Design::Switchback(s), &[], None);
                    with_target_label(&text, "dc", dcs[h])
                })
                .collect();
            fleet_look(served, Some("dc"))
        };
        let group = |look: &fleet::Look, label: &str| {
            look.analysis.groups.iter().find(|g| g.label == label).map(|g| g.verdict).unwrap()
        };
        let (mut called, mut commands) = (0, 0);
        for seed in 0..100 {
            let look = draw(seed, 1.0);
            called += usize::from(look.analysis.groups.iter().any(|g| g.verdict.better_arm().is_some()));
            commands += usize::from(!build(&look.analysis, &everything()).recommend.commands.is_empty());
        }
        let (mut found, mut wrong) = (0, 0);
        for seed in 100..150 {
            let look = draw(seed, 1.2);
            found += usize::from(group(&look, "hosts dc=\"fra\"") == Verdict::ABetter);
            wrong += usize::from(group(&look, "hosts dc=\"ams\"").better_arm().is_some());
        }
        let said = format!(
            "fleet A/A on recorded traffic: {called}/100 called, {commands}/100 commands; fra's B 1.2x slower: found \
             {found}/50, ams called {wrong}/50"
        );
        crate::output::errln!("{said}");
        assert!(called <= 5 && commands <= 5 && found >= 30 && wrong <= 2, "{said}");
    }

    /// Hosts whose `--prefix-list` groups differ (one host's "mobile" another range) would pool
    /// clients of different groups under one label: the fleet refuses them as bad input, naming
    /// each one's fingerprint. The same lists pool.
    #[test]
    fn hosts_with_other_prefix_lists_are_not_pooled() {
        let obs = synth(&[pop([203, 0, 113], 80.0, [1.0, 1.0], 100)], 3);
        let mine = PrefixList::parse("mobile 203.0.113.0/24").unwrap();
        let other = PrefixList::parse("mobile 198.51.100.0/24").unwrap();
        let serve = |lists: &[PrefixList]| exposition(obs.iter(), &Design::PerConnection, lists, None);
        let err = try_fleet_look(vec![serve(&mine), serve(&other)], None).err().unwrap();
        let said = err.to_string();
        assert!(err.downcast_ref::<crate::error::UsageError>().is_some(), "{said}");
        let (a, b) = (super::super::groups::fingerprint(&mine), super::super::groups::fingerprint(&other));
        assert!(a != b && said.contains(&a) && said.contains(&b), "{said}");
        assert!(said.contains("disagree on its design, arms, schedule or prefix lists"), "{said}");
        assert_eq!(try_fleet_look(vec![serve(&mine), serve(&mine)], None).unwrap().hosts.all, 2);
    }

    /// A host-level switchback on three hosts, each its own uplink and its own order of the
    /// rounds: the fleet's answer from the sums each host serves is the analysis of the three
    /// hosts' flows pooled (each placed in its own host's blocks, as pooled recordings are),
    /// every group's verdict, flows, estimate and interval ends to 1e-9, and it names the design.
    /// The three orders differ, and a pool that placed every flow in one schedule would not give
    /// that answer.
    #[test]
    fn a_host_level_switchbacks_fleet_answer_is_its_hosts_flows_pooled() {
        use crate::experiment::{
            analysis::{Options, analyze, tests::assert_same_answer},
            schedule::Schedule,
            switchback::tests::{Assign, Bottleneck, schedule, shared},
        };
        let link = Bottleneck { b: 0.8, beside_a: 0.3, beside_b: 0.0 };
        let fleet = schedule(17);
        let (mut pooled, mut served) = (Vec::new(), Vec::new());
        for h in 0..3 {
            let s = Schedule { host: Some(Schedule::host_salt(&format!("edge-{h}"))), ..fleet };
            let obs = shared(90 + h, 12, 3.0, link, Assign::Switchback(s));
            served.push(exposition(obs.iter(), &Design::Switchback(s), &[], None));
            pooled.extend(obs.into_iter().map(|o| Observation { host: s.host, ..o }));
        }
        let info = served[0].lines().find(|l| l.starts_with("bbrscope_experiment_info{")).unwrap().to_string();
        assert!(info.contains("design=\"host_switchback\"") && info.contains("seed=\"17\""), "{info}");
        let look = fleet_look(served, None);
        let design = Design::Switchback(Schedule { host: Some(0), ..fleet });
        assert_eq!(look.analysis.design, design);
        let opts = Options {
            arms: Some(["cubic".into(), "bbr".into()]),
            secondary: false,
            design,
            metric: Some(PrimaryMetric::PerResponse),
            ..Options::default()
        };
        let want = analyze(&pooled, &opts);
        let got = &look.analysis.groups;
        assert!(got.len() >= 2, "{got:#?}");
        for g in got {
            let w = want.groups.iter().find(|w| w.label == g.label).unwrap();
            assert_same_answer(g, w);
            assert_eq!((g.design, w.design), (Some("host_switchback"), Some("host_switchback")), "{}", g.label);
            let (sg, sw) = (g.switchback.as_ref().unwrap(), w.switchback.as_ref().unwrap());
            assert_eq!((sg.rounds, sg.left_out), (sw.rounds, sw.left_out), "{}", g.label);
        }
        // Placed in one schedule (the fleet's seed alone), the same flows answer otherwise.
        let unsalted: Vec<Observation> = pooled.iter().map(|o| Observation { host: None, ..o.clone() }).collect();
        let wrong = analyze(&unsalted, &Options { design: Design::Switchback(fleet), ..opts });
        assert_ne!(wrong.groups[0].switchback.as_ref().unwrap().left_out, got[0].switchback.as_ref().unwrap().left_out);
    }

    /// What a Prometheus scraping `hosts` (their expositions) answers to `OP by (LABELS) (NAME)`
    /// or `OP(NAME)` (`sum`, `max`, `count`): each series' value aggregated by those labels (an
    /// empty label value is no label, as Prometheus has it).
    fn prometheus_of(hosts: Vec<String>) -> impl Fn(&str) -> Result<fleet::Series> {
        move |promql: &str| {
            let (op, by, name) = match promql.split_once(" by (") {
                Some((op, rest)) => {
                    let (by, name) = rest.split_once(") (").unwrap();
                    (op, by.split(", ").collect::<Vec<_>>(), name.trim_end_matches(')'))
                }
                None => {
                    let (op, name) = promql.split_once('(').unwrap();
                    (op, Vec::new(), name.trim_end_matches(')'))
                }
            };
            let mut out: std::collections::BTreeMap<std::collections::BTreeMap<String, String>, f64> =
                std::collections::BTreeMap::new();
            for line in hosts.iter().flat_map(|h| h.lines()).filter(|l| !l.starts_with('#')) {
                let (series, value) = line.rsplit_once(' ').unwrap();
                let (series_name, labels) = series.split_once('{').unwrap_or((series, "}"));
                if series_name != name {
                    continue;
                }
                let mut l = std::collections::BTreeMap::new();
                for pair in labels.trim_end_matches('}').split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").unwrap();
                    let v = v.trim_end_matches('"');
                    if by.contains(&k) && !v.is_empty() {
                        l.insert(k.to_string(), v.to_string());
                    }
                }
                let v: f64 = value.parse().unwrap();
                let e = out.entry(l).or_insert(if op == "max" { f64::MIN } else { 0.0 });
                *e = match op {
                    "max" => e.max(v),
                    "count" => *e + 1.0,
                    _ => *e + v,
                };
            }
            Ok(out.into_iter().collect())
        }
    }

    /// The guardrail's watch served by each host and added across them judges as a host's own
    /// guardrail judges all the fleet's flows: the same decision (stop, groups sent back, their
    /// numbers to 1e-9, the words) for a group the arm harms, everyone harmed, an A/A, both arms
    /// watched, and a switchback's mixed blocks; flows whose status quo the kernel read and
    /// flows that had the run's.
    #[test]
    fn a_fleets_guardrail_on_its_hosts_sums_is_the_rule_on_all_their_flows() {
        use crate::experiment::{
            guardrail::{GuardDecision, StopRule, guardrail},
            switchback::tests::{Assign, Bottleneck, schedule, shared},
        };
        let names = ["cubic".to_string(), "bbr".to_string()];
        let lists =
            super::super::groups::PrefixList::parse("mobile-a 203.0.113.0/24\nmobile-b 198.51.100.0/24").unwrap();
        let three = |harm: [f64; 3], seed| {
            let pops = [
                pop([203, 0, 113], 80.0, [1.0, harm[0]], 300),
                pop([198, 51, 100], 80.0, [1.0, harm[1]], 300),
                pop([10, 0, 0], 2.0, [1.0, harm[2]], 300),
            ];
            // Every other connection's status quo read by the kernel (cubic), the others the run's.
            synth(&pops, seed)
                .into_iter()
                .enumerate()
                .map(|(i, o)| Observation { status_quo: (i % 2 == 0).then_some([true, false]), ..o })
                .collect::<Vec<_>>()
        };
        let sq = |sq: Option<&str>| StopRule {
            status_quo: sq.map(str::to_string),
            prefix_lists: lists.clone(),
            ..StopRule::default()
        };
        let s = schedule(9);
        let mixed = shared(4, 12, 3.0, Bottleneck { b: 1.6, beside_a: 0.0, beside_b: 0.0 }, Assign::Switchback(s));
        let cases: Vec<(&str, Vec<Observation>, StopRule, Design)> = vec![
            ("one group harmed", three([1.5, 1.0, 1.0], 3), sq(Some("cubic")), Design::PerConnection),
            ("everyone harmed", three([1.6, 1.6, 1.6], 4), sq(Some("cubic")), Design::PerConnection),
            ("A/A", three([1.0, 1.0, 1.0], 5), sq(Some("cubic")), Design::PerConnection),
            ("both arms watched", three([0.5, 1.0, 1.0], 6), sq(None), Design::PerConnection),
            ("switchback", mixed, StopRule { switchback: Some(s), ..sq(Some("cubic")) }, Design::Switchback(s)),
        ];
        let mut decided = Vec::new();
        for (case, obs, rule, design) in cases {
            let hosts = expositions(&obs, &design, &lists, Some(&rule));
            let fleet_rule = StopRule { margin_pct: rule.margin_pct, alpha: rule.alpha, ..StopRule::default() };
            let labels: Vec<String> = lists.iter().map(|l| l.label.clone()).collect();
            let fleet =
                fleet::guardrail(&prometheus_of(hosts), &|n: &str| n.to_string(), names.clone(), fleet_rule, &labels)
                    .unwrap()
                    .unwrap();
            let all = guardrail(&obs, &rule, &names, Held::default());
            let close = |a: &[f64; 3], b: &[f64; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-9);
            // The fleet's words where a host's say a group went back: it only names them.
            let as_a_fleet = |host: &str| {
                host.replace("sends back the client groups", "would send back the client groups")
                    .replace("(and stops the run only", "(and stop the run only")
                    .replace("the guardrail sends back", "the guardrail would send back")
                    .replace("groups not sent back", "groups it would not send back")
                    .replace("sent back to the status quo", "would go back to the status quo")
                    .replace("went back to its status quo", "would go back to its status quo")
            };
            let said = |d: &GuardDecision| {
                std::iter::once(d.reason.clone())
                    .chain(d.switched_back.iter().map(|b| b.reason.clone()))
                    .collect::<Vec<_>>()
            };
            for words in said(&fleet) {
                assert!(!["sent back", "sends back", "went back"].iter().any(|w| words.contains(w)), "{case}: {words}");
            }
            let same = |a: &GuardDecision, b: &GuardDecision| {
                (a.stop, &a.group, a.worse_arm, &a.reason) == (b.stop, &b.group, b.worse_arm, &as_a_fleet(&b.reason))
                    && a.worse_pct.zip(b.worse_pct).is_none_or(|(x, y)| close(&x, &y))
                    && a.switched_back.len() == b.switched_back.len()
                    && a.switched_back.iter().zip(&b.switched_back).all(|(x, y)| {
                        (x.band, x.list, &x.group, x.worse_arm, &x.reason)
                            == (y.band, y.list, &y.group, y.worse_arm, &as_a_fleet(&y.reason))
                            && close(&x.worse_pct, &y.worse_pct)
                    })
            };
            assert!(same(&fleet, &all), "{case}:\nfleet {fleet:#?}\nall flows {all:#?}");
            decided.push((case, fleet.stop, fleet.switched_back.len()));
        }
        // The scenarios are what they say: a group sent back, a stop, nothing, and the rest.
        assert_eq!(decided[0], ("one group harmed", false, 1), "{decided:?}");
        assert!(decided[1].1, "{decided:?}");
        assert_eq!(decided[2], ("A/A", false, 0), "{decided:?}");
        assert_eq!(decided[3], ("both arms watched", false, 1), "{decided:?}");
        assert!(decided[4].1, "{decided:?}");
    }

    /// A fleet's `--prefix-list` groups (two, overlapping) are answered from its hosts' sums as
    /// a host's analysis of all the fleet's flows answers them, and so are all flows and each
    /// band: verdict, flows per arm, estimate and interval ends to 1e-9, for a per-connection A/B
    /// (B slower for the far clients) and a switchback on a shared bottleneck.
    #[test]
    fn a_fleets_prefix_list_groups_are_answered_as_the_analysis_of_all_their_flows() {
        use crate::experiment::{
            analysis::{Options, analyze, tests::assert_same_answer},
            groups::GroupKind,
            switchback::tests::{Assign, Bottleneck, schedule, shared},
        };
        let names = ["cubic".to_string(), "bbr".to_string()];
        let lists = PrefixList::parse("far 203.0.113.0/24\nmobile 198.51.100.0/24 203.0.113.128/25").unwrap();
        let s = schedule(3);
        let ab = synth(&[pop([203, 0, 113], 80.0, [1.0, 1.5], 200), pop([198, 51, 100], 30.0, [1.0, 1.0], 200)], 8);
        let link = Bottleneck { b: 0.8, beside_a: 0.5, beside_b: 0.0 };
        let cases =
            [(ab, Design::PerConnection), (shared(41, 12, 4.0, link, Assign::Switchback(s)), Design::Switchback(s))];
        for (obs, design) in cases {
            let look = fleet_look(expositions(&obs, &design, &lists, None), None);
            let opts = Options {
                arms: Some(names.clone()),
                secondary: false,
                design,
                metric: Some(PrimaryMetric::PerResponse),
                prefix_lists: lists.clone(),
                ..Options::default()
            };
            let want = analyze(&obs, &opts);
            let judged: Vec<_> = want
                .groups
                .iter()
                .filter(|g| matches!(g.kind, GroupKind::All | GroupKind::Rtt | GroupKind::List))
                .collect();
            let got = &look.analysis.groups;
            assert_eq!(got.iter().filter(|g| g.kind == GroupKind::List).count(), 2, "{design:?}: {got:#?}");
            assert_eq!(got.len(), judged.len(), "{design:?}");
            for (g, w) in got.iter().zip(judged) {
                assert_same_answer(g, w);
            }
        }
    }

    /// A host's exposition as Prometheus stores it: each series with the target's label `k="v"`.
    fn with_target_label(text: &str, k: &str, v: &str) -> String {
        text.lines()
            .map(|l| match l.split_once('{') {
                _ if l.starts_with('#') => l.to_string(),
                Some((name, rest)) => format!("{name}{{{k}=\"{v}\",{rest}"),
                None => l.replacen(' ', &format!("{{{k}=\"{v}\"}} "), 1),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `--by-host dc`: each group of hosts is answered from its hosts' sums alone (estimate and
    /// flows of the analysis of its flows), at the level a host keeps for its destination
    /// prefixes, split as it splits it (α/2·6/π² for the first, a quarter of that for the
    /// second), and the fleet's own groups keep their levels and answers. B 1.5x slower on one
    /// group's hosts: that group, and only it, finds A better.
    #[test]
    fn a_fleets_host_groups_are_each_answered_from_their_hosts_sums() {
        use crate::experiment::{
            analysis::{Options, analyze},
            groups::GroupKind,
        };
        let hosts: Vec<(Vec<Observation>, &str)> = (0..4u8)
            .map(|h| {
                let (dc, b) = if h < 2 { ("fra", 1.5) } else { ("ams", 1.0) };
                (
                    synth(
                        &[pop([203, 0, h], 80.0, [1.0, b], 150), pop([10, 0, h], 5.0, [1.0, b], 150)],
                        60 + u64::from(h),
                    ),
                    dc,
                )
            })
            .collect();
        let served: Vec<String> = hosts
            .iter()
            .map(|(obs, dc)| {
                let text = expositions(obs, &Design::PerConnection, &[], None).concat();
                with_target_label(&text, "dc", dc)
            })
            .collect();
        let look = fleet_look(served, Some("dc"));
        let opts = Options {
            arms: Some(["cubic".into(), "bbr".into()]),
            secondary: false,
            metric: Some(PrimaryMetric::PerResponse),
            ..Options::default()
        };
        let all_of = |dc: Option<&str>| -> Vec<Observation> {
            hosts.iter().filter(|(_, d)| dc.is_none_or(|x| x == *d)).flat_map(|(o, _)| o.clone()).collect()
        };
        let got = &look.analysis.groups;
        let share = Rule::default().alpha / 2.0 * 6.0 / (std::f64::consts::PI * std::f64::consts::PI);
        for (j, dc) in ["ams", "fra"].into_iter().enumerate() {
            let g = got.iter().find(|g| g.label == format!("hosts dc=\"{dc}\"")).unwrap_or_else(|| panic!("{got:#?}"));
            assert_eq!(g.kind, GroupKind::Hosts);
            let w = &analyze(&all_of(Some(dc)), &opts).groups[0];
            assert_eq!(g.arms, w.arms, "{dc}");
            let (x, y) = (g.answer.effect_pct.unwrap(), w.answer.effect_pct.unwrap());
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{dc}: {x} vs {y}");
            let level = 1.0 - share / ((j + 1) * (j + 1)) as f64;
            assert!((g.answer.level - level).abs() < 1e-12, "{dc}: level {} vs {level}", g.answer.level);
            assert_eq!(g.verdict.better_arm() == Some(0), dc == "fra", "{dc}: {:?}", g.verdict);
        }
        // The fleet's own groups: the analysis of all the flows, at their own levels.
        let want = analyze(&all_of(None), &opts);
        for g in got.iter().filter(|g| matches!(g.kind, GroupKind::All | GroupKind::Rtt)) {
            let w = want.groups.iter().find(|w| w.label == g.label).unwrap();
            assert_eq!((g.verdict, g.arms, g.answer.level), (w.verdict, w.arms, w.answer.level), "{}", g.label);
            let (x, y) = (g.answer.low_pct.unwrap(), w.answer.low_pct.unwrap());
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "{}: {x} vs {y}", g.label);
        }
    }

    #[test]
    fn bands_have_label_values_a_query_can_name() {
        let edges = [10.0, 50.0, 150.0];
        let keys: Vec<String> = (0..5).map(|b| band_key(b, &edges)).collect();
        assert_eq!(keys, ["unknown", "lt10ms", "10_50ms", "50_150ms", "ge150ms"]);
    }
}

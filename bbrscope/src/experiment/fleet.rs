//! `--analyze-prometheus URL --id NAME`: one experiment's answer across every host whose sums a
//! Prometheus holds (`--metrics-listen` on each host, [`super::sums`]). The sums are added per arm
//! and stratum by Prometheus itself (`sum by`), then judged by [`analysis::of_sums`] with the
//! estimate, α and rule of a single host's `--analyze`; a switchback's per slot (round, block,
//! arm, stratum) into the [`Tally`] a host's own analysis builds from its flows
//! (docs/experiment-method.md, "Sums for a fleet").
//!
//! Read through Prometheus's HTTP API (`/api/v1/query`, an instant query: the hosts serving the
//! experiment now), over plain HTTP/1.0: a URL of a Prometheus, Thanos Query or Mimir's Prometheus
//! API, `http://` only.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream, ToSocketAddrs as _},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};
use serde_json::Value;

use super::{
    analysis::{self, Analysis, CellTotals, Options, Pool, Pools, Verdict},
    decide::{CellSums, Key, PrimaryMetric, Rule},
    groups::Bucket,
    groups::PrefixList,
    guardrail::{GuardDecision, GuardSums, Held, RTT_BANDS_MS, StopRule, Watch},
    record,
    report::Report,
    schedule::Schedule,
    setup::Design,
    sums::band_key,
    switchback::{Carryover, Part, Slot, Tally},
};
use crate::{
    error::usage,
    scrape::{FloatGauge, Served},
};

/// Where to read, and which experiment.
#[derive(Debug)]
pub(crate) struct Source {
    /// `http://HOST:PORT[/PREFIX]`.
    pub(crate) url: String,
    pub(crate) id: String,
    /// More label matchers for the hosts (`job="edge"`), or none.
    pub(crate) hosts: Option<String>,
    /// A host whose experiment ended (its guardrail stopped it, its time was up, it was ended)
    /// within this long counts with its last sums (`--lookback`).
    pub(crate) lookback: Duration,
    /// `--by-host LABEL`: a group of hosts per value of this label of their series, answered
    /// beside the fleet's.
    pub(crate) by: Option<String>,
    /// Header lines every query sends (`--prometheus-header`: a tenant, a token), checked.
    pub(crate) headers: Vec<String>,
}

/// How a look splits the sums it reads: by the clients' prefix-list groups (`lists`, the
/// labels in their order) and, with `--by-host`, by a label of the hosts' series.
struct Split<'a> {
    lists: &'a [String],
    by: Option<&'a str>,
}

/// A share of the sums: the clients' prefix-list groups (bits) and the hosts' label value.
type Share = (u128, String);

impl Split<'_> {
    /// The labels a query keeps beside its own: `prefix_lists`, and the host label.
    fn labels(&self) -> String {
        self.by.map_or_else(|| "prefix_lists".to_string(), |by| format!("prefix_lists, {by}"))
    }

    /// The share a series belongs to.
    fn part(&self, l: &Labels) -> Share {
        (mask_of(l, self.lists), self.by.and_then(|by| l.get(by)).cloned().unwrap_or_default())
    }
}

/// The hosts an answer pooled: all of them, and those whose experiment has ended (their last
/// sums, within the lookback); and the flows per arm running now on those still serving it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hosts {
    pub(crate) all: usize,
    pub(crate) ended: usize,
    /// `bbrscope_experiment_in_flight_flows` added across the hosts serving it: flows a host adds
    /// to its sums only once they finish, so the answer does not hold them yet (a slow arm's
    /// slowest among them), and the report says how many.
    pub(crate) running: [usize; 2],
}

/// One look at the fleet: the answer, the hosts it pooled, and the guardrail's decision on every
/// host's flows together (none when no host watches one: `--no-guardrail`).
pub(crate) struct Look {
    pub(crate) analysis: Analysis,
    pub(crate) hosts: Hosts,
    pub(crate) guard: Option<GuardDecision>,
}

/// A series' labels.
type Labels = BTreeMap<String, String>;

/// An instant query's answer: each series' labels and value.
pub(super) type Series = Vec<(Labels, f64)>;

/// Connecting, and each read, give up after this.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A query's answer larger than this is not the few hundred series asked for.
const MAX_BODY: u64 = 16 << 20;

/// The experiment `source` names, across its hosts, judged with `rule` (and `metric`, else the
/// one the hosts declared), its guardrail with margin `guardrail_pct`. Each host's last sums
/// within the lookback: a host whose experiment ended (Prometheus marks its series stale as the
/// scrapes fail) still counts with the flows it had, so a guardrail's stop on one host does not
/// take that host's evidence out of the pool.
pub(crate) fn analyze(source: &Source, rule: Rule, metric: Option<PrimaryMetric>, guardrail_pct: f64) -> Result<Look> {
    let sel = match &source.hosts {
        Some(h) => format!("{{id=\"{}\",{h}}}", source.id),
        None => format!("{{id=\"{}\"}}", source.id),
    };
    let last = |name: &str| format!("last_over_time({name}{sel}[{}s])", source.lookback.as_secs().max(1));
    // Every query at one evaluation time: a scrape landing between two queries would otherwise
    // give one cell's n from one scrape and its Σ ln T from the next.
    let at = crate::observe::clock::unix_now();
    let query = |promql: &str| query(source, promql, at);
    let now = |name: &str| format!("{name}{sel}");
    judge(&query, &last, &now, source, (rule, metric, guardrail_pct))
}

/// [`analyze`] through `query`, each series read by `last` (its last value within the lookback)
/// or `now` (its value now, from the hosts serving it).
pub(super) fn judge(
    query: &dyn Fn(&str) -> Result<Series>,
    last: &dyn Fn(&str) -> String,
    now: &dyn Fn(&str) -> String,
    source: &Source,
    (rule, metric, guardrail_pct): (Rule, Option<PrimaryMetric>, f64),
) -> Result<Look> {
    let info = query(&format!(
        "count by (design, arm_a, arm_b, split_pct, metric, seed, block_s, burn_in_s, prefix_lists) ({})",
        last("bbrscope_experiment_info")
    ))?;
    let [(labels, hosts)] = &info[..] else {
        if info.is_empty() {
            bail!(
                "no host serves experiment {} in the Prometheus at {}, nor did in the last {} (is it scraping each \
                 host's --metrics-listen?)",
                source.id,
                source.url,
                super::format::fmt_span(source.lookback.as_secs_f64())
            );
        }
        let seen: Vec<String> = info.iter().map(|(l, _)| format!("{l:?}")).collect();
        usage!(
            "the hosts of experiment {} disagree on its design, arms, schedule or prefix lists: {}; start every host \
             with the same --arms, --split, --design, --seed and --prefix-list (fleet-experiment.yml does), or give \
             each run its own --id",
            source.id,
            seen.join("; ")
        );
    };
    let serving = query(&format!("count({})", now("bbrscope_experiment_info")))?.first().map_or(0.0, |(_, v)| *v);
    let mut hosts = Hosts { all: *hosts as usize, ended: (*hosts - serving).max(0.0) as usize, running: [0, 0] };
    let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
    let design = design_of(&label)?;
    let declared = record::metric_of(&label("metric"));
    let lists = list_labels(query, last)?;
    let opts = Options {
        arms: Some([label("arm_a"), label("arm_b")]),
        split_b: label("split_pct").parse::<f64>().unwrap_or(50.0) / 100.0,
        rule,
        metric: metric.or(declared),
        secondary: false,
        design,
        prefix_lists: lists.iter().cloned().map(PrefixList::named).collect(),
        ..Options::default()
    };
    let split = Split { lists: &lists, by: source.by.as_deref() };
    let mut parts: BTreeMap<Share, Pool> = BTreeMap::new();
    for (part, cells) in cells(query, last, &split)? {
        parts.entry(part).or_default().cells = cells;
    }
    if let Design::Switchback(_) = design {
        for (part, tallies) in switchback_tallies(query, last, &split)? {
            parts.entry(part).or_default().tallies = tallies;
        }
    }
    let pool_of =
        |keep: &dyn Fn(&Share) -> bool| merged(parts.iter().filter(|(p, _)| keep(p)).map(|(_, p)| p), &design);
    let values: std::collections::BTreeSet<&String> = parts.keys().map(|(_, v)| v).collect();
    let pools = Pools {
        all: pool_of(&|_| true),
        lists: (0..lists.len()).map(|g| pool_of(&|(m, _)| m & 1 << g != 0)).collect(),
        hosts: match &source.by {
            Some(by) => {
                values.into_iter().map(|v| (format!("hosts {by}=\"{v}\""), pool_of(&|(_, x)| x == v))).collect()
            }
            None => Vec::new(),
        },
    };
    let overridden = per_arm(query(&format!("sum by (arm) ({})", last("bbrscope_experiment_overridden_flows_total")))?);
    // Running now: the hosts still serving it (an ended host's last gauge is no flow of now).
    hosts.running = per_arm(query(&format!("sum by (arm) ({})", now("bbrscope_experiment_in_flight_flows")))?);
    let names = [label("arm_a"), label("arm_b")];
    let stop_rule = StopRule { margin_pct: guardrail_pct, alpha: rule.alpha, ..StopRule::default() };
    let guard = guardrail(query, last, names, stop_rule, &lists)?;
    Ok(Look { analysis: analysis::of_sums(&pools, overridden, &opts), hosts, guard })
}

/// The labels of the hosts' `--prefix-list` groups (each host serves its hold per group), in
/// their order: a fleet's groups are judged in it (a host judges its file's order, which gives
/// the same answers; its guardrail's decisions differ only when groups overlap and more than one
/// trips at one look).
fn list_labels(query: &dyn Fn(&str) -> Result<Series>, last: &dyn Fn(&str) -> String) -> Result<Vec<String>> {
    let lists: std::collections::BTreeSet<String> =
        query(&format!("max by (prefix_list) ({})", last("bbrscope_experiment_guardrail_held_prefix_list")))?
            .into_iter()
            .filter_map(|(l, _)| l.get("prefix_list").cloned())
            .collect();
    Ok(lists.into_iter().collect())
}

/// A series' `prefix_lists` label as the bits of the groups it names (`lists`' places).
fn mask_of(l: &Labels, lists: &[String]) -> u128 {
    l.get("prefix_lists").map_or(0, |groups| {
        groups.split(',').filter_map(|g| lists.iter().position(|x| x == g)).fold(0, |m, i| m | 1 << i)
    })
}

/// The sums of disjoint sets of clients as one.
fn merged<'a>(pools: impl Iterator<Item = &'a Pool>, design: &Design) -> Pool {
    let mut out = Pool::default();
    let mut tallies: BTreeMap<usize, Vec<&Tally>> = BTreeMap::new();
    for p in pools {
        for (key, arms) in &p.cells {
            for (into, c) in out.cells.entry(*key).or_default().iter_mut().zip(arms) {
                into.sums.n += c.sums.n;
                into.sums.ln += c.sums.ln;
                into.sums.ln_squares += c.sums.ln_squares;
                into.sums.seconds += c.sums.seconds;
                into.bytes += c.bytes;
            }
        }
        for (band, t) in &p.tallies {
            tallies.entry(*band).or_default().push(t);
        }
    }
    if let Design::Switchback(_) = design {
        out.tallies = tallies.into_iter().map(|(band, parts)| (band, Tally::sum(parts))).collect();
    }
    out
}

/// The guardrail's rule on every host's watch added together: the decision a host's own
/// guardrail would take on the fleet's flows (no group is held: a fleet has no way to send a band
/// back on its hosts, each host's own guardrail does that). `None` when no host watches one.
pub(super) fn guardrail(
    query: &dyn Fn(&str) -> Result<Series>,
    last: &dyn Fn(&str) -> String,
    names: [String; 2],
    rule: StopRule,
    lists: &[String],
) -> Result<Option<GuardDecision>> {
    let counted =
        query(&format!("sum by (arm, status_quo) ({})", last("bbrscope_experiment_guardrail_counted_flows_total")))?;
    if counted.is_empty() {
        return Ok(None);
    }
    let mut sums = GuardSums { per_connection: true, ..GuardSums::default() };
    let run_status_quo = counted_flows(&counted, &mut sums);
    let by = "watched, arm, rtt_band, size, prefix_lists";
    for (name, l, v) in sums_by(query, last, "bbrscope_experiment_guardrail_", by, &CELL_SUMS)? {
        let Some((key, arm)) = cell_of(&l) else { continue };
        let Some(watched) = l.get("watched").and_then(|w| arm_key(w)) else { continue };
        let mask = mask_of(&l, lists);
        set_sum(&mut sums.cells.entry((watched, key.0, mask)).or_default().entry(key).or_default()[arm], name, v);
    }
    let rule = StopRule {
        status_quo: run_status_quo,
        prefix_lists: lists.iter().cloned().map(PrefixList::named).collect(),
        ..rule
    };
    Ok(Some(Watch::of_sums(names, rule, Held::default(), &sums).check()))
}

/// Each of the five sums of every cell, added across hosts by Prometheus (one query per sum:
/// last_over_time drops the series' name).
fn cells(
    query: &dyn Fn(&str) -> Result<Series>,
    last: &dyn Fn(&str) -> String,
    split: &Split,
) -> Result<BTreeMap<Share, BTreeMap<Key, [CellTotals; 2]>>> {
    let mut cells: BTreeMap<Share, BTreeMap<Key, [CellTotals; 2]>> = BTreeMap::new();
    let names = [&CELL_SUMS[..], &["acked_bytes_total"]].concat();
    let by = format!("arm, rtt_band, size, {}", split.labels());
    for (name, l, v) in sums_by(query, last, "bbrscope_experiment_", &by, &names)? {
        let Some((key, arm)) = cell_of(&l) else { continue };
        let c = &mut cells.entry(split.part(&l)).or_default().entry(key).or_default()[arm];
        if !set_sum(&mut c.sums, name, v) {
            c.bytes = v as u64;
        }
    }
    Ok(cells)
}

/// The series of a stratum's four sums, less their prefix.
const CELL_SUMS: [&str; 4] =
    ["flows_total", "completion_ln_seconds", "completion_ln_seconds_squared_total", "completion_seconds_total"];

/// Sets the sum `name` (a series' name less its prefix) of `c` to `v`; false for another name.
fn set_sum(c: &mut CellSums, name: &str, v: f64) -> bool {
    match name {
        "flows_total" => c.n = v as usize,
        "completion_ln_seconds" => c.ln = v,
        "completion_ln_seconds_squared_total" => c.ln_squares = v,
        "completion_seconds_total" => c.seconds = v,
        _ => return false,
    }
    true
}

/// The series `PREFIX+NAME` for each of `names`, each added across hosts by Prometheus `by` the
/// labels given (one query per series: last_over_time drops the series' name): every answer's
/// series, with the name it was read as.
fn sums_by<'n>(
    query: &dyn Fn(&str) -> Result<Series>,
    last: &dyn Fn(&str) -> String,
    prefix: &str,
    by: &str,
    names: &[&'n str],
) -> Result<Vec<(&'n str, Labels, f64)>> {
    let mut out = Vec::new();
    for &name in names {
        let series = query(&format!("sum by ({by}) ({})", last(&format!("{prefix}{name}"))))?;
        out.extend(series.into_iter().map(|(l, v)| (name, l, v)));
    }
    Ok(out)
}

/// The design the hosts' info series declare: a per-connection A/B, or a switchback with its
/// schedule (every host runs the same blocks: the seed and lengths are in the info's labels; a
/// host-level switchback's hosts each their own order of the same rounds, the fleet's design
/// [`Design::of_fleet`]: the fleet adds rounds, it never places a flow in a host's blocks).
fn design_of(label: &dyn Fn(&str) -> String) -> Result<Design> {
    let name = label("design");
    let schedule = || -> Option<Schedule> {
        Some(Schedule {
            block_s: label("block_s").parse().ok()?,
            burn_in_s: label("burn_in_s").parse().ok()?,
            seed: label("seed").parse().ok()?,
            host: (name == record::HOST_SWITCHBACK).then_some(0),
        })
    };
    if name == record::CLIENT {
        usage!(
            "this experiment is a client design: the fleet analysis answers per-connection and switchback designs \
             (a client design's variance needs its clients, which are not in the sums)"
        );
    }
    let sb = [record::SWITCHBACK, record::HOST_SWITCHBACK].contains(&name.as_str()).then(schedule).flatten();
    match record::design(Some(&name), sb, None) {
        Some(d) => Ok(d),
        None => bail!("the hosts' info series name a design that cannot be read: {name:?}"),
    }
}

/// A switchback's tallies per RTT band, added across the hosts (every host's blocks are the same
/// blocks: rounds add as they are).
fn switchback_tallies(
    query: &dyn Fn(&str) -> Result<Series>,
    last: &dyn Fn(&str) -> String,
    split: &Split,
) -> Result<BTreeMap<Share, BTreeMap<usize, Tally>>> {
    let mut parts: BTreeMap<Share, BTreeMap<usize, Tally>> = BTreeMap::new();
    let names = ["flows_total", "completion_ln_seconds", "completion_seconds_total"];
    let by = format!("round, block, arm, rtt_band, size, {}", split.labels());
    for (name, l, v) in sums_by(query, last, "bbrscope_experiment_switchback_", &by, &names)? {
        let tallies = parts.entry(split.part(&l)).or_default();
        let Some(((band, size), _)) = cell_of(&l) else { continue };
        let Some(part) =
            Part::of_keys(l.get("block").map_or("", String::as_str), l.get("arm").map_or("", String::as_str))
        else {
            continue;
        };
        let Some(round) = l.get("round").and_then(|r| r.parse().ok()) else { continue };
        let m = tallies.entry(band).or_default().slots.entry(Slot { round, part, band, size }).or_default();
        match name {
            "flows_total" => m.n = v as usize,
            "completion_ln_seconds" => m.ln = v,
            _ => m.seconds = v,
        }
    }
    let left_out = query(&format!(
        "sum by (reason, rtt_band, {}) ({})",
        split.labels(),
        last("bbrscope_experiment_switchback_left_out_flows_total")
    ))?;
    for (l, v) in left_out {
        let Some(band) = band_of_label(&l) else { continue };
        let t = parts.entry(split.part(&l)).or_default().entry(band).or_default();
        match l.get("reason").map(String::as_str) {
            Some("burn_in") => t.burn_in = v as usize,
            Some("mismatched") => t.mismatched = v as usize,
            _ => {}
        }
    }
    let overran = query(&format!(
        "sum by (rtt_band, {}) ({})",
        split.labels(),
        last("bbrscope_experiment_switchback_overran_flows_total")
    ))?;
    let overran: BTreeMap<(Share, usize), usize> =
        overran.iter().filter_map(|(l, v)| Some(((split.part(l), band_of_label(l)?), *v as usize))).collect();
    for (part, tallies) in &mut parts {
        for (band, t) in tallies {
            let counted = t.slots.values().map(|m| m.n).sum();
            let overran = overran.get(&(part.clone(), *band)).copied().unwrap_or(0);
            t.carryover = Carryover::of_counts(counted, overran, None);
        }
    }
    Ok(parts)
}

/// The guardrail's counted flows per arm (`sum by (arm, status_quo)`) into `sums`, and the run's
/// status quo where the kernel did not say each connection's, when the hosts agree on one (the
/// words of a decision name it).
fn counted_flows(counted: &Series, sums: &mut GuardSums) -> Option<String> {
    let mut run_status_quo = std::collections::BTreeSet::new();
    for (l, v) in counted {
        let Some(arm) = arm_of(l) else { continue };
        sums.flows[arm] += *v as usize;
        if let Some(sq) = l.get("status_quo").filter(|sq| *sq != "connection" && *v > 0.0) {
            sums.per_connection = false;
            run_status_quo.insert(sq.as_str());
        }
    }
    match run_status_quo.into_iter().collect::<Vec<_>>()[..] {
        [one] if one != "unknown" => Some(one.to_string()),
        _ => None,
    }
}

/// A `sum by (arm)` query's answer as counts for arms A and B (0 where it has none).
fn per_arm(series: Series) -> [usize; 2] {
    let mut counts = [0, 0];
    for (l, v) in series {
        if let Some(arm) = arm_of(&l) {
            counts[arm] = v as usize;
        }
    }
    counts
}

/// A watch's judgments as Prometheus series (`--watch --metrics-listen`), for the dashboard of a
/// running fleet experiment: per group, B's change in completion time with its interval, the
/// verdict, the flows per arm; the hosts; the looks.
pub(crate) struct Judgments {
    id: String,
    change: Family<BoundLabels, FloatGauge>,
    verdict: Family<VerdictLabels, Gauge>,
    flows: Family<GroupArmLabels, Gauge>,
    hosts: Family<IdLabels, Gauge>,
    looks: Family<IdLabels, Counter>,
    guard_stop: Family<IdLabels, Gauge>,
    guard_groups: Family<IdLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdLabels {
    id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    id: String,
    group: String,
    bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    id: String,
    group: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GroupArmLabels {
    id: String,
    group: String,
    arm: &'static str,
}

impl Judgments {
    /// Registers the series of experiment `id`'s judgments in `registry`.
    pub(crate) fn new(registry: &mut Registry, id: &str) -> Self {
        let j = Judgments {
            id: id.to_string(),
            change: Family::default(),
            verdict: Family::default(),
            flows: Family::default(),
            hosts: Family::default(),
            looks: Family::default(),
            guard_stop: Family::default(),
            guard_groups: Family::default(),
        };
        registry.register(
            "bbrscope_fleet_completion_change_ratio",
            "B's change in completion time against A's across the fleet, per client group: the estimate and the \
             always-valid interval's low and high ends (bound), as a ratio (-0.2 is 20% faster)",
            j.change.clone(),
        );
        registry.register(
            "bbrscope_fleet_verdict",
            "1 for each client group's verdict now (a_better, b_better, no_difference, inconclusive, too_few_flows, \
             arms_overridden), 0 for the others",
            j.verdict.clone(),
        );
        registry.register("bbrscope_fleet_flows", "Flows per arm a client group's answer rests on", j.flows.clone());
        registry.register(
            "bbrscope_fleet_hosts",
            "Hosts serving the experiment's sums at the last look",
            j.hosts.clone(),
        );
        registry.register("bbrscope_fleet_looks", "Looks the watch has taken", j.looks.clone());
        registry.register(
            "bbrscope_fleet_guardrail_stop",
            "1 when the guardrail's rule on every host's flows together says stop (end the experiment on every \
             host), else 0; absent while no host watches a guardrail",
            j.guard_stop.clone(),
        );
        registry.register(
            "bbrscope_fleet_guardrail_harmed_groups",
            "Client groups the guardrail's rule on every host's flows together would send back to their status quo",
            j.guard_groups.clone(),
        );
        j
    }

    /// Served on `listen` (`--metrics-listen`) until the [`Served`] is dropped, when asked; the
    /// address is named on stderr.
    pub(crate) fn serve(listen: Option<SocketAddr>, id: &str) -> Result<Option<(Judgments, Served)>> {
        let Some(listen) = listen else { return Ok(None) };
        let listener = crate::scrape::bind(listen)?;
        let mut registry = Registry::default();
        let j = Judgments::new(&mut registry, id);
        let (at, served) = crate::scrape::serve(listener, registry)?;
        crate::output::errln!("bbrscope: the fleet's judgments for Prometheus: http://{at}/metrics (id {id})");
        Ok(Some((j, served)))
    }

    /// The judgments of one look: `rep` across `hosts` hosts, and the fleet guardrail's `guard`.
    pub(crate) fn record(&self, rep: &Report, hosts: usize, guard: Option<&GuardDecision>) {
        let id = || self.id.clone();
        for g in &rep.groups {
            let a = &g.result.answer;
            let label = || g.result.label.clone();
            for (bound, v) in [("estimate", a.effect_pct), ("low", a.low_pct), ("high", a.high_pct)] {
                let series = self.change.get_or_create(&BoundLabels { id: id(), group: label(), bound });
                series.set(v.map_or(f64::NAN, |v| v / 100.0));
            }
            for v in Verdict::ALL {
                let name =
                    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
                let on = i64::from(v == g.result.verdict);
                self.verdict.get_or_create(&VerdictLabels { id: id(), group: label(), verdict: name }).set(on);
            }
            for (arm, n) in ["a", "b"].into_iter().zip(a.flows) {
                self.flows.get_or_create(&GroupArmLabels { id: id(), group: label(), arm }).set(n as i64);
            }
        }
        self.hosts.get_or_create(&IdLabels { id: id() }).set(hosts as i64);
        if let Some(g) = guard {
            self.guard_stop.get_or_create(&IdLabels { id: id() }).set(i64::from(g.stop));
            self.guard_groups.get_or_create(&IdLabels { id: id() }).set(g.switched_back.len() as i64);
        }
        self.looks.get_or_create(&IdLabels { id: id() }).inc();
    }
}

/// A series' stratum and arm, from its labels.
fn cell_of(l: &BTreeMap<String, String>) -> Option<(Key, usize)> {
    let arm = arm_of(l)?;
    let band = band_of_label(l)?;
    let size = Bucket::ALL.into_iter().find(|b| Some(b.key()) == l.get("size").map(String::as_str))?;
    Some(((band, size), arm))
}

/// A series' RTT band, from its `rtt_band` label.
fn band_of_label(l: &BTreeMap<String, String>) -> Option<usize> {
    (0..RTT_BANDS_MS.len() + 2).find(|&b| Some(&band_key(b, &RTT_BANDS_MS)) == l.get("rtt_band"))
}

fn arm_of(l: &BTreeMap<String, String>) -> Option<usize> {
    arm_key(l.get("arm")?)
}

/// An arm's label value (`a`, `b`) as its index.
fn arm_key(v: &str) -> Option<usize> {
    match v {
        "a" => Some(0),
        "b" => Some(1),
        _ => None,
    }
}

/// An instant query's vector at `at` (Unix seconds): each series' labels and value.
fn query(source: &Source, promql: &str, at: f64) -> Result<Series> {
    let body = get(&source.url, &format!("/api/v1/query?query={}&time={at:.3}", urlencode(promql)), &source.headers)
        .with_context(|| format!("querying the Prometheus at {}", source.url))?;
    let v: Value = serde_json::from_str(&body)
        .with_context(|| format!("the Prometheus at {} answered with no JSON: {}", source.url, first_line(&body)))?;
    if v["status"] != "success" {
        bail!("the Prometheus at {} refused the query {promql}: {}", source.url, v["error"]);
    }
    let Some(result) = v["data"]["result"].as_array() else {
        bail!("the Prometheus at {} answered the query {promql} with no vector", source.url);
    };
    Ok(result
        .iter()
        .filter_map(|s| {
            let labels =
                s["metric"].as_object()?.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()));
            Some((labels.collect(), s["value"][1].as_str()?.parse().ok()?))
        })
        .collect())
}

/// GET `target` from `url` (`http://HOST:PORT[/PREFIX]`) over HTTP/1.0, so that the body ends
/// with the connection, sending `headers` (whole lines, `Name: value`): the body of a 200.
fn get(url: &str, target: &str, headers: &[String]) -> Result<String> {
    let Some(rest) = url.strip_prefix("http://") else {
        bail!("{url}: only http:// URLs are read (e.g. http://127.0.0.1:9090)");
    };
    let (host, prefix) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let addr = host
        .to_socket_addrs()
        .with_context(|| format!("{host}: not a host and port"))?
        .next()
        .with_context(|| format!("{host}: no address"))?;
    let mut s = TcpStream::connect_timeout(&addr, TIMEOUT).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let path = format!("/{}{target}", prefix.trim_end_matches('/')).replace("//", "/");
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\n{extra}\r\n")?;
    let mut resp = Vec::new();
    s.take(MAX_BODY).read_to_end(&mut resp)?;
    let resp = String::from_utf8_lossy(&resp);
    let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    let status = head.split(' ').nth(1).unwrap_or("");
    // Prometheus answers a bad query 400 with its error in the JSON body: let the caller read it.
    if status != "200" && status != "400" && status != "422" {
        bail!("{addr} answered {}", first_line(head));
    }
    Ok(body.to_string())
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// A query string's value, percent-encoded.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_names_its_cell_and_arm() {
        let l = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(
            cell_of(&l(&[("arm", "b"), ("rtt_band", "50_150ms"), ("size", "16k_256k")])),
            Some(((3, Bucket::To256K), 1))
        );
        assert_eq!(
            cell_of(&l(&[("arm", "a"), ("rtt_band", "unknown"), ("size", "lt16k")])),
            Some(((0, Bucket::Under16K), 0))
        );
        assert_eq!(cell_of(&l(&[("arm", "c"), ("rtt_band", "unknown"), ("size", "lt16k")])), None);
        assert_eq!(cell_of(&l(&[("arm", "a"), ("rtt_band", "20_30ms"), ("size", "lt16k")])), None);
        assert_eq!(urlencode("sum by (arm) (x{id=\"a b\"})"), "sum%20by%20%28arm%29%20%28x%7Bid%3D%22a%20b%22%7D%29");
    }

    /// Every query carries the `--prometheus-header` lines (a Mimir tenant, a token) as given,
    /// beside its own; the answer is read as without them.
    #[test]
    fn a_query_sends_the_headers_it_was_given() {
        use std::io::BufRead as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/prom", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut c, _) = listener.accept().unwrap();
            let mut lines = Vec::new();
            let mut r = std::io::BufReader::new(c.try_clone().unwrap());
            loop {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                if line == "\r\n" {
                    break;
                }
                lines.push(line.trim_end().to_string());
            }
            let body = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"arm":"a"},"value":[1,"7"]}]}}"#;
            write!(c, "HTTP/1.0 200 OK\r\n\r\n{body}").unwrap();
            lines
        });
        let source = Source {
            url,
            id: "g".into(),
            hosts: None,
            lookback: Duration::from_secs(60),
            by: None,
            headers: vec!["X-Scope-OrgID: edge".into(), "Authorization: Bearer t0ken".into()],
        };
        let got = query(&source, "up", 1.0).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].0.get("arm").map(String::as_str), got[0].1), (Some("a"), 7.0));
        let lines = server.join().unwrap();
        assert!(lines[0].starts_with("GET /prom/api/v1/query?query=up&time=1.000 HTTP/1.0"), "{lines:?}");
        for h in &source.headers {
            assert!(lines.contains(h), "{h} not in {lines:?}");
        }
    }
}

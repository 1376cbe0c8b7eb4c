//! The throughput part: bulk flows that run through the whole workload while each observer is
//! attached and detached in turn, A/B/A/B, and what each observer cost.
//!
//! On this kind of machine a flow's throughput shifts by tens of percent between regimes that
//! last seconds, whatever is attached (host noise under the VM). So every slot with an observer
//! sits between two slots without one on the same flows, and is compared with their mean; an A/A
//! control (nothing attached, measured the same way) shows how much of a difference is noise.

use std::{
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use bbrscope_common::counter;
use serde::Serialize;

use super::{
    Plan, Spread, measure,
    net::Veth,
    scenarios::{Consumed, Observer, Running, Setup, Traced},
    workload::{Bulk, Ends, Workload},
};

/// A pair whose slots other people's processes used more CPU in than this (1.0 = one core) is
/// measured again, at most `RETRIES` times.
pub(super) const DISTURBED_CORES: f64 = 0.15;
pub(super) const RETRIES: u32 = 2;
/// Before measuring: after an observer attached (its first samples and frames), and after it
/// detached.
pub(super) const SETTLE: Duration = Duration::from_millis(200);

/// One slot with an observer attached, and the slots without one on either side of it.
#[derive(Debug, Serialize)]
pub(crate) struct Pair {
    pub observer: Observer,
    pub round: u32,
    pub observed_bps: f64,
    /// Mean of the slots before and after.
    pub baseline_bps: f64,
    #[serde(flatten)]
    pub costs: Costs,
    /// Other tcp_probe programs loaded on the machine meanwhile (other users' tracers).
    pub foreign_probes: usize,
    /// CPU used by other people's processes, the most in any of the three slots (1.0 = one core).
    pub others_cpu_cores: f64,
    /// 1, or more when other processes disturbed the earlier attempts.
    pub attempts: u32,
    /// The observer did not exit within 10 s of SIGTERM and was killed.
    pub killed: bool,
}

/// What an observer cost over a slot (None: does not apply to this observer).
#[derive(Debug, Serialize)]
pub(crate) struct Costs {
    /// The observer's own CPU time per second (1.0 = one core).
    pub cpu_cores: Option<f64>,
    /// Time in the observer's tcp_probe program per second: paid on the CPUs moving the traffic.
    pub bpf_cores: Option<f64>,
    pub events_per_s: Option<f64>,
    pub records_per_s: Option<f64>,
    pub drops: Option<u64>,
    pub ns_per_event: Option<f64>,
    /// The observer's CPU time and BPF time as a share of all the CPU time the machine was busy:
    /// when the traffic is CPU-bound (as on loopback), about the throughput the observer costs,
    /// and measured within one slot, so the noise of throughput does not enter.
    pub busy_share: Option<f64>,
}

/// Throughput over a stretch of time and what the observer consumed meanwhile.
struct Slot {
    bps: f64,
    costs: Costs,
    others_cpu_cores: f64,
}

impl Slot {
    fn measure(bulk: &Bulk, running: &mut Running, seconds: f64) -> Result<Slot> {
        let (t0, bytes0) = (Instant::now(), bulk.received());
        let (c0, others0, busy0) = (running.consumed()?, measure::others_cpu_time(), measure::busy_cpu_time()?);
        thread::sleep(Duration::from_secs_f64(seconds));
        let (dt, bytes1) = (t0.elapsed().as_secs_f64(), bulk.received());
        let (c1, others1, busy1) = (running.consumed()?, measure::others_cpu_time(), measure::busy_cpu_time()?);
        Ok(Slot {
            bps: (bytes1 - bytes0) as f64 * 8.0 / dt,
            costs: Costs::between(&c0, &c1, dt, busy1.saturating_sub(busy0).as_secs_f64() / dt),
            others_cpu_cores: others1.saturating_sub(others0).as_secs_f64() / dt,
        })
    }
}

impl Costs {
    /// From what the observer had consumed at the start and at the end of `dt` seconds, while
    /// the machine's CPUs were busy `busy_cores` on average.
    fn between(c0: &Consumed, c1: &Consumed, dt: f64, busy_cores: f64) -> Costs {
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / dt;
        let probe = c0.probe.zip(c1.probe);
        let counters = c0.counters.zip(c1.counters);
        let counter = |i: u32| counters.map(|(a, b)| b[i as usize].saturating_sub(a[i as usize]));
        let cpu_cores = c0.cpu.zip(c1.cpu).map(|(a, b)| b.saturating_sub(a).as_secs_f64() / dt);
        let bpf_cores = probe.map(|(a, b)| per_s(a.run_time_ns, b.run_time_ns) / 1e9);
        Costs {
            cpu_cores,
            bpf_cores,
            // bbrscope's own count (what its `stats` records show); the program's run count for
            // others.
            events_per_s: counter(counter::PROBE_EVENTS)
                .map(|n| n as f64 / dt)
                .or(probe.map(|(a, b)| per_s(a.runs, b.runs))),
            records_per_s: counters.map(|(a, b)| per_s(measure::records(&a), measure::records(&b))),
            drops: counter(counter::RING_FULL),
            ns_per_event: probe
                .filter(|(a, b)| b.runs > a.runs)
                .map(|(a, b)| (b.run_time_ns - a.run_time_ns) as f64 / (b.runs - a.runs) as f64),
            busy_share: cpu_cores.map(|c| (c + bpf_cores.unwrap_or(0.0)) / busy_cores.max(1e-9)),
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub observer: Observer,
    pub throughput_bps: Spread,
    /// Per pair: throughput with this observer / mean throughput without, either side of it.
    pub ratio: Option<Spread>,
    pub cpu_cores: Option<Spread>,
    pub bpf_cores: Option<Spread>,
    pub events_per_s: Option<Spread>,
    pub records_per_s: Option<Spread>,
    pub drops: Option<u64>,
    pub ns_per_event: Option<Spread>,
    pub busy_share: Option<Spread>,
}

#[derive(Debug, Serialize)]
pub(crate) struct WorkloadResult {
    pub workload: Workload,
    pub label: String,
    pub summaries: Vec<Summary>,
    pub pairs: Vec<Pair>,
}

impl WorkloadResult {
    pub(crate) fn summary(&self, observer: Observer) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.observer == observer)
    }
}

/// The baseline (the slots either side of each observer's) first, then each observer.
fn summarize(pairs: &[Pair], observers: &[Observer]) -> Vec<Summary> {
    let baseline =
        Spread::of(&pairs.iter().map(|p| p.baseline_bps).collect::<Vec<_>>()).map(|throughput_bps| Summary {
            observer: Observer::Baseline,
            throughput_bps,
            ratio: None,
            cpu_cores: None,
            bpf_cores: None,
            events_per_s: None,
            records_per_s: None,
            drops: None,
            ns_per_event: None,
            busy_share: None,
        });
    let observed = observers.iter().filter_map(|&observer| {
        let mine: Vec<&Pair> = pairs.iter().filter(|p| p.observer == observer).collect();
        let of = |f: fn(&Pair) -> Option<f64>| Spread::of(&mine.iter().filter_map(|p| f(p)).collect::<Vec<_>>());
        Some(Summary {
            observer,
            throughput_bps: of(|p| Some(p.observed_bps))?,
            ratio: of(|p| Some(p.observed_bps / p.baseline_bps)),
            cpu_cores: of(|p| p.costs.cpu_cores),
            bpf_cores: of(|p| p.costs.bpf_cores),
            events_per_s: of(|p| p.costs.events_per_s),
            records_per_s: of(|p| p.costs.records_per_s),
            drops: mine.iter().filter_map(|p| p.costs.drops).reduce(|a, b| a + b),
            ns_per_event: of(|p| p.costs.ns_per_event),
            busy_share: of(|p| p.costs.busy_share),
        })
    });
    baseline.into_iter().chain(observed).collect()
}

/// Runs every workload of the plan: `plan.repeats` rounds, each a slot without an observer, then
/// for each observer a slot with it and one without.
pub(super) fn run(
    plan: &Plan,
    observers: &[Observer],
    setup: &Setup,
    veth: Option<&Veth>,
) -> Result<Vec<WorkloadResult>> {
    let total = plan.workloads.len() * plan.repeats as usize * observers.len();
    let mut done = 0;
    let mut results = Vec::new();
    for w in &plan.workloads {
        let ends = Ends::of(w.path, veth)?;
        let ss_netns = ends.sender.veth_path();
        let bulk = Bulk::start(w.flows, w.cc, ends, None)?;
        thread::sleep(Duration::from_secs_f64(plan.warmup_s));
        let mut pairs = Vec::new();
        for round in 0..plan.repeats {
            let mut before = Slot::measure(&bulk, &mut Running::Nothing, plan.seconds)?;
            // A different observer goes first in each round, so none always follows the same one.
            for k in 0..observers.len() {
                let observer = observers[(k + round as usize) % observers.len()];
                done += 1;
                crate::progress!("bench: [{done}/{total}] {} | {}", w.label(), observer.label());
                let mut attempts = 1;
                let (pair, after) = loop {
                    let (mut pair, after) =
                        measure_pair(plan, &bulk, observer, round, &before, setup, ss_netns.clone())
                            .with_context(|| format!("{} with {}", w.label(), observer.label()))?;
                    pair.attempts = attempts;
                    if pair.others_cpu_cores <= DISTURBED_CORES || attempts > RETRIES {
                        break (pair, after);
                    }
                    attempts += 1;
                    crate::progress!(
                        "bench:   other processes used {:.0}% of a core: again",
                        pair.others_cpu_cores * 100.0
                    );
                };
                pairs.push(pair);
                before = after;
            }
        }
        bulk.stop();
        results.push(WorkloadResult { workload: *w, label: w.label(), summaries: summarize(&pairs, observers), pairs });
    }
    Ok(results)
}

/// A slot with `observer` attached, then one without; compared with the mean of that and
/// `before`. Returns the slot without, which is the next observer's `before`.
fn measure_pair(
    plan: &Plan,
    bulk: &Bulk,
    observer: Observer,
    round: u32,
    before: &Slot,
    setup: &Setup,
    ss_netns: Option<String>,
) -> Result<(Pair, Slot)> {
    let mut running = Running::start(observer, setup, ss_netns)?;
    thread::sleep(SETTLE);
    let observed = Slot::measure(bulk, &mut running, plan.seconds)?;
    let own = running.probe_id();
    let foreign_probes = measure::probe_program_ids()?.into_iter().filter(|&id| Some(id) != own).count();
    let exited = running.stop()?;
    if !exited {
        crate::progress!(
            "bench:   {} did not exit within {:?} of SIGTERM: killed",
            observer.label(),
            Traced::STOP_WAIT
        );
    }
    thread::sleep(SETTLE);
    let after = Slot::measure(bulk, &mut Running::Nothing, plan.seconds)?;
    let others_cpu_cores = [before, &observed, &after].iter().map(|s| s.others_cpu_cores).fold(0.0, f64::max);
    let pair = Pair {
        observer,
        round,
        observed_bps: observed.bps,
        baseline_bps: f64::midpoint(before.bps, after.bps),
        costs: observed.costs,
        foreign_probes,
        others_cpu_cores,
        attempts: 1,
        killed: !exited,
    };
    Ok((pair, after))
}

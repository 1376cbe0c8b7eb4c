//! `cargo xtask bench`: bbrscope's cost on the traffic it watches, side by side with bpftrace
//! and `ss` polling, and at 10,000 flows. Writes a markdown table and a JSON file.

mod drops;
mod idle;
mod machine;
mod measure;
mod net;
mod pty;
mod report;
mod scale;
mod scenarios;
mod workload;

use std::{
    path::{Path, PathBuf},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use bbrscope_common::counter;
use clap::Args;
use serde::Serialize;

use self::{
    measure::RunTimeStats,
    scenarios::{Consumed, Observer, Running, Setup},
    workload::{Bulk, Ends, PathKind, Pinger, Workload},
};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A short run (1-2 minutes): loopback only, cubic only, 2 repeats of 2 s, a shorter scale test
    #[arg(long)]
    quick: bool,
    /// Rounds per workload; each runs every observer once, starting with a different one each round
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    repeats: Option<u32>,
    /// Measured seconds per run, after a warm-up
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Concurrent idle flows in the scale test
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    scale_flows: usize,
    /// Directory for latest.md and latest.json [default: bench/results in the workspace]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The bbrscope binary to measure [default: build it (release) next to this xtask]
    #[arg(long, value_name = "PATH")]
    bbrscope: Option<PathBuf>,
}

/// What one invocation runs.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub quick: bool,
    pub repeats: u32,
    pub seconds: f64,
    pub warmup_s: f64,
    pub workloads: Vec<Workload>,
    pub scale_flows: usize,
    pub scale_seconds: f64,
    pub scale_cases: Vec<scale::Case>,
    pub drops_seconds: f64,
}

impl Plan {
    fn from(args: &BenchArgs) -> Result<Plan> {
        let (paths, ccs, repeats, seconds, scale_seconds): (&[PathKind], &[&str], u32, f64, f64) = if args.quick {
            (&[PathKind::Loopback], &["cubic"], 2, 2.0, 8.0)
        } else {
            (&[PathKind::Loopback, PathKind::Veth], &["cubic", "bbr"], 3, 3.0, 20.0)
        };
        let seconds = args.seconds.unwrap_or(seconds);
        if !(seconds >= 0.5 && seconds.is_finite()) {
            bail!("--seconds must be at least 0.5");
        }
        let mut workloads = Vec::new();
        for &path in paths {
            for flows in [1, drops::FLOWS] {
                for &cc in ccs {
                    workloads.push(Workload { path, flows, cc });
                }
            }
        }
        // Both ends of every flow are on this machine, so 10,000 flows are 20,000 sockets for
        // the kernel programs: more than the default flow table holds.
        let roomy = Some(32_768);
        let scale_cases = vec![
            scale::Case { observer: Observer::Stream, max_flows: None },
            scale::Case { observer: Observer::Stream, max_flows: roomy },
            scale::Case { observer: Observer::Dashboard, max_flows: roomy },
        ];
        Ok(Plan {
            quick: args.quick,
            repeats: args.repeats.unwrap_or(repeats),
            seconds,
            warmup_s: 0.5,
            workloads,
            scale_flows: args.scale_flows,
            scale_seconds,
            scale_cases,
            drops_seconds: 2.0,
        })
    }
}

/// Median and range of a set of measurements.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }
}

/// One measured run: a workload with one observer attached.
#[derive(Debug, Serialize)]
pub struct Run {
    pub observer: Observer,
    pub repeat: u32,
    pub throughput_bps: f64,
    /// The observer's own CPU time per second (1.0 = one core).
    pub cpu_cores: Option<f64>,
    /// Time in the observer's tcp_probe program per second: paid on the CPUs moving the traffic.
    pub bpf_cores: Option<f64>,
    pub events_per_s: Option<f64>,
    pub records_per_s: Option<f64>,
    pub drops: Option<u64>,
    pub ns_per_event: Option<f64>,
    /// Other tcp_probe programs loaded on the machine meanwhile (other users' tracers).
    pub foreign_probes: usize,
    pub load_average: f64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub observer: Observer,
    pub throughput_bps: Spread,
    /// Per round: throughput with this observer / throughput with nothing, same round.
    pub ratio: Option<Spread>,
    pub cpu_cores: Option<Spread>,
    pub bpf_cores: Option<Spread>,
    pub events_per_s: Option<Spread>,
    pub records_per_s: Option<Spread>,
    pub drops: Option<u64>,
    pub ns_per_event: Option<Spread>,
}

#[derive(Debug, Serialize)]
pub struct WorkloadResult {
    pub workload: Workload,
    pub label: String,
    pub summaries: Vec<Summary>,
    pub runs: Vec<Run>,
}

impl WorkloadResult {
    pub fn summary(&self, observer: Observer) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.observer == observer)
    }
}

fn summarize(runs: &[Run], observers: &[Observer]) -> Vec<Summary> {
    let baseline: Vec<(u32, f64)> =
        runs.iter().filter(|r| r.observer == Observer::Baseline).map(|r| (r.repeat, r.throughput_bps)).collect();
    observers
        .iter()
        .filter_map(|&observer| {
            let mine: Vec<&Run> = runs.iter().filter(|r| r.observer == observer).collect();
            let of = |f: fn(&Run) -> Option<f64>| Spread::of(&mine.iter().filter_map(|r| f(r)).collect::<Vec<_>>());
            let ratios: Vec<f64> = mine
                .iter()
                .filter_map(|r| baseline.iter().find(|b| b.0 == r.repeat).map(|b| r.throughput_bps / b.1))
                .collect();
            Some(Summary {
                observer,
                throughput_bps: of(|r| Some(r.throughput_bps))?,
                ratio: Spread::of(&ratios),
                cpu_cores: of(|r| r.cpu_cores),
                bpf_cores: of(|r| r.bpf_cores),
                events_per_s: of(|r| r.events_per_s),
                records_per_s: of(|r| r.records_per_s),
                drops: mine.iter().filter_map(|r| r.drops).reduce(|a, b| a + b),
                ns_per_event: of(|r| r.ns_per_event),
            })
        })
        .collect()
}

/// Everything the benchmark found, as written to latest.json.
#[derive(Debug, Serialize)]
pub struct Results {
    pub targets: Vec<report::Target>,
    pub machine: machine::Machine,
    pub plan: Plan,
    pub observers: Vec<Observer>,
    pub notes: Vec<String>,
    pub workloads: Vec<WorkloadResult>,
    pub forced_drops: Vec<drops::ForcedDrops>,
    pub scale: Vec<scale::ScaleResult>,
    pub load_average_end: f64,
    pub duration_s: f64,
}

pub fn run(args: BenchArgs) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("the benchmark loads BPF programs and creates network namespaces: run it as root");
    }
    let started = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("workspace root")?.to_path_buf();
    let plan = Plan::from(&args)?;
    let bbrscope = match &args.bbrscope {
        Some(p) => p.clone(),
        None => build_bbrscope(&root)?,
    };
    raise_open_file_limit()?;
    net::remove_stale()?;
    let _stats = RunTimeStats::enable()?;
    let machine = machine::Machine::describe(&root, &bbrscope);

    let mut notes = Vec::new();
    let mut observers = Observer::ALL.to_vec();
    let work_dir = std::env::temp_dir().join(format!("bbrscope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir)?;
    let bpftrace_script = if machine.bpftrace.is_some() {
        let path = work_dir.join("tcp_probe.bt");
        std::fs::write(&path, scenarios::BPFTRACE_SCRIPT)?;
        Some(path)
    } else {
        observers.retain(|&o| o != Observer::Bpftrace);
        notes.push("bpftrace is not installed: its column is missing (scripts/setup.sh installs it).".into());
        None
    };
    let pinger = Pinger::new()?;
    let setup = Setup { bbrscope: &bbrscope, pinger: &pinger, bpftrace_script };
    let veth = if plan.workloads.iter().any(|w| w.path == PathKind::Veth) { Some(net::Veth::create()?) } else { None };

    let total_runs = plan.workloads.len() * plan.repeats as usize * observers.len();
    let mut done = 0;
    let mut workloads = Vec::new();
    for w in &plan.workloads {
        let ends = Ends::of(w.path, veth.as_ref())?;
        let ss_netns = ends.sender.map(|ns| ns.path());
        let mut runs = Vec::new();
        for repeat in 0..plan.repeats {
            // A different observer goes first in each round, so none always follows the same one.
            for k in 0..observers.len() {
                let observer = observers[(k + repeat as usize) % observers.len()];
                done += 1;
                eprintln!("bench: [{done}/{total_runs}] {} | {}", w.label(), observer.label());
                let run = measure_run(&plan, w, observer, repeat, &setup, ends, ss_netns.clone())
                    .with_context(|| format!("{} with {}", w.label(), observer.label()))?;
                runs.push(run);
            }
        }
        workloads.push(WorkloadResult { workload: *w, label: w.label(), summaries: summarize(&runs, &observers), runs });
    }
    drop(veth);

    let mut forced_drops = Vec::new();
    for observer in [Observer::Stream, Observer::Dashboard] {
        eprintln!("bench: forced drops | {}", observer.label());
        forced_drops.push(drops::run(&setup, observer, plan.drops_seconds)?);
    }
    let mut scale = Vec::new();
    for case in &plan.scale_cases {
        eprintln!("bench: {} flows | {} --max-flows {:?}", plan.scale_flows, case.observer.label(), case.max_flows);
        scale.push(scale::run(&setup, case, plan.scale_flows, plan.scale_seconds)?);
    }
    let _ = std::fs::remove_dir_all(&work_dir);

    let mut results = Results {
        targets: Vec::new(),
        machine,
        plan,
        observers,
        notes,
        workloads,
        forced_drops,
        scale,
        load_average_end: measure::load_average(),
        duration_s: started.elapsed().as_secs_f64(),
    };
    results.targets = report::targets(&results);
    let out = args.out.unwrap_or_else(|| root.join("bench/results"));
    let (md, json) = report::write(&results, &out)?;
    print!("{}", std::fs::read_to_string(&md)?);
    eprintln!("bench: wrote {} and {}", md.display(), json.display());
    Ok(())
}

fn measure_run(
    plan: &Plan,
    w: &Workload,
    observer: Observer,
    repeat: u32,
    setup: &Setup,
    ends: Ends,
    ss_netns: Option<String>,
) -> Result<Run> {
    let mut running = Running::start(observer, setup, ss_netns)?;
    let bulk = Bulk::start(w.flows, w.cc, ends)?;
    thread::sleep(Duration::from_secs_f64(plan.warmup_s));
    let (t0, bytes0) = (Instant::now(), bulk.received());
    let c0 = running.consumed()?;
    thread::sleep(Duration::from_secs_f64(plan.seconds));
    let (dt, bytes1) = (t0.elapsed().as_secs_f64(), bulk.received());
    let c1 = running.consumed()?;
    let own = running.probe_id();
    let foreign_probes = measure::probe_program_ids()?.into_iter().filter(|&id| Some(id) != own).count();
    bulk.stop();
    running.stop()?;
    Ok(delta(observer, repeat, dt, (bytes1 - bytes0) as f64 * 8.0 / dt, &c0, &c1, foreign_probes))
}

fn delta(observer: Observer, repeat: u32, dt: f64, throughput_bps: f64, c0: &Consumed, c1: &Consumed, foreign_probes: usize) -> Run {
    let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / dt;
    let probe = c0.probe.zip(c1.probe);
    let counters = c0.counters.zip(c1.counters);
    Run {
        observer,
        repeat,
        throughput_bps,
        cpu_cores: c0.cpu.zip(c1.cpu).map(|(a, b)| b.saturating_sub(a).as_secs_f64() / dt),
        bpf_cores: probe.map(|(a, b)| per_s(a.run_time_ns, b.run_time_ns) / 1e9),
        // bbrscope's own count (what its `stats` records show); the program's run count for others.
        events_per_s: counters
            .map(|(a, b)| per_s(a[counter::PROBE_EVENTS as usize], b[counter::PROBE_EVENTS as usize]))
            .or(probe.map(|(a, b)| per_s(a.runs, b.runs))),
        records_per_s: counters.map(|(a, b)| per_s(measure::records(&a), measure::records(&b))),
        drops: counters.map(|(a, b)| b[counter::RING_FULL as usize] - a[counter::RING_FULL as usize]),
        ns_per_event: probe
            .filter(|(a, b)| b.runs > a.runs)
            .map(|(a, b)| (b.run_time_ns - a.run_time_ns) as f64 / (b.runs - a.runs) as f64),
        foreign_probes,
        load_average: measure::load_average(),
    }
}

/// `xtask idle-peer`: the far ends of the scale test's idle flows, in a process of their own.
pub fn idle_peer() -> Result<()> {
    idle::peer_main()
}

/// Builds bbrscope (release) into the target directory this xtask runs from.
fn build_bbrscope(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--package", "bbrscope", "--bin", "bbrscope"])
        .current_dir(root)
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("building bbrscope failed");
    }
    let exe = std::env::current_exe()?.with_file_name("bbrscope");
    if !exe.exists() {
        bail!("{} is missing after the build; pass --bbrscope PATH", exe.display());
    }
    Ok(exe)
}

/// 10,000 flows need more descriptors than the usual soft limit of 1024.
fn raise_open_file_limit() -> Result<()> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    lim.rlim_cur = lim.rlim_max;
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

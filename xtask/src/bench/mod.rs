//! `cargo xtask bench`: bbrscope's cost on the traffic it watches, side by side with bpftrace
//! and `ss` polling, and at 10,000 flows. Writes a markdown table and a JSON file.

mod cost;
mod drops;
mod exporter;
mod idle;
mod machine;
mod measure;
mod net;
mod pty;
mod quiet;
mod report;
mod scale;
mod scenarios;
mod shortflows;
mod sockets;
mod throughput;
mod workload;

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use clap::Args;
use serde::Serialize;

use self::{
    measure::RunTimeStats,
    scenarios::{Observer, Setup},
    workload::{PathKind, Pinger, Workload},
};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// A short run (about 2 minutes): loopback and cubic only, 2 rounds, a shorter scale test
    #[arg(long)]
    quick: bool,
    /// Rounds per workload; each measures every observer once between slots without [default: 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    repeats: Option<u32>,
    /// Seconds per measured slot [default: 1.25]
    #[arg(long, value_name = "S")]
    seconds: Option<f64>,
    /// Run only these parts (repeat the option for several) [default: all]
    #[arg(long, value_name = "PART", value_enum)]
    only: Vec<Part>,
    /// Concurrent idle flows in the scale test
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    scale_flows: usize,
    /// Seconds the scale test holds its flows, after they are all open [default: 12; --quick: 8]
    #[arg(long, value_name = "S")]
    scale_seconds: Option<f64>,
    /// Rounds of the cost part: each runs the floor and the real program once per path and flow
    /// count [default: 4; --quick: 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=50))]
    cost_rounds: Option<u32>,
    /// Seconds each cost run measures [default: 2; --quick: 1]
    #[arg(long, value_name = "S")]
    cost_seconds: Option<f64>,
    /// Flow counts of the cost part (comma-separated) [default: 1,100,10000; --quick: 1,1000]
    #[arg(long, value_name = "N,N..", value_delimiter = ',')]
    cost_flows: Vec<usize>,
    /// Leave out the cost part's long path (BBR flows through the demo's emulator: 150 ms, 3%
    /// loss), run after the flow counts
    #[arg(long)]
    no_long_path: bool,
    /// Observer paths of the cost part (comma-separated) [default: sockops,tracepoint]
    #[arg(long, value_name = "PATH,..", value_delimiter = ',', value_parser = cost::PATHS)]
    cost_paths: Vec<String>,
    /// Short flows started per second
    #[arg(long, value_name = "N", default_value_t = 5000.0)]
    short_rate: f64,
    /// Seconds each short-flow run lasts [default: 10; --quick: 2]
    ///
    /// Not shorter by default: a run's first second costs `stream` more than the rest, and 4 s
    /// runs read 0.1-0.3% of a core above 10-15 s ones (bench/README.md), as much as the margin
    /// of its 2% target.
    #[arg(long, value_name = "S")]
    short_seconds: Option<f64>,
    /// Idle sockets in the sockets part (both ends of loopback connections)
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    sockets: usize,
    /// Rounds of the sockets part (each with and without bbrscope) [default: 2; --quick: 1]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10))]
    sockets_rounds: Option<u32>,
    /// Directory for latest.md and latest.json [default: bench/results in the workspace]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Measure while QEMU guests run instead of waiting for them (up to 20 minutes before each
    /// part and cost run): every number then includes their load; the notes count the cost runs
    /// they overlapped
    #[arg(long)]
    while_qemu: bool,
    /// The bbrscope binary to measure [default: build it (release) next to this xtask]
    #[arg(long, value_name = "PATH")]
    bbrscope: Option<PathBuf>,
}

/// The benchmark's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Part {
    /// Throughput and cost of each observer on bulk flows
    Throughput,
    /// Drops forced with a tiny ring buffer, and whether they are reported
    Drops,
    /// 10,000 mostly idle flows: memory and dashboard responsiveness
    Scale,
    /// ns per event of each path's per-ACK program against an empty one (the floor), at 1, 100
    /// and 10,000 flows and on an emulated long, lossy path, beside bpftrace
    Cost,
    /// Short request/response flows per second, and whether bbrscope summarises every one
    #[value(name = "short-flows")]
    ShortFlows,
    /// 100,000 idle sockets on the sock_ops path: tracked, and kernel memory per socket
    Sockets,
    /// `bbrscope export` at 100 and 10,000 flows: scrape time, memory, series count
    Export,
}

/// What one invocation runs.
#[derive(Debug, Serialize)]
pub(crate) struct Plan {
    pub quick: bool,
    pub repeats: u32,
    pub seconds: f64,
    pub warmup_s: f64,
    pub workloads: Vec<Workload>,
    pub scale_flows: usize,
    pub scale_seconds: f64,
    pub scale_cases: Vec<scale::Case>,
    pub forced_drops: bool,
    pub drops_seconds: f64,
    pub cost_levels: Vec<cost::Level>,
    pub cost_paths: Vec<&'static str>,
    pub cost_rounds: u32,
    pub cost_seconds: f64,
    pub short_paths: Vec<PathKind>,
    pub short_rate: f64,
    pub short_seconds: f64,
    pub sockets: usize,
    pub sockets_rounds: u32,
    /// Flow counts the exporter is measured at.
    pub export_flows: Vec<usize>,
}

impl Plan {
    fn from(args: &BenchArgs) -> Result<Plan> {
        let (paths, ccs, repeats, seconds, scale_seconds): (&[PathKind], &[&str], u32, f64, f64) = if args.quick {
            (&[PathKind::Loopback], &["cubic"], 2, 1.25, 8.0)
        } else {
            (&[PathKind::Loopback, PathKind::Veth], &["cubic", "bbr"], 2, 1.25, 12.0)
        };
        let seconds = args.seconds.unwrap_or(seconds);
        if !(seconds >= 0.5 && seconds.is_finite()) {
            bail!("--seconds must be at least 0.5");
        }
        let runs = |part| args.only.is_empty() || args.only.contains(&part);
        let mut workloads = Vec::new();
        if runs(Part::Throughput) {
            for &path in paths {
                for flows in [1, drops::FLOWS] {
                    workloads.extend(ccs.iter().map(|&cc| Workload { path, flows, cc }));
                }
            }
        }
        // The last case runs the same traffic with a flow table far too small for it: memory
        // must follow the setting, and the shortfall must show.
        let scale_cases = if runs(Part::Scale) {
            vec![
                scale::Case { observer: Observer::Stream, max_flows: None },
                scale::Case { observer: Observer::Dashboard, max_flows: None },
                scale::Case { observer: Observer::Stream, max_flows: Some(4096) },
            ]
        } else {
            Vec::new()
        };
        Ok(Plan {
            quick: args.quick,
            repeats: args.repeats.unwrap_or(repeats),
            seconds,
            warmup_s: 1.0,
            workloads,
            scale_flows: args.scale_flows,
            scale_seconds: args.scale_seconds.unwrap_or(scale_seconds),
            scale_cases,
            forced_drops: runs(Part::Drops),
            drops_seconds: 2.0,
            cost_levels: match (runs(Part::Cost), args.cost_flows.is_empty()) {
                (false, _) => Vec::new(),
                (true, false) => args.cost_flows.clone(),
                (true, true) if args.quick => vec![1, 1000],
                (true, true) => vec![1, 100, 10_000],
            }
            .into_iter()
            .map(cost::Level::loopback)
            .chain((runs(Part::Cost) && !args.no_long_path).then_some(cost::Level::LONG_PATH))
            .collect(),
            cost_paths: cost::PATHS
                .into_iter()
                .filter(|p| args.cost_paths.is_empty() || args.cost_paths.iter().any(|a| a == p))
                .collect(),
            cost_rounds: args.cost_rounds.unwrap_or(if args.quick { 2 } else { 4 }),
            cost_seconds: args.cost_seconds.unwrap_or(if args.quick { 1.0 } else { 2.0 }),
            short_paths: if runs(Part::ShortFlows) { paths.to_vec() } else { Vec::new() },
            short_rate: args.short_rate,
            short_seconds: args.short_seconds.unwrap_or(if args.quick { 2.0 } else { 10.0 }),
            sockets: if runs(Part::Sockets) { args.sockets } else { 0 },
            sockets_rounds: args.sockets_rounds.unwrap_or(if args.quick { 1 } else { 2 }),
            export_flows: if runs(Part::Export) { vec![100, args.scale_flows] } else { Vec::new() },
        })
    }
}

/// Median and range of a set of measurements.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub(crate) fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { f64::midpoint(v[n / 2 - 1], v[n / 2]) };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }
}

/// Everything the benchmark found, as written to latest.json.
#[derive(Debug, Serialize)]
pub(crate) struct Results {
    pub targets: Vec<report::Target>,
    pub machine: machine::Machine,
    pub plan: Plan,
    pub observers: Vec<Observer>,
    pub notes: Vec<String>,
    pub workloads: Vec<throughput::WorkloadResult>,
    pub forced_drops: Vec<drops::ForcedDrops>,
    pub scale: Vec<scale::ScaleResult>,
    pub cost: Option<cost::CostResult>,
    pub short_flows: Vec<shortflows::ShortResult>,
    pub sockets: Option<sockets::SocketsResult>,
    pub export: Vec<exporter::ExportResult>,
    /// Runs that waited for QEMU guests (other work on this machine) to finish, and how long.
    pub waited_for_qemu_s: f64,
    pub duration_s: f64,
}

pub(crate) fn run(args: BenchArgs) -> Result<()> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the benchmark loads BPF programs and creates network namespaces: run it as root");
    }
    let started = Instant::now();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("workspace root")?.to_path_buf();
    let plan = Plan::from(&args)?;
    if args.while_qemu {
        quiet::dont_wait();
    }
    let bbrscope = match &args.bbrscope {
        Some(p) => p.clone(),
        None => crate::build_bbrscope(&root)?,
    };
    raise_open_file_limit()?;
    net::remove_stale()?;
    let _stats = RunTimeStats::enable()?;
    let machine = machine::Machine::describe(&root, &bbrscope);

    let mut notes = Vec::new();
    let mut observers = Observer::MEASURED.to_vec();
    let work_dir = std::env::temp_dir().join(format!("bbrscope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir)?;
    let bpftrace = if machine.bpftrace.is_some() {
        let script = work_dir.join("tcp_probe.bt");
        std::fs::write(&script, scenarios::BPFTRACE_SCRIPT)?;
        // bpftrace finds tracepoints through tracefs, which some machines do not mount: then it
        // runs with tracefs mounted in a mount namespace of its own (the host's mounts unchanged).
        let private_tracefs = !Path::new("/sys/kernel/tracing/events/tcp/tcp_probe").exists();
        if private_tracefs {
            notes.push(
                "tracefs is not mounted at /sys/kernel/tracing: bpftrace ran with it mounted in a mount namespace of \
                 its own."
                    .into(),
            );
        }
        Some(scenarios::Bpftrace { script, private_tracefs })
    } else {
        observers.retain(|&o| o != Observer::Bpftrace);
        notes.push("bpftrace is not installed: its column is missing (scripts/setup.sh installs it).".into());
        None
    };
    let pinger = Pinger::new()?;
    let setup = Setup { bbrscope: &bbrscope, pinger: &pinger, bpftrace };
    let needs_veth =
        plan.workloads.iter().any(|w| w.path == PathKind::Veth) || plan.short_paths.contains(&PathKind::Veth);
    let veth = if needs_veth { Some(net::Veth::create()?) } else { None };

    let mut waited = quiet::wait_for_quiet();
    let workloads = throughput::run(&plan, &observers, &setup, veth.as_ref())?;

    let cost = if plan.cost_levels.is_empty() {
        None
    } else {
        waited += quiet::wait_for_quiet();
        Some(cost::run(&setup, &plan.cost_paths, &plan.cost_levels, plan.cost_rounds, plan.cost_seconds)?)
    };
    let mut short_flows = Vec::new();
    for &path in &plan.short_paths {
        for observer in
            [shortflows::ShortObserver::Nothing, shortflows::ShortObserver::Sockops, shortflows::ShortObserver::Export]
        {
            waited += quiet::wait_for_quiet();
            crate::progress!("bench: short flows | {path:?}, {}", observer.label());
            short_flows.push(shortflows::run(
                &setup,
                path,
                observer,
                veth.as_ref(),
                plan.short_rate,
                plan.short_seconds,
                &work_dir,
            )?);
        }
    }
    drop(veth);
    let sockets = if plan.sockets == 0 {
        None
    } else {
        waited += quiet::wait_for_quiet();
        Some(sockets::run(&setup, plan.sockets, plan.sockets_rounds)?)
    };

    let mut export = Vec::new();
    for &flows in &plan.export_flows {
        waited += quiet::wait_for_quiet();
        crate::progress!("bench: export | {flows} flows");
        export.push(exporter::run(&setup, flows)?);
    }

    let mut forced_drops = Vec::new();
    for observer in [Observer::Stream, Observer::Dashboard].into_iter().filter(|_| plan.forced_drops) {
        crate::progress!("bench: forced drops | {}", observer.label());
        forced_drops.push(drops::run(&setup, observer, plan.drops_seconds)?);
    }
    let mut scale = Vec::new();
    for case in &plan.scale_cases {
        waited += quiet::wait_for_quiet();
        crate::progress!(
            "bench: {} flows | {} --max-flows {:?}",
            plan.scale_flows,
            case.observer.label(),
            case.max_flows
        );
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
        cost,
        short_flows,
        sockets,
        export,
        waited_for_qemu_s: waited.as_secs_f64(),
        duration_s: started.elapsed().as_secs_f64(),
    };
    results.targets = report::targets(&results);
    let out = args.out.unwrap_or_else(|| root.join("bench/results"));
    let (md, json) = report::write(&results, &out)?;
    print!("{}", std::fs::read_to_string(&md)?);
    crate::progress!("bench: wrote {} and {}", md.display(), json.display());
    Ok(())
}

/// `xtask idle-peer`: the far ends of the scale test's idle flows, in a process of their own.
pub(crate) fn idle_peer() -> Result<()> {
    idle::peer_main()
}

/// `xtask hold-sockets PAIRS IP`: a share of the sockets part's idle connections.
pub(crate) fn hold_sockets(pairs: usize, ip: std::net::Ipv4Addr) -> Result<()> {
    sockets::hold_main(pairs, ip)
}

/// 10,000 flows need more descriptors than the usual soft limit of 1024.
fn raise_open_file_limit() -> Result<()> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a valid rlimit that outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) } != 0 {
        bail!("getrlimit: {}", std::io::Error::last_os_error());
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: as above, a valid rlimit read only during the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) } != 0 {
        bail!("setrlimit: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

//! The per-event cost of each observer path against its floor: the same attach points with an
//! empty program (`bbrscope stream --observer floor-sockops|floor-tracepoint`), run alternately
//! with the real program in the same benchmark, at 1, 100 and 10,000 flows. Between them, to
//! say where the cost goes: on the sock_ops path a program that only looks up each socket's
//! storage (`--observer lookup-sockops`: what any observer keeping per-socket state must do per
//! ACK), and on both paths the real program with a sample interval longer than the run (the
//! per-ACK check alone, no sample ever due). The real program's time above the check's, over
//! the records it sent, is the cost of a sample record.
//!
//! On the sock_ops path a program only gets callbacks for connections opened after it attached,
//! so every run starts the observer first and opens its flows after: a few busy bulk flows and
//! the rest idle, each idle flow sending a few bytes every second.
//!
//! Loopback's round trips are microseconds, about one ACK each. Where this tool's users are, a
//! round trip is a hundred milliseconds and many ACKs, losses keep TCP in recovery, and the
//! sock_ops program runs on callbacks loopback never triggers (slow-path ACKs, packets built
//! while a sample is due). So the part also times every program on a long lossy path: BBR bulk
//! flows through the demo's emulator (this kernel has no netem). On the tracepoint path it also
//! times bpftrace's tcp_probe script, what a user would write by hand, on the same traffic.

use std::{
    process::Stdio,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use bbrscope_common::counter;
use bbrscope_emulator::{self as emulator, LinkConfig, LossSpec};
use serde::Serialize;

use super::{
    Spread, idle, measure, quiet,
    scenarios::{Setup, Traced, bbrscope_stream},
    throughput::{RETRIES, SETTLE},
    workload::{Bulk, Ends, PathKind, Side},
};

/// Busy flows at every level (one at the 1-flow level): unpaced loopback bulk flows, as in the
/// throughput part, so most events come from the same traffic at every level and only the idle
/// flows around them change.
pub(super) const BUSY_FLOWS: usize = 4;
/// Each idle flow sends this often: often enough that the idle flows' events (and the cache
/// misses a flow table would take on them) are a visible share of all events.
pub(super) const IDLE_PERIOD: Duration = Duration::from_secs(1);
/// From opening the flows to measuring: connection set-up callbacks are over, every idle flow has
/// sent at least five times. The sock_ops program gives an accepted connection up to four
/// send-path callbacks to show the process using it; an idle flow's peer only sends ACKs, from
/// softirq, one per idle period, so those are over after four periods. They are a cost per flow,
/// once, not per ACK: this part measures the steady state.
pub(super) const WARMUP: Duration = Duration::from_millis(5500);

/// The two observer paths, as `--observer` names them.
pub(super) const PATHS: [&str; 2] = ["sockops", "tracepoint"];

/// The long path: a far client on a lossy network, as in the seed articles and #21's audit
/// (150 ms, 3% random loss on the data direction, 20 Mbit/s, a one-BDP drop-tail queue).
fn long_path() -> LinkConfig {
    LinkConfig {
        rate_bps: 20_000_000,
        rtt: Duration::from_millis(150),
        buffer_bytes: 375_000,
        loss: LossSpec { rate: 0.03, burst: None },
        seed: 21,
    }
}
/// Its BBR bulk flows (no idle ones: the long path is about what a busy flow's traffic costs).
pub(super) const LONG_FLOWS: usize = 2;
pub(super) const LONG_CC: &str = "bbr";
/// A run on the long path measures at least this long: 2 s are 13 of its round trips, and
/// recovery episodes come and go over seconds.
pub(super) const LONG_SECONDS: f64 = 6.0;
/// The emulated link's number (its addresses 198.18.<n>.0/24), apart from the tests'.
const LONG_LINK: u8 = 121;

/// The traffic a cost level runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Traffic {
    /// Busy and idle flows on loopback.
    Loopback,
    /// [`LONG_FLOWS`] BBR flows through the emulated [`long_path`].
    LongPath,
}

/// One level of the part: a traffic and its flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Level {
    pub traffic: Traffic,
    pub flows: usize,
}

impl Level {
    pub(crate) fn loopback(flows: usize) -> Level {
        Level { traffic: Traffic::Loopback, flows }
    }

    pub(crate) const LONG_PATH: Level = Level { traffic: Traffic::LongPath, flows: LONG_FLOWS };

    pub(crate) fn label(self) -> String {
        match self.traffic {
            Traffic::Loopback => format!("{} flows", self.flows),
            Traffic::LongPath => format!("{LONG_FLOWS} flows, 150 ms 3% loss"),
        }
    }
}

/// The real program's sample interval in `Program::Check` runs: longer than any run, so no
/// sample is ever due (`stream --interval` takes at most this).
pub(super) const NEVER_DUE_MS: &str = "60000";
/// The share of runs that must send a record for the per-record cost to be worked out.
const MIN_RECORD_SHARE: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Program {
    /// The empty program on the same attach points.
    Floor,
    /// sock_ops only: the socket-storage lookup and an ACK count, nothing else.
    Lookup,
    /// bbrscope's program with no sample ever due: the per-ACK check alone.
    Check,
    /// bbrscope's program.
    Real,
    /// tracepoint only: bpftrace's tcp_probe script (`scenarios::BPFTRACE_SCRIPT`).
    Bpftrace,
}

impl Program {
    /// The programs measured on a path, in the order of the first round (bpftrace where it is
    /// installed).
    fn on(path: &str, bpftrace: bool) -> &'static [Program] {
        match (path, bpftrace) {
            ("sockops", _) => &[Program::Floor, Program::Lookup, Program::Check, Program::Real],
            (_, true) => &[Program::Floor, Program::Check, Program::Real, Program::Bpftrace],
            (_, false) => &[Program::Floor, Program::Check, Program::Real],
        }
    }

    fn observer(self, path: &str) -> String {
        match self {
            Program::Floor => format!("floor-{path}"),
            Program::Lookup => format!("lookup-{path}"),
            Program::Check | Program::Real => path.to_string(),
            Program::Bpftrace => "bpftrace".to_string(),
        }
    }

    fn label(self, path: &str) -> String {
        match self {
            Program::Check => format!("{path} --interval {NEVER_DUE_MS}"),
            _ => self.observer(path),
        }
    }
}

/// One observer run: attach, open the flows, measure, close.
#[derive(Debug, Serialize)]
pub(crate) struct CostRun {
    pub path: &'static str,
    pub program: Program,
    pub traffic: Traffic,
    pub flows: usize,
    pub round: u32,
    pub ns_per_event: Option<f64>,
    /// Program runs per second (tcp_probe runs, or sock_ops callbacks).
    pub runs_per_s: f64,
    /// TCP segments the host received per second (every socket's: the traffic's own measure).
    pub segs_in_per_s: f64,
    /// Time in the program per segment received: what the traffic pays, whatever a path runs on.
    pub ns_per_segment: Option<f64>,
    /// Time in the per-ACK program per second (1.0 = one core).
    pub bpf_cores: f64,
    /// bbrscope's own CPU time per second.
    pub cpu_cores: f64,
    pub records_per_s: f64,
    pub drops: u64,
    pub others_cpu_cores: f64,
    /// Seconds waited for QEMU guests to finish first; attempts (more when other processes
    /// disturbed the earlier ones); whether QEMU ran when this run ended anyway.
    pub waited_s: f64,
    pub attempts: u32,
    pub qemu_after: bool,
}

/// One path at one flow count: every program's runs of every round.
#[derive(Debug, Serialize)]
pub(crate) struct CostLevel {
    pub path: &'static str,
    pub traffic: Traffic,
    pub flows: usize,
    pub busy_flows: usize,
    pub floor_ns: Option<Spread>,
    /// sock_ops only: the storage lookup alone.
    pub lookup_ns: Option<Spread>,
    /// The real program with no sample due: the per-ACK check.
    pub check_ns: Option<Spread>,
    pub real_ns: Option<Spread>,
    /// Per round: real ns/event over the floor's in the same round.
    pub ratio: Option<Spread>,
    pub lookup_ratio: Option<Spread>,
    pub check_ratio: Option<Spread>,
    /// sock_ops only, per round: the check's ns/event over the storage lookup's (bbrscope's own
    /// per-ACK work beyond what any per-socket observer must do).
    pub check_over_lookup: Option<Spread>,
    /// Per round: the real program's time per second above what its runs would cost as checks
    /// alone (the same round's check ns/event), over its records per second: what one record
    /// (a sample, with the flow's OPEN before its first) costs.
    pub ns_per_record: Option<Spread>,
    pub floor_runs_per_s: Option<Spread>,
    pub real_runs_per_s: Option<Spread>,
    /// Time in the program per segment received, the floor's and bbrscope's.
    pub floor_ns_per_segment: Option<Spread>,
    pub real_ns_per_segment: Option<Spread>,
    /// bbrscope's program runs per segment received.
    pub real_runs_per_segment: Option<Spread>,
    /// tracepoint only, where bpftrace is installed: its tcp_probe program's.
    pub bpftrace_ns: Option<Spread>,
    pub bpftrace_ns_per_segment: Option<Spread>,
    pub real_cpu_cores: Option<Spread>,
    pub check_records_per_s: Option<Spread>,
    pub real_records_per_s: Option<Spread>,
    pub drops: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct CostResult {
    pub rounds: u32,
    pub seconds: f64,
    pub levels: Vec<CostLevel>,
    pub runs: Vec<CostRun>,
}

pub(super) fn run(
    setup: &Setup,
    paths: &[&'static str],
    levels: &[Level],
    rounds: u32,
    seconds: f64,
) -> Result<CostResult> {
    let bpftrace = setup.bpftrace.is_some();
    let total: usize =
        paths.iter().map(|p| Program::on(p, bpftrace).len()).sum::<usize>() * levels.len() * rounds as usize;
    let mut done = 0;
    let mut runs = Vec::new();
    let mut out = Vec::new();
    for &path in paths {
        let programs = Program::on(path, bpftrace);
        for &level in levels {
            // The emulated path lives as long as its level: its mover takes a CPU's share.
            let link = match level.traffic {
                Traffic::LongPath => {
                    Some(emulator::Link::new(LONG_LINK, &long_path()).context("the emulated long path")?)
                }
                Traffic::Loopback => None,
            };
            let mut mine = Vec::new();
            for round in 0..rounds {
                // Each round starts one program later: none always follows another, so a drift
                // of the machine over a round does not favour one.
                let order = (0..programs.len()).map(|i| programs[(i + round as usize) % programs.len()]);
                for program in order {
                    done += 1;
                    crate::progress!(
                        "bench: [{done}/{total}] cost | {} at {}, round {}",
                        program.label(path),
                        level.label(),
                        round + 1
                    );
                    let mut attempts = 1;
                    let run = loop {
                        let waited = quiet::wait_for_quiet();
                        let mut run = run_one(setup, path, program, level, link.as_ref(), round, seconds)
                            .with_context(|| format!("{} at {}", program.observer(path), level.label()))?;
                        run.waited_s = waited.as_secs_f64();
                        run.attempts = attempts;
                        run.qemu_after = quiet::qemu_running();
                        // Only QEMU is waited out and measured again: other load is reported (others' CPU),
                        // and the alternation spreads it over floor and real runs alike.
                        if !run.qemu_after || attempts > RETRIES || !quiet::waits() {
                            break run;
                        }
                        attempts += 1;
                        crate::progress!("bench:   QEMU started meanwhile: again");
                    };
                    mine.push(run);
                }
            }
            if let Some(link) = link {
                link.close()?;
            }
            out.push(summarise(path, level, &mine));
            runs.extend(mine);
        }
    }
    Ok(CostResult { rounds, seconds, levels: out, runs })
}

fn summarise(path: &'static str, level: Level, runs: &[CostRun]) -> CostLevel {
    let of = |p: Program, f: fn(&CostRun) -> Option<f64>| {
        Spread::of(&runs.iter().filter(|r| r.program == p).filter_map(f).collect::<Vec<_>>())
    };
    let rounds = runs.iter().map(|r| r.round).max().map_or(0, |r| r + 1);
    // One value per round, from that round's runs.
    let per_round = |f: &dyn Fn(Round) -> Option<f64>| {
        Spread::of(&(0..rounds).filter_map(|round| f(Round { runs, round })).collect::<Vec<_>>())
    };
    let over_floor = |p: Program| per_round(&|r| Some(r.ns(p)? / r.ns(Program::Floor)?));
    CostLevel {
        path,
        traffic: level.traffic,
        flows: level.flows,
        busy_flows: busy(level),
        floor_ns: of(Program::Floor, |r| r.ns_per_event),
        lookup_ns: of(Program::Lookup, |r| r.ns_per_event),
        check_ns: of(Program::Check, |r| r.ns_per_event),
        real_ns: of(Program::Real, |r| r.ns_per_event),
        ratio: over_floor(Program::Real),
        lookup_ratio: over_floor(Program::Lookup),
        check_ratio: over_floor(Program::Check),
        check_over_lookup: per_round(&|r| Some(r.ns(Program::Check)? / r.ns(Program::Lookup)?)),
        ns_per_record: per_round(&|r| {
            let real = r.get(Program::Real)?;
            let extra_ns_per_s = (real.ns_per_event? - r.ns(Program::Check)?) * real.runs_per_s;
            // Where records are a small share of the runs, their cost is within the runs'
            // spread: not measurable this way.
            (real.records_per_s >= MIN_RECORD_SHARE * real.runs_per_s).then(|| extra_ns_per_s / real.records_per_s)
        }),
        floor_runs_per_s: of(Program::Floor, |r| Some(r.runs_per_s)),
        real_runs_per_s: of(Program::Real, |r| Some(r.runs_per_s)),
        floor_ns_per_segment: of(Program::Floor, |r| r.ns_per_segment),
        real_ns_per_segment: of(Program::Real, |r| r.ns_per_segment),
        real_runs_per_segment: of(Program::Real, |r| (r.segs_in_per_s > 0.0).then(|| r.runs_per_s / r.segs_in_per_s)),
        bpftrace_ns: of(Program::Bpftrace, |r| r.ns_per_event),
        bpftrace_ns_per_segment: of(Program::Bpftrace, |r| r.ns_per_segment),
        real_cpu_cores: of(Program::Real, |r| Some(r.cpu_cores)),
        check_records_per_s: of(Program::Check, |r| Some(r.records_per_s)),
        real_records_per_s: of(Program::Real, |r| Some(r.records_per_s)),
        drops: runs.iter().filter(|r| matches!(r.program, Program::Real | Program::Check)).map(|r| r.drops).sum(),
    }
}

/// A level's busy flows: all of the long path's.
fn busy(level: Level) -> usize {
    match level.traffic {
        Traffic::Loopback => level.flows.min(BUSY_FLOWS),
        Traffic::LongPath => level.flows,
    }
}

/// The runs of one round of one level.
#[derive(Clone, Copy)]
struct Round<'a> {
    runs: &'a [CostRun],
    round: u32,
}

impl<'a> Round<'a> {
    fn get(self, program: Program) -> Option<&'a CostRun> {
        self.runs.iter().find(|r| r.round == self.round && r.program == program)
    }

    fn ns(self, program: Program) -> Option<f64> {
        self.get(program)?.ns_per_event
    }
}

fn run_one(
    setup: &Setup,
    path: &'static str,
    program: Program,
    level: Level,
    link: Option<&emulator::Link>,
    round: u32,
    seconds: f64,
) -> Result<CostRun> {
    let mut traced = match program {
        Program::Bpftrace => {
            let cmd = setup.bpftrace.as_ref().context("bpftrace is not installed")?.command();
            Traced::spawn(cmd, setup.pinger)?
        }
        _ => {
            let observer = program.observer(path);
            let mut args = vec!["--observer", &observer, "--stats-interval", "0"];
            if program == Program::Check {
                args.extend(["--interval", NEVER_DUE_MS]);
            }
            bbrscope_stream(setup, &args, Stdio::null())?
        }
    };
    thread::sleep(SETTLE);
    let busy = busy(level);
    let idle_flows = level.flows - busy;
    // Idle flows first: once the bulk flows run, they take both CPUs.
    let peer = if idle_flows > 0 { Some(idle::Peer::start()?) } else { None };
    let idle = match &peer {
        Some(p) => Some(idle::Flows::open(p.addr, idle_flows, IDLE_PERIOD)?),
        None => None,
    };
    // The segments the host receives: its own namespace's, and on the long path the emulated
    // ends' (every namespace's sockets run the programs).
    let mut sides = vec![Side::Here];
    let bulk = match link {
        Some(link) => {
            let ends = Ends::emulated(link);
            sides.extend([ends.sender, ends.receiver]);
            Bulk::start(busy, LONG_CC, ends, None)?
        }
        None => Bulk::start(busy, "cubic", Ends::of(PathKind::Loopback, None)?, None)?,
    };
    thread::sleep(WARMUP);
    let seconds = if link.is_some() { seconds.max(LONG_SECONDS) } else { seconds };

    let pid = traced.pid();
    let read = |traced: &Traced| -> Result<_> {
        let mut segs = 0;
        for side in &sides {
            segs += side.run(measure::tcp_in_segs)?;
        }
        Ok((
            Instant::now(),
            traced.probe.stats()?,
            measure::cpu_time(pid)?,
            traced.counters.as_ref().map(measure::Counters::read).transpose()?,
            measure::others_cpu_time(),
            segs,
        ))
    };
    let (t0, s0, cpu0, c0, others0, segs0) = read(&traced)?;
    thread::sleep(Duration::from_secs_f64(seconds));
    let (t1, s1, cpu1, c1, others1, segs1) = read(&traced)?;
    traced.check_alive()?;
    bulk.stop();
    drop(idle);
    drop(peer);
    traced.stop_in_time()?;

    let dt = (t1 - t0).as_secs_f64();
    let runs = s1.runs.saturating_sub(s0.runs);
    let bpf_ns = s1.run_time_ns.saturating_sub(s0.run_time_ns);
    let segs = segs1.saturating_sub(segs0);
    let (records_per_s, drops) = match (c0, c1) {
        (Some(a), Some(b)) => (
            (measure::records(&b) - measure::records(&a)) as f64 / dt,
            b[counter::RING_FULL as usize] - a[counter::RING_FULL as usize],
        ),
        _ => (0.0, 0),
    };
    Ok(CostRun {
        path,
        program,
        traffic: level.traffic,
        flows: level.flows,
        round,
        ns_per_event: (runs > 0).then(|| bpf_ns as f64 / runs as f64),
        runs_per_s: runs as f64 / dt,
        segs_in_per_s: segs as f64 / dt,
        ns_per_segment: (segs > 0).then(|| bpf_ns as f64 / segs as f64),
        bpf_cores: bpf_ns as f64 / 1e9 / dt,
        cpu_cores: cpu1.saturating_sub(cpu0).as_secs_f64() / dt,
        records_per_s,
        drops,
        others_cpu_cores: others1.saturating_sub(others0).as_secs_f64() / dt,
        waited_s: 0.0,
        attempts: 1,
        qemu_after: false,
    })
}

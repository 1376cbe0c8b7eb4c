//! One round of the demo: build an emulated link per algorithm, run a bulk flow over each for the
//! configured time while the eBPF observer samples them, and collect what happened.

use std::{
    slice,
    time::{Duration, Instant},
};

use anyhow::Result;
use ipnet::IpNet;
use tokio::signal::unix::{Signal, SignalKind, signal};

use super::{
    Conditions,
    display::Display,
    emulator::{self, Link, LinkCounters},
    progress::Row,
    traffic::{BulkFlow, TcpStats},
};
use crate::{
    observe::clock::Clock,
    observe::event::Event,
    observe::filter::{FilterSpec, Net},
    observe::flow::{FlowTable, Point},
    observe::kernel::loader::Options,
    observe::session::Live,
};

/// Observer sample period per flow: fine enough to see every CUBIC tooth and BBR's PROBE_RTT.
pub(crate) const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// What one flow did in one round.
pub(crate) struct FlowRun {
    pub cc: String,
    /// Bytes the receiver read per second of the run, times 8.
    pub goodput_bps: f64,
    pub tcp: TcpStats,
    /// The observer's samples of the sender (CLOCK_MONOTONIC timestamps).
    pub series: Vec<Point>,
    /// Bytes the receiver had read, every [`RECEIVED_PERIOD`] from the start (seconds, bytes).
    pub received: Vec<(f64, u64)>,
    /// When the flows started sending (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// How long the flows ran: the configured duration, or less when the run was stopped early.
    pub elapsed: Duration,
    /// What the emulator did on this flow's link (shared by all flows of a shared round).
    pub link: LinkCounters,
}

/// Why a round ended before its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The user pressed q in the dashboard: a normal end (exit 0), with what ran so far.
    Quit,
    /// A signal (or Ctrl-C in the dashboard): the summary so far, then exit 1 like iperf3.
    Interrupted(&'static str),
}

impl Stop {
    /// How the run was stopped, in words: "q", "SIGINT", "Ctrl-C".
    pub(crate) fn by(self) -> &'static str {
        match self {
            Stop::Quit => "q",
            Stop::Interrupted(s) => s,
        }
    }
}

/// The demo's flows as the eBPF observer sees them: only this process's port, only the
/// emulator's address range.
struct Watch {
    live: Live,
    table: FlowTable,
    history: usize,
    port: u16,
    /// Events kept for the display since it last took them (only when it wants them).
    pending: Vec<Event>,
    forward: bool,
}

impl Watch {
    fn start(port: u16, longest_run: Duration) -> Result<Self> {
        let range = Net(IpNet::V4(emulator::ADDRESSES));
        let opts = Options {
            interval: SAMPLE_PERIOD,
            filter: FilterSpec { port: Some(port), net: Some(range), ..FilterSpec::default() },
            ..Options::default()
        };
        let live = Live::start("bbrscope demo", &opts)?;
        let history = (longest_run.as_millis() / SAMPLE_PERIOD.as_millis()) as usize + 1000;
        Ok(Watch { live, table: FlowTable::new(history), history, port, pending: Vec::new(), forward: false })
    }

    /// What this kernel lacks, in words.
    pub(crate) fn degraded(&self) -> &[String] {
        self.live.degraded()
    }

    /// Keep events for the display (see [`Watch::take_events`]).
    pub(crate) fn forward_events(&mut self, on: bool) {
        self.forward = on;
    }

    async fn pump(&mut self) -> Result<()> {
        let (table, pending, forward) = (&mut self.table, &mut self.pending, self.forward);
        self.live
            .next_batch(|ev| {
                table.apply(&ev);
                if forward {
                    pending.push(ev);
                }
            })
            .await
    }

    fn flow(&self, flow: &BulkFlow) -> Option<&crate::observe::flow::Flow> {
        self.table.iter().find(|f| f.src == flow.local)
    }
}

/// SIGINT and SIGTERM, caught so the round can stop its flows and links before exiting.
struct Interrupt {
    int: Signal,
    term: Signal,
}

impl Interrupt {
    fn new() -> Result<Self> {
        Ok(Interrupt { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}

/// One round: which flows, over which path, for how long.
pub(crate) struct RoundSpec<'a> {
    pub cond: &'a Conditions,
    pub algos: &'a [String],
    pub repeat: u32,
    /// All flows through one link, competing for its bottleneck; otherwise each flow has its
    /// own identical link, so the algorithms are compared without meeting.
    pub shared: bool,
    pub label: &'a str,
}

/// How often each flow's received bytes are recorded (goodput and shares over time).
pub(crate) const RECEIVED_PERIOD: Duration = Duration::from_secs(1);

/// The observer, the display and the signal handlers that every round of one demo shares.
pub(crate) struct Session {
    watch: Watch,
    display: Display,
    interrupt: Interrupt,
}

impl Session {
    /// Starts the observer and the display for rounds of at most `longest_run`; `warn` gets a
    /// line for each observer feature this kernel lacks.
    pub(crate) fn open(headless: bool, longest_run: Duration, warn: &mut dyn FnMut(&str)) -> Result<Self> {
        let mut watch = Watch::start(demo_port(), longest_run)?;
        for note in watch.degraded() {
            warn(note);
        }
        let interrupt = Interrupt::new()?;
        let display = Display::new(headless, watch.degraded().to_vec(), longest_run)?;
        watch.forward_events(display.wants_events());
        Ok(Session { watch, display, interrupt })
    }

    /// Runs one round (see [`round`]).
    pub(crate) async fn round(&mut self, spec: &RoundSpec<'_>) -> Result<(Vec<FlowRun>, Option<Stop>)> {
        round(spec, &mut self.watch, &mut self.display, &mut self.interrupt).await
    }

    /// Closes the dashboard, so what follows prints on the normal screen.
    pub(crate) fn close(self) {}
}

/// Runs `spec.algos` at the same time for `cond.duration` or until stopped; what the flows did
/// up to then is returned either way, with the reason for an early stop. Flows and links are
/// gone when it returns.
async fn round(
    spec: &RoundSpec<'_>,
    watch: &mut Watch,
    display: &mut Display,
    interrupt: &mut Interrupt,
) -> Result<(Vec<FlowRun>, Option<Stop>)> {
    let (cond, algos) = (spec.cond, spec.algos);
    let cfg = cond.link(spec.repeat);
    let n_links = if spec.shared { 1 } else { algos.len() };
    let links = (0..n_links).map(|i| Link::new(i as u8, &cfg)).collect::<Result<Vec<_>>>()?;
    let mut flows = if spec.shared {
        BulkFlow::connect_all(&links[0], watch.port, algos)?
    } else {
        let per_link = links.iter().zip(algos).map(|(l, cc)| BulkFlow::connect_all(l, watch.port, slice::from_ref(cc)));
        per_link.collect::<Result<Vec<_>>>()?.into_iter().flatten().collect()
    };
    watch.table = FlowTable::new(watch.history);
    let start_ns = Clock::monotonic_ns();
    let start = Instant::now();
    for f in &mut flows {
        f.start()?;
    }
    let mut received: Vec<Vec<(f64, u64)>> = vec![Vec::new(); flows.len()];
    let mut tick = tokio::time::interval(display.period());
    let mut sample = tokio::time::interval(RECEIVED_PERIOD);
    let deadline = tokio::time::sleep(cond.duration);
    tokio::pin!(deadline);
    let stop = loop {
        tokio::select! {
            r = watch.pump() => {
                r?;
                for ev in watch.pending.drain(..) {
                    display.on_event(&ev);
                }
            }
            _ = sample.tick() => {
                let t = start.elapsed().as_secs_f64();
                for (series, f) in received.iter_mut().zip(&flows) {
                    series.push((t, f.received()));
                }
            }
            _ = tick.tick() => {
                let rows: Vec<Row> = flows.iter().map(|f| {
                    let m = watch.flow(f).and_then(|fl| fl.metrics.as_ref());
                    Row {
                        cc: &f.cc,
                        received: f.received(),
                        cwnd: m.and_then(|m| m.cwnd),
                        srtt_us: m.and_then(|m| m.srtt_us),
                        retransmits: m.and_then(|m| m.retrans_total),
                    }
                }).collect();
                display.draw(spec.label, start.elapsed(), cond.duration, &rows)?;
            }
            () = &mut deadline => break None,
            sig = interrupt.recv() => break Some(Stop::Interrupted(sig)),
            r = display.stop_requested() => break Some(r?),
        }
    };
    let elapsed = start.elapsed();
    let measured = flows.iter().map(|f| Ok((f.received(), f.tcp_stats()?))).collect::<Result<Vec<_>>>()?;
    for (series, (bytes, _)) in received.iter_mut().zip(&measured) {
        series.push((elapsed.as_secs_f64(), *bytes));
    }
    display.clear();
    let series: Vec<Vec<Point>> = flows
        .iter()
        .map(|f| watch.flow(f).map(|fl| fl.history.iter().filter(|p| p.ts_ns >= start_ns).cloned().collect()))
        .map(Option::unwrap_or_default)
        .collect();
    drop(flows);
    let counters = links.into_iter().map(Link::close).collect::<Result<Vec<_>>>()?;
    let link_of = |i: usize| counters[if spec.shared { 0 } else { i }];
    let runs = algos
        .iter()
        .zip(measured)
        .zip(series)
        .zip(received)
        .enumerate()
        .map(|(i, (((cc, (bytes, tcp)), series), received))| FlowRun {
            cc: cc.clone(),
            goodput_bps: bytes as f64 * 8.0 / elapsed.as_secs_f64().max(1e-3),
            tcp,
            series,
            received,
            start_ns,
            elapsed,
            link: link_of(i),
        })
        .collect();
    Ok((runs, stop))
}

/// The receiving port of this process's demo flows: distinct per process, so concurrent demos
/// (each in its own namespaces) are told apart by the observer.
pub(crate) fn demo_port() -> u16 {
    20_000 + (std::process::id() % 40_000) as u16
}

/// A whole demo: its rounds (all algorithms at once, or one after the other), repeated.
pub(crate) struct Rounds<'a> {
    pub cond: &'a Conditions,
    pub algos: &'a [String],
    pub repeat: u32,
    pub sequential: bool,
    pub headless: bool,
    /// The path in words, for the display's title.
    pub title: &'a str,
}

/// Every flow's run, and why the demo ended early (with how long its last round ran).
pub(crate) struct Ran {
    pub runs: Vec<FlowRun>,
    pub stopped: Option<(Stop, Duration)>,
}

/// Runs every round under one observer and one display; `warn` gets a line for each observer
/// feature this kernel lacks. The dashboard (unless headless) is closed when this returns, so
/// the summary prints on the normal screen.
pub(crate) async fn all(r: &Rounds<'_>, warn: &mut dyn FnMut(&str)) -> Result<Ran> {
    let mut session = Session::open(r.headless, r.cond.duration, warn)?;
    let mut runs = Vec::new();
    let mut stopped = None;
    'rounds: for repeat in 0..r.repeat {
        let groups: Vec<&[String]> = if r.sequential { r.algos.chunks(1).collect() } else { vec![r.algos] };
        for group in groups {
            let label = format!("{} — {} — run {}/{}", group.join(" vs "), r.title, repeat + 1, r.repeat);
            let spec = RoundSpec { cond: r.cond, algos: group, repeat, shared: false, label: &label };
            let (ran, stop) = session.round(&spec).await?;
            let elapsed = ran.iter().map(|f| f.elapsed).max().unwrap_or_default();
            runs.extend(ran);
            if let Some(stop) = stop {
                stopped = Some((stop, elapsed));
                break 'rounds;
            }
        }
    }
    session.close();
    Ok(Ran { runs, stopped })
}

//! One round of the demo: build an emulated link per algorithm, run a bulk flow over each for the
//! configured time while the eBPF observer samples them, and collect what happened.

use std::time::{Duration, Instant};

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
pub const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// What one flow did in one round.
pub struct FlowRun {
    pub cc: String,
    /// Bytes the receiver read per second of the run, times 8.
    pub goodput_bps: f64,
    pub tcp: TcpStats,
    /// The observer's samples of the sender (CLOCK_MONOTONIC timestamps).
    pub series: Vec<Point>,
    /// When the flows started sending (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
    /// How long the flows ran: the configured duration, or less when the run was stopped early.
    pub elapsed: Duration,
    pub link: LinkCounters,
}

/// Why a round ended before its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The user pressed q in the dashboard: a normal end (exit 0), with what ran so far.
    Quit,
    /// A signal (or Ctrl-C in the dashboard): the summary so far, then exit 1 like iperf3.
    Interrupted(&'static str),
}

impl Stop {
    /// How the run was stopped, in words: "q", "SIGINT", "Ctrl-C".
    pub fn by(self) -> &'static str {
        match self {
            Stop::Quit => "q",
            Stop::Interrupted(s) => s,
        }
    }
}

/// The demo's flows as the eBPF observer sees them: only this process's port, only the
/// emulator's address range.
pub struct Watch {
    live: Live,
    table: FlowTable,
    history: usize,
    port: u16,
    /// Events kept for the display since it last took them (only when it wants them).
    pending: Vec<Event>,
    forward: bool,
}

impl Watch {
    pub fn start(port: u16, longest_run: Duration) -> Result<Self> {
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
    pub fn degraded(&self) -> &[String] {
        self.live.degraded()
    }

    /// Keep events for the display (see [`Watch::take_events`]).
    pub fn forward_events(&mut self, on: bool) {
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
pub struct Interrupt {
    int: Signal,
    term: Signal,
}

impl Interrupt {
    pub fn new() -> Result<Self> {
        Ok(Interrupt { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
        }
    }
}

/// Runs `algos` at the same time, each over its own identical link, for `cond.duration` or until
/// stopped; what the flows did up to then is returned either way, with the reason for an early
/// stop. Flows and links are gone when it returns.
pub async fn round(
    cond: &Conditions,
    algos: &[String],
    repeat: u32,
    watch: &mut Watch,
    display: &mut Display,
    interrupt: &mut Interrupt,
    label: &str,
) -> Result<(Vec<FlowRun>, Option<Stop>)> {
    let cfg = cond.link(repeat);
    let links = (0..algos.len()).map(|i| Link::new(i as u8, &cfg)).collect::<Result<Vec<_>>>()?;
    let mut flows =
        links.iter().zip(algos).map(|(l, cc)| BulkFlow::connect(l, watch.port, cc)).collect::<Result<Vec<_>>>()?;
    watch.table = FlowTable::new(watch.history);
    let start_ns = Clock::monotonic_ns();
    let start = Instant::now();
    for f in &mut flows {
        f.start()?;
    }
    let mut tick = tokio::time::interval(display.period());
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
                display.draw(label, start.elapsed(), cond.duration, &rows)?;
            }
            _ = &mut deadline => break None,
            sig = interrupt.recv() => break Some(Stop::Interrupted(sig)),
            r = display.stop_requested() => break Some(r?),
        }
    };
    let elapsed = start.elapsed();
    let measured = flows.iter().map(|f| Ok((f.received(), f.tcp_stats()?))).collect::<Result<Vec<_>>>()?;
    display.clear();
    let series: Vec<Vec<Point>> = flows
        .iter()
        .map(|f| watch.flow(f).map(|fl| fl.history.iter().filter(|p| p.ts_ns >= start_ns).cloned().collect()))
        .map(Option::unwrap_or_default)
        .collect();
    drop(flows);
    let counters = links.into_iter().map(Link::close).collect::<Result<Vec<_>>>()?;
    let runs = algos
        .iter()
        .zip(measured)
        .zip(series)
        .zip(counters)
        .map(|(((cc, (received, tcp)), series), link)| FlowRun {
            cc: cc.clone(),
            goodput_bps: received as f64 * 8.0 / elapsed.as_secs_f64().max(1e-3),
            tcp,
            series,
            start_ns,
            elapsed,
            link,
        })
        .collect();
    Ok((runs, stop))
}

/// The receiving port of this process's demo flows: distinct per process, so concurrent demos
/// (each in its own namespaces) are told apart by the observer.
pub fn demo_port() -> u16 {
    20_000 + (std::process::id() % 40_000) as u16
}

/// A whole demo: its rounds (all algorithms at once, or one after the other), repeated.
pub struct Rounds<'a> {
    pub cond: &'a Conditions,
    pub algos: &'a [String],
    pub repeat: u32,
    pub sequential: bool,
    pub headless: bool,
    /// The path in words, for the display's title.
    pub title: &'a str,
}

/// Every flow's run, and why the demo ended early (with how long its last round ran).
pub struct Ran {
    pub runs: Vec<FlowRun>,
    pub stopped: Option<(Stop, Duration)>,
}

/// Runs every round under one observer and one display; `warn` gets a line for each observer
/// feature this kernel lacks. The dashboard (unless headless) is closed when this returns, so
/// the summary prints on the normal screen.
pub async fn all(r: &Rounds<'_>, warn: &mut dyn FnMut(&str)) -> Result<Ran> {
    let duration = r.cond.duration;
    let mut watch = Watch::start(demo_port(), duration)?;
    for note in watch.degraded() {
        warn(note);
    }
    let mut interrupt = Interrupt::new()?;
    let mut display = Display::new(r.headless, watch.degraded().to_vec(), duration)?;
    watch.forward_events(display.wants_events());
    let mut runs = Vec::new();
    let mut stopped = None;
    'rounds: for repeat in 0..r.repeat {
        let groups: Vec<&[String]> = if r.sequential { r.algos.chunks(1).collect() } else { vec![r.algos] };
        for group in groups {
            let label = format!("{} — {} — run {}/{}", group.join(" vs "), r.title, repeat + 1, r.repeat);
            let (ran, stop) = round(r.cond, group, repeat, &mut watch, &mut display, &mut interrupt, &label).await?;
            let elapsed = ran.iter().map(|f| f.elapsed).max().unwrap_or_default();
            runs.extend(ran);
            if let Some(stop) = stop {
                stopped = Some((stop, elapsed));
                break 'rounds;
            }
        }
    }
    drop(display);
    Ok(Ran { runs, stopped })
}

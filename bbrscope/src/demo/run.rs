//! One round of the demo: build an emulated link per algorithm, run a bulk flow over each for the
//! configured time while the eBPF observer samples them, and collect what happened.

use std::{
    slice,
    time::{Duration, Instant},
};

use anyhow::Result;
use bbrscope_emulator::{self as emulator, Link, LinkCounters};
use ipnet::IpNet;
use tokio::time::Interval;

use super::{
    Conditions,
    display::Display,
    progress::Row,
    traffic::{BulkFlow, TcpStats},
};
use crate::{
    observe::{
        clock::Clock,
        event::Event,
        filter::{FilterSpec, Net},
        flow::{Change, Flow, FlowTable, Point},
        kernel::loader::Options,
        pipeline::{self, Control, End, Retention, Settings, Side, Signals, Sink},
        session::Live,
    },
    tui,
};

/// Observer sample period per flow: fine enough to see every CUBIC tooth and BBR's PROBE_RTT.
pub(crate) const SAMPLE_PERIOD: Duration = Duration::from_millis(50);

/// What one flow did in one round.
pub(crate) struct FlowRun {
    pub(crate) cc: String,
    /// Bytes the receiver read per second of the run, times 8.
    pub(crate) goodput_bps: f64,
    pub(crate) tcp: TcpStats,
    /// The observer's samples of the sender (CLOCK_MONOTONIC timestamps).
    pub(crate) series: Vec<Point>,
    /// Bytes the receiver had read, every [`RECEIVED_PERIOD`] from the start (seconds, bytes).
    pub(crate) received: Vec<(f64, u64)>,
    /// When the flows started sending (CLOCK_MONOTONIC ns).
    pub(crate) start_ns: u64,
    /// How long the flows ran: the configured duration, or less when the run was stopped early.
    pub(crate) elapsed: Duration,
    /// What the emulator did on this flow's link (shared by all flows of a shared round).
    pub(crate) link: LinkCounters,
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
    /// The flows of the round that runs, with their history for the whole round.
    table: FlowTable,
    history: usize,
    port: u16,
}

impl Watch {
    /// The round's flows are kept to its end, however long one stalls on a lossy link, and
    /// listed when closed (the dashboard compares them until the round is over).
    const RETENTION: Retention = Retention { silent: None, ..Retention::DASHBOARD };

    fn start(port: u16, longest_run: Duration) -> Result<Self> {
        let range = Net(IpNet::V4(emulator::ADDRESSES));
        let opts = Options {
            interval: SAMPLE_PERIOD,
            filter: FilterSpec { port: Some(port), net: Some(range), ..FilterSpec::default() },
            ..Options::default()
        };
        let live = Live::start("bbrscope demo", &opts)?;
        let history = (longest_run.as_millis() / SAMPLE_PERIOD.as_millis()) as usize + 1000;
        Ok(Watch { live, table: FlowTable::new(history), history, port })
    }

    /// What this kernel lacks, in words.
    pub(crate) fn degraded(&self) -> &[String] {
        self.live.degraded()
    }
}

/// The sending side of `flow` in `table`.
fn flow_of<'t>(table: &'t FlowTable, flow: &BulkFlow) -> Option<&'t Flow> {
    table.iter().find(|f| f.src == flow.local)
}

/// One round: which flows, over which path, for how long.
pub(crate) struct RoundSpec<'a> {
    pub(crate) cond: &'a Conditions,
    pub(crate) algos: &'a [String],
    pub(crate) repeat: u32,
    /// All flows through one link, competing for its bottleneck; otherwise each flow has its
    /// own identical link, so the algorithms are compared without meeting.
    pub(crate) shared: bool,
    pub(crate) label: &'a str,
}

/// How often each flow's received bytes are recorded (goodput and shares over time).
pub(crate) const RECEIVED_PERIOD: Duration = Duration::from_secs(1);

/// The observer, the display and the signal handlers that every round of one demo shares.
pub(crate) struct Session {
    watch: Watch,
    display: Display,
    signals: Signals,
}

impl Session {
    /// Starts the observer and the display for rounds of at most `longest_run`; `warn` gets a
    /// line for each observer feature this kernel lacks.
    pub(crate) fn open(headless: bool, longest_run: Duration, warn: &mut dyn FnMut(&str)) -> Result<Self> {
        let signals = Signals::catch()?;
        let watch = Watch::start(demo_port(), longest_run)?;
        for note in watch.degraded() {
            warn(note);
        }
        let display = Display::new(headless, watch.degraded().to_vec(), longest_run)?;
        Ok(Session { watch, display, signals })
    }

    /// Runs one round (see [`round`]).
    pub(crate) async fn round(&mut self, spec: &RoundSpec<'_>) -> Result<(Vec<FlowRun>, Option<Stop>)> {
        round(spec, &mut self.watch, &mut self.display, &mut self.signals).await
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
    signals: &mut Signals,
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
    let mut sink = Round {
        flows: &flows,
        received: vec![Vec::new(); flows.len()],
        start,
        label: spec.label,
        total: cond.duration,
        stop: None,
    };
    let mut pace = Pace {
        sample: tokio::time::interval(RECEIVED_PERIOD),
        frame: tokio::time::interval(display.period()),
        display,
    };
    let settings = Settings { duration: Some(cond.duration), stats: None, retention: Watch::RETENTION };
    // The round writes nothing but its display, whose errors are the loop's own.
    let end = pipeline::run(&mut watch.live, signals, &mut watch.table, &mut sink, &mut pace, settings).await??;
    let stop = match end {
        End::Deadline => None,
        End::Interrupt => Some(Stop::Interrupted("SIGINT")),
        End::Terminate => Some(Stop::Interrupted("SIGTERM")),
        End::Sink => sink.stop,
    };
    let Round { mut received, .. } = sink;
    let elapsed = start.elapsed();
    let measured = flows.iter().map(|f| Ok((f.received(), f.tcp_stats()?))).collect::<Result<Vec<_>>>()?;
    for (series, (bytes, _)) in received.iter_mut().zip(&measured) {
        series.push((elapsed.as_secs_f64(), *bytes));
    }
    display.clear();
    let series: Vec<Vec<Point>> = flows
        .iter()
        .map(|f| {
            flow_of(&watch.table, f).map(|fl| fl.history.iter().filter(|p| p.ts_ns >= start_ns).cloned().collect())
        })
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

/// One round as the sink of the observer's loop: the flows' received bytes sampled, the display
/// drawn from the loop's table, until its time is up, a signal, q or Ctrl-C.
struct Round<'a> {
    flows: &'a [BulkFlow],
    /// Per flow: (seconds since the start, bytes received), every [`RECEIVED_PERIOD`].
    received: Vec<Vec<(f64, u64)>>,
    start: Instant,
    label: &'a str,
    total: Duration,
    /// Why the display ended the round (q, or Ctrl-C in its raw mode).
    stop: Option<Stop>,
}

/// What a round waits for beside the observer: the received-bytes clock, the display's frames
/// and its keys.
struct Pace<'a> {
    sample: Interval,
    frame: Interval,
    display: &'a mut Display,
}

enum Wake {
    Sample,
    Frame,
    Input(tui::Input),
}

impl Side for Pace<'_> {
    type Wake = Wake;

    async fn next(&mut self) -> Wake {
        tokio::select! {
            _ = self.sample.tick() => Wake::Sample,
            _ = self.frame.tick() => Wake::Frame,
            input = self.display.input() => Wake::Input(input),
        }
    }
}

impl<'a> Sink for Round<'a> {
    type Side = Pace<'a>;

    fn event(&mut self, _ev: &Event, _change: Change, _table: &FlowTable) -> std::io::Result<()> {
        Ok(())
    }

    fn woken(&mut self, wake: Wake, pace: &mut Pace<'a>, table: &FlowTable) -> Result<Control> {
        match wake {
            Wake::Sample => {
                let t = self.start.elapsed().as_secs_f64();
                for (series, f) in self.received.iter_mut().zip(self.flows) {
                    series.push((t, f.received()));
                }
            }
            Wake::Frame => {
                let rows: Vec<Row> = self
                    .flows
                    .iter()
                    .map(|f| {
                        let m = flow_of(table, f).and_then(|fl| fl.metrics.as_ref());
                        Row {
                            cc: &f.cc,
                            received: f.received(),
                            cwnd: m.and_then(|m| m.cwnd),
                            srtt_us: m.and_then(|m| m.srtt_us),
                            retransmits: m.and_then(|m| m.retrans_total),
                        }
                    })
                    .collect();
                pace.display.draw(self.label, self.start.elapsed(), self.total, &rows, table)?;
            }
            Wake::Input(input) => {
                self.stop = pace.display.key(input, table)?;
                if self.stop.is_some() {
                    return Ok(Control::Stop);
                }
            }
        }
        Ok(Control::Continue)
    }
}

/// The receiving port of this process's demo flows: distinct per process, so concurrent demos
/// (each in its own namespaces) are told apart by the observer.
pub(crate) fn demo_port() -> u16 {
    20_000 + (std::process::id() % 40_000) as u16
}

/// A whole demo: its rounds (all algorithms at once, or one after the other), repeated.
pub(crate) struct Rounds<'a> {
    pub(crate) cond: &'a Conditions,
    pub(crate) algos: &'a [String],
    pub(crate) repeat: u32,
    pub(crate) sequential: bool,
    pub(crate) headless: bool,
    /// The path in words, for the display's title.
    pub(crate) title: &'a str,
}

/// Every flow's run, and why the demo ended early (with how long its last round ran).
pub(crate) struct Ran {
    pub(crate) runs: Vec<FlowRun>,
    pub(crate) stopped: Option<(Stop, Duration)>,
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

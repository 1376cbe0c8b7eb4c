//! The experiment while it runs: the observer's loop ([`pipeline::run`]) with the experiment as
//! its sink — each finished flow of an arm becomes an [`Observation`] (and every record of the
//! arms' flows goes to `--record`) — and as its side: the guardrail's and the live report's
//! analyses off the loop ([`Monitor`]), the dashboard's keys and frames, or a progress line.
//! The only file of the experiment that drives the kernel session and the terminal; everything
//! it shows or decides comes from the files beside it.

use std::{
    collections::HashSet,
    fs::File,
    io::{self, IsTerminal as _},
    pin::Pin,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use bbrscope_common::assign_mode;
use ipnet::IpNet;
use ratatui::crossterm::event::{KeyCode, KeyModifiers};
use tokio::time::{Interval, Sleep};

use crate::{
    experiment::{
        Observation,
        groups::PrefixList,
        guardrail::{GuardDecision, Held, RTT_BANDS_MS, SwitchedBack, held_of, note_switched_back},
        monitor::Monitor,
        progress::{LiveExperiment, Update},
        schedule::Kind,
        setup::{Design, Setup},
        sums::Sums,
    },
    observe::{
        clock::{self, Clock},
        event::Event,
        flow::{Change, FlowTable},
        kernel::loader::Assignment,
        pipeline::{self, Control, End, Retention, Settings, Side, Signals, Sink},
        session::Live,
        sink::json::JsonSink,
    },
    tui::{
        self, Dashboard,
        app::{Action, App},
    },
};

/// How often a progress line is written when stdout is not a terminal.
const LINE_PERIOD: Duration = Duration::from_secs(10);
/// How long the experiment's flows still open when it ends may take to finish
/// (docs/experiment-method.md, "Flows still running"): those that do count as usual, the rest as
/// in flight. A second Ctrl-C or SIGTERM, or q in the dashboard, ends the wait at once.
pub(crate) const DRAIN: Duration = Duration::from_secs(10);

/// What a live experiment starts from.
pub(crate) struct Watch {
    /// The kernel's assignment, already on ([`start_assigning`]).
    pub(crate) assigning: Assigning,
    /// No live display (else the dashboard on a terminal, progress lines elsewhere).
    pub(crate) headless: bool,
    pub(crate) state: LiveExperiment,
    pub(crate) setup: Setup,
    /// Stop after this many finished flows of the experiment.
    pub(crate) flows: Option<u64>,
    /// `--record`: every record of the arms' flows.
    pub(crate) recorder: Option<JsonSink<File>>,
    /// `--metrics-listen`: the sums a scrape reads, filled as flows finish.
    pub(crate) sums: Option<Sums>,
    /// The kernel's clock in Unix time, as the recorder has it.
    pub(crate) clock: Clock,
}

/// How it went.
pub(crate) struct Watched {
    pub(crate) obs: Vec<Observation>,
    /// Why it ended before its time or flow count, if it did.
    pub(crate) stopped_by: Option<String>,
    /// The guardrail's decision that stopped it.
    pub(crate) guard: Option<GuardDecision>,
    /// The client groups it sent back to their status quo while the run went on.
    pub(crate) switched_back: Vec<SwitchedBack>,
}

/// Runs the experiment `live` carries until `duration`, its flow count, a signal, q in the
/// dashboard or the guardrail ends it. The kernel side is detached (`live` dropped) before the
/// terminal is given back, so the report that follows prints on the normal screen while new
/// connections already get the default algorithm again.
pub(crate) async fn run(mut live: Live, signals: &mut Signals, watch: Watch, duration: Duration) -> Result<Watched> {
    let (dash, shown) = if watch.headless {
        (None, Shown::Off(Box::new(watch.state)))
    } else if !io::stdout().is_terminal() {
        (None, Shown::Lines(Box::new(watch.state)))
    } else {
        let app = App::new("live", live.degraded().to_vec(), None).with_panel("experiment");
        (Some(Box::new(Dashboard::new()?)), Shown::Dashboard(Box::new(app), Box::new(watch.state)))
    };
    // The live report costs an analysis every period: only when it is shown.
    let shows_report = dash.is_some();
    let frame = if shows_report { Duration::from_millis(1000 / tui::FPS) } else { LINE_PERIOD };
    let mut side = Watching {
        assigning: watch.assigning,
        monitor: Monitor::new(watch.setup, shows_report),
        check: tokio::time::interval(Monitor::PERIOD),
        frame: tokio::time::interval(frame),
        dash,
    };
    let mut sink = Experiment {
        shown,
        obs: Vec::new(),
        recorder: watch.recorder,
        flows: watch.flows,
        started: Instant::now(),
        stopped_by: None,
        guard: None,
        switched_back: Vec::new(),
        sums: watch.sums,
        clock: watch.clock,
    };
    // The dashboard draws the loop's table: then it keeps each flow's history, and a finished
    // flow listed for a while.
    let (mut table, retention) = if shows_report {
        (App::table(), Retention { keep_ended: true, closed: Retention::DASHBOARD.closed, ..Retention::UNTIL_END })
    } else {
        (FlowTable::new(0), Retention::UNTIL_END)
    };
    let settings = Settings { duration: Some(duration), stats: None, retention };
    let end = pipeline::run(&mut live, signals, &mut table, &mut sink, &mut side, settings)
        .await?
        .context("writing the --record file")?;
    match end {
        End::Interrupt => sink.stopped_by = Some("stopped by Ctrl-C".into()),
        End::Terminate => sink.stopped_by = Some("stopped by SIGTERM".into()),
        End::Deadline | End::Sink => {}
    }
    // New connections keep the status quo from here on: the drain waits only for the flows the
    // experiment gave an arm. After a guardrail stop, no wait: the stop is reported at once, and
    // the flows open then (on the arm found harmful) are in flight.
    side.assigning.stop().context("ending the experiment's assignment")?;
    let wait = if sink.guard.as_ref().is_some_and(|g| g.stop) { Duration::ZERO } else { DRAIN };
    drain(
        &mut live,
        signals,
        &mut table,
        &mut sink,
        &mut side,
        Settings { duration: Some(wait), stats: None, retention },
    )
    .await?;
    // Not on a terminal: a last progress line, so the log says how it ended however soon (the
    // guardrail can stop a run before the first line period is over).
    if !shows_report {
        sink.frame(&mut side.dash, &table)?;
    }
    drop(live);
    drop(side);
    if let Some(rec) = sink.recorder.as_mut() {
        rec.flush().context("writing the --record file")?;
    }
    Ok(Watched { obs: sink.obs, stopped_by: sink.stopped_by, guard: sink.guard, switched_back: sink.switched_back })
}

/// Waits up to `settings.duration` ([`DRAIN`], or nothing after a guardrail stop) for the arms'
/// flows open now to finish (each one that does is an observation as usual), then takes those
/// still running as censored observations: their elapsed time and bytes so far. Flows that open
/// during the drain have no arm (assignment stopped before it): they are neither recorded nor
/// counted.
async fn drain(
    live: &mut Live,
    signals: &mut Signals,
    table: &mut FlowTable,
    exp: &mut Experiment,
    side: &mut Watching,
    settings: Settings,
) -> Result<()> {
    let open: HashSet<u64> = table.iter().filter(|f| f.life.end.is_none() && has_arm(f)).map(|f| f.id).collect();
    if open.is_empty() {
        return Ok(());
    }
    let mut draining = Draining { exp, open };
    if settings.duration.is_some_and(|d| !d.is_zero()) {
        pipeline::run(live, signals, table, &mut draining, side, settings)
            .await?
            .context("writing the --record file")?;
    }
    let now = Clock::monotonic_ns();
    let Draining { exp, open } = draining;
    let running: Vec<Observation> = table
        .iter()
        .filter(|f| open.contains(&f.id))
        .filter_map(|f| Observation::in_flight(f, now, &exp.clock))
        .collect();
    // The sums count them as the report does (censored, their elapsed time), and none runs now.
    if let Some(sums) = &exp.sums {
        for o in &running {
            sums.add(o);
        }
        sums.in_flight([0, 0]);
    }
    exp.obs.extend(running);
    Ok(())
}

/// The loop's sink while the experiment drains: the flows open at its end, the others ignored;
/// the dashboard still drawn, and q or Ctrl-C in it ends the wait.
struct Draining<'a> {
    exp: &'a mut Experiment,
    /// Flows not finished yet.
    open: HashSet<u64>,
}

impl Sink for Draining<'_> {
    type Side = Watching;

    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let id = ev.head().flow;
        if !self.open.contains(&id) {
            return Ok(());
        }
        if change == Change::Ended {
            self.open.remove(&id);
        }
        self.exp.take(ev, change, table)
    }

    fn woken(&mut self, wake: Wake, side: &mut Watching, table: &FlowTable) -> Result<Control> {
        match wake {
            Wake::Frame => self.exp.frame(&mut side.dash, table)?,
            Wake::Key(key) => {
                if self.exp.key(&mut side.dash, key, table)?.is_some() {
                    return Ok(Control::Stop);
                }
            }
            // The guardrail and the live report are done with: the experiment has ended (and
            // with it the switchback's blocks: assignment is off).
            Wake::Analysed(_) | Wake::Check | Wake::Block => {}
        }
        Ok(Control::Continue)
    }

    fn done(&self) -> bool {
        self.open.is_empty()
    }
}

/// The experiment's state as the loop's sink.
struct Experiment {
    shown: Shown,
    obs: Vec<Observation>,
    recorder: Option<JsonSink<File>>,
    flows: Option<u64>,
    started: Instant,
    stopped_by: Option<String>,
    guard: Option<GuardDecision>,
    /// The client groups the guardrail sent back so far.
    switched_back: Vec<SwitchedBack>,
    clock: Clock,
    sums: Option<Sums>,
}

/// What the experiment waits for beside the observer. The terminal is here, apart from what it
/// shows, so that the loop can wait for a key while the observer's events update the state.
struct Watching {
    /// The kernel's assignment, and a switchback's next block.
    assigning: Assigning,
    monitor: Monitor,
    /// When the monitor may start an analysis.
    check: Interval,
    /// When the dashboard is drawn, or a progress line written.
    frame: Interval,
    dash: Option<Box<Dashboard>>,
}

enum Wake {
    Analysed(Box<Result<Update>>),
    /// A switchback's block has ended.
    Block,
    Check,
    Frame,
    Key(tui::Input),
}

impl Side for Watching {
    type Wake = Wake;

    async fn next(&mut self) -> Wake {
        tokio::select! {
            update = self.monitor.finished() => Wake::Analysed(Box::new(update)),
            () = self.assigning.boundary() => Wake::Block,
            _ = self.check.tick() => Wake::Check,
            _ = self.frame.tick() => Wake::Frame,
            key = input(&mut self.dash) => Wake::Key(key),
        }
    }
}

impl Sink for Experiment {
    type Side = Watching;

    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        self.take(ev, change, table)
    }

    fn woken(&mut self, wake: Wake, side: &mut Watching, table: &FlowTable) -> Result<Control> {
        match wake {
            Wake::Analysed(update) => {
                let update = (*update)?;
                if let Some(g) = &update.guard {
                    let before = held_of(&self.switched_back);
                    note_switched_back(&mut self.switched_back, g, self.started.elapsed().as_secs_f64());
                    let now = held_of(&self.switched_back);
                    if now != before {
                        side.assigning.hold(now).context("sending a client group back to its status quo")?;
                        if let Some(sums) = &self.sums {
                            sums.hold(now);
                        }
                    }
                }
                let stop = update.guard.as_ref().filter(|g| g.stop).cloned();
                self.shown.state().update(update);
                if let Some(g) = stop {
                    self.stopped_by = Some(format!("stopped early by the guardrail: {}", g.reason));
                    self.guard = Some(g);
                    return Ok(Control::Stop);
                }
            }
            Wake::Block => side.assigning.switch().context("switching the switchback's block")?,
            Wake::Check => {
                side.monitor.maybe_start(&self.obs, self.started.elapsed());
                if let Some(sums) = &self.sums {
                    sums.in_flight(super::progress::open_per_arm(table));
                }
            }
            Wake::Frame => self.frame(&mut side.dash, table)?,
            Wake::Key(key) => {
                if let Some(why) = self.key(&mut side.dash, key, table)? {
                    self.stopped_by = Some(why);
                    return Ok(Control::Stop);
                }
            }
        }
        Ok(Control::Continue)
    }

    fn done(&self) -> bool {
        self.flows.is_some_and(|n| self.obs.len() as u64 >= n)
    }
}

impl Experiment {
    /// An event of the loop: recorded when it belongs to an arm's flow, and a finished flow of
    /// an arm becomes an observation.
    fn take(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        if let Some(rec) = self.recorder.as_mut()
            && in_arm(ev, table)
        {
            rec.event(ev, change, table)?;
        }
        if change == Change::Ended
            && let Some(o) = table.get(ev.head().flow).and_then(|f| Observation::from_flow(f, &self.clock))
        {
            self.shown.state().flow_finished(o.arm);
            if let Some(sums) = &self.sums {
                sums.add(&o);
            }
            self.obs.push(o);
        }
        Ok(())
    }

    /// The dashboard drawn, or a progress line written.
    fn frame(&mut self, dash: &mut Option<Box<Dashboard>>, table: &FlowTable) -> Result<()> {
        let state = self.shown.state();
        state.elapsed = self.started.elapsed();
        state.now = clock::unix_now();
        state.count_open(table);
        match (&mut self.shown, dash) {
            (Shown::Lines(x), _) => crate::output::errln!("{}", x.progress_line()),
            (Shown::Dashboard(app, x), Some(dash)) => {
                app.tick(Clock::monotonic_ns(), table);
                dash.draw(app, table, Some(&**x))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A key in the dashboard; why the experiment ends if it is q, or Ctrl-C (a key in raw mode,
    /// meaning what the signal means). Other keys work as in `bbrscope top`.
    fn key(
        &mut self,
        dash: &mut Option<Box<Dashboard>>,
        input: tui::Input,
        table: &FlowTable,
    ) -> Result<Option<String>> {
        let (Shown::Dashboard(app, x), Some(dash)) = (&mut self.shown, dash) else { return Ok(None) };
        let ctrl_c = matches!(&input, tui::Input::Key(k)
            if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL));
        if tui::handle(app, input, table) == Action::Quit {
            return Ok(Some(if ctrl_c { "stopped by Ctrl-C" } else { "stopped with q" }.into()));
        }
        dash.draw(app, table, Some(&**x))?;
        Ok(None)
    }
}

/// Which arm the kernel gives new connections: with a switchback, the block's by the wall clock
/// (every block boundary the next is computed from the schedule again, so the switches never
/// drift from it); else each connection's own draw, or its client's hashed arm, set once when
/// assignment starts.
pub(crate) struct Assigning {
    assignment: Assignment,
    design: Design,
    /// Each `--prefix-list` group's prefixes, held when the guardrail sends the group back.
    lists: Vec<Vec<IpNet>>,
    /// When the current block ends (a switchback's, until the experiment ends).
    next: Option<Pin<Box<Sleep>>>,
}

impl Assigning {
    /// Assignment turned on (the loader leaves it off): per connection, by client, or the
    /// current block's.
    fn new(mut assignment: Assignment, design: Design, lists: Vec<Vec<IpNet>>) -> Result<Self> {
        assignment.set(assign_mode_at(design, clock::unix_now()))?;
        let next = design.schedule().map(|_| Box::pin(tokio::time::sleep(Duration::ZERO)));
        let mut a = Assigning { assignment, design, lists, next };
        a.switch()?;
        Ok(a)
    }

    /// Sets the assignment of the block it is now, and wakes at its end. A wake a little early
    /// (the wall clock against the timer's) finds the same block and waits the rest.
    fn switch(&mut self) -> Result<()> {
        let (Some(s), Some(next)) = (self.design.schedule(), self.next.as_mut()) else { return Ok(()) };
        let now = clock::unix_now();
        self.assignment.set(assign_mode_at(self.design, now))?;
        let left = s.start_of(s.block_of(now) + 1) - now;
        next.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs_f64(left.max(0.0)));
        Ok(())
    }

    /// Completes when the current block ends; never without a switchback, or once stopped.
    async fn boundary(&mut self) {
        match self.next.as_mut() {
            Some(next) => next.as_mut().await,
            None => std::future::pending().await,
        }
    }

    /// New connections of the groups in `held` (RTT bands of [`RTT_BANDS_MS`], prefix-list
    /// groups) keep their status quo from here on, whatever the block.
    fn hold(&mut self, held: Held) -> Result<()> {
        let prefixes: Vec<IpNet> = (0..self.lists.len())
            .filter(|&g| held.lists & 1 << g != 0)
            .flat_map(|g| self.lists[g].iter().copied())
            .collect();
        self.assignment.hold(&RTT_BANDS_MS, held.bands, &prefixes)
    }

    /// New connections keep the status quo from here on (those given an arm keep it).
    fn stop(&mut self) -> Result<()> {
        self.next = None;
        self.assignment.set(assign_mode::OFF)
    }
}

/// Turns the experiment's assignment on in the kernel `live` loaded (the loader leaves it off):
/// per connection, by client, or the current block's. Before the run says it runs, so that every
/// connection accepted after that line gets an arm.
pub(crate) fn start_assigning(live: &mut Live, design: Design, lists: &[PrefixList]) -> Result<Assigning> {
    let assignment = live.take_assignment().context("the experiment's assignment is not in the kernel")?;
    Assigning::new(assignment, design, lists.iter().map(|l| l.nets.clone()).collect())
}

/// The kernel's assignment (`assign_mode`) for connections opening at `now` (Unix seconds): the
/// block's arm in a switchback's A or B block, each connection's own draw in its mixed blocks
/// and in a per-connection A/B, its client's hashed arm in a client-clustered one.
fn assign_mode_at(design: Design, now: f64) -> u32 {
    match design {
        Design::PerConnection => assign_mode::PER_CONNECTION,
        Design::Client { .. } => assign_mode::CLIENT,
        Design::Switchback(s) => match s.kind(s.block_of(now)) {
            Kind::Mixed => assign_mode::PER_CONNECTION,
            Kind::A => assign_mode::FIXED_A,
            Kind::B => assign_mode::FIXED_B,
        },
    }
}

/// What shows the experiment while it runs: the dashboard on a terminal (the flow views and the
/// experiment's own, which it opens on), a progress line on stderr every [`LINE_PERIOD`] when
/// stdout is not a terminal (a log, a pipe), nothing with `--headless`. Like `bbrscope demo`.
enum Shown {
    Off(Box<LiveExperiment>),
    Lines(Box<LiveExperiment>),
    Dashboard(Box<App>, Box<LiveExperiment>),
}

impl Shown {
    fn state(&mut self) -> &mut LiveExperiment {
        match self {
            Shown::Off(x) | Shown::Lines(x) | Shown::Dashboard(_, x) => x,
        }
    }
}

/// The dashboard's next input; never completes without a dashboard.
async fn input(dash: &mut Option<Box<Dashboard>>) -> tui::Input {
    match dash {
        Some(d) => d.input().await,
        None => std::future::pending().await,
    }
}

/// Whether `ev` belongs to a flow of the experiment (it has an arm).
fn in_arm(ev: &Event, table: &FlowTable) -> bool {
    table.get(ev.head().flow).is_some_and(has_arm)
}

fn has_arm(f: &crate::observe::flow::Flow) -> bool {
    f.life.owner.as_ref().is_some_and(|o| o.arm.is_some())
}

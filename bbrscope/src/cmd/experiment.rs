//! `bbrscope experiment`: run a randomized A/B of two congestion-control algorithms on this host's
//! new connections (or re-analyse a recorded one), and report per arm and client group. The flags
//! become one checked request first (cli/experiment.rs); from there this only goes down.

use std::{
    fs::File,
    io::{BufReader, IsTerminal as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use crate::{
    cli::experiment::ExperimentArgs,
    error::{Exit, usage},
    experiment::{
        Observation,
        decide::PrimaryMetric,
        fleet::{self, Judgments, Source},
        guardrail::{GuardDecision, SwitchedBack},
        print::{self, Output},
        progress::{Limit, LiveExperiment},
        record,
        report::{self, Context, InFlight, InScope},
        request::{Looks, Mode, Request, Run},
        run::{Watch, Watched},
        setup::{self, Design, Setup},
        status_quo::StatusQuo,
        sums,
    },
    observe::clock::Clock,
    observe::filter::FilterSpec,
    observe::kernel::loader::{ExperimentSpec, Options},
    observe::pipeline::Signals,
    observe::session::Live,
    observe::sink::json::JsonSink,
    sys::experiment_lock as lock,
};

pub async fn run(args: ExperimentArgs) -> Result<()> {
    let request = args.request()?;
    match &request.mode {
        Mode::Analyze { files, arms } => analyze(&request, files, arms.as_ref()),
        Mode::Fleet { source, watch: None } => fleet(&request, source),
        Mode::Fleet { source, watch: Some(w) } => watch(&request, source, w).await,
        Mode::Run(run) => experiment(&request, run).await,
    }
}

/// A live experiment: the lock, the kernel side attached, the flows watched until it ends, and
/// the report.
async fn experiment(request: &Request, run: &Run) -> Result<()> {
    let spec = &run.spec;
    let limit = run.flows.map_or(Limit::Time(run.duration), Limit::Flows);
    let setup = Setup {
        arms: Some(spec.arms.each_ref().map(ToString::to_string)),
        split_pct: spec.split_pct,
        scope: scope(spec),
        rule: request.rule,
        guardrail_pct: run.guardrail.then_some(request.guardrail_pct),
        prefix_lists: request.prefix_lists.clone().unwrap_or_default(),
        status_quo: StatusQuo::discover().algorithm,
        design: run.design,
        metric: request.metric,
    };
    let state = LiveExperiment::new(spec, run.design, limit, run.guardrail);
    let _lock = lock::acquire(&running(run, &state))?;
    let listener = sums::bind(run.metrics.as_ref())?;
    // Before anything is attached: a signal from here on ends the experiment cleanly.
    let mut signals = Signals::catch()?;
    let opts = Options {
        filter: FilterSpec { port: spec.port, cgroup: spec.cgroup.clone(), ..FilterSpec::default() },
        experiment: Some(spec.clone()),
        kernel_log: run.kernel_log,
        ..Options::default()
    };
    let mut live = Live::start("bbrscope experiment", &opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    // One clock for the recording and the live observations: a flow's end is the same instant in both.
    let clock = Clock::new();
    let (recorder, mut record_end) = recorder(run.record.as_deref(), &setup, clock)?.unzip();
    let assigning = crate::experiment::run::start_assigning(&mut live, run.design, &setup.prefix_lists)?;
    crate::output::errln!(
        "bbrscope: experiment running: {} (arm A) vs {} (arm B), {}, {}% of connections in scope; {} ends it",
        spec.arms[0],
        spec.arms[1],
        assignment_words(spec, run.design),
        spec.sample_pct,
        if std::io::stdout().is_terminal() && !run.headless { "q in the dashboard" } else { "Ctrl-C" }
    );
    let (sums, served) = sums::serve(listener, &setup)?.unzip();
    let watch = Watch {
        assigning,
        headless: run.headless,
        state,
        setup: setup.clone(),
        flows: run.flows,
        recorder,
        sums,
        clock,
    };
    let Watched { obs, stopped_by, guard, switched_back } =
        crate::experiment::run::run(live, &mut signals, watch, run.duration).await?;
    sums::last_scrape(served.as_ref(), &mut signals).await;
    if let (Some(p), Some(f)) = (&run.record, record_end.as_mut()) {
        record::end(f, p, &obs, stopped_by.as_deref(), guard.as_ref())?;
    }
    finish(request, &obs, &setup, Ended { stopped_by, guard, switched_back }, false)
}

/// `--record FILE`: its sink, and the file again for the record's end.
fn recorder(path: Option<&Path>, setup: &Setup, clock: Clock) -> Result<Option<(JsonSink<File>, File)>> {
    let Some(p) = path else { return Ok(None) };
    let f = record::create(p, setup)?;
    let end = f.try_clone().with_context(|| format!("creating {}", p.display()))?;
    Ok(Some((JsonSink::new(f, clock), end)))
}

/// `--analyze FILE...`: the report of a recorded run, or of several recordings of one experiment
/// pooled, with this invocation's rule, its arms where the recording does not name them, and the
/// recording's prefix-list groups unless `--prefix-list` gives others.
fn analyze(request: &Request, files: &[PathBuf], arms: Option<&[String; 2]>) -> Result<()> {
    let capture = pooled(files)?;
    let mut setup = capture.setup;
    setup.rule = request.rule;
    if let Some(lists) = &request.prefix_lists {
        setup.prefix_lists.clone_from(lists);
    }
    if let Some(arms) = arms {
        setup.arms = Some(arms.clone());
    }
    // Another metric than the recorded one is a question asked after the fact: allowed (the
    // header then names it), and never silent.
    setup.metric = request.metric.or(setup.metric);
    if let Some(q) = setup.metric.and_then(PrimaryMetric::quantile)
        && setup.design != Design::PerConnection
    {
        let design = if matches!(setup.design, Design::Switchback(_)) { "a switchback" } else { "client-clustered" };
        usage!(
            "--metric p{} answers only a per-connection design, and this recording's is {design}: its flows are not \
             draws of their own (--metric per-response or time-weighted)",
            (q * 100.0).round()
        );
    }
    setup.guardrail_pct = setup.guardrail_pct.or(Some(request.guardrail_pct));
    // The groups the live guardrail sent back are in its replay, printed with it.
    let ended = Ended { stopped_by: capture.stopped_by, guard: capture.guard, switched_back: Vec::new() };
    finish(request, &capture.obs, &setup, ended, true)
}

/// The recordings `files` read, each once, and pooled ([`record::pool`]).
fn pooled(files: &[PathBuf]) -> Result<record::Capture> {
    let mut seen = Vec::new();
    let mut captures = Vec::new();
    for path in files {
        let same_file = std::fs::canonicalize(path).ok();
        if same_file.is_some() && seen.contains(&same_file) {
            usage!("--analyze {}: given twice (each recording pools once)", path.display());
        }
        seen.push(same_file);
        captures.push((path.display().to_string(), read_capture(path)?));
    }
    record::pool(captures)
}

/// `--analyze-prometheus`: the report of a running experiment across the hosts whose sums one
/// Prometheus holds.
/// Exits 3 when the guardrail's rule on every host's flows together says stop (as a host's run
/// does when its own guardrail stops it), 2 when a service set its own algorithm.
fn fleet(request: &Request, source: &Source) -> Result<()> {
    let look = fleet::analyze(source, request.rule, request.metric, request.guardrail_pct)?;
    let rep = report::build(&look.analysis, &Context::default());
    let fleet = fleet_of(source, look);
    let stop = fleet.guardrail.as_ref().is_some_and(|g| g.stop);
    print::show(&rep, &Output { json: request.json, fleet: Some(fleet), ..Output::default() })?;
    if stop {
        return Err(Exit(3).into());
    }
    if rep.integrity.overridden {
        return Err(Exit(2).into());
    }
    Ok(())
}

/// What the fleet report says of the hosts it read, and its guardrail.
fn fleet_of(source: &Source, look: fleet::Look) -> print::Fleet {
    let hosts = look.hosts;
    print::Fleet {
        id: source.id.clone(),
        hosts: hosts.all,
        ended: hosts.ended,
        prometheus: source.url.clone(),
        running: InFlight { a: hosts.running[0], b: hosts.running[1] },
        guardrail: look.guard,
    }
}

/// `--analyze-prometheus --watch`: the fleet's answer again every `every` until a signal: a line
/// per group (or a JSON report per line); a look where no host serves the experiment says so and
/// the watch goes on (it may not have started, or Prometheus may be away).
async fn watch(request: &Request, source: &Source, w: &Looks) -> Result<()> {
    let judged = Judgments::serve(w.serve, &source.id)?;
    let mut signals = Signals::catch()?;
    loop {
        let now = crate::units::fmt_utc_time(crate::observe::clock::unix_now());
        match fleet::analyze(source, request.rule, request.metric, request.guardrail_pct) {
            Ok(look) => {
                let rep = report::build(&look.analysis, &Context::default());
                if let Some((j, _)) = &judged {
                    j.record(&rep, look.hosts.all, look.guard.as_ref());
                }
                let fleet = fleet_of(source, look);
                print::look(&rep, &fleet, &now, request.json)?;
            }
            Err(e) => crate::output::errln!("bbrscope: {now}: {e:#}"),
        }
        tokio::select! {
            () = tokio::time::sleep(w.every) => {}
            _ = signals.recv() => return Ok(()),
        }
    }
}

/// How connections get their arms, for the line that starts the run: the seed too, so that a
/// switchback or a client design can be re-analysed (and its arms given again) from the log alone.
fn assignment_words(spec: &ExperimentSpec, design: Design) -> String {
    match design {
        Design::PerConnection => format!("{}% to B", spec.split_pct),
        Design::Client { salt } => {
            format!(
                "by client: every connection of a client address on its arm, {}% of clients to B (--seed {salt})",
                spec.split_pct
            )
        }
        Design::Switchback(s) => format!(
            "{}switchback: blocks of {}s (the first {}s of each left out) where everyone runs A, everyone B, or \
             {}% to B, in {} (--seed {}{})",
            if s.host.is_some() { "host-level " } else { "" },
            s.block_s,
            s.burn_in_s,
            spec.split_pct,
            if s.host.is_some() { "this host's own seeded order" } else { "a seeded order" },
            s.seed,
            s.host.map_or_else(String::new, |h| format!(", host salt {h}"))
        ),
    }
}

/// What the lock file says of this run (`status` shows it).
fn running(run: &Run, state: &LiveExperiment) -> lock::Running {
    let spec = &run.spec;
    lock::Running {
        pid: std::process::id(),
        arms: spec.arms.each_ref().map(ToString::to_string),
        design: match run.design {
            Design::PerConnection => "per connection".into(),
            Design::Client { salt } => format!("client: every connection of a client on one arm, --seed {salt}"),
            Design::Switchback(s) => match s.host {
                Some(h) => format!("host-level switchback: {}s blocks, --seed {}, host salt {h}", s.block_s, s.seed),
                None => format!("switchback: {}s blocks, --seed {}", s.block_s, s.seed),
            },
        },
        split_pct: spec.split_pct,
        by_client: matches!(run.design, Design::Client { .. }),
        sample_pct: spec.sample_pct,
        scope: state.scope.clone(),
        started_at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ends: state.ends(),
        guardrail: run.guardrail,
        record: run.record.as_ref().map(|p| p.display().to_string()),
        id: run.metrics.as_ref().map(|m| m.id.clone()).unwrap_or_default(),
        claim: Some(lock::Claim {
            port: spec.port,
            cgroup: spec.cgroup.as_ref().map(|c| c.path.clone()),
            dst: spec.dst.clone(),
        }),
    }
}
/// The connections the experiment covers, as its report names them.
fn scope(spec: &ExperimentSpec) -> InScope {
    InScope {
        known: true,
        port: spec.port,
        cgroup: spec.cgroup.as_ref().map(|c| c.path.display().to_string()),
        dst: spec.dst.clone(),
    }
}

/// The flows of a recorded experiment.
fn read_capture(path: &Path) -> Result<record::Capture> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) => usage!("--analyze {}: {e}", path.display()),
    };
    let is_file = f.metadata().is_ok_and(|m| m.is_file());
    let capture = record::read(BufReader::new(f), is_file).with_context(|| format!("reading {}", path.display()))?;
    if capture.obs.is_empty() {
        usage!("{} has no flow_summary records with an experiment arm (record one with --record)", path.display());
    }
    for note in capture.notes() {
        crate::output::errln!("bbrscope: warning: {}: {note}", path.display());
    }
    Ok(capture)
}

/// The report, and the exit status the outcome has: 3 when the guardrail stopped the run (not for
/// `--analyze`, which reports a recorded stop), 2 when the service set its own algorithm (nothing
/// could be concluded).
/// How a run ended, as its report tells it.
struct Ended {
    stopped_by: Option<String>,
    guard: Option<GuardDecision>,
    switched_back: Vec<SwitchedBack>,
}

fn finish(request: &Request, obs: &[Observation], setup: &Setup, ended: Ended, replaying: bool) -> Result<()> {
    let Ended { stopped_by, guard, switched_back } = ended;
    let replay =
        replaying.then(|| setup::guardrail_replay(obs, setup, setup.guardrail_pct.unwrap_or(request.guardrail_pct)));
    let stopped_by_guard = guard.as_ref().is_some_and(|g| g.stop);
    let rep = print::finish(
        obs,
        setup,
        &Output {
            json: request.json,
            plot: request.plot.clone(),
            recommend: request.recommend,
            stopped_by,
            guard,
            switched_back,
            replay,
            fleet: None,
        },
    )?;
    if stopped_by_guard && !replaying {
        return Err(Exit(3).into());
    }
    if rep.integrity.overridden {
        return Err(Exit(2).into());
    }
    Ok(())
}

//! `bbrscope experiment`: run a randomized A/B of two congestion-control algorithms on this host's
//! new connections (or re-analyse a recorded one), and report per arm and client group.

use std::{
    fs::File,
    io::{BufReader, IsTerminal as _},
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    cli::experiment::ExperimentArgs,
    error::{Exit, UsageError, usage},
    experiment::{
        Arm, Observation,
        analysis::PrefixList,
        decide::Rule,
        glue::{self, Setup},
        guardrail::GuardDecision,
        live::{Limit, LiveExperiment, Monitor},
        lock, record,
        report::InScope,
        watch::{self, Watch, Watched},
    },
    observe::clock::Clock,
    observe::filter::FilterSpec,
    observe::kernel::loader::{ExperimentSpec, Options},
    observe::pipeline::Signals,
    observe::session::Live,
    observe::sink::json::JsonSink,
    sys::{cc, cgroup},
};

pub async fn run(args: ExperimentArgs) -> Result<()> {
    let rule = rule(&args)?;
    let prefix_lists = prefix_lists(&args)?;
    if let Some(file) = &args.analyze {
        return analyze(&args, file, rule, prefix_lists);
    }
    let spec = validate(&args)?;
    let limit = match args.flows {
        Some(n) => Limit::Flows(n),
        None => Limit::Time(args.duration.unwrap_or(DEFAULT_DURATION)),
    };
    let setup = Setup {
        arms: Some(spec.arms.each_ref().map(ToString::to_string)),
        split_pct: spec.split_pct,
        scope: scope(&spec),
        rule,
        guardrail_pct: (!args.no_guardrail).then_some(args.guardrail_pct),
        prefix_lists,
    };
    let state = LiveExperiment::new(&spec, limit, !args.no_guardrail);
    let _lock = lock::acquire(&running(&args, &spec, &state))?;
    // Before anything is attached: a signal from here on ends the experiment cleanly.
    let mut signals = Signals::catch()?;
    let opts = Options {
        filter: FilterSpec { port: args.port, cgroup: spec.cgroup.clone(), ..FilterSpec::default() },
        experiment: Some(spec.clone()),
        ..Options::default()
    };
    let live = Live::start("bbrscope experiment", &opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    let recorder = match &args.record {
        Some(p) => Some(JsonSink::new(record::create(p, &setup)?, Clock::new())),
        None => None,
    };
    crate::output::errln!(
        "bbrscope: experiment running: {} (arm A) vs {} (arm B), {}% to B, {}% of connections in scope; {} ends it",
        spec.arms[0],
        spec.arms[1],
        spec.split_pct,
        spec.sample_pct,
        if std::io::stdout().is_terminal() && !args.headless { "q in the dashboard" } else { "Ctrl-C" }
    );
    let watch = Watch { headless: args.headless, state, setup: setup.clone(), flows: args.flows, recorder };
    let Watched { obs, stopped_by, guard } =
        watch::run(live, &mut signals, watch, args.duration.unwrap_or(DEFAULT_DURATION)).await?;
    if let Some(p) = &args.record {
        record::end(p, stopped_by.as_deref(), guard.as_ref())?;
    }
    finish(&args, &obs, &setup, stopped_by, guard, false)
}

/// `--analyze FILE`: the report of a recorded run, with this invocation's rule and groups (and
/// its arms, where the recording does not name them).
fn analyze(args: &ExperimentArgs, file: &Path, rule: Rule, prefix_lists: Vec<PrefixList>) -> Result<()> {
    let capture = read_capture(file)?;
    let mut setup = capture.setup;
    setup.rule = rule;
    setup.prefix_lists = prefix_lists;
    if let [a, b] = args.arms.as_slice() {
        setup.arms = Some([a.clone(), b.clone()]);
    }
    setup.guardrail_pct = setup.guardrail_pct.or(Some(args.guardrail_pct));
    finish(args, &capture.obs, &setup, capture.stopped_by, capture.guard, true)
}

/// What the lock file says of this run (`status` shows it).
fn running(args: &ExperimentArgs, spec: &ExperimentSpec, state: &LiveExperiment) -> lock::Running {
    lock::Running {
        pid: std::process::id(),
        arms: spec.arms.each_ref().map(ToString::to_string),
        split_pct: spec.split_pct,
        sample_pct: spec.sample_pct,
        scope: state.scope.clone(),
        started_at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        ends: state.ends(),
        guardrail: !args.no_guardrail,
        record: args.record.as_ref().map(|p| p.display().to_string()),
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

/// `--delta` and `--min-effect-ms` as the decision's rule.
fn rule(args: &ExperimentArgs) -> Result<Rule> {
    if !(args.delta > 0.0 && args.delta < 100.0) {
        usage!("--delta must be a percentage above 0 and below 100 (e.g. 5): the smallest change that matters");
    }
    if !(args.min_effect_ms >= 0.0 && args.min_effect_ms.is_finite()) {
        usage!("--min-effect-ms must be 0 or more milliseconds (e.g. 5)");
    }
    Ok(Rule { delta: args.delta / 100.0, min_abs_s: args.min_effect_ms / 1e3, ..Rule::default() })
}

fn prefix_lists(args: &ExperimentArgs) -> Result<Vec<PrefixList>> {
    let Some(p) = &args.prefix_list else { return Ok(Vec::new()) };
    let text = match std::fs::read_to_string(p) {
        Ok(t) => t,
        Err(e) => usage!("--prefix-list {}: {e}", p.display()),
    };
    match PrefixList::parse(&text) {
        Ok(l) if !l.is_empty() => Ok(l),
        Ok(_) => usage!("--prefix-list {}: no groups (one `LABEL CIDR [CIDR...]` per line)", p.display()),
        Err(e) => usage!("--prefix-list {}: {e}", p.display()),
    }
}

/// Ten minutes, unless `--duration` or `--flows` says otherwise.
const DEFAULT_DURATION: Duration = Duration::from_secs(600);

fn validate(args: &ExperimentArgs) -> Result<ExperimentSpec> {
    let [a, b] = args.arms.as_slice() else {
        usage!("--arms takes two arms, A then B (e.g. --arms cubic,bbr or --arms bbr,bbr+iw32)");
    };
    let available = cc::available()?;
    let mut arms = Vec::new();
    for label in [a, b] {
        let arm = Arm::parse(label).map_err(UsageError::new)?;
        if !available.contains(&arm.cc) {
            usage!("--arms: '{}' is not an available algorithm (available: {})", arm.cc, available.join(", "));
        }
        arms.push(arm);
    }
    let arms: [Arm; 2] = arms.try_into().expect("two arms");
    if !(args.guardrail_pct > 0.0 && args.guardrail_pct <= 1000.0) {
        usage!("--guardrail-pct must be a percentage above 0 (e.g. 20)");
    }
    if args.dst.len() > crate::observe::kernel::loader::MAX_EXPERIMENT_RANGES {
        usage!(
            "--dst: {} ranges, the kernel's scope holds at most {}: give wider prefixes",
            args.dst.len(),
            crate::observe::kernel::loader::MAX_EXPERIMENT_RANGES
        );
    }
    if let Some(p) = &args.plot {
        crate::experiment::glue::check_plot_path(p)?;
    }
    let pins = pinned_cgroup_programs();
    if !pins.is_empty() {
        usage!(
            "bbrscope apply --cgroup programs are in place ({}): they set the algorithm of new connections too, \
             so the experiment's arms would not be what was assigned; revert them first (bbrscope revert --cgroup PATH)",
            pins.join(", ")
        );
    }
    let cgroup = args.cgroup.as_deref().map(cgroup::resolve).transpose()?;
    Ok(ExperimentSpec {
        arms,
        split_pct: args.split,
        sample_pct: args.sample,
        port: args.port,
        cgroup,
        dst: args.dst.iter().map(|n| n.0).collect(),
    })
}

/// Links `bbrscope apply --cgroup` pinned (they set algorithms on new connections).
fn pinned_cgroup_programs() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(crate::apply::cgroup::PIN_DIR) else { return Vec::new() };
    dir.flatten().map(|e| e.path().display().to_string()).collect()
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
fn finish(
    args: &ExperimentArgs,
    obs: &[Observation],
    setup: &Setup,
    stopped_by: Option<String>,
    guard: Option<GuardDecision>,
    replaying: bool,
) -> Result<()> {
    let replay = replaying.then(|| {
        let pct = setup.guardrail_pct.unwrap_or(args.guardrail_pct);
        let rule =
            crate::experiment::guardrail::StopRule { margin_pct: pct, alpha: setup.rule.alpha, ..Default::default() };
        let names = setup.arms.clone().unwrap_or_else(|| crate::experiment::analysis::arm_names(obs));
        crate::experiment::guardrail::replay(obs, &rule, &names, Monitor::PERIOD.as_secs_f64())
    });
    let stopped_by_guard = guard.as_ref().is_some_and(|g| g.stop);
    let rep = glue::finish(
        obs,
        setup,
        &glue::Output {
            json: args.json,
            plot: args.plot.clone(),
            recommend: args.recommend,
            stopped_by,
            guard,
            replay,
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

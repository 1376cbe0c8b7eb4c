//! `bbrscope status`: congestion control as it stands, per scope, and what bbrscope changed.

use std::{collections::BTreeMap, path::PathBuf};

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::{
    apply::{
        algo::Kernel,
        cgroup, diag, files,
        qdisc::{self, RootQdisc},
        route,
        scope::Scope,
        state::{Entry, State},
        sysctl,
        sysctl_d::BootConfig,
    },
    experiment::lock,
    output::{self, OutputError, outln},
    sys::netns::{self, Netns},
};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Also show a network namespace: an `ip netns` name, a path such as /proc/PID/ns/net, or `all`
    #[arg(long, value_name = "NAME|PATH|all")]
    pub netns: Option<String>,
    /// Print as JSON
    #[arg(long)]
    pub json: bool,
    /// Stand-in for / when reading files (tests)
    #[arg(long, hide = true, default_value = "/")]
    pub root: PathBuf,
}

#[derive(Serialize)]
struct RouteCc {
    route: String,
    congctl: String,
    by_bbrscope: bool,
}

#[derive(Serialize)]
struct Namespace {
    namespace: String,
    initial: bool,
    default: String,
    allowed: Vec<String>,
    default_qdisc: Option<String>,
    qdiscs: Vec<RootQdisc>,
    routes_with_congctl: Vec<RouteCc>,
    /// Live TCP connections per algorithm (a sock_diag snapshot, as `ss -ti` sees them).
    flows: BTreeMap<String, u64>,
    /// Why `flows` could not be read (e.g. no tcp_diag module), when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    flows_unknown: Option<String>,
}

#[derive(Serialize)]
struct Boot {
    /// What the next boot sets net.ipv4.tcp_congestion_control to.
    value: Option<String>,
    /// Where that comes from (None: no file sets it, the kernel's built-in default applies).
    file: Option<String>,
    bbrscope_dropin: bool,
}

#[derive(Serialize)]
struct Recorded {
    scope: Scope,
    algorithm: String,
    applied_at: u64,
    /// What holds now, in words.
    now: String,
    changes: Vec<String>,
}

/// Which observer `stream`/`top` use on this machine, checked by loading the program.
#[derive(Serialize)]
struct ObserverStatus {
    /// "sockops", "tracepoint", or null when it could not be checked.
    path: Option<&'static str>,
    /// Why not sockops, or why it could not be checked.
    note: Option<String>,
}

#[derive(Serialize)]
struct Status {
    available: Vec<String>,
    observer: ObserverStatus,
    system: Namespace,
    boot: Boot,
    namespaces: Vec<Namespace>,
    bbrscope: Vec<Recorded>,
    /// The `bbrscope experiment` running now (it holds the experiment lock), or null. It
    /// attaches nothing that outlives it, so there is nothing else of it to list.
    experiment: Option<lock::Running>,
    warnings: Vec<String>,
}

fn namespace(ns: &Netns, state: &State) -> Result<Namespace> {
    let ours: Vec<_> = state
        .entries
        .iter()
        .filter_map(|e| match &e.scope {
            Scope::Route { netns, prefix } if netns.ino == ns.ino => Some(*prefix),
            _ => None,
        })
        .collect();
    netns::run(ns, || {
        let flows = diag::flows_by_algorithm();
        Ok(Namespace {
            namespace: ns.label.clone(),
            initial: netns::is_initial(ns),
            default: sysctl::read(sysctl::CC)?.unwrap_or_default(),
            allowed: sysctl::read(sysctl::ALLOWED)?.map(|v| sysctl::words(&v)).unwrap_or_default(),
            default_qdisc: sysctl::read(sysctl::DEFAULT_QDISC)?,
            qdiscs: qdisc::roots()?,
            routes_with_congctl: route::with_congctl()?
                .into_iter()
                .map(|r| RouteCc {
                    by_bbrscope: ours.contains(&r.key.prefix),
                    route: r.key.to_string(),
                    congctl: r.cc.unwrap_or_default(),
                })
                .collect(),
            flows: flows.as_ref().cloned().unwrap_or_default(),
            flows_unknown: flows.err().map(|e| format!("{e:#} (is the tcp_diag module loaded?)")),
        })
    })
}

/// What holds now for a recorded scope, and a warning when it is not what bbrscope set.
fn now_of(e: &Entry, warnings: &mut Vec<String>) -> String {
    let mut drifted = |now: String, holds: bool| {
        if !holds {
            warnings.push(format!("{}: bbrscope set {}, but {now}", e.scope, e.algorithm));
        }
        now
    };
    match &e.scope {
        Scope::System { netns } | Scope::Netns { netns } => {
            if !netns::still_there(netns) {
                return drifted(format!("namespace {netns} no longer exists"), false);
            }
            match netns::run(netns, || sysctl::read(sysctl::CC)) {
                Ok(v) => {
                    let v = v.unwrap_or_default();
                    drifted(format!("the default is {v}"), v == e.algorithm)
                }
                Err(err) => format!("unreadable: {err:#}"),
            }
        }
        Scope::Cgroup { ino, path } => {
            let pin = cgroup::pin_path(*ino);
            // A removed cgroup's link stays pinned but applies to nothing: its directory (the
            // same inode, not a new cgroup of the same name) is what the pin is for.
            let exists = std::fs::metadata(path).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == *ino);
            if !exists {
                return drifted(
                    format!(
                        "cgroup {} no longer exists: the link pinned at {} applies to nothing (`bbrscope revert --cgroup {}` removes it)",
                        path.display(),
                        pin.display(),
                        path.display()
                    ),
                    false,
                );
            }
            match cgroup::pinned_program(&pin) {
                Some(id) => format!("program id {id} attached, link pinned at {}", pin.display()),
                None => drifted(format!("nothing pinned at {} (reboot, or removed by hand)", pin.display()), false),
            }
        }
        Scope::Route { netns, prefix } => {
            if !netns::still_there(netns) {
                return drifted(format!("namespace {netns} no longer exists"), false);
            }
            match netns::run(netns, || route::find(prefix)) {
                Ok(Some(r)) => {
                    let cc = r.cc.unwrap_or_else(|| "none".into());
                    drifted(format!("route {} has congctl {cc}", r.key), cc == e.algorithm)
                }
                Ok(None) => drifted(format!("there is no route for {prefix} any more"), false),
                Err(err) => format!("unreadable: {err:#}"),
            }
        }
    }
}

pub fn run(args: StatusArgs) -> Result<()> {
    output::guard(|| status(args))
}

fn status(args: StatusArgs) -> Result<()> {
    let state = State::load(&args.root)?;
    let own = netns::current()?;
    let system = namespace(&own, &state)?;
    let mut warnings = Vec::new();

    let kernel = Kernel::discover()?;
    let config = BootConfig::load(&args.root);
    let eff = config.effective(sysctl::CC);
    let dropin = files::read(&args.root, std::path::Path::new(files::SYSCTL_DROPIN))?.is_some();
    let boot = Boot {
        value: eff.as_ref().map(|a| a.value.clone()).or_else(|| kernel.builtin_default()),
        file: eff.as_ref().map(|a| format!("{}:{}", a.file.display(), a.line)),
        bbrscope_dropin: dropin,
    };
    match &eff {
        Some(a) if a.value != system.default => warnings.push(format!(
            "the next boot sets {} = {} ({}:{}), not today's {}",
            sysctl::CC,
            a.value,
            a.file.display(),
            a.line,
            system.default
        )),
        None if kernel.builtin_default().is_some_and(|d| d != system.default) => warnings.push(format!(
            "no sysctl file sets {}: the next boot gives the kernel's built-in default, {}, not today's {}",
            sysctl::CC,
            kernel.builtin_default().unwrap_or_default(),
            system.default
        )),
        _ => {}
    }
    if dropin && eff.as_ref().is_some_and(|a| a.file != std::path::Path::new(files::SYSCTL_DROPIN)) {
        warnings.push(format!(
            "{} is overridden at boot by {}",
            files::SYSCTL_DROPIN,
            boot.file.as_deref().unwrap_or("")
        ));
    }

    let mut namespaces = Vec::new();
    let extra = match args.netns.as_deref() {
        None => Vec::new(),
        Some("all") => netns::all()?,
        Some(name) => vec![netns::resolve(name)?],
    };
    for ns in &extra {
        namespaces.push(namespace(ns, &state)?);
    }
    let bbrscope = state
        .entries
        .iter()
        .map(|e| Recorded {
            now: now_of(e, &mut warnings),
            scope: e.scope.clone(),
            algorithm: e.algorithm.clone(),
            applied_at: e.applied_at,
            changes: e.changes.iter().map(|c| c.describe()).collect(),
        })
        .collect();
    if let Some(p) = &state.pending {
        warnings.push(format!(
            "an apply of {} to {} is in progress or was interrupted midway: the next `bbrscope apply` or `revert` \
             rolls back what an interrupted one changed",
            p.algorithm, p.scope
        ));
    }
    if let Some(r) = &state.reverting {
        warnings.push(format!(
            "a revert of {} is in progress or was interrupted midway: the next `bbrscope apply` or `revert` \
             finishes it",
            r.scope
        ));
    }
    let observer = match crate::observe::kernel::loader::probe() {
        Ok((path, note)) => ObserverStatus { path: Some(path.as_str()), note },
        Err(note) => ObserverStatus { path: None, note: Some(note) },
    };
    let experiment = lock::running()?;
    let status =
        Status { available: kernel.usable(), observer, system, boot, namespaces, bbrscope, experiment, warnings };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&status)?)?;
    } else {
        print(&status)?;
    }
    Ok(())
}

fn print_namespace(n: &Namespace) -> Result<(), OutputError> {
    let which = if n.initial { "initial network namespace" } else { "network namespace" };
    outln!("{} ({which})", n.namespace)?;
    outln!("  default          {}", n.default)?;
    outln!("  allowed          {}", n.allowed.join(" "))?;
    if let Some(q) = &n.default_qdisc {
        outln!("  default_qdisc    {q}")?;
    }
    for q in &n.qdiscs {
        let how = if q.is_kernel_default() { "kernel default" } else { "custom" };
        outln!("  qdisc            {} {} ({how})", q.ifname, q.kind)?;
    }
    for r in &n.routes_with_congctl {
        let by = if r.by_bbrscope { " (set by bbrscope)" } else { "" };
        outln!("  route            {} congctl {}{by}", r.route, r.congctl)?;
    }
    if let Some(why) = &n.flows_unknown {
        return outln!("  live flows       unknown: {why}");
    }
    let flows: Vec<String> = n.flows.iter().map(|(k, v)| format!("{k} {v}")).collect();
    outln!("  live flows       {}", if flows.is_empty() { "none".into() } else { flows.join(", ") })
}

fn print(s: &Status) -> Result<(), OutputError> {
    outln!("available        {}", s.available.join(" "))?;
    let note = s.observer.note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
    outln!("observer         {}{note}", s.observer.path.unwrap_or("unknown"))?;
    print_namespace(&s.system)?;
    let boot = match (&s.boot.value, &s.boot.file) {
        (Some(v), Some(f)) => format!("{v} (from {f})"),
        (Some(v), None) => format!("{v}, the kernel's built-in default (no sysctl file sets it)"),
        _ => "the kernel's built-in default (no sysctl file sets it)".into(),
    };
    outln!("  next boot        {boot}")?;
    for n in &s.namespaces {
        print_namespace(n)?;
    }
    if s.bbrscope.is_empty() {
        outln!("changed by bbrscope: nothing")?;
    } else {
        outln!("changed by bbrscope:")?;
        for r in &s.bbrscope {
            outln!("  {} -> {}: {}", r.scope, r.algorithm, r.now)?;
        }
    }
    match &s.experiment {
        None => outln!("experiment: none running")?,
        Some(x) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let age = now.saturating_sub(x.started_at);
            outln!(
                "experiment: running (pid {}): {} (A) vs {} (B), {}% to B, {}% of {}; started {}m{:02}s ago, ends {}; \
                 guardrail {}{}",
                x.pid,
                x.arms[0],
                x.arms[1],
                x.split_pct,
                x.sample_pct,
                x.scope,
                age / 60,
                age % 60,
                x.ends,
                if x.guardrail { "on" } else { "off" },
                x.record.as_deref().map(|r| format!("; recording to {r}")).unwrap_or_default()
            )?
        }
    }
    for w in &s.warnings {
        outln!("warning: {w}")?;
    }
    Ok(())
}

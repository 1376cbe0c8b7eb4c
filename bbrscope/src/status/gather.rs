//! `bbrscope status`'s facts: congestion control as it stands, per scope, what the next boot
//! sets, and what bbrscope changed (and whether the machine still has it).

use std::{collections::BTreeMap, path::Path};

use anyhow::Result;
use serde::Serialize;

use super::{advice, diag};
use crate::{
    apply::{
        algo::Kernel,
        cgroup,
        change::Change,
        files,
        scope::Scope,
        state::{Entry, State},
        sysctl_d::BootConfig,
    },
    observe::kernel::bbr_version::{self, BbrImpl},
    sys::{
        experiment_lock as lock,
        netns::{self, Netns},
        qdisc::{self, RootQdisc},
        route, sysctl,
    },
};

#[derive(Serialize)]
pub(crate) struct RouteCc {
    pub(crate) route: String,
    pub(crate) congctl: String,
    pub(crate) by_bbrscope: bool,
}

#[derive(Serialize)]
pub(crate) struct Namespace {
    pub(crate) namespace: String,
    pub(crate) initial: bool,
    pub(crate) default: String,
    pub(crate) allowed: Vec<String>,
    pub(crate) default_qdisc: Option<String>,
    pub(crate) qdiscs: Vec<RootQdisc>,
    pub(crate) routes_with_congctl: Vec<RouteCc>,
    /// The settings beyond the algorithm `bbrscope advise` weighs flows against.
    pub(crate) tuning: crate::advise::findings::Knobs,
    /// Live TCP connections per algorithm (a sock_diag snapshot, as `ss -ti` sees them).
    pub(crate) flows: BTreeMap<String, u64>,
    /// Why `flows` could not be read (e.g. no tcp_diag module), when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) flows_unknown: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct Boot {
    /// What the next boot sets net.ipv4.tcp_congestion_control to.
    pub(crate) value: Option<String>,
    /// Where that comes from (None: no file sets it, the kernel's built-in default applies).
    pub(crate) file: Option<String>,
    pub(crate) bbrscope_dropin: bool,
}

#[derive(Serialize)]
pub(crate) struct Recorded {
    pub(crate) scope: Scope,
    /// The algorithm bbrscope set there (null: only other settings).
    pub(crate) algorithm: Option<String>,
    pub(crate) applied_at: u64,
    /// What holds now, in words.
    pub(crate) now: String,
    pub(crate) changes: Vec<String>,
}

/// Which observer `stream`/`top` use on this machine, checked by loading the program.
#[derive(Serialize)]
pub(crate) struct ObserverStatus {
    /// "sockops", "tracepoint", or null when it could not be checked.
    pub(crate) path: Option<&'static str>,
    /// Why not sockops, or why it could not be checked.
    pub(crate) note: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct Status {
    pub(crate) available: Vec<String>,
    /// Which BBR the kernel runs (v1 mainline, or Google's v2/v3), told from its BTF layout.
    pub(crate) bbr: BbrImpl,
    pub(crate) observer: ObserverStatus,
    pub(crate) system: Namespace,
    pub(crate) boot: Boot,
    pub(crate) namespaces: Vec<Namespace>,
    pub(crate) bbrscope: Vec<Recorded>,
    /// The `bbrscope experiment`s running now (each holds its lock), oldest first: several run
    /// side by side on disjoint scopes. They attach nothing that outlives them, so there is
    /// nothing else of them to list.
    pub(crate) experiments: Vec<lock::Running>,
    /// The first of `experiments`, or null: what scripts written before experiments could run
    /// side by side read.
    pub(crate) experiment: Option<lock::Running>,
    /// The last `bbrscope advise`'s findings, and the settings changed since, or null.
    pub(crate) advice: Option<advice::Shown>,
    pub(crate) warnings: Vec<String>,
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
            tuning: crate::advise::read_knobs(),
            flows: flows.as_ref().cloned().unwrap_or_default(),
            flows_unknown: flows.err().map(|e| format!("{e:#} (is the tcp_diag module loaded?)")),
        })
    })
}

/// What holds now for a recorded scope, and a warning for each thing that is not what bbrscope
/// set.
fn now_of(e: &Entry, warnings: &mut Vec<String>) -> String {
    let mut drifted = |set: &str, now: String, holds: bool| {
        if !holds {
            warnings.push(format!("{}: bbrscope set {set}, but {now}", e.scope));
        }
        now
    };
    let algo = e.algorithm.as_deref();
    let mut parts = Vec::new();
    match &e.scope {
        Scope::System { netns } | Scope::Netns { netns } | Scope::Route { netns, .. } if !netns::still_there(netns) => {
            return drifted(&e.what(), format!("namespace {netns} no longer exists"), false);
        }
        Scope::System { netns } | Scope::Netns { netns } => {
            if let Some(algo) = algo {
                parts.push(match netns::run(netns, || sysctl::read(sysctl::CC)) {
                    Ok(v) => {
                        let v = v.unwrap_or_default();
                        drifted(algo, format!("the default is {v}"), v == algo)
                    }
                    Err(err) => format!("unreadable: {err:#}"),
                });
            }
            for c in &e.changes {
                if let Change::Sysctl { key, to, .. } = c
                    && sysctl::TUNABLE.iter().any(|(k, _)| k == key)
                {
                    parts.push(match netns::run(netns, || sysctl::read(key)) {
                        Ok(v) => {
                            let v = v.unwrap_or_default();
                            drifted(&format!("{key} = {to}"), format!("{key} is {v}"), v == *to)
                        }
                        Err(err) => format!("unreadable: {err:#}"),
                    });
                }
            }
        }
        Scope::Cgroup { ino, path } => {
            let pin = cgroup::pin_path(*ino);
            let what = e.what();
            // A removed cgroup's link stays pinned but applies to nothing: its directory (the
            // same inode, not a new cgroup of the same name) is what the pin is for.
            let exists = std::fs::metadata(path).is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) == *ino);
            if !exists {
                return drifted(
                    &what,
                    format!(
                        "cgroup {} no longer exists: the link pinned at {} applies to nothing (`bbrscope revert --cgroup {}` removes it)",
                        path.display(),
                        pin.display(),
                        path.display()
                    ),
                    false,
                );
            }
            parts.push(match cgroup::pinned_program(&pin) {
                Some(id) => format!("program id {id} attached, link pinned at {}", pin.display()),
                None => {
                    drifted(&what, format!("nothing pinned at {} (reboot, or removed by hand)", pin.display()), false)
                }
            });
        }
        Scope::Route { netns, prefix } => match netns::run(netns, || route::find(prefix)) {
            Ok(Some(r)) => {
                if let Some(algo) = algo {
                    let cc = r.cc.clone().unwrap_or_else(|| "none".into());
                    parts.push(drifted(algo, format!("route {} has congctl {cc}", r.key), cc == algo));
                }
                for c in &e.changes {
                    if let Change::RouteWindow { window, to, .. } = c {
                        let now = r.window(*window);
                        let shown = now.map_or_else(|| "unset".to_string(), |v| v.to_string());
                        let name = window.name();
                        parts.push(drifted(
                            &format!("{name} {to}"),
                            format!("route {} has {name} {shown}", r.key),
                            now == Some(*to),
                        ));
                    }
                }
            }
            Ok(None) => return drifted(&e.what(), format!("there is no route for {prefix} any more"), false),
            Err(err) => return format!("unreadable: {err:#}"),
        },
    }
    parts.join("; ")
}

/// Everything `bbrscope status` shows: each scope as it stands now, what the next boot sets, what
/// bbrscope recorded and whether the machine still has it, which observer would load, and the
/// running experiment. Only reads. `netns`: also show this namespace (a name, a path, or `all`).
pub(crate) fn gather(root: &Path, netns: Option<&str>) -> Result<Status> {
    let state = State::load(root)?;
    let own = netns::current()?;
    let system = namespace(&own, &state)?;
    let mut warnings = Vec::new();

    let kernel = Kernel::discover()?;
    let config = BootConfig::load(root);
    let eff = config.effective(sysctl::CC);
    let dropin = files::read(root, std::path::Path::new(files::SYSCTL_DROPIN))?.is_some();
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
    let extra = match netns {
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
            changes: e.changes.iter().map(Change::describe).collect(),
        })
        .collect();
    if let Some(p) = &state.pending {
        warnings.push(format!(
            "an apply of {} to {} is in progress or was interrupted midway: the next `bbrscope apply` or `revert` \
             rolls back what an interrupted one changed",
            p.what(),
            p.scope
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
    let experiments = lock::running()?;
    let bbr = bbr_version::running();
    let advice = advice::load(root).unwrap_or_else(|why| {
        warnings.push(why);
        None
    });
    Ok(Status {
        available: kernel.usable(),
        bbr,
        observer,
        system,
        boot,
        namespaces,
        bbrscope,
        experiment: experiments.first().cloned(),
        experiments,
        advice,
        warnings,
    })
}

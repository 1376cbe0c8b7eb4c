//! The read-only half of `apply`: look at the system, say what is in the way, and list the
//! changes that would be made. Nothing here changes anything, so `--dry-run` stops after it.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::{
    algo::{Kernel, Provision},
    cgroup,
    change::Change,
    files,
    scope::Scope,
    state::State,
    sysctl_d::BootConfig,
};
use crate::sys::netns::{self, Netns};
use crate::sys::{
    qdisc,
    route::{self, Window},
    sysctl,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Level {
    Ok,
    Info,
    Warn,
    /// Stops the apply: nothing is changed.
    Block,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Check {
    pub level: Level,
    pub topic: &'static str,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Plan {
    pub scope: Scope,
    /// The algorithm this run sets (None: only settings beside it).
    pub algorithm: Option<String>,
    /// The settings beside the algorithm this run sets in this scope.
    pub settings: Vec<Setting>,
    pub checks: Vec<Check>,
    pub changes: Vec<Change>,
}

/// A setting beside the algorithm: a TCP sysctl of a namespace, or a route's initial window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Setting {
    Sysctl { key: String, value: String },
    Route { window: Window, value: u32 },
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Sysctl { key, value } => write!(f, "{key} = {value}"),
            Setting::Route { window, value } => write!(f, "{} {value}", window.name()),
        }
    }
}

impl Plan {
    pub(crate) fn blocked(&self) -> bool {
        self.checks.iter().any(|c| c.level == Level::Block)
    }

    /// What this run sets here, in words: the algorithm, then the other settings.
    pub(crate) fn target(&self) -> String {
        let settings = self.settings.iter().map(ToString::to_string);
        self.algorithm.iter().cloned().chain(settings).collect::<Vec<_>>().join(", ")
    }

    fn check(&mut self, level: Level, topic: &'static str, text: impl Into<String>) {
        self.checks.push(Check { level, topic, text: text.into() });
    }
}

/// What the user asked for, beyond the scope.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub algorithm: Option<String>,
    /// `--sysctl`: tunable settings (see [`sysctl::TUNABLE`]), checked and in their recorded form.
    pub sysctls: Vec<(String, String)>,
    /// `--initcwnd`/`--initrwnd`: route scopes only.
    pub windows: Vec<(Window, u32)>,
    /// Write the boot-time configuration (system scope only).
    pub persist: bool,
    /// Add the algorithm to the host's allowed list when a namespace needs it.
    pub allow: bool,
    /// Make this the default qdisc and re-apply it where the kernel default is in place.
    pub qdisc: Option<String>,
    /// Where /etc, /run, /usr/lib and /var/lib are (/ except in tests).
    pub root: PathBuf,
}

/// Facts shared by every scope of one run.
pub(crate) struct Host {
    pub kernel: Kernel,
    pub state: State,
    /// Effective capabilities of bbrscope.
    pub caps: u64,
    pub own_netns: Netns,
}

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

impl Host {
    pub(crate) fn discover(root: &Path) -> Result<Host> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let caps = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or(0);
        Ok(Host { kernel: Kernel::discover()?, state: State::load(root)?, caps, own_netns: netns::current()? })
    }

    fn has(&self, cap: u32) -> bool {
        self.caps & (1 << cap) != 0
    }
}

pub(crate) fn plan(scope: &Scope, opts: &Options, host: &Host) -> Result<Plan> {
    let settings = match scope {
        Scope::System { .. } | Scope::Netns { .. } => {
            opts.sysctls.iter().map(|(key, value)| Setting::Sysctl { key: key.clone(), value: value.clone() }).collect()
        }
        Scope::Route { .. } => opts.windows.iter().map(|&(window, value)| Setting::Route { window, value }).collect(),
        Scope::Cgroup { .. } => Vec::new(),
    };
    let mut p = Plan {
        scope: scope.clone(),
        algorithm: opts.algorithm.clone(),
        settings,
        checks: Vec::new(),
        changes: Vec::new(),
    };
    privileges(&mut p, host);
    let provision = opts.algorithm.as_deref().map(|a| host.kernel.require(a)).transpose()?;
    if let Some(provision) = &provision {
        algorithm(&mut p, provision);
    }
    match scope {
        Scope::System { netns } => {
            namespace(&mut p, netns, true);
            if let Some(algo) = &opts.algorithm {
                default_cc(&mut p, netns, algo, opts, host)?;
            }
            tunables(&mut p, netns, opts)?;
            let qdisc = if netns::is_initial(netns) {
                qdiscs(&mut p, opts, host)?
            } else {
                if opts.qdisc.is_some() {
                    p.check(
                        Level::Warn,
                        "qdisc",
                        "net.core.default_qdisc exists only in the initial network namespace: qdisc step skipped",
                    );
                }
                None
            };
            boot(&mut p, opts, qdisc, provision.as_ref(), &host.kernel)?;
            if opts.algorithm.is_some() {
                sock_ops_programs(&mut p);
            }
        }
        Scope::Netns { netns } => {
            namespace(&mut p, netns, false);
            if let Some(algo) = &opts.algorithm {
                default_cc(&mut p, netns, algo, opts, host)?;
            }
            tunables(&mut p, netns, opts)?;
            p.check(Level::Info, "persistence", format!("{netns}'s settings live as long as the namespace (set them from whatever creates the namespace to keep them)"));
            if opts.algorithm.is_some() {
                sock_ops_programs(&mut p);
            }
        }
        Scope::Cgroup { path, ino } => {
            // The command line refuses a cgroup without an algorithm before any plan is made.
            let algo = opts.algorithm.as_deref().unwrap_or_default();
            cgroup_scope(&mut p, path, *ino, algo, host)?;
        }
        Scope::Route { netns, prefix } => route_scope(&mut p, netns, prefix, opts.algorithm.as_deref(), &opts.windows)?,
    }
    // A module must be loaded before anything names its algorithm.
    if let Some(Provision::Loadable { module }) = &provision
        && !p.changes.is_empty()
    {
        p.changes.insert(0, Change::LoadModule { module: module.clone() });
    }
    Ok(p)
}

fn privileges(p: &mut Plan, host: &Host) {
    let needs_bpf = matches!(p.scope, Scope::Cgroup { .. });
    let netns_elsewhere = p.scope.netns().is_some_and(|n| n.ino != host.own_netns.ino);
    let mut missing = Vec::new();
    if !host.has(CAP_NET_ADMIN) {
        missing.push("CAP_NET_ADMIN");
    }
    if (netns_elsewhere || needs_bpf) && !host.has(CAP_SYS_ADMIN) && !(needs_bpf && host.has(CAP_BPF)) {
        missing.push(if needs_bpf { "CAP_BPF (or CAP_SYS_ADMIN)" } else { "CAP_SYS_ADMIN (to enter the namespace)" });
    }
    if missing.is_empty() {
        p.check(Level::Ok, "privileges", "sufficient");
    } else {
        p.check(Level::Block, "privileges", format!("missing {}: run as root", missing.join(", ")));
    }
}

fn algorithm(p: &mut Plan, provision: &Provision) {
    let name = p.algorithm.as_deref().unwrap_or_default();
    let text = match provision {
        Provision::BuiltIn => format!("{name} is built into the kernel (it never shows in lsmod)"),
        Provision::Loaded { module } => format!("{name} is provided by module {module}, loaded"),
        Provision::Loadable { module } => format!("{name} is provided by module {module}, which will be loaded"),
    };
    p.check(Level::Ok, "algorithm", text);
}

fn namespace(p: &mut Plan, netns: &Netns, system: bool) {
    if netns::is_initial(netns) {
        p.check(Level::Ok, "namespace", "the initial network namespace (the host's own settings)");
    } else if system && netns::is_container() {
        p.check(Level::Warn, "namespace", "inside a container: this changes the container's network namespace only, and the host's allowed list applies");
    } else if system {
        p.check(Level::Warn, "namespace", "bbrscope runs in a non-initial network namespace: this changes that namespace only, and the host's allowed list applies");
    } else {
        p.check(Level::Ok, "namespace", format!("{netns} ({})", netns.path.display()));
    }
}

/// The live default of a namespace, and the allowed-list rule outside the initial one.
fn default_cc(p: &mut Plan, netns: &Netns, algo: &str, opts: &Options, host: &Host) -> Result<()> {
    let algo = algo.to_string();
    let (current, allowed, unwritable, routes) = netns::run(netns, || {
        Ok((
            sysctl::read(sysctl::CC)?.unwrap_or_default(),
            sysctl::read(sysctl::ALLOWED)?.map(|v| sysctl::words(&v)).unwrap_or_default(),
            sysctl::unwritable(sysctl::CC),
            route::with_congctl()?,
        ))
    })?;
    for r in routes {
        p.check(
            Level::Warn,
            "routes",
            format!(
                "route {} has congctl {}: new connections to it get {} whatever the default",
                r.key,
                r.cc.as_deref().unwrap_or(""),
                r.cc.as_deref().unwrap_or("")
            ),
        );
    }
    if current == algo {
        p.check(Level::Ok, "default", format!("{} is already {algo} in {netns}", sysctl::CC));
        return Ok(());
    }
    p.check(Level::Info, "default", format!("{} is {current} in {netns}", sysctl::CC));
    if let Some(why) = unwritable {
        p.check(Level::Block, "sysctl", why);
        return Ok(());
    }
    if !netns::is_initial(netns) && !allowed.contains(&algo) {
        let rule = format!(
            "outside the initial network namespace the default can only be an algorithm on the host's \
             {} ({}), and {algo} is not on it",
            sysctl::ALLOWED,
            allowed.join(" ")
        );
        if opts.allow {
            let to = [allowed.clone(), vec![algo.clone()]].concat().join(" ");
            p.check(Level::Warn, "allowed", format!("{rule}: --allow adds it (a host-wide setting)"));
            p.changes.push(Change::Sysctl {
                netns: host.own_netns.clone(),
                key: sysctl::ALLOWED.into(),
                from: allowed.join(" "),
                to,
            });
        } else {
            p.check(Level::Block, "allowed", format!("{rule}. Rerun with --allow to add it to the host's list"));
            return Ok(());
        }
    } else {
        p.check(Level::Ok, "allowed", format!("{} is {}", sysctl::ALLOWED, allowed.join(" ")));
        if !allowed.contains(&algo) {
            // The kernel puts a new default on the allowed list by itself; recorded as a change
            // of bbrscope's so that revert takes it off again.
            p.changes.push(Change::Sysctl {
                netns: netns.clone(),
                key: sysctl::ALLOWED.into(),
                from: allowed.join(" "),
                to: [allowed.clone(), vec![algo.clone()]].concat().join(" "),
            });
        }
    }
    p.changes.push(Change::Sysctl { netns: netns.clone(), key: sysctl::CC.into(), from: current, to: algo });
    Ok(())
}

/// `--sysctl` settings in one namespace: each must exist there and be writable.
fn tunables(p: &mut Plan, netns: &Netns, opts: &Options) -> Result<()> {
    for (key, value) in &opts.sysctls {
        // The kernel shows other namespaces the host's net.core buffer maxima (read-only) or none.
        if key.starts_with("net.core.") && !netns::is_initial(netns) {
            p.check(
                Level::Block,
                "sysctl",
                format!("{key} is the host's: only the initial network namespace can change it, not {netns}"),
            );
            continue;
        }
        let (now, unwritable) = netns::run(netns, || Ok((sysctl::read(key)?, sysctl::unwritable(key))))?;
        match now {
            None => p.check(Level::Block, "sysctl", format!("{netns} has no {key} (an older kernel?)")),
            Some(now) if now == *value => p.check(Level::Ok, "sysctl", format!("{key} is already {value} in {netns}")),
            Some(now) => match unwritable {
                Some(why) => p.check(Level::Block, "sysctl", why),
                None => {
                    p.check(Level::Info, "sysctl", format!("{key} is {now} in {netns}"));
                    p.changes.push(Change::Sysctl {
                        netns: netns.clone(),
                        key: key.clone(),
                        from: now,
                        to: value.clone(),
                    });
                }
            },
        }
    }
    Ok(())
}

/// Returns the qdisc that will be the default, when `--qdisc` asked for one this kernel has.
fn qdiscs(p: &mut Plan, opts: &Options, host: &Host) -> Result<Option<String>> {
    let roots = qdisc::roots()?;
    for q in &roots {
        let what = if q.is_kernel_default() {
            "kernel default".to_string()
        } else {
            format!("custom, handle {:x}:, left alone", q.handle >> 16)
        };
        p.check(Level::Info, "qdisc", format!("{}: {} ({what})", q.ifname, q.kind));
    }
    let fq = host.kernel.has_fq();
    let bbr_note = "BBR paces by itself (TCP internal pacing, Linux 4.13+), so fq is recommended, not required";
    match (&opts.qdisc, fq) {
        (Some(q), Some(false)) if q == "fq" => {
            p.check(Level::Warn, "fq", format!("this kernel has no fq qdisc: {bbr_note}; skipping the qdisc step"));
            return Ok(None);
        }
        (Some(q), _) => {
            if host.kernel.has_qdisc(q).is_none() {
                p.check(
                    Level::Warn,
                    "qdisc",
                    format!("this kernel publishes neither its configuration nor a module index: whether it has {q} is unknown"),
                );
            }
            let current = sysctl::read(sysctl::DEFAULT_QDISC)?.unwrap_or_default();
            let interfaces: Vec<String> =
                roots.iter().filter(|r| r.needs_reapply(q)).map(|r| r.ifname.clone()).collect();
            if let Some(why) = sysctl::unwritable(sysctl::DEFAULT_QDISC) {
                p.check(Level::Block, "sysctl", why);
            } else if current != *q || !interfaces.is_empty() {
                p.changes.push(Change::DefaultQdisc { from: current, to: q.clone(), interfaces });
            } else {
                p.check(
                    Level::Ok,
                    "qdisc",
                    format!("{} is already {q} on every interface with a kernel default", sysctl::DEFAULT_QDISC),
                );
            }
            return Ok(Some(q.clone()));
        }
        (None, fq) if p.algorithm.as_deref() == Some("bbr") => {
            let has = match fq {
                Some(true) => "this kernel has fq (--qdisc fq makes it the default)",
                Some(false) => "this kernel has no fq qdisc",
                None => "whether this kernel has fq is unknown",
            };
            p.check(Level::Info, "fq", format!("{has}; {bbr_note}"));
        }
        (None, _) => {}
    }
    Ok(None)
}

/// The boot-time configuration: our drop-in (and modules-load entry), and who would win.
fn boot(
    p: &mut Plan,
    opts: &Options,
    qdisc: Option<String>,
    provision: Option<&Provision>,
    kernel: &Kernel,
) -> Result<()> {
    let config = BootConfig::load(&opts.root);
    let dropin = Path::new(files::SYSCTL_DROPIN);
    let existing = files::read(&opts.root, dropin)?;
    // What this run sets, as the drop-in would say it: the algorithm, the qdisc, the tunables.
    let ours: Vec<(String, String)> = p
        .algorithm
        .iter()
        .map(|a| (sysctl::CC.to_string(), a.clone()))
        .chain(qdisc.map(|q| (sysctl::DEFAULT_QDISC.to_string(), q)))
        .chain(opts.sysctls.iter().cloned())
        .collect();
    if !opts.persist {
        for (key, _) in &ours {
            let next = describe_effective(&config, key, kernel);
            p.check(Level::Warn, "boot", format!("not persisted (--no-persist): the next boot gives {key} = {next}"));
        }
        return Ok(());
    }
    // The drop-in keeps what earlier applies put there, with this run's values for its keys.
    let mut lines: Vec<(String, String)> = existing
        .as_deref()
        .filter(|t| t.starts_with(files::HEADER))
        .map(|t| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
                .collect()
        })
        .unwrap_or_default();
    for (key, value) in &ours {
        match lines.iter_mut().find(|(k, _)| k == key) {
            Some(line) => line.1.clone_from(value),
            None => lines.push((key.clone(), value.clone())),
        }
    }
    let text = lines.iter().fold(files::HEADER.to_string(), |t, (k, v)| t + &format!("{k} = {v}\n"));
    let with = config.with_dropin(dropin, Some(&text));
    for (key, value) in &ours {
        match with.effective(key) {
            Some(a) if a.file != dropin => p.check(
                Level::Warn,
                "boot",
                format!(
                    "{}:{} sets {key} = {} and is applied after {}: the next boot gives {}. bbrscope does not \
                 edit files it does not own: change that line to make this persistent",
                    a.file.display(),
                    a.line,
                    a.value,
                    dropin.display(),
                    a.value
                ),
            ),
            _ => p.check(
                Level::Ok,
                "boot",
                format!(
                    "the next boot gives {key} = {value} from {} (today's files give {})",
                    dropin.display(),
                    describe_effective(&config.with_dropin(dropin, None), key, kernel)
                ),
            ),
        }
    }
    match files::unwritable(&opts.root, dropin) {
        Some(why) => p.check(Level::Block, "files", why),
        // A file of bbrscope's name that bbrscope did not write is someone's own: never replaced.
        None if existing.as_deref().is_some_and(|t| !t.starts_with(files::HEADER)) => p.check(
            Level::Block,
            "files",
            format!(
                "{} exists and bbrscope did not write it (no bbrscope header): bbrscope does not overwrite \
                 it; move it away, or use --no-persist",
                dropin.display()
            ),
        ),
        None if existing.as_deref() != Some(text.as_str()) => {
            p.changes.push(Change::File { path: dropin.into(), from: existing, to: text });
        }
        None => {}
    }
    if let Some(module) = provision.and_then(Provision::module) {
        let path = Path::new(files::MODULES_LOAD);
        let text = format!("{}{module}\n", files::HEADER);
        let existing = files::read(&opts.root, path)?;
        if existing.as_deref() != Some(text.as_str()) {
            p.changes.push(Change::File { path: path.into(), from: existing, to: text });
        }
    }
    Ok(())
}

fn describe_effective(config: &BootConfig, key: &str, kernel: &Kernel) -> String {
    match (config.effective(key), kernel.builtin_default()) {
        (Some(a), _) => format!("{} ({}:{})", a.value, a.file.display(), a.line),
        (None, Some(d)) if key == sysctl::CC => format!("the kernel's built-in default, {d}"),
        (None, _) => "the kernel's built-in default".into(),
    }
}

/// Other sock_ops programs can set any connection's algorithm, overriding defaults. bbrscope's
/// own observers (`top`, `stream`, the exporter) only read, and are named as such; an experiment's
/// observer does set algorithms, for the connections of its scope.
fn sock_ops_programs(p: &mut Plan) {
    const BPF_PROG_TYPE_SOCK_OPS: u32 = 13;
    type Programs = Vec<(u32, String)>;
    let (own, others): (Programs, Programs) = aya::programs::loaded_programs()
        .flatten()
        .filter(|i| i.program_type() as u32 == BPF_PROG_TYPE_SOCK_OPS)
        .map(|i| (i.id(), i.name_as_str().unwrap_or_default().to_string()))
        .filter(|(_, n)| n != cgroup::PROGRAM_NAME)
        .partition(|(_, n)| n == crate::observe::kernel::loader::SOCKOPS_KERNEL_NAME);
    let ids = |v: &[(u32, String)]| v.iter().map(|(id, n)| format!("{n} (id {id})")).collect::<Vec<_>>().join(", ");
    if !others.is_empty() {
        p.check(Level::Warn, "sock_ops", format!(
            "sock_ops programs are loaded ({}): they can set the algorithm per connection for the cgroups they are attached to",
            ids(&others)
        ));
    }
    if own.is_empty() {
        return;
    }
    let running = crate::sys::experiment_lock::running().unwrap_or_default();
    for x in &running {
        p.check(Level::Warn, "sock_ops", format!(
            "a bbrscope experiment is running (pid {}, {}): it sets {} or {} on new connections of its scope until it ends",
            x.pid, x.scope, x.arms[0], x.arms[1]
        ));
    }
    if running.is_empty() {
        p.check(
            Level::Info,
            "sock_ops",
            format!(
                "bbrscope's own observers are loaded ({}): they only read connections, and set no algorithm",
                ids(&own)
            ),
        );
    }
}

fn cgroup_scope(p: &mut Plan, path: &Path, ino: u64, algo: &str, host: &Host) -> Result<()> {
    p.check(Level::Ok, "cgroup", format!("{} is a cgroup v2 directory (id {ino})", path.display()));
    let pin = cgroup::pin_path(ino);
    let (direct, multi) = cgroup::attached(path, false)?;
    let (effective, _) = cgroup::attached(path, true)?;
    let foreign: Vec<String> =
        direct.iter().filter(|a| !a.is_ours()).map(|a| format!("{} (id {})", a.name, a.id)).collect();
    if !multi && !foreign.is_empty() {
        p.check(
            Level::Block,
            "cgroup",
            format!(
                "{} is attached to this cgroup exclusively (without BPF_F_ALLOW_MULTI): bbrscope will not replace it",
                foreign.join(", ")
            ),
        );
        return Ok(());
    }
    if !foreign.is_empty() {
        p.check(Level::Info, "cgroup", format!("also attached here, left in place: {}", foreign.join(", ")));
    }
    let inherited: Vec<String> = effective
        .iter()
        .filter(|a| !a.is_ours() && !direct.iter().any(|d| d.id == a.id))
        .map(|a| format!("{} (id {})", a.name, a.id))
        .collect();
    if !inherited.is_empty() {
        p.check(Level::Warn, "cgroup", format!(
            "sock_ops programs of parent cgroups also run for these sockets, after bbrscope's, and could set another algorithm: {}",
            inherited.join(", ")
        ));
    }
    let recorded = host.state.find(&p.scope).and_then(|e| e.algorithm.clone());
    let replaced = if pin.exists() {
        match &recorded {
            Some(a) if a == algo => {
                p.check(
                    Level::Ok,
                    "cgroup",
                    format!("bbrscope's program for {algo} is already pinned at {}", pin.display()),
                );
                return Ok(());
            }
            Some(a) => Some(a.clone()),
            None => {
                p.check(
                    Level::Warn,
                    "cgroup",
                    format!("{} exists but bbrscope has no record of it: it will be replaced", pin.display()),
                );
                None
            }
        }
    } else {
        None
    };
    if !cgroup::bpffs_mounted() {
        p.check(Level::Info, "bpffs", format!("bpffs is not mounted at {}: bbrscope will mount it", cgroup::BPFFS));
        p.changes.push(Change::MountBpffs);
    }
    p.check(Level::Info, "persistence", format!(
        "the program stays attached after bbrscope exits (pinned at {}), until `bbrscope revert --cgroup` or a reboot",
        pin.display()
    ));
    p.changes.push(Change::CgroupLink { cgroup: path.into(), cgroup_ino: ino, pin, algorithm: algo.into(), replaced });
    Ok(())
}

fn route_scope(
    p: &mut Plan,
    netns: &Netns,
    prefix: &ipnet::IpNet,
    algo: Option<&str>,
    windows: &[(Window, u32)],
) -> Result<()> {
    let found = netns::run(netns, || route::find(prefix))?;
    let Some(r) = found else {
        p.check(
            Level::Block,
            "route",
            format!(
                "{netns} has no route for {prefix}: bbrscope changes existing routes only (add one, e.g. \
             `ip route add {prefix} via GATEWAY`, then rerun)"
            ),
        );
        return Ok(());
    };
    let via = r.gateway.map(|g| format!(" via {g}")).unwrap_or_default();
    let shown = |v: Option<u32>| v.map_or_else(|| "unset".to_string(), |v| v.to_string());
    p.check(
        Level::Ok,
        "route",
        format!(
            "{}{via} in {netns}, congctl {}, initcwnd {}, initrwnd {}",
            r.key,
            r.cc.as_deref().unwrap_or("none"),
            shown(r.initcwnd),
            shown(r.initrwnd)
        ),
    );
    let mut keep = Vec::new();
    if let Some(algo) = algo
        && r.cc.as_deref() != Some(algo)
    {
        keep.push(format!("congctl {algo}"));
        p.changes.push(Change::RouteCc {
            netns: netns.clone(),
            route: r.key.clone(),
            from: r.cc.clone(),
            to: algo.into(),
        });
    }
    for &(window, to) in windows {
        let from = r.window(window);
        if from == Some(to) {
            p.check(Level::Ok, window.name(), format!("route {} already has {} {to}", r.key, window.name()));
            continue;
        }
        if window == Window::Initcwnd && to > 10 {
            p.check(
                Level::Info,
                "initcwnd",
                format!(
                    "a first flight of {to} segments (~{} KB) arrives whole only where the client's receive window \
                     and the path's queues take it: prove it with `bbrscope experiment` before widening it",
                    to as usize * 1448 / 1000
                ),
            );
        }
        keep.push(format!("{} {to}", window.name()));
        p.changes.push(Change::RouteWindow { netns: netns.clone(), route: r.key.clone(), window, from, to });
    }
    if !keep.is_empty() {
        p.check(
            Level::Info,
            "persistence",
            format!(
                "the kernel forgets route settings at reboot: add `{}` to the route in your network configuration to keep it",
                keep.join(" ")
            ),
        );
    }
    Ok(())
}

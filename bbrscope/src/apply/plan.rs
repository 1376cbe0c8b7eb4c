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
    machine::{Live, Machine},
    scope::Scope,
    state::State,
    sysctl_d::BootConfig,
};
use crate::sys::netns::{self, Netns};
use crate::sys::{route::Window, sysctl};

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
    pub(crate) level: Level,
    pub(crate) topic: &'static str,
    pub(crate) text: String,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Plan {
    pub(crate) scope: Scope,
    /// The algorithm this run sets (None: only settings beside it).
    pub(crate) algorithm: Option<String>,
    /// The settings beside the algorithm this run sets in this scope.
    pub(crate) settings: Vec<Setting>,
    pub(crate) checks: Vec<Check>,
    pub(crate) changes: Vec<Change>,
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
    pub(crate) algorithm: Option<String>,
    /// `--sysctl`: tunable settings (see [`sysctl::TUNABLE`]), checked and in their recorded form.
    pub(crate) sysctls: Vec<(String, String)>,
    /// `--initcwnd`/`--initrwnd`: route scopes only.
    pub(crate) windows: Vec<(Window, u32)>,
    /// Write the boot-time configuration (system scope only).
    pub(crate) persist: bool,
    /// Add the algorithm to the host's allowed list when a namespace needs it.
    pub(crate) allow: bool,
    /// Make this the default qdisc and re-apply it where the kernel default is in place.
    pub(crate) qdisc: Option<String>,
    /// Where /etc, /run, /usr/lib and /var/lib are (/ except in tests).
    pub(crate) root: PathBuf,
}

/// Facts shared by every scope of one run, and the machine the plan reads the rest from.
pub(crate) struct Host {
    pub(crate) kernel: Kernel,
    pub(crate) state: State,
    /// Effective capabilities of bbrscope.
    pub(crate) caps: u64,
    pub(crate) own_netns: Netns,
    pub(crate) machine: Box<dyn Machine>,
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
        Ok(Host {
            kernel: Kernel::discover()?,
            state: State::load(root)?,
            caps,
            own_netns: netns::current()?,
            machine: Box::new(Live),
        })
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
            tunables(&mut p, netns, opts, host)?;
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
                sock_ops_programs(&mut p, host);
            }
        }
        Scope::Netns { netns } => {
            namespace(&mut p, netns, false);
            if let Some(algo) = &opts.algorithm {
                default_cc(&mut p, netns, algo, opts, host)?;
            }
            tunables(&mut p, netns, opts, host)?;
            p.check(Level::Info, "persistence", format!("{netns}'s settings live as long as the namespace (set them from whatever creates the namespace to keep them)"));
            if opts.algorithm.is_some() {
                sock_ops_programs(&mut p, host);
            }
        }
        Scope::Cgroup { path, ino } => {
            // The command line refuses a cgroup without an algorithm before any plan is made.
            let algo = opts.algorithm.as_deref().unwrap_or_default();
            cgroup_scope(&mut p, path, *ino, algo, host)?;
        }
        Scope::Route { netns, prefix } => {
            route_scope(&mut p, netns, prefix, opts.algorithm.as_deref(), &opts.windows, host)?;
        }
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
    let m = &host.machine;
    let current = m.sysctl(netns, sysctl::CC)?.unwrap_or_default();
    let allowed = m.sysctl(netns, sysctl::ALLOWED)?.map(|v| sysctl::words(&v)).unwrap_or_default();
    let unwritable = m.unwritable(netns, sysctl::CC)?;
    for r in m.congctl_routes(netns)? {
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
fn tunables(p: &mut Plan, netns: &Netns, opts: &Options, host: &Host) -> Result<()> {
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
        let now = host.machine.sysctl(netns, key)?;
        match now {
            None => p.check(Level::Block, "sysctl", format!("{netns} has no {key} (an older kernel?)")),
            Some(now) if now == *value => p.check(Level::Ok, "sysctl", format!("{key} is already {value} in {netns}")),
            Some(now) => match host.machine.unwritable(netns, key)? {
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
    let roots = host.machine.qdiscs()?;
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
            let own = &host.own_netns;
            let current = host.machine.sysctl(own, sysctl::DEFAULT_QDISC)?.unwrap_or_default();
            let interfaces: Vec<String> =
                roots.iter().filter(|r| r.needs_reapply(q)).map(|r| r.ifname.clone()).collect();
            if let Some(why) = host.machine.unwritable(own, sysctl::DEFAULT_QDISC)? {
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
fn sock_ops_programs(p: &mut Plan, host: &Host) {
    type Programs = Vec<(u32, String)>;
    let (own, others): (Programs, Programs) = host
        .machine
        .sock_ops_programs()
        .into_iter()
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
    let running = host.machine.experiments();
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
    let (direct, multi) = host.machine.attached(path, false)?;
    let (effective, _) = host.machine.attached(path, true)?;
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
    let replaced = if host.machine.pinned(&pin) {
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
    if !host.machine.bpffs_mounted() {
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
    host: &Host,
) -> Result<()> {
    let found = host.machine.route(netns, prefix)?;
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

/// The plan's rules against a described machine ([`super::machine::Fake`]): no root, no kernel.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::{cgroup::Attached, machine::Fake, testroot::TempRoot};
    use crate::sys::{experiment_lock::Running, qdisc::RootQdisc, route::Route};

    /// The initial namespace on kernels that fix its inode (this one does).
    fn host_ns() -> Netns {
        Netns { label: "this namespace".into(), path: "/proc/self/ns/net".into(), ino: 0xEFFF_FFF9 }
    }

    fn container_ns() -> Netns {
        Netns { label: "web".into(), path: "/run/netns/web".into(), ino: 4_026_532_999 }
    }

    fn host(machine: Fake) -> Host {
        Host {
            kernel: Kernel::from_parts(&["reno", "cubic", "bbr"], Some("CONFIG_TCP_CONG_HTCP=m\n"), None),
            state: State::default(),
            caps: u64::MAX,
            own_netns: host_ns(),
            machine: Box::new(machine),
        }
    }

    fn opts(root: &TempRoot, algorithm: &str) -> Options {
        Options {
            algorithm: Some(algorithm.into()),
            sysctls: Vec::new(),
            windows: Vec::new(),
            persist: false,
            allow: false,
            qdisc: None,
            root: root.path().to_path_buf(),
        }
    }

    /// The machine's defaults: cubic in both namespaces, the usual allowed list.
    fn machine() -> Fake {
        let mut m = Fake { bpffs: true, ..Fake::default() };
        for ns in [host_ns(), container_ns()] {
            m.set(&ns, sysctl::CC, "cubic").set(&ns, sysctl::ALLOWED, "reno cubic");
        }
        m
    }

    fn checks(p: &Plan, level: Level) -> Vec<&str> {
        p.checks.iter().filter(|c| c.level == level).map(|c| c.topic).collect()
    }

    fn changes(p: &Plan) -> Vec<String> {
        p.changes.iter().map(Change::describe).collect()
    }

    #[test]
    fn the_initial_namespace_switches_and_the_kernel_s_own_allowed_list_entry_is_recorded() {
        let root = TempRoot::new();
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "bbr"), &host(machine())).unwrap();
        assert!(!p.blocked(), "{:?}", p.checks);
        // The kernel adds a new default to the allowed list itself: recorded, so revert takes it off.
        let allowed = Change::Sysctl {
            netns: host_ns(),
            key: sysctl::ALLOWED.into(),
            from: "reno cubic".into(),
            to: "reno cubic bbr".into(),
        };
        let cc = Change::Sysctl { netns: host_ns(), key: sysctl::CC.into(), from: "cubic".into(), to: "bbr".into() };
        assert_eq!(p.changes, vec![allowed, cc]);
        // --no-persist: the next boot is named.
        assert!(checks(&p, Level::Warn).contains(&"boot"), "{:?}", p.checks);

        let mut already = machine();
        already.set(&host_ns(), sysctl::CC, "bbr");
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "bbr"), &host(already)).unwrap();
        assert!(p.changes.is_empty(), "{:?}", changes(&p));
        assert!(p.checks.iter().any(|c| c.topic == "default" && c.text.contains("already bbr")));
    }

    #[test]
    fn outside_the_initial_namespace_the_host_s_allowed_list_blocks_unless_allow_adds_it() {
        let root = TempRoot::new();
        let scope = Scope::Netns { netns: container_ns() };
        let p = plan(&scope, &opts(&root, "bbr"), &host(machine())).unwrap();
        assert!(p.blocked() && checks(&p, Level::Block) == ["allowed"], "{:?}", p.checks);
        assert!(p.changes.is_empty(), "{:?}", changes(&p));

        let mut allow = opts(&root, "bbr");
        allow.allow = true;
        let p = plan(&scope, &allow, &host(machine())).unwrap();
        assert!(!p.blocked(), "{:?}", p.checks);
        // The allowed list is the host's: the change is made in bbrscope's own namespace.
        assert_eq!(
            changes(&p),
            [
                format!("set {} = reno cubic bbr (was reno cubic) in this namespace", sysctl::ALLOWED),
                format!("set {} = bbr (was cubic) in web", sysctl::CC),
            ]
        );
        assert!(matches!(&p.changes[0], Change::Sysctl { netns, .. } if netns.ino == host_ns().ino));
    }

    #[test]
    fn what_cannot_be_written_blocks_and_routes_with_their_own_algorithm_are_named() {
        let root = TempRoot::new();
        let mut m = machine();
        m.read_only.insert((host_ns().ino, sysctl::CC.into()), "/proc/sys is read-only here".into());
        let prefix: ipnet::IpNet = "203.0.113.0/24".parse().unwrap();
        m.routes.push((host_ns().ino, Route::described(prefix, Some("reno"), None, None)));
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "bbr"), &host(m)).unwrap();
        assert!(p.blocked(), "{:?}", p.checks);
        assert!(p.checks.iter().any(|c| c.level == Level::Block && c.text == "/proc/sys is read-only here"));
        assert!(p.checks.iter().any(|c| c.topic == "routes" && c.text.contains("203.0.113.0/24 has congctl reno")));
        assert!(p.changes.is_empty(), "{:?}", changes(&p));
    }

    #[test]
    fn tunables_are_set_only_where_they_exist_differ_and_belong_to_the_namespace() {
        let root = TempRoot::new();
        let mut m = machine();
        m.set(&container_ns(), "net.ipv4.tcp_notsent_lowat", "4294967295").set(
            &container_ns(),
            "net.ipv4.tcp_slow_start_after_idle",
            "0",
        );
        let mut o = opts(&root, "cubic");
        o.sysctls = [
            ("net.ipv4.tcp_notsent_lowat", "131072"),
            ("net.ipv4.tcp_slow_start_after_idle", "0"),
            ("net.core.rmem_max", "67108864"),
            ("net.ipv4.tcp_no_such", "1"),
        ]
        .iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let p = plan(&Scope::Netns { netns: container_ns() }, &o, &host(m)).unwrap();
        let blocks: Vec<&str> = p.checks.iter().filter(|c| c.level == Level::Block).map(|c| c.text.as_str()).collect();
        assert_eq!(
            blocks,
            [
                "net.core.rmem_max is the host's: only the initial network namespace can change it, not web",
                "web has no net.ipv4.tcp_no_such (an older kernel?)",
            ]
        );
        assert_eq!(changes(&p), ["set net.ipv4.tcp_notsent_lowat = 131072 (was 4294967295) in web"]);
    }

    #[test]
    fn a_default_qdisc_is_re_applied_only_to_interfaces_on_the_kernel_s_default() {
        let root = TempRoot::new();
        let mut m = machine();
        m.set(&host_ns(), sysctl::DEFAULT_QDISC, "pfifo_fast");
        let q = |ifname: &str, kind: &str, handle: u32| RootQdisc {
            ifindex: 2,
            ifname: ifname.into(),
            kind: kind.into(),
            handle,
        };
        m.qdiscs = vec![q("eth0", "pfifo_fast", 0), q("eth1", "htb", 1 << 16), q("lo", "noqueue", 0)];
        let mut o = opts(&root, "bbr");
        o.qdisc = Some("fq".into());
        let mut h = host(m);
        h.kernel = Kernel::from_parts(&["reno", "cubic", "bbr"], Some("CONFIG_NET_SCH_FQ=y\n"), None);
        let p = plan(&Scope::System { netns: host_ns() }, &o, &h).unwrap();
        let qdisc = p.changes.iter().find(|c| matches!(c, Change::DefaultQdisc { .. }));
        assert_eq!(
            qdisc,
            Some(&Change::DefaultQdisc { from: "pfifo_fast".into(), to: "fq".into(), interfaces: vec!["eth0".into()] })
        );
        assert!(p.checks.iter().any(|c| c.text == "eth1: htb (custom, handle 1:, left alone)"));

        // A kernel without fq: the step is skipped with a warning, nothing else changes.
        h.kernel = Kernel::from_parts(&["reno", "cubic", "bbr"], Some("CONFIG_NET_SCH_FQ_CODEL=y\n"), None);
        let p = plan(&Scope::System { netns: host_ns() }, &o, &h).unwrap();
        assert!(!p.changes.iter().any(|c| matches!(c, Change::DefaultQdisc { .. })));
        assert!(checks(&p, Level::Warn).contains(&"fq"), "{:?}", p.checks);
    }

    #[test]
    fn a_route_is_changed_only_where_it_exists_and_only_in_what_differs() {
        let root = TempRoot::new();
        let prefix: ipnet::IpNet = "198.51.100.0/24".parse().unwrap();
        let scope = Scope::Route { netns: host_ns(), prefix };
        let p = plan(&scope, &opts(&root, "bbr"), &host(machine())).unwrap();
        assert!(p.blocked() && checks(&p, Level::Block) == ["route"], "{:?}", p.checks);

        let mut m = machine();
        let gw = Some("192.0.2.1".parse().unwrap());
        m.routes.push((host_ns().ino, Route::described(prefix, Some("cubic"), Some(10), gw)));
        let mut o = opts(&root, "bbr");
        o.windows = vec![(Window::Initcwnd, 10), (Window::Initrwnd, 40)];
        let p = plan(&scope, &o, &host(m)).unwrap();
        assert!(!p.blocked(), "{:?}", p.checks);
        // initcwnd is 10 already: only the algorithm and initrwnd change.
        assert_eq!(p.changes.len(), 2, "{:?}", changes(&p));
        assert!(matches!(&p.changes[0], Change::RouteCc { from: Some(f), to, .. } if f == "cubic" && to == "bbr"));
        assert!(matches!(&p.changes[1], Change::RouteWindow { window: Window::Initrwnd, from: None, to: 40, .. }));
        assert!(p.checks.iter().any(|c| c.topic == "route" && c.text.contains("via 192.0.2.1")));
    }

    #[test]
    fn a_cgroup_held_exclusively_is_never_replaced_and_a_pinned_program_is_not_attached_twice() {
        let root = TempRoot::new();
        let path = std::path::PathBuf::from("/sys/fs/cgroup/web.slice");
        let scope = Scope::Cgroup { path: path.clone(), ino: 77 };
        let theirs = Attached { id: 5, name: "lb_setcc".into() };
        let ours = Attached { id: 6, name: cgroup::PROGRAM_NAME.into() };

        let mut exclusive = machine();
        exclusive.cgroups.push((path.clone(), vec![theirs.clone()], false, Vec::new()));
        let p = plan(&scope, &opts(&root, "bbr"), &host(exclusive)).unwrap();
        assert!(p.blocked() && checks(&p, Level::Block) == ["cgroup"], "{:?}", p.checks);
        assert!(p.changes.is_empty());

        // Beside another program, with a parent's program that runs after ours, bpffs unmounted.
        let mut beside = machine();
        beside.bpffs = false;
        beside.cgroups.push((
            path.clone(),
            vec![theirs.clone()],
            true,
            vec![Attached { id: 9, name: "parent_cc".into() }],
        ));
        let p = plan(&scope, &opts(&root, "bbr"), &host(beside)).unwrap();
        assert!(!p.blocked(), "{:?}", p.checks);
        assert!(matches!(p.changes.as_slice(), [Change::MountBpffs, Change::CgroupLink { replaced: None, .. }]));
        assert!(p.checks.iter().any(|c| c.level == Level::Warn && c.text.contains("parent_cc (id 9)")));

        // Already pinned for this algorithm, as recorded: nothing to do.
        let mut pinned = machine();
        pinned.cgroups.push((path.clone(), vec![ours], true, Vec::new()));
        pinned.pins.push(cgroup::pin_path(77));
        let mut h = host(pinned);
        h.state.record(&scope, Some("bbr"), Vec::new());
        let p = plan(&scope, &opts(&root, "bbr"), &h).unwrap();
        assert!(p.changes.is_empty(), "{:?}", changes(&p));
        // Recorded for another algorithm: replaced, and the old one named for revert.
        let p = plan(&scope, &opts(&root, "cubic"), &h).unwrap();
        assert!(matches!(p.changes.as_slice(), [Change::CgroupLink { replaced: Some(r), .. }] if r == "bbr"));
    }

    #[test]
    fn missing_privileges_block_and_other_sock_ops_programs_or_an_experiment_are_named() {
        let root = TempRoot::new();
        let mut h = host(machine());
        h.caps = 0;
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "bbr"), &h).unwrap();
        assert!(p.checks.iter().any(|c| c.level == Level::Block && c.text == "missing CAP_NET_ADMIN: run as root"));

        let mut m = machine();
        m.programs = vec![
            (3, "lb_setcc".into()),
            (4, crate::observe::kernel::loader::SOCKOPS_KERNEL_NAME.into()),
            (5, cgroup::PROGRAM_NAME.into()),
        ];
        // As a lock file says it.
        m.experiments = vec![
            serde_json::from_str::<Running>(
                r#"{"pid":4242,"arms":["cubic","bbr"],"split_pct":50,"sample_pct":100,"scope":"port 443",
                    "started_at":0,"ends":"after 10:00","guardrail":true,"record":null}"#,
            )
            .unwrap(),
        ];
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "bbr"), &host(m)).unwrap();
        let sock_ops: Vec<&str> = p.checks.iter().filter(|c| c.topic == "sock_ops").map(|c| c.text.as_str()).collect();
        assert_eq!(sock_ops.len(), 2, "{sock_ops:?}");
        assert!(sock_ops[0].contains("lb_setcc (id 3)") && !sock_ops[0].contains(cgroup::PROGRAM_NAME), "{sock_ops:?}");
        assert!(sock_ops[1].contains("pid 4242, port 443") && sock_ops[1].contains("cubic or bbr"), "{sock_ops:?}");
    }

    #[test]
    fn an_algorithm_from_a_module_loads_it_before_anything_names_it() {
        let root = TempRoot::new();
        let p = plan(&Scope::System { netns: host_ns() }, &opts(&root, "htcp"), &host(machine())).unwrap();
        assert!(matches!(&p.changes[0], Change::LoadModule { module } if module == "tcp_htcp"), "{:?}", changes(&p));
        assert!(p.changes.iter().skip(1).any(|c| matches!(c, Change::Sysctl { to, .. } if to == "htcp")));
    }
}

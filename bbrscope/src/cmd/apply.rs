//! `bbrscope apply ALGO [scope]`: pre-checks shown as a plan, then the change, recorded so
//! `bbrscope revert` can undo it, then proof on a real socket.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use crate::{
    apply::{
        algo::Kernel,
        files, interrupt,
        lock::Lock,
        plan::{self, Host, Level, Options, Plan},
        run::{self, Outcome, Verification},
        scope::{self, Scope, Spec},
        state::State,
    },
    error::{UsageError, usage},
    output::{self, OutputError, outln},
    sys::netns,
};

/// Where a change applies (no option: the system, i.e. bbrscope's own network namespace).
#[derive(Debug, Args, Clone, Default)]
pub struct ScopeArgs {
    /// A network namespace: an `ip netns` name, a path such as /proc/PID/ns/net, or `all`
    #[arg(long, value_name = "NAME|PATH|all")]
    pub netns: Option<String>,
    /// A cgroup v2 directory: new TCP connections of its processes get the algorithm
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// A route prefix such as 203.0.113.0/24, or several separated by commas: each route's congctl
    /// (with --netns: in that namespace)
    #[arg(long, value_name = "PREFIX[,PREFIX...]")]
    pub route: Option<String>,
    /// Stand-in for / when reading and writing files (tests)
    #[arg(long, hide = true, default_value = "/")]
    pub root: PathBuf,
}

impl ScopeArgs {
    pub fn spec(&self) -> Spec<'_> {
        Spec { netns: self.netns.as_deref(), cgroup: self.cgroup.as_deref(), route: self.route.as_deref() }
    }

    pub fn is_system(&self) -> bool {
        self.netns.is_none() && self.cgroup.is_none() && self.route.is_none()
    }
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Congestion-control algorithm, e.g. bbr or cubic
    pub algorithm: String,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Run the checks and show the plan; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the setting across reboots with a sysctl.d drop-in bbrscope owns (the default for the system scope)
    #[arg(long, conflicts_with = "no_persist")]
    pub persist: bool,
    /// Change the live setting only
    #[arg(long)]
    pub no_persist: bool,
    /// Add the algorithm to the host's tcp_allowed_congestion_control when a namespace needs it
    #[arg(long)]
    pub allow: bool,
    /// Also make QDISC (e.g. fq) the default qdisc and re-apply it on interfaces still on the kernel default
    #[arg(long, value_name = "QDISC")]
    pub qdisc: Option<String>,
    /// Print the plan and result as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct ScopeReport {
    #[serde(flatten)]
    plan: Plan,
    outcome: Option<Outcome>,
    verification: Option<Verification>,
}

pub fn run(args: ApplyArgs) -> Result<()> {
    output::guard(|| apply(args))
}

fn apply(args: ApplyArgs) -> Result<()> {
    if !args.scope.is_system() && args.persist {
        usage!("--persist is for the system scope: namespaces, cgroups and routes do not outlive a reboot as such");
    }
    if !args.scope.is_system() && args.qdisc.is_some() {
        usage!("--qdisc is for the system scope (net.core.default_qdisc is host-wide)");
    }
    let scopes = scope::resolve(&args.scope.spec())?;
    if scopes.is_empty() {
        usage!("no network namespaces found besides bbrscope's own");
    }
    let root = args.scope.root.clone();
    let kernel = Kernel::discover()?;
    kernel.require(&args.algorithm)?;
    if let Some(q) = &args.qdisc {
        kernel.require_qdisc(q)?;
    }
    let opts = Options {
        algorithm: args.algorithm.clone(),
        persist: args.scope.is_system() && !args.no_persist,
        allow: args.allow,
        qdisc: args.qdisc.clone(),
        root: root.clone(),
    };
    // A dry run only reads, so it neither waits for nor takes the lock. A real run plans under
    // the lock: what another run changed meanwhile is what this one starts from.
    let _lock = if args.dry_run { None } else { Some(Lock::acquire(&root)?) };
    if !args.dry_run
        && let Some(note) = run::reconcile(&root)?
    {
        crate::output::errln!("bbrscope: {note}");
    }
    let host = Host::discover(&root)?;
    let mut reports = Vec::new();
    for s in &scopes {
        match plan::plan(s, &opts, &host) {
            Ok(plan) => reports.push(ScopeReport { plan, outcome: None, verification: None }),
            // `--netns all` lists namespaces that may go away before they are looked at.
            Err(_) if s.netns().is_some_and(|n| !netns::still_there(n)) => {
                crate::output::errln!("bbrscope: warning: {s} disappeared while being checked; skipped");
            }
            Err(e) => return Err(e),
        }
    }
    let blocked = reports.iter().any(|r| r.plan.blocked());
    if blocked || args.dry_run {
        for r in &mut reports {
            r.outcome = (!blocked).then_some(Outcome::DryRun);
        }
        let printed = print(&reports, args.json);
        if blocked {
            return Err(UsageError::new("apply blocked by the checks above: nothing was changed").into());
        }
        return Ok(printed?);
    }

    // From the first record to the last, Ctrl-C waits: it lands before anything changed or
    // after the record matches the machine.
    let deferred = interrupt::defer();
    let before = State::load(&root)?;
    for i in 0..reports.len() {
        match run::execute(&reports[i].plan, &root) {
            Ok(outcome) => reports[i].outcome = Some(outcome),
            Err(e) => {
                // This scope rolled itself back; undo the scopes before it too.
                let mut msg = format!("{:#}", e.context(format!("applying to {}", reports[i].plan.scope)));
                for done in reports[..i].iter().rev() {
                    if matches!(done.outcome, Some(Outcome::Applied)) {
                        for err in run::rollback(&done.plan.changes, &root) {
                            msg.push_str(&format!("; ROLLBACK FAILED in {}: {err:#}", done.plan.scope));
                        }
                    }
                }
                if let Err(err) = before.save(&root) {
                    msg.push_str(&format!("; restoring {}: {err:#}", files::STATE));
                }
                deferred.end(&msg);
                // The report of what was planned is secondary to the error.
                let _ = print(&reports[..=i], args.json);
                anyhow::bail!(msg);
            }
        }
    }
    let made = made(&reports);
    deferred.end(made.as_deref().unwrap_or("nothing was changed"));

    let mut failed = Vec::new();
    for r in &mut reports {
        match run::verify(&r.plan.scope, &r.plan.algorithm) {
            Ok(v) => {
                if !v.ok {
                    failed.push(format!(
                        "{}: a new connection got {}, not {}",
                        r.plan.scope, v.probes[0].algorithm, r.plan.algorithm
                    ));
                }
                r.verification = Some(v);
            }
            Err(e) => failed.push(format!("{}: verification failed: {e:#}", r.plan.scope)),
        }
    }
    let printed = print(&reports, args.json);
    // A failed verification outranks a lost report (its message says how to undo the change).
    if !failed.is_empty() {
        anyhow::bail!("{} (the change stays in place; `bbrscope revert` undoes it)", failed.join("; "));
    }
    if let Err(e) = printed {
        // The machine changed: a failed report must still say so, and how to undo it.
        return Err(match &made {
            Some(m) if !e.is_closed_pipe() => anyhow::Error::from(e).context(format!("{m}, but the report was lost")),
            _ => e.into(),
        });
    }
    Ok(())
}

/// What this run changed, and how to undo it, in words (None when it changed nothing).
fn made(reports: &[ScopeReport]) -> Option<String> {
    let applied: Vec<String> = reports
        .iter()
        .filter(|r| matches!(r.outcome, Some(Outcome::Applied)))
        .map(|r| {
            format!(
                "{} now uses {} (`bbrscope revert{}` undoes it)",
                r.plan.scope,
                r.plan.algorithm,
                revert_hint(&r.plan.scope)
            )
        })
        .collect();
    (!applied.is_empty()).then(|| format!("the change was made and recorded: {}", applied.join("; ")))
}

fn print(reports: &[ScopeReport], json: bool) -> Result<(), OutputError> {
    if json {
        let doc = serde_json::to_string_pretty(&serde_json::json!({ "scopes": reports }))
            .expect("the report serialises (plain data)");
        return outln!("{doc}");
    }
    for r in reports {
        let p = &r.plan;
        outln!("{} -> {}", p.scope, p.algorithm)?;
        for c in &p.checks {
            let level = match c.level {
                Level::Ok => "ok",
                Level::Info => "info",
                Level::Warn => "WARN",
                Level::Block => "BLOCK",
            };
            outln!("  {level:<5} {:<11} {}", c.topic, c.text)?;
        }
        if !p.changes.is_empty() {
            outln!("  changes:")?;
            for (i, c) in p.changes.iter().enumerate() {
                outln!("    {}. {}", i + 1, c.describe())?;
            }
        }
        match &r.outcome {
            Some(Outcome::DryRun) => outln!("  dry run: nothing changed")?,
            Some(Outcome::AlreadyInPlace) => outln!("  already in place: nothing changed")?,
            Some(Outcome::Applied) => outln!("  applied (recorded for `bbrscope revert{}`)", revert_hint(&p.scope))?,
            None => {}
        }
        if let Some(v) = &r.verification {
            // The first probe is the proof; any other (a cgroup's accepting side, outside it)
            // only shows the contrast, and must not read as a second proof.
            for (i, probe) in v.probes.iter().enumerate() {
                let label = if i == 0 { "verified:" } else { "contrast:" };
                outln!("  {label} {} got {}", probe.how, probe.algorithm)?;
            }
            if !matches!(p.scope, Scope::Route { .. }) {
                outln!("  existing connections keep the algorithm they started with")?;
            }
        }
    }
    Ok(())
}

fn revert_hint(scope: &Scope) -> String {
    match scope {
        Scope::System { .. } => String::new(),
        Scope::Netns { netns } => format!(" --netns {}", netns.label),
        Scope::Cgroup { path, .. } => format!(" --cgroup {}", path.display()),
        Scope::Route { netns, prefix } if netns.label == "this namespace" => format!(" --route {prefix}"),
        Scope::Route { netns, prefix } => format!(" --netns {} --route {prefix}", netns.label),
    }
}

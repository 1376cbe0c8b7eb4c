//! `bbrscope apply ALGO [scope]`: pre-checks shown as a plan, then the change, recorded so
//! `bbrscope revert` can undo it, then proof on a real socket.

use anyhow::Result;

use crate::{
    apply::{
        plan::{Level, Options},
        run::Outcome,
        scope::{Scope, Spec},
        transaction::{self, Ending, Request, ScopeReport},
    },
    cli::apply::{ApplyArgs, ScopeArgs},
    error::{UsageError, usage},
    output::{self, OutputError, outln},
    sys::{route::Window, sysctl},
};

impl ScopeArgs {
    pub fn spec(&self) -> Spec<'_> {
        Spec { netns: self.netns.as_deref(), cgroup: self.cgroup.as_deref(), route: self.route.as_deref() }
    }

    pub fn is_system(&self) -> bool {
        self.netns.is_none() && self.cgroup.is_none() && self.route.is_none()
    }
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
    let sysctls = args.sysctl.iter().map(|a| sysctl::tunable(a)).collect::<Result<Vec<_>, String>>();
    let sysctls = sysctls.map_err(UsageError::new)?;
    if !sysctls.is_empty() && (args.scope.cgroup.is_some() || args.scope.route.is_some()) {
        usage!("--sysctl sets a namespace's setting: give no --cgroup or --route (the system, or --netns NAME)");
    }
    if args.algorithm.is_none() && args.scope.cgroup.is_some() {
        usage!("--cgroup sets an algorithm: name it, e.g. `bbrscope apply bbr --cgroup PATH`");
    }
    if args.algorithm.is_none() && args.allow {
        usage!("--allow is about an algorithm: name it, e.g. `bbrscope apply bbr --netns NAME --allow`");
    }
    let mut windows = Vec::new();
    for (window, value) in [(Window::Initcwnd, args.initcwnd), (Window::Initrwnd, args.initrwnd)] {
        match value {
            Some(v) if !(1..=Window::MAX).contains(&v) => {
                usage!("--{} {v}: expected 1 to {} segments (the kernel's default is 10)", window.name(), Window::MAX)
            }
            Some(v) => windows.push((window, v)),
            None => {}
        }
    }
    let options = Options {
        algorithm: args.algorithm.clone(),
        sysctls,
        windows,
        persist: args.scope.is_system() && !args.no_persist,
        allow: args.allow,
        qdisc: args.qdisc.clone(),
        root: args.scope.root.clone(),
    };
    let request = Request { scope: args.scope.spec(), options, dry_run: args.dry_run };
    let t = transaction::apply(&request, &mut |note| output::errln!("bbrscope: {note}"))?;
    let printed = print(&t.reports, args.json);
    match t.ending {
        Ending::Blocked => Err(UsageError::new("apply blocked by the checks above: nothing was changed").into()),
        // The report of what was planned is secondary to the error.
        Ending::Failed(msg) => anyhow::bail!(msg),
        // A failed verification outranks a lost report (its message says how to undo the change).
        Ending::Unverified(failed) => {
            anyhow::bail!("{} (the change stays in place; `bbrscope revert` undoes it)", failed.join("; "))
        }
        // The machine changed: a failed report must still say so, and how to undo it.
        Ending::Done => printed.map_err(|e| match &t.made {
            Some(m) if !e.is_closed_pipe() => anyhow::Error::from(e).context(format!("{m}, but the report was lost")),
            _ => e.into(),
        }),
    }
}

fn print(reports: &[ScopeReport], json: bool) -> Result<(), OutputError> {
    if json {
        let doc = serde_json::to_string_pretty(&serde_json::json!({ "scopes": reports }))
            .expect("the report serialises (plain data)");
        return outln!("{doc}");
    }
    for r in reports {
        let p = &r.plan;
        outln!("{} -> {}", p.scope, p.target())?;
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
            Some(Outcome::Applied) => {
                outln!("  applied (recorded for `bbrscope revert{}`)", transaction::revert_hint(&p.scope))?;
            }
            None => {}
        }
        if let Some(v) = &r.verification {
            // The first probe is the proof; any other (a cgroup's accepting side, outside it)
            // only shows the contrast, and must not read as a second proof.
            for (i, probe) in v.probes.iter().enumerate() {
                let label = if i == 0 { "verified:" } else { "contrast:" };
                outln!("  {label} {} got {}", probe.how, probe.algorithm)?;
            }
            for s in &v.settings {
                outln!("  {} {}", if s.ok { "verified:" } else { "NOT SET: " }, s.reads)?;
            }
            if !v.probes.is_empty() && !matches!(p.scope, Scope::Route { .. }) {
                outln!("  existing connections keep the algorithm they started with")?;
            }
        }
    }
    Ok(())
}

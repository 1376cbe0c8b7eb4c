//! `bbrscope revert [scope]`: restores what `apply` recorded for the scope and removes only
//! what bbrscope added.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::{
    apply::{change::Undone, lock::Lock, run, scope, scope::Scope, state::State},
    cli::revert::RevertArgs,
    error::usage,
    output::{self, OutputError, outln},
    sys::netns,
};

#[derive(Serialize)]
struct Step {
    change: String,
    #[serde(flatten)]
    result: StepResult,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum StepResult {
    Done(Undone),
    Failed(String),
}

/// Whether a recorded scope is the one the options name. By name and path rather than by
/// identity, so a scope whose namespace or cgroup is gone can still be reverted (and its record
/// dropped).
fn selected(recorded: &Scope, args: &RevertArgs, own_ino: u64) -> bool {
    let a = &args.scope;
    if args.all {
        return true;
    }
    let netns_matches = |ns: &netns::Netns| match a.netns.as_deref() {
        None => ns.ino == own_ino,
        Some("all") => ns.ino != own_ino,
        Some(name) => ns.label == name || ns.path == Path::new(name),
    };
    match recorded {
        Scope::System { netns } => a.is_system() && netns.ino == own_ino,
        Scope::Netns { netns } => a.route.is_none() && a.cgroup.is_none() && a.netns.is_some() && netns_matches(netns),
        Scope::Cgroup { path, .. } => {
            a.cgroup.as_ref().is_some_and(|c| c == path || c.canonicalize().is_ok_and(|c| c == *path))
        }
        Scope::Route { netns, prefix } => match a.route.as_deref() {
            // `--route A,B`, as apply takes it.
            Some(r) => {
                r.split(',').any(|r| scope::parse_prefix(r.trim()).is_ok_and(|p| p == *prefix)) && netns_matches(netns)
            }
            // `--netns X` alone reverts what was recorded in X, its routes too: they are X's (and
            // go with it), and leaving them would leave X changed with no word of it.
            None => a.cgroup.is_none() && a.netns.is_some() && netns_matches(netns),
        },
    }
}

pub fn run(args: RevertArgs) -> Result<()> {
    output::guard(|| revert(args))
}

/// Checks the scope options as `apply` does, so a typo is an error rather than "nothing
/// recorded". A namespace or cgroup that is gone can still be named when bbrscope recorded it:
/// reverting its record is how the record goes.
fn validate(args: &RevertArgs, state: &State) -> Result<()> {
    let a = &args.scope;
    if a.cgroup.is_some() && (a.netns.is_some() || a.route.is_some()) {
        usage!(
            "--cgroup cannot be combined with --netns or --route: a cgroup's sockets get the algorithm in every namespace"
        );
    }
    for r in a.route.iter().flat_map(|r| r.split(',')) {
        scope::parse_prefix(r.trim())?;
    }
    let recorded = |f: &dyn Fn(&Scope) -> bool| state.entries.iter().any(|e| f(&e.scope));
    if let Some(name) = a.netns.as_deref().filter(|n| *n != "all") {
        let named = |ns: &netns::Netns| ns.label == name || ns.path == Path::new(name);
        if !recorded(&|s| s.netns().is_some_and(named)) {
            netns::resolve(name)?;
        }
    }
    if let Some(path) = &a.cgroup {
        let named = |s: &Scope| matches!(s, Scope::Cgroup { path: p, .. } if p == path || path.canonicalize().is_ok_and(|c| c == *p));
        if !recorded(&named) {
            crate::sys::cgroup::resolve(path)?;
        }
    }
    Ok(())
}

fn revert(args: RevertArgs) -> Result<()> {
    let root = args.scope.root.clone();
    validate(&args, &State::load(&root)?)?;
    let _lock = Lock::acquire(&root)?;
    if let Some(note) = run::reconcile(&root)? {
        crate::output::errln!("bbrscope: {note}");
    }
    let mut state = State::load(&root)?;
    let own = netns::current()?.ino;
    let scopes: Vec<Scope> =
        state.entries.iter().map(|e| e.scope.clone()).filter(|s| selected(s, &args, own)).collect();
    if scopes.is_empty() {
        if args.json {
            outln!("{}", serde_json::json!({ "scopes": [] }))?;
        } else {
            outln!("nothing recorded for that scope: bbrscope has not changed it (see `bbrscope status`)")?;
        }
        return Ok(());
    }
    let mut out = Vec::new();
    let mut failures = 0;
    // Ctrl-C waits until every selected scope is reverted and the record says so.
    let deferred = crate::sys::signal::defer();
    for s in scopes {
        let steps = match run::revert(&mut state, &s, &root, args.force) {
            Ok(steps) => steps,
            Err(e) => {
                deferred.end(&format!("{e:#}"));
                return Err(e);
            }
        };
        let steps: Vec<Step> = steps
            .into_iter()
            .map(|(change, r)| Step {
                change,
                result: match r {
                    Ok(u) => StepResult::Done(u),
                    Err(e) => {
                        failures += 1;
                        StepResult::Failed(e)
                    }
                },
            })
            .collect();
        out.push((s, steps));
    }
    let done: Vec<String> = out.iter().map(|(s, _)| s.to_string()).collect();
    deferred.end(&format!("reverted {} (see `bbrscope status`)", done.join(", ")));
    print(&out, args.json).map_err(|e| {
        if e.is_closed_pipe() {
            return e.into();
        }
        anyhow::Error::from(e)
            .context(format!("reverted {}, but the report was lost (see `bbrscope status`)", done.join(", ")))
    })?;
    if failures > 0 {
        anyhow::bail!("{failures} change(s) could not be undone; they stay recorded for another `bbrscope revert`");
    }
    Ok(())
}

fn print(out: &[(Scope, Vec<Step>)], json: bool) -> Result<(), OutputError> {
    if json {
        let doc: Vec<_> = out.iter().map(|(s, steps)| serde_json::json!({ "scope": s, "steps": steps })).collect();
        let doc = serde_json::to_string_pretty(&serde_json::json!({ "scopes": doc }))
            .expect("the report serialises (plain data)");
        return outln!("{doc}");
    }
    for (s, steps) in out {
        outln!("{s}: reverted")?;
        for st in steps {
            let line = match &st.result {
                StepResult::Done(Undone::Restored(d)) => format!("restored  {d}"),
                StepResult::Done(Undone::Nothing(d)) => format!("unchanged {d}"),
                StepResult::Done(Undone::Kept(d)) => format!("KEPT      {d} (--force restores it)"),
                StepResult::Failed(e) => format!("FAILED    {}: {e}", st.change),
            };
            outln!("  {line}")?;
        }
    }
    Ok(())
}

//! One `apply` as a whole, over every scope it names: checks (a plan per scope), the changes
//! made and recorded scope by scope, every scope rolled back if one fails, then proof on a new
//! connection. The caller prints the reports and turns the ending into its exit.

use anyhow::Result;
use serde::Serialize;

use super::{
    algo::Kernel,
    files,
    lock::Lock,
    machine::Live,
    plan::{self, Host, Options, Plan},
    run::{self, Outcome, Verification},
    scope::{self, Scope, Spec},
    state::State,
};
use crate::{
    error::usage,
    sys::{netns, signal},
};

/// What the user asked for.
pub(crate) struct Request<'a> {
    pub(crate) scope: Spec<'a>,
    pub(crate) options: Options,
    /// Check and plan only; change nothing (and take no lock: it only reads).
    pub(crate) dry_run: bool,
}

/// One scope's plan and what became of it.
#[derive(Serialize)]
pub(crate) struct ScopeReport {
    #[serde(flatten)]
    pub(crate) plan: Plan,
    pub(crate) outcome: Option<Outcome>,
    pub(crate) verification: Option<Verification>,
}

/// How the transaction ended.
pub(crate) enum Ending {
    /// Every scope applied (or already in place) and verified, or a dry run.
    Done,
    /// The checks blocked it: nothing was changed.
    Blocked,
    /// A change failed: every scope was rolled back; the message says what failed, and any
    /// rollback that failed too.
    Failed(String),
    /// Applied and recorded, but a new connection did not get the algorithm or a setting does
    /// not read as set (or could not be checked): one line each.
    Unverified(Vec<String>),
}

pub(crate) struct Transaction {
    /// The scopes' reports (up to the one that failed, when one did).
    pub(crate) reports: Vec<ScopeReport>,
    pub(crate) ending: Ending,
    /// What this run changed and how to undo it, in words (None when nothing changed).
    pub(crate) made: Option<String>,
}

/// Runs one apply. `Err` only before anything changed (bad scope, unknown algorithm, a busy
/// lock); everything after is in the [`Transaction`]. `note` gets a line for the user when an
/// earlier interrupted run is reconciled or a namespace vanishes while being checked.
pub(crate) fn apply(req: &Request, note: &mut dyn FnMut(&str)) -> Result<Transaction> {
    let scopes = scope::resolve(&req.scope, &Live)?;
    if scopes.is_empty() {
        usage!("no network namespaces found besides bbrscope's own");
    }
    let opts = &req.options;
    let root = &opts.root;
    let kernel = Kernel::discover()?;
    if let Some(algo) = &opts.algorithm {
        kernel.require(algo)?;
    }
    if let Some(q) = &opts.qdisc {
        kernel.require_qdisc(q)?;
    }
    // A dry run only reads, so it neither waits for nor takes the lock. A real run plans under
    // the lock: what another run changed meanwhile is what this one starts from.
    let _lock = if req.dry_run { None } else { Some(Lock::acquire(root)?) };
    if !req.dry_run
        && let Some(n) = run::reconcile(root)?
    {
        note(&n);
    }
    let host = Host::discover(root)?;
    let mut reports = Vec::new();
    for s in &scopes {
        match plan::plan(s, opts, &host) {
            Ok(plan) => reports.push(ScopeReport { plan, outcome: None, verification: None }),
            // `--netns all` lists namespaces that may go away before they are looked at.
            Err(_) if s.netns().is_some_and(|n| !netns::still_there(n)) => {
                note(&format!("warning: {s} disappeared while being checked; skipped"));
            }
            Err(e) => return Err(e),
        }
    }
    let blocked = reports.iter().any(|r| r.plan.blocked());
    if blocked || req.dry_run {
        for r in &mut reports {
            r.outcome = (!blocked).then_some(Outcome::DryRun);
        }
        let ending = if blocked { Ending::Blocked } else { Ending::Done };
        return Ok(Transaction { reports, ending, made: None });
    }
    if let Some(failed) = change(&mut reports, root)? {
        return Ok(Transaction { reports, ending: Ending::Failed(failed), made: None });
    }
    let made = made(&reports);
    let mut unverified = Vec::new();
    for r in &mut reports {
        match run::verify(&r.plan) {
            Ok(v) => {
                unverified.extend(v.failures(&r.plan));
                r.verification = Some(v);
            }
            Err(e) => unverified.push(format!("{}: verification failed: {e:#}", r.plan.scope)),
        }
    }
    let ending = if unverified.is_empty() { Ending::Done } else { Ending::Unverified(unverified) };
    Ok(Transaction { reports, ending, made })
}

/// Makes every scope's changes. From the first record to the last, Ctrl-C waits: it lands
/// before anything changed or after the record matches the machine. When a scope fails, it has
/// rolled itself back; the scopes before it are undone too, the record is put back, `reports`
/// is cut after the failed one, and the returned message says what happened.
fn change(reports: &mut Vec<ScopeReport>, root: &std::path::Path) -> Result<Option<String>> {
    let deferred = signal::defer();
    let before = State::load(root)?;
    for i in 0..reports.len() {
        match run::execute(&reports[i].plan, root) {
            Ok(outcome) => reports[i].outcome = Some(outcome),
            Err(e) => {
                let mut msg = format!("{:#}", e.context(format!("applying to {}", reports[i].plan.scope)));
                for done in reports[..i].iter().rev() {
                    if matches!(done.outcome, Some(Outcome::Applied)) {
                        for err in run::rollback(&done.plan.changes, root) {
                            msg.push_str(&format!("; ROLLBACK FAILED in {}: {err:#}", done.plan.scope));
                        }
                    }
                }
                if let Err(err) = before.save(root) {
                    msg.push_str(&format!("; restoring {}: {err:#}", files::STATE));
                }
                deferred.end(&msg);
                reports.truncate(i + 1);
                return Ok(Some(msg));
            }
        }
    }
    deferred.end(made(reports).as_deref().unwrap_or("nothing was changed"));
    Ok(None)
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
                r.plan.target(),
                revert_hint(&r.plan.scope)
            )
        })
        .collect();
    (!applied.is_empty()).then(|| format!("the change was made and recorded: {}", applied.join("; ")))
}

/// The `bbrscope revert` options that name `scope`.
pub(crate) fn revert_hint(scope: &Scope) -> String {
    match scope {
        Scope::System { .. } => String::new(),
        Scope::Netns { netns } => format!(" --netns {}", netns.label),
        Scope::Cgroup { path, .. } => format!(" --cgroup {}", path.display()),
        Scope::Route { netns, prefix } if netns.label == "this namespace" => format!(" --route {prefix}"),
        Scope::Route { netns, prefix } => format!(" --netns {} --route {prefix}", netns.label),
    }
}

//! One `revert` as a whole: the recorded scopes the request names, each undone as recorded
//! ([`run::revert`]), under the lock and with Ctrl-C held off until every one is and the record
//! says so. The caller prints the steps and turns the failures into its exit.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use super::{
    change::Undone,
    lock::Lock,
    run,
    scope::{self, Scope, Spec},
    state::State,
};
use crate::sys::{netns, signal};

/// What the user asked to undo.
pub(crate) struct Request<'a> {
    /// The scope options (none with `all`).
    pub(crate) scope: Spec<'a>,
    /// Every scope bbrscope has changed.
    pub(crate) all: bool,
    /// Restore recorded values even where someone changed them since bbrscope did.
    pub(crate) force: bool,
    pub(crate) root: &'a Path,
}

/// One recorded change and what undoing it did.
#[derive(Serialize)]
pub(crate) struct Step {
    pub(crate) change: String,
    #[serde(flatten)]
    pub(crate) result: StepResult,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StepResult {
    Done(Undone),
    Failed(String),
}

/// What the revert did.
pub(crate) struct Reverted {
    /// Each selected scope and its steps (none: nothing was recorded for the request).
    pub(crate) scopes: Vec<(Scope, Vec<Step>)>,
    /// Changes that could not be undone; they stay recorded for another `revert`.
    pub(crate) failures: usize,
}

impl Reverted {
    /// The scopes reverted, in words.
    pub(crate) fn named(&self) -> String {
        let done: Vec<String> = self.scopes.iter().map(|(s, _)| s.to_string()).collect();
        done.join(", ")
    }
}

/// Whether a recorded scope is the one the options name. By name and path rather than by
/// identity, so a scope whose namespace or cgroup is gone can still be reverted (and its record
/// dropped).
fn selected(recorded: &Scope, req: &Request, own_ino: u64) -> bool {
    let a = &req.scope;
    if req.all {
        return true;
    }
    let netns_matches = |ns: &netns::Netns| match a.netns {
        None => ns.ino == own_ino,
        Some("all") => ns.ino != own_ino,
        Some(name) => ns.label == name || ns.path == Path::new(name),
    };
    match recorded {
        Scope::System { netns } => a.is_system() && netns.ino == own_ino,
        Scope::Netns { netns } => a.route.is_none() && a.cgroup.is_none() && a.netns.is_some() && netns_matches(netns),
        Scope::Cgroup { path, .. } => a.cgroup.is_some_and(|c| c == path || c.canonicalize().is_ok_and(|c| c == *path)),
        Scope::Route { netns, prefix } => match a.route {
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

/// A namespace or cgroup the options name must exist, so a typo is an error rather than
/// "nothing recorded" — unless bbrscope recorded it: reverting the record of one that is gone is
/// how the record goes.
fn check_named(a: &Spec, state: &State) -> Result<()> {
    let recorded = |f: &dyn Fn(&Scope) -> bool| state.entries.iter().any(|e| f(&e.scope));
    if let Some(name) = a.netns.filter(|n| *n != "all") {
        let named = |ns: &netns::Netns| ns.label == name || ns.path == Path::new(name);
        if !recorded(&|s| s.netns().is_some_and(named)) {
            netns::resolve(name)?;
        }
    }
    if let Some(path) = a.cgroup {
        let named = |s: &Scope| matches!(s, Scope::Cgroup { path: p, .. } if p == path || path.canonicalize().is_ok_and(|c| c == *p));
        if !recorded(&named) {
            crate::sys::cgroup::resolve(path)?;
        }
    }
    Ok(())
}

/// Runs one revert. `Err` when it could not start (a scope named that does not exist, a busy
/// lock) or a record could not be written; a change that could not be undone is counted in
/// [`Reverted::failures`] instead. `note` gets a line for the user when an earlier interrupted
/// run is reconciled.
pub(crate) fn revert(req: &Request, note: &mut dyn FnMut(&str)) -> Result<Reverted> {
    let root = req.root;
    check_named(&req.scope, &State::load(root)?)?;
    let _lock = Lock::acquire(root)?;
    if let Some(n) = run::reconcile(root)? {
        note(&n);
    }
    let mut state = State::load(root)?;
    let own = netns::current()?.ino;
    let scopes: Vec<Scope> = state.entries.iter().map(|e| e.scope.clone()).filter(|s| selected(s, req, own)).collect();
    let mut reverted = Reverted { scopes: Vec::new(), failures: 0 };
    if scopes.is_empty() {
        return Ok(reverted);
    }
    // Ctrl-C waits until every selected scope is reverted and the record says so.
    let deferred = signal::defer();
    for s in scopes {
        let steps = match run::revert(&mut state, &s, root, req.force) {
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
                        reverted.failures += 1;
                        StepResult::Failed(e)
                    }
                },
            })
            .collect();
        reverted.scopes.push((s, steps));
    }
    deferred.end(&format!("reverted {} (see `bbrscope status`)", reverted.named()));
    Ok(reverted)
}

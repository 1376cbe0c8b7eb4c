//! The changing half of `apply`, and `revert`: record the intent, change, record the result (or
//! roll back on failure), then prove the result on a real socket. Callers hold the apply lock
//! ([`super::lock`]) and keep termination signals off ([`super::interrupt`]) meanwhile.

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::{
    change::{Change, Undone},
    plan::{Plan, Setting},
    scope::Scope,
    state::State,
    verify::{self, Probe},
};
use crate::sys::netns;
use crate::sys::{route, sysctl};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    DryRun,
    AlreadyInPlace,
    Applied,
}

/// Makes the plan's changes. The intent is written to the state file before the first change
/// (so a run killed midway is rolled back by the next, see [`reconcile`]) and becomes a recorded
/// entry once every change is made. If a change fails, the ones made before it are undone in
/// reverse order and the state file is put back.
pub(crate) fn execute(plan: &Plan, root: &Path) -> Result<Outcome> {
    if plan.changes.is_empty() {
        return Ok(Outcome::AlreadyInPlace);
    }
    let before = State::load(root)?;
    let mut intent = before.clone();
    intent.intend(&plan.scope, plan.algorithm.as_deref(), plan.changes.clone());
    intent.save(root).context("recording the intended change (nothing was changed)")?;
    let mut after = before.clone();
    after.record(&plan.scope, plan.algorithm.as_deref(), plan.changes.clone());
    for (i, change) in plan.changes.iter().enumerate() {
        if let Err(e) = change.apply(root) {
            // The failed change may have got halfway (a replaced link detached, say); undoing
            // it too is safe, as undoing something not done finds nothing to do.
            anyhow::bail!(undo(&plan.changes[..=i], &before, root, format!("{}: {e:#}", change.describe())));
        }
    }
    if let Err(e) = after.save(root) {
        // Unrecorded, the change could not be reverted later: better not to keep it.
        anyhow::bail!(undo(&plan.changes, &before, root, format!("recording the change: {e:#}")));
    }
    Ok(Outcome::Applied)
}

/// Rolls back `done` and restores the state file; the message says how that went.
fn undo(done: &[Change], before: &State, root: &Path, mut msg: String) -> String {
    let undo_errors = rollback(done, root);
    let restore = before.save(root).err();
    if undo_errors.is_empty() && restore.is_none() {
        msg.push_str("; everything this run changed was rolled back");
    }
    for u in undo_errors.iter().chain(restore.iter()) {
        msg.push_str(&format!("; ROLLBACK FAILED: {u:#}"));
    }
    msg
}

/// Rolls back what a run killed midway (SIGKILL, a crash, power loss) had started, as found in
/// the state file's `pending` intent, so the record and the machine agree again. Returns a line
/// for the user when there was something to reconcile. Only under the apply lock, where no
/// other run can be in progress.
pub(crate) fn reconcile(root: &Path) -> Result<Option<String>> {
    let mut state = State::load(root)?;
    let mut notes = Vec::new();
    if let Some(pending) = state.pending.take() {
        // Not forced: a setting someone changed since is theirs now.
        let errors: Vec<anyhow::Error> =
            pending.changes.iter().rev().filter_map(|c| c.revert(root, false).err()).collect();
        if !errors.is_empty() {
            let all: Vec<String> = errors.iter().map(|e| format!("{e:#}")).collect();
            anyhow::bail!(
                "an earlier apply to {} was interrupted midway, and rolling back what it changed failed: {} \
                 (its intent stays in {} for another try)",
                pending.scope,
                all.join("; "),
                super::files::STATE
            );
        }
        state.save(root)?;
        notes.push(format!(
            "an earlier apply of {} to {} was interrupted midway: what it had changed was rolled back",
            pending.what(),
            pending.scope
        ));
    }
    if let Some(entry) = state.reverting.clone() {
        // What it had undone already reads as its earlier value (`Undone::Nothing`); what it had
        // not, is undone now; what fails or was changed by someone since stays recorded.
        let scope = entry.scope.clone();
        state.entries.push(entry);
        state.reverting = None;
        revert(&mut state, &scope, root, false)?;
        notes.push(format!("an earlier revert of {scope} was interrupted midway: it is finished now"));
    }
    Ok((!notes.is_empty()).then(|| notes.join("; ")))
}

pub(crate) fn rollback(done: &[Change], root: &Path) -> Vec<anyhow::Error> {
    done.iter().rev().filter_map(|c| c.revert(root, true).err()).collect()
}

/// What one scope's verification found.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Verification {
    /// New connections and the algorithm each got (none when the run set no algorithm).
    pub(crate) probes: Vec<Probe>,
    /// Each other setting as the kernel gives it now.
    pub(crate) settings: Vec<ReadBack>,
    /// The connection the change is about got the algorithm, and every setting reads as set.
    pub(crate) ok: bool,
}

/// A setting read back where it was set.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ReadBack {
    pub(crate) setting: String,
    /// What the kernel says, in words.
    pub(crate) reads: String,
    pub(crate) ok: bool,
}

impl Verification {
    /// One line per thing that did not hold.
    pub(crate) fn failures(&self, plan: &Plan) -> Vec<String> {
        let algo = plan.algorithm.as_deref().filter(|a| self.probes.first().is_some_and(|p| p.algorithm != *a));
        let algo = algo.map(|a| format!("{}: a new connection got {}, not {a}", plan.scope, self.probes[0].algorithm));
        let settings =
            self.settings.iter().filter(|s| !s.ok).map(|s| format!("{}: {}, not {}", plan.scope, s.reads, s.setting));
        algo.into_iter().chain(settings).collect()
    }
}

/// Opens a connection where the change applies and reports what it got, and reads each other
/// setting back. For a route, whose addresses are elsewhere, the kernel's route lookup stands
/// in: bbrscope sends no traffic to other networks.
pub(crate) fn verify(plan: &Plan) -> Result<Verification> {
    let lookup = |netns, prefix| netns::run(netns, || route::lookup_in(prefix));
    let mut probes = Vec::new();
    if plan.algorithm.is_some() {
        probes = match &plan.scope {
            Scope::System { netns } | Scope::Netns { netns } => vec![netns::run(netns, verify::loopback)?],
            Scope::Cgroup { path, .. } => {
                let (inside, outside) = verify::in_cgroup(path)?;
                vec![inside, outside]
            }
            Scope::Route { netns, prefix } => {
                let (addr, route) = lookup(netns, prefix)?;
                vec![Probe {
                    algorithm: route.and_then(|r| r.cc).unwrap_or_else(|| "the namespace default".into()),
                    how: format!("kernel route lookup for a new connection to {addr} (no traffic sent)"),
                }]
            }
        };
    }
    let mut settings = Vec::new();
    for s in &plan.settings {
        let (reads, ok) = match (s, &plan.scope) {
            (Setting::Sysctl { key, value }, Scope::System { netns } | Scope::Netns { netns }) => {
                let now = netns::run(netns, || sysctl::read(key))?.unwrap_or_default();
                (format!("{key} reads {now} in {netns}"), now == *value)
            }
            (Setting::Route { window, value }, Scope::Route { netns, prefix }) => {
                let (addr, route) = lookup(netns, prefix)?;
                let now = route.and_then(|r| r.window(*window));
                let shown = now.map_or_else(|| "unset".to_string(), |v| v.to_string());
                (format!("the kernel's route lookup for {addr} gives {} {shown}", window.name()), now == Some(*value))
            }
            _ => continue,
        };
        settings.push(ReadBack { setting: s.to_string(), reads, ok });
    }
    let ok = plan.algorithm.as_ref().is_none_or(|a| probes[0].algorithm == *a) && settings.iter().all(|s| s.ok);
    Ok(Verification { probes, settings, ok })
}

/// Undoes one recorded scope, newest change first. Changes that failed to undo, or that were
/// left alone because someone changed them since, stay recorded (a later `revert --force` can
/// still restore them); the scope's record goes once nothing is left. The entry becomes the
/// `reverting` intent in one write before anything is undone, so a kill in between leaves the
/// intent, not a claim, and [`reconcile`] finishes it.
pub(crate) fn revert(
    state: &mut State,
    scope: &Scope,
    root: &Path,
    force: bool,
) -> Result<Vec<(String, Result<Undone, String>)>> {
    let Some(entry) = state.remove(scope) else { return Ok(Vec::new()) };
    state.reverting = Some(entry.clone());
    state.save_for_revert(root)?;
    let mut report = Vec::new();
    let mut remaining = Vec::new();
    for change in entry.changes.iter().rev() {
        let result = change.revert(root, force);
        let keep = matches!(result, Ok(Undone::Kept(_)) | Err(_));
        report.push((change.describe(), result.map_err(|e| format!("{e:#}"))));
        if keep {
            remaining.insert(0, change.clone());
        }
    }
    if !remaining.is_empty() {
        state.entries.push(super::state::Entry { changes: remaining, ..entry });
    }
    state.reverting = None;
    state.save_for_revert(root)?;
    Ok(report)
}

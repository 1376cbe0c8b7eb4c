//! The changing half of `apply`, and `revert`: record first, change, roll back on failure,
//! then prove the result on a real socket.

use std::path::Path;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::{
    change::{Change, Undone},
    netns,
    plan::Plan,
    route,
    scope::Scope,
    state::State,
    verify::{self, Probe},
};

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    DryRun,
    AlreadyInPlace,
    Applied,
}

/// Makes the plan's changes. The state file is written before the first change, so an
/// interrupted run can still be reverted; if a change fails, the ones made before it are
/// undone in reverse order and the state file is put back.
pub fn execute(plan: &Plan, root: &Path) -> Result<Outcome> {
    if plan.changes.is_empty() {
        return Ok(Outcome::AlreadyInPlace);
    }
    let before = State::load(root)?;
    let mut state = before.clone();
    state.record(&plan.scope, &plan.algorithm, plan.changes.clone());
    state.save(root).context("recording the previous state (nothing was changed)")?;
    for (i, change) in plan.changes.iter().enumerate() {
        if let Err(e) = change.apply(root) {
            // The failed change may have got halfway (a replaced link detached, say); undoing
            // it too is safe, as undoing something not done finds nothing to do.
            let undo_errors = rollback(&plan.changes[..=i], root);
            let restore = before.save(root).err();
            let mut msg = format!("{}: {e:#}", change.describe());
            if undo_errors.is_empty() && restore.is_none() {
                msg.push_str("; everything this run changed was rolled back");
            }
            for u in undo_errors.iter().chain(restore.iter()) {
                msg.push_str(&format!("; ROLLBACK FAILED: {u:#}"));
            }
            anyhow::bail!(msg);
        }
    }
    Ok(Outcome::Applied)
}

pub fn rollback(done: &[Change], root: &Path) -> Vec<anyhow::Error> {
    done.iter().rev().filter_map(|c| c.revert(root, true).err()).collect()
}

/// What one scope's verification found.
#[derive(Clone, Debug, Serialize)]
pub struct Verification {
    pub probes: Vec<Probe>,
    /// The connection the change is about got the algorithm.
    pub ok: bool,
}

/// Opens a connection where the change applies and reports what it got. For a route, whose
/// addresses are elsewhere, the kernel's route lookup stands in: bbrscope sends no traffic to
/// other networks.
pub fn verify(scope: &Scope, algorithm: &str) -> Result<Verification> {
    let probes = match scope {
        Scope::System { netns } | Scope::Netns { netns } => vec![netns::run(netns, verify::loopback)?],
        Scope::Cgroup { path, .. } => {
            let (inside, outside) = verify::in_cgroup(path)?;
            vec![inside, outside]
        }
        Scope::Route { netns, prefix } => {
            let (addr, cc) = netns::run(netns, || route::lookup_in(prefix))?;
            vec![Probe {
                algorithm: cc.unwrap_or_else(|| "the namespace default".into()),
                how: format!("kernel route lookup for a new connection to {addr} (no traffic sent)"),
            }]
        }
    };
    let ok = probes[0].algorithm == algorithm;
    Ok(Verification { probes, ok })
}

/// Undoes one recorded scope, newest change first. Changes that failed to undo, or that were
/// left alone because someone changed them since, stay recorded (a later `revert --force` can
/// still restore them); the scope's record goes once nothing is left.
pub fn revert(
    state: &mut State,
    scope: &Scope,
    root: &Path,
    force: bool,
) -> Result<Vec<(String, Result<Undone, String>)>> {
    let Some(entry) = state.remove(scope) else { return Ok(Vec::new()) };
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
    state.save(root)?;
    Ok(report)
}

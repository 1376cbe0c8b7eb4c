//! What bbrscope changed, per scope, so `revert` restores exactly the earlier state and removes
//! only what bbrscope added.
//!
//! One JSON file (/var/lib/bbrscope/state.json below the root), replaced atomically, written only
//! under the apply lock. A run's changes are written as `pending` (an intent) before the first
//! one is made and become an entry once all are made, in one write: the entries never claim a
//! change the machine does not have. A `pending` found by the next run belongs to a run that was
//! killed midway, and is rolled back ([`super::run::reconcile`]).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::{
    change::{self, Change},
    files,
    scope::Scope,
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub scope: Scope,
    pub algorithm: String,
    /// Seconds since the epoch of the latest apply.
    pub applied_at: u64,
    /// In the order they were made; undone in reverse.
    pub changes: Vec<Change>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub entries: Vec<Entry>,
    /// The changes of a run in progress, or of one killed before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Entry>,
}

impl State {
    pub fn path() -> PathBuf {
        PathBuf::from(files::STATE)
    }

    pub fn load(root: &Path) -> Result<State> {
        match files::read(root, &Self::path())? {
            None => Ok(State::default()),
            Some(text) => serde_json::from_str(&text)
                .with_context(|| format!("{} is not bbrscope's state (remove it by hand?)", files::STATE)),
        }
    }

    pub fn save(&self, root: &Path) -> Result<()> {
        if self.entries.is_empty() && self.pending.is_none() {
            return files::remove(root, &Self::path());
        }
        files::write_atomic(root, &Self::path(), &(serde_json::to_string_pretty(self)? + "\n"))
    }

    pub fn find(&self, scope: &Scope) -> Option<&Entry> {
        self.entries.iter().find(|e| e.scope.same(scope))
    }

    /// Records changes about to be made to `scope`, merged with earlier ones there so the
    /// original values are kept.
    pub fn record(&mut self, scope: &Scope, algorithm: &str, changes: Vec<Change>) {
        let now = now();
        match self.entries.iter_mut().find(|e| e.scope.same(scope)) {
            Some(e) => {
                change::merge(&mut e.changes, changes);
                e.algorithm = algorithm.to_string();
                e.applied_at = now;
            }
            None => self.entries.push(Entry {
                scope: scope.clone(),
                algorithm: algorithm.to_string(),
                applied_at: now,
                changes,
            }),
        }
    }

    /// The changes a run is about to make, before it makes them.
    pub fn intend(&mut self, scope: &Scope, algorithm: &str, changes: Vec<Change>) {
        self.pending =
            Some(Entry { scope: scope.clone(), algorithm: algorithm.to_string(), applied_at: now(), changes });
    }

    pub fn remove(&mut self, scope: &Scope) -> Option<Entry> {
        let i = self.entries.iter().position(|e| e.scope.same(scope))?;
        Some(self.entries.remove(i))
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        apply::{sysctl, testroot::TempRoot},
        sys::netns::Netns,
    };

    #[test]
    fn records_merge_and_persist() {
        let root = TempRoot::new();
        let netns = Netns { label: "this namespace".into(), path: "/proc/self/ns/net".into(), ino: 7 };
        let scope = Scope::System { netns: netns.clone() };
        let set = |from: &str, to: &str| Change::Sysctl {
            netns: netns.clone(),
            key: sysctl::CC.into(),
            from: from.into(),
            to: to.into(),
        };
        let mut st = State::load(root.path()).unwrap();
        assert_eq!(st, State::default());
        st.record(&scope, "bbr", vec![set("cubic", "bbr")]);
        st.record(&scope, "reno", vec![set("bbr", "reno")]);
        st.save(root.path()).unwrap();
        let back = State::load(root.path()).unwrap();
        let e = back.find(&scope).unwrap();
        assert_eq!(e.algorithm, "reno");
        assert_eq!(e.changes, vec![set("cubic", "reno")], "revert goes back to the first recorded value");

        let mut back = back;
        assert!(back.remove(&scope).is_some());
        back.save(root.path()).unwrap();
        assert!(!root.path().join("var/lib/bbrscope/state.json").exists(), "no state file once nothing is recorded");
    }
}

//! What bbrscope changed, per scope, so `revert` restores exactly the earlier state and removes
//! only what bbrscope added.
//!
//! One JSON file (/var/lib/bbrscope/state.json below the root), replaced atomically, written only
//! under the apply lock. A run's changes are written as `pending` (an intent) before the first
//! one is made and become an entry once all are made, in one write: the entries never claim a
//! change the machine does not have. A `pending` found by the next run belongs to a run that was
//! killed midway, and is rolled back ([`super::run::reconcile`]). `revert` works the same way
//! round: the scope's entry moves to `reverting` (in one write) before the first change is undone,
//! and what could not be undone goes back to the entries afterwards; a `reverting` found by the
//! next run belongs to a revert that was killed midway, and is finished.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{
    change::{self, Change},
    files,
    scope::Scope,
};
use crate::sys::sysctl;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) scope: Scope,
    /// The algorithm set there (None: only settings beside it, `--sysctl` or a route's window).
    pub(crate) algorithm: Option<String>,
    /// Seconds since the epoch of the latest apply.
    pub(crate) applied_at: u64,
    /// In the order they were made; undone in reverse.
    pub(crate) changes: Vec<Change>,
}

impl Entry {
    /// What was set, in words: the algorithm, else the settings.
    pub(crate) fn what(&self) -> String {
        self.algorithm.clone().unwrap_or_else(|| "its settings".into())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) entries: Vec<Entry>,
    /// The changes of a run in progress, or of one killed before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<Entry>,
    /// The scope a revert in progress is undoing, or one killed before it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reverting: Option<Entry>,
}

impl State {
    pub(crate) fn path() -> PathBuf {
        PathBuf::from(files::STATE)
    }

    /// The record, checked before anything acts on it: root's alone, and naming only what
    /// bbrscope can have changed. Anything else was planted or edited by hand, and `apply`,
    /// `revert` and `status` refuse it in one line rather than write or delete what it names.
    pub(crate) fn load(root: &Path) -> Result<State> {
        let refuse = |why: String| -> anyhow::Error {
            crate::error::UsageError::new(format!(
                "refusing {}: {why}; bbrscope did not make it so: inspect it, and remove it by hand if it is not yours",
                files::STATE
            ))
            .into()
        };
        // The directory too when there is no record yet: one that others can write would be
        // refused once a record is in it, so nothing is recorded there in the first place.
        files::roots_alone(root, &Self::path()).map_err(refuse)?;
        let Some(text) = files::read(root, &Self::path())? else { return Ok(State::default()) };
        let state: State = serde_json::from_str(&text).map_err(|e| refuse(format!("not bbrscope's state ({e})")))?;
        state.check().map_err(refuse)?;
        Ok(state)
    }

    /// Every change is one bbrscope makes: its own files (whose earlier content, if any, it
    /// wrote too), the sysctl keys it sets, its pins, algorithm modules.
    fn check(&self) -> Result<(), String> {
        let own = |p: &Path| [files::SYSCTL_DROPIN, files::MODULES_LOAD].iter().any(|o| Path::new(o) == p);
        for c in self.entries.iter().chain(&self.pending).chain(&self.reverting).flat_map(|e| &e.changes) {
            match c {
                Change::Sysctl { key, .. } if key == sysctl::CC || key == sysctl::ALLOWED => {}
                // A tunable's values are numbers, whatever the kernel had before bbrscope.
                Change::Sysctl { key, from, to, .. } if sysctl::TUNABLE.iter().any(|(k, _)| k == key) => {
                    let numbers = |v: &str| !v.is_empty() && v.split(' ').all(|w| w.parse::<u64>().is_ok());
                    if !numbers(from) || !numbers(to) {
                        return Err(format!("it gives {key} a value bbrscope would not write ({from:?}, {to:?})"));
                    }
                }
                Change::Sysctl { key, .. } => return Err(format!("it names {key}, a setting bbrscope never changes")),
                Change::File { path, .. } if !own(path) => {
                    return Err(format!("it names {}, a file bbrscope does not own", path.display()));
                }
                Change::File { path, from, to } => {
                    if !to.starts_with(files::HEADER) || from.as_deref().is_some_and(|f| !f.starts_with(files::HEADER))
                    {
                        return Err(format!("it gives {} content bbrscope did not write", path.display()));
                    }
                }
                Change::CgroupLink { pin, .. } if pin.parent() != Some(Path::new(super::cgroup::PIN_DIR)) => {
                    return Err(format!("it names a pin outside {}, {}", super::cgroup::PIN_DIR, pin.display()));
                }
                Change::LoadModule { module }
                    if !(module.starts_with("tcp_")
                        && module.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')) =>
                {
                    return Err(format!("it names {module}, not a congestion-control module"));
                }
                Change::CgroupLink { .. }
                | Change::LoadModule { .. }
                | Change::DefaultQdisc { .. }
                | Change::RouteCc { .. }
                | Change::RouteWindow { .. }
                | Change::MountBpffs => {}
            }
        }
        Ok(())
    }

    pub(crate) fn save(&self, root: &Path) -> Result<()> {
        self.write(root, false)
    }

    /// [`State::save`] for a revert: when the directory is full, the space kept in reserve by
    /// the last save is given up for it, so a change can always be undone and its record
    /// dropped. Only a revert takes it: an apply that could not record would not change anything.
    pub(crate) fn save_for_revert(&self, root: &Path) -> Result<()> {
        self.write(root, true)
    }

    fn write(&self, root: &Path, may_use_reserve: bool) -> Result<()> {
        if self.entries.is_empty() && self.pending.is_none() && self.reverting.is_none() {
            files::reserve::release(root);
            return files::remove(root, &Self::path());
        }
        let text = serde_json::to_string_pretty(self)? + "\n";
        if let Err(e) = files::write_atomic(root, &Self::path(), &text) {
            if !(may_use_reserve && files::no_space(&e) && files::reserve::release(root)) {
                return Err(e);
            }
            files::write_atomic(root, &Self::path(), &text)?;
        }
        files::reserve::keep(root, text.len());
        Ok(())
    }

    pub(crate) fn find(&self, scope: &Scope) -> Option<&Entry> {
        self.entries.iter().find(|e| e.scope.same(scope))
    }

    /// Records changes about to be made to `scope`, merged with earlier ones there so the
    /// original values are kept. A run that sets no algorithm keeps the one recorded.
    pub(crate) fn record(&mut self, scope: &Scope, algorithm: Option<&str>, changes: Vec<Change>) {
        let now = now();
        match self.entries.iter_mut().find(|e| e.scope.same(scope)) {
            Some(e) => {
                change::merge(&mut e.changes, changes);
                if let Some(a) = algorithm {
                    e.algorithm = Some(a.to_string());
                }
                e.applied_at = now;
            }
            None => self.entries.push(Entry {
                scope: scope.clone(),
                algorithm: algorithm.map(str::to_string),
                applied_at: now,
                changes,
            }),
        }
    }

    /// The changes a run is about to make, before it makes them.
    pub(crate) fn intend(&mut self, scope: &Scope, algorithm: Option<&str>, changes: Vec<Change>) {
        self.pending =
            Some(Entry { scope: scope.clone(), algorithm: algorithm.map(str::to_string), applied_at: now(), changes });
    }

    pub(crate) fn remove(&mut self, scope: &Scope) -> Option<Entry> {
        let i = self.entries.iter().position(|e| e.scope.same(scope))?;
        Some(self.entries.remove(i))
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apply::testroot::TempRoot, sys::netns::Netns};

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
        st.record(&scope, Some("bbr"), vec![set("cubic", "bbr")]);
        st.record(&scope, Some("reno"), vec![set("bbr", "reno")]);
        let idle = Change::Sysctl {
            netns: netns.clone(),
            key: "net.ipv4.tcp_slow_start_after_idle".into(),
            from: "1".into(),
            to: "0".into(),
        };
        st.record(&scope, None, vec![idle.clone()]);
        st.save(root.path()).unwrap();
        let back = State::load(root.path()).unwrap();
        let e = back.find(&scope).unwrap();
        assert_eq!(e.algorithm.as_deref(), Some("reno"), "a run setting no algorithm keeps the recorded one");
        assert_eq!(e.changes, vec![set("cubic", "reno"), idle], "revert goes back to the first recorded value");

        let mut back = back;
        assert!(back.remove(&scope).is_some());
        assert!(back.find(&scope).is_none());
        back.save(root.path()).unwrap();
        assert!(!root.path().join("var/lib/bbrscope/state.json").exists(), "no state file once nothing is recorded");
    }

    /// The audit's planted records: a file bbrscope does not own (revert would have created
    /// /etc/cron.d/x, or with --force deleted /etc/sysctl.conf), another sysctl, a pin elsewhere,
    /// content bbrscope did not write, and a record others can write. Each is refused in one line.
    #[test]
    fn a_record_bbrscope_could_not_have_written_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let ns = r#"{"label":"this namespace","path":"/proc/self/ns/net","ino":7}"#;
        let entry = |change: &str| {
            format!(
                r#"{{"entries":[{{"scope":{{"type":"system","netns":{ns}}},"algorithm":"bbr","applied_at":1,"changes":[{change}]}}]}}"#
            )
        };
        let header = files::HEADER.replace('\n', "\\n");
        let planted = [
            (r#"{"kind":"file","path":"/etc/cron.d/x","from":"* * * * * root sh -c evil\n","to":"x"}"#.to_string(), "/etc/cron.d/x, a file bbrscope does not own"),
            (r#"{"kind":"file","path":"/etc/sysctl.conf","from":null,"to":"x"}"#.to_string(), "/etc/sysctl.conf, a file bbrscope does not own"),
            (format!(r#"{{"kind":"file","path":"{}","from":"net.ipv4.ip_forward = 1\n","to":"{header}x"}}"#, files::SYSCTL_DROPIN), "content bbrscope did not write"),
            (format!(r#"{{"kind":"sysctl","netns":{ns},"key":"kernel.core_pattern","from":"core","to":"|/tmp/x"}}"#), "kernel.core_pattern"),
            (format!(r#"{{"kind":"sysctl","netns":{ns},"key":"net.ipv4.tcp_wmem","from":"4096 16384 4194304","to":"1; reboot"}}"#), "a value bbrscope would not write"),
            (r#"{"kind":"cgroup_link","cgroup":"/","cgroup_ino":1,"pin":"/sys/fs/bpf/other","algorithm":"bbr","replaced":null}"#.to_string(), "a pin outside"),
            (r#"{"kind":"load_module","module":"../../tmp/evil"}"#.to_string(), "not a congestion-control module"),
        ];
        for (change, why) in planted {
            let root = TempRoot::new();
            root.write("var/lib/bbrscope/state.json", &entry(&change));
            let e = State::load(root.path()).unwrap_err();
            assert!(e.downcast_ref::<crate::error::UsageError>().is_some(), "{e:#}");
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
        // A well-formed record that others can write: not trusted either.
        let root = TempRoot::new();
        let good = format!(
            r#"{{"kind":"sysctl","netns":{ns},"key":"net.ipv4.tcp_congestion_control","from":"cubic","to":"bbr"}}"#
        );
        root.write("var/lib/bbrscope/state.json", &entry(&good));
        let path = root.path().join("var/lib/bbrscope/state.json");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(State::load(root.path()).is_ok());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(State::load(root.path()).unwrap_err().to_string().contains("can be written by others"));
    }
}

//! The changes `apply` makes, each with what it replaced, so that it can be undone: by a
//! rollback when a later change of the same run fails, or by `revert` from the recorded state.
//!
//! Undoing is careful: a setting or file that no longer holds what bbrscope put there was
//! changed by someone else since, and is left alone (unless forced) rather than clobbered.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::{algo, cgroup, files};
use crate::sys::netns::{self, Netns};
use crate::sys::{
    qdisc,
    route::{self, RouteKey, Window},
    sysctl,
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Change {
    /// A live setting under /proc/sys in a network namespace.
    Sysctl { netns: Netns, key: String, from: String, to: String },
    /// `net.core.default_qdisc` (initial namespace only), then the default re-applied to the
    /// interfaces that were still on the kernel's default.
    DefaultQdisc { from: String, to: String, interfaces: Vec<String> },
    /// A file bbrscope owns (system path, below the root); `from` is None when it did not exist.
    File { path: PathBuf, from: Option<String>, to: String },
    /// Loading an algorithm's module. Not undone: sockets may be using it.
    LoadModule { module: String },
    /// Mounting bpffs at /sys/fs/bpf, which the cgroup pin needs.
    MountBpffs,
    /// bbrscope's sock_ops program on a cgroup, its link pinned at `pin`. `replaced` is the
    /// algorithm of a bbrscope link this one took the place of.
    CgroupLink { cgroup: PathBuf, cgroup_ino: u64, pin: PathBuf, algorithm: String, replaced: Option<String> },
    /// A route's congctl.
    RouteCc { netns: Netns, route: RouteKey, from: Option<String>, to: String },
    /// A route's initial congestion or receive window.
    RouteWindow { netns: Netns, route: RouteKey, window: Window, from: Option<u32>, to: u32 },
}

/// What undoing one change did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "result", content = "detail", rename_all = "snake_case")]
pub(crate) enum Undone {
    Restored(String),
    /// Nothing to do (already as before, or gone).
    Nothing(String),
    /// Changed by someone else since; left alone.
    Kept(String),
}

fn or_none(v: Option<&str>) -> &str {
    v.unwrap_or("none")
}

impl Change {
    pub(crate) fn describe(&self) -> String {
        match self {
            Change::Sysctl { netns, key, from, to } => format!("set {key} = {to} (was {from}) in {netns}"),
            Change::DefaultQdisc { from, to, interfaces } => {
                let ifs = if interfaces.is_empty() { "no interface needs it".into() } else { interfaces.join(", ") };
                format!("set net.core.default_qdisc = {to} (was {from}) and re-apply it on: {ifs}")
            }
            Change::File { path, from: None, .. } => format!("write {}", path.display()),
            Change::File { path, from: Some(_), .. } => format!("update {}", path.display()),
            Change::LoadModule { module } => format!("load module {module}"),
            Change::MountBpffs => {
                format!("mount bpffs at {} (needed to keep the cgroup program after bbrscope exits)", cgroup::BPFFS)
            }
            Change::CgroupLink { cgroup, pin, algorithm, replaced, .. } => {
                let was = replaced.as_ref().map(|r| format!(" (replacing bbrscope's {r} program)")).unwrap_or_default();
                format!(
                    "attach sock_ops program setting {algorithm} to {}{was}, pinned at {}",
                    cgroup.display(),
                    pin.display()
                )
            }
            Change::RouteCc { netns, route, from, to } => {
                format!("set congctl {to} on route {route} (was {}) in {netns}", or_none(from.as_deref()))
            }
            Change::RouteWindow { netns, route, window, from, to } => {
                let was = from.map_or_else(|| "unset".to_string(), |f| f.to_string());
                format!("set {} {to} on route {route} (was {was}) in {netns}", window.name())
            }
        }
    }

    /// What the change acts on: a newer change to the same target supersedes an older one.
    fn target(&self) -> String {
        match self {
            Change::Sysctl { netns, key, .. } => format!("sysctl {} {key}", netns.ino),
            Change::DefaultQdisc { .. } => "default_qdisc".into(),
            Change::File { path, .. } => format!("file {}", path.display()),
            Change::LoadModule { module } => format!("module {module}"),
            Change::MountBpffs => "bpffs".into(),
            Change::CgroupLink { pin, .. } => format!("pin {}", pin.display()),
            Change::RouteCc { netns, route, .. } => format!("route {} {route}", netns.ino),
            Change::RouteWindow { netns, route, window, .. } => format!("{} {} {route}", window.name(), netns.ino),
        }
    }

    /// Folds a newer change into this recorded one: the newer target value, this one's
    /// original value (what `revert` must restore).
    fn absorb(&mut self, newer: Change) {
        let mut newer = newer;
        match (&*self, &mut newer) {
            (Change::Sysctl { from, .. }, Change::Sysctl { from: f, .. })
            | (Change::DefaultQdisc { from, .. }, Change::DefaultQdisc { from: f, .. }) => f.clone_from(from),
            (Change::File { from, .. }, Change::File { from: f, .. }) => f.clone_from(from),
            (Change::RouteCc { from, .. }, Change::RouteCc { from: f, .. }) => f.clone_from(from),
            (Change::RouteWindow { from, .. }, Change::RouteWindow { from: f, .. }) => *f = *from,
            (Change::CgroupLink { replaced, .. }, Change::CgroupLink { replaced: r, .. }) => r.clone_from(replaced),
            _ => {}
        }
        if let (Change::DefaultQdisc { interfaces: old, .. }, Change::DefaultQdisc { interfaces: new, .. }) =
            (&*self, &mut newer)
        {
            for i in old {
                if !new.contains(i) {
                    new.push(i.clone());
                }
            }
        }
        *self = newer;
    }

    pub(crate) fn apply(&self, root: &Path) -> Result<()> {
        match self {
            Change::Sysctl { netns, key, to, .. } => netns::run(netns, || {
                sysctl::write(key, to).map_err(|e| explain_write(key, to, e)).with_context(|| format!("in {netns}"))
            }),
            Change::DefaultQdisc { to, interfaces, .. } => set_default_qdisc(to, interfaces),
            Change::File { path, to, .. } => files::write_atomic(root, path, to),
            Change::LoadModule { module } => algo::load_module(module),
            Change::MountBpffs => cgroup::mount_bpffs(),
            Change::CgroupLink { cgroup, pin, algorithm, .. } => cgroup::attach(cgroup, algorithm, pin),
            Change::RouteCc { netns, route, to, .. } => netns::run(netns, || {
                let r = route::get(route)?.with_context(|| format!("route {route} is gone"))?;
                route::set_cc(&r, Some(to))
            }),
            Change::RouteWindow { netns, route, window, to, .. } => netns::run(netns, || {
                let r = route::get(route)?.with_context(|| format!("route {route} is gone"))?;
                route::set_window(&r, *window, Some(*to))
            }),
        }
    }

    pub(crate) fn revert(&self, root: &Path, force: bool) -> Result<Undone> {
        match self {
            Change::Sysctl { netns, key, from, to } => {
                if !netns::still_there(netns) {
                    return Ok(Undone::Nothing(format!("{netns} no longer exists")));
                }
                netns::run(netns, || {
                    let now = sysctl::read(key)?.unwrap_or_default();
                    if now == *from {
                        Ok(Undone::Nothing(format!("{key} is already {from} in {netns}")))
                    } else if now != *to && !force {
                        Ok(Undone::Kept(format!(
                            "{key} is now {now} in {netns}, not the {to} bbrscope set: left alone"
                        )))
                    } else {
                        sysctl::write(key, from).with_context(|| format!("restoring {key} in {netns}"))?;
                        Ok(Undone::Restored(format!("{key} = {from} in {netns}")))
                    }
                })
            }
            Change::DefaultQdisc { from, to, interfaces } => {
                let now = sysctl::read(sysctl::DEFAULT_QDISC)?.unwrap_or_default();
                if now == *from {
                    return Ok(Undone::Nothing(format!("net.core.default_qdisc is already {from}")));
                }
                if now != *to && !force {
                    return Ok(Undone::Kept(format!("net.core.default_qdisc is now {now}, not {to}: left alone")));
                }
                let ifs = qdisc::roots()?
                    .into_iter()
                    .filter(|q| interfaces.contains(&q.ifname) && q.needs_reapply(from))
                    .map(|q| q.ifname)
                    .collect::<Vec<_>>();
                set_default_qdisc(from, &ifs)?;
                Ok(Undone::Restored(format!("net.core.default_qdisc = {from}, re-applied on {}", ifs.join(", "))))
            }
            Change::File { path, from, to } => {
                let now = files::read(root, path)?;
                match (now, from) {
                    (None, None) => Ok(Undone::Nothing(format!("{} is already gone", path.display()))),
                    (Some(now), Some(prev)) if now == *prev => {
                        Ok(Undone::Nothing(format!("{} is already as it was", path.display())))
                    }
                    (Some(now), _) if now != *to && !force => {
                        Ok(Undone::Kept(format!("{} was edited since bbrscope wrote it: left alone", path.display())))
                    }
                    (_, Some(prev)) => {
                        files::write_atomic(root, path, prev)?;
                        Ok(Undone::Restored(format!("{} as it was", path.display())))
                    }
                    (_, None) => {
                        files::remove(root, path)?;
                        Ok(Undone::Restored(format!("removed {}", path.display())))
                    }
                }
            }
            Change::LoadModule { module } => {
                Ok(Undone::Nothing(format!("module {module} stays loaded (connections may be using it)")))
            }
            Change::MountBpffs => Ok(if cgroup::unmount_bpffs_if_empty()? {
                Undone::Restored(format!("unmounted bpffs from {}", cgroup::BPFFS))
            } else {
                Undone::Nothing(format!("bpffs at {} stays mounted (it holds other pins)", cgroup::BPFFS))
            }),
            Change::CgroupLink { cgroup, pin, replaced, .. } => {
                let detached = cgroup::detach(pin)?;
                if let Some(old) = replaced {
                    cgroup::attach(cgroup, old, pin)?;
                    return Ok(Undone::Restored(format!("{} gives {old} again", cgroup.display())));
                }
                Ok(if detached {
                    Undone::Restored(format!(
                        "detached bbrscope's program from {} and removed {}",
                        cgroup.display(),
                        pin.display()
                    ))
                } else {
                    Undone::Nothing(format!("nothing pinned at {}", pin.display()))
                })
            }
            Change::RouteCc { netns, route, from, to } => {
                if !netns::still_there(netns) {
                    return Ok(Undone::Nothing(format!("{netns} no longer exists")));
                }
                netns::run(netns, || {
                    let Some(r) = route::get(route)? else {
                        return Ok(Undone::Nothing(format!("route {route} is gone")));
                    };
                    if r.cc == *from {
                        Ok(Undone::Nothing(format!("route {route} already has congctl {}", or_none(from.as_deref()))))
                    } else if r.cc.as_deref() != Some(to) && !force {
                        Ok(Undone::Kept(format!(
                            "route {route} now has congctl {}: left alone",
                            or_none(r.cc.as_deref())
                        )))
                    } else {
                        route::set_cc(&r, from.as_deref())?;
                        Ok(Undone::Restored(format!("route {route} congctl {}", or_none(from.as_deref()))))
                    }
                })
            }
            Change::RouteWindow { netns, route, window, from, to } => {
                if !netns::still_there(netns) {
                    return Ok(Undone::Nothing(format!("{netns} no longer exists")));
                }
                let name = window.name();
                let shown = |v: Option<u32>| v.map_or_else(|| "unset".to_string(), |v| v.to_string());
                netns::run(netns, || {
                    let Some(r) = route::get(route)? else {
                        return Ok(Undone::Nothing(format!("route {route} is gone")));
                    };
                    let now = r.window(*window);
                    if now == *from {
                        Ok(Undone::Nothing(format!("route {route} already has {name} {}", shown(*from))))
                    } else if now != Some(*to) && !force {
                        Ok(Undone::Kept(format!("route {route} now has {name} {}: left alone", shown(now))))
                    } else {
                        route::set_window(&r, *window, *from)?;
                        Ok(Undone::Restored(format!("route {route} {name} {}", shown(*from))))
                    }
                })
            }
        }
    }
}

/// Adds `newer` changes to a recorded list, superseding same-target ones.
pub(crate) fn merge(recorded: &mut Vec<Change>, newer: Vec<Change>) {
    for c in newer {
        match recorded.iter_mut().find(|r| r.target() == c.target()) {
            Some(r) => r.absorb(c),
            None => recorded.push(c),
        }
    }
}

fn set_default_qdisc(kind: &str, interfaces: &[String]) -> Result<()> {
    sysctl::write(sysctl::DEFAULT_QDISC, kind).with_context(|| format!("setting net.core.default_qdisc = {kind}"))?;
    for i in interfaces {
        qdisc::reapply_default(i)?;
    }
    Ok(())
}

/// The kernel's EPERM for a default algorithm outside the initial namespace means the
/// allowed-list rule, which deserves words.
fn explain_write(key: &str, value: &str, e: std::io::Error) -> anyhow::Error {
    if key == sysctl::CC && e.raw_os_error() == Some(libc::EPERM) {
        anyhow::anyhow!(
            "the kernel refused {key} = {value} (EPERM): outside the initial network namespace only \
             algorithms on the host's net.ipv4.tcp_allowed_congestion_control can be the default; \
             add it with --allow"
        )
    } else {
        anyhow::Error::new(e).context(format!("writing {key} = {value}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::testroot::TempRoot;

    fn ns(ino: u64) -> Netns {
        Netns { label: "t".into(), path: "/nonexistent".into(), ino }
    }

    #[test]
    fn merge_keeps_the_original_value_and_takes_the_new_target() {
        let mut rec =
            vec![Change::Sysctl { netns: ns(1), key: sysctl::CC.into(), from: "cubic".into(), to: "bbr".into() }];
        merge(
            &mut rec,
            vec![
                Change::Sysctl { netns: ns(1), key: sysctl::CC.into(), from: "bbr".into(), to: "reno".into() },
                Change::Sysctl { netns: ns(2), key: sysctl::CC.into(), from: "bbr".into(), to: "reno".into() },
            ],
        );
        assert_eq!(rec.len(), 2);
        assert_eq!(
            rec[0],
            Change::Sysctl { netns: ns(1), key: sysctl::CC.into(), from: "cubic".into(), to: "reno".into() }
        );
    }

    #[test]
    fn file_revert_removes_only_an_unedited_file() {
        let root = TempRoot::new();
        let path = PathBuf::from(files::SYSCTL_DROPIN);
        let c = Change::File { path: path.clone(), from: None, to: "x = 1\n".into() };
        c.apply(root.path()).unwrap();
        assert!(matches!(c.revert(root.path(), false).unwrap(), Undone::Restored(_)));
        assert_eq!(files::read(root.path(), &path).unwrap(), None);
        assert!(matches!(c.revert(root.path(), false).unwrap(), Undone::Nothing(_)));

        c.apply(root.path()).unwrap();
        root.write("etc/sysctl.d/99-zz-bbrscope.conf", "x = 2\n");
        assert!(matches!(c.revert(root.path(), false).unwrap(), Undone::Kept(_)));
        assert!(files::read(root.path(), &path).unwrap().is_some(), "an edited file is left alone");
        assert!(matches!(c.revert(root.path(), true).unwrap(), Undone::Restored(_)));
        assert_eq!(files::read(root.path(), &path).unwrap(), None);
    }

    #[test]
    fn changes_round_trip_through_json() {
        let c = Change::RouteCc {
            netns: ns(3),
            route: RouteKey { prefix: "203.0.113.0/24".parse().unwrap(), table: 254, metric: Some(100) },
            from: None,
            to: "bbr".into(),
        };
        let back: Change = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}

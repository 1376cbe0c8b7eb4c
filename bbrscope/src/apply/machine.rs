//! What `apply` reads from the machine, as one trait: the scopes the options name, and what the
//! plan reads of each. The live machine ([`Live`]) answers through sys/, entering the namespace
//! asked about; unit tests answer with a fake, so the scope rules (one scope per namespace and
//! prefix) and the plan's (the allowed list outside the initial namespace, unwritable settings,
//! routes that override the default, qdiscs, other programs on a cgroup) are tested without root
//! or a kernel.
//! The plan reads nothing else: the kernel's algorithms ([`super::algo::Kernel`]) and the record
//! ([`super::state::State`]) are read once into [`super::plan::Host`], and files under the run's
//! root.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ipnet::IpNet;

use super::cgroup::{self, Attached};
use crate::sys::{
    cgroup as cgroupfs,
    experiment_lock::{self, Running},
    netns::{self, Netns},
    qdisc::{self, RootQdisc},
    route::{self, Route},
    sysctl,
};

pub(crate) trait Machine {
    /// bbrscope's own network namespace.
    fn own_netns(&self) -> Result<Netns>;
    /// The namespace `--netns NAME` names (a usage error when there is none).
    fn named_netns(&self, name: &str) -> Result<Netns>;
    /// Every network namespace besides bbrscope's own (`--netns all`).
    fn other_netns(&self) -> Result<Vec<Netns>>;
    /// The cgroup `--cgroup PATH` names: its path in the hierarchy and its id (a usage error when
    /// there is none).
    fn cgroup(&self, path: &Path) -> Result<(PathBuf, u64)>;
    /// A sysctl's value in `netns`; `None`: that namespace has no such key.
    fn sysctl(&self, netns: &Netns, key: &str) -> Result<Option<String>>;
    /// Why `key` cannot be written in `netns`; `None` when it can.
    fn unwritable(&self, netns: &Netns, key: &str) -> Result<Option<String>>;
    /// `netns`'s routes that name their own algorithm (`congctl`).
    fn congctl_routes(&self, netns: &Netns) -> Result<Vec<Route>>;
    /// `netns`'s route for exactly `prefix`.
    fn route(&self, netns: &Netns, prefix: &IpNet) -> Result<Option<Route>>;
    /// The root qdisc of every interface of bbrscope's own namespace.
    fn qdiscs(&self) -> Result<Vec<RootQdisc>>;
    /// The sock_ops programs loaded: (id, name).
    fn sock_ops_programs(&self) -> Vec<(u32, String)>;
    /// The bbrscope experiments running.
    fn experiments(&self) -> Vec<Running>;
    /// The sock_ops programs attached to `cgroup` itself (or, `effective`, every one that runs
    /// for its sockets), and whether the cgroup takes more beside them.
    fn attached(&self, cgroup: &Path, effective: bool) -> Result<(Vec<Attached>, bool)>;
    /// Whether a link is pinned at `pin`.
    fn pinned(&self, pin: &Path) -> bool;
    fn bpffs_mounted(&self) -> bool;
}

/// The machine bbrscope runs on.
pub(crate) struct Live;

impl Machine for Live {
    fn own_netns(&self) -> Result<Netns> {
        netns::current()
    }

    fn named_netns(&self, name: &str) -> Result<Netns> {
        netns::resolve(name)
    }

    fn other_netns(&self) -> Result<Vec<Netns>> {
        netns::all()
    }

    fn cgroup(&self, path: &Path) -> Result<(PathBuf, u64)> {
        let cg = cgroupfs::resolve(path)?;
        Ok((cg.path, cg.id))
    }
    fn sysctl(&self, netns: &Netns, key: &str) -> Result<Option<String>> {
        netns::run(netns, || sysctl::read(key))
    }

    fn unwritable(&self, netns: &Netns, key: &str) -> Result<Option<String>> {
        netns::run(netns, || Ok(sysctl::unwritable(key)))
    }

    fn congctl_routes(&self, netns: &Netns) -> Result<Vec<Route>> {
        netns::run(netns, route::with_congctl)
    }

    fn route(&self, netns: &Netns, prefix: &IpNet) -> Result<Option<Route>> {
        netns::run(netns, || route::find(prefix))
    }

    fn qdiscs(&self) -> Result<Vec<RootQdisc>> {
        qdisc::roots()
    }

    fn sock_ops_programs(&self) -> Vec<(u32, String)> {
        const BPF_PROG_TYPE_SOCK_OPS: u32 = 13;
        aya::programs::loaded_programs()
            .flatten()
            .filter(|i| i.program_type() as u32 == BPF_PROG_TYPE_SOCK_OPS)
            .map(|i| (i.id(), i.name_as_str().unwrap_or_default().to_string()))
            .collect()
    }

    fn experiments(&self) -> Vec<Running> {
        experiment_lock::running().unwrap_or_default()
    }

    fn attached(&self, cgroup: &Path, effective: bool) -> Result<(Vec<Attached>, bool)> {
        cgroup::attached(cgroup, effective)
    }

    fn pinned(&self, pin: &Path) -> bool {
        pin.exists()
    }

    fn bpffs_mounted(&self) -> bool {
        cgroup::bpffs_mounted()
    }
}

/// A machine described by the test: sysctls and routes per namespace (by inode), the qdiscs,
/// the programs loaded and attached, the pins.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Fake {
    /// bbrscope's own namespace, then the others.
    pub(crate) namespaces: Vec<Netns>,
    /// (namespace inode, key) → value.
    pub(crate) sysctls: std::collections::HashMap<(u64, String), String>,
    /// (namespace inode, key) → why it cannot be written.
    pub(crate) read_only: std::collections::HashMap<(u64, String), String>,
    /// (namespace inode, route).
    pub(crate) routes: Vec<(u64, Route)>,
    pub(crate) qdiscs: Vec<RootQdisc>,
    pub(crate) programs: Vec<(u32, String)>,
    pub(crate) experiments: Vec<Running>,
    /// (cgroup, programs attached there, whether it takes more, programs of its parents).
    pub(crate) cgroups: Vec<(std::path::PathBuf, Vec<Attached>, bool, Vec<Attached>)>,
    pub(crate) pins: Vec<std::path::PathBuf>,
    pub(crate) bpffs: bool,
}

#[cfg(test)]
impl Fake {
    /// `key = value` in `netns`.
    pub(crate) fn set(&mut self, netns: &Netns, key: &str, value: &str) -> &mut Self {
        self.sysctls.insert((netns.ino, key.into()), value.into());
        self
    }
}

#[cfg(test)]
impl Machine for Fake {
    fn own_netns(&self) -> Result<Netns> {
        self.namespaces.first().cloned().ok_or_else(|| anyhow::anyhow!("no namespace"))
    }

    fn named_netns(&self, name: &str) -> Result<Netns> {
        match self.namespaces.iter().find(|n| n.label == name) {
            Some(n) => Ok(n.clone()),
            None => crate::error::usage!("no network namespace named {name}"),
        }
    }

    fn other_netns(&self) -> Result<Vec<Netns>> {
        Ok(self.namespaces.iter().skip(1).cloned().collect())
    }

    fn cgroup(&self, path: &Path) -> Result<(PathBuf, u64)> {
        match self.cgroups.iter().position(|(p, ..)| p == path) {
            Some(i) => Ok((path.to_path_buf(), 1000 + i as u64)),
            None => crate::error::usage!("no cgroup {}", path.display()),
        }
    }
    fn sysctl(&self, netns: &Netns, key: &str) -> Result<Option<String>> {
        Ok(self.sysctls.get(&(netns.ino, key.to_string())).cloned())
    }

    fn unwritable(&self, netns: &Netns, key: &str) -> Result<Option<String>> {
        Ok(self.read_only.get(&(netns.ino, key.to_string())).cloned())
    }

    fn congctl_routes(&self, netns: &Netns) -> Result<Vec<Route>> {
        Ok(self.routes.iter().filter(|(ino, r)| *ino == netns.ino && r.cc.is_some()).map(|(_, r)| r.clone()).collect())
    }

    fn route(&self, netns: &Netns, prefix: &IpNet) -> Result<Option<Route>> {
        Ok(self.routes.iter().find(|(ino, r)| *ino == netns.ino && r.key.prefix == *prefix).map(|(_, r)| r.clone()))
    }

    fn qdiscs(&self) -> Result<Vec<RootQdisc>> {
        Ok(self.qdiscs.clone())
    }

    fn sock_ops_programs(&self) -> Vec<(u32, String)> {
        self.programs.clone()
    }

    fn experiments(&self) -> Vec<Running> {
        self.experiments.clone()
    }

    fn attached(&self, cgroup: &Path, effective: bool) -> Result<(Vec<Attached>, bool)> {
        let (_, direct, multi, parents) = self
            .cgroups
            .iter()
            .find(|(p, ..)| p == cgroup)
            .ok_or_else(|| anyhow::anyhow!("no cgroup {}", cgroup.display()))?;
        let all = if effective { [direct.clone(), parents.clone()].concat() } else { direct.clone() };
        Ok((all, *multi))
    }

    fn pinned(&self, pin: &Path) -> bool {
        self.pins.iter().any(|p| p == pin)
    }

    fn bpffs_mounted(&self) -> bool {
        self.bpffs
    }
}

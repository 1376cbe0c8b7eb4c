//! What `apply`'s plan reads from the machine, as one trait. The live machine ([`Live`]) answers
//! through sys/, entering the namespace asked about; unit tests answer with a fake, so the
//! plan's rules (the allowed list outside the initial namespace, unwritable settings, routes that
//! override the default, qdiscs, other programs on a cgroup) are tested without root or a kernel.
//! The plan reads nothing else: the kernel's algorithms ([`super::algo::Kernel`]) and the record
//! ([`super::state::State`]) are read once into [`super::plan::Host`], and files under the run's
//! root.

use std::path::Path;

use anyhow::Result;
use ipnet::IpNet;

use super::cgroup::{self, Attached};
use crate::sys::{
    experiment_lock::{self, Running},
    netns::{self, Netns},
    qdisc::{self, RootQdisc},
    route::{self, Route},
    sysctl,
};

pub(crate) trait Machine {
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

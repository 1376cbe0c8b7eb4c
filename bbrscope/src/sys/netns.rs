//! Network namespaces: naming them (`ip netns` names live in /run/netns), finding them all, and
//! running code inside one.
//!
//! setns(CLONE_NEWNET) changes only the calling thread, and sysctls under /proc/sys/net, sockets
//! and netlink all follow the thread's namespace, so work in another namespace runs on a
//! dedicated thread and the rest of bbrscope never leaves its own.

use std::{
    collections::BTreeMap,
    fs::File,
    os::{
        fd::{AsFd as _, AsRawFd as _},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};
use serde::{Deserialize, Serialize};

use crate::error::usage;

const NAMED_DIR: &str = "/run/netns";

/// A network namespace as the user named it, with the identity (inode) it had when found, so a
/// later `revert` can tell whether the name still refers to the same namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Netns {
    /// What the user sees: an `ip netns` name, "pid N (comm)", a path, or "this namespace".
    pub(crate) label: String,
    pub(crate) path: PathBuf,
    pub(crate) ino: u64,
}

impl std::fmt::Display for Netns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

fn ino_of(path: &Path) -> std::io::Result<u64> {
    Ok(std::fs::metadata(path)?.ino())
}

/// The namespace bbrscope itself runs in (its main thread's).
pub(crate) fn current() -> Result<Netns> {
    let path = PathBuf::from("/proc/self/ns/net");
    let ino = ino_of(&path).context("reading /proc/self/ns/net")?;
    Ok(Netns { label: "this namespace".into(), path, ino })
}

/// The initial network namespace's inode number on kernels that fix it (PROC_NET_INIT_INO);
/// older ones (5.10, 6.1, 6.12 in the kernel matrix) allocate it like any other.
const INITIAL_NETNS_INO: u64 = 0xEFFF_FFF9;

/// Whether `ns` is the host's initial namespace: the fixed inode, or, outside a container, the
/// namespace of PID 1 (inside a container PID 1 is the container's init, in the container's
/// namespace).
pub(crate) fn is_initial(ns: &Netns) -> bool {
    ns.ino == INITIAL_NETNS_INO
        || (!is_container() && ino_of(Path::new("/proc/1/ns/net")).is_ok_and(|pid1| pid1 == ns.ino))
}

/// Signs of running inside a container (Docker, Podman, systemd-nspawn, LXC).
pub(crate) fn is_container() -> bool {
    Path::new("/.dockerenv").exists()
        || Path::new("/run/.containerenv").exists()
        || std::fs::read("/proc/1/environ")
            .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv.starts_with(b"container=")))
}

/// Resolves `--netns NAME|PATH`.
pub(crate) fn resolve(spec: &str) -> Result<Netns> {
    let named = Path::new(NAMED_DIR).join(spec);
    let (path, label) = if !spec.contains('/') && named.exists() {
        (named, spec.to_string())
    } else if spec.contains('/') {
        (PathBuf::from(spec), spec.to_string())
    } else {
        let known = named_namespaces().into_iter().map(|n| n.label).collect::<Vec<_>>();
        let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        usage!(
            "no network namespace named '{spec}' (ip netns names: {known}; or give a path such as /proc/PID/ns/net)"
        );
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            usage!("cannot open network namespace {}: permission denied (run as root)", path.display())
        }
        Err(_) => usage!("network namespace {} does not exist", path.display()),
    };
    if !is_netns_file(&file) {
        usage!("{} is not a network namespace file", path.display());
    }
    let ino = file.metadata()?.ino();
    Ok(Netns { label, path, ino })
}

/// NS_GET_NSTYPE (4.11+) tells a namespace file from any other file.
fn is_netns_file(file: &File) -> bool {
    const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
    // SAFETY: an argument-less ioctl on a descriptor `file` keeps open; an unknown request on
    // another kind of file only fails.
    let t = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE as _) };
    t == libc::CLONE_NEWNET
}

/// The namespaces named in /run/netns (`ip netns`), by name.
pub(crate) fn named_namespaces() -> Vec<Netns> {
    let Ok(dir) = std::fs::read_dir(NAMED_DIR) else { return Vec::new() };
    let mut out: Vec<Netns> = dir
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            let ino = ino_of(&path).ok()?;
            Some(Netns { label: e.file_name().to_string_lossy().into_owned(), path, ino })
        })
        .collect();
    out.sort_by(|a, b| a.label.cmp(&b.label));
    out
}

/// `--netns all`: every namespace other than bbrscope's own that has a name in /run/netns or a
/// process in it (containers rarely register a name), each once.
pub(crate) fn all() -> Result<Vec<Netns>> {
    let own = current()?.ino;
    let mut found: BTreeMap<u64, Netns> = BTreeMap::new();
    for ns in named_namespaces() {
        found.entry(ns.ino).or_insert(ns);
    }
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let Ok(ino) = ino_of(&path) else { continue };
        found.entry(ino).or_insert_with(|| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            Netns { label: format!("pid {pid} ({})", comm.trim()), path, ino }
        });
    }
    found.remove(&own);
    Ok(found.into_values().collect())
}

/// The namespace with inode `ino`: this one, a named one, one a process runs in, or else one a
/// process only holds open (a container runtime's, or a test's: `lsns` misses those, and a
/// descriptor to it is as good a way in as any). `None` once nothing holds it.
pub(crate) fn find(ino: u64) -> Option<Netns> {
    if let Some(ns) = current().ok().filter(|n| n.ino == ino) {
        return Some(ns);
    }
    if let Some(ns) = all().ok()?.into_iter().find(|n| n.ino == ino) {
        return Some(ns);
    }
    let target = format!("net:[{ino}]");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().filter(|s| s.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                return Some(Netns {
                    label: format!("ino:{ino} (held by pid {pid} {})", comm.trim()),
                    path: fd.path(),
                    ino,
                });
            }
        }
    }
    None
}

impl Netns {
    /// How `bbrscope apply --netns` names this namespace in a command to run later: None for the
    /// caller's own, the `ip netns` name, else its path (valid while what holds it open lives).
    pub(crate) fn arg(&self) -> Option<String> {
        if current().is_ok_and(|c| c.ino == self.ino) {
            None
        } else if self.path.starts_with(NAMED_DIR) {
            Some(self.label.clone())
        } else {
            Some(self.path.display().to_string())
        }
    }
}

/// The kernel refused for want of a privilege (EPERM, EACCES): the only errors a missing
/// capability explains.
fn is_denied(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

/// Whether [`run`] failed because the kernel refused entry to the namespace (or opening it) for
/// want of a privilege, rather than for another reason (gone meanwhile, out of memory, an
/// error of the work done inside).
pub(crate) fn denied(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<crate::error::UsageError>() || c.downcast_ref::<std::io::Error>().is_some_and(is_denied))
}

/// Whether `ns` still names the namespace it named when recorded.
pub(crate) fn still_there(ns: &Netns) -> bool {
    ino_of(&ns.path).is_ok_and(|i| i == ns.ino)
}

/// Runs `f` inside `ns`: inline when it is the caller's namespace, otherwise on a thread that
/// joins it first.
pub(crate) fn run<T: Send>(ns: &Netns, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    if ino_of(Path::new("/proc/thread-self/ns/net")).is_ok_and(|i| i == ns.ino) {
        return f();
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = File::open(&ns.path).with_context(|| format!("opening {}", ns.path.display()))?;
            if file.metadata()?.ino() != ns.ino {
                anyhow::bail!("network namespace {ns} was replaced since it was looked up");
            }
            // It changes only this thread, which ends with the closure.
            if let Err(e) = move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network)) {
                let e = std::io::Error::from(e);
                if is_denied(&e) {
                    // A missing privilege, not a runtime failure (README: exit 2).
                    usage!("entering network namespace {ns} needs CAP_SYS_ADMIN: run as root");
                }
                return Err(e).with_context(|| format!("entering network namespace {ns}"));
            }
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread working in network namespace {ns} panicked"))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the kernel's EPERM and EACCES (and the usage error `run` makes of them) read as a
    /// missing capability; any other error is itself.
    #[test]
    fn only_a_refusal_is_a_missing_capability() {
        let io = |errno| anyhow::Error::from(std::io::Error::from_raw_os_error(errno)).context("entering x");
        assert!(denied(&io(libc::EPERM)));
        assert!(denied(&io(libc::EACCES)));
        assert!(denied(&crate::error::UsageError::new("entering network namespace x needs CAP_SYS_ADMIN").into()));
        for errno in [libc::ENOENT, libc::EINVAL, libc::ENOMEM, libc::EMFILE] {
            assert!(!denied(&io(errno)), "errno {errno}");
        }
        assert!(!denied(&anyhow::anyhow!("network namespace x was replaced since it was looked up")));
    }
}

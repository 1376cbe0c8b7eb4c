//! Per-cgroup congestion control: bbrscope's sock_ops program (bbrscope-ebpf/src/bin/setcc.rs)
//! attached to a cgroup v2 directory, its link pinned in bpffs so it outlives bbrscope.
//!
//! It is attached as a bpf_link, which the kernel always adds beside whatever else runs there
//! (BPF_F_ALLOW_MULTI semantics): if an exclusive program holds the cgroup, the kernel refuses
//! the attachment rather than replacing anything.

use std::{
    ffi::CString,
    fs::File,
    os::{fd::AsFd as _, unix::ffi::OsStrExt as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use aya::{
    EbpfLoader,
    programs::{
        CgroupAttachMode, SockOps,
        links::{FdLink, PinnedLink},
        loaded_programs,
    },
};
use bbrscope_common::CC_NAME_LEN;
use rustix::mount::{MountFlags, UnmountFlags};
use serde::Serialize;

use crate::sys::bpf;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bbrscope-setcc"));

/// The program's name as the kernel lists it (the function's name).
pub(crate) const PROGRAM_NAME: &str = "bbrscope_setcc";
pub(crate) const BPFFS: &str = "/sys/fs/bpf";
/// bbrscope's own directory in bpffs; nothing else is created or removed in bpffs.
pub(crate) const PIN_DIR: &str = "/sys/fs/bpf/bbrscope";
const BPF_FS_MAGIC: u64 = 0xcafe_4a11;
const PRELOADED: &[&str] = &["maps.debug", "progs.debug"];

const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_F_QUERY_EFFECTIVE: u32 = 1;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The link pin for a cgroup, named by the cgroup's id so a renamed path still finds it.
pub fn pin_path(cgroup_ino: u64) -> PathBuf {
    Path::new(PIN_DIR).join(format!("cgroup-{cgroup_ino}"))
}

pub(crate) fn bpffs_mounted() -> bool {
    rustix::fs::statfs(BPFFS).is_ok_and(|st| u64::try_from(st.f_type) == Ok(BPF_FS_MAGIC))
}

pub(crate) fn mount_bpffs() -> Result<()> {
    std::fs::create_dir_all(BPFFS).with_context(|| format!("creating {BPFFS}"))?;
    rustix::mount::mount("bpf", BPFFS, "bpf", MountFlags::empty(), None)
        .map_err(std::io::Error::from)
        .context("mounting bpffs at /sys/fs/bpf")
}

/// Unmounts bpffs if bbrscope mounted it and nothing is pinned there any more (the kernel's
/// own preloaded `maps.debug` and `progs.debug` iterators do not count).
pub(crate) fn unmount_bpffs_if_empty() -> Result<bool> {
    if !bpffs_mounted() {
        return Ok(false);
    }
    let pinned =
        std::fs::read_dir(BPFFS)?.flatten().any(|e| !PRELOADED.contains(&e.file_name().to_str().unwrap_or("")));
    if pinned {
        return Ok(false);
    }
    rustix::mount::unmount(BPFFS, UnmountFlags::DETACH)
        .map_err(std::io::Error::from)
        .context("unmounting /sys/fs/bpf")?;
    Ok(true)
}

/// A sock_ops program that runs for sockets of a cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attached {
    pub(crate) id: u32,
    pub(crate) name: String,
}

impl Attached {
    pub fn is_ours(&self) -> bool {
        self.name == PROGRAM_NAME
    }
}

/// The sock_ops programs attached to `cgroup` itself, and whether they allow others beside
/// them, or (`effective`) every program that runs for its sockets, ancestors' included.
pub fn attached(cgroup: &Path, effective: bool) -> Result<(Vec<Attached>, bool)> {
    let dir = File::open(cgroup).with_context(|| format!("opening {}", cgroup.display()))?;
    let mut ids = [0u32; 64];
    let flags = if effective { BPF_F_QUERY_EFFECTIVE } else { 0 };
    let bpf::Query { count, attach_flags } = bpf::prog_query(dir.as_fd(), BPF_CGROUP_SOCK_OPS, flags, &mut ids)
        .context("querying the cgroup's sock_ops programs")?;
    let names: Vec<(u32, String)> =
        loaded_programs().flatten().map(|p| (p.id(), p.name_as_str().unwrap_or_default().to_string())).collect();
    let progs = ids[..count.min(ids.len())]
        .iter()
        .map(|id| Attached {
            id: *id,
            name: names.iter().find(|(i, _)| i == id).map(|(_, n)| n.clone()).unwrap_or_default(),
        })
        .collect();
    Ok((progs, count == 0 || attach_flags & BPF_F_ALLOW_MULTI != 0))
}

/// Loads the program for `algorithm`, attaches it to `cgroup` beside others, pins the link at
/// `pin` (replacing an older bbrscope pin there only once the new one is attached).
pub(crate) fn attach(cgroup: &Path, algorithm: &str, pin: &Path) -> Result<()> {
    let mut name = [0u8; CC_NAME_LEN];
    if algorithm.len() >= CC_NAME_LEN {
        bail!("algorithm name '{algorithm}' is longer than the kernel allows");
    }
    name[..algorithm.len()].copy_from_slice(algorithm.as_bytes());
    let mut ebpf = EbpfLoader::new()
        .override_global("CC", &name, true)
        .load(OBJECT)
        .context("loading bbrscope's sock_ops program")?;
    let prog: &mut SockOps =
        ebpf.program_mut(PROGRAM_NAME).context("sock_ops program missing from the object")?.try_into()?;
    prog.load().context("loading the sock_ops program (needs root, or CAP_BPF and CAP_NET_ADMIN)")?;
    let dir = File::open(cgroup).with_context(|| format!("opening {}", cgroup.display()))?;
    // A bpf_link (5.7+) always sits beside other programs (BPF_F_ALLOW_MULTI semantics) and the
    // kernel refuses attach flags on it, hence "Single" here.
    let link_id = prog.attach(&dir, CgroupAttachMode::Single).map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "attaching to {} (a program attached there without BPF_F_ALLOW_MULTI blocks others; \
             bbrscope does not replace it)",
            cgroup.display()
        ))
    })?;
    let link: FdLink = prog.take_link(link_id)?.try_into().context("the kernel gave no bpf_link (needs 5.7+)")?;
    if pin.exists() {
        detach(pin)?;
    }
    std::fs::create_dir_all(PIN_DIR).with_context(|| format!("creating {PIN_DIR}"))?;
    link.pin(pin).with_context(|| format!("pinning the link at {}", pin.display()))?;
    Ok(())
}

/// Detaches the link pinned at `pin` and removes the pin (and bbrscope's pin directory once
/// empty). False when there was nothing pinned.
pub(crate) fn detach(pin: &Path) -> Result<bool> {
    if !pin.exists() {
        return Ok(false);
    }
    let path = CString::new(pin.as_os_str().as_bytes())?;
    let fd = bpf::obj_get(&path).with_context(|| format!("opening {}", pin.display()))?;
    // Detach explicitly: another holder of the link (a tool inspecting it) would otherwise keep
    // it attached after the pin is gone.
    bpf::link_detach(fd.as_fd()).with_context(|| format!("detaching the link pinned at {}", pin.display()))?;
    PinnedLink::from_pin(pin)?.unpin().with_context(|| format!("removing {}", pin.display()))?;
    let _ = std::fs::remove_dir(PIN_DIR);
    Ok(true)
}

/// The program id behind a pinned link, for status.
pub(crate) fn pinned_program(pin: &Path) -> Option<u32> {
    let link: FdLink = PinnedLink::from_pin(pin).ok()?.into();
    link.info().ok().map(|i| i.program_id())
}

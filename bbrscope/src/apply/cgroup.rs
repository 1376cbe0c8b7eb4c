//! Per-cgroup congestion control: bbrscope's sock_ops program (bbrscope-ebpf/src/bin/setcc.rs)
//! attached to a cgroup v2 directory, its link pinned in bpffs so it outlives bbrscope.
//!
//! It is attached as a bpf_link, which the kernel always adds beside whatever else runs there
//! (BPF_F_ALLOW_MULTI semantics): if an exclusive program holds the cgroup, the kernel refuses
//! the attachment rather than replacing anything.

use std::{
    ffi::CString,
    fs::File,
    os::{
        fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
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
use serde::Serialize;

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bbrscope-setcc"));

/// The program's name as the kernel lists it (the function's name).
pub const PROGRAM_NAME: &str = "bbrscope_setcc";
pub const BPFFS: &str = "/sys/fs/bpf";
/// bbrscope's own directory in bpffs; nothing else is created or removed in bpffs.
pub const PIN_DIR: &str = "/sys/fs/bpf/bbrscope";
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
const PRELOADED: &[&str] = &["maps.debug", "progs.debug"];

const BPF_OBJ_GET: i32 = 7;
const BPF_PROG_QUERY: i32 = 16;
const BPF_LINK_DETACH: i32 = 34;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
const BPF_F_QUERY_EFFECTIVE: u32 = 1;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The link pin for a cgroup, named by the cgroup's id so a renamed path still finds it.
pub fn pin_path(cgroup_ino: u64) -> PathBuf {
    Path::new(PIN_DIR).join(format!("cgroup-{cgroup_ino}"))
}

pub fn bpffs_mounted() -> bool {
    let Ok(c) = CString::new(BPFFS) else { return false };
    // SAFETY: statfs is plain C data, valid when zeroed, and statfs(2) fills it from a
    // NUL-terminated path that outlives the call.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type as i64 == BPF_FS_MAGIC }
}

pub fn mount_bpffs() -> Result<()> {
    std::fs::create_dir_all(BPFFS).with_context(|| format!("creating {BPFFS}"))?;
    let (src, dst, fs) = (c"bpf", CString::new(BPFFS)?, c"bpf");
    // SAFETY: NUL-terminated strings that outlive the call; no mount data.
    if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("mounting bpffs at /sys/fs/bpf");
    }
    Ok(())
}

/// Unmounts bpffs if bbrscope mounted it and nothing is pinned there any more (the kernel's
/// own preloaded `maps.debug` and `progs.debug` iterators do not count).
pub fn unmount_bpffs_if_empty() -> Result<bool> {
    if !bpffs_mounted() {
        return Ok(false);
    }
    let pinned =
        std::fs::read_dir(BPFFS)?.flatten().any(|e| !PRELOADED.contains(&e.file_name().to_str().unwrap_or("")));
    if pinned {
        return Ok(false);
    }
    let dst = CString::new(BPFFS)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(std::io::Error::last_os_error()).context("unmounting /sys/fs/bpf");
    }
    Ok(true)
}

/// bpf(2) with a hand-packed `union bpf_attr` of 64 bytes: each command's fields at the offsets
/// of include/uapi/linux/bpf.h, the rest zero (the kernel refuses non-zero bytes it does not
/// know). Pointers stored in `attr` are the caller's to keep valid during the call.
fn bpf(cmd: i32, attr: &mut [u64; 8]) -> std::io::Result<i64> {
    // SAFETY: `attr` is 64 writable bytes, the size passed; the kernel reads and writes only
    // within them, and through pointers inside them that the callers keep alive (see below).
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as u32) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r) }
}

/// A sock_ops program that runs for sockets of a cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Attached {
    pub id: u32,
    pub name: String,
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
    // union bpf_attr for BPF_PROG_QUERY: target_fd, attach_type, query_flags, attach_flags,
    // prog_ids (pointer), prog_cnt.
    let mut attr = [0u64; 8];
    attr[0] = dir.as_raw_fd() as u64 | (BPF_CGROUP_SOCK_OPS as u64) << 32;
    attr[1] = if effective { BPF_F_QUERY_EFFECTIVE as u64 } else { 0 };
    attr[2] = ids.as_mut_ptr() as u64;
    attr[3] = ids.len() as u64;
    // `ids` outlives the call and holds prog_cnt entries, as the kernel is told.
    bpf(BPF_PROG_QUERY, &mut attr).context("querying the cgroup's sock_ops programs")?;
    let attach_flags = (attr[1] >> 32) as u32;
    let count = (attr[3] as u32) as usize;
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
pub fn attach(cgroup: &Path, algorithm: &str, pin: &Path) -> Result<()> {
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
pub fn detach(pin: &Path) -> Result<bool> {
    if !pin.exists() {
        return Ok(false);
    }
    let fd = obj_get(pin)?;
    // Detach explicitly: another holder of the link (a tool inspecting it) would otherwise keep
    // it attached after the pin is gone.
    let mut attr = [0u64; 8];
    attr[0] = fd.as_raw_fd() as u64;
    bpf(BPF_LINK_DETACH, &mut attr).with_context(|| format!("detaching the link pinned at {}", pin.display()))?;
    PinnedLink::from_pin(pin)?.unpin().with_context(|| format!("removing {}", pin.display()))?;
    let _ = std::fs::remove_dir(PIN_DIR);
    Ok(true)
}

fn obj_get(pin: &Path) -> Result<OwnedFd> {
    let c = CString::new(pin.as_os_str().as_bytes())?;
    let mut attr = [0u64; 8];
    attr[0] = c.as_ptr() as u64;
    // `c` (pathname) outlives the call.
    let fd = bpf(BPF_OBJ_GET, &mut attr).with_context(|| format!("opening {}", pin.display()))?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The program id behind a pinned link, for status.
pub fn pinned_program(pin: &Path) -> Option<u32> {
    let link: FdLink = PinnedLink::from_pin(pin).ok()?.into();
    link.info().ok().map(|i| i.program_id())
}

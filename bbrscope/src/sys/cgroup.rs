//! Finding cgroup v2 and naming cgroups the way the kernel does (id = inode, level = depth).
//! cgroup2 is not always at /sys/fs/cgroup (hybrid systems mount it at /sys/fs/cgroup/unified),
//! so it is looked up in /proc/self/mountinfo.

use std::{
    ffi::CString,
    io::Read as _,
    net::SocketAddrV4,
    os::{fd::AsRawFd as _, unix::fs::MetadataExt as _},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result, bail};
use bbrscope_common::CC_NAME_LEN;

use crate::error::usage;

const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub mount_point: PathBuf,
    /// The hierarchy path mounted there ("/" unless inside a cgroup namespace or bind mount).
    pub(crate) root: PathBuf,
}

/// The first cgroup2 mount in `mountinfo` (see proc(5): field 4 is the root, 5 the mount point,
/// and the filesystem type follows the " - " separator).
pub(crate) fn cgroup2_mount_in(mountinfo: &str) -> Option<Cgroup2Mount> {
    mountinfo.lines().find_map(|line| {
        let (pre, post) = line.split_once(" - ")?;
        if post.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let f: Vec<&str> = pre.split_whitespace().collect();
        Some(Cgroup2Mount { root: unescape(f.get(3)?).into(), mount_point: unescape(f.get(4)?).into() })
    })
}

pub fn cgroup2_mount() -> Option<Cgroup2Mount> {
    cgroup2_mount_in(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8)
        {
            out.push(v as char);
            i += 4;
            continue;
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    pub(crate) path: PathBuf,
    /// The kernel's cgroup id (the directory's inode number on 64-bit kernels).
    pub(crate) id: u64,
    /// Depth below the hierarchy root (the root cgroup is level 0).
    pub(crate) level: u32,
}

fn statfs_type(path: &Path) -> std::io::Result<i64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: statfs is plain C data, valid when zeroed.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` outlives the call.
    if unsafe { libc::statfs(c.as_ptr(), &raw mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_type as i64)
}

/// Resolves a user-given cgroup v2 directory, with errors that say what would be right.
pub(crate) fn resolve(path: &Path) -> Result<Cgroup> {
    let mount = cgroup2_mount();
    let hint = match &mount {
        Some(m) => format!("cgroup v2 is mounted at {}", m.mount_point.display()),
        None => "this system has no cgroup v2 mounted".to_string(),
    };
    let Ok(canon) = path.canonicalize() else { usage!("cgroup {} does not exist ({hint})", path.display()) };
    let meta = std::fs::metadata(&canon)?;
    if !meta.is_dir() {
        usage!("{} is not a cgroup directory ({hint})", path.display());
    }
    match statfs_type(&canon)? {
        CGROUP2_SUPER_MAGIC => {}
        CGROUP_SUPER_MAGIC => usage!("{} is a cgroup v1 directory; bbrscope needs cgroup v2 ({hint})", path.display()),
        _ => usage!("{} is not a cgroup directory ({hint})", path.display()),
    }
    let Some(mount) = mount else { usage!("{} is on cgroup2 but no cgroup2 mount was found", path.display()) };
    let below = canon.strip_prefix(&mount.mount_point).unwrap_or(Path::new(""));
    let level = mount.root.components().skip(1).count() + below.components().count();
    Ok(Cgroup { path: canon, id: meta.ino(), level: level as u32 })
}

/// Cgroup ids (as sockets record them) to paths below the cgroup v2 mount, for people to read.
/// The directory tree is walked again on a miss, at most once a second: a new container's
/// cgroup shows up, and a flood of unknown ids cannot make bbrscope walk the tree per flow.
#[derive(Default)]
pub(crate) struct CgroupNames {
    mount: Option<PathBuf>,
    // A few lookups per flow (its open and summary lines): the standard hasher is cheap enough.
    names: std::collections::HashMap<u64, String>,
    walked: Option<std::time::Instant>,
}

impl CgroupNames {
    pub(crate) fn new() -> Self {
        CgroupNames { mount: cgroup2_mount().map(|m| m.mount_point), ..Default::default() }
    }

    /// Fixed names, never walking a tree: for tests of what prints them.
    #[cfg(test)]
    pub(crate) fn fixed(names: impl IntoIterator<Item = (u64, String)>) -> Self {
        CgroupNames { mount: None, names: names.into_iter().collect(), walked: Some(std::time::Instant::now()) }
    }

    /// The cgroup's path as `/system.slice/nginx.service` (relative to the cgroup v2 mount).
    pub(crate) fn name(&mut self, id: u64) -> Option<&str> {
        if self.names.contains_key(&id) {
            return self.names.get(&id).map(String::as_str);
        }
        if self.walked.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(1)) {
            return None;
        }
        self.walked = Some(std::time::Instant::now());
        let mount = self.mount.clone()?;
        self.names.clear();
        let mut stack = vec![mount.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            let rel = dir.strip_prefix(&mount).unwrap_or(Path::new(""));
            self.names.insert(meta.ino(), format!("/{}", rel.display()));
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            stack.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
        self.names.get(&id).map(String::as_str)
    }
}

/// The congestion-control algorithm of a connection to `to` made by a child process placed in
/// `cgroup` (a sock_ops program attached there runs for it; a whole process, not a thread, must
/// move). The child is forked and makes only system calls (no allocation, no locks another thread
/// of this process could have held at the fork), then `_exit`s; its connection waits in `to`'s
/// listen queue.
pub(crate) fn congestion_of_connection_from(cgroup: &Path, to: SocketAddrV4) -> Result<String> {
    let procs = CString::new(cgroup.join("cgroup.procs").as_os_str().as_encoded_bytes())?;
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*to.ip()).to_be() },
        sin_zero: [0; 8],
    };
    let (rd, wr) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from).context("pipe")?;
    // SAFETY: the child runs only `child_probe` (system calls on memory prepared above) and then
    // _exit, which skips destructors and atexit handlers.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error()).context("fork");
    }
    if pid == 0 {
        // SAFETY: see the fork above.
        unsafe { libc::_exit(child_probe(&procs, &sin, wr.as_raw_fd())) };
    }
    drop(wr);
    // The child's exit closes the pipe, so this returns whatever happens to it.
    let mut out = Vec::new();
    let read = std::fs::File::from(rd).read_to_end(&mut out);
    let status = rustix::process::Pid::from_raw(pid)
        .and_then(|pid| rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()).ok().flatten());
    read.context("reading the child's result")?;
    let end = match status {
        Some((_, s)) => match (s.exit_status(), s.terminating_signal()) {
            (Some(code), _) => ChildEnd::Exited(code),
            (None, Some(sig)) => ChildEnd::Killed(sig),
            (None, None) => ChildEnd::Lost,
        },
        None => ChildEnd::Lost,
    };
    if let Some(why) = end.failure() {
        bail!("the verification process {why}");
    }
    Ok(String::from_utf8_lossy(&out).trim_end_matches('\0').to_string())
}

/// How the forked child ended.
#[derive(Clone, Copy, Debug)]
enum ChildEnd {
    Exited(i32),
    Killed(i32),
    /// No status to read (waitpid failed): its result cannot be trusted.
    Lost,
}

impl ChildEnd {
    /// What went wrong, in words, or `None` when it ran to the end. A child killed by a signal
    /// (the OOM killer, an admin's kill) failed, whatever it wrote before.
    fn failure(self) -> Option<String> {
        match self {
            ChildEnd::Exited(0) => None,
            ChildEnd::Exited(code) => Some(format!("could not {}", CHILD_STEPS.get(code as usize).unwrap_or(&"run"))),
            ChildEnd::Killed(sig) => Some(format!("was killed by signal {sig}")),
            ChildEnd::Lost => Some("ended without an exit status".to_string()),
        }
    }
}

/// What the child's exit status means (its index).
const CHILD_STEPS: &[&str] = &["run", "join the cgroup", "create a socket", "connect", "read TCP_CONGESTION"];

/// The forked child: join the cgroup, connect, write the algorithm's name to `out`.
fn child_probe(procs: &CString, sin: &libc::sockaddr_in, out: i32) -> i32 {
    // SAFETY: system calls on pointers to the caller's live data and a local buffer, with their
    // lengths; no allocation (this runs in a forked child).
    unsafe {
        let f = libc::open(procs.as_ptr(), libc::O_WRONLY);
        if f < 0 || libc::write(f, b"0".as_ptr().cast(), 1) != 1 {
            return 1;
        }
        libc::close(f);
        let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if s < 0 {
            return 2;
        }
        if libc::connect(s, std::ptr::from_ref::<libc::sockaddr_in>(sin).cast(), size_of::<libc::sockaddr_in>() as u32)
            != 0
        {
            return 3;
        }
        let mut buf = [0u8; CC_NAME_LEN];
        let mut len = CC_NAME_LEN as libc::socklen_t;
        if libc::getsockopt(s, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &raw mut len) != 0 {
            return 4;
        }
        libc::write(out, buf.as_ptr().cast(), len as usize);
        libc::close(s);
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a child that exited 0 counts as a verification; one killed by a signal is a failure
    /// however it ended (before, a kill read as exit 0).
    #[test]
    fn the_probe_succeeds_only_when_its_child_exits_0() {
        assert_eq!(ChildEnd::Exited(0).failure(), None);
        assert_eq!(ChildEnd::Exited(3).failure().as_deref(), Some("could not connect"));
        assert_eq!(ChildEnd::Exited(99).failure().as_deref(), Some("could not run"));
        assert_eq!(ChildEnd::Killed(9).failure().as_deref(), Some("was killed by signal 9"));
        assert!(ChildEnd::Lost.failure().is_some());
    }

    #[test]
    fn finds_cgroup2_in_hybrid_mountinfo() {
        let mi = "\
25 30 0:23 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 25 0:33 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
";
        assert_eq!(
            cgroup2_mount_in(mi),
            Some(Cgroup2Mount { mount_point: "/sys/fs/cgroup/unified".into(), root: "/".into() })
        );
        assert_eq!(cgroup2_mount_in("26 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw"), None);
    }

    #[test]
    fn unescapes_mount_paths() {
        let mi = "35 25 0:33 /ns\\040a /mnt/cg\\040two rw - cgroup2 cgroup2 rw";
        let m = cgroup2_mount_in(mi).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/mnt/cg two"));
        assert_eq!(m.root, PathBuf::from("/ns a"));
    }
}

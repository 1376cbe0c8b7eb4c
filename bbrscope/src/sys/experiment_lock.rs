//! The locks that keep experiments apart: two whose scopes overlap would fight over new
//! connections' algorithms, and two on disjoint scopes (two services on other ports, cgroups
//! or client ranges) run side by side. What they say about the ones running is for `bbrscope
//! status` and `apply`.
//!
//! Each running experiment holds an exclusive `flock` on a file of its own,
//! `/run/bbrscope-experiment-PID.lock`, for its whole run; the kernel releases it however the
//! process ends (crash and SIGKILL included). The file holds the experiment's description as
//! JSON, its scope among it, and whether it runs is the kernel's word, not the file's: a lock on
//! the file's inode in /proc/locks. An experiment registers under [`LOCK`], held only while it
//! compares its scope with those running and writes its own file, so two starting at once cannot
//! both find the other absent. A file whose holder is gone is removed there; the experiment
//! removes its own when it ends.
//!
//! It is an OS-level fact that `apply` and `status` check as well as the experiment takes it, so
//! it lives with the doors to the OS and those commands need nothing of the experiment for it.

use std::{
    fs::File,
    io::Write as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::error::usage;

/// Held while an experiment registers (see the module's text).
pub(crate) const LOCK: &str = "/run/bbrscope-experiment.lock";
/// Each running experiment's own file, as the man page names it.
pub(crate) const RUNNING: &str = "/run/bbrscope-experiment-PID.lock";
/// Each running experiment's own file: this, its pid, [`SUFFIX`].
const PREFIX: &str = "/run/bbrscope-experiment-";
const SUFFIX: &str = ".lock";
/// How long registering waits for another experiment's registration (milliseconds of work).
const REGISTER_WAIT: Duration = Duration::from_secs(5);

/// A running experiment as `bbrscope status` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Running {
    pub(crate) pid: u32,
    /// Arm A's and arm B's algorithm.
    pub(crate) arms: [String; 2],
    /// How connections get their arms, in words (`per connection`, `switchback: 15s blocks,
    /// --seed 7`); empty in a lock written before designs were named.
    #[serde(default)]
    pub(crate) design: String,
    /// Percent of the experiment's connections given arm B (of its clients, `by_client`).
    pub(crate) split_pct: u32,
    /// The split is of client addresses, not connections (the client design).
    #[serde(default)]
    pub(crate) by_client: bool,
    /// Percent of connections in scope that join it.
    pub(crate) sample_pct: u32,
    /// Which connections are in it, in words (`port 443`, `every new connection`).
    pub(crate) scope: String,
    /// Unix time it started, seconds.
    pub(crate) started_at: u64,
    /// When it ends by itself, in words (`after 10:00`, `after 1,000 flows`).
    pub(crate) ends: String,
    pub(crate) guardrail: bool,
    /// Where its flows are recorded (`--record`).
    pub(crate) record: Option<String>,
    /// Its `--id` (the name its sums carry on Prometheus); empty in a lock written before ids.
    #[serde(default)]
    pub(crate) id: String,
    /// The connections it may set, to compare with another's; `None` in a lock written before
    /// experiments could run side by side (then it overlaps every other).
    #[serde(default)]
    pub(crate) claim: Option<Claim>,
}

/// The connections an experiment may give an algorithm: new connections on `port` (any when
/// `None`), of `cgroup`'s processes and its descendants' (any when `None`), to clients in `dst`
/// (any when empty). Two claims are disjoint when one of these sets them apart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Claim {
    pub(crate) port: Option<u16>,
    pub(crate) cgroup: Option<PathBuf>,
    pub(crate) dst: Vec<IpNet>,
}

impl Claim {
    pub(crate) fn overlaps(&self, other: &Claim) -> bool {
        let ports_apart = matches!((self.port, other.port), (Some(a), Some(b)) if a != b);
        let cgroups_apart = match (&self.cgroup, &other.cgroup) {
            (Some(a), Some(b)) => !a.starts_with(b) && !b.starts_with(a),
            _ => false,
        };
        let clients_apart = !self.dst.is_empty()
            && !other.dst.is_empty()
            && !self.dst.iter().any(|a| other.dst.iter().any(|b| a.contains(&b.network()) || b.contains(&a.network())));
        !(ports_apart || cgroups_apart || clients_apart)
    }
}

impl Running {
    /// One whose file has no description yet: its pid alone.
    fn starting(pid: u32) -> Running {
        Running {
            pid,
            arms: [String::new(), String::new()],
            design: String::new(),
            split_pct: 0,
            by_client: false,
            sample_pct: 0,
            scope: "starting".into(),
            started_at: 0,
            ends: String::new(),
            guardrail: false,
            record: None,
            id: String::new(),
            claim: None,
        }
    }

    /// Its split in words: `50% to B`, `50% of clients to B`.
    pub(crate) fn split_words(&self) -> String {
        format!("{}% {}to B", self.split_pct, if self.by_client { "of clients " } else { "" })
    }
}

/// A running experiment's registration: its own file, locked while this lives, removed when it
/// is dropped.
pub(crate) struct Registered {
    /// The open file whose lock says the experiment runs.
    _held: File,
    path: PathBuf,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Removed while still locked (the file closes after this), so no registration finds it
        // unheld and half gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Registers `running` beside the experiments already running (exit 2 if one's scope overlaps
/// its claim); the registration lasts as long as the returned value. Ids may repeat: a fleet's
/// hosts share one, and so may disjoint scopes of one host whose sums are meant to pool.
pub(crate) fn acquire(running: &Running) -> Result<Registered> {
    let registry = open_lock(Path::new(LOCK))?;
    let waited = Instant::now();
    // flock(2) LOCK_EX | LOCK_NB on Linux; the kernel drops it with the last descriptor.
    while let Err(e) = registry.try_lock() {
        if let std::fs::TryLockError::Error(e) = e {
            return Err(e).with_context(|| format!("locking {LOCK}"));
        }
        // Held for a whole run only by a bbrscope from before experiments could run side by side.
        if waited.elapsed() > REGISTER_WAIT {
            let pid = holder(&registry).map(|p| format!(" (pid {p})")).unwrap_or_default();
            usage!("an experiment is already running{pid}: two would fight over new connections' algorithms");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // An older bbrscope wrote its description here; this lock describes no one now.
    registry.set_len(0).with_context(|| format!("writing {LOCK}"))?;
    let others = scan(true)?;
    let claim = running.claim.clone().unwrap_or_default();
    if let Some(o) = others.iter().find(|o| o.claim.as_ref().is_none_or(|c| c.overlaps(&claim))) {
        usage!(
            "an experiment is already running on {} (pid {}): its scope overlaps this one's ({}), and two would \
             fight over new connections' algorithms; give this one a port, cgroup or --dst apart from it",
            o.scope,
            o.pid,
            running.scope
        );
    }
    let path = PathBuf::from(format!("{PREFIX}{}{SUFFIX}", running.pid));
    // A file of this pid left by an experiment that was killed (no holder: scan removed it) or
    // planted: not ours to trust.
    let _ = std::fs::remove_file(&path);
    let file = create_new(&path)?;
    file.try_lock().map_err(|e| anyhow::anyhow!("locking {}: {e}", path.display()))?;
    let mut w = &file;
    writeln!(w, "{}", serde_json::to_string(running)?).with_context(|| format!("writing {}", path.display()))?;
    Ok(Registered { _held: file, path })
}

/// Opens the registry lock at `path`: root's, mode 0600 whatever the umask, never through a
/// symbolic link. A file at the path that is anything else (left at 0644 by an older bbrscope,
/// or planted: any user who can open it can hold its lock and block every experiment, and a link
/// would have this truncate its target) is replaced by a new one, so a lock on the old inode no
/// longer counts.
fn open_lock(path: &Path) -> Result<File> {
    match options(false).open(path) {
        Ok(f) => {
            let m = f.metadata().with_context(|| format!("reading {}", path.display()))?;
            if roots_alone(&m) {
                return Ok(f);
            }
        }
        // O_NOFOLLOW on a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            usage!("cannot open {}: {e}: an experiment needs root", path.display());
        }
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    }
    std::fs::remove_file(path).with_context(|| format!("replacing {}, which is not root's alone", path.display()))?;
    create_new(path)
}

/// A new file at `path`, root's alone (as [`open_lock`] wants it), never through a link.
fn create_new(path: &Path) -> Result<File> {
    options(true).open(path).with_context(|| format!("creating {}", path.display()))
}

fn options(new: bool) -> std::fs::OpenOptions {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut o = File::options();
    o.read(true).write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if new {
        o.create_new(true);
    } else {
        o.create(true).truncate(false);
    }
    o
}

/// A regular file of root's that no one else may read or write: only such a file counts.
fn roots_alone(m: &std::fs::Metadata) -> bool {
    m.file_type().is_file() && m.uid() == 0 && m.mode() & 0o077 == 0
}

/// The pid holding an flock on `f`'s file, as the kernel lists it in /proc/locks
/// (`1: FLOCK  ADVISORY  WRITE 28738 fe:00:5693454 0 EOF`: the device's major and minor in hex,
/// then the inode). Both the device and the inode must match: an inode number alone is shared
/// by files on every other filesystem (a user's flock on one of them, or an experiment in
/// another mount namespace with its own /run, read as this lock's holder).
fn holder(f: &File) -> Option<u32> {
    let m = f.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    holder_in(&locks, (libc::major(m.dev()), libc::minor(m.dev())), m.ino())
}

fn holder_in(locks: &str, dev: (u32, u32), ino: u64) -> Option<u32> {
    locks.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        // Blocked waiters are listed as "1: -> FLOCK ...": only holders count.
        let [_, "FLOCK", _, _, pid, dev_ino, ..] = fields.as_slice() else { return None };
        let mut parts = dev_ino.split(':');
        let mut hex = || u32::from_str_radix(parts.next()?, 16).ok();
        let (major, minor) = (hex()?, hex()?);
        let this = (major, minor) == dev && parts.next()?.parse::<u64>().ok()? == ino;
        this.then(|| pid.parse().ok())?
    })
}

/// The experiments running now, oldest first: each one's file's description, provided a process
/// holds its lock (its pid from the kernel). `Err` if a description cannot be read.
pub(crate) fn running() -> Result<Vec<Running>> {
    scan(false)
}

/// The running experiments' files read; with `tidy` (under the registry lock), the files no
/// process holds are removed.
fn scan(tidy: bool) -> Result<Vec<Running>> {
    let (dir, prefix) = PREFIX.rsplit_once('/').expect("an absolute path");
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e).with_context(|| format!("reading {dir}")),
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {dir}"))?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)?.strip_suffix(SUFFIX)?.parse::<u32>().ok())
        else {
            continue;
        };
        let path = entry.path();
        // Only root's own files count: a planted one, or a link, is no experiment.
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| roots_alone(&m)) {
            continue;
        }
        let Ok(f) = File::open(&path) else { continue };
        let Some(holder) = holder(&f) else {
            if tidy {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        };
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        // A holder that has not written its description yet (it just took the lock): its pid.
        let mut r: Running = serde_json::from_str(text.trim()).unwrap_or_else(|_| Running::starting(pid));
        r.pid = holder;
        found.push(r);
    }
    found.sort_by_key(|r| (r.started_at, r.pid));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two claims are apart when their ports differ, their cgroups are neither one inside the
    /// other, or no client range of one meets one of the other's; anything left open overlaps.
    #[test]
    fn claims_overlap_unless_a_port_cgroup_or_client_range_sets_them_apart() {
        let claim = |port: Option<u16>, cgroup: Option<&str>, dst: &[&str]| Claim {
            port,
            cgroup: cgroup.map(PathBuf::from),
            dst: dst.iter().map(|d| d.parse().unwrap()).collect(),
        };
        let every = claim(None, None, &[]);
        let cases = [
            (claim(Some(443), None, &[]), claim(Some(80), None, &[]), false),
            (claim(Some(443), None, &[]), claim(Some(443), None, &[]), true),
            (claim(Some(443), None, &[]), every.clone(), true),
            (every.clone(), every.clone(), true),
            (claim(None, Some("/sys/fs/cgroup/a"), &[]), claim(None, Some("/sys/fs/cgroup/b"), &[]), false),
            (claim(None, Some("/sys/fs/cgroup/a"), &[]), claim(None, Some("/sys/fs/cgroup/a/web"), &[]), true),
            (claim(None, Some("/sys/fs/cgroup/a"), &[]), claim(None, Some("/sys/fs/cgroup/ab"), &[]), false),
            (claim(None, None, &["10.0.0.0/24"]), claim(None, None, &["10.0.1.0/24"]), false),
            (claim(None, None, &["10.0.0.0/16"]), claim(None, None, &["10.0.1.0/24"]), true),
            (claim(None, None, &["10.0.1.0/24"]), claim(None, None, &["192.0.2.0/24", "10.0.0.0/8"]), true),
            (claim(None, None, &["10.0.0.0/8"]), claim(None, None, &["2001:db8::/32"]), false),
            (claim(None, None, &["10.0.0.0/8"]), claim(Some(443), None, &[]), true),
            // One dimension apart is enough, whatever the others share.
            (claim(Some(443), Some("/sys/fs/cgroup/a"), &[]), claim(Some(80), Some("/sys/fs/cgroup/a"), &[]), false),
        ];
        for (a, b, overlap) in cases {
            assert_eq!(a.overlaps(&b), overlap, "{a:?} and {b:?}");
            assert_eq!(b.overlaps(&a), overlap, "{b:?} and {a:?}: the same both ways");
        }
    }

    #[test]
    fn the_holder_is_found_by_device_and_inode() {
        let locks = "1: FLOCK  ADVISORY  WRITE 28738 fe:00:5693454 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 999 fe:00:42 0 EOF\n\
                     3: POSIX  ADVISORY  WRITE 777 00:19:42 0 EOF\n\
                     4: FLOCK  ADVISORY  WRITE 1234 00:19:42 0 EOF\n\
                     5: FLOCK  ADVISORY  WRITE 4321 00:1a:42 0 EOF\n";
        assert_eq!(holder_in(locks, (0, 0x19), 42), Some(1234));
        assert_eq!(holder_in(locks, (0, 0x1a), 42), Some(4321), "the same inode on another device");
        assert_eq!(holder_in(locks, (0xfe, 0), 5693454), Some(28738));
        assert_eq!(holder_in(locks, (0xfe, 0), 42), None, "a waiter is no holder");
        assert_eq!(holder_in(locks, (0, 0x1b), 42), None);
        assert_eq!(holder_in(locks, (0, 0x19), 7), None);
    }

    /// A client design splits clients, and says so; a lock written before it knew designs reads
    /// as a split of connections.
    #[test]
    fn the_split_says_what_it_splits() {
        let old = r#"{"pid":7,"arms":["cubic","bbr"],"split_pct":30,"sample_pct":100,"scope":"port 443",
                     "started_at":0,"ends":"after 10:00","guardrail":true,"record":null}"#;
        let mut r: Running = serde_json::from_str(old).unwrap();
        assert_eq!(r.split_words(), "30% to B");
        r.by_client = true;
        assert_eq!(r.split_words(), "30% of clients to B");
    }

    /// Against the kernel: a flock held on a file of another filesystem whose inode number is
    /// the same as this file's is not this file's holder; one on this file is.
    #[test]
    fn a_lock_on_another_filesystems_inode_is_not_this_ones() {
        let dir = tempfile::tempdir().unwrap();
        let ours = File::create(dir.path().join("lock")).unwrap();
        let locks = || std::fs::read_to_string("/proc/locks").unwrap();
        assert_eq!(holder(&ours), None);
        let m = ours.metadata().unwrap();
        let dev = (libc::major(m.dev()), libc::minor(m.dev()));
        // A lock line for the same inode on a device that is not this file's.
        let line = format!("1: FLOCK  ADVISORY  WRITE 77 {:02x}:{:02x}:{} 0 EOF\n", dev.0 + 1, dev.1, m.ino());
        assert_eq!(holder_in(&line, dev, m.ino()), None);
        let held = File::open(dir.path().join("lock")).unwrap();
        held.try_lock().unwrap();
        assert_eq!(holder(&ours), Some(std::process::id()), "{}", locks());
    }
}

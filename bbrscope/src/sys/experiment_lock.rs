//! The lock that keeps two experiments apart (they would fight over new connections'
//! algorithms), and what it says about the one that holds it, for `bbrscope status`.
//!
//! The lock is an exclusive `flock` on [`LOCK`], held for the experiment's whole run and released
//! by the kernel however the process ends (crash and SIGKILL included). The file stays; it
//! holds the running experiment's description as JSON, and whether an experiment runs is the
//! kernel's word, not the file's: a lock on the file's inode in /proc/locks.
//!
//! It is an OS-level fact that `apply` and `status` check as well as the experiment takes it, so
//! it lives with the doors to the OS and those commands need nothing of the experiment for it.

use std::{fs::File, io::Write as _, os::unix::fs::MetadataExt as _};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::error::usage;

pub(crate) const LOCK: &str = "/run/bbrscope-experiment.lock";

/// A running experiment as `bbrscope status` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Running {
    pub pid: u32,
    /// Arm A's and arm B's algorithm.
    pub arms: [String; 2],
    /// How connections get their arms, in words (`per connection`, `switchback: 15s blocks,
    /// --seed 7`); empty in a lock written before designs were named.
    #[serde(default)]
    pub design: String,
    /// Percent of the experiment's connections given arm B (of its clients, `by_client`).
    pub split_pct: u32,
    /// The split is of client addresses, not connections (the client design).
    #[serde(default)]
    pub by_client: bool,
    /// Percent of connections in scope that join it.
    pub sample_pct: u32,
    /// Which connections are in it, in words (`port 443`, `every new connection`).
    pub scope: String,
    /// Unix time it started, seconds.
    pub started_at: u64,
    /// When it ends by itself, in words (`after 10:00`, `after 1,000 flows`).
    pub ends: String,
    pub guardrail: bool,
    /// Where its flows are recorded (`--record`).
    pub record: Option<String>,
}

impl Running {
    /// Its split in words: `50% to B`, `50% of clients to B`.
    pub(crate) fn split_words(&self) -> String {
        format!("{}% {}to B", self.split_pct, if self.by_client { "of clients " } else { "" })
    }
}

/// Takes the lock for `running` (exit 2 if another experiment holds it) and writes its
/// description; the lock lasts as long as the returned file is open.
pub(crate) fn acquire(running: &Running) -> Result<File> {
    let f = open_lock()?;
    // flock(2) LOCK_EX | LOCK_NB on Linux; the kernel drops it with the last descriptor.
    if let Err(e) = f.try_lock() {
        if let std::fs::TryLockError::Error(e) = e {
            return Err(e).with_context(|| format!("locking {LOCK}"));
        }
        let pid = holder(&f).map(|p| format!(" (pid {p})")).unwrap_or_default();
        usage!("an experiment is already running{pid}: two would fight over new connections' algorithms");
    }
    let mut w = &f;
    f.set_len(0).with_context(|| format!("writing {LOCK}"))?;
    writeln!(w, "{}", serde_json::to_string(running)?).with_context(|| format!("writing {LOCK}"))?;
    Ok(f)
}

/// Opens the lock file: root's, mode 0600 whatever the umask, never through a symbolic link. A
/// file at the path that is anything else (left at 0644 by an older bbrscope, or planted: any user
/// who can open it can hold its lock and block every experiment, and a link would have this
/// truncate its target) is replaced by a new one, so a lock on the old inode no longer counts.
fn open_lock() -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let open = |new: bool| {
        let mut o = File::options();
        o.read(true).write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if new {
            o.create_new(true);
        } else {
            o.create(true).truncate(false);
        }
        o.open(LOCK)
    };
    match open(false) {
        Ok(f) => {
            let m = f.metadata().with_context(|| format!("reading {LOCK}"))?;
            if m.file_type().is_file() && m.uid() == 0 && m.mode() & 0o077 == 0 {
                return Ok(f);
            }
        }
        // O_NOFOLLOW on a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            usage!("cannot open {LOCK}: {e}: an experiment needs root");
        }
        Err(e) => return Err(e).with_context(|| format!("opening {LOCK}")),
    }
    std::fs::remove_file(LOCK).with_context(|| format!("replacing {LOCK}, which is not root's alone"))?;
    open(true).with_context(|| format!("creating {LOCK}"))
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

/// The experiment running now, if one is: the lock file's description, provided a process holds
/// the lock (its pid from the kernel). `Err` if the description cannot be read.
pub(crate) fn running() -> Result<Option<Running>> {
    // Only root's own lock file counts (see `open_lock`): a planted one, or a link, is no experiment.
    let root_only =
        std::fs::symlink_metadata(LOCK).is_ok_and(|m| m.file_type().is_file() && m.uid() == 0 && m.mode() & 0o077 == 0);
    if !root_only {
        return Ok(None);
    }
    let Ok(f) = File::open(LOCK) else { return Ok(None) };
    let Some(pid) = holder(&f) else { return Ok(None) };
    let text = std::fs::read_to_string(LOCK).with_context(|| format!("reading {LOCK}"))?;
    // A holder that has not written its description yet (it just took the lock): its pid only.
    let mut r: Running = serde_json::from_str(text.trim()).unwrap_or_else(|_| Running {
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
    });
    r.pid = pid;
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! One `apply` or `revert` at a time: an exclusive flock(2) on a file in the state directory,
//! held from before the plan reads the machine until the result is recorded and verified. Two
//! runs on the same scope would otherwise both read the same "before", both report success, and
//! leave the machine on one and the record on the other.
//!
//! The lock file stays (removing it would let a third run lock a new file while a second still
//! waits on the old one). It is mode 0600, so only root can open it and nobody else can hold
//! root's applies up.

use std::{
    fs::{File, OpenOptions, TryLockError},
    io::{Read as _, Seek as _, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::Path,
};

use anyhow::{Context as _, Result};

use super::files;
use crate::error::UsageError;

/// The lock file, beside the state file.
pub(crate) const LOCK: &str = "/var/lib/bbrscope/lock";

/// Held until dropped (the kernel releases a flock when its file is closed, also when the
/// process dies however it dies).
pub(crate) struct Lock {
    _file: File,
}

/// Waits for the lock (std's `File::lock` is flock(2) LOCK_EX on Linux), past signals that
/// interrupt the wait.
fn lock(file: &File) -> std::io::Result<()> {
    loop {
        match file.lock() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

impl Lock {
    /// Takes the lock below `root`, waiting while another run holds it (saying so on stderr).
    /// Then removes temporary files a killed run may have left, as no other writer can be busy.
    pub(crate) fn acquire(root: &Path) -> Result<Lock> {
        let path = files::below(root, Path::new(LOCK));
        // Before anything is created there: a directory others can write would make the record
        // kept beside the lock one that every later run refuses (see `State::load`).
        if let Err(why) = files::roots_alone(root, Path::new(LOCK)) {
            crate::error::usage!(
                "refusing to keep bbrscope's record of changes in {}: {why}; make it root's alone (chown root, chmod 755) or remove it",
                Path::new(LOCK).parent().expect("the lock has a directory").display()
            );
        }
        // The directory with its explicit mode (never from the umask); the lock never opened
        // through a link left at its name.
        let file = (|| {
            files::create_dirs(path.parent().expect("the lock has a directory"))?;
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
        })();
        let mut file = match file {
            Ok(f) => f,
            // Not a runtime failure: the invocation lacks the privilege (README: exit 2).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::EROFS)) => {
                return Err(UsageError::new(format!(
                    "cannot open {LOCK}: {e}: changing congestion control needs root"
                ))
                .into());
            }
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(UsageError::new(format!("{LOCK} is a symbolic link: refusing to follow it")).into());
            }
            Err(e) => return Err(e).with_context(|| format!("opening {LOCK}")),
        };
        if let Err(e) = file.try_lock() {
            if let TryLockError::Error(e) = e {
                return Err(e).with_context(|| format!("locking {LOCK}"));
            }
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            crate::output::errln!("bbrscope: waiting for another bbrscope apply or revert{who} to finish");
            lock(&file).with_context(|| format!("locking {LOCK}"))?;
        }
        // Who holds it, for the message above; best effort.
        let _ = (|| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            writeln!(file, "{}", std::process::id())
        })();
        files::remove_stale_temporaries(root);
        Ok(Lock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::testroot::TempRoot;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let root = TempRoot::new();
        let first = Lock::acquire(root.path()).unwrap();
        let path = files::below(root.path(), Path::new(LOCK));
        let other = File::open(&path).unwrap();
        assert_eq!(other.try_lock().unwrap_err().to_string(), TryLockError::WouldBlock.to_string(), "held");
        drop(first);
        other.try_lock().unwrap();
    }

    /// A link left at the lock's name (the audit had a killed run's lock truncate its target):
    /// refused, the target untouched.
    #[test]
    fn a_link_at_the_locks_name_is_not_followed() {
        let root = TempRoot::new();
        root.write("target", "keep\n");
        let path = files::below(root.path(), Path::new(LOCK));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(root.path().join("target"), &path).unwrap();
        let e = Lock::acquire(root.path()).err().expect("refused");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(root.path().join("target")).unwrap(), "keep\n");
    }

    /// A state directory others can write (a sticky /tmp-like one, or another user's) is
    /// refused before anything is created in it: a record kept there would be refused later,
    /// with the change it records still on the machine.
    #[test]
    fn a_directory_others_can_write_is_refused_before_anything_is_made() {
        use std::os::unix::fs::{PermissionsExt as _, chown};
        let me = rustix::process::geteuid().as_raw();
        // Another owner only when root can give it.
        let cases: &[(u32, u32)] = if me == 0 { &[(0o1777, 0), (0o755, 65534)] } else { &[(0o1777, me)] };
        for &(mode, owner) in cases {
            let root = TempRoot::new();
            let dir = files::below(root.path(), Path::new(LOCK)).parent().unwrap().to_path_buf();
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            chown(&dir, Some(owner), None).unwrap();
            let e = Lock::acquire(root.path()).err().expect("refused");
            assert!(e.downcast_ref::<UsageError>().is_some(), "exit 2: {e:#}");
            assert!(e.to_string().contains("refusing to keep bbrscope's record"), "{e}");
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing made in it");
            let e = super::super::state::State::load(root.path()).unwrap_err();
            assert!(e.to_string().contains("can be written by others"), "status says why: {e}");
        }
    }
}

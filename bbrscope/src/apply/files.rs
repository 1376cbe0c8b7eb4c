//! Files bbrscope owns, written atomically below a root directory (/ in production, a temporary
//! directory in tests). bbrscope never edits a file it did not create.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

use crate::newfile::NewFile;

/// The sysctl drop-in bbrscope owns. "99-zz-" sorts it after the usual late files (Debian's
/// 99-sysctl.conf link to /etc/sysctl.conf among them), so it wins unless a file says otherwise.
pub(crate) const SYSCTL_DROPIN: &str = "/etc/sysctl.d/99-zz-bbrscope.conf";
/// Loads an algorithm's module at boot (systemd-modules-load and Debian's kmod both read it).
pub(crate) const MODULES_LOAD: &str = "/etc/modules-load.d/bbrscope.conf";
/// Where `revert` finds what to undo.
pub(crate) const STATE: &str = "/var/lib/bbrscope/state.json";

pub(crate) const HEADER: &str = "# Written by bbrscope (`bbrscope apply`). `bbrscope revert` removes it.\n\
                          # bbrscope owns this file: edit it and bbrscope will leave it alone.\n";

/// A system path (/etc/...) below `root`.
pub(crate) fn below(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The file's content, None when there is no such file.
pub(crate) fn read(root: &Path, path: &Path) -> Result<Option<String>> {
    use std::io::ErrorKind::{NotADirectory, NotFound};
    match std::fs::read_to_string(below(root, path)) {
        Ok(s) => Ok(Some(s)),
        Err(e) if matches!(e.kind(), NotFound | NotADirectory) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// The mode of every file bbrscope owns, whatever the caller's umask: root writes it, anyone may
/// read it (`status` as any user shows what was changed; nothing in it is secret).
const FILE_MODE: u32 = crate::newfile::PUBLIC;
/// The mode of a directory bbrscope creates.
const DIR_MODE: u32 = 0o755;

/// Creates the missing directories of `dir` with [`DIR_MODE`].
pub(crate) fn create_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    if dir.exists() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE)),
        // Another run made it since the check above: two applies that start together both
        // create the directory their lock lives in (seen in CI as "File exists").
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Replaces the file in one step (a new file beside it, flushed, renamed: see
/// [`crate::newfile`]), so a crash leaves the old or the new content, never half of one.
pub(crate) fn write_atomic(root: &Path, path: &Path, contents: &str) -> Result<()> {
    let target = below(root, path);
    let dir = target.parent().context("a file path has a parent")?;
    create_dirs(dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = (|| -> std::io::Result<()> {
        let mut new = NewFile::create(&target, FILE_MODE)?;
        new.file().write_all(contents.as_bytes())?;
        new.file().sync_all()?;
        new.place()?;
        std::fs::File::open(dir)?.sync_all()
    })();
    result.with_context(|| format!("writing {}", path.display()))
}

/// Whether `e` failed for want of space (a full filesystem, or a quota).
pub(crate) fn no_space(e: &anyhow::Error) -> bool {
    e.chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .any(|io| matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)))
}

/// Space kept beside the record of changes for the moment the filesystem is full: replacing
/// the record needs a new file's worth of room, and a revert must not fail for want of it.
pub(crate) mod reserve {
    use std::{io::Write as _, path::Path};

    use super::below;

    /// Root's own file beside state.json, never read.
    pub(crate) const RESERVE: &str = "/var/lib/bbrscope/.reserve";
    /// At least this much, and twice the record: room for the new record beside the old one.
    const MIN: usize = 64 << 10;

    /// Makes sure the reserve is there and large enough for a record of `record_len` bytes.
    /// Best effort: on a full filesystem there is no room to keep, and nothing is left half
    /// written (a short reserve is removed again).
    pub(crate) fn keep(root: &Path, record_len: usize) {
        use std::os::unix::fs::OpenOptionsExt as _;
        let want = MIN.max(2 * record_len);
        let path = below(root, Path::new(RESERVE));
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() >= want as u64) {
            return;
        }
        let _ = std::fs::remove_file(&path);
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            // Written, not sized with set_len: a sparse file would reserve nothing.
            .and_then(|mut f| f.write_all(&vec![0; want]).and_then(|()| f.sync_all()));
        if made.is_err() {
            let _ = std::fs::remove_file(&path);
        }
    }

    /// Gives the reserve up; whether there was one.
    pub(crate) fn release(root: &Path) -> bool {
        std::fs::remove_file(below(root, Path::new(RESERVE))).is_ok()
    }
}

/// Whether `path` (below the root) and its directory can be written by root alone: a record
/// that another user could have written is not trusted. (Files that do not exist are fine.)
/// Run by another user (`status` without root, the unit tests), that user's own files are
/// trusted too: only that user could have written them, and only that user reads them.
pub(crate) fn roots_alone(root: &Path, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let target = below(root, path);
    let me = rustix::process::geteuid().as_raw();
    for p in [target.as_path(), target.parent().unwrap_or(Path::new("/"))] {
        let Ok(m) = std::fs::symlink_metadata(p) else { continue };
        if m.file_type().is_symlink() {
            return Err(format!("{} is a symbolic link", p.display()));
        }
        if (m.uid() != 0 && m.uid() != me) || m.mode() & 0o022 != 0 {
            return Err(format!(
                "{} can be written by others (owner uid {}, mode {:o})",
                p.display(),
                m.uid(),
                m.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// Removes temporary files of bbrscope's own files that a killed run left (`.NAME.bbrscope-PID`
/// beside them). Only called under the apply lock, when no other run can be writing one. Best
/// effort: a leftover that cannot be removed does no harm beyond taking space.
pub(crate) fn remove_stale_temporaries(root: &Path) {
    for own in [STATE, SYSCTL_DROPIN, MODULES_LOAD] {
        let target = below(root, Path::new(own));
        let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else { continue };
        let prefix = format!(".{}.bbrscope-", name.to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        for e in entries.flatten() {
            let file = e.file_name();
            let is_ours = file
                .to_str()
                .and_then(|f| f.strip_prefix(&prefix))
                .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
            if is_ours {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

pub(crate) fn remove(root: &Path, path: &Path) -> Result<()> {
    match std::fs::remove_file(below(root, path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Why `path` could not be written, found without writing (missing privileges, read-only /etc).
pub(crate) fn unwritable(root: &Path, path: &Path) -> Option<String> {
    // The nearest existing ancestor decides: missing directories are created.
    let mut dir = below(root, path);
    while !dir.exists() {
        dir = dir.parent()?.to_path_buf();
    }
    let e = std::io::Error::from(rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).err()?);
    Some(format!("cannot write {}: {e} (run as root; is the filesystem read-only?)", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::testroot::TempRoot;

    /// Runs that start together all create the state directory: none fails because another
    /// made it first.
    #[test]
    fn directories_made_at_once_by_several_runs() {
        let root = TempRoot::new();
        for round in 0..100 {
            let dir = root.path().join(format!("r{round}/var/lib/bbrscope"));
            let start = std::sync::Barrier::new(8);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        start.wait();
                        create_dirs(&dir).unwrap();
                    });
                }
            });
            assert!(dir.is_dir());
        }
    }

    #[test]
    fn atomic_write_creates_replaces_and_leaves_no_temporary() {
        let root = TempRoot::new();
        let p = Path::new(SYSCTL_DROPIN);
        write_atomic(root.path(), p, "a\n").unwrap();
        write_atomic(root.path(), p, "b\n").unwrap();
        assert_eq!(read(root.path(), p).unwrap().as_deref(), Some("b\n"));
        let entries: Vec<_> = std::fs::read_dir(root.path().join("etc/sysctl.d")).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1, "only the file itself");
        remove(root.path(), p).unwrap();
        remove(root.path(), p).unwrap();
        assert_eq!(read(root.path(), p).unwrap(), None);
        assert_eq!(unwritable(root.path(), p), None);
    }

    /// Under umask 000 as under 077: files 0644, directories 0755.
    #[test]
    fn modes_are_explicit_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt as _;
        for umask in [0o000, 0o077] {
            let root = TempRoot::new();
            // Restored below (tests in this process share it).
            let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(umask));
            write_atomic(root.path(), Path::new(STATE), "{}").unwrap();
            write_atomic(root.path(), Path::new(SYSCTL_DROPIN), "x\n").unwrap();
            rustix::process::umask(old);
            let mode = |p: &str| std::fs::metadata(root.path().join(p)).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode("var/lib/bbrscope/state.json"), 0o644, "umask {umask:o}");
            assert_eq!(mode("var/lib/bbrscope"), 0o755, "umask {umask:o}");
            assert_eq!(mode("etc/sysctl.d/99-zz-bbrscope.conf"), 0o644, "umask {umask:o}");
            assert_eq!(roots_alone(root.path(), Path::new(STATE)), Ok(()));
        }
    }

    #[test]
    fn stale_temporaries_of_our_files_are_removed_and_nothing_else() {
        let root = TempRoot::new();
        root.write("var/lib/bbrscope/.state.json.bbrscope-123", "");
        root.write("var/lib/bbrscope/state.json", "{}");
        root.write("etc/sysctl.d/.99-zz-bbrscope.conf.bbrscope-9", "x");
        root.write("etc/sysctl.d/.other.conf.bbrscope-9", "x");
        root.write("etc/sysctl.d/.99-zz-bbrscope.conf.bbrscope-x", "x");
        remove_stale_temporaries(root.path());
        let left = |dir: &str| {
            let mut v: Vec<_> = std::fs::read_dir(root.path().join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        assert_eq!(left("var/lib/bbrscope"), ["state.json"]);
        assert_eq!(left("etc/sysctl.d"), [".99-zz-bbrscope.conf.bbrscope-x", ".other.conf.bbrscope-9"]);
    }
}

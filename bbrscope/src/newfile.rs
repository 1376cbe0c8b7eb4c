//! Every file bbrscope creates, made the one way that cannot be redirected: a new temporary file
//! beside the target, opened with `O_CREAT|O_EXCL|O_NOFOLLOW` and the mode the file means, then
//! renamed over the target's name. Run as root into a directory another user can write (/tmp, a
//! home), a symbolic link planted at the name is replaced, never followed, and a file that user
//! made first is replaced by root's own with root's mode, so they cannot read what root wrote.

use std::{
    fs::File,
    io::{self, Write as _},
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

/// Anyone may read it (figures, man pages, bbrscope's record of what it changed).
pub(crate) const PUBLIC: u32 = 0o644;
/// The owner alone (an experiment's recording: it names clients).
pub(crate) const PRIVATE: u32 = 0o600;

/// A file being made at a temporary name beside its target; removed on drop unless placed.
pub(crate) struct NewFile {
    file: File,
    tmp: PathBuf,
    target: PathBuf,
    placed: bool,
}

impl NewFile {
    /// Creates `.NAME.bbrscope-PID` beside `target`, empty, with exactly `mode` whatever the
    /// umask. A leftover of the same name (this pid's, from a killed run long ago) is removed
    /// first; if someone plants it again between the two steps, creating fails rather than
    /// follows it.
    pub(crate) fn create(target: &Path, mode: u32) -> io::Result<NewFile> {
        let tmp = temporary(target, std::process::id());
        let _ = std::fs::remove_file(&tmp);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        let new = NewFile { file, tmp, target: target.to_path_buf(), placed: false };
        new.file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        Ok(new)
    }

    pub(crate) fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Renames the file to its target's name, replacing what is there (a file, or a link as
    /// itself), and returns it open for more writes.
    pub(crate) fn place(mut self) -> io::Result<File> {
        std::fs::rename(&self.tmp, &self.target)?;
        self.placed = true;
        self.file.try_clone()
    }
}

impl Drop for NewFile {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// The temporary name [`NewFile`] uses for `target`: `.NAME.bbrscope-PID` beside it.
pub(crate) fn temporary(target: &Path, pid: u32) -> PathBuf {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    target.with_file_name(format!(".{name}.bbrscope-{pid}"))
}

/// Writes `bytes` as a new file at `path` with `mode` (see the module's notes).
pub(crate) fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let mut new = NewFile::create(path, mode)?;
    new.file().write_all(bytes)?;
    new.place().map(drop)
}

/// Whether a file could be made at `path`, found without making one (a run takes minutes:
/// finding out at its end loses it). Nothing is opened at the path, so a link there is not
/// followed even to test it.
pub(crate) fn check_writable(path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!("no directory {}", dir.display()));
    }
    if path.is_dir() {
        return Err("it is a directory".into());
    }
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("cannot write in {}: {}", dir.display(), io::Error::from(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link at the name is replaced by the file, its target untouched; a file someone made
    /// first (mode 0666) is replaced by one with the mode asked for.
    #[test]
    fn links_and_files_at_the_name_are_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let out = dir.path().join("out.svg");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write(&out, b"<svg/>", PUBLIC).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let m = std::fs::symlink_metadata(&out).unwrap();
        assert!(m.is_file(), "the link itself was replaced");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "<svg/>");

        let record = dir.path().join("record");
        std::fs::write(&record, "").unwrap();
        std::fs::set_permissions(&record, std::fs::Permissions::from_mode(0o666)).unwrap();
        let mut f = NewFile::create(&record, PRIVATE).unwrap().place().unwrap();
        writeln!(f, "x").unwrap();
        assert_eq!(std::fs::metadata(&record).unwrap().permissions().mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_to_string(&record).unwrap(), "x\n");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 3, "no temporary left: {left:?}");
    }

    #[test]
    fn an_unplaced_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        drop(NewFile::create(&dir.path().join("x"), PUBLIC).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(check_writable(&dir.path().join("x")).is_ok());
        assert!(check_writable(dir.path()).unwrap_err().contains("directory"));
        assert!(check_writable(&dir.path().join("no/x")).unwrap_err().contains("no directory"));
    }
}

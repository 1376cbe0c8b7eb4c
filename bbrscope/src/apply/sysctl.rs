//! Live kernel settings under /proc/sys, read and written in the calling thread's network
//! namespace (see [`crate::sys::netns::run`]).

use std::{io, path::PathBuf};

use anyhow::Result;

pub const CC: &str = "net.ipv4.tcp_congestion_control";
pub const ALLOWED: &str = "net.ipv4.tcp_allowed_congestion_control";
pub const DEFAULT_QDISC: &str = "net.core.default_qdisc";

pub fn path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// The value, or None when this namespace has no such setting (e.g. net.core.default_qdisc
/// outside the initial namespace).
pub fn read(key: &str) -> Result<Option<String>> {
    match std::fs::read_to_string(path(key)) {
        Ok(v) => Ok(Some(v.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {key}"))),
    }
}

pub fn write(key: &str, value: &str) -> io::Result<()> {
    std::fs::write(path(key), value)
}

/// Why a write would fail, found without writing: a read-only /proc/sys (containers) or no
/// permission. None when it looks writable.
pub fn unwritable(key: &str) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let p = path(key);
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 {
        return None;
    }
    let e = io::Error::last_os_error();
    Some(match e.raw_os_error() {
        Some(libc::EROFS) => format!(
            "/proc/sys is mounted read-only here (typical in containers), so {key} cannot be changed from inside"
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!("no permission to change {key}: run as root (or with CAP_NET_ADMIN)")
        }
        Some(libc::ENOENT) => format!("this namespace has no {key}"),
        _ => format!("{key} cannot be changed: {e}"),
    })
}

/// A space-separated list setting (the allowed and available algorithm lists).
pub fn words(value: &str) -> Vec<String> {
    value.split_whitespace().map(str::to_string).collect()
}

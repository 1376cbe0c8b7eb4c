//! Live kernel settings under /proc/sys, read and written in the calling thread's network
//! namespace (see [`crate::sys::netns::run`]), and the allow-list of those `apply --sysctl` may
//! write ([`TUNABLE`]).

use std::{io, path::PathBuf};

use anyhow::Result;

pub(crate) const CC: &str = "net.ipv4.tcp_congestion_control";
pub(crate) const ALLOWED: &str = "net.ipv4.tcp_allowed_congestion_control";
pub(crate) const DEFAULT_QDISC: &str = "net.core.default_qdisc";

pub(crate) fn path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// The value, or None when this namespace has no such setting (e.g. net.core.default_qdisc
/// outside the initial namespace). Several numbers (tcp_wmem's three) come back separated by
/// one space, as they are written and recorded (the kernel prints tabs).
pub(crate) fn read(key: &str) -> Result<Option<String>> {
    match std::fs::read_to_string(path(key)) {
        Ok(v) => Ok(Some(normal(&v))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("reading {key}"))),
    }
}

pub(crate) fn write(key: &str, value: &str) -> io::Result<()> {
    std::fs::write(path(key), value)
}

/// Why a write would fail, found without writing: a read-only /proc/sys (containers) or no
/// permission. None when it looks writable.
pub(crate) fn unwritable(key: &str) -> Option<String> {
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
        Some(libc::EACCES | libc::EPERM) => {
            format!("no permission to change {key}: run as root (or with CAP_NET_ADMIN)")
        }
        Some(libc::ENOENT) => format!("this namespace has no {key}"),
        _ => format!("{key} cannot be changed: {e}"),
    })
}

/// A value as bbrscope records and compares it: its words separated by one space.
pub(crate) fn normal(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The settings `apply --sysctl` changes besides the algorithm: those `bbrscope advise` weighs
/// flows against and the ones the usual BBR guides set beside it, each with the values it
/// accepts. Anything else is refused: bbrscope is a TCP tool, and a typo in a key must not
/// become a write to some other part of /proc/sys.
pub(crate) const TUNABLE: &[(&str, Accepts)] = &[
    ("net.ipv4.tcp_wmem", Accepts::Buffer),
    ("net.ipv4.tcp_rmem", Accepts::Buffer),
    ("net.core.wmem_max", Accepts::Range(4096, i32::MAX as u64)),
    ("net.core.rmem_max", Accepts::Range(4096, i32::MAX as u64)),
    ("net.ipv4.tcp_slow_start_after_idle", Accepts::Range(0, 1)),
    ("net.ipv4.tcp_notsent_lowat", Accepts::Range(1, u32::MAX as u64)),
    ("net.ipv4.tcp_no_metrics_save", Accepts::Range(0, 1)),
    ("net.ipv4.tcp_mtu_probing", Accepts::Range(0, 2)),
    // 1: as a client, 2: as a server, 3: both; the kernel's other bits are for testing.
    ("net.ipv4.tcp_fastopen", Accepts::Range(0, 3)),
];

/// The values a tunable setting takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Accepts {
    /// One integer in this range.
    Range(u64, u64),
    /// Three byte counts, min ≤ default ≤ max (tcp_wmem, tcp_rmem).
    Buffer,
}

/// Checks `KEY=VALUE` for `apply --sysctl`: the key on [`TUNABLE`], the value one it accepts.
/// Returns the key and the value as recorded ([`normal`]); the error is the line for the user.
pub(crate) fn tunable(arg: &str) -> Result<(String, String), String> {
    let Some((key, value)) = arg.split_once('=') else {
        return Err(format!("--sysctl {arg:?}: expected KEY=VALUE, e.g. net.ipv4.tcp_slow_start_after_idle=0"));
    };
    let key = key.trim().replace('/', ".");
    let value = normal(value);
    let names = || TUNABLE.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ");
    if key == CC || key == ALLOWED || key == DEFAULT_QDISC {
        return Err(format!("--sysctl {key}: bbrscope sets this itself: give the algorithm (or --qdisc) instead"));
    }
    let Some((_, accepts)) = TUNABLE.iter().find(|(k, _)| *k == key) else {
        return Err(format!("--sysctl {key}: not a setting bbrscope changes; it changes {}", names()));
    };
    // Decimal digits, no leading zero: the kernel reads "010" as octal (8) and prints "01" back
    // as "1", and a value recorded otherwise than the kernel prints it reads as "not set" after
    // the write and is left in place by `revert`. Rust's parser would also take "+1".
    let decimal = |w: &str| w == "0" || (!w.starts_with('0') && !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()));
    let numbers: Option<Vec<u64>> = value.split(' ').map(|w| if decimal(w) { w.parse().ok() } else { None }).collect();
    let ok = match (accepts, numbers.as_deref()) {
        (Accepts::Range(lo, hi), Some(&[v])) => (*lo..=*hi).contains(&v),
        (Accepts::Buffer, Some(&[min, def, max])) => 1 <= min && min <= def && def <= max && i32::try_from(max).is_ok(),
        _ => false,
    };
    if !ok {
        let want = match accepts {
            Accepts::Range(lo, hi) => format!("one decimal integer from {lo} to {hi}, no sign or leading zero"),
            Accepts::Buffer => "three decimal byte counts, min ≤ default ≤ max, e.g. \"4096 131072 16777216\"".into(),
        };
        return Err(format!("--sysctl {key}={value:?}: expected {want}"));
    }
    Ok((key, value))
}

/// A space-separated list setting (the allowed and available algorithm lists).
pub(crate) fn words(value: &str) -> Vec<String> {
    value.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunable_settings_take_only_their_values() {
        assert_eq!(
            tunable("net.ipv4.tcp_wmem=4096  16384\t8388608").unwrap(),
            ("net.ipv4.tcp_wmem".into(), "4096 16384 8388608".into())
        );
        assert_eq!(tunable("net/ipv4/tcp_slow_start_after_idle=0").unwrap().0, "net.ipv4.tcp_slow_start_after_idle");
        for bad in [
            "net.ipv4.tcp_wmem=4096 16384",
            "net.ipv4.tcp_wmem=65536 16384 8388608",
            "net.ipv4.tcp_wmem=0 16384 8388608",
            "net.ipv4.tcp_slow_start_after_idle=2",
            "net.ipv4.tcp_slow_start_after_idle=",
            "net.ipv4.tcp_fastopen=0x400",
            "net.core.wmem_max=-1",
            "net.ipv4.ip_forward=1",
            "net.ipv4.tcp_congestion_control=bbr",
            "net.ipv4.tcp_wmem",
            "net.ipv4.tcp_slow_start_after_idle=+1",
            "net.ipv4.tcp_slow_start_after_idle=-0",
            "net.core.wmem_max=1e6",
        ] {
            let e = tunable(bad).unwrap_err();
            assert!(e.starts_with("--sysctl "), "{bad}: {e}");
        }
        assert!(tunable("net.ipv4.ip_forward=1").unwrap_err().contains("net.ipv4.tcp_wmem"), "names the list");
        // The kernel reads a leading zero as octal and prints the value back without it.
        for octal in ["00", "01", "010"] {
            let e = tunable(&format!("net.ipv4.tcp_slow_start_after_idle={octal}")).unwrap_err();
            assert!(e.contains("no sign or leading zero"), "{octal}: {e}");
        }
        assert!(tunable("net.ipv4.tcp_rmem=04096 131072 6291456").is_err());
    }
}

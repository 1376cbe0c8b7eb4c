//! Checking for the capabilities BPF needs before trying, so the error names them.

use anyhow::Result;

use crate::error::usage;

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability bits from `/proc/self/status` (`CapEff:` line).
fn effective_caps_in(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

fn has(caps: u64, cap: u32) -> bool {
    caps & (1 << cap) != 0
}

/// Tracing needs CAP_BPF and CAP_PERFMON (5.8+), or CAP_SYS_ADMIN (any kernel).
pub(crate) fn can_trace(caps: u64) -> bool {
    has(caps, CAP_SYS_ADMIN) || (has(caps, CAP_BPF) && has(caps, CAP_PERFMON))
}

/// Loading a sock_ops program (a networking program type) needs CAP_NET_ADMIN or CAP_SYS_ADMIN
/// besides what tracing needs; without it the kernel refuses every helper probe, which must not
/// read as a kernel that lacks the helpers.
pub(crate) fn can_load_sockops(caps: u64) -> bool {
    has(caps, CAP_SYS_ADMIN) || has(caps, CAP_NET_ADMIN)
}

/// This process's effective capabilities (0 if they cannot be read).
pub(crate) fn effective_caps() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    effective_caps_in(&status).unwrap_or(0)
}

pub(crate) fn require_tracing(what: &str) -> Result<()> {
    if !can_trace(effective_caps()) {
        usage!("{what} needs root, or the capabilities CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_capeff() {
        let s = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        let caps = effective_caps_in(s).unwrap();
        assert!(can_trace(caps));
        assert!(!can_trace(0));
        assert!(can_trace((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!can_trace(1 << CAP_BPF));
        assert!(can_load_sockops(caps));
        assert!(can_load_sockops(1 << CAP_NET_ADMIN));
        assert!(!can_load_sockops((1 << CAP_BPF) | (1 << CAP_PERFMON)));
    }
}

//! The running kernel's build configuration, where the kernel or the distribution publishes it.

use std::io::Read as _;

/// The configuration text and where it was read: /proc/config.gz (CONFIG_IKCONFIG_PROC), else
/// /boot/config-<release> (most distributions).
pub fn read(release: &str) -> Option<(String, String)> {
    if let Ok(gz) = std::fs::File::open("/proc/config.gz") {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(gz).read_to_string(&mut text).is_ok() {
            return Some((text, "/proc/config.gz".into()));
        }
    }
    let path = format!("/boot/config-{release}");
    std::fs::read_to_string(&path).ok().map(|text| (text, path))
}

/// The running kernel's release (`uname -r`).
pub fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

/// The value of `CONFIG_<name>=...` in a configuration text.
pub fn value<'a>(config: &'a str, name: &str) -> Option<&'a str> {
    config.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

/// The preemption model the running kernel uses when it lets another task preempt kernel code
/// (`full`, `lazy` or `rt`), or `None` for `none`/`voluntary` (or when it cannot be told).
/// A BPF program can then be preempted midway by another task running the same program on its
/// CPU (they run with migration, not preemption, disabled).
pub fn preemptible_model() -> Option<&'static str> {
    let debugfs = std::fs::read_to_string("/sys/kernel/debug/sched/preempt").ok();
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let (config, _) = read(&release())?;
    preemption(&config, &cmdline, debugfs.as_deref())
}

/// [`preemptible_model`] from its sources: the build configuration, the boot command line
/// (`preempt=` chooses the model on PREEMPT_DYNAMIC kernels) and debugfs's
/// `sched/preempt` ("none voluntary (full) lazy": the one in use in parentheses), if mounted.
fn preemption(config: &str, cmdline: &str, debugfs: Option<&str>) -> Option<&'static str> {
    let preempting = |m: &str| match m {
        "full" => Some("full"),
        "lazy" => Some("lazy"),
        _ => None,
    };
    if value(config, "CONFIG_PREEMPT_RT") == Some("y") {
        return Some("rt");
    }
    if let Some(shown) = debugfs.and_then(|d| d.split('(').nth(1)?.split(')').next()) {
        return preempting(shown);
    }
    if value(config, "CONFIG_PREEMPT_DYNAMIC") == Some("y")
        && let Some(chosen) = cmdline.split_whitespace().find_map(|w| w.strip_prefix("preempt="))
    {
        return preempting(chosen);
    }
    if value(config, "CONFIG_PREEMPT") == Some("y") {
        Some("full")
    } else if value(config, "CONFIG_PREEMPT_LAZY") == Some("y") {
        Some("lazy")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preemption_model_comes_from_debugfs_the_boot_line_or_the_build() {
        // This project's VM: built for none, dynamic, nothing chosen at boot.
        let none = "CONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\nCONFIG_PREEMPT_DYNAMIC=y\n";
        assert_eq!(preemption(none, "console=ttyS0", None), None);
        assert_eq!(preemption(none, "quiet preempt=full", None), Some("full"));
        assert_eq!(preemption(none, "preempt=voluntary", None), None);
        assert_eq!(preemption(none, "", Some("none voluntary (full) lazy\n")), Some("full"));
        assert_eq!(preemption(none, "preempt=full", Some("none (voluntary) full lazy\n")), None);
        let full = "CONFIG_PREEMPT=y\nCONFIG_PREEMPT_DYNAMIC=y\n";
        assert_eq!(preemption(full, "", None), Some("full"));
        assert_eq!(preemption(full, "preempt=voluntary", None), None);
        // Without PREEMPT_DYNAMIC the boot line cannot change it.
        assert_eq!(preemption("CONFIG_PREEMPT_VOLUNTARY=y\n", "preempt=full", None), None);
        assert_eq!(preemption("CONFIG_PREEMPT_LAZY=y\n", "", None), Some("lazy"));
        assert_eq!(preemption("CONFIG_PREEMPT_RT=y\nCONFIG_PREEMPT=y\n", "preempt=none", None), Some("rt"));
    }

    #[test]
    fn values_are_found_by_their_whole_name() {
        let cfg = "CONFIG_HZ_250=y\nCONFIG_HZ=250\n# CONFIG_HZ_1000 is not set\n";
        assert_eq!(value(cfg, "CONFIG_HZ"), Some("250"));
        assert_eq!(value(cfg, "CONFIG_HZ_250"), Some("y"));
        assert_eq!(value(cfg, "CONFIG_HZ_1000"), None);
    }
}

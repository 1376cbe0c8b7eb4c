//! The running kernel's build configuration, where the kernel or the distribution publishes it.

use std::io::Read as _;

/// The configuration text and where it was read: /proc/config.gz (CONFIG_IKCONFIG_PROC), else
/// /boot/config-<release> (most distributions).
pub(crate) fn read(release: &str) -> Option<(String, String)> {
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
pub(crate) fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string()
}

/// The value of `CONFIG_<name>=...` in a configuration text.
pub(crate) fn value<'a>(config: &'a str, name: &str) -> Option<&'a str> {
    config.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_by_their_whole_name() {
        let cfg = "CONFIG_HZ_250=y\nCONFIG_HZ=250\n# CONFIG_HZ_1000 is not set\n";
        assert_eq!(value(cfg, "CONFIG_HZ"), Some("250"));
        assert_eq!(value(cfg, "CONFIG_HZ_250"), Some("y"));
        assert_eq!(value(cfg, "CONFIG_HZ_1000"), None);
    }
}

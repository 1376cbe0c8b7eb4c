//! What the next boot will set: the sysctl configuration files in the order systemd-sysctl and
//! procps (`sysctl --system`) apply them.
//!
//! Files named `*.conf` in the directories below are taken together; a file in an earlier
//! directory hides a same-named file in a later one (so /etc overrides /usr/lib, and a symlink
//! to /dev/null masks); the survivors are applied in lexicographic order of their names, and
//! /etc/sysctl.conf last (procps reads it last; on systemd it is usually linked in as
//! /etc/sysctl.d/99-sysctl.conf). The last assignment of a key wins.
//!
//! Every path is taken below a root directory so tests can stand a temporary one in for /.

use std::path::{Path, PathBuf};

/// In priority order: a name found in an earlier directory hides the same name in later ones.
pub(crate) const DIRS: &[&str] =
    &["etc/sysctl.d", "run/sysctl.d", "usr/local/lib/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d"];
pub(crate) const SYSCTL_CONF: &str = "etc/sysctl.conf";

/// One configuration file, named by its path on the system (not below the root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfFile {
    pub(crate) path: PathBuf,
    pub(crate) text: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    pub(crate) file: PathBuf,
    pub(crate) line: usize,
    pub(crate) value: String,
}

/// The files applied at boot, in application order.
#[derive(Clone, Debug, Default)]
pub struct BootConfig {
    files: Vec<ConfFile>,
}

impl BootConfig {
    pub(crate) fn load(root: &Path) -> Self {
        let mut by_name: Vec<(String, PathBuf)> = Vec::new();
        for dir in DIRS {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".conf") && !by_name.iter().any(|(n, _)| *n == name) {
                    by_name.push((name, Path::new("/").join(dir).join(e.file_name())));
                }
            }
        }
        by_name.sort();
        let mut files: Vec<ConfFile> =
            by_name.into_iter().map(|(_, path)| ConfFile { text: read_below(root, &path), path }).collect();
        let conf = Path::new("/").join(SYSCTL_CONF);
        if root.join(SYSCTL_CONF).exists() {
            files.push(ConfFile { text: read_below(root, &conf), path: conf });
        }
        BootConfig { files }
    }

    #[cfg(test)]
    pub(crate) fn files(&self) -> &[ConfFile] {
        &self.files
    }

    /// The configuration as it would be with `file` (in /etc/sysctl.d) holding `text`, or
    /// without it when `text` is None.
    pub fn with_dropin(&self, file: &Path, text: Option<&str>) -> Self {
        let name = file.file_name();
        let mut names: Vec<ConfFile> =
            self.files.iter().filter(|f| f.path.file_name() != name && !is_sysctl_conf(&f.path)).cloned().collect();
        if let Some(text) = text {
            names.push(ConfFile { path: file.to_path_buf(), text: text.to_string() });
        }
        names.sort_by(|a, b| a.path.file_name().cmp(&b.path.file_name()));
        names.extend(self.files.iter().filter(|f| is_sysctl_conf(&f.path)).cloned());
        BootConfig { files: names }
    }

    /// Every assignment of `key`, in the order they are applied.
    pub(crate) fn assignments(&self, key: &str) -> Vec<Assignment> {
        let mut out = Vec::new();
        for f in &self.files {
            for (i, line) in f.text.lines().enumerate() {
                if let Some(value) = assignment(line, key) {
                    out.push(Assignment { file: f.path.clone(), line: i + 1, value });
                }
            }
        }
        out
    }

    /// The value the next boot sets, and where it comes from (None: the kernel's default).
    pub fn effective(&self, key: &str) -> Option<Assignment> {
        self.assignments(key).pop()
    }
}

fn is_sysctl_conf(p: &Path) -> bool {
    p == Path::new("/").join(SYSCTL_CONF)
}

/// Reads a file named by its system path below `root`. Symlinks are followed as the system
/// would; a relative target resolves within the root, an absolute one (/dev/null) as is.
fn read_below(root: &Path, path: &Path) -> String {
    std::fs::read_to_string(root.join(path.strip_prefix("/").unwrap_or(path))).unwrap_or_default()
}

/// The value if `line` assigns `key`. Follows sysctl.d(5): `#`/`;` comments, a leading `-`
/// (ignore failures), `/` as separator, and glob patterns in keys.
fn assignment(line: &str, key: &str) -> Option<String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
        return None;
    }
    let (k, v) = line.split_once('=')?;
    let k = k.trim().trim_start_matches('-');
    let k = if k.find('/').is_some_and(|s| k.find('.').is_none_or(|d| s < d)) {
        k.replace('/', ".")
    } else {
        k.to_string()
    };
    glob(k.as_bytes(), key.as_bytes()).then(|| v.trim().to_string())
}

/// fnmatch-style `*`, `?` and `[...]`-free matching, which is what sysctl.d keys use in practice.
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match (pat.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pat[1..], s) || (!s.is_empty() && glob(pat, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&pat[1..], &s[1..]),
        (Some(p), Some(c)) if p == c => glob(&pat[1..], &s[1..]),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::testroot::TempRoot;

    const KEY: &str = "net.ipv4.tcp_congestion_control";

    #[test]
    fn parses_lines_like_sysctl_d() {
        assert_eq!(assignment("net.ipv4.tcp_congestion_control = bbr", KEY).as_deref(), Some("bbr"));
        assert_eq!(assignment("  -net/ipv4/tcp_congestion_control=cubic ", KEY).as_deref(), Some("cubic"));
        assert_eq!(assignment("net.ipv4.tcp_*=reno", KEY).as_deref(), Some("reno"));
        assert_eq!(assignment("# net.ipv4.tcp_congestion_control = bbr", KEY), None);
        assert_eq!(assignment("; net.ipv4.tcp_congestion_control = bbr", KEY), None);
        assert_eq!(assignment("net.ipv4.tcp_congestion_controls = bbr", KEY), None);
        assert_eq!(assignment("net.core.default_qdisc = fq", KEY), None);
    }

    #[test]
    fn later_names_win_and_etc_hides_usr_lib() {
        let root = TempRoot::new();
        root.write("usr/lib/sysctl.d/50-default.conf", "net.ipv4.tcp_congestion_control = reno\n");
        root.write("usr/lib/sysctl.d/60-vendor.conf", "net.ipv4.tcp_congestion_control = cubic\n");
        // Same name in /etc hides the vendor file entirely.
        root.write("etc/sysctl.d/60-vendor.conf", "# masked\n");
        root.write("run/sysctl.d/55-run.conf", "net.ipv4.tcp_congestion_control = htcp\n");
        let cfg = BootConfig::load(root.path());
        let names: Vec<_> = cfg.files().iter().map(|f| f.path.display().to_string()).collect();
        assert_eq!(
            names,
            ["/usr/lib/sysctl.d/50-default.conf", "/run/sysctl.d/55-run.conf", "/etc/sysctl.d/60-vendor.conf"]
        );
        let eff = cfg.effective(KEY).unwrap();
        assert_eq!(
            (eff.value.as_str(), eff.file.to_str().unwrap(), eff.line),
            ("htcp", "/run/sysctl.d/55-run.conf", 1)
        );
    }

    #[test]
    fn sysctl_conf_is_applied_last() {
        let root = TempRoot::new();
        root.write("etc/sysctl.conf", "\nnet.ipv4.tcp_congestion_control = cubic\n");
        root.write("etc/sysctl.d/99-zz-bbrscope.conf", "net.ipv4.tcp_congestion_control = bbr\n");
        let eff = BootConfig::load(root.path()).effective(KEY).unwrap();
        assert_eq!((eff.value.as_str(), eff.file.to_str().unwrap(), eff.line), ("cubic", "/etc/sysctl.conf", 2));
    }

    #[test]
    fn with_dropin_adds_replaces_and_removes() {
        let root = TempRoot::new();
        root.write("usr/lib/sysctl.d/50-a.conf", "net.ipv4.tcp_congestion_control = cubic\n");
        root.write("etc/sysctl.d/99-zz-late.conf", "net.ipv4.tcp_congestion_control = reno\n");
        let cfg = BootConfig::load(root.path());
        let ours = Path::new("/etc/sysctl.d/80-ours.conf");
        let with = cfg.with_dropin(ours, Some("net.ipv4.tcp_congestion_control = bbr\n"));
        // Ours sorts before 99-zz-late.conf, which therefore overrides it.
        assert_eq!(with.effective(KEY).unwrap().file, Path::new("/etc/sysctl.d/99-zz-late.conf"));
        let vals: Vec<_> = with.assignments(KEY).into_iter().map(|a| a.value).collect();
        assert_eq!(vals, ["cubic", "bbr", "reno"]);
        assert_eq!(with.with_dropin(ours, None).assignments(KEY).len(), 2);
    }

    #[test]
    fn missing_directories_mean_the_kernel_default() {
        let root = TempRoot::new();
        assert_eq!(BootConfig::load(root.path()).effective(KEY), None);
    }
}

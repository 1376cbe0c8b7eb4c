//! `cargo xtask dist`: the shipped binary (profile `dist`: release with LTO, stripped; static,
//! with musl's libc linked in, so it runs on any distribution of its architecture however old
//! its userland) and a Debian package around it (binary, man pages, shell completions, systemd
//! units, defaults file) that depends on no other package, so that installing bbrscope needs no
//! Rust toolchain. The package is assembled in a staging directory and built with `dpkg-deb`.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use crate::arch::Arch;

#[derive(Args)]
pub(crate) struct DistArgs {
    /// Where to put the .deb (default: TARGET_DIR/dist)
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The architecture to build for: this machine's, or aarch64 cross-built from x86_64
    /// (Debian's gcc-aarch64-linux-gnu and musl-dev:arm64; the binary runs here under
    /// qemu-aarch64-static to write its pages and completions)
    #[arg(long, value_enum, default_value_t = Arch::host())]
    arch: Arch,
    /// The build's profile: `dist` (release with whole-program optimisation, what ships) or
    /// `release` (the same code without LTO, minutes quicker; the build the kernel matrix
    /// tests, shared with it: the package tests use it)
    #[arg(long, value_enum, default_value_t = Profile::Dist)]
    profile: Profile,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Profile {
    Dist,
    Release,
}

impl Profile {
    fn name(self) -> &'static str {
        match self {
            Profile::Dist => "dist",
            Profile::Release => "release",
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask is inside the workspace").to_path_buf()
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn run_dist(args: DistArgs) -> Result<()> {
    let ws = workspace();
    let target = crate::target_dir(&ws);
    let commit = crate::arch::git_commit(&ws);
    let arch = args.arch;
    // Needs `rustup target add ARCH-unknown-linux-musl` and musl-gcc, or for aarch64 the cross
    // tools (scripts/setup.sh).
    let musl = arch.musl();
    let profile = args.profile.name();
    crate::progress!("dist: building bbrscope (profile {profile}, static: {musl}) at {commit}");
    let (bin, _) = arch.build_static(&ws, profile)?;
    let version_line = run(arch.runner(&bin).arg("--version"))?;
    let version = version_line.split_whitespace().nth(1).context("bbrscope --version printed no version")?.to_string();

    let out = args.out.unwrap_or_else(|| target.join("dist"));
    let stage = target.join(format!("dist-stage-{}", arch.name()));
    let _ = std::fs::remove_dir_all(&stage);
    let gen_dir = stage.join("gen");
    // The pages and completions from the binary itself, so they describe exactly what it parses.
    run(arch.runner(&bin).arg("man").arg(gen_dir.join("man")))?;
    let comp = gen_dir.join("completions");
    std::fs::create_dir_all(&comp)?;
    for (shell, file) in [("bash", "bbrscope.bash"), ("zsh", "_bbrscope"), ("fish", "bbrscope.fish")] {
        std::fs::write(comp.join(file), run(arch.runner(&bin).args(["completions", shell]))?)?;
    }
    let root = stage.join("root");
    let pkg = &ws.join("packaging");
    let put = |from: &Path, to: &str, mode: u32| -> Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let dest = root.join(to);
        std::fs::create_dir_all(dest.parent().unwrap())?;
        std::fs::copy(from, &dest).with_context(|| format!("copying {} to {}", from.display(), dest.display()))?;
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    put(&bin, "usr/bin/bbrscope", 0o755)?;
    // .comment holds only the compilers' version strings.
    run(Command::new(arch.tool("strip"))
        .args(["--strip-unneeded", "--remove-section=.comment"])
        .arg(root.join("usr/bin/bbrscope")))?;
    for page in std::fs::read_dir(gen_dir.join("man"))? {
        let page = page?.path();
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        let dest = format!("usr/share/man/man1/{name}");
        put(&page, &dest, 0o644)?;
        // -n: no name or time stamp inside, so the same input gives the same package.
        run(Command::new("gzip").args(["-9nf"]).arg(root.join(&dest)))?;
    }
    put(&comp.join("bbrscope.bash"), "usr/share/bash-completion/completions/bbrscope", 0o644)?;
    put(&comp.join("_bbrscope"), "usr/share/zsh/vendor-completions/_bbrscope", 0o644)?;
    put(&comp.join("bbrscope.fish"), "usr/share/fish/vendor_completions.d/bbrscope.fish", 0o644)?;
    let units = pkg.join("systemd");
    put(&units.join("bbrscope-exporter.service"), "lib/systemd/system/bbrscope-exporter.service", 0o644)?;
    put(&units.join("bbrscope-cgroup-pin@.service"), "lib/systemd/system/bbrscope-cgroup-pin@.service", 0o644)?;
    put(&units.join("bbrscope-exporter.default"), "etc/default/bbrscope-exporter", 0o644)?;
    for dashboard in ["bbrscope.json", "bbrscope-experiment.json"] {
        put(&pkg.join("grafana").join(dashboard), &format!("usr/share/bbrscope/grafana/{dashboard}"), 0o644)?;
    }
    put(&pkg.join("debian/lintian-overrides"), "usr/share/lintian/overrides/bbrscope", 0o644)?;
    let doc = root.join("usr/share/doc/bbrscope");
    std::fs::create_dir_all(&doc)?;
    std::fs::write(doc.join("copyright"), copyright(&ws)?)?;
    let full_version = format!("{version}+git{}", commit.replace('-', "."));
    let changelog = doc.join("changelog");
    std::fs::write(&changelog, debian_changelog(&ws, &full_version)?)?;
    run(Command::new("gzip").args(["-9nf"]).arg(&changelog))?;
    for f in ["README.md", "docs/export.md", "docs/stream.md"] {
        if ws.join(f).exists() {
            put(
                &ws.join(f),
                &format!("usr/share/doc/bbrscope/{}", Path::new(f).file_name().unwrap().to_string_lossy()),
                0o644,
            )?;
        }
    }

    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    let size_kb = run(Command::new("du").args(["-sk"]).arg(&root))?
        .split_whitespace()
        .next()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(0);
    std::fs::write(
        debian.join("control"),
        format!(
            "Package: bbrscope\nVersion: {full_version}\nArchitecture: {}\nMaintainer: {}\n\
             Installed-Size: {size_kb}\nRecommends: bash-completion\n\
             Section: net\nPriority: optional\nHomepage: https://github.com/bbrscope/bbrscope\n\
             Description: live TCP congestion-control observer and configurator (eBPF)\n \
             See what CUBIC and BBR are doing to every TCP flow, prove which one serves\n \
             your clients better with a randomized experiment on real connections, switch\n \
             algorithms safely per system, namespace, cgroup or route, and export\n \
             per-algorithm metrics to Prometheus.\n",
            arch.debian(),
            maintainer()
        ),
    )?;
    std::fs::write(debian.join("conffiles"), "/etc/default/bbrscope-exporter\n")?;
    // Maintainer scripts, as debhelper's systemd snippets would be: record the exporter's enable
    // state (so that a purge can remove the links `systemctl enable` made), tell a running
    // systemd about the units, restart a running exporter after an upgrade, and on removal stop
    // the exporter and every cgroup pin (a pin's ExecStop is `bbrscope revert`, which needs the
    // binary still there). Then what `bbrscope apply` changed is undone while the binary is still
    // there, unless the admin keeps it (BBRSCOPE_KEEP_CHANGES=yes); a removal that cannot undo
    // it stops, so no change is left without the tool that recorded it. A purge removes pins'
    // enable links and bbrscope's records (/var/lib/bbrscope), except a record of changes still
    // in force; the admin's pin settings in /etc/bbrscope stay. Nothing runs when installing
    // into another root (DPKG_ROOT). `deb-systemd-invoke stop` hands the pin instances' glob to
    // systemctl: their names are the admin's slices, unknown to the package.
    let script = |name: &str, body: &str| -> Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let p = debian.join(name);
        let text = format!("#!/bin/sh\nset -e\n[ -z \"${{DPKG_ROOT:-}}\" ] || exit 0\n{body}exit 0\n");
        std::fs::write(&p, text)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        Ok(())
    };
    const RELOAD: &str = "[ ! -d /run/systemd/system ] || systemctl daemon-reload || true\n";
    const STATE: &str = "/var/lib/bbrscope/state.json";
    script(
        "postinst",
        &format!(
            "if [ \"$1\" = configure ]; then\n  deb-systemd-helper update-state bbrscope-exporter.service || true\nfi\n{RELOAD}\
             if [ \"$1\" = configure ] && [ -n \"${{2:-}}\" ] && [ -d /run/systemd/system ]; then\n  \
             deb-systemd-invoke restart bbrscope-exporter.service || true\nfi\n"
        ),
    )?;
    script(
        "prerm",
        &format!(
            "if [ \"$1\" = remove ]; then\n  \
             if [ -d /run/systemd/system ]; then\n    \
             deb-systemd-invoke stop bbrscope-exporter.service 'bbrscope-cgroup-pin@*.service' || true\n  fi\n  \
             if [ -e {STATE} ]; then\n    \
             if [ \"${{BBRSCOPE_KEEP_CHANGES:-}}\" = yes ]; then\n      \
             echo 'bbrscope: keeping what bbrscope apply changed (BBRSCOPE_KEEP_CHANGES=yes):' >&2\n      \
             bbrscope status >&2 || true\n      \
             echo 'bbrscope: its record stays in /var/lib/bbrscope, also on purge: reinstall bbrscope and run bbrscope revert --all to undo it' >&2\n    \
             elif ! bbrscope revert --all >&2; then\n      \
             echo 'bbrscope: could not undo what bbrscope apply changed (above): fix that and remove again, or remove with BBRSCOPE_KEEP_CHANGES=yes to keep it' >&2\n      \
             exit 1\n    fi\n  fi\nfi\n"
        ),
    )?;
    script(
        "postrm",
        &format!(
            "if [ \"$1\" = purge ]; then\n  deb-systemd-helper purge bbrscope-exporter.service || true\n  \
             rm -f /etc/systemd/system/*.wants/bbrscope-cgroup-pin@*.service\n  \
             if [ -e {STATE} ]; then\n    \
             echo 'bbrscope: /var/lib/bbrscope is kept: it records changes still in force; reinstall bbrscope and run bbrscope revert --all to undo them' >&2\n  \
             else\n    rm -rf /var/lib/bbrscope\n  fi\nfi\n{RELOAD}"
        ),
    )?;
    // md5sums of every file but the conffiles (dpkg keeps theirs itself), as dh_md5sums writes.
    let mut sums = String::new();
    for f in files_below(&root)? {
        let rel = f.strip_prefix(&root)?.to_string_lossy().into_owned();
        if rel.starts_with("DEBIAN/") || rel.starts_with("etc/") {
            continue;
        }
        let out = run(Command::new("md5sum").arg(&f))?;
        sums.push_str(&format!("{}  {rel}\n", out.split_whitespace().next().context("md5sum printed nothing")?));
    }
    std::fs::write(debian.join("md5sums"), sums)?;

    std::fs::create_dir_all(&out)?;
    let deb = out.join(format!("bbrscope_{full_version}_{}.deb", arch.debian()));
    run(Command::new("dpkg-deb").args(["--root-owner-group", "-Zxz", "--build"]).arg(&root).arg(&deb))?;
    println!("{}", deb.display());
    Ok(())
}

/// Who the package names as its maintainer: BBRSCOPE_MAINTAINER ("Name <address>") for a
/// distributor's own builds, else the project's.
fn maintainer() -> String {
    std::env::var("BBRSCOPE_MAINTAINER")
        .unwrap_or_else(|_| "bbrscope developers <bbrscope@users.noreply.github.com>".into())
}

/// debian/copyright in the machine-readable format: the notice from LICENSE-MIT and both
/// licences (Apache-2.0 by reference to Debian's common-licenses, as policy asks).
fn copyright(ws: &Path) -> Result<String> {
    let mit = std::fs::read_to_string(ws.join("LICENSE-MIT")).context("reading LICENSE-MIT")?;
    let notice = mit
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .context("LICENSE-MIT has no Copyright (c) line")?
        .to_string();
    let body: Vec<String> = mit
        .lines()
        .skip_while(|l| !l.starts_with("Permission"))
        .map(|l| if l.is_empty() { " .".to_string() } else { format!(" {l}") })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: bbrscope\n\
         Source: https://github.com/bbrscope/bbrscope\n\nFiles: *\nCopyright: {notice}\nLicense: MIT or Apache-2.0\n\n\
         License: MIT\n{}\n\nLicense: Apache-2.0\n On Debian systems, the full text of the Apache License, Version 2.0\n \
         can be found in the file /usr/share/common-licenses/Apache-2.0.\n",
        body.join("\n")
    ))
}

/// A one-entry Debian changelog for the version built, dated by its commit (so the same commit
/// gives the same package).
fn debian_changelog(ws: &Path, version: &str) -> Result<String> {
    let date = run(Command::new("git").args(["log", "-1", "--format=%aD"]).current_dir(ws))
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "Thu, 01 Jan 1970 00:00:00 +0000".into());
    Ok(format!(
        "bbrscope ({version}) unstable; urgency=medium\n\n  * Built from the bbrscope repository at this version's commit; the\n    \
         project's history is its git log.\n\n -- {}  {date}\n",
        maintainer()
    ))
}

/// Every file below `dir` (not directories), sorted.
fn files_below(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            out.extend(files_below(&e.path())?);
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

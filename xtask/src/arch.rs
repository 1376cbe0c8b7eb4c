//! The architectures bbrscope is built and tested for: this machine's, or aarch64 cross-built
//! from x86_64 (`cargo xtask dist --arch`, `cargo xtask kernels --arch`).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    Aarch64,
}

impl Arch {
    pub(crate) fn host() -> Arch {
        if std::env::consts::ARCH == "aarch64" { Arch::Aarch64 } else { Arch::X86_64 }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The Rust target of its static builds.
    pub(crate) fn musl(self) -> String {
        format!("{}-unknown-linux-musl", self.name())
    }

    /// `cargo build --target {arch}-unknown-linux-musl` in `ws`, with the C compiler set up for
    /// it ([`Arch::build_env`]); the caller adds the profile and what to build.
    pub(crate) fn cargo_build(self, ws: &Path) -> Result<Command> {
        let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        build.args(["build", "--target", &self.musl()]).current_dir(ws);
        self.build_env(&mut build)?;
        Ok(build)
    }

    /// bbrscope built static for this architecture in `ws` under `profile`, its `--version`
    /// naming the commit ([`git_commit`]): the binary's path, and with `profile` `release` also this
    /// xtask's (the kernel matrix's guest driver). `release` is one cargo command whoever asks
    /// (the matrix, `dist --profile release`), so they share one build: building bbrscope
    /// alone could unify the crates' features otherwise, and a different commit variable
    /// rebuilds the crate. `dist` builds bbrscope alone (LTO of the driver would be wasted).
    pub(crate) fn build_static(self, ws: &Path, profile: &str) -> Result<(PathBuf, Option<PathBuf>)> {
        let mut build = self.cargo_build(ws)?;
        build.args(["--profile", profile, "-p", "bbrscope", "--bin", "bbrscope"]);
        let driver = profile == "release";
        if driver {
            build.args(["-p", "xtask", "--bin", "xtask"]);
        }
        let status = build.env("BBRSCOPE_GIT_COMMIT", git_commit(ws)).status().context("running cargo build")?;
        if !status.success() {
            bail!("building for {} (profile {profile}) failed", self.musl());
        }
        let dir = crate::target_dir(ws).join(self.musl()).join(profile);
        Ok((dir.join("bbrscope"), driver.then(|| dir.join("xtask"))))
    }

    /// Debian's name for it, in the package's control file and file name.
    pub(crate) fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    pub(crate) fn cross(self) -> bool {
        self != Arch::host()
    }

    /// A command running a program built for this architecture here.
    pub(crate) fn runner(self, bin: &Path) -> Command {
        if self.cross() {
            let mut c = Command::new(format!("qemu-{}-static", self.name()));
            c.arg(bin);
            c
        } else {
            Command::new(bin)
        }
    }

    /// `tool` (strip, ...) of the binutils for this architecture.
    pub(crate) fn tool(self, tool: &str) -> String {
        if self.cross() { format!("{}-linux-gnu-{tool}", self.name()) } else { tool.to_string() }
    }

    /// The environment of a cargo build for `{arch}-unknown-linux-musl`: the C half of the
    /// allocator (mimalloc) compiled against musl's headers, which cc-rs does not find by
    /// itself. Here Debian's musl-gcc wrapper (package musl-tools) does it; for another
    /// architecture there is no such wrapper, so the cross gcc is pointed at musl-dev's headers
    /// of that architecture (and its own, for stddef.h and the like), and links.
    fn build_env(self, cmd: &mut Command) -> Result<()> {
        let triple = format!("{}_unknown_linux_musl", self.name());
        if !self.cross() {
            cmd.env(format!("CC_{triple}"), "musl-gcc");
            return Ok(());
        }
        let gcc = format!("{}-linux-gnu-gcc", self.name());
        let out =
            Command::new(&gcc).arg("-print-file-name=include").output().with_context(|| format!("running {gcc}"))?;
        if !out.status.success() {
            bail!("{gcc} -print-file-name=include failed: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        let own = String::from_utf8_lossy(&out.stdout);
        let cflags = format!("-nostdinc -isystem /usr/include/{}-linux-musl -isystem {}", self.name(), own.trim());
        cmd.env(format!("CC_{triple}"), &gcc)
            .env(format!("CFLAGS_{triple}"), cflags)
            .env(format!("CARGO_TARGET_{}_LINKER", triple.to_uppercase()), &gcc);
        Ok(())
    }
}

/// The commit a build is made from, with `-dirty` when the tree has uncommitted changes.
pub(crate) fn git_commit(ws: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(ws)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

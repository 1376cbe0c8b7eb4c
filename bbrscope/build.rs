use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

/// Builds the kernel programs (bbrscope-ebpf) for the BPF target with the pinned nightly, whose
/// LLVM must match bpf-linker's (see scripts/setup.sh). The object is embedded in the binary.
fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } =
        cargo_metadata::MetadataCommand::new().no_deps().exec().context("MetadataCommand::exec")?;
    let ebpf = packages
        .into_iter()
        .find(|p| p.name.as_str() == "bbrscope-ebpf")
        .ok_or_else(|| anyhow!("bbrscope-ebpf package not found"))?;
    let root = ebpf.manifest_path.parent().ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    git_commit();
    let toolchain = pinned_toolchain()?;
    aya_build::build_ebpf(
        [aya_build::Package { name: ebpf.name.as_str(), root_dir: root.as_str(), ..Default::default() }],
        Toolchain::Custom(&toolchain),
    )
}

/// The `channel` of the workspace's rust-toolchain.toml: one place pins the compiler for both
/// the host build and the eBPF build.
fn pinned_toolchain() -> anyhow::Result<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../rust-toolchain.toml");
    println!("cargo::rerun-if-changed={path}");
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("channel"))
        .filter_map(|rest| rest.trim().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
        .ok_or_else(|| anyhow!("no channel in {path}"))
}

/// The commit `--version` names: `BBRSCOPE_GIT_COMMIT` when a packager sets it (xtask dist), else
/// git's view of this checkout, else "unknown" (a source tarball).
fn git_commit() {
    println!("cargo::rerun-if-env-changed=BBRSCOPE_GIT_COMMIT");
    let commit = std::env::var("BBRSCOPE_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let dir = env!("CARGO_MANIFEST_DIR");
        for f in ["HEAD", "refs"] {
            println!("cargo::rerun-if-changed={dir}/../.git/{f}");
        }
        let out =
            std::process::Command::new("git").args(["-C", dir, "rev-parse", "--short=12", "HEAD"]).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    println!("cargo::rustc-env=BBRSCOPE_GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}

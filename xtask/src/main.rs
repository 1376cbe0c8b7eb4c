//! Project tasks, run with `cargo xtask <task>` (alias in .cargo/config.toml).
// The workspace's print_stdout lint keeps the product's stdout for data; xtask's stdout is its
// report (bench tables, the .deb's path, the matrix summary) and the line its helper processes
// hand their parent (a port, "ready"), so it prints there by design.
#![allow(clippy::print_stdout, reason = "xtask's reports and its helpers' handshakes are its stdout")]

/// A progress line on stderr. Unlike `eprintln!`, a stderr that cannot be written (closed, a
/// full disk) does not panic: progress is for the person watching, and the task goes on.
macro_rules! progress {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub(crate) use progress;

mod arch;
mod bench;
mod dist;
mod kernels;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "bbrscope's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// bbrscope's cost on the traffic it watches, against bpftrace and `ss` polling, and at
    /// 10,000 flows; writes bench/results/latest.{md,json} (root; about 10 minutes, --quick 2)
    Bench(bench::BenchArgs),
    /// Holds the far ends of the benchmark's idle flows (started by `bench`)
    #[command(hide = true)]
    IdlePeer,
    /// Holds a share of the benchmark's 100,000 idle sockets (started by `bench`)
    #[command(hide = true)]
    HoldSockets { pairs: usize, ip: std::net::Ipv4Addr },
    /// bbrscope on Debian's kernels (5.10, 6.1, 6.12, newest 6.x and 7.x) under QEMU: observer
    /// path, degradations and tests per kernel (root; a few minutes; --kernel VERSION for one,
    /// --arch aarch64 for arm64 guests)
    Kernels(kernels::KernelsArgs),
    /// The test driver inside a kernel-matrix guest (run by its /init)
    #[command(hide = true)]
    KernelGuest,
    /// A whole Debian system (a root directory with systemd) booted under a Debian kernel in
    /// QEMU until it powers off; its /dev/ttyS1 goes to a file (root; for bbrscope/tests/export.rs)
    Boot(kernels::system::BootArgs),
    /// Static release binary, man pages, shell completions and a .deb with the systemd units (TARGET/dist)
    Dist(dist::DistArgs),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Bench(args) => bench::run(args),
        Task::IdlePeer => bench::idle_peer(),
        Task::HoldSockets { pairs, ip } => bench::hold_sockets(pairs, ip),
        Task::Kernels(args) => kernels::run(args),
        Task::KernelGuest => kernels::guest::main(),
        Task::Boot(args) => kernels::system::run(args),
        Task::Dist(args) => dist::run_dist(args),
    }
}

/// Where cargo puts what it builds for this workspace `ws`.
pub(crate) fn target_dir(ws: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| ws.join("target"), PathBuf::from)
}

/// Builds bbrscope (release) into the target directory this xtask runs from (for `bench` and
/// `kernels`, which test the release binary unless given one).
pub fn build_bbrscope(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--package", "bbrscope", "--bin", "bbrscope"])
        .current_dir(root)
        .status()
        .context("running cargo")?;
    if !status.success() {
        bail!("building bbrscope failed");
    }
    let exe = std::env::current_exe()?.with_file_name("bbrscope");
    if !exe.exists() {
        bail!("{} is missing after the build; pass --bbrscope PATH", exe.display());
    }
    Ok(exe)
}

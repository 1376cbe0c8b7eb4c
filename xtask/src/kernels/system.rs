//! `cargo xtask boot`: a whole Debian system under one of the matrix's Debian kernels. The
//! caller's root directory (a debootstrapped Debian with systemd, e.g. made by bbrscope/tests/export.rs)
//! gets the kernel's modules and becomes an ext4 disk image; a small initramfs mounts it and
//! starts its systemd as PID 1. The guest may reboot itself (QEMU restarts it from the same
//! disk); the run ends when it powers off. Its second serial port (/dev/ttyS1) is written to
//! `--serial`, for the caller to read.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;

use super::{Machine, initramfs, qemu};
use crate::arch::Arch;

#[derive(Debug, Args)]
pub(crate) struct BootArgs {
    /// The root file system to boot (a Debian root with systemd); its /lib/modules gets the
    /// kernel's modules, otherwise it is copied, not changed
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// The newest Debian kernel whose version starts with VERSION (6.1: Debian 12's own)
    #[arg(long, value_name = "VERSION", default_value = "6.1")]
    kernel: String,
    /// Where apt lists, packages and extracted kernels are kept between runs (shared with
    /// `cargo xtask kernels`)
    #[arg(long, value_name = "DIR", default_value = "/var/cache/bbrscope-kernels")]
    cache: PathBuf,
    /// Where the guest's /dev/ttyS1 is written; its console goes next to it (FILE.console)
    #[arg(long, value_name = "FILE")]
    serial: PathBuf,
    /// Seconds the guest may run (all its boots) before it counts as hung
    #[arg(long, value_name = "S", default_value_t = 900)]
    timeout: u64,
}

pub(crate) fn run(args: BootArgs) -> Result<()> {
    ensure!(
        args.root.join("lib/systemd/systemd").exists(),
        "{} has no lib/systemd/systemd: not a Debian root with systemd",
        args.root.display()
    );
    let started = Instant::now();
    let kernel = super::prepare_kernel(&args.cache, &args.kernel)?;
    // The kernel's modules where the system's kmod finds them, with its own index (depmod).
    let moddir = args.root.join("lib/modules").join(&kernel.release);
    fs::create_dir_all(&moddir)?;
    copy_tree(&kernel.modules(), &moddir)?;
    let status = Command::new("chroot").arg(&args.root).args(["depmod", "-a", &kernel.release]).status()?;
    ensure!(status.success(), "depmod in {} failed (is kmod installed there?)", args.root.display());

    // Per process: two test runs (two clones) may boot at once.
    let work = args.cache.join("runs").join(format!("boot-{}", std::process::id()));
    fs::create_dir_all(&work)?;
    let image = work.join("root.ext4");
    // Room to work in beyond what the root holds (the image is sparse).
    let used_mb = du_mb(&args.root)?;
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-L", "root", "-d"])
        .arg(&args.root)
        .arg(&image)
        .arg(format!("{}M", used_mb + 1024))
        .output()
        .context("running mkfs.ext4 (e2fsprogs)")?;
    ensure!(out.status.success(), "mkfs.ext4 -d {}: {}", args.root.display(), String::from_utf8_lossy(&out.stderr));
    let initrd = work.join("initrd.cpio");
    initramfs::build_boot(&kernel, &initrd)?;
    let _ = fs::remove_file(&args.serial);
    let console = PathBuf::from(format!("{}.console", args.serial.display()));
    crate::progress!(
        "boot: Linux {} ({}) with {} ({} MB) under QEMU; console in {}",
        kernel.version,
        kernel.release,
        args.root.display(),
        used_mb,
        console.display()
    );
    let drive = format!("file={},format=raw,if=virtio,cache=unsafe", image.display());
    let machine = Machine::of(Arch::host());
    let error = qemu(
        &machine,
        &kernel,
        &initrd,
        &format!("console={} panic=-1 loglevel=4", machine.console),
        &["-m", "1536", "-drive", &drive],
        &console,
        &args.serial,
        Duration::from_secs(args.timeout),
    )?;
    crate::progress!("boot: guest ended after {:.0} s", started.elapsed().as_secs_f64());
    // The disk is thrown away (it is as large as the root), and the initramfs with it.
    fs::remove_dir_all(&work)?;
    if let Some(e) = error {
        bail!("{e}");
    }
    Ok(())
}

fn du_mb(dir: &Path) -> Result<u64> {
    let out = Command::new("du").args(["-sm"]).arg(dir).output()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("du -sm {}", dir.display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for e in fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            fs::create_dir_all(&dest)?;
            copy_tree(&e.path(), &dest)?;
        } else {
            fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

//! The guest's initramfs: a newc cpio written directly (no cpio tool needed), uncompressed so the
//! kernel under TCG spends no time inflating it.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use super::apt::Kernel;

/// PID 1 of the guest.
const INIT: &str = include_str!("../../../bbrscope/tests/guest/init.sh");
/// PID 1 of the initramfs that mounts a whole system's root and starts its systemd.
const BOOT_INIT: &str = include_str!("../../../bbrscope/tests/guest/boot.sh");

/// The files the guest runs, and where they go in the guest. iproute2's `tc` and `ss` are the
/// real ones: busybox's `tc` applet cannot set up netem.
pub(super) struct Payload {
    pub bbrscope: PathBuf,
    pub driver: PathBuf,
    /// `--break host-btf`: this BTF goes in as the guest's [`super::guest::BREAK_BTF`].
    pub break_btf: Option<PathBuf>,
    /// Where busybox, iproute2 and their libraries come from for a guest of another
    /// architecture (a root of Debian packages, `Apt::userland`); none: this machine's own.
    pub userland: Option<PathBuf>,
}

pub(super) fn build(kernel: &Kernel, payload: &Payload, out: &Path) -> Result<()> {
    let mut c = Cpio::default();
    for d in [
        "bin",
        "sbin",
        "usr",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "etc",
        "etc/sysctl.d",
        "var",
        "var/lib",
        "boot",
        "lib",
        "lib/modules",
    ] {
        c.dir(d);
    }
    c.node("dev/console", 5, 1);
    c.file("init", INIT.as_bytes(), 0o755);
    c.file("etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644);
    c.file("etc/group", b"root:x:0:\n", 0o644);
    let tool = |name: &str| match &payload.userland {
        Some(root) => find_in(root, name),
        None => which(name),
    };
    c.host_file("bin/busybox", &tool("busybox")?, 0o755)?;
    c.symlink("bin/sh", "busybox");
    // The kernel's usermode helper runs /sbin/modprobe when a module is requested.
    c.symlink("sbin/modprobe", "../bin/busybox");
    let tools = [
        ("usr/bin/bbrscope", payload.bbrscope.clone()),
        ("usr/bin/xtask", payload.driver.clone()),
        ("usr/sbin/tc", tool("tc")?),
        ("usr/sbin/ss", tool("ss")?),
        ("usr/sbin/ip", tool("ip")?),
    ];
    for (dst, src) in &tools {
        c.host_file(dst, src, 0o755)?;
    }
    match &payload.userland {
        Some(root) => add_libraries(&mut c, root)?,
        None => {
            let mut libs = BTreeSet::new();
            for (_, src) in &tools {
                libs.extend(ldd(src)?);
            }
            for lib in &libs {
                let rel = lib.to_string_lossy().trim_start_matches('/').to_string();
                c.parents(&rel);
                c.host_file(&rel, lib, 0o755)?;
            }
        }
    }
    let rel = &kernel.release;
    let moddir = format!("lib/modules/{rel}");
    c.dir(&moddir);
    add_tree(&mut c, &kernel.modules(), &moddir)?;
    if let Some(btf) = &payload.break_btf {
        c.host_file(super::guest::BREAK_BTF.trim_start_matches('/'), btf, 0o644)?;
    }
    if kernel.config().exists() {
        c.host_file(&format!("boot/config-{rel}"), &kernel.config(), 0o644)?;
    }
    fs::write(out, c.finish()).with_context(|| format!("writing {}", out.display()))
}

/// The initramfs of a whole Debian system (`cargo xtask boot`): busybox, the modules its root
/// file system needs (listed in the kernel's `boot` file, dependencies first) and an init that
/// mounts /dev/vda and switches to it.
pub(super) fn build_boot(kernel: &Kernel, out: &Path) -> Result<()> {
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "newroot", "lib", "lib/modules"] {
        c.dir(d);
    }
    c.node("dev/console", 5, 1);
    c.file("init", BOOT_INIT.as_bytes(), 0o755);
    c.host_file("bin/busybox", &which("busybox")?, 0o755)?;
    c.symlink("bin/sh", "busybox");
    let moddir = format!("lib/modules/{}", kernel.release);
    c.dir(&moddir);
    let list = fs::read_to_string(kernel.modules().join("boot")).context("the kernel's boot module list")?;
    c.file(&format!("{moddir}/boot"), list.as_bytes(), 0o644);
    for m in list.lines().filter(|l| !l.is_empty()) {
        let rel = format!("{moddir}/{m}");
        c.parents(&rel);
        c.host_file(&rel, &kernel.modules().join(m), 0o644)?;
    }
    fs::write(out, c.finish()).with_context(|| format!("writing {}", out.display()))
}

fn add_tree(c: &mut Cpio, dir: &Path, at: &str) -> Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = format!("{at}/{}", e.file_name().to_string_lossy());
        if e.file_type()?.is_dir() {
            c.dir(&name);
            add_tree(c, &e.path(), &name)?;
        } else {
            c.host_file(&name, &e.path(), 0o644)?;
        }
    }
    Ok(())
}

/// `tool` in a root of extracted packages (bookworm keeps `ip` and `ss` in /bin, `tc` in /sbin).
fn find_in(root: &Path, tool: &str) -> Result<PathBuf> {
    ["bin", "sbin", "usr/bin", "usr/sbin"]
        .iter()
        .map(|d| root.join(d).join(tool))
        .find(|p| p.is_file())
        .with_context(|| format!("no {tool} in {}", root.display()))
}

/// Every shared library (and the dynamic loader) of a root of extracted packages, at its own
/// path: the files and links directly in its `lib/<triplet>` and `usr/lib/<triplet>`, and the
/// loader's link in /lib. Links stay links: the loader's is absolute, and would resolve into
/// this machine's own /lib if followed here.
fn add_libraries(c: &mut Cpio, root: &Path) -> Result<()> {
    for dir in ["lib", "usr/lib"] {
        for triplet in
            fs::read_dir(root.join(dir))?.flatten().filter(|e| e.file_name().to_string_lossy().ends_with("-linux-gnu"))
        {
            let rel_dir = format!("{dir}/{}", triplet.file_name().to_string_lossy());
            for e in fs::read_dir(triplet.path())?.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains(".so") && !e.file_type()?.is_dir() {
                    c.parents(&format!("{rel_dir}/{name}"));
                    c.copy_entry(&format!("{rel_dir}/{name}"), &e.path())?;
                }
            }
        }
    }
    for e in fs::read_dir(root.join("lib"))?.flatten() {
        if e.file_name().to_string_lossy().starts_with("ld-linux") {
            c.copy_entry(&format!("lib/{}", e.file_name().to_string_lossy()), &e.path())?;
        }
    }
    Ok(())
}

fn which(tool: &str) -> Result<PathBuf> {
    for d in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let p = Path::new(d).join(tool);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("{tool} is not installed (scripts/setup.sh installs it)")
}

/// The shared libraries (and the dynamic loader) a binary needs, by path.
fn ldd(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(bin).output().context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("statically linked") || text.contains("not a dynamic executable") {
        return Ok(vec![]);
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(p));
        }
    }
    if libs.is_empty() {
        bail!("ldd {} listed no libraries: {text}", bin.display());
    }
    Ok(libs)
}

/// A newc ("070701") archive under construction.
#[derive(Default)]
struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let fields = [self.ino, mode, 0, 0, 1, 0, data.len() as u32, 0, 0, rdev.0, rdev.1, name.len() as u32 + 1, 0];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_string()) {
            self.entry(name, 0o040755, &[], (0, 0));
        }
    }

    /// Every missing parent directory of `rel`.
    fn parents(&mut self, rel: &str) {
        let parts: Vec<&str> = rel.split('/').collect();
        for i in 1..parts.len() {
            self.dir(&parts[..i].join("/"));
        }
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100000 | perm, data, (0, 0));
    }

    /// A host file's contents (symlinks followed) at `name`.
    fn host_file(&mut self, name: &str, src: &Path, perm: u32) -> Result<()> {
        let data = fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        self.file(name, &data, perm);
        Ok(())
    }

    /// `src` at `name` as it is: a link as the same link, a file with its contents.
    fn copy_entry(&mut self, name: &str, src: &Path) -> Result<()> {
        if fs::symlink_metadata(src)?.file_type().is_symlink() {
            self.symlink(name, &fs::read_link(src)?.to_string_lossy());
            Ok(())
        } else {
            self.host_file(name, src, 0o755)
        }
    }

    fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, target.as_bytes(), (0, 0));
    }

    fn node(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020600, &[], (major, minor));
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.buf
    }
}

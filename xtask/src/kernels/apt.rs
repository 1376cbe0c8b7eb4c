//! Debian kernels through apt with a private configuration: the system's /etc/apt is never read
//! for sources nor written, and every list, archive and extracted file lives under the cache.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, Result, bail};

use crate::arch::Arch;

/// Suites of the Debian archive that serve kernels worth booting. Buster is archived (404).
const SOURCES: &[(&str, &str)] = &[
    ("debian", "bullseye"),
    ("debian-security", "bullseye-security"),
    ("debian", "bookworm"),
    ("debian-security", "bookworm-security"),
    ("debian", "bookworm-backports"),
    ("debian", "trixie"),
    ("debian", "trixie-backports"),
    ("debian", "sid"),
    ("debian", "experimental"),
];

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Lists older than this are fetched again; within it a rerun needs no network for lists.
const LISTS_MAX_AGE: Duration = Duration::from_hours(12);

/// The modules the guest needs: netem and fq for the path, bbr to observe, htcp for `apply` to
/// load (it must not be preloaded: the test is that bbrscope loads it).
/// tcp_diag (with inet_diag) serves `ss -i` and bbrscope's socket listing; a full system
/// autoloads it through modprobe aliases, which the guest does not ship.
/// veth for the route test's path and the netem side of the emulator cross-check, tun for the
/// demo's emulator.
pub(super) const PRELOAD: &[&str] = &["tcp_bbr", "sch_netem", "sch_fq", "tcp_diag", "veth", "tun"];
/// htcp for the system-wide `apply`, vegas for `apply --netns --allow`: both must be loaded by
/// bbrscope, so neither is preloaded.
pub(super) const ON_DEMAND: &[&str] = &["tcp_htcp", "tcp_vegas"];
/// What a whole Debian system (`cargo xtask boot`) needs to mount its root file system, an ext4
/// image on a virtio disk: loaded by its initramfs, in this order (dependencies first). Where the
/// kernel has one built in (virtio_pci from 6.12) or lacks it (crc32c_generic from 6.14), it is
/// skipped.
pub(super) const BOOT: &[&str] = &["crc32c_generic", "virtio_pci", "virtio_blk", "ext4"];

/// The userland of a guest for another architecture than this machine's, whose own tools the
/// guest cannot run: busybox and iproute2 (`ip`, `ss`, `tc` with netem) from Debian 12 with the
/// libraries they need, as apt resolves them.
const USERLAND: &[&str] = &["busybox-static", "iproute2"];
const USERLAND_SUITE: &str = "bookworm";

/// The Debian archive for one architecture (amd64, arm64).
pub(super) struct Apt {
    root: PathBuf,
    arch: &'static str,
}

/// One installable kernel image package.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub package: String,
    pub version: String,
    /// Upstream version numbers (6.12.117 -> [6, 12, 117]), for choosing the newest.
    pub upstream: Vec<u32>,
    /// Packages the image needs for its kernel and modules (from 6.19 the image is a meta-package).
    pub parts: Vec<String>,
}

impl Candidate {
    pub(super) fn upstream_str(&self) -> String {
        self.upstream.iter().map(u32::to_string).collect::<Vec<_>>().join(".")
    }
}

/// A kernel extracted into the cache, ready to boot.
#[derive(Debug, Clone)]
pub(super) struct Kernel {
    pub release: String,
    pub version: String,
    pub dir: PathBuf,
}

impl Kernel {
    pub(super) fn vmlinuz(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }
    /// Everything under it goes to /lib/modules/<release>/ in the guest.
    pub(super) fn modules(&self) -> PathBuf {
        self.dir.join("modules")
    }
    pub(super) fn config(&self) -> PathBuf {
        self.dir.join("config")
    }
}

impl Apt {
    pub(super) fn new(cache: &Path, arch: Arch) -> Result<Apt> {
        // amd64 keeps the directory it had before there were two.
        let root = match arch.debian() {
            "amd64" => cache.join("apt"),
            other => cache.join(format!("apt-{other}")),
        };
        for d in ["lists/partial", "archives/partial", "etc"] {
            fs::create_dir_all(root.join(d))?;
        }
        let list: String = SOURCES
            .iter()
            .map(|(repo, suite)| format!("deb [signed-by={KEYRING}] http://deb.debian.org/{repo} {suite} main\n"))
            .collect();
        fs::write(root.join("etc/sources.list"), list)?;
        // An empty dpkg status (not /dev/null, whose changing mtime would invalidate apt's cache).
        if !root.join("status").exists() {
            fs::write(root.join("status"), "")?;
        }
        Ok(Apt { root, arch: arch.debian() })
    }

    /// Options that point apt at the private tree only. An empty `Dir::State::status` keeps the
    /// host's installed packages out of dependency decisions; NoLocking because nothing here
    /// touches the system's lock-protected state.
    fn opts(&self) -> Vec<String> {
        let r = self.root.display();
        [
            format!("Dir::Etc::SourceList={r}/etc/sources.list"),
            "Dir::Etc::SourceParts=/nonexistent".into(),
            format!("Dir::State::Lists={r}/lists"),
            format!("Dir::Cache={r}"),
            format!("Dir::Cache::Archives={r}/archives"),
            // Named explicitly: images such as Debian's docker ones set them to "" (no cache),
            // which makes every apt-cache call re-parse 60 MB of lists (~10 s).
            format!("Dir::Cache::pkgcache={r}/pkgcache.bin"),
            format!("Dir::Cache::srcpkgcache={r}/srcpkgcache.bin"),
            format!("Dir::State::status={r}/status"),
            "Acquire::Languages=none".into(),
            // AppStream metadata (enabled by the host's apt.conf.d) is a third of the download.
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false".into(),
            format!("APT::Architecture={}", self.arch),
            // Alone: not also the host's foreign architectures (dpkg --print-foreign-architectures).
            format!("APT::Architectures={}", self.arch),
            "Debug::NoLocking=1".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        c.args(self.opts());
        c
    }

    pub(super) fn update(&self, force: bool) -> Result<()> {
        let stamp = self.root.join("lists/.updated");
        let fresh = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < LISTS_MAX_AGE);
        if fresh && !force {
            return Ok(());
        }
        let out = self.cmd("apt-get").args(["-q", "update"]).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            bail!("apt-get update (private configuration) failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        fs::write(stamp, "")?;
        Ok(())
    }

    /// Every generic kernel image of the architecture apt can install from the private sources.
    pub(super) fn candidates(&self) -> Result<Vec<Candidate>> {
        let out = self.cmd("apt-cache").args(["pkgnames", "linux-image-"]).output()?;
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|n| is_generic_image(n, self.arch))
            .map(str::to_string)
            .collect();
        if names.is_empty() {
            bail!("apt knows no linux-image-*-{} package: did the private apt-get update fail?", self.arch);
        }
        let out = self.cmd("apt-cache").args(["show", "--no-all-versions"]).args(&names).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut found = Vec::new();
        for rec in text.split("\n\n") {
            let field = |name: &str| {
                rec.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')).map(str::trim))
            };
            let (Some(package), Some(version)) = (field("Package"), field("Version")) else { continue };
            let upstream = upstream_numbers(version);
            if upstream.len() < 2 {
                continue;
            }
            let size: u64 = field("Installed-Size").and_then(|s| s.parse().ok()).unwrap_or(0);
            let parts: Vec<String> = field("Depends")
                .unwrap_or("")
                .split(',')
                .filter_map(|d| d.split_whitespace().next())
                // linux-base-* holds the configuration and modules.builtin (optional: below).
                .filter(|d| ["linux-binary-", "linux-modules-", "linux-base-"].iter().any(|p| d.starts_with(p)))
                .map(str::to_string)
                .collect();
            // A versionless meta-package (linux-image-6.1-amd64) depends on another image: skip it.
            if size < 1000 && parts.is_empty() {
                continue;
            }
            found.push(Candidate { package: package.into(), version: version.into(), upstream, parts });
        }
        // A split image whose parts the archive no longer carries (seen: 6.19.14 in
        // trixie-backports, whose linux-modules-* is gone) cannot boot: leave it out.
        let parts: BTreeSet<&String> = found.iter().flat_map(|c| &c.parts).collect();
        if !parts.is_empty() {
            let out = self.cmd("apt-cache").args(["show", "--no-all-versions"]).args(&parts).output()?;
            let have: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.strip_prefix("Package:").map(|p| p.trim().to_string()))
                .collect();
            // The linux-base part (configuration, modules.builtin) only helps: an image whose
            // archive lacks it (seen: 6.18.15 in trixie-backports, not split) boots without.
            for c in &mut found {
                c.parts.retain(|p| !p.starts_with("linux-base-") || have.contains(p));
            }
            found.retain(|c| c.parts.iter().all(|p| have.contains(p)));
        }
        Ok(found)
    }

    /// Downloads the image (and its parts) and extracts vmlinuz, the kernel configuration and
    /// the modules the guest needs ([`PRELOAD`] and `extra` loaded at boot), decompressed, with a
    /// modules.dep for just those.
    pub(super) fn prepare(&self, cache: &Path, c: &Candidate, extra: &[&str]) -> Result<Kernel> {
        let dir = cache.join("kernels").join(format!("{}_{}", c.package, c.version));
        // The marker holds the release and the module set: a changed set re-extracts.
        let ready = dir.join("release");
        // "+base": extracted since split kernels' linux-base part is fetched too (their config).
        let modset =
            PRELOAD.iter().chain(extra).chain(ON_DEMAND).chain(BOOT).copied().collect::<Vec<_>>().join(" ") + " +base";
        if let Some((release, set)) = fs::read_to_string(&ready).ok().as_deref().and_then(|s| s.split_once('\n'))
            && set.trim() == modset
        {
            return Ok(Kernel { release: release.trim().into(), version: c.upstream_str(), dir });
        }
        let mut debs = Vec::new();
        for pkg in std::iter::once(&c.package).chain(&c.parts) {
            debs.push(self.download(pkg, &c.version)?);
        }
        let _ = fs::remove_dir_all(&dir);
        let raw = dir.join("raw");
        fs::create_dir_all(&raw)?;
        // Debian's packages carry no modules.dep (depmod runs at install), so dependencies come
        // from each module's own `depends=` (modinfo), fetched name by name until closed.
        let mut pats: Vec<String> = ["*vmlinuz*", "*/boot/config-*", "*/modules/*/config", "*/modules.builtin"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let mut want: Vec<String> =
            PRELOAD.iter().chain(extra).chain(ON_DEMAND).chain(BOOT).map(std::string::ToString::to_string).collect();
        let mut skipped = BTreeSet::new();
        let mut found: BTreeMap<String, (PathBuf, Vec<String>)> = BTreeMap::new();
        let mods = dir.join("modules");
        let mut release = None;
        for _round in 0..8 {
            let missing: Vec<String> =
                want.iter().filter(|m| !found.contains_key(*m) && !skipped.contains(*m)).cloned().collect();
            if missing.is_empty() {
                break;
            }
            pats.extend(missing.iter().map(|m| format!("*/{m}.ko*")));
            let refs: Vec<&str> = pats.iter().map(String::as_str).collect();
            for deb in &debs {
                untar(deb, &raw, &refs)?;
            }
            pats.clear();
            let built_in = match find_file(&raw, |p| p.file_name().is_some_and(|n| n == "modules.builtin"))? {
                Some(f) => fs::read_to_string(f)?,
                None => String::new(),
            };
            for m in &missing {
                let file = find_file(&raw, |p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.split(".ko").next() == Some(m.as_str()) && n.contains(".ko"))
                })?;
                let Some(src) = file else {
                    // Built in, or a boot module this kernel does without (crc32c_generic: from
                    // 6.14 crc32c is a library ext4 links to, not a crypto driver it asks for).
                    if built_in.lines().any(|l| l.ends_with(&format!("/{m}.ko"))) || BOOT.contains(&m.as_str()) {
                        skipped.insert(m.clone());
                        continue;
                    }
                    bail!("module {m} is not in {}", c.package);
                };
                // .../lib/modules/<release>/<rel path>
                let s = src.to_string_lossy().to_string();
                let after = s.split("/lib/modules/").nth(1).context("module outside lib/modules")?;
                let (rel_name, rel_path) = after.split_once('/').context("module path")?;
                release.get_or_insert_with(|| rel_name.to_string());
                let plain =
                    rel_path.trim_end_matches(".xz").trim_end_matches(".zst").trim_end_matches(".gz").to_string();
                let dst = mods.join(&plain);
                fs::create_dir_all(dst.parent().context("module path")?)?;
                decompress(&src, &dst).with_context(|| format!("decompressing {}", src.display()))?;
                let deps = modinfo_depends(&dst)?;
                want.extend(deps.iter().cloned());
                found.insert(m.clone(), (PathBuf::from(plain), deps));
            }
        }
        let release = release.context("no modules found")?;
        let mut dep_out = String::new();
        for (path, deps) in found.values() {
            let d: Vec<String> =
                deps.iter().filter_map(|n| found.get(n)).map(|(p, _)| p.display().to_string()).collect();
            dep_out.push_str(&format!("{}: {}\n", path.display(), d.join(" ")));
        }
        fs::write(mods.join("modules.dep"), dep_out)?;
        if let Some(b) = find_file(&raw, |p| p.file_name().is_some_and(|n| n == "modules.builtin"))? {
            fs::copy(b, mods.join("modules.builtin"))?;
        }
        // insmod order: dependencies first.
        let mut order = Vec::new();
        for m in PRELOAD.iter().chain(extra) {
            add_mod(m, &found, &mut order);
        }
        fs::write(mods.join("preload"), order.join("\n") + "\n")?;
        let mut order = Vec::new();
        for m in BOOT {
            add_mod(m, &found, &mut order);
        }
        fs::write(mods.join("boot"), order.join("\n") + "\n")?;
        let vmlinuz = find_file(&raw, |p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            n.starts_with("vmlinuz")
        })?
        .context("no vmlinuz in the packages")?;
        fs::rename(vmlinuz, dir.join("vmlinuz"))?;
        // /boot/config-<release>, or <release>/config in the modules' directory (split kernels).
        let config = |p: &Path| {
            let s = p.to_string_lossy();
            s.contains("/boot/config-") || (s.contains("/modules/") && s.ends_with("/config"))
        };
        if let Some(cfg) = find_file(&raw, config)? {
            fs::rename(cfg, dir.join("config"))?;
        }
        fs::remove_dir_all(&raw)?;
        fs::write(&ready, format!("{release}\n{modset}\n"))?;
        Ok(Kernel { release, version: c.upstream_str(), dir })
    }

    /// [`USERLAND`] and everything it depends on, from [`USERLAND_SUITE`], extracted into one
    /// root under the cache (once; kept between runs like the kernels).
    pub(super) fn userland(&self, cache: &Path) -> Result<PathBuf> {
        let dir = cache.join(format!("userland-{}", self.arch));
        let root = dir.join("root");
        let ready = dir.join("ready");
        let want = format!("{USERLAND_SUITE}: {}", USERLAND.join(" "));
        if fs::read_to_string(&ready).is_ok_and(|s| s.trim() == want) {
            return Ok(root);
        }
        let _ = fs::remove_dir_all(&dir);
        let archives = dir.join("archives");
        fs::create_dir_all(archives.join("partial"))?;
        // The private status is empty, so apt resolves the whole closure (libc included).
        let out = self
            .cmd("apt-get")
            .args(["-q", "-y", "--no-install-recommends", "--download-only", "install"])
            .args(["-o", &format!("Dir::Cache::Archives={}", archives.display())])
            .args(["-o", &format!("APT::Default-Release={USERLAND_SUITE}")])
            .args(USERLAND)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            bail!(
                "apt-get --download-only install {}: {}",
                USERLAND.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        fs::create_dir_all(&root)?;
        for deb in
            fs::read_dir(&archives)?.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "deb"))
        {
            let st = Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root).status()?;
            if !st.success() {
                bail!("dpkg-deb -x {} failed", deb.display());
            }
        }
        fs::write(&ready, want)?;
        Ok(root)
    }

    fn download(&self, pkg: &str, version: &str) -> Result<PathBuf> {
        let archives = self.root.join("archives");
        // apt names files with the version's ':' escaped; kernels have no epoch.
        let file = archives.join(format!("{pkg}_{version}_{}.deb", self.arch));
        if file.exists() {
            return Ok(file);
        }
        let before: Vec<PathBuf> = debs_of(&archives, pkg);
        let mut out = self
            .cmd("apt-get")
            .args(["-q", "download", &format!("{pkg}={version}")])
            .current_dir(&archives)
            .stdin(Stdio::null())
            .output()?;
        if !out.status.success() {
            // The parts of a split kernel need not share the signed image's version (seen on
            // 6.19.14 in trixie-backports): then the part's own candidate is the match.
            out = self
                .cmd("apt-get")
                .args(["-q", "download", pkg])
                .current_dir(&archives)
                .stdin(Stdio::null())
                .output()?;
        }
        if !out.status.success() {
            // Its errors only: a download as root also warns that it ran unsandboxed.
            let err = String::from_utf8_lossy(&out.stderr);
            let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("E:")).collect();
            let why = if errors.is_empty() { err.trim().to_string() } else { errors.join(" / ") };
            return Err(NotServed(format!("apt-get download {pkg}: {why}")).into());
        }
        let after = debs_of(&archives, pkg);
        if file.exists() {
            return Ok(file);
        }
        after
            .into_iter()
            .find(|p| !before.contains(p))
            .or_else(|| debs_of(&archives, pkg).pop())
            .with_context(|| format!("apt-get download {pkg} left no .deb in {}", archives.display()))
    }
}

/// A package the archive lists but did not hand over (a mirror's 404): the one failure after
/// which an older build of the same kernel is worth trying.
#[derive(Debug)]
pub(super) struct NotServed(String);

impl std::fmt::Display for NotServed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotServed {}

/// The downloaded .deb files of package `pkg`.
fn debs_of(dir: &Path, pkg: &str) -> Vec<PathBuf> {
    let prefix = format!("{pkg}_");
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .collect();
    v.sort();
    v
}

/// `linux-image-<abi>-<arch>`, not the cloud/rt flavours, unsigned twins or debug packages.
fn is_generic_image(name: &str, arch: &str) -> bool {
    let Some(abi) = name.strip_prefix("linux-image-").and_then(|n| n.strip_suffix(&format!("-{arch}"))) else {
        return false;
    };
    abi.starts_with(|c: char| c.is_ascii_digit()) && !abi.ends_with("-cloud") && !abi.ends_with("-rt")
}

/// "6.12.117-1~bpo12+1" -> [6, 12, 117]; "7.3~rc7-1~exp1" -> [7, 3] (a release candidate sorts
/// below the release's point versions, which is what "newest" should mean).
fn upstream_numbers(version: &str) -> Vec<u32> {
    let up = version.split(['-', '~', '+']).next().unwrap_or("");
    up.split('.').map_while(|p| p.parse().ok()).collect()
}

/// The candidates whose upstream version starts with `selector` ("5.10", "6", "7.2"), newest
/// first.
pub(super) fn ranked<'a>(cands: &'a [Candidate], selector: &str) -> Vec<&'a Candidate> {
    let want: Vec<u32> = selector.split('.').filter_map(|p| p.parse().ok()).collect();
    let mut v: Vec<&Candidate> = cands.iter().filter(|c| c.upstream.starts_with(&want)).collect();
    v.sort_by_key(|c| std::cmp::Reverse((c.upstream.clone(), natural(&c.package))));
    v
}

/// The numbers in a package name, for ordering ABI bumps (6.1.0-55 < 6.1.0-56) of one version.
fn natural(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse().ok()).collect()
}

fn untar(deb: &Path, into: &Path, patterns: &[&str]) -> Result<()> {
    let mut dpkg = Command::new("dpkg-deb").arg("--fsys-tarfile").arg(deb).stdout(Stdio::piped()).spawn()?;
    let status = Command::new("tar")
        .args(["-x", "--wildcards", "-C"])
        .arg(into)
        .args(patterns)
        .stdin(dpkg.stdout.take().context("dpkg-deb stdout")?)
        .stderr(Stdio::null())
        .status()?;
    dpkg.wait()?;
    // tar exits 2 when a pattern matches nothing in this package, which is expected for the
    // parts of a split kernel; missing essentials are caught after extraction.
    let _ = status;
    Ok(())
}

fn find_file(dir: &Path, pred: impl Fn(&Path) -> bool + Copy) -> Result<Option<PathBuf>> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            if let Some(f) = find_file(&p, pred)? {
                return Ok(Some(f));
            }
        } else if ft.is_file() && pred(&p) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// Appends the module file of `name` to `order`, its dependencies first.
fn add_mod(name: &str, found: &BTreeMap<String, (PathBuf, Vec<String>)>, order: &mut Vec<String>) {
    let Some((path, deps)) = found.get(name) else { return };
    let p = path.display().to_string();
    if order.contains(&p) {
        return;
    }
    for d in deps {
        add_mod(d, found, order);
    }
    order.push(p);
}

/// A module's `depends=` list from its .modinfo section (NUL-separated key=value strings; the
/// key occurs once). Read from the bytes so the host needs no kmod.
fn modinfo_depends(ko: &Path) -> Result<Vec<String>> {
    let data = fs::read(ko)?;
    let key = b"\0depends=";
    let Some(at) = data.windows(key.len()).position(|w| w == key) else { return Ok(vec![]) };
    let rest = &data[at + key.len()..];
    let value = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
    Ok(String::from_utf8_lossy(value).split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
}

fn decompress(src: &Path, dst: &Path) -> Result<()> {
    let name = src.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else if name.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => {
            fs::copy(src, dst)?;
        }
        Some(t) => {
            let out = Command::new(t).arg("-dc").arg(src).output().with_context(|| format!("running {t}"))?;
            if !out.status.success() {
                bail!("{t} -dc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
            }
            fs::write(dst, out.stdout)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_selection() {
        assert_eq!(upstream_numbers("6.12.117-1~bpo12+1"), [6, 12, 117]);
        assert_eq!(upstream_numbers("7.3~rc7-1~exp1"), [7, 3]);
        assert_eq!(upstream_numbers("5.10.262-1"), [5, 10, 262]);
        assert!(is_generic_image("linux-image-6.1.0-56-amd64", "amd64"));
        assert!(!is_generic_image("linux-image-6.1.0-56-amd64", "arm64"));
        assert!(is_generic_image("linux-image-7.3.4+deb13-arm64", "arm64"));
        assert!(!is_generic_image("linux-image-6.1.0-56-cloud-amd64", "amd64"));
        assert!(!is_generic_image("linux-image-6.1.0-56-amd64-unsigned", "amd64"));
        assert!(!is_generic_image("linux-image-amd64", "amd64"));
        let c = |v: &str| Candidate {
            package: format!("p{v}"),
            version: v.into(),
            upstream: upstream_numbers(v),
            parts: vec![],
        };
        let all = [c("6.1.192-1"), c("6.12.117-1"), c("6.19.14-1"), c("7.3~rc7-1"), c("7.3.4-1")];
        let newest = |s: &str| ranked(&all, s).first().map(|c| c.version.clone());
        assert_eq!(newest("6.1").unwrap(), "6.1.192-1");
        assert_eq!(newest("6").unwrap(), "6.19.14-1");
        assert_eq!(newest("7").unwrap(), "7.3.4-1");
        assert!(newest("5.10").is_none());
        let order: Vec<&str> = ranked(&all, "7").iter().map(|c| c.version.as_str()).collect();
        assert_eq!(order, ["7.3.4-1", "7.3~rc7-1"]);
    }
}

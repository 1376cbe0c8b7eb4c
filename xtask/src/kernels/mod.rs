//! `cargo xtask kernels`: bbrscope on the kernels people run. Fetches Debian's kernel packages
//! through apt (private configuration, cache outside the repository), builds a small guest with
//! the freshly built bbrscope and this xtask as the test driver, boots each kernel under QEMU
//! (TCG: KVM is unusable on the CI machines, see docs/kernel-matrix.md), and prints
//! which observer path each kernel got, what bbrscope reported on stderr, and the tests' results.

mod apt;
pub(crate) mod guest;
mod initramfs;
pub(crate) mod system;

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use clap::Args;
use serde_json::Value;

use crate::arch::Arch;

/// The default matrix: Debian 11's and 12's kernels, 6.12 (Debian 13), and the newest 6.x and
/// 7.x the archive serves (backports, sid, experimental).
const DEFAULT_KERNELS: &[&str] = &["5.10", "6.1", "6.12", "6", "7"];
/// A mirror can list a kernel whose files it has not got (seen here: every arm64 5.10 build in
/// bullseye-security, 5.10.0-39 to -46, answers 404; bullseye's own 5.10.0-32 is served); then
/// the next older build of the same series boots instead, up to this many tries.
const FETCH_TRIES: usize = 10;
/// The kernel booted with full preemption (where cgroup programs can be preempted by another
/// task's), when its build lets the boot line choose (PREEMPT_DYNAMIC): Debian 13's own, 6.12.
const PREEMPT_KERNEL: &str = "6.12.";

#[derive(Debug, Args)]
pub(crate) struct KernelsArgs {
    /// The guests' architecture: this machine's, or aarch64 (Debian's arm64 kernels on QEMU's
    /// `virt` machine; busybox and iproute2 from Debian 12's arm64 packages)
    #[arg(long, value_enum, default_value_t = Arch::host())]
    arch: Arch,
    /// Run only this kernel: the newest Debian kernel whose version starts with VERSION
    /// (e.g. 5.10, 6.1, 6.12, 6 for the newest 6.x, 7.2.13); repeat for several
    #[arg(long = "kernel", value_name = "VERSION")]
    kernels: Vec<String>,
    /// Where apt lists, packages and extracted kernels are kept between runs
    #[arg(long, value_name = "DIR", default_value = "/var/cache/bbrscope-kernels")]
    cache: PathBuf,
    /// The bbrscope binary to test [default: build it static (release), as `cargo xtask dist
    /// --profile release` does, for the guests' architecture]
    #[arg(long, value_name = "PATH")]
    bbrscope: Option<PathBuf>,
    /// Seconds one guest may run before it counts as hung
    #[arg(long, value_name = "S", default_value_t = 300)]
    timeout: u64,
    /// Fetch the package lists again even if the cached ones are recent
    #[arg(long)]
    refresh: bool,
    /// Also write the results as markdown (for docs/kernel-matrix.md)
    #[arg(long, value_name = "FILE")]
    markdown: Option<PathBuf>,
    /// Test only: break bbrscope on purpose to prove the matrix catches it. `host-btf`: bbrscope
    /// in the guest reads the struct layout of this machine's kernel (`--btf
    /// /sys/kernel/btf/vmlinux` of the host), as a tool with offsets hard-coded on its build
    /// machine would; only the data checks run. The matrix must then fail on kernels whose
    /// layout differs (5.10; xtask/tests/kernel_break.rs asserts it)
    #[arg(long = "break", value_enum, value_name = "BREAK")]
    break_: Option<Break>,
    /// Guests booted at once. A guest under TCG keeps less than one core busy (its tests wait on
    /// timers and fixed-length transfers: 64 s of CPU in an 82 s guest), so two on this 2-core
    /// machine take as long as one (85 s against 82 s, both passing); the default is the
    /// machine's CPU count
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Skip the netem-vs-emulator cross-check (it runs on the newest kernel of the selection, on
    /// this machine's architecture only: the emulator is the same code on every architecture)
    #[arg(long)]
    no_crosscheck: bool,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Break {
    HostBtf,
}

/// One guest's results.
#[derive(Debug, Default)]
struct Outcome {
    version: String,
    release: String,
    package: String,
    /// The observer `--observer auto` selected (from `stats.observer`).
    observer: Option<String>,
    /// Every distinct stderr line bbrscope printed, per run.
    stderr: Vec<(String, Vec<String>)>,
    tests: Vec<(String, bool, String)>,
    /// The guest did not finish (boot failure, hang, crash).
    error: Option<String>,
    seconds: f64,
    /// The first boot's failures, when this is a second boot.
    first_boot: Option<String>,
}

impl Outcome {
    fn passed(&self) -> usize {
        self.tests.iter().filter(|t| t.1).count()
    }
    fn failed(&self) -> Vec<&str> {
        self.tests.iter().filter(|t| !t.1).map(|t| t.0.as_str()).collect()
    }
    fn ok(&self) -> bool {
        self.error.is_none() && self.failed().is_empty() && !self.tests.is_empty()
    }
    /// What went wrong, in a few words: the guest's error or the failed checks' names.
    fn problems(&self) -> String {
        match &self.error {
            Some(e) => format!("guest error: {e}"),
            None if self.tests.is_empty() => "no test ran".into(),
            None => format!("failed {}", self.failed().join(", ")),
        }
    }
    /// The same with each failed check's own account.
    fn problems_in_detail(&self) -> String {
        let checks = self.tests.iter().filter(|t| !t.1).map(|(name, _, detail)| format!("{name}: {detail}"));
        let mut all: Vec<String> = self.error.iter().map(|e| format!("guest error: {e}")).chain(checks).collect();
        if all.is_empty() && self.tests.is_empty() {
            all.push("no test ran".into());
        }
        all.join("; ")
    }
}

pub(crate) fn run(args: KernelsArgs) -> Result<()> {
    let started = Instant::now();
    let machine = Machine::of(args.arch);
    // A guest of this machine's architecture runs this machine's busybox and iproute2.
    let host_tools: &[&str] = if args.arch.cross() { &[] } else { &["busybox", "ldd"] };
    for tool in [machine.qemu, "apt-get", "dpkg-deb", "xz"].iter().chain(host_tools) {
        if Command::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status()?.code()
            != Some(0)
        {
            bail!(
                "{tool} is missing: run scripts/setup.sh (it installs qemu-system-x86, qemu-system-arm and \
                 busybox-static)"
            );
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().context("workspace root")?.to_path_buf();
    // bbrscope static, as the package ships it, and the guest's driver (this xtask) beside it:
    // the build `cargo xtask dist --profile release` shares.
    let (built, driver) = args.arch.build_static(&root, "release")?;
    let driver = driver.context("the release build names the driver")?;
    let bbrscope = args.bbrscope.clone().unwrap_or(built);
    fs::create_dir_all(&args.cache)?;
    let apt_turn = apt_turn(&args.cache)?;
    let apt = apt::Apt::new(&args.cache, args.arch)?;
    let t = Instant::now();
    apt.update(args.refresh)?;
    let userland = if args.arch.cross() { Some(apt.userland(&args.cache)?) } else { None };
    let cands = apt.candidates()?;
    crate::progress!("kernels: {} kernel images known to apt ({:.0} s)", cands.len(), t.elapsed().as_secs_f64());
    let selectors: Vec<String> = if args.kernels.is_empty() {
        DEFAULT_KERNELS.iter().map(std::string::ToString::to_string).collect()
    } else {
        args.kernels.clone()
    };
    let mut chosen: Vec<Vec<&apt::Candidate>> = Vec::new();
    for s in &selectors {
        let ranked = apt::ranked(&cands, s);
        ensure!(!ranked.is_empty(), "Debian's archive serves no kernel {s}.x for {}", args.arch.debian());
        if !chosen.iter().any(|k| k[0].package == ranked[0].package) {
            chosen.push(ranked);
        }
    }
    let break_btf = args.break_.map(|Break::HostBtf| PathBuf::from("/sys/kernel/btf/vmlinux"));
    let payload = initramfs::Payload { bbrscope, driver, break_btf, userland };
    let newest = chosen.iter().map(|r| r[0]).max_by(|a, b| a.upstream.cmp(&b.upstream)).map(|c| c.package.clone());
    // The netem-vs-emulator cross-check takes minutes under TCG: one kernel, the newest.
    let crosscheck = |c: &apt::Candidate| {
        !args.no_crosscheck
            && !args.arch.cross()
            && args.break_.is_none()
            && newest.as_deref() == Some(c.package.as_str())
    };
    // Downloads one at a time (apt locks its archive directory), then the guests `jobs` at once,
    // the longest (the cross-check's) first.
    let fetched: Vec<_> = chosen.iter().map(|ranked| fetch(&apt, &args.cache, ranked, machine.modules)).collect();
    drop(apt_turn);
    let mut order: Vec<usize> = (0..chosen.len()).collect();
    order.sort_by_key(|&i| !crosscheck(chosen[i][0]));
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let boot = |i: usize| {
        let c = chosen[i][0];
        let t = Instant::now();
        crate::progress!("kernels: {} {} ...", c.package, c.version);
        let booted = fetched[i].as_ref().map_err(|e| format!("{e:#}")).and_then(|(got, kernel)| {
            boot_one(&args, &machine, &payload, got, kernel, crosscheck(c)).map_err(|e| format!("{e:#}"))
        });
        let mut o = booted.unwrap_or_else(|e| Outcome {
            version: c.upstream_str(),
            package: c.package.clone(),
            error: Some(e),
            ..Outcome::default()
        });
        o.seconds = t.elapsed().as_secs_f64();
        crate::progress!(
            "kernels: {} {}: {} passed, failed {:?}{} ({:.0} s)",
            o.version,
            o.release,
            o.passed(),
            o.failed(),
            o.error.as_deref().map(|e| format!(", error: {e}")).unwrap_or_default(),
            o.seconds
        );
        o
    };
    let mut outcomes = in_parallel(jobs, &order, boot);
    // A guest under TCG shares two cores with the other guests and whatever else the machine
    // runs: a check that failed once boots once more, alone, so that one slow moment does not
    // fail the matrix — but the first failure is kept, shown in the report and printed last,
    // so that a check which fails now and then is named, not hidden. A run broken on purpose
    // (`--break`) is meant to fail: no second boot.
    for (i, o) in outcomes.iter_mut().enumerate() {
        if o.ok() || fetched[i].is_err() || args.break_.is_some() {
            continue;
        }
        crate::progress!("kernels: {} failed on its first boot ({}); booting it once more", o.version, o.problems());
        let first = std::mem::take(o);
        *o = boot(i);
        o.first_boot = Some(first.problems_in_detail());
    }
    let total = started.elapsed().as_secs_f64();
    let md = report(args.arch, &outcomes, total);
    println!("{md}");
    if let Some(path) = &args.markdown {
        fs::write(path, &md)?;
    }
    // Last, where a log's tail shows it: every failure, with what the check saw.
    for o in &outcomes {
        if let Some(first) = &o.first_boot {
            crate::progress!(
                "kernels: {} failed its first boot and {} its second; first: {first}",
                o.version,
                if o.ok() { "passed" } else { "failed" }
            );
        }
        if !o.ok() {
            crate::progress!("kernels: {} failed: {}", o.version, o.problems_in_detail());
        }
    }
    let bad: Vec<&str> = outcomes.iter().filter(|o| !o.ok()).map(|o| o.version.as_str()).collect();
    if !bad.is_empty() {
        bail!("kernel matrix failed on {}", bad.join(", "));
    }
    Ok(())
}

/// `work(i)` for every index in `order`, on `jobs` threads taking the next index as each is
/// free; the results by index (`work(0)` first), whatever order they finished in.
fn in_parallel<T: Send>(jobs: usize, order: &[usize], work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, order.len().max(1)) {
            s.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                    let out = work(i);
                    done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((i, out));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, out)| out).collect()
}

/// How QEMU runs a guest of one architecture, and where the guest's results come out.
struct Machine {
    arch: Arch,
    qemu: &'static str,
    /// The machine and CPU QEMU emulates.
    model: &'static [&'static str],
    /// The kernel's console device (boot line `console=`).
    console: &'static str,
    /// Modules the guest loads at boot for its results channel (when the kernel has them as
    /// modules; built in, they are skipped).
    modules: &'static [&'static str],
}

impl Machine {
    fn of(arch: Arch) -> Machine {
        match arch {
            Arch::X86_64 => {
                Machine { arch, qemu: "qemu-system-x86_64", model: &["-cpu", "max"], console: "ttyS0", modules: &[] }
            }
            // `virt` has one UART (the console), so the results go through a virtio console.
            // pauth-impdef: QEMU's own pointer-authentication hash, much cheaper under TCG than
            // the architected QARMA (the guest sees the feature all the same).
            Arch::Aarch64 => Machine {
                arch,
                qemu: "qemu-system-aarch64",
                model: &["-M", "virt", "-cpu", "max,pauth-impdef=on"],
                console: "ttyAMA0",
                modules: &["virtio_mmio", "virtio_console"],
            },
        }
    }

    /// QEMU's options that send the guest's results device ([`guest::RESULTS_FLAG`]) to `file`.
    fn results(&self, file: &Path) -> Vec<String> {
        match self.arch {
            Arch::X86_64 => vec!["-serial".into(), format!("file:{}", file.display())],
            Arch::Aarch64 => vec![
                "-device".into(),
                "virtio-serial-device".into(),
                "-chardev".into(),
                format!("file,id=results,path={}", file.display()),
                "-device".into(),
                "virtconsole,chardev=results".into(),
            ],
        }
    }

    /// The guest's device for its results, as the kernel names it.
    fn results_device(&self) -> &'static str {
        match self.arch {
            Arch::X86_64 => "/dev/ttyS1",
            Arch::Aarch64 => "/dev/hvc0",
        }
    }
}

/// The first of `ranked` (newest first, [`FETCH_TRIES`] at most) whose packages the archive
/// serves, downloaded and extracted into `cache`. Any other failure (a module missing, say) is
/// the kernel's own and ends the search.
fn fetch<'a>(
    apt: &apt::Apt,
    cache: &Path,
    ranked: &[&'a apt::Candidate],
    extra: &[&str],
) -> Result<(&'a apt::Candidate, apt::Kernel)> {
    let mut last = None;
    for c in ranked.iter().take(FETCH_TRIES) {
        match apt.prepare(cache, c, extra) {
            Ok(k) => return Ok((c, k)),
            Err(e) if e.downcast_ref::<apt::NotServed>().is_some() => {
                crate::progress!("kernels: {} {}: {e:#}; trying the next older build", c.package, c.version);
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.context("no candidate kernel")?)
}

/// Holds the cache's apt part for this process until dropped: apt refuses a second run on the
/// same lists and archives, and two `boot`s (bbrscope/tests/export.rs starts its Debian guests
/// together) or a `boot` beside `kernels` would otherwise both fetch into the same cache.
fn apt_turn(cache: &Path) -> Result<fs::File> {
    fs::create_dir_all(cache)?;
    let path = cache.join("apt.lock");
    let file = fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    file.lock().with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

/// The newest Debian kernel of this machine's architecture whose version starts with
/// `selector`, downloaded and extracted into `cache` (for `cargo xtask boot`, which boots one).
fn prepare_kernel(cache: &Path, selector: &str) -> Result<apt::Kernel> {
    let _turn = apt_turn(cache)?;
    let arch = Arch::host();
    let apt = apt::Apt::new(cache, arch)?;
    apt.update(false)?;
    let cands = apt.candidates()?;
    let ranked = apt::ranked(&cands, selector);
    ensure!(!ranked.is_empty(), "Debian's archive serves no kernel {selector}.x for {}", arch.debian());
    Ok(fetch(&apt, cache, &ranked, Machine::of(arch).modules)?.1)
}

fn boot_one(
    args: &KernelsArgs,
    machine: &Machine,
    payload: &initramfs::Payload,
    c: &apt::Candidate,
    kernel: &apt::Kernel,
    crosscheck: bool,
) -> Result<Outcome> {
    let work = args.cache.join("runs").join(&kernel.release);
    fs::create_dir_all(&work)?;
    let initrd = work.join("initrd.cpio");
    initramfs::build(kernel, payload, &initrd)?;
    let console = work.join("console.log");
    let results = work.join("results.ndjson");
    let _ = fs::remove_file(&results);
    let preempt = kernel.version.starts_with(PREEMPT_KERNEL)
        && fs::read_to_string(kernel.config()).is_ok_and(|c| c.lines().any(|l| l == "CONFIG_PREEMPT_DYNAMIC=y"));
    let results_flag = format!("{}={}", guest::RESULTS_FLAG, machine.results_device());
    let append = [format!("console={} panic=-1 loglevel=4", machine.console).as_str(), results_flag.as_str()]
        .into_iter()
        .chain(crosscheck.then_some(guest::CROSSCHECK_FLAG))
        .chain(preempt.then_some(guest::PREEMPT_FLAG))
        .chain(args.break_.map(|Break::HostBtf| guest::BREAK_FLAG))
        .collect::<Vec<_>>()
        .join(" ");
    let boot = || {
        qemu(
            machine,
            kernel,
            &initrd,
            &append,
            &["-m", "1024", "-no-reboot"],
            &console,
            &results,
            Duration::from_secs(args.timeout),
        )
    };
    let mut error = boot()?;
    // A guest whose driver never printed a line died while the kernel booted, before bbrscope
    // ran: under TCG, live code patching can fault on the other vCPU (seen once in eight boots
    // of 6.12 with `preempt=full`, an int3 in the idle loop at 2.3 s). That says nothing about
    // bbrscope, so such a boot is tried once more, and said so.
    if fs::read_to_string(&results).unwrap_or_default().trim().is_empty() {
        let tail = fs::read_to_string(&console).unwrap_or_default();
        let why = tail.lines().find(|l| l.contains("Kernel panic") || l.contains("Oops")).unwrap_or("no output");
        crate::progress!(
            "kernels: {}: the guest died before its driver started ({}); booting it again",
            kernel.release,
            why.trim()
        );
        error = boot()?;
    }
    let mut o = Outcome {
        version: kernel.version.clone(),
        release: kernel.release.clone(),
        package: c.package.clone(),
        ..Outcome::default()
    };
    let mut done = false;
    for line in fs::read_to_string(&results).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { continue };
        match v["kind"].as_str() {
            Some("test") => o.tests.push((
                v["name"].as_str().unwrap_or("?").into(),
                v["pass"].as_bool().unwrap_or(false),
                v["detail"].as_str().unwrap_or("").into(),
            )),
            Some("run") => {
                let arg = v["observer_arg"].as_str().unwrap_or("?").to_string();
                if arg == "auto" {
                    o.observer = v["observer"].as_str().map(str::to_string);
                }
                let lines = v["stderr"].as_array().into_iter().flatten().filter_map(|l| l.as_str()).map(str::to_string);
                o.stderr.push((arg, lines.collect()));
            }
            Some("done") => done = true,
            _ => {}
        }
    }
    if !done && error.is_none() {
        let tail: Vec<String> = fs::read_to_string(&console)
            .unwrap_or_default()
            .lines()
            .rev()
            .take(8)
            .map(|l| l.trim_end().to_string())
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        error = Some(format!("the guest stopped before its driver finished; console tail: {}", tail.join(" / ")));
    }
    o.error = error;
    Ok(o)
}

/// Boots `kernel` with `initrd` under QEMU (TCG, 2 CPUs, no network) until the guest powers off
/// or `timeout` passes: its console goes to `console`, its results device ([`Machine::results`])
/// to `results`. `options`: further QEMU options (memory, disks, -no-reboot).
/// Returns why the guest had to be killed, if it had to.
#[expect(clippy::too_many_arguments, reason = "one guest's whole description, each named at the call")]
fn qemu(
    machine: &Machine,
    kernel: &apt::Kernel,
    initrd: &Path,
    append: &str,
    options: &[&str],
    console: &Path,
    results: &Path,
    timeout: Duration,
) -> Result<Option<String>> {
    let mut qemu = Command::new(machine.qemu)
        .args(["-accel", "tcg", "-smp", "2", "-display", "none"])
        .args(machine.model)
        .args(options)
        .args(["-monitor", "none", "-nic", "none", "-kernel"])
        .arg(kernel.vmlinuz())
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(append)
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .args(machine.results(results))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", machine.qemu))?;
    let deadline = Instant::now() + timeout;
    loop {
        if qemu.try_wait()?.is_some() {
            return Ok(None);
        }
        if Instant::now() > deadline {
            let _ = qemu.kill();
            let _ = qemu.wait();
            return Ok(Some(format!(
                "guest still running after {} s (console: {})",
                timeout.as_secs(),
                console.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The matrix as markdown: one row per kernel, then every stderr line and every failure.
fn report(arch: Arch, outcomes: &[Outcome], total: f64) -> String {
    let mut s = String::new();
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default();
    let host = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let date = Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().map(|o| o.stdout).unwrap_or_default();
    let _ = writeln!(
        s,
        "Kernel matrix ({} guests), {} on {} x {cpu} (host Linux {}), QEMU TCG, {total:.0} s in all.\n",
        arch.debian(),
        String::from_utf8_lossy(&date).trim(),
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        host.trim()
    );
    let _ = writeln!(
        s,
        "| kernel | Debian package | observer (auto) | bbrscope on stderr (auto run) | tests | failed | time |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for o in outcomes {
        let auto_err =
            o.stderr.iter().find(|(a, _)| a == "auto").map(|(_, l)| summarize(l).join("<br>")).unwrap_or_default();
        let failed = match &o.error {
            Some(e) => format!("**guest error**: {e}"),
            None => o.failed().join(", "),
        };
        let _ = writeln!(
            s,
            "| {} ({}) | {} | {} | {} | {}/{} | {} | {:.0} s |",
            o.version,
            o.release,
            o.package,
            o.observer.as_deref().unwrap_or("-"),
            if auto_err.is_empty() { "(nothing)".into() } else { auto_err.replace('|', "\\|") },
            o.passed(),
            o.tests.len(),
            if failed.is_empty() { "-".into() } else { failed.replace('|', "\\|") },
            o.seconds
        );
    }
    for o in outcomes {
        let _ = writeln!(s, "\n### {} ({})\n", o.version, o.release);
        for (arg, lines) in &o.stderr {
            let _ = writeln!(
                s,
                "- stderr of `stream --observer {arg}`: {}",
                if lines.is_empty() {
                    "(nothing)".to_string()
                } else {
                    format!("`{}`", summarize(lines).join("` / `"))
                }
            );
        }
        for (name, pass, detail) in &o.tests {
            let _ = writeln!(s, "- {} `{name}`: {detail}", if *pass { "pass" } else { "**FAIL**" });
        }
        if let Some(first) = &o.first_boot {
            let _ = writeln!(s, "- **failed on a first boot**, booted again: {first}");
        }
        if let Some(e) = &o.error {
            let _ = writeln!(s, "- **guest error**: {e}");
        }
    }
    s
}

/// bbrscope's stderr with each embedded verifier log cut down to its verdict (the lines before
/// "verification time"); the full log stays in the run's results.ndjson.
fn summarize(lines: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut log: Option<(String, Vec<&str>)> = None;
    for line in lines {
        match &mut log {
            None => match line.split_once("Verifier output:") {
                Some((head, _)) => log = Some((head.to_string(), Vec::new())),
                None => out.push(line.clone()),
            },
            Some((head, body)) => {
                if let Some(at) = line.find("(os error") {
                    let end = body.iter().position(|l| l.starts_with("verification time")).unwrap_or(body.len());
                    let verdict: Vec<&str> = body[..end].iter().rev().take(2).rev().copied().collect();
                    out.push(format!("{head}verifier: {} {}", verdict.join(" / "), &line[at..]));
                    log = None;
                } else {
                    body.push(line.trim());
                }
            }
        }
    }
    if let Some((head, body)) = log {
        out.push(format!("{head}verifier: {}", body.last().unwrap_or(&"")));
    }
    out
}

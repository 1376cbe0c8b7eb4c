//! `bbrscope apply` / `status` / `revert` against the live kernel, as root, only inside network
//! namespaces, cgroups and temporary directories these tests create (and remove). The initial
//! namespace's settings are read, never written: system-scope changes run under
//! `ip netns exec` in a throwaway namespace, with a temporary directory standing in for /.
//!
//! Proof comes from the kernel, not from bbrscope: getsockopt(TCP_CONGESTION) on sockets these
//! tests open themselves, and `ss -tin`.

mod common;

use std::{
    fmt,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::{fd::FromRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use bbrscope::{apply, sys::cgroup::cgroup2_mount};
use common::{
    Link, Netns, Stream, closed_pipe, command_in, full, require_root, run, tcp_congestion_control, unique_name,
};

const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// Where bbrscope records what it changed, and its sysctl drop-in (under `--root`).
const STATE: &str = "var/lib/bbrscope/state.json";
const DROPIN: &str = "etc/sysctl.d/99-zz-bbrscope.conf";

fn words(path: &str) -> Vec<String> {
    std::fs::read_to_string(path).unwrap().split_whitespace().map(str::to_string).collect()
}

/// The initial namespace's default and allowed algorithms.
fn host_settings() -> (String, String) {
    (tcp_congestion_control(), std::fs::read_to_string(ALLOWED).unwrap())
}

/// What the tests start from: root, the initial namespace's settings (to show at the end that
/// they are untouched) and a temporary directory standing in for / (bbrscope's `--root`).
struct Fixture {
    host: (String, String),
    root: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        require_root();
        let root = tempfile::Builder::new().prefix("bbrscope-root-").tempdir().unwrap();
        Fixture { host: host_settings(), root }
    }

    /// `rel` under the stand-in root.
    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    /// Writes `contents` to `rel` under the stand-in root, creating its directories.
    fn write(&self, rel: &str, contents: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    /// `bbrscope ARGS --root ROOT`, inside `netns` when given.
    fn bbrscope(&self, netns: Option<&Netns>, args: &[&str]) -> Run {
        let o = self.command(netns, args).output().unwrap();
        Run {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// The command [`Fixture::bbrscope`] runs, to adjust before running it.
    fn command(&self, netns: Option<&Netns>, args: &[&str]) -> Command {
        let root = self.root.path().to_str().unwrap();
        let mut c = command_in(netns, env!("CARGO_BIN_EXE_bbrscope"));
        c.args(args).args(["--root", root]);
        c
    }

    /// `bbrscope ARGS --root ROOT` with its standard output going to `stdout` (stderr captured).
    fn bbrscope_to(&self, netns: Option<&Netns>, args: &[&str], stdout: impl Into<Stdio>) -> Run {
        let o = self.command(netns, args).stdout(stdout).stderr(Stdio::piped()).output().unwrap();
        Run { code: o.status.code(), stdout: String::new(), stderr: String::from_utf8_lossy(&o.stderr).into_owned() }
    }

    /// Starts `bbrscope ARGS`, SIGKILLs it `delay_ms` later and reaps it: a run cut off at an
    /// arbitrary point, with nothing it could defer.
    fn killed_after(&self, netns: Option<&Netns>, args: &[&str], delay_ms: u64) {
        let child = self.command(netns, args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill(2) on the pid of a child not yet waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait_with_output().unwrap();
    }

    fn assert_host_unchanged(&self) {
        assert_eq!(host_settings(), self.host, "the initial namespace changed");
    }
}

/// How a bbrscope run exited and what it printed (both streams, when shown).
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts that it succeeded.
    fn ok(self) -> Self {
        assert_eq!(self.code, Some(0), "{self}");
        self
    }
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr)
    }
}

fn congestion_of(fd: impl std::os::fd::AsFd) -> String {
    bbrscope::sys::sockopt::congestion(fd).unwrap()
}

/// Connects to `listener` from inside `from` and returns the client's algorithm by getsockopt
/// and by `ss -tin` (read while the connection is open).
fn client_algorithm(from: &Netns, listener: TcpListener) -> (String, String) {
    let addr = listener.local_addr().unwrap();
    from.enter(|| {
        let c = TcpStream::connect(addr).unwrap();
        let _s = listener.accept().unwrap();
        (congestion_of(&c), ss_algorithm(&format!("dport = :{}", addr.port())))
    })
}

/// A loopback connection inside `netns`: the client's algorithm by getsockopt and by ss.
fn loopback_connection(netns: &Netns) -> (String, String) {
    client_algorithm(netns, netns.enter(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()))
}

/// A connection from `link.a` to `link.b` (over their connected route): the client's algorithm
/// by getsockopt and by ss.
fn link_connection(link: &Link) -> (String, String) {
    let b: Ipv4Addr = link.b_ip.parse().unwrap();
    client_algorithm(&link.a, link.b.enter(|| TcpListener::bind((b, 0)).unwrap()))
}

/// The algorithm `ss -tin` shows for the one socket matching `filter` (in the calling
/// thread's namespace: ss opens its netlink socket where it is started).
fn ss_algorithm(filter: &str) -> String {
    let out = run("ss", &["-tinH", filter]);
    let available = words(AVAILABLE);
    out.split_whitespace()
        .find(|t| available.iter().any(|a| a == t))
        .unwrap_or_else(|| panic!("no algorithm in ss output: {out}"))
        .to_string()
}

/// An algorithm other than `than`: one on the host's allowed list when `allowed_only`, else
/// preferably one that is not (cgroup programs and routes are not bound by that list).
fn other_algorithm(than: &str, allowed_only: bool) -> String {
    let allowed = words(ALLOWED);
    let mut pool: Vec<String> = words(AVAILABLE).into_iter().filter(|a| a != than).collect();
    pool.sort_by_key(|a| allowed.contains(a) != allowed_only);
    pool.into_iter().find(|a| !allowed_only || allowed.contains(a)).expect("a second algorithm")
}

#[test]
fn system_scope_applies_verifies_is_idempotent_and_reverts() {
    let fx = Fixture::new();
    let ns = Netns::new("apply");
    let before = ns.cc();
    let algo = other_algorithm(&before, true);

    let o = fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    assert!(o.stdout.contains(&format!("got {algo}")), "apply verifies on a real socket: {o}");
    assert!(o.stdout.contains("existing connections keep"), "{o}");
    assert_eq!(ns.cc(), algo);
    assert_eq!(loopback_connection(&ns), (algo.clone(), algo.clone()), "getsockopt and ss -tin");
    let written = std::fs::read_to_string(fx.path(DROPIN)).unwrap();
    assert!(written.contains(&format!("net.ipv4.tcp_congestion_control = {algo}")), "{written}");
    let recorded = std::fs::read(fx.path(STATE)).unwrap();

    let o = fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    assert!(o.stdout.contains("already in place"), "{o}");
    assert_eq!(std::fs::read(fx.path(STATE)).unwrap(), recorded, "a second apply changes nothing");

    let o = fx.bbrscope(Some(&ns), &["status", "--json"]).ok();
    let status: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(status["system"]["default"], algo.as_str());
    assert_eq!(status["boot"]["value"], algo.as_str());
    assert_eq!(status["bbrscope"][0]["scope"]["type"], "system");
    // This machine's kernel is mainline: its BBR is v1 (built in or the tcp_bbr module).
    if status["available"].as_array().unwrap().iter().any(|a| a == "bbr") {
        assert_eq!(status["bbr"]["version"], "v1", "{}", status["bbr"]);
    }

    fx.bbrscope(Some(&ns), &["revert"]).ok();
    assert_eq!(ns.cc(), before);
    assert_eq!(loopback_connection(&ns).0, before);
    assert!(!fx.path(DROPIN).exists() && !fx.path(STATE).exists(), "revert removes what bbrscope added");
    fx.assert_host_unchanged();
}

#[test]
fn boot_files_are_read_in_order_and_never_edited() {
    let fx = Fixture::new();
    let ns = Netns::new("apply");
    let algo = other_algorithm(&ns.cc(), true);
    let site = "# site settings\nnet.ipv4.tcp_congestion_control = cubic\n";
    fx.write("usr/lib/sysctl.d/50-vendor.conf", "net.ipv4.tcp_congestion_control = reno\n");
    fx.write("etc/sysctl.conf", site);

    let o = fx.bbrscope(Some(&ns), &["apply", &algo, "--dry-run"]).ok();
    assert!(
        o.stdout.contains("/etc/sysctl.conf:2 sets net.ipv4.tcp_congestion_control = cubic and is applied after"),
        "the plan names the file that wins at boot: {o}"
    );
    assert!(o.stdout.contains("dry run: nothing changed"), "{o}");
    assert!(!fx.path("etc/sysctl.d").exists() && !fx.path("var").exists(), "a dry run writes nothing");
    assert_ne!(ns.cc(), algo);

    fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    fx.bbrscope(Some(&ns), &["revert"]).ok();
    assert_eq!(std::fs::read_to_string(fx.path("etc/sysctl.conf")).unwrap(), site);
    assert!(fx.path("usr/lib/sysctl.d/50-vendor.conf").exists());

    let o = fx.bbrscope(Some(&ns), &["apply", &algo, "--no-persist"]).ok();
    assert!(
        o.stdout.contains("the next boot gives net.ipv4.tcp_congestion_control = cubic (/etc/sysctl.conf:2)"),
        "{o}"
    );
    assert!(!fx.path(DROPIN).exists(), "--no-persist writes no drop-in");
    fx.bbrscope(Some(&ns), &["revert"]).ok();
    fx.assert_host_unchanged();
}

/// A record another user planted (revert would create /etc/cron.d/x from it, or with --force
/// delete /etc/sysctl.conf) is refused before anything is done; a drop-in of bbrscope's name
/// that the admin wrote is never overwritten; under umask 000 what apply writes is still 0644.
#[test]
fn planted_records_and_foreign_files_are_refused_and_modes_are_explicit() {
    use std::os::unix::fs::PermissionsExt as _;
    let fx = Fixture::new();
    let ns = Netns::new("apply");
    let algo = other_algorithm(&ns.cc(), true);
    let planted = r#"{"entries":[{"scope":{"type":"system","netns":{"label":"this namespace","path":"/proc/self/ns/net","ino":1}},"algorithm":"bbr","applied_at":1,"changes":[{"kind":"file","path":"/etc/cron.d/x","from":"* * * * * root touch /tmp/pwned\n","to":"x"},{"kind":"file","path":"/etc/sysctl.conf","from":null,"to":"x"}]}]}"#;
    fx.write("var/lib/bbrscope/state.json", planted);
    fx.write("etc/sysctl.conf", "# the admin's\n");
    for args in [&["revert", "--all"][..], &["revert", "--all", "--force"], &["apply", &algo], &["status"]] {
        let o = fx.bbrscope(Some(&ns), args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert!(o.stderr.contains("refusing /var/lib/bbrscope/state.json: it names /etc/cron.d/x"), "{o}");
        assert!(!fx.path("etc/cron.d").exists(), "{args:?} created what the planted record names");
        assert_eq!(std::fs::read_to_string(fx.path("etc/sysctl.conf")).unwrap(), "# the admin's\n");
    }
    std::fs::remove_file(fx.path("var/lib/bbrscope/state.json")).unwrap();

    // The admin's own file under bbrscope's name: refused, untouched.
    fx.write(DROPIN, "net.ipv4.tcp_congestion_control = reno\n");
    let o = fx.bbrscope(Some(&ns), &["apply", &algo]);
    assert_eq!(o.code, Some(2), "{o}");
    assert!(o.stdout.contains("bbrscope did not write it"), "{o}");
    assert_eq!(std::fs::read_to_string(fx.path(DROPIN)).unwrap(), "net.ipv4.tcp_congestion_control = reno\n");
    std::fs::remove_file(fx.path(DROPIN)).unwrap();

    // umask 000: the files apply writes are 0644 all the same, its directory 0755.
    let mut c = fx.command(Some(&ns), &["apply", &algo]);
    // SAFETY: umask(2) is async-signal-safe, as pre_exec requires.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, || {
            libc::umask(0);
            Ok(())
        });
    }
    assert!(c.output().unwrap().status.success());
    let mode = |rel: &str| std::fs::metadata(fx.path(rel)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("var/lib/bbrscope/state.json"), 0o644);
    assert_eq!(mode("var/lib/bbrscope"), 0o755);
    assert_eq!(mode(DROPIN), 0o644);
    fx.bbrscope(Some(&ns), &["revert"]).ok();
    fx.assert_host_unchanged();
}

#[test]
fn a_failure_midway_rolls_back() {
    let fx = Fixture::new();
    let ns = Netns::new("apply");
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    // A file where the drop-in's directory should be: the live change succeeds, the drop-in fails.
    fx.write("etc/sysctl.d", "");

    let o = fx.bbrscope(Some(&ns), &["apply", &algo]);
    assert_eq!(o.code, Some(1), "{o}");
    assert!(o.stderr.contains("rolled back"), "{o}");
    assert_eq!(ns.cc(), before, "the live change was rolled back");
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

#[test]
fn netns_scope_and_the_allowed_list_rule() {
    let fx = Fixture::new();
    let ns = Netns::new("apply");
    let name = ns.name.as_str();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);

    fx.bbrscope(None, &["apply", &algo, "--netns", name]).ok();
    assert_eq!(loopback_connection(&ns), (algo.clone(), algo.clone()));
    let o = fx.bbrscope(None, &["status", "--netns", name]);
    assert!(o.stdout.contains(&format!("netns {name} -> {algo}: the default is {algo}")), "{o}");
    // The settings advise weighs flows against, as this namespace has them (set by the test).
    ns.exec("sysctl", &["-qw", "net.ipv4.tcp_slow_start_after_idle=0", "net.ipv4.tcp_wmem=4096 16384 131072"]);
    ns.exec("ip", &["route", "add", "198.51.100.0/24", "dev", "lo", "initcwnd", "32"]);
    let o = fx.bbrscope(None, &["status", "--netns", name, "--json"]).ok();
    let status: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let tuning = &status["namespaces"][0]["tuning"];
    assert_eq!(tuning["tcp_slow_start_after_idle"], false, "{tuning}");
    assert_eq!(tuning["tcp_wmem"], serde_json::json!([4096, 16384, 131072]), "{tuning}");
    assert_eq!(
        tuning["initcwnd_routes"],
        serde_json::json!([{"prefix": "198.51.100.0/24", "initcwnd": 32}]),
        "{tuning}"
    );
    let o = fx.bbrscope(None, &["status", "--netns", name]).ok();
    assert!(o.stdout.contains("route            198.51.100.0/24 initcwnd 32"), "{o}");
    fx.bbrscope(None, &["revert", "--netns", name]).ok();
    assert_eq!(ns.cc(), before);

    let o = fx.bbrscope(None, &["apply", &algo, "--netns", "all", "--dry-run"]);
    assert!(o.stdout.contains(&format!("netns {name} -> {algo}")), "{o}");

    // An available algorithm the host does not allow cannot be a namespace's default.
    let allowed = words(ALLOWED);
    if let Some(blocked) = words(AVAILABLE).into_iter().find(|a| !allowed.contains(a)) {
        let o = fx.bbrscope(None, &["apply", &blocked, "--netns", name]);
        assert_eq!(o.code, Some(2), "{o}");
        let out = o.to_string();
        assert!(out.contains("tcp_allowed_congestion_control") && out.contains("--allow"), "{out}");
        assert!(out.contains("nothing was changed"), "{out}");
        let o = fx.bbrscope(None, &["apply", &blocked, "--netns", name, "--allow", "--dry-run"]).ok();
        assert!(o.stdout.contains("set net.ipv4.tcp_allowed_congestion_control"), "{o}");
        assert_eq!(ns.cc(), before);
    } else {
        eprintln!("every available algorithm is allowed on this host: the allowed-list refusal cannot occur");
    }
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

#[test]
fn bad_input_exits_2_and_changes_nothing() {
    let fx = Fixture::new();
    let v1 = std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().find_map(|l| {
        (l.split(" - ").nth(1)?.starts_with("cgroup ")).then(|| l.split_whitespace().nth(4).unwrap().to_string())
    });
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["apply", "warpdrive"], "unknown congestion control 'warpdrive'"),
        (vec!["apply", "reno", "--netns", "bbrscope-no-such-ns"], "no network namespace named"),
        (vec!["apply", "reno", "--netns", "/etc/hostname"], "not a network namespace"),
        (vec!["apply", "reno", "--cgroup", "/sys/fs/cgroup/no-such-cgroup-here"], "does not exist"),
        (vec!["apply", "reno", "--route", "203.0.113.0"], "not a route prefix"),
        (vec!["apply", "reno", "--route", "203.0.113.9/24"], "host bits set"),
        (vec!["apply", "reno", "--cgroup", "/tmp", "--netns", "x"], "cannot be combined"),
        (vec!["apply", "reno", "--persist", "--no-persist"], "cannot be used with"),
        (vec!["apply", "reno", "--qdisc", "nosuchqdisc", "--dry-run"], "cannot create qdisc 'nosuchqdisc'"),
        (vec!["apply", "reno", "--qdisc", "fq\nnet.ipv4.ip_forward = 1", "--dry-run"], "not a qdisc name"),
        (vec!["apply", "reno", "--qdisc", "ingress", "--dry-run"], "cannot be a default qdisc"),
        (vec!["revert", "--netns", "bbrscope-no-such-ns"], "no network namespace named"),
        (vec!["revert", "--netns", "/etc/hostname"], "not a network namespace"),
        (vec!["revert", "--cgroup", "/sys/fs/cgroup/no-such-cgroup-here"], "does not exist"),
        (vec!["revert", "--cgroup", "/tmp", "--netns", "x"], "cannot be combined"),
        (vec!["revert", "--route", "203.0.113.9/24"], "host bits set"),
        (vec!["apply", "--sysctl", "net.ipv4.ip_forward=1"], "not a setting bbrscope changes"),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_wmem=4096 16384"], "expected three decimal byte counts"),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=2"], "expected one decimal integer from 0 to 1"),
        // The kernel reads these as octal and prints them back otherwise: recorded as given,
        // they read as "not set" and revert left them.
        (vec!["apply", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=00"], "no sign or leading zero"),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=01"], "no sign or leading zero"),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=+1"], "no sign or leading zero"),
        (
            vec!["apply", "--sysctl", "net.ipv4.tcp_fastopen=1", "--sysctl", "net.ipv4.tcp_fastopen=3"],
            "net.ipv4.tcp_fastopen is given twice",
        ),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_congestion_control=reno"], "give the algorithm"),
        (vec!["apply", "--sysctl", "tcp_wmem"], "expected KEY=VALUE"),
        (vec!["apply", "--sysctl", "net.ipv4.tcp_fastopen=3", "--route", "203.0.113.0/24"], "sets a namespace's"),
        (vec!["apply", "--route", "203.0.113.0/24", "--initcwnd", "0"], "expected 1 to 128 segments"),
        (vec!["apply", "--route", "203.0.113.0/24", "--initcwnd", "100000"], "expected 1 to 128 segments"),
        (vec!["apply", "--route", "203.0.113.0/24", "--initrwnd", "lots"], "--initrwnd"),
        (vec!["apply", "--initcwnd", "32"], "--route"),
        (vec!["apply", "--cgroup", "/sys/fs/cgroup", "--sysctl", "net.ipv4.tcp_fastopen=3"], "sets a namespace's"),
        (vec!["apply", "--allow", "--sysctl", "net.ipv4.tcp_fastopen=3"], "--allow is about an algorithm"),
        (vec!["apply"], "ALGORITHM"),
    ];
    // A qdisc this kernel cannot create is refused by name, like one that exists nowhere.
    let kernel = apply::algo::Kernel::discover().unwrap();
    if kernel.has_qdisc("fq_codel") == Some(false) {
        cases.push((vec!["apply", "reno", "--qdisc", "fq_codel", "--dry-run"], "cannot create qdisc 'fq_codel'"));
    }
    if let Some(v1) = &v1 {
        cases.push((vec!["apply", "reno", "--cgroup", v1], "cgroup v1"));
    }
    for (args, expect) in cases {
        let o = fx.bbrscope(None, &args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert!(o.stderr.contains(expect), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
    }
    let o = fx.bbrscope(None, &["apply", "reno", "--qdisc", "nosuchqdisc", "--dry-run"]);
    assert!(o.stderr.contains("pfifo_fast"), "names the qdiscs there are: {o}");
    let o = fx.bbrscope(None, &["apply", "warpdrive"]);
    for a in words(AVAILABLE) {
        assert!(o.stderr.contains(&a), "lists the available algorithms: {o}");
    }
    assert_eq!(std::fs::read_dir(fx.root.path()).unwrap().count(), 0, "nothing written");
    fx.assert_host_unchanged();
}

/// A throwaway cgroup v2 directory, removed on drop (its processes have exited by then).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new() -> Self {
        let mount = cgroup2_mount().expect("cgroup v2 is mounted");
        let path = mount.mount_point.join(unique_name("cg"));
        std::fs::create_dir(&path).unwrap();
        Cgroup(path)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Forks a child that joins `cgroup`, connects to `to` and holds the connection until killed.
fn connect_from_cgroup(cgroup: &Path, to: SocketAddr) -> libc::pid_t {
    let procs = std::ffi::CString::new(cgroup.join("cgroup.procs").to_str().unwrap()).unwrap();
    let SocketAddr::V4(to) = to else { unreachable!() };
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*to.ip()).to_be() },
        sin_zero: [0; 8],
    };
    // SAFETY: the child only makes system calls and exits (see below), which is sound after fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Only system calls between fork and exit.
        // SAFETY: in the child right after fork: only async-signal-safe calls follow.
        unsafe {
            let f = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if f < 0 || libc::write(f, b"0".as_ptr().cast(), 1) != 1 {
                libc::_exit(1);
            }
            let s = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            if libc::connect(s, (&raw const sin).cast(), size_of::<libc::sockaddr_in>() as u32) != 0 {
                libc::_exit(2);
            }
            libc::pause();
            libc::_exit(0);
        }
    }
    pid
}

/// The algorithm a process inside `cgroup` gets for a new loopback connection (read by ss while
/// it holds the connection), and the one a connection from outside (this process) gets.
fn inside_and_outside(cgroup: &Path) -> (String, String) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let child = connect_from_cgroup(cgroup, addr);
    let _accepted = l.accept().unwrap();
    let inside = ss_algorithm(&format!("dport = :{}", addr.port()));
    // SAFETY: kill and waitpid on the pid of the child this test forked.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let outside = TcpStream::connect(addr).unwrap();
    let _a = l.accept().unwrap();
    (inside, congestion_of(&outside))
}

#[test]
fn cgroup_scope_inside_gets_it_outside_does_not_and_revert_detaches() {
    let fx = Fixture::new();
    let cg = Cgroup::new();
    let default = tcp_congestion_control();
    // Any available algorithm: the program sets it with the kernel's privilege, allowed or not.
    let algo = other_algorithm(&default, false);
    let cgpath = cg.0.to_str().unwrap();

    let o = fx.bbrscope(None, &["apply", &algo, "--cgroup", cgpath]).ok();
    // The proof is a connection from a process inside the cgroup; the accepting side, outside
    // it, is shown only as the contrast.
    let proof = format!("verified: new TCP connection from a process in {cgpath} to 127.0.0.1:");
    assert!(o.stdout.lines().any(|l| l.contains(&proof) && l.ends_with(&format!("got {algo}"))), "{o}");
    assert!(o.stdout.contains(&format!("contrast: its accepting side, in bbrscope's own cgroup got {default}")), "{o}");
    let ino = std::fs::metadata(&cg.0).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let pin = apply::cgroup::pin_path(ino);
    assert!(pin.exists(), "the link is pinned, so it outlives bbrscope");
    assert_eq!(inside_and_outside(&cg.0), (algo.clone(), default.clone()), "inside gets it, outside does not");

    let o = fx.bbrscope(None, &["apply", &algo, "--cgroup", cgpath]);
    assert!(o.stdout.contains("already in place"), "{o}");

    fx.bbrscope(None, &["revert", "--cgroup", cgpath]).ok();
    assert!(!pin.exists());
    let (attached, _) = apply::cgroup::attached(&cg.0, false).unwrap();
    assert!(attached.iter().all(|a| !a.is_ours()), "detached: {attached:?}");
    assert_eq!(inside_and_outside(&cg.0).0, default, "after revert the cgroup gets the default again");
    fx.assert_host_unchanged();
}

/// A cgroup removed after apply: its pin stays, but `status` says it applies to nothing (not
/// "attached"), and `revert --cgroup` of the gone path removes the pin and the record.
#[test]
fn status_tells_a_pin_on_a_removed_cgroup_applies_to_nothing() {
    let fx = Fixture::new();
    let cg = Cgroup::new();
    let cgpath = cg.0.to_str().unwrap().to_string();
    let algo = other_algorithm(&tcp_congestion_control(), false);
    fx.bbrscope(None, &["apply", &algo, "--cgroup", &cgpath]).ok();
    let ino = std::fs::metadata(&cg.0).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let pin = apply::cgroup::pin_path(ino);
    let status = |fx: &Fixture| -> serde_json::Value {
        serde_json::from_str(&fx.bbrscope(None, &["status", "--json"]).ok().stdout).unwrap()
    };
    let s = status(&fx);
    assert!(s["bbrscope"][0]["now"].as_str().unwrap().contains("attached"), "{s}");
    std::fs::remove_dir(&cg.0).unwrap();
    let s = status(&fx);
    let now = s["bbrscope"][0]["now"].as_str().unwrap();
    assert!(now.contains("no longer exists") && !now.contains("attached"), "{s}");
    assert!(s["warnings"].to_string().contains("applies to nothing"), "{s}");
    assert!(pin.exists(), "status only reads");
    fx.bbrscope(None, &["revert", "--cgroup", &cgpath]).ok();
    assert!(!pin.exists() && !fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

#[test]
fn route_scope_sets_congctl_on_one_prefix_only() {
    let fx = Fixture::new();
    let link = Link::new("route");
    let prefix = link.prefix();
    let default = link.a.cc();
    let algo = other_algorithm(&default, false);
    let scope = ["--netns", &link.a.name, "--route", &prefix];

    fx.bbrscope(None, &[&["apply", &algo][..], &scope].concat()).ok();
    let routes = link.a.exec("ip", &["route", "show", &prefix]);
    assert!(routes.contains(&format!("congctl {algo}")), "{routes}");
    assert!(
        routes.contains("proto kernel") && routes.contains(&format!("src {}", link.a_ip)),
        "the rest of the route is kept: {routes}"
    );
    assert_eq!(link_connection(&link), (algo.clone(), algo.clone()), "connections over the route get it");
    assert_eq!(loopback_connection(&link.a).0, default, "other destinations keep the default");

    let o = fx.bbrscope(None, &[&["apply", &algo][..], &scope].concat());
    assert!(o.stdout.contains("already in place"), "{o}");

    // `--route A,B` as apply takes it: each prefix named is reverted where one was recorded.
    let two = format!("{prefix},198.18.9.0/24");
    fx.bbrscope(None, &["revert", "--netns", &link.a.name, "--route", &two]).ok();
    let routes = link.a.exec("ip", &["route", "show", &prefix]);
    assert!(!routes.contains("congctl"), "{routes}");
    assert_eq!(link_connection(&link).0, default);

    let o = fx.bbrscope(None, &["apply", &algo, "--netns", &link.a.name, "--route", "198.18.9.0/24"]);
    assert_eq!(o.code, Some(2), "no such route: {o}");
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

#[test]
fn default_qdisc_is_reapplied_only_where_the_kernel_put_it() {
    require_root();
    let ns = Netns::new("qdisc");
    // Made inside the namespace, so the name only has to be free there.
    let ifb = "bbrs-ifb";
    ns.exec("ip", &["link", "add", ifb, "type", "ifb"]);
    ns.exec("ip", &["link", "set", ifb, "up"]);
    let root_qdisc = || bbrscope::sys::qdisc::roots().unwrap().into_iter().find(|q| q.ifname == ifb).unwrap();
    ns.enter(|| {
        let q = root_qdisc();
        assert!(q.is_kernel_default(), "{q:?}");
        bbrscope::sys::qdisc::reapply_default(ifb).unwrap();
        let again = root_qdisc();
        assert!(again.is_kernel_default() && again.kind == q.kind, "the default came back: {again:?}");
    });
    ns.exec("tc", &["qdisc", "replace", "dev", ifb, "root", "handle", "1:", "htb"]);
    let custom = ns.enter(root_qdisc);
    assert!(!custom.is_kernel_default() && !custom.needs_reapply("fq"), "custom qdiscs are left alone: {custom:?}");
}

/// A failed write to stdout is one line on stderr and exit 1 — after a change, naming it and
/// the way back — and a closed pipe a quiet exit 0; never a panic.
#[test]
fn a_failed_stdout_is_one_line_and_a_closed_pipe_is_quiet() {
    let fx = Fixture::new();
    let ns = Netns::new("out");
    let name = ns.name.as_str();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);

    for args in [&["status"][..], &["status", "--json"], &["apply", &algo, "--dry-run"], &["revert"]] {
        let o = fx.bbrscope_to(Some(&ns), args, full());
        assert_eq!(o.code, Some(1), "{args:?}: {o}");
        assert!(o.stderr.contains("writing to standard output: No space left on device"), "{args:?}: {o}");
        assert_eq!(o.stderr.lines().count(), 1, "{args:?}: one line: {o}");

        let o = fx.bbrscope_to(Some(&ns), args, closed_pipe());
        assert_eq!(o.code, Some(0), "{args:?}: a closed pipe is a quiet exit: {o}");
        assert_eq!(o.stderr, "", "{args:?}");
    }

    let o = fx.bbrscope_to(None, &["apply", &algo, "--netns", name], full());
    assert_eq!(o.code, Some(1), "{o}");
    assert_eq!(o.stderr.lines().count(), 1, "one line: {o}");
    assert!(o.stderr.contains(&format!("netns {name} now uses {algo}")), "says what changed: {o}");
    assert!(o.stderr.contains(&format!("bbrscope revert --netns {name}")), "says how to undo it: {o}");
    assert_eq!(ns.cc(), algo, "the change stays, as the message says");

    let o = fx.bbrscope_to(None, &["revert", "--netns", name], full());
    assert_eq!(o.code, Some(1), "{o}");
    assert!(o.stderr.contains(&format!("reverted netns {name}")), "{o}");
    assert_eq!(ns.cc(), before);

    // Started with stdout closed (`>&-`): refused before anything changes, not lost unseen.
    let mut c = fx.command(None, &["apply", &algo, "--netns", name]);
    // SAFETY: close(2) on a descriptor number is async-signal-safe, as pre_exec requires.
    unsafe {
        c.pre_exec(|| {
            libc::close(libc::STDOUT_FILENO);
            Ok(())
        });
    }
    let o = c.stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("standard output is closed") && stderr.lines().count() == 1, "{stderr}");
    assert_eq!(ns.cc(), before, "nothing was changed");
    assert!(!fx.path(STATE).exists());

    fx.bbrscope_to(None, &["apply", &algo, "--netns", name], closed_pipe());
    assert_eq!(ns.cc(), algo);
    let o = fx.bbrscope_to(None, &["revert", "--netns", name], closed_pipe());
    assert_eq!((o.code, o.stderr.as_str()), (Some(0), ""), "{o}");
    assert_eq!(ns.cc(), before);
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

/// A state directory that has filled up (here a 256 KiB filesystem of its own, in a mount
/// namespace of the test's, filled after the apply): revert still undoes the change and drops
/// its record, taking the space bbrscope kept in reserve beside it.
#[test]
fn revert_undoes_a_change_when_the_state_directory_is_full() {
    let fx = Fixture::new();
    let ns = Netns::new("full");
    let name = ns.name.as_str();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    let dir = fx.path("var/lib/bbrscope");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = env!("CARGO_BIN_EXE_bbrscope");
    let root = fx.root.path().to_str().unwrap();
    // The mount goes with the namespace when the script ends: nothing to unmount.
    let script = format!(
        "set -e; mount -t tmpfs -o size=256k,mode=755 bbrscope-test {dir}
         {bin} apply {algo} --netns {name} --root {root} >/dev/null
         dd if=/dev/zero of={dir}/filler bs=4k 2>/dev/null || true
         if echo x > {dir}/probe 2>/dev/null; then echo 'not full'; exit 9; fi
         {bin} revert --netns {name} --root {root} && echo rc=0 || echo rc=$?
         ls -a {dir}",
        dir = dir.display()
    );
    let out =
        Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("rc=0") && stdout.contains(&format!("netns {name}: reverted")), "{stdout}{stderr}");
    assert_eq!(ns.cc(), before, "the change was undone");
    assert!(!stdout.lines().any(|l| l == "state.json"), "the record went with the change: {stdout}");
    fx.assert_host_unchanged();
}

/// A state directory another user could write (a sticky 1777 one, or another user's): the
/// apply is refused up front, exit 2, with nothing changed and nothing made in it, since a
/// record kept there would be refused by every later run, the change with it.
#[test]
fn a_state_directory_others_can_write_is_refused_before_any_change() {
    use std::os::unix::fs::PermissionsExt as _;
    let fx = Fixture::new();
    let ns = Netns::new("sticky");
    let name = ns.name.as_str();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    let dir = fx.path("var/lib/bbrscope");
    std::fs::create_dir_all(&dir).unwrap();
    for (mode, owner) in [(0o1777, 0), (0o755, 65534)] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&dir, Some(owner), None).unwrap();
        let o = fx.bbrscope(None, &["apply", &algo, "--netns", name]);
        assert_eq!(o.code, Some(2), "{o}");
        assert_eq!(o.stderr.lines().count(), 1, "{o}");
        assert!(o.stderr.contains("refusing") && o.stderr.contains("can be written by others"), "{o}");
        assert_eq!(ns.cc(), before, "nothing changed");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing made in it");
    }
    fx.assert_host_unchanged();
}

/// Without root, changing a namespace is a missing privilege: exit 2 and one line, nothing changed.
#[test]
fn not_root_is_a_missing_privilege() {
    let fx = Fixture::new();
    let ns = Netns::new("user");
    let name = ns.name.as_str();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    // Readable by anyone, as /var/lib/bbrscope is; writable only by root.
    std::fs::set_permissions(fx.root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    const NOBODY: u32 = 65534;
    for args in [
        &["apply", &algo, "--netns", name][..],
        &["apply", &algo, "--netns", name, "--dry-run"],
        &["revert", "--netns", name],
        &["status", "--netns", name],
    ] {
        let o = fx.command(None, args).uid(NOBODY).gid(NOBODY).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(stderr.contains("root"), "{args:?}: says what is missing: {stderr}");
    }
    assert_eq!(ns.cc(), before);
    assert_eq!(std::fs::read_dir(fx.root.path()).unwrap().count(), 0, "nothing written");
    fx.assert_host_unchanged();
}

/// Two applies on one scope at once: the second waits for the first, plans from its result,
/// and the record ends as the machine does, so revert restores what was there before both. On a
/// route, whose congctl is not bound by the allowed list, so the two and the value before them
/// can all differ.
#[test]
fn concurrent_applies_serialise() {
    let fx = Fixture::new();
    let link = Link::new("lock");
    let prefix = link.prefix();
    let available = words(AVAILABLE);
    let (a, b) = (available[0].as_str(), available[1].as_str());
    let congctl = || {
        let routes = link.a.exec("ip", &["route", "show", &prefix]);
        routes.split_whitespace().skip_while(|w| *w != "congctl").nth(1).map(str::to_string)
    };
    let scope = ["--netns", &link.a.name, "--route", &prefix];
    for round in 0..3 {
        let spawn = |algo: &str| {
            fx.command(None, &[&["apply", algo][..], &scope].concat())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (first, second) = (spawn(a), spawn(b));
        let (first, second) = (first.wait_with_output().unwrap(), second.wait_with_output().unwrap());
        let text = |o: &std::process::Output| {
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
        };
        let (ta, tb) = (text(&first), text(&second));
        assert!(first.status.success() && second.status.success(), "round {round}:\n{ta}\n{tb}");
        assert!(
            ta.contains(&format!("got {a}")) && tb.contains(&format!("got {b}")),
            "each verified its own:\n{ta}\n{tb}"
        );
        // Whichever ran second started from the first one's result.
        let saw = |t: &str, other: &str| t.contains(&format!(", congctl {other}"));
        assert!(saw(&ta, b) != saw(&tb, a), "round {round}: exactly one planned after the other:\n{ta}\n{tb}");
        let state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fx.path(STATE)).unwrap()).unwrap();
        let now = congctl();
        assert_eq!(state["entries"][0]["algorithm"].as_str(), now.as_deref(), "the record says what the machine has");
        fx.bbrscope(None, &[&["revert"][..], &scope].concat()).ok();
        assert_eq!(congctl(), None, "round {round}: revert restores the route as it was before both");
        assert!(!fx.path(STATE).exists());
    }
    fx.assert_host_unchanged();
}

/// Every file below `dir`, recursively.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(files_below(&p)) } else { out.push(p) }
    }
    out
}

/// Ctrl-C at any moment of an apply leaves either nothing or exactly what `status` reports,
/// and no temporary files.
#[test]
fn sigint_at_any_moment_leaves_nothing_or_what_status_reports() {
    let fx = Fixture::new();
    let ns = Netns::new("sigint");
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    let (mut applied, mut untouched) = (0, 0);
    // Every millisecond while the run is short of its change (about 10 ms here), then sparser.
    for delay_ms in (0..=24).chain((26..=40).step_by(2)) {
        let child =
            fx.command(Some(&ns), &["apply", &algo]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        // SAFETY: kill(2) on the pid of a child not yet waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let temporaries: Vec<_> =
            files_below(fx.root.path()).into_iter().filter(|p| p.to_string_lossy().contains(".bbrscope-")).collect();
        assert!(temporaries.is_empty(), "{delay_ms} ms: temporary files left: {temporaries:?}");
        let status: serde_json::Value =
            serde_json::from_str(&fx.bbrscope(Some(&ns), &["status", "--json"]).ok().stdout).unwrap();
        let recorded = status["bbrscope"].as_array().unwrap();
        let drift = status["warnings"].as_array().unwrap().iter().any(|w| {
            let w = w.as_str().unwrap();
            w.contains("bbrscope set") || w.contains("interrupted")
        });
        assert!(!drift, "{delay_ms} ms: the record and the machine disagree: {status}");
        if recorded.is_empty() {
            untouched += 1;
            assert_eq!(ns.cc(), before, "{delay_ms} ms: nothing recorded, so nothing changed: {stderr}");
            assert!(!fx.path(DROPIN).exists(), "{delay_ms} ms: {stderr}");
        } else {
            applied += 1;
            assert_eq!(recorded[0]["algorithm"], algo.as_str(), "{delay_ms} ms");
            assert_eq!(status["system"]["default"], algo.as_str(), "{delay_ms} ms: status reports what is there");
            assert!(std::fs::read_to_string(fx.path(DROPIN)).unwrap().contains(&algo), "{delay_ms} ms");
            fx.bbrscope(Some(&ns), &["revert"]).ok();
            assert_eq!(ns.cc(), before);
        }
    }
    eprintln!("interrupted before any change: {untouched}, after the change was recorded: {applied}");
    fx.assert_host_unchanged();
}

/// bbrscope's own observer (here a `stream`) only reads connections: apply names it as such and
/// does not warn of it as a sock_ops program that could set algorithms.
#[test]
fn apply_names_bbrscopes_own_observer_without_warning_of_it() {
    let fx = Fixture::new();
    let ns = Netns::new("ownobs");
    let stream = Stream::start(&["--port", "9"]);
    let o = fx.bbrscope(Some(&ns), &["apply", &other_algorithm(&ns.cc(), true), "--dry-run", "--json"]).ok();
    let (code, _, stderr) = stream.stop();
    assert_eq!(code, 0, "{stderr}");
    let plan: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let sock_ops: Vec<&serde_json::Value> =
        plan["scopes"][0]["checks"].as_array().unwrap().iter().filter(|c| c["topic"] == "sock_ops").collect();
    assert_eq!(sock_ops.len(), 1, "{sock_ops:?}");
    assert_eq!(sock_ops[0]["level"], "info", "{sock_ops:?}");
    assert!(sock_ops[0]["text"].as_str().unwrap().contains("bbrscope's own observers are loaded"), "{sock_ops:?}");
    fx.assert_host_unchanged();
}

/// A revert killed outright at any moment leaves the record either claiming what the machine
/// still has, or the `reverting` intent (which `status` names and is not a claim), never a change
/// already undone; the next run finishes it. The hand-made case: killed after every undo and
/// before its last write, with a drop-in whose earlier content bbrscope had written (undone
/// already: it must not read as "edited since" and stay recorded).
#[test]
fn a_killed_revert_never_leaves_the_record_ahead() {
    let fx = Fixture::new();
    let ns = Netns::new("killrev");
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    let (mut whole, mut midway) = (0, 0);
    for delay_ms in kill_delays_ms() {
        fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
        fx.killed_after(Some(&ns), &["revert"], delay_ms);
        let status: serde_json::Value =
            serde_json::from_str(&fx.bbrscope(Some(&ns), &["status", "--json"]).ok().stdout).unwrap();
        let recorded = status["bbrscope"].as_array().unwrap();
        let interrupted = status["warnings"].to_string().contains("a revert of");
        if !recorded.is_empty() {
            // Recorded: the machine has it.
            assert_eq!(ns.cc(), algo, "{delay_ms} ms: the record claims {algo}: {status}");
            assert!(fx.path(DROPIN).exists(), "{delay_ms} ms: {status}");
            whole += 1;
        } else if interrupted {
            midway += 1;
        } else {
            assert_eq!(ns.cc(), before, "{delay_ms} ms: nothing recorded: {status}");
            assert!(!fx.path(STATE).exists() && !fx.path(DROPIN).exists(), "{delay_ms} ms");
        }
        let o = fx.bbrscope(Some(&ns), &["revert"]).ok();
        assert_eq!(ns.cc(), before, "{delay_ms} ms: {o}");
        assert!(!fx.path(STATE).exists() && !fx.path(DROPIN).exists(), "{delay_ms} ms: {o}");
    }
    eprintln!("killed before the revert began: {whole}, midway: {midway}");

    // A drop-in bbrscope wrote earlier (its record since gone), then an apply over it: the
    // record's earlier content is that drop-in.
    fx.bbrscope(Some(&ns), &["apply", &before]).ok();
    let earlier = std::fs::read_to_string(fx.path(DROPIN)).unwrap();
    std::fs::remove_file(fx.path(STATE)).unwrap();
    fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    let mut state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fx.path(STATE)).unwrap()).unwrap();
    assert_eq!(ns.cc(), algo);
    // Everything undone by hand as the killed revert had done it, the record not yet written.
    ns.enter(|| std::fs::write("/proc/sys/net/ipv4/tcp_congestion_control", &before)).unwrap();
    fx.write(DROPIN, &earlier);
    state["reverting"] = state["entries"][0].clone();
    state["entries"] = serde_json::json!([]);
    fx.write(STATE, &state.to_string());
    let status: serde_json::Value =
        serde_json::from_str(&fx.bbrscope(Some(&ns), &["status", "--json"]).ok().stdout).unwrap();
    assert!(status["warnings"].to_string().contains("was interrupted midway"), "status tells: {status}");
    assert_eq!(status["bbrscope"], serde_json::json!([]), "an intent is not a recorded change");
    let o = fx.bbrscope(Some(&ns), &["revert"]).ok();
    assert!(o.stderr.contains("an earlier revert of") && o.stderr.contains("it is finished now"), "{o}");
    assert!(!fx.path(STATE).exists(), "nothing stays recorded: {o}");
    assert_eq!(std::fs::read_to_string(fx.path(DROPIN)).unwrap(), earlier);
    assert_eq!(ns.cc(), before);
    fx.assert_host_unchanged();
}

/// When the killed-run tests cut a run off: every millisecond through the first 24 (where an
/// apply or a revert does its work on this machine), then every 2 ms to 40.
fn kill_delays_ms() -> impl Iterator<Item = u64> {
    (0..=24).chain((26..=40).step_by(2))
}

/// A run killed outright (SIGKILL: nothing can be deferred) leaves its intent recorded; the
/// next apply or revert rolls back what it had changed and removes its temporary files, so the
/// record and the machine agree again.
#[test]
fn a_killed_run_is_reconciled_by_the_next() {
    let fx = Fixture::new();
    let ns = Netns::new("kill");
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    for delay_ms in kill_delays_ms() {
        fx.killed_after(Some(&ns), &["apply", &algo], delay_ms);
        // `revert` takes the lock, reconciles, then reverts whatever is recorded.
        let o = fx.bbrscope(Some(&ns), &["revert"]).ok();
        assert_eq!(ns.cc(), before, "{delay_ms} ms: {o}");
        assert!(!fx.path(STATE).exists() && !fx.path(DROPIN).exists(), "{delay_ms} ms: {o}");
        let temporaries: Vec<_> =
            files_below(fx.root.path()).into_iter().filter(|p| p.to_string_lossy().contains(".bbrscope-")).collect();
        assert!(temporaries.is_empty(), "{delay_ms} ms: temporary files left: {temporaries:?}");
    }
    // Killed after its changes and before its record: the intent is all the state file holds.
    fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    let mut state: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fx.path(STATE)).unwrap()).unwrap();
    state["pending"] = state["entries"][0].clone();
    state["entries"] = serde_json::json!([]);
    fx.write(STATE, &state.to_string());
    let status: serde_json::Value =
        serde_json::from_str(&fx.bbrscope(Some(&ns), &["status", "--json"]).ok().stdout).unwrap();
    assert!(status["warnings"].to_string().contains("interrupted midway"), "status tells: {status}");
    assert_eq!(status["bbrscope"], serde_json::json!([]), "an intent is not a recorded change");
    let o = fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    assert!(o.stderr.contains("was interrupted midway: what it had changed was rolled back"), "{o}");
    assert!(o.stdout.contains(&format!("got {algo}")), "then applies from the rolled-back state: {o}");
    fx.bbrscope(Some(&ns), &["revert"]).ok();
    assert_eq!(ns.cc(), before, "the value before the killed run is what revert restores");
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

/// The settings beside the algorithm (`--sysctl`) in a namespace the test makes: each reads as
/// set from inside it (`sysctl`, and a new socket's send buffer, which the kernel takes from
/// tcp_wmem's middle value), the record keeps the algorithm applied later beside them, status
/// tells when one drifts, and revert restores the namespace's own values exactly.
#[test]
fn sysctls_beside_the_algorithm_apply_per_namespace_and_revert_exactly() {
    let fx = Fixture::new();
    let ns = Netns::new("tune");
    let name = ns.name.as_str();
    let read = |key: &str| ns.exec("sysctl", &["-n", key]).split_whitespace().collect::<Vec<_>>().join(" ");
    let (wmem, idle, cc) = (read("net.ipv4.tcp_wmem"), read("net.ipv4.tcp_slow_start_after_idle"), ns.cc());
    let sndbuf = || {
        // Unconnected: once established, the kernel grows the buffer with the window.
        ns.enter(|| {
            // SAFETY: socket(2) with constant arguments; the descriptor is owned at once below.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            assert!(fd >= 0);
            // SAFETY: a fresh descriptor nothing else owns.
            let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
            common::sndbuf(&fd, None)
        })
    };
    let tuned = ["--sysctl", "net.ipv4.tcp_wmem=4096 32768 131072", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=0"];

    let o = fx.bbrscope(None, &[&["apply", "--netns", name][..], &tuned].concat()).ok();
    assert_eq!(read("net.ipv4.tcp_wmem"), "4096 32768 131072", "{o}");
    assert_eq!(read("net.ipv4.tcp_slow_start_after_idle"), "0");
    assert_eq!(sndbuf(), 32768, "a new socket's send buffer is tcp_wmem's middle value");
    assert_eq!(ns.cc(), cc, "no algorithm named, none changed");
    assert!(o.stdout.contains(&format!("verified: net.ipv4.tcp_wmem reads 4096 32768 131072 in {name}")), "{o}");
    assert!(o.stdout.contains(&format!("set net.ipv4.tcp_wmem = 4096 32768 131072 (was {wmem})")), "{o}");
    let o = fx.bbrscope(None, &[&["apply", "--netns", name][..], &tuned].concat()).ok();
    assert!(o.stdout.contains("already in place"), "{o}");

    // An algorithm applied afterwards joins the same record; revert later undoes both.
    let algo = other_algorithm(&cc, true);
    fx.bbrscope(None, &["apply", &algo, "--netns", name]).ok();
    let o = fx.bbrscope(None, &["status", "--netns", name]).ok();
    assert!(
        o.stdout.contains(&format!(
            "netns {name} -> {algo}: the default is {algo}; net.ipv4.tcp_wmem is 4096 32768 131072; \
             net.ipv4.tcp_slow_start_after_idle is 0"
        )),
        "{o}"
    );
    ns.exec("sysctl", &["-qw", "net.ipv4.tcp_slow_start_after_idle=1"]);
    let o = fx.bbrscope(None, &["status", "--json"]).ok();
    let status: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let warned = status["warnings"].to_string();
    assert!(
        warned.contains(
            "bbrscope set net.ipv4.tcp_slow_start_after_idle = 0, but net.ipv4.tcp_slow_start_after_idle is 1"
        ),
        "{warned}"
    );
    ns.exec("sysctl", &["-qw", "net.ipv4.tcp_slow_start_after_idle=0"]);

    fx.bbrscope(None, &["revert", "--netns", name]).ok();
    assert_eq!((read("net.ipv4.tcp_wmem"), read("net.ipv4.tcp_slow_start_after_idle"), ns.cc()), (wmem, idle, cc));
    assert!(!fx.path(STATE).exists());

    // net.core's buffer maxima are the host's (read-only in other namespaces): refused in this one.
    let o = fx.bbrscope(None, &["apply", "--netns", name, "--sysctl", "net.core.wmem_max=8388608"]);
    assert_eq!(o.code, Some(2), "{o}");
    assert!(
        o.stdout.contains(&format!(
            "net.core.wmem_max is the host's: only the initial network namespace can change it, not {name}"
        )),
        "{o}"
    );
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

/// On the system scope a setting beside the algorithm is persisted in bbrscope's drop-in next
/// to it; a later apply of the algorithm keeps the line, revert removes the file.
#[test]
fn a_system_sysctl_is_persisted_beside_the_algorithm() {
    let fx = Fixture::new();
    let ns = Netns::new("tunesys");
    let idle = ns.exec("sysctl", &["-n", "net.ipv4.tcp_slow_start_after_idle"]).trim().to_string();
    let algo = other_algorithm(&ns.cc(), true);
    fx.bbrscope(Some(&ns), &["apply", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=0"]).ok();
    let written = std::fs::read_to_string(fx.path(DROPIN)).unwrap();
    assert!(written.ends_with("\nnet.ipv4.tcp_slow_start_after_idle = 0\n"), "{written}");
    assert!(!written.contains("tcp_congestion_control"), "{written}");
    fx.bbrscope(Some(&ns), &["apply", &algo]).ok();
    let written = std::fs::read_to_string(fx.path(DROPIN)).unwrap();
    assert!(
        written.contains("net.ipv4.tcp_slow_start_after_idle = 0\n")
            && written.contains(&format!("net.ipv4.tcp_congestion_control = {algo}\n")),
        "{written}"
    );
    fx.bbrscope(Some(&ns), &["revert"]).ok();
    assert_eq!(ns.exec("sysctl", &["-n", "net.ipv4.tcp_slow_start_after_idle"]).trim(), idle);
    assert!(!fx.path(DROPIN).exists() && !fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

/// `--route PREFIX --initcwnd N`: the route keeps everything else, a new connection over it
/// starts with that window (its TCP_INFO), connections elsewhere keep the kernel's 10, and
/// revert takes the metric off again.
#[test]
fn a_routes_initial_window_is_set_proven_on_a_connection_and_reverted() {
    let fx = Fixture::new();
    let link = Link::new("iw");
    let prefix = link.prefix();
    let first_cwnd = |to: SocketAddr| {
        link.a.enter(|| {
            let c = TcpStream::connect(to).unwrap();
            common::tcp_info(&c).snd_cwnd
        })
    };
    let b: Ipv4Addr = link.b_ip.parse().unwrap();
    let far = link.b.enter(|| TcpListener::bind((b, 0)).unwrap());
    let near = link.a.enter(|| TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
    assert_eq!(first_cwnd(far.local_addr().unwrap()), 10, "the kernel's initial window before");

    let args = ["apply", "--netns", &link.a.name, "--route", &prefix, "--initcwnd", "32"];
    let o = fx.bbrscope(None, &args).ok();
    assert!(o.stdout.contains("gives initcwnd 32"), "verified by the kernel's route lookup: {o}");
    let routes = link.a.exec("ip", &["route", "show", &prefix]);
    assert!(routes.contains("initcwnd 32") && routes.contains("proto kernel"), "{routes}");
    assert_eq!(first_cwnd(far.local_addr().unwrap()), 32, "a new connection over the route");
    assert_eq!(first_cwnd(near.local_addr().unwrap()), 10, "other destinations keep the kernel's");
    let o = fx.bbrscope(None, &args).ok();
    assert!(o.stdout.contains("already in place"), "{o}");

    fx.bbrscope(None, &["revert", "--netns", &link.a.name, "--route", &prefix]).ok();
    let routes = link.a.exec("ip", &["route", "show", &prefix]);
    assert!(!routes.contains("initcwnd"), "{routes}");
    assert_eq!(first_cwnd(far.local_addr().unwrap()), 10);
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

/// `revert --netns NS` undoes what was recorded in NS, its routes included (they were left
/// changed, unnamed, before), and nothing recorded in another namespace.
#[test]
fn revert_of_a_namespace_reverts_its_routes_and_no_others() {
    let fx = Fixture::new();
    let link = Link::new("rvn");
    let (a, b) = (link.a.name.as_str(), link.b.name.as_str());
    let prefix = link.prefix();
    let idle = || link.a.exec("sysctl", &["-n", "net.ipv4.tcp_slow_start_after_idle"]).trim().to_string();
    let before = idle();
    let flipped = if before == "0" { "1" } else { "0" };
    let route = |ns: &Netns| ns.exec("ip", &["route", "show", &prefix]);
    let (route_a, route_b) = (route(&link.a), route(&link.b));

    let sysctl = format!("net.ipv4.tcp_slow_start_after_idle={flipped}");
    fx.bbrscope(None, &["apply", "--netns", a, "--sysctl", &sysctl]).ok();
    fx.bbrscope(None, &["apply", "--netns", a, "--route", &prefix, "--initcwnd", "32"]).ok();
    fx.bbrscope(None, &["apply", "--netns", b, "--route", &prefix, "--initcwnd", "20"]).ok();
    assert!(route(&link.a).contains("initcwnd 32") && route(&link.b).contains("initcwnd 20"));

    let o = fx.bbrscope(None, &["revert", "--netns", a]).ok();
    assert!(o.stdout.contains(&format!("route {prefix} in netns {a}: reverted")), "{o}");
    assert_eq!((idle(), route(&link.a)), (before, route_a), "{o}");
    assert!(route(&link.b).contains("initcwnd 20"), "another namespace's route stays: {o}");

    fx.bbrscope(None, &["revert", "--netns", b]).ok();
    assert_eq!(route(&link.b), route_b);
    assert!(!fx.path(STATE).exists());
    fx.assert_host_unchanged();
}

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
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
};

use bbrscope::{apply, sys::cgroup::cgroup2_mount};
use common::{Link, Netns, command_in, require_root, run, tcp_congestion_control, unique_name};

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
        let root = self.root.path().to_str().unwrap();
        let o = command_in(netns, env!("CARGO_BIN_EXE_bbrscope")).args(args).args(["--root", root]).output().unwrap();
        Run {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
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

fn congestion_of(fd: i32) -> String {
    apply::verify::congestion_of(fd).unwrap()
}

/// Connects to `listener` from inside `from` and returns the client's algorithm by getsockopt
/// and by `ss -tin` (read while the connection is open).
fn client_algorithm(from: &Netns, listener: TcpListener) -> (String, String) {
    let addr = listener.local_addr().unwrap();
    from.enter(|| {
        let c = TcpStream::connect(addr).unwrap();
        let _s = listener.accept().unwrap();
        (congestion_of(c.as_raw_fd()), ss_algorithm(&format!("dport = :{}", addr.port())))
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
    assert!(o.stdout.contains("the next boot gives cubic (/etc/sysctl.conf:2)"), "{o}");
    assert!(!fx.path(DROPIN).exists(), "--no-persist writes no drop-in");
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
    ];
    if let Some(v1) = &v1 {
        cases.push((vec!["apply", "reno", "--cgroup", v1], "cgroup v1"));
    }
    for (args, expect) in cases {
        let o = fx.bbrscope(None, &args);
        assert_eq!(o.code, Some(2), "{args:?}: {o}");
        assert!(o.stderr.contains(expect), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "one line: {}", o.stderr);
    }
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
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // Only system calls between fork and exit.
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
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let outside = TcpStream::connect(addr).unwrap();
    let _a = l.accept().unwrap();
    (inside, congestion_of(outside.as_raw_fd()))
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
    assert!(o.stdout.contains(&format!("got {algo}")), "{o}");
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

    fx.bbrscope(None, &[&["revert"][..], &scope].concat()).ok();
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
    let root_qdisc = || apply::qdisc::roots().unwrap().into_iter().find(|q| q.ifname == ifb).unwrap();
    ns.enter(|| {
        let q = root_qdisc();
        assert!(q.is_kernel_default(), "{q:?}");
        apply::qdisc::reapply_default(ifb).unwrap();
        let again = root_qdisc();
        assert!(again.is_kernel_default() && again.kind == q.kind, "the default came back: {again:?}");
    });
    ns.exec("tc", &["qdisc", "replace", "dev", ifb, "root", "handle", "1:", "htb"]);
    let custom = ns.enter(root_qdisc);
    assert!(!custom.is_kernel_default() && !custom.needs_reapply("fq"), "custom qdiscs are left alone: {custom:?}");
}

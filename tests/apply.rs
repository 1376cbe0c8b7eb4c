//! `bbrscope apply` / `status` / `revert` against the live kernel, as root, only inside network
//! namespaces, cgroups and temporary directories these tests create (and remove). The initial
//! namespace's settings are read, never written: system-scope changes run under
//! `ip netns exec` in a throwaway namespace, with a temporary directory standing in for /.
//!
//! Proof comes from the kernel, not from bbrscope: getsockopt(TCP_CONGESTION) on sockets these
//! tests open themselves, and `ss -tin`.

use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

use bbrscope::{apply, sys::cgroup::cgroup2_mount};

const CC: &str = "/proc/sys/net/ipv4/tcp_congestion_control";
const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";

fn require_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests create network namespaces, cgroups and BPF programs: run them as root"
    );
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap().trim().to_string()
}

fn words(path: &str) -> Vec<String> {
    read(path).split_whitespace().map(str::to_string).collect()
}

fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The initial namespace's settings, to show they are untouched at the end of a test.
struct HostSettings(String, String);

impl HostSettings {
    fn now() -> Self {
        HostSettings(read(CC), read(ALLOWED))
    }

    fn assert_unchanged(&self) {
        assert_eq!((read(CC), read(ALLOWED)), (self.0.clone(), self.1.clone()), "the initial namespace changed");
    }
}

/// A throwaway network namespace (loopback up), deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Self {
        let name = unique("bbrscope-t");
        run_ok("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        run_ok("ip", &["-n", &ns.0, "link", "set", "lo", "up"]);
        ns
    }

    /// Runs `f` on a thread inside the namespace.
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                let file = File::open(format!("/run/netns/{}", self.0)).unwrap();
                assert_eq!(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
                f()
            })
            .join()
            .unwrap()
        })
    }

    fn cc(&self) -> String {
        self.run(|| read(CC))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A throwaway cgroup v2 directory, removed on drop (its processes have exited by then).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new() -> Self {
        let mount = cgroup2_mount().expect("cgroup v2 is mounted");
        let path = mount.mount_point.join(unique("bbrscope-t"));
        std::fs::create_dir(&path).unwrap();
        Cgroup(path)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn run_ok(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(out.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn bbrscope(netns: Option<&Netns>, args: &[&str]) -> Output {
    let exe = env!("CARGO_BIN_EXE_bbrscope");
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.0, exe]);
            c
        }
        None => Command::new(exe),
    };
    cmd.args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("--- stdout\n{}--- stderr\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn congestion_of(fd: i32) -> String {
    apply::verify::congestion_of(fd).unwrap()
}

/// Opens a loopback connection in the calling thread's namespace and returns the client's
/// algorithm and `ss -tin`'s view of it (while the connection is open).
fn loopback_connection(netns: &Netns) -> (String, String) {
    netns.run(|| {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _s = l.accept().unwrap();
        (congestion_of(c.as_raw_fd()), ss_algorithm(&format!("dport = :{port}")))
    })
}

/// The algorithm `ss -tin` shows for the one socket matching `filter` (in the calling
/// thread's namespace: ss opens its netlink socket where it is started).
fn ss_algorithm(filter: &str) -> String {
    let out = run_ok("ss", &["-tinH", filter]);
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

fn temp_root() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("bbrscope-root-").tempdir().unwrap()
}

#[test]
fn system_scope_applies_verifies_is_idempotent_and_reverts() {
    require_root();
    let host = HostSettings::now();
    let ns = Netns::new();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("got {algo}")), "apply verifies on a real socket: {}", text(&o));
    assert!(out.contains("existing connections keep"), "{out}");
    assert_eq!(ns.cc(), algo);
    let (got, ss) = loopback_connection(&ns);
    assert_eq!((got.as_str(), ss.as_str()), (algo.as_str(), algo.as_str()), "getsockopt and ss -tin");
    let dropin = root.path().join("etc/sysctl.d/99-zz-bbrscope.conf");
    let written = std::fs::read_to_string(&dropin).unwrap();
    assert!(written.contains(&format!("net.ipv4.tcp_congestion_control = {algo}")), "{written}");
    let state = root.path().join("var/lib/bbrscope/state.json");
    let recorded = std::fs::read(&state).unwrap();

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("already in place"), "{}", text(&o));
    assert_eq!(std::fs::read(&state).unwrap(), recorded, "a second apply changes nothing");

    let o = bbrscope(Some(&ns), &["status", "--json", "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["system"]["default"], algo.as_str());
    assert_eq!(status["boot"]["value"], algo.as_str());
    assert_eq!(status["bbrscope"][0]["scope"]["type"], "system");

    let o = bbrscope(Some(&ns), &["revert", "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ns.cc(), before);
    assert_eq!(loopback_connection(&ns).0, before);
    assert!(!dropin.exists() && !state.exists(), "revert removes what bbrscope added");
    host.assert_unchanged();
}

#[test]
fn boot_files_are_read_in_order_and_never_edited() {
    require_root();
    let host = HostSettings::now();
    let ns = Netns::new();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let algo = other_algorithm(&ns.cc(), true);
    let conf = root.path().join("etc/sysctl.conf");
    std::fs::create_dir_all(root.path().join("usr/lib/sysctl.d")).unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("usr/lib/sysctl.d/50-vendor.conf"), "net.ipv4.tcp_congestion_control = reno\n").unwrap();
    std::fs::write(&conf, "# site settings\nnet.ipv4.tcp_congestion_control = cubic\n").unwrap();

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", r, "--dry-run"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("/etc/sysctl.conf:2 sets net.ipv4.tcp_congestion_control = cubic and is applied after"),
        "the plan names the file that wins at boot: {out}"
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert!(!root.path().join("etc/sysctl.d").exists() && !root.path().join("var").exists(), "a dry run writes nothing");
    assert_ne!(ns.cc(), algo);

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    let o = bbrscope(Some(&ns), &["revert", "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), "# site settings\nnet.ipv4.tcp_congestion_control = cubic\n");
    assert!(root.path().join("usr/lib/sysctl.d/50-vendor.conf").exists());

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", r, "--no-persist"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("the next boot gives cubic (/etc/sysctl.conf:2)"), "{}", text(&o));
    assert!(!root.path().join("etc/sysctl.d/99-zz-bbrscope.conf").exists(), "--no-persist writes no drop-in");
    assert!(bbrscope(Some(&ns), &["revert", "--root", r]).status.success());
    host.assert_unchanged();
}

#[test]
fn a_failure_midway_rolls_back() {
    require_root();
    let host = HostSettings::now();
    let ns = Netns::new();
    let root = temp_root();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);
    // A file where the drop-in's directory should be: the live change succeeds, the drop-in fails.
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/sysctl.d"), "").unwrap();

    let o = bbrscope(Some(&ns), &["apply", &algo, "--root", root.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("rolled back"), "{}", text(&o));
    assert_eq!(ns.cc(), before, "the live change was rolled back");
    assert!(!root.path().join("var/lib/bbrscope/state.json").exists());
    host.assert_unchanged();
}

#[test]
fn netns_scope_and_the_allowed_list_rule() {
    require_root();
    let host = HostSettings::now();
    let ns = Netns::new();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let before = ns.cc();
    let algo = other_algorithm(&before, true);

    let o = bbrscope(None, &["apply", &algo, "--netns", &ns.0, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(loopback_connection(&ns), (algo.clone(), algo.clone()));
    let o = bbrscope(None, &["status", "--netns", &ns.0, "--root", r]);
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("netns {} -> {algo}: the default is {algo}", ns.0)), "{}", text(&o));
    let o = bbrscope(None, &["revert", "--netns", &ns.0, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ns.cc(), before);

    let o = bbrscope(None, &["apply", &algo, "--netns", "all", "--dry-run", "--root", r]);
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("netns {} -> {algo}", ns.0)), "{}", text(&o));

    // An available algorithm the host does not allow cannot be a namespace's default.
    let allowed = words(ALLOWED);
    if let Some(blocked) = words(AVAILABLE).into_iter().find(|a| !allowed.contains(a)) {
        let o = bbrscope(None, &["apply", &blocked, "--netns", &ns.0, "--root", r]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let out = text(&o);
        assert!(out.contains("tcp_allowed_congestion_control") && out.contains("--allow"), "{out}");
        assert!(out.contains("nothing was changed"), "{out}");
        let o = bbrscope(None, &["apply", &blocked, "--netns", &ns.0, "--allow", "--dry-run", "--root", r]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(String::from_utf8_lossy(&o.stdout).contains("set net.ipv4.tcp_allowed_congestion_control"), "{}", text(&o));
        assert_eq!(ns.cc(), before);
    } else {
        eprintln!("every available algorithm is allowed on this host: the allowed-list refusal cannot occur");
    }
    assert!(!root.path().join("var/lib/bbrscope/state.json").exists());
    host.assert_unchanged();
}

#[test]
fn bad_input_exits_2_and_changes_nothing() {
    require_root();
    let host = HostSettings::now();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let v1 = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find_map(|l| (l.split(" - ").nth(1)?.starts_with("cgroup ")).then(|| l.split_whitespace().nth(4).unwrap().to_string()));
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
        let mut args = args;
        args.extend(["--root", r]);
        let o = bbrscope(None, &args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let o = bbrscope(None, &["apply", "warpdrive", "--root", r]);
    for a in words(AVAILABLE) {
        assert!(String::from_utf8_lossy(&o.stderr).contains(&a), "lists the available algorithms: {}", text(&o));
    }
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "nothing written");
    host.assert_unchanged();
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
    require_root();
    let host = HostSettings::now();
    let cg = Cgroup::new();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let default = read(CC);
    // Any available algorithm: the program sets it with the kernel's privilege, allowed or not.
    let algo = other_algorithm(&default, false);
    let cgpath = cg.0.to_str().unwrap();

    let o = bbrscope(None, &["apply", &algo, "--cgroup", cgpath, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("got {algo}")), "{}", text(&o));
    let ino = std::fs::metadata(&cg.0).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
    let pin = apply::cgroup::pin_path(ino);
    assert!(pin.exists(), "the link is pinned, so it outlives bbrscope");
    assert_eq!(inside_and_outside(&cg.0), (algo.clone(), default.clone()), "inside gets it, outside does not");

    let o = bbrscope(None, &["apply", &algo, "--cgroup", cgpath, "--root", r]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("already in place"), "{}", text(&o));

    let o = bbrscope(None, &["revert", "--cgroup", cgpath, "--root", r]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!pin.exists());
    let (attached, _) = apply::cgroup::attached(&cg.0, false).unwrap();
    assert!(attached.iter().all(|a| !a.is_ours()), "detached: {attached:?}");
    assert_eq!(inside_and_outside(&cg.0).0, default, "after revert the cgroup gets the default again");
    host.assert_unchanged();
}

/// Two namespaces joined by a veth pair: `a` reaches `b` at 198.18.7.2 over the connected route.
struct Link {
    a: Netns,
    b: Netns,
}

impl Link {
    fn new() -> Self {
        let (a, b) = (Netns::new(), Netns::new());
        let (va, vb) = (unique("bsa"), unique("bsb"));
        run_ok("ip", &["link", "add", &va, "netns", &a.0, "type", "veth", "peer", "name", &vb, "netns", &b.0]);
        run_ok("ip", &["-n", &a.0, "addr", "add", "198.18.7.1/24", "dev", &va]);
        run_ok("ip", &["-n", &b.0, "addr", "add", "198.18.7.2/24", "dev", &vb]);
        run_ok("ip", &["-n", &a.0, "link", "set", &va, "up"]);
        run_ok("ip", &["-n", &b.0, "link", "set", &vb, "up"]);
        Link { a, b }
    }

    /// A connection from `a` to `b`: the client's algorithm by getsockopt and by ss.
    fn connection(&self) -> (String, String) {
        let l = self.b.run(|| TcpListener::bind((Ipv4Addr::new(198, 18, 7, 2), 0)).unwrap());
        let addr = l.local_addr().unwrap();
        self.a.run(|| {
            let c = TcpStream::connect(addr).unwrap();
            let _s = l.accept().unwrap();
            (congestion_of(c.as_raw_fd()), ss_algorithm(&format!("dport = :{}", addr.port())))
        })
    }
}

#[test]
fn route_scope_sets_congctl_on_one_prefix_only() {
    require_root();
    let host = HostSettings::now();
    let link = Link::new();
    let root = temp_root();
    let r = root.path().to_str().unwrap();
    let default = link.a.cc();
    let algo = other_algorithm(&default, false);
    let args = ["--netns", &link.a.0, "--route", "198.18.7.0/24", "--root", r];

    let o = bbrscope(None, &[&["apply", &algo][..], &args].concat());
    assert!(o.status.success(), "{}", text(&o));
    let routes = run_ok("ip", &["-n", &link.a.0, "route", "show", "198.18.7.0/24"]);
    assert!(routes.contains(&format!("congctl {algo}")), "{routes}");
    assert!(routes.contains("proto kernel") && routes.contains("src 198.18.7.1"), "the rest of the route is kept: {routes}");
    assert_eq!(link.connection(), (algo.clone(), algo.clone()), "connections over the route get it");
    assert_eq!(loopback_connection(&link.a).0, default, "other destinations keep the default");

    let o = bbrscope(None, &[&["apply", &algo][..], &args].concat());
    assert!(String::from_utf8_lossy(&o.stdout).contains("already in place"), "{}", text(&o));

    let o = bbrscope(None, &[&["revert"][..], &args].concat());
    assert!(o.status.success(), "{}", text(&o));
    let routes = run_ok("ip", &["-n", &link.a.0, "route", "show", "198.18.7.0/24"]);
    assert!(!routes.contains("congctl"), "{routes}");
    assert_eq!(link.connection().0, default);

    let o = bbrscope(None, &["apply", &algo, "--netns", &link.a.0, "--route", "198.18.9.0/24", "--root", r]);
    assert_eq!(o.status.code(), Some(2), "no such route: {}", text(&o));
    assert!(!root.path().join("var/lib/bbrscope/state.json").exists());
    host.assert_unchanged();
}

#[test]
fn default_qdisc_is_reapplied_only_where_the_kernel_put_it() {
    require_root();
    let ns = Netns::new();
    let ifb = unique("bsq");
    run_ok("ip", &["link", "add", &ifb, "netns", &ns.0, "type", "ifb"]);
    run_ok("ip", &["-n", &ns.0, "link", "set", &ifb, "up"]);
    ns.run(|| {
        let find = || apply::qdisc::roots().unwrap().into_iter().find(|q| q.ifname == ifb).unwrap();
        let q = find();
        assert!(q.is_kernel_default(), "{q:?}");
        apply::qdisc::reapply_default(&ifb).unwrap();
        let again = find();
        assert!(again.is_kernel_default() && again.kind == q.kind, "the default came back: {again:?}");
    });
    run_ok("tc", &["-n", &ns.0, "qdisc", "replace", "dev", &ifb, "root", "handle", "1:", "htb"]);
    let custom = ns.run(|| apply::qdisc::roots().unwrap().into_iter().find(|q| q.ifname == ifb).unwrap());
    assert!(!custom.is_kernel_default() && !custom.needs_reapply("fq"), "custom qdiscs are left alone: {custom:?}");
}

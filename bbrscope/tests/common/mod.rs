//! Shared helpers for bbrscope's root integration tests: running the real binary, generating real
//! TCP traffic on loopback or in network namespaces the tests create, and cleaning up.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub(crate) mod prometheus;
pub(crate) mod responses;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::{AsFd, AsRawFd as _},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use bbrscope::sys::sockopt;
use serde_json::Value;

/// Root tests must run (CI runs as root); failing loudly beats skipping silently.
pub(crate) fn require_root() {
    // SAFETY: geteuid takes no arguments.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test loads BPF programs and creates network namespaces: run it as root");
}

/// /dev/full: every write fails with ENOSPC.
pub(crate) fn full() -> std::fs::File {
    std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap()
}

/// The write end of a pipe whose read end is already closed: every write fails with EPIPE.
pub(crate) fn closed_pipe() -> std::os::fd::OwnedFd {
    use std::os::fd::{FromRawFd as _, OwnedFd};
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array it is given.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors were just created and are owned here alone.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

pub(crate) fn bbrscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bbrscope"))
}

/// A running `bbrscope stream`, its NDJSON collected in the background.
pub(crate) struct Stream {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    /// While set, the test stops reading bbrscope's output (as a reader that pauses would).
    paused: Arc<std::sync::atomic::AtomicBool>,
    reader: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
}

impl Stream {
    /// Starts `bbrscope stream ARGS --stats-interval 0.1` and waits until it is attached (its
    /// first `stats` record).
    pub(crate) fn start(args: &[&str]) -> Stream {
        let mut child = bbrscope()
            .arg("stream")
            .args(args)
            .args(["--stats-interval", "0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bbrscope");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        let paused = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let pause = paused.clone();
        let reader = thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                while pause.load(std::sync::atomic::Ordering::Relaxed) {
                    thread::sleep(Duration::from_millis(10));
                }
                let Ok(line) = line else { break };
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                sink.lock().unwrap().push(v);
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let mut s = Stream { child, lines, paused, reader: Some(reader), stderr: Some(stderr) };
        s.wait_for(Duration::from_secs(20), |v| v["type"] == "stats");
        s
    }

    /// Stops (true) or resumes reading bbrscope's output: while stopped, its pipe fills and its
    /// writes block.
    pub(crate) fn pause_reading(&self, paused: bool) {
        self.paused.store(paused, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn records(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until a record matches `pred` (panics with what was seen after `timeout`).
    pub(crate) fn wait_for(&mut self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            if let Some(v) = self.lines.lock().unwrap().iter().find(|v| pred(v)) {
                return v.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("bbrscope exited ({status}) before the expected record; stderr: {}", self.take_stderr());
            }
            assert!(
                start.elapsed() < timeout,
                "no matching record within {timeout:?}; got {} records",
                self.records().len()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn take_stderr(&mut self) -> String {
        let _ = self.child.kill();
        self.stderr.take().map(|h| h.join().unwrap()).unwrap_or_default()
    }

    /// Sends SIGINT, waits for exit, and returns (exit code, records, stderr).
    pub(crate) fn stop(mut self) -> (i32, Vec<Value>, String) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = wait_timeout(&mut self.child, Duration::from_secs(10)).expect("bbrscope did not exit on SIGINT");
        self.reader.take().unwrap().join().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        (status.code().unwrap_or(-1), self.records(), stderr)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child process killed and reaped when dropped, so that one a test started does not outlive
/// an assertion that fails while it runs.
pub(crate) struct Reaped(pub(crate) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Records of `ty` for flow `cookie`.
pub(crate) fn of_flow<'a>(
    records: &'a [Value],
    ty: &'a str,
    cookie: &'a Value,
) -> impl Iterator<Item = &'a Value> + 'a {
    records.iter().filter(move |r| r["type"] == ty && &r["cookie"] == cookie)
}

/// The flow_open record whose `src` or `dst` is `addr`.
pub(crate) fn open_for(records: &[Value], local: SocketAddr) -> Option<Value> {
    records.iter().find(|r| r["type"] == "flow_open" && r["src"] == local.to_string()).cloned()
}

/// setsockopt(TCP_CONGESTION) on any TCP socket (a listener's algorithm is inherited by the
/// connections it accepts).
pub(crate) fn set_cc(fd: impl AsFd, cc: &str) {
    sockopt::set_congestion(fd, cc).unwrap_or_else(|e| panic!("setsockopt(TCP_CONGESTION, {cc}): {e}"));
}

/// setsockopt of an int option; `what` names it in the panic.
pub(crate) fn setsockopt_int(fd: impl AsFd, level: libc::c_int, name: libc::c_int, value: libc::c_int, what: &str) {
    sockopt::set_int(fd, level, name, value).unwrap_or_else(|e| panic!("setsockopt({what}, {value}): {e}"));
}

/// A listener that accepts connections and discards what it reads, counting bytes.
pub(crate) struct Discard {
    pub addr: SocketAddr,
    pub received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Discard {
    pub(crate) fn bind(addr: &str) -> Discard {
        let listener = TcpListener::bind(addr).expect("bind discard server");
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (rx, st) = (received.clone(), stop.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let rx = rx.clone();
                thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 20];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        rx.fetch_add(n as u64, Ordering::Relaxed);
                    }
                });
            }
        });
        Discard { addr, received, stop }
    }
}

impl Drop for Discard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so its thread ends.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Connects to `to` with algorithm `cc` and sends for `duration`, at most `rate_bytes_per_s`
/// (None: as fast as possible). Returns the connected stream's local address via the handle's
/// first message and bytes sent at the end.
pub(crate) struct Sender {
    pub local: SocketAddr,
    handle: JoinHandle<u64>,
}

impl Sender {
    pub(crate) fn start(to: SocketAddr, cc: &str, duration: Duration, rate_bytes_per_s: Option<u64>) -> Sender {
        let stream = TcpStream::connect(to).expect("connect");
        set_cc(&stream, cc);
        Self::run(stream, duration, rate_bytes_per_s)
    }

    /// Sends on an already connected stream (e.g. one created inside a network namespace).
    pub(crate) fn run(mut stream: TcpStream, duration: Duration, rate_bytes_per_s: Option<u64>) -> Sender {
        let local = stream.local_addr().unwrap();
        let handle = thread::spawn(move || {
            let chunk = vec![0x5au8; 64 << 10];
            let start = Instant::now();
            let mut sent = 0u64;
            while start.elapsed() < duration {
                if stream.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len() as u64;
                if let Some(rate) = rate_bytes_per_s {
                    let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        thread::sleep(wait);
                    }
                }
            }
            let _ = stream.shutdown(std::net::Shutdown::Both);
            sent
        });
        Sender { local, handle }
    }

    pub(crate) fn join(self) -> u64 {
        self.handle.join().unwrap()
    }
}

/// A name no other test (of this or a concurrent run) uses: `bbrs-TAG-PID-N`.
pub(crate) fn unique_name(tag: &str) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!("bbrs-{tag}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// Runs `cmd ARGS`, asserts that it succeeded and returns its stdout.
pub(crate) fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(out.status.success(), "{cmd} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `program`, to run inside `netns` (through `ip netns exec`) or, with None, here.
pub(crate) fn command_in(netns: Option<&Netns>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns.name, program]);
            c
        }
        None => Command::new(program),
    }
}

/// The default congestion-control algorithm of the calling thread's network namespace.
pub(crate) fn tcp_congestion_control() -> String {
    let path = "/proc/sys/net/ipv4/tcp_congestion_control";
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
}

/// Moves the calling thread into the network namespace at `path`.
fn join_netns(path: &str) {
    let ns = std::fs::File::open(path).expect("open netns");
    // SAFETY: setns on a descriptor this thread owns; it changes only this thread's namespace.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
}

/// A network namespace made for one test (`ip netns add`, loopback up), deleted on drop.
pub(crate) struct Netns {
    pub name: String,
}

impl Netns {
    pub(crate) fn new(tag: &str) -> Netns {
        let name = unique_name(tag);
        run("ip", &["netns", "add", &name]);
        let ns = Netns { name };
        ns.exec("ip", &["link", "set", "lo", "up"]);
        ns
    }

    /// Runs `cmd ARGS` inside this namespace, asserts that it succeeded and returns its stdout.
    pub(crate) fn exec(&self, cmd: &str, args: &[&str]) -> String {
        let mut full = vec!["netns", "exec", &self.name, cmd];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// Runs `f` on a thread inside this namespace (sockets it creates live there; the calling
    /// thread stays where it is).
    pub(crate) fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = self.path();
        thread::scope(|s| {
            s.spawn(|| {
                join_netns(&path);
                f()
            })
            .join()
            .unwrap()
        })
    }

    /// Runs `f` on a new thread inside this namespace, in the background (threads it spawns
    /// start there too).
    pub(crate) fn spawn<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
        let path = self.path();
        thread::spawn(move || {
            join_netns(&path);
            f()
        })
    }

    /// /run/netns/NAME
    pub(crate) fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// This namespace's default congestion-control algorithm (its tcp_congestion_control).
    pub(crate) fn cc(&self) -> String {
        self.enter(tcp_congestion_control)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// Two namespaces joined by a veth pair: `a` at 10.199.N.1, `b` at 10.199.N.2, on the kernel's
/// connected route for 10.199.N.0/24 ([`Link::prefix`]). Addresses exist only inside these
/// namespaces.
pub(crate) struct Link {
    pub a: Netns,
    pub b: Netns,
    pub a_ip: String,
    pub b_ip: String,
    /// The veth ends in `a` and `b`.
    pub a_dev: String,
    pub b_dev: String,
}

static LINK_SEQ: AtomicU64 = AtomicU64::new(1);

impl Link {
    pub(crate) fn new(tag: &str) -> Link {
        let a = Netns::new(&format!("{tag}a"));
        let b = Netns::new(&format!("{tag}b"));
        let n = (u64::from(std::process::id()) * 7 + LINK_SEQ.fetch_add(1, Ordering::Relaxed)) % 250 + 1;
        let (va, vb) =
            (format!("va{n}x{}", std::process::id() % 10000), format!("vb{n}x{}", std::process::id() % 10000));
        run("ip", &["link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns", &b.name]);
        let (a_ip, b_ip) = (format!("10.199.{n}.1"), format!("10.199.{n}.2"));
        a.exec("ip", &["addr", "add", &format!("{a_ip}/24"), "dev", &va]);
        b.exec("ip", &["addr", "add", &format!("{b_ip}/24"), "dev", &vb]);
        a.exec("ip", &["link", "set", &va, "up"]);
        b.exec("ip", &["link", "set", &vb, "up"]);
        Link { a, b, a_ip, b_ip, a_dev: va, b_dev: vb }
    }

    /// One TCP segment per packet both ways (no GSO super-packets), so that a loss rate applied
    /// per packet is a loss rate per segment.
    pub(crate) fn one_segment_per_packet(&self) {
        self.a.exec("ip", &["link", "set", "dev", &self.a_dev, "gso_max_segs", "1"]);
        self.b.exec("ip", &["link", "set", "dev", &self.b_dev, "gso_max_segs", "1"]);
    }

    /// The /24 both ends are on: "10.199.N.0/24".
    pub(crate) fn prefix(&self) -> String {
        let (net, _) = self.a_ip.rsplit_once('.').unwrap();
        format!("{net}.0/24")
    }
}

/// Parses `ss -tinH` output for the socket with local address `local` into key -> value.
pub(crate) fn ss_info(local: SocketAddr, netns: Option<&Netns>) -> Option<std::collections::HashMap<String, String>> {
    let out = command_in(netns, "ss").args(["-tinH", "state", "established"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 4 && cols[2] == local.to_string() {
            let info = lines.next()?;
            let mut map = std::collections::HashMap::new();
            let mut toks = info.split_whitespace().peekable();
            while let Some(t) = toks.next() {
                match t.split_once(':') {
                    Some((k, v)) => {
                        map.insert(k.to_string(), v.to_string());
                    }
                    None => {
                        // "pacing_rate 12.3Mbps", "delivery_rate 1Gbps", "send 1Mbps"
                        if let Some(v) = toks.peek()
                            && v.chars().next().is_some_and(|c| c.is_ascii_digit())
                        {
                            map.insert(t.to_string(), toks.next().unwrap().to_string());
                        } else {
                            map.insert(t.to_string(), String::new());
                        }
                    }
                }
            }
            return Some(map);
        }
    }
    None
}

/// "12.3Mbps" -> 12_300_000.0
pub(crate) fn parse_bps(s: &str) -> f64 {
    let s = s.trim_end_matches("bps");
    let (num, mult) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1e3),
        Some('M') => (&s[..s.len() - 1], 1e6),
        Some('G') => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>().expect("bps number") * mult
}

/// The kernel's `struct tcp_info` for one socket, read by the test itself with
/// getsockopt(TCP_INFO) (bbrscope's `sockopt` door, which copies fields by their uapi offsets and
/// computes nothing): the reference bbrscope is checked against.
pub(crate) use bbrscope::sys::sockopt::TcpInfo;

/// A socket's send buffer (`SO_SNDBUF`: the kernel's `sk_sndbuf`), after setting it to `set`
/// when given (the kernel doubles what is asked and stops growing it).
pub(crate) fn sndbuf(fd: impl AsFd, set: Option<usize>) -> usize {
    if let Some(v) = set {
        sockopt::set_send_buffer(fd.as_fd(), v).unwrap_or_else(|e| panic!("setsockopt(SO_SNDBUF): {e}"));
    }
    sockopt::send_buffer(fd).unwrap_or_else(|e| panic!("getsockopt(SO_SNDBUF): {e}"))
}

pub(crate) fn tcp_info(fd: impl AsFd) -> TcpInfo {
    let info = sockopt::tcp_info(fd).unwrap_or_else(|e| panic!("getsockopt(TCP_INFO): {e}"));
    assert!(info.len >= 216, "this kernel's tcp_info is too short ({} bytes)", info.len);
    info
}

/// BBR's bandwidth estimate in bytes per second, as the kernel reports it through
/// getsockopt(TCP_CC_INFO); `None` for an algorithm that reports nothing there.
pub(crate) fn bbr_bw_bytes_per_s(fd: impl AsFd) -> Option<u64> {
    sockopt::bbr_bandwidth(fd).unwrap_or_else(|e| panic!("getsockopt(TCP_CC_INFO): {e}"))
}

/// Waits until the socket reaches TCP_CLOSE (its counters are then final) and returns them.
pub(crate) fn final_tcp_info(fd: impl AsFd) -> TcpInfo {
    let start = Instant::now();
    loop {
        let info = tcp_info(fd.as_fd());
        if info.state == sockopt::TCP_CLOSE {
            return info;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "socket never closed: {info:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Drops `percent`% of packets longer than 200 bytes (data, not handshakes or bare ACKs) arriving
/// on TCP port `port` in namespace `ns`, with nftables' in-kernel random numbers.
pub(crate) fn drop_data_packets(ns: &Netns, port: u16, percent: u32, sport: bool) {
    let dir = if sport { "sport" } else { "dport" };
    ns.exec("nft", &["add", "table", "inet", "bbrs"]);
    ns.exec("nft", &["add chain inet bbrs input { type filter hook input priority 0; }"]);
    ns.exec(
        "nft",
        &[&format!(
            "add rule inet bbrs input tcp {dir} {port} meta length > 200 numgen random mod 100 < {percent} drop"
        )],
    );
}

/// `cmd` started with stdout and stderr piped, and its stderr to read a line at a time (the
/// caller drains the rest, or a full pipe blocks the child).
pub(crate) fn spawn_piped(cmd: &mut Command) -> (Child, BufReader<std::process::ChildStderr>) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    (child, err)
}

pub(crate) fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux (installed by scripts/setup.sh)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bbrscope ARGS` in a detached tmux session of the given size; killed on drop. After bbrscope
/// exits, the pane prints its exit status and whether the tty is back in cooked mode (icanon).
pub(crate) struct Session(pub String);

impl Session {
    pub(crate) fn start(tag: &str, width: u16, height: u16, args: &str) -> Session {
        let name = format!("bbrscope-{tag}-{}", std::process::id());
        let cmd = format!(
            "{} {args}; echo EXIT=$?; stty -a | grep -o -- ' -\\?icanon'; sleep 60",
            env!("CARGO_BIN_EXE_bbrscope")
        );
        tmux(&["new-session", "-d", "-s", &name, "-x", &width.to_string(), "-y", &height.to_string(), &cmd]);
        Session(name)
    }

    pub(crate) fn keys(&self, keys: &str) {
        tmux(&["send-keys", "-t", &self.0, keys]);
    }

    pub(crate) fn wait_screen(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let start = std::time::Instant::now();
        loop {
            let text = tmux(&["capture-pane", "-p", "-t", &self.0]);
            if pred(&text) {
                return text;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}; screen:\n{text}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The screen once bbrscope has exited and the tty check has printed.
    pub(crate) fn wait_exit(&self) -> String {
        self.wait_screen("exit and the tty check", |t| t.contains("EXIT=") && t.contains("icanon"))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.0]);
    }
}

//! `bbrscope advise`, as root, on emulated long paths in namespaces the tests make: each finding
//! against a cause built into the scenario (response sizes, a send buffer, idle gaps), its numbers
//! against the clients' own log and the server's getsockopt(TCP_INFO), and the same scenario with
//! the cause removed (the setting changed in the test's namespace) found clear.

mod common;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use bbrscope::advise::checks::rounds;
use bbrscope_emulator::{Link, LinkConfig, LossSpec};
use common::*;
use serde_json::Value;

/// An emulated path of `rtt_ms` at 20 Mbit/s with a BDP of buffer, no loss.
fn path(index: u8, rtt_ms: u64) -> Link {
    let rate_bps = 20_000_000;
    let rtt = Duration::from_millis(rtt_ms);
    let bdp = (rate_bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
    let cfg =
        LinkConfig { rate_bps, rtt, buffer_bytes: bdp.max(64 << 10), loss: LossSpec::NONE, seed: u64::from(index) };
    Link::new(index, &cfg).expect("emulated path")
}

/// A server on `port` in the path's sender namespace answering each `SIZE\n` line of a
/// connection with SIZE bytes (one response per line: keep-alive when the client sends more),
/// with algorithm `cc`. Each connection's TCP_INFO, read after its last response was acked, goes
/// to `infos`.
fn serve(link: &Link, port: u16, cc: &'static str, infos: std::sync::mpsc::Sender<TcpInfo>) -> SocketAddr {
    serve_paced(link, port, cc, infos, None)
}

/// [`serve`], writing each response in pieces of `pace.0` bytes `pace.1` apart when given (an
/// application that produces its response as it goes: a template rendered in parts, a proxy
/// relaying an upstream).
fn serve_paced(
    link: &Link,
    port: u16,
    cc: &'static str,
    infos: std::sync::mpsc::Sender<TcpInfo>,
    pace: Option<(usize, Duration)>,
) -> SocketAddr {
    serve_on(listen(link, port, cc), infos, pace)
}

/// A listener on `port` in the path's sender namespace, with algorithm `cc`.
fn listen(link: &Link, port: u16, cc: &'static str) -> TcpListener {
    let addr = SocketAddr::new(link.sender_addr.into(), port);
    let listener = link.sender.run(move || Ok(TcpListener::bind(addr)?)).unwrap();
    set_cc(&listener, cc);
    listener
}

/// [`serve_paced`] on a listener the caller made (and set its options on: its connections
/// inherit them).
fn serve_on(
    listener: TcpListener,
    infos: std::sync::mpsc::Sender<TcpInfo>,
    pace: Option<(usize, Duration)>,
) -> SocketAddr {
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let infos = infos.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    let size: usize = line.trim().parse().unwrap_or(0);
                    line.clear();
                    let (piece, gap) = pace.unwrap_or((size.max(1), Duration::ZERO));
                    for (i, part) in vec![0x5a; size].chunks(piece).enumerate() {
                        if i > 0 {
                            thread::sleep(gap);
                        }
                        if c.write_all(part).is_err() {
                            return;
                        }
                    }
                }
                // Once the last response is acked no chrono stretch is in progress: the counters
                // are the ones the connection closes with.
                let start = Instant::now();
                while tcp_info(&c).unacked > 0 && start.elapsed() < Duration::from_secs(30) {
                    thread::sleep(Duration::from_millis(5));
                }
                let _ = infos.send(tcp_info(&c));
            });
        }
    });
    addr
}

/// Where the tests' `advise` keeps its advice (`--root`): never the host's /var/lib/bbrscope.
fn scratch_root() -> &'static std::path::Path {
    static ROOT: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Starts `bbrscope advise --json --port PORT --duration SECS` and waits until it watches.
fn start_advise(port: u16, secs: u64) -> Child {
    start_advise_kept(port, secs, scratch_root())
}

/// [`start_advise`], keeping its advice under `root`.
fn start_advise_kept(port: u16, secs: u64, root: &std::path::Path) -> Child {
    start_advise_with(port, secs, root, &[])
}

/// [`start_advise_kept`] with more options.
fn start_advise_with(port: u16, secs: u64, root: &std::path::Path, extra: &[&str]) -> Child {
    let (child, mut err) = spawn_piped(
        bbrscope()
            .args(["advise", "--json", "--port", &port.to_string(), "--duration", &secs.to_string(), "--root"])
            .arg(root)
            .args(extra),
    );
    let mut line = String::new();
    let start = Instant::now();
    while !line.contains("watching flows") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "advise ended before watching");
        assert!(start.elapsed() < Duration::from_secs(30), "advise never started");
    }
    // The rest of stderr, so that a full pipe never blocks it.
    thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

fn finish_advise(mut child: Child) -> Value {
    let status = wait_timeout(&mut child, Duration::from_secs(60)).expect("advise ends at its --duration");
    assert!(status.success(), "{status}");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The findings of `check` in `advice` for the namespace of the path's server.
fn findings<'a>(advice: &'a Value, check: &str, link: &Link) -> Vec<&'a Value> {
    use std::os::unix::fs::MetadataExt as _;
    let ino = link.sender.run(|| Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())).unwrap();
    advice["findings"].as_array().unwrap().iter().filter(|f| f["check"] == check && f["netns_ino"] == ino).collect()
}

fn port_for(base: u16) -> u16 {
    base + (std::process::id() % 10_000) as u16
}

/// Runs the `bbrscope apply` command a finding's change gives (the first in backquotes), with a
/// temporary directory standing in for / (`--root`); then `bbrscope revert` with the same scope
/// options when `revert` is set. Returns the command's arguments after `apply`.
fn run_change(change: &str, root: &std::path::Path) -> Vec<String> {
    let cmd = change.split('`').nth(1).unwrap_or_else(|| panic!("no command in {change:?}"));
    let rest = cmd.strip_prefix("bbrscope apply ").unwrap_or_else(|| panic!("not an apply command: {cmd}"));
    // Through the shell, quotes and all, as a person would paste it.
    let line = format!("{} apply {rest} --root {}", env!("CARGO_BIN_EXE_bbrscope"), root.display());
    let o = std::process::Command::new("sh").args(["-c", &line]).output().unwrap();
    assert!(o.status.success(), "{cmd}: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    rest.split_whitespace().map(str::to_string).collect()
}

/// `bbrscope revert` for the scope options of an `apply` command (its --netns and --route).
fn revert_change(apply_args: &[String], root: &std::path::Path) {
    let mut args = vec!["revert".to_string()];
    for (i, a) in apply_args.iter().enumerate() {
        if a == "--netns" || a == "--route" {
            args.extend([a.clone(), apply_args[i + 1].clone()]);
        }
    }
    let o = bbrscope().args(&args).arg("--root").arg(root).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn responses_of_20_to_60_kb_over_100_ms_need_round_trips_a_larger_initial_window_saves() {
    require_root();
    let link = path(41, 100);
    let port = port_for(41_000);
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve(&link, port, "cubic", tx);
    let advise = start_advise(port, 14);
    let timed = clients(&link, server, Duration::from_secs(10));
    let log: Vec<usize> = timed.iter().map(|&(size, _)| size).collect();
    let advice = finish_advise(advise);
    let iw = findings(&advice, "initial_window", &link);
    assert_eq!(iw.len(), 1, "one client group (RTT 50–150 ms): {advice:#}");
    let f = iw[0];
    assert_eq!(f["group"], "RTT 50–150 ms", "{f:#}");
    assert_eq!(f["status"], "found", "{f:#}");
    // Every response the clients got was seen whole (the window outlasts the traffic).
    assert_eq!(f["flows"].as_u64().unwrap() as usize, log.len(), "{f:#}");
    // Each needs fewer round trips from 32 segments than from 10 (by construction: 14–42
    // segments of 1448 bytes), as the test counts from its own log.
    let helped =
        log.iter().filter(|&&s| rounds(s.div_ceil(1448) as u64, 32) < rounds(s.div_ceil(1448) as u64, 10)).count();
    assert_eq!(helped, log.len());
    assert_eq!(f["affected"].as_u64().unwrap() as usize, helped, "{f:#}");
    // One round trip saved each, at the path's configured 100 ms.
    let saved = f["numbers"]["saved_ms_median"].as_f64().unwrap();
    assert!((99.0..=110.0).contains(&saved), "{f:#}");
    let want_extra =
        log.iter().map(|&s| f64::from(rounds(s.div_ceil(1448) as u64, 10) - 1)).sum::<f64>() / log.len() as f64;
    let extra = f["numbers"]["extra_round_trips_mean"].as_f64().unwrap();
    assert!((extra - want_extra).abs() < 1e-9, "{extra} vs the log's {want_extra}: {f:#}");
    // The clients' /24, with every response in it; the route they are reached by is the same /24.
    let net = client_net(&link);
    let change = f["change"].as_str().unwrap();
    assert!(change.contains(&format!("{net} ({})", log.len())), "{net}: {f:#}");
    assert!(change.contains(&format!("`bbrscope apply --route {net} --initcwnd 32 --netns ")), "{change}");

    // The claim itself: the same clients, after the command the change gives (run as written),
    // finish each response about one round trip sooner.
    let root = tempfile::tempdir().unwrap();
    let applied = run_change(change, root.path());
    let routes = link.sender.run(|| ip(&["route", "show", &net])).unwrap();
    assert!(routes.contains("initcwnd 32"), "{routes}");
    let advise = start_advise(port, 14);
    let after = clients(&link, server, Duration::from_secs(10));
    // And advise, reading the route's window, finds nothing more to gain.
    let advice = finish_advise(advise);
    let f = findings(&advice, "initial_window", &link)[0];
    assert_eq!(
        (f["status"].as_str(), f["affected"].as_u64(), f["numbers"]["initcwnd"].as_f64()),
        (Some("none"), Some(0), Some(32.0)),
        "{f:#}"
    );
    let measured = mean_ms(&timed) - mean_ms(&after);
    eprintln!(
        "initcwnd 10 → 32: {:.0} → {:.0} ms mean per response; advise said {saved} ms",
        mean_ms(&timed),
        mean_ms(&after)
    );
    assert!(
        (0.7 * saved..=1.3 * saved).contains(&measured),
        "advise said {saved} ms per response; the clients measured {measured:.0} ms ({:.0} → {:.0} ms mean)",
        mean_ms(&timed),
        mean_ms(&after)
    );
    revert_change(&applied, root.path());
    let routes = link.sender.run(|| ip(&["route", "show", &net])).unwrap();
    assert!(!routes.contains("initcwnd"), "revert takes it off: {routes}");
}

/// Four clients fetching 20–60 KB responses from `server` one after another for `secs`; each
/// response's size and the time from connect() to its last byte, as the client measured it.
fn clients(link: &Link, server: SocketAddr, secs: Duration) -> Vec<(usize, Duration)> {
    let until = Instant::now() + secs;
    thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    let mut got = Vec::new();
                    let mut i = t;
                    while Instant::now() < until {
                        let size = 20_000 + (i * 7_919) % 40_000;
                        i += 4;
                        let start = Instant::now();
                        fetch(link, server, size);
                        got.push((size, start.elapsed()));
                    }
                    got
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    })
}

/// `ip ARGS` in the calling thread's namespace; its output.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let o = std::process::Command::new("ip").args(args).output()?;
    anyhow::ensure!(o.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// A sysctl of namespace `ns` (`"net/ipv4/tcp_rmem"`), its fields one space apart.
fn sysctl_of(ns: &bbrscope_emulator::Netns, key: &str) -> String {
    let path = format!("/proc/sys/{key}");
    let v = ns.run(move || Ok(std::fs::read_to_string(path)?)).unwrap();
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One bulk response of `size` bytes over `link` on a fresh connection, sent with `cc`; the
/// server's TCP_INFO once it was acked.
fn bulk(link: &Link, port: u16, size: usize, cc: &'static str) -> TcpInfo {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = serve(link, port, cc, tx);
    fetch(link, server, size);
    rx.recv_timeout(Duration::from_secs(30)).unwrap()
}

/// [`bulk`] while `advise` watches for `secs`: the transfer's time by the test's clock, the
/// finding of `check` for the path's namespace, and the server's TCP_INFO.
fn advised_bulk(
    link: &Link,
    port: u16,
    size: usize,
    cc: &'static str,
    secs: u64,
    check: &str,
) -> (Duration, Value, TcpInfo) {
    let advise = start_advise(port, secs);
    let start = Instant::now();
    let info = bulk(link, port, size, cc);
    let took = start.elapsed();
    let advice = finish_advise(advise);
    let f = findings(&advice, check, link);
    assert_eq!(f.len(), 1, "{advice:#}");
    (took, f[0].clone(), info)
}

/// One response of `size` bytes from `server`, on a connection of its own from the path's client
/// namespace; all of it arrives.
fn fetch(link: &Link, server: SocketAddr, size: usize) {
    let mut c = link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
    c.write_all(format!("{size}\n").as_bytes()).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).unwrap();
    assert_eq!(buf.len(), size);
}

#[test]
fn a_receive_window_smaller_than_the_path_is_measured_as_the_kernel_counts_it() {
    require_root();
    let link = path(42, 60);
    // The clients' receive buffer: 16 KB on a 150 KB path, so the server waits on their window
    // most of the time. (A small tcp_wmem on the server is not a cause here: on this path a 128 KB
    // maximum let 968 KB go unacknowledged, the device taking GSO segments that grow past the
    // buffer check, and the kernel counted no send-buffer-limited time.)
    link.receiver.sysctl("net/ipv4/tcp_rmem", "4096 16384 16384").unwrap();
    let port = port_for(42_000);
    let advise = start_advise(port, 12);
    let info = bulk(&link, port, 1_000_000, "cubic");
    let advice = finish_advise(advise);
    let f = findings(&advice, "send_buffer", &link);
    assert_eq!(f.len(), 1, "{advice:#}");
    let f = f[0];
    // The kernel's own account, as the server's TCP_INFO gives it: mostly receive-window-limited.
    let truth = info.rwnd_limited_us.unwrap() as f64 / info.busy_us.unwrap() as f64;
    assert!(truth > 0.5, "the scenario holds the sender back: {info:?}");
    // Not this host's buffer: no change to make here, and the peers' windows named.
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("none"), Some(0)), "{f:#}");
    assert_eq!(f["numbers"]["rwnd_limited_flows"], 1.0, "{f:#}");
    let share = f["numbers"]["rwnd_limited_share_median"].as_f64().unwrap();
    assert!((share - truth).abs() < 0.02, "advise {share} vs TCP_INFO {truth}: {f:#}");
    assert!(f["evidence"].as_str().unwrap().contains("peer's receive window"), "{f:#}");
}

/// A keep-alive client: `n` responses of `size` bytes on one connection, `gap` apart.
fn keepalive(link: &Link, port: u16, n: usize, size: usize, gap: Duration) {
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve(link, port, "cubic", tx);
    let mut c = link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
    let mut buf = vec![0u8; size];
    for _ in 0..n {
        c.write_all(format!("{size}\n").as_bytes()).unwrap();
        c.read_exact(&mut buf).unwrap();
        thread::sleep(gap);
    }
}

#[test]
fn keepalive_gaps_restart_the_window_unless_slow_start_after_idle_is_off() {
    require_root();
    let link = path(43, 100);
    let port = port_for(43_000);
    // The kernel's default in a new namespace: 1. The advice is kept under `root`, for status.
    let root = tempfile::tempdir().unwrap();
    let advise = start_advise_kept(port, 18, root.path());
    keepalive(&link, port, 6, 300_000, Duration::from_millis(1500));
    let advice = finish_advise(advise);
    let f = findings(&advice, "idle_restart", &link)[0];
    assert_eq!(f["status"], "found", "{f:#}");
    let kept = status_advice(root.path());
    let shown = kept["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["check"] == "window restart after idle" && k["netns"] == f["netns"]);
    assert_eq!(shown.map(|k| (&k["status"], &k["change"])), Some((&f["status"], &f["change"])), "{kept:#}");
    assert_eq!(kept["changed_since"], serde_json::json!([]), "{kept:#}");
    assert_eq!(f["flows"], 1, "{f:#}");
    // Five silences of 1.5 s, each well over the timeout (~300 ms at 100 ms RTT).
    let restarts = f["numbers"]["restarts"].as_f64().unwrap();
    assert!((4.0..=5.0).contains(&restarts), "{f:#}");
    let change = f["change"].as_str().unwrap();
    assert!(change.contains("`bbrscope apply --sysctl net.ipv4.tcp_slow_start_after_idle=0 --netns "), "{f:#}");
    let idle = || sysctl_of(&link.sender, "net/ipv4/tcp_slow_start_after_idle");
    assert_eq!(idle(), "1");

    // The change as given, run: status says the advice's setting changed since; the same
    // keep-alive client then has no restart to find.
    let applied = run_change(change, root.path());
    assert_eq!(idle(), "0");
    let kept = status_advice(root.path());
    let want = format!("{}: tcp_slow_start_after_idle 1 -> 0", f["netns"].as_str().unwrap());
    assert_eq!(kept["changed_since"], serde_json::json!([want]), "{kept:#}");
    let text = bbrscope().args(["status", "--root"]).arg(root.path()).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("window restart after idle") && text.contains(&want), "{text}");
    let port = port + 1;
    let advise = start_advise(port, 18);
    keepalive(&link, port, 6, 300_000, Duration::from_millis(1500));
    let advice = finish_advise(advise);
    let f = findings(&advice, "idle_restart", &link)[0];
    assert_eq!(f["status"], "none", "{f:#}");
    assert_eq!(f["numbers"]["restarts"], 0.0, "{f:#}");
    revert_change(&applied, root.path());
    assert_eq!(idle(), "1", "revert restores the namespace's own value");

    // The namespaces gone: status shows the finding, and no command (one without its --netns
    // would change whichever namespace runs it), saying why.
    drop(link);
    let kept = status_advice(root.path());
    let shown = kept["findings"].as_array().unwrap().iter().find(|k| k["check"] == "window restart after idle");
    let shown = shown.unwrap_or_else(|| panic!("{kept:#}"));
    assert!(shown["change"].is_null(), "{kept:#}");
    assert!(shown["withheld"].as_str().is_some_and(|w| w.contains("namespace is gone")), "{kept:#}");
    let text = bbrscope().args(["status", "--root"]).arg(root.path()).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("change: none shown: its namespace is gone") && !text.contains("apply --sysctl"), "{text}");
}

/// The advice `bbrscope status --json --root ROOT` shows.
fn status_advice(root: &std::path::Path) -> Value {
    let o = bbrscope().args(["status", "--json", "--root"]).arg(root).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["advice"].clone()
}

/// A send buffer smaller than the path by construction: a 64 KB tcp_wmem maximum on a 150 KB path
/// (20 Mbit/s, 60 ms), the device taking one segment per packet (with GSO the emulator's device
/// let more than the buffer go out, see docs/advise.md). advise names the flow with the share of
/// samples the buffer bound it; the command its change gives, run as written, fixes it: the same
/// transfer then takes less than half as long by the client's clock and advise finds nothing;
/// revert restores the namespace's value.
#[test]
fn a_send_buffer_smaller_than_the_path_is_found_and_the_change_fixes_it() {
    require_root();
    let link = path(44, 60);
    link.sender.run(|| ip(&["link", "set", "dev", "emu0", "gso_max_segs", "1"])).unwrap();
    let small = "4096 16384 65536";
    link.sender.sysctl("net/ipv4/tcp_wmem", small).unwrap();
    let wmem = || sysctl_of(&link.sender, "net/ipv4/tcp_wmem");
    let port = port_for(44_000);
    let (before, f, info) = advised_bulk(&link, port, 3_000_000, "cubic", 16, "send_buffer");
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("found"), Some(1)), "{f:#}");
    let share = f["numbers"]["sndbuf_limited_share_median"].as_f64().unwrap();
    assert!(share >= 0.5, "bound most of the time: {f:#}");
    // The kernel's own count, beside it: far smaller (it misses most of the wait).
    let kernel = info.sndbuf_limited_us.unwrap() as f64 / info.busy_us.unwrap() as f64;
    assert!((f["numbers"]["kernel_sndbuf_limited_share_median"].as_f64().unwrap() - kernel).abs() < 0.05, "{f:#}");
    assert_eq!(f["numbers"]["tcp_wmem_max"], 65536.0, "{f:#}");
    let change = f["change"].as_str().unwrap();
    assert!(change.contains("`bbrscope apply --sysctl net.ipv4.tcp_wmem=\"4096 16384 4194304\" --netns "), "{change}");

    let root = tempfile::tempdir().unwrap();
    let applied = run_change(change, root.path());
    assert_eq!(wmem(), "4096 16384 4194304");
    let (after, f, _) = advised_bulk(&link, port + 1, 3_000_000, "cubic", 12, "send_buffer");
    eprintln!(
        "64 KB → 4 MB tcp_wmem: 3 MB in {before:.2?} → {after:.2?}; kernel's sndbuf-limited share {kernel:.3}, advise's {share:.2}"
    );
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("none"), Some(0)), "{f:#}");
    assert!(after * 2 < before, "the buffer was the bound: {before:?} → {after:?}");
    // BBR keeps fewer packets in flight than its window allows (it paces): with room in the
    // buffer, data waits unsent, and that is not the buffer's doing either.
    let (_, f, _) = advised_bulk(&link, port + 2, 3_000_000, "bbr", 8, "send_buffer");
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("none"), Some(0)), "bbr: {f:#}");
    revert_change(&applied, root.path());
    assert_eq!(wmem(), small, "revert restores the namespace's own value");
}

/// The clients' /24 on `link` (the route the server reaches them by).
fn client_net(link: &Link) -> String {
    format!("{}.0/24", link.receiver_addr.to_string().rsplit_once('.').unwrap().0)
}

/// Sets `initcwnd 32` on the server's route to the clients, as it is otherwise (the namespace is
/// the test's): the change an initial-window finding would make, made by the test.
fn set_initcwnd_32(link: &Link) {
    let net = client_net(link);
    let route = link.sender.run(|| ip(&["route", "show", &net])).unwrap();
    let mut args = vec!["route", "change"];
    args.extend(route.split_whitespace());
    args.extend(["initcwnd", "32"]);
    link.sender.run(|| ip(&args).map(drop)).unwrap();
}

/// The clients' mean time per response, ms.
fn mean_ms(v: &[(usize, Duration)]) -> f64 {
    v.iter().map(|(_, d)| d.as_secs_f64() * 1e3).sum::<f64>() / v.len() as f64
}

/// Asserts that `initcwnd 32` gained nothing for responses that took a mean `b`, then `a` ms:
/// less than half of one of this run's round trips (the minimum RTT the check `f` measured), where
/// a window that helped saves one on most of them (463 → 377 ms on the 100 ms path). Not a fixed
/// bound: on a busy host responses take longer and their means move more (823 → 795 ms).
fn assert_no_gain(what: &str, f: &Value, b: f64, a: f64) {
    // The path's 100 ms where too few responses were weighed to measure it.
    let rtt_ms = f["numbers"]["min_rtt_ms_median"].as_f64().unwrap_or(100.0);
    assert!(b - a < rtt_ms / 2.0, "{what}: the scenario must gain nothing from the window: {b:.0} → {a:.0} ms");
}

/// The initial-window check on clients it must leave alone, each known by construction to gain
/// nothing from a larger window — and proven so: the test sets `initcwnd 32` on their route and
/// the clients' own clock shows no saving ([`assert_no_gain`]). `what` names the scenario;
/// `pace` makes the server write each response in pieces;
/// `client_rmem` is the clients' namespace's tcp_rmem.
fn initial_window_gains_nothing(
    index: u8,
    what: &str,
    pace: Option<(usize, Duration)>,
    client_rmem: Option<&'static str>,
) {
    let link = path(index, 100);
    if let Some(rmem) = client_rmem {
        link.receiver.sysctl("net/ipv4/tcp_rmem", rmem).unwrap();
    }
    let port = port_for(u16::from(index) * 1000);
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve_paced(&link, port, "cubic", tx, pace);
    let advise = start_advise(port, 14);
    let before = clients(&link, server, Duration::from_secs(10));
    let advice = finish_advise(advise);
    let f = findings(&advice, "initial_window", &link)[0].clone();

    set_initcwnd_32(&link);
    let after = clients(&link, server, Duration::from_secs(10));
    let (b, a) = (mean_ms(&before), mean_ms(&after));
    eprintln!(
        "{what}: initcwnd 10 → 32: {b:.0} → {a:.0} ms mean per response; advise: {} {}",
        f["status"], f["evidence"]
    );
    assert_no_gain(what, &f, b, a);
    assert_ne!(f["status"], "found", "{what}: {f:#}");
}

/// A server that writes each 20–60 KB response in 4 KB pieces 50 ms apart: its responses take
/// the time the application takes, not round trips of slow start.
#[test]
fn responses_the_application_paces_are_not_held_back_by_the_initial_window() {
    require_root();
    initial_window_gains_nothing(45, "paced responses", Some((4096, Duration::from_millis(50))), None);
}

/// Clients whose receive buffer is 16 KB: their window, not the sender's, limits each round trip.
#[test]
fn clients_with_small_receive_windows_are_not_held_back_by_the_initial_window() {
    require_root();
    initial_window_gains_nothing(46, "16 KB client windows", None, Some("4096 16384 16384"));
}

/// A keep-alive connection serving 40 KB responses 50 ms apart with the kernel's buffer settings:
/// each response fits the send buffer the kernel sized for the connection, far below tcp_wmem's
/// maximum, so raising that maximum changes nothing (by construction: the buffer never reached it).
#[test]
fn keepalive_responses_that_fit_the_buffer_are_not_send_buffer_bound() {
    require_root();
    let link = path(47, 60);
    link.sender.run(|| ip(&["link", "set", "dev", "emu0", "gso_max_segs", "1"])).unwrap();
    let port = port_for(47_000);
    let advise = start_advise(port, 14);
    keepalive(&link, port, 60, 40_000, Duration::from_millis(50));
    let advice = finish_advise(advise);
    let f = findings(&advice, "send_buffer", &link)[0];
    eprintln!("keep-alive 40 KB: {} {}", f["status"], f["evidence"]);
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("none"), Some(0)), "{f:#}");
}

/// A bulk sender with the kernel's `tcp_notsent_lowat` (off) keeps far more written than sent
/// on a 150 KB path; advise names the queue and how long its bytes wait; the command its change
/// gives, run as written, bounds the queue at no cost in transfer time; revert restores it.
#[test]
fn a_deep_unsent_queue_is_found_and_the_low_water_mark_bounds_it() {
    require_root();
    let link = path(48, 60);
    let lowat = || sysctl_of(&link.sender, "net/ipv4/tcp_notsent_lowat");
    let default = lowat();
    let port = port_for(48_000);
    let (before, f, _) = advised_bulk(&link, port, 6_000_000, "cubic", 12, "unsent_queue");
    eprintln!("unsent queue, lowat {default}: 6 MB in {before:.2?}: {} {}", f["status"], f["evidence"]);
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("found"), Some(1)), "{f:#}");
    let change = f["change"].as_str().unwrap();
    assert!(change.contains("`bbrscope apply --sysctl net.ipv4.tcp_notsent_lowat=131072 --netns "), "{change}");

    let root = tempfile::tempdir().unwrap();
    let applied = run_change(change, root.path());
    assert_eq!(lowat(), "131072");
    let (after, g, _) = advised_bulk(&link, port + 1, 6_000_000, "cubic", 12, "unsent_queue");
    eprintln!("unsent queue, lowat 131072: 6 MB in {after:.2?}: {} {}", g["status"], g["evidence"]);
    assert_eq!((g["status"].as_str(), g["affected"].as_u64()), (Some("none"), Some(0)), "{g:#}");
    // Bounded by the mark (a write's pieces may add up to 64 KB past it before the writer waits).
    let unsent = g["numbers"]["unsent_bytes_median"].as_f64().unwrap();
    assert!(unsent <= f64::from(192 << 10), "{g:#}");
    assert!(f["numbers"]["unsent_bytes_median"].as_f64().unwrap() > 2.0 * unsent, "{f:#}");
    // The same data in the same time: the queue was not what kept the path full.
    let ratio = after.as_secs_f64() / before.as_secs_f64();
    assert!((0.85..=1.15).contains(&ratio), "{before:?} → {after:?}");
    revert_change(&applied, root.path());
    assert_eq!(lowat(), default, "revert restores the namespace's own value");
}

/// `advise --from`: the 20–60 KB responses over 100 ms, recorded with `bbrscope stream` while a
/// live `advise` watched the same clients, weigh to the same initial-window finding — every
/// response the clients logged, the same ones helped, the same saving.
#[test]
fn a_recording_weighs_as_the_live_flows_did() {
    require_root();
    let link = path(49, 100);
    let port = port_for(49_000);
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve(&link, port, "cubic", tx);
    let stream = Stream::start(&["--port", &port.to_string()]);
    let advise = start_advise(port, 10);
    let log = clients(&link, server, Duration::from_secs(6));
    let live = finish_advise(advise);
    thread::sleep(Duration::from_millis(500));
    let (code, records, _) = stream.stop();
    assert_eq!(code, 0);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("capture.ndjson");
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let out =
        bbrscope().args(["advise", "--json", "--from"]).arg(&file).arg("--root").arg(scratch_root()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(recorded["recording"], file.display().to_string());
    let (a, b) = (findings(&live, "initial_window", &link)[0], findings(&recorded, "initial_window", &link)[0]);
    eprintln!("live: {}\nrecorded: {}", a["evidence"], b["evidence"]);
    assert_eq!(b["status"], "found", "{b:#}");
    assert_eq!(b["flows"].as_u64().unwrap() as usize, log.len(), "{b:#}");
    for key in ["flows", "affected", "status", "change"] {
        assert_eq!(a[key], b[key], "{key}: live {a:#}\nrecorded {b:#}");
    }
    assert_eq!(a["numbers"]["saved_ms_median"], b["numbers"]["saved_ms_median"], "{a:#}\n{b:#}");
    // The text says what was weighed, and against what.
    let out = bbrscope().args(["advise", "--from"]).arg(&file).arg("--root").arg(scratch_root()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(weighed against this host's settings, read now)"), "{text}");
}

/// What `advise` cannot tell, the experiment it names measures. A server writing each 20–60 KB
/// response in 8 KB pieces 25 ms apart finishes writing about when slow start's first round trip
/// ends: by the observer's samples (one per round trip) the responses look window-bound, and
/// advise prices a round trip saved on each (measured: 86 of 88 counted, 98 ms claimed per
/// response) — yet a window of 32 saves nothing (the test sets it on the route: 460 → 459 ms).
/// The finding's change says to measure it first, and `bbrscope experiment --arms
/// cubic,cubic+iw32` on the same clients finds no saving that matters and recommends nothing.
#[test]
fn a_service_paced_like_slow_start_is_caught_by_the_experiment_advise_names() {
    require_root();
    let link = path(50, 100);
    let port = port_for(50_000);
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve_paced(&link, port, "cubic", tx, Some((8192, Duration::from_millis(25))));
    let advise = start_advise(port, 14);
    let before = clients(&link, server, Duration::from_secs(10));
    let advice = finish_advise(advise);
    // On a busy host some responses' minimum RTT can cross a band's edge (150 ms): the check
    // then weighs each band and all flows apart. Whichever it found, its change names the
    // experiment that is its proof.
    let all = findings(&advice, "initial_window", &link);
    for f in &all {
        eprintln!("paced like slow start: advise [{}]: {} {}", f["group"], f["status"], f["evidence"]);
        if f["status"] == "found" {
            let change = f["change"].as_str().unwrap_or_else(|| panic!("a finding without a change: {f:#}"));
            assert!(change.contains("measure it with an experiment"), "{f:#}");
        }
    }

    let mut child = bbrscope()
        .args(["experiment", "--arms", "cubic,cubic+iw32", "--port", &port.to_string(), "--duration", "5m"])
        .args(["--json", "--no-guardrail", "--recommend", "--design", "per-connection"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("experiment running"), "{line}");
    thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    clients(&link, server, Duration::from_secs(30));
    thread::sleep(Duration::from_secs(1));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_timeout(&mut child, Duration::from_secs(60)).expect("the experiment ends on SIGINT");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e} ({status}): {out}"));
    let net = client_net(&link);
    let g = report["groups"].as_array().unwrap().iter().find(|g| g["label"] == net.as_str()).unwrap();
    eprintln!("paced like slow start: experiment: {}", g["conclusion"]);
    // It does not confirm the saving (the window is no better: within noise, or worse).
    assert_ne!(g["verdict"], "b_better", "{}", g["conclusion"]);
    assert!(report["recommend"]["commands"].as_array().unwrap().is_empty(), "{}", report["recommend"]);

    // By construction, and measured: the window changes nothing for these responses.
    set_initcwnd_32(&link);
    let after = clients(&link, server, Duration::from_secs(10));
    let (b, a) = (mean_ms(&before), mean_ms(&after));
    eprintln!("paced like slow start: initcwnd 10 → 32: {b:.0} → {a:.0} ms mean per response");
    assert_no_gain("paced like slow start", all[0], b, a);
}

/// BBR flows leave through the path's device, whose qdisc is not fq (this machine's kernel has
/// no sch_fq): the pacing check counts them as paced by TCP itself and advises no change; the
/// device and its qdisc it names are what `ip route get` and `tc qdisc show` (not bbrscope) say.
/// With no BBR flow, there is nothing to weigh.
#[test]
fn bbr_flows_are_counted_by_the_qdisc_that_sends_them_and_nothing_is_advised() {
    require_root();
    let link = path(51, 40);
    let port = port_for(51_000);
    let peer = link.receiver_addr.to_string();
    let route = link.sender.run(move || ip(&["route", "get", &peer])).unwrap();
    let dev = route.split_whitespace().skip_while(|w| *w != "dev").nth(1).unwrap().to_string();
    let dev2 = dev.clone();
    let shown = link
        .sender
        .run(move || {
            let o = std::process::Command::new("tc").args(["qdisc", "show", "dev", &dev2, "root"]).output()?;
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        })
        .unwrap();
    let kind = shown.split_whitespace().nth(1).unwrap_or_else(|| panic!("tc qdisc show: {shown}")).to_string();
    assert_ne!(kind, "fq", "this test is for a device without fq");

    let advise = start_advise(port, 6);
    let info = bulk(&link, port, 1_000_000, "bbr");
    let advice = finish_advise(advise);
    let f = findings(&advice, "pacing", &link);
    assert_eq!(f.len(), 1, "{advice:#}");
    let f = f[0];
    assert_eq!(
        (f["status"].as_str(), f["flows"].as_u64(), f["change"].as_str()),
        (Some("none"), Some(1), None),
        "{f:#}"
    );
    assert_eq!(
        (f["numbers"]["without_fq"].as_f64(), f["numbers"]["with_fq"].as_f64()),
        (Some(1.0), Some(0.0)),
        "{f:#}"
    );
    let evidence = f["evidence"].as_str().unwrap();
    assert!(evidence.contains(&format!("{dev} with {kind}: 1")) && evidence.contains("TCP paces itself"), "{evidence}");
    // The highest pacing rate of the flow's samples, against the kernel's own at its end: BBR's
    // cruising rate is at most the highest it paced at.
    let max = f["numbers"]["pacing_rate_max_bps"].as_f64().unwrap();
    let last = info.pacing_rate as f64 * 8.0;
    assert!(max >= last * 0.9, "highest {max} against the kernel's last {last}: {f:#}");

    let advise = start_advise(port + 1, 4);
    bulk(&link, port + 1, 300_000, "cubic");
    let advice = finish_advise(advise);
    let f = findings(&advice, "pacing", &link);
    assert_eq!((f.len(), f[0]["status"].as_str(), f[0]["flows"].as_u64()), (1, Some("too_few"), Some(0)), "{advice:#}");
}

/// The findings of `check` in `advice` for the namespace of the path's client.
fn client_findings<'a>(advice: &'a Value, check: &str, link: &Link) -> Vec<&'a Value> {
    use std::os::unix::fs::MetadataExt as _;
    let ino = link.receiver.run(|| Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())).unwrap();
    advice["findings"].as_array().unwrap().iter().filter(|f| f["check"] == check && f["netns_ino"] == ino).collect()
}

/// What the client of a download measured: its time, and the rate its reads took in, first
/// byte to last (no connection set-up, request or TCP_INFO hand-over in it) and in its best
/// two seconds (on a busy host the reader falls behind at times: the window then closes, and
/// the path carried less than the buffer allows).
struct Download {
    took: Duration,
    steady_bps: f64,
    best_bps: f64,
}

/// [`fetch`], timing each read.
fn fetch_timed(link: &Link, server: SocketAddr, size: usize) -> Download {
    let start = Instant::now();
    let mut c = link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
    c.write_all(format!("{size}\n").as_bytes()).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let (mut buf, mut got, mut reads) = (vec![0u8; 1 << 16], 0, Vec::new());
    loop {
        let n = c.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got += n;
        reads.push((Instant::now(), got));
    }
    let took = start.elapsed();
    assert_eq!(got, size);
    let rate = |a: (Instant, usize), b: (Instant, usize)| (b.1 - a.1) as f64 * 8.0 / (b.0 - a.0).as_secs_f64();
    let steady_bps = rate(reads[0], reads[reads.len() - 1]);
    // Each read's span to the first read two seconds or more later.
    let mut best_bps = 0f64;
    let mut j = 0;
    for i in 0..reads.len() {
        while j < reads.len() && reads[j].0 - reads[i].0 < Duration::from_secs(2) {
            j += 1;
        }
        if j == reads.len() {
            break;
        }
        best_bps = best_bps.max(rate(reads[i], reads[j]));
    }
    Download { took, steady_bps, best_bps }
}

/// A 3 MB download from the path's server while `advise` watches for `secs`: what the client
/// measured, the receive-buffer finding for the client's namespace, and the server's TCP_INFO
/// (whose receive-window-limited time is the truth no bbrscope code computes).
fn advised_download(link: &Link, port: u16, secs: u64) -> (Download, Value, TcpInfo) {
    let advise = start_advise(port, secs);
    let (tx, rx) = std::sync::mpsc::channel();
    let server = serve(link, port, "cubic", tx);
    let took = fetch_timed(link, server, 3_000_000);
    let info = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let advice = finish_advise(advise);
    let f = client_findings(&advice, "receive_buffer", link);
    assert_eq!(f.len(), 1, "{advice:#}");
    // The server's namespace received nothing worth weighing.
    let server = findings(&advice, "receive_buffer", link);
    assert_eq!(server.iter().map(|f| f["status"].as_str()).collect::<Vec<_>>(), [Some("too_few")], "{advice:#}");
    (took, f[0].clone(), info)
}

/// A receive buffer smaller than the path by construction: a 64 KB tcp_rmem maximum in the
/// client's namespace on a 100 ms path of 20 Mbit/s (250 KB). The server's kernel counts most of
/// its time as held back by the client's window; advise names the download in the client's
/// namespace, with the window its buffer allowed. The command its change gives, run as written,
/// fixes it: the same download then takes less than half as long, the server's kernel counts
/// little receive-window-limited time, and advise finds nothing; revert restores 64 KB.
#[test]
fn a_receive_buffer_smaller_than_the_path_is_found_and_the_change_fixes_it() {
    require_root();
    let link = path(52, 100);
    let small = "4096 65536 65536";
    link.receiver.sysctl("net/ipv4/tcp_rmem", small).unwrap();
    let rmem = || sysctl_of(&link.receiver, "net/ipv4/tcp_rmem");
    let port = port_for(52_000);
    let rwnd_share = |i: &TcpInfo| i.rwnd_limited_us.unwrap() as f64 / i.busy_us.unwrap() as f64;
    let (before, f, info) = advised_download(&link, port, 16);
    let before_took = before.took;
    let truth = rwnd_share(&info);
    assert!(truth > 0.5, "the scenario holds the sender back: {info:?}");
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("found"), Some(1)), "{f:#}");
    assert_eq!(f["numbers"]["tcp_rmem_max"], 65536.0, "{f:#}");
    // The window the buffer allowed, and the rate it allows at the path's round trip: what the
    // client measured in the same download while its reader kept up, within 15% (a fixed time
    // includes the set-up, and a busy host's late reads: 2.99 Mbit/s where it took in 3.25).
    let clamp = f["numbers"]["window_clamp_bytes_median"].as_f64().unwrap();
    assert!(clamp < 65536.0, "{f:#}");
    let rate = f["numbers"]["receive_rate_bps_median"].as_f64().unwrap();
    let measured = before.best_bps;
    eprintln!(
        "receive buffer: advise {rate:.0} bit/s; the client {measured:.0} (first to last byte {:.0})",
        before.steady_bps
    );
    assert!((rate / measured - 1.0).abs() < 0.15, "advise {rate} bit/s vs the client's {measured}: {f:#}");
    let change = f["change"].as_str().unwrap();
    assert!(change.contains("`bbrscope apply --sysctl net.ipv4.tcp_rmem=\"4096 65536 6291456\" --netns "), "{change}");

    let root = tempfile::tempdir().unwrap();
    let applied = run_change(change, root.path());
    assert_eq!(rmem(), "4096 65536 6291456");
    let (after, f, info) = advised_download(&link, port + 1, 12);
    let (before, after) = (before_took, after.took);
    eprintln!(
        "64 KB → 6 MB tcp_rmem: 3 MB in {before:.2?} → {after:.2?}; server rwnd-limited {truth:.2} → {:.2}",
        rwnd_share(&info)
    );
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("none"), Some(0)), "{f:#}");
    assert!(after * 2 < before, "the buffer was the bound: {before:?} → {after:?}");
    assert!(rwnd_share(&info) < 0.2, "{info:?}");
    revert_change(&applied, root.path());
    assert_eq!(rmem(), small, "revert restores the namespace's own value");
}

/// A download of `size` bytes that the client reads `piece` bytes at a time, `gap` apart (an
/// application slower than the path: a player buffering a stream, a proxy relaying to a slower
/// client); its time by the client's clock.
fn fetch_slowly(link: &Link, server: SocketAddr, size: usize, piece: usize, gap: Duration) -> Duration {
    let start = Instant::now();
    let mut c = link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
    c.write_all(format!("{size}\n").as_bytes()).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let (mut buf, mut got) = (vec![0u8; piece], 0);
    while got < size {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "the server ended the response early");
        got += n;
        thread::sleep(gap);
    }
    start.elapsed()
}

/// The same 64 KB maximum, and a client that reads slower than the path (4 KB every 40 ms, about
/// 0.8 Mbit/s): the server's kernel still counts most of its time as held back by the client's
/// window, but the window is closed by the reader, not by the buffer. advise finds nothing, and
/// by construction it is right: with the maximum at 6 MB the same download takes as long.
#[test]
fn a_client_that_reads_slowly_is_not_held_back_by_its_receive_buffer() {
    require_root();
    let link = path(53, 100);
    let mut infos = Vec::new();
    let runs =
        under_each(&link.receiver, "net/ipv4/tcp_rmem", ["4096 65536 65536", "4096 65536 6291456"], 53_000, |port| {
            let (tx, rx) = std::sync::mpsc::channel();
            let server = serve(&link, port, "cubic", tx);
            let took = fetch_slowly(&link, server, 400_000, 4096, Duration::from_millis(40));
            infos.push(rx.recv_timeout(Duration::from_secs(30)).unwrap());
            took
        });
    for (rmem, _, advice) in &runs {
        let f = clear(&client_findings(advice, "receive_buffer", &link), rmem);
        assert!(f["numbers"]["window_fill_median"].as_f64().unwrap() < 0.5, "{f:#}");
    }
    let share = infos[0].rwnd_limited_us.unwrap() as f64 / infos[0].busy_us.unwrap() as f64;
    assert!(share > 0.5, "the server waits on the client's window: {:?}", infos[0]);
    same_time("a slow reader with tcp_rmem's maximum at 64 KB, then 6 MB", &runs);
}

/// The same scenario (`run`, given a port of its own, returns its time by the client's clock)
/// with `key` of namespace `ns` at each of `values` in turn, advise watching each: per value,
/// the setting, the time, and the advice.
fn under_each<'a>(
    ns: &bbrscope_emulator::Netns,
    key: &str,
    values: [&'a str; 2],
    base: u16,
    mut run: impl FnMut(u16) -> Duration,
) -> Vec<(&'a str, Duration, Value)> {
    let port = port_for(base);
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            ns.sysctl(key, value).unwrap();
            let port = port + i as u16;
            let advise = start_advise(port, 10);
            let took = run(port);
            (value, took, finish_advise(advise))
        })
        .collect()
}

/// The one finding a namespace has for a check, found clear with the setting at `setting`.
fn clear<'a>(f: &[&'a Value], setting: &str) -> &'a Value {
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((f[0]["status"].as_str(), f[0]["affected"].as_u64()), (Some("none"), Some(0)), "{setting}: {:#}", f[0]);
    f[0]
}

/// Two runs of the same transfer, the setting raised for the second, took the same time within
/// 15%: the setting was not what bound it.
fn same_time(what: &str, runs: &[(&str, Duration, Value)]) {
    let times: Vec<Duration> = runs.iter().map(|r| r.1).collect();
    eprintln!("{what}: {times:.2?}");
    let ratio = times[1].as_secs_f64() / times[0].as_secs_f64();
    assert!((0.85..1.15).contains(&ratio), "the setting was not the bound: {times:?}");
}

/// A writer whose chunks fit the buffer: 12 KB every 150 ms into a 32 KB buffer at tcp_wmem's
/// maximum (the kernel sizes a new connection's buffer to it at once). Every sample with data in
/// flight finds the buffer more than half full and nothing unsent, which is what a flow bound by
/// its buffer looks like; but the writer never waits for space (SOCK_NOSPACE stays clear), and by
/// construction the buffer is not the bound: with a 4 MB maximum the same response takes as long.
#[test]
fn a_writer_whose_chunks_fit_the_buffer_is_not_send_buffer_bound() {
    require_root();
    let link = path(54, 60);
    link.sender.run(|| ip(&["link", "set", "dev", "emu0", "gso_max_segs", "1"])).unwrap();
    let runs =
        under_each(&link.sender, "net/ipv4/tcp_wmem", ["4096 16384 32768", "4096 16384 4194304"], 54_000, |port| {
            let (tx, _rx) = std::sync::mpsc::channel();
            let server = serve_paced(&link, port, "cubic", tx, Some((12_000, Duration::from_millis(150))));
            let start = Instant::now();
            fetch(&link, server, 300_000);
            start.elapsed()
        });
    for (wmem, _, advice) in &runs {
        clear(&findings(advice, "send_buffer", &link), wmem);
    }
    same_time("12 KB chunks 150 ms apart with tcp_wmem's maximum at 32 KB, then 4 MB", &runs);
}

/// A download whose client never sends a byte (the server writes as soon as it accepts): the
/// sock_ops observer records nothing for a socket that never sent data, unless `--receivers`
/// asks `advise` for such flows (each at its close, with its namespace). With the 64 KB maximum
/// of the tests above: no flow of the client's namespace without it, the finding with it.
#[test]
fn a_download_that_never_sends_is_weighed_with_receivers() {
    require_root();
    let link = path(55, 100);
    link.receiver.sysctl("net/ipv4/tcp_rmem", "4096 65536 65536").unwrap();
    let port = port_for(55_000);
    let addr = SocketAddr::new(link.sender_addr.into(), port);
    let listener = link.sender.run(move || Ok(TcpListener::bind(addr)?)).unwrap();
    thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { break };
            thread::spawn(move || c.write_all(&vec![0x5a; 1_500_000]));
        }
    });
    for (extra, found) in [(&[][..], None), (&["--receivers"][..], Some("found"))] {
        let advise = start_advise_with(port, 8, scratch_root(), extra);
        let mut c = link.receiver.run(move || Ok(TcpStream::connect(addr)?)).unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), 1_500_000);
        drop(c);
        let advice = finish_advise(advise);
        let f = client_findings(&advice, "receive_buffer", &link);
        assert_eq!(f.first().and_then(|f| f["status"].as_str()), found, "{extra:?}: {advice:#}");
    }
}

/// A server that sets SO_SNDBUF itself: 32 KB asked, which the kernel doubles and then keeps,
/// whatever tcp_wmem allows (4 MB here), on a 150 KB path (20 Mbit/s, 60 ms). Before, advise
/// explained the full buffer as one "sized by the kernel" and found nothing; now it names the
/// application's setting, with the samples in which the writer waited, and gives no sysctl
/// command. The truth, measured in the same run: the same responses from a server that leaves
/// the buffer to the kernel are faster, and the buffer advise names is getsockopt's.
#[test]
fn a_send_buffer_the_application_set_is_named_as_the_applications() {
    require_root();
    let link = path(40, 60);
    link.sender.run(|| ip(&["link", "set", "dev", "emu0", "gso_max_segs", "1"])).unwrap();
    let port = port_for(40_000);
    let size = 1_000_000;
    let timed = |server: SocketAddr| {
        let start = Instant::now();
        for _ in 0..2 {
            fetch(&link, server, size);
        }
        start.elapsed()
    };
    let (tx, _rx) = std::sync::mpsc::channel();
    let free = timed(serve(&link, port, "cubic", tx));

    let listener = listen(&link, port + 1, "cubic");
    let sndbuf = sndbuf(&listener, Some(32 << 10));
    let (tx, _rx) = std::sync::mpsc::channel();
    let server = serve_on(listener, tx, None);
    let advise = start_advise(port + 1, 10);
    let locked = timed(server);
    let advice = finish_advise(advise);
    eprintln!("1 MB responses ×2: the kernel's buffer {free:.2?}, SO_SNDBUF 32 KB ({sndbuf} bytes) {locked:.2?}");
    assert!(
        locked.as_secs_f64() > free.as_secs_f64() * 1.2,
        "the application's buffer was the bound: {free:?} → {locked:?}"
    );

    let f = findings(&advice, "send_buffer", &link);
    assert_eq!(f.len(), 1, "{advice:#}");
    let f = f[0];
    assert_eq!((f["status"].as_str(), f["affected"].as_u64()), (Some("found"), Some(2)), "{f:#}");
    assert_eq!(f["numbers"]["app_sndbuf_bytes"].as_f64(), Some(sndbuf as f64), "getsockopt's size: {f:#}");
    let (waited, sending) =
        (f["numbers"]["waited_samples"].as_f64().unwrap(), f["numbers"]["sending_samples"].as_f64().unwrap());
    assert!(waited > 0.0 && waited <= sending, "{f:#}");
    let evidence = f["evidence"].as_str().unwrap();
    assert!(evidence.contains("their application set itself with SO_SNDBUF"), "{evidence}");
    assert!(evidence.contains(&format!("waited in {waited} of {sending} samples")), "{evidence}");
    let change = f["change"].as_str().unwrap();
    assert!(change.starts_with("in the application") && !change.contains('`'), "no command: {change}");
}

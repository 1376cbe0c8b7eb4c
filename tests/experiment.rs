//! `bbrscope experiment` on real connections: the kernel's random assignment against the
//! clients' own log. Root: loads BPF programs.

mod common;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::Stdio,
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

/// One experiment at a time per host (bbrscope refuses a second one): the tests take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server answering "SIZE\n" with SIZE bytes, then closing (an HTTP-like response).
fn serve(listener: TcpListener) {
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            thread::spawn(move || {
                let mut line = String::new();
                if BufReader::new(&mut c).read_line(&mut line).is_err() {
                    return;
                }
                let size: usize = line.trim().parse().unwrap_or(0);
                let _ = c.write_all(&vec![0x5a; size]);
            });
        }
    });
}

/// One request; the client's local address and the bytes it got.
fn fetch(to: SocketAddr, size: usize) -> (SocketAddr, usize) {
    let mut c = TcpStream::connect(to).unwrap();
    let local = c.local_addr().unwrap();
    c.write_all(format!("{size}\n").as_bytes()).unwrap();
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).unwrap();
    (local, buf.len())
}

#[test]
fn every_connection_gets_an_arm_and_the_arms_algorithm() {
    require_root();
    let _turn = turn();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    serve(listener);
    let record = std::env::temp_dir().join(format!("bbrs-exp-{}.ndjson", std::process::id()));
    let child = start_experiment("cubic,bbr", to.port(), &["--no-guardrail", "--record", record.to_str().unwrap()]);
    // The clients' own log.
    const N: usize = 200;
    let log: Vec<(SocketAddr, usize)> = (0..N).map(|i| fetch(to, [1_000, 15_000, 120_000][i % 3])).collect();
    thread::sleep(Duration::from_millis(500));
    let live = report_of(child);

    let records: Vec<Value> =
        std::fs::read_to_string(&record).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // The recording re-analysed offline (no kernel involved) counts the same flows per arm.
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    let _ = std::fs::remove_file(&record);
    let summaries: Vec<&Value> = records.iter().filter(|r| r["type"] == "flow_summary").collect();
    // Every response the clients logged is one server-side flow with an arm, and nothing else.
    assert_eq!(summaries.len(), N, "flow summaries vs the clients' log");
    for (local, got) in &log {
        let s = summaries
            .iter()
            .find(|s| s["dst"] == local.to_string())
            .unwrap_or_else(|| panic!("no summary for the connection from {local}"));
        assert_eq!(s["src"], to.to_string());
        let want = match s["arm"].as_str() {
            Some("a") => "cubic",
            Some("b") => "bbr",
            other => panic!("arm {other:?} in {s}"),
        };
        assert_eq!(s["cc"], want, "{s}");
        assert_eq!(s["ccs"], serde_json::json!([want]), "the arm's algorithm from the first byte: {s}");
        assert_eq!(s["bytes_acked"].as_u64().unwrap(), *got as u64 + 1, "{s}");
    }
    // 50/50 of 200: B's count within 4 standard deviations (sd = sqrt(200 * 0.25) ~ 7.1).
    let b = summaries.iter().filter(|s| s["arm"] == "b").count() as f64;
    assert_eq!(offline["arms"][1]["flows"].as_u64(), Some(b as u64), "{}", offline["arms"]);
    assert_eq!(offline["arms"][0]["flows"].as_u64(), Some(N as u64 - b as u64), "{}", offline["arms"]);
    assert_eq!(live["arms"], offline["arms"], "the live report and the offline one");
    assert!((b - 100.0).abs() < 4.0 * 7.1, "arm B got {b} of {N}");
    // The clients' own sockets (local port ephemeral) are not in the experiment.
    assert!(!summaries.iter().any(|s| s["dst"] == to.to_string()));
}

#[test]
fn bad_input_is_refused_before_anything_is_attached() {
    require_root();
    let _turn = turn();
    let cases: &[(&[&str], &str)] = &[
        (&["--arms", "cubic,nosuchcc"], "not an available algorithm"),
        (&["--arms", "cubic"], "two algorithms"),
        (&["--arms", "cubic,bbr", "--split", "0"], "split"),
        (&["--arms", "cubic,bbr", "--split", "100"], "split"),
        (&["--arms", "cubic,bbr", "--duration", "10d"], "duration"),
        (&["--arms", "cubic,bbr", "--dst", "10.0.0.0/33"], "CIDR"),
        (&["--arms", "cubic,bbr", "--plot", "/no/such/dir/x.svg"], "no directory /no/such/dir"),
        (&["--arms", "cubic,bbr", "--duration", "1m", "--flows", "10"], "cannot be used with"),
    ];
    for (args, needle) in cases {
        let start = Instant::now();
        let out = bbrscope().arg("experiment").args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: expected '{needle}' in {err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    // A second experiment while one runs.
    let mut first = start_experiment("cubic,bbr", 1, &[]);
    let out = bbrscope().args(["experiment", "--arms", "bbr,cubic", "--duration", "5s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // The holder as the kernel's lock table names it.
    assert!(err.contains(&format!("already running (pid {})", first.id())), "{err}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut first, Duration::from_secs(10)).unwrap();
    assert!(status.success(), "{status}");
}

/// A client population behind its own emulated path: the server in the path's sender namespace
/// answering on `port`, the clients in its receiver namespace.
struct Population {
    link: bbrscope::demo::emulator::Link,
    server: SocketAddr,
}

fn population(index: u8, rtt_ms: u64, loss: f64, port: u16) -> Population {
    use bbrscope::demo::emulator::{Link, LinkConfig, LossSpec};
    let rate_bps = 20_000_000;
    let rtt = Duration::from_millis(rtt_ms);
    let bdp = (rate_bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
    let cfg = LinkConfig {
        rate_bps,
        rtt,
        buffer_bytes: bdp.max(64 << 10),
        loss: LossSpec { rate: loss, burst: None },
        seed: index as u64,
    };
    let link = Link::new(index, &cfg).expect("emulated path");
    let server = SocketAddr::new(link.sender_addr.into(), port);
    let listener = link.sender.run(move || Ok(TcpListener::bind(server)?)).unwrap();
    serve(listener);
    Population { link, server }
}

/// `threads` clients of `p` requesting `sizes` in turn until `until`; their log: (client
/// address, size asked, bytes got).
fn load(p: &Population, threads: usize, sizes: &'static [usize], until: Instant) -> Vec<(SocketAddr, usize, usize)> {
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut log = Vec::new();
                    let mut i = t;
                    while Instant::now() < until {
                        let size = sizes[i % sizes.len()];
                        i += 1;
                        let server = p.server;
                        let mut c = p.link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
                        let local = c.local_addr().unwrap();
                        c.write_all(format!("{size}\n").as_bytes()).unwrap();
                        let mut got = 0;
                        let mut buf = vec![0u8; 1 << 16];
                        while let Ok(n) = c.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            got += n;
                        }
                        log.push((local, size, got));
                    }
                    log
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    })
}

/// A port for a test's service, apart from other test runs' (`base` apart from other tests').
fn port_for(base: u16) -> u16 {
    base + (std::process::id() % 10_000) as u16
}

/// Starts `bbrscope experiment --arms ARMS --port PORT --duration 5m --json EXTRA...` (ended by
/// the test, by the guardrail or by a flow count in EXTRA) and waits until it says it runs;
/// stdout is the JSON report.
fn start_experiment(arms: &str, port: u16, extra: &[&str]) -> std::process::Child {
    start_logged(arms, port, extra).0
}

/// [`start_experiment`], and what it writes on stderr after its first line (stdout is not a
/// terminal: a progress line every 10 s).
fn start_logged(arms: &str, port: u16, extra: &[&str]) -> (std::process::Child, Arc<Mutex<String>>) {
    let (child, mut err) = loop {
        wait_for_no_experiment();
        let mut child = bbrscope()
            .args(["experiment", "--arms", arms, "--port", &port.to_string(), "--duration", "5m", "--json"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        // Another process's experiment took the lock first: wait for it again.
        if line.contains("already running") {
            let _ = child.wait();
            continue;
        }
        assert!(line.contains("experiment running"), "{line}");
        break (child, err);
    };
    // Keep draining stderr so that it cannot block the experiment.
    let log = Arc::new(Mutex::new(String::new()));
    let keep = log.clone();
    thread::spawn(move || {
        let mut line = String::new();
        while err.read_line(&mut line).is_ok_and(|n| n > 0) {
            keep.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    (child, log)
}

/// Waits (up to 10 minutes) until no experiment holds the host's experiment lock: other test
/// runs on this machine (other worktrees) run experiments too, and only one can run at a time.
fn wait_for_no_experiment() {
    let start = Instant::now();
    let held = || {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(m) = std::fs::metadata("/run/bbrscope-experiment.lock") else { return false };
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        locks.lines().any(|l| {
            l.contains(" FLOCK ") && l.split_whitespace().nth(5).is_some_and(|d| d.ends_with(&format!(":{}", m.ino())))
        })
    };
    while held() {
        assert!(start.elapsed() < Duration::from_secs(600), "another experiment holds the lock for 10 minutes");
        thread::sleep(Duration::from_millis(500));
    }
}

/// Ends the experiment with Ctrl-C and returns its JSON report.
fn report_of(child: std::process::Child) -> Value {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_report(child, Duration::from_secs(60), None)
}

/// Waits up to `timeout` for the experiment to end and returns its JSON report; if it does not
/// end, kills it and fails with what it said on stderr (`log`, when kept).
fn wait_report(mut child: std::process::Child, timeout: Duration, log: Option<&Mutex<String>>) -> Value {
    // Read while it writes: a report larger than the pipe's buffer would block it otherwise.
    let mut stdout = child.stdout.take().unwrap();
    let reader = thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let Some(status) = wait_timeout(&mut child, timeout) else {
        let _ = child.kill();
        let said = log.map(|l| l.lock().unwrap().clone()).unwrap_or_default();
        panic!("the experiment did not end within {timeout:?}; its stderr:\n{said}");
    };
    let out = reader.join().unwrap().unwrap();
    assert!(status.success(), "{status}: {out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON object ({e}): {out}"))
}

fn group<'a>(report: &'a Value, label: &str) -> &'a Value {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["label"] == label)
        .unwrap_or_else(|| panic!("no group {label} in {}", report["groups"]))
}

#[test]
fn bbr_wins_on_a_long_lossy_path_and_not_on_a_short_clean_one() {
    require_root();
    let _turn = turn();
    let port = port_for(20_000);
    // 60 ms, 1% random loss (CUBIC is loss-limited there) vs 2 ms and clean; both 20 Mbit/s.
    let lossy = population(60, 60, 0.01, port);
    let clean = population(61, 2, 0.0, port);
    let child = start_experiment("cubic,bbr", port, &["--no-guardrail"]);
    let until = Instant::now() + Duration::from_secs(60);
    const SIZES: &[usize] = &[20_000, 1_000_000];
    let (lossy_log, clean_log) = thread::scope(|s| {
        // Four clients: about 45 large responses per arm, where the report needs 30 (with three,
        // CI once saw 26 in arm B).
        let l = s.spawn(|| load(&lossy, 4, SIZES, until));
        let c = s.spawn(|| load(&clean, 1, SIZES, until));
        (l.join().unwrap(), c.join().unwrap())
    });
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    for (name, log) in [("lossy", &lossy_log), ("clean", &clean_log)] {
        assert!(log.iter().all(|(_, asked, got)| asked == got), "{name}: a response came back short");
    }
    // Every response the clients logged is one flow of the experiment, in one arm or the other.
    let flows = report["arms"][0]["flows"].as_u64().unwrap() + report["arms"][1]["flows"].as_u64().unwrap();
    assert_eq!(flows as usize, lossy_log.len() + clean_log.len(), "{}", report["arms"]);
    assert_eq!(report["sample_ratio"]["mismatch"], false, "{}", report["sample_ratio"]);
    // The large responses: BBR significantly faster on the lossy path, no significant difference
    // on the clean one. (Small responses may go either way: BBR's start-up is not faster there.)
    let large = |label: &str| -> Value {
        let g = group(&report, label);
        g["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["key"] == "completion_p50_256k_4m")
            .unwrap_or_else(|| panic!("no p50 completion of large responses for {label}: {}", g["conclusion"]))
            .clone()
    };
    let lossy_large = large("198.18.60.0/24");
    assert_eq!(lossy_large["diff"]["significant"], true, "{lossy_large}");
    assert!(lossy_large["diff"]["high"].as_f64().unwrap() < 0.0, "BBR (B) faster: {lossy_large}");
    // On the clean path both fill the link: no significant difference, or (the 5% of runs where
    // chance alone flags one) a negligible one.
    let clean_large = large("198.18.61.0/24");
    let d = &clean_large["diff"];
    assert!(d["significant"] == false || d["estimate"].as_f64().unwrap().abs() < 10.0, "{clean_large}");
    drop((lossy, clean));
}

#[test]
fn the_guardrail_stops_an_experiment_whose_arm_is_clearly_worse() {
    require_root();
    let _turn = turn();
    let port = port_for(30_000);
    let lossy = population(62, 60, 0.02, port);
    // Arm B is Reno on a lossy path: clearly slower than BBR.
    let (child, log) = start_logged("bbr,reno", port, &["--guardrail-pct", "20"]);
    let started = Instant::now();
    let pid = child.id();
    let links = cgroup_links_of(pid);
    assert!(!links.is_empty(), "the experiment holds no sock_ops link");
    // Usually over in 20 s; the margin is for a loaded machine (CI once needed more than 150 s).
    let limit = Duration::from_secs(300);
    let until = Instant::now() + limit;
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < until {
                let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
                    && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ");
                if !alive {
                    break;
                }
                load(&lossy, 3, &[200_000], Instant::now() + Duration::from_secs(2));
            }
        });
        // The report comes when the guardrail ends the experiment by itself.
        let report = wait_report(child, limit, Some(&log));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let why = report["stopped_by"].as_str().unwrap_or_default();
        assert!(why.contains("guardrail"), "{why}; {}", report["arms"]);
        assert!(started.elapsed() < limit);
    });
    // Nothing of the experiment is left: its sock_ops link and program are gone (by id: other
    // bbrscope processes may be running on this machine).
    assert_detached(&links);
    // Not a terminal: progress lines on stderr said how it went.
    let log = log.lock().unwrap().clone();
    assert!(log.contains("bbrscope: experiment 0:00 of 5:00 (5:00 left): bbr (A) 0 flows"), "{log}");
    assert!(log.lines().any(|l| l.contains("guardrail: watching: ")), "{log}");
    drop(lossy);
}

#[test]
fn an_a_a_run_finds_no_difference_in_most_metrics() {
    require_root();
    let _turn = turn();
    let port = port_for(40_000);
    let clean = population(63, 10, 0.0, port);
    // The same algorithm in both arms: every difference found is a false positive.
    let child = start_experiment("bbr,bbr", port, &["--no-guardrail"]);
    load(&clean, 2, &[20_000, 300_000], Instant::now() + Duration::from_secs(40));
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    let all = group(&report, "all flows");
    let judged: Vec<&Value> = all["metrics"].as_array().unwrap().iter().filter(|m| m["diff"].is_object()).collect();
    let significant = judged.iter().filter(|m| m["diff"]["significant"] == true).count();
    // The statistics' own A/A simulation (experiment::analysis tests) measures 4.5% false
    // positives per metric: with ~8 metrics judged, two or fewer flagged happens in 99.6% of
    // A/A runs, so this fails by chance about once in 250 runs.
    assert!(judged.len() >= 4, "too few metrics judged: {}", all["metrics"]);
    assert!(significant <= 2, "{significant} of {} metrics differ in an A/A run: {}", judged.len(), all["conclusion"]);
    drop(clean);
}

/// Records tests/fixtures/experiment-two-populations.ndjson, the capture the dashboard tests
/// render the experiment view from: cubic vs bbr on a long lossy path and a short clean one, the
/// experiment's flow_summary records with the fields the analysis reads (the rest left out to
/// keep the file small).
/// Run by hand: `cargo test --test experiment -- --ignored --test-threads=1 record_the_fixture`.
#[test]
#[ignore = "writes a test fixture"]
fn record_the_fixture() {
    require_root();
    let _turn = turn();
    let port = port_for(50_000);
    let lossy = population(64, 60, 0.01, port);
    let clean = population(65, 2, 0.0, port);
    let record = std::env::temp_dir().join(format!("bbrs-exp-fixture-{}.ndjson", std::process::id()));
    let child = start_experiment("cubic,bbr", port, &["--no-guardrail", "--record", record.to_str().unwrap()]);
    let until = Instant::now() + Duration::from_secs(75);
    const SIZES: &[usize] = &[20_000, 500_000];
    thread::scope(|s| {
        s.spawn(|| load(&lossy, 8, SIZES, until));
        s.spawn(|| load(&clean, 1, SIZES, until));
    });
    thread::sleep(Duration::from_secs(1));
    report_of(child);
    let text = std::fs::read_to_string(&record).unwrap();
    let _ = std::fs::remove_file(&record);
    // The fields the analysis reads (experiment::Observation::from_summary).
    const FIELDS: &[&str] = &[
        "type",
        "ts",
        "arm",
        "cc",
        "side",
        "src",
        "dst",
        "bytes_acked",
        "duration_s",
        "goodput_bps",
        "srtt_median_us",
        "min_rtt_us",
        "retrans_total",
        "data_segs_out",
    ];
    let kept: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "flow_summary")
        .map(|v| {
            let o: serde_json::Map<String, Value> =
                FIELDS.iter().filter_map(|&k| v.get(k).map(|x| (k.to_string(), x.clone()))).collect();
            Value::Object(o).to_string()
        })
        .collect();
    let out = format!("{}/../tests/fixtures/experiment-two-populations.ndjson", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(out, kept.join("\n") + "\n").unwrap();
    drop((lossy, clean));
}

/// The cgroup links (the sock_ops attachment) a process holds, as (link id, program id), from its
/// descriptors' fdinfo (the kernel's own account; this bpftool lists no pids).
fn cgroup_links_of(pid: u32) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap().flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        let field = |name: &str| {
            info.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string())).unwrap_or_default()
        };
        if field("link_type:") == "cgroup" {
            out.push((field("link_id:").parse().unwrap(), field("prog_id:").parse().unwrap()));
        }
    }
    out
}

/// Each of `links` (from [`cgroup_links_of`]) and its program are gone.
fn assert_detached(links: &[(u64, u64)]) {
    let exists = |what: &str, id: u64| {
        let out = std::process::Command::new("bpftool").args([what, "show", "id", &id.to_string()]).output().unwrap();
        out.status.success()
    };
    for &(link, prog) in links {
        assert!(!exists("link", link), "link {link} left attached");
        assert!(!exists("prog", prog), "program {prog} left loaded");
    }
}

/// "finished 12 A / 15 B" on the experiment view: the flows finished so far.
fn finished_on_screen(screen: &str) -> Option<usize> {
    let rest = screen.lines().find_map(|l| l.split("finished ").nth(1))?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let n = |w: &str| w.replace(',', "").parse::<usize>().ok();
    Some(n(words.first()?)? + n(words.get(3)?)?)
}

#[test]
fn the_dashboard_follows_a_live_experiment_and_q_ends_it_with_the_report() {
    require_root();
    let _turn = turn();
    let port = port_for(10_000);
    let lossy = population(66, 40, 0.01, port);
    let clean = population(67, 2, 0.0, port);
    wait_for_no_experiment();
    let s = Session::start(
        "experiment",
        120,
        40,
        &format!("experiment --arms cubic,bbr --port {port} --duration 5m --no-guardrail"),
    );
    s.wait_screen("the experiment view", |t| t.contains("cubic (A) vs bbr (B) · 50% to B") && t.contains("guardrail"));

    // `status` lists it, with the pid the kernel says holds the lock.
    let status = |json: bool| {
        let out = bbrscope().args(["status"]).args(json.then_some("--json")).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let st: Value = serde_json::from_str(&status(true)).unwrap();
    let x = &st["experiment"];
    assert_eq!(x["arms"], serde_json::json!(["cubic", "bbr"]), "{x}");
    assert_eq!(
        (x["split_pct"].as_u64(), x["scope"].as_str()),
        (Some(50), Some(format!("port {port}").as_str())),
        "{x}"
    );
    assert_eq!(x["guardrail"], false, "{x}");
    let pid = x["pid"].as_u64().unwrap() as u32;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(comm.trim(), "bbrscope", "pid {pid} is not the experiment");
    assert!(status(false).contains(&format!("experiment: running (pid {pid}): cubic (A) vs bbr (B), 50% to B")));
    let links = cgroup_links_of(pid);
    assert!(!links.is_empty(), "the experiment holds no sock_ops link");

    // Real flows from both populations; the view counts them as they finish and updates.
    let until = Instant::now() + Duration::from_secs(30);
    const SIZES: &[usize] = &[20_000, 300_000];
    let (lossy_log, clean_log) = thread::scope(|sc| {
        let l = sc.spawn(|| load(&lossy, 2, SIZES, until));
        let c = sc.spawn(|| load(&clean, 1, SIZES, until));
        let first = s.wait_screen("finished flows", |t| finished_on_screen(t).is_some_and(|n| n > 0));
        let n1 = finished_on_screen(&first).unwrap();
        let later = s.wait_screen("more finished flows and the analysis", |t| {
            finished_on_screen(t).is_some_and(|n| n > n1 + 20) && t.contains(" arms: ")
        });
        assert!(later.contains("p50 completion") && later.contains("groups ("), "{later}");
        assert!(later.contains("198.18.67.0/24") || later.contains("RTT <10 ms"), "{later}");
        (l.join().unwrap(), c.join().unwrap())
    });
    let flows = lossy_log.len() + clean_log.len();
    s.wait_screen("every flow counted", |t| finished_on_screen(t) == Some(flows));

    s.keys("q");
    let screen = s.wait_exit();
    assert!(screen.contains("EXIT=0"), "{screen}");
    assert!(!screen.contains("-icanon"), "terminal left in raw mode:\n{screen}");
    // The whole pane after the dashboard left the alternate screen: the report, in full.
    let text = tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", &s.0]);
    assert!(text.contains("stopped with q"), "{text}");
    assert!(text.contains(&format!("bbrscope experiment: cubic (A) vs bbr (B), {flows} flows")), "{text}");
    assert!(text.contains("== all flows") && text.contains("recommendation:"), "{text}");
    assert!(!text.contains("flows analysed"), "the dashboard is gone:\n{text}");

    // Nothing left: the link and its program are gone, the lock is free, status lists nothing.
    assert_detached(&links);
    let st: Value = serde_json::from_str(&status(true)).unwrap();
    assert!(st["experiment"].is_null(), "{}", st["experiment"]);
    assert!(status(false).contains("experiment: none running"));
    drop((lossy, clean));
}

/// A crash (SIGKILL: no handler runs) leaves nothing behind either: the sock_ops link dies with
/// the process's descriptors, the kernel drops its flock, and `status` lists no experiment.
#[test]
fn a_killed_experiment_leaves_nothing_attached() {
    require_root();
    let _turn = turn();
    let mut child = start_experiment("cubic,reno", port_for(23_000), &["--no-guardrail"]);
    let links = cgroup_links_of(child.id());
    assert!(!links.is_empty(), "the running experiment holds its sock_ops link");
    child.kill().unwrap();
    child.wait().unwrap();
    // Detaching is the kernel's work after the last descriptor closes: allow it a moment.
    let start = Instant::now();
    while any_link_exists(&links) && start.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(100));
    }
    assert_detached(&links);
    let out = bbrscope().args(["status", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(st["experiment"].is_null(), "status still lists an experiment: {st}");
}

/// Whether any of `links` still exists.
fn any_link_exists(links: &[(u64, u64)]) -> bool {
    links.iter().any(|&(link, _)| {
        std::process::Command::new("bpftool")
            .args(["link", "show", "id", &link.to_string()])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

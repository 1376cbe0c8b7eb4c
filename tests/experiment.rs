//! `bbrscope experiment` on real connections: the kernel's random assignment against the
//! clients' own log. Root: loads BPF programs.

mod common;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::Stdio,
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
    let mut child = bbrscope()
        .args(["experiment", "--arms", "cubic,bbr", "--port", &to.port().to_string(), "--duration", "60s"])
        .args(["--no-guardrail", "--record", record.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Attached once it says so.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("experiment running"), "{line}");
    // The clients' own log.
    const N: usize = 200;
    let log: Vec<(SocketAddr, usize)> = (0..N).map(|i| fetch(to, [1_000, 15_000, 120_000][i % 3])).collect();
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = wait_timeout(&mut child, Duration::from_secs(20)).expect("experiment ends on Ctrl-C");
    assert!(status.success(), "{status}");

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
    let mut first = bbrscope()
        .args(["experiment", "--arms", "cubic,bbr", "--duration", "30s", "--port", "1"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut first_err = BufReader::new(first.stderr.take().unwrap());
    let mut line = String::new();
    first_err.read_line(&mut line).unwrap();
    assert!(line.contains("experiment running"), "{line}");
    let out = bbrscope().args(["experiment", "--arms", "bbr,cubic", "--duration", "5s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("already running"), "{err}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut first, Duration::from_secs(10)).unwrap();
    let mut rest = String::new();
    let _ = first_err.read_to_string(&mut rest);
    assert!(status.success(), "{status}: {rest}");
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

/// Starts `bbrscope experiment ARGS` and waits until it says it runs; stdout is the report.
fn start_experiment(args: &[&str]) -> std::process::Child {
    let mut child =
        bbrscope().arg("experiment").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("experiment running"), "{line}");
    // Keep draining stderr so a later line cannot block the experiment.
    thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    child
}

/// Ends the experiment with Ctrl-C and returns its JSON report.
fn report_of(child: std::process::Child) -> Value {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_report(child, Duration::from_secs(60))
}

/// Waits up to `timeout` for the experiment to end and returns its JSON report.
fn wait_report(mut child: std::process::Child, timeout: Duration) -> Value {
    let status = wait_timeout(&mut child, timeout).expect("experiment ends");
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
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
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    // 60 ms, 1% random loss (CUBIC is loss-limited there) vs 2 ms and clean; both 20 Mbit/s.
    let lossy = population(60, 60, 0.01, port);
    let clean = population(61, 2, 0.0, port);
    let child = start_experiment(&[
        "--arms",
        "cubic,bbr",
        "--port",
        &port.to_string(),
        "--duration",
        "5m",
        "--json",
        "--no-guardrail",
    ]);
    let until = Instant::now() + Duration::from_secs(60);
    const SIZES: &[usize] = &[20_000, 1_000_000];
    let (lossy_log, clean_log) = thread::scope(|s| {
        let l = s.spawn(|| load(&lossy, 3, SIZES, until));
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
    let port = 30_000 + (std::process::id() % 10_000) as u16;
    let lossy = population(62, 60, 0.02, port);
    // Arm B is Reno on a lossy path: clearly slower than BBR.
    let child = start_experiment(&[
        "--arms",
        "bbr,reno",
        "--port",
        &port.to_string(),
        "--duration",
        "5m",
        "--json",
        "--guardrail-pct",
        "20",
    ]);
    let started = Instant::now();
    let pid = child.id();
    let until = Instant::now() + Duration::from_secs(150);
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
        let report = wait_report(child, Duration::from_secs(150));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let why = report["stopped_by"].as_str().unwrap_or_default();
        assert!(why.contains("guardrail"), "{why}; {}", report["arms"]);
        assert!(started.elapsed() < Duration::from_secs(150));
    });
    // Nothing of the experiment is left: no program is held by its process any more (other
    // bbrscope processes may be running on this machine, so only its own pid counts).
    let progs = run("bpftool", &["prog", "show"]);
    assert!(!progs.contains(&format!("bbrscope({pid})")), "{progs}");
    drop(lossy);
}

#[test]
fn an_a_a_run_finds_no_difference_in_most_metrics() {
    require_root();
    let _turn = turn();
    let port = 40_000 + (std::process::id() % 10_000) as u16;
    let clean = population(63, 10, 0.0, port);
    // The same algorithm in both arms: every difference found is a false positive.
    let child = start_experiment(&[
        "--arms",
        "bbr,bbr",
        "--port",
        &port.to_string(),
        "--duration",
        "5m",
        "--json",
        "--no-guardrail",
    ]);
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

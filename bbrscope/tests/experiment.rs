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

use common::{responses::*, *};
use serde_json::Value;

/// Experiments on disjoint scopes run side by side (each test's on a port of its own, with its
/// own emulated paths), so the tests share the host, two at a time (cargo's two test threads): a
/// live test mostly waits on its traffic (about a third of one core here), and each checks
/// `status` for its own experiment, by pid or port. The two whose experiment's scope overlaps
/// every other (their refusal must name the experiment they overlap) take it [`alone`]. (std's
/// RwLock lets no new reader in while a writer waits, so those are not starved.)
static HOST: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A share of the host for a test whose experiment's scope is a port of its own.
fn turn() -> std::sync::RwLockReadGuard<'static, ()> {
    HOST.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host to this test alone, once other processes' experiments have ended too.
fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    let held = HOST.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    wait_for_no_experiment();
    held
}

/// [`serve`], logging each accepted connection's client, the algorithm the experiment gave it
/// (sock_ops sets it as the connection is established, before accept returns) and when it was
/// accepted (Unix seconds).
fn serve_logging_cc(listener: TcpListener) -> Arc<Mutex<Vec<(SocketAddr, String, f64)>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = log.clone();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(c) = conn else { break };
            let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
            let cc = bbrscope::sys::sockopt::congestion(&c).unwrap();
            keep.lock().unwrap().push((c.peer_addr().unwrap(), cc, at));
            thread::spawn(move || respond(c));
        }
    });
    log
}

#[test]
fn every_connection_gets_an_arm_and_the_arms_algorithm() {
    require_root();
    let _turn = turn();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    serve(listener);
    // Recorded into a directory another user owns, who made the file first, open to all (mode
    // 0666, to read root's record of client addresses): the record is root's own, mode 0600.
    let theirs = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(theirs.path(), Some(65534), Some(65534)).unwrap();
    let record = theirs.path().join("exp.ndjson");
    std::fs::write(&record, "").unwrap();
    std::os::unix::fs::chown(&record, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&record, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let sums_port = prometheus::free_port().to_string();
    // A --prefix-list group (every client here is in it): answered by the fleet too, and its
    // hold has a dashboard panel.
    let lists = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(lists.path(), "loopback 127.0.0.0/8\n").unwrap();
    let (child, stderr) = start_logged(
        "cubic,bbr",
        to.port(),
        // The guardrail watches (its sums served, for the fleet's guardrail and its panel) with a
        // margin no loopback difference reaches: no group held, every connection gets an arm.
        &[
            "--prefix-list",
            lists.path().to_str().unwrap(),
            "--guardrail-pct",
            "1000",
            "--record",
            record.to_str().unwrap(),
            "--metrics-listen",
            &sums_port,
            "--id",
            "t_every",
        ],
    );
    // A real Prometheus scrapes the experiment's sums while it runs, and the fleet watch's
    // judgments (below).
    let judged_at: SocketAddr = format!("127.0.0.1:{}", prometheus::free_port()).parse().unwrap();
    let prom = prometheus::Prometheus::start(&[served_at(&stderr), judged_at]);
    // The clients' own log.
    const N: usize = 200;
    let log: Vec<(SocketAddr, usize)> = (0..N).map(|i| fetch(to, [1_000, 15_000, 120_000][i % 3])).collect();
    // An outgoing connection whose local port is the service's (bound to another address) is
    // not the service's: it is not in the experiment.
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_addr = other.local_addr().unwrap();
    serve(other);
    let outgoing = {
        let sock = socket_bound_to(SocketAddr::new("127.0.0.2".parse().unwrap(), to.port()));
        let mut c = connect_from(sock, other_addr);
        c.write_all(b"50000\n").unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), 50_000);
        c.local_addr().unwrap()
    };
    thread::sleep(Duration::from_millis(500));
    let sums_at = served_at(&stderr);
    let scraped = scrape_until(sums_at, N);
    // The fleet analysis of the one host Prometheus holds, once its scrape has every flow.
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query("sum(bbrscope_experiment_flows_total{id=\"t_every\"})").first().map(prometheus::value)
        != Some(N as f64)
    {
        assert!(Instant::now() < until, "Prometheus never held the {N} flows: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let url = format!("http://{}", prom.addr);
    let out =
        bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_every", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fleet: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_every"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    // Watched: a report a line, a look a second, the same answer while nothing changes, its
    // judgments served to Prometheus for the experiment's dashboard, until Ctrl-C (exit 0).
    let judged = judged_at.to_string();
    let mut watching = Reaped(
        bbrscope()
            .args(["experiment", "--analyze-prometheus", &url, "--id", "t_every", "--watch", "1s", "--json"])
            .args(["--metrics-listen", &judged])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut looks = BufReader::new(watching.0.stdout.take().unwrap()).lines();
    let (first, second): (Value, Value) = (
        serde_json::from_str(&looks.next().unwrap().unwrap()).unwrap(),
        serde_json::from_str(&looks.next().unwrap().unwrap()).unwrap(),
    );
    let estimate = "bbrscope_fleet_completion_change_ratio{id=\"t_every\",group=\"all flows\",bound=\"estimate\"}";
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query(estimate).is_empty() {
        assert!(Instant::now() < until, "Prometheus never held the watch's judgments: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let held_estimate = prometheus::value(&prom.query(estimate)[0]);
    // Every query of the experiment's dashboard has data.
    let dashboard = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/grafana/bbrscope-experiment.json");
    let empty: Vec<String> = prometheus::dashboard_queries(dashboard, &[("$id", "t_every")])
        .into_iter()
        .filter(|(_, q)| prom.query(q).is_empty())
        .map(|(title, q)| format!("{title}: {q}"))
        .collect();
    assert!(empty.is_empty(), "dashboard queries without data:\n{}", empty.join("\n"));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(watching.0.id() as i32, libc::SIGINT) };
    assert_eq!(wait_timeout(&mut watching.0, Duration::from_secs(10)).and_then(|s| s.code()), Some(0));
    assert_eq!(first["groups"], second["groups"]);
    let live = report_of(child);
    assert!(TcpStream::connect(sums_at).is_err(), "the sums are still served at {sums_at} after the run");
    let m = std::fs::symlink_metadata(&record).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o600), "the record is root's, for root alone");

    let records: Vec<Value> =
        std::fs::read_to_string(&record).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    // The recording re-analysed offline (no kernel involved) counts the same flows per arm.
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    let _ = std::fs::remove_file(&record);
    // The header keeps the status quo the guardrail protects: this namespace's default, or null
    // where namespaces or routes disagree (other tests' namespaces may, meanwhile).
    let sq = &records[0]["status_quo"];
    assert!(sq.is_null() || *sq == tcp_congestion_control(), "{}", records[0]);
    assert!(records[0].get("status_quo").is_some(), "{}", records[0]);
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
    // The clients' own sockets (local port ephemeral) are not in the experiment, nor the outgoing
    // one that shares the service's port number.
    assert!(!summaries.iter().any(|s| s["dst"] == to.to_string()));
    assert!(!summaries.iter().any(|s| s["src"] == outgoing.to_string()), "{outgoing} is in the experiment");
    // The sums served while it ran are the recorded flows', cell by cell, computed here from the
    // summaries: T = the handshake's round trip (srtt_first) + the server's duration.
    assert!(
        scraped.contains(
            "bbrscope_experiment_info{id=\"t_every\",design=\"per_connection\",arm_a=\"cubic\",arm_b=\"bbr\",split_pct=\"50\""
        ),
        "{scraped}"
    );
    // Flows in flight per arm, served from the start (the unit test in sums.rs checks the values).
    for arm in ["arm=\"a\",cc=\"cubic\"", "arm=\"b\",cc=\"bbr\""] {
        let line = format!("bbrscope_experiment_in_flight_flows{{id=\"t_every\",{arm}}} ");
        assert!(scraped.lines().any(|l| l.starts_with(&line)), "no {line} in:\n{scraped}");
    }
    let mut truth: std::collections::BTreeMap<String, [f64; 4]> = Default::default();
    for s in &summaries {
        assert_eq!(s["retrans_at_open"].as_u64().unwrap_or(0), 0, "a SYN-ACK retransmitted on loopback: {s}");
        let t = s["duration_s"].as_f64().unwrap() + s["srtt_first_us"].as_f64().unwrap() / 1e6;
        let bytes = s["bytes_acked"].as_u64().unwrap() - 1;
        let size = if bytes < 16 << 10 { "lt16k" } else { "16k_256k" };
        let band = match s["min_rtt_us"].as_f64().map(|us| us / 1e3) {
            None => "unknown",
            Some(ms) if ms < 10.0 => "lt10ms",
            Some(ms) => panic!("{ms} ms on loopback: {s}"),
        };
        let (arm, cc) = if s["arm"] == "a" { ("a", "cubic") } else { ("b", "bbr") };
        let key = format!("{{id=\"t_every\",arm=\"{arm}\",cc=\"{cc}\",rtt_band=\"{band}\",size=\"{size}\"}}");
        let cell = truth.entry(key).or_default();
        *cell = [cell[0] + 1.0, cell[1] + t.ln(), cell[2] + t.ln() * t.ln(), cell[3] + t];
    }
    assert!(truth.len() >= 3, "{truth:?}");
    for (labels, want) in &truth {
        let names = [
            "bbrscope_experiment_flows_total",
            "bbrscope_experiment_completion_ln_seconds",
            "bbrscope_experiment_completion_ln_seconds_squared_total",
            "bbrscope_experiment_completion_seconds_total",
        ];
        for (name, want) in names.iter().zip(want) {
            // Served with the clients' --prefix-list groups (a label Prometheus keeps, which the
            // query below leaves free).
            let line = format!("{name}{},prefix_lists=\"loopback\"}} ", labels.trim_end_matches('}'));
            // What Prometheus holds is what was served.
            let held = prom.query(&format!("{name}{labels}"));
            assert!(
                (prometheus::value(&held[0]) - want).abs() <= 1e-9 * want.abs().max(1.0),
                "{name}{labels}: {held:?}"
            );
            let got: f64 = scraped
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or_else(|| panic!("no {line} in:\n{scraped}"))
                .parse()
                .unwrap();
            assert!((got - want).abs() <= 1e-9 * want.abs().max(1.0), "{name}{labels}: served {got}, recorded {want}");
        }
    }
    // The fleet's answer from Prometheus is --analyze's of the recording: every group it judges
    // (all flows, the RTT band), estimate and interval ends to 1e-9, verdict and flows alike.
    assert_eq!(fleet["fleet"]["hosts"], 1, "{}", fleet["fleet"]);
    assert_eq!(first["groups"], fleet["groups"]);
    let want = fleet["groups"][0]["answer"]["effect_pct"].as_f64().unwrap() / 100.0;
    assert!((held_estimate - want).abs() <= 1e-9 * want.abs().max(1e-3), "dashboard {held_estimate}, report {want}");
    assert!(
        text.starts_with(&format!("fleet: experiment t_every on 1 host, their sums from the Prometheus at {url}")),
        "{text}"
    );
    // All flows, the loopback band and the prefix-list group.
    fleet_is_offline(&fleet, &offline, 3);
}

/// The fleet's report (`--analyze-prometheus --json`) judges `groups` groups, each as `offline`
/// (`--analyze --json` of the same flows' recordings) does: verdict and flows alike, estimate and
/// interval ends to 1e-9.
fn fleet_is_offline(fleet: &Value, offline: &Value, groups: usize) {
    let fleet_groups = fleet["groups"].as_array().unwrap();
    assert_eq!(fleet_groups.len(), groups, "{fleet_groups:?}");
    for g in fleet_groups {
        let label = g["label"].as_str().unwrap();
        let o = group(offline, label);
        assert_eq!((&g["verdict"], &g["arms"]), (&o["verdict"], &o["arms"]), "{label}");
        for k in ["effect_pct", "low_pct", "high_pct"] {
            let (f, w) = (g["answer"][k].as_f64().unwrap(), o["answer"][k].as_f64().unwrap());
            assert!((f - w).abs() <= 1e-9 * w.abs().max(1.0), "{label} {k}: fleet {f}, --analyze {w}");
        }
    }
}

/// Flows still running are in no host's sums until they finish; the fleet's report counts them
/// per arm (`bbrscope_experiment_in_flight_flows` of the hosts serving the experiment), against
/// the server's own record of each connection's algorithm, in its JSON and its first line. The
/// run ended while they still run, its report counts them as censored, and the fleet's answer,
/// from the last sums the host served, rests on the same flows per arm.
#[test]
fn a_fleet_report_counts_the_flows_running_on_its_hosts() {
    require_root();
    let _turn = turn();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    let server_log = serve_logging_cc(listener);
    let sums_port = prometheus::free_port().to_string();
    let (child, stderr) =
        start_logged("cubic,bbr", to.port(), &["--no-guardrail", "--metrics-listen", &sums_port, "--id", "t_running"]);
    let prom = prometheus::Prometheus::start(&[served_at(&stderr)]);
    // Clients that ask for 8 MB and read 2 KB every 50 ms (receive buffers 64 KB): their flows
    // stay open, acked slowly, so the observer samples them (a flow stalled on a zero window from
    // its first packets would not be in the flow table before its first sample).
    const HELD: usize = 4;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let held: Vec<thread::JoinHandle<()>> = (0..HELD)
        .map(|_| {
            let stop = stop.clone();
            use rustix::net::{AddressFamily, SocketType, socket, sockopt::set_socket_recv_buffer_size};
            let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
            set_socket_recv_buffer_size(&fd, 64 << 10).unwrap();
            let mut c = connect_from(fd, to);
            c.write_all(b"8000000\n").unwrap();
            thread::spawn(move || {
                let mut buf = [0u8; 2048];
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && c.read(&mut buf).is_ok_and(|n| n > 0) {
                    thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    let url = format!("http://{}", prom.addr);
    let fleet = || -> Value {
        let out = bbrscope()
            .args(["experiment", "--analyze-prometheus", &url, "--id", "t_running", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let running = |f: &Value| ["a", "b"].map(|arm| f["fleet"]["running"][arm].as_u64().unwrap() as usize);
    // The fleet's answer needs the experiment's info series scraped; the gauge is set every 2 s
    // and scraped every second.
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query("bbrscope_experiment_info{id=\"t_running\"}").is_empty() {
        assert!(Instant::now() < until, "Prometheus never held the experiment's info: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let counted = loop {
        let r = running(&fleet());
        if r[0] + r[1] == HELD {
            break r;
        }
        assert!(Instant::now() < until, "the fleet counted {r:?} running, not {HELD}: {}", prom.log());
        thread::sleep(Duration::from_millis(500));
    };
    let truth = ["cubic", "bbr"].map(|cc| server_log.lock().unwrap().iter().filter(|(_, c, _)| c == cc).count());
    assert_eq!(counted, truth, "running per arm against the server's record of each connection's algorithm");
    let text = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_running"]).output().unwrap();
    let first = String::from_utf8_lossy(&text.stdout).lines().next().unwrap_or_default().to_string();
    let words = format!("; {} A / {} B flows running now, in the answer once they finish", counted[0], counted[1]);
    assert!(first.starts_with("fleet: experiment t_running on 1 host") && first.ends_with(&words), "{first}");
    // Ended while they run: the host's report counts them as censored (in its answer with their
    // elapsed time), and its last sums, served until Prometheus has read them, hold them too: the
    // fleet's answer rests on the flows the host's report rests on, none running.
    let report = report_of(child);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in held {
        h.join().unwrap();
    }
    assert_eq!(report["in_flight"], serde_json::json!({"a": truth[0], "b": truth[1]}), "{}", report["in_flight"]);
    let ended = fleet();
    assert_eq!(running(&ended), [0, 0], "{}", ended["fleet"]);
    for arm in 0..2 {
        assert_eq!(ended["arms"][arm]["flows"], report["arms"][arm]["flows"], "arm {arm}: {}", ended["arms"]);
    }
    assert!(report["arms"][0]["flows"].as_u64().unwrap() + report["arms"][1]["flows"].as_u64().unwrap() >= HELD as u64);
}

/// Where the experiment says it serves its sums (`http://ADDR/metrics` on its stderr).
fn served_at(stderr: &Mutex<String>) -> SocketAddr {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let log = stderr.lock().unwrap().clone();
        if let Some(rest) = log.split("http://").nth(1) {
            return rest.split('/').next().unwrap().parse().unwrap();
        }
        assert!(Instant::now() < until, "no sums address on stderr: {log}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// The sums served at `addr` once they count `n` flows (the last ones may still be closing).
fn scrape_until(addr: SocketAddr, n: usize) -> String {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = prometheus::http_get(addr, "/metrics").unwrap();
        assert_eq!(status, 200, "{body}");
        let flows: f64 = body
            .lines()
            .filter(|l| l.starts_with("bbrscope_experiment_flows_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        if flows as usize >= n || Instant::now() > until {
            assert_eq!(flows as usize, n, "{body}");
            return body;
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// A TCP socket bound to `local` (SO_REUSEADDR), not yet connected.
fn socket_bound_to(local: SocketAddr) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketType, bind, socket, sockopt::set_socket_reuseaddr};
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    set_socket_reuseaddr(&fd, true).expect("SO_REUSEADDR");
    bind(&fd, &local).unwrap_or_else(|e| panic!("binding {local}: {e}"));
    fd
}

/// Connects a bound socket to `to`.
fn connect_from(fd: std::os::fd::OwnedFd, to: SocketAddr) -> TcpStream {
    rustix::net::connect(&fd, &to).unwrap_or_else(|e| panic!("connect to {to}: {e}"));
    TcpStream::from(fd)
}

/// A prefix list with a bad line (written by the test that uses it).
const BAD_LIST: &str = "/tmp/bbrscope-test-bad-prefix-list";
/// A recording of a switchback (its header and one flow).
const SWITCHBACK_HEADER: &str = "/tmp/bbrscope-test-switchback-recording";

#[test]
fn bad_input_is_refused_before_anything_is_attached() {
    require_root();
    let _host = alone();
    let too_many = (0..1025).map(|i| format!("10.{}.{}.0/24", i / 256, i % 256)).collect::<Vec<_>>().join(",");
    let cases: &[(&[&str], &str)] = &[
        (&["--arms", "cubic,nosuchcc"], "not an available algorithm"),
        (&["--arms", "cubic"], "two arms"),
        (&["--arms", "bbr,bbr+iw0"], "an initial window of 1 to 128 segments"),
        (&["--arms", "bbr,bbr+cwnd32"], "e.g. bbr or bbr+iw32"),
        (&["--arms", "bbr,nosuchcc+iw32"], "'nosuchcc' is not an available algorithm"),
        (&["--arms", "cubic,bbr", "--split", "0"], "split"),
        (&["--arms", "cubic,bbr", "--split", "100"], "split"),
        (&["--arms", "cubic,bbr", "--duration", "10d"], "duration"),
        (&["--arms", "cubic,bbr", "--dst", "10.0.0.0/33"], "CIDR"),
        (&["--arms", "cubic,bbr", "--plot", "/no/such/dir/x.svg"], "no directory /no/such/dir"),
        (&["--arms", "cubic,bbr", "--duration", "1m", "--flows", "10"], "cannot be used with"),
        (&["--arms", "cubic,bbr", "--delta", "0"], "--delta must be a percentage above 0"),
        (&["--arms", "cubic,bbr", "--delta=-5"], "--delta must be a percentage above 0"),
        (&["--arms", "cubic,bbr", "--min-effect-ms=-1"], "--min-effect-ms"),
        (&["--arms", "cubic,bbr", "--metrics-listen", "nowhere"], "is not an address and port, or a port"),
        (&["--arms", "cubic,bbr", "--metrics-listen", "9581", "--id", "a b"], "an experiment's id is 1 to 64"),
        (&["--arms", "cubic,bbr", "--id", "x"], "--metrics-listen"),
        (&["--arms", "cubic,bbr", "--prefix-list", "/no/such/file"], "--prefix-list /no/such/file"),
        (&["--arms", "cubic,bbr", "--prefix-list", BAD_LIST], "line 2: '10.0.0.0/33' is not a CIDR prefix"),
        // Read bounded: refused after 4 MiB, in well under the 5 s every case gets.
        (&["--arms", "cubic,bbr", "--prefix-list", "/dev/zero"], "larger than 4 MiB: not a prefix list"),
        (&["--analyze", BAD_LIST], "has no flow_summary records with an experiment arm"),
        (&["--arms", "cubic,bbr", "--dst", &too_many], "the kernel's scope holds at most 1024"),
        (&["--arms", "cubic,bbr", "--design", "per-connection", "--block", "2s"], "--block is a switchback's"),
        (&["--arms", "cubic,bbr", "--design", "per-connection", "--seed", "7"], "--seed is a switchback's"),
        (&["--arms", "cubic,bbr", "--design", "client", "--block", "2s"], "--design client has no blocks"),
        (&["--arms", "cubic,bbr", "--design", "client", "--burn-in", "1s"], "--burn-in is a switchback's"),
        (&["--arms", "cubic,bbr", "--design", "switchback", "--block", "0.5s"], "--block must be at least 1s"),
        (&["--arms", "cubic,bbr", "--design", "switchback", "--block", "4s", "--burn-in", "2s"], "less than half"),
        // The default burn-in (3 s) with a short block: named as the default.
        (&["--arms", "cubic,bbr", "--design", "switchback", "--block", "4s"], "3s is the default burn-in"),
        (&["--arms", "cubic,bbr", "--design", "everyone"], "invalid value 'everyone'"),
        (&["--arms", "cubic,bbr", "--host-id", "edge-1"], "--host-id names a host of --design host-switchback"),
        (&["--arms", "cubic,bbr", "--design", "host-switchback", "--host-id", ""], "--host-id '': a name of 1 to"),
        (&["--arms", "cubic,bbr", "--design", "host-switchback", "--block", "4s"], "3s is the default burn-in"),
        (&["--analyze", BAD_LIST, "--kernel-log", "warn"], "--kernel-log is a live run's"),
        (&["--arms", "cubic,bbr", "--kernel-log", "all"], "invalid value 'all'"),
        (&["--analyze", BAD_LIST, "--design", "switchback"], "cannot be used with"),
        // A quantile's bounds take each flow as a draw of its own, and need the flows themselves.
        (&["--arms", "cubic,bbr", "--metric", "p95"], "--metric p95 needs --design per-connection"),
        (
            &["--arms", "cubic,bbr", "--design", "client", "--metric", "p99"],
            "--metric p99 needs --design per-connection",
        ),
        (
            &[
                "--arms",
                "cubic,bbr",
                "--design",
                "per-connection",
                "--metric",
                "p95",
                "--metrics-listen",
                "9581",
                "--id",
                "q",
            ],
            "a quantile is not a sum",
        ),
        (&["--analyze-prometheus", "http://127.0.0.1:1", "--id", "q", "--metric", "p50"], "a quantile is not one"),
        (&["--analyze-prometheus", "http://127.0.0.1:1", "--id", "q", "--by-host", "arm"], "--by-host 'arm': a label"),
        (&["--analyze-prometheus", "http://127.0.0.1:1", "--id", "q", "--by-host", "a-b"], "--by-host 'a-b': a label"),
        (
            &["--analyze-prometheus", "http://127.0.0.1:1", "--id", "q", "--prometheus-header", "Bearer secret"],
            "--prometheus-header a line with no ':': not a header line",
        ),
        (
            &["--analyze-prometheus", "http://127.0.0.1:1", "--id", "q", "--prometheus-header", "@/nonexistent/h"],
            "--prometheus-header @/nonexistent/h: No such file",
        ),
        (&["--arms", "cubic,bbr", "--prometheus-header", "X-A: b"], "--analyze-prometheus"),
        (&["--analyze", SWITCHBACK_HEADER, "--metric", "p95"], "this recording's is a switchback"),
    ];
    std::fs::write(
        SWITCHBACK_HEADER,
        concat!(
            r#"{"type":"experiment","arms":["cubic","bbr"],"split_pct":50,"guardrail_pct":null,"delta_pct":5.0,"#,
            r#""min_effect_ms":5.0,"scope":{"cgroup":null,"dst":[],"known":true,"port":1},"design":"switchback","#,
            r#""schedule":{"block_s":15.0,"burn_in_s":3.0,"seed":1}}"#,
            "\n",
            r#"{"type":"flow_summary","ts":1795714074.6,"arm":"a","cc":"cubic","side":"accept","#,
            r#""dst":"198.51.100.2:5000","bytes_acked":2001,"duration_s":0.05}"#,
            "\n"
        ),
    )
    .unwrap();
    std::fs::write(BAD_LIST, "far 203.0.113.0/24\nnear 10.0.0.0/33\n").unwrap();
    for (args, needle) in cases {
        let start = Instant::now();
        let out = bbrscope().arg("experiment").args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: expected '{needle}' in {err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        if args.contains(&"/dev/zero") {
            assert!(start.elapsed() < Duration::from_secs(1), "/dev/zero took {:?}", start.elapsed());
        }
    }
    let _ = std::fs::remove_file(BAD_LIST);
    let _ = std::fs::remove_file(SWITCHBACK_HEADER);
    // A second experiment while one runs, on a scope that overlaps its (every new connection).
    let mut first = start_experiment("cubic,bbr", 1, &[]);
    let out = bbrscope().args(["experiment", "--arms", "bbr,cubic", "--duration", "5s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // The holder as the kernel's lock table names it.
    assert!(err.contains(&format!("already running on port 1 (pid {})", first.id())), "{err}");
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut first, Duration::from_secs(10)).unwrap();
    assert!(status.success(), "{status}");
}

/// A port for a test's service, apart from other test runs' (`base` apart from other tests').
fn port_for(base: u16) -> u16 {
    base + (std::process::id() % 10_000) as u16
}

/// Starts `bbrscope experiment --arms ARMS --port PORT --duration 5m --json EXTRA...` (ended by
/// the test, by the guardrail, by a flow count or its own `--duration` in EXTRA) and waits until it says it runs;
/// stdout is the JSON report.
fn start_experiment(arms: &str, port: u16, extra: &[&str]) -> std::process::Child {
    start_logged(arms, port, extra).0
}

/// [`start_experiment`], and what it writes on stderr after its first line (stdout is not a
/// terminal: a progress line every 10 s).
fn start_logged(arms: &str, port: u16, extra: &[&str]) -> (std::process::Child, Arc<Mutex<String>>) {
    let (child, mut err) = loop {
        wait_for_no_experiment();
        // The design these tests were written for unless they name one: each connection draws.
        let design: &[&str] = if extra.contains(&"--design") { &[] } else { &["--design", "per-connection"] };
        let duration: &[&str] = if extra.contains(&"--duration") { &[] } else { &["--duration", "5m"] };
        let (mut child, mut err) = spawn_piped(
            bbrscope()
                .args(["experiment", "--arms", arms, "--port", &port.to_string(), "--json"])
                .args(duration)
                .args(design)
                .args(extra),
        );
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

/// Waits (up to 10 minutes) until no experiment but this test process's own runs on this host:
/// other test runs on this machine (other worktrees) run experiments too, on scopes these tests'
/// may overlap. Each running experiment holds a lock on its own
/// `/run/bbrscope-experiment-PID.lock`; this process's own (the other test thread's) share the
/// host by [`turn`].
fn wait_for_no_experiment() {
    let start = Instant::now();
    let ours = |pid: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The parent's pid is the second field after the command's closing parenthesis.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        ppid == Some(&std::process::id().to_string())
    };
    let held = || {
        use std::os::unix::fs::MetadataExt as _;
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        std::fs::read_dir("/run").unwrap().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("bbrscope-experiment-").and_then(|n| n.strip_suffix(".lock"));
            pid.is_some_and(|pid| !ours(pid))
                && e.metadata().is_ok_and(|m| {
                    locks.lines().any(|l| {
                        l.contains(" FLOCK ")
                            && l.split_whitespace().nth(5).is_some_and(|d| d.ends_with(&format!(":{}", m.ino())))
                    })
                })
        })
    };
    while held() {
        assert!(start.elapsed() < Duration::from_secs(600), "another experiment runs for 10 minutes");
        thread::sleep(Duration::from_millis(500));
    }
}

/// The pids of the experiments `status --json` lists.
fn running_pids(status: &Value) -> Vec<u32> {
    let list = status["experiments"].as_array().unwrap_or_else(|| panic!("no experiments in {status}"));
    list.iter().map(|x| x["pid"].as_u64().unwrap() as u32).collect()
}

/// Ends the experiment with Ctrl-C and returns its JSON report.
fn report_of(child: std::process::Child) -> Value {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    wait_report(child, Duration::from_secs(60), None)
}

/// Waits up to `timeout` for the experiment to end and returns its JSON report; if it does not
/// end, kills it and fails with what it said on stderr (`log`, when kept).
fn wait_report(child: std::process::Child, timeout: Duration, log: Option<&Mutex<String>>) -> Value {
    let (code, report) = wait_report_status(child, timeout, log);
    assert_eq!(code, Some(0), "{report}");
    report
}

/// [`wait_report`], and the exit status (3 for a guardrail stop, 2 when nothing could be
/// concluded).
fn wait_report_status(
    mut child: std::process::Child,
    timeout: Duration,
    log: Option<&Mutex<String>>,
) -> (Option<i32>, Value) {
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
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{status}, not one JSON object ({e}): {out}"));
    (status.code(), report)
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
    // The lossy path: BBR faster, by a change that matters; the clean one: no change that matters
    // (the decision's own rule: the always-valid interval, family-wise over the groups).
    let lossy_g = group(&report, "198.18.60.0/24");
    assert_eq!(lossy_g["verdict"], "b_better", "{}", lossy_g["conclusion"]);
    assert_eq!(lossy_g["answer"]["practical"], true, "{}", lossy_g["answer"]);
    assert!(lossy_g["answer"]["high_pct"].as_f64().unwrap() < 0.0, "{}", lossy_g["answer"]);
    let clean_g = group(&report, "198.18.61.0/24");
    assert_ne!(clean_g["answer"]["practical"], true, "{}", clean_g["conclusion"]);
    drop((lossy, clean));
}

/// `--arms bbr,bbr+iw32` on 20–60 KB responses: over a 100 ms path the larger initial window
/// saves a round trip of three or four, a change that matters; over a 2 ms path it saves 2 ms,
/// which does not. Every flow runs BBR (no flow counted as overridden), and the recommendation is
/// the far prefix's route with the window beside the algorithm, that prefix only.
#[test]
fn an_initial_window_arm_wins_on_a_long_path_and_is_recommended_for_its_route_only() {
    require_root();
    let _turn = turn();
    let port = port_for(24_000);
    let far = population(70, 100, 0.0, port);
    let near = population(71, 2, 0.0, port);
    let child = start_experiment("bbr,bbr+iw32", port, &["--no-guardrail", "--recommend", "--dst", "198.18.0.0/15"]);
    let until = Instant::now() + Duration::from_secs(40);
    const SIZES: &[usize] = &[20_000, 30_000, 40_000, 50_000, 60_000];
    let (far_log, near_log) = thread::scope(|s| {
        let f = s.spawn(|| load(&far, 4, SIZES, until));
        let n = s.spawn(|| load(&near, 1, SIZES, until));
        (f.join().unwrap(), n.join().unwrap())
    });
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    assert!(far_log.iter().chain(&near_log).all(|(_, asked, got)| asked == got), "a response came back short");
    assert_eq!(report["integrity"]["excluded"], serde_json::json!([0, 0]), "{}", report["integrity"]);
    assert_eq!(report["arms"][1]["arm"], "bbr+iw32", "{}", report["arms"]);
    let f = group(&report, "198.18.70.0/24");
    eprintln!("far: {}\nnear: {}", f["conclusion"], group(&report, "198.18.71.0/24")["conclusion"]);
    assert_eq!(f["verdict"], "b_better", "{}", f["conclusion"]);
    assert_eq!(f["answer"]["practical"], true, "{}", f["answer"]);
    let n = group(&report, "198.18.71.0/24");
    assert_ne!(n["answer"]["practical"], true, "{}", n["conclusion"]);
    assert_eq!(
        report["recommend"]["commands"],
        serde_json::json!(["bbrscope apply bbr --route 198.18.70.0/24 --initcwnd 32"]),
        "{}",
        report["recommend"]
    );
    drop((far, near));
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
    let why = thread::scope(|s| {
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
        // The report comes when the guardrail ends the experiment by itself, with exit status 3.
        let (code, report) = wait_report_status(child, limit, Some(&log));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let why = report["stopped_by"].as_str().unwrap_or_default();
        assert!(why.contains("guardrail"), "{why}; {}", report["arms"]);
        assert_eq!(code, Some(3), "{why}");
        // Reno, the slower: the guardrail's numbers, and a report that cannot contradict them.
        assert_eq!(report["guardrail"]["worse_arm"], 1, "{}", report["guardrail"]);
        assert!(report["recommend"]["commands"].as_array().unwrap().is_empty(), "{}", report["recommend"]);
        for g in report["groups"].as_array().unwrap() {
            assert_ne!(g["verdict"], "b_better", "{}", g["conclusion"]);
        }
        assert!(started.elapsed() < limit);
        why.to_string()
    });
    // Nothing of the experiment is left: its sock_ops link and program are gone (by id: other
    // bbrscope processes may be running on this machine).
    assert_detached(&links);
    // Not a terminal: progress lines on stderr said how it went.
    let log = log.lock().unwrap().clone();
    assert!(log.contains("bbrscope: experiment 0:00 of 5:00 (5:00 left): bbr (A) 0 flows"), "{log}");
    // The last line says why it ended (the guardrail may stop it before a second line).
    let reason = why.strip_prefix("stopped early by the guardrail: ").unwrap_or(&why);
    assert!(log.trim_end().lines().last().is_some_and(|l| l.ends_with(&format!("guardrail: {reason}"))), "{log}");
    drop(lossy);
}

/// Arm B (Reno) clearly slower only for the far lossy clients (the near ones fetch 10 KB, one
/// initial window whatever the algorithm): the guardrail sends that band of clients back to its
/// status quo and the run goes on. The servers' own logs say it: the far
/// clients' new connections stop getting Reno (the status quo is this host's default, BBR, so the
/// kernel simply gives them no arm), while the near clients' still get both arms after it; the
/// report names the group sent back and its numbers, and the run ends when it is told to, not
/// by the guardrail (with most of the time in the far band, "all flows" often trips first: the
/// far band, which carries that harm, goes back then).
#[test]
fn a_group_the_arm_harms_goes_back_to_its_status_quo_and_the_others_go_on() {
    require_root();
    let _turn = turn();
    let port = port_for(31_000);
    let (far, far_listener) = emulated(66, 80, 0.02, port);
    let (near, near_listener) = emulated(67, 2, 0.0, port);
    let far_log = serve_logging_cc(far_listener);
    let near_log = serve_logging_cc(near_listener);
    let status_quo = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    assert_eq!(status_quo.trim(), "bbr", "this test's arms assume the host's default is bbr");
    let (child, log) = start_logged("bbr,reno", port, &["--guardrail-pct", "20"]);
    let (report, near_after) = until_sent_back(child, &log, (&far, &far_log), (&near, &near_log));
    let sent = report["guardrail_switched_back"].as_array().unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["group"], "clients at RTT 50–150 ms", "{sent:?}");
    assert_eq!(sent[0]["worse_arm"], 1, "{sent:?}");
    // Its own interval lies above zero, or "all flows" tripped first and it carries that harm.
    let carried = sent[0]["reason"].as_str().unwrap().contains("carry it");
    assert!(sent[0]["worse_pct"][usize::from(!carried)].as_f64().unwrap() > 0.0, "{sent:?}");
    // After the far band went back, the near clients still got both arms.
    for arm in ["bbr", "reno"] {
        assert!(near_after.iter().filter(|cc| *cc == arm).count() >= 5, "near after the switch back: {near_after:?}");
    }
    drop((far, near));
}

type CcLog = Arc<Mutex<Vec<(SocketAddr, String, f64)>>>;

/// The clients of `harmed` fetch 200 KB (where Reno, arm B, loses), those of `other` 10 KB (one
/// initial window whatever the algorithm), until the harmed clients' last 20 connections ran
/// BBR after some ran Reno (by chance, with arms drawn 50/50, 2^-20): their group was sent back
/// and the kernel gives them no arm. Then 10 s more, and SIGTERM. The report (the run must have
/// gone on until then), and the algorithms `other`'s connections got after the switch back, by
/// the server's own log.
fn until_sent_back(
    child: std::process::Child,
    log: &Mutex<String>,
    harmed: (&Population, &CcLog),
    other: (&Population, &CcLog),
) -> (Value, Vec<String>) {
    const IN_A_ROW: usize = 20;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (other_at_switch, report) = thread::scope(|s| {
        for (p, sizes) in [(harmed.0, &[200_000][..]), (other.0, &[10_000][..])] {
            let stop = &stop;
            s.spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    load(p, 3, sizes, Instant::now() + Duration::from_secs(1));
                }
            });
        }
        // Usually within a minute; the margin is for a loaded machine.
        let until = Instant::now() + Duration::from_secs(300);
        let switched = loop {
            let ccs: Vec<String> = harmed.1.lock().unwrap().iter().map(|(_, cc, _)| cc.clone()).collect();
            if ccs.iter().any(|cc| cc == "reno")
                && ccs.len() > IN_A_ROW
                && ccs[ccs.len() - IN_A_ROW..].iter().all(|cc| cc == "bbr")
            {
                break true;
            }
            if Instant::now() > until || child_gone(&child) {
                break false;
            }
            thread::sleep(Duration::from_millis(500));
        };
        let other_at_switch = other.1.lock().unwrap().len();
        if switched {
            // The other clients go on with their arms for a while.
            thread::sleep(Duration::from_secs(10));
        }
        // SAFETY: kill(2) on the experiment's pid, which this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let (code, report) = wait_report_status(child, Duration::from_secs(120), Some(log));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            switched,
            "the harmed clients kept getting reno; sent back {}; {}: {}",
            report["guardrail_switched_back"], report["stopped_by"], report["guardrail"]
        );
        assert_eq!(code, Some(0), "{}", report["stopped_by"]);
        (other_at_switch, report)
    });
    assert_eq!(report["stopped_by"], "stopped by SIGTERM", "{}", report["guardrail"]);
    let after = other.1.lock().unwrap()[other_at_switch..].iter().map(|(_, cc, _)| cc.clone()).collect();
    (report, after)
}

/// The connections' own status quo, as the kernel read it on each: their namespace's default is
/// reno, the host's another (so the run's status quo, read from the namespaces, is not reno), and
/// the arms are reno and bbr on a lossy path, where bbr wins big. Only bbr moved these clients,
/// so the guardrail watches only bbr, and reno's loss, what these clients would have had anyway,
/// neither stops the run nor sends anyone back: it runs its full length. Every flow's record says
/// arm A was its status quo. The path (60 ms, 5% loss) makes the win big enough that the replay
/// without the status quo stops on reno within seconds (at 2% its interval's lower end cleared
/// zero by 3% alone, and not at all beside another test).
#[test]
fn a_big_win_does_not_stop_a_run_whose_clients_had_the_losing_arm() {
    require_root();
    let _turn = turn();
    let port = port_for(32_000);
    let (lossy, listener) = emulated(68, 60, 0.05, port);
    lossy.link.sender.sysctl("net/ipv4/tcp_congestion_control", "reno").unwrap();
    assert_ne!(tcp_congestion_control(), "reno", "the host's default must differ from the namespace's");
    serve(listener);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("exp.ndjson");
    let (child, log) = start_logged(
        "reno,bbr",
        port,
        &["--guardrail-pct", "20", "--duration", "40s", "--record", record.to_str().unwrap()],
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (code, report) = thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                load(&lossy, 3, &[200_000], Instant::now() + Duration::from_secs(2));
            }
        });
        let ended = wait_report_status(child, Duration::from_secs(300), Some(&log));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ended
    });
    assert_eq!(code, Some(0), "{}: {}", report["stopped_by"], report["guardrail"]);
    assert!(report["stopped_by"].is_null(), "{}", report["stopped_by"]);
    assert_eq!(report["guardrail_switched_back"].as_array().map_or(0, Vec::len), 0, "{report}");
    // The recording's replay of the guardrail says what it watched, from the flows' own status quo.
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    let replay = &offline["guardrail_replay"];
    assert!(replay["stopped_at_s"].is_null() && replay["switched_back"] == serde_json::json!([]), "{replay}");
    let reason = replay["decision"]["reason"].as_str().unwrap();
    assert!(reason.contains("arm B (bbr), which moved clients off reno"), "{reason}");
    // The win was there to stop on: bbr faster for all flows.
    let all = group(&report, "all flows");
    assert!(all["answer"]["effect_pct"].as_f64().unwrap() < 0.0, "{}", all["answer"]);
    let mut records: Vec<Value> =
        std::fs::read_to_string(&record).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let flows = records.iter().filter(|r| r["type"] == "flow_summary" && r["arm"].is_string()).count();
    assert!(flows >= 20, "{flows} flows");
    for r in records.iter_mut().filter(|r| r["type"] == "flow_summary" && r["arm"].is_string()) {
        assert_eq!(r["status_quo"], "a", "{r}");
        r.as_object_mut().unwrap().remove("status_quo");
    }
    // Without it (a recording made before the kernel said), the run's status quo stands in: not
    // reno alone (the host's default differs), so reno is watched, and its loss would have sent
    // these clients back or stopped the run.
    let before = dir.path().join("before.ndjson");
    std::fs::write(&before, records.iter().map(|r| format!("{r}\n")).collect::<String>()).unwrap();
    let out = bbrscope().args(["experiment", "--analyze", before.to_str().unwrap(), "--json"]).output().unwrap();
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    let replay = &offline["guardrail_replay"];
    eprintln!("a big win: {} flows; all flows {}; the replay without status_quo: {replay}", flows, all["answer"]);
    assert!(!replay["stopped_at_s"].is_null() || replay["switched_back"] != serde_json::json!([]), "{replay}");
    drop(lossy);
}

/// Two client networks at the same distance (80 ms, one RTT band), each a `--prefix-list` group:
/// arm B (Reno) is clearly slower for the lossy one only (the clean one fetches 10 KB, one
/// initial window whatever the algorithm). The guardrail sends that group back alone: the kernel
/// holds its prefix, and the servers' own logs show its new connections no longer get Reno while
/// its neighbours in the same band still get both arms; the band is not sent back, nor is the
/// run stopped.
#[test]
fn a_prefix_list_group_the_arm_harms_goes_back_and_its_neighbours_go_on() {
    require_root();
    let _turn = turn();
    let port = port_for(33_000);
    let (lossy, lossy_listener) = emulated(69, 80, 0.02, port);
    let (clean, clean_listener) = emulated(70, 80, 0.0, port);
    let lossy_log = serve_logging_cc(lossy_listener);
    let clean_log = serve_logging_cc(clean_listener);
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("groups.txt");
    let net = |p: &Population| format!("{}/24", p.link.receiver_addr);
    std::fs::write(&list, format!("lossy {}\nclean {}\n", net(&lossy), net(&clean))).unwrap();
    let (child, log) =
        start_logged("bbr,reno", port, &["--guardrail-pct", "20", "--prefix-list", list.to_str().unwrap()]);
    let (report, clean_after) = until_sent_back(child, &log, (&lossy, &lossy_log), (&clean, &clean_log));
    let sent = report["guardrail_switched_back"].as_array().unwrap();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let which = (&sent[0]["group"], &sent[0]["list"], &sent[0]["band"]);
    assert_eq!(which, (&"clients in lossy".into(), &0.into(), &Value::Null), "{sent:?}");
    assert_eq!(sent[0]["worse_arm"], 1, "{sent:?}");
    // After the lossy group went back, its neighbours in the same band still got both arms.
    for arm in ["bbr", "reno"] {
        assert!(
            clean_after.iter().filter(|cc| *cc == arm).count() >= 5,
            "clean after the switch back: {clean_after:?}"
        );
    }
    drop((lossy, clean));
}

/// Whether the process has exited (a zombie counts: it is not reaped until the report is read).
fn child_gone(child: &std::process::Child) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    stat.is_empty() || stat.contains(") Z ")
}

/// Large transfers still running when SIGTERM ends the experiment: after its drain (10 s, in
/// which they cannot finish) they are counted per arm as in flight, as the server's own log of
/// their algorithms says, at no less than their time so far; `--analyze` of the recording says
/// the same. Connections that open during the drain get no arm: the server's log has the
/// namespace's default for them (the arms are two algorithms other than it).
#[test]
fn flows_still_running_at_the_end_are_counted_per_arm_as_in_flight() {
    require_root();
    let _turn = turn();
    let port = port_for(26_000);
    let (p, listener) = emulated(72, 80, 0.0, port);
    // A new socket's algorithm is its namespace's default: what a connection without an arm gets.
    let status_quo =
        p.link.sender.run(|| Ok(bbrscope::sys::sockopt::congestion(&TcpListener::bind("0.0.0.0:0")?)?)).unwrap();
    let arms: Vec<&str> = ["cubic", "bbr", "reno"].into_iter().filter(|cc| *cc != status_quo).take(2).collect();
    let server_log = serve_logging_cc(listener);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("exp.ndjson");
    let child = start_experiment(&arms.join(","), port, &["--no-guardrail", "--record", record.to_str().unwrap()]);
    // 6 transfers of 200 MB on a 20 Mbit/s path: minutes each, far past the test.
    const BIG: usize = 200_000_000;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (live, took, sent_at, big, drained) = thread::scope(|s| {
        let mut big = Vec::new();
        for _ in 0..6 {
            let server = p.server;
            let mut c = p.link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
            c.write_all(format!("{BIG}\n").as_bytes()).unwrap();
            c.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
            big.push(c.local_addr().unwrap());
            let stop = &stop;
            s.spawn(move || {
                let (mut buf, mut got) = (vec![0u8; 1 << 16], 0);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match c.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(_) => {}
                    }
                }
                assert!(got < BIG, "a large transfer finished");
            });
        }
        let connected = Instant::now();
        // Small responses beside them, all done before the stop: they finish as usual.
        load(&p, 2, &[20_000], connected + Duration::from_secs(3));
        thread::sleep(Duration::from_millis(500));
        let sent_at = connected.elapsed();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        // Well inside the drain (10 s): three short responses.
        let (server, p) = (p.server, &p);
        let late = s.spawn(move || {
            thread::sleep(Duration::from_secs(2));
            (0..3).map(|_| p.link.receiver.run(move || Ok(fetch(server, 20_000).0)).unwrap()).collect::<Vec<_>>()
        });
        let live = wait_report(child, Duration::from_secs(60), None);
        let took = t.elapsed();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (live, took, sent_at, big, late.join().unwrap())
    });
    assert_eq!(live["stopped_by"], "stopped by SIGTERM");
    // It waited for them, boundedly: the drain's 10 s (the report's own time on top).
    assert!(took >= Duration::from_secs(9) && took < Duration::from_secs(40), "{took:?}");
    // The server's log: the large transfers' algorithms, per arm.
    let ccs: Vec<String> = server_log
        .lock()
        .unwrap()
        .iter()
        .filter(|(peer, ..)| big.contains(peer))
        .map(|(_, cc, _)| cc.clone())
        .collect();
    assert_eq!(ccs.len(), big.len(), "{ccs:?}");
    let per_arm = [arms[0], arms[1]].map(|cc| ccs.iter().filter(|c| *c == cc).count());
    let late: Vec<String> = server_log
        .lock()
        .unwrap()
        .iter()
        .filter(|(peer, ..)| drained.contains(peer))
        .map(|(_, cc, _)| cc.clone())
        .collect();
    assert_eq!(late, vec![status_quo.clone(); drained.len()], "connections opened during the drain ({arms:?} arms)");
    assert_eq!(live["in_flight"], serde_json::json!({"a": per_arm[0], "b": per_arm[1]}), "{ccs:?}");
    let records: Vec<Value> =
        std::fs::read_to_string(&record).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let running: Vec<&Value> = records.iter().filter(|r| r["type"] == "flow_in_flight").collect();
    assert_eq!(running.len(), big.len());
    for r in &running {
        // At least their time until the signal, and what they got of it so far.
        assert!(r["duration_s"].as_f64().unwrap() >= sent_at.as_secs_f64(), "{r} ({sent_at:?})");
        assert!(r["bytes"].as_u64().is_some_and(|b| b > 0 && b < BIG as u64), "{r}");
    }
    // Both arms moved every connection off its namespace's default: the kernel says so of each,
    // finished or not.
    for r in records.iter().filter(|r| r["type"] == "flow_summary" || r["type"] == "flow_in_flight") {
        assert_eq!(r["status_quo"], "neither", "{r} ({arms:?} arms, status quo {status_quo})");
    }
    let finished = records.iter().filter(|r| r["type"] == "flow_summary").count() as u64;
    let flows = |v: &Value| v["arms"][0]["flows"].as_u64().unwrap() + v["arms"][1]["flows"].as_u64().unwrap();
    assert_eq!(flows(&live), finished + big.len() as u64, "{}", live["arms"]);
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["in_flight", "arms", "sample_ratio"] {
        assert_eq!(live[k], offline[k], "{k}: the live report and the offline one");
    }
    assert_eq!(live["groups"][0]["answer"], offline["groups"][0]["answer"]);
    drop(p);
}

/// `--design switchback`: the kernel gives every new connection the block's arm, block by block
/// as the schedule says, switching on the wall clock. A client opens a short connection every
/// 100 ms for 30 s (thirty blocks of 1 s: at least nine rounds); the server's own log of each
/// connection's algorithm and accept time, against the test's own copy of the schedule (its seed
/// given): every connection accepted in an A block, away from its boundaries (the switch and the
/// accept are not the same instant), ran A's algorithm, every one in a B block B's, and the
/// mixed blocks had both. The recording keeps the schedule. A real Prometheus scrapes the run's
/// sums (`--metrics-listen`): the fleet's answer from them (`--analyze-prometheus`) is the
/// recording's (`--analyze`), every estimate and interval end to 1e-9, the per-connection
/// contrast and the flows the schedule left out alike.
#[test]
fn a_switchback_gives_every_connection_its_blocks_arm() {
    use bbrscope::experiment::schedule::{Kind, Schedule};
    require_root();
    let _turn = turn();
    let port = port_for(28_000);
    let (p, listener) = emulated(73, 2, 0.0, port);
    // Two arms other than the namespace's default: a connection the switch missed shows.
    let status_quo =
        p.link.sender.run(|| Ok(bbrscope::sys::sockopt::congestion(&TcpListener::bind("0.0.0.0:0")?)?)).unwrap();
    let arms: Vec<&str> = ["cubic", "reno", "bbr"].into_iter().filter(|cc| *cc != status_quo).take(2).collect();
    let server_log = serve_logging_cc(listener);
    const SEED: u64 = 20_261_129;
    let schedule = Schedule { block_s: 1.0, burn_in_s: 0.3, seed: SEED, host: None };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("exp.ndjson");
    let seed = SEED.to_string();
    let sums_port = prometheus::free_port().to_string();
    let flags = ["--design", "switchback", "--block", "1s", "--burn-in", "0.3s", "--seed", &seed, "--no-guardrail"];
    let more = ["--metrics-listen", &sums_port, "--id", "t_switch", "--record", record.to_str().unwrap()];
    let (child, log) = start_logged(&arms.join(","), port, &[&flags[..], &more[..]].concat());
    let prom = prometheus::Prometheus::start(&[served_at(&log)]);
    load_paced(&p, 1, &[2_000], Instant::now() + Duration::from_secs(30), Duration::from_millis(100));
    // The fleet's answer once Prometheus holds every flow the server accepted.
    let accepted = server_log.lock().unwrap().len() as f64;
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query("sum(bbrscope_experiment_flows_total{id=\"t_switch\"})").first().map(prometheus::value)
        != Some(accepted)
    {
        assert!(Instant::now() < until, "Prometheus never held the {accepted} flows: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let url = format!("http://{}", prom.addr);
    let out =
        bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_switch", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fleet: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_switch"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let report = report_of(child);
    assert_eq!(report["stopped_by"], "stopped by Ctrl-C");
    // The fleet's words for the schedule: its blocks, and whether they fit (no percentile: the
    // sums have none).
    assert!(text.contains(&format!("design: switchback, blocks of 1 s (burn-in 0.3 s, seed {SEED})")), "{text}");
    assert!(text.contains("blocks fit this traffic: ") && !text.contains("99th percentile"), "{text}");
    // The server's log against the schedule.
    let margin = 0.15;
    let (mut checked, mut mixed) = ([0; 2], Vec::new());
    for (peer, cc, at) in server_log.lock().unwrap().iter() {
        let k = schedule.block_of(*at);
        if *at - schedule.start_of(k) < margin || schedule.start_of(k + 1) - *at < margin {
            continue;
        }
        match schedule.kind(k) {
            Kind::A => {
                assert_eq!(cc, arms[0], "{peer} at {at:.3} in block {k} (A)");
                checked[0] += 1;
            }
            Kind::B => {
                assert_eq!(cc, arms[1], "{peer} at {at:.3} in block {k} (B)");
                checked[1] += 1;
            }
            Kind::Mixed => mixed.push(cc.clone()),
        }
    }
    let per_arm = arms.iter().map(|a| mixed.iter().filter(|cc| cc == a).count()).collect::<Vec<_>>();
    assert!(checked[0] >= 10 && checked[1] >= 10 && mixed.len() >= 10, "A {checked:?} B, mixed {per_arm:?}");
    assert!(per_arm.iter().all(|&n| n > 0), "mixed blocks: {per_arm:?} of {arms:?}");
    assert_eq!(per_arm.iter().sum::<usize>(), mixed.len(), "mixed blocks: only the arms ({mixed:?})");
    // The recording's header keeps the design and the schedule; the progress lines name the block.
    let header: Value =
        serde_json::from_str(std::fs::read_to_string(&record).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(header["design"], "switchback", "{header}");
    assert_eq!(header["schedule"], serde_json::json!({"block_s": 1.0, "burn_in_s": 0.3, "seed": SEED}), "{header}");
    let said = log.lock().unwrap().clone();
    assert!(said.contains("; switchback: block "), "{said}");
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    fleet_is_offline(&fleet, &offline, 2);
    for g in fleet["groups"].as_array().unwrap() {
        let (f, o) = (&g["switchback"], &group(&offline, g["label"].as_str().unwrap())["switchback"]);
        assert!(f["rounds"].as_u64().unwrap() >= 8, "{f}");
        for k in ["rounds", "left_out"] {
            assert_eq!(f[k], o[k], "{k}");
        }
        for k in ["counted", "overran", "fits"] {
            assert_eq!(f["carryover"][k], o["carryover"][k], "carryover {k}");
        }
        for k in ["effect_pct", "low_pct", "high_pct"] {
            let (x, y) = (f["per_connection"][k].as_f64().unwrap(), o["per_connection"][k].as_f64().unwrap());
            assert!((x - y).abs() <= 1e-9 * y.abs().max(1.0), "per connection {k}: fleet {x}, --analyze {y}");
        }
    }
    assert_eq!(fleet["design"], offline["design"]);
    drop(p);
}

/// `--design host-switchback`: one experiment on two instances, as on two hosts (`--host-id
/// edge-1` and `edge-2`, one seed), each giving every new connection the arm of its own host's
/// block. A client opens a connection to each every 100 ms for 30 s (1 s blocks); each server's
/// own log of each connection's algorithm, against the test's copy of that host's schedule
/// (the seed and the host's name): every connection accepted in an A or B block, away from its
/// edges, ran that block's arm, and the two hosts were in different kinds of block at once. A
/// real Prometheus scrapes both: the fleet's answer is what `--analyze` of the two recordings
/// pooled says (each flow placed in its own host's blocks), every estimate and interval end to
/// 1e-9, and both name the design.
#[test]
fn a_host_level_switchback_gives_each_host_its_own_blocks() {
    use bbrscope::experiment::schedule::{Kind, Schedule};
    require_root();
    let _turn = turn();
    const SEED: u64 = 20_261_130;
    // Neither is this machine's default: a connection the switch missed shows.
    let arms = ["cubic", "reno"];
    let dir = tempfile::tempdir().unwrap();
    let seed = SEED.to_string();
    let (mut runs, mut targets, mut hosts) = (Vec::new(), Vec::new(), Vec::new());
    for host in ["edge-1", "edge-2"] {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let log = serve_logging_cc(listener);
        let record = dir.path().join(format!("{host}.ndjson"));
        let sums = format!("127.0.0.1:{}", prometheus::free_port());
        let flags = ["--design", "host-switchback", "--host-id", host, "--block", "1s", "--burn-in", "0.3s"];
        let more = ["--seed", &seed, "--no-guardrail", "--record", record.to_str().unwrap(), "--metrics-listen", &sums];
        let scope = ["--port".to_string(), to.port().to_string()];
        let (child, said) = beside(&arms.join(","), &scope, &[&flags[..], &more[..], &["--id", "t_hosts"]].concat());
        let salt = format!("this host's own seeded order (--seed {SEED}, host salt {})", Schedule::host_salt(host));
        assert!(said.contains("experiment running") && said.contains(&salt), "{host}: {said}");
        runs.push((child, record));
        targets.push(sums.parse().unwrap());
        hosts.push((host, to, log));
    }
    let prom = prometheus::Prometheus::start(&targets);
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        for (_, to, _) in &hosts {
            assert_eq!(fetch(*to, 2_000).1, 2_000);
        }
        thread::sleep(Duration::from_millis(100));
    }
    // `status` names each run's design with its host's salt.
    let status = bbrscope().args(["status", "--json"]).output().unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    for (host, _, _) in &hosts {
        let design =
            format!("host-level switchback: 1s blocks, --seed {SEED}, host salt {}", Schedule::host_salt(host));
        let listed = status["experiments"].as_array().unwrap().iter().any(|e| e["design"] == design.as_str());
        assert!(listed, "{host}: {}", status["experiments"]);
    }
    let accepted: usize = hosts.iter().map(|(_, _, log)| log.lock().unwrap().len()).sum();
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query("sum(bbrscope_experiment_flows_total{id=\"t_hosts\"})").first().map(prometheus::value)
        != Some(accepted as f64)
    {
        assert!(Instant::now() < until, "Prometheus never held the {accepted} flows: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let url = format!("http://{}", prom.addr);
    let fleet = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_hosts", "--json"]).output();
    let fleet: Value = serde_json::from_slice(&fleet.unwrap().stdout).unwrap();
    let text = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_hosts"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let files: Vec<_> = runs
        .into_iter()
        .map(|(child, record)| {
            report_of(child);
            record
        })
        .collect();
    // Each server's log against its own host's schedule.
    let schedules = hosts.iter().map(|(host, _, _)| Schedule {
        block_s: 1.0,
        burn_in_s: 0.3,
        seed: SEED,
        host: Some(Schedule::host_salt(host)),
    });
    let mut arm_of_block = [std::collections::BTreeMap::new(), std::collections::BTreeMap::new()];
    for (((host, _, log), schedule), blocks) in hosts.iter().zip(schedules).zip(&mut arm_of_block) {
        let mut checked = [0; 2];
        for (peer, cc, at) in log.lock().unwrap().iter() {
            let k = schedule.block_of(*at);
            if *at - schedule.start_of(k) < 0.15 || schedule.start_of(k + 1) - *at < 0.15 {
                continue;
            }
            let arm = match schedule.kind(k) {
                Kind::A => 0,
                Kind::B => 1,
                Kind::Mixed => continue,
            };
            assert_eq!(cc, arms[arm], "{host}: {peer} at {at:.3} in block {k} ({:?})", schedule.kind(k));
            checked[arm] += 1;
            blocks.insert(k, arm);
        }
        assert!(checked[0] >= 10 && checked[1] >= 10, "{host}: {checked:?} connections checked in A and B blocks");
    }
    // Blocks where one host gave every connection A's algorithm and the other B's.
    let [one, two] = &arm_of_block;
    let apart = one.iter().filter(|(k, arm)| two.get(k).is_some_and(|other| other != *arm)).count();
    assert!(apart >= 2, "the two hosts never ran opposite arms at once: {one:?} {two:?}");
    let out = bbrscope().args(["experiment", "--json", "--analyze"]).args(&files).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    fleet_is_offline(&fleet, &offline, 2);
    for g in fleet["groups"].as_array().unwrap() {
        let o = group(&offline, g["label"].as_str().unwrap());
        assert!(g["switchback"]["rounds"].as_u64().unwrap() >= 8, "{g}");
        assert_eq!(
            (&g["switchback"]["rounds"], &g["switchback"]["left_out"]),
            (&o["switchback"]["rounds"], &o["switchback"]["left_out"])
        );
        assert_eq!((&g["design"], &o["design"]), (&"host_switchback".into(), &"host_switchback".into()));
    }
    assert_eq!(fleet["design"], offline["design"]);
    let said = format!("design: host switchback, blocks of 1 s (burn-in 0.3 s, seed {SEED}), ");
    assert!(
        text.contains(&said) && text.contains("each host against A for all of it (each host its own order"),
        "{text}"
    );
    assert!(text.contains("all of each host switched") && !text.contains("everyone"), "{text}");
}

/// `--design client`: every connection of a client address gets its client's arm, from a hash
/// of the address salted with the seed. Nineteen clients (127.0.0.2 to 127.0.0.20 on loopback),
/// four connections each, interleaved; the server's own log of each connection's algorithm: all
/// of a client's connections ran one algorithm, the one the userspace hash of its address and
/// the seed names, and both arms had clients. The recording keeps the design and the salt, and
/// `--analyze` gives the live answer again.
#[test]
fn a_client_design_gives_every_connection_its_clients_hashed_arm() {
    require_root();
    let _turn = turn();
    const SEED: u64 = 20_261_130;
    let clients: Vec<std::net::Ipv4Addr> = (2..=20).map(|i| std::net::Ipv4Addr::new(127, 0, 0, i)).collect();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    // Two arms other than loopback's default: a connection the assignment missed shows.
    let status_quo = bbrscope::sys::sockopt::congestion(&listener).unwrap();
    let arms: Vec<&str> = ["cubic", "reno", "bbr"].into_iter().filter(|cc| *cc != status_quo).take(2).collect();
    let server_log = serve_logging_cc(listener);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("exp.ndjson");
    let seed = SEED.to_string();
    let flags = ["--design", "client", "--seed", &seed, "--no-guardrail", "--record", record.to_str().unwrap()];
    let child = start_experiment(&arms.join(","), to.port(), &flags);
    for round in 0..4 {
        for &ip in &clients {
            let mut c = connect_from(socket_bound_to(SocketAddr::new(ip.into(), 0)), to);
            c.write_all(format!("{}\n", 2_000 + 1_000 * round).as_bytes()).unwrap();
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).unwrap();
            assert_eq!(buf.len(), 2_000 + 1_000 * round);
        }
    }
    thread::sleep(Duration::from_millis(500));
    let live = report_of(child);
    // The server's log against the hash.
    let log = server_log.lock().unwrap().clone();
    let mut on_b = 0;
    for &ip in &clients {
        let got: Vec<&str> = log
            .iter()
            .filter(|(peer, ..)| peer.ip() == std::net::IpAddr::V4(ip))
            .map(|(_, cc, _)| cc.as_str())
            .collect();
        let b = bbrscope_common::client_gets_b(&ip.to_ipv6_mapped().octets(), SEED, 50);
        let want = arms[usize::from(b)];
        assert_eq!(got, [want; 4], "client {ip}: its connections' algorithms, the hash says {want}");
        on_b += usize::from(b);
    }
    assert!(on_b > 0 && on_b < clients.len(), "both arms have clients: {on_b} of {} on B", clients.len());
    assert_eq!(live["design"]["name"], "client", "{}", live["design"]);
    assert_eq!(live["design"]["salt"], SEED, "{}", live["design"]);
    assert_eq!(live["groups"][0]["clients"]["mismatched"], 0, "{}", live["groups"][0]);
    assert_eq!(
        live["groups"][0]["arms"][0]["flows"].as_u64().unwrap()
            + live["groups"][0]["arms"][1]["flows"].as_u64().unwrap(),
        76
    );
    // The recording keeps the design and its salt; the offline analysis says what the live one did.
    let header: Value =
        serde_json::from_str(std::fs::read_to_string(&record).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!((&header["design"], &header["salt"]), (&"client".into(), &SEED.into()), "{header}");
    let out = bbrscope().args(["experiment", "--analyze", record.to_str().unwrap(), "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    for k in ["design", "arms", "sample_ratio"] {
        assert_eq!(live[k], offline[k], "{k}: the live report and the offline one");
    }
    for k in ["answer", "clients", "verdict"] {
        assert_eq!(live["groups"][0][k], offline["groups"][0][k], "{k}: the live report and the offline one");
    }
}

#[test]
fn an_a_a_run_calls_no_group_different_and_applies_nothing() {
    require_root();
    let _turn = turn();
    let port = port_for(40_000);
    let clean = population(63, 10, 0.0, port);
    // The same algorithm in both arms: every difference found is a false positive.
    let child = start_experiment("bbr,bbr", port, &["--no-guardrail"]);
    load(&clean, 2, &[20_000, 300_000], Instant::now() + Duration::from_secs(40));
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    // Every group's answer: no change that matters, and nothing to apply. (The family-wise
    // promise is at most 5% of A/A runs with any group called different; the harness below
    // measures it on recorded traffic.)
    for g in report["groups"].as_array().unwrap() {
        assert!(!matches!(g["verdict"].as_str(), Some("a_better" | "b_better")), "{}", g["conclusion"]);
    }
    assert!(report["recommend"]["commands"].as_array().unwrap().is_empty(), "{}", report["recommend"]);
    drop(clean);
}

/// Records bbrscope/tests/fixtures/experiment-two-populations.ndjson, the capture the dashboard tests
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
    let out = format!("{}/tests/fixtures/experiment-two-populations.ndjson", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(out, summaries(&text)).unwrap();
    drop((lossy, clean));
}

/// A recording's `flow_summary` lines with only the fields the analysis reads
/// (experiment::Observation::from_summary), to keep a fixture small.
fn summaries(text: &str) -> String {
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
        "srtt_first_us",
        "srtt_median_us",
        "min_rtt_us",
        "retrans_at_open",
        "retrans_total",
        "data_segs_out",
    ];
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "flow_summary")
        .map(|v| {
            let o: serde_json::Map<String, Value> =
                FIELDS.iter().filter_map(|&k| v.get(k).map(|x| (k.to_string(), x.clone()))).collect();
            Value::Object(o).to_string() + "\n"
        })
        .collect()
}

/// Records bbrscope/tests/fixtures/switchback-a-a.ndjson: six minutes of real traffic with
/// nothing to find (CUBIC in both arms) on two client populations, a far lossy one (80 ms, 1%
/// loss) and a near one (10 ms), fetching 20 KB, 200 KB and 1 MB in turn: the traffic the
/// switchback's error rates and power are measured on by re-drawn schedules
/// (`a_switchback_on_recorded_traffic_keeps_its_error_rate_and_finds_a_planted_change`).
/// Run by hand: `cargo test --test experiment -- --ignored --test-threads=1 record_the_switchback_fixture`.
#[test]
#[ignore = "writes a test fixture"]
fn record_the_switchback_fixture() {
    require_root();
    let _turn = turn();
    let port = port_for(51_000);
    let far = population(71, 80, 0.01, port);
    let near = population(72, 10, 0.0, port);
    let record = std::env::temp_dir().join(format!("bbrs-exp-sb-fixture-{}.ndjson", std::process::id()));
    let child = start_experiment("cubic,cubic", port, &["--no-guardrail", "--record", record.to_str().unwrap()]);
    let until = Instant::now() + Duration::from_secs(360);
    const SIZES: &[usize] = &[20_000, 200_000, 1_000_000];
    thread::scope(|s| {
        s.spawn(|| load_paced(&far, 6, SIZES, until, Duration::from_millis(200)));
        s.spawn(|| load_paced(&near, 2, SIZES, until, Duration::from_millis(200)));
    });
    thread::sleep(Duration::from_secs(1));
    report_of(child);
    let text = std::fs::read_to_string(&record).unwrap();
    let _ = std::fs::remove_file(&record);
    let out = format!("{}/tests/fixtures/switchback-a-a.ndjson", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(out, summaries(&text)).unwrap();
    drop((far, near));
}

/// Client `k` of a population: asks a heavy-tailed mix of response sizes (mostly 10–50 KB, some
/// 100–500 KB, a few 1–4 MB; some clients ask the large ones four times as often as others) at
/// its own pace (exponential pauses, each client's mean between 3 and 15 s) until `until`.
/// Clients differ as a server's do, which is what clustering by client has to carry.
fn client_load(p: &Population, local: std::net::Ipv4Addr, seed: u64, until: Instant) {
    let mut rng = bbrscope::rng::Rng::new(seed);
    let heavy = [0.5, 1.0, 2.0][(rng.uniform() * 3.0) as usize % 3];
    let mean_pause = 3.0 + 12.0 * rng.uniform();
    // Start spread over the first pause, not all at once.
    thread::sleep(Duration::from_secs_f64(mean_pause * rng.uniform()));
    while Instant::now() < until {
        let u = rng.uniform();
        let size = if u < 0.025 * heavy {
            1_000_000 + (3_000_000.0 * rng.uniform()) as usize
        } else if u < 0.15 * heavy {
            100_000 + (400_000.0 * rng.uniform()) as usize
        } else {
            10_000 + (40_000.0 * rng.uniform()) as usize
        };
        let mut c = p.connect_from(local);
        c.write_all(format!("{size}\n").as_bytes()).unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), size, "client {local}");
        thread::sleep(Duration::from_secs_f64(-mean_pause * (1.0 - rng.uniform()).ln()));
    }
}

/// Records bbrscope/tests/fixtures/client-a-a.ndjson.gz: ten minutes (the experiment's default
/// run) of real traffic with nothing to find (CUBIC in both arms) from 240 clients, each its own
/// address: 120 behind a far lossy path (80 ms, 1% loss) and 120 behind a near one (10 ms), each
/// asking a heavy-tailed mix at its own pace ([`client_load`]). The traffic a client design's
/// error rate, power and time to "no difference" are measured on by re-drawn salts
/// (`a_client_design_on_recorded_traffic_keeps_its_error_rate_and_finds_a_planted_change`).
/// Gzipped: its ~20,000 flows are 7 MB of text.
/// Run by hand: `cargo test --test experiment -- --ignored --test-threads=1 record_the_client_fixture`.
#[test]
#[ignore = "writes a test fixture"]
fn record_the_client_fixture() {
    require_root();
    let _turn = turn();
    let port = port_for(53_000);
    let far = population(73, 80, 0.01, port);
    let near = population(74, 10, 0.0, port);
    let clients = [far.clients(120), near.clients(120)];
    let record = std::env::temp_dir().join(format!("bbrs-exp-client-fixture-{}.ndjson", std::process::id()));
    let flags = ["--no-guardrail", "--duration", "15m", "--record", record.to_str().unwrap()];
    let child = start_experiment("cubic,cubic", port, &flags);
    let until = Instant::now() + Duration::from_secs(600);
    thread::scope(|s| {
        for (p, addrs) in [&far, &near].into_iter().zip(&clients) {
            for &local in addrs {
                s.spawn(move || client_load(p, local, u64::from(u32::from(local)), until));
            }
        }
    });
    thread::sleep(Duration::from_secs(1));
    report_of(child);
    let text = std::fs::read_to_string(&record).unwrap();
    let _ = std::fs::remove_file(&record);
    let out = format!("{}/tests/fixtures/client-a-a.ndjson.gz", env!("CARGO_MANIFEST_DIR"));
    let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(out).unwrap(), flate2::Compression::best());
    gz.write_all(summaries(&text).as_bytes()).unwrap();
    gz.finish().unwrap();
    drop((far, near));
}

/// What arms drawn anew for the flows of an A/A recording gave (see [`redraw`]).
#[derive(Default)]
struct Redrawn {
    draws: usize,
    /// Draws with any group called better or worse.
    called: usize,
    /// Draws with "no difference" for all flows.
    same: usize,
    /// (minutes, draws with "no difference" for all flows among the flows ended by then): a
    /// look every 2.5 minutes before the end.
    same_by: Vec<(f64, usize)>,
    /// The changes all flows could tell from none, %, one per draw that says, sorted.
    detectable: Vec<f64>,
    /// Draws the guardrail, replayed with looks every 2 s, stopped or sent a group back in.
    guard: usize,
    /// With B's flows 30% and 10% faster, draws that found B better for all flows.
    found: [usize; 2],
}

impl Redrawn {
    fn share(&self, n: usize) -> f64 {
        n as f64 / self.draws as f64
    }

    /// "A/A any group called 0.005, ...": the rates, for the test's output.
    fn rates(&self) -> String {
        let by: String = self.same_by.iter().map(|&(min, n)| format!("{:.3} at {min} min, ", self.share(n))).collect();
        format!(
            "A/A any group called {:.3}, all flows no difference {by}{:.3} at the end (median detectable change \
             ±{:.1}%), guardrail stopped or sent back {:.3}; B 30% faster found {:.3}, 10% {:.3}",
            self.share(self.called),
            self.share(self.same),
            self.detectable.get(self.detectable.len() / 2).copied().unwrap_or(f64::NAN),
            self.share(self.guard),
            self.share(self.found[0]),
            self.share(self.found[1])
        )
    }

    /// At most 5% of A/A draws call a group different or trip the guardrail; a 30% gain is found
    /// in at least 80%.
    fn check(&self) {
        self.check_errors();
        assert!(self.share(self.found[0]) >= 0.8, "{:?}/{}", self.found, self.draws);
    }

    /// At most 5% of A/A draws call a group different or trip the guardrail.
    fn check_errors(&self) {
        assert!(self.share(self.called) <= 0.05, "{}/{}", self.called, self.draws);
        assert!(self.share(self.guard) <= 0.05, "guardrail: {}/{}", self.guard, self.draws);
    }
}

/// Gives the flows of an A/A recording (both arms one algorithm) the arms of `draws` designs
/// drawn anew — `draw(i)`: the i-th design and each flow's arm under it — and analyses each, so
/// whatever is found comes from the traffic, not from an effect; then plants one (B's flows 30%
/// and 10% faster) on the same draws.
fn redraw(
    obs: &[bbrscope::experiment::Observation],
    draws: u64,
    mut draw: impl FnMut(u64) -> (bbrscope::experiment::setup::Design, Vec<usize>),
) -> Redrawn {
    use bbrscope::experiment::{
        Observation, analysis,
        analysis::Verdict,
        groups::GroupKind,
        guardrail::{self, StopRule},
    };
    let names = ["x".to_string(), "x".to_string()];
    let start = obs.iter().filter_map(Observation::start_ts).fold(f64::INFINITY, f64::min);
    let end = obs.iter().filter_map(|o| o.end_ts).fold(f64::NEG_INFINITY, f64::max);
    let looks: Vec<f64> = (1..40).map(|k| f64::from(k) * 150.0).take_while(|&t| t < end - start - 30.0).collect();
    let mut r = Redrawn {
        draws: draws as usize,
        same_by: looks.iter().map(|&t| (t / 60.0, 0)).collect(),
        ..Redrawn::default()
    };
    let all_b_better =
        |a: &analysis::Analysis| a.groups.iter().any(|g| g.kind == GroupKind::All && g.verdict.better_arm() == Some(1));
    let all_same = |a: &analysis::Analysis| {
        a.groups.iter().find(|g| g.kind == GroupKind::All).is_some_and(|g| g.verdict == Verdict::NoDifference)
    };
    for i in 0..draws {
        let (design, arms) = draw(i);
        let opts =
            analysis::Options { arms: Some(names.clone()), secondary: false, design, ..analysis::Options::default() };
        let drawn: Vec<Observation> = obs
            .iter()
            .zip(arms)
            .map(|(o, arm)| Observation { arm, cc: "x".into(), switched: false, ..o.clone() })
            .collect();
        let a = analysis::analyze(&drawn, &opts);
        r.called += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
        r.same += usize::from(all_same(&a));
        for (&t, (_, n)) in looks.iter().zip(&mut r.same_by) {
            let ended: Vec<Observation> =
                drawn.iter().filter(|o| o.end_ts.is_some_and(|e| e <= start + t)).cloned().collect();
            *n += usize::from(all_same(&analysis::analyze(&ended, &opts)));
        }
        let all = a.groups.iter().find(|g| g.kind == GroupKind::All);
        r.detectable.extend(all.and_then(|g| serde_json::to_value(&g.answer).unwrap()["detectable_pct"].as_f64()));
        let replayed = guardrail::replay(&drawn, &StopRule::under(&design), &names, 2.0);
        r.guard += usize::from(replayed.stopped_at_s.is_some() || !replayed.switched_back.is_empty());
        for (k, factor) in [0.7, 0.9].into_iter().enumerate() {
            let planted: Vec<Observation> = drawn
                .iter()
                .map(|o| Observation { duration_s: o.duration_s * if o.arm == 1 { factor } else { 1.0 }, ..o.clone() })
                .collect();
            r.found[k] += usize::from(all_b_better(&analysis::analyze(&planted, &opts)));
        }
    }
    r.detectable.sort_by(f64::total_cmp);
    r
}

/// An A/A fixture's flows and the seconds from the first start to the last end.
fn fixture(name: &str) -> (Vec<bbrscope::experiment::Observation>, f64) {
    use bbrscope::experiment::Observation;
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let file = std::fs::File::open(&path).unwrap();
    let text: Box<dyn std::io::Read> =
        if name.ends_with(".gz") { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    let capture = bbrscope::experiment::record::read(BufReader::new(text), true).unwrap();
    let obs = capture.obs;
    let span = obs.iter().filter_map(|o| o.end_ts).fold(f64::NEG_INFINITY, f64::max)
        - obs.iter().filter_map(Observation::start_ts).fold(f64::INFINITY, f64::min);
    (obs, span)
}

/// A client design's error rate, power and time to an answer on real traffic: the recorded A/A
/// traffic above (240 clients over the default ten minutes, its arms the same algorithm), each
/// client given the arm of its salted hash, the salt drawn anew each time, so that whatever the
/// analysis finds comes from how the clients differ and the traffic's own noise. Over 200
/// salts: any group called different at most 5%; "no difference" for all flows (B = A) said by
/// the end of the run in at least half (printed with the looks before it). B's flows made 30%
/// and 10% faster: how often "all flows" finds B better (printed; the 30% must be found in most).
#[test]
fn a_client_design_on_recorded_traffic_keeps_its_error_rate_and_finds_a_planted_change() {
    use bbrscope::experiment::setup::Design;
    let (obs, span) = fixture("client-a-a.ndjson.gz");
    let clients: std::collections::BTreeSet<std::net::IpAddr> = obs.iter().map(|o| o.peer).collect();
    assert!(obs.len() > 10_000 && clients.len() >= 200, "{} flows from {} clients", obs.len(), clients.len());
    let r = redraw(&obs, 200, |draw| {
        let salt = 7_000 + draw;
        let on_b = |ip: std::net::IpAddr| {
            let mapped = match ip {
                std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                std::net::IpAddr::V6(v6) => v6,
            };
            usize::from(bbrscope_common::client_gets_b(&mapped.octets(), salt, 50))
        };
        (Design::Client { salt }, obs.iter().map(|o| on_b(o.peer)).collect())
    });
    eprintln!(
        "client design on recorded traffic ({} flows from {} clients, {span:.0} s): {}",
        obs.len(),
        clients.len(),
        r.rates()
    );
    r.check();
    assert!(r.share(r.same) >= 0.5, "no difference for all flows in {}/{} A/A draws of ten minutes", r.same, r.draws);
}

/// A switchback's error rate and power on real traffic: the recorded A/A traffic above (its
/// arms the same algorithm), given the arms of a switchback schedule drawn anew each time
/// (5 s blocks, 1 s burn-in; a mixed block's connections drawn 50/50), so that whatever the
/// analysis finds comes from the traffic's own drift and noise. Over 200 schedules: any group
/// called different at most 5%. B's flows made 30% and 10% faster: how often "all flows" finds
/// B better (printed; the 30% must be found in most).
#[test]
fn a_switchback_on_recorded_traffic_keeps_its_error_rate_and_finds_a_planted_change() {
    use bbrscope::experiment::{schedule::Schedule, setup::Design};
    let (obs, span) = fixture("switchback-a-a.ndjson");
    assert!(obs.len() > 2_000 && span > 250.0, "{} flows over {span} s", obs.len());
    let mut rng = bbrscope::rng::Rng::new(3);
    let r = redraw(&obs, 200, |draw| {
        let s = Schedule { block_s: 5.0, burn_in_s: 1.0, seed: 1_000 + draw, host: None };
        (Design::Switchback(s), switchback_arms(&obs, &s, &mut rng))
    });
    eprintln!("switchback on recorded traffic ({} flows, {span:.0} s, 5 s blocks): {}", obs.len(), r.rates());
    r.check();
}

/// The arms a switchback schedule gives a recording's flows: an A or B block's for a flow
/// started in it, a coin's for one started in a mixed block.
fn switchback_arms(
    obs: &[bbrscope::experiment::Observation],
    s: &bbrscope::experiment::schedule::Schedule,
    rng: &mut bbrscope::rng::Rng,
) -> Vec<usize> {
    use bbrscope::experiment::schedule::Kind;
    obs.iter()
        .map(|o| match o.start_ts().map(|t| s.kind(s.block_of(t))) {
            Some(Kind::A) => 0,
            Some(Kind::B) => 1,
            Some(Kind::Mixed) | None => usize::from(rng.uniform() < 0.5),
        })
        .collect()
}

/// A switchback as a user runs it (the default 15 s blocks, 3 s burn-in: 13 rounds in the
/// default ten minutes) on the client design's heavy-tailed recording, so that the designs'
/// power and time to an answer compare on the same traffic: over 200 re-drawn schedules, any
/// group called different, or the guardrail tripped, at most 5% (its power printed: on this
/// bursty traffic 13 rounds are few; docs/experiment-method.md).
#[test]
fn a_switchback_on_heavy_tailed_recorded_traffic_keeps_its_error_rate() {
    use bbrscope::experiment::{schedule::Schedule, setup::Design};
    let (obs, span) = fixture("client-a-a.ndjson.gz");
    let mut rng = bbrscope::rng::Rng::new(5);
    let r = redraw(&obs, 200, |draw| {
        let s = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 2_000 + draw, host: None };
        (Design::Switchback(s), switchback_arms(&obs, &s, &mut rng))
    });
    eprintln!(
        "switchback on heavy-tailed recorded traffic ({} flows, {span:.0} s, 15 s blocks): {}",
        obs.len(),
        r.rates()
    );
    r.check_errors();
}

/// The blocks a report suggests, on the heavy-tailed recording (ten minutes, multi-MB responses
/// holding a 20 Mbit/s link for up to 25 s): whatever blocks the run had, too short (5 s: 3.5%
/// of counted flows run past the next burn-in) or longer than needed (30 s: 6 rounds), the
/// report names the shortest candidate that fits, 15 s with a 3 s burn-in; an analysis under
/// those fits (at most 2% overrun) and says nothing shorter would, and the candidate between (10
/// s, 2 s) does not fit. So a user who runs again with the suggestion gets the most rounds this
/// traffic allows without the carryover the check is there for.
#[test]
fn the_report_suggests_the_shortest_blocks_recorded_traffic_fits() {
    use bbrscope::experiment::{Observation, analysis, groups::GroupKind, schedule::Schedule, setup::Design};
    let (obs, _) = fixture("client-a-a.ndjson.gz");
    let carryover = |block_s: f64| {
        let s = Schedule { block_s, burn_in_s: block_s / 5.0, seed: 2_000, host: None };
        let arms = switchback_arms(&obs, &s, &mut bbrscope::rng::Rng::new(5));
        let drawn: Vec<Observation> =
            obs.iter().zip(arms).map(|(o, arm)| Observation { arm, cc: "x".into(), ..o.clone() }).collect();
        let opts = analysis::Options {
            arms: Some(["x".to_string(), "x".to_string()]),
            secondary: false,
            design: Design::Switchback(s),
            ..analysis::Options::default()
        };
        let a = analysis::analyze(&drawn, &opts);
        let all = a.groups.iter().find(|g| g.kind == GroupKind::All).unwrap();
        serde_json::to_value(all).unwrap()["switchback"]["carryover"].clone()
    };
    for block_s in [5.0, 30.0] {
        let c = carryover(block_s);
        assert_eq!(c["suggest"], serde_json::json!([15.0, 3.0]), "{block_s} s blocks: {c}");
    }
    let (too_short, fits) = (carryover(10.0), carryover(15.0));
    assert_eq!(too_short["fits"], false, "{too_short}");
    assert_eq!(fits["fits"], true, "{fits}");
    assert!(fits["suggest"].is_null(), "{fits}");
    eprintln!("5 s: {}\n10 s: {too_short}\n15 s: {fits}\n30 s: {}", carryover(5.0), carryover(30.0));
}

/// The per-connection A/B on the same heavy-tailed recording: each flow's arm drawn anew, 200
/// times; any group called different at most 5%, the 30% found in most (the rest printed).
#[test]
fn a_per_connection_ab_on_heavy_tailed_recorded_traffic_keeps_its_error_rate() {
    use bbrscope::experiment::setup::Design;
    let (obs, span) = fixture("client-a-a.ndjson.gz");
    let mut rng = bbrscope::rng::Rng::new(9);
    let r =
        redraw(&obs, 200, |_| (Design::PerConnection, obs.iter().map(|_| usize::from(rng.uniform() < 0.5)).collect()));
    eprintln!("per connection on heavy-tailed recorded traffic ({} flows, {span:.0} s): {}", obs.len(), r.rates());
    r.check();
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
    let s = Session::start(
        "experiment",
        120,
        40,
        &format!("experiment --arms cubic,bbr --port {port} --duration 5m --no-guardrail --design per-connection"),
    );
    s.wait_screen("the experiment view", |t| t.contains("cubic (A) vs bbr (B) · 50% to B") && t.contains("guardrail"));

    // `status` lists it, with the pid the kernel says holds the lock.
    let status = |json: bool| {
        let out = bbrscope().args(["status"]).args(json.then_some("--json")).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let st: Value = serde_json::from_str(&status(true)).unwrap();
    // Among the other tests' (they share the host), the one on this port.
    let x = st["experiments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["scope"] == format!("port {port}"))
        .unwrap_or_else(|| panic!("status lists no experiment on port {port}: {st}"));
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
    assert!(
        status(false)
            .contains(&format!("experiment: running (pid {pid}): cubic (A) vs bbr (B), per connection, 50% to B"))
    );
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
        // The whole analysis on one screen: a frame caught while it is being drawn can show the
        // arms' table without the groups' below it (seen in CI).
        let later = s.wait_screen("more finished flows and the analysis", |t| {
            finished_on_screen(t).is_some_and(|n| n > n1 + 20)
                && t.contains(" arms: ")
                && t.contains("p50 completion")
                && t.contains("groups (")
        });
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

    // Nothing left: the link and its program are gone, the lock is free, status no longer lists
    // it (another test's experiment may be running beside: the host is shared, see HOST).
    assert_detached(&links);
    let st: Value = serde_json::from_str(&status(true)).unwrap();
    let ours = |x: &&Value| x["pid"].as_u64() == Some(u64::from(pid)) || x["scope"] == format!("port {port}");
    assert!(!st["experiments"].as_array().unwrap().iter().any(|x| ours(&x)), "{}", st["experiments"]);
    assert!(!status(false).contains(&format!("(pid {pid})")), "{}", status(false));
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
    assert!(!running_pids(&st).contains(&child.id()), "status still lists the experiment: {st}");
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

/// The service sets its own algorithm after accept (as nginx or HAProxy can be told to): the
/// arms are not what was asked, and the report says so instead of comparing cubic with cubic.
#[test]
fn a_service_that_sets_its_own_algorithm_gets_no_conclusion() {
    require_root();
    let _turn = turn();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    serve_setting(listener, Some("cubic"));
    let child = start_experiment("reno,bbr", to.port(), &["--no-guardrail", "--recommend"]);
    for i in 0..120 {
        fetch(to, [1_000, 50_000][i % 2]);
    }
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let (code, report) = wait_report_status(child, Duration::from_secs(60), None);
    assert_eq!(code, Some(2), "{}", report["integrity"]);
    // The arms are named as asked, never after the flows' algorithm.
    assert_eq!((report["arms"][0]["arm"].as_str(), report["arms"][1]["arm"].as_str()), (Some("reno"), Some("bbr")));
    assert_eq!(report["integrity"]["overridden"], true, "{}", report["integrity"]);
    assert_eq!(report["integrity"]["ran_instead"], serde_json::json!(["cubic"]));
    let excluded = report["integrity"]["excluded"].as_array().unwrap();
    assert_eq!(excluded.iter().map(|x| x.as_u64().unwrap()).sum::<u64>(), 120, "{}", report["integrity"]);
    assert!(report["groups"].as_array().unwrap().iter().all(|g| g["verdict"] == "arms_overridden"));
    assert!(report["recommend"]["commands"].as_array().unwrap().is_empty());
    assert!(report["recommend"]["notes"][0].as_str().unwrap().contains("the service sets its own"));
}

/// Sizes a far client asks for in turn: mostly a few KB, some hundreds of KB, a megabyte
/// (heavy-tailed, as an edge server's responses are).
const FAR_SIZES: &[usize] = &[2_000, 4_000, 8_000, 15_000, 15_000, 30_000, 60_000, 150_000, 400_000, 1_000_000];
/// Near and same-datacentre clients ask for what fits in a few round trips: no congestion
/// control can change those by a margin that matters (the right answer by construction).
const NEAR_SIZES: &[usize] = &[2_000, 4_000, 8_000, 15_000, 30_000, 60_000];
const DC_SIZES: &[usize] = &[1_000, 2_000, 4_000, 8_000, 15_000];

/// Three client groups, each on its own /24 and RTT band: far and lossy (200 ms, 2% random
/// loss), near (30 ms, clean), same datacentre (2 ms, clean). The right answer is known by
/// construction: BBR much faster for the far group's larger responses; no change that matters
/// for the others, whose responses take a few round trips whatever the algorithm. The
/// experiment runs 150 s (the default is 10 minutes) and must find the far group's gain,
/// recommend the far /24's route only, and widen nothing. Its recording then serves the
/// error-rate harness ([`harness`]).
#[test]
fn three_client_groups_the_far_lossy_gain_is_found_and_nothing_else_is_applied() {
    require_root();
    let _turn = turn();
    let port = port_for(12_000);
    let far = population(66, 200, 0.02, port);
    let near = population(67, 30, 0.0, port);
    let dc = population(68, 2, 0.0, port);
    let record = std::env::temp_dir().join(format!("bbrs-exp-three-{}.ndjson", std::process::id()));
    let dst = "198.18.66.0/24,198.18.67.0/24,198.18.68.0/24";
    let child = start_experiment(
        "cubic,bbr",
        port,
        &["--no-guardrail", "--recommend", "--dst", dst, "--record", record.to_str().unwrap()],
    );
    let started = Instant::now();
    let until = started + Duration::from_secs(150);
    let logs = thread::scope(|s| {
        // About as many connections from each group (the near and datacentre clients would
        // otherwise open tens of thousands).
        let f = s.spawn(|| load(&far, 10, FAR_SIZES, until));
        let n = s.spawn(|| load_paced(&near, 2, NEAR_SIZES, until, Duration::from_millis(150)));
        let d = s.spawn(|| load_paced(&dc, 2, DC_SIZES, until, Duration::from_millis(250)));
        [f.join().unwrap(), n.join().unwrap(), d.join().unwrap()]
    });
    let elapsed = started.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    let connections: usize = logs.iter().map(Vec::len).sum();
    eprintln!(
        "three groups: {connections} connections in {elapsed:.0} s ({:.1}/s: far {}, near {}, dc {})",
        connections as f64 / elapsed,
        logs[0].len(),
        logs[1].len(),
        logs[2].len()
    );
    let flows = report["arms"][0]["flows"].as_u64().unwrap() + report["arms"][1]["flows"].as_u64().unwrap();
    assert_eq!(flows as usize, connections, "{}", report["arms"]);
    let far_g = group(&report, "198.18.66.0/24");
    assert_eq!(far_g["verdict"], "b_better", "{}", far_g["conclusion"]);
    assert_eq!(far_g["answer"]["practical"], true, "{}", far_g["answer"]);
    for label in ["198.18.67.0/24", "198.18.68.0/24"] {
        let g = group(&report, label);
        assert_ne!(g["answer"]["practical"], true, "{label}: {}", g["conclusion"]);
    }
    let commands: Vec<&str> =
        report["recommend"]["commands"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(commands, ["bbrscope apply bbr --route 198.18.66.0/24"], "{}", report["recommend"]);
    assert_eq!(report["recommend"]["scope"], "routes");
    drop((far, near, dc));

    let capture =
        bbrscope::experiment::record::read(BufReader::new(std::fs::File::open(&record).unwrap()), true).unwrap();
    assert!(capture.has_header && capture.setup.scope.port == Some(port), "{:?}", capture.setup.scope);
    // BBRSCOPE_KEEP_RECORDING=FILE keeps the recording, cut to what the analysis reads: how
    // bbrscope/tests/fixtures/experiment-three-groups.ndjson was made.
    if let Some(to) = std::env::var_os("BBRSCOPE_KEEP_RECORDING") {
        std::fs::write(to, trimmed(&std::fs::read_to_string(&record).unwrap())).unwrap();
    }
    let _ = std::fs::remove_file(&record);
    let found = first_found(&capture, "198.18.66.0/24");
    eprintln!("three groups: the far group's gain is found {found:?} s after the first flow finished");
    let rates = harness(&capture, 200, 1);
    eprintln!("three groups, re-drawn: {rates:?}");
    assert!(rates.apply_aa <= 0.05 && rates.guard_aa <= 0.05 && rates.any_verdict_aa <= 0.05, "{rates:?}");
}

/// A recording's experiment lines and its flow summaries with the fields the analysis reads.
fn trimmed(text: &str) -> String {
    const FIELDS: &[&str] = &[
        "type",
        "ts",
        "start_ts",
        "cookie",
        "arm",
        "cc",
        "ccs",
        "side",
        "dst",
        "bytes_acked",
        "duration_s",
        "goodput_bps",
        "srtt_first_us",
        "srtt_median_us",
        "min_rtt_us",
        "retrans_at_open",
        "retrans_total",
        "data_segs_out",
        "cgroup",
        "cgroup_id",
    ];
    let mut out = String::new();
    for v in text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        let kept = match v["type"].as_str() {
            Some("experiment" | "experiment_end") => v,
            Some("flow_summary") => {
                Value::Object(FIELDS.iter().filter_map(|&k| v.get(k).map(|x| (k.to_string(), x.clone()))).collect())
            }
            _ => continue,
        };
        out.push_str(&kept.to_string());
        out.push('\n');
    }
    out
}

/// When the answer for `label` first said "B better, by a change that matters", looking every
/// 10 s of recorded time at the flows finished by then (the answer is valid at every look).
fn first_found(capture: &bbrscope::experiment::record::Capture, label: &str) -> Option<f64> {
    use bbrscope::experiment::analysis;
    let mut obs = capture.obs.clone();
    obs.sort_by(|x, y| x.end_ts.unwrap_or(0.0).total_cmp(&y.end_ts.unwrap_or(0.0)));
    let t0 = obs.first()?.end_ts?;
    let opts = analysis::Options { arms: capture.setup.arms.clone(), secondary: false, ..analysis::Options::default() };
    let mut t = 10.0;
    loop {
        let upto = obs.partition_point(|o| o.end_ts.unwrap_or(0.0) - t0 <= t);
        let a = analysis::analyze(&obs[..upto], &opts);
        if a.groups.iter().any(|g| g.label == label && g.answer.practical && g.verdict.better_arm() == Some(1)) {
            return Some(t);
        }
        if upto == obs.len() {
            return None;
        }
        t += 10.0;
    }
}

/// Error rates of the decision rules on one recording of real traffic.
#[derive(Debug)]
#[allow(dead_code, reason = "the fields are read through Debug, in the test's output")]
struct Rates {
    draws: usize,
    /// A/A (arms re-drawn at random over the recorded flows): share of draws with any `apply`
    /// command, with any group called better or worse, stopped or with a group sent back by the
    /// guardrail (looks every 2 s of recorded time, in completion order).
    apply_aa: f64,
    any_verdict_aa: f64,
    guard_aa: f64,
    /// Power: with arm B's completion times (server view) of the near group's responses of
    /// 16 KB and more made 30% (10%) shorter, the share of draws that find B better there.
    power_near_30pct: f64,
    power_near_10pct: f64,
}

/// Re-draws the arms of a recording `draws` times (see [`Rates`]); seeded, so a fixture's rates
/// are the same every run.
fn harness(capture: &bbrscope::experiment::record::Capture, draws: usize, seed: u64) -> Rates {
    use bbrscope::experiment::{
        Observation, analysis,
        groups::GroupKind,
        guardrail::{self, StopRule},
        recommend::recommend,
        report,
    };
    let mut rng = bbrscope::rng::Rng::new(seed);
    let ctx = report::Context { scope: capture.setup.scope.clone(), ..report::Context::default() };
    let names = ["x".to_string(), "x".to_string()];
    let opts = analysis::Options { arms: Some(names.clone()), secondary: false, ..analysis::Options::default() };
    let near = |o: &Observation| o.min_rtt_us.is_some_and(|r| (10_000..50_000).contains(&r));
    let (mut apply, mut verdict, mut guard, mut found) = (0, 0, 0, [0, 0]);
    for _ in 0..draws {
        let drawn: Vec<Observation> = capture
            .obs
            .iter()
            .map(|o| Observation {
                arm: usize::from(rng.uniform() < 0.5),
                cc: "x".into(),
                switched: false,
                ..o.clone()
            })
            .collect();
        let a = analysis::analyze(&drawn, &opts);
        apply += usize::from(!recommend(&a, &ctx).commands.is_empty());
        verdict += usize::from(a.groups.iter().any(|g| g.verdict.better_arm().is_some()));
        let replayed = guardrail::replay(&drawn, &StopRule::default(), &names, 2.0);
        guard += usize::from(replayed.stopped_at_s.is_some() || !replayed.switched_back.is_empty());
        for (i, factor) in [0.7, 0.9].into_iter().enumerate() {
            let planted: Vec<Observation> = drawn
                .iter()
                .map(|o| {
                    let gains = o.arm == 1 && near(o) && o.bytes >= 16 * 1024;
                    Observation { duration_s: o.duration_s * if gains { factor } else { 1.0 }, ..o.clone() }
                })
                .collect();
            let a = analysis::analyze(&planted, &opts);
            found[i] +=
                usize::from(a.groups.iter().any(|g| {
                    g.kind == GroupKind::Rtt && g.label == "RTT 10–50 ms" && g.verdict.better_arm() == Some(1)
                }));
        }
    }
    let share = |n: usize| n as f64 / draws as f64;
    Rates {
        draws,
        apply_aa: share(apply),
        any_verdict_aa: share(verdict),
        guard_aa: share(guard),
        power_near_30pct: share(found[0]),
        power_near_10pct: share(found[1]),
    }
}

/// The error-rate harness on a recording of the three-group scenario above, kept as
/// bbrscope/tests/fixtures/experiment-three-groups.ndjson (recorded on this project's 2-core VM, Linux
/// 6.18, with BBRSCOPE_KEEP_RECORDING): the same numbers every run, no root needed. The
/// recording itself is judged as by construction, `--analyze` keeps how it ended, and re-drawn
/// at random its arms give A/A error rates within the promised 5%.
#[test]
fn recorded_real_traffic_keeps_its_error_rates_and_power() {
    let path = format!("{}/tests/fixtures/experiment-three-groups.ndjson", env!("CARGO_MANIFEST_DIR"));
    let capture =
        bbrscope::experiment::record::read(BufReader::new(std::fs::File::open(&path).unwrap()), true).unwrap();
    assert!(capture.has_header && capture.obs.len() > 3000, "{}", capture.obs.len());

    let out = bbrscope().args(["experiment", "--analyze", &path, "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stopped_by"], "stopped by Ctrl-C");
    assert_eq!(group(&report, "198.18.66.0/24")["verdict"], "b_better");
    for label in ["198.18.67.0/24", "198.18.68.0/24", "RTT <10 ms", "RTT 10–50 ms"] {
        assert_eq!(group(&report, label)["verdict"], "no_difference", "{label}: {}", group(&report, label)["answer"]);
    }
    assert_eq!(report["recommend"]["commands"], serde_json::json!(["bbrscope apply bbr --route 198.18.66.0/24"]));
    // Asked after the fact in the 95th percentile: the near group's p95 is within 5% (with about
    // 640 flows per arm), the far group's gain not yet bounded, and nothing is recommended on it.
    let out = bbrscope().args(["experiment", "--analyze", &path, "--metric", "p95", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let p95: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(p95["decision"]["metric"], "p95", "{}", p95["decision"]);
    let near = group(&p95, "RTT 10–50 ms");
    assert_eq!((&near["verdict"], &near["answer"]["strata"]), (&"no_difference".into(), &1.into()), "{near}");
    let far = group(&p95, "198.18.66.0/24");
    assert_eq!(far["verdict"], "inconclusive", "{}", far["conclusion"]);
    assert!(far["answer"]["more_flows"].as_u64().is_some_and(|m| m > 0), "{}", far["answer"]);
    assert_eq!(p95["recommend"]["commands"], serde_json::json!([]));
    // The guardrail, replayed: CUBIC (arm A, the slower) was clearly worse for all flows, a harm
    // the far clients carry: it would have sent them back to their status quo, not stopped the
    // run — and that would not have withheld the recommendation.
    let replay = &report["guardrail_replay"];
    assert!(replay["looks"].as_u64().unwrap() >= 20, "{replay}");
    assert!(replay["stopped_at_s"].is_null(), "{replay}");
    let sent = replay["switched_back"].as_array().unwrap();
    assert_eq!(sent.len(), 1, "{replay}");
    assert_eq!((&sent[0]["group"], &sent[0]["worse_arm"]), (&"clients at RTT ≥150 ms".into(), &0.into()), "{replay}");

    // A recording of the version before (no first line naming arms and scope) stays analysable:
    // the arms from its flows, the scope unknown, so nothing wider than a prefix is recommended.
    let old = format!("{}/tests/fixtures/experiment-two-populations.ndjson", env!("CARGO_MANIFEST_DIR"));
    let out = bbrscope().args(["experiment", "--analyze", &old, "--json"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("no experiment header"), "{err}");
    let old_report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(old_report["scope"]["known"], false);
    assert_eq!(group(&old_report, "198.18.64.0/24")["verdict"], "b_better");
    for c in old_report["recommend"]["commands"].as_array().unwrap() {
        assert!(c.as_str().unwrap().contains(" --route "), "{c}");
    }

    let found = first_found(&capture, "198.18.66.0/24");
    eprintln!("recorded three groups: the far group's gain found {found:?} s after the first flow finished");
    assert!(found.is_some_and(|t| t <= 150.0), "{found:?}");
    let rates = harness(&capture, 200, 7);
    eprintln!("recorded three groups, re-drawn: {rates:?}");
    assert!(rates.apply_aa <= 0.05 && rates.guard_aa <= 0.05 && rates.any_verdict_aa <= 0.05, "{rates:?}");
    assert!(rates.power_near_30pct >= 0.9, "{rates:?}");
}

/// Another user cannot block experiments by holding the lock (an older bbrscope left it 0644),
/// nor have `status` call its process an experiment; a symbolic link planted at the lock's path
/// does not make an experiment truncate its target.
#[test]
fn the_experiment_lock_is_roots_alone() {
    require_root();
    let _turn = turn();
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    const LOCK: &str = "/run/bbrscope-experiment.lock";
    let start = || {
        let mut child = bbrscope()
            .args(["experiment", "--arms", "cubic,bbr", "--port", "1", "--duration", "1m", "--headless"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.contains("experiment running"), "{line}");
        child
    };
    let stop = |mut child: std::process::Child| {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(wait_timeout(&mut child, Duration::from_secs(20)).is_some());
    };

    let _ = std::fs::remove_file(LOCK);
    std::fs::write(LOCK, "").unwrap();
    std::fs::set_permissions(LOCK, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut squatter = std::process::Command::new("runuser")
        .args(["-u", "nobody", "--", "flock", "-n", LOCK, "sleep", "60"])
        .spawn()
        .unwrap();
    let ino = std::fs::metadata(LOCK).unwrap().ino();
    let held_by_nobody =
        || std::fs::read_to_string("/proc/locks").unwrap().lines().any(|l| l.contains(&format!(":{ino} ")));
    let t = Instant::now();
    while !held_by_nobody() {
        assert!(t.elapsed() < Duration::from_secs(10), "the squatter never took the lock");
        thread::sleep(Duration::from_millis(50));
    }
    let status = bbrscope().args(["status", "--json"]).output().unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    // Every experiment listed (the other tests' share the host) is a bbrscope, not the squatter.
    for pid in running_pids(&status) {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(comm.trim(), "bbrscope", "the squatter is no experiment: {}", status["experiments"]);
    }
    let child = start();
    let m = std::fs::symlink_metadata(LOCK).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600));
    assert_ne!(m.ino(), ino, "a new lock file, not the squatted one");
    let status = bbrscope().args(["status", "--json"]).output().unwrap();
    let status: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(running_pids(&status).contains(&child.id()), "{}", status["experiments"]);
    stop(child);
    let _ = squatter.kill();
    let _ = squatter.wait();

    // A link at the lock's path: not followed, its target untouched.
    let target = std::env::temp_dir().join(format!("bbrs-lock-target-{}", std::process::id()));
    std::fs::write(&target, "keep me\n").unwrap();
    std::fs::remove_file(LOCK).unwrap();
    std::os::unix::fs::symlink(&target, LOCK).unwrap();
    let child = start();
    assert!(std::fs::symlink_metadata(LOCK).unwrap().file_type().is_file());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
    stop(child);
    let _ = std::fs::remove_file(&target);
}

/// `bbrscope experiment --arms ARMS --duration 5m --json --design per-connection SCOPE...
/// EXTRA...` (EXTRA's `--design` where it has one) started beside those running
/// ([`start_experiment`] would wait for them to end), and its first line on stderr; the rest of
/// stderr is drained.
fn beside(arms: &str, scope: &[String], extra: &[&str]) -> (std::process::Child, String) {
    let design: &[&str] = if extra.contains(&"--design") { &[] } else { &["--design", "per-connection"] };
    let (child, mut err) = spawn_piped(
        bbrscope()
            .args(["experiment", "--arms", arms, "--duration", "5m", "--json"])
            .args(design)
            .args(scope)
            .args(extra),
    );
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    // Keep draining stderr so that it cannot block the experiment.
    thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (child, line)
}

/// One experiment on three scopes at once, as on three hosts (#40): three instances on three
/// ports, the same `--id`, each recording and serving its sums; one real Prometheus scrapes all
/// three while real connections run. `--analyze-prometheus` answers what `--analyze` of the three
/// recordings pooled answers: every group's (all flows, the band, a `--prefix-list` group)
/// verdict and flows, estimate and interval ends to 1e-9, and the guardrail's decision.
/// Recordings of another experiment are not pooled with them.
#[test]
fn three_instances_on_prometheus_answer_as_their_recordings_pooled() {
    require_root();
    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    // One --prefix-list group on every host: the fleet answers it from the hosts' sums.
    let lists = dir.path().join("lists");
    std::fs::write(&lists, "loopback 127.0.0.0/8\n").unwrap();
    let (mut runs, mut targets, mut servers) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..3 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        servers.push(listener.local_addr().unwrap());
        serve(listener);
        let record = dir.path().join(format!("host{i}.ndjson"));
        let sums: SocketAddr = format!("127.0.0.1:{}", prometheus::free_port()).parse().unwrap();
        let scope = ["--port".to_string(), servers[i].port().to_string()];
        let (child, said) = beside(
            "cubic,bbr",
            &scope,
            &[
                "--record",
                record.to_str().unwrap(),
                "--metrics-listen",
                &sums.to_string(),
                "--id",
                "t_three",
                "--prefix-list",
                lists.to_str().unwrap(),
            ],
        );
        assert!(said.contains("experiment running"), "instance {i}: {said}");
        runs.push((child, record));
        targets.push(sums);
    }
    let prom = prometheus::Prometheus::start(&targets);
    const N: usize = 60;
    for i in 0..N {
        for to in &servers {
            assert_eq!(fetch(*to, [1_000, 15_000, 120_000][i % 3]).1, [1_000, 15_000, 120_000][i % 3]);
        }
    }
    let until = Instant::now() + Duration::from_secs(30);
    let flows = "sum(bbrscope_experiment_flows_total{id=\"t_three\"})";
    while prom.query(flows).first().map(prometheus::value) != Some((3 * N) as f64) {
        assert!(Instant::now() < until, "Prometheus never held the {} flows: {}", 3 * N, prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let url = format!("http://{}", prom.addr);
    let out =
        bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_three", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fleet: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(fleet["fleet"]["hosts"], 3, "{}", fleet["fleet"]);
    let records: Vec<_> = runs.into_iter().map(|(child, record)| (report_of(child), record)).collect();
    let files: Vec<&str> = records.iter().map(|(_, r)| r.to_str().unwrap()).collect();
    let out = bbrscope().args(["experiment", "--json", "--analyze"]).args(&files).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let offline: Value = serde_json::from_slice(&out.stdout).unwrap();
    let flows: u64 = offline["arms"].as_array().unwrap().iter().map(|a| a["flows"].as_u64().unwrap()).sum();
    assert_eq!(flows, (3 * N) as u64, "the pool counts every instance's flows: {}", offline["arms"]);
    // All flows, the loopback band and the prefix-list group.
    fleet_is_offline(&fleet, &offline, 3);
    // Each host a group of its own (--by-host instance): its answer is its own recording's.
    let out = bbrscope()
        .args(["experiment", "--analyze-prometheus", &url, "--id", "t_three", "--json", "--by-host", "instance"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let by_host: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (target, (_, record)) in targets.iter().zip(&records) {
        let out = bbrscope().args(["experiment", "--json", "--analyze"]).arg(record).output().unwrap();
        let alone: Value = serde_json::from_slice(&out.stdout).unwrap();
        let g = group(&by_host, &format!("hosts instance=\"{target}\""));
        let o = group(&alone, "all flows");
        assert_eq!((&g["kind"], &g["arms"]), (&"hosts".into(), &o["arms"]), "{target}");
        let (f, w) = (g["answer"]["effect_pct"].as_f64().unwrap(), o["answer"]["effect_pct"].as_f64().unwrap());
        assert!((f - w).abs() <= 1e-9 * w.abs().max(1.0), "{target}: fleet {f}, its recording {w}");
    }
    // Ended, the three still count with their last sums (Prometheus has marked their series
    // stale): the same answer, and the report says they ended.
    let until = Instant::now() + Duration::from_secs(30);
    while !prom.query("bbrscope_experiment_info{id=\"t_three\"}").is_empty() {
        assert!(Instant::now() < until, "Prometheus still has the ended instances live: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let out = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_three", "--json"]).output();
    let ended: Value = serde_json::from_slice(&out.unwrap().stdout).unwrap();
    assert_eq!((&ended["fleet"]["hosts"], &ended["fleet"]["ended"]), (&3.into(), &3.into()), "{}", ended["fleet"]);
    fleet_is_offline(&ended, &offline, 3);
    // The guardrail's rule on the three hosts' watches added up decides as the replay of the
    // pooled recordings does at its last look (nothing sent back before it: the same flows,
    // groups and words; the host default here, bbr, is arm B: A's watch).
    let replay = &offline["guardrail_replay"];
    let guard = &ended["fleet"]["guardrail"];
    assert_eq!(replay["switched_back"], serde_json::json!([]), "{replay}");
    for key in ["stop", "reason", "group", "worse_arm"] {
        assert_eq!(guard[key], replay["decision"][key], "{key}: fleet {guard}, pooled recordings {replay}");
    }
    let text = bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_three"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.starts_with("fleet: experiment t_three on 3 hosts (3 of them ended), their sums"), "{text}");
    let said = format!("\nfleet guardrail, on every host's flows together: {}", guard["reason"].as_str().unwrap());
    assert!(text.contains(&said), "{text}");
    // Outside the lookback they are gone.
    let out = bbrscope()
        .args(["experiment", "--analyze-prometheus", &url, "--id", "t_three", "--lookback", "1s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no host serves experiment t_three"));
    // A host serving the same id with another split does not pool with their last sums: refused
    // as bad input (exit 2) naming both, before any answer.
    let scope = ["--port".to_string(), servers[0].port().to_string()];
    let sums = targets[0].to_string();
    let (child, said) =
        beside("cubic,bbr", &scope, &["--split", "30", "--metrics-listen", &sums, "--id", "t_three", "--no-guardrail"]);
    assert!(said.contains("experiment running"), "{said}");
    let other_split = "bbrscope_experiment_info{id=\"t_three\",split_pct=\"30\"}";
    let until = Instant::now() + Duration::from_secs(30);
    while prom.query(other_split).is_empty() {
        assert!(Instant::now() < until, "Prometheus never scraped the other split: {}", prom.log());
        thread::sleep(Duration::from_millis(250));
    }
    let out =
        bbrscope().args(["experiment", "--analyze-prometheus", &url, "--id", "t_three", "--json"]).output().unwrap();
    let _ = report_of(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("disagree on its design, arms, schedule or prefix lists") && err.contains("\"split_pct\": \"30\""),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    // A recording of another experiment (another split) does not pool with them.
    let other = dir.path().join("other.ndjson");
    let text = std::fs::read_to_string(files[0]).unwrap().replacen("\"split_pct\":50", "\"split_pct\":30", 1);
    std::fs::write(&other, text).unwrap();
    let out = bbrscope().args(["experiment", "--analyze", files[1]]).arg(&other).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("its split differs"), "{err}");
}

/// Experiments on disjoint scopes run side by side (#40): two on two ports of one server, each
/// giving its arms to its own port's connections alone (the server's own log says which
/// algorithm each connection ran: reno only on the second's port, BBR only on the first's) and
/// counting its own flows alone; `status` lists both. One whose scope overlaps theirs (the same
/// port; every new connection) is refused with exit 2, naming the experiment it overlaps, and
/// registers nothing.
#[test]
fn experiments_on_disjoint_scopes_run_side_by_side_and_an_overlapping_one_is_refused() {
    require_root();
    let _host = alone();
    let (one, two) = (TcpListener::bind("127.0.0.1:0").unwrap(), TcpListener::bind("127.0.0.1:0").unwrap());
    let (to_one, to_two) = (one.local_addr().unwrap(), two.local_addr().unwrap());
    let (log_one, log_two) = (serve_logging_cc(one), serve_logging_cc(two));
    let first = start_experiment("cubic,bbr", to_one.port(), &["--no-guardrail"]);
    let (second, said) = beside("reno,cubic", &["--port".into(), to_two.port().to_string()], &["--no-guardrail"]);
    assert!(said.contains("experiment running"), "the second, on another port: {said}");
    let port_one = format!("port {}", to_one.port());
    for scope in [vec!["--port".to_string(), to_one.port().to_string()], vec![]] {
        let (mut refused, said) = beside("cubic,bbr", &scope, &["--no-guardrail"]);
        let code = wait_timeout(&mut refused, Duration::from_secs(20)).and_then(|s| s.code());
        assert_eq!(code, Some(2), "{scope:?} overlaps the first: {said}");
        assert!(
            said.contains(&port_one) && said.contains(&format!("pid {}", first.id())) && said.contains("overlaps"),
            "the refusal names the experiment it overlaps: {said}"
        );
    }
    let st: Value = serde_json::from_slice(&bbrscope().args(["status", "--json"]).output().unwrap().stdout).unwrap();
    let pids: Vec<u64> = st["experiments"].as_array().unwrap().iter().map(|x| x["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids, [u64::from(first.id()), u64::from(second.id())], "{}", st["experiments"]);
    const N: usize = 40;
    for i in 0..N {
        assert_eq!(fetch(to_one, 20_000 + i).1, 20_000 + i);
        assert_eq!(fetch(to_two, 20_000 + i).1, 20_000 + i);
    }
    thread::sleep(Duration::from_millis(500));
    let (report_one, report_two) = (report_of(first), report_of(second));
    let ran = |log: &Mutex<Vec<(SocketAddr, String, f64)>>| {
        let mut ccs: Vec<String> = log.lock().unwrap().iter().map(|(_, cc, _)| cc.clone()).collect();
        assert_eq!(ccs.len(), N);
        ccs.sort();
        ccs.dedup();
        ccs
    };
    // 40 draws of 50/50: both arms on each port (all on one arm: 2^-39).
    assert_eq!(ran(&log_one), ["bbr", "cubic"], "the first's port ran its arms alone");
    assert_eq!(ran(&log_two), ["cubic", "reno"], "the second's port ran its arms alone");
    for (report, name) in [(&report_one, "first"), (&report_two, "second")] {
        let flows: Vec<u64> = report["arms"].as_array().unwrap().iter().map(|a| a["flows"].as_u64().unwrap()).collect();
        assert_eq!(flows.iter().sum::<u64>(), N as u64, "the {name} counts its own port's flows: {}", report["arms"]);
    }
}

/// `--analyze` reads any input in bounded memory: a recording with a 500 MB line in it is
/// analysed under an address-space limit of the binary's size plus 300 MB (reading the line
/// whole would need 500 MB or more), the line skipped and said.
#[test]
fn analyze_reads_a_huge_line_in_bounded_memory() {
    use std::io::Write as _;
    let fixture = format!("{}/tests/fixtures/experiment-three-groups.ndjson", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&fixture).unwrap();
    let path = std::env::temp_dir().join(format!("bbrs-huge-line-{}.ndjson", std::process::id()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let lines: Vec<&str> = text.lines().collect();
    for l in &lines[..lines.len() / 2] {
        writeln!(f, "{l}").unwrap();
    }
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..500 {
        f.write_all(&chunk).unwrap();
    }
    writeln!(f).unwrap();
    for l in &lines[lines.len() / 2..] {
        writeln!(f, "{l}").unwrap();
    }
    drop(f);
    let binary = std::fs::metadata(env!("CARGO_BIN_EXE_bbrscope")).unwrap().len();
    let limit = binary + (300 << 20);
    let out = std::process::Command::new("prlimit")
        .arg(format!("--as={limit}"))
        .arg(env!("CARGO_BIN_EXE_bbrscope"))
        .args(["experiment", "--analyze", path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", out.status);
    assert!(err.contains("longer than 64 KiB"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let flows = report["arms"][0]["flows"].as_u64().unwrap() + report["arms"][1]["flows"].as_u64().unwrap();
    assert_eq!(flows, 3415);
}

// A shared shallow bottleneck whose everyone-switched answer is known by construction (#38).

/// The shared bottleneck: one path every client's flows cross, its buffer a fraction of the
/// bandwidth-delay product (where BBR takes bandwidth and buffer from CUBIC), no random loss.
const SHARED_RATE_BPS: u64 = 40_000_000;
const SHARED_RTT: Duration = Duration::from_millis(40);
const SHARED_BUFFER_BDP: f64 = 0.2;
/// The share of the path's rate the arrivals offer: several flows share it most of the time.
const SHARED_LOAD: f64 = 0.7;
/// Each replay's length (three replays: everyone on A, everyone on B, the per-connection A/B).
const SHARED_LENGTH: Duration = Duration::from_secs(60);

fn shared_bottleneck(index: u8, port: u16) -> (Population, TcpListener) {
    use bbrscope_emulator::{LinkConfig, LossSpec};
    let bdp = SHARED_RATE_BPS as f64 / 8.0 * SHARED_RTT.as_secs_f64();
    let cfg = LinkConfig {
        rate_bps: SHARED_RATE_BPS,
        rtt: SHARED_RTT,
        buffer_bytes: (bdp * SHARED_BUFFER_BDP) as u64,
        loss: LossSpec { rate: 0.0, burst: None },
        seed: u64::from(index),
    };
    emulated_as(index, &cfg, port)
}

/// One arrival of an open-loop load: when, from its replay's start, and the response's size.
#[derive(Clone, Copy, Debug)]
struct Arrival {
    at: Duration,
    size: usize,
}

/// The responses' sizes, heavy-tailed: (share, smallest, largest) in bytes, uniform within.
const SIZE_MIX: [(f64, usize, usize); 3] =
    [(0.70, 10_000, 50_000), (0.25, 100_000, 500_000), (0.05, 1_000_000, 4_000_000)];

/// Seeded Poisson arrivals offering `load` of the shared path's rate for `length`, sizes from
/// [`SIZE_MIX`]: the same seed gives the same schedule, and a longer `length` the same schedule
/// with more after it.
fn arrivals(seed: u64, load: f64, length: Duration) -> Vec<Arrival> {
    let mean_size: f64 = SIZE_MIX.iter().map(|&(p, lo, hi)| p * (lo + hi) as f64 / 2.0).sum();
    let per_s = load * SHARED_RATE_BPS as f64 / 8.0 / mean_size;
    let mut rng = bbrscope::rng::Rng::new(seed);
    let (mut t, mut out) = (0.0, Vec::new());
    loop {
        t += -rng.uniform().ln() / per_s;
        if t >= length.as_secs_f64() {
            return out;
        }
        let mut u = rng.uniform();
        let &(_, lo, hi) = SIZE_MIX
            .iter()
            .find(|&&(p, ..)| {
                u -= p;
                u < 0.0
            })
            .unwrap_or(&SIZE_MIX[2]);
        out.push(Arrival { at: Duration::from_secs_f64(t), size: lo + rng.below(hi - lo + 1) });
    }
}

/// One arrival as its client saw it: its address, the bytes it got, and the seconds from
/// connect to the last byte.
#[derive(Clone, Copy, Debug)]
struct Served {
    client: SocketAddr,
    got: usize,
    took: f64,
}

/// Replays `arrivals` on `p`: each a new connection from the receiver's namespace at its offset,
/// on a thread of its own (open loop: a slow response never delays the next arrival). The
/// clients' log, in arrival order.
fn replay(p: &Population, arrivals: &[Arrival]) -> Vec<Served> {
    let start = Instant::now();
    thread::scope(|s| {
        let clients: Vec<_> = arrivals
            .iter()
            .map(|a| {
                if let Some(wait) = (start + a.at).checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                let (server, size) = (p.server, a.size);
                s.spawn(move || {
                    let t0 = Instant::now();
                    let (client, got) = p.link.receiver.run(move || Ok(fetch(server, size))).unwrap();
                    Served { client, got, took: t0.elapsed().as_secs_f64() }
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    })
}

/// [`serve_logging_cc`]'s log: each accepted connection's client, algorithm and accept time.
type ServerLog = Mutex<Vec<(SocketAddr, String, f64)>>;

/// Each arrival's algorithm, from the server's own log (matched by client address).
fn algorithms_of(log: &[Served], server_log: &ServerLog) -> Vec<String> {
    let server_log = server_log.lock().unwrap();
    log.iter()
        .map(|s| {
            let (_, cc, _) = server_log
                .iter()
                .find(|(peer, ..)| *peer == s.client)
                .unwrap_or_else(|| panic!("the server logged no connection from {}", s.client));
            cc.clone()
        })
        .collect()
}

/// Everyone on `cc`: set on the listening socket, which its connections inherit (a namespace
/// other than the initial one may only default to the algorithms the host allows to all, and
/// this host may not allow CUBIC), the arrivals replayed; the server's log shows that every
/// connection ran it.
fn everyone_on(
    p: &Population,
    listener: &TcpListener,
    cc: &str,
    arrivals: &[Arrival],
    server_log: &ServerLog,
) -> Vec<Served> {
    set_cc(listener, cc);
    server_log.lock().unwrap().clear();
    let log = replay(p, arrivals);
    let ccs = algorithms_of(&log, server_log);
    assert!(ccs.iter().all(|c| c == cc), "everyone on {cc}: the server saw {ccs:?}");
    log
}

/// `bbrscope experiment --arms cubic,bbr --no-guardrail EXTRA...` over the same arrivals (the
/// kernel sets each connection's arm as it is established, over what it inherited): its report,
/// the clients' log and each arrival's algorithm as the server saw it. EXTRA empty is the
/// per-connection A/B; the switchback is the same run with its design's flags.
fn experiment_on(
    p: &Population,
    port: u16,
    arrivals: &[Arrival],
    server_log: &ServerLog,
    extra: &[&str],
) -> (Value, Vec<Served>, Vec<String>) {
    server_log.lock().unwrap().clear();
    let child = start_experiment("cubic,bbr", port, &[&["--no-guardrail"], extra].concat());
    let log = replay(p, arrivals);
    thread::sleep(Duration::from_secs(1));
    let report = report_of(child);
    let ccs = algorithms_of(&log, server_log);
    (report, log, ccs)
}

/// The report's size strata (one path, so one RTT band): <16 KiB, <256 KiB, <4 MiB, more.
const STRATA: [&str; 4] = ["<16 KB", "16–256 KB", "256 KB–4 MB", ">4 MB"];

fn stratum(size: usize) -> usize {
    [16 << 10, 256 << 10, 4 << 20].iter().filter(|&&edge| size >= edge).count()
}

/// The report's estimand on the clients' times: `Σ w_s (mean ln T_B − mean ln T_A)` over the
/// size strata with at least 10 flows per arm, `w_s` their share of both arms' time. `a`, `b`:
/// (size, seconds) per response.
fn time_weighted(a: &[(usize, f64)], b: &[(usize, f64)]) -> f64 {
    let in_stratum = |xs: &[(usize, f64)], s: usize| -> Vec<f64> {
        xs.iter().filter(|(size, _)| stratum(*size) == s).map(|&(_, t)| t).collect()
    };
    let mean_ln = |ts: &[f64]| ts.iter().map(|t| t.ln()).sum::<f64>() / ts.len() as f64;
    let (mut weighted, mut time) = (0.0, 0.0);
    for s in 0..STRATA.len() {
        let (ta, tb) = (in_stratum(a, s), in_stratum(b, s));
        if ta.len() < 10 || tb.len() < 10 {
            continue;
        }
        let t: f64 = ta.iter().chain(&tb).sum();
        weighted += t * (mean_ln(&tb) - mean_ln(&ta));
        time += t;
    }
    weighted / time
}

/// Median completion (seconds) per size stratum of (size, seconds) pairs; `None` without flows.
fn medians(xs: &[(usize, f64)]) -> [Option<f64>; 4] {
    std::array::from_fn(|s| {
        let mut ts: Vec<f64> = xs.iter().filter(|(size, _)| stratum(*size) == s).map(|&(_, t)| t).collect();
        ts.sort_by(f64::total_cmp);
        (!ts.is_empty()).then(|| ts[ts.len() / 2])
    })
}

/// Per response: the mean over the arrivals `keep` admits of ln(time in `b` / time in `a`), the
/// same arrival in both runs.
fn paired_log_ratio(a: &[Served], b: &[Served], keep: impl Fn(usize) -> bool) -> f64 {
    let ratios: Vec<f64> = (0..a.len()).filter(|&i| keep(i)).map(|i| (b[i].took / a[i].took).ln()).collect();
    ratios.iter().sum::<f64>() / ratios.len() as f64
}

/// (size, seconds) of the arrivals `keep` admits.
fn times(arrivals: &[Arrival], log: &[Served], keep: impl Fn(usize) -> bool) -> Vec<(usize, f64)> {
    (0..log.len()).filter(|&i| keep(i)).map(|i| (arrivals[i].size, log[i].took)).collect()
}

/// A log ratio as a percentage change.
fn pct(ln: f64) -> f64 {
    ln.exp_m1() * 100.0
}

/// A report's answer for a group: its estimate and interval as log ratios.
fn answer_ln(g: &Value) -> (f64, f64, f64) {
    let ln = |k: &str| (g["answer"][k].as_f64().unwrap_or_else(|| panic!("no {k} in {}", g["answer"])) / 100.0).ln_1p();
    (ln("effect_pct"), ln("low_pct"), ln("high_pct"))
}

/// Median seconds per stratum, as a line.
fn medians_line(xs: &[(usize, f64)]) -> String {
    let m = medians(xs);
    STRATA
        .iter()
        .zip(m)
        .map(|(l, m)| format!("{l} {}", m.map_or("-".into(), |m| format!("{m:.3}"))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The switchback's blocks: long enough for the previous block's flows to be gone after the
/// burn-in (the 256 KB–4 MB responses take 0.5–2.1 s at the median here), short enough that the
/// analysis's 8 rounds (`MIN_ROUNDS`, three blocks each) fit in a few minutes.
const SWITCHBACK_BLOCK: &str = "8s";
const SWITCHBACK_BURN_IN: &str = "2s";
/// Ten rounds of three 8 s blocks: blocks are aligned to the epoch, so the first and last rounds
/// may be partial; at least nine are whole.
const SWITCHBACK_LENGTH: Duration = Duration::from_mins(4);

/// The switchback on the scenario's traffic (the same seeded schedule, run longer): every new
/// connection on CUBIC, on BBR or drawn, block by block. Its everyone-switched answer (the
/// per-response estimand) holds `truth`, the per-response effect of the paired everyone-BBR and
/// everyone-CUBIC runs; its interference interval holds `cubic_beside_bbr`, CUBIC's own flows
/// beside BBR against everyone on CUBIC as the clients' logs of the paired runs measured it (the
/// interval, from ten rounds, is too wide to exclude none: +30% [−50, +235] in the one run
/// measured, so its sign alone is not asserted); its per-connection estimate, from its mixed
/// blocks, says BBR faster than the truth.
fn switchback_holds_the_truth(
    p: &Population,
    port: u16,
    seed: u64,
    (truth, cubic_beside_bbr): (f64, f64),
    server_log: &ServerLog,
) {
    let load = arrivals(seed, SHARED_LOAD, SWITCHBACK_LENGTH);
    let seed = seed.to_string();
    let flags =
        ["--design", "switchback", "--block", SWITCHBACK_BLOCK, "--burn-in", SWITCHBACK_BURN_IN, "--seed", &seed];
    let (report, log, _) = experiment_on(p, port, &load, server_log, &flags);
    assert!(log.iter().zip(&load).all(|(s, a)| s.got == a.size), "switchback: a response came back short");
    assert_eq!(report["design"]["name"], "switchback", "{}", report["design"]);
    let all = group(&report, "all flows");
    let (everyone, low, high) = answer_ln(all);
    let sb = &all["switchback"];
    let interference = &sb["interference"];
    eprintln!(
        "switchback ({} rounds): everyone switched {:+.1}% [{:+.1}, {:+.1}] against the truth {:+.1}%; \
         per connection {:+.1}%; {}",
        sb["rounds"],
        pct(everyone),
        pct(low),
        pct(high),
        pct(truth),
        sb["per_connection"]["effect_pct"].as_f64().unwrap_or(f64::NAN),
        all["interference"]
    );
    assert!(low <= truth && truth <= high, "the switchback's interval misses the truth {:+.1}%", pct(truth));
    let (i_low, i_high) = (interference["low_pct"].as_f64(), interference["high_pct"].as_f64());
    assert!(
        i_low.zip(i_high).is_some_and(|(l, h)| l <= pct(cubic_beside_bbr) && pct(cubic_beside_bbr) <= h),
        "the interference interval misses CUBIC beside BBR as measured, {:+.1}%: {interference}",
        pct(cubic_beside_bbr)
    );
    assert!(sb["per_connection"]["effect_pct"].as_f64().is_some_and(|e| e < pct(truth)), "{sb}");
}

/// One shared shallow bottleneck (40 Mbit/s, 40 ms, a buffer of 0.2 BDP, no random loss), an
/// open-loop load of seeded Poisson arrivals (70% of the rate; 70% 10–50 KB, 25% 100–500 KB, 5%
/// 1–4 MB), replayed three times: everyone on CUBIC, everyone on BBR (the truth: what a user who
/// switches everyone gets, per arrival, the same arrival in both runs) and the per-connection A/B.
/// The A/B answers "BBR beside CUBIC": it is biased here, and CUBIC's own flows are slower in it
/// than when everyone ran CUBIC. `BBRSCOPE_SCENARIO_SEED` picks another schedule (38 unless set).
///
/// Measured (this project's 2-core VM, Linux 6.18, BBR v1; 60 s per replay, ~950 arrivals, about
/// 3 minutes in all), seeds 1, 2, 3, 38: truth (everyone BBR against everyone CUBIC) in the
/// report's estimand (time-weighted over size strata) +3.0%, +3.8%, +8.3%, +5.0%, per response
/// +14.9%, +22.4%, +27.6%, +26.9%: switching everyone to BBR gains nothing, and a response is
/// slower. The A/B's "all flows": −26.7% [−44.4, −3.3], −50.6% [−66.2, −27.8], −41.4% [−60.2,
/// −13.7], −53.8% [−69.1, −31.1], its distance from the truth beyond its half-width by 0.06,
/// 0.36, 0.23, 0.42 (log; seed 1's margin is thin). CUBIC's flows in the A/B against the same
/// arrivals when everyone ran CUBIC: +21.1%, +21.1%, +22.7%, +26.1% per response (their
/// 256 KB–4 MB median 0.54 → 0.66 s, 0.74 → 1.54 s, 0.79 → 1.26 s, 0.94 → 2.06 s). Seed 38 again,
/// with these assertions: truth +11.3% (per response +28.2%), A/B −36.6% [−56.6, −7.3] (beyond by
/// 0.18), CUBIC beside BBR +28.7%; the same schedule's spread between runs is the machine's. The same at
/// 20 Mbit/s (seeds 38, 1, 2, 3): truth +0.9%, +1.4%, −1.3%, +4.8%; A/B −58.7%, −41.0%, −54.1%,
/// −55.4%, beyond its half-width by 0.34, 0.05, 0.18, 0.13; CUBIC beside BBR +16.6% to +21.8%.
/// At load 0.8 (20 Mbit/s, 75 s) one seed's A/B (−27.8% [−53.3, +11.7]) was within its
/// half-width of the truth (+8.3%).
/// The switchback (seed 38, the kernel and analysis branches merged in, 8 s blocks, 2 s burn-in,
/// 240 s, 10 rounds; the whole test then 428 s): everyone switched +23.2% [−44.3, +172.5]
/// against the truth's +26.9% per response; interference +30% [−50, +235] (the direct
/// measurement above: +26.1%); per connection −23.7%.
#[test]
fn on_a_shared_shallow_bottleneck_the_per_connection_ab_overstates_switching_everyone() {
    require_root();
    let _turn = turn();
    let port = port_for(34_000);
    let seed: u64 = std::env::var("BBRSCOPE_SCENARIO_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(38);
    let (p, listener) = shared_bottleneck(74, port);
    let listening = listener.try_clone().unwrap();
    let server_log = serve_logging_cc(listener);
    let load = arrivals(seed, SHARED_LOAD, SHARED_LENGTH);
    let started = Instant::now();
    let cubic = everyone_on(&p, &listening, "cubic", &load, &server_log);
    let bbr = everyone_on(&p, &listening, "bbr", &load, &server_log);
    let (report, mixed, ccs) = experiment_on(&p, port, &load, &server_log, &[]);
    for (name, log) in [("cubic", &cubic), ("bbr", &bbr), ("A/B", &mixed)] {
        assert!(log.iter().zip(&load).all(|(s, a)| s.got == a.size), "{name}: a response came back short");
    }
    let all = |_: usize| true;
    let on = |cc: &'static str| {
        let ccs = &ccs;
        move |i: usize| ccs[i] == cc
    };
    // The truth: everyone on BBR against everyone on CUBIC, the same arrivals.
    let truth_per_response = paired_log_ratio(&cubic, &bbr, all);
    let truth = time_weighted(&times(&load, &cubic, all), &times(&load, &bbr, all));
    // The A/B: its report, and the same estimand from the clients' own log of it.
    let (ab, ab_low, ab_high) = answer_ln(group(&report, "all flows"));
    let ab_clients = time_weighted(&times(&load, &mixed, on("cubic")), &times(&load, &mixed, on("bbr")));
    // Interference: each arm's flows in the A/B against the same arrivals when everyone ran it.
    let cubic_beside_bbr = paired_log_ratio(&cubic, &mixed, on("cubic"));
    let bbr_beside_cubic = paired_log_ratio(&bbr, &mixed, on("bbr"));
    let n_bbr = ccs.iter().filter(|c| *c == "bbr").count();
    eprintln!(
        "shared bottleneck, seed {seed}: {} arrivals in {:.0} s ({} to BBR in the A/B)\n\
         truth (everyone BBR vs everyone CUBIC): time-weighted {:+.1}%, per response {:+.1}%\n\
         A/B report: {:+.1}% [{:+.1}, {:+.1}] (from its clients' log: {:+.1}%)\n\
         CUBIC's flows beside BBR vs everyone CUBIC: {:+.1}% per response; \
         BBR's beside CUBIC vs everyone BBR: {:+.1}%\n\
         medians, everyone CUBIC: {}\n\
         medians, everyone BBR:   {}\n\
         medians, A/B CUBIC:      {}\n\
         medians, A/B BBR:        {}",
        load.len(),
        started.elapsed().as_secs_f64(),
        n_bbr,
        pct(truth),
        pct(truth_per_response),
        pct(ab),
        pct(ab_low),
        pct(ab_high),
        pct(ab_clients),
        pct(cubic_beside_bbr),
        pct(bbr_beside_cubic),
        medians_line(&times(&load, &cubic, all)),
        medians_line(&times(&load, &bbr, all)),
        medians_line(&times(&load, &mixed, on("cubic"))),
        medians_line(&times(&load, &mixed, on("bbr"))),
    );
    // Switching everyone gains nothing that matters here, and slows a response.
    assert!(truth > (-0.05f64).ln_1p(), "everyone on BBR {:+.1}% against everyone on CUBIC", pct(truth));
    assert!(truth_per_response > 0.0, "per response {:+.1}%", pct(truth_per_response));
    // The A/B says BBR faster, farther from the truth than its own interval reaches.
    let half = (ab_high - ab_low) / 2.0;
    assert!(ab < truth - half, "the A/B is within its interval's half-width of the truth");
    // Because CUBIC's own flows were slowed by BBR's beside them.
    assert!(cubic_beside_bbr > 0.1f64.ln_1p(), "CUBIC beside BBR {:+.1}%", pct(cubic_beside_bbr));
    // The switchback (#38) on the same traffic.
    switchback_holds_the_truth(&p, port, seed, (truth_per_response, cubic_beside_bbr), &server_log);
    drop(p);
}

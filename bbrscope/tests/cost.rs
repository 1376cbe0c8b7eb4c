//! bbrscope's cost stays structural (root required): a bulk flow gets records at the sample
//! interval, not at its ACK rate, so an accidental per-ACK ring buffer write fails here. Short,
//! with generous bounds, and no timing thresholds, so CI can afford it; `cargo xtask bench`
//! measures the actual cost.

mod common;

use std::{
    io::Read as _,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use common::*;
use serde_json::Value;

const INTERVAL_MS: u64 = 100;
const SEND: Duration = Duration::from_secs(2);

/// One test's traffic at a time: every bbrscope's sock_ops program runs for every callback any
/// of them asked for, so a neighbour's flow would add to the run counts measured here.
static TRAFFIC: Mutex<()> = Mutex::new(());

fn traffic() -> MutexGuard<'static, ()> {
    TRAFFIC.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("expected a number, got {v}"))
}

#[test]
fn a_bulk_flow_gets_records_per_interval_not_per_ack() {
    require_root();
    let _turn = traffic();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let mut stream = Stream::start(&["--port", &port, "--interval", &INTERVAL_MS.to_string()]);
    let sender = Sender::start(server.addr, "cubic", SEND, None);
    let local = sender.local;
    sender.join();
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");

    let open = open_for(&records, local).expect("a flow_open for the bulk flow");
    let cookie = &open["cookie"];
    let samples: Vec<&Value> = of_flow(&records, "sample", cookie).collect();
    let close = of_flow(&records, "flow_close", cookie).next().expect("a flow_close for the bulk flow");

    // About 1000 / interval samples per second of the flow's life: half to twice that.
    let per_s = samples.len() as f64 / num(&close["duration_s"]);
    let due = 1000.0 / INTERVAL_MS as f64;
    assert!(
        (due / 2.0..=due * 2.0).contains(&per_s),
        "{} samples in {} s: {per_s:.1}/s, expected about {due}/s",
        samples.len(),
        close["duration_s"]
    );
    // Each sample stands for many incoming segments (ACKs); per-ACK records would make this 1.
    let acks: f64 = samples.iter().map(|s| num(&s["acks"])).sum();
    assert!(acks >= 20.0 * samples.len() as f64, "{acks} ACKs in {} samples", samples.len());

    // The same from the kernel counters behind the `stats` records (what the benchmark reads):
    // tcp_probe events (every socket's incoming segments) far outnumber the records delivered.
    let stats: Vec<&Value> = records.iter().filter(|r| r["type"] == "stats").collect();
    let total = |field: &str| -> f64 { stats.iter().map(|s| num(&s[field]) * num(&s["interval_s"])).sum() };
    let (events, delivered) = (total("events_per_s"), total("records_per_s"));
    assert!(delivered > 0.0, "no records counted in {} stats records", stats.len());
    assert!(events >= 20.0 * delivered, "{events:.0} tcp_probe events but {delivered:.0} records delivered");
    assert_eq!(stats.last().map(|s| num(&s["drops_total"])), Some(0.0), "drops with one flow");
}

/// The kernel's tick rate as its configuration says (the test's own reading of it).
fn configured_hz() -> Option<f64> {
    let gz = std::fs::File::open("/proc/config.gz").ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz).read_to_string(&mut text).ok()?;
    text.lines().find_map(|l| l.strip_prefix("CONFIG_HZ="))?.parse().ok()
}

/// On the sock_ops path samples are paced by the kernel's tick counter (no clock helper call per
/// ACK): the interval in whole ticks, rounded up — 30 ms at HZ 250 is 8 ticks, so a busy flow's
/// samples come 32 ms apart (a precise clock would give 30, a wrong HZ a multiple). The
/// sample timestamps are the kernel's CLOCK_MONOTONIC; HZ is read here from the kernel's config.
#[test]
fn samples_are_paced_by_whole_ticks_of_the_interval() {
    require_root();
    let _turn = traffic();
    let Some(hz) = configured_hz() else {
        eprintln!("skipped: this kernel publishes no /proc/config.gz");
        return;
    };
    const MS: f64 = 30.0;
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let mut stream = Stream::start(&["--observer", "sockops", "--port", &port, "--interval", &MS.to_string()]);
    let sender = Sender::start(server.addr, "cubic", Duration::from_secs(1), None);
    let local = sender.local;
    sender.join();
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");

    let stats = records.iter().find(|r| r["type"] == "stats").expect("a stats record");
    assert_eq!(stats["sample_clock"], "jiffies", "{stats}");
    // A mainline kernel's BBR, where one is loaded, is v1 (its struct bbr read from the BTF).
    let registered = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap();
    let bbr = if registered.split_whitespace().any(|a| a == "bbr") { serde_json::json!("v1") } else { Value::Null };
    assert_eq!(stats["bbr_version"], bbr, "{stats}");
    let open = open_for(&records, local).expect("a flow_open for the bulk flow");
    let ts: Vec<f64> = of_flow(&records, "sample", &open["cookie"]).map(|s| num(&s["ts"])).collect();
    let mut gaps: Vec<f64> = ts.windows(2).map(|w| (w[1] - w[0]) * 1000.0).collect();
    assert!(gaps.len() >= 10, "{} samples in 1 s at {MS} ms", ts.len());
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    let tick = 1000.0 / hz;
    let expected = (MS / tick).ceil() * tick;
    assert!(
        (median - expected).abs() <= tick / 4.0,
        "median gap {median:.2} ms between samples, expected {expected:.2} ms ({MS} ms in ticks of {tick} ms); gaps: {gaps:.1?}"
    );
}

/// Socket storage a flow may take on the sock_ops path. The benchmark measured 440 bytes per
/// socket (the flow's state plus the kernel's storage headers); this bound leaves room to grow
/// the state, not to multiply it: 100,000 sockets must stay at tens of MB.
const MAX_STORAGE_BYTES: u64 = 1024;

/// The sock_ops path keeps each flow in its socket (socket-local storage), which the kernel charges
/// to the socket's option memory (`ss -m`: `o`). Every socket opened while it runs gets storage,
/// and no more than [`MAX_STORAGE_BYTES`]. A byte count, not a timing: `cargo xtask bench`
/// measures time and memory at 100,000 sockets.
#[test]
fn socket_storage_per_flow_is_bounded() {
    require_root();
    let _turn = traffic();
    let stream = Stream::start(&["--observer", "sockops"]);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    const PAIRS: usize = 20;
    let clients: Vec<_> = (0..PAIRS).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
    let servers: Vec<_> = (0..PAIRS).map(|_| listener.accept().unwrap().0).collect();
    let port = addr.port();
    let ss = run("ss", &["-tnmH", "state", "established", &format!("( sport = :{port} or dport = :{port} )")]);
    let optmem: Vec<u64> = ss
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("skmem:("))
        .map(|m| m.split(',').find_map(|f| f.strip_prefix('o')).and_then(|v| v.parse().ok()).expect("o in skmem"))
        .collect();
    drop((clients, servers));
    let (code, _, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");
    assert_eq!(optmem.len(), 2 * PAIRS, "ss -m showed {} of {} sockets:\n{ss}", optmem.len(), 2 * PAIRS);
    for o in &optmem {
        assert!((1..=MAX_STORAGE_BYTES).contains(o), "socket storage of {o} bytes (bound {MAX_STORAGE_BYTES}):\n{ss}");
    }
}

/// How often the kernel ran a process's sock_ops program, from the process's descriptors'
/// fdinfo (the kernel's own count; it counts while BPF statistics are on: `--bpf-stats`).
fn sockops_runs(pid: u32) -> u64 {
    const BPF_PROG_TYPE_SOCK_OPS: &str = "13";
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
        .map(|fd| std::fs::read_to_string(fd.path()).unwrap_or_default())
        .find(|info| info.lines().any(|l| l.strip_prefix("prog_type:").map(str::trim) == Some(BPF_PROG_TYPE_SOCK_OPS)))
        .and_then(|info| info.lines().find_map(|l| l.strip_prefix("run_cnt:").and_then(|v| v.trim().parse().ok())))
        .expect("a sock_ops program with a run count among the stream's descriptors")
}

/// A flow the filters reject costs no per-ACK work: its sockets never get RTT callbacks (they
/// are asked for only once a flow is admitted), so the program runs only for its handful of
/// lifecycle callbacks. The same bulk flow through an admitted port is the control: there the
/// program runs for about every ACK. Counted by the kernel, not timed.
#[test]
fn a_filtered_flow_gets_no_per_ack_callbacks() {
    require_root();
    let _turn = traffic();
    let watched = Discard::bind("127.0.0.1:0");
    let other = Discard::bind("127.0.0.1:0");
    let port = watched.addr.port().to_string();
    let mut stream = Stream::start(&["--observer", "sockops", "--bpf-stats", "--port", &port]);
    let runs_during = |to: Option<std::net::SocketAddr>| {
        let before = sockops_runs(stream.pid());
        match to {
            Some(to) => drop(Sender::start(to, "cubic", Duration::from_secs(1), None).join()),
            None => std::thread::sleep(Duration::from_secs(1)),
        }
        // The closing callbacks run as both ends close, just after.
        std::thread::sleep(Duration::from_millis(300));
        sockops_runs(stream.pid()) - before
    };
    // Other sockets' callbacks reach this program too when another sock_ops observer on the host
    // (another bbrscope, a benchmark) asked for them: each try subtracts as long a window with
    // no flow, and the least of three tries is the flow's.
    let filtered = (0..3)
        .map(|_| {
            let idle = runs_during(None);
            runs_during(Some(other.addr)).saturating_sub(idle)
        })
        .min()
        .unwrap();
    let admitted = runs_during(Some(watched.addr));
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_summary");
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");
    let summary = records.iter().find(|r| r["type"] == "flow_summary").unwrap();
    let acks = num(&summary["rtt_events"]);
    // The control: one run per RTT-carrying ACK of the admitted flow, as its summary counts them.
    assert!(acks >= 100.0 && admitted as f64 >= acks, "{admitted} runs for an admitted flow of {acks} RTT ACKs");
    // Connect, established, a few state changes and retransmits on each end: tens, not thousands.
    assert!(
        filtered <= 50,
        "{filtered} runs for a filtered 1 s bulk flow ({admitted} for the same flow admitted; is another sock_ops \
         observer busy on this host?)"
    );
}

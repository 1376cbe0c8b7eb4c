//! Short request/response flows, as an HTTP server sees them: a client connects and sends a
//! request line with a size, the server writes that many bytes (10–200 KB) and closes, the client
//! reads to the end and closes. Clients start flows at a fixed rate; both sides keep their own
//! log (the workload's truth, which no bbrscope code wrote), and every flow must come out of
//! `bbrscope stream` as a `flow_summary` of the server's socket. `bbrscope export` (the same
//! pipeline, no JSON) is measured on the same workload.

use std::{
    collections::HashMap,
    fs::File,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use bbrscope_common::counter;
use serde::Serialize;
use serde_json::Value;

use super::{
    exporter, measure,
    net::{self, Veth},
    scenarios::{Setup, Traced, bbrscope_stream},
    workload::PathKind,
};

pub(super) const MIN_BYTES: u64 = 10_000;
pub(super) const MAX_BYTES: u64 = 200_000;
/// Concurrent clients and server threads: enough that a flow waiting on its peer does not hold
/// back the rate.
const CLIENTS: usize = 32;
const SERVERS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ShortObserver {
    Nothing,
    /// `bbrscope stream --observer sockops` into a file.
    Sockops,
    /// `bbrscope export --observer sockops`: the same events, counted into metrics, no JSON.
    Export,
}

impl ShortObserver {
    pub(crate) fn label(self) -> &'static str {
        match self {
            ShortObserver::Nothing => "nothing",
            ShortObserver::Sockops => "bbrscope stream --observer sockops > file",
            ShortObserver::Export => "bbrscope export --observer sockops",
        }
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct ShortResult {
    pub path: PathKind,
    pub observer: ShortObserver,
    pub target_per_s: f64,
    pub seconds: f64,
    /// Flows the clients completed (the response read to its end), per the clients' log.
    pub completed: u64,
    pub failed: u64,
    pub flows_per_s: f64,
    pub bytes: u64,
    /// `flow_summary` records of the server's sockets that match a logged flow (by client port),
    /// and the bytes they say were acked.
    pub summarized: Option<u64>,
    pub summarized_bytes_acked: Option<u64>,
    /// `flow_summary` records of server sockets with no logged flow.
    pub summaries_unmatched: Option<u64>,
    /// `export`: flows its `bbrscope_flows_closed_total` grew by over the run: both ends of every
    /// connection (the client sends its request), and any other connection of the host meanwhile.
    pub export_flows_closed: Option<u64>,
    /// The kernel's counts over the run: flows opened and summarised (both ends), records lost.
    pub kernel_opened: Option<u64>,
    pub kernel_summarized: Option<u64>,
    pub drops: Option<u64>,
    /// bbrscope's own CPU while the flows ran (1.0 = one core).
    pub cpu_cores: Option<f64>,
    /// Time bbrscope's threads waited for a CPU (runnable, not running) while the flows ran, per
    /// second: a stall there leaves the ring unread as surely as a blocked write.
    pub run_delay_ms_per_s: Option<f64>,
    /// Time in the sock_ops program (all callbacks) per second, and per run.
    pub bpf_cores: Option<f64>,
    pub ns_per_event: Option<f64>,
    pub others_cpu_cores: f64,
}

/// The workload's own log: every completed flow's client port and response size.
struct Log {
    flows: Mutex<Vec<(u16, u64)>>,
    failed: AtomicU64,
}

/// Size of flow `i`: spread over 10–200 KB by a fixed hash, the same in every run.
fn size_of(i: u64) -> u64 {
    let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 33;
    MIN_BYTES + h % (MAX_BYTES - MIN_BYTES + 1)
}

fn serve(listener: &TcpListener) {
    let body = vec![0x68u8; MAX_BYTES as usize];
    loop {
        let Ok((conn, _)) = listener.accept() else { return };
        let mut reader = BufReader::new(&conn);
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let Ok(n) = line.trim().parse::<usize>() else { continue };
        // Then close: the response ends with the server's FIN, as HTTP/1.0 would.
        let _ = (&conn).write_all(&body[..n.min(body.len())]);
    }
}

fn client(to: SocketAddr, next: &AtomicU64, start: Instant, rate: f64, until: Instant, log: &Log) {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        // Flow i starts at start + i / rate: open loop, so a slow flow does not slow the rest
        // (unless every client is busy, which shows as a lower achieved rate).
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        if due >= until {
            return;
        }
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let size = size_of(i);
        let mut flow = || -> Result<u16> {
            let mut s = TcpStream::connect(to)?;
            let port = s.local_addr()?.port();
            s.write_all(format!("{size}\n").as_bytes())?;
            let mut got = 0u64;
            loop {
                match s.read(&mut buf)? {
                    0 => break,
                    n => got += n as u64,
                }
            }
            if got != size {
                bail!("{got} of {size} bytes");
            }
            Ok(port)
        };
        match flow() {
            Ok(port) => log.flows.lock().unwrap().push((port, size)),
            Err(_) => {
                log.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Runs the workload: servers in `server_ns`, clients in `client_ns` (None: this namespace).
fn workload(
    server_ns: Option<String>,
    client_ns: Option<String>,
    server_ip: Ipv4Addr,
    rate: f64,
    seconds: f64,
) -> Result<(SocketAddr, Log, f64)> {
    let bind = move || -> Result<TcpListener> {
        if let Some(ns) = &server_ns {
            net::setns(ns)?;
        }
        let l = TcpListener::bind((server_ip, 0))?;
        // A larger backlog than std's 128: bursts of connects are not dropped and retried.
        // SAFETY: listen(2) on a socket `l` owns and keeps open; no pointers.
        if unsafe { libc::listen(l.as_raw_fd(), 4096) } != 0 {
            bail!("listen: {}", std::io::Error::last_os_error());
        }
        Ok(l)
    };
    let listener = Arc::new(thread::spawn(bind).join().map_err(|_| anyhow::anyhow!("bind thread panicked"))??);
    let addr = listener.local_addr()?;
    let servers: Vec<_> = (0..SERVERS)
        .map(|_| {
            let l = listener.clone();
            thread::spawn(move || serve(&l))
        })
        .collect();
    let log = Arc::new(Log { flows: Mutex::new(Vec::new()), failed: AtomicU64::new(0) });
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_millis(50);
    let until = start + Duration::from_secs_f64(seconds);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (log, next, ns) = (log.clone(), next.clone(), client_ns.clone());
            thread::spawn(move || {
                if let Some(ns) = ns
                    && net::setns(&ns).is_err()
                {
                    return;
                }
                client(addr, &next, start, rate, until, &log);
            })
        })
        .collect();
    for c in clients {
        let _ = c.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Shutting a listening socket down wakes the threads blocked in accept() (with EINVAL),
    // without connections that would look like flows.
    // SAFETY: shutdown(2) on a socket `listener` owns and keeps open; no pointers.
    unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) };
    for s in servers {
        let _ = s.join();
    }
    let log = Arc::try_unwrap(log).map_err(|_| anyhow::anyhow!("client threads still hold the log"))?;
    Ok((addr, log, elapsed))
}

pub(super) fn run(
    setup: &Setup,
    path: PathKind,
    observer: ShortObserver,
    veth: Option<&Veth>,
    rate: f64,
    seconds: f64,
    work_dir: &Path,
) -> Result<ShortResult> {
    let (server_ns, client_ns, server_ip) = match path {
        PathKind::Loopback => (None, None, Ipv4Addr::LOCALHOST),
        PathKind::Veth => {
            let v = veth.context("the veth pair")?;
            (Some(v.receiver.path()), Some(v.sender.path()), v.receiver_ip)
        }
    };
    let out_path = match std::env::var_os("BBRBENCH_KEEP") {
        Some(dir) => Path::new(&dir).join(format!("short-flows-{path:?}.ndjson")),
        None => work_dir.join("short-flows.ndjson"),
    };
    let metrics_at = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let traced = match observer {
        ShortObserver::Nothing => None,
        ShortObserver::Sockops => {
            let out = File::create(&out_path)?;
            Some(bbrscope_stream(setup, &["--observer", "sockops", "--stats-interval", "1"], out.into())?)
        }
        ShortObserver::Export => {
            let mut cmd = Command::new(setup.bbrscope);
            cmd.args(["export", "--observer", "sockops", "--listen", &metrics_at.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null());
            Some(Traced::spawn(cmd, setup.pinger)?)
        }
    };
    let flows_closed = || -> Result<u64> {
        Ok(exporter::counter_sum(&exporter::scrape(metrics_at)?, "bbrscope_flows_closed_total") as u64)
    };
    let closed_before = (observer == ShortObserver::Export).then(flows_closed).transpose()?;
    let read = |t: &super::scenarios::Traced| -> Result<_> {
        Ok((
            (measure::cpu_time(t.pid())?, measure::run_delay(t.pid())?),
            t.probe.stats()?,
            t.counters.as_ref().map(measure::Counters::read).transpose()?,
        ))
    };
    let before = traced.as_ref().map(read).transpose()?;
    let others0 = measure::others_cpu_time();
    let (addr, log, elapsed) = workload(server_ns, client_ns, server_ip, rate, seconds)?;
    let others1 = measure::others_cpu_time();
    let during = traced.as_ref().map(read).transpose()?;
    // The last flows' closes reach the ring buffer, and bbrscope writes them out.
    std::thread::sleep(Duration::from_millis(1000));
    let after = traced.as_ref().map(read).transpose()?;
    let export_flows_closed = match closed_before {
        Some(before) => Some(flows_closed()?.saturating_sub(before)),
        None => None,
    };
    if let Some(t) = traced {
        t.stop_in_time()?;
    }

    let flows = log.flows.into_inner().unwrap();
    let completed = flows.len() as u64;
    let bytes = flows.iter().map(|&(_, n)| n).sum();
    let mut result = ShortResult {
        path,
        observer,
        target_per_s: rate,
        seconds: elapsed,
        completed,
        failed: log.failed.load(Ordering::Relaxed),
        flows_per_s: completed as f64 / elapsed,
        bytes,
        summarized: None,
        summarized_bytes_acked: None,
        summaries_unmatched: None,
        export_flows_closed,
        kernel_opened: None,
        kernel_summarized: None,
        drops: None,
        cpu_cores: None,
        run_delay_ms_per_s: None,
        bpf_cores: None,
        ns_per_event: None,
        others_cpu_cores: others1.saturating_sub(others0).as_secs_f64() / elapsed,
    };
    if let (Some(((cpu0, wait0), p0, c0)), Some(((cpu1, wait1), p1, _)), Some((_, _, c2))) = (before, during, after) {
        result.cpu_cores = Some(cpu1.saturating_sub(cpu0).as_secs_f64() / elapsed);
        result.run_delay_ms_per_s = Some(wait1.saturating_sub(wait0).as_secs_f64() * 1e3 / elapsed);
        let ns = p1.run_time_ns.saturating_sub(p0.run_time_ns);
        result.bpf_cores = Some(ns as f64 / 1e9 / elapsed);
        result.ns_per_event = (p1.runs > p0.runs).then(|| ns as f64 / (p1.runs - p0.runs) as f64);
        if let (Some(c0), Some(c2)) = (c0, c2) {
            let d = |i: u32| c2[i as usize] - c0[i as usize];
            result.kernel_opened = Some(d(counter::OPENS));
            result.kernel_summarized = Some(d(counter::ENDS));
            result.drops = Some(c2[counter::RING_FULL as usize]);
        }
        if observer == ShortObserver::Sockops {
            let (matched, acked, unmatched) = match_summaries(&out_path, addr, &flows)?;
            result.summarized = Some(matched);
            result.summarized_bytes_acked = Some(acked);
            result.summaries_unmatched = Some(unmatched);
        }
    }
    if std::env::var_os("BBRBENCH_KEEP").is_none() {
        let _ = std::fs::remove_file(&out_path);
    }
    Ok(result)
}

/// Counts the `flow_summary` records of the server's sockets (src = the server's address) for
/// flows in the log, matched by client port (a port may serve several flows in a run: matched by
/// count). Returns matched summaries, their bytes acked, and unmatched summaries.
fn match_summaries(out: &Path, server: SocketAddr, flows: &[(u16, u64)]) -> Result<(u64, u64, u64)> {
    let mut logged: HashMap<u16, u64> = HashMap::new();
    for &(port, _) in flows {
        *logged.entry(port).or_default() += 1;
    }
    let src = server.to_string();
    let (mut matched, mut acked, mut unmatched) = (0, 0, 0);
    for line in BufReader::new(File::open(out)?).lines() {
        let line = line?;
        if !line.starts_with(r#"{"type":"flow_summary""#) {
            continue;
        }
        let v: Value = serde_json::from_str(&line)?;
        if v["src"].as_str() != Some(src.as_str()) {
            continue;
        }
        let port = v["dst"].as_str().and_then(|d| d.rsplit_once(':')).and_then(|(_, p)| p.parse::<u16>().ok());
        match port.and_then(|p| logged.get_mut(&p)).filter(|n| **n > 0) {
            Some(n) => {
                *n -= 1;
                matched += 1;
                acked += v["bytes_acked"].as_u64().unwrap_or(0);
            }
            None => unmatched += 1,
        }
    }
    Ok((matched, acked, unmatched))
}

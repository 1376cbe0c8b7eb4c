//! 100,000 concurrent idle TCP sockets (loopback connection pairs, both ends here) opened with
//! and without bbrscope's sock_ops path attached: whether it tracks every one (its flow_open
//! count), and the kernel memory each costs it — the socket storage charged to each socket's
//! option memory (`ss -m`'s `o`), and the kernel's slab memory (/proc/meminfo) with bbrscope
//! against without.
//!
//! Root's open-file limit here is 20,000 per process and cannot be raised (no CAP_SYS_RESOURCE),
//! so the sockets are held by several `xtask hold-sockets` processes, each connecting to a
//! listener of its own on its own loopback address (127.0.0.x): each needs fewer ephemeral ports
//! than net.ipv4.ip_local_port_range holds.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use bbrscope_common::{counter, sockopt};
use serde::Serialize;

use super::{
    measure,
    scenarios::{Setup, bbrscope_stream, tie_to_parent},
};

/// Connection pairs per holder process: two descriptors each, under the 20,000 limit.
const PAIRS_PER_HOLDER: usize = 9_000;
/// After the last holder is ready: bbrscope drains the flow_open records, the slab settles.
const SETTLE: Duration = Duration::from_secs(2);

/// `xtask hold-sockets PAIRS IP`: connects PAIRS loopback connections to a listener of its own
/// on IP, says "ready" on stdout, and holds them until its stdin closes.
pub(super) fn hold_main(pairs: usize, ip: Ipv4Addr) -> Result<()> {
    let listener = TcpListener::bind((ip, 0))?;
    // SAFETY: listen(2) on the fd of a listener this function owns; no memory is passed.
    if unsafe { libc::listen(listener.as_raw_fd(), 4096) } != 0 {
        bail!("listen: {}", std::io::Error::last_os_error());
    }
    let addr = listener.local_addr()?;
    let mut held = Vec::with_capacity(2 * pairs);
    // In batches below the backlog: a blocking connect completes into the accept queue.
    for batch in (0..pairs).collect::<Vec<_>>().chunks(1000) {
        for _ in batch {
            let s = TcpStream::connect(addr).with_context(|| format!("connection {} to {addr}", held.len() / 2))?;
            // Closing resets: no TIME_WAIT sockets, no FIN exchange for 100,000 sockets at exit.
            sockopt::set_reset_on_close(&s).context("setsockopt(SO_LINGER)")?;
            held.push(s);
        }
        for _ in batch {
            held.push(listener.accept()?.0);
        }
    }
    println!("ready {}", held.len());
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}

struct Holders(Vec<Child>);

impl Holders {
    fn start(sockets: usize) -> Result<Holders> {
        let pairs = sockets.div_ceil(2);
        let n = pairs.div_ceil(PAIRS_PER_HOLDER);
        let mut children = Vec::new();
        for i in 0..n {
            let mine = pairs / n + usize::from(i < pairs % n);
            let mut cmd = Command::new("/proc/self/exe");
            cmd.args(["hold-sockets", &mine.to_string(), &format!("127.0.0.{}", 2 + i)])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            children.push(tie_to_parent(&mut cmd).spawn().context("starting xtask hold-sockets")?);
        }
        let mut holders = Holders(children);
        for c in &mut holders.0 {
            let mut line = String::new();
            BufReader::new(c.stdout.as_mut().context("holder stdout")?).read_line(&mut line)?;
            if !line.starts_with("ready") {
                bail!("hold-sockets failed (said {line:?}); see its error above");
            }
        }
        Ok(holders)
    }
}

impl Drop for Holders {
    fn drop(&mut self) {
        // Closing stdin lets each exit; its sockets reset as it does.
        for c in &mut self.0 {
            drop(c.stdin.take());
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// Slab memory (reclaimable and not) from /proc/meminfo, in bytes.
fn slab_bytes() -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let line = meminfo.lines().find_map(|l| l.strip_prefix("Slab:")).context("no Slab in /proc/meminfo")?;
    Ok(line.trim().trim_end_matches("kB").trim().parse::<u64>()? * 1024)
}

/// Established TCP sockets on the holders' addresses (127.0.0.2 and up, either end) and the
/// option memory charged to them (`ss -m`: `o`, where socket storage is charged), in bytes.
fn optmem() -> Result<(u64, u64)> {
    let out = Command::new("ss").args(["-tnmH", "state", "established"]).output().context("running ss")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut sockets, mut bytes) = (0, 0);
    let mut ours = false;
    for line in text.lines() {
        // Each socket: its addresses on one line, its skmem on the next (indented).
        if let Some(mem) = line.trim_start().strip_prefix("skmem:(") {
            if ours {
                sockets += 1;
                let o = mem.split(',').find_map(|f| f.strip_prefix('o')).and_then(|v| v.parse::<u64>().ok());
                bytes += o.unwrap_or(0);
            }
            ours = false;
        } else {
            let ends: Vec<&str> = line.split_whitespace().collect();
            ours = ends.iter().skip(2).take(2).any(|e| e.starts_with("127.0.0.") && !e.starts_with("127.0.0.1:"));
        }
    }
    Ok((sockets, bytes))
}

#[derive(Debug, Serialize)]
pub(crate) struct SocketsRun {
    pub with_bbrscope: bool,
    pub round: u32,
    pub sockets: usize,
    /// Time to open every pair (both ends here).
    pub open_s: f64,
    pub slab_before: u64,
    pub slab_loaded: u64,
    /// Sockets the holders had established, counted by `ss`, and their option memory.
    pub ss_sockets: u64,
    pub optmem_bytes: u64,
    /// bbrscope: connections the kernel program took into socket storage as they were
    /// established (idle ones send no record: the storage is the tracking), storage it could not
    /// allocate, records lost.
    pub tracked: Option<u64>,
    pub storage_failed: Option<u64>,
    pub drops: Option<u64>,
    pub rss_before: Option<u64>,
    pub rss_loaded: Option<u64>,
    pub map_bytes: Option<u64>,
    /// bbrscope's CPU from the first connect to the end of the settling time (1.0 = one core).
    pub cpu_cores: Option<f64>,
    pub others_cpu_cores: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct SocketsResult {
    pub sockets: usize,
    pub runs: Vec<SocketsRun>,
    /// Per socket: slab growth without bbrscope (the socket's own kernel memory), and what
    /// bbrscope adds (median over rounds of with minus without).
    pub slab_per_socket: Option<f64>,
    pub bbrscope_slab_per_socket: Option<f64>,
    /// Socket storage charged to each socket (`ss -m` option memory), with bbrscope.
    pub optmem_per_socket: Option<f64>,
}

pub(super) fn run(setup: &Setup, sockets: usize, rounds: u32) -> Result<SocketsResult> {
    let mut runs = Vec::new();
    for round in 0..rounds {
        // Without first in even rounds: slab drift over time does not favour one side.
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        for with in order {
            crate::progress!(
                "bench: {sockets} idle sockets | {} bbrscope, round {}",
                if with { "with" } else { "without" },
                round + 1
            );
            runs.push(run_one(setup, sockets, with, round)?);
        }
    }
    let per_socket = |r: &SocketsRun| (r.slab_loaded as f64 - r.slab_before as f64) / r.sockets as f64;
    let without: Vec<f64> = runs.iter().filter(|r| !r.with_bbrscope).map(per_socket).collect();
    let added: Vec<f64> = (0..rounds)
        .filter_map(|round| {
            let of = |w: bool| runs.iter().find(|r| r.round == round && r.with_bbrscope == w).map(per_socket);
            Some(of(true)? - of(false)?)
        })
        .collect();
    let optmem: Vec<f64> = runs
        .iter()
        .filter(|r| r.with_bbrscope && r.ss_sockets > 0)
        .map(|r| r.optmem_bytes as f64 / r.ss_sockets as f64)
        .collect();
    let median = |v: &[f64]| super::Spread::of(v).map(|s| s.median);
    Ok(SocketsResult {
        sockets,
        slab_per_socket: median(&without),
        bbrscope_slab_per_socket: median(&added),
        optmem_per_socket: median(&optmem),
        runs,
    })
}

fn run_one(setup: &Setup, sockets: usize, with: bool, round: u32) -> Result<SocketsRun> {
    let traced = if with {
        Some(bbrscope_stream(setup, &["--observer", "sockops", "--stats-interval", "0"], Stdio::null())?)
    } else {
        None
    };
    let counters = |t: &super::scenarios::Traced| t.counters.as_ref().map(measure::Counters::read).transpose();
    let c0 = traced.as_ref().map(counters).transpose()?.flatten();
    let rss_before = traced.as_ref().map(|t| measure::memory(t.pid())).transpose()?.map(|m| m.rss);
    let cpu0 = traced.as_ref().map(|t| measure::cpu_time(t.pid())).transpose()?;
    let others0 = measure::others_cpu_time();
    let slab_before = slab_bytes()?;

    let t0 = Instant::now();
    let holders = Holders::start(sockets)?;
    let open_s = t0.elapsed().as_secs_f64();
    thread::sleep(SETTLE);
    let slab_loaded = slab_bytes()?;
    let dt = t0.elapsed().as_secs_f64();
    let (ss_sockets, optmem_bytes) = optmem()?;
    let others1 = measure::others_cpu_time();
    let c1 = traced.as_ref().map(counters).transpose()?.flatten();
    let cpu1 = traced.as_ref().map(|t| measure::cpu_time(t.pid())).transpose()?;
    let rss_loaded = traced.as_ref().map(|t| measure::memory(t.pid())).transpose()?.map(|m| m.rss);
    let map_bytes = traced.as_ref().map(|t| measure::map_memory(t.pid())).transpose()?;
    drop(holders);
    if let Some(t) = traced {
        t.stop_in_time()?;
    }
    // Let the reset sockets go before the next run measures its baseline.
    thread::sleep(Duration::from_secs(1));

    let d = |i: u32| c0.zip(c1).map(|(a, b)| b[i as usize] - a[i as usize]);
    Ok(SocketsRun {
        with_bbrscope: with,
        round,
        sockets: sockets.div_ceil(2) * 2,
        open_s,
        slab_before,
        slab_loaded,
        ss_sockets,
        optmem_bytes,
        tracked: d(counter::FLOWS_SEEN),
        storage_failed: d(counter::STORAGE_FAILED),
        drops: c1.map(|c| c[counter::RING_FULL as usize]),
        rss_before,
        rss_loaded,
        map_bytes,
        cpu_cores: cpu0.zip(cpu1).map(|(a, b)| b.saturating_sub(a).as_secs_f64() / dt),
        others_cpu_cores: others1.saturating_sub(others0).as_secs_f64() / dt,
    })
}

//! `bbrscope export` under many flows: how long a scrape of /metrics takes, the exporter's
//! resident memory and CPU, and how many series it serves, at 100 and at 10,000 concurrent idle
//! flows, with the flows open and again after they all closed. The series count must not depend
//! on the number of flows (docs/export.md, "Cardinality and memory").

use std::{
    fmt::Write as _,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::{Spread, idle, measure, report::Target, scenarios::Setup};

/// How often each idle flow sends (as in the scale part).
const TRICKLE_PERIOD: Duration = Duration::from_secs(2);
/// Scrapes timed per measurement.
const SCRAPES: usize = 20;
/// The exporter forgets a closed flow 5 s after its close and ticks every second; this is after.
const AFTER_CLOSE: Duration = Duration::from_secs(7);

/// The exporter at one number of flows.
#[derive(Debug, Serialize)]
pub(crate) struct ExportResult {
    pub flows: usize,
    /// While the flows are open: time for one GET /metrics (connect to last byte), ms.
    pub scrape_ms: Option<Spread>,
    pub body_bytes: usize,
    /// Sample lines in the body (one per series; histograms count each bucket, _sum and _count).
    pub series: usize,
    /// The same after every flow closed (completion-time, RTT and goodput histograms filled).
    pub series_after_close: usize,
    pub scrape_after_close_ms: Option<Spread>,
    pub rss_idle_bytes: u64,
    pub rss_open_bytes: u64,
    pub rss_after_close_bytes: u64,
    pub rss_peak_bytes: u64,
    /// The exporter's CPU while the flows are open and trickling (1.0 = one core).
    pub cpu_cores: f64,
    /// `bbrscope_flows_opened_total` summed: the flows the exporter counted.
    pub flows_counted: f64,
}

/// A running `bbrscope export`, stopped (SIGTERM, then killed) on drop.
struct Exporter {
    child: Child,
    addr: SocketAddr,
}

impl Exporter {
    fn start(setup: &Setup, port_filter: u16) -> Result<Exporter> {
        let addr: SocketAddr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let child = Command::new(setup.bbrscope)
            .args(["export", "--listen", &addr.to_string(), "--port", &port_filter.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting bbrscope export")?;
        let mut e = Exporter { child, addr };
        let start = Instant::now();
        while !scrape(addr).is_ok_and(|b| b.contains("bbrscope_observer_info")) {
            if let Some(status) = e.child.try_wait()? {
                bail!("bbrscope export exited: {status}");
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("bbrscope export never served /metrics");
            }
            thread::sleep(Duration::from_millis(100));
        }
        Ok(e)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, not yet reaped (wait() follows).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET /metrics over HTTP/1.0: the body.
pub(super) fn scrape(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (_, body) = resp.split_once("\r\n\r\n").context("no HTTP body")?;
    Ok(body.to_string())
}

/// [`SCRAPES`] timed scrapes: (ms each, the last body).
fn timed_scrapes(addr: SocketAddr) -> Result<(Option<Spread>, String)> {
    let mut ms = Vec::with_capacity(SCRAPES);
    let mut body = String::new();
    for _ in 0..SCRAPES {
        let t = Instant::now();
        body = scrape(addr)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        thread::sleep(Duration::from_millis(50));
    }
    Ok((Spread::of(&ms), body))
}

fn series(body: &str) -> usize {
    body.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count()
}

fn flows_counted(body: &str) -> f64 {
    counter_sum(body, "bbrscope_flows_opened_total")
}

/// A counter's value summed over its labels.
pub(super) fn counter_sum(body: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    body.lines().filter(|l| l.starts_with(&prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

pub(super) fn run(setup: &Setup, flows: usize) -> Result<ExportResult> {
    let peer = idle::Peer::start()?;
    // Only the benchmark's idle flows count (not the scrapes themselves).
    let exporter = Exporter::start(setup, peer.addr.port())?;
    let pid = exporter.child.id();
    let rss_idle = measure::memory(pid)?.rss;
    let idle_flows = idle::Flows::open(peer.addr, flows, TRICKLE_PERIOD)?;
    // Every flow has sent (and been sampled) before the measurement.
    thread::sleep(TRICKLE_PERIOD * 2);
    let (t0, cpu0) = (Instant::now(), measure::cpu_time(pid)?);
    let (scrape_ms, body) = timed_scrapes(exporter.addr)?;
    let cpu_cores = measure::cpu_time(pid)?.checked_sub(cpu0).unwrap().as_secs_f64() / t0.elapsed().as_secs_f64();
    let rss_open = measure::memory(pid)?.rss;
    drop(idle_flows);
    thread::sleep(AFTER_CLOSE);
    let (scrape_after_close_ms, closed) = timed_scrapes(exporter.addr)?;
    let mem = measure::memory(pid)?;
    drop(exporter);
    drop(peer);
    Ok(ExportResult {
        flows,
        scrape_ms,
        body_bytes: body.len(),
        series: series(&body),
        series_after_close: series(&closed),
        scrape_after_close_ms,
        rss_idle_bytes: rss_idle,
        rss_open_bytes: rss_open,
        rss_after_close_bytes: mem.rss,
        rss_peak_bytes: mem.peak,
        cpu_cores,
        flows_counted: flows_counted(&closed),
    })
}

/// Series independent of the number of flows: the same count at every level, open and closed.
pub(super) fn targets(r: &[ExportResult], out: &mut Vec<Target>) {
    if r.len() < 2 {
        return;
    }
    let counts: Vec<String> =
        r.iter().map(|x| format!("{} flows: {} / {}", x.flows, x.series, x.series_after_close)).collect();
    out.push(Target {
        target: "`export`: series count independent of the number of flows (open / after close)".into(),
        result: counts.join("; "),
        met: Some(r.iter().all(|x| x.series == r[0].series && x.series_after_close == r[0].series_after_close)),
    });
}

pub(super) fn section(r: &[ExportResult]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n### `bbrscope export` under many flows\n\n\
         An exporter counting only the benchmark's idle loopback flows (each sends 64 bytes every 2 s), \
         scraped {SCRAPES} times in a row (GET /metrics over a new connection each, connect to last byte) \
         with the flows open, and again after they all closed (which fills the completion-time, RTT and \
         goodput histograms). *Series*: sample lines in the body (each histogram bucket, `_sum` and \
         `_count` counts); *counted*: `bbrscope_flows_opened_total` at the end; *RSS*: the exporter's \
         resident memory before the flows, with them open, after they closed (peak in brackets); *CPU*: \
         the exporter's while scraped with the flows open.\n"
    );
    md.push_str("| flows | counted | scrape (open) | scrape (closed) | series open / closed | body | RSS idle / open / closed (peak) | CPU |\n");
    md.push_str("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    let ms = |s: Option<Spread>| s.map_or("-".into(), |s| format!("{:.2} ms ({:.2}–{:.2})", s.median, s.min, s.max));
    let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
    for x in r {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {} | {} | {} / {} | {:.1} KB | {} / {} / {} ({}) | {:.1}% |",
            x.flows,
            x.flows_counted,
            ms(x.scrape_ms),
            ms(x.scrape_after_close_ms),
            x.series,
            x.series_after_close,
            x.body_bytes as f64 / 1e3,
            mb(x.rss_idle_bytes),
            mb(x.rss_open_bytes),
            mb(x.rss_after_close_bytes),
            mb(x.rss_peak_bytes),
            x.cpu_cores * 100.0,
        );
    }
    md
}

//! bbrscope watching 10,000 concurrent, mostly idle flows plus a few busy ones: its resident
//! memory, the kernel's map memory before and under that load (the maps are sized by
//! configuration), and whether the dashboard keeps answering keys.

use std::{
    io::{BufRead as _, BufReader},
    process::{ChildStdout, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use bbrscope_common::counter;
use serde::Serialize;
use serde_json::Value;

use super::{
    Spread, idle,
    measure::{self, Memory},
    pty,
    scenarios::{Observer, Setup, bbrscope_stream, bbrscope_top},
    workload::{Bulk, Ends, PathKind},
};

/// How often each idle flow sends.
const TRICKLE_PERIOD: Duration = Duration::from_secs(2);
const BUSY_FLOWS: usize = 4;
/// Busy flows are paced: on loopback an unpaced flow takes all the CPU it can get, which is the
/// throughput test's job; here the question is what 10,000 flows cost.
const BUSY_BPS: u64 = 200_000_000;
/// A key answered later than this means the dashboard is not responsive.
pub(super) const RESPONSIVE: Duration = Duration::from_millis(250);
const KEY_PROBES: usize = 6;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Case {
    pub observer: Observer,
    /// `--max-flows` (None: bbrscope's default).
    pub max_flows: Option<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ScaleResult {
    pub case: Case,
    pub idle_flows: usize,
    pub busy_flows: usize,
    pub busy_flow_bps: u64,
    pub seconds: f64,
    /// Resident memory with no benchmark flows, at the end, and the peak.
    pub rss_idle_bytes: u64,
    pub rss_end_bytes: u64,
    pub rss_peak_bytes: u64,
    /// Resident memory growth over the second half of the run.
    pub rss_growth_bytes_per_min: f64,
    /// Memory the kernel locked for bbrscope's maps, before the flows and with them.
    pub map_bytes_idle: u64,
    pub map_bytes_loaded: u64,
    pub cpu_cores: f64,
    pub events_per_s: f64,
    pub records_per_s: f64,
    pub drops: u64,
    /// Flows the kernel programs started tracking (a flow evicted from a full table and seen
    /// again counts again) and could not track.
    pub flows_seen: u64,
    pub untracked: u64,
    /// Flows userspace knew at the end (`stream`'s stats, the dashboard's flow list).
    pub flows_active: Option<u64>,
    /// Dashboard only: time from a key to its effect on the screen.
    pub key_latency_ms: Option<Spread>,
    pub keys_unanswered: usize,
    /// Time to exit after SIGTERM; None: still running after 10 s (then killed).
    pub exit_after_sigterm_s: Option<f64>,
    /// CPU used by other people's processes meanwhile (1.0 = one core).
    pub others_cpu_cores: f64,
}

/// The latest `stats` record of a `bbrscope stream` whose output is piped here; other records
/// are skipped without parsing.
pub(super) struct StatsTap {
    latest: Arc<Mutex<Option<(Instant, Value)>>>,
}

impl StatsTap {
    pub(super) fn new(out: ChildStdout) -> StatsTap {
        let latest = Arc::new(Mutex::new(None));
        let sink = latest.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with(r#"{"type":"stats""#)
                    && let Ok(v) = serde_json::from_str::<Value>(&line)
                {
                    *sink.lock().unwrap() = Some((Instant::now(), v));
                }
            }
        });
        StatsTap { latest }
    }

    /// The first stats record that arrives after `after`, waiting up to `timeout`.
    pub(super) fn next_after(&self, after: Instant, timeout: Duration) -> Option<Value> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some((at, v)) = &*self.latest.lock().unwrap()
                && *at > after
            {
                return Some(v.clone());
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

pub(super) fn run(setup: &Setup, case: &Case, flows: usize, seconds: f64) -> Result<ScaleResult> {
    let max_flows = case.max_flows.map(|n| n.to_string());
    let mut args = Vec::new();
    if let Some(n) = &max_flows {
        args.extend(["--max-flows", n.as_str()]);
    }
    let (mut traced, tap) = match case.observer {
        Observer::Stream => {
            let mut t = bbrscope_stream(setup, &args, Stdio::piped())?;
            let tap = StatsTap::new(t.child.stdout.take().context("stream stdout")?);
            (t, Some(tap))
        }
        _ => (bbrscope_top(setup, &args)?, None),
    };
    let pid = traced.pid();
    let rss_idle = measure::memory(pid)?.rss;
    let map_bytes_idle = measure::map_memory(pid)?;

    let peer = idle::Peer::start()?;
    let idle_flows = idle::Flows::open(peer.addr, flows, TRICKLE_PERIOD)?;
    let busy = Bulk::start(BUSY_FLOWS, "cubic", Ends::of(PathKind::Loopback, None)?, Some(BUSY_BPS))?;
    // Every idle flow has sent at least twice (a flow's first ACK only starts its state).
    thread::sleep(TRICKLE_PERIOD * 2);

    let counters = traced.counters.take().context("bbrscope's counters")?;
    let (t0, cpu0, c0, others0) =
        (Instant::now(), measure::cpu_time(pid)?, counters.read()?, measure::others_cpu_time());
    let total = Duration::from_secs_f64(seconds);
    let mut latencies = Vec::new();
    let mut unanswered = 0;
    let mut mid: Option<(Instant, Memory)> = None;
    while t0.elapsed() < total {
        thread::sleep(Duration::from_millis(500));
        traced.check_alive()?;
        if mid.is_none() && t0.elapsed() >= total / 2 {
            mid = Some((Instant::now(), measure::memory(pid)?));
        }
        if traced.pty.is_some() && latencies.len() + unanswered < KEY_PROBES && t0.elapsed() >= total / 3 {
            match traced.key_latency(Duration::from_secs(2))? {
                Some(d) => latencies.push(d.as_secs_f64() * 1e3),
                None => unanswered += 1,
            }
        }
    }
    let (dt, cpu1, c1, others1) =
        (t0.elapsed().as_secs_f64(), measure::cpu_time(pid)?, counters.read()?, measure::others_cpu_time());
    let (end_at, end) = (Instant::now(), measure::memory(pid)?);
    let map_bytes_loaded = measure::map_memory(pid)?;
    let flows_active = match (&tap, &traced.pty) {
        (Some(tap), _) => {
            tap.next_after(Instant::now(), Duration::from_secs(3)).and_then(|v| v["flows_active"].as_u64())
        }
        // The title of the dashboard's flow list: "flows (N)".
        (None, Some(pty)) => pty::number_after(&pty::plain(&pty.redraw()?), "flows ("),
        (None, None) => None,
    };
    let growth =
        mid.map_or(0.0, |(at, m)| (end.rss as f64 - m.rss as f64) / (end_at - at).as_secs_f64().max(1e-3) * 60.0);

    let exit = traced.stop()?;
    busy.stop();
    drop(idle_flows);
    drop(peer);

    let delta = |i: u32| (c1[i as usize] - c0[i as usize]) as f64 / dt;
    Ok(ScaleResult {
        case: case.clone(),
        idle_flows: flows,
        busy_flows: BUSY_FLOWS,
        busy_flow_bps: BUSY_BPS,
        seconds: dt,
        rss_idle_bytes: rss_idle,
        rss_end_bytes: end.rss,
        rss_peak_bytes: end.peak,
        rss_growth_bytes_per_min: growth,
        map_bytes_idle,
        map_bytes_loaded,
        cpu_cores: cpu1.checked_sub(cpu0).unwrap().as_secs_f64() / dt,
        events_per_s: delta(counter::PROBE_EVENTS),
        records_per_s: (measure::records(&c1) - measure::records(&c0)) as f64 / dt,
        drops: c1[counter::RING_FULL as usize],
        flows_seen: c1[counter::FLOWS_SEEN as usize],
        untracked: c1[counter::STATE_FULL as usize],
        flows_active,
        key_latency_ms: Spread::of(&latencies),
        keys_unanswered: unanswered,
        exit_after_sigterm_s: exit.map(|d| d.as_secs_f64()),
        others_cpu_cores: others1.saturating_sub(others0).as_secs_f64() / dt,
    })
}

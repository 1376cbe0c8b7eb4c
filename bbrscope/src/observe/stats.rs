//! bbrscope's own cost and health, from the kernel counters and this process's CPU time. The
//! same numbers feed `stream`'s `stats` records, the dashboard footer and the benchmark.

use std::time::{Duration, Instant};

use bbrscope_common::counter;
use serde::{Deserialize, Serialize};

use crate::observe::kernel::loader::Counters;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StatsReport {
    /// The kernel path observing flows: "sockops" or "tracepoint".
    #[serde(default)]
    pub(crate) observer: String,
    /// The clock that paces samples: "jiffies" (the sock_ops path where the kernel allows it),
    /// "coarse" or "monotonic" (its fallbacks; the tracepoint path's).
    #[serde(default)]
    pub(crate) sample_clock: String,
    /// The kernel's BBR, from its BTF layout: "v1" (mainline), "v2", "v3"; null when BBR is not
    /// loaded or its layout is unknown.
    #[serde(default)]
    pub(crate) bbr_version: Option<String>,
    pub(crate) interval_s: f64,
    /// Per-ACK program runs per second: tcp_probe (incoming segments on all TCP sockets) or the
    /// sock_ops program (all its callbacks).
    pub(crate) events_per_s: f64,
    /// Records delivered to userspace per second.
    pub(crate) records_per_s: f64,
    /// Records lost to a full ring buffer, per second in this interval and in total.
    pub(crate) drops_per_s: f64,
    pub(crate) drops_total: u64,
    /// Retransmit events folded into samples by the per-interval cap, in total.
    pub(crate) retrans_coalesced_total: u64,
    /// Congestion-state events folded into samples by the same cap, in total.
    #[serde(default)] // absent from recordings made before it existed
    pub(crate) cong_coalesced_total: u64,
    /// Flows the kernel could not track (flow table full), in total.
    pub(crate) untracked_total: u64,
    /// Flows the kernel's table (`--max-flows`) must have evicted to make room, in total: flows
    /// started minus flows closed beyond the table's capacity. Non-zero means flows are missing.
    #[serde(default)]
    pub(crate) evicted_total: u64,
    pub(crate) flows_seen_total: u64,
    pub(crate) flows_filtered_total: u64,
    /// sock_ops path: flows opened (an OPEN record, or the owner inside the close record of a flow
    /// that closed before its first sample) and summarised (flow_summary), in total.
    #[serde(default)]
    pub(crate) flows_opened_total: u64,
    #[serde(default)]
    pub(crate) flows_summarized_total: u64,
    /// sock_ops path: flows that closed without sending data, so without any record.
    #[serde(default)]
    pub(crate) flows_quiet_total: u64,
    /// Flows this stream showed (a `flow_open`, or a `flow_summary` alone): the selection, after
    /// every filter. The counts above come from the kernel programs, which see every flow that
    /// passes the kernel's filters (`--port`, `--addr`, `--cc`, `--cgroup`) — host-wide, before
    /// `--comm`, `--pid` and `--netns`, which apply in userspace. Null in older recordings.
    #[serde(default)]
    pub(crate) flows_shown_total: Option<u64>,
    /// sock_ops path: events dropped by userspace because too many flows were waiting for their
    /// first sample or OPEN (caps in docs/stream.md), in total.
    #[serde(default)]
    pub(crate) held_dropped_total: u64,
    /// Flows userspace currently knows.
    pub(crate) flows_active: usize,
    /// This process's CPU time per second of wall time (1.0 = one core).
    pub(crate) cpu_cores: f64,
    /// Mean tcp_probe program run time, when kernel BPF statistics are enabled.
    pub(crate) ns_per_event: Option<f64>,
}

#[derive(Clone, Copy)]
struct Snapshot {
    at: Instant,
    counters: Counters,
    records: u64,
    cpu: Duration,
    probe_runtime: Option<(Duration, u64)>,
}

pub(crate) struct StatsTracker {
    prev: Snapshot,
    max_flows: u64,
    path: &'static str,
    clock: &'static str,
    bbr_version: Option<&'static str>,
}

/// User + system CPU time of this process, all threads (CLOCK_PROCESS_CPUTIME_ID: what
/// getrusage(RUSAGE_SELF) sums, at nanosecond resolution).
pub(crate) fn process_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

impl StatsTracker {
    pub(crate) fn new(
        counters: Counters,
        records: u64,
        probe_runtime: Option<(Duration, u64)>,
        max_flows: u32,
        path: &'static str,
        clock: &'static str,
        bbr_version: Option<&'static str>,
    ) -> Self {
        StatsTracker {
            prev: Snapshot { at: Instant::now(), counters, records, cpu: process_cpu_time(), probe_runtime },
            max_flows: u64::from(max_flows),
            path,
            clock,
            bbr_version,
        }
    }

    /// The report for the time since the previous call.
    pub(crate) fn report(
        &mut self,
        counters: Counters,
        records: u64,
        probe_runtime: Option<(Duration, u64)>,
        flows_active: usize,
    ) -> StatsReport {
        let now = Snapshot { at: Instant::now(), counters, records, cpu: process_cpu_time(), probe_runtime };
        let dt = now.at.duration_since(self.prev.at).as_secs_f64().max(1e-9);
        let delta = |i: u32| now.counters.get(i).saturating_sub(self.prev.counters.get(i)) as f64;
        let ns_per_event = match (now.probe_runtime, self.prev.probe_runtime) {
            (Some((t1, n1)), Some((t0, n0))) if n1 > n0 => {
                Some((t1.saturating_sub(t0)).as_nanos() as f64 / (n1 - n0) as f64)
            }
            _ => None,
        };
        let report = StatsReport {
            observer: self.path.to_string(),
            sample_clock: self.clock.to_string(),
            bbr_version: self.bbr_version.map(str::to_string),
            flows_shown_total: None,
            interval_s: dt,
            events_per_s: delta(counter::PROBE_EVENTS) / dt,
            records_per_s: now.records.saturating_sub(self.prev.records) as f64 / dt,
            drops_per_s: delta(counter::RING_FULL) / dt,
            drops_total: now.counters.get(counter::RING_FULL),
            retrans_coalesced_total: now.counters.get(counter::RETRANS_COALESCED),
            cong_coalesced_total: now.counters.get(counter::CONG_COALESCED),
            untracked_total: now.counters.get(counter::STATE_FULL) + now.counters.get(counter::STORAGE_FAILED),
            // The sock_ops path keeps flows in their sockets: nothing to evict.
            evicted_total: if self.path == "sockops" {
                0
            } else {
                let c = &now.counters;
                let held = c
                    .get(counter::FLOWS_SEEN)
                    .saturating_sub(c.get(counter::STATE_FULL) + c.get(counter::FLOWS_FORGOTTEN));
                held.saturating_sub(self.max_flows)
            },
            flows_seen_total: now.counters.get(counter::FLOWS_SEEN),
            flows_filtered_total: now.counters.get(counter::FLOWS_FILTERED),
            flows_opened_total: now.counters.get(counter::OPENS),
            flows_summarized_total: now.counters.get(counter::ENDS),
            flows_quiet_total: now.counters.get(counter::FLOWS_QUIET),
            // Set by the session, which holds them.
            held_dropped_total: 0,
            flows_active,
            cpu_cores: now.cpu.saturating_sub(self.prev.cpu).as_secs_f64() / dt,
            ns_per_event,
        };
        self.prev = now;
        report
    }
}

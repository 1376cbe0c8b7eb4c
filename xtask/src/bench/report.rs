//! The benchmark's results as a markdown report (tables for people, pasted into the README) and
//! JSON (everything, every run), plus the targets checked against them.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

use anyhow::Result;
use serde::Serialize;

use super::{
    Results, Spread,
    scale::{RESPONSIVE, ScaleResult},
    scenarios::Observer,
    throughput::{DISTURBED_CORES, RETRIES, SETTLE, Summary, WorkloadResult},
    workload::PathKind,
};

/// One of the targets and how this run did against it (`met: None`: not measured).
#[derive(Debug, Serialize)]
pub struct Target {
    pub target: String,
    pub result: String,
    pub met: Option<bool>,
}

const RSS_LIMIT: u64 = 100 << 20;
const MIN_RATIO: f64 = 0.97;

pub fn targets(r: &Results) -> Vec<Target> {
    let mut out = Vec::new();
    let single_loopback = r.workloads.iter().filter(|w| w.workload.path == PathKind::Loopback && w.workload.flows == 1);
    for w in single_loopback {
        let ratio = |o| w.summary(o).and_then(|s| s.ratio).map(|s| s.median);
        let stream = ratio(Observer::Stream);
        let share = w.summary(Observer::Stream).and_then(|s| s.busy_share).map(|s| s.median);
        out.push(Target {
            target: format!("{}: `stream` keeps ≥ 97% of baseline throughput", w.label),
            result: match (w.summary(Observer::Stream).and_then(|s| s.ratio), share) {
                (Some(r), Some(share)) => {
                    let control = w.summary(Observer::Control).and_then(|s| s.ratio);
                    format!(
                        "{}; A/A control {}; CPU share {} (≈ {} when CPU-bound)",
                        spread(Some(r), pct),
                        spread(control, pct),
                        pct(share),
                        pct(1.0 - share)
                    )
                }
                _ => "not measured".into(),
            },
            met: stream.map(|s| s >= MIN_RATIO),
        });
        out.push(Target {
            target: format!("{}: `stream` costs less throughput than bpftrace", w.label),
            result: match (stream, ratio(Observer::Bpftrace)) {
                (Some(s), Some(b)) => {
                    let share = |o| w.summary(o).and_then(|s| s.busy_share).map_or("–".into(), |s| pct(s.median));
                    format!(
                        "stream {}, bpftrace {}; CPU share {} vs {}",
                        pct(s),
                        pct(b),
                        share(Observer::Stream),
                        share(Observer::Bpftrace)
                    )
                }
                _ => "bpftrace not measured".into(),
            },
            met: stream.zip(ratio(Observer::Bpftrace)).map(|(s, b)| s > b),
        });
    }
    let busy: Vec<&WorkloadResult> = r.workloads.iter().filter(|w| w.workload.flows >= super::drops::FLOWS).collect();
    if !busy.is_empty() {
        let (mut drops, mut slots) = (0, 0);
        for w in &busy {
            for pair in w.pairs.iter().filter(|x| matches!(x.observer, Observer::Stream | Observer::Dashboard)) {
                drops += pair.costs.drops.unwrap_or(0);
                slots += 1;
            }
        }
        out.push(Target {
            target: format!("No drops at default settings with {} busy flows", super::drops::FLOWS),
            result: format!("{drops} drops in {slots} slots of `stream` and `top`"),
            met: Some(drops == 0),
        });
    }
    for d in &r.forced_drops {
        out.push(Target {
            target: format!("Forced drops ({}) are counted and reported by {}", d.args, d.observer.label()),
            result: format!(
                "kernel counted {}, {} reported {}",
                d.kernel_drops,
                if d.observer == Observer::Stream { "`stats`" } else { "footer" },
                d.reported_drops.map_or("nothing".into(), |n| n.to_string())
            ),
            met: Some(d.reported_exactly()),
        });
    }
    if !r.scale.is_empty() {
        for sc in &r.scale {
            let (met, result) = rss_verdict(sc);
            out.push(Target {
                target: format!(
                    "{} flows, {} (--max-flows {}): userspace under 100 MB resident",
                    r.plan.scale_flows,
                    sc.case.observer.label(),
                    max_flows(sc)
                ),
                result,
                met: Some(met),
            });
        }
        let fixed = r.scale.iter().all(|s| s.map_bytes_idle == s.map_bytes_loaded);
        out.push(Target {
            target: "Kernel memory bounded by configuration, not traffic".into(),
            result: r
                .scale
                .iter()
                .map(|s| format!("{}: {} → {}", max_flows(s), mb(s.map_bytes_idle), mb(s.map_bytes_loaded)))
                .collect::<Vec<_>>()
                .join("; "),
            met: Some(fixed),
        });
        for s in r.scale.iter().filter(|s| s.case.observer == Observer::Dashboard) {
            out.push(Target {
                target: format!(
                    "{} flows: the dashboard stays responsive (keys answered < {} ms)",
                    r.plan.scale_flows,
                    RESPONSIVE.as_millis()
                ),
                result: latency(s),
                met: Some(
                    s.keys_unanswered == 0 && s.key_latency_ms.is_some_and(|l| l.max < RESPONSIVE.as_secs_f64() * 1e3),
                ),
            });
        }
    }
    out
}

/// Growth slower than this is allocator noise, not memory that follows traffic.
const FLAT_BYTES_PER_MIN: f64 = (1 << 20) as f64;

/// Under 100 MB at its peak, and still under it after an hour at the growth rate measured.
fn rss_verdict(s: &ScaleResult) -> (bool, String) {
    let growth = s.rss_growth_bytes_per_min;
    let mut result = format!("peak {}", mb(s.rss_peak_bytes));
    let mut met = s.rss_peak_bytes < RSS_LIMIT;
    if growth > FLAT_BYTES_PER_MIN {
        let _ = write!(result, ", growing {:.1} MB/min", growth / (1 << 20) as f64);
        if s.rss_end_bytes < RSS_LIMIT {
            let minutes = (RSS_LIMIT - s.rss_end_bytes) as f64 / growth;
            let _ = write!(result, ": 100 MB after about {minutes:.0} more min");
            met &= minutes > 60.0;
        }
    } else {
        result.push_str(", flat");
    }
    (met, result)
}

/// CPU used by other people's processes while the benchmark measured.
fn others(r: &Results) -> Option<Spread> {
    let pairs = r.workloads.iter().flat_map(|w| &w.pairs).map(|x| x.others_cpu_cores);
    Spread::of(&pairs.chain(r.scale.iter().map(|s| s.others_cpu_cores)).collect::<Vec<_>>())
}

fn pct(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / (1 << 20) as f64)
}

fn bps(v: f64) -> String {
    if v >= 1e9 { format!("{:.2} Gbit/s", v / 1e9) } else { format!("{:.0} Mbit/s", v / 1e6) }
}

fn count(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.2}M", v / 1e6),
        v if v >= 1e4 => format!("{:.0}k", v / 1e3),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

fn spread(s: Option<Spread>, f: impl Fn(f64) -> String) -> String {
    match s {
        Some(s) if s.min != s.max => format!("{} ({}–{})", f(s.median), f(s.min), f(s.max)),
        Some(s) => f(s.median),
        None => "–".into(),
    }
}

fn median(s: Option<Spread>, f: impl Fn(f64) -> String) -> String {
    s.map_or("–".into(), |s| f(s.median))
}

fn cores(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn max_flows(s: &ScaleResult) -> String {
    s.case.max_flows.map_or("default".into(), |n| n.to_string())
}

fn latency(s: &ScaleResult) -> String {
    let answered = spread(s.key_latency_ms, |v| format!("{v:.0} ms"));
    if s.keys_unanswered > 0 { format!("{answered}, {} unanswered", s.keys_unanswered) } else { answered }
}

/// A markdown table's heading and separator rows.
fn table_head(columns: &[&str]) -> String {
    format!("| {} |\n|{}\n", columns.join(" | "), "---|".repeat(columns.len()))
}

/// A markdown table row.
fn table_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

fn summary_row(label: &str, s: &Summary) -> String {
    table_row(&[
        label.to_string(),
        s.observer.label().to_string(),
        median(Some(s.throughput_bps), bps),
        if s.observer == Observer::Baseline { "100%".into() } else { spread(s.ratio, pct) },
        spread(s.busy_share, pct),
        median(s.cpu_cores, cores),
        median(s.bpf_cores, cores),
        median(s.events_per_s, count),
        median(s.records_per_s, count),
        s.drops.map_or("–".into(), |d| d.to_string()),
        spread(s.ns_per_event, |v| format!("{v:.0}")),
    ])
}

fn scale_row(s: &ScaleResult) -> String {
    table_row(&[
        s.case.observer.label().to_string(),
        max_flows(s),
        s.flows_seen.to_string(),
        s.untracked.to_string(),
        s.flows_active.map_or("–".into(), |n| n.to_string()),
        format!("{} → {} ({})", mb(s.rss_idle_bytes), mb(s.rss_end_bytes), mb(s.rss_peak_bytes)),
        format!("{:.1} MB/min", s.rss_growth_bytes_per_min / (1 << 20) as f64),
        format!("{} → {}", mb(s.map_bytes_idle), mb(s.map_bytes_loaded)),
        cores(s.cpu_cores),
        count(s.events_per_s),
        count(s.records_per_s),
        s.drops.to_string(),
        if s.case.observer == Observer::Dashboard { latency(s) } else { "–".into() },
        s.exit_after_sigterm_s.map_or("**not within 10 s**".into(), |t| format!("{:.0} ms", t * 1e3)),
        cores(s.others_cpu_cores),
    ])
}

pub fn markdown(r: &Results) -> String {
    let m = &r.machine;
    let p = &r.plan;
    let mut md = String::new();
    let _ = writeln!(md, "## bbrscope cost benchmark\n");
    let _ = writeln!(
        md,
        "{}{}, Linux {}, {} ({} cores{}), {:.0} GiB RAM; bbrscope {} ({}); {}. The run took {:.1} min; \
         other people's processes used {} of a core meanwhile (median over measurements, min–max in brackets).\n",
        m.date_utc,
        if p.quick { " (`--quick`)" } else { "" },
        m.kernel,
        m.cpu_model,
        m.cores,
        if m.virtual_machine { ", virtual machine" } else { "" },
        m.memory_gib,
        m.commit,
        m.bbrscope,
        m.bpftrace.as_deref().unwrap_or("bpftrace not installed"),
        r.duration_s / 60.0,
        spread(others(r), cores),
    );
    let _ = writeln!(
        md,
        "Each workload's flows run throughout while each observer is attached and detached in turn \
         ({} rounds, slots of {} s, the flows warmed up {} s first): a round measures a slot with nothing \
         attached, then for each observer a slot with it (attached to the running flows, given {} ms to \
         settle) and one without, a different observer first in each round. *vs baseline* is the \
         throughput with the observer over the mean of the slots either side: medians over rounds, \
         min–max in brackets (every slot is in latest.json). The *A/A control* is measured the same way \
         with nothing attached: its spread is the noise of the method on this machine. Throughput is \
         what the receivers read; each flow's sender and receiver are pinned to CPUs of their own. \
         *Observer CPU* is the observer process's CPU time (for `ss`, all its runs); \
         *BPF time* is the time in the observer's tcp_probe program, paid by the CPUs moving the traffic \
         (kernel BPF run-time statistics, on for the whole benchmark, which adds two clock reads per \
         program run). Both are in % of one core. *CPU share*: the two together as a share of all the \
         CPU time the machine was busy in that slot; when the traffic is CPU-bound, as here, that is about \
         the throughput the observer costs, and it is measured within one slot, so it is much steadier \
         than *vs baseline*. *events/s*: tcp_probe runs (incoming segments on all \
         sockets); *records/s*: records bbrscope's programs wrote to its ring buffer; *drops*: records \
         lost to a full ring, over all slots; *ns/event*: BPF time per tcp_probe run (for bpftrace's \
         classic tracepoint this leaves out the kernel filling in the trace record).\n",
        p.repeats,
        p.seconds,
        p.warmup_s,
        SETTLE.as_millis()
    );
    md.push_str(&table_head(&[
        "workload",
        "observer",
        "throughput",
        "vs baseline",
        "CPU share",
        "observer CPU",
        "BPF time",
        "events/s",
        "records/s",
        "drops",
        "ns/event",
    ]));
    for w in &r.workloads {
        for (i, s) in w.summaries.iter().enumerate() {
            md.push_str(&summary_row(if i == 0 { &w.label } else { "" }, s));
        }
    }

    md.push_str("\n### Targets\n\n");
    md.push_str(&table_head(&["target", "this run", "met"]));
    for t in &r.targets {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        md.push_str(&table_row(&[t.target.clone(), t.result.clone(), met.to_string()]));
    }

    if !r.scale.is_empty() {
        let _ = writeln!(
            md,
            "\n### {} concurrent flows\n\n{} mostly idle loopback flows (each sends 64 bytes every 2 s) and {} busy \
             ones (paced at {} each), held {:.0} s; both ends of every flow are on this machine. *Flows seen*: \
             flows the kernel programs started tracking (a flow evicted from a full table and seen again counts \
             again); *untracked*: flows the kernel could not store (bbrscope's `untracked_total`); *known*: \
             flows userspace knew at the end (`stream`'s last `stats` record, the title of the dashboard's flow \
             list). *Growth*: resident memory growth over the second half of the run. \
             *Key latency*: from sending `?` to the dashboard's help on the terminal. *Exit on SIGTERM*: how \
             long the observer took to exit when asked. *Others' CPU*: other people's processes meanwhile.\n",
            p.scale_flows,
            p.scale_flows,
            r.scale[0].busy_flows,
            bps(r.scale[0].busy_flow_bps as f64),
            p.scale_seconds
        );
        md.push_str(&table_head(&[
            "observer",
            "--max-flows",
            "flows seen",
            "untracked",
            "known",
            "RSS idle → end (peak)",
            "growth",
            "kernel maps idle → loaded",
            "CPU",
            "events/s",
            "records/s",
            "drops",
            "key latency",
            "exit on SIGTERM",
            "others' CPU",
        ]));
        for s in &r.scale {
            md.push_str(&scale_row(s));
        }
    }

    if !r.forced_drops.is_empty() {
        md.push_str("\n### Forced drops\n\n");
        md.push_str(&table_head(&["observer", "settings", "kernel counted", "reported"]));
        for d in &r.forced_drops {
            md.push_str(&table_row(&[
                d.observer.label().to_string(),
                format!("`{}`, {} busy flows, {} s", d.args, d.flows, d.seconds),
                d.kernel_drops.to_string(),
                d.reported_drops.map_or("nothing".into(), |n| n.to_string()),
            ]));
        }
    }

    let pairs: Vec<_> = r.workloads.iter().flat_map(|w| &w.pairs).collect();
    let foreign = pairs.iter().filter(|x| x.foreign_probes > 0).count();
    let mut notes = r.notes.clone();
    if foreign > 0 {
        notes.push(format!(
            "Other tcp_probe programs (other users of this machine) were loaded during {foreign} of {} pairs; \
             they slow both slots of a pair alike, but add noise.",
            pairs.len()
        ));
    }
    let repeated = pairs.iter().filter(|x| x.attempts > 1).count();
    if repeated > 0 {
        notes.push(format!(
            "{repeated} of {} pairs were measured again because other processes used more than {} of a core \
             meanwhile (at most {} times; the last attempt counts).",
            pairs.len(),
            cores(DISTURBED_CORES),
            RETRIES
        ));
    }
    if let Some(o) = others(r).filter(|o| o.max > DISTURBED_CORES) {
        notes.push(format!(
            "The machine was not quiet: other people's processes (builds, tests) used up to {} of a core \
             while the benchmark measured. Expect noise; rerun `cargo xtask bench` on a quiet machine for \
             stable numbers.",
            cores(o.max)
        ));
    }
    for s in r.scale.iter().filter(|s| s.flows_seen > 2 * (s.idle_flows + s.busy_flows) as u64) {
        notes.push(format!(
            "With --max-flows {} the flow table was too small for {} sending flows: the kernel programs started \
             tracking flows {} times (evicting others) and userspace knew {} flows at the end (`untracked_total` \
             {}); bbrscope reports such evictions as `evicted_total` in `stats` and in the dashboard footer.",
            max_flows(s),
            s.idle_flows + s.busy_flows,
            s.flows_seen,
            s.flows_active.map_or("?".into(), |n| n.to_string()),
            s.untracked
        ));
    }
    if !notes.is_empty() {
        md.push_str("\n### Notes\n\n");
        for n in notes {
            let _ = writeln!(md, "- {n}");
        }
    }
    md
}

/// Writes latest.md and latest.json into `dir`.
pub fn write(r: &Results, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    fs::create_dir_all(dir)?;
    let (md, json) = (dir.join("latest.md"), dir.join("latest.json"));
    fs::write(&md, markdown(r))?;
    fs::write(&json, serde_json::to_string_pretty(r)? + "\n")?;
    Ok((md, json))
}

//! The exporter's metrics: low-cardinality aggregates of every flow by congestion-control
//! algorithm, fed from the same events `stream` prints, and bbrscope's own cost.
//!
//! Memory and series are bounded whatever the number of flows: nothing here is per flow. Byte
//! and segment counters advance with each sample (so long-lived flows count as they go); what
//! needs a whole flow (completion time, RTT, goodput, time per congestion state) is observed once,
//! when the flow ends. The per-flow state this needs is the [`FlowTable`]'s, which the observer's
//! loop prunes as for `stream`.

use std::{
    collections::{HashMap, HashSet},
    hash::BuildHasherDefault,
    io,
    sync::Arc,
};

use prometheus_client::{
    encoding::{EncodeLabel, EncodeLabelSet, EncodeMetric, LabelSetEncoder, MetricEncoder},
    metrics::{
        MetricType,
        counter::Counter,
        family::{Family, MetricConstructor},
        gauge::Gauge,
        histogram::Histogram,
    },
    registry::{Metric, Registry, Unit},
};

use crate::{
    observe::event::{Event, Metrics},
    observe::flow::{Change, Flow, FlowTable, IdHasher, IdSet},
    observe::pipeline::{NoSide, Sink},
    observe::stats::StatsReport,
    scrape::{FloatCounter, FloatGauge},
    sys::sysctl,
    sys::{cgroup::CgroupNames, netns},
};

/// Distinct `cc` label values kept; further algorithms are counted as `other`. The kernel has a
/// handful of algorithms, so this only guards against a pathological kernel or decoder bug.
pub(crate) const MAX_CC_LABELS: usize = 16;
/// Distinct `cgroup` and `netns` label values kept (each), with `--by-cgroup` / `--by-netns`:
/// the first ones seen; flows of later ones count under `other`.
pub(crate) const MAX_SCOPE_LABELS: usize = 32;

/// Which opt-in labels the flow metrics carry.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ScopeOptions {
    pub(crate) cgroup: bool,
    pub(crate) netns: bool,
}

/// A label whose values are capped: the first `max` distinct values are kept as they are, the
/// rest become `other`. First come, first kept (not top-N by traffic): a series' counters must
/// only grow, so a value cannot move between its own series and `other` as rankings change.
#[derive(Debug)]
struct CappedLabel {
    seen: HashSet<String>,
    max: usize,
}

impl CappedLabel {
    fn new(max: usize) -> Self {
        CappedLabel { seen: HashSet::new(), max }
    }

    fn get(&mut self, value: &str) -> String {
        if !self.seen.contains(value) {
            if self.seen.len() >= self.max {
                return "other".into();
            }
            self.seen.insert(value.to_string());
        }
        value.to_string()
    }
}

/// Network namespaces `bbrscope_default_cc_info` reports: the exporter's own, then named ones
/// (/run/netns) in name order up to this many in all. A hard cap rather than an `other` bucket:
/// a default algorithm cannot be summed, and hosts with more named namespaces than this are
/// container hosts whose namespaces come and go (their flows are still counted by `cc`).
pub(crate) const MAX_NETNS_LABELS: usize = 32;

/// Response-size buckets of the completion-time histogram: (label, upper bound in bytes).
pub(crate) const SIZE_BUCKETS: [(&str, u64); 4] =
    [("lt16k", 16 << 10), ("16k-256k", 256 << 10), ("256k-4m", 4 << 20), ("ge4m", u64::MAX)];

/// The congestion states, in `Life::ca_ns` order.
const CA_STATES: [&str; 5] = ["open", "disorder", "cwr", "recovery", "loss"];

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CcLabels {
    pub(crate) cc: String,
    #[prometheus(flatten)]
    pub(crate) scope: ScopeLabels,
}

/// The opt-in `cgroup` and `netns` labels of the flow metrics: absent (not even empty) unless
/// `--by-cgroup` / `--by-netns` asked for them.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub(crate) struct ScopeLabels {
    pub(crate) cgroup: Option<String>,
    pub(crate) netns: Option<String>,
}

impl EncodeLabelSet for ScopeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        for (key, value) in [("cgroup", &self.cgroup), ("netns", &self.netns)] {
            if let Some(value) = value {
                EncodeLabel::encode(&(key, value.as_str()), encoder.encode_label())?;
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CcStateLabels {
    #[prometheus(flatten)]
    pub(crate) cc: CcLabels,
    pub(crate) state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CcModeLabels {
    #[prometheus(flatten)]
    pub(crate) cc: CcLabels,
    pub(crate) mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CcSizeLabels {
    #[prometheus(flatten)]
    pub(crate) cc: CcLabels,
    pub(crate) size_bucket: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NetnsCcLabels {
    pub(crate) netns: String,
    pub(crate) cc: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ObserverLabels {
    pub(crate) observer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BuildLabels {
    pub(crate) version: String,
    pub(crate) commit: String,
}

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Flow completion time: 1 ms to 10 minutes.
fn completion_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    ])
}

/// Smoothed RTT: 50 µs (loopback) to 4 s (a full queue on a long path).
fn srtt_histogram() -> Histogram {
    Histogram::new([
        0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0,
        4.0,
    ])
}

/// srtt / min RTT: 1.0 is no queueing; bufferbloat reaches 10x and more.
fn inflation_histogram() -> Histogram {
    Histogram::new([1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])
}

/// Goodput in bytes per second (Prometheus's base unit): 125 B/s (1 kbit/s) to 12.5 GB/s
/// (100 Gbit/s), a factor of ~3 per bucket.
fn goodput_histogram() -> Histogram {
    Histogram::new([1e3, 1e4, 3e4, 1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8, 3e8, 1e9, 3e9, 1e10, 3e10, 1e11].map(|b| b / 8.0))
}

/// Any metric, so that the families can be registered from one table (the registry takes each
/// metric by value, of its own type).
#[derive(Debug)]
struct Boxed(Box<dyn Metric>);

impl EncodeMetric for Boxed {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A family to register: name, help, unit (None: the name carries it), the metric.
type FamilyRow = (&'static str, &'static str, Option<Unit>, Box<dyn Metric>);

/// A flow's counters as of its latest sample, the base the next sample's deltas count from.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    bytes_acked: Option<u64>,
    bytes_sent: Option<u64>,
    bytes_retrans: Option<u64>,
    retrans_segs: Option<u64>,
    data_segs_out: Option<u64>,
}

impl Counts {
    fn of(m: &Metrics) -> Self {
        Counts {
            bytes_acked: m.bytes_acked,
            bytes_sent: m.bytes_sent,
            bytes_retrans: m.bytes_retrans,
            retrans_segs: m.retrans_total.map(u64::from),
            data_segs_out: m.data_segs_out.map(u64::from),
        }
    }

    /// A flow seen from its start (sock_ops path): every counter starts at zero.
    const ZERO: Counts = Counts {
        bytes_acked: Some(0),
        bytes_sent: Some(0),
        bytes_retrans: Some(0),
        retrans_segs: Some(0),
        data_segs_out: Some(0),
    };
}

/// What the exporter needs of a flow from before an event is applied to the table.
struct Before {
    counts: Option<Counts>,
    sample_ns: u64,
    bbr_mode: Option<Arc<str>>,
}

/// The per-flow metric families (labelled by [`CcLabels`], and a state, mode or size bucket).
struct FlowFamilies {
    flows_opened: Family<CcLabels, Counter>,
    flows_closed: Family<CcLabels, Counter>,
    bytes_acked: Family<CcLabels, Counter>,
    bytes_sent: Family<CcLabels, Counter>,
    data_segments_sent: Family<CcLabels, Counter>,
    retrans_segments: Family<CcLabels, Counter>,
    retrans_bytes: Family<CcLabels, Counter>,
    ca_state_seconds: Family<CcStateLabels, FloatCounter>,
    bbr_mode_seconds: Family<CcModeLabels, FloatCounter>,
    completion: HistFamily<CcSizeLabels>,
    srtt: HistFamily<CcLabels>,
    inflation: HistFamily<CcLabels>,
    goodput: HistFamily<CcLabels>,
}

pub(crate) struct ExportMetrics {
    flows: FlowFamilies,
    default_cc: Family<NetnsCcLabels, Gauge>,
    /// The label sets `default_cc` holds now.
    default_cc_now: Vec<NetnsCcLabels>,
    observer: Family<ObserverLabels, Gauge>,
    events: FloatCounter,
    records: FloatCounter,
    drops: Counter,
    untracked: Counter,
    evicted: Counter,
    filtered: Counter,
    coalesced: Counter,
    flows_active: Gauge,
    cpu_seconds: FloatCounter,
    event_cost: FloatGauge,
    resident: Gauge,
    /// Kernel totals as of the previous stats report, for the counters' increments.
    last_totals: [u64; 5],
    last_cpu: std::time::Duration,
    labels: FlowLabels,
    /// Flows whose end has been counted: a flow can close twice over (its final sample, then its
    /// summary); it is counted at the first that is final. Pruned with the flow table.
    ended: IdSet,
    /// The flow of the event being applied, as it was before ([`Sink::before`]).
    before: Option<Before>,
}

impl ExportMetrics {
    /// Registers every metric in `registry`; the flow metrics carry the labels `scopes` asks for.
    pub(crate) fn new(registry: &mut Registry, scopes: ScopeOptions) -> Self {
        let flows = FlowFamilies {
            flows_opened: Family::default(),
            flows_closed: Family::default(),
            bytes_acked: Family::default(),
            bytes_sent: Family::default(),
            data_segments_sent: Family::default(),
            retrans_segments: Family::default(),
            retrans_bytes: Family::default(),
            ca_state_seconds: Family::default(),
            bbr_mode_seconds: Family::default(),
            completion: Family::new_with_constructor(completion_histogram),
            srtt: Family::new_with_constructor(srtt_histogram),
            inflation: Family::new_with_constructor(inflation_histogram),
            goodput: Family::new_with_constructor(goodput_histogram),
        };
        let m = ExportMetrics {
            flows,
            default_cc: Family::default(),
            default_cc_now: Vec::new(),
            observer: Family::default(),
            events: FloatCounter::default(),
            records: FloatCounter::default(),
            drops: Counter::default(),
            untracked: Counter::default(),
            evicted: Counter::default(),
            filtered: Counter::default(),
            coalesced: Counter::default(),
            flows_active: Gauge::default(),
            cpu_seconds: FloatCounter::default(),
            event_cost: FloatGauge::default(),
            resident: Gauge::default(),
            last_totals: [0; 5],
            last_cpu: crate::observe::stats::process_cpu_time(),
            labels: FlowLabels {
                cc_labels: CappedLabel::new(MAX_CC_LABELS),
                scopes,
                cgroup_labels: CappedLabel::new(MAX_SCOPE_LABELS),
                netns_labels: CappedLabel::new(MAX_SCOPE_LABELS),
                cgroup_names: CgroupNames::new(),
                netns_names: HashMap::new(),
                series: HashMap::default(),
                uncached: None,
            },
            ended: IdSet::default(),
            before: None,
        };
        #[rustfmt::skip]
        let families: Vec<FamilyRow> = vec![
            ("bbrscope_flows_opened", "TCP flows that started sending, by algorithm", None, Box::new(m.flows.flows_opened.clone())),
            ("bbrscope_flows_closed", "TCP flows that closed, by algorithm", None, Box::new(m.flows.flows_closed.clone())),
            ("bbrscope_acked", "Bytes the peers acknowledged (goodput), by algorithm", Some(Unit::Bytes), Box::new(m.flows.bytes_acked.clone())),
            ("bbrscope_sent", "Bytes sent, retransmissions included, by algorithm", Some(Unit::Bytes), Box::new(m.flows.bytes_sent.clone())),
            ("bbrscope_data_segments_sent", "Data segments sent, retransmissions included, by algorithm", None, Box::new(m.flows.data_segments_sent.clone())),
            ("bbrscope_retransmitted_segments", "Segments retransmitted, by algorithm", None, Box::new(m.flows.retrans_segments.clone())),
            ("bbrscope_retransmitted", "Bytes retransmitted, by algorithm", Some(Unit::Bytes), Box::new(m.flows.retrans_bytes.clone())),
            ("bbrscope_ca_state", "Time flows spent in each congestion state (open, disorder, cwr, recovery, loss), counted when they end", Some(Unit::Seconds), Box::new(m.flows.ca_state_seconds.clone())),
            ("bbrscope_bbr_mode", "Time BBR flows spent in each mode (startup, drain, probe_bw, probe_rtt), between samples", Some(Unit::Seconds), Box::new(m.flows.bbr_mode_seconds.clone())),
            ("bbrscope_flow_completion", "Flow duration from connect/accept (or first sight) to close, by algorithm and bytes acked (size_bucket)", Some(Unit::Seconds), Box::new(m.flows.completion.clone())),
            ("bbrscope_srtt", "Median smoothed RTT of each flow, observed when it ends", Some(Unit::Seconds), Box::new(m.flows.srtt.clone())),
            ("bbrscope_rtt_inflation_ratio", "Median srtt over the kernel's minimum RTT of each flow, observed when it ends (1 = no queueing)", None, Box::new(m.flows.inflation.clone())),
            ("bbrscope_flow_goodput_bytes_per_second", "Bytes acked over each flow's duration, observed when it ends", None, Box::new(m.flows.goodput.clone())),
            ("bbrscope_default_cc_info", "The default congestion-control algorithm (net.ipv4.tcp_congestion_control) of bbrscope's network namespace and of each named one (netns)", None, Box::new(m.default_cc.clone())),
            ("bbrscope_observer_info", "The kernel path observing flows", None, Box::new(m.observer.clone())),
            ("bbrscope_observer_events", "Per-ACK kernel program runs (tcp_probe, or the sock_ops program's callbacks)", None, Box::new(m.events.clone())),
            ("bbrscope_observer_records", "Records delivered from the kernel to bbrscope", None, Box::new(m.records.clone())),
            ("bbrscope_ring_drops", "Records lost because the ring buffer was full (raise --ring-size or --interval)", None, Box::new(m.drops.clone())),
            ("bbrscope_flows_untracked", "Flows the kernel could not store (table full, or socket storage not allocated)", None, Box::new(m.untracked.clone())),
            ("bbrscope_flows_evicted", "Tracepoint observer: flows evicted from the kernel's table (raise --max-flows)", None, Box::new(m.evicted.clone())),
            ("bbrscope_flows_filtered", "Flows rejected by the filters", None, Box::new(m.filtered.clone())),
            ("bbrscope_events_coalesced", "Retransmit and congestion-state events folded into samples by the per-interval cap", None, Box::new(m.coalesced.clone())),
            ("bbrscope_flows_active", "Flows bbrscope currently follows", None, Box::new(m.flows_active.clone())),
            ("bbrscope_cpu", "CPU time (user + system) bbrscope used", Some(Unit::Seconds), Box::new(m.cpu_seconds.clone())),
            ("bbrscope_event_cost", "Mean run time of the per-ACK kernel program over the last second (needs --bpf-stats; else 0)", Some(Unit::Seconds), Box::new(m.event_cost.clone())),
            ("bbrscope_resident_memory", "bbrscope's resident memory", Some(Unit::Bytes), Box::new(m.resident.clone())),
        ];
        for (name, help, unit, metric) in families {
            let metric = Boxed(metric);
            match unit {
                Some(unit) => registry.register_with_unit(name, help, unit, metric),
                None => registry.register(name, help, metric),
            }
        }
        let build: Family<BuildLabels, Gauge> = Family::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_string(),
                commit: env!("BBRSCOPE_GIT_COMMIT").to_string(),
            })
            .set(1);
        registry.register("bbrscope_build_info", "bbrscope's version and the git commit it was built from", build);
        m
    }

    /// What the flow of `ev` was before the table takes it: the base its counters advance from.
    fn before(table: &FlowTable, ev: &Event) -> Option<Before> {
        table.get(ev.head().flow).map(|f| Before {
            counts: match (&f.metrics, f.life.start_ns) {
                (Some(m), _) => Some(Counts::of(m)),
                // Opened, not sampled yet: seen from its start, so everything counts from zero.
                (None, Some(_)) => Some(Counts::ZERO),
                (None, None) => None,
            },
            sample_ns: f.last_sample_ns,
            bbr_mode: f.metrics.as_ref().and_then(|m| m.bbr.as_ref()).and_then(|b| b.mode.clone()),
        })
    }

    /// Counts what `ev` meant, after the table took it (with `change`); `before` is
    /// [`Self::before`]'s.
    fn count(&mut self, table: &FlowTable, ev: &Event, change: Change, before: Option<Before>) {
        let id = ev.head().flow;
        let Some(flow) = table.get(id) else { return };
        // A flow is final at its summary (sock_ops path), or at its last sample when no summary
        // will come (tracepoint path; connections open before bbrscope started).
        let fin = change == Change::Ended || (change == Change::Closed && flow.life.start_ns.is_none());
        let ended = fin && self.ended.insert(id);
        let fam = &self.flows;
        let series = self.labels.series(flow);
        if change == Change::Opened {
            series.opened.get(&fam.flows_opened, || series.labels.clone()).inc();
        }
        if let (Event::Sample(s), Some(before)) = (ev, &before) {
            // A flow first seen in mid-life (tracepoint path, or open before bbrscope started)
            // has no base: it counts from its first sample on.
            if let Some(base) = before.counts {
                let now = Counts::of(&s.metrics);
                let labels = &series.labels;
                let add = |h: &mut Handle<Counter>, fam, now: Option<u64>, base: Option<u64>| {
                    if let (Some(n), Some(b)) = (now, base) {
                        h.get(fam, || labels.clone()).inc_by(n.saturating_sub(b));
                    }
                };
                add(&mut series.bytes_acked, &fam.bytes_acked, now.bytes_acked, base.bytes_acked);
                add(&mut series.bytes_sent, &fam.bytes_sent, now.bytes_sent, base.bytes_sent);
                add(&mut series.retrans_bytes, &fam.retrans_bytes, now.bytes_retrans, base.bytes_retrans);
                add(&mut series.retrans_segments, &fam.retrans_segments, now.retrans_segs, base.retrans_segs);
                add(&mut series.data_segments_sent, &fam.data_segments_sent, now.data_segs_out, base.data_segs_out);
            }
            // The time since the previous sample goes to the mode seen then; before a flow's first
            // sample (a short flow may only have its close sample), to the mode seen now.
            let mode = before.bbr_mode.as_ref().or_else(|| s.metrics.bbr.as_ref().and_then(|b| b.mode.as_ref()));
            if let Some(mode) = mode {
                let dt = s.head.ts_ns.saturating_sub(before.sample_ns) as f64 / 1e9;
                series.bbr_mode(&fam.bbr_mode_seconds, mode).inc_by(dt);
            }
        }
        if ended {
            Self::flow_ended(fam, series, flow);
        }
        if change == Change::Ended {
            // The loop removes the flow from the table after this.
            self.ended.remove(&id);
        }
    }

    fn flow_ended(fam: &FlowFamilies, series: &mut Series, flow: &Flow) {
        let labels = &series.labels;
        series.closed.get(&fam.flows_closed, || labels.clone()).inc();
        for ((state, h), ns) in CA_STATES.iter().zip(&mut series.ca_state).zip(flow.life.ca_ns) {
            if ns > 0 {
                let labels = || CcStateLabels { cc: labels.clone(), state: state.to_string() };
                h.get(&fam.ca_state_seconds, labels).inc_by(ns as f64 / 1e9);
            }
        }
        let duration_ns = match (&flow.life.end, flow.life.start_ns) {
            (Some(end), Some(start)) => end.head.ts_ns.saturating_sub(start),
            _ => flow.duration_ns(),
        };
        let duration = duration_ns as f64 / 1e9;
        let m = flow.metrics.as_ref();
        let bytes = m.and_then(|m| m.bytes_acked).map_or(0, |b| b.saturating_sub(flow.first_bytes_acked.unwrap_or(0)));
        let bucket = size_bucket(bytes);
        let size_bucket = || CcSizeLabels { cc: labels.clone(), size_bucket: SIZE_BUCKETS[bucket].0.to_string() };
        series.completion[bucket].get(&fam.completion, size_bucket).observe(duration);
        let srtt_us = flow.life.srtt_median_us().or(m.and_then(|m| m.srtt_us));
        if let Some(srtt) = srtt_us.filter(|&s| s > 0) {
            series.srtt.get(&fam.srtt, || labels.clone()).observe(f64::from(srtt) / 1e6);
            if let Some(min) = m.and_then(|m| m.min_rtt_us).filter(|&v| v > 0) {
                series.inflation.get(&fam.inflation, || labels.clone()).observe(f64::from(srtt) / f64::from(min));
            }
        }
        if duration > 0.0 && bytes > 0 {
            series.goodput.get(&fam.goodput, || labels.clone()).observe(bytes as f64 / duration);
        }
    }

    /// bbrscope's own cost from a stats report, and the gauges read now.
    fn on_stats(&mut self, r: &StatsReport) {
        self.events.inc_by(r.events_per_s * r.interval_s);
        self.records.inc_by(r.records_per_s * r.interval_s);
        let totals = [
            r.drops_total,
            r.untracked_total,
            r.evicted_total,
            r.flows_filtered_total,
            r.retrans_coalesced_total + r.cong_coalesced_total,
        ];
        let counters = [&self.drops, &self.untracked, &self.evicted, &self.filtered, &self.coalesced];
        for ((c, now), last) in counters.iter().zip(totals).zip(self.last_totals.iter_mut()) {
            c.inc_by(now.saturating_sub(*last));
            *last = now.max(*last);
        }
        self.flows_active.set(r.flows_active as i64);
        let cpu = crate::observe::stats::process_cpu_time();
        self.cpu_seconds.inc_by(cpu.saturating_sub(self.last_cpu).as_secs_f64());
        self.last_cpu = cpu;
        self.event_cost.set(r.ns_per_event.unwrap_or(0.0) / 1e9);
        if let Some(rss) = resident_bytes() {
            self.resident.set(rss as i64);
        }
        if !r.observer.is_empty() {
            self.set_observer(&r.observer);
        }
        self.refresh_default_cc();
    }

    /// Names the observer path in `bbrscope_observer_info`.
    pub(crate) fn set_observer(&self, path: &str) {
        let labels = ObserverLabels { observer: path.to_string() };
        if self.observer.get(&labels).is_none() {
            self.observer.clear();
            self.observer.get_or_create(&labels).set(1);
        }
    }

    /// Reads the default algorithm of bbrscope's namespace and of each named one (it may be
    /// changed at any time, e.g. by `apply`). A namespace that cannot be entered (no
    /// CAP_SYS_ADMIN, as under the systemd unit) or that went away meanwhile is left out.
    pub(crate) fn refresh_default_cc(&mut self) {
        let mut now = Vec::new();
        let own = netns::current().ok();
        if let Ok(Some(cc)) = sysctl::read(sysctl::CC) {
            let netns = match &own {
                Some(o) if netns::is_initial(o) => "initial".to_string(),
                _ => "self".to_string(),
            };
            now.push(NetnsCcLabels { netns, cc });
        }
        let own_ino = own.map(|o| o.ino);
        for ns in netns::named_namespaces().into_iter().filter(|n| Some(n.ino) != own_ino) {
            if now.len() >= MAX_NETNS_LABELS {
                break;
            }
            if let Ok(Some(cc)) = netns::run(&ns, || sysctl::read(sysctl::CC)) {
                now.push(NetnsCcLabels { netns: ns.label, cc });
            }
        }
        if now != self.default_cc_now {
            self.default_cc.clear();
            for labels in &now {
                self.default_cc.get_or_create(labels).set(1);
            }
            self.default_cc_now = now;
        }
    }
}

/// What the flow metrics' labels are worked out from, and each label set's series.
struct FlowLabels {
    scopes: ScopeOptions,
    cc_labels: CappedLabel,
    cgroup_labels: CappedLabel,
    netns_labels: CappedLabel,
    cgroup_names: CgroupNames,
    /// Network namespace inodes to their label values.
    netns_names: HashMap<u32, String>,
    /// The series of each label set seen, found without building or hashing the label set.
    series: HashMap<SeriesKey, Series, BuildHasherDefault<IdHasher>>,
    /// The series of the latest flow whose labels could not be cached.
    uncached: Option<Series>,
}

impl FlowLabels {
    /// The labels a flow is counted under: the algorithm it first sent with, so that opened,
    /// bytes and closed of one flow always land in the same series even if it is switched
    /// mid-flow, and its cgroup and network namespace when asked for. Each label is capped. The
    /// second value is false when the cgroup's path is not known yet (a cgroup made since the last
    /// walk): the same flow owner may get its path at the next look-up.
    fn flow_cc(&mut self, flow: &Flow) -> (CcLabels, bool) {
        let cc = self.cc_labels.get(flow_cc_name(flow));
        let owner = flow.life.owner.as_ref();
        let mut known = true;
        let cgroup = self.scopes.cgroup.then(|| {
            let id = owner.and_then(|o| o.cgroup_id);
            let name = id.and_then(|id| self.cgroup_names.name(id));
            known = id.is_none() || name.is_some();
            self.cgroup_labels.get(name.unwrap_or("unknown"))
        });
        let netns = self.scopes.netns.then(|| {
            let name = owner.and_then(|o| o.netns).map(|ino| self.netns_name(ino));
            self.netns_labels.get(name.as_deref().unwrap_or("unknown"))
        });
        (CcLabels { cc, scope: ScopeLabels { cgroup, netns } }, known)
    }

    /// The flow's series. Its labels are worked out once per distinct algorithm, cgroup id and
    /// namespace inode (the key), not per event: they always come out the same for one key (a
    /// capped label's values never move), except for a cgroup whose path is not known yet, whose
    /// flows are looked up each time until it is.
    fn series(&mut self, flow: &Flow) -> &mut Series {
        let owner = flow.life.owner.as_ref();
        let key = SeriesKey::new(
            flow_cc_name(flow),
            owner.and_then(|o| o.cgroup_id).filter(|_| self.scopes.cgroup),
            owner.and_then(|o| o.netns).filter(|_| self.scopes.netns),
        );
        if let Some(key) = key.filter(|k| self.series.contains_key(k)) {
            return self.series.get_mut(&key).expect("checked above");
        }
        let (labels, known) = self.flow_cc(flow);
        match key.filter(|_| known) {
            Some(key) => {
                // Cgroups and namespaces come and go (containers): the cache is dropped rather
                // than let grow; the series themselves stay in their families.
                if self.series.len() >= MAX_SERIES_CACHED {
                    self.series.clear();
                }
                self.series.entry(key).or_insert(Series::new(labels))
            }
            None => {
                if self.uncached.as_ref().is_none_or(|s| s.labels != labels) {
                    self.uncached = Some(Series::new(labels));
                }
                self.uncached.as_mut().expect("set above")
            }
        }
    }

    /// A network namespace's `ip netns` name, `initial`, or `ino:N` for an unnamed one.
    fn netns_name(&mut self, ino: u32) -> String {
        if let Some(name) = self.netns_names.get(&ino) {
            return name.clone();
        }
        // Namespaces come and go (containers): the cache is dropped rather than let grow.
        if self.netns_names.len() >= 1024 {
            self.netns_names.clear();
        }
        let named = netns::named_namespaces().into_iter().find(|n| n.ino == u64::from(ino));
        let name = match named {
            Some(n) => n.label,
            None => {
                let ns = netns::Netns { label: String::new(), path: "/proc/1/ns/net".into(), ino: u64::from(ino) };
                if netns::is_initial(&ns) { "initial".into() } else { format!("ino:{ino}") }
            }
        };
        self.netns_names.insert(ino, name.clone());
        name
    }
}

/// The size bucket of a response of `bytes` (its index in [`SIZE_BUCKETS`]).
/// The exporter is a sink of the observer's loop: every event counted as it comes; the HTTP task
/// renders the registry the counts live in.
impl Sink for ExportMetrics {
    type Side = NoSide;

    fn before(&mut self, ev: &Event, table: &FlowTable) {
        self.before = Self::before(table, ev);
    }

    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let before = self.before.take();
        self.count(table, ev, change, before);
        Ok(())
    }

    fn stats(&mut self, _now_ns: u64, stats: &StatsReport) -> io::Result<()> {
        self.on_stats(stats);
        Ok(())
    }

    /// Forgets ended flows the table no longer holds.
    fn pruned(&mut self, table: &FlowTable) {
        self.ended.retain(|id| table.get(*id).is_some());
    }
}

pub(crate) fn size_bucket(bytes: u64) -> usize {
    SIZE_BUCKETS.iter().position(|(_, max)| bytes < *max).unwrap_or(SIZE_BUCKETS.len() - 1)
}

/// The algorithm a flow is counted under (see [`FlowLabels::flow_cc`]).
fn flow_cc_name(flow: &Flow) -> &str {
    let cc = flow.life.ccs.first().unwrap_or(&flow.cc);
    if cc.is_empty() { "unknown" } else { cc }
}

/// Label sets whose series are cached (see [`FlowLabels::series`]).
const MAX_SERIES_CACHED: usize = 4096;

/// What a flow's labels are worked out from: its algorithm's name (the kernel's are at most 16
/// bytes, `TCP_CA_NAME_MAX`), and its cgroup id and namespace inode when they are labels.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct SeriesKey {
    cc: [u8; 16],
    cgroup: Option<u64>,
    netns: Option<u32>,
}

impl SeriesKey {
    /// None for a name too long to be a kernel algorithm's (not cached).
    fn new(cc: &str, cgroup: Option<u64>, netns: Option<u32>) -> Option<Self> {
        let mut name = [0; 16];
        name.get_mut(..cc.len())?.copy_from_slice(cc.as_bytes());
        Some(SeriesKey { cc: name, cgroup, netns })
    }
}

/// A metric of a family, looked up in it on first use: `Family::get_or_create` hashes the whole
/// label set (its strings, with SipHash) and takes a lock each call, and a flow end made a dozen
/// of them (a quarter of `export`'s CPU at 10,000 flow ends a second). The handle shares the
/// family's metric; fetched only when first used, so that a series appears in /metrics exactly
/// when it would have without it.
struct Handle<M>(Option<M>);

impl<M: Clone> Handle<M> {
    fn get<S: Clone + std::hash::Hash + Eq, C: MetricConstructor<M>>(
        &mut self,
        family: &Family<S, M, C>,
        labels: impl FnOnce() -> S,
    ) -> &M {
        self.0.get_or_insert_with(|| family.get_or_create(&labels()).clone())
    }
}

impl<M> Default for Handle<M> {
    fn default() -> Self {
        Handle(None)
    }
}

/// One label set's metrics in every flow family.
#[derive(Default)]
struct Series {
    labels: CcLabels,
    opened: Handle<Counter>,
    closed: Handle<Counter>,
    bytes_acked: Handle<Counter>,
    bytes_sent: Handle<Counter>,
    data_segments_sent: Handle<Counter>,
    retrans_segments: Handle<Counter>,
    retrans_bytes: Handle<Counter>,
    /// In [`CA_STATES`] order.
    ca_state: [Handle<FloatCounter>; 5],
    /// BBR's modes seen (a handful).
    bbr_modes: Vec<(Arc<str>, FloatCounter)>,
    /// In [`SIZE_BUCKETS`] order.
    completion: [Handle<Histogram>; SIZE_BUCKETS.len()],
    srtt: Handle<Histogram>,
    inflation: Handle<Histogram>,
    goodput: Handle<Histogram>,
}

impl Series {
    fn new(labels: CcLabels) -> Self {
        Series { labels, ..Series::default() }
    }

    fn bbr_mode(&mut self, family: &Family<CcModeLabels, FloatCounter>, mode: &Arc<str>) -> &FloatCounter {
        let i = match self.bbr_modes.iter().position(|(m, _)| m == mode) {
            Some(i) => i,
            None => {
                let labels = CcModeLabels { cc: self.labels.clone(), mode: mode.to_string() };
                self.bbr_modes.push((mode.clone(), family.get_or_create(&labels).clone()));
                self.bbr_modes.len() - 1
            }
        };
        &self.bbr_modes[i].1
    }
}

/// Resident set size of this process, from /proc/self/statm (pages).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::event::Owner;

    /// A flow's series is found by its algorithm, cgroup id and namespace, and carries the
    /// labels worked out for them; a cgroup whose path is not known yet is not cached as
    /// `unknown`, so that its flows get its path once it is known.
    #[test]
    fn series_are_cached_by_what_their_labels_come_from() {
        let mut labels = FlowLabels {
            scopes: ScopeOptions { cgroup: true, netns: false },
            cc_labels: CappedLabel::new(MAX_CC_LABELS),
            cgroup_labels: CappedLabel::new(MAX_SCOPE_LABELS),
            netns_labels: CappedLabel::new(MAX_SCOPE_LABELS),
            cgroup_names: CgroupNames::fixed([(7, "/web.slice".to_string())]),
            netns_names: HashMap::new(),
            series: HashMap::default(),
            uncached: None,
        };
        let flow = |cc: &str, cgroup_id| {
            let mut f = crate::observe::flow::tests::flow_with(cc, Vec::new());
            f.life.owner = Some(Owner { cgroup_id: Some(cgroup_id), netns: Some(1), ..Owner::default() });
            f
        };
        let label_of = |l: &mut FlowLabels, f: &Flow| {
            let s = l.series(f);
            (s.labels.cc.clone(), s.labels.scope.cgroup.clone().unwrap(), s.labels.scope.netns.clone())
        };
        assert_eq!(label_of(&mut labels, &flow("bbr", 7)), ("bbr".into(), "/web.slice".into(), None));
        assert_eq!(label_of(&mut labels, &flow("cubic", 7)), ("cubic".into(), "/web.slice".into(), None));
        assert_eq!(label_of(&mut labels, &flow("", 7)).0, "unknown");
        assert_eq!(labels.series.len(), 3);
        // The same key again: the cached series, with the handles it has fetched.
        labels.series(&flow("bbr", 7)).srtt.0 = Some(srtt_histogram());
        assert!(labels.series(&flow("bbr", 7)).srtt.0.is_some());
        // Cgroup 8's path is not known (yet): its flows count as `unknown`, uncached.
        assert_eq!(label_of(&mut labels, &flow("bbr", 8)).1, "unknown");
        assert_eq!(labels.series.len(), 3);
    }

    #[test]
    fn capped_label_keeps_the_first_values_then_says_other() {
        let mut l = CappedLabel::new(2);
        assert_eq!(l.get("a"), "a");
        assert_eq!(l.get("b"), "b");
        assert_eq!(l.get("c"), "other");
        assert_eq!(l.get("a"), "a", "a kept value stays");
        assert_eq!(l.get("c"), "other", "a capped value stays capped");
    }

    #[test]
    fn size_buckets() {
        let label = |bytes| SIZE_BUCKETS[size_bucket(bytes)].0;
        assert_eq!(label(0), "lt16k");
        assert_eq!(label(16 << 10), "16k-256k");
        assert_eq!(label((4 << 20) - 1), "256k-4m");
        assert_eq!(label(1 << 40), "ge4m");
    }
}

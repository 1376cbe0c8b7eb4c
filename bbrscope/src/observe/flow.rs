//! The userspace flow table: what is known about each flow, derived rates, and (for the
//! dashboard) a bounded history. Every sink reads flows through it.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::{BuildHasherDefault, Hasher},
    net::SocketAddr,
    sync::Arc,
};

use smallvec::SmallVec;

use crate::observe::event::{CaState, EndEvent, Event, Metrics, Name, Owner};

/// Hashing for flow ids (socket cookies, or the tracepoint path's own ids). They come from kernel
/// counters no peer chooses, so std's flood-resistant SipHash buys nothing here, and with short
/// flows (several lookups per flow, thousands of flows a second) it was ~8% of `stream`'s CPU. A
/// multiplication by an odd constant is a bijection of the low bits (consecutive ids land in
/// distinct buckets) and mixes them into the high ones (hashbrown's tag bits).
#[derive(Clone, Copy, Default)]
pub(crate) struct IdHasher(u64);

const ID_MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(ID_MIX);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(ID_MIX);
    }
}

/// Maps and sets keyed by flow id.
pub(crate) type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;
pub(crate) type IdSet = HashSet<u64, BuildHasherDefault<IdHasher>>;

/// BBR's state machine, for colouring history without a string per point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrMode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
    Other,
}

impl BbrMode {
    pub(crate) fn from_name(name: &str) -> Self {
        match name {
            "startup" => BbrMode::Startup,
            "drain" => BbrMode::Drain,
            "probe_bw" => BbrMode::ProbeBw,
            "probe_rtt" => BbrMode::ProbeRtt,
            _ => BbrMode::Other,
        }
    }
}

/// One point of a flow's history (kept compact: a flow can hold thousands).
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub(crate) ts_ns: u64,
    pub cwnd: Option<u32>,
    pub(crate) ssthresh: Option<u32>,
    pub(crate) srtt_us: Option<u32>,
    pub(crate) min_rtt_us: Option<u32>,
    pub(crate) pacing_rate_bps: Option<u64>,
    pub(crate) delivery_rate_bps: Option<u64>,
    pub(crate) throughput_bps: Option<u64>,
    pub(crate) retrans_total: Option<u32>,
    pub(crate) data_segs_out: Option<u32>,
    /// The latest rate sample was application-limited.
    pub(crate) app_limited: bool,
    /// The peer's receive window was full while the congestion window had room.
    pub(crate) rwnd_limited: bool,
    pub(crate) bbr_mode: Option<BbrMode>,
}

/// Discrete things that happened to a flow, for marking on a time axis.
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    Retransmit { ts_ns: u64, segs: u32, cwnd: u32 },
    State { ts_ns: u64, from: CaState, to: CaState, cwnd: u32 },
}

impl Mark {
    pub(crate) fn ts_ns(&self) -> u64 {
        match self {
            Mark::Retransmit { ts_ns, .. } | Mark::State { ts_ns, .. } => *ts_ns,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Flow {
    pub(crate) id: u64,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub cc: Name,
    pub(crate) first_ns: u64,
    pub(crate) last_ns: u64,
    pub(crate) last_sample_ns: u64,
    pub closed_ns: Option<u64>,
    pub(crate) ca_state: CaState,
    /// The latest sample's state.
    pub metrics: Option<Metrics>,
    /// bytes_acked at the first sample: goodput over the flow's life counts from here.
    pub(crate) first_bytes_acked: Option<u64>,
    /// Goodput between the last two samples (bits/s): `stream`'s `throughput_bps`. One sample
    /// spans ~100 ms, over which ACKs arrive in bursts: a steady 17 Mbit/s flow read anywhere
    /// from 0 to 45 Mbit/s.
    pub(crate) throughput_bps: Option<u64>,
    /// Goodput over the last [`RATE_WINDOW_NS`] (bits/s), as `ss` and btop average rates: the
    /// dashboard's THRPUT. Kept by tables that keep history (the dashboard's); `None` elsewhere.
    pub(crate) rate_bps: Option<u64>,
    /// `rate_bps`'s ends: (time, bytes_acked) of samples at least [`RATE_STEP_NS`] apart, the
    /// first one the newest that is a window old (see [`windowed_rate`]).
    acked: VecDeque<(u64, u64)>,
    pub(crate) retransmits: u64,
    pub(crate) retrans_segs: u64,
    pub(crate) state_changes: u64,
    pub history: VecDeque<Point>,
    pub(crate) marks: VecDeque<Mark>,
    /// What the flow's life adds up to (see [`Life`]).
    pub(crate) life: Life,
}

/// A flow's whole life, for its summary: who owned it, when it began, how long it spent in each
/// congestion state, which algorithms and BBR modes it went through, and (once closed) what the
/// kernel accumulated.
#[derive(Clone, Debug, Default)]
pub struct Life {
    pub(crate) owner: Option<Owner>,
    /// connect() or accept time (sock_ops path), CLOCK_MONOTONIC ns.
    pub(crate) start_ns: Option<u64>,
    pub(crate) retrans_at_open: u32,
    /// Its only record was its close (see [`crate::observe::event::OpenEvent::summary_only`]).
    pub(crate) summary_only: bool,
    /// Time in each `CaState` (open, disorder, cwr, recovery, loss), ns, up to `ca_since_ns`.
    pub(crate) ca_ns: [u64; 5],
    pub(crate) ca_since_ns: u64,
    /// Algorithms seen, in order.
    pub(crate) ccs: SmallVec<[Name; 2]>,
    /// BBR modes seen in samples, in order of first appearance.
    pub(crate) bbr_modes: SmallVec<[Arc<str>; 4]>,
    /// srtt of each sample (µs), bounded: for the summary's median.
    pub(crate) srtts: SmallVec<[u32; 6]>,
    /// The kernel's summary (a copy, not boxed: no allocation per flow end).
    pub(crate) end: Option<EndEvent>,
}

/// The window [`Flow::rate_bps`] averages over: ss and btop show rates over about a second.
pub(crate) const RATE_WINDOW_NS: u64 = 1_000_000_000;
/// The least time between two of `rate_bps`'s kept samples: at most ~20 per flow, and a window
/// at most this much longer than [`RATE_WINDOW_NS`] at any sample interval below it.
const RATE_STEP_NS: u64 = RATE_WINDOW_NS / 20;

/// srtt values kept per flow for its median: beyond this, every other one is dropped.
const SRTT_KEEP: usize = 256;

impl Life {
    fn note_cc(&mut self, cc: Name) {
        if !cc.is_empty() && !self.ccs.contains(&cc) {
            self.ccs.push(cc);
        }
    }

    fn note_sample(&mut self, m: &Metrics) {
        if let Some(mode) = m.bbr.as_ref().and_then(|b| b.mode.as_ref())
            && !self.bbr_modes.contains(mode)
        {
            self.bbr_modes.push(mode.clone());
        }
        if let Some(srtt) = m.srtt_us {
            if self.srtts.len() >= SRTT_KEEP {
                // Halve the resolution rather than forget the start of the flow.
                let kept = self.srtts.iter().copied().step_by(2).collect();
                self.srtts = kept;
            }
            self.srtts.push(srtt);
        }
    }

    /// Time spent in `state` until `ts_ns`, then in the next state from there.
    fn switch_ca(&mut self, state: CaState, ts_ns: u64) {
        if let Some(slot) = ca_index(state) {
            self.ca_ns[slot] += ts_ns.saturating_sub(self.ca_since_ns);
        }
        self.ca_since_ns = ts_ns.max(self.ca_since_ns);
    }

    /// The median srtt of the flow's samples (µs).
    pub(crate) fn srtt_median_us(&self) -> Option<u32> {
        match self.srtts[..] {
            // Most short flows: one or two samples (no copy to sort).
            [] => None,
            [a] => Some(a),
            [a, b] => Some(a.max(b)),
            _ => {
                let mut v = self.srtts.clone();
                v.sort_unstable();
                v.get(v.len() / 2).copied()
            }
        }
    }
}

fn ca_index(s: CaState) -> Option<usize> {
    match s {
        CaState::Open => Some(0),
        CaState::Disorder => Some(1),
        CaState::Cwr => Some(2),
        CaState::Recovery => Some(3),
        CaState::Loss => Some(4),
        CaState::Unknown => None,
    }
}

impl Flow {
    /// Average goodput since bbrscope first saw the flow (bits/s).
    pub(crate) fn mean_goodput_bps(&self) -> Option<u64> {
        let acked = self.metrics.as_ref()?.bytes_acked?.checked_sub(self.first_bytes_acked?)?;
        let dt = self.last_ns.checked_sub(self.first_ns).filter(|&d| d > 0)?;
        Some((u128::from(acked) * 8 * 1_000_000_000 / u128::from(dt)) as u64)
    }

    pub fn duration_ns(&self) -> u64 {
        self.last_ns.saturating_sub(self.first_ns)
    }

    /// History points at or after `since_ns`.
    pub(crate) fn since(&self, since_ns: u64) -> impl Iterator<Item = &Point> {
        // History is in time order: skip the old part without scanning it point by point.
        let start = self.history.partition_point(|p| p.ts_ns < since_ns);
        self.history.range(start..)
    }

    /// Segments retransmitted per second over the history since `since_ns`.
    pub(crate) fn retrans_per_s(&self, since_ns: u64) -> Option<f64> {
        let mut pts = self.since(since_ns).filter(|p| p.retrans_total.is_some());
        let first = pts.next()?;
        let last = pts.last()?;
        let dt = (last.ts_ns - first.ts_ns) as f64 / 1e9;
        let segs = last.retrans_total?.saturating_sub(first.retrans_total?);
        (dt > 0.0).then(|| f64::from(segs) / dt)
    }

    /// srtt / min RTT now: how much queueing inflates the RTT (1.0 = none).
    pub(crate) fn rtt_inflation(&self) -> Option<f64> {
        let m = self.metrics.as_ref()?;
        let (s, min) = (m.srtt_us?, m.min_rtt_us?);
        (min > 0).then(|| f64::from(s) / f64::from(min))
    }
}

/// What applying an event changed, for sinks that print transitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// First record of a flow: it is new to us.
    Opened,
    Updated,
    Closed,
    /// The flow's summary arrived (after its final sample).
    Ended,
    /// An event for a flow we never saw a first record for (its first record was dropped).
    Unknown,
}

/// The least history a flow keeps however many flows share the budget.
pub(crate) const MIN_HISTORY: usize = 16;

pub struct FlowTable {
    flows: IdMap<Flow>,
    /// Points kept per flow (0: no history, as for `stream`).
    history: usize,
    /// Points kept over all flows: with many flows each keeps fewer, so memory is bounded by
    /// this, not by the number of flows.
    budget: usize,
}

impl FlowTable {
    pub(crate) fn new(history: usize) -> Self {
        FlowTable { flows: IdMap::default(), history, budget: usize::MAX }
    }

    /// Caps the points kept over all flows (each flow still keeps at least [`MIN_HISTORY`]).
    pub(crate) fn with_budget(mut self, points: usize) -> Self {
        self.budget = points;
        self
    }

    /// Points (and marks) each flow may keep now.
    fn per_flow(&self) -> usize {
        if self.history == 0 {
            return 0;
        }
        (self.budget / self.flows.len().max(1)).clamp(MIN_HISTORY.min(self.history), self.history)
    }

    pub(crate) fn get(&self, id: u64) -> Option<&Flow> {
        self.flows.get(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values()
    }

    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    pub(crate) fn apply(&mut self, ev: &Event) -> Change {
        let h = ev.head();
        let mut change = Change::Updated;
        if let std::collections::hash_map::Entry::Vacant(slot) = self.flows.entry(h.flow) {
            // A flow's first record is its OPEN (sock_ops path) or a sample (tracepoint path; if
            // it was lost, the next sample still introduces the flow).
            let (cc, first_bytes_acked) = match ev {
                Event::Sample(s) => (s.cc, s.metrics.bytes_acked),
                // A connection open before bbrscope started (start 0): counted from its first sample.
                Event::Open(o) => (o.cc, (o.start_ns != 0).then_some(0)),
                _ => return Change::Unknown,
            };
            // The flow started when it was established or accepted: its OPEN record is sent
            // later, with its first other record.
            let t0 = match ev {
                Event::Open(o) if o.start_ns != 0 => o.start_ns.min(h.ts_ns),
                _ => h.ts_ns,
            };
            let mut life = Life { ca_since_ns: t0, ..Life::default() };
            life.note_cc(cc);
            if let Event::Open(o) = ev {
                life.owner = Some(o.owner.clone());
                life.start_ns = (o.start_ns != 0).then_some(o.start_ns);
                life.retrans_at_open = o.retrans_at_open;
                life.summary_only = o.summary_only;
            }
            slot.insert(Flow {
                id: h.flow,
                src: h.src,
                dst: h.dst,
                cc,
                first_ns: t0,
                last_ns: h.ts_ns,
                last_sample_ns: t0,
                closed_ns: None,
                ca_state: h.ca_state,
                metrics: None,
                first_bytes_acked,
                throughput_bps: None,
                rate_bps: None,
                acked: VecDeque::new(),
                retransmits: 0,
                retrans_segs: 0,
                state_changes: 0,
                history: VecDeque::new(),
                marks: VecDeque::new(),
                life,
            });
            change = Change::Opened;
        }
        let keep = self.per_flow();
        let flow = self.flows.get_mut(&h.flow).expect("inserted above");
        flow.last_ns = flow.last_ns.max(h.ts_ns);
        if let Event::CongState(c) = ev {
            flow.life.switch_ca(c.from, h.ts_ns);
        } else if h.ca_state != flow.ca_state {
            // A change seen only in a sample (its event was coalesced or lost).
            flow.life.switch_ca(flow.ca_state, h.ts_ns);
        }
        flow.ca_state = h.ca_state;
        match ev {
            // A second OPEN names the owner found since (see `observe::session`).
            Event::Open(o) if change == Change::Updated && flow.life.owner.as_ref().is_none_or(|w| w.pid.is_none()) => {
                flow.life.owner = Some(o.owner.clone());
            }
            Event::Open(_) => {}
            Event::End(e) => {
                flow.life.switch_ca(flow.ca_state, h.ts_ns);
                flow.life.end = Some(EndEvent::clone(e));
                flow.closed_ns.get_or_insert(h.ts_ns);
                change = Change::Ended;
            }
            Event::Sample(s) => {
                if flow.metrics.is_none() && flow.first_bytes_acked.is_none() {
                    // Opened without a baseline (a connection older than bbrscope): its first sample's.
                    flow.first_bytes_acked = s.metrics.bytes_acked;
                }
                if let (Some(prev), Some(now)) = (flow.metrics.as_ref(), s.metrics.bytes_acked) {
                    flow.throughput_bps =
                        rate(prev.bytes_acked, now, flow.last_sample_ns, h.ts_ns).or(flow.throughput_bps);
                }
                if keep > 0
                    && let Some(now) = s.metrics.bytes_acked
                {
                    flow.rate_bps = windowed_rate(&mut flow.acked, h.ts_ns, now).or(flow.rate_bps);
                }
                flow.last_sample_ns = h.ts_ns;
                flow.cc = s.cc;
                flow.life.note_cc(s.cc);
                flow.life.note_sample(&s.metrics);
                if keep > 0 {
                    push_bounded(&mut flow.history, keep, point(h.ts_ns, &s.metrics, flow.throughput_bps));
                }
                flow.metrics = Some(s.metrics.clone());
                if s.closing {
                    flow.closed_ns = Some(h.ts_ns);
                    change = Change::Closed;
                }
            }
            Event::Retransmit(r) => {
                flow.retransmits += 1;
                flow.retrans_segs += u64::from(r.segs);
                if keep > 0 {
                    let mark = Mark::Retransmit { ts_ns: h.ts_ns, segs: r.segs, cwnd: r.cwnd };
                    push_bounded(&mut flow.marks, keep, mark);
                }
            }
            Event::CongState(c) => {
                flow.state_changes += 1;
                if keep > 0 {
                    let mark = Mark::State { ts_ns: h.ts_ns, from: c.from, to: c.to, cwnd: c.cwnd };
                    push_bounded(&mut flow.marks, keep, mark);
                }
            }
        }
        change
    }

    /// Forgets a flow once its summary has been handled. On the sock_ops path a flow's summary is
    /// its last record (the session drops anything later), so a command that does not show
    /// closed flows has no use for it; kept until `prune`, closed short flows made the table
    /// hold tens of thousands of flows (5 s of them at thousands a second), rehashed and
    /// page-faulted as it churned.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Flow> {
        self.flows.remove(&id)
    }

    /// Forgets flows closed (or silent) before `cutoff_ns`.
    pub(crate) fn prune(&mut self, closed_before_ns: u64, silent_before_ns: u64) {
        self.flows.retain(|_, f| match f.closed_ns {
            Some(c) => c >= closed_before_ns,
            // An idle keep-alive connection seen from its open: its close will come.
            None if f.life.start_ns.is_some() => true,
            None => f.last_ns >= silent_before_ns,
        });
    }
}

fn rate(prev_bytes: Option<u64>, now_bytes: u64, prev_ns: u64, now_ns: u64) -> Option<u64> {
    let dt = now_ns.checked_sub(prev_ns).filter(|&d| d > 0)?;
    let db = now_bytes.checked_sub(prev_bytes?)?;
    Some((u128::from(db) * 8 * 1_000_000_000 / u128::from(dt)) as u64)
}

/// Notes `bytes` acked at `ts_ns` in `acked` and returns the goodput since the newest kept
/// sample at least [`RATE_WINDOW_NS`] older (since the oldest while the flow is younger than
/// that; `None` at its first sample).
fn windowed_rate(acked: &mut VecDeque<(u64, u64)>, ts_ns: u64, bytes: u64) -> Option<u64> {
    // Samples older than the newest one a window back are no longer an end.
    while acked.len() >= 2 && acked[1].0.saturating_add(RATE_WINDOW_NS) <= ts_ns {
        acked.pop_front();
    }
    let rate = acked.front().and_then(|&(t0, b0)| rate(Some(b0), bytes, t0, ts_ns));
    if acked.back().is_none_or(|&(t, _)| ts_ns >= t.saturating_add(RATE_STEP_NS)) {
        acked.push_back((ts_ns, bytes));
    }
    rate
}

fn point(ts_ns: u64, m: &Metrics, throughput_bps: Option<u64>) -> Point {
    let rwnd_limited = match (m.snd_wnd, m.in_flight, m.mss, m.cwnd) {
        (Some(wnd), Some(inflight), Some(mss), Some(cwnd)) if mss > 0 => {
            let window_full = (u64::from(inflight) + 1) * u64::from(mss) >= u64::from(wnd);
            window_full && inflight.saturating_add(1) < cwnd
        }
        _ => false,
    };
    Point {
        ts_ns,
        cwnd: m.cwnd,
        ssthresh: m.ssthresh,
        srtt_us: m.srtt_us,
        min_rtt_us: m.min_rtt_us,
        pacing_rate_bps: m.pacing_rate_bps,
        delivery_rate_bps: m.delivery_rate_bps,
        throughput_bps,
        retrans_total: m.retrans_total,
        data_segs_out: m.data_segs_out,
        app_limited: m.delivery_app_limited.unwrap_or(false),
        rwnd_limited,
        bbr_mode: m.bbr.as_ref().and_then(|b| b.mode.as_deref()).map(BbrMode::from_name),
    }
}

/// Appends, dropping the oldest entries beyond `cap` (which shrinks as flows are added).
fn push_bounded<T>(q: &mut VecDeque<T>, cap: usize, item: T) {
    while q.len() >= cap {
        q.pop_front();
    }
    q.push_back(item);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A flow with the given history, for tests of what reads flows.
    pub(crate) fn flow_with(cc: &str, history: Vec<Point>) -> Flow {
        let first_ns = history.first().map_or(0, |p| p.ts_ns);
        let last_ns = history.last().map_or(0, |p| p.ts_ns);
        Flow {
            id: 1,
            src: "10.0.0.1:443".parse().unwrap(),
            dst: "10.0.0.2:50000".parse().unwrap(),
            cc: cc.into(),
            first_ns,
            last_ns,
            last_sample_ns: last_ns,
            closed_ns: None,
            ca_state: CaState::Open,
            metrics: None,
            first_bytes_acked: None,
            throughput_bps: None,
            rate_bps: None,
            acked: VecDeque::new(),
            retransmits: 0,
            retrans_segs: 0,
            state_changes: 0,
            history: history.into(),
            marks: VecDeque::new(),
            life: Life::default(),
        }
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::observe::event::{Head, SampleEvent};

    fn sample(flow: u64, ts_ns: u64) -> Event {
        let mut m = crate::observe::replay::parse_line(
            r#"{"type":"sample","ts":0,"cookie":1,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open","cwnd":10}"#,
        )
        .unwrap();
        let Some(crate::observe::replay::Record::Event(Event::Sample(s))) = m.take() else { unreachable!() };
        Event::Sample(Box::new(SampleEvent { head: Head { flow, ts_ns, ..s.head }, ..*s }))
    }

    /// A steady 17 Mbit/s flow whose ACKs arrive in bursts: samples 100 ms apart read 0 to 45
    /// Mbit/s each (as on a tbf-limited path), the rate over the window reads 17.
    #[test]
    fn the_rate_averages_a_window_of_bursty_samples() {
        let mut t = FlowTable::new(100);
        // Bytes acked per 100 ms: 0, 3.8, 25.4, 44.7, 11.1 Mbit/s worth, repeating (mean 17).
        let burst = [0u64, 47_500, 317_500, 558_750, 138_750];
        let (mut acked, mut per_sample) = (0, Vec::new());
        for i in 0..50u64 {
            acked += burst[i as usize % 5];
            let mut ev = sample(1, 1_000_000_000 + i * 100_000_000);
            let Event::Sample(s) = &mut ev else { unreachable!() };
            s.metrics.bytes_acked = Some(acked);
            t.apply(&ev);
            let f = t.get(1).unwrap();
            per_sample.extend(f.throughput_bps);
            if i >= 10 {
                // Ten samples span exactly the window: it holds two whole cycles of the burst.
                assert_eq!(f.rate_bps, Some(17_000_000), "at sample {i}");
            }
            assert!(f.acked.len() <= 22, "{} kept", f.acked.len());
        }
        let (lo, hi) = (per_sample.iter().min().unwrap(), per_sample.iter().max().unwrap());
        assert!(*lo == 0 && *hi > 40_000_000, "one sample's rate is as bursty as its ACKs: {lo}..{hi}");
        // A table without history (stream's) keeps no window.
        let mut bare = FlowTable::new(0);
        let mut ev = sample(1, 0);
        let Event::Sample(s) = &mut ev else { unreachable!() };
        s.metrics.bytes_acked = Some(1);
        bare.apply(&ev);
        assert!(bare.get(1).unwrap().acked.capacity() == 0 && bare.get(1).unwrap().rate_bps.is_none());
    }

    /// The median is the upper one of an even count, whatever the count.
    #[test]
    fn srtt_median_of_few_and_many_samples() {
        let median = |v: &[u32]| Life { srtts: v.into(), ..Life::default() }.srtt_median_us();
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7]), Some(7));
        assert_eq!(median(&[9, 3]), Some(9));
        assert_eq!(median(&[3, 9]), Some(9));
        assert_eq!(median(&[5, 1, 9]), Some(5));
        assert_eq!(median(&[4, 1, 3, 2]), Some(3));
    }

    #[test]
    fn history_is_bounded_by_the_budget_not_the_flow_count() {
        let mut t = FlowTable::new(1000).with_budget(2000);
        for i in 0..100 {
            for f in 0..2 {
                t.apply(&sample(f, i));
            }
        }
        // Two flows: 1000 each at most (the per-flow cap).
        assert!(t.iter().all(|f| f.history.len() == 100));
        for f in 2..500 {
            for i in 0..50 {
                t.apply(&sample(f, i));
            }
        }
        // 500 flows share 2000 points: the latest flows keep MIN_HISTORY; flows that stopped
        // sending keep what they had: the total stays within twice the budget plus the floor.
        let total: usize = t.iter().map(|f| f.history.len()).sum();
        assert!(t.iter().filter(|f| f.id >= 200).all(|f| f.history.len() == MIN_HISTORY), "per-flow cap");
        assert!(total <= 2 * 2000 + 500 * MIN_HISTORY, "total {total}");
    }
}

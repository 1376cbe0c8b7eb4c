//! `bbrscope stream`'s output: one JSON object per line. The schema is documented in
//! docs/stream.md; every object has `type` and `ts` (Unix seconds), flow objects also `cookie`,
//! `src`, `dst`, `cc` and `ca_state`.

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    clock::Clock,
    event::{CaState, EndReason, Event, Metrics, tcp_state_name},
    flow::{Change, Flow, FlowTable},
    stats::StatsReport,
    sys::cgroup::CgroupNames,
};

#[derive(Serialize)]
struct FlowRecord<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: f64,
    cookie: u64,
    src: String,
    dst: String,
    cc: &'a str,
    ca_state: CaState,
    #[serde(flatten)]
    body: Body<'a>,
}

/// Who owns a flow, as `flow_open` and `flow_summary` show it (all null on the tracepoint path).
#[derive(Serialize, Default)]
struct OwnerJson {
    side: Option<String>,
    pid: Option<u32>,
    comm: Option<String>,
    cgroup: Option<String>,
    cgroup_id: Option<u64>,
    netns: Option<u32>,
    /// `bbrscope experiment`'s arm: "a" or "b"; absent outside an experiment.
    #[serde(skip_serializing_if = "Option::is_none")]
    arm: Option<&'static str>,
}

/// Seconds in each congestion state over the flow's life.
#[derive(Serialize)]
struct CaSeconds {
    open: f64,
    disorder: f64,
    cwr: f64,
    recovery: f64,
    loss: f64,
}

#[derive(Serialize)]
struct Summary<'a> {
    start_ts: Option<f64>,
    duration_s: f64,
    end: EndReason,
    #[serde(flatten)]
    owner: OwnerJson,
    ccs: &'a [String],
    bbr_modes: &'a [String],
    bytes_sent: Option<u64>,
    bytes_acked: Option<u64>,
    bytes_received: Option<u64>,
    bytes_retrans: Option<u64>,
    segs_out: Option<u32>,
    segs_in: Option<u32>,
    data_segs_out: Option<u32>,
    data_segs_in: Option<u32>,
    retrans_total: Option<u32>,
    retrans_at_open: u32,
    retransmit_events: u64,
    retrans_coalesced: u32,
    retrans_failed: u32,
    srtt_first_us: u32,
    srtt_min_us: u32,
    srtt_median_us: Option<u32>,
    srtt_max_us: u32,
    srtt_last_us: Option<u32>,
    min_rtt_us: Option<u32>,
    cwnd_max: u32,
    ca_state_s: CaSeconds,
    goodput_bps: Option<u64>,
    samples: u32,
    rtt_events: u64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Body<'a> {
    Open {
        #[serde(flatten)]
        owner: OwnerJson,
    },
    Summary(Box<Summary<'a>>),
    Sample {
        /// The TCP state (sock_ops path), as `ss` names it.
        state: Option<&'static str>,
        acks: u32,
        throughput_bps: Option<u64>,
        retrans_coalesced: u32,
        #[serde(flatten)]
        metrics: &'a Metrics,
    },
    Retransmit {
        segs: u32,
        retrans_total: u32,
        cwnd: u32,
        ssthresh: Option<u32>,
    },
    CongState {
        from: CaState,
        to: CaState,
        cwnd: u32,
        ssthresh: Option<u32>,
    },
    Close {
        duration_s: f64,
        goodput_bps: Option<u64>,
        retransmit_events: u64,
        retrans_coalesced: u32,
        #[serde(flatten)]
        metrics: &'a Metrics,
    },
}

#[derive(Serialize)]
struct StatsRecord<'a> {
    #[serde(rename = "type")]
    ty: &'static str,
    ts: f64,
    #[serde(flatten)]
    stats: &'a StatsReport,
}

pub struct JsonSink<W: Write> {
    out: W,
    clock: Clock,
    cgroups: CgroupNames,
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W, clock: Clock) -> Self {
        JsonSink { out, clock, cgroups: CgroupNames::new() }
    }

    fn owner(&mut self, flow: &Flow) -> OwnerJson {
        let Some(o) = &flow.life.owner else { return OwnerJson::default() };
        OwnerJson {
            side: o.side.clone(),
            pid: o.pid,
            comm: o.comm.clone(),
            cgroup: o.cgroup_id.and_then(|id| self.cgroups.name(id)),
            cgroup_id: o.cgroup_id,
            netns: o.netns,
            arm: o.arm.map(|a| if a == 1 { "a" } else { "b" }),
        }
    }

    fn summary<'a>(&mut self, flow: &'a Flow) -> Option<Summary<'a>> {
        let e = flow.life.end.as_ref()?;
        let m = flow.metrics.as_ref();
        let get = |f: fn(&Metrics) -> Option<u64>| m.and_then(f);
        let get32 = |f: fn(&Metrics) -> Option<u32>| m.and_then(f);
        let start = flow.life.start_ns.unwrap_or(flow.first_ns);
        let end_ns = e.head.ts_ns;
        let secs = |i: usize| flow.life.ca_ns[i] as f64 / 1e9;
        let duration_ns = end_ns.saturating_sub(start);
        let goodput_bps = match get(|m| m.bytes_acked) {
            Some(b) if duration_ns > 0 => Some((b as u128 * 8 * 1_000_000_000 / duration_ns as u128) as u64),
            _ => None,
        };
        Some(Summary {
            start_ts: flow.life.start_ns.map(|s| self.clock.unix_secs(s)),
            duration_s: duration_ns as f64 / 1e9,
            end: e.end,
            owner: self.owner(flow),
            ccs: &flow.life.ccs,
            bbr_modes: &flow.life.bbr_modes,
            bytes_sent: get(|m| m.bytes_sent),
            bytes_acked: get(|m| m.bytes_acked),
            bytes_received: get(|m| m.bytes_received),
            bytes_retrans: get(|m| m.bytes_retrans),
            segs_out: get32(|m| m.segs_out),
            segs_in: get32(|m| m.segs_in),
            data_segs_out: get32(|m| m.data_segs_out),
            data_segs_in: get32(|m| m.data_segs_in),
            retrans_total: get32(|m| m.retrans_total),
            retrans_at_open: flow.life.retrans_at_open,
            retransmit_events: flow.retransmits,
            retrans_coalesced: e.retrans_coalesced,
            retrans_failed: e.retrans_failed,
            srtt_first_us: e.srtt_first_us,
            srtt_min_us: e.srtt_min_us,
            srtt_median_us: flow.life.srtt_median_us(),
            srtt_max_us: e.srtt_max_us,
            srtt_last_us: get32(|m| m.srtt_us),
            min_rtt_us: get32(|m| m.min_rtt_us),
            cwnd_max: e.cwnd_max,
            ca_state_s: CaSeconds { open: secs(0), disorder: secs(1), cwr: secs(2), recovery: secs(3), loss: secs(4) },
            goodput_bps,
            samples: e.samples,
            rtt_events: e.rtt_events,
        })
    }

    fn line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }

    fn flow_record<'a>(
        &self,
        ty: &'static str,
        ts_ns: u64,
        flow: &'a Flow,
        state: CaState,
        body: Body<'a>,
    ) -> FlowRecord<'a> {
        FlowRecord {
            ty,
            ts: self.clock.unix_secs(ts_ns),
            cookie: flow.id,
            src: flow.src.to_string(),
            dst: flow.dst.to_string(),
            cc: &flow.cc,
            ca_state: state,
            body,
        }
    }

    /// Writes what `ev` means, after it has been applied to `table` (with result `change`).
    pub fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let h = ev.head();
        let Some(flow) = table.get(h.flow) else { return Ok(()) };
        if change == Change::Opened {
            let owner = self.owner(flow);
            // When the flow started (on `sockops` its OPEN record comes later, with its first
            // other record).
            let open = self.flow_record("flow_open", flow.first_ns, flow, h.ca_state, Body::Open { owner });
            self.line(&open)?;
        }
        let rec = match ev {
            Event::Open(_) => return Ok(()),
            Event::End(_) => {
                let Some(summary) = self.summary(flow) else { return Ok(()) };
                self.flow_record("flow_summary", h.ts_ns, flow, h.ca_state, Body::Summary(Box::new(summary)))
            }
            Event::Sample(s) if s.closing => self.flow_record(
                "flow_close",
                h.ts_ns,
                flow,
                h.ca_state,
                Body::Close {
                    duration_s: flow.duration_ns() as f64 / 1e9,
                    goodput_bps: flow.mean_goodput_bps(),
                    retransmit_events: flow.retransmits,
                    retrans_coalesced: s.retrans_coalesced,
                    metrics: &s.metrics,
                },
            ),
            Event::Sample(s) => self.flow_record(
                "sample",
                h.ts_ns,
                flow,
                h.ca_state,
                Body::Sample {
                    state: tcp_state_name(h.tcp_state),
                    acks: s.acks,
                    throughput_bps: flow.throughput_bps,
                    retrans_coalesced: s.retrans_coalesced,
                    metrics: &s.metrics,
                },
            ),
            Event::Retransmit(r) => self.flow_record(
                "retransmit",
                h.ts_ns,
                flow,
                h.ca_state,
                Body::Retransmit { segs: r.segs, retrans_total: r.retrans_total, cwnd: r.cwnd, ssthresh: r.ssthresh },
            ),
            Event::CongState(c) => self.flow_record(
                "cong_state",
                h.ts_ns,
                flow,
                c.to,
                Body::CongState { from: c.from, to: c.to, cwnd: c.cwnd, ssthresh: c.ssthresh },
            ),
        };
        self.line(&rec)
    }

    pub fn stats(&mut self, now_ns: u64, stats: &StatsReport) -> io::Result<()> {
        let rec = StatsRecord { ty: "stats", ts: self.clock.unix_secs(now_ns), stats };
        self.line(&rec)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Bbr, Head, RetransmitEvent, SampleEvent};

    fn metrics(acked: u64) -> Metrics {
        Metrics {
            cwnd: Some(10),
            ssthresh: None,
            srtt_us: Some(100_000),
            rttvar_us: Some(5_000),
            min_rtt_us: Some(99_000),
            pacing_rate_bps: Some(12_000_000),
            delivery_rate_bps: Some(10_000_000),
            delivery_app_limited: Some(false),
            bytes_acked: Some(acked),
            bytes_sent: Some(acked + 1000),
            bytes_retrans: Some(0),
            bytes_received: Some(0),
            retrans_total: Some(0),
            data_segs_out: Some(1),
            segs_out: Some(2),
            segs_in: Some(2),
            data_segs_in: Some(0),
            unacked: Some(3),
            in_flight: Some(3),
            lost: Some(0),
            sacked: Some(0),
            retrans_out: Some(0),
            delivered: Some(5),
            mss: Some(1448),
            snd_wnd: Some(65535),
            bbr: Some(Bbr {
                mode: Some("probe_bw".into()),
                bw_bps: Some(9_000_000),
                min_rtt_us: Some(99_000),
                pacing_gain: Some(1.25),
                cwnd_gain: Some(2.0),
                full_bw_reached: Some(true),
                cycle_idx: Some(0),
            }),
            cubic: None,
        }
    }

    fn head(ts_ns: u64, first: bool) -> Head {
        Head {
            flow: 4097,
            ts_ns,
            src: "10.0.0.1:5000".parse().unwrap(),
            dst: "[2001:db8::2]:443".parse().unwrap(),
            ca_state: crate::event::CaState::Open,
            first,
            tcp_state: 0,
        }
    }

    fn sample(ts_ns: u64, acked: u64, closing: bool) -> Event {
        Event::Sample(Box::new(SampleEvent {
            head: head(ts_ns, ts_ns == 0),
            closing,
            cc: "bbr".into(),
            acks: 7,
            retrans_coalesced: 0,
            metrics: metrics(acked),
        }))
    }

    #[test]
    fn records_have_the_documented_shape() {
        let mut out = Vec::new();
        let mut sink = JsonSink::new(&mut out, Clock::with_offset(1_700_000_000_000_000_000));
        let mut table = FlowTable::new(0);
        let events = [
            sample(0, 1_000, false),
            sample(1_000_000_000, 1_251_000, false),
            Event::Retransmit(RetransmitEvent {
                head: head(1_100_000_000, false),
                segs: 1,
                retrans_total: 1,
                cwnd: 7,
                ssthresh: Some(7),
            }),
            sample(2_000_000_000, 2_501_000, true),
        ];
        for ev in &events {
            let change = table.apply(ev);
            sink.event(ev, change, &table).unwrap();
        }
        let lines: Vec<serde_json::Value> =
            String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["flow_open", "sample", "sample", "retransmit", "flow_close"]);
        for l in &lines {
            assert_eq!(l["cookie"], 4097);
            assert_eq!(l["src"], "10.0.0.1:5000");
            assert_eq!(l["dst"], "[2001:db8::2]:443");
            assert_eq!(l["cc"], "bbr");
            assert!(l["ts"].as_f64().unwrap() >= 1_700_000_000.0);
        }
        let s = &lines[2];
        assert_eq!(s["ssthresh"], serde_json::Value::Null);
        assert_eq!(s["srtt_us"], 100_000);
        assert_eq!(s["bbr"]["mode"], "probe_bw");
        assert_eq!(s["bbr"]["pacing_gain"], 1.25);
        // 1.25 MB in one second.
        assert_eq!(s["throughput_bps"], 10_000_000);
        assert_eq!(lines[3]["segs"], 1);
        let close = &lines[4];
        assert_eq!(close["duration_s"], 2.0);
        assert_eq!(close["goodput_bps"], 10_000_000);
        assert_eq!(close["retransmit_events"], 1);
    }
}

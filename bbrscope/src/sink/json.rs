//! `bbrscope stream`'s output: one JSON object per line. The schema is documented in
//! docs/stream.md; every object has `type` and `ts` (Unix seconds), flow objects also `cookie`,
//! `src`, `dst`, `cc` and `ca_state`.

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    clock::Clock,
    event::{CaState, Event, Metrics},
    flow::{Change, Flow, FlowTable},
    stats::StatsReport,
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

#[derive(Serialize)]
#[serde(untagged)]
enum Body<'a> {
    Open {},
    Sample {
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
}

impl<W: Write> JsonSink<W> {
    pub fn new(out: W, clock: Clock) -> Self {
        JsonSink { out, clock }
    }

    fn line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }

    fn flow_record<'a>(&self, ty: &'static str, ts_ns: u64, flow: &'a Flow, state: CaState, body: Body<'a>) -> FlowRecord<'a> {
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
            let open = self.flow_record("flow_open", h.ts_ns, flow, h.ca_state, Body::Open {});
            self.line(&open)?;
        }
        let rec = match ev {
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

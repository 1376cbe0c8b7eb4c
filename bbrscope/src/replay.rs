//! Reading a recorded `bbrscope stream` (NDJSON) back into events, so the dashboard can replay
//! a capture without root or a kernel.

use std::net::SocketAddr;

use anyhow::{Context as _, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    event::{CaState, CongStateEvent, Event, Head, Metrics, RetransmitEvent, SampleEvent},
    stats::StatsReport,
};

#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Event(Event),
    /// `ts_ns` and the report.
    Stats(u64, StatsReport),
}

impl Record {
    pub fn ts_ns(&self) -> u64 {
        match self {
            Record::Event(e) => e.head().ts_ns,
            Record::Stats(ts, _) => *ts,
        }
    }
}

#[derive(Deserialize)]
struct FlowFields {
    ts: f64,
    cookie: u64,
    src: SocketAddr,
    dst: SocketAddr,
    cc: String,
    ca_state: CaState,
}

#[derive(Deserialize)]
struct SampleFields {
    #[serde(default)]
    acks: u32,
    #[serde(default)]
    retrans_coalesced: u32,
}

#[derive(Deserialize)]
struct RetransmitFields {
    segs: u32,
    retrans_total: u32,
    cwnd: u32,
    ssthresh: Option<u32>,
}

#[derive(Deserialize)]
struct CongStateFields {
    from: CaState,
    to: CaState,
    cwnd: u32,
    ssthresh: Option<u32>,
}

fn secs_to_ns(ts: f64) -> u64 {
    (ts * 1e9).round() as u64
}

/// One line of `bbrscope stream` output. `Ok(None)` for lines that carry nothing to replay
/// (`flow_open`: the flow's first sample introduces it) and for types this version does not know.
pub fn parse_line(line: &str) -> Result<Option<Record>> {
    let v: Value = serde_json::from_str(line).context("not JSON")?;
    let ty = v.get("type").and_then(Value::as_str).context("no \"type\" field")?;
    if ty == "stats" {
        let ts = v.get("ts").and_then(Value::as_f64).context("stats without ts")?;
        return Ok(Some(Record::Stats(secs_to_ns(ts), StatsReport::deserialize(&v)?)));
    }
    if !["sample", "flow_close", "retransmit", "cong_state"].contains(&ty) {
        return Ok(None);
    }
    let f = FlowFields::deserialize(&v).with_context(|| format!("{ty} record"))?;
    let head = Head {
        flow: f.cookie,
        ts_ns: secs_to_ns(f.ts),
        src: f.src,
        dst: f.dst,
        ca_state: f.ca_state,
        first: false,
        tcp_state: 0,
    };
    let ev = match ty {
        "retransmit" => {
            let r = RetransmitFields::deserialize(&v)?;
            Event::Retransmit(RetransmitEvent {
                head,
                segs: r.segs,
                retrans_total: r.retrans_total,
                cwnd: r.cwnd,
                ssthresh: r.ssthresh,
            })
        }
        "cong_state" => {
            let c = CongStateFields::deserialize(&v)?;
            Event::CongState(CongStateEvent { head, from: c.from, to: c.to, cwnd: c.cwnd, ssthresh: c.ssthresh })
        }
        _ => {
            let s = SampleFields::deserialize(&v)?;
            Event::Sample(Box::new(SampleEvent {
                head,
                closing: ty == "flow_close",
                cc: f.cc,
                acks: s.acks,
                retrans_coalesced: s.retrans_coalesced,
                metrics: Metrics::deserialize(&v)?,
            }))
        }
    };
    Ok(Some(Record::Event(ev)))
}

/// Every record of a recording, in time order; names the line of the first bad one.
pub fn parse_all(text: &str) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        if let Some(r) = parse_line(line).with_context(|| format!("line {}", i + 1))? {
            out.push(r);
        }
    }
    out.sort_by_key(Record::ts_ns);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_stream_writes() {
        let text = r#"{"type":"stats","ts":1.5,"interval_s":1.0,"events_per_s":10.0,"records_per_s":2.0,"drops_per_s":0.0,"drops_total":0,"retrans_coalesced_total":0,"untracked_total":0,"flows_seen_total":1,"flows_filtered_total":0,"flows_active":1,"cpu_cores":0.01,"ns_per_event":null}
{"type":"flow_open","ts":1.0,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open"}
{"type":"sample","ts":1.0,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open","acks":3,"throughput_bps":null,"retrans_coalesced":0,"cwnd":10,"ssthresh":null,"srtt_us":1000,"bbr":null,"cubic":{"w_max":20}}
{"type":"retransmit","ts":1.2,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"recovery","segs":1,"retrans_total":1,"cwnd":7,"ssthresh":7}
{"type":"something_new","ts":2.0}
"#;
        let recs = parse_all(text).unwrap();
        assert_eq!(recs.len(), 3);
        let Record::Event(Event::Sample(s)) = &recs[0] else { panic!("{:?}", recs[0]) };
        assert_eq!((s.head.flow, s.cc.as_str(), s.metrics.cwnd, s.metrics.srtt_us), (7, "cubic", Some(10), Some(1000)));
        assert_eq!(s.metrics.mss, None);
        assert!(matches!(&recs[1], Record::Event(Event::Retransmit(r)) if r.head.ca_state == CaState::Recovery));
        assert!(matches!(&recs[2], Record::Stats(1_500_000_000, s) if s.flows_active == 1));
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse_all("{\"type\":\"stats\"}\n").unwrap_err();
        assert!(format!("{err:#}").contains("line 1"), "{err:#}");
        assert!(parse_all("not json").is_err());
    }
}

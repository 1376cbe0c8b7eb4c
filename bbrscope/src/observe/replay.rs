//! Reading a recorded `bbrscope stream` (NDJSON) back into events, so the dashboard can replay
//! a capture without root or a kernel.
//!
//! Recordings end the way their recorders did: a killed `stream` or a full disk leaves a
//! truncated last line, a copy may carry a corrupt one. [`Reader`] skips such lines and counts
//! them, so one bad line never costs the rest. It reads one line at a time, never holding more
//! than [`MAX_LINE`] bytes of a line, so `/dev/zero` or a binary file cannot grow memory; input
//! with no record at all in its first [`MAX_LEADING_JUNK`] bytes is refused as not a recording.

use std::io::BufRead;

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use serde_json::Value;

use crate::{
    observe::event::{Bbr, CongStateEvent, Event, Head, Metrics, OpenEvent, Owner, RetransmitEvent, SampleEvent},
    observe::schema,
    observe::stats::StatsReport,
    sys::name::Name,
};

#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Event(Event),
    /// A `flow_summary`, as the flow's opening and its final state: for a flow the recording
    /// has nothing else of (on the `sockops` observer, one that closed before its first sample
    /// is its summary alone), to be played only when the flow is not known already.
    Summary(Box<Summary>),
    /// `ts_ns` and the report.
    Stats(u64, Box<StatsReport>),
}

/// What a `flow_summary` says, as the events that open a flow (owner, start) and close it.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub(crate) open: OpenEvent,
    /// The final state, as far as the summary has it (no window, no loss counts: it has
    /// the final counters, RTTs and rates).
    pub(crate) close: SampleEvent,
    /// The flow's start was seen (`start_ts` given): the recording has it whole.
    pub(crate) start_known: bool,
}

impl Record {
    pub fn ts_ns(&self) -> u64 {
        match self {
            Record::Event(e) => e.head().ts_ns,
            Record::Summary(s) => s.close.head.ts_ns,
            Record::Stats(ts, _) => *ts,
        }
    }
}

fn secs_to_ns(ts: f64) -> u64 {
    (ts * 1e9).round() as u64
}

/// A `flow_summary` as the opening and closing of its flow.
fn summary(head: Head, cc: Name, v: &Value) -> Result<Summary> {
    let f = schema::Summary::deserialize(v)?;
    // The counters, RTT minimum and rates have the same names in a summary as in a sample.
    let mut metrics = Metrics::deserialize(v)?;
    metrics.srtt_us = f.srtt_last_us;
    if f.bbr_bw_bps.is_some() {
        metrics.bbr = Some(Bbr {
            mode: None,
            bw_bps: f.bbr_bw_bps,
            min_rtt_us: None,
            pacing_gain: None,
            cwnd_gain: None,
            full_bw_reached: None,
            cycle_idx: None,
        });
    }
    let o = f.owner;
    let owner = Owner {
        side: match o.side.as_deref() {
            Some("connect") => Some("connect"),
            Some("accept") => Some("accept"),
            _ => None,
        },
        pid: o.pid,
        comm: o.comm,
        cgroup_id: o.cgroup_id,
        netns: o.netns,
        arm: match o.arm.as_deref() {
            Some("a") => Some(1),
            Some("b") => Some(2),
            _ => None,
        },
        status_quo: o.status_quo.as_deref().and_then(schema::status_quo_of),
        sock_ino: None,
    };
    let open = OpenEvent {
        head: Head { first: true, ..head.clone() },
        cc,
        owner,
        start_ns: f.start_ts.map_or(head.ts_ns, secs_to_ns),
        retrans_at_open: f.retrans_at_open,
        summary_only: true,
    };
    let close = SampleEvent { head, closing: true, cc, acks: 0, retrans_coalesced: 0, metrics };
    Ok(Summary { open, close, start_known: f.start_ts.is_some() })
}

/// One line of `bbrscope stream` output. `Ok(None)` for lines that carry nothing to replay
/// (`flow_open`: the flow's first sample introduces it) and for types this version does not know.
/// A `flow_summary` is a [`Record::Summary`], which opens and closes its flow when played if
/// nothing else of the flow was.
pub fn parse_line(line: &str) -> Result<Option<Record>> {
    let v: Value = serde_json::from_str(line).context("not JSON")?;
    let ty = v.get("type").and_then(Value::as_str).context("no \"type\" field")?;
    if ty == "stats" {
        v.get("ts").and_then(Value::as_f64).context("stats without ts")?;
        let s = schema::Stats::deserialize(&v)?;
        return Ok(Some(Record::Stats(secs_to_ns(s.ts), Box::new(s.stats.into_owned()))));
    }
    if !["sample", "flow_close", "retransmit", "cong_state", "flow_summary"].contains(&ty) {
        return Ok(None);
    }
    let f = schema::FlowHead::deserialize(&v).with_context(|| format!("{ty} record"))?;
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
        "flow_summary" => return Ok(Some(Record::Summary(Box::new(summary(head, f.cc, &v)?)))),
        "retransmit" => {
            let r = schema::Retransmit::deserialize(&v)?;
            Event::Retransmit(RetransmitEvent {
                head,
                segs: r.segs,
                retrans_total: r.retrans_total,
                cwnd: r.cwnd,
                ssthresh: r.ssthresh,
            })
        }
        "cong_state" => {
            let c = schema::CongState::deserialize(&v)?;
            Event::CongState(CongStateEvent { head, from: c.from, to: c.to, cwnd: c.cwnd, ssthresh: c.ssthresh })
        }
        "flow_close" => {
            let s = schema::Close::deserialize(&v)?;
            Event::Sample(Box::new(SampleEvent {
                head,
                closing: true,
                cc: f.cc,
                acks: 0,
                retrans_coalesced: s.retrans_coalesced,
                metrics: s.metrics.into_owned(),
            }))
        }
        _ => {
            let s = schema::Sample::deserialize(&v)?;
            Event::Sample(Box::new(SampleEvent {
                head,
                closing: false,
                cc: f.cc,
                acks: s.acks,
                retrans_coalesced: s.retrans_coalesced,
                metrics: s.metrics.into_owned(),
            }))
        }
    };
    Ok(Some(Record::Event(ev)))
}

/// The longest line kept: a `stream` record is well under 2 KiB, so anything longer is not one.
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// Input with no record in this many leading bytes is not a recording (a binary file, a device).
pub(crate) const MAX_LEADING_JUNK: u64 = 1 << 20;
/// A line longer than this after records were read ends the input (a runaway writer, a device):
/// skipping it would read without end.
pub(crate) const MAX_SKIPPED_LINE: u64 = 16 << 20;

/// Lines left out of a replay, and why the first of them was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    pub lines: u64,
    /// "line 17: not JSON", for the report.
    pub(crate) first: Option<String>,
}

impl Skipped {
    fn note(&mut self, line: u64, why: &str) {
        self.lines += 1;
        if self.first.is_none() {
            self.first = Some(format!("line {line}: {why}"));
        }
    }

    /// "3 unreadable lines skipped (first: line 17: not JSON)", or `None` when there were none.
    pub(crate) fn describe(&self) -> Option<String> {
        (self.lines > 0).then(|| {
            format!(
                "{} unreadable line{} skipped (first: {})",
                self.lines,
                if self.lines == 1 { "" } else { "s" },
                self.first.as_deref().unwrap_or("?")
            )
        })
    }
}

/// Records from NDJSON input, one line at a time, with bounded memory (see the module docs).
pub(crate) struct Reader<R> {
    inner: R,
    line: u64,
    bytes: u64,
    records: u64,
    buf: Vec<u8>,
    /// A line longer than this after records were read ends the input ([`MAX_SKIPPED_LINE`]).
    skip_limit: u64,
    pub(crate) skipped: Skipped,
}

impl<R: BufRead> Reader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Reader {
            inner,
            line: 0,
            bytes: 0,
            records: 0,
            buf: Vec::new(),
            skip_limit: MAX_SKIPPED_LINE,
            skipped: Skipped::default(),
        }
    }

    /// A reader of input known to end (a regular file): a line of any length is skipped, in
    /// bounded memory, and reading goes on after it.
    pub(crate) fn of_file(inner: R) -> Self {
        Reader { skip_limit: u64::MAX, ..Self::new(inner) }
    }

    /// The next record, `Ok(None)` at the end of the input. Unreadable lines are skipped and
    /// counted in [`Reader::skipped`]; an error means the input cannot be read on (I/O error,
    /// not a recording at all, a line without end).
    pub(crate) fn next_record(&mut self) -> Result<Option<Record>> {
        self.next_parsed(parse_line)
    }

    /// The next line as JSON, whatever its record type (`Ok(None)` at the end of the input);
    /// lines too long, not UTF-8 or not JSON are skipped and counted as [`Reader::next_record`]
    /// does. For readers of captures other than the dashboard (`experiment --analyze`).
    pub(crate) fn next_value(&mut self) -> Result<Option<Value>> {
        self.next_parsed(|text| serde_json::from_str(text).map(Some).map_err(|_| anyhow::anyhow!("not JSON")))
    }

    /// The next line `parse` makes something of (`Ok(None)` from it: a line to pass over).
    fn next_parsed<T>(&mut self, parse: impl Fn(&str) -> Result<Option<T>>) -> Result<Option<T>> {
        loop {
            let Some(too_long) = self.read_line()? else { return Ok(None) };
            if too_long {
                self.skipped.note(self.line, &format!("longer than {} KiB", MAX_LINE / 1024));
                continue;
            }
            let Ok(text) = std::str::from_utf8(&self.buf) else {
                self.skipped.note(self.line, "not UTF-8");
                self.check_leading_junk()?;
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            match parse(text) {
                Ok(Some(r)) => {
                    self.records += 1;
                    return Ok(Some(r));
                }
                Ok(None) => {}
                Err(e) => {
                    self.skipped.note(self.line, &format!("{e:#}"));
                    self.check_leading_junk()?;
                }
            }
        }
    }

    /// Counts a line the caller could not use (`why` says why, for the first one).
    pub(crate) fn reject(&mut self, why: &str) {
        self.skipped.note(self.line, why);
    }

    fn check_leading_junk(&self) -> Result<()> {
        if self.records == 0 && self.bytes > MAX_LEADING_JUNK {
            bail!("no bbrscope record in its first {} MiB", MAX_LEADING_JUNK >> 20);
        }
        Ok(())
    }

    /// Reads the next line into `buf` (without keeping more than [`MAX_LINE`] bytes of it):
    /// `Some(true)` when it was longer and dropped, `None` at the end of the input.
    fn read_line(&mut self) -> Result<Option<bool>> {
        self.buf.clear();
        let (mut any, mut too_long, mut len) = (false, false, 0u64);
        loop {
            let chunk = match self.inner.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading"),
            };
            if chunk.is_empty() {
                if any {
                    self.line += 1;
                }
                return Ok(any.then_some(too_long));
            }
            any = true;
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if !too_long {
                if self.buf.len() + take > MAX_LINE + 1 {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            self.inner.consume(take);
            self.bytes += take as u64;
            len += take as u64;
            if done {
                self.line += 1;
                return Ok(Some(too_long));
            }
            if too_long {
                self.check_leading_junk()?;
                if len > self.skip_limit {
                    bail!("line {} runs over {} MiB without a newline", self.line + 1, MAX_SKIPPED_LINE >> 20);
                }
            }
        }
    }
}

/// A whole recording read at once.
#[derive(Debug)]
pub struct Recording {
    /// In time order.
    pub records: Vec<Record>,
    pub skipped: Skipped,
}

/// Every readable record of `text`, in time order, with what was skipped.
pub fn parse_all(text: &str) -> Result<Recording> {
    let mut reader = Reader::new(text.as_bytes());
    let mut records = Vec::new();
    while let Some(r) = reader.next_record()? {
        records.push(r);
    }
    records.sort_by_key(Record::ts_ns);
    Ok(Recording { records, skipped: reader.skipped })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::event::CaState;

    #[test]
    fn reads_back_what_stream_writes() {
        let text = r#"{"type":"stats","ts":1.5,"interval_s":1.0,"events_per_s":10.0,"records_per_s":2.0,"drops_per_s":0.0,"drops_total":0,"retrans_coalesced_total":0,"untracked_total":0,"flows_seen_total":1,"flows_filtered_total":0,"flows_active":1,"cpu_cores":0.01,"ns_per_event":null}
{"type":"flow_open","ts":1.0,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open"}
{"type":"sample","ts":1.0,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open","acks":3,"throughput_bps":null,"retrans_coalesced":0,"cwnd":10,"ssthresh":null,"srtt_us":1000,"bbr":null,"cubic":{"w_max":20}}
{"type":"retransmit","ts":1.2,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"recovery","segs":1,"retrans_total":1,"cwnd":7,"ssthresh":7}
{"type":"something_new","ts":2.0}
"#;
        let recs = parse_all(text).unwrap().records;
        assert_eq!(recs.len(), 3);
        let Record::Event(Event::Sample(s)) = &recs[0] else { panic!("{:?}", recs[0]) };
        assert_eq!((s.head.flow, s.cc.as_str(), s.metrics.cwnd, s.metrics.srtt_us), (7, "cubic", Some(10), Some(1000)));
        assert_eq!(s.metrics.mss, None);
        assert!(matches!(&recs[1], Record::Event(Event::Retransmit(r)) if r.head.ca_state == CaState::Recovery));
        assert!(matches!(&recs[2], Record::Stats(1_500_000_000, s) if s.flows_active == 1));
    }

    /// A summary opens and closes a flow the recording has nothing else of (one that closed before
    /// its first sample), with its owner, start and final counters; the summary of a flow that
    /// was shown live changes nothing (its `flow_close` closed it with the full final state).
    #[test]
    fn a_summary_alone_opens_and_closes_its_flow() {
        let head = |ty: &str, ts: &str, cookie: u32, port: u32| {
            format!(
                r#"{{"type":"{ty}","ts":{ts},"cookie":{cookie},"src":"10.0.0.1:80","dst":"10.0.0.2:{port}","cc":"bbr","ca_state":"open""#
            )
        };
        let summary = |ts: &str, cookie: u32, port: u32| {
            format!(
                r#"{},"start_ts":{},"duration_s":0.5,"end":"fin","side":"accept","pid":42,"comm":"nginx","cgroup":"/","cgroup_id":1,"netns":4026531840,"arm":"b","ccs":["bbr"],"bbr_modes":["startup"],"bytes_sent":15000,"bytes_acked":15001,"bytes_received":80,"bytes_retrans":0,"segs_out":14,"segs_in":9,"data_segs_out":11,"data_segs_in":1,"retrans_total":0,"retrans_at_open":1,"retransmit_events":0,"retrans_coalesced":0,"retrans_failed":0,"srtt_first_us":90,"srtt_min_us":80,"srtt_median_us":95,"srtt_max_us":120,"srtt_last_us":100,"min_rtt_us":70,"cwnd_max":20,"ca_state_s":{{"open":0.5,"disorder":0.0,"cwr":0.0,"recovery":0.0,"loss":0.0}},"goodput_bps":240016,"delivery_rate_bps":9000000,"delivery_app_limited":true,"pacing_rate_bps":30000000,"bbr_bw_bps":8000000,"mss":1448,"samples":1,"rtt_events":8,"slow_path_acks":3,"send_events":0}}"#,
                head("flow_summary", ts, cookie, port),
                ts.parse::<f64>().unwrap() - 0.5,
            )
        };
        let text = [
            format!(
                r#"{},"side":"accept","pid":42,"comm":"nginx","cgroup":"/","cgroup_id":1,"netns":4026531840}}"#,
                head("flow_open", "10.0", 1, 5000)
            ),
            format!(r#"{},"acks":3,"cwnd":10,"srtt_us":90,"bytes_acked":500}}"#, head("sample", "10.1", 1, 5000)),
            format!(r#"{},"cwnd":12,"srtt_us":95,"bytes_acked":900000}}"#, head("flow_close", "11.0", 1, 5000)),
            summary("11.0", 1, 5000),
            summary("12.0", 2, 6000),
        ]
        .join("\n");
        let recording = parse_all(&text).unwrap();
        assert_eq!((recording.records.len(), recording.skipped.lines), (4, 0), "{:?}", recording.skipped);
        let Record::Summary(s) = &recording.records[3] else { panic!("{:?}", recording.records[3]) };
        assert_eq!((s.open.start_ns, s.close.head.ts_ns), (11_500_000_000, 12_000_000_000));
        assert_eq!((s.close.metrics.srtt_us, s.close.metrics.mss), (Some(100), Some(1448)));
        assert_eq!(s.close.metrics.bbr.as_ref().and_then(|b| b.bw_bps), Some(8_000_000));
        let mut table = crate::tui::app::App::table();
        for r in &recording.records {
            match r {
                Record::Event(ev) => {
                    table.apply(ev);
                }
                Record::Summary(s) => crate::tui::play_summary(&mut table, s),
                Record::Stats(..) => {}
            }
        }
        let live = table.get(1).unwrap();
        let m = live.metrics.as_ref().unwrap();
        assert_eq!((m.cwnd, m.bytes_acked), (Some(12), Some(900_000)), "its flow_close's final state");
        let alone = table.get(2).unwrap();
        assert_eq!((alone.first_ns, alone.closed_ns), (11_500_000_000, Some(12_000_000_000)));
        let m = alone.metrics.as_ref().unwrap();
        assert_eq!((m.bytes_acked, m.retrans_total, m.min_rtt_us), (Some(15001), Some(0), Some(70)));
        let owner = alone.life.owner.as_ref().unwrap();
        assert_eq!((owner.side, owner.comm.as_deref(), owner.arm), (Some("accept"), Some("nginx"), Some(2)));
        assert_eq!(alone.life.retrans_at_open, 1);
    }

    const SAMPLE: &str = r#"{"type":"sample","ts":1.0,"cookie":7,"src":"10.0.0.1:1","dst":"10.0.0.2:2","cc":"cubic","ca_state":"open","acks":3,"throughput_bps":null,"retrans_coalesced":0,"cwnd":10,"ssthresh":null,"srtt_us":1000,"bbr":null,"cubic":null}"#;

    /// What a killed recorder or a full disk leaves: a corrupt line in the middle and a
    /// truncated last one. Both are skipped and named; the rest replays.
    #[test]
    fn bad_and_truncated_lines_are_skipped_and_counted() {
        let text = format!("{SAMPLE}\n{{\"type\":\"stats\"}}\nnot json\n{SAMPLE}\n{}", &SAMPLE[..60]);
        let r = parse_all(&text).unwrap();
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.skipped.lines, 3);
        let d = r.skipped.describe().unwrap();
        assert!(d.starts_with("3 unreadable lines skipped (first: line 2: stats without ts"), "{d}");
        assert_eq!(parse_all(SAMPLE).unwrap().skipped.describe(), None);
    }

    #[test]
    fn overlong_and_binary_lines_are_skipped_without_being_kept() {
        let long = format!("{{\"type\":\"{}\"}}", "x".repeat(MAX_LINE * 3));
        let text = format!("{SAMPLE}\n{long}\n\u{0}\u{1}\n{SAMPLE}\n");
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\n");
        let mut reader = Reader::new(&bytes[..]);
        let mut n = 0;
        while reader.next_record().unwrap().is_some() {
            n += 1;
            assert!(reader.buf.capacity() <= 2 * MAX_LINE + 2, "{}", reader.buf.capacity());
        }
        assert_eq!((n, reader.skipped.lines), (2, 3));
        assert!(reader.skipped.first.as_deref().unwrap().contains("longer than 64 KiB"));
    }

    /// `/dev/zero`, or any input that never holds a record: refused after a bounded read.
    #[test]
    fn endless_junk_is_refused_after_a_bounded_read() {
        let zeros = std::io::BufReader::new(std::io::repeat(0));
        let mut reader = Reader::new(zeros);
        let e = reader.next_record().unwrap_err();
        assert!(format!("{e:#}").contains("no bbrscope record in its first 1 MiB"), "{e:#}");
        assert!(reader.bytes <= MAX_LEADING_JUNK + 64 * 1024);
        // Short junk lines as well as one long one.
        let lines = std::io::BufReader::new(std::io::Read::chain(&b"junk\n"[..], std::io::repeat(b'\n')));
        let mut many = Reader::new(std::io::Read::take(lines, 4 << 20));
        assert!(many.next_record().is_ok(), "empty lines are not junk");
        let junk = "junk\n".repeat(300_000);
        assert!(Reader::new(junk.as_bytes()).next_record().is_err());
        // After records, an endless line ends the input with an error instead of reading on.
        let first = format!("{SAMPLE}\n").into_bytes();
        let after = std::io::Read::chain(first.as_slice(), std::io::repeat(b'x'));
        let mut r = Reader::new(std::io::BufReader::new(after));
        assert!(r.next_record().unwrap().is_some());
        assert!(format!("{:#}", r.next_record().unwrap_err()).contains("without a newline"));
    }
}

//! The `--record` file of an experiment and reading it back (`--analyze`).
//!
//! The file is the experiment's own flows in the `stream` format (docs/stream.md), between a
//! first line that says what was asked and a last line that says how it ended:
//! ```text
//! {"type":"experiment","arms":["cubic","bbr"],"split_pct":50,"scope":{"known":true,"port":443,...},
//!  "guardrail_pct":20.0,"delta_pct":5.0,"min_effect_ms":5.0,"design":"switchback",
//!  "schedule":{"block_s":15.0,"burn_in_s":3.0,"seed":1234}}
//! (a client design: "design":"client","salt":1234; a per-connection A/B: "design":"per_connection")
//! ... flow_open, sample, flow_summary (with "arm") ...
//! {"type":"flow_in_flight","arm":"a","cc":"cubic","peer":"203.0.113.9","bytes":1048576,
//!  "duration_s":12.5,"handshake_s":0.05,"end_ts":1700000000.5,...}
//! {"type":"experiment_end","stopped_by":"stopped early by the guardrail: ...","guardrail":{...}}
//! ```
//! (one `flow_in_flight` per flow still running after the drain, each as the analysis took it)
//! so that `--analyze` judges a recording as the live run did: the arms asked (not guessed from
//! the flows), the design (a switchback's blocks, a client design's salt), the scope (a recommendation never wider), and a guardrail stop kept. Reading is
//! bounded and forgiving: lines too long, not UTF-8 or not JSON are skipped and counted, a
//! summary with impossible values is rejected and counted, and a flow recorded twice (a capture
//! concatenated with itself) counts once.

use std::{
    collections::HashSet,
    fs::File,
    io::{BufRead, Write as _},
    net::IpAddr,
    path::Path,
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::{
    Observation,
    decide::PrimaryMetric,
    groups::PrefixList,
    guardrail::GuardDecision,
    report::InScope,
    schedule::Schedule,
    setup::{Design, Setup},
};
use crate::{
    newfile::{self, NewFile},
    observe::{
        replay::{Reader, Skipped},
        schema,
    },
};

#[derive(Serialize, Deserialize)]
struct Header {
    arms: [String; 2],
    split_pct: u32,
    scope: InScope,
    guardrail_pct: Option<f64>,
    delta_pct: f64,
    min_effect_ms: f64,
    /// What the connections would have run without the experiment (absent in recordings made
    /// before it was kept: the guardrail's replay then watches both arms).
    #[serde(default)]
    status_quo: Option<String>,
    /// `--prefix-list`'s groups as `LABEL CIDR...` lines, so that `--analyze` judges the same
    /// family of groups as the live run (absent in older recordings, and when none was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prefix_list: Option<String>,
    /// How connections got their arms: `per_connection`, or `switchback` with its `schedule`
    /// (absent in recordings made before the switchback: per connection).
    #[serde(default)]
    design: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schedule: Option<Schedule>,
    /// A `client` design's salt (its `--seed`): which clients got B.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    salt: Option<u64>,
    /// The primary metric the run declared: `time_weighted` or `per_response` (absent in
    /// recordings made before `--metric`: the design's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metric: Option<String>,
}

/// A metric's name in a header (and in an experiment's series): `time_weighted`, `per_response`.
pub(super) fn metric_key(metric: PrimaryMetric) -> String {
    serde_json::to_value(metric).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

/// The metric `name` names (a header's or an experiment's series'), if one is known.
pub(super) fn metric_of(name: &str) -> Option<PrimaryMetric> {
    metric(Some(name)).ok().flatten()
}

/// The primary metric a header names: `Ok(None)` when it names none (the design's), `Err` for
/// one not known.
fn metric(name: Option<&str>) -> Result<Option<PrimaryMetric>, ()> {
    match name {
        None => Ok(None),
        Some(name) => serde_json::from_value(serde_json::Value::from(name)).map(Some).map_err(|_| ()),
    }
}

const PER_CONNECTION: &str = "per_connection";
pub(super) const SWITCHBACK: &str = "switchback";
pub(super) const HOST_SWITCHBACK: &str = "host_switchback";
pub(super) const CLIENT: &str = "client";

/// A design's name in a header (and in an experiment's series).
pub(super) fn design_key(design: &Design) -> &'static str {
    match design {
        Design::PerConnection => PER_CONNECTION,
        Design::Switchback(s) if s.host.is_some() => HOST_SWITCHBACK,
        Design::Switchback(_) => SWITCHBACK,
        Design::Client { .. } => CLIENT,
    }
}

/// The design a header names; `None` when it makes no sense (a switchback without its
/// schedule, or with one `--design switchback` would have refused; a client design without its
/// salt; a salt or a schedule where the design has none; a host-level switchback without its
/// host's salt, or a synchronized one with one).
pub(super) fn design(name: Option<&str>, schedule: Option<Schedule>, salt: Option<u64>) -> Option<Design> {
    match (name, schedule, salt) {
        (None | Some(PER_CONNECTION), None, None) => Some(Design::PerConnection),
        (Some(CLIENT), None, Some(salt)) => Some(Design::Client { salt }),
        (Some(name @ (SWITCHBACK | HOST_SWITCHBACK)), Some(s), None)
            if s.block_s.is_finite()
                && s.block_s >= 1.0
                && s.burn_in_s >= 0.0
                && s.burn_in_s * 2.0 < s.block_s
                && (name == HOST_SWITCHBACK) == s.host.is_some() =>
        {
            Some(Design::Switchback(s))
        }
        _ => None,
    }
}

#[derive(Serialize, Deserialize)]
struct End {
    stopped_by: Option<String>,
    guardrail: Option<GuardDecision>,
}

/// A flow still running when the experiment ended: the [`Observation`] the live report took,
/// field for field (it has no summary to read it from again).
#[derive(Serialize, Deserialize)]
struct InFlight {
    /// `a` or `b`.
    arm: String,
    cc: String,
    switched: bool,
    peer: IpAddr,
    bytes: u64,
    duration_s: f64,
    handshake_s: f64,
    end_ts: Option<f64>,
    goodput_bps: Option<u64>,
    srtt_median_us: Option<u32>,
    min_rtt_us: Option<u32>,
    retrans: u32,
    data_segs_out: u32,
    cgroup_id: Option<u64>,
    cgroup: Option<String>,
    /// As a `flow_summary`'s `status_quo`; absent in recordings made before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_quo: Option<String>,
}

impl InFlight {
    fn of(o: &Observation) -> Self {
        InFlight {
            arm: ["a", "b"][o.arm.min(1)].into(),
            cc: o.cc.clone(),
            switched: o.switched,
            peer: o.peer,
            bytes: o.bytes,
            duration_s: o.duration_s,
            handshake_s: o.handshake_s,
            end_ts: o.end_ts,
            goodput_bps: o.goodput_bps,
            srtt_median_us: o.srtt_median_us,
            min_rtt_us: o.min_rtt_us,
            retrans: o.retrans,
            data_segs_out: o.data_segs_out,
            cgroup_id: o.cgroup_id,
            cgroup: o.cgroup.clone(),
            status_quo: o.status_quo.map(|arms| schema::status_quo_word(arms).to_string()),
        }
    }

    fn observation(self) -> Option<Observation> {
        Some(Observation {
            arm: match self.arm.as_str() {
                "a" => 0,
                "b" => 1,
                _ => return None,
            },
            cc: self.cc,
            switched: self.switched,
            peer: self.peer,
            bytes: self.bytes,
            duration_s: self.duration_s,
            handshake_s: self.handshake_s,
            end_ts: self.end_ts,
            goodput_bps: self.goodput_bps,
            srtt_median_us: self.srtt_median_us,
            min_rtt_us: self.min_rtt_us,
            retrans: self.retrans,
            data_segs_out: self.data_segs_out,
            cgroup_id: self.cgroup_id,
            cgroup: self.cgroup,
            censored: true,
            status_quo: self.status_quo.as_deref().and_then(schema::status_quo_of),
            host: None,
        })
    }
}

/// Creates the record file (mode 0600: it names clients; a new file, never through a link or
/// into a file someone else made: see [`crate::newfile`]) and writes its first line.
pub(crate) fn create(path: &Path, setup: &Setup) -> Result<File> {
    let mut f = NewFile::create(path, newfile::PRIVATE)
        .and_then(NewFile::place)
        .with_context(|| format!("creating {}", path.display()))?;
    let header = Header {
        arms: setup.arms.clone().unwrap_or_default(),
        split_pct: setup.split_pct,
        scope: setup.scope.clone(),
        guardrail_pct: setup.guardrail_pct,
        delta_pct: setup.rule.delta * 100.0,
        min_effect_ms: setup.rule.min_abs_s * 1e3,
        status_quo: setup.status_quo.clone(),
        prefix_list: (!setup.prefix_lists.is_empty()).then(|| PrefixList::to_text(&setup.prefix_lists)),
        design: Some(design_key(&setup.design).into()),
        schedule: setup.design.schedule(),
        salt: match setup.design {
            Design::Client { salt } => Some(salt),
            Design::PerConnection | Design::Switchback(_) => None,
        },
        // The metric the run answers in, named even where it is the design's, so that a later
        // default cannot change what `--analyze` judges.
        metric: Some(metric_key(setup.metric.unwrap_or_else(|| PrimaryMetric::default_for(&setup.design)))),
    };
    let mut v = serde_json::to_value(&header)?;
    v["type"] = "experiment".into();
    writeln!(f, "{v}").with_context(|| format!("writing {}", path.display()))?;
    Ok(f)
}

/// Appends the flows of `obs` still running at the end (one `flow_in_flight` line each) and the
/// last line, how the experiment ended, to `f`: a descriptor of the file [`create`] made (shared
/// with the recorder, which has flushed), never the path opened again, where another user could
/// have put a link since.
pub(crate) fn end(
    f: &mut File,
    path: &Path,
    obs: &[Observation],
    stopped_by: Option<&str>,
    guard: Option<&GuardDecision>,
) -> Result<()> {
    let write =
        |f: &mut File, v: serde_json::Value| writeln!(f, "{v}").with_context(|| format!("writing {}", path.display()));
    for o in obs.iter().filter(|o| o.censored) {
        let mut v = serde_json::to_value(InFlight::of(o))?;
        v["type"] = "flow_in_flight".into();
        write(f, v)?;
    }
    let mut v = serde_json::to_value(End { stopped_by: stopped_by.map(str::to_string), guardrail: guard.cloned() })?;
    v["type"] = "experiment_end".into();
    write(f, v)
}

/// A recording read back.
#[derive(Debug, Default)]
pub struct Capture {
    pub obs: Vec<Observation>,
    /// From its first line (defaults for a capture without one).
    pub setup: Setup,
    pub(crate) stopped_by: Option<String>,
    pub(crate) guard: Option<GuardDecision>,
    pub(crate) skipped: Skipped,
    /// Summaries with impossible values (negative or non-finite times, durations over 30 days,
    /// more bytes than any flow carries).
    pub(crate) rejected: u64,
    /// Flows recorded more than once, counted once.
    pub(crate) duplicates: u64,
    /// Whether the first line said what was asked.
    pub has_header: bool,
}

impl Capture {
    /// What the reader of the report must know about the input, one line each.
    pub(crate) fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        out.extend(self.skipped.describe());
        if self.rejected > 0 {
            out.push(format!("{} flow summaries with impossible values left out", self.rejected));
        }
        if self.duplicates > 0 {
            out.push(format!("{} flows recorded more than once counted once", self.duplicates));
        }
        if !self.has_header {
            out.push(
                "no experiment header (recorded by an older bbrscope, or a stream capture): the arms are the \
                 algorithms most of each arm's flows ran, and the scope is unknown (no system-wide recommendation)"
                    .into(),
            );
        }
        out
    }
}

/// Longest plausible flow, seconds.
const MAX_DURATION_S: f64 = 30.0 * 86_400.0;
/// More bytes than a flow of that length can carry at 1 Tbit/s.
const MAX_BYTES: u64 = 1 << 52;

fn plausible(o: &Observation) -> bool {
    let time = |t: f64| t.is_finite() && (0.0..=MAX_DURATION_S).contains(&t);
    time(o.duration_s) && time(o.handshake_s) && o.bytes <= MAX_BYTES && o.end_ts.is_none_or(f64::is_finite)
}

/// Reads a recording: see the module comment. `is_file`: the input is a regular file (it ends), so
/// a line of any length is skipped and reading goes on; else a line over 16 MiB ends it.
pub fn read(input: impl BufRead, is_file: bool) -> Result<Capture> {
    let mut reader = if is_file { Reader::of_file(input) } else { Reader::new(input) };
    let mut c = Capture::default();
    let mut seen: HashSet<(u64, u64, std::net::SocketAddr)> = HashSet::new();
    while let Some(v) = reader.next_value()? {
        match v["type"].as_str() {
            Some("experiment") => {
                match serde_json::from_value::<Header>(v) {
                    Ok(h) if !c.has_header => {
                        c.has_header = true;
                        c.setup.arms = (!h.arms[0].is_empty()).then_some(h.arms);
                        c.setup.split_pct = h.split_pct;
                        c.setup.scope = h.scope;
                        c.setup.guardrail_pct = h.guardrail_pct;
                        c.setup.status_quo = h.status_quo;
                        // Checked as when it was given; a header edited into nonsense is not used.
                        match h.prefix_list.as_deref().map(PrefixList::parse) {
                            Some(Ok(lists)) => c.setup.prefix_lists = lists,
                            Some(Err(_)) => reader.reject("an experiment header's prefix list that does not parse"),
                            None => {}
                        }
                        match design(h.design.as_deref(), h.schedule, h.salt) {
                            Some(d) => c.setup.design = d,
                            None => reader.reject(
                                "an experiment header's design that is not known, or a switchback without a sound schedule",
                            ),
                        }
                        match metric(h.metric.as_deref()) {
                            Ok(m) => c.setup.metric = m,
                            Err(()) => reader.reject("an experiment header's metric that is not known"),
                        }
                    }
                    Ok(_) => {}
                    Err(_) => reader.reject("an experiment header that does not parse"),
                }
            }
            Some("experiment_end") => match serde_json::from_value::<End>(v) {
                Ok(e) => {
                    c.stopped_by = e.stopped_by;
                    c.guard = e.guardrail;
                }
                Err(_) => reader.reject("an experiment_end that does not parse"),
            },
            Some("flow_in_flight") => {
                match serde_json::from_value::<InFlight>(v).ok().and_then(InFlight::observation).filter(plausible) {
                    Some(o) => c.obs.push(o),
                    None => c.rejected += 1,
                }
            }
            Some("flow_summary") if v["arm"].is_string() => {
                let read = super::summary_line(&v).and_then(|l| Some((Observation::from_line(&l)?, l)));
                let Some((o, line)) = read.filter(|(o, _)| plausible(o)) else {
                    c.rejected += 1;
                    continue;
                };
                // A flow is its socket cookie and start; with neither, its peer and end.
                let key =
                    (line.cookie.unwrap_or(0), line.summary.start_ts.or(o.end_ts).map_or(0, f64::to_bits), line.dst);
                if !seen.insert(key) {
                    c.duplicates += 1;
                    continue;
                }
                c.obs.push(o);
            }
            _ => {}
        }
    }
    if !c.has_header {
        c.setup.split_pct = 50;
    }
    c.skipped = reader.skipped.clone();
    Ok(c)
}

/// Recordings of one experiment (on several hosts, or scopes of one) as one capture, each with
/// the name it is known by: the first's setup, every one's flows. They pool only when they ran
/// one experiment (arms, split, design, metric; exit 2 naming what differs; a host-level
/// switchback's hosts each ran their own blocks of it, and each flow keeps its host's salt to
/// be placed in them). The pool's end is each one's stop, named; the guardrail's replay judges
/// the pooled flows.
pub(crate) fn pool(captures: Vec<(String, Capture)>) -> Result<Capture> {
    let many = captures.len() > 1;
    let mut stops = Vec::new();
    let mut pool: Option<(String, Capture)> = None;
    for (name, mut capture) in captures {
        if let Design::Switchback(Schedule { host: Some(salt), .. }) = capture.setup.design {
            capture.obs.iter_mut().for_each(|o| o.host = Some(salt));
        }
        if let Some(stop) = &capture.stopped_by {
            stops.push(format!("{name}: {stop}"));
        }
        let Some((first_name, first)) = pool.as_mut() else {
            pool = Some((name, capture));
            continue;
        };
        let (a, b) = (&first.setup, &capture.setup);
        let differs = [
            ("arms", a.arms != b.arms),
            ("split", a.split_pct != b.split_pct),
            ("design", a.design.of_fleet() != b.design.of_fleet()),
            ("metric", a.metric != b.metric),
        ];
        if let Some((what, _)) = differs.iter().find(|(_, d)| *d) {
            crate::error::usage!(
                "--analyze {name}: its {what} differs from {first_name}'s: recordings pool only when they ran one experiment"
            );
        }
        first.obs.extend(capture.obs);
    }
    let (_, mut pool) = pool.context("no recording to analyse")?;
    if many {
        pool.stopped_by = (!stops.is_empty()).then(|| stops.join("; "));
        pool.guard = None;
    }
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUMMARY: &str = r#"{"type":"flow_summary","ts":100.5,"start_ts":100.0,"cookie":7,"cc":"bbr","ccs":["bbr"],"arm":"b","side":"accept","dst":"203.0.113.9:51000","bytes_acked":15001,"duration_s":0.5,"srtt_first_us":150000,"min_rtt_us":140000,"retrans_at_open":1,"retrans_total":2,"data_segs_out":11}"#;

    /// Recordings of one experiment pool their flows and name each one's stop; one of another
    /// split is refused, naming it and what differs.
    #[test]
    fn recordings_of_one_experiment_pool_and_of_another_are_refused() {
        let header = |split: u32| {
            format!(
                r#"{{"type":"experiment","arms":["cubic","bbr"],"split_pct":{split},"scope":{{"known":true,"port":443,"cgroup":null,"dst":[]}},"guardrail_pct":20.0,"delta_pct":5.0,"min_effect_ms":5.0}}"#
            )
        };
        let capture = |split: u32, cookies: &[u64], end: Option<&str>| {
            let mut text = header(split) + "\n";
            for c in cookies {
                text += &SUMMARY.replace("\"cookie\":7", &format!("\"cookie\":{c}"));
                text += "\n";
            }
            if let Some(stop) = end {
                text += &format!(r#"{{"type":"experiment_end","stopped_by":"{stop}","guardrail":null}}"#);
                text += "\n";
            }
            read(text.as_bytes(), true).unwrap()
        };
        let one = pool(vec![("a".into(), capture(50, &[1, 2], None))]).unwrap();
        assert_eq!((one.obs.len(), one.stopped_by), (2, None));
        let both =
            pool(vec![("a".into(), capture(50, &[1, 2], None)), ("b".into(), capture(50, &[1, 3, 4], Some("x")))])
                .unwrap();
        // The same cookie on two hosts is two flows.
        assert_eq!(both.obs.len(), 5);
        assert_eq!(both.stopped_by.as_deref(), Some("b: x"));
        let err = pool(vec![("a".into(), capture(50, &[1], None)), ("b".into(), capture(30, &[2], None))])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("b: its split differs from a's"), "{err}");
    }

    /// Recordings of a host-level switchback on several hosts pool: each flow keeps its host's
    /// salt, to be placed in its own host's blocks. One of the synchronized schedule (the same
    /// seed) is another experiment, refused naming the design.
    #[test]
    fn a_host_level_switchbacks_recordings_pool_each_flow_with_its_hosts_blocks() {
        let fleet = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 4, host: None };
        let capture = |host: Option<&str>| {
            let schedule = Schedule { host: host.map(Schedule::host_salt), ..fleet };
            let setup = Setup { design: Design::Switchback(schedule), ..Setup::default() };
            let summary: serde_json::Value = serde_json::from_str(SUMMARY).unwrap();
            let obs = vec![Observation::from_summary(&summary).unwrap(); 2];
            Capture { obs, setup, ..Capture::default() }
        };
        let pooled = pool(vec![("a".into(), capture(Some("edge-1"))), ("b".into(), capture(Some("edge-2")))]).unwrap();
        let salts: Vec<Option<u64>> = pooled.obs.iter().map(|o| o.host).collect();
        let [one, two] = ["edge-1", "edge-2"].map(|h| Some(Schedule::host_salt(h)));
        assert_eq!(salts, [one, one, two, two]);
        let err = pool(vec![("a".into(), capture(Some("edge-1"))), ("b".into(), capture(None))]).err().unwrap();
        assert!(err.to_string().contains("b: its design differs from a's"), "{err}");
    }

    #[test]
    fn reads_header_flows_and_end_forgivingly() {
        let mut text = String::new();
        text.push_str(r#"{"type":"experiment","arms":["cubic","bbr"],"split_pct":30,"scope":{"known":true,"port":443,"cgroup":null,"dst":[]},"guardrail_pct":20.0,"delta_pct":5.0,"min_effect_ms":5.0}"#);
        text.push('\n');
        text.push_str(SUMMARY);
        text.push('\n');
        // The same flow again (a capture concatenated with itself), damaged lines, an absurd one.
        text.push_str(SUMMARY);
        text.push_str("\n{not json\n\u{0}\u{ff}\n");
        text.push_str(
            &SUMMARY.replace("\"cookie\":7", "\"cookie\":8").replace("\"duration_s\":0.5", "\"duration_s\":-5000000"),
        );
        text.push('\n');
        text.push_str(&"x".repeat(70_000));
        text.push('\n');
        text.push_str(r#"{"type":"experiment_end","stopped_by":"stopped by Ctrl-C","guardrail":null}"#);
        text.push('\n');
        let mut bytes = text.into_bytes();
        // One invalid UTF-8 byte in a line of its own.
        bytes.extend_from_slice(b"\xff\xfe\n");
        let c = read(&bytes[..], true).unwrap();
        assert_eq!(c.obs.len(), 1);
        let o = &c.obs[0];
        // Handshake: the SYN-ACK's round trip and one retransmission's 1 s wait.
        assert!((o.client_s() - (0.5 + 0.15 + 1.0)).abs() < 1e-9, "{}", o.client_s());
        assert_eq!((c.duplicates, c.rejected, c.skipped.lines), (1, 1, 4));
        assert_eq!(c.setup.arms, Some(["cubic".to_string(), "bbr".to_string()]));
        assert_eq!((c.setup.split_pct, c.setup.scope.port), (30, Some(443)));
        assert_eq!(c.stopped_by.as_deref(), Some("stopped by Ctrl-C"));
        assert!(c.notes().iter().any(|n| n.contains("counted once")), "{:?}", c.notes());
        assert!(c.setup.prefix_lists.is_empty() && c.setup.status_quo.is_none(), "an older header");
        assert_eq!(c.setup.design, Design::PerConnection, "an older header: per connection");
    }

    /// The design comes back as it was run: a switchback with its schedule (to the bit: the
    /// blocks are found again from it), a client design with its salt, a per-connection run as one; a header naming a design
    /// that makes no sense is counted and read as per connection.
    #[test]
    fn the_header_keeps_the_design_and_the_schedule() {
        let dir = tempfile::tempdir().unwrap();
        let round_trip = |name: &str, design: Design| {
            let path = dir.path().join(name);
            let mut f =
                create(&path, &Setup { arms: Some(["cubic".into(), "reno".into()]), design, ..Setup::default() })
                    .unwrap();
            end(&mut f, &path, &[], None, None).unwrap();
            read(std::io::BufReader::new(File::open(&path).unwrap()), true).unwrap()
        };
        let schedule = Schedule { block_s: 2.5, burn_in_s: 0.1 + 0.2, seed: u64::MAX - 6, host: None };
        let c = round_trip("sb.ndjson", Design::Switchback(schedule));
        assert_eq!(c.setup.design, Design::Switchback(schedule));
        assert_eq!(c.skipped.lines, 0);
        // A host-level switchback's host salt too: its blocks are this host's own.
        let host = Schedule { host: Some(Schedule::host_salt("edge-7")), ..schedule };
        let c = round_trip("hs.ndjson", Design::Switchback(host));
        assert_eq!(c.setup.design, Design::Switchback(host));
        let c = round_trip("pc.ndjson", Design::PerConnection);
        assert_eq!(c.setup.design, Design::PerConnection);
        // A client design's salt to the bit: the clients' arms are found again from it.
        let c = round_trip("cl.ndjson", Design::Client { salt: u64::MAX - 2 });
        assert_eq!(c.setup.design, Design::Client { salt: u64::MAX - 2 });
        let header = |rest: &str| {
            format!(
                r#"{{"type":"experiment","arms":["cubic","reno"],"split_pct":50,"scope":{{"known":true,"port":null,"cgroup":null,"dst":[]}},"guardrail_pct":null,"delta_pct":5.0,"min_effect_ms":5.0{rest}}}"#
            )
        };
        for bad in [
            r#","design":"switchback""#,
            r#","design":"switchback","schedule":{"block_s":2.0,"burn_in_s":1.0,"seed":1}"#,
            r#","design":"per_connection","schedule":{"block_s":2.0,"burn_in_s":0.5,"seed":1}"#,
            r#","design":"host_switchback","schedule":{"block_s":2.0,"burn_in_s":0.5,"seed":1}"#,
            r#","design":"switchback","schedule":{"block_s":2.0,"burn_in_s":0.5,"seed":1,"host":5}"#,
            r#","design":"everyone_at_once""#,
            r#","design":"client""#,
            r#","design":"client","schedule":{"block_s":2.0,"burn_in_s":0.5,"seed":1},"salt":3"#,
            r#","design":"per_connection","salt":3"#,
        ] {
            let c = read(header(bad).as_bytes(), true).unwrap();
            assert_eq!(c.setup.design, Design::PerConnection, "{bad}");
            assert_eq!(c.setup.arms, Some(["cubic".to_string(), "reno".to_string()]), "{bad}: the rest is kept");
            assert_eq!(c.skipped.lines, 1, "{bad}: counted");
        }
    }

    /// The primary metric comes back as declared, named even where it was the design's default
    /// (a later default must not change what `--analyze` judges); a header without one (older)
    /// leaves the design's; one not known is counted, the rest of the header kept.
    #[test]
    fn the_header_keeps_the_metric() {
        let dir = tempfile::tempdir().unwrap();
        let round_trip = |name: &str, design: Design, metric: Option<PrimaryMetric>| {
            let path = dir.path().join(name);
            let setup = Setup { arms: Some(["cubic".into(), "bbr".into()]), design, metric, ..Setup::default() };
            let mut f = create(&path, &setup).unwrap();
            end(&mut f, &path, &[], None, None).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            (read(text.as_bytes(), true).unwrap(), text)
        };
        let schedule = Schedule { block_s: 15.0, burn_in_s: 3.0, seed: 1, host: None };
        for (design, asked, named) in [
            (Design::PerConnection, Some(PrimaryMetric::PerResponse), PrimaryMetric::PerResponse),
            (Design::PerConnection, None, PrimaryMetric::TimeWeighted),
            (Design::Switchback(schedule), None, PrimaryMetric::PerResponse),
            (Design::Switchback(schedule), Some(PrimaryMetric::TimeWeighted), PrimaryMetric::TimeWeighted),
            (Design::PerConnection, Some(PrimaryMetric::P95), PrimaryMetric::P95),
        ] {
            let (c, text) = round_trip("m.ndjson", design, asked);
            assert_eq!(c.setup.metric, Some(named), "{design:?} {asked:?}");
            assert_eq!(c.skipped.lines, 0);
            let name = serde_json::to_value(named).unwrap();
            assert!(text.contains(&format!(r#""metric":{name}"#)), "{text}");
        }
        let header = |rest: &str| {
            format!(
                r#"{{"type":"experiment","arms":["cubic","reno"],"split_pct":50,"scope":{{"known":true,"port":null,"cgroup":null,"dst":[]}},"guardrail_pct":null,"delta_pct":5.0,"min_effect_ms":5.0{rest}}}"#
            )
        };
        let c = read(header("").as_bytes(), true).unwrap();
        assert_eq!((c.setup.metric, c.skipped.lines), (None, 0), "an older header: the design's");
        let c = read(header(r#","metric":"p90""#).as_bytes(), true).unwrap();
        assert_eq!((c.setup.metric, c.skipped.lines), (None, 1), "an unknown metric is counted");
        assert_eq!(c.setup.arms, Some(["cubic".to_string(), "reno".to_string()]), "the rest is kept");
    }

    /// What the header keeps comes back as it was: the status quo and the prefix-list groups
    /// (so `--analyze` without `--prefix-list` judges the same family as the live run).
    #[test]
    fn the_header_keeps_the_status_quo_and_the_prefix_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rec.ndjson");
        let setup = Setup {
            arms: Some(["cubic".into(), "bbr".into()]),
            status_quo: Some("cubic".into()),
            prefix_lists: PrefixList::parse("far 203.0.113.0/24 2001:db8::/32\nnear 10.0.0.0/8").unwrap(),
            ..Setup::default()
        };
        let mut f = create(&path, &setup).unwrap();
        end(&mut f, &path, &[], None, None).unwrap();
        let c = read(std::io::BufReader::new(File::open(&path).unwrap()), true).unwrap();
        assert_eq!(c.setup.status_quo.as_deref(), Some("cubic"));
        assert_eq!(c.setup.prefix_lists, setup.prefix_lists);
        assert_eq!(c.setup.prefix_lists[0].nets.len(), 2);
    }

    /// Flows still running at the end are written so that reading the file gives back the
    /// observations the live report took, censored; a recording without them reads as before.
    #[test]
    fn flows_in_flight_read_back_as_taken() {
        let summary: serde_json::Value = serde_json::from_str(SUMMARY).unwrap();
        let finished = Observation::from_summary(&summary).unwrap();
        let running = Observation {
            arm: 0,
            cc: "cubic".into(),
            bytes: 3_000_001,
            duration_s: 7.123456789,
            end_ts: Some(1_700_000_000.25),
            goodput_bps: None,
            censored: true,
            ..finished.clone()
        };
        let path = std::env::temp_dir().join(format!("bbrscope-in-flight-{}.ndjson", std::process::id()));
        let mut f = File::create(&path).unwrap();
        writeln!(f, "{SUMMARY}").unwrap();
        end(&mut f, &path, &[finished.clone(), running.clone()], Some("stopped by SIGTERM"), None).unwrap();
        drop(f);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(text.lines().filter(|l| l.contains("\"flow_in_flight\"")).count(), 1, "{text}");
        let c = read(text.as_bytes(), true).unwrap();
        assert_eq!(c.obs, [finished.clone(), running]);
        assert_eq!((c.rejected, c.stopped_by.as_deref()), (0, Some("stopped by SIGTERM")));
        // An older recording (no flow_in_flight lines): its flows, none censored.
        let old = read(format!("{SUMMARY}\n").as_bytes(), true).unwrap();
        assert_eq!(old.obs, [finished]);
    }
}

//! `bbrscope experiment`: a randomized A/B of congestion control on the host's real connections.
//!
//! The kernel side is the observer's sock_ops program: with an experiment configured it gives
//! each new connection in scope arm A's or arm B's algorithm at random as the connection is
//! established, and tags the flow with its arm. This module turns the flows' summaries into the
//! answer: per arm and per client group, completion time by response size, goodput, RTT and
//! retransmissions, and the difference between arms with a confidence interval.
//!
//! - [`Observation`]: one finished flow, from its `flow_summary` (live, or read back from an
//!   NDJSON capture for offline analysis).

// The statistics: the client groups and size buckets, the primitives, the per-group analysis,
// the one decision per group, the quantiles' confidence sequences and the switchback's estimates.
pub mod analysis;
pub(crate) mod client;
pub(crate) mod decide;
pub mod groups;
pub(crate) mod quantile_cs;
pub(crate) mod stats;
pub(crate) mod switchback;
// What the analysis becomes: the report, its conclusions in words, the recommended commands,
// the text rendering and the number formats, the figure.
pub(crate) mod conclusion;
pub(crate) mod format;
pub(crate) mod plot;
pub mod recommend;
pub mod report;
mod text;
// The guardrail and the status quo it protects.
pub mod guardrail;
pub(crate) mod status_quo;
// A run: what was asked, the loop while it runs, where it stands and its analysis off the loop,
// its dashboard panel, its recording, its sums served to Prometheus, and the printed end.
mod dashboard;
pub(crate) mod fleet;
pub(crate) mod monitor;
pub(crate) mod print;
pub mod progress;
pub mod record;
pub(crate) mod request;
pub(crate) mod run;
pub mod schedule;
pub mod setup;
pub(crate) mod sums;

use std::net::IpAddr;

use serde::Deserialize as _;
use serde_json::Value;

use crate::observe::{clock::Clock, schema::SummaryLine};

/// Arms are set up in the kernel, which is configured with them: their type lives with the
/// loader's experiment settings.
pub use crate::observe::kernel::loader::Arm;

/// One finished flow of the experiment: what its `flow_summary` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// 0 for arm A, 1 for arm B.
    pub arm: usize,
    /// The algorithm the flow first ran.
    pub cc: String,
    /// The flow ran more than one algorithm (the application set its own after the kernel set
    /// the arm's): it did not run its arm, and is left out.
    pub switched: bool,
    /// The client (the flow's remote end).
    pub peer: IpAddr,
    /// Bytes the flow delivered (acked by the peer, SYN and FIN excluded).
    pub bytes: u64,
    /// From connect()/accept to close, seconds: the flow's completion time as the server sees it.
    pub duration_s: f64,
    /// What the client waited before the server's view begins, seconds: for an accepted
    /// connection the handshake (the SYN-ACK's round trip, and the kernel's 1 s, 2 s, 4 s ...
    /// waits before each SYN-ACK retransmission); 0 for a connection this host opened (its
    /// `duration_s` starts at connect() already).
    pub handshake_s: f64,
    /// When it finished (Unix seconds), for the order of a replay and the rate of flows.
    pub end_ts: Option<f64>,
    pub goodput_bps: Option<u64>,
    pub srtt_median_us: Option<u32>,
    /// The path's minimum RTT as the kernel measured it (the client's distance).
    pub min_rtt_us: Option<u32>,
    /// Retransmitted segments and data segments sent.
    pub retrans: u32,
    pub data_segs_out: u32,
    /// The socket's cgroup v2 id and path (the path where the record names it), for the
    /// narrowest `apply` that covers the service.
    pub cgroup_id: Option<u64>,
    pub cgroup: Option<String>,
    /// Still running when the experiment ended (after its drain): `duration_s` is its elapsed
    /// time then and `bytes` what it had delivered, a lower bound on its completion time that the
    /// analysis takes as the time (see docs/experiment-method.md, "Flows still running").
    pub censored: bool,
    /// Whether arms A and B are what the connection had before it got its arm (the kernel read
    /// its algorithm then): the guardrail watches only the arms that moved it. `None` where the
    /// kernel did not say (recordings made before it did): the run's status quo stands in.
    pub status_quo: Option<[bool; 2]>,
    /// The host salt of the schedule that gave the flow its arm, where recordings of a
    /// host-level switchback pool (each host ran its own blocks, [`schedule::Schedule::host`]);
    /// `None` elsewhere: the run's own schedule placed it.
    pub host: Option<u64>,
}

/// A record read as a `flow_summary`; `None` for another type or one that does not parse.
pub(crate) fn summary_line(v: &Value) -> Option<SummaryLine<'_>> {
    // The stream always writes a duration; a line without one is not a flow's summary (the
    // schema reads it as 0 for the replay of the oldest recordings).
    if v["type"] != "flow_summary" || !v["duration_s"].is_number() {
        return None;
    }
    SummaryLine::deserialize(v).ok()
}

/// The handshake as the client waits for it: one round trip (the SYN-ACK's), plus the SYN-ACK
/// retransmission timer's waits (1 s initially, doubling: `2^k − 1` s for k retransmissions).
fn handshake_s(accepted: bool, srtt_first_us: Option<u64>, min_rtt_us: Option<u32>, retrans_at_open: u64) -> f64 {
    if !accepted {
        return 0.0;
    }
    // A connection accepted with TCP Fast Open can report srtt_first 0: the path's minimum RTT
    // is the round trip then.
    let rtt_us = srtt_first_us.filter(|&r| r > 0).or(min_rtt_us.map(u64::from)).unwrap_or(0);
    let waits = ((1u64 << retrans_at_open.min(16)) - 1) as f64;
    rtt_us as f64 / 1e6 + waits
}

impl Observation {
    /// A closed flow of the live flow table that the kernel put in an arm; its end in Unix time
    /// by `clock`, the `--record` file's (a switchback places the flow by it: live and recorded,
    /// in the same block).
    pub(crate) fn from_flow(flow: &crate::observe::flow::Flow, clock: &Clock) -> Option<Self> {
        let end = flow.life.end.as_ref()?;
        Self::of_flow(flow, end.head.ts_ns, Some(u64::from(end.srtt_first_us)), false, clock)
    }

    /// A flow of an arm still running at `now_ns` (CLOCK_MONOTONIC, the kernel's clock): a
    /// censored observation, its elapsed time and the bytes acked so far (its summary has not
    /// come, so its first RTT is not known: the handshake is the path's minimum RTT).
    pub(crate) fn in_flight(flow: &crate::observe::flow::Flow, now_ns: u64, clock: &Clock) -> Option<Self> {
        if flow.life.end.is_some() {
            return None;
        }
        Self::of_flow(flow, now_ns, None, true, clock)
    }

    fn of_flow(
        flow: &crate::observe::flow::Flow,
        end_ns: u64,
        srtt_first_us: Option<u64>,
        censored: bool,
        clock: &Clock,
    ) -> Option<Self> {
        let owner = flow.life.owner.as_ref()?;
        let arm = match owner.arm? {
            1 => 0,
            2 => 1,
            _ => return None,
        };
        // A flow still running before its first sample is counted all the same, with nothing
        // acked yet: it is never dropped.
        let m = flow.metrics.as_ref();
        let start = flow.life.start_ns.unwrap_or(flow.first_ns);
        let duration_ns = end_ns.saturating_sub(start);
        // The kernel counts the FIN (and an active opener's SYN) as acked bytes; a flow still
        // running has no FIN acked yet.
        let syn_fin = u64::from(owner.side == Some("connect")) + u64::from(!censored);
        let acked = m.and_then(|m| m.bytes_acked).or(censored.then_some(0))?;
        let min_rtt_us = m.and_then(|m| m.min_rtt_us);
        let accepted = owner.side == Some("accept");
        Some(Observation {
            arm,
            cc: flow.life.ccs.first().copied().unwrap_or(flow.cc).to_string(),
            switched: flow.life.ccs.len() > 1,
            peer: flow.dst.ip(),
            bytes: acked.saturating_sub(syn_fin),
            duration_s: duration_ns as f64 / 1e9,
            handshake_s: handshake_s(accepted, srtt_first_us, min_rtt_us, u64::from(flow.life.retrans_at_open)),
            end_ts: Some(clock.unix_secs(end_ns)),
            goodput_bps: (duration_ns > 0)
                .then(|| (u128::from(acked) * 8_000_000_000 / u128::from(duration_ns)) as u64),
            srtt_median_us: flow.life.srtt_median_us().or(m.and_then(|m| m.srtt_us)),
            min_rtt_us,
            retrans: m.and_then(|m| m.retrans_total).unwrap_or(0),
            data_segs_out: m.and_then(|m| m.data_segs_out).unwrap_or(0),
            cgroup_id: owner.cgroup_id,
            cgroup: None,
            censored,
            status_quo: owner.status_quo,
            host: None,
        })
    }

    /// Reads a `flow_summary` record that carries an experiment arm (`arm` "a" or "b").
    pub fn from_summary(v: &Value) -> Option<Self> {
        Self::from_line(&summary_line(v)?)
    }

    /// [`Observation::from_summary`] of a summary already read: `None` without an arm, the
    /// bytes acked or an algorithm.
    pub(crate) fn from_line(line: &SummaryLine<'_>) -> Option<Self> {
        let (f, owner) = (&line.summary, &line.summary.owner);
        let arm = match owner.arm.as_deref()? {
            "a" => 0,
            "b" => 1,
            _ => return None,
        };
        let accepted = owner.side.as_deref() == Some("accept");
        // The kernel counts the FIN (and an active opener's SYN) as acked bytes.
        let syn_fin = if owner.side.as_deref() == Some("connect") { 2 } else { 1 };
        let cc = f.ccs.first().or(line.cc.as_ref())?;
        Some(Observation {
            arm,
            cc: cc.to_string(),
            switched: f.ccs.len() > 1,
            peer: line.dst.ip(),
            bytes: f.bytes_acked?.saturating_sub(syn_fin),
            duration_s: f.duration_s,
            handshake_s: handshake_s(
                accepted,
                Some(u64::from(f.srtt_first_us)),
                f.min_rtt_us,
                u64::from(f.retrans_at_open),
            ),
            end_ts: line.ts,
            goodput_bps: f.goodput_bps,
            srtt_median_us: f.srtt_median_us,
            min_rtt_us: f.min_rtt_us,
            retrans: f.retrans_total.unwrap_or(0),
            data_segs_out: f.data_segs_out.unwrap_or(0),
            cgroup_id: owner.cgroup_id,
            cgroup: owner.cgroup.as_deref().map(str::to_string),
            censored: false,
            status_quo: owner.status_quo.as_deref().and_then(crate::observe::schema::status_quo_of),
            host: None,
        })
    }

    /// When the connection began (Unix seconds): where a switchback attributes it, to the block
    /// whose arm the kernel gave it.
    pub fn start_ts(&self) -> Option<f64> {
        self.end_ts.map(|end| end - self.duration_s)
    }

    /// Completion time as the client feels it: the handshake, then the server's view. This is
    /// the time the experiment decides on.
    pub(crate) fn client_s(&self) -> f64 {
        self.handshake_s + self.duration_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_is_an_algorithm_with_an_optional_initial_window() {
        assert_eq!(Arm::parse("bbr").unwrap(), Arm { cc: "bbr".into(), iw: None });
        let iw = Arm::parse("bbr+iw32").unwrap();
        assert_eq!(iw, Arm { cc: "bbr".into(), iw: Some(32) });
        assert_eq!(iw.to_string(), "bbr+iw32");
        assert_eq!((Arm::cc_of("cubic+iw16"), Arm::iw_of("cubic+iw16")), ("cubic", Some(16)));
        assert_eq!((Arm::cc_of("cubic"), Arm::iw_of("cubic")), ("cubic", None));
        for bad in ["bbr+iw0", "bbr+iw129", "bbr+32", "bbr+iw", "bbr+iwx"] {
            assert!(Arm::parse(bad).unwrap_err().starts_with("--arms: "), "{bad}");
        }
    }

    #[test]
    fn reads_a_summary_with_an_arm() {
        let v: Value = serde_json::from_str(
            r#"{"type":"flow_summary","cc":"bbr","arm":"b","side":"accept","dst":"203.0.113.9:51000",
               "bytes_acked":15001,"duration_s":0.25,"goodput_bps":480000,"srtt_median_us":150000,
               "min_rtt_us":140000,"retrans_total":2,"data_segs_out":11}"#,
        )
        .unwrap();
        let o = Observation::from_summary(&v).unwrap();
        assert_eq!((o.arm, o.bytes, o.peer.to_string()), (1, 15000, "203.0.113.9".to_string()));
        let mut no_arm = v.clone();
        no_arm["arm"] = Value::Null;
        assert!(Observation::from_summary(&no_arm).is_none());
        // Read by the stream's own types (observe::schema): a line the stream would not write is
        // no observation — a field of the wrong type, no duration, no bytes acked.
        for (field, bad) in
            [("srtt_median_us", Value::from("x")), ("duration_s", Value::Null), ("bytes_acked", Value::Null)]
        {
            let mut wrong = v.clone();
            wrong[field] = bad;
            assert!(Observation::from_summary(&wrong).is_none(), "{field}");
        }
        // The algorithms it ran come first, then the head's.
        let mut switched = v.clone();
        switched["ccs"] = serde_json::json!(["cubic", "bbr"]);
        let o = Observation::from_summary(&switched).unwrap();
        assert_eq!((o.cc.as_str(), o.switched, o.srtt_median_us, o.retrans), ("cubic", true, Some(150_000), 2));
    }
}

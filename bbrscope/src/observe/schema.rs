//! The records `bbrscope stream` writes (docs/stream.md), as types: the one statement of the
//! stream's schema. The NDJSON sink ([`crate::observe::sink::json`]) writes them, the replay
//! reader ([`crate::observe::replay`]) reads them back, and so does an experiment's analysis of
//! a recording ([`SummaryLine`], through `experiment::Observation::from_summary`).
//!
//! A field's place here is its place on the line: the sink writes the fields in this order, and
//! its tests check every line against what serde's derived `Serialize` makes of these types.
//! Records borrow what the flow table holds already (the metrics, the algorithm lists, cgroup
//! names), so writing one allocates nothing. Read back, a field added after the first
//! recordings were made is optional or has a default, so older recordings replay.

use std::{borrow::Cow, net::SocketAddr, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::{
    observe::event::{CaState, EndReason, Metrics},
    observe::stats::StatsReport,
    sys::name::Name,
};

/// A flow record: the fields every one starts with, then its type's own.
#[derive(Serialize, Deserialize)]
pub(crate) struct FlowRecord<'a, B> {
    #[serde(flatten, borrow)]
    pub(crate) head: FlowHead<'a>,
    #[serde(flatten)]
    pub(crate) body: B,
}

/// What every flow record carries first.
#[derive(Serialize, Deserialize)]
pub(crate) struct FlowHead<'a> {
    /// `flow_open`, `sample`, `retransmit`, `cong_state`, `flow_close` or `flow_summary`.
    #[serde(rename = "type", borrow)]
    pub(crate) ty: Cow<'a, str>,
    /// Unix seconds.
    pub(crate) ts: f64,
    pub(crate) cookie: u64,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    pub(crate) cc: Name,
    pub(crate) ca_state: CaState,
}

/// A `flow_summary` as an analysis reads it back: the [`FlowHead`] fields it uses, lenient
/// where recordings stripped to their summaries (bbrscope/tests/fixtures) leave fields out, and
/// the [`Summary`]. The replay reader keeps [`FlowRecord`]'s strict head: it keys flows by
/// cookie.
#[derive(Deserialize)]
pub(crate) struct SummaryLine<'a> {
    pub(crate) ts: Option<f64>,
    pub(crate) cookie: Option<u64>,
    pub(crate) dst: SocketAddr,
    pub(crate) cc: Option<Name>,
    #[serde(flatten, borrow)]
    pub(crate) summary: Summary<'a>,
}

/// Who owns the flow (all null on the tracepoint path): a `flow_open`'s body, and part of a
/// `flow_summary`.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct Owner<'a> {
    /// "connect" or "accept".
    #[serde(borrow)]
    pub(crate) side: Option<Cow<'a, str>>,
    pub(crate) pid: Option<u32>,
    pub(crate) comm: Option<Name>,
    #[serde(borrow)]
    pub(crate) cgroup: Option<Cow<'a, str>>,
    pub(crate) cgroup_id: Option<u64>,
    pub(crate) netns: Option<u32>,
    /// `bbrscope experiment`'s arm: "a" or "b"; absent outside an experiment.
    #[serde(borrow, skip_serializing_if = "Option::is_none")]
    pub(crate) arm: Option<Cow<'a, str>>,
    /// With an arm: which arms' setting the connection had before it was given its arm ([`status_quo_word`]);
    /// absent where the kernel did not say (recordings made before it did).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub(crate) status_quo: Option<Cow<'a, str>>,
}

/// `status_quo`'s words for which of arms A and B are the connection's status quo: "a", "b",
/// "both" (an A/A run on the status quo) or "neither".
pub(crate) fn status_quo_word(arms: [bool; 2]) -> &'static str {
    match arms {
        [true, false] => "a",
        [false, true] => "b",
        [true, true] => "both",
        [false, false] => "neither",
    }
}

/// The arms a `status_quo` word names; `None` for a word it never writes.
pub(crate) fn status_quo_of(word: &str) -> Option<[bool; 2]> {
    [[true, false], [false, true], [true, true], [false, false]].into_iter().find(|&arms| status_quo_word(arms) == word)
}

/// A `sample`.
#[derive(Serialize, Deserialize)]
pub(crate) struct Sample<'a> {
    /// The TCP state's name.
    #[serde(borrow)]
    pub(crate) state: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(crate) acks: u32,
    pub(crate) throughput_bps: Option<u64>,
    #[serde(default)]
    pub(crate) retrans_coalesced: u32,
    #[serde(flatten)]
    pub(crate) metrics: Cow<'a, Metrics>,
}

/// A `flow_close`: the flow's last sample, with its totals.
#[derive(Serialize, Deserialize)]
pub(crate) struct Close<'a> {
    #[serde(default)]
    pub(crate) duration_s: f64,
    pub(crate) goodput_bps: Option<u64>,
    #[serde(default)]
    pub(crate) retransmit_events: u64,
    #[serde(default)]
    pub(crate) retrans_coalesced: u32,
    #[serde(flatten)]
    pub(crate) metrics: Cow<'a, Metrics>,
}

/// A `retransmit`.
#[derive(Serialize, Deserialize)]
pub(crate) struct Retransmit {
    pub(crate) segs: u32,
    pub(crate) retrans_total: u32,
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: Option<u32>,
}

/// A `cong_state`.
#[derive(Serialize, Deserialize)]
pub(crate) struct CongState {
    pub(crate) from: CaState,
    pub(crate) to: CaState,
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: Option<u32>,
}

/// Seconds a flow spent in each congestion state.
#[derive(Serialize, Deserialize, Default)]
pub(crate) struct CaSeconds {
    pub(crate) open: f64,
    pub(crate) disorder: f64,
    pub(crate) cwr: f64,
    pub(crate) recovery: f64,
    pub(crate) loss: f64,
}

/// A `flow_summary`: one line per flow, as it ends. Its counters, RTT minimum and rates have
/// the names a sample's [`Metrics`] give them.
#[derive(Serialize, Deserialize)]
pub(crate) struct Summary<'a> {
    pub(crate) start_ts: Option<f64>,
    #[serde(default)]
    pub(crate) duration_s: f64,
    /// Absent from recordings made before it existed.
    pub(crate) end: Option<EndReason>,
    #[serde(flatten, borrow)]
    pub(crate) owner: Owner<'a>,
    #[serde(default)]
    pub(crate) ccs: Cow<'a, [Name]>,
    #[serde(default)]
    pub(crate) bbr_modes: Cow<'a, [Arc<str>]>,
    pub(crate) bytes_sent: Option<u64>,
    pub(crate) bytes_acked: Option<u64>,
    pub(crate) bytes_received: Option<u64>,
    pub(crate) bytes_retrans: Option<u64>,
    pub(crate) segs_out: Option<u32>,
    pub(crate) segs_in: Option<u32>,
    pub(crate) data_segs_out: Option<u32>,
    pub(crate) data_segs_in: Option<u32>,
    pub(crate) retrans_total: Option<u32>,
    #[serde(default)]
    pub(crate) retrans_at_open: u32,
    #[serde(default)]
    pub(crate) retransmit_events: u64,
    #[serde(default)]
    pub(crate) retrans_coalesced: u32,
    #[serde(default)]
    pub(crate) retrans_failed: u32,
    #[serde(default)]
    pub(crate) srtt_first_us: u32,
    #[serde(default)]
    pub(crate) srtt_min_us: u32,
    pub(crate) srtt_median_us: Option<u32>,
    #[serde(default)]
    pub(crate) srtt_max_us: u32,
    pub(crate) srtt_last_us: Option<u32>,
    pub(crate) min_rtt_us: Option<u32>,
    #[serde(default)]
    pub(crate) cwnd_max: u32,
    #[serde(default)]
    pub(crate) ca_state_s: CaSeconds,
    pub(crate) goodput_bps: Option<u64>,
    pub(crate) delivery_rate_bps: Option<u64>,
    pub(crate) delivery_app_limited: Option<bool>,
    pub(crate) pacing_rate_bps: Option<u64>,
    pub(crate) bbr_bw_bps: Option<u64>,
    pub(crate) mss: Option<u32>,
    pub(crate) busy_us: Option<u64>,
    pub(crate) rwnd_limited_us: Option<u64>,
    pub(crate) sndbuf_limited_us: Option<u64>,
    #[serde(default)]
    pub(crate) samples: u32,
    #[serde(default)]
    pub(crate) rtt_events: u64,
    #[serde(default)]
    pub(crate) slow_path_acks: u32,
    #[serde(default)]
    pub(crate) send_events: u32,
}

/// A `stats` line: the observer's own counters, once a second.
#[derive(Serialize, Deserialize)]
pub(crate) struct Stats<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) ty: Cow<'a, str>,
    pub(crate) ts: f64,
    #[serde(flatten)]
    pub(crate) stats: Cow<'a, StatsReport>,
}

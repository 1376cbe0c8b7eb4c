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

pub mod glue;

pub mod analysis;
pub mod live;
pub mod lock;
pub mod plot;
pub mod report;

use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

/// One finished flow of the experiment: what its `flow_summary` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// 0 for arm A, 1 for arm B.
    pub arm: usize,
    /// The algorithm the flow ran (its arm's).
    pub cc: String,
    /// The client (the flow's remote end).
    pub peer: IpAddr,
    /// Bytes the flow delivered (acked by the peer, SYN and FIN excluded).
    pub bytes: u64,
    /// From connect()/accept to close, seconds: the flow's completion time.
    pub duration_s: f64,
    pub goodput_bps: Option<u64>,
    pub srtt_median_us: Option<u32>,
    /// The path's minimum RTT as the kernel measured it (the client's distance).
    pub min_rtt_us: Option<u32>,
    /// Retransmitted segments and data segments sent.
    pub retrans: u32,
    pub data_segs_out: u32,
}

impl Observation {
    /// A closed flow of the live flow table that the kernel put in an arm.
    pub fn from_flow(flow: &crate::flow::Flow) -> Option<Self> {
        let owner = flow.life.owner.as_ref()?;
        let arm = match owner.arm? {
            1 => 0,
            2 => 1,
            _ => return None,
        };
        let end = flow.life.end.as_ref()?;
        let m = flow.metrics.as_ref()?;
        let start = flow.life.start_ns.unwrap_or(flow.first_ns);
        let duration_ns = end.head.ts_ns.saturating_sub(start);
        let syn_fin = if owner.side == Some("connect") { 2 } else { 1 };
        let acked = m.bytes_acked?;
        Some(Observation {
            arm,
            cc: flow.cc.to_string(),
            peer: flow.dst.ip(),
            bytes: acked.saturating_sub(syn_fin),
            duration_s: duration_ns as f64 / 1e9,
            goodput_bps: (duration_ns > 0).then(|| (acked as u128 * 8_000_000_000 / duration_ns as u128) as u64),
            srtt_median_us: flow.life.srtt_median_us().or(m.srtt_us),
            min_rtt_us: m.min_rtt_us,
            retrans: m.retrans_total.unwrap_or(0),
            data_segs_out: m.data_segs_out.unwrap_or(0),
        })
    }

    /// Reads a `flow_summary` record that carries an experiment arm (`arm` "a" or "b").
    pub fn from_summary(v: &Value) -> Option<Self> {
        if v["type"] != "flow_summary" {
            return None;
        }
        let arm = match v["arm"].as_str()? {
            "a" => 0,
            "b" => 1,
            _ => return None,
        };
        let peer: SocketAddr = v["dst"].as_str()?.parse().ok()?;
        let acked = v["bytes_acked"].as_u64()?;
        // The kernel counts the FIN (and an active opener's SYN) as acked bytes.
        let syn_fin = if v["side"] == "connect" { 2 } else { 1 };
        Some(Observation {
            arm,
            cc: v["cc"].as_str()?.to_string(),
            peer: peer.ip(),
            bytes: acked.saturating_sub(syn_fin),
            duration_s: v["duration_s"].as_f64()?,
            goodput_bps: v["goodput_bps"].as_u64(),
            srtt_median_us: v["srtt_median_us"].as_u64().map(|x| x as u32),
            min_rtt_us: v["min_rtt_us"].as_u64().map(|x| x as u32),
            retrans: v["retrans_total"].as_u64().unwrap_or(0) as u32,
            data_segs_out: v["data_segs_out"].as_u64().unwrap_or(0) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}

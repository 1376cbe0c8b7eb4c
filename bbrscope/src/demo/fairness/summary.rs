//! The end of `demo fairness`: for each round, each algorithm's share of the shared bottleneck
//! (over the converged part of the run, and second by second), Jain's fairness index over the
//! flows, RTT inflation and retransmissions, with [`model`]'s share beside the challenger's.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Ran, Round, Scenario, model};
use crate::{
    demo::{
        Conditions,
        run::FlowRun,
        summary::{StoppedEarly, table, wrap},
    },
    observe::kernel::bbr_version::{BbrImpl, Version},
    quantile,
    units::{fmt_rate, fmt_us},
};

/// The first half of each round is start-up and convergence; shares are taken over the second
/// half, which the model describes. At a deep buffer BBR needs long: its first min-RTT
/// estimate predates the incumbents' queue, so its in-flight cap starves it until that estimate
/// expires (10 s), and it then grows by one 1.25x probe per 8 inflated round trips (measured at
/// 10 Mbit/s, 40 ms, 8 BDP: 4-10% of the link for the first 10 s, ~0.45 only after 40 s).
const CONVERGE_FRACTION: f64 = 0.5;
/// Loss-based algorithms the model's incumbents stand for.
const LOSS_BASED: [&str; 2] = ["cubic", "reno"];

/// One algorithm's side of a round.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Side {
    pub(crate) cc: String,
    pub(crate) flows: u32,
    /// Fraction of all the flows' goodput over the measured window.
    pub(crate) share: f64,
    pub(crate) goodput_bps: f64,
    /// Median srtt over the window (over time, median across this side's flows), and that
    /// over the path's propagation RTT.
    pub(crate) srtt_p50_us: Option<f64>,
    pub(crate) rtt_inflation: Option<f64>,
    /// Retransmitted over sent data segments, whole run (TCP_INFO of each sender).
    pub(crate) retransmitted: f64,
}

/// One scenario's round, measured.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RoundResult {
    pub(crate) buffer_bytes: u64,
    pub(crate) buffer_bdp: f64,
    pub(crate) incumbents: u32,
    pub(crate) repeat: u32,
    /// The measured window, seconds since the flows started.
    pub(crate) window_s: (f64, f64),
    pub(crate) challenger: Side,
    pub(crate) incumbent: Side,
    /// Jain's index over every flow's goodput in the window: 1 is equal shares, 1/n is one
    /// flow taking everything.
    pub(crate) jain_index: f64,
    /// All flows' goodput over the window, as a fraction of the link rate.
    pub(crate) link_used: f64,
    /// The challenger's share in each second (seconds since start, share), start-up included.
    pub(crate) challenger_share_per_s: Vec<(f64, f64)>,
    /// The model's challenger share, where it applies (BBRv1 against loss-based flows).
    pub(crate) model: Option<model::Share>,
    /// Whether the measured challenger share is inside the model's band.
    pub(crate) in_model_band: Option<bool>,
}

#[derive(Serialize)]
pub(crate) struct Summary {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) challenger: String,
    pub(crate) incumbent: String,
    pub(crate) path: Conditions,
    /// Which BBR produced these numbers.
    pub(crate) bbr: BbrImpl,
    /// Why there is no model column, when there is none.
    pub(crate) model_note: Option<String>,
    pub(crate) rounds: Vec<RoundResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stopped_early: Option<StoppedEarly>,
}

impl Summary {
    pub(crate) fn new(cond: &Conditions, challenger: &str, incumbent: &str, bbr: BbrImpl, ran: &Ran) -> Self {
        let model_note = if challenger != "bbr" || !LOSS_BASED.contains(&incumbent) {
            Some(format!("the model is of BBR against loss-based flows, not {challenger} against {incumbent}"))
        } else if bbr.version != Some(Version::V1) {
            Some(format!("the model is of BBRv1; this kernel's BBR is {}", bbr.describe()))
        } else {
            None
        };
        let rounds = ran.rounds.iter().map(|r| measure(cond, r, model_note.is_none())).collect();
        Summary {
            kind: "demo_fairness_summary",
            challenger: challenger.into(),
            incumbent: incumbent.into(),
            path: cond.clone(),
            bbr,
            model_note,
            rounds,
            stopped_early: None,
        }
    }

    pub(crate) fn stopped(mut self, stopped: Option<StoppedEarly>) -> Self {
        self.stopped_early = stopped;
        self
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the summary serializes")
    }

    pub(crate) fn to_table(&self) -> String {
        let (ch, inc) = (&self.challenger, &self.incumbent);
        let p = &self.path;
        let mut out = String::new();
        let heading = format!(
            "fairness: 1 {ch} flow vs {inc} flows through one bottleneck: {}, {} RTT, {}% loss, {:.0} s per round",
            fmt_rate(p.rate_bps as f64),
            fmt_us(p.rtt.as_micros() as f64),
            (p.loss * 1e4).round() / 1e2,
            p.duration.as_secs_f64(),
        );
        out += &wrap(&heading, "  ");
        out += &wrap(&format!("BBR on this kernel: {}", self.bbr.describe()), "  ");
        if let Some(s) = &self.stopped_early {
            out += &wrap(
                &format!(
                    "STOPPED EARLY ({}) after {:.1} s of its last round: that round covers only the part that ran",
                    s.by, s.after_s
                ),
                "  ",
            );
        }
        if let Some(r) = self.rounds.first() {
            let _ =
                writeln!(out, "shares over {:.0}-{:.0} s of each round (after start-up)\n", r.window_s.0, r.window_s.1);
        }
        let mut rows = vec![
            [
                "buffer".to_string(),
                "flows".into(),
                format!("{ch} share"),
                "model".into(),
                "Jain".into(),
                "link used".into(),
                "srtt/RTT".into(),
                "retransmitted".into(),
            ]
            .to_vec(),
        ];
        for r in &self.rounds {
            let model = match (&r.model, r.in_model_band) {
                (Some(m), Some(inside)) => {
                    let mark = if !m.in_scope {
                        " *"
                    } else if inside {
                        ""
                    } else if r.challenger.share < m.band.0 {
                        " below"
                    } else {
                        " above"
                    };
                    format!("{:.0}% ({:.0}-{:.0}){mark}", m.bbr * 100.0, m.band.0 * 100.0, m.band.1 * 100.0)
                }
                _ => "-".into(),
            };
            let inflation = |s: &Side| s.rtt_inflation.map_or("-".into(), |x| format!("{x:.1}x"));
            rows.push(vec![
                format!("{:.1} BDP", r.buffer_bdp),
                format!("1 + {} {inc}", r.incumbents),
                format!("{:.0}%", r.challenger.share * 100.0),
                model,
                format!("{:.2}", r.jain_index),
                format!("{:.0}%", r.link_used * 100.0),
                format!("{} / {}", inflation(&r.challenger), inflation(&r.incumbent)),
                format!("{:.2}% / {:.2}%", r.challenger.retransmitted * 100.0, r.incumbent.retransmitted * 100.0),
            ]);
        }
        out += &table(&rows);
        out.push('\n');
        out += &wrap(
            &format!(
                "srtt/RTT and retransmitted: {ch} / {inc}. Jain's index over all flows' goodput (1 = equal). \
                 Goodput: {}",
                self.rounds
                    .iter()
                    .map(|r| format!(
                        "{:.1} BDP 1+{}: {ch} {}, {inc} {} per flow",
                        r.buffer_bdp,
                        r.incumbents,
                        fmt_rate(r.challenger.goodput_bps),
                        fmt_rate(r.incumbent.goodput_bps / f64::from(r.incumbents.max(1)))
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "  ",
        );
        match &self.model_note {
            Some(note) => out += &wrap(&format!("model: none ({note})"), "  "),
            None => {
                out += &wrap(
                    "model: Ware et al., \"Modeling BBR's Interactions with Loss-Based Congestion Control\" (IMC \
                     2019): competing with flows that keep the queue full, BBRv1 is held by its in-flight cap (2 x \
                     its bandwidth x its min RTT, which includes their queue), so its share is set by the buffer, \
                     not by how many loss-based flows there are; band: the paper's median error (5% of the link).",
                    "  ",
                );
                if self.rounds.iter().any(|r| r.model.as_ref().is_some_and(|m| !m.in_scope)) {
                    out += &wrap(
                        "* buffer under 1 BDP: outside the model (the queue is not always full, BBR is not \
                         window-limited); it only says BBR takes most of the link.",
                        "  ",
                    );
                }
            }
        }
        out
    }
}

/// The numbers of one round.
fn measure(cond: &Conditions, round: &Round, with_model: bool) -> RoundResult {
    let Round { scenario: Scenario { buffer_bytes, incumbents }, repeat, flows } = round;
    let elapsed = flows.iter().map(|f| f.elapsed).max().unwrap_or_default().as_secs_f64();
    let window = (elapsed * CONVERGE_FRACTION, elapsed);
    let span = (window.1 - window.0).max(1e-3);
    let got: Vec<f64> =
        flows.iter().map(|f| bytes_at(&f.received, window.1) - bytes_at(&f.received, window.0)).collect();
    let total: f64 = got.iter().sum::<f64>().max(1.0);
    let side = |idx: &[usize]| {
        let bytes: f64 = idx.iter().map(|&i| got[i]).sum();
        let srtt: Vec<f64> = idx.iter().filter_map(|&i| srtt_p50(&flows[i], window)).collect();
        let srtt_p50_us = quantile::nearest_rank(&srtt, 0.5);
        let (re, out) = idx.iter().fold((0u64, 0u64), |(r, o), &i| {
            (r + u64::from(flows[i].tcp.retransmits), o + u64::from(flows[i].tcp.data_segs_out))
        });
        Side {
            cc: flows.get(idx[0]).map(|f| f.cc.clone()).unwrap_or_default(),
            flows: idx.len() as u32,
            share: bytes / total,
            goodput_bps: bytes * 8.0 / span,
            srtt_p50_us,
            rtt_inflation: srtt_p50_us.map(|s| s / cond.rtt.as_micros() as f64),
            retransmitted: re as f64 / out.max(1) as f64,
        }
    };
    let challenger = side(&[0]);
    let incumbent = side(&(1..flows.len()).collect::<Vec<_>>());
    let sum: f64 = got.iter().sum();
    let squares: f64 = got.iter().map(|x| x * x).sum();
    let jain_index = if squares > 0.0 { sum * sum / (got.len() as f64 * squares) } else { 0.0 };
    let bottleneck = model::Bottleneck {
        rate_bps: cond.rate_bps as f64,
        rtt_s: cond.rtt.as_secs_f64(),
        buffer_bytes: *buffer_bytes as f64,
    };
    let model = with_model.then(|| model::bbr_share(&bottleneck, 1, span));
    let in_model_band = model.as_ref().map(|m| (m.band.0..=m.band.1).contains(&challenger.share));
    RoundResult {
        buffer_bytes: *buffer_bytes,
        buffer_bdp: bottleneck.buffer_bdp(),
        incumbents: *incumbents,
        repeat: *repeat,
        window_s: window,
        link_used: sum * 8.0 / span / cond.rate_bps as f64,
        challenger_share_per_s: share_per_interval(flows),
        challenger,
        incumbent,
        jain_index,
        model,
        in_model_band,
    }
}

/// Bytes received by `t` seconds, linear between the recorded points (0 before the first).
fn bytes_at(series: &[(f64, u64)], t: f64) -> f64 {
    let after = series.partition_point(|&(ts, _)| ts <= t);
    match (after.checked_sub(1).map(|i| series[i]), series.get(after)) {
        (Some((t0, b0)), Some(&(t1, b1))) if t1 > t0 => b0 as f64 + (b1 as f64 - b0 as f64) * (t - t0) / (t1 - t0),
        (Some((_, b0)), _) => b0 as f64,
        (None, _) => 0.0,
    }
}

/// The first flow's fraction of what all flows received in each recorded interval.
fn share_per_interval(flows: &[FlowRun]) -> Vec<(f64, f64)> {
    let Some(first) = flows.first() else { return Vec::new() };
    (1..first.received.len())
        .filter_map(|k| {
            let delta = |f: &FlowRun| {
                let (a, b) = (f.received.get(k - 1)?.1, f.received.get(k)?.1);
                Some(b.saturating_sub(a) as f64)
            };
            let all: f64 = flows.iter().filter_map(delta).sum();
            (all > 0.0).then(|| (first.received[k].0, delta(first).unwrap_or(0.0) / all))
        })
        .collect()
}

/// A flow's median srtt over time within `window` (seconds since its start).
fn srtt_p50(f: &FlowRun, window: (f64, f64)) -> Option<f64> {
    let at = |s: f64| f.start_ns + (s * 1e9) as u64;
    let (from, to) = (at(window.0), at(window.1));
    let srtt: Vec<(u64, f64)> = f
        .series
        .iter()
        .filter(|p| (from..=to).contains(&p.ts_ns))
        .filter_map(|p| Some((p.ts_ns, f64::from(p.srtt_us?))))
        .collect();
    quantile::over_time(&srtt, to, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::summary::tests::run as flow_run;

    fn flows(per_second: &[(&str, u64)], secs: u32) -> Vec<FlowRun> {
        per_second
            .iter()
            .map(|(cc, rate)| {
                let mut f = flow_run(cc, 0.0);
                f.received = (0..=secs).map(|s| (f64::from(s), rate * u64::from(s))).collect();
                f.elapsed = std::time::Duration::from_secs(u64::from(secs));
                f
            })
            .collect()
    }

    fn cond() -> Conditions {
        Conditions {
            rate_bps: 10_000_000,
            rtt: std::time::Duration::from_millis(40),
            loss: 0.0,
            loss_burst: None,
            buffer_bytes: 400_000,
            duration: std::time::Duration::from_secs(30),
            seed: 1,
        }
    }

    /// 1 BBR at 600 KB/s against 3 CUBIC at 200 KB/s each: BBR's share is one half, Jain's index
    /// (1.2)^2 / (4 x 0.48) = 0.75, the link 96% used; the model's band is checked against it.
    #[test]
    fn shares_and_jain_from_received_bytes() {
        let round = Round {
            scenario: Scenario { buffer_bytes: 400_000, incumbents: 3 },
            repeat: 0,
            flows: flows(&[("bbr", 600_000), ("cubic", 200_000), ("cubic", 200_000), ("cubic", 200_000)], 30),
        };
        let r = measure(&cond(), &round, true);
        assert!((r.challenger.share - 0.5).abs() < 1e-9, "{r:?}");
        assert!((r.incumbent.share - 0.5).abs() < 1e-9);
        assert_eq!(r.incumbent.flows, 3);
        assert!((r.jain_index - 0.75).abs() < 1e-9, "{}", r.jain_index);
        assert!((r.link_used - 0.96).abs() < 1e-9, "{}", r.link_used);
        assert_eq!(r.window_s, (15.0, 30.0));
        assert_eq!(r.in_model_band, Some(true), "model {:?}", r.model);
        assert!(r.challenger_share_per_s.iter().all(|&(_, s)| (s - 0.5).abs() < 1e-9));
    }

    /// The report fits a 100-column terminal, like the other demo summaries.
    #[test]
    fn the_table_fits_100_columns() {
        let round = |buffer_bytes, incumbents| Round {
            scenario: Scenario { buffer_bytes, incumbents },
            repeat: 0,
            flows: flows(&[("bbr", 600_000), ("cubic", 200_000), ("cubic", 200_000), ("cubic", 200_000)], 90),
        };
        let ran = Ran {
            rounds: vec![round(25_000, 1), round(25_000, 3), round(400_000, 1), round(400_000, 3)],
            stopped: None,
        };
        let v1 = BbrImpl {
            version: Some(Version::V1),
            how: "mainline: struct bbr has lt_bw, no inflight_hi; built in".into(),
        };
        let table = Summary::new(&cond(), "bbr", "cubic", v1, &ran).to_table();
        for l in table.lines() {
            assert!(
                l.chars().count() <= crate::demo::summary::TABLE_WIDTH,
                "{} columns: {l}\n{table}",
                l.chars().count()
            );
        }
        assert!(table.contains("8.0 BDP") && table.contains("55%"), "{table}");
    }

    #[test]
    fn bytes_between_points_are_interpolated() {
        let s = [(0.0, 0), (1.0, 100), (2.0, 300)];
        assert_eq!(bytes_at(&s, 1.5), 200.0);
        assert_eq!(bytes_at(&s, 5.0), 300.0);
        assert_eq!(bytes_at(&[], 1.0), 0.0);
    }

    /// A kernel whose BBR is not v1, or a pair the model is not about, gets no model column and
    /// says why.
    #[test]
    fn the_model_is_shown_only_where_it_applies() {
        let ran = Ran { rounds: vec![], stopped: None };
        let v3 = BbrImpl { version: Some(Version::V3), how: "test".into() };
        let s = Summary::new(&cond(), "bbr", "cubic", v3, &ran);
        assert!(s.model_note.as_deref().unwrap().contains("BBRv1"), "{:?}", s.model_note);
        let v1 = BbrImpl { version: Some(Version::V1), how: "test".into() };
        let s = Summary::new(&cond(), "reno", "cubic", v1.clone(), &ran);
        assert!(s.model_note.is_some());
        assert!(Summary::new(&cond(), "bbr", "cubic", v1, &ran).model_note.is_none());
    }
}

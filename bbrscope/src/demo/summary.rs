//! The end of a demo: per-algorithm numbers beside the model's, the BBR/CUBIC ratio, and the
//! emulator's counters as proof the impairment was applied — as a table or one JSON object.

use std::fmt::Write as _;

use bbrscope_emulator::LinkCounters;
use serde::Serialize;

use super::{
    Conditions,
    model::{self, Prediction},
    presets::{Headline, Preset},
    run::FlowRun,
};
use crate::{
    observe::kernel::bbr_version::BbrImpl,
    quantile,
    units::{fmt_bytes, fmt_rate, fmt_us},
};

/// Used when the socket did not report its MSS (an IPv4 path with a 1500-byte MTU and timestamps).
const DEFAULT_MSS: u32 = 1448;

/// What was measured of a flow: one run's values, or their combination over repetitions.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Measured {
    pub(crate) goodput_bps: f64,
    pub(crate) retransmits: u32,
    /// srtt's median and 95th percentile over the run's time ([`quantile::over_time`]).
    pub(crate) srtt_p50_us: Option<f64>,
    pub(crate) srtt_p95_us: Option<f64>,
    pub(crate) cwnd_min: Option<u32>,
    pub(crate) cwnd_max: Option<u32>,
    /// 10th and 90th percentile of cwnd over the second half of the run (after start-up).
    pub(crate) cwnd_band: Option<(u32, u32)>,
    /// Each multiplicative decrease: the new ssthresh over the highest cwnd sampled since the
    /// previous one (CUBIC: ~0.7). See [`reductions`].
    pub(crate) cwnd_reductions: Vec<f64>,
    /// When each of `cwnd_reductions` happened, in seconds since its flow started: a cut in the
    /// first round trips (BBR's STARTUP overflowing a shallow buffer) is not the same finding as a
    /// sawtooth in the steady state.
    pub(crate) cwnd_reductions_at_s: Vec<f64>,
}

impl Measured {
    /// Over repetitions: medians of goodput, retransmits and the RTT percentiles; the widest cwnd
    /// range and band; every reduction.
    fn combine(runs: &[&Measured]) -> Self {
        let med = |f: &dyn Fn(&Measured) -> Option<f64>| median(runs.iter().filter_map(|r| f(r)));
        Measured {
            goodput_bps: med(&|r| Some(r.goodput_bps)).unwrap_or(0.0),
            retransmits: med(&|r| Some(f64::from(r.retransmits))).unwrap_or(0.0) as u32,
            srtt_p50_us: med(&|r| r.srtt_p50_us),
            srtt_p95_us: med(&|r| r.srtt_p95_us),
            cwnd_min: runs.iter().filter_map(|r| r.cwnd_min).min(),
            cwnd_max: runs.iter().filter_map(|r| r.cwnd_max).max(),
            cwnd_band: runs.iter().filter_map(|r| r.cwnd_band).reduce(|a, b| (a.0.min(b.0), a.1.max(b.1))),
            cwnd_reductions: runs.iter().flat_map(|r| r.cwnd_reductions.iter().copied()).collect(),
            cwnd_reductions_at_s: runs.iter().flat_map(|r| r.cwnd_reductions_at_s.iter().copied()).collect(),
        }
    }
}

/// One flow in one round.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunStats {
    #[serde(flatten)]
    pub(crate) measured: Measured,
    pub(crate) samples: usize,
    pub(crate) mss: u32,
    pub(crate) emulator: LinkCounters,
}

impl RunStats {
    /// `run`'s numbers; "after start-up" is its second half, of the time it actually ran.
    pub(crate) fn of(run: &FlowRun) -> Self {
        let duration = run.elapsed;
        let end = run.start_ns + duration.as_nanos() as u64;
        let srtt: Vec<(u64, f64)> = run.series.iter().filter_map(|p| Some((p.ts_ns, f64::from(p.srtt_us?)))).collect();
        let cwnd: Vec<u32> = run.series.iter().filter_map(|p| p.cwnd).collect();
        let half = run.start_ns + duration.as_nanos() as u64 / 2;
        let late: Vec<f64> =
            run.series.iter().filter(|p| p.ts_ns >= half).filter_map(|p| p.cwnd).map(f64::from).collect();
        let band = quantile::nearest_rank(&late, 0.10)
            .zip(quantile::nearest_rank(&late, 0.90))
            .map(|(lo, hi)| (lo as u32, hi as u32));
        let (cut_at, cuts): (Vec<u64>, Vec<f64>) =
            reductions(run.series.iter().map(|p| (p.ts_ns, p.cwnd, p.ssthresh))).into_iter().unzip();
        let since_start = |ts: u64| (ts.saturating_sub(run.start_ns) / 1_000_000) as f64 / 1000.0;
        RunStats {
            measured: Measured {
                goodput_bps: run.goodput_bps,
                retransmits: run.tcp.retransmits,
                srtt_p50_us: quantile::over_time(&srtt, end, 0.50),
                srtt_p95_us: quantile::over_time(&srtt, end, 0.95),
                cwnd_min: cwnd.iter().copied().min(),
                cwnd_max: cwnd.iter().copied().max(),
                cwnd_band: band,
                cwnd_reductions: cuts,
                cwnd_reductions_at_s: cut_at.into_iter().map(since_start).collect(),
            },
            samples: run.series.len(),
            mss: if run.tcp.mss > 0 { run.tcp.mss } else { DEFAULT_MSS },
            emulator: run.link,
        }
    }
}

/// Multiplicative decreases in a flow's (time, cwnd, ssthresh) samples, each with the time of the
/// sample that showed it: each time cwnd comes down from
/// above ssthresh to land on it (within 10%), at least 10% below the highest cwnd since the
/// previous one, as ssthresh over that peak (CUBIC: ~0.7). HyStart leaving slow start at
/// ssthresh = cwnd is no decrease. Landing on ssthresh is what fast recovery does; BBR's PROBE_RTT dips to 4
/// packets and its ssthresh (set to the BDP estimate when leaving STARTUP) are not counted.
pub(crate) fn reductions<T>(samples: impl IntoIterator<Item = (T, Option<u32>, Option<u32>)>) -> Vec<(T, f64)> {
    let mut out = Vec::new();
    let (mut peak, mut armed) = (0u32, false);
    for (at, cwnd, ssthresh) in samples {
        let Some(cwnd) = cwnd else { continue };
        peak = peak.max(cwnd);
        match ssthresh {
            Some(s)
                if armed
                    && f64::from(s) <= 0.9 * f64::from(peak)
                    && (f64::from(cwnd) - f64::from(s)).abs() <= 0.1 * f64::from(s) =>
            {
                out.push((at, (f64::from(s) / f64::from(peak) * 1000.0).round() / 1000.0));
                (armed, peak) = (false, cwnd);
            }
            s if s.is_none_or(|s| f64::from(cwnd) > 1.1 * f64::from(s)) => armed = true,
            _ => {}
        }
    }
    out
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    quantile::nearest_rank(&values.collect::<Vec<_>>(), 0.5)
}

/// One algorithm over all repetitions (medians where there were several).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct AlgoResult {
    pub(crate) cc: String,
    #[serde(flatten)]
    pub(crate) measured: Measured,
    pub(crate) predicted_goodput_bps: Option<f64>,
    pub(crate) predicted_goodput_range_bps: Option<(f64, f64)>,
    pub(crate) predicted_srtt_range_us: (f64, f64),
    pub(crate) model: &'static str,
    /// The emulator's counters for this algorithm's link, summed over repetitions.
    pub(crate) emulator: LinkCounters,
    pub(crate) runs: Vec<RunStats>,
}

impl AlgoResult {
    fn new(cc: &str, runs: Vec<RunStats>, cond: &Conditions) -> Self {
        let Prediction { model, goodput_bps, goodput_range_bps, srtt_range_us } =
            model::predict(cc, &cond.path(f64::from(runs[0].mss)));
        let mut emulator = LinkCounters::default();
        for r in &runs {
            emulator.add(&r.emulator);
        }
        AlgoResult {
            cc: cc.to_string(),
            measured: Measured::combine(&runs.iter().map(|r| &r.measured).collect::<Vec<_>>()),
            predicted_goodput_bps: goodput_bps,
            predicted_goodput_range_bps: goodput_range_bps,
            predicted_srtt_range_us: srtt_range_us,
            model,
            emulator,
            runs,
        }
    }
}

/// BBR against CUBIC, measured and modelled.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Ratios {
    pub(crate) goodput_bbr_over_cubic: f64,
    pub(crate) predicted_goodput_bbr_over_cubic: Option<(f64, f64)>,
    pub(crate) srtt_p50_cubic_over_bbr: Option<f64>,
    pub(crate) predicted_srtt_cubic_over_bbr: (f64, f64),
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct PresetInfo {
    pub(crate) name: &'static str,
    /// Some of the preset's path values were overridden on the command line.
    pub(crate) modified: bool,
    pub(crate) source: &'static str,
    pub(crate) published: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct RunConditions {
    #[serde(flatten)]
    pub(crate) path: Conditions,
    pub(crate) buffer_bdp: f64,
    pub(crate) repeat: u32,
    /// Algorithms one after the other rather than at the same time.
    pub(crate) sequential: bool,
}

/// A demo stopped before its time (q, Ctrl-C, a signal): the numbers cover what ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct StoppedEarly {
    /// "q", "Ctrl-C", "SIGINT", "SIGTERM".
    pub(crate) by: String,
    /// How long the round that was stopped had run, of `conditions.duration_s`.
    pub(crate) after_s: f64,
}

/// The widest line [`Summary::to_table`] prints: fits an 80-column terminal's wider cousins
/// and any 100-column one without wrapping.
pub(crate) const TABLE_WIDTH: usize = 100;

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Summary {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) preset: PresetInfo,
    pub(crate) conditions: RunConditions,
    /// Present only when the demo was stopped early.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stopped_early: Option<StoppedEarly>,
    pub(crate) results: Vec<AlgoResult>,
    pub(crate) ratio: Option<Ratios>,
    /// Which BBR produced the numbers, when one of the algorithms is BBR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bbr: Option<BbrImpl>,
    #[serde(skip)]
    headline: Headline,
}

impl Summary {
    /// `runs` holds every round's flows, in any order; results follow `algos`. `modified`: the
    /// command line overrode some of the preset's path.
    pub(crate) fn new(
        preset: &Preset,
        modified: bool,
        conditions: RunConditions,
        algos: &[String],
        runs: &[FlowRun],
    ) -> Self {
        let results: Vec<AlgoResult> = algos
            .iter()
            .map(|cc| runs.iter().filter(|r| &r.cc == cc).map(RunStats::of).collect::<Vec<_>>())
            .zip(algos)
            // An algorithm that never ran (stopped before its sequential turn) has no result.
            .filter(|(stats, _)| !stats.is_empty())
            .map(|(stats, cc)| AlgoResult::new(cc, stats, &conditions.path))
            .collect();
        let ratio = ratios(&results);
        Summary {
            kind: "demo_summary",
            preset: PresetInfo { name: preset.name, modified, source: preset.source, published: preset.published },
            conditions,
            stopped_early: None,
            results,
            ratio,
            bbr: None,
            headline: preset.headline,
        }
    }

    /// Names the kernel's BBR implementation in the report.
    pub(crate) fn bbr(mut self, bbr: Option<BbrImpl>) -> Self {
        self.bbr = bbr;
        self
    }

    /// Marks the summary as covering a run stopped early.
    pub(crate) fn stopped(mut self, stopped: Option<StoppedEarly>) -> Self {
        self.stopped_early = stopped;
        self
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the summary serialises")
    }

    /// The human-readable report, no line wider than [`TABLE_WIDTH`]: prose is wrapped and the
    /// numbers come in narrow tables (goodput; RTT and cwnd; the emulator's counters in two).
    pub(crate) fn to_table(&self) -> String {
        let c = &self.conditions;
        let p = &c.path;
        let mut out = String::new();
        let pre = &self.preset;
        let name = if pre.modified { format!("{}, modified", pre.name) } else { pre.name.to_string() };
        let loss = match p.loss_burst {
            Some(b) if p.loss > 0.0 => format!("{}% random loss in bursts of {b} packets", pct(p.loss)),
            _ => format!("{}% random loss", pct(p.loss)),
        };
        let heading = format!(
            "bbrscope demo ({name}): {} bottleneck, {} RTT, {loss}, drop-tail buffer {} ({:.2} BDP), {} s{}, \
             seed {}, {}",
            fmt_rate(p.rate_bps as f64),
            fmt_us(p.rtt.as_micros() as f64),
            fmt_bytes(p.buffer_bytes as f64),
            c.buffer_bdp,
            p.duration.as_secs_f64(),
            if c.repeat > 1 { format!(" x {} runs", c.repeat) } else { String::new() },
            p.seed,
            if c.sequential { "one algorithm after the other" } else { "all algorithms at once on identical links" },
        );
        out += &wrap(&heading, "  ");
        if let Some(s) = &self.stopped_early {
            out += &wrap(
                &format!(
                    "STOPPED EARLY ({}) after {:.1} of {:.0} s: the numbers cover only the part that ran",
                    s.by,
                    s.after_s,
                    p.duration.as_secs_f64()
                ),
                "  ",
            );
        }
        out += &wrap(&format!("source: {}", pre.source), "  ");
        out += &wrap(&format!("published: {}", pre.published), "  ");
        if let Some(b) = &self.bbr {
            out += &wrap(&format!("BBR on this kernel: {}", b.describe()), "  ");
        }
        out.push('\n');
        let mut goodput = vec![["cc", "goodput", "model", "meas/model", "retrans"].map(String::from).to_vec()];
        let mut rtt_cwnd = vec![
            ["cc", "srtt p50", "srtt p95", "model srtt", "cwnd min-max", "cwnd p10-p90", "cwnd cuts"]
                .map(String::from)
                .to_vec(),
        ];
        for r in &self.results {
            let range = r.predicted_goodput_range_bps.map_or("-".into(), |(lo, hi)| {
                if (hi - lo).abs() < 1.0 { fmt_rate(lo) } else { format!("{}-{}", fmt_num(lo), fmt_rate(hi)) }
            });
            let vs =
                r.predicted_goodput_range_bps.map_or("-".into(), |(lo, hi)| ratio_vs(r.measured.goodput_bps, lo, hi));
            let (slo, shi) = r.predicted_srtt_range_us;
            let cuts = match r.measured.cwnd_reductions.as_slice() {
                [] => "0".to_string(),
                v => format!("{} (x{:.2})", v.len(), median(v.iter().copied()).unwrap_or(0.0)),
            };
            goodput.push(vec![
                r.cc.clone(),
                fmt_rate(r.measured.goodput_bps),
                range,
                vs,
                r.measured.retransmits.to_string(),
            ]);
            rtt_cwnd.push(vec![
                r.cc.clone(),
                r.measured.srtt_p50_us.map_or("-".into(), fmt_us),
                r.measured.srtt_p95_us.map_or("-".into(), fmt_us),
                format!("{}-{}", fmt_num_ms(slo), fmt_us(shi)),
                r.measured.cwnd_min.zip(r.measured.cwnd_max).map_or("-".into(), |(a, b)| format!("{a}-{b}")),
                r.measured.cwnd_band.map_or("-".into(), |(a, b)| format!("{a}-{b}")),
                cuts,
            ]);
        }
        out += &table(&goodput);
        out.push('\n');
        out += &table(&rtt_cwnd);
        for r in &self.results {
            out += &wrap(&format!("  model for {}: {}", r.cc, r.model), "    ");
            if r.runs.len() > 1 {
                let g: Vec<String> = r.runs.iter().map(|x| fmt_rate(x.measured.goodput_bps)).collect();
                out += &wrap(&format!("  {} goodput per run: {}", r.cc, g.join(", ")), "    ");
            }
        }
        if let Some(x) = &self.ratio {
            out.push('\n');
            let goodput = format!(
                "BBR/CUBIC goodput: {:.1}x (model {})",
                x.goodput_bbr_over_cubic,
                x.predicted_goodput_bbr_over_cubic.map_or("-".into(), |(lo, hi)| format!("{lo:.1}-{hi:.1}x"))
            );
            let rtt = x.srtt_p50_cubic_over_bbr.map(|m| {
                let (lo, hi) = x.predicted_srtt_cubic_over_bbr;
                format!("CUBIC/BBR median srtt: {m:.1}x (model {lo:.1}-{hi:.1}x)")
            });
            let lines = match self.headline {
                Headline::Goodput => [Some(goodput), rtt],
                Headline::Rtt => [rtt, Some(goodput)],
            };
            for l in lines.into_iter().flatten() {
                out += &wrap(&l, "  ");
            }
        }
        out += "\nemulator counters (proof the impairment was applied):\n";
        let mut traffic =
            vec![["link", "data pkts", "random loss", "queue drops", "delivered"].map(String::from).to_vec()];
        let mut timing = vec![
            ["link", "queue delay mean/max", "released late mean/max", ">1 ms", "largest pkt"]
                .map(String::from)
                .to_vec(),
        ];
        for r in &self.results {
            let e = &r.emulator;
            traffic.push(vec![
                r.cc.clone(),
                e.data_packets.to_string(),
                format!("{} ({:.2}% vs {}%)", e.lost, e.loss_rate() * 100.0, pct(p.loss)),
                e.queue_dropped.to_string(),
                format!("{} pkts, {}", e.delivered, fmt_bytes(e.delivered_bytes as f64)),
            ]);
            timing.push(vec![
                r.cc.clone(),
                format!("{} / {}", fmt_us(e.queue_delay_mean_us), fmt_us(e.queue_delay_max_us)),
                format!("{:.0} / {:.0} us", e.release_late_mean_us, e.release_late_max_us),
                format!(
                    "{:.3}%",
                    e.release_late_over_ms as f64 * 100.0 / (e.delivered + e.return_packets).max(1) as f64
                ),
                format!("{} B", e.largest_packet),
            ]);
        }
        out += &table(&traffic);
        out += &table(&timing);
        out
    }
}

/// `text` wrapped to [`TABLE_WIDTH`] ([`crate::prose::wrap`]), continuation lines starting with
/// `indent`, each line ending in a newline.
pub(super) fn wrap(text: &str, indent: &str) -> String {
    crate::prose::wrap(text, TABLE_WIDTH, indent).into_iter().map(|l| l + "\n").collect()
}

fn ratios(results: &[AlgoResult]) -> Option<Ratios> {
    let cubic = results.iter().find(|r| r.cc == "cubic")?;
    let bbr = results.iter().find(|r| r.cc == "bbr")?;
    let c = cubic.predicted_goodput_bps?;
    let (clo, chi) = cubic.predicted_srtt_range_us;
    let (blo, bhi) = bbr.predicted_srtt_range_us;
    Some(Ratios {
        goodput_bbr_over_cubic: bbr.measured.goodput_bps / cubic.measured.goodput_bps.max(1.0),
        predicted_goodput_bbr_over_cubic: bbr.predicted_goodput_range_bps.map(|(lo, hi)| (lo / c, hi / c)),
        srtt_p50_cubic_over_bbr: cubic.measured.srtt_p50_us.zip(bbr.measured.srtt_p50_us).map(|(c, b)| c / b),
        predicted_srtt_cubic_over_bbr: (clo / bhi, chi / blo),
    })
}

/// "1.09x", or "in range" style for a range model.
fn ratio_vs(measured: f64, lo: f64, hi: f64) -> String {
    if (hi - lo).abs() < 1.0 {
        format!("{:.2}x", measured / lo)
    } else if measured < lo {
        format!("{:.2}x low", measured / lo)
    } else if measured > hi {
        format!("{:.2}x high", measured / hi)
    } else {
        "in range".into()
    }
}

fn pct(p: f64) -> String {
    format!("{}", (p * 1e4).round() / 1e2)
}

/// The number part of a rate, in the unit `fmt_rate` would pick, for "lo-hi unit".
fn fmt_num(bps: f64) -> String {
    fmt_rate(bps).split(' ').next().unwrap_or_default().to_string()
}

fn fmt_num_ms(us: f64) -> String {
    fmt_us(us).split(' ').next().unwrap_or_default().to_string()
}

/// Left-aligned first column, right-aligned others, two spaces apart.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> =
        (0..cols).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        for (c, cell) in row.iter().enumerate() {
            let _ = if c == 0 {
                write!(out, "{cell:<w$}", w = width[c])
            } else {
                write!(out, "  {cell:>w$}", w = width[c])
            };
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn reductions_from_a_cubic_sawtooth() {
        // Slow start to 100, cut to 70; teeth back to 100 and 70 again (same ssthresh), then a
        // loss at 90 (ssthresh 63).
        let mut s = vec![(Some(10), None), (Some(100), None), (Some(100), Some(98)), (Some(80), Some(70))];
        s.push((Some(70), Some(70)));
        s.extend([(Some(85), Some(70)), (Some(100), Some(70)), (Some(71), Some(70)), (Some(90), Some(70))]);
        s.extend([(Some(64), Some(63)), (Some(66), Some(63))]);
        let cuts = reductions(s.into_iter().enumerate().map(|(i, (c, t))| (i, c, t)));
        assert_eq!(cuts, vec![(4, 0.7), (7, 0.7), (9, 0.7)], "each with the sample that landed on ssthresh");
    }

    #[test]
    fn bbr_startup_exit_and_probe_rtt_are_not_reductions() {
        // ssthresh set to the BDP estimate while cwnd stays at twice that, then PROBE_RTT's dip
        // to 4 packets and back.
        let mut s = vec![(Some(10), None), (Some(1200), None)];
        s.extend(std::iter::repeat_n((Some(890), Some(450)), 50));
        s.extend([(Some(4), Some(450)), (Some(4), Some(450)), (Some(890), Some(450))]);
        assert!(reductions(s.into_iter().map(|(c, t)| ((), c, t))).is_empty());
    }

    #[test]
    fn no_reductions_without_ssthresh() {
        assert!(reductions((0..100).map(|i| (i, Some(100 + i % 7), None))).is_empty());
    }

    /// A run with every number at its widest plausible length.
    pub(crate) fn run(cc: &str, goodput_bps: f64) -> FlowRun {
        use crate::{demo::traffic::TcpStats, observe::flow::Point};
        let series = (0..600u64)
            .map(|i| Point {
                ts_ns: i * 50_000_000,
                cwnd: Some(1000 + (i % 300) as u32),
                ssthresh: Some(900),
                srtt_us: Some(1_186_000 + i as u32),
                min_rtt_us: Some(100_000),
                pacing_rate_bps: Some(50_000_000),
                delivery_rate_bps: Some(44_000_000),
                throughput_bps: Some(goodput_bps as u64 + i * 1000),
                retrans_total: Some(i as u32),
                data_segs_out: Some(i as u32 * 100),
                app_limited: false,
                rwnd_limited: false,
                bbr_mode: None,
            })
            .collect();
        let link = LinkCounters {
            data_packets: 1_234_567,
            data_bytes: 1_851_850_500,
            lost: 123_456,
            queue_dropped: 12_345,
            delivered: 1_098_766,
            delivered_bytes: 1_648_149_000,
            queue_delay_mean_us: 925_000.0,
            queue_delay_max_us: 1_186_000.0,
            return_packets: 600_000,
            release_late_mean_us: 512.0,
            release_late_max_us: 12_345.0,
            release_late_over_ms: 4321,
            largest_packet: 1500,
            write_errors: 0,
        };
        FlowRun {
            cc: cc.into(),
            goodput_bps,
            tcp: TcpStats { retransmits: 123_456, data_segs_out: 9_000_000, mss: 1448 },
            series,
            received: (0..=30).map(|s| (f64::from(s), (goodput_bps / 8.0 * f64::from(s)) as u64)).collect(),
            start_ns: 0,
            elapsed: std::time::Duration::from_secs(30),
            link,
        }
    }

    fn summary(preset: crate::demo::presets::PresetName, stopped: Option<StoppedEarly>) -> Summary {
        let preset = preset.preset();
        let path = Conditions {
            rate_bps: preset.rate_bps,
            rtt: preset.rtt,
            loss: 0.0123,
            loss_burst: Some(2.5),
            buffer_bytes: 1_500_000,
            duration: preset.duration,
            seed: 12345,
        };
        let cond = RunConditions { buffer_bdp: 12.0, path, repeat: 3, sequential: true };
        let algos = ["cubic".to_string(), "bbr".to_string()];
        let runs: Vec<FlowRun> = (0..3).flat_map(|_| [run("cubic", 1_812_345.0), run("bbr", 44_912_345.0)]).collect();
        Summary::new(&preset, true, cond, &algos, &runs).stopped(stopped)
    }

    /// The report fits a 100-column terminal (it was 257 wide), for every preset's prose.
    #[test]
    fn table_fits_100_columns() {
        use crate::demo::presets::PresetName;
        for name in [PresetName::CrossBorder, PresetName::GoogleLossy, PresetName::Bufferbloat, PresetName::Sawtooth] {
            let stopped = StoppedEarly { by: "Ctrl-C".into(), after_s: 12.3 };
            let t = summary(name, Some(stopped)).to_table();
            for l in t.lines() {
                assert!(l.chars().count() <= TABLE_WIDTH, "{} columns: {l}\n{t}", l.chars().count());
            }
            for what in ["BBR/CUBIC goodput", "srtt p95", "cwnd cuts", "queue drops", "released late", "STOPPED EARLY"]
            {
                assert!(t.contains(what), "{what} missing:\n{t}");
            }
        }
    }

    #[test]
    fn stopped_early_is_in_the_json_only_when_it_happened() {
        use crate::demo::presets::PresetName;
        let v: serde_json::Value = serde_json::from_str(&summary(PresetName::GoogleLossy, None).to_json()).unwrap();
        assert!(v.get("stopped_early").is_none(), "{v}");
        let s = summary(PresetName::GoogleLossy, Some(StoppedEarly { by: "q".into(), after_s: 4.5 }));
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(v["stopped_early"], serde_json::json!({"by": "q", "after_s": 4.5}));
    }

    #[test]
    fn tables_align() {
        let t = table(&[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(t, "a    bb\nccc   d\n");
    }
}

//! "Why is this flow slow?" — a verdict per flow, in plain words, from its recent history.
//!
//! The rules follow what limits a TCP sender: the peer's receive window, the application, loss
//! (and whether it is random loss, which CUBIC mistakes for congestion and BBR ignores, or loss
//! at a full queue), or a standing queue that inflates RTT (bufferbloat).

use crate::{
    observe::event::CaState,
    observe::flow::{Flow, Point},
    units::fmt_us_fine,
};

/// How far back the verdict looks.
pub(crate) const WINDOW_NS: u64 = 5_000_000_000;
/// Loss rate (retransmitted / sent segments) above which a loss-based algorithm is limited by it
/// on any path longer than a LAN (Mathis: at 0.1% and 50 ms, a 1448-byte MSS allows ~9 Mbit/s).
const LOSS_LIMITED: f64 = 0.001;
/// RTT over its minimum by this factor is a queue even when the excess is only milliseconds.
const EXTREME_INFLATION: u32 = 10;
/// BBRv1 keeps probing while 1.25 x (1 - loss) >= 1; beyond ~20% it falls apart.
const BBR_LOSS_CEILING: f64 = 0.15;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Not enough samples yet.
    Measuring,
    Closed,
    /// Retransmission timeout: nothing is being acknowledged.
    Stalled,
    /// A loss-based algorithm held back by loss.
    LossLimited {
        loss: f64,
        split: LossSplit,
        rtt: Rtt,
        bbr_would_help: bool,
    },
    /// BBR under loss it does not back off for: the loss costs retransmissions, not rate.
    BbrUnderLoss {
        loss: f64,
        split: LossSplit,
        rtt: Rtt,
    },
    HeavyLoss {
        loss: f64,
    },
    ReceiverWindow {
        rwnd_bytes: u32,
    },
    ApplicationLimited,
    Bufferbloat {
        srtt_us: u32,
        min_rtt_us: u32,
    },
    /// RTT above its minimum by more than jitter, short of a standing queue.
    RttElevated {
        rtt: Rtt,
    },
    /// Nothing limits the sender: loss under 0.1%, RTT within 50% (or 5 ms) of its minimum.
    Healthy {
        loss: f64,
        rtt: Rtt,
    },
}

/// How much of a flow's loss is random (it happens while the RTT is low as well as at its peak)
/// and how much is at a full queue (only at the RTT's peak, where the bottleneck's buffer
/// overflows). The RTT's median alone cannot tell them apart: BBR on a path with 5% random loss
/// keeps a queue too, and was told its loss was the queue's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct LossSplit {
    /// Retransmitted / sent segments at the RTT's low: loss no full queue explains.
    pub(crate) random: f64,
    /// The rest of the loss.
    pub(crate) queue: f64,
}

impl LossSplit {
    pub(crate) fn is_random(&self) -> bool {
        self.random >= self.queue
    }
}

/// The smoothed RTT (median of the window) and the minimum it is judged against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rtt {
    pub(crate) srtt_us: Option<u32>,
    pub(crate) min_rtt_us: Option<u32>,
}

impl Rtt {
    /// `RTT 52 ms against a 50 ms minimum (1.0x)`, or what is known of it.
    fn words(&self) -> String {
        match (self.srtt_us, self.min_rtt_us) {
            (Some(s), Some(m)) => {
                format!(
                    "RTT {} (5 s median) against a {} minimum ({:.1}x)",
                    fmt_us_fine(s),
                    fmt_us_fine(m),
                    f64::from(s) / f64::from(m.max(1))
                )
            }
            (Some(s), None) => format!("RTT {} (5 s median)", fmt_us_fine(s)),
            _ => "RTT not measured yet".into(),
        }
    }

    /// No standing queue: within 50% (or 5 ms) of the minimum.
    fn queue_free(&self) -> bool {
        match (self.srtt_us, self.min_rtt_us) {
            (Some(s), Some(m)) => f64::from(s) <= f64::from(m) * 1.5 || s.saturating_sub(m) < 5_000,
            _ => true,
        }
    }
}

/// `1.0%`, `0.25%`: the precision a loss rate is shown with, in the label and the sentence alike.
fn pct(loss: f64) -> String {
    let p = loss * 100.0;
    if p >= 10.0 {
        format!("{p:.0}%")
    } else if p >= 1.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.2}%")
    }
}

impl Verdict {
    /// A few words for a table column.
    pub(crate) fn label(&self) -> String {
        match self {
            Verdict::Measuring => "measuring".into(),
            Verdict::Closed => "closed".into(),
            Verdict::Stalled => "stalled (RTO)".into(),
            Verdict::LossLimited { loss, .. } => format!("loss-limited {}", pct(*loss)),
            Verdict::BbrUnderLoss { loss, .. } => format!("loss {} (bbr)", pct(*loss)),
            Verdict::HeavyLoss { loss } => format!("heavy loss {}", pct(*loss)),
            Verdict::ReceiverWindow { .. } => "rwnd-limited".into(),
            Verdict::ApplicationLimited => "app-limited".into(),
            Verdict::Bufferbloat { .. } => "queueing".into(),
            Verdict::RttElevated { .. } => "rtt elevated".into(),
            Verdict::Healthy { .. } => "healthy".into(),
        }
    }

    /// One sentence for someone who has never read about congestion control. Every number it
    /// states is the one the verdict was made from (a property test holds it to that).
    pub(crate) fn explain(&self, cc: &str) -> String {
        match self {
            Verdict::Measuring => "Collecting samples…".into(),
            Verdict::Closed => "The connection has closed.".into(),
            Verdict::Stalled => {
                "Stalled: nothing is being acknowledged, the sender is waiting for a retransmission timeout.".into()
            }
            Verdict::LossLimited { loss, split, rtt, bbr_would_help: true } => format!(
                "Loss-limited: {} of segments are retransmitted, {} of them random: lost at any RTT, not only at \
                 its peak, so not congestion ({}). {cc} backs off on every loss; BBR would likely be much faster \
                 (bbrscope apply bbr).",
                pct(*loss),
                pct(split.random),
                rtt.words()
            ),
            Verdict::LossLimited { loss, split, rtt, .. } if split.is_random() => format!(
                "Loss-limited: {} of segments are retransmitted, {} of them random: lost at any RTT, not only at \
                 its peak ({}).",
                pct(*loss),
                pct(split.random),
                rtt.words()
            ),
            Verdict::LossLimited { loss, split, rtt, .. } => format!(
                "Loss-limited at a full queue: {} retransmitted, {} of it at the RTT's peak ({}), so the \
                 bottleneck buffer overflows (congestion). BBR would cut the queueing delay more than raise \
                 throughput.",
                pct(*loss),
                pct(split.queue),
                rtt.words()
            ),
            Verdict::BbrUnderLoss { loss, split, rtt } if split.is_random() => format!(
                "Losing {} of segments, {} of them random: lost at any RTT, not only at its peak. BBR does not \
                 slow down for it, so it keeps its rate; the cost is the retransmissions and the delay they add \
                 to the data they carry. {}.",
                pct(*loss),
                pct(split.random),
                rtt.words()
            ),
            Verdict::BbrUnderLoss { loss, split, rtt } => format!(
                "Losing {} of segments, {} of it at the RTT's peak ({}): loss at a full queue. BBRv1 keeps sending \
                 into it, so the loss and the queue stay (and loss-based flows sharing the bottleneck back off).",
                pct(*loss),
                pct(split.queue),
                rtt.words()
            ),
            Verdict::HeavyLoss { loss } => format!(
                "Heavy loss: {} of segments are retransmitted; even BBR degrades above about 20%. The path itself needs fixing.",
                pct(*loss)
            ),
            Verdict::ReceiverWindow { rwnd_bytes } => format!(
                "Receiver-window limited: the peer advertises only {} KiB and the sender keeps it full. Raise the \
                 receiver's buffers (net.ipv4.tcp_rmem) — the congestion control is not the limit.",
                rwnd_bytes / 1024
            ),
            Verdict::ApplicationLimited => {
                "Application-limited: the sender often has nothing queued to send. The network is not the bottleneck."
                    .into()
            }
            Verdict::Bufferbloat { srtt_us, min_rtt_us } => format!(
                "Queueing delay: {} — a standing queue (bufferbloat) in front of the bottleneck. BBR keeps \
                 queues short; loss-based {cc} fills them.",
                Rtt { srtt_us: Some(*srtt_us), min_rtt_us: Some(*min_rtt_us) }.words()
            ),
            Verdict::RttElevated { rtt } => format!(
                "RTT elevated: {} — some queueing at the bottleneck, short of bufferbloat (twice the minimum and \
                 10 ms more).",
                rtt.words()
            ),
            Verdict::Healthy { loss, rtt } => format!(
                "Healthy: {} of segments retransmitted, {}; the sender is using the path.",
                pct(*loss),
                rtt.words()
            ),
        }
    }
}

fn fraction(points: &[&Point], pred: impl Fn(&Point) -> bool) -> f64 {
    points.iter().filter(|p| pred(p)).count() as f64 / points.len().max(1) as f64
}

/// Tells random loss from loss at a full queue by the RTT at the losses: the loss rate over the
/// sample intervals with the RTT in the lower half of its range in the window, from the sample
/// before them to their end (no full queue there), is random loss; what the whole window loses
/// beyond that is the queue's. With no queue at all (`queue_free`) the loss is random; an RTT
/// that hardly moves (under a tenth of its value) or never stays low has no low half to tell
/// by, and its loss is the queue's.
fn split_loss(recent: &[&Point], loss: f64, queue_free: bool) -> LossSplit {
    let whole = |random: bool| {
        if random { LossSplit { random: loss, queue: 0.0 } } else { LossSplit { random: 0.0, queue: loss } }
    };
    let srtts = recent.iter().filter_map(|p| p.srtt_us);
    let (Some(lo), Some(hi)) = (srtts.clone().min(), srtts.max()) else { return whole(queue_free) };
    if queue_free || hi - lo < hi / 10 {
        return whole(queue_free);
    }
    let mid = lo + (hi - lo) / 2;
    let (mut lost, mut sent) = (0u64, 0u64);
    for w in recent.windows(3) {
        let (a, b) = (w[1], w[2]);
        // Low since the sample before the interval too: the segments a full queue dropped are
        // counted as retransmitted up to two samples after its peak (the sender backs off and
        // the queue drains first: a recorded CUBIC sawtooth on loopback), when the RTT is low.
        if let (Some(r0), Some(r1), Some(s0), Some(s1)) =
            (a.retrans_total, b.retrans_total, a.data_segs_out, b.data_segs_out)
            && w.iter().all(|p| p.srtt_us.is_some_and(|v| v < mid))
        {
            lost += u64::from(r1.saturating_sub(r0));
            sent += u64::from(s1.saturating_sub(s0));
        }
    }
    if sent == 0 {
        return whole(false);
    }
    let random = (lost as f64 / sent as f64).min(loss);
    LossSplit { random, queue: loss - random }
}

/// The verdict for `flow` over the last [`WINDOW_NS`] before `now_ns`.
pub(crate) fn diagnose(flow: &Flow, now_ns: u64) -> Verdict {
    if flow.closed_ns.is_some() {
        return Verdict::Closed;
    }
    if flow.ca_state == CaState::Loss {
        return Verdict::Stalled;
    }
    let since = now_ns.saturating_sub(WINDOW_NS);
    let recent: Vec<&Point> = flow.history.iter().filter(|p| p.ts_ns >= since).collect();
    if recent.len() < 3 {
        return Verdict::Measuring;
    }
    let (first, last) = (recent[0], recent[recent.len() - 1]);
    let loss = match (first.retrans_total, last.retrans_total, first.data_segs_out, last.data_segs_out) {
        (Some(r0), Some(r1), Some(s0), Some(s1)) if s1 > s0 => f64::from(r1.saturating_sub(r0)) / f64::from(s1 - s0),
        _ => 0.0,
    };
    let srtt = crate::quantile::upper_median(recent.iter().filter_map(|p| p.srtt_us).collect());
    let min_rtt = recent.iter().filter_map(|p| p.min_rtt_us).min();
    let rtt = Rtt { srtt_us: srtt, min_rtt_us: min_rtt };
    let queue_free = rtt.queue_free();
    let is_bbr = flow.cc == "bbr";

    if is_bbr && loss >= BBR_LOSS_CEILING {
        return Verdict::HeavyLoss { loss };
    }
    if loss >= LOSS_LIMITED {
        let split = split_loss(&recent, loss, queue_free);
        if is_bbr {
            return Verdict::BbrUnderLoss { loss, split, rtt };
        }
        let bbr_would_help = split.is_random() && loss < BBR_LOSS_CEILING;
        return Verdict::LossLimited { loss, split, rtt, bbr_would_help };
    }
    if fraction(&recent, |p| p.rwnd_limited) >= 0.5 {
        let rwnd = flow.metrics.as_ref().and_then(|m| m.snd_wnd).unwrap_or(0);
        return Verdict::ReceiverWindow { rwnd_bytes: rwnd };
    }
    if fraction(&recent, |p| p.app_limited) >= 0.5 {
        return Verdict::ApplicationLimited;
    }
    // A standing queue: RTT at least twice its minimum by 10 ms or more — or, on a short path
    // (a LAN, loopback), ten times it by over a millisecond, which is no less a queue for being
    // small in absolute terms (a 770x inflation is not "healthy").
    if let (Some(s), Some(m)) = (srtt, min_rtt)
        && s >= m.saturating_mul(2)
        && (s - m >= 10_000 || (s >= m.saturating_mul(EXTREME_INFLATION) && s - m >= 1_000))
    {
        return Verdict::Bufferbloat { srtt_us: s, min_rtt_us: m };
    }
    if !queue_free {
        return Verdict::RttElevated { rtt };
    }
    Verdict::Healthy { loss, rtt }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::flow::tests::flow_with;

    fn point(i: u64, f: impl Fn(&mut Point)) -> Point {
        let mut p = Point {
            ts_ns: i * 100_000_000,
            cwnd: Some(50),
            ssthresh: None,
            srtt_us: Some(100_000),
            min_rtt_us: Some(98_000),
            pacing_rate_bps: Some(10_000_000),
            delivery_rate_bps: Some(9_000_000),
            throughput_bps: Some(9_000_000),
            retrans_total: Some(0),
            data_segs_out: Some(i as u32 * 100),
            app_limited: false,
            rwnd_limited: false,
            bbr_mode: None,
        };
        f(&mut p);
        p
    }

    fn verdict(cc: &str, f: impl Fn(u64, &mut Point)) -> Verdict {
        let points: Vec<Point> = (1..=20).map(|i| point(i, |p| f(i, p))).collect();
        diagnose(&flow_with(cc, points), 20 * 100_000_000)
    }

    #[test]
    fn random_loss_on_cubic_says_bbr_would_help() {
        let v = verdict("cubic", |i, p| p.retrans_total = Some(i as u32));
        assert!(matches!(v, Verdict::LossLimited { bbr_would_help: true, split, .. } if split.is_random()), "{v:?}");
        assert!(v.explain("cubic").contains("BBR would likely"));
    }

    #[test]
    fn loss_with_inflated_rtt_is_congestion() {
        let v = verdict("cubic", |i, p| {
            p.retrans_total = Some(i as u32);
            p.srtt_us = Some(400_000);
        });
        assert!(matches!(v, Verdict::LossLimited { bbr_would_help: false, split, .. } if !split.is_random()), "{v:?}");
        // The README's promise: the loss sentence gives the RTT figure, over the window it names.
        assert!(v.explain("cubic").contains("RTT 400 ms (5 s median) against a 98 ms minimum (4.1x)"), "{v:?}");
    }

    /// The audit's case: a BBR flow retransmitting 1% (and 10%) is not "healthy: no loss".
    #[test]
    fn bbr_under_loss_says_so_and_heavy_loss_is_heavy() {
        let v = verdict("bbr", |i, p| p.retrans_total = Some(i as u32));
        assert!(matches!(v, Verdict::BbrUnderLoss { .. }), "{v:?}");
        assert_eq!(v.label(), "loss 1.0% (bbr)");
        assert!(v.explain("bbr").starts_with("Losing 1.0% of segments, 1.0% of them random"), "{}", v.explain("bbr"));
        let v = verdict("bbr", |i, p| {
            p.retrans_total = Some(i as u32 * 10);
            p.srtt_us = Some(170_000);
        });
        assert!(
            v.explain("bbr").contains(
                "10% of segments, 10% of it at the RTT's peak (RTT 170 ms (5 s median) against a 98 ms minimum (1.7x))"
            ),
            "{}",
            v.explain("bbr")
        );
        let v = verdict("bbr", |i, p| p.retrans_total = Some(i as u32 * 30));
        assert!(matches!(v, Verdict::HeavyLoss { .. }), "{v:?}");
    }

    /// Every verdict's sentence is true of the numbers it was made from: generated flow states
    /// (loss 0–40%, RTT 1–30x its minimum, any algorithm, window and application limits), and
    /// no sentence may claim what its numbers deny.
    #[test]
    fn no_verdict_contradicts_its_numbers() {
        let mut rng = crate::rng::Rng::new(42);
        for case in 0..3000 {
            let cc = ["cubic", "bbr", "reno"][case % 3];
            let per_sample = (rng.uniform().powi(3) * 40.0) as u32;
            let min = 1_000 + (rng.uniform() * 200_000.0) as u32;
            let srtt = (f64::from(min) * (1.0 + rng.uniform().powi(2) * 29.0)) as u32;
            let (rwnd, app) = (rng.uniform() < 0.1, rng.uniform() < 0.1);
            let v = verdict(cc, |i, p| {
                p.retrans_total = Some(i as u32 * per_sample);
                (p.min_rtt_us, p.srtt_us) = (Some(min), Some(srtt));
                (p.rwnd_limited, p.app_limited) = (rwnd, app);
            });
            let loss = f64::from(per_sample) / 100.0;
            let ratio = f64::from(srtt) / f64::from(min);
            let text = v.explain(cc);
            let near_min = ratio <= 1.5 || srtt - min < 5_000;
            if text.contains("no loss") || v.label() == "healthy" {
                assert!(loss < LOSS_LIMITED && near_min, "{cc} loss {loss} ratio {ratio}: {text}");
            }
            if text.contains("near its minimum") || text.contains("no queue") {
                assert!(near_min, "{cc} ratio {ratio}: {text}");
            }
            if loss >= LOSS_LIMITED {
                assert!(
                    text.contains(&format!("{} ", pct(loss)))
                        || text.contains(&format!("{} of", pct(loss)))
                        || matches!(
                            v,
                            Verdict::ReceiverWindow { .. } | Verdict::ApplicationLimited | Verdict::Bufferbloat { .. }
                        ),
                    "{cc} loss {loss}: {text}"
                );
            }
            // Any ratio the sentence states is the real one.
            if let Some(at) = text.find("x)") {
                let stated: f64 = text[..at].rsplit('(').next().unwrap().parse().unwrap();
                assert!((stated - ratio).abs() <= 0.051, "{stated} vs {ratio}: {text}");
            }
        }
    }

    /// Issue 39: random loss and loss at a full queue told apart by the RTT at the losses. Flows
    /// whose RTT saws from its minimum to 2.2–5x it (a queue either way) over a second lose
    /// `random` segments per 100 at every sample and `queue` per 100 (on average) only at the
    /// sawtooth's peaks, counted the sample after (when the RTT is at its lowest, as the kernel
    /// counts the retransmissions after the sender has backed off and the queue drained). The
    /// verdict calls the loss by the larger share, states the random share the flow was given,
    /// and says "random" or "full queue" as its call is.
    #[test]
    fn random_loss_and_loss_at_a_full_queue_are_told_apart() {
        let mut rng = crate::rng::Rng::new(39);
        let mut told = [0; 2];
        for case in 0..3000 {
            let cc = ["cubic", "bbr"][case % 2];
            let (random, queue) = ((rng.uniform() * 8.0) as u32, (rng.uniform() * 8.0) as u32);
            if random + queue == 0 {
                continue;
            }
            let min = 10_000 + (rng.uniform() * 100_000.0) as u32;
            let peak = 2.2 + rng.uniform() * 2.8;
            let v = verdict(cc, |i, p| {
                let phase = (i % 10) as f64 / 9.0;
                p.srtt_us = Some((f64::from(min) * (1.0 + (peak - 1.0) * phase)) as u32);
                p.min_rtt_us = Some(min);
                p.retrans_total = Some(i as u32 * random + i as u32 / 10 * queue * 10);
            });
            let (Verdict::LossLimited { split, .. } | Verdict::BbrUnderLoss { split, .. }) = v else {
                panic!("{cc} random {random} queue {queue}: {v:?}");
            };
            let given = f64::from(random) / 100.0;
            assert!((split.random - given).abs() < 1e-9, "{cc} random {random} queue {queue}: {v:?}");
            // Queue loss over the window: 2 peaks of 10 x queue in 19 intervals of 100 segments.
            let queue_loss = f64::from(queue) * 20.0 / 1900.0;
            if given >= 2.0 * queue_loss {
                assert!(split.is_random(), "{cc} random {random} queue {queue}: {v:?}");
            }
            if queue_loss >= 2.0 * given {
                assert!(!split.is_random(), "{cc} random {random} queue {queue}: {v:?}");
            }
            let text = v.explain(cc);
            let (share, words) = if split.is_random() { (split.random, "random") } else { (split.queue, "full queue") };
            assert!(text.contains(words) && text.contains(&pct(share)), "{cc} {v:?}: {text}");
            assert!(!text.contains(if split.is_random() { "full queue" } else { "random" }), "{text}");
            told[usize::from(split.is_random())] += 1;
        }
        assert!(told[0] > 500 && told[1] > 500, "both kinds generated: {told:?}");
    }

    /// The case: BBR losing 5.1%, 5 points of it random, on a path where it keeps a queue.
    #[test]
    fn bbr_on_a_randomly_lossy_path_is_not_told_its_loss_is_the_queues() {
        let v = verdict("bbr", |i, p| {
            p.srtt_us = Some(80_000 + (i % 10) as u32 * 20_000);
            p.min_rtt_us = Some(80_000);
            p.retrans_total = Some(i as u32 * 5 + u32::from(i == 20) * 2);
        });
        let text = v.explain("bbr");
        assert!(text.contains("random") && !text.contains("full queue"), "{v:?}: {text}");
    }

    #[test]
    fn window_application_and_queue_limits() {
        assert!(matches!(verdict("cubic", |_, p| p.rwnd_limited = true), Verdict::ReceiverWindow { .. }));
        assert_eq!(verdict("cubic", |_, p| p.app_limited = true), Verdict::ApplicationLimited);
        let v = verdict("cubic", |_, p| p.srtt_us = Some(500_000));
        assert_eq!(v, Verdict::Bufferbloat { srtt_us: 500_000, min_rtt_us: 98_000 });
        let v = verdict("cubic", |_, _| ());
        assert!(matches!(v, Verdict::Healthy { .. }), "{v:?}");
        assert_eq!(
            v.explain("cubic"),
            "Healthy: 0.00% of segments retransmitted, RTT 100 ms (5 s median) against a 98 ms minimum (1.0x); the sender is using the path."
        );
        let v = verdict("cubic", |_, p| p.srtt_us = Some(170_000));
        assert!(matches!(v, Verdict::RttElevated { .. }), "{v:?}");
    }

    /// Loopback: a 10 µs minimum and 7.7 ms smoothed RTT is a 770x inflation, not healthy;
    /// a few hundred µs of jitter there is.
    #[test]
    fn extreme_inflation_on_a_short_path_is_queueing() {
        let v = verdict("cubic", |_, p| (p.min_rtt_us, p.srtt_us) = (Some(10), Some(7_700)));
        assert_eq!(v, Verdict::Bufferbloat { srtt_us: 7_700, min_rtt_us: 10 });
        let v = verdict("bbr", |_, p| (p.min_rtt_us, p.srtt_us) = (Some(10), Some(300)));
        assert!(matches!(v, Verdict::Healthy { .. }), "{v:?}");
    }

    #[test]
    fn too_few_points_is_measuring() {
        let f = flow_with("cubic", vec![point(1, |_| ())]);
        assert_eq!(diagnose(&f, 100_000_000), Verdict::Measuring);
    }
}

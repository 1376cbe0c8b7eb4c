//! What theory predicts for a bulk flow on the emulated path, to print beside the measurement.
//! Sources and limits are in docs/demo-theory.md:
//! - loss-based algorithms (CUBIC, Reno) at random loss >= ~0.1% on long paths run in the
//!   Reno-friendly region: PFTK (Padhye et al. 1998; Mathis et al. 1997 plus timeouts) with b = 1,
//!   T0 = RTT + 200 ms. Its rate does not depend on the link's capacity.
//! - without random loss, a loss-based sender fills the drop-tail queue and backs off by beta =
//!   0.7 (CUBIC): utilisation from a linear sawtooth between 0.7 and 1 times (BDP + buffer).
//! - BBRv1 ignores random loss below ~20% (its 1.25x probe still raises the max filter while
//!   1.25 (1 - p) >= 1): published as 0.6–0.9 x C x (1 - p). This emulator drops *before* the
//!   bottleneck (as Mahimahi's loss shell in front of its link shell), so lost packets cost no
//!   capacity and the top of the range is the capacity itself; the bottom stays 0.6 x C x (1 - p).
//!   Without loss it runs the link nearly full (0.9–1.0 x C). Above 20% there is no usable model.

use serde::Serialize;

/// IPv4 + TCP + timestamp option: what a full segment adds to its MSS on the wire.
pub(crate) const HEADER_BYTES: f64 = 52.0;
/// CUBIC's multiplicative decrease (beta_cubic = 717/1024).
pub(crate) const CUBIC_BETA: f64 = 0.7;
/// Linux's minimum RTO, added to the RTT for PFTK's T0.
const MIN_RTO_S: f64 = 0.2;
/// Above this random loss BBRv1's bandwidth probing can no longer refresh its estimate.
const BBR_LOSS_LIMIT: f64 = 0.2;
/// BBRv1 goodput as a fraction of capacity: with random loss (the low end also x (1 - p)) and
/// without.
const BBR_LOSSY: (f64, f64) = (0.6, 1.0);
const BBR_CLEAN: (f64, f64) = (0.9, 1.0);

/// The emulated path, in SI units.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Path {
    pub(crate) rate_bps: f64,
    pub(crate) rtt_s: f64,
    pub(crate) loss: f64,
    pub(crate) buffer_bytes: f64,
    pub(crate) mss: f64,
}

impl Path {
    pub(crate) fn bdp_bytes(&self) -> f64 {
        self.rate_bps / 8.0 * self.rtt_s
    }

    /// The most goodput the link can carry: capacity less headers.
    pub(crate) fn goodput_capacity_bps(&self) -> f64 {
        self.rate_bps * self.mss / (self.mss + HEADER_BYTES)
    }

    /// RTT of an empty path for a full-sized segment (propagation + one serialisation).
    fn base_rtt_s(&self) -> f64 {
        self.rtt_s + (self.mss + HEADER_BYTES) * 8.0 / self.rate_bps
    }

    /// RTT with `window` bytes in flight: what exceeds the BDP waits in the (bounded) queue.
    fn rtt_with_window_s(&self, window: f64) -> f64 {
        self.base_rtt_s() + (window - self.bdp_bytes()).clamp(0.0, self.buffer_bytes) * 8.0 / self.rate_bps
    }
}

/// PFTK with timeouts (b = 1, T0 = RTT + 200 ms), bits per second.
pub(crate) fn pftk_bps(mss: f64, rtt_s: f64, p: f64) -> f64 {
    let b = 1.0;
    let t0 = rtt_s + MIN_RTO_S;
    let segs_per_s = 1.0
        / (rtt_s * (2.0 * b * p / 3.0).sqrt()
            + t0 * (3.0 * (3.0 * b * p / 8.0).sqrt()).min(1.0) * p * (1.0 + 32.0 * p * p));
    segs_per_s * mss * 8.0
}

/// Mean utilisation of a link whose window saws linearly between `beta` and 1 times
/// (BDP + buffer), the buffer given in BDPs.
pub(crate) fn sawtooth_utilisation(buffer_bdp: f64, beta: f64) -> f64 {
    let (hi, lo) = (1.0 + buffer_bdp, beta * (1.0 + buffer_bdp));
    if lo >= 1.0 {
        return 1.0;
    }
    ((1.0 - lo * lo) / 2.0 + (hi - 1.0)) / (hi - lo)
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Prediction {
    /// Which model, in words.
    pub(crate) model: &'static str,
    pub(crate) goodput_bps: Option<f64>,
    /// Low and high end of the model's goodput (a point model gives the same number twice).
    pub(crate) goodput_range_bps: Option<(f64, f64)>,
    /// Smoothed RTT the model expects, low to high, in microseconds.
    pub(crate) srtt_range_us: (f64, f64),
}

/// The prediction for algorithm `cc` on `path`. BBR is modelled as BBRv1 (mainline Linux);
/// everything else as a loss-based (Reno-friendly CUBIC) sender.
pub(crate) fn predict(cc: &str, path: &Path) -> Prediction {
    let cap = path.goodput_capacity_bps();
    let us = |s: f64| s * 1e6;
    if cc == "bbr" {
        // cwnd_gain 2: at most one BDP beyond the pipe, and no more than the buffer holds.
        let srtt = (us(path.base_rtt_s()), us(path.rtt_with_window_s(2.0 * path.bdp_bytes())));
        if path.loss >= BBR_LOSS_LIMIT {
            return Prediction {
                model: "BBRv1: none above 20% loss",
                goodput_bps: None,
                goodput_range_bps: None,
                srtt_range_us: srtt,
            };
        }
        let ((lo, hi), model) = if path.loss > 0.0 {
            ((BBR_LOSSY.0 * (1.0 - path.loss), BBR_LOSSY.1), "BBRv1: 0.6 x C x (1-p) up to C")
        } else {
            (BBR_CLEAN, "BBRv1: 0.9-1.0 x C")
        };
        return Prediction {
            model,
            goodput_bps: Some(cap * (lo + hi) / 2.0),
            goodput_range_bps: Some((cap * lo, cap * hi)),
            srtt_range_us: srtt,
        };
    }
    let (model, goodput, peak_window) = if path.loss > 0.0 {
        let rate = pftk_bps(path.mss, path.rtt_s, path.loss).min(cap);
        // A loss-limited sawtooth peaks at ~4/3 of its mean window.
        (
            if rate < cap { "PFTK (loss-limited)" } else { "PFTK, capped at C" },
            rate,
            rate / 8.0 * path.rtt_s * 4.0 / 3.0,
        )
    } else {
        let u = sawtooth_utilisation(path.buffer_bytes / path.bdp_bytes(), CUBIC_BETA);
        ("drop-tail sawtooth (beta 0.7)", cap * u, path.bdp_bytes() + path.buffer_bytes)
    };
    let peak_window = peak_window.min(path.bdp_bytes() + path.buffer_bytes);
    Prediction {
        model,
        goodput_bps: Some(goodput),
        goodput_range_bps: Some((goodput, goodput)),
        srtt_range_us: (us(path.rtt_with_window_s(CUBIC_BETA * peak_window)), us(path.rtt_with_window_s(peak_window))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rate_mbit: f64, rtt_ms: f64, loss: f64, buffer_bdp: f64) -> Path {
        let rate_bps = rate_mbit * 1e6;
        let rtt_s = rtt_ms / 1e3;
        Path { rate_bps, rtt_s, loss, buffer_bytes: buffer_bdp * rate_bps / 8.0 * rtt_s, mss: 1448.0 }
    }

    fn mbit(bps: f64) -> f64 {
        bps / 1e6
    }

    /// The model column of the table in demo-theory.md (MSS 1448 B).
    #[test]
    fn pftk_matches_the_published_table() {
        for (rtt, p, expect) in [(0.100, 0.01, 1.33), (0.100, 0.05, 0.47), (0.100, 0.10, 0.24), (0.167, 0.10, 0.16)] {
            let got = mbit(pftk_bps(1448.0, rtt, p));
            assert!((got - expect).abs() < 0.01 + expect * 0.02, "rtt {rtt} p {p}: {got} vs {expect}");
        }
    }

    #[test]
    fn sawtooth_utilisation_limits() {
        assert!((sawtooth_utilisation(0.0, 0.5) - 0.75).abs() < 1e-9, "Reno without a buffer: 3/4");
        assert!((sawtooth_utilisation(0.0, 0.7) - 0.85).abs() < 1e-9);
        assert_eq!(sawtooth_utilisation(1.0, 0.7), 1.0);
        assert!(sawtooth_utilisation(0.2, 0.7) > sawtooth_utilisation(0.1, 0.7));
    }

    #[test]
    fn lossy_path_predicts_a_large_bbr_advantage() {
        let p = path(50.0, 100.0, 0.01, 1.0);
        let cubic = predict("cubic", &p);
        let bbr = predict("bbr", &p);
        assert_eq!(cubic.model, "PFTK (loss-limited)");
        let (lo, hi) = bbr.goodput_range_bps.unwrap();
        let c = cubic.goodput_bps.unwrap();
        // demo-theory.md: at least 22x at 50 Mbit/s, 100 ms, 1%, less the 3.5% of headers it
        // ignores; at most the link's capacity over CUBIC's rate.
        let headers = 1448.0 / 1500.0;
        assert!((lo / c - 22.3 * headers).abs() < 0.3, "{}", lo / c);
        assert!((hi - p.goodput_capacity_bps()).abs() < 1.0);
        // A loss-limited window is far below the BDP: no queue, RTT ~ the base RTT.
        assert!(cubic.srtt_range_us.1 < 101_000.0);
    }

    #[test]
    fn bufferbloat_predicts_cubic_fills_the_queue_and_bbr_does_not() {
        // 10 Mbit/s, 40 ms, 1000 x 1500 B: the queue alone is 1.2 s.
        let p = Path { rate_bps: 10e6, rtt_s: 0.04, loss: 0.0, buffer_bytes: 1.5e6, mss: 1448.0 };
        let cubic = predict("cubic", &p);
        let bbr = predict("bbr", &p);
        assert!(cubic.srtt_range_us.0 > 800_000.0 && cubic.srtt_range_us.1 > 1_200_000.0, "{:?}", cubic.srtt_range_us);
        assert!(bbr.srtt_range_us.1 < 85_000.0, "{:?}", bbr.srtt_range_us);
        assert!((cubic.goodput_bps.unwrap() - p.goodput_capacity_bps()).abs() < 1.0);
    }

    #[test]
    fn bbr_has_no_model_past_twenty_percent() {
        let bbr = predict("bbr", &path(50.0, 100.0, 0.25, 1.0));
        assert_eq!(bbr.goodput_bps, None);
    }

    #[test]
    fn cubic_never_exceeds_capacity() {
        let p = path(1.0, 10.0, 0.0001, 1.0);
        let cubic = predict("cubic", &p);
        assert_eq!(cubic.model, "PFTK, capped at C");
        assert!(cubic.goodput_bps.unwrap() <= p.goodput_capacity_bps());
    }
}

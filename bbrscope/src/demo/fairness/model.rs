//! BBRv1's share of a bottleneck it shares with loss-based flows, after Ware, Mukerjee, Seshan
//! and Sherry, "Modeling BBR's Interactions with Loss-Based Congestion Control" (IMC 2019).
//!
//! Competing with flows that keep the queue full, BBR is not rate-limited but window-limited:
//! its in-flight cap is 2 x its bandwidth estimate x its min-RTT estimate, and the min RTT it
//! measures in PROBE_RTT still contains the loss-based flows' queue. Solving "in flight = cap"
//! gives the loss-based flows' fraction (their eq. 9; N BBR flows, queue q packets, buffer X BDPs)
//!
//!   p = 1/2 - 1/(2X) - 4N/q          (BBR gets everything when p <= 0)
//!
//! and PROBE_RTT costs BBR (q/c + 200 ms + RTT) every 10 s (eq. 10-11), so over d seconds
//!
//!   BBR = (1 - p) (d - t_probe) / d,  t_probe = (q/c + 0.2 + l) d / 10.
//!
//! Neither depends on the number of loss-based flows — the paper's finding, and why one BBR
//! flow can take half a deep-buffered link from any number of CUBIC flows. The paper reports a
//! median error of 5% against CUBIC. Its assumptions: the queue is (nearly) always full, which a
//! buffer under one BDP breaks (there BBR is rate-limited and the model only says "most").

use bbrscope_emulator::MTU;
use serde::Serialize;

/// BBRv1 cycles through PROBE_RTT once per min-RTT window.
const PROBE_RTT_EVERY_S: f64 = 10.0;
/// PROBE_RTT holds in-flight at 4 packets for this long.
const PROBE_RTT_HOLD_S: f64 = 0.2;
/// The paper's median error against CUBIC, as a share of the link.
const PAPER_MEDIAN_ERROR: f64 = 0.05;

/// The bottleneck the flows share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Bottleneck {
    pub(crate) rate_bps: f64,
    pub(crate) rtt_s: f64,
    pub(crate) buffer_bytes: f64,
}

impl Bottleneck {
    pub(crate) fn bdp_bytes(&self) -> f64 {
        self.rate_bps / 8.0 * self.rtt_s
    }

    pub(crate) fn buffer_bdp(&self) -> f64 {
        self.buffer_bytes / self.bdp_bytes()
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub(crate) struct Share {
    /// The BBR flows' fraction of the bottleneck's goodput.
    pub(crate) bbr: f64,
    /// The paper's median error around it, clipped to 0..1.
    pub(crate) band: (f64, f64),
    /// False where the buffer is under one BDP: the model's full-queue assumption fails there.
    pub(crate) in_scope: bool,
}

/// The model's BBR share for `bbr_flows` BBR flows over `window_s` seconds of competition.
pub(crate) fn bbr_share(b: &Bottleneck, bbr_flows: u32, window_s: f64) -> Share {
    let q = b.buffer_bytes / MTU as f64;
    let c = b.rate_bps / 8.0 / MTU as f64;
    let x = b.buffer_bdp();
    let loss_based = (0.5 - 1.0 / (2.0 * x) - 4.0 * f64::from(bbr_flows) / q).max(0.0);
    let probe_s = (q / c + PROBE_RTT_HOLD_S + b.rtt_s) * window_s / PROBE_RTT_EVERY_S;
    let bbr = ((1.0 - loss_based) * (window_s - probe_s) / window_s).clamp(0.0, 1.0);
    Share { bbr, band: ((bbr - PAPER_MEDIAN_ERROR).max(0.0), (bbr + PAPER_MEDIAN_ERROR).min(1.0)), in_scope: x >= 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(buffer_bdp: f64) -> Bottleneck {
        let (rate_bps, rtt_s) = (10e6, 0.04);
        Bottleneck { rate_bps, rtt_s, buffer_bytes: buffer_bdp * rate_bps / 8.0 * rtt_s }
    }

    /// Past one BDP a deeper buffer lowers BBR's share: the loss-based flows' queue term grows
    /// toward one half and each PROBE_RTT waits longer for the queue to drain.
    #[test]
    fn deeper_buffers_lower_bbrs_share() {
        let s = |x: f64| bbr_share(&at(x), 1, 30.0).bbr;
        assert!(s(1.0) > s(2.0) && s(2.0) > s(8.0) && s(8.0) > s(32.0), "{} {} {} {}", s(1.0), s(2.0), s(8.0), s(32.0));
        assert!(s(8.0) > 0.5 && s(8.0) < 0.6, "{}", s(8.0));
    }

    /// Worked by hand: 10 Mbit/s, 40 ms, 8 BDP (266.7 packets at 833.3 packets/s), 20 s:
    /// p = 0.5 - 1/16 - 4/266.7 = 0.4225; PROBE_RTT (0.32 + 0.2 + 0.04) x 2 = 1.12 s;
    /// BBR = 0.5775 x 18.88 / 20 = 0.5452.
    #[test]
    fn a_worked_example() {
        let s = bbr_share(&at(8.0), 1, 20.0);
        assert!((s.bbr - 0.5452).abs() < 1e-3, "{s:?}");
        assert!(s.in_scope);
        assert!((s.band.0 - 0.4952).abs() < 1e-3 && (s.band.1 - 0.5952).abs() < 1e-3, "{s:?}");
    }

    /// Under one BDP the loss-based share clamps to nothing; the model is marked out of scope.
    #[test]
    fn shallow_buffers_are_outside_the_model() {
        let s = bbr_share(&at(0.5), 1, 20.0);
        assert!(s.bbr > 0.95 && !s.in_scope, "{s:?}");
        assert_eq!(s.band.1, 1.0);
    }
}

//! Published setups the demo reproduces, each with its source and the numbers it reported.

use std::time::Duration;

use clap::ValueEnum;

use crate::units::Buffer;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PresetName {
    /// The seed article's cross-border VPS path: 10% loss, 167 ms (10 Mbit/s assumed)
    CrossBorder,
    /// Google's BBR announcement: 1% loss, 100 ms (at 50 Mbit/s rather than 10 Gbit/s)
    GoogleLossy,
    /// Google's bufferbloat case: 10 Mbit/s, 40 ms, 1000-packet buffer — compare RTT
    Bufferbloat,
    /// 20 Mbit/s, 40 ms, 1 BDP drop-tail, no random loss: CUBIC's teeth vs BBR's flat line
    Sawtooth,
    /// 1 BBR flow vs 1 and 3 CUBIC flows through ONE 10 Mbit/s, 40 ms bottleneck, 0.5 and 8 BDP, 90 s
    Fairness,
}

/// Which number tells the story.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Headline {
    Goodput,
    Rtt,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Preset {
    pub(crate) name: &'static str,
    pub(crate) rate_bps: u64,
    pub(crate) rtt: Duration,
    pub(crate) loss: f64,
    pub(crate) buffer: Buffer,
    pub(crate) duration: Duration,
    pub(crate) headline: Headline,
    /// Where the setup comes from, and what this emulation assumes or changes.
    pub(crate) source: &'static str,
    /// What the source reported.
    pub(crate) published: &'static str,
}

impl PresetName {
    pub(crate) fn preset(self) -> Preset {
        let secs = Duration::from_secs;
        match self {
            PresetName::CrossBorder => Preset {
                name: "cross-border",
                rate_bps: 10_000_000,
                rtt: Duration::from_millis(167),
                loss: 0.10,
                buffer: Buffer::Bdp(1.0),
                duration: secs(60),
                headline: Headline::Goodput,
                source: "seed article: BBR on a cross-border VPS path (real path, 10% loss, 167 ms). \
                         The article gives no link rate; 10 Mbit/s is assumed, so BBR's model \
                         (0.6-0.9 x C x (1-p) = 5.4-8.1 Mbit/s) spans the article's BBR range",
                published: "CUBIC 24-29 KB/s, BBR 500-1000 KB/s (15-24x)",
            },
            PresetName::GoogleLossy => Preset {
                name: "google-lossy",
                rate_bps: 50_000_000,
                rtt: Duration::from_millis(100),
                loss: 0.01,
                buffer: Buffer::Bdp(1.0),
                duration: secs(30),
                headline: Headline::Goodput,
                source: "BBR patch cover letter (netdev, Sept. 2016, Linux commit 0f8782ea1497): 10 Gbit/s, 100 ms, 1% loss, 30 s. \
                         Run here at 50 Mbit/s (a userspace emulator cannot move 10 Gbit/s): CUBIC's \
                         loss-limited rate does not depend on capacity, BBR's scales with it",
                published: "CUBIC 3.27 Mbit/s, BBR 9150 Mbit/s (2798x)",
            },
            PresetName::Bufferbloat => Preset {
                name: "bufferbloat",
                rate_bps: 10_000_000,
                rtt: Duration::from_millis(40),
                loss: 0.0,
                buffer: Buffer::Bytes(1000 * crate::units::PACKET_BYTES),
                duration: secs(30),
                headline: Headline::Rtt,
                source: "BBR patch cover letter (netdev, Sept. 2016, Linux commit 0f8782ea1497): \
                         10 Mbit/s, 40 ms, 1000-packet buffer, 120 s; both fill the link, so compare \
                         RTT, not throughput",
                published: "median RTT: CUBIC 1.09 s, BBR 43 ms (25x lower)",
            },
            PresetName::Sawtooth => Preset {
                name: "sawtooth",
                rate_bps: 20_000_000,
                rtt: Duration::from_millis(40),
                loss: 0.0,
                buffer: Buffer::Bdp(1.0),
                duration: secs(30),
                headline: Headline::Goodput,
                source: "textbook drop-tail bottleneck, no random loss (CUBIC: Ha, Rhee & Xu 2008; \
                         BBR: Cardwell et al. 2016): CUBIC fills the queue and backs off by 30%, \
                         BBR paces at the bottleneck rate with a PROBE_RTT dip every 10 s",
                published: "CUBIC cwnd saws between W_max and 0.7 W_max; BBR cwnd ~2 BDP, flat",
            },
            PresetName::Fairness => Preset {
                name: "fairness",
                rate_bps: 10_000_000,
                rtt: Duration::from_millis(40),
                loss: 0.0,
                buffer: Buffer::Bdp(8.0),
                duration: secs(90),
                headline: Headline::Goodput,
                source: "Ware, Mukerjee, Seshan & Sherry, \"Modeling BBR's Interactions with Loss-Based \
                         Congestion Control\", IMC 2019: one BBR flow and loss-based flows sharing a drop-tail \
                         bottleneck. The flows here share one emulated link, at 0.5 and 8 BDP",
                published: "BBRv1 is window-limited when competing: its share is set by the buffer, not by the \
                            number of CUBIC flows (up to half of a deep-buffered link); model median error 5%",
            },
        }
    }
}

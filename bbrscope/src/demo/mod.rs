//! `bbrscope demo`: CUBIC vs BBR on an emulated long, lossy path — live, reproducible, with the
//! published numbers beside it. The bbrscope-emulator crate builds the path, [`traffic`] drives
//! flows over it, [`run`] observes them with the eBPF observer, [`model`] says what theory
//! expects, and [`summary`] / [`plot`] report.

pub(crate) mod display;
pub(crate) mod fairness;
pub(crate) mod model;
pub(crate) mod plot;
pub(crate) mod presets;
pub(crate) mod progress;
pub(crate) mod run;
pub(crate) mod summary;
pub(crate) mod traffic;

use std::time::Duration;

use bbrscope_emulator::{LinkConfig, LossSpec};
use serde::Serialize;

/// The emulated path and the run length: everything that defines one measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Conditions {
    pub(crate) rate_bps: u64,
    #[serde(serialize_with = "as_us", rename = "rtt_us")]
    pub(crate) rtt: Duration,
    /// Random loss in the data direction, as a fraction.
    pub(crate) loss: f64,
    /// Mean loss-burst length in packets (Gilbert–Elliott), when losses are bursty.
    pub(crate) loss_burst: Option<f64>,
    pub(crate) buffer_bytes: u64,
    #[serde(serialize_with = "as_secs", rename = "duration_s")]
    pub(crate) duration: Duration,
    pub(crate) seed: u64,
}

impl Conditions {
    pub(crate) fn bdp_bytes(&self) -> f64 {
        self.rate_bps as f64 / 8.0 * self.rtt.as_secs_f64()
    }

    /// The link for repetition `repeat`: all flows of one repetition see identical links (same
    /// loss pattern); each repetition gets its own seed.
    pub(crate) fn link(&self, repeat: u32) -> LinkConfig {
        LinkConfig {
            rate_bps: self.rate_bps,
            rtt: self.rtt,
            buffer_bytes: self.buffer_bytes,
            loss: LossSpec { rate: self.loss, burst: self.loss_burst },
            seed: self.seed.wrapping_add(u64::from(repeat)),
        }
    }

    /// The model's view of these conditions for a sender with this MSS.
    pub(crate) fn path(&self, mss: f64) -> model::Path {
        model::Path {
            rate_bps: self.rate_bps as f64,
            rtt_s: self.rtt.as_secs_f64(),
            loss: self.loss,
            buffer_bytes: self.buffer_bytes as f64,
            mss,
        }
    }
}

fn as_us<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_micros() as u64)
}

fn as_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

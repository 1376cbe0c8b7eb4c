//! The options of `bbrscope demo`.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use bbrscope_emulator::{LossSpec, MTU};
use clap::Args;

use crate::{
    demo::{
        Conditions,
        fairness::BUFFERS_BDP,
        presets::{Preset, PresetName},
    },
    error::usage,
    sys::cc,
    units::{self, Buffer, Rate, fmt_rate, fmt_us},
};

/// The fastest link the userspace emulator will try: it moves every packet through one thread.
const MAX_RATE_BPS: u64 = 1_000_000_000;
const MAX_RTT: Duration = Duration::from_secs(10);
/// The emulator holds its queue in this process's memory.
const MAX_BUFFER_BYTES: u64 = 256 << 20;
const MAX_ALGOS: usize = 8;

#[derive(Debug, Args)]
#[command(after_help = "Presets (the options override their values):\n  \
    cross-border  10 Mbit/s (assumed), 167 ms, 10% loss, 1 BDP, 60 s  — the seed article's VPS path\n  \
    google-lossy  50 Mbit/s, 100 ms, 1% loss, 1 BDP, 30 s          — Google's BBR announcement; default\n  \
    bufferbloat   10 Mbit/s, 40 ms, no loss, 1000 packets, 30 s     — compare RTT, not throughput\n  \
    sawtooth      20 Mbit/s, 40 ms, no loss, 1 BDP, 30 s            — CUBIC's teeth vs BBR's flat line\n  \
    fairness      10 Mbit/s, 40 ms, no loss, 0.5 and 8 BDP, 4 x 90 s — 1 BBR vs 1 and 3 CUBIC through ONE \
    link, shares beside a published model; --algos names the incumbent then the challenger, --buffer \
    runs one buffer instead of two, --plot writes one figure per round (FILE-1.svg, ...)\n\n\
    Needs root: builds two throwaway network namespaces per link joined by a userspace link \
    emulator (TUN), and observes the flows with eBPF. Nothing is left behind, however it ends.")]
pub struct DemoArgs {
    /// A published setup to reproduce (default: google-lossy)
    #[arg(value_enum, ignore_case = true)]
    pub preset: Option<PresetName>,
    /// Bottleneck rate, with tc(8)'s units: 50mbit (megabits/s), 800kbit, 1gbit; 50mbps or 50MB/s
    /// are megaBYTES per second, as tc reads them
    #[arg(long, value_parser = units::rate, allow_hyphen_values = true)]
    pub rate: Option<Rate>,
    /// Round-trip propagation delay, e.g. 100ms
    #[arg(long, value_parser = units::rtt, allow_hyphen_values = true)]
    pub rtt: Option<Duration>,
    /// Random loss on the data direction, e.g. 1% or 0.01
    #[arg(long, value_parser = units::loss, allow_hyphen_values = true)]
    pub loss: Option<f64>,
    /// Make losses bursty (Gilbert–Elliott) with this mean burst length, in packets
    #[arg(long, value_name = "PACKETS")]
    pub loss_burst: Option<f64>,
    /// Bottleneck drop-tail queue: bytes (150000, 64KB), packets (1000pkt) or BDPs (2bdp)
    #[arg(long, value_parser = units::buffer, allow_hyphen_values = true)]
    pub buffer: Option<Buffer>,
    /// How long each flow runs: a bare number is seconds; 30s, 2m also
    #[arg(long, value_parser = units::duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Algorithms to compare, comma-separated (set per socket; the system default is untouched)
    #[arg(long, value_delimiter = ',', default_value = "cubic,bbr")]
    pub algos: Vec<String>,
    /// Seed of the random loss: the same seed drops the same packets
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run the comparison N times; medians are reported, with each run's goodput
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// One algorithm after the other instead of all at once
    #[arg(long)]
    pub sequential: bool,
    /// No live display
    #[arg(long)]
    pub headless: bool,
    /// Print the summary as one JSON object (type "demo_summary") instead of a table
    #[arg(long)]
    pub json: bool,
    /// Write goodput, cwnd and RTT over time for all flows to FILE.svg or FILE.png
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Allow a demo that runs longer than an hour in total
    #[arg(long)]
    pub yes: bool,
}

impl DemoArgs {
    /// The fairness preset's incumbent and challenger (`--algos`), its flows together through one
    /// link.
    pub(crate) fn fairness_pair(&self) -> Result<[String; 2]> {
        if self.sequential {
            usage!("--sequential: the fairness preset runs its flows together through one link; drop --sequential");
        }
        match <[String; 2]>::try_from(self.algorithms()?) {
            Ok(pair) => Ok(pair),
            Err(_) => {
                usage!("--algos: the fairness preset takes two, the incumbent then the challenger, e.g. cubic,bbr")
            }
        }
    }

    /// The fairness preset's buffers, in bytes: `--buffer`'s one (in `cond`), or the preset's
    /// two at `cond`'s BDP; each must hold a packet.
    pub(crate) fn fairness_buffers(&self, cond: &Conditions) -> Result<Vec<u64>> {
        let buffers: Vec<u64> = match self.buffer {
            Some(_) => vec![cond.buffer_bytes],
            None => BUFFERS_BDP.iter().map(|x| Buffer::Bdp(*x).bytes(cond.bdp_bytes())).collect(),
        };
        if let Some(b) = buffers.iter().find(|b| **b < MTU) {
            usage!(
                "--rate and --rtt make a buffer of {b} bytes at 0.5 BDP, less than one {MTU}-byte packet: raise them"
            );
        }
        Ok(buffers)
    }

    /// The path the options and the preset describe, checked: what the emulator can do, and a
    /// buffer that holds at least one packet.
    pub(crate) fn conditions(&self, preset: &Preset) -> Result<(Conditions, LossSpec)> {
        let rate_bps = self.rate.map_or(preset.rate_bps, |r| r.bps);
        let rtt = self.rtt.unwrap_or(preset.rtt);
        let loss = LossSpec { rate: self.loss.unwrap_or(preset.loss), burst: self.loss_burst };
        let duration = self.duration.unwrap_or(preset.duration);
        if rate_bps > MAX_RATE_BPS {
            usage!(
                "--rate {}: the built-in emulator moves packets in userspace; use at most {}",
                fmt_rate(rate_bps as f64),
                fmt_rate(MAX_RATE_BPS as f64)
            );
        }
        if rtt > MAX_RTT {
            usage!(
                "--rtt {}: round trips above {} s are not a network path",
                fmt_us(rtt.as_micros() as f64),
                MAX_RTT.as_secs()
            );
        }
        if let Err(e) = loss.check() {
            usage!("{e}");
        }
        let mut cond = Conditions {
            rate_bps,
            rtt,
            loss: loss.rate,
            loss_burst: loss.burst,
            buffer_bytes: 0,
            duration,
            seed: self.seed,
        };
        cond.buffer_bytes = self.buffer.unwrap_or(preset.buffer).bytes(cond.bdp_bytes());
        if cond.buffer_bytes > MAX_BUFFER_BYTES {
            let why = format!("the emulator holds its queue in memory, at most {} MiB", MAX_BUFFER_BYTES >> 20);
            if self.buffer.is_some() {
                usage!("--buffer: {} bytes; {why}", cond.buffer_bytes);
            }
            usage!(
                "--rate {} with a {} RTT makes the preset's buffer {} bytes; {why}: lower --rate or --rtt, or give --buffer",
                fmt_rate(rate_bps as f64),
                fmt_us(rtt.as_micros() as f64),
                cond.buffer_bytes
            );
        }
        if cond.buffer_bytes < MTU {
            if self.buffer.is_some() {
                usage!("--buffer: {} bytes cannot hold one {MTU}-byte packet", cond.buffer_bytes);
            }
            // The buffer came from the preset (in BDPs): what is too small is the rate or the RTT.
            usage!(
                "--rate {} with a {} RTT makes a bandwidth-delay product of {:.0} bytes, less than one {MTU}-byte \
                 packet: raise --rate or --rtt, or give --buffer",
                fmt_rate(rate_bps as f64),
                fmt_us(rtt.as_micros() as f64),
                cond.bdp_bytes()
            );
        }
        Ok((cond, loss))
    }

    /// The requested algorithms, each available on this kernel and named once.
    pub(crate) fn algorithms(&self) -> Result<Vec<String>> {
        let algos: Vec<String> = self.algos.iter().map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
        if algos.is_empty() || algos.len() > MAX_ALGOS {
            usage!("--algos: name 1 to {MAX_ALGOS} algorithms, e.g. cubic,bbr");
        }
        let available = cc::available()?;
        for (i, a) in algos.iter().enumerate() {
            if !available.contains(a) {
                usage!(
                    "--algos: {a} is not available on this kernel (available: {}; a module may need `modprobe tcp_{a}`)",
                    available.join(", ")
                );
            }
            if algos[..i].contains(a) {
                usage!("--algos: {a} is named twice");
            }
        }
        Ok(algos)
    }
}

//! bbrscope: a live TCP congestion-control observer and configurator.
//!
//! The product's heart is [`observe`]: kernel programs (bbrscope-ebpf) -> loader and layout
//! from BTF -> decoding -> the flow table -> verdicts -> sinks (NDJSON, Prometheus, the
//! dashboard, the experiment). Around it, one folder per area: [`apply`] changes the system's
//! congestion control, [`experiment`] runs and judges randomized A/B tests, [`demo`] compares
//! CUBIC and BBR on an emulated path, [`export`] serves Prometheus metrics, [`tui`] draws the
//! dashboard, [`advise`] weighs the settings beyond the algorithm against observed flows; these
//! sit side by side, and [`status`] alone looks across them. [`cmd`] holds one module per
//! subcommand, [`sys`] the calls to the OS; [`units`] and [`quantile`] are the one place each for
//! units (parse and format) and quantiles, [`newfile`] for creating a file, [`prose`] for
//! wrapping sentences.

pub mod advise;
pub mod apply;
pub mod cli;
pub mod cmd;
pub(crate) mod demo;
pub mod error;
pub mod experiment;
pub(crate) mod export;
pub(crate) mod figure;
pub(crate) mod newfile;
pub mod observe;
pub mod output;
pub(crate) mod prose;
pub(crate) mod quantile;
pub(crate) mod scrape;
/// The seeded generator, from the emulator's crate (whose losses draw from it): one generator for
/// everything that must reproduce from a seed.
pub use bbrscope_emulator::rng;
pub(crate) mod status;
pub mod sys;
pub mod tui;
pub mod units;

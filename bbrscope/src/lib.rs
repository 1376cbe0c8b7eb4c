//! bbrscope: a live TCP congestion-control observer and configurator.
//!
//! Data flows kernel programs (bbrscope-ebpf) -> [`kernel`] (layout from BTF, loader) ->
//! [`event`] (decoding) -> [`flow`] (flow table) -> [`diagnose`] (verdicts) -> sinks: [`sink`]
//! (NDJSON), [`tui`] (dashboard), [`demo`] (CUBIC vs BBR on an emulated path). [`apply`] changes
//! the system's congestion control; [`cmd`] holds one module per subcommand.

pub mod apply;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod demo;
pub mod diagnose;
pub mod error;
pub mod event;
pub mod experiment;
pub mod export;
pub mod figure;
pub mod filter;
pub mod flow;
pub mod kernel;
pub mod name;
pub mod output;
pub mod replay;
pub mod rng;
pub mod session;
pub mod sink;
pub mod stats;
pub mod sys;
pub mod tui;

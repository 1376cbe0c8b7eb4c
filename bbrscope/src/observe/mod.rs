//! The observer pipeline, in the order data flows through it:
//!
//! 1. [`kernel`]: the eBPF programs' loader (program type chosen at start-up, with fallbacks),
//!    socket layout from BTF, the ring buffer, connections already open at start-up;
//! 2. [`event`]: decoding the kernel's records into events;
//! 3. [`session`]: one observation run (what is attached, its filters, its own cost in
//!    [`stats`]), with [`filter`] for what the user asked to see and [`clock`] for timestamps;
//! 4. [`flow`]: the flow table, each flow from connect to close (names of algorithms and
//!    commands held inline: [`crate::sys::name`]);
//! 5. [`diagnose`]: the verdicts a flow's numbers support;
//! 6. [`sink`]: where flows go (NDJSON lines); [`replay`] reads such lines back; [`schema`]
//!    is the lines' record types, which both share;
//! 7. [`pipeline`]: the loop that drives 1–6 into a [`pipeline::Sink`] until a signal, a
//!    deadline or the sink ends it: `stream` (NDJSON), `advise` (its facts), `export` (the
//!    Prometheus metrics), `top` (the dashboard, drawn from the loop's table on its frames), the
//!    demo's rounds and `experiment` (observations, with its analyses, keys and frames as the
//!    sink's [`pipeline::Side`]). One [`pipeline::Retention`] policy says how long the table keeps
//!    a flow. `replay` has no observer: it plays a recording into the same dashboard.

pub(crate) mod clock;
pub(crate) mod diagnose;
pub mod event;
pub mod filter;
pub mod flow;
pub mod kernel;
pub(crate) mod pipeline;
pub mod replay;
pub(crate) mod schema;
pub(crate) mod session;
pub(crate) mod sink;
pub(crate) mod stats;

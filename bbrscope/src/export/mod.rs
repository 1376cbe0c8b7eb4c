//! `bbrscope export`: Prometheus metrics of every flow, aggregated by congestion-control
//! algorithm (see docs/export.md), and the generated files a package ships (man pages, shell
//! completions).

pub mod assets;
pub mod http;
pub mod metrics;

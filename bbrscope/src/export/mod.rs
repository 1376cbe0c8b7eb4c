//! `bbrscope export`: Prometheus metrics of every flow, aggregated by congestion-control
//! algorithm (see docs/export.md).

pub mod http;
pub mod metrics;

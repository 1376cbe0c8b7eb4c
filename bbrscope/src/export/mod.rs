//! `bbrscope export`: Prometheus metrics of every flow, aggregated by congestion-control
//! algorithm (see docs/export.md).

pub(crate) mod http;
pub(crate) mod metrics;

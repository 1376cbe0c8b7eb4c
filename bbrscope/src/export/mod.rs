//! `bbrscope export`: Prometheus metrics of every flow, aggregated by congestion-control
//! algorithm (see docs/export.md); served by [`crate::scrape`].

pub(crate) mod metrics;

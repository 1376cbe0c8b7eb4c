//! `bbrscope export`: a long-running Prometheus exporter. It watches flows as `stream` does and
//! serves their aggregates by algorithm at `/metrics` (docs/export.md).

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use prometheus_client::registry::Registry;

use crate::{
    cli::export::ExportArgs,
    export::metrics::{ExportMetrics, ScopeOptions},
    observe::flow::FlowTable,
    observe::pipeline::{self, NoSide, Retention, Settings, Signals},
    observe::session::Live,
    scrape,
};

/// How often bbrscope's own cost and the default algorithms are refreshed.
const TICK: Duration = Duration::from_secs(1);

pub async fn run(args: ExportArgs) -> Result<()> {
    let opts = args.observe.options()?;
    let mut signals = Signals::catch()?;
    // Bind before loading programs: a taken port is a usage error, and nothing is attached yet.
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            crate::error::usage!("--listen {}: the address is in use (another exporter?)", args.listen)
        }
        Err(e) => return Err(e).with_context(|| format!("listening on {}", args.listen)),
    };
    let mut live = Live::start("bbrscope export", &opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    let mut registry = Registry::default();
    let scopes = ScopeOptions { cgroup: args.by_cgroup, netns: args.by_netns };
    let mut metrics = ExportMetrics::new(&mut registry, scopes);
    metrics.set_observer(live.path().as_str());
    metrics.refresh_default_cc();
    let registry = Arc::new(registry);
    // The bound address: with port 0 the kernel chose one, and that is the one to scrape.
    let bound = listener.local_addr().unwrap_or(args.listen);
    if !bound.ip().is_loopback() {
        crate::output::errln!(
            "bbrscope: warning: listening on {bound}: other hosts can read the metrics (algorithms, cgroups, \
             namespaces); listen on 127.0.0.1 or firewall the port unless Prometheus scrapes from elsewhere"
        );
    }
    crate::output::errln!("bbrscope: serving metrics at http://{bound}/metrics ({} observer)", live.path().as_str());

    // The scrapes are served by a task of their own, from the registry the loop's sink counts into.
    let server = tokio::spawn(scrape::accept(listener, registry, std::sync::Arc::default()));
    let settings = Settings { duration: args.duration, stats: Some(TICK), retention: Retention::WATCH };
    let result =
        pipeline::run(&mut live, &mut signals, &mut FlowTable::new(0), &mut metrics, &mut NoSide, settings).await;
    server.abort();
    // The metrics sink writes nothing itself (the HTTP task does): no write error to tell apart.
    result??;
    Ok(())
}

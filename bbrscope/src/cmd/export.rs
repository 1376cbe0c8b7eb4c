//! `bbrscope export`: a long-running Prometheus exporter. It watches flows as `stream` does and
//! serves their aggregates by algorithm at `/metrics` (docs/export.md).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use clap::Args;
use prometheus_client::registry::Registry;
use tokio::signal::unix::{SignalKind, signal};

use crate::{
    cli::ObserveArgs,
    export::{
        http,
        metrics::{ExportMetrics, ScopeOptions},
    },
    observe::clock::Clock,
    observe::flow::FlowTable,
    observe::session::Live,
};

/// Closed flows are kept this long so late events (the summary after the final sample) still
/// find their flow.
const CLOSED_LINGER: Duration = Duration::from_secs(5);
/// Flows silent this long are forgotten (their close may have been lost).
const SILENT_FORGET: Duration = Duration::from_secs(300);
/// How often bbrscope's own cost, the default algorithm and the flow table are refreshed.
const TICK: Duration = Duration::from_secs(1);
/// Connections held at once. A scrape takes milliseconds, so more is a flood or clients that
/// connect and trickle (each is held up to the request deadline). When all are taken, a new
/// connection takes the place of the oldest one: a scraper, which sends its request as it
/// connects, is answered however many slow clients hold connections (slowloris), where waiting
/// in the kernel's accept queue behind them would time it out.
const MAX_CONNECTIONS: usize = 64;
/// After a failed accept (out of file descriptors), no accept for this long: the listener stays
/// readable, so accepting again at once would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub observe: ObserveArgs,
    /// Address and port to serve /metrics on (loopback by default; give e.g. 0.0.0.0:9580 or
    /// [::]:9580 to let a Prometheus on another host scrape it)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9580", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Also label the flow metrics by cgroup (path below the cgroup v2 mount): at most 32 values,
    /// the first seen; flows of later cgroups count as `other`
    #[arg(long)]
    pub by_cgroup: bool,
    /// Also label the flow metrics by network namespace (`ip netns` name, `initial`, or
    /// `ino:N`): at most 32 values, the first seen; later ones count as `other`
    #[arg(long)]
    pub by_netns: bool,
    /// Stop after this long: seconds, or 90s, 10m, 2h (default: run until SIGINT or SIGTERM)
    #[arg(long, value_name = "TIME", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Write man pages and shell completions to DIR and exit (used to build the package)
    #[arg(long, value_name = "DIR", hide = true)]
    pub dist_assets: Option<PathBuf>,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("'{s}' is not an address and port (e.g. 127.0.0.1:9580, 0.0.0.0:9580, [::1]:9580)"))
}

pub async fn run(args: ExportArgs) -> Result<()> {
    if let Some(dir) = &args.dist_assets {
        return crate::export::assets::write(dir);
    }
    let opts = args.observe.options()?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
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

    let mut table = FlowTable::new(0);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + TICK, TICK);
    let deadline = tokio::time::sleep(args.duration.unwrap_or(Duration::from_secs(365 * 86400)));
    tokio::pin!(deadline);
    // The connections being served, oldest first.
    let mut held: std::collections::VecDeque<tokio::task::JoinHandle<()>> = std::collections::VecDeque::new();
    let mut accept_after = tokio::time::Instant::now();
    loop {
        // Guards are evaluated once per turn; the ring's batches end a turn at least every
        // drain period, so an expired back-off is noticed within it.
        let may_accept = tokio::time::Instant::now() >= accept_after;
        tokio::select! {
            batch = live.next_batch(|ev| { metrics.on_event(&mut table, &ev); }) => batch?,
            conn = listener.accept(), if may_accept => match conn {
                Ok((conn, _)) => {
                    held.retain(|h| !h.is_finished());
                    if held.len() >= MAX_CONNECTIONS
                        && let Some(oldest) = held.pop_front()
                    {
                        oldest.abort();
                    }
                    held.push_back(tokio::spawn(http::serve(conn, registry.clone())));
                }
                // E.g. out of file descriptors: the client's loss, and a pause, not a spin.
                Err(_) => accept_after = tokio::time::Instant::now() + ACCEPT_BACKOFF,
            },
            _ = tick.tick() => {
                let now = Clock::monotonic_ns();
                table.prune(
                    now.saturating_sub(CLOSED_LINGER.as_nanos() as u64),
                    now.saturating_sub(SILENT_FORGET.as_nanos() as u64),
                );
                metrics.prune(&table);
                metrics.on_stats(&live.stats(table.len())?);
            }
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            _ = &mut deadline => break,
        }
    }
    Ok(())
}

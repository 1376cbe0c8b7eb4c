//! The options of `bbrscope export`.

use std::{net::SocketAddr, time::Duration};

use clap::Args;

use super::{ObserveArgs, parse_listen};

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub(crate) observe: ObserveArgs,
    /// Address and port to serve /metrics on, or a port alone on loopback (loopback by default;
    /// give e.g. 0.0.0.0:9580 or [::]:9580 to let a Prometheus on another host scrape it)
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9580", value_parser = parse_listen)]
    pub(crate) listen: SocketAddr,
    /// Also label the flow metrics by cgroup (path below the cgroup v2 mount): at most 32 values,
    /// the first seen; flows of later cgroups count as `other`
    #[arg(long)]
    pub(crate) by_cgroup: bool,
    /// Also label the flow metrics by network namespace (`ip netns` name, `initial`, or
    /// `ino:N`): at most 32 values, the first seen; later ones count as `other`
    #[arg(long)]
    pub(crate) by_netns: bool,
    /// Stop after this long: seconds, or 90s, 10m, 2h (default: run until SIGINT or SIGTERM)
    #[arg(long, value_name = "TIME", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub(crate) duration: Option<Duration>,
}

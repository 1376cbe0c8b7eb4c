//! The options of `bbrscope apply` (and the scopes `revert` shares).

use std::path::PathBuf;

use clap::Args;

/// Where a change applies (no option: the system, i.e. bbrscope's own network namespace).
#[derive(Debug, Args, Clone, Default)]
pub struct ScopeArgs {
    /// A network namespace: an `ip netns` name, a path such as /proc/PID/ns/net, or `all`
    #[arg(long, value_name = "NAME|PATH|all")]
    pub netns: Option<String>,
    /// A cgroup v2 directory: new TCP connections of its processes get the algorithm
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// A route prefix such as 203.0.113.0/24, or several separated by commas: each route's congctl
    /// and, with --initcwnd/--initrwnd, its initial windows (with --netns: in that namespace)
    #[arg(long, value_name = "PREFIX[,PREFIX...]")]
    pub route: Option<String>,
    /// Stand-in for / when reading and writing files (tests)
    #[arg(long, hide = true, default_value = "/")]
    pub root: PathBuf,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// Congestion-control algorithm, e.g. bbr or cubic (optional with --sysctl, --initcwnd or --initrwnd)
    #[arg(required_unless_present_any = ["sysctl", "initcwnd", "initrwnd", "qdisc"])]
    pub algorithm: Option<String>,
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Also set a TCP setting of the namespace, e.g. net.ipv4.tcp_slow_start_after_idle=0 (repeatable;
    /// tcp_wmem, tcp_rmem, wmem_max, rmem_max, tcp_slow_start_after_idle, tcp_notsent_lowat,
    /// tcp_no_metrics_save, tcp_mtu_probing, tcp_fastopen)
    #[arg(long, value_name = "KEY=VALUE")]
    pub sysctl: Vec<String>,
    /// With --route: the route's initial congestion window, in segments (1-128; the kernel's default is 10)
    #[arg(long, value_name = "SEGMENTS", requires = "route")]
    pub initcwnd: Option<u32>,
    /// With --route: the route's initial receive window, in segments (1-128)
    #[arg(long, value_name = "SEGMENTS", requires = "route")]
    pub initrwnd: Option<u32>,
    /// Run the checks and show the plan; change nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Keep the setting across reboots with a sysctl.d drop-in bbrscope owns (the default for the system scope)
    #[arg(long, conflicts_with = "no_persist")]
    pub persist: bool,
    /// Change the live setting only
    #[arg(long)]
    pub no_persist: bool,
    /// Add the algorithm to the host's tcp_allowed_congestion_control when a namespace needs it
    #[arg(long)]
    pub allow: bool,
    /// Also make QDISC (e.g. fq) the default qdisc and re-apply it on interfaces still on the kernel default
    #[arg(long, value_name = "QDISC")]
    pub qdisc: Option<String>,
    /// Print the plan and result as JSON
    #[arg(long)]
    pub json: bool,
}

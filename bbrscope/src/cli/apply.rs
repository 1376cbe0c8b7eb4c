//! The options of `bbrscope apply` (and the scopes `revert` shares).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::{
    apply::{plan::Options, scope::Spec, transaction::Request},
    error::{UsageError, usage},
    sys::{route::Window, sysctl},
};

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

impl ScopeArgs {
    pub fn spec(&self) -> Spec<'_> {
        Spec { netns: self.netns.as_deref(), cgroup: self.cgroup.as_deref(), route: self.route.as_deref() }
    }

    pub fn is_system(&self) -> bool {
        self.spec().is_system()
    }
}

impl ApplyArgs {
    /// The change asked for, with every combination that cannot mean anything refused before
    /// anything is read or changed.
    pub(crate) fn request(&self) -> Result<Request<'_>> {
        let scope = &self.scope;
        if !scope.is_system() && self.persist {
            usage!("--persist is for the system scope: namespaces, cgroups and routes do not outlive a reboot as such");
        }
        if !scope.is_system() && self.qdisc.is_some() {
            usage!("--qdisc is for the system scope (net.core.default_qdisc is host-wide)");
        }
        let sysctls = self.sysctl.iter().map(|a| sysctl::tunable(a)).collect::<Result<Vec<_>, String>>();
        let sysctls = sysctls.map_err(UsageError::new)?;
        // Twice would be applied twice and recorded twice, the second record holding the first
        // value as "before": revert would then restore the user's own first value.
        if let Some((key, _)) = sysctls.iter().enumerate().find_map(|(i, s)| sysctls[..i].iter().find(|t| t.0 == s.0)) {
            usage!("--sysctl {key} is given twice: give each setting once");
        }
        if !sysctls.is_empty() && (scope.cgroup.is_some() || scope.route.is_some()) {
            usage!("--sysctl sets a namespace's setting: give no --cgroup or --route (the system, or --netns NAME)");
        }
        if self.algorithm.is_none() && scope.cgroup.is_some() {
            usage!("--cgroup sets an algorithm: name it, e.g. `bbrscope apply bbr --cgroup PATH`");
        }
        if self.algorithm.is_none() && self.allow {
            usage!("--allow is about an algorithm: name it, e.g. `bbrscope apply bbr --netns NAME --allow`");
        }
        let mut windows = Vec::new();
        for (window, value) in [(Window::Initcwnd, self.initcwnd), (Window::Initrwnd, self.initrwnd)] {
            match value {
                Some(v) if !(1..=Window::MAX).contains(&v) => {
                    usage!(
                        "--{} {v}: expected 1 to {} segments (the kernel's default is 10)",
                        window.name(),
                        Window::MAX
                    )
                }
                Some(v) => windows.push((window, v)),
                None => {}
            }
        }
        let options = Options {
            algorithm: self.algorithm.clone(),
            sysctls,
            windows,
            persist: scope.is_system() && !self.no_persist,
            allow: self.allow,
            qdisc: self.qdisc.clone(),
            root: scope.root.clone(),
        };
        Ok(Request { scope: scope.spec(), options, dry_run: self.dry_run })
    }
}

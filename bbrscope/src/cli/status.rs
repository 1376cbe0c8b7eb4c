//! The options of `bbrscope status`.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Also show a network namespace: an `ip netns` name, a path such as /proc/PID/ns/net, or `all`
    #[arg(long, value_name = "NAME|PATH|all")]
    pub(crate) netns: Option<String>,
    /// Print as JSON
    #[arg(long)]
    pub(crate) json: bool,
    /// Stand-in for / when reading files (tests)
    #[arg(long, hide = true, default_value = "/")]
    pub(crate) root: PathBuf,
}

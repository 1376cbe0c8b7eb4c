//! The options of `bbrscope revert`.

use clap::Args;

use super::apply::ScopeArgs;

#[derive(Debug, Args)]
pub struct RevertArgs {
    #[command(flatten)]
    pub scope: ScopeArgs,
    /// Revert every scope bbrscope has changed
    #[arg(long, conflicts_with_all = ["netns", "cgroup", "route"])]
    pub all: bool,
    /// Restore recorded values even where someone changed them since bbrscope did
    #[arg(long)]
    pub force: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

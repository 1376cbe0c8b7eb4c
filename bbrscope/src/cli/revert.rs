//! The options of `bbrscope revert`.

use anyhow::Result;
use clap::Args;

use super::apply::ScopeArgs;
use crate::apply::{revert::Request, scope};

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

impl RevertArgs {
    /// What to undo, with the scope options checked as `apply` checks them, so a typo is an
    /// error rather than "nothing recorded". Whether a named namespace or cgroup exists is the
    /// revert's to check: one that is gone can still be named when bbrscope recorded it.
    pub(crate) fn request(&self) -> Result<Request<'_>> {
        let spec = self.scope.spec();
        spec.cgroup_alone()?;
        for r in spec.route.iter().flat_map(|r| r.split(',')) {
            scope::parse_prefix(r.trim())?;
        }
        Ok(Request { scope: spec, all: self.all, force: self.force, root: &self.scope.root })
    }
}

//! The options of `bbrscope advise`.

use std::{path::PathBuf, time::Duration};

use clap::Args;

use super::ObserveArgs;

#[derive(Debug, Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub(crate) observe: ObserveArgs,
    /// How long to watch flows before weighing them: seconds, or 90s, 10m, 2h (Ctrl-C weighs
    /// what was seen so far)
    #[arg(long, value_name = "TIME", default_value = "60", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub(crate) duration: Duration,
    /// Weigh the flows of a recording (`bbrscope stream > FILE`; - for stdin) instead of
    /// watching live ones, against this host's settings as they are now
    #[arg(long, value_name = "FILE", conflicts_with = "duration")]
    pub(crate) from: Option<PathBuf>,
    /// Print as JSON
    #[arg(long)]
    pub(crate) json: bool,
    /// Stand-in for / when keeping the advice for `status` (tests)
    #[arg(long, hide = true, default_value = "/")]
    pub(crate) root: PathBuf,
}

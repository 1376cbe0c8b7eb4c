//! `bbrscope top`: the live dashboard.

use anyhow::Result;

use crate::{cli::TopArgs, tui};

pub async fn run(args: TopArgs) -> Result<()> {
    tui::top(&args.observe.options()?, args.duration).await
}

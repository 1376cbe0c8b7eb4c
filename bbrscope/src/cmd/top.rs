//! `bbrscope top`: the live dashboard.

use anyhow::Result;

use crate::{cli::TopArgs, tui};

pub async fn run(args: TopArgs) -> Result<()> {
    let opts = args.observe.options()?;
    match args.duration {
        // The dashboard restores the terminal when it is dropped, however its loop ends.
        Some(d) => tokio::select! {
            r = tui::top(&opts) => r,
            () = tokio::time::sleep(d) => Ok(()),
        },
        None => tui::top(&opts).await,
    }
}

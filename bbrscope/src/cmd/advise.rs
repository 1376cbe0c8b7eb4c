//! `bbrscope advise`: watch flows for a while, then say which settings beyond the algorithm hold
//! them back (docs/advise.md).

use std::time::Duration;

use anyhow::Result;
use clap::Args;

use crate::{
    cli::ObserveArgs,
    output::{self, outln},
};

#[derive(Debug, Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub observe: ObserveArgs,
    /// How long to watch flows before weighing them: seconds, or 90s, 10m, 2h (Ctrl-C weighs
    /// what was seen so far)
    #[arg(long, value_name = "TIME", default_value = "60", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub duration: Duration,
    /// Print as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: AdviseArgs) -> Result<()> {
    let opts = args.observe.options()?;
    let advice = crate::advise::live(&opts, args.duration).await?;
    output::guard(|| {
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&advice)?)?;
        } else {
            output::out!("{}", crate::advise::render(&advice))?;
        }
        Ok(())
    })
}

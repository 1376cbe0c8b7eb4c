//! `bbrscope replay FILE`: a recorded stream in the dashboard.

use std::io::Read as _;

use anyhow::Result;

use crate::{cli::ReplayArgs, error::usage, replay, tui};

pub async fn run(args: ReplayArgs) -> Result<()> {
    let name = args.file.display().to_string();
    let text = if name == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        match std::fs::read_to_string(&args.file) {
            Ok(t) => t,
            Err(e) => usage!("cannot read {name}: {e} (give a file written by `bbrscope stream`)"),
        }
    };
    let records = match replay::parse_all(&text) {
        Ok(r) => r,
        Err(e) => usage!("{name} is not a bbrscope stream recording: {e:#}"),
    };
    if records.is_empty() {
        usage!("{name} has no flow records to replay (record one with `bbrscope stream > {name}`)");
    }
    tui::replay(records, &name, args.speed, args.paused).await
}

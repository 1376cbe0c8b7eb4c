//! `bbrscope replay FILE`: a recorded stream in the dashboard, read while it plays (a file of any
//! length, or a pipe that is still being written).

use std::{io::BufReader, time::Duration};

use anyhow::Result;

use crate::{
    cli::ReplayArgs,
    error::usage,
    tui::{self, Feed, FirstRecord},
};

/// How long to wait for a first record before the dashboard takes the screen: long enough for any
/// file, short enough that a quiet pipe gets a screen (and `q`) at once.
const FIRST_RECORD_WAIT: Duration = Duration::from_secs(1);

pub async fn run(args: ReplayArgs) -> Result<()> {
    let name = args.file.display().to_string();
    let mut feed = if name == "-" {
        Feed::from_reader(BufReader::new(std::io::stdin()))
    } else {
        match std::fs::File::open(&args.file) {
            Ok(f) => Feed::from_reader(BufReader::new(f)),
            Err(e) => usage!("cannot read {name}: {e} (give a file written by `bbrscope stream`)"),
        }
    };
    match feed.wait_first(FIRST_RECORD_WAIT) {
        FirstRecord::Ready | FirstRecord::Waiting => {}
        FirstRecord::Empty(Some(e)) => usage!("{name} is not a bbrscope stream recording: {e}"),
        FirstRecord::Empty(None) => {
            let skipped = feed.skipped.describe().map(|s| format!("; {s}")).unwrap_or_default();
            usage!("{name} has no flow records to replay (record one with `bbrscope stream > capture.ndjson`){skipped}")
        }
    }
    let feed = tui::replay(feed, &name, args.speed, args.paused).await?;
    // After the dashboard has left the screen, where it can be read.
    if let Some(s) = feed.skipped.describe() {
        crate::output::errln!("bbrscope: replay of {name}: {s}");
    }
    if let Some(e) = &feed.error {
        crate::output::errln!("bbrscope: replay of {name}: stopped reading: {e}");
    }
    Ok(())
}

//! `bbrscope man` and `bbrscope completions`: the documentation generated from the CLI.

use anyhow::Result;

use crate::cli::{CompletionsArgs, ManArgs, docs};

pub fn man(args: &ManArgs) -> Result<()> {
    docs::write_man(&args.dir)
}

/// The script on stdout, through the one output path (a closed pipe is a quiet end).
pub fn completions(args: &CompletionsArgs) -> Result<()> {
    let mut script = Vec::new();
    docs::completions(args.shell, &mut script);
    crate::output::guard(|| Ok(crate::output::out!("{}", String::from_utf8_lossy(&script))?))
}

//! Man pages and shell completions generated from the clap definitions the binary parses with,
//! so the installed documentation cannot drift from the binary (written by `cargo xtask dist`
//! through the hidden `bbrscope export --dist-assets DIR`).

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::{Command, CommandFactory as _};
use clap_complete::Shell;

use crate::cli::Cli;

/// Writes `DIR/man/bbrscope.1` (and one page per subcommand, `bbrscope-stream.1`, ...) and
/// `DIR/completions/{bbrscope.bash,_bbrscope,bbrscope.fish}`.
pub fn write(dir: &Path) -> Result<()> {
    let man = dir.join("man");
    std::fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    // No pages or completions for clap's `help` subcommand (`bbrscope-help-stream.1`, ...):
    // `bbrscope help X` still works, it just is not documented twice.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Subcommand pages name themselves `bbrscope-SUB` only once the tree is built.
    cmd.build();
    clap_mangen::generate_to(cmd.clone(), &man).with_context(|| format!("writing man pages to {}", man.display()))?;
    let comp = dir.join("completions");
    std::fs::create_dir_all(&comp).with_context(|| format!("creating {}", comp.display()))?;
    let mut offered = visible(&cmd);
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut offered, "bbrscope", &comp)
            .with_context(|| format!("writing {shell} completions to {}", comp.display()))?;
    }
    Ok(())
}

/// The (built) command tree as completions should offer it: without hidden options (`--root`
/// is for tests, `--dist-assets` for packaging), which clap_complete's generators would list.
fn visible(cmd: &Command) -> Command {
    // The built tree already holds --help and --version: no second copy of either.
    let mut out = Command::new(cmd.get_name().to_string())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true);
    // The copied --version needs a version to show.
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    if let Some(v) = cmd.get_long_version() {
        out = out.long_version(v.to_string());
    }
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        out = out.arg(arg.clone());
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out = out.subcommand(visible(sub));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn writes_pages_and_completions() {
        let dir = tempfile::tempdir().unwrap();
        super::write(dir.path()).unwrap();
        for f in ["man/bbrscope.1", "man/bbrscope-export.1", "completions/bbrscope.bash", "completions/_bbrscope"] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        assert!(dir.path().join("completions/bbrscope.fish").is_file());
        for shell in ["bbrscope.bash", "_bbrscope", "bbrscope.fish"] {
            let text = std::fs::read_to_string(dir.path().join("completions").join(shell)).unwrap();
            assert!(!text.contains("--root") && !text.contains("dist-assets"), "{shell} offers a hidden option");
            assert!(text.contains("port"), "{shell}: options are offered");
            // clap_complete's fish generator completes no positional values.
            assert!(shell.ends_with("fish") || text.contains("fairness"), "{shell}: presets are offered");
        }
    }
}

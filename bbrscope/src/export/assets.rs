//! Man pages and shell completions generated from the clap definitions the binary parses with,
//! so the installed documentation cannot drift from the binary (written by `cargo xtask dist`
//! through the hidden `bbrscope export --dist-assets DIR`).

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;
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
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "bbrscope", &comp)
            .with_context(|| format!("writing {shell} completions to {}", comp.display()))?;
    }
    Ok(())
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
    }
}

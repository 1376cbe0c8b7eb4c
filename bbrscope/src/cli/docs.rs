//! Man pages and shell completions generated from the clap definitions the binary parses with,
//! so the documentation cannot drift from the binary: `bbrscope man DIR` and `bbrscope
//! completions SHELL`, which `cargo xtask dist` runs for the package and anyone can run where the
//! package is not installed (the static binary alone).

use std::{io::Write, path::Path};

use anyhow::{Context as _, Result};
use clap::{Command, CommandFactory as _, builder::PossibleValuesParser};
use clap_complete::Shell;
use clap_mangen::Man;
use roff::{Roff, bold, roman};

use crate::{
    apply::{cgroup, files, lock as apply_lock},
    cli::Cli,
    status::advice,
    sys::{cc, experiment_lock},
    tui::app::KEYS,
};

/// The command tree the pages and completions describe.
fn tree() -> Command {
    // No pages or completions for clap's `help` subcommand (`bbrscope-help-stream.1`, ...):
    // `bbrscope help X` still works, it just is not documented twice.
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Subcommand pages name themselves `bbrscope-SUB` only once the tree is built.
    cmd.build();
    cmd
}

/// Writes `DIR/bbrscope.1` and one page per subcommand (`bbrscope-stream.1`, ...), creating
/// `DIR` if needed.
pub(crate) fn write_man(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    pages(&tree(), dir).with_context(|| format!("writing man pages to {}", dir.display()))
}

/// The completion script for `shell`.
pub(crate) fn completions(shell: Shell, out: &mut impl Write) {
    clap_complete::generate(shell, &mut visible(&tree()), "bbrscope", out);
}

/// One page for `cmd` and one for each visible subcommand, below it: clap's sections, then
/// those clap does not know (see [`extra`]).
fn pages(cmd: &Command, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, dir)?;
    }
    // The page footer holds the source: the short version, not the long one (commit and kernel
    // side, which garble an 80-column footer; the VERSION section has it).
    let man = Man::new(cmd.clone()).source(format!("bbrscope {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    if cmd.get_after_help().is_some() || cmd.get_after_long_help().is_some() {
        man.render_extra_section(&mut out)?;
    }
    extra(cmd).to_writer(&mut out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    crate::newfile::write(&dir.join(man.get_filename()), &out, crate::newfile::PUBLIC)
}

/// A page's sections that clap does not generate: the dashboard's keys, exit status,
/// environment, files, examples, see also. Keys and file names come from the code that uses
/// them, so the pages cannot drift from it.
fn extra(cmd: &Command) -> Roff {
    let page = cmd.get_display_name().unwrap_or(cmd.get_name());
    let sub = page.strip_prefix("bbrscope-").unwrap_or("");
    let mut r = Roff::new();
    // Left-aligned and unhyphenated: these sections hold commands, paths and option names.
    r.control("ad", ["l"]).control("nh", []);
    let tagged = |r: &mut Roff, tag: &str, text: &str| {
        r.control("TP", []).text([bold(tag)]).text([roman(text)]);
    };
    if matches!(sub, "" | "top" | "replay" | "experiment" | "demo") {
        r.control("SH", ["KEYS"]).text([roman("In the dashboard:")]);
        for (key, what) in KEYS {
            tagged(&mut r, key, what);
        }
    }
    r.control("SH", ["EXIT STATUS"]);
    let statuses: &[(&str, &str)] = match sub {
        "experiment" => &[
            ("0", "It ran its course, or was ended by q, Ctrl-C or SIGTERM (the report is printed)."),
            ("1", "An error: one line on stderr says what failed."),
            ("2", "Bad input (nothing was started), or the service set its own algorithm (nothing concluded)."),
            ("3", "The guardrail stopped it: an arm was clearly worse for some client group."),
        ],
        "demo" => &[
            ("0", "It ran its course, or was quit with q."),
            ("1", "An error, or a signal stopped it (the partial summary is printed)."),
            ("2", "Bad input: one line names the problem and what would be right; nothing was created."),
        ],
        _ => &[
            ("0", "Success (a closed output pipe ends the command quietly, with 0)."),
            (
                "1",
                "An error: one line on stderr names it and, where something was changed, what and how to \
                 revert it.",
            ),
            ("2", "Bad input: one line names the problem and what would be right; nothing was changed."),
        ],
    };
    for (code, what) in statuses {
        tagged(&mut r, code, what);
    }
    r.control("SH", ["ENVIRONMENT"]);
    tagged(&mut r, "NO_COLOR", "Set and not empty: no colours in the dashboard or in tables.");
    if matches!(sub, "" | "apply" | "status" | "revert" | "experiment" | "advise") {
        r.control("SH", ["FILES"]);
        let files: &[(&str, &str)] = &[
            (files::SYSCTL_DROPIN, "The sysctl.d drop-in apply writes for a persistent system-wide setting."),
            (files::MODULES_LOAD, "Loads the algorithm's module at boot where apply loaded one."),
            (files::STATE, "What apply changed, per scope: what revert restores and status lists."),
            (
                files::reserve::RESERVE,
                "Room kept beside the record (64 KiB at least) that only a revert may use: a full disk cannot stop it.",
            ),
            (advice::ADVICE, "The last advise's findings and the settings it weighed (status shows them)."),
            (apply_lock::LOCK, "Held while apply or revert runs."),
            (cgroup::PIN_DIR, "The programs that set a cgroup's algorithm (apply --cgroup), pinned until revert."),
            (experiment_lock::LOCK, "Held while an experiment checks its scope against those running."),
            (experiment_lock::RUNNING, "A running experiment: its pid, arms and scope (status reads it)."),
        ];
        for (path, what) in files {
            tagged(&mut r, path, what);
        }
    }
    r.control("SH", ["EXAMPLES"]);
    for (what, lines) in examples(sub) {
        r.control("PP", []).text([roman(*what)]).control("RS", ["4"]).control("nf", []);
        for line in *lines {
            r.text([bold(*line)]);
        }
        r.control("fi", []).control("RE", []);
    }
    r.control("SH", ["SEE ALSO"]);
    let mut see: Vec<String> = [
        "top",
        "stream",
        "replay",
        "demo",
        "experiment",
        "advise",
        "apply",
        "status",
        "revert",
        "export",
        "man",
        "completions",
    ]
    .iter()
    .filter(|s| **s != sub)
    .map(|s| format!("bbrscope-{s}(1)"))
    .collect();
    if !sub.is_empty() {
        see.insert(0, "bbrscope(1)".into());
    }
    see.extend(["ss(8)", "tc(8)", "sysctl(8)", "ip-route(8)"].map(String::from));
    r.text([roman(see.join(", "))]);
    r
}

/// A page's examples: what each does, then the command as typed (lines of at most 72
/// characters, a trailing `\\` continuing one); `sub` is the subcommand, "" for bbrscope(1).
fn examples(sub: &str) -> &'static [(&'static str, &'static [&'static str])] {
    match sub {
        "top" => &[
            ("Every flow on port 443, live (? lists the keys):", &["bbrscope top --port 443"]),
            ("The flows of processes named nginx:", &["bbrscope top --comm nginx"]),
        ],
        "stream" => &[
            (
                "Every response on port 443 as it completes:",
                &[
                    "bbrscope stream --port 443 |",
                    "  jq -c 'select(.type==\"flow_summary\")",
                    "         | {dst, cc, bytes_acked, duration_s, retrans_total}'",
                ],
            ),
            ("A minute of flows, to replay later:", &["bbrscope stream --duration 60 > flows.ndjson"]),
        ],
        "replay" => &[("A recorded stream in the dashboard (no root needed):", &["bbrscope replay flows.ndjson"])],
        "demo" => &[
            ("CUBIC and BBR on Google's 1%-loss, 100 ms path, side by side:", &["bbrscope demo"]),
            ("One BBR flow beside CUBIC flows on one deep-buffered link:", &["bbrscope demo fairness --buffer 8bdp"]),
        ],
        "experiment" => &[
            (
                "Half of the service's new connections get BBR for 30 minutes; the answer per client group, and \
                 the apply commands the evidence supports:",
                &["bbrscope experiment --arms cubic,bbr --port 443 --duration 30m \\", "  --recommend"],
            ),
            (
                "Does an initial window of 32 segments speed up responses to two client networks? (The \
                 recommendation is a route command per prefix that gains.)",
                &[
                    "bbrscope experiment --arms bbr,bbr+iw32 --port 443 \\",
                    "  --dst 203.0.113.0/24,198.51.100.0/24 --recommend",
                ],
            ),
            ("The report of a run recorded with --record, again:", &["bbrscope experiment --analyze run.ndjson"]),
        ],
        "apply" => &[
            ("The checks and the plan for the system; nothing changes:", &["bbrscope apply bbr --dry-run"]),
            ("BBR and fq for the system, kept across reboots:", &["bbrscope apply bbr --qdisc fq"]),
            ("BBR for connections to one prefix only:", &["bbrscope apply bbr --route 203.0.113.0/24"]),
            (
                "Keep-alive connections resume with their window after a pause (what advise's idle_restart \
                 finding says):",
                &["bbrscope apply --sysctl net.ipv4.tcp_slow_start_after_idle=0"],
            ),
            (
                "A first flight of 32 segments to one prefix (what advise's initial_window finding says):",
                &["bbrscope apply --route 203.0.113.0/24 --initcwnd 32"],
            ),
        ],
        "status" => &[("Defaults, qdiscs, boot configuration, what bbrscope changed:", &["bbrscope status --json"])],
        "revert" => &[("Undo every scope apply recorded, exactly:", &["bbrscope revert --all"])],
        "export" => &[("Prometheus metrics at /metrics:", &["bbrscope export --listen 127.0.0.1:9464"])],
        "advise" => &[
            (
                "Five minutes of the service on port 443, then what holds its flows back:",
                &["bbrscope advise --port 443 --duration 5m"],
            ),
            ("The same as JSON, each finding with its numbers:", &["bbrscope advise --duration 60 --json"]),
        ],
        "man" => &[(
            "The pages where the package is not installed (the static binary alone):",
            &["bbrscope man /tmp/man && man -l /tmp/man/bbrscope-top.1"],
        )],
        "completions" => &[(
            "Tab completion in bash, for every user:",
            &["bbrscope completions bash > /etc/bash_completion.d/bbrscope"],
        )],
        _ => &[
            ("The dashboard on a terminal, the JSON stream into a pipe:", &["bbrscope"]),
            ("Switch the system to BBR, with checks, proof and a way back:", &["bbrscope apply bbr"]),
            ("Undo it:", &["bbrscope revert"]),
        ],
    }
}

/// Arguments that name congestion-control algorithms: `apply ALGORITHM`, `--cc`, the demo's
/// `--algos`.
const ALGORITHM_ARGS: [&str; 3] = ["algorithm", "cc", "algos"];

/// The (built) command tree as completions should offer it: without hidden options (`--root`
/// is for tests), which clap_complete's generators would list.
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
        let mut arg = arg.clone();
        // Completed with the algorithms Linux ships; the parser itself takes any name (a host may
        // have an out-of-tree one), which is checked against the kernel's list when used.
        if ALGORITHM_ARGS.contains(&arg.get_id().as_str()) {
            arg = arg.value_parser(PossibleValuesParser::new(cc::MAINLINE));
        }
        out = out.arg(arg);
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        out = out.subcommand(visible(sub));
    }
    out
}

#[cfg(test)]
mod tests {
    use clap_complete::Shell;

    #[test]
    fn writes_pages_and_completions() {
        let dir = tempfile::tempdir().unwrap();
        let man = dir.path().join("man");
        super::write_man(&man).unwrap();
        for f in ["bbrscope.1", "bbrscope-export.1", "bbrscope-man.1", "bbrscope-completions.1"] {
            assert!(man.join(f).is_file(), "{f}");
        }
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut text = Vec::new();
            super::completions(shell, &mut text);
            let text = String::from_utf8(text).unwrap();
            assert!(!text.contains("--root"), "{shell} offers a hidden option");
            assert!(text.contains("port"), "{shell}: options are offered");
            assert!(text.contains("completions"), "{shell}: subcommands are offered");
            // clap_complete's fish generator completes no positional values.
            assert!(shell == Shell::Fish || text.contains("fairness"), "{shell}: presets are offered");
        }
    }

    /// Every page renders with man(1) at 80 columns without a line over 80, with the sections
    /// an admin looks for; the dashboard's keys are on the pages of the commands that show it,
    /// and the experiment's page has its own exit status 3.
    #[test]
    fn pages_render_at_80_columns_with_every_section() {
        let dir = tempfile::tempdir().unwrap();
        super::write_man(dir.path()).unwrap();
        let mut pages = 0;
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let out = std::process::Command::new("man")
                .arg("-l")
                .arg(&path)
                .env("MANWIDTH", "80")
                .env_remove("MAN_KEEP_FORMATTING")
                .output()
                .expect("man(1) runs");
            assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
            let raw = String::from_utf8(out.stdout).unwrap();
            // Justified lines stretch the spaces between words.
            let text = raw.lines().map(|l| l.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" "));
            let text = text.collect::<Vec<_>>().join("\n");
            let name = path.file_name().unwrap().to_str().unwrap();
            for line in raw.lines() {
                assert!(line.chars().count() <= 80, "{name}: a line over 80 columns: {line:?}");
            }
            for section in ["SYNOPSIS", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES", "SEE ALSO"] {
                assert!(text.lines().any(|l| l == section), "{name}: no {section} section");
            }
            if ["bbrscope.1", "bbrscope-top.1", "bbrscope-replay.1"].contains(&name) {
                assert!(text.contains("KEYS") && text.contains("select a flow"), "{name}: the dashboard's keys");
            }
            if ["bbrscope.1", "bbrscope-apply.1", "bbrscope-revert.1"].contains(&name) {
                assert!(text.contains("/var/lib/bbrscope/state.json"), "{name}: FILES");
                assert!(text.contains("/var/lib/bbrscope/.reserve"), "{name}: FILES");
            }
            if name == "bbrscope-experiment.1" {
                assert!(text.contains("guardrail stopped it"), "{name}: exit status 3");
            }
            pages += 1;
        }
        assert_eq!(pages, 13, "bbrscope(1) and one page per command");
    }

    /// Every example is a command bbrscope accepts as written (up to a pipe, a redirection or `&&`).
    #[test]
    fn every_example_parses() {
        use clap::Parser as _;
        for sub in [
            "",
            "top",
            "stream",
            "replay",
            "demo",
            "experiment",
            "apply",
            "status",
            "revert",
            "export",
            "advise",
            "man",
            "completions",
        ] {
            for (what, lines) in super::examples(sub) {
                let command = lines.join(" ").replace('\\', "");
                let command = command.split(['|', '>', '&']).next().unwrap();
                let words: Vec<&str> = command.split_whitespace().collect();
                assert_eq!(words[0], "bbrscope");
                if let Err(e) = crate::cli::Cli::try_parse_from(&words) {
                    panic!("{sub} example {what:?}: {command}: {e}");
                }
            }
        }
    }
}

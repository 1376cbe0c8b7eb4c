//! The end of a run, printed: the report as text or JSON, the figure (`--plot`), the guardrail's
//! replay of a recording and the recommended commands. Apart from [`super::setup`] because this
//! is the only part of the analysis that writes to stdout or files.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::{
    Observation,
    format::{fmt_count, fmt_pct},
    guardrail::{self, GuardDecision, SwitchedBack},
    plot,
    report::{InFlight, Report},
    setup::{Setup, report},
};
use crate::{
    error::usage,
    output::{self, outln},
};

/// `--plot` must be writable before the experiment runs, not found unwritable after.
pub(crate) fn check_plot_path(p: &Path) -> Result<()> {
    if let Err(e) = crate::figure::check_path(p) {
        usage!("{e}");
    }
    Ok(())
}

#[derive(Default)]
pub(crate) struct Output {
    pub(crate) json: bool,
    pub(crate) plot: Option<PathBuf>,
    pub(crate) recommend: bool,
    /// Why the run ended early (a signal, q, the guardrail).
    pub(crate) stopped_by: Option<String>,
    /// The guardrail's stop, when it ended the run.
    pub(crate) guard: Option<GuardDecision>,
    /// The client groups the guardrail sent back to their status quo while the run went on.
    pub(crate) switched_back: Vec<SwitchedBack>,
    /// `--analyze`: what the live guardrail would have done on the recording.
    pub(crate) replay: Option<guardrail::Replay>,
    /// `--analyze-prometheus`: whose sums were judged.
    pub(crate) fleet: Option<Fleet>,
}

/// The hosts a fleet's answer rests on.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Fleet {
    pub(crate) id: String,
    /// Hosts whose sums were read: serving them, or ended within the lookback.
    pub(crate) hosts: usize,
    /// Of those, the hosts whose experiment has ended (their last sums).
    pub(crate) ended: usize,
    pub(crate) prometheus: String,
    /// Flows per arm running now on the hosts serving it: not in the sums (nor the answer) until
    /// they finish.
    pub(crate) running: InFlight,
    /// The guardrail's rule on every host's flows together (null when no host watches one).
    pub(crate) guardrail: Option<GuardDecision>,
}

impl Fleet {
    /// `3 hosts`, `3 hosts (1 of them ended)`.
    fn hosts_words(&self) -> String {
        let hosts = if self.hosts == 1 { "host" } else { "hosts" };
        let ended = if self.ended > 0 { format!(" ({} of them ended)", self.ended) } else { String::new() };
        format!("{} {hosts}{ended}", self.hosts)
    }

    /// `; 3 A / 1 B flows running now, in the answer once they finish`, or nothing.
    fn running_words(&self) -> String {
        let InFlight { a, b } = self.running;
        if a + b == 0 {
            return String::new();
        }
        format!("; {} A / {} B flows running now, in the answer once they finish", fmt_count(a), fmt_count(b))
    }

    /// The fleet guardrail's decision, in lines: a stop, or where the watch stands and the groups
    /// it would send back (a fleet cannot: each host's own guardrail holds its own).
    fn guardrail_lines(&self, rep: &Report) -> Vec<String> {
        let Some(g) = &self.guardrail else {
            return vec!["fleet guardrail: not watched (the hosts run with --no-guardrail)".into()];
        };
        if g.stop {
            return vec![format!(
                "fleet guardrail: STOP, on every host's flows together: {}; end the experiment on every host \
                 (fleet-experiment.yml does)",
                g.reason
            )];
        }
        let mut lines = vec![format!("fleet guardrail, on every host's flows together: {}", g.reason)];
        for b in &g.switched_back {
            lines.push(format!(
                "fleet guardrail: {} would go back to their status quo ({}); the fleet holds no group, each host's own \
                 guardrail judges its own flows",
                b.group,
                harm_words(b, rep)
            ));
        }
        lines
    }
}

/// `--json`: the report with how the run ended.
#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a Report,
    /// Null when it ran its course (duration or flow count reached).
    stopped_by: Option<&'a str>,
    /// The guardrail's stop in numbers (null unless it stopped the run).
    guardrail: Option<&'a GuardDecision>,
    /// The client groups it sent back to their status quo, each when and why (empty if none).
    guardrail_switched_back: &'a [SwitchedBack],
    /// `--analyze`: the live guardrail's checks replayed in completion order.
    guardrail_replay: Option<&'a guardrail::Replay>,
    /// `--analyze-prometheus`: the experiment's id, its hosts and the Prometheus read.
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<&'a Fleet>,
}

/// Prints the final report. Its first line is the guardrail's reason when it stopped the run.
pub(crate) fn finish(obs: &[Observation], setup: &Setup, out: &Output) -> Result<Report> {
    let guard_stop = out.guard.clone().filter(|g| g.stop);
    let (rep, a) = report(obs, setup, guard_stop);
    if let Some(p) = &out.plot {
        crate::figure::write(p, &plot::svg(obs, &a, 6))?;
    }
    show(&rep, out)?;
    Ok(rep)
}

/// Prints `rep` as `out` asks: JSON, or the text with the guardrail's groups, its replay and the
/// recommended commands.
pub(crate) fn show(rep: &Report, out: &Output) -> Result<()> {
    output::guard(|| {
        if out.json {
            outln!(
                "{}",
                serde_json::to_string(&JsonReport {
                    report: rep,
                    stopped_by: out.stopped_by.as_deref(),
                    guardrail: out.guard.as_ref().filter(|g| g.stop),
                    guardrail_switched_back: &out.switched_back,
                    guardrail_replay: out.replay.as_ref(),
                    fleet: out.fleet.as_ref(),
                })?
            )?;
            return Ok(());
        }
        if let Some(f) = &out.fleet {
            outln!(
                "fleet: experiment {} on {}, their sums from the Prometheus at {}{}",
                f.id,
                f.hosts_words(),
                f.prometheus,
                f.running_words()
            )?;
            for line in f.guardrail_lines(rep) {
                outln!("{line}")?;
            }
        }
        if let Some(why) = &out.stopped_by {
            outln!("{why}")?;
        }
        outln!("{}", rep.render_text().trim_end())?;
        for g in &out.switched_back {
            outln!("{}", switched_back_line(g, rep))?;
        }
        if let Some(r) = &out.replay {
            outln!()?;
            match r.stopped_at_s {
                Some(t) => outln!(
                    "guardrail replayed ({} looks, every {:.0} s of recorded time): would have stopped at {:.0} s, after \
                     {} flows: {}",
                    r.looks,
                    r.period_s,
                    t,
                    r.flows_at_stop.unwrap_or(0),
                    r.decision.reason
                )?,
                None => outln!(
                    "guardrail replayed ({} looks, every {:.0} s of recorded time): would not have stopped ({})",
                    r.looks,
                    r.period_s,
                    r.decision.reason
                )?,
            }
            for g in &r.switched_back {
                outln!("replayed: {}", switched_back_line(g, rep))?;
            }
        }
        if out.recommend {
            outln!()?;
            if rep.recommend.commands.is_empty() {
                outln!("recommended: nothing to apply")?;
            }
            for (c, why) in rep.recommend.commands.iter().zip(&rep.recommend.evidence) {
                outln!("{c}    # {why}")?;
            }
        }
        Ok(())
    })
}

/// One look of `--analyze-prometheus --watch` at `now`: the report as one JSON line, or a line
/// naming the experiment and its hosts and a line per group with its conclusion.
pub(crate) fn look(rep: &Report, fleet: &Fleet, now: &str, json: bool) -> Result<()> {
    output::guard(|| {
        if json {
            let line = JsonReport {
                report: rep,
                stopped_by: None,
                guardrail: None,
                guardrail_switched_back: &[],
                guardrail_replay: None,
                fleet: Some(fleet),
            };
            outln!("{}", serde_json::to_string(&line)?)?;
            return Ok(());
        }
        outln!("{now}: experiment {} on {}{}", fleet.id, fleet.hosts_words(), fleet.running_words())?;
        for g in &rep.groups {
            outln!("  {}", g.conclusion)?;
        }
        for line in fleet.guardrail_lines(rep) {
            outln!("  {line}")?;
        }
        Ok(())
    })
}

/// The harm that sends a group back: `BBR (arm B) slower by +31% [+12%, +52%]`.
fn harm_words(g: &SwitchedBack, rep: &Report) -> String {
    let [pct, lo, hi] = g.worse_pct.map(fmt_pct);
    let arm = format!("{} (arm {})", rep.arms[g.worse_arm].arm, ["A", "B"][g.worse_arm]);
    // Sent back as the carrier of a harm to all flows, its own interval may hold zero: the
    // sentence says what was shown, and for whom.
    if g.worse_pct[1] > 0.0 {
        format!("{arm} slower by {pct} [{lo}, {hi}]")
    } else {
        format!("{arm} slower for all flows, a harm these clients carry ({pct} [{lo}, {hi}] for them alone)")
    }
}

/// One group the guardrail sent back, in words: which, when, and the numbers that did it.
fn switched_back_line(g: &SwitchedBack, rep: &Report) -> String {
    let why = harm_words(g, rep);
    format!(
        "guardrail: {} sent back to their status quo{}: {why}; its new connections got no arm from then on",
        g.group,
        g.at_s.map(|t| format!(" at {t:.0} s")).unwrap_or_default(),
    )
}

//! What the `experiment` command needs from the analysis: the guardrail check while it runs, and
//! the report, figure and recommendation at the end.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Serialize;

use super::{
    Observation,
    analysis::{self, GuardDecision, StopRule},
    plot, report,
};
use crate::{
    error::usage,
    output::{self, outln},
};

pub struct Output {
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub recommend: bool,
    pub requested_split_pct: u32,
    pub stopped_by: Option<String>,
}

/// Flows per arm before the guardrail judges (as `--guardrail-pct`'s help says).
const GUARDRAIL_MIN_FLOWS: usize = 30;

/// Whether the experiment must stop now (an arm clearly worse), or where the watch stands.
pub fn guardrail(obs: &[Observation], pct: f64) -> GuardDecision {
    let rule = StopRule { max_worse_pct: pct, min_flows: GUARDRAIL_MIN_FLOWS, ..StopRule::default() };
    analysis::guardrail(obs, &rule, &analysis::arm_names(obs))
}

/// The report on the flows so far: the same analysis at the end and while it runs.
pub fn report(obs: &[Observation], requested_split_pct: u32) -> (report::Report, analysis::Analysis) {
    let opts = analysis::Options { split_b: requested_split_pct as f64 / 100.0, ..analysis::Options::default() };
    let a = analysis::analyze(obs, &opts);
    (report::build(&a), a)
}

/// `--plot` must be writable before the experiment runs, not found unwritable after.
pub fn check_plot_path(p: &Path) -> Result<()> {
    if let Err(e) = crate::figure::check_path(p) {
        usage!("{e}");
    }
    Ok(())
}

/// `--json`: the report with how the run ended.
#[derive(Serialize)]
struct JsonReport<'a> {
    #[serde(flatten)]
    report: &'a report::Report,
    /// Null when it ran its course (duration or flow count reached).
    stopped_by: Option<&'a str>,
}

pub fn finish(obs: &[Observation], out: &Output) -> Result<()> {
    let (rep, a) = report(obs, out.requested_split_pct);
    if let Some(p) = &out.plot {
        crate::figure::write(p, &plot::svg(obs, &a, 6))?;
    }
    output::guard(|| {
        if out.json {
            outln!("{}", serde_json::to_string(&JsonReport { report: &rep, stopped_by: out.stopped_by.as_deref() })?)?;
            return Ok(());
        }
        if let Some(why) = &out.stopped_by {
            outln!("{why}")?;
        }
        outln!("{}", rep.render_text().trim_end())?;
        if out.recommend {
            outln!()?;
            if rep.recommend.commands.is_empty() {
                outln!("recommended: nothing to apply")?;
            }
            for c in &rep.recommend.commands {
                outln!("{c}")?;
            }
        }
        Ok(())
    })
}

//! What the `experiment` command needs from the analysis: the guardrail check while it runs, and
//! the report, figure and recommendation at the end.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::Observation;
use crate::error::usage;

pub struct Output {
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub recommend: bool,
    pub requested_split_pct: u32,
    pub stopped_by: Option<String>,
}

/// Why the experiment must stop now, if an arm is clearly worse.
pub fn guardrail(_obs: &[Observation], _pct: f64) -> Option<String> {
    None
}

/// `--plot` must be writable before the experiment runs, not found unwritable after.
pub fn check_plot_path(p: &Path) -> Result<()> {
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
    if !matches!(ext, "svg" | "png") {
        usage!("--plot {}: the figure is written as .svg or .png", p.display());
    }
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        usage!("--plot {}: directory {} does not exist", p.display(), dir.display());
    }
    Ok(())
}

pub fn finish(obs: &[Observation], out: &Output) -> Result<()> {
    let a = obs.iter().filter(|o| o.arm == 0).count();
    let b = obs.len() - a;
    crate::output::guard(|| {
        crate::output::outln!("flows: arm A {a}, arm B {b}; {}", out.stopped_by.as_deref().unwrap_or("completed"))?;
        Ok(())
    })
}

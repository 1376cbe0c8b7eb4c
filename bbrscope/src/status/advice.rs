//! The last `bbrscope advise`, kept beside bbrscope's record of changes (/var/lib/bbrscope) so
//! that `status` can show it: its findings, and the settings they were weighed against. A
//! finding is about the settings of its moment; status says which of them changed since (by
//! `apply` or by hand), since such a finding is no longer known to hold.

use std::{
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::{
    advise::{
        Advice,
        findings::{Knobs, Status},
    },
    apply::files,
};

pub(crate) const ADVICE: &str = "/var/lib/bbrscope/advice.json";

/// What is kept of an advice.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Kept {
    /// When it was given, Unix seconds.
    pub(crate) at: u64,
    /// How long flows were watched, seconds; the recording weighed, if it came from one.
    pub(crate) window_s: f64,
    pub(crate) recording: Option<String>,
    pub(crate) flows: usize,
    pub(crate) findings: Vec<KeptFinding>,
    pub(crate) settings: Vec<KeptSettings>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KeptFinding {
    /// The check's title, e.g. "window restart after idle".
    pub(crate) check: String,
    /// `found`, `none`, `too_few` or `not_weighed`.
    pub(crate) status: String,
    pub(crate) netns: String,
    pub(crate) group: String,
    pub(crate) evidence: String,
    pub(crate) change: Option<String>,
    /// Why no change is shown where the check would give one (its namespace is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) withheld: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KeptSettings {
    pub(crate) netns: String,
    pub(crate) netns_ino: Option<u32>,
    pub(crate) knobs: Knobs,
}

/// The kept advice as `status` shows it.
#[derive(Debug, Serialize)]
pub(crate) struct Shown {
    #[serde(flatten)]
    pub(crate) kept: Kept,
    pub(crate) age_s: u64,
    /// Per namespace, each setting that is not what the advice weighed ("NETNS: tcp_wmem A ->
    /// B"), or that the namespace is gone.
    pub(crate) changed_since: Vec<String>,
}

fn path() -> PathBuf {
    PathBuf::from(ADVICE)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Keeps `advice` (replacing the last one).
pub(crate) fn keep(root: &Path, advice: &Advice) -> Result<()> {
    let findings = advice
        .findings
        .iter()
        .map(|f| KeptFinding {
            check: f.title().to_string(),
            status: match f.status {
                Status::Found => "found",
                Status::None => "none",
                Status::TooFew => "too_few",
                Status::NotWeighed => "not_weighed",
            }
            .to_string(),
            netns: f.netns.clone(),
            group: f.group.clone(),
            evidence: f.evidence.clone(),
            change: f.change.clone(),
            withheld: f.withheld.clone(),
        })
        .collect();
    let settings = advice
        .settings
        .iter()
        .map(|s| KeptSettings { netns: s.netns.clone(), netns_ino: s.netns_ino, knobs: s.knobs.clone() })
        .collect();
    let kept = Kept {
        at: now(),
        window_s: advice.window_s,
        recording: advice.recording.clone(),
        flows: advice.flows,
        findings,
        settings,
    };
    files::write_atomic(root, &path(), &(serde_json::to_string_pretty(&kept)? + "\n"))
}

/// The kept advice, with what changed since; `None` if there is none. Refused (an error that
/// `status` shows as a warning) unless root alone could have written it.
pub(crate) fn load(root: &Path) -> Result<Option<Shown>, String> {
    let text = match files::read(root, &path()) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{ADVICE}: {e:#}")),
    };
    files::roots_alone(root, &path()).map_err(|why| format!("ignoring {ADVICE}: {why}"))?;
    let mut kept: Kept = serde_json::from_str(&text).map_err(|e| format!("ignoring {ADVICE}: not bbrscope's ({e})"))?;
    let mut changed_since = Vec::new();
    for s in &kept.settings {
        match crate::advise::knobs_of(s.netns_ino) {
            None => {
                changed_since.push(format!("{}: the namespace is gone", s.netns));
                // Its commands name a namespace that is not there (or, for advise's own, would
                // now change whichever namespace runs them): none is shown.
                for f in kept.findings.iter_mut().filter(|f| f.netns == s.netns && f.change.is_some()) {
                    f.change = None;
                    f.withheld = Some(crate::advise::findings::GONE.to_string());
                }
            }
            Some(now) => {
                changed_since.extend(now.changes_from(&s.knobs).into_iter().map(|c| format!("{}: {c}", s.netns)));
            }
        }
    }
    Ok(Some(Shown { age_s: now().saturating_sub(kept.at), kept, changed_since }))
}

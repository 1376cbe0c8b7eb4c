//! What `bbrscope experiment` is asked, checked: the one value cli/experiment.rs makes of the
//! flags before anything runs (as `apply` makes its request), so that the command then only goes
//! down into the experiment. Apart from [`super::setup`], which is what a run or a recording
//! keeps of it.

use std::{path::PathBuf, time::Duration};

use super::{
    decide::{PrimaryMetric, Rule},
    groups::PrefixList,
    setup::Design,
};
use crate::observe::kernel::loader::ExperimentSpec;

pub(crate) struct Request {
    /// `--delta` and `--min-effect-ms`.
    pub rule: Rule,
    /// `--prefix-list`'s groups, read and checked; `None` without it (an analysed recording then
    /// keeps its own).
    pub prefix_lists: Option<Vec<PrefixList>>,
    /// `--guardrail-pct`.
    pub guardrail_pct: f64,
    /// `--metric`; `None` without it (a run then answers in its design's, an analysed recording
    /// in its own).
    pub metric: Option<PrimaryMetric>,
    /// `--json`, `--plot`, `--recommend`.
    pub json: bool,
    pub plot: Option<PathBuf>,
    pub recommend: bool,
    pub mode: Mode,
}

pub(crate) enum Mode {
    /// Run an experiment on this host's new connections.
    Run(Box<Run>),
    /// `--analyze FILE...`: re-analyse a recording, or several of one experiment pooled, with
    /// `--arms` where they do not name them.
    Analyze { files: Vec<PathBuf>, arms: Option<[String; 2]> },
    /// `--analyze-prometheus URL --id NAME`: a running experiment's answer across its hosts, once
    /// or every `--watch` period.
    Fleet { source: super::fleet::Source, watch: Option<Looks> },
}

/// `--watch`: how often, and where its judgments are served (`--metrics-listen`).
pub(crate) struct Looks {
    pub every: std::time::Duration,
    pub serve: Option<std::net::SocketAddr>,
}

pub(crate) struct Run {
    /// What the kernel side is told: the arms, the split and the scope.
    pub spec: ExperimentSpec,
    /// How connections get their arms (`--design`): a switchback's blocks, whose arm new
    /// connections get follows (the spec's split is then the mixed blocks' split); the client's
    /// hashed arm; or each connection's own draw.
    pub design: Design,
    /// `--duration` (ten minutes without it), and `--flows`.
    pub duration: Duration,
    pub flows: Option<u64>,
    /// Off with `--no-guardrail`.
    pub guardrail: bool,
    pub record: Option<PathBuf>,
    pub headless: bool,
    /// `--metrics-listen`: the run's sums served to Prometheus.
    pub metrics: Option<Serve>,
}

/// Where an experiment serves its sums, and under which id.
pub(crate) struct Serve {
    pub listen: std::net::SocketAddr,
    pub id: String,
}

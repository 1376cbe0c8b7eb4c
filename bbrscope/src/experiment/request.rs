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
    pub(crate) rule: Rule,
    /// `--prefix-list`'s groups, read and checked; `None` without it (an analysed recording then
    /// keeps its own).
    pub(crate) prefix_lists: Option<Vec<PrefixList>>,
    /// `--guardrail-pct`.
    pub(crate) guardrail_pct: f64,
    /// `--metric`; `None` without it (a run then answers in its design's, an analysed recording
    /// in its own).
    pub(crate) metric: Option<PrimaryMetric>,
    /// `--json`, `--plot`, `--recommend`.
    pub(crate) json: bool,
    pub(crate) plot: Option<PathBuf>,
    pub(crate) recommend: bool,
    pub(crate) mode: Mode,
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
    pub(crate) every: std::time::Duration,
    pub(crate) serve: Option<std::net::SocketAddr>,
}

pub(crate) struct Run {
    /// What the kernel side is told: the arms, the split and the scope.
    pub(crate) spec: ExperimentSpec,
    /// How connections get their arms (`--design`): a switchback's blocks, whose arm new
    /// connections get follows (the spec's split is then the mixed blocks' split); the client's
    /// hashed arm; or each connection's own draw.
    pub(crate) design: Design,
    /// `--duration` (ten minutes without it), and `--flows`.
    pub(crate) duration: Duration,
    pub(crate) flows: Option<u64>,
    /// Off with `--no-guardrail`.
    pub(crate) guardrail: bool,
    pub(crate) record: Option<PathBuf>,
    pub(crate) headless: bool,
    /// `--metrics-listen`: the run's sums served to Prometheus.
    pub(crate) metrics: Option<Serve>,
    /// `--kernel-log`: the level the kernel programs log at (0: none).
    pub(crate) kernel_log: u8,
}

/// Where an experiment serves its sums, and under which id.
pub(crate) struct Serve {
    pub(crate) listen: std::net::SocketAddr,
    pub(crate) id: String,
}

//! The options of `bbrscope experiment`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use clap::Args;

use crate::{
    error::{UsageError, usage},
    experiment::{
        Arm,
        decide::{PrimaryMetric, Rule},
        fleet::Source,
        groups::{PREFIX_LIST_MAX_BYTES, PrefixList},
        request::{Looks, Mode, Request, Run, Serve},
        schedule::Schedule,
        setup::Design,
    },
    observe::{
        filter::Net,
        kernel::loader::{ExperimentSpec, MAX_EXPERIMENT_RANGES},
    },
    sys::{cc, cgroup},
};

#[derive(Debug, Args)]
pub struct ExperimentArgs {
    /// The two arms, A then B: algorithms (e.g. cubic,bbr; the same twice for an A/A check), each
    /// optionally with an initial window of N segments set on its connections (bbr,bbr+iw32).
    /// With --analyze: the arms of a recording that does not name them
    #[arg(long, value_name = "A,B", value_delimiter = ',', num_args = 1, required_unless_present_any = ["analyze", "analyze_prometheus"])]
    pub(crate) arms: Vec<String>,
    /// Percent of the experiment's connections given arm B (1-99; with --design switchback, in
    /// its mixed blocks; with --design client, of its clients)
    #[arg(long, value_name = "PCT", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=99))]
    pub(crate) split: u32,
    /// Percent of connections in scope that join the experiment at all (1-100); the rest keep
    /// the default algorithm: the limit on the share of traffic touched
    #[arg(long, value_name = "PCT", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) sample: u32,
    /// How connections get their arms: switchback (blocks of time in which every connection runs
    /// A, every connection B, or each draws: what would happen if everyone switched; the
    /// default, so that a recommendation rests on it), client (every connection of a client
    /// address on one arm, from a hash salted with --seed: B for whole clients against A for
    /// whole clients, where each client's bottleneck is its own link), host-switchback (a
    /// fleet's switchback in which each host runs its own randomized order of the rounds, salted
    /// with --host-id: what one host's uplink does if all of it switches, with the fleet's peaks
    /// falling on every kind of block alike) or per-connection (each draws one, so B runs beside
    /// A on the same bottlenecks: quicker, but it answers "B beside A")
    #[arg(long, value_name = "DESIGN", value_enum, default_value_t = DesignArg::Switchback)]
    pub(crate) design: DesignArg,
    /// With --design host-switchback: this host's name in the fleet, which salts its order of
    /// the rounds (default: the hostname; give each host its own)
    #[arg(long, value_name = "NAME")]
    pub(crate) host_id: Option<String>,
    /// The primary metric, declared up front: time-weighted (strata weighted by the completion
    /// time spent in them: where the time goes, larger responses and far clients; the
    /// per-connection design's default) or per-response (strata weighted by their responses:
    /// what the typical response sees, far less noisy on heavy-tailed traffic; the switchback's
    /// and the client design's default), or p50, p95, p99 (the group's percentile of completion time, each
    /// arm's bounded at every look; --design per-connection only, and not served as sums). With
    /// --analyze: instead of the recording's
    #[arg(long, value_name = "METRIC", value_enum)]
    pub(crate) metric: Option<MetricArg>,
    /// The switchback's blocks: how long each lasts (at least 1s; default 15s). The report says
    /// whether they fit the traffic and names the shortest blocks that would have
    #[arg(long, value_name = "TIME", value_parser = parse_span)]
    pub(crate) block: Option<Duration>,
    /// The switchback's burn-in: the start of each block whose new flows are left out of the
    /// analysis, while the previous block's flows still share the path (less than half a block;
    /// default 3s)
    #[arg(long, value_name = "TIME", value_parser = parse_span)]
    pub(crate) burn_in: Option<Duration>,
    /// The seed of a switchback's blocks' order, or of which clients get B with --design client
    /// (default: drawn at the start, printed and recorded)
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Only connections of the service on this local port (e.g. 443)
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) port: Option<u16>,
    /// Only connections of processes in this cgroup v2 directory or below it
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup: Option<PathBuf>,
    /// Only connections to clients in these ranges (repeat, or comma-separated)
    #[arg(long, value_name = "CIDR", value_delimiter = ',')]
    pub(crate) dst: Vec<Net>,
    /// Stop after this long (e.g. 90s, 10m, 2h; default 10m)
    #[arg(long, value_name = "TIME", value_parser = parse_span, conflicts_with = "flows")]
    pub(crate) duration: Option<Duration>,
    /// Stop after this many finished flows in the experiment
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) flows: Option<u64>,
    /// Do not stop early when an arm is clearly worse (the guardrail is on by default)
    #[arg(long)]
    pub(crate) no_guardrail: bool,
    /// The guardrail's margin: an arm that moved clients off their status quo (what each
    /// connection had before its arm, read by the kernel) and is slower than the other by more
    /// than this many percent for the clients of an RTT band or a --prefix-list group, with an
    /// always-valid 95% interval above zero (checked every 2 s), sends that group back to its
    /// status quo; a harm that is everyone's stops the run (exit status 3). With
    /// --analyze-prometheus: the same rule on every host's flows together
    #[arg(long, value_name = "PCT", default_value_t = 20.0)]
    pub(crate) guardrail_pct: f64,
    /// The smallest change in completion time that matters, percent: within it the arms are
    /// "no different"; a recommendation needs at least this much
    #[arg(long, value_name = "PCT", default_value_t = 5.0)]
    pub(crate) delta: f64,
    /// The smallest change per response that matters, milliseconds: a recommendation needs at
    /// least this much too
    #[arg(long, value_name = "MS", default_value_t = 5.0)]
    pub(crate) min_effect_ms: f64,
    /// Client groups of your own: a file of `LABEL CIDR [CIDR...]` lines (e.g. a country's
    /// ranges); each is judged, and recommended as routes. At most 100 groups, 10,000 prefixes
    /// and 4 MiB; labels of up to 64 printable characters
    #[arg(long, value_name = "FILE")]
    pub(crate) prefix_list: Option<PathBuf>,
    /// Also write every record of the experiment's flows as NDJSON (re-analyse with --analyze)
    #[arg(long, value_name = "FILE")]
    pub(crate) record: Option<PathBuf>,
    /// Serve the experiment's sums at /metrics for Prometheus while it runs: per arm, RTT band
    /// and response size, the flows that ran their arm, Σ ln T, Σ (ln T)² and Σ T, and a
    /// switchback's per round and block (sums that pool across hosts given the same --seed); an
    /// address and port, or a port alone on loopback (e.g. 9581). With --analyze-prometheus
    /// --watch: the watch's judgments, for a dashboard
    #[arg(long, value_name = "ADDR:PORT", value_parser = super::parse_listen, conflicts_with = "analyze")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// The experiment's id in those series, the same on every host of one fleet experiment:
    /// letters, digits and `_.:-`, at most 64 (default: the arms, e.g. cubic_vs_bbr); with
    /// --analyze-prometheus, the experiment to judge
    #[arg(long, value_name = "NAME")]
    pub(crate) id: Option<String>,
    /// Judge a running experiment across every host whose --metrics-listen sums this Prometheus
    /// scrapes (http://HOST:PORT; Thanos and Mimir serve the same API), with --id; per-connection
    /// and switchback designs, all flows and each RTT band, and the guardrail on every host's
    /// flows together (exit status 3 when it says stop: end the run on every host); no root needed
    #[arg(long, value_name = "URL", requires = "id", conflicts_with_all = ["analyze", "port", "cgroup", "dst", "duration", "flows", "record", "design", "host_id", "block", "burn_in", "seed", "plot", "recommend", "headless"])]
    pub(crate) analyze_prometheus: Option<String>,
    /// With --analyze-prometheus: more label matchers for the hosts to pool, e.g. 'job="edge",dc="fra"'
    #[arg(long, value_name = "MATCHERS", requires = "analyze_prometheus")]
    pub(crate) hosts: Option<String>,
    /// With --analyze-prometheus: also answer each group of hosts that share a value of this
    /// label of their series (a target label Prometheus adds, e.g. dc, or instance for each host)
    #[arg(long, value_name = "LABEL", requires = "analyze_prometheus")]
    pub(crate) by_host: Option<String>,
    /// With --analyze-prometheus: a header line every query sends, 'NAME: VALUE' (e.g.
    /// 'X-Scope-OrgID: edge' for a Mimir tenant), or @FILE for the lines of a file (a token kept
    /// out of the process list: 'Authorization: Bearer ...'); repeatable
    #[arg(long, value_name = "HEADER", requires = "analyze_prometheus")]
    pub(crate) prometheus_header: Vec<String>,
    /// With --analyze-prometheus: a host whose experiment ended (stopped by its guardrail, its
    /// time up, ended) within TIME counts with its last sums; give each run its own --id
    #[arg(long, value_name = "TIME", value_parser = parse_span, default_value = "1h", requires = "analyze_prometheus")]
    pub(crate) lookback: Duration,
    /// With --analyze-prometheus: judge again every TIME (e.g. 15s, your scrape interval) until
    /// Ctrl-C, a line per group each time (--json: a report per line); the intervals hold at
    /// every look
    #[arg(long, value_name = "TIME", value_parser = parse_span, requires = "analyze_prometheus")]
    pub(crate) watch: Option<Duration>,
    /// Re-analyse a `--record` file instead of running an experiment, and replay the live
    /// guardrail's checks on it in completion order; no root needed. Several files (the same
    /// experiment on several hosts or scopes) are pooled, as --analyze-prometheus pools their
    /// sums. (A `bbrscope stream` capture taken beside an experiment has no arms: record with
    /// --record.)
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["port", "cgroup", "dst", "duration", "flows", "record", "design", "host_id", "block", "burn_in", "seed"])]
    pub(crate) analyze: Vec<PathBuf>,
    /// The report as one JSON object on stdout
    #[arg(long)]
    pub(crate) json: bool,
    /// Per-group completion-time CDFs of the two arms (.svg or .png)
    #[arg(long, value_name = "FILE")]
    pub(crate) plot: Option<PathBuf>,
    /// Print the `bbrscope apply` commands the evidence supports
    #[arg(long)]
    pub(crate) recommend: bool,
    /// No live display (by default: the dashboard on a terminal, opening on the experiment's
    /// view; a progress line every 10 s on stderr when stdout is not a terminal)
    #[arg(long, conflicts_with = "analyze")]
    pub(crate) headless: bool,
    #[command(flatten)]
    pub(crate) kernel_log: super::KernelLogArg,
}

/// An experiment's id as its series carry it: 1 to 64 letters, digits and `_.:-` (a label
/// value a query can name without escaping).
fn checked_id(id: String) -> Result<String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || "_.:-".contains(c);
    if id.is_empty() || id.len() > 64 || !id.chars().all(fits) {
        usage!("--id '{id}': an experiment's id is 1 to 64 letters, digits and `_.:-` (e.g. edge_bbr_2026_11)");
    }
    Ok(id)
}

/// "90", "90s", "10m", "2h".
fn parse_span(s: &str) -> Result<Duration, String> {
    crate::units::duration_up_to(s, Duration::from_hours(720), "30 days")
}

/// Ten minutes, unless `--duration` or `--flows` says otherwise.
const DEFAULT_DURATION: Duration = Duration::from_secs(600);
/// The labels of the experiment's own series: a host group cannot be one of them.
const OWN_LABELS: [&str; 12] = [
    "id",
    "arm",
    "cc",
    "rtt_band",
    "size",
    "prefix_lists",
    "prefix_list",
    "round",
    "block",
    "reason",
    "watched",
    "status_quo",
];

/// A switchback's blocks and their burn-in, unless `--block` and `--burn-in` say otherwise.
const DEFAULT_BLOCK: Duration = Duration::from_secs(15);
const DEFAULT_BURN_IN: Duration = Duration::from_secs(3);

/// `--metric`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MetricArg {
    /// Strata weighted by the completion time spent in them
    TimeWeighted,
    /// Strata weighted by their responses
    PerResponse,
    /// The median completion time (per-connection designs)
    P50,
    /// The 95th percentile of completion time (per-connection designs)
    P95,
    /// The 99th percentile of completion time (per-connection designs)
    P99,
}

/// `--design`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DesignArg {
    /// Each connection draws its arm: B beside A
    PerConnection,
    /// Blocks of time: everyone on A, everyone on B, each its own draw: B for everyone
    Switchback,
    /// A switchback whose order of blocks each host draws for itself: B for all of a host
    HostSwitchback,
    /// Every connection of a client address on its client's hashed arm: B for whole clients
    Client,
}

impl ExperimentArgs {
    /// The experiment asked for, every flag checked before anything is created or attached:
    /// the rule and the prefix lists always, the arms and the scope for a run.
    pub(crate) fn request(&self) -> Result<Request> {
        let rule = self.rule()?;
        let prefix_lists = self.prefix_lists()?;
        if self.kernel_log.level.is_some() && (!self.analyze.is_empty() || self.analyze_prometheus.is_some()) {
            usage!(
                "--kernel-log is a live run's (it reads the kernel programs bbrscope loads): drop it, or drop --analyze"
            );
        }
        let mode = match self.analyze.as_slice() {
            [] if self.analyze_prometheus.is_some() => Mode::Fleet {
                source: self.fleet()?,
                watch: self.watch.map(|every| Looks { every, serve: self.metrics_listen }),
            },
            [] => Mode::Run(Box::new(self.run()?)),
            files => Mode::Analyze {
                files: files.to_vec(),
                arms: match self.arms.as_slice() {
                    [a, b] => Some([a.clone(), b.clone()]),
                    _ => None,
                },
            },
        };
        Ok(Request {
            rule,
            prefix_lists: self.prefix_list.is_some().then_some(prefix_lists),
            guardrail_pct: self.guardrail_pct,
            metric: self.metric.map(|m| match m {
                MetricArg::TimeWeighted => PrimaryMetric::TimeWeighted,
                MetricArg::PerResponse => PrimaryMetric::PerResponse,
                MetricArg::P50 => PrimaryMetric::P50,
                MetricArg::P95 => PrimaryMetric::P95,
                MetricArg::P99 => PrimaryMetric::P99,
            }),
            json: self.json,
            plot: self.plot.clone(),
            recommend: self.recommend,
            mode,
        })
    }

    /// A live run: the kernel's spec (with the client design's salt) and the design, checked.
    fn run(&self) -> Result<Run> {
        let mut spec = self.spec()?;
        let design = self.design()?;
        if let Some(q) = self.quantile_metric() {
            if design != Design::PerConnection {
                usage!(
                    "--metric {q} needs --design per-connection: its bounds take each flow as a draw of its own, and a \
                     switchback's blocks or a client's flows are not (e.g. --design per-connection --metric {q})"
                );
            }
            if self.metrics_listen.is_some() {
                usage!(
                    "--metric {q} with --metrics-listen: a quantile is not a sum and does not add across hosts; serve \
                     the sums of --metric per-response or time-weighted"
                );
            }
        }
        if let Design::Client { salt } = design {
            spec.salt = salt;
        }
        Ok(Run {
            spec,
            design,
            duration: self.duration.unwrap_or(DEFAULT_DURATION),
            flows: self.flows,
            guardrail: !self.no_guardrail,
            record: self.record.clone(),
            headless: self.headless,
            metrics: self.metrics()?,
            kernel_log: self.kernel_log.level(),
        })
    }

    /// `--metrics-listen` and `--id`, checked.
    fn metrics(&self) -> Result<Option<Serve>> {
        let Some(listen) = self.metrics_listen else {
            if self.id.is_some() {
                usage!("--id names the experiment in --metrics-listen's series or for --analyze-prometheus: give one");
            }
            return Ok(None);
        };
        let id = checked_id(self.id.clone().unwrap_or_else(|| self.arms.join("_vs_").replace('+', "_")))?;
        Ok(Some(Serve { listen, id }))
    }

    /// `--analyze-prometheus`, `--id`, `--hosts` and `--by-host`, checked.
    fn fleet(&self) -> Result<Source> {
        if let Some(q) = self.quantile_metric() {
            usage!(
                "--metric {q} with --analyze-prometheus: the fleet's answer is built of sums, and a quantile is not one"
            );
        }
        let url = self.analyze_prometheus.clone().unwrap_or_default();
        if !url.starts_with("http://") {
            usage!("--analyze-prometheus '{url}': a Prometheus API's http:// URL (e.g. http://127.0.0.1:9090)");
        }
        let id = checked_id(self.id.clone().unwrap_or_default())?;
        if self.watch.is_some_and(|w| w < Duration::from_secs(1)) {
            usage!("--watch: at least 1s between looks (Prometheus scrapes every 15s by default)");
        }
        if self.metrics_listen.is_some() && self.watch.is_none() {
            usage!("--metrics-listen with --analyze-prometheus serves a watch's judgments: add --watch (e.g. 15s)");
        }
        if let Some(h) = &self.hosts
            && (h.contains(['{', '}']) || !h.contains(['=', '~']))
        {
            usage!("--hosts '{h}': label matchers without braces, e.g. 'job=\"edge\",dc=~\"fra|ams\"'");
        }
        if let Some(by) = &self.by_host
            && (by.is_empty()
                || by.starts_with(|c: char| c.is_ascii_digit())
                || !by.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                || OWN_LABELS.contains(&by.as_str()))
        {
            usage!(
                "--by-host '{by}': a label of the hosts' series (letters, digits and _, e.g. dc or instance), not one \
                 of the experiment's own ({})",
                OWN_LABELS.join(", ")
            );
        }
        Ok(Source {
            url: url.trim_end_matches('/').to_string(),
            id,
            hosts: self.hosts.clone(),
            lookback: self.lookback,
            by: self.by_host.clone(),
            headers: self.prometheus_headers()?,
        })
    }

    /// `--prometheus-header`s as the lines each query sends: `NAME: VALUE` each, or the lines of
    /// `@FILE` (blank lines skipped); a name of token characters, nothing that would end the line.
    fn prometheus_headers(&self) -> Result<Vec<String>> {
        let mut lines = Vec::new();
        for given in &self.prometheus_header {
            match given.strip_prefix('@') {
                Some(path) => {
                    let text = std::fs::read_to_string(path)
                        .map_err(|e| crate::error::UsageError::new(format!("--prometheus-header @{path}: {e}")))?;
                    lines.extend(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string));
                }
                None => lines.push(given.trim().to_string()),
            }
        }
        for line in &lines {
            let name = line.split_once(':').map(|(n, _)| n);
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if !name.is_some_and(|n| !n.is_empty() && n.chars().all(token)) || line.chars().any(char::is_control) {
                // Named by its name alone: the value may be a secret.
                let shown = match name {
                    Some(n) => format!("'{}: …'", n.escape_debug()),
                    None => "a line with no ':'".into(),
                };
                usage!(
                    "--prometheus-header {shown}: not a header line NAME: VALUE (e.g. 'X-Scope-OrgID: edge'), nor @FILE \
                     of them"
                );
            }
        }
        Ok(lines)
    }

    /// `--delta` and `--min-effect-ms` as the decision's rule.
    fn rule(&self) -> Result<Rule> {
        if !(self.delta > 0.0 && self.delta < 100.0) {
            usage!("--delta must be a percentage above 0 and below 100 (e.g. 5): the smallest change that matters");
        }
        if !(self.min_effect_ms >= 0.0 && self.min_effect_ms.is_finite()) {
            usage!("--min-effect-ms must be 0 or more milliseconds (e.g. 5)");
        }
        Ok(Rule { delta: self.delta / 100.0, min_abs_s: self.min_effect_ms / 1e3, ..Rule::default() })
    }

    /// `--prefix-list`'s groups, read and checked.
    fn prefix_lists(&self) -> Result<Vec<PrefixList>> {
        use std::io::Read as _;
        let Some(p) = &self.prefix_list else { return Ok(Vec::new()) };
        // Bounded: /dev/zero or a huge file is refused after this much, not read until memory
        // runs out.
        let mut bytes = Vec::new();
        if let Err(e) = std::fs::File::open(p).and_then(|f| f.take(PREFIX_LIST_MAX_BYTES + 1).read_to_end(&mut bytes)) {
            usage!("--prefix-list {}: {e}", p.display());
        }
        if bytes.len() as u64 > PREFIX_LIST_MAX_BYTES {
            usage!("--prefix-list {}: larger than {} MiB: not a prefix list", p.display(), PREFIX_LIST_MAX_BYTES >> 20);
        }
        let Ok(text) = String::from_utf8(bytes) else {
            usage!("--prefix-list {}: not text (UTF-8)", p.display());
        };
        match PrefixList::parse(&text) {
            Ok(l) if !l.is_empty() => Ok(l),
            Ok(_) => usage!("--prefix-list {}: no groups (one `LABEL CIDR [CIDR...]` per line)", p.display()),
            Err(e) => usage!("--prefix-list {}: {e}", p.display()),
        }
    }

    /// What the kernel side is told: the arms (each an available algorithm), the split and
    /// the scope, checked.
    fn spec(&self) -> Result<ExperimentSpec> {
        let [a, b] = self.arms.as_slice() else {
            usage!("--arms takes two arms, A then B (e.g. --arms cubic,bbr or --arms bbr,bbr+iw32)");
        };
        let available = cc::available()?;
        let mut arms = Vec::new();
        for label in [a, b] {
            let arm = Arm::parse(label).map_err(UsageError::new)?;
            if !available.contains(&arm.cc) {
                usage!("--arms: '{}' is not an available algorithm (available: {})", arm.cc, available.join(", "));
            }
            arms.push(arm);
        }
        let arms: [Arm; 2] = arms.try_into().expect("two arms");
        if !(self.guardrail_pct > 0.0 && self.guardrail_pct <= 1000.0) {
            usage!("--guardrail-pct must be a percentage above 0 (e.g. 20)");
        }
        if self.dst.len() > MAX_EXPERIMENT_RANGES {
            usage!(
                "--dst: {} ranges, the kernel's scope holds at most {}: give wider prefixes",
                self.dst.len(),
                MAX_EXPERIMENT_RANGES
            );
        }
        if let Some(p) = &self.plot {
            crate::experiment::print::check_plot_path(p)?;
        }
        let pins = pinned_cgroup_programs();
        if !pins.is_empty() {
            usage!(
                "bbrscope apply --cgroup programs are in place ({}): they set the algorithm of new connections too, \
                 so the experiment's arms would not be what was assigned; revert them first (bbrscope revert --cgroup PATH)",
                pins.join(", ")
            );
        }
        let cgroup = self.cgroup.as_deref().map(cgroup::resolve).transpose()?;
        Ok(ExperimentSpec {
            arms,
            split_pct: self.split,
            sample_pct: self.sample,
            port: self.port,
            cgroup,
            dst: self.dst.iter().map(|n| n.0).collect(),
            salt: 0,
        })
    }

    /// `--metric`'s name when it asks for a quantile (`p95`).
    fn quantile_metric(&self) -> Option<&'static str> {
        match self.metric? {
            MetricArg::TimeWeighted | MetricArg::PerResponse => None,
            MetricArg::P50 => Some("p50"),
            MetricArg::P95 => Some("p95"),
            MetricArg::P99 => Some("p99"),
        }
    }

    /// `--design`, with a switchback's blocks or a client design's salt, checked: the blocks'
    /// flags only with a switchback, `--seed` only where there is something to seed.
    fn design(&self) -> Result<Design> {
        let seed = || match self.seed {
            Some(s) => Ok(s),
            None => os_seed().context("drawing the experiment's seed"),
        };
        let name = match self.design {
            DesignArg::Switchback => "switchback",
            DesignArg::HostSwitchback => "host-switchback",
            DesignArg::Client => "client",
            DesignArg::PerConnection => "per-connection",
        };
        if self.host_id.is_some() && self.design != DesignArg::HostSwitchback {
            usage!(
                "--host-id names a host of --design host-switchback, and --design {name} draws no host's blocks: drop \
                 --host-id, or give --design host-switchback"
            );
        }
        if !matches!(self.design, DesignArg::Switchback | DesignArg::HostSwitchback) {
            for (given, flag) in [(self.block.is_some(), "--block"), (self.burn_in.is_some(), "--burn-in")] {
                if given {
                    usage!("{flag} is a switchback's, and --design {name} has no blocks: drop one of them");
                }
            }
        }
        match self.design {
            DesignArg::PerConnection => {
                if self.seed.is_some() {
                    usage!(
                        "--seed is a switchback's or --design client's, and --design per-connection draws each connection's arm unseeded: drop one of them"
                    );
                }
                return Ok(Design::PerConnection);
            }
            DesignArg::Client => return Ok(Design::Client { salt: seed()? }),
            DesignArg::Switchback | DesignArg::HostSwitchback => {}
        }
        let block = self.block.unwrap_or(DEFAULT_BLOCK);
        if block < Duration::from_secs(1) {
            usage!("--block must be at least 1s (e.g. --block 15s): a block holds new flows, a burn-in and the switch");
        }
        let burn_in = self.burn_in.unwrap_or(DEFAULT_BURN_IN);
        if burn_in * 2 >= block {
            usage!(
                "--burn-in {} must be less than half of --block {} (e.g. --block 15s --burn-in 3s){}",
                format_secs(burn_in),
                format_secs(block),
                if self.burn_in.is_none() { ": 3s is the default burn-in, give a shorter one" } else { "" }
            );
        }
        let host = match self.design {
            DesignArg::HostSwitchback => Some(Schedule::host_salt(&self.host_name()?)),
            _ => None,
        };
        Ok(Design::Switchback(Schedule {
            block_s: block.as_secs_f64(),
            burn_in_s: burn_in.as_secs_f64(),
            seed: seed()?,
            host,
        }))
    }

    /// A host-level switchback's name for this host: `--host-id`, else the hostname. A fleet's
    /// hosts must have different names (two of the same name run the same blocks).
    fn host_name(&self) -> Result<String> {
        let name = match &self.host_id {
            Some(id) => id.clone(),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname")
                .context("reading this host's name for --design host-switchback (give --host-id NAME)")?
                .trim()
                .to_string(),
        };
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            usage!("--host-id '{}': a name of 1 to 255 printable characters, e.g. web-3", name.escape_debug());
        }
        Ok(name)
    }
}

/// `2.5s`.
fn format_secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// A seed no one chose: eight bytes of the kernel's randomness.
fn os_seed() -> Result<u64> {
    use std::io::Read as _;
    let mut bytes = [0; 8];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Links `bbrscope apply --cgroup` pinned (they set algorithms on new connections).
fn pinned_cgroup_programs() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(crate::apply::cgroup::PIN_DIR) else { return Vec::new() };
    dir.flatten().map(|e| e.path().display().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans() {
        assert_eq!(parse_span("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_span("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_span("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_span("5"), Ok(Duration::from_secs(5)));
        for bad in ["0", "-1m", "soon", "1e300", "10d"] {
            assert!(parse_span(bad).is_err(), "{bad}");
        }
    }
}

//! Loads bbrscope's kernel programs with this kernel's layout, attaches them, and hands out the
//! ring buffer and counters. Dropping the [`Observer`] detaches everything (the links are plain
//! file descriptors: the kernel also detaches them if the process dies).

use std::{
    os::fd::{AsFd, BorrowedFd},
    path::Path,
    time::Duration,
};

use anyhow::{Context as _, Result, ensure};
use aya::{
    Ebpf, EbpfLoader,
    maps::{
        Array, Map, MapData, PerCpuArray, RingBuf,
        lpm_trie::{Key, LpmTrie},
    },
    programs::{CgroupAttachMode, RawTracePoint, SockOps},
};
use bbrscope_common::{CC_NAME_LEN, Config, Filter, config_flags, counter, experiment_flags, filter_flags, hold};
use tokio::io::unix::AsyncFd;

use super::{
    btf::{self, Btf},
    hooks,
    layout::Layout,
};
use crate::{error::UsageError, observe::filter::FilterSpec, sys::hz};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bbrscope"));

/// Which flows that only receive data are observed (a flow that sent data always is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receivers {
    No,
    /// Sampled as their data arrives (`--receivers`): only tcp_probe fires for them, so this
    /// takes the tracepoint path.
    Sampled,
    /// Each reported at its close, with its owner and namespace, on the sock_ops path (and
    /// sampled where its send-path callbacks run): what `advise` needs of them.
    AtClose,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub interval: Duration,
    pub receivers: Receivers,
    pub filter: FilterSpec,
    /// Capacity of the in-kernel flow table (LRU).
    pub max_flows: u32,
    /// Ring buffer size in bytes (a power of two, multiple of the page size).
    pub ring_bytes: u32,
    /// Retransmit and congestion-state records per flow and sample interval before they are
    /// only counted.
    pub events_per_interval: u32,
    /// BTF to use instead of the running kernel's (for kernels built without it).
    pub btf: Option<std::path::PathBuf>,
    /// Measure the programs' own run time (kernel BPF statistics) while running.
    pub bpf_stats: bool,
    /// Which kernel path observes flows.
    pub path: PathChoice,
    /// Owner filters (userspace, sock_ops path).
    pub owner: crate::observe::filter::OwnerFilter,
    /// `bbrscope experiment`: assign new connections in scope to two algorithms at random.
    pub experiment: Option<ExperimentSpec>,
    /// `--kernel-log`: the most verbose aya-log level the programs send (0: none).
    pub kernel_log: u8,
}

/// One arm: an algorithm, and optionally the connection's initial congestion window, which
/// the kernel program sets before any data is sent (`bbr+iw32`: BBR starting from 32 segments).
/// Reports name an arm by its label, the way it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arm {
    pub(crate) cc: String,
    pub(crate) iw: Option<u32>,
}

impl Arm {
    /// `CC` or `CC+iwN`; the error says what is wrong (the algorithm is checked elsewhere).
    pub fn parse(label: &str) -> Result<Arm, String> {
        let (cc, iw) = match label.split_once('+') {
            None => (label, None),
            Some((cc, rest)) => {
                let n = rest.strip_prefix("iw").and_then(|n| n.parse::<u32>().ok());
                match n {
                    Some(n) if (1..=crate::sys::route::Window::MAX).contains(&n) => (cc, Some(n)),
                    _ => {
                        return Err(format!(
                            "--arms: '{label}': an arm is an algorithm, optionally with an initial window of 1 to {} \
                             segments, e.g. bbr or bbr+iw32",
                            crate::sys::route::Window::MAX
                        ));
                    }
                }
            }
        };
        Ok(Arm { cc: cc.to_string(), iw })
    }

    /// The algorithm part of an arm's label (`bbr` of `bbr+iw32`).
    pub(crate) fn cc_of(label: &str) -> &str {
        label.split_once('+').map_or(label, |(cc, _)| cc)
    }

    /// The initial window an arm's label sets, if any.
    pub(crate) fn iw_of(label: &str) -> Option<u32> {
        Arm::parse(label).ok()?.iw
    }
}

impl std::fmt::Display for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.iw {
            Some(iw) => write!(f, "{}+iw{iw}", self.cc),
            None => f.write_str(&self.cc),
        }
    }
}

/// What `bbrscope experiment` asks of the kernel program.
#[derive(Clone, Debug, PartialEq)]
pub struct ExperimentSpec {
    /// Arm A's and arm B's algorithm and initial window.
    pub arms: [Arm; 2],
    /// Percent of connections in scope given arm B.
    pub split_pct: u32,
    /// Percent of connections in scope that join the experiment (the rest are untouched).
    pub sample_pct: u32,
    pub port: Option<u16>,
    pub cgroup: Option<crate::sys::cgroup::Cgroup>,
    /// Destination ranges; empty: any destination.
    pub dst: Vec<ipnet::IpNet>,
    /// The client-clustered design's salt (its `--seed`; 0 in the other designs, which do not
    /// read it).
    pub salt: u64,
}

/// `--observer`: how bbrscope hooks into the TCP stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PathChoice {
    /// sock_ops where the kernel allows it, else tracepoints.
    #[default]
    Auto,
    /// A sock_ops program on the cgroup v2 root with socket-local storage: every flow from
    /// connect/accept to close, in every TCP state.
    Sockops,
    /// Raw tracepoints (tcp_probe) with a flow table: established senders only.
    Tracepoint,
    /// For `cargo xtask bench`: the sock_ops path's callbacks with an empty program (the floor).
    #[value(hide = true)]
    FloorSockops,
    /// For `cargo xtask bench`: the sock_ops path's callbacks with a program that only looks up
    /// each socket's storage and counts the ACK (what any per-socket observer must do).
    #[value(hide = true)]
    LookupSockops,
    /// For `cargo xtask bench`: an empty program on tcp_probe (the floor).
    #[value(hide = true)]
    FloorTracepoint,
}

/// The path in use, as `stats` and `status` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ObserverPath {
    Sockops,
    Tracepoint,
    FloorSockops,
    LookupSockops,
    FloorTracepoint,
}

impl ObserverPath {
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            ObserverPath::Sockops => "sockops",
            ObserverPath::Tracepoint => "tracepoint",
            ObserverPath::FloorSockops => "floor-sockops",
            ObserverPath::LookupSockops => "lookup-sockops",
            ObserverPath::FloorTracepoint => "floor-tracepoint",
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            interval: Duration::from_millis(100),
            receivers: Receivers::No,
            filter: FilterSpec::default(),
            max_flows: 65536,
            ring_bytes: 4 << 20,
            events_per_interval: 64,
            btf: None,
            bpf_stats: false,
            path: PathChoice::Auto,
            owner: crate::observe::filter::OwnerFilter::default(),
            experiment: None,
            kernel_log: 0,
        }
    }
}

pub struct Observer {
    ebpf: Ebpf,
    ring: AsyncFd<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    pub(crate) layout: Layout,
    /// Things this kernel lacks, in words, for the user.
    pub(crate) degraded: Vec<String>,
    pub(crate) path: ObserverPath,
    pub(crate) sample_clock: SampleClock,
    /// The program on the per-ACK path, for its run-time statistics.
    per_ack_program: &'static str,
    /// An experiment's assignment, until the experiment takes it ([`Observer::take_assignment`]).
    assignment: Option<Assignment>,
    /// `--kernel-log`'s reader, drained with the records.
    kernel_log: Option<aya_log::EbpfLogger<super::log::Lines>>,
}

impl Observer {
    pub fn start(opts: &Options) -> Result<Self> {
        let btf = match &opts.btf {
            Some(path) => {
                let btf = Btf::from_file(path, None)
                    .map_err(|e| UsageError::new(format!("--btf {}: {e:#}", path.display())))?;
                btf.check_socket_sizes(Path::new(btf::SLAB)).map_err(|e| {
                    UsageError::new(format!(
                        "--btf {} does not describe the running kernel (Linux {}): {e}; give this kernel's \
                         own BTF (e.g. from its vmlinux: `pahole --btf_encode_detached FILE vmlinux`)",
                        path.display(),
                        crate::sys::kconfig::release()
                    ))
                })?;
                btf
            }
            None => with_cc_modules(Btf::kernel().map_err(|e| {
                UsageError::new(format!(
                    "kernel BTF is unavailable ({e:#}): bbrscope needs {} (CONFIG_DEBUG_INFO_BTF=y, \
                     standard on Ubuntu 20.10+, Debian 11+, RHEL 8.2+) or a BTF file for this kernel \
                     given with --btf",
                    btf::VMLINUX
                ))
            })?)?,
        };
        let layout = Layout::from_btf(&btf)?;
        let mut degraded = Vec::new();
        if !layout.missing.is_empty() {
            degraded.push(format!("kernel lacks {}: reported as null", layout.missing.join(", ")));
        }
        if layout.bbr.is_none() {
            // BBR as a module, on a kernel without module BTF (before 5.11, or
            // CONFIG_DEBUG_INFO_BTF_MODULES off): its private state cannot be decoded.
            degraded.push(
                "no type information for BBR's state (a module, and this kernel has no module BTF): \
                 the `bbr` fields (mode, bandwidth, gains) of bbr flows are null"
                    .into(),
            );
        }

        let hooks = hooks::plan(|tp| btf.tracepoint_args(tp))?;
        degraded.extend(hooks.degraded);
        let mut flags = layout.flags | hooks.flags;
        let sockops = sockops_helpers();
        flags |= sockops.flags;
        if let Some(why) = &sockops.unavailable {
            // Refused before anything is loaded where only the sock_ops path can do what was
            // asked; a plain `stream` or `top` falls back to tracepoints instead (below).
            let needs = if opts.experiment.is_some() {
                Some("an experiment needs the sockops observer")
            } else if opts.path == PathChoice::Sockops {
                Some("--observer sockops")
            } else if !opts.owner.is_empty() {
                Some("--comm, --pid and --netns need the sockops observer")
            } else {
                None
            };
            if let Some(what) = needs {
                return Err(UsageError::new(format!("{what}: {why}")).into());
            }
        }
        if opts.receivers != Receivers::No {
            flags |= config_flags::RECEIVERS;
        }

        let config = Config {
            interval_ns: opts.interval.as_nanos() as u64,
            flags,
            events_per_interval: opts.events_per_interval,
            wake_bytes: opts.ring_bytes / WAKE_FRACTION,
            _pad: 0,
            sockops_period: sockops.clock.period(opts.interval),
            filter: kernel_filter(&opts.filter, &layout)?,
            sock: layout.sock,
            fields: layout.fields,
            span: layout.span,
            experiment: experiment_config(opts.experiment.as_ref()),
        };
        let mut ebpf = EbpfLoader::new()
            .override_global("CONFIG", &config, true)
            .override_global(aya_log::LEVEL, &opts.kernel_log, true)
            .map_max_entries(super::log::RING, super::log::ring_bytes(opts.kernel_log))
            .map_max_entries("FLOWS", opts.max_flows)
            .map_max_entries("EVENTS", opts.ring_bytes)
            .load(OBJECT)
            .context("loading bbrscope's kernel programs")?;

        if let Some(exp) = &opts.experiment {
            fill_experiment_ranges(&mut ebpf, &exp.dst)?;
        }
        let chosen = match (choose_path(opts), &sockops.unavailable) {
            (Ok(ObserverPath::Sockops), Some(why)) => Err(format!(
                "{why}: using tracepoints, which see only established senders (no short flows, no CLOSE_WAIT \
                 senders, no flow summaries)"
            )),
            (c, _) => c,
        };
        let sockops_owner_note = sockops.owner_note;
        let path = match chosen {
            Err(why) => {
                degraded.push(why);
                attach_tracepoints(&mut ebpf, &hooks.attach)?;
                ObserverPath::Tracepoint
            }
            Ok(ObserverPath::Tracepoint) => {
                attach_tracepoints(&mut ebpf, &hooks.attach)?;
                ObserverPath::Tracepoint
            }
            Ok(bench @ (ObserverPath::FloorTracepoint | ObserverPath::FloorSockops | ObserverPath::LookupSockops)) => {
                attach_bench(&mut ebpf, bench)?;
                bench
            }
            Ok(ObserverPath::Sockops) => match attach_sockops(&mut ebpf, &hooks.attach) {
                Ok(()) => ObserverPath::Sockops,
                Err(e) if opts.path == PathChoice::Auto && opts.experiment.is_none() => {
                    degraded.push(format!(
                        "the sock_ops path is unavailable ({e:#}): using tracepoints, which see only \
                         established senders (no short flows, no CLOSE_WAIT senders, no flow summaries)"
                    ));
                    attach_tracepoints(&mut ebpf, &hooks.attach)?;
                    ObserverPath::Tracepoint
                }
                Err(e) => return Err(e.context("--observer sockops")),
            },
        };
        if path == ObserverPath::Sockops
            && let Some(note) = sockops_owner_note
        {
            degraded.push(note);
        }
        let per_ack_program = path.per_ack_program();
        let sample_clock = match path {
            ObserverPath::Tracepoint => SampleClock::Monotonic { why: "tcp_probe stamps and paces samples by it" },
            _ => sockops.clock,
        };

        // Assignment stays off (the map's initial value) until the experiment, with everything
        // else in place, turns it on through this handle.
        let assignment = match &opts.experiment {
            Some(_) if path == ObserverPath::Sockops => Some(Assignment::take(&mut ebpf)?),
            _ => None,
        };
        let kernel_log = match opts.kernel_log {
            0 => None,
            _ => super::log::reader(&mut ebpf).map_err(|why| degraded.push(why)).ok(),
        };
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").context("EVENTS map missing")?)?;
        let counters = PerCpuArray::try_from(ebpf.take_map("COUNTERS").context("COUNTERS map missing")?)?;
        // SAFETY: the ring buffer owns its map fd and keeps it open, unchanged, for as long as
        // the AsyncFd owns the ring buffer.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)?;
        Ok(Observer {
            ebpf,
            ring,
            counters,
            layout,
            degraded,
            path,
            sample_clock,
            per_ack_program,
            assignment,
            kernel_log,
        })
    }

    /// Waits until records are available (or `DRAIN_PERIOD` has passed: the programs wake
    /// userspace only once `1/WAKE_FRACTION` of the ring is used), then passes each to `f` until
    /// the ring is empty or `MAX_BATCH` records have been passed.
    pub(crate) async fn drain(&mut self, mut f: impl FnMut(&[u8])) -> Result<usize> {
        if let Some(log) = &mut self.kernel_log {
            log.flush();
        }
        let mut each = |ring: &mut RingBuf<MapData>| {
            let mut n = 0;
            while n < MAX_BATCH {
                let Some(item) = ring.next() else { break };
                f(&item);
                n += 1;
            }
            n
        };
        match tokio::time::timeout(DRAIN_PERIOD, self.ring.readable_mut()).await {
            Ok(guard) => {
                let mut guard = guard?;
                let n = each(guard.get_inner_mut());
                // Records may remain after a full batch: then the ring stays ready, and the
                // next call goes on at once.
                if n < MAX_BATCH {
                    guard.clear_ready();
                }
                Ok(n)
            }
            Err(_) => Ok(each(self.ring.get_mut())),
        }
    }

    /// The experiment's assignment, for the experiment to switch while the observer's loop
    /// runs (`None` without an experiment, or once taken).
    pub(crate) fn take_assignment(&mut self) -> Option<Assignment> {
        self.assignment.take()
    }

    /// The sock_ops path's socket-storage map: every socket that has a value in it is watched
    /// by the kernel program (sock_diag can say which, see `Existing`).
    pub fn socket_storage(&self) -> Option<BorrowedFd<'_>> {
        match self.ebpf.map(SOCKET_STORAGE)? {
            Map::SkStorage(map) => Some(map.fd().as_fd()),
            _ => None,
        }
    }

    /// The kernel-side counters (see `bbrscope_common::counter`), summed over CPUs.
    pub(crate) fn counters(&self) -> Result<Counters> {
        let mut c = [0u64; counter::COUNT as usize];
        for (i, slot) in c.iter_mut().enumerate() {
            *slot = self.counters.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(Counters(c))
    }

    /// Cumulative run time and run count of the per-ACK program (tcp_probe, or the sock_ops
    /// program), when the kernel's BPF statistics are enabled (`--bpf-stats`).
    pub(crate) fn probe_runtime(&self) -> Option<(Duration, u64)> {
        let info = match self.path {
            ObserverPath::Tracepoint | ObserverPath::FloorTracepoint => {
                let prog: &RawTracePoint = self.ebpf.program(self.per_ack_program)?.try_into().ok()?;
                prog.info().ok()?
            }
            ObserverPath::Sockops | ObserverPath::FloorSockops | ObserverPath::LookupSockops => {
                let prog: &SockOps = self.ebpf.program(self.per_ack_program)?.try_into().ok()?;
                prog.info().ok()?
            }
        };
        Some((info.run_time(), info.run_count()))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters(pub [u64; counter::COUNT as usize]);

impl Counters {
    pub(crate) fn get(&self, index: u32) -> u64 {
        self.0[index as usize]
    }
}

/// Which observer `bbrscope stream`/`top` would use here, found by loading (not attaching) the
/// sock_ops program, for `status`: `Ok(path)` or why it cannot be known.
pub(crate) fn probe() -> std::result::Result<(ObserverPath, Option<String>), String> {
    if !crate::sys::privileges::can_trace(crate::sys::privileges::effective_caps()) {
        return Err("checking needs root (or CAP_BPF and CAP_PERFMON)".into());
    }
    let btf =
        with_cc_modules(Btf::kernel().map_err(|e| format!("no kernel BTF: {e:#}"))?).map_err(|e| format!("{e:#}"))?;
    let layout = Layout::from_btf(&btf).map_err(|e| format!("{e:#}"))?;
    let hooks = hooks::plan(|tp| btf.tracepoint_args(tp)).map_err(|e| format!("{e:#}"))?;
    let helpers = sockops_helpers();
    if let Some(why) = helpers.unavailable {
        return Ok((ObserverPath::Tracepoint, Some(why)));
    }
    let interval = Duration::from_millis(100);
    let config = Config {
        interval_ns: interval.as_nanos() as u64,
        flags: layout.flags | hooks.flags | helpers.flags,
        events_per_interval: 64,
        wake_bytes: 0,
        _pad: 0,
        sockops_period: helpers.clock.period(interval),
        filter: Filter::default(),
        sock: layout.sock,
        fields: layout.fields,
        span: layout.span,
        experiment: Config::zeroed().experiment,
    };
    let why = (|| -> Result<()> {
        crate::sys::cgroup::cgroup2_mount().context("no cgroup v2 hierarchy is mounted")?;
        let mut ebpf = EbpfLoader::new()
            .override_global("CONFIG", &config, true)
            .override_global(aya_log::LEVEL, &0u8, true)
            .map_max_entries(super::log::RING, super::log::ring_bytes(0))
            .load(OBJECT)?;
        let prog: &mut SockOps = ebpf.program_mut(SOCKOPS_PROGRAM).context("program missing")?.try_into()?;
        prog.load().context("loading the sock_ops program")?;
        Ok(())
    })();
    Ok(match why {
        Ok(()) => {
            let notes: Vec<String> = helpers.owner_note.into_iter().chain(helpers.clock.fallback_note()).collect();
            (ObserverPath::Sockops, (!notes.is_empty()).then(|| notes.join("; ")))
        }
        Err(e) => (ObserverPath::Tracepoint, Some(format!("{e:#}"))),
    })
}

/// The programs submit records without a wake-up until a quarter of the ring is used, and
/// userspace reads the ring at least this often: at 10,000 records a second (5,000 short flows a
/// second, both ends on this host) that is about 20 wake-ups a second instead of 10,000, each
/// followed by a batch of JSON lines and one write. 50 ms keeps the dashboard and the stream
/// live at the default 100 ms sample interval.
const DRAIN_PERIOD: Duration = Duration::from_millis(50);
const WAKE_FRACTION: u32 = 4;
/// Records passed per `drain` at most. A ring fed faster than it is read never empties, and an
/// unbounded loop would then starve everything else the caller waits for: its stats, the
/// deadline, Ctrl-C and SIGTERM (the likely cause of a test that once saw no `stats` record for
/// 20 s while a 5,000 flows/s benchmark ran beside it). 4,096 records take a few ms to handle.
const MAX_BATCH: usize = 4096;

const SOCKOPS_PROGRAM: &str = "bbrscope_sockops";
/// The observer's sock_ops program as the kernel names it (BPF_OBJ_NAME_LEN: 15 bytes and a NUL).
pub(crate) const SOCKOPS_KERNEL_NAME: &str = "bbrscope_sockop";
/// The sock_ops program's socket-local storage (`SockFlow` in each socket).
const SOCKET_STORAGE: &str = "SOCKS";
/// The tracepoint program the sock_ops path uses for congestion-state changes.
const CONG_BY_COOKIE: &str = "cong_state_by_cookie";

fn experiment_config(spec: Option<&ExperimentSpec>) -> bbrscope_common::Experiment {
    let mut e = Config::zeroed().experiment;
    let Some(spec) = spec else { return e };
    e.flags = experiment_flags::ON;
    if !spec.dst.is_empty() {
        e.flags |= experiment_flags::DST;
    }
    e.split_pct = spec.split_pct;
    e.sample_pct = spec.sample_pct;
    e.salt = spec.salt;
    for ((slot, iw), arm) in e.cc.iter_mut().zip(&mut e.iw).zip(&spec.arms) {
        let n = arm.cc.len().min(CC_NAME_LEN - 1);
        slot[..n].copy_from_slice(&arm.cc.as_bytes()[..n]);
        *iw = arm.iw.unwrap_or(0);
    }
    e.port = spec.port.unwrap_or(0);
    if let Some(cg) = &spec.cgroup {
        e.cgroup_id = cg.id;
        e.cgroup_level = cg.level;
    }
    e
}

/// Which arm the sock_ops program gives new connections in the experiment's scope, if any
/// (`assign_mode`; the map starts at OFF): its own handle on the `EXP_ASSIGN` map, taken out of
/// the loaded object so that the experiment can switch it (a switchback's blocks, the end)
/// while the observer's loop holds the observer. Connections already given an arm keep it.
pub(crate) struct Assignment {
    mode: Array<MapData, u32>,
    /// The client bands sent back to their status quo (`EXP_HOLD`, see `hold`).
    hold: Array<MapData, u32>,
    /// The client prefixes sent back to their status quo (`EXP_HOLD_DST`).
    hold_dst: LpmTrie<MapData, [u8; 16], u8>,
}

impl Assignment {
    fn take(ebpf: &mut Ebpf) -> Result<Self> {
        let mut take = |name: &str| ebpf.take_map(name).with_context(|| format!("{name} map missing"));
        Ok(Assignment {
            mode: Array::try_from(take("EXP_ASSIGN")?)?,
            hold: Array::try_from(take("EXP_HOLD")?)?,
            hold_dst: LpmTrie::try_from(take("EXP_HOLD_DST")?)?,
        })
    }

    /// From now on new connections get `mode` (`assign_mode`).
    pub(crate) fn set(&mut self, mode: u32) -> Result<()> {
        self.mode.set(0, &mode, 0).context("setting the experiment's assignment")
    }

    /// Sends client groups back to their status quo: new connections whose handshake RTT falls
    /// in a band of `mask` (bit `i`: band `i` of `edges_ms`, numbered as `units::band_of` does),
    /// or whose peer is in one of `prefixes`, get no arm from here on. The edges and prefixes go
    /// in before the mask, so the kernel never reads a mask against what is not yet written.
    pub(crate) fn hold(&mut self, edges_ms: &[f64], mask: u32, prefixes: &[ipnet::IpNet]) -> Result<()> {
        ensure!(edges_ms.len() <= hold::MAX_EDGES as usize, "at most {} RTT band edges", hold::MAX_EDGES);
        ensure!(mask & hold::PREFIXES == 0, "band mask {mask:#x} past the bands");
        for (i, edge) in (0..).zip(edges_ms) {
            self.hold.set(hold::EDGES + i, &((edge * 1e3).round() as u32), 0).context("holding a client group")?;
        }
        for net in prefixes {
            self.hold_dst.insert(&lpm_key(net), &1, 0).with_context(|| format!("holding the clients in {net}"))?;
        }
        let mask = if prefixes.is_empty() { mask } else { mask | hold::PREFIXES };
        self.hold.set(hold::MASK, &mask, 0).context("holding a client group")
    }
}

/// Destination ranges the kernel's experiment scope holds (the size of `EXP_DST` in
/// bbrscope-ebpf/src/sockops.rs): more is bad input, refused before anything is loaded.
pub(crate) const MAX_EXPERIMENT_RANGES: usize = 1024;

/// The experiment's destination ranges, as IPv6 (IPv4 mapped) prefixes the kernel looks up.
fn fill_experiment_ranges(ebpf: &mut Ebpf, ranges: &[ipnet::IpNet]) -> Result<()> {
    let mut map: LpmTrie<_, [u8; 16], u8> = LpmTrie::try_from(ebpf.map_mut("EXP_DST").context("EXP_DST map missing")?)?;
    for net in ranges {
        map.insert(&lpm_key(net), &1, 0).with_context(|| format!("adding {net} to the experiment's scope"))?;
    }
    Ok(())
}

/// `net` as the key of the programs' prefix tries: IPv6, IPv4 mapped.
fn lpm_key(net: &ipnet::IpNet) -> Key<[u8; 16]> {
    match net {
        ipnet::IpNet::V4(n) => Key::new(96 + u32::from(n.prefix_len()), n.network().to_ipv6_mapped().octets()),
        ipnet::IpNet::V6(n) => Key::new(u32::from(n.prefix_len()), n.network().octets()),
    }
}

/// What the sock_ops program may call on this kernel.
struct SockopsHelpers {
    /// `config_flags::SOCKOPS_*` for the optional helpers present.
    flags: u32,
    /// Why there is no sock_ops path here: a capability this process lacks, or required helpers
    /// the kernel lacks.
    unavailable: Option<String>,
    /// What the user loses for the optional ones it lacks.
    owner_note: Option<String>,
    /// What paces samples (its flag is in `flags`).
    clock: SampleClock,
}

/// Asks the kernel which helpers sock_ops programs may call: newer kernels allow more (the
/// current process's ids since about 6.10, its command name later, the coarse clock since 5.11),
/// and picks the clock that paces samples.
fn sockops_helpers() -> SockopsHelpers {
    use aya::{
        programs::ProgramType,
        sys::{BpfHelper, is_helper_supported},
    };
    let allowed = crate::sys::privileges::can_load_sockops(crate::sys::privileges::effective_caps());
    let has = |h: BpfHelper| allowed && is_helper_supported(ProgramType::SockOps, h).unwrap_or(false);
    let required = [
        (BpfHelper::BPF_FUNC_sk_storage_get, "bpf_sk_storage_get"),
        (BpfHelper::BPF_FUNC_probe_read_kernel, "bpf_probe_read_kernel"),
        (BpfHelper::BPF_FUNC_ringbuf_reserve, "bpf_ringbuf_reserve"),
        (BpfHelper::BPF_FUNC_get_socket_cookie, "bpf_get_socket_cookie"),
    ];
    let missing: Vec<&str> = required.iter().filter(|(h, _)| !has(*h)).map(|(_, n)| *n).collect();
    let mut flags = 0;
    let mut lost = Vec::new();
    if has(BpfHelper::BPF_FUNC_get_current_pid_tgid) {
        flags |= config_flags::SOCKOPS_PID;
    } else {
        lost.push("pid");
    }
    if has(BpfHelper::BPF_FUNC_get_current_comm) {
        flags |= config_flags::SOCKOPS_COMM;
    } else {
        lost.push("comm");
    }
    let hz = if has(BpfHelper::BPF_FUNC_jiffies64) { hz::discover_once().ok_or(HZ_UNKNOWN) } else { Err(NO_JIFFIES) };
    let clock = match hz {
        Ok(hz) => SampleClock::Jiffies(hz),
        Err(why) if has(BpfHelper::BPF_FUNC_ktime_get_coarse_ns) => SampleClock::Coarse { why },
        Err(why) => SampleClock::Monotonic { why },
    };
    flags |= clock.flag();
    SockopsHelpers {
        flags,
        clock,
        unavailable: if allowed {
            (!missing.is_empty()).then(|| format!("this kernel's sock_ops programs cannot call {}", missing.join(", ")))
        } else {
            Some("sock_ops programs need CAP_NET_ADMIN (or CAP_SYS_ADMIN), which this process lacks".into())
        },
        // What the kernel cannot say, userspace reads from /proc when a flow is first shown
        // (`observe::session`, `sys::procfd`): a flow closed by then has no process left to
        // ask.
        owner_note: match lost.as_slice() {
            [] => None,
            ["comm"] => Some(
                "this kernel's sock_ops programs cannot see the process's name: flow owners' comm is read from \
                 /proc when the flow is first shown, null if the process has exited by then (--comm does not select \
                 those flows)"
                    .into(),
            ),
            _ => Some(
                "this kernel's sock_ops programs cannot see the process that opens or writes to a connection: flow \
                 owners' pid and comm are read from /proc when the flow is first shown (as ss -p does), so a flow \
                 that closed by then (most short ones) has none and --pid/--comm do not select it; cgroup and netns \
                 are exact"
                    .into(),
            ),
        },
    }
}

/// The path `opts` asks for, or why the tracepoint path must be used instead.
fn choose_path(opts: &Options) -> std::result::Result<ObserverPath, String> {
    match opts.path {
        PathChoice::Tracepoint if opts.experiment.is_some() => {
            Err("an experiment needs the sockops observer (it assigns algorithms as connections open)".into())
        }
        PathChoice::Tracepoint => Ok(ObserverPath::Tracepoint),
        PathChoice::FloorSockops => Ok(ObserverPath::FloorSockops),
        PathChoice::LookupSockops => Ok(ObserverPath::LookupSockops),
        PathChoice::FloorTracepoint => Ok(ObserverPath::FloorTracepoint),
        // Receive-only flows get no RTT callbacks: periodic samples of them need tcp_probe.
        _ if opts.receivers == Receivers::Sampled => {
            Err("--receivers samples flows that only receive, which only the tracepoint \
                                    path sees: using tracepoints (no short flows, no flow summaries)"
                .into())
        }
        _ => Ok(ObserverPath::Sockops),
    }
}

fn attach_tracepoints(ebpf: &mut Ebpf, hooks: &[&'static str]) -> Result<()> {
    for &tp in hooks {
        let prog: &mut RawTracePoint =
            ebpf.program_mut(tp).with_context(|| format!("program {tp} missing from the object"))?.try_into()?;
        prog.load().with_context(|| format!("loading the {tp} program"))?;
        prog.attach(tp).with_context(|| format!("attaching to tracepoint {tp}"))?;
    }
    Ok(())
}

impl ObserverPath {
    /// The program on the per-ACK path, for its run-time statistics.
    fn per_ack_program(self) -> &'static str {
        match self {
            ObserverPath::Sockops => SOCKOPS_PROGRAM,
            ObserverPath::Tracepoint => "tcp_probe",
            ObserverPath::FloorSockops => "floor_sockops",
            ObserverPath::LookupSockops => "lookup_sockops",
            ObserverPath::FloorTracepoint => "floor_tcp_probe",
        }
    }
}

/// One of the benchmark's reference programs where the real per-ACK program would go.
fn attach_bench(ebpf: &mut Ebpf, path: ObserverPath) -> Result<()> {
    let name = path.per_ack_program();
    if path == ObserverPath::FloorTracepoint {
        let prog: &mut RawTracePoint = ebpf.program_mut(name).context("floor program missing")?.try_into()?;
        prog.load()?;
        prog.attach("tcp_probe")?;
        return Ok(());
    }
    let prog: &mut SockOps = ebpf.program_mut(name).with_context(|| format!("{name} missing"))?.try_into()?;
    prog.load()?;
    prog.attach(&cgroup2_root()?, CgroupAttachMode::Single)?;
    Ok(())
}

const NO_JIFFIES: &str = "this kernel's sock_ops programs cannot read jiffies";
const HZ_UNKNOWN: &str = "this kernel's tick rate is unknown (no CONFIG_HZ in /proc/config.gz or /boot/config-*, /proc/timer_list unreadable)";

/// The clock the sock_ops program paces samples by (`stats.sample_clock`). Every choice samples
/// at the same interval; they differ in what each ACK pays to read them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SampleClock {
    /// The tick counter: one load once JITed (the verifier inlines bpf_jiffies64 on 64-bit).
    Jiffies(hz::Hz),
    /// CLOCK_MONOTONIC_COARSE: a helper call and a few loads.
    Coarse { why: &'static str },
    /// CLOCK_MONOTONIC: a helper call and a clock-source read.
    Monotonic { why: &'static str },
}

impl SampleClock {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SampleClock::Jiffies(_) => "jiffies",
            SampleClock::Coarse { .. } => "coarse",
            SampleClock::Monotonic { .. } => "monotonic",
        }
    }

    fn flag(&self) -> u32 {
        match self {
            SampleClock::Jiffies(_) => config_flags::SOCKOPS_JIFFIES,
            SampleClock::Coarse { .. } => config_flags::SOCKOPS_COARSE_CLOCK,
            SampleClock::Monotonic { .. } => 0,
        }
    }

    /// The sample interval in this clock's units: whole ticks, rounded up as the coarse clock
    /// (which advances a tick at a time) would.
    fn period(&self, interval: Duration) -> u64 {
        let ns = interval.as_nanos() as u64;
        match self {
            SampleClock::Jiffies(hz) => (ns * u64::from(hz.hz)).div_ceil(1_000_000_000).max(1),
            _ => ns,
        }
    }

    /// For `status`, when this is not the clock bbrscope prefers, or its rate was measured.
    pub(crate) fn fallback_note(&self) -> Option<String> {
        match self {
            SampleClock::Jiffies(hz) if hz.source == "measured" => {
                Some(format!("samples paced by jiffies at HZ {} (measured: no kernel configuration found)", hz.hz))
            }
            SampleClock::Jiffies(_) => None,
            SampleClock::Coarse { why } | SampleClock::Monotonic { why } => {
                Some(format!("samples paced by the {} clock ({why}): a helper call per ACK", self.name()))
            }
        }
    }
}

fn cgroup2_root() -> Result<std::fs::File> {
    let mount = crate::sys::cgroup::cgroup2_mount().context("no cgroup v2 hierarchy is mounted")?;
    std::fs::File::open(&mount.mount_point).with_context(|| format!("opening {}", mount.mount_point.display()))
}

/// The sock_ops program on the cgroup v2 root (every socket of the machine, or of this cgroup
/// namespace), plus the congestion-state tracepoint where the kernel has it. The link is a file
/// descriptor: it goes when bbrscope exits, however it exits.
fn attach_sockops(ebpf: &mut Ebpf, hooks: &[&'static str]) -> Result<()> {
    let root = cgroup2_root()?;
    if hooks.contains(&"tcp_cong_state_set") {
        let prog: &mut RawTracePoint =
            ebpf.program_mut(CONG_BY_COOKIE).context("cong_state_by_cookie missing from the object")?.try_into()?;
        prog.load().context("loading the tcp_cong_state_set program")?;
        prog.attach("tcp_cong_state_set").context("attaching to tracepoint tcp_cong_state_set")?;
    }
    let prog: &mut SockOps =
        ebpf.program_mut(SOCKOPS_PROGRAM).context("sock_ops program missing from the object")?.try_into()?;
    prog.load().context("loading the sock_ops program")?;
    // A bpf_link (5.7+) sits beside other programs on the cgroup; the kernel refuses attach
    // flags on it, hence "Single".
    prog.attach(&root, CgroupAttachMode::Single).context("attaching the sock_ops program to the cgroup v2 root")?;
    Ok(())
}

/// Layers the BTF of the BBR module over the kernel's when BBR is not built in, so its private
/// state can be decoded.
fn with_cc_modules(btf: Btf) -> Result<Btf> {
    if btf.struct_id("bbr").is_some() || !std::path::Path::new("/sys/kernel/btf/tcp_bbr").exists() {
        return Ok(btf);
    }
    btf.with_module("tcp_bbr")
}

fn kernel_filter(spec: &FilterSpec, layout: &Layout) -> Result<Filter> {
    let mut f = Filter::default();
    if let Some(port) = spec.port {
        f.flags |= filter_flags::PORT;
        f.port = port;
    }
    if let Some(net) = &spec.net {
        f.flags |= filter_flags::ADDR;
        let (addr, mask) = net.mapped_net_and_mask();
        f.net = addr;
        f.mask = mask;
    }
    if let Some(cg) = &spec.cgroup {
        if !layout.cgroup_filter {
            return Err(UsageError::new(
                "--cgroup needs a kernel whose sockets record their cgroup (Linux 5.15+, sock_cgroup_data.cgroup)",
            )
            .into());
        }
        f.flags |= filter_flags::CGROUP;
        f.cgroup_id = cg.id;
        f.cgroup_level = cg.level;
    }
    if let Some(cc) = &spec.cc {
        f.flags |= filter_flags::CC;
        let n = cc.len().min(CC_NAME_LEN - 1);
        f.cc[..n].copy_from_slice(&cc.as_bytes()[..n]);
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_interval_is_whole_ticks_rounded_up_on_jiffies_and_nanoseconds_otherwise() {
        let jiffies = SampleClock::Jiffies(hz::Hz { hz: 250, source: "/proc/config.gz".into() });
        let ms = Duration::from_millis;
        assert_eq!(jiffies.period(ms(100)), 25);
        assert_eq!(jiffies.period(ms(30)), 8, "7.5 ticks: the next whole one, as the coarse clock would");
        assert_eq!(jiffies.period(ms(1)), 1, "never 0: a sample per tick at most");
        assert_eq!(SampleClock::Coarse { why: NO_JIFFIES }.period(ms(30)), 30_000_000);
        assert_eq!(jiffies.fallback_note(), None);
        let measured = SampleClock::Jiffies(hz::Hz { hz: 250, source: "measured".into() });
        assert!(measured.fallback_note().is_some_and(|n| n.contains("HZ 250") && n.contains("measured")));
        assert!(SampleClock::Coarse { why: HZ_UNKNOWN }.fallback_note().is_some_and(|n| n.contains("coarse")));
    }
}

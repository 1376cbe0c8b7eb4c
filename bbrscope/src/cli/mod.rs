//! Command-line interface: the clap types, the flags → options step, and ([`docs`]) the man
//! pages and completions generated from them.

pub(crate) mod advise;
pub(crate) mod apply;
pub(crate) mod demo;
pub(crate) mod docs;
pub(crate) mod experiment;
pub(crate) mod export;
pub(crate) mod revert;
pub(crate) mod status;

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::{
    observe::filter::{FilterSpec, Net, OwnerFilter},
    observe::kernel::loader::{Options, PathChoice, Receivers},
};

#[derive(Debug, Parser)]
#[command(
    name = "bbrscope",
    version = concat!(
        env!("CARGO_PKG_VERSION"),
        " (commit ",
        env!("BBRSCOPE_GIT_COMMIT"),
        "; kernel side: sock_ops observer with socket storage, raw tracepoint fallback, BTF offsets at start-up)"
    ),
    about = "Live TCP congestion-control observer (eBPF): see what CUBIC and BBR are doing to your flows",
    long_about = "Live TCP congestion-control observer (eBPF): see what CUBIC and BBR are doing to \
                  your flows.\n\nbbrscope attaches to the kernel's TCP stack (a sock_ops program on the \
                  cgroup v2 root; tracepoints where that is unavailable) and reports, per flow, the congestion window, RTT, pacing and delivery rate, retransmits, the \
                  congestion state and the algorithm's internals. Needs root (or CAP_BPF, \
                  CAP_PERFMON and CAP_NET_ADMIN) and a kernel with BTF.",
    after_help = "Units follow `ss -tin`: windows in packets, rates in bits per second, RTTs in microseconds.\nSet NO_COLOR to disable colours."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

// `allow_negative_numbers` on the commands that take numbers: `--interval -1` then reaches the
// option's own check, which says what a right value is, instead of clap's "unexpected argument".
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Live dashboard: flows, their history, CUBIC vs BBR, and why each is slow (default on a terminal)
    #[command(allow_negative_numbers = true)]
    Top(TopArgs),
    /// Stream per-flow events as newline-delimited JSON (see docs/stream.md)
    #[command(allow_negative_numbers = true)]
    Stream(StreamArgs),
    /// Play a recorded `bbrscope stream` capture back in the dashboard (no root needed)
    #[command(allow_negative_numbers = true)]
    Replay(ReplayArgs),
    /// CUBIC vs BBR on an emulated long, lossy path, with the published numbers beside it (root)
    #[command(allow_negative_numbers = true)]
    Demo(demo::DemoArgs),
    /// Will BBR help my traffic? A randomized A/B of two algorithms on this host's new connections, with the answer per client group (root; --analyze FILE re-analyses a recording)
    #[command(
        allow_negative_numbers = true,
        after_help = "Each client group gets one answer: B faster by X [interval], B slower, no difference larger than \
                      --delta, or inconclusive with about how many more flows would decide (the interval is valid \
                      however often it is looked at; docs/experiment-method.md in the source has the method and its \
                      measured error rates).\n\nExit status: 0 ran its course, or ended by q, Ctrl-C or SIGTERM; 1 an \
                      error; 2 bad input, or the service set its own algorithm (nothing concluded); 3 stopped by the \
                      guardrail (--analyze-prometheus: the guardrail on every host's flows together says stop)."
    )]
    Experiment(Box<experiment::ExperimentArgs>),
    /// Which settings beyond the algorithm hold this host's flows back (initial window, send and receive buffers, unsent queue, restart after idle, pacing), from flows watched for --duration (root)
    #[command(allow_negative_numbers = true)]
    Advise(advise::AdviseArgs),
    /// Switch congestion control for the system, a network namespace, a cgroup or a route: checks, plan, change, proof on a real socket (root)
    Apply(apply::ApplyArgs),
    /// Congestion control as it stands: defaults, allowed list, qdiscs, boot configuration, live flows per algorithm, and what bbrscope changed
    Status(status::StatusArgs),
    /// Undo what `bbrscope apply` did for a scope, exactly as recorded (root)
    Revert(revert::RevertArgs),
    /// Prometheus exporter: flows, bytes, retransmits, completion times and RTT by algorithm at /metrics (root; docs/export.md)
    #[command(allow_negative_numbers = true)]
    Export(export::ExportArgs),
    /// Write the man pages (bbrscope.1 and one per command) into a directory: to read them where the package is not installed (man -l DIR/bbrscope-top.1)
    Man(ManArgs),
    /// Print the tab-completion script for a shell (bash, zsh, fish, elvish, powershell): subcommands, options, presets, and the algorithms Linux ships where an algorithm is asked for
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages to (created if missing)
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_name = "SHELL")]
    pub(crate) shell: clap_complete::Shell,
}

/// Which flows to watch. All given filters must match; they run in the kernel.
#[derive(Debug, Args, Clone)]
pub(crate) struct FilterArgs {
    /// Only flows with this local or remote port (1-65535)
    #[arg(long, value_name = "PORT", value_parser = parse_port)]
    pub(crate) port: Option<u16>,
    /// Only flows with the local or remote address in this range (e.g. 10.0.0.0/8, 2001:db8::/32, 192.0.2.7)
    #[arg(long, value_name = "CIDR")]
    pub(crate) addr: Option<Net>,
    /// Only sockets created in this cgroup v2 directory or below it
    #[arg(long, value_name = "PATH")]
    pub(crate) cgroup: Option<PathBuf>,
    /// Only flows using this congestion-control algorithm (e.g. cubic, bbr)
    #[arg(long, value_name = "NAME")]
    pub(crate) cc: Option<String>,
    /// Only flows of processes with this command name (as in `ps -o comm`: the process that
    /// opened or writes to the connection, see docs/stream.md; sock_ops observer only)
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    pub(crate) comm: Option<String>,
    /// Only flows of this process id (the thread group id, as `ps` shows it; sock_ops observer only)
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) pid: Option<u32>,
    /// Only flows in this network namespace: its inode number (`lsns -t net`), `ip netns` name,
    /// or a path such as /proc/PID/ns/net (sock_ops observer only)
    #[arg(long, value_name = "INODE|PATH", value_parser = parse_netns)]
    pub(crate) netns: Option<u32>,
}

/// Where to serve /metrics: an address and port, or a port alone on loopback.
pub(crate) fn parse_listen(s: &str) -> Result<std::net::SocketAddr, String> {
    match s.parse::<u16>() {
        Ok(port) => Ok((std::net::Ipv4Addr::LOCALHOST, port).into()),
        Err(_) => s.parse().map_err(|_| {
            format!("'{s}' is not an address and port, or a port (e.g. 127.0.0.1:9580, 0.0.0.0:9580, [::1]:9580, 9580)")
        }),
    }
}

/// A command name as the kernel keeps it (`TASK_COMM_LEN` = 16, so at most 15 bytes).
fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 15 {
        return Err(format!("'{s}' is not a command name: 1 to 15 bytes, as `ps -o comm` shows it"));
    }
    Ok(s.to_string())
}

/// A network namespace by inode number, `ip netns` name, or path to its nsfs file (which must
/// be one: any other file's inode number would filter for a namespace that is not there).
fn parse_netns(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(0) => Err("0 is no namespace's inode number (see `lsns -t net`)".into()),
        Ok(n) => Ok(n),
        Err(_) => {
            let ns = crate::sys::netns::resolve(s).map_err(|e| format!("{e:#}"))?;
            u32::try_from(ns.ino).map_err(|_| format!("'{s}': inode {} does not fit the filter's 32 bits", ns.ino))
        }
    }
}

#[derive(Debug, Args, Clone)]
pub(crate) struct ObserveArgs {
    #[command(flatten)]
    pub(crate) filter: FilterArgs,
    /// Sample period per flow, in milliseconds (1-60000, no unit); losses and state changes are
    /// reported as they happen
    #[arg(long, value_name = "MS", default_value_t = 100, value_parser = parse_interval_ms)]
    pub(crate) interval: u64,
    /// Also report flows that only receive data (by default only flows that send)
    #[arg(long)]
    pub(crate) receivers: bool,
    /// Flows tracked in the kernel at once (least recently active are evicted beyond this)
    #[arg(long, value_name = "N", default_value_t = 65536, value_parser = clap::value_parser!(u32).range(16..=4_194_304))]
    pub(crate) max_flows: u32,
    /// Ring buffer between kernel and bbrscope: a power of two from 4K (e.g. 512K, 4M, 64M)
    // 4 MB: the largest record (a flow's close, ~580 B) fits ~7,000 times. At 5,000 short flows a
    // second with both ends on the host (~10,000 such records, 5.8 MB a second) userspace is woken
    // at 1 MB (a quarter) or every 50 ms, and the other 3 MB absorb half a second of a stalled
    // reader on a loaded host. Idle sockets cost the ring nothing (no record until data is sent).
    #[arg(long, value_name = "BYTES", default_value = "4M", value_parser = parse_ring_size)]
    pub(crate) ring_size: u32,
    /// Read kernel type information from this BTF file instead of /sys/kernel/btf/vmlinux (for
    /// kernels built without CONFIG_DEBUG_INFO_BTF). The file must describe the running kernel:
    /// its socket struct sizes are checked against the kernel's slab caches (/sys/kernel/slab)
    #[arg(long, value_name = "FILE")]
    pub(crate) btf: Option<PathBuf>,
    /// Measure the kernel programs' own cost (ns per per-ACK event, in `stats` and the footer)
    /// by turning on the kernel's BPF statistics while bbrscope runs (adds ~20 ns per event)
    #[arg(long)]
    pub(crate) bpf_stats: bool,
    /// How to hook into TCP: `sockops` (every flow from connect/accept to close, in every TCP
    /// state, with a summary at close), `tracepoint` (established senders only, the fallback for
    /// kernels or setups without it), or `auto` (sockops where it loads; `stats` names the one used)
    #[arg(long, value_name = "PATH", default_value = "auto")]
    pub(crate) observer: PathChoice,
    #[command(flatten)]
    pub(crate) kernel_log: KernelLogArg,
}

/// `--kernel-log`, shared by every command that loads the observer.
#[derive(Debug, Args, Clone, Copy)]
pub(crate) struct KernelLogArg {
    /// Print the kernel programs' rare events on stderr, each with its details: `warn` (an
    /// experiment's arm the kernel refused, socket storage it could not allocate; each is
    /// counted in `stats` either way) or `debug` (also every flow the sockops observer starts to
    /// watch, by cookie). Off by default, and then left out of the loaded programs by the
    /// kernel's verifier
    #[arg(long = "kernel-log", value_name = "LEVEL")]
    pub(crate) level: Option<KernelLog>,
}

impl KernelLogArg {
    /// The level the kernel programs are loaded with (0: off).
    pub(crate) fn level(self) -> u8 {
        self.level.map_or(0, |l| match l {
            KernelLog::Warn => aya_log::Level::Warn as u8,
            KernelLog::Debug => aya_log::Level::Debug as u8,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KernelLog {
    Warn,
    Debug,
}

impl ObserveArgs {
    /// Validates the filters against the running system and builds loader options.
    pub(crate) fn options(&self) -> Result<Options> {
        let f = &self.filter;
        if self.ring_size > RING_SIZE_NOTED {
            crate::output::errln!(
                "bbrscope: note: --ring-size {} MiB: the ring is kernel memory, held for as long as bbrscope runs",
                self.ring_size >> 20
            );
        }
        Ok(Options {
            interval: Duration::from_millis(self.interval),
            receivers: if self.receivers { Receivers::Sampled } else { Receivers::No },
            filter: FilterSpec::new(f.port, f.addr, f.cgroup.as_deref(), f.cc.as_deref())?,
            max_flows: self.max_flows,
            ring_bytes: self.ring_size,
            btf: self.btf.clone(),
            bpf_stats: self.bpf_stats,
            path: self.observer,
            owner: OwnerFilter { comm: f.comm.clone(), pid: f.pid, netns: f.netns },
            kernel_log: self.kernel_log.level(),
            ..Options::default()
        })
    }
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub(crate) observe: ObserveArgs,
    /// Stop after this long: seconds, or 90s, 10m, 2h (default: run until interrupted)
    #[arg(long, value_name = "TIME", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub(crate) duration: Option<Duration>,
    /// Seconds between `stats` records (up to 86400); 0 turns them off
    #[arg(long, value_name = "SECS", default_value_t = 1.0, allow_negative_numbers = true, value_parser = parse_stats_secs)]
    pub(crate) stats_interval: f64,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub(crate) observe: ObserveArgs,
    /// Close the dashboard after this long: seconds, or 90s, 10m, 2h (default: until q)
    #[arg(long, value_name = "TIME", value_parser = crate::units::duration, allow_negative_numbers = true)]
    pub(crate) duration: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A file written by `bbrscope stream` (- for standard input)
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Playback speed (0.125 to 64; `[` and `]` change it while playing)
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub(crate) speed: f64,
    /// Start paused (`p` toggles)
    #[arg(long)]
    pub(crate) paused: bool,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.125..=64.0).contains(&v) => Ok(v),
        _ => Err(format!("'{s}' is not a speed from 0.125 to 64 (e.g. 1, 4, 0.5)")),
    }
}

fn parse_stats_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("'{s}' is not a number of seconds (e.g. 1 or 0.5; 0 for none)"))?;
    if !(0.0..=86400.0).contains(&v) {
        return Err(format!("'{s}' must be 0 (no stats) or a number of seconds up to 86400"));
    }
    Ok(v)
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        Ok(_) => Err("port 0 matches no TCP flow: give a port from 1 to 65535".into()),
        Err(_) => Err(format!("'{s}' is not a port (a number from 1 to 65535)")),
    }
}

fn parse_interval_ms(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not an interval: give milliseconds from 1 to 60000, without a unit (e.g. 100)");
    match s.parse::<u64>() {
        Ok(v) if (1..=60_000).contains(&v) => Ok(v),
        _ => Err(bad()),
    }
}

/// A ring larger than this is said to cost memory (the default is 4 MiB).
const RING_SIZE_NOTED: u32 = 64 << 20;

/// A size with an optional K/M/G suffix (powers of 1024).
pub(crate) fn parse_ring_size(s: &str) -> Result<u32, String> {
    let bad = || format!("'{s}' is not a size: use a power of two from 4K to 1G, e.g. 512K or 4M");
    let (digits, mult) = match s.trim().to_ascii_uppercase() {
        t if t.ends_with('K') => (t[..t.len() - 1].to_string(), 1u64 << 10),
        t if t.ends_with('M') => (t[..t.len() - 1].to_string(), 1 << 20),
        t if t.ends_with('G') => (t[..t.len() - 1].to_string(), 1 << 30),
        t => (t, 1),
    };
    let n = digits.parse::<u64>().map_err(|_| bad())? * mult;
    if !(4096..=1 << 30).contains(&n) || !n.is_power_of_two() {
        return Err(bad());
    }
    Ok(n as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(parse_ring_size("4M"), Ok(4 << 20));
        assert_eq!(parse_ring_size("512k"), Ok(512 << 10));
        assert_eq!(parse_ring_size("4096"), Ok(4096));
        assert!(parse_ring_size("3M").is_err());
        assert!(parse_ring_size("1K").is_err());
        assert!(parse_ring_size("lots").is_err());
    }

    #[test]
    fn durations() {
        use crate::units::duration;
        assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("10m"), Ok(Duration::from_secs(600)));
        for bad in ["0", "-3", "soon", "1e300", "99999999999999999999", "inf", "NaN", "2y"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
        assert!(duration("1e300").unwrap_err().contains("a year"));
        assert_eq!(parse_stats_secs("0"), Ok(0.0));
        assert!(
            parse_stats_secs("1e30").is_err() && parse_stats_secs("-1").is_err() && parse_stats_secs("NaN").is_err()
        );
    }

    #[test]
    fn ports_and_intervals_say_what_is_right() {
        assert!(parse_port("0").unwrap_err().contains("1 to 65535"));
        assert_eq!(parse_port("443"), Ok(443));
        assert!(parse_interval_ms("100ms").unwrap_err().contains("without a unit"));
        assert_eq!(parse_interval_ms("100"), Ok(100));
        assert!(parse_interval_ms("0").is_err());
    }
}

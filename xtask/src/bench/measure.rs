//! What the benchmark reads about an observer while it runs: CPU time and memory from /proc, its
//! BPF programs and maps through its file descriptors (/proc/PID/fdinfo has each program's
//! run-time statistics and each map's locked memory), and bbrscope's own COUNTERS map, which its
//! `stats` records and dashboard footer are computed from.

use std::{collections::HashMap, fs, os::fd::OwnedFd, time::Duration};

use anyhow::{Context as _, Result, bail};
use aya::maps::{Map, MapData, PerCpuArray};
use bbrscope_common::counter;

/// Keeps the kernel's BPF run-time statistics (run_time_ns, run_cnt per program) on for as long
/// as it lives. They cost every BPF program on the machine two clock reads per run, observers
/// measured here included; without them there is no per-event cost to report.
pub(super) struct RunTimeStats {
    _fd: OwnedFd,
}

impl RunTimeStats {
    pub(super) fn enable() -> Result<Self> {
        let fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).context("BPF_ENABLE_STATS (run time)")?;
        Ok(RunTimeStats { _fd: fd })
    }
}

/// TCP segments this network namespace has received (`Tcp: InSegs` in /proc/net/snmp): every
/// incoming segment of every socket, which tcp_probe runs on and the sock_ops callbacks are a
/// subset of.
pub(super) fn tcp_in_segs() -> Result<u64> {
    // The calling thread's namespace (/proc/net is the main thread's).
    let text = fs::read_to_string("/proc/thread-self/net/snmp").context("/proc/thread-self/net/snmp")?;
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().context("no Tcp: line")?, tcp.next().context("no Tcp: values")?);
    let i = names.split_whitespace().position(|n| n == "InSegs").context("no Tcp InSegs")?;
    values.split_whitespace().nth(i).and_then(|v| v.parse().ok()).context("malformed Tcp InSegs")
}

/// CPU time of a process's threads, in nanoseconds (/proc/PID/task/TID/schedstat): clock
/// ticks, in /proc/PID/stat, are too coarse for an observer that uses a few ms per second.
pub(super) fn cpu_time(pid: u32) -> Result<Duration> {
    schedstat(pid, 0)
}

/// Time the process's threads waited on a run queue (runnable, not running), summed: how long
/// other work kept it from a CPU.
pub(super) fn run_delay(pid: u32) -> Result<Duration> {
    schedstat(pid, 1)
}

/// Field `field` of /proc/PID/task/*/schedstat (run time, run-queue wait, ns), summed over threads.
fn schedstat(pid: u32, field: usize) -> Result<Duration> {
    let mut ns = 0;
    for task in fs::read_dir(format!("/proc/{pid}/task")).with_context(|| format!("process {pid}"))? {
        // A thread that exits while listing is skipped.
        let Ok(text) = fs::read_to_string(task?.path().join("schedstat")) else { continue };
        ns += text.split_whitespace().nth(field).and_then(|v| v.parse::<u64>().ok()).context("malformed schedstat")?;
    }
    Ok(Duration::from_nanos(ns))
}

/// The fields of /proc/PID/stat the benchmark uses.
struct ProcStat {
    ppid: u32,
    /// utime, stime, cutime, cstime in clock ticks.
    ticks: u64,
}

impl ProcStat {
    fn parse(stat: &str) -> Option<ProcStat> {
        // The command name (field 2) may hold spaces and parentheses: count from its closing one.
        let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
        // Fields 4 (ppid) and 14 to 17, i.e. 1 and 11 to 14 after the command name.
        let ticks = fields.get(11..15)?.iter().map(|f| f.parse::<u64>().ok()).sum::<Option<u64>>()?;
        Some(ProcStat { ppid: fields.get(1)?.parse().ok()?, ticks })
    }

    fn cpu(&self) -> Duration {
        Duration::from_nanos(self.ticks * 1_000_000_000 / clock_ticks_per_s())
    }
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf takes no pointers.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as u64
}

/// CPU time used so far by every user process outside the benchmark's own process tree: other
/// people's work on the machine, which competes with the runs. (A process that ended counts in
/// its parent's children's time, so the difference of two readings covers it too. Kernel
/// threads are left out: they also carry the benchmark's own network processing.)
pub(super) fn others_cpu_time() -> Duration {
    const KTHREADD: u32 = 2;
    let mut procs: HashMap<u32, ProcStat> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // Processes that exit while listing are skipped.
        if let Some(stat) = fs::read_to_string(entry.path().join("stat")).ok().and_then(|s| ProcStat::parse(&s)) {
            procs.insert(pid, stat);
        }
    }
    let me = std::process::id();
    let mine = |mut pid: u32| {
        while pid > 1 {
            if pid == me {
                return true;
            }
            pid = procs.get(&pid).map_or(0, |p| p.ppid);
        }
        false
    };
    procs.iter().filter(|&(&pid, p)| pid != KTHREADD && p.ppid != KTHREADD && !mine(pid)).map(|(_, p)| p.cpu()).sum()
}

/// Time all CPUs together have spent busy (not idle or waiting for I/O) since boot.
pub(super) fn busy_cpu_time() -> Result<Duration> {
    let stat = fs::read_to_string("/proc/stat")?;
    let line = stat.lines().next().filter(|l| l.starts_with("cpu ")).context("no cpu line in /proc/stat")?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let ticks: Vec<u64> = line.split_whitespace().skip(1).take(8).map(str::parse).collect::<Result<_, _>>()?;
    let busy: u64 = ticks.iter().enumerate().filter(|&(i, _)| i != 3 && i != 4).map(|(_, t)| t).sum();
    Ok(Duration::from_nanos(busy * 1_000_000_000 / clock_ticks_per_s()))
}

/// Resident memory of a process now and at its peak, in bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Memory {
    pub rss: u64,
    pub peak: u64,
}

pub(super) fn memory(pid: u32) -> Result<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("process {pid}"))?;
    let kib = |key: &str| -> Result<u64> {
        let line = status.lines().find(|l| l.starts_with(key)).with_context(|| format!("no {key} in status"))?;
        Ok(line[key.len()..].trim().trim_end_matches(" kB").trim().parse::<u64>()? * 1024)
    };
    Ok(Memory { rss: kib("VmRSS:")?, peak: kib("VmHWM:")? })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Object {
    Program,
    Map,
}

/// A BPF program or map a process holds open.
struct BpfFd {
    fd: u32,
    object: Object,
    id: u32,
}

fn fdinfo(pid: u32, fd: u32) -> Result<HashMap<String, String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

fn field(info: &HashMap<String, String>, key: &str) -> Result<u64> {
    info.get(key).with_context(|| format!("no {key} in fdinfo"))?.parse().with_context(|| format!("{key} in fdinfo"))
}

fn bpf_fds(pid: u32) -> Result<Vec<BpfFd>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd")).with_context(|| format!("process {pid}"))? {
        let entry = entry?;
        let Ok(target) = fs::read_link(entry.path()) else { continue };
        let (object, id_key) = match target.to_str() {
            Some("anon_inode:bpf-prog") => (Object::Program, "prog_id"),
            Some("anon_inode:bpf-map") => (Object::Map, "map_id"),
            _ => continue,
        };
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else { continue };
        // The descriptor may close between listing and reading: skip it then.
        let Ok(info) = fdinfo(pid, fd) else { continue };
        out.push(BpfFd { fd, object, id: field(&info, id_key)? as u32 });
    }
    Ok(out)
}

/// Cumulative run time and run count of one program (kernel BPF statistics).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RunStats {
    pub run_time_ns: u64,
    pub runs: u64,
}

/// An observer's program on the per-ACK path: bbrscope's raw tracepoint and bpftrace's
/// tracepoint program are both named after the tracepoint; bbrscope's sock_ops program and the
/// benchmark's reference programs (floor, lookup) have names of their own.
pub(super) struct ProbeProgram {
    pid: u32,
    fd: u32,
    pub id: u32,
}

/// Names of per-ACK programs, as the kernel keeps them (at most 15 bytes: longer names are cut).
const PER_ACK_NAMES: [&str; 5] = ["tcp_probe", "bbrscope_sockop", "floor_sockops", "lookup_sockops", "floor_tcp_probe"];

impl ProbeProgram {
    pub(super) const NAME: &str = "tcp_probe";

    pub(super) fn find(pid: u32) -> Result<Option<ProbeProgram>> {
        let progs: Vec<BpfFd> = bpf_fds(pid)?.into_iter().filter(|f| f.object == Object::Program).collect();
        if progs.is_empty() {
            return Ok(None);
        }
        let named = program_ids(|name| PER_ACK_NAMES.iter().any(|n| name.starts_with(n)));
        Ok(progs.into_iter().find(|p| named.contains(&p.id)).map(|p| ProbeProgram { pid, fd: p.fd, id: p.id }))
    }

    pub(super) fn stats(&self) -> Result<RunStats> {
        let info = fdinfo(self.pid, self.fd)?;
        Ok(RunStats { run_time_ns: field(&info, "run_time_ns")?, runs: field(&info, "run_cnt")? })
    }
}

/// Ids of loaded programs whose name passes `keep`, whoever loaded them.
fn program_ids(keep: impl Fn(&str) -> bool) -> Vec<u32> {
    let mut ids = Vec::new();
    for prog in aya::programs::loaded_programs() {
        // Programs unloaded while listing are skipped.
        let Ok(prog) = prog else { continue };
        if prog.name_as_str().is_some_and(&keep) {
            ids.push(prog.id());
        }
    }
    ids
}

/// Ids of every loaded program named tcp_probe, whoever loaded it.
pub(super) fn probe_program_ids() -> Result<Vec<u32>> {
    Ok(program_ids(|name| name == ProbeProgram::NAME))
}

/// Memory the kernel has locked for the maps a process holds (their `memlock` in fdinfo).
pub(super) fn map_memory(pid: u32) -> Result<u64> {
    let mut total = 0;
    for f in bpf_fds(pid)?.into_iter().filter(|f| f.object == Object::Map) {
        total += field(&fdinfo(pid, f.fd)?, "memlock")?;
    }
    Ok(total)
}

/// bbrscope's per-CPU COUNTERS map, opened by id from the process that owns it.
pub(super) struct Counters(PerCpuArray<MapData, u64>);

/// The counters summed over CPUs, indexed by `bbrscope_common::counter`.
pub(super) type CounterValues = [u64; counter::COUNT as usize];

impl Counters {
    pub(super) fn find(pid: u32) -> Result<Counters> {
        for f in bpf_fds(pid)?.into_iter().filter(|f| f.object == Object::Map) {
            let map = MapData::from_id(f.id)?;
            if map.info()?.name_as_str() == Some("COUNTERS") {
                return Ok(Counters(PerCpuArray::try_from(Map::PerCpuArray(map))?));
            }
        }
        bail!("process {pid} holds no COUNTERS map")
    }

    pub(super) fn read(&self) -> Result<CounterValues> {
        let mut values = [0; counter::COUNT as usize];
        // A bbrscope built before a counter was added has fewer: those read as 0.
        let len = self.0.len() as usize;
        for (i, v) in values.iter_mut().enumerate().take(len) {
            *v = self.0.get(&(i as u32), 0)?.iter().sum();
        }
        Ok(values)
    }
}

/// Records bbrscope's programs wrote into the ring buffer, from the counters.
pub(super) fn records(c: &CounterValues) -> u64 {
    [counter::SAMPLES, counter::RETRANSMITS, counter::CONG_STATES, counter::CLOSES, counter::OPENS, counter::ENDS]
        .iter()
        .map(|&i| c[i as usize])
        .sum()
}

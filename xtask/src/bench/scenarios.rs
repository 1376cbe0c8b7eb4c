//! The five ways of watching the traffic that the benchmark compares: nothing, `bbrscope stream`
//! to /dev/null, the dashboard on a terminal, the bpftrace script a user would write by hand, and
//! `ss -tin` polled every 100 ms.

use std::{
    io::Read as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::{
    measure::{self, CounterValues, Counters, ProbeProgram, RunStats},
    net,
    pty::Pty,
    workload::Pinger,
};

/// Per-flow state keyed by socket, from the same tcp_probe fields bbrscope samples, printed
/// every 100 ms (bbrscope's default sample interval) and nothing per event.
pub(super) const BPFTRACE_SCRIPT: &str = include_str!("tcp_probe.bt");

/// The dashboard's terminal.
const COLS: u16 = 120;
const ROWS: u16 = 40;
/// Text of the dashboard's help overlay (its title). A single word: the dashboard redraws only
/// the cells that change, so spaces may be skipped with a cursor move.
const HELP_TEXT: &str = "keys";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Observer {
    /// Nothing attached: the slots every other one is compared with.
    Baseline,
    /// Nothing attached either, but measured as an observer is: how far apart two slots with
    /// nothing attached come out, i.e. the noise of the measurement.
    Control,
    Stream,
    Dashboard,
    Bpftrace,
    SsPoll,
}

impl Observer {
    /// Those measured against the baseline.
    pub(crate) const MEASURED: [Observer; 5] =
        [Observer::Control, Observer::Stream, Observer::Dashboard, Observer::Bpftrace, Observer::SsPoll];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Observer::Baseline => "nothing (baseline)",
            Observer::Control => "nothing (A/A control)",
            Observer::Stream => "bbrscope stream > /dev/null (tracepoint)",
            Observer::Dashboard => "bbrscope top (tracepoint, terminal)",
            Observer::Bpftrace => "bpftrace, per-flow map",
            Observer::SsPoll => "ss -tin every 100 ms",
        }
    }
}

/// What starting an observer needs.
pub(super) struct Setup<'a> {
    pub bbrscope: &'a Path,
    pub pinger: &'a Pinger,
    /// None: bpftrace is not installed.
    pub bpftrace: Option<Bpftrace>,
}

/// How the benchmark runs bpftrace's tcp_probe script ([`BPFTRACE_SCRIPT`]).
pub(super) struct Bpftrace {
    pub script: PathBuf,
    /// tracefs is not mounted on the host: bpftrace runs in a mount namespace of its own with
    /// tracefs mounted there. Each `exec` keeps the process id the benchmark measures.
    pub private_tracefs: bool,
}

impl Bpftrace {
    pub(super) fn command(&self) -> Command {
        let mut cmd = if self.private_tracefs {
            let mut cmd = Command::new("unshare");
            cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg("mount -t tracefs nodev /sys/kernel/tracing && exec bpftrace \"$0\"")
                .arg(&self.script);
            cmd
        } else {
            let mut cmd = Command::new("bpftrace");
            cmd.arg(&self.script);
            cmd
        };
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }
}

/// Kills a child if the benchmark dies first, so no observer outlives it. (The signal follows
/// the thread that spawned the child: observers are spawned from the benchmark's main thread.)
pub(super) fn tie_to_parent(cmd: &mut Command) -> &mut Command {
    // SAFETY: pre_exec: the closure only calls prctl(2), async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// An observer in its own process, whose tcp_probe program is attached.
pub(super) struct Traced {
    pub child: Child,
    pub pty: Option<Pty>,
    stderr: Option<JoinHandle<String>>,
    pub probe: ProbeProgram,
    /// bbrscope's counters (bpftrace has none).
    pub counters: Option<Counters>,
}

impl Traced {
    pub(super) const STOP_WAIT: Duration = Duration::from_secs(10);

    /// Spawns `cmd` (stdin and stdout already chosen) and waits until its tcp_probe program
    /// runs: found among its file descriptors and seen to fire on a ping.
    pub(super) fn spawn(mut cmd: Command, pinger: &Pinger) -> Result<Traced> {
        let child = tie_to_parent(cmd.stderr(Stdio::piped())).spawn().with_context(|| format!("starting {cmd:?}"))?;
        Self::attach(child, None, pinger)
    }

    /// Spawns `cmd` on a terminal of its own.
    pub(super) fn spawn_on_terminal(mut cmd: Command, pinger: &Pinger) -> Result<Traced> {
        let (child, pty) = Pty::spawn(tie_to_parent(&mut cmd), COLS, ROWS)?;
        Self::attach(child, Some(pty), pinger)
    }

    fn attach(mut child: Child, pty: Option<Pty>, pinger: &Pinger) -> Result<Traced> {
        let mut stderr = child.stderr.take().map(|mut e| {
            thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        let start = Instant::now();
        let probe = loop {
            if let Some(status) = child.try_wait()? {
                bail!("observer exited ({status}): {}", said(&mut stderr, pty.as_ref()));
            }
            if let Some(p) = ProbeProgram::find(child.id())? {
                // A segment on an open connection runs tcp_probe; a new connection runs the
                // sock_ops programs, which see only connections opened after they attached.
                pinger.ping()?;
                pinger.connect()?;
                if p.stats()?.runs > 0 {
                    break p;
                }
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("observer {} did not attach to tcp_probe within 30 s", child.id());
            }
            thread::sleep(Duration::from_millis(20));
        };
        let counters = Counters::find(child.id()).ok();
        Ok(Traced { child, pty, stderr, probe, counters })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fails, with what the observer said, if it has exited.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("observer exited ({status}): {}", said(&mut self.stderr, self.pty.as_ref()));
        }
        Ok(())
    }

    /// Asks the observer to stop (SIGTERM, which bbrscope and bpftrace handle) and returns how
    /// long it took to exit, or None if it had not exited after [`Self::STOP_WAIT`] and was
    /// killed.
    pub(super) fn stop(mut self) -> Result<Option<Duration>> {
        self.check_alive()?;
        // SAFETY: kill(2) on the pid of our own child, not yet reaped (so not reused).
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while self.child.try_wait()?.is_none() {
            if start.elapsed() > Self::STOP_WAIT {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(5));
        }
        Ok(Some(start.elapsed()))
    }

    /// [`Self::stop`], failing if the observer did not exit in time.
    pub(super) fn stop_in_time(self) -> Result<()> {
        let pid = self.pid();
        match self.stop()? {
            Some(_) => Ok(()),
            None => bail!("observer {pid} did not exit within {:?} of SIGTERM", Self::STOP_WAIT),
        }
    }

    /// Times the dashboard's answer to a key: opens its help, waits for it on the screen, closes
    /// it again. None if the help did not appear within `timeout`.
    pub(super) fn key_latency(&self, timeout: Duration) -> Result<Option<Duration>> {
        let pty = self.pty.as_ref().context("key latency needs the dashboard's terminal")?;
        let since = pty.position();
        pty.send(b"?")?;
        let latency = pty.wait_for(since, HELP_TEXT, timeout);
        // Any key closes the help.
        pty.send(b"\x1b")?;
        Ok(latency)
    }
}

/// What an exited observer wrote to its standard error (or its terminal).
fn said(stderr: &mut Option<JoinHandle<String>>, pty: Option<&Pty>) -> String {
    let text = match (stderr.take(), pty) {
        (Some(h), _) => h.join().unwrap_or_default(),
        (None, Some(pty)) => pty.tail_text(2000),
        (None, None) => String::new(),
    };
    text.trim().to_string()
}

impl Drop for Traced {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The observer path of the throughput, drops and scale parts, unless `args` choose another:
/// they attach to flows already running, which only the tracepoint path samples from the kernel
/// (the sock_ops path polls such flows through sock_diag). The sock_ops path is measured by the
/// cost, short-flow and sockets parts, on flows opened after it attached.
const OLD_PARTS_PATH: [&str; 2] = ["--observer", "tracepoint"];

fn with_path<'a>(args: &[&'a str]) -> Vec<&'a str> {
    if args.contains(&"--observer") { args.to_vec() } else { [&OLD_PARTS_PATH[..], args].concat() }
}

/// `bbrscope stream` with its records going to `stdout`.
pub(super) fn bbrscope_stream(setup: &Setup, args: &[&str], stdout: Stdio) -> Result<Traced> {
    let mut cmd = Command::new(setup.bbrscope);
    cmd.arg("stream").args(with_path(args)).stdin(Stdio::null()).stdout(stdout);
    Traced::spawn(cmd, setup.pinger)
}

/// `bbrscope top` on a terminal.
pub(super) fn bbrscope_top(setup: &Setup, args: &[&str]) -> Result<Traced> {
    let mut cmd = Command::new(setup.bbrscope);
    cmd.arg("top").args(with_path(args)).env("TERM", "xterm-256color");
    Traced::spawn_on_terminal(cmd, setup.pinger)
}

/// `ss -tin` run every 100 ms, its CPU time (collected from each run) and number of polls.
pub(super) struct SsPoller {
    stop: Arc<AtomicBool>,
    cpu_ns: Arc<AtomicU64>,
    thread: JoinHandle<Result<()>>,
}

impl SsPoller {
    pub(super) const PERIOD: Duration = Duration::from_millis(100);

    /// Polls the sockets of the namespace at `netns` (None: this one).
    pub(super) fn start(netns: Option<String>) -> SsPoller {
        let (stop, cpu_ns) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (stopped, cpu) = (stop.clone(), cpu_ns.clone());
        let thread = thread::spawn(move || {
            if let Some(path) = netns {
                net::setns(&path)?;
            }
            let mut next = Instant::now();
            while !stopped.load(Ordering::Relaxed) {
                let child = Command::new("ss").arg("-tin").stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
                cpu.fetch_add(reap(child)?.as_nanos() as u64, Ordering::Relaxed);
                next += Self::PERIOD;
                // A poll that overruns its period starts the next one at once, as exporters do.
                next = next.max(Instant::now());
                thread::sleep(next - Instant::now());
            }
            Ok(())
        });
        SsPoller { stop, cpu_ns, thread }
    }

    pub(super) fn cpu_time(&self) -> Duration {
        Duration::from_nanos(self.cpu_ns.load(Ordering::Relaxed))
    }

    pub(super) fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().map_err(|_| anyhow::anyhow!("ss poller panicked"))?
    }
}

/// Waits for a child and returns the CPU time it used.
fn reap(child: Child) -> Result<Duration> {
    let mut status = 0;
    // SAFETY: rusage is plain integers, for which all-zero bytes are valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4(2) on our own child, writing into two live locals.
    if unsafe { libc::wait4(child.id() as i32, &raw mut status, 0, &raw mut usage) } < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
}

/// An observer while it watches.
pub(super) enum Running {
    Nothing,
    Traced(Traced),
    Ss(SsPoller),
}

/// What an observer has consumed so far (cumulative; the benchmark takes differences).
#[derive(Clone, Copy, Default)]
pub(super) struct Consumed {
    pub cpu: Option<Duration>,
    pub probe: Option<RunStats>,
    pub counters: Option<CounterValues>,
}

impl Running {
    pub(super) fn start(observer: Observer, setup: &Setup, netns: Option<String>) -> Result<Running> {
        Ok(match observer {
            Observer::Baseline | Observer::Control => Running::Nothing,
            Observer::Stream => Running::Traced(bbrscope_stream(setup, &[], Stdio::null())?),
            Observer::Dashboard => Running::Traced(bbrscope_top(setup, &[])?),
            Observer::Bpftrace => {
                let cmd = setup.bpftrace.as_ref().context("bpftrace is not installed")?.command();
                Running::Traced(Traced::spawn(cmd, setup.pinger)?)
            }
            Observer::SsPoll => Running::Ss(SsPoller::start(netns)),
        })
    }

    pub(super) fn consumed(&mut self) -> Result<Consumed> {
        Ok(match self {
            Running::Nothing => Consumed::default(),
            Running::Ss(p) => Consumed { cpu: Some(p.cpu_time()), ..Consumed::default() },
            Running::Traced(t) => {
                t.check_alive()?;
                Consumed {
                    cpu: Some(measure::cpu_time(t.pid())?),
                    probe: Some(t.probe.stats()?),
                    counters: t.counters.as_ref().map(Counters::read).transpose()?,
                }
            }
        })
    }

    /// The observer's own tcp_probe program, to tell it from others on the machine.
    pub(super) fn probe_id(&self) -> Option<u32> {
        match self {
            Running::Traced(t) => Some(t.probe.id),
            _ => None,
        }
    }

    /// Stops the observer; false if it had to be killed after not exiting in time (a finding for
    /// the report, not a reason to abandon the benchmark).
    pub(super) fn stop(self) -> Result<bool> {
        match self {
            Running::Nothing => Ok(true),
            Running::Traced(t) => Ok(t.stop()?.is_some()),
            Running::Ss(p) => p.stop().map(|()| true),
        }
    }
}

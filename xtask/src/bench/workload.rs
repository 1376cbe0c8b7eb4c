//! The traffic the benchmark measures: bulk TCP flows, each sender writing as fast as it can to
//! a receiver that counts what it reads, on loopback or across the veth pair, with a chosen
//! congestion-control algorithm.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, Shutdown, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
};

use anyhow::{Context as _, Result, bail};
use bbrscope_common::sockopt;
use bbrscope_emulator as emulator;
use serde::Serialize;

use super::net::{Netns, Veth};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PathKind {
    Loopback,
    Veth,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Workload {
    pub path: PathKind,
    pub flows: usize,
    pub cc: &'static str,
}

impl Workload {
    pub(crate) fn label(&self) -> String {
        let path = match self.path {
            PathKind::Loopback => "loopback",
            PathKind::Veth => "veth",
        };
        let flows = if self.flows == 1 { "1 flow".to_string() } else { format!("{} flows", self.flows) };
        format!("{path}, {flows}, {}", self.cc)
    }
}

/// A namespace one end of a flow lives in.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    /// This process's own.
    Here,
    /// One end of the veth pair.
    Veth(&'a Netns),
    /// One end of the demo's emulated path.
    Emulated(&'a emulator::Netns),
}

impl Side<'_> {
    /// Runs `f` in this namespace: sockets it makes stay there.
    pub(super) fn run<T: Send + 'static>(self, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
        match self {
            Side::Here => f(),
            Side::Veth(ns) => ns.run(f),
            Side::Emulated(ns) => ns.run(f),
        }
    }

    /// The veth end's path under /run/netns (what `ss` is pointed at).
    pub(super) fn veth_path(self) -> Option<String> {
        match self {
            Side::Veth(ns) => Some(ns.path()),
            Side::Here | Side::Emulated(_) => None,
        }
    }
}

/// Where each end of a flow lives, and the receiver's address.
#[derive(Clone, Copy)]
pub(super) struct Ends<'a> {
    pub sender: Side<'a>,
    pub receiver: Side<'a>,
    pub receiver_ip: Ipv4Addr,
}

impl<'a> Ends<'a> {
    pub(super) fn of(path: PathKind, veth: Option<&'a Veth>) -> Result<Ends<'a>> {
        Ok(match path {
            PathKind::Loopback => Ends { sender: Side::Here, receiver: Side::Here, receiver_ip: Ipv4Addr::LOCALHOST },
            PathKind::Veth => {
                let v = veth.context("veth workloads need the veth pair")?;
                Ends { sender: Side::Veth(&v.sender), receiver: Side::Veth(&v.receiver), receiver_ip: v.receiver_ip }
            }
        })
    }

    /// The two ends of an emulated path.
    pub(super) fn emulated(link: &'a emulator::Link) -> Ends<'a> {
        Ends {
            sender: Side::Emulated(&link.sender),
            receiver: Side::Emulated(&link.receiver),
            receiver_ip: link.receiver_addr,
        }
    }
}

fn set_cc(stream: &TcpStream, cc: &str) -> Result<()> {
    // Root may pick any available algorithm per socket, also one missing from
    // net.ipv4.tcp_allowed_congestion_control (cubic on these machines).
    sockopt::set_congestion(stream, cc).with_context(|| format!("setsockopt(TCP_CONGESTION, {cc})"))
}

const WRITE_CHUNK: usize = 128 << 10;
const READ_BUF: usize = 256 << 10;

/// Bulk flows in progress.
pub(super) struct Bulk {
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Bulk {
    /// `flows` connections sending as fast as they can, or paced by the kernel at `max_bps`
    /// each (SO_MAX_PACING_RATE: TCP's internal pacing, no qdisc needed).
    pub(super) fn start(flows: usize, cc: &'static str, ends: Ends, max_bps: Option<u64>) -> Result<Bulk> {
        let ip = ends.receiver_ip;
        let listener = ends.receiver.run(move || Ok(TcpListener::bind((ip, 0))?))?;
        let addr = listener.local_addr()?;
        let senders = ends.sender.run(move || {
            (0..flows)
                .map(|_| {
                    let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
                    set_cc(&s, cc)?;
                    if let Some(bps) = max_bps {
                        sockopt::set_u64(&s, libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, bps / 8)
                            .context("setsockopt(SO_MAX_PACING_RATE)")?;
                    }
                    Ok(s)
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let (received, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        // Each flow's sender and receiver on CPUs of their own, the same in every run: left to
        // the scheduler, a loopback flow runs at very different speeds depending on whether both
        // ends share a CPU, which swamps what an observer costs.
        let cpus = allowed_cpus()?;
        let cpu = |i: usize| cpus[i % cpus.len()];
        let mut threads = Vec::with_capacity(2 * flows);
        for i in 0..flows {
            let (conn, _) = listener.accept()?;
            let (received, cpu) = (received.clone(), cpu(2 * i + 1));
            threads.push(thread::spawn(move || {
                pin_current_thread(cpu);
                read_counting(conn, &received);
            }));
        }
        for (i, s) in senders.into_iter().enumerate() {
            let (stop, cpu) = (stop.clone(), cpu(2 * i));
            threads.push(thread::spawn(move || {
                pin_current_thread(cpu);
                write_until(s, &stop);
            }));
        }
        Ok(Bulk { received, stop, threads })
    }

    /// Bytes the receivers have read so far.
    pub(super) fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stops the senders; receivers read what is in flight until end of stream.
    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a bit array, for which all-zero bytes are the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity(2) writes at most size_of::<cpu_set_t>() bytes into the local set.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw mut set) } != 0 {
        bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads bit c of the set, c < CPU_SETSIZE.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
    if cpus.is_empty() {
        bail!("no CPU in this process's affinity mask");
    }
    Ok(cpus)
}

/// Best effort: an unpinned thread still moves data, only less predictably.
fn pin_current_thread(cpu: usize) {
    // SAFETY: cpu_set_t is a bit array, for which all-zero bytes are the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of the local set (cpu < CPU_SETSIZE, from allowed_cpus);
    // sched_setaffinity reads it.
    unsafe {
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw const set);
    }
}

fn read_counting(mut conn: TcpStream, received: &AtomicU64) {
    let mut buf = vec![0u8; READ_BUF];
    while let Ok(n) = conn.read(&mut buf) {
        if n == 0 {
            break;
        }
        received.fetch_add(n as u64, Ordering::Relaxed);
    }
}

fn write_until(mut s: TcpStream, stop: &AtomicBool) {
    let chunk = vec![0x5au8; WRITE_CHUNK];
    while !stop.load(Ordering::Relaxed) {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Write);
}

/// A quiet loopback connection that sends one byte on demand: a way to make tcp_probe fire, to
/// tell when an observer's program is attached; and new connections on demand, for sock_ops.
pub(super) struct Pinger {
    client: TcpStream,
    server: TcpStream,
    listener: TcpListener,
}

impl Pinger {
    pub(super) fn new() -> Result<Pinger> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, _) = listener.accept()?;
        Ok(Pinger { client, server, listener })
    }

    /// Opens a connection, sends a byte each way, and closes it.
    pub(super) fn connect(&self) -> Result<()> {
        let mut client = TcpStream::connect(self.listener.local_addr()?)?;
        let (mut server, _) = self.listener.accept()?;
        client.write_all(b"p")?;
        server.read_exact(&mut [0u8; 1])?;
        server.write_all(b"p")?;
        client.read_exact(&mut [0u8; 1])?;
        Ok(())
    }

    pub(super) fn ping(&self) -> Result<()> {
        (&self.client).write_all(b"p")?;
        (&self.server).read_exact(&mut [0u8; 1])?;
        Ok(())
    }
}

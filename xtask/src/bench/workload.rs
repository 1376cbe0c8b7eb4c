//! The traffic the benchmark measures: bulk TCP flows, each sender writing as fast as it can to
//! a receiver that counts what it reads, on loopback or across the veth pair, with a chosen
//! congestion-control algorithm.

use std::{
    io::{Read as _, Write as _},
    net::{Ipv4Addr, Shutdown, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::{self, JoinHandle},
};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use super::net::{Netns, Veth};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    Loopback,
    Veth,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Workload {
    pub path: PathKind,
    pub flows: usize,
    pub cc: &'static str,
}

impl Workload {
    pub fn label(&self) -> String {
        let path = match self.path {
            PathKind::Loopback => "loopback",
            PathKind::Veth => "veth",
        };
        let flows = if self.flows == 1 { "1 flow".to_string() } else { format!("{} flows", self.flows) };
        format!("{path}, {flows}, {}", self.cc)
    }
}

/// Where each end of a flow lives: namespaces (None: this one) and the receiver's address.
#[derive(Clone, Copy)]
pub struct Ends<'a> {
    pub sender: Option<&'a Netns>,
    pub receiver: Option<&'a Netns>,
    pub receiver_ip: Ipv4Addr,
}

impl<'a> Ends<'a> {
    pub fn of(path: PathKind, veth: Option<&'a Veth>) -> Result<Ends<'a>> {
        Ok(match path {
            PathKind::Loopback => Ends { sender: None, receiver: None, receiver_ip: Ipv4Addr::LOCALHOST },
            PathKind::Veth => {
                let v = veth.context("veth workloads need the veth pair")?;
                Ends { sender: Some(&v.sender), receiver: Some(&v.receiver), receiver_ip: v.receiver_ip }
            }
        })
    }
}

/// Runs `f` in `ns`, or here when there is none.
fn within<T: Send + 'static>(ns: Option<&Netns>, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match ns {
        Some(ns) => ns.run(f),
        None => f(),
    }
}

pub fn set_cc(stream: &TcpStream, cc: &str) -> Result<()> {
    // Root may pick any available algorithm per socket, also one missing from
    // net.ipv4.tcp_allowed_congestion_control (cubic on these machines).
    let r = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            cc.as_ptr().cast(),
            cc.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        bail!("setsockopt(TCP_CONGESTION, {cc}): {}", std::io::Error::last_os_error());
    }
    Ok(())
}

const WRITE_CHUNK: usize = 128 << 10;
const READ_BUF: usize = 256 << 10;

/// Bulk flows in progress.
pub struct Bulk {
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Bulk {
    pub fn start(flows: usize, cc: &'static str, ends: Ends) -> Result<Bulk> {
        let ip = ends.receiver_ip;
        let listener = within(ends.receiver, move || Ok(TcpListener::bind((ip, 0))?))?;
        let addr = listener.local_addr()?;
        let senders = within(ends.sender, move || {
            (0..flows)
                .map(|_| {
                    let s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
                    set_cc(&s, cc)?;
                    Ok(s)
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let (received, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let mut threads = Vec::with_capacity(2 * flows);
        for _ in 0..flows {
            let (conn, _) = listener.accept()?;
            let received = received.clone();
            threads.push(thread::spawn(move || read_counting(conn, &received)));
        }
        for s in senders {
            let stop = stop.clone();
            threads.push(thread::spawn(move || write_until(s, &stop)));
        }
        Ok(Bulk { received, stop, threads })
    }

    /// Bytes the receivers have read so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Stops the senders; receivers read what is in flight until end of stream.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
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
/// tell when an observer's program is attached.
pub struct Pinger {
    client: TcpStream,
    server: TcpStream,
}

impl Pinger {
    pub fn new() -> Result<Pinger> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let client = TcpStream::connect(listener.local_addr()?)?;
        let (server, _) = listener.accept()?;
        Ok(Pinger { client, server })
    }

    pub fn ping(&self) -> Result<()> {
        (&self.client).write_all(b"p")?;
        (&self.server).read_exact(&mut [0u8; 1])?;
        Ok(())
    }
}

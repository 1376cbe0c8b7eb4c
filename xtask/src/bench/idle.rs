//! Many concurrent, mostly idle TCP flows: each sends a few bytes every couple of seconds, so
//! every flow stays active for an observer without adding load. The far ends live in a separate
//! process (`xtask idle-peer`): both ends of 10,000 flows in one process would exceed the
//! open-file limit root has here (20,000, not raisable without CAP_SYS_RESOURCE).

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd as _,
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use bbrscope_common::sockopt;

use super::scenarios::tie_to_parent;

/// `xtask idle-peer`: accepts connections on a loopback port (printed on stdout), reads and
/// discards what arrives, and closes connections the other end closed. Runs until killed.
pub(super) fn peer_main() -> Result<()> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    // std listens with a backlog of 128; listening again raises it, so a burst of 10,000
    // connects is not dropped and retried a second later.
    // SAFETY: listen(2) on the fd of a listener this function owns; no memory is passed.
    if unsafe { libc::listen(listener.as_raw_fd(), 4096) } != 0 {
        bail!("listen: {}", std::io::Error::last_os_error());
    }
    listener.set_nonblocking(true)?;
    println!("{}", listener.local_addr()?.port());
    std::io::stdout().flush()?;

    let ep = Epoll::new()?;
    let listener_fd = listener.as_raw_fd();
    ep.add(listener_fd)?;
    let mut conns: HashMap<i32, TcpStream> = HashMap::new();
    let mut buf = [0u8; 4096];
    let mut ready = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    loop {
        for ev in ep.wait(&mut ready)? {
            let fd = ev.u64 as i32;
            if fd == listener_fd {
                while let Ok((conn, _)) = listener.accept() {
                    conn.set_nonblocking(true)?;
                    ep.add(conn.as_raw_fd())?;
                    conns.insert(conn.as_raw_fd(), conn);
                }
                continue;
            }
            if conns.get(&fd).is_some_and(|conn| drain(conn, &mut buf)) {
                // Closing the socket also removes it from the epoll set.
                conns.remove(&fd);
            }
        }
    }
}

/// Reads what is there; true when the other end has closed.
fn drain(mut conn: &TcpStream, buf: &mut [u8]) -> bool {
    loop {
        match conn.read(buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

struct Epoll(i32);

impl Epoll {
    fn new() -> Result<Epoll> {
        // SAFETY: epoll_create1(2) takes no pointers; the fd it returns is owned by the Epoll made from it.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            bail!("epoll_create1: {}", std::io::Error::last_os_error());
        }
        Ok(Epoll(fd))
    }

    fn add(&self, fd: i32) -> Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: epoll_ctl(2) on our epoll fd with a pointer to a live, initialised epoll_event.
        if unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &raw mut ev) } != 0 {
            bail!("epoll_ctl: {}", std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn wait<'a>(&self, events: &'a mut [libc::epoll_event]) -> Result<&'a [libc::epoll_event]> {
        // SAFETY: epoll_wait(2) writes at most events.len() entries into the slice it is given.
        let n = unsafe { libc::epoll_wait(self.0, events.as_mut_ptr(), events.len() as i32, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(&events[..0]);
            }
            bail!("epoll_wait: {e}");
        }
        Ok(&events[..n as usize])
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: close(2) of the fd this Epoll owns, once, when it is dropped.
        unsafe { libc::close(self.0) };
    }
}

/// The `idle-peer` process; killed on drop.
pub(super) struct Peer {
    child: Child,
    pub addr: SocketAddr,
}

impl Peer {
    pub(super) fn start() -> Result<Peer> {
        // This very binary, even if a rebuild has replaced the file since it started.
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg("idle-peer").stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = tie_to_parent(&mut cmd).spawn().context("starting xtask idle-peer")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("idle-peer stdout")?).read_line(&mut line)?;
        let port: u16 = line.trim().parse().with_context(|| format!("idle-peer said {line:?}, not a port"))?;
        Ok(Peer { child, addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)) })
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes each idle flow sends per round.
const TRICKLE: [u8; 64] = [0x2e; 64];
/// Flows written back to back before pausing, so writes spread over each round.
const BATCH: usize = 100;

/// Idle flows to a [`Peer`], each sending [`TRICKLE`] once per `period`; closed on drop.
pub(super) struct Flows {
    stop: Arc<AtomicBool>,
    trickle: Option<JoinHandle<()>>,
}

impl Flows {
    pub(super) fn open(to: SocketAddr, n: usize, period: Duration) -> Result<Flows> {
        let mut streams = Vec::with_capacity(n);
        for i in 0..n {
            let s = TcpStream::connect(to).with_context(|| format!("idle flow {i} of {n} to {to}"))?;
            s.set_nonblocking(true)?;
            // Closing then resets the connection: no TIME_WAIT sockets hold on to the ports.
            sockopt::set_reset_on_close(&s).context("setsockopt(SO_LINGER)")?;
            streams.push(s);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let trickle = thread::spawn(move || trickle(&streams, period, &stopped));
        Ok(Flows { stop, trickle: Some(trickle) })
    }
}

impl Drop for Flows {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.trickle.take() {
            let _ = t.join();
        }
    }
}

fn trickle(streams: &[TcpStream], period: Duration, stop: &AtomicBool) {
    let pause = period / streams.len().div_ceil(BATCH).max(1) as u32;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        for batch in streams.chunks(BATCH) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            for mut s in batch {
                // A full send buffer (WouldBlock) just skips this round's bytes.
                let _ = s.write(&TRICKLE);
            }
            next += pause;
            thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }
}

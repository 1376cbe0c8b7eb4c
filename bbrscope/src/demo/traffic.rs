//! bbrscope's own bulk transfer: a TCP sender in the link's sender namespace with its algorithm
//! set per socket (TCP_CONGESTION; the namespace's and the machine's defaults are never touched),
//! and a receiver counting what the application actually gets (goodput).

use std::{
    io::{ErrorKind, Read as _, Write as _},
    net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering::Relaxed},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow};
use bbrscope_emulator::Link;
use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};

use crate::sys::sockopt;

/// How long to wait for the handshake (SYNs cross the lossy direction).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How often blocked socket calls look at the stop flag.
const POLL: Duration = Duration::from_millis(100);
const CHUNK: usize = 256 << 10;

/// The sender's view of the connection at one moment (`TCP_INFO`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpStats {
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub(crate) retransmits: u32,
    /// Segments with data sent, retransmissions included (`tcpi_data_segs_out`).
    pub(crate) data_segs_out: u32,
    pub(crate) mss: u32,
}

/// One bulk flow over one emulated link.
pub(crate) struct BulkFlow {
    pub(crate) cc: String,
    /// The sender's address, as the observer reports it.
    pub(crate) local: SocketAddr,
    stream: Arc<TcpStream>,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl BulkFlow {
    /// Connects one sender per algorithm in `ccs` to one receiver on `port` across `link`
    /// (several senders on one link share its bottleneck); sends nothing yet.
    pub(crate) fn connect_all(link: &Link, port: u16, ccs: &[String]) -> Result<Vec<Self>> {
        let to = SocketAddrV4::new(link.receiver_addr, port);
        let listener = link.receiver.run(|| TcpListener::bind(to).with_context(|| format!("listening on {to}")))?;
        ccs.iter().map(|cc| Self::connect(&listener, link, to, cc)).collect()
    }

    fn connect(listener: &TcpListener, link: &Link, to: SocketAddrV4, cc: &str) -> Result<Self> {
        let stream = link.sender.run(|| connect_with_cc(to, cc))?;
        let local = stream.local_addr()?;
        // connect() returned after the handshake, so this is the one connection waiting; the
        // check guards the receiver-to-sender pairing that goodput is counted by.
        let (conn, peer) = listener.accept().context("accepting the demo connection")?;
        if peer != local {
            return Err(anyhow!("the demo receiver accepted {peer}, expected {local}"));
        }
        stream.set_write_timeout(Some(POLL))?;
        conn.set_read_timeout(Some(POLL))?;
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let (r, s) = (received.clone(), stop.clone());
        let reader = std::thread::Builder::new().name("bbrscope-recv".into()).spawn(move || receive(conn, &r, &s))?;
        Ok(BulkFlow { cc: cc.to_string(), local, stream: Arc::new(stream), received, stop, threads: vec![reader] })
    }

    /// Starts sending as fast as the algorithm lets it.
    pub(crate) fn start(&mut self) -> Result<()> {
        let (stream, stop) = (self.stream.clone(), self.stop.clone());
        self.threads.push(std::thread::Builder::new().name("bbrscope-send".into()).spawn(move || {
            let chunk = vec![0u8; CHUNK];
            while !stop.load(Relaxed) {
                match (&*stream).write(&chunk) {
                    Ok(_) => {}
                    Err(e)
                        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                    }
                    Err(_) => break,
                }
            }
        })?);
        Ok(())
    }

    /// Bytes the receiving application has read so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Relaxed)
    }

    pub(crate) fn tcp_stats(&self) -> Result<TcpStats> {
        let info = sockopt::tcp_info(&self.stream).context("reading TCP_INFO")?;
        Ok(TcpStats { retransmits: info.total_retrans, data_segs_out: info.data_segs_out, mss: info.snd_mss })
    }
}

/// Stops both ends. The sender resets the connection (SO_LINGER 0) when the last handle closes,
/// rather than draining its buffer through the emulated path.
impl Drop for BulkFlow {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        let _ = sockopt::set_reset_on_close(&self.stream);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn receive(mut conn: TcpStream, received: &AtomicU64, stop: &AtomicBool) {
    let mut buf = vec![0u8; CHUNK];
    while !stop.load(Relaxed) {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                received.fetch_add(n as u64, Relaxed);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => break,
        }
    }
}

/// A TCP connection to `to` whose congestion control is `cc`, chosen before the handshake.
fn connect_with_cc(to: SocketAddrV4, cc: &str) -> Result<TcpStream> {
    let sock = socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::CLOEXEC, None)
        .map_err(std::io::Error::from)
        .context("creating a socket")?;
    sockopt::set_congestion(&sock, cc)
        .with_context(|| format!("setting congestion control {cc} on the demo socket (TCP_CONGESTION)"))?;
    // connect() honours the send timeout.
    sockopt::set_send_timeout(&sock, CONNECT_TIMEOUT)?;
    rustix::net::connect(&sock, &SocketAddr::V4(to))
        .map_err(|e| anyhow!("connecting across the emulated link to {to}: {}", std::io::Error::from(e)))?;
    Ok(TcpStream::from(sock))
}

//! Responses of the size asked: a server that answers "SIZE\n" with SIZE bytes, its clients on
//! loopback or behind an emulated path (`bbrscope_emulator`), for the tests that run experiments
//! on real connections (experiment.rs, ansible.rs).

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    thread,
    time::{Duration, Instant},
};

use super::set_cc;

/// A server answering "SIZE\n" with SIZE bytes, then closing (an HTTP-like response).
pub(crate) fn serve(listener: TcpListener) {
    serve_setting(listener, None);
}

/// [`serve`], setting each accepted connection's algorithm to `cc` first, as nginx or HAProxy
/// can be configured to.
pub(crate) fn serve_setting(listener: TcpListener, cc: Option<&'static str>) {
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(c) = conn else { break };
            if let Some(cc) = cc {
                set_cc(&c, cc);
            }
            thread::spawn(move || respond(c));
        }
    });
}

/// Answers one request of [`serve`].
pub(crate) fn respond(mut c: TcpStream) {
    let mut line = String::new();
    if BufReader::new(&mut c).read_line(&mut line).is_err() {
        return;
    }
    let size: usize = line.trim().parse().unwrap_or(0);
    let _ = c.write_all(&vec![0x5a; size]);
}

/// One request; the client's local address and the bytes it got.
pub(crate) fn fetch(to: SocketAddr, size: usize) -> (SocketAddr, usize) {
    let mut c = TcpStream::connect(to).unwrap();
    let local = c.local_addr().unwrap();
    c.write_all(format!("{size}\n").as_bytes()).unwrap();
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).unwrap();
    (local, buf.len())
}

/// A client population behind its own emulated path: the server in the path's sender namespace
/// answering on `port`, the clients in its receiver namespace.
pub(crate) struct Population {
    pub(crate) link: bbrscope_emulator::Link,
    pub(crate) server: SocketAddr,
}

pub(crate) fn population(index: u8, rtt_ms: u64, loss: f64, port: u16) -> Population {
    let (p, listener) = emulated(index, rtt_ms, loss, port);
    serve(listener);
    p
}

/// A [`Population`]'s path and its server's listener, not yet served.
pub(crate) fn emulated(index: u8, rtt_ms: u64, loss: f64, port: u16) -> (Population, TcpListener) {
    use bbrscope_emulator::{LinkConfig, LossSpec};
    let rate_bps = 20_000_000;
    let rtt = Duration::from_millis(rtt_ms);
    let bdp = (rate_bps as f64 / 8.0 * rtt.as_secs_f64()) as u64;
    let cfg = LinkConfig {
        rate_bps,
        rtt,
        buffer_bytes: bdp.max(64 << 10),
        loss: LossSpec { rate: loss, burst: None },
        seed: u64::from(index),
    };
    emulated_as(index, &cfg, port)
}

/// `threads` clients of `p` requesting `sizes` in turn until `until`; their log: (client
/// address, size asked, bytes got).
pub(crate) fn load(
    p: &Population,
    threads: usize,
    sizes: &'static [usize],
    until: Instant,
) -> Vec<(SocketAddr, usize, usize)> {
    load_paced(p, threads, sizes, until, Duration::ZERO)
}

/// [`load`] with a pause after each response (a client population's own rate).
pub(crate) fn load_paced(
    p: &Population,
    threads: usize,
    sizes: &'static [usize],
    until: Instant,
    pause: Duration,
) -> Vec<(SocketAddr, usize, usize)> {
    load_while(p, threads, sizes, pause, &|| Instant::now() < until)
}

/// [`load_paced`] for as long as `go` says.
pub(crate) fn load_while(
    p: &Population,
    threads: usize,
    sizes: &'static [usize],
    pause: Duration,
    go: &(dyn Fn() -> bool + Sync),
) -> Vec<(SocketAddr, usize, usize)> {
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut log = Vec::new();
                    let mut i = t;
                    while go() {
                        let size = sizes[i % sizes.len()];
                        i += 1;
                        let server = p.server;
                        let mut c = p.link.receiver.run(move || Ok(TcpStream::connect(server)?)).unwrap();
                        let local = c.local_addr().unwrap();
                        c.write_all(format!("{size}\n").as_bytes()).unwrap();
                        let mut got = 0;
                        let mut buf = vec![0u8; 1 << 16];
                        while let Ok(n) = c.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            got += n;
                        }
                        log.push((local, size, got));
                        thread::sleep(pause);
                    }
                    log
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    })
}

impl Population {
    /// `n` more client addresses behind the path (198.18.<link>.10 and up, in its receiver
    /// namespace, beside the link's own .2), so that a client design has clients to hash: the
    /// sender's route to the link's /24 reaches them all through the emulated path.
    pub(crate) fn clients(&self, n: u8) -> Vec<std::net::Ipv4Addr> {
        let [a, b, link, _] = self.link.receiver_addr.octets();
        let addrs: Vec<std::net::Ipv4Addr> = (0..n).map(|k| std::net::Ipv4Addr::new(a, b, link, 10 + k)).collect();
        for addr in &addrs {
            let cidr = format!("{addr}/32");
            // The child inherits the namespace of the thread that starts it.
            let status = self
                .link
                .receiver
                .run(move || {
                    Ok(std::process::Command::new("ip").args(["-4", "addr", "add", &cidr, "dev", "emu0"]).status()?)
                })
                .unwrap();
            assert!(status.success(), "ip addr add {addr} in the emulated path's receiver namespace");
        }
        addrs
    }

    /// A connection from `local` (one of [`Population::clients`]) to the server.
    pub(crate) fn connect_from(&self, local: std::net::Ipv4Addr) -> TcpStream {
        use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
        let server = self.server;
        self.link
            .receiver
            .run(move || {
                let fd = socket(AddressFamily::INET, SocketType::STREAM, None)?;
                bind(&fd, &SocketAddr::new(local.into(), 0))?;
                connect(&fd, &server)?;
                Ok(TcpStream::from(fd))
            })
            .unwrap()
    }
}

/// [`emulated`] with the path `cfg` describes.
pub(crate) fn emulated_as(index: u8, cfg: &bbrscope_emulator::LinkConfig, port: u16) -> (Population, TcpListener) {
    let link = bbrscope_emulator::Link::new(index, cfg).expect("emulated path");
    let server = SocketAddr::new(link.sender_addr.into(), port);
    let listener = link.sender.run(move || Ok(TcpListener::bind(server)?)).unwrap();
    (Population { link, server }, listener)
}

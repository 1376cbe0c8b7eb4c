//! A minimal HTTP/1.1 responder for `GET /metrics`: enough for Prometheus and curl, nothing a
//! scrape does not need (one request per connection, no keep-alive, no bodies in). A leaf, so
//! that every feature that serves metrics (the exporter, a running experiment) serves them the
//! same way.

use std::{
    collections::VecDeque,
    io::ErrorKind,
    sync::{
        Arc, Weak,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use prometheus_client::registry::Registry;
use rustix::net::{RecvFlags, SendFlags, Shutdown};
use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// A counter and a gauge of seconds, bytes or logs: the float metrics every feature that serves
/// metrics registers.
pub(crate) type FloatCounter = prometheus_client::metrics::counter::Counter<f64, std::sync::atomic::AtomicU64>;
pub(crate) type FloatGauge = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// OpenMetrics text, which Prometheus negotiates and parses (it is a superset of its text format
/// for everything exported here).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections held at once. A scrape takes milliseconds, so more is a flood or clients that
/// connect and trickle (each is held up to the request deadline). When all are taken, a new
/// connection takes the place of the oldest one whose request head is not in (silent or
/// trickling: slowloris), so a scraper, which sends its request as it connects, is answered
/// however many such clients hold connections, where waiting in the kernel's accept queue behind
/// them would time it out. A connection whose request is in is never evicted (it is being
/// answered; evicting it closed scrapes empty under a flood): when every held connection has its
/// request in, the newcomer is answered 503 at once, and Prometheus scrapes again at its next
/// interval.
const MAX_CONNECTIONS: usize = 64;
/// After a failed accept (out of file descriptors), no accept for this long: the listener stays
/// readable, so accepting again at once would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A request head larger than this is not a scrape.
const MAX_HEAD: usize = 8 << 10;
/// The whole request head must arrive within this from the accept: a scraper sends it at once, a
/// client that sends nothing or trickles (slowloris) loses its connection.
const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// The client must take the whole response within this: a connection being answered is never
/// evicted, so one that does not read must not keep its place longer.
const RESPONSE_DEADLINE: Duration = Duration::from_secs(10);

/// `--metrics-listen`'s socket, bound before anything else is done (a port in use ends the
/// command before it changes anything).
pub(crate) fn bind(addr: std::net::SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    use anyhow::Context as _;
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("--metrics-listen {addr}: cannot listen there (nothing was changed)"))?;
    listener.set_nonblocking(true).context("--metrics-listen: a non-blocking socket")?;
    Ok(listener)
}

/// Serves `registry` on `listener` until the [`Served`] is dropped: the address it serves at.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    registry: Registry,
) -> anyhow::Result<(std::net::SocketAddr, Served)> {
    use anyhow::Context as _;
    let at = listener.local_addr().context("--metrics-listen: the socket's address")?;
    let listener = TcpListener::from_std(listener).context("--metrics-listen: serving")?;
    let scrapes = Arc::new(Scrapes::default());
    Ok((at, Served { task: tokio::spawn(accept(listener, Arc::new(registry), scrapes.clone())), scrapes }))
}

/// The task serving a registry: ends when dropped, with the command.
pub(crate) struct Served {
    task: JoinHandle<()>,
    scrapes: Arc<Scrapes>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Served {
    /// How long [`Served::linger`] would wait now: twice the gap between the last two scrapes
    /// (at most `max`), when something scrapes at a cadence; `None` when nothing has scraped
    /// twice.
    pub(crate) fn lingers(&self, max: Duration) -> Option<Duration> {
        self.scrapes.seen().gap.map(|gap| (2 * gap).min(max))
    }

    /// Waits for one more scrape of what is served now, at most [`Served::lingers`]: values set
    /// last (a run's end) then reach the scraper before the socket closes. Whether one came.
    pub(crate) async fn linger(&self, max: Duration) -> bool {
        let Some(wait) = self.lingers(max) else { return false };
        let count = self.scrapes.seen().count;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the count is read: a scrape between the two still wakes it.
            let next = self.scrapes.next.notified();
            if self.scrapes.seen().count > count {
                return true;
            }
            tokio::select! {
                () = next => {}
                () = tokio::time::sleep_until(deadline) => return false,
            }
        }
    }
}

/// The scrapes a registry answered: how many, and the gap between the last two (a scraper's
/// cadence).
#[derive(Default)]
pub(crate) struct Scrapes {
    seen: std::sync::Mutex<Seen>,
    next: tokio::sync::Notify,
}

#[derive(Clone, Copy, Default)]
struct Seen {
    count: u64,
    last: Option<Instant>,
    gap: Option<Duration>,
}

impl Scrapes {
    fn seen(&self) -> Seen {
        *self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A scrape answered whole.
    fn note(&self) {
        let now = Instant::now();
        {
            let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.gap = seen.last.map(|last| now - last).or(seen.gap);
            seen.last = Some(now);
            seen.count += 1;
        }
        self.next.notify_waiters();
    }
}

/// Renders the registry's current values.
pub(crate) fn render(registry: &Registry) -> String {
    let mut body = String::with_capacity(16 << 10);
    // Writing into a String cannot fail; the encoder's Result is for other writers.
    let _ = prometheus_client::encoding::text::encode(&mut body, registry);
    body
}

/// A connection, owned by the task serving it. The accept loop holds it weakly, to look at its
/// socket: the socket closes when the task ends or is aborted, whatever the loop holds.
struct Conn {
    stream: TcpStream,
    /// The task has the request and is answering it.
    answering: AtomicBool,
}

/// A held connection, as the accept loop sees it.
struct Held {
    task: JoinHandle<()>,
    conn: Weak<Conn>,
}

impl Held {
    /// Whether its request is in, looking into the socket (`scratch` takes the peek).
    fn request_in(&self, scratch: &mut [u8]) -> bool {
        // Gone: its task has ended.
        let Some(conn) = self.conn.upgrade() else { return false };
        let answering = conn.answering.load(Ordering::Relaxed);
        let flags = RecvFlags::PEEK | RecvFlags::DONTWAIT;
        let waiting =
            if answering { 0 } else { rustix::net::recv(&conn.stream, &mut *scratch, flags).map_or(0, |(n, _)| n) };
        request_in(answering, &scratch[..waiting])
    }
}

/// Whether a connection's request is in, and so not to be evicted: its task is answering it, or
/// the end of its head waits in the socket (`waiting`, peeked) for a task that has not run yet (a
/// scraper sends its request as it connects; under a flood the accept loop takes many connections
/// before their tasks run). Bytes that end a line may end a head the task has read the start of;
/// a trickler's bytes end one only until its task reads them.
fn request_in(answering: bool, waiting: &[u8]) -> bool {
    answering || waiting.ends_with(b"\n")
}

/// Accepts scrapes on `listener` and serves each from a task of its own, for as long as the
/// task running this is not aborted (the connections' tasks end with the runtime); each scrape
/// answered whole is noted in `scrapes`.
pub(crate) async fn accept(listener: TcpListener, registry: Arc<Registry>, scrapes: Arc<Scrapes>) {
    // The connections being served, oldest first.
    let mut held: VecDeque<Held> = VecDeque::with_capacity(MAX_CONNECTIONS);
    // Room for a peek at a request head, or for reading one before a 503.
    let mut scratch = vec![0u8; MAX_HEAD];
    let busy = reply(503, "text/plain", "busy: every connection is being answered; retry\n");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                held.retain(|h| !h.task.is_finished());
                if held.len() >= MAX_CONNECTIONS {
                    let Some(victim) = held.iter().position(|h| !h.request_in(&mut scratch)) else {
                        refuse(&stream, &busy, &mut scratch);
                        continue;
                    };
                    if let Some(h) = held.remove(victim) {
                        h.task.abort();
                    }
                }
                let conn = Arc::new(Conn { stream, answering: AtomicBool::new(false) });
                let weak = Arc::downgrade(&conn);
                let task = tokio::spawn(answer(conn, registry.clone(), scrapes.clone()));
                held.push_back(Held { task, conn: weak });
            }
            // E.g. out of file descriptors: the client's loss, and a pause, not a spin.
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

/// Answers `busy` without waiting (a fresh socket's send buffer takes it whole) and closes. What
/// the client sent is read first: closing over unread bytes resets the connection, and the client
/// could lose the answer with it.
fn refuse(stream: &TcpStream, busy: &[u8], scratch: &mut [u8]) {
    let _ = rustix::net::recv(stream, scratch, RecvFlags::DONTWAIT);
    let _ = rustix::net::send(stream, busy, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
    let _ = rustix::net::shutdown(stream, Shutdown::Write);
}

/// Serves one connection: reads the request head, answers, closes.
async fn answer(conn: Arc<Conn>, registry: Arc<Registry>, scrapes: Arc<Scrapes>) {
    let s = &conn.stream;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(HEAD_DEADLINE, async {
        loop {
            s.readable().await?;
            let n = match s.try_read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => continue,
                n => n?,
            };
            if n == 0 {
                return Ok::<bool, std::io::Error>(false);
            }
            head.extend_from_slice(&buf[..n]);
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(true);
            }
            if head.len() > MAX_HEAD {
                return Ok(false);
            }
        }
    })
    .await;
    let response = match read {
        Ok(Ok(true)) => respond(&head, &registry),
        Ok(Ok(false)) if head.len() > MAX_HEAD => reply(431, "text/plain", "request header too large\n"),
        _ => return,
    };
    // Between the read of the head's end and this, the accept loop cannot look: it runs on the
    // same thread (the runtime has one).
    conn.answering.store(true, Ordering::Relaxed);
    let scrape = head.starts_with(b"GET /metrics");
    // The scraper may have gone, or not read within the deadline; nothing to tell anyone then.
    let sent = tokio::time::timeout(RESPONSE_DEADLINE, async {
        let mut left = &response[..];
        while !left.is_empty() {
            s.writable().await?;
            match s.try_write(left) {
                Ok(n) => left = &left[n..],
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    })
    .await;
    if scrape && matches!(sent, Ok(Ok(()))) {
        scrapes.note();
    }
    let _ = rustix::net::shutdown(s, Shutdown::Write);
}

fn respond(head: &[u8], registry: &Registry) -> Vec<u8> {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let mut r = reply(200, CONTENT_TYPE, &render(registry));
            if method == "HEAD" {
                truncate_body(&mut r);
            }
            r
        }
        ("GET" | "HEAD", "/") => reply(
            200,
            "text/html; charset=utf-8",
            "<html><head><title>bbrscope exporter</title></head><body><h1>bbrscope exporter</h1>\
             <p><a href=\"/metrics\">Metrics</a></p></body></html>\n",
        ),
        ("GET" | "HEAD", _) => reply(404, "text/plain", "not found: bbrscope serves /metrics\n"),
        _ => reply(405, "text/plain", "only GET and HEAD\n"),
    }
}

fn reply(status: u16, content_type: &str, body: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        503 => "Service Unavailable",
        _ => "Request Header Fields Too Large",
    };
    // Busy now, not for long: a client may retry in a second.
    let retry = if status == 503 { "Retry-After: 1\r\n" } else { "" };
    let mut r = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{retry}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

/// HEAD: the same headers, no body.
fn truncate_body(r: &mut Vec<u8>) {
    if let Some(end) = r.windows(4).position(|w| w == b"\r\n\r\n") {
        r.truncate(end + 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let reg = Registry::default();
        let ok = String::from_utf8(respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &reg)).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains(CONTENT_TYPE) && ok.ends_with("# EOF\n"), "{ok}");
        let head = String::from_utf8(respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", &reg)).unwrap();
        assert!(head.ends_with("\r\n\r\n"), "{head}");
        assert!(String::from_utf8(respond(b"GET /x HTTP/1.1\r\n\r\n", &reg)).unwrap().contains(" 404 "));
        assert!(String::from_utf8(respond(b"POST /metrics HTTP/1.1\r\n\r\n", &reg)).unwrap().contains(" 405 "));
    }

    /// A served registry lingers for one more scrape only once something has scraped twice: then
    /// until the next scrape (whole), or twice the last gap.
    #[test]
    fn a_run_lingers_for_its_scrapers_next_look_and_no_longer() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (at, served) = serve(bind("127.0.0.1:0".parse().unwrap()).unwrap(), Registry::default()).unwrap();
            let scrape = move || {
                tokio::task::spawn_blocking(move || {
                    use std::io::{Read as _, Write as _};
                    let mut s = std::net::TcpStream::connect(at).unwrap();
                    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                    s.read_to_end(&mut Vec::new()).unwrap();
                })
            };
            let max = Duration::from_secs(60);
            // Nothing scraped yet, then once: no cadence, no wait.
            assert_eq!(served.lingers(max), None);
            assert!(!served.linger(max).await);
            scrape().await.unwrap();
            assert_eq!(served.lingers(max), None);
            tokio::time::sleep(Duration::from_millis(300)).await;
            scrape().await.unwrap();
            let wait = served.lingers(max).unwrap();
            assert!(wait >= Duration::from_millis(600) && wait < Duration::from_secs(10), "{wait:?}");
            // The next scrape ends the wait at once.
            let started = Instant::now();
            let next = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                scrape().await.unwrap();
            });
            assert!(served.linger(max).await);
            assert!(started.elapsed() < wait, "{:?}", started.elapsed());
            next.await.unwrap();
            // None comes: it gives up after twice the gap (capped by `max`).
            let started = Instant::now();
            assert!(!served.linger(Duration::from_millis(50)).await);
            assert!(started.elapsed() >= Duration::from_millis(50) && started.elapsed() < wait);
        });
    }

    #[test]
    fn busy_is_a_whole_response() {
        let busy = String::from_utf8(reply(503, "text/plain", "busy\n")).unwrap();
        assert!(busy.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{busy}");
        assert!(busy.contains("\r\nRetry-After: 1\r\n") && busy.contains("\r\nConnection: close\r\n"), "{busy}");
        assert!(busy.ends_with("Content-Length: 5\r\nRetry-After: 1\r\nConnection: close\r\n\r\nbusy\n"), "{busy}");
        assert!(!String::from_utf8(reply(200, "text/plain", "")).unwrap().contains("Retry-After"));
    }

    /// Which connections a newcomer may take the place of.
    #[test]
    fn a_connection_with_its_request_in_is_never_evicted() {
        // Being answered: whatever is in its socket.
        assert!(request_in(true, b""));
        assert!(request_in(true, b"G"));
        // A scraper whose task has not run: its head waits whole.
        assert!(request_in(false, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
        // The end of a head whose start the task has read, however it was cut.
        for tail in [&b"\n"[..], b"\r\n", b"\n\r\n", b"x\r\n\r\n"] {
            assert!(request_in(false, tail), "{tail:?}");
        }
        // Silent, or trickling (slowloris): evicted.
        assert!(!request_in(false, b""));
        assert!(!request_in(false, b"G"));
        assert!(!request_in(false, b"GET /metrics HTTP/1.1\r"));
    }
}

//! A minimal HTTP/1.1 responder for `GET /metrics`: enough for Prometheus and curl, nothing a
//! scrape does not need (one request per connection, no keep-alive, no bodies in).

use std::{collections::VecDeque, sync::Arc, time::Duration};

use prometheus_client::registry::Registry;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

/// OpenMetrics text, which Prometheus negotiates and parses (it is a superset of its text format
/// for everything exported here).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections held at once. A scrape takes milliseconds, so more is a flood or clients that
/// connect and trickle (each is held up to the request deadline). When all are taken, a new
/// connection takes the place of the oldest one: a scraper, which sends its request as it
/// connects, is answered however many slow clients hold connections (slowloris), where waiting
/// in the kernel's accept queue behind them would time it out.
const MAX_CONNECTIONS: usize = 64;
/// After a failed accept (out of file descriptors), no accept for this long: the listener stays
/// readable, so accepting again at once would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A request head larger than this is not a scrape.
const MAX_HEAD: usize = 8 << 10;
/// The whole request head must arrive within this from the accept: a scraper sends it at once, a
/// client that sends nothing or trickles (slowloris) loses its connection.
const HEAD_DEADLINE: Duration = Duration::from_secs(2);

/// Renders the registry's current values.
pub(crate) fn render(registry: &Registry) -> String {
    let mut body = String::with_capacity(16 << 10);
    // Writing into a String cannot fail; the encoder's Result is for other writers.
    let _ = prometheus_client::encoding::text::encode(&mut body, registry);
    body
}

/// Accepts scrapes on `listener` and serves each from a task of its own, for as long as the
/// task running this is not aborted (the connections' tasks end with the runtime).
pub(crate) async fn accept(listener: TcpListener, registry: Arc<Registry>) {
    // The connections being served, oldest first.
    let mut held: VecDeque<JoinHandle<()>> = VecDeque::new();
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                held.retain(|h| !h.is_finished());
                if held.len() >= MAX_CONNECTIONS
                    && let Some(oldest) = held.pop_front()
                {
                    oldest.abort();
                }
                held.push_back(tokio::spawn(serve(conn, registry.clone())));
            }
            // E.g. out of file descriptors: the client's loss, and a pause, not a spin.
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

/// Serves one connection: reads the request head, answers, closes.
pub(crate) async fn serve(mut conn: TcpStream, registry: Arc<Registry>) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(HEAD_DEADLINE, async {
        loop {
            let n = conn.read(&mut buf).await?;
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
    // The scraper may have gone; nothing to tell anyone then.
    let _ = conn.write_all(&response).await;
    let _ = conn.shutdown().await;
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
        _ => "Request Header Fields Too Large",
    };
    let mut r = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
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
}

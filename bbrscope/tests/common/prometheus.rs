//! A real Prometheus server scraping `bbrscope export`, for the tests that check the exporter
//! (bbrscope/tests/export.rs) and the Ansible rollout that judges a canary by it (bbrscope/tests/ansible.rs).

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{bbrscope, wait_timeout};

/// A port free on loopback right now (the kernel's pick; released for the child to bind).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET over HTTP/1.0 (so the server delimits the body by closing, never chunked): (status, body).
pub(crate) fn http_get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let status = resp.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// A Grafana dashboard's queries, as Grafana would send them over the last minutes with `vars`
/// (`("$instance", ".*")`) put in: (panel title, PromQL) for every panel target and template
/// variable.
pub(crate) fn dashboard_queries(path: &str, vars: &[(&str, &str)]) -> Vec<(String, String)> {
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let promql = |expr: &str| vars.iter().fold(expr.replace("$__rate_interval", "2m"), |e, (k, v)| e.replace(k, v));
    let mut out = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((p["title"].as_str().unwrap().to_string(), promql(t["expr"].as_str().unwrap())));
        }
    }
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(def) = v["definition"].as_str() {
            // label_values(METRIC, LABEL) is answered from the series METRIC.
            let inner = def.strip_prefix("label_values(").and_then(|s| s.strip_suffix(')')).unwrap();
            let (metric, label) = inner.split_once(',').unwrap();
            out.push((format!("variable {}", v["name"]), format!("group by ({}) ({metric})", label.trim())));
        }
    }
    out
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server on loopback with its data in a temporary directory; killed (and the
/// directory removed) on drop, however the test ends.
pub(crate) struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second (job `bbrscope`; each target's
    /// `instance` label is its ADDR:PORT).
    pub(crate) fn start(targets: &[SocketAddr]) -> Prometheus {
        let bin = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("prometheus is not installed: run scripts/setup.sh (Debian package `prometheus`)");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: bbrscope\n    \
                 static_configs:\n      - targets: [{}]\n",
                targets.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ")
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus { child, addr, dir };
        let start = Instant::now();
        while !matches!(http_get(p.addr, "/-/ready"), Ok((200, _))) {
            assert!(start.elapsed() < Duration::from_secs(60), "prometheus not ready: {}", p.log());
            thread::sleep(Duration::from_millis(200));
        }
        p
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Waits until Prometheus has scraped every one of its `n` targets successfully.
    pub(crate) fn wait_up(&self, n: usize) {
        let start = Instant::now();
        while self.query("up{job=\"bbrscope\"} == 1").len() < n {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus never scraped the exporters: {}",
                self.log()
            );
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// An instant query: the `data.result` vector.
    pub(crate) fn query(&self, q: &str) -> Vec<Value> {
        let (status, body) = http_get(self.addr, &format!("/api/v1/query?query={}", urlencode(q))).unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{q}: {e}: {body}"));
        assert!(status == 200 && v["status"] == "success", "{q}: {status} {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// `sum by (cc) (METRIC)` as cc -> value.
    pub(crate) fn by_cc(&self, metric: &str) -> HashMap<String, f64> {
        self.query(&format!("sum by (cc) ({metric})"))
            .iter()
            .map(|r| (r["metric"]["cc"].as_str().unwrap_or("").to_string(), value(r)))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn value(r: &Value) -> f64 {
    r["value"][1].as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
}

/// A running `bbrscope export`, killed on drop.
pub(crate) struct Exporter {
    child: Child,
    pub addr: SocketAddr,
}

impl Exporter {
    /// On port 0: the kernel picks a free port as the exporter binds (no race with other tests),
    /// and the exporter must then announce the port it got, not `:0`.
    pub(crate) fn start(args: &[&str]) -> Exporter {
        Exporter::start_with(args, |_| {})
    }

    /// As [`Exporter::start`], with the command adjusted first (e.g. resource limits).
    pub(crate) fn start_with(args: &[&str], adjust: impl FnOnce(&mut Command)) -> Exporter {
        let mut cmd = bbrscope();
        cmd.args(["export", "--listen", "127.0.0.1:0"]).args(args).stdout(Stdio::null()).stderr(Stdio::piped());
        adjust(&mut cmd);
        let mut child = cmd.spawn().expect("spawn bbrscope export");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                panic!("bbrscope export exited without announcing its address: {:?}", child.wait())
            };
            eprintln!("{line}");
            if let Some(rest) = line.strip_prefix("bbrscope: serving metrics at http://") {
                let addr: SocketAddr = rest.split('/').next().unwrap().parse().unwrap();
                assert_ne!(addr.port(), 0, "the exporter announced port 0, not the port it bound: {line}");
                break addr;
            }
        };
        // The rest of its stderr goes where the test's goes.
        thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
        let mut e = Exporter { child, addr };
        let start = Instant::now();
        loop {
            if let Ok((200, body)) = http_get(addr, "/metrics")
                && body.contains("bbrscope_observer_info")
            {
                break;
            }
            if let Ok(Some(s)) = e.child.try_wait() {
                panic!("bbrscope export exited: {s}");
            }
            assert!(start.elapsed() < Duration::from_secs(30), "exporter never served /metrics");
            thread::sleep(Duration::from_millis(100));
        }
        e
    }
}

impl Exporter {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, which is not reaped until wait() below.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if wait_timeout(&mut self.child, Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

//! `bbrscope stream` against real TCP flows on this machine's kernel (root required).

mod common;

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::Stdio,
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bbrscope::sys::sockopt;
use common::*;
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("expected a number, got {v}"))
}

fn samples_of<'a>(records: &'a [Value], cookie: &'a Value) -> Vec<&'a Value> {
    of_flow(records, "sample", cookie).collect()
}

#[test]
fn reports_cubic_and_bbr_flows_with_their_algorithm() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let stream = Stream::start(&["--port", &port, "--interval", "50"]);
    let cubic = Sender::start(server.addr, "cubic", Duration::from_millis(1500), None);
    let bbr = Sender::start(server.addr, "bbr", Duration::from_millis(1500), None);
    let (cubic_local, bbr_local) = (cubic.local, bbr.local);
    let (cubic_sent, bbr_sent) = (cubic.join(), bbr.join());
    let mut stream = stream;
    for local in [cubic_local, bbr_local] {
        stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    }
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");

    for (local, cc, sent) in [(cubic_local, "cubic", cubic_sent), (bbr_local, "bbr", bbr_sent)] {
        let open = open_for(&records, local).unwrap_or_else(|| panic!("no flow_open for the {cc} flow {local}"));
        assert_eq!(open["cc"], cc);
        assert_eq!(open["dst"], server.addr.to_string());
        let cookie = &open["cookie"];
        let samples = samples_of(&records, cookie);
        assert!(samples.len() >= 5, "{cc}: only {} samples in 1.5 s at 50 ms", samples.len());
        let mut last_acked = 0;
        for (i, s) in samples.iter().enumerate() {
            assert_eq!(s["cc"], cc);
            assert!(u(&s["cwnd"]) >= 2, "{s}");
            assert!(u(&s["srtt_us"]) > 0, "{s}");
            assert!(u(&s["min_rtt_us"]) <= u(&s["srtt_us"]) + u(&s["rttvar_us"]) * 4, "{s}");
            assert!(u(&s["pacing_rate_bps"]) > 0, "{s}");
            assert!(u(&s["mss"]) > 0);
            let acked = u(&s["bytes_acked"]);
            assert!(acked >= last_acked, "bytes_acked went backwards");
            last_acked = acked;
            match cc {
                "bbr" => {
                    let b = &s["bbr"];
                    let mode = b["mode"].as_str().expect("bbr.mode");
                    assert!(["startup", "drain", "probe_bw", "probe_rtt"].contains(&mode), "mode {mode}");
                    // The first sample can come with the first ACK, before BBR has run (no rate
                    // sample, gains not yet set: reported as null).
                    if i > 0 {
                        assert!(u(&b["bw_bps"]) > 0, "{b}");
                        assert!(b["pacing_gain"].as_f64().unwrap() > 0.0, "{b}");
                        assert!(b["cwnd_gain"].as_f64().unwrap() > 0.0, "{b}");
                    }
                }
                _ => assert!(s["bbr"].is_null()),
            }
        }
        // Samples are bounded by the interval, not by the ACK rate.
        let acks: u64 = samples.iter().map(|s| u(&s["acks"])).sum();
        assert!(acks > 10 * samples.len() as u64, "{cc}: {acks} ACKs in {} samples", samples.len());
        let close = of_flow(&records, "flow_close", cookie).next().expect("flow_close");
        let acked = u(&close["bytes_acked"]);
        // The SYN and the FIN take one sequence number each.
        assert!((sent..=sent + 2).contains(&acked), "{cc}: sent {sent}, close says {acked} acked");
    }

    // Only the port asked for, and only senders: the server's receiving sockets are not flows here.
    for r in records.iter().filter(|r| r["type"] != "stats") {
        assert!(r["dst"] == server.addr.to_string(), "unexpected record {r}");
    }
    assert!(records.iter().any(|r| r["type"] == "stats" && r["drops_total"] == 0 && r["evicted_total"] == 0));
}

/// The send buffer as the socket has it: with SO_SNDBUF set by the application the kernel keeps
/// `sk_sndbuf` fixed (at twice the value asked), so every sample must report exactly what
/// getsockopt(SO_SNDBUF) says. What is unsent is part of what is queued, and the queue passes
/// the buffer by at most the one skb the writer was allowed to start below it
/// (sk_stream_memory_free), so it stays under twice the buffer.
///
/// The receiver reads slowly (16 KB every 5 ms), so the sender's buffer stays full: a reader as
/// fast as loopback can empty the queue by every ACK, and on a busy box (stop 44's CI) no sample
/// then saw anything queued.
#[test]
fn samples_report_the_send_buffer_the_socket_has() {
    require_root();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let reader = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 16 << 10];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            thread::sleep(Duration::from_millis(5));
        }
    });
    let stream = Stream::start(&["--port", &addr.port().to_string(), "--interval", "50"]);
    let c = TcpStream::connect(addr).unwrap();
    let sndbuf = sndbuf(&c, Some(48 << 10)) as u64;
    let local = c.local_addr().unwrap();
    Sender::run(c, Duration::from_millis(1000), None).join();
    reader.join().unwrap();
    let mut stream = stream;
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");
    let open = open_for(&records, local).expect("flow_open");
    let samples = samples_of(&records, &open["cookie"]);
    assert!(samples.len() >= 5, "{} samples", samples.len());
    for s in &samples {
        assert_eq!(u(&s["sndbuf_bytes"]), sndbuf, "{s}");
        assert!(u(&s["notsent_bytes"]) <= u(&s["wmem_queued_bytes"]), "{s}");
        assert!(u(&s["wmem_queued_bytes"]) <= 2 * sndbuf, "{s}");
    }
    assert!(samples.iter().any(|s| u(&s["wmem_queued_bytes"]) > 0), "a bulk sender has data queued");
    // A writer as fast as the buffer lets it waits for space (SOCK_NOSPACE) at some samples.
    assert!(samples.iter().any(|s| s["nospace"] == true), "the writer never waited: {samples:?}");
}

/// The receive side as the socket has it when a download ends: the client's last record (its
/// close) reports the receive buffer, the window clamp, rcv_space, rcv_rtt and rcv_ssthresh that
/// getsockopt gives once everything was read (none of them changes after the last read).
#[test]
fn a_download_closes_with_the_receive_side_the_socket_has() {
    require_root();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stream = Stream::start(&["--port", &addr.port().to_string(), "--interval", "10"]);
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = [0u8; 4];
        s.read_exact(&mut req).unwrap();
        // The request is acked on its own (a delayed ACK, 40 ms): the client's RTT callback, and
        // with it a sample, so the flow is shown live and ends with a `flow_close` (a flow that
        // closes before its first sample is its summary alone).
        thread::sleep(Duration::from_millis(100));
        s.write_all(&vec![0x5a; 8 << 20]).unwrap();
    });
    // A request, then the response: the client sends data, as any download's does.
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"GET\n").unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got).unwrap();
    server.join().unwrap();
    assert_eq!(got.len(), 8 << 20);
    let (info, rcvbuf, clamp) =
        (tcp_info(&c), sockopt::receive_buffer(&c).unwrap() as u64, u64::from(sockopt::window_clamp(&c).unwrap()));
    let local = c.local_addr().unwrap();
    drop(c);
    let mut stream = stream;
    let close =
        stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    let (code, _, stderr) = stream.stop();
    assert_eq!(code, 0, "stderr: {stderr}");
    let said = [
        u(&close["rcvbuf_bytes"]),
        u(&close["window_clamp_bytes"]),
        u(&close["rcv_space_bytes"]),
        u(&close["rcv_rtt_us"]),
        u(&close["rcv_ssthresh_bytes"]),
    ];
    let truth = [rcvbuf, clamp, u64::from(info.rcv_space), u64::from(info.rcv_rtt_us), u64::from(info.rcv_ssthresh)];
    assert_eq!(said, truth, "rcvbuf, window_clamp, rcv_space, rcv_rtt, rcv_ssthresh: {close}");
    // Autotuning ran: the buffer grew past tcp_rmem's default. (The FIN counts in
    // bytes_received.)
    assert!(rcvbuf > 131_072 && info.bytes_received == (8 << 20) + 1, "{info:?}");
}

#[test]
fn agrees_with_ss_for_the_same_socket() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let stream = Stream::start(&["--port", &port, "--interval", "10"]);
    // Paced at 40 Mbit/s so the flow is steady while `ss` looks at it.
    let sender = Sender::start(server.addr, "cubic", Duration::from_secs(3), Some(5_000_000));
    let mut snapshots = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(400));
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        let ss = ss_info(sender.local, None).expect("ss shows the socket");
        let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        snapshots.push((f64::midpoint(before, after), ss));
    }
    let local = sender.local;
    sender.join();
    let (_, records, _) = stream.stop();
    let open = open_for(&records, local).expect("flow_open");
    let samples = samples_of(&records, &open["cookie"]);

    // ss and bbrscope read the same socket at slightly different instants: ss's value must lie
    // within the range bbrscope reported in the 100 ms around the ss call, widened by 10% (RTTs by
    // 1 us more: ss prints them in ms with microsecond resolution). On loopback the RTT moves by
    // tens of percent between ACKs, so one snapshot of five may fall outside; more may not.
    let (mut compared, mut agreed) = (0, 0);
    let mut disagreements = Vec::new();
    for (t, ss) in &snapshots {
        let near: Vec<&&Value> = samples.iter().filter(|s| (s["ts"].as_f64().unwrap() - t).abs() <= 0.05).collect();
        if near.is_empty() {
            continue;
        }
        compared += 1;
        // mss_cache follows the peer's largest window (half of it bounds the MSS), which moves on
        // loopback under load: ss's value must be one bbrscope reported around that instant.
        let ss_mss = ss["mss"].parse::<u64>().unwrap();
        let mss: Vec<u64> = near.iter().map(|s| u(&s["mss"])).collect();
        assert!(mss.contains(&ss_mss), "mss must agree exactly: ss {ss_mss}, bbrscope {mss:?}");
        let srtt_us = ss["rtt"].split('/').next().unwrap().parse::<f64>().unwrap() * 1000.0;
        let checks = [
            ("cwnd", ss["cwnd"].parse::<f64>().unwrap(), 0.0),
            ("srtt_us", srtt_us, 1.0),
            ("pacing_rate_bps", parse_bps(&ss["pacing_rate"]), 0.0),
        ];
        let mut ok = true;
        for (key, ss_val, slack) in checks {
            let vals: Vec<f64> = near.iter().map(|s| s[key].as_f64().unwrap()).collect();
            let lo = vals.iter().copied().fold(f64::MAX, f64::min) * 0.9 - slack;
            let hi = vals.iter().copied().fold(f64::MIN, f64::max) * 1.1 + slack;
            if !(lo..=hi).contains(&ss_val) {
                ok = false;
                disagreements.push(format!("{key}: ss {ss_val}, bbrscope {lo:.0}..{hi:.0} around t={t}"));
            }
        }
        agreed += usize::from(ok);
    }
    // Per snapshot, not per field: pacing rate follows srtt, so one outlying instant can put both
    // outside (CI once saw exactly that, with the other four snapshots agreeing).
    assert!(
        agreed >= 3 && compared - agreed <= 1,
        "{agreed} of {compared} snapshots agreed; disagreements: {disagreements:?}"
    );
}

#[test]
fn retransmit_events_add_up_to_the_sockets_total_under_loss() {
    require_root();
    let link = Link::new("rtx");
    let port = 5201 + (std::process::id() % 1000) as u16;
    // 2% of data segments arriving at the receiver are dropped, in the kernel, inside the
    // receiver's own namespace.
    link.b.exec("nft", &["add", "table", "inet", "bbrs"]);
    link.b.exec("nft", &["add chain inet bbrs input { type filter hook input priority 0; }"]);
    link.b.exec(
        "nft",
        &[&format!("add rule inet bbrs input tcp dport {port} meta length > 200 numgen random mod 100 < 2 drop")],
    );
    let b_addr: SocketAddr = format!("{}:{port}", link.b_ip).parse().unwrap();
    let server = link.b.enter(move || Discard::bind(&b_addr.to_string()));
    let stream = Stream::start(&["--port", &port.to_string(), "--interval", "100"]);
    let conn = link.a.enter(move || {
        let s = TcpStream::connect(b_addr).expect("connect across the link");
        set_cc(&s, "cubic");
        s
    });
    let sender = Sender::run(conn, Duration::from_secs(3), None);
    let local = sender.local;
    sender.join();
    let mut stream = stream;
    stream.wait_for(Duration::from_secs(20), |r| r["type"] == "flow_summary" && r["src"] == local.to_string());
    let (_, records, _) = stream.stop();
    drop(server);

    let open = open_for(&records, local).expect("flow_open");
    let cookie = &open["cookie"];
    let samples = samples_of(&records, cookie);
    let close = of_flow(&records, "flow_close", cookie).next().expect("flow_close");
    // The sock_ops observer reports from the flow's start (retransmits before its first sample
    // included); what it did not report is what happened before it was established and what never
    // left this host.
    let summary = of_flow(&records, "flow_summary", cookie).next().expect("flow_summary");
    let first_total = u(&summary["retrans_at_open"]) + u(&summary["retrans_failed"]);
    let final_total = u(&close["retrans_total"]);
    assert!(final_total > 10, "2% loss for 3 s should cause retransmits; socket total {final_total}");
    let event_segs: u64 = of_flow(&records, "retransmit", cookie).map(|r| u(&r["segs"])).sum();
    let folded: u64 = samples.iter().chain([&close]).map(|s| u(&s["retrans_coalesced"])).sum();
    assert_eq!(
        event_segs + folded,
        final_total - first_total,
        "retransmit events ({event_segs} segs, {folded} folded into samples) vs the socket's total_retrans ({first_total} -> {final_total})"
    );
    // Each event's running total matches the socket's at that moment, in order.
    let mut prev = first_total;
    for r in of_flow(&records, "retransmit", cookie) {
        let total = u(&r["retrans_total"]);
        assert!(total >= prev + u(&r["segs"]), "running total out of order: {r}");
        prev = total;
    }
    assert!(
        records.iter().any(|r| r["type"] == "cong_state" && &r["cookie"] == cookie && r["to"] == "recovery"),
        "loss should move the flow into recovery"
    );
}

#[test]
fn ipv6_and_ipv4_mapped_flows() {
    require_root();
    // Plain IPv6 over ::1.
    let server = Discard::bind("[::1]:0");
    let port = server.addr.port().to_string();
    let mut stream = Stream::start(&["--port", &port, "--interval", "50"]);
    let sender = Sender::start(server.addr, "bbr", Duration::from_millis(600), None);
    let local = sender.local;
    sender.join();
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    let (_, records, _) = stream.stop();
    let open = open_for(&records, local).expect("IPv6 flow_open");
    assert!(open["src"].as_str().unwrap().starts_with("[::1]:"), "{open}");
    assert_eq!(open["dst"], server.addr.to_string());

    // An IPv4 peer of a dual-stack IPv6 server socket that sends: shown as IPv4.
    let listener = TcpListener::bind("[::]:0").expect("dual-stack listener");
    let port = listener.local_addr().unwrap().port();
    let mut stream = Stream::start(&["--port", &port.to_string(), "--interval", "50"]);
    let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let client_addr = client.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let mut c = client;
        let _ = std::io::copy(&mut c, &mut std::io::sink());
    });
    let (conn, _) = listener.accept().unwrap();
    Sender::run(conn, Duration::from_millis(600), None).join();
    reader.join().unwrap();
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close");
    let (_, records, _) = stream.stop();
    let open = records.iter().find(|r| r["type"] == "flow_open").expect("flow_open for the server's send");
    assert_eq!(open["src"], format!("127.0.0.1:{port}"));
    assert_eq!(open["dst"], client_addr.to_string());
}

#[test]
fn cc_and_addr_filters_run_in_the_kernel() {
    require_root();
    let server = Discard::bind("0.0.0.0:0");
    let port = server.addr.port();
    let to = |ip: &str| -> SocketAddr { format!("{ip}:{port}").parse().unwrap() };

    let mut by_cc = Stream::start(&["--port", &port.to_string(), "--cc", "bbr", "--interval", "50"]);
    let mut by_addr = Stream::start(&["--port", &port.to_string(), "--addr", "127.0.0.2/32", "--interval", "50"]);
    let cubic = Sender::start(to("127.0.0.1"), "cubic", Duration::from_millis(800), None);
    let bbr = Sender::start(to("127.0.0.1"), "bbr", Duration::from_millis(800), None);
    let other = Sender::start(to("127.0.0.2"), "cubic", Duration::from_millis(800), None);
    let (c, b, o) = (cubic.local, bbr.local, other.local);
    cubic.join();
    bbr.join();
    other.join();
    by_cc.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == b.to_string());
    by_addr.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == o.to_string());
    let (_, cc_records, _) = by_cc.stop();
    let (_, addr_records, _) = by_addr.stop();

    let flows = |records: &[Value]| -> Vec<String> {
        records.iter().filter(|r| r["type"] == "flow_open").map(|r| r["src"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(flows(&cc_records), vec![b.to_string()], "--cc bbr must report only the bbr flow");
    assert!(!flows(&addr_records).contains(&c.to_string()));
    assert_eq!(flows(&addr_records), vec![o.to_string()], "--addr 127.0.0.2/32 must report only the flow to 127.0.0.2");
    // The address filter ran in the kernel: the two flows to 127.0.0.1 were rejected there, when
    // first seen (the --cc filter is checked at each sample instead, since a flow's algorithm can
    // change).
    let last_stats = addr_records.iter().rev().find(|r| r["type"] == "stats").unwrap();
    assert!(u(&last_stats["flows_filtered_total"]) >= 2, "{last_stats}");
}

#[test]
fn cgroup_filter_follows_the_socket_not_the_current_task() {
    require_root();
    let mount = bbrscope::sys::cgroup::cgroup2_mount().expect("cgroup2 mounted");
    let dir = mount.mount_point.join(format!("bbrscope-test-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("create a throwaway cgroup");
    struct Rmdir(std::path::PathBuf);
    impl Drop for Rmdir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _cleanup = Rmdir(dir.clone());

    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port();
    let mut stream =
        Stream::start(&["--port", &port.to_string(), "--cgroup", dir.to_str().unwrap(), "--interval", "50"]);
    // Inside: a shell that joins the cgroup, then opens its socket (bash's /dev/tcp).
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec 3<>/dev/tcp/127.0.0.1/{port} && head -c 30000000 /dev/zero >&3",
        dir.display()
    );
    let mut inside = std::process::Command::new("bash").args(["-c", &script]).spawn().unwrap();
    // Outside: this test process.
    let outside = Sender::start(server.addr, "cubic", Duration::from_millis(800), None);
    let outside_local = outside.local;
    outside.join();
    assert!(inside.wait().unwrap().success());
    // Every flow ends with a summary (30 MB on loopback may end before its first sample, and
    // then the summary is all there is of it).
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_summary");
    std::thread::sleep(Duration::from_millis(300));
    let (_, records, _) = stream.stop();
    let flows: Vec<&Value> = records.iter().filter(|r| r["type"] == "flow_summary").collect();
    assert_eq!(flows.len(), 1, "exactly the flow from inside the cgroup: {flows:?}");
    assert_ne!(flows[0]["src"], outside_local.to_string());
    assert_eq!(flows[0]["cgroup"], format!("/{}", dir.file_name().unwrap().to_str().unwrap()), "{}", flows[0]);
}

/// bpf object ids (programs and links) held by a process, from its fdinfo.
fn bpf_ids(pid: u32, key: &str) -> Vec<u32> {
    let mut ids = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap().flatten() {
        if let Ok(info) = std::fs::read_to_string(fd.path()) {
            for line in info.lines() {
                if let Some(id) = line.strip_prefix(key) {
                    ids.push(id.trim().parse().unwrap());
                }
            }
        }
    }
    ids
}

fn prog_exists(id: u32) -> bool {
    std::process::Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn detaches_everything_on_sigterm_and_exits_zero() {
    require_root();
    let stream = Stream::start(&["--port", "9"]);
    let pid = stream.pid();
    let progs = bpf_ids(pid, "prog_id:");
    assert!(progs.len() >= 4, "expected the four tracepoint programs, found {progs:?}");
    assert!(progs.iter().all(|&id| prog_exists(id)));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let child = stream;
    let (code, _, stderr) = {
        // stop() sends SIGINT too; the process is already exiting from SIGTERM.
        std::thread::sleep(Duration::from_millis(500));
        child.stop()
    };
    assert_eq!(code, 0, "{stderr}");
    // Programs are freed once nothing holds them.
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<u32> = progs.into_iter().filter(|&id| prog_exists(id)).collect();
    assert!(left.is_empty(), "programs still loaded after exit: {left:?}");
}

#[test]
fn duration_and_broken_pipe_end_the_stream_quietly() {
    require_root();
    let start = std::time::Instant::now();
    let out = bbrscope().args(["stream", "--duration", "1", "--port", "9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(start.elapsed() < Duration::from_secs(10));

    // Reader goes away after the first line (like `| head -n 1`).
    let mut child = bbrscope()
        .args(["stream", "--stats-interval", "0.1", "--port", "9"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead as _;
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(first.contains("\"type\":\"stats\""));
    }
    let status = wait_timeout(&mut child, Duration::from_secs(10)).expect("exits when its reader is gone");
    assert_eq!(status.code(), Some(0));
    let mut err = String::new();
    use std::io::Read as _;
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.is_empty(), "quiet on broken pipe, got: {err}");
}

/// A reader that stops reading (a stalled `| consumer`) fills the pipe and blocks bbrscope in a
/// write, where its async loop cannot see signals: SIGTERM must still end it, with its programs
/// gone, and say why the output was cut.
#[test]
fn sigterm_ends_a_stream_whose_reader_stopped_reading() {
    require_root();
    let mut child = bbrscope()
        .args(["stream", "--stats-interval", "0.01"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Held open, never read: the pipe's 64 KiB fill within a second of stats records.
    let stalled = child.stdout.take().unwrap();
    let pid = child.id();
    let blocked = std::time::Instant::now() + Duration::from_secs(20);
    // Its output thread's write blocks (the records wait in memory behind it).
    let wchan = || {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
        tasks.map(|t| std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default()).collect::<Vec<_>>().join(",")
    };
    while !wchan().contains("pipe_write") {
        assert!(std::time::Instant::now() < blocked, "never blocked writing (wchan {})", wchan());
        std::thread::sleep(Duration::from_millis(50));
    }
    let progs = bpf_ids(pid, "prog_id:");
    assert!(!progs.is_empty());
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = wait_timeout(&mut child, Duration::from_secs(10));
    if status.is_none() {
        let _ = child.kill();
    }
    let status = status.expect("still running 10 s after SIGTERM, blocked writing to its stalled reader");
    assert_eq!(status.code(), Some(1));
    let mut err = String::new();
    use std::io::Read as _;
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(err.contains("standard output has not been read"), "{err}");
    drop(stalled);
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<u32> = progs.into_iter().filter(|&id| prog_exists(id)).collect();
    assert!(left.is_empty(), "programs still loaded after exit: {left:?}");
}

#[test]
fn bad_input_is_one_line_on_stderr_and_exit_2() {
    require_root();
    let v1 = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            (post.split_whitespace().next()? == "cgroup").then(|| pre.split_whitespace().nth(4).unwrap().to_string())
        })
        .unwrap_or_else(|| "/tmp".into());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--addr", "10.0.0.0/33"], "CIDR"),
        (vec!["--addr", "example.com"], "CIDR"),
        (vec!["--cc", "nosuchcc"], "available"),
        (vec!["--cgroup", "/nonexistent/cg"], "does not exist"),
        (vec!["--cgroup", &v1], "cgroup"),
        (vec!["--interval", "0"], "interval"),
        (vec!["--ring-size", "3M"], "power of two"),
        (vec!["--port", "70000"], "port"),
        (vec!["--duration", "-1"], "duration"),
        (vec!["--frobnicate"], "frobnicate"),
        (vec!["--btf", "/nonexistent.btf"], "--btf"),
        (vec!["--btf", "/dev/zero"], "BTF"),
        (vec!["--duration", "1e300"], "a year"),
        (vec!["--duration", "99999999999999999999"], "a year"),
        (vec!["--stats-interval", "1e30"], "86400"),
        (vec!["--port", "0"], "1 to 65535"),
        (vec!["--interval", "100ms"], "without a unit"),
        (vec!["--prot", "80"], "similar argument exists: '--port'"),
        (vec!["--comm", "a-name-longer-than-15"], "15 bytes"),
        (vec!["--netns", "/no/such/ns"], "namespace"),
        (vec!["--observer", "kprobe"], "sockops"),
    ];
    for (args, needle) in cases {
        let out = bbrscope().arg("stream").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
        assert!(err.starts_with("bbrscope: "), "{args:?}: {err}");
        assert!(err.to_lowercase().contains(&needle.to_lowercase()), "{args:?}: expected '{needle}' in: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: wrote to stdout");
    }

    // Without privileges: names what is needed.
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(env!("CARGO_BIN_EXE_bbrscope"))
        .args(["stream", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux)");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("CAP_BPF") && err.contains("CAP_PERFMON"), "{err}");
}

#[test]
fn ring_overflow_is_counted_and_reported_not_silent() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    // A 4 KiB ring holds about eight samples; 16 busy flows sampled every millisecond overflow it.
    let stream = Stream::start(&["--port", &port, "--interval", "1", "--ring-size", "4K"]);
    let senders: Vec<Sender> =
        (0..16).map(|_| Sender::start(server.addr, "cubic", Duration::from_millis(1500), None)).collect();
    for s in senders {
        s.join();
    }
    std::thread::sleep(Duration::from_millis(300));
    let (_, records, _) = stream.stop();
    let stats = records.iter().rev().find(|r| r["type"] == "stats").expect("stats");
    let drops = u(&stats["drops_total"]);
    assert!(drops > 0, "expected drops with a 4 KiB ring: {stats}");
    let delivered = records.iter().filter(|r| r["type"] == "sample").count() as u64;
    assert!(delivered > 0);
    assert!(records.iter().any(|r| r["type"] == "stats" && r["drops_per_s"].as_f64().unwrap() > 0.0));
}

/// `--kernel-log debug` names every flow the sock_ops program starts to watch by the socket's
/// own cookie (getsockopt SO_COOKIE on both ends of each connection here, the truth no bbrscope
/// code computes): exactly those of the port, each once. `warn` sends none of them, and without
/// the flag the programs send nothing at all.
#[test]
fn the_kernel_log_names_each_watched_flow_by_its_cookie_and_is_off_by_default() {
    use std::io::{Read as _, Write as _};
    require_root();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let base = ["--observer", "sockops", "--port", &port];
    let mut streams = [
        Stream::start(&[&base[..], &["--kernel-log", "debug"]].concat()),
        Stream::start(&[&base[..], &["--kernel-log", "warn"]].concat()),
        Stream::start(&base),
    ];
    let mut cookies = std::collections::BTreeSet::new();
    let mut conns = Vec::new();
    for _ in 0..4 {
        let mut c = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        c.write_all(b"ping").unwrap();
        s.read_exact(&mut [0u8; 4]).unwrap();
        s.write_all(&[7u8; 64 << 10]).unwrap();
        c.read_exact(&mut vec![0u8; 64 << 10]).unwrap();
        for end in [&c, &s] {
            cookies.insert(rustix::net::sockopt::socket_cookie(end).unwrap());
        }
        conns.push((c, s));
    }
    let last = conns.last().unwrap().0.local_addr().unwrap().to_string();
    drop(conns);
    // The summary of the last server end (its peer the last client) comes after every flow's
    // start, and the log is read before each batch of records.
    for s in &mut streams {
        s.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_summary" && r["dst"] == last.as_str());
    }
    let [debug, warn, off] = streams.map(|s| s.stop().2);
    let watched: Vec<u64> = debug
        .lines()
        .filter_map(|l| l.strip_prefix("bbrscope: kernel debug: watching flow: cookie "))
        .map(|c| c.parse().unwrap())
        .collect();
    assert_eq!(watched.iter().copied().collect::<std::collections::BTreeSet<_>>(), cookies, "{debug}");
    assert_eq!(watched.len(), cookies.len(), "each once: {debug}");
    assert!(!warn.contains("kernel debug"), "{warn}");
    assert!(!off.contains("bbrscope: kernel"), "{off}");
}

#[test]
fn receivers_are_reported_only_when_asked() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let mut with = Stream::start(&["--port", &port, "--receivers", "--interval", "50"]);
    let mut without = Stream::start(&["--port", &port, "--interval", "50"]);
    let sender = Sender::start(server.addr, "cubic", Duration::from_millis(800), None);
    let local = sender.local;
    sender.join();
    for s in [&mut with, &mut without] {
        s.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_close" && r["src"] == local.to_string());
    }
    let receiving_side = |records: &[Value]| {
        records
            .iter()
            .any(|r| r["type"] == "flow_open" && r["src"] == server.addr.to_string() && r["dst"] == local.to_string())
    };
    let (_, with, _) = with.stop();
    let (_, without, _) = without.stop();
    assert!(receiving_side(&with), "--receivers should report the server's receiving socket");
    assert!(!receiving_side(&without), "without --receivers only senders are reported");
    let recv_sample =
        with.iter().find(|r| r["type"] == "sample" && r["src"] == server.addr.to_string()).expect("a receiver sample");
    assert!(u(&recv_sample["bytes_received"]) > 0, "{recv_sample}");
}

#[test]
fn bpf_stats_report_the_programs_own_cost_and_are_switched_off_after() {
    require_root();
    let before = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    let mut stream = Stream::start(&["--port", &port, "--bpf-stats"]);
    let sender = Sender::start(server.addr, "cubic", Duration::from_millis(1500), None);
    sender.join();
    stream.wait_for(Duration::from_secs(10), |r| {
        r["type"] == "stats" && r["ns_per_event"].as_f64().is_some_and(|v| v > 0.0)
    });
    let (code, records, _) = stream.stop();
    assert_eq!(code, 0);
    let ns = records.iter().filter_map(|r| r["ns_per_event"].as_f64()).next_back().unwrap();
    assert!(ns > 1.0 && ns < 100_000.0, "implausible ns per event: {ns}");
    let after = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    assert_eq!(before, after, "kernel.bpf_stats_enabled must be back to its previous value");
}

#[test]
fn a_full_flow_table_is_reported_not_silent() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port().to_string();
    // 16 slots, 40 sending flows: the tracepoint path's LRU table must evict (the sock_ops path
    // keeps flows in their sockets and has no table).
    let mut stream =
        Stream::start(&["--observer", "tracepoint", "--port", &port, "--max-flows", "16", "--interval", "20"]);
    let senders: Vec<Sender> =
        (0..40).map(|_| Sender::start(server.addr, "cubic", Duration::from_millis(1500), Some(2_000_000))).collect();
    for s in senders {
        s.join();
    }
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "stats" && u(&r["evicted_total"]) > 0);
    let (code, records, _) = stream.stop();
    assert_eq!(code, 0);
    let last = records.iter().rev().find(|r| r["type"] == "stats").unwrap();
    assert!(u(&last["evicted_total"]) > 0, "{last}");
}

/// A reader that pauses (or a disk whose journal stalls a write) does not stop the stream reading
/// the kernel's ring: the lines wait in memory and no record is lost. 4,000 short responses make
/// about 2.3 MB of close records, twice the 1 MiB ring, while the test reads nothing; a stream
/// that wrote on the thread that reads the ring would block on its full pipe after the first
/// ~60 lines and the ring would overflow.
#[test]
fn a_paused_reader_does_not_stop_the_ring_being_read() {
    use std::io::{Read as _, Write as _};
    require_root();
    const FLOWS: usize = 4000;
    const SIZE: usize = 1000;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let to = listener.local_addr().unwrap();
    let stream = Stream::start(&["--port", &to.port().to_string(), "--ring-size", "1M"]);
    stream.pause_reading(true);
    // The application's own log: every connection it served, each a response then a close.
    let server = std::thread::spawn(move || {
        (0..FLOWS)
            .map(|_| {
                let (mut c, peer) = listener.accept().unwrap();
                c.write_all(&[7u8; SIZE]).unwrap();
                peer
            })
            .collect::<Vec<SocketAddr>>()
    });
    // About 4,000 a second: the ring is read within a third of a second of filling a quarter.
    let start = std::time::Instant::now();
    for i in 0..FLOWS {
        let mut c = TcpStream::connect(to).unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), SIZE);
        std::thread::sleep(
            (start + Duration::from_micros(250 * i as u64)).saturating_duration_since(std::time::Instant::now()),
        );
    }
    let served = server.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stream.pause_reading(false);
    let src = to.to_string();
    let summaries =
        |records: &[Value]| records.iter().filter(|r| r["type"] == "flow_summary" && r["src"] == src).count();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while summaries(&stream.records()) < FLOWS && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    // A stats record after the last close (they come every 0.1 s).
    std::thread::sleep(Duration::from_millis(300));
    let (code, records, stderr) = stream.stop();
    assert_eq!(code, 0, "{stderr}");
    let last = records.iter().rev().find(|r| r["type"] == "stats").unwrap();
    assert_eq!(u(&last["drops_total"]), 0, "records lost while the reader paused: {last}");
    let by_peer: std::collections::HashMap<String, &Value> = records
        .iter()
        .filter(|r| r["type"] == "flow_summary" && r["src"] == src)
        .map(|r| (r["dst"].as_str().unwrap().to_string(), r))
        .collect();
    for peer in &served {
        let sum = by_peer.get(&peer.to_string()).unwrap_or_else(|| panic!("no flow_summary for {peer}: {last}"));
        // The response and the FIN.
        assert_eq!(u(&sum["bytes_acked"]), SIZE as u64 + 1, "{sum}");
    }
}

/// Installs a seccomp filter in the child that fails `socket(AF_NETLINK, _, NETLINK_SOCK_DIAG)`
/// with ENOENT: a kernel without inet_diag/tcp_diag that cannot load modules answers that way.
fn without_sock_diag(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    const NETLINK_SOCK_DIAG: u32 = 4;
    // AUDIT_ARCH_* (linux/audit.h): the filter must not match another ABI's syscall numbers.
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7;
    // seccomp_data: nr at 0, arch at 4, args[i] at 16 + 8 i (low half first on x86-64).
    let stmt = |code: u32, k: u32| libc::sock_filter { code: code as u16, jt: 0, jf: 0, k };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld = |off: u32| stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, off);
    let ret = |k: u32| stmt(libc::BPF_RET | libc::BPF_K, k);
    let filter = [
        ld(4),
        jeq(ARCH, 0, 6),
        ld(0),
        jeq(libc::SYS_socket as u32, 0, 4),
        ld(16),
        jeq(libc::AF_NETLINK as u32, 0, 2),
        ld(32),
        jeq(NETLINK_SOCK_DIAG, 1, 0),
        ret(libc::SECCOMP_RET_ALLOW),
        ret(libc::SECCOMP_RET_ERRNO | libc::ENOENT as u32),
    ];
    // SAFETY: prctl(2) is async-signal-safe, as pre_exec requires; the filter outlives the calls
    // (the kernel copies it).
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &raw const prog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Degrade, don't die: where the kernel cannot list sockets (no sock_diag), `stream` says so in
/// one line and still observes the connections that open while it runs.
#[test]
fn without_sock_diag_new_connections_are_still_observed() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let mut cmd = bbrscope();
    cmd.args(["stream", "--duration", "4", "--port", &server.addr.port().to_string()]);
    without_sock_diag(&mut cmd);
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    thread::sleep(Duration::from_millis(1500));
    let sender = Sender::start(server.addr, "cubic", Duration::from_millis(500), None);
    let local = sender.local;
    sender.join();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}: {err}", out.status.code());
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("sock_diag")).collect();
    assert_eq!(notes.len(), 1, "one line names what is missing: {err}");
    assert!(notes[0].contains("before the start"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["type"] == "flow_summary" && r["src"] == local.to_string());
    assert!(summary.is_some(), "the new connection is observed: {stdout}");
}

/// Every `jq` program in the README and docs/stream.md runs, with this machine's jq (Debian 12:
/// 1.6, where `end` is a keyword), on bbrscope's real output.
#[test]
fn the_documented_jq_examples_run() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let mut stream = Stream::start(&["--port", &server.addr.port().to_string()]);
    let sender = Sender::start(server.addr, "cubic", Duration::from_millis(500), None);
    let local = sender.local;
    sender.join();
    stream.wait_for(Duration::from_secs(10), |r| r["type"] == "flow_summary" && r["src"] == local.to_string());
    let (_, records, _) = stream.stop();
    let ndjson: String = records.iter().map(|r| format!("{r}\n")).collect();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut programs = Vec::new();
    for doc in ["README.md", "docs/stream.md"] {
        let text = std::fs::read_to_string(format!("{root}/{doc}")).unwrap();
        // `| jq -c '...'` or `| jq -s '...'`, the program possibly over several lines.
        let mut rest = text.as_str();
        while let Some(at) = rest.find("| jq -") {
            let flag = &rest[at + 5..at + 7];
            let open = rest[at..].find('\'').unwrap() + at + 1;
            let close = rest[open..].find('\'').unwrap() + open;
            programs.push((doc, flag.to_string(), rest[open..close].to_string()));
            rest = &rest[close + 1..];
        }
    }
    assert!(programs.len() >= 4, "{programs:?}");
    for (doc, flag, program) in programs {
        let mut jq = std::process::Command::new("jq")
            .args([flag.as_str(), &program])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("jq (scripts/setup.sh installs it)");
        std::io::Write::write_all(&mut jq.stdin.take().unwrap(), ndjson.as_bytes()).unwrap();
        let out = jq.wait_with_output().unwrap();
        assert!(
            out.status.success() && !out.stdout.is_empty(),
            "{doc}: jq {flag} '{program}': {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A BTF file with one type, `struct tcp_sock` of `size` bytes (no members), laid out by hand
/// from Documentation/bpf/btf.rst so that no bbrscope code writes it.
fn btf_with_tcp_sock_of(size: u32) -> Vec<u8> {
    const BTF_KIND_STRUCT: u32 = 4;
    let strings = b"\0tcp_sock\0";
    let types: Vec<u8> = [1, BTF_KIND_STRUCT << 24, size].iter().flat_map(|w: &u32| w.to_le_bytes()).collect();
    let mut btf = vec![0x9f, 0xeb, 1, 0];
    for word in [24, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
        btf.extend(word.to_le_bytes());
    }
    btf.extend(types);
    btf.extend(strings);
    btf
}

/// `--btf` with another kernel's types used to attach and report zeros and garbage read at wrong
/// offsets, without a word. Now the BTF's socket size is checked against the size of the
/// objects the running kernel allocates for TCP sockets (SLUB's sysfs).
#[test]
fn a_btf_of_another_kernel_is_refused_before_anything_is_attached() {
    require_root();
    let truth = std::fs::read_to_string("/sys/kernel/slab/TCP/object_size").expect("SLUB sysfs on this machine");
    let size: u32 = truth.trim().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.btf");
    std::fs::write(&other, btf_with_tcp_sock_of(size + 64)).unwrap();
    let mut child =
        bbrscope().args(["stream", "--btf"]).arg(&other).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    if wait_timeout(&mut child, Duration::from_secs(20)).is_none() {
        let _ = child.kill();
        panic!("bbrscope attached with another kernel's BTF");
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let expected = format!("struct tcp_sock is {} bytes in it but {size} in the running kernel", size + 64);
    assert!(stderr.contains("does not describe the running kernel") && stderr.contains(&expected), "{stderr}");
    // This kernel's own BTF, given as a file, passes the check and the stream attaches.
    let own = dir.path().join("vmlinux.btf");
    std::fs::copy("/sys/kernel/btf/vmlinux", &own).unwrap();
    let stream = Stream::start(&["--btf", own.to_str().unwrap()]);
    let (code, _, stderr) = stream.stop();
    assert_eq!(code, 0, "{stderr}");
}

//! `bbrscope top` in a real terminal (tmux) with live traffic (root required).

mod common;

use std::{process::Command, time::Duration};

use common::*;

#[test]
fn dashboard_shows_live_flows_takes_keys_and_restores_the_terminal() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port();
    let s = Session::start("top", 100, 30, &format!("top --port {port}"));
    s.wait_screen("the dashboard", |t| t.contains("bbrscope · live"));

    let cubic = Sender::start(server.addr, "cubic", Duration::from_secs(8), Some(20_000_000));
    let bbr = Sender::start(server.addr, "bbr", Duration::from_secs(8), Some(20_000_000));
    let text = s.wait_screen("both flows", |t| t.contains(" cubic ") && t.contains(" bbr "));
    assert!(text.contains(&server.addr.to_string()), "{text}");
    assert!(text.contains("cwnd (packets)") && text.contains("RTT ("), "{text}");

    s.keys("s");
    s.wait_screen("sort by cwnd", |t| t.contains("sort cwnd"));
    s.keys("c");
    s.wait_screen("compare view", |t| t.contains("RTT inflation"));
    s.keys("?");
    s.wait_screen("help", |t| t.contains("zoom the time axis"));
    // One Escape closes the help, the next leaves the compare view. Sent apart: two Escapes
    // arriving together read as one Alt+Escape.
    s.keys("Escape");
    s.wait_screen("help closed", |t| !t.contains("zoom the time axis"));
    s.keys("Escape");
    // A bigger terminal gets the wide layout (extra columns in the flow list).
    tmux(&["resize-window", "-t", &s.0, "-x", "160", "-y", "45"]);
    s.wait_screen("the wide layout after resize", |t| {
        t.contains("PACING") && t.lines().any(|l| l.chars().count() >= 150)
    });
    cubic.join();
    bbr.join();
    s.keys("q");
    let text = s.wait_exit();
    assert!(text.contains("EXIT=0"), "{text}");
    assert!(text.contains(" icanon") && !text.contains("-icanon"), "terminal left in raw mode:\n{text}");
    assert!(!text.contains("bbrscope · live"), "alternate screen not left:\n{text}");
}

#[test]
fn dashboard_exits_cleanly_on_sigterm() {
    require_root();
    let s = Session::start("term", 80, 24, "top --port 9");
    s.wait_screen("the dashboard", |t| t.contains("bbrscope · live"));
    // Anchored so it matches bbrscope itself, not the shell running it.
    let pattern = format!("^{} top --port 9$", env!("CARGO_BIN_EXE_bbrscope"));
    assert!(Command::new("pkill").args(["-TERM", "-f", &pattern]).status().unwrap().success());
    let text = s.wait_exit();
    assert!(text.contains("EXIT=0"), "{text}");
    assert!(text.contains(" icanon") && !text.contains("-icanon"), "{text}");
}

/// `top --duration` takes the same times as every command (here `3s`), then closes the
/// dashboard, exits 0 and leaves the terminal as it found it.
#[test]
fn top_closes_itself_after_its_duration() {
    require_root();
    let s = Session::start("dur", 80, 24, "top --port 9 --duration 3s");
    s.wait_screen("the dashboard", |t| t.contains("bbrscope · live"));
    let text = s.wait_exit();
    assert!(text.contains("EXIT=0"), "{text}");
    assert!(text.contains(" icanon") && !text.contains("-icanon"), "{text}");
}

#[test]
fn top_without_a_terminal_says_to_use_stream() {
    require_root();
    let out = bbrscope().args(["top", "--port", "9"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bbrscope stream") && err.lines().count() == 1, "{err}");
}

#[test]
fn demo_runs_in_the_dashboard_and_q_stops_it_cleanly() {
    require_root();
    let demo = "demo --rate 10mbit --rtt 40ms";
    let s = Session::start("demo", 120, 36, &format!("{demo} --duration 6"));
    // The compare view, on the demo's two flows only.
    let text = s.wait_screen("the demo's compare view", |t| t.contains("cubic (1 flow)") && t.contains("bbr (1 flow)"));
    assert!(text.contains("throughput (Mbit/s)"), "{text}");
    let text = s.wait_exit();
    assert!(text.contains("EXIT=0") && text.contains("BBR/CUBIC goodput"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");

    // q mid-run stops the demo (a normal end: exit 0), removes its links, restores the terminal
    // and summarises what ran.
    let s2 = Session::start("demo-q", 120, 36, &format!("{demo} --duration 60"));
    s2.wait_screen("the demo's compare view", |t| t.contains("bbr (1 flow)"));
    s2.keys("q");
    let text = s2.wait_exit();
    assert!(text.contains("EXIT=0") && text.contains("stopped with q"), "{text}");
    assert!(text.contains("STOPPED EARLY (q)") && text.contains("BBR/CUBIC goodput"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");

    // Ctrl-C in the dashboard is a key, not SIGINT: the same partial summary, exit 1 as for the
    // signal.
    let s3 = Session::start("demo-c", 120, 36, &format!("{demo} --duration 60"));
    s3.wait_screen("the demo's compare view", |t| t.contains("bbr (1 flow)"));
    s3.keys("C-c");
    let text = s3.wait_exit();
    assert!(text.contains("EXIT=1") && text.contains("interrupted by Ctrl-C"), "{text}");
    assert!(text.contains("STOPPED EARLY (Ctrl-C)"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");
}

/// A recording with a corrupt line and a truncated last one (a killed recorder) replays; the
/// footer and, after exit, stderr say how many lines were skipped.
#[test]
fn replay_of_a_damaged_recording_plays_and_reports_skipped_lines() {
    require_root();
    let fixture = format!("{}/tests/fixtures/cubic-vs-bbr.ndjson", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(fixture).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(50, "\u{0}\u{0}garbage");
    let last = lines.pop().unwrap();
    let path = std::env::temp_dir().join(format!("bbrscope-damaged-{}.ndjson", std::process::id()));
    std::fs::write(&path, format!("{}\n{}", lines.join("\n"), &last[..20])).unwrap();
    let s = Session::start("replay-damaged", 120, 30, &format!("replay --speed 64 {}", path.display()));
    s.wait_screen("the replay's end", |t| t.contains("replay end") && t.contains("2 unreadable lines skipped"));
    s.keys("q");
    let text = s.wait_exit();
    std::fs::remove_file(&path).unwrap();
    assert!(text.contains("EXIT=0") && text.contains("2 unreadable lines skipped (first: line 51"), "{text}");
}

/// `replay -` from a pipe that stays open: the dashboard shows what has arrived and quits on q.
#[test]
fn replay_from_an_open_pipe_shows_what_arrived_and_quits_on_q() {
    require_root();
    let fifo = std::env::temp_dir().join(format!("bbrscope-replay-fifo-{}", std::process::id()));
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo has no other preconditions.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let s = Session::start("replay-pipe", 120, 30, &format!("replay - < {}", fifo.display()));
    // Opening the write end waits for the reader (the shell's redirection).
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let fixture = format!("{}/tests/fixtures/cubic-vs-bbr.ndjson", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(fixture).unwrap();
    let head: Vec<&str> = text.lines().take(text.lines().count() / 2).collect();
    std::io::Write::write_all(&mut writer, (head.join("\n") + "\n").as_bytes()).unwrap();
    s.wait_screen("the flows that arrived", |t| t.contains(" cubic ") && t.contains(" bbr "));
    s.wait_screen("waiting for more", |t| t.contains("waiting for input"));
    s.keys("q");
    let text = s.wait_exit();
    drop(writer);
    std::fs::remove_file(&fifo).unwrap();
    assert!(text.contains("EXIT=0"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");
}

/// Input that is not a recording and never ends: refused quickly in bounded memory.
#[test]
// Reaped by wait4 below, which also reports the peak memory that `wait` would not.
#[allow(clippy::zombie_processes)]
fn replay_of_dev_zero_is_refused_in_bounded_memory() {
    require_root();
    let t = std::time::Instant::now();
    let child = bbrscope().args(["replay", "/dev/zero"]).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child, valid pointers to locals; reaps it (its stderr pipe stays readable).
    assert_eq!(unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) }, pid);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.unwrap(), &mut err).unwrap();
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 2, "status {status}: {err}");
    assert!(err.contains("not a bbrscope stream recording") && err.lines().count() == 1, "{err}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // ru_maxrss is in KiB.
    assert!(usage.ru_maxrss < 64 * 1024, "peak RSS {} KiB", usage.ru_maxrss);
}

//! `bbrscope top` in a real terminal (tmux) with live traffic (root required).

mod common;

use std::{process::Command, time::Duration};

use common::*;

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux (installed by scripts/setup.sh)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.0]);
    }
}

fn screen(s: &Session) -> String {
    tmux(&["capture-pane", "-p", "-t", &s.0])
}

fn wait_screen(s: &Session, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let start = std::time::Instant::now();
    loop {
        let text = screen(s);
        if pred(&text) {
            return text;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "timed out waiting for {what}; screen:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn dashboard_shows_live_flows_takes_keys_and_restores_the_terminal() {
    require_root();
    let server = Discard::bind("127.0.0.1:0");
    let port = server.addr.port();
    let name = format!("bbrscope-top-{}", std::process::id());
    let s = Session(name.clone());
    // After bbrscope exits the pane prints its status and whether the tty is back in cooked mode.
    let cmd = format!(
        "{} top --port {port}; echo EXIT=$?; stty -a | grep -o -- ' -\\?icanon' ; sleep 30",
        env!("CARGO_BIN_EXE_bbrscope")
    );
    tmux(&["new-session", "-d", "-s", &name, "-x", "100", "-y", "30", &cmd]);
    wait_screen(&s, "the dashboard", |t| t.contains("bbrscope · live"));

    let cubic = Sender::start(server.addr, "cubic", Duration::from_secs(8), Some(20_000_000));
    let bbr = Sender::start(server.addr, "bbr", Duration::from_secs(8), Some(20_000_000));
    let text = wait_screen(&s, "both flows", |t| t.contains(" cubic ") && t.contains(" bbr "));
    assert!(text.contains(&server.addr.to_string()), "{text}");
    assert!(text.contains("cwnd (packets)") && text.contains("RTT (ms)"), "{text}");

    tmux(&["send-keys", "-t", &name, "s"]);
    wait_screen(&s, "sort by cwnd", |t| t.contains("sort cwnd"));
    tmux(&["send-keys", "-t", &name, "c"]);
    wait_screen(&s, "compare view", |t| t.contains("RTT inflation"));
    tmux(&["send-keys", "-t", &name, "?"]);
    wait_screen(&s, "help", |t| t.contains("zoom the time axis"));
    // One Escape closes the help, the next leaves the compare view.
    tmux(&["send-keys", "-t", &name, "Escape"]);
    tmux(&["send-keys", "-t", &name, "Escape"]);
    // A bigger terminal gets the wide layout (extra columns in the flow list).
    tmux(&["resize-window", "-t", &name, "-x", "160", "-y", "45"]);
    wait_screen(&s, "the wide layout after resize", |t| {
        t.contains("PACING") && t.lines().any(|l| l.chars().count() >= 150)
    });
    cubic.join();
    bbr.join();
    tmux(&["send-keys", "-t", &name, "q"]);
    let text = wait_screen(&s, "exit and the tty check", |t| t.contains("EXIT=") && t.contains("icanon"));
    assert!(text.contains("EXIT=0"), "{text}");
    assert!(text.contains(" icanon") && !text.contains("-icanon"), "terminal left in raw mode:\n{text}");
    assert!(!text.contains("bbrscope · live"), "alternate screen not left:\n{text}");
}

#[test]
fn dashboard_exits_cleanly_on_sigterm() {
    require_root();
    let name = format!("bbrscope-term-{}", std::process::id());
    let s = Session(name.clone());
    let cmd = format!(
        "{} top --port 9; echo EXIT=$?; stty -a | grep -o -- ' -\\?icanon'; sleep 30",
        env!("CARGO_BIN_EXE_bbrscope")
    );
    tmux(&["new-session", "-d", "-s", &name, "-x", "80", "-y", "24", &cmd]);
    wait_screen(&s, "the dashboard", |t| t.contains("bbrscope · live"));
    // Anchored so it matches bbrscope itself, not the shell running it.
    let pattern = format!("^{} top --port 9$", env!("CARGO_BIN_EXE_bbrscope"));
    assert!(Command::new("pkill").args(["-TERM", "-f", &pattern]).status().unwrap().success());
    let text = wait_screen(&s, "exit and the tty check", |t| t.contains("EXIT=") && t.contains("icanon"));
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
    let name = format!("bbrscope-demo-{}", std::process::id());
    let s = Session(name.clone());
    let cmd = format!(
        "{} demo --rate 10mbit --rtt 40ms --duration 6; echo EXIT=$?; stty -a | grep -o -- ' -\\?icanon'; sleep 60",
        env!("CARGO_BIN_EXE_bbrscope")
    );
    tmux(&["new-session", "-d", "-s", &name, "-x", "120", "-y", "36", &cmd]);
    // The compare view, on the demo's two flows only.
    let text =
        wait_screen(&s, "the demo's compare view", |t| t.contains("cubic (1 flow)") && t.contains("bbr (1 flow)"));
    assert!(text.contains("throughput (Mbit/s)"), "{text}");
    let text = wait_screen(&s, "the summary", |t| t.contains("EXIT=") && t.contains("icanon"));
    assert!(text.contains("EXIT=0") && text.contains("BBR/CUBIC goodput"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");

    // q mid-run stops the demo, removes its links and restores the terminal.
    let name2 = format!("bbrscope-demo-q-{}", std::process::id());
    let s2 = Session(name2.clone());
    tmux(&["new-session", "-d", "-s", &name2, "-x", "120", "-y", "36", &cmd.replace("--duration 6", "--duration 60")]);
    wait_screen(&s2, "the demo's compare view", |t| t.contains("bbr (1 flow)"));
    tmux(&["send-keys", "-t", &name2, "q"]);
    let text = wait_screen(&s2, "exit", |t| t.contains("EXIT=") && t.contains("icanon"));
    assert!(text.contains("EXIT=1") && text.contains("stopped from the dashboard"), "{text}");
    assert!(!text.contains("-icanon"), "{text}");
}

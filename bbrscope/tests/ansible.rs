//! packaging/ansible/canary-rollout.yml run for real by `ansible-playbook` (Debian's
//! `ansible-core`, installed by scripts/setup.sh) with `connection: local`, against two network
//! namespaces the test creates: host `canary1` is one (group `canary`), host `rest1` the other.
//! Each namespace has its own `bbrscope export` (filtered to it) and steady traffic: clients that
//! upload 64 KB to a server that answers after a fixed 150 ms think time, so every flow completes
//! in the same completion-time bucket and the comparison is not loopback noise. A real Prometheus
//! scrapes both exporters; the playbook queries it.
//!
//! What is checked against the kernel (the namespaces' sysctl, `nstat`) and bbrscope's record
//! (`status --json`), never against the playbook's own words alone:
//! - `--check` changes nothing;
//! - a real run applies on the canary, judges it from Prometheus, proceeds to the rest, and a
//!   second run changes nothing (`changed=0` everywhere);
//! - a canary made worse on purpose (20% of its data packets dropped) is reverted, the rest is
//!   never touched, and the play fails.
//!
//! The namespaces start on `reno` and the rollout is `bbr` (both on the host's allowed list, so a
//! namespace can have either without touching the initial namespace).

mod common;

use std::{
    collections::HashMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::{self, JoinHandle},
    time::Duration,
};

use common::{
    Netns, drop_data_packets,
    prometheus::{self, Exporter, Prometheus},
    require_root,
    responses::{self, Population},
    tcp_congestion_control,
};
use serde_json::Value;

const PLAYBOOK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/ansible");
/// The port of each namespace's server (namespaces have their own ports).
const PORT: u16 = 8080;
/// The server's think time: every flow lasts at least this long, whatever the algorithm.
const THINK: Duration = Duration::from_millis(150);
const BEFORE: &str = "reno";
const ROLLOUT: &str = "bbr";

/// Uploads of 64 KB to a server in the same namespace that answers (closes) after [`THINK`],
/// over and over until dropped.
struct Traffic {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Traffic {
    fn start(ns: &Netns) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let ready = ns.spawn(|| {
            let listener = TcpListener::bind(("127.0.0.1", PORT)).expect("bind");
            thread::spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    thread::spawn(move || {
                        let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                        let mut sink = Vec::new();
                        let _ = conn.read_to_end(&mut sink);
                        thread::sleep(THINK);
                    });
                }
            });
        });
        ready.join().unwrap();
        let st = stop.clone();
        let client = ns.spawn(move || {
            let to = SocketAddr::from(([127, 0, 0, 1], PORT));
            let body = vec![0x5au8; 64 << 10];
            while !st.load(Ordering::Relaxed) {
                // Under loss a connect or a read may time out; the next flow starts anyway.
                let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else { continue };
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                if s.write_all(&body).is_ok() && s.shutdown(std::net::Shutdown::Write).is_ok() {
                    let _ = s.read_to_end(&mut Vec::new());
                }
            }
        });
        Traffic { stop, threads: vec![client] }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Two namespaces with traffic and an exporter each, a Prometheus scraping both, an inventory
/// naming them, and a stand-in root for bbrscope's records. Fields drop in order: traffic stops
/// before the namespaces go.
struct Fleet {
    _traffic: Vec<Traffic>,
    prom: Prometheus,
    exporters: Vec<Exporter>,
    canary: Netns,
    rest: Netns,
    /// bbrscope's `--root`: its records of what it applied, kept out of the host's /var/lib.
    root: tempfile::TempDir,
    /// ANSIBLE_HOME, its temp files and the inventory.
    home: tempfile::TempDir,
}

impl Fleet {
    fn new(lossy_canary: bool) -> Fleet {
        require_root();
        let (canary, rest) = (Netns::new("ans-c"), Netns::new("ans-r"));
        for ns in [&canary, &rest] {
            ns.exec("sysctl", &["-qw", &format!("net.ipv4.tcp_congestion_control={BEFORE}")]);
        }
        if lossy_canary {
            drop_data_packets(&canary, PORT, 20, false);
        }
        let exporters: Vec<Exporter> = [&canary, &rest]
            .iter()
            .map(|ns| Exporter::start(&["--netns", &ns.path(), "--port", &PORT.to_string()]))
            .collect();
        let prom = Prometheus::start(&exporters.iter().map(|e| e.addr).collect::<Vec<_>>());
        prom.wait_up(2);
        let traffic = vec![Traffic::start(&canary), Traffic::start(&rest)];
        let (root, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let scope = |ns: &Netns| format!("--netns {} --root {}", ns.name, root.path().display());
        let host = |name: &str, ns: &Netns, e: &Exporter| {
            format!(
                "{name} ansible_connection=local bbrscope_instance={} bbrscope_scope_args='{}' \
                 bbrscope_status_args='--netns {} --root {}'\n",
                e.addr,
                scope(ns),
                ns.name,
                root.path().display()
            )
        };
        let inventory = format!(
            "[canary]\n{}\n[edge]\n{}\n[all:vars]\nansible_python_interpreter=auto_silent\n",
            host("canary1", &canary, &exporters[0]),
            host("rest1", &rest, &exporters[1]),
        );
        std::fs::write(home.path().join("inventory"), inventory).unwrap();
        Fleet { _traffic: traffic, prom, exporters, canary, rest, root, home }
    }

    /// `ansible-playbook canary-rollout.yml EXTRA`: (succeeded, stdout + stderr).
    fn playbook(&self, extra: &[&str]) -> (bool, String) {
        let fixed = [
            "-e",
            &format!("bbrscope_algorithm={ROLLOUT}"),
            "-e",
            &format!("bbrscope_prometheus_url=http://{}", self.prom.addr),
            // Long enough for a few dozen flows per namespace under the new setting.
            "-e",
            "bbrscope_soak_seconds=8",
            "-e",
            "bbrscope_window=10s",
            // Loopback's noise floor: tail-loss probes now and then (about one per 60 flows here,
            // a retransmit rate of 0.5-2%); the lossy canary's 20% drop is far above it.
            "-e",
            "bbrscope_retrans_slack=0.05",
        ]
        .map(String::from);
        let args: Vec<&str> = fixed.iter().map(String::as_str).chain(extra.iter().copied()).collect();
        ansible_playbook(self.home.path(), "canary-rollout.yml", &args)
    }

    /// `bbrscope status --netns NS --json` under the stand-in root: (the namespace's default as
    /// bbrscope reads it, how many scopes bbrscope has recorded as changed).
    fn status(&self, ns: &Netns) -> (String, usize) {
        let out = common::bbrscope()
            .args(["status", "--json", "--netns", &ns.name, "--root"])
            .arg(self.root.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "status: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = v["namespaces"].as_array().and_then(|a| a.iter().find(|n| n["namespace"] == ns.name.as_str()));
        let default = n.map(|n| n["default"].as_str().unwrap_or("").to_string()).unwrap_or_default();
        (default, v["bbrscope"].as_array().map_or(0, std::vec::Vec::len))
    }

    /// The namespaces' default algorithms, read by the test in each namespace.
    fn defaults(&self) -> (String, String) {
        (self.canary.enter(tcp_congestion_control), self.rest.enter(tcp_congestion_control))
    }

    /// Flows the canary's exporter counted per algorithm, through Prometheus.
    fn canary_flows_by_cc(&self) -> HashMap<String, f64> {
        self.prom.by_cc(&format!("bbrscope_flows_opened_total{{instance=\"{}\"}}", self.exporters[0].addr))
    }
}

/// `ansible-playbook -i HOME/inventory PLAYBOOK -e bbrscope_bin=... EXTRA` in packaging/ansible,
/// with Ansible's files under `home`: (succeeded, stdout + stderr).
fn ansible_playbook(home: &std::path::Path, playbook: &str, extra: &[&str]) -> (bool, String) {
    let out = Command::new("ansible-playbook")
        .arg("-i")
        .arg(home.join("inventory"))
        .arg(playbook)
        .args(["-e", &format!("bbrscope_bin={}", env!("CARGO_BIN_EXE_bbrscope"))])
        .args(extra)
        .current_dir(PLAYBOOK_DIR)
        .env("ANSIBLE_HOME", home)
        .env("ANSIBLE_LOCAL_TEMP", home.join("tmp"))
        .env("ANSIBLE_REMOTE_TEMP", home.join("tmp"))
        .env("ANSIBLE_ASYNC_DIR", home.join("async"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .output()
        .expect("ansible-playbook is not installed: run scripts/setup.sh (Debian package `ansible-core`)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The PLAY RECAP: host -> (changed, failed).
fn recap(out: &str) -> HashMap<String, (u32, u32)> {
    let mut hosts = HashMap::new();
    let Some((_, tail)) = out.split_once("PLAY RECAP") else { return hosts };
    for line in tail.lines() {
        let Some((host, counts)) = line.split_once(" : ") else { continue };
        let get = |k: &str| {
            counts
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(u32::MAX)
        };
        hosts.insert(host.trim().to_string(), (get("changed"), get("failed")));
    }
    hosts
}

/// The kernel's retransmitted / original data segments sent in `ns` (`nstat`, independent of
/// bbrscope). Data segments, as the playbook's rate counts them: all segments out (TcpOutSegs)
/// include the receiving side's ACKs, which halve the rate here.
fn retrans_rate(ns: &Netns) -> f64 {
    let out = ns.exec("nstat", &["-az", "TcpRetransSegs", "TcpExtTCPOrigDataSent"]);
    let get = |name: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in nstat: {out}"))
    };
    get("TcpRetransSegs") / get("TcpExtTCPOrigDataSent").max(1.0)
}

fn host_cc_is_untouched(before: &str) {
    assert_eq!(tcp_congestion_control(), before, "the initial namespace's default changed");
}

#[test]
fn check_mode_changes_nothing_then_rollout_proceeds_and_is_idempotent() {
    let host_cc = tcp_congestion_control();
    let fleet = Fleet::new(false);

    // No data yet (a window in which no scrape falls: every query answers nothing, NaN): check
    // mode still plans and reports, and a real judgement would fail, not crash on the NaN.
    let (ok, out) = fleet.playbook(&["--check", "-e", "bbrscope_window=1ms"]);
    assert!(ok && out.contains("not judged (check mode)"), "{out}");

    // (a) --check: plans (bbrscope apply --dry-run), reads Prometheus, changes nothing.
    let (ok, out) = fleet.playbook(&["--check"]);
    assert!(ok, "{out}");
    assert!(out.contains("not judged (check mode)"), "{out}");
    let r = recap(&out);
    // "changed" in check mode: the plan has a change for each namespace.
    assert_eq!(r.get("canary1"), Some(&(1, 0)), "{out}");
    assert_eq!(r.get("rest1"), Some(&(1, 0)), "{out}");
    assert_eq!(fleet.defaults(), (BEFORE.into(), BEFORE.into()), "{out}");
    assert_eq!(fleet.status(&fleet.canary), (BEFORE.into(), 0), "nothing recorded: {out}");
    assert_eq!(fleet.status(&fleet.rest), (BEFORE.into(), 0), "nothing recorded: {out}");

    // (b) for real: the canary first, judged from Prometheus, then the rest.
    let (ok, out) = fleet.playbook(&[]);
    assert!(ok, "{out}");
    assert!(out.contains("canary passes"), "{out}");
    let r = recap(&out);
    assert_eq!(r.get("canary1"), Some(&(1, 0)), "{out}");
    assert_eq!(r.get("rest1"), Some(&(1, 0)), "{out}");
    assert!(out.contains("Show bbrscope status"), "the handler ran after the change: {out}");
    assert_eq!(fleet.defaults(), (ROLLOUT.into(), ROLLOUT.into()), "{out}");
    assert_eq!(fleet.status(&fleet.canary), (ROLLOUT.into(), 2), "both namespaces recorded: {out}");
    // The canary's exporter saw its new flows under the new algorithm, as Prometheus has it.
    let by_cc = fleet.canary_flows_by_cc();
    assert!(by_cc.get(ROLLOUT).is_some_and(|&n| n > 0.0), "{by_cc:?}");

    // A second run changes nothing anywhere.
    let (ok, out) = fleet.playbook(&[]);
    assert!(ok, "{out}");
    let r = recap(&out);
    assert!(r.len() == 3 && r.values().all(|&(changed, failed)| changed == 0 && failed == 0), "{r:?}\n{out}");
    assert!(!out.contains("Show bbrscope status"), "no change, no handler: {out}");

    for ns in [&fleet.canary, &fleet.rest] {
        let out =
            common::bbrscope().args(["revert", "--netns", &ns.name, "--root"]).arg(fleet.root.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(fleet.defaults(), (BEFORE.into(), BEFORE.into()));
    host_cc_is_untouched(&host_cc);
}

#[test]
fn a_failing_canary_is_reverted_and_the_rest_untouched() {
    let host_cc = tcp_congestion_control();
    let fleet = Fleet::new(true);
    let (ok, out) = fleet.playbook(&[]);
    assert!(!ok, "the play fails on a failing canary: {out}");
    assert!(out.contains("canary FAILS") && out.contains("reverted"), "{out}");
    let r = recap(&out);
    assert_eq!(r.get("canary1").map(|&(_, failed)| failed), Some(1), "{out}");
    // The rest was never applied to (its only task would have been the apply).
    assert!(r.get("rest1").is_none_or(|&(changed, _)| changed == 0), "{out}");
    // The canary is as it was: its default back, nothing recorded; the rest never changed.
    assert_eq!(fleet.defaults(), (BEFORE.into(), BEFORE.into()), "{out}");
    assert_eq!(fleet.status(&fleet.canary), (BEFORE.into(), 0), "{out}");
    // The canary really was worse, by the kernel's counters: above the test's slack (0.05),
    // where the rest (clean loopback, a tail-loss probe now and then) is below it.
    let (canary, rest) = (retrans_rate(&fleet.canary), retrans_rate(&fleet.rest));
    assert!(canary > 0.05 && rest < 0.05, "retransmit rates: canary {canary}, rest {rest}");
    host_cc_is_untouched(&host_cc);
}

/// packaging/ansible/fleet-experiment.yml for real, on two hosts of this kernel: each an emulated
/// path (60 ms, 1% random loss, 20 Mbit/s: reno is loss-limited there, BBR is not) with its
/// server on a port of its own (two experiments side by side need disjoint scopes), its sums
/// scraped by one real Prometheus, and a namespace of the test's as the scope the play applies
/// in. Arms reno,bbr: the fleet finds B better and the play applies bbr on both hosts (the
/// namespaces' defaults, read in them; bbrscope's record); arms bbr,reno: A better, nothing
/// applied, the play still succeeds and says why. Both times the experiments are over when the
/// play ends, and their recordings, pooled, answer as the fleet did.
#[test]
fn a_fleet_experiment_ends_in_the_apply_its_answer_supports_or_in_none() {
    require_root();
    let host_cc = tcp_congestion_control();
    let base = 40_000 + (std::process::id() % 10_000) as u16;
    let hosts: Vec<(Population, Netns, SocketAddr)> = (0..2u8)
        .map(|i| {
            let (p, listener) = responses::emulated(96 + i, 60, 0.01, base + u16::from(i));
            responses::serve(listener);
            let scope = Netns::new(&format!("fx{i}"));
            scope.exec("sysctl", &["-qw", &format!("net.ipv4.tcp_congestion_control={BEFORE}")]);
            let sums: SocketAddr = format!("127.0.0.1:{}", prometheus::free_port()).parse().unwrap();
            (p, scope, sums)
        })
        .collect();
    let prom = Prometheus::start(&hosts.iter().map(|(.., sums)| *sums).collect::<Vec<_>>());
    let (root, home, records) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut inventory = String::from("[experiment]\n");
    for (i, (p, scope, sums)) in hosts.iter().enumerate() {
        inventory += &format!(
            "host{i} ansible_connection=local bbrscope_experiment_args='--port {}' bbrscope_sums_listen={sums} \
             bbrscope_record={}/host{i}.ndjson bbrscope_scope_args='--netns {} --root {}' \
             bbrscope_status_args='--netns {} --root {}'\n",
            p.server.port(),
            records.path().display(),
            scope.name,
            root.path().display(),
            scope.name,
            root.path().display(),
        );
    }
    inventory += "[all:vars]\nansible_python_interpreter=auto_silent\n";
    std::fs::write(home.path().join("inventory"), inventory).unwrap();
    let defaults = || hosts.iter().map(|(_, ns, _)| ns.enter(tcp_congestion_control)).collect::<Vec<_>>();
    let run = |arms: &str, id: &str, more: &[&str]| {
        let go = AtomicBool::new(true);
        thread::scope(|s| {
            // Clients of each host, for as long as the play runs: a 20 KB and a 1 MB response in turn.
            for (p, ..) in &hosts {
                let go = &go;
                s.spawn(move || {
                    responses::load_while(p, 3, &[20_000, 1_000_000], Duration::ZERO, &|| go.load(Ordering::Relaxed))
                });
            }
            let prometheus = format!("bbrscope_prometheus_url=http://{}", prom.addr);
            let (arms, id) = (format!("bbrscope_arms={arms}"), format!("bbrscope_experiment_id={id}"));
            let extra = ["-e", &arms, "-e", &id, "-e", &prometheus];
            let timing = ["-e", "bbrscope_experiment_seconds=240", "-e", "bbrscope_look_seconds=3"];
            let out = ansible_playbook(home.path(), "fleet-experiment.yml", &[&extra[..], &timing[..], more].concat());
            go.store(false, Ordering::Relaxed);
            // The play's answer in the test's log.
            if let Some(said) = out.1.lines().find(|l| l.contains("fleet experiment")) {
                eprintln!("{}", said.trim());
            }
            out
        })
    };
    let running = || {
        let st: Value =
            serde_json::from_slice(&common::bbrscope().args(["status", "--json"]).output().unwrap().stdout).unwrap();
        st["experiments"].as_array().unwrap().len()
    };
    let pooled = || {
        let files: Vec<String> = (0..2).map(|i| format!("{}/host{i}.ndjson", records.path().display())).collect();
        let out = common::bbrscope().args(["experiment", "--json", "--analyze"]).args(&files).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let all = v["groups"].as_array().unwrap().iter().find(|g| g["label"] == "all flows").unwrap().clone();
        all["verdict"].as_str().unwrap().to_string()
    };

    // --check: nothing started, judged or applied (the apply's plan shown).
    let (ok, out) = run("reno,bbr", "t_fleet_check", &["--check"]);
    assert!(ok && out.contains("all flows: not judged (check mode)"), "{out}");
    assert_eq!(defaults(), [BEFORE, BEFORE], "{out}");
    assert!(!records.path().join("host0.ndjson").exists(), "{out}");

    // BBR against reno on lossy paths: applied on both hosts.
    let (ok, out) = run("reno,bbr", "t_fleet_b", &[]);
    assert!(ok, "{out}");
    assert!(out.contains("on 2 hosts, all flows: b_better") && out.contains("Applying bbr"), "{out}");
    assert_eq!(defaults(), [ROLLOUT, ROLLOUT], "{out}");
    assert_eq!(running(), 0, "the experiments ended with the play: {out}");
    assert_eq!(pooled(), "b_better", "the hosts' recordings pooled answer as the fleet did");
    for (_, ns, _) in &hosts {
        let out = common::bbrscope().args(["revert", "--netns", &ns.name, "--root"]).arg(root.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(defaults(), [BEFORE, BEFORE]);

    // reno against BBR: A better, nothing applied, and the play says so.
    let (ok, out) = run("bbr,reno", "t_fleet_a", &[]);
    assert!(ok, "{out}");
    assert!(out.contains("on 2 hosts, all flows: a_better") && out.contains("Nothing is applied"), "{out}");
    assert_eq!(defaults(), [BEFORE, BEFORE], "{out}");
    let r = recap(&out);
    assert!(["host0", "host1"].iter().all(|h| r.get(*h).is_some_and(|&(_, failed)| failed == 0)), "{r:?}\n{out}");
    assert_eq!(running(), 0, "the experiments ended with the play: {out}");
    assert_eq!(pooled(), "a_better");
    host_cc_is_untouched(&host_cc);
}

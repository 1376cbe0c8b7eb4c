//! packaging/ansible's playbooks run for real by `ansible-playbook` (Debian's `ansible-core`,
//! installed by scripts/setup.sh) with `connection: local`, on "hosts" this kernel holds: an
//! experiment host is an emulated path (60 ms, 1% random loss, 20 Mbit/s: reno is loss-limited
//! there, BBR is not) with its server on a port of its own (experiments side by side need
//! disjoint scopes) and clients fetching a 20 KB and a 1 MB response in turn while the play runs;
//! every host has a network namespace of the test's as the scope the play applies in. One real
//! Prometheus scrapes the experiments' sums; the playbooks query it through `bbrscope experiment
//! --analyze-prometheus`.
//!
//! What is checked against the kernel (each namespace's default, read in it) and bbrscope's own
//! record (`status --json`, the recordings analysed again), never against the playbook's words
//! alone. The namespaces (the scopes and the experiment hosts' servers) start on `reno`; arms `reno,bbr` (B better on those paths) and
//! `bbr,reno` (B worse) give both answers, both on the host's allowed list so a namespace can
//! have either without touching the initial namespace.

mod common;

use std::{
    collections::HashMap,
    net::SocketAddr,
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::Duration,
};

use common::{
    Netns,
    prometheus::{self, Prometheus},
    require_root,
    responses::{self, Population},
    tcp_congestion_control,
};
use serde_json::Value;

const PLAYBOOK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../packaging/ansible");

/// One lab at a time: both build theirs from the same emulated paths and ports (whose
/// experiments would overlap), and each keeps the machine's cores busy with its clients.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
const BEFORE: &str = "reno";
const ROLLOUT: &str = "bbr";

/// One host of the inventory.
struct Host {
    name: &'static str,
    /// Its emulated path and server, for a host that runs the experiment.
    path: Option<Population>,
    /// Where the play applies on it.
    scope: Netns,
    /// Where its experiment serves its sums.
    sums: SocketAddr,
}

/// Hosts in inventory groups, a Prometheus scraping their sums, and a stand-in root for
/// bbrscope's records. Fields drop in order: the Prometheus stops before the hosts go.
struct Lab {
    prom: Prometheus,
    hosts: Vec<Host>,
    /// bbrscope's `--root`: its records of what it applied, kept out of the host's /var/lib.
    root: tempfile::TempDir,
    /// ANSIBLE_HOME, its temp files and the inventory.
    home: tempfile::TempDir,
    /// The experiments' recordings (bbrscope_record).
    records: tempfile::TempDir,
    /// [`ONE_AT_A_TIME`], held for the lab's life and released last.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Lab {
    /// `hosts`: (name, group, whether it runs the experiment).
    fn new(hosts: &[(&'static str, &str, bool)]) -> Lab {
        require_root();
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let base = 40_000 + (std::process::id() % 10_000) as u16;
        let hosts: Vec<(Host, &str)> = hosts
            .iter()
            .zip(0u8..)
            .map(|(&(name, group, runs), i)| {
                let path = runs.then(|| {
                    let (p, listener) = responses::emulated(96 + i, 60, 0.01, base + u16::from(i));
                    // The host ran reno before, as its scope does: each connection's status quo.
                    p.link.sender.sysctl("net/ipv4/tcp_congestion_control", BEFORE).unwrap();
                    responses::serve(listener);
                    p
                });
                let scope = Netns::new(&format!("fx{i}"));
                scope.exec("sysctl", &["-qw", &format!("net.ipv4.tcp_congestion_control={BEFORE}")]);
                let sums = format!("127.0.0.1:{}", prometheus::free_port()).parse().unwrap();
                (Host { name, path, scope, sums }, group)
            })
            .collect();
        let runs: Vec<SocketAddr> = hosts.iter().filter(|(h, _)| h.path.is_some()).map(|(h, _)| h.sums).collect();
        let prom = Prometheus::start(&runs);
        let (root, home, records) =
            (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut groups: Vec<(&str, String)> = Vec::new();
        for (h, group) in &hosts {
            let mut line = format!(
                "{} ansible_connection=local bbrscope_scope_args='--netns {} --root {}' \
                 bbrscope_status_args='--netns {} --root {}'",
                h.name,
                h.scope.name,
                root.path().display(),
                h.scope.name,
                root.path().display(),
            );
            if let Some(p) = &h.path {
                line += &format!(
                    " bbrscope_experiment_args='--port {}' bbrscope_sums_listen={} bbrscope_record={}/{}.ndjson",
                    p.server.port(),
                    h.sums,
                    records.path().display(),
                    h.name
                );
            }
            match groups.iter_mut().find(|(g, _)| g == group) {
                Some((_, lines)) => *lines += &format!("{line}\n"),
                None => groups.push((group, format!("{line}\n"))),
            }
        }
        let mut inventory: String = groups.iter().map(|(g, lines)| format!("[{g}]\n{lines}")).collect();
        inventory += "[all:vars]\nansible_python_interpreter=auto_silent\n";
        std::fs::write(home.path().join("inventory"), inventory).unwrap();
        Lab { prom, hosts: hosts.into_iter().map(|(h, _)| h).collect(), root, home, records, _turn: turn }
    }

    /// `ansible-playbook PLAYBOOK -e bbrscope_arms=ARMS -e bbrscope_experiment_id=ID MORE...` while
    /// the experiment hosts' clients run: (succeeded, stdout + stderr). The play's answer goes to
    /// the test's log.
    fn play(&self, playbook: &str, arms: &str, id: &str, more: &[&str]) -> (bool, String) {
        let go = AtomicBool::new(true);
        let (ok, out) = thread::scope(|s| {
            for p in self.hosts.iter().filter_map(|h| h.path.as_ref()) {
                let go = &go;
                s.spawn(move || {
                    responses::load_while(p, 3, &[20_000, 1_000_000], Duration::ZERO, &|| go.load(Ordering::Relaxed))
                });
            }
            let prometheus = format!("bbrscope_prometheus_url=http://{}", self.prom.addr);
            let (arms, id) = (format!("bbrscope_arms={arms}"), format!("bbrscope_experiment_id={id}"));
            let fixed = ["-e", &arms, "-e", &id, "-e", &prometheus];
            let timing = ["-e", "bbrscope_experiment_seconds=240", "-e", "bbrscope_look_seconds=3"];
            let out = ansible_playbook(self.home.path(), playbook, &[&fixed[..], &timing[..], more].concat());
            go.store(false, Ordering::Relaxed);
            out
        });
        if let Some(said) = out.lines().find(|l| l.contains("fleet experiment") || l.contains("the canary did not")) {
            eprintln!("{}", said.trim());
        }
        (ok, out)
    }

    /// Each host's namespace's default algorithm, read in it.
    fn defaults(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.scope.enter(tcp_congestion_control)).collect()
    }

    /// How many scopes bbrscope has recorded as changed (`status --json` under the stand-in root).
    fn recorded(&self) -> usize {
        let out = common::bbrscope().args(["status", "--json", "--root"]).arg(self.root.path()).output().unwrap();
        assert!(out.status.success(), "status: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["bbrscope"].as_array().map_or(0, Vec::len)
    }

    /// The experiment hosts' recordings analysed together (`--analyze FILE...`): the verdict
    /// for all flows.
    fn pooled(&self) -> String {
        let files: Vec<String> = self
            .hosts
            .iter()
            .filter(|h| h.path.is_some())
            .map(|h| format!("{}/{}.ndjson", self.records.path().display(), h.name))
            .collect();
        let out = common::bbrscope().args(["experiment", "--json", "--analyze"]).args(&files).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let all = v["groups"].as_array().unwrap().iter().find(|g| g["label"] == "all flows").unwrap().clone();
        all["verdict"].as_str().unwrap().to_string()
    }

    /// `bbrscope revert` in every host's scope.
    fn revert(&self) {
        for h in &self.hosts {
            let out =
                common::bbrscope().args(["revert", "--netns", &h.scope.name, "--root"]).arg(self.root.path()).output();
            let out = out.unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// Experiments running on this kernel (`bbrscope status --json`).
fn running() -> usize {
    let st: Value =
        serde_json::from_slice(&common::bbrscope().args(["status", "--json"]).output().unwrap().stdout).unwrap();
    st["experiments"].as_array().unwrap().len()
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

/// The playbooks' per-connection design (each connection draws its arm): an answer from the
/// first flows, where a switchback needs its rounds.
const PER_CONNECTION: [&str; 2] = ["-e", "bbrscope_design=per-connection"];

fn host_cc_is_untouched(before: &str) {
    assert_eq!(tcp_congestion_control(), before, "the initial namespace's default changed");
}

/// fleet-experiment.yml on two experiment hosts. Arms reno,bbr on a host-level switchback (each
/// host's recording names its own salt, from its inventory name): the fleet finds B better and the
/// play applies bbr on both; arms bbr,cubic: B (cubic) slower for the clients it moved off their
/// status quo (reno) beyond the fleet guardrail's margin, the fleet's guardrail stops the run
/// though no host's own does (their margin set out of reach, as a host with too few flows of its
/// own would be), nothing applied, the play succeeds and says why (canary-rollout.yml's test has
/// the fleet's "A better"); --check: nothing started or applied. Each time the experiments are
/// over when the play ends, and their recordings, pooled, answer as the fleet did.
#[test]
fn a_fleet_experiment_ends_in_the_apply_its_answer_supports_or_in_none() {
    let host_cc = tcp_congestion_control();
    let lab = Lab::new(&[("host0", "experiment", true), ("host1", "experiment", true)]);

    let (ok, out) = lab.play("fleet-experiment.yml", "reno,bbr", "t_fleet_check", &["--check"]);
    assert!(ok && out.contains("all flows: not judged (check mode)"), "{out}");
    assert_eq!(lab.defaults(), [BEFORE, BEFORE], "{out}");
    assert!(!lab.records.path().join("host0.ndjson").exists(), "{out}");

    // BBR against reno on lossy paths, all of each host on each (a host-level switchback, in
    // short blocks, each host its own order from its inventory name): applied on both hosts.
    let blocks = ["-e", "bbrscope_design=host-switchback", "-e", "bbrscope_design_args='--block 1s --burn-in 0.3s'"];
    let (ok, out) = lab.play("fleet-experiment.yml", "reno,bbr", "t_fleet_b", &blocks);
    assert!(ok, "{out}");
    assert!(out.contains("on 2 hosts, all flows: b_better") && out.contains("Applying bbr"), "{out}");
    assert_eq!(lab.defaults(), [ROLLOUT, ROLLOUT], "{out}");
    assert_eq!(lab.recorded(), 2, "{out}");
    for host in ["host0", "host1"] {
        let text = std::fs::read_to_string(lab.records.path().join(format!("{host}.ndjson"))).unwrap();
        let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        let salt = bbrscope::experiment::schedule::Schedule::host_salt(host);
        assert_eq!((&header["design"], &header["schedule"]["host"]), (&"host_switchback".into(), &salt.into()));
    }
    assert_eq!(running(), 0, "the experiments ended with the play: {out}");
    assert_eq!(lab.pooled(), "b_better", "the hosts' recordings pooled answer as the fleet did");
    lab.revert();
    assert_eq!(lab.defaults(), [BEFORE, BEFORE]);

    // cubic against BBR, both moving clients off reno: the fleet's guardrail stops it. Its first
    // look comes before the flows, the next 30 s later, when the guardrail's stop and the
    // verdict are both long due (a look that stops says so whatever the verdict).
    let guard = ["-e", "bbrscope_design_args='--guardrail-pct 1000'", "-e", "bbrscope_look_seconds=30"];
    let (ok, out) =
        lab.play("fleet-experiment.yml", "bbr,cubic", "t_fleet_guard", &[&PER_CONNECTION[..], &guard].concat());
    assert!(ok, "{out}");
    assert!(out.contains("on 2 hosts, all flows: stopped by the fleet guardrail"), "{out}");
    assert!(out.contains("cubic (arm B) slower") && out.contains("Nothing is applied"), "{out}");
    assert_eq!(lab.defaults(), [BEFORE, BEFORE], "{out}");
    assert_eq!(lab.recorded(), 0, "{out}");
    assert_eq!(running(), 0, "the experiments ended with the play: {out}");
    assert_eq!(lab.pooled(), "a_better");
    host_cc_is_untouched(&host_cc);
}

/// canary-rollout.yml: the experiment on the canary host judges; the rest follows only when B was
/// better. --check: nothing applied. reno,bbr: B better, applied on the canary and then the rest;
/// a second run changes nothing on the rest. bbr,reno: A better, the play fails saying why, and
/// nothing is applied anywhere.
#[test]
fn the_canary_rollout_reaches_the_rest_only_when_the_canary_finds_b_better() {
    let host_cc = tcp_congestion_control();
    // The guardrail on: the namespaces disagree (this machine's default is bbr, the test's
    // reno), but each connection's own status quo is reno, so it watches only the arm that
    // moved them (bbr), which wins here, and reno's loss does not stop the canary's run.
    let lab = Lab::new(&[("canary1", "canary", true), ("rest1", "edge", false)]);

    let (ok, out) = lab.play("canary-rollout.yml", "reno,bbr", "t_canary_check", &["--check"]);
    assert!(ok && out.contains("not judged (check mode)"), "{out}");
    // "changed" in check mode: the apply plan has a change for each namespace.
    assert_eq!(recap(&out).get("rest1"), Some(&(1, 0)), "{out}");
    assert_eq!(lab.defaults(), [BEFORE, BEFORE], "{out}");
    assert_eq!(lab.recorded(), 0, "nothing recorded: {out}");

    let (ok, out) = lab.play("canary-rollout.yml", "reno,bbr", "t_canary_b", &PER_CONNECTION);
    assert!(ok, "{out}");
    assert!(out.contains("on 1 host, all flows: b_better"), "{out}");
    assert!(out.contains("Show bbrscope status"), "the handler ran after the change: {out}");
    assert_eq!(lab.defaults(), [ROLLOUT, ROLLOUT], "{out}");
    assert_eq!(lab.recorded(), 2, "{out}");
    assert_eq!(running(), 0, "the experiment ended with the play: {out}");
    // Again: the rest has it already.
    let (ok, out) = lab.play("canary-rollout.yml", "reno,bbr", "t_canary_again", &PER_CONNECTION);
    assert!(ok, "{out}");
    assert_eq!(recap(&out).get("rest1"), Some(&(0, 0)), "{out}");
    lab.revert();

    let (ok, out) = lab.play("canary-rollout.yml", "bbr,reno", "t_canary_a", &PER_CONNECTION);
    assert!(!ok, "the play fails on a canary that did not find B better: {out}");
    assert!(out.contains("the canary did not find reno better for all flows (a_better"), "{out}");
    // The rest was never applied to (its only task would have been the apply).
    assert!(recap(&out).get("rest1").is_none_or(|&(changed, _)| changed == 0), "{out}");
    assert_eq!(lab.defaults(), [BEFORE, BEFORE], "{out}");
    assert_eq!(lab.recorded(), 0, "{out}");
    assert_eq!(running(), 0, "the experiment ended with the play: {out}");
    host_cc_is_untouched(&host_cc);
}

//! `bbrscope advise`: which TCP settings beyond the algorithm hold this host's flows back — the
//! initial window against response sizes, the send buffer against the path, unsent data queued
//! in the socket, the window restart after idle — each from the flows observed over a window ([`facts`]) weighed against their
//! namespace's settings ([`findings`]).

pub mod facts;
pub mod findings;

use std::{collections::BTreeMap, time::Duration};

use anyhow::Result;
use serde::Serialize;

use crate::{
    observe::{
        flow::FlowTable,
        kernel::loader::Options,
        pipeline::{self, Settings as LoopSettings, Signals},
        session::Live,
    },
    sys::netns,
};
use facts::{Collector, FlowFacts};
use findings::{Finding, InitcwndRoute, Knobs, Settings, Status};

/// What `advise` found.
#[derive(Debug, Serialize)]
pub struct Advice {
    /// How long flows were watched, seconds.
    pub window_s: f64,
    /// Flows seen (ended in the window, or open at its end).
    pub flows: usize,
    pub findings: Vec<Finding>,
    /// The settings the flows were weighed against, per namespace.
    pub settings: Vec<Settings>,
}

/// Watches flows for `duration` (or until a signal) and weighs them.
pub async fn live(opts: &Options, duration: Duration) -> Result<Advice> {
    let mut signals = Signals::catch()?;
    let mut live = Live::start("bbrscope advise", opts)?;
    for note in live.degraded() {
        crate::output::errln!("bbrscope: warning: {note}");
    }
    crate::output::errln!(
        "bbrscope: advise: watching flows for {} s ({} observer; Ctrl-C weighs what was seen so far)",
        duration.as_secs_f64(),
        live.path().as_str()
    );
    let started = std::time::Instant::now();
    let mut table = FlowTable::new(0);
    let mut collector = Collector::default();
    let settings = LoopSettings { duration: Some(duration), stats: None };
    // The collector writes nothing: no write can fail.
    pipeline::run(&mut live, &mut signals, &mut table, &mut collector, settings).await??;
    drop(live);
    collector.finish(&table);
    Ok(weigh(collector.done, started.elapsed().as_secs_f64()))
}

/// The findings over `flows`, with each namespace's settings read now.
pub fn weigh(flows: Vec<FlowFacts>, window_s: f64) -> Advice {
    let mut read: BTreeMap<Option<u32>, Settings> = BTreeMap::new();
    for f in &flows {
        read.entry(f.netns).or_insert_with(|| settings_of(f.netns));
    }
    let findings = findings::all(&flows, &|ns| read.get(&ns).cloned().unwrap_or_default());
    Advice { window_s, flows: flows.len(), findings, settings: read.into_values().collect() }
}

/// The settings of namespace `ino` (this one for `None`), read from inside it.
fn settings_of(ino: Option<u32>) -> Settings {
    let ns = match ino {
        None => netns::current().ok(),
        Some(i) => netns::find(u64::from(i)),
    };
    let Some(ns) = ns else {
        let netns = format!("ino:{} (gone: its settings could not be read)", ino.unwrap_or(0));
        return Settings { netns, netns_ino: ino, ..Settings::default() };
    };
    let knobs = netns::run(&ns, || Ok(read_knobs())).unwrap_or_default();
    let scope = ns.arg().map(|a| format!(" --netns {a}")).unwrap_or_default();
    Settings { netns: ns.label, netns_ino: ino, knobs, scope }
}

/// The calling thread's namespace's settings beyond the algorithm (also shown by `status`).
pub fn read_knobs() -> Knobs {
    let sysctl = |key: &str| crate::apply::sysctl::read(key).ok().flatten();
    let triple = |key: &str| -> Option<[u64; 3]> {
        let v: Vec<u64> = sysctl(key)?.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        v.try_into().ok()
    };
    let mut routes = crate::apply::route::dump(libc::AF_INET as u8).unwrap_or_default();
    routes.extend(crate::apply::route::dump(libc::AF_INET6 as u8).unwrap_or_default());
    Knobs {
        tcp_wmem: triple("net.ipv4.tcp_wmem"),
        tcp_rmem: triple("net.ipv4.tcp_rmem"),
        tcp_slow_start_after_idle: sysctl("net.ipv4.tcp_slow_start_after_idle").map(|v| v != "0"),
        tcp_notsent_lowat: sysctl("net.ipv4.tcp_notsent_lowat").and_then(|v| v.parse().ok()),
        routes: routes.iter().map(|r| r.key.prefix).collect(),
        initcwnd_routes: routes
            .into_iter()
            .filter_map(|r| Some(InitcwndRoute { prefix: r.key.prefix, initcwnd: r.initcwnd? }))
            .collect(),
    }
}

/// The advice for people: each finding's check, group, status, evidence and change.
pub fn render(a: &Advice) -> String {
    use std::fmt::Write as _;
    let mut out = format!("bbrscope advise: {} flows over {:.0} s\n", a.flows, a.window_s);
    if a.flows == 0 {
        out.push_str("\nNo flows were seen: nothing to weigh (run it while the service has traffic, or longer).\n");
    }
    let mut last_ns = None;
    for f in &a.findings {
        if last_ns != Some(&f.netns) {
            let _ = writeln!(out, "\n{}:", f.netns);
            last_ns = Some(&f.netns);
        }
        let mark = match f.status {
            Status::Found => "FINDING",
            Status::None => "ok",
            Status::TooFew => "too few flows",
        };
        let group = if f.group == "all flows" { String::new() } else { format!(" [{}]", f.group) };
        let _ = writeln!(out, "  {}{group}: {mark}", f.title());
        let _ = writeln!(out, "    {}", f.evidence);
        if let Some(change) = &f.change {
            let _ = writeln!(out, "    change: {change}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use findings::{Check, Finding};

    fn finding(check: Check, status: Status, group: &str, change: Option<&str>) -> Finding {
        Finding {
            check,
            status,
            netns: "web".into(),
            netns_ino: Some(7),
            group: group.into(),
            flows: 40,
            affected: 40,
            numbers: BTreeMap::new(),
            evidence: "the numbers".into(),
            change: change.map(str::to_string),
        }
    }

    #[test]
    fn the_text_names_each_check_its_status_evidence_and_change() {
        let advice = Advice {
            window_s: 60.0,
            flows: 40,
            findings: vec![
                finding(Check::InitialWindow, Status::Found, "RTT 50–150 ms", Some("initcwnd 32")),
                finding(Check::SendBuffer, Status::None, "all flows", None),
                finding(Check::IdleRestart, Status::TooFew, "all flows", None),
            ],
            settings: vec![],
        };
        let text = render(&advice);
        let want = "bbrscope advise: 40 flows over 60 s\n\nweb:\n  \
                    initial window vs response sizes [RTT 50–150 ms]: FINDING\n    the numbers\n    change: initcwnd 32\n  \
                    send buffer vs the path: ok\n    the numbers\n  \
                    window restart after idle: too few flows\n    the numbers\n";
        assert_eq!(text, want);
        let none = render(&Advice { window_s: 5.0, flows: 0, findings: vec![], settings: vec![] });
        assert!(none.contains("No flows were seen"), "{none}");
    }
}

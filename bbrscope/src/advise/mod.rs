//! `bbrscope advise`: which TCP settings beyond the algorithm hold this host's flows back — the
//! initial window against response sizes, the send and receive buffers against the path, unsent
//! data queued in the socket, the window restart after idle, and what paces BBR flows — each from
//! the flows observed over a window ([`facts`]) or read from a recording, weighed against their
//! namespace's settings by the [`checks`], a file each, into [`findings`].

pub mod checks;
pub(crate) mod facts;
pub(crate) mod findings;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::Duration,
};

use anyhow::Result;
use serde::Serialize;

use crate::{
    observe::{
        flow::{Change, FlowTable},
        kernel::loader::Options,
        pipeline::{self, NoSide, Retention, Settings as LoopSettings, Signals, Sink as _},
        replay::{Reader, Record, Skipped},
        session::Live,
    },
    sys::netns,
};
use facts::{Collector, FlowFacts};
use findings::{Egress, Finding, InitcwndRoute, Knobs, Settings, Status};

/// What `advise` found.
#[derive(Debug, Serialize)]
pub(crate) struct Advice {
    /// How long flows were watched, seconds (for a recording: from its first record to its last).
    pub(crate) window_s: f64,
    /// The recording weighed (`--from`); `None` for flows watched live.
    pub(crate) recording: Option<String>,
    /// Flows seen (ended in the window, or open at its end).
    pub(crate) flows: usize,
    pub(crate) findings: Vec<Finding>,
    /// The settings the flows were weighed against, per namespace.
    pub(crate) settings: Vec<Settings>,
}

/// Watches flows for `duration` (or until a signal) and weighs them.
pub(crate) async fn live(opts: &Options, duration: Duration) -> Result<Advice> {
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
    let settings = LoopSettings { duration: Some(duration), stats: None, retention: Retention::WATCH };
    // The collector writes nothing: no write can fail.
    pipeline::run(&mut live, &mut signals, &mut table, &mut collector, &mut NoSide, settings).await??;
    drop(live);
    collector.finish(&table);
    Ok(weigh(collector.done, started.elapsed().as_secs_f64(), Unnamed::ThisNamespace))
}

/// Weighs the flows of a `bbrscope stream` recording (`name` is what the advice calls it), and
/// says what was skipped of it. The settings are read from this host, now: a recording does
/// not carry them.
pub(crate) fn recorded(input: impl std::io::BufRead, name: &str) -> Result<(Advice, Skipped)> {
    let mut reader = Reader::of_file(input);
    let mut table = FlowTable::new(0);
    let mut collector = Collector::default();
    let mut span: Option<(u64, u64)> = None;
    while let Some(record) = reader.next_record()? {
        let ts = record.ts_ns();
        span = Some(span.map_or((ts, ts), |(a, b)| (a.min(ts), b.max(ts))));
        match record {
            Record::Event(ev) => {
                let change = table.apply(&ev);
                // The collector writes nothing: no write can fail.
                collector.event(&ev, change, &table)?;
                if change == Change::Ended {
                    table.remove(ev.head().flow);
                }
            }
            Record::Summary(s) => collector.summary(&mut table, &s),
            Record::Stats(..) => {}
        }
    }
    let Some((first, last)) = span else {
        let skipped = reader.skipped.describe().map(|s| format!("; {s}")).unwrap_or_default();
        anyhow::bail!("no flow records in it (record one with `bbrscope stream > FILE`){skipped}")
    };
    collector.finish(&table);
    let window_s = last.saturating_sub(first) as f64 / 1e9;
    let mut advice = weigh(collector.done, window_s, Unnamed::Unknown);
    advice.recording = Some(name.to_string());
    Ok((advice, reader.skipped))
}

/// What a flow whose namespace is not known (`netns` `None`) is weighed against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unnamed {
    /// This namespace's settings: flows watched live by an observer that cannot tell a
    /// namespace (the tracepoint observer), documented as weighed against advise's own.
    ThisNamespace,
    /// Nothing: flows of a recording that does not name their namespace (open at its end, so
    /// no summary gave their owner, or recorded by the tracepoint observer). This namespace's
    /// settings are not theirs (a flow that left through another namespace's device was
    /// weighed against this one's eth0), and a recording carries none: they are not weighed,
    /// and the advice says so.
    Unknown,
}

/// The findings over `flows`, with each namespace's settings read now.
pub(crate) fn weigh(flows: Vec<FlowFacts>, window_s: f64, unnamed: Unnamed) -> Advice {
    // Per namespace, the peers of its BBR flows: the pacing check asks how they are reached.
    let mut peers: BTreeMap<Option<u32>, BTreeSet<IpAddr>> = BTreeMap::new();
    for f in &flows {
        let p = peers.entry(f.netns).or_default();
        if f.is_bbr() {
            p.insert(f.dst);
        }
    }
    let unweighed = unnamed == Unnamed::Unknown && peers.remove(&None).is_some();
    let read: BTreeMap<Option<u32>, Settings> = peers.iter().map(|(&ns, p)| (ns, settings_of(ns, p))).collect();
    let findings = checks::all(&flows, &|ns| match read.get(&ns) {
        Some(s) => Some(s.clone()),
        None if unweighed && ns.is_none() => None,
        None => Some(Settings::default()),
    });
    Advice { window_s, recording: None, flows: flows.len(), findings, settings: read.into_values().collect() }
}

/// Namespace `ino` (this one for `None`), if it is still there.
fn namespace(ino: Option<u32>) -> Option<netns::Netns> {
    match ino {
        None => netns::current().ok(),
        Some(i) => netns::find(u64::from(i)),
    }
}

/// The settings of namespace `ino` now (this one for `None`); `None` if it is gone.
pub(crate) fn knobs_of(ino: Option<u32>) -> Option<Knobs> {
    netns::run(&namespace(ino)?, || Ok(read_knobs())).ok()
}

/// The settings of namespace `ino` (this one for `None`), and how it reaches `peers`, read from
/// inside it.
fn settings_of(ino: Option<u32>, peers: &BTreeSet<IpAddr>) -> Settings {
    let Some(ns) = namespace(ino) else {
        let netns = format!("ino:{} (gone: its settings could not be read)", ino.unwrap_or(0));
        return Settings { netns, netns_ino: ino, gone: true, ..Settings::default() };
    };
    let (knobs, egress) = netns::run(&ns, || Ok((read_knobs(), egress(peers)))).unwrap_or_default();
    let scope = ns.arg().map(|a| format!(" --netns {a}")).unwrap_or_default();
    Settings { netns: ns.label, netns_ino: ino, knobs, scope, gone: false, egress }
}

/// The device a new connection to each of `peers` leaves through, and the qdisc that sends its
/// packets, as the calling thread's namespace routes it now (a peer no route leads to is left
/// out).
fn egress(peers: &BTreeSet<IpAddr>) -> BTreeMap<IpAddr, Egress> {
    if peers.is_empty() {
        return BTreeMap::new();
    }
    let Ok(senders) = crate::sys::qdisc::senders() else { return BTreeMap::new() };
    peers
        .iter()
        .filter_map(|&ip| {
            let (_, route) = crate::sys::route::lookup(ip).ok()?;
            let q = senders.get(&i32::try_from(route?.oif()?).ok()?)?;
            Some((ip, Egress { ifname: q.ifname.clone(), qdisc: q.to_string(), fq: q.is_fq() }))
        })
        .collect()
}

/// The calling thread's namespace's settings beyond the algorithm (also shown by `status`).
pub(crate) fn read_knobs() -> Knobs {
    let sysctl = |key: &str| crate::sys::sysctl::read(key).ok().flatten();
    let triple = |key: &str| -> Option<[u64; 3]> {
        let v: Vec<u64> = sysctl(key)?.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        v.try_into().ok()
    };
    let mut routes = crate::sys::route::dump(libc::AF_INET as u8).unwrap_or_default();
    routes.extend(crate::sys::route::dump(libc::AF_INET6 as u8).unwrap_or_default());
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
pub(crate) fn render(a: &Advice) -> String {
    use std::fmt::Write as _;
    let mut out = format!("bbrscope advise: {} flows over {:.0} s", a.flows, a.window_s);
    match &a.recording {
        Some(name) => {
            let _ = writeln!(out, " of {name} (weighed against this host's settings, read now)");
        }
        None => out.push('\n'),
    }
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
            Status::NotWeighed => "not weighed",
        };
        let group = if f.group == "all flows" { String::new() } else { format!(" [{}]", f.group) };
        let _ = writeln!(out, "  {}{group}: {mark}", f.title());
        let _ = writeln!(out, "    {}", f.evidence);
        if let Some(why) = &f.withheld {
            let _ = writeln!(out, "    change: none shown: {why}");
        }
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
            withheld: None,
        }
    }

    #[test]
    fn the_text_names_each_check_its_status_evidence_and_change() {
        let advice = Advice {
            window_s: 60.0,
            recording: None,
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
        let none = render(&Advice { window_s: 5.0, recording: None, flows: 0, findings: vec![], settings: vec![] });
        assert!(none.contains("No flows were seen"), "{none}");
    }

    /// A recording's flow that names no namespace (open at the recording's end) is not weighed
    /// against this namespace's settings (its device, its sysctls): each check says so, and no
    /// settings are kept for it. Live, such a flow is this namespace's (the tracepoint observer).
    #[test]
    fn a_recorded_flow_of_no_named_namespace_is_not_weighed_against_this_one() {
        let open_at_end: Vec<FlowFacts> =
            (0..40).map(|_| FlowFacts { netns: None, cc: "bbr".into(), ..checks::tests::flow(40_000, 100) }).collect();
        let advice = weigh(open_at_end.clone(), 10.0, Unnamed::Unknown);
        assert!(advice.settings.is_empty(), "{advice:?}");
        assert_eq!(advice.findings.len(), 6, "{advice:?}");
        for f in &advice.findings {
            assert_eq!((f.status, f.change.as_deref(), f.flows), (Status::NotWeighed, None, 40), "{f:?}");
            assert!(f.evidence.contains("40 flows of the recording name no namespace"), "{f:?}");
        }
        let text = render(&advice);
        assert!(text.contains("pacing of BBR flows: not weighed") && !text.contains("change:"), "{text}");
        // Live, the same flows are weighed against this namespace.
        let live = weigh(open_at_end, 10.0, Unnamed::ThisNamespace);
        assert_eq!(live.settings.len(), 1);
        assert!(live.findings.iter().all(|f| f.status != Status::NotWeighed), "{live:?}");
    }
}

//! The checks `advise` makes, one file each, named for the [`Check`] it answers; here, what runs
//! them all over a namespace's flows and the statistics they share. Each takes the flows of one
//! namespace and its settings, and gives its [`Finding`] (one per client group for the initial
//! window).

mod idle_restart;
mod initial_window;
mod pacing;
mod receive_buffer;
mod send_buffer;
mod unsent_queue;

use std::collections::BTreeMap;

use super::{
    facts::FlowFacts,
    findings::{Check, Finding, GONE, Settings, Status},
};
use idle_restart::idle_restart;
use initial_window::initial_window;
pub use initial_window::rounds;
use pacing::pacing;
use receive_buffer::receive_buffer;
use send_buffer::send_buffer;
use unsent_queue::unsent_queue;

fn median(v: &mut [f64]) -> f64 {
    crate::quantile::type7(sorted(v), 0.5)
}

/// The median, or NaN (left out of a finding's numbers) when there is nothing to take it of.
fn median_or_nan(v: &mut [f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { median(v) }
}

/// The three flows with the most of `key`, each as its peer and `label`: the ones a finding names.
fn most<'a>(
    flows: impl Iterator<Item = &'a FlowFacts>,
    key: impl Fn(&FlowFacts) -> f64,
    label: impl Fn(&FlowFacts) -> String,
) -> Vec<String> {
    let mut l: Vec<&FlowFacts> = flows.collect();
    l.sort_by(|a, b| key(b).total_cmp(&key(a)));
    l.iter().take(3).map(|f| format!("{} {}", f.dst, label(f))).collect()
}

fn sorted(v: &mut [f64]) -> &[f64] {
    v.sort_by(f64::total_cmp);
    v
}

/// Every check over `flows`, per namespace (as `settings_of` names and describes them; `None`:
/// the namespace's settings are not known, and each check says its flows were not weighed).
pub(super) fn all(flows: &[FlowFacts], settings_of: &dyn Fn(Option<u32>) -> Option<Settings>) -> Vec<Finding> {
    let mut by_ns: BTreeMap<Option<u32>, Vec<&FlowFacts>> = BTreeMap::new();
    for f in flows {
        by_ns.entry(f.netns).or_default().push(f);
    }
    let mut out = Vec::new();
    for (ns, flows) in by_ns {
        let Some(s) = settings_of(ns) else {
            out.extend(not_weighed(flows.len()));
            continue;
        };
        let first = out.len();
        out.extend(initial_window(&flows, &s));
        out.push(send_buffer(&flows, &s));
        out.push(receive_buffer(&flows, &s));
        out.push(unsent_queue(&flows, &s));
        out.push(idle_restart(&flows, &s));
        out.push(pacing(&flows, &s));
        if s.gone {
            for f in &mut out[first..] {
                f.withhold_change(GONE);
            }
        }
    }
    out
}

/// Each check's word on flows whose namespace a recording does not name: not weighed against
/// this namespace's settings, which need not be theirs.
fn not_weighed(flows: usize) -> Vec<Finding> {
    let s = Settings { netns: "a namespace the recording does not name".into(), ..Settings::default() };
    let checks = [
        Check::InitialWindow,
        Check::SendBuffer,
        Check::ReceiveBuffer,
        Check::UnsentQueue,
        Check::IdleRestart,
        Check::Pacing,
    ];
    checks
        .into_iter()
        .map(|check| Finding {
            status: Status::NotWeighed,
            evidence: format!(
                "{flows} flows of the recording name no namespace (open at its end, so no summary gave their owner, \
                 or recorded by the tracepoint observer): their namespace's settings cannot be read, and this \
                 namespace's need not be theirs; not weighed (record them to their close, or run advise live)"
            ),
            ..Finding::too_few(check, &s, flows, 0)
        })
        .collect()
}

#[cfg(test)]
pub(in crate::advise) mod tests {
    use super::*;
    use crate::advise::{facts::Restart, findings::Knobs};

    pub(in crate::advise) fn flow(sent: u64, rtt_ms: u32) -> FlowFacts {
        FlowFacts {
            dst: "198.18.1.2".parse().unwrap(),
            netns: Some(1),
            cc: "cubic".into(),
            whole: true,
            sent,
            mss: Some(1448),
            min_rtt_us: Some(rtt_ms * 1000),
            srtt_us: Some(rtt_ms * 1000),
            peer_wnd_first: None,
            busy_us: None,
            sndbuf_limited_us: None,
            buffer_bound_share: None,
            sndbuf_max: None,
            sending_samples: 0,
            bound_samples: 0,
            sndbuf_locked: false,
            rcvbuf_locked: false,
            unsent_median: None,
            unsent_wait_ms_median: None,
            rwnd_limited_us: None,
            delivery_max_bps: None,
            pacing_max_bps: None,
            idle_gaps: 0,
            restarts: vec![],
            received: 0,
            rcvbuf: None,
            rcv_space: None,
            rcv_rtt_us: None,
            window_clamp: None,
        }
    }

    pub(super) fn settings() -> Settings {
        Settings {
            netns: "test".into(),
            netns_ino: Some(1),
            knobs: Knobs {
                tcp_wmem: Some([4096, 16384, 4 << 20]),
                tcp_slow_start_after_idle: Some(true),
                ..Knobs::default()
            },
            scope: String::new(),
            gone: false,
            egress: BTreeMap::new(),
        }
    }

    /// A namespace that was gone when its settings were read: its findings give no command
    /// (one without its --netns would change advise's own namespace), and say why.
    #[test]
    fn a_gone_namespace_gets_no_command() {
        let mut f = flow(1 << 20, 100);
        f.idle_gaps = 3;
        f.restarts = vec![Restart { before: 80, after: 20 }; 3];
        let here = all(std::slice::from_ref(&f), &|_| Some(settings()));
        let found = here.iter().find(|x| x.status == Status::Found).expect("found");
        assert!(found.change.is_some() && found.withheld.is_none(), "{found:?}");
        let gone = all(&[f], &|_| Some(Settings { gone: true, ..settings() }));
        let found = gone.iter().find(|x| x.status == Status::Found).expect("still found");
        assert_eq!((found.change.as_deref(), found.withheld.as_deref()), (None, Some(GONE)), "{found:?}");
    }
}

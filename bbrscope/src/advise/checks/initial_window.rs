//! Initial window vs response sizes: responses a larger initial window would deliver in fewer
//! round trips, per band of minimum RTT, and the routes to set it on.

use std::{collections::BTreeMap, net::IpAddr};

use ipnet::IpNet;

use super::{median, sorted};
use crate::{
    advise::{
        facts::FlowFacts,
        findings::{Check, Finding, KERNEL_IW, Settings, Status},
    },
    units::{band_label, band_of},
};

/// The larger initial window the initial-window check prices: within every common client's
/// first receive window (64 KB), and what large CDNs have run at for years.
pub(super) const CANDIDATE_IW: u32 = 32;
/// Fewer flows than this in a group: too few to size its responses.
const MIN_RESPONSES: usize = 20;
/// Share of a group's responses that must need more round trips than the larger window would
/// for a finding.
const MIN_SHARE: f64 = 0.10;
/// A saving smaller than this per affected response is not worth a change (ms).
const MIN_SAVING_MS: f64 = 5.0;

/// A response took about the round trips slow start explains when its busy time (data or a FIN
/// outstanding) is at most its round trips at its smoothed RTT, one more for the FIN (a server
/// that closes after the response was acked, or a client that closes first, waits a round trip
/// for it), and this many RTTs, or [`SLACK_MIN_US`] where that is more (a delayed ACK).
const SLACK_RTTS: f64 = 0.5;
const SLACK_MIN_US: f64 = 40_000.0;
/// RTT band edges, ms: the experiment's.
const RTT_BANDS_MS: [f64; 3] = [10.0, 50.0, 150.0];

/// Round trips slow start needs to deliver `segs` segments from an initial window of `iw` (the
/// window doubles each round trip: the kernel grows it by the segments each ACK covers).
pub fn rounds(segs: u64, iw: u32) -> u32 {
    let (mut window, mut sent, mut k) = (u64::from(iw.max(1)), u64::from(iw.max(1)), 1);
    while sent < segs {
        window *= 2;
        sent += window;
        k += 1;
    }
    k
}

/// A response (a whole flow, one response: no silence between sends), priced in round trips from
/// the initial window its route gives it now and from the larger one.
struct Response {
    band: usize,
    dst: IpAddr,
    sent: u64,
    now: u32,
    with_larger: u32,
    iw: u32,
    rtt_ms: f64,
    /// Took about the time its round trips explain: slow start, not the application or the
    /// peer, set its pace.
    window_bound: bool,
    /// The peer's first window held the first flight below the larger window.
    peer_capped: bool,
}

/// Responses (whole flows, one response each: no silence between sends) that need more round
/// trips than a larger initial window would take, per RTT band.
pub(super) fn initial_window(flows: &[&FlowFacts], s: &Settings) -> Vec<Finding> {
    let responses: Vec<Response> =
        flows.iter().filter(|f| f.whole && f.idle_gaps == 0 && f.sent > 0).filter_map(|f| response(f, s)).collect();
    let mut groups: Vec<(String, Vec<&Response>)> = vec![("all flows".into(), responses.iter().collect())];
    for band in 1..=RTT_BANDS_MS.len() + 1 {
        let members: Vec<&Response> = responses.iter().filter(|r| r.band == band).collect();
        if !members.is_empty() {
            groups.push((band_label(band, &RTT_BANDS_MS), members));
        }
    }
    let many_bands = groups.len() > 2;
    groups
        .into_iter()
        // With one band, its finding is the whole's.
        .filter(|(label, _)| many_bands || label != "all flows" || responses.is_empty())
        .map(|(group, members)| group_finding(group, &members, s))
        .collect()
}

/// Flow `f` as a response of namespace `s`; `None` without an MSS or a minimum RTT to price it by.
fn response(f: &FlowFacts, s: &Settings) -> Option<Response> {
    let (mss, rtt) = (u64::from(f.mss.filter(|&m| m > 0)?), f.min_rtt_us?);
    let segs = f.sent.div_ceil(mss);
    let iw = s.knobs.initcwnd_for(f.dst);
    // A first flight larger than the peer's window waits for it: the larger window is
    // worth only what the peer lets out (a 16 KB receive buffer, an older client).
    let peer_segs = f.peer_wnd_first.map_or(u64::MAX, |w| u64::from(w) / mss);
    let larger = u64::from(iw.max(CANDIDATE_IW)).min(peer_segs).max(u64::from(iw)) as u32;
    let now = rounds(segs, iw);
    // Busy for longer than its round trips explain: a response the application wrote
    // as it went, or that the peer's window or a loss held back — a larger window
    // saves it nothing that can be counted on (measured: 4 KB pieces 50 ms apart, and
    // clients with 16 KB receive buffers, took the same time with a window of 32).
    let window_bound = match (f.busy_us, f.srtt_us) {
        (Some(busy), Some(srtt)) => {
            let srtt = f64::from(srtt);
            busy as f64 <= f64::from(now + 1) * srtt + (SLACK_RTTS * srtt).max(SLACK_MIN_US)
        }
        _ => true,
    };
    Some(Response {
        band: band_of(Some(rtt), &RTT_BANDS_MS),
        dst: f.dst,
        sent: f.sent,
        now,
        with_larger: rounds(segs, larger),
        iw,
        rtt_ms: f64::from(rtt) / 1e3,
        window_bound,
        peer_capped: larger < iw.max(CANDIDATE_IW),
    })
}

/// The finding over one group of responses (all flows, or an RTT band).
fn group_finding(group: String, members: &[&Response], s: &Settings) -> Finding {
    let base = Finding {
        check: Check::InitialWindow,
        status: Status::TooFew,
        netns: s.netns.clone(),
        netns_ino: s.netns_ino,
        group,
        flows: members.len(),
        affected: 0,
        numbers: BTreeMap::new(),
        evidence: String::new(),
        change: None,
        withheld: None,
    };
    if members.len() < MIN_RESPONSES {
        return Finding {
            evidence: format!("{} whole responses seen (at least {MIN_RESPONSES} needed to size them)", members.len()),
            ..base
        };
    }
    let affected: Vec<&Response> =
        members.iter().copied().filter(|r| r.window_bound && r.with_larger < r.now).collect();
    let m = Measured::of(members, &affected);
    let found = m.share >= MIN_SHARE && m.saved_median >= MIN_SAVING_MS;
    Finding {
        status: if found { Status::Found } else { Status::None },
        affected: affected.len(),
        numbers: m.numbers(),
        evidence: m.evidence(),
        change: found.then(|| change(&affected, s)),
        ..base
    }
}

/// What a group's responses measured: the numbers its finding gives, and says.
struct Measured {
    responses: usize,
    /// Responses the larger window would speed up.
    affected: usize,
    share: f64,
    not_bound: usize,
    capped: usize,
    iw: u32,
    size_median: f64,
    size_p90: f64,
    rtt_median: f64,
    extra_mean: f64,
    saved_median: f64,
}

impl Measured {
    fn of(members: &[&Response], affected: &[&Response]) -> Measured {
        let extra: Vec<f64> = members.iter().map(|r| f64::from(r.now - 1)).collect();
        let mut saved_ms: Vec<f64> = affected.iter().map(|r| f64::from(r.now - r.with_larger) * r.rtt_ms).collect();
        let mut sizes: Vec<f64> = members.iter().map(|r| r.sent as f64).collect();
        let mut rtts: Vec<f64> = members.iter().map(|r| r.rtt_ms).collect();
        let size_median = median(&mut sizes);
        Measured {
            responses: members.len(),
            affected: affected.len(),
            share: affected.len() as f64 / members.len() as f64,
            not_bound: members.iter().filter(|r| !r.window_bound).count(),
            capped: members.iter().filter(|r| r.peer_capped).count(),
            iw: members.iter().map(|r| r.iw).min().unwrap_or(KERNEL_IW),
            size_median,
            size_p90: crate::quantile::type7(sorted(&mut sizes), 0.9),
            rtt_median: median(&mut rtts),
            extra_mean: extra.iter().sum::<f64>() / extra.len() as f64,
            saved_median: if saved_ms.is_empty() { 0.0 } else { median(&mut saved_ms) },
        }
    }

    fn numbers(&self) -> BTreeMap<&'static str, f64> {
        let mut numbers = BTreeMap::from([
            ("responses", self.responses as f64),
            ("initcwnd", f64::from(self.iw)),
            ("response_bytes_median", self.size_median),
            ("response_bytes_p90", self.size_p90),
            ("min_rtt_ms_median", self.rtt_median),
            ("extra_round_trips_mean", self.extra_mean),
            ("share_helped", self.share),
            ("candidate_initcwnd", f64::from(CANDIDATE_IW)),
            ("saved_ms_median", self.saved_median),
            ("responses_not_window_bound", self.not_bound as f64),
            ("responses_peer_window_capped", self.capped as f64),
        ]);
        numbers.retain(|_, v| v.is_finite());
        numbers
    }

    fn evidence(&self) -> String {
        let Measured { not_bound, capped, iw, rtt_median, saved_median, .. } = *self;
        let mut unexplained = Vec::new();
        if not_bound > 0 {
            unexplained.push(format!(
                "{not_bound} took longer than their round trips explain (the application's pace, the peer's \
                 window or a loss set it)"
            ));
        }
        if capped > 0 {
            unexplained.push(format!(
                "{capped} are priced at their peer's first receive window, below {CANDIDATE_IW} segments"
            ));
        }
        let unexplained =
            if unexplained.is_empty() { String::new() } else { format!("; not counted: {}", unexplained.join(", ")) };
        format!(
            "{} of {} responses ({:.0}%) would take fewer round trips from an initial window of \
             {CANDIDATE_IW} (now {iw}; responses median {}, p90 {}; {:.2} round trips beyond the first on average); \
             at their minimum RTT (median {rtt_median:.1} ms) a window of {CANDIDATE_IW} would save a median \
             {saved_median:.0} ms on each of them{unexplained}",
            self.affected,
            self.responses,
            self.share * 100.0,
            crate::units::fmt_bytes(self.size_median),
            crate::units::fmt_bytes(self.size_p90),
            self.extra_mean,
        )
    }
}

/// The change for the responses a larger window would speed up: that window on the routes they
/// are reached by, with the client networks most affected.
fn change(affected: &[&Response], s: &Settings) -> String {
    let top = |key: &dyn Fn(IpAddr) -> Option<IpNet>| {
        let mut nets: BTreeMap<IpNet, usize> = BTreeMap::new();
        for r in affected {
            if let Some(n) = key(r.dst) {
                *nets.entry(n).or_default() += 1;
            }
        }
        let mut nets: Vec<_> = nets.into_iter().collect();
        nets.sort_by_key(|(n, c)| (std::cmp::Reverse(*c), *n));
        nets.truncate(3);
        nets
    };
    let clients = top(&|ip| {
        let len = if ip.is_ipv4() { 24 } else { 48 };
        Some(IpNet::new(ip, len).expect("valid length").trunc())
    });
    let clients: Vec<String> = clients.iter().map(|(n, c)| format!("{n} ({c})")).collect();
    let routes: Vec<String> = top(&|ip| s.knobs.route_for(ip))
        .iter()
        .map(|(n, c)| {
            let default = if n.prefix_len() == 0 {
                ", the default route: every destination without a route of its own"
            } else {
                ""
            };
            format!("`bbrscope apply --route {n} --initcwnd {CANDIDATE_IW}{}` ({c} of them{default})", s.scope)
        })
        .collect();
    let routes = if routes.is_empty() { "no route found for them".to_string() } else { routes.join("; ") };
    format!(
        "an initial window of {CANDIDATE_IW} on the routes these clients are reached by: {routes}; most \
         affected clients: {}. The saving assumes no loss in the first round trips and a client receive \
         window of at least {CANDIDATE_IW} segments: measure it with an experiment before applying it \
         widely",
        clients.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::{
        checks::tests::{flow, settings},
        findings::InitcwndRoute,
    };

    #[test]
    fn slow_start_rounds() {
        // 10, then 20 more (30), then 40 more (70).
        assert_eq!(rounds(1, 10), 1);
        assert_eq!(rounds(10, 10), 1);
        assert_eq!(rounds(11, 10), 2);
        assert_eq!(rounds(30, 10), 2);
        assert_eq!(rounds(31, 10), 3);
        assert_eq!(rounds(70, 10), 3);
        assert_eq!(rounds(42, 32), 2);
        assert_eq!(rounds(0, 10), 1);
    }

    #[test]
    fn responses_of_20_to_60_kb_on_a_long_path_need_a_larger_initial_window() {
        // 20–60 KB: 14–42 segments, 2–3 round trips from 10, 1–2 from 32.
        let flows: Vec<FlowFacts> = (0..40).map(|i| flow(20_000 + i * 1000, 100)).collect();
        let refs: Vec<&FlowFacts> = flows.iter().collect();
        let mut s = settings();
        s.knobs.routes = vec!["0.0.0.0/0".parse().unwrap(), "198.18.0.0/15".parse().unwrap()];
        s.scope = " --netns web".into();
        let f = initial_window(&refs, &s);
        assert_eq!(f.len(), 1, "one RTT band: the whole is its finding: {f:?}");
        let f = &f[0];
        assert_eq!((f.status, f.flows), (Status::Found, 40), "{f:?}");
        // 20.0–28.9 KB (≤ 20 segments... ) all need 2 from 10 and 1 from 32 (≤ 32 segments:
        // 46,336 bytes); beyond, 3 from 10 (> 30 segments: 43,440 bytes) and 2 from 32.
        assert_eq!(f.affected, 40);
        assert_eq!(f.numbers["saved_ms_median"], 100.0);
        let change = f.change.as_deref().unwrap();
        assert!(change.contains("198.18.1.0/24 (40)"), "{f:?}");
        // The command for the most specific route that carries them, in their namespace.
        assert!(
            change.contains("`bbrscope apply --route 198.18.0.0/15 --initcwnd 32 --netns web` (40 of them)"),
            "{change}"
        );
    }

    #[test]
    fn small_responses_or_short_paths_are_no_finding() {
        let small: Vec<FlowFacts> = (0..40).map(|_| flow(10_000, 100)).collect();
        let refs: Vec<&FlowFacts> = small.iter().collect();
        assert_eq!(initial_window(&refs, &settings())[0].status, Status::None);
        // Large responses on a 1 ms path: a round trip saved is under 5 ms.
        let near: Vec<FlowFacts> = (0..40).map(|_| flow(40_000, 1)).collect();
        let refs: Vec<&FlowFacts> = near.iter().collect();
        assert_eq!(initial_window(&refs, &settings())[0].status, Status::None);
        // Too few to say.
        let few: Vec<FlowFacts> = (0..5).map(|_| flow(40_000, 100)).collect();
        let refs: Vec<&FlowFacts> = few.iter().collect();
        assert_eq!(initial_window(&refs, &settings())[0].status, Status::TooFew);
        // A route that already starts at 32: nothing to gain.
        let mut s = settings();
        s.knobs.initcwnd_routes = vec![InitcwndRoute { prefix: "198.18.0.0/15".parse().unwrap(), initcwnd: 32 }];
        let flows: Vec<FlowFacts> = (0..40).map(|_| flow(40_000, 100)).collect();
        let refs: Vec<&FlowFacts> = flows.iter().collect();
        assert_eq!(initial_window(&refs, &s)[0].status, Status::None);
    }

    #[test]
    fn responses_slower_than_their_round_trips_or_capped_by_the_peer_are_not_counted() {
        // 40 KB over 100 ms: 28 segments, 2 round trips from 10, 1 from 32.
        let timed = |busy_ms: u64, peer_wnd: Option<u32>| FlowFacts {
            busy_us: Some(busy_ms * 1000),
            peer_wnd_first: peer_wnd,
            ..flow(40_000, 100)
        };
        let run = |f: FlowFacts| {
            let flows = vec![f; 40];
            let refs: Vec<&FlowFacts> = flows.iter().collect();
            initial_window(&refs, &settings()).remove(0)
        };
        // Two round trips, the FIN's and a delayed ACK's worth: slow start set the pace.
        let f = run(timed(345, Some(65_535)));
        assert_eq!((f.status, f.affected), (Status::Found, 40), "{f:?}");
        // Written as it went: 400 ms for two round trips.
        let f = run(timed(400, Some(65_535)));
        assert_eq!((f.status, f.affected), (Status::None, 0), "{f:?}");
        assert_eq!(f.numbers["responses_not_window_bound"], 40.0);
        assert!(f.evidence.contains("40 took longer than their round trips explain"), "{}", f.evidence);
        // A peer whose first window is 11 segments: 28 segments need 2 round trips from 11 too.
        let f = run(timed(200, Some(16_000)));
        assert_eq!((f.status, f.affected, f.numbers["responses_peer_window_capped"]), (Status::None, 0, 40.0));
        // A first window of 29 segments: all 28 in the first round trip, still the saving.
        let f = run(timed(200, Some(43_000)));
        assert_eq!((f.status, f.affected, f.numbers["responses_peer_window_capped"]), (Status::Found, 40, 40.0));
    }
}

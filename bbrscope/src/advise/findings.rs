//! The checks `advise` makes, each from this host's own flows and its namespace's settings: one
//! [`Finding`] per check, namespace and client group, saying what limits the flows, by how much,
//! and what to change; or that nothing does (also a finding), or that too few flows were seen to
//! say either.

use std::{collections::BTreeMap, net::IpAddr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::facts::FlowFacts;
use crate::units::{band_label, band_of};

/// The kernel's initial congestion window (`TCP_INIT_CWND`) where a route sets none.
pub const KERNEL_IW: u32 = 10;
/// The larger initial window the initial-window check prices: within every common client's
/// first receive window (64 KB), and what large CDNs have run at for years.
pub const CANDIDATE_IW: u32 = 32;
/// Fewer flows than this in a group: too few to size its responses.
const MIN_RESPONSES: usize = 20;
/// Share of a group's responses that must need more round trips than the larger window would
/// for a finding.
const MIN_SHARE: f64 = 0.10;
/// A saving smaller than this per affected response is not worth a change (ms).
const MIN_SAVING_MS: f64 = 5.0;
/// A flow is send-buffer- (receive-window-) limited when that is this share of its busy time.
const LIMITED_SHARE: f64 = 0.2;
/// Busy time below which a flow says nothing about buffers (µs).
const MIN_BUSY_US: u64 = 10_000;
/// Window restarts needed before the idle check names them.
const MIN_RESTARTS: usize = 2;
/// A response took about the round trips slow start explains when its busy time (data or a FIN
/// outstanding) is at most its round trips at its smoothed RTT, one more for the FIN (a server
/// that closes after the response was acked, or a client that closes first, waits a round trip
/// for it), and this many RTTs, or [`SLACK_MIN_US`] where that is more (a delayed ACK).
const SLACK_RTTS: f64 = 0.5;
const SLACK_MIN_US: f64 = 40_000.0;
/// The `tcp_notsent_lowat` the unsent-queue check suggests: at least the BDP of a 20 Mbit/s ×
/// 50 ms path, so a writer that refills as it is woken keeps such a path full (measured on the
/// tests' 150 KB path: the same transfer time), while what is written behind it waits for at
/// most 128 KB.
pub const CANDIDATE_LOWAT: u64 = 128 << 10;
/// A flow's unsent queue is deep when its median is at least this many times the candidate
/// and its bytes wait at least [`MIN_UNSENT_WAIT_MS`] to be sent.
const DEEP_UNSENT: f64 = 2.0;
const MIN_UNSENT_WAIT_MS: f64 = 50.0;
/// A received flow filled its window when the application read at least this share of the
/// largest window the receiver may advertise in one of its round trips. Where the buffer can
/// still grow, autotuning keeps that window at about twice what is read per round trip
/// (`tcp_rcv_space_adjust`), so an unconstrained flow stays near half of it (measured on the
/// tests' 100 ms path with the kernel's 6 MB maximum: 0.2); a flow whose buffer stopped at
/// tcp_rmem's maximum reads all of it (1.03 with a 64 KB maximum, 1.13 with 256 KB).
const WINDOW_FULL: f64 = 0.8;
/// The kernel's tcp_rmem maximum (since 4.20: 6 MB), the least a raise suggests.
const KERNEL_RMEM_MAX: u64 = 6 << 20;
/// RTT band edges, ms: the experiment's.
const RTT_BANDS_MS: [f64; 3] = [10.0, 50.0, 150.0];

/// The settings beyond the algorithm that the checks weigh flows against, as one namespace has
/// them (also shown by `status`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knobs {
    pub tcp_wmem: Option<[u64; 3]>,
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_slow_start_after_idle: Option<bool>,
    /// Bytes left unsent below which a writer is woken (the kernel's default, 4294967295, is
    /// "off").
    pub tcp_notsent_lowat: Option<u64>,
    /// Routes with their own initial window.
    pub initcwnd_routes: Vec<InitcwndRoute>,
    /// Every unicast route's prefix: the route a client is reached by is the most specific one.
    #[serde(skip)]
    pub routes: Vec<IpNet>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitcwndRoute {
    pub prefix: IpNet,
    pub initcwnd: u32,
}

impl Knobs {
    /// The initial window a connection to `ip` starts with: the most specific route's
    /// `initcwnd`, else the kernel's.
    pub fn initcwnd_for(&self, ip: IpAddr) -> u32 {
        self.initcwnd_routes
            .iter()
            .filter(|r| r.prefix.contains(&ip))
            .max_by_key(|r| r.prefix.prefix_len())
            .map_or(KERNEL_IW, |r| r.initcwnd)
    }

    /// The prefix of the route a connection to `ip` takes (the most specific that holds it).
    pub fn route_for(&self, ip: IpAddr) -> Option<IpNet> {
        self.routes.iter().filter(|p| p.contains(&ip)).max_by_key(|p| p.prefix_len()).copied()
    }

    /// What differs from `before`, a setting a line: `tcp_wmem 4096 16384 65536 -> 4096 16384
    /// 4194304`. (The route list itself is not compared: only routes' initial windows are a
    /// setting.)
    pub fn changes_from(&self, before: &Knobs) -> Vec<String> {
        fn show<T: std::fmt::Debug>(v: Option<T>, f: impl Fn(T) -> String) -> String {
            v.map_or_else(|| "unknown".into(), f)
        }
        let triple = |t: [u64; 3]| format!("{} {} {}", t[0], t[1], t[2]);
        let mut out = Vec::new();
        let mut diff = |name: &str, was: String, now: String| {
            if was != now {
                out.push(format!("{name} {was} -> {now}"));
            }
        };
        diff("tcp_wmem", show(before.tcp_wmem, triple), show(self.tcp_wmem, triple));
        diff("tcp_rmem", show(before.tcp_rmem, triple), show(self.tcp_rmem, triple));
        let on = |b: bool| (if b { "1" } else { "0" }).to_string();
        diff(
            "tcp_slow_start_after_idle",
            show(before.tcp_slow_start_after_idle, on),
            show(self.tcp_slow_start_after_idle, on),
        );
        diff(
            "tcp_notsent_lowat",
            show(before.tcp_notsent_lowat, |v| v.to_string()),
            show(self.tcp_notsent_lowat, |v| v.to_string()),
        );
        let routes = |k: &Knobs| {
            let v: Vec<String> =
                k.initcwnd_routes.iter().map(|r| format!("{} initcwnd {}", r.prefix, r.initcwnd)).collect();
            if v.is_empty() { "none".into() } else { v.join(", ") }
        };
        diff("routes with an initial window:", routes(before), routes(self));
        out
    }
}

/// A namespace's settings, named.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Settings {
    /// `ip netns` name, `this namespace`, `pid N (comm)` or `ino:N`.
    pub netns: String,
    /// Its inode, as the flows' `netns` field gives it (`None`: the observer could not tell).
    pub netns_ino: Option<u32>,
    #[serde(flatten)]
    pub knobs: Knobs,
    /// The `bbrscope apply` options that name the namespace (" --netns NAME", or "" for
    /// bbrscope's own), for the commands a change gives.
    #[serde(skip)]
    pub scope: String,
    /// The namespace was gone when its settings were to be read: its findings give no command,
    /// since one without its `--netns` would change another namespace.
    #[serde(skip)]
    pub gone: bool,
    /// The device each BBR flow's peer is reached through and the qdisc that sends its packets,
    /// by peer address, as the namespace routes it now.
    #[serde(skip)]
    pub egress: BTreeMap<IpAddr, Egress>,
}

/// A device and what sends its packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Egress {
    pub ifname: String,
    /// `noqueue`, `fq_codel`, `mq (fq)`, ...
    pub qdisc: String,
    pub fq: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    InitialWindow,
    SendBuffer,
    ReceiveBuffer,
    UnsentQueue,
    IdleRestart,
    Pacing,
}

impl Check {
    fn title(self) -> &'static str {
        match self {
            Check::InitialWindow => "initial window vs response sizes",
            Check::SendBuffer => "send buffer vs the path",
            Check::ReceiveBuffer => "receive buffer vs the path",
            Check::UnsentQueue => "unsent data queued in the socket",
            Check::IdleRestart => "window restart after idle",
            Check::Pacing => "pacing of BBR flows",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The flows are held back, by the numbers given.
    Found,
    /// Enough flows, and this setting does not hold them back.
    None,
    /// Too few flows of the kind the check needs to say either.
    TooFew,
    /// The flows' namespace is not known (a recording that does not name it) and no settings
    /// could be read for them: nothing was weighed.
    NotWeighed,
}

#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub check: Check,
    pub status: Status,
    pub netns: String,
    pub netns_ino: Option<u32>,
    pub group: String,
    /// Flows the check examined, and of those the ones held back.
    pub flows: usize,
    pub affected: usize,
    /// The numbers behind `evidence`, by name (for scripts).
    pub numbers: BTreeMap<&'static str, f64>,
    /// What was measured, in a sentence.
    pub evidence: String,
    /// What to change, where there is something to change.
    pub change: Option<String>,
    /// Why a finding shows no change where it would otherwise give one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

impl Finding {
    pub fn title(&self) -> &'static str {
        self.check.title()
    }

    /// Drops the change, if there is one, saying why.
    pub fn withhold_change(&mut self, why: &str) {
        if self.change.take().is_some() {
            self.withheld = Some(why.to_string());
        }
    }

    /// The finding of `check` over all flows of namespace `s`, before the check says more: too
    /// few flows, nothing measured.
    fn too_few(check: Check, s: &Settings, flows: usize, affected: usize) -> Finding {
        Finding {
            check,
            status: Status::TooFew,
            netns: s.netns.clone(),
            netns_ino: s.netns_ino,
            group: "all flows".into(),
            flows,
            affected,
            numbers: BTreeMap::new(),
            evidence: String::new(),
            change: None,
            withheld: None,
        }
    }
}

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
pub fn all(flows: &[FlowFacts], settings_of: &dyn Fn(Option<u32>) -> Option<Settings>) -> Vec<Finding> {
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

/// Why a finding of a namespace that is gone gives no command.
pub const GONE: &str = "its namespace is gone, and the command without the namespace's --netns would change another";

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

/// Responses (whole flows, one response each: no silence between sends) that need more round
/// trips than a larger initial window would take, per RTT band.
pub fn initial_window(flows: &[&FlowFacts], s: &Settings) -> Vec<Finding> {
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
    let responses: Vec<Response> = flows
        .iter()
        .filter(|f| f.whole && f.idle_gaps == 0 && f.sent > 0)
        .filter_map(|f| {
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
        })
        .collect();
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
        .map(|(group, members)| {
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
                    evidence: format!(
                        "{} whole responses seen (at least {MIN_RESPONSES} needed to size them)",
                        members.len()
                    ),
                    ..base
                };
            }
            let affected: Vec<&&Response> =
                members.iter().filter(|r| r.window_bound && r.with_larger < r.now).collect();
            let share = affected.len() as f64 / members.len() as f64;
            let not_bound = members.iter().filter(|r| !r.window_bound).count();
            let capped = members.iter().filter(|r| r.peer_capped).count();
            let extra: Vec<f64> = members.iter().map(|r| f64::from(r.now - 1)).collect();
            let mut saved_ms: Vec<f64> = affected.iter().map(|r| f64::from(r.now - r.with_larger) * r.rtt_ms).collect();
            let mut sizes: Vec<f64> = members.iter().map(|r| r.sent as f64).collect();
            let mut rtts: Vec<f64> = members.iter().map(|r| r.rtt_ms).collect();
            let iw = members.iter().map(|r| r.iw).min().unwrap_or(KERNEL_IW);
            let size_median = median(&mut sizes);
            let size_p90 = crate::quantile::type7(sorted(&mut sizes), 0.9);
            let rtt_median = median(&mut rtts);
            let extra_mean = extra.iter().sum::<f64>() / extra.len() as f64;
            let saved_median = if saved_ms.is_empty() { 0.0 } else { median(&mut saved_ms) };
            let mut numbers = BTreeMap::from([
                ("responses", members.len() as f64),
                ("initcwnd", f64::from(iw)),
                ("response_bytes_median", size_median),
                ("response_bytes_p90", size_p90),
                ("min_rtt_ms_median", rtt_median),
                ("extra_round_trips_mean", extra_mean),
                ("share_helped", share),
                ("candidate_initcwnd", f64::from(CANDIDATE_IW)),
                ("saved_ms_median", saved_median),
                ("responses_not_window_bound", not_bound as f64),
                ("responses_peer_window_capped", capped as f64),
            ]);
            numbers.retain(|_, v| v.is_finite());
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
            let evidence = format!(
                "{} of {} responses ({:.0}%) would take fewer round trips from an initial window of \
                 {CANDIDATE_IW} (now {iw}; responses median {}, p90 {}; {:.2} round trips beyond the first on average); \
                 at their minimum RTT (median {rtt_median:.1} ms) a window of {CANDIDATE_IW} would save a median \
                 {saved_median:.0} ms on each of them{unexplained}",
                affected.len(),
                members.len(),
                share * 100.0,
                crate::units::fmt_bytes(size_median),
                crate::units::fmt_bytes(size_p90),
                extra_mean,
            );
            let found = share >= MIN_SHARE && saved_median >= MIN_SAVING_MS;
            let change = found.then(|| {
                let top = |key: &dyn Fn(IpAddr) -> Option<IpNet>| {
                    let mut nets: BTreeMap<IpNet, usize> = BTreeMap::new();
                    for r in &affected {
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
                        format!(
                            "`bbrscope apply --route {n} --initcwnd {CANDIDATE_IW}{}` ({c} of them{default})",
                            s.scope
                        )
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
            });
            Finding {
                status: if found { Status::Found } else { Status::None },
                affected: affected.len(),
                numbers,
                evidence,
                change,
                ..base
            }
        })
        .collect()
}

/// Flows whose sending this host's send buffer held back: the larger of the kernel's
/// sndbuf-limited share of the busy time and the share of samples bound by the buffer.
pub fn send_buffer(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let busy: Vec<&&FlowFacts> = flows.iter().filter(|f| f.busy_us.is_some_and(|b| b >= MIN_BUSY_US)).collect();
    let share = |f: &FlowFacts, part: Option<u64>| part.unwrap_or(0) as f64 / f.busy_us.unwrap_or(1).max(1) as f64;
    let sndbuf_share = |f: &FlowFacts| share(f, f.sndbuf_limited_us).max(f.buffer_bound_share.unwrap_or(0.0));
    let wmem_max = s.knobs.tcp_wmem.map(|w| w[2]);
    // The kernel sizes a flow's buffer to about two congestion windows and stops at tcp_wmem's
    // maximum: only a buffer that reached the maximum is the setting's doing. Below it, a full
    // buffer is a response that fits it, or a window the buffer follows (measured: a keep-alive
    // connection's 40 KB responses filled a 90 KB buffer in every sample, with the maximum at
    // 4 MB, and raising it would change nothing).
    let at_ceiling = |f: &FlowFacts| match (f.sndbuf_max, wmem_max) {
        (Some(b), Some(max)) => u64::from(b) >= max,
        _ => true,
    };
    // A buffer the application sized (SO_SNDBUF) is neither: the kernel keeps it as set,
    // whatever tcp_wmem says, so the change is in the application (measured: a server's
    // 32 KB SO_SNDBUF made 1 MB responses 40–65% slower and raising tcp_wmem did nothing).
    let held: Vec<&&&FlowFacts> = busy.iter().filter(|f| sndbuf_share(f) >= LIMITED_SHARE).collect();
    let limited: Vec<&&&FlowFacts> = held.iter().copied().filter(|f| !f.sndbuf_locked && at_ceiling(f)).collect();
    let app_set: Vec<&&&FlowFacts> = held.iter().copied().filter(|f| f.sndbuf_locked).collect();
    let below = held.len() - limited.len() - app_set.len();
    // The flow nearest the line on the other side: a reader tells a near miss from a clear case.
    let highest_clear = busy.iter().map(|f| sndbuf_share(f)).filter(|&s| s < LIMITED_SHARE).fold(0.0, f64::max);
    let mut rwnd_shares: Vec<f64> =
        busy.iter().map(|f| share(f, f.rwnd_limited_us)).filter(|&s| s >= LIMITED_SHARE).collect();
    let rwnd = rwnd_shares.len();
    let rwnd_median = if rwnd_shares.is_empty() { 0.0 } else { median(&mut rwnd_shares) };
    let base = Finding::too_few(Check::SendBuffer, s, busy.len(), limited.len());
    if busy.is_empty() {
        return Finding {
            evidence: "no flow kept data in flight for 10 ms or more (nothing to say about buffers)".into(),
            ..base
        };
    }
    let below_note = if below > 0 {
        format!(
            "; {below} filled a send buffer the kernel had sized below tcp_wmem's maximum (a response that fits it, \
             or a buffer following the congestion window: not the setting's doing)"
        )
    } else {
        String::new()
    };
    let app_note = app_set_sndbuf_note(&app_set, &sndbuf_share);
    let rwnd_note = if rwnd > 0 {
        format!(
            "; {rwnd} were held back by their peer's receive window instead (median {:.0}% of the time; the \
             client's setting, not this host's)",
            rwnd_median * 100.0
        )
    } else {
        String::new()
    };
    if limited.is_empty() && !app_set.is_empty() {
        return app_set_sndbuf(&app_set, &sndbuf_share, busy.len(), wmem_max, format!("{below_note}{rwnd_note}"), base);
    }
    if limited.is_empty() {
        return Finding {
            status: Status::None,
            numbers: BTreeMap::from([
                ("flows_busy", busy.len() as f64),
                ("full_below_maximum_flows", below as f64),
                ("rwnd_limited_flows", rwnd as f64),
                ("rwnd_limited_share_median", rwnd_median),
                ("sndbuf_limited_share_highest_below_line", highest_clear),
            ]),
            evidence: format!(
                "none of {} flows with data in flight spent {:.0}% of that time limited by a send buffer at \
                 tcp_wmem's maximum (the highest share under that line: {:.0}%){below_note}{rwnd_note}",
                busy.len(),
                LIMITED_SHARE * 100.0,
                highest_clear * 100.0
            ),
            ..base
        };
    }
    let mut shares: Vec<f64> = limited.iter().map(|f| sndbuf_share(f)).collect();
    let mut kernel: Vec<f64> = limited.iter().map(|f| share(f, f.sndbuf_limited_us)).collect();
    let kernel_median = median(&mut kernel);
    let mut bdps: Vec<f64> = limited
        .iter()
        .filter_map(|f| Some(f.delivery_max_bps? as f64 / 8.0 * f64::from(f.min_rtt_us?) / 1e6))
        .collect();
    let mut rtts: Vec<f64> = limited.iter().filter_map(|f| Some(f64::from(f.min_rtt_us?) / 1e3)).collect();
    let share_median = median(&mut shares);
    let share_lowest = shares.first().copied().unwrap_or(0.0);
    let bdp_max = sorted(&mut bdps).last().copied().unwrap_or(0.0);
    let rtt_median = median_or_nan(&mut rtts);
    let worst = most(limited.iter().map(|f| ***f), sndbuf_share, |f| format!("{:.0}%", sndbuf_share(f) * 100.0));
    let mut numbers = BTreeMap::from([
        ("flows_busy", busy.len() as f64),
        ("full_below_maximum_flows", below as f64),
        ("sndbuf_limited_share_median", share_median),
        ("sndbuf_limited_share_lowest", share_lowest),
        ("app_set_flows", app_set.len() as f64),
        ("kernel_sndbuf_limited_share_median", kernel_median),
        ("bdp_bytes_max", bdp_max),
        ("min_rtt_ms_median", rtt_median),
        ("rwnd_limited_flows", rwnd as f64),
        ("rwnd_limited_share_median", rwnd_median),
    ]);
    if let Some(w) = wmem_max {
        numbers.insert("tcp_wmem_max", w as f64);
    }
    numbers.retain(|_, v| v.is_finite());
    let cap = match (wmem_max, rtt_median.is_finite()) {
        (Some(w), true) => format!(
            "; tcp_wmem's maximum, {}, bounds what a flow keeps unacknowledged (less the kernel's overhead), so \
             at {rtt_median:.0} ms a flow gets at most about {}",
            crate::units::fmt_bytes(w as f64),
            crate::units::fmt_rate(w as f64 * 8.0 / (rtt_median / 1e3))
        ),
        _ => String::new(),
    };
    Finding {
        status: Status::Found,
        numbers,
        evidence: format!(
            "{} of {} flows with data in flight spent at least {:.0}% of that time waiting for space in a send buffer at \
             tcp_wmem's maximum (median {:.0}%, the lowest {:.0}%, by the samples that found the buffer full and nothing unsent; the kernel's own \
             count, which misses most of it, {:.0}%; {}); their delivered rate × minimum RTT peaked at \
             {}{cap}{app_note}{below_note}{rwnd_note}",
            limited.len(),
            busy.len(),
            LIMITED_SHARE * 100.0,
            share_median * 100.0,
            share_lowest * 100.0,
            kernel_median * 100.0,
            worst.join(", "),
            crate::units::fmt_bytes(bdp_max),
        ),
        change: wmem_max.map(|w| {
            let wmem = s.knobs.tcp_wmem.expect("read with its maximum");
            let to = (w * 4).clamp(4 << 20, 64 << 20).max(w);
            format!(
                "raise tcp_wmem's maximum (now \"{} {} {w}\"): `bbrscope apply --sysctl \
                 net.ipv4.tcp_wmem=\"{} {} {to}\"{}`; it does not apply to sockets whose application sets SO_SNDBUF \
                 itself",
                wmem[0], wmem[1], wmem[0], wmem[1], s.scope
            )
        }),
        ..base
    }
}

/// What the flows whose application set SO_SNDBUF show: the buffer the kernel kept (the
/// largest seen; twice what was asked), the samples in which the writer waited for space, of
/// those with data in flight, and the flows' median share.
fn app_sndbuf_evidence(app_set: &[&&&FlowFacts], sndbuf_share: &dyn Fn(&FlowFacts) -> f64) -> (u32, u32, u32, f64) {
    let buf = app_set.iter().filter_map(|f| f.sndbuf_max).max().unwrap_or(0);
    let bound = app_set.iter().map(|f| f.bound_samples).sum();
    let sending = app_set.iter().map(|f| f.sending_samples).sum();
    let mut shares: Vec<f64> = app_set.iter().map(|f| sndbuf_share(f)).collect();
    (buf, bound, sending, median(&mut shares))
}

/// The note on flows whose application set SO_SNDBUF, beside a finding on tcp_wmem.
fn app_set_sndbuf_note(app_set: &[&&&FlowFacts], sndbuf_share: &dyn Fn(&FlowFacts) -> f64) -> String {
    if app_set.is_empty() {
        return String::new();
    }
    let (buf, bound, sending, _) = app_sndbuf_evidence(app_set, sndbuf_share);
    format!(
        "; {} more waited for space in a send buffer their application set itself with SO_SNDBUF ({}; the writer \
         waited in {bound} of {sending} samples): raising tcp_wmem does not change them, the application's setting does",
        app_set.len(),
        crate::units::fmt_bytes(f64::from(buf))
    )
}

/// The finding when the send buffers that held flows back are the application's own (SO_SNDBUF
/// locks the size: the kernel neither grows it nor looks at tcp_wmem): the change is in the
/// application, not a command.
fn app_set_sndbuf(
    app_set: &[&&&FlowFacts],
    sndbuf_share: &dyn Fn(&FlowFacts) -> f64,
    busy: usize,
    wmem_max: Option<u64>,
    notes: String,
    base: Finding,
) -> Finding {
    let (buf, bound, sending, share_median) = app_sndbuf_evidence(app_set, sndbuf_share);
    let mut bdps: Vec<f64> = app_set
        .iter()
        .filter_map(|f| Some(f.delivery_max_bps? as f64 / 8.0 * f64::from(f.min_rtt_us?) / 1e6))
        .collect();
    let mut rtts: Vec<f64> = app_set.iter().filter_map(|f| Some(f64::from(f.min_rtt_us?) / 1e3)).collect();
    let bdp_max = sorted(&mut bdps).last().copied().unwrap_or(0.0);
    let rtt_median = median_or_nan(&mut rtts);
    let worst = most(app_set.iter().map(|f| ***f), sndbuf_share, |f| format!("{:.0}%", sndbuf_share(f) * 100.0));
    let mut numbers = BTreeMap::from([
        ("flows_busy", busy as f64),
        ("app_set_flows", app_set.len() as f64),
        ("app_sndbuf_bytes", f64::from(buf)),
        ("waited_samples", f64::from(bound)),
        ("sending_samples", f64::from(sending)),
        ("sndbuf_limited_share_median", share_median),
        ("bdp_bytes_max", bdp_max),
        ("min_rtt_ms_median", rtt_median),
    ]);
    numbers.retain(|_, v| v.is_finite());
    let rate = if rtt_median.is_finite() {
        format!(" (at {rtt_median:.0} ms, about {})", crate::units::fmt_rate(f64::from(buf) * 8.0 / (rtt_median / 1e3)))
    } else {
        String::new()
    };
    Finding {
        status: Status::Found,
        affected: app_set.len(),
        numbers,
        evidence: format!(
            "{} of {busy} flows with data in flight waited for space in a send buffer their application set itself \
             with SO_SNDBUF: the kernel keeps it at {} (twice what was asked) whatever tcp_wmem allows; the writer \
             waited in {bound} of {sending} samples with data in flight (the flows' median {:.0}% of the time, the line \
             is {:.0}%; {}); their delivered rate × minimum RTT peaked at {}{notes}",
            app_set.len(),
            crate::units::fmt_bytes(f64::from(buf)),
            share_median * 100.0,
            LIMITED_SHARE * 100.0,
            worst.join(", "),
            crate::units::fmt_bytes(bdp_max),
        ),
        change: Some(format!(
            "in the application, not a sysctl: its SO_SNDBUF of {} caps what a flow keeps unacknowledged at about \
             {}{rate}; set it to at least the path's rate × RTT, or not at all (the kernel then sizes the buffer up \
             to tcp_wmem's maximum{}); raising tcp_wmem will not change these sockets",
            crate::units::fmt_bytes(f64::from(buf / 2)),
            crate::units::fmt_bytes(f64::from(buf)),
            wmem_max.map_or_else(String::new, |w| format!(", {}", crate::units::fmt_bytes(w as f64))),
        )),
        ..base
    }
}

/// Flows this host received whose window stopped at what `tcp_rmem`'s maximum allows, and was
/// full: the sender could send no faster than that window per round trip.
pub fn receive_buffer(flows: &[&FlowFacts], s: &Settings) -> Finding {
    // A flow that received no more than twice what it read in its busiest round trip took a
    // round trip or two: its window never held it back. (Not twice its window: autotuning grows
    // an unhindered flow's window to twice what it reads, so a transfer of a few such windows
    // would be left out as too short.)
    let receiving: Vec<&&FlowFacts> = flows
        .iter()
        .filter(|f| {
            f.rcvbuf.is_some()
                && f.window_clamp.is_some_and(|w| w > 0)
                && f.rcv_space.is_some_and(|r| r > 0 && f.received > 2 * u64::from(r))
        })
        .collect();
    let rmem = s.knobs.tcp_rmem;
    let fill = |f: &FlowFacts| f64::from(f.rcv_space.unwrap_or(0)) / f64::from(f.window_clamp.unwrap_or(1).max(1));
    // The kernel grows a flow's buffer (and with it the window) from what the application reads
    // and stops at tcp_rmem's maximum: only a buffer there is the setting's doing. Below it the
    // buffer was still growing, or the application set SO_RCVBUF itself.
    let at_ceiling = |f: &FlowFacts| match (f.rcvbuf, rmem) {
        (Some(b), Some(r)) => u64::from(b) >= r[2],
        _ => true,
    };
    let full: Vec<&&&FlowFacts> = receiving.iter().filter(|f| fill(f) >= WINDOW_FULL).collect();
    // A buffer the application set (SO_RCVBUF) stays as set: neither tcp_rmem nor autotuning
    // moves it, so the change is the application's.
    let limited: Vec<&&&FlowFacts> = full.iter().copied().filter(|f| !f.rcvbuf_locked && at_ceiling(f)).collect();
    let app_set: Vec<&&&FlowFacts> = full.iter().copied().filter(|f| f.rcvbuf_locked).collect();
    let below = full.len() - limited.len() - app_set.len();
    let base = Finding::too_few(Check::ReceiveBuffer, s, receiving.len(), limited.len());
    if receiving.is_empty() {
        return Finding {
            evidence: "no flow received more than twice what it read in its busiest round trip (nothing to say \
                       about receive buffers)"
                .into(),
            ..base
        };
    }
    let below_note = if below > 0 {
        format!(
            "; {below} filled a window the kernel had sized below tcp_rmem's maximum (a buffer still growing: not \
             the setting's doing)"
        )
    } else {
        String::new()
    };
    let mut fills: Vec<f64> = receiving.iter().map(|f| fill(f)).collect();
    let fill_median = median(&mut fills);
    // What the flows whose application set SO_RCVBUF did, as a note or as the finding.
    let app_did = {
        let buf = app_set.iter().filter_map(|f| f.rcvbuf).max().unwrap_or(0);
        let mut fills: Vec<f64> = app_set.iter().map(|f| fill(f)).collect();
        format!(
            "filled the window of a receive buffer their application set itself with SO_RCVBUF ({}, twice what was \
             asked; a median {:.0}% of the largest window read per round trip, the line is {:.0}%): raising tcp_rmem \
             does not change them, the application's setting does",
            crate::units::fmt_bytes(f64::from(buf)),
            median_or_nan(&mut fills) * 100.0,
            WINDOW_FULL * 100.0
        )
    };
    let app_note = if app_set.is_empty() { String::new() } else { format!("; {} {app_did}", app_set.len()) };
    if limited.is_empty() && !app_set.is_empty() {
        return Finding {
            status: Status::Found,
            affected: app_set.len(),
            numbers: BTreeMap::from([
                ("flows_receiving", receiving.len() as f64),
                ("app_set_flows", app_set.len() as f64),
                ("window_fill_median", fill_median),
            ]),
            evidence: format!(
                "{} of {} flows that received for more than a round trip or two {app_did}{below_note}",
                app_set.len(),
                receiving.len()
            ),
            change: Some(
                "in the application, not a sysctl: set SO_RCVBUF to at least the path's rate × RTT, or not at all \
                 (the kernel then grows the buffer as the reader needs, up to tcp_rmem's maximum); raising tcp_rmem \
                 will not change these sockets"
                    .into(),
            ),
            ..base
        };
    }
    if limited.is_empty() {
        return Finding {
            status: Status::None,
            numbers: BTreeMap::from([
                ("flows_receiving", receiving.len() as f64),
                ("full_below_maximum_flows", below as f64),
                ("window_fill_median", fill_median),
            ]),
            evidence: format!(
                "none of {} flows that received for more than a round trip or two filled a window at tcp_rmem's \
                 maximum (the application read a median {:.0}% of the largest window per round trip, the line is \
                 {:.0}%){below_note}",
                receiving.len(),
                fill_median * 100.0,
                WINDOW_FULL * 100.0
            ),
            ..base
        };
    }
    let mut clamps: Vec<f64> = limited.iter().filter_map(|f| Some(f64::from(f.window_clamp?))).collect();
    let mut rtts: Vec<f64> = limited.iter().filter_map(|f| Some(f64::from(f.rcv_rtt_us?) / 1e3)).collect();
    // A window per round trip: what the flow read in its busiest round trip, but never more than
    // the window it could advertise. A reader that fell behind (a busy host) reads the backlog
    // with the next round trip's data, and the kernel counts both as that round trip's: 45 KB
    // against a 40 KB window, 10% above the rate the client measured.
    let mut rates: Vec<f64> = limited
        .iter()
        .filter_map(|f| Some(f64::from(f.rcv_space?.min(f.window_clamp?)) * 8.0 / (f64::from(f.rcv_rtt_us?) / 1e6)))
        .collect();
    let clamp_median = median(&mut clamps);
    let rtt_median = median_or_nan(&mut rtts);
    let rate_median = median_or_nan(&mut rates);
    let mut lfills: Vec<f64> = limited.iter().map(|f| fill(f)).collect();
    let lfill_median = median(&mut lfills);
    let worst = most(
        limited.iter().map(|f| ***f),
        |f| f.received as f64,
        |f| format!("{} received", crate::units::fmt_bytes(f.received as f64)),
    );
    let mut numbers = BTreeMap::from([
        ("flows_receiving", receiving.len() as f64),
        ("full_below_maximum_flows", below as f64),
        ("window_fill_median", lfill_median),
        ("window_clamp_bytes_median", clamp_median),
        ("rcv_rtt_ms_median", rtt_median),
        ("receive_rate_bps_median", rate_median),
    ]);
    if let Some(r) = rmem {
        numbers.insert("tcp_rmem_max", r[2] as f64);
    }
    numbers.retain(|_, v| v.is_finite());
    let rate = if rate_median.is_finite() && rtt_median.is_finite() {
        format!(
            ", so at their {rtt_median:.0} ms round trip they received at most about {} (a median)",
            crate::units::fmt_rate(rate_median)
        )
    } else {
        String::new()
    };
    Finding {
        status: Status::Found,
        numbers,
        evidence: format!(
            "{} of {} flows this host received filled the largest window their receive buffer allowed in a round \
             trip (median {:.0}%; {}), with the buffer at tcp_rmem's maximum, {}: their window stopped at a median \
             {}{rate}; the sender could send no faster{app_note}{below_note}",
            limited.len(),
            receiving.len(),
            lfill_median * 100.0,
            worst.join(", "),
            rmem.map_or_else(|| "unknown".into(), |r| crate::units::fmt_bytes(r[2] as f64)),
            crate::units::fmt_bytes(clamp_median),
        ),
        change: rmem.map(|r| {
            let to = (r[2] * 4).clamp(KERNEL_RMEM_MAX, 64 << 20).max(r[2]);
            format!(
                "raise tcp_rmem's maximum (now \"{} {} {}\"): `bbrscope apply --sysctl \
                 net.ipv4.tcp_rmem=\"{} {} {to}\"{}`; the kernel grows each flow's buffer only as far as it reads \
                 fast enough to need it; it does not apply to sockets whose application sets SO_RCVBUF itself",
                r[0], r[1], r[2], r[0], r[1], s.scope
            )
        }),
        ..base
    }
}

/// Flows that keep much more written than sent: with `tcp_notsent_lowat` off (the kernel's
/// default) a writer may fill the whole send buffer ahead of the network, and what it writes
/// next — a more urgent response on the same HTTP/2 connection, a fresher frame — waits behind
/// it, while the buffer holds the memory.
pub fn unsent_queue(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let sending: Vec<&&FlowFacts> = flows.iter().filter(|f| f.unsent_median.is_some()).collect();
    let deep: Vec<&&&FlowFacts> = sending
        .iter()
        .filter(|f| {
            f.unsent_median.is_some_and(|u| u >= DEEP_UNSENT * CANDIDATE_LOWAT as f64)
                && f.unsent_wait_ms_median.is_some_and(|w| w >= MIN_UNSENT_WAIT_MS)
        })
        .collect();
    let lowat = s.knobs.tcp_notsent_lowat;
    let base = Finding::too_few(Check::UnsentQueue, s, sending.len(), deep.len());
    let setting = match lowat {
        Some(l) if l >= u64::from(u32::MAX) => "tcp_notsent_lowat is off (4294967295)".to_string(),
        Some(l) => format!("tcp_notsent_lowat is {l}"),
        None => "tcp_notsent_lowat could not be read".to_string(),
    };
    if sending.is_empty() {
        return Finding { evidence: format!("no flow had data in flight in 5 samples or more; {setting}"), ..base };
    }
    let mut numbers = BTreeMap::from([("flows_sending", sending.len() as f64), ("deep_flows", deep.len() as f64)]);
    if let Some(l) = lowat {
        numbers.insert("tcp_notsent_lowat", l as f64);
    }
    let already = lowat.is_some_and(|l| l <= CANDIDATE_LOWAT);
    if deep.is_empty() || already {
        let mut unsent: Vec<f64> = sending.iter().filter_map(|f| f.unsent_median).collect();
        let mut wait: Vec<f64> = sending.iter().filter_map(|f| f.unsent_wait_ms_median).collect();
        let u = median(&mut unsent);
        let w = median_or_nan(&mut wait);
        numbers.extend([("unsent_bytes_median", u), ("unsent_wait_ms_median", w)]);
        numbers.retain(|_, v| v.is_finite());
        let why = if deep.is_empty() {
            format!(
                "none of {} flows with data in flight kept a median of {} or more unsent that waited {MIN_UNSENT_WAIT_MS:.0} \
                 ms or more to be sent (the flows' medians: {} unsent{})",
                sending.len(),
                crate::units::fmt_bytes(DEEP_UNSENT * CANDIDATE_LOWAT as f64),
                crate::units::fmt_bytes(u),
                if w.is_finite() { format!(", waiting {w:.0} ms") } else { String::new() },
            )
        } else {
            format!(
                "{} flows kept deep unsent queues, but the setting is already at or below {CANDIDATE_LOWAT}",
                deep.len()
            )
        };
        return Finding { status: Status::None, numbers, evidence: format!("{why}; {setting}"), ..base };
    }
    let mut unsent: Vec<f64> = deep.iter().filter_map(|f| f.unsent_median).collect();
    let mut wait: Vec<f64> = deep.iter().filter_map(|f| f.unsent_wait_ms_median).collect();
    let (u, w) = (median(&mut unsent), median(&mut wait));
    numbers.extend([
        ("unsent_bytes_median", u),
        ("unsent_wait_ms_median", w),
        ("candidate_lowat", CANDIDATE_LOWAT as f64),
    ]);
    numbers.retain(|_, v| v.is_finite());
    Finding {
        status: Status::Found,
        numbers,
        evidence: format!(
            "{} of {} flows with data in flight kept a median {} written and not yet sent (the line is {}), which \
             waited a median {w:.0} ms to be sent at the flow's delivery rate (the line is \
             {MIN_UNSENT_WAIT_MS:.0} ms): anything the application writes next waits that long behind it ({setting})",
            deep.len(),
            sending.len(),
            crate::units::fmt_bytes(u),
            crate::units::fmt_bytes(DEEP_UNSENT * CANDIDATE_LOWAT as f64),
        ),
        change: Some(format!(
            "`bbrscope apply --sysctl net.ipv4.tcp_notsent_lowat={CANDIDATE_LOWAT}{}` (a writer is then let in only \
             while less than {} is unsent: more, smaller writes, the same data sent; it applies to every socket of the \
             namespace that does not set TCP_NOTSENT_LOWAT itself)",
            s.scope,
            crate::units::fmt_bytes(CANDIDATE_LOWAT as f64)
        )),
        ..base
    }
}

/// Keep-alive flows whose window the kernel restarted after a silence (CUBIC, Reno and the other
/// algorithms without their own `cong_control`; BBR keeps its model across idle).
pub fn idle_restart(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let keepalive: Vec<&&FlowFacts> = flows.iter().filter(|f| f.idle_gaps > 0 && !f.is_bbr()).collect();
    let restarts: Vec<_> = keepalive.iter().flat_map(|f| f.restarts.iter().map(move |r| (r, f.min_rtt_us))).collect();
    let affected = keepalive.iter().filter(|f| !f.restarts.is_empty()).count();
    let base = Finding::too_few(Check::IdleRestart, s, keepalive.len(), affected);
    let setting = match s.knobs.tcp_slow_start_after_idle {
        Some(true) => "tcp_slow_start_after_idle is 1",
        Some(false) => "tcp_slow_start_after_idle is 0",
        None => "tcp_slow_start_after_idle could not be read",
    };
    if keepalive.is_empty() {
        return Finding {
            evidence: format!(
                "no connection (not on BBR) fell silent for longer than its retransmission timeout and sent again; {setting}"
            ),
            ..base
        };
    }
    if restarts.len() < MIN_RESTARTS || s.knobs.tcp_slow_start_after_idle == Some(false) {
        return Finding {
            status: Status::None,
            numbers: BTreeMap::from([("keepalive_flows", keepalive.len() as f64), ("restarts", restarts.len() as f64)]),
            evidence: format!(
                "{} keep-alive flows sent again after a silence; {} window restarts seen; {setting}",
                keepalive.len(),
                restarts.len()
            ),
            ..base
        };
    }
    let mut before: Vec<f64> = restarts.iter().map(|(r, _)| f64::from(r.before)).collect();
    let mut after: Vec<f64> = restarts.iter().map(|(r, _)| f64::from(r.after)).collect();
    // Regrowing from the restart window to the one before takes log2(before/after) round trips
    // in slow start: what a response needing the old window pays, at most.
    let mut cost_rtts: Vec<f64> =
        restarts.iter().map(|(r, _)| (f64::from(r.before) / f64::from(r.after.max(1))).log2().max(0.0)).collect();
    let mut cost_ms: Vec<f64> = restarts
        .iter()
        .filter_map(|(r, rtt)| {
            Some((f64::from(r.before) / f64::from(r.after.max(1))).log2().max(0.0) * f64::from((*rtt)?) / 1e3)
        })
        .collect();
    let (b, a, rt) = (median(&mut before), median(&mut after), median(&mut cost_rtts));
    let ms = median_or_nan(&mut cost_ms);
    let mut numbers = BTreeMap::from([
        ("keepalive_flows", keepalive.len() as f64),
        ("restarts", restarts.len() as f64),
        ("cwnd_before_median", b),
        ("cwnd_after_median", a),
        ("round_trips_median", rt),
        ("ms_median", ms),
    ]);
    numbers.retain(|_, v| v.is_finite());
    Finding {
        status: Status::Found,
        numbers,
        evidence: format!(
            "{} window restarts after idle on {affected} of {} keep-alive flows ({setting}): the window went from a \
             median {b:.0} to {a:.0} packets at the next sample; a response that needed the old window takes up to \
             {rt:.1} more round trips{}",
            restarts.len(),
            keepalive.len(),
            if ms.is_finite() { format!(" (about {ms:.0} ms at these clients' RTT)") } else { String::new() },
        ),
        change: Some(format!(
            "`bbrscope apply --sysctl net.ipv4.tcp_slow_start_after_idle=0{}` (keep-alive connections then resume \
             with the window they had; BBR flows are not affected either way)",
            s.scope
        )),
        ..base
    }
}

/// BBR flows and the qdisc that sends their packets. BBR sets the pace of every packet it sends;
/// fq used to be the only thing that kept that pace, and since Linux 4.13 TCP paces by itself
/// where the qdisc does not (tcp_internal_pacing, an hrtimer per socket; from 4.20 on departure
/// times). So on every kernel bbrscope runs on, BBR is paced with or without fq: the check
/// counts the flows each way and says so, and advises no change for pacing's sake (what fq would
/// save is CPU time in TCP's timers, which the observer does not measure).
pub fn pacing(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let bbr: Vec<&&FlowFacts> = flows.iter().filter(|f| f.is_bbr()).collect();
    let base = Finding::too_few(Check::Pacing, s, bbr.len(), 0);
    if bbr.is_empty() {
        return Finding { evidence: "no flow ran BBR, the algorithm whose model needs pacing".into(), ..base };
    }
    // Per device: its qdisc, and the BBR flows through it.
    let mut devices: BTreeMap<&str, (&Egress, usize)> = BTreeMap::new();
    let mut unknown = 0;
    for f in &bbr {
        match s.egress.get(&f.dst) {
            Some(e) => devices.entry(e.ifname.as_str()).or_insert((e, 0)).1 += 1,
            None => unknown += 1,
        }
    }
    let count = |fq: bool| devices.values().filter(|(e, _)| e.fq == fq).map(|(_, n)| n).sum::<usize>();
    let (with_fq, without_fq) = (count(true), count(false));
    let list = |fq: bool| {
        let v: Vec<String> = devices
            .iter()
            .filter(|(_, (e, _))| e.fq == fq)
            .map(|(name, (e, n))| format!("{name} with {}: {n}", e.qdisc))
            .collect();
        v.join(", ")
    };
    let mut parts = Vec::new();
    if without_fq > 0 {
        parts.push(format!(
            "{without_fq} through devices without fq, which TCP paces itself (Linux 4.13 and later): {}",
            list(false)
        ));
    }
    if with_fq > 0 {
        let them = if with_fq == 1 { "it" } else { "them" };
        parts.push(format!("{with_fq} through fq, which paces {them}: {}", list(true)));
    }
    if unknown > 0 {
        parts.push(format!("{unknown} to peers no route leads to now"));
    }
    let fastest = bbr.iter().filter_map(|f| f.pacing_max_bps).max();
    let mut numbers = BTreeMap::from([
        ("bbr_flows", bbr.len() as f64),
        ("without_fq", without_fq as f64),
        ("with_fq", with_fq as f64),
    ]);
    if let Some(r) = fastest {
        numbers.insert("pacing_rate_max_bps", r as f64);
    }
    let rate = fastest.map(|r| format!(", paced at up to {}", crate::units::fmt_rate(r as f64))).unwrap_or_default();
    Finding {
        status: Status::None,
        numbers,
        evidence: format!(
            "{} BBR flow{}{rate}: {}. BBR's pacing holds either way; fq would take it off TCP's timers, a CPU \
             saving this observer does not measure",
            bbr.len(),
            if bbr.len() == 1 { "" } else { "s" },
            parts.join("; ")
        ),
        ..base
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::advise::facts::Restart;

    /// `status` names each setting that changed since an advice, and nothing else: the route
    /// list is not a setting, an unreadable value is "unknown".
    #[test]
    fn changed_settings_are_named_one_a_line() {
        let before = Knobs {
            tcp_wmem: Some([4096, 16384, 65536]),
            tcp_rmem: Some([4096, 131072, 6291456]),
            tcp_slow_start_after_idle: Some(true),
            tcp_notsent_lowat: Some(4294967295),
            initcwnd_routes: vec![],
            routes: vec!["10.0.0.0/8".parse().unwrap()],
        };
        let same = Knobs { routes: vec![], ..before.clone() };
        assert_eq!(same.changes_from(&before), Vec::<String>::new());
        let now = Knobs {
            tcp_wmem: Some([4096, 16384, 4194304]),
            tcp_slow_start_after_idle: None,
            initcwnd_routes: vec![InitcwndRoute { prefix: "198.18.0.0/15".parse().unwrap(), initcwnd: 32 }],
            ..before.clone()
        };
        assert_eq!(
            now.changes_from(&before),
            [
                "tcp_wmem 4096 16384 65536 -> 4096 16384 4194304",
                "tcp_slow_start_after_idle 1 -> unknown",
                "routes with an initial window: none -> 198.18.0.0/15 initcwnd 32",
            ]
        );
    }

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

    fn settings() -> Settings {
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

    #[test]
    fn a_full_buffer_below_the_maximum_is_not_the_settings_doing() {
        let mut f = flow(50 << 20, 100);
        (f.busy_us, f.buffer_bound_share, f.sndbuf_max) = (Some(5_000_000), Some(0.9), Some(90_000));
        let finding = send_buffer(&[&f], &settings());
        assert_eq!((finding.status, finding.affected), (Status::None, 0), "{finding:?}");
        assert_eq!(finding.numbers["full_below_maximum_flows"], 1.0);
        f.sndbuf_max = Some(4 << 20);
        assert_eq!(send_buffer(&[&f], &settings()).status, Status::Found);
    }

    #[test]
    fn a_buffer_the_application_set_is_the_applications_finding_not_a_command() {
        // SO_SNDBUF 32 KB: the kernel keeps 64 KB, far below tcp_wmem's 4 MB maximum.
        let mut f = flow(50 << 20, 60);
        (f.busy_us, f.buffer_bound_share, f.sndbuf_max, f.sndbuf_locked) =
            (Some(5_000_000), Some(15.0 / 19.0), Some(65_536), true);
        (f.sending_samples, f.bound_samples) = (19, 15);
        let finding = send_buffer(&[&f], &settings());
        assert_eq!((finding.status, finding.affected), (Status::Found, 1), "{finding:?}");
        assert!(finding.evidence.contains("waited in 15 of 19 samples"), "{}", finding.evidence);
        assert!(finding.evidence.contains("79% of the time, the line is 20%"), "{}", finding.evidence);
        let change = finding.change.as_deref().unwrap();
        assert!(change.starts_with("in the application") && !change.contains('`'), "{change}");
        // Beside flows at tcp_wmem's maximum: their command, and a note on the application's.
        let mut at_max = flow(50 << 20, 60);
        (at_max.busy_us, at_max.buffer_bound_share, at_max.sndbuf_max) = (Some(5_000_000), Some(0.9), Some(4 << 20));
        let finding = send_buffer(&[&f, &at_max], &settings());
        assert_eq!((finding.status, finding.affected), (Status::Found, 1), "{finding:?}");
        assert!(finding.change.as_deref().unwrap().contains("net.ipv4.tcp_wmem="), "{finding:?}");
        assert!(
            finding.evidence.contains("1 more waited for space in a send buffer their application set"),
            "{finding:?}"
        );
        // The receive side: a window full each round trip of a buffer the application set.
        let mut s = settings();
        s.knobs.tcp_rmem = Some([4096, 131_072, 6 << 20]);
        let held = FlowFacts { rcvbuf_locked: true, ..received(65536, 41_992, 40_960) };
        let finding = receive_buffer(&[&held], &s);
        assert_eq!((finding.status, finding.affected), (Status::Found, 1), "{finding:?}");
        assert!(finding.evidence.contains("their application set itself with SO_RCVBUF"), "{finding:?}");
        assert!(finding.change.as_deref().unwrap().starts_with("in the application"), "{finding:?}");
        // Unlocked, the same buffer below the maximum is still growing: nothing to change.
        let growing = received(65536, 41_992, 40_960);
        assert_eq!(receive_buffer(&[&growing], &s).status, Status::None);
    }

    #[test]
    fn send_buffer_limited_flows_are_named_with_their_share() {
        let mut f = flow(50 << 20, 100);
        (f.busy_us, f.sndbuf_limited_us, f.delivery_max_bps) = (Some(5_000_000), Some(4_000_000), Some(8_000_000));
        let ok = FlowFacts { busy_us: Some(5_000_000), sndbuf_limited_us: Some(0), ..flow(1 << 20, 100) };
        let finding = send_buffer(&[&f, &ok], &settings());
        assert_eq!((finding.status, finding.flows, finding.affected), (Status::Found, 2, 1), "{finding:?}");
        assert_eq!(finding.numbers["sndbuf_limited_share_median"], 0.8);
        assert!(finding.evidence.contains("198.18.1.2 80%"), "{}", finding.evidence);
        assert!(finding.change.as_deref().unwrap().contains("\"4096 16384 16777216\""), "{finding:?}");
        assert_eq!(send_buffer(&[&ok], &settings()).status, Status::None);
        assert_eq!(send_buffer(&[], &settings()).status, Status::TooFew);
    }

    /// A download as the tests' 100 ms path gave it: a 64 KB maximum held the window at 40 KB
    /// and the application read all of it each round trip.
    fn received(rcvbuf: u32, space: u32, clamp: u32) -> FlowFacts {
        FlowFacts {
            received: 3_000_000,
            rcvbuf: Some(rcvbuf),
            rcv_space: Some(space),
            rcv_rtt_us: Some(101_000),
            window_clamp: Some(clamp),
            ..flow(100, 100)
        }
    }

    #[test]
    fn a_full_window_at_the_receive_buffers_maximum_is_found() {
        let mut s = settings();
        s.knobs.tcp_rmem = Some([4096, 65536, 65536]);
        let held = received(65536, 41_992, 40_960);
        let f = receive_buffer(&[&held], &s);
        assert_eq!((f.status, f.flows, f.affected), (Status::Found, 1, 1), "{f:?}");
        assert_eq!(f.numbers["window_clamp_bytes_median"], 40_960.0);
        // The 40,960-byte window (not the 41,992 bytes read in the busiest round trip) a round
        // trip of 101 ms.
        assert!((f.numbers["receive_rate_bps_median"] - 3_244_356.0).abs() < 1.0, "{f:?}");
        assert!(f.change.as_deref().unwrap().contains("net.ipv4.tcp_rmem=\"4096 65536 6291456\""), "{f:?}");
        // A larger maximum already: four times it.
        s.knobs.tcp_rmem = Some([4096, 131_072, 6 << 20]);
        let big = FlowFacts { received: 1 << 30, ..received(6 << 20, 4 << 20, 4 << 20) };
        let f = receive_buffer(&[&big], &s);
        assert!(f.change.as_deref().unwrap().contains("\"4096 131072 25165824\""), "{f:?}");
    }

    #[test]
    fn a_window_the_reader_leaves_unfilled_or_below_the_maximum_is_not_the_settings_doing() {
        let mut s = settings();
        s.knobs.tcp_rmem = Some([4096, 131_072, 6 << 20]);
        // The kernel's maximum on the same path: the buffer grew to 2.2 MB, a fifth of the
        // window read per round trip.
        let free = received(2_202_249, 269_328, 1_376_405);
        let f = receive_buffer(&[&free], &s);
        assert_eq!((f.status, f.affected, f.numbers["full_below_maximum_flows"]), (Status::None, 0, 0.0), "{f:?}");
        // A full window below the maximum (SO_RCVBUF set by the application).
        let locked = received(65536, 41_992, 40_960);
        let f = receive_buffer(&[&locked], &s);
        assert_eq!((f.status, f.affected, f.numbers["full_below_maximum_flows"]), (Status::None, 0, 1.0), "{f:?}");
        // A slow reader at the maximum: the window is not full.
        s.knobs.tcp_rmem = Some([4096, 65536, 65536]);
        let slow = received(65536, 12_000, 40_960);
        assert_eq!(receive_buffer(&[&slow], &s).status, Status::None);
        // No more than twice what it read in a round trip received, or a flow that only sent: too few.
        let small = FlowFacts { received: 60_000, ..received(65536, 41_992, 40_960) };
        assert_eq!(receive_buffer(&[&small, &flow(1 << 20, 100)], &s).status, Status::TooFew);
    }

    #[test]
    fn deep_unsent_queues_are_found_unless_the_low_water_mark_is_set() {
        let mut f = flow(50 << 20, 60);
        (f.unsent_median, f.unsent_wait_ms_median) = (Some(1.5e6), Some(600.0));
        let shallow = FlowFacts { unsent_median: Some(20e3), unsent_wait_ms_median: Some(8.0), ..f.clone() };
        let mut s = settings();
        s.knobs.tcp_notsent_lowat = Some(u64::from(u32::MAX));
        let finding = unsent_queue(&[&f, &shallow], &s);
        assert_eq!((finding.status, finding.flows, finding.affected), (Status::Found, 2, 1), "{finding:?}");
        assert_eq!(finding.numbers["unsent_wait_ms_median"], 600.0);
        assert!(finding.change.as_deref().unwrap().contains("tcp_notsent_lowat=131072`"), "{finding:?}");
        assert_eq!(unsent_queue(&[&shallow], &s).status, Status::None);
        // A deep queue that drains fast (a fast path): nothing waits long.
        let fast = FlowFacts { unsent_wait_ms_median: Some(10.0), ..f.clone() };
        assert_eq!(unsent_queue(&[&fast], &s).status, Status::None);
        s.knobs.tcp_notsent_lowat = Some(16384);
        assert_eq!(unsent_queue(&[&f], &s).status, Status::None);
        assert_eq!(unsent_queue(&[], &s).status, Status::TooFew);
    }

    #[test]
    fn idle_restarts_count_only_where_the_kernel_restarts() {
        let mut f = flow(1 << 20, 100);
        f.idle_gaps = 3;
        f.restarts = vec![Restart { before: 80, after: 20 }; 3];
        let finding = idle_restart(&[&f], &settings());
        assert_eq!(finding.status, Status::Found, "{finding:?}");
        assert_eq!(finding.numbers["round_trips_median"], 2.0);
        assert_eq!(finding.numbers["ms_median"], 200.0);
        // With the setting off, or on BBR, it is not this.
        let mut off = settings();
        off.knobs.tcp_slow_start_after_idle = Some(false);
        assert_eq!(idle_restart(&[&f], &off).status, Status::None);
        let bbr = FlowFacts { cc: "bbr".into(), ..f.clone() };
        assert_eq!(idle_restart(&[&bbr], &settings()).status, Status::TooFew);
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

    #[test]
    fn bbr_is_paced_with_or_without_fq_and_the_devices_are_named() {
        let mut s = settings();
        let e = |ifname: &str, qdisc: &str, fq| Egress { ifname: ifname.into(), qdisc: qdisc.into(), fq };
        let peer = |i: u8| IpAddr::from([198, 18, 0, i]);
        s.egress = BTreeMap::from([
            (peer(1), e("eth0", "mq (fq_codel)", false)),
            (peer(2), e("eth0", "mq (fq_codel)", false)),
            (peer(3), e("eth1", "fq", true)),
        ]);
        let at = |i: u8, cc: &str, pacing: u64| FlowFacts {
            dst: peer(i),
            cc: cc.into(),
            pacing_max_bps: Some(pacing),
            ..flow(1 << 20, 100)
        };
        let flows = [at(1, "bbr", 20_000_000), at(2, "bbr", 50_000_000), at(3, "bbr", 9_000_000), at(4, "bbr", 1)];
        let cubic = at(1, "cubic", 90_000_000);
        let refs: Vec<&FlowFacts> = flows.iter().chain([&cubic]).collect();
        let f = pacing(&refs, &s);
        assert_eq!((f.status, f.flows, f.affected, f.change.as_deref()), (Status::None, 4, 0, None), "{f:?}");
        assert_eq!((f.numbers["without_fq"], f.numbers["with_fq"]), (2.0, 1.0));
        assert_eq!(f.numbers["pacing_rate_max_bps"], 50e6, "BBR's, not CUBIC's");
        for part in [
            "4 BBR flows, paced at up to 50",
            "eth0 with mq (fq_codel): 2",
            "TCP paces itself",
            "eth1 with fq: 1",
            "1 to peers no route",
        ] {
            assert!(f.evidence.contains(part), "{part}: {}", f.evidence);
        }
        assert_eq!(pacing(&[&cubic], &s).status, Status::TooFew);
    }
}

//! Connections that were already open when the sock_ops observer attached: no sock_ops callback
//! ever fires for them (callbacks are switched on per socket as it connects or is accepted), so
//! they are polled through sock_diag, as `ss -tin` reads them, until they close — in every
//! network namespace bbrscope can enter, through a sock_diag socket opened inside each (a
//! socket answers for the namespace it was created in). They get samples and a `flow_close`,
//! but no `flow_summary` (their start was not seen). Their owner is the process holding the
//! socket when bbrscope started, found through /proc as `ss -p` finds it (see
//! [`crate::sys::procfd`]): the `--comm`/`--pid`/`--netns` filters select them by it.

use std::{
    collections::{HashMap, HashSet},
    os::fd::BorrowedFd,
    sync::Arc,
};

use anyhow::Result;

use crate::{
    observe::clock::Clock,
    observe::event::{Bbr, CaState, Event, Head, Metrics, OpenEvent, Owner, SampleEvent},
    observe::filter::{FilterSpec, OwnerFilter},
    sys::name::Name,
    sys::{
        netlink::Netlink,
        netns, procfd,
        sockdiag::{self, CONNECTED, Socket},
    },
};

/// Up to this many connections are looked up one by one at each poll; more are found in one
/// dump. A dump walks and details every socket of the host (measured: a fifth of bbrscope's CPU
/// under 5,000 short flows/s, all of them sockets it does not poll); a lookup costs one netlink
/// round trip, a few µs.
const LOOKUP_MAX: usize = 64;

/// BBR's gains are fixed point with 1.0 = 256 (`BBR_UNIT`).
const BBR_UNIT: f64 = 256.0;

/// BBRv1's mode, whether STARTUP found the pipe full, and the PROBE_BW cycle phase, from the
/// (pacing, cwnd) gains it reports in `tcp_bbr_info`: mainline tcp_bbr.c sets a pair per mode
/// (`bbr_update_gains`) — STARTUP 739/739 (bbr_high_gain, 2.885), DRAIN 88/739 (1/2.885),
/// PROBE_BW cycle gain/512 (phase 0 is 1.25 = 320, phase 1 0.75 = 192, phases 2-7 and the
/// policer's long-term rate 256), PROBE_RTT 256/256. `None` for any other pair.
fn v1_state(pacing: u32, cwnd: u32) -> Option<(&'static str, Option<bool>, Option<u32>)> {
    match (pacing, cwnd) {
        (739, 739) => Some(("startup", Some(false), None)),
        (88, 739) => Some(("drain", Some(true), None)),
        (320, 512) => Some(("probe_bw", Some(true), Some(0))),
        (192, 512) => Some(("probe_bw", Some(true), Some(1))),
        (256, 512) => Some(("probe_bw", Some(true), None)),
        // PROBE_RTT can come before STARTUP ends: whether it found the pipe full is not said.
        (256, 256) => Some(("probe_rtt", None, None)),
        _ => None,
    }
}
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

pub struct Existing {
    /// bbrscope's own namespace first, then each other one that had connections at the start.
    spaces: Vec<Space>,
    filter: FilterSpec,
    /// Other namespaces whose connections open at the start could not be listed, and why:
    /// setns needs CAP_SYS_ADMIN, which e.g. the packaged exporter's unit does not grant, but
    /// other errors happen too.
    unreachable: Vec<Unreachable>,
    /// Why sock_diag could not say which sockets the kernel program watches already, if it
    /// could not: a connection opened while bbrscope started may then be reported twice.
    pub unseen_storage: Option<String>,
    /// The kernel's BBR is mainline v1, whose mode can be read back from its gains.
    bbr_v1: bool,
}

/// A namespace whose connections open at the start could not be listed.
struct Unreachable {
    /// The kernel refused entry for want of a privilege.
    denied: bool,
    /// The namespace and the error.
    why: String,
}

/// Names the cause as it was: a missing capability only where the kernel refused entry
/// (EPERM/EACCES), else the first other error itself. Short, as it also fits a footer.
fn unreachable_note(all: &[Unreachable]) -> Option<String> {
    let denied = all.iter().filter(|u| u.denied).count();
    let other: Vec<&str> = all.iter().filter(|u| !u.denied).map(|u| u.why.as_str()).collect();
    let mut causes = Vec::new();
    if denied > 0 {
        causes.push(format!("{denied} not entered: that needs CAP_SYS_ADMIN"));
    }
    if let Some(first) = other.first() {
        let more = if other.len() > 1 { format!(" (and {} more)", other.len() - 1) } else { String::new() };
        causes.push(format!("{first}{more}"));
    }
    (!all.is_empty()).then(|| {
        format!(
            "connections open before the start in {} other network namespace(s) are not shown ({}); new ones are",
            all.len(),
            causes.join("; ")
        )
    })
}

/// One network namespace's connections open at the start, and a sock_diag socket inside it.
struct Space {
    /// Cookies (unique host-wide) of those still open, with what was last seen.
    open: HashMap<u64, Polled>,
    nl: Netlink,
    /// The namespace's inode, as flows' owners name it.
    netns: u32,
}

impl Space {
    /// The calling thread's namespace: its connections that may pass the filters (with
    /// `--port 443`, a busy host's other connections are not polled at all) and that the
    /// kernel program does not watch already. Those have a value in its socket storage
    /// (`storage`): connections opened after it attached and before this snapshot, which
    /// would otherwise be reported twice.
    ///
    /// A kernel that cannot say (before 5.2, or without CAP_BPF) leaves that short window open
    /// rather than the snapshot failing: `unseen_storage` gets why.
    fn here(
        netns: u64,
        filter: &FilterSpec,
        storage: Option<BorrowedFd<'_>>,
        unseen_storage: &mut Option<String>,
    ) -> Result<Space> {
        let mut nl = sockdiag::open()?;
        let sockets = match storage.map(|map| sockdiag::dump_on(&mut nl, CONNECTED, false, Some(map))) {
            Some(Ok(sockets)) => sockets,
            Some(Err(e)) => {
                *unseen_storage = Some(format!("{e:#}"));
                sockdiag::dump_on(&mut nl, CONNECTED, false, None)?
            }
            None => sockdiag::dump_on(&mut nl, CONNECTED, false, None)?,
        };
        let open = sockets
            .into_iter()
            .filter(|s| !s.in_storage && filter.may_match(s.src, s.dst))
            .map(|socket| {
                (socket.cookie, Polled { socket, owner: Owner::default(), last: None, shown: false, segs_in: None })
            })
            .collect();
        Ok(Space { open, nl, netns: netns as u32 })
    }
}

struct Polled {
    /// As the snapshot found it: what a lookup asks for.
    socket: Socket,
    /// The process that held it at the start, and its namespace.
    owner: Owner,
    last: Option<SampleEvent>,
    /// A sample went out: the connection is a flow for the sinks, and gets a `flow_close`.
    shown: bool,
    /// The kernel's count of incoming segments (tcpi_segs_in) at the previous sample, or at the
    /// first poll: a sample's `acks` is what came in since.
    segs_in: Option<u32>,
}

/// Incoming segments between two readings of tcpi_segs_in (a u32 that wraps), 0 without both.
fn segs_since(prev: Option<u32>, now: Option<u32>) -> u32 {
    prev.zip(now).map_or(0, |(p, n)| n.wrapping_sub(p))
}

impl Existing {
    /// The connections open now in every network namespace (call once the observer is
    /// attached, so that a connection is either here or seen opening by the observer).
    /// Only those whose owner passes `owners` are kept.
    pub fn snapshot(
        filter: &FilterSpec,
        owners: &OwnerFilter,
        storage: Option<BorrowedFd<'_>>,
        bbr_v1: bool,
    ) -> Result<Self> {
        let mut unseen_storage = None;
        let own = netns::current()?.ino;
        let mut spaces = vec![Space::here(own, filter, storage, &mut unseen_storage)?];
        let mut unreachable = Vec::new();
        // Namespaces found through /run/netns and /proc/*/ns/net; one that has gone meanwhile
        // has no connections left to poll.
        for ns in netns::all().unwrap_or_default() {
            match netns::run(&ns, || Space::here(ns.ino, filter, storage, &mut unseen_storage)) {
                Ok(space) if !space.open.is_empty() => spaces.push(space),
                Ok(_) => {}
                Err(e) if netns::still_there(&ns) => {
                    let why = format!("{e:#}");
                    let why = if why.contains(&ns.label) { why } else { format!("{ns}: {why}") };
                    unreachable.push(Unreachable { denied: netns::denied(&e), why });
                }
                Err(_) => {}
            }
        }
        let inodes: Vec<u64> = spaces.iter().flat_map(|s| s.open.values().map(|p| p.socket.inode)).collect();
        let holders = procfd::holders(&inodes);
        for space in &mut spaces {
            for p in space.open.values_mut() {
                let holder = holders.get(&p.socket.inode);
                p.owner = Owner {
                    pid: holder.map(|h| h.pid),
                    comm: holder.map(|h| h.comm),
                    netns: Some(space.netns),
                    ..Owner::default()
                };
            }
            space.open.retain(|_, p| owners.passes(&p.owner));
        }
        Ok(Existing { spaces, filter: filter.clone(), unreachable, unseen_storage, bbr_v1 })
    }

    /// What to say of the namespaces whose connections open at the start are not seen, if any.
    pub fn unreachable_note(&self) -> Option<String> {
        unreachable_note(&self.unreachable)
    }

    /// How many connections are still being polled.
    pub fn len(&self) -> usize {
        self.spaces.iter().map(|s| s.open.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.spaces.iter().all(|s| s.open.is_empty())
    }

    /// One poll: a sample for each connection that sent since the last poll (its peer acked
    /// more: the first poll only sets the baseline), and a final sample for each shown
    /// connection that has gone.
    pub fn poll(&mut self) -> Result<Vec<Event>> {
        let now = Clock::monotonic_ns();
        let mut out = Vec::new();
        for space in self.spaces.iter_mut().filter(|s| !s.open.is_empty()) {
            space.poll(&self.filter, now, self.bbr_v1, &mut out)?;
        }
        Ok(out)
    }
}

impl Space {
    fn poll(&mut self, filter: &FilterSpec, now: u64, bbr_v1: bool, out: &mut Vec<Event>) -> Result<()> {
        let mut seen = HashSet::new();
        let current = if self.open.len() <= LOOKUP_MAX {
            let mut found = Vec::with_capacity(self.open.len());
            for p in self.open.values() {
                // A lookup answers in any state: one that has left the connected states is gone.
                if let Some(s) = sockdiag::lookup(&mut self.nl, &p.socket)?.filter(|s| CONNECTED & (1 << s.state) != 0)
                {
                    found.push(s);
                }
            }
            found
        } else {
            sockdiag::dump_on(&mut self.nl, CONNECTED, true, None)?
        };
        for s in current {
            let Some(slot) = self.open.get_mut(&s.cookie) else { continue };
            seen.insert(s.cookie);
            if !filter.matches(s.src, s.dst, s.cc.as_deref()) {
                continue;
            }
            let Some(mut ev) = sample(&s, now, bbr_v1) else { continue };
            let sent = match &slot.last {
                Some(prev) => prev.metrics.bytes_acked != ev.metrics.bytes_acked,
                None => {
                    slot.segs_in = ev.metrics.segs_in;
                    false
                }
            };
            if sent {
                // No callback runs for a connection older than bbrscope: the kernel's own count
                // of what came in is its ACKs (and data), as tcp_probe counts them.
                ev.acks = segs_since(slot.segs_in, ev.metrics.segs_in);
                slot.segs_in = ev.metrics.segs_in;
                if !slot.shown {
                    // Who owns it, before its first sample (its start was not seen: no start time).
                    out.push(Event::Open(Box::new(OpenEvent {
                        head: ev.head.clone(),
                        cc: ev.cc,
                        owner: slot.owner.clone(),
                        start_ns: 0,
                        retrans_at_open: 0,
                        summary_only: false,
                    })));
                }
                ev.head.first = !slot.shown;
                slot.shown = true;
                out.push(Event::Sample(Box::new(ev.clone())));
            }
            slot.last = Some(ev);
        }
        let gone: Vec<u64> = self.open.keys().filter(|c| !seen.contains(c)).copied().collect();
        for cookie in gone {
            if let Some(Polled { last: Some(mut last), shown: true, segs_in, .. }) = self.open.remove(&cookie) {
                last.acks = segs_since(segs_in, last.metrics.segs_in);
                last.closing = true;
                last.head.ts_ns = now;
                last.head.tcp_state = 7;
                out.push(Event::Sample(Box::new(last)));
            }
        }
        Ok(())
    }
}

fn sample(s: &Socket, now: u64, bbr_v1: bool) -> Option<SampleEvent> {
    let i = s.info.as_ref()?;
    let cc = s.cc.as_deref().map(Name::new).unwrap_or_default();
    let bbr = match (cc.as_str(), s.bbr) {
        ("bbr", Some(b)) => {
            // sock_diag reports no mode; mainline v1's gains say it exactly.
            let state = if bbr_v1 { v1_state(b.pacing_gain, b.cwnd_gain) } else { None };
            Some(Bbr {
                mode: state.map(|(mode, ..)| Arc::from(mode)),
                bw_bps: Some(b.bw_bytes_per_s * 8),
                min_rtt_us: Some(b.min_rtt_us),
                pacing_gain: (b.pacing_gain != 0).then(|| f64::from(b.pacing_gain) / BBR_UNIT),
                cwnd_gain: (b.cwnd_gain != 0).then(|| f64::from(b.cwnd_gain) / BBR_UNIT),
                full_bw_reached: state.and_then(|(_, full, _)| full),
                cycle_idx: state.and_then(|(.., idx)| idx),
            })
        }
        _ => None,
    };
    let metrics = Metrics {
        cwnd: Some(i.snd_cwnd),
        ssthresh: (i.snd_ssthresh < INFINITE_SSTHRESH).then_some(i.snd_ssthresh),
        srtt_us: Some(i.rtt_us),
        rttvar_us: Some(i.rttvar_us),
        min_rtt_us: (i.min_rtt_us != u32::MAX).then_some(i.min_rtt_us),
        pacing_rate_bps: (i.pacing_rate != u64::MAX).then(|| i.pacing_rate.saturating_mul(8)),
        delivery_rate_bps: Some(i.delivery_rate.saturating_mul(8)),
        delivery_app_limited: Some(i.app_limited),
        bytes_acked: Some(i.bytes_acked),
        bytes_sent: i.bytes_sent,
        bytes_retrans: i.bytes_retrans,
        bytes_received: Some(i.bytes_received),
        retrans_total: Some(i.total_retrans),
        data_segs_out: Some(i.data_segs_out),
        segs_out: Some(i.segs_out),
        segs_in: Some(i.segs_in),
        data_segs_in: Some(i.data_segs_in),
        unacked: Some(i.unacked),
        in_flight: Some(i.unacked.saturating_sub(i.sacked + i.lost) + i.retrans),
        lost: Some(i.lost),
        sacked: Some(i.sacked),
        retrans_out: Some(i.retrans),
        delivered: Some(i.delivered),
        mss: Some(i.snd_mss),
        snd_wnd: i.snd_wnd,
        busy_us: i.busy_us,
        rwnd_limited_us: i.rwnd_limited_us,
        sndbuf_limited_us: i.sndbuf_limited_us,
        // Not in tcp_info (sock_diag's meminfo would have the buffer): the first sample has them.
        sndbuf_bytes: None,
        wmem_queued_bytes: None,
        notsent_bytes: None,
        rcvbuf_bytes: None,
        rcv_space_bytes: Some(i.rcv_space),
        rcv_rtt_us: Some(i.rcv_rtt_us),
        rcv_ssthresh_bytes: Some(i.rcv_ssthresh),
        window_clamp_bytes: None,
        nospace: None,
        // sock_diag does not report sk_userlocks.
        sndbuf_locked: None,
        rcvbuf_locked: None,
        bbr,
        cubic: None,
    };
    Some(SampleEvent {
        head: Head {
            flow: s.cookie,
            ts_ns: now,
            src: s.src,
            dst: s.dst,
            ca_state: CaState::from_raw(i.ca_state),
            first: false,
            tcp_state: s.state,
        },
        closing: false,
        cc,
        acks: 0,
        retrans_coalesced: 0,
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::{Unreachable, segs_since, unreachable_note, v1_state};

    /// A polled connection's `acks`: the kernel's incoming segments since the previous sample,
    /// across the counter's wrap; nothing known, nothing counted.
    #[test]
    fn polled_acks_are_the_segments_that_came_in_since_the_previous_sample() {
        assert_eq!(segs_since(Some(100), Some(157)), 57);
        assert_eq!(segs_since(Some(u32::MAX - 1), Some(3)), 5);
        assert_eq!(segs_since(None, Some(3)), 0);
        assert_eq!(segs_since(Some(3), None), 0);
    }

    /// A namespace the kernel refused is a capability problem; any other error is named as it
    /// was, never as one; nothing failed, nothing said.
    #[test]
    fn unreachable_namespaces_are_named_by_their_real_error() {
        let u = |denied, why: &str| Unreachable { denied, why: why.into() };
        assert_eq!(unreachable_note(&[]), None);
        let refused = unreachable_note(&[u(true, "pid 7 (app): EPERM")]).unwrap();
        assert!(
            refused.contains("1 other network namespace(s)") && refused.contains("needs CAP_SYS_ADMIN"),
            "{refused}"
        );
        let other = unreachable_note(&[
            u(false, "pid 7 (app): entering network namespace pid 7 (app): Cannot allocate memory (os error 12)"),
            u(false, "pid 8 (db): x"),
        ])
        .unwrap();
        assert!(!other.contains("CAP_SYS_ADMIN"), "{other}");
        assert!(other.contains("os error 12") && other.contains("(and 1 more)"), "{other}");
        let both = unreachable_note(&[u(true, "a"), u(false, "pid 8 (db): gone")]).unwrap();
        assert!(both.contains("1 not entered: that needs CAP_SYS_ADMIN; pid 8 (db): gone"), "{both}");
    }

    /// The pairs mainline BBR sets, and nothing else read as a mode.
    #[test]
    fn v1_modes_from_their_gains() {
        assert_eq!(v1_state(739, 739), Some(("startup", Some(false), None)));
        assert_eq!(v1_state(88, 739), Some(("drain", Some(true), None)));
        assert_eq!(v1_state(320, 512), Some(("probe_bw", Some(true), Some(0))));
        assert_eq!(v1_state(192, 512), Some(("probe_bw", Some(true), Some(1))));
        assert_eq!(v1_state(256, 512).map(|s| s.0), Some("probe_bw"));
        assert_eq!(v1_state(256, 256).map(|s| s.0), Some("probe_rtt"));
        // BBRv3's PROBE_BW DOWN phase (0.91): not a v1 pair.
        assert_eq!(v1_state(233, 512), None);
    }
}

//! A live observation session: the loaded programs, decoding, and cost accounting, shared by
//! every command that watches live flows (`stream`, `top`, `demo`).

use std::collections::VecDeque;

use anyhow::{Context as _, Result};

use crate::{
    observe::event::{Decoder, Event, Metrics, OpenEvent, Owner},
    observe::filter::OwnerFilter,
    observe::flow::{IdMap, IdSet},
    observe::kernel::existing::Existing,
    observe::kernel::{
        bbr_version::Version,
        layout::Layout,
        loader::{Assignment, Observer, ObserverPath, Options, Receivers},
    },
    observe::stats::{StatsReport, StatsTracker},
    sys::{privileges, procfd},
};

/// A flow opened but not shown yet, and what happened to it meanwhile (retransmits, state
/// changes before its first sample): shown, in order, with that sample.
struct Pending {
    open: Box<OpenEvent>,
    held: Vec<Event>,
}

/// Events held per pending flow; beyond this the oldest are dropped (the flow's summary still
/// counts every retransmission).
const HELD_PER_FLOW: usize = 256;
/// Flows waiting for their first sample: the kernel sends a flow's OPEN just before its first
/// sample or retransmission, so only flows whose close record was lost to a full ring, or that
/// retransmitted without ever having data acked, wait long. The oldest go beyond this.
const PENDING_FLOWS: usize = 65_536;
/// Congestion-state changes can come before their flow's OPEN: they come from a tracepoint that
/// cannot see the flow's state. Held for this many flows (the oldest dropped beyond), and this
/// many changes a flow.
const ORPHAN_FLOWS: usize = 4096;
const ORPHANS_PER_FLOW: usize = 16;

/// Whether a flow sent any data (beyond its SYN and FIN).
fn sent_data(m: &Metrics) -> bool {
    match (m.bytes_sent, m.bytes_acked) {
        (Some(sent), _) => sent > 0,
        (None, Some(acked)) => acked > 2,
        (None, None) => true,
    }
}

/// A map of at most `cap` flows that forgets the oldest-inserted beyond it.
struct Held<V> {
    map: IdMap<V>,
    order: VecDeque<u64>,
    cap: usize,
}

impl<V> Held<V> {
    fn new(cap: usize) -> Self {
        Held { map: IdMap::default(), order: VecDeque::new(), cap }
    }

    /// Inserts (or replaces) `id`'s value; the value forgotten to make room, if any.
    fn insert(&mut self, id: u64, v: V) -> Option<V> {
        if self.map.insert(id, v).is_none() {
            self.order.push_back(id);
        }
        if self.order.len() > 2 * self.cap {
            // Ids removed since they were inserted.
            let map = &self.map;
            self.order.retain(|i| map.contains_key(i));
        }
        while self.map.len() > self.cap {
            let oldest = self.order.pop_front()?;
            if let Some(v) = self.map.remove(&oldest) {
                return Some(v);
            }
        }
        None
    }
}

/// sock_ops path: which records reach the sinks, and in what order.
struct Gate {
    filter: OwnerFilter,
    /// Flows that only receive are shown too (`Receivers::AtClose`: the kernel sends them).
    receivers: bool,
    /// The flows shown, so that records of other sockets (filtered out, or the
    /// congestion-state tracepoint's view of untracked sockets) are dropped here.
    open_flows: IdSet,
    /// OPEN records held back until the flow's first sample that shows it sent data (and ran an
    /// algorithm passing `--cc`).
    pending: Held<Pending>,
    /// Congestion-state changes of flows whose OPEN has not come (yet).
    orphans: Held<Vec<Event>>,
    owner_filtered: u64,
    /// Flows shown: passed every filter, the kernel's and these, and sent data.
    shown: u64,
    /// Events dropped because too many flows or events were waiting (see the constants).
    held_dropped: u64,
    /// Owners the kernel could not name, looked up in /proc.
    resolver: procfd::Resolver,
    /// Flows shown whose owner /proc had not named yet (a pass was not due): asked again at
    /// each of their samples, and an OPEN with the owner follows when found (it completes the
    /// flow's summary; its `flow_open` line has gone out).
    unnamed: IdMap<Box<OpenEvent>>,
}

/// Flows waiting for their owner from /proc, at most; beyond this they keep none.
const UNNAMED_FLOWS: usize = 65_536;

impl Gate {
    fn new(filter: OwnerFilter, receivers: bool) -> Self {
        Gate {
            filter,
            receivers,
            open_flows: IdSet::default(),
            pending: Held::new(PENDING_FLOWS),
            orphans: Held::new(ORPHAN_FLOWS),
            owner_filtered: 0,
            shown: 0,
            held_dropped: 0,
            resolver: procfd::Resolver::default(),
            unnamed: IdMap::default(),
        }
    }

    /// Fills in from /proc what the kernel could not say of a flow's owner: the process holding
    /// the socket where it named none (its sock_ops programs cannot see processes, or an
    /// accepted connection's writer was not seen), or the name of the process it named (the
    /// process's main thread's, where the kernel would have given the calling thread's).
    /// Whether `owner` is complete once this returns (nothing left to ask /proc for).
    fn complete(&mut self, owner: &mut Owner) -> bool {
        match (owner.pid, owner.sock_ino) {
            (None, Some(ino)) => match self.resolver.holder(ino.into()) {
                Some(h) => {
                    owner.pid = Some(h.pid);
                    owner.comm = Some(h.comm);
                    true
                }
                None => false,
            },
            (Some(pid), _) if owner.comm.is_none() => {
                owner.comm = self.resolver.comm(pid);
                true
            }
            _ => true,
        }
    }

    fn route(&mut self, ev: Event, f: &mut impl FnMut(Event)) {
        let id = ev.head().flow;
        match ev {
            Event::Open(o) => {
                // The owner filters wait for the flow's first sample, which comes right after
                // (its owner may be named from /proc by then).
                let held = self.orphans.map.remove(&id).unwrap_or_default();
                if let Some(p) = self.pending.insert(id, Pending { open: o, held }) {
                    self.held_dropped += 1 + p.held.len() as u64;
                }
            }
            Event::Sample(s) => {
                if !self.receivers && !self.open_flows.contains(&id) && !sent_data(&s.metrics) {
                    // Only received so far: not a flow this host sends on, at least not yet.
                    return;
                }
                if let Some(Pending { mut open, held }) = self.pending.map.remove(&id) {
                    let named = self.complete(&mut open.owner);
                    if !self.filter.passes(&open.owner) {
                        self.owner_filtered += 1;
                        return;
                    }
                    // The algorithm the flow first sent with (an application may set it after
                    // connect()).
                    open.cc.clone_from(&s.cc);
                    // Events held for it are shown: it has more than its summary to show.
                    open.summary_only &= held.is_empty();
                    self.open_flows.insert(id);
                    self.shown += 1;
                    if !named && !s.closing && self.unnamed.len() < UNNAMED_FLOWS {
                        self.unnamed.insert(id, open.clone());
                    }
                    f(Event::Open(open));
                    held.into_iter().for_each(&mut *f);
                } else if let Some(mut open) = self.unnamed.remove(&id) {
                    if self.complete(&mut open.owner) {
                        f(Event::Open(open));
                    } else {
                        self.unnamed.insert(id, open);
                    }
                }
                if self.open_flows.contains(&id) {
                    f(Event::Sample(s));
                }
            }
            Event::End(e) => {
                self.pending.map.remove(&id);
                self.unnamed.remove(&id);
                if self.open_flows.remove(&id) {
                    f(Event::End(e));
                }
            }
            ev if self.open_flows.contains(&id) => f(ev),
            // A retransmission or a state change before the flow's first sample: held until it
            // (the sample says which algorithm the flow runs, and a flow that never passes `--cc`
            // never has one).
            ev => {
                if let Some(p) = self.pending.map.get_mut(&id) {
                    push_capped(&mut p.held, ev, HELD_PER_FLOW, &mut self.held_dropped);
                } else if let Some(held) = self.orphans.map.get_mut(&id) {
                    push_capped(held, ev, ORPHANS_PER_FLOW, &mut self.held_dropped);
                } else if let Some(old) = self.orphans.insert(id, vec![ev]) {
                    self.held_dropped += old.len() as u64;
                }
            }
        }
    }
}

/// Appends, dropping (and counting) the oldest beyond `cap`.
fn push_capped(held: &mut Vec<Event>, ev: Event, cap: usize, dropped: &mut u64) {
    if held.len() >= cap {
        held.remove(0);
        *dropped += 1;
    }
    held.push(ev);
}

pub(crate) struct Live {
    /// Holds the kernel's BPF run-time statistics on while bbrscope runs (`--bpf-stats`); the
    /// kernel turns them off again when this closes, whatever way bbrscope exits.
    _bpf_stats: Option<std::os::fd::OwnedFd>,
    observer: Observer,
    layout: Layout,
    records: u64,
    tracker: StatsTracker,
    gate: Gate,
    /// sock_ops path: connections open before bbrscope attached, polled through sock_diag.
    existing: Option<Existing>,
    poll: tokio::time::Interval,
    /// ACKs of polled connections (their samples' `acks`) since the last stats report.
    polled_acks: u64,
}

impl Live {
    /// Checks privileges, loads and attaches the programs. `what` names the command in errors.
    pub(crate) fn start(what: &str, opts: &Options) -> Result<Self> {
        privileges::require_tracing(what)?;
        let bpf_stats = if opts.bpf_stats {
            Some(
                aya::sys::enable_stats(aya::sys::Stats::RunTime)
                    .context("enabling BPF run-time statistics (needs Linux 5.8+)")?,
            )
        } else {
            None
        };
        let mut observer = Observer::start(opts)?;
        let layout = observer.layout.clone();
        if !opts.owner.is_empty() && observer.path != ObserverPath::Sockops {
            crate::error::usage!(
                "--comm, --pid and --netns need the sock_ops observer, which is not in use ({})",
                observer.degraded.join("; ")
            );
        }
        // After attaching: every connection is then either in this snapshot or seen opening.
        let existing = if observer.path == ObserverPath::Sockops {
            match Existing::snapshot(
                &opts.filter,
                &opts.owner,
                observer.socket_storage(),
                layout.bbr.as_ref().and_then(|b| b.version) == Some(Version::V1),
            ) {
                Ok(existing) => Some(existing),
                // Degrade, don't die: new connections need no socket listing.
                Err(e) => {
                    observer.degraded.push(format!(
                        "connections open before the start are not shown: the kernel cannot list sockets ({e:#}; \
                     sock_diag needs the inet_diag and tcp_diag modules); new connections are"
                    ));
                    None
                }
            }
        } else {
            None
        };
        if let Some(why) = existing.as_ref().and_then(|e| e.unseen_storage.as_ref()) {
            observer.degraded.push(format!(
                "sock_diag cannot say which sockets bbrscope's kernel program already watches ({why}): a connection \
                 opened while bbrscope started may be reported twice"
            ));
        }
        if let Some(note) = existing.as_ref().and_then(Existing::unreachable_note) {
            observer.degraded.push(note);
        }
        // sock_diag dumps every socket of the namespace: not more often than 4 times a second,
        // and less often the more sockets there are (a dump costs about 1 µs a socket), so that
        // polling stays below ~1% of a core however busy the host.
        let sockets = existing.as_ref().map_or(0, Existing::len) as u32;
        let period = opts.interval.max(std::time::Duration::from_millis(250)) * (sockets / 2500).max(1);
        let mut poll = tokio::time::interval(period);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let tracker = StatsTracker::new(
            observer.counters()?,
            0,
            observer.probe_runtime(),
            opts.max_flows,
            observer.path.as_str(),
            observer.sample_clock.name(),
            layout.bbr.as_ref().and_then(|b| b.version).map(Version::label),
        );
        Ok(Live {
            _bpf_stats: bpf_stats,
            observer,
            layout,
            records: 0,
            tracker,
            gate: Gate::new(opts.owner.clone(), opts.receivers != Receivers::No),
            existing,
            poll,
            polled_acks: 0,
        })
    }

    /// The experiment's assignment, for the experiment to switch while the loop runs
    /// (`Observer::take_assignment`).
    pub(crate) fn take_assignment(&mut self) -> Option<Assignment> {
        self.observer.take_assignment()
    }

    /// What this kernel lacks, in words.
    pub(crate) fn degraded(&self) -> &[String] {
        &self.observer.degraded
    }

    /// Waits for records (or the next poll of connections open before the start), then decodes
    /// each and passes it to `f`.
    pub(crate) async fn next_batch(&mut self, mut f: impl FnMut(Event)) -> Result<()> {
        if let Some(existing) = self.existing.as_mut().filter(|e| !e.is_empty()) {
            tokio::select! {
                biased;
                _ = self.poll.tick() => {
                    for ev in existing.poll()? {
                        if let Event::Sample(s) = &ev {
                            self.polled_acks += u64::from(s.acks);
                        }
                        f(ev);
                    }
                    return Ok(());
                }
                r = Self::drain_ring(&mut self.observer, &self.layout, &mut self.records, &mut self.gate,
                    &mut f) => return r,
            }
        }
        Self::drain_ring(&mut self.observer, &self.layout, &mut self.records, &mut self.gate, &mut f).await
    }

    async fn drain_ring(
        observer: &mut Observer,
        layout: &Layout,
        records: &mut u64,
        gate: &mut Gate,
        f: &mut impl FnMut(Event),
    ) -> Result<()> {
        let decoder = Decoder { layout };
        let sockops = observer.path == ObserverPath::Sockops;
        observer
            .drain(|bytes| {
                *records += 1;
                if !sockops {
                    decoder.decode(bytes, f);
                    return;
                }
                decoder.decode(bytes, &mut |ev| gate.route(ev, f));
            })
            .await?;
        Ok(())
    }

    /// Which kernel path observes flows.
    pub(crate) fn path(&self) -> ObserverPath {
        self.observer.path
    }

    /// Cost and health since the previous call.
    pub(crate) fn stats(&mut self, flows_active: usize) -> Result<StatsReport> {
        let counters = self.observer.counters()?;
        let mut r = self.tracker.report(counters, self.records, self.observer.probe_runtime(), flows_active);
        // The kernel counts the callbacks it ran; connections open before the start run none,
        // and their ACKs are counted as they are polled.
        r.events_per_s += std::mem::take(&mut self.polled_acks) as f64 / r.interval_s.max(1e-9);
        r.flows_filtered_total += self.gate.owner_filtered;
        r.flows_shown_total = Some(self.gate.shown);
        r.held_dropped_total = self.gate.held_dropped;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::event::{CaState, CongStateEvent, Head, SampleEvent};

    fn head(flow: u64) -> Head {
        let a = "10.0.0.1:80".parse().unwrap();
        Head { flow, ts_ns: 1, src: a, dst: a, ca_state: CaState::Open, first: false, tcp_state: 1 }
    }

    fn cong(flow: u64) -> Event {
        Event::CongState(CongStateEvent {
            head: head(flow),
            from: CaState::Open,
            to: CaState::Recovery,
            cwnd: 10,
            ssthresh: None,
        })
    }

    fn kinds(evs: &[Event]) -> Vec<&'static str> {
        evs.iter()
            .map(|e| match e {
                Event::Open(_) => "open",
                Event::Sample(_) => "sample",
                Event::CongState(_) => "cong",
                Event::Retransmit(_) => "retransmit",
                Event::End(_) => "end",
            })
            .collect()
    }

    /// A congestion-state change that comes before its flow's OPEN (it comes from a tracepoint
    /// that cannot see the flow) is shown after the opening; too many such flows are counted.
    #[test]
    fn state_changes_before_the_opening_are_held_then_shown_in_order() {
        let mut gate = Gate::new(OwnerFilter::default(), false);
        let mut out = Vec::new();
        gate.route(cong(5), &mut |e| out.push(e));
        let open = OpenEvent {
            head: head(5),
            cc: "bbr".into(),
            owner: Default::default(),
            start_ns: 0,
            retrans_at_open: 0,
            summary_only: true,
        };
        gate.route(Event::Open(Box::new(open)), &mut |e| out.push(e));
        assert!(out.is_empty(), "nothing before the first sample");
        let metrics = serde_json::from_str(r#"{"bytes_sent": 1000}"#).unwrap();
        let sample =
            SampleEvent { head: head(5), closing: false, cc: "bbr".into(), acks: 1, retrans_coalesced: 0, metrics };
        gate.route(Event::Sample(Box::new(sample)), &mut |e| out.push(e));
        assert_eq!(kinds(&out), ["open", "cong", "sample"]);
        // A change was shown: the flow is no longer one its summary alone can show.
        assert!(matches!(&out[0], Event::Open(o) if !o.summary_only));
        assert_eq!(gate.held_dropped, 0);
        // Changes of sockets whose OPEN never comes: held for at most ORPHAN_FLOWS flows.
        for id in 100..100 + ORPHAN_FLOWS as u64 + 3 {
            gate.route(cong(id), &mut |_| panic!("not shown"));
        }
        assert_eq!(gate.held_dropped, 3);
        assert_eq!(gate.orphans.map.len(), ORPHAN_FLOWS);
        assert!(gate.orphans.order.len() <= 2 * ORPHAN_FLOWS);
    }

    fn open_of(flow: u64, sock_ino: u32) -> Event {
        let owner = Owner { sock_ino: Some(sock_ino), ..Owner::default() };
        Event::Open(Box::new(OpenEvent {
            head: head(flow),
            cc: "bbr".into(),
            owner,
            start_ns: 1,
            retrans_at_open: 0,
            summary_only: false,
        }))
    }

    fn sample_of(flow: u64) -> Event {
        let metrics = serde_json::from_str(r#"{"bytes_sent": 1000}"#).unwrap();
        Event::Sample(Box::new(SampleEvent {
            head: head(flow),
            closing: false,
            cc: "bbr".into(),
            acks: 1,
            retrans_coalesced: 0,
            metrics,
        }))
    }

    /// A flow whose owner the kernel did not name gets it from /proc before it is shown (and
    /// `--comm` decides on it); one made after the last pass over /proc is shown without, and its
    /// owner follows in a second OPEN at a later sample, once a pass finds it.
    #[test]
    fn owners_the_kernel_did_not_name_are_found_in_proc() {
        use std::os::unix::fs::MetadataExt as _;
        let ino_of = |s: &std::net::UdpSocket| {
            let fd = std::os::fd::AsRawFd::as_raw_fd(s);
            std::fs::metadata(format!("/proc/self/fd/{fd}")).unwrap().ino() as u32
        };
        let me = procfd::comm(std::process::id()).unwrap();
        let mut gate = Gate::new(OwnerFilter { comm: Some(me.to_string()), ..OwnerFilter::default() }, false);
        let mut out = Vec::new();
        let first = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // An inode no process holds: both passes run, and find `first`.
        gate.route(open_of(9, 1), &mut |e| out.push(e));
        gate.route(sample_of(9), &mut |e| out.push(e));
        assert!(out.is_empty(), "unnamed: --comm leaves it out");
        gate.route(open_of(1, ino_of(&first)), &mut |e| out.push(e));
        gate.route(sample_of(1), &mut |e| out.push(e));
        assert_eq!(kinds(&out), ["open", "sample"], "--comm {me} selects it, once named");
        assert!(matches!(&out[0], Event::Open(o) if o.owner.pid == Some(std::process::id())));
        // Just made, right after a pass: not known yet, and no pass is due.
        let mut gate = Gate { filter: OwnerFilter::default(), ..gate };
        let second = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        out.clear();
        gate.route(open_of(2, ino_of(&second)), &mut |e| out.push(e));
        gate.route(sample_of(2), &mut |e| out.push(e));
        assert_eq!(kinds(&out), ["open", "sample"]);
        if matches!(&out[0], Event::Open(o) if o.owner.pid.is_some()) {
            // A full pass fell due meanwhile (250 ms: a stalled test thread): named at once.
            return;
        }
        assert!(gate.unnamed.contains_key(&2));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while gate.unnamed.contains_key(&2) {
            assert!(std::time::Instant::now() < deadline, "not named within 5 s");
            std::thread::sleep(std::time::Duration::from_millis(20));
            out.clear();
            gate.route(sample_of(2), &mut |e| out.push(e));
        }
        assert_eq!(kinds(&out), ["open", "sample"], "the owner, then the sample");
        assert!(matches!(&out[0], Event::Open(o) if o.owner.pid == Some(std::process::id())));
    }
}

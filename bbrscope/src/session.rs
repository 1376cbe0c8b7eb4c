//! A live observation session: the loaded programs, decoding, and cost accounting, shared by
//! every command that watches live flows (`stream`, `top`, `demo`).

use std::collections::{HashMap, HashSet};

use anyhow::{Context as _, Result};

use crate::{
    event::{Decoder, Event, Metrics, OpenEvent},
    kernel::existing::Existing,
    kernel::{
        layout::Layout,
        loader::{Observer, ObserverPath, Options},
    },
    stats::{StatsReport, StatsTracker},
    sys::privileges,
};

/// Filters on who owns a flow, checked in userspace when the flow opens (sock_ops path only:
/// the tracepoint path does not know owners).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerFilter {
    pub comm: Option<String>,
    pub pid: Option<u32>,
    pub netns: Option<u32>,
}

impl OwnerFilter {
    pub fn is_empty(&self) -> bool {
        self == &OwnerFilter::default()
    }

    pub fn passes(&self, o: &crate::event::Owner) -> bool {
        self.comm.as_ref().is_none_or(|c| o.comm.as_ref() == Some(c))
            && self.pid.is_none_or(|p| o.pid == Some(p))
            && self.netns.is_none_or(|n| o.netns == Some(n))
    }
}

/// A flow opened but not shown yet, and what happened to it meanwhile (retransmits, state
/// changes before its first sample): shown, in order, with that sample.
struct Pending {
    open: Box<OpenEvent>,
    held: Vec<Event>,
}

/// Events held per pending flow; beyond this the oldest are dropped (the flow's summary still
/// counts every retransmission).
const HELD_PER_FLOW: usize = 256;

/// Whether a flow sent any data (beyond its SYN and FIN).
fn sent_data(m: &Metrics) -> bool {
    match (m.bytes_sent, m.bytes_acked) {
        (Some(sent), _) => sent > 0,
        (None, Some(acked)) => acked > 2,
        (None, None) => true,
    }
}

pub struct Live {
    /// Holds the kernel's BPF run-time statistics on while bbrscope runs (`--bpf-stats`); the
    /// kernel turns them off again when this closes, whatever way bbrscope exits.
    _bpf_stats: Option<std::os::fd::OwnedFd>,
    observer: Observer,
    layout: Layout,
    records: u64,
    tracker: StatsTracker,
    owner_filter: OwnerFilter,
    /// sock_ops path: the flows opened and passed, so that records of other sockets (filtered
    /// out, or the congestion-state tracepoint's view of untracked sockets) are dropped here.
    open_flows: HashSet<u64>,
    /// sock_ops path: OPEN records held back until the flow's first sample. The kernel samples a
    /// flow only once it sends (and only while its algorithm passes `--cc`), so a socket that
    /// only ever receives, or never runs the asked-for algorithm, is never shown.
    pending: HashMap<u64, Pending>,
    owner_filtered: u64,
    /// sock_ops path: connections open before bbrscope attached, polled through sock_diag.
    existing: Option<Existing>,
    poll: tokio::time::Interval,
}

impl Live {
    /// Checks privileges, loads and attaches the programs. `what` names the command in errors.
    pub fn start(what: &str, opts: &Options) -> Result<Self> {
        privileges::require_tracing(what)?;
        let bpf_stats = match opts.bpf_stats {
            true => Some(
                aya::sys::enable_stats(aya::sys::Stats::RunTime)
                    .context("enabling BPF run-time statistics (needs Linux 5.8+)")?,
            ),
            false => None,
        };
        let observer = Observer::start(opts)?;
        let layout = observer.layout.clone();
        if !opts.owner.is_empty() && observer.path != ObserverPath::Sockops {
            crate::error::usage!(
                "--comm, --pid and --netns need the sock_ops observer, which is not in use ({})",
                observer.degraded.join("; ")
            );
        }
        // After attaching: every connection is then either in this snapshot or seen opening.
        // Owner filters cannot apply to connections whose opening was not seen.
        let existing = match observer.path == ObserverPath::Sockops && opts.owner.is_empty() {
            true => Some(Existing::snapshot(&opts.filter)?),
            false => None,
        };
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
        );
        Ok(Live {
            _bpf_stats: bpf_stats,
            observer,
            layout,
            records: 0,
            tracker,
            owner_filter: opts.owner.clone(),
            open_flows: HashSet::new(),
            pending: HashMap::new(),
            owner_filtered: 0,
            existing,
            poll,
        })
    }

    /// What this kernel lacks, in words.
    pub fn degraded(&self) -> &[String] {
        &self.observer.degraded
    }

    /// Connections open before bbrscope started that are still polled (sock_ops path).
    pub fn existing_flows(&self) -> usize {
        self.existing.as_ref().map_or(0, Existing::len)
    }

    /// Waits for records (or the next poll of connections open before the start), then decodes
    /// each and passes it to `f`.
    pub async fn next_batch(&mut self, mut f: impl FnMut(Event)) -> Result<()> {
        if let Some(existing) = self.existing.as_mut().filter(|e| !e.is_empty()) {
            tokio::select! {
                biased;
                _ = self.poll.tick() => {
                    for ev in existing.poll()? {
                        f(ev);
                    }
                    return Ok(());
                }
                r = Self::drain_ring(&mut self.observer, &self.layout, &mut self.records, &mut self.open_flows,
                    &mut self.pending, &self.owner_filter, &mut self.owner_filtered, &mut f) => return r,
            }
        }
        Self::drain_ring(
            &mut self.observer,
            &self.layout,
            &mut self.records,
            &mut self.open_flows,
            &mut self.pending,
            &self.owner_filter,
            &mut self.owner_filtered,
            &mut f,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn drain_ring(
        observer: &mut Observer,
        layout: &Layout,
        records: &mut u64,
        open_flows: &mut HashSet<u64>,
        pending: &mut HashMap<u64, Pending>,
        filter: &OwnerFilter,
        filtered: &mut u64,
        f: &mut impl FnMut(Event),
    ) -> Result<()> {
        let decoder = Decoder { layout };
        let sockops = observer.path == ObserverPath::Sockops;
        observer
            .drain(|bytes| {
                *records += 1;
                let Some(ev) = decoder.decode(bytes) else { return };
                if !sockops {
                    return f(ev);
                }
                let id = ev.head().flow;
                match ev {
                    Event::Open(o) => {
                        if filter.passes(&o.owner) {
                            pending.insert(id, Pending { open: o, held: Vec::new() });
                        } else {
                            *filtered += 1;
                        }
                    }
                    Event::Sample(s) => {
                        if !open_flows.contains(&id) && !sent_data(&s.metrics) {
                            // Only received so far (the ACK of its FIN made this sample): not a
                            // flow this host sends on, at least not yet.
                            return;
                        }
                        if let Some(Pending { mut open, held }) = pending.remove(&id) {
                            // The algorithm the flow first sent with (an application may set it
                            // after connect()).
                            open.cc.clone_from(&s.cc);
                            open_flows.insert(id);
                            f(Event::Open(open));
                            held.into_iter().for_each(&mut *f);
                        }
                        if open_flows.contains(&id) {
                            f(Event::Sample(s));
                        }
                    }
                    Event::End(e) => {
                        pending.remove(&id);
                        if open_flows.remove(&id) {
                            f(Event::End(e));
                        }
                    }
                    ev if open_flows.contains(&id) => f(ev),
                    // A retransmission or a state change before the flow's first sample: held
                    // until it (the sample says which algorithm the flow runs, and a flow that
                    // never passes `--cc` never has one).
                    ev => {
                        if let Some(p) = pending.get_mut(&id) {
                            if p.held.len() >= HELD_PER_FLOW {
                                p.held.remove(0);
                            }
                            p.held.push(ev);
                        }
                    }
                }
            })
            .await?;
        Ok(())
    }

    /// Which kernel path observes flows.
    pub fn path(&self) -> ObserverPath {
        self.observer.path
    }

    /// Cost and health since the previous call.
    pub fn stats(&mut self, flows_active: usize) -> Result<StatsReport> {
        let counters = self.observer.counters()?;
        let mut r = self.tracker.report(counters, self.records, self.observer.probe_runtime(), flows_active);
        r.flows_filtered_total += self.owner_filtered;
        Ok(r)
    }
}

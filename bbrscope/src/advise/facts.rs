//! What `advise` keeps of each observed flow: a [`Sink`] over the observer's events that turns
//! every flow into one [`FlowFacts`] when it ends (or when the window closes on it).

use std::{io, net::IpAddr};

use crate::observe::{
    event::{Event, Metrics, Owner},
    flow::{Change, Flow, FlowTable, IdMap},
    pipeline::{NoSide, Sink},
    replay::Summary,
};

/// The kernel's lower bound on the retransmission timeout (`TCP_RTO_MIN`, 200 ms): a send after a
/// silence longer than the timeout restarts an idle connection's window.
const RTO_MIN_US: u64 = 200_000;

/// Samples with data in flight a flow needs before its share of send-buffer-bound ones says
/// anything.
const MIN_SENDING_SAMPLES: u32 = 5;

/// A window restarted after idle (`tcp_cwnd_restart`): the window before the silence and the one
/// the next sample found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Restart {
    pub(crate) before: u32,
    pub(crate) after: u32,
}

/// One flow, as the findings need it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct FlowFacts {
    pub(crate) dst: IpAddr,
    /// The flow's network namespace (inode); `None` where the observer could not tell.
    pub(crate) netns: Option<u32>,
    /// The algorithm it started on.
    pub(crate) cc: String,
    /// Seen from its start to its close: its byte count is the whole flow's.
    pub(crate) whole: bool,
    /// Data bytes this host sent and the peer acknowledged (SYN and FIN excluded).
    pub(crate) sent: u64,
    pub(crate) mss: Option<u32>,
    pub(crate) min_rtt_us: Option<u32>,
    /// The smoothed RTT the flow ended with.
    pub(crate) srtt_us: Option<u32>,
    /// The peer's receive window at the first sample (from the handshake, for a flow seen from
    /// its start): what the first flight may fill, whatever the congestion window.
    pub(crate) peer_wnd_first: Option<u32>,
    /// Time with data outstanding (the kernel's busy chrono), µs.
    pub(crate) busy_us: Option<u64>,
    pub(crate) sndbuf_limited_us: Option<u64>,
    pub(crate) rwnd_limited_us: Option<u64>,
    /// Of the samples with data in flight, the share in which the send buffer held the flow
    /// back: at least half full, none of it unsent, the window not full, and the writer waiting
    /// for space (`SOCK_NOSPACE`, where known). `None` for a flow that never had more to send than the buffer holds
    /// (twice its largest size), or with fewer than 5 such samples.
    pub(crate) buffer_bound_share: Option<f64>,
    /// The samples behind that share: with data in flight, and of them bound by the buffer.
    pub(crate) sending_samples: u32,
    pub(crate) bound_samples: u32,
    /// The application set the send (receive) buffer's size itself (SO_SNDBUF, SO_RCVBUF), as
    /// the socket's lock flag said in the last sample that read it: tcp_wmem (tcp_rmem) no
    /// longer sizes it.
    pub(crate) sndbuf_locked: bool,
    pub(crate) rcvbuf_locked: bool,
    /// The largest send buffer (`sk_sndbuf`) a sample saw: the kernel sizes it to about two
    /// congestion windows, up to tcp_wmem's maximum.
    pub(crate) sndbuf_max: Option<u32>,
    /// Of the samples with data in flight (at least 5): the median of the bytes written and not
    /// yet sent, and of the time they wait to be sent at the flow's delivery rate then, ms.
    pub(crate) unsent_median: Option<f64>,
    pub(crate) unsent_wait_ms_median: Option<f64>,
    /// The highest delivery rate of a sample that was not application-limited, bits/s.
    pub(crate) delivery_max_bps: Option<u64>,
    /// The highest pacing rate a sample saw, bits/s.
    pub(crate) pacing_max_bps: Option<u64>,
    /// Silences longer than the retransmission timeout followed by new data: a keep-alive
    /// connection between responses.
    pub(crate) idle_gaps: u32,
    pub(crate) restarts: Vec<Restart>,
    /// The receive side, as the flow's last sample had it: data bytes received, the receive
    /// buffer, the most the application read in one of the receiver's round trips (which
    /// only grows), the receiver's RTT estimate and the largest window it may advertise.
    pub(crate) received: u64,
    pub(crate) rcvbuf: Option<u32>,
    pub(crate) rcv_space: Option<u32>,
    pub(crate) rcv_rtt_us: Option<u32>,
    pub(crate) window_clamp: Option<u32>,
}

impl FlowFacts {
    /// Ran BBR (any version) from its start.
    pub(crate) fn is_bbr(&self) -> bool {
        self.cc.starts_with("bbr")
    }
}

/// The previous sample of a flow, for what the next one says about the time between.
#[derive(Clone, Copy, Debug)]
struct Last {
    ts_ns: u64,
    cwnd: u32,
    rto_us: u64,
    data_segs_out: u32,
    retrans: u32,
}

#[derive(Default)]
struct Partial {
    last: Option<Last>,
    /// A silence longer than the timeout ended: the sample before it, and the smallest window
    /// seen since, until new data shows the connection sent again (a restart happens at that
    /// first send: the first sample after the silence may come from the send path, before the
    /// data is counted).
    silence: Option<(Last, u32)>,
    delivery_max_bps: Option<u64>,
    pacing_max_bps: Option<u64>,
    idle_gaps: u32,
    restarts: Vec<Restart>,
    /// Samples with data in flight, those of them bound by the send buffer, its largest size.
    sending: u32,
    bound: u32,
    sndbuf_max: u32,
    peer_wnd_first: Option<u32>,
    /// The buffer lock flags, as the last sample that read them had them.
    sndbuf_locked: Option<bool>,
    rcvbuf_locked: Option<bool>,
    /// Per sample with data in flight: unsent bytes, and the wait they mean where the delivery
    /// rate is known.
    unsent: Vec<f64>,
    unsent_wait_ms: Vec<f64>,
}

/// Collects [`FlowFacts`] from the observer's events.
#[derive(Default)]
pub(crate) struct Collector {
    open: IdMap<Partial>,
    pub(crate) done: Vec<FlowFacts>,
}

impl Collector {
    fn sample(&mut self, id: u64, ts_ns: u64, m: &Metrics) {
        let p = self.open.entry(id).or_default();
        p.peer_wnd_first = p.peer_wnd_first.or(m.snd_wnd.filter(|&w| w > 0));
        p.sndbuf_locked = m.sndbuf_locked.or(p.sndbuf_locked);
        p.rcvbuf_locked = m.rcvbuf_locked.or(p.rcvbuf_locked);
        if m.delivery_app_limited == Some(false)
            && let Some(rate) = m.delivery_rate_bps
        {
            p.delivery_max_bps = Some(p.delivery_max_bps.map_or(rate, |r| r.max(rate)));
        }
        if let Some(rate) = m.pacing_rate_bps {
            p.pacing_max_bps = Some(p.pacing_max_bps.map_or(rate, |r| r.max(rate)));
        }
        // The kernel counts its sndbuf-limited time only when the final push of a write sends
        // something (tcp_cwnd_validate), which a writer whose data left as it was copied never
        // meets: measured, 8 ms of a 6.3 s transfer that a 64 KB buffer made four times slower.
        // So the socket's own state says it at each sample.
        if let (Some(1..), Some(buf), Some(queued), Some(notsent), Some(mss), Some(flight), Some(cwnd)) =
            (m.unacked, m.sndbuf_bytes, m.wmem_queued_bytes, m.notsent_bytes, m.mss, m.in_flight, m.cwnd)
        {
            p.sending += 1;
            p.sndbuf_max = p.sndbuf_max.max(buf);
            p.unsent.push(f64::from(notsent));
            if let Some(rate) = m.delivery_rate_bps.filter(|&r| r > 0) {
                p.unsent_wait_ms.push(f64::from(notsent) * 8.0 / rate as f64 * 1e3);
            }
            // And the writer waits for space (SOCK_NOSPACE, where the sample could read it): a
            // writer that put a chunk in and waits on something else also leaves the buffer
            // full and nothing unsent (measured: 12 KB written every 150 ms into a 32 KB buffer
            // at tcp_wmem's maximum looked bound in every sample, and a 4 MB maximum changed
            // nothing). The kernel grows a buffer only for a writer that waited, so such a
            // buffer is at the maximum only where the maximum is small.
            if notsent < mss && u64::from(queued) * 2 >= u64::from(buf) && flight < cwnd && m.nospace != Some(false) {
                p.bound += 1;
            }
        }
        let (Some(cwnd), Some(segs), Some(retrans)) = (m.cwnd, m.data_segs_out, m.retrans_total) else { return };
        if let Some(last) = p.last
            && ts_ns.saturating_sub(last.ts_ns) / 1000 > last.rto_us
            && retrans == last.retrans
        {
            p.silence = Some((last, cwnd));
        }
        if let Some((before, low)) = p.silence {
            let low = low.min(cwnd);
            if retrans != before.retrans {
                // A loss, not a silence, is what the window went through.
                p.silence = None;
            } else if segs > before.data_segs_out {
                p.idle_gaps += 1;
                if low < before.cwnd {
                    p.restarts.push(Restart { before: before.cwnd, after: low });
                }
                p.silence = None;
            } else {
                p.silence = Some((before, low));
            }
        }
        // RTO = srtt + max(4 rttvar, 200 ms), as tcp_set_rto computes it.
        let rto_us = u64::from(m.srtt_us.unwrap_or(0)) + (4 * u64::from(m.rttvar_us.unwrap_or(0))).max(RTO_MIN_US);
        p.last = Some(Last { ts_ns, cwnd, rto_us, data_segs_out: segs, retrans });
    }

    /// A flow that ended (or is still open when the window closes), as the observer saw it.
    fn finish_flow(&mut self, flow: &Flow) {
        let whole = flow.life.start_ns.is_some() && flow.life.end.is_some();
        self.push(flow, flow.life.owner.as_ref(), whole);
    }

    /// A recorded flow's summary: its end, with the owner and start the summary gives (a
    /// replayed flow has no OPEN record of its own).
    pub(crate) fn summary(&mut self, table: &mut FlowTable, s: &Summary) {
        let id = s.open.head.flow;
        if table.get(id).is_none() {
            table.apply(&Event::Open(Box::new(s.open.clone())));
        }
        // The summary's counters are the flow's final ones; not a sample of its buffer.
        table.apply(&Event::Sample(Box::new(s.close.clone())));
        if let Some(flow) = table.remove(id) {
            self.push(&flow, Some(&s.open.owner), s.start_known);
        }
    }

    fn push(&mut self, flow: &Flow, owner: Option<&Owner>, whole: bool) {
        let mut p = self.open.remove(&flow.id).unwrap_or_default();
        let enough = p.sending >= MIN_SENDING_SAMPLES;
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            (enough && !v.is_empty()).then(|| crate::quantile::type7(v, 0.5))
        };
        let (unsent_median, unsent_wait_ms_median) = (median(&mut p.unsent), median(&mut p.unsent_wait_ms));
        let Some(m) = flow.metrics.as_ref() else { return };
        // The SYN of an active opener and the FIN are counted in bytes_acked.
        let syn_fin = if owner.and_then(|o| o.side) == Some("connect") { 2 } else { 1 };
        let sent = m.bytes_acked.unwrap_or(0).saturating_sub(syn_fin);
        self.done.push(FlowFacts {
            dst: flow.dst.ip().to_canonical(),
            netns: owner.and_then(|o| o.netns),
            cc: flow.life.ccs.first().copied().unwrap_or(flow.cc).to_string(),
            whole,
            sent,
            mss: m.mss,
            min_rtt_us: m.min_rtt_us,
            srtt_us: m.srtt_us,
            peer_wnd_first: p.peer_wnd_first,
            busy_us: m.busy_us,
            sndbuf_limited_us: m.sndbuf_limited_us,
            rwnd_limited_us: m.rwnd_limited_us,
            buffer_bound_share: (enough && sent > 2 * u64::from(p.sndbuf_max))
                .then(|| f64::from(p.bound) / f64::from(p.sending)),
            sndbuf_max: (p.sndbuf_max > 0).then_some(p.sndbuf_max),
            sending_samples: p.sending,
            bound_samples: p.bound,
            sndbuf_locked: p.sndbuf_locked.unwrap_or(false),
            rcvbuf_locked: p.rcvbuf_locked.unwrap_or(false),
            unsent_median,
            unsent_wait_ms_median,
            delivery_max_bps: p.delivery_max_bps,
            pacing_max_bps: p.pacing_max_bps,
            idle_gaps: p.idle_gaps,
            restarts: p.restarts,
            // The peer's SYN and FIN are counted in bytes_received where they came.
            received: m.bytes_received.unwrap_or(0),
            rcvbuf: m.rcvbuf_bytes,
            rcv_space: m.rcv_space_bytes,
            rcv_rtt_us: m.rcv_rtt_us.filter(|&r| r > 0),
            window_clamp: m.window_clamp_bytes,
        });
    }

    /// The window closed: flows still open count with what was seen of them.
    pub(crate) fn finish(&mut self, table: &FlowTable) {
        for flow in table.iter() {
            self.finish_flow(flow);
        }
        self.open.clear();
    }
}

impl Sink for Collector {
    type Side = NoSide;
    fn event(&mut self, ev: &Event, change: Change, table: &FlowTable) -> io::Result<()> {
        let id = ev.head().flow;
        match ev {
            Event::Sample(s) => self.sample(id, s.head.ts_ns, &s.metrics),
            Event::End(_) if change == Change::Ended => {
                if let Some(flow) = table.get(id) {
                    self.finish_flow(flow);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(cwnd: u32, segs: u32, retrans: u32) -> Metrics {
        // Every field absent is every field unknown.
        let mut m: Metrics = serde_json::from_str("{}").unwrap();
        (m.cwnd, m.data_segs_out, m.retrans_total, m.srtt_us, m.rttvar_us) =
            (Some(cwnd), Some(segs), Some(retrans), Some(110_000), Some(3_000));
        m
    }

    /// A keep-alive CUBIC connection as the observer sampled it on a 100 ms path (bbrscope
    /// stream, 300 KB responses 1.5 s apart): the first sample after each silence comes from the
    /// send path with the restarted window and the data not yet counted.
    #[test]
    fn a_restart_is_the_window_after_a_silence_once_data_flows_again() {
        let trace = [
            (0, 10, 10, 0),
            (100, 20, 30, 0),
            (200, 40, 70, 0),
            (300, 80, 150, 0),
            (400, 160, 208, 0),
            (1_940, 10, 208, 0),
            (2_040, 10, 218, 0),
            (2_140, 20, 238, 0),
            (2_240, 160, 416, 0),
            // The client's FIN after its last pause: a silence with no data after it.
            (3_800, 218, 416, 0),
            (3_900, 114, 416, 0),
        ];
        let mut c = Collector::default();
        for (ms, cwnd, segs, retrans) in trace {
            c.sample(7, ms * 1_000_000, &metrics(cwnd, segs, retrans));
        }
        let p = &c.open[&7];
        assert_eq!((p.idle_gaps, p.restarts.as_slice()), (1, &[Restart { before: 160, after: 10 }][..]));
        // A retransmission in the silence: a loss, not an idle restart.
        let mut c = Collector::default();
        for (ms, cwnd, segs, retrans) in [(0, 160, 208, 0), (1_500, 10, 208, 1), (1_600, 10, 218, 1)] {
            c.sample(7, ms * 1_000_000, &metrics(cwnd, segs, retrans));
        }
        assert_eq!((c.open[&7].idle_gaps, c.open[&7].restarts.len()), (0, 0));
    }
}

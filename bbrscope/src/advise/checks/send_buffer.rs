//! Send buffer vs the path: flows that waited for space in a send buffer at tcp_wmem's maximum,
//! or in one their application set itself (SO_SNDBUF), and the peers' receive windows beside them.

use std::collections::BTreeMap;

use super::{median, median_or_nan, most, sorted};
use crate::advise::{
    facts::FlowFacts,
    findings::{Check, Finding, Settings, Status},
};

/// A flow is send-buffer- (receive-window-) limited when that is this share of its busy time.
const LIMITED_SHARE: f64 = 0.2;
/// Busy time below which a flow says nothing about buffers (µs).
const MIN_BUSY_US: u64 = 10_000;

/// The share of a flow's busy time that `part` (µs) is.
fn share(f: &FlowFacts, part: Option<u64>) -> f64 {
    part.unwrap_or(0) as f64 / f.busy_us.unwrap_or(1).max(1) as f64
}

/// The share of its busy time a flow waited for space in its send buffer: the larger of the
/// kernel's sndbuf-limited share and the share of samples bound by the buffer.
fn sndbuf_share(f: &FlowFacts) -> f64 {
    share(f, f.sndbuf_limited_us).max(f.buffer_bound_share.unwrap_or(0.0))
}

/// The flows with data in flight long enough to say something about buffers, by what held them
/// back.
struct Busy<'a> {
    flows: Vec<&'a FlowFacts>,
    /// Waited for space in a buffer the kernel sized, at tcp_wmem's maximum: the setting's doing.
    limited: Vec<&'a FlowFacts>,
    /// Waited for space in a buffer their application set (SO_SNDBUF).
    app_set: Vec<&'a FlowFacts>,
    /// Waited for space in a buffer the kernel had sized below tcp_wmem's maximum.
    below: usize,
    /// Held back by their peer's receive window instead, and their median share of the time.
    rwnd: usize,
    rwnd_median: f64,
}

impl<'a> Busy<'a> {
    fn of(flows: &[&'a FlowFacts], wmem_max: Option<u64>) -> Busy<'a> {
        let busy: Vec<&FlowFacts> =
            flows.iter().copied().filter(|f| f.busy_us.is_some_and(|b| b >= MIN_BUSY_US)).collect();
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
        let held: Vec<&FlowFacts> = busy.iter().copied().filter(|f| sndbuf_share(f) >= LIMITED_SHARE).collect();
        let limited: Vec<&FlowFacts> = held.iter().copied().filter(|f| !f.sndbuf_locked && at_ceiling(f)).collect();
        let app_set: Vec<&FlowFacts> = held.iter().copied().filter(|f| f.sndbuf_locked).collect();
        let below = held.len() - limited.len() - app_set.len();
        let mut rwnd_shares: Vec<f64> =
            busy.iter().map(|f| share(f, f.rwnd_limited_us)).filter(|&s| s >= LIMITED_SHARE).collect();
        let rwnd = rwnd_shares.len();
        let rwnd_median = if rwnd_shares.is_empty() { 0.0 } else { median(&mut rwnd_shares) };
        Busy { flows: busy, limited, app_set, below, rwnd, rwnd_median }
    }

    /// What the finding adds about the flows that are not the setting's doing: those whose buffer
    /// the kernel had sized below the maximum, and those the peer's window held back.
    fn notes(&self) -> String {
        let below = self.below;
        let below_note = if below > 0 {
            format!(
                "; {below} filled a send buffer the kernel had sized below tcp_wmem's maximum (a response that fits \
                 it, or a buffer following the congestion window: not the setting's doing)"
            )
        } else {
            String::new()
        };
        let rwnd = self.rwnd;
        let rwnd_note = if rwnd > 0 {
            format!(
                "; {rwnd} were held back by their peer's receive window instead (median {:.0}% of the time; the \
                 client's setting, not this host's)",
                self.rwnd_median * 100.0
            )
        } else {
            String::new()
        };
        format!("{below_note}{rwnd_note}")
    }
}

/// The largest delivered rate × minimum RTT among `flows` (bytes), and their median minimum RTT
/// (ms; NaN where none is known).
fn path_of(flows: &[&FlowFacts]) -> (f64, f64) {
    let mut bdps: Vec<f64> =
        flows.iter().filter_map(|f| Some(f.delivery_max_bps? as f64 / 8.0 * f64::from(f.min_rtt_us?) / 1e6)).collect();
    let mut rtts: Vec<f64> = flows.iter().filter_map(|f| Some(f64::from(f.min_rtt_us?) / 1e3)).collect();
    (sorted(&mut bdps).last().copied().unwrap_or(0.0), median_or_nan(&mut rtts))
}

/// The busiest flows by their share of time waiting for space, each with that share.
fn worst(flows: &[&FlowFacts]) -> Vec<String> {
    most(flows.iter().copied(), sndbuf_share, |f| format!("{:.0}%", sndbuf_share(f) * 100.0))
}

/// Flows whose sending this host's send buffer held back: the larger of the kernel's
/// sndbuf-limited share of the busy time and the share of samples bound by the buffer.
pub(super) fn send_buffer(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let wmem_max = s.knobs.tcp_wmem.map(|w| w[2]);
    let busy = Busy::of(flows, wmem_max);
    let base = Finding::too_few(Check::SendBuffer, s, busy.flows.len(), busy.limited.len());
    if busy.flows.is_empty() {
        return Finding {
            evidence: "no flow kept data in flight for 10 ms or more (nothing to say about buffers)".into(),
            ..base
        };
    }
    let notes = busy.notes();
    if busy.limited.is_empty() && !busy.app_set.is_empty() {
        return app_set_sndbuf(&busy.app_set, busy.flows.len(), wmem_max, notes, base);
    }
    if busy.limited.is_empty() {
        return clear(&busy, &notes, base);
    }
    let notes = format!("{}{notes}", app_set_sndbuf_note(&busy.app_set));
    at_maximum(&busy, s, &notes, base)
}

/// The finding when no flow waited at tcp_wmem's maximum, with the flow nearest the line.
fn clear(busy: &Busy, notes: &str, base: Finding) -> Finding {
    // The flow nearest the line on the other side: a reader tells a near miss from a clear case.
    let highest_clear = busy.flows.iter().map(|f| sndbuf_share(f)).filter(|&s| s < LIMITED_SHARE).fold(0.0, f64::max);
    Finding {
        status: Status::None,
        numbers: BTreeMap::from([
            ("flows_busy", busy.flows.len() as f64),
            ("full_below_maximum_flows", busy.below as f64),
            ("rwnd_limited_flows", busy.rwnd as f64),
            ("rwnd_limited_share_median", busy.rwnd_median),
            ("sndbuf_limited_share_highest_below_line", highest_clear),
        ]),
        evidence: format!(
            "none of {} flows with data in flight spent {:.0}% of that time limited by a send buffer at \
             tcp_wmem's maximum (the highest share under that line: {:.0}%){notes}",
            busy.flows.len(),
            LIMITED_SHARE * 100.0,
            highest_clear * 100.0
        ),
        ..base
    }
}

/// The finding when flows waited for space in send buffers at tcp_wmem's maximum: how long, the
/// rate the maximum allows at their RTT, and the command that raises it.
fn at_maximum(busy: &Busy, s: &Settings, notes: &str, base: Finding) -> Finding {
    let limited = &busy.limited;
    let wmem_max = s.knobs.tcp_wmem.map(|w| w[2]);
    let mut shares: Vec<f64> = limited.iter().map(|f| sndbuf_share(f)).collect();
    let mut kernel: Vec<f64> = limited.iter().map(|f| share(f, f.sndbuf_limited_us)).collect();
    let kernel_median = median(&mut kernel);
    let share_median = median(&mut shares);
    let share_lowest = shares.first().copied().unwrap_or(0.0);
    let (bdp_max, rtt_median) = path_of(limited);
    let mut numbers = BTreeMap::from([
        ("flows_busy", busy.flows.len() as f64),
        ("full_below_maximum_flows", busy.below as f64),
        ("sndbuf_limited_share_median", share_median),
        ("sndbuf_limited_share_lowest", share_lowest),
        ("app_set_flows", busy.app_set.len() as f64),
        ("kernel_sndbuf_limited_share_median", kernel_median),
        ("bdp_bytes_max", bdp_max),
        ("min_rtt_ms_median", rtt_median),
        ("rwnd_limited_flows", busy.rwnd as f64),
        ("rwnd_limited_share_median", busy.rwnd_median),
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
             {}{cap}{notes}",
            limited.len(),
            busy.flows.len(),
            LIMITED_SHARE * 100.0,
            share_median * 100.0,
            share_lowest * 100.0,
            kernel_median * 100.0,
            worst(limited).join(", "),
            crate::units::fmt_bytes(bdp_max),
        ),
        change: raise_wmem(s),
        ..base
    }
}

/// The command that raises tcp_wmem's maximum (four times, from 4 to 64 MB), if it was read.
fn raise_wmem(s: &Settings) -> Option<String> {
    let wmem = s.knobs.tcp_wmem?;
    let w = wmem[2];
    let to = (w * 4).clamp(4 << 20, 64 << 20).max(w);
    Some(format!(
        "raise tcp_wmem's maximum (now \"{} {} {w}\"): `bbrscope apply --sysctl \
         net.ipv4.tcp_wmem=\"{} {} {to}\"{}`; it does not apply to sockets whose application sets SO_SNDBUF \
         itself",
        wmem[0], wmem[1], wmem[0], wmem[1], s.scope
    ))
}

/// What the flows whose application set SO_SNDBUF show: the buffer the kernel kept (the
/// largest seen; twice what was asked), the samples in which the writer waited for space, of
/// those with data in flight, and the flows' median share.
fn app_sndbuf_evidence(app_set: &[&FlowFacts]) -> (u32, u32, u32, f64) {
    let buf = app_set.iter().filter_map(|f| f.sndbuf_max).max().unwrap_or(0);
    let bound = app_set.iter().map(|f| f.bound_samples).sum();
    let sending = app_set.iter().map(|f| f.sending_samples).sum();
    let mut shares: Vec<f64> = app_set.iter().map(|f| sndbuf_share(f)).collect();
    (buf, bound, sending, median(&mut shares))
}

/// The note on flows whose application set SO_SNDBUF, beside a finding on tcp_wmem.
fn app_set_sndbuf_note(app_set: &[&FlowFacts]) -> String {
    if app_set.is_empty() {
        return String::new();
    }
    let (buf, bound, sending, _) = app_sndbuf_evidence(app_set);
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
fn app_set_sndbuf(app_set: &[&FlowFacts], busy: usize, wmem_max: Option<u64>, notes: String, base: Finding) -> Finding {
    let (buf, bound, sending, share_median) = app_sndbuf_evidence(app_set);
    let (bdp_max, rtt_median) = path_of(app_set);
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
            worst(app_set).join(", "),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::checks::tests::{flow, settings};

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
}

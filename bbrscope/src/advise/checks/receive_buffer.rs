//! Receive buffer vs the path: flows this host received whose window stopped, full, at tcp_rmem's
//! maximum, or at a buffer their application set itself (SO_RCVBUF).

use std::collections::BTreeMap;

use super::{median, median_or_nan, most};
use crate::advise::{
    facts::FlowFacts,
    findings::{Check, Finding, Settings, Status},
};

/// A received flow filled its window when the application read at least this share of the
/// largest window the receiver may advertise in one of its round trips. Where the buffer can
/// still grow, autotuning keeps that window at about twice what is read per round trip
/// (`tcp_rcv_space_adjust`), so an unconstrained flow stays near half of it (measured on the
/// tests' 100 ms path with the kernel's 6 MB maximum: 0.2); a flow whose buffer stopped at
/// tcp_rmem's maximum reads all of it (1.03 with a 64 KB maximum, 1.13 with 256 KB).
const WINDOW_FULL: f64 = 0.8;
/// The kernel's tcp_rmem maximum (since 4.20: 6 MB), the least a raise suggests.
const KERNEL_RMEM_MAX: u64 = 6 << 20;

/// The share of the largest window a flow may advertise that its application read in its
/// busiest round trip.
fn fill(f: &FlowFacts) -> f64 {
    f64::from(f.rcv_space.unwrap_or(0)) / f64::from(f.window_clamp.unwrap_or(1).max(1))
}

/// The flows that received for more than a round trip or two, by whether their window filled and
/// what stopped it.
struct Receiving<'a> {
    flows: Vec<&'a FlowFacts>,
    /// Filled a window at tcp_rmem's maximum, in a buffer the kernel sized: the setting's doing.
    limited: Vec<&'a FlowFacts>,
    /// Filled the window of a buffer their application set (SO_RCVBUF).
    app_set: Vec<&'a FlowFacts>,
    /// Filled a window the kernel had sized below tcp_rmem's maximum.
    below: usize,
}

impl<'a> Receiving<'a> {
    fn of(flows: &[&'a FlowFacts], rmem: Option<[u64; 3]>) -> Receiving<'a> {
        // A flow that received no more than twice what it read in its busiest round trip took a
        // round trip or two: its window never held it back. (Not twice its window: autotuning grows
        // an unhindered flow's window to twice what it reads, so a transfer of a few such windows
        // would be left out as too short.)
        let receiving: Vec<&FlowFacts> = flows
            .iter()
            .copied()
            .filter(|f| {
                f.rcvbuf.is_some()
                    && f.window_clamp.is_some_and(|w| w > 0)
                    && f.rcv_space.is_some_and(|r| r > 0 && f.received > 2 * u64::from(r))
            })
            .collect();
        // The kernel grows a flow's buffer (and with it the window) from what the application reads
        // and stops at tcp_rmem's maximum: only a buffer there is the setting's doing. Below it the
        // buffer was still growing, or the application set SO_RCVBUF itself.
        let at_ceiling = |f: &FlowFacts| match (f.rcvbuf, rmem) {
            (Some(b), Some(r)) => u64::from(b) >= r[2],
            _ => true,
        };
        let full: Vec<&FlowFacts> = receiving.iter().copied().filter(|f| fill(f) >= WINDOW_FULL).collect();
        // A buffer the application set (SO_RCVBUF) stays as set: neither tcp_rmem nor autotuning
        // moves it, so the change is the application's.
        let limited: Vec<&FlowFacts> = full.iter().copied().filter(|f| !f.rcvbuf_locked && at_ceiling(f)).collect();
        let app_set: Vec<&FlowFacts> = full.iter().copied().filter(|f| f.rcvbuf_locked).collect();
        let below = full.len() - limited.len() - app_set.len();
        Receiving { flows: receiving, limited, app_set, below }
    }
}

/// Flows this host received whose window stopped at what `tcp_rmem`'s maximum allows, and was
/// full: the sender could send no faster than that window per round trip.
pub(super) fn receive_buffer(flows: &[&FlowFacts], s: &Settings) -> Finding {
    let rmem = s.knobs.tcp_rmem;
    let receiving = Receiving::of(flows, rmem);
    let base = Finding::too_few(Check::ReceiveBuffer, s, receiving.flows.len(), receiving.limited.len());
    if receiving.flows.is_empty() {
        return Finding {
            evidence: "no flow received more than twice what it read in its busiest round trip (nothing to say \
                       about receive buffers)"
                .into(),
            ..base
        };
    }
    let below = receiving.below;
    let below_note = if below > 0 {
        format!(
            "; {below} filled a window the kernel had sized below tcp_rmem's maximum (a buffer still growing: not \
             the setting's doing)"
        )
    } else {
        String::new()
    };
    let app_set = &receiving.app_set;
    if receiving.limited.is_empty() && !app_set.is_empty() {
        return app_set_rcvbuf(&receiving, &below_note, base);
    }
    if receiving.limited.is_empty() {
        return clear(&receiving, &below_note, base);
    }
    let app_note = if app_set.is_empty() { String::new() } else { format!("; {} {}", app_set.len(), app_did(app_set)) };
    at_maximum(&receiving, s, &format!("{app_note}{below_note}"), base)
}

/// The median share of their largest window the flows' applications read per round trip.
fn fill_median(flows: &[&FlowFacts]) -> f64 {
    let mut fills: Vec<f64> = flows.iter().map(|f| fill(f)).collect();
    median(&mut fills)
}

/// What the flows whose application set SO_RCVBUF did, as a note or as the finding.
fn app_did(app_set: &[&FlowFacts]) -> String {
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
}

/// The finding when the windows that filled are of buffers the application set: the change is in
/// the application, not a command.
fn app_set_rcvbuf(receiving: &Receiving, below_note: &str, base: Finding) -> Finding {
    let app_set = &receiving.app_set;
    Finding {
        status: Status::Found,
        affected: app_set.len(),
        numbers: BTreeMap::from([
            ("flows_receiving", receiving.flows.len() as f64),
            ("app_set_flows", app_set.len() as f64),
            ("window_fill_median", fill_median(&receiving.flows)),
        ]),
        evidence: format!(
            "{} of {} flows that received for more than a round trip or two {}{below_note}",
            app_set.len(),
            receiving.flows.len(),
            app_did(app_set)
        ),
        change: Some(
            "in the application, not a sysctl: set SO_RCVBUF to at least the path's rate × RTT, or not at all \
             (the kernel then grows the buffer as the reader needs, up to tcp_rmem's maximum); raising tcp_rmem \
             will not change these sockets"
                .into(),
        ),
        ..base
    }
}

/// The finding when no window filled at tcp_rmem's maximum, with how much of it was read.
fn clear(receiving: &Receiving, below_note: &str, base: Finding) -> Finding {
    let fill_median = fill_median(&receiving.flows);
    Finding {
        status: Status::None,
        numbers: BTreeMap::from([
            ("flows_receiving", receiving.flows.len() as f64),
            ("full_below_maximum_flows", receiving.below as f64),
            ("window_fill_median", fill_median),
        ]),
        evidence: format!(
            "none of {} flows that received for more than a round trip or two filled a window at tcp_rmem's \
             maximum (the application read a median {:.0}% of the largest window per round trip, the line is \
             {:.0}%){below_note}",
            receiving.flows.len(),
            fill_median * 100.0,
            WINDOW_FULL * 100.0
        ),
        ..base
    }
}

/// The finding when flows filled windows at tcp_rmem's maximum: the window they stopped at, the
/// rate it allows at their round trip, and the command that raises the maximum.
fn at_maximum(receiving: &Receiving, s: &Settings, notes: &str, base: Finding) -> Finding {
    let (limited, rmem) = (&receiving.limited, s.knobs.tcp_rmem);
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
    let lfill_median = fill_median(limited);
    let worst = most(
        limited.iter().copied(),
        |f| f.received as f64,
        |f| format!("{} received", crate::units::fmt_bytes(f.received as f64)),
    );
    let mut numbers = BTreeMap::from([
        ("flows_receiving", receiving.flows.len() as f64),
        ("full_below_maximum_flows", receiving.below as f64),
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
             {}{rate}; the sender could send no faster{notes}",
            limited.len(),
            receiving.flows.len(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::checks::tests::{flow, settings};

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
    fn a_receive_buffer_the_application_set_is_the_applications_finding_not_a_command() {
        // A window full each round trip of a buffer the application set.
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
}

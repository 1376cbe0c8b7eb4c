//! Window restart after idle: keep-alive flows whose window the kernel restarted after a silence
//! (tcp_slow_start_after_idle).

use std::collections::BTreeMap;

use super::{median, median_or_nan};
use crate::advise::{
    facts::FlowFacts,
    findings::{Check, Finding, Settings, Status},
};

/// Window restarts needed before the idle check names them.
const MIN_RESTARTS: usize = 2;

/// Keep-alive flows whose window the kernel restarted after a silence (CUBIC, Reno and the other
/// algorithms without their own `cong_control`; BBR keeps its model across idle).
pub(super) fn idle_restart(flows: &[&FlowFacts], s: &Settings) -> Finding {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::checks::tests::{flow, settings};
    use crate::advise::facts::Restart;

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
}

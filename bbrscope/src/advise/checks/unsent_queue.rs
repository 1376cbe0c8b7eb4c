//! Unsent data queued in the socket: flows that keep much more written than sent, against
//! tcp_notsent_lowat.

use std::collections::BTreeMap;

use super::{median, median_or_nan};
use crate::advise::{
    facts::FlowFacts,
    findings::{Check, Finding, Settings, Status},
};

/// The `tcp_notsent_lowat` the unsent-queue check suggests: at least the BDP of a 20 Mbit/s ×
/// 50 ms path, so a writer that refills as it is woken keeps such a path full (measured on the
/// tests' 150 KB path: the same transfer time), while what is written behind it waits for at
/// most 128 KB.
pub(super) const CANDIDATE_LOWAT: u64 = 128 << 10;
/// A flow's unsent queue is deep when its median is at least this many times the candidate
/// and its bytes wait at least [`MIN_UNSENT_WAIT_MS`] to be sent.
const DEEP_UNSENT: f64 = 2.0;
const MIN_UNSENT_WAIT_MS: f64 = 50.0;

/// Flows that keep much more written than sent: with `tcp_notsent_lowat` off (the kernel's
/// default) a writer may fill the whole send buffer ahead of the network, and what it writes
/// next — a more urgent response on the same HTTP/2 connection, a fresher frame — waits behind
/// it, while the buffer holds the memory.
pub(super) fn unsent_queue(flows: &[&FlowFacts], s: &Settings) -> Finding {
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
        return clear(&sending, deep.len(), &setting, numbers, base);
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

/// The finding when no flow kept a deep unsent queue (`deep` is 0), or the setting is already at
/// or below the candidate: the flows' medians, and `setting` as read.
fn clear(
    sending: &[&&FlowFacts],
    deep: usize,
    setting: &str,
    mut numbers: BTreeMap<&'static str, f64>,
    base: Finding,
) -> Finding {
    let mut unsent: Vec<f64> = sending.iter().filter_map(|f| f.unsent_median).collect();
    let mut wait: Vec<f64> = sending.iter().filter_map(|f| f.unsent_wait_ms_median).collect();
    let u = median(&mut unsent);
    let w = median_or_nan(&mut wait);
    numbers.extend([("unsent_bytes_median", u), ("unsent_wait_ms_median", w)]);
    numbers.retain(|_, v| v.is_finite());
    let why = if deep == 0 {
        format!(
            "none of {} flows with data in flight kept a median of {} or more unsent that waited {MIN_UNSENT_WAIT_MS:.0} \
             ms or more to be sent (the flows' medians: {} unsent{})",
            sending.len(),
            crate::units::fmt_bytes(DEEP_UNSENT * CANDIDATE_LOWAT as f64),
            crate::units::fmt_bytes(u),
            if w.is_finite() { format!(", waiting {w:.0} ms") } else { String::new() },
        )
    } else {
        format!("{deep} flows kept deep unsent queues, but the setting is already at or below {CANDIDATE_LOWAT}")
    };
    Finding { status: Status::None, numbers, evidence: format!("{why}; {setting}"), ..base }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advise::checks::tests::{flow, settings};

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
}

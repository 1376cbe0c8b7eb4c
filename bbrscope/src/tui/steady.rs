//! Verdicts held steady on screen. A flow near a line (loss about 0.1%, an RTT about 1.5x its
//! minimum: flows sharing a bottleneck) read a different verdict every few seconds; a person
//! cannot act on a word that flips. The verdict shown changes kind only once the new kind has
//! held for [`HOLD_NS`]; within its kind it follows the numbers at once. What is a fact rather
//! than a judgment (measuring, stalled, closed) shows at once.

use std::{cell::RefCell, collections::HashMap, mem::Discriminant};

use crate::observe::{
    diagnose::{self, Verdict},
    flow::Flow,
};

/// How long a new kind of verdict must hold before it is shown.
pub(crate) const HOLD_NS: u64 = 2_000_000_000;
/// A flow not drawn for this long is forgotten (it closed, or scrolled away long ago).
const FORGET_NS: u64 = 30_000_000_000;

#[derive(Debug)]
struct Held {
    shown: Verdict,
    /// A different kind seen since, and when it was first seen.
    candidate: Option<(Discriminant<Verdict>, u64)>,
    seen_ns: u64,
}

/// The verdicts on screen, per flow id. Drawn from views that only read the app, so the record
/// of what was shown sits behind a `RefCell` (the dashboard draws on one thread).
#[derive(Debug, Default)]
pub(crate) struct Steady {
    held: RefCell<HashMap<u64, Held>>,
}

impl Steady {
    /// The verdict to show for `flow` at `now_ns`.
    pub(crate) fn verdict(&self, flow: &Flow, now_ns: u64) -> Verdict {
        self.next(flow.id, diagnose::diagnose(flow, now_ns), now_ns)
    }

    fn next(&self, id: u64, fresh: Verdict, now_ns: u64) -> Verdict {
        let mut held = self.held.borrow_mut();
        if held.len() > 4096 {
            held.retain(|_, h| now_ns.saturating_sub(h.seen_ns) < FORGET_NS);
        }
        let kind = std::mem::discriminant(&fresh);
        let h = held.entry(id).or_insert_with(|| Held { shown: fresh.clone(), candidate: None, seen_ns: now_ns });
        // Time going back (a replay restarted) starts over.
        let fact = matches!(fresh, Verdict::Measuring | Verdict::Stalled | Verdict::Closed);
        if fact || now_ns < h.seen_ns || std::mem::discriminant(&h.shown) == kind {
            *h = Held { shown: fresh, candidate: None, seen_ns: now_ns };
            return h.shown.clone();
        }
        h.seen_ns = now_ns;
        match h.candidate {
            Some((k, since)) if k == kind && now_ns - since >= HOLD_NS => {
                h.shown = fresh;
                h.candidate = None;
            }
            Some((k, _)) if k == kind => {}
            _ => h.candidate = Some((kind, now_ns)),
        }
        h.shown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::diagnose::Rtt;

    const S: u64 = 1_000_000_000;

    fn healthy() -> Verdict {
        Verdict::Healthy { loss: 0.0, rtt: Rtt { srtt_us: Some(40_000), min_rtt_us: Some(38_000) } }
    }

    fn elevated() -> Verdict {
        Verdict::RttElevated { rtt: Rtt { srtt_us: Some(60_000), min_rtt_us: Some(38_000) } }
    }

    /// A flow whose fresh verdict alternates every second between two kinds shows one kind
    /// throughout; a change that holds shows after two seconds; facts show at once.
    #[test]
    fn a_verdict_that_flips_is_held_and_one_that_holds_is_shown() {
        let s = Steady::default();
        assert_eq!(s.next(1, healthy(), 0), healthy());
        for t in 1..=20 {
            let fresh = if t % 2 == 0 { healthy() } else { elevated() };
            assert_eq!(s.next(1, fresh, t * S), healthy(), "at {t} s");
        }
        assert_eq!(s.next(1, elevated(), 21 * S), healthy());
        assert_eq!(s.next(1, elevated(), 22 * S), healthy());
        assert_eq!(s.next(1, elevated(), 23 * S), elevated(), "held for 2 s");
        // Within a kind the numbers follow at once.
        let worse = Verdict::RttElevated { rtt: Rtt { srtt_us: Some(70_000), min_rtt_us: Some(38_000) } };
        assert_eq!(s.next(1, worse.clone(), 23 * S + 1), worse);
        assert_eq!(s.next(1, Verdict::Closed, 24 * S), Verdict::Closed, "a fact, at once");
        // Flows are held apart; a replay that goes back in time starts over.
        assert_eq!(s.next(2, elevated(), 0), elevated());
        assert_eq!(s.next(1, healthy(), S), healthy());
    }
}

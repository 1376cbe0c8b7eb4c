//! The status quo: the algorithm the experiment's connections would have run without it. The
//! guardrail protects the clients an arm moved off it ([`super::guardrail`]); an arm that *is*
//! the status quo gives its clients what they would have had anyway, so its losing (to an arm
//! that wins big) is no harm and never stops a run.
//!
//! The kernel picks a new connection's algorithm from its namespace's default, or from the route
//! to the peer where that sets `congctl`. An experiment's scope (a port, a cgroup) can cover
//! connections in any namespace, so the status quo is one algorithm only when every network
//! namespace's default and every route's congctl name the same one; otherwise it is not known
//! and the guardrail watches both arms, as it does for a recording made before it was kept.

use std::collections::BTreeSet;

use crate::sys::{netns, route, sysctl};

/// What every namespace and route gives a new connection, found by reading each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StatusQuo {
    /// The one algorithm, when there is one.
    pub(crate) algorithm: Option<String>,
    /// Every algorithm found (namespace defaults and route congctls), for the report.
    pub(crate) found: BTreeSet<String>,
}

impl StatusQuo {
    /// Reads every network namespace's default and routes (this one's first; a namespace that
    /// cannot be entered or read is skipped: it has no connection the experiment can see either).
    pub(crate) fn discover() -> StatusQuo {
        let mut found = BTreeSet::new();
        let read = || -> anyhow::Result<Vec<String>> {
            let mut algos: Vec<String> = sysctl::read(sysctl::CC)?.into_iter().collect();
            algos.extend(route::with_congctl()?.into_iter().filter_map(|r| r.cc));
            Ok(algos)
        };
        let here = netns::current().ok();
        let others = netns::all().unwrap_or_default();
        for ns in here.iter().chain(&others) {
            if let Ok(algos) = netns::run(ns, read) {
                found.extend(algos);
            }
        }
        StatusQuo::of(found)
    }

    pub(crate) fn of(found: BTreeSet<String>) -> StatusQuo {
        let algorithm = (found.len() == 1).then(|| found.iter().next().cloned()).flatten();
        StatusQuo { algorithm, found }
    }
}

/// Which arms move a connection off `status_quo` (an arm's name as `--arms` gives it: `bbr+iw32`
/// is not `bbr`, its initial window differs). Both, when the status quo is not known.
pub(crate) fn moved(names: &[String; 2], status_quo: Option<&str>) -> [bool; 2] {
    names.each_ref().map(|n| status_quo.is_none_or(|sq| n != sq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_algorithm_everywhere_is_the_status_quo_and_only_the_other_arm_moved() {
        let set = |v: &[&str]| v.iter().map(ToString::to_string).collect::<BTreeSet<_>>();
        let names = ["cubic".to_string(), "bbr".to_string()];
        let sq = StatusQuo::of(set(&["cubic"]));
        assert_eq!(sq.algorithm.as_deref(), Some("cubic"));
        assert_eq!(moved(&names, sq.algorithm.as_deref()), [false, true]);
        // A route or a namespace with another algorithm: not known, both watched.
        let mixed = StatusQuo::of(set(&["cubic", "bbr"]));
        assert_eq!(mixed.algorithm, None);
        assert_eq!(moved(&names, None), [true, true]);
        // An arm that changes only the initial window still moved its clients.
        let iw = ["bbr".to_string(), "bbr+iw32".to_string()];
        assert_eq!(moved(&iw, Some("bbr")), [false, true]);
        // Neither arm is the status quo: both moved.
        assert_eq!(moved(&names, Some("reno")), [true, true]);
    }

    /// On this machine: this namespace's own default is among what is found.
    #[test]
    fn discovery_reads_this_namespace() {
        let own = sysctl::read(sysctl::CC).unwrap().unwrap();
        let sq = StatusQuo::discover();
        assert!(sq.found.contains(&own), "{sq:?}");
    }
}

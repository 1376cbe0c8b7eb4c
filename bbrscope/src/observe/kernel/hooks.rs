//! Which tracepoints to attach on this kernel, decided from BTF before loading (the programs'
//! behaviour depends on it), and what the user loses where one is missing.

use anyhow::Result;
use bbrscope_common::config_flags;

use crate::error::usage;

/// The tracepoints bbrscope attaches to (program name = tracepoint name), and what is lost
/// without each.
const HOOKS: &[(&str, Option<&str>)] = &[
    ("tcp_probe", None),
    ("tcp_retransmit_skb", Some("retransmit events")),
    ("tcp_cong_state_set", Some("exact congestion-state transitions (they are polled on each ACK instead)")),
    ("inet_sock_set_state", Some("flow_close events")),
];

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HookPlan {
    pub(crate) attach: Vec<&'static str>,
    /// `config_flags` the programs need for this kernel's tracepoints.
    pub(crate) flags: u32,
    pub(crate) degraded: Vec<String>,
}

/// `arity(name)` is the tracepoint's argument count, `None` if the kernel lacks it.
pub(crate) fn plan(arity: impl Fn(&str) -> Option<usize>) -> Result<HookPlan> {
    let mut p = HookPlan { attach: Vec::new(), flags: 0, degraded: Vec::new() };
    for &(tp, lost_without) in HOOKS {
        match (arity(tp), lost_without) {
            (Some(args), _) => {
                // (sk, skb, err) since 2025; the err argument marks failed attempts.
                if tp == "tcp_retransmit_skb" && args >= 3 {
                    p.flags |= config_flags::RETRANS_HAS_ERR;
                }
                p.attach.push(tp);
            }
            (None, None) => {
                usage!("this kernel has no {tp} tracepoint (added in Linux 4.16): bbrscope cannot observe flows")
            }
            (None, Some(lost)) => {
                if tp == "tcp_cong_state_set" {
                    p.flags |= config_flags::POLL_CA_STATE;
                }
                p.degraded.push(format!("this kernel has no {tp} tracepoint: no {lost}"));
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_kernel_attaches_everything() {
        let p = plan(|tp| Some(if tp == "tcp_retransmit_skb" { 3 } else { 2 })).unwrap();
        assert_eq!(p.attach.len(), 4);
        assert_eq!(p.flags, config_flags::RETRANS_HAS_ERR);
        assert!(p.degraded.is_empty());
    }

    #[test]
    fn older_kernel_polls_state_and_says_so() {
        // e.g. 5.15: no tcp_cong_state_set (6.2, or a backport), retransmit without err.
        let p = plan(|tp| (tp != "tcp_cong_state_set").then_some(2)).unwrap();
        assert_eq!(p.attach, ["tcp_probe", "tcp_retransmit_skb", "inet_sock_set_state"]);
        assert_eq!(p.flags, config_flags::POLL_CA_STATE);
        assert_eq!(p.degraded.len(), 1);
        assert!(p.degraded[0].contains("tcp_cong_state_set"));
    }

    #[test]
    fn no_tcp_probe_is_an_error_naming_it() {
        let e = plan(|tp| (tp != "tcp_probe").then_some(2)).unwrap_err();
        assert!(e.to_string().contains("tcp_probe"));
        assert!(e.downcast_ref::<crate::error::UsageError>().is_some());
    }
}

//! What `advise`'s checks say, and what they weigh flows against: one [`Finding`] per check,
//! namespace and client group, saying what limits the flows, by how much, and what to change; or
//! that nothing does (also a finding), or that too few flows were seen to say either; and the
//! [`Settings`] of a namespace. The checks themselves are in [`super::checks`], a file each.

use std::{collections::BTreeMap, net::IpAddr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The kernel's initial congestion window (`TCP_INIT_CWND`) where a route sets none.
pub(crate) const KERNEL_IW: u32 = 10;

/// The settings beyond the algorithm that the checks weigh flows against, as one namespace has
/// them (also shown by `status`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Knobs {
    pub(crate) tcp_wmem: Option<[u64; 3]>,
    pub(crate) tcp_rmem: Option<[u64; 3]>,
    pub(crate) tcp_slow_start_after_idle: Option<bool>,
    /// Bytes left unsent below which a writer is woken (the kernel's default, 4294967295, is
    /// "off").
    pub(crate) tcp_notsent_lowat: Option<u64>,
    /// Routes with their own initial window.
    pub(crate) initcwnd_routes: Vec<InitcwndRoute>,
    /// Every unicast route's prefix: the route a client is reached by is the most specific one.
    #[serde(skip)]
    pub(crate) routes: Vec<IpNet>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct InitcwndRoute {
    pub(crate) prefix: IpNet,
    pub(crate) initcwnd: u32,
}

impl Knobs {
    /// The initial window a connection to `ip` starts with: the most specific route's
    /// `initcwnd`, else the kernel's.
    pub(crate) fn initcwnd_for(&self, ip: IpAddr) -> u32 {
        self.initcwnd_routes
            .iter()
            .filter(|r| r.prefix.contains(&ip))
            .max_by_key(|r| r.prefix.prefix_len())
            .map_or(KERNEL_IW, |r| r.initcwnd)
    }

    /// The prefix of the route a connection to `ip` takes (the most specific that holds it).
    pub(crate) fn route_for(&self, ip: IpAddr) -> Option<IpNet> {
        self.routes.iter().filter(|p| p.contains(&ip)).max_by_key(|p| p.prefix_len()).copied()
    }

    /// What differs from `before`, a setting a line: `tcp_wmem 4096 16384 65536 -> 4096 16384
    /// 4194304`. (The route list itself is not compared: only routes' initial windows are a
    /// setting.)
    pub(crate) fn changes_from(&self, before: &Knobs) -> Vec<String> {
        fn show<T: std::fmt::Debug>(v: Option<T>, f: impl Fn(T) -> String) -> String {
            v.map_or_else(|| "unknown".into(), f)
        }
        let triple = |t: [u64; 3]| format!("{} {} {}", t[0], t[1], t[2]);
        let mut out = Vec::new();
        let mut diff = |name: &str, was: String, now: String| {
            if was != now {
                out.push(format!("{name} {was} -> {now}"));
            }
        };
        diff("tcp_wmem", show(before.tcp_wmem, triple), show(self.tcp_wmem, triple));
        diff("tcp_rmem", show(before.tcp_rmem, triple), show(self.tcp_rmem, triple));
        let on = |b: bool| (if b { "1" } else { "0" }).to_string();
        diff(
            "tcp_slow_start_after_idle",
            show(before.tcp_slow_start_after_idle, on),
            show(self.tcp_slow_start_after_idle, on),
        );
        diff(
            "tcp_notsent_lowat",
            show(before.tcp_notsent_lowat, |v| v.to_string()),
            show(self.tcp_notsent_lowat, |v| v.to_string()),
        );
        let routes = |k: &Knobs| {
            let v: Vec<String> =
                k.initcwnd_routes.iter().map(|r| format!("{} initcwnd {}", r.prefix, r.initcwnd)).collect();
            if v.is_empty() { "none".into() } else { v.join(", ") }
        };
        diff("routes with an initial window:", routes(before), routes(self));
        out
    }
}

/// A namespace's settings, named.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Settings {
    /// `ip netns` name, `this namespace`, `pid N (comm)` or `ino:N`.
    pub(crate) netns: String,
    /// Its inode, as the flows' `netns` field gives it (`None`: the observer could not tell).
    pub(crate) netns_ino: Option<u32>,
    #[serde(flatten)]
    pub(crate) knobs: Knobs,
    /// The `bbrscope apply` options that name the namespace (" --netns NAME", or "" for
    /// bbrscope's own), for the commands a change gives.
    #[serde(skip)]
    pub(crate) scope: String,
    /// The namespace was gone when its settings were to be read: its findings give no command,
    /// since one without its `--netns` would change another namespace.
    #[serde(skip)]
    pub(crate) gone: bool,
    /// The device each BBR flow's peer is reached through and the qdisc that sends its packets,
    /// by peer address, as the namespace routes it now.
    #[serde(skip)]
    pub(crate) egress: BTreeMap<IpAddr, Egress>,
}

/// A device and what sends its packets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Egress {
    pub(crate) ifname: String,
    /// `noqueue`, `fq_codel`, `mq (fq)`, ...
    pub(crate) qdisc: String,
    pub(crate) fq: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Check {
    InitialWindow,
    SendBuffer,
    ReceiveBuffer,
    UnsentQueue,
    IdleRestart,
    Pacing,
}

impl Check {
    fn title(self) -> &'static str {
        match self {
            Check::InitialWindow => "initial window vs response sizes",
            Check::SendBuffer => "send buffer vs the path",
            Check::ReceiveBuffer => "receive buffer vs the path",
            Check::UnsentQueue => "unsent data queued in the socket",
            Check::IdleRestart => "window restart after idle",
            Check::Pacing => "pacing of BBR flows",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// The flows are held back, by the numbers given.
    Found,
    /// Enough flows, and this setting does not hold them back.
    None,
    /// Too few flows of the kind the check needs to say either.
    TooFew,
    /// The flows' namespace is not known (a recording that does not name it) and no settings
    /// could be read for them: nothing was weighed.
    NotWeighed,
}

#[derive(Clone, Debug, Serialize)]
pub(crate) struct Finding {
    pub(crate) check: Check,
    pub(crate) status: Status,
    pub(crate) netns: String,
    pub(crate) netns_ino: Option<u32>,
    pub(crate) group: String,
    /// Flows the check examined, and of those the ones held back.
    pub(crate) flows: usize,
    pub(crate) affected: usize,
    /// The numbers behind `evidence`, by name (for scripts).
    pub(crate) numbers: BTreeMap<&'static str, f64>,
    /// What was measured, in a sentence.
    pub(crate) evidence: String,
    /// What to change, where there is something to change.
    pub(crate) change: Option<String>,
    /// Why a finding shows no change where it would otherwise give one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) withheld: Option<String>,
}

impl Finding {
    pub(crate) fn title(&self) -> &'static str {
        self.check.title()
    }

    /// Drops the change, if there is one, saying why.
    pub(crate) fn withhold_change(&mut self, why: &str) {
        if self.change.take().is_some() {
            self.withheld = Some(why.to_string());
        }
    }

    /// The finding of `check` over all flows of namespace `s`, before the check says more: too
    /// few flows, nothing measured.
    pub(super) fn too_few(check: Check, s: &Settings, flows: usize, affected: usize) -> Finding {
        Finding {
            check,
            status: Status::TooFew,
            netns: s.netns.clone(),
            netns_ino: s.netns_ino,
            group: "all flows".into(),
            flows,
            affected,
            numbers: BTreeMap::new(),
            evidence: String::new(),
            change: None,
            withheld: None,
        }
    }
}

/// Why a finding of a namespace that is gone gives no command.
pub(crate) const GONE: &str =
    "its namespace is gone, and the command without the namespace's --netns would change another";

#[cfg(test)]
mod tests {
    use super::*;

    /// `status` names each setting that changed since an advice, and nothing else: the route
    /// list is not a setting, an unreadable value is "unknown".
    #[test]
    fn changed_settings_are_named_one_a_line() {
        let before = Knobs {
            tcp_wmem: Some([4096, 16384, 65536]),
            tcp_rmem: Some([4096, 131072, 6291456]),
            tcp_slow_start_after_idle: Some(true),
            tcp_notsent_lowat: Some(4294967295),
            initcwnd_routes: vec![],
            routes: vec!["10.0.0.0/8".parse().unwrap()],
        };
        let same = Knobs { routes: vec![], ..before.clone() };
        assert_eq!(same.changes_from(&before), Vec::<String>::new());
        let now = Knobs {
            tcp_wmem: Some([4096, 16384, 4194304]),
            tcp_slow_start_after_idle: None,
            initcwnd_routes: vec![InitcwndRoute { prefix: "198.18.0.0/15".parse().unwrap(), initcwnd: 32 }],
            ..before.clone()
        };
        assert_eq!(
            now.changes_from(&before),
            [
                "tcp_wmem 4096 16384 65536 -> 4096 16384 4194304",
                "tcp_slow_start_after_idle 1 -> unknown",
                "routes with an initial window: none -> 198.18.0.0/15 initcwnd 32",
            ]
        );
    }
}

//! The client groups an experiment is judged for (all flows, RTT bands, destination prefixes,
//! the user's prefix lists) and the response-size buckets its flows fall in. Apart from the
//! statistics ([`super::analysis`]) because `--prefix-list` is read and checked before anything
//! runs, and the decision ([`super::decide`]) strata by the same buckets.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
};

use ipnet::IpNet;
use serde::Serialize;

use super::{Observation, analysis::Options};

const KIB: u64 = 1024;

/// Response-size bucket of a flow (by the bytes it delivered). Boundaries in KiB/MiB: a response
/// of exactly 16 KiB is in `16–256 KB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) enum Bucket {
    #[serde(rename = "<16K")]
    Under16K,
    #[serde(rename = "16K-256K")]
    To256K,
    #[serde(rename = "256K-4M")]
    To4M,
    #[serde(rename = ">4M")]
    Over4M,
}

impl Bucket {
    pub(crate) const ALL: [Bucket; 4] = [Bucket::Under16K, Bucket::To256K, Bucket::To4M, Bucket::Over4M];

    pub(crate) fn of(bytes: u64) -> Bucket {
        match bytes {
            b if b < 16 * KIB => Bucket::Under16K,
            b if b < 256 * KIB => Bucket::To256K,
            b if b < 4096 * KIB => Bucket::To4M,
            _ => Bucket::Over4M,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Bucket::Under16K => "<16 KB",
            Bucket::To256K => "16–256 KB",
            Bucket::To4M => "256 KB–4 MB",
            Bucket::Over4M => ">4 MB",
        }
    }

    pub(super) fn key(self) -> &'static str {
        match self {
            Bucket::Under16K => "lt16k",
            Bucket::To256K => "16k_256k",
            Bucket::To4M => "256k_4m",
            Bucket::Over4M => "gt4m",
        }
    }
}

/// A user-given group of client prefixes (e.g. a country's ranges), its prefixes indexed by
/// length too, so a flow's group is found with one lookup per length the list uses, not one
/// test per prefix.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PrefixList {
    pub(crate) label: String,
    pub(crate) nets: Vec<IpNet>,
    #[serde(skip)]
    by_len: BTreeMap<(bool, u8), HashSet<IpNet>>,
}

/// What a prefix-list file may hold: a file (or a device such as /dev/zero) past these is
/// refused before it is read whole or indexed. Every group splits the experiment's error rate
/// and becomes a verdict and possibly a command, one route per prefix: a list past these is not
/// something to decide per group.
pub(crate) const PREFIX_LIST_MAX_BYTES: u64 = 4 << 20;

/// A fingerprint of `lists` (their labels and prefixes, in order) for the experiment's info
/// series: hosts whose groups differ would pool clients of different groups under one label, so
/// a fleet refuses to pool them. 16 hex digits; empty without lists.
pub(crate) fn fingerprint(lists: &[PrefixList]) -> String {
    if lists.is_empty() {
        return String::new();
    }
    let text: String = lists
        .iter()
        .map(|l| format!("{} {}\n", l.label, l.nets.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")))
        .collect();
    format!("{:016x}", bbrscope_common::fnv1a64(text.as_bytes()))
}
pub(crate) const PREFIX_LIST_MAX_GROUPS: usize = 100;
/// The kernel holds every one of them when the guardrail sends their groups back.
pub(crate) const PREFIX_LIST_MAX_PREFIXES: usize = bbrscope_common::hold::MAX_PREFIXES as usize;
// The guardrail keeps a group's membership as a bit of a u128.
const _: () = assert!(PREFIX_LIST_MAX_GROUPS <= 128);
/// A label is printed in reports and terminals: short, and printable characters only.
const LABEL_MAX_CHARS: usize = 64;

impl PrefixList {
    /// A group known by its label alone (a fleet's, from the series its hosts serve).
    pub(crate) fn named(label: String) -> PrefixList {
        PrefixList { label, nets: Vec::new(), by_len: BTreeMap::new() }
    }

    /// Reads a prefix-list file: one `LABEL CIDR [CIDR...]` per line (CIDRs separated by spaces or
    /// commas); lines with the same label add to it; `#` starts a comment; a line of CIDRs only is
    /// a group of its own named by its first CIDR. Errors name the line.
    pub(crate) fn parse(text: &str) -> Result<Vec<PrefixList>, String> {
        let mut out: Vec<PrefixList> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut prefixes = 0;
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut tokens = line.split(|c: char| c.is_whitespace() || c == ',').filter(|t| !t.is_empty()).peekable();
            let first = *tokens.peek().expect("non-empty line");
            if parse_net(first).is_none() {
                tokens.next();
                if first.chars().count() > LABEL_MAX_CHARS || first.chars().any(char::is_control) {
                    return Err(format!("line {}: a label is at most {LABEL_MAX_CHARS} printable characters", i + 1));
                }
            }
            let mut nets = Vec::new();
            for t in tokens {
                nets.push(
                    parse_net(t)
                        .ok_or_else(|| format!("line {}: '{}' is not a CIDR prefix", i + 1, t.escape_debug()))?,
                );
            }
            if nets.is_empty() {
                return Err(format!("line {}: '{first}' has no prefixes (LABEL CIDR [CIDR...])", i + 1));
            }
            prefixes += nets.len();
            if prefixes > PREFIX_LIST_MAX_PREFIXES {
                return Err(format!("line {}: more than {PREFIX_LIST_MAX_PREFIXES} prefixes in all", i + 1));
            }
            let at = match index.get(first) {
                Some(&at) => at,
                None if out.len() == PREFIX_LIST_MAX_GROUPS => {
                    return Err(format!("line {}: more than {PREFIX_LIST_MAX_GROUPS} groups", i + 1));
                }
                None => {
                    index.insert(first.to_string(), out.len());
                    out.push(PrefixList { label: first.to_string(), nets: Vec::new(), by_len: BTreeMap::new() });
                    out.len() - 1
                }
            };
            for n in nets {
                out[at].by_len.entry((n.addr().is_ipv4(), n.prefix_len())).or_default().insert(n);
                out[at].nets.push(n);
            }
        }
        Ok(out)
    }

    /// `lists` as the lines [`PrefixList::parse`] reads back.
    pub(crate) fn to_text(lists: &[PrefixList]) -> String {
        let line = |l: &PrefixList| {
            let nets: Vec<String> = l.nets.iter().map(ToString::to_string).collect();
            format!("{} {}\n", l.label, nets.join(" "))
        };
        lists.iter().map(line).collect()
    }

    /// Whether `ip` lies in one of the list's prefixes.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.by_len.iter().any(|(&(v4, len), nets)| {
            v4 == ip.is_ipv4() && IpNet::new(ip, len).is_ok_and(|n| nets.contains(&n.trunc()))
        })
    }
}

/// A CIDR prefix, or a bare address as a host prefix; host bits are cleared.
fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>().ok().or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from)).map(|n| n.trunc())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// Every flow.
    All,
    /// A band of minimum RTT.
    Rtt,
    /// A destination prefix (/24, /48 by default).
    Prefix,
    /// A user-given prefix list.
    List,
    /// A fleet's hosts that share a value of a Prometheus label (`--by-host`).
    Hosts,
}

/// A set of flows to compare the arms on.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) kind: GroupKind,
    pub(crate) label: String,
    /// The prefixes that make the group (prefix and list groups): what `apply --route` takes.
    pub(crate) nets: Vec<IpNet>,
    /// Indices into the observations.
    pub(crate) members: Vec<usize>,
}

/// The groups of `obs`: all flows, then the RTT bands, the destination prefixes (most flows
/// first) and the user's lists. Empty RTT bands and prefixes are left out; lists are kept even
/// empty (the user asked about them).
pub(crate) fn groups(obs: &[Observation], keep: &[bool], opts: &Options) -> Vec<Group> {
    let kept = || obs.iter().enumerate().filter(|&(i, _)| keep.get(i).copied().unwrap_or(true));
    let mut out = vec![Group {
        kind: GroupKind::All,
        label: "all flows".into(),
        nets: vec![],
        members: kept().map(|(i, _)| i).collect(),
    }];
    if opts.by_rtt {
        let edges = &opts.rtt_bands_ms;
        let mut bands: Vec<Vec<usize>> = vec![Vec::new(); edges.len() + 1];
        for (i, o) in kept() {
            if let Some(band) = crate::units::band_of(o.min_rtt_us, edges).checked_sub(1) {
                bands[band].push(i);
            }
        }
        for (b, members) in bands.into_iter().enumerate() {
            if members.is_empty() {
                continue;
            }
            let label = crate::units::band_label(b + 1, edges);
            out.push(Group { kind: GroupKind::Rtt, label, nets: vec![], members });
        }
    }
    if opts.by_prefix {
        let mut by_net: BTreeMap<IpNet, Vec<usize>> = BTreeMap::new();
        for (i, o) in kept() {
            let ip = o.peer.to_canonical();
            let len = if ip.is_ipv4() { opts.v4_prefix.min(32) } else { opts.v6_prefix.min(128) };
            let net = IpNet::new(ip, len).expect("length clamped").trunc();
            by_net.entry(net).or_default().push(i);
        }
        let mut nets: Vec<_> = by_net.into_iter().collect();
        nets.sort_by_key(|(net, m)| (std::cmp::Reverse(m.len()), *net));
        for (net, members) in nets {
            out.push(Group { kind: GroupKind::Prefix, label: net.to_string(), nets: vec![net], members });
        }
    }
    for list in &opts.prefix_lists {
        let members = kept().filter(|(_, o)| list.contains(o.peer.to_canonical())).map(|(i, _)| i).collect();
        out.push(Group { kind: GroupKind::List, label: list.label.clone(), nets: list.nets.clone(), members });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::analysis::tests::lossy_and_clean;

    #[test]
    fn bucket_boundaries() {
        assert_eq!(Bucket::of(0), Bucket::Under16K);
        assert_eq!(Bucket::of(16 * 1024 - 1), Bucket::Under16K);
        assert_eq!(Bucket::of(16 * 1024), Bucket::To256K);
        assert_eq!(Bucket::of(256 * 1024 - 1), Bucket::To256K);
        assert_eq!(Bucket::of(256 * 1024), Bucket::To4M);
        assert_eq!(Bucket::of(4 * 1024 * 1024 - 1), Bucket::To4M);
        assert_eq!(Bucket::of(4 * 1024 * 1024), Bucket::Over4M);
        assert_eq!(serde_json::to_value(Bucket::To4M).unwrap(), "256K-4M");
    }

    #[test]
    fn prefix_lists_and_prefix_lengths() {
        let lists = PrefixList::parse(
            "# clients\nCN 203.0.113.0/25, 198.51.100.0/24\nCN 2001:db8::/32\n10.1.2.3\nnear 10.0.0.0/8 # lab\n",
        )
        .unwrap();
        assert_eq!(lists.len(), 3);
        assert_eq!(lists[0].nets.len(), 3);
        assert_eq!(lists[1].label, "10.1.2.3");
        assert_eq!(lists[1].nets[0].to_string(), "10.1.2.3/32");
        assert!(PrefixList::parse("CN 203.0.113.0/33").unwrap_err().contains("line 1"));
        assert!(PrefixList::parse("CN\n").is_err());

        let obs = lossy_and_clean(3);
        let opts = Options { v4_prefix: 16, prefix_lists: lists, ..Options::default() };
        let gs = groups(&obs, &[], &opts);
        let labels: Vec<&str> = gs.iter().map(|g| g.label.as_str()).collect();
        assert!(labels.contains(&"203.0.0.0/16") && labels.contains(&"10.0.0.0/16"), "{labels:?}");
        let cn = gs.iter().find(|g| g.label == "CN").unwrap();
        assert!(!cn.members.is_empty() && cn.members.len() < 1200);
        assert!(cn.members.iter().all(|&i| obs[i].peer.to_string().starts_with("203.0.113.")));
        assert_eq!(gs.iter().find(|g| g.label == "near").unwrap().members.len(), 1200);
    }

    /// Bounded and printable: more groups or prefixes than a decision per group can carry are
    /// refused by line, quickly (100,000 one-label lines took 92 s when each label was looked
    /// up in a list); a label with a control character (a terminal escape) is refused.
    #[test]
    fn prefix_lists_are_bounded_and_their_labels_printable() {
        let many: String = (0..100_000).map(|i| format!("g{i} 10.{}.{}.0/24\n", i / 256 % 256, i % 256)).collect();
        let t = std::time::Instant::now();
        let e = PrefixList::parse(&many).unwrap_err();
        assert!(e.contains("line 101: more than 100 groups"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "{:?}", t.elapsed());
        let wide: String = (0..10_001).map(|i| format!("one 10.{}.{}.0/24\n", i / 256 % 256, i % 256)).collect();
        assert!(PrefixList::parse(&wide).unwrap_err().contains("line 10001: more than 10000 prefixes"));
        for bad in ["\x1b]0;owned\x07 10.0.0.0/8", &format!("{} 10.0.0.0/8", "x".repeat(65))] {
            assert!(PrefixList::parse(bad).unwrap_err().contains("printable characters"), "{bad:?}");
        }
        let e = PrefixList::parse("ok 10.0.0.0/8 \x1b[2J").unwrap_err();
        assert!(e.contains("\\u{1b}") && !e.contains('\x1b'), "escaped: {e}");
        // Membership by the index, IPv4 and IPv6, nested and host prefixes.
        let l = &PrefixList::parse("a 10.0.0.0/8 10.1.2.3 2001:db8::/32 192.0.2.128/25").unwrap()[0];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(l.contains(ip("10.200.0.1")) && l.contains(ip("10.1.2.3")) && l.contains(ip("2001:db8::9")));
        assert!(l.contains(ip("192.0.2.200")) && !l.contains(ip("192.0.2.1")) && !l.contains(ip("11.0.0.1")));
        assert!(!l.contains(ip("2001:db9::1")));
    }
}

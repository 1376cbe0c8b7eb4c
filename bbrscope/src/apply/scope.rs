//! Where a change applies: the system (bbrscope's own network namespace, normally the
//! initial one), another network namespace, a cgroup, or a route. Scopes carry identities
//! (namespace and cgroup inodes) so the recorded state always refers to the same object.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::machine::Machine;
use crate::{error::usage, sys::netns::Netns};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Scope {
    System { netns: Netns },
    Netns { netns: Netns },
    Cgroup { path: PathBuf, ino: u64 },
    Route { netns: Netns, prefix: IpNet },
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::System { .. } => f.write_str("system"),
            Scope::Netns { netns } => write!(f, "netns {netns}"),
            Scope::Cgroup { path, .. } => write!(f, "cgroup {}", path.display()),
            Scope::Route { netns, prefix } if netns.label == "this namespace" => write!(f, "route {prefix}"),
            Scope::Route { netns, prefix } => write!(f, "route {prefix} in netns {netns}"),
        }
    }
}

impl Scope {
    /// Same object (by identity, not by name).
    pub(crate) fn same(&self, other: &Scope) -> bool {
        match (self, other) {
            (Scope::System { netns: a }, Scope::System { netns: b })
            | (Scope::Netns { netns: a }, Scope::Netns { netns: b }) => a.ino == b.ino,
            (Scope::Cgroup { ino: a, .. }, Scope::Cgroup { ino: b, .. }) => a == b,
            (Scope::Route { netns: a, prefix: p }, Scope::Route { netns: b, prefix: q }) => a.ino == b.ino && p == q,
            _ => false,
        }
    }

    /// The network namespace the scope's sysctls, routes and sockets live in (none for a
    /// cgroup, which spans namespaces).
    pub(crate) fn netns(&self) -> Option<&Netns> {
        match self {
            Scope::System { netns } | Scope::Netns { netns } | Scope::Route { netns, .. } => Some(netns),
            Scope::Cgroup { .. } => None,
        }
    }
}

/// The scope options as given on the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Spec<'a> {
    pub(crate) netns: Option<&'a str>,
    pub(crate) cgroup: Option<&'a Path>,
    pub(crate) route: Option<&'a str>,
}

impl Spec<'_> {
    /// No scope option: the system, i.e. bbrscope's own network namespace.
    pub(crate) fn is_system(&self) -> bool {
        self.netns.is_none() && self.cgroup.is_none() && self.route.is_none()
    }

    /// A cgroup is a scope on its own (`apply` and `revert` both refuse it with others).
    pub(crate) fn cgroup_alone(&self) -> Result<()> {
        if self.cgroup.is_some() && (self.netns.is_some() || self.route.is_some()) {
            usage!(
                "--cgroup cannot be combined with --netns or --route: a cgroup's sockets get the algorithm in every namespace"
            );
        }
        Ok(())
    }
}

/// Resolves and validates the options into scopes (several for `--netns all`) on `machine`.
/// Every bad input is a usage error, found before anything is read or changed.
pub(crate) fn resolve(spec: &Spec, machine: &dyn Machine) -> Result<Vec<Scope>> {
    spec.cgroup_alone()?;
    if let Some(path) = spec.cgroup {
        let (path, ino) = machine.cgroup(path)?;
        return Ok(vec![Scope::Cgroup { path, ino }]);
    }
    let prefixes = spec.route.map(parse_prefixes).transpose()?;
    let namespaces = match spec.netns {
        None => None,
        Some("all") => Some(machine.other_netns()?),
        Some(name) => Some(vec![machine.named_netns(name)?]),
    };
    Ok(match (namespaces, prefixes) {
        (None, None) => vec![Scope::System { netns: machine.own_netns()? }],
        (None, Some(prefixes)) => {
            let netns = machine.own_netns()?;
            prefixes.into_iter().map(|prefix| Scope::Route { netns: netns.clone(), prefix }).collect()
        }
        (Some(list), None) => list.into_iter().map(|netns| Scope::Netns { netns }).collect(),
        (Some(list), Some(prefixes)) => list
            .into_iter()
            .flat_map(|netns| prefixes.iter().map(move |&prefix| Scope::Route { netns: netns.clone(), prefix }))
            .collect(),
    })
}

/// One prefix or several separated by commas (e.g. the prefixes an experiment found to gain):
/// each is its own scope, checked, changed, verified and recorded on its own.
pub(crate) fn parse_prefixes(s: &str) -> Result<Vec<IpNet>> {
    let prefixes: Vec<IpNet> =
        s.split(',').map(str::trim).filter(|p| !p.is_empty()).map(parse_prefix).collect::<Result<_>>()?;
    if prefixes.is_empty() {
        usage!("--route needs a prefix such as 203.0.113.0/24 (several separated by commas)");
    }
    Ok(prefixes)
}

/// A route prefix in CIDR form, with no host bits set (as `ip route` demands).
pub(crate) fn parse_prefix(s: &str) -> Result<IpNet> {
    let Ok(net) = s.parse::<IpNet>() else {
        usage!("'{s}' is not a route prefix: use CIDR notation, e.g. 203.0.113.0/24 or 2001:db8::/32");
    };
    if net.trunc() != net {
        usage!("'{s}' has host bits set: did you mean {}?", net.trunc());
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apply::machine::Fake, error::UsageError};

    #[test]
    fn a_route_list_is_one_scope_per_prefix() {
        let p = parse_prefixes("203.0.113.0/24, 2001:db8::/32,").unwrap();
        assert_eq!(
            p.iter().map(std::string::ToString::to_string).collect::<Vec<_>>(),
            ["203.0.113.0/24", "2001:db8::/32"]
        );
        assert!(parse_prefixes("203.0.113.0/24,203.0.113.7/24").is_err());
        assert!(parse_prefixes(",").is_err());
    }

    #[test]
    fn prefixes_must_be_clean_cidr() {
        assert_eq!(parse_prefix("203.0.113.0/24").unwrap().to_string(), "203.0.113.0/24");
        assert_eq!(parse_prefix("2001:db8::/32").unwrap().to_string(), "2001:db8::/32");
        for bad in ["203.0.113.0", "203.0.113.7/24", "300.1.1.0/24", "10.0.0.0/33", "bbr"] {
            let e = parse_prefix(bad).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{bad}: {e}");
        }
        assert!(parse_prefix("203.0.113.7/24").unwrap_err().to_string().contains("203.0.113.0/24"));
    }

    /// bbrscope's own namespace (inode 1) and two others, `red` (2) and `blue` (3); one cgroup.
    fn machine() -> Fake {
        let ns = |label: &str, ino| Netns { label: label.into(), path: format!("/run/netns/{label}").into(), ino };
        Fake {
            namespaces: vec![ns("this namespace", 1), ns("red", 2), ns("blue", 3)],
            cgroups: vec![("/sys/fs/cgroup/web".into(), Vec::new(), true, Vec::new())],
            ..Fake::default()
        }
    }

    /// The scopes `spec` resolves to, in words with their namespaces' inodes.
    fn scopes(spec: &Spec) -> Vec<String> {
        let said = |s: &Scope| format!("{s} @{}", s.netns().map_or(0, |n| n.ino));
        resolve(spec, &machine()).unwrap().iter().map(said).collect()
    }

    #[test]
    fn options_resolve_to_one_scope_per_namespace_and_prefix() {
        assert_eq!(scopes(&Spec::default()), ["system @1"]);
        assert_eq!(scopes(&Spec { netns: Some("blue"), ..Spec::default() }), ["netns blue @3"]);
        assert_eq!(scopes(&Spec { netns: Some("all"), ..Spec::default() }), ["netns red @2", "netns blue @3"]);
        let route = Some("203.0.113.0/24,2001:db8::/32");
        assert_eq!(scopes(&Spec { route, ..Spec::default() }), ["route 203.0.113.0/24 @1", "route 2001:db8::/32 @1"]);
        assert_eq!(
            scopes(&Spec { netns: Some("all"), route, ..Spec::default() }),
            [
                "route 203.0.113.0/24 in netns red @2",
                "route 2001:db8::/32 in netns red @2",
                "route 203.0.113.0/24 in netns blue @3",
                "route 2001:db8::/32 in netns blue @3",
            ]
        );
        let cgroup = Spec { cgroup: Some(Path::new("/sys/fs/cgroup/web")), ..Spec::default() };
        assert_eq!(
            resolve(&cgroup, &machine()).unwrap(),
            [Scope::Cgroup { path: "/sys/fs/cgroup/web".into(), ino: 1000 }]
        );
    }

    /// A cgroup with another scope option, or a bad prefix, is refused before the machine is
    /// asked anything (an unknown namespace would be its usage error).
    #[test]
    fn bad_options_are_usage_errors_before_the_machine_is_read() {
        let nothing = Fake::default();
        for spec in [
            Spec { cgroup: Some(Path::new("/sys/fs/cgroup")), netns: Some("x"), route: None },
            Spec { cgroup: Some(Path::new("/sys/fs/cgroup")), netns: None, route: Some("203.0.113.0/24") },
            Spec { route: Some("203.0.113.7/24"), netns: Some("red"), cgroup: None },
        ] {
            let e = resolve(&spec, &nothing).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some(), "{spec:?}: {e}");
        }
    }
}

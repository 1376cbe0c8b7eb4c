//! What the user asked to see: the kernel's filters (`--port`, `--addr`, `--cgroup`, `--cc`),
//! validated against the running system before anything is loaded, and the owners' (`--comm`,
//! `--pid`, `--netns`), checked in userspace.

use std::{net::IpAddr, path::Path};

use anyhow::Result;
use ipnet::IpNet;

use crate::{
    error::usage,
    observe::event::Owner,
    sys::{cc, cgroup},
};

#[derive(Clone, Debug, Default)]
pub struct FilterSpec {
    pub port: Option<u16>,
    pub net: Option<Net>,
    pub cgroup: Option<cgroup::Cgroup>,
    pub cc: Option<String>,
}

impl FilterSpec {
    pub fn new(port: Option<u16>, net: Option<Net>, cgroup: Option<&Path>, cc: Option<&str>) -> Result<Self> {
        let cgroup = cgroup.map(cgroup::resolve).transpose()?;
        let cc = cc.map(validate_cc).transpose()?;
        Ok(FilterSpec { port, net, cgroup, cc })
    }

    /// The same filters in userspace, for connections the kernel programs do not see (those
    /// open before bbrscope started). Their cgroup is not known: `--cgroup` excludes them.
    pub fn matches(&self, src: std::net::SocketAddr, dst: std::net::SocketAddr, cc: Option<&str>) -> bool {
        self.may_match(src, dst) && self.cc.as_deref().is_none_or(|want| cc == Some(want))
    }

    /// What never changes in a connection's life (its ends): one this rejects never passes,
    /// whatever algorithm it later runs.
    pub fn may_match(&self, src: std::net::SocketAddr, dst: std::net::SocketAddr) -> bool {
        self.port.is_none_or(|p| src.port() == p || dst.port() == p)
            && self.net.as_ref().is_none_or(|n| n.contains(src.ip()) || n.contains(dst.ip()))
            && self.cgroup.is_none()
    }
}

/// Filters on who owns a flow, checked in userspace when the flow opens (sock_ops path only:
/// the tracepoint path does not know owners).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerFilter {
    pub comm: Option<String>,
    pub pid: Option<u32>,
    pub netns: Option<u32>,
}

impl OwnerFilter {
    pub fn is_empty(&self) -> bool {
        self == &OwnerFilter::default()
    }

    pub fn passes(&self, o: &Owner) -> bool {
        self.comm.as_ref().is_none_or(|c| o.comm.as_deref() == Some(c.as_str()))
            && self.pid.is_none_or(|p| o.pid == Some(p))
            && self.netns.is_none_or(|n| o.netns == Some(n))
    }
}

fn validate_cc(name: &str) -> Result<String> {
    let available = cc::available()?;
    if !available.iter().any(|a| a == name) {
        usage!("--cc {name}: not an available algorithm (available: {})", available.join(", "));
    }
    Ok(name.to_string())
}

/// An address range matched against either end of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net(pub IpNet);

impl std::str::FromStr for Net {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(net) = s.parse::<IpNet>() {
            return Ok(Net(net.trunc()));
        }
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Net(IpNet::from(ip)));
        }
        Err(format!("'{s}' is not an address or CIDR range (e.g. 10.0.0.0/8, 2001:db8::/32, 192.0.2.7)"))
    }
}

impl Net {
    /// Whether `ip` (IPv4-mapped IPv6 counts as IPv4) is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        self.0.contains(&ip)
    }

    /// The range as IPv6 (IPv4 as IPv4-mapped) network and mask bytes, the form the kernel
    /// filter compares.
    pub fn mapped_net_and_mask(&self) -> ([u8; 16], [u8; 16]) {
        let (addr, prefix) = match self.0 {
            IpNet::V4(n) => (n.network().to_ipv6_mapped().octets(), 96 + u32::from(n.prefix_len())),
            IpNet::V6(n) => (n.network().octets(), u32::from(n.prefix_len())),
        };
        let mask_bits: u128 = if prefix == 0 { 0 } else { u128::MAX << (128 - prefix) };
        let mask = mask_bits.to_be_bytes();
        let mut net = [0u8; 16];
        for i in 0..16 {
            net[i] = addr[i] & mask[i];
        }
        (net, mask)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cidr_and_bare_addresses() {
        assert_eq!("10.1.2.3/8".parse::<Net>().unwrap().0.to_string(), "10.0.0.0/8");
        assert_eq!("192.0.2.7".parse::<Net>().unwrap().0.to_string(), "192.0.2.7/32");
        assert_eq!("2001:db8::1".parse::<Net>().unwrap().0.to_string(), "2001:db8::1/128");
        assert!("10.0.0.0/33".parse::<Net>().is_err());
        assert!("example.com".parse::<Net>().is_err());
    }

    /// Connections open at the start are kept for polling by their ends alone: an algorithm
    /// that fails `--cc` now may pass later (an application can switch it).
    #[test]
    fn ends_decide_whether_a_connection_may_ever_match() {
        let f = FilterSpec {
            port: Some(443),
            net: Some("10.0.0.0/8".parse().unwrap()),
            cc: Some("bbr".into()),
            ..Default::default()
        };
        let (web, other): (std::net::SocketAddr, std::net::SocketAddr) =
            ("10.1.1.1:443".parse().unwrap(), "192.0.2.9:50000".parse().unwrap());
        assert!(f.may_match(web, other) && f.may_match(other, web));
        assert!(f.matches(web, other, Some("bbr")));
        assert!(!f.matches(web, other, Some("cubic")), "--cc decides when polled, not before");
        assert!(!f.may_match("10.1.1.1:80".parse().unwrap(), other), "another port never passes");
        assert!(!f.may_match("192.0.2.1:443".parse().unwrap(), other), "another range never passes");
        assert!(FilterSpec::default().may_match(other, other));
    }

    #[test]
    fn ipv4_ranges_become_mapped_ipv6() {
        let (net, mask) = "127.0.0.0/8".parse::<Net>().unwrap().mapped_net_and_mask();
        assert_eq!(net, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 0]);
        assert_eq!(mask, [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0]);
        let (_, mask) = "::/0".parse::<Net>().unwrap().mapped_net_and_mask();
        assert_eq!(mask, [0; 16]);
    }
}

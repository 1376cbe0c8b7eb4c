//! Per-route settings (`ip route ... congctl ALGO initcwnd N initrwnd N`, the RTAX_CC_ALGO,
//! RTAX_INITCWND and RTAX_INITRWND route metrics) through rtnetlink, in the calling thread's
//! network namespace.
//!
//! A route is changed by sending it back whole with NLM_F_REPLACE: every attribute as dumped,
//! only the metric changed, so its nexthop, source, protocol and other metrics stay as they were.

use std::net::IpAddr;

use anyhow::{Context as _, Result, bail};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::sys::netlink::{Attrs, NETLINK_ROUTE, NLM_F_DUMP, NLM_F_REPLACE, Netlink, attrs, cstr, u32_of};

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_METRICS: u16 = 8;
const RTA_CACHEINFO: u16 = 12;
const RTA_TABLE: u16 = 15;
const RTAX_INITCWND: u16 = 11;
const RTAX_INITRWND: u16 = 14;
const RTAX_CC_ALGO: u16 = 16;
const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_LOCAL: u32 = 255;
const RTN_UNICAST: u8 = 1;
const RTN_LOCAL: u8 = 2;
const RTNH_F_ONLINK: u32 = 4;
const RTMSG_LEN: usize = 12;

/// Enough to find a route again: the kernel matches a replace on these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RouteKey {
    pub(crate) prefix: IpNet,
    pub(crate) table: u32,
    pub(crate) metric: Option<u32>,
}

impl std::fmt::Display for RouteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.prefix)?;
        if self.table != RT_TABLE_MAIN {
            write!(f, " table {}", self.table)?;
        }
        if let Some(m) = self.metric {
            write!(f, " metric {m}")?;
        }
        Ok(())
    }
}

/// A route's initial window, in segments: the congestion window a new connection starts with
/// (`initcwnd`, the kernel's default 10 — RFC 6928) or the receive window it first advertises
/// (`initrwnd`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Window {
    Initcwnd,
    Initrwnd,
}

impl Window {
    /// The largest value `apply` sets. Google's initial-window studies and the CDNs that raised
    /// theirs stayed at or below 100 segments; a larger first burst lands whole in one queue.
    pub(crate) const MAX: u32 = 128;

    fn rtax(self) -> u16 {
        match self {
            Window::Initcwnd => RTAX_INITCWND,
            Window::Initrwnd => RTAX_INITRWND,
        }
    }

    /// The name `ip route` gives it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Window::Initcwnd => "initcwnd",
            Window::Initrwnd => "initrwnd",
        }
    }
}

/// A route as dumped, kept raw so it can be sent back unchanged but for its metrics.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) key: RouteKey,
    pub(crate) cc: Option<String>,
    /// The route's initial congestion window (`initcwnd`), packets; `None`: the kernel's 10.
    pub(crate) initcwnd: Option<u32>,
    /// The route's initial receive window (`initrwnd`), packets; `None`: the kernel's choice.
    pub(crate) initrwnd: Option<u32>,
    pub(crate) gateway: Option<IpAddr>,
    header: Vec<u8>,
    attrs: Vec<(u16, Vec<u8>)>,
}

impl Route {
    /// A route as a test describes it (main table, no metric), never sent to the kernel.
    #[cfg(test)]
    pub(crate) fn described(prefix: IpNet, cc: Option<&str>, initcwnd: Option<u32>, gateway: Option<IpAddr>) -> Route {
        Route {
            key: RouteKey { prefix, table: RT_TABLE_MAIN, metric: None },
            cc: cc.map(str::to_string),
            initcwnd,
            initrwnd: None,
            gateway,
            header: Vec::new(),
            attrs: Vec::new(),
        }
    }

    fn parse(data: &[u8]) -> Option<Route> {
        if data.len() < RTMSG_LEN {
            return None;
        }
        let (family, dst_len, table_hdr) = (data[0], data[1], data[4]);
        let attrs: Vec<(u16, Vec<u8>)> = attrs(&data[RTMSG_LEN..]).map(|(t, v)| (t, v.to_vec())).collect();
        let get = |t: u16| attrs.iter().find(|(k, _)| *k == t).map(|(_, v)| v.as_slice());
        let addr = |v: &[u8]| -> Option<IpAddr> {
            match v.len() {
                4 => Some(IpAddr::from(<[u8; 4]>::try_from(v).ok()?)),
                16 => Some(IpAddr::from(<[u8; 16]>::try_from(v).ok()?)),
                _ => None,
            }
        };
        let dst = match get(RTA_DST).and_then(addr) {
            Some(a) => a,
            None if family == libc::AF_INET as u8 => IpAddr::from([0u8; 4]),
            None => IpAddr::from([0u8; 16]),
        };
        let metric = |kind: u16| {
            get(RTA_METRICS).and_then(|m| crate::sys::netlink::attrs(m).find(|(t, _)| *t == kind).map(|(_, v)| v))
        };
        let cc = metric(RTAX_CC_ALGO).map(cstr);
        let initcwnd = metric(RTAX_INITCWND).and_then(u32_of);
        let initrwnd = metric(RTAX_INITRWND).and_then(u32_of);
        Some(Route {
            key: RouteKey {
                prefix: IpNet::new(dst, dst_len).ok()?,
                table: get(RTA_TABLE).and_then(u32_of).unwrap_or(u32::from(table_hdr)),
                metric: get(RTA_PRIORITY).and_then(u32_of),
            },
            cc,
            initcwnd,
            initrwnd,
            gateway: get(RTA_GATEWAY).and_then(addr),
            header: data[..RTMSG_LEN].to_vec(),
            attrs,
        })
    }

    /// The interface index of the device the route sends through.
    pub(crate) fn oif(&self) -> Option<u32> {
        self.attrs.iter().find(|(t, _)| *t == RTA_OIF).and_then(|(_, v)| u32_of(v))
    }

    pub(crate) fn window(&self, w: Window) -> Option<u32> {
        match w {
            Window::Initcwnd => self.initcwnd,
            Window::Initrwnd => self.initrwnd,
        }
    }

    fn unicast(&self) -> bool {
        self.header[7] == RTN_UNICAST && self.key.table != RT_TABLE_LOCAL
    }

    /// The message that replaces this route with metric `kind` set to `value` (None removes it).
    fn with_metric(&self, kind: u16, value: Option<&[u8]>) -> Vec<u8> {
        let mut msg = self.header.clone();
        // Dumped status flags (linkdown, offload, ...) are refused on input; onlink is a setting.
        let flags = u32::from_ne_bytes(msg[8..12].try_into().unwrap()) & RTNH_F_ONLINK;
        msg[8..12].copy_from_slice(&flags.to_ne_bytes());
        let mut out = Attrs::default();
        let mut metrics_seen = false;
        for (t, v) in &self.attrs {
            match *t {
                RTA_CACHEINFO => {}
                RTA_METRICS => {
                    metrics_seen = true;
                    out.put_nested(RTA_METRICS, &metrics_with(v, kind, value));
                }
                _ => {
                    out.put(*t, v);
                }
            }
        }
        if !metrics_seen {
            out.put_nested(RTA_METRICS, &metrics_with(&[], kind, value));
        }
        msg.extend_from_slice(&out.0);
        msg
    }
}

fn metrics_with(metrics: &[u8], kind: u16, value: Option<&[u8]>) -> Attrs {
    let mut m = Attrs::default();
    for (t, v) in attrs(metrics) {
        if t != kind {
            m.put(t, v);
        }
    }
    if let Some(v) = value {
        m.put(kind, v);
    }
    m
}

/// A congctl metric's value: the name, NUL-terminated.
fn cc_value(cc: &str) -> Vec<u8> {
    [cc.as_bytes(), &[0]].concat()
}

fn family_of(net: &IpNet) -> u8 {
    match net {
        IpNet::V4(_) => libc::AF_INET as u8,
        IpNet::V6(_) => libc::AF_INET6 as u8,
    }
}

/// Unicast routes of this namespace (all tables but `local`) of one address family.
pub(crate) fn dump(family: u8) -> Result<Vec<Route>> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    let mut req = vec![0u8; RTMSG_LEN];
    req[0] = family;
    let msgs = nl.request(RTM_GETROUTE, NLM_F_DUMP, &req).context("listing routes")?;
    Ok(msgs
        .iter()
        .filter(|m| m.kind == RTM_NEWROUTE)
        .filter_map(|m| Route::parse(&m.data))
        .filter(Route::unicast)
        .collect())
}

/// Routes of both families that set a congctl.
pub(crate) fn with_congctl() -> Result<Vec<Route>> {
    let mut all = dump(libc::AF_INET as u8)?;
    all.extend(dump(libc::AF_INET6 as u8)?);
    all.retain(|r| r.cc.is_some());
    Ok(all)
}

/// The route for exactly `net`: the main table's if there is one, else the only one.
pub(crate) fn find(net: &IpNet) -> Result<Option<Route>> {
    let mut found: Vec<Route> = dump(family_of(net))?.into_iter().filter(|r| r.key.prefix == *net).collect();
    if let Some(i) = found.iter().position(|r| r.key.table == RT_TABLE_MAIN) {
        return Ok(Some(found.swap_remove(i)));
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => bail!(
            "several routes for {net} ({}): bbrscope changes one route only",
            found.iter().map(|r| r.key.to_string()).collect::<Vec<_>>().join("; ")
        ),
    }
}

/// Finds the route `key` names again (for revert and re-apply).
pub(crate) fn get(key: &RouteKey) -> Result<Option<Route>> {
    Ok(dump(family_of(&key.prefix))?.into_iter().find(|r| r.key == *key))
}

pub(crate) fn set_cc(route: &Route, cc: Option<&str>) -> Result<()> {
    replace(route, &route.with_metric(RTAX_CC_ALGO, cc.map(cc_value).as_deref()), "congctl")
}

/// Sets (None: removes) one of the route's initial windows.
pub(crate) fn set_window(route: &Route, w: Window, value: Option<u32>) -> Result<()> {
    let bytes = value.map(u32::to_ne_bytes);
    replace(route, &route.with_metric(w.rtax(), bytes.as_ref().map(|b| &b[..])), w.name())
}

fn replace(route: &Route, msg: &[u8], what: &str) -> Result<()> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    nl.request(RTM_NEWROUTE, NLM_F_REPLACE, msg)
        .with_context(|| format!("changing the {what} of route {}", route.key))?;
    Ok(())
}

/// What the kernel's route lookup (as `ip route get`) gives a new connection to `addr`: whether
/// the address is local (then the route does not apply), and the route with its metrics.
pub(crate) fn lookup(addr: IpAddr) -> Result<(bool, Option<Route>)> {
    let mut nl = Netlink::open(NETLINK_ROUTE)?;
    let mut req = vec![0u8; RTMSG_LEN];
    let bytes = match addr {
        IpAddr::V4(a) => {
            req[0] = libc::AF_INET as u8;
            req[1] = 32;
            a.octets().to_vec()
        }
        IpAddr::V6(a) => {
            req[0] = libc::AF_INET6 as u8;
            req[1] = 128;
            a.octets().to_vec()
        }
    };
    let mut a = Attrs::default();
    a.put(RTA_DST, &bytes);
    req.extend_from_slice(&a.0);
    let msgs = nl.request(RTM_GETROUTE, 0, &req).with_context(|| format!("looking up the route to {addr}"))?;
    let r = msgs.iter().filter(|m| m.kind == RTM_NEWROUTE).find_map(|m| Route::parse(&m.data));
    Ok(r.map_or((false, None), |r| (r.header[7] == RTN_LOCAL, Some(r))))
}

/// The route a new connection into `net` gets, and the address looked up: the first of its
/// addresses that is not one of this host's own (those are reached over loopback).
pub(crate) fn lookup_in(net: &IpNet) -> Result<(IpAddr, Option<Route>)> {
    let mut last = (net.addr(), None);
    for addr in net.hosts().take(16) {
        let (local, route) = lookup(addr)?;
        if !local {
            return Ok((addr, route));
        }
        last = (addr, route);
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumped(cc: Option<&str>) -> Vec<u8> {
        let mut msg = vec![libc::AF_INET as u8, 24, 0, 0, 254, 2, 253, RTN_UNICAST];
        msg.extend_from_slice(&(16u32 | RTNH_F_ONLINK).to_ne_bytes()); // linkdown | onlink
        let mut a = Attrs::default();
        a.put(RTA_TABLE, &254u32.to_ne_bytes()).put(RTA_DST, &[198, 18, 5, 0]).put(RTA_OIF, &7u32.to_ne_bytes());
        let mut m = Attrs::default();
        m.put(2, &1400u32.to_ne_bytes());
        if let Some(cc) = cc {
            m.put_str(RTAX_CC_ALGO, cc);
        }
        a.put_nested(RTA_METRICS, &m).put(RTA_CACHEINFO, &[0; 16]);
        msg.extend_from_slice(&a.0);
        msg
    }

    #[test]
    fn parses_a_dumped_route() {
        let r = Route::parse(&dumped(Some("cubic"))).unwrap();
        assert_eq!(r.key, RouteKey { prefix: "198.18.5.0/24".parse().unwrap(), table: 254, metric: None });
        assert_eq!(r.cc.as_deref(), Some("cubic"));
        assert_eq!(r.oif(), Some(7));
        assert!(r.unicast());
    }

    #[test]
    fn replacement_keeps_everything_but_the_congctl() {
        let r = Route::parse(&dumped(Some("cubic"))).unwrap();
        let msg = r.with_metric(RTAX_CC_ALGO, Some(&cc_value("bbr")));
        let back = Route::parse(&msg).unwrap();
        assert_eq!(back.cc.as_deref(), Some("bbr"));
        assert_eq!(back.key, r.key);
        assert_eq!(back.oif(), Some(7), "the output device kept");
        assert_eq!(u32::from_ne_bytes(msg[8..12].try_into().unwrap()), RTNH_F_ONLINK, "status flags dropped");
        assert!(!back.attrs.iter().any(|(t, _)| *t == RTA_CACHEINFO));
        let metrics = back.attrs.iter().find(|(t, _)| *t == RTA_METRICS).unwrap();
        assert!(attrs(&metrics.1).any(|(t, v)| t == 2 && u32_of(v) == Some(1400)), "other metrics kept");
        assert_eq!(Route::parse(&r.with_metric(RTAX_CC_ALGO, None)).unwrap().cc, None);
        let bare = Route::parse(&dumped(None)).unwrap();
        let reno = bare.with_metric(RTAX_CC_ALGO, Some(&cc_value("reno")));
        assert_eq!(Route::parse(&reno).unwrap().cc.as_deref(), Some("reno"));
        let iw = Route::parse(&reno).unwrap().with_metric(RTAX_INITCWND, Some(&32u32.to_ne_bytes()));
        let iw = Route::parse(&iw).unwrap();
        assert_eq!((iw.initcwnd, iw.cc.as_deref()), (Some(32), Some("reno")), "the congctl kept beside initcwnd");
    }
}

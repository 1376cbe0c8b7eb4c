//! TCP sockets of the calling thread's network namespace from sock_diag (inet_diag): the same
//! source `ss -tin` reads. `status` counts flows per algorithm with it, and the observer polls the
//! connections that were already open when it started (no sock_ops callback ever fires for them).

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    os::fd::{AsRawFd, BorrowedFd},
};

use anyhow::{Context as _, Result};

use super::netlink::{Attrs, NETLINK_SOCK_DIAG, NLM_F_DUMP, Netlink, attrs, cstr};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_INFO: u16 = 2;
/// Asking for VEGASINFO makes the algorithm report its own info (BBR answers with BBRINFO):
/// `idiag_ext` is 8 bits wide, too narrow for BBRINFO's own bit.
const INET_DIAG_VEGASINFO: u16 = 3;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_BBRINFO: u16 = 16;
/// Reply: the values the socket holds in the socket-storage maps a dump asked about.
const INET_DIAG_SK_BPF_STORAGES: u16 = 20;
/// Request (after `inet_diag_req_v2`): which socket-storage maps to report, each by a file
/// descriptor (`SK_DIAG_BPF_STORAGE_REQ_MAP_FD`), since 5.2; dumps only.
const INET_DIAG_REQ_SK_BPF_STORAGES: u16 = 2;
const SK_DIAG_BPF_STORAGE_REQ_MAP_FD: u16 = 1;
const INET_DIAG_MSG_LEN: usize = 72;
/// `struct inet_diag_sockid`: at offset 4 of a reply (`inet_diag_msg`), 8 of a request.
const SOCKID_LEN: usize = 48;
/// Connection states that have a congestion controller: all but LISTEN, TIME_WAIT and CLOSE.
pub(crate) const CONNECTED: u32 =
    (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8) | (1 << 9) | (1 << 11);

/// `struct tcp_info` fields, parsed by the socket-option door (one parser for getsockopt and
/// INET_DIAG_INFO).
pub(crate) use super::sockopt::TcpInfo;

/// BBR's own report (`struct tcp_bbr_info`): bandwidth in bytes/s, gains in 1/256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BbrInfo {
    pub(crate) bw_bytes_per_s: u64,
    pub(crate) min_rtt_us: u32,
    pub(crate) pacing_gain: u32,
    pub(crate) cwnd_gain: u32,
}

/// One socket of a dump.
#[derive(Clone, Debug)]
pub(crate) struct Socket {
    pub(crate) family: u8,
    /// `struct inet_diag_sockid` as the kernel wrote it (ports, addresses, interface, cookie):
    /// what a later [`lookup`] of this one socket sends back.
    pub(crate) id: [u8; SOCKID_LEN],
    /// `enum tcp_state`.
    pub(crate) state: u8,
    pub(crate) src: SocketAddr,
    pub(crate) dst: SocketAddr,
    /// The socket cookie (the same one BPF programs get from bpf_get_socket_cookie).
    pub(crate) cookie: u64,
    pub(crate) cc: Option<String>,
    pub(crate) info: Option<TcpInfo>,
    pub(crate) bbr: Option<BbrInfo>,
    /// The socket holds a value in the socket-storage map the dump asked about.
    pub(crate) in_storage: bool,
    /// The socket's inode, as `/proc/PID/fd` links name it (0 once no file refers to it).
    pub(crate) inode: u64,
}

/// Every TCP socket in `states` (a bit mask of `1 << tcp_state`) of both address families; with
/// `details`, each with its tcp_info, algorithm and the algorithm's own info.
pub(crate) fn dump(states: u32, details: bool) -> Result<Vec<Socket>> {
    dump_on(&mut open()?, states, details, None)
}

/// As [`dump`], on a sock_diag socket from [`open`]: it answers for the namespace it was
/// opened in, whichever the calling thread is in now. With `storage` (a socket-storage map),
/// each socket says whether it holds a value there (`in_storage`); needs CAP_BPF.
pub(crate) fn dump_on(
    nl: &mut Netlink,
    states: u32,
    details: bool,
    storage: Option<BorrowedFd<'_>>,
) -> Result<Vec<Socket>> {
    let mut out = Vec::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        let mut req = request(family, states, details, &[0; SOCKID_LEN]);
        if let Some(map) = storage {
            let mut fds = Attrs::default();
            fds.put(SK_DIAG_BPF_STORAGE_REQ_MAP_FD, &(map.as_raw_fd() as u32).to_ne_bytes());
            let mut a = Attrs::default();
            a.put_nested(INET_DIAG_REQ_SK_BPF_STORAGES, &fds);
            req.extend_from_slice(&a.0);
        }
        let msgs = nl.request(SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req).context("listing TCP sockets (sock_diag)")?;
        out.extend(msgs.iter().filter_map(|m| parse(&m.data)));
    }
    Ok(out)
}

/// One socket seen in an earlier [`dump`], again, with its details: `None` once it is gone (the
/// kernel matches the cookie too, so a new socket on the same ports is not taken for it).
/// Cheaper than a dump when few sockets are wanted among many: the kernel looks it up by its
/// addresses instead of walking every socket.
pub(crate) fn lookup(nl: &mut Netlink, s: &Socket) -> Result<Option<Socket>> {
    let req = request(s.family, u32::MAX, true, &s.id);
    match nl.request(SOCK_DIAG_BY_FAMILY, 0, &req) {
        Ok(msgs) => Ok(msgs.iter().find_map(|m| parse(&m.data))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context("looking up a TCP socket (sock_diag)"),
    }
}

/// A sock_diag socket for [`lookup`] and [`dump_on`], in the calling thread's namespace (for good:
/// a socket belongs to the namespace it was created in).
pub(crate) fn open() -> Result<Netlink> {
    Netlink::open(NETLINK_SOCK_DIAG).context("opening a sock_diag socket")
}

/// `struct inet_diag_req_v2`: family, protocol, extensions, pad, states, socket id.
fn request(family: u8, states: u32, details: bool, id: &[u8; SOCKID_LEN]) -> Vec<u8> {
    let mut req = vec![0u8; 8 + SOCKID_LEN];
    req[0] = family;
    req[1] = libc::IPPROTO_TCP as u8;
    req[2] = 1 << (INET_DIAG_CONG - 1);
    if details {
        req[2] |= (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_VEGASINFO - 1));
    }
    req[4..8].copy_from_slice(&states.to_ne_bytes());
    req[8..].copy_from_slice(id);
    req
}

fn parse(d: &[u8]) -> Option<Socket> {
    if d.len() < INET_DIAG_MSG_LEN {
        return None;
    }
    let family = d[0];
    let port = |o: usize| u16::from_be_bytes([d[o], d[o + 1]]);
    let addr = |o: usize| -> IpAddr {
        if family == libc::AF_INET as u8 {
            IpAddr::V4(Ipv4Addr::new(d[o], d[o + 1], d[o + 2], d[o + 3]))
        } else {
            let a = Ipv6Addr::from(<[u8; 16]>::try_from(&d[o..o + 16]).unwrap());
            a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4)
        }
    };
    let cookie_lo = u64::from(u32::from_ne_bytes(d[44..48].try_into().unwrap()));
    let cookie_hi = u64::from(u32::from_ne_bytes(d[48..52].try_into().unwrap()));
    let mut s = Socket {
        family,
        id: d[4..4 + SOCKID_LEN].try_into().unwrap(),
        state: d[1],
        src: SocketAddr::new(addr(8), port(4)),
        dst: SocketAddr::new(addr(24), port(6)),
        cookie: cookie_lo | (cookie_hi << 32),
        cc: None,
        info: None,
        bbr: None,
        in_storage: false,
        inode: u32::from_ne_bytes(d[68..72].try_into().unwrap()).into(),
    };
    for (kind, v) in attrs(&d[INET_DIAG_MSG_LEN..]) {
        match kind {
            INET_DIAG_CONG => s.cc = Some(cstr(v)),
            // Present only when the socket has a value in a map the request named.
            INET_DIAG_SK_BPF_STORAGES => s.in_storage = true,
            INET_DIAG_INFO => s.info = TcpInfo::parse(v),
            INET_DIAG_BBRINFO if v.len() >= 20 => {
                let w = |i: usize| u32::from_ne_bytes(v[i * 4..i * 4 + 4].try_into().unwrap());
                s.bbr = Some(BbrInfo {
                    bw_bytes_per_s: u64::from(w(0)) | (u64::from(w(1)) << 32),
                    min_rtt_us: w(2),
                    pacing_gain: w(3),
                    cwnd_gain: w(4),
                });
            }
            _ => {}
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_inet_diag_message_with_attributes() {
        let mut m = vec![0u8; INET_DIAG_MSG_LEN];
        m[0] = libc::AF_INET as u8;
        m[1] = 8; // CLOSE_WAIT
        m[4..6].copy_from_slice(&443u16.to_be_bytes());
        m[6..8].copy_from_slice(&51000u16.to_be_bytes());
        m[8..12].copy_from_slice(&[192, 0, 2, 1]);
        m[24..28].copy_from_slice(&[198, 51, 100, 7]);
        m[44..48].copy_from_slice(&7u32.to_ne_bytes());
        m[48..52].copy_from_slice(&1u32.to_ne_bytes());
        m[68..72].copy_from_slice(&4_026_532u32.to_ne_bytes());
        let mut info = vec![0u8; 232];
        info[1] = 3; // recovery
        info[80..84].copy_from_slice(&42u32.to_ne_bytes());
        info[120..128].copy_from_slice(&123_456u64.to_ne_bytes());
        let cc = b"cubic\0";
        let storages = [0u8; 8];
        for (kind, v) in [
            (INET_DIAG_INFO, &info[..]),
            (INET_DIAG_CONG, &cc[..]),
            (INET_DIAG_SK_BPF_STORAGES | (1 << 15), &storages[..]),
        ] {
            let len = 4 + v.len();
            m.extend_from_slice(&(len as u16).to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(v);
            m.resize(m.len().next_multiple_of(4), 0);
        }
        let s = parse(&m).unwrap();
        assert_eq!(s.state, 8);
        assert_eq!(s.src.to_string(), "192.0.2.1:443");
        assert_eq!(s.dst.to_string(), "198.51.100.7:51000");
        assert_eq!(s.cookie, (1 << 32) | 7);
        assert_eq!(s.inode, 4_026_532);
        assert_eq!(s.cc.as_deref(), Some("cubic"));
        assert!(s.in_storage);
        let i = s.info.unwrap();
        assert_eq!((i.ca_state, i.snd_cwnd, i.bytes_acked), (3, 42, 123_456));
        assert_eq!(i.snd_wnd, Some(0));
        assert!(!parse(&m[..INET_DIAG_MSG_LEN]).unwrap().in_storage);
        assert!(parse(&m[..INET_DIAG_MSG_LEN - 1]).is_none());
    }
}

//! How many live TCP connections use each algorithm, from one sock_diag (inet_diag) dump of the
//! calling thread's namespace: the same source `ss -tin` reads.
//!
//! A snapshot rather than the observer's event stream: `status` must answer at once, and loading
//! the tracing programs to count flows that already exist would see only those that happen to
//! receive a segment while it waits.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};

use super::netlink::{NETLINK_SOCK_DIAG, NLM_F_DUMP, Netlink, attrs, cstr};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_MSG_LEN: usize = 72;
/// Connection states that have a congestion controller: all but LISTEN, TIME_WAIT and CLOSE.
const STATES: u32 = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 5) | (1 << 8) | (1 << 9) | (1 << 11);

/// Connections per algorithm name, both address families.
pub fn flows_by_algorithm() -> Result<BTreeMap<String, u64>> {
    let mut nl = Netlink::open(NETLINK_SOCK_DIAG)?;
    let mut counts = BTreeMap::new();
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        // struct inet_diag_req_v2: family, protocol, ext, pad, states, then a zeroed socket id.
        let mut req = vec![0u8; 56];
        req[0] = family;
        req[1] = libc::IPPROTO_TCP as u8;
        req[2] = 1 << (INET_DIAG_CONG - 1);
        req[4..8].copy_from_slice(&STATES.to_ne_bytes());
        let msgs = nl.request(SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req).context("listing TCP sockets (sock_diag)")?;
        for m in msgs.iter().filter(|m| m.data.len() >= INET_DIAG_MSG_LEN) {
            let name = attrs(&m.data[INET_DIAG_MSG_LEN..])
                .find(|(t, _)| *t == INET_DIAG_CONG)
                .map(|(_, v)| cstr(v))
                .unwrap_or_else(|| "unknown".into());
            *counts.entry(name).or_insert(0) += 1;
        }
    }
    Ok(counts)
}

//! Reads from kernel sockets at offsets userspace found in BTF.

use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_kernel_buf};
use bbrscope_common::{BitField, CC_NAME_LEN};

use crate::config::conf;

const AF_INET: u16 = 2;

#[inline(always)]
pub(crate) fn read<T: Copy + Default>(base: u64, off: u32) -> T {
    // SAFETY: bpf_probe_read_kernel checks the address itself and fails (0 here) on a bad one.
    unsafe { bpf_probe_read_kernel((base + u64::from(off)) as *const T) }.unwrap_or_default()
}

#[inline(always)]
pub(crate) fn read_bits(base: u64, f: BitField) -> u32 {
    let word: u32 = read(base, f.off);
    (word >> f.shift) & ((1u32 << f.bits) - 1)
}

#[inline(always)]
pub(crate) fn ca_state(sk: u64) -> u8 {
    read_bits(sk, conf!(sock.ca_state)) as u8
}

/// The name of the congestion-control algorithm whose `struct tcp_congestion_ops` is at `ops`
/// (a socket's `icsk_ca_ops`); zeros when there is none or it cannot be read.
#[inline(always)]
pub(crate) fn cc_name_at(ops: u64) -> [u8; CC_NAME_LEN] {
    let mut out = [0u8; CC_NAME_LEN];
    if ops != 0
        // SAFETY: as in `read`: the helper checks the address and fails on a bad one.
        && unsafe { bpf_probe_read_kernel_buf((ops + u64::from(conf!(sock.ca_ops_name))) as *const u8, &mut out) }.is_err()
    {
        out = [0; CC_NAME_LEN];
    }
    out
}

/// The socket's addresses as IPv4-mapped IPv6 for AF_INET, so filters compare one form.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Tuple {
    pub family: u8,
    pub sport: u16,
    pub dport: u16,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
}

#[inline(always)]
pub(crate) fn tuple(sk: u64) -> Tuple {
    let family: u16 = read(sk, conf!(sock.family));
    let sport: u16 = read(sk, conf!(sock.num));
    let dport: u16 = u16::from_be(read(sk, conf!(sock.dport)));
    let mut t = Tuple { family: family as u8, sport, dport, saddr: [0; 16], daddr: [0; 16] };
    if family == AF_INET {
        let s: [u8; 4] = read(sk, conf!(sock.rcv_saddr));
        let d: [u8; 4] = read(sk, conf!(sock.daddr));
        t.saddr = v4_mapped(s);
        t.daddr = v4_mapped(d);
    } else {
        t.saddr = read(sk, conf!(sock.v6_rcv_saddr));
        t.daddr = read(sk, conf!(sock.v6_daddr));
    }
    t
}

#[inline(always)]
fn v4_mapped(a: [u8; 4]) -> [u8; 16] {
    [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a[0], a[1], a[2], a[3]]
}

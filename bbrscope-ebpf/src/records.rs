//! Building ring-buffer records. Records are reserved in the ring and filled in place, so a
//! sample (about 500 bytes) never touches the 512-byte BPF stack.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{bpf_probe_read_kernel_buf, generated::bpf_probe_read_kernel},
    macros::map,
    maps::RingBuf,
};
use bbrscope_common::{
    CC_NAME_LEN, CongState, FLAG_FIRST, MAX_FIELDS, RecordHeader, Retransmit, Sample, config_flags, counter, kind,
};

use crate::{
    config::{conf, has_flag},
    flow::{FlowState, Status, cc_passes, count},
    sock::{self, read},
};

/// Size is set by userspace (`--ring-size`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

#[inline(always)]
pub fn fill_header(h: &mut RecordHeader, kind: u8, st: &FlowState, ca_state: u8, now: u64) {
    h.kind = kind;
    h.flags = if st.announced == 0 { FLAG_FIRST } else { 0 };
    h.family = st.family;
    h.ca_state = ca_state;
    h.sport = st.sport;
    h.dport = st.dport;
    h.flow_id = st.id;
    h.ts_ns = now;
    h.saddr = st.saddr;
    h.daddr = st.daddr;
    h.tcp_state = st.tcp_state;
    h._pad = [0; 7];
}

/// A periodic sample (`kind::SAMPLE`) or the final one (`kind::CLOSE`); whether one was sent.
#[inline(never)]
pub fn sample(kind: u8, sk: u64, st: &mut FlowState, now: u64) -> bool {
    let mut cc = [0u8; CC_NAME_LEN];
    sock::cc_name(sk, &mut cc);
    if !cc_passes(&cc) {
        return false;
    }
    let bytes_acked: u64 = read(sk, conf!(sock.bytes_acked));
    let sending = bytes_acked != st.last_bytes_acked;
    st.last_bytes_acked = bytes_acked;
    if kind == kind::SAMPLE && !sending && !has_flag(config_flags::RECEIVERS) {
        st.acks = 0;
        return false;
    }
    let Some(mut entry) = EVENTS.reserve::<Sample>(0) else {
        count(counter::RING_FULL);
        return false;
    };
    let s = entry.as_mut_ptr();
    // SAFETY: `s` points to a reserved, writable record of this type; the reads copy at most a
    // field's length from kernel memory at offsets the running kernel's BTF gave.
    unsafe {
        fill_header(&mut (*s).hdr, kind, st, sock::ca_state(sk), now);
        (*s).cc = cc;
        (*s).acks = st.acks;
        (*s).retrans_coalesced = st.retrans_coalesced;
        let mut i = 0;
        while i < MAX_FIELDS {
            let f = conf!(fields[i]);
            let dst = &raw mut (*s).vals[i];
            *dst = 0;
            if f.len > 0 && f.len <= 8 {
                bpf_probe_read_kernel(dst as *mut c_void, f.len, (sk + f.off as u64) as *const c_void);
            }
            i += 1;
        }
        let priv_ptr = (sk + conf!(sock.ca_priv) as u64) as *const u8;
        if bpf_probe_read_kernel_buf(priv_ptr, &mut (*s).ca_priv).is_err() {
            (*s).ca_priv = [0; bbrscope_common::CA_PRIV_LEN];
        }
    }
    entry.submit(0);
    st.announced = 1;
    st.acks = 0;
    st.event_records = 0;
    st.retrans_coalesced = 0;
    count(counter::SAMPLES);
    true
}

#[inline(always)]
fn announced(st: &FlowState) -> bool {
    st.status == Status::Passed as u8 && st.announced != 0
}

/// One record per retransmission with the segments it added to `total_retrans` (the socket's
/// counter, `total` now); past `events_per_interval` records in one sample interval, only counted
/// (and reported in the next sample) so that heavy loss cannot flood the ring. Whether a record
/// was sent.
#[inline(always)]
pub fn retransmit(sk: u64, st: &mut FlowState, total: u32, now: u64) -> bool {
    let segs = total.wrapping_sub(st.last_total_retrans);
    st.last_total_retrans = total;
    if !announced(st) {
        return false;
    }
    if st.event_records >= conf!(events_per_interval) {
        st.retrans_coalesced += segs;
        count(counter::RETRANS_COALESCED);
        return false;
    }
    st.event_records += 1;
    let Some(mut entry) = EVENTS.reserve::<Retransmit>(0) else {
        count(counter::RING_FULL);
        return false;
    };
    let r = entry.as_mut_ptr();
    // SAFETY: `r` points to a reserved, writable record of this type; every field is written.
    unsafe {
        fill_header(&mut (*r).hdr, kind::RETRANSMIT, st, sock::ca_state(sk), now);
        (*r).segs = segs;
        (*r).total_retrans = total;
        (*r).snd_cwnd = read(sk, conf!(sock.snd_cwnd));
        (*r).snd_ssthresh = read(sk, conf!(sock.snd_ssthresh));
    }
    entry.submit(0);
    count(counter::RETRANSMITS);
    true
}

#[inline(always)]
pub fn cong_state(sk: u64, st: &mut FlowState, new: u8, now: u64) {
    let old = st.ca_state;
    st.ca_state = new;
    if !announced(st) {
        return;
    }
    // Shares the retransmits' cap: a flow flapping between open and disorder under reordering
    // must not flood the ring either; the next sample carries the current state.
    if st.event_records >= conf!(events_per_interval) {
        count(counter::CONG_COALESCED);
        return;
    }
    st.event_records += 1;
    let Some(mut entry) = EVENTS.reserve::<CongState>(0) else {
        count(counter::RING_FULL);
        return;
    };
    let c = entry.as_mut_ptr();
    // SAFETY: `c` points to a reserved, writable record of this type; every field is written.
    unsafe {
        fill_header(&mut (*c).hdr, kind::CONG_STATE, st, new, now);
        (*c).old = old;
        (*c).new = new;
        (*c)._pad = [0; 6];
        (*c).snd_cwnd = read(sk, conf!(sock.snd_cwnd));
        (*c).snd_ssthresh = read(sk, conf!(sock.snd_ssthresh));
    }
    entry.submit(0);
    count(counter::CONG_STATES);
}

/// A congestion-state change of a sock_ops-path flow, identified by its socket cookie (userspace
/// knows the flow from its OPEN record and ignores cookies it does not know).
#[inline(always)]
pub fn cong_state_by_cookie(sk: u64, cookie: u64, old: u8, new: u8, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<CongState>(0) else {
        count(counter::RING_FULL);
        return;
    };
    let t = sock::tuple(sk);
    let c = entry.as_mut_ptr();
    // SAFETY: `c` points to a reserved, writable record of this type; every field is written.
    unsafe {
        let h = &mut (*c).hdr;
        h.kind = kind::CONG_STATE;
        h.flags = 0;
        h.family = t.family;
        h.ca_state = new;
        h.sport = t.sport;
        h.dport = t.dport;
        h.flow_id = cookie;
        h.ts_ns = now;
        h.tcp_state = 0;
        h._pad = [0; 7];
        h.saddr = t.saddr;
        h.daddr = t.daddr;
        (*c).old = old;
        (*c).new = new;
        (*c)._pad = [0; 6];
        (*c).snd_cwnd = read(sk, conf!(sock.snd_cwnd));
        (*c).snd_ssthresh = read(sk, conf!(sock.snd_ssthresh));
    }
    entry.submit(0);
    count(counter::CONG_STATES);
}

//! Building ring-buffer records. Records are reserved in the ring and filled in place, so a
//! sample (about 500 bytes) never touches the 512-byte BPF stack.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::map,
    maps::RingBuf,
};
use bbrscope_common::{
    CA_PRIV_LEN, CC_NAME_LEN, CongState, FLAG_FIRST, MAX_FIELDS, RecordHeader, Retransmit, Sample, config_flags,
    counter, kind,
};

use crate::{
    config::{conf, has_flag},
    flow::{FlowState, Status, cc_passes, count},
    sock::{self, Tuple, read},
    span::Span,
};

/// Size is set by userspace (`--ring-size`).
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// How to submit a record: without waking userspace (which reads the ring on a short timer)
/// until `wake_bytes` wait in the ring, so that a burst costs one wake-up, not one per record.
#[inline(always)]
pub(crate) fn wake() -> u64 {
    let threshold = u64::from(conf!(wake_bytes));
    if threshold == 0 {
        // Not asked for: the kernel's own policy (wake when the reader has caught up).
        0
    } else if EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) < threshold {
        u64::from(BPF_RB_NO_WAKEUP)
    } else {
        // Forced: the kernel's own policy would not wake a reader that is behind, and this one
        // is behind because it was not woken.
        u64::from(BPF_RB_FORCE_WAKEUP)
    }
}

/// Every record's head, from the flow's state.
#[inline(always)]
pub(crate) fn fill_header(h: &mut RecordHeader, kind: u8, st: &FlowState, ca_state: u8, now: u64) {
    let flags = if st.announced == 0 { FLAG_FIRST } else { 0 };
    head(h, kind, flags, st.id, &st.t, ca_state, st.tcp_state, now);
}

/// The one place a record's head is written (flow records and the sock_ops path's
/// congestion-state records, which know the socket but not its flow state).
#[allow(
    clippy::too_many_arguments,
    reason = "inlined into each caller: a struct of the fields would be one more copy on the 512-byte BPF stack"
)]
#[inline(always)]
fn head(h: &mut RecordHeader, kind: u8, flags: u8, id: u64, t: &Tuple, ca_state: u8, tcp_state: u8, now: u64) {
    h.kind = kind;
    h.flags = flags;
    h.family = t.family;
    h.ca_state = ca_state;
    h.sport = t.sport;
    h.dport = t.dport;
    h.flow_id = id;
    h.ts_ns = now;
    h.saddr = t.saddr;
    h.daddr = t.daddr;
    h.tcp_state = tcp_state;
    h._pad = [0; 7];
}

/// Whether a sample of the flow goes out now: not while its algorithm (`cc`) fails `--cc`, nor
/// a periodic one (`kind::SAMPLE`) when the peer acked nothing new since the previous and
/// nothing is `in_flight` (loss recovery can hold the acked count still for seconds while the
/// flow sends) unless receivers were asked for.
#[inline(always)]
pub(crate) fn sample_due(kind: u8, span: &Span, st: &mut FlowState, cc: &[u8; CC_NAME_LEN], in_flight: bool) -> bool {
    if !cc_passes(cc) {
        return false;
    }
    let bytes_acked = span.bytes(conf!(sock.bytes_acked), 8);
    let sending = bytes_acked != st.last_bytes_acked;
    st.last_bytes_acked = bytes_acked;
    if kind == kind::SAMPLE && !sending && !in_flight && !has_flag(config_flags::RECEIVERS) {
        st.acks = 0;
        return false;
    }
    true
}

/// The socket's `icsk_ca_ops` (its congestion-control algorithm's operations).
#[inline(always)]
pub(crate) fn ca_ops(span: &Span) -> u64 {
    span.bytes(conf!(sock.ca_ops), 8)
}

/// A flow's congestion-control name and the `icsk_ca_ops` it was read from (sock_ops path: kept
/// in the socket's storage), so that the name is read again only when an application switches
/// algorithms.
#[repr(C)]
pub(crate) struct CcCache {
    pub ops: u64,
    pub name: [u8; CC_NAME_LEN],
}

impl CcCache {
    pub(crate) const EMPTY: CcCache = CcCache { ops: 0, name: [0; CC_NAME_LEN] };

    #[inline(always)]
    pub(crate) fn name(&mut self, ops: u64) -> [u8; CC_NAME_LEN] {
        if ops != self.ops {
            self.ops = ops;
            self.name = sock::cc_name_at(ops);
        }
        self.name
    }
}

/// A periodic sample (`kind::SAMPLE`) or the final one (`kind::CLOSE`); whether one was sent.
#[inline(never)]
pub(crate) fn sample(kind: u8, sk: u64, st: &mut FlowState, now: u64) -> bool {
    let Some(span) = Span::read(sk) else {
        count(counter::RING_FULL);
        return false;
    };
    let cc = sock::cc_name_at(ca_ops(&span));
    // tcp_probe's context has no packets-in-flight count: the acked bytes decide.
    sample_due(kind, &span, st, &cc, false) && send_sample(kind, &span, st, &cc, now)
}

/// Sends a sample `sample_due` allowed; whether the ring had room.
#[inline(always)]
pub(crate) fn send_sample(kind: u8, span: &Span, st: &mut FlowState, cc: &[u8; CC_NAME_LEN], now: u64) -> bool {
    let Some(mut entry) = EVENTS.reserve::<Sample>(0) else {
        count(counter::RING_FULL);
        return false;
    };
    // SAFETY: a reserved, writable record of this type.
    write_sample(unsafe { &mut *entry.as_mut_ptr() }, kind, span, st, cc, now);
    entry.submit(wake());
    true
}

// `write_sample` stores `ca_priv` as words.
const _: () = assert!(core::mem::offset_of!(Sample, ca_priv).is_multiple_of(8) && CA_PRIV_LEN.is_multiple_of(8));

/// Fills a sample record in place (in the ring: a sample is about 500 bytes, the BPF stack 512)
/// from the socket's span, and starts the flow's next interval.
#[inline(always)]
pub(crate) fn write_sample(
    s: &mut Sample,
    kind: u8,
    span: &Span,
    st: &mut FlowState,
    cc: &[u8; CC_NAME_LEN],
    now: u64,
) {
    fill_header(&mut s.hdr, kind, st, span.bits(conf!(sock.ca_state)) as u8, now);
    s.cc = *cc;
    s.acks = st.acks;
    s.retrans_coalesced = st.retrans_coalesced;
    (s.socket_flags, s.socket_flags_read) = socket_flags(span);
    let mut i = 0;
    while i < MAX_FIELDS {
        s.vals[i] = span.field(conf!(fields[i]));
        i += 1;
    }
    // SAFETY: `ca_priv` is at a multiple of 8 in the record (asserted above), which the ring
    // aligns to 8, and is `CA_PRIV_LEN` bytes long: a valid, aligned `[u64; CA_PRIV_LEN / 8]`.
    #[expect(clippy::cast_ptr_alignment, reason = "aligned to 8, as the SAFETY note says")]
    span.priv_words(conf!(sock.ca_priv), unsafe { &mut *(&raw mut s.ca_priv).cast::<[u64; CA_PRIV_LEN / 8]>() });
    st.announced = 1;
    st.acks = 0;
    st.event_records = 0;
    st.retrans_coalesced = 0;
    count(counter::SAMPLES);
}

/// The socket's `struct socket` flags and whether they were read: the pointer comes with the
/// span, the flags cost one read. The writer's own sign that it waits for space in the send
/// buffer (`SOCK_NOSPACE`, set by `sk_stream_wait_memory` and by `tcp_poll`, cleared once ACKs
/// free a third of it) is there: a full buffer alone may be a response that fits.
#[inline(always)]
fn socket_flags(span: &Span) -> (u32, u32) {
    let (at, flags) = (conf!(sock.sk_socket), conf!(sock.socket_flags));
    if at == u32::MAX || flags == u32::MAX {
        return (0, 0);
    }
    let sock = span.bytes(at, 8);
    if sock == 0 {
        return (0, 0);
    }
    (sock::read::<u64>(sock, flags) as u32, 1)
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
pub(crate) fn retransmit(sk: u64, st: &mut FlowState, total: u32, now: u64) -> bool {
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
    entry.submit(wake());
    count(counter::RETRANSMITS);
    true
}

#[inline(always)]
pub(crate) fn cong_state(sk: u64, st: &mut FlowState, new: u8, now: u64) {
    let old = st.ca_state;
    st.ca_state = new;
    if !announced(st) {
        // Before the flow's first record: counted, and the first sample carries the state.
        count(counter::CONG_COALESCED);
        return;
    }
    // Shares the retransmits' cap: a flow flapping between open and disorder under reordering
    // must not flood the ring either; the next sample carries the current state.
    if st.event_records >= conf!(events_per_interval) {
        count(counter::CONG_COALESCED);
        return;
    }
    st.event_records += 1;
    let flags = if st.announced == 0 { FLAG_FIRST } else { 0 };
    send_cong_state(sk, st.id, flags, &st.t, st.tcp_state, old, new, now);
}

/// A congestion-state change of a sock_ops-path flow, identified by its socket cookie (userspace
/// knows the flow from its OPEN record, holds changes that come before it for a while, and
/// drops cookies it never learns).
#[inline(always)]
pub(crate) fn cong_state_by_cookie(sk: u64, cookie: u64, old: u8, new: u8, now: u64) {
    send_cong_state(sk, cookie, 0, &sock::tuple(sk), 0, old, new, now);
}

#[allow(
    clippy::too_many_arguments,
    reason = "inlined into each caller: a struct of the fields would be one more copy on the 512-byte BPF stack"
)]
#[inline(always)]
fn send_cong_state(sk: u64, id: u64, flags: u8, t: &Tuple, tcp_state: u8, old: u8, new: u8, now: u64) {
    let Some(mut entry) = EVENTS.reserve::<CongState>(0) else {
        count(counter::RING_FULL);
        return;
    };
    let c = entry.as_mut_ptr();
    // SAFETY: `c` points to a reserved, writable record of this type; every field is written.
    unsafe {
        head(&mut (*c).hdr, kind::CONG_STATE, flags, id, t, new, tcp_state, now);
        (*c).old = old;
        (*c).new = new;
        (*c)._pad = [0; 6];
        (*c).snd_cwnd = read(sk, conf!(sock.snd_cwnd));
        (*c).snd_ssthresh = read(sk, conf!(sock.snd_ssthresh));
    }
    entry.submit(wake());
    count(counter::CONG_STATES);
}

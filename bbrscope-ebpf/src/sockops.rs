//! The sock_ops path: one program on the cgroup v2 root sees every TCP socket of every cgroup and
//! network namespace from connect()/accept to close, and keeps its per-flow state in the socket
//! itself (socket-local storage: no table to fill, nothing to evict, freed with the socket).
//!
//! Callbacks used (each enabled per socket with `bpf_sock_ops_cb_flags_set`):
//! - TCP_CONNECT_CB / TCP_LISTEN_CB: process context, so the owner (pid, comm) is known. A
//!   listener's storage is cloned into the sockets it accepts (`BPF_F_CLONE`).
//! - ACTIVE/PASSIVE_ESTABLISHED_CB: filters. The flow's OPEN record waits for its first other
//!   record (a data-carrying sample or a retransmission), so a socket that never sends costs
//!   no record at all, and a flow shorter than a sample interval costs one: its close record
//!   carries its owner.
//! - RTT_CB: once per round trip, in every TCP state (ESTABLISHED, CLOSE_WAIT, FIN_WAIT1/2,
//!   LAST_ACK, CLOSING). Not per ACK: `tcp_rtt_estimator()` calls it only when `snd_una` has moved
//!   past the sequence of the previous round's (`rtt_seq`), so never while `snd_una` stands still
//!   in loss recovery. On loopback a round trip is about one ACK; on a 150 ms path it is one
//!   callback per 150 ms however many ACKs arrive.
//! - PARSE_HDR_OPT_CB (with the PARSE_ALL flag, since 5.10): every ACK the kernel takes its slow
//!   path for (`tcp_validate_incoming`): those with SACK blocks — all of loss recovery's — and
//!   those that change the window or arrive out of order. Header prediction's fast path (a plain
//!   in-order ACK) runs no sock_ops program at all. Switched on for a flow at its first
//!   retransmission (loss recovery, when the RTT callback stops), for a sending flow on a path
//!   longer than the sample interval, and once the application closed it (see
//!   `aborts_on_data`): on a short path without loss the RTT callback comes often enough, and
//!   idle flows' window updates would only cost.
//! - HDR_OPT_LEN_CB (with the WRITE_HDR_OPT flag, since 5.10), only while a flow that sends data
//!   has an srtt longer than `--interval` and a sample falls due before its next RTT callback
//!   (out of loss recovery), or until the process writing to an accepted connection is seen:
//!   the kernel asks it how much header-option room each packet it builds needs (the program
//!   reserves none, so nothing is written), on every segment sent — and at each MSS check,
//!   where there is no packet and the program returns at once. On a long path the ACKs that
//!   release new data clock those sends, so samples keep `--interval` between round trips; on a
//!   short one the RTT callback already comes often enough. They go off after a sample when the
//!   next falls due only after the next RTT callback (which takes it), and stay off in loss
//!   recovery, whose ACKs all take the slow path (see `send_callbacks`): on the bench's long
//!   path that took the program from 2.44 to 0.49 runs per segment received, with the same
//!   samples. A write's first packet is built in the writer's context: the flow's owner (see
//!   `writer`).
//!   These three are the per-ACK path, kept to a storage lookup, a few context loads and a
//!   tick-counter read until a sample is due.
//! - RETRANS_CB: every retransmission with its error code (failed attempts are not counted).
//! - STATE_CB: TCP state changes; TCP_CLOSE sends the final sample and the flow's summary (one
//!   record).

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{
        BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_HDR_OPT_LEN_CB, BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG,
        BPF_SOCK_OPS_PARSE_HDR_OPT_CB, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_RETRANS_CB,
        BPF_SOCK_OPS_RETRANS_CB_FLAG, BPF_SOCK_OPS_RTT_CB, BPF_SOCK_OPS_RTT_CB_FLAG, BPF_SOCK_OPS_STATE_CB,
        BPF_SOCK_OPS_STATE_CB_FLAG, BPF_SOCK_OPS_TCP_CONNECT_CB, BPF_SOCK_OPS_TCP_LISTEN_CB,
        BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG, bpf_sock, bpf_sock_ops,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_socket_cookie,
        generated::{bpf_get_prandom_u32, bpf_getsockopt, bpf_setsockopt, bpf_sk_storage_get},
    },
    macros::{btf_map, map, sock_ops},
    maps::{
        Array,
        lpm_trie::{Key, LpmTrie},
    },
    programs::SockOpsContext,
};
use aya_log_ebpf::{debug, warn};
use bbrscope_common::{
    CC_NAME_LEN, FlowClose, FlowOpen, Owner, assign_mode, client_gets_b, config_flags, counter, experiment_flags, hold,
    kind, status_quo,
};

use crate::{
    clock::{coarse_ns, jiffies, now_ns},
    config::{conf, has_flag, interval_ns},
    flow::{self, FlowState, Status, add, cc_passes, count, same_cc},
    records::{self, CcCache, EVENTS, fill_header},
    sock::{self, read},
    span::Span,
};

const TCP_FIN_WAIT1: u32 = 4;
const TCP_FIN_WAIT2: u32 = 5;
const TCP_CLOSE: u32 = 7;
/// `SOCK_DEAD`, bit 0 of `sk_flags`.
const SOCK_DEAD: u64 = 1;
const SOL_TCP: i32 = 6;
const TCP_CONGESTION: i32 = 13;
/// bpf_setsockopt's own option: the connection's initial congestion window, before data is sent.
const TCP_BPF_IW: i32 = 1001;
const BPF_SK_STORAGE_GET_F_CREATE: u64 = 1;
const CONNECT_CB_FLAGS: u32 = BPF_SOCK_OPS_STATE_CB_FLAG | BPF_SOCK_OPS_RETRANS_CB_FLAG;
const OUR_CB_FLAGS: u32 = BPF_SOCK_OPS_RTT_CB_FLAG | CONNECT_CB_FLAGS;
/// The slow-path ACK callbacks, switched on per flow when they matter (see `slow_path`). A
/// kernel without them (before 5.10) ignores the bit.
const PARSE_FLAG: u32 = BPF_SOCK_OPS_PARSE_ALL_HDR_OPT_CB_FLAG;
/// Send-path callbacks an accepted connection gets to show the process using it (see `writer`):
/// its first write shows it at once; a connection that only receives sends its ACKs from
/// softirq, and keeps the listener's owner after these.
const OWNER_TRIES: u8 = 4;
/// The send-path callbacks (see `send_callbacks`).
const WRITE_FLAG: u32 = BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;

/// What bbrscope keeps in each socket. The fields every ACK touches come first, in 32 bytes
/// (one cache line): the storage sits behind the socket in memory the ACK path has not touched
/// otherwise, and with thousands of flows each extra line is a cache miss per ACK.
#[repr(C)]
pub(crate) struct SockFlow {
    /// When the next sample is due, on the clock that paces samples (`sample_clock`): a tick's
    /// precision is plenty to pace samples 100 ms apart, and a tick counter costs one load.
    pub next_sample_tick: u64,
    pub srtt_min: u32,
    pub srtt_max: u32,
    pub cwnd_max: u32,
    /// Slow-path ACK callbacks (PARSE_HDR_OPT_CB) over the flow's life.
    pub slow_acks: u32,
    /// `status` and `acks` first.
    pub flow: FlowState,
    /// The socket's address, read once from the context: the other callbacks read socket fields
    /// (at BTF offsets, with bpf_probe_read_kernel) from here. It never leaves the kernel.
    pub sk: u64,
    pub start_ns: u64,
    pub rtt_events: u64,
    pub comm: [u8; 16],
    pub tgid: u32,
    pub pid: u32,
    pub srtt_first: u32,
    pub retrans_records: u32,
    pub retrans_coalesced_total: u32,
    pub samples: u32,
    pub retrans_at_open: u32,
    pub retrans_failed: u32,
    /// Send-path callbacks (HDR_OPT_LEN_CB) over the flow's life.
    pub sends: u32,
    /// 1 while this program has the send-path callbacks on (a long path, or a writer to find):
    /// only then does it turn them off, since another sock_ops program may have asked for them.
    pub send_cb: u8,
    /// 1 once data arrived after the application closed the socket (see `aborts_on_data`).
    pub aborted_on_data: u8,
    /// Send-path callbacks left to find the process using an accepted connection in (see
    /// `writer`); 0 once found or given up.
    pub owner_pending: u8,
    /// 1 once connect() was seen (an active open).
    pub active: u8,
    /// 1 on a listening socket (its storage is a template its accepted sockets inherit).
    pub listener: u8,
    /// `bbrscope experiment` arm: 1 (A), 2 (B), 0 (not in the experiment).
    pub arm: u8,
    /// `bbrscope experiment`: which arms are the connection's status quo (`status_quo`).
    pub status_quo: u8,
    pub cc: CcCache,
    /// When the next RTT callback is due, on the sample clock (`round_ticks` after the last).
    pub round_due_tick: u64,
}

/// A BTF map definition by hand: aya-ebpf's `SkStorage` fixes the flags to `BPF_F_NO_PREALLOC`,
/// and this one also needs `BPF_F_CLONE` (1 << 9) so that accepted sockets inherit the owner
/// recorded on their listener. The fields are BTF placeholders that the loader reads, never data.
#[repr(C)]
pub(crate) struct SkStorageDef {
    r#type: *const [i32; 24], // BPF_MAP_TYPE_SK_STORAGE
    key: *const i32,
    value: *const SockFlow,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; 1 | (1 << 9)], // BPF_F_NO_PREALLOC | BPF_F_CLONE
}

// SAFETY: the fields are null placeholders describing the map in BTF; nothing reads or writes
// through them.
unsafe impl Sync for SkStorageDef {}

#[btf_map]
static SOCKS: SkStorageDef = SkStorageDef {
    r#type: core::ptr::null(),
    key: core::ptr::null(),
    value: core::ptr::null(),
    max_entries: core::ptr::null(),
    map_flags: core::ptr::null(),
};

#[inline(always)]
fn storage(sk: *mut bpf_sock, create: bool) -> Option<&'static mut SockFlow> {
    let flags = if create { BPF_SK_STORAGE_GET_F_CREATE } else { 0 };
    // SAFETY: `sk` is the context's non-null socket; the helper returns null or a pointer to this
    // socket's storage, valid while the socket lives (for the whole callback).
    let p = unsafe { bpf_sk_storage_get(&raw const SOCKS as *mut c_void, sk.cast(), core::ptr::null_mut(), flags) }
        .cast::<SockFlow>();
    // SAFETY: non-null storage of the right type (the map's value type).
    (!p.is_null()).then(|| unsafe { &mut *p })
}

#[sock_ops]
pub(crate) fn bbrscope_sockops(ctx: SockOpsContext) -> u32 {
    // SAFETY: the context pointer is the kernel's, valid for the program's run; every field
    // read is one the verifier rewrites to a load from the kernel's sock_ops state.
    let ops = unsafe { &*ctx.ops };
    // SAFETY: `sk` is the member of this union the kernel's sock_ops context defines (a socket
    // pointer, null when the callback has no full socket).
    let sk = unsafe { ops.__bindgen_anon_2.sk };
    if !sk.is_null() {
        match ops.op {
            BPF_SOCK_OPS_RTT_CB => on_ack(&ctx, ops, sk, Ack::Round),
            BPF_SOCK_OPS_PARSE_HDR_OPT_CB => on_ack(&ctx, ops, sk, Ack::Slow),
            // Without a packet (skb_tcp_flags 0: every packet has a flag, ACK at least) the kernel
            // is only checking the MSS (`tcp_current_mss`), about twice per packet sent: nothing
            // moved, so back at once, before the storage lookup.
            BPF_SOCK_OPS_HDR_OPT_LEN_CB if ops.skb_tcp_flags != 0 => on_ack(&ctx, ops, sk, Ack::Send),
            BPF_SOCK_OPS_RETRANS_CB => on_retransmit(&ctx, ops, sk),
            BPF_SOCK_OPS_STATE_CB => on_state(&ctx, ops, sk),
            BPF_SOCK_OPS_TCP_CONNECT_CB => on_connect(&ctx, ops, sk),
            BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB | BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB => on_established(&ctx, ops, sk),
            BPF_SOCK_OPS_TCP_LISTEN_CB => on_listen(&ctx, sk),
            _ => {}
        }
    }
    // 1 lets the other sock_ops programs run and keeps their replies.
    1
}

/// Which per-ACK callback ran (see the module's documentation).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// The RTT callback: once per round trip.
    Round,
    /// An ACK on the kernel's slow path.
    Slow,
    /// A packet built (a long path, or a writer to find).
    Send,
}

/// The per-ACK path.
#[inline(always)]
fn on_ack(ctx: &SockOpsContext, ops: &bpf_sock_ops, sk: *mut bpf_sock, ack: Ack) {
    // No per-ACK counter here: each sample adds the callbacks it covers (`flow.acks`) instead,
    // which saves a per-CPU map update on every ACK.
    let Some(s) = storage(sk, false) else {
        return;
    };
    if s.flow.status != Status::Passed as u8 {
        return;
    }
    // The flow's total of callbacks (`rtt_events` + `slow_acks`) is added up from this at each
    // sample.
    s.flow.acks = s.flow.acks.wrapping_add(1);
    match ack {
        Ack::Slow => {
            s.slow_acks = s.slow_acks.wrapping_add(1);
            if aborts_on_data(ops, s) {
                s.aborted_on_data = 1;
            }
        }
        Ack::Send => {
            s.sends = s.sends.wrapping_add(1);
            if s.owner_pending != 0 {
                if !writer(s) {
                    s.owner_pending -= 1;
                }
                if s.owner_pending == 0 {
                    send_callbacks(ctx, ops, s, ops.bpf_sock_ops_cb_flags, sample_clock());
                }
            }
        }
        Ack::Round => {}
    }
    track(s, ops);
    if has_flag(config_flags::POLL_CA_STATE) {
        // No tcp_cong_state_set tracepoint on this kernel: look for changes on each ACK.
        let state = sock::ca_state(s.sk);
        if state != s.flow.ca_state {
            records::cong_state(s.sk, &mut s.flow, state, now_ns());
        }
    }
    let now = sample_clock();
    if ack == Ack::Round {
        s.round_due_tick = now + round_ticks(ops.srtt_us);
    }
    let due = now >= s.next_sample_tick;
    if due {
        s.next_sample_tick = now + conf!(sockops_period);
        sample(s, ops.state as u8, ops.packets_out);
    }
    // Once per round trip, and after a sample while the send-path callbacks are this program's
    // (the next may fall due only after the next round trip's callback: then they go off).
    if ack == Ack::Round || (due && s.send_cb != 0) {
        send_callbacks(ctx, ops, s, ops.bpf_sock_ops_cb_flags, now);
    }
}

/// A round trip on the sample clock, with a quarter more for rounds that run late: when the next
/// RTT callback is due. `srtt_us` in 1/8 µs, as the context gives it.
#[inline(always)]
fn round_ticks(srtt_us: u32) -> u64 {
    let ns = u64::from(srtt_us) * 125;
    let ns = ns + ns / 4;
    let (period, interval) = (conf!(sockops_period), interval_ns());
    // The nanosecond clocks' period is the interval itself; jiffies' is a few hundred at most per
    // second of interval, and the round trip is capped at 17 s, so the product stays in 64 bits.
    if period == interval { ns } else { ns.min(1 << 34) * period / interval.max(1) }
}

/// Whether the kernel is about to reset the connection on the segment being parsed: data for a
/// socket the application has closed (`SOCK_DEAD`) in FIN_WAIT1/2 (`tcp_rcv_state_process`,
/// TcpExtTCPAbortOnData). Every segment in those states takes the slow path, so it is parsed here
/// first; the kernel then sends the reset itself but records ECONNRESET, as for one received.
#[inline(always)]
fn aborts_on_data(ops: &bpf_sock_ops, s: &SockFlow) -> bool {
    if ops.state != TCP_FIN_WAIT1 && ops.state != TCP_FIN_WAIT2 {
        return false;
    }
    let off = conf!(sock.sk_flags);
    if off == u32::MAX || read::<u64>(s.sk, off) & SOCK_DEAD == 0 {
        return false;
    }
    // SAFETY: the packet pointers of this callback's context (the segment's TCP header, checked
    // against its end below before any read).
    let (data, end) = unsafe { (ops.__bindgen_anon_3.skb_data as usize, ops.__bindgen_anon_4.skb_data_end as usize) };
    if data + 13 > end {
        return false;
    }
    // SAFETY: byte 12 (data offset) lies within [data, end), checked just above.
    let doff = unsafe { *((data + 12) as *const u8) } >> 4;
    ops.skb_len > u32::from(doff) * 4
}

/// An accepted connection's owner is the process that uses it, not the listener's (a pre-fork
/// server's workers accept and write on their master's listener; a listener older than bbrscope
/// has no owner at all): the send path runs in that process's context whenever it holds the
/// socket's lock — its writes, and the ACKs its reads send — which softirq processing never does
/// (it queues to the backlog instead). Whether the owner was recorded.
#[inline(always)]
fn writer(s: &mut SockFlow) -> bool {
    let off = conf!(sock.sk_lock_owned);
    if off == u32::MAX || read::<i32>(s.sk, off) == 0 {
        return false;
    }
    own(s);
    s.owner_pending = 0;
    true
}

/// Keeps the send-path callbacks on while they are needed — its writer is still to be seen, or
/// the flow sends data, its srtt is longer than the sample interval (checked once per round trip:
/// the srtt moves slowly) and a sample falls due before the next round trip's callback — and off
/// after, unless another program asked for them. Between a sample and the next round trip they
/// would only cost: a sample due later than that callback is taken by it. In loss recovery they
/// stay off: every ACK then carries SACK blocks and takes the slow path, whose callback keeps the
/// cadence. A round trip's callback that is late (`now` past when it was due) keeps them on. A
/// sending flow on a long path also gets the slow-path ACK callbacks, for good. `flags`: the
/// socket's callback flags now; `now`: the sample clock.
#[inline(always)]
fn send_callbacks(ctx: &SockOpsContext, ops: &bpf_sock_ops, s: &mut SockFlow, flags: u32, now: u64) {
    // Only a flow that sends has samples to keep on time. A receive-only socket (the near end
    // of an upload, or of a download this host makes) would otherwise run the program on
    // every ACK it sends and every out-of-order segment, for nothing: such flows are not
    // shown without --receivers. A sender's first RTT callback comes when its first data is
    // acked, before which a long path builds no packet anyway. srtt_us is in 1/8 µs.
    let sends = ops.data_segs_out != 0 || has_flag(config_flags::RECEIVERS);
    let long = sends && u64::from(ops.srtt_us) * 125 > interval_ns();
    let recovery = ops.sacked_out != 0 || ops.lost_out != 0;
    let before_round = s.next_sample_tick < s.round_due_tick || now >= s.round_due_tick;
    let write = s.owner_pending != 0 || (long && !recovery && before_round);
    let mut want = if long { flags | PARSE_FLAG } else { flags };
    if write {
        want |= WRITE_FLAG;
    } else if s.send_cb != 0 {
        want &= !WRITE_FLAG;
    }
    if want != flags && ctx.set_cb_flags(want as i32).is_ok() {
        // Ours to turn off only if it was off before.
        if flags & WRITE_FLAG == 0 && want & WRITE_FLAG != 0 {
            s.send_cb = 1;
        } else if want & WRITE_FLAG == 0 {
            s.send_cb = 0;
        }
    }
}

/// Switches the slow-path ACK callbacks on for the rest of the flow (see the module's
/// documentation for when).
#[inline(always)]
fn slow_path(ctx: &SockOpsContext, flags: u32) {
    if flags & PARSE_FLAG == 0 {
        let _ = ctx.set_cb_flags((flags | PARSE_FLAG) as i32);
    }
}

/// The summary's srtt min/max and cwnd max. The kernel runs both per-ACK callbacks before it
/// stores the ACK's new srtt and before congestion control acts on the ACK, so each sees the
/// values the previous ACK left; the last ACK's are seen at close (see `on_state`).
#[inline(always)]
fn track(s: &mut SockFlow, ops: &bpf_sock_ops) {
    let srtt = ops.srtt_us;
    // 0 is "no RTT measured yet": a TCP Fast Open server's socket is established at the SYN,
    // before any RTT sample, and its first callback still sees 0.
    if srtt != 0 {
        if s.srtt_first == 0 {
            s.srtt_first = srtt;
        }
        if srtt < s.srtt_min {
            s.srtt_min = srtt;
        }
    }
    if srtt > s.srtt_max {
        s.srtt_max = srtt;
    }
    let cwnd = ops.snd_cwnd;
    if cwnd > s.cwnd_max {
        s.cwnd_max = cwnd;
    }
}

/// Adds the ACKs since the previous sample to the flow's and the global count (a sample resets
/// them).
#[inline(always)]
#[expect(clippy::cast_lossless, reason = "keeps the verified object byte-identical (below)")]
fn count_acks(s: &mut SockFlow) {
    // `as`, not u64::from: the same value, but From reorders this program's instructions, and
    // this is the object the kernel matrix verified (compared byte for byte after clippy's fix).
    add(counter::PROBE_EVENTS, s.flow.acks as u64);
    s.rtt_events += s.flow.acks as u64;
}

/// A periodic sample, preceded by the flow's OPEN if it is the flow's first record.
#[inline(always)]
fn sample(s: &mut SockFlow, tcp_state: u8, packets_out: u32) {
    s.flow.tcp_state = tcp_state;
    count_acks(s);
    let Some(span) = Span::read(s.sk) else {
        count(counter::RING_FULL);
        return;
    };
    let cc = s.cc.name(records::ca_ops(&span));
    if !records::sample_due(kind::SAMPLE, &span, &mut s.flow, &cc, packets_out != 0) {
        return;
    }
    announce(s, &cc);
    if records::send_sample(kind::SAMPLE, &span, &mut s.flow, &cc, now_ns()) {
        s.samples += 1;
    }
}

#[inline(always)]
fn on_retransmit(ctx: &SockOpsContext, ops: &bpf_sock_ops, sk: *mut bpf_sock) {
    let Some(s) = storage(sk, false) else {
        return;
    };
    if s.flow.status != Status::Passed as u8 {
        return;
    }
    // Loss recovery: the RTT callback stops until it ends, its ACKs take the slow path.
    slow_path(ctx, ops.bpf_sock_ops_cb_flags);
    // The window the flow had when the kernel began to reduce it for this loss (set for every
    // algorithm as recovery or the loss state begins): the peak the callbacks may have missed.
    let prior: u32 = read_opt(s.sk, conf!(sock.prior_cwnd));
    if prior > s.cwnd_max {
        s.cwnd_max = prior;
    }
    track(s, ops);
    // args: seq, segments, error. An error means the device or qdisc refused the segments: the
    // kernel has counted them in total_retrans already, but they never left this host.
    // SAFETY: `args` is the union member the kernel fills for this callback.
    if unsafe { ops.__bindgen_anon_1.args[2] } != 0 {
        s.retrans_failed += ops.total_retrans.wrapping_sub(s.flow.last_total_retrans);
        s.flow.last_total_retrans = ops.total_retrans;
        return;
    }
    if s.flow.announced == 0 {
        // A retransmission is sending: the flow's first record, if its algorithm passes `--cc`
        // (else it is only counted, in the socket's total_retrans).
        let cc = s.cc.name(read(s.sk, conf!(sock.ca_ops)));
        if cc_passes(&cc) {
            announce(s, &cc);
        }
    }
    let before = s.flow.retrans_coalesced;
    let sent = records::retransmit(s.sk, &mut s.flow, ops.total_retrans, now_ns());
    if sent {
        s.retrans_records += 1;
    } else {
        s.retrans_coalesced_total += s.flow.retrans_coalesced.wrapping_sub(before);
    }
}

#[inline(always)]
fn on_state(ctx: &SockOpsContext, ops: &bpf_sock_ops, sk: *mut bpf_sock) {
    // SAFETY: `args` is the union member the kernel fills for this callback (old, new state).
    let (old, new) = unsafe { (ops.__bindgen_anon_1.args[0], ops.__bindgen_anon_1.args[1]) };
    let Some(s) = storage(sk, false) else {
        return;
    };
    s.flow.tcp_state = new as u8;
    if new == TCP_FIN_WAIT1 && s.flow.status == Status::Passed as u8 {
        // The application closed it: data that still arrives is reset (`aborts_on_data`).
        slow_path(ctx, ops.bpf_sock_ops_cb_flags);
    }
    if new != TCP_CLOSE || s.flow.status != Status::Passed as u8 {
        return;
    }
    // Nothing more for this socket, whatever follows.
    s.flow.status = Status::Closed as u8;
    if s.flow.announced == 0 && ops.data_segs_out == 0 && !has_flag(config_flags::RECEIVERS) {
        // Never sent data (a receive-only or idle socket): no record at all.
        count(counter::FLOWS_QUIET);
        return;
    }
    let Some(span) = Span::read(s.sk) else {
        count(counter::RING_FULL);
        return;
    };
    let cc = s.cc.name(records::ca_ops(&span));
    if s.flow.announced == 0 && !cc_passes(&cc) {
        // Never sampled, and its algorithm does not pass `--cc`.
        count(counter::FLOWS_FILTERED);
        return;
    }
    count_acks(s);
    // The values after the last ACK, which no RTT callback saw (see `track`).
    track(s, ops);
    s.flow.tcp_state = TCP_CLOSE as u8;
    let first = s.flow.announced == 0;
    let Some(mut entry) = EVENTS.reserve::<FlowClose>(0) else {
        count(counter::RING_FULL);
        return;
    };
    // SAFETY: a reserved, writable record of this type; every field is written below.
    let e = unsafe { &mut *entry.as_mut_ptr() };
    // The final sample (every counter as the socket closes; its header is the record's), then
    // what only the kernel accumulated, then the owner (read by userspace only when no OPEN
    // was sent: `FLAG_FIRST`).
    records::write_sample(&mut e.sample, kind::END, &span, &mut s.flow, &cc, now_ns());
    let end = &mut e.end;
    end.rtt_events = s.rtt_events - u64::from(s.slow_acks) - u64::from(s.sends);
    end.slow_path_acks = s.slow_acks;
    end.send_events = s.sends;
    end.old_state = old as u8;
    end.aborted_on_data = s.aborted_on_data;
    end._pad = [0; 2];
    end.sk_err = read_opt::<i32>(s.sk, conf!(sock.sk_err));
    end.srtt_first_us = s.srtt_first >> 3;
    end.srtt_min_us = if s.srtt_min == u32::MAX { 0 } else { s.srtt_min >> 3 };
    end.srtt_max_us = s.srtt_max >> 3;
    end.cwnd_max = s.cwnd_max;
    end.retrans_records = s.retrans_records;
    end.retrans_coalesced = s.retrans_coalesced_total;
    // Counting this one.
    end.samples = s.samples + 1;
    end.retrans_failed = s.retrans_failed;
    fill_owner(&mut e.owner, s, &cc);
    entry.submit(records::wake());
    if first {
        count(counter::OPENS);
    }
    count(counter::ENDS);
}

/// A field at an offset the running kernel may lack (`u32::MAX`): 0 then.
#[inline(always)]
fn read_opt<T: Copy + Default>(base: u64, off: u32) -> T {
    if off == u32::MAX { T::default() } else { read(base, off) }
}

/// The inode number of the socket's file (what `/proc/PID/fd` links name), 0 once the
/// application closed it. Socket inodes are 32-bit (`get_next_ino`).
#[inline(always)]
fn socket_ino(sk: u64) -> u32 {
    let sock: u64 = read_opt(sk, conf!(sock.sk_socket));
    if sock == 0 { 0 } else { read_opt::<u64>(sock, conf!(sock.socket_ino)) as u32 }
}

/// connect(): process context, so the owner is the current task.
#[inline(always)]
fn on_connect(ctx: &SockOpsContext, ops: &bpf_sock_ops, sk: *mut bpf_sock) {
    let Some(s) = storage(sk, true) else {
        count(counter::STORAGE_FAILED);
        warn!(ctx, "no socket storage at connect(): the connection is not observed");
        return;
    };
    reset(s, sk);
    s.active = 1;
    own(s);
    // Callbacks from now on: SYN retransmits and a refused or timed-out connect are seen too.
    // RTT callbacks wait for the filters (`on_established`).
    let _ = ctx.set_cb_flags((ops.bpf_sock_ops_cb_flags | CONNECT_CB_FLAGS) as i32);
}

/// listen(): remember the owner; accepted sockets inherit this storage (`BPF_F_CLONE`).
#[inline(always)]
fn on_listen(ctx: &SockOpsContext, sk: *mut bpf_sock) {
    let Some(s) = storage(sk, true) else {
        count(counter::STORAGE_FAILED);
        warn!(ctx, "no socket storage at listen(): its accepted connections have no owner");
        return;
    };
    reset(s, sk);
    s.listener = 1;
    own(s);
}

#[inline(always)]
fn on_established(ctx: &SockOpsContext, ops: &bpf_sock_ops, sk: *mut bpf_sock) {
    let Some(s) = storage(sk, true) else {
        count(counter::STORAGE_FAILED);
        warn!(ctx, "no socket storage at the handshake's end: the connection is not observed");
        return;
    };
    if s.listener != 0 || s.sk == 0 {
        // Accepted (storage cloned from the listener, or none): start the flow here, keeping
        // the listener's owner if it had one.
        let (comm, tgid, pid) = (s.comm, s.tgid, s.pid);
        reset(s, sk);
        (s.comm, s.tgid, s.pid) = (comm, tgid, pid);
    }
    s.flow.tcp_state = ops.state as u8;
    if conf!(experiment.flags) & experiment_flags::ON != 0 {
        assign_arm(ctx, ops, s);
    }
    s.retrans_at_open = ops.total_retrans;
    s.flow.last_total_retrans = ops.total_retrans;
    // The handshake's own sequence number: only data acked after this counts as sending.
    s.flow.last_bytes_acked = ops.bytes_acked;
    s.srtt_first = ops.srtt_us;
    // The first periodic sample one interval in: a response shorter than that is reported by
    // its close sample and summary alone (fewer records per short flow), and BBR has run by then.
    let now = sample_clock();
    s.next_sample_tick = now + conf!(sockops_period);
    admit(ctx, s);
    // A flow the filters rejected gets no per-ACK callbacks from here on (nothing would be done
    // in them). Flags are only ever added: another sock_ops program may have asked for the same.
    if s.flow.status == Status::Passed as u8 {
        let flags = ops.bpf_sock_ops_cb_flags | OUR_CB_FLAGS;
        let _ = ctx.set_cb_flags(flags as i32);
        if s.active == 0 && has_flag(config_flags::SOCKOPS_PID) {
            s.owner_pending = OWNER_TRIES;
        }
        send_callbacks(ctx, ops, s, flags, now);
    }
}

/// Destination ranges of the experiment's scope (`--dst`), IPv4 as IPv4-mapped IPv6.
#[map]
static EXP_DST: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(1024, 0);

/// Whether new connections get an arm now, and how (`assign_mode`): written by userspace while the
/// program runs.
#[map]
static EXP_ASSIGN: Array<u32> = Array::with_max_entries(1, 0);

/// Client groups sent back to their status quo by the guardrail (`hold`).
#[map]
static EXP_HOLD: Array<u32> = Array::with_max_entries(hold::ENTRIES, 0);

/// Client prefixes sent back to their status quo by the guardrail (a prefix-list group), IPv4
/// as IPv4-mapped IPv6; looked up only when the mask says some are (`hold::PREFIXES`).
#[map]
static EXP_HOLD_DST: LpmTrie<[u8; 16], u8> = LpmTrie::with_max_entries(hold::MAX_PREFIXES, 0);

/// Whether the connection's client group is held at its status quo: its handshake RTT (the
/// srtt at the established callback, in 1/8 µs) lies in a band the guardrail sent back, or its
/// peer `daddr` in a prefix it sent back.
#[inline(always)]
fn held(ops: &bpf_sock_ops, daddr: &[u8; 16]) -> bool {
    let mask = EXP_HOLD.get(hold::MASK).map_or(0, |m| *m);
    if mask == 0 {
        return false;
    }
    if mask & hold::PREFIXES != 0 && EXP_HOLD_DST.get(&Key::new(128, *daddr)).is_some() {
        return true;
    }
    let rtt_us = ops.srtt_us >> 3;
    let mut band = 0u32;
    if rtt_us != 0 {
        band = 1;
        for i in 0..hold::MAX_EDGES {
            let edge = EXP_HOLD.get(hold::EDGES + i).map_or(0, |e| *e);
            if edge != 0 && rtt_us >= edge {
                band = i + 2;
            }
        }
    }
    mask & (1 << band) != 0
}

/// `bbrscope experiment`: a connection in scope gets arm B with probability `split_pct`%, else
/// arm A (in a switchback's A or B block, that block's arm; client-clustered, its client's
/// hashed arm: `assign_mode`), and that arm's
/// algorithm, as it is established (the point where `apply --cgroup`'s program sets it too),
/// while userspace has assignment on (`EXP_ASSIGN`). Existing connections and the system default
/// are untouched.
#[inline(always)]
fn assign_arm(ctx: &SockOpsContext, ops: &bpf_sock_ops, s: &mut SockFlow) {
    let sk = s.sk;
    let t = sock::tuple(sk);
    // The service's port: the local end of an accepted connection (a client's connections to a
    // remote port 443 are not this host's to experiment on — the sender that matters is the
    // server — and neither is an outgoing one whose ephemeral port happens to equal it).
    let port = conf!(experiment.port);
    if port != 0 && (t.sport != port || s.active != 0) {
        return;
    }
    let cgroup_id = conf!(experiment.cgroup_id);
    if cgroup_id != 0 && !flow::in_cgroup(sk, cgroup_id, conf!(experiment.cgroup_level)) {
        return;
    }
    if conf!(experiment.flags) & experiment_flags::DST != 0 && EXP_DST.get(&Key::new(128, t.daddr)).is_none() {
        return;
    }
    let Some(&mode) = EXP_ASSIGN.get(0) else { return };
    if mode == assign_mode::OFF {
        return;
    }
    if held(ops, &t.daddr) {
        return;
    }
    // SAFETY: a helper without arguments.
    let (join, pick) = unsafe { (bpf_get_prandom_u32(), bpf_get_prandom_u32()) };
    // Whether the connection joins at all (`--sample`) is drawn in every mode; which arm, only
    // per connection (a switchback's A and B blocks give every connection the block's arm, the
    // client-clustered design every connection its client's).
    if join % 100 >= conf!(experiment.sample_pct) {
        return;
    }
    let b = match mode {
        assign_mode::PER_CONNECTION => pick % 100 < conf!(experiment.split_pct),
        assign_mode::FIXED_A => false,
        assign_mode::FIXED_B => true,
        // The remote address is the client's (an accepted connection's peer); IPv4 as
        // IPv4-mapped, as userspace hashes it.
        assign_mode::CLIENT => client_gets_b(&t.daddr, conf!(experiment.salt), conf!(experiment.split_pct)),
        _ => return,
    };
    let arm = usize::from(b);
    // The connection's status quo, before the arm replaces it: what the system, route or cgroup
    // gave it (the guardrail protects the connections an arm moved off it).
    let mut before = [0u8; CC_NAME_LEN];
    // SAFETY: a sock_ops context at an established callback, where the kernel allows reading
    // TCP_CONGESTION; `before` is a writable buffer of the length passed.
    let read_before = unsafe {
        bpf_getsockopt(
            ctx.ops.cast::<c_void>(),
            SOL_TCP,
            TCP_CONGESTION,
            before.as_mut_ptr().cast::<c_void>(),
            CC_NAME_LEN as i32,
        )
    } == 0;
    // The window first: setting the algorithm then initialises it (BBR takes its first pacing
    // rate from the window it finds).
    let mut iw: u32 = conf!(experiment.iw[arm]);
    if iw != 0 {
        // SAFETY: a sock_ops context at an established callback, before any data was sent
        // (where the kernel allows TCP_BPF_IW); `iw` is a readable u32 of the length passed.
        let err =
            unsafe { bpf_setsockopt(ctx.ops.cast::<c_void>(), SOL_TCP, TCP_BPF_IW, (&raw mut iw).cast::<c_void>(), 4) };
        if err != 0 {
            count(counter::ARM_FAILED);
            warn!(ctx, "experiment: arm {} refused (TCP_BPF_IW {}: error {})", arm, iw, err);
            return;
        }
    }
    let mut name: [u8; CC_NAME_LEN] = conf!(experiment.cc[arm]);
    // SAFETY: a sock_ops context at an established callback, where the kernel allows setting
    // TCP_CONGESTION; `name` is a readable NUL-padded buffer of the length passed.
    let err = unsafe {
        bpf_setsockopt(
            ctx.ops.cast::<c_void>(),
            SOL_TCP,
            TCP_CONGESTION,
            name.as_mut_ptr().cast::<c_void>(),
            CC_NAME_LEN as i32,
        )
    };
    if err == 0 {
        s.arm = arm as u8 + 1;
        s.status_quo =
            if read_before { status_quo::KNOWN | is_before(&before, 0) | is_before(&before, 1) << 1 } else { 0 };
    } else {
        count(counter::ARM_FAILED);
        warn!(
            ctx,
            "experiment: arm {} refused (TCP_CONGESTION: error {}); the connection keeps its algorithm", arm, err
        );
    }
}

/// 1 when arm `arm` gives the connection what it had (`before`): its algorithm, and no initial
/// window of its own.
#[inline(always)]
fn is_before(before: &[u8; CC_NAME_LEN], arm: usize) -> u8 {
    u8::from(conf!(experiment.iw[arm]) == 0 && same_cc(before, &conf!(experiment.cc[arm])))
}

/// The clock samples are paced by, in the units of `Config::sockops_period`: jiffies where
/// sock_ops programs may read them and userspace knows HZ (one load once JITed), else the coarse
/// clock (a helper call and a few loads), else the precise one (a helper call and a clock-source
/// read). Userspace names the one in use in `stats`.
#[inline(always)]
fn sample_clock() -> u64 {
    if has_flag(config_flags::SOCKOPS_JIFFIES) {
        jiffies()
    } else if has_flag(config_flags::SOCKOPS_COARSE_CLOCK) {
        coarse_ns()
    } else {
        now_ns()
    }
}

/// Starts the flow's state in fresh (or inherited) storage.
#[inline(always)]
fn reset(s: &mut SockFlow, sk: *mut bpf_sock) {
    // The pointer's value is stored as a number (allowed for CAP_PERFMON programs): later
    // callbacks read socket fields relative to it with bpf_probe_read_kernel.
    s.sk = sk as u64;
    s.start_ns = now_ns();
    s.flow.status = Status::Pending as u8;
    s.flow.announced = 0;
    s.flow.acks = 0;
    s.flow.event_records = 0;
    s.flow.retrans_coalesced = 0;
    s.flow.last_bytes_acked = 0;
    s.flow.next_sample_ns = 0;
    s.cc = CcCache::EMPTY;
    s.next_sample_tick = 0;
    s.round_due_tick = 0;
    s.rtt_events = 0;
    s.srtt_first = 0;
    s.slow_acks = 0;
    s.srtt_min = u32::MAX;
    s.srtt_max = 0;
    s.cwnd_max = 0;
    s.retrans_records = 0;
    s.retrans_coalesced_total = 0;
    s.samples = 0;
    s.retrans_at_open = 0;
    s.retrans_failed = 0;
    s.sends = 0;
    s.send_cb = 0;
    s.aborted_on_data = 0;
    s.owner_pending = 0;
    s.active = 0;
    s.listener = 0;
    s.arm = 0;
    s.status_quo = 0;
    s.comm = [0; 16];
    s.tgid = 0;
    s.pid = 0;
}

/// Records the current task as the owner (only called in process context), as far as this
/// kernel lets sock_ops programs see it.
#[inline(always)]
fn own(s: &mut SockFlow) {
    if has_flag(config_flags::SOCKOPS_PID) {
        let id = bpf_get_current_pid_tgid();
        s.tgid = (id >> 32) as u32;
        s.pid = id as u32;
    }
    if has_flag(config_flags::SOCKOPS_COMM) {
        s.comm = bpf_get_current_comm().unwrap_or_default();
    }
}

/// Filters; the flow's OPEN record waits for its first other record (`announce`).
#[inline(always)]
fn admit(ctx: &SockOpsContext, s: &mut SockFlow) {
    let sk = s.sk;
    count(counter::FLOWS_SEEN);
    let t = sock::tuple(sk);
    // SAFETY: a sock_ops context pointer, as the helper requires; the cookie is created on first
    // use and stable after.
    let cookie = unsafe { bpf_get_socket_cookie(ctx.ops.cast::<c_void>()) };
    s.flow.id = cookie;
    s.flow.t = t;
    s.flow.ca_state = sock::ca_state(sk);
    // `--cc` is checked at each record instead: applications may set the algorithm after
    // connect().
    if !flow::passes(sk, &s.flow.t) {
        s.flow.status = Status::Rejected as u8;
        count(counter::FLOWS_FILTERED);
        return;
    }
    s.flow.status = Status::Passed as u8;
    debug!(ctx, "watching flow: cookie {}", cookie);
}

/// Sends the flow's OPEN record unless userspace has had one of its records already: called
/// just before the flow's first record of another kind.
#[inline(always)]
fn announce(s: &mut SockFlow, cc: &[u8; CC_NAME_LEN]) {
    if s.flow.announced != 0 {
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<FlowOpen>(0) else {
        count(counter::RING_FULL);
        return;
    };
    // SAFETY: a reserved, writable record of this type; every field is written below.
    let o = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(&mut o.hdr, kind::OPEN, &s.flow, s.flow.ca_state, now_ns());
    fill_owner(&mut o.owner, s, cc);
    entry.submit(records::wake());
    s.flow.announced = 1;
    count(counter::OPENS);
}

#[inline(always)]
fn fill_owner(o: &mut Owner, s: &SockFlow, cc: &[u8; CC_NAME_LEN]) {
    o.cc = *cc;
    o.comm = s.comm;
    o.tgid = s.tgid;
    o.pid = s.pid;
    o.cgroup_id = flow::cgroup_id(s.sk);
    let net: u64 = read_opt(s.sk, conf!(sock.net));
    o.netns = if net == 0 { 0 } else { read_opt(net, conf!(sock.net_inum)) };
    o.active = s.active;
    o.arm = s.arm;
    o.status_quo = s.status_quo;
    o._pad = 0;
    o.start_ns = s.start_ns;
    o.retrans_at_open = s.retrans_at_open;
    o.sock_ino = if s.tgid == 0 { socket_ino(s.sk) } else { 0 };
}

/// The benchmark's programs for this path: the same callbacks enabled on the same sockets as
/// `bbrscope_sockops`, so that `cargo xtask bench` can report the real program's cost against
/// theirs, measured in the same run. The floor (`--observer floor-sockops`) does nothing in them.
#[sock_ops]
pub(crate) fn floor_sockops(ctx: SockOpsContext) -> u32 {
    bench_program(&ctx, false)
}

/// The benchmark's middle row (`--observer lookup-sockops`): what any observer that keeps state
/// per socket must do on each ACK, and nothing more — find the socket's storage, check that the
/// flow is watched, count the ACK. The real program's cost above this one's is what its own
/// per-ACK work (srtt and cwnd extremes, the sample clock) and its samples add.
#[sock_ops]
pub(crate) fn lookup_sockops(ctx: SockOpsContext) -> u32 {
    bench_program(&ctx, true)
}

#[inline(always)]
fn bench_program(ctx: &SockOpsContext, lookup: bool) -> u32 {
    // SAFETY: as in `bbrscope_sockops`.
    let ops = unsafe { &*ctx.ops };
    // SAFETY: as in `bbrscope_sockops`.
    let sk = unsafe { ops.__bindgen_anon_2.sk };
    let op = ops.op;
    if op == BPF_SOCK_OPS_RTT_CB || op == BPF_SOCK_OPS_PARSE_HDR_OPT_CB {
        if lookup
            && !sk.is_null()
            && let Some(s) = storage(sk, false)
            && s.flow.status == Status::Passed as u8
        {
            s.flow.acks = s.flow.acks.wrapping_add(1);
        }
    } else if op == BPF_SOCK_OPS_TCP_CONNECT_CB {
        let _ = ctx.set_cb_flags((ops.bpf_sock_ops_cb_flags | CONNECT_CB_FLAGS) as i32);
    } else if op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        if lookup
            && !sk.is_null()
            && let Some(s) = storage(sk, true)
        {
            s.flow.status = Status::Passed as u8;
        }
        let _ = ctx.set_cb_flags((ops.bpf_sock_ops_cb_flags | OUR_CB_FLAGS) as i32);
    }
    1
}

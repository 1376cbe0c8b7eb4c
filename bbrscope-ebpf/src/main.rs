//! bbrscope's kernel programs: raw tracepoints on the TCP stack that keep per-flow state in a map
//! and ship bounded samples and discrete events through one ring buffer.
//!
//! Raw tracepoints rather than the classic ones: they receive the tracepoint's C arguments (the
//! socket pointer first) on every kernel since 4.17, and the kernel skips formatting a trace
//! record, which matters on tcp_probe (it fires for every incoming segment).
#![no_std]
#![no_main]
// `flow::xadd` adds to counters with `BPF_XADD`. The BPF target has no compare-and-swap,
// so core's atomic types offer it no read-modify-write method; the intrinsic is the same
// operation (LLVM's `atomicrmw add`), and with its result unused it compiles to XADD.
#![feature(core_intrinsics)]
#![allow(internal_features, reason = "core_intrinsics, for the atomic add above")]

mod clock;
mod config;
mod flow;
mod records;
mod sock;
mod sockops;
mod span;

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use bbrscope_common::{config_flags, counter, kind};
// The panic handler and the license.
use bbrscope_ebpf as _;

use crate::{
    clock::now_ns,
    config::{conf, has_flag},
    flow::{Status, count},
};

const TCP_ESTABLISHED: i32 = 1;
const TCP_CLOSE: i32 = 7;

/// Every incoming segment on an established socket. The hot path: one map lookup, and a clock
/// read only for flows being watched; the socket is read only when the flow's sample is due.
#[raw_tracepoint(tracepoint = "tcp_probe")]
pub(crate) fn tcp_probe(ctx: RawTracePointContext) -> i32 {
    flow::count_per_segment(counter::PROBE_EVENTS);
    let sk: u64 = ctx.arg(0);
    let Some(st) = flow::get(sk) else {
        // A new flow's first event only sets its baseline; the next one can sample.
        flow::create(sk);
        return 0;
    };
    if st.status == Status::Rejected as u8 {
        return 0;
    }
    st.acks = st.acks.wrapping_add(1);
    let now = now_ns();
    if has_flag(config_flags::POLL_CA_STATE) {
        let state = sock::ca_state(sk);
        if state != st.ca_state {
            records::cong_state(sk, st, state, now);
        }
    }
    if now < st.next_sample_ns {
        return 0;
    }
    st.next_sample_ns = now + config::interval_ns();
    records::sample(kind::SAMPLE, sk, st, now);
    0
}

/// `tcp_retransmit_skb(sk, skb[, err])`: one record per retransmission, capped per interval.
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub(crate) fn tcp_retransmit_skb(ctx: RawTracePointContext) -> i32 {
    // Since 2025 the tracepoint also fires for failed attempts, which never reached the wire.
    if has_flag(config_flags::RETRANS_HAS_ERR) && ctx.arg::<i32>(2) != 0 {
        return 0;
    }
    let sk: u64 = ctx.arg(0);
    let Some(st) = flow::get(sk) else {
        return 0;
    };
    let total: u32 = sock::read(sk, conf!(sock.total_retrans));
    records::retransmit(sk, st, total, now_ns());
    0
}

/// `tcp_cong_state_set(sk, ca_state)` (6.2, and backported to Debian 12's 6.1; found from BTF): fires
/// before the socket's state is updated.
#[raw_tracepoint(tracepoint = "tcp_cong_state_set")]
pub(crate) fn tcp_cong_state_set(ctx: RawTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    let state = ctx.arg::<u64>(1) as u8;
    let Some(st) = flow::get(sk) else {
        return 0;
    };
    if state != st.ca_state {
        records::cong_state(sk, st, state, now_ns());
    }
    0
}

/// `tcp_cong_state_set(sk, ca_state)` on the sock_ops path: the flow's state lives in socket
/// storage, which raw tracepoints cannot reach, so the change goes out keyed by the socket cookie
/// (set when bbrscope's sock_ops program saw the socket open). State changes are rare (loss,
/// recovery), so this costs nothing per ACK.
#[raw_tracepoint(tracepoint = "tcp_cong_state_set")]
pub(crate) fn cong_state_by_cookie(ctx: RawTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    let new = ctx.arg::<u64>(1) as u8;
    let off = conf!(sock.cookie);
    let cookie: u64 = if off == u32::MAX { 0 } else { sock::read(sk, off) };
    // No cookie: never seen by the sock_ops program. Nothing acked beyond the SYN: a socket that
    // has not sent (its changes would only be dropped by userspace).
    if cookie == 0 || !has_flag(config_flags::RECEIVERS) && sock::read::<u64>(sk, conf!(sock.bytes_acked)) <= 1 {
        count(counter::CONG_UNTRACKED);
        return 0;
    }
    let old = sock::ca_state(sk);
    if old != new {
        records::cong_state_by_cookie(sk, cookie, old, new, now_ns());
    }
    0
}

/// `inet_sock_set_state(sk, oldstate, newstate)`: final sample at close, and forgetting stale
/// state when a socket address is reused for a new connection.
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub(crate) fn inet_sock_set_state(ctx: RawTracePointContext) -> i32 {
    let sk: u64 = ctx.arg(0);
    let new_state = ctx.arg::<u64>(2) as i32;
    if new_state == TCP_ESTABLISHED {
        flow::forget(sk);
    } else if new_state == TCP_CLOSE
        && let Some(st) = flow::get(sk)
    {
        if st.announced != 0 {
            records::sample(kind::CLOSE, sk, st, now_ns());
            count(counter::CLOSES);
        }
        flow::forget(sk);
    }
    0
}

/// The benchmark's floor for the tracepoint path: attached to tcp_probe, does nothing.
#[raw_tracepoint(tracepoint = "tcp_probe")]
pub(crate) fn floor_tcp_probe(_ctx: RawTracePointContext) -> i32 {
    0
}

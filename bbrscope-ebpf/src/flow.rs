//! Per-flow state kept in the kernel, keyed by socket address (which never leaves the kernel),
//! and the in-kernel filters, evaluated once when a flow is first seen.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_get_smp_processor_id,
    macros::map,
    maps::{LruHashMap, PerCpuArray},
};
use core::intrinsics::{AtomicOrdering::Relaxed, atomic_xadd};

use bbrscope_common::{CC_NAME_LEN, config_flags, counter, filter_flags};

use crate::{
    clock::now_ns,
    config::{conf, has_flag},
    sock::{self, Tuple, read},
};

#[repr(u8)]
pub(crate) enum Status {
    Passed = 1,
    Rejected = 2,
    /// sock_ops path: connect() or listen() seen, filters not yet applied.
    Pending = 3,
    /// sock_ops path: the summary was sent; nothing more for this socket.
    Closed = 4,
}

/// `status` and `acks` first: the fields every ACK touches.
#[repr(C)]
pub(crate) struct FlowState {
    pub status: u8,
    /// Userspace has had a record for this flow (it knows the flow exists).
    pub announced: u8,
    pub ca_state: u8,
    /// The TCP state as last seen (sock_ops path; 0 on the tracepoint path).
    pub tcp_state: u8,
    pub acks: u32,
    pub id: u64,
    pub next_sample_ns: u64,
    /// `bytes_acked` at the previous sample: a flow whose peer acked nothing new since is not
    /// sending, and gets no sample unless receivers were asked for.
    pub last_bytes_acked: u64,
    pub t: Tuple,
    pub last_total_retrans: u32,
    pub event_records: u32,
    pub retrans_coalesced: u32,
}

/// Capacity is set by userspace (`--max-flows`); LRU so that a full table evicts the flows idle
/// longest instead of refusing new ones.
#[map]
static FLOWS: LruHashMap<u64, FlowState> = LruHashMap::with_max_entries(65536, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::COUNT, 0);

/// Per-CPU sequences for flow ids, one per slot a program can [`claim`] (programs interleave on
/// a CPU): an id is the sequence, the slot and the CPU number, so ids are unique.
#[repr(C)]
struct Ids {
    users: [u64; ID_SLOTS],
    seq: [u64; ID_SLOTS],
}

const ID_SLOTS: usize = 4;

#[map]
static NEXT_ID: PerCpuArray<Ids> = PerCpuArray::with_max_entries(1, 0);

/// Adds `n` (wrapping: `u64::MAX` takes one away) to a per-CPU value with one instruction.
/// Programs on one CPU interleave: a process-context callback (the socket backlog, `close()`)
/// is interrupted by the softirq's callback for another socket, and on a preemptible kernel
/// preempted by another task's, so a load-add-store could lose the other's update. The result
/// is not used, so this compiles to `BPF_XADD`, which every kernel's verifier accepts (a
/// fetching atomic needs 5.12).
///
/// # Safety
/// `p` points into this CPU's value of a map, 8-byte aligned.
#[inline(always)]
pub(crate) unsafe fn xadd(p: *mut u64, n: u64) {
    // SAFETY: the caller's.
    unsafe { atomic_xadd::<u64, u64, { Relaxed }>(p, n) };
}

/// Takes one of `N` per-CPU slots for this program alone, given their counts of programs that
/// want them: adds itself to a slot's count and keeps the slot only if the count is then 1,
/// else takes itself off and tries the next. Of two programs that add themselves to one slot,
/// whichever adds second sees 2, in whatever order they run (interrupted or preempted), so a
/// slot never has two holders. `None` when every slot is held. Give it back with [`release`].
///
/// # Safety
/// `counts` is this CPU's value of a map.
#[inline(always)]
pub(crate) unsafe fn claim<const N: usize>(counts: *mut [u64; N]) -> Option<usize> {
    let mut slot = 0;
    while slot < N {
        // SAFETY: the caller's; `slot < N`.
        unsafe {
            let c = counts.cast::<u64>().add(slot);
            xadd(c, 1);
            // A plain load (BPF has no atomic one before v4): it reads the location the add
            // wrote, so it cannot be moved above it, and all of this runs on one CPU.
            if c.read_volatile() == 1 {
                return Some(slot);
            }
            xadd(c, u64::MAX);
        }
        slot += 1;
    }
    None
}

/// Gives back a slot [`claim`] returned.
///
/// # Safety
/// `count` is the count of a slot this program claimed, on the same CPU.
#[inline(always)]
pub(crate) unsafe fn release(count: *mut u64) {
    // SAFETY: the caller's.
    unsafe { xadd(count, u64::MAX) };
}

/// A plain load, add and store, for the one counter bumped on every incoming segment of every
/// socket (tcp_probe's `PROBE_EVENTS`), where a locked add would be paid per segment: a program
/// that interrupts those three instructions costs one count of an informational rate
/// (`stats.events_per_s`), never a drop or a record count.
#[inline(always)]
pub(crate) fn count_per_segment(index: u32) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a valid slot of this CPU's counters; a lost increment is accepted (above).
        unsafe { *c += 1 };
    }
}

#[inline(always)]
pub(crate) fn count(index: u32) {
    add(index, 1);
}

#[inline(always)]
pub(crate) fn add(index: u32, n: u64) {
    if let Some(c) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a valid slot of this CPU's counters.
        unsafe { xadd(c, n) };
    }
}

#[inline(always)]
pub(crate) fn get(sk: u64) -> Option<&'static mut FlowState> {
    // SAFETY: the map returned a valid pointer to this flow's value; it stays valid for the
    // program's run (LRU eviction frees entries only after an RCU grace period).
    FLOWS.get_ptr_mut(&sk).map(|p| unsafe { &mut *p })
}

#[inline(always)]
pub(crate) fn forget(sk: u64) {
    if FLOWS.remove(&sk).is_ok() {
        count(counter::FLOWS_FORGOTTEN);
    }
}

/// Starts tracking `sk` (unless it only receives, or a filter rejects it: then it is tracked as
/// rejected so later events cost one lookup).
#[inline(never)]
pub(crate) fn create(sk: u64) {
    // Until the peer has acked data (beyond the SYN), a socket is only receiving: unless asked
    // for receivers, it takes no slot in the table, so a server's receiving sockets cannot
    // crowd out its senders.
    if !has_flag(config_flags::RECEIVERS) && read::<u64>(sk, conf!(sock.bytes_acked)) <= 1 {
        return;
    }
    count(counter::FLOWS_SEEN);
    let mut st = FlowState {
        id: next_id(),
        // Not this event (bytes_acked is the baseline just read) but the next one samples.
        next_sample_ns: now_ns() + 1,
        last_bytes_acked: read(sk, conf!(sock.bytes_acked)),
        t: sock::tuple(sk),
        ca_state: sock::ca_state(sk),
        status: Status::Passed as u8,
        announced: 0,
        tcp_state: 0,
        acks: 0,
        last_total_retrans: read(sk, conf!(sock.total_retrans)),
        event_records: 0,
        retrans_coalesced: 0,
    };
    // The filters read the tuple in place: a second copy of it would not fit the 512-byte stack
    // that 5.10 and 6.1 allow the call chain (tcp_probe -> create).
    if !passes(sk, &st.t) {
        st.status = Status::Rejected as u8;
        count(counter::FLOWS_FILTERED);
    }
    if FLOWS.insert(&sk, &st, u64::from(BPF_NOEXIST)).is_err() {
        count(counter::STATE_FULL);
    }
}

#[inline(always)]
fn next_id() -> u64 {
    // SAFETY: a helper without arguments.
    let cpu = u64::from(unsafe { bpf_get_smp_processor_id() });
    let Some(ids) = NEXT_ID.get_ptr_mut(0) else { return 0 };
    // SAFETY: this CPU's value of the map; the sequence of a claimed slot is this program's
    // alone until it is released (a program interrupted between reading and writing a shared
    // sequence would hand out the interrupting one's id again).
    unsafe {
        let Some(slot) = claim(&raw mut (*ids).users) else { return 0 };
        let seq = (&raw mut (*ids).seq).cast::<u64>().add(slot);
        *seq += 1;
        let id = (*seq << 14) | ((slot as u64) << 12) | (cpu & 0xfff);
        release((&raw mut (*ids).users).cast::<u64>().add(slot));
        id
    }
}

#[inline(always)]
pub(crate) fn passes(sk: u64, t: &Tuple) -> bool {
    let flags = conf!(filter.flags);
    if flags & filter_flags::PORT != 0 {
        let port = conf!(filter.port);
        if t.sport != port && t.dport != port {
            return false;
        }
    }
    if flags & filter_flags::ADDR != 0 && !in_net(&t.saddr) && !in_net(&t.daddr) {
        return false;
    }
    if flags & filter_flags::CGROUP != 0 && !in_cgroup(sk, conf!(filter.cgroup_id), conf!(filter.cgroup_level)) {
        return false;
    }
    true
}

#[inline(always)]
fn in_net(addr: &[u8; 16]) -> bool {
    let net = conf!(filter.net);
    let mask = conf!(filter.mask);
    let mut i = 0;
    while i < 16 {
        if addr[i] & mask[i] != net[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether the socket's cgroup (v2, recorded at socket creation, so this holds in softirq
/// context where `current` is unrelated) is cgroup `want_id` (at `want_level`) or below it.
#[inline(always)]
pub(crate) fn in_cgroup(sk: u64, want_id: u64, want_level: u32) -> bool {
    let cgrp: u64 = read(sk, conf!(sock.cgroup));
    if cgrp == 0 {
        return false;
    }
    let level: i32 = read(cgrp, conf!(sock.cgroup_level));
    if level < want_level as i32 {
        return false;
    }
    let slot = conf!(sock.cgroup_ancestors) + 8 * want_level;
    let id: u64 = if has_flag(config_flags::CGROUP_ANCESTOR_PTRS) {
        let ancestor: u64 = read(cgrp, slot);
        let kn: u64 = read(ancestor, conf!(sock.cgroup_kn));
        read(kn, conf!(sock.kernfs_id))
    } else {
        read(cgrp, slot)
    };
    id == want_id
}

/// The cgroup v2 id of the socket's cgroup (0 where the kernel does not record it, before 5.15).
#[inline(always)]
pub(crate) fn cgroup_id(sk: u64) -> u64 {
    if conf!(sock.cgroup) == u32::MAX {
        return 0;
    }
    let cgrp: u64 = read(sk, conf!(sock.cgroup));
    if cgrp == 0 {
        return 0;
    }
    let kn: u64 = read(cgrp, conf!(sock.cgroup_kn));
    if kn == 0 { 0 } else { read(kn, conf!(sock.kernfs_id)) }
}

/// Whether the flow's current algorithm passes the `--cc` filter (it can change mid-flow).
#[inline(always)]
pub(crate) fn cc_passes(cc: &[u8; CC_NAME_LEN]) -> bool {
    if conf!(filter.flags) & filter_flags::CC == 0 {
        return true;
    }
    same_cc(cc, &conf!(filter.cc))
}

/// Whether two NUL-padded algorithm names are the same.
#[inline(always)]
pub(crate) fn same_cc(a: &[u8; CC_NAME_LEN], b: &[u8; CC_NAME_LEN]) -> bool {
    let mut i = 0;
    while i < CC_NAME_LEN {
        if a[i] != b[i] {
            return false;
        }
        if a[i] == 0 {
            break;
        }
        i += 1;
    }
    true
}

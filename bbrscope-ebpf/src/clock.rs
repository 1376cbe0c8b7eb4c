//! The kernel clocks the programs read, behind safe calls.

use aya_ebpf::helpers::{
    bpf_ktime_get_ns,
    generated::{bpf_jiffies64, bpf_ktime_get_coarse_ns},
};

/// CLOCK_MONOTONIC, ns: the timestamp of every record.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: a helper without arguments; it only reads the clock.
    unsafe { bpf_ktime_get_ns() }
}

/// CLOCK_MONOTONIC_COARSE, ns (one tick's precision, a few loads instead of a clock-source read).
/// Not allowed in tracing programs; the sock_ops path paces samples by it where `jiffies` cannot.
#[inline(always)]
pub(crate) fn coarse_ns() -> u64 {
    // SAFETY: a helper without arguments; it only reads the clock.
    unsafe { bpf_ktime_get_coarse_ns() }
}

/// The kernel's tick counter: the same precision as the coarse clock, but on 64-bit JITs the
/// verifier replaces the call by one load of `jiffies_64`, so no helper call on the per-ACK path.
#[inline(always)]
pub(crate) fn jiffies() -> u64 {
    // SAFETY: a helper without arguments; it only reads the tick counter.
    unsafe { bpf_jiffies64() }
}

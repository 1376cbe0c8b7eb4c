//! The kernel clocks the programs read, behind safe calls.

use aya_ebpf::helpers::{bpf_ktime_get_ns, generated::bpf_ktime_get_coarse_ns};

/// CLOCK_MONOTONIC, ns: the timestamp of every record.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a helper without arguments; it only reads the clock.
    unsafe { bpf_ktime_get_ns() }
}

/// CLOCK_MONOTONIC_COARSE, ns (one tick's precision, a few loads instead of a clock-source read):
/// enough to pace samples 100 ms apart. Not allowed in tracing programs; the sock_ops path uses it.
#[inline(always)]
pub fn coarse_ns() -> u64 {
    // SAFETY: a helper without arguments; it only reads the clock.
    unsafe { bpf_ktime_get_coarse_ns() }
}

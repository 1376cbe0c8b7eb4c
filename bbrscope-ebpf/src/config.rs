//! The read-only configuration userspace writes before loading (offsets from BTF, filters).
//!
//! Every access goes through a volatile read of the one field needed: the compiler must not fold
//! the zeroed initializer, and copying the whole struct would overflow the 512-byte BPF stack.

use bbrscope_common::Config;

#[unsafe(no_mangle)]
pub(crate) static CONFIG: Config = Config::zeroed();

/// Reads one field (path) of the global config.
macro_rules! conf {
    ($($field:tt)+) => {
        $crate::config::load(&raw const $crate::config::CONFIG.$($field)+)
    };
}
pub(crate) use conf;

#[inline(always)]
pub(crate) fn load<T>(field: *const T) -> T {
    // SAFETY: `field` points into the CONFIG global, which lives for the program's lifetime.
    unsafe { core::ptr::read_volatile(field) }
}

#[inline(always)]
pub(crate) fn has_flag(flag: u32) -> bool {
    conf!(flags) & flag != 0
}

#[inline(always)]
pub(crate) fn interval_ns() -> u64 {
    conf!(interval_ns)
}

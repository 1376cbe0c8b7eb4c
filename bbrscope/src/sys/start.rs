//! Process start-up: what must be set or seen before `main` runs.

use std::{
    os::fd::BorrowedFd,
    sync::atomic::{AtomicBool, Ordering},
};

/// Whether standard output was closed when the process started (`bbrscope status >&-`).
/// Rust's runtime reopens closed standard descriptors on /dev/null before `main`, after which
/// every write would succeed unseen, so this is noted earlier, by a constructor.
static STDOUT_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// Whether standard output was closed before the Rust runtime started.
pub fn stdout_closed_at_start() -> bool {
    // Names the constructor's entry, so that the object holding it is linked whatever the
    // codegen units (an archive's object is linked only when something in it is used).
    std::hint::black_box(&NOTE_CLOSED_STDOUT);
    STDOUT_CLOSED_AT_START.load(Ordering::Relaxed)
}

extern "C" fn note_closed_stdout() {
    // SAFETY: descriptor 1 is only queried (fcntl F_GETFD), never read, written or closed, and
    // the borrow ends with the call.
    let stdout = unsafe { BorrowedFd::borrow_raw(1) };
    STDOUT_CLOSED_AT_START.store(rustix::io::fcntl_getfd(stdout).is_err(), Ordering::Relaxed);
}

// SAFETY: the constructor runs before main, single-threaded, and touches only an atomic and a
// descriptor query; the libc calls .init_array entries before the Rust runtime's own start-up.
// `#[used]` keeps it in the library's object, which the binary links (it calls into this module).
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// mimalloc as a long-running, mostly idle observer on a small server wants it (the shipped,
/// static binary's allocator, set in main.rs): freed memory goes back to the kernel at once, and
/// its arenas are committed as used, not up front. With its defaults (a second's delay, eager
/// commit) `stream` held 77 MB resident where the glibc build holds 31 (measured: README,
/// "Install"); with these, 17 MB. The option numbers are those of the mimalloc the sys crate
/// bundles (v3's `mi_option_e`); each is set only while it holds its documented default, so a
/// renumbered option, or one the administrator set with its `MIMALLOC_*` environment variable,
/// is left alone.
#[cfg(target_env = "musl")]
pub fn allocator_settings() {
    const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    for (option, default, want) in [(ARENA_EAGER_COMMIT, 2, 0), (PURGE_DELAY, 1000, 0)] {
        // SAFETY: mi_option_get and mi_option_set read and store one number in mimalloc's option
        // table; any option number is accepted (out of range is ignored).
        unsafe {
            if libmimalloc_sys::mi_option_get(option) == default {
                libmimalloc_sys::mi_option_set(option, want);
            }
        }
    }
}

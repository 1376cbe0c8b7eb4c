//! Waiting for heavy neighbours: QEMU guests (`cargo xtask kernels` boots kernels under TCG, which
//! takes whole CPUs) would make every number here a measurement of them. Other load is measured
//! and reported instead (others' CPU).

use std::{
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

/// `--while-qemu`: measure without waiting for QEMU guests (the report counts the runs they
/// overlapped).
static DONT_WAIT: AtomicBool = AtomicBool::new(false);

pub(super) fn dont_wait() {
    DONT_WAIT.store(true, Ordering::Relaxed);
}

/// Whether runs that QEMU overlapped are measured again.
pub(super) fn waits() -> bool {
    !DONT_WAIT.load(Ordering::Relaxed)
}

/// Longer than this, and the benchmark measures anyway (the report says how long it waited and
/// whether QEMU was still running).
const MAX_WAIT: Duration = Duration::from_mins(20);

/// Whether a QEMU system emulator runs on this machine.
pub(super) fn qemu_running() -> bool {
    Command::new("pgrep").args(["-f", "qemu-system"]).output().is_ok_and(|o| o.status.success())
}

/// No QEMU for this long before measuring: a kernel matrix boots one guest after another.
const QUIET_FOR: Duration = Duration::from_secs(10);

/// Polls until no QEMU has run for [`QUIET_FOR`] (at most [`MAX_WAIT`]); returns the time waited.
pub(super) fn wait_for_quiet() -> Duration {
    let start = Instant::now();
    if !waits() {
        return Duration::ZERO;
    }
    let mut quiet_since: Option<Instant> = None;
    let mut said = false;
    while start.elapsed() < MAX_WAIT {
        if qemu_running() {
            quiet_since = None;
            if !said {
                crate::progress!("bench: QEMU is running on this machine: waiting for it to finish before measuring");
                said = true;
            }
        } else if !said || quiet_since.get_or_insert_with(Instant::now).elapsed() >= QUIET_FOR {
            break;
        }
        thread::sleep(Duration::from_secs(1));
    }
    start.elapsed()
}

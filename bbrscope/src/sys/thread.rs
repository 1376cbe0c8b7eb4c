//! Settings of the calling thread that rustix does not cover.

use std::io;

/// Puts the calling thread under SCHED_FIFO at `priority` (1–99; above every normal thread).
/// Fails without CAP_SYS_NICE.
pub(crate) fn realtime(priority: i32) -> io::Result<()> {
    // musl's `sched_param` has more members than glibc's (the sporadic server's, unused by
    // SCHED_FIFO): all of them zero but the priority.
    // SAFETY: a plain C struct of integers and timespecs, for which all-zero bytes are valid.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = priority;
    // SAFETY: reads `param`, which outlives the call; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

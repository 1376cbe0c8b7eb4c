//! Settings of the calling thread: its scheduling class, which rustix does not cover, and its
//! network namespace, which rustix covers only as an unsafe call.

use std::io;

use rustix::thread::UnshareFlags;

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

/// Moves the calling thread into a new, empty network namespace (only `lo`, down), leaving the
/// rest of the process where it is. The namespace lives while something holds it: the thread, or
/// a descriptor of /proc/thread-self/ns/net opened before the thread ends.
pub(crate) fn unshare_netns() -> io::Result<()> {
    // SAFETY: rustix marks unshare unsafe for CLONE_FILES (descriptors seen by other threads
    // could vanish from this one's table); only CLONE_NEWNET is passed.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) }.map_err(io::Error::from)
}

//! Holding Ctrl-C (and SIGTERM, SIGHUP) off while `apply` or `revert` changes the machine and
//! records what it changed, so an interruption lands before the first change or after the record
//! matches the machine, never in between (a temporary file left behind, a record of a change
//! that was never made).
//!
//! A handler only notes the signal; when the section ends, the previous dispositions come back
//! and a noted signal is raised again, so the process still ends the way the signal asks (and
//! the shell sees it). A handler, unlike a blocked signal mask, also covers threads that already
//! exist.

use std::sync::atomic::{AtomicI32, Ordering};

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The signal that arrived during a section, 0 for none.
static NOTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    NOTED.store(sig, Ordering::SeqCst);
}

/// A section with termination signals held off, until [`Deferred::end`] or drop.
pub(crate) struct Deferred {
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

/// Starts holding the signals off.
pub(crate) fn defer() -> Deferred {
    NOTED.store(0, Ordering::SeqCst);
    let mut previous = Vec::new();
    for sig in SIGNALS {
        // SAFETY: sigaction structs are plain C data, valid when zeroed; the handler only stores
        // to an atomic (async-signal-safe); SA_RESTART lets interrupted system calls carry on.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = note as extern "C" fn(libc::c_int) as libc::sighandler_t;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&raw mut act.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &raw const act, &raw mut old) == 0 {
                previous.push((sig, old));
            }
        }
    }
    Deferred { previous }
}

impl Deferred {
    /// Whether a termination signal arrived so far.
    pub(crate) fn interrupted(&self) -> bool {
        NOTED.load(Ordering::SeqCst) != 0
    }

    /// Ends the section. If a signal arrived meanwhile, says on stderr what state the run left
    /// (`left`), then lets the signal end the process.
    pub(crate) fn end(self, left: &str) {
        if self.interrupted() {
            crate::output::errln!("bbrscope: interrupted: {left}");
        }
        drop(self);
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        for (sig, old) in self.previous.drain(..) {
            // SAFETY: restores a disposition sigaction returned for this signal.
            unsafe { libc::sigaction(sig, &raw const old, std::ptr::null_mut()) };
        }
        let sig = NOTED.swap(0, Ordering::SeqCst);
        if sig != 0 {
            // SAFETY: raise has no memory-safety preconditions; with the previous disposition
            // back (normally the default) the signal ends the process as it would have.
            unsafe { libc::raise(sig) };
        }
    }
}

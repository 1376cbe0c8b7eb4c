//! Converting the kernel's CLOCK_MONOTONIC timestamps to wall-clock time.

fn now(clock: libc::clockid_t) -> i128 {
    // SAFETY: timespec is plain C data, valid when zeroed.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes only the timespec passed, which outlives the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, read once: later NTP steps do not reorder events.
    offset_ns: i128,
}

impl Clock {
    pub fn new() -> Self {
        Clock { offset_ns: now(libc::CLOCK_REALTIME) - now(libc::CLOCK_MONOTONIC) }
    }

    /// A fixed offset, for replaying recordings and for tests.
    pub fn with_offset(offset_ns: i128) -> Self {
        Clock { offset_ns }
    }

    pub fn monotonic_ns() -> u64 {
        now(libc::CLOCK_MONOTONIC) as u64
    }

    /// Unix time in seconds.
    pub fn unix_secs(&self, mono_ns: u64) -> f64 {
        (mono_ns as i128 + self.offset_ns) as f64 / 1e9
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
